//! Container log manager (upstream `logs/container_log_manager.go`): rotates the logs of running
//! containers. Owns the rotation policy (`containerLogMaxSize`, `containerLogMaxFiles`) and its
//! periodic task. Every `containerLogMonitorInterval` it lists the runtime's running containers
//! and, with up to `containerLogMaxWorkers` at a time, rotates each log that reached the maximum
//! size: leftovers removed, older rotated files gzipped, the oldest beyond the limit removed,
//! the live file renamed and the runtime asked to reopen it (CRI `ReopenContainerLog`; renamed
//! back when that fails). Emits nothing but logs; file naming lives in `rotate`.

pub mod pod_dir;
pub mod rotate;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rkubelet_cri::api::{
    ContainerFilter, ContainerState, ContainerStateValue, ContainerStatusRequest,
    ListContainersRequest, ReopenContainerLogRequest,
};
use rkubelet_cri::{CriError, RuntimeService};
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

/// What happened to one container's log in a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Below the maximum size (or no log path).
    Kept,
    /// Rotated to this file.
    Rotated(PathBuf),
}

/// Handle to the container log manager. Cheap to clone.
#[derive(Clone)]
pub struct ContainerLogManager {
    runtime: Arc<dyn RuntimeService>,
    config: LogManagerConfig,
    clock: Clock,
}

impl std::fmt::Debug for ContainerLogManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerLogManager")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ContainerLogManager {
    pub fn new(runtime: Arc<dyn RuntimeService>, config: LogManagerConfig) -> Self {
        Self {
            runtime,
            config,
            clock: Clock::new(),
        }
    }

    /// Uses `clock` for rotated file names (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Rotates logs every monitor interval until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        info!(
            workers = self.config.max_workers,
            monitor_period = ?self.config.monitor_interval,
            "initializing container log rotate workers"
        );
        let mut tick =
            tokio::time::interval(self.config.monitor_interval.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                r = self.rotate_logs() => if let Err(e) = r {
                    warn!(error = %e, "failed to rotate container logs");
                },
            }
        }
    }

    /// One pass over the running containers (upstream `rotateLogs` + the workers); returns
    /// each container's outcome (failures are logged and left out).
    pub async fn rotate_logs(&self) -> Result<Vec<(String, Outcome)>, LogError> {
        let running = self
            .runtime
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
        let ids: Vec<String> = running
            .into_iter()
            .filter(|c| c.state == ContainerState::ContainerRunning as i32)
            .map(|c| c.id)
            .collect();
        let results: Vec<(String, Outcome)> = futures::stream::iter(ids)
            .map(|id| async move {
                match self.process_container(&id).await {
                    Ok(outcome) => Some((id, outcome)),
                    Err(e) => {
                        warn!(container_id = %id, error = %e, "failed to rotate log for container");
                        None
                    }
                }
            })
            .buffer_unordered(self.config.max_workers.max(1))
            .filter_map(|r| async move { r })
            .collect()
            .await;
        Ok(results)
    }

    /// Rotates one container's log when it reached the maximum size (upstream
    /// `processContainer`).
    pub async fn process_container(&self, id: &str) -> Result<Outcome, LogError> {
        let status = self
            .runtime
            .container_status(ContainerStatusRequest {
                container_id: id.to_owned(),
                verbose: false,
            })
            .await
            .map_err(|source| LogError::Status {
                id: id.to_owned(),
                source,
            })?;
        let Some(path) = status
            .status
            .map(|s| s.log_path)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
        else {
            return Ok(Outcome::Kept);
        };
        let size = match tokio::fs::metadata(&path).await {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A rotation whose reopen did not land: ask again.
                self.reopen(id).await.map_err(LogError::ReopenMissing)?;
                tokio::fs::metadata(&path)
                    .await
                    .map_err(|source| LogError::Stat {
                        path: path.clone(),
                        source,
                    })?
                    .len()
            }
            Err(source) => return Err(LogError::Stat { path, source }),
        };
        if size < self.config.policy.max_size {
            return Ok(Outcome::Kept);
        }
        self.rotate_log(id, &path).await.map(Outcome::Rotated)
    }

    async fn reopen(&self, id: &str) -> Result<(), CriError> {
        self.runtime
            .reopen_container_log(ReopenContainerLogRequest {
                container_id: id.to_owned(),
            })
            .await
            .map(|_| ())
    }

    /// Upstream `rotateLog`: clean up, compress, then rename the live file and reopen.
    async fn rotate_log(&self, id: &str, log: &Path) -> Result<PathBuf, LogError> {
        let max_files = self.config.policy.max_files;
        let owned = log.to_owned();
        tokio::task::spawn_blocking(move || rotate::prepare_rotation(&owned, max_files))
            .await
            .map_err(|e| LogError::Join(e.to_string()))??;
        let now = self.clock.now().with_timezone(&chrono::Local);
        let rotated = rotate::rotated_name(log, &now);
        tokio::fs::rename(log, &rotated)
            .await
            .map_err(|source| rotate::RotateError::Rename {
                from: log.to_owned(),
                to: rotated.clone(),
                source,
            })?;
        if let Err(source) = self.reopen(id).await {
            // Put the file back so the next pass can try again.
            if let Err(e) = tokio::fs::rename(&rotated, log).await {
                warn!(rotated = %rotated.display(), log = %log.display(), container_id = id, error = %e, "failed to rename rotated log back");
            }
            return Err(LogError::Reopen {
                id: id.to_owned(),
                source,
            });
        }
        debug!(container_id = id, rotated = %rotated.display(), "rotated container log");
        Ok(rotated)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
