//! Fault matrix row 7 (issue 17): a node reboot, simulated without stopping the shared dev
//! containerd. The kubelet is killed with `kill -9`; then what a reboot loses goes: the test's
//! sandboxes and containers are stopped and removed through CRI (identified by the test's pod
//! names), the tmpfs (`medium: Memory`) emptyDirs under the root dir are unmounted and the
//! kubelet's cgroups are removed. What a reboot keeps stays: the root dir (pod dirs, disk
//! emptyDirs) and the pod log dir. The kubelet then starts again on the same root dir.
//!
//! Must hold, for a static pod and an API pod (fake API server), each with two init
//! containers and a main container: the pod comes back under the same UID in a NEW sandbox
//! (attempt 0, since the runtime has no earlier one); both init containers run again, in
//! order, before the main container (their record in a disk emptyDir reads `a b a b`); the
//! tmpfs emptyDir is mounted afresh (empty); restart counts follow upstream's
//! `calcRestartCountByLogDir`: with the runtime's containers gone the count continues from the
//! highest `<n>.log` in the container's log directory, so every container reports 1.

use crate::common;
use crate::common::churn;

use std::time::{Duration, Instant};

use churn::RuntimeSweep;
use common::api::{fixture, wait_for};
use common::{Kubelet, NODE, cri, faults, tail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

const IMAGE: &str = "docker.io/library/busybox:latest";
const PREFIX: &str = "fk7-";

fn pod(name: &str, api: bool) -> Value {
    let mounts = json!([
        {"name": "work", "mountPath": "/work"},
        {"name": "mem", "mountPath": "/mem"},
    ]);
    let c = |name: &str, script: &str| {
        json!({
            "name": name, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", script], "volumeMounts": mounts,
        })
    };
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "volumes": [
                {"name": "work", "emptyDir": {}},
                {"name": "mem", "emptyDir": {"medium": "Memory"}},
            ],
            "initContainers": [
                // A marker left in the tmpfs from before the reboot would be a stale mount.
                c("init-a", "if [ -e /mem/marker ]; then echo stale >> /work/runs; fi; echo a >> /work/runs"),
                c("init-b", "echo b >> /work/runs"),
            ],
            "containers": [c("main", "echo up > /mem/marker; exec sleep 36000")],
        },
    });
    if api {
        p["spec"]["nodeName"] = json!(NODE);
    }
    p
}

/// One pod's state as the test sees it: from `/pods` (static) or the API (API pod).
struct Seen {
    uid: String,
    main: String,
    /// restartCount of init-a, init-b, main.
    restarts: [u64; 3],
}

fn seen(p: &Value) -> Option<Seen> {
    let st = &p["status"];
    let find = |field: &str, name: &str| {
        st[field]
            .as_array()?
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
    };
    let main = find("containerStatuses", "main")?;
    if !main["state"]["running"].is_object() {
        return None;
    }
    let count = |c: &Value| c["restartCount"].as_u64().unwrap_or(0);
    Some(Seen {
        uid: p["metadata"]["uid"].as_str()?.to_owned(),
        main: main["containerID"].as_str()?.to_owned(),
        restarts: [
            count(&find("initContainerStatuses", "init-a")?),
            count(&find("initContainerStatuses", "init-b")?),
            count(&main),
        ],
    })
}

async fn static_pod(k: &Kubelet) -> Option<Seen> {
    seen(&k.pod("fk7-static").await?)
}

async fn api_pod(server: &fake_apiserver::FakeApiServer) -> Option<Seen> {
    seen(&server.get("pods", "default", "fk7-api")?)
}

async fn runs(main: &str) -> String {
    common::exec_in(main, &["cat", "/work/runs"]).await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_brings_pods_back_in_new_sandboxes_with_init_rerun() {
    let rt = cri().await;
    let _sweep = RuntimeSweep(PREFIX.into());
    churn::remove_pods(&rt, PREFIX).await;

    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    k.extra_args = vec!["--kubeconfig".into(), server.kubeconfig_path.clone().into()];
    k.write_manifest(
        "fk7-static.yaml",
        &serde_json::to_string_pretty(&pod("fk7-static", false)).unwrap(),
    );
    server
        .create("pods", "default", pod("fk7-api", true))
        .expect("create the API pod");
    k.start();

    let s0 = wait_for(&k, Duration::from_secs(120), "static pod running", || {
        static_pod(&k)
    })
    .await;
    let a0 = wait_for(&k, Duration::from_secs(120), "API pod running", || {
        api_pod(&server)
    })
    .await;
    for (what, s) in [("static", &s0), ("API", &a0)] {
        assert_eq!(s.restarts, [0, 0, 0], "{what} pod before the reboot");
        assert_eq!(
            runs(&s.main).await,
            "a\nb\n",
            "{what} pod before the reboot"
        );
    }
    let before = churn::view(&rt, PREFIX).await;
    let old_sandboxes: Vec<String> = before.sandboxes.iter().map(|s| s.id.clone()).collect();
    assert_eq!(
        before.sandboxes.iter().filter(|s| s.ready).count(),
        2,
        "one ready sandbox per pod: {before:?}"
    );
    let tmpfs_before = churn::mounts_under(&k.root());
    assert_eq!(
        tmpfs_before.len(),
        2,
        "one tmpfs emptyDir per pod under the root dir: {tmpfs_before:?}"
    );

    // The reboot: the kubelet dies, the runtime's pods, the tmpfs mounts and the cgroups go.
    k.kill9();
    let removed = churn::remove_pods(&rt, PREFIX).await;
    assert_eq!(removed, 2, "the test's two sandboxes removed");
    assert!(churn::view(&rt, PREFIX).await.is_empty());
    let mut mounts = churn::mounts_under(&k.root());
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in &mounts {
        let st = std::process::Command::new("umount")
            .arg(m)
            .status()
            .expect("run umount");
        assert!(st.success(), "umount {m}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        common::remove_cgroup_root(&k.cgroup_root);
        let left = churn::pod_cgroups(&k.cgroup_root);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pod cgroups still busy: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let restarted = Instant::now();
    k.start();

    let s1 = wait_for(
        &k,
        Duration::from_secs(120),
        "static pod running again",
        || async { static_pod(&k).await.filter(|s| s.main != s0.main) },
    )
    .await;
    let a1 = wait_for(
        &k,
        Duration::from_secs(120),
        "API pod running again",
        || async { api_pod(&server).await.filter(|s| s.main != a0.main) },
    )
    .await;
    let back = restarted.elapsed();

    for (what, s0, s1, name) in [
        ("static", &s0, &s1, format!("fk7-static-{NODE}")),
        ("API", &a0, &a1, "fk7-api".to_owned()),
    ] {
        assert_eq!(s1.uid, s0.uid, "{what} pod keeps its UID");
        let v = churn::view(&rt, PREFIX).await;
        let mine: Vec<&churn::Sandbox> = v.sandboxes.iter().filter(|s| s.name == name).collect();
        let [sb] = mine.as_slice() else {
            panic!("{what} pod: one sandbox expected after the reboot: {mine:?}");
        };
        assert!(
            sb.ready && !old_sandboxes.contains(&sb.id),
            "{what} pod: a new ready sandbox: {sb:?} (old {old_sandboxes:?})"
        );
        assert_eq!(
            sb.attempt, 0,
            "{what} pod: the runtime had no earlier sandbox, so attempt 0"
        );
        assert_eq!(
            runs(&s1.main).await,
            "a\nb\na\nb\n",
            "{what} pod: both init containers ran again before main, on a fresh tmpfs\n{}",
            tail(&k.log_text(), 40)
        );
        assert_eq!(
            s1.restarts,
            [1, 1, 1],
            "{what} pod: restart counts continue from the log dir (upstream calcRestartCountByLogDir)"
        );
    }
    let tmpfs_after = churn::mounts_under(&k.root());
    assert_eq!(
        tmpfs_after.len(),
        2,
        "the tmpfs emptyDirs are mounted again: {tmpfs_after:?}"
    );

    // Both pods go; nothing may be left.
    k.remove_manifest("fk7-static.yaml");
    Api::<Pod>::namespaced(client, "default")
        .delete("fk7-api", &DeleteParams::default())
        .await
        .expect("delete the API pod");
    let clean = churn::wait_no_traces(&k, &rt, PREFIX, Duration::from_secs(90)).await;
    faults::report(
        "7",
        "node reboot: kubelet kill -9, the runtime's sandboxes/containers, tmpfs emptyDirs and cgroups wiped, kubelet restarted on the same root dir (1 static + 1 API pod, 2 init containers each)",
        "same UIDs, new sandboxes (attempt 0), init containers rerun in order, fresh tmpfs, restartCount 1 for every container (upstream calcRestartCountByLogDir), nothing left after deletion",
        &format!(
            "both pods running again {:.1} s after the restart; traces gone {:.1} s after deletion",
            back.as_secs_f64(),
            clean.as_secs_f64()
        ),
    );
    k.stop();
}
