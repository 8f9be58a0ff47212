//! Assembly of a running kubelet (upstream `NewMainKubelet` + `Run`, without the god-struct):
//! builds each manager, wires their channels, and runs every task under one cancellation tree.
//! Receives the resolved settings, the runtime/image services and, in API-server mode, the
//! API client (the API-only tasks are wired in `api`); returns a handle whose `shutdown`
//! waits for every task. Shutting down never stops pods: a restarted kubelet adopts them.

pub mod api;

pub use api::ApiModeConfig;

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

use crate::admission::predicate::NodePredicates;
use crate::admission::{Admission, MaxPods};
use crate::clock::Clock;
use crate::config_merge::PodConfigMerger;
use crate::container::cache::PodCache;
use crate::events::EventRecorder;
use crate::images::ImageManager;
use crate::kuberuntime::container_config::RuntimeOptions;
use crate::kuberuntime::sandbox_config::SandboxContext;
use crate::kuberuntime::sync::{Syncer, SyncerConfig};
use crate::nodestatus::NodeStatusSettings;
use crate::nodestatus::host::HostInfo;
use crate::nodestatus::register::initial_node;
use crate::nodestatus::setters::StatusInputs;
use crate::objects::PodObjects;
use crate::objects::api::{ApiObjects, ApiObjectsSettings};
use crate::pleg::GenericPleg;
use crate::pod_workers::{PodWorkers, WorkerTimings};
use crate::prober::ProbeManager;
use crate::server::{self, Endpoints, HealthCheck, ServerState};
use crate::sources::file::FileSource;
use crate::sources::http::HttpSource;
use crate::status::manager::StatusManager;
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
    pub loop_timings: LoopTimings,
    pub runtime_name: String,
    /// `maxPods`: admission refuses pods beyond this many (`OutOfpods`).
    pub max_pods: usize,
    /// `allowedUnsafeSysctls` (may contain `*` wildcards).
    pub allowed_unsafe_sysctls: Vec<String>,
    /// `seccompDefault`: containers without a seccomp profile get RuntimeDefault.
    pub seccomp_default: bool,
    /// The Node as this kubelet describes it: registered in API-server mode, and in both modes
    /// what admission checks pods against (capacity, allocatable, labels, taints).
    pub node_status: NodeStatusSettings,
    /// Settings of the API-server mode tasks (used when `AgentDeps::api` is set).
    pub api: ApiModeConfig,
    /// The authenticated HTTPS port (`enableServer`); `None` serves none.
    pub server: Option<server::setup::SecureConfig>,
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
            read_only_addr: None,
            healthz_addr: None,
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            host_resolv_conf: Some("nameserver 127.0.0.53\n".to_owned()),
            host_ips: vec!["127.0.0.1".to_owned()],
            serialize_image_pulls: true,
            max_parallel_image_pulls: None,
            relist_period: Duration::from_secs(1),
            loop_timings: LoopTimings::default(),
            runtime_name: "containerd".to_owned(),
            max_pods: 110,
            allowed_unsafe_sysctls: Vec::new(),
            seccomp_default: false,
            node_status: NodeStatusSettings {
                node_ips: vec![std::net::IpAddr::from([127, 0, 0, 1])],
                ..NodeStatusSettings::new(node_name)
            },
            api: ApiModeConfig::default(),
            server: None,
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
}

/// A running kubelet.
pub struct Agent {
    pub pods: watch::Receiver<Arc<Vec<Pod>>>,
    /// The prober (results, `prober_probe_total`, worker counts).
    pub prober: ProbeManager,
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
        for dir in [
            cfg.root_dir.clone(),
            cfg.root_dir.join("pods"),
            cfg.pod_logs_dir.clone(),
        ] {
            std::fs::create_dir_all(&dir).map_err(|source| AgentError::Dir {
                path: dir.clone(),
                source,
            })?;
        }
        let tracker = TaskTracker::new();
        let events = match &deps.api {
            Some(client) => api::start_events(client, &cfg.node_name, &cfg.api, &tracker, &cancel),
            None => deps.events.clone(),
        };
        // Admission's view of the Node: computed locally now, replaced by the API server's
        // Node once registered.
        let host = HostInfo::read(&cfg.root_dir);
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
            tracker.spawn(task.run(cancel.child_token()));
            Arc::new(objects) as Arc<dyn PodObjects>
        });
        let cache = PodCache::new();
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
        let volumes = match &objects {
            Some(objects) => volumes.with_objects(objects.clone()),
            None => volumes,
        };

        // PLEG: the only writer of the pod cache.
        let (pleg_tx, pleg_rx) = mpsc::channel(1000);
        let pleg = GenericPleg::new(
            deps.runtime.clone(),
            cache.clone(),
            cfg.relist_period,
            pleg_tx,
        );
        let pleg_health = pleg.health();
        let node_pleg_health = pleg_health.clone();
        let relist_trigger = pleg.relist_trigger();
        tracker.spawn(pleg.run(cancel.child_token()));
        let (prober, probe_updates) = ProbeManager::new(
            deps.runtime.clone(),
            events.clone(),
            Clock::new(),
            cancel.child_token(),
        );
        let images = ImageManager::new(
            deps.images.clone(),
            events.clone(),
            cfg.serialize_image_pulls,
            cfg.max_parallel_image_pulls,
        );
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
                    cgroup_v2: std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists(),
                    seccomp_profile_root: cfg.root_dir.join("seccomp"),
                    seccomp_default: cfg.seccomp_default,
                    ..RuntimeOptions::default()
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
        .with_prober(prober.clone());
        let syncer = Arc::new(match &objects {
            Some(objects) => syncer.with_objects(objects.clone()),
            None => syncer,
        });
        let workers = PodWorkers::new(
            syncer,
            cache.clone(),
            WorkerTimings {
                resync_interval: cfg.sync_frequency,
                backoff_period: Duration::from_secs(10),
            },
            cancel.child_token(),
        );

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
            tracker.spawn(src.run(source_tx.clone(), cancel.child_token()));
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
            tracker.spawn(src.run(source_tx.clone(), cancel.child_token()));
        }
        if deps.api.is_some() {
            expected.push(PodSource::Api);
        }
        let merger = PodConfigMerger::new();
        let seen = merger.seen_sources();
        tracker.spawn(merger.run(source_rx, merged_tx, cancel.child_token()));
        let sources_ready = {
            let (seen, expected) = (seen.clone(), expected.clone());
            Box::new(move || seen.seen_all(&expected))
        };

        // Sync loop.
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
                Box::new(MaxPods(cfg.max_pods)),
                Box::new(NodePredicates::new(admission_node)),
                Box::new(crate::security::sysctl::SysctlAllowlist::from_config(
                    &cfg.allowed_unsafe_sysctls,
                )),
                Box::new(crate::security::apparmor::AppArmorAdmit::detect()),
                Box::new(crate::security::groups::SupplementalGroupsPolicyAdmit {
                    runtime_supports_strict: false,
                }),
            ]),
            events.clone(),
        )
        .with_probe_updates(probe_updates)
        .with_volumes(volumes);
        let sync_loop = match objects {
            Some(objects) => sync_loop.with_objects(objects),
            None => sync_loop,
        };
        let pods = sync_loop.pods();
        let mirrors = sync_loop.mirrors();
        tracker.spawn(sync_loop.run(merged_rx, pleg_rx, cancel.child_token()));

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
                    admission_node: admission_node_tx,
                    pods: pods.clone(),
                    mirrors,
                    seen_sources: seen,
                    expected_sources: expected,
                    status: status.clone(),
                    workers: workers.clone(),
                },
                &tracker,
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
        ];
        let mut state = ServerState::basic(pods.clone(), status.clone(), health.clone());
        state.node_name = cfg.node_name.clone();
        state.root_dir = cfg.root_dir.clone();
        state.runtime = Some(deps.runtime.clone());
        state.pod_cache = Some(cache.clone());
        state.cancel = cancel.child_token();
        let mut secure_addr = None;
        if let Some(sc) = &cfg.server {
            let reviews = deps.api.clone().map(server::setup::kube_reviews);
            let (tls, auth) = server::setup::build(sc, reviews)?;
            state.configz = sc.configz.clone().map(Arc::new);
            state.system_logs = sc.system_logs.clone();
            state.debugging_handlers = sc.debugging_handlers;
            let listener = server::bind(sc.addr).await?;
            secure_addr = listener.local_addr().ok();
            tracker.spawn(server::serve_secure(
                listener,
                tls,
                Arc::new(auth),
                state.clone(),
                cancel.child_token(),
            ));
        }
        let mut bound = [None, None];
        for (i, (addr, endpoints)) in [
            (cfg.read_only_addr, Endpoints::ReadOnly),
            (cfg.healthz_addr, Endpoints::Healthz),
        ]
        .into_iter()
        .enumerate()
        {
            if let Some(addr) = addr {
                let listener = server::bind(addr).await?;
                bound[i] = listener.local_addr().ok();
                tracker.spawn(server::serve(
                    listener,
                    endpoints,
                    state.clone(),
                    cancel.child_token(),
                ));
            }
        }
        info!(node = %cfg.node_name, "kubelet started");
        Ok(Self {
            pods,
            prober,
            status,
            workers,
            health,
            read_only_addr: bound[0],
            healthz_addr: bound[1],
            secure_addr,
            source_tx,
            cancel,
            tracker,
        })
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
