//! Long-running safety of a whole agent on the `FakeRuntime` (paused time): a panic in a pod
//! or probe worker is caught, the worker restarts and the pod converges, counted in
//! `rkubelet_task_panics_total{task}`; a panic in a singleton (PLEG, sync loop) is fatal and
//! named, and `/healthz`'s `tasks` check reports it; an idle agent (standalone or API mode)
//! has no dead task.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::fake::FakeRuntime;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, set, static_pod, uid, wait_until};

const NODE: &str = "node-s";

fn pod(name: &str) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    readinessProbe:\n      exec: {{command: [\"true\"]}}\n      periodSeconds: 1\n"
    );
    static_pod(&yaml, name, NODE)
}

fn running_and_ready(agent: &Agent, p: &Pod) -> bool {
    agent.status.get_pod_status(uid(p)).is_some_and(|s| {
        s.phase.as_deref() == Some("Running")
            && s.conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

fn health(agent: &Agent, name: &str) -> Result<(), String> {
    let (_, check) = agent.health.iter().find(|(n, _)| n == name).unwrap();
    check()
}

#[tokio::test(start_paused = true)]
async fn panicking_pod_and_probe_workers_restart_and_the_pod_converges() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    // The first container creation panics inside the pod worker's sync, the first probe
    // inside the probe worker.
    fake.panic_next("CreateContainer", 1);
    fake.panic_next("ExecSync", 1);
    let events = CollectingRecorder::default();
    let agent = Agent::start(
        AgentConfig::for_tests(dir.path(), NODE),
        fake_deps(&fake, &events),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let p = pod("web");
    set(&agent, vec![p.clone()]).await;

    wait_until("pod running and ready", Duration::from_secs(60), || {
        running_and_ready(&agent, &p)
    })
    .await;
    let m = &agent.metrics;
    assert_eq!(
        m.value("rkubelet_task_panics_total", &["pod_worker"]),
        Some(1.0)
    );
    assert_eq!(
        m.value("rkubelet_task_panics_total", &["probe_worker"]),
        Some(1.0)
    );
    assert!(
        m.render()
            .contains("rkubelet_task_panics_total{task=\"pod_worker\"} 1\n")
    );
    // The panicked creation was retried: one container, created by the second call.
    assert_eq!(fake.call_count("CreateContainer"), 2);
    assert_eq!(fake.containers().len(), 1);
    // Per-pod panics are not fatal and leave the singletons healthy.
    assert_eq!(agent.task_health(), Ok(()));
    assert_eq!(health(&agent, "tasks"), Ok(()));
    assert!(
        tokio::time::timeout(Duration::from_secs(1), agent.fatal())
            .await
            .is_err()
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_singleton_is_fatal_named_and_fails_healthz() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let events = CollectingRecorder::default();
    let agent = Agent::start(
        AgentConfig::for_tests(dir.path(), NODE),
        fake_deps(&fake, &events),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(health(&agent, "tasks"), Ok(()));
    // With no pods, only the PLEG's relist and the sync loop's housekeeping list sandboxes.
    fake.panic_next("ListPodSandbox", 1);
    let fatal = tokio::time::timeout(Duration::from_secs(30), agent.fatal())
        .await
        .expect("a singleton panic is reported");
    assert!(
        ["pleg", "sync loop"].contains(&fatal.task.as_str()),
        "{fatal:?}"
    );
    assert_eq!(
        fatal.message,
        "FakeRuntime: scripted panic in ListPodSandbox"
    );
    assert_eq!(
        fatal.to_string(),
        format!(
            "task {} panicked: FakeRuntime: scripted panic in ListPodSandbox",
            fatal.task
        )
    );
    let err = health(&agent, "tasks").unwrap_err();
    assert!(
        err.contains(&format!("task {} panicked", fatal.task)),
        "{err}"
    );
    // The rest still shuts down.
    tokio::time::timeout(Duration::from_secs(30), agent.shutdown())
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_idle_agent_has_no_dead_task() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let events = CollectingRecorder::default();
    let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
    cfg.static_pod_path = Some(manifests);
    let agent = Agent::start(cfg, fake_deps(&fake, &events), CancellationToken::new())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(agent.task_health(), Ok(()));
    agent.shutdown().await;
}

/// In API-server mode every singleton (node status, lease, API source, mirror pods, status
/// syncer, event sink, API objects, container GC) keeps running: none stops early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_mode_agent_has_no_dead_task() {
    let api = common::api_fixture(fake_apiserver::Options::default()).await;
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let mut cfg = AgentConfig::for_tests(api.dir.path(), NODE);
    cfg.node_status.update_frequency = Duration::from_secs(1);
    cfg.api.node_lease_duration_secs = 4;
    cfg.api.status_sync_period = Duration::from_secs(1);
    cfg.api.mirror_period = Duration::from_secs(1);
    cfg.gc.container_gc = Some(kubelet::kuberuntime::gc::ContainerGcPolicy::default());
    let agent = Agent::start(
        cfg,
        kubelet::agent::AgentDeps {
            api: Some(api.client.clone()),
            ..fake_deps(&fake, &CollectingRecorder::default())
        },
        CancellationToken::new(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(agent.task_health(), Ok(()));
    assert_eq!(health(&agent, "tasks"), Ok(()));
    tokio::time::timeout(Duration::from_secs(30), agent.shutdown())
        .await
        .unwrap();
}
