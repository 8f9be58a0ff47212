//! API-server mode wiring (upstream `NewMainKubelet`'s kubeClient branches): starts the node
//! status manager, node lease, API pod source, mirror pod reconciler, status syncer and event
//! sink on one client. Receives the agent's channels and snapshots; owns nothing itself — each
//! task it spawns owns its piece (the Node, the lease, the API pod set, mirror pods, pushed
//! statuses, queued events) and stops with the agent's cancellation tree.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use rkubelet_cri::{ImageService, RuntimeService};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::events::EventRecorder;
use crate::events_api::{ApiEventRecorder, EventSettings};
use crate::health::HealthCheck;
use crate::host::HostInfo;
use crate::mirror::MirrorPodReconciler;
use crate::nodelease::NodeLease;
use crate::nodestatus::NodeStatusSettings;
use crate::nodestatus::manager::NodeStatusManager;
use crate::pod_workers::{PodWorkers, WorkerPhase};
use crate::sources::api::ApiSource;
use crate::status::api_sync::{ApiStatusSyncer, ApiSyncSettings, StatusTarget};
use crate::status::manager::StatusManager;
use crate::supervisor::Supervisor;
use crate::sync_loop::SourcesApplied;
use crate::types::{CONFIG_MIRROR_ANNOTATION, PodExt, PodUpdate};

/// Settings only API-server mode uses.
#[derive(Debug, Clone)]
pub struct ApiModeConfig {
    /// `nodeLeaseDurationSeconds` (the lease is renewed every quarter of it).
    pub node_lease_duration_secs: i32,
    /// `eventRecordQPS` / `eventBurst` (0 QPS: no rate limit, as upstream).
    pub event_qps: f64,
    pub event_burst: u32,
    /// How often every pod's status is compared with the API (upstream status manager's 10 s).
    pub status_sync_period: Duration,
    /// How often mirror pods are reconciled besides on every change of their inputs.
    pub mirror_period: Duration,
}

impl Default for ApiModeConfig {
    fn default() -> Self {
        Self {
            node_lease_duration_secs: 40,
            event_qps: 50.0,
            event_burst: 100,
            status_sync_period: Duration::from_secs(10),
            mirror_period: Duration::from_secs(10),
        }
    }
}

/// The event recorder of API-server mode and its sink task (spawned on `sup`).
pub(super) fn start_events(
    client: &kube::Client,
    node_name: &str,
    cfg: &ApiModeConfig,
    sup: &Supervisor,
    cancel: &CancellationToken,
) -> Arc<dyn EventRecorder> {
    let (recorder, sink) = ApiEventRecorder::new(
        client.clone(),
        node_name,
        EventSettings {
            qps: cfg.event_qps,
            burst: cfg.event_burst,
            ..EventSettings::default()
        },
    );
    sup.spawn_critical("event sink", sink.run(cancel.child_token()));
    Arc::new(recorder)
}

/// What the API tasks read from and write to.
pub(super) struct ApiInputs {
    pub client: kube::Client,
    pub runtime: Arc<dyn RuntimeService>,
    pub images: Arc<dyn ImageService>,
    pub events: Arc<dyn EventRecorder>,
    pub node_settings: NodeStatusSettings,
    pub host: HostInfo,
    /// Checks whose failure makes the node NotReady (upstream: `PLEG`).
    pub node_health: Vec<(String, HealthCheck)>,
    /// Where the API source sends its pod updates (the config merger's input).
    pub source_tx: mpsc::Sender<PodUpdate>,
    /// Where the API source records pods' unknown fields (admission reads it).
    pub unknown_fields: crate::sources::unknown_fields::UnknownFields,
    /// The Node the admission predicates check against.
    pub admission_node: watch::Sender<Arc<Node>>,
    pub pods: watch::Receiver<crate::types::PodsSnapshot>,
    pub mirrors: watch::Receiver<Arc<HashMap<String, Pod>>>,
    /// Ready once the pod manager has every pod of every source (the mirror reconciler
    /// deletes mirror pods whose static pod it does not see).
    pub sources_applied: SourcesApplied,
    pub status: StatusManager,
    pub workers: PodWorkers,
    /// The eviction manager's pressure verdict (node conditions).
    pub pressure: watch::Receiver<crate::nodestatus::setters::NodePressure>,
    /// The node shutdown manager's not-ready reason and its "update the node now" trigger.
    pub shutdown: Option<(
        crate::nodestatus::manager::NotReadyFn,
        Arc<tokio::sync::Notify>,
    )>,
}

/// Spawns every API-mode task on `sup`.
pub(super) fn start(
    cfg: &ApiModeConfig,
    inputs: ApiInputs,
    sup: &Supervisor,
    cancel: &CancellationToken,
) {
    let ApiInputs {
        client,
        runtime,
        images,
        events,
        node_settings,
        host,
        node_health,
        source_tx,
        unknown_fields,
        admission_node,
        pods,
        mirrors,
        sources_applied,
        status,
        workers,
        pressure,
        shutdown,
    } = inputs;
    let node_name = node_settings.node_name.clone();
    let request_timeout = node_settings.request_timeout;
    // Node status and the lease never wait behind kubeAPIQPS (upstream's heartbeat client).
    let heartbeat = crate::apiclient::heartbeat_client(&client);

    let (node_status, node_rx) = NodeStatusManager::new(
        client.clone(),
        runtime,
        images,
        node_settings,
        host,
        node_health,
    );
    let pressure_fn: crate::nodestatus::manager::PressureFn = Arc::new(move || *pressure.borrow());
    let mut node_status = node_status
        .with_heartbeat_client(heartbeat.clone())
        .with_events(events)
        .with_pressure(pressure_fn);
    if let Some((not_ready, sync_now)) = shutdown {
        node_status = node_status
            .with_not_ready(not_ready)
            .with_sync_trigger(sync_now);
    }
    sup.spawn_critical("node status", node_status.run(cancel.child_token()));
    sup.spawn_critical(
        "node forwarder",
        forward_node(node_rx.clone(), admission_node, cancel.child_token()),
    );

    let lease = NodeLease::new(
        heartbeat,
        &node_name,
        cfg.node_lease_duration_secs,
        node_rx.clone(),
    )
    .with_request_timeout(request_timeout);
    sup.spawn_critical("node lease", lease.run(cancel.child_token()));

    let source = ApiSource::new(client.clone(), node_name.clone(), source_tx)
        .with_node_gate(node_rx.clone())
        .with_unknown_fields(unknown_fields);
    sup.spawn_critical("api pod source", source.run(cancel.child_token()));

    let static_workers = workers.clone();
    let mirror = MirrorPodReconciler::new(
        client.clone(),
        node_name,
        pods.clone(),
        mirrors.clone(),
        node_rx,
        cfg.mirror_period,
        Box::new(move || sources_applied.ready()),
    )
    .with_static_running(Arc::new(move |mirror: &Pod| {
        // The mirror annotation holds the static pod's hash, which is its UID.
        mirror
            .annotation(CONFIG_MIRROR_ANNOTATION)
            .is_some_and(|uid| may_run(static_workers.phase(uid)))
    }));
    sup.spawn_critical("mirror pods", mirror.run(cancel.child_token()));

    let lookup = Arc::new(move |uid: &str| status_target(&pods.borrow(), &mirrors.borrow(), uid));
    let (finished, running_workers) = (status.clone(), workers.clone());
    let can_be_deleted = Arc::new(move |uid: &str| {
        finished.is_finished(uid) || resources_reclaimed(workers.phase(uid))
    });
    let could_have_running = Arc::new(move |uid: &str| may_run(running_workers.phase(uid)));
    let syncer = ApiStatusSyncer::new(
        client,
        status,
        lookup,
        can_be_deleted,
        could_have_running,
        ApiSyncSettings {
            sync_period: cfg.status_sync_period,
            ..ApiSyncSettings::default()
        },
    );
    sup.spawn_critical("status syncer", syncer.run(cancel.child_token()));
}

/// Keeps the admission predicates' Node current with the API server's view of it.
async fn forward_node(
    mut from: watch::Receiver<Option<Arc<Node>>>,
    to: watch::Sender<Arc<Node>>,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = from.changed() => if changed.is_err() { return },
        }
        let node = from.borrow_and_update().clone();
        if let Some(node) = node {
            to.send_replace(node);
        }
    }
}

/// Whether a pod in this worker phase may still have running containers (upstream
/// `CouldHaveRunningContainers`): its worker has not finished terminating it. A pod no worker
/// knows has none (never admitted, or forgotten after cleanup).
fn may_run(phase: Option<WorkerPhase>) -> bool {
    matches!(
        phase,
        Some(WorkerPhase::Syncing | WorkerPhase::Terminating { .. })
    )
}

/// Upstream `podResourcesAreReclaimed` as the status syncer needs it: the pod's worker has
/// finished terminating and cleaning up, or no worker knows the pod (it never ran, e.g. a
/// rejected pod, or it was forgotten after cleanup). The status manager's finished mark (set
/// by the worker's last step) says the same a moment earlier.
fn resources_reclaimed(phase: Option<WorkerPhase>) -> bool {
    matches!(phase, None | Some(WorkerPhase::Finished))
}

/// Where the status of kubelet pod `uid` goes in the API: the pod itself for an API pod, its
/// mirror pod for a static pod (`None` until the mirror pod exists).
fn status_target(
    pods: &[impl std::borrow::Borrow<Pod>],
    mirrors: &HashMap<String, Pod>,
    uid: &str,
) -> Option<StatusTarget> {
    let pod: &Pod = pods
        .iter()
        .map(std::borrow::Borrow::borrow)
        .find(|p: &&Pod| p.uid() == uid)?;
    if pod.source().is_some_and(|s| s.is_static()) {
        let mirror = mirrors.get(&pod.full_name())?;
        return Some(StatusTarget {
            namespace: pod.namespace().to_owned(),
            name: pod.name().to_owned(),
            api_uid: mirror.uid().to_owned(),
            is_static: true,
            api_status: mirror.status.clone(),
            deleting: false,
            resource_version: mirror.metadata.resource_version.clone(),
            mirror: true,
        });
    }
    Some(StatusTarget {
        namespace: pod.namespace().to_owned(),
        name: pod.name().to_owned(),
        api_uid: pod.uid().to_owned(),
        is_static: false,
        api_status: pod.status.clone(),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        resource_version: pod.metadata.resource_version.clone(),
        mirror: pod.annotation(CONFIG_MIRROR_ANNOTATION).is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::CONFIG_SOURCE_ANNOTATION;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use std::collections::BTreeMap;

    fn pod(name: &str, uid: &str, source: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("default".to_owned()),
                uid: Some(uid.to_owned()),
                annotations: Some(BTreeMap::from([(
                    CONFIG_SOURCE_ANNOTATION.to_owned(),
                    source.to_owned(),
                )])),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn api_pod_status_goes_to_the_pod_itself() {
        let mut p = pod("web", "u1", "api");
        p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let t = status_target(&[p], &HashMap::new(), "u1").unwrap();
        assert_eq!(t.api_uid, "u1");
        assert!(!t.is_static);
        assert!(t.deleting);
        assert_eq!(t.api_status.unwrap().phase.as_deref(), Some("Running"));
        assert_eq!((t.namespace.as_str(), t.name.as_str()), ("default", "web"));
    }

    #[test]
    fn static_pod_status_goes_to_its_mirror_pod_once_it_exists() {
        let s = pod("etcd-n1", "static-uid", "file");
        assert_eq!(
            status_target(std::slice::from_ref(&s), &HashMap::new(), "static-uid"),
            None
        );
        let mut mirror = pod("etcd-n1", "mirror-uid", "api");
        mirror.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        let mirrors = HashMap::from([("default/etcd-n1".to_owned(), mirror)]);
        let t = status_target(&[s], &mirrors, "static-uid").unwrap();
        assert_eq!(t.api_uid, "mirror-uid");
        assert!(t.is_static);
        assert!(
            !t.deleting,
            "a static pod is never deleted through its mirror"
        );
    }

    #[test]
    fn unknown_uid_has_no_target() {
        assert_eq!(
            status_target(&[pod("a", "u1", "api")], &HashMap::new(), "u2"),
            None
        );
    }

    #[test]
    fn may_run_until_terminated() {
        assert!(may_run(Some(WorkerPhase::Syncing)));
        assert!(may_run(Some(WorkerPhase::Terminating { grace_period: 1 })));
        assert!(!may_run(Some(WorkerPhase::Terminated)));
        assert!(!may_run(Some(WorkerPhase::Finished)));
        assert!(!may_run(None));
    }

    #[test]
    fn deletable_only_when_no_worker_or_finished() {
        assert!(resources_reclaimed(None));
        assert!(resources_reclaimed(Some(WorkerPhase::Finished)));
        assert!(!resources_reclaimed(Some(WorkerPhase::Terminated)));
        assert!(!resources_reclaimed(Some(WorkerPhase::Syncing)));
        assert!(!resources_reclaimed(Some(WorkerPhase::Terminating {
            grace_period: 30
        })));
    }

    #[tokio::test]
    async fn node_forwarding_skips_unknown_and_stops_on_cancel() {
        let (from_tx, from_rx) = watch::channel(None);
        let placeholder = Arc::new(Node::default());
        let (to_tx, mut to_rx) = watch::channel(placeholder);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(forward_node(from_rx, to_tx, cancel.clone()));
        from_tx.send_replace(None);
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        from_tx.send_replace(Some(Arc::new(n)));
        to_rx.changed().await.unwrap();
        assert_eq!(to_rx.borrow().metadata.name.as_deref(), Some("n1"));
        cancel.cancel();
        task.await.unwrap();
    }
}
