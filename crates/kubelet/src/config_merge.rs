//! The pod config merger (upstream `PodConfig`/`podStorage`, incremental mode): owns the
//! per-source pod maps keyed by UID. Receives `PodUpdate`s from the sources (`Set` from every
//! source, the API source's full set included; `Add`/`Update`/`Remove`/`Delete` are accepted as
//! upstream does) and emits the minimal, ordered changes downstream: REMOVE, ADD (stamped with
//! `kubernetes.io/config.source` and `kubernetes.io/config.seen`), UPDATE, DELETE (a new
//! deletionTimestamp), RECONCILE (status-only change). Also publishes which sources have
//! delivered their first `Set`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::types::{
    CONFIG_MIRROR_ANNOTATION, CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION, PodExt, PodOp,
    PodSource, PodUpdate,
};

/// Annotations the kubelet itself maintains; they never make two pods differ.
const LOCAL_ANNOTATIONS: [&str; 3] = [
    CONFIG_SOURCE_ANNOTATION,
    CONFIG_MIRROR_ANNOTATION,
    CONFIG_SEEN_ANNOTATION,
];

/// Cheap, cloneable view of the sources that have delivered at least one `Set`.
#[derive(Debug, Clone)]
pub struct SeenSources(watch::Receiver<BTreeSet<PodSource>>);

impl SeenSources {
    /// Upstream `SeenAllSources`: every one of `sources` has sent its first `Set`.
    pub fn seen_all(&self, sources: &[PodSource]) -> bool {
        let seen = self.0.borrow();
        sources.iter().all(|s| seen.contains(s))
    }

    /// The sources seen so far.
    pub fn seen(&self) -> BTreeSet<PodSource> {
        self.0.borrow().clone()
    }

    /// Waits until every one of `sources` has been seen (or the merger is gone).
    pub async fn wait_for(&mut self, sources: &[PodSource]) {
        let _ = self
            .0
            .wait_for(|seen| sources.iter().all(|s| seen.contains(s)))
            .await;
    }
}

/// The wall clock used for `kubernetes.io/config.seen`.
pub type Clock = Box<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// Upstream `podStorage` in `PodConfigNotificationIncremental` mode.
pub struct PodConfigMerger {
    pods: BTreeMap<PodSource, BTreeMap<String, Arc<Pod>>>,
    /// Sources whose first `Set` has been merged.
    merged_sets: BTreeSet<PodSource>,
    /// What `SeenSources` handles see. `run` publishes a source only after the updates its
    /// first `Set` produced are queued for the sync loop, so a reader that sees it ready and
    /// then drains the queue knows every pod that source had (housekeeping relies on this
    /// to never take a pod that is merely in flight for an orphan).
    seen: watch::Sender<BTreeSet<PodSource>>,
    clock: Clock,
}

impl Default for PodConfigMerger {
    fn default() -> Self {
        Self::new()
    }
}

/// The changes one incoming update produced, before they are turned into `PodUpdate`s.
#[derive(Default)]
struct Changes {
    adds: Vec<Arc<Pod>>,
    updates: Vec<Arc<Pod>>,
    deletes: Vec<Arc<Pod>>,
    removes: Vec<Arc<Pod>>,
    reconciles: Vec<Arc<Pod>>,
}

enum Outcome {
    Unchanged,
    Update,
    Reconcile,
    GracefulDelete,
}

impl PodConfigMerger {
    pub fn new() -> Self {
        Self::with_clock(Box::new(Utc::now))
    }

    /// A merger stamping `config.seen` with `clock` (tests).
    pub fn with_clock(clock: Clock) -> Self {
        PodConfigMerger {
            pods: BTreeMap::new(),
            merged_sets: BTreeSet::new(),
            seen: watch::channel(BTreeSet::new()).0,
            clock,
        }
    }

    /// A handle answering "have all these sources sent their first `Set`, and are the
    /// updates it produced queued downstream?" (see `publish_seen`).
    pub fn seen_sources(&self) -> SeenSources {
        SeenSources(self.seen.subscribe())
    }

    /// Upstream `SeenAllSources`, on the merger itself: every one of `sources` has had its
    /// first `Set` merged (published or not).
    pub fn seen_all_sources(&self, sources: &[PodSource]) -> bool {
        sources.iter().all(|s| self.merged_sets.contains(s))
    }

    /// Shows the sources merged so far to the `SeenSources` handles. Call it once the
    /// updates `merge` returned are delivered.
    pub fn publish_seen(&self) {
        self.seen.send_if_modified(|seen| {
            let changed = *seen != self.merged_sets;
            if changed {
                seen.clone_from(&self.merged_sets);
            }
            changed
        });
    }

    /// Every pod currently known, all sources (upstream `MergedState`).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    /// Merges one source update; returns the downstream updates in delivery order
    /// (REMOVE, ADD, UPDATE, DELETE, RECONCILE), omitting empty ones — except that a source's
    /// first `Set` that adds, updates and deletes nothing yields one empty ADD, as upstream,
    /// to signal the source is ready.
    pub fn merge(&mut self, update: PodUpdate) -> Vec<PodUpdate> {
        let source = update.source;
        let seen_before = self.merged_sets.contains(&source);
        let mut changes = Changes::default();
        let now = format_seen(&(self.clock)());
        let mut store = self.pods.remove(&source).unwrap_or_default();
        match update.op {
            PodOp::Add | PodOp::Update | PodOp::Delete => {
                for pod in filter_invalid(update.pods, source) {
                    upsert(&mut store, None, pod, source, &now, &mut changes);
                }
            }
            PodOp::Remove => {
                for pod in &update.pods {
                    if let Some(existing) = store.remove(pod.uid()) {
                        changes.removes.push(existing);
                    }
                }
            }
            PodOp::Set => {
                self.merged_sets.insert(source);
                let mut old = std::mem::take(&mut store);
                for pod in filter_invalid(update.pods, source) {
                    upsert(&mut store, Some(&mut old), pod, source, &now, &mut changes);
                }
                changes.removes.extend(old.into_values());
            }
            PodOp::Reconcile => {
                tracing::warn!(%source, "received invalid update type RECONCILE from a source, ignoring");
            }
        }
        self.pods.insert(source, store);

        let first_set = !seen_before && self.merged_sets.contains(&source);
        let quiet =
            changes.adds.is_empty() && changes.updates.is_empty() && changes.deletes.is_empty();
        let mut out = Vec::new();
        let mut push = |op, pods: Vec<Arc<Pod>>, even_if_empty: bool| {
            if !pods.is_empty() || even_if_empty {
                out.push(PodUpdate { op, source, pods });
            }
        };
        push(PodOp::Remove, changes.removes, false);
        push(PodOp::Add, changes.adds, first_set && quiet);
        push(PodOp::Update, changes.updates, false);
        push(PodOp::Delete, changes.deletes, false);
        push(PodOp::Reconcile, changes.reconciles, false);
        out
    }

    /// Runs until `cancel` or until `rx` closes, forwarding merged updates to `tx`.
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<PodUpdate>,
        tx: mpsc::Sender<PodUpdate>,
        cancel: CancellationToken,
    ) {
        loop {
            let update = tokio::select! {
                _ = cancel.cancelled() => return,
                u = rx.recv() => match u {
                    Some(u) => u,
                    None => return,
                },
            };
            for out in self.merge(update) {
                if out.op == PodOp::Add && crate::metrics::timeline::enabled() {
                    for pod in &out.pods {
                        crate::metrics::timeline::mark(pod.uid(), "merged");
                    }
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    sent = tx.send(out) => if sent.is_err() { return },
                }
            }
            // Only now: a source counts as seen once its pods are in the sync loop's queue.
            self.publish_seen();
        }
    }
}

/// Upstream `filterInvalidPods`: within one update, the first pod of each full name wins (and,
/// as a safety net, of each UID); later duplicates are logged and dropped.
fn filter_invalid(pods: Vec<Arc<Pod>>, source: PodSource) -> Vec<Arc<Pod>> {
    let mut names = HashSet::new();
    let mut uids = HashSet::new();
    pods.into_iter()
        .enumerate()
        .filter(|(i, pod)| {
            let name = pod.full_name();
            if !names.insert(name.clone()) || !uids.insert(pod.uid().to_string()) {
                tracing::warn!(index = i, pod = %name, %source,
                    "pod failed validation due to duplicate pod name, ignoring");
                return false;
            }
            true
        })
        .map(|(_, pod)| pod)
        .collect()
}

/// Stores `pod` (upstream `updatePodsFunc`): compared against the existing pod with the same
/// UID — in `old` for a `Set`, else in `store` — or added as new. Upstream stamps the source
/// annotation on every incoming pod first; here only a new pod is stamped (and so copied when
/// its source still shares it), because the comparison ignores the kubelet's own annotations
/// and an existing pod keeps its stamp: an unchanged pod costs a comparison, not a copy.
fn upsert(
    store: &mut BTreeMap<String, Arc<Pod>>,
    old: Option<&mut BTreeMap<String, Arc<Pod>>>,
    mut pod: Arc<Pod>,
    source: PodSource,
    now: &str,
    changes: &mut Changes,
) {
    let uid = pod.uid().to_string();
    let existing = match old {
        Some(old) => old.remove(&uid),
        None => store.remove(&uid),
    };
    let Some(mut existing) = existing else {
        let new = Arc::make_mut(&mut pod);
        set_annotation(new, CONFIG_SOURCE_ANNOTATION, source.as_str());
        set_annotation(new, CONFIG_SEEN_ANNOTATION, now);
        changes.adds.push(pod.clone());
        store.insert(uid, pod);
        return;
    };
    match check_and_update(&mut existing, pod) {
        Outcome::Unchanged => {}
        Outcome::Update => changes.updates.push(existing.clone()),
        Outcome::Reconcile => changes.reconciles.push(existing.clone()),
        Outcome::GracefulDelete => changes.deletes.push(existing.clone()),
    }
    store.insert(uid, existing);
}

fn set_annotation(pod: &mut Pod, key: &str, value: &str) {
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
}

/// Upstream `checkAndUpdatePod`: folds `new` into `existing` and says what kind of change it
/// was. A changed pod is a new version (`existing` is copied if downstream still holds it).
fn check_and_update(existing: &mut Arc<Pod>, new: Arc<Pod>) -> Outcome {
    if !differ_semantically(existing, &new) {
        if existing.status != new.status {
            let existing = Arc::make_mut(existing);
            existing.status.clone_from(&new.status);
            // The status writer's pre-image: the version that carries this status.
            existing
                .metadata
                .resource_version
                .clone_from(&new.metadata.resource_version);
            return Outcome::Reconcile;
        }
        return Outcome::Unchanged;
    }
    let new = Arc::unwrap_or_clone(new);
    let existing = Arc::make_mut(existing);
    let graceful_delete = new.metadata.deletion_timestamp.is_some();
    existing.spec = new.spec;
    existing.metadata.labels = new.metadata.labels;
    existing.metadata.deletion_timestamp = new.metadata.deletion_timestamp;
    existing.metadata.deletion_grace_period_seconds = new.metadata.deletion_grace_period_seconds;
    existing.metadata.generation = new.metadata.generation;
    existing.metadata.resource_version = new.metadata.resource_version;
    existing.status = new.status;
    // The new annotations, but the kubelet's own (source, mirror, first seen) are kept.
    let mut annotations = new.metadata.annotations.unwrap_or_default();
    for key in LOCAL_ANNOTATIONS {
        if let Some(v) = existing.annotation(key) {
            annotations.insert(key.into(), v.into());
        }
    }
    existing.metadata.annotations = Some(annotations);
    if graceful_delete {
        Outcome::GracefulDelete
    } else {
        Outcome::Update
    }
}

/// Upstream `podsDifferSemantically`.
fn differ_semantically(existing: &Pod, new: &Pod) -> bool {
    existing.spec != new.spec
        || existing.metadata.labels != new.metadata.labels
        || existing.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || existing.metadata.deletion_grace_period_seconds
            != new.metadata.deletion_grace_period_seconds
        || !annotations_equal(existing, new)
}

/// Upstream `isAnnotationMapEqual`: equal except for the kubelet's local annotations.
fn annotations_equal(a: &Pod, b: &Pod) -> bool {
    // Both maps iterate in key order, so the filtered sequences compare without copying.
    fn relevant(p: &Pod) -> impl Iterator<Item = (&String, &String)> {
        p.metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| !LOCAL_ANNOTATIONS.contains(&k.as_str()))
    }
    relevant(a).eq(relevant(b))
}

/// Go's `time.RFC3339Nano` in UTC: fractional seconds with trailing zeros trimmed.
pub fn format_seen(t: &DateTime<Utc>) -> String {
    let base = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = t.timestamp_subsec_nanos().min(999_999_999);
    if nanos == 0 {
        return format!("{base}Z");
    }
    let frac = format!("{nanos:09}");
    format!("{base}.{}Z", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn pod(name: &str, uid: &str, image: &str) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        }
    }

    fn with<F: FnOnce(&mut Pod)>(mut p: Pod, f: F) -> Pod {
        f(&mut p);
        p
    }

    fn upd(op: PodOp, source: PodSource, pods: Vec<Pod>) -> PodUpdate {
        PodUpdate::new(op, source, pods)
    }

    /// A merger whose clock advances one second per merge, starting at 1_000_000_000.
    fn merger() -> PodConfigMerger {
        let t = Arc::new(AtomicI64::new(1_000_000_000));
        PodConfigMerger::with_clock(Box::new(move || {
            let s = t.fetch_add(1, Ordering::SeqCst);
            DateTime::from_timestamp(s, 0).unwrap()
        }))
    }

    /// (op, names) of each output update.
    fn summary(out: &[PodUpdate]) -> Vec<(PodOp, Vec<String>)> {
        out.iter()
            .map(|u| (u.op, u.pods.iter().map(|p| p.name().to_string()).collect()))
            .collect()
    }

    fn s(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn op_sequences() {
        use PodOp::*;
        use PodSource::*;
        let a = pod("a", "uid-a", "nginx:1");
        let b = pod("b", "uid-b", "redis");
        let a2 = pod("a", "uid-a2", "nginx:2");
        let deleting = with(a.clone(), |p| {
            p.metadata.deletion_timestamp =
                Some(Time(k8s_openapi::jiff::Timestamp::from_second(5).unwrap()));
            p.metadata.deletion_grace_period_seconds = Some(30);
        });
        let api_a_spec = with(a.clone(), |p| {
            p.spec.as_mut().unwrap().active_deadline_seconds = Some(30);
        });
        let b_running = with(b.clone(), |p| {
            p.status = Some(PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            });
        });
        let api_a_deleting = with(api_a_spec.clone(), |p| {
            p.metadata.deletion_timestamp =
                Some(Time(k8s_openapi::jiff::Timestamp::from_second(5).unwrap()));
            p.metadata.deletion_grace_period_seconds = Some(30);
        });
        type Step = (PodUpdate, Vec<(PodOp, Vec<String>)>);
        let scenarios: Vec<(&str, Vec<Step>)> = vec![
            (
                "first set adds, repeat is a no-op",
                vec![
                    (
                        upd(Set, File, vec![a.clone(), b.clone()]),
                        vec![(Add, s(&["a", "b"]))],
                    ),
                    (upd(Set, File, vec![a.clone(), b.clone()]), vec![]),
                ],
            ),
            (
                "empty first set signals readiness once",
                vec![
                    (upd(Set, Http, vec![]), vec![(Add, s(&[]))]),
                    (upd(Set, Http, vec![]), vec![]),
                ],
            ),
            (
                "static pod content change: remove old uid, add new",
                vec![
                    (
                        upd(Set, File, vec![a.clone(), b.clone()]),
                        vec![(Add, s(&["a", "b"]))],
                    ),
                    (
                        upd(Set, File, vec![a2.clone(), b.clone()]),
                        vec![(Remove, s(&["a"])), (Add, s(&["a"]))],
                    ),
                    (upd(Set, File, vec![b.clone()]), vec![(Remove, s(&["a"]))]),
                ],
            ),
            (
                "label, annotation and status changes",
                vec![
                    (upd(Set, File, vec![a.clone()]), vec![(Add, s(&["a"]))]),
                    (
                        upd(
                            Set,
                            File,
                            vec![with(a.clone(), |p| {
                                p.metadata.labels =
                                    Some([("k".to_string(), "v".to_string())].into());
                            })],
                        ),
                        vec![(Update, s(&["a"]))],
                    ),
                    (
                        upd(
                            Set,
                            File,
                            vec![with(a.clone(), |p| {
                                p.metadata.labels =
                                    Some([("k".to_string(), "v".to_string())].into());
                                p.metadata.annotations = Some(
                                    [(CONFIG_SEEN_ANNOTATION.to_string(), "x".to_string())].into(),
                                );
                            })],
                        ),
                        vec![],
                    ),
                    (
                        upd(
                            Set,
                            File,
                            vec![with(a.clone(), |p| {
                                p.metadata.labels =
                                    Some([("k".to_string(), "v".to_string())].into());
                                p.metadata.annotations =
                                    Some([("user".to_string(), "x".to_string())].into());
                            })],
                        ),
                        vec![(Update, s(&["a"]))],
                    ),
                    (
                        upd(
                            Set,
                            File,
                            vec![with(a.clone(), |p| {
                                p.metadata.labels =
                                    Some([("k".to_string(), "v".to_string())].into());
                                p.metadata.annotations =
                                    Some([("user".to_string(), "x".to_string())].into());
                                p.status = Some(PodStatus {
                                    phase: Some("Running".into()),
                                    ..Default::default()
                                });
                            })],
                        ),
                        vec![(Reconcile, s(&["a"]))],
                    ),
                ],
            ),
            (
                "api source incremental ops",
                vec![
                    (upd(Add, Api, vec![a.clone()]), vec![(Add, s(&["a"]))]),
                    (upd(Update, Api, vec![a.clone()]), vec![]),
                    (
                        upd(
                            Update,
                            Api,
                            vec![with(a.clone(), |p| {
                                p.spec.as_mut().unwrap().active_deadline_seconds = Some(5);
                            })],
                        ),
                        vec![(Update, s(&["a"]))],
                    ),
                    (
                        upd(
                            Delete,
                            Api,
                            vec![with(deleting.clone(), |p| {
                                p.spec.as_mut().unwrap().active_deadline_seconds = Some(5);
                            })],
                        ),
                        vec![(Delete, s(&["a"]))],
                    ),
                    (upd(Remove, Api, vec![b.clone()]), vec![]),
                    (upd(Remove, Api, vec![a.clone()]), vec![(Remove, s(&["a"]))]),
                ],
            ),
            (
                "api source full sets",
                vec![
                    (upd(Set, Api, vec![]), vec![(Add, s(&[]))]),
                    (upd(Set, Api, vec![a.clone()]), vec![(Add, s(&["a"]))]),
                    (
                        upd(Set, Api, vec![a.clone(), b.clone()]),
                        vec![(Add, s(&["b"]))],
                    ),
                    (
                        upd(Set, Api, vec![api_a_spec.clone(), b.clone()]),
                        vec![(Update, s(&["a"]))],
                    ),
                    (
                        upd(Set, Api, vec![api_a_spec.clone(), b_running.clone()]),
                        vec![(Reconcile, s(&["b"]))],
                    ),
                    (
                        upd(Set, Api, vec![api_a_deleting.clone(), b_running.clone()]),
                        vec![(Delete, s(&["a"]))],
                    ),
                    (
                        upd(Set, Api, vec![api_a_deleting.clone(), b_running.clone()]),
                        vec![],
                    ),
                    (
                        upd(Set, Api, vec![b_running.clone()]),
                        vec![(Remove, s(&["a"]))],
                    ),
                    (upd(Set, Api, vec![]), vec![(Remove, s(&["b"]))]),
                ],
            ),
            (
                "api pod first seen deleting is an add; spec and status change is one update",
                vec![
                    (
                        upd(Set, Api, vec![deleting.clone()]),
                        vec![(Add, s(&["a"]))],
                    ),
                    (
                        upd(
                            Set,
                            Api,
                            vec![with(deleting.clone(), |p| {
                                p.status = Some(PodStatus {
                                    phase: Some("Running".into()),
                                    ..Default::default()
                                });
                            })],
                        ),
                        vec![(Reconcile, s(&["a"]))],
                    ),
                    (
                        upd(Set, Api, vec![b.clone()]),
                        vec![(Remove, s(&["a"])), (Add, s(&["b"]))],
                    ),
                    (
                        upd(Set, Api, vec![b_running.clone()]),
                        vec![(Reconcile, s(&["b"]))],
                    ),
                    (
                        upd(
                            Set,
                            Api,
                            vec![with(b.clone(), |p| {
                                p.spec.as_mut().unwrap().active_deadline_seconds = Some(5);
                            })],
                        ),
                        vec![(Update, s(&["b"]))],
                    ),
                ],
            ),
            (
                "duplicate names in one set: first wins",
                vec![(
                    upd(
                        Set,
                        File,
                        vec![
                            a.clone(),
                            with(b.clone(), |p| p.metadata.name = Some("a".into())),
                        ],
                    ),
                    vec![(Add, s(&["a"]))],
                )],
            ),
            (
                "sources are independent",
                vec![
                    (upd(Set, File, vec![a.clone()]), vec![(Add, s(&["a"]))]),
                    (upd(Set, Http, vec![b.clone()]), vec![(Add, s(&["b"]))]),
                    (upd(Set, File, vec![]), vec![(Remove, s(&["a"]))]),
                ],
            ),
            (
                "reconcile is not a source op",
                vec![(upd(Reconcile, Api, vec![a.clone()]), vec![])],
            ),
        ];
        for (name, steps) in scenarios {
            let mut m = merger();
            for (i, (input, want)) in steps.into_iter().enumerate() {
                let source = input.source;
                let out = m.merge(input);
                assert_eq!(summary(&out), want, "{name}, step {i}");
                assert!(out.iter().all(|u| u.source == source));
            }
        }
    }

    #[test]
    fn annotations_on_add_and_update() {
        let mut m = merger();
        let a = pod("a", "uid-a", "nginx");
        let out = m.merge(upd(PodOp::Set, PodSource::File, vec![a.clone()]));
        let added = &out[0].pods[0];
        assert_eq!(added.annotation(CONFIG_SOURCE_ANNOTATION), Some("file"));
        let seen = added
            .annotation(CONFIG_SEEN_ANNOTATION)
            .unwrap()
            .to_string();
        assert_eq!(seen, "2001-09-09T01:46:40Z");

        // An update keeps the first-seen time and takes the new user annotations.
        let changed = with(a, |p| {
            p.metadata.annotations = Some([("user".to_string(), "1".to_string())].into());
            p.spec.as_mut().unwrap().containers[0].image = Some("nginx:2".into());
        });
        let out = m.merge(upd(PodOp::Set, PodSource::File, vec![changed]));
        assert_eq!(out[0].op, PodOp::Update);
        let updated = &out[0].pods[0];
        assert_eq!(
            updated.annotation(CONFIG_SEEN_ANNOTATION),
            Some(seen.as_str())
        );
        assert_eq!(updated.annotation("user"), Some("1"));
        assert_eq!(updated.annotation(CONFIG_SOURCE_ANNOTATION), Some("file"));
        assert_eq!(m.pods().len(), 1);
        assert_eq!(m.pods()[0].spec, updated.spec);
    }

    #[test]
    fn api_pods_keep_server_fields_and_get_local_annotations() {
        let mut m = merger();
        // A mirror pod is a copy of a static pod: its file source annotation is overwritten.
        let api = with(pod("m", "uid-m", "nginx"), |p| {
            p.metadata.resource_version = Some("10".into());
            p.metadata.generation = Some(1);
            p.metadata.annotations = Some(
                [
                    (CONFIG_SOURCE_ANNOTATION.to_string(), "file".to_string()),
                    (CONFIG_MIRROR_ANNOTATION.to_string(), "h1".to_string()),
                ]
                .into(),
            );
        });
        let out = m.merge(upd(PodOp::Set, PodSource::Api, vec![api.clone()]));
        assert_eq!(summary(&out), [(PodOp::Add, s(&["m"]))]);
        let added = &out[0].pods[0];
        assert_eq!(added.annotation(CONFIG_SOURCE_ANNOTATION), Some("api"));
        assert_eq!(added.annotation(CONFIG_MIRROR_ANNOTATION), Some("h1"));
        let seen = added
            .annotation(CONFIG_SEEN_ANNOTATION)
            .unwrap()
            .to_string();

        // Status only: RECONCILE carries the new status, nothing else moves.
        let running = with(api.clone(), |p| {
            p.metadata.resource_version = Some("11".into());
            p.status = Some(PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            });
        });
        let out = m.merge(upd(PodOp::Set, PodSource::Api, vec![running.clone()]));
        assert_eq!(summary(&out), [(PodOp::Reconcile, s(&["m"]))]);
        let rec = &out[0].pods[0];
        assert_eq!(
            rec.status.as_ref().and_then(|st| st.phase.as_deref()),
            Some("Running")
        );
        assert_eq!(rec.annotation(CONFIG_SEEN_ANNOTATION), Some(seen.as_str()));
        // With the resourceVersion that carries it (the status syncer's pre-image).
        assert_eq!(rec.metadata.resource_version.as_deref(), Some("11"));

        // Spec change: UPDATE takes spec and generation, keeps first-seen and source.
        let changed = with(running, |p| {
            p.metadata.generation = Some(2);
            p.spec.as_mut().unwrap().active_deadline_seconds = Some(9);
        });
        let out = m.merge(upd(PodOp::Set, PodSource::Api, vec![changed]));
        assert_eq!(summary(&out), [(PodOp::Update, s(&["m"]))]);
        let updated = &out[0].pods[0];
        assert_eq!(updated.metadata.generation, Some(2));
        assert_eq!(
            updated.spec.as_ref().unwrap().active_deadline_seconds,
            Some(9)
        );
        assert_eq!(
            updated.annotation(CONFIG_SEEN_ANNOTATION),
            Some(seen.as_str())
        );
        assert_eq!(updated.annotation(CONFIG_SOURCE_ANNOTATION), Some("api"));
        assert!(m.seen_all_sources(&[PodSource::Api]));
    }

    #[test]
    fn seen_sources_after_first_set_only() {
        let mut m = merger();
        let handle = m.seen_sources();
        m.merge(upd(PodOp::Add, PodSource::Api, vec![pod("a", "u", "x")]));
        m.publish_seen();
        assert!(!handle.seen_all(&[PodSource::Api]));
        m.merge(upd(PodOp::Set, PodSource::File, vec![]));
        assert!(m.seen_all_sources(&[PodSource::File]));
        assert!(
            !handle.seen_all(&[PodSource::File]),
            "handles see a source only once its updates are published"
        );
        m.publish_seen();
        assert!(handle.seen_all(&[PodSource::File]));
        assert!(!handle.seen_all(&[PodSource::File, PodSource::Http]));
        m.merge(upd(PodOp::Set, PodSource::Http, vec![]));
        m.publish_seen();
        assert!(handle.seen_all(&[PodSource::File, PodSource::Http]));
        assert!(handle.seen_all(&[]));
    }

    #[test]
    fn seen_timestamp_format() {
        let t = DateTime::from_timestamp(1_700_000_000, 120_000_000).unwrap();
        assert_eq!(format_seen(&t), "2023-11-14T22:13:20.12Z");
        let t = DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap();
        assert_eq!(format_seen(&t), "2023-11-14T22:13:20.123456789Z");
        let t = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        assert_eq!(format_seen(&t), "2023-11-14T22:13:20Z");
    }

    /// A source is published as seen only after the updates of its first `Set` are in the
    /// downstream queue: a reader that sees it ready and drains the queue has its pods.
    #[tokio::test(start_paused = true)]
    async fn run_publishes_a_source_only_after_queueing_its_pods() {
        let (in_tx, in_rx) = mpsc::channel(8);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        let cancel = CancellationToken::new();
        let m = merger();
        let seen = m.seen_sources();
        // The downstream queue is full, so the merger blocks on delivering the Set's ADD.
        out_tx
            .send(upd(PodOp::Update, PodSource::Api, vec![]))
            .await
            .unwrap();
        let task = tokio::spawn(m.run(in_rx, out_tx, cancel.clone()));
        in_tx
            .send(upd(
                PodOp::Set,
                PodSource::File,
                vec![pod("a", "uid-a", "x")],
            ))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !seen.seen_all(&[PodSource::File]),
            "seen before its pods were queued"
        );
        assert_eq!(out_rx.recv().await.unwrap().op, PodOp::Update);
        let mut waiter = seen.clone();
        waiter.wait_for(&[PodSource::File]).await;
        let queued = out_rx
            .try_recv()
            .expect("the Set's pods are queued once seen");
        assert_eq!((queued.op, queued.pods.len()), (PodOp::Add, 1));
        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn run_forwards_in_order_and_stops() {
        let (in_tx, in_rx) = mpsc::channel(8);
        let (out_tx, mut out_rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        let m = merger();
        let mut seen = m.seen_sources();
        let task = tokio::spawn(m.run(in_rx, out_tx, cancel.clone()));
        let a = pod("a", "uid-a", "x");
        in_tx
            .send(upd(PodOp::Set, PodSource::File, vec![a.clone()]))
            .await
            .unwrap();
        in_tx
            .send(upd(
                PodOp::Set,
                PodSource::File,
                vec![pod("a", "uid-a2", "y")],
            ))
            .await
            .unwrap();
        seen.wait_for(&[PodSource::File]).await;
        let ops: Vec<PodOp> = [
            out_rx.recv().await.unwrap(),
            out_rx.recv().await.unwrap(),
            out_rx.recv().await.unwrap(),
        ]
        .iter()
        .map(|u| u.op)
        .collect();
        assert_eq!(ops, [PodOp::Add, PodOp::Remove, PodOp::Add]);
        cancel.cancel();
        task.await.unwrap();
    }

    #[test]
    fn pods_are_shared_downstream_and_copied_only_when_they_change() {
        use PodSource::*;
        let mut m = merger();
        let source_copy = Arc::new(pod("a", "uid-a", "nginx:1"));
        let out = m.merge(PodUpdate {
            op: PodOp::Set,
            source: Api,
            pods: vec![source_copy.clone()],
        });
        let added = out[0].pods[0].clone();
        // Stamped, so not the source's copy (which stays unstamped); but the merger's own copy
        // is the one handed downstream.
        assert!(source_copy.annotation(CONFIG_SOURCE_ANNOTATION).is_none());
        assert_eq!(added.annotation(CONFIG_SOURCE_ANNOTATION), Some("api"));
        assert!(Arc::ptr_eq(&added, &m.pods()[0]));

        // The same pod again (the API source resends its whole set on every event): nothing
        // goes downstream and nothing is copied.
        let out = m.merge(upd(PodOp::Set, Api, vec![pod("a", "uid-a", "nginx:1")]));
        assert!(out.is_empty(), "{:?}", summary(&out));
        assert!(Arc::ptr_eq(&added, &m.pods()[0]));

        // A change is a new version; the one downstream holds is left as it was.
        let out = m.merge(upd(PodOp::Set, Api, vec![pod("a", "uid-a", "nginx:2")]));
        assert_eq!(summary(&out), [(PodOp::Update, s(&["a"]))]);
        let updated = &out[0].pods[0];
        assert!(!Arc::ptr_eq(&added, updated));
        assert_eq!(image(&added), "nginx:1");
        assert_eq!(image(updated), "nginx:2");
        assert_eq!(
            updated.annotation(CONFIG_SEEN_ANNOTATION),
            added.annotation(CONFIG_SEEN_ANNOTATION),
            "first seen is kept"
        );
        assert_eq!(updated.annotation(CONFIG_SOURCE_ANNOTATION), Some("api"));

        // A status-only change too.
        let mut with_status = pod("a", "uid-a", "nginx:2");
        with_status.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let before = updated.clone();
        let out = m.merge(upd(PodOp::Set, Api, vec![with_status]));
        assert_eq!(summary(&out), [(PodOp::Reconcile, s(&["a"]))]);
        assert!(before.status.is_none());
        assert_eq!(
            out[0].pods[0]
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
    }

    #[test]
    fn annotation_changes_count_except_the_kubelets_own() {
        let mut m = merger();
        let annotated = |pairs: &[(&str, &str)]| {
            with(pod("a", "uid-a", "nginx"), |p| {
                p.metadata.annotations = Some(
                    pairs
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                )
            })
        };
        m.merge(upd(
            PodOp::Set,
            PodSource::Api,
            vec![annotated(&[("a", "1")])],
        ));
        // The kubelet's own annotations, sent by the source, are no change.
        let out = m.merge(upd(
            PodOp::Set,
            PodSource::Api,
            vec![annotated(&[
                ("a", "1"),
                (CONFIG_SEEN_ANNOTATION, "1970-01-01T00:00:00Z"),
                (CONFIG_SOURCE_ANNOTATION, "file"),
            ])],
        ));
        assert!(out.is_empty(), "{:?}", summary(&out));
        // Any other key or value is.
        for pairs in [&[("a", "2")][..], &[("a", "1"), ("b", "")], &[]] {
            let out = m.merge(upd(PodOp::Set, PodSource::Api, vec![annotated(pairs)]));
            assert_eq!(summary(&out), [(PodOp::Update, s(&["a"]))], "{pairs:?}");
            assert_eq!(
                out[0].pods[0].annotation(CONFIG_SOURCE_ANNOTATION),
                Some("api")
            );
        }
    }

    fn image(p: &Pod) -> &str {
        p.spec.as_ref().unwrap().containers[0]
            .image
            .as_deref()
            .unwrap()
    }
}
