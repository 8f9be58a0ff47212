//! Static pod construction (upstream `applyDefaults` + `tryDecodeSinglePod`): receives a decoded
//! manifest `Pod` and where it came from, emits the kubelet's static pod — API defaults,
//! `<name>-<node>` name, deterministic content-hash UID, `config.hash`/`config.source`
//! annotations, node name, the NoExecute toleration for file pods — validated, or a
//! `ManifestError`. Pure.

use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};
use sha2::{Digest, Sha256};

use super::api_refs::api_object_reference;
use super::decode::decode_manifest;
use super::defaults::set_pod_defaults;
use super::validation::{FieldError, validate_pod};
use crate::types::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, PodSource};

/// Why a manifest (or one pod in it) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("manifest is larger than the {0}-byte limit")]
    TooLarge(usize),
    #[error("couldn't parse as pod: {0}")]
    Parse(String),
    /// A field this kubelet does not know where it would change what runs
    /// ([`super::unknown_fields`]); the message names each field's path.
    #[error("{0}")]
    UnknownField(String),
    #[error("invalid pod: name is needed for the pod")]
    MissingName,
    #[error("invalid pod: [{}]", join_errors(.0))]
    Invalid(Vec<FieldError>),
    #[error("static pods may not reference {0}")]
    ApiReference(&'static str),
    #[error("{0}")]
    UnknownReference(String),
}

fn join_errors(errs: &[FieldError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where a static pod's manifest lives; part of its UID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestOrigin<'a> {
    /// A file under `staticPodPath`.
    File(&'a Path),
    /// `staticPodURL`.
    Url(&'a str),
}

impl ManifestOrigin<'_> {
    pub fn source(&self) -> PodSource {
        match self {
            ManifestOrigin::File(_) => PodSource::File,
            ManifestOrigin::Url(_) => PodSource::Http,
        }
    }
}

/// Upstream `generatePodName`: `<name>-<lowercased node name>`.
pub fn static_pod_name(name: &str, node_name: &str) -> String {
    format!("{name}-{}", node_name.to_lowercase())
}

/// The content-hash UID of a (defaulted, not yet renamed) manifest pod: 32 hex characters
/// (128 bits of SHA-256) over its canonical JSON, then the node (file pods only, as upstream)
/// and the manifest location. Same content → same UID; any change → a new UID.
pub fn static_pod_uid(pod: &Pod, node_name: &str, origin: &ManifestOrigin<'_>) -> String {
    let mut hasher = Sha256::new();
    // Serialising a k8s-openapi struct is deterministic: fixed field order, sorted maps.
    hasher.update(serde_json::to_vec(pod).unwrap_or_default());
    match origin {
        ManifestOrigin::File(path) => {
            hasher.update(format!("host:{node_name}"));
            hasher.update(format!("file:{}", path.display()));
        }
        ManifestOrigin::Url(url) => hasher.update(format!("url:{url}")),
    }
    hex::encode(&hasher.finalize()[..16])
}

/// Turns a decoded manifest pod into the kubelet's static pod, validated.
pub fn make_static_pod(
    mut pod: Pod,
    node_name: &str,
    origin: &ManifestOrigin<'_>,
) -> Result<Pod, ManifestError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(ManifestError::MissingName);
    }
    set_pod_defaults(&mut pod);
    let uid = match pod.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => static_pod_uid(&pod, node_name, origin),
    };

    let meta = &mut pod.metadata;
    meta.uid = Some(uid.clone());
    meta.name = Some(static_pod_name(&name, node_name));
    if meta.namespace.as_deref().unwrap_or_default().is_empty() {
        meta.namespace = Some("default".into());
    }
    meta.self_link = None;
    let annotations = meta.annotations.get_or_insert_with(Default::default);
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    annotations.insert(
        CONFIG_SOURCE_ANNOTATION.into(),
        origin.source().as_str().into(),
    );

    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node_name.to_string());
        if matches!(origin, ManifestOrigin::File(_)) {
            // Static file pods tolerate every NoExecute taint, so node problems never evict them.
            add_or_update_toleration(
                spec.tolerations.get_or_insert_with(Vec::new),
                Toleration {
                    operator: Some("Exists".into()),
                    effect: Some("NoExecute".into()),
                    ..Default::default()
                },
            );
        }
    }
    pod.status.get_or_insert_with(PodStatus::default).phase = Some("Pending".into());

    let errs = validate_pod(&pod);
    if !errs.is_empty() {
        return Err(ManifestError::Invalid(errs));
    }
    match api_object_reference(&pod) {
        Ok(None) => Ok(pod),
        Ok(Some(resource)) => Err(ManifestError::ApiReference(resource)),
        Err(msg) => Err(ManifestError::UnknownReference(msg)),
    }
}

/// Upstream `AddOrUpdateTolerationInPod`: replaces a toleration with the same key, operator,
/// value and effect, appends otherwise.
fn add_or_update_toleration(list: &mut Vec<Toleration>, t: Toleration) {
    let key = |x: &Toleration| {
        (
            x.key.clone().unwrap_or_default(),
            x.operator.clone().unwrap_or_default(),
            x.value.clone().unwrap_or_default(),
            x.effect.clone().unwrap_or_default(),
        )
    };
    match list.iter_mut().find(|x| key(x) == key(&t)) {
        Some(existing) => *existing = t,
        None => list.push(t),
    }
}

/// Decodes a manifest and builds every static pod in it; any bad pod rejects the manifest.
pub fn static_pods_from_manifest(
    data: &[u8],
    node_name: &str,
    origin: &ManifestOrigin<'_>,
    allow_list: bool,
) -> Result<Vec<Pod>, ManifestError> {
    decode_manifest(data, allow_list)?
        .into_iter()
        .map(|pod| make_static_pod(pod, node_name, origin))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::PodExt;

    const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  containers:\n  - name: c\n    image: nginx:1.27\n";

    fn build(text: &str, node: &str, path: &str) -> Result<Vec<Pod>, ManifestError> {
        static_pods_from_manifest(
            text.as_bytes(),
            node,
            &ManifestOrigin::File(Path::new(path)),
            false,
        )
    }

    #[test]
    fn naming_annotations_and_node() {
        assert_eq!(static_pod_name("web", "Node-A"), "web-node-a");
        let pod = build(MANIFEST, "node-a", "/etc/kubernetes/manifests/web.yaml")
            .unwrap()
            .remove(0);
        assert_eq!(pod.name(), "web-node-a");
        assert_eq!(pod.namespace(), "default");
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(pod.uid().len(), 32);
        assert!(pod.uid().chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(pod.annotation(CONFIG_HASH_ANNOTATION), Some(pod.uid()));
        assert_eq!(pod.source(), Some(PodSource::File));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(
            spec.tolerations.as_deref(),
            Some(
                &[Toleration {
                    operator: Some("Exists".into()),
                    effect: Some("NoExecute".into()),
                    ..Default::default()
                }][..]
            )
        );
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(
            pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Pending")
        );
        assert!(pod.metadata.self_link.is_none());
    }

    #[test]
    fn uid_stability() {
        let path = "/m/web.yaml";
        let uid = |text: &str, node: &str, path: &str| {
            build(text, node, path).unwrap()[0].uid().to_string()
        };
        let base = uid(MANIFEST, "n1", path);
        // Same content (even reformatted) → same UID.
        assert_eq!(base, uid(MANIFEST, "n1", path));
        let reformatted = MANIFEST.replace("  labels:\n    app: web\n", "  labels: {app: web}\n");
        assert_eq!(base, uid(&reformatted, "n1", path));
        // Changed content, node or location → new UID.
        assert_ne!(base, uid(&MANIFEST.replace("1.27", "1.28"), "n1", path));
        assert_ne!(base, uid(MANIFEST, "n2", path));
        assert_ne!(base, uid(MANIFEST, "n1", "/m/other.yaml"));
        // A UID set in the manifest is kept.
        let with_uid = MANIFEST.replace("  name: web\n", "  name: web\n  uid: fixed-uid\n");
        assert_eq!(uid(&with_uid, "n1", path), "fixed-uid");
    }

    #[test]
    fn http_pods_hash_the_url_and_get_no_toleration() {
        let origin = ManifestOrigin::Url("http://10.0.0.1/pods");
        let a = static_pods_from_manifest(MANIFEST.as_bytes(), "n1", &origin, true).unwrap();
        let b = static_pods_from_manifest(MANIFEST.as_bytes(), "n2", &origin, true).unwrap();
        assert_eq!(a[0].uid(), b[0].uid());
        assert_eq!(a[0].source(), Some(PodSource::Http));
        assert_eq!(a[0].spec.as_ref().unwrap().tolerations, None);
    }

    #[test]
    fn existing_toleration_is_not_duplicated() {
        let text = format!(
            "{MANIFEST}  tolerations:\n  - operator: Exists\n    effect: NoExecute\n  - key: k\n    operator: Exists\n"
        );
        let pod = build(&text, "n1", "/m/a.yaml").unwrap().remove(0);
        assert_eq!(pod.spec.unwrap().tolerations.unwrap().len(), 2);
    }

    #[test]
    fn rejections() {
        let cases: &[(&str, &str)] = &[
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec:\n  containers: []\n",
                "invalid pod: name is needed for the pod",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n",
                "invalid pod: [spec.containers[0].image: Required value]",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Web\nspec:\n  containers:\n  - name: c\n    image: x\n",
                "metadata.name: Invalid value: \"Web-n1\": a lowercase RFC 1123 subdomain",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: x\n    env:\n    - name: A\n      valueFrom:\n        secretKeyRef: {name: s, key: k}\n",
                "static pods may not reference secrets",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  volumes:\n  - name: v\n    configMap: {name: cm}\n  containers:\n  - name: c\n    image: x\n",
                "static pods may not reference configmaps",
            ),
        ];
        for (text, want) in cases {
            let err = build(text, "n1", "/m/a.yaml").unwrap_err().to_string();
            assert!(err.contains(want), "{text}\n=> {err}");
        }
    }
}
