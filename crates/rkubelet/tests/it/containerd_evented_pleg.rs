//! The `EventedPLEG` gate on the real containerd 1.6 (`dev/runtime.sh up`), which has no
//! `GetContainerEvents`: the kubelet logs the fallback once, with containerd's reason, keeps
//! relisting, and a static pod still runs and is restarted after its container is killed.

use crate::common;

use std::time::Duration;

use common::{Kubelet, cri, phase, pod_containers, running, tail};
use rkubelet_cri::RuntimeService;
use rkubelet_cri::api::{ContainerState, StopContainerRequest};

const IMAGE: &str = "docker.io/library/busybox:latest";

const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: evented\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: docker.io/library/busybox:latest\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_without_events_falls_back_once_and_pods_run() {
    assert!(MANIFEST.contains(IMAGE));
    let mut k = Kubelet::new();
    k.append_config("featureGates:\n  EventedPLEG: true\n");
    k.write_manifest("evented.yaml", MANIFEST);
    k.start();
    let p = k
        .wait_pod("evented", Duration::from_secs(90), "Running", |p| {
            phase(p) == "Running" && running(p, "c")
        })
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();

    // The container dies behind the kubelet's back: the fallback relist sees it.
    let rt = cri().await;
    let first = pod_containers(&rt, &uid).await;
    assert_eq!(first.len(), 1);
    rt.stop_container(StopContainerRequest {
        container_id: first[0].id.clone(),
        timeout: 0,
    })
    .await
    .unwrap();
    k.wait_pod("evented", Duration::from_secs(60), "restarted", |p| {
        p["status"]["containerStatuses"][0]["restartCount"].as_i64() == Some(1) && running(p, "c")
    })
    .await;
    let all = pod_containers(&rt, &uid).await;
    let running_now = all
        .iter()
        .filter(|c| c.state == ContainerState::ContainerRunning as i32)
        .count();
    assert_eq!(running_now, 1, "one running container, no duplicate");

    let log = k.log_text();
    let fallbacks = log
        .lines()
        .filter(|l| l.contains("does not serve GetContainerEvents"))
        .count();
    assert_eq!(fallbacks, 1, "logged once: {}", tail(&log, 40));
    assert!(
        !log.contains("feature gate EventedPLEG=true is not implemented"),
        "the gate is honoured"
    );
    k.remove_manifest("evented.yaml");
    common::wait_pod_containers_gone(&k, &rt, &uid, Duration::from_secs(60)).await;
    k.stop();
}
