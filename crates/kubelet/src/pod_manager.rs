//! Pod manager: the kubelet's desired set of pods, keyed by UID and by full name, and the mirror
//! pods of its static pods, kept apart by UID and full name (upstream `pod.Manager`). Owned by
//! the sync loop (the only writer); receives upserts/removals of merged pods; emits `watch`
//! snapshots of the regular pods and of the mirror pods (by full name) for readers.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::mirror::is_mirror_pod;
use crate::types::{PodExt, PodUid};

use crate::types::PodsSnapshot;

/// Mirror pods by full name (`namespace/name`), as published to readers.
pub type MirrorSnapshot = Arc<HashMap<String, Pod>>;

/// The desired pods of this node and the mirror pods of its static pods.
pub struct PodManager {
    /// Shared with the pod workers working on them (one copy of each pod).
    pods: HashMap<PodUid, Arc<Pod>>,
    by_full_name: HashMap<String, PodUid>,
    mirrors: HashMap<PodUid, Pod>,
    mirror_by_full_name: HashMap<String, PodUid>,
    snapshot: watch::Sender<PodsSnapshot>,
    mirror_snapshot: watch::Sender<MirrorSnapshot>,
    /// Between [`PodManager::begin_batch`] and [`PodManager::end_batch`]: which snapshots
    /// changed and are still to publish.
    batch: Option<Pending>,
}

/// Snapshots a batch has changed.
#[derive(Debug, Default, Clone, Copy)]
struct Pending {
    pods: bool,
    mirrors: bool,
}

impl Default for PodManager {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether the pod manager files `pod` as a mirror pod: it carries the mirror annotation and
/// did not come from a static source (a manifest that sets the annotation is still run).
pub fn stored_as_mirror(pod: &Pod) -> bool {
    is_mirror_pod(pod) && !pod.source().is_some_and(|s| s.is_static())
}

impl PodManager {
    pub fn new() -> Self {
        Self {
            pods: HashMap::new(),
            by_full_name: HashMap::new(),
            mirrors: HashMap::new(),
            mirror_by_full_name: HashMap::new(),
            snapshot: watch::Sender::new(Arc::new(Vec::new())),
            mirror_snapshot: watch::Sender::new(Arc::new(HashMap::new())),
            batch: None,
        }
    }

    /// Holds the snapshots back until [`PodManager::end_batch`], so an update of many pods
    /// publishes (clones every pod) once rather than once per pod.
    pub fn begin_batch(&mut self) {
        self.batch.get_or_insert_with(Pending::default);
    }

    /// Publishes what changed since [`PodManager::begin_batch`].
    pub fn end_batch(&mut self) {
        let Some(pending) = self.batch.take() else {
            return;
        };
        if pending.pods {
            self.publish();
        }
        if pending.mirrors {
            self.publish_mirrors();
        }
    }

    /// Readers (HTTP server, mirror reconciler, tests) see the regular desired pods through this.
    pub fn subscribe(&self) -> watch::Receiver<PodsSnapshot> {
        self.snapshot.subscribe()
    }

    /// Readers (status syncer, mirror reconciler) see the mirror pods, by full name, through
    /// this.
    pub fn subscribe_mirrors(&self) -> watch::Receiver<MirrorSnapshot> {
        self.mirror_snapshot.subscribe()
    }

    /// Adds or replaces a pod; a mirror pod goes to the mirror store (upstream `UpdatePod`).
    pub fn upsert(&mut self, pod: impl Into<Arc<Pod>>) {
        let pod: Arc<Pod> = pod.into();
        let uid = pod.uid().to_owned();
        if stored_as_mirror(&pod) {
            self.mirror_by_full_name
                .insert(pod.full_name(), uid.clone());
            self.mirrors
                .insert(uid, Arc::try_unwrap(pod).unwrap_or_else(|p| (*p).clone()));
            self.publish_mirrors();
        } else {
            self.by_full_name.insert(pod.full_name(), uid.clone());
            self.pods.insert(uid, pod);
            self.publish();
        }
    }

    /// Forgets a pod or mirror pod by UID; returns it if it was known.
    pub fn remove(&mut self, uid: &str) -> Option<Arc<Pod>> {
        if let Some(pod) = self.pods.remove(uid) {
            let name = pod.full_name();
            if self.by_full_name.get(&name).is_some_and(|u| u == uid) {
                self.by_full_name.remove(&name);
            }
            crate::spare_capacity::release_spare(&mut self.pods);
            crate::spare_capacity::release_spare(&mut self.by_full_name);
            self.publish();
            return Some(pod);
        }
        let mirror = self.mirrors.remove(uid)?;
        let name = mirror.full_name();
        if self
            .mirror_by_full_name
            .get(&name)
            .is_some_and(|u| u == uid)
        {
            self.mirror_by_full_name.remove(&name);
        }
        crate::spare_capacity::release_spare(&mut self.mirrors);
        crate::spare_capacity::release_spare(&mut self.mirror_by_full_name);
        self.publish_mirrors();
        Some(Arc::new(mirror))
    }

    /// A regular (non-mirror) pod by UID.
    pub fn get(&self, uid: &str) -> Option<&Pod> {
        self.pods.get(uid).map(|p| &**p)
    }

    /// A regular pod by UID, shared (for a pod worker to hold without copying it).
    pub fn get_shared(&self, uid: &str) -> Option<Arc<Pod>> {
        self.pods.get(uid).cloned()
    }

    /// A regular (non-mirror) pod by `namespace/name`.
    pub fn get_by_full_name(&self, full_name: &str) -> Option<&Pod> {
        self.by_full_name
            .get(full_name)
            .and_then(|u| self.pods.get(u))
            .map(|p| &**p)
    }

    /// The regular pods (mirror pods excluded).
    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.values().map(|p| &**p)
    }

    /// UIDs of the regular pods (mirror pods excluded).
    pub fn uids(&self) -> HashSet<PodUid> {
        self.pods.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The mirror pods.
    pub fn mirror_pods(&self) -> impl Iterator<Item = &Pod> {
        self.mirrors.values()
    }

    /// A mirror pod by its own UID.
    pub fn get_mirror(&self, uid: &str) -> Option<&Pod> {
        self.mirrors.get(uid)
    }

    /// Upstream `GetMirrorPodByPod`: the mirror pod with the static pod's full name (whether
    /// or not its hash still matches; see `mirror::mirror_pod_matches`).
    pub fn mirror_pod_for(&self, static_pod: &Pod) -> Option<&Pod> {
        self.mirror_by_full_name
            .get(&static_pod.full_name())
            .and_then(|u| self.mirrors.get(u))
    }

    /// Upstream `GetPodByMirrorPod`: the regular pod with the mirror pod's full name.
    pub fn pod_for_mirror(&self, mirror: &Pod) -> Option<&Pod> {
        self.get_by_full_name(&mirror.full_name())
    }

    /// Upstream `GetOrphanedMirrorPodNames`: mirror pods whose full name no regular pod has,
    /// sorted by full name.
    pub fn orphaned_mirror_pods(&self) -> Vec<&Pod> {
        let mut orphans: Vec<&Pod> = self
            .mirror_by_full_name
            .iter()
            .filter(|(name, _)| !self.by_full_name.contains_key(*name))
            .filter_map(|(_, uid)| self.mirrors.get(uid))
            .collect();
        orphans.sort_by_key(|p| p.full_name());
        orphans
    }

    /// Upstream `TranslatePodUID`: the UID of a mirror pod's static pod; any other UID as is.
    pub fn translate_uid<'a>(&'a self, uid: &'a str) -> &'a str {
        self.mirrors
            .get(uid)
            .and_then(|m| self.pod_for_mirror(m))
            .map_or(uid, |p| p.uid())
    }

    fn publish(&mut self) {
        if let Some(pending) = &mut self.batch {
            pending.pods = true;
            return;
        }
        let mut pods: Vec<Arc<Pod>> = self.pods.values().cloned().collect();
        pods.sort_by_cached_key(|p| p.full_name());
        self.snapshot.send_replace(Arc::new(pods));
    }

    fn publish_mirrors(&mut self) {
        if let Some(pending) = &mut self.batch {
            pending.mirrors = true;
            return;
        }
        let by_name: HashMap<String, Pod> = self
            .mirror_by_full_name
            .iter()
            .filter_map(|(name, uid)| Some((name.clone(), self.mirrors.get(uid)?.clone())))
            .collect();
        self.mirror_snapshot.send_replace(Arc::new(by_name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{
        CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION, CONFIG_SOURCE_ANNOTATION,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(uid: &str, name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn annotated(mut p: Pod, kv: &[(&str, &str)]) -> Pod {
        let a = p.metadata.annotations.get_or_insert_with(Default::default);
        for (k, v) in kv {
            a.insert((*k).into(), (*v).into());
        }
        p
    }

    fn static_pod(uid: &str, name: &str) -> Pod {
        annotated(
            pod(uid, name),
            &[
                (CONFIG_SOURCE_ANNOTATION, "file"),
                (CONFIG_HASH_ANNOTATION, uid),
            ],
        )
    }

    fn mirror(uid: &str, name: &str, hash: &str) -> Pod {
        annotated(
            pod(uid, name),
            &[
                (CONFIG_SOURCE_ANNOTATION, "api"),
                (CONFIG_MIRROR_ANNOTATION, hash),
            ],
        )
    }

    /// After a burst of 100 pods is deleted the tables give their capacity back (each slot
    /// holds a whole Pod inline).
    #[test]
    fn removing_a_burst_of_pods_releases_the_tables() {
        let mut m = PodManager::new();
        for i in 0..100 {
            m.upsert(pod(&format!("u{i}"), &format!("p{i}")));
        }
        assert!(m.pods.capacity() >= 100);
        for i in 0..100 {
            assert!(m.remove(&format!("u{i}")).is_some());
        }
        assert!(m.pods.capacity() <= 32, "pods: {}", m.pods.capacity());
        assert!(
            m.by_full_name.capacity() <= 32,
            "by_full_name: {}",
            m.by_full_name.capacity()
        );
    }

    #[test]
    fn a_batch_publishes_once_at_its_end() {
        let mut pm = PodManager::new();
        let mut rx = pm.subscribe();
        let mut mirrors = pm.subscribe_mirrors();
        rx.mark_unchanged();
        mirrors.mark_unchanged();
        pm.begin_batch();
        pm.upsert(pod("u1", "a"));
        pm.upsert(pod("u2", "b"));
        pm.upsert(mirror("m1", "s", "h1"));
        pm.remove("u1");
        assert!(!rx.has_changed().unwrap() && !mirrors.has_changed().unwrap());
        pm.end_batch();
        assert!(rx.has_changed().unwrap() && mirrors.has_changed().unwrap());
        let names: Vec<String> = rx
            .borrow_and_update()
            .iter()
            .map(|p| p.full_name())
            .collect();
        assert_eq!(names, ["default/b"]);
        assert_eq!(mirrors.borrow_and_update().len(), 1);
        // Outside a batch every change publishes at once; an empty batch publishes nothing.
        pm.begin_batch();
        pm.end_batch();
        assert!(!rx.has_changed().unwrap());
        pm.upsert(pod("u3", "c"));
        assert_eq!(rx.borrow_and_update().len(), 2);
    }

    #[test]
    fn upsert_remove_and_snapshot() {
        let mut m = PodManager::new();
        let rx = m.subscribe();
        m.upsert(pod("u1", "a"));
        m.upsert(pod("u2", "b"));
        assert_eq!(rx.borrow().len(), 2);
        assert_eq!(m.get_by_full_name("default/b").map(|p| p.uid()), Some("u2"));
        // A new UID for the same name (manifest changed) takes over the name.
        m.upsert(pod("u3", "b"));
        assert_eq!(
            m.remove("u2").map(|p| p.uid().to_owned()),
            Some("u2".into())
        );
        assert_eq!(m.get_by_full_name("default/b").map(|p| p.uid()), Some("u3"));
        assert!(m.remove("nope").is_none());
        assert_eq!(rx.borrow().len(), 2);
    }

    #[test]
    fn mirror_pods_are_kept_apart_and_mapped_to_static_pods() {
        let mut m = PodManager::new();
        let pods = m.subscribe();
        let mirrors = m.subscribe_mirrors();
        m.upsert(static_pod("s1", "web-node"));
        m.upsert(mirror("m1", "web-node", "s1"));
        m.upsert(mirror("m2", "gone-node", "old"));
        m.upsert(pod("a1", "api-pod"));

        // Regular views never contain mirror pods.
        assert_eq!(m.len(), 2);
        assert_eq!(m.uids(), HashSet::from(["s1".to_owned(), "a1".to_owned()]));
        assert!(m.get("m1").is_none());
        assert_eq!(
            m.get_by_full_name("default/web-node").map(|p| p.uid()),
            Some("s1")
        );
        assert_eq!(pods.borrow().len(), 2);
        let names: Vec<String> = pods.borrow().iter().map(|p| p.full_name()).collect();
        assert_eq!(names, ["default/api-pod", "default/web-node"]);

        // Static ↔ mirror by full name, and UID translation.
        let s1 = m.get("s1").cloned().unwrap();
        assert_eq!(m.mirror_pod_for(&s1).map(|p| p.uid()), Some("m1"));
        let m1 = m.get_mirror("m1").cloned().unwrap();
        assert_eq!(m.pod_for_mirror(&m1).map(|p| p.uid()), Some("s1"));
        assert_eq!(m.translate_uid("m1"), "s1");
        assert_eq!(m.translate_uid("m2"), "m2");
        assert_eq!(m.translate_uid("a1"), "a1");
        let api_pod = m.get("a1").cloned().unwrap();
        assert!(m.mirror_pod_for(&api_pod).is_none());

        // The orphan is the mirror whose static pod is gone.
        let orphans: Vec<&str> = m.orphaned_mirror_pods().iter().map(|p| p.uid()).collect();
        assert_eq!(orphans, ["m2"]);
        assert_eq!(m.mirror_pods().count(), 2);

        // The mirror snapshot is keyed by full name.
        {
            let snap = mirrors.borrow();
            assert_eq!(snap.len(), 2);
            assert_eq!(snap.get("default/web-node").map(|p| p.uid()), Some("m1"));
        }

        // A replacement mirror (new UID) takes over the name; removing the old one keeps it.
        m.upsert(mirror("m3", "web-node", "s1"));
        assert_eq!(
            m.remove("m1").map(|p| p.uid().to_owned()),
            Some("m1".into())
        );
        assert_eq!(m.mirror_pod_for(&s1).map(|p| p.uid()), Some("m3"));
        assert_eq!(
            mirrors.borrow().get("default/web-node").map(|p| p.uid()),
            Some("m3")
        );

        // Removing the static pod orphans its mirror; regular snapshot shrinks.
        m.remove("s1");
        let orphans: Vec<&str> = m.orphaned_mirror_pods().iter().map(|p| p.uid()).collect();
        assert_eq!(orphans, ["m2", "m3"]);
        assert_eq!(pods.borrow().len(), 1);
        m.remove("m2");
        m.remove("m3");
        assert!(mirrors.borrow().is_empty());
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn static_manifest_with_mirror_annotation_is_still_a_regular_pod() {
        let mut m = PodManager::new();
        m.upsert(annotated(
            static_pod("s1", "odd-node"),
            &[(CONFIG_MIRROR_ANNOTATION, "x")],
        ));
        assert!(m.get("s1").is_some());
        assert_eq!(m.mirror_pods().count(), 0);
    }
}
