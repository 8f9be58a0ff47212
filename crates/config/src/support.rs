//! The support table: what rkubelet does with every KubeletConfiguration field and flag.
//! Owns: [`FIELDS`] (every field path of the v1beta1 type, classified as honoured with the
//! test that proves it, rejected unless default, or warned) and [`FLAGS`] (every command-line
//! flag, mapped to its field or classified itself), and the start-up check that applies the
//! table. Receives the effective configuration (after flags); emits start-up warnings, or a
//! [`ConfigError::Unsupported`] naming every field set to a value rkubelet cannot honour.
//! `docs/configuration.md` renders this table; a test walks the configuration type and fails
//! when a field is missing here, so a new field cannot slip in unhandled.

use serde_json::{Map, Value};

use super::ConfigError;
use super::defaults::apply_defaults;
use super::features::FeatureGates;
use super::quantity::Quantity;
use super::types::KubeletConfiguration;

/// What rkubelet does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Does what upstream does; `test` (`file::function`, from the workspace root) proves it.
    Honoured { test: &'static str },
    /// A start-up error names the field when it holds anything but its default.
    RejectedUnlessDefault,
    /// `validate.rs` refuses the values rkubelet does not implement, with a message naming
    /// the field and the values it supports; `test` proves it.
    RejectedByValidation { test: &'static str },
    /// A start-up warning names the field when it holds anything but its default; the
    /// kubelet then runs as with the default.
    Warned,
    /// A start-up warning names the field while it is `true` (upstream's default): the
    /// feature behind it is not implemented, so rkubelet always behaves as with `false`.
    WarnedWhenTrue,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct FieldSupport {
    /// JSON path, e.g. `authentication.webhook.cacheTTL`. A listed object or list is covered
    /// as a whole (its members are not walked).
    pub path: &'static str,
    pub support: Support,
    /// What happens, or what rkubelet does instead.
    pub note: &'static str,
}

const fn f(path: &'static str, support: Support, note: &'static str) -> FieldSupport {
    FieldSupport {
        path,
        support,
        note,
    }
}

const fn honoured(test: &'static str) -> Support {
    Support::Honoured { test }
}

const fn by_validation(test: &'static str) -> Support {
    Support::RejectedByValidation { test }
}

use Support::{RejectedUnlessDefault as REJECTED, Warned as WARNED, WarnedWhenTrue as WARNED_TRUE};

// Tests that prove the wiring or behaviour of many fields.
const WIRING: &str = "crates/rkubelet/src/main.rs::agent_config_carries_the_configuration";
const LOAD: &str = "crates/config/src/load_tests.rs::minimal_file_gets_upstream_defaults";
const NO_OP: &str =
    "crates/config/src/support_tests.rs::upstream_no_op_fields_are_accepted_silently";
const EVICTION: &str = "crates/kubelet/src/eviction/thresholds_tests.rs::parses_upstream_defaults_soft_with_grace_and_min_reclaim";
const AUTHN: &str = "crates/kubelet/src/server/authn.rs::credential_matrix";
const AUTHZ: &str = "crates/kubelet/src/server/authz.rs::webhook_decisions_are_cached_per_ttl";
const TLS: &str = "crates/kubelet/src/server/tls.rs::cipher_suite_names_map_or_name_the_field";
const LOG_ROTATION: &str =
    "crates/node/src/logs/tests.rs::rotates_compresses_and_keeps_at_most_max_files";
const RESOURCE_MANAGERS: &str = "crates/config/src/validate_tests.rs::each_bad_field_is_named";
const HOST: &str = "crates/node/src/cm/node_setup.rs::swap_on_fails_start_unless_allowed";
const SHUTDOWN: &str = "crates/kubelet/tests/it/node_shutdown.rs::shutdown_stops_pods_by_priority_and_posts_their_status_in_time";
const SHUTDOWN_GROUPS: &str =
    "crates/kubelet/src/nodeshutdown/mod.rs::settings_from_config_prefer_by_priority_and_sort_it";

/// Every field of `KubeletConfiguration`.
#[rustfmt::skip]
pub const FIELDS: &[FieldSupport] = &[
    f("apiVersion", honoured("crates/config/src/load_tests.rs::type_meta_is_checked"), "must be kubelet.config.k8s.io/v1beta1"),
    f("kind", honoured("crates/config/src/load_tests.rs::type_meta_is_checked"), "must be KubeletConfiguration"),
    f("enableServer", honoured(WIRING), ""),
    f("staticPodPath", honoured("crates/kubelet/src/sources/file_tests.rs::periodic_reread_without_inotify"), ""),
    f("podLogsDir", honoured(WIRING), ""),
    f("syncFrequency", honoured(WIRING), ""),
    f("fileCheckFrequency", honoured("crates/kubelet/src/sources/file_tests.rs::periodic_reread_without_inotify"), ""),
    f("httpCheckFrequency", honoured("crates/kubelet/src/sources/http_tests.rs::polls_pod_and_pod_list_with_headers"), ""),
    f("staticPodURL", honoured("crates/kubelet/src/sources/http_tests.rs::polls_pod_and_pod_list_with_headers"), ""),
    f("staticPodURLHeader", honoured("crates/kubelet/src/sources/http_tests.rs::polls_pod_and_pod_list_with_headers"), ""),
    f("address", honoured(WIRING), ""),
    f("port", honoured(WIRING), ""),
    f("readOnlyPort", honoured("crates/kubelet/src/server/routes_tests.rs::each_port_serves_only_its_endpoints"), ""),
    f("tlsCertFile", honoured("crates/kubelet/tests/it/server_auth.rs::serving_certificate_and_client_ca_reload_without_restart"), ""),
    f("tlsPrivateKeyFile", honoured("crates/kubelet/tests/it/server_auth.rs::serving_certificate_and_client_ca_reload_without_restart"), ""),
    f("tlsCipherSuites", honoured(TLS), "suites rustls lacks (CBC, RSA key exchange) are refused by name"),
    f("tlsCurvePreferences", honoured("crates/kubelet/src/server/tls.rs::curve_preferences_map_go_ids_or_name_the_field"), "P-521 and X25519MLKEM768 are refused by name"),
    f("tlsMinVersion", honoured(TLS), "VersionTLS10/11 are raised to TLS 1.2 with a warning"),
    f("rotateCertificates", honoured("crates/kubelet/tests/it/api_certificates.rs::client_certificate_rotates_under_a_running_pod_without_failed_calls"), "an expired client certificate is renewed with --bootstrap-kubeconfig's credentials without a restart; a kubeconfig without a client certificate and no bootstrap kubeconfig leaves rotation off, with a warning"),
    f("serverTLSBootstrap", honoured("crates/kubelet/tests/it/api_certificates.rs::serving_certificate_is_requested_served_and_rotated"), "until the serving CSR is approved and issued every TLS handshake on the port fails, as upstream; tlsCertFile/tlsPrivateKeyFile are not served meanwhile"),
    f("authentication.x509.clientCAFile", honoured(AUTHN), ""),
    f("authentication.webhook.enabled", honoured(AUTHN), ""),
    f("authentication.webhook.cacheTTL", honoured("crates/kubelet/src/server/authn.rs::token_answers_are_cached_for_the_ttl"), ""),
    f("authentication.anonymous.enabled", honoured(AUTHN), ""),
    f("authorization.mode", honoured(AUTHZ), ""),
    f("authorization.webhook.cacheAuthorizedTTL", honoured(AUTHZ), ""),
    f("authorization.webhook.cacheUnauthorizedTTL", honoured(AUTHZ), ""),
    f("registryPullQPS", honoured("crates/node/src/images/tests.rs::registry_qps_refuses_pulls_over_the_limit"), ""),
    f("registryBurst", honoured("crates/node/src/images/tests.rs::registry_qps_refuses_pulls_over_the_limit"), ""),
    f("imagePullCredentialsVerificationPolicy", REJECTED, "KubeletEnsureSecretPulledImages is not implemented"),
    f("preloadedImagesVerificationAllowlist", REJECTED, "KubeletEnsureSecretPulledImages is not implemented"),
    f("eventRecordQPS", honoured("crates/client/src/events_api.rs::spam_filter_allows_a_burst_then_one_per_refill"), ""),
    f("eventBurst", honoured("crates/client/src/events_api.rs::spam_filter_allows_a_burst_then_one_per_refill"), ""),
    f("enableDebuggingHandlers", honoured("crates/kubelet/src/server/routes_tests.rs::each_port_serves_only_its_endpoints"), ""),
    f("enableContentionProfiling", REJECTED, "there is no Go runtime to profile"),
    f("healthzPort", honoured("crates/kubelet/src/server/mod.rs::healthz_reports_failing_checks_like_upstream"), ""),
    f("healthzBindAddress", honoured(WIRING), ""),
    f("oomScoreAdj", honoured("crates/node/src/cm/node_setup.rs::oom_score_adj_is_written_and_a_refusal_only_warns"), "a refused write is a warning, as upstream"),
    f("clusterDomain", honoured("crates/pods/src/kuberuntime/sandbox_config.rs::dns_policies"), ""),
    f("clusterDNS", honoured("crates/pods/src/kuberuntime/sandbox_config.rs::dns_policies"), ""),
    f("streamingConnectionIdleTimeout", honoured(NO_OP), "deprecated upstream: no longer has any effect"),
    f("nodeStatusUpdateFrequency", honoured("crates/kubelet/tests/it/api_node.rs::status_is_patched_only_on_change_or_after_the_report_frequency"), ""),
    f("nodeStatusReportFrequency", honoured("crates/kubelet/tests/it/api_node.rs::status_is_patched_only_on_change_or_after_the_report_frequency"), ""),
    f("nodeLeaseDurationSeconds", honoured("crates/kubelet/tests/it/api_node.rs::lease_is_created_with_owner_reference_and_renewed"), ""),
    f("imageMinimumGCAge", honoured("crates/node/src/images/gc_tests.rs::max_age_selection"), ""),
    f("imageMaximumGCAge", honoured("crates/node/src/images/gc_tests.rs::below_threshold_nothing_goes_but_max_age_applies"), ""),
    f("imageGCHighThresholdPercent", honoured("crates/rkubelet/tests/it/containerd_gc.rs::image_gc_removes_unused_image_past_threshold_and_keeps_the_one_in_use"), ""),
    f("imageGCLowThresholdPercent", honoured("crates/rkubelet/tests/it/containerd_gc.rs::image_gc_removes_unused_image_past_threshold_and_keeps_the_one_in_use"), ""),
    f("volumeStatsAggPeriod", REJECTED, "volume usage is measured at every stats collection (10s)"),
    f("kubeletCgroups", WARNED, "the kubelet does not create it or move itself into it; it is only reported as the kubelet system container in stats"),
    f("systemCgroups", WARNED, "processes are not moved into it; it is only reported as the misc system container in stats"),
    f("cgroupRoot", honoured("crates/node/src/cm/mod.rs::start_creates_the_tree_and_enforces_allocatable"), ""),
    f("cgroupsPerQOS", honoured("crates/kubelet/tests/it/cgroups.rs::without_cgroups_per_qos_the_parent_is_empty"), ""),
    f("cgroupDriver", honoured("crates/kubelet/tests/it/systemd_cgroups.rs::systemd_driver_makes_pod_slices_through_systemd"), "systemd: slices created and updated through systemd's D-Bus API (docs/systemd-cgroups.md); with KubeletCgroupDriverFromCRI (default) the runtime's driver wins where CRI RuntimeConfig answers; on a real node (systemd 252, cgroup v2, containerd 1.6): guest tests dev/vm/guest/tests/systemd-qos.sh and dev/vm/guest/tests/cgroupfs-qos.sh"),
    f("cpuManagerPolicy", honoured("crates/kubelet/tests/it/cpumanager.rs::static_policy_pins_guaranteed_and_moves_the_shared_pool"), "none and static"),
    f("singleProcessOOMKill", honoured(WIRING), ""),
    f("cpuManagerPolicyOptions", by_validation(RESOURCE_MANAGERS), "no static-policy option is implemented"),
    f("cpuManagerReconcilePeriod", honoured("crates/node/src/cm/cpumanager/tests.rs::reconcile_pushes_the_pool_and_drops_stale_state"), ""),
    f("draManagerReconcilePeriod", REJECTED, "dynamic resource allocation is not implemented"),
    f("memoryManagerPolicy", by_validation(RESOURCE_MANAGERS), "only None"),
    f("topologyManagerPolicy", by_validation(RESOURCE_MANAGERS), "only none"),
    f("topologyManagerScope", honoured(RESOURCE_MANAGERS), "has no effect without a topology policy, as upstream"),
    f("topologyManagerPolicyOptions", by_validation(RESOURCE_MANAGERS), "no option is implemented"),
    f("qosReserved", REJECTED, "QOSReserved (memory reservation for QoS classes) is not implemented"),
    f("runtimeRequestTimeout", honoured(WIRING), ""),
    f("hairpinMode", honoured(NO_OP), "no effect with a CRI runtime upstream either (the CNI plugin decides)"),
    f("maxPods", honoured("crates/kubelet/tests/it/sync_machinery.rs::pods_beyond_max_pods_are_rejected_out_of_pods"), ""),
    f("podCIDR", REJECTED, "standalone pod CIDR is not passed to the runtime"),
    f("podPidsLimit", honoured("crates/node/src/cm/resources.rs::pod_cgroup_settings_per_qos"), "real node: dev/vm/guest/tests/systemd-qos.sh"),
    f("resolvConf", honoured("crates/pods/src/kuberuntime/sandbox_config.rs::dns_policies"), ""),
    f("runOnce", REJECTED, "run-once mode is not implemented"),
    f("cpuCFSQuota", honoured("crates/node/src/cm/resources.rs::shares_and_quota_math"), ""),
    f("cpuCFSQuotaPeriod", honoured("crates/node/src/cm/resources.rs::shares_and_quota_math"), "needs CustomCPUCFSQuotaPeriod, as upstream"),
    f("nodeStatusMaxImages", honoured(WIRING), ""),
    f("maxOpenFiles", honoured("crates/node/src/cm/node_setup.rs::max_open_files_sets_the_nofile_limit"), ""),
    f("contentType", WARNED, "rkubelet always talks JSON to the API server"),
    f("kubeAPIQPS", honoured("crates/client/src/apiclient/mod.rs::heartbeats_do_not_wait_behind_kube_api_qps"), "node status and the lease use an unthrottled heartbeat client and event writes only eventRecordQPS, as upstream"),
    f("kubeAPIBurst", honoured("crates/client/src/apiclient/rate_limit.rs::a_burst_is_spaced_at_qps"), ""),
    f("serializeImagePulls", honoured("crates/node/src/images/tests.rs::serialized_pulls_wait_for_each_other"), ""),
    f("maxParallelImagePulls", honoured("crates/node/src/images/tests.rs::parallel_pulls_run_together"), ""),
    f("evictionHard", honoured(EVICTION), "real node, real cgroup v2 memory pressure: dev/vm/guest/tests/eviction.sh"),
    f("evictionSoft", honoured(EVICTION), ""),
    f("evictionSoftGracePeriod", honoured(EVICTION), ""),
    f("evictionPressureTransitionPeriod", honoured("crates/kubelet/src/eviction/thresholds_tests.rs::soft_grace_period_and_pressure_transition_period"), ""),
    f("evictionMaxPodGracePeriod", honoured("crates/kubelet/src/eviction/manager_tests.rs::soft_threshold_waits_for_its_grace_period_and_caps_the_pod_grace"), ""),
    f("evictionMinimumReclaim", honoured(EVICTION), ""),
    f("mergeDefaultEvictionSettings", honoured("crates/config/src/load_tests.rs::every_upstream_field_is_accepted"), ""),
    f("evictionMonitoringInterval", honoured(WIRING), "rkubelet extension (upstream: fixed 10s)"),
    f("podsPerCore", honoured("crates/kubelet/src/admission/predicate.rs::pods_per_core_limits_admission_through_the_node_status"), ""),
    f("enableControllerAttachDetach", REJECTED, "the kubelet attaches no volumes itself"),
    f("protectKernelDefaults", honoured("crates/node/src/cm/node_setup.rs::protect_kernel_defaults_names_each_differing_sysctl"), ""),
    f("makeIPTablesUtilChains", WARNED_TRUE, "the KUBE-IPTABLES-HINT and KUBE-FIREWALL chains are not created"),
    f("iptablesMasqueradeBit", honoured(NO_OP), "deprecated upstream: no longer has any effect"),
    f("iptablesDropBit", honoured(NO_OP), "deprecated upstream: no longer has any effect"),
    f("featureGates", honoured("crates/config/src/features.rs::overrides_apply_and_unknown_names_fail_as_upstream"), "upstream 1.33 names, defaults and locks; every gate on (by default or set) that rkubelet does not implement warns by name (features::SUPPORT); PodLevelResources=true is refused"),
    f("failSwapOn", honoured(HOST), ""),
    f("memorySwap.swapBehavior", honoured("crates/pods/src/kuberuntime/container_config.rs::hugepages_and_swap"), ""),
    f("containerLogMaxSize", honoured(LOG_ROTATION), ""),
    f("containerLogMaxFiles", honoured(LOG_ROTATION), ""),
    f("containerLogMaxWorkers", honoured(WIRING), "bounds the compressions running at once; rotations (rename + ReopenContainerLog) run per container and never queue behind each other"),
    f("containerLogMonitorInterval", honoured("crates/node/src/logs/tests.rs::periodic_task_rotates_and_stops_on_cancel"), "the fallback: rotation is triggered by growth (inotify on the pod log directories), see crates/node/src/logs/tests.rs::a_100mb_per_s_writer_is_held_near_the_limit_by_inotify"),
    f("configMapAndSecretChangeDetectionStrategy", REJECTED, "only Watch (per-object watches) is implemented"),
    f("systemReserved", honoured("crates/node/src/cm/allocatable.rs::allocatable_subtracts_reservations"), "real node: dev/vm/guest/tests/systemd-qos.sh (memory.max of kubepods)"),
    f("kubeReserved", honoured("crates/node/src/cm/allocatable.rs::allocatable_subtracts_reservations"), ""),
    f("reservedSystemCPUs", honoured("crates/node/src/cm/cpumanager/policy_static.rs::reserved_cpus_by_topology_or_explicit"), ""),
    f("showHiddenMetricsForVersion", REJECTED, "rkubelet has no hidden metrics"),
    f("systemReservedCgroup", honoured("crates/node/src/cm/allocatable.rs::enforcement_table"), ""),
    f("kubeReservedCgroup", honoured("crates/node/src/cm/allocatable.rs::enforcement_table"), ""),
    f("enforceNodeAllocatable", honoured("crates/node/src/cm/allocatable.rs::enforcement_table"), "with `pods`, each hard `memory.available` threshold gets its `allocatableMemory.available` twin (eviction/manager_tests.rs::pods_over_node_allocatable_are_evicted_with_pods_enforced)"),
    f("allowedUnsafeSysctls", honoured("crates/rkubelet/tests/it/containerd_security.rs::sysctls_are_admitted_by_the_allowlist"), ""),
    f("volumePluginDir", REJECTED, "FlexVolume plugins are not supported"),
    f("providerID", honoured("crates/kubelet/tests/it/api_node.rs::registers_node_with_capacity_allocatable_node_info_conditions_and_labels"), ""),
    f("kernelMemcgNotification", REJECTED, "memory thresholds are polled, not notified by the kernel"),
    f("logging.format", honoured("crates/rkubelet/tests/it/cli.rs::logging_formats_are_klogs_text_and_component_bases_json"), "text (klog) and json (component-base field names)"),
    f("logging.flushFrequency", WARNED, "log lines are written unbuffered"),
    f("logging.verbosity", honoured("crates/rkubelet/src/cli/tests.rs::precedence_flags_over_drop_ins_over_file_over_defaults"), ""),
    f("logging.vmodule", REJECTED, "per-file verbosity is not implemented (RUST_LOG filters by module)"),
    f("logging.options", REJECTED, "splitStream and infoBufferSize are not implemented"),
    f("enableSystemLogHandler", honoured("crates/kubelet/src/server/routes_tests.rs::system_logs_list_serve_and_refuse_traversal"), ""),
    f("enableSystemLogQuery", REJECTED, "node log queries (NodeLogQuery) are not implemented"),
    f("shutdownGracePeriod", honoured(SHUTDOWN), "logind delay inhibitor lock over the system D-Bus; InhibitDelayMaxSec raised by /etc/systemd/logind.conf.d/99-kubelet.conf; real systemd-logind: dev/vm/guest/tests/shutdown.sh"),
    f("shutdownGracePeriodCriticalPods", honoured(SHUTDOWN_GROUPS), "the last part of shutdownGracePeriod, for system-critical pods"),
    f("shutdownGracePeriodByPodPriority", honoured(SHUTDOWN_GROUPS), "real systemd-logind: dev/vm/guest/tests/shutdown.sh"),
    f("crashLoopBackOff.maxContainerRestartPeriod", honoured("crates/kubelet/tests/it/sync_machinery.rs::crash_loop_backoff_stops_at_the_configured_max"), "needs the KubeletCrashLoopBackOffMax gate; 1s..300s"),
    f("reservedMemory", REJECTED, "only the None memory manager policy is implemented"),
    f("enableProfilingHandler", WARNED_TRUE, "/debug/pprof is not served (there is no Go runtime)"),
    f("enableDebugFlagsHandler", WARNED_TRUE, "/debug/flags/v is not served"),
    f("seccompDefault", honoured("crates/rkubelet/tests/it/containerd_security.rs::seccomp_default_localhost_profiles_and_privileged"), ""),
    f("memoryThrottlingFactor", honoured(NO_OP), "only used with MemoryQoS, which is off (turning it on warns)"),
    f("memoryReservationPolicy", REJECTED, "only the None memory manager policy is implemented"),
    f("registerWithTaints", honoured("crates/kubelet/src/nodestatus/tests.rs::initial_node_labels_taints_annotation_and_status"), ""),
    f("registerNode", honoured(WIRING), ""),
    f("tracing", REJECTED, "OpenTelemetry tracing is not implemented"),
    f("localStorageCapacityIsolation", honoured("crates/kubelet/src/eviction/manager_tests.rs::local_storage_limit_evicts_without_any_threshold"), ""),
    f("containerRuntimeEndpoint", honoured(WIRING), ""),
    f("imageServiceEndpoint", honoured("crates/rkubelet/src/main.rs::image_service_endpoint_dials_its_own_socket"), ""),
    f("failCgroupV1", honoured("crates/node/src/cm/node_setup.rs::fail_cgroup_v1_refuses_a_v1_host"), ""),
    f("userNamespaces", REJECTED, "user-namespaced pods (hostUsers: false) are not supported"),
    f("podHousekeepingPeriod", honoured(WIRING), "rkubelet extension, not an upstream field"),
];

/// What a flag does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagTarget {
    /// Sets the named field (a config-backed flag, deprecated upstream in favour of the file):
    /// honoured or refused exactly as that field's row says.
    Field(&'static str),
    /// A flag-only setting, with what rkubelet does instead when it is not honoured.
    Own(Support, &'static str),
}

const fn cfg(path: &'static str) -> FlagTarget {
    FlagTarget::Field(path)
}

const fn own(support: Support, note: &'static str) -> FlagTarget {
    FlagTarget::Own(support, note)
}

const LOCK: &str =
    "crates/rkubelet/src/lockfile.rs::a_second_holder_waits_and_an_opener_stops_a_watching_holder";

/// Every command-line flag of `rkubelet` (long name without `--`): every flag the upstream
/// 1.33 kubelet accepts on Linux except `--help` (`UPSTREAM_1_33_FLAGS` in
/// `crates/rkubelet/src/cli/upstream_tests.rs` lists them, with its sources, and checks them).
#[rustfmt::skip]
pub const FLAGS: &[(&str, FlagTarget)] = &[
    ("config", own(honoured(LOAD), "")),
    ("config-dir", own(honoured("crates/config/src/load_tests.rs::drop_ins_merge_in_lexical_order"), "")),
    ("kubeconfig", own(honoured("crates/client/src/apiclient/mod.rs::client_from_fixture_kubeconfig_talks_https_with_client_cert"), "")),
    ("hostname-override", own(honoured("crates/rkubelet/src/cli/tests.rs::node_name_and_identity_flags"), "")),
    ("node-ip", own(honoured("crates/kubelet/src/nodestatus/addresses.rs::otherwise_the_default_route_address_of_the_preferred_family"), "unset, `0.0.0.0` or `::`: chosen once at start-up as upstream (host name, name lookup, default route); a given IP is not checked against the host's interfaces")),
    ("node-labels", own(honoured("crates/rkubelet/src/cli/tests.rs::node_labels_parse_and_refuse_foreign_kubernetes_io_labels"), "")),
    ("bootstrap-kubeconfig", own(honoured("crates/kubelet/tests/it/api_certificates.rs::token_bootstrap_to_a_ready_node_with_manual_approval"), "")),
    ("rotate-certificates", cfg("rotateCertificates")),
    ("rotate-server-certificates", cfg("serverTLSBootstrap")),
    ("cert-dir", own(honoured("crates/kubelet/src/server/tls.rs::self_signed_pair_is_generated_once_and_reused"), "")),
    ("root-dir", own(honoured("crates/rkubelet/src/cli/tests.rs::node_name_and_identity_flags"), "")),
    ("image-credential-provider-config", own(honoured("crates/rkubelet/tests/it/containerd_private_image.rs::private_registry_needs_the_pods_pull_secret"), "")),
    ("image-credential-provider-bin-dir", own(honoured("crates/rkubelet/tests/it/containerd_private_image.rs::private_registry_needs_the_pods_pull_secret"), "")),
    ("v", cfg("logging.verbosity")),
    ("feature-gates", cfg("featureGates")),
    ("pod-manifest-path", cfg("staticPodPath")),
    ("sync-frequency", cfg("syncFrequency")),
    ("file-check-frequency", cfg("fileCheckFrequency")),
    ("http-check-frequency", cfg("httpCheckFrequency")),
    ("manifest-url", cfg("staticPodURL")),
    ("manifest-url-header", cfg("staticPodURLHeader")),
    ("address", cfg("address")),
    ("port", cfg("port")),
    ("read-only-port", cfg("readOnlyPort")),
    ("healthz-port", cfg("healthzPort")),
    ("healthz-bind-address", cfg("healthzBindAddress")),
    ("container-runtime-endpoint", cfg("containerRuntimeEndpoint")),
    ("image-service-endpoint", cfg("imageServiceEndpoint")),
    ("runtime-request-timeout", cfg("runtimeRequestTimeout")),
    ("max-pods", cfg("maxPods")),
    ("cluster-dns", cfg("clusterDNS")),
    ("cluster-domain", cfg("clusterDomain")),
    ("resolv-conf", cfg("resolvConf")),
    ("cgroup-driver", cfg("cgroupDriver")),
    ("kubelet-cgroups", cfg("kubeletCgroups")),
    ("system-cgroups", cfg("systemCgroups")),
    ("runtime-cgroups", own(honoured("crates/pods/src/stats/system_tests.rs::system_containers_v1_kubelet_from_its_own_cgroup_runtime_only_when_configured"), "")),
    ("fail-swap-on", cfg("failSwapOn")),
    ("register-node", cfg("registerNode")),
    ("minimum-container-ttl-duration", own(honoured("crates/rkubelet/src/cli/tests.rs::container_gc_flags_and_pod_infra_image"), "")),
    ("maximum-dead-containers-per-container", own(honoured("crates/rkubelet/src/cli/tests.rs::container_gc_flags_and_pod_infra_image"), "")),
    ("maximum-dead-containers", own(honoured("crates/rkubelet/src/cli/tests.rs::container_gc_flags_and_pod_infra_image"), "")),
    ("pod-infra-container-image", own(honoured("crates/rkubelet/src/cli/tests.rs::container_gc_flags_and_pod_infra_image"), "")),
    ("cloud-provider", own(honoured("crates/kubelet/tests/it/api_node.rs::external_cloud_provider_registers_tainted_and_keeps_cloud_addresses"), "")),
    ("provider-id", cfg("providerID")),
    ("register-with-taints", cfg("registerWithTaints")),
    ("logging-format", cfg("logging.format")),
    ("node-status-update-frequency", cfg("nodeStatusUpdateFrequency")),
    // Config-backed flags of upstream `AddKubeletConfigFlags` (1.33) not listed above: each is
    // honoured or refused exactly as its field.
    ("enable-server", cfg("enableServer")),
    ("anonymous-auth", cfg("authentication.anonymous.enabled")),
    ("authentication-token-webhook", cfg("authentication.webhook.enabled")),
    ("authentication-token-webhook-cache-ttl", cfg("authentication.webhook.cacheTTL")),
    ("client-ca-file", cfg("authentication.x509.clientCAFile")),
    ("authorization-mode", cfg("authorization.mode")),
    ("authorization-webhook-cache-authorized-ttl", cfg("authorization.webhook.cacheAuthorizedTTL")),
    ("authorization-webhook-cache-unauthorized-ttl", cfg("authorization.webhook.cacheUnauthorizedTTL")),
    ("tls-cert-file", cfg("tlsCertFile")),
    ("tls-private-key-file", cfg("tlsPrivateKeyFile")),
    ("tls-cipher-suites", cfg("tlsCipherSuites")),
    ("tls-min-version", cfg("tlsMinVersion")),
    ("enable-debugging-handlers", cfg("enableDebuggingHandlers")),
    ("contention-profiling", cfg("enableContentionProfiling")),
    ("registry-qps", cfg("registryPullQPS")),
    ("registry-burst", cfg("registryBurst")),
    ("event-qps", cfg("eventRecordQPS")),
    ("event-burst", cfg("eventBurst")),
    ("kube-api-qps", cfg("kubeAPIQPS")),
    ("kube-api-burst", cfg("kubeAPIBurst")),
    ("kube-api-content-type", cfg("contentType")),
    ("oom-score-adj", cfg("oomScoreAdj")),
    ("max-open-files", cfg("maxOpenFiles")),
    ("protect-kernel-defaults", cfg("protectKernelDefaults")),
    ("make-iptables-util-chains", cfg("makeIPTablesUtilChains")),
    ("fail-cgroupv1", cfg("failCgroupV1")),
    ("kernel-memcg-notification", cfg("kernelMemcgNotification")),
    ("cgroups-per-qos", cfg("cgroupsPerQOS")),
    ("cgroup-root", cfg("cgroupRoot")),
    ("cpu-cfs-quota", cfg("cpuCFSQuota")),
    ("cpu-cfs-quota-period", cfg("cpuCFSQuotaPeriod")),
    ("cpu-manager-policy", cfg("cpuManagerPolicy")),
    ("cpu-manager-policy-options", cfg("cpuManagerPolicyOptions")),
    ("cpu-manager-reconcile-period", cfg("cpuManagerReconcilePeriod")),
    ("memory-manager-policy", cfg("memoryManagerPolicy")),
    ("reserved-memory", cfg("reservedMemory")),
    ("topology-manager-policy", cfg("topologyManagerPolicy")),
    ("topology-manager-scope", cfg("topologyManagerScope")),
    ("topology-manager-policy-options", cfg("topologyManagerPolicyOptions")),
    ("qos-reserved", cfg("qosReserved")),
    ("reserved-cpus", cfg("reservedSystemCPUs")),
    ("system-reserved", cfg("systemReserved")),
    ("kube-reserved", cfg("kubeReserved")),
    ("system-reserved-cgroup", cfg("systemReservedCgroup")),
    ("kube-reserved-cgroup", cfg("kubeReservedCgroup")),
    ("enforce-node-allocatable", cfg("enforceNodeAllocatable")),
    ("pod-cidr", cfg("podCIDR")),
    ("pod-max-pids", cfg("podPidsLimit")),
    ("pods-per-core", cfg("podsPerCore")),
    ("hairpin-mode", cfg("hairpinMode")),
    ("allowed-unsafe-sysctls", cfg("allowedUnsafeSysctls")),
    ("container-log-max-size", cfg("containerLogMaxSize")),
    ("container-log-max-files", cfg("containerLogMaxFiles")),
    ("streaming-connection-idle-timeout", cfg("streamingConnectionIdleTimeout")),
    ("runonce", cfg("runOnce")),
    // A `KubeletFlags` member upstream ORs with the field: `true` turns it on.
    ("seccomp-default", cfg("seccompDefault")),
    ("enable-controller-attach-detach", cfg("enableControllerAttachDetach")),
    ("volume-plugin-dir", cfg("volumePluginDir")),
    ("volume-stats-agg-period", cfg("volumeStatsAggPeriod")),
    ("local-storage-capacity-isolation", cfg("localStorageCapacityIsolation")),
    ("serialize-image-pulls", cfg("serializeImagePulls")),
    ("minimum-image-ttl-duration", cfg("imageMinimumGCAge")),
    ("image-gc-high-threshold", cfg("imageGCHighThresholdPercent")),
    ("image-gc-low-threshold", cfg("imageGCLowThresholdPercent")),
    ("node-status-max-images", cfg("nodeStatusMaxImages")),
    ("eviction-hard", cfg("evictionHard")),
    ("eviction-soft", cfg("evictionSoft")),
    ("eviction-soft-grace-period", cfg("evictionSoftGracePeriod")),
    ("eviction-pressure-transition-period", cfg("evictionPressureTransitionPeriod")),
    ("eviction-max-pod-grace-period", cfg("evictionMaxPodGracePeriod")),
    ("eviction-minimum-reclaim", cfg("evictionMinimumReclaim")),
    // component-base `logsapi.AddFlags` (with the json format the kubelet registers).
    ("log-flush-frequency", cfg("logging.flushFrequency")),
    ("vmodule", cfg("logging.vmodule")),
    ("log-text-split-stream", cfg("logging.options")),
    ("log-text-info-buffer-size", cfg("logging.options")),
    ("log-json-split-stream", cfg("logging.options")),
    ("log-json-info-buffer-size", cfg("logging.options")),
    // Flag-only settings of upstream `KubeletFlags.AddFlags` not listed above.
    ("version", own(honoured("crates/rkubelet/src/flagvalues.rs::version_flag_prints_or_sets_the_reported_version"), "--version and --version=raw print and quit; --version=vX.Y.Z-... sets the reported version")),
    ("lock-file", own(honoured(LOCK), "an exclusive flock, waited for while another process holds it")),
    ("exit-on-lock-contention", own(honoured(LOCK), "needs --lock-file; the kubelet stops (pods keep running) when another process opens the lock file")),
    ("cloud-config", own(WARNED, "no effect: rkubelet has no in-tree cloud provider (deprecated upstream)")),
    ("experimental-mounter-path", own(REJECTED, "volumes are mounted with mount(2), never through a helper binary (deprecated upstream)")),
    ("experimental-allocatable-ignore-eviction", own(REJECTED, "hard eviction thresholds are always subtracted from allocatable (deprecated upstream)")),
    ("register-schedulable", own(REJECTED, "only true: the node registers schedulable; --register-with-taints keeps pods off (deprecated upstream)")),
];

/// The table row of `path`.
pub fn field(path: &str) -> Option<&'static FieldSupport> {
    FIELDS.iter().find(|f| f.path == path)
}

/// The flags that set the field at `path`, for messages and the docs.
fn flags_of(path: &str) -> Vec<&'static str> {
    FLAGS
        .iter()
        .filter_map(|(flag, target)| match target {
            FlagTarget::Field(p) if *p == path => Some(*flag),
            _ => None,
        })
        .collect()
}

fn label(path: &str) -> String {
    let flags = flags_of(path);
    if flags.is_empty() {
        return path.to_owned();
    }
    let names: Vec<String> = flags.iter().map(|f| format!("--{f}")).collect();
    format!("{path} ({})", names.join(", "))
}

/// The value at a dotted path of a JSON document (`None`: absent).
fn at<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(doc, |v, key| v.get(key))
}

/// The configuration an empty file would give, with the same feature gates (some defaults
/// depend on them), as a JSON document in the serialized form.
fn default_document(kc: &KubeletConfiguration) -> Result<Value, ConfigError> {
    let mut doc = Map::new();
    if !kc.feature_gates.is_empty() {
        doc.insert(
            "featureGates".into(),
            serde_json::to_value(&kc.feature_gates).unwrap_or(Value::Null),
        );
    }
    apply_defaults(&mut doc);
    let defaults: KubeletConfiguration =
        serde_json::from_value(Value::Object(doc)).map_err(|e| ConfigError::Field {
            path: "(defaults)".into(),
            field: String::new(),
            message: e.to_string(),
        })?;
    Ok(serde_json::to_value(defaults).unwrap_or(Value::Null))
}

/// Go's zero value (or absent): `omitempty` drops these, so they all mean "unset".
fn is_zero(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.values().all(|v| is_zero(Some(v))),
        Some(Value::Bool(true)) => false,
    }
}

/// Whether two serialized values mean the same setting: equal, both unset, or quantities of
/// the same amount written differently (`0` and `0Mi`), member by member.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    if a == b || (is_zero(a) && is_zero(b)) {
        return true;
    }
    match (a, b) {
        (Some(Value::String(x)), Some(Value::String(y))) => {
            matches!((Quantity::parse(x), Quantity::parse(y)), (Ok(p), Ok(q)) if p == q)
        }
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.keys().chain(y.keys()).all(|k| same(x.get(k), y.get(k)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(Some(p), Some(q)))
        }
        _ => false,
    }
}

fn show(v: Option<&Value>) -> String {
    match v {
        Some(v) if !is_zero(Some(v)) => v.to_string(),
        Some(Value::Bool(false)) => "false".to_owned(),
        _ => "unset".to_owned(),
    }
}

/// Applies the table to `kc`: rejected fields off their default are errors (all of them, in
/// one [`ConfigError::Unsupported`]); warned fields, gates turned on that rkubelet does not
/// implement, and explicitly set GA or deprecated gates give the returned warnings.
pub fn check(kc: &KubeletConfiguration) -> Result<Vec<String>, ConfigError> {
    let ours = serde_json::to_value(kc).unwrap_or(Value::Null);
    let defaults = default_document(kc)?;
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for row in FIELDS {
        let (value, default) = (at(&ours, row.path), at(&defaults, row.path));
        let is_default = same(value, default);
        let default_text = if is_zero(default) {
            String::new()
        } else {
            format!(" {}", show(default))
        };
        match row.support {
            Support::RejectedUnlessDefault if !is_default => errors.push(format!(
                "{} is set to {}, which rkubelet does not support ({}); only the default{default_text} is",
                label(row.path),
                show(value),
                row.note
            )),
            Support::Warned if !is_default => warnings.push(format!(
                "{} is set to {}, which rkubelet does not implement yet: {}",
                label(row.path),
                show(value),
                row.note
            )),
            Support::WarnedWhenTrue if value == Some(&Value::Bool(true)) => {
                warnings.push(format!(
                    "{} is true, which rkubelet does not implement: {}",
                    label(row.path),
                    row.note
                ))
            }
            _ => {}
        }
    }
    if !errors.is_empty() {
        return Err(ConfigError::Unsupported(errors));
    }
    if let Ok((gates, gate_warnings)) = FeatureGates::from_map(&kc.feature_gates) {
        warnings.extend(gate_warnings);
        warnings.extend(gates.unhonoured_warnings());
    }
    Ok(warnings)
}

/// The words and proof of a status, as the docs show them.
fn status(support: Support) -> (&'static str, String) {
    match support {
        Support::Honoured { test } => ("honoured", format!("`{test}`")),
        Support::RejectedUnlessDefault => ("rejected unless default", String::new()),
        Support::RejectedByValidation { test } => {
            ("rejected unless supported value", format!("`{test}`"))
        }
        Support::Warned => ("warned unless default", String::new()),
        Support::WarnedWhenTrue => ("warned while true", String::new()),
    }
}

/// The statuses a row of `docs/configuration.md` may have: honoured, refused or warned.
pub const STATUSES: &[&str] = &[
    "honoured",
    "rejected unless default",
    "rejected unless supported value",
    "warned unless default",
    "warned while true",
];

/// The Markdown table for `docs/configuration.md`.
pub fn render_markdown() -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let joined = |proof: String, note: &str| match (proof.is_empty(), note.is_empty()) {
        (_, true) => proof,
        (true, false) => cell(note),
        (false, false) => format!("{proof}; {}", cell(note)),
    };
    let mut out = String::from("| Field | Flag | Status | Proof / note |\n|---|---|---|---|\n");
    for row in FIELDS {
        let flags: Vec<String> = flags_of(row.path)
            .iter()
            .map(|f| format!("`--{f}`"))
            .collect();
        let (what, proof) = status(row.support);
        out.push_str(&format!(
            "| `{}` | {} | {what} | {} |\n",
            row.path,
            flags.join(", "),
            joined(proof, row.note)
        ));
    }
    out.push_str("\n| Flag-only setting | Status | Proof / note |\n|---|---|---|\n");
    for (flag, target) in FLAGS {
        if let FlagTarget::Own(support, note) = target {
            let (what, proof) = status(*support);
            out.push_str(&format!(
                "| `--{flag}` | {what} | {} |\n",
                joined(proof, note)
            ));
        }
    }
    out
}

#[cfg(test)]
#[path = "support_tests.rs"]
mod tests;
