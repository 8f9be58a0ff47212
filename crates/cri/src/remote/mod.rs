//! `RemoteRuntime`: the CRI v1 client over a unix socket (tonic, one shared HTTP/2 connection).
//! Receives trait calls with protocol requests; emits the runtime's responses, or `CriError`s
//! mapped in `error.rs`. Owns per-call deadlines, which follow upstream's CRI client:
//! `request_timeout` for most calls, twice that for `RunPodSandbox`, `request_timeout + timeout`
//! for `StopContainer` and for `ExecSync` with a timeout (none without), the larger of the two
//! for `CheckpointContainer`, and for `PullImage` only the optional pull deadline.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tracing::{debug, trace};

use crate::api;
use crate::api::image_service_client::ImageServiceClient;
use crate::api::runtime_service_client::RuntimeServiceClient;
use crate::error::CriError;
use crate::traits::{ContainerEventStream, ImageService, RuntimeService};
use verify::{verify_container_status, verify_sandbox_status};

mod verify;

/// Largest gRPC message sent or accepted (upstream's CRI client uses 16 MiB).
pub const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// A CRI client bound to one runtime endpoint; implements both [`RuntimeService`] and
/// [`ImageService`]. Cloning is cheap and clones share the one HTTP/2 connection, which tonic
/// re-establishes on the next call after the runtime restarts.
#[derive(Clone)]
pub struct RemoteRuntime {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    endpoint: Arc<str>,
    request_timeout: Duration,
    pull_timeout: Option<Duration>,
}

impl std::fmt::Debug for RemoteRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRuntime")
            .field("endpoint", &self.endpoint)
            .field("request_timeout", &self.request_timeout)
            .field("pull_timeout", &self.pull_timeout)
            .finish()
    }
}

/// The socket path of a CRI endpoint: `unix:///path` or a bare path. Other schemes are rejected.
pub fn parse_endpoint(endpoint: &str) -> Result<PathBuf, CriError> {
    let invalid = |reason: &str| CriError::InvalidEndpoint {
        endpoint: endpoint.to_string(),
        reason: reason.to_string(),
    };
    let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if let Some((scheme, _)) = endpoint.split_once("://") {
        return Err(invalid(&format!(
            "unsupported scheme {scheme:?}: only unix sockets are supported \
             (unix:///path/to/socket or /path/to/socket)"
        )));
    } else {
        endpoint
    };
    if path.is_empty() {
        return Err(invalid(
            "empty socket path (expected unix:///path/to/socket or /path/to/socket)",
        ));
    }
    Ok(PathBuf::from(path))
}

/// An error and its sources, joined with `: ` (tonic's transport errors say little at the top).
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

impl RemoteRuntime {
    /// Connects to the runtime at `endpoint` (`unix:///path` or `/path`) and checks that it
    /// serves CRI v1 (a `Version` call), as upstream does at startup. Fails fast with
    /// `Unavailable` when nothing listens there. `request_timeout` is upstream's
    /// `runtimeRequestTimeout` (default 2m): it bounds the connection attempt and each call.
    pub async fn connect(endpoint: &str, request_timeout: Duration) -> Result<Self, CriError> {
        let path = parse_endpoint(endpoint)?;
        let connector = tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        });
        let ep = Endpoint::from_static("http://[::]:50051").connect_timeout(request_timeout);
        let channel =
            match tokio::time::timeout(request_timeout, ep.connect_with_connector(connector)).await
            {
                Ok(Ok(channel)) => channel,
                Ok(Err(e)) => {
                    return Err(CriError::unavailable("Connect", endpoint, error_chain(&e)));
                }
                Err(_) => {
                    return Err(CriError::DeadlineExceeded {
                        method: "Connect",
                        timeout: Some(request_timeout),
                        message: String::new(),
                    });
                }
            };
        let runtime = RuntimeServiceClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        let images = ImageServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        let client = Self {
            runtime,
            images,
            endpoint: Arc::from(endpoint),
            request_timeout,
            pull_timeout: None,
        };
        client.version(api::VersionRequest::default()).await?;
        Ok(client)
    }

    /// Sets a deadline for `PullImage` (default none, as upstream: pulls are not bounded by
    /// `runtimeRequestTimeout`).
    pub fn with_pull_timeout(mut self, pull_timeout: Option<Duration>) -> Self {
        self.pull_timeout = pull_timeout;
        self
    }

    /// The endpoint this client was connected with.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The per-call deadline for ordinary calls.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The `PullImage` deadline, if any.
    pub fn pull_timeout(&self) -> Option<Duration> {
        self.pull_timeout
    }

    /// Runs one call with an optional deadline, logging it and mapping failures.
    async fn run<T>(
        &self,
        method: &'static str,
        deadline: Option<Duration>,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CriError> {
        let start = tokio::time::Instant::now();
        trace!(method, ?deadline, "CRI call");
        let result = match deadline {
            Some(d) => match tokio::time::timeout(d, call).await {
                Ok(r) => r,
                Err(_) => {
                    let err = CriError::DeadlineExceeded {
                        method,
                        timeout: Some(d),
                        message: String::new(),
                    };
                    debug!(method, elapsed = ?start.elapsed(), error = %err, "CRI call failed");
                    return Err(err);
                }
            },
            None => call.await,
        };
        match result {
            Ok(resp) => {
                trace!(method, elapsed = ?start.elapsed(), "CRI call done");
                Ok(resp.into_inner())
            }
            Err(status) => {
                // A server that enforces the grpc-timeout header itself (tonic) answers
                // `Cancelled` when it expires; that is our deadline too.
                let expired = deadline.is_some_and(|d| start.elapsed() >= d);
                let err = if expired && status.code() == tonic::Code::Cancelled {
                    CriError::DeadlineExceeded {
                        method,
                        timeout: deadline,
                        message: String::new(),
                    }
                } else {
                    CriError::from_status(method, &self.endpoint, deadline, &status)
                };
                debug!(method, elapsed = ?start.elapsed(), error = %err, "CRI call failed");
                Err(err)
            }
        }
    }

    fn invalid(method: &'static str, message: impl Into<String>) -> CriError {
        CriError::InvalidResponse {
            method,
            message: message.into(),
        }
    }
}

/// A request with the grpc-timeout header set, so the runtime gives up when we do.
fn request<T>(msg: T, deadline: Option<Duration>) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Some(d) = deadline {
        r.set_timeout(d);
    }
    r
}

/// One RPC on `$client` (`runtime` or `images`) named `$method`, with `$deadline`.
macro_rules! rpc {
    ($self:ident, $client:ident, $func:ident, $method:literal, $req:expr, $deadline:expr) => {{
        let deadline: Option<Duration> = $deadline;
        let mut client = $self.$client.clone();
        let req = request($req, deadline);
        $self
            .run($method, deadline, async move { client.$func(req).await })
            .await
    }};
}

#[async_trait::async_trait]
impl RuntimeService for RemoteRuntime {
    async fn version(&self, req: api::VersionRequest) -> Result<api::VersionResponse, CriError> {
        let resp: api::VersionResponse = rpc!(
            self,
            runtime,
            version,
            "Version",
            req,
            Some(self.request_timeout)
        )?;
        let missing: Vec<&str> = [
            ("Version", &resp.version),
            ("RuntimeName", &resp.runtime_name),
            ("RuntimeApiVersion", &resp.runtime_api_version),
            ("RuntimeVersion", &resp.runtime_version),
        ]
        .iter()
        .filter(|(_, v)| v.is_empty())
        .map(|(k, _)| *k)
        .collect();
        if !missing.is_empty() {
            return Err(Self::invalid(
                "Version",
                format!(
                    "not all fields are set in VersionResponse (missing {})",
                    missing.join(", ")
                ),
            ));
        }
        Ok(resp)
    }

    async fn status(&self, req: api::StatusRequest) -> Result<api::StatusResponse, CriError> {
        let resp: api::StatusResponse = rpc!(
            self,
            runtime,
            status,
            "Status",
            req,
            Some(self.request_timeout)
        )?;
        if resp.status.as_ref().is_none_or(|s| s.conditions.len() < 2) {
            return Err(Self::invalid(
                "Status",
                "RuntimeReady or NetworkReady condition are not set",
            ));
        }
        Ok(resp)
    }

    async fn run_pod_sandbox(
        &self,
        req: api::RunPodSandboxRequest,
    ) -> Result<api::RunPodSandboxResponse, CriError> {
        let metadata = req.config.as_ref().and_then(|c| c.metadata.clone());
        let resp: api::RunPodSandboxResponse = rpc!(
            self,
            runtime,
            run_pod_sandbox,
            "RunPodSandbox",
            req,
            Some(self.request_timeout * 2)
        )?;
        if resp.pod_sandbox_id.is_empty() {
            return Err(Self::invalid(
                "RunPodSandbox",
                format!("PodSandboxId is not set for sandbox {metadata:?}"),
            ));
        }
        Ok(resp)
    }

    async fn stop_pod_sandbox(
        &self,
        req: api::StopPodSandboxRequest,
    ) -> Result<api::StopPodSandboxResponse, CriError> {
        rpc!(
            self,
            runtime,
            stop_pod_sandbox,
            "StopPodSandbox",
            req,
            Some(self.request_timeout)
        )
    }

    async fn remove_pod_sandbox(
        &self,
        req: api::RemovePodSandboxRequest,
    ) -> Result<api::RemovePodSandboxResponse, CriError> {
        rpc!(
            self,
            runtime,
            remove_pod_sandbox,
            "RemovePodSandbox",
            req,
            Some(self.request_timeout)
        )
    }

    async fn pod_sandbox_status(
        &self,
        req: api::PodSandboxStatusRequest,
    ) -> Result<api::PodSandboxStatusResponse, CriError> {
        let resp: api::PodSandboxStatusResponse = rpc!(
            self,
            runtime,
            pod_sandbox_status,
            "PodSandboxStatus",
            req,
            Some(self.request_timeout)
        )?;
        if let Some(s) = &resp.status {
            verify_sandbox_status(s).map_err(|m| Self::invalid("PodSandboxStatus", m))?;
        }
        Ok(resp)
    }

    async fn list_pod_sandbox(
        &self,
        req: api::ListPodSandboxRequest,
    ) -> Result<api::ListPodSandboxResponse, CriError> {
        rpc!(
            self,
            runtime,
            list_pod_sandbox,
            "ListPodSandbox",
            req,
            Some(self.request_timeout)
        )
    }

    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> Result<api::CreateContainerResponse, CriError> {
        let metadata = req.config.as_ref().and_then(|c| c.metadata.clone());
        let resp: api::CreateContainerResponse = rpc!(
            self,
            runtime,
            create_container,
            "CreateContainer",
            req,
            Some(self.request_timeout)
        )?;
        if resp.container_id.is_empty() {
            return Err(Self::invalid(
                "CreateContainer",
                format!("ContainerId is not set for container {metadata:?}"),
            ));
        }
        Ok(resp)
    }

    async fn start_container(
        &self,
        req: api::StartContainerRequest,
    ) -> Result<api::StartContainerResponse, CriError> {
        rpc!(
            self,
            runtime,
            start_container,
            "StartContainer",
            req,
            Some(self.request_timeout)
        )
    }

    async fn stop_container(
        &self,
        req: api::StopContainerRequest,
    ) -> Result<api::StopContainerResponse, CriError> {
        let grace = Duration::from_secs(u64::try_from(req.timeout).unwrap_or(0));
        rpc!(
            self,
            runtime,
            stop_container,
            "StopContainer",
            req,
            Some(self.request_timeout + grace)
        )
    }

    async fn remove_container(
        &self,
        req: api::RemoveContainerRequest,
    ) -> Result<api::RemoveContainerResponse, CriError> {
        rpc!(
            self,
            runtime,
            remove_container,
            "RemoveContainer",
            req,
            Some(self.request_timeout)
        )
    }

    async fn list_containers(
        &self,
        req: api::ListContainersRequest,
    ) -> Result<api::ListContainersResponse, CriError> {
        rpc!(
            self,
            runtime,
            list_containers,
            "ListContainers",
            req,
            Some(self.request_timeout)
        )
    }

    async fn container_status(
        &self,
        req: api::ContainerStatusRequest,
    ) -> Result<api::ContainerStatusResponse, CriError> {
        let resp: api::ContainerStatusResponse = rpc!(
            self,
            runtime,
            container_status,
            "ContainerStatus",
            req,
            Some(self.request_timeout)
        )?;
        if let Some(s) = &resp.status {
            verify_container_status(s).map_err(|m| Self::invalid("ContainerStatus", m))?;
        }
        Ok(resp)
    }

    async fn update_container_resources(
        &self,
        req: api::UpdateContainerResourcesRequest,
    ) -> Result<api::UpdateContainerResourcesResponse, CriError> {
        rpc!(
            self,
            runtime,
            update_container_resources,
            "UpdateContainerResources",
            req,
            Some(self.request_timeout)
        )
    }

    async fn reopen_container_log(
        &self,
        req: api::ReopenContainerLogRequest,
    ) -> Result<api::ReopenContainerLogResponse, CriError> {
        rpc!(
            self,
            runtime,
            reopen_container_log,
            "ReopenContainerLog",
            req,
            Some(self.request_timeout)
        )
    }

    async fn exec_sync(
        &self,
        req: api::ExecSyncRequest,
    ) -> Result<api::ExecSyncResponse, CriError> {
        let deadline = u64::try_from(req.timeout)
            .ok()
            .filter(|t| *t > 0)
            .map(|t| self.request_timeout + Duration::from_secs(t));
        rpc!(self, runtime, exec_sync, "ExecSync", req, deadline)
    }

    async fn exec(&self, req: api::ExecRequest) -> Result<api::ExecResponse, CriError> {
        let resp: api::ExecResponse =
            rpc!(self, runtime, exec, "Exec", req, Some(self.request_timeout))?;
        if resp.url.is_empty() {
            return Err(Self::invalid("Exec", "URL is not set"));
        }
        Ok(resp)
    }

    async fn attach(&self, req: api::AttachRequest) -> Result<api::AttachResponse, CriError> {
        let resp: api::AttachResponse = rpc!(
            self,
            runtime,
            attach,
            "Attach",
            req,
            Some(self.request_timeout)
        )?;
        if resp.url.is_empty() {
            return Err(Self::invalid("Attach", "URL is not set"));
        }
        Ok(resp)
    }

    async fn port_forward(
        &self,
        req: api::PortForwardRequest,
    ) -> Result<api::PortForwardResponse, CriError> {
        let resp: api::PortForwardResponse = rpc!(
            self,
            runtime,
            port_forward,
            "PortForward",
            req,
            Some(self.request_timeout)
        )?;
        if resp.url.is_empty() {
            return Err(Self::invalid("PortForward", "URL is not set"));
        }
        Ok(resp)
    }

    async fn container_stats(
        &self,
        req: api::ContainerStatsRequest,
    ) -> Result<api::ContainerStatsResponse, CriError> {
        rpc!(
            self,
            runtime,
            container_stats,
            "ContainerStats",
            req,
            Some(self.request_timeout)
        )
    }

    async fn list_container_stats(
        &self,
        req: api::ListContainerStatsRequest,
    ) -> Result<api::ListContainerStatsResponse, CriError> {
        rpc!(
            self,
            runtime,
            list_container_stats,
            "ListContainerStats",
            req,
            Some(self.request_timeout)
        )
    }

    async fn pod_sandbox_stats(
        &self,
        req: api::PodSandboxStatsRequest,
    ) -> Result<api::PodSandboxStatsResponse, CriError> {
        rpc!(
            self,
            runtime,
            pod_sandbox_stats,
            "PodSandboxStats",
            req,
            Some(self.request_timeout)
        )
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: api::ListPodSandboxStatsRequest,
    ) -> Result<api::ListPodSandboxStatsResponse, CriError> {
        rpc!(
            self,
            runtime,
            list_pod_sandbox_stats,
            "ListPodSandboxStats",
            req,
            Some(self.request_timeout)
        )
    }

    async fn update_runtime_config(
        &self,
        req: api::UpdateRuntimeConfigRequest,
    ) -> Result<api::UpdateRuntimeConfigResponse, CriError> {
        rpc!(
            self,
            runtime,
            update_runtime_config,
            "UpdateRuntimeConfig",
            req,
            Some(self.request_timeout)
        )
    }

    async fn checkpoint_container(
        &self,
        mut req: api::CheckpointContainerRequest,
    ) -> Result<api::CheckpointContainerResponse, CriError> {
        if req.timeout < 0 {
            return Err(CriError::InvalidArgument {
                method: "CheckpointContainer",
                message: format!("timeout must not be negative, got {}", req.timeout),
            });
        }
        // Upstream: the caller's timeout when it exceeds the request timeout, else the latter
        // (which is then also sent to the runtime).
        let default_secs = i64::try_from(self.request_timeout.as_secs()).unwrap_or(i64::MAX);
        let deadline = if req.timeout > default_secs {
            Duration::from_secs(req.timeout.unsigned_abs())
        } else {
            req.timeout = default_secs;
            self.request_timeout
        };
        rpc!(
            self,
            runtime,
            checkpoint_container,
            "CheckpointContainer",
            req,
            Some(deadline)
        )
    }

    async fn runtime_config(
        &self,
        req: api::RuntimeConfigRequest,
    ) -> Result<api::RuntimeConfigResponse, CriError> {
        rpc!(
            self,
            runtime,
            runtime_config,
            "RuntimeConfig",
            req,
            Some(self.request_timeout)
        )
    }

    async fn get_container_events(
        &self,
        req: api::GetEventsRequest,
    ) -> Result<ContainerEventStream, CriError> {
        use tokio_stream::StreamExt;
        let stream = rpc!(
            self,
            runtime,
            get_container_events,
            "GetContainerEvents",
            req,
            None
        )?;
        let endpoint = self.endpoint.clone();
        Ok(Box::pin(stream.map(move |item| {
            item.map_err(|status| {
                CriError::from_status("GetContainerEvents", &endpoint, None, &status)
            })
        })))
    }
}

#[async_trait::async_trait]
impl ImageService for RemoteRuntime {
    async fn list_images(
        &self,
        req: api::ListImagesRequest,
    ) -> Result<api::ListImagesResponse, CriError> {
        rpc!(
            self,
            images,
            list_images,
            "ListImages",
            req,
            Some(self.request_timeout)
        )
    }

    async fn image_status(
        &self,
        req: api::ImageStatusRequest,
    ) -> Result<api::ImageStatusResponse, CriError> {
        let name = req
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let resp: api::ImageStatusResponse = rpc!(
            self,
            images,
            image_status,
            "ImageStatus",
            req,
            Some(self.request_timeout)
        )?;
        if let Some(image) = &resp.image
            && (image.id.is_empty() || image.size == 0)
        {
            return Err(Self::invalid(
                "ImageStatus",
                format!("Id or size of image {name:?} is not set"),
            ));
        }
        Ok(resp)
    }

    async fn pull_image(
        &self,
        req: api::PullImageRequest,
    ) -> Result<api::PullImageResponse, CriError> {
        let name = req
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let resp: api::PullImageResponse = rpc!(
            self,
            images,
            pull_image,
            "PullImage",
            req,
            self.pull_timeout
        )?;
        if resp.image_ref.is_empty() {
            return Err(Self::invalid(
                "PullImage",
                format!("imageRef of image {name:?} is not set"),
            ));
        }
        Ok(resp)
    }

    async fn remove_image(
        &self,
        req: api::RemoveImageRequest,
    ) -> Result<api::RemoveImageResponse, CriError> {
        rpc!(
            self,
            images,
            remove_image,
            "RemoveImage",
            req,
            Some(self.request_timeout)
        )
    }

    async fn image_fs_info(
        &self,
        req: api::ImageFsInfoRequest,
    ) -> Result<api::ImageFsInfoResponse, CriError> {
        rpc!(
            self,
            images,
            image_fs_info,
            "ImageFsInfo",
            req,
            Some(self.request_timeout)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_endpoint_accepts_unix_and_bare_paths() {
        let ok = [
            (
                "unix:///run/containerd/containerd.sock",
                "/run/containerd/containerd.sock",
            ),
            ("/tmp/x.sock", "/tmp/x.sock"),
            ("unix://relative.sock", "relative.sock"),
        ];
        for (input, want) in ok {
            assert_eq!(
                parse_endpoint(input).ok(),
                Some(PathBuf::from(want)),
                "{input}"
            );
        }
        for bad in [
            "tcp://127.0.0.1:1234",
            "npipe:////./pipe/x",
            "http://x",
            "unix://",
            "",
        ] {
            let err = parse_endpoint(bad).expect_err(bad);
            assert!(
                matches!(err, CriError::InvalidEndpoint { .. }),
                "{bad}: {err:?}"
            );
            assert!(err.to_string().contains("unix"), "{bad}: {err}");
        }
    }

    #[tokio::test]
    async fn connect_to_missing_socket_is_unavailable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nothing.sock");
        let endpoint = format!("unix://{}", path.display());
        let err = RemoteRuntime::connect(&endpoint, Duration::from_secs(5))
            .await
            .expect_err("no server");
        assert!(err.is_unavailable(), "{err:?}");
        assert!(err.to_string().contains(&endpoint), "{err}");
    }
}
