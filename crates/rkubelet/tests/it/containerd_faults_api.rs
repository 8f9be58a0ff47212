//! Fault matrix row 3 (issue 17): API server faults against the `rkubelet` binary in API mode
//! on the real containerd. A node with three API pods (one with an exec readiness probe whose
//! answer the test flips) and a static pod with its mirror goes through, in turn: a total
//! outage (3a), every request answered 500 (3b), 429 with `Retry-After` (3c), 5 s per
//! request (3d) and dropped watches (3e).
//!
//! Must hold for each: no pod disruption (same container IDs, no restarts, the mirror pod
//! kept); during 3a/3b at most 5 requests/s reach the server in all, and never more than
//! `kubeAPIQPS`/`kubeAPIBurst` allow over the whole run; no request inside a `Retry-After`
//! window; after recovery the pod status reaches the API within 10 s, the lease is renewed,
//! the node status is read again, and at most one LIST per resource (no relist storm).
//!
//! The test talks to the server only through the fixture's store (no HTTP): every request the
//! server logs is the kubelet's.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::api::{fixture, running_in_api, wait_for};
use common::{Kubelet, NODE, cri, exec_in, faults, pod_containers};
use fake_apiserver::FakeApiServer;
use fake_apiserver::faults::{CONNECT, Failure, Record};
use serde_json::{Value, json};
use tokio::time::Instant;

const IMAGE: &str = "docker.io/library/busybox:latest";
const QPS: usize = 5;
const BURST: usize = 10;
const LEASE_PUT: &str = "PUT leases.coordination.k8s.io";

fn api_pod(name: &str, probe: bool) -> Value {
    let mut c = json!({
        "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", "touch /tmp/ready; trap 'exit 0' TERM; while true; do sleep 1; done"],
    });
    if probe {
        c["readinessProbe"] = json!({"exec": {"command": ["cat", "/tmp/ready"]},
            "periodSeconds": 1, "failureThreshold": 1});
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 2, "containers": [c]}})
}

/// Container IDs and restart counts of every pod, from the runtime and the kubelet.
async fn pod_fingerprint(k: &Kubelet, uids: &[String]) -> BTreeMap<String, Vec<String>> {
    let rt = cri().await;
    let mut out = BTreeMap::new();
    for uid in uids {
        let mut ids: Vec<String> = pod_containers(&rt, uid)
            .await
            .into_iter()
            .map(|c| format!("{}:{:?}", c.id, c.state))
            .collect();
        ids.sort();
        out.insert(uid.clone(), ids);
    }
    for p in k.pods().await {
        // Pods created later (3e's) are not part of the comparison.
        let name = p["metadata"]["name"].as_str().unwrap_or("");
        let static_name = format!("static-{NODE}");
        if !["web", "worker", "probe", static_name.as_str()].contains(&name) {
            continue;
        }
        let restarts: i64 = p["status"]["containerStatuses"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["restartCount"].as_i64()).sum())
            .unwrap_or(0);
        out.insert(
            format!("restarts {}", p["metadata"]["name"].as_str().unwrap_or("")),
            vec![restarts.to_string()],
        );
    }
    out
}

fn ready_in_api(server: &FakeApiServer, name: &str) -> Option<bool> {
    let st = server.get("pods", "default", name)?["status"].clone();
    let c = st["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .clone();
    Some(c["status"] == "True")
}

fn summary(log: &[Record]) -> String {
    let mut by_key = BTreeMap::<&str, usize>::new();
    for r in log {
        *by_key.entry(r.key.as_str()).or_default() += 1;
    }
    format!("{by_key:?}")
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// What recovery looked like after a fault ended at `end`.
struct Recovery {
    pod_status: Duration,
    lease: Duration,
    node_status: Duration,
    lists: usize,
}

impl Recovery {
    fn figure(&self) -> String {
        format!(
            "pod status converged {}, first lease renewal {}, first node status read {}, {} LIST after recovery",
            secs(self.pod_status),
            secs(self.lease),
            secs(self.node_status),
            self.lists
        )
    }
}

struct Row {
    k: Kubelet,
    server: FakeApiServer,
    uids: Vec<String>,
    probe_container: String,
    mirror_uid: String,
}

impl Row {
    fn first_ok(&self, from: Instant, pred: impl Fn(&Record) -> bool) -> Option<Duration> {
        self.server
            .faults()
            .requests(from, Instant::now())
            .iter()
            .find(|r| r.code < 300 && pred(r))
            .map(|r| r.at - from)
    }

    /// Flips the probe pod's readiness to not ready (during a fault: the kubelet sees it, the
    /// API cannot yet).
    async fn make_probe_unready(&self) {
        let (code, _, err) = exec_in(&self.probe_container, &["rm", "-f", "/tmp/ready"]).await;
        assert_eq!(code, 0, "{err}");
    }

    /// After a fault ended at `end`: the probe pod's Ready=False reaches the API, the lease is
    /// renewed and the node status read; the probe pod is made ready again; LISTs counted.
    async fn recover(&self, what: &str, end: Instant) -> Recovery {
        let pod_status = wait_for(
            &self.k,
            Duration::from_secs(10),
            &format!("{what}: the probe pod's Ready=False in the API within 10 s"),
            || async {
                (ready_in_api(&self.server, "probe") == Some(false)).then(|| end.elapsed())
            },
        )
        .await;
        let lease = wait_for(
            &self.k,
            Duration::from_secs(15),
            "a lease renewal",
            || async { self.first_ok(end, |r| r.key == LEASE_PUT) },
        )
        .await;
        let node_status = wait_for(
            &self.k,
            Duration::from_secs(15),
            "a node status read",
            || async { self.first_ok(end, |r| r.key == "GET nodes") },
        )
        .await;
        let (code, _, err) = exec_in(&self.probe_container, &["touch", "/tmp/ready"]).await;
        assert_eq!(code, 0, "{err}");
        wait_for(
            &self.k,
            Duration::from_secs(15),
            "the probe pod Ready again",
            || async { (ready_in_api(&self.server, "probe") == Some(true)).then_some(()) },
        )
        .await;
        // Watches resume with backoff (up to 30 s, as the upstream reflector): LISTs are
        // counted over the 12 s after recovery, by resource.
        let settle = end + Duration::from_secs(12);
        tokio::time::sleep_until(settle.max(Instant::now())).await;
        let log = self.server.faults().requests(end, Instant::now());
        let mut lists = BTreeMap::<&str, usize>::new();
        for r in log.iter().filter(|r| r.verb() == "LIST") {
            *lists.entry(r.key.as_str()).or_default() += 1;
        }
        assert!(
            lists.values().all(|n| *n <= 1),
            "{what}: relist storm after recovery: {lists:?}"
        );
        Recovery {
            pod_status,
            lease,
            node_status,
            lists: lists.values().sum(),
        }
    }

    /// No pod was disturbed: same containers and restart counts, the mirror pod unchanged.
    async fn assert_undisturbed(&self, what: &str, before: &BTreeMap<String, Vec<String>>) {
        let after = pod_fingerprint(&self.k, &self.uids).await;
        assert_eq!(&after, before, "{what}: pods were disturbed");
        let mirror = self
            .server
            .get("pods", "default", &format!("static-{NODE}"))
            .expect("the mirror pod");
        assert_eq!(
            mirror["metadata"]["uid"], self.mirror_uid,
            "{what}: mirror pod recreated"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_faults() {
    let mut k = Kubelet::new();
    let (server, _client) = fixture(k.dir.path()).await;
    k.extra_args = vec!["--kubeconfig".into(), server.kubeconfig_path.clone().into()];
    // Events have their own bucket, as upstream's separate event client: bound it the same.
    k.append_config(&format!(
        "kubeAPIQPS: {QPS}\nkubeAPIBurst: {BURST}\neventRecordQPS: {QPS}\neventBurst: {BURST}\n"
    ));
    k.write_manifest(
        "static.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static\n  namespace: default\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: s\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
        ),
    );
    let run_start = Instant::now();
    k.start();
    for (name, probe) in [("web", false), ("worker", false), ("probe", true)] {
        server
            .create("pods", "default", api_pod(name, probe))
            .unwrap();
    }
    let mut uids = Vec::new();
    for name in ["web", "worker", "probe"] {
        let st = wait_for(
            &k,
            Duration::from_secs(90),
            "API pods Running and Ready",
            || async { running_in_api(&server, name) },
        )
        .await;
        uids.push(
            server.get("pods", "default", name).unwrap()["metadata"]["uid"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
        if name == "probe" {
            let id = st["containerStatuses"][0]["containerID"].as_str().unwrap();
            uids.push(id.to_owned());
        }
    }
    let probe_container = uids.pop().unwrap();
    let mirror = wait_for(&k, Duration::from_secs(60), "the mirror pod", || async {
        let p = server.get("pods", "default", &format!("static-{NODE}"))?;
        (p["status"]["phase"] == "Running").then_some(p)
    })
    .await;
    let static_uid = k.pod("static").await.unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    uids.push(static_uid);
    wait_for(&k, Duration::from_secs(30), "the node lease", || async {
        server.get("leases", "kube-node-lease", NODE)
    })
    .await;
    let row = Row {
        k,
        server,
        uids,
        probe_container,
        mirror_uid: mirror["metadata"]["uid"].as_str().unwrap().to_owned(),
    };
    let before = pod_fingerprint(&row.k, &row.uids).await;
    let inject = row.server.faults().clone();

    // 3a: total outage (every connection reset; each attempt counted).
    let outage = faults::pick(Duration::from_secs(20), Duration::from_secs(300));
    let begin = Instant::now();
    inject.set_outage(true);
    tokio::time::sleep(Duration::from_secs(2)).await;
    row.make_probe_unready().await;
    tokio::time::sleep_until(begin + outage).await;
    inject.set_outage(false);
    let end = Instant::now();
    let log = inject.requests(begin, end);
    let max = inject.max_per_second(begin, end, |_| true);
    assert!(
        log.iter().all(|r| r.key == CONNECT),
        "served during the outage: {}",
        summary(&log)
    );
    assert!(
        max <= 5,
        "{max} requests in one second of the outage: {}",
        summary(&log)
    );
    let rec = row.recover("3a", end).await;
    row.assert_undisturbed("3a", &before).await;
    faults::report(
        "3a",
        &format!("API server down {} (connections reset)", secs(outage)),
        "no pod disruption; <= 5 req/s in all; pod status <= 10 s after recovery; no relist storm",
        &format!(
            "max {max} req/s ({} attempts in {}); {}",
            log.len(),
            secs(outage),
            rec.figure()
        ),
    );

    // 3b: every request answered 500.
    let span = faults::pick(Duration::from_secs(10), Duration::from_secs(30));
    let begin = Instant::now();
    inject.set_failure(Some(Failure {
        code: 500,
        retry_after: None,
    }));
    tokio::time::sleep(Duration::from_secs(2)).await;
    row.make_probe_unready().await;
    tokio::time::sleep_until(begin + span).await;
    inject.set_failure(None);
    let end = Instant::now();
    let log = inject.requests(begin, end);
    let max = inject.max_per_second(begin, end, |_| true);
    assert!(
        max <= 5,
        "{max} requests in one second of 500s: {}",
        summary(&log)
    );
    let rec = row.recover("3b", end).await;
    row.assert_undisturbed("3b", &before).await;
    faults::report(
        "3b",
        &format!("every request answered 500 for {}", secs(span)),
        "no pod disruption; <= 5 req/s in all; pod status <= 10 s after recovery",
        &format!("max {max} req/s ({} requests); {}", log.len(), rec.figure()),
    );

    // 3c: 429 with Retry-After (the real server's max-in-flight / APF rejection).
    let retry_after = 3;
    let span = faults::pick(Duration::from_secs(12), Duration::from_secs(30));
    let begin = Instant::now();
    inject.set_failure(Some(Failure::too_many_requests(retry_after)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    row.make_probe_unready().await;
    tokio::time::sleep_until(begin + span).await;
    inject.set_failure(None);
    let end = Instant::now();
    let log = inject.requests(begin, end);
    let rejections: Vec<&Record> = log.iter().filter(|r| r.code == 429).collect();
    // Requests already sent when the first 429 came back may arrive just after it.
    let slack = Duration::from_millis(250);
    let window = Duration::from_secs(u64::from(retry_after));
    let early: Vec<&Record> = log
        .iter()
        .filter(|r| {
            rejections
                .iter()
                .any(|x| r.at > x.at + slack && r.at < x.at + window)
        })
        .collect();
    assert!(!rejections.is_empty(), "{}", summary(&log));
    assert!(
        early.is_empty(),
        "sent within Retry-After: {early:?}\nall: {}",
        summary(&log)
    );
    let rec = row.recover("3c", end).await;
    row.assert_undisturbed("3c", &before).await;
    faults::report(
        "3c",
        &format!(
            "429 TooManyRequests with Retry-After: {retry_after} for {}",
            secs(span)
        ),
        "no request inside a Retry-After window; no pod disruption; pod status <= 10 s after",
        &format!(
            "{} requests in {} ({} answered 429), 0 within Retry-After; {}",
            log.len(),
            secs(span),
            rejections.len(),
            rec.figure()
        ),
    );

    // 3d: every request takes 5 s.
    let span = faults::pick(Duration::from_secs(20), Duration::from_secs(30));
    let begin = Instant::now();
    inject.reset_max_in_flight();
    inject.set_latency(Duration::from_secs(5));
    tokio::time::sleep(Duration::from_secs(2)).await;
    row.make_probe_unready().await;
    tokio::time::sleep_until(begin + span).await;
    inject.set_latency(Duration::ZERO);
    let end = Instant::now();
    let in_flight = inject.max_in_flight();
    let rec = row.recover("3d", end).await;
    // A request is logged when it is answered: those still delayed at `end` are in the log
    // only now (recovery took more than 5 s).
    let log = inject.requests(begin, end);
    let max = inject.max_per_second(begin, end, |_| true);
    // Node status, lease, pod status, mirror pods, events and a few watch starts at a time.
    assert!(
        in_flight <= 12,
        "{in_flight} requests in flight: {}",
        summary(&log)
    );
    // Slow is not down: the lease is still renewed (every 10 s, each PUT taking 5 s).
    let renewals = log
        .iter()
        .filter(|r| r.key == LEASE_PUT && r.code == 200)
        .count();
    assert!(
        renewals >= 1,
        "no lease renewal while slow: {}",
        summary(&log)
    );
    row.assert_undisturbed("3d", &before).await;
    faults::report(
        "3d",
        &format!("every request delayed 5 s for {}", secs(span)),
        "no pod disruption; no pile-up of requests in flight; pod status <= 10 s after",
        &format!(
            "max {in_flight} requests in flight, max {max} req/s ({} requests), lease renewed {renewals} times while slow; {}",
            log.len(),
            rec.figure()
        ),
    );

    // 3e: open watches dropped, three times.
    let begin = Instant::now();
    for _ in 0..3 {
        inject.drop_watches();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    row.server
        .create("pods", "default", api_pod("late", false))
        .unwrap();
    let late = wait_for(
        &row.k,
        Duration::from_secs(40),
        "pod late Running after the drops",
        || async { running_in_api(&row.server, "late") },
    )
    .await;
    assert!(late["phase"] == "Running");
    let log = inject.requests(begin, Instant::now());
    let mut lists = BTreeMap::<&str, usize>::new();
    for r in log.iter().filter(|r| r.verb() == "LIST") {
        *lists.entry(r.key.as_str()).or_default() += 1;
    }
    assert!(
        lists.values().all(|n| *n <= 1),
        "relists after dropped watches: {lists:?}"
    );
    let watches = log.iter().filter(|r| r.verb() == "WATCH").count();
    row.assert_undisturbed("3e", &before).await;
    // kubeAPIQPS / kubeAPIBurst over the whole run: no second ever saw more than the bucket
    // allows (burst plus one second of refill; one request of slack: arrival times at the
    // server jitter around the send times). Event writes go by eventRecordQPS / eventBurst
    // instead (upstream's own event client), set to the same values here. Heartbeats (the
    // lease, and the node status reads and patches) go through upstream's unthrottled
    // heartbeat client: counted apart, a handful a second at most (one lease renewal and one
    // status update, each a read and a write, plus a retry).
    let event_write =
        |r: &Record| r.key.ends_with(" events") && matches!(r.verb(), "POST" | "PATCH" | "PUT");
    let heartbeat = |r: &Record| {
        r.key.contains(" leases") || r.key == "GET nodes" || r.key == "PATCH nodes/status"
    };
    let all = inject.max_per_second(run_start, Instant::now(), |r| {
        !event_write(r) && !heartbeat(r)
    });
    assert!(
        all <= BURST + QPS + 1,
        "{all} requests in one second (kubeAPIQPS {QPS}, kubeAPIBurst {BURST}): {:?}",
        busiest_second(&inject.requests(run_start, Instant::now()), |r| {
            !event_write(r) && !heartbeat(r)
        })
    );
    let beats = inject.max_per_second(run_start, Instant::now(), heartbeat);
    assert!(
        beats <= 6,
        "{beats} heartbeat requests (lease, node status) in one second"
    );
    let events = inject.max_per_second(run_start, Instant::now(), event_write);
    assert!(
        events <= BURST + QPS + 1,
        "{events} event writes in one second (eventRecordQPS {QPS}, eventBurst {BURST})"
    );
    faults::report(
        "3e",
        "open watches dropped 3 times, 2 s apart",
        "watches resume from their resourceVersion (no relist), a new pod still starts",
        &format!(
            "{watches} watch requests, {} LISTs; new pod Running after {}; whole run: max {all} req/s (kubeAPIQPS {QPS}, kubeAPIBurst {BURST}), heartbeats max {beats} req/s",
            lists.values().sum::<usize>(),
            secs(begin.elapsed())
        ),
    );
}

/// The keys of the requests in the busiest one-second window among those `filter` keeps, for
/// the message of a failed rate bound.
fn busiest_second(log: &[Record], filter: impl Fn(&Record) -> bool) -> Vec<String> {
    let kept: Vec<&Record> = log.iter().filter(|r| filter(r)).collect();
    let (mut best, mut start) = ((0, 0), 0);
    for end in 0..kept.len() {
        while kept[end].at - kept[start].at >= Duration::from_secs(1) {
            start += 1;
        }
        if end + 1 - start > best.1 - best.0 {
            best = (start, end + 1);
        }
    }
    kept[best.0..best.1]
        .iter()
        .map(|r| format!("{} {}", r.key, r.code))
        .collect()
}
