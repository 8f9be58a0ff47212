//! Ephemeral containers end to end in API-server mode, against the fake API server and the
//! fake runtime: a `pods/ephemeralcontainers` patch on a running pod makes the kubelet start
//! the container in the pod's sandbox, in the target container's PID namespace, and report it
//! in `ephemeralContainerStatuses`; once it exits it is reported terminated and never started
//! again. Real time, short periods.

use crate::common;

use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubelet::agent::{Agent, AgentConfig};
use rkubelet_cri::api::{Container, NamespaceMode};
use rkubelet_cri::fake::FakeRuntime;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NODE: &str = "eph-node";
const IMAGE: &str = "docker.io/library/busybox:latest";

struct Env {
    server: FakeApiServer,
    client: kube::Client,
    fake: FakeRuntime,
    agent: Agent,
    _dir: tempfile::TempDir,
}

impl Env {
    async fn start() -> Self {
        let common::ApiFixture {
            dir,
            server,
            client,
        } = common::api_fixture(Options {
            bookmark_interval: Duration::from_secs(1),
            ..Options::default()
        })
        .await;
        let fake = FakeRuntime::with_images(&[IMAGE]);
        let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
        cfg.node_status.update_frequency = Duration::from_secs(1);
        cfg.api.status_sync_period = Duration::from_secs(1);
        let agent = Agent::start(
            cfg,
            common::agent::api_deps(&fake, &client),
            CancellationToken::new(),
        )
        .await
        .unwrap();
        Self {
            server,
            client,
            fake,
            agent,
            _dir: dir,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Polls `f` every 100 ms for up to `secs`.
    async fn wait<T>(&self, secs: u64, what: &str, mut f: impl FnMut(&Self) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; pod: {:?}; runtime calls: {:?}",
                self.server.get("pods", "default", "web"),
                self.fake.calls().iter().rev().take(20).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The runtime's containers named `name`.
    fn runtime_containers(&self, name: &str) -> Vec<Container> {
        self.fake
            .containers()
            .into_iter()
            .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
            .collect()
    }

    /// The pod's ephemeral container status `name` in the API.
    fn api_ephemeral_status(&self, name: &str) -> Option<Value> {
        let p = self.server.get("pods", "default", "web")?;
        p["status"]["ephemeralContainerStatuses"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
    }

    async fn add_ephemeral(&self, name: &str) {
        self.pods()
            .patch_subresource(
                "ephemeralcontainers",
                "web",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"ephemeralContainers": [{
                    "name": name, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                    "targetContainerName": "app", "command": ["sh"],
                }]}})),
            )
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_container_added_to_a_running_pod_starts_once_in_its_target_pid_namespace() {
    let env = Env::start().await;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "IfNotPresent"}],
        },
    }))
    .unwrap();
    env.pods()
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    env.wait(30, "app running in the API", |e| {
        let p = e.server.get("pods", "default", "web")?;
        p["status"]["containerStatuses"][0]["state"]["running"]
            .is_object()
            .then_some(())
    })
    .await;
    let app_id = env.runtime_containers("app")[0].id.clone();

    env.add_ephemeral("debugger").await;
    let debugger = env
        .wait(20, "the debugger container in the runtime", |e| {
            e.runtime_containers("debugger").pop()
        })
        .await;
    // Same sandbox as app; the target's PID namespace.
    assert_eq!(
        debugger.pod_sandbox_id,
        env.runtime_containers("app")[0].pod_sandbox_id
    );
    let ns = env
        .fake
        .container_config(&debugger.id)
        .and_then(|c| c.linux)
        .and_then(|l| l.security_context)
        .and_then(|sc| sc.namespace_options)
        .expect("namespace options");
    assert_eq!(ns.pid, NamespaceMode::Target as i32);
    assert_eq!(ns.target_id, app_id);

    let st = env
        .wait(20, "debugger running in ephemeralContainerStatuses", |e| {
            let s = e.api_ephemeral_status("debugger")?;
            s["state"]["running"].is_object().then_some(s)
        })
        .await;
    assert_eq!(st["restartCount"], 0);
    assert_eq!(st["ready"], false);
    assert_eq!(
        st["containerID"],
        json!(format!("containerd://{}", debugger.id))
    );
    let p = env.server.get("pods", "default", "web").unwrap();
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(
        p["status"]["containerStatuses"].as_array().unwrap().len(),
        1
    );

    // It exits: reported terminated, never restarted (the pod's policy is Always).
    assert!(env.fake.exit_container(&debugger.id, 2));
    let st = env
        .wait(20, "debugger terminated in the API", |e| {
            let s = e.api_ephemeral_status("debugger")?;
            s["state"]["terminated"].is_object().then_some(s)
        })
        .await;
    assert_eq!(st["state"]["terminated"]["exitCode"], 2);
    assert_eq!(st["restartCount"], 0);
    // A second one added later runs: the pod was synced after the first one exited, and the
    // first one was still not started again.
    env.add_ephemeral("second").await;
    env.wait(20, "second running in ephemeralContainerStatuses", |e| {
        let s = e.api_ephemeral_status("second")?;
        s["state"]["running"].is_object().then_some(())
    })
    .await;
    assert_eq!(env.runtime_containers("debugger").len(), 1);
    let st = env.api_ephemeral_status("debugger").unwrap();
    assert_eq!(st["state"]["terminated"]["exitCode"], 2);
    let p = env.server.get("pods", "default", "web").unwrap();
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
    env.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_container_waits_with_a_config_error_until_its_target_exists() {
    let env = Env::start().await;
    // `kubectl debug --target=app` while the pod is still initializing: the ephemeral
    // container is started before initialization completes, but `app` has no runtime record.
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "initContainers": [{"name": "setup", "image": IMAGE, "imagePullPolicy": "IfNotPresent"}],
            "containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "IfNotPresent"}],
        },
    }))
    .unwrap();
    env.pods()
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let setup = env
        .wait(30, "the init container running", |e| {
            e.runtime_containers("setup").pop()
        })
        .await;

    env.add_ephemeral("debugger").await;
    let st = env
        .wait(
            20,
            "debugger waiting with CreateContainerConfigError",
            |e| {
                let s = e.api_ephemeral_status("debugger")?;
                (s["state"]["waiting"]["reason"] == "CreateContainerConfigError").then_some(s)
            },
        )
        .await;
    assert_eq!(
        st["state"]["waiting"]["message"],
        "unable to find target container app"
    );
    assert!(env.runtime_containers("debugger").is_empty());
    let p = env.server.get("pods", "default", "web").unwrap();
    assert_eq!(p["status"]["phase"], "Pending");

    // Initialization completes, app starts, and the retried start joins app's namespace.
    assert!(env.fake.exit_container(&setup.id, 0));
    let debugger = env
        .wait(60, "the debugger container in the runtime", |e| {
            e.runtime_containers("debugger").pop()
        })
        .await;
    let app_id = env.runtime_containers("app")[0].id.clone();
    let ns = env
        .fake
        .container_config(&debugger.id)
        .and_then(|c| c.linux)
        .and_then(|l| l.security_context)
        .and_then(|sc| sc.namespace_options)
        .expect("namespace options");
    assert_eq!(
        (ns.pid, ns.target_id),
        (NamespaceMode::Target as i32, app_id)
    );
    env.wait(60, "debugger running in the API", |e| {
        let s = e.api_ephemeral_status("debugger")?;
        s["state"]["running"].is_object().then_some(())
    })
    .await;
    env.agent.shutdown().await;
}
