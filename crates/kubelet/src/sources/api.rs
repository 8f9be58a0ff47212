//! The API server pod source (upstream `NewSourceApiserver`: a reflector into an undelta
//! store): owns a list+watch of the pods bound to this node (`fieldSelector=spec.nodeName=<node>`,
//! bookmarks on; kube's watcher relists on 410 Gone and reconnects with back-off). Receives
//! watch events; after the first complete list and after every change emits the full current
//! set as `PodUpdate { op: Set, source: Api }` to the config merger. Never reports before the
//! first successful list, and never reports because of an error: during an outage the merger
//! keeps the last set. Pods are decoded as [`CheckedPod`]s: fields this kubelet does not know
//! are noted in the [`UnknownFields`] registry admission reads (no extra parse).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::unknown_fields::{CheckedPod, UnknownFields};
use crate::types::{PodExt, PodOp, PodSource, PodUpdate};

/// Most watch events folded into one `Set` when they arrive back to back.
const MAX_COALESCED_EVENTS: usize = 256;

/// Why listing or watching pods failed (the watcher retries every one of them).
#[derive(Debug, thiserror::Error)]
pub enum ApiSourceError {
    #[error("pod list/watch for node {node}: {source}")]
    Watch {
        node: String,
        source: watcher::Error,
    },
}

/// The pods of this node as the watch reports them (upstream `UndeltaStore`), keyed by
/// `namespace/name`. During a (re)list the new set is staged and replaces the old one only
/// once complete, so a relist never loses or duplicates pods.
#[derive(Debug, Default)]
pub struct PodSet {
    current: BTreeMap<String, Arc<Pod>>,
    staging: Option<BTreeMap<String, Arc<Pod>>>,
    listed: bool,
}

impl PodSet {
    /// Applies one watcher event; `true` when the current set changed in a way to report.
    pub fn apply(&mut self, event: Event<Pod>) -> bool {
        match event {
            Event::Init => {
                self.staging = Some(BTreeMap::new());
                false
            }
            Event::InitApply(pod) => {
                self.staging
                    .get_or_insert_with(BTreeMap::new)
                    .insert(pod.full_name(), Arc::new(pod));
                false
            }
            Event::InitDone => {
                self.current = self.staging.take().unwrap_or_default();
                self.listed = true;
                true
            }
            Event::Apply(pod) => {
                self.current.insert(pod.full_name(), Arc::new(pod));
                self.listed
            }
            Event::Delete(pod) => {
                self.current.remove(&pod.full_name());
                self.listed
            }
        }
    }

    /// Whether a complete list has been seen.
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// The current pods, ordered by full name (shared, not copied).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.current.values().cloned().collect()
    }
}

/// The API pod source task.
pub struct ApiSource {
    client: kube::Client,
    node_name: String,
    tx: mpsc::Sender<PodUpdate>,
    node_gate: Option<watch::Receiver<Option<Arc<Node>>>>,
    unknown_fields: UnknownFields,
}

impl ApiSource {
    /// Pods bound to `node_name`, sent to the merger through `tx`.
    pub fn new(
        client: kube::Client,
        node_name: impl Into<String>,
        tx: mpsc::Sender<PodUpdate>,
    ) -> Self {
        Self {
            client,
            node_name: node_name.into(),
            tx,
            node_gate: None,
            unknown_fields: UnknownFields::default(),
        }
    }

    /// Upstream waits for its own Node before watching pods: start only once `node` holds the
    /// Node (or its sender is gone).
    pub fn with_node_gate(mut self, node: watch::Receiver<Option<Arc<Node>>>) -> Self {
        self.node_gate = Some(node);
        self
    }

    /// Where the unknown fields of each pod are recorded (admission refuses the pods with a
    /// refused one).
    pub fn with_unknown_fields(mut self, fields: UnknownFields) -> Self {
        self.unknown_fields = fields;
        self
    }

    /// Lists and watches until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        if let Some(mut gate) = self.node_gate.take() {
            info!(node = %self.node_name, "waiting for the node before watching API server pods");
            tokio::select! {
                _ = cancel.cancelled() => return,
                r = gate.wait_for(Option::is_some) => if r.is_err() {
                    debug!(node = %self.node_name, "node watch closed; watching pods anyway");
                },
            }
        }
        info!(node = %self.node_name, "watching API server pods");
        let api: kube::Api<CheckedPod> = kube::Api::all(self.client.clone());
        let config =
            watcher::Config::default().fields(&format!("spec.nodeName={}", self.node_name));
        let stream = watcher::watcher(api, config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut set = PodSet::default();
        let mut failures: u32 = 0;
        loop {
            let item = tokio::select! {
                _ = cancel.cancelled() => return,
                item = stream.next() => item,
            };
            let Some(item) = item else {
                warn!(node = %self.node_name, "pod watch stream ended");
                return;
            };
            let mut changed = self.handle(item, &mut set, &mut failures);
            // Fold events that are already waiting into the same report.
            for _ in 0..MAX_COALESCED_EVENTS {
                match stream.next().now_or_never() {
                    Some(Some(item)) => changed |= self.handle(item, &mut set, &mut failures),
                    Some(None) | None => break,
                }
            }
            if changed && set.listed() {
                let pods = set.pods();
                debug!(node = %self.node_name, pods = pods.len(), "API pod set changed");
                let update = PodUpdate {
                    op: PodOp::Set,
                    source: PodSource::Api,
                    pods,
                };
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    sent = self.tx.send(update) => if sent.is_err() {
                        info!(node = %self.node_name, "pod config channel closed; stopping the API pod source");
                        return;
                    },
                }
            }
        }
    }

    /// Records each pod's unknown fields and unwraps it.
    fn observe(&self, event: Event<CheckedPod>) -> Event<Pod> {
        match event {
            Event::Init => Event::Init,
            Event::InitDone => Event::InitDone,
            Event::InitApply(p) => Event::InitApply(self.unknown_fields.observe(p)),
            Event::Apply(p) => Event::Apply(self.unknown_fields.observe(p)),
            Event::Delete(p) => {
                self.unknown_fields.forget(p.pod.uid());
                Event::Delete(p.pod)
            }
        }
    }

    fn handle(
        &self,
        item: Result<Event<CheckedPod>, watcher::Error>,
        set: &mut PodSet,
        failures: &mut u32,
    ) -> bool {
        match item {
            Ok(event) => {
                if *failures > 0 {
                    info!(node = %self.node_name, failures = *failures, "API server pod list/watch recovered");
                    *failures = 0;
                }
                let done = matches!(event, Event::InitDone);
                let changed = set.apply(self.observe(event));
                if done {
                    let uids: std::collections::HashSet<&str> =
                        set.current.values().map(|p| p.uid()).collect();
                    self.unknown_fields.retain(|uid| uids.contains(uid));
                    info!(node = %self.node_name, pods = set.current.len(), "listed API server pods");
                }
                changed
            }
            Err(source) => {
                *failures += 1;
                let expired = matches!(&source, watcher::Error::WatchError(s) if s.code == 410);
                let err = ApiSourceError::Watch {
                    node: self.node_name.clone(),
                    source,
                };
                if expired {
                    info!(reason = "resource version expired (410 Gone)", error = %err, "relisting API server pods");
                } else {
                    warn!(attempt = *failures, error = %err, "API server pod list/watch failed; keeping the last pod set and retrying with back-off");
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, rv: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(set: &PodSet) -> Vec<String> {
        set.pods().iter().map(|p| p.name().to_owned()).collect()
    }

    #[test]
    fn reports_only_after_the_first_complete_list() {
        let mut set = PodSet::default();
        assert!(!set.apply(Event::Init));
        assert!(!set.apply(Event::InitApply(pod("a", "1"))));
        assert!(!set.listed());
        assert!(set.apply(Event::InitDone));
        assert_eq!(names(&set), ["a"]);
        assert!(set.apply(Event::Apply(pod("b", "2"))));
        assert!(set.apply(Event::Apply(pod("a", "3"))));
        assert_eq!(names(&set), ["a", "b"]);
        assert_eq!(
            set.pods()[0].metadata.resource_version.as_deref(),
            Some("3")
        );
        assert!(set.apply(Event::Delete(pod("b", "4"))));
        assert_eq!(names(&set), ["a"]);
    }

    #[test]
    fn relist_replaces_the_set_atomically() {
        let mut set = PodSet::default();
        set.apply(Event::Init);
        set.apply(Event::InitApply(pod("a", "1")));
        set.apply(Event::InitApply(pod("b", "1")));
        set.apply(Event::InitDone);
        // A relist in progress keeps reporting the old set.
        set.apply(Event::Init);
        set.apply(Event::InitApply(pod("b", "5")));
        assert_eq!(names(&set), ["a", "b"]);
        // A relist that restarts (list failed half-way) starts from scratch.
        set.apply(Event::Init);
        set.apply(Event::InitApply(pod("c", "6")));
        set.apply(Event::InitApply(pod("b", "6")));
        assert!(set.apply(Event::InitDone));
        assert_eq!(names(&set), ["b", "c"]);
        // An empty relist is a real, complete answer.
        set.apply(Event::Init);
        assert!(set.apply(Event::InitDone));
        assert!(set.pods().is_empty());
    }

    #[test]
    fn each_report_shares_the_pods_an_event_did_not_touch() {
        let mut set = PodSet::default();
        set.apply(Event::Init);
        set.apply(Event::InitApply(pod("a", "1")));
        set.apply(Event::InitApply(pod("b", "1")));
        set.apply(Event::InitDone);
        let first = set.pods();
        set.apply(Event::Apply(pod("b", "2")));
        let second = set.pods();
        assert!(Arc::ptr_eq(&first[0], &second[0]), "a was copied");
        assert!(!Arc::ptr_eq(&first[1], &second[1]));
        assert_eq!(first[1].metadata.resource_version.as_deref(), Some("1"));
    }
}
