//! Container log manager (upstream `logs/container_log_manager.go`): rotates the logs of running
//! containers. Owns the rotation policy (`containerLogMaxSize`, `containerLogMaxFiles`), one
//! worker task per running container (`worker`), the inotify watch on the log directories
//! (`watch`) and the disk-full relief. Receives: the runtime's running containers (listed every
//! `containerLogMonitorInterval`, and at once when an unknown log file appears), inotify events
//! of the log directories (each wakes the owning container's worker; a burst coalesces into one
//! size check), the workers' reports (rotated, disk full). Emits nothing but files and logs.
//!
//! Beyond upstream (which only looks every monitor interval, so a fast writer outruns it:
//! kubernetes#110630, #134324): rotation is triggered by growth; each container rotates on its
//! own (a slow `ReopenContainerLog` or compression never delays another container);
//! compression runs after the rotation and a failed one is retried, never stopping rotation
//! (#102553); on a full filesystem the oldest rotated files are removed first. File naming and
//! the plans live in `rotate`.

pub mod pod_dir;
pub mod rotate;
mod watch;
mod worker;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rkubelet_cri::api::{
    ContainerFilter, ContainerState, ContainerStateValue, ContainerStatusRequest,
    ListContainersRequest, ReopenContainerLogRequest,
};
use rkubelet_cri::{CriError, RuntimeService};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::clock::Clock;

/// Rotation settings (upstream `LogRotatePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRotatePolicy {
    /// Rotate once the live file has at least this many bytes.
    pub max_size: u64,
    /// Files kept per container log, the live one included (≥ 2).
    pub max_files: usize,
}

/// Settings of the log manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogManagerConfig {
    pub policy: LogRotatePolicy,
    /// `containerLogMaxWorkers`: how many compressions run at once (rotations themselves run
    /// per container and are not queued behind each other).
    pub max_workers: usize,
    pub monitor_interval: Duration,
}

/// Invalid rotation settings; names the config field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogConfigError {
    #[error("invalid containerLogMaxFiles {0}, must be > 1")]
    MaxFiles(i32),
    #[error("containerLogMaxWorkers {0} must be greater than or equal to 1")]
    MaxWorkers(i32),
}

impl LogManagerConfig {
    /// From the config fields; `max_size_bytes < 0` disables rotation (`Ok(None)`), as
    /// upstream's stub manager.
    pub fn from_config(
        max_size_bytes: i64,
        max_files: i32,
        max_workers: i32,
        monitor_interval: Duration,
    ) -> Result<Option<Self>, LogConfigError> {
        if max_files <= 1 {
            return Err(LogConfigError::MaxFiles(max_files));
        }
        if max_workers < 1 {
            return Err(LogConfigError::MaxWorkers(max_workers));
        }
        let Ok(max_size) = u64::try_from(max_size_bytes) else {
            return Ok(None);
        };
        Ok(Some(Self {
            policy: LogRotatePolicy {
                max_size,
                max_files: usize::try_from(max_files).unwrap_or(usize::MAX),
            },
            max_workers: usize::try_from(max_workers).unwrap_or(1),
            monitor_interval,
        }))
    }
}

/// Rotating one container's log failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("failed to list containers: {0}")]
    ListContainers(#[source] CriError),
    #[error("failed to get container status {id:?}: {source}")]
    Status {
        id: String,
        #[source]
        source: CriError,
    },
    #[error("failed to stat container log {path:?}: {source}")]
    Stat {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("container log doesn't exist, reopen container log failed: {0}")]
    ReopenMissing(#[source] CriError),
    #[error("failed to reopen container log {id:?}: {source}")]
    Reopen {
        id: String,
        #[source]
        source: CriError,
    },
    #[error(transparent)]
    Rotate(#[from] rotate::RotateError),
    #[error("rotation task failed: {0}")]
    Join(String),
}

impl LogError {
    /// Whether the filesystem was full (ENOSPC).
    pub fn is_no_space(&self) -> bool {
        match self {
            Self::Rotate(e) => e.is_no_space(),
            Self::Stat { source, .. } => rotate::is_no_space(source),
            _ => false,
        }
    }
}

/// What the log manager needs of the runtime (an I/O edge: the CRI in production, a fake
/// runtime that really writes and reopens files in tests).
#[async_trait::async_trait]
pub trait LogRuntime: Send + Sync {
    /// IDs of the running containers (only those produce output worth rotating).
    async fn running_containers(&self) -> Result<Vec<String>, LogError>;
    /// The container's live log file, if it has one.
    async fn log_path(&self, id: &str) -> Result<Option<PathBuf>, LogError>;
    /// CRI `ReopenContainerLog`: the writer closes its file and opens the live path anew.
    async fn reopen_log(&self, id: &str) -> Result<(), CriError>;
}

/// [`LogRuntime`] over the CRI runtime service.
struct CriLogRuntime(Arc<dyn RuntimeService>);

#[async_trait::async_trait]
impl LogRuntime for CriLogRuntime {
    async fn running_containers(&self) -> Result<Vec<String>, LogError> {
        let running = self
            .0
            .list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    state: Some(ContainerStateValue {
                        state: ContainerState::ContainerRunning as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .map_err(LogError::ListContainers)?
            .containers;
        Ok(running
            .into_iter()
            .filter(|c| c.state == ContainerState::ContainerRunning as i32)
            .map(|c| c.id)
            .collect())
    }

    async fn log_path(&self, id: &str) -> Result<Option<PathBuf>, LogError> {
        let status = self
            .0
            .container_status(ContainerStatusRequest {
                container_id: id.to_owned(),
                verbose: false,
            })
            .await
            .map_err(|source| LogError::Status {
                id: id.to_owned(),
                source,
            })?;
        Ok(status
            .status
            .map(|s| s.log_path)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from))
    }

    async fn reopen_log(&self, id: &str) -> Result<(), CriError> {
        self.0
            .reopen_container_log(ReopenContainerLogRequest {
                container_id: id.to_owned(),
            })
            .await
            .map(|_| ())
    }
}

/// Bytes available to unprivileged writers on the filesystem holding a path.
pub type AvailableFn = Arc<dyn Fn(&Path) -> std::io::Result<u64> + Send + Sync>;

/// Counters of the manager's work (read by tests and logs).
#[derive(Debug, Default)]
pub struct LogStats {
    /// Size checks of live files.
    pub checks: AtomicU64,
    /// Rotations done (live file renamed and reopened).
    pub rotations: AtomicU64,
    /// Housekeeping passes over a container's rotated files (skipped while its directory is
    /// unchanged since a pass that found nothing to do).
    pub housekeepings: AtomicU64,
    /// Rotated files removed to free a full filesystem.
    pub relieved: AtomicU64,
}

impl LogStats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// How soon after an unknown log file shows up the runtime is listed again (coalesces a burst).
const RELIST_DELAY: Duration = Duration::from_millis(50);
/// The least time between two event-driven listings of the runtime.
const RELIST_MIN_GAP: Duration = Duration::from_millis(500);
/// The least time between two disk-space checks driven by rotations.
const RELIEF_MIN_GAP: Duration = Duration::from_secs(1);

/// Handle to the container log manager. Cheap to clone.
#[derive(Clone)]
pub struct ContainerLogManager {
    runtime: Arc<dyn LogRuntime>,
    config: LogManagerConfig,
    clock: Clock,
    pod_logs_dir: Option<PathBuf>,
    use_inotify: bool,
    available: AvailableFn,
    stats: Arc<LogStats>,
}

impl std::fmt::Debug for ContainerLogManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerLogManager")
            .field("config", &self.config)
            .field("pod_logs_dir", &self.pod_logs_dir)
            .finish_non_exhaustive()
    }
}

fn statvfs_available(path: &Path) -> std::io::Result<u64> {
    crate::hostfs::statvfs(path).map(|u| u.available_bytes)
}

impl ContainerLogManager {
    pub fn new(runtime: Arc<dyn RuntimeService>, config: LogManagerConfig) -> Self {
        Self::with_log_runtime(Arc::new(CriLogRuntime(runtime)), config)
    }

    /// A manager over any [`LogRuntime`] (tests).
    pub fn with_log_runtime(runtime: Arc<dyn LogRuntime>, config: LogManagerConfig) -> Self {
        Self {
            runtime,
            config,
            clock: Clock::new(),
            pod_logs_dir: None,
            use_inotify: true,
            available: Arc::new(statvfs_available),
            stats: Arc::new(LogStats::default()),
        }
    }

    /// Uses `clock` for rotated file names (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Watches `podLogsDir` (and its pod and container directories) so that a new container's
    /// log is noticed when it is created, not only at the next monitor interval.
    pub fn with_pod_logs_dir(mut self, dir: PathBuf) -> Self {
        self.pod_logs_dir = Some(dir);
        self
    }

    /// Turns the inotify trigger off: the monitor interval alone (upstream's behaviour).
    pub fn with_inotify(mut self, enabled: bool) -> Self {
        self.use_inotify = enabled;
        self
    }

    /// Uses `available` for the free bytes of the log filesystem (tests).
    pub fn with_available(mut self, available: AvailableFn) -> Self {
        self.available = available;
        self
    }

    pub fn stats(&self) -> Arc<LogStats> {
        self.stats.clone()
    }

    /// Runs until cancelled: lists the running containers every monitor interval (and when an
    /// unknown log file appears), keeps one worker per container, dispatches inotify events to
    /// them, and frees a full filesystem. Every task it starts is awaited before it returns.
    pub async fn run(self, cancel: CancellationToken) {
        info!(
            workers = self.config.max_workers,
            monitor_period = ?self.config.monitor_interval,
            inotify = self.use_inotify,
            "initializing container log rotate workers"
        );
        let (reports_tx, reports) = mpsc::channel(64);
        let shared = Arc::new(worker::Shared {
            runtime: self.runtime.clone(),
            policy: self.config.policy,
            clock: self.clock,
            compress_slots: Arc::new(tokio::sync::Semaphore::new(self.config.max_workers.max(1))),
            reports: reports_tx,
            stats: self.stats.clone(),
            retry_max: self.config.monitor_interval,
        });
        let mut state = Loop {
            manager: &self,
            shared,
            workers: HashMap::new(),
            by_path: HashMap::new(),
            tasks: JoinSet::new(),
            watcher: None,
            watch_error: None,
            relist: None,
            relist_periodic: false,
            relist_due: None,
            last_relist: None,
            relief: None,
            last_relief: None,
            cancel: cancel.child_token(),
        };
        state.start_watch();
        state.run(&cancel, reports).await;
        state.shutdown().await;
    }
}

type RelistResult = Result<(HashSet<String>, Vec<(String, PathBuf)>), LogError>;
type ReliefResult = Vec<(String, Vec<PathBuf>)>;

/// The manager's control loop state (one task; everything slow runs in spawned tasks).
struct Loop<'a> {
    manager: &'a ContainerLogManager,
    shared: Arc<worker::Shared>,
    workers: HashMap<String, worker::WorkerHandle>,
    /// Live log path → container ID.
    by_path: HashMap<PathBuf, String>,
    tasks: JoinSet<()>,
    watcher: Option<watch::DirWatcher>,
    watch_error: Option<String>,
    relist: Option<tokio::task::JoinHandle<RelistResult>>,
    relist_periodic: bool,
    relist_due: Option<Instant>,
    last_relist: Option<Instant>,
    relief: Option<tokio::task::JoinHandle<ReliefResult>>,
    last_relief: Option<Instant>,
    cancel: CancellationToken,
}

async fn join_opt<T>(h: &mut Option<tokio::task::JoinHandle<T>>) -> Result<T, String> {
    match h {
        Some(h) => h.await.map_err(|e| e.to_string()),
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl Loop<'_> {
    async fn run(
        &mut self,
        cancel: &CancellationToken,
        mut reports: mpsc::Receiver<worker::Report>,
    ) {
        let period = self
            .manager
            .config
            .monitor_interval
            .max(Duration::from_millis(1));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {
                    if self.watcher.is_none() {
                        self.start_watch();
                    }
                    self.start_relist(true);
                    self.start_relief();
                }
                ev = watch::next_opt(&mut self.watcher) => self.on_events(ev),
                _ = sleep_until_opt(self.relist_due) => {
                    self.relist_due = None;
                    self.start_relist(false);
                }
                r = join_opt(&mut self.relist) => {
                    self.relist = None;
                    match r {
                        Ok(Ok((running, new))) => self.apply_relist(&running, new),
                        Ok(Err(e)) => warn!(error = %e, "failed to rotate container logs"),
                        Err(e) => warn!(error = %e, "listing containers for log rotation failed"),
                    }
                }
                r = join_opt(&mut self.relief) => {
                    self.relief = None;
                    match r {
                        Ok(plan) => self.apply_relief(plan),
                        Err(e) => warn!(error = %e, "planning disk relief failed"),
                    }
                }
                Some(report) = reports.recv() => match report {
                    worker::Report::NoSpace => self.start_relief(),
                    worker::Report::Rotated => {
                        if self.last_relief.is_none_or(|t| t.elapsed() >= RELIEF_MIN_GAP) {
                            self.start_relief();
                        }
                    }
                },
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Err(e) = done {
                        warn!(error = %e, "container log worker failed");
                    }
                }
            }
        }
    }

    fn start_watch(&mut self) {
        if !self.manager.use_inotify {
            return;
        }
        match watch::DirWatcher::new(self.manager.pod_logs_dir.as_deref()) {
            Ok(mut w) => {
                self.watch_error = None;
                let dirs: HashSet<PathBuf> = self
                    .by_path
                    .keys()
                    .filter_map(|p| p.parent().map(Path::to_owned))
                    .collect();
                for d in dirs {
                    w.add_dir(&d);
                }
                self.watcher = Some(w);
            }
            Err(e) => {
                let msg = e.to_string();
                if self.watch_error.as_deref() != Some(msg.as_str()) {
                    warn!(error = %msg, "cannot watch container log directories with inotify; rotating every monitor interval only");
                }
                self.watch_error = Some(msg);
            }
        }
    }

    fn on_events(&mut self, events: watch::Batch) {
        match events {
            watch::Batch::Lost => self.watcher = None,
            watch::Batch::Overflow => {
                for w in self.workers.values() {
                    w.wake();
                }
            }
            watch::Batch::Files(files) => {
                for f in files {
                    match self.by_path.get(&f).and_then(|id| self.workers.get(id)) {
                        Some(w) => w.wake(),
                        None if f.extension().is_some_and(|e| e == "log") => {
                            // A log file no worker owns yet: a container started since the
                            // last listing.
                            let earliest = self
                                .last_relist
                                .map_or_else(Instant::now, |t| t + RELIST_MIN_GAP)
                                .max(Instant::now() + RELIST_DELAY);
                            self.relist_due.get_or_insert(earliest);
                        }
                        None => {}
                    }
                }
            }
        }
    }

    fn start_relist(&mut self, periodic: bool) {
        self.relist_periodic |= periodic;
        if self.relist.is_some() {
            return;
        }
        self.last_relist = Some(Instant::now());
        let runtime = self.manager.runtime.clone();
        let known: HashSet<String> = self.workers.keys().cloned().collect();
        self.relist = Some(tokio::spawn(async move {
            let running: HashSet<String> =
                runtime.running_containers().await?.into_iter().collect();
            let mut new = Vec::new();
            for id in running.iter().filter(|id| !known.contains(*id)) {
                match runtime.log_path(id).await {
                    Ok(Some(path)) => new.push((id.clone(), path)),
                    Ok(None) => {}
                    Err(e) => {
                        warn!(container_id = %id, error = %e, "failed to rotate log for container")
                    }
                }
            }
            Ok((running, new))
        }));
    }

    fn apply_relist(&mut self, running: &HashSet<String>, new: Vec<(String, PathBuf)>) {
        let gone: Vec<String> = self
            .workers
            .keys()
            .filter(|id| !running.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(w) = self.workers.remove(&id) {
                debug!(container_id = %id, "container no longer running; stopping its log worker");
                self.by_path.remove(&w.log);
                w.stop();
            }
        }
        for (id, log) in new {
            if let Some(w) = &mut self.watcher
                && let Some(dir) = log.parent()
            {
                w.add_dir(dir);
            }
            let handle = worker::spawn(
                &mut self.tasks,
                self.shared.clone(),
                id.clone(),
                log.clone(),
                &self.cancel,
            );
            self.by_path.insert(log, id.clone());
            self.workers.insert(id, handle);
        }
        let periodic = std::mem::take(&mut self.relist_periodic);
        for w in self.workers.values() {
            if periodic {
                w.wake_periodic();
            } else {
                w.wake();
            }
        }
    }

    /// Plans, off the loop, which rotated files to remove when a log filesystem is full.
    fn start_relief(&mut self) {
        if self.relief.is_some() || self.workers.is_empty() {
            return;
        }
        self.last_relief = Some(Instant::now());
        let logs: Vec<(String, PathBuf)> = self
            .workers
            .iter()
            .map(|(id, w)| (id.clone(), w.log.clone()))
            .collect();
        let want = self.manager.config.policy.max_size;
        let available = self.manager.available.clone();
        self.relief = Some(tokio::task::spawn_blocking(move || {
            plan_relief_on_disk(&logs, want, &available)
        }));
    }

    fn apply_relief(&mut self, plan: ReliefResult) {
        for (id, files) in plan {
            if let Some(w) = self.workers.get(&id) {
                warn!(container_id = %id, files = ?files, "log filesystem full; removing the oldest rotated logs");
                w.relieve(files);
            }
        }
    }

    async fn shutdown(&mut self) {
        self.cancel.cancel();
        for h in [self.relist.take()].into_iter().flatten() {
            h.abort();
            let _ = h.await;
        }
        if let Some(h) = self.relief.take() {
            let _ = h.await;
        }
        while self.tasks.join_next().await.is_some() {}
    }
}

/// For each filesystem holding container logs that has fewer than `want` bytes available,
/// the rotated files to remove (oldest first across its containers), by container.
fn plan_relief_on_disk(
    logs: &[(String, PathBuf)],
    want: u64,
    available: &AvailableFn,
) -> ReliefResult {
    use std::os::unix::fs::MetadataExt;
    let mut by_dev: HashMap<u64, Vec<(&String, &PathBuf)>> = HashMap::new();
    for (id, log) in logs {
        let Some(dir) = log.parent() else { continue };
        if let Ok(m) = std::fs::metadata(dir) {
            by_dev.entry(m.dev()).or_default().push((id, log));
        }
    }
    let mut out: HashMap<String, Vec<PathBuf>> = HashMap::new();
    for group in by_dev.values() {
        let Some(dir) = group.first().and_then(|(_, l)| l.parent()) else {
            continue;
        };
        let avail = match available(dir) {
            Ok(a) => a,
            Err(e) => {
                debug!(dir = %dir.display(), error = %e, "cannot read free space of log filesystem");
                continue;
            }
        };
        if avail >= want {
            continue;
        }
        let mut owner: HashMap<PathBuf, &String> = HashMap::new();
        let mut files = Vec::new();
        for (id, log) in group {
            let Ok(rotated) = rotate::rotated_files(log) else {
                continue;
            };
            for f in rotated {
                let size = std::fs::metadata(&f).map_or(0, |m| m.len());
                owner.insert(f.clone(), id);
                files.push((f, size));
            }
        }
        for f in rotate::plan_disk_relief(&files, avail, want) {
            if let Some(id) = owner.get(&f) {
                out.entry((*id).clone()).or_default().push(f);
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
