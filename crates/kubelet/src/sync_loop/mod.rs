//! The sync loop (upstream `syncLoop`/`syncLoopIteration`/`HandlePodCleanups`): owns the pod
//! manager. Receives merged pod updates (admission before a new pod gets a worker; a
//! status-only RECONCILE syncs the pod when its readiness gates moved), PLEG events, probe
//! result changes, the 1 s sync tick (which also syncs pods whose `activeDeadlineSeconds`
//! passed) and the 2 s housekeeping tick; dispatches work to pod workers; kills runtime pods
//! that belong to no source once every source has reported and the pods they queued are
//! applied. Mirror pods go to the pod manager's mirror store, never to workers or admission.
//! Publishes its liveness for `/healthz` and `SourcesApplied` for the other cleaners.

use crate::objects::PodObjects;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::RuntimeService;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::admission::{Admission, is_inactive, is_terminal, rejected_status};
use crate::clock::Clock;
use crate::cm::ContainerManager;
use crate::events::{EventRecorder, EventType};
use crate::kuberuntime::runtime_status::{ListedPod, list_pods_with_sandbox_states, running_only};
use crate::metrics::KubeletMetrics;
use crate::pleg::{LatestListing, PodLifecycleEvent};
use crate::pod_manager::{MirrorSnapshot, PodManager, stored_as_mirror};
use crate::pod_workers::{KillOptions, PodWork, PodWorkers, UpdateType};
use crate::prober::ProbeUpdate;
use crate::status::generate::{need_to_reconcile_pod_readiness, past_active_deadline};
use crate::status::manager::StatusManager;
use crate::types::{PodExt, PodOp, PodUpdate};
use crate::volumes::VolumeManager;

/// Upstream: the loop is unhealthy when an iteration has not started for
/// max(2 × syncFrequency, 5 min).
#[derive(Clone)]
pub struct SyncLoopHealth {
    last_activity: Arc<Mutex<Option<Instant>>>,
    threshold: Duration,
}

impl SyncLoopHealth {
    pub fn new(sync_frequency: Duration) -> Self {
        Self {
            last_activity: Arc::default(),
            threshold: (sync_frequency * 2).max(Duration::from_secs(300)),
        }
    }

    fn mark(&self) {
        if let Ok(mut t) = self.last_activity.lock() {
            *t = Some(Instant::now());
        }
    }

    /// `Ok` while the loop iterates; upstream's message otherwise.
    pub fn check(&self) -> Result<(), String> {
        let last = self.last_activity.lock().ok().and_then(|t| *t);
        match last {
            Some(t) if t.elapsed() > self.threshold => {
                Err("sync Loop took longer than expected".to_owned())
            }
            _ => Ok(()),
        }
    }
}

/// Tick periods of the loop.
#[derive(Debug, Clone, Copy)]
pub struct LoopTimings {
    pub sync_tick: Duration,
    pub housekeeping: Duration,
}

impl Default for LoopTimings {
    fn default() -> Self {
        Self {
            sync_tick: Duration::from_secs(1),
            housekeeping: Duration::from_secs(2),
        }
    }
}

/// Tells whether every configured source has delivered its first full set.
pub type SourcesReady = Box<dyn Fn() -> bool + Send + Sync>;

/// Whether the sync loop has every pod its sources have: each configured source has
/// reported, and the updates it queued are in the pod manager and its pods have workers.
/// Whoever removes state for pods it does not see (mirror pods, CPU assignments, dead
/// containers) waits for this, not for the merger's view, which runs ahead of the pod manager.
#[derive(Debug, Clone)]
pub struct SourcesApplied(watch::Receiver<bool>);

impl SourcesApplied {
    pub fn ready(&self) -> bool {
        *self.0.borrow()
    }
}

/// The kubelet's main loop.
pub struct SyncLoop {
    pub pod_manager: PodManager,
    workers: PodWorkers,
    status: StatusManager,
    runtime: Arc<dyn RuntimeService>,
    sources_ready: SourcesReady,
    /// Set once `sources_ready` held and what was queued then was applied; never unset.
    applied: watch::Sender<bool>,
    health: SyncLoopHealth,
    timings: LoopTimings,
    admission: Admission,
    events: Arc<dyn EventRecorder>,
    clock: Clock,
    /// Pods refused at admission: desired, never started.
    rejected: HashSet<String>,
    /// Changed liveness/readiness/startup results from the prober.
    probe_updates: Option<mpsc::UnboundedReceiver<ProbeUpdate>>,
    volumes: Option<VolumeManager>,
    /// Told which pods need which ConfigMaps/Secrets (upstream Register/UnregisterPod).
    objects: Option<Arc<dyn PodObjects>>,
    /// Pod cgroups to clean up, with the kubelet root dir (to see whose volumes remain).
    cgroups: Option<(ContainerManager, PathBuf)>,
    metrics: Option<KubeletMetrics>,
    /// The PLEG's listing, which housekeeping reuses when it is recent.
    latest_listing: Option<LatestListing>,
    /// The pods the last pod cgroup sweep kept and when, if it left no orphan behind.
    clean_sweep: Option<(HashSet<String>, Instant)>,
}

impl SyncLoop {
    pub fn new(
        workers: PodWorkers,
        status: StatusManager,
        runtime: Arc<dyn RuntimeService>,
        sources_ready: SourcesReady,
        health: SyncLoopHealth,
        timings: LoopTimings,
    ) -> Self {
        Self {
            pod_manager: PodManager::new(),
            workers,
            status,
            runtime,
            sources_ready,
            applied: watch::Sender::new(false),
            health,
            timings,
            admission: Admission::default(),
            events: Arc::new(crate::events::LoggingRecorder),
            clock: Clock::new(),
            rejected: HashSet::new(),
            probe_updates: None,
            volumes: None,
            objects: None,
            cgroups: None,
            metrics: None,
            latest_listing: None,
            clean_sweep: None,
        }
    }

    /// Lets housekeeping reuse the PLEG's recent listing instead of listing the runtime.
    pub fn with_latest_listing(mut self, latest: LatestListing) -> Self {
        self.latest_listing = Some(latest);
        self
    }

    /// Lets housekeeping destroy the cgroups of pods nobody knows any more (upstream
    /// `cleanupOrphanedPodCgroups`); `root_dir` holds `pods/<uid>/volumes`.
    pub fn with_cgroups(mut self, cm: ContainerManager, root_dir: PathBuf) -> Self {
        self.cgroups = Some((cm, root_dir));
        self
    }

    /// Records pod counts, restarts and worker start latency.
    pub fn with_metrics(mut self, metrics: KubeletMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Registers every desired pod with the object managers and unregisters removed ones.
    pub fn with_objects(mut self, objects: Arc<dyn PodObjects>) -> Self {
        self.objects = Some(objects);
        self
    }

    /// Makes probe result changes trigger pod syncs (upstream: liveness/startup changes sync
    /// the pod; readiness changes update its status, which here is the same sync).
    pub fn with_probe_updates(mut self, rx: mpsc::UnboundedReceiver<ProbeUpdate>) -> Self {
        self.probe_updates = Some(rx);
        self
    }

    /// Lets housekeeping remove the directories (and mounts) of pods that are gone.
    pub fn with_volumes(mut self, volumes: VolumeManager) -> Self {
        self.volumes = Some(volumes);
        self
    }

    /// Sets the admission rules and where rejections are reported.
    pub fn with_admission(mut self, admission: Admission, events: Arc<dyn EventRecorder>) -> Self {
        self.admission = admission;
        self.events = events;
        self
    }

    fn register_objects(&self, pod: &Pod) {
        if let Some(objects) = &self.objects {
            objects.register_pod(pod);
        }
    }

    /// Upstream `filterOutInactivePods` for one desired pod (rejected pods never count).
    fn is_active(&self, pod: &Pod) -> bool {
        let uid = pod.uid();
        !self.rejected.contains(uid)
            && self.status.with_pod_status(uid, |status| {
                !is_inactive(pod, status, self.workers.phase(uid))
            })
    }

    /// Upstream `canAdmitPod` + `rejectPod`: `true` when the pod goes to a worker. A pod that
    /// already has one, or whose API phase is terminal (its worker only terminates it, never
    /// starts it), skips admission, as upstream `HandlePodAdditions`.
    fn admit(&mut self, pod: &Pod) -> bool {
        let uid = pod.uid();
        if self.workers.phase(uid).is_some() {
            return true;
        }
        if is_terminal(pod.status.as_ref()) {
            debug!(pod = %pod.full_name(), %uid, phase = ?pod.status.as_ref().and_then(|s| s.phase.as_deref()), reason = "terminal in the API", "not admitting a terminal pod");
            return true;
        }
        let active: Vec<&Pod> = self
            .pod_manager
            .pods()
            .filter(|p| p.uid() != uid && self.is_active(p))
            .collect();
        match self.admission.admit(pod, &active) {
            Ok(()) => true,
            Err(rejection) => {
                warn!(pod = %pod.full_name(), %uid, reason = %rejection.reason, message = %rejection.message, "pod rejected at admission");
                self.events.event(
                    pod,
                    EventType::Warning,
                    &rejection.reason,
                    &rejection.message,
                );
                self.status
                    .set_pod_status(pod, rejected_status(pod, &rejection, self.clock.now()));
                self.rejected.insert(uid.to_owned());
                false
            }
        }
    }

    /// Desired pods, for readers.
    pub fn pods(&self) -> watch::Receiver<crate::types::PodsSnapshot> {
        self.pod_manager.subscribe()
    }

    /// Mirror pods by full name, for readers (status syncer, mirror reconciler).
    pub fn mirrors(&self) -> watch::Receiver<MirrorSnapshot> {
        self.pod_manager.subscribe_mirrors()
    }

    /// Turns ready once every pod the sources have is in the pod manager (see the type).
    pub fn sources_applied(&self) -> SourcesApplied {
        SourcesApplied(self.applied.subscribe())
    }

    /// Whether every source has reported and its pods are applied. The merger marks a source
    /// seen only after queueing its pods, so once the sources read ready, what is queued now
    /// holds every pod they have: it is applied here before the answer is `true`.
    fn catch_up_with_sources(&mut self, updates: &mut mpsc::Receiver<PodUpdate>) -> bool {
        if *self.applied.borrow() {
            return true;
        }
        if !(self.sources_ready)() {
            return false;
        }
        while let Ok(u) = updates.try_recv() {
            self.handle_update(u);
        }
        info!("all pod sources have reported and their pods are applied");
        self.applied.send_replace(true);
        true
    }

    /// Runs until `cancel` fires.
    pub async fn run(
        mut self,
        mut updates: mpsc::Receiver<PodUpdate>,
        mut pleg: mpsc::Receiver<PodLifecycleEvent>,
        cancel: CancellationToken,
    ) {
        info!("starting kubelet main sync loop");
        let mut sync_tick = tokio::time::interval(self.timings.sync_tick);
        sync_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut housekeeping = tokio::time::interval(self.timings.housekeeping);
        housekeeping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut probes = self.probe_updates.take();
        loop {
            self.health.mark();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                u = updates.recv() => match u {
                    Some(u) => {
                        self.handle_update(u);
                        self.catch_up_with_sources(&mut updates);
                    }
                    None => {
                        warn!("pod config channel closed; stopping the sync loop");
                        break;
                    }
                },
                Some(e) = pleg.recv() => self.handle_pleg_event(e),
                Some(u) = recv_probe(&mut probes) => self.handle_probe_update(u),
                _ = sync_tick.tick() => self.sync_due_pods(),
                _ = housekeeping.tick() => {
                    // A pod still in flight from its source would be killed as an orphan.
                    if self.catch_up_with_sources(&mut updates) {
                        self.cleanup_pods().await;
                    } else {
                        debug!("skipping pod cleanup: not all pod sources have reported yet");
                    }
                }
            }
        }
        info!("kubelet main sync loop stopped");
    }

    /// Applies one merged update (upstream `HandlePodAdditions/Updates/Removes/...`). Mirror
    /// pods only go to the pod manager's mirror store (they never run or get admitted).
    pub fn handle_update(&mut self, update: PodUpdate) {
        let received = Instant::now();
        debug!(op = ?update.op, source = %update.source, pods = update.pods.len(), "pod config update");
        let (mirrors, pods): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
            update.pods.into_iter().partition(|p| stored_as_mirror(p));
        // Readers see the update's pods in one snapshot, published once at the end.
        self.pod_manager.begin_batch();
        self.handle_mirror_pods(update.op, mirrors);
        let update = PodUpdate { pods, ..update };
        match update.op {
            PodOp::Add | PodOp::Set => {
                let mut pods = update.pods;
                pods.sort_by(|a, b| {
                    a.metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0)
                        .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
                });
                for pod in pods {
                    // One copy, shared by the config merger, the pod manager and the worker.
                    info!(pod = %pod.full_name(), uid = %pod.uid(), source = %update.source, "pod added");
                    self.register_objects(&pod);
                    crate::metrics::timeline::mark(pod.uid(), "sync_loop_add");
                    self.pod_manager.upsert(pod.clone());
                    if self.admit(&pod) {
                        crate::metrics::timeline::mark(pod.uid(), "admitted");
                        let new_worker = self.workers.phase(pod.uid()).is_none();
                        self.workers
                            .update_pod(PodWork::sync(UpdateType::Create, pod));
                        if let (true, Some(m)) = (new_worker, &self.metrics) {
                            m.observe_pod_worker_start(received.elapsed());
                        }
                    }
                }
            }
            PodOp::Update | PodOp::Delete => {
                for pod in update.pods {
                    info!(pod = %pod.full_name(), uid = %pod.uid(), op = ?update.op, "pod updated");
                    self.register_objects(&pod);
                    self.pod_manager.upsert(pod.clone());
                    if !self.rejected.contains(pod.uid()) {
                        self.workers
                            .update_pod(PodWork::sync(UpdateType::Update, pod));
                    }
                }
            }
            PodOp::Remove => {
                for pod in update.pods {
                    info!(pod = %pod.full_name(), uid = %pod.uid(), reason = "removed from its source", "pod removed");
                    self.pod_manager.remove(pod.uid());
                    if let Some(objects) = &self.objects {
                        objects.unregister_pod(pod.uid());
                    }
                    if self.rejected.remove(pod.uid()) {
                        self.status.delete(pod.uid());
                        continue;
                    }
                    self.workers.update_pod(PodWork::kill(
                        pod,
                        KillOptions {
                            grace_period_override: None,
                            removed: true,
                        },
                    ));
                }
            }
            PodOp::Reconcile => {
                // Upstream `HandlePodReconcile`: a status-only change; the pod is synced at
                // once when its Ready condition no longer matches its readiness gates.
                for pod in update.pods {
                    self.pod_manager.upsert(pod.clone());
                    if need_to_reconcile_pod_readiness(&pod) && !self.rejected.contains(pod.uid()) {
                        debug!(pod = %pod.full_name(), uid = %pod.uid(), reason = "readiness gate changed", "syncing pod to reconcile its Ready condition");
                        self.workers
                            .update_pod(PodWork::sync(UpdateType::Sync, pod));
                    }
                }
            }
        }
        self.pod_manager.end_batch();
    }

    /// Upstream `handleMirrorPod`: store the mirror pod apart; a change of it (not a
    /// status-only reconcile) syncs its static pod.
    fn handle_mirror_pods(&mut self, op: PodOp, mirrors: Vec<Arc<Pod>>) {
        for mirror in mirrors {
            if op == PodOp::Remove {
                info!(pod = %mirror.full_name(), uid = %mirror.uid(), reason = "gone from the API server", "mirror pod removed");
                self.pod_manager.remove(mirror.uid());
            } else {
                debug!(pod = %mirror.full_name(), uid = %mirror.uid(), op = ?op, "mirror pod stored");
                self.pod_manager.upsert(mirror.clone());
            }
            if op == PodOp::Reconcile {
                continue;
            }
            let pod = self
                .pod_manager
                .pod_for_mirror(&mirror)
                .and_then(|p| self.pod_manager.get_shared(p.uid()));
            match pod {
                Some(pod) if !self.rejected.contains(pod.uid()) => {
                    debug!(pod = %pod.full_name(), uid = %pod.uid(), mirror_uid = %mirror.uid(), reason = "mirror pod changed", "syncing static pod");
                    self.workers
                        .update_pod(PodWork::sync(UpdateType::Update, pod));
                }
                _ => {
                    debug!(pod = %mirror.full_name(), uid = %mirror.uid(), "no static pod for mirror pod")
                }
            }
        }
    }

    fn handle_pleg_event(&mut self, event: PodLifecycleEvent) {
        match self.pod_manager.get_shared(&event.uid) {
            Some(pod) if !self.rejected.contains(&event.uid) => {
                debug!(pod = %pod.full_name(), uid = %event.uid, event = ?event.kind, "PLEG event");
                crate::metrics::timeline::mark(&event.uid, "pleg_event");
                self.workers
                    .update_pod(PodWork::sync(UpdateType::Sync, pod));
            }
            _ => {
                debug!(uid = %event.uid, event = ?event.kind, "PLEG event for a pod that is not desired; housekeeping handles it")
            }
        }
    }

    fn handle_probe_update(&mut self, u: ProbeUpdate) {
        match self.pod_manager.get_shared(&u.pod_uid) {
            Some(pod) if !self.rejected.contains(&u.pod_uid) => {
                debug!(pod = %pod.full_name(), uid = %u.pod_uid, container_id = %u.container_id, probe = ?u.kind, result = ?u.result, "probe result changed");
                self.workers
                    .update_pod(PodWork::sync(UpdateType::Sync, pod));
            }
            _ => {
                debug!(uid = %u.pod_uid, probe = ?u.kind, "probe result for a pod that is not desired")
            }
        }
    }

    fn sync_due_pods(&mut self) {
        let mut due: HashSet<String> = self.workers.take_due(Instant::now()).into_iter().collect();
        // Upstream's active deadline handler `ShouldSync`: a pod past its deadline is synced
        // so that it fails and its containers are killed.
        let now = self.clock.now();
        for pod in self.pod_manager.pods() {
            if pod
                .spec
                .as_ref()
                .and_then(|s| s.active_deadline_seconds)
                .is_some()
                && self.workers.is_syncing(pod.uid())
                && let Some(st) = self.status.get_pod_status(pod.uid())
                && st.phase.as_deref() != Some("Failed")
                && past_active_deadline(pod, st.start_time.as_ref(), now)
            {
                due.insert(pod.uid().to_owned());
            }
        }
        for uid in due {
            if let Some(pod) = self.pod_manager.get_shared(&uid) {
                self.workers
                    .update_pod(PodWork::sync(UpdateType::Sync, pod));
            }
        }
    }

    /// `kubelet_desired_pods`, `kubelet_active_pods` (admitted and not inactive, as upstream
    /// `filterOutInactivePods`) by static-ness, and `kubelet_mirror_pods`, as upstream
    /// housekeeping sets them.
    fn record_pod_counts(&self) {
        let Some(m) = &self.metrics else { return };
        let (mut desired, mut active) = ((0, 0), (0, 0));
        for pod in self.pod_manager.pods() {
            let bump = |c: &mut (usize, usize)| {
                if pod.source().is_some_and(|s| s.is_static()) {
                    c.1 += 1;
                } else {
                    c.0 += 1;
                }
            };
            bump(&mut desired);
            if self.is_active(pod) {
                bump(&mut active);
            }
        }
        m.set_pod_counts(desired, active, self.pod_manager.mirror_pods().count());
    }

    /// The runtime pods one cleanup round looks at (upstream lists the running ones afresh
    /// each round, and all of them for the dead ones); `None` when the runtime cannot be
    /// listed. When the PLEG's listing is at most a housekeeping period old and shows only pods
    /// in `keep` (desired or with a worker), there is nothing to act on and the answer is empty,
    /// without a listing of its own: a pod that has gone since only keeps its directory and
    /// cgroup one round longer. Otherwise every pod of a listing made now, so that a pod is
    /// never killed as an orphan on the word of a listing older than its worker's end.
    async fn runtime_pods(&self, keep: &HashSet<String>) -> Option<Vec<ListedPod>> {
        let latest = self
            .latest_listing
            .as_ref()
            .and_then(|l| l.fresh(self.timings.housekeeping));
        if let Some(latest) = latest
            && latest
                .listing
                .entries()
                .iter()
                .all(|e| keep.contains(e.uid))
        {
            return Some(Vec::new());
        }
        match list_pods_with_sandbox_states(self.runtime.as_ref(), true).await {
            Ok(all) => Some(all),
            Err(e) => {
                warn!(error = %e, "housekeeping: listing runtime pods failed");
                None
            }
        }
    }

    /// Upstream `HandlePodCleanups`, once every source has reported. Each pod the sources
    /// have must already be in the pod manager: a running pod that is not is killed.
    async fn cleanup_pods(&mut self) {
        let desired = self.pod_manager.uids();
        let forgotten = self.workers.sync_known_pods(&desired);
        for uid in &forgotten {
            debug!(%uid, "forgot finished pod worker");
            if let Some(m) = &self.metrics {
                m.forget_pod(uid);
            }
        }
        self.record_pod_counts();
        let known = self.workers.known_uids();
        let keep: HashSet<String> = desired.union(&known).cloned().collect();
        self.status.remove_orphaned_statuses(&keep);

        // Desired pods without a worker (restarted after being re-added) get one again.
        for uid in desired.difference(&known) {
            if self.rejected.contains(uid) {
                continue;
            }
            if let Some(pod) = self.pod_manager.get_shared(uid) {
                info!(pod = %pod.full_name(), %uid, "restarting pod worker for desired pod");
                if let Some(m) = &self.metrics {
                    m.record_restarted_pod(pod.source().is_some_and(|s| s.is_static()));
                }
                self.workers
                    .update_pod(PodWork::sync(UpdateType::Create, pod));
            }
        }

        let Some(all) = self.runtime_pods(&keep).await else {
            return;
        };
        let mut possibly_running = keep;
        // The running view is the ready sandboxes and running containers, as the runtime's
        // state filters would answer (the pods in `keep` are possibly running already).
        let running = running_only(&all);
        possibly_running.extend(running.iter().map(|rp| rp.uid.clone()));
        // Upstream `cleanupOrphanedPodDirs(allPods, runningRuntimePods)`: the directory (and
        // volume mounts) of a pod still running in the runtime stays until it is killed, e.g.
        // an orphan another kubelet started, whose containers still use its files.
        if let Some(v) = &self.volumes {
            v.cleanup_orphaned_pod_dirs(&possibly_running).await;
        }
        let running_uids: HashSet<String> = running.iter().map(|rp| rp.uid.clone()).collect();
        for rp in running {
            if !known.contains(&rp.uid) && !desired.contains(&rp.uid) {
                info!(pod = %format!("{}/{}", rp.namespace, rp.name), uid = %rp.uid, reason = "no pod source has it", "killing orphaned runtime pod");
                self.workers.update_pod(PodWork::kill_orphan(rp));
            }
        }
        // Dead content of a pod no source has: a kubelet killed between stopping a removed pod
        // and removing it leaves stopped sandboxes and exited containers. rkubelet removes a
        // terminated pod's content at once (where upstream leaves it to the next container GC),
        // so this is removed at the next housekeeping as well, not a GC period later.
        for rp in all.into_iter().map(|listed| listed.pod) {
            if !known.contains(&rp.uid)
                && !desired.contains(&rp.uid)
                && !running_uids.contains(&rp.uid)
            {
                info!(pod = %format!("{}/{}", rp.namespace, rp.name), uid = %rp.uid, reason = "no pod source has it", "removing dead orphaned runtime pod");
                self.workers.update_pod(PodWork::kill_orphan(rp));
            }
        }
        if let Some((cm, root_dir)) = &self.cgroups
            && cgroup_sweep_due(self.clean_sweep.as_ref(), &possibly_running, Instant::now())
        {
            let (cm, root_dir) = (cm.clone(), root_dir.clone());
            let keep = possibly_running.clone();
            let cleanup = tokio::task::spawn_blocking(move || {
                let volumes_exist = |uid: &str| {
                    std::fs::read_dir(root_dir.join("pods").join(uid).join("volumes"))
                        .is_ok_and(|mut d| d.next().is_some())
                };
                cm.cleanup_orphaned_pod_cgroups(&keep, &volumes_exist)
            });
            self.clean_sweep = match cleanup.await {
                Ok(sweep) if sweep.left_behind == 0 => Some((possibly_running, Instant::now())),
                Ok(_) => None,
                Err(e) => {
                    warn!(error = %e, "housekeeping: pod cgroup cleanup failed");
                    None
                }
            };
        }
    }
}

/// How long a clean sweep of the pod cgroups stands while the possibly running pods stay the
/// same (a cgroup that no pod of ours made would otherwise wait this long).
const CGROUP_RESWEEP: Duration = Duration::from_secs(60);

/// Whether housekeeping sweeps the pod cgroups this round. Upstream sweeps every round; the
/// sweep reads every QoS directory of every hierarchy, and only the kubelet's own pods make pod
/// cgroups, so a sweep that left nothing behind stands until the set of possibly running pods
/// changes (a pod went: its cgroup may be an orphan now), or [`CGROUP_RESWEEP`] passed.
fn cgroup_sweep_due(
    last_clean: Option<&(HashSet<String>, Instant)>,
    possibly_running: &HashSet<String>,
    now: Instant,
) -> bool {
    last_clean.is_none_or(|(kept, at)| {
        kept != possibly_running || now.duration_since(*at) >= CGROUP_RESWEEP
    })
}

/// The next probe update, or never when there is no prober.
async fn recv_probe(rx: &mut Option<mpsc::UnboundedReceiver<ProbeUpdate>>) -> Option<ProbeUpdate> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
