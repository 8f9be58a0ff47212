//! One container's log worker (upstream `processContainer` + `rotateLog`, one task per running
//! container instead of a shared queue). Owns that container's rotation, compression and
//! removals, so nothing else touches its files concurrently. Receives wake-ups (coalesced: any
//! number of wake-ups while it works make one more size check), the periodic flag (run
//! housekeeping too), and files to remove when the disk is full. Emits reports (rotated, disk
//! full) to the manager, and files.
//!
//! A rotation: stop an ongoing compression (it is restarted afterwards), remove leftovers and
//! the excess, rename the live file, ask the runtime to reopen it (renamed back when that
//! fails, as upstream), then compress the older rotated files in the background, at most
//! `containerLogMaxWorkers` at a time across containers. Errors back off (from 100 ms up to the
//! monitor interval) so a failing runtime is not hammered by every write.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{LogError, LogRotatePolicy, LogRuntime, LogStats, rotate};
use crate::clock::Clock;

/// What a worker tells the manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Report {
    Rotated,
    NoSpace,
}

/// What the workers share.
pub(super) struct Shared {
    pub runtime: Arc<dyn LogRuntime>,
    pub policy: LogRotatePolicy,
    pub clock: Clock,
    /// Bounds the compressions running at once (`containerLogMaxWorkers`).
    pub compress_slots: Arc<Semaphore>,
    pub reports: mpsc::Sender<Report>,
    pub stats: Arc<LogStats>,
    /// The longest back-off after a failure.
    pub retry_max: Duration,
}

/// The first back-off after a failed rotation.
const RETRY_MIN: Duration = Duration::from_millis(100);

/// How old the log directory's modification time must be before an unchanged time is taken to
/// mean an unchanged directory: a change made within the same timestamp tick as the look
/// before a housekeeping pass would leave the time as it was.
const DIR_TIME_SETTLED: Duration = Duration::from_secs(2);

/// The manager's handle on one worker.
pub(super) struct WorkerHandle {
    pub log: PathBuf,
    inbox: Arc<Inbox>,
    cancel: CancellationToken,
}

#[derive(Default)]
struct Inbox {
    wake: Notify,
    periodic: AtomicBool,
    /// Rotated files to remove (disk full). Never held across an await.
    relieve: Mutex<Vec<PathBuf>>,
}

impl WorkerHandle {
    /// Asks for a size check (coalesced with any pending one).
    pub fn wake(&self) {
        self.inbox.wake.notify_one();
    }

    /// Asks for a size check plus housekeeping (leftovers, excess, compression retries).
    pub fn wake_periodic(&self) {
        self.inbox.periodic.store(true, Ordering::Relaxed);
        self.inbox.wake.notify_one();
    }

    /// Asks the worker to remove these rotated files (the disk is full).
    pub fn relieve(&self, files: Vec<PathBuf>) {
        if let Ok(mut r) = self.inbox.relieve.lock() {
            r.extend(files);
        }
        self.inbox.wake.notify_one();
    }

    /// Stops the worker (its task ends soon; the manager's join set reaps it).
    pub fn stop(&self) {
        self.cancel.cancel();
    }
}

/// Starts the worker of container `id` whose live file is `log`.
pub(super) fn spawn(
    tasks: &mut JoinSet<()>,
    shared: Arc<Shared>,
    id: String,
    log: PathBuf,
    parent: &CancellationToken,
) -> WorkerHandle {
    let inbox = Arc::new(Inbox::default());
    let cancel = parent.child_token();
    let worker = Worker {
        shared,
        id,
        log: log.clone(),
        inbox: inbox.clone(),
        compression: None,
        backoff: None,
        settled: None,
    };
    tasks.spawn(worker.run(cancel.clone()));
    WorkerHandle { log, inbox, cancel }
}

/// A background compression of some rotated files.
struct Compression {
    abort: CancellationToken,
    task: JoinHandle<Result<(), rotate::RotateError>>,
}

struct Worker {
    shared: Arc<Shared>,
    id: String,
    log: PathBuf,
    inbox: Arc<Inbox>,
    compression: Option<Compression>,
    /// After a failure: no new attempt before the instant; the next back-off.
    backoff: Option<(Instant, Duration)>,
    /// The log directory's modification time before the last housekeeping pass that found
    /// nothing to do. While the directory keeps that time, no file was added, removed
    /// or renamed in it, so a pass would find nothing either and is skipped: 110 containers
    /// cost 110 directory listings on the blocking pool every monitor interval otherwise.
    settled: Option<SystemTime>,
}

async fn join_compression(c: &mut Option<Compression>) -> Result<(), String> {
    match c {
        Some(c) => match (&mut c.task).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        },
        None => std::future::pending().await,
    }
}

impl Worker {
    async fn run(mut self, cancel: CancellationToken) {
        // Woken while backing off: check once the back-off ends.
        let mut deferred = false;
        loop {
            let retry_at = self.backoff.filter(|_| deferred).map(|(t, _)| t);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                r = join_compression(&mut self.compression) => {
                    self.compression = None;
                    if let Err(e) = r {
                        // The file stays uncompressed; the next housekeeping or rotation
                        // compresses it again.
                        warn!(container_id = %self.id, error = %e, "failed to compress rotated container log; will retry");
                    }
                    continue;
                }
                _ = self.inbox.wake.notified() => {}
                _ = super::sleep_until_opt(retry_at) => {}
            }
            self.relieve().await;
            if let Some((until, _)) = self.backoff
                && Instant::now() < until
            {
                deferred = true;
                continue;
            }
            deferred = false;
            let periodic = self.inbox.periodic.swap(false, Ordering::Relaxed);
            match self.check(periodic).await {
                Ok(()) => self.backoff = None,
                Err(e) => {
                    let next = self.backoff.map_or(RETRY_MIN, |(_, d)| {
                        (d * 2).min(self.shared.retry_max.max(RETRY_MIN))
                    });
                    self.backoff = Some((Instant::now() + next, next));
                    deferred = true;
                    warn!(container_id = %self.id, path = %self.log.display(), error = %e, retry_in = ?next, "failed to rotate log for container");
                    if e.is_no_space() {
                        let _ = self.shared.reports.try_send(super::worker::Report::NoSpace);
                    }
                }
            }
        }
        self.stop_compression().await;
    }

    /// Removes the files the manager asked for (disk full), first stopping a compression that
    /// may be reading or writing them.
    async fn relieve(&mut self) {
        let files = match self.inbox.relieve.lock() {
            Ok(mut r) => std::mem::take(&mut *r),
            Err(_) => return,
        };
        if files.is_empty() {
            return;
        }
        self.stop_compression().await;
        let n = files.len() as u64;
        let removed = blocking(move || {
            for f in &files {
                rotate::remove_rotated(f)?;
            }
            Ok(())
        })
        .await;
        match removed {
            Ok(()) => {
                self.shared.stats.relieved.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                warn!(container_id = %self.id, error = %e, "failed to remove rotated logs on a full disk")
            }
        }
    }

    /// One size check: rotate when the live file reached the maximum; otherwise, when
    /// `periodic`, housekeeping.
    async fn check(&mut self, periodic: bool) -> Result<(), LogError> {
        self.shared.stats.checks.fetch_add(1, Ordering::Relaxed);
        // A plain stat of a local file, done in place: a trip through the blocking pool would
        // add two thread wake-ups to every check, and the check is what bounds the overshoot.
        let size = match std::fs::metadata(&self.log) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A rotation whose reopen did not land (e.g. the kubelet died in between): ask
                // again, as upstream.
                self.shared
                    .runtime
                    .reopen_log(&self.id)
                    .await
                    .map_err(LogError::ReopenMissing)?;
                tokio::fs::metadata(&self.log)
                    .await
                    .map_err(|source| LogError::Stat {
                        path: self.log.clone(),
                        source,
                    })?
                    .len()
            }
            Err(source) => {
                return Err(LogError::Stat {
                    path: self.log.clone(),
                    source,
                });
            }
        };
        if size >= self.shared.policy.max_size {
            self.stop_compression().await;
            let pending = self.rotate(size).await?;
            self.start_compression(pending);
        } else if periodic && self.compression.is_none() {
            let dir_time = self
                .log
                .parent()
                .and_then(|d| std::fs::metadata(d).ok())
                .and_then(|m| m.modified().ok());
            if dir_time.is_some() && dir_time == self.settled {
                return Ok(());
            }
            self.shared
                .stats
                .housekeepings
                .fetch_add(1, Ordering::Relaxed);
            let (log, max) = (self.log.clone(), self.shared.policy.max_files);
            let (pending, idle) = blocking(move || rotate::housekeeping(&log, max)).await?;
            let settled = |t: &SystemTime| {
                SystemTime::now()
                    .duration_since(*t)
                    .is_ok_and(|age| age >= DIR_TIME_SETTLED)
            };
            self.settled = dir_time.filter(|t| idle && settled(t));
            self.start_compression(pending);
        }
        Ok(())
    }

    /// Upstream `rotateLog` with compression moved after the rotation: returns the rotated
    /// files to compress.
    async fn rotate(&mut self, size: u64) -> Result<Vec<PathBuf>, LogError> {
        let started = Instant::now();
        let (log, max) = (self.log.clone(), self.shared.policy.max_files);
        let pending = blocking(move || rotate::clean_before_rotation(&log, max)).await?;
        let now = self.shared.clock.now().with_timezone(&chrono::Local);
        let rotated = rotate::rotated_name(&self.log, &now);
        let (log, to) = (self.log.clone(), rotated.clone());
        blocking(move || rotate::rename_live(&log, &to)).await?;
        if let Err(source) = self.shared.runtime.reopen_log(&self.id).await {
            // Put the file back so the next attempt can rotate it again.
            let (log, from) = (self.log.clone(), rotated.clone());
            let back = tokio::task::spawn_blocking(move || std::fs::rename(&from, &log)).await;
            if !matches!(back, Ok(Ok(()))) {
                warn!(rotated = %rotated.display(), log = %self.log.display(), container_id = %self.id, "failed to rename rotated log back");
            }
            return Err(LogError::Reopen {
                id: self.id.clone(),
                source,
            });
        }
        self.shared.stats.rotations.fetch_add(1, Ordering::Relaxed);
        let _ = self.shared.reports.try_send(Report::Rotated);
        debug!(container_id = %self.id, rotated = %rotated.display(), size,
            took_us = started.elapsed().as_micros() as u64, "rotated container log");
        Ok(pending)
    }

    fn start_compression(&mut self, files: Vec<PathBuf>) {
        if files.is_empty() || self.compression.is_some() {
            return;
        }
        let abort = CancellationToken::new();
        let slots = self.shared.compress_slots.clone();
        let a = abort.clone();
        let task = tokio::spawn(async move {
            let permit = tokio::select! {
                _ = a.cancelled() => return Ok(()),
                p = slots.acquire_owned() => p,
            };
            let Ok(_permit) = permit else { return Ok(()) };
            blocking(move || {
                for f in &files {
                    match rotate::compress(f, &|| a.is_cancelled()) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(()),
                        Err(source) => {
                            return Err(rotate::RotateError::Compress {
                                path: f.clone(),
                                source,
                            });
                        }
                    }
                }
                Ok(())
            })
            .await
        });
        self.compression = Some(Compression { abort, task });
    }

    /// Aborts and awaits a running compression (it stops within one chunk and leaves its file
    /// uncompressed, to be compressed again later).
    async fn stop_compression(&mut self) {
        if let Some(c) = self.compression.take() {
            c.abort.cancel();
            match c.task.await {
                Ok(Err(e)) => {
                    warn!(container_id = %self.id, error = %e, "failed to compress rotated container log; will retry");
                    if e.is_no_space() {
                        let _ = self.shared.reports.try_send(Report::NoSpace);
                    }
                }
                Err(e) => warn!(container_id = %self.id, error = %e, "compression task failed"),
                Ok(Ok(())) => {}
            }
        }
    }
}

/// Runs blocking file work on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, rotate::RotateError> + Send + 'static,
) -> Result<T, rotate::RotateError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(rotate::RotateError::List {
            path: Path::new("").to_owned(),
            source: std::io::Error::other(e.to_string()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime whose log never grows past the limit: every check is a plain stat.
    struct Idle;

    #[async_trait::async_trait]
    impl LogRuntime for Idle {
        async fn running_containers(&self) -> Result<Vec<String>, LogError> {
            Ok(vec![])
        }
        async fn log_path(&self, _: &str) -> Result<Option<PathBuf>, LogError> {
            Ok(None)
        }
        async fn reopen_log(&self, _: &str) -> Result<(), rkubelet_cri::CriError> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_wakeups_makes_one_size_check() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        std::fs::write(&log, "small").unwrap();
        let (tx, _rx) = mpsc::channel(4);
        let stats = Arc::new(LogStats::default());
        let shared = Arc::new(Shared {
            runtime: Arc::new(Idle),
            policy: LogRotatePolicy {
                max_size: 1024,
                max_files: 2,
            },
            clock: Clock::new(),
            compress_slots: Arc::new(Semaphore::new(1)),
            reports: tx,
            stats: stats.clone(),
            retry_max: Duration::from_secs(5),
        });
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let h = spawn(&mut tasks, shared, "c".into(), log.clone(), &cancel);
        // 1,000 modify events in a burst, before the worker runs.
        for _ in 0..1000 {
            h.wake();
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while LogStats::get(&stats.checks) < 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(LogStats::get(&stats.checks), 1, "one check for the burst");
        // A later event is a new check.
        h.wake();
        let deadline = Instant::now() + Duration::from_secs(1);
        while LogStats::get(&stats.checks) < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(LogStats::get(&stats.checks), 2);
        cancel.cancel();
        while tasks.join_next().await.is_some() {}
    }
}
