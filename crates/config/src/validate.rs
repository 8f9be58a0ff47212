//! Validation of the effective kubelet configuration.
//! Owns: upstream `ValidateKubeletConfiguration` checks, the eviction-threshold checks upstream
//! makes at startup (`ParseThresholdConfig`), and a few checks rkubelet adds where upstream
//! would crash later (non-positive loop periods). Receives a loaded config (after flags);
//! emits every problem at once, each message naming its field (and flag).

use super::ConfigError;
use super::duration::Duration;
use super::features::{Feature, FeatureGates};
use super::quantity::ThresholdValue;
use super::types::KubeletConfiguration;

/// Eviction signals the Linux kubelet understands.
pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
];

fn valid_port(p: i32) -> bool {
    (1..=65535).contains(&p)
}

/// Go `filepath.Clean(p) == p` for an absolute path.
fn is_clean_abs(p: &str) -> bool {
    p == "/"
        || (p.starts_with('/')
            && !p.ends_with('/')
            && p[1..]
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."))
}

/// Upstream `cpuset.Parse` syntax: `0-3,5,7-9`.
fn is_cpuset(s: &str) -> bool {
    s.split(',').all(|part| {
        let mut bounds = part.splitn(2, '-').map(|n| n.parse::<u32>());
        match (bounds.next(), bounds.next()) {
            (Some(Ok(_)), None) => true,
            (Some(Ok(lo)), Some(Ok(hi))) => lo <= hi,
            _ => false,
        }
    })
}

/// Checks `kc`; all failures are reported together in [`ConfigError::Invalid`].
pub fn validate(kc: &KubeletConfiguration) -> Result<(), ConfigError> {
    let mut errs: Vec<String> = Vec::new();
    // Upstream validates the gates first (unknown names, locked gates) with its own wording.
    let gates = match FeatureGates::from_map(&kc.feature_gates) {
        Ok((g, _)) => g,
        Err(e) => {
            errs.push(e.to_string());
            FeatureGates::default()
        }
    };
    validate_node_lease(kc, &mut errs);
    validate_cgroups(kc, &mut errs);
    validate_rates_and_limits(kc, &mut errs);
    validate_ports(kc, &mut errs);
    validate_cpu_cfs_quota_period(kc, &gates, &mut errs);
    validate_image_gc(kc, &gates, &mut errs);
    validate_int_ranges(kc, &mut errs);
    validate_image_pulls(kc, &mut errs);
    validate_server_tls_bootstrap(kc, &gates, &mut errs);
    validate_register_with_taints(kc, &mut errs);
    validate_topology_manager(kc, &mut errs);
    validate_shutdown(kc, &gates, &mut errs);
    validate_swap(kc, &gates, &mut errs);
    validate_enforce_node_allocatable(kc, &mut errs);
    validate_hairpin_mode(kc, &mut errs);
    validate_reserved_system_cpus(kc, &mut errs);
    validate_logging_and_tracing(kc, &gates, &mut errs);
    validate_memory_throttling_factor(kc, &mut errs);
    validate_runtime_endpoint(kc, &mut errs);
    validate_system_log_query(kc, &gates, &mut errs);
    validate_container_logs(kc, &mut errs);
    validate_eviction(kc, &mut errs);
    validate_resource_managers(kc, &mut errs);
    validate_crash_loop_back_off(kc, &mut errs);
    validate_always_on_gates(kc, &mut errs);
    validate_loop_periods(kc, &mut errs);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid(errs))
    }
}

/// Pushes `msg` onto `errs` when `cond` holds.
fn push_if(errs: &mut Vec<String>, cond: bool, msg: String) {
    if cond {
        errs.push(msg);
    }
}

/// `nodeLeaseDurationSeconds`: the lease must last.
fn validate_node_lease(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    push_if(
        errs,
        kc.node_lease_duration_seconds <= 0,
        "nodeLeaseDurationSeconds must be greater than 0".into(),
    );
}

/// Cgroups: node allocatable needs cgroups per QoS, the driver, system cgroups.
fn validate_cgroups(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    push_if(errs,
        !kc.cgroups_per_qos && !kc.enforce_node_allocatable.is_empty(),
        "enforceNodeAllocatable (--enforce-node-allocatable) is not supported unless cgroupsPerQOS (--cgroups-per-qos) is set to true".into(),
    );
    match kc.cgroup_driver.as_str() {
        "cgroupfs" | "systemd" => {}
        other => push_if(
            errs,
            true,
            format!(
                "cgroupDriver (--cgroup-driver) {other:?} is invalid: expected \"cgroupfs\" or \"systemd\""
            ),
        ),
    }
    push_if(errs,
        !kc.system_cgroups.is_empty() && kc.cgroup_root.is_empty(),
        "systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified".into(),
    );
}

/// QPS, bursts and counts that must not be negative.
fn validate_rates_and_limits(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    for (v, name) in [
        (kc.event_burst, "eventBurst (--event-burst)"),
        (kc.event_record_qps, "eventRecordQPS (--event-qps)"),
        (kc.kube_api_burst, "kubeAPIBurst (--kube-api-burst)"),
        (kc.kube_api_qps, "kubeAPIQPS (--kube-api-qps)"),
        (kc.max_pods, "maxPods (--max-pods)"),
        (kc.pods_per_core, "podsPerCore (--pods-per-core)"),
        (kc.registry_burst, "registryBurst (--registry-burst)"),
        (kc.registry_pull_qps, "registryPullQPS (--registry-qps)"),
    ] {
        push_if(
            errs,
            v < 0,
            format!("{name} {v} must not be a negative number"),
        );
    }
    push_if(
        errs,
        kc.max_open_files < 0,
        format!(
            "maxOpenFiles (--max-open-files) {} must not be a negative number",
            kc.max_open_files
        ),
    );
}

/// Ports: healthz, HTTPS and read-only.
fn validate_ports(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    push_if(
        errs,
        kc.healthz_port != 0 && !valid_port(kc.healthz_port),
        format!(
            "healthzPort (--healthz-port) {} must be between 1 and 65535, inclusive",
            kc.healthz_port
        ),
    );
    push_if(
        errs,
        !valid_port(kc.port),
        format!(
            "port (--port) {} must be between 1 and 65535, inclusive",
            kc.port
        ),
    );
    push_if(
        errs,
        kc.read_only_port != 0 && !valid_port(kc.read_only_port),
        format!(
            "readOnlyPort (--read-only-port) {} must be between 0 and 65535, inclusive",
            kc.read_only_port
        ),
    );
}

/// `cpuCFSQuotaPeriod`: only the default without `CustomCPUCFSQuotaPeriod`.
fn validate_cpu_cfs_quota_period(
    kc: &KubeletConfiguration,
    gates: &FeatureGates,
    errs: &mut Vec<String>,
) {
    let cfs = kc.cpu_cfs_quota_period;
    if gates.enabled(Feature::CustomCpuCfsQuotaPeriod) {
        push_if(
            errs,
            cfs < Duration::from_millis(1) || cfs > Duration::from_secs(1),
            format!(
                "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {cfs} must be between 1ms and 1sec, inclusive"
            ),
        );
    } else {
        push_if(
            errs,
            cfs != Duration::from_millis(100),
            format!(
                "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {cfs} requires feature gate CustomCPUCFSQuotaPeriod"
            ),
        );
    }
}

/// Image garbage collection: thresholds and ages.
fn validate_image_gc(kc: &KubeletConfiguration, gates: &FeatureGates, errs: &mut Vec<String>) {
    let (high, low) = (
        kc.image_gc_high_threshold_percent,
        kc.image_gc_low_threshold_percent,
    );
    push_if(
        errs,
        !(0..=100).contains(&high),
        format!(
            "imageGCHighThresholdPercent (--image-gc-high-threshold) {high} must be between 0 and 100, inclusive"
        ),
    );
    push_if(
        errs,
        !(0..=100).contains(&low),
        format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be between 0 and 100, inclusive"
        ),
    );
    push_if(
        errs,
        low >= high,
        format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"
        ),
    );
    let (max_age, min_age) = (kc.image_maximum_gc_age, kc.image_minimum_gc_age);
    push_if(errs,
        !max_age.is_zero() && !gates.enabled(Feature::ImageMaximumGcAge),
        "ImageMaximumGCAge feature gate is required for Kubelet configuration option imageMaximumGCAge".into(),
    );
    push_if(
        errs,
        max_age.is_negative(),
        format!("imageMaximumGCAge {max_age} must not be negative"),
    );
    push_if(
        errs,
        max_age > Duration::ZERO && max_age <= min_age,
        format!("imageMaximumGCAge {max_age} must be greater than imageMinimumGCAge {min_age}"),
    );
}

/// Integer ranges: iptables bits, `nodeStatusMaxImages`, `oomScoreAdj`.
fn validate_int_ranges(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    for (v, name) in [
        (
            kc.iptables_drop_bit,
            "iptablesDropBit (--iptables-drop-bit)",
        ),
        (
            kc.iptables_masquerade_bit,
            "iptablesMasqueradeBit (--iptables-masquerade-bit)",
        ),
    ] {
        push_if(
            errs,
            !(0..=31).contains(&v),
            format!("{name} {v} must be between 0 and 31, inclusive"),
        );
    }
    push_if(
        errs,
        kc.node_status_max_images < -1,
        format!(
            "nodeStatusMaxImages (--node-status-max-images) {} must be -1 or greater",
            kc.node_status_max_images
        ),
    );
    push_if(
        errs,
        !(-1000..=1000).contains(&kc.oom_score_adj),
        format!(
            "oomScoreAdj (--oom-score-adj) {} must be between -1000 and 1000, inclusive",
            kc.oom_score_adj
        ),
    );
}

/// `maxParallelImagePulls` and its interplay with serialized pulls.
fn validate_image_pulls(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    if let Some(n) = kc.max_parallel_image_pulls {
        push_if(
            errs,
            n < 1,
            format!("maxParallelImagePulls {n} must be a positive number"),
        );
        push_if(errs,
            kc.serialize_image_pulls && n > 1,
            "maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false".into(),
        );
    }
}

/// `serverTLSBootstrap` needs `RotateKubeletServerCertificate`.
fn validate_server_tls_bootstrap(
    kc: &KubeletConfiguration,
    gates: &FeatureGates,
    errs: &mut Vec<String>,
) {
    push_if(
        errs,
        kc.server_tls_bootstrap && !gates.enabled(Feature::RotateKubeletServerCertificate),
        "serverTLSBootstrap true requires feature gate RotateKubeletServerCertificate".into(),
    );
}

/// `registerWithTaints`: key, effect and no `timeAdded`.
fn validate_register_with_taints(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    for taint in &kc.register_with_taints {
        let effect_ok = matches!(
            taint.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        );
        push_if(
            errs,
            taint.key.is_empty() || !effect_ok,
            format!(
                "registerWithTaints: invalid taint {}={}:{}",
                taint.key,
                taint.value.as_deref().unwrap_or(""),
                taint.effect
            ),
        );
        push_if(
            errs,
            taint.time_added.is_some(),
            "registerWithTaints: taint.TimeAdded is not nil".into(),
        );
    }
}

/// Topology manager policy and scope (upstream's values).
fn validate_topology_manager(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    let policies = ["none", "best-effort", "restricted", "single-numa-node"];
    push_if(
        errs,
        !policies.contains(&kc.topology_manager_policy.as_str()),
        format!(
            "topologyManagerPolicy (--topology-manager-policy) {:?} must be one of: {policies:?}",
            kc.topology_manager_policy
        ),
    );
    push_if(
        errs,
        !matches!(kc.topology_manager_scope.as_str(), "container" | "pod"),
        format!(
            "topologyManagerScope (--topology-manager-scope) {:?} must be one of: \"container\", or \"pod\"",
            kc.topology_manager_scope
        ),
    );
}

/// Graceful node shutdown periods and their feature gates.
fn validate_shutdown(kc: &KubeletConfiguration, gates: &FeatureGates, errs: &mut Vec<String>) {
    let (grace, critical) = (
        kc.shutdown_grace_period,
        kc.shutdown_grace_period_critical_pods,
    );
    let sub_second =
        |d: Duration| d.is_negative() || (d > Duration::ZERO && d < Duration::from_secs(1));
    if gates.enabled(Feature::GracefulNodeShutdown) {
        push_if(
            errs,
            critical > grace,
            format!(
                "shutdownGracePeriodCriticalPods {critical} must be <= shutdownGracePeriod {grace}"
            ),
        );
        push_if(
            errs,
            sub_second(grace),
            format!("shutdownGracePeriod {grace} must be either zero or otherwise >= 1 sec"),
        );
        push_if(
            errs,
            sub_second(critical),
            format!(
                "shutdownGracePeriodCriticalPods {critical} must be either zero or otherwise >= 1 sec"
            ),
        );
    } else {
        push_if(errs,
            grace > Duration::ZERO || critical > Duration::ZERO,
            "specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown".into(),
        );
    }
    let by_priority = !kc.shutdown_grace_period_by_pod_priority.is_empty();
    if gates.enabled(Feature::GracefulNodeShutdownBasedOnPodPriority) {
        push_if(errs,
            by_priority && (grace > Duration::ZERO || critical > Duration::ZERO),
            "Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time".into(),
        );
    } else {
        push_if(errs, by_priority, "Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority".into());
    }
}

/// `memorySwap.swapBehavior` and the `NodeSwap` gate.
fn validate_swap(kc: &KubeletConfiguration, gates: &FeatureGates, errs: &mut Vec<String>) {
    let swap = kc.memory_swap.swap_behavior.as_str();
    if gates.enabled(Feature::NodeSwap) {
        push_if(
            errs,
            !matches!(swap, "" | "NoSwap" | "LimitedSwap"),
            format!(
                "memorySwap.swapBehavior {swap:?} must be one of: \"\", \"LimitedSwap\" or \"NoSwap\""
            ),
        );
    } else {
        push_if(
            errs,
            !swap.is_empty(),
            "memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled".into(),
        );
    }
}

/// `enforceNodeAllocatable` values and the cgroups they need.
fn validate_enforce_node_allocatable(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    for val in &kc.enforce_node_allocatable {
        match val.as_str() {
            "pods" => {}
            "system-reserved" | "system-reserved-compressible" => push_if(errs,
                kc.system_reserved_cgroup.is_empty(),
                format!("systemReservedCgroup (--system-reserved-cgroup) must be specified when {val:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)"),
            ),
            "kube-reserved" | "kube-reserved-compressible" => push_if(errs,
                kc.kube_reserved_cgroup.is_empty(),
                format!("kubeReservedCgroup (--kube-reserved-cgroup) must be specified when {val:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)"),
            ),
            "none" => push_if(errs,
                kc.enforce_node_allocatable.len() > 1,
                "enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when \"none\" is specified".into(),
            ),
            other => push_if(errs,
                true,
                format!("option {other:?} specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are \"pods\", \"system-reserved\", \"kube-reserved\", or \"none\""),
            ),
        }
    }
}

/// `hairpinMode`.
fn validate_hairpin_mode(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    push_if(
        errs,
        !matches!(
            kc.hairpin_mode.as_str(),
            "none" | "hairpin-veth" | "promiscuous-bridge"
        ),
        format!(
            "option {:?} specified for hairpinMode (--hairpin-mode). Valid options are \"none\", \"hairpin-veth\" or \"promiscuous-bridge\"",
            kc.hairpin_mode
        ),
    );
}

/// `reservedSystemCPUs`: a cpuset, not with reserved cgroups.
fn validate_reserved_system_cpus(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    if !kc.reserved_system_cpus.is_empty() {
        push_if(errs,
            !kc.system_reserved_cgroup.is_empty() || !kc.kube_reserved_cgroup.is_empty(),
            "can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)".into(),
        );
        push_if(
            errs,
            !is_cpuset(&kc.reserved_system_cpus),
            format!(
                "unable to parse reservedSystemCPUs (--reserved-cpus) {:?}",
                kc.reserved_system_cpus
            ),
        );
    }
}

/// `logging.format` and `tracing` (behind `KubeletTracing`).
fn validate_logging_and_tracing(
    kc: &KubeletConfiguration,
    gates: &FeatureGates,
    errs: &mut Vec<String>,
) {
    push_if(
        errs,
        !matches!(kc.logging.format.as_str(), "text" | "json"),
        format!(
            "logging.format: Unsupported value: {:?}: supported values: \"text\", \"json\"",
            kc.logging.format
        ),
    );
    push_if(
        errs,
        kc.tracing.is_some() && !gates.enabled(Feature::KubeletTracing),
        "tracing should not be configured if KubeletTracing feature flag is disabled.".into(),
    );
}

/// `memoryThrottlingFactor` in (0, 1].
fn validate_memory_throttling_factor(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    let factor = kc.memory_throttling_factor;
    push_if(
        errs,
        !(factor > 0.0 && factor <= 1.0),
        format!(
            "memoryThrottlingFactor {factor} must be greater than 0 and less than or equal to 1.0"
        ),
    );
}

/// `containerRuntimeEndpoint` must be set.
fn validate_runtime_endpoint(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    push_if(
        errs,
        kc.container_runtime_endpoint.is_empty(),
        "the containerRuntimeEndpoint was not specified or empty".into(),
    );
}

/// `enableSystemLogQuery`: its gate and the log handler.
fn validate_system_log_query(
    kc: &KubeletConfiguration,
    gates: &FeatureGates,
    errs: &mut Vec<String>,
) {
    let log_query = kc.enable_system_log_query.unwrap_or(false);
    push_if(
        errs,
        log_query && !gates.enabled(Feature::NodeLogQuery),
        "NodeLogQuery feature gate is required for enableSystemLogHandler".into(),
    );
    push_if(
        errs,
        log_query && !kc.enable_system_log_handler,
        "enableSystemLogHandler is required for enableSystemLogQuery".into(),
    );
}

/// Container logs: workers, monitor interval, `podLogsDir`, rotation limits.
fn validate_container_logs(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    push_if(
        errs,
        kc.container_log_max_workers < 1,
        "containerLogMaxWorkers must be greater than or equal to 1".into(),
    );
    push_if(
        errs,
        kc.container_log_monitor_interval < Duration::from_secs(3),
        "containerLogMonitorInterval must be a positive time duration greater than or equal to 3s"
            .into(),
    );
    let logs = kc.pod_logs_dir.as_str();
    push_if(errs, logs.is_empty(), "podLogsDir was not specified".into());
    push_if(
        errs,
        !logs.starts_with('/'),
        format!("pod logs path {logs:?} must be absolute path"),
    );
    push_if(
        errs,
        logs.starts_with('/') && !is_clean_abs(logs),
        format!("pod logs path {logs:?} must be normalized"),
    );
    push_if(
        errs,
        !logs.is_ascii(),
        format!("pod logs path {logs:?} must contain ASCII characters only"),
    );

    // Checks upstream makes later, at startup (container log manager, eviction manager).
    push_if(
        errs,
        kc.container_log_max_files <= 1,
        format!(
            "containerLogMaxFiles (--container-log-max-files) {} must be greater than 1",
            kc.container_log_max_files
        ),
    );
    push_if(
        errs,
        kc.container_log_max_size.is_negative(),
        format!(
            "containerLogMaxSize (--container-log-max-size) {} must not be negative",
            kc.container_log_max_size
        ),
    );
}

/// rkubelet: periods that drive loops must be positive (upstream would panic creating a ticker).
fn validate_loop_periods(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    for (d, name) in [
        (kc.sync_frequency, "syncFrequency (--sync-frequency)"),
        (
            kc.file_check_frequency,
            "fileCheckFrequency (--file-check-frequency)",
        ),
        (
            kc.http_check_frequency,
            "httpCheckFrequency (--http-check-frequency)",
        ),
        (
            kc.node_status_update_frequency,
            "nodeStatusUpdateFrequency (--node-status-update-frequency)",
        ),
        (kc.node_status_report_frequency, "nodeStatusReportFrequency"),
        (
            kc.runtime_request_timeout,
            "runtimeRequestTimeout (--runtime-request-timeout)",
        ),
        (kc.pod_housekeeping_period, "podHousekeepingPeriod"),
    ] {
        if d <= Duration::ZERO {
            errs.push(format!("{name} {d} must be greater than 0"));
        }
    }
}

/// `crashLoopBackOff.maxContainerRestartPeriod` (upstream `KubeletCrashLoopBackOffMax`): only
/// with the feature gate, and then between 1s and 300s.
fn validate_crash_loop_back_off(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    let Some(max) = kc.crash_loop_back_off.max_container_restart_period else {
        return;
    };
    if !kc.gates().enabled(Feature::KubeletCrashLoopBackOffMax) {
        errs.push(
            "crashLoopBackOff.maxContainerRestartPeriod must not be set: feature gate KubeletCrashLoopBackOffMax is not enabled".into(),
        );
    } else if max < Duration::from_secs(1) || max > Duration::from_secs(300) {
        errs.push(format!(
            "crashLoopBackOff.maxContainerRestartPeriod {max} must be between 1s and 5m0s, inclusive"
        ));
    }
}

/// Gates whose behaviour rkubelet always has: turning one off would be silently ignored, so it
/// is refused by name.
fn validate_always_on_gates(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    let gates = kc.gates();
    // Gates rkubelet does not implement yet whose on value pods would rely on.
    errs.extend(gates.refused());
    for (feature, what) in [
        (
            Feature::PodObservedGenerationTracking,
            "observedGeneration is always reported in pod status",
        ),
        (
            Feature::InPlacePodVerticalScaling,
            "in-place pod resize (pods/resize) is always served",
        ),
    ] {
        if !gates.enabled(feature) {
            errs.push(format!(
                "featureGates.{}=false is not supported by rkubelet: {what}",
                feature.name()
            ));
        }
    }
}

/// CPU, memory and topology manager settings: upstream's values, minus what rkubelet does not
/// implement yet (refused by name instead of silently ignored).
fn validate_resource_managers(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    let topology = kc.topology_manager_policy.as_str();
    if matches!(topology, "best-effort" | "restricted" | "single-numa-node") {
        errs.push(format!(
            "topologyManagerPolicy (--topology-manager-policy) {topology:?} is not implemented yet by rkubelet: only \"none\" is supported"
        ));
    }
    if let Some(name) = kc.topology_manager_policy_options.keys().next() {
        errs.push(format!(
            "topologyManagerPolicyOptions (--topology-manager-policy-options): option {name:?} is not implemented yet by rkubelet"
        ));
    }
    match kc.memory_manager_policy.as_str() {
        "" | "None" => {}
        "Static" => errs.push(
            "memoryManagerPolicy (--memory-manager-policy) \"Static\" is not implemented yet by rkubelet: only \"None\" is supported".into(),
        ),
        other => errs.push(format!(
            "memoryManagerPolicy (--memory-manager-policy) {other:?} must be one of: \"None\", \"Static\""
        )),
    }
    let cpu = kc.cpu_manager_policy.as_str();
    if !matches!(cpu, "" | "none" | "static") {
        errs.push(format!(
            "cpuManagerPolicy (--cpu-manager-policy) {cpu:?} must be one of: \"none\", \"static\""
        ));
    }
    // Upstream's static policy options; none of them is implemented yet.
    const UPSTREAM_CPU_OPTIONS: &[&str] = &[
        "full-pcpus-only",
        "distribute-cpus-across-numa",
        "align-by-socket",
        "distribute-cpus-across-cores",
        "strict-cpu-reservation",
        "prefer-align-cpus-by-uncorecache",
    ];
    for (name, value) in &kc.cpu_manager_policy_options {
        if matches!(cpu, "" | "none") {
            errs.push("cpuManagerPolicyOptions (--cpu-manager-policy-options): None policy: cannot set policy options".into());
            break;
        }
        errs.push(if UPSTREAM_CPU_OPTIONS.contains(&name.as_str()) {
            format!("cpuManagerPolicyOptions (--cpu-manager-policy-options): option {name:?} is not implemented yet by rkubelet")
        } else {
            format!("cpuManagerPolicyOptions (--cpu-manager-policy-options): unsupported cpumanager option: {name:?} ({value})")
        });
    }
    if kc.cpu_manager_reconcile_period <= Duration::ZERO && cpu == "static" {
        errs.push(format!(
            "cpuManagerReconcilePeriod (--cpu-manager-reconcile-period) {} must be greater than 0",
            kc.cpu_manager_reconcile_period
        ));
    }
}

fn validate_eviction(kc: &KubeletConfiguration, errs: &mut Vec<String>) {
    let known = |s: &str| EVICTION_SIGNALS.contains(&s);
    for (field, map) in [
        ("evictionHard", &kc.eviction_hard),
        ("evictionSoft", &kc.eviction_soft),
    ] {
        for (signal, value) in map {
            if !known(signal) {
                errs.push(format!("{field}: unsupported eviction signal {signal:?}"));
            } else if let ThresholdValue::Quantity(q) = value
                && q.is_zero()
            {
                errs.push(format!(
                    "{field}: eviction threshold {signal} must be positive: {q}"
                ));
            }
        }
    }
    for (signal, value) in &kc.eviction_soft {
        if known(signal)
            && !value.disables_signal()
            && !kc.eviction_soft_grace_period.contains_key(signal)
        {
            errs.push(format!("evictionSoftGracePeriod: grace period must be specified for the soft eviction threshold {signal}"));
        }
    }
    for (signal, grace) in &kc.eviction_soft_grace_period {
        if !known(signal) {
            errs.push(format!(
                "evictionSoftGracePeriod: unsupported eviction signal {signal:?}"
            ));
        }
        if grace.is_negative() {
            errs.push(format!("evictionSoftGracePeriod: invalid eviction grace period specified: {grace}, must be a positive value"));
        }
    }
    for (signal, value) in &kc.eviction_minimum_reclaim {
        if !known(signal) {
            errs.push(format!(
                "evictionMinimumReclaim: unsupported eviction signal {signal:?}"
            ));
        } else if value.fraction().is_some_and(|f| f <= 0.0) {
            errs.push(format!("evictionMinimumReclaim: eviction percentage minimum reclaim {signal} must be positive: {value}"));
        }
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
