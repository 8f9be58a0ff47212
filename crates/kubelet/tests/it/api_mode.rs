//! The whole agent in API-server mode against the fake API server fixture, with the fake
//! runtime: the Node registers with capacity/allocatable/nodeInfo/conditions, the lease
//! renews, an API pod runs and its status and events reach the API, a graceful delete waits
//! for the grace period before the object goes, a static pod gets a mirror pod that comes
//! back when deleted, and a pod that does not fit is rejected with OutOfcpu. Real time.

use crate::common;

use std::path::Path;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kubelet::agent::{Agent, AgentConfig};
use kubelet::sources::{ManifestOrigin, static_pods_from_manifest};
use kubelet::types::{PodOp, PodSource, PodUpdate};
use rkubelet_cri::fake::FakeRuntime;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NODE: &str = "api-node";
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
        Self::start_with(|_| {}).await
    }

    async fn start_with(tweak: impl FnOnce(&mut AgentConfig)) -> Self {
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
        cfg.node_status.node_labels = [("pool".to_owned(), "blue".to_owned())].into();
        cfg.api.node_lease_duration_secs = 4;
        cfg.api.status_sync_period = Duration::from_secs(1);
        cfg.api.mirror_period = Duration::from_secs(1);
        tweak(&mut cfg);
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

    fn api_pod(&self, name: &str) -> Option<Value> {
        self.server.get("pods", "default", name)
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

    async fn create(&self, pod: Value) {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
    }
}

fn pod(name: &str, cpu: &str, grace: i64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": grace,
            "containers": [{
                "name": name, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "resources": {"requests": {"cpu": cpu}},
            }],
        },
    })
}

fn ready(obj: &Value, kind: &str) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_registers_and_its_lease_renews() {
    let env = Env::start().await;
    let node = env
        .wait(20, "the Node to be Ready", |e| {
            let n = e.server.get("nodes", "", NODE)?;
            ready(&n, "Ready").then_some(n)
        })
        .await;
    let st = &node["status"];
    assert_eq!(st["capacity"]["pods"], "110");
    assert!(st["capacity"]["cpu"].is_string() && st["capacity"]["memory"].is_string());
    assert!(st["allocatable"]["memory"].is_string(), "{st}");
    assert_eq!(st["nodeInfo"]["operatingSystem"], "linux");
    assert!(
        st["nodeInfo"]["containerRuntimeVersion"]
            .as_str()
            .is_some_and(|v| v.contains("://")),
        "{st}"
    );
    assert_eq!(st["addresses"][0]["type"], "InternalIP");
    assert_eq!(st["addresses"][0]["address"], "127.0.0.1");
    let conditions: Vec<&str> = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    for t in ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"] {
        assert!(conditions.contains(&t), "{conditions:?}");
    }
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], NODE);
    assert_eq!(node["metadata"]["labels"]["pool"], "blue");

    let first = env
        .wait(10, "the node lease", |e| {
            e.server.get("leases", "kube-node-lease", NODE)
        })
        .await;
    assert_eq!(first["spec"]["holderIdentity"], NODE);
    assert_eq!(first["spec"]["leaseDurationSeconds"], 4);
    assert_eq!(first["metadata"]["ownerReferences"][0]["kind"], "Node");
    let renewed = first["spec"]["renewTime"].clone();
    env.wait(10, "the lease to be renewed", |e| {
        let l = e.server.get("leases", "kube-node-lease", NODE)?;
        (l["spec"]["renewTime"] != renewed).then_some(())
    })
    .await;
    env.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_pod_runs_reports_status_and_events_and_graceful_delete_waits() {
    let env = Env::start().await;
    // The container ignores SIGTERM: stopping it takes the whole grace period.
    env.fake.on_stop("slow", 137);
    env.create(pod("slow", "10m", 2)).await;
    let running = env
        .wait(30, "pod slow Running in the API", |e| {
            let p = e.api_pod("slow")?;
            (p["status"]["phase"] == "Running" && ready(&p, "Ready")).then_some(p)
        })
        .await;
    let st = &running["status"];
    assert!(st["podIP"].is_string(), "{st}");
    assert_eq!(st["hostIP"], "127.0.0.1");
    assert!(
        st["containerStatuses"][0]["state"]["running"].is_object(),
        "{st}"
    );
    assert_eq!(st["containerStatuses"][0]["ready"], true);
    assert_eq!(st["qosClass"], "Burstable");
    for t in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert!(
            st["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == t),
            "{t} missing: {st}"
        );
    }
    let uid = running["metadata"]["uid"].as_str().unwrap().to_owned();
    let events = env
        .wait(10, "the Started event in the API", |e| {
            let evs: Vec<Value> = e
                .server
                .list("events", Some("default"))
                .into_iter()
                .filter(|ev| ev["involvedObject"]["uid"] == uid.as_str())
                .collect();
            evs.iter()
                .any(|ev| ev["reason"] == "Started")
                .then_some(evs)
        })
        .await;
    let reasons: Vec<&str> = events.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert!(reasons.contains(&"Created"), "{reasons:?}");
    assert_eq!(events[0]["source"]["host"], NODE);

    // kubectl delete: the object stays (deletionTimestamp) through the grace period.
    let asked = Instant::now();
    env.pods()
        .delete("slow", &DeleteParams::default().grace_period(2))
        .await
        .unwrap();
    let p = env
        .api_pod("slow")
        .expect("a graceful delete keeps the object");
    assert!(p["metadata"]["deletionTimestamp"].is_string());
    env.wait(20, "pod slow to disappear", |e| {
        e.api_pod("slow").is_none().then_some(())
    })
    .await;
    let took = asked.elapsed();
    assert!(
        took >= Duration::from_millis(1900),
        "the object went after {took:?}, before the 2 s grace period ended"
    );
    assert!(
        env.fake
            .containers()
            .iter()
            .all(|c| c.state != rkubelet_cri::api::ContainerState::ContainerRunning as i32),
        "containers stopped"
    );
    let killing = env
        .server
        .list("events", Some("default"))
        .into_iter()
        .any(|ev| ev["involvedObject"]["uid"] == uid.as_str() && ev["reason"] == "Killing");
    assert!(killing, "a Killing event was posted");
    env.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pod_gets_a_mirror_pod_that_comes_back() {
    let env = Env::start().await;
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: default\nspec:\n  containers:\n  - name: etcd\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n"
    );
    let static_pods = static_pods_from_manifest(
        yaml.as_bytes(),
        NODE,
        &ManifestOrigin::File(Path::new("/etc/kubernetes/manifests/etcd.yaml")),
        false,
    )
    .unwrap();
    env.agent
        .source_tx
        .send(PodUpdate::new(PodOp::Set, PodSource::File, static_pods))
        .await
        .unwrap();
    let name = format!("etcd-{NODE}");
    let mirror = env
        .wait(30, "the mirror pod Running", |e| {
            let p = e.api_pod(&name)?;
            (p["status"]["phase"] == "Running").then_some(p)
        })
        .await;
    assert!(mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string());
    assert_eq!(mirror["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(mirror["metadata"]["ownerReferences"][0]["name"], NODE);
    let first_uid = mirror["metadata"]["uid"].as_str().unwrap().to_owned();
    env.pods()
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    env.wait(20, "the mirror pod to be recreated", |e| {
        let p = e.api_pod(&name)?;
        (p["metadata"]["uid"] != first_uid.as_str()).then_some(())
    })
    .await;
    assert_eq!(
        env.fake.sandboxes().len(),
        1,
        "the static pod was not restarted"
    );

    // The static pod goes: so does its mirror pod.
    env.agent
        .source_tx
        .send(PodUpdate::new(PodOp::Set, PodSource::File, Vec::new()))
        .await
        .unwrap();
    env.wait(20, "the mirror pod to be deleted", |e| {
        e.api_pod(&name).is_none().then_some(())
    })
    .await;
    env.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_that_does_not_fit_is_rejected_with_out_of_cpu() {
    let env = Env::start().await;
    env.wait(20, "the Node", |e| e.server.get("nodes", "", NODE))
        .await;
    env.create(pod("huge", "100000", 1)).await;
    let st = env
        .wait(20, "pod huge Failed", |e| {
            let p = e.api_pod("huge")?;
            (p["status"]["phase"] == "Failed").then(|| p["status"].clone())
        })
        .await;
    assert_eq!(st["reason"], "OutOfcpu", "{st}");
    assert!(
        st["message"].as_str().is_some_and(
            |m| m.starts_with("Pod was rejected: Node didn't have enough resource: cpu")
        ),
        "{st}"
    );
    assert!(env.fake.sandboxes().is_empty(), "a rejected pod never runs");
    // A terminal pod keeps its status; deleting it removes the object.
    env.pods()
        .delete("huge", &DeleteParams::default())
        .await
        .unwrap();
    env.wait(20, "pod huge to disappear", |e| {
        e.api_pod("huge").is_none().then_some(())
    })
    .await;
    env.agent.shutdown().await;
}

/// Issue 18: a pod start costs at most 5 API requests of the kubelet — its events (`Pulled`,
/// `Created`, `Started`) and two status PATCHes written on the watched copy (no GET of the
/// pod). Node status and lease traffic in the same window is not part of the pod's cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_start_costs_at_most_five_api_requests() {
    // A node has a cluster DNS (without one every start adds a MissingClusterDNS event).
    let env = Env::start_with(|cfg| cfg.cluster_dns = vec!["10.96.0.10".to_owned()]).await;
    env.wait(20, "the Node to be Ready", |e| {
        let n = e.server.get("nodes", "", NODE)?;
        ready(&n, "Ready").then_some(())
    })
    .await;
    let from = Instant::now();
    env.create(pod("counted", "10m", 1)).await;
    let uid = env
        .wait(30, "pod counted Running and Ready in the API", |e| {
            let p = e.api_pod("counted")?;
            (p["status"]["phase"] == "Running" && ready(&p, "Ready"))
                .then(|| p["metadata"]["uid"].as_str().map(str::to_owned))
                .flatten()
        })
        .await;
    env.wait(10, "the Started event", |e| {
        e.server
            .list("events", Some("default"))
            .iter()
            .any(|ev| ev["involvedObject"]["uid"] == uid.as_str() && ev["reason"] == "Started")
            .then_some(())
    })
    .await;
    // Past two status reconcile passes (1 s here): nothing more is sent for the pod.
    let settled = Instant::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let steady_window = settled.elapsed();
    let background = |key: &str| {
        key.ends_with(" nodes")
            || key.ends_with(" nodes/status")
            || key.ends_with(" leases.coordination.k8s.io")
            || key.starts_with("WATCH ")
            || key.starts_with("LIST ")
    };
    let pod_requests: Vec<String> = env
        .server
        .faults()
        .requests(from, Instant::now())
        .into_iter()
        .filter(|r| !background(&r.key))
        .map(|r| format!("{} {}", r.key, r.code))
        .collect();
    // The test's own create.
    let ours: Vec<&String> = pod_requests
        .iter()
        .filter(|k| *k != "POST pods 201")
        .collect();
    assert!(
        ours.len() <= 5,
        "{} requests for one pod start: {ours:?}",
        ours.len()
    );
    assert!(
        !ours.iter().any(|k| k.starts_with("GET pods")),
        "the status is written on the watched copy: {ours:?}"
    );
    assert_eq!(
        ours.iter()
            .filter(|k| k.starts_with("PATCH pods/status"))
            .count(),
        2,
        "{ours:?}"
    );

    // Steady state (upstream's rate): per nodeStatusUpdateFrequency (1 s here) one GET of the
    // node, its status PATCHed only on change, the lease renewed every quarter of its 4 s
    // duration; no pod or event requests.
    let steady: Vec<String> = env
        .server
        .faults()
        .requests(settled, Instant::now())
        .into_iter()
        .map(|r| r.key)
        .collect();
    let periods = steady_window.as_secs_f64().ceil() as usize + 1;
    let count = |key: &str| steady.iter().filter(|k| *k == key).count();
    assert!(count("GET nodes") <= periods, "{steady:?}");
    assert!(
        count("PUT leases.coordination.k8s.io") <= periods,
        "{steady:?}"
    );
    assert!(count("PATCH nodes/status") <= 1, "{steady:?}");
    assert!(
        steady.iter().all(|k| background(k)),
        "only node and lease traffic at steady state: {steady:?}"
    );
    env.agent.shutdown().await;
}
