use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::*;
use crate::types::PodExt;

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: nginx\n";
const WAIT: Duration = Duration::from_secs(3);
const PERIOD: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Served {
    status: u16,
    body: String,
    seen_headers: Vec<(String, String)>,
}

/// A tiny HTTP server on 127.0.0.1:0 serving whatever `Served` currently holds.
async fn serve(state: Arc<Mutex<Served>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<Incoming>| {
                    let state = state.clone();
                    async move {
                        let mut s = state.lock().unwrap();
                        for (k, v) in req.headers() {
                            s.seen_headers
                                .push((k.to_string(), v.to_str().unwrap().to_string()));
                        }
                        let mut resp = Response::new(Full::new(Bytes::from(s.body.clone())));
                        *resp.status_mut() = StatusCode::from_u16(s.status).unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

struct Running {
    rx: mpsc::Receiver<PodUpdate>,
    last_error: watch::Receiver<Option<String>>,
    cancel: CancellationToken,
}

fn start(addr: SocketAddr, headers: &BTreeMap<String, Vec<String>>) -> Running {
    let url = format!("http://{addr}/pods");
    let source = HttpSource::new(&url, headers, "node1", PERIOD).unwrap();
    let last_error = source.last_error();
    let (tx, rx) = mpsc::channel(16);
    let cancel = CancellationToken::new();
    tokio::spawn(source.run(tx, cancel.clone()));
    Running {
        rx,
        last_error,
        cancel,
    }
}

impl Running {
    async fn next(&mut self) -> PodUpdate {
        let u = tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("no update in time")
            .expect("source stopped");
        assert_eq!((u.op, u.source), (PodOp::Set, PodSource::Http));
        u
    }

    async fn quiet(&mut self, d: Duration) -> bool {
        tokio::time::timeout(d, self.rx.recv()).await.is_err()
    }

    async fn error_containing(&mut self, want: &str) {
        let found = tokio::time::timeout(
            WAIT,
            self.last_error
                .wait_for(|e| e.as_deref().is_some_and(|e| e.contains(want))),
        )
        .await
        .is_ok();
        let last = self.last_error.borrow().clone();
        assert!(found, "no error containing {want:?}: {last:?}");
    }
}

#[tokio::test]
async fn polls_pod_and_pod_list_with_headers() {
    let state = Arc::new(Mutex::new(Served {
        status: 200,
        body: POD.into(),
        ..Default::default()
    }));
    let addr = serve(state.clone()).await;
    let headers = BTreeMap::from([("X-Token".to_string(), vec!["a".into(), "b".into()])]);
    let mut run = start(addr, &headers);

    let u = run.next().await;
    assert_eq!(u.pods.len(), 1);
    assert_eq!(u.pods[0].name(), "web-node1");
    assert_eq!(u.pods[0].source(), Some(PodSource::Http));
    let tokens: Vec<String> = state
        .lock()
        .unwrap()
        .seen_headers
        .iter()
        .filter(|(k, _)| k == "x-token")
        .map(|(_, v)| v.clone())
        .collect();
    assert_eq!(&tokens[..2], ["a", "b"]);

    // An unchanged body sends nothing.
    assert!(run.quiet(Duration::from_millis(350)).await);

    // A PodList in JSON replaces the set.
    state.lock().unwrap().body = r#"{"apiVersion":"v1","kind":"PodList","items":[
        {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x"}]}},
        {"metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"y"}]}}]}"#
        .into();
    let u = run.next().await;
    let names: Vec<&str> = u.pods.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["a-node1", "b-node1"]);
    run.cancel.cancel();
}

#[tokio::test]
async fn errors_keep_the_previous_set_and_empty_body_clears_it() {
    let state = Arc::new(Mutex::new(Served {
        status: 200,
        body: POD.into(),
        ..Default::default()
    }));
    let addr = serve(state.clone()).await;
    let mut run = start(addr, &BTreeMap::new());
    assert_eq!(run.next().await.pods.len(), 1);
    assert_eq!(*run.last_error.borrow(), None);

    // Non-200: logged, nothing sent.
    state.lock().unwrap().status = 404;
    run.error_containing("/pods: 404 Not Found").await;
    assert!(run.quiet(Duration::from_millis(250)).await);

    // Invalid manifest: logged with the field error, nothing sent.
    {
        let mut s = state.lock().unwrap();
        s.status = 200;
        s.body = POD.replace("    image: nginx\n", "");
    }
    run.error_containing("spec.containers[0].image: Required value")
        .await;
    assert!(run.quiet(Duration::from_millis(250)).await);

    // Empty body: an empty set.
    state.lock().unwrap().body = String::new();
    assert!(run.next().await.pods.is_empty());
    run.error_containing("zero-length data received from").await;

    // The same good body as before comes back.
    state.lock().unwrap().body = POD.into();
    assert_eq!(run.next().await.pods.len(), 1);
    run.cancel.cancel();
}

#[tokio::test]
async fn unreachable_server_is_an_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut run = start(addr, &BTreeMap::new());
    run.error_containing(&format!("http://{addr}/pods")).await;
    assert!(run.quiet(Duration::from_millis(200)).await);
    run.cancel.cancel();
}

#[test]
fn construction_errors() {
    let none = BTreeMap::new();
    let new = |url: &str| HttpSource::new(url, &none, "n", PERIOD).map(|_| ());
    assert!(new("http://127.0.0.1:8080/pods").is_ok());
    let err = new("https://example.com/pods").unwrap_err().to_string();
    assert!(err.contains("https is not supported yet"), "{err}");
    assert!(matches!(
        new("example.com/pods"),
        Err(HttpSourceError::InvalidUrl { .. })
    ));
    assert!(matches!(
        new("http://exa mple"),
        Err(HttpSourceError::InvalidUrl { .. })
    ));
    let bad = BTreeMap::from([("Bad Header".to_string(), vec!["v".to_string()])]);
    assert!(matches!(
        HttpSource::new("http://h/", &bad, "n", PERIOD),
        Err(HttpSourceError::InvalidHeader { .. })
    ));
}

#[tokio::test]
async fn a_billion_laughs_body_is_refused_quickly() {
    // Nested anchors (10^10 nodes expanded) and a 1 MiB anchor × 2,000 (2 GiB expanded), both
    // far below the 10 MiB body limit, then an unknown container field: each body is refused,
    // the previous set is kept, and the source keeps polling.
    let state = Arc::new(Mutex::new(Served {
        status: 200,
        body: POD.into(),
        ..Default::default()
    }));
    let addr = serve(state.clone()).await;
    let mut run = start(addr, &BTreeMap::new());
    assert_eq!(run.next().await.pods.len(), 1);
    for bomb in [
        crate::yaml::testdata::nested_anchors(),
        crate::yaml::testdata::large_anchor(),
    ] {
        state.lock().unwrap().body = format!("{POD}  bomb:\n    {}", bomb.replace('\n', "\n    "));
        let start = std::time::Instant::now();
        run.error_containing("invalid YAML").await;
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert!(run.quiet(Duration::from_millis(250)).await);
    }
    state.lock().unwrap().body = format!("{POD}    restartPolicyRules: []\n");
    run.error_containing("spec.containers[0].restartPolicyRules")
        .await;
    state.lock().unwrap().body = POD.replace("web", "again");
    assert_eq!(run.next().await.pods[0].name(), "again-node1");
    run.cancel.cancel();
}
