//! `/metrics/resource` (upstream `collectors/resource_metrics.go`): node, pod and container
//! CPU time, memory working set and container start times, rendered at scrape time from the
//! stats provider's latest [`Summary`] (never collected on the request path). Receives the
//! snapshot; emits the text exposition, every stats-derived sample stamped with its stats time.
//! Swap series are never written: the snapshot carries no swap figures (upstream writes them
//! only when it has data).

use crate::stats::{ContainerStats, PodStats, Summary};

use super::registry::{Exposition, MetricKind};
use super::rows::{Family, millis, ns_to_seconds, unix_seconds};

/// Families `/metrics/resource` can carry (upstream names; the swap ones and the hidden,
/// deprecated `scrape_error` are never written here).
pub const RESOURCE_METRIC_NAMES: &[&str] = &[
    "node_cpu_usage_seconds_total",
    "node_memory_working_set_bytes",
    "container_cpu_usage_seconds_total",
    "container_memory_working_set_bytes",
    "container_start_time_seconds",
    "pod_cpu_usage_seconds_total",
    "pod_memory_working_set_bytes",
    "resource_scrape_error",
];

fn stable(help: &str) -> String {
    format!("[STABLE] {help}")
}

/// Whether the snapshot holds nothing collected (the provider has not published yet): what
/// upstream reports as a failed summary.
pub fn is_empty(s: &Summary) -> bool {
    s.node.node_name.is_empty()
        && s.node.cpu.is_none()
        && s.node.memory.is_none()
        && s.pods.is_empty()
}

fn container_labels(pod: &PodStats, c: &ContainerStats) -> Vec<(&'static str, String)> {
    vec![
        ("container", c.name.clone()),
        ("pod", pod.pod_ref.name.clone()),
        ("namespace", pod.pod_ref.namespace.clone()),
    ]
}

fn pod_labels(pod: &PodStats) -> Vec<(&'static str, String)> {
    vec![
        ("pod", pod.pod_ref.name.clone()),
        ("namespace", pod.pod_ref.namespace.clone()),
    ]
}

/// The exposition of `/metrics/resource` for this snapshot.
pub fn render(s: &Summary) -> String {
    let mut out = Exposition::new();
    collect(s, &mut out);
    out.finish()
}

/// Writes the resource families of `s` into `out`.
pub fn collect(s: &Summary, out: &mut Exposition) {
    let failed = is_empty(s);
    let mut node_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        stable("Cumulative cpu time consumed by the node in core-seconds"),
        MetricKind::Counter,
    );
    let mut node_mem = Family::new(
        "node_memory_working_set_bytes",
        stable("Current working set of the node in bytes"),
        MetricKind::Gauge,
    );
    let mut c_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        stable("Cumulative cpu time consumed by the container in core-seconds"),
        MetricKind::Counter,
    );
    let mut c_mem = Family::new(
        "container_memory_working_set_bytes",
        stable("Current working set of the container in bytes"),
        MetricKind::Gauge,
    );
    let mut c_start = Family::new(
        "container_start_time_seconds",
        stable("Start time of the container since unix epoch in seconds"),
        MetricKind::Gauge,
    );
    let mut p_cpu = Family::new(
        "pod_cpu_usage_seconds_total",
        stable("Cumulative cpu time consumed by the pod in core-seconds"),
        MetricKind::Counter,
    );
    let mut p_mem = Family::new(
        "pod_memory_working_set_bytes",
        stable("Current working set of the pod in bytes"),
        MetricKind::Gauge,
    );
    if !failed {
        if let Some(cpu) = &s.node.cpu
            && let Some(ns) = cpu.usage_core_nano_seconds
        {
            node_cpu.push(Vec::new(), ns_to_seconds(ns), Some(millis(&cpu.time)));
        }
        if let Some(m) = &s.node.memory
            && let Some(ws) = m.working_set_bytes
        {
            node_mem.push(Vec::new(), ws as f64, Some(millis(&m.time)));
        }
        for pod in &s.pods {
            for c in &pod.containers {
                // Upstream skips start times at or before the epoch.
                if let Some(t) = &c.start_time
                    && t.timestamp() > 0
                {
                    c_start.push(container_labels(pod, c), unix_seconds(t), None);
                }
                if let Some(cpu) = &c.cpu
                    && let Some(ns) = cpu.usage_core_nano_seconds
                {
                    c_cpu.push(
                        container_labels(pod, c),
                        ns_to_seconds(ns),
                        Some(millis(&cpu.time)),
                    );
                }
                if let Some(m) = &c.memory
                    && let Some(ws) = m.working_set_bytes
                {
                    c_mem.push(container_labels(pod, c), ws as f64, Some(millis(&m.time)));
                }
            }
            if let Some(cpu) = &pod.cpu
                && let Some(ns) = cpu.usage_core_nano_seconds
            {
                p_cpu.push(pod_labels(pod), ns_to_seconds(ns), Some(millis(&cpu.time)));
            }
            if let Some(m) = &pod.memory
                && let Some(ws) = m.working_set_bytes
            {
                p_mem.push(pod_labels(pod), ws as f64, Some(millis(&m.time)));
            }
        }
    }
    let mut err = Family::new(
        "resource_scrape_error",
        stable("1 if there was an error while getting container metrics, 0 otherwise"),
        MetricKind::Gauge,
    );
    err.push(Vec::new(), if failed { 1.0 } else { 0.0 }, None);
    for f in [node_cpu, node_mem, c_cpu, c_mem, c_start, p_cpu, p_mem, err] {
        f.write(out);
    }
}
