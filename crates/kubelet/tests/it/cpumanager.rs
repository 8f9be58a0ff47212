//! The CPU manager (static policy) in the whole sync machinery against the `FakeRuntime`, with
//! paused time: a Guaranteed container is created with its exclusive cpuset, a BestEffort
//! container running before it follows the shrinking and growing shared pool through
//! `UpdateContainerResources`, a pod that does not fit is refused at admission, and a
//! restarted kubelet keeps the assignments without restarting anything.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::cm::cpumanager::cpuset::CpuSet;
use kubelet::cm::cpumanager::{CpuManagerConfig, CpuManagerPolicy};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::fake::FakeRuntime;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, phase, set, static_pod, wait_until};

const NODE: &str = "node-a";

fn pod(name: &str, cpu: Option<&str>) -> Pod {
    let resources = cpu
        .map(|c| {
            format!(
                "    resources:\n      requests: {{cpu: \"{c}\", memory: 64Mi}}\n      limits: {{cpu: \"{c}\", memory: 64Mi}}\n"
            )
        })
        .unwrap_or_default();
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n{resources}"
    );
    static_pod(&yaml, name, NODE)
}

/// A sysfs CPU directory of a 2-CPU machine without hyperthreads.
fn fake_sysfs(root: &Path) -> std::path::PathBuf {
    let dir = root.join("sysfs-cpu");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("online"), "0-1\n").unwrap();
    for cpu in 0..2 {
        let t = dir.join(format!("cpu{cpu}/topology"));
        std::fs::create_dir_all(&t).unwrap();
        std::fs::create_dir_all(dir.join(format!("cpu{cpu}/node0"))).unwrap();
        std::fs::write(t.join("physical_package_id"), "0\n").unwrap();
        std::fs::write(t.join("core_id"), format!("{cpu}\n")).unwrap();
    }
    dir
}

struct Harness {
    fake: FakeRuntime,
    events: CollectingRecorder,
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        Self {
            fake: FakeRuntime::with_images(&[IMAGE]),
            events: CollectingRecorder::default(),
            _dir: dir,
            root,
        }
    }

    async fn start(&self) -> Agent {
        let mut cfg = AgentConfig::for_tests(&self.root, NODE);
        cfg.cpu_manager = CpuManagerConfig {
            policy: CpuManagerPolicy::Static,
            reconcile_period: Duration::from_secs(10),
            reserved_system_cpus: CpuSet::parse("0").unwrap(),
            reserved_cpu_millis: 1000,
            sysfs_cpu_dir: fake_sysfs(&self.root),
            ..CpuManagerConfig::none(self.root.clone())
        };
        let deps = fake_deps(&self.fake, &self.events);
        Agent::start(cfg, deps, CancellationToken::new())
            .await
            .unwrap()
    }

    fn state_file(&self) -> serde_json::Value {
        let raw = std::fs::read(self.root.join("kubelet/cpu_manager_state")).unwrap();
        serde_json::from_slice(&raw).unwrap()
    }

    /// The cpuset the runtime holds for the (only) container of `pod`.
    fn cpuset(&self, pod: &Pod) -> Option<String> {
        let uid = pod.metadata.uid.as_deref().unwrap();
        let c = self
            .fake
            .containers()
            .into_iter()
            .find(|c| c.labels.get("io.kubernetes.pod.uid").map(String::as_str) == Some(uid))?;
        let status = self.fake.container(&c.id)?;
        Some(status.resources?.linux?.cpuset_cpus)
    }

    fn container_id(&self, pod: &Pod) -> String {
        let uid = pod.metadata.uid.as_deref().unwrap();
        self.fake
            .containers()
            .into_iter()
            .find(|c| c.labels.get("io.kubernetes.pod.uid").map(String::as_str) == Some(uid))
            .unwrap()
            .id
    }
}

#[tokio::test(start_paused = true)]
async fn static_policy_pins_guaranteed_and_moves_the_shared_pool() {
    let h = Harness::new();
    let be = pod("be", None);
    let g = pod("g", Some("1"));
    let g2 = pod("g2", Some("1"));
    let agent = h.start().await;

    set(&agent, vec![be.clone()]).await;
    wait_until("BestEffort container", Duration::from_secs(30), || {
        h.cpuset(&be).is_some()
    })
    .await;
    // Nothing is exclusive yet: the shared pool is every CPU.
    assert_eq!(h.cpuset(&be).as_deref(), Some("0-1"));
    let be_id = h.container_id(&be);

    set(&agent, vec![be.clone(), g.clone()]).await;
    wait_until("Guaranteed container", Duration::from_secs(30), || {
        h.cpuset(&g).is_some()
    })
    .await;
    assert_eq!(h.cpuset(&g).as_deref(), Some("1"));
    // Within a reconcile period the BestEffort container is moved to the shrunken pool.
    wait_until(
        "pool pushed to the BestEffort container",
        Duration::from_secs(15),
        || h.cpuset(&be).as_deref() == Some("0"),
    )
    .await;
    assert!(h.fake.call_count("UpdateContainerResources") >= 1);
    let state = h.state_file();
    assert_eq!(state["policyName"], "static");
    assert_eq!(state["defaultCpuSet"], "0");
    assert_eq!(
        state["entries"][g.metadata.uid.as_deref().unwrap()]["c"],
        "1"
    );

    // No CPU is left for a second Guaranteed pod: refused at admission as upstream.
    set(&agent, vec![be.clone(), g.clone(), g2.clone()]).await;
    wait_until("g2 rejected", Duration::from_secs(10), || {
        phase(&agent, &g2).as_deref() == Some("Failed")
    })
    .await;
    let st = agent
        .status
        .get_pod_status(g2.metadata.uid.as_deref().unwrap())
        .unwrap();
    assert_eq!(st.reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert_eq!(
        st.message.as_deref(),
        Some(
            "Pod was rejected: Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is unexpected"
        )
    );

    // The Guaranteed pod goes: its CPU returns to the pool and the BestEffort container follows.
    set(&agent, vec![be.clone()]).await;
    wait_until("pool grown back", Duration::from_secs(60), || {
        h.cpuset(&be).as_deref() == Some("0-1")
    })
    .await;
    assert_eq!(h.state_file()["defaultCpuSet"], "0-1");
    assert!(h.state_file().get("entries").is_none());
    // The BestEffort container was updated in place, never restarted.
    assert_eq!(h.container_id(&be), be_id);
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn restarted_kubelet_keeps_assignments_and_containers() {
    let h = Harness::new();
    let be = pod("be", None);
    let g = pod("g", Some("1"));
    let agent = h.start().await;
    set(&agent, vec![be.clone(), g.clone()]).await;
    wait_until(
        "both running with their cpusets",
        Duration::from_secs(40),
        || h.cpuset(&g).as_deref() == Some("1") && h.cpuset(&be).as_deref() == Some("0"),
    )
    .await;
    let ids = (h.container_id(&be), h.container_id(&g));
    let starts = h.fake.call_count("StartContainer");
    agent.shutdown().await;

    let agent = h.start().await;
    set(&agent, vec![be.clone(), g.clone()]).await;
    // Several reconcile periods later nothing moved and nothing restarted.
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert_eq!(h.cpuset(&g).as_deref(), Some("1"));
    assert_eq!(h.cpuset(&be).as_deref(), Some("0"));
    assert_eq!((h.container_id(&be), h.container_id(&g)), ids);
    assert_eq!(h.fake.call_count("StartContainer"), starts);
    assert_eq!(h.state_file()["defaultCpuSet"], "0");
    agent.shutdown().await;
}
