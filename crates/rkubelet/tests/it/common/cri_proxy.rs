//! A fault-injecting CRI proxy for the slow/stuck runtime row of the fault matrix (issue 17,
//! row 4): a CRI v1 server on a unix socket (the generated tonic server traits) that forwards
//! every call to a real runtime through `RemoteRuntime`, after an optional latency, and that can
//! hold chosen calls without ever answering them until the test releases them.
//!
//! Receives: gRPC calls from the kubelet; the test's fault settings (`Faults`). Emits: the
//! runtime's answers (errors mapped back to statuses), and counts of the calls it held.
//! Owns the socket and its server task (stopped on drop).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rkubelet_cri::api;
use rkubelet_cri::api::image_service_server::ImageServiceServer;
use rkubelet_cri::api::runtime_service_server::RuntimeServiceServer;
use rkubelet_cri::{ImageService, RemoteRuntime, RuntimeService};
use tokio::net::UnixListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

/// A call to hold: the CRI method (`"CreateContainer"`) and, optionally, text that must occur
/// in the request's debug form (e.g. a container name) for the call to be held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub method: &'static str,
    pub marker: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    latency: Duration,
    holds: Vec<Hold>,
    /// Calls held so far, by method.
    held_total: BTreeMap<&'static str, usize>,
    /// Calls being held now, by method, and the most at once.
    held_now: BTreeMap<&'static str, usize>,
    held_max: BTreeMap<&'static str, usize>,
}

/// The proxy's fault settings, shared between the test and the server.
#[derive(Debug, Clone)]
pub struct Faults {
    state: Arc<Mutex<State>>,
    /// Bumped whenever the settings change, so held calls re-check whether they are released.
    changed: watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl Faults {
    /// Latency added before every call is forwarded.
    pub fn set_latency(&self, latency: Duration) {
        self.state.lock().unwrap().latency = latency;
        self.changed.send_modify(|n| *n += 1);
    }

    /// Holds matching calls from now on (calls already forwarded are not affected).
    pub fn hold(&self, method: &'static str, marker: Option<&str>) {
        self.state.lock().unwrap().holds.push(Hold {
            method,
            marker: marker.map(str::to_owned),
        });
        self.changed.send_modify(|n| *n += 1);
    }

    /// Stops holding: every held call is forwarded now.
    pub fn release_all(&self) {
        self.state.lock().unwrap().holds.clear();
        self.changed.send_modify(|n| *n += 1);
    }

    /// How many calls of `method` were held so far.
    pub fn held_total(&self, method: &str) -> usize {
        let s = self.state.lock().unwrap();
        s.held_total.get(method).copied().unwrap_or(0)
    }

    /// The most calls of `method` held at once.
    pub fn held_max(&self, method: &str) -> usize {
        let s = self.state.lock().unwrap();
        s.held_max.get(method).copied().unwrap_or(0)
    }

    fn matches(&self, method: &'static str, request: &str) -> bool {
        let s = self.state.lock().unwrap();
        s.holds.iter().any(|h| {
            h.method == method
                && h.marker
                    .as_ref()
                    .is_none_or(|m| request.contains(m.as_str()))
        })
    }

    /// Applies the latency, then waits while a hold matches the call (`request`: its debug
    /// form). A held call whose client
    /// gives up is dropped with the server's handler future; the counters stay right.
    async fn gate(&self, method: &'static str, request: &str) {
        let latency = self.state.lock().unwrap().latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if !self.matches(method, request) {
            return;
        }
        let _held = HeldGuard::new(self, method);
        let mut rx = self.changed.subscribe();
        while self.matches(method, request) {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Counts one held call for as long as it lives.
struct HeldGuard<'a> {
    faults: &'a Faults,
    method: &'static str,
}

impl<'a> HeldGuard<'a> {
    fn new(faults: &'a Faults, method: &'static str) -> Self {
        let mut s = faults.state.lock().unwrap();
        *s.held_total.entry(method).or_default() += 1;
        let now = {
            let n = s.held_now.entry(method).or_default();
            *n += 1;
            *n
        };
        let max = s.held_max.entry(method).or_default();
        *max = (*max).max(now);
        drop(s);
        Self { faults, method }
    }
}

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        let mut s = self.faults.state.lock().unwrap();
        if let Some(n) = s.held_now.get_mut(self.method) {
            *n = n.saturating_sub(1);
        }
    }
}

struct Proxy {
    upstream: RemoteRuntime,
    faults: Faults,
}

/// One generated server trait, each listed method gated and then forwarded upstream.
macro_rules! proxy {
    ($server_trait:path, $trait_:ident, { $($name:ident / $method:literal: $req:ident => $resp:ident,)* } $($extra:item)*) => {
        #[tonic::async_trait]
        impl $server_trait for Proxy {
            $(
                async fn $name(
                    &self,
                    request: Request<api::$req>,
                ) -> Result<Response<api::$resp>, Status> {
                    let req = request.into_inner();
                    self.faults.gate($method, &format!("{req:?}")).await;
                    $trait_::$name(&self.upstream, req)
                        .await
                        .map(Response::new)
                        .map_err(|e| e.to_status())
                }
            )*
            $($extra)*
        }
    };
}

proxy!(api::runtime_service_server::RuntimeService, RuntimeService, {
    version / "Version": VersionRequest => VersionResponse,
    run_pod_sandbox / "RunPodSandbox": RunPodSandboxRequest => RunPodSandboxResponse,
    stop_pod_sandbox / "StopPodSandbox": StopPodSandboxRequest => StopPodSandboxResponse,
    remove_pod_sandbox / "RemovePodSandbox": RemovePodSandboxRequest => RemovePodSandboxResponse,
    pod_sandbox_status / "PodSandboxStatus": PodSandboxStatusRequest => PodSandboxStatusResponse,
    list_pod_sandbox / "ListPodSandbox": ListPodSandboxRequest => ListPodSandboxResponse,
    create_container / "CreateContainer": CreateContainerRequest => CreateContainerResponse,
    start_container / "StartContainer": StartContainerRequest => StartContainerResponse,
    stop_container / "StopContainer": StopContainerRequest => StopContainerResponse,
    remove_container / "RemoveContainer": RemoveContainerRequest => RemoveContainerResponse,
    list_containers / "ListContainers": ListContainersRequest => ListContainersResponse,
    container_status / "ContainerStatus": ContainerStatusRequest => ContainerStatusResponse,
    update_container_resources / "UpdateContainerResources": UpdateContainerResourcesRequest => UpdateContainerResourcesResponse,
    reopen_container_log / "ReopenContainerLog": ReopenContainerLogRequest => ReopenContainerLogResponse,
    exec_sync / "ExecSync": ExecSyncRequest => ExecSyncResponse,
    exec / "Exec": ExecRequest => ExecResponse,
    attach / "Attach": AttachRequest => AttachResponse,
    port_forward / "PortForward": PortForwardRequest => PortForwardResponse,
    container_stats / "ContainerStats": ContainerStatsRequest => ContainerStatsResponse,
    list_container_stats / "ListContainerStats": ListContainerStatsRequest => ListContainerStatsResponse,
    pod_sandbox_stats / "PodSandboxStats": PodSandboxStatsRequest => PodSandboxStatsResponse,
    list_pod_sandbox_stats / "ListPodSandboxStats": ListPodSandboxStatsRequest => ListPodSandboxStatsResponse,
    update_runtime_config / "UpdateRuntimeConfig": UpdateRuntimeConfigRequest => UpdateRuntimeConfigResponse,
    status / "Status": StatusRequest => StatusResponse,
    checkpoint_container / "CheckpointContainer": CheckpointContainerRequest => CheckpointContainerResponse,
    runtime_config / "RuntimeConfig": RuntimeConfigRequest => RuntimeConfigResponse,
}
    type GetContainerEventsStream =
        tokio_stream::Empty<Result<api::ContainerEventResponse, Status>>;

    async fn get_container_events(
        &self,
        _request: Request<api::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        Err(Status::unimplemented("GetContainerEvents is not proxied"))
    }

    async fn list_metric_descriptors(
        &self,
        _request: Request<api::ListMetricDescriptorsRequest>,
    ) -> Result<Response<api::ListMetricDescriptorsResponse>, Status> {
        Err(Status::unimplemented("ListMetricDescriptors is not proxied"))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _request: Request<api::ListPodSandboxMetricsRequest>,
    ) -> Result<Response<api::ListPodSandboxMetricsResponse>, Status> {
        Err(Status::unimplemented("ListPodSandboxMetrics is not proxied"))
    }
);

proxy!(api::image_service_server::ImageService, ImageService, {
    list_images / "ListImages": ListImagesRequest => ListImagesResponse,
    image_status / "ImageStatus": ImageStatusRequest => ImageStatusResponse,
    pull_image / "PullImage": PullImageRequest => PullImageResponse,
    remove_image / "RemoveImage": RemoveImageRequest => RemoveImageResponse,
    image_fs_info / "ImageFsInfo": ImageFsInfoRequest => ImageFsInfoResponse,
});

/// The running proxy; stops serving and removes its socket on drop.
pub struct CriProxy {
    path: PathBuf,
    pub faults: Faults,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl CriProxy {
    /// Serves a proxy of `upstream` (a CRI endpoint) at socket `path`. The proxy's own calls
    /// upstream get a 10 min deadline: only the kubelet's deadline is under test.
    pub async fn start(upstream: &str, path: &Path) -> Self {
        let upstream = RemoteRuntime::connect(upstream, Duration::from_secs(600))
            .await
            .unwrap_or_else(|e| panic!("the CRI proxy cannot reach {upstream}: {e}"));
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("remove stale {}: {e}", path.display()),
        }
        let listener = UnixListener::bind(path)
            .unwrap_or_else(|e| panic!("bind the CRI proxy at {}: {e}", path.display()));
        let faults = Faults::default();
        let proxy = Arc::new(Proxy {
            upstream,
            faults: faults.clone(),
        });
        let max = rkubelet_cri::remote::MAX_MESSAGE_SIZE;
        let runtime = RuntimeServiceServer::from_arc(proxy.clone())
            .max_decoding_message_size(max)
            .max_encoding_message_size(max);
        let images = ImageServiceServer::from_arc(proxy)
            .max_decoding_message_size(max)
            .max_encoding_message_size(max);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(runtime)
                .add_service(images)
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                }),
        );
        Self {
            path: path.to_path_buf(),
            faults,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.path.display())
    }
}

impl Drop for CriProxy {
    fn drop(&mut self) {
        // Held calls must not keep the server (and its socket) alive.
        self.faults.release_all();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
