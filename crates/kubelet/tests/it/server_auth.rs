//! The kubelet HTTPS port end to end: TLS with a generated serving certificate, x509 client
//! certificates, bearer tokens through the fake API server's TokenReview, and authorization
//! through its SubjectAccessReview (answers cached); hostile path spellings against every port
//! over real sockets; stalled connections; certificate and client CA reload; client
//! certificates that expire while connected.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fake_apiserver::Options;
use fake_apiserver::reviews::{AccessRequest, TokenUser};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kubelet::server::setup::{self, AuthzMode, SecureConfig};
use kubelet::server::tls::TlsSettings;
use kubelet::server::{self, ServerState};
use kubelet::status::manager::StatusManager;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

fn ca(name: &str) -> Ca {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: rcgen::Issuer::new(p, key),
    }
}

/// A client certificate (CN = user, O = groups) signed by `ca`: (cert PEM, key PEM).
fn client_cert(ca: &Ca, user: &str, groups: &[&str]) -> (String, String) {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name.push(rcgen::DnType::CommonName, user);
    for g in groups {
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, *g);
    }
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn client_config(server_crt: &str, cert: Option<&(String, String)>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    // kubelet.crt holds the serving certificate and its self-signed CA.
    for c in CertificateDer::pem_slice_iter(server_crt.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = match cert {
        Some((c, k)) => b
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(c.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(k.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    };
    Arc::new(cfg)
}

async fn request(
    cfg: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = send
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&body).into_owned())
}

fn secure_config(dir: &std::path::Path, client_ca: &std::path::Path) -> SecureConfig {
    SecureConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        tls: TlsSettings {
            cert_dir: dir.join("pki"),
            hostname: "node-1".into(),
            client_ca_file: Some(client_ca.to_owned()),
            ..Default::default()
        },
        anonymous: false,
        webhook_authn: Some(Duration::from_secs(120)),
        authz: AuthzMode::Webhook {
            allowed_ttl: Duration::from_secs(300),
            denied_ttl: Duration::from_secs(30),
        },
        configz: None,
        system_logs: None,
        debugging_handlers: true,
    }
}

#[tokio::test]
async fn auth_matrix_against_token_and_subject_access_reviews() {
    let api = common::api_fixture(Options::default()).await;
    let reviews = api.server.reviews();
    for (token, user) in [("allowed-token", "bob"), ("denied-token", "eve")] {
        reviews.add_token(
            token,
            TokenUser {
                username: user.into(),
                uid: format!("uid-{user}"),
                groups: vec!["people".into()],
            },
        );
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::<AccessRequest>::new()));
    let seen2 = seen.clone();
    reviews.set_authorizer(Arc::new(move |r: &AccessRequest| {
        seen2.lock().unwrap().push(r.clone());
        let allowed = matches!(r.user.as_str(), "alice" | "bob")
            && r.resource == "nodes"
            && r.name == "node-1";
        (allowed, String::new())
    }));

    let dir = tempfile::tempdir().unwrap();
    let good_ca = ca("client-ca");
    let other_ca = ca("someone-else");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &good_ca.pem).unwrap();
    let cfg = secure_config(dir.path(), &ca_file);
    let (tls, auth) = setup::build(&cfg, Some(setup::kube_reviews(api.client.clone()))).unwrap();
    let listener = server::bind(cfg.addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_pods_tx, pods_rx) = watch::channel(kubelet::types::pods_snapshot([]));
    let mut state = ServerState::basic(pods_rx, StatusManager::new(), Vec::new());
    state.node_name = "node-1".into();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(server::serve_secure(
        listener,
        tls,
        Arc::new(auth),
        state,
        cancel.clone(),
    ));

    let crt = std::fs::read_to_string(dir.path().join("pki/kubelet.crt")).unwrap();
    let plain = client_config(&crt, None);
    let bad = client_config(&crt, Some(&client_cert(&other_ca, "mallory", &[])));
    let good = client_config(&crt, Some(&client_cert(&good_ca, "alice", &["admins"])));

    let (code, body) = request(plain.clone(), addr, "GET", "/pods", None).await;
    assert_eq!(
        (code, body.as_str()),
        (401, "Unauthorized"),
        "no credentials"
    );
    let (code, _) = request(bad, addr, "GET", "/pods", None).await;
    assert_eq!(code, 401, "client certificate from an unknown CA");
    let (code, body) = request(good, addr, "GET", "/pods", None).await;
    assert_eq!(code, 200, "good client certificate: {body}");
    assert!(body.contains("\"kind\":\"PodList\""), "{body}");
    let (code, body) = request(plain.clone(), addr, "GET", "/pods", Some("allowed-token")).await;
    assert_eq!(code, 200, "allowed token: {body}");
    let (code, body) = request(plain.clone(), addr, "GET", "/pods", Some("denied-token")).await;
    assert_eq!(code, 403, "denied token");
    assert_eq!(
        body,
        "Forbidden (user=eve, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
    );
    let (code, _) = request(plain.clone(), addr, "GET", "/pods", Some("unknown-token")).await;
    assert_eq!(code, 401, "unknown token");
    // Health needs an identity too on this port (upstream authenticates every path).
    let (code, body) = request(plain.clone(), addr, "GET", "/healthz", None).await;
    assert_eq!((code, body.as_str()), (401, "Unauthorized"));
    let (code, body) = request(
        plain.clone(),
        addr,
        "GET",
        "/healthz",
        Some("allowed-token"),
    )
    .await;
    assert_eq!((code, body.as_str()), (200, "ok"));

    // The SubjectAccessReviews carried upstream's attributes.
    {
        let seen = seen.lock().unwrap();
        let alice = seen.iter().find(|r| r.user == "alice").unwrap();
        assert_eq!(
            (
                alice.verb.as_str(),
                alice.resource.as_str(),
                alice.subresource.as_str()
            ),
            ("get", "nodes", "pods")
        );
        assert!(alice.groups.contains(&"admins".to_owned()));
        assert!(alice.groups.contains(&"system:authenticated".to_owned()));
        let eve: Vec<&str> = seen
            .iter()
            .filter(|r| r.user == "eve")
            .map(|r| r.subresource.as_str())
            .collect();
        assert_eq!(eve, vec!["pods", "proxy"]);
    }
    // Answers are cached: repeating the token requests asks the API server nothing new.
    let before = api.server.request_counts();
    request(plain.clone(), addr, "GET", "/pods", Some("allowed-token")).await;
    request(plain.clone(), addr, "GET", "/pods", Some("denied-token")).await;
    assert_eq!(api.server.request_counts(), before);
    assert_eq!(before.get("POST tokenreviews"), Some(&3));

    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn webhooks_without_an_api_client_are_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca("x").pem).unwrap();
    let mut cfg = secure_config(dir.path(), &ca_file);
    let err = setup::build(&cfg, None).err().unwrap().to_string();
    assert!(
        err.starts_with(
            "authentication.webhook.enabled: no client provided, cannot use webhook authentication"
        ),
        "{err}"
    );
    cfg.webhook_authn = None;
    let err = setup::build(&cfg, None).err().unwrap().to_string();
    assert!(
        err.starts_with("authorization.mode: Webhook: no client provided"),
        "{err}"
    );
    cfg.authz = AuthzMode::AlwaysAllow;
    assert!(setup::build(&cfg, None).is_ok());
}

// ---- hostile paths, stalled connections, reload, expiry -------------------------------------

use rkubelet_cri::fake::FakeRuntime;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Sends `head` verbatim (the request target is not normalised by any client library) and
/// returns the status code and body (the server closes: `Connection: close`).
async fn raw_on<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    method: &str,
    target: &str,
) -> (u16, String) {
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

async fn raw_plain(addr: SocketAddr, method: &str, target: &str) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    raw_on(tcp, method, target).await
}

async fn raw_tls(
    cfg: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    method: &str,
    target: &str,
) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    raw_on(tls, method, target).await
}

/// A state whose pod `ns/p` has the running container `c` in a fake runtime that records
/// every call: a routed `/run/ns/p/c` shows up as `ExecSync`.
fn exec_state() -> (
    ServerState,
    watch::Sender<kubelet::types::PodsSnapshot>,
    Arc<FakeRuntime>,
) {
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStatus, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let pod = Pod {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some("p".into()),
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let (tx, rx) = watch::channel(kubelet::types::pods_snapshot([pod.clone()]));
    let mut state = ServerState::basic(rx, StatusManager::new(), Vec::new());
    state.node_name = "node-1".into();
    state.status.set_pod_status(
        &pod,
        PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                container_id: Some("containerd://abc".into()),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        },
    );
    let rt = Arc::new(FakeRuntime::new());
    state.runtime = Some(rt.clone());
    state.configz = Some(Arc::new(serde_json::json!({"secret": "config"})));
    (state, tx, rt)
}

/// Starts a plain port.
async fn start_plain(
    endpoints: server::PlainPort,
    state: ServerState,
    cancel: &CancellationToken,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = server::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(server::serve(listener, endpoints, state, cancel.clone()));
    (addr, task)
}

/// Starts the HTTPS port with x509 client certificates from `ca_file` and AlwaysAllow.
async fn start_secure(
    cfg: &SecureConfig,
    state: ServerState,
    cancel: &CancellationToken,
) -> (
    SocketAddr,
    Arc<server::tls::ServingTls>,
    tokio::task::JoinHandle<()>,
) {
    let (tls, auth) = setup::build(cfg, None).unwrap();
    let listener = server::bind(cfg.addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(server::serve_secure(
        listener,
        tls.clone(),
        Arc::new(auth),
        state,
        cancel.clone(),
    ));
    (addr, tls, task)
}

fn allow_all_config(dir: &std::path::Path, ca_file: &std::path::Path) -> SecureConfig {
    SecureConfig {
        webhook_authn: None,
        authz: AuthzMode::AlwaysAllow,
        ..secure_config(dir, ca_file)
    }
}

/// Spellings that a raw-path prefix check and a segment-normalising router would disagree on.
const HOSTILE: &[&str] = &[
    "//run/ns/p/c?cmd=id",
    "///run/ns/p/c?cmd=id",
    "/./run/ns/p/c?cmd=id",
    "/pods/../run/ns/p/c?cmd=id",
    "/%2frun/ns/p/c?cmd=id",
    "/%2Frun/ns/p/c?cmd=id",
    "/run%2fns%2fp%2fc?cmd=id",
    "/r%75n/ns/p/c?cmd=id",
    "/run//ns/p/c?cmd=id",
    "/Run/ns/p/c?cmd=id",
    "//configz",
    "//containerLogs/ns/p/c",
    "//checkpoint/ns/p/c",
    "//exec/ns/p/c?command=id&output=1",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_spellings_never_execute_on_any_port() {
    let dir = tempfile::tempdir().unwrap();
    let good_ca = ca("client-ca");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &good_ca.pem).unwrap();
    let cancel = CancellationToken::new();

    let (state, _tx, rt) = exec_state();
    let (ro, ro_task) = start_plain(server::PlainPort::ReadOnly, state.clone(), &cancel).await;
    let (hz, hz_task) = start_plain(server::PlainPort::Healthz, state.clone(), &cancel).await;
    let mut off = state.clone();
    off.debugging_handlers = false;
    let cfg_off = allow_all_config(dir.path(), &ca_file);
    let (sec_off, _, off_task) = start_secure(&cfg_off, off, &cancel).await;
    let (sec_on, _, on_task) = start_secure(&cfg_off, state.clone(), &cancel).await;

    let crt = std::fs::read_to_string(dir.path().join("pki/kubelet.crt")).unwrap();
    let anonymous = client_config(&crt, None);
    let admin = client_config(&crt, Some(&client_cert(&good_ca, "admin", &["admins"])));

    for path in HOSTILE {
        for method in ["POST", "GET"] {
            for (name, addr) in [("read-only", ro), ("healthz", hz)] {
                let (code, body) = raw_plain(addr, method, path).await;
                assert!(
                    code == 404 || code == 400,
                    "{method} {path} on the {name} port: {code} {body}"
                );
                assert!(!body.contains("secret"), "{body}");
            }
            for addr in [sec_off, sec_on] {
                let (code, body) = raw_tls(anonymous.clone(), addr, method, path).await;
                assert_eq!(code, 401, "{method} {path} without credentials: {body}");
            }
            // Debugging handlers off: the gate holds whatever the spelling.
            let (code, body) = raw_tls(admin.clone(), sec_off, method, path).await;
            assert!(
                [400, 404, 405].contains(&code),
                "{method} {path}, debugging off: {code} {body}"
            );
            assert!(!body.contains("secret"), "{body}");
            // On: refused as malformed (or unknown for `/Run`), not routed.
            let got = raw_tls(admin.clone(), sec_on, method, path).await;
            let want = if path.starts_with("/Run") {
                (404, "404 page not found\n".to_owned())
            } else {
                (400, "invalid URL path\n".to_owned())
            };
            assert_eq!(got, want, "{method} {path}, debugging on");
        }
    }
    assert_eq!(rt.call_count("ExecSync"), 0, "{:?}", rt.calls());
    assert!(
        rt.calls().is_empty(),
        "nothing reached the runtime: {:?}",
        rt.calls()
    );

    // Control: the canonical spelling is executed on the secure port only.
    let (code, _) = raw_plain(ro, "POST", "/run/ns/p/c?cmd=id").await;
    assert_eq!(code, 404, "no /run on the read-only port");
    let (code, _) = raw_tls(admin.clone(), sec_off, "POST", "/run/ns/p/c?cmd=id").await;
    assert_eq!(code, 405, "debugging handlers off");
    assert_eq!(rt.call_count("ExecSync"), 0);
    raw_tls(admin.clone(), sec_on, "POST", "/run/ns/p/c?cmd=id").await;
    assert_eq!(rt.call_count("ExecSync"), 1, "{:?}", rt.calls());

    // What the read-only port serves.
    assert_eq!(raw_plain(ro, "GET", "/healthz").await, (200, "ok".into()));
    assert_eq!(raw_plain(ro, "GET", "/pods").await.0, 200);
    assert_eq!(raw_plain(ro, "POST", "/pods").await.0, 405);
    assert_eq!(raw_plain(ro, "GET", "/configz").await.0, 404);
    assert_eq!(raw_plain(hz, "GET", "/pods").await.0, 404);

    cancel.cancel();
    for t in [ro_task, hz_task, off_task, on_task] {
        t.await.unwrap();
    }
}

/// Sends a keep-alive `GET target` on `s` and reads one response (`Content-Length` body).
async fn keep_alive_get<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    target: &str,
) -> (u16, String) {
    let head = format!("GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("a response within 10 s")
            .unwrap();
        assert_ne!(n, 0, "closed before a whole response: {got:?}");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_owned)
            })
            .and_then(|v| v.trim().parse().ok())
            .expect("a Content-Length");
        if body.len() >= len {
            let code = head
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            return (code, body.to_owned());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_do_not_delay_other_clients() {
    const STALLED: usize = 1000;
    const HEAD: Duration = Duration::from_secs(2);
    const IDLE: Duration = Duration::from_secs(6);
    let dir = tempfile::tempdir().unwrap();
    let good_ca = ca("client-ca");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &good_ca.pem).unwrap();
    let cancel = CancellationToken::new();
    let (mut state, _tx, _rt) = exec_state();
    state.header_read_timeout = HEAD;
    state.idle_timeout = IDLE;
    let (ro, ro_task) = start_plain(server::PlainPort::ReadOnly, state.clone(), &cancel).await;
    let cfg = allow_all_config(dir.path(), &ca_file);
    let (sec, _, sec_task) = start_secure(&cfg, state, &cancel).await;
    let crt = std::fs::read_to_string(dir.path().join("pki/kubelet.crt")).unwrap();
    let admin = client_config(&crt, Some(&client_cert(&good_ca, "admin", &[])));

    // A keep-alive HTTPS connection (as the API server's client keeps one), idle afterwards.
    let tcp = tokio::net::TcpStream::connect(sec).await.unwrap();
    let mut keep_alive = tokio_rustls::TlsConnector::from(admin.clone())
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(
        keep_alive_get(&mut keep_alive, "/healthz").await,
        (200, "ok".into())
    );
    let idle_from = std::time::Instant::now();

    // Opened, nothing sent (on the HTTPS port: stuck before the TLS handshake).
    let stalled_from = std::time::Instant::now();
    let mut idle = Vec::with_capacity(2 * STALLED);
    for addr in [ro, sec] {
        for _ in 0..STALLED {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
    }
    // A half-sent request head too.
    let mut partial = tokio::net::TcpStream::connect(ro).await.unwrap();
    partial
        .write_all(b"GET /pods HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();

    let started = std::time::Instant::now();
    for _ in 0..5 {
        assert_eq!(raw_plain(ro, "GET", "/healthz").await, (200, "ok".into()));
        assert_eq!(raw_plain(ro, "GET", "/pods").await.0, 200);
        assert_eq!(
            raw_tls(admin.clone(), sec, "GET", "/healthz").await,
            (200, "ok".into())
        );
        assert_eq!(raw_tls(admin.clone(), sec, "GET", "/pods").await.0, 200);
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "20 requests took {took:?} beside {} stalled connections",
        idle.len()
    );

    // The plain stalled connections and the half-sent head are closed after the header-read
    // timeout (the HTTPS ones by the TLS handshake timeout, not waited for here).
    for conn in idle[..STALLED].iter_mut().chain([&mut partial]) {
        let mut buf = [0u8; 16];
        let r = tokio::time::timeout(HEAD + Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("a stalled connection is closed");
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    }
    assert!(stalled_from.elapsed() >= HEAD);
    // The idle keep-alive connection outlived the header-read timeout and serves again.
    if let Some(rest) = (HEAD + Duration::from_millis(500)).checked_sub(idle_from.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    assert!(idle_from.elapsed() < IDLE, "the test itself took too long");
    assert_eq!(keep_alive_get(&mut keep_alive, "/pods").await.0, 200);

    // A request head larger than 1 MiB is refused (431) rather than buffered.
    let big = "a".repeat(1100 * 1024);
    let mut tcp = tokio::net::TcpStream::connect(ro).await.unwrap();
    let head = format!("GET /pods HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
    let _ = tcp.write_all(head.as_bytes()).await;
    let mut buf = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    drop(idle);
    drop(partial);
    cancel.cancel();
    ro_task.await.unwrap();
    sec_task.await.unwrap();
}

/// A serving pair for `localhost` signed by `ca` (CN = `cn`): (cert PEM, key PEM).
fn serving_cert(ca: &Ca, cn: &str) -> (String, String) {
    let mut p = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// The subject CN of the certificate the server presents to a new connection.
async fn presented_cn(cfg: Arc<rustls::ClientConfig>, addr: SocketAddr) -> String {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let der = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let (_, parsed) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
    parsed
        .subject()
        .iter_common_name()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

/// Writes `data` to `path` through a rename (as a rotation would).
fn replace(path: &std::path::Path, data: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !check().await {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_certificate_and_client_ca_reload_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = ca("serving-ca");
    let (c1, k1) = serving_cert(&server_ca, "serving-one");
    let crt_file = dir.path().join("tls.crt");
    let key_file = dir.path().join("tls.key");
    std::fs::write(&crt_file, &c1).unwrap();
    std::fs::write(&key_file, &k1).unwrap();
    let old_ca = ca("old-client-ca");
    let new_ca = ca("new-client-ca");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &old_ca.pem).unwrap();
    let mut cfg = allow_all_config(dir.path(), &ca_file);
    cfg.tls.cert_file = Some(crt_file.clone());
    cfg.tls.key_file = Some(key_file.clone());
    let cancel = CancellationToken::new();
    let (state, _tx, _rt) = exec_state();
    let (tls, auth) = setup::build(&cfg, None).unwrap();
    tls.set_reload_period(Duration::from_millis(50));
    let listener = server::bind(cfg.addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(server::serve_secure(
        listener,
        tls,
        Arc::new(auth),
        state,
        cancel.clone(),
    ));

    let old_client = client_cert(&old_ca, "old", &[]);
    let new_client = client_cert(&new_ca, "new", &[]);
    let with = |c: &(String, String)| client_config(&server_ca.pem, Some(c));
    assert_eq!(presented_cn(with(&old_client), addr).await, "serving-one");
    assert_eq!(
        raw_tls(with(&old_client), addr, "GET", "/pods").await.0,
        200
    );
    assert_eq!(
        raw_tls(with(&new_client), addr, "GET", "/pods").await.0,
        401
    );

    // A rotated serving pair is presented to new connections.
    let (c2, k2) = serving_cert(&server_ca, "serving-two");
    replace(&key_file, &k2);
    replace(&crt_file, &c2);
    eventually("the new serving certificate is presented", || async {
        presented_cn(with(&old_client), addr).await == "serving-two"
    })
    .await;

    // A new client CA is accepted (and the old one no longer) without a restart.
    replace(&ca_file, &new_ca.pem);
    eventually("the new client CA is used", || async {
        raw_tls(with(&new_client), addr, "GET", "/pods").await.0 == 200
    })
    .await;
    assert_eq!(
        raw_tls(with(&old_client), addr, "GET", "/pods").await.0,
        401
    );

    // A broken file is refused: the previous generation stays in use.
    replace(&ca_file, "not a certificate\n");
    replace(
        &crt_file,
        "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n",
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        raw_tls(with(&new_client), addr, "GET", "/pods").await.0,
        200
    );
    assert_eq!(presented_cn(with(&new_client), addr).await, "serving-two");

    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_expiring_mid_connection_stops_working() {
    let dir = tempfile::tempdir().unwrap();
    let client_ca = ca("client-ca");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &client_ca.pem).unwrap();
    let cfg = allow_all_config(dir.path(), &ca_file);
    let cancel = CancellationToken::new();
    let (state, _tx, _rt) = exec_state();
    let (addr, _, task) = start_secure(&cfg, state, &cancel).await;
    let crt = std::fs::read_to_string(dir.path().join("pki/kubelet.crt")).unwrap();

    // Valid for the next 2 seconds only (certificate times have 1 s resolution).
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "short-lived");
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let now = rcgen::date_time_ymd(1970, 1, 1) + since_epoch;
    p.not_before = now - Duration::from_secs(60);
    p.not_after = now + Duration::from_secs(2);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &client_ca.issuer).unwrap();
    let cfg = client_config(&crt, Some(&(cert.pem(), key.serialize_pem())));

    // One keep-alive connection for both requests.
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let get = || {
        http::Request::builder()
            .uri("/pods")
            .header("host", "localhost")
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    let first = send.send_request(get()).await.unwrap();
    assert_eq!(first.status(), 200);
    first.into_body().collect().await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let second = send.send_request(get()).await.unwrap();
    assert_eq!(
        second.status(),
        401,
        "the expired certificate is refused on the open connection"
    );
    cancel.cancel();
    task.await.unwrap();
}
