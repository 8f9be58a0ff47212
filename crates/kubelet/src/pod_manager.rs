//! Pod manager: the kubelet's desired set of pods, keyed by UID and by full name (upstream
//! `pod.Manager`). Owned by the sync loop (the only writer); readers get a `watch` snapshot.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::types::{PodExt, PodUid};

/// The desired pods of this node.
pub struct PodManager {
    pods: HashMap<PodUid, Pod>,
    by_full_name: HashMap<String, PodUid>,
    snapshot: watch::Sender<Arc<Vec<Pod>>>,
}

impl Default for PodManager {
    fn default() -> Self {
        Self::new()
    }
}

impl PodManager {
    pub fn new() -> Self {
        Self {
            pods: HashMap::new(),
            by_full_name: HashMap::new(),
            snapshot: watch::Sender::new(Arc::new(Vec::new())),
        }
    }

    /// Readers (HTTP server, tests) see the desired pods through this.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Vec<Pod>>> {
        self.snapshot.subscribe()
    }

    /// Adds or replaces a pod.
    pub fn upsert(&mut self, pod: Pod) {
        let uid = pod.uid().to_owned();
        self.by_full_name.insert(pod.full_name(), uid.clone());
        self.pods.insert(uid, pod);
        self.publish();
    }

    /// Forgets a pod; returns it if it was known.
    pub fn remove(&mut self, uid: &str) -> Option<Pod> {
        let pod = self.pods.remove(uid)?;
        let name = pod.full_name();
        if self.by_full_name.get(&name).is_some_and(|u| u == uid) {
            self.by_full_name.remove(&name);
        }
        self.publish();
        Some(pod)
    }

    pub fn get(&self, uid: &str) -> Option<&Pod> {
        self.pods.get(uid)
    }

    pub fn get_by_full_name(&self, full_name: &str) -> Option<&Pod> {
        self.by_full_name
            .get(full_name)
            .and_then(|u| self.pods.get(u))
    }

    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.values()
    }

    pub fn uids(&self) -> std::collections::HashSet<PodUid> {
        self.pods.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    fn publish(&self) {
        let mut pods: Vec<Pod> = self.pods.values().cloned().collect();
        pods.sort_by_key(|p| p.full_name());
        self.snapshot.send_replace(Arc::new(pods));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
