//! The container manager on the real containerd (`RKUBELET_CRI_ENDPOINT`) and the host's
//! cgroups: each test kubelet has its own `cgroupRoot` (`/rkt-<pid>-<n>`, removed afterwards).
//! Burstable and Guaranteed pods land in `kubepods/burstable/pod<uid>` and `kubepods/pod<uid>`
//! with the pod-level cpu shares, CFS quota and memory limit, their containers below; the
//! kubepods memory limit is the node allocatable; a container over its memory limit is
//! `OOMKilled` and restarted; pod cgroups disappear once the pod is deleted.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Kubelet, container, cri, phase, pod_containers, running, tail};

const IMAGE: &str = "docker.io/library/busybox:latest";
const MI: u64 = 1 << 20;

fn pod_yaml(name: &str, resources: &str, script: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script:?}]\n    resources: {resources}\n"
    )
}

fn v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The directory of cgroup `rel` (`/rkt-…/kubepods/…`) for `controller` (v1) or unified (v2).
fn cg_dir(controller: &str, rel: &str) -> PathBuf {
    let rel = rel.trim_start_matches('/');
    if v2() {
        Path::new("/sys/fs/cgroup").join(rel)
    } else {
        Path::new("/sys/fs/cgroup").join(controller).join(rel)
    }
}

fn read(controller: &str, rel: &str, file: &str) -> String {
    let path = cg_dir(controller, rel).join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// (cpu shares or weight, quota, memory limit) of a cgroup, in the host's cgroup version.
fn cpu_and_memory(rel: &str) -> (String, String, u64) {
    if v2() {
        (
            read("cpu", rel, "cpu.weight"),
            read("cpu", rel, "cpu.max"),
            read("memory", rel, "memory.max")
                .parse()
                .unwrap_or(u64::MAX),
        )
    } else {
        (
            read("cpu", rel, "cpu.shares"),
            read("cpu", rel, "cpu.cfs_quota_us"),
            read("memory", rel, "memory.limit_in_bytes")
                .parse()
                .unwrap(),
        )
    }
}

fn mem_total() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

async fn wait_gone(k: &Kubelet, dirs: &[PathBuf], limit: Duration) {
    let start = Instant::now();
    while dirs.iter().any(|d| d.exists()) {
        assert!(
            start.elapsed() < limit,
            "pod cgroups still there after {limit:?}: {:?}\nkubelet log tail:\n{}",
            dirs.iter().filter(|d| d.exists()).collect::<Vec<_>>(),
            tail(&k.log_text(), 60)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_land_in_qos_cgroups_with_pod_limits_and_allocatable_is_enforced() {
    let mut k = Kubelet::new();
    k.append_config("enforceNodeAllocatable: [pods]\nsystemReserved: {memory: 256Mi}\n");
    k.write_manifest(
        "burst.yaml",
        &pod_yaml(
            "burst",
            "{requests: {cpu: 100m, memory: 16Mi}, limits: {cpu: 200m, memory: 64Mi}}",
            "exec sleep 3600",
        ),
    );
    k.write_manifest(
        "guar.yaml",
        &pod_yaml(
            "guar",
            "{limits: {cpu: 250m, memory: 32Mi}}",
            "exec sleep 3600",
        ),
    );
    k.start();
    let root = k.cgroup_root.clone();
    let b = k
        .wait_pod("burst", Duration::from_secs(60), "Running", |p| {
            phase(p) == "Running" && running(p, "c")
        })
        .await;
    let g = k
        .wait_pod("guar", Duration::from_secs(60), "Running", |p| {
            phase(p) == "Running" && running(p, "c")
        })
        .await;
    assert_eq!(b["status"]["qosClass"], "Burstable");
    assert_eq!(g["status"]["qosClass"], "Guaranteed");
    let b_uid = b["metadata"]["uid"].as_str().unwrap().to_owned();
    let g_uid = g["metadata"]["uid"].as_str().unwrap().to_owned();

    // Node allocatable: kubepods memory = MemTotal − systemReserved (the kernel keeps page
    // multiples).
    let kubepods = format!("{root}/kubepods");
    let (_, _, kubepods_mem) = cpu_and_memory(&kubepods);
    let want = mem_total() - 256 * MI;
    assert_eq!(kubepods_mem, want / 4096 * 4096, "kubepods memory limit");

    let b_cg = format!("{root}/kubepods/burstable/pod{b_uid}");
    let g_cg = format!("{root}/kubepods/pod{g_uid}");
    let (b_cpu, b_quota, b_mem) = cpu_and_memory(&b_cg);
    let (g_cpu, g_quota, g_mem) = cpu_and_memory(&g_cg);
    if v2() {
        // shares 102 → weight 1 + (100 × 9999) / 262142 = 4; 256 shares → 10.
        assert_eq!((b_cpu.as_str(), b_quota.as_str()), ("4", "20000 100000"));
        assert_eq!((g_cpu.as_str(), g_quota.as_str()), ("10", "25000 100000"));
    } else {
        assert_eq!((b_cpu.as_str(), b_quota.as_str()), ("102", "20000"));
        assert_eq!((g_cpu.as_str(), g_quota.as_str()), ("256", "25000"));
        assert_eq!(read("cpu", &b_cg, "cpu.cfs_period_us"), "100000");
    }
    assert_eq!(b_mem, 64 * MI);
    assert_eq!(g_mem, 32 * MI);
    // QoS cgroups: burstable shares follow the burstable pod's request, besteffort has 2.
    if !v2() {
        assert_eq!(
            read("cpu", &format!("{kubepods}/besteffort"), "cpu.shares"),
            "2"
        );
        let start = Instant::now();
        while read("cpu", &format!("{kubepods}/burstable"), "cpu.shares") != "102" {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "burstable shares"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    // The containers (and sandboxes) run below their pod cgroup.
    let rt = cri().await;
    for (uid, cg) in [(&b_uid, &b_cg), (&g_uid, &g_cg)] {
        let containers = pod_containers(&rt, uid).await;
        assert_eq!(containers.len(), 1, "{uid}");
        let dir = cg_dir("memory", cg).join(&containers[0].id);
        assert!(dir.is_dir(), "container cgroup {} missing", dir.display());
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert!(
            !procs.trim().is_empty(),
            "container has processes in its cgroup"
        );
    }

    // Deleting the pods removes their cgroups.
    k.remove_manifest("burst.yaml");
    k.remove_manifest("guar.yaml");
    let dirs: Vec<PathBuf> = ["cpu", "memory", "pids", "cpuset"]
        .iter()
        .flat_map(|c| [cg_dir(c, &b_cg), cg_dir(c, &g_cg)])
        .collect();
    wait_gone(&k, &dirs, Duration::from_secs(60)).await;
    assert!(cg_dir("cpu", &kubepods).is_dir(), "kubepods stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_over_its_memory_limit_is_oom_killed_and_restarted() {
    let mut k = Kubelet::new();
    // `tail` keeps the whole newline-free stream in memory until the limit kills it.
    k.write_manifest(
        "hog.yaml",
        &pod_yaml(
            "hog",
            "{requests: {memory: 16Mi}, limits: {memory: 24Mi}}",
            "sleep 1; tail /dev/zero",
        ),
    );
    k.start();
    let p = k
        .wait_pod(
            "hog",
            Duration::from_secs(120),
            "OOMKilled and restarted",
            |p| {
                container(p, "containerStatuses", "c").is_some_and(|c| {
                    c["restartCount"].as_i64().unwrap_or(0) >= 1
                        && c["lastState"]["terminated"]["reason"] == "OOMKilled"
                })
            },
        )
        .await;
    let c = container(&p, "containerStatuses", "c").unwrap();
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 137, "{c}");
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let cg = format!("{}/kubepods/burstable/pod{uid}", k.cgroup_root);
    assert_eq!(cpu_and_memory(&cg).2, 24 * MI);
    k.remove_manifest("hog.yaml");
    let dirs = vec![cg_dir("memory", &cg), cg_dir("cpu", &cg)];
    wait_gone(&k, &dirs, Duration::from_secs(60)).await;
}
