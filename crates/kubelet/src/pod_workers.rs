//! Pod workers: one serial task per pod UID (upstream `podWorkers`). Owns each pod's lifecycle
//! state (syncing → terminating → terminated → finished), coalesces updates to the latest one,
//! and owns the resync work queue. Receives `update_pod` calls from the sync loop; calls the
//! `PodSyncer` (kuberuntime) with the freshest runtime status from the PLEG's pod cache.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::container::cache::PodCache;
use crate::container::{PodStatus, RunningPod};
use crate::metrics::KubeletMetrics;
use crate::supervisor::{POD_WORKER, catch_panic};
use crate::types::{PodExt, PodUid};

/// Why a worker is being asked to act (upstream `SyncPodType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateType {
    /// The pod is new to the kubelet.
    Create,
    /// The pod's spec changed.
    Update,
    /// Periodic or event-driven resync.
    Sync,
    /// The pod must stop running.
    Kill,
}

/// How a kill was requested.
#[derive(Debug, Clone, Default)]
pub struct KillOptions {
    /// Overrides the pod's grace period (seconds).
    pub grace_period_override: Option<i64>,
    /// The pod is gone from the config: remove its containers and sandboxes once terminated.
    pub removed: bool,
}

/// One request to a pod worker.
#[derive(Debug, Clone)]
pub struct PodWork {
    pub update_type: UpdateType,
    /// The desired pod; `None` for runtime pods the kubelet has no spec for (orphans).
    pub pod: Option<Pod>,
    /// For orphans: what the runtime runs.
    pub running_pod: Option<RunningPod>,
    pub kill: Option<KillOptions>,
}

impl PodWork {
    pub fn sync(update_type: UpdateType, pod: Pod) -> Self {
        Self {
            update_type,
            pod: Some(pod),
            running_pod: None,
            kill: None,
        }
    }

    pub fn kill(pod: Pod, options: KillOptions) -> Self {
        Self {
            update_type: UpdateType::Kill,
            pod: Some(pod),
            running_pod: None,
            kill: Some(options),
        }
    }

    /// Kill a runtime pod the kubelet has no spec for.
    pub fn kill_orphan(running: RunningPod) -> Self {
        Self {
            update_type: UpdateType::Kill,
            pod: None,
            running_pod: Some(running),
            kill: Some(KillOptions {
                grace_period_override: None,
                removed: true,
            }),
        }
    }

    fn uid(&self) -> Option<&str> {
        match (&self.pod, &self.running_pod) {
            (Some(p), _) => Some(p.uid()),
            (None, Some(r)) => Some(r.uid.as_str()),
            _ => None,
        }
    }
}

/// A failed sync; the worker logs it and retries after a backoff.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SyncError(pub String);

/// The side of the kubelet that makes a pod's runtime state match its spec.
/// Implemented by `kuberuntime::sync::Syncer`; tests use recording fakes.
#[async_trait]
pub trait PodSyncer: Send + Sync + 'static {
    /// Makes the pod run. Returns `true` when the pod reached a terminal phase
    /// (Succeeded/Failed) and should be terminated.
    async fn sync_pod(
        &self,
        update_type: UpdateType,
        pod: &Pod,
        status: &PodStatus,
        cancel: &CancellationToken,
    ) -> Result<bool, SyncError>;

    /// Stops every container and the sandbox within `grace_period` seconds.
    async fn sync_terminating_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        grace_period: i64,
    ) -> Result<(), SyncError>;

    /// Stops a runtime pod the kubelet has no spec for.
    async fn sync_terminating_runtime_pod(&self, running: &RunningPod) -> Result<(), SyncError>;

    /// Cleans up after termination; with `removed`, removes containers and sandboxes too.
    async fn sync_terminated_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        removed: bool,
    ) -> Result<(), SyncError>;
}

/// Where a worker is in the pod lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerPhase {
    Syncing,
    Terminating {
        grace_period: i64,
    },
    Terminated,
    /// Nothing left to do until the pod is forgotten.
    Finished,
}

/// Timing knobs (upstream: resync = syncFrequency, backoff = 10s).
#[derive(Debug, Clone, Copy)]
pub struct WorkerTimings {
    pub resync_interval: Duration,
    pub backoff_period: Duration,
}

impl Default for WorkerTimings {
    fn default() -> Self {
        Self {
            resync_interval: Duration::from_secs(60),
            backoff_period: Duration::from_secs(10),
        }
    }
}

struct PodSyncStatus {
    pod: Option<Pod>,
    running_pod: Option<RunningPod>,
    phase: WorkerPhase,
    pending: Option<UpdateType>,
    removed: bool,
    restart_requested: bool,
    /// Cancels an in-flight `sync_pod` when a kill arrives.
    sync_cancel: Option<CancellationToken>,
    wake: mpsc::Sender<()>,
}

impl PodSyncStatus {
    fn wake(&self) {
        // A full channel already holds a wake-up; the worker re-reads state when it runs.
        let _ = self.wake.try_send(());
    }
}

#[derive(Default)]
struct State {
    workers: HashMap<PodUid, PodSyncStatus>,
    /// uid → when the pod is due for a resync.
    work_queue: HashMap<PodUid, Instant>,
}

/// Handle to the pod workers. Cheap to clone; all clones share the same workers.
#[derive(Clone)]
pub struct PodWorkers {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    syncer: Arc<dyn PodSyncer>,
    cache: PodCache,
    timings: WorkerTimings,
    cancel: CancellationToken,
    tracker: TaskTracker,
    /// Where caught worker panics are counted (`rkubelet_task_panics_total`).
    metrics: OnceLock<KubeletMetrics>,
}

impl PodWorkers {
    pub fn new(
        syncer: Arc<dyn PodSyncer>,
        cache: PodCache,
        timings: WorkerTimings,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                syncer,
                cache,
                timings,
                cancel,
                tracker: TaskTracker::new(),
                metrics: OnceLock::new(),
            }),
        }
    }

    /// Counts caught worker panics in `metrics` (the first call wins).
    pub fn set_metrics(&self, metrics: KubeletMetrics) {
        let _ = self.inner.metrics.set(metrics);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; recovering the data is still the best we can do.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Hands work to the pod's worker, starting one if needed. Never blocks.
    pub fn update_pod(&self, work: PodWork) {
        let Some(uid) = work.uid().map(str::to_owned) else {
            warn!("pod work without a pod or runtime pod; ignored");
            return;
        };
        let mut state = self.lock();
        if !state.workers.contains_key(&uid) {
            if work.update_type == UpdateType::Kill
                && work.pod.is_none()
                && work.running_pod.is_none()
            {
                return;
            }
            let status = self.spawn_worker(&uid, &work);
            state.workers.insert(uid.clone(), status);
        }
        let Some(st) = state.workers.get_mut(&uid) else {
            return;
        };
        if let Some(pod) = work.pod {
            st.pod = Some(pod);
        }
        if work.running_pod.is_some() {
            st.running_pod = work.running_pod;
        }
        let deleting = st
            .pod
            .as_ref()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
        let kill = work.update_type == UpdateType::Kill || deleting;
        let options = work.kill.unwrap_or_default();

        if st.phase == WorkerPhase::Finished {
            if kill && options.removed && !st.removed {
                // A terminal pod that stayed in the config is now gone: clean up its content.
                st.removed = true;
                st.phase = WorkerPhase::Terminated;
                st.pending = Some(UpdateType::Kill);
                st.wake();
            } else if !kill && work.update_type == UpdateType::Create && st.removed {
                // Re-added with the same UID after removal: restart once housekeeping forgets it.
                st.restart_requested = true;
            }
            return;
        }
        if kill {
            st.removed |= options.removed;
            let grace = effective_grace_period(st.pod.as_ref(), &options);
            match st.phase {
                WorkerPhase::Syncing => {
                    info!(pod = %full_name(st), %uid, grace_period = grace, reason = if options.removed { "removed from config" } else { "kill requested" }, "pod is terminating");
                    st.phase = WorkerPhase::Terminating {
                        grace_period: grace,
                    };
                    if let Some(c) = st.sync_cancel.take() {
                        c.cancel();
                    }
                }
                WorkerPhase::Terminating { grace_period } if grace < grace_period => {
                    st.phase = WorkerPhase::Terminating {
                        grace_period: grace,
                    };
                }
                _ => {}
            }
            st.pending = Some(UpdateType::Kill);
        } else {
            // Create wins over Update wins over Sync while pending.
            st.pending = Some(match (st.pending, work.update_type) {
                (Some(UpdateType::Create), _) => UpdateType::Create,
                (Some(UpdateType::Update), UpdateType::Sync) => UpdateType::Update,
                (_, t) => t,
            });
        }
        st.wake();
    }

    fn spawn_worker(&self, uid: &str, work: &PodWork) -> PodSyncStatus {
        let (tx, rx) = mpsc::channel(1);
        let worker = Worker {
            uid: uid.to_owned(),
            workers: self.clone(),
        };
        let cancel = self.inner.cancel.clone();
        self.inner.tracker.spawn(worker.supervise(rx, cancel));
        debug!(%uid, "started pod worker");
        PodSyncStatus {
            pod: None,
            running_pod: None,
            phase: if work.pod.is_none() {
                // Orphans have no spec to run: go straight to termination.
                WorkerPhase::Terminating { grace_period: 1 }
            } else {
                WorkerPhase::Syncing
            },
            pending: None,
            removed: false,
            restart_requested: false,
            sync_cancel: None,
            wake: tx,
        }
    }

    /// Requests termination of every worker whose pod is not in `desired` (upstream
    /// `SyncKnownPods`), and forgets finished workers that are no longer desired or that asked
    /// for a restart. Returns the UIDs forgotten.
    pub fn sync_known_pods(&self, desired: &HashSet<PodUid>) -> Vec<PodUid> {
        let mut forgotten = Vec::new();
        let mut to_kill = Vec::new();
        {
            let mut state = self.lock();
            let State {
                workers,
                work_queue,
            } = &mut *state;
            workers.retain(|uid, st| {
                let wanted = desired.contains(uid);
                if st.phase == WorkerPhase::Finished && (!wanted || st.restart_requested) {
                    work_queue.remove(uid);
                    forgotten.push(uid.clone());
                    return false;
                }
                if !wanted && !st.removed {
                    to_kill.push(uid.clone());
                }
                true
            });
        }
        for uid in to_kill {
            let pod = self.lock().workers.get(&uid).and_then(|s| s.pod.clone());
            if let Some(pod) = pod {
                self.update_pod(PodWork::kill(
                    pod,
                    KillOptions {
                        grace_period_override: None,
                        removed: true,
                    },
                ));
            }
        }
        forgotten
    }

    /// Pods due for a resync (removed from the queue).
    pub fn take_due(&self, now: Instant) -> Vec<PodUid> {
        let mut state = self.lock();
        let due: Vec<PodUid> = state
            .work_queue
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(u, _)| u.clone())
            .collect();
        for uid in &due {
            state.work_queue.remove(uid);
        }
        due
    }

    fn enqueue(&self, uid: &str, after: Duration) {
        let mut state = self.lock();
        if state.workers.contains_key(uid) {
            state
                .work_queue
                .insert(uid.to_owned(), Instant::now() + after);
        }
    }

    /// The lifecycle phase of a pod's worker, if it has one.
    pub fn phase(&self, uid: &str) -> Option<WorkerPhase> {
        self.lock().workers.get(uid).map(|s| s.phase)
    }

    /// True if the pod has a worker that is not terminating or done (upstream
    /// `IsPodKnownTerminated` negated for live pods).
    pub fn is_syncing(&self, uid: &str) -> bool {
        self.phase(uid) == Some(WorkerPhase::Syncing)
    }

    /// UIDs with a worker.
    pub fn known_uids(&self) -> HashSet<PodUid> {
        self.lock().workers.keys().cloned().collect()
    }

    /// Number of workers and queued resyncs (for leak checks).
    pub fn sizes(&self) -> (usize, usize) {
        let s = self.lock();
        (s.workers.len(), s.work_queue.len())
    }

    /// Waits until every worker task has exited (after the cancellation token fired).
    pub async fn shutdown(&self) {
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }
}

fn full_name(st: &PodSyncStatus) -> String {
    match (&st.pod, &st.running_pod) {
        (Some(p), _) => p.full_name(),
        (None, Some(r)) => format!("{}/{}", r.namespace, r.name),
        _ => String::new(),
    }
}

/// The grace period to use for a kill, as upstream `calculateEffectiveGracePeriod`:
/// spec → deletionGracePeriodSeconds → override, and never below 1.
pub fn effective_grace_period(pod: Option<&Pod>, options: &KillOptions) -> i64 {
    let mut grace = pod
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    if let Some(d) = pod.and_then(|p| p.metadata.deletion_grace_period_seconds) {
        grace = d;
    }
    if let Some(o) = options.grace_period_override {
        grace = o;
    }
    grace.max(1)
}

/// What the worker snapshotted for one round of work.
struct Round {
    phase: WorkerPhase,
    update_type: UpdateType,
    pod: Option<Pod>,
    running_pod: Option<RunningPod>,
    removed: bool,
    sync_cancel: CancellationToken,
}

enum Outcome {
    /// Requeue after the resync interval.
    Resync,
    /// Retry after the backoff period.
    Retry,
    /// Move to the next phase and run it at once.
    Advance(WorkerPhase),
    /// Nothing more to do.
    Idle,
}

struct Worker {
    uid: PodUid,
    workers: PodWorkers,
}

impl Worker {
    /// Runs the worker loop; a panic in it (a bug, or a runtime answer nothing expected) is
    /// logged and counted, and the loop restarts with the pod's pending work re-queued after
    /// the backoff, so one pod's panic neither kills the process nor strands the pod.
    async fn supervise(self, mut wake: mpsc::Receiver<()>, cancel: CancellationToken) {
        loop {
            match catch_panic(self.run(&mut wake, &cancel)).await {
                Ok(()) => break,
                Err(message) => {
                    error!(uid = %self.uid, "task {POD_WORKER} panicked: {message}; restarting it");
                    if let Some(m) = self.workers.inner.metrics.get() {
                        m.inc_task_panic(POD_WORKER);
                    }
                    let backoff = self.workers.inner.timings.backoff_period;
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        () = tokio::time::sleep(jitter(&self.uid, backoff)) => {}
                    }
                    self.rerun_after_panic();
                }
            }
        }
        debug!(uid = %self.uid, "pod worker exited");
    }

    async fn run(&self, wake: &mut mpsc::Receiver<()>, cancel: &CancellationToken) {
        let mut last_sync: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                msg = wake.recv() => if msg.is_none() { break },
            }
            let Some(round) = self.begin_round() else {
                continue;
            };
            let status = match self.fresh_status(&round, last_sync, cancel).await {
                Some(s) => s,
                None => break,
            };
            let outcome = self.run_round(&round, &status).await;
            last_sync = Some(Instant::now());
            self.finish_round(outcome);
        }
    }

    /// Queues the pod's current phase again (the panicked round's update was consumed).
    fn rerun_after_panic(&self) {
        let mut state = self.workers.lock();
        if let Some(st) = state.workers.get_mut(&self.uid) {
            st.sync_cancel = None;
            let again = match st.phase {
                WorkerPhase::Finished => return,
                WorkerPhase::Syncing => UpdateType::Sync,
                WorkerPhase::Terminating { .. } | WorkerPhase::Terminated => UpdateType::Kill,
            };
            st.pending.get_or_insert(again);
            st.wake();
        }
    }

    fn begin_round(&self) -> Option<Round> {
        let mut state = self.workers.lock();
        let st = state.workers.get_mut(&self.uid)?;
        let update_type = st.pending.take()?;
        let sync_cancel = CancellationToken::new();
        if st.phase == WorkerPhase::Syncing {
            st.sync_cancel = Some(sync_cancel.clone());
        }
        Some(Round {
            phase: st.phase,
            update_type,
            pod: st.pod.clone(),
            running_pod: st.running_pod.clone(),
            removed: st.removed,
            sync_cancel,
        })
    }

    async fn fresh_status(
        &self,
        round: &Round,
        last_sync: Option<Instant>,
        cancel: &CancellationToken,
    ) -> Option<PodStatus> {
        if round.pod.is_none() {
            return Some(PodStatus::default());
        }
        let cache = &self.workers.inner.cache;
        let fetch = async {
            match last_sync {
                Some(t) => cache.get_newer_than(&self.uid, t).await,
                None => cache.get_first(&self.uid).await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => None,
            r = fetch => Some(r.unwrap_or_else(|e| {
                warn!(uid = %self.uid, error = %e, "runtime status of pod unavailable; syncing with what is known");
                PodStatus::default()
            })),
        }
    }

    async fn run_round(&self, round: &Round, status: &PodStatus) -> Outcome {
        let syncer = &self.workers.inner.syncer;
        match (round.phase, &round.pod) {
            (WorkerPhase::Syncing, Some(pod)) => {
                match syncer
                    .sync_pod(round.update_type, pod, status, &round.sync_cancel)
                    .await
                {
                    Ok(true) => {
                        info!(pod = %pod.full_name(), uid = %self.uid, reason = "pod reached a terminal phase", "terminating pod");
                        Outcome::Advance(WorkerPhase::Terminating {
                            grace_period: effective_grace_period(
                                Some(pod),
                                &KillOptions::default(),
                            ),
                        })
                    }
                    Ok(false) => Outcome::Resync,
                    Err(_) if round.sync_cancel.is_cancelled() => Outcome::Idle,
                    Err(e) => {
                        info!(pod = %pod.full_name(), uid = %self.uid, error = %e, "error syncing pod, will retry");
                        Outcome::Retry
                    }
                }
            }
            (WorkerPhase::Terminating { grace_period }, Some(pod)) => {
                match syncer.sync_terminating_pod(pod, status, grace_period).await {
                    Ok(()) => Outcome::Advance(WorkerPhase::Terminated),
                    Err(e) => {
                        warn!(pod = %pod.full_name(), uid = %self.uid, error = %e, "error terminating pod, will retry");
                        Outcome::Retry
                    }
                }
            }
            (WorkerPhase::Terminating { .. }, None) => match &round.running_pod {
                Some(running) => match syncer.sync_terminating_runtime_pod(running).await {
                    Ok(()) => Outcome::Advance(WorkerPhase::Finished),
                    Err(e) => {
                        warn!(uid = %self.uid, error = %e, "error killing orphaned runtime pod, will retry");
                        Outcome::Retry
                    }
                },
                None => Outcome::Advance(WorkerPhase::Finished),
            },
            (WorkerPhase::Terminated, Some(pod)) => {
                match syncer.sync_terminated_pod(pod, status, round.removed).await {
                    Ok(()) => Outcome::Advance(WorkerPhase::Finished),
                    Err(e) => {
                        warn!(pod = %pod.full_name(), uid = %self.uid, error = %e, "error cleaning up terminated pod, will retry");
                        Outcome::Retry
                    }
                }
            }
            (WorkerPhase::Terminated, None) => Outcome::Advance(WorkerPhase::Finished),
            (WorkerPhase::Syncing, None) | (WorkerPhase::Finished, _) => Outcome::Idle,
        }
    }

    fn finish_round(&self, outcome: Outcome) {
        let timings = self.workers.inner.timings;
        let delay = {
            let mut state = self.workers.lock();
            let Some(st) = state.workers.get_mut(&self.uid) else {
                return;
            };
            st.sync_cancel = None;
            let delay = match outcome {
                Outcome::Advance(next) => {
                    // A kill that arrived meanwhile may have moved us on; never move backwards.
                    if rank(next) > rank(st.phase) {
                        st.phase = next;
                        if next != WorkerPhase::Finished {
                            st.pending.get_or_insert(UpdateType::Kill);
                        }
                    }
                    None
                }
                Outcome::Resync => Some(timings.resync_interval),
                Outcome::Retry => Some(timings.backoff_period),
                Outcome::Idle => None,
            };
            if st.pending.is_some() {
                st.wake();
            }
            delay
        };
        if let Some(d) = delay {
            self.workers.enqueue(&self.uid, jitter(&self.uid, d));
        }
    }
}

fn rank(p: WorkerPhase) -> u8 {
    match p {
        WorkerPhase::Syncing => 0,
        WorkerPhase::Terminating { .. } => 1,
        WorkerPhase::Terminated => 2,
        WorkerPhase::Finished => 3,
    }
}

/// Spreads requeues by up to 5 % so pods started together do not resync in lock step; the
/// spread is derived from the UID so it is stable for a pod.
fn jitter(uid: &str, d: Duration) -> Duration {
    let h = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    d + d.mul_f64((h % 1000) as f64 / 1000.0 * 0.05)
}
