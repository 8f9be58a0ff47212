//! In-place pod resize through the whole sync machinery on the `FakeRuntime` and the fake
//! cgroup filesystem, with paused time: a resize of a running pod updates the container through
//! CRI `UpdateContainerResources` and the pod cgroup, without a restart when the resize policy
//! is `NotRequired` and with one when it is `RestartContainer`; a resize bigger than the node is
//! left pending as `Infeasible`; the allocation survives a kubelet restart.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::cm::cgroups::CgroupVersion;
use kubelet::cm::cgroups::fake::FakeCgroupFs;
use kubelet::events::CollectingRecorder;
use kubelet::types::{PodOp, PodSource, PodUpdate};
use rkubelet_cri::fake::FakeRuntime;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, wait_until};

const NODE: &str = "node-a";
const UID: &str = "0a0b0c0d-resize";

fn pod(cpu_limit: &str, mem_limit: &str, policy: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "rz", "namespace": "default", "uid": UID,
                     "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "resizePolicy": policy,
                "resources": {"requests": {"cpu": "250m", "memory": "32Mi"},
                              "limits": {"cpu": cpu_limit, "memory": mem_limit}}}]}
    }))
    .unwrap()
}

async fn send(agent: &Agent, p: &Pod) {
    agent
        .source_tx
        .send(PodUpdate::new(PodOp::Set, PodSource::Api, vec![p.clone()]))
        .await
        .unwrap();
}

struct Harness {
    fake: FakeRuntime,
    cgroups: Arc<FakeCgroupFs>,
    dir: tempfile::TempDir,
}

impl Harness {
    fn new(version: CgroupVersion) -> Self {
        Self {
            fake: FakeRuntime::with_images(&[IMAGE]),
            cgroups: Arc::new(FakeCgroupFs::new(version)),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    async fn start(&self, cancel: CancellationToken) -> Agent {
        let mut cfg = AgentConfig::for_tests(self.dir.path(), NODE);
        cfg.cgroups.per_qos = true;
        cfg.cgroups.fs = Some(self.cgroups.clone());
        cfg.cgroups.cm.cgroup_root = "/rk".to_owned();
        let deps = fake_deps(&self.fake, &CollectingRecorder::default());
        Agent::start(cfg, deps, cancel).await.unwrap()
    }

    fn running_id(&self) -> Option<String> {
        self.fake
            .containers()
            .into_iter()
            .find(|c| c.state == rkubelet_cri::api::ContainerState::ContainerRunning as i32)
            .map(|c| c.id)
    }

    fn quota_of(&self, id: &str) -> Option<i64> {
        self.fake
            .container(id)?
            .resources?
            .linux
            .map(|l| l.cpu_quota)
    }

    fn pod_cgroup(&self) -> kubelet::cm::cgroups::ResourceConfig {
        self.cgroups
            .get(&format!("/rk/kubepods/burstable/pod{UID}"))
            .expect("pod cgroup")
    }
}

fn condition_types(agent: &Agent) -> Vec<(String, Option<String>)> {
    agent
        .status
        .get_pod_status(UID)
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_.starts_with("PodResize"))
        .map(|c| (c.type_, c.reason))
        .collect()
}

fn container_status(agent: &Agent) -> k8s_openapi::api::core::v1::ContainerStatus {
    agent
        .status
        .get_pod_status(UID)
        .and_then(|s| s.container_statuses)
        .and_then(|mut v| v.pop())
        .expect("container status")
}

#[tokio::test(start_paused = true)]
async fn not_required_resize_updates_in_place() {
    let h = Harness::new(CgroupVersion::V2);
    let agent = h.start(CancellationToken::new()).await;
    let policy = json!([{"resourceName": "cpu", "restartPolicy": "NotRequired"}]);
    send(&agent, &pod("500m", "64Mi", policy.clone())).await;
    wait_until("running", Duration::from_secs(30), || {
        h.running_id().is_some()
    })
    .await;
    let id = h.running_id().unwrap();
    assert_eq!(h.quota_of(&id), Some(50_000));
    assert_eq!(h.pod_cgroup().cpu_quota, Some(50_000));
    assert_eq!(h.fake.call_count("UpdateContainerResources"), 0);

    send(&agent, &pod("800m", "64Mi", policy.clone())).await;
    wait_until("the container resized", Duration::from_secs(30), || {
        h.quota_of(&id) == Some(80_000)
    })
    .await;
    assert_eq!(h.fake.call_count("UpdateContainerResources"), 1);
    assert_eq!(h.pod_cgroup().cpu_quota, Some(80_000));
    assert_eq!(
        h.running_id().as_deref(),
        Some(id.as_str()),
        "not restarted"
    );
    assert_eq!(h.fake.call_count("StopContainer"), 0);
    wait_until(
        "status reports the new resources",
        Duration::from_secs(30),
        || {
            container_status(&agent)
                .resources
                .and_then(|r| r.limits)
                .is_some_and(|l| l["cpu"].0 == "800m")
        },
    )
    .await;
    let cs = container_status(&agent);
    assert_eq!(cs.allocated_resources.unwrap()["cpu"].0, "250m");
    assert_eq!(cs.restart_count, 0);
    assert!(
        condition_types(&agent).is_empty(),
        "{:?}",
        condition_types(&agent)
    );

    // Bigger than the node can ever hold: pending Infeasible, nothing applied.
    let mut big = pod("5000", "64Mi", policy);
    big.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()
        .insert(
            "cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("4000".into()),
        );
    send(&agent, &big).await;
    wait_until("infeasible", Duration::from_secs(30), || {
        condition_types(&agent)
            == vec![("PodResizePending".to_owned(), Some("Infeasible".to_owned()))]
    })
    .await;
    let msg = agent
        .status
        .get_pod_status(UID)
        .and_then(|s| s.conditions)
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "PodResizePending")
        .and_then(|c| c.message)
        .unwrap();
    assert!(
        msg.starts_with("Node didn't have enough capacity: cpu, requested: 4000000, capacity: "),
        "{msg}"
    );
    assert_eq!(h.fake.call_count("UpdateContainerResources"), 1);
    assert_eq!(h.quota_of(&id), Some(80_000));
}

#[tokio::test(start_paused = true)]
async fn restart_container_policy_restarts_and_the_allocation_survives_a_restart() {
    let h = Harness::new(CgroupVersion::V1);
    let cancel = CancellationToken::new();
    let agent = h.start(cancel.clone()).await;
    let policy = json!([{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]);
    send(&agent, &pod("500m", "64Mi", policy.clone())).await;
    wait_until("running", Duration::from_secs(30), || {
        h.running_id().is_some()
    })
    .await;
    let id = h.running_id().unwrap();

    send(&agent, &pod("700m", "64Mi", policy.clone())).await;
    wait_until(
        "restarted with the new limit",
        Duration::from_secs(60),
        || {
            h.running_id()
                .is_some_and(|n| n != id && h.quota_of(&n) == Some(70_000))
        },
    )
    .await;
    assert_eq!(h.fake.call_count("UpdateContainerResources"), 0);
    assert_eq!(h.pod_cgroup().cpu_quota, Some(70_000));
    wait_until(
        "restart counted, resize done",
        Duration::from_secs(60),
        || {
            let cs = container_status(&agent);
            cs.restart_count == 1 && condition_types(&agent).is_empty()
        },
    )
    .await;

    // The checkpoint holds the allocation across a kubelet restart.
    agent.shutdown().await;
    drop(cancel);
    let cp = std::fs::read_to_string(h.dir.path().join("kubelet/allocated_pods_state"))
        .expect("allocation checkpoint in the root dir");
    assert!(cp.contains(UID) && cp.contains("700m"), "{cp}");
}
