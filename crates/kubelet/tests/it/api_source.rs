//! API-server mode pod plumbing against the in-repo fake API server (real network I/O, real
//! time): the API pod source (node filter, create/update/graceful delete, relist after 410,
//! outage), the mirror pod reconciler (create with the Node owner reference, recreate after an
//! API delete, replace on a hash change, delete orphans), and the sync loop keeping mirror pods
//! away from pod workers.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::store::DeleteOpts;
use fake_apiserver::{FakeApiServer, Options};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kubelet::config_merge::{PodConfigMerger, SeenSources};
use kubelet::mirror::MirrorPodReconciler;
use kubelet::pod_manager::PodManager;
use kubelet::sources::api::ApiSource;
use kubelet::sources::{ManifestOrigin, static_pods_from_manifest};
use kubelet::types::{
    CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION, PodExt, PodOp, PodSource, PodUpdate,
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NODE: &str = "node-a";

struct Fixture {
    server: FakeApiServer,
    client: kube::Client,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let common::ApiFixture {
        dir,
        server,
        client,
    } = common::api_fixture(Options {
        bookmark_interval: Duration::from_secs(1),
        ..Options::default()
    })
    .await;
    Fixture {
        server,
        client,
        _dir: dir,
    }
}

fn api_pod(name: &str, node: Option<&str>) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn pods_api(client: &kube::Client) -> kube::Api<Pod> {
    kube::Api::namespaced(client.clone(), "default")
}

fn names(pods: &[impl std::borrow::Borrow<Pod>]) -> Vec<String> {
    let mut n: Vec<String> = pods.iter().map(|p| p.borrow().name().to_owned()).collect();
    n.sort();
    n
}

/// Copies of shared pods, for comparing and merging again.
fn owned(pods: &[Arc<Pod>]) -> Vec<Pod> {
    pods.iter().map(|p| Pod::clone(p)).collect()
}

/// Receives the API source's sets, checking each one, until `pred` holds for one.
struct Sets {
    rx: mpsc::Receiver<PodUpdate>,
    all: Vec<Vec<Pod>>,
}

impl Sets {
    async fn until(&mut self, what: &str, pred: impl Fn(&[Pod]) -> bool) -> Vec<Pod> {
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let u = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "timed out waiting for {what}; sets so far: {:?}",
                        self.all.iter().map(|s| names(s)).collect::<Vec<_>>()
                    )
                })
                .expect("source channel closed");
            assert_eq!(u.op, PodOp::Set);
            assert_eq!(u.source, PodSource::Api);
            let pods = owned(&u.pods);
            let mut uids: Vec<&str> = pods.iter().map(|p| p.uid()).collect();
            uids.sort();
            uids.dedup();
            assert_eq!(
                uids.len(),
                pods.len(),
                "duplicate pods in {:?}",
                names(&pods)
            );
            for p in &pods {
                let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                assert_eq!(node, Some(NODE), "{} is not bound to this node", p.name());
            }
            self.all.push(pods.clone());
            if pred(&pods) {
                return pods;
            }
        }
    }

    /// Whatever arrives within `d`.
    async fn drain_for(&mut self, d: Duration) -> Vec<Vec<Pod>> {
        let deadline = Instant::now() + d;
        let mut got = Vec::new();
        while let Ok(Some(u)) = tokio::time::timeout_at(deadline, self.rx.recv()).await {
            self.all.push(owned(&u.pods));
            got.push(owned(&u.pods));
        }
        got
    }
}

fn start_source(client: &kube::Client, cancel: &CancellationToken) -> Sets {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(ApiSource::new(client.clone(), NODE, tx).run(cancel.clone()));
    Sets {
        rx,
        all: Vec::new(),
    }
}

fn has(pods: &[Pod], name: &str) -> bool {
    pods.iter().any(|p| p.name() == name)
}

#[tokio::test]
async fn source_sends_this_nodes_pods_and_their_changes() {
    let f = fixture().await;
    for (name, node) in [
        ("mine", Some(NODE)),
        ("other", Some("node-b")),
        ("unbound", None),
    ] {
        f.server
            .create("pods", "default", api_pod(name, node))
            .unwrap();
    }
    let cancel = CancellationToken::new();
    let mut sets = start_source(&f.client, &cancel);
    let mut merger = PodConfigMerger::new();
    let ops = |out: &[PodUpdate]| -> Vec<(PodOp, Vec<String>)> {
        out.iter().map(|u| (u.op, names(&u.pods))).collect()
    };
    let s = |n: &str| vec![n.to_owned()];

    let first = sets.until("initial list", |_| true).await;
    assert_eq!(names(&first), ["mine"]);
    let out = merger.merge(PodUpdate::new(PodOp::Set, PodSource::Api, first));
    assert_eq!(ops(&out), [(PodOp::Add, s("mine"))]);
    assert_eq!(
        out[0].pods[0].annotation("kubernetes.io/config.source"),
        Some("api")
    );
    assert!(
        out[0].pods[0]
            .annotation("kubernetes.io/config.seen")
            .is_some()
    );

    let api = pods_api(&f.client);
    let pods: Vec<Pod> = [
        api_pod("second", Some(NODE)),
        api_pod("elsewhere", Some("node-b")),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect();
    for p in &pods {
        api.create(&PostParams::default(), p).await.unwrap();
    }
    let set = sets.until("second pod", |p| has(p, "second")).await;
    assert_eq!(names(&set), ["mine", "second"]);
    let out = merger.merge(PodUpdate::new(PodOp::Set, PodSource::Api, set));
    assert_eq!(ops(&out), [(PodOp::Add, s("second"))]);

    // A label change is an UPDATE.
    api.patch(
        "mine",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "web"}}})),
    )
    .await
    .unwrap();
    let set = sets
        .until("label", |p| {
            p.iter().any(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("tier"))
            })
        })
        .await;
    let out = merger.merge(PodUpdate::new(PodOp::Set, PodSource::Api, set));
    assert_eq!(ops(&out), [(PodOp::Update, s("mine"))]);

    // A graceful delete keeps the pod with a deletionTimestamp: DELETE.
    api.delete("mine", &DeleteParams::default()).await.unwrap();
    let set = sets
        .until("deletionTimestamp", |p| {
            p.iter()
                .any(|p| p.name() == "mine" && p.metadata.deletion_timestamp.is_some())
        })
        .await;
    let out = merger.merge(PodUpdate::new(PodOp::Set, PodSource::Api, set));
    assert_eq!(ops(&out), [(PodOp::Delete, s("mine"))]);

    // The final grace-0 delete removes it: REMOVE.
    api.delete("mine", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let set = sets.until("mine gone", |p| !has(p, "mine")).await;
    assert_eq!(names(&set), ["second"]);
    let out = merger.merge(PodUpdate::new(PodOp::Set, PodSource::Api, set));
    assert_eq!(ops(&out), [(PodOp::Remove, s("mine"))]);
    cancel.cancel();
}

#[tokio::test]
async fn source_relists_after_410_without_losing_or_duplicating_pods() {
    let mut f = fixture().await;
    for name in ["p1", "p2"] {
        f.server
            .create("pods", "default", api_pod(name, Some(NODE)))
            .unwrap();
    }
    let cancel = CancellationToken::new();
    let mut sets = start_source(&f.client, &cancel);
    let first = sets.until("initial list", |_| true).await;
    assert_eq!(names(&first), ["p1", "p2"]);
    let p2_uid = first
        .iter()
        .find(|p| p.name() == "p2")
        .unwrap()
        .uid()
        .to_owned();
    let lists_before = f
        .server
        .request_counts()
        .get("LIST pods")
        .copied()
        .unwrap_or(0);

    // While the watch is down the history moves on and is compacted: the watcher's
    // resourceVersion is too old when it reconnects (410 Gone) and it must relist.
    f.server.pause().await;
    let info = fake_apiserver::resources::RESOURCES
        .iter()
        .find(|r| r.plural == "pods")
        .unwrap();
    f.server
        .store()
        .delete(
            info,
            "default",
            "p1",
            &DeleteOpts {
                grace_period_seconds: Some(0),
                ..DeleteOpts::default()
            },
        )
        .unwrap();
    f.server
        .create("pods", "default", api_pod("p3", Some(NODE)))
        .unwrap();
    f.server.compact();
    f.server.resume().await.unwrap();

    let set = sets
        .until("relisted set", |p| has(p, "p3") && !has(p, "p1"))
        .await;
    assert_eq!(names(&set), ["p2", "p3"]);
    assert_eq!(set.iter().find(|p| p.name() == "p2").unwrap().uid(), p2_uid);
    let lists_after = f
        .server
        .request_counts()
        .get("LIST pods")
        .copied()
        .unwrap_or(0);
    assert!(
        lists_after > lists_before,
        "no relist: {:?}",
        f.server.request_counts()
    );
    // Nothing partial or empty was ever reported.
    for s in &sets.all {
        assert!(has(s, "p2"), "p2 missing from {:?}", names(s));
    }

    // The watch continues after the relist.
    f.server
        .create("pods", "default", api_pod("p4", Some(NODE)))
        .unwrap();
    let set = sets.until("p4", |p| has(p, "p4")).await;
    assert_eq!(names(&set), ["p2", "p3", "p4"]);
    cancel.cancel();
}

#[tokio::test]
async fn source_keeps_its_set_through_an_outage() {
    let mut f = fixture().await;
    f.server
        .create("pods", "default", api_pod("p1", Some(NODE)))
        .unwrap();
    let cancel = CancellationToken::new();
    let mut sets = start_source(&f.client, &cancel);
    let first = sets.until("initial list", |_| true).await;
    assert_eq!(names(&first), ["p1"]);

    f.server.pause().await;
    let during = sets.drain_for(Duration::from_secs(3)).await;
    assert!(
        during.iter().all(|s| has(s, "p1")),
        "sets during the outage: {:?}",
        during.iter().map(|s| names(s)).collect::<Vec<_>>()
    );
    f.server.resume().await.unwrap();

    // The client is the source's own: right after the outage its throttle may still be
    // backing off (one probe request at a time), so the create is retried as any caller would.
    let api = pods_api(&f.client);
    let p2: Pod = serde_json::from_value(api_pod("p2", Some(NODE))).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match api.create(&PostParams::default(), &p2).await {
            Ok(_) => break,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("create after the outage: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("create after the outage kept failing: {e}"),
        }
    }
    let set = sets.until("p2 after the outage", |p| has(p, "p2")).await;
    assert_eq!(names(&set), ["p1", "p2"]);
    assert!(
        sets.all.iter().all(|s| has(s, "p1")),
        "an empty or partial set was sent"
    );
    cancel.cancel();
}

#[tokio::test]
async fn source_does_not_report_before_its_first_list() {
    let mut f = fixture().await;
    f.server.pause().await;
    let cancel = CancellationToken::new();
    let mut sets = start_source(&f.client, &cancel);
    let got = sets.drain_for(Duration::from_secs(2)).await;
    assert!(got.is_empty(), "reported without a list: {got:?}");
    f.server.resume().await.unwrap();
    let first = sets.until("first list after the outage", |_| true).await;
    assert!(first.is_empty());
    cancel.cancel();
}

// ---------------------------------------------------------------------------------------
// Mirror pods.

fn static_pod(name: &str, image: &str) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: {name}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
    );
    let path = format!("/etc/kubernetes/manifests/{name}.yaml");
    static_pods_from_manifest(
        yaml.as_bytes(),
        NODE,
        &ManifestOrigin::File(Path::new(&path)),
        false,
    )
    .unwrap()
    .remove(0)
}

/// Sources → merger → a pod manager (as the sync loop keeps it) → mirror reconciler.
struct MirrorHarness {
    file_tx: mpsc::Sender<PodUpdate>,
    pods: watch::Receiver<kubelet::types::PodsSnapshot>,
    mirrors: watch::Receiver<Arc<HashMap<String, Pod>>>,
    _node_tx: watch::Sender<Option<Arc<Node>>>,
    cancel: CancellationToken,
}

/// Applies the merged updates to `pm`, and turns `applied` true once both sources have
/// reported and nothing they sent is still queued (the sync loop's `SourcesApplied`: the
/// merger's own "seen" runs ahead of the pod manager, and the reconciler must not act on it).
async fn run_pod_manager(
    mut pm: PodManager,
    mut rx: mpsc::Receiver<PodUpdate>,
    seen: SeenSources,
    applied: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            u = rx.recv() => {
                let Some(u) = u else { return };
                for p in u.pods {
                    if u.op == PodOp::Remove {
                        pm.remove(p.uid());
                    } else {
                        pm.upsert(p);
                    }
                }
            }
            _ = tick.tick() => {}
        }
        // The merger marks a source seen only after queueing its pods: seen and an empty
        // queue mean every one of them is in `pm`.
        if seen.seen_all(&[PodSource::File, PodSource::Api]) && rx.is_empty() {
            applied.send_if_modified(|a| !std::mem::replace(a, true));
        }
    }
}

fn start_mirror_harness(f: &Fixture, node: Node) -> MirrorHarness {
    let cancel = CancellationToken::new();
    let (source_tx, source_rx) = mpsc::channel(64);
    let (merged_tx, merged_rx) = mpsc::channel(64);
    let merger = PodConfigMerger::new();
    let seen = merger.seen_sources();
    tokio::spawn(merger.run(source_rx, merged_tx, cancel.clone()));
    tokio::spawn(ApiSource::new(f.client.clone(), NODE, source_tx.clone()).run(cancel.clone()));
    let pm = PodManager::new();
    let pods = pm.subscribe();
    let mirrors = pm.subscribe_mirrors();
    let (applied_tx, applied) = watch::channel(false);
    tokio::spawn(run_pod_manager(
        pm,
        merged_rx,
        seen,
        applied_tx,
        cancel.clone(),
    ));
    let (node_tx, node_rx) = watch::channel(Some(Arc::new(node)));
    let reconciler = MirrorPodReconciler::new(
        f.client.clone(),
        NODE,
        pods.clone(),
        mirrors.clone(),
        node_rx,
        Duration::from_millis(300),
        Box::new(move || *applied.borrow()),
    );
    tokio::spawn(reconciler.run(cancel.clone()));
    MirrorHarness {
        file_tx: source_tx,
        pods,
        mirrors,
        _node_tx: node_tx,
        cancel,
    }
}

impl MirrorHarness {
    async fn set_static(&self, pods: Vec<Pod>) {
        self.file_tx
            .send(PodUpdate::new(PodOp::Set, PodSource::File, pods))
            .await
            .unwrap();
    }
}

/// Polls the fixture until `pred` holds for the pod `default/name` (or its absence).
async fn wait_api_pod(
    f: &Fixture,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pod = f.server.get("pods", "default", name);
        if pred(pod.as_ref()) {
            return pod;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {pod:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn mirror_hash(v: &Value) -> Option<&str> {
    v["metadata"]["annotations"][CONFIG_MIRROR_ANNOTATION].as_str()
}

fn uid_of(v: &Value) -> String {
    v["metadata"]["uid"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn mirror_reconciler_creates_recreates_replaces_and_deletes_mirror_pods() {
    let f = fixture().await;
    let node_json = f
        .server
        .create(
            "nodes",
            "",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}),
        )
        .unwrap();
    let node_uid = uid_of(&node_json);
    let node: Node = serde_json::from_value(node_json).unwrap();
    // A leftover mirror pod whose static pod is gone.
    let mut orphan = api_pod("old-node-a", Some(NODE));
    orphan["metadata"]["annotations"] = json!({CONFIG_MIRROR_ANNOTATION: "stale"});
    f.server.create("pods", "default", orphan).unwrap();

    let h = start_mirror_harness(&f, node);
    let web = static_pod("web", "busybox:1");
    let hash = web.annotation(CONFIG_HASH_ANNOTATION).unwrap().to_owned();
    h.set_static(vec![web.clone()]).await;

    // Created, with the Node as controller, and the orphan is gone.
    let mirror = wait_api_pod(&f, "web-node-a", "mirror pod", |p| {
        p.is_some_and(|p| mirror_hash(p) == Some(hash.as_str()))
    })
    .await
    .unwrap();
    assert_eq!(
        mirror["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": true}])
    );
    assert_eq!(mirror["spec"]["nodeName"], json!(NODE));
    assert_eq!(mirror["spec"]["containers"][0]["image"], json!("busybox:1"));
    assert_eq!(mirror["metadata"]["labels"]["app"], json!("web"));
    assert_ne!(uid_of(&mirror), web.uid());
    wait_api_pod(&f, "old-node-a", "orphan deleted", |p| p.is_none()).await;

    // The pod manager files it as the mirror of the static pod, never as a regular pod.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !h.mirrors.borrow().contains_key("default/web-node-a") {
        assert!(
            Instant::now() < deadline,
            "mirror never reached the pod manager"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(names(&h.pods.borrow()), ["web-node-a"]);
    assert_eq!(h.pods.borrow()[0].uid(), web.uid());

    // Deleted through the API (graceful, as kubectl does): replaced by a fresh one.
    let api = pods_api(&f.client);
    let first_uid = uid_of(&mirror);
    api.delete("web-node-a", &DeleteParams::default())
        .await
        .unwrap();
    let second = wait_api_pod(
        &f,
        "web-node-a",
        "mirror recreated after graceful delete",
        |p| {
            p.is_some_and(|p| {
                uid_of(p) != first_uid && p["metadata"]["deletionTimestamp"].is_null()
            })
        },
    )
    .await
    .unwrap();
    // Deleted outright: recreated.
    let second_uid = uid_of(&second);
    api.delete("web-node-a", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let third = wait_api_pod(
        &f,
        "web-node-a",
        "mirror recreated after forced delete",
        |p| p.is_some_and(|p| uid_of(p) != second_uid),
    )
    .await
    .unwrap();
    assert_eq!(mirror_hash(&third), Some(hash.as_str()));

    // The manifest changes (new hash): the mirror is replaced.
    let web2 = static_pod("web", "busybox:2");
    let hash2 = web2.annotation(CONFIG_HASH_ANNOTATION).unwrap().to_owned();
    assert_ne!(hash, hash2);
    h.set_static(vec![web2]).await;
    let replaced = wait_api_pod(&f, "web-node-a", "mirror replaced", |p| {
        p.is_some_and(|p| mirror_hash(p) == Some(hash2.as_str()))
    })
    .await
    .unwrap();
    assert_eq!(
        replaced["spec"]["containers"][0]["image"],
        json!("busybox:2")
    );

    // The static pod goes: so does its mirror.
    h.set_static(vec![]).await;
    wait_api_pod(&f, "web-node-a", "mirror deleted", |p| p.is_none()).await;
    h.cancel.cancel();
}

#[tokio::test]
async fn mirror_reconciler_waits_for_the_node_and_the_sources() {
    let f = fixture().await;
    let cancel = CancellationToken::new();
    let web = static_pod("web", "busybox:1");
    let (_pods_tx, pods_rx) = watch::channel(kubelet::types::pods_snapshot([web]));
    let (_mirrors_tx, mirrors_rx) = watch::channel(Arc::new(HashMap::new()));
    let (node_tx, node_rx) = watch::channel(None);
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = ready.clone();
    tokio::spawn(
        MirrorPodReconciler::new(
            f.client.clone(),
            NODE,
            pods_rx,
            mirrors_rx,
            node_rx,
            Duration::from_millis(200),
            Box::new(move || r.load(std::sync::atomic::Ordering::SeqCst)),
        )
        .run(cancel.clone()),
    );
    let node_json = f
        .server
        .create("nodes", "", json!({"metadata": {"name": NODE}}))
        .unwrap();
    node_tx.send_replace(Some(Arc::new(serde_json::from_value(node_json).unwrap())));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(f.server.get("pods", "default", "web-node-a").is_none());
    assert_eq!(f.server.request_counts().get("POST pods"), None);

    // Sources ready but no node: still nothing.
    node_tx.send_replace(None);
    ready.store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(f.server.get("pods", "default", "web-node-a").is_none());

    let node_json = f.server.get("nodes", "", NODE).unwrap();
    node_tx.send_replace(Some(Arc::new(serde_json::from_value(node_json).unwrap())));
    wait_api_pod(&f, "web-node-a", "mirror pod", |p| p.is_some()).await;
    cancel.cancel();
}

// ---------------------------------------------------------------------------------------
// The sync loop keeps mirror pods away from pod workers.

#[tokio::test(start_paused = true)]
async fn sync_loop_stores_mirror_pods_apart_and_never_runs_them() {
    use kubelet::agent::{Agent, AgentConfig, AgentDeps};
    use kubelet::events::CollectingRecorder;
    use rkubelet_cri::fake::FakeRuntime;

    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[
        "docker.io/library/busybox:1",
        "docker.io/library/busybox:latest",
    ]);
    let deps = AgentDeps {
        runtime: Arc::new(fake.clone()),
        images: Arc::new(fake.clone()),
        events: Arc::new(CollectingRecorder::default()),
        api: None,
    };
    let agent = Agent::start(
        AgentConfig::for_tests(dir.path(), NODE),
        deps,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let web = static_pod("web", "busybox:1");
    let mut mirror = web.clone();
    mirror.metadata.uid = Some("mirror-uid".into());
    mirror
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            CONFIG_MIRROR_ANNOTATION.into(),
            web.annotation(CONFIG_HASH_ANNOTATION).unwrap().into(),
        );
    let mut regular: Pod = serde_json::from_value(json!({
        "metadata": {"name": "api-pod", "namespace": "default", "uid": "api-uid"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent"}]}
    }))
    .unwrap();
    kubelet::sources::defaults::set_pod_defaults(&mut regular);
    for (source, pods) in [
        (PodSource::File, vec![web.clone()]),
        (PodSource::Api, vec![mirror, regular]),
    ] {
        agent
            .source_tx
            .send(PodUpdate::new(PodOp::Set, source, pods))
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while fake.sandboxes().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "pods never started: {:?}",
            fake.calls()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let sandboxes: Vec<String> = fake
        .sandboxes()
        .iter()
        .filter_map(|s| s.metadata.as_ref().map(|m| m.uid.clone()))
        .collect();
    assert_eq!(sandboxes.len(), 2, "{sandboxes:?}");
    assert!(!sandboxes.contains(&"mirror-uid".to_owned()));
    assert_eq!(names(&agent.pods.borrow()), ["api-pod", "web-node-a"]);
    agent.shutdown().await;
}

#[tokio::test]
async fn gated_source_waits_for_the_node() {
    let f = fixture().await;
    f.server
        .create("pods", "default", api_pod("p1", Some(NODE)))
        .unwrap();
    let cancel = CancellationToken::new();
    let (node_tx, node_rx) = watch::channel(None);
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(
        ApiSource::new(f.client.clone(), NODE, tx)
            .with_node_gate(node_rx)
            .run(cancel.clone()),
    );
    let mut sets = Sets {
        rx,
        all: Vec::new(),
    };
    assert!(sets.drain_for(Duration::from_secs(1)).await.is_empty());
    assert_eq!(f.server.request_counts().get("LIST pods"), None);
    let node = f
        .server
        .create("nodes", "", json!({"metadata": {"name": NODE}}))
        .unwrap();
    node_tx.send_replace(Some(Arc::new(serde_json::from_value(node).unwrap())));
    let first = sets.until("list after the node is known", |_| true).await;
    assert_eq!(names(&first), ["p1"]);
    cancel.cancel();
}
