//! Pod admission (upstream lifecycle admit handlers and `canAdmitPod`): before a new pod gets a
//! worker, every handler may refuse it. A refused pod is never started; the sync loop records
//! phase `Failed` with the handler's reason and `Pod was rejected: <message>`, as upstream's
//! `rejectPod`. Pure decisions; owns no state.
//!
//! Submodules hold upstream's predicate admit handler (`NewPredicateAdmitHandler` +
//! `generalFilter`): [`resources`] (pod requests and the resource fit), [`node_affinity`]
//! (nodeSelector, required node affinity, nodeName), [`taints`] (NoExecute taints against
//! tolerations), [`ports`] (host ports) and [`predicate`] (the handler reading the Node).
//! [`pod_features`] refuses pods that set pod-level resources (upstream's pod features handler).

pub mod node_affinity;
pub mod pod_features;
pub mod ports;
pub mod predicate;
pub mod taints;

pub use predicate::{NodePredicates, PredicateOptions};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::clock::k8s_time;
use crate::pod_workers::WorkerPhase;
use crate::qos::pod_qos_class;

use crate::admit::{AdmitHandler, Rejection};

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

/// Upstream `isAdmittedPodTerminal`: the API shows the pod in a terminal phase, or the
/// kubelet recorded one (finished, or rejected at admission) that the API may not show yet.
/// Such a pod never runs again.
pub fn is_admitted_pod_terminal(pod: &Pod, kubelet_status: Option<&PodStatus>) -> bool {
    is_terminal(pod.status.as_ref()) || is_terminal(kubelet_status)
}

/// Upstream `filterOutInactivePods` for one pod: inactive when its worker finished
/// terminating it, or when it is terminal (see [`is_admitted_pod_terminal`]) and not being
/// terminated right now (a terminating pod still holds its resources). Inactive pods do not
/// count in admission.
pub fn is_inactive(
    pod: &Pod,
    kubelet_status: Option<&PodStatus>,
    worker: Option<WorkerPhase>,
) -> bool {
    match worker {
        Some(WorkerPhase::Terminated | WorkerPhase::Finished) => true,
        Some(WorkerPhase::Terminating { .. }) => false,
        Some(WorkerPhase::Syncing) | None => is_admitted_pod_terminal(pod, kubelet_status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct RefuseAll;

    impl AdmitHandler for RefuseAll {
        fn admit(&self, _pod: &Pod, active: &[&Pod]) -> Result<(), Rejection> {
            Err(Rejection {
                reason: "OutOfpods".to_owned(),
                message: format!(
                    "Node didn't have enough resource: pods, requested: 1, used: {}, capacity: 0",
                    active.len()
                ),
            })
        }
    }

    #[test]
    fn rejection_becomes_failed_status() {
        let p = Pod::default();
        assert!(Admission::default().admit(&p, &[&p]).is_ok());
        let admission = Admission::new(vec![Box::new(RefuseAll)]);
        let err = admission.admit(&p, &[&p, &p]).unwrap_err();
        assert_eq!(err.reason, "OutOfpods");
        let status = rejected_status(&p, &err, Utc::now());
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(status.reason.as_deref(), Some("OutOfpods"));
        assert_eq!(
            status.message.as_deref(),
            Some(
                "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 0"
            )
        );
        assert!(is_terminal(Some(&status)));
    }

    #[test]
    fn inactive_pods_are_terminated_or_terminal_and_not_terminating() {
        let phase = |p: &str| PodStatus {
            phase: Some(p.to_owned()),
            ..Default::default()
        };
        let api = |p: &str| Pod {
            status: Some(phase(p)),
            ..Default::default()
        };
        let terminating = Some(WorkerPhase::Terminating { grace_period: 30 });
        // (API phase, kubelet phase, worker) → inactive
        let cases = [
            ("Running", None, Some(WorkerPhase::Syncing), false),
            ("Pending", None, None, false),
            // The API already shows a terminal phase (e.g. after a kubelet restart).
            ("Succeeded", None, None, true),
            ("Failed", None, Some(WorkerPhase::Syncing), true),
            // The kubelet decided (rejected, or finished) before the API knows.
            ("Running", Some("Failed"), None, true),
            (
                "Running",
                Some("Succeeded"),
                Some(WorkerPhase::Syncing),
                true,
            ),
            // Still being terminated: holds its resources.
            ("Running", Some("Succeeded"), terminating, false),
            ("Failed", None, terminating, false),
            ("Running", None, terminating, false),
            // Terminated by the worker, whatever the phases say.
            ("Running", None, Some(WorkerPhase::Terminated), true),
            (
                "Running",
                Some("Running"),
                Some(WorkerPhase::Finished),
                true,
            ),
        ];
        for (api_phase, ours, worker, inactive) in cases {
            let ours = ours.map(phase);
            assert_eq!(
                is_inactive(&api(api_phase), ours.as_ref(), worker),
                inactive,
                "{api_phase} {ours:?} {worker:?}"
            );
        }
        assert!(is_admitted_pod_terminal(&api("Failed"), None));
        assert!(!is_admitted_pod_terminal(&Pod::default(), None));
    }
}
