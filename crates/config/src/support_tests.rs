//! Tests for the support table: completeness against the type, and each check's message.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;
use crate::{ConfigError, load_config, validate};

const PROBE: &str = "\u{1}probe";

/// `super::check` without the start-up warnings for unhonoured feature gates (tested in
/// `features` and in `unhonoured_gates_warn_through_check`): the counts here are about fields.
fn check(kc: &KubeletConfiguration) -> Result<Vec<String>, ConfigError> {
    super::check(kc).map(|w| {
        w.into_iter()
            .filter(|w| !w.starts_with("feature gate "))
            .collect()
    })
}

#[test]
fn unhonoured_gates_warn_through_check() {
    let w = super::check(&config(
        "featureGates: {MemoryQoS: true, EventedPLEG: true}\n",
    ))
    .unwrap();
    assert!(
        w.iter()
            .any(|w| w
                .starts_with("feature gate MemoryQoS=true (set) is not implemented by rkubelet")),
        "{w:?}"
    );
    assert!(
        w.iter().any(|w| w.starts_with(
            "feature gate KubeletSeparateDiskGC=true (by default) is not implemented by rkubelet"
        )),
        "{w:?}"
    );
    assert!(
        !w.iter().any(|w| w.contains("EventedPLEG")),
        "honoured: {w:?}"
    );
}

/// The field names of the struct at `prefix` (`None` when no struct is there), read from
/// serde's own "unknown field, expected one of ..." answer: no derive or field list needed.
fn fields_at(prefix: &[String]) -> Option<Vec<String>> {
    let mut doc = json!({ PROBE: 0 });
    for key in prefix.iter().rev() {
        doc = json!({ key.as_str(): doc });
    }
    let err = serde_path_to_error::deserialize::<_, KubeletConfiguration>(&doc).err()?;
    let message = err.inner().to_string();
    let mut want = prefix.to_vec();
    want.push(PROBE.to_owned());
    if !message.starts_with(&format!("unknown field `{PROBE}`"))
        || err.path().to_string() != want.join(".")
    {
        return None;
    }
    let Some(idx) = message.find(", expected") else {
        return Some(Vec::new()); // "there are no fields"
    };
    Some(
        message[idx..]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// Walks every field of the type; a field is covered when its path is in the table, or it
/// is a struct whose fields are all covered.
fn walk(prefix: &mut Vec<String>, covered: &mut BTreeSet<String>, missing: &mut Vec<String>) {
    let fields = fields_at(prefix).expect("a struct at the prefix");
    assert!(!fields.is_empty(), "no fields at {prefix:?}");
    for name in fields {
        prefix.push(name);
        let path = prefix.join(".");
        if field(&path).is_some() {
            covered.insert(path);
        } else if fields_at(prefix).is_some() {
            walk(prefix, covered, missing);
        } else {
            missing.push(path);
        }
        prefix.pop();
    }
}

#[test]
fn every_field_of_the_type_is_in_the_table() {
    let (mut covered, mut missing) = (BTreeSet::new(), Vec::new());
    walk(&mut Vec::new(), &mut covered, &mut missing);
    assert!(
        missing.is_empty(),
        "fields with no row in config/support.rs FIELDS (classify each as honoured with its test, rejected unless default, or warned): {missing:?}"
    );
    // And every row names a real field, once.
    let rows: Vec<&str> = FIELDS.iter().map(|f| f.path).collect();
    let unique: BTreeSet<&str> = rows.iter().copied().collect();
    assert_eq!(rows.len(), unique.len(), "duplicate rows");
    let stale: Vec<&&str> = rows.iter().filter(|p| !covered.contains(**p)).collect();
    assert!(stale.is_empty(), "rows naming no field: {stale:?}");
    assert!(covered.len() > 130, "walked only {} fields", covered.len());
}

#[test]
fn the_walk_sees_nested_and_new_fields() {
    // The probe finds the members of nested structs and of optional structs ...
    let authn = fields_at(&["authentication".into(), "webhook".into()]).unwrap();
    assert_eq!(authn, ["enabled", "cacheTTL"]);
    assert!(
        fields_at(&["tracing".into()])
            .unwrap()
            .contains(&"endpoint".to_owned())
    );
    // ... and treats maps, lists and scalars as leaves.
    assert!(fields_at(&["featureGates".into()]).is_none());
    assert!(fields_at(&["shutdownGracePeriodByPodPriority".into()]).is_none());
    assert!(fields_at(&["maxPods".into()]).is_none());
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `file::function` exists as a test in that file.
fn test_exists(reference: &str) -> bool {
    let Some((file, func)) = reference.rsplit_once("::") else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string(workspace_root().join(file)) else {
        return false;
    };
    let decl = format!("fn {func}(");
    let lines: Vec<&str> = text.lines().collect();
    lines.iter().enumerate().any(|(i, line)| {
        line.contains(&decl)
            && lines[i.saturating_sub(3)..i]
                .iter()
                .any(|l| l.contains("#[test]") || l.contains("#[tokio::test"))
    })
}

#[test]
fn every_named_test_exists() {
    let mut refs: Vec<&str> = FIELDS
        .iter()
        .filter_map(|f| match f.support {
            Support::Honoured { test } | Support::RejectedByValidation { test } => Some(test),
            _ => None,
        })
        .collect();
    refs.extend(FLAGS.iter().filter_map(|(_, t)| match t {
        FlagTarget::Own(Support::Honoured { test }, _) => Some(*test),
        _ => None,
    }));
    let missing: Vec<&&str> = refs.iter().filter(|r| !test_exists(r)).collect();
    assert!(missing.is_empty(), "named tests not found: {missing:?}");
}

/// Notes may name the guest test that proves a row on a real node (`dev/vm.sh test`); each
/// named script exists.
#[test]
fn every_named_guest_test_exists() {
    let mut named = 0;
    for row in FIELDS {
        for word in row.note.split([' ', ',', ';', '(', ')']) {
            if let Some(rest) = word.strip_prefix("dev/vm/guest/tests/") {
                assert!(rest.ends_with(".sh"), "{}: {word}", row.path);
                assert!(
                    workspace_root().join(word).is_file(),
                    "{}: the note names {word}, which does not exist",
                    row.path
                );
                named += 1;
            }
        }
    }
    assert!(named >= 6, "only {named} guest tests named");
}

#[test]
fn every_flag_field_is_a_table_row() {
    for (flag, target) in FLAGS {
        if let FlagTarget::Field(path) = target {
            assert!(field(path).is_some(), "--{flag} names {path}");
        }
    }
}

#[test]
fn docs_render_the_table() {
    let doc = std::fs::read_to_string(workspace_root().join("docs/configuration.md")).unwrap();
    assert!(
        doc.contains(&render_markdown()),
        "docs/configuration.md is out of date: regenerate its table with `RKUBELET_WRITE_DOCS=1 cargo nextest run -p rkubelet-kubelet --lib docs_render_the_table`"
    );
}

/// Writes the table into docs/configuration.md between its markers when asked to.
#[test]
fn write_docs_when_asked() {
    if std::env::var_os("RKUBELET_WRITE_DOCS").is_none() {
        return;
    }
    let path = workspace_root().join("docs/configuration.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (begin, end) = (
        "<!-- support-table:begin -->\n",
        "<!-- support-table:end -->",
    );
    let (head, rest) = doc.split_once(begin).unwrap();
    let (_, tail) = rest.split_once(end).unwrap();
    std::fs::write(
        &path,
        format!("{head}{begin}{}{end}{tail}", render_markdown()),
    )
    .unwrap();
}

fn config(yaml: &str) -> KubeletConfiguration {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.yaml");
    std::fs::write(
        &p,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{yaml}"),
    )
    .unwrap();
    load_config(Some(&p), None).unwrap()
}

fn unsupported(yaml: &str) -> Vec<String> {
    match check(&config(yaml)) {
        Err(ConfigError::Unsupported(e)) => e,
        other => panic!("{yaml}: expected unsupported, got {other:?}"),
    }
}

const DEFAULT_WARNINGS: [&str; 3] = [
    "makeIPTablesUtilChains is true",
    "enableProfilingHandler is true",
    "enableDebugFlagsHandler is true",
];

/// `want` with its leading field path labelled as messages label it (with its flags).
fn labelled(want: &str) -> String {
    let field = want.split(' ').next().unwrap_or_default();
    want.replacen(field, &label(field), 1)
}

#[test]
fn defaults_pass_with_only_the_warnings_for_defaults_not_implemented() {
    for kc in [load_config(None, None).unwrap(), config("")] {
        let w = check(&kc).unwrap();
        assert_eq!(w.len(), 3, "{w:?}");
        for (got, want) in w.iter().zip(DEFAULT_WARNINGS) {
            assert!(got.starts_with(&labelled(want)), "{got}");
        }
    }
    let w = check(&config(
        "makeIPTablesUtilChains: false\nenableProfilingHandler: false\nenableDebugFlagsHandler: false\n",
    ))
    .unwrap();
    assert!(w.is_empty(), "{w:?}");
    // Defaults written out explicitly, in other spellings, are still the defaults.
    let w = check(&config(
        "runOnce: false\nenableSystemLogQuery: false\nvolumeStatsAggPeriod: 60s\nlogging: {options: {json: {infoBufferSize: 0}, text: {infoBufferSize: 0Mi}}}\nconfigMapAndSecretChangeDetectionStrategy: Watch\n",
    ))
    .unwrap();
    assert_eq!(w.len(), 3, "{w:?}");
}

#[test]
fn each_rejected_field_is_named_with_its_value() {
    let cases: &[(&str, &str)] = &[
        (
            "runOnce: true\n",
            "runOnce is set to true, which rkubelet does not support (run-once mode is not implemented); only the default is",
        ),
        (
            "volumeStatsAggPeriod: 30s\n",
            "volumeStatsAggPeriod is set to \"30s\", which rkubelet does not support (volume usage is measured at every stats collection (10s)); only the default \"1m0s\" is",
        ),
        (
            "configMapAndSecretChangeDetectionStrategy: Get\n",
            "configMapAndSecretChangeDetectionStrategy is set to \"Get\"",
        ),
        (
            "enableSystemLogQuery: true\nfeatureGates: {NodeLogQuery: true}\n",
            "enableSystemLogQuery is set to true",
        ),
        (
            "enableControllerAttachDetach: false\n",
            "enableControllerAttachDetach is set to false",
        ),
        (
            "podCIDR: 10.0.0.0/24\n",
            "podCIDR is set to \"10.0.0.0/24\"",
        ),
        (
            "tracing: {endpoint: \"localhost:4317\"}\n",
            "tracing is set to {\"endpoint\":\"localhost:4317\"}",
        ),
        (
            "logging: {vmodule: [{filePattern: x, verbosity: 2}]}\n",
            "logging.vmodule is set to",
        ),
        (
            "logging: {options: {text: {splitStream: true}}}\n",
            "logging.options is set to",
        ),
        ("qosReserved: {memory: 50%}\n", "qosReserved is set to"),
        (
            "userNamespaces: {idsPerPod: 131072}\n",
            "userNamespaces is set to",
        ),
        (
            "volumePluginDir: /opt/flex\n",
            "volumePluginDir is set to \"/opt/flex\"",
        ),
        (
            "showHiddenMetricsForVersion: \"1.32\"\n",
            "showHiddenMetricsForVersion is set to \"1.32\"",
        ),
    ];
    for (yaml, want) in cases {
        let errs = unsupported(yaml);
        assert_eq!(errs.len(), 1, "{yaml}: {errs:?}");
        let want = labelled(want);
        assert!(
            errs[0].starts_with(&want),
            "{yaml}\n got: {}\nwant: {want}",
            errs[0]
        );
    }
    // All of them at once, in one error.
    let errs = unsupported("runOnce: true\npodCIDR: 10.0.0.0/24\n");
    assert_eq!(errs.len(), 2);
    // The gate's own default applies: with KubeletCrashLoopBackOffMax the 5m default is fine.
    check(&config(
        "featureGates: {KubeletCrashLoopBackOffMax: true}\n",
    ))
    .unwrap();
}

#[test]
fn join_issue_fields_warn_so_kubeadm_configs_start() {
    // kubeadm's generated /var/lib/kubelet/config.yaml, with the driver it would detect on a
    // cgroupfs containerd (kubeadm writes `systemd` by default, which is refused by name).
    let kubeadm = r#"
authentication:
  anonymous: {enabled: false}
  webhook: {cacheTTL: 0s, enabled: true}
  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}
authorization:
  mode: Webhook
  webhook: {cacheAuthorizedTTL: 0s, cacheUnauthorizedTTL: 0s}
cgroupDriver: cgroupfs
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
logging:
  flushFrequency: 0
  options:
    json: {infoBufferSize: "0"}
    text: {infoBufferSize: "0"}
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"#;
    let kc = config(kubeadm);
    validate(&kc).unwrap();
    let w = check(&kc).unwrap();
    assert!(
        !w.iter().any(|w| w.starts_with("rotateCertificates")),
        "rotateCertificates is honoured: {w:?}"
    );
    assert_eq!(w.len(), 3, "{w:?}");
    let w = check(&config(
        "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\nserverTLSBootstrap: true\nfeatureGates: {MemoryQoS: true, EventedPLEG: true}\n",
    ))
    .unwrap();
    // Graceful node shutdown is honoured: no warning.
    assert!(
        !w.iter().any(|w| w.starts_with("shutdownGracePeriod")),
        "{w:?}"
    );
    // serverTLSBootstrap is honoured too (the unimplemented gate's warning: above).
    assert!(
        !w.iter().any(|w| w.starts_with("serverTLSBootstrap")),
        "{w:?}"
    );
    assert!(
        !w.iter().any(|w| w.contains("EventedPLEG")),
        "EventedPLEG is honoured: {w:?}"
    );
    let w = check(&config(
        "shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 30}]\n",
    ))
    .unwrap();
    assert!(
        !w.iter().any(|w| w.starts_with("shutdownGracePeriod")),
        "{w:?}"
    );
}

#[test]
fn upstream_no_op_fields_are_accepted_silently() {
    let kc = config(
        "streamingConnectionIdleTimeout: 1h\niptablesMasqueradeBit: 3\niptablesDropBit: 4\nhairpinMode: hairpin-veth\nmemoryThrottlingFactor: 0.5\ntopologyManagerScope: pod\n",
    );
    validate(&kc).unwrap();
    let w = check(&kc).unwrap();
    assert_eq!(w.len(), DEFAULT_WARNINGS.len(), "{w:?}");
}

#[test]
fn gate_warnings_are_upstreams() {
    let w = check(&config("featureGates: {SidecarContainers: true}\n")).unwrap();
    assert!(
        w.contains(&"Setting GA feature gate SidecarContainers=true. It will be removed in a future release.".to_owned()),
        "{w:?}"
    );
    let err = validate(&config("featureGates: {SidecarContainers: false}\n"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "cannot set feature gate SidecarContainers to false, feature is locked to true"
        ),
        "{err}"
    );
    let err = validate(&config("featureGates: {Bogus: true}\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("unrecognized feature gate: Bogus"), "{err}");
}

#[test]
fn the_table_renders_every_row() {
    let md = render_markdown();
    for row in FIELDS {
        assert!(md.contains(&format!("| `{}` |", row.path)), "{}", row.path);
    }
    assert!(md.contains("| `cgroupDriver` | `--cgroup-driver` | honoured |"));
}

/// A non-default value for every rejected or warned row (a new row needs one here).
fn sample(path: &str) -> Option<serde_json::Value> {
    Some(match path {
        "rotateCertificates"
        | "serverTLSBootstrap"
        | "enableContentionProfiling"
        | "runOnce"
        | "kernelMemcgNotification"
        | "enableSystemLogQuery" => json!(true),
        "enableControllerAttachDetach" => json!(false),
        "imagePullCredentialsVerificationPolicy" => json!("AlwaysVerify"),
        "preloadedImagesVerificationAllowlist" => json!(["registry.example/*"]),
        "volumeStatsAggPeriod" => json!("30s"),
        "kubeletCgroups" => json!("/kubelet.slice"),
        "systemCgroups" => json!("/system.slice"),
        "draManagerReconcilePeriod" => json!("1m"),
        "qosReserved" => json!({"memory": "50%"}),
        "podCIDR" => json!("10.1.0.0/24"),
        "contentType" => json!("application/json"),
        "configMapAndSecretChangeDetectionStrategy" => json!("Cache"),
        "showHiddenMetricsForVersion" => json!("1.32"),
        "volumePluginDir" => json!("/opt/flex"),
        "logging.flushFrequency" => json!("1s"),
        "logging.vmodule" => json!([{"filePattern": "x", "verbosity": 2}]),
        "logging.options" => json!({"text": {"splitStream": true}}),
        "crashLoopBackOff.maxContainerRestartPeriod" => json!("1m"),
        "reservedMemory" => json!([{"numaNode": 0, "limits": {"memory": "1Gi"}}]),
        "memoryReservationPolicy" => json!("Static"),
        "tracing" => json!({"endpoint": "localhost:4317"}),
        "userNamespaces" => json!({"idsPerPod": 131072}),
        _ => return None,
    })
}

/// The default configuration with `value` at the dotted `path`.
fn with(path: &str, value: serde_json::Value) -> KubeletConfiguration {
    let mut doc = serde_json::to_value(load_config(None, None).unwrap()).unwrap();
    let keys: Vec<&str> = path.split('.').collect();
    let (last, parents) = keys.split_last().unwrap();
    let mut cur = &mut doc;
    for k in parents {
        cur = cur
            .as_object_mut()
            .unwrap()
            .entry(*k)
            .or_insert_with(|| json!({}));
    }
    cur.as_object_mut()
        .unwrap()
        .insert((*last).to_owned(), value);
    serde_json::from_value(doc).unwrap()
}

#[test]
fn every_rejected_and_warned_row_names_its_field() {
    for row in FIELDS {
        let named = label(row.path);
        match row.support {
            Support::RejectedUnlessDefault => {
                let v = sample(row.path).unwrap_or_else(|| panic!("no sample for {}", row.path));
                match check(&with(row.path, v)) {
                    Err(ConfigError::Unsupported(errs)) => {
                        assert_eq!(errs.len(), 1, "{}: {errs:?}", row.path);
                        assert!(
                            errs[0].starts_with(&format!("{named} is set to "))
                                && errs[0].contains("which rkubelet does not support"),
                            "{}",
                            errs[0]
                        );
                    }
                    other => panic!("{}: expected a rejection, got {other:?}", row.path),
                }
            }
            Support::Warned => {
                let v = sample(row.path).unwrap_or_else(|| panic!("no sample for {}", row.path));
                let w = check(&with(row.path, v)).unwrap();
                assert!(
                    w.iter()
                        .any(|w| w.starts_with(&format!("{named} is set to "))
                            && w.contains("which rkubelet does not implement yet")),
                    "{}: {w:?}",
                    row.path
                );
            }
            Support::WarnedWhenTrue => {
                let w = check(&with(row.path, json!(true))).unwrap();
                assert!(
                    w.iter().any(|w| w.starts_with(&format!("{named} is true"))),
                    "{}: {w:?}",
                    row.path
                );
                let w = check(&with(row.path, json!(false))).unwrap();
                assert!(
                    !w.iter().any(|w| w.contains(row.path)),
                    "{}: {w:?}",
                    row.path
                );
            }
            Support::Honoured { .. } | Support::RejectedByValidation { .. } => {}
        }
    }
}

/// The "Done when" rule of the page: every row of every table in `docs/configuration.md` is
/// honoured, refused or warned; nothing else (no "rkubelet", "partly", "ignored").
#[test]
fn every_docs_row_is_honoured_refused_or_warned() {
    let doc = std::fs::read_to_string(workspace_root().join("docs/configuration.md")).unwrap();
    let bad = rows_with_other_statuses(&doc);
    assert!(bad.is_empty(), "rows with another status: {bad:?}");
    // The rule sees a row that breaks it, in either table.
    let broken = doc.replacen("| honoured |", "| rkubelet |", 1);
    assert_eq!(rows_with_other_statuses(&broken).len(), 1);
    let broken = doc.replace(
        "| `--cloud-config` | warned unless default |",
        "| `--cloud-config` | ignored |",
    );
    assert_eq!(rows_with_other_statuses(&broken).len(), 1);
    // rkubelet's own fields say so.
    assert!(doc.contains(
        "| `podHousekeepingPeriod` |  | honoured | `crates/rkubelet/src/main.rs::agent_config_carries_the_configuration`; rkubelet extension, not an upstream field |"
    ));
}

/// Every row of each Markdown table with a `Status` column whose status is not in
/// [`STATUSES`]; panics on a table without one (a table the rule cannot read).
fn rows_with_other_statuses(doc: &str) -> Vec<String> {
    let cells = |line: &str| -> Vec<String> {
        let line = line.replace("\\|", "\u{0}");
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let lines: Vec<&str> = doc.lines().collect();
    let mut bad = Vec::new();
    let mut tables = 0;
    let mut rows = 0;
    let mut i = 0;
    while i + 1 < lines.len() {
        let is_table = lines[i].starts_with('|') && lines[i + 1].starts_with("|---");
        if !is_table {
            i += 1;
            continue;
        }
        let header = cells(lines[i]);
        let Some(col) = header.iter().position(|h| h == "Status") else {
            panic!("table without a Status column: {}", lines[i]);
        };
        tables += 1;
        i += 2;
        while i < lines.len() && lines[i].starts_with('|') {
            rows += 1;
            let row = cells(lines[i]);
            if !row.get(col).is_some_and(|s| STATUSES.contains(&s.as_str())) {
                bad.push(lines[i].to_owned());
            }
            i += 1;
        }
    }
    assert_eq!(tables, 2, "the field table and the flag-only table");
    assert!(rows >= FIELDS.len(), "{rows} rows read");
    bad
}

#[test]
fn a_field_set_by_several_flags_names_them_all() {
    assert_eq!(
        label("logging.options"),
        "logging.options (--log-text-split-stream, --log-text-info-buffer-size, --log-json-split-stream, --log-json-info-buffer-size)"
    );
    assert_eq!(label("podHousekeepingPeriod"), "podHousekeepingPeriod");
    let md = render_markdown();
    assert!(md.contains("| `authentication.anonymous.enabled` | `--anonymous-auth` | honoured |"));
    assert!(md.contains("| `--lock-file` | honoured | `crates/rkubelet/src/lockfile.rs::"));
    assert!(md.contains("| `--register-schedulable` | rejected unless default | only true"));
}

#[test]
fn flags_are_listed_once() {
    let mut seen = BTreeSet::new();
    for (flag, _) in FLAGS {
        assert!(seen.insert(*flag), "--{flag} is listed twice");
    }
}
