//! RuntimeClass and pod overhead through the whole sync machinery on the `FakeRuntime`.
//! Standalone (paused time): a named class never falls back to the default handler, and
//! `spec.overhead` counts in admission (OutOfcpu) and in the pod cgroup. API-server mode
//! (fake API server, real time): the class's handler reaches `RunPodSandbox`, a missing class
//! keeps the pod Pending with upstream's `FailedCreatePodSandBox` event until the class is
//! created (picked up by the watch, no restart), and a handler the runtime lacks fails the
//! same way with the runtime's message.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, PostParams};
use kubelet::agent::{Agent, AgentConfig};
use kubelet::cm::cgroups::CgroupVersion;
use kubelet::cm::cgroups::fake::FakeCgroupFs;
use kubelet::events::CollectingRecorder;
use rkubelet_cri::fake::FakeRuntime;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use common::agent::{IMAGE, fake_deps, set, static_pod, uid, wait_until};

const NODE: &str = "node-rc";

fn static_rc_pod(name: &str, extra_spec: &str) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n{extra_spec}  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n"
    );
    static_pod(&yaml, name, NODE)
}

fn status(agent: &Agent, p: &Pod) -> Option<PodStatus> {
    agent.status.get_pod_status(uid(p))
}

fn waiting_reason(st: &PodStatus) -> Option<&str> {
    st.container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .as_deref()
}

fn running(agent: &Agent, p: &Pod) -> bool {
    status(agent, p).is_some_and(|s| {
        s.phase.as_deref() == Some("Running")
            && s.container_statuses
                .as_ref()
                .and_then(|c| c.first())
                .and_then(|c| c.state.as_ref())
                .is_some_and(|st| st.running.is_some())
    })
}

#[tokio::test(start_paused = true)]
async fn standalone_a_named_runtime_class_never_falls_back_to_the_default_handler() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    fake.set_runtime_handlers(&["runc", "kata"]);
    let events = CollectingRecorder::default();
    let agent = Agent::start(
        AgentConfig::for_tests(dir.path(), NODE),
        fake_deps(&fake, &events),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let sandboxed = static_rc_pod("sandboxed", "  runtimeClassName: kata\n");
    let plain = static_rc_pod("plain", "");
    set(&agent, vec![sandboxed.clone(), plain.clone()]).await;

    wait_until("pod plain Running", Duration::from_secs(30), || {
        running(&agent, &plain)
    })
    .await;
    wait_until(
        "FailedCreatePodSandBox for pod sandboxed",
        Duration::from_secs(30),
        || {
            events
                .with_reason("FailedCreatePodSandBox")
                .iter()
                .any(|e| e.pod_uid == uid(&sandboxed))
        },
    )
    .await;
    let e = events.with_reason("FailedCreatePodSandBox").remove(0);
    assert!(
        e.message.starts_with(
            "Failed to create pod sandbox: spec.runtimeClassName: RuntimeClass \"kata\" cannot be looked up without an API server"
        ),
        "{}",
        e.message
    );
    // Retried on later syncs, never with a fallback handler.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let sandboxes = fake.sandboxes();
    assert_eq!(sandboxes.len(), 1, "only pod plain has a sandbox");
    assert_eq!(sandboxes[0].metadata.as_ref().unwrap().uid, uid(&plain));
    assert_eq!(sandboxes[0].runtime_handler, "", "the default handler");
    let st = status(&agent, &sandboxed).expect("a status");
    assert_eq!(st.phase.as_deref(), Some("Pending"));
    assert_eq!(waiting_reason(&st), Some("ContainerCreating"));
    assert!(
        events.with_reason("FailedCreatePodSandBox").len() >= 2,
        "the sandbox is retried"
    );
    agent.shutdown().await;
}

/// Upstream counts `spec.overhead` (filled from the RuntimeClass by the API server) in the
/// pod's requests for admission and in the pod cgroup's shares, quota and memory limit.
#[tokio::test(start_paused = true)]
async fn pod_overhead_counts_in_admission_and_the_pod_cgroup() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let cgroups = Arc::new(FakeCgroupFs::new(CgroupVersion::V1));
    let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
    cfg.cgroups.per_qos = true;
    cfg.cgroups.fs = Some(cgroups.clone());
    cfg.cgroups.cm.cgroup_root = "/rk".to_owned();
    let agent = Agent::start(
        cfg,
        fake_deps(&fake, &CollectingRecorder::default()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    // Admission sees the host's cores as allocatable cpu (no reservations in tests).
    let cores = kubelet::host::HostInfo::read(dir.path()).num_cores;
    let fits_alone = format!("{}m", cores * 1000 - 100);
    let resources = |cpu: &str| format!("    resources: {{requests: {{cpu: {cpu}}}}}\n");
    let with_overhead = {
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: over\nspec:\n  terminationGracePeriodSeconds: 1\n  overhead: {{cpu: 200m}}\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n{}",
            resources(&fits_alone)
        );
        static_pod(&yaml, "over", NODE)
    };
    set(&agent, vec![with_overhead.clone()]).await;
    wait_until("pod over Failed", Duration::from_secs(30), || {
        status(&agent, &with_overhead).is_some_and(|s| s.phase.as_deref() == Some("Failed"))
    })
    .await;
    let st = status(&agent, &with_overhead).unwrap();
    assert_eq!(st.reason.as_deref(), Some("OutOfcpu"), "{st:?}");
    assert!(fake.sandboxes().is_empty(), "a rejected pod never runs");

    // The same requests without overhead fit.
    let without = {
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fits\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n{}",
            resources(&fits_alone)
        );
        static_pod(&yaml, "fits", NODE)
    };
    // A burstable pod with limits: the pod cgroup adds the overhead to requests and limits.
    let limited = {
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: limited\nspec:\n  terminationGracePeriodSeconds: 1\n  overhead: {{cpu: 250m, memory: 32Mi}}\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    resources: {{requests: {{cpu: 50m, memory: 16Mi}}, limits: {{cpu: 500m, memory: 64Mi}}}}\n"
        );
        static_pod(&yaml, "limited", NODE)
    };
    set(&agent, vec![without.clone()]).await;
    wait_until("pod fits Running", Duration::from_secs(30), || {
        running(&agent, &without)
    })
    .await;
    set(&agent, vec![]).await;
    wait_until("pod fits gone", Duration::from_secs(60), || {
        fake.sandboxes()
            .iter()
            .all(|s| s.state != rkubelet_cri::api::PodSandboxState::SandboxReady as i32)
    })
    .await;
    set(&agent, vec![limited.clone()]).await;
    let path = format!("/rk/kubepods/burstable/pod{}", uid(&limited));
    wait_until("pod limited's cgroup", Duration::from_secs(30), || {
        cgroups.get(&path).is_some()
    })
    .await;
    let c = cgroups.get(&path).unwrap();
    assert_eq!(
        (c.cpu_shares, c.cpu_quota, c.memory),
        // shares: (50m + 250m) × 1024 / 1000; quota: (500m + 250m) of a 100 ms period.
        (Some(307), Some(75_000), Some((64 + 32) << 20)),
        "{c:?}"
    );
    agent.shutdown().await;
}

// ---- API-server mode ----

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
        fake.set_runtime_handlers(&["runc", "kata"]);
        let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
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

    fn runtime_class(&self, name: &str, handler: &str) {
        self.server
            .create(
                "runtimeclasses",
                "",
                json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                    "metadata": {"name": name}, "handler": handler}),
            )
            .unwrap();
    }

    async fn pod(&self, name: &str, class: &str) {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": NODE,
                "terminationGracePeriodSeconds": 1,
                "runtimeClassName": class,
                "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent"}],
            },
        }))
        .unwrap();
        Api::<Pod>::namespaced(self.client.clone(), "default")
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
    }

    fn status(&self, name: &str) -> Option<Value> {
        self.server
            .get("pods", "default", name)
            .map(|p| p["status"].clone())
    }

    fn running(&self, name: &str) -> Option<Value> {
        let st = self.status(name)?;
        (st["phase"] == "Running" && st["containerStatuses"][0]["state"]["running"].is_object())
            .then_some(st)
    }

    fn event(&self, pod: &str, reason: &str) -> Option<Value> {
        self.event_saying(pod, reason, "")
    }

    /// The first event about `pod` with `reason` whose message contains `text`.
    fn event_saying(&self, pod: &str, reason: &str, text: &str) -> Option<Value> {
        self.server
            .list("events", Some("default"))
            .into_iter()
            .find(|e| {
                e["involvedObject"]["name"] == pod
                    && e["reason"] == reason
                    && e["message"].as_str().is_some_and(|m| m.contains(text))
            })
    }

    /// The handlers of the sandboxes of pod `name`.
    fn handlers_of(&self, name: &str) -> Vec<String> {
        self.fake
            .sandboxes()
            .into_iter()
            .filter(|s| s.metadata.as_ref().is_some_and(|m| m.name == name))
            .map(|s| s.runtime_handler)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_pods_run_with_their_runtime_class_handler() {
    let env = Env::start().await;
    env.runtime_class("sandboxed", "kata");
    env.pod("isolated", "sandboxed").await;
    env.wait(30, "pod isolated Running", |e| e.running("isolated"))
        .await;
    assert_eq!(env.handlers_of("isolated"), ["kata"]);
    env.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_runtime_class_holds_the_pod_until_the_class_is_created() {
    let env = Env::start().await;
    env.pod("early", "late-class").await;
    let event = env
        .wait(30, "FailedCreatePodSandBox for pod early", |e| {
            e.event("early", "FailedCreatePodSandBox")
        })
        .await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(
        event["message"],
        "Failed to create pod sandbox: runtimeclasses.node.k8s.io \"late-class\" not found"
    );
    let st = env
        .wait(20, "pod early Pending in ContainerCreating", |e| {
            let st = e.status("early")?;
            (st["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating")
                .then_some(st)
        })
        .await;
    assert_eq!(st["phase"], "Pending", "{st}");
    assert_eq!(env.fake.call_count("RunPodSandbox"), 0, "never a fallback");

    // The watch brings the class; the pod's next retry starts it, with the class's handler.
    env.runtime_class("late-class", "kata");
    env.wait(40, "pod early Running once its class exists", |e| {
        e.running("early")
    })
    .await;
    assert_eq!(env.handlers_of("early"), ["kata"]);
    env.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_the_runtime_lacks_fails_the_sandbox_with_the_runtimes_message() {
    let env = Env::start().await;
    env.runtime_class("gvisor", "runsc");
    env.pod("nohandler", "gvisor").await;
    // The class and the pod reach the kubelet by separate watches, so the first attempt may
    // still find no class (NotFound, as upstream's informer would); the retry meets the runtime.
    let event = env
        .wait(40, "FailedCreatePodSandBox from the runtime", |e| {
            e.event_saying("nohandler", "FailedCreatePodSandBox", "no runtime for")
        })
        .await;
    let msg = event["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Failed to create pod sandbox: ")
            && msg.contains("no runtime for \"runsc\" is configured"),
        "{msg}"
    );
    assert!(env.fake.call_count("RunPodSandbox") >= 1);
    assert!(
        env.fake.sandboxes().is_empty(),
        "no sandbox, in particular not with runc"
    );
    let st = env
        .wait(20, "pod nohandler Pending in ContainerCreating", |e| {
            let st = e.status("nohandler")?;
            (st["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating")
                .then_some(st)
        })
        .await;
    assert_eq!(st["phase"], "Pending", "{st}");
    env.agent.shutdown().await;
}
