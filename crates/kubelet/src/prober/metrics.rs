//! `prober_probe_total` (upstream `ProberResults` counter): an in-memory counter keyed by its
//! labels (probe_type, result, container, pod, namespace, pod_uid). Incremented by probe
//! workers; read by whoever exports metrics (`snapshot`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;

use crate::prober::results::ProbeKind;
use crate::types::PodExt;

/// The labels of one `prober_probe_total` series.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProbeLabels {
    pub probe_type: String,
    /// `successful`, `failed` or `unknown`.
    pub result: String,
    pub container: String,
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
}

/// Shared counter registry; cheap to clone.
#[derive(Clone, Default)]
pub struct ProbeMetrics {
    inner: Arc<Mutex<BTreeMap<ProbeLabels, u64>>>,
}

impl ProbeMetrics {
    pub fn inc(&self, kind: ProbeKind, result: &str, container: &str, pod: &Pod) {
        let labels = ProbeLabels {
            probe_type: kind.label().to_owned(),
            result: result.to_owned(),
            container: container.to_owned(),
            pod: pod.name().to_owned(),
            namespace: pod.namespace().to_owned(),
            pod_uid: pod.uid().to_owned(),
        };
        let mut m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(labels).or_default() += 1;
    }

    /// Every series and its count.
    pub fn snapshot(&self) -> Vec<(ProbeLabels, u64)> {
        let m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        m.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Drops the series of a pod that is gone (upstream deletes them with the worker).
    pub fn forget_pod(&self, pod_uid: &str) {
        let mut m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|k, _| k.pod_uid != pod_uid);
    }
}
