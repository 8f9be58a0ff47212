//! Upstream's pod features admit handler (`lifecycle.NewPodFeaturesAdmitHandler`): a pod that
//! sets pod-level resources (`spec.resources` with a CPU or memory request or limit) is refused
//! while the `PodLevelResources` gate is off, with upstream's reason and message. rkubelet does
//! not implement pod-level resources yet and validation refuses turning the gate on, so every
//! such pod is refused here instead of running with its limits silently ignored. Receives the
//! pod; emits a [`Rejection`] or nothing. Pure.

use k8s_openapi::api::core::v1::Pod;

use super::{AdmitHandler, Rejection};

/// Upstream `PodLevelResourcesNotAdmittedReason`.
pub const REASON: &str = "PodLevelResourcesNotSupported";

/// The resources upstream 1.33 supports at pod level (`supportedPodLevelResources`).
const SUPPORTED: &[&str] = &["cpu", "memory"];

/// Upstream `IsPodLevelResourcesSet`: a CPU or memory request or limit in `spec.resources`
/// (other resource names there do not count).
pub fn pod_level_resources_set(pod: &Pod) -> bool {
    let Some(res) = pod.spec.as_ref().and_then(|s| s.resources.as_ref()) else {
        return false;
    };
    [&res.requests, &res.limits]
        .into_iter()
        .flatten()
        .any(|list| list.keys().any(|k| SUPPORTED.contains(&k.as_str())))
}

/// Refuses pods with pod-level resources unless the gate is on.
#[derive(Debug, Clone, Copy)]
pub struct PodFeaturesAdmit {
    /// The `PodLevelResources` gate.
    pub pod_level_resources: bool,
}

impl AdmitHandler for PodFeaturesAdmit {
    fn admit(&self, pod: &Pod, _active: &[&Pod]) -> Result<(), Rejection> {
        if self.pod_level_resources || !pod_level_resources_set(pod) {
            return Ok(());
        }
        Err(Rejection {
            reason: REASON.to_owned(),
            message: "PodLevelResources feature gate is disabled".to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(resources: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"resources": resources, "containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap()
    }

    #[test]
    fn pod_level_cpu_or_memory_is_refused_while_the_gate_is_off() {
        let off = PodFeaturesAdmit {
            pod_level_resources: false,
        };
        for res in [
            json!({"limits": {"cpu": "1"}}),
            json!({"requests": {"memory": "64Mi"}}),
            json!({"requests": {"example.com/x": "1"}, "limits": {"memory": "1Gi"}}),
        ] {
            let err = off.admit(&pod(res.clone()), &[]).unwrap_err();
            assert_eq!(
                (err.reason.as_str(), err.message.as_str()),
                (
                    "PodLevelResourcesNotSupported",
                    "PodLevelResources feature gate is disabled"
                ),
                "{res}"
            );
        }
        // No pod-level resources, empty lists or only unsupported names: admitted.
        for res in [
            json!(null),
            json!({}),
            json!({"limits": {}}),
            json!({"limits": {"example.com/x": "1"}}),
        ] {
            assert!(off.admit(&pod(res.clone()), &[]).is_ok(), "{res}");
        }
        assert!(off.admit(&Pod::default(), &[]).is_ok());
        let on = PodFeaturesAdmit {
            pod_level_resources: true,
        };
        assert!(on.admit(&pod(json!({"limits": {"cpu": "1"}})), &[]).is_ok());
    }
}
