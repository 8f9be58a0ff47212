//! A stuck runtime through the whole agent against the `FakeRuntime`, with paused time (the
//! fake-runtime level of fault matrix row 4): a pod whose `StopContainer` never succeeds (it
//! times out at `runtimeRequestTimeout` on a stuck runtime) still terminates, because its
//! sandbox is stopped anyway, as upstream's `killPodWithSyncResult` does.

use std::time::Duration;

use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::CriError;
use rkubelet_cri::api::ContainerState;
use rkubelet_cri::fake::FakeRuntime;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, set, static_pod, uid, wait_until};

const NODE: &str = "node-a";

fn running(fake: &FakeRuntime, uid: &str) -> usize {
    fake.containers()
        .into_iter()
        .filter(|c| {
            c.state == ContainerState::ContainerRunning as i32
                && c.labels.get("io.kubernetes.pod.uid").map(String::as_str) == Some(uid)
        })
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_pod_whose_stop_container_times_out_still_terminates() {
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
    let p = static_pod(
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: stuck\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    command: [sleep, \"3600\"]\n"
        ),
        "stuck",
        NODE,
    );
    set(&agent, vec![p.clone()]).await;
    wait_until("running", Duration::from_secs(30), || {
        running(&fake, uid(&p)) == 1
    })
    .await;

    // Every StopContainer from now on ends at its deadline, as on a runtime that never answers.
    for _ in 0..50 {
        fake.fail_next(
            "StopContainer",
            CriError::DeadlineExceeded {
                method: "StopContainer",
                timeout: Some(Duration::from_secs(122)),
                message: String::new(),
            },
        );
    }
    set(&agent, vec![]).await;
    wait_until(
        "the pod's containers stopped and its sandbox gone",
        Duration::from_secs(120),
        || running(&fake, uid(&p)) == 0 && fake.sandboxes().is_empty(),
    )
    .await;
    assert!(
        fake.calls().iter().any(|c| c == "StopPodSandbox"),
        "the sandbox was stopped"
    );
    agent.shutdown().await;
}
