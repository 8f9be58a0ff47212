//! Eviction end to end on the real containerd (API-server mode, so the pods are not static and
//! can be evicted). The kubelet's root dir is a 400Mi tmpfs the test mounts, so nodefs is a
//! filesystem nothing else writes to (on the shared host disk, any build or log moved the
//! threshold); with `evictionHard: {nodefs.available: 200Mi}` a pod writing 300Mi into a disk
//! emptyDir is evicted (Failed / Evicted, message naming ephemeral-storage), the node reports
//! DiskPressure, and an idle pod keeps running.

use crate::common;

use std::time::Duration;

use common::api::{api_status, fixture, running_in_api, wait_for};
use common::{Kubelet, NODE, Tmpfs, cri, wait_pod_containers_gone};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const IMAGE: &str = "docker.io/library/busybox:latest";

fn api_pod(name: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "scratch", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodefs_threshold_evicts_the_writer_and_spares_the_idle_pod() {
    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    k.extra_args = vec!["--kubeconfig".into(), server.kubeconfig_path.clone().into()];
    let nodefs = Tmpfs::mount(&k.root(), "400M");
    k.append_config(
        "nodeStatusUpdateFrequency: 2s\nevictionMonitoringInterval: 2s\nevictionPressureTransitionPeriod: 1m\nevictionHard:\n  nodefs.available: 200Mi\n",
    );
    k.start();
    let rt = cri().await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &api_pod("idle", "trap 'exit 0' TERM; while true; do sleep 1; done"),
    )
    .await
    .unwrap();
    wait_for(&k, Duration::from_secs(60), "pod idle Running", || async {
        running_in_api(&server, "idle")
    })
    .await;
    pods.create(
        &PostParams::default(),
        &api_pod(
            "writer",
            "dd if=/dev/zero of=/data/fill bs=1M count=300 && sync; trap 'exit 0' TERM; while true; do sleep 1; done",
        ),
    )
    .await
    .unwrap();

    let st = wait_for(
        &k,
        Duration::from_secs(90),
        "pod writer evicted",
        || async {
            let st = api_status(&server, "writer")?;
            (st["reason"] == "Evicted").then_some(st)
        },
    )
    .await;
    assert_eq!(st["phase"], "Failed", "{st}");
    eprintln!("writer evicted: {}", st["message"]);
    let msg = st["message"].as_str().unwrap();
    assert!(
        msg.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: "),
        "{msg}"
    );
    assert!(
        st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "DisruptionTarget" && c["reason"] == "TerminationByKubelet"),
        "{st}"
    );

    // The node reports DiskPressure (within the transition period).
    wait_for(
        &k,
        Duration::from_secs(20),
        "DiskPressure=True on the Node",
        || async {
            let n = server.get("nodes", "", NODE)?;
            n["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| {
                    c["type"] == "DiskPressure"
                        && c["status"] == "True"
                        && c["reason"] == "KubeletHasDiskPressure"
                })
                .cloned()
        },
    )
    .await;

    // The writer's containers stop and its emptyDir goes; the idle pod keeps running.
    let writer_uid = server.get("pods", "default", "writer").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for(
        &k,
        Duration::from_secs(30),
        "writer's containers stopped",
        || async {
            let running = common::pod_containers(&rt, &writer_uid)
                .await
                .iter()
                .any(|c| c.state == rkubelet_cri::api::ContainerState::ContainerRunning as i32);
            (!running).then_some(())
        },
    )
    .await;
    let volume = k
        .root()
        .join("pods")
        .join(&writer_uid)
        .join("volumes/kubernetes.io~empty-dir/scratch");
    wait_for(
        &k,
        Duration::from_secs(20),
        "writer's emptyDir removed",
        || async { (!volume.exists()).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let idle = api_status(&server, "idle").unwrap();
    assert_eq!(idle["phase"], "Running", "{idle}");
    assert!(idle["reason"].is_null(), "{idle}");
    assert_eq!(
        api_status(&server, "writer").unwrap()["reason"],
        "Evicted",
        "an evicted pod stays evicted"
    );
    let log = k.log_text();
    assert_eq!(
        log.matches("evicting pod").count(),
        1,
        "exactly one eviction\n{}",
        common::tail(&log, 60)
    );

    // Clean up.
    let idle_uid = server.get("pods", "default", "idle").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    for name in ["idle", "writer"] {
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    wait_pod_containers_gone(&k, &rt, &idle_uid, Duration::from_secs(30)).await;
    wait_pod_containers_gone(&k, &rt, &writer_uid, Duration::from_secs(30)).await;
    k.stop();
    drop(nodefs);
}
