//! The `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration` as Rust types.
//! Owns: the field set and JSON/YAML names of every upstream v1beta1 field (strict: unknown
//! fields are rejected by serde). Receives documents already defaulted by `defaults.rs`;
//! emits the effective configuration, serializable for `/configz` (Go `omitempty` mirrored).
//!
//! Fields that are pointers upstream (`*bool`, `*int32`) and have a default are plain values
//! here: defaulting happens on the JSON document before decoding, so "unset" never reaches
//! these types. Fields that stay optional after upstream defaulting are `Option`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::duration::Duration;
use super::quantity::{Quantity, ThresholdValue};

pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub const KIND: &str = "KubeletConfiguration";

fn is_false(b: &bool) -> bool {
    !*b
}
fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}
fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// KubeletConfiguration (kubelet.config.k8s.io/v1beta1), field for field.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletConfiguration {
    pub api_version: String,
    pub kind: String,

    pub enable_server: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub static_pod_path: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pod_logs_dir: String,
    pub sync_frequency: Duration,
    pub file_check_frequency: Duration,
    pub http_check_frequency: Duration,
    #[serde(rename = "staticPodURL", skip_serializing_if = "String::is_empty")]
    pub static_pod_url: String,
    #[serde(
        rename = "staticPodURLHeader",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub static_pod_url_header: BTreeMap<String, Vec<String>>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub address: String,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub port: i32,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub read_only_port: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tls_cert_file: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tls_private_key_file: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tls_cipher_suites: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tls_curve_preferences: Vec<i32>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tls_min_version: String,
    #[serde(skip_serializing_if = "is_false")]
    pub rotate_certificates: bool,
    #[serde(rename = "serverTLSBootstrap", skip_serializing_if = "is_false")]
    pub server_tls_bootstrap: bool,
    pub authentication: KubeletAuthentication,
    pub authorization: KubeletAuthorization,
    #[serde(rename = "registryPullQPS")]
    pub registry_pull_qps: i32,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub registry_burst: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image_pull_credentials_verification_policy: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preloaded_images_verification_allowlist: Vec<String>,
    #[serde(rename = "eventRecordQPS")]
    pub event_record_qps: i32,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub event_burst: i32,
    pub enable_debugging_handlers: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub enable_contention_profiling: bool,
    pub healthz_port: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub healthz_bind_address: String,
    pub oom_score_adj: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cluster_domain: String,
    #[serde(rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// Deprecated upstream: no longer has any effect.
    pub streaming_connection_idle_timeout: Duration,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub node_lease_duration_seconds: i32,
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: Duration,
    #[serde(rename = "imageMaximumGCAge")]
    pub image_maximum_gc_age: Duration,
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: i32,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: i32,
    pub volume_stats_agg_period: Duration,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kubelet_cgroups: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub system_cgroups: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_root: String,
    #[serde(rename = "cgroupsPerQOS")]
    pub cgroups_per_qos: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_driver: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cpu_manager_policy: String,
    #[serde(
        rename = "singleProcessOOMKill",
        skip_serializing_if = "Option::is_none"
    )]
    pub single_process_oom_kill: Option<bool>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cpu_manager_policy_options: BTreeMap<String, String>,
    pub cpu_manager_reconcile_period: Duration,
    #[serde(rename = "draManagerReconcilePeriod")]
    pub dra_manager_reconcile_period: Duration,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub memory_manager_policy: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_manager_policy: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_manager_scope: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub topology_manager_policy_options: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub qos_reserved: BTreeMap<String, String>,
    pub runtime_request_timeout: Duration,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hairpin_mode: String,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub max_pods: i32,
    #[serde(rename = "podCIDR", skip_serializing_if = "String::is_empty")]
    pub pod_cidr: String,
    pub pod_pids_limit: i64,
    /// Upstream Go name `ResolverConfig`; an empty string disables DNS lookups from pods.
    pub resolv_conf: String,
    #[serde(skip_serializing_if = "is_false")]
    pub run_once: bool,
    #[serde(rename = "cpuCFSQuota")]
    pub cpu_cfs_quota: bool,
    #[serde(rename = "cpuCFSQuotaPeriod")]
    pub cpu_cfs_quota_period: Duration,
    pub node_status_max_images: i32,
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub max_open_files: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub content_type: String,
    #[serde(rename = "kubeAPIQPS")]
    pub kube_api_qps: i32,
    #[serde(rename = "kubeAPIBurst", skip_serializing_if = "is_zero_i32")]
    pub kube_api_burst: i32,
    pub serialize_image_pulls: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parallel_image_pulls: Option<i32>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, ThresholdValue>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft: BTreeMap<String, ThresholdValue>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, Duration>,
    pub eviction_pressure_transition_period: Duration,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub eviction_max_pod_grace_period: i32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_minimum_reclaim: BTreeMap<String, ThresholdValue>,
    pub merge_default_eviction_settings: bool,
    /// rkubelet extension: how often the eviction manager evaluates its thresholds (upstream
    /// hard-codes 10s). Unset means 10s; it is not written out when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_monitoring_interval: Option<Duration>,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub pods_per_core: i32,
    pub enable_controller_attach_detach: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub protect_kernel_defaults: bool,
    #[serde(rename = "makeIPTablesUtilChains")]
    pub make_iptables_util_chains: bool,
    /// Deprecated upstream: no longer has any effect.
    pub iptables_masquerade_bit: i32,
    /// Deprecated upstream: no longer has any effect.
    pub iptables_drop_bit: i32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    pub fail_swap_on: bool,
    pub memory_swap: MemorySwapConfiguration,
    pub container_log_max_size: Quantity,
    pub container_log_max_files: i32,
    pub container_log_max_workers: i32,
    pub container_log_monitor_interval: Duration,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub config_map_and_secret_change_detection_strategy: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, Quantity>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, Quantity>,
    #[serde(
        rename = "reservedSystemCPUs",
        skip_serializing_if = "String::is_empty"
    )]
    pub reserved_system_cpus: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub show_hidden_metrics_for_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub system_reserved_cgroup: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kube_reserved_cgroup: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub enforce_node_allocatable: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_unsafe_sysctls: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub volume_plugin_dir: String,
    #[serde(rename = "providerID", skip_serializing_if = "String::is_empty")]
    pub provider_id: String,
    #[serde(skip_serializing_if = "is_false")]
    pub kernel_memcg_notification: bool,
    pub logging: LoggingConfiguration,
    pub enable_system_log_handler: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_system_log_query: Option<bool>,
    pub shutdown_grace_period: Duration,
    pub shutdown_grace_period_critical_pods: Duration,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shutdown_grace_period_by_pod_priority: Vec<ShutdownGracePeriodByPodPriority>,
    pub crash_loop_back_off: CrashLoopBackOffConfig,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reserved_memory: Vec<MemoryReservation>,
    pub enable_profiling_handler: bool,
    pub enable_debug_flags_handler: bool,
    pub seccomp_default: bool,
    pub memory_throttling_factor: f64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub memory_reservation_policy: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub register_with_taints: Vec<Taint>,
    pub register_node: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingConfiguration>,
    pub local_storage_capacity_isolation: bool,
    pub container_runtime_endpoint: String,
    /// Empty means "use `container_runtime_endpoint`".
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image_service_endpoint: String,
    #[serde(rename = "failCgroupV1")]
    pub fail_cgroup_v1: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_namespaces: Option<UserNamespaces>,
    /// Newer upstream field (default 2s): period of the pod housekeeping loop.
    pub pod_housekeeping_period: Duration,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAuthentication {
    pub x509: KubeletX509Authentication,
    pub webhook: KubeletWebhookAuthentication,
    pub anonymous: KubeletAnonymousAuthentication,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletX509Authentication {
    #[serde(rename = "clientCAFile", skip_serializing_if = "String::is_empty")]
    pub client_ca_file: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletWebhookAuthentication {
    pub enabled: bool,
    #[serde(rename = "cacheTTL")]
    pub cache_ttl: Duration,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAnonymousAuthentication {
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAuthorization {
    /// `AlwaysAllow` or `Webhook`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: String,
    pub webhook: KubeletWebhookAuthorization,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletWebhookAuthorization {
    #[serde(rename = "cacheAuthorizedTTL")]
    pub cache_authorized_ttl: Duration,
    #[serde(rename = "cacheUnauthorizedTTL")]
    pub cache_unauthorized_ttl: Duration,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemorySwapConfiguration {
    /// `""`, `NoSwap` or `LimitedSwap`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub swap_behavior: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CrashLoopBackOffConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_container_restart_period: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ShutdownGracePeriodByPodPriority {
    pub priority: i32,
    pub shutdown_grace_period_seconds: i64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryReservation {
    pub numa_node: i32,
    pub limits: BTreeMap<String, Quantity>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TracingConfiguration {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling_rate_per_million: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct UserNamespaces {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids_per_pod: Option<i64>,
}

/// component-base `LoggingConfiguration` (v1).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoggingConfiguration {
    /// `text` or `json`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub format: String,
    pub flush_frequency: FlushFrequency,
    pub verbosity: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vmodule: Vec<VModuleItem>,
    pub options: FormatOptions,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct VModuleItem {
    pub file_pattern: String,
    pub verbosity: u32,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FormatOptions {
    pub text: OutputRoutingOptions,
    pub json: OutputRoutingOptions,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct OutputRoutingOptions {
    #[serde(skip_serializing_if = "is_false")]
    pub split_stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub info_buffer_size: Option<Quantity>,
}

/// `logging.flushFrequency`: a duration string, or (as upstream also accepts) a number of
/// nanoseconds. Always written back as a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushFrequency(pub Duration);

impl Serialize for FlushFrequency {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for FlushFrequency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = FlushFrequency;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration string such as \"5s\" or a number of nanoseconds")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FlushFrequency, E> {
                v.parse::<Duration>().map(FlushFrequency).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<FlushFrequency, E> {
                Ok(FlushFrequency(Duration::from_nanos(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<FlushFrequency, E> {
                i64::try_from(v)
                    .map(|n| FlushFrequency(Duration::from_nanos(n)))
                    .map_err(|_| E::custom(format!("{v} nanoseconds is out of range")))
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl KubeletConfiguration {
    /// The image service endpoint to dial: `imageServiceEndpoint`, or the runtime endpoint.
    pub fn effective_image_service_endpoint(&self) -> &str {
        if self.image_service_endpoint.is_empty() {
            &self.container_runtime_endpoint
        } else {
            &self.image_service_endpoint
        }
    }

    /// `evictionHard` as the eviction manager should use it: with
    /// `mergeDefaultEvictionSettings`, default signals not named in the config are added.
    pub fn effective_eviction_hard(&self) -> BTreeMap<String, ThresholdValue> {
        let mut out = self.eviction_hard.clone();
        if self.merge_default_eviction_settings {
            for (signal, value) in super::defaults::DEFAULT_EVICTION_HARD {
                if !out.contains_key(*signal)
                    && let Ok(v) = ThresholdValue::parse(value)
                {
                    out.insert((*signal).to_string(), v);
                }
            }
        }
        out
    }

    /// Whether the read-only (unauthenticated) port is enabled.
    pub fn read_only_port_enabled(&self) -> bool {
        self.read_only_port != 0
    }

    /// Whether the healthz endpoint is enabled.
    pub fn healthz_enabled(&self) -> bool {
        self.healthz_port != 0
    }

    /// The effective feature gates (upstream 1.33 defaults with `featureGates` applied).
    /// Call after [`super::validate`], which reports unknown or locked gates; on such a
    /// configuration this falls back to the defaults.
    pub fn gates(&self) -> super::FeatureGates {
        super::FeatureGates::from_map(&self.feature_gates)
            .map(|(g, _)| g)
            .unwrap_or_default()
    }

    /// `logging.verbosity` clamped to a klog-style level.
    pub fn verbosity(&self) -> u8 {
        u8::try_from(self.logging.verbosity).unwrap_or(u8::MAX)
    }
}
