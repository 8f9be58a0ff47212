//! API-mode events against the in-repo fake API server (real network I/O, real time): the
//! Event the sink creates carries upstream's fields, repeats become PATCHes of one Event with a
//! growing count (and a POST again when that Event was deleted), similar events are combined,
//! `eventRecordQPS`/`eventBurst` hold, a full queue drops without blocking, and an API outage
//! costs a bounded number of attempts without panics.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options};
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams};
use kubelet::events::{EventRecorder, EventType};
use kubelet::events_api::{ApiEventRecorder, EventSettings, EventStats};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NODE: &str = "node-a";

struct Fixture {
    server: FakeApiServer,
    client: kube::Client,
    cancel: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn fixture() -> Fixture {
    let common::ApiFixture {
        dir,
        server,
        client,
    } = common::api_fixture(Options::default()).await;
    Fixture {
        server,
        client,
        cancel: CancellationToken::new(),
        _dir: dir,
    }
}

impl Fixture {
    /// A recorder whose sink runs until the fixture is dropped.
    fn recorder(&self, settings: EventSettings) -> ApiEventRecorder {
        let (recorder, sink) = ApiEventRecorder::new(self.client.clone(), NODE, settings);
        tokio::spawn(sink.run(self.cancel.child_token()));
        recorder
    }

    fn events(&self, ns: &str) -> Vec<Value> {
        self.server.list("events", Some(ns))
    }

    fn count(&self, key: &str) -> u64 {
        self.server.request_counts().get(key).copied().unwrap_or(0)
    }
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("42".to_owned()),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn stats_until<'a>(
    recorder: &'a ApiEventRecorder,
    f: impl Fn(&EventStats) -> bool + 'a,
) -> impl FnMut() -> bool + 'a {
    move || f(&recorder.stats())
}

#[tokio::test]
async fn event_carries_upstream_fields() {
    let fx = fixture().await;
    let rec = fx.recorder(EventSettings::default());
    let p = pod("web");
    rec.event(
        &p,
        EventType::Warning,
        "BackOff",
        "Back-off restarting failed container",
    );
    rec.node_event(EventType::Normal, "Starting", "Starting kubelet.");
    wait_for("two events", Duration::from_secs(10), || {
        fx.events("default").len() == 2
    })
    .await;
    let events = fx.events("default");
    let ev = events
        .iter()
        .find(|e| e["reason"] == "BackOff")
        .expect("pod event");
    let name = ev["metadata"]["name"].as_str().unwrap();
    let (prefix, hex) = name.split_once('.').unwrap();
    assert_eq!(prefix, "web");
    assert!(
        hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{name}"
    );
    assert_eq!(ev["metadata"]["namespace"], "default");
    let io = &ev["involvedObject"];
    assert_eq!(io["apiVersion"], "v1");
    assert_eq!(io["kind"], "Pod");
    assert_eq!(io["name"], "web");
    assert_eq!(io["namespace"], "default");
    assert_eq!(io["uid"], "uid-web");
    assert_eq!(io["resourceVersion"], "42");
    assert_eq!(ev["message"], "Back-off restarting failed container");
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["count"], 1);
    assert_eq!(ev["source"]["component"], "kubelet");
    assert_eq!(ev["source"]["host"], NODE);
    assert_eq!(ev["reportingComponent"], "kubelet");
    assert_eq!(ev["reportingInstance"], NODE);
    assert!(ev["firstTimestamp"].is_string());
    assert_eq!(ev["firstTimestamp"], ev["lastTimestamp"]);

    let node_ev = events.iter().find(|e| e["reason"] == "Starting").unwrap();
    assert_eq!(node_ev["involvedObject"]["kind"], "Node");
    assert_eq!(node_ev["involvedObject"]["name"], NODE);
    assert_eq!(node_ev["involvedObject"]["uid"], NODE);
    assert_eq!(node_ev["type"], "Normal");
    assert!(
        node_ev["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("node-a.")
    );
    assert_eq!(fx.count("POST events"), 2);
}

#[tokio::test]
async fn identical_events_are_one_event_with_a_count() {
    let fx = fixture().await;
    let rec = fx.recorder(EventSettings::default());
    let p = pod("web");
    for _ in 0..5 {
        rec.event(&p, EventType::Normal, "Pulled", "Image is present");
    }
    wait_for("count 5", Duration::from_secs(10), || {
        fx.events("default").first().map(|e| e["count"].clone()) == Some(5.into())
    })
    .await;
    assert_eq!(fx.events("default").len(), 1);
    assert_eq!(fx.count("POST events"), 1);
    assert_eq!(fx.count("PATCH events"), 4);
    let st = rec.stats();
    assert_eq!((st.created, st.patched, st.dropped), (1, 4, 0));

    // The Event disappears (TTL, kubectl delete): the next repeat creates it again.
    let name = fx.events("default")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let api: Api<Event> = Api::namespaced(fx.client.clone(), "default");
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    rec.event(&p, EventType::Normal, "Pulled", "Image is present");
    wait_for("recreated event", Duration::from_secs(10), || {
        fx.events("default").len() == 1
    })
    .await;
    let ev = &fx.events("default")[0];
    assert_eq!(ev["metadata"]["name"], name.as_str());
    assert_eq!(ev["count"], 6);
    assert_eq!(fx.count("PATCH events"), 5);
    assert_eq!(fx.count("POST events"), 2);
}

#[tokio::test]
async fn similar_events_are_combined() {
    let fx = fixture().await;
    let rec = fx.recorder(EventSettings::default());
    let p = pod("web");
    for i in 0..11 {
        rec.event(&p, EventType::Warning, "Failed", &format!("attempt {i}"));
    }
    wait_for("combined event", Duration::from_secs(10), || {
        fx.events("default").iter().any(|e| e["count"] == 2)
    })
    .await;
    let events = fx.events("default");
    assert_eq!(events.len(), 10, "9 single events and one combined");
    let combined = events.iter().find(|e| e["count"] == 2).unwrap();
    assert_eq!(
        combined["message"],
        "(combined from similar events): attempt 10"
    );
    assert_eq!(combined["reason"], "Failed");
}

#[tokio::test]
async fn client_rate_limit_holds() {
    let fx = fixture().await;
    let rec = fx.recorder(EventSettings {
        qps: 1.0,
        burst: 2,
        ..Default::default()
    });
    let start = Instant::now();
    for i in 0..5 {
        rec.event(&pod(&format!("p{i}")), EventType::Normal, "Scheduled", "ok");
    }
    // The burst goes out at once; the third write needs a refilled token (1 s later).
    while start.elapsed() < Duration::from_millis(900) {
        assert!(
            fx.count("POST events") <= 2,
            "{:?}",
            fx.server.request_counts()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_for("all five events", Duration::from_secs(15), || {
        fx.count("POST events") == 5
    })
    .await;
    assert!(
        start.elapsed() >= Duration::from_millis(2900),
        "5 events at qps 1 burst 2 took only {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn full_queue_drops_without_blocking() {
    let fx = fixture().await;
    // No sink running: the queue (capacity 2) fills up.
    let (rec, sink) = ApiEventRecorder::new(
        fx.client.clone(),
        NODE,
        EventSettings {
            queue_capacity: 2,
            ..Default::default()
        },
    );
    let start = Instant::now();
    for i in 0..50 {
        rec.event(&pod(&format!("p{i}")), EventType::Normal, "Created", "x");
    }
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(rec.stats().dropped, 48);
    tokio::spawn(sink.run(fx.cancel.child_token()));
    wait_for("queued events", Duration::from_secs(10), || {
        fx.events("default").len() == 2
    })
    .await;
}

#[tokio::test]
async fn api_errors_cost_bounded_attempts() {
    let fx = fixture().await;
    // The shared client retries 503 itself (kube's default policy), so an attempt ends at
    // the sink's request timeout.
    let rec = fx.recorder(EventSettings {
        max_tries: 3,
        retry_interval: Duration::from_millis(100),
        request_timeout: Duration::from_millis(300),
        ..Default::default()
    });
    fx.server.fail_requests(Some(503));
    rec.event(&pod("lost"), EventType::Warning, "Failed", "during outage");
    wait_for(
        "event abandoned",
        Duration::from_secs(10),
        stats_until(&rec, |s| s.abandoned == 1),
    )
    .await;
    assert_eq!(rec.stats().failed_attempts, 3);
    // No further attempts once given up.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(rec.stats().failed_attempts, 3);
    fx.server.fail_requests(None);
    assert!(fx.events("default").is_empty());

    rec.event(&pod("after"), EventType::Normal, "Started", "API is back");
    wait_for("event after recovery", Duration::from_secs(10), || {
        fx.events("default").len() == 1
    })
    .await;
    assert_eq!(fx.events("default")[0]["involvedObject"]["name"], "after");
    // A refusal that retrying cannot fix (missing namespace) is not retried.
    let mut elsewhere = pod("x");
    elsewhere.metadata.namespace = Some("missing-ns".into());
    rec.event(&elsewhere, EventType::Normal, "Started", "no namespace");
    wait_for(
        "refused event abandoned",
        Duration::from_secs(10),
        stats_until(&rec, |s| s.abandoned == 2),
    )
    .await;
    assert_eq!(rec.stats().failed_attempts, 3);
}

#[tokio::test]
async fn server_outage_is_retried_until_it_returns() {
    let mut fx = fixture().await;
    let rec = fx.recorder(EventSettings {
        max_tries: 50,
        retry_interval: Duration::from_millis(100),
        request_timeout: Duration::from_secs(2),
        ..Default::default()
    });
    rec.event(&pod("before"), EventType::Normal, "Started", "first");
    wait_for("first event", Duration::from_secs(10), || {
        fx.events("default").len() == 1
    })
    .await;
    fx.server.pause().await;
    rec.event(&pod("during"), EventType::Normal, "Started", "second");
    wait_for(
        "failed attempts",
        Duration::from_secs(10),
        stats_until(&rec, |s| s.failed_attempts >= 2),
    )
    .await;
    fx.server.resume().await.unwrap();
    wait_for("event after the outage", Duration::from_secs(20), || {
        fx.events("default").len() == 2
    })
    .await;
    let st = rec.stats();
    assert_eq!(st.abandoned, 0);
    assert!(st.failed_attempts < 50, "{st:?}");
    let by_name: BTreeMap<String, Value> = fx
        .events("default")
        .into_iter()
        .map(|e| (e["involvedObject"]["name"].as_str().unwrap().to_owned(), e))
        .collect();
    assert!(by_name.contains_key("during"));
}
