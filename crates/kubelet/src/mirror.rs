//! Mirror pods (upstream `mirror_client.go`, the mirror-pod block of `SyncPod` and
//! `deleteOrphanedMirrorPods`): owns every API write of mirror pods. Receives the desired pods
//! (pod manager snapshot; static pods are those from file/http), the mirror pods seen through
//! the API source (pod manager mirror snapshot, by full name), this node's `Node`, a readiness
//! check of the pod sources and a period; emits `POST`s of mirror pods for static pods that
//! have none and grace-0, UID-preconditioned `DELETE`s of mirror pods that are being deleted,
//! outdated (hash mismatch) or orphaned. Deciding is pure (`plan_mirror_actions`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, PostParams, Preconditions};
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::sync_loop::SourcesReady;
use crate::types::{CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION, PodExt};

/// Failures of one mirror-pod API call or its preconditions; logged, retried next period.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("creating mirror pod {pod}: {source}")]
    Create { pod: String, source: kube::Error },
    #[error("deleting mirror pod {pod} (uid {uid}): {source}")]
    Delete {
        pod: String,
        uid: String,
        source: kube::Error,
    },
    #[error("UID unset for node {0}")]
    NodeUidUnset(String),
}

/// Upstream `IsMirrorPod`: the pod carries the `kubernetes.io/config.mirror` annotation.
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.annotation(CONFIG_MIRROR_ANNOTATION).is_some()
}

/// Upstream `IsMirrorPodOf`: same namespace and name, and the mirror's annotation equals the
/// static pod's `kubernetes.io/config.hash`.
pub fn mirror_pod_matches(static_pod: &Pod, mirror: &Pod) -> bool {
    if static_pod.name() != mirror.name() || static_pod.namespace() != mirror.namespace() {
        return false;
    }
    match mirror.annotation(CONFIG_MIRROR_ANNOTATION) {
        Some(hash) => {
            hash == static_pod
                .annotation(CONFIG_HASH_ANNOTATION)
                .unwrap_or_default()
        }
        None => false,
    }
}

/// Upstream `CreateMirrorPod`'s object: a copy of the static pod without the server-owned
/// fields (uid, resourceVersion, timestamps, status), annotated with
/// `kubernetes.io/config.mirror=<hash>` and controlled by the Node.
pub fn build_mirror_pod(static_pod: &Pod, node: &Node) -> Pod {
    let mut pod = static_pod.clone();
    let hash = static_pod
        .annotation(CONFIG_HASH_ANNOTATION)
        .unwrap_or_default()
        .to_owned();
    let meta = &mut pod.metadata;
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.generation = None;
    meta.managed_fields = None;
    meta.self_link = None;
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(CONFIG_MIRROR_ANNOTATION.into(), hash);
    meta.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone().unwrap_or_default(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    pod.status = None;
    pod
}

/// Why a mirror pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// It has a deletionTimestamp while its static pod still exists.
    BeingDeleted,
    /// Its hash does not match its static pod's.
    Outdated,
    /// No pod of this node has its full name any more.
    Orphaned,
}

impl DeleteReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeleteReason::BeingDeleted => "mirror pod is being deleted",
            DeleteReason::Outdated => "mirror pod does not match its static pod",
            DeleteReason::Orphaned => "static pod is gone",
        }
    }
}

/// One API write the reconciler should make.
#[derive(Debug, Clone, PartialEq)]
pub enum MirrorAction {
    /// Delete `mirror` (grace 0, its UID as precondition); then, when that succeeded, create a
    /// mirror of `then_create`.
    Delete {
        mirror: Pod,
        reason: DeleteReason,
        then_create: Option<Box<Pod>>,
    },
    /// Create a mirror of this static pod.
    Create(Pod),
}

/// Whether the static pod a mirror pod stands for still has containers that may run (its
/// worker has not finished terminating). Upstream keeps such an orphaned mirror pod until the
/// static pod is down (`IsPodForMirrorPodTerminatingByFullName`).
pub type StaticPodRunning = Arc<dyn Fn(&Pod) -> bool + Send + Sync>;

/// Decides the mirror-pod writes (upstream `tryReconcileMirrorPods` for every static pod, then
/// the orphan clean-up). `pods` are the regular desired pods of every source; static ones get a
/// mirror. An orphaned mirror pod whose static pod is still `running` is kept for now. Output is
/// ordered by full name: static pods first, then orphans.
pub fn plan_mirror_actions(
    pods: &[impl std::borrow::Borrow<Pod>],
    mirrors: &HashMap<String, Pod>,
    running: &dyn Fn(&Pod) -> bool,
) -> Vec<MirrorAction> {
    let mut actions = Vec::new();
    let mut statics: Vec<&Pod> = pods
        .iter()
        .map(std::borrow::Borrow::borrow)
        .filter(|p: &&Pod| p.source().is_some_and(|s| s.is_static()))
        .collect();
    statics.sort_by_key(|p| p.full_name());
    for static_pod in statics {
        match mirrors.get(&static_pod.full_name()) {
            None => actions.push(MirrorAction::Create(static_pod.clone())),
            Some(mirror) => {
                let reason = if mirror.metadata.deletion_timestamp.is_some() {
                    DeleteReason::BeingDeleted
                } else if !mirror_pod_matches(static_pod, mirror) {
                    DeleteReason::Outdated
                } else {
                    continue;
                };
                actions.push(MirrorAction::Delete {
                    mirror: mirror.clone(),
                    reason,
                    then_create: Some(Box::new(static_pod.clone())),
                });
            }
        }
    }
    let names: HashSet<String> = pods.iter().map(|p| p.borrow().full_name()).collect();
    let mut orphans: Vec<(&String, &Pod)> = mirrors
        .iter()
        .filter(|(name, mirror)| !names.contains(*name) && !running(mirror))
        .collect();
    orphans.sort_by(|a, b| a.0.cmp(b.0));
    for (_, mirror) in orphans {
        actions.push(MirrorAction::Delete {
            mirror: mirror.clone(),
            reason: DeleteReason::Orphaned,
            then_create: None,
        });
    }
    actions
}

/// The mirror pod reconciler task.
pub struct MirrorPodReconciler {
    client: kube::Client,
    node_name: String,
    pods: watch::Receiver<crate::types::PodsSnapshot>,
    mirrors: watch::Receiver<Arc<HashMap<String, Pod>>>,
    node: watch::Receiver<Option<Arc<Node>>>,
    period: Duration,
    sources_ready: SourcesReady,
    static_running: StaticPodRunning,
}

/// What one delete achieved (upstream `DeleteMirrorPod`'s bool).
enum Deleted {
    Yes,
    /// 404 / 409: someone else removed or replaced it.
    AlreadyGone,
}

impl MirrorPodReconciler {
    /// `pods`: the pod manager's regular pods (`PodManager::subscribe`); `mirrors`: its mirror
    /// pods (`PodManager::subscribe_mirrors`); `node`: this node's `Node` once known;
    /// `sources_ready`: every configured pod source (the API source included) has reported —
    /// until then nothing is written, so a half-known state never deletes a mirror pod.
    pub fn new(
        client: kube::Client,
        node_name: impl Into<String>,
        pods: watch::Receiver<crate::types::PodsSnapshot>,
        mirrors: watch::Receiver<Arc<HashMap<String, Pod>>>,
        node: watch::Receiver<Option<Arc<Node>>>,
        period: Duration,
        sources_ready: SourcesReady,
    ) -> Self {
        Self {
            client,
            node_name: node_name.into(),
            pods,
            mirrors,
            node,
            period,
            sources_ready,
            static_running: Arc::new(|_: &Pod| false),
        }
    }

    /// Keeps an orphaned mirror pod while `running` says its static pod is still terminating
    /// (default: never held).
    pub fn with_static_running(mut self, running: StaticPodRunning) -> Self {
        self.static_running = running;
        self
    }

    /// Reconciles every `period` and whenever an input changes, until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        info!(node = %self.node_name, period = ?self.period, "starting mirror pod reconciler");
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let (mut pods_open, mut mirrors_open, mut node_open) = (true, true, true);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => {}
                _ = changed(&mut self.pods, &mut pods_open) => {}
                _ = changed(&mut self.mirrors, &mut mirrors_open) => {}
                _ = changed(&mut self.node, &mut node_open) => {}
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.reconcile_once() => {}
            }
        }
        info!(node = %self.node_name, "mirror pod reconciler stopped");
    }

    /// One pass over the current inputs.
    pub async fn reconcile_once(&mut self) {
        if !(self.sources_ready)() {
            debug!("skipping mirror pod reconcile: not all pod sources have reported yet");
            return;
        }
        let pods = self.pods.borrow_and_update().clone();
        let mirrors = self.mirrors.borrow_and_update().clone();
        let node = self.node.borrow_and_update().clone();
        for action in plan_mirror_actions(&pods, &mirrors, self.static_running.as_ref()) {
            match action {
                MirrorAction::Create(static_pod) => self.create(&static_pod, node.as_deref()).await,
                MirrorAction::Delete {
                    mirror,
                    reason,
                    then_create,
                } => {
                    let deleted = match self.delete(&mirror, reason).await {
                        Ok(d) => d,
                        Err(e) => {
                            warn!(pod = %mirror.full_name(), uid = %mirror.uid(), reason = reason.as_str(), error = %e, "failed deleting mirror pod; retrying next period");
                            continue;
                        }
                    };
                    if let (Deleted::Yes, Some(static_pod)) = (deleted, then_create) {
                        self.create(&static_pod, node.as_deref()).await;
                    }
                }
            }
        }
    }

    /// Upstream: the Node is needed (for the owner reference) and must not be going away.
    async fn create(&self, static_pod: &Pod, node: Option<&Node>) {
        let full_name = static_pod.full_name();
        let Some(node) = node else {
            debug!(pod = %full_name, uid = %static_pod.uid(), node = %self.node_name, reason = "node not known yet", "not creating mirror pod");
            return;
        };
        if node.metadata.deletion_timestamp.is_some() {
            info!(pod = %full_name, uid = %static_pod.uid(), node = %self.node_name, reason = "node is being deleted", "not creating mirror pod");
            return;
        }
        if let Err(e) = self.try_create(static_pod, node).await {
            warn!(pod = %full_name, uid = %static_pod.uid(), reason = "create failed", error = %e, "failed creating mirror pod; retrying next period");
        }
    }

    async fn try_create(&self, static_pod: &Pod, node: &Node) -> Result<(), MirrorError> {
        if node.metadata.uid.as_deref().unwrap_or_default().is_empty() {
            return Err(MirrorError::NodeUidUnset(self.node_name.clone()));
        }
        let mirror = build_mirror_pod(static_pod, node);
        let api: kube::Api<Pod> =
            kube::Api::namespaced(self.client.clone(), static_pod.namespace());
        match api.create(&PostParams::default(), &mirror).await {
            Ok(created) => {
                info!(pod = %static_pod.full_name(), uid = %static_pod.uid(), mirror_uid = %created.uid(), reason = "static pod has no mirror pod", "created mirror pod");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                debug!(pod = %static_pod.full_name(), uid = %static_pod.uid(), reason = "already exists", "mirror pod already exists");
                Ok(())
            }
            Err(source) => Err(MirrorError::Create {
                pod: static_pod.full_name(),
                source,
            }),
        }
    }

    /// Upstream `DeleteMirrorPod`: grace 0 with the mirror's UID as precondition; 404 and 409
    /// mean someone else already removed or replaced it.
    async fn delete(&self, mirror: &Pod, reason: DeleteReason) -> Result<Deleted, MirrorError> {
        let api: kube::Api<Pod> = kube::Api::namespaced(self.client.clone(), mirror.namespace());
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(mirror.uid().to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(mirror.name(), &params).await {
            Ok(_) => {
                info!(pod = %mirror.full_name(), uid = %mirror.uid(), reason = reason.as_str(), "deleted mirror pod");
                Ok(Deleted::Yes)
            }
            Err(kube::Error::Api(status)) if status.is_not_found() || status.is_conflict() => {
                debug!(pod = %mirror.full_name(), uid = %mirror.uid(), reason = reason.as_str(), code = status.code, "mirror pod already gone or replaced");
                Ok(Deleted::AlreadyGone)
            }
            Err(source) => Err(MirrorError::Delete {
                pod: mirror.full_name(),
                uid: mirror.uid().to_owned(),
                source,
            }),
        }
    }
}

/// Resolves when `rx` changes; pends forever once its sender is gone (no busy loop).
async fn changed<T>(rx: &mut watch::Receiver<T>, open: &mut bool) {
    if *open && rx.changed().await.is_ok() {
        return;
    }
    *open = false;
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::CONFIG_SOURCE_ANNOTATION;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(name: &str, uid: &str, annotations: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("kube-system".into()),
                uid: Some(uid.into()),
                resource_version: Some("7".into()),
                generation: Some(1),
                creation_timestamp: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_second(1).unwrap(),
                )),
                labels: Some([("app".to_string(), "web".to_string())].into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-a".into()),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("busybox".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            }),
        }
    }

    fn static_pod(name: &str, hash: &str) -> Pod {
        pod(
            name,
            hash,
            &[
                (CONFIG_SOURCE_ANNOTATION, "file"),
                (CONFIG_HASH_ANNOTATION, hash),
            ],
        )
    }

    fn mirror(name: &str, uid: &str, hash: &str) -> Pod {
        pod(
            name,
            uid,
            &[
                (CONFIG_SOURCE_ANNOTATION, "api"),
                (CONFIG_HASH_ANNOTATION, hash),
                (CONFIG_MIRROR_ANNOTATION, hash),
            ],
        )
    }

    fn node() -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("node-a".into()),
                uid: Some("node-uid".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn mirror_detection_and_matching() {
        let s = static_pod("web-node-a", "h1");
        let m = mirror("web-node-a", "m1", "h1");
        assert!(!is_mirror_pod(&s));
        assert!(is_mirror_pod(&m));
        assert!(mirror_pod_matches(&s, &m));
        assert!(!mirror_pod_matches(&s, &mirror("web-node-a", "m1", "h2")));
        assert!(!mirror_pod_matches(&s, &mirror("other-node-a", "m1", "h1")));
        let mut other_ns = m.clone();
        other_ns.metadata.namespace = Some("default".into());
        assert!(!mirror_pod_matches(&s, &other_ns));
        // No mirror annotation: never a match.
        assert!(!mirror_pod_matches(&s, &s));
    }

    #[test]
    fn build_mirror_pod_copies_spec_and_sets_owner() {
        let s = static_pod("web-node-a", "h1");
        let m = build_mirror_pod(&s, &node());
        assert_eq!(m.metadata.name, s.metadata.name);
        assert_eq!(m.metadata.namespace, s.metadata.namespace);
        assert_eq!(m.metadata.labels, s.metadata.labels);
        assert_eq!(m.spec, s.spec);
        assert!(m.status.is_none());
        assert!(m.metadata.uid.is_none());
        assert!(m.metadata.resource_version.is_none());
        assert!(m.metadata.creation_timestamp.is_none());
        assert!(m.metadata.generation.is_none());
        assert_eq!(m.annotation(CONFIG_MIRROR_ANNOTATION), Some("h1"));
        assert_eq!(m.annotation(CONFIG_HASH_ANNOTATION), Some("h1"));
        assert_eq!(m.annotation(CONFIG_SOURCE_ANNOTATION), Some("file"));
        assert_eq!(
            m.metadata.owner_references,
            Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: "node-a".into(),
                uid: "node-uid".into(),
                controller: Some(true),
                block_owner_deletion: None,
            }])
        );
        assert!(is_mirror_pod(&m));
        // The copy mirrors the static pod it came from.
        let mut seen = m.clone();
        seen.metadata.uid = Some("m1".into());
        assert!(mirror_pod_matches(&s, &seen));
    }

    fn summary(actions: &[MirrorAction]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                MirrorAction::Create(p) => format!("create {}", p.name()),
                MirrorAction::Delete {
                    mirror,
                    reason,
                    then_create,
                } => format!(
                    "delete {} {:?}{}",
                    mirror.uid(),
                    reason,
                    then_create
                        .as_ref()
                        .map(|p| format!(" then create {}", p.name()))
                        .unwrap_or_default()
                ),
            })
            .collect()
    }

    fn by_name(mirrors: &[Pod]) -> HashMap<String, Pod> {
        mirrors.iter().map(|m| (m.full_name(), m.clone())).collect()
    }

    #[test]
    fn plan_covers_create_replace_and_orphans() {
        let api_pod = pod("api", "a1", &[(CONFIG_SOURCE_ANNOTATION, "api")]);
        let deleting = {
            let mut m = mirror("c-node-a", "mc", "hc");
            m.metadata.deletion_timestamp =
                Some(Time(k8s_openapi::jiff::Timestamp::from_second(9).unwrap()));
            m
        };
        type Case = (&'static str, Vec<Pod>, Vec<Pod>, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            ("nothing", vec![], vec![], vec![]),
            (
                "static pod without mirror; api pods get none",
                vec![static_pod("a-node-a", "ha"), api_pod.clone()],
                vec![],
                vec!["create a-node-a"],
            ),
            (
                "matching mirror: nothing to do",
                vec![static_pod("a-node-a", "ha")],
                vec![mirror("a-node-a", "ma", "ha")],
                vec![],
            ),
            (
                "outdated and deleting mirrors are replaced",
                vec![static_pod("b-node-a", "hb2"), static_pod("c-node-a", "hc")],
                vec![mirror("b-node-a", "mb", "hb1"), deleting],
                vec![
                    "delete mb Outdated then create b-node-a",
                    "delete mc BeingDeleted then create c-node-a",
                ],
            ),
            (
                "orphans are deleted, a regular pod of the same name is no orphan",
                vec![api_pod.clone()],
                vec![mirror("z-node-a", "mz", "hz"), mirror("api", "mx", "hx")],
                vec!["delete mz Orphaned"],
            ),
            (
                "an orphan whose static pod is still terminating is kept",
                vec![],
                vec![
                    mirror("t-node-a", "mt", "ht"),
                    mirror("u-node-a", "mu", "hu"),
                ],
                vec!["delete mu Orphaned"],
            ),
        ];
        let terminating = |m: &Pod| m.annotation(CONFIG_MIRROR_ANNOTATION) == Some("ht");
        for (name, pods, mirrors, want) in cases {
            let got = plan_mirror_actions(&pods, &by_name(&mirrors), &terminating);
            assert_eq!(summary(&got), want, "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn run_stops_on_cancel_and_survives_closed_inputs() {
        // A client that is never used: sources are not ready, so nothing is written.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let (pods_tx, pods_rx) =
            watch::channel(crate::types::pods_snapshot([static_pod("a-node-a", "ha")]));
        let (mirrors_tx, mirrors_rx) = watch::channel(Arc::new(HashMap::new()));
        let (node_tx, node_rx) = watch::channel(None);
        drop((pods_tx, mirrors_tx, node_tx));
        let r = MirrorPodReconciler::new(
            client,
            "node-a",
            pods_rx,
            mirrors_rx,
            node_rx,
            Duration::from_secs(2),
            Box::new(|| false),
        );
        let cancel = CancellationToken::new();
        let task = tokio::spawn(r.run(cancel.clone()));
        tokio::time::sleep(Duration::from_secs(10)).await;
        cancel.cancel();
        task.await.unwrap();
    }
}
