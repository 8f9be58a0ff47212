//! Metrics end to end on the real containerd of `dev/runtime.sh up` (`RKUBELET_CRI_ENDPOINT`):
//! the agent runs a hostNetwork busybox pod; the CRI decorator counts and times the real calls
//! under upstream's operation names, the PLEG/pod gauges follow, and the exposition passes
//! `promtool check metrics`. The binary name starts with `containerd`, so nextest runs it alone
//! with the other containerd tests.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubelet::agent::{Agent, AgentConfig, AgentDeps};
use kubelet::events::CollectingRecorder;
use kubelet::sources::{ManifestOrigin, static_pods_from_manifest};
use kubelet::types::{PodOp, PodSource, PodUpdate};
use rkubelet_cri::RemoteRuntime;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::promtool_check;

const IMAGE: &str = "docker.io/library/busybox:latest";
const NODE: &str = "metrics-node";

async fn wait_until(what: &str, limit: Duration, mut pred: impl FnMut() -> bool) {
    let start = Instant::now();
    while !pred() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_cri_calls_are_counted_and_exposed() {
    let endpoint = rkubelet_cri::testing::real_runtime_endpoint();
    let runtime = Arc::new(
        RemoteRuntime::connect(&endpoint, Duration::from_secs(30))
            .await
            .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(
        AgentConfig::for_tests(dir.path(), NODE),
        AgentDeps {
            runtime: runtime.clone(),
            images: runtime,
            events: Arc::new(CollectingRecorder::default()),
            api: None,
        },
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let m = agent.metrics.clone();

    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: metered\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, \"trap 'exit 0' TERM; while true; do sleep 0.2; done\"]\n"
    );
    let pod = static_pods_from_manifest(
        yaml.as_bytes(),
        NODE,
        &ManifestOrigin::File(Path::new("/etc/manifests/metered.yaml")),
        false,
    )
    .unwrap()
    .remove(0);
    let uid = pod.metadata.uid.clone().unwrap();
    let send = |pods| {
        agent
            .source_tx
            .send(PodUpdate::new(PodOp::Set, PodSource::File, pods))
    };
    send(vec![pod]).await.unwrap();
    let v = |name: &str, labels: &[&str]| m.value(name, labels).unwrap_or(0.0);
    wait_until(
        "pod running and gauges updated",
        Duration::from_secs(60),
        || {
            agent
                .status
                .get_pod_status(&uid)
                .is_some_and(|s| s.phase.as_deref() == Some("Running"))
                && v("kubelet_running_pods", &[]) >= 1.0
                && v("kubelet_running_containers", &["running"]) >= 1.0
                && v("kubelet_desired_pods", &["true"]) == 1.0
        },
    )
    .await;

    for (op, at_least) in [
        ("run_podsandbox", 1.0),
        ("create_container", 1.0),
        ("start_container", 1.0),
        ("list_podsandbox", 1.0),
        ("list_containers", 1.0),
        ("container_status", 1.0),
        ("image_status", 1.0),
    ] {
        let n = v("kubelet_runtime_operations_total", &[op]);
        assert!(n >= at_least, "{op}: {n}");
        assert_eq!(
            m.histogram_count("kubelet_runtime_operations_duration_seconds", &[op]),
            Some(n as u64),
            "{op}"
        );
    }
    assert_eq!(v("kubelet_started_pods_total", &[]), 1.0);
    assert_eq!(v("kubelet_started_containers_total", &["container"]), 1.0);
    assert_eq!(
        m.histogram_count("kubelet_pod_start_duration_seconds", &[]),
        Some(1)
    );
    assert!(
        m.histogram_count("kubelet_pleg_relist_duration_seconds", &[])
            .unwrap_or(0)
            >= 1
    );
    let text = agent.metrics.render();
    // A real sandbox takes measurable time: its duration sum is positive.
    let sum_line = text
        .lines()
        .find(|l| {
            l.starts_with(
                "kubelet_runtime_operations_duration_seconds_sum{operation_type=\"run_podsandbox\"}",
            )
        })
        .unwrap();
    let sum: f64 = sum_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(sum > 0.0, "{sum_line}");
    assert!(text.contains("\nprocess_resident_memory_bytes "));
    promtool_check(&text);
    promtool_check(&agent.prober.metrics().render());

    // Clean up the runtime before the next containerd test.
    send(vec![]).await.unwrap();
    wait_until("pod removed", Duration::from_secs(60), || {
        agent.workers.sizes() == (0, 0)
    })
    .await;
    assert!(v("kubelet_runtime_operations_total", &["stop_podsandbox"]) >= 1.0);
    agent.shutdown().await;
}
