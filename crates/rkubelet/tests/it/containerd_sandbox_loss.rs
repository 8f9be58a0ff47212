//! A lost pod sandbox on the real containerd (what a node reboot, an OOM-killed pause process
//! or `crictl stopp` leaves): the kubelet kills the pod, creates a new sandbox, removes the old
//! init containers and runs every init container again before the main container (upstream
//! `purgeInitContainers`).

use crate::common;

use std::time::{Duration, Instant};

use common::{Kubelet, container, cri, pod_containers, running, tail};
use rkubelet_cri::RuntimeService;
use rkubelet_cri::api::{
    ListPodSandboxRequest, PodSandboxFilter, PodSandboxState, StopPodSandboxRequest,
};

const IMAGE: &str = "docker.io/library/busybox:latest";

/// The pod's sandboxes as `(id, attempt, ready)`.
async fn sandboxes(rt: &rkubelet_cri::RemoteRuntime, uid: &str) -> Vec<(String, u32, bool)> {
    rt.list_pod_sandbox(ListPodSandboxRequest {
        filter: Some(PodSandboxFilter {
            label_selector: [("io.kubernetes.pod.uid".to_owned(), uid.to_owned())].into(),
            ..Default::default()
        }),
    })
    .await
    .expect("list sandboxes")
    .items
    .into_iter()
    .map(|s| {
        let attempt = s.metadata.map_or(0, |m| m.attempt);
        (
            s.id,
            attempt,
            s.state == PodSandboxState::SandboxReady as i32,
        )
    })
    .collect()
}

fn container_id(p: &serde_json::Value, name: &str) -> String {
    container(p, "containerStatuses", name).unwrap()["containerID"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_sandbox_reruns_every_init_container() {
    let mut k = Kubelet::new();
    // Each init container appends its name to a file in an emptyDir, which outlives sandboxes.
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: relaunch
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: work
    emptyDir: {{}}
  initContainers:
  - name: init-a
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo a >> /work/runs"]
    volumeMounts:
    - name: work
      mountPath: /work
  - name: init-b
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo b >> /work/runs"]
    volumeMounts:
    - name: work
      mountPath: /work
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - name: work
      mountPath: /work
"#
    );
    k.write_manifest("relaunch.yaml", &manifest);
    k.start();
    let p = k
        .wait_pod("relaunch", Duration::from_secs(90), "main running", |p| {
            running(p, "main")
        })
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let first_main = container_id(&p, "main");
    assert_eq!(
        common::exec_in(&first_main, &["cat", "/work/runs"]).await.1,
        "a\nb\n"
    );

    let rt = cri().await;
    let before = sandboxes(&rt, &uid).await;
    let [(first, 0, true)] = before.as_slice() else {
        panic!("one ready sandbox expected: {before:?}");
    };
    let first = first.clone();
    // What `crictl stopp` does: the pause process and the containers go, the sandbox stays.
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: first.clone(),
    })
    .await
    .expect("StopPodSandbox");

    let p = k
        .wait_pod(
            "relaunch",
            Duration::from_secs(120),
            "main running again in a new sandbox",
            |p| running(p, "main") && container_id(p, "main") != first_main,
        )
        .await;
    let main = container_id(&p, "main");
    assert_eq!(
        common::exec_in(&main, &["cat", "/work/runs"]).await.1,
        "a\nb\na\nb\n",
        "both init containers ran again, in order, before main\n{}",
        tail(&k.log_text(), 40)
    );

    let after = sandboxes(&rt, &uid).await;
    let second = after
        .iter()
        .find(|(id, attempt, ready)| *id != first && *attempt == 1 && *ready)
        .unwrap_or_else(|| panic!("a ready sandbox with attempt 1: {after:?}"))
        .0
        .clone();
    // The old init containers were purged; the new ones belong to the new sandbox.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let inits: Vec<(String, String)> = pod_containers(&rt, &uid)
            .await
            .into_iter()
            .filter_map(|c| {
                let name = c.metadata?.name;
                name.starts_with("init-")
                    .then_some((name, c.pod_sandbox_id))
            })
            .collect();
        let mut names: Vec<&str> = inits.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        if names == ["init-a", "init-b"] && inits.iter().all(|(_, sb)| *sb == second) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "init containers left: {inits:?} (new sandbox {second})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
