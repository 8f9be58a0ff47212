//! Dynamic resource allocation, absent (upstream `PrepareDynamicResources` with no DRA driver
//! registered): rkubelet has no DRA plugin registry, so a pod whose `spec.resourceClaims` is
//! not empty can never have its devices prepared. Receives a pod about to get a sandbox; emits
//! the error that keeps it pending (the sync fails and is retried with backoff, the pod stays
//! `ContainerCreating`) with upstream's event reason and error wording. Pure.

use k8s_openapi::api::core::v1::Pod;

use crate::types::PodExt;

/// Upstream `events.FailedPrepareDynamicResources`.
pub const FAILED_PREPARE_DYNAMIC_RESOURCES: &str = "FailedPrepareDynamicResources";

/// Why the pod's claims cannot be prepared: `None` for a pod without resource claims.
/// Names each claim and the ResourceClaim object behind it (`resourceClaimName`, or the one
/// generated from a template, from `status.resourceClaimStatuses`).
pub fn unpreparable_claims(pod: &Pod) -> Option<String> {
    let claims = pod.spec.as_ref()?.resource_claims.as_deref()?;
    if claims.is_empty() {
        return None;
    }
    let generated = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_deref())
        .unwrap_or_default();
    let named: Vec<String> = claims
        .iter()
        .map(|c| {
            let object = c.resource_claim_name.clone().or_else(|| {
                generated
                    .iter()
                    .find(|g| g.name == c.name)
                    .and_then(|g| g.resource_claim_name.clone())
            });
            match object {
                Some(o) => format!("{:?} (ResourceClaim {}/{o})", c.name, pod.namespace()),
                None => format!("{:?}", c.name),
            }
        })
        .collect();
    Some(format!(
        "resource claim {}: the DRA driver of the claim was not found in the list of registered DRA plugins (rkubelet registers no DRA plugins)",
        named.join(", ")
    ))
}

/// The event message (upstream "Failed to prepare dynamic resources: <error>").
pub fn event_message(error: &str) -> String {
    format!("Failed to prepare dynamic resources: {error}")
}

#[cfg(test)]
mod tests {

    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn claims_are_named_with_their_resource_claim() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ml", "uid": "u"},
            "spec": {
                "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [
                    {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
                    {"name": "shared", "resourceClaimName": "shared-nic"},
                ],
            },
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "web-gpu-x7"}]},
        }));
        assert_eq!(
            unpreparable_claims(&p).unwrap(),
            "resource claim \"gpu\" (ResourceClaim ml/web-gpu-x7), \"shared\" (ResourceClaim ml/shared-nic): the DRA driver of the claim was not found in the list of registered DRA plugins (rkubelet registers no DRA plugins)"
        );
    }

    #[test]
    fn a_pod_without_claims_is_not_held() {
        for spec in [
            serde_json::json!({"containers": [{"name": "c"}]}),
            serde_json::json!({"containers": [{"name": "c"}], "resourceClaims": []}),
        ] {
            let p = pod(serde_json::json!({"metadata": {"name": "a"}, "spec": spec}));
            assert_eq!(unpreparable_claims(&p), None);
        }
    }
}
