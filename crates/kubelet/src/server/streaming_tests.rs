use super::*;
use crate::container::cache::PodCache;
use crate::container::{ContainerState, ContainerStatus, SandboxStatus};
use crate::server::query::query_pairs;
use crate::server::{Endpoints, ServerState};
use crate::status::manager::StatusManager;
use http::Method;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rkubelet_cri::RuntimeService;
use rkubelet_cri::fake::{FakeRuntime, StreamRequest};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

fn q(s: &str) -> Vec<(String, String)> {
    query_pairs(Some(s))
}

#[test]
fn remote_command_options_as_upstream() {
    // Every `command` value, in order, percent-decoded.
    let query = q("command=sh&command=-c&command=echo%20a%26b&output=1&error=1");
    assert_eq!(parse_command(&query), vec!["sh", "-c", "echo a&b"]);
    assert_eq!(
        parse_options(&query).unwrap(),
        StreamOptions {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false
        }
    );
    // Only `1` turns a stream on; the first value counts (Go's FormValue).
    assert_eq!(
        parse_options(&q("input=true&output=0&error=1")).unwrap(),
        StreamOptions {
            stdin: false,
            stdout: false,
            stderr: true,
            tty: false
        }
    );
    assert_eq!(
        parse_options(&q("input=1&input=0")).unwrap(),
        StreamOptions {
            stdin: true,
            ..Default::default()
        }
    );
    // A TTY has no separate stderr.
    assert_eq!(
        parse_options(&q("input=1&output=1&error=1&tty=1")).unwrap(),
        StreamOptions {
            stdin: true,
            stdout: true,
            stderr: false,
            tty: true
        }
    );
    for none in ["", "command=ls", "tty=1&error=1", "stdin=1&stdout=1"] {
        let e = parse_options(&q(none)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }
}

#[test]
fn port_forward_ports_only_for_websockets() {
    assert_eq!(parse_ports(&q(""), false).unwrap(), Vec::<i32>::new());
    assert_eq!(
        parse_ports(&q("port=80,8080&port=9000"), true).unwrap(),
        vec![80, 8080, 9000]
    );
    let err = |s: &str| parse_ports(&q(s), true).unwrap_err().to_string();
    assert_eq!(err(""), "query parameter \"port\" is required");
    assert_eq!(err("port="), "query parameter \"port\" cannot be empty");
    assert!(
        err("port=80,x").starts_with("unable to parse \"80,x\" as a port"),
        "{}",
        err("port=80,x")
    );
    assert!(err("port=70000").starts_with("unable to parse \"70000\" as a port"));
    assert_eq!(err("port=0"), "port \"0\" must be > 0");
}

#[test]
fn upgrade_detection() {
    let h = |pairs: &[(&str, &str)]| {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    };
    assert!(is_upgrade_request(&h(&[("connection", "Upgrade")])));
    assert!(is_upgrade_request(&h(&[(
        "connection",
        "keep-alive, upgrade"
    )])));
    assert!(is_upgrade_request(&h(&[
        ("connection", "keep-alive"),
        ("connection", "Upgrade")
    ])));
    assert!(!is_upgrade_request(&h(&[("upgrade", "websocket")])));
    assert!(!is_upgrade_request(&h(&[("connection", "close")])));
    assert!(is_websocket_request(&h(&[
        ("connection", "Upgrade"),
        ("upgrade", "WebSocket")
    ])));
    assert!(!is_websocket_request(&h(&[
        ("connection", "Upgrade"),
        ("upgrade", "SPDY/3.1")
    ])));
}

/// A pod `default/web` (uid `u1`, containers `main` and `tty` with a TTY) running on a fake
/// runtime whose stream URLs point at `stream_base`, with the pod cache filled as the PLEG
/// would.
struct Fixture {
    state: ServerState,
    rt: FakeRuntime,
    _pods: watch::Sender<crate::types::PodsSnapshot>,
}

async fn fixture(stream_base: &str) -> Fixture {
    let rt = FakeRuntime::with_images(&["busybox"]);
    rt.set_stream_base(stream_base);
    let sandbox = rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: "web".into(),
                    uid: "u1".into(),
                    namespace: "default".into(),
                    attempt: 0,
                }),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let mut containers = Vec::new();
    for name in ["main", "tty", "stopped"] {
        let id = rt
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: sandbox.clone(),
                config: Some(api::ContainerConfig {
                    metadata: Some(api::ContainerMetadata {
                        name: name.into(),
                        attempt: 0,
                    }),
                    image: Some(api::ImageSpec {
                        image: "busybox".into(),
                        ..Default::default()
                    }),
                    labels: HashMap::from([(
                        "io.kubernetes.container.name".to_owned(),
                        name.to_owned(),
                    )]),
                    ..Default::default()
                }),
                sandbox_config: None,
            })
            .await
            .unwrap()
            .container_id;
        let running = name != "stopped";
        if running {
            rt.start_container(api::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap();
        }
        containers.push(ContainerStatus {
            id,
            name: name.into(),
            sandbox_id: sandbox.clone(),
            state: if running {
                ContainerState::Running
            } else {
                ContainerState::Created
            },
            created_at: None,
            started_at: None,
            finished_at: None,
            exit_code: 0,
            image: "busybox".into(),
            image_ref: String::new(),
            image_id: String::new(),
            hash: 0,
            restart_count: 0,
            reason: String::new(),
            message: String::new(),
            termination_message_path: None,
            termination_grace_period: None,
            resources: None,
            user: None,
        });
    }
    let cache = PodCache::new();
    cache.set(
        "u1",
        Ok(crate::container::PodStatus {
            uid: "u1".into(),
            name: "web".into(),
            namespace: "default".into(),
            ips: Vec::new(),
            sandbox_statuses: vec![SandboxStatus {
                id: sandbox,
                ready: true,
                created_at: None,
                attempt: 0,
                ips: Vec::new(),
                primary_ip: None,
                host_network: false,
                labels: Default::default(),
                annotations: Default::default(),
            }],
            container_statuses: containers,
        }),
        tokio::time::Instant::now(),
    );
    let container = |name: &str, tty: bool| Container {
        name: name.into(),
        tty: Some(tty),
        ..Default::default()
    };
    let pod = Pod {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some("web".into()),
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![
                container("main", false),
                container("tty", true),
                container("stopped", false),
            ],
            ..Default::default()
        }),
        status: None,
    };
    let (tx, rx) = watch::channel(crate::types::pods_snapshot([pod]));
    let mut state = ServerState::basic(rx, StatusManager::new(), Vec::new());
    state.runtime = Some(Arc::new(rt.clone()));
    state.pod_cache = Some(cache);
    Fixture {
        state,
        rt,
        _pods: tx,
    }
}

fn upgrade_req(method: Method, uri: &str) -> Request<()> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .body(())
        .unwrap()
}

async fn url_of(f: &Fixture, method: Method, uri: &str) -> Result<String, StreamError> {
    let req = upgrade_req(method, uri);
    let crate::server::path::Route::Stream(kind, c) = crate::server::path::parse(req.uri().path())
    else {
        panic!("{uri} is not a streaming path");
    };
    let target = StreamTarget {
        kind,
        namespace: &c.namespace,
        pod: &c.pod,
        uid: c.uid.as_deref(),
        container: (kind != StreamKind::PortForward).then_some(c.container.as_str()),
    };
    stream_url(&f.state, &target, &req).await
}

#[tokio::test]
async fn runtime_requests_and_lookup_errors_as_upstream() {
    let f = fixture("http://127.0.0.1:1").await;
    // Exec: the command in order, tty drops stderr, the running container's ID.
    let url = url_of(
        &f,
        Method::POST,
        "/exec/default/web/main?command=sh&command=-c&command=exit%203&input=1&output=1&error=1&tty=1",
    )
    .await
    .unwrap();
    assert!(url.starts_with("http://127.0.0.1:1/exec/"), "{url}");
    let main_id =
        f.rt.containers()
            .into_iter()
            .find(|c| c.metadata.as_ref().unwrap().name == "main")
            .unwrap()
            .id;
    let Some(StreamRequest::Exec(exec)) = f.rt.stream_requests().pop() else {
        panic!("no exec request");
    };
    assert_eq!(exec.container_id, main_id);
    assert_eq!(exec.cmd, vec!["sh", "-c", "exit 3"]);
    assert!(exec.stdin && exec.stdout && exec.tty && !exec.stderr);
    // Upstream's exec ignores the UID segment (the pod is found by full name).
    assert!(
        url_of(&f, Method::GET, "/exec/default/web/other-uid/main?output=1")
            .await
            .is_ok()
    );

    // Attach: the TTY comes from the container spec, not the query.
    url_of(&f, Method::POST, "/attach/default/web/tty?output=1&input=1")
        .await
        .unwrap();
    let Some(StreamRequest::Attach(attach)) = f.rt.stream_requests().pop() else {
        panic!("no attach request");
    };
    assert!(attach.tty && attach.stdin && attach.stdout && !attach.stderr);
    let e = url_of(
        &f,
        Method::POST,
        "/attach/default/web/other-uid/main?output=1",
    )
    .await
    .unwrap_err();
    assert_eq!(
        (e.status(), e.to_string()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "pod web_default not found".into()
        )
    );

    // Port forward: the pod's sandbox; a websocket names its ports in the query.
    url_of(&f, Method::POST, "/portForward/default/web/u1")
        .await
        .unwrap();
    let Some(StreamRequest::PortForward(pf)) = f.rt.stream_requests().pop() else {
        panic!("no port-forward request");
    };
    assert_eq!(pf.pod_sandbox_id, f.rt.sandboxes()[0].id);
    assert!(pf.port.is_empty());
    let e = url_of(&f, Method::GET, "/portForward/default/web/other-uid")
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.to_string()),
        (StatusCode::NOT_FOUND, "pod not found".into())
    );

    // Lookup errors.
    let cases: &[(&str, StatusCode, &str)] = &[
        (
            "/exec/default/nope/main?output=1",
            StatusCode::NOT_FOUND,
            "pod does not exist",
        ),
        (
            "/exec/default/web/main?command=ls",
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr",
        ),
        (
            "/exec/default/web/stopped?output=1",
            StatusCode::INTERNAL_SERVER_ERROR,
            "container not found (\"stopped\")",
        ),
        (
            "/exec/default/web/ghost?output=1",
            StatusCode::INTERNAL_SERVER_ERROR,
            "container not found (\"ghost\")",
        ),
        (
            "/attach/default/web/ghost?output=1",
            StatusCode::INTERNAL_SERVER_ERROR,
            "container ghost not found in pod web_default",
        ),
        (
            "/portForward/default/nope",
            StatusCode::NOT_FOUND,
            "pod does not exist",
        ),
    ];
    for (uri, code, msg) in cases {
        let e = url_of(&f, Method::POST, uri).await.unwrap_err();
        assert_eq!((e.status(), e.to_string().as_str()), (*code, *msg), "{uri}");
    }

    // A runtime NotFound is a 404 (upstream streaming.WriteError).
    f.rt.fail_next(
        "Exec",
        CriError::NotFound {
            method: "Exec",
            message: "gone".into(),
        },
    );
    let e = url_of(&f, Method::POST, "/exec/default/web/main?output=1")
        .await
        .unwrap_err();
    assert_eq!(e.status(), StatusCode::NOT_FOUND);
}

/// A stand-in for containerd's stream server: websocket upgrades get 403 (as containerd 1.6
/// answers `v5.channel.k8s.io`), other upgrades get 101 with the request's path and
/// `X-Stream-Protocol-Version` echoed back as headers, then every byte echoed; plain
/// requests get 200.
async fn stream_server() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    |mut req: Request<hyper::body::Incoming>| async move {
                        let mut resp = Response::new(Full::new(Bytes::new()));
                        if is_websocket_request(req.headers()) {
                            *resp.status_mut() = StatusCode::FORBIDDEN;
                            *resp.body_mut() = Full::new(Bytes::from_static(
                                b"requested protocol(s) are not supported",
                            ));
                            return Ok::<_, std::convert::Infallible>(resp);
                        }
                        if !is_upgrade_request(req.headers()) {
                            return Ok(resp);
                        }
                        *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                        let h = resp.headers_mut();
                        h.insert("connection", "Upgrade".parse().unwrap());
                        h.insert("upgrade", "SPDY/3.1".parse().unwrap());
                        h.insert("x-seen-path", req.uri().to_string().parse().unwrap());
                        let names: Vec<&str> = req.headers().keys().map(|k| k.as_str()).collect();
                        h.insert("x-seen-headers", names.join(",").parse().unwrap());
                        if let Some(v) = req.headers().get("x-stream-protocol-version") {
                            h.insert("x-stream-protocol-version", v.clone());
                        }
                        let on = hyper::upgrade::on(&mut req);
                        tokio::spawn(async move {
                            let io = on.await.unwrap();
                            let (mut r, mut w) = tokio::io::split(TokioIo::new(io));
                            let _ = tokio::io::copy(&mut r, &mut w).await;
                        });
                        Ok(resp)
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    (format!("http://{addr}"), task)
}

/// Sends a raw request and reads the response head (and the body when `Content-Length`
/// says how long it is).
async fn raw(stream: &mut tokio::net::TcpStream, request: &str) -> (u16, String, String) {
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).await.unwrap(),
            1,
            "response ended early"
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await.unwrap();
    (code, head, String::from_utf8(body).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_splices_the_runtime_stream_both_ways() {
    let (base, server_task) = stream_server().await;
    let f = fixture(&base).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cancel = CancellationToken::new();
    let serve = tokio::spawn(crate::server::serve_plain(
        listener,
        Endpoints::Secure,
        f.state.clone(),
        cancel.clone(),
    ));

    // SPDY-style upgrade: 101 with the runtime's headers, then bytes both ways.
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (code, head, _) = raw(
        &mut c,
        "POST /exec/default/web/main?command=echo&command=hi&output=1 HTTP/1.1\r\nHost: k\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nAuthorization: Bearer secret-token\r\nProxy-Authorization: Basic c2VjcmV0\r\nX-Other: kept\r\n\r\n",
    )
    .await;
    assert_eq!(code, 101, "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("x-seen-path: /exec/"), "{head}");
    // The client's credentials for the kubelet are not handed to the runtime.
    let seen = lower
        .lines()
        .find_map(|l| l.strip_prefix("x-seen-headers: "))
        .unwrap_or_default();
    assert!(
        seen.contains("x-other") && seen.contains("upgrade"),
        "{head}"
    );
    assert!(!seen.contains("authorization"), "{head}");
    assert!(
        lower.contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{head}"
    );
    for msg in [&b"hello runtime"[..], &[0u8, 1, 2, 255][..]] {
        c.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut back))
            .await
            .expect("echo in time")
            .unwrap();
        assert_eq!(back, msg);
    }
    // The client closing ends the runtime side too: the splice task finishes.
    drop(c);
    tokio::time::timeout(Duration::from_secs(5), async {
        // The runtime connection's task ends at the upgrade, the splice with the client.
        while !f.state.streams.tracker.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the splice ends when the client goes");

    // A websocket upgrade the runtime refuses: its status and body pass through.
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (code, _, body) = raw(
        &mut c,
        "GET /exec/default/web/main?command=ls&output=1 HTTP/1.1\r\nHost: k\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n",
    )
    .await;
    assert_eq!(
        (code, body.as_str()),
        (403, "requested protocol(s) are not supported")
    );

    // Without upgrade headers: upstream's proxy error.
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (code, _, body) = raw(
        &mut c,
        "POST /exec/default/web/main?command=ls&output=1 HTTP/1.1\r\nHost: k\r\nContent-Length: 0\r\n\r\n",
    )
    .await;
    assert_eq!((code, body.as_str()), (500, "Upgrade request required\n"));
    // Other methods are not allowed; the read-only port has no streaming at all.
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (code, _, _) = raw(
        &mut c,
        "PUT /exec/default/web/main?output=1 HTTP/1.1\r\nHost: k\r\nContent-Length: 0\r\n\r\n",
    )
    .await;
    assert_eq!(code, 405);

    // Shutdown ends a live splice.
    let mut live = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (code, _, _) = raw(
        &mut live,
        "POST /portForward/default/web HTTP/1.1\r\nHost: k\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n",
    )
    .await;
    assert_eq!(code, 101);
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), serve)
        .await
        .expect("server and splices end at shutdown")
        .unwrap();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), live.read_to_end(&mut rest))
        .await
        .expect("the proxied connection is closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
    server_task.abort();
}

#[tokio::test]
async fn read_only_port_has_no_streaming() {
    let f = fixture("http://127.0.0.1:1").await;
    let req = upgrade_req(Method::POST, "/exec/default/web/main?output=1");
    let resp = crate::server::routes::route(&f.state, Endpoints::ReadOnly, &req).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert!(f.rt.stream_requests().is_empty());
}
