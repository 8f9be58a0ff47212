//! Raw HTTP tests of the API semantics a kubelet relies on (plain HTTP, in-process server).

use crate::common;

use bytes::Bytes;
use common::{Conn, send_json};
use fake_apiserver::{FakeApiServer, Options};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::time::Duration;

async fn server(require_auth: bool) -> (FakeApiServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FakeApiServer::start(Options {
        tls: false,
        require_auth,
        kubeconfig_path: Some(dir.path().join("kubeconfig")),
        bookmark_interval: Duration::from_millis(100),
        ..Options::default()
    })
    .await
    .expect("start");
    (s, dir)
}

async fn connect(s: &FakeApiServer) -> Conn {
    let tcp = tokio::net::TcpStream::connect(s.addr)
        .await
        .expect("connect");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    send
}

async fn call(
    s: &FakeApiServer,
    method: &str,
    path: &str,
    ct: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (u16, Value) {
    let mut conn = connect(s).await;
    send_json(&mut conn, method, path, ct, token, body).await
}

const SMP: &str = "application/strategic-merge-patch+json";
const JSON: &str = "application/json";

#[tokio::test]
async fn status_patch_delete_preconditions_and_paging() {
    let (s, _d) = server(false).await;
    s.create("nodes", "", json!({"metadata": {"name": "n1"}}))
        .expect("node");
    let pod = s
        .create(
            "pods",
            "default",
            json!({"metadata": {"name": "p"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}),
        )
        .expect("pod");
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    let path = "/api/v1/namespaces/default/pods/p/status";
    let patch = json!({"metadata": {"uid": uid}, "status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.5",
        "podIPs": [{"ip": "10.0.0.5"}]}});
    let (code, out) = call(&s, "PATCH", path, SMP, Some(patch), None).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["status"]["podIPs"], json!([{"ip": "10.0.0.5"}]));
    let wrong = json!({"metadata": {"uid": "other"}, "status": {"phase": "Failed"}});
    let (code, out) = call(&s, "PATCH", path, SMP, Some(wrong), None).await;
    assert_eq!(
        (code, out["reason"].as_str()),
        (409, Some("Conflict")),
        "{out}"
    );
    let (code, _) = call(&s, "PATCH", path, JSON, Some(json!({})), None).await;
    assert_eq!(code, 415);

    // Paging through the HTTP layer.
    for n in ["a", "b", "c"] {
        s.create("configmaps", "default", json!({"metadata": {"name": n}}))
            .expect("cm");
    }
    let (code, page) = call(
        &s,
        "GET",
        "/api/v1/namespaces/default/configmaps?limit=2",
        JSON,
        None,
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(page["kind"], "ConfigMapList");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2));
    let cont = page["metadata"]["continue"].as_str().expect("continue");
    let (_, rest) = call(
        &s,
        "GET",
        &format!("/api/v1/namespaces/default/configmaps?limit=2&continue={cont}"),
        JSON,
        None,
        None,
    )
    .await;
    assert_eq!(rest["items"][0]["metadata"]["name"], "c");

    // Kubelet-style final delete: grace 0 with a uid precondition.
    let pod_path = "/api/v1/namespaces/default/pods/p";
    let bad = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "other"}});
    let (code, _) = call(&s, "DELETE", pod_path, JSON, Some(bad), None).await;
    assert_eq!(code, 409);
    let (code, out) = call(
        &s,
        "DELETE",
        pod_path,
        JSON,
        Some(json!({"gracePeriodSeconds": 30})),
        None,
    )
    .await;
    assert_eq!(
        (code, &out["metadata"]["deletionGracePeriodSeconds"]),
        (200, &json!(30))
    );
    let good = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}});
    let (code, _) = call(&s, "DELETE", pod_path, JSON, Some(good), None).await;
    assert_eq!(code, 200);
    let (code, out) = call(&s, "GET", pod_path, JSON, None, None).await;
    assert_eq!((code, out["kind"].as_str()), (404, Some("Status")));
    let counts = s.request_counts();
    assert_eq!(counts.get("PATCH pods/status"), Some(&3));
    assert_eq!(counts.get("DELETE pods"), Some(&3));
    s.shutdown().await;
}

#[tokio::test]
async fn watch_bookmarks_over_http() {
    let (s, _d) = server(false).await;
    let rv = s.resource_version();
    let mut conn = connect(&s).await;
    let req = http::Request::get(format!(
        "/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&fieldSelector=spec.nodeName%3Dn1&timeoutSeconds=5"
    ))
    .header("host", "localhost")
    .body(Full::new(Bytes::new()))
    .expect("request");
    let resp = conn.send_request(req).await.expect("response");
    assert_eq!(resp.status().as_u16(), 200);
    let mut body = resp.into_body();
    s.create(
        "pods",
        "default",
        json!({"metadata": {"name": "other"},
        "spec": {"nodeName": "n2", "containers": [{"name": "c", "image": "i"}]}}),
    )
    .expect("pod");
    s.create(
        "pods",
        "default",
        json!({"metadata": {"name": "mine"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}),
    )
    .expect("pod");
    let mut events = Vec::new();
    let mut buf = String::new();
    let read = async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                buf.push_str(&String::from_utf8_lossy(&data));
            }
            while let Some(idx) = buf.find('\n') {
                let line: String = buf.drain(..=idx).collect();
                let ev: Value = serde_json::from_str(line.trim()).expect("event");
                events.push(ev);
            }
            if events.iter().any(|e| e["type"] == "BOOKMARK") {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("events in time");
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[0]["object"]["metadata"]["name"], "mine");
    let bm = events
        .iter()
        .find(|e| e["type"] == "BOOKMARK")
        .expect("bookmark");
    let bm_rv: u64 = bm["object"]["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .parse()
        .expect("n");
    assert!(
        bm_rv >= s.resource_version(),
        "bookmark rv {bm_rv} covers both creates"
    );
    assert_eq!(bm["object"]["kind"], "Pod");
    s.shutdown().await;
}

#[tokio::test]
async fn bearer_token_auth() {
    let (s, _d) = server(true).await;
    let (code, out) = call(&s, "GET", "/api/v1/namespaces", JSON, None, None).await;
    assert_eq!((code, out["reason"].as_str()), (401, Some("Unauthorized")));
    let (code, _) = call(&s, "GET", "/api/v1/namespaces", JSON, None, Some("bogus")).await;
    assert_eq!(code, 401);
    let token = s.token.clone();
    let (code, out) = call(&s, "GET", "/api/v1/namespaces", JSON, None, Some(&token)).await;
    assert_eq!((code, out["kind"].as_str()), (200, Some("NamespaceList")));
    let (code, _) = call(&s, "GET", "/healthz", JSON, None, None).await;
    assert_eq!(code, 200);
    s.shutdown().await;
}

#[tokio::test]
async fn events_v1_share_core_event_storage() {
    let (s, _d) = server(false).await;
    let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "p.1", "namespace": "default"},
        "eventTime": "2024-01-01T00:00:00.000000Z", "reason": "Pulled", "type": "Normal",
        "action": "Pull", "note": "pulled", "reportingController": "kubelet", "reportingInstance": "n1",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}});
    let base = "/apis/events.k8s.io/v1/namespaces/default/events";
    let (code, created) = call(&s, "POST", base, JSON, Some(v1), None).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created["note"], "pulled");
    let (code, core) = call(
        &s,
        "GET",
        "/api/v1/namespaces/default/events/p.1",
        JSON,
        None,
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        (
            core["message"].as_str(),
            core["involvedObject"]["name"].as_str()
        ),
        (Some("pulled"), Some("p"))
    );
    let patch = json!({"series": {"count": 2, "lastObservedTime": "2024-01-01T00:00:05.000000Z"}});
    let (code, patched) = call(
        &s,
        "PATCH",
        &format!("{base}/p.1"),
        "application/merge-patch+json",
        Some(patch),
        None,
    )
    .await;
    assert_eq!(
        (code, &patched["series"]["count"]),
        (200, &json!(2)),
        "{patched}"
    );
    let (_, list) = call(&s, "GET", base, JSON, None, None).await;
    assert_eq!(list["apiVersion"], "events.k8s.io/v1");
    assert_eq!(list["items"][0]["regarding"]["name"], "p");
    assert_eq!(s.list("events", Some("default")).len(), 1);
    s.shutdown().await;
}
