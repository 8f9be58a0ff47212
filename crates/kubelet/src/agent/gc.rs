//! Wiring of the garbage collectors and the container log manager into the agent: owns the
//! `GcSettings` (which of the tasks run, with what policy); receives the runtime/image services,
//! the pod workers (for each pod's GC state) and whether all sources are ready; spawns the
//! tasks on the agent's supervisor and returns the handles the eviction manager calls.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{AgentConfig, AgentDeps, AgentError};
use crate::events::EventRecorder;
use crate::eviction::NodeReclaimer;
use crate::images::gc::{IMAGE_GC_PERIOD, ImageGc, ImageGcConfig, statvfs_usage};
use crate::kuberuntime::gc::{
    CONTAINER_GC_PERIOD, ContainerGc, ContainerGcConfig, ContainerGcPolicy, PodGcState, PodStateFn,
    SourcesReadyFn,
};
use crate::logs::{ContainerLogManager, LogManagerConfig};
use crate::pod_workers::{PodWorkers, WorkerPhase};
use crate::supervisor::Supervisor;

/// Container GC, image GC, pull rate limit and container log rotation settings. The default
/// runs none of the tasks and sets no pull limit.
#[derive(Debug, Clone)]
pub struct GcSettings {
    /// `--minimum-container-ttl-duration` & co; runs every minute.
    pub container_gc: Option<ContainerGcPolicy>,
    /// `imageGC*`; runs every `image_gc_period` (5 min upstream).
    pub image_gc: Option<ImageGcConfig>,
    pub image_gc_period: Duration,
    /// `containerLogMaxSize`/`MaxFiles`/`MaxWorkers`/`MonitorInterval`.
    pub container_logs: Option<LogManagerConfig>,
    /// `registryPullQPS` (0: no limit) and `registryBurst`.
    pub registry_pull_qps: i32,
    pub registry_burst: i32,
}

impl Default for GcSettings {
    fn default() -> Self {
        Self {
            container_gc: None,
            image_gc: None,
            image_gc_period: IMAGE_GC_PERIOD,
            container_logs: None,
            registry_pull_qps: 0,
            registry_burst: 0,
        }
    }
}

/// Starts the container GC, image GC and log rotation tasks that `cfg.gc` enables.
pub(super) fn start(
    cfg: &AgentConfig,
    deps: &AgentDeps,
    events: &Arc<dyn EventRecorder>,
    workers: &PodWorkers,
    sources_ready: SourcesReadyFn,
    sup: &Supervisor,
    cancel: &CancellationToken,
) -> Result<(Option<ImageGc>, Option<ContainerGc>), AgentError> {
    let container_gc = cfg.gc.container_gc.map(|policy| {
        let workers = workers.clone();
        let pod_state: PodStateFn = Arc::new(move |uid: &str| match workers.phase(uid) {
            None => PodGcState::Removed,
            Some(WorkerPhase::Terminated | WorkerPhase::Finished) => PodGcState::Terminated,
            Some(_) => PodGcState::Active,
        });
        let gc = ContainerGc::new(
            deps.runtime.clone(),
            ContainerGcConfig {
                policy,
                pod_logs_dir: cfg.pod_logs_dir.clone(),
                container_log_symlink_dir: cfg.container_log_symlink_dir.clone(),
            },
            pod_state,
            sources_ready,
        );
        sup.spawn_critical(
            "container gc",
            gc.clone()
                .run(CONTAINER_GC_PERIOD, events.clone(), cancel.child_token()),
        );
        gc
    });
    let image_gc = match &cfg.gc.image_gc {
        Some(config) => {
            let gc = ImageGc::new(
                deps.images.clone(),
                deps.runtime.clone(),
                config.clone(),
                Arc::new(statvfs_usage),
                events.clone(),
            )?;
            sup.spawn_critical(
                "image gc",
                gc.clone().run(cfg.gc.image_gc_period, cancel.child_token()),
            );
            Some(gc)
        }
        None => None,
    };
    if let Some(config) = cfg.gc.container_logs {
        let manager = ContainerLogManager::new(deps.runtime.clone(), config)
            .with_pod_logs_dir(cfg.pod_logs_dir.clone());
        sup.spawn_critical("container log manager", manager.run(cancel.child_token()));
    }
    Ok((image_gc, container_gc))
}

/// The garbage collectors as the eviction manager's node-level reclaimer (upstream hands
/// `ContainerGC` and `ImageGC` to the eviction manager). A collector that is off frees nothing.
struct GcReclaimer {
    images: Option<ImageGc>,
    containers: Option<ContainerGc>,
}

#[async_trait::async_trait]
impl NodeReclaimer for GcReclaimer {
    async fn delete_dead_containers(&self) -> Result<u64, String> {
        let Some(gc) = &self.containers else {
            return Ok(0);
        };
        // Container GC does not measure what it frees; the eviction manager re-reads the
        // stats afterwards.
        gc.delete_all_unused_containers()
            .await
            .map(|_| 0)
            .map_err(|e| e.to_string())
    }

    async fn delete_unused_images(&self) -> Result<u64, String> {
        let Some(gc) = &self.images else {
            return Ok(0);
        };
        gc.delete_unused_images().await.map_err(|e| e.to_string())
    }
}

/// The reclaimers for the eviction manager: empty when neither collector runs.
pub(super) fn reclaimers(
    images: Option<&ImageGc>,
    containers: Option<&ContainerGc>,
) -> Vec<Arc<dyn NodeReclaimer>> {
    if images.is_none() && containers.is_none() {
        return Vec::new();
    }
    vec![Arc::new(GcReclaimer {
        images: images.cloned(),
        containers: containers.cloned(),
    })]
}
