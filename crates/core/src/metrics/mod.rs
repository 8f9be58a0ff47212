//! The kubelet's Prometheus vocabulary, shared by every part that counts something: the registry
//! and text exposition (`registry`), the `kubelet_*` families (`kubelet`), `process_*`
//! (`process`), the sorting of scrape-time rows (`rows`) and the per-pod start timeline
//! (`timeline`). The scrapers of stats and the decorators of CRI and the pod syncer live in
//! the kubelet facade (`kubelet::metrics`), which renders these families at `/metrics`.

pub mod kubelet;
#[cfg(test)]
mod kubelet_tests;
pub mod process;
pub mod registry;
pub mod rows;
pub mod timeline;

pub use kubelet::{KubeletMetrics, METRIC_NAMES};
pub use registry::{Collector, Exposition, MetricKind, Registry};
