//! Pod-worker lifecycle fidelity through the whole agent (merger → sync loop → pod workers →
//! kuberuntime → PLEG) against the `FakeRuntime`, with paused time: a static pod update starts
//! the new pod only once the old one stopped, a pod re-added while terminating runs again, a
//! shorter grace period ends a kill in flight at the new deadline, and a pod whose runtime
//! status cannot be inspected is never synced with a guessed (empty) status.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use kubelet::pod_workers::{KillOptions, PodWork};
use rkubelet_cri::CriError;
use rkubelet_cri::api::ContainerState;
use rkubelet_cri::fake::{FakeRuntime, SIGKILL_EXIT};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, set, static_pod, uid, wait_until};

const NODE: &str = "node-a";

/// A static pod whose container `<name>-c` runs until stopped; `generation` changes the
/// manifest (and so the UID) without changing the pod's name.
fn pod(name: &str, grace: u32, generation: u32) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    generation: \"{generation}\"\nspec:\n  terminationGracePeriodSeconds: {grace}\n  containers:\n  - name: {name}-c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
    );
    static_pod(&yaml, name, NODE)
}

struct Harness {
    fake: FakeRuntime,
    events: CollectingRecorder,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Self {
        Self {
            fake: FakeRuntime::with_images(&[IMAGE]),
            events: CollectingRecorder::default(),
            _dir: tempfile::tempdir().unwrap(),
        }
    }

    async fn start_with(&self, tweak: impl FnOnce(&mut AgentConfig)) -> Agent {
        let mut cfg = AgentConfig::for_tests(self._dir.path(), NODE);
        tweak(&mut cfg);
        Agent::start(
            cfg,
            fake_deps(&self.fake, &self.events),
            CancellationToken::new(),
        )
        .await
        .unwrap()
    }

    /// Running containers of pod `uid`.
    fn running(&self, uid: &str) -> Vec<String> {
        self.fake
            .containers()
            .into_iter()
            .filter(|c| {
                c.state == ContainerState::ContainerRunning as i32
                    && c.labels.get("io.kubernetes.pod.uid").map(String::as_str) == Some(uid)
            })
            .map(|c| c.id)
            .collect()
    }

    /// Sandboxes of pod `uid` (any state).
    fn sandboxes(&self, uid: &str) -> usize {
        self.fake
            .sandboxes()
            .iter()
            .filter(|s| s.metadata.as_ref().is_some_and(|m| m.uid == uid))
            .count()
    }

    fn is_running(&self, id: &str) -> bool {
        self.fake
            .container(id)
            .is_some_and(|c| c.state == ContainerState::ContainerRunning as i32)
    }
}

fn restart_count(agent: &Agent, p: &Pod) -> Option<i32> {
    agent
        .status
        .get_pod_status(uid(p))
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.first().map(|c| c.restart_count))
}

#[tokio::test(start_paused = true)]
async fn static_pod_update_creates_the_new_sandbox_only_after_the_old_pod_stopped() {
    let h = Harness::new();
    // The old container ignores SIGTERM: stopping it takes the whole 30 s grace period.
    h.fake.on_stop("web-c", SIGKILL_EXIT);
    let (v1, v2) = (pod("web", 30, 1), pod("web", 30, 2));
    assert_ne!(uid(&v1), uid(&v2), "an edited manifest is a new pod");
    let agent = h.start_with(|_| {}).await;
    set(&agent, vec![v1.clone()]).await;
    wait_until("v1 running", Duration::from_secs(30), || {
        h.running(uid(&v1)).len() == 1
    })
    .await;
    let old = h.running(uid(&v1)).remove(0);

    let t0 = Instant::now();
    set(&agent, vec![v2.clone()]).await;
    let mut old_seen_running = false;
    wait_until("v2 sandbox", Duration::from_secs(120), || {
        let old_running = h.is_running(&old);
        old_seen_running |= old_running;
        if h.sandboxes(uid(&v2)) == 0 {
            return false;
        }
        assert!(
            !old_running,
            "v2's sandbox was created while v1's container still ran"
        );
        true
    })
    .await;
    assert!(
        old_seen_running,
        "the old container was still running at first"
    );
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_secs(30),
        "v2 started {waited:?} after the edit, inside v1's grace period"
    );
    assert_eq!(h.sandboxes(uid(&v1)), 0, "v1's sandbox was removed first");
    wait_until("v2 running", Duration::from_secs(30), || {
        h.running(uid(&v2)).len() == 1
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pod_added_back_while_terminating_runs_again_once_terminated() {
    let h = Harness::new();
    h.fake.on_stop("mv-c", SIGKILL_EXIT);
    let p = pod("mv", 10, 1);
    let agent = h.start_with(|_| {}).await;
    set(&agent, vec![p.clone()]).await;
    wait_until("running", Duration::from_secs(30), || {
        h.running(uid(&p)).len() == 1
    })
    .await;
    let old = h.running(uid(&p)).remove(0);

    // Moved out of the manifest dir, and back while the 10 s kill is still running.
    let t0 = Instant::now();
    set(&agent, vec![]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(h.is_running(&old), "the kill takes the grace period");
    set(&agent, vec![p.clone()]).await;
    wait_until("running again", Duration::from_secs(120), || {
        h.running(uid(&p)).iter().any(|id| *id != old)
    })
    .await;
    assert!(
        t0.elapsed() >= Duration::from_secs(10),
        "restarted only after termination"
    );
    assert!(!h.is_running(&old));
    wait_until("status running", Duration::from_secs(30), || {
        agent
            .status
            .get_pod_status(uid(&p))
            .is_some_and(|s| s.phase.as_deref() == Some("Running"))
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shorter_grace_period_ends_the_kill_in_flight_at_the_new_deadline() {
    let h = Harness::new();
    h.fake.on_stop("slow-c", SIGKILL_EXIT);
    let p = pod("slow", 30, 1);
    let agent = h.start_with(|_| {}).await;
    set(&agent, vec![p.clone()]).await;
    wait_until("running", Duration::from_secs(30), || {
        h.running(uid(&p)).len() == 1
    })
    .await;
    let id = h.running(uid(&p)).remove(0);

    let t0 = Instant::now();
    set(&agent, vec![]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(h.is_running(&id));
    // An eviction-style kill with a 3 s override arrives during the 30 s graceful kill.
    agent.workers.update_pod(PodWork::kill(
        p.clone(),
        KillOptions {
            grace_period_override: Some(3),
            removed: true,
        },
    ));
    wait_until("container stopped", Duration::from_secs(60), || {
        !h.is_running(&id)
    })
    .await;
    let stopped = t0.elapsed();
    assert!(
        stopped >= Duration::from_secs(8) && stopped < Duration::from_secs(11),
        "the kill must end 3 s after the shortening at t0+5 s, not at t0+30 s: {stopped:?}"
    );
    wait_until("runtime empty", Duration::from_secs(30), || {
        h.fake.containers().is_empty() && h.fake.sandboxes().is_empty()
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn inspection_error_is_reported_and_never_synced_as_an_empty_status() {
    let h = Harness::new();
    let p = pod("insp", 1, 1);
    let agent = h
        .start_with(|c| c.sync_frequency = Duration::from_secs(5))
        .await;
    set(&agent, vec![p.clone()]).await;
    wait_until("running", Duration::from_secs(30), || {
        h.running(uid(&p)).len() == 1 && restart_count(&agent, &p) == Some(0)
    })
    .await;
    let id = h.running(uid(&p)).remove(0);
    let before = agent.status.get_pod_status(uid(&p)).unwrap();
    assert_eq!(h.fake.call_count("RunPodSandbox"), 1);

    // The container exits while inspecting the pod fails for a while (one PodSandboxStatus
    // per relist): the PLEG caches the error instead of a status.
    for _ in 0..30 {
        h.fake.fail_next(
            "PodSandboxStatus",
            CriError::unknown("PodSandboxStatus", "inspection broke"),
        );
    }
    h.fake.exit_container(&id, 1);
    // Several resyncs while the error lasts: nothing is created, the status stays.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(h.fake.call_count("RunPodSandbox"), 1, "no second sandbox");
    assert_eq!(h.fake.call_count("CreateContainer"), 1);
    assert_eq!(
        agent
            .status
            .get_pod_status(uid(&p))
            .unwrap()
            .container_statuses,
        before.container_statuses,
        "status untouched while the runtime state is unknown"
    );
    // Upstream's FailedSync event, once per retry.
    let failed = h.events.with_reason("FailedSync");
    assert!(failed.len() >= 2, "retried with backoff: {failed:?}");
    assert!(
        failed[0].message.starts_with("error determining status: ")
            && failed[0].message.contains("inspection broke"),
        "{}",
        failed[0].message
    );

    // Inspection works again: the container restarts in its sandbox, counted once.
    wait_until("restarted", Duration::from_secs(120), || {
        restart_count(&agent, &p) == Some(1) && h.running(uid(&p)).len() == 1
    })
    .await;
    assert_eq!(h.fake.call_count("RunPodSandbox"), 1);
    assert_eq!(h.sandboxes(uid(&p)), 1);
    agent.shutdown().await;
}
