//! Pod workers against a recording syncer, with paused time: updates coalesce to the latest
//! spec, a pod's work is strictly serial, kills interrupt a running sync and run
//! terminating → terminated in order, and nothing syncs a pod after it was killed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

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
            return Err(SyncError("cancelled".into()));
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
        tokio::time::sleep(Duration::from_millis(300)).await;
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
}

fn pod(uid: &str, generation: u32, grace: i64) -> Pod {
    Pod {
        metadata: ObjectMeta {
            uid: Some(uid.into()),
            name: Some(uid.into()),
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
