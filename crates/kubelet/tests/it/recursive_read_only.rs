//! Recursive read-only mounts on the `FakeRuntime` (paused time): `recursiveReadOnly: Enabled`
//! on a runtime whose CRI `Status` lists no handler with the feature (containerd 1.6) fails the
//! container with `CreateContainerConfigError` and upstream's message, `IfPossible` falls back
//! to a plain read-only mount, and a runtime that reports the feature gets
//! `Mount.recursive_read_only`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::api::Mount;
use rkubelet_cri::fake::FakeRuntime;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, set, static_pod, uid, wait_until};

const NODE: &str = "node-rro";

fn pod(name: &str, mode: &str) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: data\n    emptyDir: {{}}\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    volumeMounts:\n    - name: data\n      mountPath: /data\n      readOnly: true\n      recursiveReadOnly: {mode}\n"
    );
    static_pod(&yaml, name, NODE)
}

/// The `/data` mount of the container the fake created for pod `name`, if any.
fn data_mount(fake: &FakeRuntime, pod: &Pod) -> Option<Mount> {
    fake.containers().into_iter().find_map(|c| {
        let cfg = fake.container_config(&c.id)?;
        let ours = c
            .labels
            .get("io.kubernetes.pod.uid")
            .is_some_and(|u| u == uid(pod));
        ours.then(|| cfg.mounts.into_iter().find(|m| m.container_path == "/data"))?
    })
}

async fn agent(dir: &std::path::Path, fake: &FakeRuntime) -> Agent {
    Agent::start(
        AgentConfig::for_tests(dir, NODE),
        fake_deps(fake, &CollectingRecorder::default()),
        CancellationToken::new(),
    )
    .await
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn enabled_is_refused_without_runtime_support_and_if_possible_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let agent = agent(dir.path(), &fake).await;
    let enabled = pod("rro-enabled", "Enabled");
    let if_possible = pod("rro-if-possible", "IfPossible");
    set(&agent, vec![enabled.clone(), if_possible.clone()]).await;

    wait_until("the IfPossible container", Duration::from_secs(60), || {
        data_mount(&fake, &if_possible).is_some()
    })
    .await;
    let m = data_mount(&fake, &if_possible).unwrap();
    assert!(m.readonly && !m.recursive_read_only, "{m:?}");

    let waiting = || {
        let st = agent.status.get_pod_status(uid(&enabled))?;
        st.container_statuses?[0].state.clone()?.waiting
    };
    wait_until(
        "CreateContainerConfigError",
        Duration::from_secs(60),
        || waiting().is_some_and(|w| w.reason.as_deref() == Some("CreateContainerConfigError")),
    )
    .await;
    assert_eq!(
        waiting().unwrap().message.as_deref(),
        Some(
            "failed to resolve recursive read-only mode: volume \"data\" requested recursive read-only mode, but it is not supported by the runtime"
        )
    );
    assert!(data_mount(&fake, &enabled).is_none(), "never created");
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_runtime_with_the_feature_gets_recursive_read_only_mounts() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    fake.set_status_handlers(&[("", true), ("runc", true)]);
    let agent = agent(dir.path(), &fake).await;
    let enabled = pod("rro-enabled", "Enabled");
    let if_possible = pod("rro-if-possible", "IfPossible");
    set(&agent, vec![enabled.clone(), if_possible.clone()]).await;
    wait_until("both containers", Duration::from_secs(60), || {
        data_mount(&fake, &enabled).is_some() && data_mount(&fake, &if_possible).is_some()
    })
    .await;
    for p in [&enabled, &if_possible] {
        let m = data_mount(&fake, p).unwrap();
        assert!(m.readonly && m.recursive_read_only, "{m:?}");
    }
    agent.shutdown().await;
}
