//! The sync loop's housekeeping against the fake runtime and a recording syncer, with paused
//! time: which runtime pods it kills as orphans when the sources turn ready.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::RuntimeService;
use rkubelet_cri::fake::FakeRuntime;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::container::cache::PodCache;
use crate::container::{PodStatus, RunningPod};
use crate::kuberuntime::runtime_status::testutil::{container, pod, run_sandbox, spec};
use crate::pod_workers::{PodSyncer, SyncError, WorkerTimings};
use crate::types::PodSource;

/// Records which pods were synced and which runtime pods were killed as orphans.
#[derive(Default)]
struct Recorder {
    synced: Mutex<Vec<String>>,
    orphans_killed: Mutex<Vec<String>>,
}

#[async_trait]
impl PodSyncer for Recorder {
    async fn sync_pod(
        &self,
        _: UpdateType,
        pod: &Pod,
        _: &PodStatus,
        _: &CancellationToken,
    ) -> Result<bool, SyncError> {
        self.synced.lock().unwrap().push(pod.uid().to_owned());
        Ok(false)
    }

    async fn sync_terminating_pod(&self, _: &Pod, _: &PodStatus, _: i64) -> Result<(), SyncError> {
        Ok(())
    }

    async fn sync_terminating_runtime_pod(&self, running: &RunningPod) -> Result<(), SyncError> {
        self.orphans_killed
            .lock()
            .unwrap()
            .push(running.uid.clone());
        Ok(())
    }

    async fn sync_terminated_pod(&self, _: &Pod, _: &PodStatus, _: bool) -> Result<(), SyncError> {
        Ok(())
    }

    fn round_finished(&self, _: &str) {}
}

/// A pod running in the fake runtime with one started container `c`.
async fn running(rt: &FakeRuntime, uid: &str, name: &str) -> Pod {
    let mut p = pod(uid, name);
    if let Some(s) = p.spec.as_mut() {
        s.containers = vec![spec("c")];
    }
    let sandbox = run_sandbox(rt, &p, 0, false).await;
    container(rt, &sandbox, &p, &spec("c"), 0, true).await;
    p
}

/// A sync loop over `rt` with a recording syncer and a stand-in PLEG that keeps the pod cache
/// fresh, not yet running.
struct Built {
    sync_loop: SyncLoop,
    recorder: Arc<Recorder>,
    cancel: CancellationToken,
    stand_in_pleg: tokio::task::JoinHandle<()>,
}

fn build(rt: &FakeRuntime, ready: SourcesReady) -> Built {
    let cancel = CancellationToken::new();
    let cache = PodCache::new();
    let stand_in_pleg = {
        let (cache, cancel) = (cache.clone(), cancel.clone());
        tokio::spawn(async move {
            while !cancel.is_cancelled() {
                cache.update_time(Instant::now());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let recorder = Arc::new(Recorder::default());
    let workers = PodWorkers::new(
        recorder.clone(),
        cache,
        WorkerTimings::default(),
        cancel.child_token(),
    );
    let runtime: Arc<dyn RuntimeService> = Arc::new(rt.clone());
    let sync_loop = SyncLoop::new(
        workers,
        StatusManager::new(),
        runtime,
        ready,
        SyncLoopHealth::new(Duration::from_secs(10)),
        LoopTimings::default(),
    );
    Built {
        sync_loop,
        recorder,
        cancel,
        stand_in_pleg,
    }
}

/// The runtime pods killed as orphans, each once (the recorder leaves the runtime as it is,
/// so every housekeeping round kills an orphan again).
fn orphans_killed(recorder: &Recorder) -> Vec<String> {
    let mut killed = recorder.orphans_killed.lock().unwrap().clone();
    killed.dedup();
    killed
}

/// A running sync loop (see `build`).
struct Fixture {
    recorder: Arc<Recorder>,
    applied: SourcesApplied,
    pods: watch::Receiver<crate::types::PodsSnapshot>,
    cancel: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Fixture {
    fn start(rt: &FakeRuntime, updates: mpsc::Receiver<PodUpdate>, ready: SourcesReady) -> Self {
        let b = build(rt, ready);
        let (applied, pods) = (b.sync_loop.sources_applied(), b.sync_loop.pods());
        let (pleg_tx, pleg_rx) = mpsc::channel(8);
        let (loop_cancel, sync_loop) = (b.cancel.clone(), b.sync_loop);
        let run = tokio::spawn(async move {
            let _pleg_tx = pleg_tx;
            sync_loop.run(updates, pleg_rx, loop_cancel).await;
        });
        Self {
            recorder: b.recorder,
            applied,
            pods,
            cancel: b.cancel,
            tasks: vec![b.stand_in_pleg, run],
        }
    }

    fn orphans_killed(&self) -> Vec<String> {
        orphans_killed(&self.recorder)
    }

    fn synced(&self, uid: &str) -> bool {
        self.recorder
            .synced
            .lock()
            .unwrap()
            .iter()
            .any(|u| u == uid)
    }

    async fn stop(self) {
        self.cancel.cancel();
        for task in self.tasks {
            task.await.unwrap();
        }
    }
}

fn file_add(pods: Vec<Pod>) -> PodUpdate {
    PodUpdate::new(PodOp::Add, PodSource::File, pods)
}

/// A kubelet restart: the file source's first `Set` is merged while the loop's first
/// housekeeping tick fires. The merger queues the pods before it publishes the source as seen,
/// so the loop must apply what is queued before it decides who is an orphan: the adopted pod
/// keeps running and only the pod no source has is killed. Only then do the sources count as
/// applied for the other cleaners (mirror pods, CPU assignments, container GC).
#[tokio::test(start_paused = true)]
async fn a_pod_queued_as_its_source_turns_ready_is_not_killed_as_an_orphan() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    let adopted = running(&rt, "uid-adopted", "adopted").await;
    running(&rt, "uid-orphan", "orphan").await;

    let (updates_tx, updates_rx) = mpsc::channel(8);
    let pending = Mutex::new(Some(file_add(vec![adopted])));
    // The merger's order: queue the source's pods, then publish it as seen. Here the pods are
    // queued at the very moment the loop first asks.
    let ready: SourcesReady = Box::new(move || {
        if let Some(u) = pending.lock().unwrap().take() {
            updates_tx.try_send(u).unwrap();
        }
        true
    });
    let f = Fixture::start(&rt, updates_rx, ready);
    assert!(!f.applied.ready());

    // Several housekeeping rounds.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        f.orphans_killed(),
        ["uid-orphan"],
        "only the pod no source has"
    );
    assert!(f.synced("uid-adopted"), "the adopted pod gets a worker");
    assert!(f.applied.ready());
    assert!(f.pods.borrow().iter().any(|p| p.uid() == "uid-adopted"));
    f.stop().await;
}

/// Until every source has reported, housekeeping kills nothing and the sources do not count
/// as applied, while the pods already delivered run.
#[tokio::test(start_paused = true)]
async fn nothing_is_an_orphan_until_every_source_has_reported() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    let delivered = running(&rt, "uid-delivered", "delivered").await;
    running(&rt, "uid-unknown", "unknown").await;
    let (updates_tx, updates_rx) = mpsc::channel(8);
    updates_tx.send(file_add(vec![delivered])).await.unwrap();
    let f = Fixture::start(&rt, updates_rx, Box::new(|| false));

    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(f.orphans_killed(), Vec::<String>::new());
    assert!(f.synced("uid-delivered"));
    assert!(!f.applied.ready());
    f.stop().await;
}

/// Housekeeping reuses the PLEG's listing while it is recent and shows nothing to clean up:
/// no CRI listing of its own. A listing that shows an orphan is checked against a new one
/// first, so a pod that has gone since is not killed; an old listing is not used at all.
#[tokio::test(start_paused = true)]
async fn housekeeping_reuses_a_recent_pleg_listing_and_checks_orphans_afresh() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    let known = running(&rt, "uid-known", "known").await;
    running(&rt, "uid-gone", "gone").await;
    let mut b = build(&rt, Box::new(|| true));
    let (pleg_tx, _pleg_rx) = mpsc::channel(64);
    let mut pleg = crate::pleg::GenericPleg::new(
        Arc::new(rt.clone()),
        PodCache::new(),
        Duration::from_secs(1),
        pleg_tx,
    );
    b.sync_loop = b.sync_loop.with_latest_listing(pleg.latest_listing());
    b.sync_loop.handle_update(file_add(vec![known]));
    let listings = || {
        (
            rt.call_count("ListPodSandbox"),
            rt.call_count("ListContainers"),
        )
    };

    // `gone` is still in the runtime but no source has it: the PLEG's listing shows an orphan,
    // which a new listing confirms.
    pleg.relist().await.unwrap();
    rt.clear_calls();
    b.sync_loop.cleanup_pods().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        listings(),
        (1, 1),
        "an orphan is confirmed by a listing of its own"
    );
    assert_eq!(orphans_killed(&b.recorder), ["uid-gone"]);

    // `gone` leaves the runtime after the PLEG listed it: a new listing shows there is nothing
    // to kill.
    b.recorder.orphans_killed.lock().unwrap().clear();
    pleg.relist().await.unwrap();
    let sandbox = rt
        .list_pod_sandbox(rkubelet_cri::api::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|s| s.metadata.as_ref().is_some_and(|m| m.uid == "uid-gone"))
        .unwrap();
    for c in rt.containers() {
        if c.pod_sandbox_id == sandbox.id {
            rt.remove_container(rkubelet_cri::api::RemoveContainerRequest {
                container_id: c.id.clone(),
            })
            .await
            .unwrap();
        }
    }
    rt.remove_pod_sandbox(rkubelet_cri::api::RemovePodSandboxRequest {
        pod_sandbox_id: sandbox.id,
    })
    .await
    .unwrap();
    rt.clear_calls();
    b.sync_loop.cleanup_pods().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(listings(), (1, 1));
    assert_eq!(orphans_killed(&b.recorder), Vec::<String>::new());

    // Only known pods now: the PLEG's listing serves, no listing of housekeeping's own.
    pleg.relist().await.unwrap();
    rt.clear_calls();
    b.sync_loop.cleanup_pods().await;
    assert_eq!(listings(), (0, 0), "the recent PLEG listing serves");

    // Older than a housekeeping period: not used.
    tokio::time::advance(Duration::from_secs(3)).await;
    rt.clear_calls();
    b.sync_loop.cleanup_pods().await;
    assert_eq!(listings(), (1, 1), "an old PLEG listing is not used");

    b.cancel.cancel();
    b.stand_in_pleg.await.unwrap();
}

#[test]
fn a_clean_cgroup_sweep_stands_until_the_pods_change_or_a_minute_passes() {
    let t0 = std::time::Instant::now();
    let now = Instant::from_std(t0);
    let pods =
        |uids: &[&str]| -> HashSet<String> { uids.iter().map(|u| (*u).to_owned()).collect() };
    assert!(
        cgroup_sweep_due(None, &pods(&["a"]), now),
        "never swept, or orphans left"
    );
    let last = (pods(&["a", "b"]), now);
    let later = now + Duration::from_secs(10);
    assert!(!cgroup_sweep_due(Some(&last), &pods(&["a", "b"]), later));
    assert!(
        cgroup_sweep_due(Some(&last), &pods(&["a"]), later),
        "a pod went: its cgroup may be an orphan"
    );
    assert!(cgroup_sweep_due(
        Some(&last),
        &pods(&["a", "b", "c"]),
        later
    ));
    assert!(cgroup_sweep_due(
        Some(&last),
        &pods(&["a", "b"]),
        now + CGROUP_RESWEEP
    ));
}
