//! `/metrics` and `/metrics/probes` of a whole agent on the `FakeRuntime` (paused time): the
//! kubelet_* series move as pods start, fail and go away; every upstream family name is exposed;
//! and the text passes `promtool check metrics` (Debian package `prometheus`, installed by
//! `dev/runtime.sh`; the tests fail, never skip, without it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig, AgentDeps};
use kubelet::events::CollectingRecorder;
use kubelet::metrics::KubeletMetrics;
use kubelet::sources::{ManifestOrigin, static_pods_from_manifest};
use kubelet::types::{PodOp, PodSource, PodUpdate};
use rkubelet_cri::CriError;
use rkubelet_cri::fake::{Behaviour, FakeRuntime};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const IMAGE: &str = "docker.io/library/busybox:latest";
const NODE: &str = "node-m";

/// Family names of the upstream kubelet's `/metrics` this kubelet must expose (from
/// `pkg/kubelet/metrics/metrics.go`, `pkg/kubelet/server/metrics` and client_golang's process
/// collector).
const UPSTREAM_NAMES: &[&str] = &[
    "kubelet_node_name",
    "kubelet_running_pods",
    "kubelet_running_containers",
    "kubelet_desired_pods",
    "kubelet_active_pods",
    "kubelet_mirror_pods",
    "kubelet_restarted_pods_total",
    "kubelet_pod_start_duration_seconds",
    "kubelet_pod_start_sli_duration_seconds",
    "kubelet_pod_start_total_duration_seconds",
    "kubelet_pod_worker_duration_seconds",
    "kubelet_pod_worker_start_duration_seconds",
    "kubelet_pleg_relist_duration_seconds",
    "kubelet_pleg_relist_interval_seconds",
    "kubelet_pleg_last_seen_seconds",
    "kubelet_runtime_operations_total",
    "kubelet_runtime_operations_duration_seconds",
    "kubelet_runtime_operations_errors_total",
    "kubelet_run_podsandbox_duration_seconds",
    "kubelet_run_podsandbox_errors_total",
    "kubelet_started_pods_total",
    "kubelet_started_pods_errors_total",
    "kubelet_started_containers_total",
    "kubelet_started_containers_errors_total",
    "kubelet_evictions",
    "kubelet_image_pull_duration_seconds",
    "kubelet_http_requests_total",
    "kubelet_http_requests_duration_seconds",
    "kubelet_http_inflight_requests",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
];

/// Lint findings promtool reports for names upstream itself uses (kept for compatibility).
const ACCEPTED_LINT: &[&str] = &["kubelet_evictions counter metrics should have \"_total\" suffix"];

/// Runs `promtool check metrics` on `text`; fails on a parse error or any lint finding not in
/// `ACCEPTED_LINT`. Fails (never skips) when promtool is missing.
fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool not found: install the Debian package `prometheus` (dev/runtime.sh up does)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.code() {
        Some(0) => {}
        // 3: lint problems only; each must be an accepted one.
        Some(3) => {
            for line in report.lines().filter(|l| !l.trim().is_empty()) {
                assert!(
                    ACCEPTED_LINT.contains(&line.trim()),
                    "promtool lint problem {line:?}\nfull report:\n{report}\ntext:\n{text}"
                );
            }
        }
        code => panic!("promtool check metrics failed ({code:?}):\n{report}\ntext:\n{text}"),
    }
}

fn pod(yaml_spec: &str, name: &str) -> Pod {
    let yaml = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{yaml_spec}");
    let path = format!("/etc/manifests/{name}.yaml");
    static_pods_from_manifest(
        yaml.as_bytes(),
        NODE,
        &ManifestOrigin::File(Path::new(&path)),
        false,
    )
    .unwrap()
    .remove(0)
}

fn simple(name: &str, image: &str, extra: &str) -> Pod {
    pod(
        &format!(
            "  terminationGracePeriodSeconds: 1\n  containers:\n  - name: {name}-c\n    image: {image}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n{extra}"
        ),
        name,
    )
}

fn uid(p: &Pod) -> &str {
    p.metadata.uid.as_deref().unwrap()
}

fn running(agent: &Agent, p: &Pod) -> bool {
    agent.status.get_pod_status(uid(p)).is_some_and(|s| {
        s.phase.as_deref() == Some("Running")
            && s.container_statuses.as_ref().is_some_and(|cs| {
                !cs.is_empty()
                    && cs
                        .iter()
                        .all(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
            })
    })
}

async fn set(agent: &Agent, pods: Vec<Pod>) {
    agent
        .source_tx
        .send(PodUpdate {
            op: PodOp::Set,
            source: PodSource::File,
            pods,
        })
        .await
        .unwrap();
}

async fn wait_until(what: &str, limit: Duration, mut pred: impl FnMut() -> bool) {
    let start = Instant::now();
    while !pred() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn value(m: &KubeletMetrics, name: &str, labels: &[&str]) -> f64 {
    m.value(name, labels).unwrap_or(0.0)
}

fn count(m: &KubeletMetrics, name: &str, labels: &[&str]) -> u64 {
    m.histogram_count(name, labels).unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_pods_through_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    fake.on_start("withinit-init", Behaviour::ExitImmediately(0));
    let deps = AgentDeps {
        runtime: Arc::new(fake.clone()),
        images: Arc::new(fake.clone()),
        events: Arc::new(CollectingRecorder::default()),
        api: None,
    };
    let agent = Agent::start(
        AgentConfig::for_tests(dir.path(), NODE),
        deps,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let m = agent.metrics.clone();

    let probe =
        "    readinessProbe:\n      exec:\n        command: [\"true\"]\n      periodSeconds: 1\n";
    let mut pods = vec![
        simple("web-0", IMAGE, probe),
        simple("web-1", IMAGE, ""),
        // Not on the node: pulled once.
        simple("pulled", "docker.io/library/nginx:1.25", ""),
        pod(
            &format!(
                "  terminationGracePeriodSeconds: 1\n  initContainers:\n  - name: withinit-init\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"true\"]\n  containers:\n  - name: withinit-c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n"
            ),
            "withinit",
        ),
    ];
    set(&agent, pods.clone()).await;
    wait_until("4 pods running", Duration::from_secs(60), || {
        pods.iter().all(|p| running(&agent, p))
    })
    .await;

    // A container whose first CreateContainer fails, then starts on the worker's retry.
    fake.fail_next(
        "CreateContainer",
        CriError::unknown("CreateContainer", "injected failure"),
    );
    pods.push(simple("flaky", IMAGE, ""));
    set(&agent, pods.clone()).await;
    wait_until("flaky running", Duration::from_secs(120), || {
        running(&agent, &pods[4])
    })
    .await;
    wait_until(
        "gauges caught up (relist + housekeeping)",
        Duration::from_secs(30),
        || {
            value(&m, "kubelet_running_pods", &[]) == 5.0
                && value(&m, "kubelet_desired_pods", &["true"]) == 5.0
                && value(&m, "kubelet_running_containers", &["running"]) == 5.0
        },
    )
    .await;
    let web0 = pods[0].clone();
    wait_until("readiness probes ran", Duration::from_secs(30), || {
        agent
            .prober
            .metrics()
            .snapshot()
            .iter()
            .any(|(l, n)| l.pod == "web-0-node-m" && l.result == "successful" && *n >= 2)
    })
    .await;

    // Gauges.
    assert_eq!(value(&m, "kubelet_node_name", &[NODE]), 1.0);
    assert_eq!(value(&m, "kubelet_running_containers", &["exited"]), 1.0);
    assert_eq!(value(&m, "kubelet_desired_pods", &[""]), 0.0);
    assert_eq!(value(&m, "kubelet_active_pods", &["true"]), 5.0);
    assert_eq!(value(&m, "kubelet_mirror_pods", &[]), 0.0);
    assert!(value(&m, "kubelet_pleg_last_seen_seconds", &[]) > 1.6e9);

    // Pod and container starts.
    assert_eq!(value(&m, "kubelet_started_pods_total", &[]), 5.0);
    assert_eq!(value(&m, "kubelet_started_pods_errors_total", &[]), 0.0);
    assert_eq!(
        value(&m, "kubelet_started_containers_total", &["init_container"]),
        1.0
    );
    let regular = value(&m, "kubelet_started_containers_total", &["container"]);
    assert_eq!(regular, 6.0, "5 containers, one of them twice");
    assert_eq!(
        value(
            &m,
            "kubelet_started_containers_errors_total",
            &["container", "CreateContainerError"]
        ),
        1.0
    );

    // Runtime operations, counted by the CRI decorator with upstream's names.
    assert_eq!(
        value(&m, "kubelet_runtime_operations_total", &["run_podsandbox"]),
        5.0
    );
    assert_eq!(
        value(
            &m,
            "kubelet_runtime_operations_total",
            &["create_container"]
        ),
        7.0
    );
    assert_eq!(
        value(
            &m,
            "kubelet_runtime_operations_errors_total",
            &["create_container"]
        ),
        1.0
    );
    assert_eq!(
        value(&m, "kubelet_runtime_operations_total", &["pull_image"]),
        1.0
    );
    assert!(value(&m, "kubelet_runtime_operations_total", &["list_podsandbox"]) >= 2.0);
    assert!(value(&m, "kubelet_runtime_operations_total", &["exec_sync"]) >= 2.0);
    assert_eq!(
        count(
            &m,
            "kubelet_runtime_operations_duration_seconds",
            &["run_podsandbox"]
        ),
        5
    );
    assert_eq!(
        count(&m, "kubelet_run_podsandbox_duration_seconds", &[""]),
        5
    );
    assert_eq!(
        count(&m, "kubelet_image_pull_duration_seconds", &["0-10MB"]),
        1
    );

    // Timings.
    assert!(count(&m, "kubelet_pleg_relist_duration_seconds", &[]) >= 2);
    assert!(count(&m, "kubelet_pleg_relist_interval_seconds", &[]) >= 1);
    assert_eq!(count(&m, "kubelet_pod_start_duration_seconds", &[]), 5);
    assert_eq!(
        count(&m, "kubelet_pod_worker_start_duration_seconds", &[]),
        5
    );
    assert!(count(&m, "kubelet_pod_worker_duration_seconds", &["create"]) >= 5);
    assert!(count(&m, "kubelet_pod_worker_duration_seconds", &["sync"]) >= 1);

    // The exposition: every upstream family, valid for promtool.
    let text = agent.metrics.render();
    for name in UPSTREAM_NAMES {
        assert!(
            text.contains(&format!("\n# TYPE {name} "))
                || text.starts_with(&format!("# HELP {name} ")),
            "{name} missing from /metrics:\n{text}"
        );
    }
    assert!(text.contains("kubelet_started_containers_errors_total{code=\"CreateContainerError\",container_type=\"container\"} 1\n"));
    assert!(text.contains("kubelet_running_pods 5\n"));
    promtool_check(&text);

    // /metrics/probes.
    let probes = agent.prober.metrics().render();
    assert!(
        probes.contains(&format!(
            "prober_probe_total{{container=\"web-0-c\",namespace=\"default\",pod=\"web-0-node-m\",pod_uid=\"{}\",probe_type=\"Readiness\",result=\"successful\"}} ",
            uid(&web0)
        )),
        "{probes}"
    );
    assert!(probes.contains("# TYPE prober_probe_duration_seconds histogram\n"));
    assert!(probes.contains("prober_probe_duration_seconds_count{container=\"web-0-c\",namespace=\"default\",pod=\"web-0-node-m\",probe_type=\"Readiness\"} "));
    assert!(probes.contains("# TYPE process_start_time_seconds gauge\n"));
    promtool_check(&probes);

    // Everything goes away: the gauges follow.
    set(&agent, vec![]).await;
    wait_until("runtime empty", Duration::from_secs(60), || {
        fake.containers().is_empty() && fake.sandboxes().is_empty()
    })
    .await;
    wait_until("gauges at zero", Duration::from_secs(30), || {
        value(&m, "kubelet_running_pods", &[]) == 0.0
            && value(&m, "kubelet_running_containers", &["running"]) == 0.0
            && value(&m, "kubelet_desired_pods", &["true"]) == 0.0
            && value(&m, "kubelet_active_pods", &["true"]) == 0.0
            && !agent.prober.metrics().render().contains("web-0-node-m")
    })
    .await;
    assert!(value(&m, "kubelet_runtime_operations_total", &["stop_podsandbox"]) >= 5.0);
    assert!(
        value(
            &m,
            "kubelet_runtime_operations_total",
            &["remove_container"]
        ) >= 6.0
    );
    agent.shutdown().await;
}

#[test]
fn synthetic_exposition_with_awkward_label_values_passes_promtool() {
    let m = KubeletMetrics::new("node \"quoted\" \\ back\nslash");
    m.inc_eviction("memory.available");
    m.inc_eviction("nodefs.inodesFree");
    m.record_http_request("GET", "/pods", "readonly", Duration::from_millis(12));
    m.record_http_request("POST", "/exec/ns/p/c", "readwrite", Duration::from_secs(30));
    m.record_runtime_operation("version", Duration::from_micros(800), false);
    m.record_started_container("init_container", Some("ErrImagePull"));
    m.observe_image_pull(3 << 30, Duration::from_secs(400));
    m.set_running(3, &[("running", 4), ("exited", 2)]);
    m.record_restarted_pod(true);
    let text = m.render();
    assert!(
        text.contains("kubelet_node_name{node=\"node \\\"quoted\\\" \\\\ back\\nslash\"} 1\n"),
        "{text}"
    );
    assert!(text.contains(
        "kubelet_image_pull_duration_seconds_bucket{image_size_in_bytes=\"1GB-5GB\",le=\"360\"} 0\n"
    ));
    assert!(text.contains(
        "kubelet_image_pull_duration_seconds_bucket{image_size_in_bytes=\"1GB-5GB\",le=\"480\"} 1\n"
    ));
    assert!(text.contains("kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"version\",le=\"0.005\"} 1\n"));
    // Families appear in name order.
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    promtool_check(&text);
}
