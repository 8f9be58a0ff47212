//! The kubelet facade's metrics: the decorators that instrument the CRI services
//! (`instrumented_cri`) and the pod syncer (`InstrumentedSyncer`, for
//! `kubelet_pod_worker_duration_seconds` and the pod start durations), and the scrape-time
//! renderers of `/metrics/resource` and `/metrics/cadvisor` from the latest stats snapshot. The
//! registry and the `kubelet_*` and `process_*` families are shared vocabulary in
//! `rkubelet_core::metrics`, re-exported here: one `KubeletMetrics` is created by the agent and
//! handed to the components it instruments; `render()` on it is `/metrics`, `render()` on the
//! prober's `ProbeMetrics` is `/metrics/probes`.

pub mod cadvisor;
#[cfg(test)]
mod cadvisor_tests;
pub mod instrumented_cri;
pub use rkubelet_core::metrics::{kubelet, process, registry, rows, timeline};
pub mod resource;
#[cfg(test)]
mod resource_tests;

pub use instrumented_cri::{InstrumentedImages, InstrumentedRuntime};
pub use kubelet::{KubeletMetrics, METRIC_NAMES};
pub use registry::{Collector, Exposition, MetricKind, Registry};

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::container::{PodStatus, RunningPod};
use crate::pod_workers::{PodSyncer, SyncError, UpdateType};
use crate::status::manager::StatusManager;
use crate::types::{CONFIG_SEEN_ANNOTATION, PodExt};

/// Upstream `SyncPodType.String()`.
pub fn update_type_label(t: UpdateType) -> &'static str {
    match t {
        UpdateType::Create => "create",
        UpdateType::Update => "update",
        UpdateType::Sync => "sync",
        UpdateType::Kill => "kill",
    }
}

/// When the kubelet first saw the pod (`kubernetes.io/config.seen`).
pub fn first_seen(pod: &Pod) -> Option<SystemTime> {
    let seen = pod.annotation(CONFIG_SEEN_ANNOTATION)?;
    let t = chrono::DateTime::parse_from_rfc3339(seen).ok()?;
    let nanos = t.timestamp_nanos_opt()?;
    Some(UNIX_EPOCH + Duration::from_nanos(u64::try_from(nanos).ok()?))
}

fn created(pod: &Pod) -> Option<SystemTime> {
    let ts = pod.metadata.creation_timestamp.as_ref()?;
    let ms = u64::try_from(ts.0.as_millisecond()).ok()?;
    Some(UNIX_EPOCH + Duration::from_millis(ms))
}

/// A `PodSyncer` decorator: times each `sync_pod` by update type and notices a pod's status
/// turning from Pending (or none) to Running across one sync (upstream records the start
/// duration in `SyncPod` from the same comparison).
pub struct InstrumentedSyncer {
    inner: Arc<dyn PodSyncer>,
    metrics: KubeletMetrics,
    status: StatusManager,
}

impl InstrumentedSyncer {
    pub fn new(inner: Arc<dyn PodSyncer>, metrics: KubeletMetrics, status: StatusManager) -> Self {
        Self {
            inner,
            metrics,
            status,
        }
    }

    fn phase(&self, pod: &Pod) -> Option<String> {
        self.status
            .with_pod_status(pod.uid(), |s| s.and_then(|s| s.phase.clone()))
    }
}

#[async_trait]
impl PodSyncer for InstrumentedSyncer {
    async fn sync_pod(
        &self,
        update_type: UpdateType,
        pod: &Pod,
        status: &PodStatus,
        cancel: &CancellationToken,
    ) -> Result<bool, SyncError> {
        let before = self.phase(pod);
        let start = Instant::now();
        timeline::mark(pod.uid(), "sync_begin");
        let result = timeline::scope(
            pod.uid(),
            self.inner.sync_pod(update_type, pod, status, cancel),
        )
        .await;
        timeline::mark(pod.uid(), "sync_end");
        self.metrics
            .observe_pod_worker(update_type_label(update_type), start.elapsed());
        let after = self.phase(pod);
        if before.as_deref().is_none_or(|p| p == "Pending") && after.as_deref() == Some("Running") {
            timeline::mark(pod.uid(), "running");
            let now = SystemTime::now();
            let since_seen = first_seen(pod).and_then(|t| now.duration_since(t).ok());
            let host_network = pod
                .spec
                .as_ref()
                .and_then(|s| s.host_network)
                .unwrap_or(false);
            self.metrics
                .record_pod_running(pod.uid(), since_seen, created(pod), host_network, now);
        }
        result
    }

    async fn sync_terminating_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        grace_period: i64,
    ) -> Result<(), SyncError> {
        self.inner
            .sync_terminating_pod(pod, status, grace_period)
            .await
    }

    async fn sync_terminating_runtime_pod(&self, running: &RunningPod) -> Result<(), SyncError> {
        self.inner.sync_terminating_runtime_pod(running).await
    }

    async fn sync_terminated_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        removed: bool,
    ) -> Result<(), SyncError> {
        self.inner.sync_terminated_pod(pod, status, removed).await
    }

    fn round_finished(&self, uid: &str) {
        self.inner.round_finished(uid);
    }
}
