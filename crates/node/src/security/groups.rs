//! security::groups: the `SupplementalGroupsPolicyNotSupported` admission rule (upstream
//! predicate admit handler, 1.33 with the SupplementalGroupsPolicy gate in beta): a pod asking
//! for `supplementalGroupsPolicy: Strict` is refused on a node whose runtime does not report
//! support (containerd before 2.0 does not; this kubelet does not query runtime features yet,
//! so the agent builds it unsupported). Receives pods; emits rejections. Pure.

use k8s_openapi::api::core::v1::Pod;

use crate::admit::{AdmitHandler, Rejection};

/// Admission reason for a Strict policy the node cannot honour.
pub const NOT_SUPPORTED_REASON: &str = "SupplementalGroupsPolicyNotSupported";

/// Refuses `supplementalGroupsPolicy: Strict` unless the runtime supports it.
#[derive(Debug, Clone, Copy)]
pub struct SupplementalGroupsPolicyAdmit {
    pub runtime_supports_strict: bool,
}

impl AdmitHandler for SupplementalGroupsPolicyAdmit {
    fn admit(&self, pod: &Pod, _active: &[&Pod]) -> Result<(), Rejection> {
        let policy = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|sc| sc.supplemental_groups_policy.as_deref());
        if policy != Some("Strict") || self.runtime_supports_strict {
            return Ok(());
        }
        Err(Rejection {
            reason: NOT_SUPPORTED_REASON.to_owned(),
            message: "SupplementalGroupsPolicy=Strict is not supported in this node".to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strict_needs_runtime_support() {
        let pod = |policy: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"spec": {"containers": [{"name": "c"}],
                "securityContext": {"supplementalGroupsPolicy": policy}}}))
            .unwrap()
        };
        let unsupported = SupplementalGroupsPolicyAdmit {
            runtime_supports_strict: false,
        };
        let supported = SupplementalGroupsPolicyAdmit {
            runtime_supports_strict: true,
        };
        let r = unsupported.admit(&pod(json!("Strict")), &[]).unwrap_err();
        assert_eq!(
            (r.reason.as_str(), r.message.as_str()),
            (
                "SupplementalGroupsPolicyNotSupported",
                "SupplementalGroupsPolicy=Strict is not supported in this node"
            )
        );
        assert!(supported.admit(&pod(json!("Strict")), &[]).is_ok());
        assert!(unsupported.admit(&pod(json!("Merge")), &[]).is_ok());
        assert!(unsupported.admit(&pod(json!(null)), &[]).is_ok());
    }
}
