//! The admission vocabulary: one rule ([`AdmitHandler`]) and why it refused a pod
//! ([`Rejection`]). The rules live where their knowledge is (resources and affinity in the
//! kubelet's admission, the CPU manager in `cm`, sysctls and AppArmor in `security`); the
//! kubelet's admission runs them in order before a pod gets a worker.

use k8s_openapi::api::core::v1::Pod;

/// Why a pod may not run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Upstream reason, e.g. `OutOfpods`, `SysctlForbidden`.
    pub reason: String,
    pub message: String,
}

/// One admission rule.
pub trait AdmitHandler: Send + Sync {
    /// `active` are the pods already admitted and not terminal.
    fn admit(&self, pod: &Pod, active: &[&Pod]) -> Result<(), Rejection>;
}
