//! Tests for config loading: defaults, formats, error texts, drop-ins, relative paths.

use std::path::{Path, PathBuf};

use super::*;
use crate::{Duration, Quantity, ThresholdValue, validate};

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, body).unwrap();
    p
}

fn load_str(body: &str) -> Result<KubeletConfiguration, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "config.yaml", body);
    load_config(Some(&p), None)
}

fn load_err(body: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "config.yaml", body);
    let err = load_config(Some(&p), None)
        .expect_err("expected an error")
        .to_string();
    let prefix = format!("kubelet config {}: ", p.display());
    err.strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{err:?} lacks {prefix:?}"))
        .to_string()
}

fn th(s: &str) -> ThresholdValue {
    ThresholdValue::parse(s).unwrap()
}

#[test]
fn minimal_file_gets_upstream_defaults() {
    let c = load_str(HEADER).unwrap();
    assert_eq!(c.api_version, "kubelet.config.k8s.io/v1beta1");
    assert_eq!(c.kind, "KubeletConfiguration");
    assert!(c.enable_server);
    assert_eq!(c.static_pod_path, "");
    assert_eq!(c.sync_frequency, Duration::from_mins(1));
    assert_eq!(c.file_check_frequency, Duration::from_secs(20));
    assert_eq!(c.http_check_frequency, Duration::from_secs(20));
    assert_eq!(c.static_pod_url, "");
    assert!(c.static_pod_url_header.is_empty());
    assert_eq!(c.address, "0.0.0.0");
    assert_eq!(c.port, 10250);
    assert_eq!(c.read_only_port, 0);
    assert_eq!(c.healthz_port, 10248);
    assert_eq!(c.healthz_bind_address, "127.0.0.1");
    assert_eq!(c.pod_logs_dir, "/var/log/pods");
    assert_eq!(
        c.container_runtime_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
    assert_eq!(c.image_service_endpoint, "");
    assert_eq!(
        c.effective_image_service_endpoint(),
        "unix:///run/containerd/containerd.sock"
    );
    assert_eq!(c.runtime_request_timeout, Duration::from_mins(2));
    assert_eq!(c.max_pods, 110);
    assert_eq!(c.pod_pids_limit, -1);
    assert!(c.serialize_image_pulls);
    assert_eq!(c.max_parallel_image_pulls, None);
    assert_eq!((c.registry_pull_qps, c.registry_burst), (5, 10));
    assert_eq!((c.event_record_qps, c.event_burst), (50, 100));
    assert_eq!(c.node_status_update_frequency, Duration::from_secs(10));
    assert_eq!(c.node_status_report_frequency, Duration::from_mins(5));
    assert_eq!(c.node_lease_duration_seconds, 40);
    assert_eq!(c.image_minimum_gc_age, Duration::from_mins(2));
    assert_eq!(c.image_maximum_gc_age, Duration::ZERO);
    assert_eq!(
        (
            c.image_gc_high_threshold_percent,
            c.image_gc_low_threshold_percent
        ),
        (85, 80)
    );
    assert_eq!(c.volume_stats_agg_period, Duration::from_mins(1));
    assert!(c.cgroups_per_qos);
    assert_eq!(c.cgroup_driver, "cgroupfs");
    assert_eq!(c.cpu_manager_policy, "none");
    assert_eq!(c.cpu_manager_reconcile_period, Duration::from_secs(10));
    assert_eq!(c.memory_manager_policy, "None");
    assert_eq!(c.topology_manager_policy, "none");
    assert_eq!(c.topology_manager_scope, "container");
    let hard: Vec<(&str, ThresholdValue)> = vec![
        ("imagefs.available", th("15%")),
        ("imagefs.inodesFree", th("5%")),
        ("memory.available", th("100Mi")),
        ("nodefs.available", th("10%")),
        ("nodefs.inodesFree", th("5%")),
    ];
    let got: Vec<(&str, ThresholdValue)> = c
        .eviction_hard
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    assert_eq!(got, hard);
    assert_eq!(
        c.eviction_pressure_transition_period,
        Duration::from_mins(5)
    );
    assert!(!c.merge_default_eviction_settings);
    assert!(c.enable_controller_attach_detach);
    assert!(c.make_iptables_util_chains);
    assert_eq!((c.iptables_masquerade_bit, c.iptables_drop_bit), (14, 15));
    assert!(c.fail_swap_on);
    assert_eq!(c.container_log_max_size, Quantity::parse("10Mi").unwrap());
    assert_eq!(c.container_log_max_size.as_str(), "10Mi");
    assert_eq!(
        (c.container_log_max_files, c.container_log_max_workers),
        (5, 1)
    );
    assert_eq!(c.container_log_monitor_interval, Duration::from_secs(10));
    assert_eq!(c.config_map_and_secret_change_detection_strategy, "Watch");
    assert_eq!(c.enforce_node_allocatable, vec!["pods".to_string()]);
    assert_eq!(
        c.volume_plugin_dir,
        "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"
    );
    assert_eq!(c.hairpin_mode, "promiscuous-bridge");
    assert_eq!(c.max_open_files, 1_000_000);
    assert_eq!(c.content_type, "application/vnd.kubernetes.protobuf");
    assert_eq!((c.kube_api_qps, c.kube_api_burst), (50, 100));
    assert!(c.enable_debugging_handlers);
    assert_eq!(c.cluster_domain, "");
    assert!(c.cluster_dns.is_empty());
    assert_eq!(c.resolv_conf, "/etc/resolv.conf");
    assert_eq!(c.oom_score_adj, -999);
    assert!(c.local_storage_capacity_isolation);
    assert!(!c.seccomp_default);
    assert_eq!(c.memory_throttling_factor, 0.9);
    assert_eq!(c.shutdown_grace_period, Duration::ZERO);
    assert_eq!(c.streaming_connection_idle_timeout, Duration::from_hours(4));
    assert!(!c.authentication.anonymous.enabled);
    assert!(c.authentication.webhook.enabled);
    assert_eq!(c.authentication.webhook.cache_ttl, Duration::from_mins(2));
    assert_eq!(c.authorization.mode, "Webhook");
    assert_eq!(
        c.authorization.webhook.cache_authorized_ttl,
        Duration::from_mins(5)
    );
    assert_eq!(
        c.authorization.webhook.cache_unauthorized_ttl,
        Duration::from_secs(30)
    );
    assert!(c.register_node);
    assert!(c.cpu_cfs_quota);
    assert_eq!(c.cpu_cfs_quota_period, Duration::from_millis(100));
    assert_eq!(c.node_status_max_images, 50);
    assert!(
        c.enable_system_log_handler && c.enable_profiling_handler && c.enable_debug_flags_handler
    );
    assert!(!c.fail_cgroup_v1);
    assert_eq!(c.logging.format, "text");
    assert_eq!(c.logging.flush_frequency.0, Duration::from_secs(5));
    assert_eq!(c.pod_housekeeping_period, Duration::from_secs(2));
    validate(&c).unwrap();
}

#[test]
fn without_a_config_file_flag_era_defaults_apply() {
    let c = load_config(None, None).unwrap();
    assert_eq!(c.read_only_port, 10255);
    assert!(c.authentication.anonymous.enabled);
    assert!(!c.authentication.webhook.enabled);
    assert_eq!(c.authorization.mode, "AlwaysAllow");
    assert_eq!(c.port, 10250);
    assert_eq!(c.eviction_hard.len(), 5);
    validate(&c).unwrap();
}

#[test]
fn yaml_and_json_load_the_same() {
    let yaml = format!(
        "{HEADER}staticPodPath: /etc/kubernetes/manifests\nsyncFrequency: 30s\nclusterDNS: [10.96.0.10]\nevictionHard:\n  memory.available: 200Mi\nfeatureGates:\n  NodeSwap: true\n"
    );
    let json = r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration",
        "staticPodPath":"/etc/kubernetes/manifests","syncFrequency":"30s","clusterDNS":["10.96.0.10"],
        "evictionHard":{"memory.available":"200Mi"},"featureGates":{"NodeSwap":true}}"#;
    let a = load_str(&yaml).unwrap();
    let b = load_str(json).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.sync_frequency, Duration::from_secs(30));
    assert_eq!(a.cluster_dns, vec!["10.96.0.10".to_string()]);
    // An explicit evictionHard replaces the defaults entirely (mergeDefaultEvictionSettings off).
    assert_eq!(a.eviction_hard.len(), 1);
}

#[test]
fn yaml_anchors_and_merge_keys_work() {
    let c = load_str(&format!(
        "{HEADER}authorization:\n  <<: {{mode: AlwaysAllow}}\n"
    ))
    .unwrap();
    assert_eq!(c.authorization.mode, "AlwaysAllow");
    let c = load_str(&format!(
        "{HEADER}staticPodURLHeader:\n  X-A: &v [one]\n  X-B: *v\n"
    ))
    .unwrap();
    assert_eq!(c.static_pod_url_header["X-B"], vec!["one".to_string()]);
}

#[test]
fn error_messages_name_file_and_field() {
    let cases: &[(&str, &str)] = &[
        (
            "syncFrequency: banana\n",
            "syncFrequency: \"banana\" is not a duration (expected a Go duration such as \"1m0s\" or \"20s\")",
        ),
        (
            "syncFrequency: 60\n",
            "syncFrequency: invalid type: integer `60`, expected a duration string such as \"1m0s\" or \"20s\"",
        ),
        (
            "evictionHard:\n  memory.available: lots\n",
            "evictionHard.memory.available: \"lots\" is not a quantity",
        ),
        (
            "evictionHard:\n  nodefs.available: 150%\n",
            "evictionHard.nodefs.available: \"150%\" is not a valid percentage",
        ),
        (
            "kubeReserved:\n  memory: 1 GB\n",
            "kubeReserved.memory: \"1 GB\" is not a quantity",
        ),
        (
            "containerLogMaxSize: 10MB\n",
            "containerLogMaxSize: \"10MB\" is not a quantity",
        ),
        (
            "port: abc\n",
            "port: invalid type: string \"abc\", expected i32",
        ),
        (
            "port: 99999999999\n",
            "port: invalid value: integer `99999999999`, expected i32",
        ),
        (
            "enableServer: maybe\n",
            "enableServer: invalid type: string \"maybe\", expected a boolean",
        ),
        (
            "clusterDNS: 10.0.0.10\n",
            "clusterDNS: invalid type: string \"10.0.0.10\", expected a sequence",
        ),
        (
            "authentication:\n  webhook:\n    cacheTTL: 2 minutes\n",
            "authentication.webhook.cacheTTL: \"2 minutes\" is not a duration",
        ),
        (
            "evictionSoftGracePeriod:\n  memory.available: 1d\n",
            "evictionSoftGracePeriod.memory.available: \"1d\" is not a duration: unknown unit \"d\"",
        ),
        (
            "shutdownGracePeriodByPodPriority:\n  - priority: x\n",
            "shutdownGracePeriodByPodPriority[0].priority: invalid type: string \"x\", expected i32",
        ),
    ];
    for (body, want) in cases {
        let err = load_err(&format!("{HEADER}{body}"));
        assert!(
            err.starts_with(want),
            "body {body:?}\n got: {err}\nwant: {want}"
        );
    }
}

#[test]
fn unknown_fields_are_errors_with_suggestions() {
    let cases: &[(&str, &str)] = &[
        ("fooBar: 1\n", "unknown field \"fooBar\""),
        (
            "SyncFrequency: 1m\n",
            "unknown field \"SyncFrequency\" (did you mean \"syncFrequency\"?)",
        ),
        (
            "staticPodUrl: http://x\n",
            "unknown field \"staticPodUrl\" (did you mean \"staticPodURL\"?)",
        ),
        (
            "maxPod: 10\n",
            "unknown field \"maxPod\" (did you mean \"maxPods\"?)",
        ),
        (
            "authentication:\n  webhook:\n    cacheTtl: 1m\n",
            "unknown field \"authentication.webhook.cacheTtl\" (did you mean \"cacheTTL\"?)",
        ),
        ("a: 1\nzzz: 2\n", "unknown fields \"a\", \"zzz\""),
    ];
    for (body, want) in cases {
        let err = load_err(&format!("{HEADER}{body}"));
        assert_eq!(&err, want, "body {body:?}");
    }
}

#[test]
fn unknown_fields_cost_little_however_long_or_many() {
    // Fuzz reproducer (`kubelet-config` target): a ~1 KB unknown key took 0.2 s in a debug build
    // (edit distance against every known field); 60 KB took seconds.
    let t0 = std::time::Instant::now();
    let yaml = format!("{HEADER}{}: 1\n", "staticPodPath".repeat(75));
    let json = format!(
        r#"{{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","{}":1}}"#,
        "staticPodPath".repeat(5000)
    );
    for body in [yaml, json] {
        let err = load_str(&body).unwrap_err().to_string();
        assert!(err.contains("unknown field"), "{err}");
        assert!(!err.contains("did you mean"), "{err}");
    }
    // Still suggested when close, multi-byte characters counted as one.
    assert!(load_err(&format!("{HEADER}maxPodé: 1\n")).contains("did you mean \"maxPods\""));
    let many: String = (0..300)
        .map(|i| format!("unknownField{i}: {i}\n"))
        .collect();
    let err = load_str(&format!("{HEADER}{many}"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknownField299"), "{err}");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn lenient_mode_drops_unknown_fields_with_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "c.yaml",
        &format!("{HEADER}maxPods: 42\nfooBar: 1\nlogging:\n  colour: red\n"),
    );
    let loaded = load_config_with(Some(&p), None, &LoadOptions { strict: false }).unwrap();
    assert_eq!(loaded.config.max_pods, 42);
    assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
    assert!(
        loaded.warnings[0].ends_with("ignoring unknown field \"fooBar\""),
        "{:?}",
        loaded.warnings
    );
    assert!(
        loaded.warnings[1].contains("\"logging.colour\""),
        "{:?}",
        loaded.warnings
    );
    // Type errors stay errors in lenient mode.
    let p = write(dir.path(), "d.yaml", &format!("{HEADER}maxPods: many\n"));
    assert!(load_config_with(Some(&p), None, &LoadOptions { strict: false }).is_err());
}

#[test]
fn type_meta_is_checked() {
    let cases: &[(&str, &str)] = &[
        (
            "kind: KubeletConfiguration\n",
            "apiVersion is missing (expected \"kubelet.config.k8s.io/v1beta1\")",
        ),
        (
            "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
            "apiVersion \"kubelet.config.k8s.io/v1\" is not supported (expected \"kubelet.config.k8s.io/v1beta1\")",
        ),
        (
            "apiVersion: kubelet.config.k8s.io/v1beta1\n",
            "kind is missing (expected \"KubeletConfiguration\")",
        ),
        (
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\n",
            "kind \"CredentialProviderConfig\" is not supported (expected \"KubeletConfiguration\")",
        ),
        ("# only a comment\n", "apiVersion is missing"),
        (
            "- a\n- b\n",
            "expected a KubeletConfiguration mapping, found a list",
        ),
        ("port: [\n", "invalid YAML: "),
        ("{\"port\": }", "invalid JSON: "),
    ];
    for (body, want) in cases {
        let err = load_err(body);
        assert!(err.starts_with(want), "body {body:?}: {err}");
    }
    assert_eq!(load_err(""), "file is empty");
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let err = load_config(Some(Path::new("/nonexistent/kubelet.yaml")), None).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("kubelet config /nonexistent/kubelet.yaml: "),
        "{err}"
    );
    assert!(matches!(err, ConfigError::Io { .. }));
}

#[test]
fn relative_paths_resolve_against_the_config_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("etc/kubelet");
    let body = format!(
        "{HEADER}staticPodPath: manifests\ntlsCertFile: ./pki/kubelet.crt\ntlsPrivateKeyFile: ../keys/kubelet.key\n\
         resolvConf: resolv.conf\nvolumePluginDir: /abs/plugins\npodLogsDir: logs/pods\n\
         authentication:\n  x509:\n    clientCAFile: ca.crt\nstaticPodURL: relative/url\n"
    );
    let p = write(&root, "config.yaml", &body);
    let c = load_config(Some(&p), None).unwrap();
    let r = root.display().to_string();
    assert_eq!(c.static_pod_path, format!("{r}/manifests"));
    assert_eq!(c.tls_cert_file, format!("{r}/pki/kubelet.crt"));
    assert_eq!(
        c.tls_private_key_file,
        format!("{}/keys/kubelet.key", dir.path().join("etc").display())
    );
    assert_eq!(c.resolv_conf, format!("{r}/resolv.conf"));
    assert_eq!(c.volume_plugin_dir, "/abs/plugins");
    assert_eq!(c.pod_logs_dir, format!("{r}/logs/pods"));
    assert_eq!(c.authentication.x509.client_ca_file, format!("{r}/ca.crt"));
    // Not a path field; and empty paths stay empty.
    assert_eq!(c.static_pod_url, "relative/url");
    let c = load_config(
        Some(&write(
            &root,
            "empty.yaml",
            &format!("{HEADER}resolvConf: \"\"\n"),
        )),
        None,
    )
    .unwrap();
    assert_eq!(c.resolv_conf, "");
}

#[test]
fn drop_ins_merge_in_lexical_order() {
    let dir = tempfile::tempdir().unwrap();
    let base = write(
        dir.path(),
        "config.yaml",
        &format!(
            "{HEADER}port: 20250\naddress: 192.168.0.1\nclusterDNS: [192.168.0.9, 192.168.0.8]\n\
             authorization:\n  mode: Webhook\n  webhook:\n    cacheAuthorizedTTL: 5m\n    cacheUnauthorizedTTL: 30s\n\
             featureGates:\n  A: true\n  B: true\nmaxPods: 50\n"
        ),
    );
    let d = dir.path().join("conf.d");
    write(
        &d,
        "20-late.conf",
        &format!("{HEADER}address: 192.168.0.20\nmaxPods: null\n"),
    );
    write(
        &d,
        "10-early.conf",
        &format!(
            "{HEADER}address: 192.168.0.10\nclusterDNS: [192.168.0.2]\nauthorization:\n  mode: AlwaysAllow\n  webhook:\n    cacheAuthorizedTTL: 8m\nfeatureGates:\n  B: false\n  C: true\n"
        ),
    );
    write(
        &d,
        "15-sub/01-nested.conf",
        &format!("{HEADER}address: 192.168.0.15\nsyncFrequency: 30s\n"),
    );
    write(&d, "30-ignored.yaml", &format!("{HEADER}port: 1\n"));
    write(&d, "99-ignored.conf.bak", &format!("{HEADER}port: 2\n"));
    let c = load_config(Some(&base), Some(&d)).unwrap();
    assert_eq!(c.port, 20250, "non-.conf files are ignored");
    assert_eq!(c.address, "192.168.0.20", "later files win");
    assert_eq!(
        c.sync_frequency,
        Duration::from_secs(30),
        "subdirectories are walked"
    );
    assert_eq!(
        c.cluster_dns,
        vec!["192.168.0.2".to_string()],
        "lists are replaced"
    );
    assert_eq!(c.authorization.mode, "AlwaysAllow");
    assert_eq!(
        c.authorization.webhook.cache_authorized_ttl,
        Duration::from_mins(8)
    );
    assert_eq!(
        c.authorization.webhook.cache_unauthorized_ttl,
        Duration::from_secs(30),
        "structs merge"
    );
    let gates: Vec<(&str, bool)> = c
        .feature_gates
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        gates,
        vec![("A", true), ("B", false), ("C", true)],
        "maps merge key by key"
    );
    // null removes the field; the value reverts to the Go zero value (defaults ran on the base).
    assert_eq!(c.max_pods, 0);
}

#[test]
fn drop_ins_override_defaults_applied_to_the_base_first() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("conf.d");
    write(
        &d,
        "10.conf",
        &format!(
            "{HEADER}nodeStatusUpdateFrequency: 20s\nevictionHard:\n  memory.available: 500Mi\n"
        ),
    );
    // No --config: the base is the flag-era defaults.
    let c = load_config(None, Some(&d)).unwrap();
    assert_eq!(c.node_status_update_frequency, Duration::from_secs(20));
    // As upstream: the base was already defaulted, so the report frequency stays 5m.
    assert_eq!(c.node_status_report_frequency, Duration::from_mins(5));
    assert_eq!(c.read_only_port, 10255);
    // evictionHard merges into the defaulted base map.
    assert_eq!(c.eviction_hard["memory.available"], th("500Mi"));
    assert_eq!(c.eviction_hard.len(), 5);
}

#[test]
fn drop_in_errors_name_the_drop_in() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("conf.d");
    let bad = write(&d, "10.conf", "port: 1\n");
    let err = load_config(None, Some(&d)).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "kubelet config {}: apiVersion is missing (expected \"kubelet.config.k8s.io/v1beta1\")",
            bad.display()
        )
    );
    write(&d, "10.conf", &format!("{HEADER}prot: 1\n"));
    let err = load_config(None, Some(&d)).unwrap_err().to_string();
    assert!(
        err.ends_with("10.conf: unknown field \"prot\" (did you mean \"port\"?)"),
        "{err}"
    );
    let err = load_config(None, Some(&dir.path().join("missing"))).unwrap_err();
    assert!(matches!(err, ConfigError::ConfigDir { .. }), "{err}");
}

#[test]
fn drop_in_relative_paths_resolve_against_their_own_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("conf.d");
    write(
        &d,
        "10.conf",
        &format!("{HEADER}staticPodPath: manifests\n"),
    );
    let c = load_config(None, Some(&d)).unwrap();
    assert_eq!(c.static_pod_path, format!("{}/manifests", d.display()));
}

/// A document naming every v1beta1 field (values chosen to be valid) loads strictly.
const EVERY_FIELD: &str = r#"
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
enableServer: true
staticPodPath: /etc/kubernetes/manifests
podLogsDir: /var/log/pods
syncFrequency: 1m0s
fileCheckFrequency: 20s
httpCheckFrequency: 20s
staticPodURL: http://example.com/pods
staticPodURLHeader: {X-Token: [a, b]}
address: 0.0.0.0
port: 10250
readOnlyPort: 0
tlsCertFile: /etc/kubernetes/pki/kubelet.crt
tlsPrivateKeyFile: /etc/kubernetes/pki/kubelet.key
tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
tlsCurvePreferences: [23, 29]
tlsMinVersion: VersionTLS12
rotateCertificates: true
serverTLSBootstrap: true
authentication:
  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}
  webhook: {enabled: true, cacheTTL: 2m0s}
  anonymous: {enabled: false}
authorization:
  mode: Webhook
  webhook: {cacheAuthorizedTTL: 5m0s, cacheUnauthorizedTTL: 30s}
registryPullQPS: 5
registryBurst: 10
imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages
preloadedImagesVerificationAllowlist: [registry.k8s.io/pause]
eventRecordQPS: 50
eventBurst: 100
enableDebuggingHandlers: true
enableContentionProfiling: false
healthzPort: 10248
healthzBindAddress: 127.0.0.1
oomScoreAdj: -999
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
streamingConnectionIdleTimeout: 4h0m0s
nodeStatusUpdateFrequency: 10s
nodeStatusReportFrequency: 5m0s
nodeLeaseDurationSeconds: 40
imageMinimumGCAge: 2m0s
imageMaximumGCAge: 0s
imageGCHighThresholdPercent: 85
imageGCLowThresholdPercent: 80
volumeStatsAggPeriod: 1m0s
kubeletCgroups: /kubelet
systemCgroups: /system
cgroupRoot: /
cgroupsPerQOS: true
cgroupDriver: systemd
cpuManagerPolicy: none
singleProcessOOMKill: false
cpuManagerPolicyOptions: {full-pcpus-only: "true"}
cpuManagerReconcilePeriod: 10s
draManagerReconcilePeriod: 1m0s
memoryManagerPolicy: None
topologyManagerPolicy: none
topologyManagerScope: container
topologyManagerPolicyOptions: {prefer-closest-numa-nodes: "true"}
qosReserved: {memory: 50%}
runtimeRequestTimeout: 2m0s
hairpinMode: promiscuous-bridge
maxPods: 110
podCIDR: 10.244.0.0/24
podPidsLimit: -1
resolvConf: /etc/resolv.conf
runOnce: false
cpuCFSQuota: true
cpuCFSQuotaPeriod: 100ms
nodeStatusMaxImages: 50
maxOpenFiles: 1000000
contentType: application/vnd.kubernetes.protobuf
kubeAPIQPS: 50
kubeAPIBurst: 100
serializeImagePulls: false
maxParallelImagePulls: 3
evictionHard: {memory.available: 100Mi, nodefs.available: 10%}
evictionSoft: {memory.available: 200Mi}
evictionSoftGracePeriod: {memory.available: 1m30s}
evictionPressureTransitionPeriod: 5m0s
evictionMaxPodGracePeriod: 30
evictionMinimumReclaim: {imagefs.available: 2Gi}
mergeDefaultEvictionSettings: true
podsPerCore: 0
enableControllerAttachDetach: true
protectKernelDefaults: false
makeIPTablesUtilChains: true
iptablesMasqueradeBit: 14
iptablesDropBit: 15
featureGates: {NodeSwap: true, KubeletCrashLoopBackOffMax: true}
failSwapOn: false
memorySwap: {swapBehavior: LimitedSwap}
containerLogMaxSize: 10Mi
containerLogMaxFiles: 5
containerLogMaxWorkers: 1
containerLogMonitorInterval: 10s
configMapAndSecretChangeDetectionStrategy: Watch
systemReserved: {cpu: 100m, memory: 100Mi}
kubeReserved: {cpu: 100m, memory: 100Mi, ephemeral-storage: 1Gi}
reservedSystemCPUs: ""
showHiddenMetricsForVersion: ""
systemReservedCgroup: ""
kubeReservedCgroup: ""
enforceNodeAllocatable: [pods]
allowedUnsafeSysctls: [net.core.somaxconn]
volumePluginDir: /usr/libexec/kubernetes/kubelet-plugins/volume/exec/
providerID: ""
kernelMemcgNotification: false
logging:
  format: text
  flushFrequency: 5s
  verbosity: 2
  vmodule: [{filePattern: "pod_workers*", verbosity: 4}]
  options:
    text: {splitStream: false, infoBufferSize: "0"}
    json: {splitStream: false, infoBufferSize: "0"}
enableSystemLogHandler: true
enableSystemLogQuery: false
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 30}]
crashLoopBackOff: {maxContainerRestartPeriod: 5m0s}
reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]
enableProfilingHandler: true
enableDebugFlagsHandler: true
seccompDefault: false
memoryThrottlingFactor: 0.9
memoryReservationPolicy: None
registerWithTaints: [{key: dedicated, value: infra, effect: NoSchedule}]
registerNode: true
tracing: {endpoint: "localhost:4317", samplingRatePerMillion: 100}
localStorageCapacityIsolation: true
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
imageServiceEndpoint: unix:///run/containerd/containerd.sock
failCgroupV1: false
userNamespaces: {idsPerPod: 65536}
podHousekeepingPeriod: 2s
"#;

#[test]
fn every_upstream_field_is_accepted() {
    let c = load_str(EVERY_FIELD).unwrap();
    assert_eq!(c.cgroup_driver, "systemd");
    assert_eq!(c.max_parallel_image_pulls, Some(3));
    assert_eq!(c.register_with_taints[0].effect, "NoSchedule");
    assert_eq!(c.logging.verbosity, 2);
    assert_eq!(c.verbosity(), 2);
    assert_eq!(
        c.user_namespaces.as_ref().and_then(|u| u.ids_per_pod),
        Some(65536)
    );
    assert_eq!(
        c.reserved_memory[0].limits["memory"],
        Quantity::parse("1Gi").unwrap()
    );
    // mergeDefaultEvictionSettings fills in the default signals not named.
    let eff = c.effective_eviction_hard();
    assert_eq!(eff["memory.available"], th("100Mi"));
    assert_eq!(eff["imagefs.available"], th("15%"));
    assert_eq!(eff.len(), 5);
}

#[test]
fn serialized_config_reloads_identically_and_uses_upstream_names() {
    let c = load_str(EVERY_FIELD).unwrap();
    let yaml = crate::yaml::to_string(&c).unwrap();
    let again = load_str(&yaml).unwrap();
    assert_eq!(c, again);

    let json = serde_json::to_value(&c).unwrap();
    let ours: std::collections::BTreeSet<String> =
        json.as_object().unwrap().keys().cloned().collect();
    let doc: serde_json::Value = crate::yaml::from_str(EVERY_FIELD).unwrap();
    let upstream: std::collections::BTreeSet<String> =
        doc.as_object().unwrap().keys().cloned().collect();
    // Empty strings and zero/false non-pointer fields are omitted, like Go's omitempty.
    let omitted: std::collections::BTreeSet<String> = upstream.difference(&ours).cloned().collect();
    let expected_omitted: std::collections::BTreeSet<String> = [
        "readOnlyPort",
        "enableContentionProfiling",
        "reservedSystemCPUs",
        "showHiddenMetricsForVersion",
        "systemReservedCgroup",
        "kubeReservedCgroup",
        "providerID",
        "kernelMemcgNotification",
        "runOnce",
        "podsPerCore",
        "protectKernelDefaults",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(omitted, expected_omitted);
    assert!(
        ours.is_subset(&upstream),
        "extra keys: {:?}",
        ours.difference(&upstream).collect::<Vec<_>>()
    );
    assert_eq!(json["syncFrequency"], "1m0s");
    assert_eq!(json["evictionHard"]["nodefs.available"], "10%");
    assert_eq!(json["healthzPort"], 10248);
}

#[test]
fn upstream_decoding_is_strict_then_lenient_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    // A config written for a newer kubelet: an unknown top-level and nested field.
    let p = write(
        dir.path(),
        "newer.yaml",
        &format!("{HEADER}maxPods: 42\nfutureField: 1\nlogging:\n  futureOption: x\n"),
    );
    let loaded = load_config_upstream(Some(&p), None).unwrap();
    assert_eq!(loaded.config.max_pods, 42);
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(
        loaded.warnings[0].starts_with("using lenient decoding as strict decoding failed: ")
            && loaded.warnings[0].contains("\"futureField\"")
            && loaded.warnings[0].contains("\"logging.futureOption\""),
        "{:?}",
        loaded.warnings
    );
    // Type errors still fail, naming the file and the field.
    let p = write(
        dir.path(),
        "bad.yaml",
        &format!("{HEADER}futureField: 1\nmaxPods: many\n"),
    );
    let err = load_config_upstream(Some(&p), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("kubelet config {}: maxPods:", p.display())),
        "{err}"
    );
    // A clean file gives no warning.
    let p = write(dir.path(), "ok.yaml", &format!("{HEADER}maxPods: 7\n"));
    let loaded = load_config_upstream(Some(&p), None).unwrap();
    assert!(loaded.warnings.is_empty());
}

#[test]
fn duplicate_fields_fail_strict_and_the_last_wins_leniently() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = write(
        dir.path(),
        "dup.yaml",
        &format!(
            "{HEADER}maxPods: 10\nmaxPods: 20\nauthentication:\n  webhook:\n    enabled: true\n    enabled: false\n"
        ),
    );
    let json = write(
        dir.path(),
        "dup.json",
        r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":10,"maxPods":20}"#,
    );
    for p in [&yaml, &json] {
        let err = load_config_with(Some(p), None, &LoadOptions { strict: true })
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("duplicate field") && err.contains("\"maxPods\""),
            "{err}"
        );
        let loaded = load_config_upstream(Some(p), None).unwrap();
        assert_eq!(loaded.config.max_pods, 20, "the last value wins");
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        assert!(
            loaded.warnings[0].contains("duplicate field"),
            "{:?}",
            loaded.warnings
        );
    }
    let loaded = load_config_upstream(Some(&yaml), None).unwrap();
    assert!(!loaded.config.authentication.webhook.enabled);
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.contains("\"authentication.webhook.enabled\"")),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn billion_laughs_config_is_refused_naming_the_file() {
    use crate::yaml::testdata::{deep_block_nesting, large_anchor, nested_anchors};
    let dir = tempfile::tempdir().unwrap();
    for (i, bomb) in [nested_anchors(), large_anchor(), deep_block_nesting()]
        .into_iter()
        .enumerate()
    {
        let body = format!("{HEADER}featureGates:\n  {}", bomb.replace('\n', "\n  "));
        let p = write(dir.path(), &format!("bomb{i}.yaml"), &body);
        let start = std::time::Instant::now();
        let err = load_config_upstream(Some(&p), None)
            .unwrap_err()
            .to_string();
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert!(
            err.starts_with(&format!("kubelet config {}: invalid YAML: ", p.display())),
            "{err}"
        );
        // As a drop-in too.
        let d = dir.path().join(format!("conf{i}.d"));
        std::fs::create_dir(&d).unwrap();
        write(&d, "10-bomb.conf", &body);
        let err = load_config(None, Some(&d)).unwrap_err().to_string();
        assert!(err.contains("10-bomb.conf: invalid YAML: "), "{err}");
    }
}
