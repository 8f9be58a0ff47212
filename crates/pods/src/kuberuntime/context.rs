//! What the kuberuntime side effects act with (upstream's `kubeGenericRuntimeManager` fields):
//! the CRI runtime, the image, status, volume, CPU and cgroup managers, the event recorder,
//! RuntimeClass handlers, in-place resize allocation and the static settings. Owned by the
//! `Syncer`; `start`, `kill` and `resize` borrow it, so they need nothing of the syncer's own
//! per-round state (reason cache, changed pods, probes).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rkubelet_cri::RuntimeService;

use crate::backoff::Backoff;
use crate::clock::Clock;
use crate::cm::ContainerManager;
use crate::cm::cpumanager::CpuManager;
use crate::events::EventRecorder;
use crate::images::ImageManager;
use crate::kuberuntime::container_config::RuntimeOptions;
use crate::kuberuntime::sandbox_config::SandboxContext;
use crate::objects::PodObjects;
use crate::runtimeclass::RuntimeClassManager;
use crate::status::manager::StatusManager;
use crate::volumes::VolumeManager;

/// Static settings of the syncer.
#[derive(Debug, Clone)]
pub struct SyncerConfig {
    /// `<root-dir>` (pod directories live in `<root-dir>/pods/<uid>`).
    pub root_dir: PathBuf,
    /// `podLogsDir` (default `/var/log/pods`).
    pub pod_logs_dir: PathBuf,
    /// Where the legacy `/var/log/containers` symlinks go; `None` disables them.
    pub container_log_symlink_dir: Option<PathBuf>,
    pub node_name: String,
    pub host_ips: Vec<String>,
    /// The runtime's name for container IDs (`containerd://…`).
    pub runtime_name: String,
    /// Node-level knobs of container config generation (CFS quota, memory capacity…).
    pub runtime_options: RuntimeOptions,
    pub sandbox: SandboxContext,
}

/// The managers and settings every runtime side effect uses.
pub struct RuntimeContext {
    pub(crate) runtime: Arc<dyn RuntimeService>,
    pub(crate) images: ImageManager,
    pub(crate) status: StatusManager,
    pub(crate) events: Arc<dyn EventRecorder>,
    pub(crate) config: SyncerConfig,
    pub(crate) clock: Clock,
    pub(crate) crash_backoff: Mutex<Backoff>,
    pub(crate) volumes: VolumeManager,
    /// ConfigMaps, Secrets and service links for container environments (API-server mode).
    pub(crate) objects: Option<Arc<dyn PodObjects>>,
    /// Cpusets for new containers; releases a terminated pod's CPUs.
    pub(crate) cpu_manager: Option<CpuManager>,
    /// Pod cgroups (`cgroupsPerQOS`); `None` leaves the cgroup parent empty.
    pub(crate) cgroups: Option<ContainerManager>,
    /// `runtimeClassName` → CRI runtime handler (standalone by default: named classes fail).
    pub(crate) runtime_classes: RuntimeClassManager,
    /// In-place resize: allocated/actuated resources and resize conditions.
    pub(crate) allocation: Option<crate::allocation::AllocationManager>,
}
