//! The `rkubelet` binary: parses upstream-compatible flags, loads the KubeletConfiguration,
//! sets up logging, connects to the CRI runtime (and, with `--kubeconfig`, builds the API
//! server client) and runs the kubelet until SIGTERM/SIGINT.
//! Stopping the kubelet never stops pods; the next start adopts them.

mod cli;
mod ctl;
mod flagvalues;
mod lockfile;
mod logging;
mod malloc;
mod sdnotify;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use kubelet::agent::{
    Agent, AgentConfig, AgentDeps, ApiModeConfig, CgroupSettings, CmConfig, GcSettings,
};
use kubelet::apiclient::ClientSettings;
use kubelet::apiclient::rate_limit::RateLimit;
use kubelet::cm::cpumanager::cpuset::CpuSet;
use kubelet::cm::cpumanager::{CpuManagerConfig, CpuManagerPolicy};
use kubelet::cm::resources::PodCgroupOptions;
use kubelet::config::KubeletConfiguration;
use kubelet::events::LoggingRecorder;
use kubelet::images::gc::{IMAGE_GC_PERIOD, ImageGcConfig, ImageGcPolicy};
use kubelet::logs::LogManagerConfig;
use kubelet::nodestatus::addresses;
use kubelet::nodestatus::{NodeStatusSettings, Reservations};
use kubelet::sync_loop::LoopTimings;
use rkubelet_cri::RemoteRuntime;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// The blocking pool's ceiling. Its work is short file and cgroup I/O (stat, rename, mkdir,
/// cgroupfs writes; none waits on another blocking task), so a queue in front of a few threads
/// costs microseconds. Without a ceiling the pool grows to the burst's width (110 log monitors
/// ticking together) and never shrinks: an idle thread is woken in turn before its keep-alive
/// runs out, and every thread keeps its stack and malloc arena.
const BLOCKING_THREADS: usize = 16;

fn main() -> ExitCode {
    malloc::limit_arenas();
    // `rkubelet get|describe|logs|doctor|completion|man …` are operator commands; anything
    // else is the kubelet with upstream's flags.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if ctl::is_ctl_command(args.get(1)) {
        return ctl::main(args);
    }
    let flags = match cli::Flags::try_parse_from(&args) {
        Ok(flags) => flags,
        Err(e) => match flagvalues::flag_error(&e) {
            None => {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // As upstream: a klog error line, exit 1.
            Some(message) => {
                logging::init(logging::LogFormat::Text, 0);
                tracing::error!(err = %message, "command failed");
                return ExitCode::from(1);
            }
        },
    };
    if let Some(text) = flagvalues::version_output(flags.version.as_ref()) {
        println!("{text}");
        return ExitCode::SUCCESS;
    }
    let (config, node) = match cli::resolve(&flags) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rkubelet: {e}");
            return ExitCode::from(1);
        }
    };
    logging::init(node.log_format, u32::from(node.verbosity));
    for w in &node.warnings {
        warn!("{w}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rkubelet: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(config, node)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("rkubelet: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Host checks and process settings upstream makes before it starts: swap, kernel tunables,
/// cgroup v1 (errors stop the kubelet), OOM score and open-file limit (failures only warn).
fn setup_node(config: &KubeletConfiguration) -> Result<()> {
    let host = kubelet::cm::node_setup::HostPaths::default();
    for w in kubelet::cm::node_setup::check_node(config, &host)? {
        warn!("{w}");
    }
    if let Some(w) =
        kubelet::cm::node_setup::apply_oom_score_adj(&host.proc_root, config.oom_score_adj)
    {
        warn!("{w}");
    }
    if let Some(w) = kubelet::cm::node_setup::set_max_open_files(config.max_open_files) {
        warn!("{w}");
    }
    Ok(())
}

/// The CRI runtime and image services: `imageServiceEndpoint`, when it names another
/// endpoint than `containerRuntimeEndpoint`, is dialled on its own (upstream
/// `NewRemoteImageService`), first, so a wrong image endpoint is named as such.
async fn connect_cri(
    config: &KubeletConfiguration,
) -> Result<(Arc<RemoteRuntime>, Arc<RemoteRuntime>)> {
    let endpoint = config.container_runtime_endpoint.as_str();
    let image_endpoint = config.effective_image_service_endpoint();
    let timeout = config.runtime_request_timeout.as_std();
    let images = if image_endpoint == endpoint {
        None
    } else {
        let images = RemoteRuntime::connect(image_endpoint, timeout)
            .await
            .with_context(|| {
                format!("imageServiceEndpoint: connecting to the image service at {image_endpoint}")
            })?;
        Some(Arc::new(images))
    };
    let remote = RemoteRuntime::connect(endpoint, timeout)
        .await
        .with_context(|| {
            format!("containerRuntimeEndpoint: connecting to the container runtime at {endpoint}")
        })?;
    let remote = Arc::new(remote);
    let images = images.unwrap_or_else(|| remote.clone());
    Ok((remote, images))
}

async fn run(config: KubeletConfiguration, node: cli::NodeOptions) -> Result<()> {
    // Upstream takes `--lock-file` first, waiting while another kubelet holds it.
    let mut lock = match &node.lock_file {
        Some(path) => {
            info!(path = %path.display(), "Acquiring file lock");
            Some(lockfile::Lock::acquire(path, node.exit_on_lock_contention).await?)
        }
        None => None,
    };
    kubelet::security::sysctl::validate_patterns(&config.allowed_unsafe_sysctls)
        .context("allowedUnsafeSysctls")?;
    setup_node(&config)?;
    let endpoint = config.container_runtime_endpoint.clone();
    info!(%endpoint, node = %node.node_name, root_dir = %node.root_dir.display(), "starting rkubelet");
    let (remote, images) = connect_cri(&config).await?;
    // Upstream asks the runtime for its cgroup driver before building the container manager.
    let mut config = config;
    if config
        .gates()
        .enabled(kubelet::config::Feature::KubeletCgroupDriverFromCri)
    {
        config.cgroup_driver =
            kubelet::agent::cgroup_driver::from_cri(remote.as_ref(), &config.cgroup_driver).await?;
    }

    let (api, client_certificates) = match api_client(&config, &node).await? {
        Some(built) => (Some(built.client), built.certificates),
        None => (None, None),
    };
    let mut agent_cfg = agent_config(&config, &node)?;
    agent_cfg.client_certificates = client_certificates;
    let cancel = CancellationToken::new();
    let agent = Agent::start(
        agent_cfg,
        AgentDeps {
            runtime: remote,
            images,
            events: Arc::new(LoggingRecorder),
            api,
        },
        cancel.clone(),
    )
    .await
    .context("starting the kubelet")?;
    // Upstream tells systemd it is ready once its servers run (for `Type=notify` units).
    match sdnotify::notify("READY=1") {
        Ok(true) => info!("notified systemd: READY=1"),
        Ok(false) => {}
        Err(e) => warn!(error = %e, "cannot notify systemd of readiness"),
    }
    // `SystemdWatchdog`: WATCHDOG=1 while the /healthz checks pass (unit `WatchdogSec=`).
    if config
        .gates()
        .enabled(kubelet::config::Feature::SystemdWatchdog)
    {
        sdnotify::start_watchdog(agent.health.clone(), cancel.clone())?;
    }

    let trimmer = tokio::spawn(malloc::run(cancel.clone()));

    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let fatal = tokio::select! {
        _ = term.recv() => { info!("received SIGTERM, shutting down (pods keep running)"); None }
        _ = int.recv() => { info!("received SIGINT, shutting down (pods keep running)"); None }
        panic = agent.fatal() => Some(panic),
        why = async { match lock.as_mut() { Some(l) => l.contended().await, None => std::future::pending().await } } => {
            info!(%why, "lock file contention, shutting down (pods keep running)");
            None
        }
    };
    let stopped = match fatal {
        None => {
            agent.shutdown().await;
            Ok(())
        }
        Some(panic) => {
            // As the Go kubelet crashes: exit non-zero; systemd restarts us and the next
            // start adopts the pods. Give the other tasks a moment to stop cleanly.
            if tokio::time::timeout(FATAL_SHUTDOWN_GRACE, agent.shutdown())
                .await
                .is_err()
            {
                warn!(
                    "tasks still running {FATAL_SHUTDOWN_GRACE:?} after a fatal panic; exiting anyway"
                );
            }
            Err(anyhow::Error::new(panic))
        }
    };
    cancel.cancel();
    let _ = trimmer.await;
    stopped
}

/// The API client of `--kubeconfig` (TLS bootstrap with `--bootstrap-kubeconfig`, rotation with
/// `rotateCertificates`: `kubelet::certificate::bootstrap`) with the client certificate manager
/// the agent runs; `None` standalone.
async fn api_client(
    config: &KubeletConfiguration,
    node: &cli::NodeOptions,
) -> Result<Option<kubelet::certificate::bootstrap::ApiClient>> {
    use kubelet::certificate::bootstrap::{ClientOptions, api_client};
    let Some(path) = &node.kubeconfig else {
        if node.bootstrap_kubeconfig.is_some() {
            anyhow::bail!(
                "--bootstrap-kubeconfig needs --kubeconfig: the path where the kubeconfig it produces is written"
            );
        }
        info!("no --kubeconfig: standalone mode, running static pods only");
        return Ok(None);
    };
    let settings = ClientSettings {
        rate_limit: Some(RateLimit::from_config(
            config.kube_api_qps,
            config.kube_api_burst,
        )),
        ..ClientSettings::default()
    };
    let built = api_client(&ClientOptions {
        kubeconfig: path.clone(),
        bootstrap_kubeconfig: node.bootstrap_kubeconfig.clone(),
        cert_dir: node.cert_dir.clone(),
        node_name: node.node_name.clone(),
        rotate: config.rotate_certificates,
        settings,
        timings: Default::default(),
    })
    .await
    .context("--kubeconfig")?;
    info!(kubeconfig = %path.display(), "API server mode");
    Ok(Some(built))
}

/// How long the remaining tasks get to stop after a singleton panicked.
const FATAL_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

fn socket(addr: &str, port: i32) -> Result<Option<SocketAddr>> {
    if port == 0 {
        return Ok(None);
    }
    let ip: IpAddr = addr
        .parse()
        .with_context(|| format!("{addr:?} is not an IP address"))?;
    let port = u16::try_from(port).with_context(|| format!("port {port} out of range"))?;
    Ok(Some(SocketAddr::new(ip, port)))
}

/// Test-only (the fault matrix, issue 17): a shorter PLEG relist threshold than upstream's
/// 3 min, so a stuck runtime makes the PLEG unhealthy within a test's time. Not a user flag.
const TEST_PLEG_RELIST_THRESHOLD_ENV: &str = "RKUBELET_TEST_PLEG_RELIST_THRESHOLD";

/// The PLEG relist threshold: upstream's 3 min unless the test-only variable (a Go duration,
/// e.g. `10s`, greater than zero) says otherwise.
fn pleg_relist_threshold(value: Option<&str>) -> Result<Duration> {
    let Some(value) = value else {
        return Ok(kubelet::pleg::RELIST_THRESHOLD);
    };
    let d = kubelet::config::parse_go_duration(value).with_context(|| {
        format!("{TEST_PLEG_RELIST_THRESHOLD_ENV}={value:?}: expected a duration such as 10s")
    })?;
    if d.is_zero() || d.is_negative() {
        anyhow::bail!("{TEST_PLEG_RELIST_THRESHOLD_ENV}={value:?}: must be greater than 0");
    }
    let d = d.as_std();
    warn!(threshold = ?d, "{TEST_PLEG_RELIST_THRESHOLD_ENV} is set: the PLEG relist threshold is not upstream's 3m (test-only setting)");
    Ok(d)
}

fn agent_config(c: &KubeletConfiguration, node: &cli::NodeOptions) -> Result<AgentConfig> {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let reserved_cpus = CpuSet::parse(&c.reserved_system_cpus).context("reservedSystemCPUs")?;
    let resolv_conf =
        non_empty(&c.resolv_conf).and_then(|path| match std::fs::read_to_string(&path) {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(path, error = %e, "cannot read resolvConf; pods get no DNS from the host");
                None
            }
        });
    // `--node-ip` (`0.0.0.0`/`::` or none: chosen as upstream, never loopback).
    let given = addresses::parse_node_ip_argument(node.node_ip.as_deref().unwrap_or_default())?;
    let choose = |external| {
        let name = &node.node_name;
        addresses::choose_node_ips(&given, name, name, external, &addresses::SystemNetwork)
            .unwrap_or_else(|e| {
                warn!(error = %e, "the Node gets no InternalIP");
                Vec::new()
            })
    };
    let node_ips = choose(node.external_cloud_provider);
    // Pods' host IPs: ours, also while the cloud controller manager has set none.
    let host_ips: Vec<String> = if node_ips.is_empty() && node.external_cloud_provider {
        choose(false)
    } else {
        node_ips.clone()
    }
    .iter()
    .map(IpAddr::to_string)
    .collect();
    let provided_node_ip = (node.external_cloud_provider
        && given.first().is_some_and(|ip| !ip.is_unspecified()))
    .then(|| {
        given
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(",")
    });
    let update_frequency = c.node_status_update_frequency.as_std();
    let lease_secs = u64::try_from(c.node_lease_duration_seconds.max(1)).unwrap_or(40);
    let node_status = NodeStatusSettings {
        hostname: node.node_name.clone(),
        node_ips,
        node_labels: node.node_labels.clone(),
        register_with_taints: c.register_with_taints.clone(),
        register_node: c.register_node,
        provider_id: non_empty(&c.provider_id),
        external_cloud_provider: node.external_cloud_provider,
        provided_node_ip,
        kubelet_version: node.kubelet_version.clone(),
        report_kube_proxy_version: !c
            .gates()
            .enabled(kubelet::config::Feature::DisableNodeKubeProxyVersion),
        max_pods: i64::from(c.max_pods),
        pods_per_core: i64::from(c.pods_per_core),
        port: c.port,
        node_status_max_images: c.node_status_max_images,
        local_storage_capacity_isolation: c.local_storage_capacity_isolation,
        reservations: cpu_reservations(c, &reserved_cpus),
        update_frequency,
        report_frequency: c.node_status_report_frequency.as_std(),
        // Upstream bounds heartbeat calls by min(nodeStatusUpdateFrequency, lease duration).
        request_timeout: update_frequency.min(Duration::from_secs(lease_secs)),
        ..NodeStatusSettings::new(&node.node_name)
    };
    let api = ApiModeConfig {
        node_lease_duration_secs: c.node_lease_duration_seconds,
        event_qps: f64::from(c.event_record_qps),
        event_burst: u32::try_from(c.event_burst).unwrap_or(0),
        ..ApiModeConfig::default()
    };
    // Stats provider + eviction manager (stats refreshed as often as they are evaluated).
    let monitoring = c
        .eviction_monitoring_interval
        .map_or(Duration::from_secs(10), |d| d.as_std());
    let eviction = kubelet::eviction::EvictionWiring {
        stats: kubelet::eviction::StatsSource::Host(kubelet::stats::StatsSettings {
            cgroup_root: if c.cgroup_root.is_empty() {
                "/".to_owned()
            } else {
                c.cgroup_root.clone()
            },
            cgroups_per_qos: c.cgroups_per_qos,
            cgroup_driver: cgroup_driver(c),
            interval: monitoring.max(Duration::from_secs(1)),
            kubelet_cgroups: c.kubelet_cgroups.clone(),
            system_cgroups: c.system_cgroups.clone(),
            runtime_cgroups: node.runtime_cgroups.clone(),
            ..kubelet::stats::StatsSettings::new(
                &node.node_name,
                &node.root_dir,
                Path::new(&c.pod_logs_dir),
            )
        }),
        settings: kubelet::eviction::EvictionSettings::from_config(
            &c.effective_eviction_hard(),
            &c.eviction_soft,
            &c.eviction_soft_grace_period,
            &c.eviction_minimum_reclaim,
            c.eviction_pressure_transition_period,
            c.eviction_max_pod_grace_period,
            monitoring,
            c.local_storage_capacity_isolation,
        )
        .context("eviction settings")?,
        extra_reclaimers: Vec::new(),
    };
    let cpu_manager =
        cpu_manager_config(c, &node.root_dir, &node_status.reservations, reserved_cpus)?;
    Ok(AgentConfig {
        node_name: node.node_name.clone(),
        root_dir: node.root_dir.clone(),
        pod_logs_dir: PathBuf::from(&c.pod_logs_dir),
        container_log_symlink_dir: Some(PathBuf::from("/var/log/containers")),
        static_pod_path: non_empty(&c.static_pod_path).map(PathBuf::from),
        file_check_frequency: c.file_check_frequency.as_std(),
        static_pod_url: non_empty(&c.static_pod_url),
        static_pod_url_header: c.static_pod_url_header.clone(),
        http_check_frequency: c.http_check_frequency.as_std(),
        sync_frequency: c.sync_frequency.as_std(),
        crash_loop_max: kubelet::backoff::crash_loop_max(c),
        read_only_addr: socket(&c.address, c.read_only_port)?,
        healthz_addr: socket(&c.healthz_bind_address, c.healthz_port)?,
        cluster_dns: c.cluster_dns.clone(),
        cluster_domain: c.cluster_domain.clone(),
        host_resolv_conf: resolv_conf,
        host_ips,
        serialize_image_pulls: c.serialize_image_pulls,
        max_parallel_image_pulls: c
            .max_parallel_image_pulls
            .and_then(|n| u32::try_from(n).ok()),
        relist_period: Duration::from_secs(1),
        evented_pleg: c
            .gates()
            .enabled(kubelet::config::features::Feature::EventedPleg),
        relist_threshold: pleg_relist_threshold(
            std::env::var(TEST_PLEG_RELIST_THRESHOLD_ENV)
                .ok()
                .as_deref(),
        )?,
        loop_timings: LoopTimings {
            housekeeping: c.pod_housekeeping_period.as_std(),
            ..LoopTimings::default()
        },
        runtime_name: "containerd".to_owned(),
        allowed_unsafe_sysctls: c.allowed_unsafe_sysctls.clone(),
        seccomp_default: c.seccomp_default,
        node_status,
        api,
        cpu_manager,
        gc: gc_settings(c, node)?,
        eviction,
        cgroups: cgroup_settings(c),
        server: secure_config(c, node)?,
        credential_providers: credential_providers(node)?,
        client_certificates: None,
        node_shutdown: kubelet::nodeshutdown::NodeShutdownSettings::from_config(
            c.shutdown_grace_period.as_std(),
            c.shutdown_grace_period_critical_pods.as_std(),
            &c.shutdown_grace_period_by_pod_priority,
        ),
        // The operator's local socket (`rkubelet get/describe`).
        local_socket: Some(kubelet::server::local::socket_path(&node.root_dir)),
    })
}

/// The credential provider plugins of `--image-credential-provider-config`: a config that does
/// not load, or a missing bin dir or plugin binary, stops the kubelet (as upstream).
fn credential_providers(
    node: &cli::NodeOptions,
) -> Result<Option<Arc<kubelet::credentialprovider::plugin::CredentialProviders>>> {
    let Some(config) = &node.image_credential_provider_config else {
        return Ok(None);
    };
    let providers = kubelet::credentialprovider::plugin::CredentialProviders::load(
        config,
        &node.image_credential_provider_bin_dir,
    )
    .context("failed to register credential provider plugins")?;
    Ok(Some(Arc::new(providers)))
}

/// kube/system reservations; `reservedSystemCPUs` (`reserved`) replaces their CPU part with its
/// size, as upstream does (it is then what node allocatable and the CPU manager reserve).
fn cpu_reservations(c: &KubeletConfiguration, reserved: &CpuSet) -> Reservations {
    let mut r = Reservations {
        system_reserved: c.system_reserved.clone(),
        kube_reserved: c.kube_reserved.clone(),
        eviction_hard: c.effective_eviction_hard(),
    };
    if !reserved.is_empty() {
        r.kube_reserved.remove("cpu");
        r.system_reserved.insert(
            "cpu".to_owned(),
            kubelet::config::Quantity::from_i64(i64::try_from(reserved.len()).unwrap_or(0)),
        );
    }
    r
}

/// `cpuManagerPolicy`, its reconcile period and the CPU reservation it needs (`r`: the
/// reservations node status uses, from `cpu_reservations`; `reserved`: `reservedSystemCPUs`).
fn cpu_manager_config(
    c: &KubeletConfiguration,
    root_dir: &std::path::Path,
    r: &Reservations,
    reserved: CpuSet,
) -> Result<CpuManagerConfig> {
    let policy = CpuManagerPolicy::parse(&c.cpu_manager_policy).with_context(|| {
        format!(
            "cpuManagerPolicy: unknown policy {:?}",
            c.cpu_manager_policy
        )
    })?;
    let millis = |m: &std::collections::BTreeMap<String, kubelet::config::Quantity>| {
        m.get("cpu").map_or(0, |q| q.milli_value())
    };
    Ok(CpuManagerConfig {
        policy,
        reconcile_period: c.cpu_manager_reconcile_period.as_std(),
        reserved_system_cpus: reserved,
        reserved_cpu_millis: millis(&r.system_reserved) + millis(&r.kube_reserved),
        ..CpuManagerConfig::none(root_dir.to_path_buf())
    })
}

/// Container GC (flags), image GC, pull limits and log rotation (config file).
fn gc_settings(c: &KubeletConfiguration, node: &cli::NodeOptions) -> Result<GcSettings> {
    let container_logs = LogManagerConfig::from_config(
        c.container_log_max_size.value(),
        c.container_log_max_files,
        c.container_log_max_workers,
        c.container_log_monitor_interval.as_std(),
    )
    .context("container log rotation")?;
    Ok(GcSettings {
        container_gc: Some(node.container_gc),
        image_gc: Some(ImageGcConfig {
            policy: ImageGcPolicy {
                high_threshold_percent: c.image_gc_high_threshold_percent,
                low_threshold_percent: c.image_gc_low_threshold_percent,
                min_age: c.image_minimum_gc_age.as_std(),
                max_age: c.image_maximum_gc_age.as_std(),
            },
            pinned_images: vec![node.pod_infra_container_image.clone()],
        }),
        image_gc_period: IMAGE_GC_PERIOD,
        container_logs,
        registry_pull_qps: c.registry_pull_qps,
        registry_burst: c.registry_burst,
    })
}

/// `cgroupDriver` (validated: anything else was refused at load).
fn cgroup_driver(c: &KubeletConfiguration) -> kubelet::cm::cgroups::CgroupDriver {
    kubelet::cm::cgroups::CgroupDriver::parse(&c.cgroup_driver).unwrap_or_default()
}

/// The container manager's settings from the config (`cgroupsPerQOS`, `cgroupRoot`, node
/// allocatable enforcement, CFS quota, pod pids limit, OOM and swap behaviour).
fn cgroup_settings(c: &KubeletConfiguration) -> CgroupSettings {
    let nanos = |m: &std::collections::BTreeMap<String, kubelet::config::Quantity>| {
        m.iter().map(|(k, q)| (k.clone(), q.nanos())).collect()
    };
    let period_us = c.cpu_cfs_quota_period.as_std().as_micros();
    CgroupSettings {
        per_qos: c.cgroups_per_qos,
        cm: CmConfig {
            cgroup_root: if c.cgroup_root.is_empty() {
                "/".to_owned()
            } else {
                c.cgroup_root.clone()
            },
            pod_options: PodCgroupOptions {
                enforce_cpu_limits: c.cpu_cfs_quota,
                cpu_period: u64::try_from(period_us).unwrap_or(100_000),
                pod_pids_limit: c.pod_pids_limit,
            },
            enforce_node_allocatable: c
                .enforce_node_allocatable
                .iter()
                .filter(|e| e.as_str() != "none")
                .cloned()
                .collect(),
            system_reserved: nanos(&c.system_reserved),
            kube_reserved: nanos(&c.kube_reserved),
            system_reserved_cgroup: c.system_reserved_cgroup.clone(),
            kube_reserved_cgroup: c.kube_reserved_cgroup.clone(),
            disable_cpu_quota_with_exclusive_cpus: c
                .gates()
                .enabled(kubelet::config::Feature::DisableCpuQuotaWithExclusiveCpus),
            ..CmConfig::default()
        },
        single_process_oom_kill: c.single_process_oom_kill,
        swap_behavior: c.memory_swap.swap_behavior.clone(),
        driver: cgroup_driver(c),
        systemd_bus_address: None,
        ..CgroupSettings::default()
    }
}

/// The HTTPS port settings (`enableServer`): TLS, authentication, authorization, `/configz`.
fn secure_config(
    c: &KubeletConfiguration,
    node: &cli::NodeOptions,
) -> Result<Option<kubelet::server::setup::SecureConfig>> {
    use kubelet::server::setup::{AuthzMode, SecureConfig};
    if !c.enable_server {
        return Ok(None);
    }
    let Some(addr) = socket(&c.address, c.port).context("address/port")? else {
        return Ok(None);
    };
    let path = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
    let authz = match c.authorization.mode.as_str() {
        "AlwaysAllow" => AuthzMode::AlwaysAllow,
        "Webhook" => AuthzMode::Webhook {
            allowed_ttl: c.authorization.webhook.cache_authorized_ttl.as_std(),
            denied_ttl: c.authorization.webhook.cache_unauthorized_ttl.as_std(),
        },
        other => anyhow::bail!(
            "authorization.mode: {other:?} is not supported (expected AlwaysAllow or Webhook)"
        ),
    };
    let mut configz = serde_json::to_value(c).context("encoding /configz")?;
    if let Some(o) = configz.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
    }
    let node_ips = node
        .node_ip
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .filter_map(|ip| ip.trim().parse::<IpAddr>().ok())
        .filter(|ip| !ip.is_unspecified())
        .collect();
    Ok(Some(SecureConfig {
        addr,
        tls: kubelet::server::tls::TlsSettings {
            cert_file: path(&c.tls_cert_file),
            key_file: path(&c.tls_private_key_file),
            cert_dir: node.cert_dir.clone(),
            hostname: node.node_name.clone(),
            ips: node_ips,
            min_version: c.tls_min_version.clone(),
            cipher_suites: c.tls_cipher_suites.clone(),
            curve_preferences: c.tls_curve_preferences.clone(),
            client_ca_file: path(&c.authentication.x509.client_ca_file),
            server_tls_bootstrap: c.server_tls_bootstrap,
        },
        anonymous: c.authentication.anonymous.enabled,
        webhook_authn: c
            .authentication
            .webhook
            .enabled
            .then(|| c.authentication.webhook.cache_ttl.as_std()),
        authz,
        configz: Some(configz),
        system_logs: (c.enable_system_log_handler && c.enable_debugging_handlers)
            .then(|| PathBuf::from("/var/log")),
        debugging_handlers: c.enable_debugging_handlers,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet::config::{Duration as GoDuration, load_config};

    fn node(root: &Path) -> cli::NodeOptions {
        cli::NodeOptions {
            root_dir: root.to_path_buf(),
            cert_dir: root.join("pki"),
            kubeconfig: None,
            hostname_override: None,
            node_ip: Some("10.0.0.5".to_owned()),
            node_labels: Default::default(),
            verbosity: 0,
            node_name: "node-a".to_owned(),
            warnings: Vec::new(),
            container_gc: Default::default(),
            pod_infra_container_image: cli::DEFAULT_POD_INFRA_CONTAINER_IMAGE.to_owned(),
            runtime_cgroups: String::new(),
            image_credential_provider_config: None,
            image_credential_provider_bin_dir: PathBuf::new(),
            log_format: logging::LogFormat::Text,
            external_cloud_provider: false,
            kubelet_version: kubelet::version::KUBERNETES_VERSION.to_owned(),
            bootstrap_kubeconfig: None,
            lock_file: None,
            exit_on_lock_contention: false,
        }
    }

    #[test]
    fn pleg_relist_threshold_is_upstreams_unless_the_test_variable_says_otherwise() {
        assert_eq!(
            pleg_relist_threshold(None).unwrap(),
            Duration::from_secs(180)
        );
        assert_eq!(
            pleg_relist_threshold(Some("7s")).unwrap(),
            Duration::from_secs(7)
        );
        for bad in ["", "seven", "0s", "-3s"] {
            let err = format!("{:#}", pleg_relist_threshold(Some(bad)).unwrap_err());
            assert!(
                err.contains("RKUBELET_TEST_PLEG_RELIST_THRESHOLD"),
                "{bad:?}: {err}"
            );
        }
    }

    /// Each field the support table marks honoured by this wiring reaches the agent.
    #[test]
    fn agent_config_carries_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = load_config(None, None).unwrap();
        c.pod_logs_dir = "/srv/pod-logs".into();
        c.sync_frequency = GoDuration::from_secs(42);
        c.address = "127.0.0.2".into();
        c.port = 11250;
        c.healthz_bind_address = "127.0.0.3".into();
        c.healthz_port = 11248;
        c.single_process_oom_kill = Some(true);
        c.cgroup_driver = "systemd".into();
        c.node_status_max_images = 7;
        c.pods_per_core = 3;
        c.register_node = false;
        c.container_log_max_workers = 4;
        c.eviction_monitoring_interval = Some(GoDuration::from_secs(3));
        c.pod_housekeeping_period = GoDuration::from_secs(9);
        c.tls_curve_preferences = vec![29];
        c.server_tls_bootstrap = true;
        c.shutdown_grace_period = GoDuration::from_secs(30);
        c.shutdown_grace_period_critical_pods = GoDuration::from_secs(10);
        let a = agent_config(&c, &node(dir.path())).unwrap();
        let shutdown = a.node_shutdown.as_ref().unwrap();
        assert_eq!(shutdown.period_requested(), Duration::from_secs(30));
        assert_eq!(
            shutdown
                .groups
                .iter()
                .map(|g| (g.priority, g.grace_period_seconds))
                .collect::<Vec<_>>(),
            [(0, 20), (2_000_000_000, 10)]
        );
        assert_eq!(a.pod_logs_dir, Path::new("/srv/pod-logs"));
        assert_eq!(a.sync_frequency, Duration::from_secs(42));
        assert_eq!(a.loop_timings.housekeeping, Duration::from_secs(9));
        assert_eq!(a.healthz_addr, Some("127.0.0.3:11248".parse().unwrap()));
        assert_eq!(a.cgroups.single_process_oom_kill, Some(true));
        assert_eq!(
            a.cgroups.driver,
            kubelet::cm::cgroups::CgroupDriver::Systemd
        );
        assert_eq!(a.node_status.node_status_max_images, 7);
        assert_eq!(a.node_status.pods_per_core, 3);
        assert!(!a.node_status.register_node);
        assert_eq!(a.gc.container_logs.as_ref().unwrap().max_workers, 4);
        assert_eq!(
            a.eviction.settings.monitoring_interval,
            Duration::from_secs(3)
        );
        let server = a.server.as_ref().unwrap();
        assert_eq!(server.addr, "127.0.0.2:11250".parse().unwrap());
        assert_eq!(server.tls.curve_preferences, [29]);
        assert!(server.tls.server_tls_bootstrap);
        // enableServer: false turns the HTTPS port off.
        c.enable_server = false;
        assert!(
            agent_config(&c, &node(dir.path()))
                .unwrap()
                .server
                .is_none()
        );
    }

    #[tokio::test]
    async fn image_service_endpoint_dials_its_own_socket() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = load_config(None, None).unwrap();
        c.runtime_request_timeout = GoDuration::from_secs(5);
        c.container_runtime_endpoint = format!("unix://{}/runtime.sock", dir.path().display());
        // Same endpoint (or none): one connection, errors name the runtime endpoint.
        let err = format!("{:#}", connect_cri(&c).await.err().unwrap());
        assert!(
            err.starts_with(
                "containerRuntimeEndpoint: connecting to the container runtime at unix://"
            ),
            "{err}"
        );
        c.image_service_endpoint = format!("unix://{}/images.sock", dir.path().display());
        let err = format!("{:#}", connect_cri(&c).await.err().unwrap());
        assert!(
            err.starts_with("imageServiceEndpoint: connecting to the image service at unix://")
                && err.contains("images.sock"),
            "{err}"
        );
    }
}
