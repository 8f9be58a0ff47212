//! A CRI gRPC server over a unix socket that forwards to any [`RuntimeService`] +
//! [`ImageService`] (normally a `FakeRuntime`), so [`crate::RemoteRuntime`] and the rkubelet
//! binary can be tested against the fake through a real socket. Receives gRPC requests; emits
//! the implementation's responses, with `CriError`s turned back into statuses (`error.rs`).
//! `GetContainerEvents` is forwarded as a server stream (the fake answers `Unimplemented` unless
//! told to serve events); the metrics RPCs answer `Unimplemented`, like containerd 1.6.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use crate::api;
use crate::api::image_service_server::ImageServiceServer;
use crate::api::runtime_service_server::RuntimeServiceServer;
use crate::remote::MAX_MESSAGE_SIZE;
use crate::traits::{ImageService, RuntimeService};

struct Adapter {
    runtime: Arc<dyn RuntimeService>,
    images: Arc<dyn ImageService>,
}

/// The implementation of one generated server trait by forwarding each listed method.
macro_rules! forward {
    ($server_trait:path, $field:ident, { $($name:ident: $req:ident => $resp:ident,)* } $($extra:item)*) => {
        #[tonic::async_trait]
        impl $server_trait for Adapter {
            $(
                async fn $name(
                    &self,
                    request: Request<api::$req>,
                ) -> Result<Response<api::$resp>, Status> {
                    self.$field
                        .$name(request.into_inner())
                        .await
                        .map(Response::new)
                        .map_err(|e| e.to_status())
                }
            )*
            $($extra)*
        }
    };
}

fn unimplemented(method: &str) -> Status {
    Status::unimplemented(format!(
        "unknown method {method} for service runtime.v1.RuntimeService"
    ))
}

forward!(api::runtime_service_server::RuntimeService, runtime, {
    version: VersionRequest => VersionResponse,
    run_pod_sandbox: RunPodSandboxRequest => RunPodSandboxResponse,
    stop_pod_sandbox: StopPodSandboxRequest => StopPodSandboxResponse,
    remove_pod_sandbox: RemovePodSandboxRequest => RemovePodSandboxResponse,
    pod_sandbox_status: PodSandboxStatusRequest => PodSandboxStatusResponse,
    list_pod_sandbox: ListPodSandboxRequest => ListPodSandboxResponse,
    create_container: CreateContainerRequest => CreateContainerResponse,
    start_container: StartContainerRequest => StartContainerResponse,
    stop_container: StopContainerRequest => StopContainerResponse,
    remove_container: RemoveContainerRequest => RemoveContainerResponse,
    list_containers: ListContainersRequest => ListContainersResponse,
    container_status: ContainerStatusRequest => ContainerStatusResponse,
    update_container_resources: UpdateContainerResourcesRequest => UpdateContainerResourcesResponse,
    reopen_container_log: ReopenContainerLogRequest => ReopenContainerLogResponse,
    exec_sync: ExecSyncRequest => ExecSyncResponse,
    exec: ExecRequest => ExecResponse,
    attach: AttachRequest => AttachResponse,
    port_forward: PortForwardRequest => PortForwardResponse,
    container_stats: ContainerStatsRequest => ContainerStatsResponse,
    list_container_stats: ListContainerStatsRequest => ListContainerStatsResponse,
    pod_sandbox_stats: PodSandboxStatsRequest => PodSandboxStatsResponse,
    list_pod_sandbox_stats: ListPodSandboxStatsRequest => ListPodSandboxStatsResponse,
    update_runtime_config: UpdateRuntimeConfigRequest => UpdateRuntimeConfigResponse,
    status: StatusRequest => StatusResponse,
    checkpoint_container: CheckpointContainerRequest => CheckpointContainerResponse,
    runtime_config: RuntimeConfigRequest => RuntimeConfigResponse,
}
    type GetContainerEventsStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<api::ContainerEventResponse, Status>> + Send>,
    >;

    async fn get_container_events(
        &self,
        request: Request<api::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        use tokio_stream::StreamExt;
        let stream = self.runtime.get_container_events(request.into_inner())
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(Box::pin(
            stream.map(|item| item.map_err(|e| e.to_status())),
        )))
    }

    async fn list_metric_descriptors(
        &self,
        _request: Request<api::ListMetricDescriptorsRequest>,
    ) -> Result<Response<api::ListMetricDescriptorsResponse>, Status> {
        Err(unimplemented("ListMetricDescriptors"))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _request: Request<api::ListPodSandboxMetricsRequest>,
    ) -> Result<Response<api::ListPodSandboxMetricsResponse>, Status> {
        Err(unimplemented("ListPodSandboxMetrics"))
    }
);

forward!(api::image_service_server::ImageService, images, {
    list_images: ListImagesRequest => ListImagesResponse,
    image_status: ImageStatusRequest => ImageStatusResponse,
    pull_image: PullImageRequest => PullImageResponse,
    remove_image: RemoveImageRequest => RemoveImageResponse,
    image_fs_info: ImageFsInfoRequest => ImageFsInfoResponse,
});

/// A running CRI server; stops when [`shutdown`](Self::shutdown) is called or it is dropped.
pub struct FakeServer {
    path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl FakeServer {
    /// The endpoint to connect to (`unix:///…`).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops serving, waits for the server task, and removes the socket file.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Serves `runtime` and `images` as CRI v1 on a new unix socket at `path` (a stale socket file
/// there is replaced). Must be called inside a tokio runtime.
pub async fn serve_unix(
    runtime: Arc<dyn RuntimeService>,
    images: Arc<dyn ImageService>,
    path: &Path,
) -> std::io::Result<FakeServer> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    let adapter = Arc::new(Adapter { runtime, images });
    let runtime_svc = RuntimeServiceServer::from_arc(adapter.clone())
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    let image_svc = ImageServiceServer::from_arc(adapter)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(runtime_svc)
            .add_service(image_svc)
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = stopped.await;
            }),
    );
    Ok(FakeServer {
        path: path.to_path_buf(),
        stop: Some(stop),
        task: Some(task),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::CriError;
    use crate::RemoteRuntime;
    use crate::fake::FakeRuntime;

    async fn serve(fake: &FakeRuntime, path: &Path) -> FakeServer {
        serve_unix(Arc::new(fake.clone()), Arc::new(fake.clone()), path)
            .await
            .expect("serve")
    }

    fn sandbox_request() -> api::RunPodSandboxRequest {
        api::RunPodSandboxRequest {
            config: Some(api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: "p".into(),
                    uid: "u".into(),
                    namespace: "ns".into(),
                    attempt: 0,
                }),
                log_directory: "/var/log/pods/ns_p_u".into(),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        }
    }

    fn container_request(sid: &str) -> api::CreateContainerRequest {
        api::CreateContainerRequest {
            pod_sandbox_id: sid.to_string(),
            config: Some(api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "c".into(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: "busybox".into(),
                    ..Default::default()
                }),
                log_path: "c/0.log".into(),
                ..Default::default()
            }),
            sandbox_config: sandbox_request().config,
        }
    }

    #[tokio::test]
    async fn remote_client_round_trip_through_the_fake_server() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = FakeRuntime::with_images(&["busybox"]);
        let server = serve(&fake, &dir.path().join("cri.sock")).await;
        let client = RemoteRuntime::connect(&server.endpoint(), Duration::from_secs(5))
            .await
            .expect("connect");
        assert_eq!(fake.calls(), ["Version"], "connect validates with Version");

        let rt: Arc<dyn RuntimeService> = Arc::new(client.clone());
        let im: Arc<dyn ImageService> = Arc::new(client);
        let sid = rt
            .run_pod_sandbox(sandbox_request())
            .await
            .expect("run")
            .pod_sandbox_id;
        let cid = rt
            .create_container(container_request(&sid))
            .await
            .expect("create")
            .container_id;
        rt.start_container(api::StartContainerRequest {
            container_id: cid.clone(),
        })
        .await
        .expect("start");
        let st = rt
            .container_status(api::ContainerStatusRequest {
                container_id: cid.clone(),
                verbose: false,
            })
            .await
            .expect("status")
            .status
            .expect("set");
        assert_eq!(st.state, api::ContainerState::ContainerRunning as i32);
        assert_eq!(st.log_path, "/var/log/pods/ns_p_u/c/0.log");
        let out = rt
            .exec_sync(api::ExecSyncRequest {
                container_id: cid.clone(),
                cmd: vec!["echo".into(), "hi".into()],
                timeout: 5,
            })
            .await
            .expect("exec");
        assert_eq!(out.stdout, b"hi\n");

        let err = rt
            .container_status(api::ContainerStatusRequest {
                container_id: "bogus".into(),
                verbose: false,
            })
            .await
            .expect_err("bogus id");
        assert!(err.is_not_found(), "{err:?}");
        assert_eq!(err.method(), "ContainerStatus");
        assert!(err.message().contains("bogus"), "{err}");

        let err = rt
            .start_container(api::StartContainerRequest { container_id: cid })
            .await
            .expect_err("already running");
        assert!(matches!(
            err,
            CriError::Other {
                code: tonic::Code::Unknown,
                ..
            }
        ));
        let err = rt
            .runtime_config(api::RuntimeConfigRequest {})
            .await
            .expect_err("1.6");
        assert!(err.is_unimplemented(), "{err:?}");

        let image = im
            .image_status(api::ImageStatusRequest {
                image: Some(api::ImageSpec {
                    image: "nothere".into(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .expect("status of a missing image is not an error");
        assert!(image.image.is_none());
        let pulled = im
            .pull_image(api::PullImageRequest {
                image: Some(api::ImageSpec {
                    image: "nginx".into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect("pull");
        assert!(pulled.image_ref.starts_with("sha256:"));
        server.shutdown().await;
    }

    #[tokio::test]
    async fn deadlines_follow_upstream_rules() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = FakeRuntime::with_images(&["busybox"]);
        let server = serve(&fake, &dir.path().join("cri.sock")).await;
        let timeout = Duration::from_millis(400);
        let client = RemoteRuntime::connect(&server.endpoint(), timeout)
            .await
            .expect("connect");

        // An ordinary call is bounded by the request timeout.
        fake.set_latency("ListContainers", Duration::from_secs(3));
        let t0 = std::time::Instant::now();
        let err = client
            .list_containers(api::ListContainersRequest::default())
            .await
            .expect_err("too slow");
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert_eq!(
            err,
            CriError::DeadlineExceeded {
                method: "ListContainers",
                timeout: Some(timeout),
                message: String::new()
            }
        );
        assert_eq!(
            err.to_string(),
            "CRI ListContainers: deadline exceeded after 400ms"
        );

        // StopContainer gets the request timeout plus the grace period.
        let sid = client
            .run_pod_sandbox(sandbox_request())
            .await
            .expect("run")
            .pod_sandbox_id;
        let cid = client
            .create_container(container_request(&sid))
            .await
            .expect("create")
            .container_id;
        client
            .start_container(api::StartContainerRequest {
                container_id: cid.clone(),
            })
            .await
            .expect("start");
        fake.on_stop("c", crate::fake::SIGKILL_EXIT);
        let t0 = std::time::Instant::now();
        client
            .stop_container(api::StopContainerRequest {
                container_id: cid.clone(),
                timeout: 1,
            })
            .await
            .expect("stop waits the grace period within its extended deadline");
        assert!(t0.elapsed() >= Duration::from_secs(1));

        // Pulls have no deadline unless one is configured.
        fake.set_latency("PullImage", Duration::from_millis(800));
        let pull = api::PullImageRequest {
            image: Some(api::ImageSpec {
                image: "nginx".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        client
            .pull_image(pull.clone())
            .await
            .expect("slow pull is fine");
        let bounded = client
            .clone()
            .with_pull_timeout(Some(Duration::from_millis(200)));
        let err = bounded.pull_image(pull).await.expect_err("pull deadline");
        assert!(err.is_deadline_exceeded(), "{err:?}");
        server.shutdown().await;
    }

    #[tokio::test]
    async fn reconnects_after_the_runtime_restarts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cri.sock");
        let fake = FakeRuntime::new();
        let server = serve(&fake, &path).await;
        let client = RemoteRuntime::connect(&server.endpoint(), Duration::from_secs(2))
            .await
            .expect("connect");
        server.shutdown().await;

        let err = client
            .version(api::VersionRequest::default())
            .await
            .expect_err("server gone");
        assert!(err.is_unavailable(), "{err:?}");
        assert!(err.to_string().contains("cri.sock"), "{err}");

        let server = serve(&fake, &path).await;
        let mut last = None;
        for _ in 0..20 {
            match client.version(api::VersionRequest::default()).await {
                Ok(v) => {
                    last = Some(Ok(v));
                    break;
                }
                Err(e) => last = Some(Err(e)),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let v = last.expect("tried").expect("reconnected");
        assert_eq!(v.runtime_name, "containerd");
        server.shutdown().await;
    }
}
