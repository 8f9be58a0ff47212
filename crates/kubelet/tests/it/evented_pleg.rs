//! The `EventedPLEG` gate through the whole agent against the `FakeRuntime` (paused time):
//! static pods started with the runtime's container events never get a duplicate container
//! (kubernetes#121003 / #123087), a container that dies is restarted once, and a runtime
//! without events (containerd 1.6) still runs pods on the fallback relist.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::api::ContainerState;
use rkubelet_cri::fake::FakeRuntime;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, phase, set, static_pod, uid, wait_until};

const NODE: &str = "node-a";

fn pod(name: &str) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: kube-system\nspec:\n  containers:\n  - name: {name}-c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
    );
    static_pod(&yaml, name, NODE)
}

async fn start(fake: &FakeRuntime, dir: &std::path::Path) -> Agent {
    let mut cfg = AgentConfig::for_tests(dir, NODE);
    cfg.evented_pleg = true;
    Agent::start(
        cfg,
        fake_deps(fake, &CollectingRecorder::default()),
        CancellationToken::new(),
    )
    .await
    .unwrap()
}

/// Containers of pod `uid` by (name, attempt): more than one under a key is a duplicate.
fn containers_by_attempt(fake: &FakeRuntime, uid: &str) -> BTreeMap<(String, u32), usize> {
    let mut out = BTreeMap::new();
    for c in fake.containers() {
        if c.labels.get("io.kubernetes.pod.uid").map(String::as_str) != Some(uid) {
            continue;
        }
        let meta = c.metadata.unwrap_or_default();
        *out.entry((meta.name, meta.attempt)).or_default() += 1;
    }
    out
}

fn running(fake: &FakeRuntime, uid: &str) -> Vec<String> {
    fake.containers()
        .into_iter()
        .filter(|c| {
            c.state == ContainerState::ContainerRunning as i32
                && c.labels.get("io.kubernetes.pod.uid").map(String::as_str) == Some(uid)
        })
        .map(|c| c.id)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn static_pods_on_container_events_never_get_a_duplicate_container() {
    let fake = FakeRuntime::with_images(&[IMAGE]);
    fake.serve_container_events();
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&fake, dir.path()).await;
    let pods: Vec<Pod> = ["etcd", "apiserver", "scheduler"]
        .into_iter()
        .map(pod)
        .collect();
    // The file source re-sends the same pods in quick succession (upstream's trigger: several
    // SyncLoop ADD/UPDATE/RECONCILE rounds while the containers are being created).
    for _ in 0..10 {
        set(&agent, pods.clone()).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_until("all static pods running", Duration::from_secs(60), || {
        pods.iter()
            .all(|p| phase(&agent, p).as_deref() == Some("Running"))
    })
    .await;
    assert_eq!(fake.open_event_streams(), 1, "the agent consumes events");

    // One dies: it is restarted once (attempt 1), never twice.
    let victim = running(&fake, uid(&pods[0])).remove(0);
    assert!(fake.exit_container(&victim, 1));
    wait_until("restart", Duration::from_secs(60), || {
        running(&fake, uid(&pods[0])).len() == 1
    })
    .await;

    // Time for any duplicate to appear: periodic syncs, fallback relists, more re-sends.
    for _ in 0..5 {
        set(&agent, pods.clone()).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(600)).await;
    for p in &pods {
        let by_attempt = containers_by_attempt(&fake, uid(p));
        assert!(
            by_attempt.values().all(|n| *n == 1),
            "{}: {by_attempt:?}",
            p.metadata.name.as_deref().unwrap_or_default()
        );
        assert_eq!(running(&fake, uid(p)).len(), 1, "one running container");
    }
    assert_eq!(containers_by_attempt(&fake, uid(&pods[0])).len(), 2);
    assert_eq!(containers_by_attempt(&fake, uid(&pods[1])).len(), 1);
    assert_eq!(
        fake.call_count("CreateContainer"),
        4,
        "three pods, one restart"
    );
    assert_eq!(fake.call_count("GetContainerEvents"), 1);
}

#[tokio::test(start_paused = true)]
async fn without_runtime_events_the_gate_falls_back_and_pods_run() {
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&fake, dir.path()).await;
    let p = pod("web");
    set(&agent, vec![p.clone()]).await;
    wait_until("pod running", Duration::from_secs(60), || {
        phase(&agent, &p).as_deref() == Some("Running")
    })
    .await;
    let victim = running(&fake, uid(&p)).remove(0);
    assert!(fake.exit_container(&victim, 1));
    wait_until(
        "restart seen by the relist",
        Duration::from_secs(60),
        || running(&fake, uid(&p)).len() == 1,
    )
    .await;
    assert_eq!(fake.call_count("GetContainerEvents"), 1, "asked once");
}
