//! Streaming endpoints of the HTTPS port (upstream `getExec`, `getAttach`, `getPortForward` and
//! `proxyStream`): `/exec/…`, `/attach/…`, `/portForward/…`. Owns the proxied connections it
//! splices (spawned on the server's [`StreamTasks`], ended at shutdown); receives the client's
//! upgrade request, the desired pods, the runtime pod cache and the CRI runtime; emits the CRI
//! `Exec`/`Attach`/`PortForward` streaming URL proxied as an upgrade-aware byte proxy (the
//! runtime's `101` answer and a two-way splice), or an upstream-shaped error.
//!
//! The proxy does not look into the bytes: whatever the runtime's stream server speaks (SPDY,
//! websocket channel protocols) is what the client gets. `streamingConnectionIdleTimeout` is
//! the runtime's concern with the CRI (containerd's `stream_idle_timeout`): the kubelet does not
//! time out proxied streams, as upstream.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::{CriError, api};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use super::{Resp, ServerState, text};
use crate::container::PodStatus as RuntimePod;
use crate::types::PodExt;

/// How long connecting to the runtime's stream server and reading its answer may take.
const BACKEND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long reading a non-101 answer's body may take (upstream: a 10 s deadline).
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The proxied connections of one server: spawned on `tracker`, ended by `cancel`.
#[derive(Debug, Clone, Default)]
pub struct StreamTasks {
    pub tracker: TaskTracker,
    pub cancel: CancellationToken,
}

impl StreamTasks {
    /// Ends every proxied connection and waits for their tasks.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

pub use super::path::StreamKind;

/// The target of a streaming request (from its parsed route).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamTarget<'a> {
    pub kind: StreamKind,
    pub namespace: &'a str,
    pub pod: &'a str,
    /// The optional `{uid}` segment.
    pub uid: Option<&'a str>,
    /// Exec/attach only.
    pub container: Option<&'a str>,
}

/// Errors of the streaming endpoints, with upstream's texts.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("you must specify at least 1 of stdin, stdout, stderr")]
    NoStreams,
    #[error("query parameter \"port\" is required")]
    PortRequired,
    #[error("query parameter \"port\" cannot be empty")]
    PortEmpty,
    #[error("unable to parse {value:?} as a port: {reason}")]
    BadPort { value: String, reason: String },
    #[error("port {0:?} must be > 0")]
    ZeroPort(String),
    #[error("pod does not exist")]
    PodNotExist,
    /// `/portForward/{ns}/{pod}/{uid}` with another UID.
    #[error("pod not found")]
    PodUidMismatch,
    #[error("container not found ({0:?})")]
    ExecContainerNotFound(String),
    #[error("container {container} not found in pod {pod}")]
    AttachContainerNotFound { container: String, pod: String },
    #[error("pod {0} not found")]
    AttachPodNotFound(String),
    #[error("pod not found ({0:?})")]
    PortForwardPodNotFound(String),
    #[error("failed to find sandboxID for pod {0}")]
    NoSandbox(String),
    #[error("no container runtime")]
    NoRuntime,
    #[error(transparent)]
    Cri(#[from] CriError),
    #[error("Upgrade request required")]
    UpgradeRequired,
    #[error("invalid upgrade response: status code {0}")]
    InvalidUpgradeResponse(u16),
    #[error("{0}")]
    Proxy(String),
}

impl StreamError {
    /// Upstream's status: 400 for bad options, 404 for a missing pod, the CRI code mapping of
    /// `streaming.WriteError` (NotFound 404, ResourceExhausted 429) and 500 for the rest.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NoStreams
            | Self::PortRequired
            | Self::PortEmpty
            | Self::BadPort { .. }
            | Self::ZeroPort(_) => StatusCode::BAD_REQUEST,
            Self::PodNotExist | Self::PodUidMismatch => StatusCode::NOT_FOUND,
            Self::Cri(CriError::NotFound { .. }) => StatusCode::NOT_FOUND,
            Self::Cri(CriError::Other { code, .. }) if *code == tonic::Code::ResourceExhausted => {
                StatusCode::TOO_MANY_REQUESTS
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn response(&self) -> Resp {
        let mut msg = self.to_string();
        // Go's http.Error (the proxy's responder) ends the text with a newline.
        if matches!(
            self,
            Self::UpgradeRequired | Self::InvalidUpgradeResponse(_) | Self::Proxy(_)
        ) {
            msg.push('\n');
        }
        text(self.status(), msg)
    }
}

/// Remote command options (upstream `remotecommand.NewOptions`): `input`, `output`, `error`,
/// `tty` are on only when `1`; `tty` turns `error` off (a TTY has no separate stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// The first value of `key` (as Go's `FormValue`).
fn first<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Every value of `key`, in order (as Go's `URL.Query()[key]`).
fn all<'a>(query: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    query
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

pub fn parse_options(query: &[(String, String)]) -> Result<StreamOptions, StreamError> {
    let on = |k: &str| first(query, k) == Some("1");
    let tty = on("tty");
    let opts = StreamOptions {
        stdin: on("input"),
        stdout: on("output"),
        stderr: on("error") && !tty,
        tty,
    };
    if !(opts.stdin || opts.stdout || opts.stderr) {
        return Err(StreamError::NoStreams);
    }
    Ok(opts)
}

/// The exec command: every `command` value, in order.
pub fn parse_command(query: &[(String, String)]) -> Vec<String> {
    all(query, "command")
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Port-forward ports (upstream `portforward.NewV4Options`): only websocket requests carry
/// them in the query (`port`, repeatable, comma-separated); SPDY clients name the port per
/// stream, so non-websocket requests need none.
pub fn parse_ports(query: &[(String, String)], websocket: bool) -> Result<Vec<i32>, StreamError> {
    if !websocket {
        return Ok(Vec::new());
    }
    let values = all(query, "port");
    if values.is_empty() {
        return Err(StreamError::PortRequired);
    }
    let mut ports = Vec::new();
    for value in values {
        if value.is_empty() {
            return Err(StreamError::PortEmpty);
        }
        for p in value.split(',') {
            let port = p.parse::<u16>().map_err(|e| StreamError::BadPort {
                value: value.to_owned(),
                reason: e.to_string(),
            })?;
            if port == 0 {
                return Err(StreamError::ZeroPort(value.to_owned()));
            }
            ports.push(i32::from(port));
        }
    }
    Ok(ports)
}

/// Whether a `Connection` header names the `upgrade` token (upstream `IsUpgradeRequest`).
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// An upgrade request to `websocket`.
pub fn is_websocket_request(headers: &HeaderMap) -> bool {
    is_upgrade_request(headers)
        && headers
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
}

/// `name_namespace`, upstream's pod full name.
fn full_name(name: &str, namespace: &str) -> String {
    format!("{name}_{namespace}")
}

/// The runtime pods named `ns/name` (what upstream's `GetPods(false)` + `FindPodByFullName`
/// look at: pods with a running container or a ready sandbox), the desired pod's UID first.
fn runtime_pods(state: &ServerState, ns: &str, name: &str, uid: &str) -> Vec<RuntimePod> {
    let Some(cache) = &state.pod_cache else {
        return Vec::new();
    };
    let mut pods: Vec<RuntimePod> = cache
        .get_all()
        .into_iter()
        .filter(|p| p.namespace == ns && p.name == name)
        .filter(|p| {
            p.container_statuses.iter().any(|c| c.is_running())
                || p.sandbox_statuses.iter().any(|s| s.ready)
        })
        .collect();
    pods.sort_by_key(|p| p.uid != uid);
    pods
}

/// The running container `name` of the runtime pod (upstream `findContainer`).
fn find_running_container(pods: &[RuntimePod], name: &str) -> Option<String> {
    pods.first()?
        .container_statuses
        .iter()
        .find(|c| c.name == name && c.is_running())
        .map(|c| c.id.clone())
}

fn spec_container_tty(pod: &Pod, name: &str) -> Option<bool> {
    let spec = pod.spec.as_ref()?;
    if let Some(c) = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
    {
        return Some(c.tty.unwrap_or(false));
    }
    spec.ephemeral_containers
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .map(|c| c.tty.unwrap_or(false))
}

/// Asks the runtime for the streaming URL of `target` (everything before the proxy).
pub async fn stream_url<B>(
    state: &ServerState,
    target: &StreamTarget<'_>,
    req: &Request<B>,
) -> Result<String, StreamError> {
    let query = super::query::query_pairs(req.uri().query());
    let opts = match target.kind {
        StreamKind::Exec | StreamKind::Attach => Some(parse_options(&query)?),
        StreamKind::PortForward => None,
    };
    let ports = match target.kind {
        StreamKind::PortForward => parse_ports(&query, is_websocket_request(req.headers()))?,
        _ => Vec::new(),
    };
    let pod = state
        .pods
        .borrow()
        .iter()
        .find(|p| p.namespace() == target.namespace && p.name() == target.pod)
        .cloned()
        .ok_or(StreamError::PodNotExist)?;
    let pod_full = full_name(pod.name(), pod.namespace());
    let uid_mismatch = target.uid.is_some_and(|u| u != pod.uid());
    if target.kind == StreamKind::PortForward && uid_mismatch {
        return Err(StreamError::PodUidMismatch);
    }
    let runtime = state.runtime.clone().ok_or(StreamError::NoRuntime)?;
    let pods = runtime_pods(state, pod.namespace(), pod.name(), pod.uid());
    match (target.kind, opts) {
        (StreamKind::Exec, Some(o)) => {
            let container = target.container.unwrap_or_default();
            let id = find_running_container(&pods, container)
                .ok_or_else(|| StreamError::ExecContainerNotFound(container.to_owned()))?;
            let resp = runtime
                .exec(api::ExecRequest {
                    container_id: id,
                    cmd: parse_command(&query),
                    tty: o.tty,
                    stdin: o.stdin,
                    stdout: o.stdout,
                    stderr: o.stderr,
                })
                .await?;
            Ok(resp.url)
        }
        (StreamKind::Attach, Some(o)) => {
            let container = target.container.unwrap_or_default();
            let not_found = || StreamError::AttachContainerNotFound {
                container: container.to_owned(),
                pod: pod_full.clone(),
            };
            let id = find_running_container(&pods, container).ok_or_else(not_found)?;
            if uid_mismatch {
                return Err(StreamError::AttachPodNotFound(pod_full.clone()));
            }
            // Whether the process has a TTY was fixed when the container started.
            let tty = spec_container_tty(&pod, container).ok_or_else(not_found)?;
            let resp = runtime
                .attach(api::AttachRequest {
                    container_id: id,
                    stdin: o.stdin,
                    tty,
                    stdout: o.stdout,
                    stderr: o.stderr,
                })
                .await?;
            Ok(resp.url)
        }
        _ => {
            if pods.is_empty() {
                return Err(StreamError::PortForwardPodNotFound(pod_full));
            }
            let sandbox = pods
                .iter()
                .filter(|p| p.uid == pod.uid())
                .flat_map(|p| p.sandbox_statuses.first())
                .next()
                .ok_or_else(|| StreamError::NoSandbox(format!("{}({})", pod_full, pod.uid())))?;
            let resp = runtime
                .port_forward(api::PortForwardRequest {
                    pod_sandbox_id: sandbox.id.clone(),
                    port: ports,
                })
                .await?;
            Ok(resp.url)
        }
    }
}

/// Serves one streaming request: the runtime's URL, then the upgrade-aware proxy to it.
pub async fn serve<B>(state: &ServerState, target: &StreamTarget<'_>, req: &Request<B>) -> Resp {
    let url = match stream_url(state, target, req).await {
        Ok(u) => u,
        Err(e) => {
            debug!(error = %e, path = req.uri().path(), "streaming request failed");
            return e.response();
        }
    };
    match proxy(state, req, &url).await {
        Ok(resp) => resp,
        Err(e) => {
            warn!(error = %e, "Error while proxying request");
            e.response()
        }
    }
}

/// Headers never copied to the runtime's request: the client's credentials for the kubelet
/// (`Authorization`, `Proxy-Authorization`: the runtime's stream server must not see a
/// bearer token it could replay), and what hyper sets from the empty body and the backend
/// address.
fn forwarded(name: &header::HeaderName) -> bool {
    name != header::HOST
        && name != header::CONTENT_LENGTH
        && name != header::TRANSFER_ENCODING
        && name != header::AUTHORIZATION
        && name != header::PROXY_AUTHORIZATION
}

/// Upstream's `UpgradeAwareHandler` with `upgradeRequired`: forwards the upgrade request to
/// `url`; on `101` answers `101` with the runtime's headers and splices the two upgraded
/// connections until either side ends; a `>= 400` answer is passed through; anything else
/// is an error.
pub async fn proxy<B>(
    state: &ServerState,
    req: &Request<B>,
    url: &str,
) -> Result<Resp, StreamError> {
    if !is_upgrade_request(req.headers()) {
        return Err(StreamError::UpgradeRequired);
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|e| StreamError::Proxy(format!("invalid stream URL {url:?}: {e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(StreamError::Proxy(format!(
            "unsupported stream URL scheme in {url:?} (only http)"
        )));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| StreamError::Proxy(format!("stream URL {url:?} has no host")))?
        .clone();
    let port = authority.port_u16().unwrap_or(80);
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = Request::builder().method(req.method().clone()).uri(path);
    for (name, value) in req.headers() {
        if forwarded(name) {
            out = out.header(name, value);
        }
    }
    let out = out
        .header(header::HOST, authority.as_str())
        .body(Empty::<Bytes>::new())
        .map_err(|e| StreamError::Proxy(e.to_string()))?;

    let tasks = state.streams.clone();
    let server_cancel = state.cancel.clone();
    let connect = async {
        let tcp = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| StreamError::Proxy(format!("dial tcp {authority}: {e}")))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| StreamError::Proxy(e.to_string()))?;
        let cancel = tasks.cancel.clone();
        let server_cancel = server_cancel.clone();
        tasks.tracker.spawn(async move {
            tokio::select! {
                r = conn.with_upgrades() => {
                    if let Err(e) = r {
                        debug!(error = %e, "stream server connection ended");
                    }
                }
                _ = cancel.cancelled() => {}
                _ = server_cancel.cancelled() => {}
            }
        });
        sender
            .send_request(out)
            .await
            .map_err(|e| StreamError::Proxy(e.to_string()))
    };
    let resp = tokio::time::timeout(BACKEND_TIMEOUT, connect)
        .await
        .map_err(|_| {
            StreamError::Proxy(format!("stream server {authority} did not answer in time"))
        })??;
    let status = resp.status();
    debug!(
        status = status.as_u16(),
        websocket = is_websocket_request(req.headers()),
        protocol = ?resp.headers().get("x-stream-protocol-version"),
        url,
        "stream server answered"
    );
    if status == StatusCode::SWITCHING_PROTOCOLS {
        let mut answer = Response::new(Full::new(Bytes::new()).boxed());
        *answer.status_mut() = status;
        *answer.headers_mut() = resp.headers().clone();
        let client = req.extensions().get::<OnUpgrade>().cloned();
        let backend = hyper::upgrade::on(resp);
        let cancel = tasks.cancel.clone();
        tasks.tracker.spawn(async move {
            let Some(client) = client else {
                warn!("the client connection cannot be upgraded");
                return;
            };
            tokio::select! {
                _ = splice(client, backend) => {}
                _ = cancel.cancelled() => {}
                _ = server_cancel.cancelled() => {}
            }
        });
        return Ok(answer);
    }
    if status.as_u16() < 400 {
        return Err(StreamError::InvalidUpgradeResponse(status.as_u16()));
    }
    let headers = resp.headers().clone();
    let body = match tokio::time::timeout(ERROR_BODY_TIMEOUT, resp.into_body().collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        _ => Bytes::new(),
    };
    let mut answer = Response::new(Full::new(body).boxed());
    *answer.status_mut() = status;
    for (name, value) in &headers {
        if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING {
            answer.headers_mut().append(name, value.clone());
        }
    }
    Ok(answer)
}

/// Copies bytes both ways until one direction ends, then closes both (as upstream).
async fn splice(client: OnUpgrade, backend: OnUpgrade) {
    let (client, backend) = match tokio::try_join!(client, backend) {
        Ok(pair) => pair,
        Err(e) => {
            debug!(error = %e, "upgrade failed");
            return;
        }
    };
    let (mut client_rd, mut client_wr) = tokio::io::split(TokioIo::new(client));
    let (mut backend_rd, mut backend_wr) = tokio::io::split(TokioIo::new(backend));
    tokio::select! {
        r = tokio::io::copy(&mut client_rd, &mut backend_wr) => {
            if let Err(e) = r {
                debug!(error = %e, "proxying data from client to runtime ended");
            }
        }
        r = tokio::io::copy(&mut backend_rd, &mut client_wr) => {
            if let Err(e) = r {
                debug!(error = %e, "proxying data from runtime to client ended");
            }
        }
    }
    let _ = client_wr.shutdown().await;
    let _ = backend_wr.shutdown().await;
}

#[cfg(test)]
#[path = "streaming_tests.rs"]
mod tests;
