//! Probe and hook actions (upstream `pkg/probe/{exec,http,tcp,grpc}`): runs one exec (CRI
//! ExecSync), httpGet, tcpSocket or grpc check against a container with a timeout. Receives the
//! action spec, the container (for named ports) and the pod IP; emits a [`ProbeOutcome`]
//! (result + output text as upstream reports it). No state.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use k8s_openapi::api::core::v1::{
    Container, ExecAction, GRPCAction, HTTPGetAction, LifecycleHandler, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rkubelet_cri::RuntimeService;
use rkubelet_cri::api::ExecSyncRequest;
use tokio::net::TcpStream;

/// `User-Agent` of HTTP probes (upstream `kube-probe/<major>.<minor>`).
pub const USER_AGENT: &str = "kube-probe/1.33";
/// Upstream reads at most this much of an HTTP probe's (and HTTP hook's) response body
/// (`maxRespBodyLength`).
pub const MAX_BODY: usize = 10 * 1024;
/// Upstream keeps at most this much of an exec probe's output, stdout and stderr together
/// (`maxReadLength` of `pkg/probe/exec`): the first 10 KiB. The CRI answer may carry up to
/// 16 MiB; nothing past this bound is kept, logged or put into an event.
pub const MAX_EXEC_OUTPUT: usize = 10 * 1024;
/// Upstream follows at most this many same-host redirects.
const MAX_REDIRECTS: usize = 10;

/// Upstream `probe.Result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Success with a remark (e.g. a redirect to another host).
    Warning,
    Failure,
    /// The probe could not run (runtime error).
    Unknown,
}

/// A probe's result and output text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOutcome {
    pub outcome: Outcome,
    pub output: String,
}

impl ProbeOutcome {
    fn new(outcome: Outcome, output: impl Into<String>) -> Self {
        Self {
            outcome,
            output: output.into(),
        }
    }
}

/// Where and how to run an action.
pub struct Target<'a> {
    pub runtime: &'a dyn RuntimeService,
    pub container: &'a Container,
    pub container_id: &'a str,
    /// The pod's primary IP (httpGet/tcp/grpc default host).
    pub pod_ip: &'a str,
    pub timeout: Duration,
}

/// The one action a probe or lifecycle hook sets.
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    Exec(&'a ExecAction),
    HttpGet(&'a HTTPGetAction),
    TcpSocket(&'a TCPSocketAction),
    Grpc(&'a GRPCAction),
    /// Lifecycle hooks only: sleep this many seconds.
    Sleep(i64),
    None,
}

impl<'a> Action<'a> {
    pub fn of_probe(p: &'a Probe) -> Self {
        if let Some(e) = &p.exec {
            Action::Exec(e)
        } else if let Some(h) = &p.http_get {
            Action::HttpGet(h)
        } else if let Some(t) = &p.tcp_socket {
            Action::TcpSocket(t)
        } else if let Some(g) = &p.grpc {
            Action::Grpc(g)
        } else {
            Action::None
        }
    }

    pub fn of_hook(h: &'a LifecycleHandler) -> Self {
        if let Some(e) = &h.exec {
            Action::Exec(e)
        } else if let Some(g) = &h.http_get {
            Action::HttpGet(g)
        } else if let Some(s) = &h.sleep {
            Action::Sleep(s.seconds)
        } else if let Some(t) = &h.tcp_socket {
            Action::TcpSocket(t)
        } else {
            Action::None
        }
    }
}

/// Runs a probe's action.
pub async fn run_probe(action: Action<'_>, t: &Target<'_>) -> ProbeOutcome {
    match action {
        Action::Exec(exec) => run_exec(exec, t).await,
        Action::HttpGet(h) => run_http_get(h, t).await,
        Action::TcpSocket(tcp) => run_tcp(tcp, t).await,
        Action::Grpc(g) => run_grpc(g, t).await,
        Action::Sleep(_) | Action::None => ProbeOutcome::new(
            Outcome::Unknown,
            format!("missing probe handler for {}", t.container.name),
        ),
    }
}

/// exec: CRI ExecSync with the probe timeout; exit 0 is success, output is stdout+stderr.
pub async fn run_exec(exec: &ExecAction, t: &Target<'_>) -> ProbeOutcome {
    let cmd = exec.command.clone().unwrap_or_default();
    let timeout = i64::try_from(t.timeout.as_secs()).unwrap_or(i64::MAX);
    let call = t.runtime.exec_sync(ExecSyncRequest {
        container_id: t.container_id.to_owned(),
        cmd: cmd.clone(),
        timeout,
    });
    // The runtime enforces the timeout; a little slack guards against one that does not.
    let result = tokio::time::timeout(t.timeout + Duration::from_secs(1), call).await;
    match result {
        Ok(Ok(resp)) => {
            let output = exec_output(&resp.stdout, &resp.stderr);
            if resp.exit_code == 0 {
                ProbeOutcome::new(Outcome::Success, output)
            } else {
                ProbeOutcome::new(Outcome::Failure, output)
            }
        }
        Ok(Err(e)) if e.is_deadline_exceeded() => ProbeOutcome::new(
            Outcome::Failure,
            format!("command {:?} timed out", cmd.join(" ")),
        ),
        Err(_) => ProbeOutcome::new(
            Outcome::Failure,
            format!("command {:?} timed out", cmd.join(" ")),
        ),
        Ok(Err(e)) => ProbeOutcome::new(Outcome::Unknown, e.to_string()),
    }
}

/// The text of an exec's output as upstream keeps it: stdout then stderr, the first
/// [`MAX_EXEC_OUTPUT`] bytes of them (invalid UTF-8 replaced, the cut made at a character
/// boundary so the text never exceeds the bound).
pub fn exec_output(stdout: &[u8], stderr: &[u8]) -> String {
    let from_stdout = stdout.len().min(MAX_EXEC_OUTPUT);
    let from_stderr = stderr.len().min(MAX_EXEC_OUTPUT - from_stdout);
    let mut out = Vec::with_capacity(from_stdout + from_stderr);
    out.extend_from_slice(&stdout[..from_stdout]);
    out.extend_from_slice(&stderr[..from_stderr]);
    lossy_bounded(&out, MAX_EXEC_OUTPUT)
}

/// `bytes` as text, at most `max` bytes of it: invalid UTF-8 is replaced (each replacement
/// takes 3 bytes, so the text may grow) and the text cut at a character boundary.
fn lossy_bounded(bytes: &[u8], max: usize) -> String {
    let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned();
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// Resolves a port by number or by the container's port name (upstream `findPortByName`).
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("invalid port number: {n}")),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<i32>() {
                return resolve_port(&IntOrString::Int(n), container);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("couldn't find port: {name} in {}", container.name))
        }
    }
}

fn host_or_ip<'a>(host: Option<&'a str>, pod_ip: &'a str) -> &'a str {
    match host {
        Some(h) if !h.is_empty() => h,
        _ => pod_ip,
    }
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// httpGet: GET with upstream headers; 200–399 succeed (a redirect to another host is a
/// warning-success), anything else fails with `HTTP probe failed with statuscode: <n>`.
pub async fn run_http_get(h: &HTTPGetAction, t: &Target<'_>) -> ProbeOutcome {
    let port = match resolve_port(&h.port, t.container) {
        Ok(p) => p,
        Err(e) => return ProbeOutcome::new(Outcome::Unknown, e),
    };
    let tls = h
        .scheme
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"));
    let scheme = if tls { "https" } else { "http" };
    let host = host_or_ip(h.host.as_deref(), t.pod_ip).to_owned();
    let mut path = h.path.clone().unwrap_or_default();
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let headers: Vec<(String, String)> = h
        .http_headers
        .iter()
        .flatten()
        .map(|hh| (hh.name.clone(), hh.value.clone()))
        .collect();
    match tokio::time::timeout(
        t.timeout,
        http_get_following(&host, port, path, &headers, tls),
    )
    .await
    {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => ProbeOutcome::new(Outcome::Failure, e),
        Err(_) => ProbeOutcome::new(
            Outcome::Failure,
            format!(
                "Get \"{scheme}://{}{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                join_host_port(&host, port),
                h.path.as_deref().unwrap_or("/")
            ),
        ),
    }
}

async fn http_get_following(
    host: &str,
    port: u16,
    mut path: String,
    headers: &[(String, String)],
    tls: bool,
) -> Result<ProbeOutcome, String> {
    let addr = join_host_port(host, port);
    for _ in 0..=MAX_REDIRECTS {
        let (status, location, body) = http_get_once(host, &addr, &path, headers, tls).await?;
        if (300..400).contains(&status) {
            match location.as_deref().and_then(|l| same_host_path(l, &addr)) {
                Some(next) => {
                    path = next;
                    continue;
                }
                None => {
                    return Ok(ProbeOutcome::new(
                        Outcome::Warning,
                        format!("Probe terminated redirects, Response body: {body}"),
                    ));
                }
            }
        }
        if (200..400).contains(&status) {
            return Ok(ProbeOutcome::new(Outcome::Success, body));
        }
        return Ok(ProbeOutcome::new(
            Outcome::Failure,
            format!("HTTP probe failed with statuscode: {status}"),
        ));
    }
    Ok(ProbeOutcome::new(
        Outcome::Warning,
        "Probe terminated redirects, Response body: ",
    ))
}

/// A redirect target on the same host: its path; `None` for another host.
fn same_host_path(location: &str, addr: &str) -> Option<String> {
    if location.starts_with('/') {
        return Some(location.to_owned());
    }
    let rest = location
        .strip_prefix("http://")
        .or_else(|| location.strip_prefix("https://"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    (authority == addr).then(|| format!("/{path}"))
}

async fn http_get_once(
    host: &str,
    addr: &str,
    path: &str,
    headers: &[(String, String)],
    tls: bool,
) -> Result<(u16, Option<String>, String), String> {
    let uri = format!("{}://{addr}{path}", if tls { "https" } else { "http" });
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("Get \"{uri}\": dial tcp {addr}: {e}"))?;
    if !tls {
        return request_over(stream, &uri, addr, path, headers).await;
    }
    let name = crate::prober::tls::server_name(host)?;
    let stream = crate::prober::tls::insecure_connector()?
        .connect(name, stream)
        .await
        .map_err(|e| format!("Get \"{uri}\": TLS handshake: {e}"))?;
    request_over(stream, &uri, addr, path, headers).await
}

async fn request_over<S>(
    stream: S,
    uri: &str,
    addr: &str,
    path: &str,
    headers: &[(String, String)],
) -> Result<(u16, Option<String>, String), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io)
        .await
        .map_err(|e| format!("Get \"{uri}\": {e}"))?;
    let conn_task = tokio::spawn(conn);
    let mut req = http::Request::get(path);
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    if !has("host") {
        req = req.header(http::header::HOST, addr);
    }
    if !has("user-agent") {
        req = req.header(http::header::USER_AGENT, USER_AGENT);
    }
    if !has("accept") {
        req = req.header(http::header::ACCEPT, "*/*");
    }
    for (n, v) in headers {
        req = req.header(n.as_str(), v.as_str());
    }
    req = req.header(http::header::CONNECTION, "close");
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("Get \"{uri}\": {e}"))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("Get \"{uri}\": {e}"))?;
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = Vec::new();
    let mut incoming = resp.into_body();
    while body.len() < MAX_BODY {
        match incoming.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = MAX_BODY - body.len();
                    body.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            _ => break,
        }
    }
    conn_task.abort();
    Ok((status, location, lossy_bounded(&body, MAX_BODY)))
}

/// tcpSocket: a connection that opens within the timeout succeeds.
pub async fn run_tcp(tcp: &TCPSocketAction, t: &Target<'_>) -> ProbeOutcome {
    let port = match resolve_port(&tcp.port, t.container) {
        Ok(p) => p,
        Err(e) => return ProbeOutcome::new(Outcome::Unknown, e),
    };
    let addr = join_host_port(host_or_ip(tcp.host.as_deref(), t.pod_ip), port);
    match tokio::time::timeout(t.timeout, TcpStream::connect(&addr)).await {
        Ok(Ok(_)) => ProbeOutcome::new(Outcome::Success, ""),
        Ok(Err(e)) => ProbeOutcome::new(Outcome::Failure, format!("dial tcp {addr}: {e}")),
        Err(_) => ProbeOutcome::new(Outcome::Failure, format!("dial tcp {addr}: i/o timeout")),
    }
}

/// grpc: `grpc.health.v1.Health/Check` with the optional service; SERVING succeeds.
pub async fn run_grpc(g: &GRPCAction, t: &Target<'_>) -> ProbeOutcome {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let Ok(port) = u16::try_from(g.port) else {
        return ProbeOutcome::new(Outcome::Unknown, format!("invalid port number: {}", g.port));
    };
    let addr = join_host_port(t.pod_ip, port);
    let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{addr}")) {
        Ok(e) => e.connect_timeout(t.timeout).timeout(t.timeout),
        Err(e) => return ProbeOutcome::new(Outcome::Unknown, e.to_string()),
    };
    let connect = tokio::time::timeout(t.timeout, endpoint.connect()).await;
    let channel = match connect {
        Ok(Ok(c)) => c,
        _ => {
            return ProbeOutcome::new(
                Outcome::Failure,
                format!(
                    "timeout: failed to connect service {addr:?} within {}s: context deadline exceeded",
                    t.timeout.as_secs()
                ),
            );
        }
    };
    let mut client = HealthClient::new(channel);
    let req = HealthCheckRequest {
        service: g.service.clone().unwrap_or_default(),
    };
    match tokio::time::timeout(t.timeout, client.check(req)).await {
        Ok(Ok(resp)) => {
            let status = resp.into_inner().status;
            if status == ServingStatus::Serving as i32 {
                ProbeOutcome::new(Outcome::Success, "")
            } else {
                let name = ServingStatus::try_from(status)
                    .map(|s| s.as_str_name())
                    .unwrap_or("UNKNOWN");
                ProbeOutcome::new(
                    Outcome::Failure,
                    format!("service unhealthy (responded with {name:?})"),
                )
            }
        }
        Ok(Err(status)) => ProbeOutcome::new(
            Outcome::Failure,
            format!(
                "error: health rpc probe failed: {}: {}",
                status.code(),
                status.message()
            ),
        ),
        Err(_) => ProbeOutcome::new(
            Outcome::Failure,
            format!(
                "timeout: health rpc did not complete within {}s",
                t.timeout.as_secs()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn container() -> Container {
        serde_json::from_value(
            json!({"name": "c", "ports": [{"name": "web", "containerPort": 8080}]}),
        )
        .expect("container")
    }

    #[test]
    fn ports_by_number_and_name() {
        let c = container();
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("web".into()), &c),
            Ok(8080)
        );
        assert_eq!(resolve_port(&IntOrString::String("81".into()), &c), Ok(81));
        assert!(
            resolve_port(&IntOrString::String("nope".into()), &c)
                .expect_err("unknown port name")
                .contains("couldn't find port: nope")
        );
        assert!(resolve_port(&IntOrString::Int(0), &c).is_err());
    }

    #[test]
    fn redirect_host_matching() {
        assert_eq!(same_host_path("/x", "1.2.3.4:80"), Some("/x".into()));
        assert_eq!(
            same_host_path("http://1.2.3.4:80/y", "1.2.3.4:80"),
            Some("/y".into())
        );
        assert_eq!(same_host_path("http://other:80/y", "1.2.3.4:80"), None);
    }

    async fn serve(responses: Vec<&'static str>) -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            for r in responses {
                let (mut s, _) = l.accept().await.expect("accept");
                let mut buf = [0u8; 2048];
                let n = s.read(&mut buf).await.expect("read");
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                assert!(req.contains("user-agent: kube-probe/1.33"), "{req}");
                s.write_all(r.as_bytes()).await.expect("write");
            }
        });
        port
    }

    #[tokio::test]
    async fn http_get_outcomes() {
        let rt = rkubelet_cri::fake::FakeRuntime::new();
        let c = container();
        let t = Target {
            runtime: &rt,
            container: &c,
            container_id: "x",
            pod_ip: "127.0.0.1",
            timeout: Duration::from_secs(2),
        };
        let get = |port: u16| HTTPGetAction {
            port: IntOrString::Int(i32::from(port)),
            path: Some("/healthz".into()),
            ..Default::default()
        };
        let ok = serve(vec!["HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]).await;
        assert_eq!(
            run_http_get(&get(ok), &t).await,
            ProbeOutcome::new(Outcome::Success, "ok")
        );
        let bad = serve(vec!["HTTP/1.1 500 Oops\r\ncontent-length: 0\r\n\r\n"]).await;
        assert_eq!(
            run_http_get(&get(bad), &t).await,
            ProbeOutcome::new(Outcome::Failure, "HTTP probe failed with statuscode: 500")
        );
        let redirect = serve(vec![
            "HTTP/1.1 302 Found\r\nlocation: /other\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
        ])
        .await;
        assert_eq!(
            run_http_get(&get(redirect), &t).await.outcome,
            Outcome::Success
        );
        let away = serve(vec![
            "HTTP/1.1 302 Found\r\nlocation: http://elsewhere:1/\r\ncontent-length: 0\r\n\r\n",
        ])
        .await;
        assert_eq!(run_http_get(&get(away), &t).await.outcome, Outcome::Warning);
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        assert_eq!(
            run_http_get(&get(closed), &t).await.outcome,
            Outcome::Failure
        );
        let tcp = TCPSocketAction {
            port: IntOrString::Int(i32::from(closed)),
            host: None,
        };
        assert_eq!(run_tcp(&tcp, &t).await.outcome, Outcome::Failure);
    }

    #[tokio::test]
    async fn https_get_skips_certificate_verification() {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let ck =
            rcgen::generate_simple_self_signed(vec!["elsewhere.example".to_owned()]).expect("cert");
        let cert = CertificateDer::from(ck.cert.der().to_vec());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        tokio::spawn(async move {
            let (s, _) = l.accept().await.expect("accept");
            let mut s = acceptor.accept(s).await.expect("tls accept");
            let mut buf = [0u8; 2048];
            let n = s.read(&mut buf).await.expect("read");
            assert!(String::from_utf8_lossy(&buf[..n]).contains("user-agent: kube-probe/1.33"));
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecure")
                .await
                .expect("write");
            let _ = s.shutdown().await;
        });
        let rt = rkubelet_cri::fake::FakeRuntime::new();
        let c = container();
        let t = Target {
            runtime: &rt,
            container: &c,
            container_id: "x",
            pod_ip: "127.0.0.1",
            timeout: Duration::from_secs(5),
        };
        let get = HTTPGetAction {
            port: IntOrString::Int(i32::from(port)),
            scheme: Some("HTTPS".into()),
            ..Default::default()
        };
        assert_eq!(
            run_http_get(&get, &t).await,
            ProbeOutcome::new(Outcome::Success, "secure")
        );
    }
}
