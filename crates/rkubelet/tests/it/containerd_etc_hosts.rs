//! The pod's managed `/etc/hosts` on the real containerd (issue 28 A4, a regression of
//! CVE-2020-8557): the file is bind-mounted read-write into every container of the pod, and a
//! container's start must not replace it. Two containers start one after the other; each then
//! appends 4 MiB to its `/etc/hosts`. Both write the one file the kubelet measures: each sees
//! the other's bytes, the pod directory's `etc-hosts` holds all 8 MiB, and the pod's
//! `ephemeral-storage` in `/stats/summary` (what eviction ranks and limits by) includes them.
//! Before, the second start renamed a new file over the first container's, which went on
//! writing an unlinked file that no stats or eviction saw.

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use common::{Kubelet, container, running, tail};
use serde_json::Value;

const IMAGE: &str = "docker.io/library/busybox:latest";
const MIB: u64 = 1024 * 1024;

fn container_id(pod: &Value, name: &str) -> String {
    container(pod, "containerStatuses", name).unwrap()["containerID"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `wc -c < /etc/hosts` in a container.
async fn hosts_size(id: &str) -> u64 {
    let (code, out, err) = common::exec_in(id, &["sh", "-c", "wc -c < /etc/hosts"]).await;
    assert_eq!(code, 0, "{out}{err}");
    out.trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_etc_hosts_after_a_later_container_start_count_toward_the_pod() {
    let mut k = Kubelet::new();
    k.append_config("evictionMonitoringInterval: 2s\n");
    k.write_manifest(
        "hosts.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hosts\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: first\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n  - name: second\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n"
        ),
    );
    k.start();
    let pod = k
        .wait_pod("hosts", Duration::from_secs(90), "both running", |p| {
            running(p, "first") && running(p, "second")
        })
        .await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
    let (first, second) = (container_id(&pod, "first"), container_id(&pod, "second"));
    let hosts_file = k.root().join("pods").join(&uid).join("etc-hosts");
    let managed = std::fs::read_to_string(&hosts_file).unwrap();
    assert!(
        managed.starts_with("# Kubernetes-managed hosts file."),
        "{managed}"
    );
    let base = managed.len() as u64;

    // Both containers have started (so both starts wrote the file); each appends 4 MiB.
    for id in [&first, &second] {
        let (code, out, err) = common::exec_in(
            id,
            &[
                "sh",
                "-c",
                "head -c 4194304 /dev/zero >> /etc/hosts && sync",
            ],
        )
        .await;
        assert_eq!(code, 0, "{out}{err}");
    }
    // One file: each container sees all the bytes, and so does the pod directory's file.
    let want = base + 8 * MIB;
    assert_eq!(hosts_size(&first).await, want, "first sees both writes");
    assert_eq!(hosts_size(&second).await, want, "second sees both writes");
    let meta = std::fs::metadata(&hosts_file).unwrap();
    assert_eq!(meta.len(), want, "the pod's etc-hosts holds both writes");
    assert!(meta.blocks() * 512 >= 8 * MIB, "{} blocks", meta.blocks());

    // The pod's ephemeral-storage usage counts them.
    let name = format!("hosts-{}", common::NODE);
    let start = Instant::now();
    let mut last = Value::Null;
    loop {
        if let Some((200, body)) = k.get(k.port, "/stats/summary").await {
            let v: Value = serde_json::from_str(&body).unwrap();
            let used = v["pods"]
                .as_array()
                .and_then(|ps| ps.iter().find(|p| p["podRef"]["name"] == name.as_str()))
                .and_then(|p| p["ephemeral-storage"]["usedBytes"].as_u64());
            if used.is_some_and(|u| u >= 8 * MIB) {
                eprintln!("pod ephemeral-storage usedBytes {used:?}");
                break;
            }
            last = v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the pod's ephemeral-storage never counted the 8 MiB in /etc/hosts:\n{}\nkubelet log tail:\n{}",
            serde_json::to_string_pretty(&last["pods"]).unwrap_or_default(),
            tail(&k.log_text(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
