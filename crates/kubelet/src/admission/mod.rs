//! Pod admission (upstream lifecycle admit handlers and `canAdmitPod`): before a new pod gets a
//! worker, every handler may refuse it. A refused pod is never started; the sync loop records
//! phase `Failed` with the handler's reason and `Pod was rejected: <message>`, as upstream's
//! `rejectPod`. Pure decisions; owns no state.
//!
//! Submodules hold upstream's predicate admit handler (`NewPredicateAdmitHandler` +
//! `generalFilter`): [`resources`] (pod requests and the resource fit), [`node_affinity`]
//! (nodeSelector, required node affinity, nodeName), [`taints`] (NoExecute taints against
//! tolerations), [`ports`] (host ports) and [`predicate`] (the handler reading the Node).

pub mod node_affinity;
pub mod ports;
pub mod predicate;
pub mod resources;
pub mod taints;

pub use predicate::{NodePredicates, PredicateOptions};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::status::generate::k8s_time;
use crate::status::qos::pod_qos_class;

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

/// `maxPods`: refuses a pod when the node already runs that many (upstream `OutOfpods`).
#[derive(Debug, Clone, Copy)]
pub struct MaxPods(pub usize);

impl AdmitHandler for MaxPods {
    fn admit(&self, _pod: &Pod, active: &[&Pod]) -> Result<(), Rejection> {
        if active.len() < self.0 {
            return Ok(());
        }
        Err(Rejection {
            reason: "OutOfpods".to_owned(),
            message: format!(
                "Node didn't have enough resource: pods, requested: 1, used: {}, capacity: {}",
                active.len(),
                self.0
            ),
        })
    }
}

/// The ordered list of admission rules.
#[derive(Default)]
pub struct Admission {
    handlers: Vec<Box<dyn AdmitHandler>>,
}

impl Admission {
    pub fn new(handlers: Vec<Box<dyn AdmitHandler>>) -> Self {
        Self { handlers }
    }

    /// The first rejection, if any handler refuses the pod.
    pub fn admit(&self, pod: &Pod, active: &[&Pod]) -> Result<(), Rejection> {
        self.handlers.iter().try_for_each(|h| h.admit(pod, active))
    }
}

/// The status upstream's `rejectPod` records.
pub fn rejected_status(pod: &Pod, rejection: &Rejection, now: DateTime<Utc>) -> PodStatus {
    PodStatus {
        phase: Some("Failed".to_owned()),
        reason: Some(rejection.reason.clone()),
        message: Some(format!("Pod was rejected: {}", rejection.message)),
        qos_class: Some(pod_qos_class(pod).to_owned()),
        start_time: k8s_time(Some(now)),
        ..Default::default()
    }
}

/// True for pods whose phase is already terminal (they no longer count as active).
pub fn is_terminal(status: Option<&PodStatus>) -> bool {
    matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn max_pods_counts_active_pods() {
        let p = Pod::default();
        let admission = Admission::new(vec![Box::new(MaxPods(2))]);
        assert!(admission.admit(&p, &[&p]).is_ok());
        let err = admission.admit(&p, &[&p, &p]).unwrap_err();
        assert_eq!(err.reason, "OutOfpods");
        assert_eq!(
            err.message,
            "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
        );
        let status = rejected_status(&p, &err, Utc::now());
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(
            status.message.as_deref(),
            Some(
                "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
            )
        );
        assert!(is_terminal(Some(&status)));
    }
}
