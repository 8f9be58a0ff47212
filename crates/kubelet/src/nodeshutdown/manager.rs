//! The node shutdown manager task (upstream `managerImpl` + `podManager`): owns the shutting-down
//! flag ([`ShutdownState`], read by admission and node status), the inhibitor lock and the
//! `graceful_node_shutdown_state` file. Receives logind's `PrepareForShutdown` signals, the
//! active pods and a [`PodKiller`]; emits pod kills with a grace override and the pods' final
//! statuses (through the pod workers and the status manager), node events, node status syncs,
//! and the graceful-shutdown metrics. Beyond upstream it checks at every (re)connection that
//! logind lists the lock and that `InhibitDelayMaxSec` covers the grace periods, and says so
//! loudly when not (error log, Warning event on the Node, `kubelet_graceful_shutdown_*`
//! gauges) — kubernetes/kubernetes#107043, #110755 — and still takes the lock when logind's
//! delay is too short (upstream gives up; a shorter delay still lets the first groups stop).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::logind::{InhibitLock, Logind, LogindError, ShutdownSignals, override_inhibit_delay};
use super::{
    EVENT_REASON, MESSAGE, NOT_ADMITTED_MESSAGE, NOT_ADMITTED_REASON, NOT_READY_MESSAGE,
    NodeShutdownSettings, REASON, STATE_FILE, UNPROTECTED_REASON, group_by_priority,
    kill_grace_period,
};
use crate::admit::{AdmitHandler, Rejection};
use crate::events::{EventRecorder, EventType};
use crate::eviction::DISRUPTION_REASON;
use crate::metrics::KubeletMetrics;
use crate::pod_workers::{KillOptions, PodWork, PodWorkers, WorkerPhase};
use crate::status::manager::{DISRUPTION_TARGET, StatusManager};
use crate::types::PodExt;

/// How often a group's pods are checked for having stopped.
const DONE_POLL: Duration = Duration::from_millis(100);
/// The longest wait between two start-up attempts while logind is unreachable.
const MAX_RETRY: Duration = Duration::from_secs(300);

/// Whether the node is shutting down (upstream `ShutdownStatus`). Cheap to clone; only the
/// manager sets it.
#[derive(Debug, Clone, Default)]
pub struct ShutdownState(Arc<AtomicBool>);

impl ShutdownState {
    pub fn is_shutting_down(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn set(&self, shutting_down: bool) {
        self.0.store(shutting_down, Ordering::SeqCst);
    }

    #[cfg(test)]
    pub(super) fn set_for_tests(self, shutting_down: bool) {
        self.set(shutting_down);
    }

    /// The node's not-ready reason while shutting down (upstream's ReadyCondition adds
    /// `ShutdownStatus()`'s error after the runtime and network errors).
    pub fn not_ready_reason(&self) -> Option<String> {
        self.is_shutting_down()
            .then(|| NOT_READY_MESSAGE.to_owned())
    }

    /// The admission handler refusing every pod while shutting down (upstream `Admit`).
    pub fn admit_handler(&self) -> ShutdownAdmit {
        ShutdownAdmit(self.clone())
    }
}

/// Upstream `managerImpl.Admit`.
#[derive(Debug, Clone)]
pub struct ShutdownAdmit(ShutdownState);

impl AdmitHandler for ShutdownAdmit {
    fn admit(&self, _pod: &Pod, _active: &[&Pod]) -> Result<(), Rejection> {
        if !self.0.is_shutting_down() {
            return Ok(());
        }
        Err(Rejection {
            reason: NOT_ADMITTED_REASON.to_owned(),
            message: NOT_ADMITTED_MESSAGE.to_owned(),
        })
    }
}

/// How the manager stops pods (upstream `KillPodFunc` + `WaitForAllPodsUnmount`).
pub trait PodKiller: Send + Sync {
    /// Records the pod's final status ([`shutdown_status`]) and asks its worker to stop it
    /// within `grace_period` seconds. Returns at once.
    fn kill(&self, pod: &Pod, grace_period: i64);
    /// Whether the pod's containers have stopped and its volumes are unmounted.
    fn is_done(&self, uid: &str) -> bool;
}

/// The real killer: the status manager gets the final status first (the API status syncer
/// pushes it at once, while the network is still up), then the pod worker gets a kill with the
/// grace override — the same path the eviction manager uses.
#[derive(Clone)]
pub struct WorkerKiller {
    pub status: StatusManager,
    pub workers: PodWorkers,
}

impl PodKiller for WorkerKiller {
    fn kill(&self, pod: &Pod, grace_period: i64) {
        let old = self.status.get_pod_status(pod.uid()).or(pod.status.clone());
        let status = shutdown_status(old, Timestamp::now());
        self.status.set_pod_status(pod, status);
        self.workers.update_pod(PodWork::kill(
            pod.clone(),
            KillOptions {
                grace_period_override: Some(grace_period),
                removed: false,
            },
        ));
    }

    fn is_done(&self, uid: &str) -> bool {
        matches!(self.workers.phase(uid), None | Some(WorkerPhase::Finished))
    }
}

/// The status upstream's kill status function gives a pod: `Failed` (unless it already
/// `Succeeded`), reason `Terminated`, the shutdown message, and a `DisruptionTarget`
/// condition (reason `TerminationByKubelet`) replacing any earlier one.
pub fn shutdown_status(old: Option<PodStatus>, now: Timestamp) -> PodStatus {
    let mut status = old.unwrap_or_default();
    if status.phase.as_deref() != Some("Succeeded") {
        status.phase = Some("Failed".to_owned());
    }
    status.reason = Some(REASON.to_owned());
    status.message = Some(MESSAGE.to_owned());
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let previous = conditions.iter().position(|c| c.type_ == DISRUPTION_TARGET);
    let mut condition = PodCondition {
        type_: DISRUPTION_TARGET.to_owned(),
        status: "True".to_owned(),
        reason: Some(DISRUPTION_REASON.to_owned()),
        message: Some(MESSAGE.to_owned()),
        last_transition_time: Some(Time(now)),
        ..PodCondition::default()
    };
    match previous {
        Some(i) => {
            // Upstream `UpdatePodCondition`: the transition time moves only with the status.
            if conditions[i].status == condition.status {
                condition
                    .last_transition_time
                    .clone_from(&conditions[i].last_transition_time);
            }
            conditions[i] = condition;
        }
        None => conditions.push(condition),
    }
    status
}

/// The active pods (upstream `GetActivePods`): admitted pods that may still run.
pub type ActivePodsFn = Arc<dyn Fn() -> Vec<Pod> + Send + Sync>;

/// Upstream `GetActivePods` as the shutdown needs it: the pods whose worker may still run
/// containers (syncing or terminating).
pub fn active_pods(
    pods: tokio::sync::watch::Receiver<crate::types::PodsSnapshot>,
    workers: PodWorkers,
) -> ActivePodsFn {
    Arc::new(move || {
        pods.borrow()
            .iter()
            .filter(|p| {
                matches!(
                    workers.phase(p.uid()),
                    Some(WorkerPhase::Syncing | WorkerPhase::Terminating { .. })
                )
            })
            .map(|p| (**p).clone())
            .collect()
    })
}

/// What the manager reads and writes besides its settings.
pub struct NodeShutdownInputs {
    pub state: ShutdownState,
    pub active_pods: ActivePodsFn,
    pub killer: Arc<dyn PodKiller>,
    pub events: Arc<dyn EventRecorder>,
    pub metrics: Option<KubeletMetrics>,
    /// Asks the node status manager for an update now (upstream `syncNodeStatus`).
    pub node_sync: Arc<Notify>,
    /// Where `graceful_node_shutdown_state` lives (the kubelet's root directory).
    pub state_dir: PathBuf,
}

/// What the start-up checks found (beyond upstream).
#[derive(Debug, Clone, PartialEq)]
pub struct Readiness {
    pub lock_held: bool,
    /// logind's effective `InhibitDelayMaxSec` after any override.
    pub inhibit_delay: Duration,
    /// Why a shutdown would not be fully graceful; empty when it would.
    pub problems: Vec<String>,
}

/// The persisted start and end of the last graceful shutdown (upstream `state`, Go's JSON of
/// `time.Time`: RFC 3339, the zero time `0001-01-01T00:00:00Z` meaning unset).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StoredState {
    #[serde(default)]
    pub(super) start_time: String,
    #[serde(default)]
    pub(super) end_time: String,
}

pub(super) const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

fn go_time(t: Option<SystemTime>) -> String {
    t.and_then(|t| Timestamp::try_from(t).ok())
        .map_or_else(|| GO_ZERO_TIME.to_owned(), |t| t.to_string())
}

/// Upstream `timestamp`: whole seconds since the epoch, 0 for the zero time or garbage.
pub(super) fn unix_seconds(s: &str) -> f64 {
    match s.parse::<Timestamp>() {
        Ok(t) if t.as_second() > 0 => t.as_second() as f64,
        _ => 0.0,
    }
}

/// The manager (one task).
pub struct NodeShutdownManager {
    settings: NodeShutdownSettings,
    inputs: NodeShutdownInputs,
    /// The problems last reported, so an unchanged situation is not re-posted as an event.
    last_reported: Option<Vec<String>>,
}

/// A live watch: the connection, the lock (while held) and the signal stream.
struct Watch {
    logind: Logind,
    lock: Option<InhibitLock>,
    signals: ShutdownSignals,
}

impl NodeShutdownManager {
    pub fn new(settings: NodeShutdownSettings, inputs: NodeShutdownInputs) -> Self {
        info!(
            groups = ?settings.groups,
            period_requested = ?settings.period_requested(),
            "creating node shutdown manager"
        );
        Self {
            settings,
            inputs,
            last_reported: None,
        }
    }

    /// Watches logind until `cancel`: (re)connects, checks, takes the lock and handles
    /// `PrepareForShutdown` signals; after the bus goes away, watches again (upstream's 1 s
    /// reconnect period; start-up failures back off up to five minutes).
    pub async fn run(mut self, cancel: CancellationToken) {
        self.load_stored_metrics();
        let mut retry = self.settings.reconnect_period;
        loop {
            let started = tokio::select! {
                _ = cancel.cancelled() => return,
                started = self.start() => started,
            };
            match started {
                Ok((watch, readiness)) => {
                    retry = self.settings.reconnect_period;
                    self.report(&readiness);
                    self.watch(watch, &cancel).await;
                    self.set_lock_metrics(false, None);
                    if cancel.is_cancelled() {
                        return;
                    }
                    if self.inputs.state.is_shutting_down() {
                        // After the lock is released the node goes down and the system bus
                        // with it: expected, not an error (the watch resumes should the
                        // shutdown be cancelled).
                        info!(
                            "the system bus went away while the node shuts down; watching again in case the shutdown is cancelled"
                        );
                    } else {
                        error!("ended watching the node for shutdown events; watching again");
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(self.settings.reconnect_period) => {}
                    }
                }
                Err(e) => {
                    self.report_failure(&e);
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(retry) => {}
                    }
                    retry = (retry * 2).min(MAX_RETRY);
                }
            }
        }
    }

    /// Upstream `start`: connect, raise logind's delay if needed, subscribe, take the lock;
    /// then check the lock is listed and the delay covers the grace periods.
    async fn start(&self) -> Result<(Watch, Readiness), LogindError> {
        let logind = Logind::connect(self.settings.bus_address.as_deref()).await?;
        let requested = self.settings.period_requested();
        let mut delay = logind.current_inhibit_delay().await?;
        let mut problems = Vec::new();
        if requested > delay {
            info!(current = ?delay, ?requested, dir = %self.settings.logind_conf_dir.display(), "logind's InhibitDelayMaxSec is below the shutdown grace period; overriding it");
            match override_inhibit_delay(&self.settings.logind_conf_dir, requested) {
                Ok(()) => {
                    if let Err(e) = logind.reload_logind_conf().await {
                        problems.push(e.to_string());
                    }
                }
                Err(e) => problems.push(format!(
                    "unable to override inhibit delay by shutdown manager: {e}"
                )),
            }
            delay = logind.current_inhibit_delay().await?;
            if requested > delay {
                problems.push(format!(
                    "node shutdown manager was unable to update logind InhibitDelayMaxSec to {} (ShutdownGracePeriod), current value of InhibitDelayMaxSec ({}) is less than requested ShutdownGracePeriod",
                    go_duration(requested),
                    go_duration(delay)
                ));
            }
        }
        // Subscribe first: a shutdown announced right after the lock is taken is not missed.
        let signals = logind.monitor_shutdown().await?;
        let lock = logind.inhibit_shutdown().await?;
        let lock_held = match logind.lock_is_listed().await {
            Ok(true) => true,
            Ok(false) => {
                problems.push("logind does not list the kubelet's delay inhibitor lock on shutdown (systemd-inhibit --list)".to_owned());
                false
            }
            Err(e) => {
                warn!(error = %e, "cannot verify that logind lists the inhibitor lock");
                true
            }
        };
        let readiness = Readiness {
            lock_held,
            inhibit_delay: delay,
            problems,
        };
        Ok((
            Watch {
                logind,
                lock: Some(lock),
                signals,
            },
            readiness,
        ))
    }

    /// Handles signals until the stream ends or `cancel` fires.
    async fn watch(&mut self, mut watch: Watch, cancel: &CancellationToken) {
        loop {
            let signal = tokio::select! {
                _ = cancel.cancelled() => return,
                signal = watch.signals.next() => signal,
            };
            let shutting_down = match signal {
                None => return,
                Some(Err(e)) => {
                    error!(error = %e, "failed obtaining shutdown event");
                    continue;
                }
                Some(Ok(start)) => start,
            };
            info!(
                event = if shutting_down {
                    "shutdown"
                } else {
                    "cancelled"
                },
                "shutdown manager detected new shutdown event"
            );
            let message = if shutting_down {
                "Shutdown manager detected shutdown event"
            } else {
                "Shutdown manager detected shutdown cancellation"
            };
            self.inputs
                .events
                .node_event(EventType::Normal, EVENT_REASON, message);
            self.inputs.state.set(shutting_down);
            self.inputs.node_sync.notify_one();
            if shutting_down {
                let lock = watch.lock.take();
                if lock.is_none() {
                    warn!("no inhibitor lock held while processing this shutdown event");
                }
                self.set_lock_metrics(false, None);
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    () = self.process_shutdown(lock) => {}
                }
            } else {
                // Upstream `acquireInhibitLock`: a new lock, then the old one (if any) goes.
                match watch.logind.inhibit_shutdown().await {
                    Ok(lock) => {
                        watch.lock = Some(lock);
                        let listed = watch.logind.lock_is_listed().await.unwrap_or(true);
                        let delay = watch.logind.current_inhibit_delay().await.ok();
                        self.set_lock_metrics(listed, delay);
                        let covered = delay.is_some_and(|d| d >= self.settings.period_requested());
                        if let Some(m) = &self.inputs.metrics {
                            m.set_graceful_shutdown_protected(listed && covered);
                        }
                        info!(
                            listed,
                            "inhibitor lock taken again after the cancelled shutdown"
                        );
                    }
                    Err(e) => self.report_failure(&e),
                }
            }
        }
    }

    /// Upstream `processShutdownEvent` + `killPods`: each priority group, lowest first, gets
    /// its pods killed with the group's budget as grace period (or their own, when shorter;
    /// less [`status_reserve`](super::status_reserve)), and is waited for until its pods
    /// stopped or the budget passed; then the lock goes.
    pub async fn process_shutdown(&self, lock: Option<InhibitLock>) {
        let started = SystemTime::now();
        self.store_state(Some(started), None);
        if let Some(m) = &self.inputs.metrics {
            m.set_graceful_shutdown_times(Some(started), None);
        }
        let pods = (self.inputs.active_pods)();
        info!(
            pods = pods.len(),
            "shutdown manager processing shutdown event"
        );
        for group in group_by_priority(&self.settings.groups, pods) {
            // No pods in this range: no waiting for it either.
            if group.pods.is_empty() {
                continue;
            }
            for pod in &group.pods {
                let grace = kill_grace_period(pod, &group.budget);
                info!(pod = %pod.full_name(), uid = %pod.uid(), grace_period = grace, priority = group.budget.priority, "shutdown manager killing pod with gracePeriod");
                self.inputs.killer.kill(pod, grace);
            }
            let budget =
                Duration::from_secs(u64::try_from(group.budget.grace_period_seconds).unwrap_or(0));
            let uids: Vec<&str> = group.pods.iter().map(|p| p.uid()).collect();
            let all_done = async {
                while !uids.iter().all(|u| self.inputs.killer.is_done(u)) {
                    tokio::time::sleep(DONE_POLL).await;
                }
            };
            match tokio::time::timeout(budget, all_done).await {
                Ok(()) => debug!(
                    grace_period = group.budget.grace_period_seconds,
                    priority = group.budget.priority,
                    "done waiting for all pods in group to terminate"
                ),
                Err(_) => info!(
                    grace_period = group.budget.grace_period_seconds,
                    priority = group.budget.priority,
                    "shutdown manager pod killing time out"
                ),
            }
        }
        // The end is recorded before the lock goes (as upstream's deferred calls run): the
        // node may power off right after.
        let ended = SystemTime::now();
        self.store_state(Some(started), Some(ended));
        if let Some(m) = &self.inputs.metrics {
            m.set_graceful_shutdown_times(Some(started), Some(ended));
        }
        if let Some(lock) = lock {
            lock.release();
        }
        info!("shutdown manager completed processing shutdown event, node will shutdown shortly");
    }

    /// Loud when a shutdown would not be graceful; the event only when the problems change.
    fn report(&mut self, readiness: &Readiness) {
        self.set_lock_metrics(readiness.lock_held, Some(readiness.inhibit_delay));
        if let Some(m) = &self.inputs.metrics {
            m.set_graceful_shutdown_protected(readiness.problems.is_empty());
        }
        if readiness.problems.is_empty() {
            info!(inhibit_delay = ?readiness.inhibit_delay, requested = ?self.settings.period_requested(), "node shutdown manager holds logind's delay inhibitor lock");
            self.last_reported = Some(Vec::new());
            return;
        }
        for p in &readiness.problems {
            error!(problem = %p, "graceful node shutdown will not give pods their full grace period");
        }
        self.event_once(readiness.problems.clone());
    }

    fn report_failure(&mut self, e: &LogindError) {
        if self.inputs.state.is_shutting_down() {
            // The node is going down (logind and the bus stop after the lock is released): no
            // Warning event, no error; the caller keeps trying in case the shutdown is
            // cancelled.
            info!(error = %e, "node shutting down: logind unreachable (expected); retrying");
            self.set_lock_metrics(false, None);
            return;
        }
        error!(error = %e, "failed to start node shutdown manager: pods will not be stopped gracefully when the node shuts down");
        self.set_lock_metrics(false, None);
        if let Some(m) = &self.inputs.metrics {
            m.set_graceful_shutdown_protected(false);
        }
        self.event_once(vec![e.to_string()]);
    }

    fn event_once(&mut self, problems: Vec<String>) {
        if self.last_reported.as_ref() == Some(&problems) {
            return;
        }
        let message = format!(
            "Graceful node shutdown is not fully in effect ({}s requested): {}",
            self.settings.period_requested().as_secs(),
            problems.join("; ")
        );
        self.inputs
            .events
            .node_event(EventType::Warning, UNPROTECTED_REASON, &message);
        self.last_reported = Some(problems);
    }

    /// The lock gauges; without a lock a shutdown would not be graceful either.
    fn set_lock_metrics(&self, held: bool, delay: Option<Duration>) {
        if let Some(m) = &self.inputs.metrics {
            m.set_graceful_shutdown_inhibitor(held, delay);
            if !held {
                m.set_graceful_shutdown_protected(false);
            }
        }
    }

    fn state_path(&self) -> PathBuf {
        self.inputs.state_dir.join(STATE_FILE)
    }

    /// Upstream `setMetrics`: the last shutdown's times survive a restart.
    pub(super) fn load_stored_metrics(&self) {
        let Some(m) = &self.inputs.metrics else {
            return;
        };
        let path = self.state_path();
        let state: StoredState = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(s) => s,
                Err(e) => {
                    error!(path = %path.display(), error = %e, "failed to load graceful shutdown state");
                    return;
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                error!(path = %path.display(), error = %e, "failed to load graceful shutdown state");
                return;
            }
        };
        m.set_graceful_shutdown_seconds(
            unix_seconds(&state.start_time),
            unix_seconds(&state.end_time),
        );
    }

    /// Upstream `storage.Store`: atomically ([`crate::nofollow::atomic_write`]), mode 0644.
    fn store_state(&self, start: Option<SystemTime>, end: Option<SystemTime>) {
        let state = StoredState {
            start_time: go_time(start),
            end_time: go_time(end),
        };
        let path = self.state_path();
        let write = || -> std::io::Result<()> {
            let bytes = serde_json::to_vec(&state).map_err(std::io::Error::other)?;
            crate::nofollow::atomic_write(
                &path,
                &bytes,
                crate::nofollow::WriteOptions::durable(0o644),
            )
        };
        if let Err(e) = write() {
            error!(path = %path.display(), error = %e, "failed to store graceful shutdown state");
        }
    }
}

/// Go's `time.Duration.String()` for whole seconds and minutes (`30s`, `1m30s`, `0s`), as in
/// upstream's error message.
pub(super) fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let frac = d.subsec_millis();
    let s = if frac > 0 {
        format!("{s}.{frac:03}").trim_end_matches('0').to_owned() + "s"
    } else {
        format!("{s}s")
    };
    match (h, m) {
        (0, 0) => s,
        (0, m) => format!("{m}m{s}"),
        (h, m) => format!("{h}h{m}m{s}"),
    }
}
