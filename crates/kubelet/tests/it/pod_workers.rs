//! Pod workers against a recording syncer, with paused time: updates coalesce to the latest
//! spec, a pod's work is strictly serial, kills interrupt a running sync and run
//! terminating → terminated in order, nothing syncs a pod after it was killed, a shorter grace
//! period restarts a kill, a pod re-added while terminating runs again, and static pods with
//! one full name start in turn.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet::container::cache::PodCache;
use kubelet::container::{PodStatus, RunningPod};
use kubelet::pod_workers::{
    KillOptions, PodSyncer, PodWork, PodWorkers, SyncError, UpdateType, WorkerPhase, WorkerTimings,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, PartialEq)]
enum Call {
    Sync(String, UpdateType, String),
    Terminating(String, i64),
    Terminated(String, bool),
}

#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<Call>>,
    active: Mutex<HashMap<String, usize>>,
    max_active: Mutex<HashMap<String, usize>>,
    sync_time: Mutex<Duration>,
    block_until_cancelled: Mutex<HashSet<String>>,
    /// A kill takes its whole grace period (a container that ignores SIGTERM).
    kill_takes_grace: Mutex<bool>,
    /// Every sync fails with this error.
    fail_with: Mutex<Option<String>>,
}

impl Recorder {
    fn enter(&self, uid: &str) {
        let mut a = self.active.lock().unwrap();
        let n = a.entry(uid.to_owned()).or_default();
        *n += 1;
        let mut m = self.max_active.lock().unwrap();
        let e = m.entry(uid.to_owned()).or_default();
        *e = (*e).max(*n);
    }
    fn leave(&self, uid: &str) {
        *self.active.lock().unwrap().get_mut(uid).unwrap() -= 1;
    }
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl PodSyncer for Recorder {
    async fn sync_pod(
        &self,
        t: UpdateType,
        pod: &Pod,
        _: &PodStatus,
        cancel: &CancellationToken,
    ) -> Result<bool, SyncError> {
        let uid = pod.metadata.uid.clone().unwrap();
        self.enter(&uid);
        let generation = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("gen"))
            .cloned()
            .unwrap_or_default();
        self.calls
            .lock()
            .unwrap()
            .push(Call::Sync(uid.clone(), t, generation));
        let block = self.block_until_cancelled.lock().unwrap().contains(&uid);
        let d = *self.sync_time.lock().unwrap();
        if block {
            cancel.cancelled().await;
        } else {
            tokio::time::sleep(d).await;
        }
        self.leave(&uid);
        if cancel.is_cancelled() {
            return Err(SyncError::Cancelled);
        }
        if let Some(e) = self.fail_with.lock().unwrap().clone() {
            return Err(SyncError::Other(e));
        }
        Ok(false)
    }
    async fn sync_terminating_pod(
        &self,
        pod: &Pod,
        _: &PodStatus,
        grace: i64,
    ) -> Result<(), SyncError> {
        let uid = pod.metadata.uid.clone().unwrap();
        self.enter(&uid);
        self.calls
            .lock()
            .unwrap()
            .push(Call::Terminating(uid.clone(), grace));
        let takes = if *self.kill_takes_grace.lock().unwrap() {
            Duration::from_secs(grace.unsigned_abs())
        } else {
            Duration::from_millis(300)
        };
        // Leaves the pod active if dropped mid-kill, as a cancelled runtime call would.
        tokio::time::sleep(takes).await;
        self.leave(&uid);
        Ok(())
    }
    async fn sync_terminating_runtime_pod(&self, _: &RunningPod) -> Result<(), SyncError> {
        Ok(())
    }
    async fn sync_terminated_pod(
        &self,
        pod: &Pod,
        _: &PodStatus,
        removed: bool,
    ) -> Result<(), SyncError> {
        let uid = pod.metadata.uid.clone().unwrap();
        self.calls
            .lock()
            .unwrap()
            .push(Call::Terminated(uid, removed));
        Ok(())
    }

    fn round_finished(&self, _: &str) {}
}

fn pod(uid: &str, generation: u32, grace: i64) -> Pod {
    named_pod(uid, uid, generation, grace)
}

fn named_pod(uid: &str, name: &str, generation: u32, grace: i64) -> Pod {
    Pod {
        metadata: ObjectMeta {
            uid: Some(uid.into()),
            name: Some(name.into()),
            namespace: Some("default".into()),
            labels: Some(BTreeMap::from([("gen".to_owned(), generation.to_string())])),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            termination_grace_period_seconds: Some(grace),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Workers plus a stand-in PLEG that keeps the cache fresh.
fn setup(rec: Arc<Recorder>) -> (PodWorkers, CancellationToken) {
    let cache = PodCache::new();
    let cancel = CancellationToken::new();
    let c2 = cache.clone();
    let stop = cancel.clone();
    tokio::spawn(async move {
        while !stop.is_cancelled() {
            c2.update_time(Instant::now());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let workers = PodWorkers::new(rec, cache, WorkerTimings::default(), cancel.clone());
    (workers, cancel)
}

async fn settle() {
    tokio::time::sleep(Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn updates_coalesce_to_the_latest_and_work_is_serial() {
    let rec = Arc::new(Recorder::default());
    *rec.sync_time.lock().unwrap() = Duration::from_secs(1);
    let (w, cancel) = setup(rec.clone());
    w.update_pod(PodWork::sync(UpdateType::Create, pod("a", 0, 30)));
    tokio::time::sleep(Duration::from_millis(300)).await; // first sync is running
    for generation in 1..=9 {
        w.update_pod(PodWork::sync(UpdateType::Update, pod("a", generation, 30)));
    }
    w.update_pod(PodWork::sync(UpdateType::Create, pod("b", 0, 30)));
    settle().await;
    let a: Vec<Call> = rec
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Sync(u, ..) if u == "a"))
        .collect();
    assert_eq!(
        a,
        vec![
            Call::Sync("a".into(), UpdateType::Create, "0".into()),
            Call::Sync("a".into(), UpdateType::Update, "9".into()),
        ],
        "nine queued updates collapse into one sync of the newest spec"
    );
    assert_eq!(rec.max_active.lock().unwrap().get("a"), Some(&1));
    assert!(
        rec.calls()
            .contains(&Call::Sync("b".into(), UpdateType::Create, "0".into()))
    );
    cancel.cancel();
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn kill_interrupts_sync_then_terminates_in_order() {
    let rec = Arc::new(Recorder::default());
    rec.block_until_cancelled.lock().unwrap().insert("k".into());
    let (w, cancel) = setup(rec.clone());
    w.update_pod(PodWork::sync(UpdateType::Create, pod("k", 0, 30)));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(w.phase("k"), Some(WorkerPhase::Syncing));
    let killed_at = Instant::now();
    w.update_pod(PodWork::kill(
        pod("k", 1, 30),
        KillOptions {
            grace_period_override: Some(5),
            removed: true,
        },
    ));
    // A later grace period can only shorten, never extend, the kill.
    w.update_pod(PodWork::kill(
        pod("k", 1, 30),
        KillOptions {
            grace_period_override: Some(60),
            removed: true,
        },
    ));
    // Syncs requested after the kill are ignored.
    w.update_pod(PodWork::sync(UpdateType::Update, pod("k", 2, 30)));
    settle().await;
    assert_eq!(
        rec.calls(),
        vec![
            Call::Sync("k".into(), UpdateType::Create, "0".into()),
            Call::Terminating("k".into(), 5),
            Call::Terminated("k".into(), true),
        ]
    );
    assert_eq!(w.phase("k"), Some(WorkerPhase::Finished));
    assert!(killed_at.elapsed() < Duration::from_secs(10));
    // Housekeeping forgets the finished, undesired worker.
    assert_eq!(w.sync_known_pods(&HashSet::new()), vec!["k".to_owned()]);
    assert_eq!(w.sizes(), (0, 0));
    cancel.cancel();
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pods_missing_from_known_set_are_terminated_with_spec_grace() {
    let rec = Arc::new(Recorder::default());
    let (w, cancel) = setup(rec.clone());
    w.update_pod(PodWork::sync(UpdateType::Create, pod("x", 0, 12)));
    w.update_pod(PodWork::sync(UpdateType::Create, pod("y", 0, 12)));
    settle().await;
    w.sync_known_pods(&HashSet::from(["y".to_owned()]));
    settle().await;
    let calls = rec.calls();
    assert!(
        calls.contains(&Call::Terminating("x".into(), 12)),
        "{calls:?}"
    );
    assert!(calls.contains(&Call::Terminated("x".into(), true)));
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c, Call::Terminating(u, _) if u == "y"))
    );
    assert_eq!(w.phase("y"), Some(WorkerPhase::Syncing));
    cancel.cancel();
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn resync_is_queued_after_each_sync() {
    let rec = Arc::new(Recorder::default());
    let (w, cancel) = setup(rec.clone());
    w.update_pod(PodWork::sync(UpdateType::Create, pod("r", 0, 30)));
    settle().await;
    assert!(
        w.take_due(Instant::now()).is_empty(),
        "not due before syncFrequency"
    );
    tokio::time::sleep(Duration::from_secs(64)).await;
    assert_eq!(w.take_due(Instant::now()), vec!["r".to_owned()]);
    cancel.cancel();
    w.shutdown().await;
}

/// A pod from the file source (a static pod) named `name`.
fn static_pod(uid: &str, name: &str, grace: i64) -> Pod {
    let mut p = named_pod(uid, name, 0, grace);
    p.metadata.annotations = Some(BTreeMap::from([(
        "kubernetes.io/config.source".to_owned(),
        "file".to_owned(),
    )]));
    p
}

fn removed() -> KillOptions {
    KillOptions {
        grace_period_override: None,
        removed: true,
    }
}

fn position(calls: &[Call], want: &Call) -> usize {
    calls
        .iter()
        .position(|c| c == want)
        .unwrap_or_else(|| panic!("{want:?} not in {calls:?}"))
}

#[tokio::test(start_paused = true)]
async fn shorter_grace_period_restarts_the_kill_in_flight() {
    let rec = Arc::new(Recorder::default());
    *rec.kill_takes_grace.lock().unwrap() = true;
    let (w, cancel) = setup(rec.clone());
    w.update_pod(PodWork::sync(UpdateType::Create, pod("g", 0, 30)));
    settle().await;
    let t0 = Instant::now();
    w.update_pod(PodWork::kill(pod("g", 0, 30), removed()));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        w.phase("g"),
        Some(WorkerPhase::Terminating { grace_period: 30 })
    );
    // The API server lowers deletionGracePeriodSeconds (a second delete, shorter grace).
    let mut deleting = pod("g", 0, 30);
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    deleting.metadata.deletion_grace_period_seconds = Some(4);
    w.update_pod(PodWork::sync(UpdateType::Update, deleting));
    wait_for(&w, "g", WorkerPhase::Finished, Duration::from_secs(60)).await;
    let done = t0.elapsed();
    assert!(
        done >= Duration::from_secs(9) && done < Duration::from_secs(11),
        "kill must end 4 s after the shortening at t0+5 s, not at t0+30 s: {done:?}"
    );
    assert_eq!(
        rec.calls()[1..],
        [
            Call::Terminating("g".into(), 30),
            Call::Terminating("g".into(), 4),
            Call::Terminated("g".into(), true),
        ]
    );
    cancel.cancel();
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn override_never_lengthens_deletion_grace_and_longer_kills_are_ignored() {
    let rec = Arc::new(Recorder::default());
    *rec.kill_takes_grace.lock().unwrap() = true;
    let (w, cancel) = setup(rec.clone());
    let mut deleting = pod("d", 0, 30);
    deleting.metadata.deletion_grace_period_seconds = Some(6);
    w.update_pod(PodWork::sync(UpdateType::Create, pod("d", 0, 30)));
    settle().await;
    // Upstream takes the minimum: an override of 20 does not lengthen the API's 6 s.
    w.update_pod(PodWork::kill(
        deleting.clone(),
        KillOptions {
            grace_period_override: Some(20),
            removed: false,
        },
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    w.update_pod(PodWork::kill(
        deleting,
        KillOptions {
            grace_period_override: Some(10),
            removed: false,
        },
    ));
    wait_for(&w, "d", WorkerPhase::Finished, Duration::from_secs(60)).await;
    assert_eq!(
        rec.calls()[1..],
        [
            Call::Terminating("d".into(), 6),
            Call::Terminated("d".into(), false),
        ]
    );
    cancel.cancel();
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pod_added_again_while_terminating_restarts_once_terminated() {
    let rec = Arc::new(Recorder::default());
    *rec.kill_takes_grace.lock().unwrap() = true;
    let (w, cancel) = setup(rec.clone());
    w.update_pod(PodWork::sync(UpdateType::Create, pod("m", 0, 5)));
    settle().await;
    w.update_pod(PodWork::kill(pod("m", 0, 5), removed()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Moved back into the config with the same UID while the kill runs.
    w.update_pod(PodWork::sync(UpdateType::Create, pod("m", 1, 5)));
    wait_for(&w, "m", WorkerPhase::Finished, Duration::from_secs(60)).await;
    assert_eq!(
        rec.calls()[1..],
        [
            Call::Terminating("m".into(), 5),
            Call::Terminated("m".into(), true),
        ],
        "the re-add does not interrupt the termination"
    );
    // Housekeeping forgets the finished worker although the pod is desired…
    let desired = HashSet::from(["m".to_owned()]);
    assert_eq!(w.sync_known_pods(&desired), vec!["m".to_owned()]);
    // …and its Create for desired pods without a worker starts the pod again.
    w.update_pod(PodWork::sync(UpdateType::Create, pod("m", 1, 5)));
    settle().await;
    assert_eq!(
        rec.calls().last(),
        Some(&Call::Sync("m".into(), UpdateType::Create, "1".into()))
    );
    assert_eq!(w.phase("m"), Some(WorkerPhase::Syncing));
    // A finished pod that is still desired and was not re-added stays finished.
    w.update_pod(PodWork::kill(pod("m", 1, 5), removed()));
    wait_for(&w, "m", WorkerPhase::Finished, Duration::from_secs(60)).await;
    assert!(w.sync_known_pods(&desired).is_empty());
    cancel.cancel();
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn static_pods_with_one_full_name_start_only_after_the_previous_terminated() {
    let rec = Arc::new(Recorder::default());
    *rec.kill_takes_grace.lock().unwrap() = true;
    let (w, cancel) = setup(rec.clone());
    w.update_pod(PodWork::sync(
        UpdateType::Create,
        static_pod("v1", "etcd", 20),
    ));
    settle().await;
    // A manifest edit: the old UID is removed, the new one added.
    let t0 = Instant::now();
    w.update_pod(PodWork::kill(static_pod("v1", "etcd", 20), removed()));
    w.update_pod(PodWork::sync(
        UpdateType::Create,
        static_pod("v2", "etcd", 20),
    ));
    // Another name is not held up, nor is an API pod with the same name.
    w.update_pod(PodWork::sync(
        UpdateType::Create,
        static_pod("o1", "other", 20),
    ));
    w.update_pod(PodWork::sync(
        UpdateType::Create,
        named_pod("a1", "etcd", 0, 20),
    ));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!w.is_started("v2"), "v2 must wait while v1 terminates");
    // The operator sees why (`rkubelet describe pod`).
    let report = w.report("v2").unwrap();
    assert_eq!(
        report.step,
        "waiting for the previous static pod with the same full name to terminate"
    );
    assert_eq!(
        w.report("v1").unwrap().step,
        "terminating (grace period 20s)"
    );
    assert!(w.is_started("o1") && w.is_started("a1"));
    assert_eq!(w.phase("v2"), Some(WorkerPhase::Syncing));
    wait_until_started(&w, "v2", Duration::from_secs(60)).await;
    assert!(
        t0.elapsed() >= Duration::from_secs(20),
        "{:?}",
        t0.elapsed()
    );
    assert!(
        t0.elapsed() < Duration::from_secs(22),
        "woken when v1 finished, not at a later resync: {:?}",
        t0.elapsed()
    );
    settle().await;
    let calls = rec.calls();
    assert!(
        position(&calls, &Call::Terminated("v1".into(), true))
            < position(
                &calls,
                &Call::Sync("v2".into(), UpdateType::Create, "0".into())
            ),
        "{calls:?}"
    );
    // A waiting pod killed before it started never runs anything.
    w.update_pod(PodWork::kill(static_pod("v2", "etcd", 20), removed()));
    w.update_pod(PodWork::sync(
        UpdateType::Create,
        static_pod("v3", "etcd", 20),
    ));
    w.update_pod(PodWork::kill(static_pod("v3", "etcd", 20), removed()));
    w.update_pod(PodWork::sync(
        UpdateType::Create,
        static_pod("v4", "etcd", 20),
    ));
    wait_until_started(&w, "v4", Duration::from_secs(60)).await;
    assert_eq!(w.phase("v3"), Some(WorkerPhase::Finished));
    assert!(!w.is_started("v3"));
    assert!(
        !rec.calls().iter().any(|c| match c {
            Call::Sync(u, ..) | Call::Terminating(u, _) | Call::Terminated(u, _) => u == "v3",
        }),
        "{:?}",
        rec.calls()
    );
    cancel.cancel();
    w.shutdown().await;
}

/// The worker report carries the error that stops the pod until a round succeeds.
#[tokio::test(start_paused = true)]
async fn worker_report_names_the_last_sync_error_until_a_sync_succeeds() {
    let rec = Arc::new(Recorder::default());
    let msg = "failed to \"StartContainer\" for \"c\" with CrashLoopBackOff: \"back-off 40s restarting failed container=c\"";
    *rec.fail_with.lock().unwrap() = Some(msg.to_owned());
    let (w, cancel) = setup(rec.clone());
    assert!(w.report("p1").is_none());
    w.update_pod(PodWork::sync(UpdateType::Create, pod("p1", 0, 30)));
    settle().await;
    let report = w.report("p1").unwrap();
    assert_eq!(report.phase, "Syncing");
    assert_eq!(report.step, "sync failed; retrying after back-off");
    assert_eq!(report.last_error.as_deref(), Some(msg));
    assert!(report.last_error_seconds_ago.unwrap() < 6);
    // The next retry (after the 10s back-off) succeeds: the error is gone.
    *rec.fail_with.lock().unwrap() = None;
    let start = Instant::now();
    loop {
        for uid in w.take_due(Instant::now()) {
            w.update_pod(PodWork::sync(UpdateType::Sync, pod(&uid, 0, 30)));
        }
        if w.report("p1").unwrap().last_error.is_none() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "never retried");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    settle().await;
    assert_eq!(
        w.report("p1").unwrap().step,
        "synced; resyncing periodically"
    );
    cancel.cancel();
    w.shutdown().await;
}

async fn wait_for(w: &PodWorkers, uid: &str, phase: WorkerPhase, limit: Duration) {
    let start = Instant::now();
    while w.phase(uid) != Some(phase) {
        assert!(start.elapsed() < limit, "{uid} never reached {phase:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_until_started(w: &PodWorkers, uid: &str, limit: Duration) {
    let start = Instant::now();
    while !w.is_started(uid) {
        assert!(start.elapsed() < limit, "{uid} never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
