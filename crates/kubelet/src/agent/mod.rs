//! Assembly of a running kubelet (upstream `NewMainKubelet` + `Run`, without the god-struct):
//! builds each manager, wires their channels, and runs every task under one cancellation tree.
//! Receives the resolved settings, the runtime/image services and, in API-server mode, the
//! API client (the API-only tasks are wired in `api`, each layer's assembly in `assemble`);
//! returns a handle whose `shutdown` waits for every task. Shutting down never stops pods: a
//! restarted kubelet adopts them.

pub mod api;
mod assemble;
pub mod cgroup_driver;
use crate::data_dirs;
pub mod gc;

pub use crate::cm::CmConfig;
pub use api::ApiModeConfig;
pub use gc::GcSettings;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::{ImageService, RuntimeService};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

use crate::cm::cpumanager::{CpuManagerConfig, CpuManagerError};
use crate::events::EventRecorder;
use crate::eviction::{EvictionManager, EvictionWiring, NodeReclaimer, StatsSource, WorkerEvictor};
use crate::health::HealthCheck;
use crate::images::gc::ImageGc;
use crate::kuberuntime::gc::ContainerGc;
use crate::metrics::KubeletMetrics;
use crate::nodestatus::NodeStatusSettings;
use crate::nodestatus::setters::NodePressure;
use crate::pod_workers::PodWorkers;
use crate::prober::ProbeManager;
use crate::server;
use crate::status::manager::StatusManager;
use crate::supervisor::Supervisor;
use crate::sync_loop::LoopTimings;

/// Everything the agent needs, already resolved from config file and flags.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node_name: String,
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    pub container_log_symlink_dir: Option<PathBuf>,
    pub static_pod_path: Option<PathBuf>,
    pub file_check_frequency: Duration,
    pub static_pod_url: Option<String>,
    pub static_pod_url_header: BTreeMap<String, Vec<String>>,
    pub http_check_frequency: Duration,
    pub sync_frequency: Duration,
    /// The CrashLoopBackOff cap (`crashLoopBackOff.maxContainerRestartPeriod`, honoured with
    /// the `KubeletCrashLoopBackOffMax` gate); `None` keeps upstream's 300s.
    pub crash_loop_max: Option<Duration>,
    pub read_only_addr: Option<SocketAddr>,
    pub healthz_addr: Option<SocketAddr>,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// Contents of the host's resolv.conf (`resolvConf`), if any.
    pub host_resolv_conf: Option<String>,
    pub host_ips: Vec<String>,
    pub serialize_image_pulls: bool,
    pub max_parallel_image_pulls: Option<u32>,
    pub relist_period: Duration,
    /// Gate `EventedPLEG`: consume the runtime's container events (`pleg::evented`), relisting
    /// only as the fallback (at once and for good when the runtime has no event stream).
    pub evented_pleg: bool,
    /// How long without a successful relist before the PLEG is unhealthy (upstream's 3 min;
    /// only the fault tests shorten it, through `RKUBELET_TEST_PLEG_RELIST_THRESHOLD`).
    pub relist_threshold: Duration,
    pub loop_timings: LoopTimings,
    pub runtime_name: String,
    /// `allowedUnsafeSysctls` (may contain `*` wildcards).
    pub allowed_unsafe_sysctls: Vec<String>,
    /// `seccompDefault`: containers without a seccomp profile get RuntimeDefault.
    pub seccomp_default: bool,
    /// The Node as this kubelet describes it: registered in API-server mode, and in both modes
    /// what admission checks pods against (capacity, allocatable, labels, taints).
    pub node_status: NodeStatusSettings,
    /// Settings of the API-server mode tasks (used when `AgentDeps::api` is set).
    pub api: ApiModeConfig,
    /// `cpuManagerPolicy` and friends (the checkpoint goes to `root_dir`).
    pub cpu_manager: CpuManagerConfig,
    /// Garbage collection and log rotation (`None`: that task does not run).
    pub gc: GcSettings,
    /// Stats provider and eviction manager (disabled in `for_tests`).
    pub eviction: crate::eviction::EvictionWiring,
    /// The container manager (cgroups, QoS, node allocatable).
    pub cgroups: CgroupSettings,
    /// The authenticated HTTPS port (`enableServer`); `None` serves none.
    pub server: Option<server::setup::SecureConfig>,
    /// Credential provider plugins (`--image-credential-provider-config`); `None`: none.
    pub credential_providers: Option<Arc<crate::credentialprovider::plugin::CredentialProviders>>,
    /// The client certificate manager behind `AgentDeps::api` (`rotateCertificates`, from
    /// `certificate::bootstrap::api_client`); the agent runs it and exports its metrics.
    pub client_certificates: Option<Arc<crate::certificate::manager::CertificateManager>>,
    /// Graceful node shutdown (`shutdownGracePeriod*`); `None`: shutdowns are immediate.
    pub node_shutdown: Option<crate::nodeshutdown::NodeShutdownSettings>,
    /// The operator's local socket (`server::local::socket_path`); `None`: not served.
    pub local_socket: Option<PathBuf>,
}

/// Container manager settings (`cgroupsPerQOS`, `cgroupRoot`, node allocatable, CFS quota…).
#[derive(Debug, Clone)]
pub struct CgroupSettings {
    /// `cgroupsPerQOS`: create QoS and pod cgroups. Off: no cgroups, empty cgroup parent.
    pub per_qos: bool,
    /// Where the cgroup hierarchies are mounted (default `/sys/fs/cgroup`).
    pub mount_root: PathBuf,
    /// A cgroup filesystem to use instead of the real one (tests).
    pub fs: Option<Arc<dyn crate::cm::cgroups::CgroupFs>>,
    /// Everything but the capacity, which the agent reads from the host.
    pub cm: crate::cm::CmConfig,
    /// `singleProcessOOMKill` (unset: false on cgroup v2, as upstream).
    pub single_process_oom_kill: Option<bool>,
    /// `memorySwap.swapBehavior`.
    pub swap_behavior: String,
    /// `cgroupDriver`.
    pub driver: crate::cm::cgroups::CgroupDriver,
    /// The D-Bus address systemd is reached at with the systemd driver (`None`: the system
    /// bus, `DBUS_SYSTEM_BUS_ADDRESS` or its default socket).
    pub systemd_bus_address: Option<String>,
}

impl Default for CgroupSettings {
    /// Cgroups off: fake-runtime tests must never touch the host's cgroups.
    fn default() -> Self {
        Self {
            per_qos: false,
            mount_root: PathBuf::from("/sys/fs/cgroup"),
            fs: None,
            cm: crate::cm::CmConfig::default(),
            single_process_oom_kill: None,
            swap_behavior: String::new(),
            driver: crate::cm::cgroups::CgroupDriver::Cgroupfs,
            systemd_bus_address: None,
        }
    }
}

impl AgentConfig {
    /// Defaults for tests: everything under `root`, no ports.
    pub fn for_tests(root: &std::path::Path, node_name: &str) -> Self {
        Self {
            node_name: node_name.to_owned(),
            root_dir: root.join("kubelet"),
            pod_logs_dir: root.join("pods-logs"),
            container_log_symlink_dir: None,
            static_pod_path: None,
            file_check_frequency: Duration::from_secs(20),
            static_pod_url: None,
            static_pod_url_header: BTreeMap::new(),
            http_check_frequency: Duration::from_secs(20),
            sync_frequency: Duration::from_secs(60),
            crash_loop_max: None,
            read_only_addr: None,
            healthz_addr: None,
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            host_resolv_conf: Some("nameserver 127.0.0.53\n".to_owned()),
            host_ips: vec!["127.0.0.1".to_owned()],
            serialize_image_pulls: true,
            max_parallel_image_pulls: None,
            relist_period: Duration::from_secs(1),
            evented_pleg: false,
            relist_threshold: crate::pleg::RELIST_THRESHOLD,
            loop_timings: LoopTimings::default(),
            runtime_name: "containerd".to_owned(),
            allowed_unsafe_sysctls: Vec::new(),
            seccomp_default: false,
            node_status: NodeStatusSettings {
                node_ips: vec![std::net::IpAddr::from([127, 0, 0, 1])],
                ..NodeStatusSettings::new(node_name)
            },
            api: ApiModeConfig::default(),
            cpu_manager: CpuManagerConfig::none(root.join("kubelet")),
            // No GC or rotation in tests unless a test asks for it.
            gc: GcSettings::default(),
            eviction: crate::eviction::EvictionWiring::default(),
            cgroups: CgroupSettings::default(),
            server: None,
            credential_providers: None,
            client_certificates: None,
            node_shutdown: None,
            local_socket: None,
        }
    }
}

/// I/O edges the agent talks through.
#[derive(Clone)]
pub struct AgentDeps {
    pub runtime: Arc<dyn RuntimeService>,
    pub images: Arc<dyn ImageService>,
    /// Where pod events go in standalone mode; with `api` they are posted to the API server
    /// (and logged) instead.
    pub events: Arc<dyn EventRecorder>,
    /// The API server client (`--kubeconfig`); `None` runs standalone.
    pub api: Option<kube::Client>,
}

/// Failures at start-up.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Server(#[from] server::ServerError),
    #[error("creating {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("static pod source: {0}")]
    Source(String),
    #[error(transparent)]
    CpuManager(#[from] CpuManagerError),
    #[error(transparent)]
    Allocation(#[from] crate::allocation::AllocationError),
    #[error(transparent)]
    ImageGc(#[from] crate::images::gc::ImageGcError),
    #[error("container manager: {0}")]
    ContainerManager(#[from] crate::cm::CmError),
    #[error("certificates: {0}")]
    Certificate(#[from] crate::certificate::CertError),
    #[error(transparent)]
    Systemd(#[from] crate::cm::cgroups::systemd_dbus::SystemdError),
    #[error("start-up task failed: {0}")]
    Task(String),
}

/// A running kubelet.
pub struct Agent {
    pub pods: watch::Receiver<crate::types::PodsSnapshot>,
    /// The prober (results, `prober_probe_total`, worker counts); `prober.metrics().render()`
    /// is `/metrics/probes`.
    pub prober: ProbeManager,
    /// The kubelet's metrics; `render()` is `/metrics`.
    pub metrics: KubeletMetrics,
    pub status: StatusManager,
    pub workers: PodWorkers,
    pub health: Vec<(String, HealthCheck)>,
    /// Bound addresses of the read-only and healthz listeners (for tests using port 0).
    pub read_only_addr: Option<SocketAddr>,
    pub healthz_addr: Option<SocketAddr>,
    /// Bound address of the HTTPS port.
    pub secure_addr: Option<SocketAddr>,
    /// Sends pod updates as if from a source (tests, and the API source later).
    pub source_tx: mpsc::Sender<crate::types::PodUpdate>,
    /// Image GC (`delete_unused_images` for the eviction manager), when enabled.
    pub image_gc: Option<ImageGc>,
    /// Container GC (`delete_all_unused_containers` for the eviction manager), when enabled.
    pub container_gc: Option<ContainerGc>,
    /// The eviction manager's node pressure verdict.
    pub pressure: watch::Receiver<crate::nodestatus::setters::NodePressure>,
    /// The stats snapshots (`None` when stats are disabled).
    pub stats: Option<crate::stats::StatsHandle>,
    supervisor: Supervisor,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl Agent {
    /// Builds and starts every manager, one layer after the other (see `assemble`).
    pub async fn start(
        cfg: AgentConfig,
        deps: AgentDeps,
        cancel: CancellationToken,
    ) -> Result<Self, AgentError> {
        let core = assemble::core(&cfg, deps, &cancel)?;
        let view = assemble::cluster_view(&cfg, &core, &cancel);
        let (state, streams) = assemble::pod_state(&cfg, &core, &view, &cancel);
        let cgroups = assemble::cgroups(&cfg, &view.host).await?;
        let workers = assemble::workers(&cfg, &core, &view, &state, &cgroups, &cancel)?;
        let (source_tx, merged) = assemble::sources(&cfg, &core, &cancel)?;
        let (looped, pressure_tx) = assemble::sync_loop(
            &cfg, &core, &view, &state, streams, &cgroups, &workers, merged, &cancel,
        );
        let kept = assemble::housekeeping(
            &cfg,
            &core,
            &state,
            &cgroups,
            &workers,
            &looped,
            pressure_tx,
            &cancel,
        )?;
        let machine = view.machine.clone();
        if let Some(client) = core.deps.api.clone() {
            assemble::api_side(
                &cfg, &core, client, view, &state, &workers, &looped, &source_tx, &cancel,
            );
        }
        let served = assemble::servers(
            &cfg,
            &core,
            machine,
            &state,
            &workers,
            &looped,
            kept.stats.clone(),
            &cancel,
        )
        .await?;
        info!(node = %cfg.node_name, "kubelet started");
        Ok(Self {
            pods: looped.pods,
            prober: state.prober,
            metrics: core.metrics,
            status: state.status,
            workers: workers.workers,
            health: served.health,
            read_only_addr: served.read_only_addr,
            healthz_addr: served.healthz_addr,
            secure_addr: served.secure_addr,
            source_tx,
            image_gc: kept.image_gc,
            container_gc: kept.container_gc,
            pressure: looped.pressure,
            stats: kept.stats,
            supervisor: core.sup,
            cancel,
            tracker: core.tracker,
        })
    }

    /// Waits for the first panic of a singleton task (the sync loop, PLEG, a source, a
    /// server, a manager…); pending while none panics. The binary exits non-zero on it.
    pub async fn fatal(&self) -> crate::supervisor::TaskPanic {
        self.supervisor.fatal().await
    }

    /// The singleton tasks' health: `Err` names every task that panicked or stopped early.
    pub fn task_health(&self) -> Result<(), String> {
        self.supervisor.health()
    }

    /// Stops every task and waits for them (pods keep running).
    pub async fn shutdown(self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        self.workers.shutdown().await;
        self.prober.shutdown().await;
        info!("kubelet stopped");
    }
}

/// The certificates `rkubelet get node` shows the expiry of: the serving certificate (the
/// configured file, else the bootstrapped or self-signed one in the cert dir) and the client
/// certificate of `--kubeconfig`'s rotation.
fn certificate_files(cfg: &AgentConfig) -> Vec<(String, PathBuf)> {
    let Some(sc) = &cfg.server else {
        return Vec::new();
    };
    let dir = &sc.tls.cert_dir;
    let serving = match &sc.tls.cert_file {
        Some(f) => f.clone(),
        None if sc.tls.server_tls_bootstrap => dir.join(server::tls::BOOTSTRAP_SERVING_FILE),
        None => dir.join("kubelet.crt"),
    };
    vec![
        ("serving".to_owned(), serving),
        ("client".to_owned(), dir.join("kubelet-client-current.pem")),
    ]
}

/// `serverTLSBootstrap`: the serving certificate manager, which needs the API server (without
/// one the HTTPS port has no certificate, as upstream).
#[allow(clippy::too_many_arguments)]
fn start_serving_certificates(
    cfg: &AgentConfig,
    sc: &server::setup::SecureConfig,
    deps: &AgentDeps,
    tls: Arc<server::tls::ServingTls>,
    events: &Arc<dyn EventRecorder>,
    metrics: &KubeletMetrics,
    sup: &Supervisor,
    cancel: &CancellationToken,
) -> Result<(), AgentError> {
    let Some(client) = deps.api.clone() else {
        tracing::warn!(
            "serverTLSBootstrap: Certificate rotation is not enabled, no connection to the apiserver; the HTTPS port has no serving certificate"
        );
        return Ok(());
    };
    let manager = crate::certificate::serving::serving_manager(
        client,
        &cfg.node_name,
        std::slice::from_ref(&cfg.node_status.hostname),
        &cfg.node_status.node_ips,
        &sc.tls.cert_dir,
        Arc::new(move || tls.reload().map_err(|e| e.to_string())),
        crate::certificate::manager::Timings::default(),
    )?;
    match manager {
        Some(m) => {
            metrics.register(m.clone());
            sup.spawn_critical(
                "serving certificate manager",
                m.run(events.clone(), cancel.child_token()),
            );
        }
        None => tracing::warn!(
            "serverTLSBootstrap: the node has no IP address to request a serving certificate for"
        ),
    }
    Ok(())
}

/// What the eviction manager reads and writes.
struct EvictionInputs {
    pods: watch::Receiver<crate::types::PodsSnapshot>,
    status: StatusManager,
    workers: PodWorkers,
    events: Arc<dyn EventRecorder>,
    pressure: watch::Sender<NodePressure>,
    metrics: KubeletMetrics,
    /// The PLEG's listing, whose creation times the stats reuse.
    latest_listing: crate::pleg::LatestListing,
}

/// The desired pods whose status is not terminal (admitted and still to run), for the
/// allocation and CPU managers.
fn non_terminal_pods(
    pods: watch::Receiver<crate::types::PodsSnapshot>,
    status: StatusManager,
) -> Box<dyn Fn() -> Vec<Pod> + Send + Sync> {
    Box::new(move || {
        pods.borrow()
            .iter()
            .filter(|p| {
                !status.with_pod_status(
                    crate::types::PodExt::uid(&***p),
                    crate::admission::is_terminal,
                )
            })
            .map(|p| (**p).clone())
            .collect()
    })
}

/// `f(value, x)` when `opt` holds an `x`, else `value` unchanged: an optional builder step.
fn with_opt<V, T>(value: V, opt: Option<T>, f: impl FnOnce(V, T) -> V) -> V {
    match opt {
        Some(x) => f(value, x),
        None => value,
    }
}

/// Starts the stats provider (unless injected or disabled) and, with stats, the eviction
/// manager. Returns the stats handle.
fn start_eviction(
    wiring: &EvictionWiring,
    deps: &AgentDeps,
    mut reclaimers: Vec<Arc<dyn NodeReclaimer>>,
    inputs: EvictionInputs,
    sup: &Supervisor,
    cancel: &CancellationToken,
) -> Option<crate::stats::StatsHandle> {
    let stats = match &wiring.stats {
        StatsSource::Disabled => return None,
        StatsSource::Injected(handle) => handle.clone(),
        StatsSource::Host(settings) => {
            let (provider, handle) = crate::stats::StatsProvider::new(
                Arc::new(crate::stats::SystemFs),
                deps.runtime.clone(),
                deps.images.clone(),
                settings.clone(),
                inputs.pods.clone(),
            );
            let provider = provider.with_latest_listing(inputs.latest_listing.clone());
            sup.spawn_critical("stats provider", provider.run(cancel.child_token()));
            handle
        }
    };
    reclaimers.extend(wiring.extra_reclaimers.iter().cloned());
    let EvictionInputs {
        pods,
        status,
        workers,
        events,
        pressure,
        metrics,
        latest_listing: _,
    } = inputs;
    let active_pods = {
        let (status, workers) = (status.clone(), workers.clone());
        Arc::new(move || {
            pods.borrow()
                .iter()
                .filter(|p| {
                    use crate::types::PodExt;
                    workers.is_syncing(p.uid())
                        && !status.with_pod_status(p.uid(), |s| {
                            crate::status::manager::is_terminal_phase(
                                s.and_then(|s| s.phase.as_deref()),
                            )
                        })
                })
                .map(|p| (**p).clone())
                .collect()
        })
    };
    let manager = EvictionManager::new(
        wiring.settings.clone(),
        stats.clone(),
        reclaimers,
        Arc::new(WorkerEvictor {
            status,
            workers,
            events: events.clone(),
        }),
        active_pods,
        events,
        pressure,
    );
    sup.spawn_critical(
        "eviction manager",
        manager.with_metrics(metrics).run(cancel.child_token()),
    );
    Some(stats)
}
