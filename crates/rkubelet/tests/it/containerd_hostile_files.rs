//! Files a pod plants where the kubelet expects a regular file, on the real containerd: an
//! init container makes a FIFO in an `emptyDir`, and the main container mounts it (subPath)
//! at its `terminationMessagePath` and exits. The kubelet reads the first mount at that path
//! to find the termination message; a blocking `open` of the FIFO never returned, the relist
//! hung for good, the node went NotReady, and a restart hit it again. Now the FIFO is refused
//! with an explanatory message, the container's termination is reported, other pods keep
//! their statuses, `/healthz` stays ok, and a restarted kubelet does the same.

use crate::common;

use std::time::Duration;

use common::{Kubelet, container, phase, running};
use serde_json::Value;

const IMAGE: &str = "docker.io/library/busybox:latest";
const WAIT: Duration = Duration::from_secs(60);

const FIFO_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: fifo
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes:
  - name: vol
    emptyDir: {}
  initContainers:
  - name: plant
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "mkfifo /vol/fifo"]
    volumeMounts:
    - name: vol
      mountPath: /vol
  containers:
  - name: main
    image: IMAGE
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "sleep 1; exit 3"]
    terminationMessagePolicy: FallbackToLogsOnError
    volumeMounts:
    - name: vol
      mountPath: /dev/termination-log
      subPath: fifo
"#;

fn pod_yaml(name: &str, restart: &str, script: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {restart}\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script:?}]\n"
    )
}

/// The `main` container's terminated state once reported.
fn main_terminated(p: &Value) -> Option<&Value> {
    container(p, "containerStatuses", "main")
        .map(|c| &c["state"]["terminated"])
        .filter(|t| t.is_object())
}

async fn healthz_ok(k: &Kubelet) {
    let answer = k.get(k.healthz_port, "/healthz").await;
    assert!(
        matches!(&answer, Some((200, body)) if body.trim() == "ok"),
        "/healthz: {answer:?}\n{}",
        common::tail(&k.log_text(), 40)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_at_the_termination_message_path_does_not_hang_the_node() {
    let mut k = Kubelet::new();
    k.write_manifest(
        "bystander.yaml",
        &pod_yaml("bystander", "Always", "sleep 3600"),
    );
    k.write_manifest("fifo.yaml", &FIFO_POD.replace("IMAGE", IMAGE));
    k.start();

    let p = k
        .wait_pod("fifo", WAIT, "main container terminated", |p| {
            main_terminated(p).is_some()
        })
        .await;
    let terminated = main_terminated(&p).unwrap();
    assert_eq!(terminated["exitCode"], 3, "{terminated}");
    let message = terminated["message"].as_str().unwrap_or_default();
    // The first mount at the path is the FIFO's (upstream reads the first): refused, and said.
    assert!(
        message.starts_with("Error on reading termination log ")
            && message.contains("not a regular file but a FIFO"),
        "unexpected termination message: {message:?}"
    );
    let init = container(&p, "initContainerStatuses", "plant").unwrap();
    assert_eq!(init["state"]["terminated"]["exitCode"], 0, "{init}");
    k.wait_pod("fifo", WAIT, "phase Failed", |p| phase(p) == "Failed")
        .await;
    k.wait_pod("bystander", WAIT, "running", |p| running(p, "c"))
        .await;
    healthz_ok(&k).await;

    // The relist goes on: a pod created after the FIFO was read runs and finishes.
    k.write_manifest("later.yaml", &pod_yaml("later", "Never", "exit 0"));
    k.wait_pod("later", WAIT, "Succeeded", |p| phase(p) == "Succeeded")
        .await;
    let bystander = k.pod("bystander").await.unwrap();
    assert!(running(&bystander, "c"), "bystander lost its status");
    healthz_ok(&k).await;

    // A restarted kubelet inspects the same pod again, and does not hang either.
    k.stop();
    k.start();
    k.write_manifest("again.yaml", &pod_yaml("again", "Never", "exit 0"));
    k.wait_pod("again", WAIT, "Succeeded after a restart", |p| {
        phase(p) == "Succeeded"
    })
    .await;
    let p = k
        .wait_pod("fifo", WAIT, "terminated after a restart", |p| {
            main_terminated(p).is_some()
        })
        .await;
    assert_eq!(main_terminated(&p).unwrap()["exitCode"], 3);
    k.wait_pod("bystander", WAIT, "running after a restart", |p| {
        running(p, "c")
    })
    .await;
    healthz_ok(&k).await;
}
