//! `cgroupDriver: systemd` against a real `dbus-daemon` on a private bus and the test
//! `org.freedesktop.systemd1` service (tests/it/systemd_cgroups/systemd1.rs) over a temporary cgroupfs: the node
//! allocatable and QoS slices are started top-down with upstream's unit properties, pod slices
//! get the pod's limits through `SetUnitProperties`, the sandbox's cgroup parent is the expanded
//! slice path, QoS updates go through systemd, a deleted pod's slice is stopped, a pod UID that
//! systemd cannot name gets no slice and no sandbox, and an unreachable systemd stops the start
//! with the setting and the bus address named. The in-process agent runs on the `FakeRuntime`
//! with real time (the bus is a real process).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::cm::cgroups::CgroupDriver;
use kubelet::cm::cgroups::systemd::SystemdCgroupFs;
use kubelet::cm::cgroups::v2::V2Fs;
use kubelet::cm::{CmConfig, ContainerManager};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::fake::FakeRuntime;
use tokio_util::sync::CancellationToken;

use crate::common;
mod systemd1;

use common::agent::{IMAGE, fake_deps, set, static_pod, wait_until};
use common::dbus::BusDaemon;
use systemd1::{FakeSystemd, Prop};

const NODE: &str = "node-sd";
const BURSTABLE: &str = "{requests: {cpu: 250m, memory: 32Mi}, limits: {cpu: 500m, memory: 64Mi}}";
const B_UID: &str = "6c1a4e95-6bb6-11e6-bc26-28d2444e470d";
const B_UNIT: &str = "kubepods-burstable-pod6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice";

fn pod(name: &str, uid: Option<&str>, resources: &str) -> Pod {
    let uid = uid.map(|u| format!("  uid: {u}\n")).unwrap_or_default();
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{uid}spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    resources: {resources}\n"
    );
    static_pod(&yaml, name, NODE)
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap()
}

/// A cgroup v1 layout in a temporary directory (as on this hybrid host, without `unified`).
fn v1_cgroupfs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for c in [
        "cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "systemd",
    ] {
        std::fs::create_dir(dir.path().join(c)).unwrap();
    }
    std::fs::write(dir.path().join("cpuset/cpuset.cpus"), "0-3\n").unwrap();
    std::fs::write(dir.path().join("cpuset/cpuset.mems"), "0\n").unwrap();
    dir
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .trim()
        .to_owned()
}

fn cgroup_parent_of(fake: &FakeRuntime, p: &Pod) -> Option<String> {
    let sb = fake
        .sandboxes()
        .into_iter()
        .find(|s| s.metadata.as_ref().is_some_and(|m| m.uid == uid(p)))?;
    fake.sandbox_config(&sb.id)
        .and_then(|c| c.linux)
        .map(|l| l.cgroup_parent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_driver_makes_pod_slices_through_systemd() {
    let bus = BusDaemon::start().await;
    let cg = v1_cgroupfs();
    let sd = FakeSystemd::v1(cg.path());
    let _served = sd.serve(&bus.address).await;
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let events = CollectingRecorder::default();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
    cfg.cgroups.per_qos = true;
    cfg.cgroups.mount_root = cg.path().to_path_buf();
    cfg.cgroups.driver = CgroupDriver::Systemd;
    cfg.cgroups.systemd_bus_address = Some(bus.address.clone());
    let agent = Agent::start(cfg, fake_deps(&fake, &events), CancellationToken::new())
        .await
        .unwrap();
    assert!(sd.subscribed(), "the kubelet subscribes to job signals");

    // Node allocatable and QoS slices, started top-down, each wanting its parent.
    for (unit, parent) in [
        ("kubepods.slice", "-.slice"),
        ("kubepods-burstable.slice", "kubepods.slice"),
        ("kubepods-besteffort.slice", "kubepods.slice"),
    ] {
        let props = sd
            .unit(unit)
            .unwrap_or_else(|| panic!("{unit} not started: {:#?}", sd.calls()));
        assert_eq!(
            props.get("Wants"),
            Some(&Prop::Strs(vec![parent.to_owned()])),
            "{unit}"
        );
        assert_eq!(
            props.get("DefaultDependencies"),
            Some(&Prop::Bool(false)),
            "{unit}"
        );
        for acct in [
            "MemoryAccounting",
            "CPUAccounting",
            "BlockIOAccounting",
            "TasksAccounting",
        ] {
            assert_eq!(props.get(acct), Some(&Prop::Bool(true)), "{unit} {acct}");
        }
        for d in sd.dirs(unit) {
            assert!(d.is_dir(), "{}", d.display());
        }
    }
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(
        sd.last_set("kubepods.slice", "CPUShares"),
        Some(Prop::U64((cores * 1024).min(262_144)))
    );
    assert!(
        matches!(sd.last_set("kubepods.slice", "MemoryLimit"), Some(Prop::U64(m)) if m > 0),
        "{:?}",
        sd.last_set("kubepods.slice", "MemoryLimit")
    );
    assert_eq!(
        sd.last_set("kubepods-besteffort.slice", "CPUShares"),
        Some(Prop::U64(2))
    );
    // As runc, the kubelet writes the values to the cgroupfs too, and fills the cpuset
    // systemd does not manage on v1.
    let p = cg.path();
    assert_eq!(
        read(p, "cpu/kubepods.slice/kubepods-besteffort.slice/cpu.shares"),
        "2"
    );
    assert_eq!(
        read(
            p,
            "cpuset/kubepods.slice/kubepods-burstable.slice/cpuset.cpus"
        ),
        "0-3"
    );

    let b = pod("burst", Some(B_UID), BURSTABLE);
    let e = pod("best", None, "{}");
    // A UID systemd cannot name unambiguously ('_' is the escaped '-').
    let evil = pod("evil", Some("evil_uid"), "{}");
    set(&agent, vec![b.clone(), e.clone(), evil.clone()]).await;
    wait_until("two sandboxes", Duration::from_secs(30), || {
        fake.sandboxes().len() == 2
    })
    .await;
    let e_unit = format!("kubepods-besteffort-pod{}.slice", uid(&e));
    assert_eq!(
        cgroup_parent_of(&fake, &b).as_deref(),
        Some(format!("/kubepods.slice/kubepods-burstable.slice/{B_UNIT}").as_str())
    );
    assert_eq!(
        cgroup_parent_of(&fake, &e),
        Some(format!(
            "/kubepods.slice/kubepods-besteffort.slice/{e_unit}"
        ))
    );
    let bp = sd.unit(B_UNIT).expect("burstable pod slice started");
    assert_eq!(
        bp.get("Wants"),
        Some(&Prop::Strs(vec!["kubepods-burstable.slice".to_owned()]))
    );
    assert_eq!(sd.last_set(B_UNIT, "CPUShares"), Some(Prop::U64(256)));
    assert_eq!(
        sd.last_set(B_UNIT, "CPUQuotaPerSecUSec"),
        Some(Prop::U64(500_000))
    );
    assert_eq!(
        sd.last_set(B_UNIT, "CPUQuotaPeriodUSec"),
        Some(Prop::U64(100_000))
    );
    assert_eq!(
        sd.last_set(B_UNIT, "MemoryLimit"),
        Some(Prop::U64(64 << 20))
    );
    assert_eq!(sd.last_set(&e_unit, "CPUShares"), Some(Prop::U64(2)));
    let b_dir = format!("kubepods.slice/kubepods-burstable.slice/{B_UNIT}");
    assert_eq!(read(p, &format!("cpu/{b_dir}/cpu.cfs_quota_us")), "50000");
    assert_eq!(
        read(p, &format!("memory/{b_dir}/memory.limit_in_bytes")),
        (64u64 << 20).to_string()
    );
    // The QoS slice follows its pods through SetUnitProperties.
    wait_until("burstable QoS shares", Duration::from_secs(20), || {
        sd.last_set("kubepods-burstable.slice", "CPUShares") == Some(Prop::U64(256))
    })
    .await;
    // The hostile UID: no unit, no sandbox, the reason reported.
    wait_until("evil pod refused", Duration::from_secs(20), || {
        events
            .with_reason("FailedToCreatePodContainer")
            .iter()
            .any(|ev| ev.pod_uid == "evil_uid" && ev.message.contains("'_'"))
    })
    .await;
    assert!(
        sd.calls().iter().all(|c| !c.unit.contains("evil")),
        "{:#?}",
        sd.calls()
    );
    assert_eq!(fake.sandboxes().len(), 2);

    // The burstable pod goes away: its slice is stopped and its directories are gone.
    set(&agent, vec![e.clone()]).await;
    wait_until("pod slice stopped", Duration::from_secs(60), || {
        sd.calls()
            .iter()
            .any(|c| c.method == "StopUnit" && c.unit == B_UNIT)
    })
    .await;
    wait_until(
        "pod slice directories removed",
        Duration::from_secs(10),
        || {
            ["cpu", "cpuset", "memory", "pids", "hugetlb"]
                .iter()
                .all(|c| !p.join(c).join(&b_dir).exists())
        },
    )
    .await;
    assert!(!sd.units().contains(&B_UNIT.to_owned()));
    assert!(sd.unit(&e_unit).is_some(), "the other pod keeps its slice");
    wait_until(
        "burstable shares back to 2",
        Duration::from_secs(20),
        || sd.last_set("kubepods-burstable.slice", "CPUShares") == Some(Prop::U64(2)),
    )
    .await;
    agent.shutdown().await;
}

/// The unified hierarchy: `CPUWeight`, `MemoryMax`, `IOAccounting`, orphan removal by
/// `StopUnit`, through the container manager over a temporary v2 cgroupfs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_driver_on_cgroup_v2_sets_weight_and_memory_max() {
    let bus = BusDaemon::start().await;
    let cg = tempfile::tempdir().unwrap();
    std::fs::write(
        cg.path().join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    )
    .unwrap();
    std::fs::write(cg.path().join("cgroup.subtree_control"), "").unwrap();
    let sd = FakeSystemd::v2(cg.path());
    let _served = sd.serve(&bus.address).await;
    let fs = SystemdCgroupFs::connect(Arc::new(V2Fs::new(cg.path())), Some(&bus.address))
        .await
        .unwrap();
    const G: i128 = 1_000_000_000;
    let cm = ContainerManager::new(
        CmConfig {
            capacity: [
                ("cpu".to_owned(), 2 * G),
                ("memory".to_owned(), (4 << 30) * G),
            ]
            .into(),
            ..CmConfig::default()
        },
        Arc::new(fs),
    );
    let b = pod("burst", Some(B_UID), BURSTABLE);
    let cm2 = cm.clone();
    let b2 = b.clone();
    tokio::task::spawn_blocking(move || {
        cm2.start().unwrap();
        cm2.ensure_pod_cgroup(&b2).unwrap();
    })
    .await
    .unwrap();
    assert_eq!(
        sd.unit("kubepods.slice").unwrap().get("IOAccounting"),
        Some(&Prop::Bool(true))
    );
    assert_eq!(
        sd.last_set("kubepods.slice", "CPUWeight"),
        Some(Prop::U64(79))
    );
    assert_eq!(
        sd.last_set("kubepods.slice", "MemoryMax"),
        Some(Prop::U64(4 << 30))
    );
    assert_eq!(sd.last_set(B_UNIT, "CPUWeight"), Some(Prop::U64(10)));
    assert_eq!(sd.last_set(B_UNIT, "MemoryMax"), Some(Prop::U64(64 << 20)));
    let b_dir = cg
        .path()
        .join("kubepods.slice/kubepods-burstable.slice")
        .join(B_UNIT);
    assert_eq!(read(&b_dir, "cpu.max"), "50000 100000");
    assert_eq!(read(&b_dir, "memory.max"), (64u64 << 20).to_string());
    // Discovery reads the slice back as the pod's UID; an unknown pod's slice is stopped.
    let found = cm.pod_cgroups_on_host();
    assert_eq!(found.keys().collect::<Vec<_>>(), vec![B_UID]);
    let cm2 = cm.clone();
    let destroyed = tokio::task::spawn_blocking(move || {
        cm2.cleanup_orphaned_pod_cgroups(&Default::default(), &|_| false)
    })
    .await
    .unwrap();
    assert_eq!(destroyed.destroyed, vec![B_UID.to_owned()]);
    assert_eq!(destroyed.left_behind, 0);
    assert!(!b_dir.exists());
    assert!(
        sd.calls()
            .iter()
            .any(|c| c.method == "StopUnit" && c.unit == B_UNIT)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_systemd_stops_the_start_naming_the_setting_and_bus() {
    let dir = tempfile::tempdir().unwrap();
    let cg = v1_cgroupfs();
    let address = format!("unix:path={}/no-bus-here", dir.path().display());
    let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
    cfg.cgroups.per_qos = true;
    cfg.cgroups.mount_root = cg.path().to_path_buf();
    cfg.cgroups.driver = CgroupDriver::Systemd;
    cfg.cgroups.systemd_bus_address = Some(address.clone());
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let deps = fake_deps(&fake, &CollectingRecorder::default());
    let err = match Agent::start(cfg, deps, CancellationToken::new()).await {
        Ok(_) => panic!("started without systemd"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("cgroupDriver is \"systemd\""), "{err}");
    assert!(err.contains(&address), "{err}");
    // Nothing was created.
    assert!(!cg.path().join("cpu/kubepods.slice").exists());
}
