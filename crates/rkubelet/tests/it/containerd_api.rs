//! API-server mode end to end: the `rkubelet` binary with `--kubeconfig` pointing at the fake
//! API server fixture, running pods on the real containerd from `dev/runtime.sh`. Covers node
//! registration and lease, an API pod's life (running, status in the API, graceful delete),
//! a static pod's mirror pod, admission by resources, and a 60 s API outage.

use crate::common;

use std::time::Duration;

use common::api::{api_status, fixture, running_in_api, wait_for};
use common::{Kubelet, NODE, cri, pod_containers, wait_pod_containers_gone};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const IMAGE: &str = "docker.io/library/busybox:latest";

fn api_pod(name: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "trap 'echo bye; exit 0' TERM; while true; do sleep 1; done"],
                "resources": {"requests": {"cpu": cpu}},
            }],
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_mode_node_pods_mirror_admission_and_outage() {
    let mut k = Kubelet::new();
    let (mut server, client) = fixture(k.dir.path()).await;
    k.extra_args = vec![
        "--kubeconfig".into(),
        server.kubeconfig_path.clone().into(),
        "--node-labels=rkubelet.test/e2e=yes".into(),
    ];
    k.append_config("nodeStatusUpdateFrequency: 2s\n");
    k.write_manifest(
        "static.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static\n  namespace: default\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: s\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
        ),
    );
    k.start();
    let rt = cri().await;

    // Node registration: capacity, allocatable, nodeInfo, labels, Ready.
    let node = wait_for(
        &k,
        Duration::from_secs(30),
        "the Node to be Ready",
        || async {
            let n = server.get("nodes", "", NODE)?;
            let ready = n["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            ready.then_some(n)
        },
    )
    .await;
    let node: Node = serde_json::from_value(node).unwrap();
    let st = node.status.clone().unwrap();
    let cap = st.capacity.unwrap();
    assert!(
        cap.contains_key("cpu") && cap.contains_key("memory"),
        "{cap:?}"
    );
    assert_eq!(cap["pods"].0, "110");
    assert!(st.allocatable.unwrap().contains_key("cpu"));
    let info = st.node_info.unwrap();
    assert!(
        info.container_runtime_version.starts_with("containerd://"),
        "{info:?}"
    );
    let labels = node.metadata.labels.unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], NODE);
    assert_eq!(labels["rkubelet.test/e2e"], "yes");
    let lease = wait_for(&k, Duration::from_secs(20), "the node lease", || async {
        server.get("leases", "kube-node-lease", NODE)
    })
    .await;
    assert_eq!(lease["spec"]["holderIdentity"], NODE);

    // An API pod runs and its status reaches the API.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &api_pod("web", "10m"))
        .await
        .unwrap();
    let st = wait_for(
        &k,
        Duration::from_secs(60),
        "pod web Running in the API",
        || async { running_in_api(&server, "web") },
    )
    .await;
    assert_eq!(st["qosClass"], "Burstable");
    let web_uid = server.get("pods", "default", "web").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();

    // The static pod gets a mirror pod, which comes back when deleted.
    let static_name = format!("static-{NODE}");
    let mirror = wait_for(&k, Duration::from_secs(60), "the mirror pod", || async {
        let p = server.get("pods", "default", &static_name)?;
        (p["status"]["phase"] == "Running").then_some(p)
    })
    .await;
    assert!(
        mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string(),
        "{mirror}"
    );
    assert_eq!(mirror["metadata"]["ownerReferences"][0]["kind"], "Node");
    let first_uid = mirror["metadata"]["uid"].as_str().unwrap().to_owned();
    pods.delete(&static_name, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    wait_for(
        &k,
        Duration::from_secs(30),
        "the mirror pod to come back",
        || async {
            let p = server.get("pods", "default", &static_name)?;
            (p["metadata"]["uid"] != first_uid.as_str()).then_some(())
        },
    )
    .await;

    // A pod that does not fit is rejected with OutOfcpu.
    pods.create(&PostParams::default(), &api_pod("huge", "1000"))
        .await
        .unwrap();
    let st = wait_for(&k, Duration::from_secs(30), "pod huge rejected", || async {
        let st = api_status(&server, "huge")?;
        (st["phase"] == "Failed").then_some(st)
    })
    .await;
    assert_eq!(st["reason"], "OutOfcpu", "{st}");

    // A 60 s outage disturbs nothing; afterwards status converges.
    let before: Vec<String> = pod_containers(&rt, &web_uid)
        .await
        .into_iter()
        .map(|c| c.id)
        .collect();
    server.pause().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let during = k.pod("static").await.expect("static pod still known");
    assert_eq!(during["status"]["phase"], "Running");
    server.resume().await.unwrap();
    let after: Vec<String> = pod_containers(&rt, &web_uid)
        .await
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(
        before, after,
        "no container was restarted during the outage"
    );
    pods.create(&PostParams::default(), &api_pod("late", "10m"))
        .await
        .unwrap();
    wait_for(
        &k,
        Duration::from_secs(40),
        "pod late Running after the outage",
        || async { running_in_api(&server, "late") },
    )
    .await;

    // kubectl delete: graceful termination, then the object goes away.
    for name in ["web", "late", "huge"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in ["web", "late", "huge"] {
        wait_for(
            &k,
            Duration::from_secs(30),
            "deleted pod to disappear",
            || async { server.get("pods", "default", name).is_none().then_some(()) },
        )
        .await;
    }
    wait_pod_containers_gone(&k, &rt, &web_uid, Duration::from_secs(10)).await;
    assert!(
        k.log_text().contains("web"),
        "the kubelet logs name the pods it handles"
    );
}
