//! RuntimeClass end to end: the `rkubelet` binary in API-server mode against the fake API
//! server, on the real containerd (whose config has a second runc handler, `runc-alt`). A pod
//! whose RuntimeClass names `runc-alt` runs in a sandbox containerd created with that handler;
//! a pod whose class names a handler containerd lacks is never started (no sandbox at all, in
//! particular none with the default runc), stays Pending and gets a `FailedCreatePodSandBox`
//! event carrying containerd's reason.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::api::{api_status, fixture, running_in_api, wait_for};
use common::{Kubelet, NODE, cri, wait_pod_containers_gone};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use rkubelet_cri::RemoteRuntime;
use rkubelet_cri::RuntimeService;
use rkubelet_cri::api::{ListPodSandboxRequest, PodSandboxFilter, PodSandboxStatusRequest};
use serde_json::json;

const IMAGE: &str = "docker.io/library/busybox:latest";

fn pod(name: &str, class: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "runtimeClassName": class,
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
            }],
        },
    }))
    .unwrap()
}

/// Every sandbox containerd holds for pod `uid`, as `(id, runtime handler)`: the handler
/// containerd reports in ListPodSandbox, which must agree with PodSandboxStatus and with the
/// verbose sandbox info (containerd's own record of the sandbox).
async fn sandboxes_of(rt: &RemoteRuntime, uid: &str) -> Vec<(String, String)> {
    let items = rt
        .list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(PodSandboxFilter {
                label_selector: HashMap::from([(
                    "io.kubernetes.pod.uid".to_owned(),
                    uid.to_owned(),
                )]),
                ..Default::default()
            }),
        })
        .await
        .expect("ListPodSandbox")
        .items;
    let mut out = Vec::new();
    for sb in items {
        let resp = rt
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: sb.id.clone(),
                verbose: true,
            })
            .await
            .expect("PodSandboxStatus");
        let info: serde_json::Value = resp
            .info
            .get("info")
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or_default();
        let status_handler = resp.status.map(|s| s.runtime_handler).unwrap_or_default();
        for (source, handler) in [
            ("PodSandboxStatus", status_handler.as_str()),
            (
                "the verbose sandbox info",
                info["runtimeHandler"].as_str().unwrap_or_default(),
            ),
        ] {
            assert_eq!(
                handler, sb.runtime_handler,
                "{source} agrees with ListPodSandbox on sandbox {}",
                sb.id
            );
        }
        out.push((sb.id, sb.runtime_handler));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_class_handlers_reach_containerd_and_a_missing_handler_never_falls_back() {
    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    for (name, handler) in [("alt", "runc-alt"), ("ghost", "no-such-handler")] {
        server
            .create(
                "runtimeclasses",
                "",
                json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                    "metadata": {"name": name}, "handler": handler}),
            )
            .unwrap();
    }
    k.extra_args = vec!["--kubeconfig".into(), server.kubeconfig_path.clone().into()];
    k.start();
    let rt = cri().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let alt = pods
        .create(&PostParams::default(), &pod("alt-pod", "alt"))
        .await
        .unwrap();
    let ghost = pods
        .create(&PostParams::default(), &pod("ghost-pod", "ghost"))
        .await
        .unwrap();
    let (alt_uid, ghost_uid) = (
        alt.metadata.uid.clone().unwrap(),
        ghost.metadata.uid.clone().unwrap(),
    );

    // The class's handler is what containerd ran the sandbox with.
    wait_for(
        &k,
        Duration::from_secs(60),
        "pod alt-pod Running in the API",
        || async { running_in_api(&server, "alt-pod") },
    )
    .await;
    let sandboxes = sandboxes_of(&rt, &alt_uid).await;
    assert_eq!(sandboxes.len(), 1, "{sandboxes:?}");
    assert_eq!(sandboxes[0].1, "runc-alt", "{sandboxes:?}");

    // A handler containerd lacks: the event says why, the pod stays Pending.
    let event = wait_for(
        &k,
        Duration::from_secs(30),
        "FailedCreatePodSandBox for pod ghost-pod",
        || async {
            server
                .list("events", Some("default"))
                .into_iter()
                .find(|e| {
                    e["involvedObject"]["name"] == "ghost-pod"
                        && e["reason"] == "FailedCreatePodSandBox"
                })
        },
    )
    .await;
    assert_eq!(event["type"], "Warning");
    let msg = event["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("Failed to create pod sandbox: ")
            && msg.contains("no runtime for \"no-such-handler\" is configured"),
        "{event}"
    );
    let st = wait_for(
        &k,
        Duration::from_secs(20),
        "pod ghost-pod Pending in ContainerCreating",
        || async {
            let st = api_status(&server, "ghost-pod")?;
            (st["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating")
                .then_some(st)
        },
    )
    .await;
    assert_eq!(st["phase"], "Pending", "{st}");
    // Retried (a second event or a higher count), and still no sandbox of any handler.
    wait_for(
        &k,
        Duration::from_secs(40),
        "a retried sandbox creation for pod ghost-pod",
        || async {
            let attempts: i64 = server
                .list("events", Some("default"))
                .into_iter()
                .filter(|e| {
                    e["involvedObject"]["name"] == "ghost-pod"
                        && e["reason"] == "FailedCreatePodSandBox"
                })
                .map(|e| e["count"].as_i64().unwrap_or(1))
                .sum();
            (attempts >= 2).then_some(())
        },
    )
    .await;
    assert_eq!(
        sandboxes_of(&rt, &ghost_uid).await,
        Vec::<(String, String)>::new(),
        "never a fallback to runc"
    );

    // Clean up: the running pod is torn down by the kubelet; the never-started one is
    // force-deleted (it has nothing on the runtime).
    pods.delete("ghost-pod", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    pods.delete("alt-pod", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &k,
        Duration::from_secs(60),
        "pod alt-pod to disappear",
        || async {
            server
                .get("pods", "default", "alt-pod")
                .is_none()
                .then_some(())
        },
    )
    .await;
    wait_pod_containers_gone(&k, &rt, &alt_uid, Duration::from_secs(20)).await;
    assert_eq!(
        sandboxes_of(&rt, &ghost_uid).await,
        Vec::<(String, String)>::new()
    );
}
