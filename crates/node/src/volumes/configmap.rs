//! configMap volumes (upstream `volume/configmap`): fetch the ConfigMap through
//! [`PodObjects`] and turn its `data` and `binaryData` into an atomic-writer payload — every key
//! as a file, or only the `items` key→path mappings with their per-item modes. `optional` turns
//! a missing object into an empty volume and a missing key into a skipped file. Receives the
//! pod's namespace and the volume source; emits the payload (the manager writes it).

use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapVolumeSource, KeyToPath};

use crate::objects::PodObjects;

use super::atomic_writer::FileProjection;
use super::payload::{DEFAULT_MODE, Payload, SourceError, file_mode, found_or_empty};

/// The ConfigMap `namespace/name`; an empty one when it does not exist and `optional` is set.
/// Lookup failures other than "not found" are errors even when optional, as upstream.
pub async fn get(
    objects: &dyn PodObjects,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<ConfigMap, SourceError> {
    let found = objects.config_map(namespace, name).await?;
    found_or_empty(found, "configmap", namespace, name, optional)
}

/// Upstream `configmap.MakePayload`: without `items` every key of `data` and `binaryData`
/// becomes a file with `default_mode`; with `items` only the listed keys (string data first,
/// then binary), each at its `path` with its own `mode` or `default_mode`.
pub fn make_payload(
    items: &[KeyToPath],
    cm: &ConfigMap,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, SourceError> {
    let data = cm.data.as_ref();
    let binary = cm.binary_data.as_ref();
    let mut payload = Payload::new();
    if items.is_empty() {
        let mode = file_mode(default_mode);
        for (k, v) in data.into_iter().flatten() {
            payload.insert(k.clone(), file(v.as_bytes().to_vec(), mode));
        }
        for (k, v) in binary.into_iter().flatten() {
            payload.insert(k.clone(), file(v.0.clone(), mode));
        }
        return Ok(payload);
    }
    for item in items {
        let content = match (
            data.and_then(|d| d.get(&item.key)),
            binary.and_then(|b| b.get(&item.key)),
        ) {
            (Some(s), _) => s.as_bytes().to_vec(),
            (None, Some(b)) => b.0.clone(),
            (None, None) if optional => continue,
            (None, None) => return Err(SourceError::MissingConfigMapKey(item.key.clone())),
        };
        let mode = file_mode(item.mode.unwrap_or(default_mode));
        payload.insert(item.path.clone(), file(content, mode));
    }
    Ok(payload)
}

/// The files of a configMap volume of a pod in `namespace`.
pub async fn volume_payload(
    objects: &dyn PodObjects,
    namespace: &str,
    source: &ConfigMapVolumeSource,
) -> Result<Payload, SourceError> {
    let optional = source.optional.unwrap_or(false);
    let cm = get(objects, namespace, &source.name, optional).await?;
    make_payload(
        source.items.as_deref().unwrap_or_default(),
        &cm,
        source.default_mode.unwrap_or(DEFAULT_MODE),
        optional,
    )
}

fn file(data: Vec<u8>, mode: u32) -> FileProjection {
    FileProjection { data, mode }
}
