//! Ephemeral containers on the real containerd, in API-server mode: `kubectl debug --target`
//! as a `pods/ephemeralcontainers` patch on a running busybox pod. The debug container runs in
//! the pod's sandbox and in the target container's PID namespace (it sees the target's
//! process as PID 1, read from its log file under `podLogsDir`), is reported in
//! `ephemeralContainerStatuses`, and is not restarted after it exits.

use crate::common;

use std::time::Duration;

use common::api::{api_status, fixture, running_in_api, wait_for};
use common::{Kubelet, NODE, cri, pod_containers, wait_pod_containers_gone};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const IMAGE: &str = "docker.io/library/busybox:latest";

/// The target's command line, distinct from anything the debug container runs.
const TARGET_CMD: &str = "sleep 3601";

fn ephemeral_status(st: &Value, name: &str) -> Option<Value> {
    st["ephemeralContainerStatuses"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
}

async fn add_debug(pods: &Api<Pod>, name: &str, script: &str) {
    pods.patch_subresource(
        "ephemeralcontainers",
        "target",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"ephemeralContainers": [{
            "name": name, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
            "targetContainerName": "app", "command": ["sh", "-c", script],
        }]}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_container_shares_the_target_pid_namespace_and_is_not_restarted() {
    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    k.extra_args = vec!["--kubeconfig".into(), server.kubeconfig_path.clone().into()];
    k.start();
    let rt = cri().await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "target", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "app", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3601"],
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_for(
        &k,
        Duration::from_secs(60),
        "pod target Running in the API",
        || async { running_in_api(&server, "target") },
    )
    .await;
    let uid = server.get("pods", "default", "target").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();

    // PID 1 of the debug container's PID namespace is the target's process.
    add_debug(
        &pods,
        "debug",
        "echo pid1=$(tr '\\0' ' ' < /proc/1/cmdline); ps -o pid,args",
    )
    .await;
    let st = wait_for(
        &k,
        Duration::from_secs(60),
        "debug terminated in ephemeralContainerStatuses",
        || async {
            let s = ephemeral_status(&api_status(&server, "target")?, "debug")?;
            s["state"]["terminated"].is_object().then_some(s)
        },
    )
    .await;
    assert_eq!(st["state"]["terminated"]["exitCode"], 0, "{st}");
    assert_eq!(st["state"]["terminated"]["reason"], "Completed", "{st}");
    assert_eq!(st["restartCount"], 0, "{st}");
    let log = k
        .logs()
        .join(format!("default_target_{uid}"))
        .join("debug")
        .join("0.log");
    let text =
        std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("reading {}: {e}", log.display()));
    assert!(
        text.lines()
            .any(|l| l.ends_with(&format!(" pid1={TARGET_CMD}"))),
        "the debug container does not see the target's process as PID 1:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.ends_with(&format!(" 1 {TARGET_CMD}"))),
        "ps in the debug container does not list the target's process:\n{text}"
    );

    // Not restarted: a second debug container added afterwards runs to completion (so the
    // pod was synced after the first exited) and the first still exists exactly once.
    add_debug(&pods, "debug2", "true").await;
    let st = wait_for(
        &k,
        Duration::from_secs(60),
        "debug2 terminated in ephemeralContainerStatuses",
        || async {
            let st = api_status(&server, "target")?;
            ephemeral_status(&st, "debug2")?["state"]["terminated"]
                .is_object()
                .then_some(st)
        },
    )
    .await;
    let debug = ephemeral_status(&st, "debug").unwrap();
    assert_eq!(debug["restartCount"], 0, "{debug}");
    assert_eq!(debug["state"]["terminated"]["exitCode"], 0, "{debug}");
    let named = |n: &'static str| {
        move |c: &rkubelet_cri::api::Container| c.metadata.as_ref().is_some_and(|m| m.name == n)
    };
    let containers = pod_containers(&rt, &uid).await;
    assert_eq!(
        containers.iter().filter(|c| named("debug")(c)).count(),
        1,
        "{containers:?}"
    );
    assert_eq!(
        containers.iter().filter(|c| named("app")(c)).count(),
        1,
        "the target was not restarted: {containers:?}"
    );
    assert_eq!(st["phase"], "Running", "{st}");
    assert!(
        !std::path::Path::new(&k.logs().join(format!("default_target_{uid}/debug/1.log"))).exists(),
        "a second run of debug wrote a log"
    );

    pods.delete("target", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &k,
        Duration::from_secs(30),
        "pod target to disappear",
        || async {
            server
                .get("pods", "default", "target")
                .is_none()
                .then_some(())
        },
    )
    .await;
    wait_pod_containers_gone(&k, &rt, &uid, Duration::from_secs(20)).await;
}
