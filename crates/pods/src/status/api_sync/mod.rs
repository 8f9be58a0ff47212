//! API status syncer (upstream status manager's `syncBatch`/`syncPod` loop): owns the record of
//! which status version went to which API object, per pod. Receives status changes from the
//! [`StatusManager`] (`subscribe()`), where each pod's status goes from an injected
//! [`StatusTargetLookup`], whether a deleted pod is fully reclaimed from an injected
//! [`CanBeDeleted`] and whether a pod could still have running containers (its terminal phase
//! is held back until then) from an injected [`CouldHaveRunningContainers`]; emits
//! `PATCH pods/{name}/status` (strategic merge, uid and resourceVersion preconditions) and the final grace-0
//! `DELETE` of gracefully deleted pods.
//!
//! Scheduling: a pod is pushed when its status version is newer than the one last pushed; every
//! `sync_period` (10 s upstream) all pods are also checked against the API's copy of their
//! status (reconcile), a changed target object and pending deletions. Pushes run with bounded
//! concurrency, at most one per pod, so versions reach the API in order. A failed push is
//! retried per pod with backoff (200 ms doubling to 10 s); the first success after an outage
//! retries every pod that failed transiently at once, so all converge within one backoff step.

mod merge;
mod push;

pub use merge::{
    Pushed, is_status_by_kubelet_equal, merge_pod_status, needs_reconcile, needs_update,
};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::PodStatus;
use tokio::task::{Id as TaskId, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::push::{
    ApiView, Job, Outcome, PushContext, Written, choose_pre_image, is_transient, push,
    throttle_hold,
};
use crate::apiclient::RetryBackoff;
use crate::apiclient::patch::PatchError;
use crate::clock::Clock;
use crate::status::manager::StatusManager;
use crate::types::PodUid;

/// Scheduling reason of a push made to delete the pod.
const DELETION: &str = "terminated and reclaimed";

/// Where a pod's status goes in the API.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusTarget {
    pub namespace: String,
    pub name: String,
    /// UID of the API object: the pod's own, or its mirror pod's for a static pod.
    pub api_uid: String,
    /// A static pod (its status goes to the mirror pod, which the syncer never deletes).
    pub is_static: bool,
    /// The API object's status as the pod source last saw it (watched pod or mirror pod), for
    /// the periodic reconcile check without a GET; `None` disables that check.
    pub api_status: Option<PodStatus>,
    /// The API object carries a `deletionTimestamp` as the pod source last saw it. The syncer
    /// also learns this from its own GETs; this makes deletion independent of status changes.
    pub deleting: bool,
    /// The API object's resourceVersion as the pod source last saw it, with `api_status`: the
    /// pre-image a status PATCH is written on (with it as a precondition) instead of a GET.
    /// `None`: no pre-image, every push GETs first (as upstream).
    pub resource_version: Option<String>,
    /// The API object carries the mirror-pod annotation (never deleted by the syncer).
    pub mirror: bool,
}

impl StatusTarget {
    /// The API object as the pod source last saw it.
    fn watched(&self) -> ApiView {
        ApiView {
            uid: self.api_uid.clone(),
            resource_version: self.resource_version.clone(),
            status: self.api_status.clone().unwrap_or_default(),
            deleting: self.deleting,
            mirror: self.mirror,
        }
    }
}

/// Kubelet pod UID → where its status goes; `None` when unknown or a static pod has no mirror
/// pod yet (the syncer tries again later).
pub type StatusTargetLookup = Arc<dyn Fn(&str) -> Option<StatusTarget> + Send + Sync>;

/// Kubelet pod UID → the pod is terminated and its resources reclaimed (upstream
/// `podIsFinished`): a gracefully deleted pod may now be removed from the API.
pub type CanBeDeleted = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Kubelet pod UID → the pod could still have running containers: its worker has not finished
/// terminating it (upstream `PodCouldHaveRunningContainers`). A terminal phase is not written
/// to the API while this holds.
pub type CouldHaveRunningContainers = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Failures of one pod's sync (logged and retried; never fatal).
#[derive(Debug, thiserror::Error)]
pub enum ApiSyncError {
    #[error("getting pod {pod}: {source}")]
    Get { pod: String, source: kube::Error },
    #[error("patching the status of pod {pod}: {source}")]
    Patch { pod: String, source: kube::Error },
    #[error("deleting pod {pod}: {source}")]
    Delete { pod: String, source: kube::Error },
    #[error("building the status patch: {0}")]
    PatchBody(#[source] PatchError),
}

/// After a push the kubelet's throttle held for `Retry-After`, how long past the hold's end it
/// goes again.
const THROTTLE_SLACK: Duration = Duration::from_millis(50);

/// Timing and concurrency knobs.
#[derive(Debug, Clone)]
pub struct ApiSyncSettings {
    /// Full pass: reconcile with the API's copy, changed targets, pending deletions (upstream
    /// `syncPeriod`, 10 s).
    pub sync_period: Duration,
    /// How often pods seen being deleted are checked with [`CanBeDeleted`] (a local call).
    pub deletion_check_period: Duration,
    /// Per-pod retry backoff after a failed push.
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Pushes in flight at once (each is a GET, maybe a PATCH and a DELETE).
    pub max_concurrent: usize,
    /// Limit of one API call, including any retries inside the client (kube's default retry
    /// layer retries 429/503/504 for minutes; this keeps a push slot from hanging on it).
    pub request_timeout: Duration,
    /// Wall clock for condition transition times.
    pub clock: Clock,
}

impl Default for ApiSyncSettings {
    fn default() -> Self {
        Self {
            sync_period: Duration::from_secs(10),
            deletion_check_period: Duration::from_secs(1),
            retry_initial: Duration::from_millis(200),
            retry_max: Duration::from_secs(10),
            max_concurrent: 8,
            request_timeout: Duration::from_secs(5),
            clock: Clock::new(),
        }
    }
}

/// Counters of the syncer's API traffic, shared with the running task (tests, metrics).
#[derive(Debug, Default)]
pub struct ApiSyncStats {
    requests: AtomicU64,
    failed_requests: AtomicU64,
    status_patches: AtomicU64,
    deletes: AtomicU64,
    stale_pre_images: AtomicU64,
}

impl ApiSyncStats {
    /// API calls made (GET, PATCH, DELETE).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
    /// Calls that failed (errors other than 404/409).
    pub fn failed_requests(&self) -> u64 {
        self.failed_requests.load(Ordering::Relaxed)
    }
    /// `PATCH pods/{name}/status` calls.
    pub fn status_patches(&self) -> u64 {
        self.status_patches.load(Ordering::Relaxed)
    }
    /// Final grace-0 `DELETE` calls.
    pub fn deletes(&self) -> u64 {
        self.deletes.load(Ordering::Relaxed)
    }
    /// Pushes whose pre-image the server refused (409 or an unusable resourceVersion), each
    /// followed by a GET.
    pub fn stale_pre_images(&self) -> u64 {
        self.stale_pre_images.load(Ordering::Relaxed)
    }
}

/// The syncer; build with [`ApiStatusSyncer::new`], then `run` it until cancelled.
pub struct ApiStatusSyncer {
    scheduler: Scheduler,
    ctx: Arc<PushContext>,
}

impl ApiStatusSyncer {
    pub fn new(
        client: kube::Client,
        status: StatusManager,
        lookup: StatusTargetLookup,
        can_be_deleted: CanBeDeleted,
        could_have_running: CouldHaveRunningContainers,
        settings: ApiSyncSettings,
    ) -> Self {
        let ctx = Arc::new(PushContext {
            client,
            can_be_deleted: can_be_deleted.clone(),
            could_have_running,
            clock: settings.clock,
            stats: Arc::default(),
            request_timeout: settings.request_timeout,
        });
        Self {
            scheduler: Scheduler {
                status,
                lookup,
                can_be_deleted,
                settings,
                pods: HashMap::new(),
            },
            ctx,
        }
    }

    /// The traffic counters (keep the handle; `run` consumes the syncer).
    pub fn stats(&self) -> Arc<ApiSyncStats> {
        self.ctx.stats.clone()
    }

    /// Syncs until `cancel`; in-flight requests are abandoned on cancellation.
    pub async fn run(mut self, cancel: CancellationToken) {
        let sched = &mut self.scheduler;
        let period = sched.settings.sync_period.max(Duration::from_millis(10));
        let max_concurrent = sched.settings.max_concurrent.max(1);
        info!(
            sync_period = ?period,
            max_concurrent, "starting to sync pod statuses with the API server"
        );
        let mut changes = sched.status.subscribe();
        let mut watching = true;
        let mut tasks: JoinSet<Finished> = JoinSet::new();
        let mut task_pods: HashMap<TaskId, PodUid> = HashMap::new();
        let mut next_full = Instant::now() + period;
        let mut full_pending = false;
        loop {
            let now = Instant::now();
            if now >= next_full {
                next_full = now + period;
                full_pending = true;
            }
            let capacity = max_concurrent.saturating_sub(tasks.len());
            // With every slot busy the full pass waits for the next free one.
            let jobs = if capacity > 0 {
                sched.plan(std::mem::take(&mut full_pending), capacity, now)
            } else {
                Vec::new()
            };
            for job in jobs {
                let ctx = self.ctx.clone();
                let uid = job.uid.clone();
                let handle = tasks.spawn(async move {
                    let outcome = push(&ctx, &job).await;
                    Finished::new(outcome, &job)
                });
                task_pods.insert(handle.id(), uid);
            }
            let wake = sched.next_wake(now, next_full);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                done = tasks.join_next_with_id(), if !tasks.is_empty() => match done {
                    Some(Ok((id, finished))) => {
                        task_pods.remove(&id);
                        sched.record(finished, Instant::now());
                    }
                    Some(Err(e)) => {
                        if let Some(uid) = task_pods.remove(&e.id()) {
                            warn!(%uid, reason = "push task failed", error = %e, "status push ended abnormally; retrying later");
                            sched.record_abnormal(&uid, Instant::now());
                        }
                    }
                    None => {}
                },
                r = changes.changed(), if watching => {
                    if r.is_err() {
                        watching = false;
                    }
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        info!(reason = "cancelled", "pod status sync stopped");
    }
}

/// A push's outcome with what the scheduler needs to record it.
struct Finished {
    uid: PodUid,
    version: u64,
    api_uid: String,
    for_deletion: bool,
    outcome: Outcome,
}

impl Finished {
    fn new(outcome: Outcome, job: &Job) -> Self {
        Self {
            uid: job.uid.clone(),
            version: job.version,
            api_uid: job.target.api_uid.clone(),
            for_deletion: job.for_deletion,
            outcome,
        }
    }
}

/// Per-pod bookkeeping of the syncer (upstream `apiStatusVersions` and more).
#[derive(Debug)]
struct PodState {
    pushed: Option<Pushed>,
    in_flight: bool,
    backoff: RetryBackoff,
    /// Not before this instant after a failure.
    retry_at: Option<Instant>,
    /// The last failure looked like an outage (transport error, 5xx, 429).
    transient_failure: bool,
    /// The API object was seen with a deletionTimestamp.
    deletion_seen: bool,
    /// A deletion attempt found the pod not ready in the API; check again after this.
    deletion_check_at: Option<Instant>,
    /// Deleted from the API: nothing more to do until the status manager forgets the pod.
    deleted: bool,
    /// The server's answer to the last status write (the next pre-image while the watch has
    /// not caught up with it).
    written: Option<Box<Written>>,
}

impl PodState {
    fn new(s: &ApiSyncSettings) -> Self {
        Self {
            pushed: None,
            in_flight: false,
            backoff: RetryBackoff::new(s.retry_initial, s.retry_max),
            retry_at: None,
            transient_failure: false,
            deletion_seen: false,
            deletion_check_at: None,
            deleted: false,
            written: None,
        }
    }
}

/// Decides which pods to push; records outcomes.
struct Scheduler {
    status: StatusManager,
    lookup: StatusTargetLookup,
    can_be_deleted: CanBeDeleted,
    settings: ApiSyncSettings,
    pods: HashMap<PodUid, PodState>,
}

impl Scheduler {
    /// Up to `capacity` pods to push now, oldest status versions first.
    fn plan(&mut self, full: bool, capacity: usize, now: Instant) -> Vec<Job> {
        let mut versions = self.status.versions();
        let present: HashSet<&str> = versions.iter().map(|(u, _)| u.as_str()).collect();
        self.pods
            .retain(|uid, st| st.in_flight || present.contains(uid.as_str()));
        versions.sort_by_key(|(_, v)| *v);
        let mut jobs = Vec::new();
        for (uid, version) in versions {
            if jobs.len() >= capacity {
                break;
            }
            let st = self
                .pods
                .entry(uid.clone())
                .or_insert_with(|| PodState::new(&self.settings));
            if st.in_flight || st.deleted || st.retry_at.is_some_and(|t| t > now) {
                continue;
            }
            let deletion_due = st.deletion_check_at.is_none_or(|t| t <= now);
            let mut target = None;
            let reason = if needs_update(st.pushed.as_ref(), version, None) {
                "new status"
            } else if st.deletion_seen && deletion_due && (self.can_be_deleted)(&uid) {
                DELETION
            } else if full {
                let Some(t) = (self.lookup)(&uid) else {
                    continue;
                };
                let reason = if needs_update(st.pushed.as_ref(), version, Some(&t.api_uid)) {
                    "new API object"
                } else if t.api_status.as_ref().is_some_and(|api| {
                    self.status
                        .get_pod_status(&uid)
                        .is_some_and(|ours| needs_reconcile(api, &ours))
                }) {
                    "API status differs"
                } else if t.deleting && !t.is_static && deletion_due && (self.can_be_deleted)(&uid)
                {
                    DELETION
                } else {
                    continue;
                };
                target = Some(t);
                reason
            } else {
                continue;
            };
            let Some(target) = target.or_else(|| (self.lookup)(&uid)) else {
                debug!(%uid, reason = "no API object known (static pod without mirror pod?)", "status sync deferred");
                continue;
            };
            let Some(latest) = self.status.get_versioned(&uid) else {
                continue;
            };
            debug!(pod = %format!("{}/{}", target.namespace, target.name), %uid, version = latest.version, reason, "syncing pod status");
            st.in_flight = true;
            let pre_image = choose_pre_image(Some(target.watched()), st.written.as_deref());
            jobs.push(Job {
                uid,
                version: latest.version,
                status: latest.status,
                target,
                for_deletion: reason == DELETION,
                pre_image,
            });
        }
        jobs
    }

    /// When the loop must look again without any event: the next full pass, the earliest
    /// pending retry, and the deletion poll while pods are being deleted.
    fn next_wake(&self, now: Instant, next_full: Instant) -> Instant {
        let mut wake = next_full;
        for st in self.pods.values().filter(|s| !s.in_flight && !s.deleted) {
            if let Some(t) = st.retry_at.filter(|t| *t > now) {
                wake = wake.min(t);
            }
            if st.deletion_seen {
                let poll = now
                    + self
                        .settings
                        .deletion_check_period
                        .max(Duration::from_millis(10));
                wake = wake.min(st.deletion_check_at.filter(|t| *t > poll).unwrap_or(poll));
            }
        }
        wake
    }

    fn record(&mut self, done: Finished, now: Instant) {
        let Finished {
            uid,
            version,
            api_uid,
            for_deletion,
            outcome,
        } = done;
        let mut recovered = false;
        if let Some(st) = self.pods.get_mut(&uid) {
            st.in_flight = false;
            let pushed = Some(Pushed {
                version,
                api_uid: api_uid.clone(),
            });
            match outcome {
                Outcome::Synced {
                    patched,
                    deleting,
                    deleted,
                    written,
                } => {
                    if written.is_some() || deleted {
                        st.written = written;
                    }
                    debug!(%uid, %api_uid, version, patched, deleting, deleted, reason = if patched { "status written" } else { "already up to date" }, "pod status synced");
                    recovered = true;
                    st.pushed = pushed;
                    st.backoff.reset();
                    st.retry_at = None;
                    st.transient_failure = false;
                    // A push made for the deletion that did not delete (e.g. the API phase is
                    // not terminal yet) is tried again after a full period, not at every poll.
                    st.deletion_check_at = (for_deletion && deleting && !deleted)
                        .then(|| now + self.settings.sync_period);
                    st.deletion_seen = deleting;
                    st.deleted = deleted;
                }
                Outcome::Gone { reason } => {
                    st.written = None;
                    debug!(%uid, %api_uid, version, reason, "no API object for this status version");
                    recovered = true;
                    st.pushed = pushed;
                    st.backoff.reset();
                    st.retry_at = None;
                    st.transient_failure = false;
                }
                Outcome::Failed {
                    synced,
                    deleting,
                    error,
                } => {
                    st.written = None;
                    if synced {
                        st.pushed = pushed;
                        st.deletion_seen = deleting;
                    }
                    let mut delay = st.backoff.next_delay();
                    if let Some(hold) = throttle_hold(&error) {
                        delay = delay.min(hold + THROTTLE_SLACK);
                    }
                    st.retry_at = Some(now + delay);
                    st.transient_failure = is_transient(&error);
                    warn!(%uid, %api_uid, version, retry_in = ?delay, reason = if st.transient_failure { "API unavailable" } else { "request refused" }, error = %error, "pod status sync failed");
                }
            }
        }
        if recovered {
            // The API answers: pods waiting out an outage backoff go now.
            for st in self.pods.values_mut() {
                if st.transient_failure && st.retry_at.is_some_and(|t| t > now) {
                    st.retry_at = Some(now);
                }
            }
        }
    }

    fn record_abnormal(&mut self, uid: &str, now: Instant) {
        if let Some(st) = self.pods.get_mut(uid) {
            st.in_flight = false;
            st.retry_at = Some(now + st.backoff.next_delay());
        }
    }
}

#[cfg(test)]
mod tests;
