//! The kubelet's API loops (node status, node lease, pod source watch) against the fake API
//! server's injected faults (issue 17, row 3), with real time and the client the kubelet
//! builds: during a total outage and under 500s the sum of their requests stays ≤ 5/s;
//! a 429 with `Retry-After` holds every request back for that long; after recovery the
//! lease and the node status converge at once and the pod watch does not relist in a storm.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::faults::{CONNECT, Failure, Record};
use fake_apiserver::{FakeApiServer, Options};
use kubelet::host::HostInfo;
use kubelet::nodelease::NodeLease;
use kubelet::nodestatus::{NodeStatusManager, NodeStatusSettings};
use kubelet::sources::api::ApiSource;
use rkubelet_cri::fake::FakeRuntime;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NODE: &str = "node-faults";
/// Node status period: each period upstream tries `nodeStatusUpdateRetry` (5) times at once.
const PERIOD: Duration = Duration::from_secs(1);
const DEADLINE: Duration = Duration::from_secs(20);

struct Fixture {
    _dir: tempfile::TempDir,
    server: FakeApiServer,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    _pods: mpsc::Receiver<kubelet::types::PodUpdate>,
}

impl Fixture {
    async fn stop(self) {
        self.cancel.cancel();
        for t in self.tasks {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("task stops on cancel")
                .unwrap();
        }
    }
}

fn host() -> HostInfo {
    HostInfo {
        machine_id: "m".into(),
        system_uuid: "u".into(),
        boot_id: "b".into(),
        kernel_version: "6.1.0".into(),
        os_image: "Test Linux".into(),
        operating_system: "linux".into(),
        architecture: "amd64".into(),
        num_cores: 2,
        memory_capacity: 8 << 30,
        swap_capacity: 0,
        ephemeral_storage_capacity: Some(50 << 30),
        huge_pages: Vec::new(),
    }
}

/// Node status (period 1 s), the lease (renewed every 1 s) and the pod source, all on one
/// client; returns once the node is registered, the lease exists and the pods were listed.
async fn start() -> Fixture {
    let common::ApiFixture {
        dir,
        server,
        client,
    } = common::api_fixture(Options::default()).await;
    server
        .create(
            "pods",
            "default",
            json!({"metadata": {"name": "p1"}, "spec": {"nodeName": NODE,
                "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .unwrap();
    let runtime = FakeRuntime::with_images(&["busybox:1.36"]);
    let mut settings = NodeStatusSettings::new(NODE);
    settings.node_ips = vec!["10.0.0.5".parse().unwrap()];
    settings.update_frequency = PERIOD;
    settings.request_timeout = Duration::from_secs(1);
    let (manager, node_rx) = NodeStatusManager::new(
        client.clone(),
        Arc::new(runtime.clone()),
        Arc::new(runtime),
        settings,
        host(),
        Vec::new(),
    );
    let cancel = CancellationToken::new();
    let lease = NodeLease::new(client.clone(), NODE, 40, node_rx)
        .with_renew_interval(PERIOD)
        .with_request_timeout(Duration::from_secs(1));
    let (tx, mut pods) = mpsc::channel(64);
    let tasks = vec![
        tokio::spawn(manager.run(cancel.child_token())),
        tokio::spawn(lease.run(cancel.child_token())),
        tokio::spawn(ApiSource::new(client, NODE, tx).run(cancel.child_token())),
    ];
    tokio::time::timeout(DEADLINE, pods.recv())
        .await
        .expect("the pod source lists")
        .expect("a pod set");
    let f = Fixture {
        _dir: dir,
        server,
        cancel,
        tasks,
        _pods: pods,
    };
    eventually("the lease", || {
        f.server.get("leases", "kube-node-lease", NODE)
    })
    .await;
    f
}

async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn renew_time(s: &FakeApiServer) -> Option<String> {
    s.get("leases", "kube-node-lease", NODE)
        .and_then(|l| l["spec"]["renewTime"].as_str().map(str::to_owned))
}

fn summary(log: &[Record]) -> String {
    let mut by_key = std::collections::BTreeMap::<&str, usize>::new();
    for r in log {
        *by_key.entry(r.key.as_str()).or_default() += 1;
    }
    format!("{by_key:?}")
}

/// The first successful `key` request at or after `from`.
fn first_ok(s: &FakeApiServer, from: Instant, key: &str) -> Option<Duration> {
    s.faults()
        .requests(from, Instant::now())
        .iter()
        .find(|r| r.key == key && r.code < 300)
        .map(|r| r.at - from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_and_500s_stay_under_five_requests_per_second_and_recover_at_once() {
    let f = start().await;
    for fault in ["outage", "500"] {
        match fault {
            "outage" => f.server.faults().set_outage(true),
            _ => f.server.faults().set_failure(Some(Failure {
                code: 500,
                retry_after: None,
            })),
        }
        // After the switch: a request that arrived before it is answered normally.
        let begin = Instant::now();
        tokio::time::sleep(Duration::from_secs(6)).await;
        let renewed_during = renew_time(&f.server);
        f.server.faults().set_outage(false);
        f.server.faults().set_failure(None);
        let end = Instant::now();
        let log = f.server.faults().requests(begin, end);
        let max = f.server.faults().max_per_second(begin, end, |_| true);
        assert!(
            max <= 5,
            "{fault}: {max} requests in one second: {}",
            summary(&log)
        );
        if fault == "outage" {
            assert!(log.iter().all(|r| r.key == CONNECT), "{}", summary(&log));
        }
        // Still tried every ~second: the first request after recovery is not far away.
        assert!(log.len() >= 4, "{fault}: {}", summary(&log));

        let lease_after = eventually("the lease renewed after recovery", || {
            renew_time(&f.server).filter(|t| Some(t) != renewed_during.as_ref())
        })
        .await;
        let lease_in = eventually("the lease PUT", || {
            first_ok(&f.server, end, "PUT leases.coordination.k8s.io")
        })
        .await;
        let status_in = eventually("a node status request served after recovery", || {
            first_ok(&f.server, end, "GET nodes")
        })
        .await;
        assert!(
            lease_in < Duration::from_secs(8),
            "{fault}: lease {lease_in:?}"
        );
        assert!(
            status_in < Duration::from_secs(3),
            "{fault}: status {status_in:?}"
        );
        // The watch resumes: at most one LIST of pods (no relist storm).
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = f.server.faults().requests(end, Instant::now());
        let lists = after.iter().filter(|r| r.key == "LIST pods").count();
        assert!(lists <= 1, "{fault}: {lists} LISTs: {}", summary(&after));
        eprintln!(
            "{fault}: max {max} req/s; lease renewed {lease_in:?} ({lease_after}), node status {status_in:?} after recovery; {lists} LIST pods"
        );
    }
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_holds_every_request_back() {
    let f = start().await;
    let retry_after = 2;
    let begin = Instant::now();
    f.server
        .faults()
        .set_failure(Some(Failure::too_many_requests(retry_after)));
    tokio::time::sleep(Duration::from_secs(7)).await;
    f.server.faults().set_failure(None);
    let end = Instant::now();
    let log = f.server.faults().requests(begin, end);
    let rejections: Vec<&Record> = log.iter().filter(|r| r.code == 429).collect();
    assert!(rejections.len() >= 2, "{}", summary(&log));
    // Requests already on their way when the first 429 came back may arrive just after it;
    // anything later inside a Retry-After window ignored it.
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
    assert!(
        early.is_empty(),
        "sent within Retry-After: {early:?}\nall: {}",
        summary(&log)
    );
    eventually("the lease renewed after the 429s", || {
        first_ok(&f.server, end, "PUT leases.coordination.k8s.io")
    })
    .await;
    eprintln!(
        "429 Retry-After {retry_after}s: {} requests in 7 s, {} within Retry-After",
        log.len(),
        early.len()
    );
    f.stop().await;
}
