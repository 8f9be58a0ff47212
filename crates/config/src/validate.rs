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
    let gate = |f: Feature| gates.enabled(f);
    let mut err = |cond: bool, msg: String| {
        if cond {
            errs.push(msg);
        }
    };

    err(
        kc.node_lease_duration_seconds <= 0,
        "nodeLeaseDurationSeconds must be greater than 0".into(),
    );
    err(
        !kc.cgroups_per_qos && !kc.enforce_node_allocatable.is_empty(),
        "enforceNodeAllocatable (--enforce-node-allocatable) is not supported unless cgroupsPerQOS (--cgroups-per-qos) is set to true".into(),
    );
    match kc.cgroup_driver.as_str() {
        "cgroupfs" | "systemd" => {}
        other => err(
            true,
            format!(
                "cgroupDriver (--cgroup-driver) {other:?} is invalid: expected \"cgroupfs\" or \"systemd\""
            ),
        ),
    }
    err(
        !kc.system_cgroups.is_empty() && kc.cgroup_root.is_empty(),
        "systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified".into(),
    );
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
        err(v < 0, format!("{name} {v} must not be a negative number"));
    }
    err(
        kc.max_open_files < 0,
        format!(
            "maxOpenFiles (--max-open-files) {} must not be a negative number",
            kc.max_open_files
        ),
    );
    err(
        kc.healthz_port != 0 && !valid_port(kc.healthz_port),
        format!(
            "healthzPort (--healthz-port) {} must be between 1 and 65535, inclusive",
            kc.healthz_port
        ),
    );
    err(
        !valid_port(kc.port),
        format!(
            "port (--port) {} must be between 1 and 65535, inclusive",
            kc.port
        ),
    );
    err(
        kc.read_only_port != 0 && !valid_port(kc.read_only_port),
        format!(
            "readOnlyPort (--read-only-port) {} must be between 0 and 65535, inclusive",
            kc.read_only_port
        ),
    );
    let cfs = kc.cpu_cfs_quota_period;
    if gate(Feature::CustomCpuCfsQuotaPeriod) {
        err(
            cfs < Duration::from_millis(1) || cfs > Duration::from_secs(1),
            format!(
                "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {cfs} must be between 1ms and 1sec, inclusive"
            ),
        );
    } else {
        err(
            cfs != Duration::from_millis(100),
            format!(
                "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {cfs} requires feature gate CustomCPUCFSQuotaPeriod"
            ),
        );
    }
    let (high, low) = (
        kc.image_gc_high_threshold_percent,
        kc.image_gc_low_threshold_percent,
    );
    err(
        !(0..=100).contains(&high),
        format!(
            "imageGCHighThresholdPercent (--image-gc-high-threshold) {high} must be between 0 and 100, inclusive"
        ),
    );
    err(
        !(0..=100).contains(&low),
        format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be between 0 and 100, inclusive"
        ),
    );
    err(
        low >= high,
        format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"
        ),
    );
    let (max_age, min_age) = (kc.image_maximum_gc_age, kc.image_minimum_gc_age);
    err(
        !max_age.is_zero() && !gate(Feature::ImageMaximumGcAge),
        "ImageMaximumGCAge feature gate is required for Kubelet configuration option imageMaximumGCAge".into(),
    );
    err(
        max_age.is_negative(),
        format!("imageMaximumGCAge {max_age} must not be negative"),
    );
    err(
        max_age > Duration::ZERO && max_age <= min_age,
        format!("imageMaximumGCAge {max_age} must be greater than imageMinimumGCAge {min_age}"),
    );
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
        err(
            !(0..=31).contains(&v),
            format!("{name} {v} must be between 0 and 31, inclusive"),
        );
    }
    err(
        kc.node_status_max_images < -1,
        format!(
            "nodeStatusMaxImages (--node-status-max-images) {} must be -1 or greater",
            kc.node_status_max_images
        ),
    );
    err(
        !(-1000..=1000).contains(&kc.oom_score_adj),
        format!(
            "oomScoreAdj (--oom-score-adj) {} must be between -1000 and 1000, inclusive",
            kc.oom_score_adj
        ),
    );
    if let Some(n) = kc.max_parallel_image_pulls {
        err(
            n < 1,
            format!("maxParallelImagePulls {n} must be a positive number"),
        );
        err(
            kc.serialize_image_pulls && n > 1,
            "maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false".into(),
        );
    }
    err(
        kc.server_tls_bootstrap && !gate(Feature::RotateKubeletServerCertificate),
        "serverTLSBootstrap true requires feature gate RotateKubeletServerCertificate".into(),
    );
    for taint in &kc.register_with_taints {
        let effect_ok = matches!(
            taint.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        );
        err(
            taint.key.is_empty() || !effect_ok,
            format!(
                "registerWithTaints: invalid taint {}={}:{}",
                taint.key,
                taint.value.as_deref().unwrap_or(""),
                taint.effect
            ),
        );
        err(
            taint.time_added.is_some(),
            "registerWithTaints: taint.TimeAdded is not nil".into(),
        );
    }
    let policies = ["none", "best-effort", "restricted", "single-numa-node"];
    err(
        !policies.contains(&kc.topology_manager_policy.as_str()),
        format!(
            "topologyManagerPolicy (--topology-manager-policy) {:?} must be one of: {policies:?}",
            kc.topology_manager_policy
        ),
    );
    err(
        !matches!(kc.topology_manager_scope.as_str(), "container" | "pod"),
        format!(
            "topologyManagerScope (--topology-manager-scope) {:?} must be one of: \"container\", or \"pod\"",
            kc.topology_manager_scope
        ),
    );
    let (grace, critical) = (
        kc.shutdown_grace_period,
        kc.shutdown_grace_period_critical_pods,
    );
    let sub_second =
        |d: Duration| d.is_negative() || (d > Duration::ZERO && d < Duration::from_secs(1));
    if gate(Feature::GracefulNodeShutdown) {
        err(
            critical > grace,
            format!(
                "shutdownGracePeriodCriticalPods {critical} must be <= shutdownGracePeriod {grace}"
            ),
        );
        err(
            sub_second(grace),
            format!("shutdownGracePeriod {grace} must be either zero or otherwise >= 1 sec"),
        );
        err(
            sub_second(critical),
            format!(
                "shutdownGracePeriodCriticalPods {critical} must be either zero or otherwise >= 1 sec"
            ),
        );
    } else {
        err(
            grace > Duration::ZERO || critical > Duration::ZERO,
            "specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown".into(),
        );
    }
    let by_priority = !kc.shutdown_grace_period_by_pod_priority.is_empty();
    if gate(Feature::GracefulNodeShutdownBasedOnPodPriority) {
        err(
            by_priority && (grace > Duration::ZERO || critical > Duration::ZERO),
            "Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time".into(),
        );
    } else {
        err(by_priority, "Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority".into());
    }
    let swap = kc.memory_swap.swap_behavior.as_str();
    if gate(Feature::NodeSwap) {
        err(
            !matches!(swap, "" | "NoSwap" | "LimitedSwap"),
            format!(
                "memorySwap.swapBehavior {swap:?} must be one of: \"\", \"LimitedSwap\" or \"NoSwap\""
            ),
        );
    } else {
        err(
            !swap.is_empty(),
            "memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled".into(),
        );
    }
    for val in &kc.enforce_node_allocatable {
        match val.as_str() {
            "pods" => {}
            "system-reserved" | "system-reserved-compressible" => err(
                kc.system_reserved_cgroup.is_empty(),
                format!("systemReservedCgroup (--system-reserved-cgroup) must be specified when {val:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)"),
            ),
            "kube-reserved" | "kube-reserved-compressible" => err(
                kc.kube_reserved_cgroup.is_empty(),
                format!("kubeReservedCgroup (--kube-reserved-cgroup) must be specified when {val:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)"),
            ),
            "none" => err(
                kc.enforce_node_allocatable.len() > 1,
                "enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when \"none\" is specified".into(),
            ),
            other => err(
                true,
                format!("option {other:?} specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are \"pods\", \"system-reserved\", \"kube-reserved\", or \"none\""),
            ),
        }
    }
    err(
        !matches!(
            kc.hairpin_mode.as_str(),
            "none" | "hairpin-veth" | "promiscuous-bridge"
        ),
        format!(
            "option {:?} specified for hairpinMode (--hairpin-mode). Valid options are \"none\", \"hairpin-veth\" or \"promiscuous-bridge\"",
            kc.hairpin_mode
        ),
    );
    if !kc.reserved_system_cpus.is_empty() {
        err(
            !kc.system_reserved_cgroup.is_empty() || !kc.kube_reserved_cgroup.is_empty(),
            "can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)".into(),
        );
        err(
            !is_cpuset(&kc.reserved_system_cpus),
            format!(
                "unable to parse reservedSystemCPUs (--reserved-cpus) {:?}",
                kc.reserved_system_cpus
            ),
        );
    }
    err(
        !matches!(kc.logging.format.as_str(), "text" | "json"),
        format!(
            "logging.format: Unsupported value: {:?}: supported values: \"text\", \"json\"",
            kc.logging.format
        ),
    );
    err(
        kc.tracing.is_some() && !gate(Feature::KubeletTracing),
        "tracing should not be configured if KubeletTracing feature flag is disabled.".into(),
    );
    let factor = kc.memory_throttling_factor;
    err(
        !(factor > 0.0 && factor <= 1.0),
        format!(
            "memoryThrottlingFactor {factor} must be greater than 0 and less than or equal to 1.0"
        ),
    );
    err(
        kc.container_runtime_endpoint.is_empty(),
        "the containerRuntimeEndpoint was not specified or empty".into(),
    );
    let log_query = kc.enable_system_log_query.unwrap_or(false);
    err(
        log_query && !gate(Feature::NodeLogQuery),
        "NodeLogQuery feature gate is required for enableSystemLogHandler".into(),
    );
    err(
        log_query && !kc.enable_system_log_handler,
        "enableSystemLogHandler is required for enableSystemLogQuery".into(),
    );
    err(
        kc.container_log_max_workers < 1,
        "containerLogMaxWorkers must be greater than or equal to 1".into(),
    );
    err(
        kc.container_log_monitor_interval < Duration::from_secs(3),
        "containerLogMonitorInterval must be a positive time duration greater than or equal to 3s"
            .into(),
    );
    let logs = kc.pod_logs_dir.as_str();
    err(logs.is_empty(), "podLogsDir was not specified".into());
    err(
        !logs.starts_with('/'),
        format!("pod logs path {logs:?} must be absolute path"),
    );
    err(
        logs.starts_with('/') && !is_clean_abs(logs),
        format!("pod logs path {logs:?} must be normalized"),
    );
    err(
        !logs.is_ascii(),
        format!("pod logs path {logs:?} must contain ASCII characters only"),
    );

    // Checks upstream makes later, at startup (container log manager, eviction manager).
    err(
        kc.container_log_max_files <= 1,
        format!(
            "containerLogMaxFiles (--container-log-max-files) {} must be greater than 1",
            kc.container_log_max_files
        ),
    );
    err(
        kc.container_log_max_size.is_negative(),
        format!(
            "containerLogMaxSize (--container-log-max-size) {} must not be negative",
            kc.container_log_max_size
        ),
    );
    validate_eviction(kc, &mut errs);
    validate_resource_managers(kc, &mut errs);
    validate_crash_loop_back_off(kc, &mut errs);
    validate_always_on_gates(kc, &mut errs);

    // rkubelet: periods that drive loops must be positive (upstream would panic creating a ticker).
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
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid(errs))
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
#[allow(clippy::unwrap_used)]
#[path = "validate_tests.rs"]
mod tests;
