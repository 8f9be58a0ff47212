//! The kubelet's HTTP servers: the authenticated HTTPS port (`address:port`, TLS in `tls`,
//! authentication in `authn`, authorization in `authz`), the unauthenticated read-only port
//! and the healthz port. Owns the listeners and connections; reads the desired pods (pod
//! manager snapshot), statuses (status manager), the runtime's pods (pod cache), the CRI
//! runtime, the effective configuration and the health checks; emits the responses built in
//! `routes` (container logs read by `logs`, exec/attach/port-forward proxied by `streaming`,
//! whose spliced connections each server tracks and ends at shutdown). Every request path is
//! parsed once (`path`) and only that route is read afterwards. Connections are HTTP/1.1 with
//! upgrades enabled, a request-head size limit, and a header-read and an idle keep-alive
//! timeout (`conn`), each served by its own task (TLS handshake included).

pub mod authn;
pub mod authz;
pub mod cache;
mod conn;
pub mod encoding;
pub mod local;
mod log_handlers;
pub mod logs;
pub mod operator;
pub mod path;
pub mod query;
pub mod review;
pub mod routes;
pub mod setup;
pub mod streaming;
pub mod tls;

#[cfg(test)]
mod pod_dir_logs_tests;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::RuntimeService;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::container::cache::PodCache;
use crate::status::manager::StatusManager;
use crate::types::PodExt;

use self::authn::{Authenticator, AuthnError, UserInfo};
use self::authz::Authorizer;

/// A named health check (`ping`, `syncloop`, `pleg`…).
use crate::health::HealthCheck;

/// Response type of every handler.
pub type Resp = Response<BoxBody<Bytes, Infallible>>;

/// What the handlers read.
#[derive(Clone)]
pub struct ServerState {
    pub pods: watch::Receiver<crate::types::PodsSnapshot>,
    pub status: StatusManager,
    pub checks: Vec<(String, HealthCheck)>,
    /// The node name (authorization attributes).
    pub node_name: String,
    /// The kubelet root directory (`checkpoints/` lives there).
    pub root_dir: PathBuf,
    /// The CRI runtime (container logs, `/run`, `/checkpoint`).
    pub runtime: Option<Arc<dyn RuntimeService>>,
    /// The runtime's view of pods (`/runningpods/`).
    pub pod_cache: Option<PodCache>,
    /// The effective KubeletConfiguration for `/configz`.
    pub configz: Option<Arc<serde_json::Value>>,
    /// Directory served under `/logs/` (`enableSystemLogHandler`); `None` → 404.
    pub system_logs: Option<PathBuf>,
    /// `enableDebuggingHandlers`: logs, run, checkpoint, configz, runningpods.
    pub debugging_handlers: bool,
    /// Ends followed log streams at shutdown.
    pub cancel: CancellationToken,
    /// `/metrics` and the `kubelet_http_requests_*` series (`None`: 404, not recorded).
    pub metrics: Option<crate::metrics::KubeletMetrics>,
    /// `/metrics/probes`.
    pub probe_metrics: Option<crate::prober::metrics::ProbeMetrics>,
    /// `/stats/summary`, `/metrics/resource` and `/metrics/cadvisor` (the stats provider's
    /// latest snapshot; `None`: 404).
    pub stats: Option<crate::stats::StatsHandle>,
    /// `cgroupRoot` when the kubelet runs per-QoS pod cgroups (`/metrics/cadvisor` ids);
    /// `None`: pods have no cgroup of their own and only node rows are written.
    pub pod_cgroup_root: Option<String>,
    /// `cgroupDriver` (how the pod cgroups under `pod_cgroup_root` are named).
    pub pod_cgroup_driver: crate::cm::cgroups::CgroupDriver,
    /// Host facts read at start-up (`machine_*` of `/metrics/cadvisor`).
    pub machine: Option<Arc<crate::host::HostInfo>>,
    /// Proxied streaming connections; a server ends them (and waits) when it stops.
    pub streams: streaming::StreamTasks,
    /// How long a client may take to send a request head, from its first byte (from the
    /// accept or handshake for a connection's first request) ([`HEADER_READ_TIMEOUT`]).
    pub header_read_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request ([`IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// rkubelet's operator views (`/debug/rkubelet/…`); `None`: 404.
    pub operator: Option<operator::OperatorState>,
}

impl ServerState {
    /// A state with only pods, statuses and health checks (everything else off).
    pub fn basic(
        pods: watch::Receiver<crate::types::PodsSnapshot>,
        status: StatusManager,
        checks: Vec<(String, HealthCheck)>,
    ) -> Self {
        Self {
            pods,
            status,
            checks,
            node_name: String::new(),
            root_dir: PathBuf::new(),
            runtime: None,
            pod_cache: None,
            configz: None,
            system_logs: None,
            debugging_handlers: true,
            cancel: CancellationToken::new(),
            metrics: None,
            probe_metrics: None,
            stats: None,
            pod_cgroup_root: None,
            pod_cgroup_driver: crate::cm::cgroups::CgroupDriver::Cgroupfs,
            machine: None,
            streams: streaming::StreamTasks::default(),
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            operator: None,
        }
    }
}

/// Authentication and authorization of the HTTPS port.
pub struct Auth {
    pub authenticator: Authenticator,
    pub authorizer: Authorizer,
}

/// Server errors.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("{0}")]
    Config(String),
    #[error("local socket {}: {message}", path.display())]
    LocalSocket { path: PathBuf, message: String },
}

/// Which endpoints a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    /// `healthzPort`: health only.
    Healthz,
    /// `readOnlyPort`: pods and health, no authentication, no debugging handlers.
    ReadOnly,
    /// `port` (HTTPS, authenticated): everything.
    Secure,
}

/// Binds `addr` (fails fast so a port clash is reported at start-up).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// How long a client may take to send a request's headers, from the first byte.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a keep-alive connection may wait for its next request (upstream `IdleTimeout`,
/// above Go's client keep-alive of the same length, so the API server's client closes an idle
/// connection before the kubelet does and never sends on one being closed).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// The largest request head accepted (upstream `MaxHeaderBytes`: 1 MiB); larger is a 431.
pub const MAX_HEADER_BYTES: usize = 1 << 20;
/// How long a TLS handshake may take.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP/1.1 settings of every port. hyper's header-read timer is off: it also runs while
/// a keep-alive connection is idle; `conn` times heads and idleness instead.
fn http1() -> hyper::server::conn::http1::Builder {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(None)
        .max_header_size(MAX_HEADER_BYTES)
        .max_buf_size(MAX_HEADER_BYTES + 64 * 1024);
    b
}

/// Serves HTTP/1.1 on one accepted (and, on the HTTPS port, handshaken) connection until it
/// ends, is upgraded (the upgraded stream is not timed here), or its request head or
/// idleness outlasts the state's timeouts.
async fn serve_connection<S, P, H, F>(io: S, state: &ServerState, peer: P, handler: H)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    P: std::fmt::Display,
    H: Fn(Request<Incoming>) -> F + Send + 'static,
    F: std::future::Future<Output = Resp> + Send + 'static,
{
    let clock = conn::Clock::new(state.header_read_timeout, state.idle_timeout);
    let io = TokioIo::new(conn::Watched::new(io, clock.clone()));
    let requests = clock.clone();
    let svc = service_fn(move |req: Request<Incoming>| {
        let guard = requests.begin();
        let resp = handler(req);
        async move { Ok::<_, Infallible>(resp.await.map(|b| conn::Tracked::new(b, guard))) }
    });
    let connection = http1().serve_connection(io, svc).with_upgrades();
    tokio::select! {
        ended = connection => {
            if let Err(e) = ended {
                debug!(%peer, error = %e, "HTTP connection ended with an error");
            }
        }
        why = conn::watchdog(clock) => debug!(%peer, why, "HTTP connection closed"),
    }
}

/// Waits before the next accept after a failure (out of descriptors…) so the loop does not
/// spin; connections being served are not affected.
async fn accept_failed(e: &std::io::Error) {
    warn!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// The ports served without authentication; the type keeps the authenticated endpoints off
/// plain HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainPort {
    /// `readOnlyPort`.
    ReadOnly,
    /// `healthzPort`.
    Healthz,
}

impl From<PlainPort> for Endpoints {
    fn from(p: PlainPort) -> Self {
        match p {
            PlainPort::ReadOnly => Endpoints::ReadOnly,
            PlainPort::Healthz => Endpoints::Healthz,
        }
    }
}

/// Serves the read-only or healthz port on `listener` until `cancel` fires.
pub async fn serve(
    listener: TcpListener,
    port: PlainPort,
    state: ServerState,
    cancel: CancellationToken,
) {
    serve_plain(listener, port.into(), state, cancel).await
}

/// Serves plain HTTP on `listener` until `cancel` fires; in-flight connections are closed then.
/// The accept loop never waits for a connection: each is served by its own task. Only the
/// crate's own tests pass `Endpoints::Secure` here (every endpoint, no authentication).
pub(crate) async fn serve_plain(
    listener: TcpListener,
    endpoints: Endpoints,
    state: ServerState,
    cancel: CancellationToken,
) {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, ?endpoints, "serving HTTP");
    }
    let streams = state.streams.clone();
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        accept_failed(&e).await;
                        continue;
                    }
                };
                let state = state.clone();
                conns.spawn(async move {
                    let st = state.clone();
                    serve_connection(stream, &st, peer, move |req: Request<Incoming>| {
                        let state = state.clone();
                        async move { routes::route(&state, endpoints, &req).await }
                    })
                    .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
    streams.shutdown().await;
}

/// Serves the authenticated HTTPS port until `cancel` fires. Each connection takes the
/// current TLS configuration (`tls` reloads its files while serving); the handshake runs in
/// the connection's own task, so a stalled client delays nobody else.
pub async fn serve_secure(
    listener: TcpListener,
    tls: Arc<tls::ServingTls>,
    auth: Arc<Auth>,
    state: ServerState,
    cancel: CancellationToken,
) {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "serving HTTPS");
    }
    let reloader = tokio::spawn(tls.clone().watch(cancel.clone()));
    let streams = state.streams.clone();
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        accept_failed(&e).await;
                        continue;
                    }
                };
                let state = state.clone();
                let auth = auth.clone();
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
                conns.spawn(async move {
                    let tls = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    // The chain is verified per request (validity period and the current
                    // client CA), not only once at the handshake.
                    let chain: Arc<Option<Vec<rustls::pki_types::CertificateDer<'static>>>> =
                        Arc::new(tls.get_ref().1.peer_certificates().map(<[_]>::to_vec));
                    let st = state.clone();
                    serve_connection(tls, &st, peer, move |req: Request<Incoming>| {
                        let state = state.clone();
                        let auth = auth.clone();
                        let chain = chain.clone();
                        async move {
                            let cert = chain
                                .as_deref()
                                .and_then(|c| auth.authenticator.authenticate_cert(c));
                            handle_secure(&state, &auth, cert.as_ref(), &req).await
                        }
                    })
                    .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
    streams.shutdown().await;
    let _ = reloader.await;
}

/// Authenticates, authorizes and routes one request of the HTTPS port. Every path needs an
/// identity (`/healthz` too, as upstream); the path is parsed once and that route is what
/// the authorization attributes, the debug gate and the dispatcher read.
async fn handle_secure<B>(
    state: &ServerState,
    auth: &Auth,
    cert: Option<&Result<UserInfo, AuthnError>>,
    req: &Request<B>,
) -> Resp {
    let route = path::parse(req.uri().path());
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok());
    let user = match auth.authenticator.authenticate(cert, header).await {
        Ok(Some(u)) => u,
        Ok(None) => return text(StatusCode::UNAUTHORIZED, "Unauthorized".into()),
        Err(e) => {
            debug!(error = %e, route = route.metrics_label(), "authentication failed");
            return text(StatusCode::UNAUTHORIZED, "Unauthorized".into());
        }
    };
    authorize_and_dispatch(state, &auth.authorizer, &user, &route, req).await
}

/// Authorizes an authenticated request by its parsed route and dispatches it to every
/// endpoint (the HTTPS port and the local socket): 403 with upstream's text when refused.
async fn authorize_and_dispatch<B>(
    state: &ServerState,
    authorizer: &Authorizer,
    user: &UserInfo,
    route: &path::Route,
    req: &Request<B>,
) -> Resp {
    let attrs = authz::request_attributes(req.method(), route, &state.node_name);
    match authorizer.authorize(user, &attrs).await {
        Ok(true) => routes::dispatch(state, Endpoints::Secure, route, req).await,
        Ok(false) => {
            let msg = authz::forbidden_message(user, &attrs);
            debug!(msg = msg.trim_end(), "request forbidden");
            text(StatusCode::FORBIDDEN, msg)
        }
        Err(e) => {
            warn!(error = %e, "authorization failed");
            text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    }
}

/// A body fed by a channel (followed logs).
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

pub(crate) fn stream(rx: mpsc::Receiver<Bytes>) -> Resp {
    let mut resp = Response::new(ChannelBody(rx).boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut().insert(
        "transfer-encoding",
        header::HeaderValue::from_static("chunked"),
    );
    resp
}

pub(crate) fn bytes_response(status: StatusCode, body: Bytes) -> Resp {
    let mut resp = Response::new(Full::new(body).boxed());
    *resp.status_mut() = status;
    resp
}

pub(crate) fn text(status: StatusCode, body: String) -> Resp {
    let mut resp = bytes_response(status, Bytes::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Upstream's 404 body for a path the kubelet does not serve.
pub(crate) fn not_found() -> Resp {
    text(StatusCode::NOT_FOUND, "404 page not found\n".into())
}

/// A Prometheus text exposition (format 0.0.4) in the negotiated content coding; `Vary:
/// Accept-Encoding` either way, since the representation depends on that header.
pub(crate) fn prometheus_text(body: String, coding: encoding::Coding) -> Resp {
    let gzipped = match coding {
        encoding::Coding::Gzip => encoding::gzip(body.as_bytes()),
        encoding::Coding::Identity => None,
    };
    let is_gzip = gzipped.is_some();
    let mut resp = bytes_response(
        StatusCode::OK,
        gzipped.map_or_else(|| Bytes::from(body), Bytes::from),
    );
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    h.insert(
        header::VARY,
        header::HeaderValue::from_static("Accept-Encoding"),
    );
    if is_gzip {
        h.insert(
            header::CONTENT_ENCODING,
            header::HeaderValue::from_static("gzip"),
        );
    }
    resp
}

pub(crate) fn json<T: serde::Serialize + ?Sized>(status: StatusCode, v: &T) -> Resp {
    match serde_json::to_vec(v) {
        Ok(body) => {
            let mut resp = bytes_response(status, Bytes::from(body));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            resp
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding response: {e}\n"),
        ),
    }
}

/// Upstream healthz: `ok`, or a per-check listing with `healthz check failed` and 500.
fn healthz(state: &ServerState, only: Option<&str>, query: &str) -> Resp {
    let mut checks: Vec<(&str, Result<(), String>)> = vec![("ping", Ok(())), ("log", Ok(()))];
    checks.extend(state.checks.iter().map(|(n, c)| (n.as_str(), c())));
    if let Some(name) = only {
        return match checks.iter().find(|(n, _)| *n == name) {
            Some((_, Ok(()))) => text(StatusCode::OK, "ok".into()),
            Some((n, Err(e))) => {
                warn!(check = n, error = %e, "healthz check failed");
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("internal server error: {e}\n"),
                )
            }
            None => text(StatusCode::NOT_FOUND, "404 page not found\n".into()),
        };
    }
    let failed = checks.iter().any(|(_, r)| r.is_err());
    if !failed && !query.contains("verbose") {
        return text(StatusCode::OK, "ok".into());
    }
    let mut body = String::new();
    for (name, r) in &checks {
        match r {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(e) => {
                warn!(check = name, error = %e, "healthz check failed");
                body.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    if failed {
        body.push_str("healthz check failed\n");
        text(StatusCode::INTERNAL_SERVER_ERROR, body)
    } else {
        body.push_str("healthz check passed\n");
        text(StatusCode::OK, body)
    }
}

/// The desired pods with their current statuses as a v1 `PodList`, serialized straight from
/// the pod manager's shared pods: only the statuses are copied, and no JSON tree is built in
/// between (a monitor polling `/pods` at 110 pods would otherwise copy every pod each time).
pub fn pod_list(state: &ServerState) -> PodList {
    let pods = state.pods.borrow().clone();
    let statuses = pods
        .iter()
        .map(|p| state.status.get_pod_status(p.uid()))
        .collect();
    PodList { pods, statuses }
}

/// What `/pods` serves (see [`pod_list`]).
pub struct PodList {
    pods: crate::types::PodsSnapshot,
    /// The status manager's status of each pod of `pods`, in order.
    statuses: Vec<Option<k8s_openapi::api::core::v1::PodStatus>>,
}

impl serde::Serialize for PodList {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let items: Vec<ListedPod<'_>> = self
            .pods
            .iter()
            .zip(&self.statuses)
            .map(|(pod, status)| ListedPod {
                pod,
                status: status.as_ref().or(pod.status.as_ref()),
            })
            .collect();
        let mut list = serializer.serialize_struct("PodList", 4)?;
        list.serialize_field("kind", "PodList")?;
        list.serialize_field("apiVersion", "v1")?;
        list.serialize_field("metadata", &serde_json::Map::new())?;
        list.serialize_field("items", &items)?;
        list.end()
    }
}

/// A pod as its own `Serialize` writes it, with `status` in place of the pod's.
struct ListedPod<'a> {
    pod: &'a Pod,
    status: Option<&'a k8s_openapi::api::core::v1::PodStatus>,
}

impl serde::Serialize for ListedPod<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use k8s_openapi::Resource;
        use serde::ser::SerializeStruct;
        let fields = 3 + usize::from(self.pod.spec.is_some()) + usize::from(self.status.is_some());
        let mut pod = serializer.serialize_struct(Pod::KIND, fields)?;
        pod.serialize_field("apiVersion", Pod::API_VERSION)?;
        pod.serialize_field("kind", Pod::KIND)?;
        pod.serialize_field("metadata", &self.pod.metadata)?;
        if let Some(spec) = &self.pod.spec {
            pod.serialize_field("spec", spec)?;
        }
        if let Some(status) = self.status {
            pod.serialize_field("status", status)?;
        }
        pod.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn state(failing: bool) -> (ServerState, watch::Sender<crate::types::PodsSnapshot>) {
        let (tx, rx) = watch::channel(Arc::new(Vec::new()));
        let check: HealthCheck = Arc::new(move || {
            if failing {
                Err("pleg was last seen active 3m0.1s ago; threshold is 3m0s".to_owned())
            } else {
                Ok(())
            }
        });
        let state = ServerState::basic(rx, StatusManager::new(), vec![("pleg".to_owned(), check)]);
        (state, tx)
    }

    async fn body(resp: Resp) -> (StatusCode, String) {
        let code = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn healthz_reports_failing_checks_like_upstream() {
        let (ok, _tx) = state(false);
        assert_eq!(
            body(healthz(&ok, None, "")).await,
            (StatusCode::OK, "ok".into())
        );
        let (bad, _tx) = state(true);
        let (code, text) = body(healthz(&bad, None, "")).await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            text,
            "[+]ping ok\n[+]log ok\n[-]pleg failed: reason withheld\nhealthz check failed\n"
        );
        let (code, _) = body(healthz(&bad, Some("pleg"), "")).await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body(healthz(&bad, Some("ping"), "")).await.0,
            StatusCode::OK
        );
        assert_eq!(
            body(healthz(&bad, Some("nope"), "")).await.0,
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test]
    async fn pods_carry_the_status_manager_status() {
        let (st, tx) = state(false);
        let pod = Pod {
            metadata: ObjectMeta {
                uid: Some("u1".into()),
                name: Some("p".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        tx.send_replace(Arc::new(vec![Arc::new(pod.clone())]));
        st.status.set_pod_status(
            &pod,
            k8s_openapi::api::core::v1::PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            },
        );
        let list = serde_json::to_value(pod_list(&st)).unwrap();
        assert_eq!(list["kind"], "PodList");
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["items"][0]["status"]["phase"], "Running");
        assert_eq!(list["items"][0]["metadata"]["uid"], "u1");
    }

    /// The list written straight from the shared pods is the JSON of the pods copied with
    /// their statuses set: with and without a spec, with the status manager's status, and
    /// with only the pod's own status (a pod the status manager has nothing for yet).
    #[tokio::test]
    async fn the_pod_list_is_the_json_of_the_pods_with_their_statuses() {
        use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
        let (st, tx) = state(false);
        let pod = |uid: &str, spec: bool, own_phase: Option<&str>| Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                name: Some(format!("p-{uid}")),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: spec.then(|| PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("busybox".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: own_phase.map(|p| PodStatus {
                phase: Some(p.into()),
                ..Default::default()
            }),
        };
        let pods = [
            pod("u1", true, Some("Pending")),
            pod("u2", false, None),
            pod("u3", true, Some("Pending")),
            pod("u4", true, None),
        ];
        tx.send_replace(Arc::new(pods.iter().cloned().map(Arc::new).collect()));
        for p in &pods[..2] {
            st.status.set_pod_status(
                p,
                PodStatus {
                    phase: Some("Running".into()),
                    pod_ip: Some("10.0.0.7".into()),
                    ..Default::default()
                },
            );
        }
        let expected: Vec<Pod> = pods
            .iter()
            .map(|p| {
                let mut p = p.clone();
                if let Some(s) = st.status.get_pod_status(p.uid()) {
                    p.status = Some(s);
                }
                p
            })
            .collect();
        let expected = serde_json::json!({
            "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": expected,
        });
        let req = http::Request::get("/pods").body(()).unwrap();
        let served = routes::route(&st, Endpoints::ReadOnly, &req).await;
        let (code, text) = body(served).await;
        assert_eq!(code, StatusCode::OK);
        let served: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(served, expected);
        assert_eq!(served["items"][0]["status"]["phase"], "Running");
        assert_eq!(served["items"][2]["status"]["phase"], "Pending");
        assert!(served["items"][3].get("status").is_none());
    }

    #[tokio::test]
    async fn stalled_heads_end_after_the_header_timeout_and_idle_connections_after_the_idle_one() {
        use tokio::io::AsyncWriteExt;
        const HEAD: Duration = Duration::from_millis(200);
        const IDLE: Duration = Duration::from_millis(600);
        let (mut st, _tx) = state(false);
        st.header_read_timeout = HEAD;
        st.idle_timeout = IDLE;
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(serve(listener, PlainPort::ReadOnly, st, cancel.clone()));
        let start = tokio::time::Instant::now();
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut partial = tokio::net::TcpStream::connect(addr).await.unwrap();
        partial
            .write_all(b"GET /pods HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut idle = served_once(addr).await;
        let idle_from = tokio::time::Instant::now();
        // A connection that never sends a whole head is closed after the header timeout.
        for conn in [&mut silent, &mut partial] {
            assert!(closed_within(conn, Duration::from_secs(5)).await);
        }
        let took = start.elapsed();
        assert!(took >= HEAD && took < IDLE, "{took:?}");
        // The idle keep-alive connection is still open at twice the header timeout…
        assert!(!closed_within(&mut idle, (2 * HEAD).saturating_sub(idle_from.elapsed())).await);
        assert!(idle_from.elapsed() >= 2 * HEAD);
        // …and closed after the idle timeout.
        assert!(closed_within(&mut idle, Duration::from_secs(5)).await);
        let took = idle_from.elapsed();
        assert!(took >= IDLE && took < Duration::from_secs(3), "{took:?}");
        // Each connection is its own: served meanwhile and afterwards.
        drop(served_once(addr).await);
        cancel.cancel();
        task.await.unwrap();
    }

    /// Sends one keep-alive request for `/healthz` and returns the open connection.
    async fn served_once(addr: SocketAddr) -> tokio::net::TcpStream {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = conn.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
        conn
    }

    /// Whether the server closed `conn` within `wait` (EOF or reset; data is a failure).
    async fn closed_within(conn: &mut tokio::net::TcpStream, wait: Duration) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 64];
        match tokio::time::timeout(wait, conn.read(&mut buf)).await {
            Err(_) => false,
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(n)) => panic!("unexpected bytes {:?}", &buf[..n]),
        }
    }
}
