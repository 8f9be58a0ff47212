//! Recursive read-only mounts (`volumeMounts[].recursiveReadOnly`, feature gate
//! `RecursiveReadOnlyMounts`, GA and locked on in 1.33): upstream `makeMounts`'
//! `resolveRecursiveReadOnly` and `runtimeHandlerSupportsRecursiveReadOnlyMounts`. Receives a
//! container, its CRI mounts as the volume manager made them (one per volumeMount, in order,
//! first) and whether the pod's runtime handler can do recursive read-only mounts (CRI
//! `Status.runtime_handlers[].features.recursive_read_only_mounts`); emits the mounts with
//! `recursive_read_only` set, or upstream's error, which fails the container start with
//! `CreateContainerConfigError`. `Enabled` on a runtime that cannot do it (containerd 1.6
//! reports no handlers) is refused; `IfPossible` falls back to a plain read-only mount.

use k8s_openapi::api::core::v1::{Container, VolumeMount};
use rkubelet_cri::RuntimeService;
use rkubelet_cri::api::{Mount, StatusRequest};
use tracing::{debug, warn};

/// Why a volumeMount's recursive read-only mode cannot be honoured (upstream's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecursiveReadOnlyError {
    #[error("volume {0:?} requested recursive read-only mode, but it is not read-only")]
    NotReadOnly(String),
    #[error(
        "volume {volume:?} requested recursive read-only mode, but it is not compatible with propagation {propagation:?}"
    )]
    Propagation { volume: String, propagation: String },
    #[error(
        "volume {0:?} requested recursive read-only mode, but it is not supported by the runtime"
    )]
    Unsupported(String),
    #[error("unknown recursive read-only mode {0:?}")]
    UnknownMode(String),
}

/// Whether any volumeMount of `container` asks for a recursive read-only mode other than
/// `Disabled` (only then is the runtime asked).
pub fn requested(container: &Container) -> bool {
    container.volume_mounts.iter().flatten().any(|m| {
        m.recursive_read_only
            .as_deref()
            .is_some_and(|r| r != "Disabled")
    })
}

/// Upstream `resolveRecursiveReadOnly`: whether `m` gets a recursive read-only mount.
pub fn resolve(m: &VolumeMount, runtime_supports: bool) -> Result<bool, RecursiveReadOnlyError> {
    let mode = match m.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    if !m.read_only.unwrap_or(false) {
        return Err(RecursiveReadOnlyError::NotReadOnly(m.name.clone()));
    }
    if let Some(p) = m.mount_propagation.as_deref().filter(|p| *p != "None") {
        return Err(RecursiveReadOnlyError::Propagation {
            volume: m.name.clone(),
            propagation: p.to_owned(),
        });
    }
    match mode {
        "IfPossible" => Ok(runtime_supports),
        "Enabled" if runtime_supports => Ok(true),
        "Enabled" => Err(RecursiveReadOnlyError::Unsupported(m.name.clone())),
        other => Err(RecursiveReadOnlyError::UnknownMode(other.to_owned())),
    }
}

/// Sets `recursive_read_only` on the mounts of `container`'s volumeMounts (`mounts[i]` is
/// volumeMount `i`, as the volume manager builds them). The error is the container's
/// `CreateContainerConfigError` message.
pub fn apply(
    container: &Container,
    mounts: &mut [Mount],
    runtime_supports: bool,
) -> Result<(), String> {
    for (vm, mount) in container
        .volume_mounts
        .iter()
        .flatten()
        .zip(mounts.iter_mut())
    {
        let rro = resolve(vm, runtime_supports)
            .map_err(|e| format!("failed to resolve recursive read-only mode: {e}"))?;
        if rro {
            if mount.container_path != vm.mount_path {
                return Err(format!(
                    "recursive read-only mount of volume {:?}: the mount at {} is not the one for {}",
                    vm.name, mount.container_path, vm.mount_path
                ));
            }
            mount.readonly = true;
            mount.recursive_read_only = true;
        }
    }
    Ok(())
}

/// Upstream `runtimeHandlerSupportsRecursiveReadOnlyMounts`: the handler `handler` (`""`: the
/// default) is listed in CRI `Status` with the feature. A runtime that lists no handlers
/// (containerd 1.6) or a failed `Status` supports nothing.
pub async fn runtime_supports(runtime: &dyn RuntimeService, handler: &str) -> bool {
    let status = match runtime.status(StatusRequest { verbose: false }).await {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, "CRI Status failed: recursive read-only mounts treated as unsupported");
            return false;
        }
    };
    if status.runtime_handlers.is_empty() {
        return false;
    }
    match status.runtime_handlers.iter().find(|h| h.name == handler) {
        Some(h) => h.features.is_some_and(|f| f.recursive_read_only_mounts),
        None => {
            debug!(runtime_handler = handler, "Unknown runtime handler");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkubelet_cri::fake::FakeRuntime;
    use serde_json::json;

    fn vm(v: serde_json::Value) -> VolumeMount {
        let mut base = json!({"name": "data", "mountPath": "/data"});
        base.as_object_mut()
            .unwrap()
            .extend(v.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn resolution_follows_upstream() {
        let ro = |mode: &str| vm(json!({"readOnly": true, "recursiveReadOnly": mode}));
        for supports in [false, true] {
            assert_eq!(resolve(&vm(json!({})), supports), Ok(false));
            assert_eq!(resolve(&ro("Disabled"), supports), Ok(false));
            assert_eq!(
                resolve(&ro("IfPossible"), supports),
                Ok(supports),
                "falls back"
            );
        }
        assert_eq!(resolve(&ro("Enabled"), true), Ok(true));
        assert_eq!(
            resolve(&ro("Enabled"), false).unwrap_err().to_string(),
            "volume \"data\" requested recursive read-only mode, but it is not supported by the runtime"
        );
        assert_eq!(
            resolve(&vm(json!({"recursiveReadOnly": "Enabled"})), true)
                .unwrap_err()
                .to_string(),
            "volume \"data\" requested recursive read-only mode, but it is not read-only"
        );
        assert_eq!(
            resolve(
                &vm(json!({"readOnly": true, "recursiveReadOnly": "IfPossible", "mountPropagation": "HostToContainer"})),
                true
            )
            .unwrap_err()
            .to_string(),
            "volume \"data\" requested recursive read-only mode, but it is not compatible with propagation \"HostToContainer\""
        );
        assert_eq!(
            resolve(
                &vm(
                    json!({"readOnly": true, "recursiveReadOnly": "Enabled", "mountPropagation": "None"})
                ),
                true
            ),
            Ok(true)
        );
        assert_eq!(
            resolve(&ro("Sometimes"), true).unwrap_err().to_string(),
            "unknown recursive read-only mode \"Sometimes\""
        );
    }

    fn container(mounts: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "c", "image": "i", "volumeMounts": mounts})).unwrap()
    }

    fn cri_mounts(paths: &[&str]) -> Vec<Mount> {
        paths
            .iter()
            .map(|p| Mount {
                container_path: (*p).to_owned(),
                readonly: true,
                ..Default::default()
            })
            .chain(std::iter::once(Mount {
                container_path: "/etc/hosts".into(),
                ..Default::default()
            }))
            .collect()
    }

    #[test]
    fn apply_marks_the_matching_mounts_only() {
        let c = container(json!([
            {"name": "a", "mountPath": "/a", "readOnly": true, "recursiveReadOnly": "Enabled"},
            {"name": "b", "mountPath": "/b", "readOnly": true},
        ]));
        assert!(requested(&c));
        let mut m = cri_mounts(&["/a", "/b"]);
        apply(&c, &mut m, true).unwrap();
        assert_eq!(
            m.iter().map(|m| m.recursive_read_only).collect::<Vec<_>>(),
            [true, false, false]
        );
        let mut m = cri_mounts(&["/a", "/b"]);
        assert_eq!(
            apply(&c, &mut m, false).unwrap_err(),
            "failed to resolve recursive read-only mode: volume \"a\" requested recursive read-only mode, but it is not supported by the runtime"
        );
        let plain =
            container(json!([{"name": "b", "mountPath": "/b", "recursiveReadOnly": "Disabled"}]));
        assert!(!requested(&plain));
    }

    #[tokio::test]
    async fn support_comes_from_the_handler_features_in_cri_status() {
        let fake = FakeRuntime::new();
        // containerd 1.6 lists no handlers: unsupported.
        assert!(!runtime_supports(&fake, "").await);
        fake.set_status_handlers(&[("", true), ("kata", false)]);
        assert!(runtime_supports(&fake, "").await);
        assert!(!runtime_supports(&fake, "kata").await);
        assert!(!runtime_supports(&fake, "unknown").await);
    }
}
