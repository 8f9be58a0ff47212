//! The prober's metrics, served on `/metrics/probes`: `prober_probe_total` (upstream
//! `ProberResults` counter, labels probe_type, result, container, pod, namespace, pod_uid) and
//! `prober_probe_duration_seconds` (upstream `ProberDuration`, labels probe_type, container, pod,
//! namespace; observed for successful and unknown results, as upstream), plus
//! `process_start_time_seconds`. Incremented by probe workers; read by `snapshot` (tests) and
//! rendered as text by `render` (the `/metrics/probes` route).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::metrics::process::ProcessCollector;
use crate::metrics::registry::{
    Collector, DEFAULT_BUCKETS, Desc, Exposition, HistogramVec, MetricKind,
};
use crate::prober::results::ProbeKind;
use crate::sync;
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

const TOTAL_NAME: &str = "prober_probe_total";
const TOTAL_HELP: &str = "[ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result.";

/// Shared counter registry; cheap to clone.
#[derive(Clone)]
pub struct ProbeMetrics {
    inner: Arc<Mutex<BTreeMap<ProbeLabels, u64>>>,
    durations: Arc<HistogramVec>,
    process: ProcessCollector,
}

impl Default for ProbeMetrics {
    fn default() -> Self {
        Self {
            inner: Arc::default(),
            durations: Arc::new(HistogramVec::new(
                Desc::new(
                    "prober_probe_duration_seconds",
                    "[ALPHA] Duration in seconds for a probe response.",
                    &["probe_type", "container", "pod", "namespace"],
                ),
                DEFAULT_BUCKETS,
            )),
            process: ProcessCollector::default(),
        }
    }
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
        let mut m = sync::lock(&self.inner);
        *m.entry(labels).or_default() += 1;
    }

    /// How long one probe took.
    pub fn observe_duration(&self, kind: ProbeKind, container: &str, pod: &Pod, elapsed: Duration) {
        self.durations.observe(
            &[kind.label(), container, pod.name(), pod.namespace()],
            elapsed.as_secs_f64(),
        );
    }

    /// The number of durations observed for a container's probe.
    pub fn duration_count(&self, kind: ProbeKind, container: &str, pod: &Pod) -> u64 {
        self.durations
            .get(&[kind.label(), container, pod.name(), pod.namespace()])
            .map_or(0, |h| h.count)
    }

    /// Every series and its count.
    pub fn snapshot(&self) -> Vec<(ProbeLabels, u64)> {
        let m = sync::lock(&self.inner);
        m.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Drops the series of a pod that is gone (upstream deletes them with the worker),
    /// durations included (those are keyed by pod name and namespace).
    pub fn forget_pod(&self, pod_uid: &str) {
        let mut gone = Vec::new();
        {
            let mut m = sync::lock(&self.inner);
            m.retain(|k, _| {
                if k.pod_uid == pod_uid {
                    gone.push((k.pod.clone(), k.namespace.clone()));
                    return false;
                }
                true
            });
        }
        if !gone.is_empty() {
            // Labels: probe_type, container, pod, namespace.
            self.durations.retain(|l| {
                !gone
                    .iter()
                    .any(|(p, ns)| l.get(2) == Some(p) && l.get(3) == Some(ns))
            });
        }
    }

    /// The text exposition of `/metrics/probes` (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = Exposition::new();
        self.collect(&mut out);
        out.finish()
    }
}

impl Collector for ProbeMetrics {
    fn collect(&self, out: &mut Exposition) {
        {
            let mut w = out.family(TOTAL_NAME, TOTAL_HELP, MetricKind::Counter);
            // Label names sorted: container, namespace, pod, pod_uid, probe_type, result.
            let mut rows: Vec<([&str; 6], u64)> = Vec::new();
            let m = sync::lock(&self.inner);
            for (l, v) in m.iter() {
                rows.push((
                    [
                        &l.container,
                        &l.namespace,
                        &l.pod,
                        &l.pod_uid,
                        &l.probe_type,
                        &l.result,
                    ],
                    *v,
                ));
            }
            rows.sort();
            for (vals, v) in rows {
                let names = [
                    "container",
                    "namespace",
                    "pod",
                    "pod_uid",
                    "probe_type",
                    "result",
                ];
                let labels: Vec<(&str, &str)> = names.into_iter().zip(vals).collect();
                w.sample("", &labels, v as f64);
            }
        }
        self.durations.collect(out);
        self.process.collect_start_time(
            out,
            "[ALPHA] Start time of the process since unix epoch in seconds.",
        );
    }
}
