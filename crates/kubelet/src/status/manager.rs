//! Status manager: the single owner of every pod's latest API status (upstream
//! `status.Manager`). Pod workers write generated statuses into it; the HTTP server, the sync
//! loop and (in API mode) the API status syncer read from it. Emits a version number on a
//! `watch` channel whenever any status changes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use tokio::sync::watch;
use tracing::debug;

use crate::types::{PodExt, PodUid};

#[derive(Debug, Clone)]
struct Versioned {
    status: PodStatus,
    version: u64,
}

/// Handle to the status manager; clones share the same statuses.
#[derive(Clone)]
pub struct StatusManager {
    statuses: Arc<Mutex<HashMap<PodUid, Versioned>>>,
    changes: Arc<watch::Sender<u64>>,
}

impl Default for StatusManager {
    fn default() -> Self {
        Self::new()
    }
}

impl StatusManager {
    pub fn new() -> Self {
        Self {
            statuses: Arc::default(),
            changes: Arc::new(watch::Sender::new(0)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<PodUid, Versioned>> {
        self.statuses
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the pod's newest status. A terminal phase is never replaced by a non-terminal
    /// one (upstream refuses such transitions), and an unchanged status is not re-versioned.
    pub fn set_pod_status(&self, pod: &Pod, mut status: PodStatus) {
        let uid = pod.uid().to_owned();
        let mut map = self.lock();
        if let Some(old) = map.get(&uid) {
            if is_terminal(old.status.phase.as_deref()) && !is_terminal(status.phase.as_deref()) {
                debug!(pod = %pod.full_name(), %uid, old = ?old.status.phase, new = ?status.phase, "refusing to move a terminal pod back to a running phase");
                status.phase.clone_from(&old.status.phase);
            }
            if old.status == status {
                return;
            }
        }
        let version = map.get(&uid).map_or(1, |v| v.version + 1);
        map.insert(uid, Versioned { status, version });
        drop(map);
        self.changes.send_modify(|v| *v += 1);
    }

    /// The latest status of a pod.
    pub fn get_pod_status(&self, uid: &str) -> Option<PodStatus> {
        self.lock().get(uid).map(|v| v.status.clone())
    }

    /// Forgets pods that are no longer desired and have no worker.
    pub fn remove_orphaned_statuses(&self, keep: &HashSet<PodUid>) {
        self.lock().retain(|uid, _| keep.contains(uid));
    }

    /// Forgets one pod's status.
    pub fn delete(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Bumps whenever any status changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Number of statuses held (leak checks).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some("u".into()),
                name: Some("p".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn status(phase: &str) -> PodStatus {
        PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        }
    }

    #[test]
    fn terminal_phase_is_sticky_and_unchanged_status_not_versioned() {
        let m = StatusManager::new();
        let rx = m.subscribe();
        m.set_pod_status(&pod(), status("Running"));
        m.set_pod_status(&pod(), status("Running"));
        assert_eq!(*rx.borrow(), 1);
        m.set_pod_status(&pod(), status("Succeeded"));
        m.set_pod_status(&pod(), status("Running"));
        assert_eq!(
            m.get_pod_status("u").and_then(|s| s.phase).as_deref(),
            Some("Succeeded")
        );
        m.remove_orphaned_statuses(&HashSet::new());
        assert!(m.is_empty());
    }
}
