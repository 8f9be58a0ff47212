//! The CRI v1 service traits: `RuntimeService` and `ImageService`, one method per RPC, taking
//! the protocol's request message and returning its response message or a [`CriError`].
//! Implemented by [`crate::RemoteRuntime`] (containerd over a unix socket) and, with feature
//! `fake`, by `FakeRuntime`. Used as `Arc<dyn RuntimeService>` / `Arc<dyn ImageService>`.
//!
//! `GetContainerEvents` is a server stream: [`RuntimeService::get_container_events`] opens it
//! and hands back a [`ContainerEventStream`] (containerd 1.6 answers `Unimplemented`; the
//! kubelet then relists). `ListMetricDescriptors` and `ListPodSandboxMetrics` are not part of
//! the traits: containerd 1.6 does not implement them.

use std::pin::Pin;

use crate::api;
use crate::error::CriError;

/// The open `GetContainerEvents` stream: each item is one event, or the error that ended the
/// stream (the stream ends after it). `None` means the runtime closed the stream.
pub type ContainerEventStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<api::ContainerEventResponse, CriError>> + Send>>;

/// The CRI `runtime.v1.RuntimeService`: sandboxes, containers, exec, stats.
#[async_trait::async_trait]
pub trait RuntimeService: Send + Sync {
    /// `Version`: Runtime name, version and CRI API version.
    async fn version(&self, req: api::VersionRequest) -> Result<api::VersionResponse, CriError>;

    /// `Status`: Runtime conditions (`RuntimeReady`, `NetworkReady`).
    async fn status(&self, req: api::StatusRequest) -> Result<api::StatusResponse, CriError>;

    /// `RunPodSandbox`: Creates and starts a pod sandbox. Upstream gives this call twice the request timeout.
    async fn run_pod_sandbox(
        &self,
        req: api::RunPodSandboxRequest,
    ) -> Result<api::RunPodSandboxResponse, CriError>;

    /// `StopPodSandbox`: Stops the sandbox, forcibly killing its containers. containerd 1.6 answers `NotFound` for an unknown ID.
    async fn stop_pod_sandbox(
        &self,
        req: api::StopPodSandboxRequest,
    ) -> Result<api::StopPodSandboxResponse, CriError>;

    /// `RemovePodSandbox`: Removes the sandbox and its containers; idempotent (Ok for an unknown ID).
    async fn remove_pod_sandbox(
        &self,
        req: api::RemovePodSandboxRequest,
    ) -> Result<api::RemovePodSandboxResponse, CriError>;

    /// `PodSandboxStatus`: Status of one sandbox; `NotFound` if it does not exist.
    async fn pod_sandbox_status(
        &self,
        req: api::PodSandboxStatusRequest,
    ) -> Result<api::PodSandboxStatusResponse, CriError>;

    /// `ListPodSandbox`: Sandboxes matching the filter.
    async fn list_pod_sandbox(
        &self,
        req: api::ListPodSandboxRequest,
    ) -> Result<api::ListPodSandboxResponse, CriError>;

    /// `CreateContainer`: Creates a container in a ready sandbox.
    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> Result<api::CreateContainerResponse, CriError>;

    /// `StartContainer`: Starts a created container.
    async fn start_container(
        &self,
        req: api::StartContainerRequest,
    ) -> Result<api::StartContainerResponse, CriError>;

    /// `StopContainer`: Stops a running container: stop signal, then SIGKILL after `timeout` seconds.
    ///
    /// The runtime itself waits up to `req.timeout` seconds inside this call, so a client
    /// deadline must be extended by that much: upstream uses `runtimeRequestTimeout + timeout`
    /// and [`crate::RemoteRuntime`] does the same.
    async fn stop_container(
        &self,
        req: api::StopContainerRequest,
    ) -> Result<api::StopContainerResponse, CriError>;

    /// `RemoveContainer`: Removes a container (forcibly stopping it); idempotent (Ok for an unknown ID).
    async fn remove_container(
        &self,
        req: api::RemoveContainerRequest,
    ) -> Result<api::RemoveContainerResponse, CriError>;

    /// `ListContainers`: Containers matching the filter.
    async fn list_containers(
        &self,
        req: api::ListContainersRequest,
    ) -> Result<api::ListContainersResponse, CriError>;

    /// `ContainerStatus`: Status of one container; `NotFound` if it does not exist.
    async fn container_status(
        &self,
        req: api::ContainerStatusRequest,
    ) -> Result<api::ContainerStatusResponse, CriError>;

    /// `UpdateContainerResources`: Updates a container's cgroup resources.
    async fn update_container_resources(
        &self,
        req: api::UpdateContainerResourcesRequest,
    ) -> Result<api::UpdateContainerResourcesResponse, CriError>;

    /// `ReopenContainerLog`: Asks the runtime to reopen a running container's log file (after rotation).
    async fn reopen_container_log(
        &self,
        req: api::ReopenContainerLogRequest,
    ) -> Result<api::ReopenContainerLogResponse, CriError>;

    /// `ExecSync`: Runs a command in a container and returns its output. With `req.timeout > 0` upstream's deadline is `runtimeRequestTimeout + timeout`; with 0 there is none.
    async fn exec_sync(&self, req: api::ExecSyncRequest)
    -> Result<api::ExecSyncResponse, CriError>;

    /// `Exec`: Prepares a streaming exec endpoint and returns its URL.
    async fn exec(&self, req: api::ExecRequest) -> Result<api::ExecResponse, CriError>;

    /// `Attach`: Prepares a streaming attach endpoint and returns its URL.
    async fn attach(&self, req: api::AttachRequest) -> Result<api::AttachResponse, CriError>;

    /// `PortForward`: Prepares a streaming port-forward endpoint and returns its URL.
    async fn port_forward(
        &self,
        req: api::PortForwardRequest,
    ) -> Result<api::PortForwardResponse, CriError>;

    /// `ContainerStats`: Resource usage of one container.
    async fn container_stats(
        &self,
        req: api::ContainerStatsRequest,
    ) -> Result<api::ContainerStatsResponse, CriError>;

    /// `ListContainerStats`: Resource usage of the containers matching the filter.
    async fn list_container_stats(
        &self,
        req: api::ListContainerStatsRequest,
    ) -> Result<api::ListContainerStatsResponse, CriError>;

    /// `PodSandboxStats`: Resource usage of one sandbox.
    async fn pod_sandbox_stats(
        &self,
        req: api::PodSandboxStatsRequest,
    ) -> Result<api::PodSandboxStatsResponse, CriError>;

    /// `ListPodSandboxStats`: Resource usage of the sandboxes matching the filter.
    async fn list_pod_sandbox_stats(
        &self,
        req: api::ListPodSandboxStatsRequest,
    ) -> Result<api::ListPodSandboxStatsResponse, CriError>;

    /// `UpdateRuntimeConfig`: Passes runtime configuration (the node's pod CIDR) to the runtime.
    async fn update_runtime_config(
        &self,
        req: api::UpdateRuntimeConfigRequest,
    ) -> Result<api::UpdateRuntimeConfigResponse, CriError>;

    /// `CheckpointContainer`: Checkpoints a container (unimplemented on containerd 1.6).
    async fn checkpoint_container(
        &self,
        req: api::CheckpointContainerRequest,
    ) -> Result<api::CheckpointContainerResponse, CriError>;

    /// `RuntimeConfig`: The runtime's own configuration (cgroup driver); unimplemented on containerd 1.6.
    async fn runtime_config(
        &self,
        req: api::RuntimeConfigRequest,
    ) -> Result<api::RuntimeConfigResponse, CriError>;

    /// `GetContainerEvents`: Opens the runtime's stream of container lifecycle events (no
    /// deadline: the stream lives until either side ends it). `Unimplemented` on containerd 1.6.
    async fn get_container_events(
        &self,
        req: api::GetEventsRequest,
    ) -> Result<ContainerEventStream, CriError>;
}

/// The CRI `runtime.v1.ImageService`: images on the node.
#[async_trait::async_trait]
pub trait ImageService: Send + Sync {
    /// `ListImages`: Images present on the node, optionally filtered.
    async fn list_images(
        &self,
        req: api::ListImagesRequest,
    ) -> Result<api::ListImagesResponse, CriError>;

    /// `ImageStatus`: Status of one image; `image` is `None` (not an error) when it is absent.
    async fn image_status(
        &self,
        req: api::ImageStatusRequest,
    ) -> Result<api::ImageStatusResponse, CriError>;

    /// `PullImage`: Pulls an image and returns its reference (the image ID on containerd). Upstream sets no deadline on pulls; [`crate::RemoteRuntime::with_pull_timeout`] can set one.
    async fn pull_image(
        &self,
        req: api::PullImageRequest,
    ) -> Result<api::PullImageResponse, CriError>;

    /// `RemoveImage`: Removes an image; Ok if it is already gone.
    async fn remove_image(
        &self,
        req: api::RemoveImageRequest,
    ) -> Result<api::RemoveImageResponse, CriError>;

    /// `ImageFsInfo`: Usage of the filesystem(s) holding images.
    async fn image_fs_info(
        &self,
        req: api::ImageFsInfoRequest,
    ) -> Result<api::ImageFsInfoResponse, CriError>;
}

/// RPC names of [`RuntimeService`]'s methods, as the runtime and logs spell them.
pub const RUNTIME_METHODS: &[&str] = &[
    "Version",
    "Status",
    "RunPodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "PodSandboxStatus",
    "ListPodSandbox",
    "CreateContainer",
    "StartContainer",
    "StopContainer",
    "RemoveContainer",
    "ListContainers",
    "ContainerStatus",
    "UpdateContainerResources",
    "ReopenContainerLog",
    "ExecSync",
    "Exec",
    "Attach",
    "PortForward",
    "ContainerStats",
    "ListContainerStats",
    "PodSandboxStats",
    "ListPodSandboxStats",
    "UpdateRuntimeConfig",
    "CheckpointContainer",
    "RuntimeConfig",
    "GetContainerEvents",
];

/// RPC names of [`ImageService`]'s methods.
pub const IMAGE_METHODS: &[&str] = &[
    "ListImages",
    "ImageStatus",
    "PullImage",
    "RemoveImage",
    "ImageFsInfo",
];
