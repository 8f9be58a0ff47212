//! CVE-2019-11245 on the `FakeRuntime` (paused time): the security context is computed on
//! every container start, restarts included — a restarted container still runs as the pod's
//! `runAsUser`, and `runAsNonRoot` is verified against the image's user on every attempt
//! (the fake's images have no user, so they run as root).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::fake::{Behaviour, FakeRuntime};
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, set, static_pod, uid, wait_until};

const NODE: &str = "node-sc";

fn pod(name: &str, container: &str, security: &str) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  securityContext:\n{security}  containers:\n  - name: {container}\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n"
    );
    static_pod(&yaml, name, NODE)
}

/// `(attempt, run_as_user, run_as_username)` of every container the fake created named `name`.
fn created_users(fake: &FakeRuntime, name: &str) -> Vec<(u32, Option<i64>, String)> {
    let mut out: Vec<_> = fake
        .containers()
        .into_iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
        .map(|c| {
            let cfg = fake.container_config(&c.id).unwrap();
            let sc = cfg.linux.unwrap().security_context.unwrap();
            (
                cfg.metadata.unwrap().attempt,
                sc.run_as_user.map(|u| u.value),
                sc.run_as_username,
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(start_paused = true)]
async fn restarted_containers_keep_run_as_user_and_run_as_non_root_is_checked_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    // Exits after a second: restarted (with back-off) as long as the test runs.
    fake.on_start("crashing", Behaviour::ExitAfter(Duration::from_secs(1), 1));
    let events = CollectingRecorder::default();
    let agent = Agent::start(
        AgentConfig::for_tests(dir.path(), NODE),
        fake_deps(&fake, &events),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let with_user = pod(
        "with-user",
        "crashing",
        "    runAsUser: 1000\n    runAsNonRoot: true\n",
    );
    let root_image = pod("root-image", "refused", "    runAsNonRoot: true\n");
    set(&agent, vec![with_user.clone(), root_image.clone()]).await;

    // Three instances: the first start and two restarts.
    wait_until("two restarts", Duration::from_secs(180), || {
        created_users(&fake, "crashing").len() >= 3
    })
    .await;
    let users = created_users(&fake, "crashing");
    for (i, (attempt, user, username)) in users.iter().enumerate() {
        assert_eq!(
            *attempt,
            u32::try_from(i).unwrap(),
            "attempts in order: {users:?}"
        );
        assert_eq!(
            (*user, username.as_str()),
            (Some(1000), ""),
            "attempt {attempt} must run as the pod's runAsUser: {users:?}"
        );
    }

    // The root image under runAsNonRoot is refused on every attempt, never created.
    let refusals = || {
        events
            .events()
            .into_iter()
            .filter(|e| {
                e.pod_uid == uid(&root_image)
                    && e.reason == "Failed"
                    && e.message.contains(
                        "container has runAsNonRoot and image will run as root (pod: \"root-image-node-sc_default(",
                    )
            })
            .count()
    };
    wait_until("three refused attempts", Duration::from_secs(180), || {
        refusals() >= 3
    })
    .await;
    assert_eq!(created_users(&fake, "refused"), Vec::new());
    let status = agent.status.get_pod_status(uid(&root_image)).unwrap();
    let waiting = status.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert_eq!(
        waiting.reason.as_deref(),
        Some("CreateContainerConfigError")
    );
    assert!(
        waiting
            .message
            .unwrap()
            .contains("container has runAsNonRoot and image will run as root")
    );
    agent.shutdown().await;
}
