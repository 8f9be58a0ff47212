//! Status manager: the single owner of every pod's latest API status (upstream
//! `status.Manager`). Pod workers write generated statuses into it, and the final one when a
//! pod's termination is complete (`terminate_pod`, which also marks the pod finished); the
//! HTTP server, the sync loop and (in API mode) the API status syncer read from it. Emits the
//! newest status version on a `watch` channel whenever any status changes.
//!
//! Versions come from one counter shared by all pods, so a status written later always carries
//! a higher version, even after a pod's entry was forgotten and re-created: the API syncer can
//! compare a version with the last one it pushed and never overwrite a newer status with an
//! older one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use tokio::sync::watch;
use tracing::debug;

use crate::status::terminate::terminated_pod_status;
use crate::sync;
use crate::types::{PodExt, PodUid};

/// Pod conditions the kubelet owns (upstream `PodConditionsByKubelet` with the default feature
/// gates): the kubelet's value replaces whatever the API has; all other conditions belong to
/// someone else and are kept from the API pod.
pub const KUBELET_OWNED_CONDITIONS: [&str; 7] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
    "PodResizeInProgress",
    "PodResizePending",
];

/// A condition the kubelet shares with other writers (upstream `PodConditionSharedByKubelet`).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// Whether the kubelet owns conditions of this type.
pub fn is_kubelet_owned_condition(type_: &str) -> bool {
    KUBELET_OWNED_CONDITIONS.contains(&type_)
}

/// Whether a pod phase is terminal (`Succeeded` or `Failed`).
pub fn is_terminal_phase(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// One pod's status with its version (see [`StatusManager::snapshot`]).
#[derive(Debug, Clone, PartialEq)]
pub struct VersionedStatus {
    pub uid: PodUid,
    pub version: u64,
    pub status: PodStatus,
}

#[derive(Debug, Clone)]
struct Versioned {
    status: PodStatus,
    version: u64,
    /// Written by [`StatusManager::terminate_pod`]: the pod's termination is complete
    /// (upstream `podIsFinished`), so a gracefully deleted pod may be removed from the API.
    finished: bool,
}

#[derive(Debug, Default)]
struct Inner {
    statuses: HashMap<PodUid, Versioned>,
    /// The last version handed out (to any pod).
    last_version: u64,
}

/// Handle to the status manager; clones share the same statuses.
#[derive(Clone)]
pub struct StatusManager {
    inner: Arc<Mutex<Inner>>,
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
            inner: Arc::default(),
            changes: Arc::new(watch::Sender::new(0)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        sync::lock(&self.inner)
    }

    /// Records the pod's newest status. A terminal phase is never replaced by a non-terminal
    /// one (upstream refuses such transitions), and an unchanged status is not re-versioned.
    pub fn set_pod_status(&self, pod: &Pod, status: PodStatus) {
        self.update(pod, status, false, false);
    }

    /// Upstream `TerminatePod`, called once the pod worker finished with a pod: the last
    /// status, with every container that has no terminal state marked terminated with
    /// `ContainerStatusUnknown` (see [`terminated_pod_status`]) and, for a pod that is not
    /// static, a terminal phase. Always versioned anew and marked finished, so the API syncer
    /// writes it and may then remove a gracefully deleted pod.
    pub fn terminate_pod(&self, pod: &Pod) {
        let inner = self.lock();
        let last = inner.statuses.get(pod.uid()).map(|v| &v.status);
        let status = terminated_pod_status(pod, last);
        self.update_locked(inner, pod, status, true, true);
    }

    /// Whether [`terminate_pod`](Self::terminate_pod) ran for this pod (upstream
    /// `podIsFinished` of the cached status).
    pub fn is_finished(&self, uid: &str) -> bool {
        self.lock().statuses.get(uid).is_some_and(|v| v.finished)
    }

    fn update(&self, pod: &Pod, status: PodStatus, force: bool, finished: bool) {
        self.update_locked(self.lock(), pod, status, force, finished);
    }

    /// Upstream `updateStatusInternal`: `force` versions the status even when unchanged.
    fn update_locked(
        &self,
        mut inner: MutexGuard<'_, Inner>,
        pod: &Pod,
        mut status: PodStatus,
        force: bool,
        mut finished: bool,
    ) {
        let uid = pod.uid().to_owned();
        let is_static = pod.source().is_some_and(|s| s.is_static());
        // Upstream `normalizeStatus`: a pod's termination messages share 12 KiB.
        crate::kuberuntime::runtime_status::bound_pod_termination_messages(pod, &mut status);
        if let Some(old) = inner.statuses.get(&uid) {
            if is_terminal_phase(old.status.phase.as_deref())
                && !is_terminal_phase(status.phase.as_deref())
            {
                debug!(pod = %pod.full_name(), %uid, old = ?old.status.phase, new = ?status.phase, reason = "terminal phase is final", "refusing to move a terminal pod back to a running phase");
                status.phase.clone_from(&old.status.phase);
            }
            // An eviction's verdict is final (upstream applies the evictor's status on every
            // later generation): a pod killed for eviction never turns Succeeded.
            if old.status.phase.as_deref() == Some("Failed")
                && old.status.reason.as_deref() == Some(crate::types::EVICTED_REASON)
            {
                status.phase.clone_from(&old.status.phase);
                status.reason.clone_from(&old.status.reason);
                status.message.clone_from(&old.status.message);
            }
            // A finished pod stays finished (static pods may run again under the same UID).
            if old.finished && !is_static {
                finished = true;
            }
            if old.status == status && old.finished == finished && !force {
                return;
            }
        }
        inner.last_version += 1;
        let version = inner.last_version;
        inner.statuses.insert(
            uid,
            Versioned {
                status,
                version,
                finished,
            },
        );
        drop(inner);
        self.changes.send_replace(version);
    }

    /// The latest status of a pod.
    pub fn get_pod_status(&self, uid: &str) -> Option<PodStatus> {
        self.lock().statuses.get(uid).map(|v| v.status.clone())
    }

    /// `f` of the latest status of a pod, without copying it (per-pod checks that run over
    /// every pod, e.g. "is it terminal?"). `f` runs under the manager's lock: keep it short.
    pub fn with_pod_status<R>(&self, uid: &str, f: impl FnOnce(Option<&PodStatus>) -> R) -> R {
        f(self.lock().statuses.get(uid).map(|v| &v.status))
    }

    /// The latest status of a pod with its version.
    pub fn get_versioned(&self, uid: &str) -> Option<VersionedStatus> {
        self.lock().statuses.get(uid).map(|v| VersionedStatus {
            uid: uid.to_owned(),
            version: v.version,
            status: v.status.clone(),
        })
    }

    /// The version of every held status (cheap: no status is cloned).
    pub fn versions(&self) -> Vec<(PodUid, u64)> {
        self.lock()
            .statuses
            .iter()
            .map(|(uid, v)| (uid.clone(), v.version))
            .collect()
    }

    /// Every held status with its version.
    pub fn snapshot(&self) -> Vec<VersionedStatus> {
        self.lock()
            .statuses
            .iter()
            .map(|(uid, v)| VersionedStatus {
                uid: uid.clone(),
                version: v.version,
                status: v.status.clone(),
            })
            .collect()
    }

    /// Forgets pods that are no longer desired and have no worker.
    pub fn remove_orphaned_statuses(&self, keep: &HashSet<PodUid>) {
        let mut inner = self.lock();
        inner.statuses.retain(|uid, _| keep.contains(uid));
        crate::spare_capacity::release_spare(&mut inner.statuses);
    }

    /// Forgets one pod's status.
    pub fn delete(&self, uid: &str) {
        let mut inner = self.lock();
        inner.statuses.remove(uid);
        crate::spare_capacity::release_spare(&mut inner.statuses);
    }

    /// Carries the newest status version; changes whenever any status changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Number of statuses held (leak checks).
    pub fn len(&self) -> usize {
        self.lock().statuses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().statuses.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod() -> Pod {
        pod_with_uid("u")
    }

    fn pod_with_uid(uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
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

    /// Statuses of a deleted burst of pods are forgotten and their table's capacity given
    /// back, both by the housekeeping sweep and by per-pod deletes.
    #[test]
    fn forgetting_a_burst_releases_the_table() {
        let m = StatusManager::new();
        for i in 0..100 {
            m.set_pod_status(&pod_with_uid(&format!("a{i}")), status("Running"));
        }
        m.remove_orphaned_statuses(&HashSet::new());
        assert!(m.is_empty());
        assert!(m.lock().statuses.capacity() <= 32);
        for i in 0..100 {
            m.set_pod_status(&pod_with_uid(&format!("b{i}")), status("Running"));
        }
        for i in 0..100 {
            m.delete(&format!("b{i}"));
        }
        assert!(m.lock().statuses.capacity() <= 32);
    }

    #[test]
    fn versions_only_grow_across_pods_and_re_creation() {
        let m = StatusManager::new();
        let rx = m.subscribe();
        m.set_pod_status(&pod_with_uid("a"), status("Pending"));
        m.set_pod_status(&pod_with_uid("b"), status("Pending"));
        m.set_pod_status(&pod_with_uid("a"), status("Running"));
        let a = m.get_versioned("a").unwrap();
        let b = m.get_versioned("b").unwrap();
        assert_eq!((a.version, b.version), (3, 2));
        assert_eq!(*rx.borrow(), 3);
        // Forgotten and written again: the new entry is newer than anything seen before.
        m.delete("a");
        m.set_pod_status(&pod_with_uid("a"), status("Pending"));
        assert_eq!(m.get_versioned("a").unwrap().version, 4);
        let mut versions = m.versions();
        versions.sort();
        assert_eq!(versions, [("a".to_owned(), 4), ("b".to_owned(), 2)]);
        let mut snap = m.snapshot();
        snap.sort_by(|x, y| x.uid.cmp(&y.uid));
        assert_eq!(snap[0].status.phase.as_deref(), Some("Pending"));
        assert_eq!(snap.len(), 2);
    }

    #[test]
    fn terminate_pod_versions_anew_and_marks_the_pod_finished() {
        let m = StatusManager::new();
        let p = pod();
        m.set_pod_status(&p, status("Pending"));
        assert!(!m.is_finished("u"));
        let before = m.get_versioned("u").unwrap().version;
        m.terminate_pod(&p);
        let after = m.get_versioned("u").unwrap();
        assert_eq!(after.status.phase.as_deref(), Some("Failed"));
        assert!(after.version > before);
        assert!(m.is_finished("u"));
        // Forced: the same final status again still gets a new version.
        m.terminate_pod(&p);
        assert!(m.get_versioned("u").unwrap().version > after.version);
        // A later ordinary write keeps the pod finished (not a static pod).
        m.set_pod_status(&p, status("Failed"));
        assert!(m.is_finished("u"));
        // Unknown pods are not finished; a static pod may run again under its UID.
        assert!(!m.is_finished("other"));
        let mut s = pod_with_uid("s");
        s.metadata.annotations = Some(
            [(
                crate::types::CONFIG_SOURCE_ANNOTATION.to_owned(),
                "file".to_owned(),
            )]
            .into(),
        );
        m.set_pod_status(&s, status("Running"));
        m.terminate_pod(&s);
        assert!(m.is_finished("s"));
        assert_eq!(
            m.get_pod_status("s").unwrap().phase.as_deref(),
            Some("Running")
        );
        m.set_pod_status(&s, status("Pending"));
        assert!(!m.is_finished("s"));
    }

    #[test]
    fn condition_ownership_and_terminal_phases() {
        for c in ["PodScheduled", "Ready", "Initialized", "ContainersReady"] {
            assert!(is_kubelet_owned_condition(c), "{c}");
        }
        assert!(is_kubelet_owned_condition("PodReadyToStartContainers"));
        assert!(!is_kubelet_owned_condition("DisruptionTarget"));
        assert!(!is_kubelet_owned_condition("example.com/Gate"));
        assert!(is_terminal_phase(Some("Failed")));
        assert!(!is_terminal_phase(Some("Running")));
        assert!(!is_terminal_phase(None));
    }
}
