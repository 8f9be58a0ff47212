//! Instrumenting decorators for the CRI traits (upstream `instrumentedRuntimeService` /
//! `instrumentedImageManagerService`): every call is counted and timed under upstream's
//! `operation_type` name (`kubelet_runtime_operations_total`, `…_duration_seconds`,
//! `…_errors_total`), `RunPodSandbox` also by runtime handler, and a successful `PullImage`
//! observes `kubelet_image_pull_duration_seconds` by image size (read with `ImageStatus`, as
//! upstream's puller does) and the pod's pull window for the start SLI. Owns nothing but the
//! wrapped service and the metrics handle; callers use it as any `Arc<dyn RuntimeService>`.

use std::sync::Arc;
use std::time::SystemTime;

use rkubelet_cri::api;
use rkubelet_cri::{CriError, ImageService, RuntimeService};
use tokio::time::Instant;

use crate::metrics::KubeletMetrics;

/// Upstream `operation_type` of each `RuntimeService` / `ImageService` RPC.
pub const OPERATIONS: &[(&str, &str)] = &[
    ("Version", "version"),
    ("Status", "status"),
    ("RunPodSandbox", "run_podsandbox"),
    ("StopPodSandbox", "stop_podsandbox"),
    ("RemovePodSandbox", "remove_podsandbox"),
    ("PodSandboxStatus", "podsandbox_status"),
    ("ListPodSandbox", "list_podsandbox"),
    ("CreateContainer", "create_container"),
    ("StartContainer", "start_container"),
    ("StopContainer", "stop_container"),
    ("RemoveContainer", "remove_container"),
    ("ListContainers", "list_containers"),
    ("ContainerStatus", "container_status"),
    ("UpdateContainerResources", "update_container"),
    ("ReopenContainerLog", "reopen_container_log"),
    ("ExecSync", "exec_sync"),
    ("Exec", "exec"),
    ("Attach", "attach"),
    ("PortForward", "port_forward"),
    ("ContainerStats", "container_stats"),
    ("ListContainerStats", "list_container_stats"),
    ("PodSandboxStats", "podsandbox_stats"),
    ("ListPodSandboxStats", "list_podsandbox_stats"),
    ("UpdateRuntimeConfig", "update_runtime_config"),
    ("CheckpointContainer", "checkpoint_container"),
    ("RuntimeConfig", "runtime_config"),
    ("GetContainerEvents", "get_container_events"),
    ("ListImages", "list_images"),
    ("ImageStatus", "image_status"),
    ("PullImage", "pull_image"),
    ("RemoveImage", "remove_image"),
    ("ImageFsInfo", "image_fs_info"),
];

/// A `RuntimeService` that records metrics for every call of the wrapped one.
pub struct InstrumentedRuntime {
    inner: Arc<dyn RuntimeService>,
    metrics: KubeletMetrics,
}

impl InstrumentedRuntime {
    pub fn new(inner: Arc<dyn RuntimeService>, metrics: KubeletMetrics) -> Self {
        Self { inner, metrics }
    }
}

/// An `ImageService` that records metrics for every call of the wrapped one.
pub struct InstrumentedImages {
    inner: Arc<dyn ImageService>,
    metrics: KubeletMetrics,
}

impl InstrumentedImages {
    pub fn new(inner: Arc<dyn ImageService>, metrics: KubeletMetrics) -> Self {
        Self { inner, metrics }
    }
}

/// Times `$call` and records it as runtime operation `$op`.
macro_rules! timed {
    ($self:ident, $op:literal, $call:expr) => {{
        let start = Instant::now();
        let result = $call;
        let elapsed = start.elapsed();
        crate::metrics::timeline::cri_call($op, elapsed);
        $self
            .metrics
            .record_runtime_operation($op, elapsed, result.is_err());
        result
    }};
}

#[async_trait::async_trait]
impl RuntimeService for InstrumentedRuntime {
    async fn version(&self, req: api::VersionRequest) -> Result<api::VersionResponse, CriError> {
        timed!(self, "version", self.inner.version(req).await)
    }

    async fn status(&self, req: api::StatusRequest) -> Result<api::StatusResponse, CriError> {
        timed!(self, "status", self.inner.status(req).await)
    }

    async fn run_pod_sandbox(
        &self,
        req: api::RunPodSandboxRequest,
    ) -> Result<api::RunPodSandboxResponse, CriError> {
        let handler = req.runtime_handler.clone();
        let start = Instant::now();
        let result = self.inner.run_pod_sandbox(req).await;
        let (elapsed, failed) = (start.elapsed(), result.is_err());
        crate::metrics::timeline::cri_call("run_podsandbox", elapsed);
        self.metrics
            .record_runtime_operation("run_podsandbox", elapsed, failed);
        self.metrics
            .record_run_podsandbox(&handler, elapsed, failed);
        result
    }

    async fn stop_pod_sandbox(
        &self,
        req: api::StopPodSandboxRequest,
    ) -> Result<api::StopPodSandboxResponse, CriError> {
        timed!(
            self,
            "stop_podsandbox",
            self.inner.stop_pod_sandbox(req).await
        )
    }

    async fn remove_pod_sandbox(
        &self,
        req: api::RemovePodSandboxRequest,
    ) -> Result<api::RemovePodSandboxResponse, CriError> {
        timed!(
            self,
            "remove_podsandbox",
            self.inner.remove_pod_sandbox(req).await
        )
    }

    async fn pod_sandbox_status(
        &self,
        req: api::PodSandboxStatusRequest,
    ) -> Result<api::PodSandboxStatusResponse, CriError> {
        timed!(
            self,
            "podsandbox_status",
            self.inner.pod_sandbox_status(req).await
        )
    }

    async fn list_pod_sandbox(
        &self,
        req: api::ListPodSandboxRequest,
    ) -> Result<api::ListPodSandboxResponse, CriError> {
        timed!(
            self,
            "list_podsandbox",
            self.inner.list_pod_sandbox(req).await
        )
    }

    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> Result<api::CreateContainerResponse, CriError> {
        timed!(
            self,
            "create_container",
            self.inner.create_container(req).await
        )
    }

    async fn start_container(
        &self,
        req: api::StartContainerRequest,
    ) -> Result<api::StartContainerResponse, CriError> {
        timed!(
            self,
            "start_container",
            self.inner.start_container(req).await
        )
    }

    async fn stop_container(
        &self,
        req: api::StopContainerRequest,
    ) -> Result<api::StopContainerResponse, CriError> {
        timed!(self, "stop_container", self.inner.stop_container(req).await)
    }

    async fn remove_container(
        &self,
        req: api::RemoveContainerRequest,
    ) -> Result<api::RemoveContainerResponse, CriError> {
        timed!(
            self,
            "remove_container",
            self.inner.remove_container(req).await
        )
    }

    async fn list_containers(
        &self,
        req: api::ListContainersRequest,
    ) -> Result<api::ListContainersResponse, CriError> {
        timed!(
            self,
            "list_containers",
            self.inner.list_containers(req).await
        )
    }

    async fn container_status(
        &self,
        req: api::ContainerStatusRequest,
    ) -> Result<api::ContainerStatusResponse, CriError> {
        timed!(
            self,
            "container_status",
            self.inner.container_status(req).await
        )
    }

    async fn update_container_resources(
        &self,
        req: api::UpdateContainerResourcesRequest,
    ) -> Result<api::UpdateContainerResourcesResponse, CriError> {
        timed!(
            self,
            "update_container",
            self.inner.update_container_resources(req).await
        )
    }

    async fn reopen_container_log(
        &self,
        req: api::ReopenContainerLogRequest,
    ) -> Result<api::ReopenContainerLogResponse, CriError> {
        timed!(
            self,
            "reopen_container_log",
            self.inner.reopen_container_log(req).await
        )
    }

    async fn exec_sync(
        &self,
        req: api::ExecSyncRequest,
    ) -> Result<api::ExecSyncResponse, CriError> {
        timed!(self, "exec_sync", self.inner.exec_sync(req).await)
    }

    async fn exec(&self, req: api::ExecRequest) -> Result<api::ExecResponse, CriError> {
        timed!(self, "exec", self.inner.exec(req).await)
    }

    async fn attach(&self, req: api::AttachRequest) -> Result<api::AttachResponse, CriError> {
        timed!(self, "attach", self.inner.attach(req).await)
    }

    async fn port_forward(
        &self,
        req: api::PortForwardRequest,
    ) -> Result<api::PortForwardResponse, CriError> {
        timed!(self, "port_forward", self.inner.port_forward(req).await)
    }

    async fn container_stats(
        &self,
        req: api::ContainerStatsRequest,
    ) -> Result<api::ContainerStatsResponse, CriError> {
        timed!(
            self,
            "container_stats",
            self.inner.container_stats(req).await
        )
    }

    async fn list_container_stats(
        &self,
        req: api::ListContainerStatsRequest,
    ) -> Result<api::ListContainerStatsResponse, CriError> {
        timed!(
            self,
            "list_container_stats",
            self.inner.list_container_stats(req).await
        )
    }

    async fn pod_sandbox_stats(
        &self,
        req: api::PodSandboxStatsRequest,
    ) -> Result<api::PodSandboxStatsResponse, CriError> {
        timed!(
            self,
            "podsandbox_stats",
            self.inner.pod_sandbox_stats(req).await
        )
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: api::ListPodSandboxStatsRequest,
    ) -> Result<api::ListPodSandboxStatsResponse, CriError> {
        timed!(
            self,
            "list_podsandbox_stats",
            self.inner.list_pod_sandbox_stats(req).await
        )
    }

    async fn update_runtime_config(
        &self,
        req: api::UpdateRuntimeConfigRequest,
    ) -> Result<api::UpdateRuntimeConfigResponse, CriError> {
        timed!(
            self,
            "update_runtime_config",
            self.inner.update_runtime_config(req).await
        )
    }

    async fn checkpoint_container(
        &self,
        req: api::CheckpointContainerRequest,
    ) -> Result<api::CheckpointContainerResponse, CriError> {
        timed!(
            self,
            "checkpoint_container",
            self.inner.checkpoint_container(req).await
        )
    }

    async fn runtime_config(
        &self,
        req: api::RuntimeConfigRequest,
    ) -> Result<api::RuntimeConfigResponse, CriError> {
        timed!(self, "runtime_config", self.inner.runtime_config(req).await)
    }

    /// Counts and times the opening of the stream (upstream's instrumented service does the
    /// same: the stream's lifetime is not an operation).
    async fn get_container_events(
        &self,
        req: api::GetEventsRequest,
    ) -> Result<rkubelet_cri::ContainerEventStream, CriError> {
        timed!(
            self,
            "get_container_events",
            self.inner.get_container_events(req).await
        )
    }
}

#[async_trait::async_trait]
impl ImageService for InstrumentedImages {
    async fn list_images(
        &self,
        req: api::ListImagesRequest,
    ) -> Result<api::ListImagesResponse, CriError> {
        timed!(self, "list_images", self.inner.list_images(req).await)
    }

    async fn image_status(
        &self,
        req: api::ImageStatusRequest,
    ) -> Result<api::ImageStatusResponse, CriError> {
        timed!(self, "image_status", self.inner.image_status(req).await)
    }

    async fn pull_image(
        &self,
        req: api::PullImageRequest,
    ) -> Result<api::PullImageResponse, CriError> {
        let pod_uid = req
            .sandbox_config
            .as_ref()
            .and_then(|c| c.metadata.as_ref())
            .map(|m| m.uid.clone())
            .unwrap_or_default();
        let (start, wall_start) = (Instant::now(), SystemTime::now());
        let result = self.inner.pull_image(req).await;
        let elapsed = start.elapsed();
        crate::metrics::timeline::cri_call("pull_image", elapsed);
        self.metrics
            .record_runtime_operation("pull_image", elapsed, result.is_err());
        if let Ok(resp) = &result {
            self.metrics
                .record_pod_image_pull(&pod_uid, wall_start, SystemTime::now());
            // Upstream's puller reads the pulled image's size with ImageStatus.
            let status = self
                .image_status(api::ImageStatusRequest {
                    image: Some(api::ImageSpec {
                        image: resp.image_ref.clone(),
                        ..Default::default()
                    }),
                    verbose: false,
                })
                .await;
            let size = status
                .ok()
                .and_then(|s| s.image)
                .map_or(0, |image| image.size);
            self.metrics.observe_image_pull(size, elapsed);
        }
        result
    }

    async fn remove_image(
        &self,
        req: api::RemoveImageRequest,
    ) -> Result<api::RemoveImageResponse, CriError> {
        timed!(self, "remove_image", self.inner.remove_image(req).await)
    }

    async fn image_fs_info(
        &self,
        req: api::ImageFsInfoRequest,
    ) -> Result<api::ImageFsInfoResponse, CriError> {
        timed!(self, "image_fs_info", self.inner.image_fs_info(req).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::process::ProcessCollector;
    use rkubelet_cri::fake::FakeRuntime;
    use rkubelet_cri::{IMAGE_METHODS, RUNTIME_METHODS};

    fn op(rpc: &str) -> &'static str {
        OPERATIONS.iter().find(|(r, _)| *r == rpc).unwrap().1
    }

    #[test]
    fn every_rpc_has_an_upstream_operation_name() {
        let rpcs: Vec<&str> = RUNTIME_METHODS
            .iter()
            .chain(IMAGE_METHODS)
            .copied()
            .collect();
        assert_eq!(OPERATIONS.len(), rpcs.len());
        for rpc in rpcs {
            let name = op(rpc);
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{rpc} → {name}"
            );
        }
        assert_eq!(op("RunPodSandbox"), "run_podsandbox");
        assert_eq!(op("UpdateContainerResources"), "update_container");
        assert_eq!(op("ListPodSandboxStats"), "list_podsandbox_stats");
    }

    #[tokio::test]
    async fn calls_are_counted_under_their_operation_names() {
        let fake = FakeRuntime::new();
        let m = KubeletMetrics::with_process("n", ProcessCollector::new("/nonexistent"));
        let rt = InstrumentedRuntime::new(Arc::new(fake.clone()), m.clone());
        let images = InstrumentedImages::new(Arc::new(fake.clone()), m.clone());

        rt.version(api::VersionRequest::default()).await.unwrap();
        fake.fail_next("Version", CriError::unknown("Version", "down"));
        assert!(rt.version(api::VersionRequest::default()).await.is_err());
        rt.list_pod_sandbox(api::ListPodSandboxRequest::default())
            .await
            .unwrap();
        rt.list_containers(api::ListContainersRequest::default())
            .await
            .unwrap();
        images
            .list_images(api::ListImagesRequest::default())
            .await
            .unwrap();
        images
            .pull_image(api::PullImageRequest {
                image: Some(api::ImageSpec {
                    image: "docker.io/library/busybox:latest".to_owned(),
                    ..Default::default()
                }),
                sandbox_config: Some(api::PodSandboxConfig {
                    metadata: Some(api::PodSandboxMetadata {
                        uid: "pod-1".to_owned(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap();

        let total = |rpc: &str| m.value("kubelet_runtime_operations_total", &[op(rpc)]);
        let errors = |rpc: &str| m.value("kubelet_runtime_operations_errors_total", &[op(rpc)]);
        assert_eq!(total("Version"), Some(2.0));
        assert_eq!(errors("Version"), Some(1.0));
        assert_eq!(total("ListPodSandbox"), Some(1.0));
        assert_eq!(total("ListContainers"), Some(1.0));
        assert_eq!(total("ListImages"), Some(1.0));
        assert_eq!(total("PullImage"), Some(1.0));
        assert_eq!(errors("PullImage"), None);
        // The pulled image's size was read back with ImageStatus (fake images are 1–5 MB).
        assert_eq!(total("ImageStatus"), Some(1.0));
        assert_eq!(
            m.histogram_count("kubelet_image_pull_duration_seconds", &["0-10MB"]),
            Some(1)
        );
        assert_eq!(
            m.histogram_count("kubelet_runtime_operations_duration_seconds", &["version"]),
            Some(2)
        );
        // Series for calls never made do not exist.
        assert_eq!(total("RemoveImage"), None);
    }
}
