//! The GC tasks wired into a whole agent against the `FakeRuntime`, with paused time: the
//! periodic container GC keeps one dead instance of a crash-looping container without
//! disturbing its status; the handles the eviction manager uses (`delete_all_unused_containers`,
//! `delete_unused_images`) work; removed pods leave no dead content; `for_tests` runs no GC.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig, GcSettings};
use kubelet::events::CollectingRecorder;
use kubelet::images::gc::{ImageGcConfig, ImageGcPolicy};
use kubelet::kuberuntime::gc::ContainerGcPolicy;
use rkubelet_cri::api::ContainerState;
use rkubelet_cri::fake::{Behaviour, FakeRuntime};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, set, static_pod};

const NODE: &str = "node-gc";

fn pod(name: &str) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: Always\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, \"exit 1\"]\n"
    );
    static_pod(&yaml, name, NODE)
}

async fn start(fake: &FakeRuntime, root: &Path, gc: GcSettings) -> Agent {
    let mut cfg = AgentConfig::for_tests(root, NODE);
    cfg.static_pod_path = None;
    cfg.gc = gc;
    Agent::start(
        cfg,
        fake_deps(fake, &CollectingRecorder::default()),
        CancellationToken::new(),
    )
    .await
    .unwrap()
}

fn dead_attempts(fake: &FakeRuntime) -> Vec<u32> {
    let mut v: Vec<u32> = fake
        .containers()
        .into_iter()
        .filter(|c| c.state != ContainerState::ContainerRunning as i32)
        .map(|c| c.metadata.unwrap().attempt)
        .collect();
    v.sort();
    v
}

fn gc_settings() -> GcSettings {
    GcSettings {
        container_gc: Some(ContainerGcPolicy::default()),
        image_gc: Some(ImageGcConfig {
            policy: ImageGcPolicy {
                min_age: Duration::from_secs(1),
                ..ImageGcPolicy::default()
            },
            pinned_images: Vec::new(),
        }),
        ..GcSettings::default()
    }
}

#[tokio::test(start_paused = true)]
async fn periodic_container_gc_keeps_the_newest_dead_instance() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE, "docker.io/library/unused:1"]);
    fake.on_start("c", Behaviour::ExitImmediately(1));
    let agent = start(&fake, dir.path(), gc_settings()).await;
    let p = pod("crash");
    let uid = p.metadata.uid.clone().unwrap();
    set(&agent, vec![p]).await;

    // Restarts at ~0, ~10, ~30 s; the GC runs at 0 and 60 s.
    let begin = Instant::now();
    let mut most = 0;
    while begin.elapsed() < Duration::from_secs(59) {
        most = most.max(dead_attempts(&fake).len());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(most >= 3, "dead instances before the GC ran: {most}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let dead = dead_attempts(&fake);
    assert_eq!(dead.len(), 1, "one dead instance kept: {dead:?}");
    assert!(dead[0] >= 2, "the newest one: {dead:?}");
    let status = agent.status.get_pod_status(&uid).unwrap();
    let cs = &status.container_statuses.unwrap()[0];
    assert!(cs.restart_count >= 2, "{cs:?}");
    assert!(
        cs.last_state.as_ref().unwrap().terminated.is_some(),
        "{cs:?}"
    );

    // The eviction manager's entry points.
    let container_gc = agent.container_gc.clone().expect("container GC enabled");
    let image_gc = agent.image_gc.clone().expect("image GC enabled");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let freed = image_gc.delete_unused_images().await.unwrap();
    assert!(freed > 0);
    assert!(!fake.has_image("docker.io/library/unused:1"));
    assert!(fake.has_image(IMAGE), "in use by the pod's containers");

    // Once the pod is gone, nothing of it is left (pod sync and GC together).
    set(&agent, vec![]).await;
    let begin = Instant::now();
    while !fake.containers().is_empty() && begin.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    container_gc.delete_all_unused_containers().await.unwrap();
    assert!(fake.containers().is_empty());
    assert!(fake.sandboxes().is_empty(), "{:?}", fake.sandboxes());
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn for_tests_config_runs_no_gc() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    fake.on_start("c", Behaviour::ExitImmediately(1));
    let agent = start(&fake, dir.path(), GcSettings::default()).await;
    assert!(agent.container_gc.is_none() && agent.image_gc.is_none());
    set(&agent, vec![pod("crash")]).await;
    tokio::time::sleep(Duration::from_secs(125)).await;
    assert!(
        dead_attempts(&fake).len() >= 4,
        "{:?}",
        dead_attempts(&fake)
    );
    assert_eq!(fake.call_count("RemoveContainer"), 0);
    assert_eq!(fake.call_count("ListImages"), 0);
    agent.shutdown().await;
}
