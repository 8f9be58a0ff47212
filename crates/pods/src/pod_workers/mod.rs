//! Pod workers: one serial task per pod UID (upstream `podWorkers`). Owns each pod's lifecycle
//! state (syncing → terminating → terminated → finished), coalesces updates to the latest one,
//! serialises static pods that share a full name, and owns the resync work queue. Receives
//! `update_pod` calls from the sync loop; calls the `PodSyncer` (kuberuntime) with the freshest
//! runtime status from the PLEG's pod cache; emits `FailedSync` events when that status cannot
//! be determined.

mod error;
mod grace;
mod static_pods;
mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::container::cache::PodCache;
use crate::container::{PodStatus, RunningPod};
use crate::events::EventRecorder;
use crate::metrics::KubeletMetrics;
use crate::types::{PodExt, PodUid};

pub use error::{Failures, PodCgroupError, SyncError};
pub use grace::{DEFAULT_TERMINATION_GRACE_PERIOD, effective_grace_period};
use static_pods::{StaticPodStarts, is_static_pod, static_full_name};
use worker::Worker;

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
    /// The desired pod, shared with the pod manager (a worker holds it for as long as it
    /// works on it); `None` for runtime pods the kubelet has no spec for (orphans).
    pub pod: Option<Arc<Pod>>,
    /// For orphans: what the runtime runs.
    pub running_pod: Option<RunningPod>,
    pub kill: Option<KillOptions>,
}

impl PodWork {
    pub fn sync(update_type: UpdateType, pod: impl Into<Arc<Pod>>) -> Self {
        Self {
            update_type,
            pod: Some(pod.into()),
            running_pod: None,
            kill: None,
        }
    }

    pub fn kill(pod: impl Into<Arc<Pod>>, options: KillOptions) -> Self {
        Self {
            update_type: UpdateType::Kill,
            pod: Some(pod.into()),
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

    /// Stops every container and the sandbox within `grace_period` seconds. The worker drops
    /// the call (cancelling the runtime calls in flight) when a shorter grace period arrives,
    /// and calls it again with that one (upstream cancels its context), so it must be safe to
    /// stop at any await point and to run again.
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

    /// The worker's round for `uid` is over and the round's time recorded: whatever the round
    /// left for afterwards (the PLEG refresh of a pod it changed) may start now.
    fn round_finished(&self, uid: &str);
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

/// A pod worker's lifecycle step and the error that stops the pod from progressing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerReport {
    /// `Syncing`, `Terminating`, `Terminated` or `Finished`.
    pub phase: String,
    /// What the worker does now, in words.
    pub step: String,
    /// The last round's error (a failed sync: "back-off 40s restarting failed container…",
    /// a volume that cannot be mounted…); `None` once a round succeeds.
    pub last_error: Option<String>,
    pub last_error_seconds_ago: Option<u64>,
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
    pod: Option<Arc<Pod>>,
    running_pod: Option<RunningPod>,
    /// Upstream `BuildPodFullName` (`name_namespace`): static pods sharing it start in turn.
    full_name: String,
    /// A static pod (any source but the API server): waits for its full name to be free.
    is_static: bool,
    phase: WorkerPhase,
    pending: Option<UpdateType>,
    removed: bool,
    /// Re-added with the same UID while terminating: forgotten once finished so that
    /// housekeeping starts it again (upstream `restartRequested`).
    restart_requested: bool,
    /// The worker let the pod start (upstream `startedAt`); a static pod may wait first.
    started: bool,
    /// A refused start was logged (once per wait).
    wait_logged: bool,
    /// Cancels the round in flight: a sync when a kill arrives, a kill when its grace period
    /// is shortened.
    round_cancel: Option<CancellationToken>,
    /// The error of the last round, when it failed (cleared by a successful one).
    last_error: Option<(String, Instant)>,
    wake: mpsc::Sender<()>,
}

impl PodSyncStatus {
    fn wake(&self) {
        // A full channel already holds a wake-up; the worker re-reads state when it runs.
        let _ = self.wake.try_send(());
    }

    fn cancel_round(&mut self) {
        if let Some(c) = self.round_cancel.take() {
            c.cancel();
        }
    }
}

#[derive(Default)]
struct State {
    workers: HashMap<PodUid, PodSyncStatus>,
    /// uid → when the pod is due for a resync.
    work_queue: HashMap<PodUid, Instant>,
    static_pods: StaticPodStarts,
}

impl State {
    /// Upstream `allowStaticPodStart` for `uid` (a static pod about to start).
    fn allow_static_start(&mut self, full_name: &str, uid: &str) -> bool {
        let workers = &self.workers;
        self.static_pods.allow(full_name, uid, |u| {
            workers
                .get(u)
                .is_some_and(|s| s.phase == WorkerPhase::Syncing)
        })
    }

    /// `uid` no longer runs: frees its full name and wakes the next static pod waiting on it.
    fn release_static(&mut self, uid: &str) {
        let Some(st) = self.workers.get(uid) else {
            return;
        };
        if !st.is_static {
            return;
        }
        let full_name = st.full_name.clone();
        self.static_pods.withdraw(&full_name, uid);
        if self.static_pods.release(&full_name, uid) {
            self.wake_next_static(&full_name, uid);
        }
    }

    /// Wakes the first static pod waiting on the free `full_name` (it kept its update).
    fn wake_next_static(&mut self, full_name: &str, previous: &str) {
        if self.static_pods.holder(full_name).is_some() {
            return;
        }
        let next = self.static_pods.waiting(full_name).iter().find(|u| {
            self.workers
                .get(*u)
                .is_some_and(|s| s.phase == WorkerPhase::Syncing)
        });
        if let Some(next) = next.cloned()
            && let Some(w) = self.workers.get_mut(&next)
        {
            info!(pod = %full_name, uid = %next, previous_uid = %previous, "no other pod with this full name runs; starting static pod");
            w.pending.get_or_insert(UpdateType::Sync);
            w.wake();
        }
    }
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
    /// Where `FailedSync` events go (upstream's recorder in the pod worker loop).
    events: OnceLock<Arc<dyn EventRecorder>>,
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
                events: OnceLock::new(),
            }),
        }
    }

    /// Counts caught worker panics in `metrics` (the first call wins).
    pub fn set_metrics(&self, metrics: KubeletMetrics) {
        let _ = self.inner.metrics.set(metrics);
    }

    /// Sends the workers' own events (`FailedSync`) to `events` (the first call wins; without
    /// one they are only logged).
    pub fn set_events(&self, events: Arc<dyn EventRecorder>) {
        let _ = self.inner.events.set(events);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; recovering the data is still the best we can do.
        crate::sync::lock(&self.inner.state)
    }

    /// Hands work to the pod's worker, starting one if needed. Never blocks (upstream
    /// `UpdatePod`).
    pub fn update_pod(&self, work: PodWork) {
        let Some(uid) = work.uid().map(str::to_owned) else {
            warn!("pod work without a pod or runtime pod; ignored");
            return;
        };
        let mut guard = self.lock();
        let state = &mut *guard;
        let first_time = !state.workers.contains_key(&uid);
        if first_time {
            let status = self.spawn_worker(&uid, &work);
            if status.is_static {
                state.static_pods.enqueue(&status.full_name, &uid);
            }
            state.workers.insert(uid.clone(), status);
        }
        let Some(st) = state.workers.get_mut(&uid) else {
            return;
        };
        // The same UID created again while its termination is under way (a static manifest
        // moved out and back, or a fixed UID reused): it runs again once terminated.
        if !first_time
            && st.phase != WorkerPhase::Syncing
            && work.update_type == UpdateType::Create
            && work.pod.is_some()
        {
            if !st.restart_requested {
                info!(pod = %full_name(st), %uid, "pod added again while terminating; it will start again once terminated");
            }
            st.restart_requested = true;
            return;
        }
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
            }
            return;
        }
        if kill {
            st.removed |= options.removed;
        }
        match st.phase {
            WorkerPhase::Syncing if kill => {
                let (grace, _) =
                    effective_grace_period(None, st.pod.as_deref(), options.grace_period_override);
                info!(pod = %full_name(st), %uid, grace_period = grace, reason = if options.removed { "removed from config" } else if deleting { "deleted" } else { "kill requested" }, "pod is terminating");
                st.phase = WorkerPhase::Terminating {
                    grace_period: grace,
                };
                st.cancel_round();
            }
            WorkerPhase::Terminating { grace_period } => {
                // Once terminating every update is a kill, and the grace period only shrinks:
                // a shorter one restarts the kill in flight (upstream `wasGracePeriodShortened`).
                let (grace, shortened) = effective_grace_period(
                    Some(grace_period),
                    st.pod.as_deref(),
                    options.grace_period_override,
                );
                if shortened {
                    info!(pod = %full_name(st), %uid, from = grace_period, to = grace, "grace period shortened; restarting the kill");
                    st.phase = WorkerPhase::Terminating {
                        grace_period: grace,
                    };
                    st.cancel_round();
                }
            }
            _ => {}
        }
        st.pending = Some(if st.phase == WorkerPhase::Syncing {
            // Create wins over Update wins over Sync while pending.
            match (st.pending, work.update_type) {
                (Some(UpdateType::Create), _) => UpdateType::Create,
                (Some(UpdateType::Update), UpdateType::Sync) => UpdateType::Update,
                (_, t) => t,
            }
        } else {
            UpdateType::Kill
        });
        st.wake();
    }

    fn spawn_worker(&self, uid: &str, work: &PodWork) -> PodSyncStatus {
        let (tx, rx) = mpsc::channel(1);
        let worker = Worker::new(uid, self.clone());
        let cancel = self.inner.cancel.clone();
        self.inner.tracker.spawn(worker.supervise(rx, cancel));
        debug!(%uid, "started pod worker");
        let (name, namespace) = match (&work.pod, &work.running_pod) {
            (Some(p), _) => (p.name().to_owned(), p.namespace().to_owned()),
            (None, Some(r)) => (r.name.clone(), r.namespace.clone()),
            _ => Default::default(),
        };
        PodSyncStatus {
            pod: None,
            running_pod: None,
            full_name: static_full_name(&name, &namespace),
            is_static: work.pod.as_deref().is_some_and(is_static_pod),
            phase: if work.pod.is_none() {
                // Orphans have no spec to run: go straight to termination.
                WorkerPhase::Terminating { grace_period: 1 }
            } else {
                WorkerPhase::Syncing
            },
            pending: None,
            removed: false,
            restart_requested: false,
            started: false,
            wait_logged: false,
            round_cancel: None,
            last_error: None,
            wake: tx,
        }
    }

    /// Requests termination of every worker whose pod is not in `desired` (upstream
    /// `SyncKnownPods`), nudges undesired workers still terminating (nothing else retries
    /// them: the sync loop only resyncs desired pods), and forgets finished workers that are
    /// no longer desired or that asked for a restart. Returns the UIDs forgotten.
    pub fn sync_known_pods(&self, desired: &HashSet<PodUid>) -> Vec<PodUid> {
        let mut forgotten = Vec::new();
        let mut to_kill = Vec::new();
        {
            let mut guard = self.lock();
            let state = &mut *guard;
            let mut forget = Vec::new();
            for (uid, st) in &mut state.workers {
                let wanted = desired.contains(uid);
                if st.phase == WorkerPhase::Finished && (!wanted || st.restart_requested) {
                    if st.restart_requested {
                        info!(pod = %full_name(st), %uid, "pod terminated and was added again; restarting it");
                    }
                    forget.push(uid.clone());
                } else if !wanted && !st.removed {
                    to_kill.push(uid.clone());
                } else if !wanted && st.phase != WorkerPhase::Finished && st.pending.is_none() {
                    st.pending = Some(UpdateType::Kill);
                    st.wake();
                }
            }
            for uid in forget {
                state.release_static(&uid);
                state.workers.remove(&uid);
                state.work_queue.remove(&uid);
                forgotten.push(uid);
            }
            crate::spare_capacity::release_spare(&mut state.workers);
            crate::spare_capacity::release_spare(&mut state.work_queue);
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

    /// What the pod's worker is doing and what stops it, for the operator
    /// (`/debug/rkubelet/pods/{ns}/{name}`); `None` without a worker.
    pub fn report(&self, uid: &str) -> Option<WorkerReport> {
        let state = self.lock();
        let st = state.workers.get(uid)?;
        let step = match st.phase {
            WorkerPhase::Syncing if !st.started && st.is_static && st.pending.is_some() => {
                "waiting for the previous static pod with the same full name to terminate"
                    .to_owned()
            }
            WorkerPhase::Syncing if st.round_cancel.is_some() => "syncing".to_owned(),
            WorkerPhase::Syncing if st.last_error.is_some() => {
                "sync failed; retrying after back-off".to_owned()
            }
            WorkerPhase::Syncing if !st.started => "waiting to start".to_owned(),
            WorkerPhase::Syncing => "synced; resyncing periodically".to_owned(),
            WorkerPhase::Terminating { grace_period } => {
                format!("terminating (grace period {grace_period}s)")
            }
            WorkerPhase::Terminated => "terminated; cleaning up".to_owned(),
            WorkerPhase::Finished => "finished".to_owned(),
        };
        Some(WorkerReport {
            phase: match st.phase {
                WorkerPhase::Syncing => "Syncing",
                WorkerPhase::Terminating { .. } => "Terminating",
                WorkerPhase::Terminated => "Terminated",
                WorkerPhase::Finished => "Finished",
            }
            .to_owned(),
            step,
            last_error: st.last_error.as_ref().map(|(e, _)| e.clone()),
            last_error_seconds_ago: st.last_error.as_ref().map(|(_, at)| at.elapsed().as_secs()),
        })
    }

    /// True if the pod has a worker that is not terminating or done (upstream
    /// `IsPodKnownTerminated` negated for live pods).
    pub fn is_syncing(&self, uid: &str) -> bool {
        self.phase(uid) == Some(WorkerPhase::Syncing)
    }

    /// True once the worker let the pod start (a static pod waits while an older pod with
    /// the same full name terminates).
    pub fn is_started(&self, uid: &str) -> bool {
        self.lock().workers.get(uid).is_some_and(|s| s.started)
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
