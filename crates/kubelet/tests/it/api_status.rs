//! The API status syncer against the in-repo fake API server: statuses written to the status
//! manager reach `pods/{name}/status`, only changes are patched, foreign conditions survive,
//! recreated pods are left alone, static pods report through their mirror pods, a terminal
//! phase waits until no container could run, gracefully deleted pods are removed once
//! reclaimed, and outages heal. Real time, short periods.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options, Store};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, Pod,
    PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubelet::apiclient::{ClientSettings, client_from_kubeconfig};
use kubelet::status::api_sync::{ApiStatusSyncer, ApiSyncSettings, ApiSyncStats, StatusTarget};
use kubelet::status::manager::StatusManager;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";

/// Where the test's "pod manager" says each kubelet pod's status goes.
#[derive(Clone)]
struct Registered {
    name: String,
    api_uid: String,
    is_static: bool,
    /// The "pod source" copy is frozen at this object (a watch that has not caught up).
    pinned: Option<Pod>,
}

struct Env {
    _dir: tempfile::TempDir,
    server: FakeApiServer,
    client: kube::Client,
    status: StatusManager,
    targets: Arc<Mutex<HashMap<String, Registered>>>,
    reclaimed: Arc<Mutex<HashSet<String>>>,
    /// Pods the "pod workers" say could still have running containers.
    running: Arc<Mutex<HashSet<String>>>,
    stats: Arc<ApiSyncStats>,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

fn api_pod(store: &Store, name: &str) -> Option<Pod> {
    let info = fake_apiserver::resources::find("", "v1", "pods")?;
    let v = store.get(info, NS, name).ok()?;
    serde_json::from_value(v).ok()
}

impl Env {
    async fn start(settings: ApiSyncSettings) -> Self {
        Self::start_with(settings, true).await
    }

    /// `client_retries`: the client from `client_from_kubeconfig` (kube's default retry layer
    /// re-sends 429/503/504 for minutes), or one without that layer.
    async fn start_with(settings: ApiSyncSettings, client_retries: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = FakeApiServer::start(Options {
            kubeconfig_path: Some(dir.path().join("kubeconfig")),
            ..Options::default()
        })
        .await
        .unwrap();
        server
            .create("nodes", "", json!({"metadata": {"name": "n1"}}))
            .unwrap();
        let client = if client_retries {
            client_from_kubeconfig(&server.kubeconfig_path, &ClientSettings::default())
                .await
                .unwrap()
        } else {
            let kc = Kubeconfig::read_from(&server.kubeconfig_path).unwrap();
            let mut config =
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .unwrap();
            config.default_retry = false;
            kube::Client::try_from(config).unwrap()
        };
        let status = StatusManager::new();
        let targets: Arc<Mutex<HashMap<String, Registered>>> = Arc::default();
        let reclaimed: Arc<Mutex<HashSet<String>>> = Arc::default();

        // The lookup reads the fixture's store, as the real one reads the watch-fed pod manager.
        let store = server.store().clone();
        let t = targets.clone();
        let lookup = Arc::new(move |uid: &str| {
            let r = t.lock().unwrap().get(uid).cloned()?;
            let seen = r.pinned.clone().or_else(|| {
                api_pod(&store, &r.name).filter(|p| p.metadata.uid.as_deref() == Some(&r.api_uid))
            });
            Some(StatusTarget {
                namespace: NS.into(),
                name: r.name,
                api_uid: r.api_uid,
                is_static: r.is_static,
                api_status: seen.as_ref().and_then(|p| p.status.clone()),
                deleting: seen
                    .as_ref()
                    .is_some_and(|p| p.metadata.deletion_timestamp.is_some()),
                resource_version: seen.and_then(|p| p.metadata.resource_version),
                mirror: false,
            })
        });
        let running_pods: Arc<Mutex<HashSet<String>>> = Arc::default();
        let r = reclaimed.clone();
        let can_be_deleted = Arc::new(move |uid: &str| r.lock().unwrap().contains(uid));
        let cancel = CancellationToken::new();
        let running = running_pods.clone();
        let could_have_running = Arc::new(move |uid: &str| running.lock().unwrap().contains(uid));
        let syncer = ApiStatusSyncer::new(
            client.clone(),
            status.clone(),
            lookup,
            can_be_deleted,
            could_have_running,
            settings,
        );
        let stats = syncer.stats();
        let task = Some(tokio::spawn(syncer.run(cancel.clone())));
        Self {
            _dir: dir,
            server,
            client,
            status,
            targets,
            reclaimed,
            running: running_pods,
            stats,
            cancel,
            task,
        }
    }

    async fn quick() -> Self {
        Self::start(ApiSyncSettings {
            sync_period: Duration::from_millis(500),
            deletion_check_period: Duration::from_millis(100),
            ..ApiSyncSettings::default()
        })
        .await
    }

    /// No reconcile pass during the test: only status changes cause pushes.
    async fn without_reconcile() -> Self {
        Self::start(ApiSyncSettings {
            sync_period: Duration::from_secs(600),
            ..ApiSyncSettings::default()
        })
        .await
    }

    /// Creates a pod bound to n1 and registers it as an API pod of the kubelet; returns its uid.
    fn create_pod(&self, name: &str) -> String {
        let pod = self
            .server
            .create(
                "pods",
                NS,
                json!({
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {
                        "nodeName": "n1",
                        "terminationGracePeriodSeconds": 30,
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}]
                    }
                }),
            )
            .unwrap();
        let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
        self.register(&uid, name, &uid, false);
        uid
    }

    fn register(&self, uid: &str, name: &str, api_uid: &str, is_static: bool) {
        self.targets.lock().unwrap().insert(
            uid.into(),
            Registered {
                name: name.into(),
                api_uid: api_uid.into(),
                is_static,
                pinned: None,
            },
        );
    }

    /// Freezes the "pod source" copy of pod `uid` at `pod`.
    fn pin(&self, uid: &str, pod: Option<Pod>) {
        self.targets.lock().unwrap().get_mut(uid).unwrap().pinned = pod;
    }

    /// The requests logged since `from`, as `(key, code)`, without the fixture's own.
    fn requests_since(&self, from: Instant) -> Vec<(String, u16)> {
        self.server
            .faults()
            .requests(from, Instant::now() + Duration::from_secs(1))
            .into_iter()
            .map(|r| (r.key, r.code))
            .collect()
    }

    fn set(&self, uid: &str, status: PodStatus) {
        let pod = Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                name: Some(uid.into()),
                namespace: Some(NS.into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        self.status.set_pod_status(&pod, status);
    }

    fn get(&self, name: &str) -> Option<Value> {
        self.server.get("pods", NS, name)
    }

    fn phase(&self, name: &str) -> Option<String> {
        self.get(name)?["status"]["phase"]
            .as_str()
            .map(str::to_owned)
    }

    fn count(&self, key: &str) -> u64 {
        self.server
            .request_counts()
            .get(key)
            .copied()
            .unwrap_or_default()
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(5), t)
                .await
                .expect("syncer stops when cancelled")
                .unwrap();
        }
    }
}

/// Polls `f` until true; the time it took, or `None` after `limit`.
async fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f().then(|| start.elapsed())
}

fn time(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap())
}

fn condition(type_: &str, value: bool) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if value { "True" } else { "False" }.into(),
        last_transition_time: Some(time(1_700_000_000)),
        ..PodCondition::default()
    }
}

fn running_status(ready: bool) -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![
            condition("PodReadyToStartContainers", true),
            condition("Initialized", true),
            condition("Ready", ready),
            condition("ContainersReady", ready),
            condition("PodScheduled", true),
        ]),
        container_statuses: Some(vec![ContainerStatus {
            name: "c".into(),
            image: "busybox".into(),
            image_id: "sha256:abc".into(),
            container_id: Some("containerd://c1".into()),
            ready,
            started: Some(true),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(time(1_700_000_001)),
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }]),
        pod_ip: Some("10.88.0.5".into()),
        pod_ips: Some(vec![PodIP {
            ip: "10.88.0.5".into(),
        }]),
        host_ip: Some("192.168.1.10".into()),
        qos_class: Some("BestEffort".into()),
        start_time: Some(time(1_700_000_000)),
        ..PodStatus::default()
    }
}

fn succeeded_status() -> PodStatus {
    let mut s = running_status(false);
    s.phase = Some("Succeeded".into());
    if let Some(cs) = s.container_statuses.as_mut() {
        cs[0].started = Some(false);
        cs[0].state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                started_at: Some(time(1_700_000_001)),
                finished_at: Some(time(1_700_000_010)),
                container_id: Some("containerd://c1".into()),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        });
    }
    s
}

fn condition_status(pod: &Value, type_: &str) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn status_reaches_the_api_and_only_changes_are_patched() {
    let env = Env::quick().await;
    let uid = env.create_pod("web");
    env.set(&uid, running_status(true));
    wait_for(WAIT, || env.phase("web").as_deref() == Some("Running"))
        .await
        .expect("status pushed");
    let pod = env.get("web").unwrap();
    assert_eq!(pod["status"]["podIP"], "10.88.0.5");
    assert_eq!(pod["status"]["podIPs"][0]["ip"], "10.88.0.5");
    assert_eq!(condition_status(&pod, "Ready").as_deref(), Some("True"));
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"],
        "2023-11-14T22:13:21Z"
    );
    assert_eq!(pod["status"]["containerStatuses"][0]["ready"], true);
    assert_eq!(env.count("PATCH pods/status"), 1);

    // The same status again, and several full (reconcile) passes: nothing more is written.
    env.set(&uid, running_status(true));
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(
        env.count("PATCH pods/status"),
        1,
        "{:?}",
        env.server.request_counts()
    );

    // A change goes out once.
    env.set(&uid, running_status(false));
    wait_for(WAIT, || {
        env.get("web")
            .is_some_and(|p| condition_status(&p, "Ready").as_deref() == Some("False"))
    })
    .await
    .expect("readiness change pushed");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(env.count("PATCH pods/status"), 2);
    env.stop().await;
}

#[tokio::test]
async fn kubelet_owned_conditions_are_reconciled_and_foreign_ones_survive() {
    let env = Env::quick().await;
    let uid = env.create_pod("gated");
    env.set(&uid, running_status(false));
    wait_for(WAIT, || env.phase("gated").as_deref() == Some("Running"))
        .await
        .expect("status pushed");

    // Someone else adds their condition and (wrongly) flips one the kubelet owns.
    let patch = json!({"status": {"conditions": [
        {"type": "example.com/Gate", "status": "True"},
        {"type": "Ready", "status": "True"}
    ]}});
    env.pods()
        .patch_status("gated", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    // The full pass notices the kubelet-owned condition differs and writes it back.
    wait_for(WAIT, || {
        env.get("gated")
            .is_some_and(|p| condition_status(&p, "Ready").as_deref() == Some("False"))
    })
    .await
    .expect("Ready reconciled");
    // A later kubelet change keeps the foreign condition.
    env.set(&uid, running_status(true));
    wait_for(WAIT, || {
        env.get("gated")
            .is_some_and(|p| condition_status(&p, "Ready").as_deref() == Some("True"))
    })
    .await
    .expect("readiness pushed");
    let pod = env.get("gated").unwrap();
    assert_eq!(
        condition_status(&pod, "example.com/Gate").as_deref(),
        Some("True"),
        "{pod}"
    );
    env.stop().await;
}

#[tokio::test]
async fn a_recreated_pod_with_the_same_name_is_not_patched() {
    let env = Env::quick().await;
    let old_uid = env.create_pod("again");
    // The pod is replaced in the API before the kubelet writes its status.
    env.pods()
        .delete(
            "again",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    let new = env
        .server
        .create(
            "pods",
            NS,
            json!({"metadata": {"name": "again"}, "spec": {"nodeName": "n1",
                "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .unwrap();
    assert_ne!(new["metadata"]["uid"].as_str(), Some(old_uid.as_str()));
    env.set(&old_uid, running_status(true));
    wait_for(WAIT, || env.count("GET pods") >= 1)
        .await
        .expect("the syncer looked");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(env.count("PATCH pods/status"), 0);
    assert_eq!(env.phase("again").as_deref(), Some("Pending"));
    // Not fetched again and again for the same status version.
    assert!(
        env.count("GET pods") <= 2,
        "{:?}",
        env.server.request_counts()
    );
    env.stop().await;
}

#[tokio::test]
async fn static_pod_status_lands_on_its_mirror_pod() {
    let env = Env::quick().await;
    let static_uid = "0123456789abcdef0123456789abcdef";
    env.set(static_uid, running_status(true));
    // No mirror pod yet: nothing to write to.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(env.count("GET pods"), 0);

    let mirror = env
        .server
        .create(
            "pods",
            NS,
            json!({"metadata": {"name": "etcd-n1", "annotations": {
                    "kubernetes.io/config.mirror": static_uid,
                    "kubernetes.io/config.source": "file"}},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .unwrap();
    let mirror_uid = mirror["metadata"]["uid"].as_str().unwrap();
    env.register(static_uid, "etcd-n1", mirror_uid, true);
    wait_for(WAIT, || env.phase("etcd-n1").as_deref() == Some("Running"))
        .await
        .expect("status on the mirror pod");
    let pod = env.get("etcd-n1").unwrap();
    assert_eq!(pod["status"]["podIP"], "10.88.0.5");

    // A mirror pod being deleted is never removed by the status syncer.
    env.reclaimed.lock().unwrap().insert(static_uid.into());
    env.pods()
        .delete("etcd-n1", &DeleteParams::default())
        .await
        .unwrap();
    env.set(static_uid, succeeded_status());
    wait_for(WAIT, || {
        env.phase("etcd-n1").as_deref() == Some("Succeeded")
    })
    .await
    .expect("terminal status on the mirror pod");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(env.get("etcd-n1").is_some());
    assert_eq!(env.count("DELETE pods"), 1, "only the test's own delete");
    env.stop().await;
}

#[tokio::test]
async fn gracefully_deleted_pod_is_removed_once_reclaimed() {
    let env = Env::quick().await;
    let uid = env.create_pod("job");
    env.set(&uid, running_status(true));
    wait_for(WAIT, || env.phase("job").as_deref() == Some("Running"))
        .await
        .expect("running status pushed");

    // kubectl delete: the pod stays with a deletionTimestamp until the kubelet is done.
    env.pods()
        .delete("job", &DeleteParams::default())
        .await
        .unwrap();
    assert!(env.get("job").unwrap()["metadata"]["deletionTimestamp"].is_string());
    env.set(&uid, succeeded_status());
    wait_for(WAIT, || env.phase("job").as_deref() == Some("Succeeded"))
        .await
        .expect("final status pushed");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        env.get("job").is_some(),
        "not deleted before it is reclaimed"
    );
    assert_eq!(env.count("DELETE pods"), 1);

    env.reclaimed.lock().unwrap().insert(uid.clone());
    let took = wait_for(WAIT, || env.get("job").is_none())
        .await
        .expect("deleted once reclaimed");
    eprintln!("final delete {took:?} after reclaim");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(env.count("DELETE pods"), 2);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(env.count("DELETE pods"), 2, "forgotten after the delete");
    assert_eq!(env.stats.deletes(), 1);
    env.stop().await;
}

#[tokio::test]
async fn terminal_phase_waits_until_no_container_could_run() {
    let env = Env::quick().await;
    let uid = env.create_pod("ending");
    env.set(&uid, running_status(true));
    wait_for(WAIT, || env.phase("ending").as_deref() == Some("Running"))
        .await
        .expect("running status pushed");
    // The worker is still terminating the pod: the status says Succeeded (every container
    // exited), but the API keeps the running phase; container states still go out.
    env.running.lock().unwrap().insert(uid.clone());
    env.set(&uid, succeeded_status());
    wait_for(WAIT, || {
        env.get("ending")
            .is_some_and(|p| p["status"]["containerStatuses"][0]["state"]["terminated"].is_object())
    })
    .await
    .expect("container states pushed");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(env.phase("ending").as_deref(), Some("Running"));
    // Terminated: the next full pass writes the terminal phase.
    env.running.lock().unwrap().clear();
    wait_for(WAIT, || env.phase("ending").as_deref() == Some("Succeeded"))
        .await
        .expect("terminal phase pushed once the worker is done");
    env.stop().await;
}

#[tokio::test]
async fn terminal_pods_not_being_deleted_keep_their_status() {
    let env = Env::quick().await;
    let uid = env.create_pod("done");
    env.reclaimed.lock().unwrap().insert(uid.clone());
    env.set(&uid, succeeded_status());
    wait_for(WAIT, || env.phase("done").as_deref() == Some("Succeeded"))
        .await
        .expect("terminal status pushed");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let pod = env.get("done").expect("still there");
    assert_eq!(condition_status(&pod, "Ready").as_deref(), Some("False"));
    assert_eq!(env.count("DELETE pods"), 0);
    env.stop().await;
}

fn all_running(env: &Env, names: &[String]) -> bool {
    names
        .iter()
        .all(|n| env.phase(n).as_deref() == Some("Running"))
}

#[tokio::test]
async fn api_errors_heal_within_seconds_with_bounded_requests() {
    // Upstream periods: 10 s full pass, 200 ms → 10 s retries; a client without hidden retries.
    let env = Env::start_with(ApiSyncSettings::default(), false).await;
    let names: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    let uids: Vec<String> = names.iter().map(|n| env.create_pod(n)).collect();
    env.server.fail_requests(Some(503));
    for uid in &uids {
        env.set(uid, running_status(true));
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        names
            .iter()
            .all(|n| env.phase(n).as_deref() == Some("Pending"))
    );
    let during = env.stats.requests();
    assert_eq!(env.stats.failed_requests(), during);
    // Each pod backs off (200, 400, 800, 1600, 3200 ms): a handful of attempts each.
    assert!(
        (10 * 3..=10 * 6).contains(&during),
        "{during} requests in 5 s of outage"
    );
    env.server.fail_requests(None);
    let took = wait_for(Duration::from_secs(15), || all_running(&env, &names))
        .await
        .expect("converged after the outage");
    eprintln!("10 pods converged {took:?} after a 5 s 503 outage ({during} requests during it)");
    assert!(took <= Duration::from_secs(10), "{took:?}");
    env.stop().await;
}

#[tokio::test]
async fn api_errors_heal_with_the_retrying_client_too() {
    // kube's retry layer holds 503 answers for minutes; the request timeout frees the slots.
    let env = Env::start(ApiSyncSettings::default()).await;
    let names: Vec<String> = (0..12).map(|i| format!("r{i}")).collect();
    let uids: Vec<String> = names.iter().map(|n| env.create_pod(n)).collect();
    env.server.fail_requests(Some(503));
    for uid in &uids {
        env.set(uid, running_status(true));
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        env.stats.failed_requests() >= 8,
        "timed-out calls count as failures"
    );
    env.server.fail_requests(None);
    let took = wait_for(Duration::from_secs(15), || all_running(&env, &names))
        .await
        .expect("converged after the outage");
    eprintln!("12 pods converged {took:?} after a 6 s 503 outage (retrying client)");
    assert!(took <= Duration::from_secs(10), "{took:?}");
    env.stop().await;
}

#[tokio::test]
async fn outage_with_closed_connections_heals() {
    let mut env = Env::start(ApiSyncSettings::default()).await;
    let names: Vec<String> = (0..5).map(|i| format!("q{i}")).collect();
    let uids: Vec<String> = names.iter().map(|n| env.create_pod(n)).collect();
    env.set(&uids[0], running_status(true));
    wait_for(WAIT, || env.phase(&names[0]).as_deref() == Some("Running"))
        .await
        .expect("pushed before the outage");
    env.server.pause().await;
    for uid in &uids {
        env.set(uid, running_status(false));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let failed = env.stats.failed_requests();
    assert!((5..=5 * 6).contains(&failed), "{failed} failed requests");
    env.server.resume().await.unwrap();
    let took = wait_for(Duration::from_secs(15), || {
        names.iter().all(|n| {
            env.get(n)
                .is_some_and(|p| condition_status(&p, "Ready").as_deref() == Some("False"))
        })
    })
    .await
    .expect("converged after the outage");
    eprintln!("5 pods converged {took:?} after the API server came back");
    assert!(took <= Duration::from_secs(10), "{took:?}");
    env.stop().await;
}

#[tokio::test]
async fn hundred_pods_converge_quickly() {
    let env = Env::start(ApiSyncSettings::default()).await;
    let names: Vec<String> = (0..100).map(|i| format!("many-{i}")).collect();
    let uids: Vec<String> = names.iter().map(|n| env.create_pod(n)).collect();
    let start = Instant::now();
    for uid in &uids {
        env.set(uid, running_status(true));
    }
    wait_for(Duration::from_secs(30), || all_running(&env, &names))
        .await
        .expect("100 pods converged");
    let took = start.elapsed();
    eprintln!(
        "100 pods converged in {took:?}; requests: {:?}",
        env.server.request_counts()
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(env.count("PATCH pods/status"), 100);
    assert_eq!(env.stats.status_patches(), 100);
    assert_eq!(env.stats.failed_requests(), 0);
    env.stop().await;
}

/// A pod start writes two statuses (pending, then running and ready). Starting from the pod
/// source's copy (with its resourceVersion as a precondition) each is one PATCH: no GET.
#[tokio::test]
async fn a_pod_start_is_two_status_patches_without_a_get() {
    let env = Env::quick().await;
    let uid = env.create_pod("start");
    let from = Instant::now();
    let mut pending = running_status(false);
    pending.phase = Some("Pending".into());
    env.set(&uid, pending);
    wait_for(WAIT, || {
        env.get("start")
            .is_some_and(|p| p["status"]["podIP"] == "10.88.0.5")
    })
    .await
    .expect("pending status written");
    env.set(&uid, running_status(true));
    wait_for(WAIT, || {
        env.get("start")
            .is_some_and(|p| condition_status(&p, "Ready").as_deref() == Some("True"))
    })
    .await
    .expect("ready status written");
    // Past a full pass or two: nothing more is sent for an unchanged pod.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let requests = env.requests_since(from);
    assert_eq!(
        requests,
        [
            ("PATCH pods/status".to_owned(), 200),
            ("PATCH pods/status".to_owned(), 200)
        ],
        "a pod start costs two status requests"
    );
    assert_eq!(env.stats.stale_pre_images(), 0);
    env.stop().await;
}

/// The pod source's copy is behind the server (another writer changed the pod): the server
/// refuses the PATCH made on it (409), the syncer reads the pod and merges onto the current
/// object, keeping the other writer's condition.
#[tokio::test]
async fn a_stale_watched_copy_is_refused_then_read_and_merged() {
    let env = Env::without_reconcile().await;
    let uid = env.create_pod("stale");
    let before = api_pod(env.server.store(), "stale").unwrap();
    env.pin(&uid, Some(before.clone()));
    // Another writer adds its own condition: the server's object moves on.
    let theirs = json!({"status": {"conditions": [
        {"type": "example.com/gate", "status": "True"}
    ]}});
    env.pods()
        .patch_status("stale", &PatchParams::default(), &Patch::Strategic(theirs))
        .await
        .unwrap();
    let from = Instant::now();
    env.set(&uid, running_status(true));
    wait_for(WAIT, || env.phase("stale").as_deref() == Some("Running"))
        .await
        .expect("status written after the conflict");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let requests = env.requests_since(from);
    assert_eq!(
        requests[..3],
        [
            ("PATCH pods/status".to_owned(), 409),
            ("GET pods".to_owned(), 200),
            ("PATCH pods/status".to_owned(), 200)
        ],
        "refused, read, written: {requests:?}"
    );
    assert_eq!(env.stats.stale_pre_images(), 1);
    let pod = env.get("stale").unwrap();
    assert_eq!(
        condition_status(&pod, "example.com/gate").as_deref(),
        Some("True"),
        "the other writer's condition survives: {pod}"
    );
    assert_eq!(condition_status(&pod, "Ready").as_deref(), Some("True"));
    assert_eq!(pod["status"]["podIP"], "10.88.0.5");
    // The copy the stale write was based on never reached the server as a whole.
    assert_ne!(
        pod["metadata"]["resourceVersion"].as_str(),
        before.metadata.resource_version.as_deref()
    );
    env.stop().await;
}

/// Hostile or broken resourceVersions in the pod source's copy (garbage, empty, absent) never
/// wedge the syncer: each push falls back to GET and writes; nothing retries forever.
#[tokio::test]
async fn garbage_or_missing_resource_versions_do_not_wedge_the_syncer() {
    let env = Env::without_reconcile().await;
    let mut uids = Vec::new();
    for (name, rv) in [
        ("garbage", Some("not-a-number/../\"x\"")),
        ("huge", Some("99999999999999999999999999")),
        ("empty", Some("")),
        ("absent", None),
    ] {
        let uid = env.create_pod(name);
        let mut pinned = api_pod(env.server.store(), name).unwrap();
        pinned.metadata.resource_version = rv.map(str::to_owned);
        env.pin(&uid, Some(pinned));
        uids.push((uid, name));
    }
    for (uid, _) in &uids {
        env.set(uid, running_status(true));
    }
    for (_, name) in &uids {
        wait_for(WAIT, || env.phase(name).as_deref() == Some("Running"))
            .await
            .unwrap_or_else(|| panic!("status of {name} written"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Two refused pre-images (garbage, huge: 409, GET, PATCH); empty and absent GET first.
    assert_eq!(env.stats.stale_pre_images(), 2);
    assert_eq!(env.stats.failed_requests(), 0);
    assert_eq!(env.count("PATCH pods/status"), 2 * 2 + 2);
    assert_eq!(env.count("GET pods"), 4);
    env.stop().await;
}
