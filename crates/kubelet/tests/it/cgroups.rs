//! The container manager inside the whole sync machinery, on the fake cgroup filesystem and
//! the `FakeRuntime` with paused time: pod cgroups exist before the sandbox, the sandbox gets
//! the pod cgroup as its parent, the QoS cgroups follow the pods, orphaned pod cgroups are
//! destroyed by housekeeping (their processes killed first), a restarted kubelet adopts
//! existing pod cgroups, and `cgroupsPerQOS: false` leaves the cgroup parent empty.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::cm::cgroups::fake::FakeCgroupFs;
use kubelet::cm::cgroups::{CgroupVersion, ResourceConfig};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::fake::FakeRuntime;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, set, static_pod, wait_until};

const NODE: &str = "node-a";

fn pod(name: &str, resources: &str) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    resources: {resources}\n"
    );
    static_pod(&yaml, name, NODE)
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap()
}

struct Harness {
    fake: FakeRuntime,
    cgroups: Arc<FakeCgroupFs>,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Self {
        Self {
            fake: FakeRuntime::with_images(&[IMAGE]),
            cgroups: Arc::new(FakeCgroupFs::new(CgroupVersion::V1)),
            _dir: tempfile::tempdir().unwrap(),
        }
    }

    async fn start(&self, per_qos: bool) -> Agent {
        let mut cfg = AgentConfig::for_tests(self._dir.path(), NODE);
        cfg.cgroups.per_qos = per_qos;
        cfg.cgroups.fs = Some(self.cgroups.clone());
        cfg.cgroups.cm.cgroup_root = "/rk".to_owned();
        let deps = fake_deps(&self.fake, &CollectingRecorder::default());
        Agent::start(cfg, deps, CancellationToken::new())
            .await
            .unwrap()
    }

    fn cgroup_parent_of(&self, p: &Pod) -> Option<String> {
        let sb = self
            .fake
            .sandboxes()
            .into_iter()
            .find(|s| s.metadata.as_ref().is_some_and(|m| m.uid == uid(p)))?;
        self.fake
            .sandbox_config(&sb.id)
            .and_then(|c| c.linux)
            .map(|l| l.cgroup_parent)
    }
}

const BURSTABLE: &str = "{requests: {cpu: 250m, memory: 32Mi}, limits: {cpu: 500m, memory: 64Mi}}";
const GUARANTEED: &str = "{limits: {cpu: 100m, memory: 16Mi}}";

#[tokio::test(start_paused = true)]
async fn sandboxes_get_their_pod_cgroup_and_orphans_are_destroyed() {
    let h = Harness::new();
    // Left behind by an earlier kubelet for a pod nobody knows any more, with a process.
    h.cgroups
        .add_pids("/rk/kubepods/besteffort/podstale", &[987_654_321]);
    let agent = h.start(true).await;
    // kubepods holds the node's allocatable (no reservations here: the whole machine).
    let kubepods = h.cgroups.get("/rk/kubepods").unwrap();
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(kubepods.cpu_shares, Some((cores * 1024).min(262_144)));
    assert!(kubepods.memory.is_some_and(|m| m > 0));
    let b = pod("burst", BURSTABLE);
    let g = pod("guar", GUARANTEED);
    let e = pod("best", "{}");
    set(&agent, vec![b.clone(), g.clone(), e.clone()]).await;
    wait_until("three sandboxes", Duration::from_secs(30), || {
        h.fake.sandboxes().len() == 3
    })
    .await;

    let want = [
        (&b, format!("/rk/kubepods/burstable/pod{}", uid(&b))),
        (&g, format!("/rk/kubepods/pod{}", uid(&g))),
        (&e, format!("/rk/kubepods/besteffort/pod{}", uid(&e))),
    ];
    for (p, path) in &want {
        assert_eq!(h.cgroup_parent_of(p).as_deref(), Some(path.as_str()));
        assert!(h.cgroups.get(path).is_some(), "{path} exists");
    }
    let bc = h.cgroups.get(&want[0].1).unwrap();
    assert_eq!(
        (bc.cpu_shares, bc.cpu_quota, bc.cpu_period, bc.memory),
        (Some(256), Some(50_000), Some(100_000), Some(64 << 20))
    );
    let gc = h.cgroups.get(&want[1].1).unwrap();
    assert_eq!(
        (gc.cpu_shares, gc.cpu_quota, gc.memory),
        (Some(102), Some(10_000), Some(16 << 20))
    );
    assert_eq!(h.cgroups.get(&want[2].1).unwrap().cpu_shares, Some(2));
    // The burstable QoS cgroup follows its pods.
    wait_until("burstable shares", Duration::from_secs(10), || {
        h.cgroups
            .get("/rk/kubepods/burstable")
            .and_then(|c| c.cpu_shares)
            == Some(256)
    })
    .await;
    assert_eq!(
        h.cgroups.get("/rk/kubepods/besteffort").unwrap().cpu_shares,
        Some(2)
    );
    // Housekeeping removed the stale cgroup after killing its process.
    wait_until("stale cgroup destroyed", Duration::from_secs(10), || {
        h.cgroups.get("/rk/kubepods/besteffort/podstale").is_none()
    })
    .await;
    assert_eq!(h.cgroups.killed(), vec![987_654_321]);

    // A pod that goes away loses its cgroup once its worker is done.
    set(&agent, vec![g.clone(), e.clone()]).await;
    wait_until(
        "burstable pod cgroup destroyed",
        Duration::from_secs(60),
        || h.cgroups.get(&want[0].1).is_none(),
    )
    .await;
    wait_until(
        "burstable shares back to 2",
        Duration::from_secs(70),
        || {
            h.cgroups
                .get("/rk/kubepods/burstable")
                .and_then(|c| c.cpu_shares)
                == Some(2)
        },
    )
    .await;
    assert!(h.cgroups.get(&want[1].1).is_some());
    agent.shutdown().await;

    // A restarted kubelet adopts the running pods' cgroups: nothing destroyed, nothing killed.
    let destroyed_before = h.cgroups.destroyed();
    let agent = h.start(true).await;
    set(&agent, vec![g.clone(), e.clone()]).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(h.cgroups.destroyed(), destroyed_before);
    assert!(h.cgroups.get(&want[1].1).is_some());
    assert!(h.cgroups.get(&want[2].1).is_some());
    assert_eq!(h.fake.sandboxes().len(), 2, "no sandbox re-created");
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_cgroups_per_qos_the_parent_is_empty() {
    let h = Harness::new();
    let agent = h.start(false).await;
    let b = pod("burst", BURSTABLE);
    set(&agent, vec![b.clone()]).await;
    wait_until("sandbox", Duration::from_secs(30), || {
        h.fake.sandboxes().len() == 1
    })
    .await;
    assert_eq!(h.cgroup_parent_of(&b).as_deref(), Some(""));
    assert!(h.cgroups.paths().is_empty(), "no cgroups touched");
    h.cgroups
        .insert("/rk/kubepods/besteffort/podx", ResourceConfig::default());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(h.cgroups.get("/rk/kubepods/besteffort/podx").is_some());
    agent.shutdown().await;
}
