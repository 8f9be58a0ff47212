//! Pod-worker lifecycle on the real containerd (`dev/runtime.sh up`): an edited static
//! manifest starts the new pod only after the old pod's container exited (its SIGTERM trap
//! takes seconds), and a manifest moved out of the static pod dir and back while its pod is
//! still terminating runs again once the termination finished.

use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Kubelet, NODE, cri, phase, pod_containers, running, tail};
use rkubelet_cri::api::{
    Container, ContainerFilter, ContainerState, ContainerStatusRequest, ListContainersRequest,
};
use rkubelet_cri::{RemoteRuntime, RuntimeService};

const IMAGE: &str = "docker.io/library/busybox:latest";

/// A pod whose container traps SIGTERM and takes `linger` seconds to exit after it;
/// `generation` changes the manifest (so the UID) and nothing else.
fn lingering_pod(name: &str, generation: u32, linger: u32) -> String {
    let script = format!("trap 'sleep {linger}; exit 0' TERM; while true; do sleep 0.2; done");
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    generation: \"{generation}\"\nspec:\n  terminationGracePeriodSeconds: 30\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script:?}]\n"
    )
}

/// Every container of the static pod `name` (any UID, any state).
async fn containers_named(rt: &RemoteRuntime, name: &str) -> Vec<Container> {
    rt.list_containers(ListContainersRequest {
        filter: Some(ContainerFilter {
            label_selector: [
                (
                    "io.kubernetes.pod.name".to_owned(),
                    format!("{name}-{NODE}"),
                ),
                (
                    "io.kubernetes.pod.namespace".to_owned(),
                    "default".to_owned(),
                ),
            ]
            .into(),
            ..Default::default()
        }),
    })
    .await
    .expect("list containers")
    .containers
}

fn pod_uid(c: &Container) -> &str {
    c.labels
        .get("io.kubernetes.pod.uid")
        .map_or("", String::as_str)
}

fn unix_nanos(t: SystemTime) -> i64 {
    i64::try_from(t.duration_since(UNIX_EPOCH).unwrap().as_nanos()).unwrap()
}

async fn is_running(rt: &RemoteRuntime, id: &str) -> bool {
    rt.container_status(ContainerStatusRequest {
        container_id: id.to_owned(),
        verbose: false,
    })
    .await
    .ok()
    .and_then(|r| r.status)
    .is_some_and(|s| s.state == ContainerState::ContainerRunning as i32)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_static_pod_starts_only_after_the_old_container_exited() {
    let mut k = Kubelet::new();
    k.write_manifest("upd.yaml", &lingering_pod("upd", 1, 4));
    k.start();
    let p = k
        .wait_pod("upd", Duration::from_secs(90), "Running", |p| {
            phase(p) == "Running" && running(p, "c")
        })
        .await;
    let old_uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let rt = cri().await;
    let old = pod_containers(&rt, &old_uid).await;
    assert_eq!(old.len(), 1, "{old:?}");
    let old_id = old[0].id.clone();

    k.write_manifest("upd.yaml", &lingering_pod("upd", 2, 4));
    // Watch the runtime: the latest moment the old container was seen running must come
    // before the new pod's container was created.
    let start = Instant::now();
    let mut old_running_at: Option<i64> = None;
    let new = loop {
        let before = unix_nanos(SystemTime::now());
        let all = containers_named(&rt, "upd").await;
        if all
            .iter()
            .any(|c| c.id == old_id && c.state == ContainerState::ContainerRunning as i32)
        {
            old_running_at = Some(before);
        }
        if let Some(new) = all.into_iter().find(|c| pod_uid(c) != old_uid) {
            break new;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "no container for the edited pod\n{}",
            tail(&k.log_text(), 60)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let old_running_at = old_running_at.expect("the old container ran on after the edit");
    assert!(
        new.created_at >= old_running_at,
        "new container created {} ms before the old one was last seen running\n{}",
        (old_running_at - new.created_at) / 1_000_000,
        tail(&k.log_text(), 60)
    );
    assert!(!is_running(&rt, &old_id).await);
    let new_uid = pod_uid(&new).to_owned();
    k.wait_pod("upd", Duration::from_secs(60), "new pod Running", |p| {
        p["metadata"]["uid"] == new_uid.as_str() && running(p, "c")
    })
    .await;
    assert!(
        k.log_text()
            .contains("static pod waits for the previous pod with the same full name to terminate"),
        "{}",
        tail(&k.log_text(), 60)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_moved_out_and_back_during_termination_runs_again() {
    let mut k = Kubelet::new();
    k.write_manifest("mv.yaml", &lingering_pod("mv", 1, 8));
    k.start();
    let p = k
        .wait_pod("mv", Duration::from_secs(90), "Running", |p| {
            phase(p) == "Running" && running(p, "c")
        })
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let rt = cri().await;
    let old_id = pod_containers(&rt, &uid).await[0].id.clone();

    let away = k.dir.path().join("mv.yaml.away");
    std::fs::rename(k.manifests().join("mv.yaml"), &away).unwrap();
    let start = Instant::now();
    while k.pod("mv").await.is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the kubelet never dropped the removed pod\n{}",
            tail(&k.log_text(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        is_running(&rt, &old_id).await,
        "the container must still be in its 8 s SIGTERM trap when the manifest comes back"
    );
    std::fs::rename(&away, k.manifests().join("mv.yaml")).unwrap();

    let p = k
        .wait_pod(
            "mv",
            Duration::from_secs(90),
            "same UID running again in a new container",
            |p| {
                p["metadata"]["uid"] == uid.as_str()
                    && running(p, "c")
                    && common::container(p, "containerStatuses", "c").is_some_and(|c| {
                        c["containerID"].as_str() != Some(format!("containerd://{old_id}").as_str())
                    })
            },
        )
        .await;
    assert_eq!(phase(&p), "Running");
    assert!(!is_running(&rt, &old_id).await);
}
