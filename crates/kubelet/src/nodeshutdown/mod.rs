//! Graceful node shutdown (upstream `pkg/kubelet/nodeshutdown`): owns whether the node is
//! shutting down and the logind `delay` inhibitor lock. Receives the `shutdownGracePeriod*`
//! settings, logind's `PrepareForShutdown` signals over the system D-Bus ([`logind`]), the
//! active pods, and the pod workers + status manager to kill them through; emits the node's
//! not-ready reason (`node is shutting down`), an admission refusal (`NodeShutdown`), each
//! killed pod's final status (`Failed` / `Terminated` + `DisruptionTarget`), node events,
//! the graceful-shutdown metrics and the `graceful_node_shutdown_state` file.
//!
//! - this file: the settings and the pure priority-group arithmetic (upstream `migrateConfig`,
//!   `groupByPriority`, `periodRequested`, the per-pod grace period).
//! - [`logind`]: the D-Bus client (upstream `systemd/inhibit_linux.go`) and the drop-in writer.
//! - [`manager`]: the task (watch, start-up checks, shutdown processing), the admission
//!   handler and the shared shutdown state.

pub mod logind;
pub mod manager;

#[cfg(test)]
mod manager_tests;

pub use manager::{
    NodeShutdownInputs, NodeShutdownManager, PodKiller, ShutdownState, WorkerKiller,
};

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::config::ShutdownGracePeriodByPodPriority;

/// Upstream `nodeShutdownReason`: the reason of a pod killed for the shutdown.
pub const REASON: &str = "Terminated";
/// Upstream `nodeShutdownMessage`.
pub const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// Upstream `NodeShutdownNotAdmittedReason`.
pub const NOT_ADMITTED_REASON: &str = "NodeShutdown";
/// Upstream `nodeShutdownNotAdmittedMessage`.
pub const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";
/// Upstream `ShutdownStatus()` error: the node's Ready condition message while shutting down.
pub const NOT_READY_MESSAGE: &str = "node is shutting down";
/// Upstream `localStorageStateFile` (in the kubelet's root directory).
pub const STATE_FILE: &str = "graceful_node_shutdown_state";
/// Upstream `kubeletevents.NodeShutdown`: the reason of the node events on a shutdown signal.
pub const EVENT_REASON: &str = "NodeShutdown";
/// Ours: the Warning event on the Node when a shutdown would not be graceful (no lock, or
/// logind's delay shorter than the grace period).
pub const UNPROTECTED_REASON: &str = "GracefulNodeShutdownUnprotected";
/// Upstream `scheduling.DefaultPriorityWhenNoDefaultClassExists`.
pub const DEFAULT_PRIORITY: i32 = 0;
/// Upstream `scheduling.SystemCriticalPriority`.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// Where logind reads drop-ins (upstream `logindConfigDirectory`).
pub const LOGIND_CONF_DIR: &str = "/etc/systemd/logind.conf.d";
/// Upstream `dbusReconnectPeriod`: wait before watching again after the bus went away.
pub const RECONNECT_PERIOD: Duration = Duration::from_secs(1);

/// One priority group's budget (upstream `ShutdownGracePeriodByPodPriority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityBudget {
    /// Pods with a priority at or above this one (and below the next group's) belong here.
    pub priority: i32,
    /// How long the group's pods get to stop (seconds).
    pub grace_period_seconds: i64,
}

/// What the node shutdown manager needs; `None` in the agent when no grace period is set
/// (upstream's "node shutdown will be immediate").
#[derive(Debug, Clone)]
pub struct NodeShutdownSettings {
    /// The groups, sorted by priority from low to high (never empty).
    pub groups: Vec<PriorityBudget>,
    /// Where the `99-kubelet.conf` drop-in raising `InhibitDelayMaxSec` goes.
    pub logind_conf_dir: PathBuf,
    /// The D-Bus address of the system bus; `None`: `DBUS_SYSTEM_BUS_ADDRESS`, else the
    /// standard socket (tests point this at their private bus).
    pub bus_address: Option<String>,
    /// Wait before watching again after logind or the bus went away (upstream 1 s); the
    /// start-up checks are retried with a back-off from this period up to five minutes.
    pub reconnect_period: Duration,
}

impl NodeShutdownSettings {
    /// Upstream `NewManager`'s configuration step: `shutdownGracePeriodByPodPriority` when set,
    /// else the two groups [`migrate_config`] derives from `shutdownGracePeriod` and
    /// `shutdownGracePeriodCriticalPods`; sorted low to high. `None` when that leaves no group.
    pub fn from_config(
        grace_period: Duration,
        critical_grace_period: Duration,
        by_priority: &[ShutdownGracePeriodByPodPriority],
    ) -> Option<Self> {
        let mut groups: Vec<PriorityBudget> = if by_priority.is_empty() {
            migrate_config(grace_period, critical_grace_period)
        } else {
            by_priority
                .iter()
                .map(|p| PriorityBudget {
                    priority: p.priority,
                    grace_period_seconds: p.shutdown_grace_period_seconds,
                })
                .collect()
        };
        if groups.is_empty() {
            return None;
        }
        groups.sort_by_key(|g| g.priority);
        Some(Self {
            groups,
            logind_conf_dir: PathBuf::from(LOGIND_CONF_DIR),
            bus_address: None,
            reconnect_period: RECONNECT_PERIOD,
        })
    }

    /// Upstream `periodRequested`: the sum of every group's budget (what logind's
    /// `InhibitDelayMaxSec` must cover).
    pub fn period_requested(&self) -> Duration {
        period_requested(&self.groups)
    }
}

/// Upstream `migrateConfig`: `shutdownGracePeriod` split into the time for regular pods
/// (priority 0 and up) and the last `shutdownGracePeriodCriticalPods` for system-critical
/// pods. Nothing when the grace period is zero or shorter than the critical part.
pub fn migrate_config(grace_period: Duration, critical: Duration) -> Vec<PriorityBudget> {
    if grace_period.is_zero() {
        return Vec::new();
    }
    let Some(regular) = grace_period.checked_sub(critical) else {
        return Vec::new();
    };
    let critical = grace_period - regular;
    let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    vec![
        PriorityBudget {
            priority: DEFAULT_PRIORITY,
            grace_period_seconds: secs(regular),
        },
        PriorityBudget {
            priority: SYSTEM_CRITICAL_PRIORITY,
            grace_period_seconds: secs(critical),
        },
    ]
}

/// Upstream `periodRequested`.
pub fn period_requested(groups: &[PriorityBudget]) -> Duration {
    let total = groups
        .iter()
        .map(|g| g.grace_period_seconds.max(0))
        .fold(0i64, i64::saturating_add);
    Duration::from_secs(u64::try_from(total).unwrap_or(0))
}

/// One group of pods to stop together (upstream `podShutdownGroup`).
#[derive(Debug, Clone, PartialEq)]
pub struct ShutdownGroup {
    pub budget: PriorityBudget,
    pub pods: Vec<Pod>,
}

/// Upstream `groupByPriority`: each pod goes to the group with the highest priority not above
/// its own; pods below the lowest group go to the lowest, pods above the highest to the
/// highest. `groups` must be sorted low to high; a pod without a priority counts as 0.
pub fn group_by_priority(groups: &[PriorityBudget], pods: Vec<Pod>) -> Vec<ShutdownGroup> {
    let mut out: Vec<ShutdownGroup> = groups
        .iter()
        .map(|b| ShutdownGroup {
            budget: *b,
            pods: Vec::new(),
        })
        .collect();
    if out.is_empty() {
        return out;
    }
    for pod in pods {
        let priority = pod
            .spec
            .as_ref()
            .and_then(|s| s.priority)
            .unwrap_or(DEFAULT_PRIORITY);
        // The first group at or above the pod's priority…
        let mut index = out.partition_point(|g| g.budget.priority < priority);
        if index == out.len() {
            index -= 1;
        } else if index > 0 && out[index].budget.priority > priority {
            // …or the one below it when the pod falls between two groups.
            index -= 1;
        }
        out[index].pods.push(pod);
    }
    out
}

/// The grace period a pod gets (upstream `killPods`): the group's budget, or the pod's own
/// `terminationGracePeriodSeconds` when that is not longer.
pub fn pod_grace_period(pod: &Pod, budget: &PriorityBudget) -> i64 {
    match pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        Some(own) if own <= budget.grace_period_seconds => own,
        _ => budget.grace_period_seconds,
    }
}

/// Beyond upstream: the end of a group's budget kept free of the kill, so that the pods'
/// terminal status — which goes out only once their containers stopped and a fresh runtime
/// status confirmed it (a relist, up to 1 s), as upstream — reaches the API before the
/// group's budget (and, for the last group, the lock) ends: 3 s, or half the budget when that
/// is shorter. Upstream kills with the whole budget, so the last group's final statuses race
/// the power-off.
pub fn status_reserve(budget_seconds: i64) -> i64 {
    (budget_seconds / 2).clamp(0, 3)
}

/// The grace period a pod is killed with: [`pod_grace_period`] capped at the budget minus
/// [`status_reserve`].
pub fn kill_grace_period(pod: &Pod, budget: &PriorityBudget) -> i64 {
    let secs = budget.grace_period_seconds;
    pod_grace_period(pod, budget).min(secs - status_reserve(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// Upstream `scheduling.HighestUserDefinablePriority`.
    const HIGHEST_USER_DEFINABLE: i32 = 1_000_000_000;

    fn pod(name: &str, priority: i32, grace: Option<i64>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                uid: Some(name.to_owned()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                priority: Some(priority),
                termination_grace_period_seconds: grace,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn budget(priority: i32, secs: i64) -> PriorityBudget {
        PriorityBudget {
            priority,
            grace_period_seconds: secs,
        }
    }

    fn names(g: &ShutdownGroup) -> Vec<&str> {
        g.pods
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    /// Upstream `Test_migrateConfig`.
    #[test]
    fn migrate_config_as_upstream() {
        let s = Duration::from_secs;
        let cases: [(&str, Duration, Duration, Vec<PriorityBudget>); 4] = [
            (
                "both shutdownGracePeriodRequested and shutdownGracePeriodCriticalPods",
                s(300),
                s(120),
                vec![budget(0, 180), budget(SYSTEM_CRITICAL_PRIORITY, 120)],
            ),
            (
                "only shutdownGracePeriodRequested",
                s(100),
                s(0),
                vec![budget(0, 100), budget(SYSTEM_CRITICAL_PRIORITY, 0)],
            ),
            ("empty configuration", s(0), s(0), vec![]),
            ("wrong configuration", s(1), s(100), vec![]),
        ];
        for (name, grace, critical, want) in cases {
            assert_eq!(migrate_config(grace, critical), want, "{name}");
        }
    }

    /// Upstream `Test_groupByPriority`, case "migrate config".
    #[test]
    fn group_by_priority_migrated_config() {
        let groups = migrate_config(Duration::from_secs(300), Duration::from_secs(120));
        let got = group_by_priority(
            &groups,
            vec![
                pod("normal-pod", 0, None),
                pod("highest-user-definable-pod", HIGHEST_USER_DEFINABLE, None),
                pod("critical-pod", SYSTEM_CRITICAL_PRIORITY, None),
            ],
        );
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].budget, budget(0, 180));
        assert_eq!(names(&got[0]), ["normal-pod", "highest-user-definable-pod"]);
        assert_eq!(got[1].budget, budget(SYSTEM_CRITICAL_PRIORITY, 120));
        assert_eq!(names(&got[1]), ["critical-pod"]);
    }

    /// Upstream `Test_groupByPriority`, case "pod priority": below the lowest → lowest, between
    /// two → the lower, above the highest → highest.
    #[test]
    fn group_by_priority_pod_priority() {
        let groups = [budget(1, 10), budget(2, 20), budget(3, 30), budget(4, 40)];
        let pods = (0..=5).map(|i| pod(&format!("pod-{i}"), i, None)).collect();
        let got = group_by_priority(&groups, pods);
        let want: [&[&str]; 4] = [
            &["pod-0", "pod-1"],
            &["pod-2"],
            &["pod-3"],
            &["pod-4", "pod-5"],
        ];
        for (g, (want, b)) in got.iter().zip(want.iter().zip(groups)) {
            assert_eq!(g.budget, b);
            assert_eq!(names(g), *want);
        }
    }

    #[test]
    fn group_by_priority_between_sparse_groups_and_without_priority() {
        let groups = [
            budget(0, 5),
            budget(1000, 5),
            budget(SYSTEM_CRITICAL_PRIORITY, 5),
        ];
        let mut no_priority = pod("no-priority", 0, None);
        no_priority.spec.as_mut().unwrap().priority = None;
        let got = group_by_priority(
            &groups,
            vec![
                pod("negative", -5, None),
                no_priority,
                pod("p999", 999, None),
                pod("p1000", 1000, None),
                pod("node-critical", 2_000_001_000, None),
                pod("cluster-critical", SYSTEM_CRITICAL_PRIORITY, None),
            ],
        );
        assert_eq!(names(&got[0]), ["negative", "no-priority", "p999"]);
        assert_eq!(names(&got[1]), ["p1000"]);
        assert_eq!(names(&got[2]), ["node-critical", "cluster-critical"]);
        assert!(group_by_priority(&[], vec![pod("a", 0, None)]).is_empty());
    }

    /// Upstream `TestManager`'s grace periods: the group's budget, or the pod's own when it is
    /// not longer (total=30s, critical=10s; total=30s, critical=0; all time to critical pods).
    #[test]
    #[allow(clippy::type_complexity)]
    fn pod_grace_period_as_upstream_test_manager() {
        let s = Duration::from_secs;
        let cases: [(Duration, Duration, &str, i32, Option<i64>, i64); 9] = [
            (s(30), s(10), "normal-pod-nil-grace-period", 0, None, 20),
            (
                s(30),
                s(10),
                "critical-pod-nil-grace-period",
                SYSTEM_CRITICAL_PRIORITY,
                None,
                10,
            ),
            (s(30), s(10), "normal-pod-grace-period", 0, Some(2), 2),
            (
                s(30),
                s(10),
                "critical-pod-grace-period",
                SYSTEM_CRITICAL_PRIORITY,
                Some(2),
                2,
            ),
            (
                s(30),
                s(10),
                "normal-pod-long-grace-period",
                0,
                Some(1000),
                20,
            ),
            (s(30), s(0), "normal-pod-nil-grace-period", 0, None, 30),
            (
                s(30),
                s(0),
                "critical-pod-nil-grace-period",
                SYSTEM_CRITICAL_PRIORITY,
                None,
                0,
            ),
            (s(5), s(5), "normal-pod-nil-grace-period", 0, None, 0),
            (
                s(5),
                s(5),
                "critical-pod-nil-grace-period",
                SYSTEM_CRITICAL_PRIORITY,
                None,
                5,
            ),
        ];
        for (grace, critical, name, priority, own, want) in cases {
            let groups = migrate_config(grace, critical);
            let grouped = group_by_priority(&groups, vec![pod(name, priority, own)]);
            let g = grouped.iter().find(|g| !g.pods.is_empty()).unwrap();
            assert_eq!(
                pod_grace_period(&g.pods[0], &g.budget),
                want,
                "{name} with total={grace:?} critical={critical:?}"
            );
        }
    }

    #[test]
    fn kill_grace_keeps_a_reserve_for_the_final_status() {
        // (budget, pod's own grace) → kill grace
        let cases = [
            ((3, None), 2),
            ((3, Some(1)), 1),
            ((6, None), 3),
            ((10, None), 7),
            ((20, Some(10)), 10),
            ((20, Some(19)), 17),
            ((120, None), 117),
            ((1, None), 1),
            ((2, None), 1),
            ((0, None), 0),
            ((-5, None), -5),
        ];
        for ((secs, own), want) in cases {
            let b = budget(0, secs);
            assert_eq!(
                kill_grace_period(&pod("p", 0, own), &b),
                want,
                "{secs} {own:?}"
            );
        }
        assert_eq!(status_reserve(i64::MAX), 3);
        assert_eq!(status_reserve(i64::MIN), 0);
    }

    #[test]
    fn settings_from_config_prefer_by_priority_and_sort_it() {
        let by = [
            ShutdownGracePeriodByPodPriority {
                priority: 100_000,
                shutdown_grace_period_seconds: 5,
            },
            ShutdownGracePeriodByPodPriority {
                priority: 0,
                shutdown_grace_period_seconds: 20,
            },
        ];
        let s = NodeShutdownSettings::from_config(Duration::ZERO, Duration::ZERO, &by).unwrap();
        assert_eq!(s.groups, [budget(0, 20), budget(100_000, 5)]);
        assert_eq!(s.period_requested(), Duration::from_secs(25));
        assert_eq!(
            s.logind_conf_dir,
            PathBuf::from("/etc/systemd/logind.conf.d")
        );
        let s = NodeShutdownSettings::from_config(
            Duration::from_secs(30),
            Duration::from_secs(10),
            &[],
        )
        .unwrap();
        assert_eq!(
            s.groups,
            [budget(0, 20), budget(SYSTEM_CRITICAL_PRIORITY, 10)]
        );
        assert_eq!(s.period_requested(), Duration::from_secs(30));
        // Upstream `TestFeatureEnabled`: a zero grace period disables the manager.
        assert!(NodeShutdownSettings::from_config(Duration::ZERO, Duration::ZERO, &[]).is_none());
    }

    /// Hostile settings: negative budgets never make a negative or overflowing total.
    #[test]
    fn period_requested_ignores_negative_and_saturates() {
        assert_eq!(
            period_requested(&[budget(0, -30), budget(1, 10)]),
            Duration::from_secs(10)
        );
        assert_eq!(
            period_requested(&[budget(0, i64::MAX), budget(1, i64::MAX)]),
            Duration::from_secs(u64::try_from(i64::MAX).unwrap())
        );
    }
}
