//! The Kubernetes version rkubelet implements: the one release whose API (k8s-openapi's
//! `v1_33` feature) and kubelet behaviour it follows. `--version` prints it and the Node's
//! `status.nodeInfo.kubeletVersion` reports it; kubeadm reads the former and refuses a kubelet
//! whose minor version is newer than the control plane's.
//!
//! The patch level is `.0`: rkubelet follows the 1.33 minor release as a whole and claims no
//! upstream patch release's fixes by number.

/// `vMAJOR.MINOR.PATCH`, as upstream's `gitVersion`.
pub const KUBERNETES_VERSION: &str = "v1.33.0";

/// The major and minor numbers of [`KUBERNETES_VERSION`].
pub fn major_minor() -> (&'static str, &'static str) {
    let mut parts = KUBERNETES_VERSION.trim_start_matches('v').split('.');
    (parts.next().unwrap_or("1"), parts.next().unwrap_or("0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version and the API types rkubelet is compiled against are the same minor release.
    #[test]
    // The pushes exist or not by k8s-openapi's feature: not a fixed list.
    #[allow(clippy::vec_init_then_push)]
    fn version_matches_the_k8s_openapi_feature() {
        assert_eq!(major_minor(), ("1", "33"));
        let mut built_for: Vec<&str> = Vec::new();
        k8s_openapi::k8s_if_1_33! {
            built_for.push("1.33");
        }
        k8s_openapi::k8s_if_ge_1_34! {
            built_for.push("1.34 or later");
        }
        assert_eq!(built_for, ["1.33"], "k8s-openapi's API version");
    }
}
