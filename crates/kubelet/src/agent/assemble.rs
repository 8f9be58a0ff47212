//! The layer assemblies `Agent::start` is composed of, called in this file's order: the
//! foundation (data dirs, supervisor, metrics, events), the cluster view (admission's Node,
//! pod objects, runtime classes), pod state (cache, status, volumes, PLEG, prober), the
//! container manager (cgroups), pod workers (images, syncer, allocation), pod sources, the
//! sync loop (with the container and CPU managers' loops), housekeeping (GC, eviction, node
//! shutdown), the API side and the servers. Each receives the config and the layers built
//! before it, spawns its tasks on the one supervisor, and returns the handles it built.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{
    AgentConfig, AgentDeps, AgentError, EvictionInputs, api, certificate_files, data_dirs, gc,
    non_terminal_pods, start_eviction, start_serving_certificates, with_opt,
};
use crate::admission::Admission;
use crate::admission::predicate::NodePredicates;
use crate::clock::Clock;
use crate::cm::ContainerManager;
use crate::cm::cpumanager::{CpuManager, CpuManagerConfig, CpuManagerPolicy, ReconcileInputs};
use crate::config_merge::PodConfigMerger;
use crate::container::cache::PodCache;
use crate::events::EventRecorder;
use crate::events_ring::EventRing;
use crate::eviction::{EvictionAdmit, EvictionWiring};
use crate::health::HealthCheck;
use crate::host::HostInfo;
use crate::images::ImageManager;
use crate::images::gc::ImageGc;
use crate::kuberuntime::container_config::RuntimeOptions;
use crate::kuberuntime::gc::{ContainerGc, SourcesReadyFn};
use crate::kuberuntime::sandbox_config::SandboxContext;
use crate::kuberuntime::sync::{Syncer, SyncerConfig};
use crate::metrics::{InstrumentedImages, InstrumentedRuntime, InstrumentedSyncer, KubeletMetrics};
use crate::nodestatus::register::initial_node;
use crate::nodestatus::setters::{NodePressure, StatusInputs};
use crate::objects::PodObjects;
use crate::objects::api::{ApiObjects, ApiObjectsSettings};
use crate::pleg::{GenericPleg, LatestListing, PlegHealth, PodLifecycleEvent, RelistTrigger};
use crate::pod_workers::{PodWorkers, WorkerTimings};
use crate::prober::{ProbeManager, ProbeUpdate};
use crate::runtimeclass::RuntimeClassManager;
use crate::server::{self, ServerState};
use crate::sources::file::FileSource;
use crate::sources::http::HttpSource;
use crate::sources::unknown_fields::UnknownFields;
use crate::status::manager::StatusManager;
use crate::supervisor::Supervisor;
use crate::sync_loop::{SourcesApplied, SourcesReady, SyncLoop, SyncLoopHealth};
use crate::types::{PodSource, PodUpdate, PodsSnapshot};
use crate::volumes::{SystemMounter, VolumeConfig, VolumeManager};

/// The foundation every other layer uses.
pub(super) struct Core {
    pub(super) cpu_manager: CpuManager,
    pub(super) tracker: TaskTracker,
    /// Every singleton runs under it: a panic is fatal, an early exit unhealthy.
    pub(super) sup: Supervisor,
    pub(super) metrics: KubeletMetrics,
    /// The caller's deps with every CRI call going through the instrumenting decorators.
    pub(super) deps: AgentDeps,
    /// Where pod events go (the API server or the caller's recorder, teed into the ring).
    pub(super) events: Arc<dyn EventRecorder>,
    /// The operator's ring of events (`rkubelet get events`).
    pub(super) event_ring: EventRing,
}

/// Data dirs, the CPU manager, the supervisor, metrics, the event pipeline and the client
/// certificate manager.
pub(super) fn core(
    cfg: &AgentConfig,
    deps: AgentDeps,
    cancel: &CancellationToken,
) -> Result<Core, AgentError> {
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
        Some(client) => api::start_events(client, &cfg.node_name, &cfg.api, &sup, cancel),
        None => deps.events.clone(),
    };
    // Every event is also kept in the operator's ring (`rkubelet get events`).
    let event_ring = EventRing::new(crate::events_ring::DEFAULT_CAPACITY, Clock::new());
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
    Ok(Core {
        cpu_manager,
        tracker,
        sup,
        metrics,
        deps,
        events,
        event_ring,
    })
}

/// What the node and the cluster say pods run against.
pub(super) struct ClusterView {
    /// The host as read at start-up.
    pub(super) host: HostInfo,
    /// The same, shared with the operator's views.
    pub(super) machine: Arc<HostInfo>,
    /// Admission's view of the Node: computed locally now, replaced by the API server's Node
    /// once registered (through this sender).
    pub(super) admission_node_tx: watch::Sender<Arc<Node>>,
    pub(super) admission_node: watch::Receiver<Arc<Node>>,
    /// ConfigMaps, Secrets, tokens and service links for pods (API-server mode only).
    pub(super) objects: Option<Arc<dyn PodObjects>>,
    /// RuntimeClasses, watched as upstream's informer (API-server mode only).
    pub(super) runtime_classes: RuntimeClassManager,
}

/// The host, admission's Node, and (API-server mode) the pod objects and runtime classes.
pub(super) fn cluster_view(
    cfg: &AgentConfig,
    core: &Core,
    cancel: &CancellationToken,
) -> ClusterView {
    let Core { sup, deps, .. } = core;
    // Admission's view of the Node: computed locally now, replaced by the API server's
    // Node once registered.
    let host = HostInfo::read(&cfg.root_dir);
    let machine = Arc::new(host.clone());
    let local_node = initial_node(
        &cfg.node_status,
        &host,
        &StatusInputs::default(),
        &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
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
    ClusterView {
        host,
        machine,
        admission_node_tx,
        admission_node,
        objects,
        runtime_classes,
    }
}

/// What the kubelet knows of its pods: cache, status, volumes, the PLEG and the prober.
pub(super) struct PodState {
    pub(super) cache: PodCache,
    pub(super) status: StatusManager,
    /// The node's memory capacity in bytes (0 when it does not fit).
    pub(super) memory_bytes: i64,
    pub(super) volumes: VolumeManager,
    /// Updates the node status at once: on shutdown, and when the runtime answers again.
    pub(super) node_sync: Arc<Notify>,
    pub(super) pleg_health: PlegHealth,
    pub(super) relist_trigger: RelistTrigger,
    pub(super) latest_listing: LatestListing,
    pub(super) prober: ProbeManager,
}

/// The event streams of [`PodState`] the sync loop consumes.
pub(super) struct PodStreams {
    pub(super) pleg_rx: mpsc::Receiver<PodLifecycleEvent>,
    pub(super) probe_updates: mpsc::UnboundedReceiver<ProbeUpdate>,
}

/// The pod cache, status manager, volume manager, PLEG (started) and prober.
pub(super) fn pod_state(
    cfg: &AgentConfig,
    core: &Core,
    view: &ClusterView,
    cancel: &CancellationToken,
) -> (PodState, PodStreams) {
    let Core {
        sup,
        metrics,
        deps,
        events,
        ..
    } = core;
    let cache = PodCache::new();
    let status = StatusManager::new();
    let memory_bytes = i64::try_from(view.host.memory_capacity).unwrap_or(0);
    let volumes = VolumeManager::new(
        VolumeConfig {
            root_dir: cfg.root_dir.clone(),
            node_memory_bytes: memory_bytes,
            node_hosts_file: PathBuf::from("/etc/hosts"),
        },
        Arc::new(SystemMounter),
    );
    let volumes = with_opt(volumes, view.objects.clone(), VolumeManager::with_objects);

    // PLEG: the only writer of the pod cache.
    let (pleg_tx, pleg_rx) = mpsc::channel(1000);
    let pleg = GenericPleg::new(
        deps.runtime.clone(),
        cache.clone(),
        cfg.relist_period,
        pleg_tx,
    );
    // Updates the node status at once: on shutdown, and when the runtime answers again.
    let node_sync = Arc::new(Notify::new());
    let pleg = pleg
        .with_relist_threshold(cfg.relist_threshold)
        .with_runtime_back(node_sync.clone())
        .with_metrics(metrics.clone());
    let pleg_health = pleg.health();
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
    (
        PodState {
            cache,
            status,
            memory_bytes,
            volumes,
            node_sync,
            pleg_health,
            relist_trigger,
            latest_listing,
            prober,
        },
        PodStreams {
            pleg_rx,
            probe_updates,
        },
    )
}

/// The container manager and the cgroup facts the runtime options need.
pub(super) struct Cgroups {
    pub(super) cgroup_v2: bool,
    pub(super) hugepage_sizes: Vec<u64>,
    /// The memory limit node allocatable puts on the pods cgroup (eviction's
    /// `allocatableMemory.available`).
    pub(super) pods_memory_limit: Option<u64>,
    /// Started (kubepods, QoS cgroups) with `cgroupsPerQOS`; its loop runs with the sync loop.
    pub(super) cm: Option<ContainerManager>,
}

/// Container manager: kubepods, QoS cgroups, node allocatable (before any pod syncs).
pub(super) async fn cgroups(cfg: &AgentConfig, host: &HostInfo) -> Result<Cgroups, AgentError> {
    let cgroup_fs = cfg
        .cgroups
        .fs
        .clone()
        .unwrap_or_else(|| crate::cm::cgroups::detect(&cfg.cgroups.mount_root));
    // `cgroupDriver: systemd`: the slices are made through systemd (unreachable: no start).
    let cgroup_fs =
        if cfg.cgroups.per_qos && cfg.cgroups.driver == crate::cm::cgroups::CgroupDriver::Systemd {
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
            capacity: crate::cm::node_capacity(host, crate::cm::read_pid_max()),
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
        let cm = ContainerManager::new(cm_cfg, cgroup_fs.clone());
        // Blocking (cgroupfs writes, systemd jobs): off the async workers.
        let starting = cm.clone();
        tokio::task::spawn_blocking(move || starting.start())
            .await
            .map_err(|e| AgentError::Task(format!("container manager start: {e}")))??;
        Some(cm)
    } else {
        None
    };
    Ok(Cgroups {
        cgroup_v2,
        hugepage_sizes,
        pods_memory_limit,
        cm,
    })
}

/// The pod workers and the allocation manager behind their syncer.
pub(super) struct Workers {
    /// In-place pod resize: allocations checkpointed in the root dir, bounded by the Node.
    pub(super) allocation: crate::allocation::AllocationManager,
    pub(super) workers: PodWorkers,
}

/// The image manager, the syncer (runtime options, sandbox context, every optional manager)
/// and the pod workers running it.
pub(super) fn workers(
    cfg: &AgentConfig,
    core: &Core,
    view: &ClusterView,
    state: &PodState,
    cgroups: &Cgroups,
    cancel: &CancellationToken,
) -> Result<Workers, AgentError> {
    let Core {
        cpu_manager,
        metrics,
        deps,
        events,
        ..
    } = core;
    let cgroup_v2 = cgroups.cgroup_v2;
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
        state.status.clone(),
        events.clone(),
        SyncerConfig {
            root_dir: cfg.root_dir.clone(),
            pod_logs_dir: cfg.pod_logs_dir.clone(),
            container_log_symlink_dir: cfg.container_log_symlink_dir.clone(),
            node_name: cfg.node_name.clone(),
            host_ips: cfg.host_ips.clone(),
            runtime_name: cfg.runtime_name.clone(),
            runtime_options: RuntimeOptions {
                memory_capacity: state.memory_bytes,
                cgroup_v2,
                cpu_cfs_quota: cfg.cgroups.cm.pod_options.enforce_cpu_limits,
                cpu_cfs_quota_period_us: i64::try_from(cfg.cgroups.cm.pod_options.cpu_period)
                    .unwrap_or(100_000),
                single_process_oom_kill: cfg.cgroups.single_process_oom_kill.unwrap_or(!cgroup_v2),
                seccomp_profile_root: cfg.root_dir.join("seccomp"),
                seccomp_default: cfg.seccomp_default,
                hugepage_sizes: cgroups.hugepage_sizes.clone(),
                swap_behavior: cfg.cgroups.swap_behavior.clone(),
                swap_controller_available: crate::cm::swap_controller_available(
                    &cfg.cgroups.mount_root,
                    cgroup_v2,
                ),
                swap_capacity: i64::try_from(view.host.swap_capacity).unwrap_or(0),
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
        state.volumes.clone(),
    )
    .with_relist_trigger(state.relist_trigger.clone())
    .with_prober(state.prober.clone())
    .with_cpu_manager(cpu_manager.clone())
    .with_runtime_classes(view.runtime_classes.clone())
    .with_metrics(metrics.clone());
    let syncer = with_opt(syncer, cfg.crash_loop_max, |s, max| {
        s.with_crash_loop_max(max)
    });
    // In-place pod resize: allocations checkpointed in the root dir, bounded by the Node.
    let allocation = crate::allocation::AllocationManager::new(&cfg.root_dir)?
        .with_node(view.admission_node.clone())
        .with_static_cpu_manager(cfg.cpu_manager.policy == CpuManagerPolicy::Static);
    let syncer = syncer.with_allocation(allocation.clone());
    let syncer = with_opt(syncer, cgroups.cm.clone(), |s, cm| s.with_cgroups(cm));
    let syncer = Arc::new(with_opt(syncer, view.objects.clone(), |s, o| {
        s.with_objects(o)
    }));
    let syncer = Arc::new(InstrumentedSyncer::new(
        syncer,
        metrics.clone(),
        state.status.clone(),
    ));
    let workers = PodWorkers::new(
        syncer,
        state.cache.clone(),
        WorkerTimings {
            resync_interval: cfg.sync_frequency,
            backoff_period: Duration::from_secs(10),
        },
        cancel.child_token(),
    );
    // Per-pod tasks restart after a panic; the metric counts them.
    workers.set_metrics(metrics.clone());
    workers.set_events(events.clone());
    state.prober.set_metrics(metrics.clone());
    Ok(Workers {
        allocation,
        workers,
    })
}

/// The merged pod sources the sync loop reads.
pub(super) struct MergedSources {
    pub(super) merged_rx: mpsc::Receiver<PodUpdate>,
    /// Whether every expected source has reported.
    pub(super) sources_ready: SourcesReady,
}

/// Sources → merger: the file and HTTP sources and the config merger (started). Returns the
/// sources' input (also the API source's and the tests') and the merged stream.
pub(super) fn sources(
    cfg: &AgentConfig,
    core: &Core,
    cancel: &CancellationToken,
) -> Result<(mpsc::Sender<PodUpdate>, MergedSources), AgentError> {
    let Core { sup, deps, .. } = core;
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
    Ok((
        source_tx,
        MergedSources {
            merged_rx,
            sources_ready,
        },
    ))
}

/// What the sync loop layer hands on: the pod manager's views and the shared node states.
pub(super) struct Loop {
    /// The desired pods.
    pub(super) pods: watch::Receiver<PodsSnapshot>,
    pub(super) mirrors:
        watch::Receiver<Arc<std::collections::HashMap<String, k8s_openapi::api::core::v1::Pod>>>,
    /// Ready once the sync loop has every pod of every source.
    pub(super) applied: SourcesApplied,
    /// The same readiness, for the garbage collectors.
    pub(super) gc_sources_ready: SourcesReadyFn,
    /// The eviction manager's pressure verdict admission and node status read.
    pub(super) pressure: watch::Receiver<NodePressure>,
    /// Node shutdown: the shutting-down flag admission and node status read.
    pub(super) shutdown_state: crate::nodeshutdown::ShutdownState,
    /// Where the API source records pods' unknown fields (admission reads it).
    pub(super) unknown_fields: UnknownFields,
    pub(super) loop_health: SyncLoopHealth,
}

/// The sync loop with its admission chain (started), then the container manager's and the
/// CPU manager's loops. Returns the loop's views and the pressure verdict's sender.
#[allow(clippy::too_many_arguments)]
pub(super) fn sync_loop(
    cfg: &AgentConfig,
    core: &Core,
    view: &ClusterView,
    state: &PodState,
    streams: PodStreams,
    cgroups: &Cgroups,
    workers: &Workers,
    merged: MergedSources,
    cancel: &CancellationToken,
) -> (Loop, watch::Sender<NodePressure>) {
    let Core {
        cpu_manager,
        sup,
        metrics,
        deps,
        events,
        ..
    } = core;
    let Workers {
        allocation,
        workers,
    } = workers;
    let PodStreams {
        pleg_rx,
        probe_updates,
    } = streams;
    let MergedSources {
        merged_rx,
        sources_ready,
    } = merged;
    let status = &state.status;
    // Eviction: the pressure verdict admission and node status read.
    let (pressure_tx, pressure) = watch::channel(NodePressure::default());
    // Node shutdown: the shutting-down flag admission and node status read.
    let shutdown_state = crate::nodeshutdown::ShutdownState::default();

    // Sync loop.
    let unknown_fields = UnknownFields::default();
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
            Box::new(NodePredicates::new(view.admission_node.clone())),
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
    .with_latest_listing(state.latest_listing.clone())
    .with_volumes(state.volumes.clone())
    .with_metrics(metrics.clone());
    let sync_loop = with_opt(sync_loop, view.objects.clone(), |l, o| l.with_objects(o));
    let sync_loop = with_opt(sync_loop, cgroups.cm.clone(), |l, cm| {
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
    if let Some(cm) = cgroups.cm.clone() {
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
            cache: state.cache.clone(),
        };
        sup.spawn_critical(
            "cpu manager",
            cpu_manager
                .clone()
                .run(deps.runtime.clone(), inputs, cancel.child_token()),
        );
    }
    (
        Loop {
            pods,
            mirrors,
            applied,
            gc_sources_ready,
            pressure,
            shutdown_state,
            unknown_fields,
            loop_health,
        },
        pressure_tx,
    )
}

/// What housekeeping hands on.
pub(super) struct Housekeeping {
    /// Image GC (`delete_unused_images` for the eviction manager), when enabled.
    pub(super) image_gc: Option<ImageGc>,
    /// Container GC (`delete_all_unused_containers` for the eviction manager), when enabled.
    pub(super) container_gc: Option<ContainerGc>,
    /// The stats snapshots (`None` when stats are disabled).
    pub(super) stats: Option<crate::stats::StatsHandle>,
}

/// Garbage collection and log rotation, the stats provider and eviction manager, and the
/// node shutdown manager (all started).
#[allow(clippy::too_many_arguments)]
pub(super) fn housekeeping(
    cfg: &AgentConfig,
    core: &Core,
    state: &PodState,
    cgroups: &Cgroups,
    workers: &Workers,
    looped: &Loop,
    pressure_tx: watch::Sender<NodePressure>,
    cancel: &CancellationToken,
) -> Result<Housekeeping, AgentError> {
    let Core {
        sup,
        metrics,
        deps,
        events,
        ..
    } = core;
    let workers = &workers.workers;
    let pods = &looped.pods;
    let pods_memory_limit = cgroups.pods_memory_limit;
    // Garbage collection and log rotation.
    let (image_gc, container_gc) = gc::start(
        cfg,
        deps,
        events,
        workers,
        looped.gc_sources_ready.clone(),
        sup,
        cancel,
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
        deps,
        gc::reclaimers(image_gc.as_ref(), container_gc.as_ref()),
        EvictionInputs {
            pods: pods.clone(),
            status: state.status.clone(),
            workers: workers.clone(),
            events: events.clone(),
            pressure: pressure_tx,
            metrics: metrics.clone(),
            latest_listing: state.latest_listing.clone(),
        },
        sup,
        cancel,
    );

    if let Some(settings) = cfg.node_shutdown.clone() {
        let manager = crate::nodeshutdown::NodeShutdownManager::new(
            settings,
            crate::nodeshutdown::NodeShutdownInputs {
                state: looped.shutdown_state.clone(),
                active_pods: crate::nodeshutdown::manager::active_pods(
                    pods.clone(),
                    workers.clone(),
                ),
                killer: Arc::new(crate::nodeshutdown::WorkerKiller {
                    status: state.status.clone(),
                    workers: workers.clone(),
                }),
                events: events.clone(),
                metrics: Some(metrics.clone()),
                node_sync: state.node_sync.clone(),
                state_dir: cfg.root_dir.clone(),
            },
        );
        sup.spawn_critical("node shutdown manager", manager.run(cancel.child_token()));
    }
    Ok(Housekeeping {
        image_gc,
        container_gc,
        stats,
    })
}

/// The API side (API-server mode): registration, lease, node status, the API pod source,
/// mirror pods and pod status to the API server (see `api`).
#[allow(clippy::too_many_arguments)]
pub(super) fn api_side(
    cfg: &AgentConfig,
    core: &Core,
    client: kube::Client,
    view: ClusterView,
    state: &PodState,
    workers: &Workers,
    looped: &Loop,
    source_tx: &mpsc::Sender<PodUpdate>,
    cancel: &CancellationToken,
) {
    let Core {
        sup, deps, events, ..
    } = core;
    let node_pleg_health = state.pleg_health.clone();
    api::start(
        &cfg.api,
        api::ApiInputs {
            client,
            runtime: deps.runtime.clone(),
            images: deps.images.clone(),
            events: events.clone(),
            node_settings: cfg.node_status.clone(),
            host: view.host,
            node_health: vec![(
                "PLEG".to_owned(),
                Arc::new(move || node_pleg_health.healthy()) as HealthCheck,
            )],
            source_tx: source_tx.clone(),
            unknown_fields: looped.unknown_fields.clone(),
            admission_node: view.admission_node_tx,
            pods: looped.pods.clone(),
            mirrors: looped.mirrors.clone(),
            sources_applied: looped.applied.clone(),
            status: state.status.clone(),
            workers: workers.workers.clone(),
            pressure: looped.pressure.clone(),
            // Always wired: the trigger also serves the PLEG's "runtime back", and the
            // reason stays `None` without a shutdown manager (nothing shuts down).
            shutdown: Some({
                let state_flag = looped.shutdown_state.clone();
                let reason: crate::nodestatus::manager::NotReadyFn =
                    Arc::new(move || state_flag.not_ready_reason());
                (reason, state.node_sync.clone())
            }),
        },
        sup,
        cancel,
    );
}

/// What the servers hand on.
pub(super) struct Servers {
    pub(super) health: Vec<(String, HealthCheck)>,
    /// Bound addresses of the read-only and healthz listeners (for tests using port 0).
    pub(super) read_only_addr: Option<std::net::SocketAddr>,
    pub(super) healthz_addr: Option<std::net::SocketAddr>,
    /// Bound address of the HTTPS port.
    pub(super) secure_addr: Option<std::net::SocketAddr>,
}

/// HTTP: the health checks, the server state, the HTTPS port (with the serving certificate
/// manager), the read-only and healthz ports and the operator's local socket (all started).
#[allow(clippy::too_many_arguments)]
pub(super) async fn servers(
    cfg: &AgentConfig,
    core: &Core,
    machine: Arc<HostInfo>,
    pod: &PodState,
    workers: &Workers,
    looped: &Loop,
    stats: Option<crate::stats::StatsHandle>,
    cancel: &CancellationToken,
) -> Result<Servers, AgentError> {
    let Core {
        sup,
        metrics,
        deps,
        events,
        event_ring,
        ..
    } = core;
    let loop_health = looped.loop_health.clone();
    let pleg_health = pod.pleg_health.clone();
    let view_pleg_health = pod.pleg_health.clone();
    let view_host = machine.clone();
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
    let pods = &looped.pods;
    let status = &pod.status;
    let mut state = ServerState::basic(pods.clone(), status.clone(), health.clone());
    state.node_name = cfg.node_name.clone();
    state.root_dir = cfg.root_dir.clone();
    state.runtime = Some(deps.runtime.clone());
    state.pod_cache = Some(pod.cache.clone());
    state.metrics = Some(metrics.clone());
    state.probe_metrics = Some(pod.prober.metrics().clone());
    state.stats = stats;
    state.pod_cgroup_root = cfg
        .cgroups
        .per_qos
        .then(|| cfg.cgroups.cm.cgroup_root.clone());
    state.pod_cgroup_driver = cfg.cgroups.driver;
    state.machine = Some(machine);
    state.cancel = cancel.child_token();
    state.operator = Some(server::operator::OperatorState {
        events: event_ring.clone(),
        workers: workers.workers.clone(),
        node: Arc::new(server::operator::NodeView {
            settings: cfg.node_status.clone(),
            host: view_host,
            pressure: looped.pressure.clone(),
            pleg: Arc::new(move || view_pleg_health.healthy()),
            runtime: deps.runtime.clone(),
            certificates: certificate_files(cfg),
        }),
    });
    let mut secure_addr = None;
    if let Some(sc) = &cfg.server {
        let reviews = deps.api.clone().map(server::setup::kube_reviews);
        let (tls, auth) = server::setup::build(sc, reviews)?;
        if sc.tls.server_tls_bootstrap {
            start_serving_certificates(cfg, sc, deps, tls.clone(), events, metrics, sup, cancel)?;
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
    Ok(Servers {
        health,
        read_only_addr: bound[0],
        healthz_addr: bound[1],
        secure_addr,
    })
}
