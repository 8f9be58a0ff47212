//! The start path's CRI calls per pod start, against the `FakeRuntime` with paused time: the
//! image is looked up once per container (the pull-policy check's record also gives the
//! image's user), and the Pulled/Created/Started events keep upstream's order.

use std::time::Duration;

use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::fake::FakeRuntime;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, phase, set, static_pod, wait_until};

const NODE: &str = "node-a";

fn two_container_pod(policy_b: &str) -> k8s_openapi::api::core::v1::Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: a\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n  - name: b\n    image: {IMAGE}\n    imagePullPolicy: {policy_b}\n    command: [sleep, \"3600\"]\n"
    );
    static_pod(&yaml, "web", NODE)
}

async fn start(fake: &FakeRuntime, events: &CollectingRecorder, root: &std::path::Path) -> Agent {
    let cfg = AgentConfig::for_tests(root, NODE);
    Agent::start(cfg, fake_deps(fake, events), CancellationToken::new())
        .await
        .unwrap()
}

/// An agent on a fake runtime that holds the image, running [`two_container_pod`] with both
/// containers `IfNotPresent`.
async fn running_two_container_pod() -> (tempfile::TempDir, FakeRuntime, CollectingRecorder, Agent)
{
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let events = CollectingRecorder::default();
    let agent = start(&fake, &events, dir.path()).await;
    let p = two_container_pod("IfNotPresent");
    set(&agent, vec![p.clone()]).await;
    wait_until("Running", Duration::from_secs(30), || {
        phase(&agent, &p).as_deref() == Some("Running")
    })
    .await;
    (dir, fake, events, agent)
}

/// A new pod has nothing in the runtime to stop: its first sync creates the sandbox without a
/// "killing pod" line (an operator reading the log would think a pod was killed) and without a
/// stop call. Once the pod has a sandbox, a sandbox change still kills it and says so.
#[tokio::test(start_paused = true)]
async fn a_new_pod_is_created_without_a_kill() {
    let capture = common::LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let (_dir, fake, _events, agent) = running_two_container_pod().await;
    let log = capture.text();
    assert!(log.contains("syncing new pod"), "{log}");
    assert!(!log.contains("killing pod"), "{log}");
    assert_eq!(fake.call_count("StopPodSandbox"), 0);
    assert_eq!(fake.call_count("StopContainer"), 0);

    // The sandbox dies: the pod is killed and re-created, and the log says why.
    let sandbox = fake.sandboxes().into_iter().next().expect("a sandbox").id;
    assert!(fake.kill_sandbox(&sandbox));
    wait_until(
        "killed for the sandbox change",
        Duration::from_secs(60),
        || capture.text().contains("pod sandbox changed"),
    )
    .await;
    agent.shutdown().await;
}

/// Image lookups of the start path: one per container for a present image (upstream asks
/// twice: `GetImageRef` for the pull policy, `getImageUser` for the config).
#[tokio::test(start_paused = true)]
async fn a_present_image_is_looked_up_once_per_container() {
    let (_dir, fake, events, agent) = running_two_container_pod().await;
    assert_eq!(fake.call_count("StartContainer"), 2);
    assert_eq!(fake.call_count("PullImage"), 0);
    assert_eq!(
        fake.call_count("ImageStatus"),
        2,
        "one ImageStatus per container: {:?}",
        fake.calls()
    );
    let reasons: Vec<String> = events
        .events()
        .into_iter()
        .map(|e| e.reason)
        .filter(|r| ["Pulled", "Created", "Started"].contains(&r.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            "Pulled", "Created", "Started", "Pulled", "Created", "Started"
        ]
    );
    agent.shutdown().await;
}

/// A pulled image: the pull's size lookup already returned the record, so the config does
/// not ask again. b: PullImage, then the metrics decorator's size lookup
/// (`kubelet_image_pull_duration_seconds`) and the image manager's (the Pulled event's size).
#[tokio::test(start_paused = true)]
async fn a_pulled_image_is_not_looked_up_again_for_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let events = CollectingRecorder::default();
    let agent = start(&fake, &events, dir.path()).await;
    let p = two_container_pod("Always");
    set(&agent, vec![p.clone()]).await;
    wait_until("Running", Duration::from_secs(30), || {
        phase(&agent, &p).as_deref() == Some("Running")
    })
    .await;
    assert_eq!(fake.call_count("PullImage"), 1);
    // a: the pull-policy check; b: the two size lookups after its pull, none for its config.
    assert_eq!(
        fake.call_count("ImageStatus"),
        3,
        "calls: {:?}",
        fake.calls()
    );
    agent.shutdown().await;
}

/// A started pod's Running status comes from the PLEG refresh its own sync asked for, not from
/// the next periodic relist (a minute away here): the syncer leaves the refresh to the end of
/// the worker's round (`PodSyncer::round_finished`), and it must not be lost on the way. Real
/// time on a multi-thread runtime, as in the kubelet. (Why at the end of the round: a refresh
/// that began before the round ended is older than the round, and the worker, which wants data
/// newer than its last round, would wait for the relist. That race needs the worker's thread to
/// be preempted at the wrong moment, so no test here can force it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_pod_is_running_without_waiting_for_a_relist() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let events = CollectingRecorder::default();
    let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
    cfg.relist_period = Duration::from_secs(60);
    let agent = Agent::start(cfg, fake_deps(&fake, &events), CancellationToken::new())
        .await
        .unwrap();
    let pods: Vec<_> = (0..20)
        .map(|i| {
            let yaml = format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i}\nspec:\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n"
            );
            static_pod(&yaml, &format!("p{i}"), NODE)
        })
        .collect();
    set(&agent, pods.clone()).await;
    wait_until("every pod Running", Duration::from_secs(10), || {
        pods.iter()
            .all(|p| phase(&agent, p).as_deref() == Some("Running"))
    })
    .await;
    assert_eq!(fake.call_count("StartContainer"), 20);
    agent.shutdown().await;
}
