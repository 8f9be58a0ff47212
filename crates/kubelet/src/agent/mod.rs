//! Assembly of a running kubelet (upstream `NewMainKubelet` + `Run`, without the god-struct):
//! builds each manager, wires their channels, and runs every task under one cancellation tree.
//! Receives the resolved settings, the runtime/image services and, in API-server mode, the
//! API client (the API-only tasks are wired in `api`); returns a handle whose `shutdown`
//! waits for every task. Shutting down never stops pods: a restarted kubelet adopts them.

pub mod api;
pub mod cgroup_driver;
pub use rkubelet_core::data_dirs;
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

use crate::admission::Admission;
use crate::admission::predicate::NodePredicates;
use crate::clock::Clock;
use crate::cm::cpumanager::{
    CpuManager, CpuManagerConfig, CpuManagerError, CpuManagerPolicy, ReconcileInputs,
};
use crate::config_merge::PodConfigMerger;
use crate::container::cache::PodCache;
use crate::events::EventRecorder;
use crate::eviction::{
    EvictionAdmit, EvictionManager, EvictionWiring, NodeReclaimer, StatsSource, WorkerEvictor,
};
use crate::images::ImageManager;
use crate::images::gc::ImageGc;
use crate::kuberuntime::container_config::RuntimeOptions;
use crate::kuberuntime::gc::{ContainerGc, SourcesReadyFn};
use crate::kuberuntime::sandbox_config::SandboxContext;
use crate::kuberuntime::sync::{Syncer, SyncerConfig};
use crate::metrics::{InstrumentedImages, InstrumentedRuntime, InstrumentedSyncer, KubeletMetrics};
use crate::nodestatus::NodeStatusSettings;
use crate::nodestatus::host::HostInfo;
use crate::nodestatus::register::initial_node;
use crate::nodestatus::setters::{NodePressure, StatusInputs};
use crate::objects::PodObjects;
use crate::objects::api::{ApiObjects, ApiObjectsSettings};
use crate::pleg::GenericPleg;
use crate::pod_workers::{PodWorkers, WorkerTimings};
use crate::prober::ProbeManager;
use crate::runtimeclass::RuntimeClassManager;
use crate::server::{self, HealthCheck, ServerState};
use crate::sources::file::FileSource;
use crate::sources::http::HttpSource;
use crate::status::manager::StatusManager;
use crate::supervisor::Supervisor;
use crate::sync_loop::{LoopTimings, SyncLoop, SyncLoopHealth};
use crate::types::PodSource;
use crate::volumes::{SystemMounter, VolumeConfig, VolumeManager};

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
    /// Builds and starts every manager.
    pub async fn start(
        cfg: AgentConfig,
        deps: AgentDeps,
        cancel: CancellationToken,
    ) -> Result<Self, AgentError> {
        data_dirs::setup_data_dirs(&cfg.root_dir, &cfg.pod_logs_dir)
            .map_err(|(path, source)| AgentError::Dir { path, source })?;
        // Pod directories an older rkubelet made 0755 get upstream's 0750 before any pod runs.
        data_dirs::tighten_pod_dirs(&cfg.root_dir);
        let cpu_manager = CpuManager::new(&CpuManagerConfig {
            state_dir: cfg.root_dir.clone(),
            ..cfg.cpu_manager.clone()
        })?;
        let tracker = TaskTracker::new();
        // Every singleton runs under the supervisor: a panic is fatal, an early exit unhealthy.
        let sup = Supervisor::new(tracker.clone(), cancel.clone());
        // Metrics: one registry for the whole kubelet; every CRI call goes through the
        // instrumenting decorators.
        let metrics = KubeletMetrics::new(&cfg.node_name);
        let deps = AgentDeps {
            runtime: Arc::new(InstrumentedRuntime::new(deps.runtime, metrics.clone())),
            images: Arc::new(InstrumentedImages::new(deps.images, metrics.clone())),
            ..deps
        };
        let events = match &deps.api {
            Some(client) => api::start_events(client, &cfg.node_name, &cfg.api, &sup, &cancel),
            None => deps.events.clone(),
        };
        // Every event is also kept in the operator's ring (`rkubelet get events`).
        let event_ring =
            crate::events_ring::EventRing::new(crate::events_ring::DEFAULT_CAPACITY, Clock::new());
        let events: Arc<dyn EventRecorder> = Arc::new(crate::events_ring::TeeRecorder::new(
            events,
            event_ring.clone(),
            &cfg.node_name,
        ));
        if let Some(certs) = &cfg.client_certificates {
            metrics.register(certs.clone());
            sup.spawn_critical(
                "client certificate manager",
                certs.clone().run(events.clone(), cancel.child_token()),
            );
        }
        // Admission's view of the Node: computed locally now, replaced by the API server's
        // Node once registered.
        let host = HostInfo::read(&cfg.root_dir);
        let machine = Arc::new(host.clone());
        let view_host = machine.clone();
        let local_node = initial_node(
            &cfg.node_status,
            &host,
            &StatusInputs::default(),
            &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ),
        );
        let (admission_node_tx, admission_node) = watch::channel(Arc::new(local_node));
        // ConfigMaps, Secrets, tokens and service links for pods (API-server mode only).
        let objects: Option<Arc<dyn PodObjects>> = deps.api.as_ref().map(|client| {
            let (objects, task) = ApiObjects::new(client.clone(), ApiObjectsSettings::default());
            sup.spawn_critical("api objects", task.run(cancel.child_token()));
            Arc::new(objects) as Arc<dyn PodObjects>
        });
        // RuntimeClasses, watched as upstream's informer (API-server mode only).
        let runtime_classes = match &deps.api {
            Some(client) => {
                let (classes, task) = RuntimeClassManager::new(client.clone());
                sup.spawn_critical("runtimeclass manager", task.run(cancel.child_token()));
                classes
            }
            None => RuntimeClassManager::standalone(),
        };
        let cache = PodCache::new();
        let cpu_cache = cache.clone();
        let status = StatusManager::new();
        let memory_bytes = i64::try_from(host.memory_capacity).unwrap_or(0);
        let volumes = VolumeManager::new(
            VolumeConfig {
                root_dir: cfg.root_dir.clone(),
                node_memory_bytes: memory_bytes,
                node_hosts_file: PathBuf::from("/etc/hosts"),
            },
            Arc::new(SystemMounter),
        );
        let volumes = with_opt(volumes, objects.clone(), VolumeManager::with_objects);

        // PLEG: the only writer of the pod cache.
        let (pleg_tx, pleg_rx) = mpsc::channel(1000);
        let pleg = GenericPleg::new(
            deps.runtime.clone(),
            cache.clone(),
            cfg.relist_period,
            pleg_tx,
        );
        // Updates the node status at once: on shutdown, and when the runtime answers again.
        let node_sync = Arc::new(tokio::sync::Notify::new());
        let pleg = pleg
            .with_relist_threshold(cfg.relist_threshold)
            .with_runtime_back(node_sync.clone())
            .with_metrics(metrics.clone());
        let pleg_health = pleg.health();
        let node_pleg_health = pleg_health.clone();
        let view_pleg_health = pleg_health.clone();
        let relist_trigger = pleg.relist_trigger();
        let latest_listing = pleg.latest_listing();
        if cfg.evented_pleg {
            let evented = crate::pleg::evented::EventedPleg::new(pleg);
            sup.spawn_critical("pleg", evented.run(cancel.child_token()));
        } else {
            sup.spawn_critical("pleg", pleg.run(cancel.child_token()));
        }
        let (prober, probe_updates) = ProbeManager::new(
            deps.runtime.clone(),
            events.clone(),
            Clock::new(),
            cancel.child_token(),
        );
        // Container manager: kubepods, QoS cgroups, node allocatable (before any pod syncs).
        let cgroup_fs = cfg
            .cgroups
            .fs
            .clone()
            .unwrap_or_else(|| crate::cm::cgroups::detect(&cfg.cgroups.mount_root));
        // `cgroupDriver: systemd`: the slices are made through systemd (unreachable: no start).
        let cgroup_fs = if cfg.cgroups.per_qos
            && cfg.cgroups.driver == crate::cm::cgroups::CgroupDriver::Systemd
        {
            let address = cfg.cgroups.systemd_bus_address.as_deref();
            let systemd =
                crate::cm::cgroups::systemd::SystemdCgroupFs::connect(cgroup_fs, address).await?;
            Arc::new(systemd) as Arc<dyn crate::cm::cgroups::CgroupFs>
        } else {
            cgroup_fs
        };
        let cgroup_v2 = cgroup_fs.version() == crate::cm::cgroups::CgroupVersion::V2;
        let hugepage_sizes: Vec<u64> = host.huge_pages.iter().map(|h| h.page_size).collect();
        // The memory limit node allocatable puts on the pods cgroup (eviction's
        // `allocatableMemory.available`).
        let mut pods_memory_limit = None;
        let cm = if cfg.cgroups.per_qos {
            let cm_cfg = crate::cm::CmConfig {
                capacity: crate::cm::node_capacity(&host, crate::cm::read_pid_max()),
                hugepage_sizes: hugepage_sizes.clone(),
                ..cfg.cgroups.cm.clone()
            };
            pods_memory_limit = crate::cm::allocatable::enforcement(
                &cm_cfg.enforce_node_allocatable,
                &cm_cfg.capacity,
                &cm_cfg.system_reserved,
                &cm_cfg.kube_reserved,
            )
            .pods
            .memory
            .and_then(|m| u64::try_from(m).ok());
            let cm = crate::cm::ContainerManager::new(cm_cfg, cgroup_fs.clone());
            // Blocking (cgroupfs writes, systemd jobs): off the async workers.
            let starting = cm.clone();
            tokio::task::spawn_blocking(move || starting.start())
                .await
                .map_err(|e| AgentError::Task(format!("container manager start: {e}")))??;
            Some(cm)
        } else {
            None
        };
        let images = ImageManager::new(
            deps.images.clone(),
            events.clone(),
            cfg.serialize_image_pulls,
            cfg.max_parallel_image_pulls,
        )
        .with_pull_limit(cfg.gc.registry_pull_qps, cfg.gc.registry_burst);
        let images = with_opt(
            images,
            cfg.credential_providers.clone(),
            ImageManager::with_credential_providers,
        )
        .with_node_docker_config(Arc::new(
            crate::credentialprovider::node_config::NodeDockerConfig::for_root_dir(&cfg.root_dir),
        ));
        let syncer = Syncer::new(
            deps.runtime.clone(),
            images,
            status.clone(),
            events.clone(),
            SyncerConfig {
                root_dir: cfg.root_dir.clone(),
                pod_logs_dir: cfg.pod_logs_dir.clone(),
                container_log_symlink_dir: cfg.container_log_symlink_dir.clone(),
                node_name: cfg.node_name.clone(),
                host_ips: cfg.host_ips.clone(),
                runtime_name: cfg.runtime_name.clone(),
                runtime_options: RuntimeOptions {
                    memory_capacity: memory_bytes,
                    cgroup_v2,
                    cpu_cfs_quota: cfg.cgroups.cm.pod_options.enforce_cpu_limits,
                    cpu_cfs_quota_period_us: i64::try_from(cfg.cgroups.cm.pod_options.cpu_period)
                        .unwrap_or(100_000),
                    single_process_oom_kill: cfg
                        .cgroups
                        .single_process_oom_kill
                        .unwrap_or(!cgroup_v2),
                    seccomp_profile_root: cfg.root_dir.join("seccomp"),
                    seccomp_default: cfg.seccomp_default,
                    hugepage_sizes,
                    swap_behavior: cfg.cgroups.swap_behavior.clone(),
                    swap_controller_available: crate::cm::swap_controller_available(
                        &cfg.cgroups.mount_root,
                        cgroup_v2,
                    ),
                    swap_capacity: i64::try_from(host.swap_capacity).unwrap_or(0),
                    disable_cpu_quota_with_exclusive_cpus: cfg
                        .cgroups
                        .cm
                        .disable_cpu_quota_with_exclusive_cpus,
                },
                sandbox: SandboxContext {
                    node_name: cfg.node_name.clone(),
                    node_ips: cfg.host_ips.clone(),
                    pod_logs_dir: cfg.pod_logs_dir.clone(),
                    host_resolv_conf: cfg.host_resolv_conf.clone(),
                    cluster_dns: cfg.cluster_dns.clone(),
                    cluster_domain: cfg.cluster_domain.clone(),
                    cgroup_parent: None,
                },
            },
            Clock::new(),
            volumes.clone(),
        )
        .with_relist_trigger(relist_trigger)
        .with_prober(prober.clone())
        .with_cpu_manager(cpu_manager.clone())
        .with_runtime_classes(runtime_classes)
        .with_metrics(metrics.clone());
        let syncer = with_opt(syncer, cfg.crash_loop_max, |s, max| {
            s.with_crash_loop_max(max)
        });
        // In-place pod resize: allocations checkpointed in the root dir, bounded by the Node.
        let allocation = crate::allocation::AllocationManager::new(&cfg.root_dir)?
            .with_node(admission_node.clone())
            .with_static_cpu_manager(cfg.cpu_manager.policy == CpuManagerPolicy::Static);
        let syncer = syncer.with_allocation(allocation.clone());
        let syncer = with_opt(syncer, cm.clone(), |s, cm| s.with_cgroups(cm));
        let syncer = Arc::new(with_opt(syncer, objects.clone(), |s, o| s.with_objects(o)));
        let syncer = Arc::new(InstrumentedSyncer::new(
            syncer,
            metrics.clone(),
            status.clone(),
        ));
        let workers = PodWorkers::new(
            syncer,
            cache.clone(),
            WorkerTimings {
                resync_interval: cfg.sync_frequency,
                backoff_period: Duration::from_secs(10),
            },
            cancel.child_token(),
        );
        // Per-pod tasks restart after a panic; the metric counts them.
        workers.set_metrics(metrics.clone());
        workers.set_events(events.clone());
        prober.set_metrics(metrics.clone());

        // Sources → merger.
        let (source_tx, source_rx) = mpsc::channel(64);
        let (merged_tx, merged_rx) = mpsc::channel(64);
        let mut expected = Vec::new();
        if let Some(path) = &cfg.static_pod_path {
            expected.push(PodSource::File);
            let src = FileSource::new(
                path.clone(),
                cfg.node_name.clone(),
                cfg.file_check_frequency,
            );
            sup.spawn_critical(
                "file pod source",
                src.run(source_tx.clone(), cancel.child_token()),
            );
        }
        if let Some(url) = &cfg.static_pod_url {
            expected.push(PodSource::Http);
            let src = HttpSource::new(
                url,
                &cfg.static_pod_url_header,
                cfg.node_name.clone(),
                cfg.http_check_frequency,
            )
            .map_err(|e| AgentError::Source(e.to_string()))?;
            sup.spawn_critical(
                "http pod source",
                src.run(source_tx.clone(), cancel.child_token()),
            );
        }
        if deps.api.is_some() {
            expected.push(PodSource::Api);
        }
        let merger = PodConfigMerger::new();
        let seen = merger.seen_sources();
        sup.spawn_critical(
            "config merger",
            merger.run(source_rx, merged_tx, cancel.child_token()),
        );
        let sources_ready = Box::new(move || seen.seen_all(&expected));

        // Eviction: the pressure verdict admission and node status read.
        let (pressure_tx, pressure) = watch::channel(NodePressure::default());
        // Node shutdown: the shutting-down flag admission and node status read.
        let shutdown_state = crate::nodeshutdown::ShutdownState::default();

        // Sync loop.
        let unknown_fields = crate::sources::unknown_fields::UnknownFields::default();
        let loop_health = SyncLoopHealth::new(cfg.sync_frequency);
        let sync_loop = SyncLoop::new(
            workers.clone(),
            status.clone(),
            deps.runtime.clone(),
            sources_ready,
            loop_health.clone(),
            cfg.loop_timings,
        )
        .with_admission(
            Admission::new(vec![
                // Upstream registers the eviction manager's handler first.
                Box::new(EvictionAdmit {
                    pressure: pressure.clone(),
                }),
                // Upstream allocates resources (topology/CPU manager) before the predicates.
                Box::new(cpu_manager.admit_handler()),
                Box::new(NodePredicates::new(admission_node)),
                // Upstream adds the node shutdown manager's handler after the predicates.
                Box::new(shutdown_state.admit_handler()),
                Box::new(crate::security::sysctl::SysctlAllowlist::from_config(
                    &cfg.allowed_unsafe_sysctls,
                )),
                Box::new(crate::security::apparmor::AppArmorAdmit::detect()),
                // Pod-level resources are not implemented: validation refuses turning the
                // PodLevelResources gate on, so pods that set them are refused here.
                Box::new(crate::admission::pod_features::PodFeaturesAdmit {
                    pod_level_resources: false,
                }),
                Box::new(crate::security::groups::SupplementalGroupsPolicyAdmit {
                    runtime_supports_strict: false,
                }),
                // API pods with a field this kubelet does not know where it changes what runs.
                Box::new(crate::sources::unknown_fields::UnknownFieldsAdmit {
                    fields: unknown_fields.clone(),
                }),
            ]),
            events.clone(),
        )
        .with_probe_updates(probe_updates)
        .with_latest_listing(latest_listing.clone())
        .with_volumes(volumes)
        .with_metrics(metrics.clone());
        let sync_loop = with_opt(sync_loop, objects, |l, o| l.with_objects(o));
        let sync_loop = with_opt(sync_loop, cm.clone(), |l, cm| {
            l.with_cgroups(cm, cfg.root_dir.clone())
        });
        let pods = sync_loop.pods();
        let mirrors = sync_loop.mirrors();
        // Everything that drops state for pods it does not see waits for the sync loop to have
        // every pod of every source, not just for the sources to have reported.
        let applied = sync_loop.sources_applied();
        let gc_sources_ready: SourcesReadyFn = {
            let applied = applied.clone();
            Arc::new(move || applied.ready())
        };
        allocation.set_active_pods(non_terminal_pods(pods.clone(), status.clone()));
        if let Some(cm) = cm {
            cm.set_active_pods(pods.clone());
            sup.spawn_critical("container manager", cm.run(cancel.child_token()));
        }
        sup.spawn_critical(
            "sync loop",
            sync_loop.run(merged_rx, pleg_rx, cancel.child_token()),
        );

        // CPU manager reconcile loop: admitted, non-terminal pods and the PLEG's view.
        if cfg.cpu_manager.policy != CpuManagerPolicy::None {
            let applied = applied.clone();
            let inputs = ReconcileInputs {
                active_pods: non_terminal_pods(pods.clone(), status.clone()),
                sources_ready: Box::new(move || applied.ready()),
                cache: cpu_cache,
            };
            sup.spawn_critical(
                "cpu manager",
                cpu_manager.run(deps.runtime.clone(), inputs, cancel.child_token()),
            );
        }

        // Garbage collection and log rotation.
        let (image_gc, container_gc) = gc::start(
            &cfg,
            &deps,
            &events,
            &workers,
            gc_sources_ready,
            &sup,
            &cancel,
        )?;

        // Upstream adds the allocatable thresholds only with cgroups per QoS (validation
        // refuses `enforceNodeAllocatable` without them).
        let eviction_wiring = EvictionWiring {
            settings: cfg.eviction.settings.clone().with_node_allocatable(
                pods_memory_limit
                    .is_some()
                    .then_some(&cfg.cgroups.cm.enforce_node_allocatable)
                    .into_iter()
                    .flatten()
                    .map(String::as_str),
                pods_memory_limit,
            ),
            ..cfg.eviction.clone()
        };
        let stats = start_eviction(
            &eviction_wiring,
            &deps,
            gc::reclaimers(image_gc.as_ref(), container_gc.as_ref()),
            EvictionInputs {
                pods: pods.clone(),
                status: status.clone(),
                workers: workers.clone(),
                events: events.clone(),
                pressure: pressure_tx,
                metrics: metrics.clone(),
                latest_listing,
            },
            &sup,
            &cancel,
        );

        if let Some(settings) = cfg.node_shutdown.clone() {
            let manager = crate::nodeshutdown::NodeShutdownManager::new(
                settings,
                crate::nodeshutdown::NodeShutdownInputs {
                    state: shutdown_state.clone(),
                    active_pods: crate::nodeshutdown::manager::active_pods(
                        pods.clone(),
                        workers.clone(),
                    ),
                    killer: Arc::new(crate::nodeshutdown::WorkerKiller {
                        status: status.clone(),
                        workers: workers.clone(),
                    }),
                    events: events.clone(),
                    metrics: Some(metrics.clone()),
                    node_sync: node_sync.clone(),
                    state_dir: cfg.root_dir.clone(),
                },
            );
            sup.spawn_critical("node shutdown manager", manager.run(cancel.child_token()));
        }

        if let Some(client) = deps.api.clone() {
            api::start(
                &cfg.api,
                api::ApiInputs {
                    client,
                    runtime: deps.runtime.clone(),
                    images: deps.images.clone(),
                    events: events.clone(),
                    node_settings: cfg.node_status.clone(),
                    host,
                    node_health: vec![(
                        "PLEG".to_owned(),
                        Arc::new(move || node_pleg_health.healthy()) as HealthCheck,
                    )],
                    source_tx: source_tx.clone(),
                    unknown_fields,
                    admission_node: admission_node_tx,
                    pods: pods.clone(),
                    mirrors,
                    sources_applied: applied,
                    status: status.clone(),
                    workers: workers.clone(),
                    pressure: pressure.clone(),
                    // Always wired: the trigger also serves the PLEG's "runtime back", and the
                    // reason stays `None` without a shutdown manager (nothing shuts down).
                    shutdown: Some({
                        let state = shutdown_state.clone();
                        let reason: crate::nodestatus::manager::NotReadyFn =
                            Arc::new(move || state.not_ready_reason());
                        (reason, node_sync.clone())
                    }),
                },
                &sup,
                &cancel,
            );
        }

        // HTTP.
        let health: Vec<(String, HealthCheck)> = vec![
            (
                "syncloop".to_owned(),
                Arc::new(move || loop_health.check()) as HealthCheck,
            ),
            (
                "pleg".to_owned(),
                Arc::new(move || pleg_health.healthy()) as HealthCheck,
            ),
            // A singleton loop that panicked or stopped: upstream would have crashed.
            ("tasks".to_owned(), sup.health_check()),
        ];
        let mut state = ServerState::basic(pods.clone(), status.clone(), health.clone());
        state.node_name = cfg.node_name.clone();
        state.root_dir = cfg.root_dir.clone();
        state.runtime = Some(deps.runtime.clone());
        state.pod_cache = Some(cache.clone());
        state.metrics = Some(metrics.clone());
        state.probe_metrics = Some(prober.metrics().clone());
        state.stats = stats.clone();
        state.pod_cgroup_root = cfg
            .cgroups
            .per_qos
            .then(|| cfg.cgroups.cm.cgroup_root.clone());
        state.pod_cgroup_driver = cfg.cgroups.driver;
        state.machine = Some(machine);
        state.cancel = cancel.child_token();
        state.operator = Some(server::operator::OperatorState {
            events: event_ring,
            workers: workers.clone(),
            node: Arc::new(server::operator::NodeView {
                settings: cfg.node_status.clone(),
                host: view_host,
                pressure: pressure.clone(),
                pleg: Arc::new(move || view_pleg_health.healthy()),
                runtime: deps.runtime.clone(),
                certificates: certificate_files(&cfg),
            }),
        });
        let mut secure_addr = None;
        if let Some(sc) = &cfg.server {
            let reviews = deps.api.clone().map(server::setup::kube_reviews);
            let (tls, auth) = server::setup::build(sc, reviews)?;
            if sc.tls.server_tls_bootstrap {
                start_serving_certificates(
                    &cfg,
                    sc,
                    &deps,
                    tls.clone(),
                    &events,
                    &metrics,
                    &sup,
                    &cancel,
                )?;
            }
            state.configz = sc.configz.clone().map(Arc::new);
            state.system_logs = sc.system_logs.clone();
            state.debugging_handlers = sc.debugging_handlers;
            let listener = server::bind(sc.addr).await?;
            secure_addr = listener.local_addr().ok();
            sup.spawn_critical(
                "secure server",
                server::serve_secure(
                    listener,
                    tls,
                    Arc::new(auth),
                    state.clone(),
                    cancel.child_token(),
                ),
            );
        }
        let mut bound = [None, None];
        for (i, (addr, endpoints)) in [
            (cfg.read_only_addr, server::PlainPort::ReadOnly),
            (cfg.healthz_addr, server::PlainPort::Healthz),
        ]
        .into_iter()
        .enumerate()
        {
            if let Some(addr) = addr {
                let listener = server::bind(addr).await?;
                bound[i] = listener.local_addr().ok();
                let name = match endpoints {
                    server::PlainPort::ReadOnly => "read-only server",
                    server::PlainPort::Healthz => "healthz server",
                };
                sup.spawn_critical(
                    name,
                    server::serve(listener, endpoints, state.clone(), cancel.child_token()),
                );
            }
        }
        // The operator's socket is an addition to upstream's kubelet: when it cannot be made
        // safely (something planted at its path, a path too long for a unix socket) the
        // kubelet runs without it and says why; `rkubelet get` then reports it unreachable.
        if let Some(path) = &cfg.local_socket {
            match server::local::bind_local(path) {
                Ok(listener) => sup.spawn_critical(
                    "local socket",
                    server::local::serve_local(listener, state.clone(), cancel.child_token()),
                ),
                Err(e) => tracing::error!(error = %e, "not serving the operator's local socket"),
            }
        }
        info!(node = %cfg.node_name, "kubelet started");
        Ok(Self {
            pods,
            prober,
            metrics,
            status,
            workers,
            health,
            read_only_addr: bound[0],
            healthz_addr: bound[1],
            secure_addr,
            source_tx,
            image_gc,
            container_gc,
            pressure,
            stats,
            supervisor: sup,
            cancel,
            tracker,
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
