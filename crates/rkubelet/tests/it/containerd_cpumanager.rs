//! End-to-end test of the CPU manager's static policy on the real containerd started by
//! `dev/runtime.sh up` (`RKUBELET_CRI_ENDPOINT`). This machine has 2 CPUs: CPU 0 is reserved
//! (`reservedSystemCPUs: "0"`), so a Guaranteed 1-CPU container gets CPU 1 for itself and
//! everything else shares CPU 0. Looks inside the containers with CRI ExecSync
//! (`/proc/self/status`, and the CFS quota the exclusive container runs without), checks
//! `<rootDir>/cpu_manager_state`, and restarts the kubelet to see the containers keep their
//! cpusets and keep running.

use crate::common;

use std::time::Duration;

use common::{Kubelet, container, phase, running};
use serde_json::Value;

const IMAGE: &str = "docker.io/library/busybox:latest";
const WAIT: Duration = Duration::from_secs(60);

fn pod_yaml(name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n{resources}"
    )
}

const GUARANTEED_1CPU: &str = "    resources:\n      requests: {cpu: \"1\", memory: 64Mi}\n      limits: {cpu: \"1\", memory: 64Mi}\n";

fn container_id(p: &Value) -> String {
    container(p, "containerStatuses", "c")
        .and_then(|c| c["containerID"].as_str())
        .and_then(|id| id.strip_prefix("containerd://"))
        .unwrap_or_else(|| panic!("no container ID: {}", p["status"]))
        .to_owned()
}

fn restart_count(p: &Value) -> i64 {
    container(p, "containerStatuses", "c")
        .and_then(|c| c["restartCount"].as_i64())
        .unwrap_or(-1)
}

/// `Cpus_allowed_list` of a process started in the container.
async fn cpus_allowed(p: &Value) -> String {
    let (code, out, err) = common::exec_in(
        &container_id(p),
        &["grep", "^Cpus_allowed_list:", "/proc/self/status"],
    )
    .await;
    assert_eq!(code, 0, "grep Cpus_allowed_list: {err}");
    out.split_once(':')
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default()
}

async fn wait_running(k: &Kubelet, name: &str) -> Value {
    k.wait_pod(name, WAIT, "container running", |p| {
        phase(p) == "Running" && running(p, "c")
    })
    .await
}

/// Polls until the container's `Cpus_allowed_list` is `want` (the pool follows within a
/// reconcile period).
async fn wait_cpus(p: &Value, want: &str, timeout: Duration) {
    let start = std::time::Instant::now();
    loop {
        let got = cpus_allowed(p).await;
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "Cpus_allowed_list stayed {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn static_policy_pins_cpus_and_survives_a_restart() {
    assert!(
        std::thread::available_parallelism().map_or(0, |n| n.get()) >= 2,
        "this test needs at least 2 CPUs"
    );
    let mut k = Kubelet::new();
    // The harness already gives this kubelet its own cgroupRoot.
    k.append_config(
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerReconcilePeriod: 2s\n",
    );
    k.write_manifest("be.yaml", &pod_yaml("be", ""));
    k.start();
    let be = wait_running(&k, "be").await;
    // Before any exclusive assignment the shared pool is every CPU.
    wait_cpus(&be, "0-1", Duration::from_secs(5)).await;

    k.write_manifest("gu.yaml", &pod_yaml("gu", GUARANTEED_1CPU));
    let gu = wait_running(&k, "gu").await;
    assert_eq!(gu["status"]["qosClass"], "Guaranteed");
    assert_eq!(cpus_allowed(&gu).await, "1");
    // DisableCPUQuotaWithExclusiveCPUs (on by default): its own CPU, no CFS quota.
    let (code, out, err) = common::exec_in(
        &container_id(&gu),
        &[
            "sh",
            "-c",
            "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us",
        ],
    )
    .await;
    assert_eq!(code, 0, "reading the CFS quota: {err}");
    assert!(
        matches!(out.trim(), "-1" | "max 100000"),
        "quota of the container with an exclusive CPU: {out:?}"
    );
    // The BestEffort container that ran before is moved to the shrunken pool.
    wait_cpus(&be, "0", Duration::from_secs(10)).await;

    let state: Value =
        serde_json::from_slice(&std::fs::read(k.root().join("cpu_manager_state")).unwrap())
            .unwrap();
    let gu_uid = gu["metadata"]["uid"].as_str().unwrap();
    assert_eq!(state["policyName"], "static");
    assert_eq!(state["defaultCpuSet"], "0");
    assert_eq!(state["entries"][gu_uid]["c"], "1", "state: {state}");
    assert_eq!(
        state["entries"].as_object().unwrap().len(),
        1,
        "state: {state}"
    );
    assert!(state["checksum"].as_u64().unwrap() > 0);

    // Restart: the containers keep running with the same cpusets.
    let ids = (container_id(&be), container_id(&gu));
    k.stop();
    k.start();
    let be2 = wait_running(&k, "be").await;
    let gu2 = wait_running(&k, "gu").await;
    // Several reconcile periods.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let be2 = k.pod("be").await.unwrap_or(be2);
    let gu2 = k.pod("gu").await.unwrap_or(gu2);
    assert_eq!((container_id(&be2), container_id(&gu2)), ids);
    assert_eq!((restart_count(&be2), restart_count(&gu2)), (0, 0));
    assert_eq!(cpus_allowed(&gu2).await, "1");
    assert_eq!(cpus_allowed(&be2).await, "0");
    let again: Value =
        serde_json::from_slice(&std::fs::read(k.root().join("cpu_manager_state")).unwrap())
            .unwrap();
    assert_eq!(again["entries"], state["entries"]);
    assert_eq!(again["defaultCpuSet"], "0");

    // The Guaranteed pod goes: its CPU returns to the pool and the BestEffort container follows.
    k.remove_manifest("gu.yaml");
    wait_cpus(&be2, "0-1", Duration::from_secs(30)).await;
    let after: Value =
        serde_json::from_slice(&std::fs::read(k.root().join("cpu_manager_state")).unwrap())
            .unwrap();
    assert_eq!(after["defaultCpuSet"], "0-1");
    assert!(after.get("entries").is_none(), "state: {after}");
}
