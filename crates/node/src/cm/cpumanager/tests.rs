//! Manager-level tests: start-up from config and checkpoint, admission, release, reconcile
//! against the fake runtime.

use super::topology::write_fake_sysfs;
use super::*;
use rkubelet_cri::fake::FakeRuntime;

/// A 2-CPU node without hyperthreads (like this machine), static policy, 1 reserved CPU.
fn static_cfg(dir: &std::path::Path) -> CpuManagerConfig {
    let sysfs = dir.join("sysfs");
    write_fake_sysfs(&sysfs, &[(0, 0, 0, 0), (1, 0, 0, 1)]);
    CpuManagerConfig {
        policy: CpuManagerPolicy::Static,
        reconcile_period: Duration::from_secs(10),
        reserved_system_cpus: CpuSet::new(),
        reserved_cpu_millis: 500,
        state_dir: dir.join("root"),
        sysfs_cpu_dir: sysfs,
    }
}

fn pod(uid: &str, cpu: Option<&str>) -> Pod {
    let mut c = serde_json::json!({"name": "c", "image": "busybox"});
    if let Some(cpu) = cpu {
        let r = serde_json::json!({"cpu": cpu, "memory": "64Mi"});
        c["resources"] = serde_json::json!({"requests": r, "limits": r});
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "spec": {"containers": [c]}
    }))
    .unwrap()
}

#[test]
fn none_policy_pins_nothing_and_writes_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::new(&CpuManagerConfig::none(dir.path().to_path_buf())).unwrap();
    assert!(m.allocate_pod(&pod("g", Some("1"))).is_ok());
    assert_eq!(m.container_cpuset("g", "c"), None);
    let raw = std::fs::read_to_string(dir.path().join("cpu_manager_state")).unwrap();
    assert!(raw.contains(r#""policyName":"none""#), "{raw}");
}

#[test]
fn static_allocates_refuses_and_releases() {
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::new(&static_cfg(dir.path())).unwrap();
    assert_eq!(m.state().default_cpu_set.to_string(), "0-1");
    let admit = m.admit_handler();
    admit.admit(&pod("g1", Some("1")), &[]).unwrap();
    assert_eq!(m.container_cpuset("g1", "c").as_deref(), Some("1"));
    assert_eq!(m.container_cpuset("be", "c").as_deref(), Some("0"));
    let rejection = admit.admit(&pod("g2", Some("1")), &[]).unwrap_err();
    assert_eq!(rejection.reason, "UnexpectedAdmissionError");
    assert_eq!(
        rejection.message,
        "Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is unexpected"
    );
    assert!(!m.state().assignments.contains_key("g2"));
    m.release_pod("g1");
    assert_eq!(m.state().default_cpu_set.to_string(), "0-1");
    admit.admit(&pod("g2", Some("1")), &[]).unwrap();
    assert_eq!(m.container_cpuset("g2", "c").as_deref(), Some("1"));
}

#[test]
fn restart_keeps_assignments() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = static_cfg(dir.path());
    let m = CpuManager::new(&cfg).unwrap();
    m.allocate_pod(&pod("g1", Some("1"))).unwrap();
    drop(m);
    let m = CpuManager::new(&cfg).unwrap();
    assert_eq!(
        m.state().get("g1", "c").map(ToString::to_string).as_deref(),
        Some("1")
    );
    assert_eq!(m.state().default_cpu_set.to_string(), "0");
    // Re-admission after the restart keeps the same CPUs.
    m.allocate_pod(&pod("g1", Some("1"))).unwrap();
    assert_eq!(m.container_cpuset("g1", "c").as_deref(), Some("1"));
}

#[test]
fn start_up_errors_name_the_file_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = static_cfg(dir.path());
    let path = cfg.state_dir.join("cpu_manager_state");
    std::fs::create_dir_all(&cfg.state_dir).unwrap();

    std::fs::write(&path, "{not json").unwrap();
    let err = CpuManager::new(&cfg).err().unwrap().to_string();
    assert!(
        err.starts_with("could not restore state from checkpoint: "),
        "{err}"
    );
    assert!(err.ends_with(&format!("please drain this node and delete the CPU manager checkpoint file {path:?} before restarting Kubelet")), "{err}");

    std::fs::write(
        &path,
        r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":12345}"#,
    )
    .unwrap();
    let err = CpuManager::new(&cfg).err().unwrap().to_string();
    assert!(err.contains("checkpoint is corrupted"), "{err}");

    std::fs::write(&path, r#"{"policyName":"none","defaultCpuSet":""}"#).unwrap();
    let err = CpuManager::new(&cfg).err().unwrap().to_string();
    assert!(
        err.contains(r#"configured policy "static" differs from state checkpoint policy "none""#),
        "{err}"
    );

    // A state that does not fit the node (CPU 2 does not exist here).
    std::fs::write(&path, r#"{"policyName":"static","defaultCpuSet":"0-2"}"#).unwrap();
    let err = CpuManager::new(&cfg).err().unwrap().to_string();
    assert!(
        err.contains(
            "static policy invalid state: current set of available CPUs \"0-1\" doesn't match"
        ),
        "{err}"
    );
    assert!(
        err.contains("please drain node and remove policy state file"),
        "{err}"
    );

    std::fs::remove_file(&path).unwrap();
    cfg.reserved_cpu_millis = 0;
    let err = CpuManager::new(&cfg).err().unwrap().to_string();
    assert_eq!(
        err,
        "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"
    );

    cfg.reserved_cpu_millis = 1000;
    cfg.reserved_system_cpus = CpuSet::parse("0-1").unwrap();
    let err = CpuManager::new(&cfg).err().unwrap().to_string();
    assert!(
        err.contains("unable to reserve the required amount of CPUs"),
        "{err}"
    );
}

#[tokio::test]
async fn reconcile_pushes_the_pool_and_drops_stale_state() {
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::new(&static_cfg(dir.path())).unwrap();
    let fake = FakeRuntime::new();
    let cache = PodCache::new();
    let be = pod("be", None);
    let mut status = crate::container::PodStatus {
        uid: "be".into(),
        ..Default::default()
    };
    status
        .container_statuses
        .push(crate::container::ContainerStatus {
            id: "cid-be".into(),
            name: "c".into(),
            sandbox_id: String::new(),
            state: crate::container::ContainerState::Running,
            created_at: None,
            started_at: None,
            finished_at: None,
            exit_code: 0,
            image: String::new(),
            image_ref: String::new(),
            image_id: String::new(),
            hash: 0,
            restart_count: 0,
            reason: String::new(),
            message: String::new(),
            termination_message_path: None,
            termination_grace_period: None,
            resources: None,
            user: None,
        });
    cache.set("be", Ok(status), tokio::time::Instant::now());
    // The BestEffort container was created with the whole pool.
    assert_eq!(m.container_cpuset("be", "c").as_deref(), Some("0-1"));
    m.allocate_pod(&pod("g", Some("1"))).unwrap();
    // The pool shrank to "0": the BestEffort container is updated (the fake does not know
    // it, so the push fails and stays due).
    m.reconcile(&fake, std::slice::from_ref(&be), true, &cache)
        .await;
    assert_eq!(fake.call_count("UpdateContainerResources"), 1);
    assert_eq!(m.state().default_cpu_set.to_string(), "0");
    // The Guaranteed pod is not active: one period later its CPUs return to the pool, which
    // is again what the BestEffort container has, so nothing is pushed.
    m.reconcile(&fake, std::slice::from_ref(&be), true, &cache)
        .await;
    assert_eq!(m.state().default_cpu_set.to_string(), "0-1");
    assert_eq!(fake.call_count("UpdateContainerResources"), 1);
    // Not before every source reported: nothing is dropped.
    m.allocate_pod(&pod("g", Some("1"))).unwrap();
    for _ in 0..3 {
        m.reconcile(&fake, std::slice::from_ref(&be), false, &cache)
            .await;
    }
    assert_eq!(m.state().default_cpu_set.to_string(), "0");
}

#[test]
fn exclusive_cpus_are_those_of_regular_containers_with_an_assignment() {
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::new(&static_cfg(dir.path())).unwrap();
    let g = pod("g1", Some("1"));
    let shared = pod("b1", Some("500m"));
    m.allocate_pod(&g).unwrap();
    m.allocate_pod(&shared).unwrap();
    assert!(m.container_has_exclusive_cpus(&g, "c"));
    assert!(m.pod_has_exclusive_cpus(&g));
    assert!(!m.container_has_exclusive_cpus(&shared, "c"));
    assert!(!m.pod_has_exclusive_cpus(&shared));
    assert!(!m.container_has_exclusive_cpus(&g, "other"));
    m.release_pod("g1");
    assert!(!m.pod_has_exclusive_cpus(&g));
    // The none policy never pins anything.
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::new(&CpuManagerConfig::none(dir.path().to_path_buf())).unwrap();
    m.allocate_pod(&g).unwrap();
    assert!(!m.pod_has_exclusive_cpus(&g));
}
