//! The rest of the upstream 1.33 kubelet's flags: every config-backed flag of
//! `AddKubeletConfigFlags` not declared in `cli/mod.rs`, the logging flags component-base
//! registers (`logsapi.AddFlags`), and the flag-only settings of `KubeletFlags.AddFlags`
//! (`--lock-file`, `--exit-on-lock-contention`, `--seccomp-default`, and the deprecated
//! `--cloud-config`, `--experimental-*` and `--register-schedulable`).
//! Owns: their clap definitions and copying the given ones into their configuration field
//! (the field `kubelet::config::support::FLAGS` maps each flag to, so a flag is honoured or
//! refused exactly as its field). Receives the parsed flags and the loaded configuration; emits
//! the deprecation warnings upstream prints and the flag-only settings ([`FlagOnly`]).

use std::path::PathBuf;

use kubelet::config::{
    ConfigError, Duration, KubeletConfiguration, MemoryReservation, Quantity, ThresholdValue,
    VModuleItem,
};

use super::DEPRECATED;
use super::values::{
    MapFlag, joined, merged, parse_bool, parse_duration, parse_duration_map, parse_int32,
    parse_int64, parse_langle_threshold_map, parse_quantity, parse_quantity_map,
    parse_reserved_memory, parse_string_map, parse_string_pair, parse_threshold_map, parse_vmodule,
};

/// Config-backed and flag-only upstream flags (see the module doc). Each is `None`/empty when
/// not given, so the configuration file's value stands.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UpstreamFlags {
    // Server and its authentication.
    #[arg(long = "enable-server", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Serve the kubelet API on --address/--port (enableServer). (default true)"))]
    pub enable_server: Option<bool>,
    #[arg(long = "anonymous-auth", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Let requests no authenticator claims through as system:anonymous (authentication.anonymous.enabled). (default true without --config)"))]
    pub anonymous_auth: Option<bool>,
    #[arg(long = "authentication-token-webhook", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Check bearer tokens with the TokenReview API (authentication.webhook.enabled)."))]
    pub authentication_token_webhook: Option<bool>,
    #[arg(long = "authentication-token-webhook-cache-ttl", value_name = "duration", value_parser = parse_duration, help = deprecated!("How long TokenReview answers are cached (authentication.webhook.cacheTTL). (default 2m0s)"))]
    pub authentication_token_webhook_cache_ttl: Option<Duration>,
    #[arg(long = "client-ca-file", value_name = "string", help = deprecated!("CA bundle that authenticates client certificates by their common name (authentication.x509.clientCAFile)."))]
    pub client_ca_file: Option<String>,
    #[arg(long = "authorization-mode", value_name = "string", help = deprecated!("AlwaysAllow or Webhook (SubjectAccessReview) (authorization.mode). (default \"AlwaysAllow\" without --config)"))]
    pub authorization_mode: Option<String>,
    #[arg(long = "authorization-webhook-cache-authorized-ttl", value_name = "duration", value_parser = parse_duration, help = deprecated!("How long an allowing SubjectAccessReview answer is cached (authorization.webhook.cacheAuthorizedTTL). (default 5m0s)"))]
    pub authorization_webhook_cache_authorized_ttl: Option<Duration>,
    #[arg(long = "authorization-webhook-cache-unauthorized-ttl", value_name = "duration", value_parser = parse_duration, help = deprecated!("How long a denying SubjectAccessReview answer is cached (authorization.webhook.cacheUnauthorizedTTL). (default 30s)"))]
    pub authorization_webhook_cache_unauthorized_ttl: Option<Duration>,
    #[arg(long = "tls-cert-file", value_name = "string", help = deprecated!("Serving certificate, intermediates after it (tlsCertFile); without it and --tls-private-key-file a self-signed pair is made in --cert-dir."))]
    pub tls_cert_file: Option<String>,
    #[arg(long = "tls-private-key-file", value_name = "string", help = deprecated!("Key of --tls-cert-file (tlsPrivateKeyFile)."))]
    pub tls_private_key_file: Option<String>,
    #[arg(long = "tls-cipher-suites", value_name = "strings", help = deprecated!("Comma-separated Go names of the server's cipher suites (tlsCipherSuites)."))]
    pub tls_cipher_suites: Vec<String>,
    #[arg(long = "tls-min-version", value_name = "string", help = deprecated!("Lowest TLS version served: VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13 (tlsMinVersion)."))]
    pub tls_min_version: Option<String>,
    #[arg(long = "enable-debugging-handlers", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Serve logs, exec, attach, port-forward and run (enableDebuggingHandlers). (default true)"))]
    pub enable_debugging_handlers: Option<bool>,
    #[arg(long = "contention-profiling", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Go block profiling (enableContentionProfiling)."))]
    pub contention_profiling: Option<bool>,

    // Rates.
    #[arg(long = "registry-qps", value_name = "int32", value_parser = parse_int32, help = deprecated!("Image pulls per second, 0 for no limit (registryPullQPS). (default 5)"))]
    pub registry_qps: Option<i32>,
    #[arg(long = "registry-burst", value_name = "int32", value_parser = parse_int32, help = deprecated!("Pulls allowed at once above --registry-qps (registryBurst). (default 10)"))]
    pub registry_burst: Option<i32>,
    #[arg(long = "event-qps", value_name = "int32", value_parser = parse_int32, help = deprecated!("Events created per second (eventRecordQPS). (default 50)"))]
    pub event_qps: Option<i32>,
    #[arg(long = "event-burst", value_name = "int32", value_parser = parse_int32, help = deprecated!("Events allowed at once above --event-qps (eventBurst). (default 100)"))]
    pub event_burst: Option<i32>,
    #[arg(long = "kube-api-qps", value_name = "int32", value_parser = parse_int32, help = deprecated!("API server requests per second (kubeAPIQPS). (default 50)"))]
    pub kube_api_qps: Option<i32>,
    #[arg(long = "kube-api-burst", value_name = "int32", value_parser = parse_int32, help = deprecated!("API server requests allowed at once above --kube-api-qps (kubeAPIBurst). (default 100)"))]
    pub kube_api_burst: Option<i32>,
    #[arg(long = "kube-api-content-type", value_name = "string", help = deprecated!("Content type of API server requests (contentType)."))]
    pub kube_api_content_type: Option<String>,

    // Process and host.
    #[arg(long = "oom-score-adj", value_name = "int32", value_parser = parse_int32, help = deprecated!("The kubelet's own oom_score_adj, -1000..1000 (oomScoreAdj). (default -999)"))]
    pub oom_score_adj: Option<i32>,
    #[arg(long = "max-open-files", value_name = "int", value_parser = parse_int64, help = deprecated!("The kubelet's open-file limit (maxOpenFiles). (default 1000000)"))]
    pub max_open_files: Option<i64>,
    #[arg(long = "protect-kernel-defaults", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Fail when a kernel tunable differs from what the kubelet expects (protectKernelDefaults)."))]
    pub protect_kernel_defaults: Option<bool>,
    #[arg(long = "make-iptables-util-chains", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Keep the iptables utility chains on the host (makeIPTablesUtilChains). (default true)"))]
    pub make_iptables_util_chains: Option<bool>,
    #[arg(long = "fail-cgroupv1", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = "Refuse to start on a cgroup v1 host (failCgroupV1).")]
    pub fail_cgroupv1: Option<bool>,
    #[arg(long = "kernel-memcg-notification", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Learn of memory thresholds from memcg notifications instead of polling (kernelMemcgNotification)."))]
    pub kernel_memcg_notification: Option<bool>,

    // Cgroups, resource managers, node allocatable.
    #[arg(long = "cgroups-per-qos", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Make the QoS and pod cgroup tree (cgroupsPerQOS). (default true)"))]
    pub cgroups_per_qos: Option<bool>,
    #[arg(long = "cgroup-root", value_name = "string", help = deprecated!("Parent cgroup of the pod cgroups (cgroupRoot)."))]
    pub cgroup_root: Option<String>,
    #[arg(long = "cpu-cfs-quota", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Enforce CPU limits with CFS quota (cpuCFSQuota). (default true)"))]
    pub cpu_cfs_quota: Option<bool>,
    #[arg(long = "cpu-cfs-quota-period", value_name = "duration", value_parser = parse_duration, help = deprecated!("cpu.cfs_period_us of containers (cpuCFSQuotaPeriod). (default 100ms)"))]
    pub cpu_cfs_quota_period: Option<Duration>,
    #[arg(long = "cpu-manager-policy", value_name = "string", help = deprecated!("none or static (cpuManagerPolicy). (default \"none\")"))]
    pub cpu_manager_policy: Option<String>,
    #[arg(long = "cpu-manager-policy-options", value_name = "key=value", value_parser = parse_string_pair, help = deprecated!("One CPU manager policy option per occurrence (cpuManagerPolicyOptions)."))]
    pub cpu_manager_policy_options: Vec<MapFlag<String>>,
    #[arg(long = "cpu-manager-reconcile-period", value_name = "duration", value_parser = parse_duration, help = deprecated!("How often the CPU manager reconciles (cpuManagerReconcilePeriod). (default 10s)"))]
    pub cpu_manager_reconcile_period: Option<Duration>,
    #[arg(long = "memory-manager-policy", value_name = "string", help = deprecated!("None or Static (memoryManagerPolicy). (default \"None\")"))]
    pub memory_manager_policy: Option<String>,
    #[arg(long = "reserved-memory", value_name = "numa:type=quantity,...", value_parser = parse_reserved_memory, help = deprecated!("Memory reserved per NUMA node, e.g. 0:memory=1Gi,hugepages-1M=2Gi (reservedMemory)."))]
    pub reserved_memory: Vec<Vec<MemoryReservation>>,
    #[arg(long = "topology-manager-policy", value_name = "string", help = deprecated!("none, best-effort, restricted or single-numa-node (topologyManagerPolicy). (default \"none\")"))]
    pub topology_manager_policy: Option<String>,
    #[arg(long = "topology-manager-scope", value_name = "string", help = deprecated!("container or pod (topologyManagerScope). (default \"container\")"))]
    pub topology_manager_scope: Option<String>,
    #[arg(long = "topology-manager-policy-options", value_name = "key=value,...", value_parser = parse_string_map, help = deprecated!("Topology manager policy options (topologyManagerPolicyOptions)."))]
    pub topology_manager_policy_options: Vec<MapFlag<String>>,
    #[arg(long = "qos-reserved", value_name = "resource=percentage,...", value_parser = parse_string_map, help = deprecated!("Requests reserved per QoS class, e.g. memory=50% (qosReserved)."))]
    pub qos_reserved: Vec<MapFlag<String>>,
    #[arg(long = "reserved-cpus", value_name = "string", help = deprecated!("CPUs reserved for the system and Kubernetes, e.g. 0-1,6 (reservedSystemCPUs)."))]
    pub reserved_cpus: Option<String>,
    #[arg(long = "system-reserved", value_name = "resource=quantity,...", value_parser = parse_quantity_map, help = deprecated!("Resources reserved for the system, e.g. cpu=200m,memory=500Mi (systemReserved)."))]
    pub system_reserved: Vec<MapFlag<Quantity>>,
    #[arg(long = "kube-reserved", value_name = "resource=quantity,...", value_parser = parse_quantity_map, help = deprecated!("Resources reserved for Kubernetes daemons, e.g. cpu=200m,memory=500Mi (kubeReserved)."))]
    pub kube_reserved: Vec<MapFlag<Quantity>>,
    #[arg(long = "system-reserved-cgroup", value_name = "string", help = deprecated!("Cgroup --system-reserved is enforced on (systemReservedCgroup)."))]
    pub system_reserved_cgroup: Option<String>,
    #[arg(long = "kube-reserved-cgroup", value_name = "string", help = deprecated!("Cgroup --kube-reserved is enforced on (kubeReservedCgroup)."))]
    pub kube_reserved_cgroup: Option<String>,
    #[arg(long = "enforce-node-allocatable", value_name = "strings", help = deprecated!("Comma-separated levels to enforce: none, pods, system-reserved, kube-reserved and their -compressible forms (enforceNodeAllocatable). (default \"pods\")"))]
    pub enforce_node_allocatable: Vec<String>,

    // Pods and containers.
    #[arg(long = "pod-cidr", value_name = "string", help = deprecated!("Pod CIDR in standalone mode (podCIDR)."))]
    pub pod_cidr: Option<String>,
    #[arg(long = "pod-max-pids", value_name = "int", value_parser = parse_int64, help = deprecated!("Process limit per pod, -1 for node allocatable (podPidsLimit). (default -1)"))]
    pub pod_max_pids: Option<i64>,
    #[arg(long = "pods-per-core", value_name = "int32", value_parser = parse_int32, help = deprecated!("Pods per core, capped by --max-pods; 0 for no limit (podsPerCore)."))]
    pub pods_per_core: Option<i32>,
    #[arg(long = "hairpin-mode", value_name = "string", help = deprecated!("promiscuous-bridge, hairpin-veth or none (hairpinMode). (default \"promiscuous-bridge\")"))]
    pub hairpin_mode: Option<String>,
    #[arg(long = "allowed-unsafe-sysctls", value_name = "strings", help = deprecated!("Comma-separated unsafe sysctls or prefixes ending in * pods may set (allowedUnsafeSysctls)."))]
    pub allowed_unsafe_sysctls: Vec<String>,
    #[arg(long = "container-log-max-size", value_name = "quantity", value_parser = parse_quantity, help = deprecated!("Size at which a container log is rotated (containerLogMaxSize). (default \"10Mi\")"))]
    pub container_log_max_size: Option<Quantity>,
    #[arg(long = "container-log-max-files", value_name = "int32", value_parser = parse_int32, help = deprecated!("Log files kept per container, at least 2 (containerLogMaxFiles). (default 5)"))]
    pub container_log_max_files: Option<i32>,
    #[arg(long = "streaming-connection-idle-timeout", value_name = "duration", value_parser = parse_duration, help = deprecated!("Idle timeout of streaming connections (streamingConnectionIdleTimeout). (default 4h0m0s)"))]
    pub streaming_connection_idle_timeout: Option<Duration>,
    #[arg(long = "runonce", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Run the static pods once and exit (runOnce)."))]
    pub runonce: Option<bool>,
    #[arg(long = "seccomp-default", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = "Run every container without a seccomp profile under RuntimeDefault (or with seccompDefault).")]
    pub seccomp_default: Option<bool>,
    #[arg(long = "enable-controller-attach-detach", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Leave volume attach/detach to the attach/detach controller (enableControllerAttachDetach). (default true)"))]
    pub enable_controller_attach_detach: Option<bool>,
    #[arg(long = "volume-plugin-dir", value_name = "string", help = deprecated!("Directory of FlexVolume plugins (volumePluginDir)."))]
    pub volume_plugin_dir: Option<String>,
    #[arg(long = "volume-stats-agg-period", value_name = "duration", value_parser = parse_duration, help = deprecated!("How often volume usage is measured (volumeStatsAggPeriod). (default 1m0s)"))]
    pub volume_stats_agg_period: Option<Duration>,
    #[arg(long = "local-storage-capacity-isolation", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Account and limit ephemeral storage (localStorageCapacityIsolation). (default true)"))]
    pub local_storage_capacity_isolation: Option<bool>,

    // Images.
    #[arg(long = "serialize-image-pulls", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Pull one image at a time (serializeImagePulls). (default true)"))]
    pub serialize_image_pulls: Option<bool>,
    #[arg(long = "minimum-image-ttl-duration", value_name = "duration", value_parser = parse_duration, help = deprecated!("Age before an unused image may be collected (imageMinimumGCAge). (default 2m0s)"))]
    pub minimum_image_ttl_duration: Option<Duration>,
    #[arg(long = "image-gc-high-threshold", value_name = "int32", value_parser = parse_int32, help = deprecated!("Disk usage percent that starts image GC (imageGCHighThresholdPercent). (default 85)"))]
    pub image_gc_high_threshold: Option<i32>,
    #[arg(long = "image-gc-low-threshold", value_name = "int32", value_parser = parse_int32, help = deprecated!("Disk usage percent image GC frees down to (imageGCLowThresholdPercent). (default 80)"))]
    pub image_gc_low_threshold: Option<i32>,
    #[arg(long = "node-status-max-images", value_name = "int32", value_parser = parse_int32, help = deprecated!("Images listed in the node status, -1 for all (nodeStatusMaxImages). (default 50)"))]
    pub node_status_max_images: Option<i32>,

    // Eviction.
    #[arg(long = "eviction-hard", value_name = "signal<threshold,...", value_parser = parse_langle_threshold_map, help = deprecated!("Hard eviction thresholds, e.g. memory.available<1Gi (evictionHard)."))]
    pub eviction_hard: Vec<MapFlag<ThresholdValue>>,
    #[arg(long = "eviction-soft", value_name = "signal<threshold,...", value_parser = parse_langle_threshold_map, help = deprecated!("Soft eviction thresholds, e.g. memory.available<1.5Gi (evictionSoft)."))]
    pub eviction_soft: Vec<MapFlag<ThresholdValue>>,
    #[arg(long = "eviction-soft-grace-period", value_name = "signal=duration,...", value_parser = parse_duration_map, help = deprecated!("How long each soft threshold must hold, e.g. memory.available=1m30s (evictionSoftGracePeriod)."))]
    pub eviction_soft_grace_period: Vec<MapFlag<Duration>>,
    #[arg(long = "eviction-pressure-transition-period", value_name = "duration", value_parser = parse_duration, help = deprecated!("Wait before leaving a pressure condition (evictionPressureTransitionPeriod). (default 5m0s)"))]
    pub eviction_pressure_transition_period: Option<Duration>,
    #[arg(long = "eviction-max-pod-grace-period", value_name = "int32", value_parser = parse_int32, help = deprecated!("Longest grace period, in seconds, of a soft eviction (evictionMaxPodGracePeriod)."))]
    pub eviction_max_pod_grace_period: Option<i32>,
    #[arg(long = "eviction-minimum-reclaim", value_name = "signal=quantity,...", value_parser = parse_threshold_map, help = deprecated!("Least amount reclaimed per eviction, e.g. imagefs.available=2Gi (evictionMinimumReclaim)."))]
    pub eviction_minimum_reclaim: Vec<MapFlag<ThresholdValue>>,

    // Logging (component-base `logsapi.AddFlags`; --v and --logging-format are in `Flags`).
    #[arg(long = "log-flush-frequency", value_name = "duration", value_parser = parse_duration, help = "Longest time between log flushes (logging.flushFrequency). (default 5s)")]
    pub log_flush_frequency: Option<Duration>,
    #[arg(long = "vmodule", value_name = "pattern=N,...", value_parser = parse_vmodule, help = "Per-file verbosity for the text format (logging.vmodule).")]
    pub vmodule: Vec<Vec<VModuleItem>>,
    #[arg(long = "log-text-split-stream", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("[Alpha] Text format: errors to stderr, the rest to stdout (logging.options.text.splitStream)."))]
    pub log_text_split_stream: Option<bool>,
    #[arg(long = "log-text-info-buffer-size", value_name = "quantity", value_parser = parse_quantity, help = deprecated!("[Alpha] Text format with split streams: info buffer size (logging.options.text.infoBufferSize)."))]
    pub log_text_info_buffer_size: Option<Quantity>,
    #[arg(long = "log-json-split-stream", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("[Alpha] JSON format: errors to stderr, the rest to stdout (logging.options.json.splitStream)."))]
    pub log_json_split_stream: Option<bool>,
    #[arg(long = "log-json-info-buffer-size", value_name = "quantity", value_parser = parse_quantity, help = deprecated!("[Alpha] JSON format with split streams: info buffer size (logging.options.json.infoBufferSize)."))]
    pub log_json_info_buffer_size: Option<Quantity>,

    // Flag-only (`KubeletFlags`).
    #[arg(
        long = "lock-file",
        value_name = "string",
        help = "<Warning: Alpha feature> File the kubelet holds an exclusive flock on while it runs; a second kubelet waits for it."
    )]
    pub lock_file: Option<PathBuf>,
    #[arg(long = "exit-on-lock-contention", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = "Exit when another process opens or removes --lock-file.")]
    pub exit_on_lock_contention: Option<bool>,
    #[arg(
        long = "cloud-config",
        value_name = "string",
        help = "Cloud provider configuration file; unused without an in-tree cloud provider. (DEPRECATED: will be removed in 1.25 or later, in favor of removing cloud provider code from Kubelet.)"
    )]
    pub cloud_config: Option<String>,
    #[arg(
        long = "experimental-mounter-path",
        value_name = "string",
        help = "[Experimental] Mount helper binary. (DEPRECATED: will be removed in 1.25 or later. in favor of using CSI.)"
    )]
    pub experimental_mounter_path: Option<String>,
    #[arg(long = "experimental-allocatable-ignore-eviction", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = "Leave hard eviction thresholds out of node allocatable. [default=false] (DEPRECATED: will be removed in 1.25 or later.)")]
    pub experimental_allocatable_ignore_eviction: Option<bool>,
    #[arg(long = "register-schedulable", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = "Register the node schedulable; no effect without --register-node. (default true) (DEPRECATED: will be removed in a future version)")]
    pub register_schedulable: Option<bool>,
}

/// Upstream's deprecation notes of the deprecated flag-only settings.
const CLOUD_CONFIG_DEPRECATION: &str =
    "will be removed in 1.25 or later, in favor of removing cloud provider code from Kubelet.";
const MOUNTER_DEPRECATION: &str = "will be removed in 1.25 or later. in favor of using CSI.";
const ALLOCATABLE_DEPRECATION: &str = "will be removed in 1.25 or later.";
const REGISTER_SCHEDULABLE_DEPRECATION: &str = "will be removed in a future version";

/// The flag-only settings of this module that the binary uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlagOnly {
    /// `--lock-file` (`None`: no lock).
    pub lock_file: Option<PathBuf>,
    /// `--exit-on-lock-contention`.
    pub exit_on_lock_contention: bool,
}

/// Copies the given config-backed flags into `c`; returns upstream's deprecation warnings for
/// the deprecated ones, in the order of this struct.
pub(super) fn apply_upstream(f: &UpstreamFlags, c: &mut KubeletConfiguration) -> Vec<String> {
    let mut used: Vec<&str> = Vec::new();
    macro_rules! set {
        ($value:expr, $name:literal, $field:expr) => {
            if let Some(v) = $value.clone() {
                $field = v;
                used.push($name);
            }
        };
    }
    set!(f.enable_server, "enable-server", c.enable_server);
    set!(
        f.anonymous_auth,
        "anonymous-auth",
        c.authentication.anonymous.enabled
    );
    set!(
        f.authentication_token_webhook,
        "authentication-token-webhook",
        c.authentication.webhook.enabled
    );
    set!(
        f.authentication_token_webhook_cache_ttl,
        "authentication-token-webhook-cache-ttl",
        c.authentication.webhook.cache_ttl
    );
    set!(
        f.client_ca_file,
        "client-ca-file",
        c.authentication.x509.client_ca_file
    );
    set!(
        f.authorization_mode,
        "authorization-mode",
        c.authorization.mode
    );
    set!(
        f.authorization_webhook_cache_authorized_ttl,
        "authorization-webhook-cache-authorized-ttl",
        c.authorization.webhook.cache_authorized_ttl
    );
    set!(
        f.authorization_webhook_cache_unauthorized_ttl,
        "authorization-webhook-cache-unauthorized-ttl",
        c.authorization.webhook.cache_unauthorized_ttl
    );
    set!(f.tls_cert_file, "tls-cert-file", c.tls_cert_file);
    set!(
        f.tls_private_key_file,
        "tls-private-key-file",
        c.tls_private_key_file
    );
    set!(
        joined(&f.tls_cipher_suites),
        "tls-cipher-suites",
        c.tls_cipher_suites
    );
    set!(f.tls_min_version, "tls-min-version", c.tls_min_version);
    set!(
        f.enable_debugging_handlers,
        "enable-debugging-handlers",
        c.enable_debugging_handlers
    );
    set!(
        f.contention_profiling,
        "contention-profiling",
        c.enable_contention_profiling
    );
    set!(f.registry_qps, "registry-qps", c.registry_pull_qps);
    set!(f.registry_burst, "registry-burst", c.registry_burst);
    set!(f.event_qps, "event-qps", c.event_record_qps);
    set!(f.event_burst, "event-burst", c.event_burst);
    set!(f.kube_api_qps, "kube-api-qps", c.kube_api_qps);
    set!(f.kube_api_burst, "kube-api-burst", c.kube_api_burst);
    set!(
        f.kube_api_content_type,
        "kube-api-content-type",
        c.content_type
    );
    set!(f.oom_score_adj, "oom-score-adj", c.oom_score_adj);
    set!(f.max_open_files, "max-open-files", c.max_open_files);
    set!(
        f.protect_kernel_defaults,
        "protect-kernel-defaults",
        c.protect_kernel_defaults
    );
    set!(
        f.make_iptables_util_chains,
        "make-iptables-util-chains",
        c.make_iptables_util_chains
    );
    set!(
        f.kernel_memcg_notification,
        "kernel-memcg-notification",
        c.kernel_memcg_notification
    );
    set!(f.cgroups_per_qos, "cgroups-per-qos", c.cgroups_per_qos);
    set!(f.cgroup_root, "cgroup-root", c.cgroup_root);
    set!(f.cpu_cfs_quota, "cpu-cfs-quota", c.cpu_cfs_quota);
    set!(
        f.cpu_cfs_quota_period,
        "cpu-cfs-quota-period",
        c.cpu_cfs_quota_period
    );
    set!(
        f.cpu_manager_policy,
        "cpu-manager-policy",
        c.cpu_manager_policy
    );
    set!(
        merged(&f.cpu_manager_policy_options),
        "cpu-manager-policy-options",
        c.cpu_manager_policy_options
    );
    set!(
        f.cpu_manager_reconcile_period,
        "cpu-manager-reconcile-period",
        c.cpu_manager_reconcile_period
    );
    set!(
        f.memory_manager_policy,
        "memory-manager-policy",
        c.memory_manager_policy
    );
    let reserved_memory = (!f.reserved_memory.is_empty()).then(|| f.reserved_memory.concat());
    set!(reserved_memory, "reserved-memory", c.reserved_memory);
    set!(
        f.topology_manager_policy,
        "topology-manager-policy",
        c.topology_manager_policy
    );
    set!(
        f.topology_manager_scope,
        "topology-manager-scope",
        c.topology_manager_scope
    );
    set!(
        merged(&f.topology_manager_policy_options),
        "topology-manager-policy-options",
        c.topology_manager_policy_options
    );
    set!(merged(&f.qos_reserved), "qos-reserved", c.qos_reserved);
    set!(f.reserved_cpus, "reserved-cpus", c.reserved_system_cpus);
    set!(
        merged(&f.system_reserved),
        "system-reserved",
        c.system_reserved
    );
    set!(merged(&f.kube_reserved), "kube-reserved", c.kube_reserved);
    set!(
        f.system_reserved_cgroup,
        "system-reserved-cgroup",
        c.system_reserved_cgroup
    );
    set!(
        f.kube_reserved_cgroup,
        "kube-reserved-cgroup",
        c.kube_reserved_cgroup
    );
    set!(
        joined(&f.enforce_node_allocatable),
        "enforce-node-allocatable",
        c.enforce_node_allocatable
    );
    set!(f.pod_cidr, "pod-cidr", c.pod_cidr);
    set!(f.pod_max_pids, "pod-max-pids", c.pod_pids_limit);
    set!(f.pods_per_core, "pods-per-core", c.pods_per_core);
    set!(f.hairpin_mode, "hairpin-mode", c.hairpin_mode);
    set!(
        joined(&f.allowed_unsafe_sysctls),
        "allowed-unsafe-sysctls",
        c.allowed_unsafe_sysctls
    );
    set!(
        f.container_log_max_size,
        "container-log-max-size",
        c.container_log_max_size
    );
    set!(
        f.container_log_max_files,
        "container-log-max-files",
        c.container_log_max_files
    );
    set!(
        f.streaming_connection_idle_timeout,
        "streaming-connection-idle-timeout",
        c.streaming_connection_idle_timeout
    );
    set!(f.runonce, "runonce", c.run_once);
    set!(
        f.enable_controller_attach_detach,
        "enable-controller-attach-detach",
        c.enable_controller_attach_detach
    );
    set!(
        f.volume_plugin_dir,
        "volume-plugin-dir",
        c.volume_plugin_dir
    );
    set!(
        f.volume_stats_agg_period,
        "volume-stats-agg-period",
        c.volume_stats_agg_period
    );
    set!(
        f.local_storage_capacity_isolation,
        "local-storage-capacity-isolation",
        c.local_storage_capacity_isolation
    );
    set!(
        f.serialize_image_pulls,
        "serialize-image-pulls",
        c.serialize_image_pulls
    );
    set!(
        f.minimum_image_ttl_duration,
        "minimum-image-ttl-duration",
        c.image_minimum_gc_age
    );
    set!(
        f.image_gc_high_threshold,
        "image-gc-high-threshold",
        c.image_gc_high_threshold_percent
    );
    set!(
        f.image_gc_low_threshold,
        "image-gc-low-threshold",
        c.image_gc_low_threshold_percent
    );
    set!(
        f.node_status_max_images,
        "node-status-max-images",
        c.node_status_max_images
    );
    set!(merged(&f.eviction_hard), "eviction-hard", c.eviction_hard);
    set!(merged(&f.eviction_soft), "eviction-soft", c.eviction_soft);
    set!(
        merged(&f.eviction_soft_grace_period),
        "eviction-soft-grace-period",
        c.eviction_soft_grace_period
    );
    set!(
        f.eviction_pressure_transition_period,
        "eviction-pressure-transition-period",
        c.eviction_pressure_transition_period
    );
    set!(
        f.eviction_max_pod_grace_period,
        "eviction-max-pod-grace-period",
        c.eviction_max_pod_grace_period
    );
    set!(
        merged(&f.eviction_minimum_reclaim),
        "eviction-minimum-reclaim",
        c.eviction_minimum_reclaim
    );
    set!(
        f.log_text_split_stream,
        "log-text-split-stream",
        c.logging.options.text.split_stream
    );
    set!(
        f.log_text_info_buffer_size.clone().map(Some),
        "log-text-info-buffer-size",
        c.logging.options.text.info_buffer_size
    );
    set!(
        f.log_json_split_stream,
        "log-json-split-stream",
        c.logging.options.json.split_stream
    );
    set!(
        f.log_json_info_buffer_size.clone().map(Some),
        "log-json-info-buffer-size",
        c.logging.options.json.info_buffer_size
    );
    let mut warnings: Vec<String> = used
        .iter()
        .map(|name| format!("Flag --{name} has been deprecated, {DEPRECATED}"))
        .collect();
    // Not deprecated upstream: the logging flags component-base keeps, --fail-cgroupv1, and
    // --seccomp-default (a `KubeletFlags` member upstream ORs with the field).
    if let Some(d) = f.log_flush_frequency {
        c.logging.flush_frequency.0 = d;
    }
    if !f.vmodule.is_empty() {
        c.logging.vmodule = f.vmodule.concat();
    }
    if let Some(v) = f.fail_cgroupv1 {
        c.fail_cgroup_v1 = v;
    }
    if f.seccomp_default == Some(true) {
        c.seccomp_default = true;
    }
    for (given, name, note) in [
        (
            f.cloud_config.is_some(),
            "cloud-config",
            CLOUD_CONFIG_DEPRECATION,
        ),
        (
            f.experimental_mounter_path.is_some(),
            "experimental-mounter-path",
            MOUNTER_DEPRECATION,
        ),
        (
            f.experimental_allocatable_ignore_eviction.is_some(),
            "experimental-allocatable-ignore-eviction",
            ALLOCATABLE_DEPRECATION,
        ),
        (
            f.register_schedulable.is_some(),
            "register-schedulable",
            REGISTER_SCHEDULABLE_DEPRECATION,
        ),
    ] {
        if given {
            warnings.push(format!("Flag --{name} has been deprecated, {note}"));
        }
    }
    warnings
}

/// The flag-only settings: honoured ones returned, the ones rkubelet does not implement refused
/// unless at upstream's default (every refusal in one error, as the field check does), the
/// ignored `--cloud-config` warned about.
pub(super) fn flag_only(
    f: &UpstreamFlags,
    warnings: &mut Vec<String>,
) -> Result<FlagOnly, ConfigError> {
    let exit_on_lock_contention = f.exit_on_lock_contention.unwrap_or(false);
    let lock_file = f.lock_file.clone().filter(|p| !p.as_os_str().is_empty());
    // Upstream `run`: the flag needs a lock file.
    if exit_on_lock_contention && lock_file.is_none() {
        return Err(ConfigError::Flag {
            flag: "exit-on-lock-contention".into(),
            message:
                "cannot exit on lock file contention: no lock file specified (set --lock-file)"
                    .into(),
        });
    }
    let mut refused = Vec::new();
    if let Some(path) = f
        .experimental_mounter_path
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        refused.push(format!(
            "--experimental-mounter-path is set to {path:?}, which rkubelet does not support (volumes are mounted with mount(2), never through a helper binary); only the default (empty) is"
        ));
    }
    if f.experimental_allocatable_ignore_eviction == Some(true) {
        refused.push("--experimental-allocatable-ignore-eviction is true, which rkubelet does not support (hard eviction thresholds are always subtracted from allocatable); only the default false is".to_owned());
    }
    if f.register_schedulable == Some(false) {
        refused.push("--register-schedulable is false, which rkubelet does not support (the node registers schedulable; use --register-with-taints); only the default true is".to_owned());
    }
    if !refused.is_empty() {
        return Err(ConfigError::Unsupported(refused));
    }
    if let Some(path) = f.cloud_config.as_deref().filter(|p| !p.is_empty()) {
        warnings.push(format!(
            "--cloud-config is set to {path:?}, which has no effect: there is no in-tree cloud provider (--cloud-provider is empty or external)"
        ));
    }
    Ok(FlagOnly {
        lock_file,
        exit_on_lock_contention,
    })
}
