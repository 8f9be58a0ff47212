//! Pod lifecycle through the fake API server with the whole agent on the fake runtime (real
//! time, short periods): a pod deleted before its containers ever ran (missing ConfigMap
//! volume, image pull failure) gets upstream's final status and is removed from the API; after
//! a kubelet restart terminal pods do not count in admission and are never started again; and
//! a readiness-gate condition written by someone else moves `Ready` at once; a pod that sets
//! pod-level resources is rejected with upstream's reason and never started.

use crate::common;

use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubelet::agent::{Agent, AgentConfig};
use rkubelet_cri::fake::{Behaviour, FakeRuntime};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NODE: &str = "life-node";
const IMAGE: &str = "docker.io/library/busybox:latest";
const NS: &str = "default";

struct Env {
    server: FakeApiServer,
    client: kube::Client,
    fake: FakeRuntime,
    dir: tempfile::TempDir,
}

impl Env {
    async fn new() -> Self {
        let common::ApiFixture {
            dir,
            server,
            client,
        } = common::api_fixture(Options {
            bookmark_interval: Duration::from_secs(1),
            ..Options::default()
        })
        .await;
        Self {
            server,
            client,
            fake: FakeRuntime::with_images(&[IMAGE]),
            dir,
        }
    }

    /// Starts an agent on the shared runtime and data directory (a restart when one ran before).
    async fn agent(&self, max_pods: usize) -> Agent {
        let mut cfg = AgentConfig::for_tests(self.dir.path(), NODE);
        cfg.node_status.update_frequency = Duration::from_secs(1);
        cfg.api.status_sync_period = Duration::from_secs(1);
        cfg.api.mirror_period = Duration::from_secs(1);
        cfg.node_status.max_pods = i64::try_from(max_pods).unwrap();
        Agent::start(
            cfg,
            common::agent::api_deps(&self.fake, &self.client),
            CancellationToken::new(),
        )
        .await
        .unwrap()
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn api_pod(&self, name: &str) -> Option<Value> {
        self.server.get("pods", NS, name)
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
                "timed out waiting for {what}; runtime calls: {:?}",
                self.fake.calls().iter().rev().take(20).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn create(&self, pod: Value) -> String {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        let created = self
            .pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        created.metadata.uid.unwrap()
    }

    /// Every version of pod `name` the API server stored, oldest first.
    fn history(&self, name: &str) -> Vec<Value> {
        let info = fake_apiserver::resources::find("", "v1", "pods").unwrap();
        // The fixture keeps its whole history (resourceVersion 1 is the oldest it serves).
        let (events, _, _) = self.server.store().watch(info, Some(NS), Some(1)).unwrap();
        events
            .iter()
            .filter(|e| e.object["metadata"]["name"] == name)
            .map(|e| e.object.clone())
            .collect()
    }
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent"}],
        },
    })
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Deletes `name` gracefully once its waiting status is in the API, waits until the object is
/// gone and returns the last status it had.
async fn delete_and_await_removal(env: &Env, name: &str, waiting_reason: &str) -> Value {
    env.wait(30, &format!("{name} waiting with {waiting_reason}"), |e| {
        let p = e.api_pod(name)?;
        let reason = p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].as_str()?;
        (p["status"]["phase"] == "Pending" && reason == waiting_reason).then_some(())
    })
    .await;
    env.pods()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        env.api_pod(name).unwrap()["metadata"]["deletionTimestamp"].is_string(),
        "a graceful delete keeps the object"
    );
    env.wait(15, &format!("{name} removed from the API"), |e| {
        e.api_pod(name).is_none().then_some(())
    })
    .await;
    let history = env.history(name);
    let last = history.last().expect("the pod has a history");
    last["status"].clone()
}

fn assert_terminated_unknown(status: &Value) {
    assert_eq!(status["phase"], "Failed", "{status}");
    let c = &status["containerStatuses"][0];
    let t = &c["state"]["terminated"];
    assert_eq!(t["reason"], "ContainerStatusUnknown", "{status}");
    assert_eq!(t["exitCode"], 137, "{status}");
    assert_eq!(
        t["message"], "The container could not be located when the pod was terminated",
        "{status}"
    );
    assert!(c["state"]["waiting"].is_null(), "{status}");
    assert_eq!(
        condition(&json!({ "status": status }), "Ready").unwrap()["status"],
        "False"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_deleted_while_waiting_for_a_missing_config_map_is_removed() {
    let env = Env::new().await;
    let agent = env.agent(110).await;
    let mut p = pod("cm-wait");
    p["spec"]["volumes"] = json!([{"name": "cfg", "configMap": {"name": "missing"}}]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "cfg", "mountPath": "/cfg"}]);
    env.create(p).await;
    let status = delete_and_await_removal(&env, "cm-wait", "ContainerCreating").await;
    assert_terminated_unknown(&status);
    assert!(
        env.fake.containers().is_empty(),
        "no container ever ran: {:?}",
        env.fake.containers()
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_deleted_in_image_pull_back_off_is_removed() {
    let env = Env::new().await;
    let agent = env.agent(110).await;
    let image = "registry.example/private/app:1";
    env.fake
        .fail_pull(image, "pull access denied, repository does not exist");
    let mut p = pod("no-image");
    p["spec"]["containers"][0]["image"] = json!(image);
    env.create(p).await;
    let reason = env
        .wait(30, "an image pull failure in the API", |e| {
            let p = e.api_pod("no-image")?;
            let r = p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].as_str()?;
            matches!(r, "ErrImagePull" | "ImagePullBackOff").then(|| r.to_owned())
        })
        .await;
    let status = delete_and_await_removal(&env, "no-image", &reason).await;
    assert_terminated_unknown(&status);
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_phase_waits_until_the_worker_terminated_the_pod() {
    // A job whose container completes at once; stopping its sandbox takes 3 s. Its containers
    // all exited, but the API must not see `Succeeded` before the worker finished terminating
    // the pod (upstream `PodCouldHaveRunningContainers`).
    let env = Env::new().await;
    let agent = env.agent(110).await;
    env.fake.on_start("job", Behaviour::ExitImmediately(0));
    env.fake
        .set_latency("StopPodSandbox", Duration::from_secs(3));
    let mut p = pod("job");
    p["spec"]["restartPolicy"] = json!("Never");
    p["spec"]["containers"][0]["name"] = json!("job");
    let uid = env.create(p).await;
    let phase_of = |e: &Env| {
        e.api_pod("job")
            .and_then(|p| p["status"]["phase"].as_str().map(str::to_owned))
    };
    let mut terminating_for = Duration::ZERO;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let worker = agent.workers.phase(&uid);
        let api_phase = phase_of(&env);
        if matches!(
            worker,
            Some(kubelet::pod_workers::WorkerPhase::Terminating { .. })
        ) {
            assert_ne!(
                api_phase.as_deref(),
                Some("Succeeded"),
                "terminal phase published while the worker is still terminating the pod"
            );
            terminating_for += Duration::from_millis(20);
        }
        if api_phase.as_deref() == Some("Succeeded") {
            break;
        }
        assert!(Instant::now() < deadline, "job never Succeeded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        terminating_for >= Duration::from_secs(1),
        "the worker was seen terminating for {terminating_for:?}"
    );
    env.fake.set_latency("StopPodSandbox", Duration::ZERO);
    // A terminal pod being deleted is removed at once.
    env.pods()
        .delete("job", &DeleteParams::default())
        .await
        .unwrap();
    env.wait(10, "job removed from the API", |e| {
        e.api_pod("job").is_none().then_some(())
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_terminal_pods_neither_count_in_admission_nor_start() {
    let env = Env::new().await;
    let agent = env.agent(2).await;
    env.wait(20, "the Node", |e| e.server.get("nodes", "", NODE))
        .await;
    // A pod that ran to completion…
    env.fake.on_start("done", Behaviour::ExitImmediately(0));
    let mut done = pod("done");
    done["spec"]["restartPolicy"] = json!("Never");
    done["spec"]["containers"][0]["name"] = json!("done");
    let done_uid = env.create(done).await;
    env.wait(30, "done Succeeded", |e| {
        (e.api_pod("done")?["status"]["phase"] == "Succeeded").then_some(())
    })
    .await;
    // …then two running pods: the node is full (maxPods 2).
    let mut run_uids = Vec::new();
    for name in ["run-1", "run-2"] {
        run_uids.push(env.create(pod(name)).await);
    }
    env.wait(30, "run-1 and run-2 Running", |e| {
        ["run-1", "run-2"]
            .iter()
            .all(|n| {
                e.api_pod(n)
                    .is_some_and(|p| p["status"]["phase"] == "Running")
            })
            .then_some(())
    })
    .await;
    agent.shutdown().await;
    // While the kubelet is down, a pod bound to it is marked Failed by someone else: never
    // started.
    let failed_uid = env.create(pod("was-failed")).await;
    env.pods()
        .patch_status(
            "was-failed",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed", "reason": "Evicted"}})),
        )
        .await
        .unwrap();
    let sandboxes_before = env.fake.sandboxes().len();

    let agent = env.agent(2).await;
    // The restarted kubelet hands the terminal pods to workers that only terminate them, and
    // admits the running ones.
    let finished =
        |uid: &str| agent.workers.phase(uid) == Some(kubelet::pod_workers::WorkerPhase::Finished);
    env.wait(20, "the terminal pods' workers to finish", |_| {
        (finished(&done_uid) && finished(&failed_uid)).then_some(())
    })
    .await;
    env.wait(20, "the final status of was-failed in the API", |e| {
        let p = e.api_pod("was-failed")?;
        p["status"]["containerStatuses"][0]["state"]["terminated"]
            .is_object()
            .then_some(())
    })
    .await;
    for (name, uid) in ["run-1", "run-2"].iter().zip(&run_uids) {
        let ours = env
            .wait(20, &format!("{name}'s status after the restart"), |_| {
                agent.status.get_pod_status(uid)
            })
            .await;
        assert_eq!(ours.phase.as_deref(), Some("Running"), "{name}: {ours:?}");
        assert!(agent.workers.is_syncing(uid), "{name} runs");
        let p = env.api_pod(name).unwrap();
        assert_eq!(p["status"]["phase"], "Running", "{name}: {}", p["status"]);
    }
    assert_eq!(env.api_pod("done").unwrap()["status"]["phase"], "Succeeded");
    let failed = env.api_pod("was-failed").unwrap();
    assert_eq!(failed["status"]["phase"], "Failed");
    assert_eq!(failed["status"]["reason"], "Evicted");
    assert_eq!(
        env.fake.sandboxes().len(),
        sandboxes_before,
        "no pod was started again"
    );
    let rejected: Vec<Value> = env
        .server
        .list("events", Some(NS))
        .into_iter()
        .filter(|e| e["reason"] == "OutOfpods")
        .collect();
    assert!(rejected.is_empty(), "{rejected:?}");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_gate_change_moves_ready_at_once() {
    let env = Env::new().await;
    let agent = env.agent(110).await;
    let mut p = pod("gated");
    p["spec"]["readinessGates"] = json!([{"conditionType": "example.com/lb"}]);
    env.create(p).await;
    let st = env
        .wait(30, "gated Running and not Ready", |e| {
            let p = e.api_pod("gated")?;
            (p["status"]["phase"] == "Running"
                && condition(&p, "ContainersReady")?["status"] == "True")
                .then(|| p["status"].clone())
        })
        .await;
    let ready = condition(&json!({ "status": st }), "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["status"], "False", "{st}");
    assert_eq!(ready["reason"], "ReadinessGatesNotReady");

    // The load balancer controller marks its gate: Ready follows well within syncFrequency
    // (60 s here).
    for (value, expected) in [("True", "True"), ("False", "False")] {
        let asked = Instant::now();
        env.pods()
            .patch_status(
                "gated",
                &PatchParams::default(),
                &Patch::Strategic(json!({"status": {"conditions": [
                    {"type": "example.com/lb", "status": value}
                ]}})),
            )
            .await
            .unwrap();
        env.wait(10, &format!("Ready {expected}"), |e| {
            let p = e.api_pod("gated")?;
            (condition(&p, "Ready")?["status"] == expected).then_some(())
        })
        .await;
        let took = asked.elapsed();
        assert!(took < Duration::from_secs(5), "Ready took {took:?}");
        let p = env.api_pod("gated").unwrap();
        assert_eq!(
            condition(&p, "example.com/lb").unwrap()["status"],
            value,
            "the gate condition is kept"
        );
    }
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_with_pod_level_resources_is_rejected_and_never_started() {
    let env = Env::new().await;
    let agent = env.agent(110).await;
    let mut p = pod("pod-level");
    p["spec"]["resources"] = json!({"limits": {"cpu": "500m", "memory": "64Mi"}});
    env.create(p).await;
    let st = env
        .wait(30, "pod-level Failed", |e| {
            let p = e.api_pod("pod-level")?;
            (p["status"]["phase"] == "Failed").then(|| p["status"].clone())
        })
        .await;
    assert_eq!(st["reason"], "PodLevelResourcesNotSupported", "{st}");
    assert_eq!(
        st["message"], "Pod was rejected: PodLevelResources feature gate is disabled",
        "{st}"
    );
    assert!(
        env.fake.sandboxes().is_empty(),
        "a rejected pod gets no sandbox"
    );
    // A pod without pod-level resources still runs.
    env.create(pod("plain")).await;
    env.wait(30, "plain Running", |e| {
        (e.api_pod("plain")?["status"]["phase"] == "Running").then_some(())
    })
    .await;
    agent.shutdown().await;
}
