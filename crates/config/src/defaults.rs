//! Upstream defaulting (`SetDefaults_KubeletConfiguration`) for the kubelet configuration.
//! Owns: the default value of every defaulted v1beta1 field and the "legacy" command-line
//! defaults used when no config file is given. Receives a parsed JSON document (so "unset",
//! "null" and "zero" can be told apart exactly as Go does for pointer vs value fields);
//! emits the same document with defaults filled in.

use serde_json::{Map, Value, json};

use super::duration::{Duration, parse_go_duration};
use super::features::{Feature, FeatureGates};

/// Linux defaults for `evictionHard` (upstream `eviction.DefaultEvictionHard`).
pub const DEFAULT_EVICTION_HARD: &[(&str, &str)] = &[
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
];

pub const DEFAULT_CONTAINER_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
pub const DEFAULT_VOLUME_PLUGIN_DIR: &str = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/";
pub const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
/// Upstream `ports.KubeletReadOnlyPort`, used only by the flag-era ("legacy") defaults.
pub const LEGACY_READ_ONLY_PORT: i32 = 10255;

/// Absent or `null`: the Go pointer is nil / the map or slice is nil.
fn is_nil(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}

/// Go zero value of a non-pointer scalar: unset, null, 0, "" or false.
fn is_zero(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Bool(b)) => !b,
        Some(_) => false,
    }
}

/// Zero `metav1.Duration`: unset, null, or a string that parses to zero ("0", "0s", "0m").
/// Anything unparsable is left alone so decoding reports it.
fn is_zero_duration(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => parse_go_duration(s) == Ok(Duration::ZERO),
        Some(_) => false,
    }
}

fn dur(d: Duration) -> Value {
    Value::String(d.to_string())
}

/// The object at `path` under `doc`, creating empty objects for unset/null steps. `None` when
/// a step holds a non-object (left for decoding to report as a type error).
fn object_at<'a>(
    doc: &'a mut Map<String, Value>,
    path: &[&str],
) -> Option<&'a mut Map<String, Value>> {
    let mut cur = doc;
    for key in path {
        let slot = cur.entry((*key).to_string()).or_insert(Value::Null);
        if slot.is_null() {
            *slot = Value::Object(Map::new());
        }
        cur = slot.as_object_mut()?;
    }
    Some(cur)
}

fn set_if(obj: &mut Map<String, Value>, key: &str, pred: fn(Option<&Value>) -> bool, value: Value) {
    if pred(obj.get(key)) {
        obj.insert(key.to_string(), value);
    }
}

/// Applies upstream v1beta1 defaults to a KubeletConfiguration document.
pub fn apply_defaults(doc: &mut Map<String, Value>) {
    use is_nil as nil;
    use is_zero as zero;
    use is_zero_duration as zdur;

    set_if(doc, "enableServer", nil, json!(true));
    set_if(doc, "syncFrequency", zdur, dur(Duration::from_mins(1)));
    set_if(
        doc,
        "fileCheckFrequency",
        zdur,
        dur(Duration::from_secs(20)),
    );
    set_if(
        doc,
        "httpCheckFrequency",
        zdur,
        dur(Duration::from_secs(20)),
    );
    set_if(doc, "address", zero, json!("0.0.0.0"));
    set_if(doc, "port", zero, json!(10250));
    if let Some(anon) = object_at(doc, &["authentication", "anonymous"]) {
        set_if(anon, "enabled", nil, json!(false));
    }
    if let Some(webhook) = object_at(doc, &["authentication", "webhook"]) {
        set_if(webhook, "enabled", nil, json!(true));
        set_if(webhook, "cacheTTL", zdur, dur(Duration::from_mins(2)));
    }
    if let Some(authz) = object_at(doc, &["authorization"]) {
        set_if(authz, "mode", zero, json!("Webhook"));
    }
    if let Some(webhook) = object_at(doc, &["authorization", "webhook"]) {
        set_if(
            webhook,
            "cacheAuthorizedTTL",
            zdur,
            dur(Duration::from_mins(5)),
        );
        set_if(
            webhook,
            "cacheUnauthorizedTTL",
            zdur,
            dur(Duration::from_secs(30)),
        );
    }
    set_if(doc, "registryPullQPS", nil, json!(5));
    set_if(doc, "registryBurst", zero, json!(10));
    set_if(doc, "eventRecordQPS", nil, json!(50));
    set_if(doc, "eventBurst", zero, json!(100));
    set_if(doc, "enableDebuggingHandlers", nil, json!(true));
    set_if(doc, "healthzPort", nil, json!(10248));
    set_if(doc, "healthzBindAddress", zero, json!("127.0.0.1"));
    set_if(doc, "oomScoreAdj", nil, json!(-999));
    set_if(
        doc,
        "streamingConnectionIdleTimeout",
        zdur,
        dur(Duration::from_hours(4)),
    );
    // Report frequency follows an explicitly set update frequency (backward compatibility).
    if zdur(doc.get("nodeStatusReportFrequency")) {
        let report = if zdur(doc.get("nodeStatusUpdateFrequency")) {
            dur(Duration::from_mins(5))
        } else {
            doc.get("nodeStatusUpdateFrequency")
                .cloned()
                .unwrap_or(Value::Null)
        };
        doc.insert("nodeStatusReportFrequency".into(), report);
    }
    set_if(
        doc,
        "nodeStatusUpdateFrequency",
        zdur,
        dur(Duration::from_secs(10)),
    );
    set_if(doc, "nodeLeaseDurationSeconds", zero, json!(40));
    set_if(doc, "imageMinimumGCAge", zdur, dur(Duration::from_mins(2)));
    set_if(doc, "imageGCHighThresholdPercent", nil, json!(85));
    set_if(doc, "imageGCLowThresholdPercent", nil, json!(80));
    set_if(
        doc,
        "volumeStatsAggPeriod",
        zdur,
        dur(Duration::from_mins(1)),
    );
    set_if(doc, "cgroupsPerQOS", nil, json!(true));
    set_if(doc, "cgroupDriver", zero, json!("cgroupfs"));
    set_if(doc, "cpuManagerPolicy", zero, json!("none"));
    set_if(
        doc,
        "cpuManagerReconcilePeriod",
        zdur,
        dur(Duration::from_secs(10)),
    );
    set_if(doc, "memoryManagerPolicy", zero, json!("None"));
    set_if(doc, "topologyManagerPolicy", zero, json!("none"));
    set_if(doc, "topologyManagerScope", zero, json!("container"));
    set_if(
        doc,
        "runtimeRequestTimeout",
        zdur,
        dur(Duration::from_mins(2)),
    );
    set_if(doc, "hairpinMode", zero, json!("promiscuous-bridge"));
    set_if(doc, "maxPods", zero, json!(110));
    // Unset or negative means "use node allocatable", written as -1.
    let pids = doc.get("podPidsLimit");
    if is_nil(pids) || pids.and_then(Value::as_f64).is_some_and(|v| v < 0.0) {
        doc.insert("podPidsLimit".into(), json!(-1));
    }
    set_if(doc, "resolvConf", nil, json!(DEFAULT_RESOLV_CONF));
    set_if(doc, "cpuCFSQuota", nil, json!(true));
    set_if(
        doc,
        "cpuCFSQuotaPeriod",
        nil,
        dur(Duration::from_millis(100)),
    );
    set_if(doc, "nodeStatusMaxImages", nil, json!(50));
    set_if(doc, "maxOpenFiles", zero, json!(1_000_000));
    set_if(
        doc,
        "contentType",
        zero,
        json!("application/vnd.kubernetes.protobuf"),
    );
    set_if(doc, "kubeAPIQPS", nil, json!(50));
    set_if(doc, "kubeAPIBurst", zero, json!(100));
    if is_nil(doc.get("serializeImagePulls")) {
        // Parallel pulls requested (maxParallelImagePulls >= 2) imply serializeImagePulls=false.
        let parallel = doc.get("maxParallelImagePulls").and_then(Value::as_f64);
        let serialize = parallel.is_none_or(|n| n < 2.0);
        doc.insert("serializeImagePulls".into(), json!(serialize));
    }
    if is_nil(doc.get("evictionHard")) {
        let defaults: Map<String, Value> = DEFAULT_EVICTION_HARD
            .iter()
            .map(|(k, v)| ((*k).to_string(), json!(v)))
            .collect();
        doc.insert("evictionHard".into(), Value::Object(defaults));
    }
    set_if(
        doc,
        "evictionPressureTransitionPeriod",
        zdur,
        dur(Duration::from_mins(5)),
    );
    set_if(doc, "mergeDefaultEvictionSettings", nil, json!(false));
    set_if(doc, "enableControllerAttachDetach", nil, json!(true));
    set_if(doc, "makeIPTablesUtilChains", nil, json!(true));
    set_if(doc, "iptablesMasqueradeBit", nil, json!(14));
    set_if(doc, "iptablesDropBit", nil, json!(15));
    set_if(doc, "failSwapOn", nil, json!(true));
    set_if(doc, "containerLogMaxSize", zero, json!("10Mi"));
    set_if(doc, "containerLogMaxFiles", nil, json!(5));
    set_if(doc, "containerLogMaxWorkers", nil, json!(1));
    set_if(
        doc,
        "containerLogMonitorInterval",
        nil,
        dur(Duration::from_secs(10)),
    );
    set_if(
        doc,
        "configMapAndSecretChangeDetectionStrategy",
        zero,
        json!("Watch"),
    );
    set_if(doc, "enforceNodeAllocatable", nil, json!(["pods"]));
    set_if(
        doc,
        "volumePluginDir",
        zero,
        json!(DEFAULT_VOLUME_PLUGIN_DIR),
    );
    apply_logging_defaults(doc);
    set_if(doc, "enableSystemLogHandler", nil, json!(true));
    set_if(doc, "enableProfilingHandler", nil, json!(true));
    set_if(doc, "enableDebugFlagsHandler", nil, json!(true));
    set_if(doc, "seccompDefault", nil, json!(false));
    set_if(doc, "failCgroupV1", nil, json!(false));
    set_if(doc, "memoryThrottlingFactor", nil, json!(0.9));
    set_if(doc, "registerNode", nil, json!(true));
    set_if(doc, "localStorageCapacityIsolation", nil, json!(true));
    set_if(
        doc,
        "containerRuntimeEndpoint",
        zero,
        json!(DEFAULT_CONTAINER_RUNTIME_ENDPOINT),
    );
    set_if(doc, "podLogsDir", zero, json!(DEFAULT_POD_LOGS_DIR));
    apply_feature_gated_defaults(doc);
    set_if(
        doc,
        "podHousekeepingPeriod",
        nil,
        dur(Duration::from_secs(2)),
    );
}

/// component-base `SetRecommendedLoggingConfiguration`.
fn apply_logging_defaults(doc: &mut Map<String, Value>) {
    let Some(logging) = object_at(doc, &["logging"]) else {
        return;
    };
    set_if(logging, "format", is_zero, json!("text"));
    let flush = logging.get("flushFrequency");
    if is_zero_duration(flush) || flush.and_then(Value::as_f64) == Some(0.0) {
        logging.insert("flushFrequency".into(), dur(Duration::from_secs(5)));
    }
    for format in ["text", "json"] {
        if let Some(opts) = object_at(logging, &["options", format]) {
            set_if(opts, "infoBufferSize", is_zero, json!("0"));
        }
    }
}

/// Defaults upstream applies only with a feature gate on (registry defaults with the
/// document's `featureGates`; unknown or locked gates are left for validation to report).
fn apply_feature_gated_defaults(doc: &mut Map<String, Value>) {
    let requested: std::collections::BTreeMap<String, bool> = doc
        .get("featureGates")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| super::features::lookup(k).is_some() || k.starts_with("All"))
        .filter_map(|(k, v)| v.as_bool().map(|b| (k.clone(), b)))
        .collect();
    let gates = FeatureGates::from_map(&requested)
        .map(|(g, _)| g)
        .unwrap_or_default();
    let gate = |_: &Map<String, Value>, f: Feature| gates.enabled(f);
    if gate(doc, Feature::KubeletCrashLoopBackOffMax)
        && let Some(clb) = object_at(doc, &["crashLoopBackOff"])
    {
        {
            set_if(
                clb,
                "maxContainerRestartPeriod",
                is_nil,
                dur(Duration::from_mins(5)),
            );
        }
    }
    if gate(doc, Feature::KubeletEnsureSecretPulledImages) {
        set_if(
            doc,
            "imagePullCredentialsVerificationPolicy",
            is_zero,
            json!("NeverVerifyPreloadedImages"),
        );
    }
}

/// The feature-gated defaults again, on a decoded configuration whose gates changed after
/// decoding (`--feature-gates`: upstream sets the flag's gates before it decodes the file, so
/// its defaults see them).
pub fn apply_gated_defaults(kc: &mut super::KubeletConfiguration) {
    let gates = kc.gates();
    if gates.enabled(Feature::KubeletCrashLoopBackOffMax)
        && kc
            .crash_loop_back_off
            .max_container_restart_period
            .is_none()
    {
        kc.crash_loop_back_off.max_container_restart_period = Some(Duration::from_mins(5));
    }
    if gates.enabled(Feature::KubeletEnsureSecretPulledImages)
        && kc.image_pull_credentials_verification_policy.is_empty()
    {
        kc.image_pull_credentials_verification_policy = "NeverVerifyPreloadedImages".into();
    }
}

/// Flag-era defaults (`applyLegacyDefaults`), used when no `--config` file is given: anonymous
/// auth on, webhook authn off, `AlwaysAllow` authz, read-only port 10255.
pub fn apply_legacy_defaults(doc: &mut Map<String, Value>) {
    if let Some(anon) = object_at(doc, &["authentication", "anonymous"]) {
        anon.insert("enabled".into(), json!(true));
    }
    if let Some(webhook) = object_at(doc, &["authentication", "webhook"]) {
        webhook.insert("enabled".into(), json!(false));
    }
    if let Some(authz) = object_at(doc, &["authorization"]) {
        authz.insert("mode".into(), json!("AlwaysAllow"));
    }
    doc.insert("readOnlyPort".into(), json!(LEGACY_READ_ONLY_PORT));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaulted(doc: Value) -> Map<String, Value> {
        let mut m = doc.as_object().cloned().unwrap();
        apply_defaults(&mut m);
        m
    }

    #[test]
    fn zero_values_of_value_fields_get_defaults() {
        let m = defaulted(json!({"port": 0, "syncFrequency": "0s", "address": "", "maxPods": 0}));
        assert_eq!(m["port"], json!(10250));
        assert_eq!(m["syncFrequency"], json!("1m0s"));
        assert_eq!(m["address"], json!("0.0.0.0"));
        assert_eq!(m["maxPods"], json!(110));
    }

    #[test]
    fn pointer_fields_keep_explicit_zeroes() {
        let m = defaulted(json!({
            "healthzPort": 0, "registryPullQPS": 0, "enableServer": false,
            "resolvConf": "", "evictionHard": {}, "enforceNodeAllocatable": []
        }));
        assert_eq!(m["healthzPort"], json!(0));
        assert_eq!(m["registryPullQPS"], json!(0));
        assert_eq!(m["enableServer"], json!(false));
        assert_eq!(m["resolvConf"], json!(""));
        assert_eq!(m["evictionHard"], json!({}));
        assert_eq!(m["enforceNodeAllocatable"], json!([]));
    }

    #[test]
    fn null_counts_as_unset() {
        let m = defaulted(json!({"healthzPort": null, "evictionHard": null}));
        assert_eq!(m["healthzPort"], json!(10248));
        assert_eq!(m["evictionHard"]["memory.available"], json!("100Mi"));
    }

    #[test]
    fn report_frequency_follows_explicit_update_frequency() {
        let cases = [
            (json!({}), "10s", "5m0s"),
            (json!({"nodeStatusUpdateFrequency": "20s"}), "20s", "20s"),
            (
                json!({"nodeStatusUpdateFrequency": "20s", "nodeStatusReportFrequency": "1m"}),
                "20s",
                "1m",
            ),
        ];
        for (doc, update, report) in cases {
            let m = defaulted(doc);
            assert_eq!(m["nodeStatusUpdateFrequency"], json!(update));
            assert_eq!(m["nodeStatusReportFrequency"], json!(report));
        }
    }

    #[test]
    fn serialize_image_pulls_depends_on_parallel_pulls() {
        let cases = [
            (json!({}), true),
            (json!({"maxParallelImagePulls": 1}), true),
            (json!({"maxParallelImagePulls": 5}), false),
            (
                json!({"maxParallelImagePulls": 5, "serializeImagePulls": true}),
                true,
            ),
        ];
        for (doc, want) in cases {
            assert_eq!(defaulted(doc)["serializeImagePulls"], json!(want));
        }
    }

    #[test]
    fn negative_pod_pids_limit_becomes_minus_one() {
        assert_eq!(
            defaulted(json!({"podPidsLimit": -7}))["podPidsLimit"],
            json!(-1)
        );
        assert_eq!(
            defaulted(json!({"podPidsLimit": 0}))["podPidsLimit"],
            json!(0)
        );
        assert_eq!(
            defaulted(json!({"podPidsLimit": 4096}))["podPidsLimit"],
            json!(4096)
        );
    }

    #[test]
    fn nested_defaults_fill_partial_objects() {
        let m = defaulted(
            json!({"authentication": {"webhook": {"enabled": false}}, "logging": {"format": "json"}}),
        );
        assert_eq!(
            m["authentication"]["webhook"],
            json!({"enabled": false, "cacheTTL": "2m0s"})
        );
        assert_eq!(m["authentication"]["anonymous"], json!({"enabled": false}));
        assert_eq!(m["authorization"]["mode"], json!("Webhook"));
        assert_eq!(m["logging"]["format"], json!("json"));
        assert_eq!(m["logging"]["flushFrequency"], json!("5s"));
        assert_eq!(
            m["logging"]["options"]["json"]["infoBufferSize"],
            json!("0")
        );
    }

    #[test]
    fn non_objects_are_left_for_decoding_to_reject() {
        let m = defaulted(json!({"authentication": "yes"}));
        assert_eq!(m["authentication"], json!("yes"));
    }

    #[test]
    fn feature_gated_defaults_need_the_gate() {
        let m = defaulted(json!({}));
        assert_eq!(m.get("crashLoopBackOff"), None);
        let m = defaulted(json!({"featureGates": {"KubeletCrashLoopBackOffMax": true}}));
        assert_eq!(
            m["crashLoopBackOff"]["maxContainerRestartPeriod"],
            json!("5m0s")
        );
    }

    #[test]
    fn legacy_defaults_open_the_server_like_flag_only_kubelets() {
        let mut m = Map::new();
        apply_defaults(&mut m);
        apply_legacy_defaults(&mut m);
        assert_eq!(m["readOnlyPort"], json!(10255));
        assert_eq!(m["authentication"]["anonymous"]["enabled"], json!(true));
        assert_eq!(m["authentication"]["webhook"]["enabled"], json!(false));
        assert_eq!(m["authorization"]["mode"], json!("AlwaysAllow"));
    }
}
