//! gRPC probes end to end: the agent on the real containerd of `dev/runtime.sh up`
//! (`RKUBELET_CRI_ENDPOINT`) runs a hostNetwork busybox pod whose readiness probe asks a
//! tonic-health server this test runs on the host (127.0.0.1:<port>). The binary name starts
//! with `containerd`, so nextest runs it alone with the other containerd tests.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig, AgentDeps};
use kubelet::events::CollectingRecorder;
use kubelet::sources::{ManifestOrigin, static_pods_from_manifest};
use kubelet::types::{PodOp, PodSource, PodUpdate};
use rkubelet_cri::RemoteRuntime;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;

const IMAGE: &str = "docker.io/library/busybox:latest";

fn ready(agent: &Agent, pod: &Pod) -> Option<String> {
    agent
        .status
        .get_pod_status(pod.metadata.uid.as_deref().unwrap())?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status)
}

async fn wait_ready(agent: &Agent, pod: &Pod, want: &str, limit: Duration) {
    let start = Instant::now();
    while ready(agent, pod).as_deref() != Some(want) {
        assert!(
            start.elapsed() < limit,
            "Ready never became {want}: {:?}",
            agent
                .status
                .get_pod_status(pod.metadata.uid.as_deref().unwrap())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_readiness_follows_the_health_service() {
    let endpoint = rkubelet_cri::testing::real_runtime_endpoint();

    // The health server, beside the pod on the host network.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("probe.Svc", ServingStatus::NotServing)
        .await;
    let stop = CancellationToken::new();
    let server_stop = stop.clone();
    let server = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                server_stop.cancelled_owned(),
            )
            .await
    });

    let runtime = Arc::new(
        RemoteRuntime::connect(&endpoint, Duration::from_secs(30))
            .await
            .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = AgentConfig::for_tests(dir.path(), "grpc-node");
    let agent = Agent::start(
        cfg,
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

    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: grpc\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, \"trap 'exit 0' TERM; while true; do sleep 0.2; done\"]\n    readinessProbe:\n      grpc: {{port: {port}, service: probe.Svc}}\n      periodSeconds: 1\n      failureThreshold: 1\n"
    );
    let pod = static_pods_from_manifest(
        yaml.as_bytes(),
        "grpc-node",
        &ManifestOrigin::File(Path::new("/etc/manifests/grpc.yaml")),
        false,
    )
    .unwrap()
    .remove(0);
    let send = |pods: Vec<Pod>| {
        agent
            .source_tx
            .send(PodUpdate::new(PodOp::Set, PodSource::File, pods))
    };
    send(vec![pod.clone()]).await.unwrap();

    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_ready(&agent, &pod, "False", Duration::from_secs(60)).await;
    reporter
        .set_service_status("probe.Svc", ServingStatus::Serving)
        .await;
    wait_ready(&agent, &pod, "True", Duration::from_secs(20)).await;
    reporter
        .set_service_status("probe.Svc", ServingStatus::NotServing)
        .await;
    wait_ready(&agent, &pod, "False", Duration::from_secs(20)).await;
    let grpc_counts: u64 = agent
        .prober
        .metrics()
        .snapshot()
        .iter()
        .filter(|(l, _)| l.probe_type == "Readiness")
        .map(|(_, n)| n)
        .sum();
    assert!(grpc_counts >= 3, "probes counted: {grpc_counts}");

    // Clean up the runtime before the next containerd test.
    send(vec![]).await.unwrap();
    let start = Instant::now();
    while agent.workers.sizes() != (0, 0) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "pod never removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    agent.shutdown().await;
    stop.cancel();
    server.await.unwrap().unwrap();
}
