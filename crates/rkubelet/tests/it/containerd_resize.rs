//! In-place pod resize on the real containerd (`RKUBELET_CRI_ENDPOINT`) in API mode: a
//! `pods/resize` PATCH of a running busybox pod's CPU limit changes the container's CFS quota
//! (v1 `cpu.cfs_quota_us`, v2 `cpu.max`) and the pod cgroup's, without restarting the
//! container (same container ID, restartCount 0), and the API status reports the new
//! `resources` with no resize condition left.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::api::{fixture, running_in_api, wait_for};
use common::{Kubelet, NODE, cri, pod_containers};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const IMAGE: &str = "docker.io/library/busybox:latest";

fn v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

fn cpu_dir(rel: &str) -> PathBuf {
    let rel = rel.trim_start_matches('/');
    if v2() {
        Path::new("/sys/fs/cgroup").join(rel)
    } else {
        Path::new("/sys/fs/cgroup/cpu").join(rel)
    }
}

/// The CFS quota of cgroup `rel` in µs (`None` when unlimited or unreadable).
fn quota(rel: &str) -> Option<i64> {
    let dir = cpu_dir(rel);
    if v2() {
        let s = std::fs::read_to_string(dir.join("cpu.max")).ok()?;
        s.split_whitespace().next()?.parse().ok()
    } else {
        let s = std::fs::read_to_string(dir.join("cpu.cfs_quota_us")).ok()?;
        s.trim().parse().ok().filter(|q: &i64| *q > 0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_changes_the_cpu_quota_without_a_restart() {
    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    k.extra_args = vec!["--kubeconfig".into(), server.kubeconfig_path.clone().into()];
    k.append_config("nodeStatusUpdateFrequency: 2s\n");
    k.start();
    let rt = cri().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "rz", "namespace": "default"},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                "resources": {"requests": {"cpu": "100m", "memory": "16Mi"},
                              "limits": {"cpu": "200m", "memory": "64Mi"}}}]}
    }))
    .unwrap();
    // The Node must be known before its pods are (the pod source starts after it).
    wait_for(&k, Duration::from_secs(30), "the Node", || async {
        server.get("nodes", "", NODE)
    })
    .await;
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let st = wait_for(&k, Duration::from_secs(60), "the pod running", || async {
        running_in_api(&server, "rz")
    })
    .await;
    assert_eq!(st["qosClass"], "Burstable");
    let uid = server.get("pods", "default", "rz").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let containers = pod_containers(&rt, &uid).await;
    assert_eq!(containers.len(), 1);
    let id = containers[0].id.clone();
    let pod_cg = format!("{}/kubepods/burstable/pod{uid}", k.cgroup_root);
    let ctr_cg = format!("{pod_cg}/{id}");
    assert_eq!(quota(&ctr_cg), Some(20_000), "container quota before");
    assert_eq!(quota(&pod_cg), Some(20_000), "pod quota before");

    pods.patch_subresource(
        "resize",
        "rz",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"containers": [{"name": "c",
            "resources": {"limits": {"cpu": "400m"}}}]}})),
    )
    .await
    .unwrap();
    wait_for(
        &k,
        Duration::from_secs(60),
        "the container quota to change",
        || async { (quota(&ctr_cg) == Some(40_000)).then_some(()) },
    )
    .await;
    assert_eq!(quota(&pod_cg), Some(40_000), "pod quota after");
    let st = wait_for(
        &k,
        Duration::from_secs(30),
        "the status to report it",
        || async {
            let st = server.get("pods", "default", "rz")?["status"].clone();
            let done = st["containerStatuses"][0]["resources"]["limits"]["cpu"] == "400m"
                && st["conditions"].as_array()?.iter().all(|c| {
                    !c["type"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("PodResize")
                });
            done.then_some(st)
        },
    )
    .await;
    let cs = &st["containerStatuses"][0];
    assert_eq!(cs["restartCount"], 0);
    assert_eq!(
        cs["containerID"].as_str().unwrap(),
        format!("containerd://{id}"),
        "same container"
    );
    let after = pod_containers(&rt, &uid).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].id, id);
    drop(server);
}
