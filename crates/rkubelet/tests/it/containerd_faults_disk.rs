//! Fault matrix row 5 (issue 17): the disk fills up, on the kubelet's root dir and on the pod
//! log dir, each a tmpfs this test mounts (never the host disk), with a kubelet in API-server
//! mode on the real containerd. What must hold, and how it is checked:
//! - 5a, root dir: a pod writes into a disk emptyDir until ENOSPC (`faults::pick(1, 3)` times):
//!   the kubelet stays healthy (`/healthz`), an idle pod keeps running, the Node reports
//!   `DiskPressure=True` (`KubeletHasDiskPressure`), the writer is evicted with upstream's
//!   reason and message and its emptyDir goes, the pressure clears, no image or container GC
//!   runs (the images live on containerd's own filesystem, so upstream reclaims nothing for
//!   nodefs), and every state file loads after each fill.
//! - 5b, a write during ENOSPC: the test fills the root dir itself (nothing to evict frees
//!   it); a pod deleted then makes the allocation manager rewrite its checkpoint, which fails
//!   with ENOSPC and leaves the old files byte for byte with no temporary file behind; a new
//!   pod is refused by admission as upstream (`The node had condition: [DiskPressure]. `); the
//!   kubelet killed and restarted on the full disk comes up healthy, and again after the space
//!   is freed, with every checkpoint loading.
//! - 5c, pod log dir: the log tmpfs is filled; a new chatty pod still starts and runs, the
//!   kubelet stays healthy (rotation cannot write), and once space is freed the pod's log
//!   grows again.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::api::{api_status, fixture, running_in_api, wait_for};
use common::{Kubelet, NODE, Tmpfs, cri, faults, tail, wait_pod_containers_gone};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

const IMAGE: &str = "docker.io/library/busybox:latest";

/// Every state file the kubelet reads back from its root dir in this configuration (the CPU
/// manager's with policy `none`, the allocation manager's two).
const STATE_FILES: [&str; 3] = [
    "cpu_manager_state",
    "allocated_pods_state",
    "actuated_pods_state",
];

fn api_pod(name: &str, script: &str, scratch: bool) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
            }],
        },
    });
    if scratch {
        pod["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "scratch", "mountPath": "/data"}]);
        pod["spec"]["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
    }
    serde_json::from_value(pod).unwrap()
}

const IDLE: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// Filling and freeing the test's tmpfs (`common::Tmpfs`).
trait Fill {
    fn fill(&self);
    fn free(&self);
    fn fill_path(&self) -> PathBuf;
}

impl Fill for Tmpfs {
    /// Writes `<dir>/.test-fill` until the file system has no block left.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.fill_path()).unwrap();
        let block = vec![0x5au8; 64 * 1024];
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => panic!("filling {}: {e}", self.path().display()),
            }
        }
        // What a 64 KiB write left over.
        let mut one = [0u8; 1];
        while f.write(&one).is_ok_and(|n| n == 1) {
            one[0] = one[0].wrapping_add(1);
        }
    }

    fn free(&self) {
        std::fs::remove_file(self.fill_path()).unwrap();
    }

    fn fill_path(&self) -> PathBuf {
        self.path().join(".test-fill")
    }
}

async fn healthy(k: &Kubelet) -> bool {
    matches!(k.get(k.healthz_port, "/healthz").await, Some((200, body)) if body.trim() == "ok")
}

fn node_condition(server: &fake_apiserver::FakeApiServer, kind: &str) -> Option<Value> {
    let n = server.get("nodes", "", NODE)?;
    n["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

fn disk_pressure(server: &fake_apiserver::FakeApiServer, status: &str) -> Option<()> {
    let c = node_condition(server, "DiskPressure")?;
    (c["status"] == status).then_some(())
}

/// Every state file parses with the kubelet's own readers; the names of those that do not.
fn corrupted_state_files(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for name in STATE_FILES {
        let ok = if name == "cpu_manager_state" {
            kubelet::cm::cpumanager::state::Checkpoint::new(root, "none")
                .restore()
                .is_ok()
        } else {
            kubelet::allocation::checkpoint::Checkpoint::new(root, name)
                .load()
                .is_ok()
        };
        if !ok || !root.join(name).is_file() {
            bad.push(name.to_owned());
        }
    }
    bad
}

fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    STATE_FILES
        .iter()
        .map(|n| ((*n).to_owned(), std::fs::read(root.join(n)).unwrap()))
        .collect()
}

fn temporaries(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

fn uid(server: &fake_apiserver::FakeApiServer, name: &str) -> String {
    server.get("pods", "default", name).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn wait_healthy(k: &Kubelet, what: &str) {
    wait_for(k, Duration::from_secs(60), what, || async {
        healthy(k).await.then_some(())
    })
    .await;
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_on_the_root_dir_and_the_pod_log_dir() {
    let fills = faults::pick(1, 3);
    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    k.extra_args = vec!["--kubeconfig".into(), server.kubeconfig_path.clone().into()];
    let root = Tmpfs::mount(&k.root(), "160M");
    let logs = Tmpfs::mount(&k.logs(), "64M");
    k.append_config(
        "nodeStatusUpdateFrequency: 2s\nevictionMonitoringInterval: 2s\nevictionPressureTransitionPeriod: 5s\ncontainerLogMonitorInterval: 3s\nevictionHard:\n  memory.available: 100Mi\n  nodefs.available: 40Mi\n  imagefs.available: 1%\n",
    );
    k.start();
    let rt = cri().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &api_pod("idle", IDLE, false))
        .await
        .unwrap();
    wait_for(&k, Duration::from_secs(60), "pod idle Running", || async {
        running_in_api(&server, "idle")
    })
    .await;
    wait_for(
        &k,
        Duration::from_secs(20),
        "DiskPressure=False",
        || async { disk_pressure(&server, "False") },
    )
    .await;
    assert_eq!(corrupted_state_files(&k.root()), Vec::<String>::new());

    // 5a: a pod fills the root dir until ENOSPC, `fills` times.
    let (mut to_pressure, mut to_eviction) = (Vec::new(), Vec::new());
    let mut corrupted = 0;
    for i in 0..fills {
        let name = format!("writer-{i}");
        let t0 = Instant::now();
        pods.create(
            &PostParams::default(),
            &api_pod(
                &name,
                &format!("dd if=/dev/zero of=/data/fill bs=1M 2>/dev/null; {IDLE}"),
                true,
            ),
        )
        .await
        .unwrap();
        wait_for(&k, Duration::from_secs(60), "DiskPressure=True", || async {
            let c = node_condition(&server, "DiskPressure")?;
            (c["status"] == "True" && c["reason"] == "KubeletHasDiskPressure").then_some(())
        })
        .await;
        to_pressure.push(t0.elapsed());
        assert!(healthy(&k).await, "healthz under disk pressure");
        let st = wait_for(&k, Duration::from_secs(60), "writer evicted", || async {
            let st = api_status(&server, &name)?;
            (st["reason"] == "Evicted").then_some(st)
        })
        .await;
        to_eviction.push(t0.elapsed());
        assert_eq!(st["phase"], "Failed", "{st}");
        let msg = st["message"].as_str().unwrap();
        assert!(
            msg.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: 40Mi, available: "),
            "{msg}"
        );
        let volume = k
            .root()
            .join("pods")
            .join(uid(&server, &name))
            .join("volumes/kubernetes.io~empty-dir/scratch");
        wait_for(
            &k,
            Duration::from_secs(30),
            "writer's emptyDir removed",
            || async { (!volume.exists()).then_some(()) },
        )
        .await;
        wait_for(
            &k,
            Duration::from_secs(60),
            "DiskPressure=False again",
            || async { disk_pressure(&server, "False") },
        )
        .await;
        assert!(healthy(&k).await);
        let idle = api_status(&server, "idle").unwrap();
        assert_eq!(idle["phase"], "Running", "{idle}");
        assert_eq!(idle["containerStatuses"][0]["restartCount"], 0, "{idle}");
        let bad = corrupted_state_files(&k.root());
        corrupted += bad.len();
        assert!(bad.is_empty(), "corrupted after fill {i}: {bad:?}");
    }
    let log = k.log_text();
    assert_eq!(
        log.matches("evicting pod").count(),
        fills,
        "{}",
        tail(&log, 60)
    );
    // nodefs has its own filesystem (images are on containerd's): upstream reclaims nothing
    // at node level for nodefs, it evicts.
    assert!(!log.contains("deleted unused images"), "{}", tail(&log, 60));
    assert!(
        !log.contains("deleted dead containers"),
        "{}",
        tail(&log, 60)
    );

    // 5b: the root dir full with nothing to evict: a checkpoint write fails and leaves the old
    // files whole; admission refuses new pods; a restart on the full disk comes up.
    pods.create(&PostParams::default(), &api_pod("victim", IDLE, false))
        .await
        .unwrap();
    wait_for(
        &k,
        Duration::from_secs(60),
        "pod victim Running",
        || async { running_in_api(&server, "victim") },
    )
    .await;
    let victim_uid = uid(&server, "victim");
    let before = snapshot(&k.root());
    root.fill();
    let filled = Instant::now();
    wait_for(
        &k,
        Duration::from_secs(30),
        "DiskPressure=True (test fill)",
        || async { disk_pressure(&server, "True") },
    )
    .await;
    let pressure_after_fill = filled.elapsed();
    pods.delete("victim", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    wait_pod_containers_gone(&k, &rt, &victim_uid, Duration::from_secs(30)).await;
    wait_for(
        &k,
        Duration::from_secs(30),
        "a checkpoint write failing with ENOSPC",
        || async {
            let log = k.log_text();
            log.lines()
                .any(|l| {
                    l.contains("failed to delete pod allocation")
                        && l.contains("No space left on device")
                })
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        snapshot(&k.root()),
        before,
        "a failed write changed a state file"
    );
    assert_eq!(temporaries(&k.root()), Vec::<String>::new());
    pods.create(&PostParams::default(), &api_pod("late", IDLE, false))
        .await
        .unwrap();
    let st = wait_for(&k, Duration::from_secs(30), "pod late rejected", || async {
        let st = api_status(&server, "late")?;
        (st["phase"] == "Failed").then_some(st)
    })
    .await;
    assert_eq!(st["reason"], "Evicted", "{st}");
    assert_eq!(
        st["message"], "Pod was rejected: The node had condition: [DiskPressure]. ",
        "{st}"
    );
    assert!(healthy(&k).await);

    k.kill9();
    k.start();
    wait_healthy(&k, "healthz after a restart on a full disk").await;
    assert_eq!(corrupted_state_files(&k.root()), Vec::<String>::new());
    root.free();
    k.stop();
    k.start();
    wait_healthy(&k, "healthz after the space came back").await;
    let bad = corrupted_state_files(&k.root());
    corrupted += bad.len();
    assert!(bad.is_empty(), "{bad:?}");
    assert!(
        !k.log_text().contains("could not restore state"),
        "{}",
        tail(&k.log_text(), 60)
    );
    wait_for(
        &k,
        Duration::from_secs(60),
        "DiskPressure=False after freeing",
        || async { disk_pressure(&server, "False") },
    )
    .await;

    // 5c: the pod log dir is full: a chatty pod starts and runs; its log grows once freed.
    logs.fill();
    pods.create(
        &PostParams::default(),
        &api_pod(
            "chatty",
            "trap 'exit 0' TERM; while true; do echo line $(date +%s%N); sleep 0.1; done",
            false,
        ),
    )
    .await
    .unwrap();
    wait_for(
        &k,
        Duration::from_secs(60),
        "pod chatty Running",
        || async { running_in_api(&server, "chatty") },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(7)).await; // two log monitor periods, full disk
    assert!(healthy(&k).await, "healthz with a full log dir");
    let chatty = api_status(&server, "chatty").unwrap();
    assert_eq!(
        chatty["containerStatuses"][0]["restartCount"], 0,
        "{chatty}"
    );
    let chatty_uid = uid(&server, "chatty");
    let log_file = k
        .logs()
        .join(format!("default_chatty_{chatty_uid}"))
        .join("main/0.log");
    let size = || std::fs::metadata(&log_file).map(|m| m.len()).unwrap_or(0);
    let full_size = size();
    logs.free();
    wait_for(
        &k,
        Duration::from_secs(30),
        "the chatty log growing again",
        || async { (size() > full_size + 100).then_some(()) },
    )
    .await;

    // Clean up.
    let idle_uid = uid(&server, "idle");
    for name in ["idle", "chatty", "late"] {
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    for u in [&idle_uid, &chatty_uid] {
        wait_pod_containers_gone(&k, &rt, u, Duration::from_secs(30)).await;
    }
    k.stop();
    drop((root, logs));

    let fmt = |v: &[Duration]| v.iter().map(|d| secs(*d)).collect::<Vec<_>>().join(", ");
    faults::report(
        "5",
        &format!(
            "disk full: root dir tmpfs filled {fills}x by a pod + once by the test with a restart; pod log dir tmpfs filled"
        ),
        "kubelet healthy, idle pod 0 restarts, DiskPressure on the Node, writer Evicted (upstream message), no GC for nodefs, ENOSPC write kept old checkpoints, state files load",
        &format!(
            "DiskPressure after writer start {}; evicted after {}; DiskPressure {} after the test's fill; {corrupted} state files corrupted / {} fills",
            fmt(&to_pressure),
            fmt(&to_eviction),
            secs(pressure_after_fill),
            fills + 1
        ),
    );
}

/// Waits until the kubelet exits on its own; its exit status.
async fn wait_exit(k: &mut Kubelet, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = k.try_exit_status() {
            return st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the kubelet still runs: {what}\n{}",
            tail(&k.log_text(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Damaged state files at start, through the binary: the CPU manager's and the allocation
/// manager's stop the kubelet with upstream's message naming the file (exit status 1, no
/// panic), and it starts once they are removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_state_files_at_start_give_upstreams_behaviour() {
    let mut k = Kubelet::new();
    let root = k.root();
    std::fs::create_dir_all(&root).unwrap();
    let cases: [(&str, &[u8], &str); 4] = [
        (
            "cpu_manager_state",
            b"\x00\xffnot json",
            "please drain this node and delete the CPU manager checkpoint file",
        ),
        (
            "cpu_manager_state",
            br#"{"policyName":"none","defaultCpuSet":"","checksum":12"#,
            "please drain this node and delete the CPU manager checkpoint file",
        ),
        (
            "allocated_pods_state",
            b"",
            "please drain this node and delete pod resource information checkpoint file",
        ),
        (
            "actuated_pods_state",
            br#"{"data":{},"checksum":1}"#,
            "please drain this node and delete pod resource information checkpoint file",
        ),
    ];
    for (name, blob, advice) in cases {
        let path = root.join(name);
        std::fs::write(&path, blob).unwrap();
        let from = k.log_text().len();
        k.start();
        let st = wait_exit(&mut k, name).await;
        let log = k.log_text()[from..].to_owned();
        assert_eq!(st.code(), Some(1), "{name}: {st:?}\n{}", tail(&log, 30));
        assert!(!log.contains("panicked"), "{name}\n{}", tail(&log, 30));
        let line = log
            .lines()
            .find(|l| l.contains("could not restore state from checkpoint"))
            .unwrap_or_else(|| panic!("{name}: no restore error\n{}", tail(&log, 30)));
        assert!(line.contains(advice), "{line}");
        assert!(line.contains(&path.display().to_string()), "{line}");
        std::fs::remove_file(&path).unwrap();
    }
    // With the damaged files gone (the operator's fix), the kubelet starts and writes a fresh
    // CPU manager checkpoint.
    k.start();
    wait_healthy(&k, "healthz once the damaged files are removed").await;
    assert_eq!(k.try_exit_status(), None);
    kubelet::cm::cpumanager::state::Checkpoint::new(&root, "none")
        .restore()
        .unwrap();
    k.stop();
    faults::report(
        "5-start",
        "damaged state files at start (garbage, truncated, empty, bad checksum)",
        "CPU manager and allocation checkpoints: exit 1 with upstream's drain-and-delete message naming the file, no panic",
        "4/4 refused with the message; 0 panics",
    );
}
