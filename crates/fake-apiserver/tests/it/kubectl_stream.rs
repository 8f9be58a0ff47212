//! Black-box tests: the real `/usr/bin/kubectl` (v1.32) against an in-process fake API server
//! (watches, tables, logs, outages, the binary).

use crate::common;

use common::{KUBECTL, kubectl, kubectl_in, ok, ok_stdin, start};
use fake_apiserver::Options;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_streams_changes() {
    let (s, _dir) = start(Options::default()).await;
    s.create(
        "configmaps",
        "default",
        json!({"metadata": {"name": "before"}}),
    )
    .expect("create");
    let mut child = Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(&s.kubeconfig_path)
        .args([
            "get",
            "configmaps",
            "-w",
            "-o",
            "name",
            "--request-timeout=15s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn kubectl get -w");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let read = async {
        while let Ok(Some(l)) = lines.next_line().await {
            seen.push(l.clone());
            if l == "configmap/before" {
                s.create(
                    "configmaps",
                    "default",
                    json!({"metadata": {"name": "after"}}),
                )
                .expect("create after");
            }
            if l == "configmap/after" {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(15), read)
        .await
        .expect("watch produced both objects in time");
    assert_eq!(seen, vec!["configmap/before", "configmap/after"]);
    child.kill().await.expect("kill kubectl");

    // Raw watch with initial events, the initial-events-end bookmark and a server timeout.
    let raw = ok(&s, &["get", "--raw",
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"]).await;
    let events: Vec<Value> = raw
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("event json"))
        .collect();
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[1]["type"], "ADDED");
    assert_eq!(events[2]["type"], "BOOKMARK");
    assert_eq!(
        events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    // A too-old resourceVersion yields an Expired (410) ERROR event.
    s.compact();
    let old = ok(
        &s,
        &[
            "get",
            "--raw",
            "/api/v1/configmaps?watch=true&resourceVersion=1&timeoutSeconds=1",
        ],
    )
    .await;
    let ev: Value = serde_json::from_str(old.stdout.trim()).expect("error event");
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_writes_kubeconfig_and_stops_on_sigterm() {
    assert!(
        Path::new(KUBECTL).exists(),
        "{KUBECTL} is required but missing"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-apiserver"))
        .args(["--port", "0", "--write-kubeconfig"])
        .arg(&kc)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn fake-apiserver");
    let wait_for_file = async {
        while !kc.exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait_for_file)
        .await
        .expect("kubeconfig written");
    let out = Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["get", "ns", "kube-node-lease", "-o", "name"])
        .output()
        .await
        .expect("kubectl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "namespace/kube-node-lease",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = common::terminate(&mut child).await;
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_pause_resume_and_injected_errors() {
    let (mut s, _dir) = start(Options::default()).await;
    s.create(
        "configmaps",
        "default",
        json!({"metadata": {"name": "kept"}}),
    )
    .expect("create");
    s.fail_requests(Some(503));
    let failing = kubectl(&s, &["get", "cm", "kept", "-o", "name"]).await;
    assert!(!failing.ok);
    s.fail_requests(None);
    s.pause().await;
    let down = kubectl(
        &s,
        &["get", "cm", "kept", "-o", "name", "--request-timeout=2s"],
    )
    .await;
    assert!(!down.ok);
    assert!(down.stderr.contains("refused"), "{}", down.stderr);
    s.resume().await.expect("resume");
    let back = ok(&s, &["get", "cm", "kept", "-o", "name"]).await;
    assert_eq!(back.stdout.trim(), "configmap/kept");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_pods_patch_nodes_and_watch_tables() {
    let (s, _dir) = start(Options::default()).await;
    ok_stdin(
        &s,
        r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}"#,
        &["apply", "-f", "-"],
    )
    .await;
    ok(&s, &["patch", "node", "n1", "--type=json", "-p", r#"[{"op":"add","path":"/metadata/labels","value":{"node-role.kubernetes.io/worker":""}}]"#]).await;
    ok(&s, &["patch", "node", "n1", "--type=merge", "--subresource=status", "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True"}],"nodeInfo":{"kubeletVersion":"v1.33.0"}}}"#]).await;
    let nodes = ok(&s, &["get", "nodes"]).await.stdout;
    let row: Vec<&str> = nodes
        .lines()
        .nth(1)
        .expect("node row")
        .split_whitespace()
        .collect();
    assert_eq!(row, ["n1", "Ready", "worker", row[3], "v1.33.0"], "{nodes}");

    let pod = |image: &str, name: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web"}},"spec":{{"nodeName":"n1","containers":[{{"name":"{name}","image":"{image}"}}]}}}}"#
        )
    };
    assert!(
        ok_stdin(&s, &pod("nginx:1", "c"), &["apply", "-f", "-"])
            .await
            .stdout
            .contains("created")
    );
    assert!(
        ok_stdin(&s, &pod("nginx:2", "c"), &["apply", "-f", "-"])
            .await
            .stdout
            .contains("configured")
    );
    let stored = s.get("pods", "default", "web").expect("pod");
    assert_eq!(stored["spec"]["containers"][0]["image"], "nginx:2");
    assert_eq!(stored["metadata"]["generation"], 2);
    // Renaming a container is a forbidden pod update.
    let forbidden = kubectl_in(&s, Some(&pod("nginx:2", "renamed")), &["apply", "-f", "-"]).await;
    assert!(!forbidden.ok);
    assert!(
        forbidden.stderr.contains("Forbidden"),
        "{}",
        forbidden.stderr
    );

    // `get -w` with server-side tables streams the pod turning Terminating.
    let mut child = Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(&s.kubeconfig_path)
        .args(["get", "pods", "-w", "--request-timeout=15s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn kubectl get -w");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let read = async {
        let mut seen = Vec::new();
        let mut deleted = false;
        while let Ok(Some(l)) = lines.next_line().await {
            if l.starts_with("web") && l.contains("Pending") && !deleted {
                deleted = true;
                ok(&s, &["delete", "pod", "web", "--wait=false"]).await;
            }
            let done = l.contains("Terminating");
            seen.push(l);
            if done {
                break;
            }
        }
        seen
    };
    let seen = tokio::time::timeout(Duration::from_secs(15), read)
        .await
        .expect("watch shows the pod terminating");
    assert!(seen[0].starts_with("NAME"), "{seen:?}");
    assert!(
        seen.last()
            .is_some_and(|l| l.starts_with("web") && l.contains("0/1")),
        "{seen:?}"
    );
    child.kill().await.expect("kill");
    s.shutdown().await;
}

/// A stand-in kubelet: HTTPS, answers every request with the request URI.
async fn fake_kubelet() -> u16 {
    use http_body_util::Full;
    let key = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("cert");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![key.cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.signing_key.serialize_der().into()),
        )
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        let body = format!("log line from {}\n", req.uri());
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            bytes::Bytes::from(body),
                        )))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_proxied_to_the_node_kubelet() {
    let (s, _dir) = start(Options::default()).await;
    let port = fake_kubelet().await;
    s.create("nodes", "", json!({"metadata": {"name": "n1"}}))
        .expect("node");
    ok(
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
    s.create(
        "pods",
        "default",
        json!({"metadata": {"name": "web"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}),
    )
    .expect("pod");
    let logs = ok(&s, &["logs", "web", "--tail=5", "--timestamps"]).await;
    assert_eq!(
        logs.stdout.trim(),
        "log line from /containerLogs/default/web/c?timestamps=true&tailLines=5"
    );
    let bad = kubectl(&s, &["logs", "web", "-c", "nope"]).await;
    assert!(
        bad.stderr.contains("is not valid for pod web"),
        "{}",
        bad.stderr
    );
    s.create(
        "pods",
        "default",
        json!({"metadata": {"name": "unbound"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .expect("pod");
    let unbound = kubectl(&s, &["logs", "unbound"]).await;
    assert!(
        unbound.stderr.contains("does not have a host assigned"),
        "{}",
        unbound.stderr
    );
    s.shutdown().await;
}
