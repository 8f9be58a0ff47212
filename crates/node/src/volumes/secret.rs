//! secret volumes (upstream `volume/secret`): fetch the Secret through [`PodObjects`] and turn
//! its `data` (bytes) into an atomic-writer payload — every key as a file, or only the `items`
//! key→path mappings with their per-item modes. `optional` turns a missing object into an empty
//! volume and a missing key into a skipped file. Receives the pod's namespace and the volume
//! source; emits the payload (the manager writes it onto a tmpfs).

use k8s_openapi::api::core::v1::{KeyToPath, Secret, SecretVolumeSource};

use crate::objects::PodObjects;

use super::atomic_writer::FileProjection;
use super::payload::{DEFAULT_MODE, Payload, SourceError, file_mode, found_or_empty};

/// The Secret `namespace/name`; an empty one when it does not exist and `optional` is set.
/// Lookup failures other than "not found" are errors even when optional, as upstream.
pub async fn get(
    objects: &dyn PodObjects,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<Secret, SourceError> {
    let found = objects.secret(namespace, name).await?;
    found_or_empty(found, "secret", namespace, name, optional)
}

/// Upstream `secret.MakePayload`: without `items` every key of `data` becomes a file with
/// `default_mode`; with `items` only the listed keys, each at its `path` with its own `mode` or
/// `default_mode`. (`stringData` is write-only; the API server folds it into `data`.)
pub fn make_payload(
    items: &[KeyToPath],
    secret: &Secret,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, SourceError> {
    let data = secret.data.as_ref();
    let mut payload = Payload::new();
    if items.is_empty() {
        let mode = file_mode(default_mode);
        for (k, v) in data.into_iter().flatten() {
            payload.insert(
                k.clone(),
                FileProjection {
                    data: v.0.clone(),
                    mode,
                },
            );
        }
        return Ok(payload);
    }
    for item in items {
        let Some(content) = data.and_then(|d| d.get(&item.key)) else {
            if optional {
                continue;
            }
            return Err(SourceError::MissingSecretKey(item.key.clone()));
        };
        payload.insert(
            item.path.clone(),
            FileProjection {
                data: content.0.clone(),
                mode: file_mode(item.mode.unwrap_or(default_mode)),
            },
        );
    }
    Ok(payload)
}

/// The files of a secret volume of a pod in `namespace`.
pub async fn volume_payload(
    objects: &dyn PodObjects,
    namespace: &str,
    source: &SecretVolumeSource,
) -> Result<Payload, SourceError> {
    let optional = source.optional.unwrap_or(false);
    let name = source.secret_name.as_deref().unwrap_or_default();
    let secret = get(objects, namespace, name, optional).await?;
    make_payload(
        source.items.as_deref().unwrap_or_default(),
        &secret,
        source.default_mode.unwrap_or(DEFAULT_MODE),
        optional,
    )
}
