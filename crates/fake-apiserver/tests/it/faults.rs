//! Fault injection of the fake API server (issue 17, row 3): outage, 5xx, 429 with
//! `Retry-After`, latency, dropped watches, and the request log with per-second rates.

use bytes::Bytes;
use fake_apiserver::faults::{CONNECT, Failure};
use fake_apiserver::{FakeApiServer, Options};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

async fn server() -> (FakeApiServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FakeApiServer::start(Options {
        tls: false,
        require_auth: false,
        kubeconfig_path: Some(dir.path().join("kubeconfig")),
        bookmark_interval: Duration::from_secs(60),
        ..Options::default()
    })
    .await
    .expect("start");
    (s, dir)
}

type Conn = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(s: &FakeApiServer) -> Result<Conn, String> {
    let tcp = tokio::net::TcpStream::connect(s.addr)
        .await
        .map_err(|e| e.to_string())?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(send)
}

/// A GET on a fresh connection: status, headers and the response (body not read).
async fn get(
    s: &FakeApiServer,
    path: &str,
) -> Result<http::Response<hyper::body::Incoming>, String> {
    let mut conn = connect(s).await?;
    let req = http::Request::get(path)
        .header("host", "localhost")
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    conn.send_request(req).await.map_err(|e| e.to_string())
}

async fn json_body(resp: http::Response<hyper::body::Incoming>) -> Value {
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

#[tokio::test]
async fn outage_resets_every_connection_and_counts_the_attempts() {
    let (s, _d) = server().await;
    let watch = get(&s, "/api/v1/namespaces/default/configmaps?watch=true")
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    let start = Instant::now();
    s.faults().set_outage(true);
    // The open watch ends with the server.
    let ended = tokio::time::timeout(Duration::from_secs(5), watch.into_body().collect()).await;
    assert!(ended.is_ok(), "the watch stayed open through the outage");
    for _ in 0..3 {
        let r = get(&s, "/api/v1/namespaces").await;
        assert!(r.is_err(), "a request succeeded during the outage: {r:?}");
    }
    let tried = s.faults().requests(start, Instant::now());
    assert_eq!(
        tried.iter().filter(|r| r.key == CONNECT).count(),
        3,
        "{tried:?}"
    );
    assert!(tried.iter().all(|r| r.code == 0), "{tried:?}");
    s.faults().set_outage(false);
    let back = get(&s, "/api/v1/namespaces")
        .await
        .expect("after the outage");
    assert_eq!(back.status(), 200);
}

/// A keep-alive connection opened before the outage serves nothing once it begins, even a
/// request read before the server got round to closing the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_open_before_the_outage_serves_nothing_during_it() {
    let (s, _d) = server().await;
    for _ in 0..50 {
        let mut conn = connect(&s).await.expect("connect");
        let ns = || {
            http::Request::get("/api/v1/namespaces")
                .header("host", "localhost")
                .body(Empty::new())
                .unwrap()
        };
        let before = conn.send_request(ns()).await.expect("before the outage");
        assert_eq!(before.status(), 200);
        json_body(before).await;
        let start = Instant::now();
        s.faults().set_outage(true);
        let during = conn.send_request(ns()).await;
        assert!(
            during.is_err(),
            "served during the outage: {:?}",
            during.map(|r| r.status())
        );
        let log = s.faults().requests(start, Instant::now());
        assert!(log.iter().all(|r| r.key == CONNECT), "{log:?}");
        s.faults().set_outage(false);
    }
}

#[tokio::test]
async fn every_request_is_answered_500_but_health_checks() {
    let (s, _d) = server().await;
    s.faults().set_failure(Some(Failure {
        code: 500,
        retry_after: None,
    }));
    let r = get(&s, "/api/v1/namespaces/default/pods").await.unwrap();
    assert_eq!(r.status(), 500);
    assert!(r.headers().get("retry-after").is_none());
    let st = json_body(r).await;
    assert_eq!(st["kind"], "Status");
    assert_eq!(st["reason"], "InternalError");
    assert_eq!(st["code"], 500);
    assert_eq!(get(&s, "/healthz").await.unwrap().status(), 200);
    s.faults().set_failure(None);
    assert_eq!(
        get(&s, "/api/v1/namespaces/default/pods")
            .await
            .unwrap()
            .status(),
        200
    );
    let log = s
        .faults()
        .requests(Instant::now() - Duration::from_secs(60), Instant::now());
    let codes: Vec<_> = log
        .iter()
        .filter(|r| r.key == "LIST pods")
        .map(|r| r.code)
        .collect();
    assert_eq!(codes, [500, 200]);
}

#[tokio::test]
async fn too_many_requests_carries_retry_after_as_the_real_server() {
    let (s, _d) = server().await;
    s.faults().set_failure(Some(Failure::too_many_requests(7)));
    let r = get(
        &s,
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    let st = json_body(r).await;
    assert_eq!(
        st,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Too many requests, please try again later.",
            "reason": "TooManyRequests", "code": 429, "details": {"retryAfterSeconds": 7}})
    );
}

#[tokio::test]
async fn latency_delays_each_request_and_shows_in_flight() {
    let (s, _d) = server().await;
    s.faults().set_latency(Duration::from_millis(400));
    s.faults().reset_max_in_flight();
    let start = std::time::Instant::now();
    let (a, b) = tokio::join!(
        get(&s, "/api/v1/namespaces"),
        get(&s, "/api/v1/namespaces/default/pods")
    );
    let took = start.elapsed();
    assert_eq!(a.unwrap().status(), 200);
    assert_eq!(b.unwrap().status(), 200);
    assert!(took >= Duration::from_millis(400), "{took:?}");
    assert!(
        took < Duration::from_millis(2000),
        "served one after the other: {took:?}"
    );
    assert_eq!(s.faults().max_in_flight(), 2);
    // Health checks are not delayed.
    let start = std::time::Instant::now();
    get(&s, "/healthz").await.unwrap();
    assert!(start.elapsed() < Duration::from_millis(400));
    s.faults().set_latency(Duration::ZERO);
}

#[tokio::test]
async fn dropped_watches_end_and_new_ones_stay_open() {
    let (s, _d) = server().await;
    let old = get(&s, "/api/v1/namespaces/default/configmaps?watch=true")
        .await
        .unwrap();
    s.faults().drop_watches();
    let ended = tokio::time::timeout(Duration::from_secs(5), old.into_body().collect()).await;
    assert!(ended.expect("the watch did not end").is_ok());
    let new = get(&s, "/api/v1/namespaces/default/configmaps?watch=true")
        .await
        .unwrap();
    let still = tokio::time::timeout(Duration::from_millis(500), new.into_body().collect()).await;
    assert!(still.is_err(), "a watch started after the drop ended too");
}

#[tokio::test]
async fn the_log_gives_per_second_rates_by_verb_and_resource() {
    let (s, _d) = server().await;
    let start = Instant::now();
    for _ in 0..4 {
        get(&s, "/api/v1/namespaces/default/pods").await.unwrap();
    }
    get(&s, "/api/v1/namespaces/default/pods/x").await.unwrap();
    get(&s, "/api/v1/namespaces/default/pods?watch=1")
        .await
        .unwrap();
    let end = Instant::now();
    let f = s.faults();
    assert_eq!(f.max_per_second(start, end, |_| true), 6);
    assert_eq!(f.max_per_second(start, end, |r| r.key == "LIST pods"), 4);
    assert_eq!(f.max_per_second(start, end, |r| r.key == "GET pods"), 1);
    assert_eq!(f.max_per_second(start, end, |r| r.verb() == "WATCH"), 1);
    assert_eq!(f.max_per_second(end, end, |_| true), 0);
}
