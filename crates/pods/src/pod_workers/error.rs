//! Why a pod's sync failed: the one error type every pod passes through (`PodSyncer` results).
//! Receives the failures of the kuberuntime steps (directories, cgroup, volumes, kill, start,
//! runtime status, resize…) with their source errors; emits them, unchanged in wording, to the
//! pod worker, which logs them and records them as the pod's last error before retrying.

use std::fmt;
use std::path::PathBuf;

use crate::cm::CmError;
use crate::kuberuntime::kill::{KillError, RemoveError};
use crate::kuberuntime::runtime_status::RuntimeStatusError;
use crate::kuberuntime::start::StartError;
use crate::volumes::VolumeError;

/// A failed sync, by the step that failed; the worker logs it and retries after a backoff.
/// The Display text is the message the pod worker records (and tests compare); the source
/// chain keeps the underlying cause (the large ones boxed, to keep `Result`s small).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Making the pod directory or one of its subdirectories.
    #[error("creating pod directory {}: {source}", dir.display())]
    Dirs {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Ensuring the pod cgroup exists and is applied.
    #[error(
        "failed to ensure that the pod: {uid} cgroups exist and are correctly applied: {source}"
    )]
    Cgroup {
        uid: String,
        #[source]
        source: Box<PodCgroupError>,
    },
    /// Attaching or mounting the pod's volumes.
    #[error("Unable to attach or mount volumes for pod {pod}: {source}")]
    Mount {
        /// The pod's full name.
        pod: String,
        #[source]
        source: Box<VolumeError>,
    },
    /// Unmounting the pod's volumes.
    #[error("{0}")]
    Unmount(#[source] Box<VolumeError>),
    /// Stopping containers or sandboxes.
    #[error("{0}")]
    Kill(#[from] Failures<KillError>),
    /// Containers still ran after they were stopped.
    #[error("containers still running after kill: {}", .0.join(", "))]
    StillRunning(Vec<String>),
    /// Removing the containers and sandboxes of a pod that is gone.
    #[error("{0}")]
    Remove(#[from] Failures<RemoveError>),
    /// Re-fetching the pod's runtime status.
    #[error("{0}")]
    Status(#[from] RuntimeStatusError),
    /// The sync was cancelled because the pod is terminating.
    #[error("sync cancelled: pod is terminating")]
    Cancelled,
    /// Actuating an in-place resize.
    #[error("{0}")]
    Resize(String),
    /// The pod has resource claims no DRA driver can prepare.
    #[error("failed to prepare dynamic resources: {0}")]
    DynamicResources(String),
    /// Creating the pod sandbox, or regenerating the config of the running one.
    #[error("{0}")]
    Sandbox(#[source] StartError),
    /// Starting containers (each failure is recorded as the container's waiting reason).
    #[error("{0}")]
    Start(#[from] Failures<StartError>),
    /// A failure known only by its message (fakes and decorators of `PodSyncer`).
    #[error("{0}")]
    Other(String),
}

/// Why a pod's cgroup could not be ensured.
#[derive(Debug, thiserror::Error)]
pub enum PodCgroupError {
    #[error("{0}")]
    Manager(#[source] CmError),
    #[error("pod cgroup task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// Several independent failures of one step (each container or sandbox that failed), shown
/// joined by "; "; the first one is the source.
#[derive(Debug)]
pub struct Failures<E>(pub Vec<E>);

impl<E> Failures<E> {
    /// `None` when nothing failed.
    pub fn from_vec(errors: Vec<E>) -> Option<Self> {
        (!errors.is_empty()).then_some(Self(errors))
    }
}

impl<E: fmt::Display> fmt::Display for Failures<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Failures<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .first()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
