//! Container garbage collection (upstream `kuberuntime_gc.go` + `container/container_gc.go`).
//! Owns the GC policy and one lock so that runs never overlap. Receives the runtime's containers
//! and sandboxes, the pod workers' view of each pod UID and whether all pod sources are ready;
//! decides purely (`select_containers`, `select_sandboxes`, `select_log_dirs`) which dead
//! containers, dead sandboxes and pod log directories go; then removes them through CRI and the
//! filesystem. Emits a `ContainerGCFailed` node event when a periodic run fails.
//!
//! Pods still known to the pod workers are removed by the pod sync itself
//! (`kill::remove_pod_content`); this GC only reports "content removable" for pods the workers
//! no longer know, so the two never fight over the same pod (a race ends in NotFound, which is
//! tolerated on both sides).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rkubelet_cri::api::{
    self, ContainerState, ContainerStatusRequest, ListContainersRequest, ListPodSandboxRequest,
    PodSandboxState, RemoveContainerRequest, RemovePodSandboxRequest, StopContainerRequest,
    StopPodSandboxRequest,
};
use rkubelet_cri::{CriError, RuntimeService};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::clock::Clock;
use crate::events::{EventRecorder, EventType};
use crate::kuberuntime::labels::{CONTAINER_NAME_LABEL, POD_UID_LABEL};

/// Upstream `ContainerGCPeriod`.
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);

/// Upstream `kubecontainer.GCPolicy`, from `--minimum-container-ttl-duration`,
/// `--maximum-dead-containers-per-container` and `--maximum-dead-containers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerGcPolicy {
    /// Dead containers younger than this (by creation time) are kept.
    pub min_age: Duration,
    /// Dead containers kept per (pod, container name); negative: no limit.
    pub max_per_pod_container: i32,
    /// Dead containers kept in total; negative: no limit.
    pub max_containers: i32,
}

impl Default for ContainerGcPolicy {
    fn default() -> Self {
        Self {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// What the pod workers know of a pod UID (upstream `podStateProvider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodGcState {
    /// Known and not terminated: only the policy limits apply.
    Active,
    /// Known and terminated: its runtime content may go when evicting for disk pressure.
    Terminated,
    /// Unknown to the pod workers: all of its content may go (once all sources are ready).
    Removed,
}

impl PodGcState {
    /// Upstream `ShouldPodContentBeRemoved`.
    fn content_removable(self) -> bool {
        self == Self::Removed
    }
    /// Upstream `ShouldPodRuntimeBeRemoved`.
    fn runtime_removable(self) -> bool {
        self != Self::Active
    }
}

/// The pod state of a UID.
pub type PodStateFn = Arc<dyn Fn(&str) -> PodGcState + Send + Sync>;
/// Whether every expected pod source has delivered its first snapshot.
pub type SourcesReadyFn = Arc<dyn Fn() -> bool + Send + Sync>;

/// A container as the GC sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcContainer {
    pub id: String,
    pub pod_uid: String,
    pub name: String,
    pub sandbox_id: String,
    /// Creation time, Unix nanoseconds.
    pub created_at: i64,
    pub attempt: u32,
    pub state: ContainerState,
}

impl GcContainer {
    fn from_api(c: &api::Container) -> Option<Self> {
        let pod_uid = c.labels.get(POD_UID_LABEL)?.clone();
        let name = c
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .or_else(|| c.labels.get(CONTAINER_NAME_LABEL).cloned())
            .unwrap_or_default();
        Some(Self {
            id: c.id.clone(),
            pod_uid,
            name,
            sandbox_id: c.pod_sandbox_id.clone(),
            created_at: c.created_at,
            attempt: c.metadata.as_ref().map_or(0, |m| m.attempt),
            state: ContainerState::try_from(c.state).unwrap_or(ContainerState::ContainerUnknown),
        })
    }
}

/// A sandbox as the GC sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcSandbox {
    pub id: String,
    pub pod_uid: String,
    pub created_at: i64,
    pub attempt: u32,
    pub ready: bool,
}

impl GcSandbox {
    fn from_api(s: &api::PodSandbox) -> Option<Self> {
        let meta = s.metadata.as_ref()?;
        Some(Self {
            id: s.id.clone(),
            pod_uid: meta.uid.clone(),
            created_at: s.created_at,
            attempt: meta.attempt,
            ready: s.state == PodSandboxState::SandboxReady as i32,
        })
    }
}

/// Newest first by creation time (upstream `byCreated`); the attempt only breaks ties.
fn newest_first(a: &GcContainer, b: &GcContainer) -> std::cmp::Ordering {
    b.created_at
        .cmp(&a.created_at)
        .then(b.attempt.cmp(&a.attempt))
}

/// The dead containers to remove, in removal order (upstream `evictContainers`). `now` is Unix
/// nanoseconds; `evict_non_deleted` is set by `delete_all_unused_containers`.
pub fn select_containers<'a>(
    containers: &'a [GcContainer],
    policy: &ContainerGcPolicy,
    now: i64,
    sources_ready: bool,
    evict_non_deleted: bool,
    pod_state: &dyn Fn(&str) -> PodGcState,
) -> Vec<&'a GcContainer> {
    let min_age = i64::try_from(policy.min_age.as_nanos()).unwrap_or(i64::MAX);
    let newest_gc_time = now.saturating_sub(min_age);
    // Evict units: (pod uid, container name) → dead containers, newest first.
    let mut units: BTreeMap<(&str, &str), Vec<&GcContainer>> = BTreeMap::new();
    for c in containers {
        if c.state == ContainerState::ContainerRunning || c.created_at > newest_gc_time {
            continue;
        }
        units
            .entry((c.pod_uid.as_str(), c.name.as_str()))
            .or_default()
            .push(c);
    }
    for unit in units.values_mut() {
        unit.sort_by(|a, b| newest_first(a, b));
    }
    let mut removed = Vec::new();
    if sources_ready {
        units.retain(|(uid, _), unit| {
            let state = pod_state(uid);
            if state.content_removable() || (evict_non_deleted && state.runtime_removable()) {
                removed.extend(unit.iter().rev().copied());
                false
            } else {
                true
            }
        });
    }
    let keep_per_unit = |units: &mut BTreeMap<_, Vec<&'a GcContainer>>,
                         removed: &mut Vec<&'a GcContainer>,
                         keep: usize| {
        for unit in units.values_mut() {
            if unit.len() > keep {
                removed.extend(unit.drain(keep..).rev());
            }
        }
    };
    if let Ok(keep) = usize::try_from(policy.max_per_pod_container) {
        keep_per_unit(&mut units, &mut removed, keep);
    }
    if let Ok(max) = usize::try_from(policy.max_containers) {
        let total: usize = units.values().map(Vec::len).sum();
        if total > max {
            // An equal share per unit first (at least one each), then the oldest overall.
            let share = (max / units.len().max(1)).max(1);
            keep_per_unit(&mut units, &mut removed, share);
            let mut flat: Vec<&GcContainer> = units.values().flatten().copied().collect();
            if flat.len() > max {
                flat.sort_by(|a, b| newest_first(a, b));
                removed.extend(flat.drain(max..).rev());
            }
        }
    }
    removed
}

/// The sandboxes to remove (upstream `evictSandboxes`): not ready and without containers
/// (`containers` is the runtime's list after container GC); for a pod that still exists the
/// newest sandbox stays.
pub fn select_sandboxes<'a>(
    sandboxes: &'a [GcSandbox],
    containers: &[GcContainer],
    evict_non_deleted: bool,
    pod_state: &dyn Fn(&str) -> PodGcState,
) -> Vec<&'a GcSandbox> {
    let with_containers: HashSet<&str> = containers.iter().map(|c| c.sandbox_id.as_str()).collect();
    let mut by_pod: BTreeMap<&str, Vec<&GcSandbox>> = BTreeMap::new();
    for s in sandboxes {
        by_pod.entry(s.pod_uid.as_str()).or_default().push(s);
    }
    let mut out = Vec::new();
    for (uid, mut list) in by_pod {
        list.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.attempt.cmp(&a.attempt))
        });
        let state = pod_state(uid);
        let keep = if state.content_removable() || (evict_non_deleted && state.runtime_removable())
        {
            0
        } else {
            1
        };
        out.extend(
            list.into_iter()
                .skip(keep)
                .rev()
                .filter(|s| !s.ready && !with_containers.contains(s.id.as_str())),
        );
    }
    out
}

/// The pod UID of a log directory name `<namespace>_<name>_<uid>` (upstream
/// `parsePodUIDFromLogsDirectory`).
pub fn pod_uid_of_log_dir(name: &str) -> &str {
    name.rsplit('_').next().unwrap_or(name)
}

/// The pod log directories to remove (upstream `evictPodLogsDirectories`): only once all sources
/// are ready, those of pods whose content may go.
pub fn select_log_dirs<'a>(
    names: &'a [String],
    sources_ready: bool,
    pod_state: &dyn Fn(&str) -> PodGcState,
) -> Vec<&'a str> {
    if !sources_ready {
        return Vec::new();
    }
    names
        .iter()
        .map(String::as_str)
        .filter(|n| pod_state(pod_uid_of_log_dir(n)).content_removable())
        .collect()
}

/// A GC run could not read the runtime's state (removal failures are only logged, as upstream).
#[derive(Debug, thiserror::Error)]
pub enum ContainerGcError {
    #[error("failed to list containers: {0}")]
    ListContainers(#[source] CriError),
    #[error("failed to list pod sandboxes: {0}")]
    ListSandboxes(#[source] CriError),
    #[error("failed to read podLogsRootDirectory {path:?}: {source}")]
    ReadLogsDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What one run removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    pub containers: Vec<String>,
    pub sandboxes: Vec<String>,
    pub log_dirs: Vec<PathBuf>,
}

/// Settings of the container GC.
#[derive(Debug, Clone)]
pub struct ContainerGcConfig {
    pub policy: ContainerGcPolicy,
    pub pod_logs_dir: PathBuf,
    /// `/var/log/containers` (legacy symlinks removed with their container), if used.
    pub container_log_symlink_dir: Option<PathBuf>,
}

struct Inner {
    runtime: Arc<dyn RuntimeService>,
    config: ContainerGcConfig,
    pod_state: PodStateFn,
    sources_ready: SourcesReadyFn,
    clock: Clock,
    /// Serializes runs (the periodic loop and the eviction manager's calls).
    running: tokio::sync::Mutex<()>,
}

/// Handle to the container GC. Cheap to clone.
#[derive(Clone)]
pub struct ContainerGc {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ContainerGc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerGc")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl ContainerGc {
    pub fn new(
        runtime: Arc<dyn RuntimeService>,
        config: ContainerGcConfig,
        pod_state: PodStateFn,
        sources_ready: SourcesReadyFn,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                runtime,
                config,
                pod_state,
                sources_ready,
                clock: Clock::new(),
                running: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Uses `clock` for "now" (tests anchor it with the fake runtime's clock).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.clock = clock;
        }
        self
    }

    /// One periodic run (upstream `GarbageCollect(..., evictNonDeletedPods=false)`).
    pub async fn garbage_collect(&self) -> Result<GcReport, ContainerGcError> {
        self.run_once(false).await
    }

    /// Removes every dead container the policy allows, including those of terminated pods
    /// (upstream `DeleteAllUnusedContainers`, called by the eviction manager).
    pub async fn delete_all_unused_containers(&self) -> Result<GcReport, ContainerGcError> {
        info!("attempting to delete unused containers");
        self.run_once(true).await
    }

    /// Runs `garbage_collect` every `period` (the first run right away) until cancelled;
    /// failures become a `ContainerGCFailed` node event.
    pub async fn run(
        self,
        period: Duration,
        events: Arc<dyn EventRecorder>,
        cancel: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(period.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.garbage_collect().await {
                Ok(r) if r != GcReport::default() => {
                    info!(
                        containers = r.containers.len(),
                        sandboxes = r.sandboxes.len(),
                        log_dirs = r.log_dirs.len(),
                        "container garbage collection removed dead content"
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(error = %e, "container garbage collection failed");
                    events.node_event(EventType::Warning, "ContainerGCFailed", &e.to_string());
                }
            }
        }
    }

    async fn run_once(&self, evict_non_deleted: bool) -> Result<GcReport, ContainerGcError> {
        let _guard = self.inner.running.lock().await;
        let pod_state = |uid: &str| (self.inner.pod_state)(uid);
        let sources_ready = (self.inner.sources_ready)();
        let policy = self.inner.config.policy;
        let mut report = GcReport::default();

        let containers = self.list_containers().await?;
        let now = self
            .inner
            .clock
            .now()
            .timestamp_nanos_opt()
            .unwrap_or(i64::MAX);
        for c in select_containers(
            &containers,
            &policy,
            now,
            sources_ready,
            evict_non_deleted,
            &pod_state,
        ) {
            if self.remove_container(c).await {
                report.containers.push(c.id.clone());
            }
        }

        let containers = self.list_containers().await?;
        let sandboxes: Vec<GcSandbox> = self
            .inner
            .runtime
            .list_pod_sandbox(ListPodSandboxRequest { filter: None })
            .await
            .map_err(ContainerGcError::ListSandboxes)?
            .items
            .iter()
            .filter_map(GcSandbox::from_api)
            .collect();
        for s in select_sandboxes(&sandboxes, &containers, evict_non_deleted, &pod_state) {
            if self.remove_sandbox(&s.id).await {
                report.sandboxes.push(s.id.clone());
            }
        }

        let dir = &self.inner.config.pod_logs_dir;
        if sources_ready {
            // Directory walks and log removal run off the async worker threads.
            let listed = dir.clone();
            let names: Vec<String> = tokio::task::spawn_blocking(move || {
                std::fs::read_dir(&listed).map(|entries| {
                    entries
                        .filter_map(Result::ok)
                        .filter_map(|e| e.file_name().into_string().ok())
                        .collect()
                })
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
            .map_err(|source| ContainerGcError::ReadLogsDir {
                path: dir.clone(),
                source,
            })?;
            let doomed: Vec<PathBuf> = select_log_dirs(&names, sources_ready, &pod_state)
                .into_iter()
                .map(|name| dir.join(name))
                .collect();
            let removed = tokio::task::spawn_blocking(move || {
                doomed
                    .into_iter()
                    .filter(|path| match std::fs::remove_dir_all(path) {
                        Ok(()) => true,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
                        Err(e) => {
                            warn!(dir = %path.display(), error = %e, "failed to remove pod logs directory");
                            false
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            report.log_dirs.extend(removed);
        }
        self.remove_dead_symlinks().await;
        Ok(report)
    }

    /// Removes legacy `/var/log/containers` symlinks whose target is gone, unless their
    /// container still runs (its log may be mid-rotation), as upstream.
    async fn remove_dead_symlinks(&self) {
        let Some(dir) = self.inner.config.container_log_symlink_dir.clone() else {
            return;
        };
        // The dangling `.log` links, listed off the async workers.
        let listed = tokio::task::spawn_blocking(move || {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                return Vec::new();
            };
            entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let path = e.path();
                    let name = e.file_name().to_string_lossy().into_owned();
                    // `exists` follows the link: false for a dangling one.
                    (name.ends_with(".log") && !path.exists() && path.is_symlink())
                        .then_some((name, path))
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let mut dead = Vec::new();
        for (name, path) in listed {
            if let Some(id) = container_id_of_legacy_symlink(&name) {
                let status = self
                    .inner
                    .runtime
                    .container_status(ContainerStatusRequest {
                        container_id: id.to_owned(),
                        verbose: false,
                    })
                    .await;
                if let Ok(resp) = status
                    && resp
                        .status
                        .is_some_and(|st| st.state != ContainerState::ContainerExited as i32)
                {
                    continue;
                }
            }
            dead.push(path);
        }
        if dead.is_empty() {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || {
            for path in dead {
                if let Err(err) = std::fs::remove_file(&path)
                    && err.kind() != std::io::ErrorKind::NotFound
                {
                    warn!(path = %path.display(), error = %err, "failed to remove dead container log symlink");
                }
            }
        })
        .await;
    }

    async fn list_containers(&self) -> Result<Vec<GcContainer>, ContainerGcError> {
        Ok(self
            .inner
            .runtime
            .list_containers(ListContainersRequest { filter: None })
            .await
            .map_err(ContainerGcError::ListContainers)?
            .containers
            .iter()
            .filter_map(GcContainer::from_api)
            .collect())
    }

    /// Kills a container in unknown state first, removes its logs (rotated ones included) and
    /// legacy symlink, then the container (upstream `removeContainer`). Failures are logged.
    async fn remove_container(&self, c: &GcContainer) -> bool {
        let rt = &self.inner.runtime;
        if c.state == ContainerState::ContainerUnknown
            && let Err(e) = rt
                .stop_container(StopContainerRequest {
                    container_id: c.id.clone(),
                    timeout: 0,
                })
                .await
            && !e.is_not_found()
        {
            warn!(id = %c.id, error = %e, "failed to stop container in unknown state before removal");
            return false;
        }
        match rt
            .container_status(ContainerStatusRequest {
                container_id: c.id.clone(),
                verbose: false,
            })
            .await
        {
            Ok(resp) => {
                if let Some(st) = resp.status {
                    let link = self
                        .inner
                        .config
                        .container_log_symlink_dir
                        .as_ref()
                        .and_then(|dir| {
                            let pod = st.labels.get(crate::kuberuntime::labels::POD_NAME_LABEL)?;
                            let ns = st
                                .labels
                                .get(crate::kuberuntime::labels::POD_NAMESPACE_LABEL)?;
                            Some(dir.join(crate::kuberuntime::labels::legacy_log_name(
                                pod, ns, &c.name, &c.id,
                            )))
                        });
                    // The log files and the legacy link, in one trip off the async workers.
                    let log_path = st.log_path;
                    let _ = tokio::task::spawn_blocking(move || {
                        remove_container_logs(Path::new(&log_path));
                        if let Some(link) = link {
                            let _ = std::fs::remove_file(link);
                        }
                    })
                    .await;
                }
            }
            Err(e) if e.is_not_found() => return false,
            Err(e) => debug!(id = %c.id, error = %e, "container status before removal failed"),
        }
        match rt
            .remove_container(RemoveContainerRequest {
                container_id: c.id.clone(),
            })
            .await
        {
            Ok(_) => {
                debug!(id = %c.id, pod_uid = %c.pod_uid, container = %c.name, "removed dead container");
                true
            }
            Err(e) if e.is_not_found() => false,
            Err(e) => {
                warn!(id = %c.id, error = %e, "failed to remove container");
                false
            }
        }
    }

    /// Stops (in case it was not) and removes a sandbox (upstream `removeSandbox`).
    async fn remove_sandbox(&self, id: &str) -> bool {
        let rt = &self.inner.runtime;
        if let Err(e) = rt
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.to_owned(),
            })
            .await
            && !e.is_not_found()
        {
            warn!(sandbox = id, error = %e, "failed to stop sandbox before removing");
            return false;
        }
        match rt
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: id.to_owned(),
            })
            .await
        {
            Ok(_) => true,
            Err(e) if e.is_not_found() => false,
            Err(e) => {
                warn!(sandbox = id, error = %e, "failed to remove sandbox");
                false
            }
        }
    }
}

/// The container ID of a legacy symlink name `<pod>_<ns>_<container>-<id>.log` (upstream
/// `getContainerIDFromLegacyLogSymlink`): the 64 characters before `.log`.
pub fn container_id_of_legacy_symlink(name: &str) -> Option<&str> {
    const ID_LEN: usize = 64;
    let base = name.strip_suffix(".log")?;
    let start = base.len().checked_sub(ID_LEN)?;
    let id = base.get(start..)?;
    (start > 0 && base.as_bytes()[start - 1] == b'-').then_some(id)
}

/// Removes a container's log file and every file starting with its name (rotated, compressed
/// and temporary ones; upstream `ContainerLogManager.Clean`).
pub fn remove_container_logs(log_path: &Path) {
    if log_path.as_os_str().is_empty() {
        return;
    }
    let (Some(dir), Some(base)) = (log_path.parent(), log_path.file_name()) else {
        return;
    };
    let base = base.to_string_lossy();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        if e.file_name().to_string_lossy().starts_with(base.as_ref())
            && let Err(err) = std::fs::remove_file(e.path())
            && err.kind() != std::io::ErrorKind::NotFound
        {
            warn!(path = %e.path().display(), error = %err, "failed to remove container log");
        }
    }
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;
