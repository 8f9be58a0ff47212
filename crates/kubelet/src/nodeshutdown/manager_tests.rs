//! Paused-time tests of the shutdown processing with a recording pod killer: group order and
//! budgets (upstream `TestManager`, `Test_managerImpl_processShutdownEvent`), the lock's
//! release, the final pod status, admission, the state file and the metrics.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::logind::InhibitLock;
use super::manager::{
    ActivePodsFn, GO_ZERO_TIME, StoredState, go_duration, shutdown_status, unix_seconds,
};
use super::*;
use crate::admit::AdmitHandler;
use crate::events::CollectingRecorder;
use crate::metrics::KubeletMetrics;

/// Records kills; a pod is done `done_after` its kill (never when absent from the map).
#[derive(Default)]
struct FakeKiller {
    start: Mutex<Option<Instant>>,
    kills: Mutex<Vec<(Duration, String, i64)>>,
    killed_at: Mutex<HashMap<String, Instant>>,
    done_after: HashMap<String, Duration>,
}

impl FakeKiller {
    fn new(done_after: &[(&str, u64)]) -> Self {
        Self {
            done_after: done_after
                .iter()
                .map(|(n, s)| ((*n).to_owned(), Duration::from_secs(*s)))
                .collect(),
            ..Self::default()
        }
    }

    fn kills(&self) -> Vec<(Duration, String, i64)> {
        self.kills.lock().unwrap().clone()
    }
}

impl PodKiller for FakeKiller {
    fn kill(&self, pod: &Pod, grace_period: i64) {
        let now = Instant::now();
        let start = *self.start.lock().unwrap().get_or_insert(now);
        let name = pod.metadata.name.clone().unwrap();
        self.kills
            .lock()
            .unwrap()
            .push((now - start, name.clone(), grace_period));
        self.killed_at.lock().unwrap().insert(name, now);
    }

    fn is_done(&self, uid: &str) -> bool {
        let Some(at) = self.killed_at.lock().unwrap().get(uid).copied() else {
            return false;
        };
        self.done_after
            .get(uid)
            .is_some_and(|d| Instant::now() >= at + *d)
    }
}

fn pod(name: &str, priority: i32, grace: Option<i64>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
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

struct Fixture {
    manager: NodeShutdownManager,
    killer: Arc<FakeKiller>,
    metrics: KubeletMetrics,
    dir: tempfile::TempDir,
}

fn fixture(groups: &[(i32, i64)], pods: Vec<Pod>, killer: FakeKiller) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let killer = Arc::new(killer);
    let metrics = KubeletMetrics::new("n");
    let state = ShutdownState::default();
    let active: ActivePodsFn = Arc::new(move || pods.clone());
    let settings = NodeShutdownSettings {
        groups: groups
            .iter()
            .map(|&(priority, secs)| PriorityBudget {
                priority,
                grace_period_seconds: secs,
            })
            .collect(),
        logind_conf_dir: dir.path().join("logind.conf.d"),
        bus_address: None,
        reconnect_period: RECONNECT_PERIOD,
    };
    let manager = NodeShutdownManager::new(
        settings,
        NodeShutdownInputs {
            state,
            active_pods: active,
            killer: killer.clone(),
            events: Arc::new(CollectingRecorder::default()),
            metrics: Some(metrics.clone()),
            node_sync: Arc::new(Notify::new()),
            state_dir: dir.path().to_owned(),
        },
    );
    Fixture {
        manager,
        killer,
        metrics,
        dir,
    }
}

/// A lock whose release the test sees as end-of-file on `peer`.
fn observed_lock() -> (InhibitLock, UnixStream) {
    let (ours, peer) = UnixStream::pair().unwrap();
    peer.set_nonblocking(true).unwrap();
    (InhibitLock::from_fd(ours.into()), peer)
}

fn released(peer: &mut UnixStream) -> bool {
    let mut buf = [0u8; 1];
    match peer.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(e) => panic!("reading the lock's peer: {e}"),
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Lowest priority first; a group whose pods stopped ends early, one whose pods did not ends
/// at its budget (upstream "kill pod func take too long"); the lock goes after the last group.
#[tokio::test(start_paused = true)]
async fn groups_stop_lowest_priority_first_each_within_its_budget() {
    let pods = vec![
        pod("critical", 2_000_001_000, None),
        pod("p1000", 1000, Some(3)),
        pod("p0", 0, None),
    ];
    let killer = FakeKiller::new(&[("p0", 2), ("critical", 1)]);
    let f = fixture(
        &[(0, 10), (1000, 10), (SYSTEM_CRITICAL_PRIORITY, 10)],
        pods,
        killer,
    );
    let (lock, mut peer) = observed_lock();
    let manager = Arc::new(f.manager);
    let task = tokio::spawn({
        let m = manager.clone();
        async move { m.process_shutdown(Some(lock)).await }
    });
    // p1000 never stops: its group waits its whole budget, and the lock is still held.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(!released(&mut peer), "lock released before the last group");
    task.await.unwrap();
    assert!(released(&mut peer), "lock still held after the last group");
    let kills = f.killer.kills();
    let order: Vec<(&str, i64)> = kills.iter().map(|(_, n, g)| (n.as_str(), *g)).collect();
    // Budget 10 s less the 3 s status reserve; p1000's own 3 s is shorter.
    assert_eq!(order, [("p0", 7), ("p1000", 3), ("critical", 7)]);
    let at: Vec<f64> = kills.iter().map(|(t, _, _)| secs(*t)).collect();
    assert_eq!(at[0], 0.0);
    // p0 stopped after 2 s (polled every 100 ms): its group ended early.
    assert!((2.0..=2.2).contains(&at[1]), "p1000 killed at {at:?}");
    // p1000's group ran out its 10 s budget.
    assert!((12.0..=12.3).contains(&at[2]), "critical killed at {at:?}");
}

/// No pods in a range: no waiting for it (upstream skips empty groups).
#[tokio::test(start_paused = true)]
async fn empty_groups_cost_no_time() {
    let killer = FakeKiller::new(&[("critical", 1)]);
    let f = fixture(
        &[(0, 30), (SYSTEM_CRITICAL_PRIORITY, 30)],
        vec![pod("critical", SYSTEM_CRITICAL_PRIORITY, None)],
        killer,
    );
    let start = Instant::now();
    f.manager.process_shutdown(None).await;
    assert!(
        start.elapsed() < Duration::from_millis(1300),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(f.killer.kills().len(), 1);
}

/// A zero budget (upstream "all time to critical pods") kills at once without waiting.
#[tokio::test(start_paused = true)]
async fn zero_budget_group_does_not_wait() {
    let f = fixture(
        &[(0, 0), (SYSTEM_CRITICAL_PRIORITY, 5)],
        vec![
            pod("normal", 0, None),
            pod("critical", SYSTEM_CRITICAL_PRIORITY, None),
        ],
        FakeKiller::new(&[]),
    );
    let start = Instant::now();
    f.manager.process_shutdown(None).await;
    let kills = f.killer.kills();
    assert_eq!(kills[0].1, "normal");
    assert_eq!(kills[0].2, 0);
    assert_eq!(secs(kills[1].0), 0.0, "critical group started at once");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_millis(5100),
        "{took:?}"
    );
}

/// The start and end times go to the gauges and to `graceful_node_shutdown_state` (Go's JSON
/// of `time.Time`); a restarted kubelet shows them again (upstream `setMetrics`).
#[tokio::test(start_paused = true)]
async fn times_are_stored_and_restored_after_a_restart() {
    let before = Timestamp::now().as_second() as f64;
    let f = fixture(&[(0, 1)], vec![], FakeKiller::new(&[]));
    f.manager.process_shutdown(None).await;
    let start = f
        .metrics
        .value("kubelet_graceful_shutdown_start_time_seconds", &[])
        .unwrap();
    let end = f
        .metrics
        .value("kubelet_graceful_shutdown_end_time_seconds", &[])
        .unwrap();
    assert!(start >= before && end >= start, "start {start} end {end}");
    let stored: StoredState =
        serde_json::from_slice(&std::fs::read(f.dir.path().join(STATE_FILE)).unwrap()).unwrap();
    assert_eq!(unix_seconds(&stored.start_time), start);
    assert_eq!(unix_seconds(&stored.end_time), end);
    let text = std::fs::read_to_string(f.dir.path().join(STATE_FILE)).unwrap();
    assert!(text.starts_with("{\"startTime\":\""), "{text}");

    // A new manager over the same directory restores them.
    let again = fixture(&[(0, 1)], vec![], FakeKiller::new(&[]));
    std::fs::copy(
        f.dir.path().join(STATE_FILE),
        again.dir.path().join(STATE_FILE),
    )
    .unwrap();
    again.manager.load_stored_metrics();
    let restored = |name| again.metrics.value(name, &[]).unwrap();
    assert_eq!(
        restored("kubelet_graceful_shutdown_start_time_seconds"),
        start
    );
    assert_eq!(restored("kubelet_graceful_shutdown_end_time_seconds"), end);
}

/// Go's zero time and an upstream-written file load; a corrupt file is logged, not fatal.
#[test]
fn state_file_from_upstream_and_corrupt_ones() {
    let f = fixture(&[(0, 1)], vec![], FakeKiller::new(&[]));
    let path = f.dir.path().join(STATE_FILE);
    std::fs::write(
        &path,
        format!("{{\"startTime\":\"2024-05-01T10:00:00.123456789+02:00\",\"endTime\":\"{GO_ZERO_TIME}\"}}"),
    )
    .unwrap();
    f.manager.load_stored_metrics();
    let v = |name| f.metrics.value(name, &[]).unwrap();
    assert_eq!(
        v("kubelet_graceful_shutdown_start_time_seconds"),
        1_714_550_400.0
    );
    assert_eq!(v("kubelet_graceful_shutdown_end_time_seconds"), 0.0);
    for garbage in ["", "{", "[1,2]", "{\"startTime\": 5}", "\u{0}\u{1}"] {
        std::fs::write(&path, garbage).unwrap();
        f.metrics.set_graceful_shutdown_seconds(7.0, 8.0);
        f.manager.load_stored_metrics();
        assert_eq!(
            v("kubelet_graceful_shutdown_start_time_seconds"),
            7.0,
            "{garbage:?}"
        );
    }
    assert_eq!(unix_seconds("not a time"), 0.0);
}

fn disruption(s: &PodStatus) -> Vec<&PodCondition> {
    s.conditions
        .iter()
        .flatten()
        .filter(|c| c.type_ == "DisruptionTarget")
        .collect()
}

/// Upstream `TestManager` "verify pod status": running and failed pods end `Failed`, a
/// succeeded one stays `Succeeded`; all get the reason, message and `DisruptionTarget`.
#[test]
fn final_status_as_upstream() {
    let now = Timestamp::now();
    for (phase, want) in [
        ("Running", "Failed"),
        ("Failed", "Failed"),
        ("Succeeded", "Succeeded"),
        ("Pending", "Failed"),
    ] {
        let old = PodStatus {
            phase: Some(phase.to_owned()),
            ..Default::default()
        };
        let s = shutdown_status(Some(old), now);
        assert_eq!(s.phase.as_deref(), Some(want), "{phase}");
        assert_eq!(s.reason.as_deref(), Some("Terminated"));
        assert_eq!(
            s.message.as_deref(),
            Some("Pod was terminated in response to imminent node shutdown.")
        );
        let dt = disruption(&s);
        assert_eq!(dt.len(), 1);
        assert_eq!(dt[0].status, "True");
        assert_eq!(dt[0].reason.as_deref(), Some("TerminationByKubelet"));
        assert_eq!(dt[0].message.as_deref(), Some(MESSAGE));
    }
    // No status yet, and an earlier DisruptionTarget (e.g. an eviction's) replaced, not doubled.
    assert_eq!(shutdown_status(None, now).phase.as_deref(), Some("Failed"));
    let earlier = PodStatus {
        conditions: Some(vec![PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("EvictionByEvictionAPI".into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let s = shutdown_status(Some(earlier), now);
    assert_eq!(disruption(&s).len(), 1);
    assert_eq!(
        disruption(&s)[0].reason.as_deref(),
        Some("TerminationByKubelet")
    );
}

/// Upstream `Admit` and `ShutdownStatus`: refused while shutting down, with its reason.
#[test]
fn admission_and_readiness_follow_the_state() {
    let state = ShutdownState::default();
    let admit = state.admit_handler();
    let p = pod("new", 0, None);
    assert!(admit.admit(&p, &[]).is_ok());
    assert_eq!(state.not_ready_reason(), None);
    // Only the manager sets the state (the whole path runs in tests/it/node_shutdown.rs).
    state.clone().set_for_tests(true);
    let r = admit.admit(&p, &[]).unwrap_err();
    assert_eq!(r.reason, "NodeShutdown");
    assert_eq!(r.message, "Pod was rejected as the node is shutting down.");
    assert_eq!(
        state.not_ready_reason().as_deref(),
        Some("node is shutting down")
    );
    state.clone().set_for_tests(false);
    assert!(admit.admit(&p, &[]).is_ok());
}

#[test]
fn go_durations_in_messages() {
    let s = Duration::from_secs;
    assert_eq!(go_duration(s(30)), "30s");
    assert_eq!(go_duration(s(0)), "0s");
    assert_eq!(go_duration(s(90)), "1m30s");
    assert_eq!(go_duration(s(3600)), "1h0m0s");
    assert_eq!(go_duration(Duration::from_millis(5500)), "5.5s");
}
