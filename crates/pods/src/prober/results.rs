//! Probe results managers (upstream `prober/results`): own the latest liveness, readiness and
//! startup result of every container, keyed by runtime container ID so a result never outlives
//! its container. Receive `set`/`remove` from probe workers; emit a [`ProbeUpdate`] on an mpsc
//! channel whenever a result changes (the sync loop selects on it). Implement
//! [`ProbeResults`] for `compute_pod_actions` and status generation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::kuberuntime::actions::{ProbeResult, ProbeResults};
use crate::sync;
use crate::types::PodUid;

/// The three probe kinds (upstream `probeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    /// Upstream's capitalised name, used in events (`Liveness probe failed: …`).
    pub fn title(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    /// The `probe_type` metric label.
    pub fn label(self) -> &'static str {
        self.title()
    }

    /// The value a fresh container starts with (upstream worker `initialValue`).
    pub fn initial_value(self) -> ProbeResult {
        match self {
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Startup => ProbeResult::Unknown,
        }
    }
}

/// A changed probe result, sent to the sync loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeUpdate {
    pub pod_uid: PodUid,
    pub container_id: String,
    pub kind: ProbeKind,
    pub result: ProbeResult,
}

/// Shared store of results; cheap to clone.
#[derive(Clone)]
pub struct ResultsManager {
    inner: Arc<Mutex<HashMap<(String, ProbeKind), ProbeResult>>>,
    updates: mpsc::UnboundedSender<ProbeUpdate>,
}

impl ResultsManager {
    /// A store and the receiving end of its change notifications.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<ProbeUpdate>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                inner: Arc::default(),
                updates: tx,
            },
            rx,
        )
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(String, ProbeKind), ProbeResult>> {
        sync::lock(&self.inner)
    }

    /// Records a result; notifies only when it differs from the previous one.
    pub fn set(&self, pod_uid: &str, container_id: &str, kind: ProbeKind, result: ProbeResult) {
        let old = self.lock().insert((container_id.to_owned(), kind), result);
        if old != Some(result) {
            // The sync loop gone means the kubelet is stopping; nobody needs the update.
            let _ = self.updates.send(ProbeUpdate {
                pod_uid: pod_uid.to_owned(),
                container_id: container_id.to_owned(),
                kind,
                result,
            });
        }
    }

    pub fn get(&self, container_id: &str, kind: ProbeKind) -> Option<ProbeResult> {
        self.lock().get(&(container_id.to_owned(), kind)).copied()
    }

    /// Forgets a container's result of one kind.
    pub fn remove(&self, container_id: &str, kind: ProbeKind) {
        self.lock().remove(&(container_id.to_owned(), kind));
    }

    /// Number of stored results (for leak checks).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ProbeResults for ResultsManager {
    fn liveness(&self, container_id: &str) -> Option<ProbeResult> {
        self.get(container_id, ProbeKind::Liveness)
    }
    fn startup(&self, container_id: &str) -> Option<ProbeResult> {
        self.get(container_id, ProbeKind::Startup)
    }
    fn readiness(&self, container_id: &str) -> Option<ProbeResult> {
        self.get(container_id, ProbeKind::Readiness)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changes_are_sent() {
        let (m, mut rx) = ResultsManager::new();
        m.set("u", "c1", ProbeKind::Readiness, ProbeResult::Failure);
        m.set("u", "c1", ProbeKind::Readiness, ProbeResult::Failure);
        m.set("u", "c1", ProbeKind::Readiness, ProbeResult::Success);
        m.set("u", "c1", ProbeKind::Liveness, ProbeResult::Success);
        let mut got = Vec::new();
        while let Ok(u) = rx.try_recv() {
            got.push((u.kind, u.result));
        }
        assert_eq!(
            got,
            vec![
                (ProbeKind::Readiness, ProbeResult::Failure),
                (ProbeKind::Readiness, ProbeResult::Success),
                (ProbeKind::Liveness, ProbeResult::Success),
            ]
        );
        assert_eq!(m.readiness("c1"), Some(ProbeResult::Success));
        assert_eq!(m.startup("c1"), None);
        m.remove("c1", ProbeKind::Readiness);
        assert_eq!(m.readiness("c1"), None);
        assert_eq!(m.len(), 1);
    }
}
