//! Pods with `resourceClaims` on a kubelet without DRA (fake runtime, whole agent, paused
//! time): as upstream with no DRA driver registered, such a pod never gets a sandbox, draws
//! `FailedPrepareDynamicResources` again on each retry and stays Pending/ContainerCreating,
//! while a pod without claims beside it runs.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use kubelet::types::{PodOp, PodSource, PodUpdate};
use rkubelet_cri::api::ContainerState;
use rkubelet_cri::fake::FakeRuntime;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, uid, wait_until};

const NODE: &str = "node-a";

fn api_pod(name: &str, claims: bool) -> Pod {
    let mut v = serde_json::json!({
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "annotations": {"kubernetes.io/config.source": "api"},
        },
        "spec": {
            "nodeName": NODE,
            "containers": [{
                "name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
            }],
        },
    });
    if claims {
        v["spec"]["resourceClaims"] =
            serde_json::json!([{"name": "gpu", "resourceClaimName": "gpu-1"}]);
        v["spec"]["containers"][0]["resources"] = serde_json::json!({"claims": [{"name": "gpu"}]});
    }
    serde_json::from_value(v).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_pod_with_resource_claims_never_gets_a_sandbox_and_draws_the_event() {
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let events = CollectingRecorder::default();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(
        AgentConfig::for_tests(dir.path(), NODE),
        fake_deps(&fake, &events),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let (held, plain) = (api_pod("held", true), api_pod("plain", false));
    agent
        .source_tx
        .send(PodUpdate::new(
            PodOp::Set,
            PodSource::Api,
            vec![held.clone(), plain.clone()],
        ))
        .await
        .unwrap();
    let sandboxes = |p: &Pod| {
        fake.sandboxes()
            .iter()
            .filter(|s| s.metadata.as_ref().is_some_and(|m| m.uid == uid(p)))
            .count()
    };
    let failed = || {
        events
            .with_reason("FailedPrepareDynamicResources")
            .into_iter()
            .filter(|e| e.pod_uid == uid(&held))
            .count()
    };
    // Retried with backoff: the event comes again, and the pod without claims runs meanwhile.
    wait_until("two failed prepares", Duration::from_secs(120), || {
        failed() >= 2
    })
    .await;
    wait_until("the plain pod running", Duration::from_secs(60), || {
        fake.containers().iter().any(|c| {
            c.state == ContainerState::ContainerRunning as i32
                && c.labels.get("io.kubernetes.pod.uid").map(String::as_str) == Some(uid(&plain))
        })
    })
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(sandboxes(&held), 0, "a pod with claims got a sandbox");
    assert_eq!(sandboxes(&plain), 1);
    assert!(
        fake.containers()
            .iter()
            .all(|c| c.labels.get("io.kubernetes.pod.uid").map(String::as_str) != Some(uid(&held)))
    );

    let ev = events.with_reason("FailedPrepareDynamicResources");
    assert_eq!(
        ev[0].message,
        "Failed to prepare dynamic resources: resource claim \"gpu\" (ResourceClaim default/gpu-1): the DRA driver of the claim was not found in the list of registered DRA plugins (rkubelet registers no DRA plugins)"
    );
    assert!(
        ev.iter().all(|e| e.pod_uid == uid(&held)),
        "only the held pod: {ev:?}"
    );
    let status = agent.status.get_pod_status(uid(&held)).unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let waiting = status.container_statuses.unwrap()[0]
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone());
    assert_eq!(waiting.as_deref(), Some("ContainerCreating"));
    agent.shutdown().await;
}
