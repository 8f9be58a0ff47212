//! Tests for configuration validation.

use super::*;
use crate::{ThresholdValue, load_config};

fn base() -> KubeletConfiguration {
    load_config(None, None).unwrap()
}

fn errors(kc: &KubeletConfiguration) -> Vec<String> {
    match validate(kc) {
        Ok(()) => Vec::new(),
        Err(ConfigError::Invalid(errs)) => errs,
        Err(other) => panic!("unexpected error kind: {other}"),
    }
}

type Mutation = fn(&mut KubeletConfiguration);

#[test]
fn defaults_are_valid() {
    assert_eq!(errors(&base()), Vec::<String>::new());
    // Both drivers are valid.
    let mut c = base();
    c.cgroup_driver = "systemd".into();
    assert_eq!(errors(&c), Vec::<String>::new());
}

#[test]
fn each_bad_field_is_named() {
    let cases: &[(Mutation, &str)] = &[
        (
            |c| c.port = 0,
            "port (--port) 0 must be between 1 and 65535, inclusive",
        ),
        (
            |c| c.port = 70000,
            "port (--port) 70000 must be between 1 and 65535, inclusive",
        ),
        (
            |c| c.read_only_port = -1,
            "readOnlyPort (--read-only-port) -1 must be between 0 and 65535, inclusive",
        ),
        (
            |c| c.healthz_port = 65536,
            "healthzPort (--healthz-port) 65536 must be between 1 and 65535, inclusive",
        ),
        (
            |c| c.max_pods = -1,
            "maxPods (--max-pods) -1 must not be a negative number",
        ),
        (
            |c| c.registry_pull_qps = -1,
            "registryPullQPS (--registry-qps) -1 must not be a negative number",
        ),
        (
            |c| c.node_lease_duration_seconds = 0,
            "nodeLeaseDurationSeconds must be greater than 0",
        ),
        (
            |c| c.image_gc_high_threshold_percent = 101,
            "imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive",
        ),
        (
            |c| c.image_gc_low_threshold_percent = 90,
            "imageGCLowThresholdPercent (--image-gc-low-threshold) 90 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 85",
        ),
        (
            |c| c.image_maximum_gc_age = Duration::from_secs(60),
            "imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
        ),
        (
            |c| c.oom_score_adj = -1001,
            "oomScoreAdj (--oom-score-adj) -1001 must be between -1000 and 1000, inclusive",
        ),
        (
            |c| c.cpu_cfs_quota_period = Duration::from_millis(50),
            "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) 50ms requires feature gate CustomCPUCFSQuotaPeriod",
        ),
        (
            |c| c.max_parallel_image_pulls = Some(0),
            "maxParallelImagePulls 0 must be a positive number",
        ),
        (
            |c| c.max_parallel_image_pulls = Some(4),
            "maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false",
        ),
        (
            |c| c.topology_manager_policy = "best".into(),
            "topologyManagerPolicy (--topology-manager-policy) \"best\" must be one of",
        ),
        (
            |c| c.topology_manager_policy = "single-numa-node".into(),
            "topologyManagerPolicy (--topology-manager-policy) \"single-numa-node\" is not implemented yet by rkubelet: only \"none\" is supported",
        ),
        (
            |c| {
                c.topology_manager_policy_options
                    .insert("prefer-closest-numa-nodes".into(), "true".into());
            },
            "topologyManagerPolicyOptions (--topology-manager-policy-options): option \"prefer-closest-numa-nodes\" is not implemented yet by rkubelet",
        ),
        (
            |c| c.memory_manager_policy = "Static".into(),
            "memoryManagerPolicy (--memory-manager-policy) \"Static\" is not implemented yet by rkubelet: only \"None\" is supported",
        ),
        (
            |c| c.memory_manager_policy = "static".into(),
            "memoryManagerPolicy (--memory-manager-policy) \"static\" must be one of: \"None\", \"Static\"",
        ),
        (
            |c| c.cpu_manager_policy = "dynamic".into(),
            "cpuManagerPolicy (--cpu-manager-policy) \"dynamic\" must be one of: \"none\", \"static\"",
        ),
        (
            |c| {
                c.cpu_manager_policy_options
                    .insert("full-pcpus-only".into(), "true".into());
            },
            "cpuManagerPolicyOptions (--cpu-manager-policy-options): None policy: cannot set policy options",
        ),
        (
            |c| {
                c.cpu_manager_policy = "static".into();
                c.cpu_manager_policy_options
                    .insert("full-pcpus-only".into(), "true".into());
            },
            "cpuManagerPolicyOptions (--cpu-manager-policy-options): option \"full-pcpus-only\" is not implemented yet by rkubelet",
        ),
        (
            |c| {
                c.cpu_manager_policy = "static".into();
                c.cpu_manager_policy_options
                    .insert("bogus".into(), "1".into());
            },
            "cpuManagerPolicyOptions (--cpu-manager-policy-options): unsupported cpumanager option: \"bogus\" (1)",
        ),
        (
            |c| c.topology_manager_scope = "node".into(),
            "topologyManagerScope (--topology-manager-scope) \"node\" must be one of",
        ),
        (
            |c| c.hairpin_mode = "x".into(),
            "option \"x\" specified for hairpinMode (--hairpin-mode)",
        ),
        (
            |c| c.enforce_node_allocatable = vec!["bogus".into()],
            "option \"bogus\" specified for enforceNodeAllocatable",
        ),
        (
            |c| c.enforce_node_allocatable = vec!["system-reserved".into()],
            "systemReservedCgroup (--system-reserved-cgroup) must be specified",
        ),
        (
            |c| c.enforce_node_allocatable = vec!["none".into(), "pods".into()],
            "may not contain additional enforcements when \"none\" is specified",
        ),
        (
            |c| c.cgroups_per_qos = false,
            "enforceNodeAllocatable (--enforce-node-allocatable) is not supported unless cgroupsPerQOS",
        ),
        (
            |c| c.cgroup_driver = "cgroupv2".into(),
            "cgroupDriver (--cgroup-driver) \"cgroupv2\" is invalid",
        ),
        (
            |c| c.system_cgroups = "/system".into(),
            "systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified",
        ),
        (
            |c| c.reserved_system_cpus = "0-a".into(),
            "unable to parse reservedSystemCPUs (--reserved-cpus) \"0-a\"",
        ),
        (
            |c| c.shutdown_grace_period = Duration::from_millis(500),
            "shutdownGracePeriod 500ms must be either zero or otherwise >= 1 sec",
        ),
        (
            |c| c.shutdown_grace_period_critical_pods = Duration::from_secs(10),
            "shutdownGracePeriodCriticalPods 10s must be <= shutdownGracePeriod 0s",
        ),
        (
            |c| c.memory_swap.swap_behavior = "Unlimited".into(),
            "memorySwap.swapBehavior \"Unlimited\" must be one of",
        ),
        (
            |c| c.memory_throttling_factor = 1.5,
            "memoryThrottlingFactor 1.5 must be greater than 0 and less than or equal to 1.0",
        ),
        (
            |c| c.container_runtime_endpoint = String::new(),
            "the containerRuntimeEndpoint was not specified or empty",
        ),
        (
            |c| c.container_log_max_workers = 0,
            "containerLogMaxWorkers must be greater than or equal to 1",
        ),
        (
            |c| c.container_log_monitor_interval = Duration::from_secs(1),
            "containerLogMonitorInterval must be a positive time duration greater than or equal to 3s",
        ),
        (
            |c| c.container_log_max_files = 1,
            "containerLogMaxFiles (--container-log-max-files) 1 must be greater than 1",
        ),
        (
            |c| c.pod_logs_dir = "var/log/pods".into(),
            "pod logs path \"var/log/pods\" must be absolute path",
        ),
        (
            |c| c.pod_logs_dir = "/var/log//pods/".into(),
            "pod logs path \"/var/log//pods/\" must be normalized",
        ),
        (
            |c| c.pod_logs_dir = String::new(),
            "podLogsDir was not specified",
        ),
        (
            |c| c.pod_logs_dir = "/var/log/päds".into(),
            "must contain ASCII characters only",
        ),
        (
            |c| c.logging.format = "xml".into(),
            "logging.format: Unsupported value: \"xml\"",
        ),
        (
            |c| c.enable_system_log_query = Some(true),
            "NodeLogQuery feature gate is required",
        ),
        (
            |c| c.sync_frequency = Duration::ZERO,
            "syncFrequency (--sync-frequency) 0s must be greater than 0",
        ),
        (
            |c| c.file_check_frequency = Duration::from_secs(-1),
            "fileCheckFrequency (--file-check-frequency) -1s must be greater than 0",
        ),
        (
            |c| c.runtime_request_timeout = Duration::ZERO,
            "runtimeRequestTimeout (--runtime-request-timeout) 0s must be greater than 0",
        ),
        (
            |c| {
                c.eviction_hard.insert(
                    "disk.available".into(),
                    ThresholdValue::parse("1Gi").unwrap(),
                );
            },
            "evictionHard: unsupported eviction signal \"disk.available\"",
        ),
        (
            |c| {
                c.eviction_hard.insert(
                    "memory.available".into(),
                    ThresholdValue::parse("0").unwrap(),
                );
            },
            "evictionHard: eviction threshold memory.available must be positive: 0",
        ),
        (
            |c| {
                c.eviction_soft.insert(
                    "memory.available".into(),
                    ThresholdValue::parse("1Gi").unwrap(),
                );
            },
            "grace period must be specified for the soft eviction threshold memory.available",
        ),
        (
            |c| {
                c.eviction_soft_grace_period
                    .insert("memory.available".into(), Duration::from_secs(-5));
            },
            "invalid eviction grace period specified: -5s, must be a positive value",
        ),
        (
            |c| {
                c.eviction_minimum_reclaim.insert(
                    "nodefs.available".into(),
                    ThresholdValue::parse("0%").unwrap(),
                );
            },
            "eviction percentage minimum reclaim nodefs.available must be positive: 0%",
        ),
    ];
    for (mutate, want) in cases {
        let mut c = base();
        mutate(&mut c);
        let errs = errors(&c);
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "want {want:?}, got {errs:?}"
        );
    }
}

#[test]
fn feature_gates_unlock_options() {
    let mut c = base();
    c.cpu_cfs_quota_period = Duration::from_millis(50);
    c.feature_gates
        .insert("CustomCPUCFSQuotaPeriod".into(), true);
    assert_eq!(errors(&c), Vec::<String>::new());
    c.cpu_cfs_quota_period = Duration::from_secs(2);
    assert_eq!(
        errors(&c),
        vec![
            "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) 2s must be between 1ms and 1sec, inclusive"
                .to_string()
        ]
    );

    let mut c = base();
    c.memory_swap.swap_behavior = "LimitedSwap".into();
    assert_eq!(errors(&c), Vec::<String>::new());
    c.feature_gates.insert("NodeSwap".into(), false);
    assert_eq!(
        errors(&c),
        vec![
            "memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled"
                .to_string()
        ]
    );
}

#[test]
fn crash_loop_back_off_max_needs_its_gate_and_a_range() {
    let mut c = base();
    c.crash_loop_back_off.max_container_restart_period = Some(Duration::from_secs(30));
    assert_eq!(
        errors(&c),
        vec![
            "crashLoopBackOff.maxContainerRestartPeriod must not be set: feature gate KubeletCrashLoopBackOffMax is not enabled"
                .to_string()
        ]
    );
    c.feature_gates
        .insert("KubeletCrashLoopBackOffMax".into(), true);
    assert_eq!(errors(&c), Vec::<String>::new());
    for ok in [Duration::from_secs(1), Duration::from_secs(300)] {
        c.crash_loop_back_off.max_container_restart_period = Some(ok);
        assert_eq!(errors(&c), Vec::<String>::new(), "{ok}");
    }
    for (bad, shown) in [
        (Duration::from_millis(999), "999ms"),
        (Duration::from_secs(301), "5m1s"),
    ] {
        c.crash_loop_back_off.max_container_restart_period = Some(bad);
        assert_eq!(
            errors(&c),
            vec![format!(
                "crashLoopBackOff.maxContainerRestartPeriod {shown} must be between 1s and 5m0s, inclusive"
            )]
        );
    }
}

#[test]
fn soft_thresholds_with_grace_periods_and_disabling_values_are_valid() {
    let mut c = base();
    c.eviction_soft.insert(
        "memory.available".into(),
        ThresholdValue::parse("500Mi").unwrap(),
    );
    c.eviction_soft_grace_period
        .insert("memory.available".into(), Duration::from_secs(90));
    c.eviction_hard
        .insert("pid.available".into(), ThresholdValue::parse("0%").unwrap());
    assert_eq!(errors(&c), Vec::<String>::new());
}

#[test]
fn all_errors_are_reported_together() {
    let mut c = base();
    c.port = 0;
    c.max_pods = -3;
    c.hairpin_mode = "bad".into();
    let err = validate(&c).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("invalid kubelet configuration:\n  - "),
        "{text}"
    );
    assert_eq!(text.matches("\n  - ").count(), 3, "{text}");
    assert!(text.contains("port (--port) 0"));
    assert!(text.contains("maxPods (--max-pods) -3"));
    assert!(text.contains("hairpinMode"));
}

#[test]
fn cpuset_and_path_helpers() {
    for ok in ["0", "0-3", "0-3,5,7-9", "12"] {
        assert!(is_cpuset(ok), "{ok}");
    }
    for bad in ["", "a", "3-1", "0-", "0,,1", " 1"] {
        assert!(!is_cpuset(bad), "{bad}");
    }
    for ok in ["/", "/var/log/pods", "/a"] {
        assert!(is_clean_abs(ok), "{ok}");
    }
    for bad in ["/var/", "/var//log", "/var/./log", "/var/../log"] {
        assert!(!is_clean_abs(bad), "{bad}");
    }
}

#[test]
fn always_on_gates_cannot_be_turned_off() {
    let mut c = base();
    assert_eq!(errors(&c), Vec::<String>::new());
    c.feature_gates
        .insert("PodObservedGenerationTracking".into(), false);
    c.feature_gates
        .insert("InPlacePodVerticalScaling".into(), false);
    assert_eq!(
        errors(&c),
        vec![
            "featureGates.PodObservedGenerationTracking=false is not supported by rkubelet: observedGeneration is always reported in pod status".to_string(),
            "featureGates.InPlacePodVerticalScaling=false is not supported by rkubelet: in-place pod resize (pods/resize) is always served".to_string(),
        ]
    );
}

#[test]
fn pod_level_resources_gate_cannot_be_turned_on() {
    let mut c = base();
    c.feature_gates.insert("PodLevelResources".into(), false);
    assert_eq!(errors(&c), Vec::<String>::new());
    c.feature_gates.insert("PodLevelResources".into(), true);
    assert_eq!(
        errors(&c),
        vec![
            "featureGates.PodLevelResources=true is not implemented yet by rkubelet: pod-level resources (spec.resources) are not applied to the pod cgroup".to_string(),
        ]
    );
}
