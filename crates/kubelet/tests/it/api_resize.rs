//! In-place pod resize end to end through the fake API server: a `pods/resize` PATCH reaches
//! the kubelet's pod source, the kubelet allocates and actuates it (CRI
//! `UpdateContainerResources` on the fake runtime) and reports `allocatedResources`,
//! `resources` and the resize conditions in the API status — `PodResizeInProgress` while the
//! resize is not actuated (here: the runtime refused it once), cleared once it is, and
//! `PodResizePending`/`Infeasible` for a request bigger than the node. Real time.

use crate::common;

use std::time::Duration;

use fake_apiserver::Options;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubelet::agent::{Agent, AgentConfig};
use rkubelet_cri::CriError;
use rkubelet_cri::fake::FakeRuntime;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NODE: &str = "resize-node";
const IMAGE: &str = "docker.io/library/busybox:latest";

async fn wait<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn resize_condition(pod: &Value, type_: &str) -> Option<Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_through_the_api_is_applied_and_reported() {
    let common::ApiFixture {
        dir,
        server,
        client,
    } = common::api_fixture(Options {
        bookmark_interval: Duration::from_secs(1),
        ..Options::default()
    })
    .await;
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
    cfg.node_status.update_frequency = Duration::from_secs(1);
    cfg.api.status_sync_period = Duration::from_secs(1);
    let agent = Agent::start(
        cfg,
        common::agent::api_deps(&fake, &client),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "rz", "namespace": "default"},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                              "limits": {"cpu": "200m", "memory": "64Mi"}}}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let get = || server.get("pods", "default", "rz");
    wait(30, "the pod running with its resources reported", || {
        let p = get()?;
        let cs = &p["status"]["containerStatuses"][0];
        (cs["state"]["running"].is_object() && cs["resources"]["limits"]["cpu"] == "200m")
            .then_some(())
    })
    .await;
    let p = get().unwrap();
    assert_eq!(
        p["status"]["containerStatuses"][0]["allocatedResources"],
        json!({"cpu": "100m", "memory": "32Mi"})
    );

    // The runtime refuses the first update: the resize stays in progress with an error.
    fake.fail_next(
        "UpdateContainerResources",
        CriError::unknown("UpdateContainerResources", "injected"),
    );
    pods.patch_subresource(
        "resize",
        "rz",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "150m"}, "limits": {"cpu": "300m"}}}]}})),
    )
    .await
    .unwrap();
    let in_progress = wait(30, "PodResizeInProgress", || {
        resize_condition(&get()?, "PodResizeInProgress")
    })
    .await;
    assert_eq!(in_progress["status"], "True");
    let p = get().unwrap();
    assert_eq!(
        p["status"]["containerStatuses"][0]["allocatedResources"]["cpu"], "150m",
        "allocated before it is actuated"
    );
    // The retry succeeds: actuated, reported, condition cleared.
    wait(60, "the resize actuated and the condition cleared", || {
        let p = get()?;
        let cs = &p["status"]["containerStatuses"][0];
        (cs["resources"]["limits"]["cpu"] == "300m"
            && cs["resources"]["requests"]["cpu"] == "150m"
            && resize_condition(&p, "PodResizeInProgress").is_none())
        .then_some(())
    })
    .await;
    assert!(fake.call_count("UpdateContainerResources") >= 2);
    let p = get().unwrap();
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);

    // Far bigger than the node: Infeasible, the running values stay.
    pods.patch_subresource(
        "resize",
        "rz",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "4000"}, "limits": {"cpu": "4000"}}}]}})),
    )
    .await
    .unwrap();
    let pending = wait(30, "PodResizePending", || {
        resize_condition(&get()?, "PodResizePending")
    })
    .await;
    assert_eq!(pending["reason"], "Infeasible");
    assert!(
        pending["message"]
            .as_str()
            .unwrap()
            .starts_with("Node didn't have enough capacity: cpu, requested: 4000000, capacity: "),
        "{pending}"
    );
    let p = get().unwrap();
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(cs["resources"]["limits"]["cpu"], "300m");
    assert_eq!(cs["allocatedResources"]["cpu"], "150m");
    agent.shutdown().await;
}
