//! Shared pieces of the fake-runtime agent tests: static pods from YAML, the agent's
//! dependencies on a `FakeRuntime`, feeding the file source, waiting in (paused) tokio time and
//! reading pod statuses back from the status manager.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentDeps};
use kubelet::events::CollectingRecorder;
use kubelet::sources::{ManifestOrigin, static_pods_from_manifest};
use kubelet::types::{PodOp, PodSource, PodUpdate};
use rkubelet_cri::fake::FakeRuntime;
use tokio::time::Instant;

pub const IMAGE: &str = "docker.io/library/busybox:latest";

/// The static pod a manifest `/etc/manifests/<file>.yaml` holding `yaml` gives on `node`.
pub fn static_pod(yaml: &str, file: &str, node: &str) -> Pod {
    let path = format!("/etc/manifests/{file}.yaml");
    static_pods_from_manifest(
        yaml.as_bytes(),
        node,
        &ManifestOrigin::File(Path::new(&path)),
        false,
    )
    .unwrap()
    .remove(0)
}

/// Standalone agent dependencies: `fake` as runtime and image service, `events` as recorder.
pub fn fake_deps(fake: &FakeRuntime, events: &CollectingRecorder) -> AgentDeps {
    AgentDeps {
        runtime: Arc::new(fake.clone()),
        images: Arc::new(fake.clone()),
        events: Arc::new(events.clone()),
        api: None,
    }
}

/// API-server mode dependencies: [`fake_deps`] with a fresh recorder, plus `client`.
pub fn api_deps(fake: &FakeRuntime, client: &kube::Client) -> AgentDeps {
    AgentDeps {
        api: Some(client.clone()),
        ..fake_deps(fake, &CollectingRecorder::default())
    }
}

/// Replaces the file source's pods with `pods`.
pub async fn set(agent: &Agent, pods: Vec<Pod>) {
    agent
        .source_tx
        .send(PodUpdate::new(PodOp::Set, PodSource::File, pods))
        .await
        .unwrap();
}

/// Advances (paused) time in small steps until `pred` holds; panics after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut pred: impl FnMut() -> bool) {
    let start = Instant::now();
    while !pred() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn uid(p: &Pod) -> &str {
    p.metadata.uid.as_deref().unwrap()
}

/// The pod's phase as the status manager has it.
pub fn phase(agent: &Agent, pod: &Pod) -> Option<String> {
    agent.status.get_pod_status(uid(pod)).and_then(|s| s.phase)
}
