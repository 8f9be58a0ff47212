//! The kubelet client CSR auto-approver (upstream
//! `pkg/controller/certificates/approver/sarapprove.go`): owns the recognizers; receives a
//! stored CSR, emits the `Approved` condition to add, or nothing. Serving CSRs are never
//! auto-approved (kubeadm#1602). Upstream asks a SubjectAccessReview for
//! `certificatesigningrequests/selfnodeclient` or `/nodeclient` (create); the fixture answers
//! it with the RBAC bindings kubeadm creates: `nodeclient` for `system:bootstrappers`,
//! `selfnodeclient` for `system:nodes`, both for `system:masters`.

use crate::authn::{BOOTSTRAPPERS, MASTERS};
use crate::certificates::{self, SIGNER_KUBELET_CLIENT};
use serde_json::{Value, json};

/// Upstream's message for a first (bootstrap) client certificate.
pub const NODE_CLIENT_MESSAGE: &str =
    "Auto approving kubelet client certificate after SubjectAccessReview.";
/// Upstream's message for a renewal requested by the node itself.
pub const SELF_NODE_CLIENT_MESSAGE: &str =
    "Auto approving self kubelet client certificate after SubjectAccessReview.";

fn requester_groups(csr: &Value) -> Vec<&str> {
    csr["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The `Approved` condition the approver would add to `csr`, if any.
pub fn decide(csr: &Value) -> Option<Value> {
    if certificates::certificate_pem(csr).is_some()
        || certificates::has_condition(csr, "Approved")
        || certificates::has_condition(csr, "Denied")
        || csr["spec"]["signerName"] != SIGNER_KUBELET_CLIENT
    {
        return None;
    }
    let parsed = certificates::parse_request(csr["spec"]["request"].as_str()?).ok()?;
    certificates::validate_kubelet_client(&parsed, &certificates::usages(csr)).ok()?;
    let groups = requester_groups(csr);
    let member = |g: &str| groups.contains(&g) || groups.contains(&MASTERS);
    let username = csr["spec"]["username"].as_str().unwrap_or_default();
    let message = if username == parsed.common_name && member("system:nodes") {
        SELF_NODE_CLIENT_MESSAGE
    } else if member(BOOTSTRAPPERS) {
        NODE_CLIENT_MESSAGE
    } else {
        return None;
    };
    Some(json!({
        "type": "Approved",
        "status": "True",
        "reason": "AutoApproved",
        "message": message,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::tests::{b64, csr_pem};
    use crate::certificates::{SIGNER_KUBELET_SERVING, prepare_for_create};

    fn csr(
        cn: &str,
        sans: &[&str],
        signer: &str,
        usages: &[&str],
        user: &crate::UserInfo,
    ) -> Value {
        let mut obj = json!({"metadata": {"name": "c"}, "spec": {
            "request": b64(&csr_pem(cn, Some("system:nodes"), sans)),
            "signerName": signer, "usages": usages}});
        prepare_for_create(&mut obj, Some(user));
        obj
    }

    #[test]
    fn approves_kubelet_client_csrs_like_sarapprove() {
        let client = ["digital signature", "client auth"];
        let boot = crate::UserInfo::new("system:bootstrap:abcdef", vec![BOOTSTRAPPERS.into()]);
        let node = crate::UserInfo::new("system:node:n1", vec!["system:nodes".into()]);
        let other_node = crate::UserInfo::new("system:node:n2", vec!["system:nodes".into()]);
        let nobody = crate::UserInfo::new("alice", vec![]);
        let c = decide(&csr(
            "system:node:n1",
            &[],
            SIGNER_KUBELET_CLIENT,
            &client,
            &boot,
        ))
        .expect("bootstrap");
        assert_eq!(c["reason"], "AutoApproved");
        assert_eq!(c["message"], NODE_CLIENT_MESSAGE);
        let c = decide(&csr(
            "system:node:n1",
            &[],
            SIGNER_KUBELET_CLIENT,
            &client,
            &node,
        ))
        .expect("renewal");
        assert_eq!(c["message"], SELF_NODE_CLIENT_MESSAGE);
        // A node asking for another node's certificate, or a user without the bindings: no.
        assert!(
            decide(&csr(
                "system:node:n1",
                &[],
                SIGNER_KUBELET_CLIENT,
                &client,
                &other_node
            ))
            .is_none()
        );
        assert!(
            decide(&csr(
                "system:node:n1",
                &[],
                SIGNER_KUBELET_CLIENT,
                &client,
                &nobody
            ))
            .is_none()
        );
        // Not a valid kubelet client request: no.
        assert!(
            decide(&csr(
                "system:node:n1",
                &[],
                SIGNER_KUBELET_CLIENT,
                &["server auth"],
                &boot
            ))
            .is_none()
        );
        // Serving CSRs are never auto-approved, whoever asks.
        let serving = ["digital signature", "key encipherment", "server auth"];
        for u in [&boot, &node, &crate::UserInfo::admin()] {
            assert!(
                decide(&csr(
                    "system:node:n1",
                    &["n1"],
                    SIGNER_KUBELET_SERVING,
                    &serving,
                    u
                ))
                .is_none()
            );
        }
        // Already decided: no.
        let mut denied = csr("system:node:n1", &[], SIGNER_KUBELET_CLIENT, &client, &boot);
        denied["status"]["conditions"] = json!([{"type": "Denied", "status": "True"}]);
        assert!(decide(&denied).is_none());
    }
}
