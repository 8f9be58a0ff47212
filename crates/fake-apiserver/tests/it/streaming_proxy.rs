//! The `pods/{name}/exec|attach|portforward` proxy against a stand-in kubelet: the kubelet
//! path and query the API server builds, the upgrade splice, error pass-through, and the
//! API server's own errors (container choice, unbound pod, missing upgrade) — by raw HTTP and
//! through the real kubectl.

use crate::common;

use common::{kubectl, start};
use fake_apiserver::{FakeApiServer, Options};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Seen = Arc<Mutex<Vec<String>>>;

/// A stand-in kubelet over HTTPS: websocket upgrades get 403 (as containerd 1.6 refuses
/// `v5.channel.k8s.io`), other upgrades 101 and an echo of every byte; every request's URI and
/// whether it carried an `Authorization` header are recorded.
async fn fake_kubelet(seen: Seen) -> u16 {
    use http_body_util::Full;
    let key = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("cert");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![key.cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.signing_key.serialize_der().into()),
        )
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(
                    move |mut req: http::Request<hyper::body::Incoming>| {
                        let seen = seen.clone();
                        async move {
                            let auth = req.headers().contains_key(http::header::AUTHORIZATION);
                            seen.lock().expect("seen").push(format!(
                                "{} {} auth={auth}",
                                req.method(),
                                req.uri()
                            ));
                            let upgrade = req
                                .headers()
                                .get(http::header::UPGRADE)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_ascii_lowercase();
                            let mut resp = http::Response::new(Full::new(bytes::Bytes::new()));
                            if upgrade == "websocket" {
                                *resp.status_mut() = http::StatusCode::FORBIDDEN;
                                *resp.body_mut() =
                                    Full::new(bytes::Bytes::from_static(b"no websockets here"));
                            } else if !upgrade.is_empty() {
                                *resp.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
                                resp.headers_mut()
                                    .insert("connection", "Upgrade".parse().expect("value"));
                                resp.headers_mut()
                                    .insert("upgrade", "SPDY/3.1".parse().expect("value"));
                                let on = hyper::upgrade::on(&mut req);
                                tokio::spawn(async move {
                                    let Ok(io) = on.await else { return };
                                    let io = hyper_util::rt::TokioIo::new(io);
                                    let (mut r, mut w) = tokio::io::split(io);
                                    let _ = tokio::io::copy(&mut r, &mut w).await;
                                });
                            }
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    port
}

/// Sends `request` and reads the response head plus a `Content-Length` body.
async fn raw(s: &FakeApiServer, request: &str) -> (TcpStream, u16, String, String) {
    let mut c = TcpStream::connect(s.addr).await.expect("connect");
    c.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            c.read(&mut b).await.expect("read"),
            1,
            "response ended early"
        );
        head.push(b[0]);
    }
    let head = String::from_utf8(head).expect("utf8");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .and_then(|v| v.trim().parse::<usize>().ok())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).await.expect("body");
    (c, code, head, String::from_utf8_lossy(&body).into_owned())
}

fn upgrade(method: &str, path: &str, extra: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n{extra}\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_attach_and_port_forward_are_proxied_to_the_kubelet() {
    let (s, _dir) = start(Options {
        tls: false,
        require_auth: false,
        ..Options::default()
    })
    .await;
    let seen: Seen = Arc::default();
    let port = fake_kubelet(seen.clone()).await;
    s.create("nodes", "", json!({"metadata": {"name": "n1"}}))
        .expect("node");
    let patch = kubectl(
        &s,
        &[
            "patch",
            "node",
            "n1",
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}})
            .to_string(),
        ],
    )
    .await;
    assert!(patch.ok, "{}", patch.stderr);
    for (name, containers, node) in [
        ("web", vec!["c"], Some("n1")),
        ("two", vec!["a", "b"], Some("n1")),
        ("unbound", vec!["c"], None),
    ] {
        let containers: Vec<_> = containers
            .iter()
            .map(|c| json!({"name": c, "image": "i"}))
            .collect();
        let mut spec = json!({"containers": containers});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        s.create(
            "pods",
            "default",
            json!({"metadata": {"name": name}, "spec": spec}),
        )
        .expect("pod");
    }
    let last_seen = || {
        seen.lock()
            .expect("seen")
            .last()
            .cloned()
            .unwrap_or_default()
    };

    // exec: the kubelet path with the only container, every command in order; the caller's
    // credentials are not forwarded; bytes flow both ways after the 101.
    let (mut c, code, head, _) = raw(
        &s,
        &upgrade(
            "POST",
            "/api/v1/namespaces/default/pods/web/exec?command=sh&command=-c&command=echo+a%20b&stdin=true&stdout=true&tty=false",
            "Authorization: Bearer secret\r\n",
        ),
    )
    .await;
    assert_eq!(code, 101, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("upgrade: spdy/3.1"),
        "{head}"
    );
    assert_eq!(
        last_seen(),
        "POST /exec/default/web/c?command=sh&command=-c&command=echo%20a%20b&input=1&output=1 auth=false"
    );
    c.write_all(b"spdy bytes").await.expect("write");
    let mut back = [0u8; 10];
    tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut back))
        .await
        .expect("echo in time")
        .expect("echo");
    assert_eq!(&back, b"spdy bytes");
    drop(c);

    // attach and portforward paths.
    let (_c, code, _, _) = raw(
        &s,
        &upgrade(
            "GET",
            "/api/v1/namespaces/default/pods/two/attach?container=b&stdout=1&stderr=true",
            "",
        ),
    )
    .await;
    assert_eq!(code, 101);
    assert_eq!(
        last_seen(),
        "GET /attach/default/two/b?error=1&output=1 auth=false"
    );
    let (_c, code, _, _) = raw(
        &s,
        &upgrade(
            "POST",
            "/api/v1/namespaces/default/pods/web/portforward",
            "",
        ),
    )
    .await;
    assert_eq!(code, 101);
    assert_eq!(last_seen(), "POST /portForward/default/web auth=false");

    // The kubelet's refusal passes through (kubectl then falls back to SPDY).
    let (_c, code, _, body) = raw(
        &s,
        "GET /api/v1/namespaces/default/pods/web/exec?command=ls&stdout=true HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n",
    )
    .await;
    assert_eq!((code, body.as_str()), (403, "no websockets here"));

    // The API server's own errors, as Status objects.
    let status_of = |body: &str| -> (String, i64) {
        let v: serde_json::Value = serde_json::from_str(body).expect("status json");
        (
            v["message"].as_str().unwrap_or_default().to_owned(),
            v["code"].as_i64().unwrap_or(0),
        )
    };
    let cases = [
        (
            "/api/v1/namespaces/default/pods/two/exec?command=ls&stdout=true",
            "a container name must be specified for pod two, choose one of: [a b]",
            400,
        ),
        (
            "/api/v1/namespaces/default/pods/web/exec?container=x&command=ls&stdout=true",
            "container x is not valid for pod web",
            400,
        ),
        (
            "/api/v1/namespaces/default/pods/unbound/exec?command=ls&stdout=true",
            "pod unbound does not have a host assigned",
            400,
        ),
        (
            "/api/v1/namespaces/default/pods/nope/portforward",
            "pods \"nope\" not found",
            404,
        ),
    ];
    for (path, msg, want) in cases {
        let (_c, code, _, body) = raw(&s, &upgrade("POST", path, "")).await;
        assert_eq!(code, want, "{path}: {body}");
        assert_eq!(
            status_of(&body),
            (msg.to_owned(), i64::from(want)),
            "{path}"
        );
    }
    let (_c, code, _, body) = raw(
        &s,
        "POST /api/v1/namespaces/default/pods/web/exec?command=ls&stdout=true HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    )
    .await;
    assert_eq!(
        (code, status_of(&body)),
        (400, ("Upgrade request required".to_owned(), 400))
    );

    // kubectl shows the API server's message (after its websocket attempt and SPDY fallback).
    let out = kubectl(&s, &["exec", "web", "-c", "nope", "--", "true"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("container nope is not valid for pod web"),
        "{}",
        out.stderr
    );
    let counts = s.request_counts();
    assert!(
        counts.get("GET pods/exec").copied().unwrap_or(0) >= 1,
        "{counts:?}"
    );
    assert!(
        counts.get("POST pods/exec").copied().unwrap_or(0) >= 1,
        "{counts:?}"
    );
    s.shutdown().await;
}
