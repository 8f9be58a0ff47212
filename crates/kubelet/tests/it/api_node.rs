//! Node registration, node status and the node lease against the in-repo fake API server
//! (real HTTPS, real time, short periods) with a fake CRI runtime: registration (new and
//! pre-existing Node), patch suppression and the report period, Ready following the runtime,
//! lease creation/renewal/conflicts, and convergence after an API outage.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kubelet::host::{HostInfo, HugePages};
use kubelet::nodelease::{LeaseHealth, NodeLease};
use kubelet::nodestatus::{NodeStatusManager, NodeStatusSettings};
use rkubelet_cri::fake::FakeRuntime;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const GI: u64 = 1 << 30;
const PERIOD: Duration = Duration::from_millis(200);
const DEADLINE: Duration = Duration::from_secs(15);

struct Fixture {
    _dir: tempfile::TempDir,
    server: FakeApiServer,
    client: kube::Client,
    runtime: FakeRuntime,
}

async fn fixture() -> Fixture {
    let common::ApiFixture {
        dir,
        server,
        client,
    } = common::api_fixture(Options::default()).await;
    let runtime = FakeRuntime::with_images(&["busybox:1.36", "registry.k8s.io/pause:3.9"]);
    Fixture {
        _dir: dir,
        server,
        client,
        runtime,
    }
}

fn host() -> HostInfo {
    HostInfo {
        machine_id: "machine-1".into(),
        system_uuid: "uuid-1".into(),
        boot_id: "boot-1".into(),
        kernel_version: "6.1.0-test".into(),
        os_image: "Test Linux".into(),
        operating_system: "linux".into(),
        architecture: "amd64".into(),
        num_cores: 2,
        memory_capacity: 8 * GI,
        swap_capacity: 0,
        ephemeral_storage_capacity: Some(50 * GI),
        huge_pages: vec![HugePages {
            page_size: 2 << 20,
            num_pages: 0,
        }],
    }
}

fn settings(name: &str) -> NodeStatusSettings {
    let mut s = NodeStatusSettings::new(name);
    s.node_ips = vec!["10.0.0.5".parse().unwrap()];
    s.node_labels.insert("team".into(), "blue".into());
    s.update_frequency = PERIOD;
    s.report_frequency = Duration::from_secs(60);
    s.request_timeout = Duration::from_secs(1);
    s.reservations.system_reserved.insert(
        "cpu".into(),
        kubelet::config::Quantity::parse("100m").unwrap(),
    );
    s.reservations.eviction_hard.insert(
        "memory.available".into(),
        kubelet::config::ThresholdValue::parse("100Mi").unwrap(),
    );
    s
}

struct Running {
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    node_rx: watch::Receiver<Option<Arc<Node>>>,
    lease: Option<LeaseHealth>,
}

impl Running {
    async fn stop(self) {
        self.cancel.cancel();
        for t in self.tasks {
            tokio::time::timeout(Duration::from_secs(5), t)
                .await
                .expect("task stops on cancel")
                .unwrap();
        }
    }
}

fn start(f: &Fixture, settings: NodeStatusSettings, with_lease: bool) -> Running {
    let cancel = CancellationToken::new();
    let name = settings.node_name.clone();
    let (manager, node_rx) = NodeStatusManager::new(
        f.client.clone(),
        Arc::new(f.runtime.clone()),
        Arc::new(f.runtime.clone()),
        settings,
        host(),
        Vec::new(),
    );
    let mut tasks = vec![tokio::spawn(manager.run(cancel.child_token()))];
    let mut lease = None;
    if with_lease {
        let l = NodeLease::new(f.client.clone(), &name, 40, node_rx.clone())
            .with_renew_interval(PERIOD)
            .with_request_timeout(Duration::from_secs(1));
        lease = Some(l.health());
        tasks.push(tokio::spawn(l.run(cancel.child_token())));
    }
    Running {
        cancel,
        tasks,
        node_rx,
        lease,
    }
}

/// Polls `f` every 50 ms until it returns `Some`, failing after [`DEADLINE`].
async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn node(f: &Fixture, name: &str) -> Option<Value> {
    f.server.get("nodes", "", name)
}

fn condition(node: &Value, type_: &str) -> Option<Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

fn ready_status(f: &Fixture, name: &str) -> Option<String> {
    let n = node(f, name)?;
    condition(&n, "Ready").map(|c| c["status"].as_str().unwrap_or_default().to_owned())
}

fn count(f: &Fixture, key: &str) -> u64 {
    f.server.request_counts().get(key).copied().unwrap_or(0)
}

fn lease(f: &Fixture, name: &str) -> Option<Value> {
    f.server.get("leases", "kube-node-lease", name)
}

fn renew_time(f: &Fixture, name: &str) -> Option<String> {
    lease(f, name)?["spec"]["renewTime"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_node_with_capacity_allocatable_node_info_conditions_and_labels() {
    let f = fixture().await;
    let run = start(&f, settings("node-reg"), false);
    let n = eventually("node registered and Ready", || {
        let n = node(&f, "node-reg")?;
        (condition(&n, "Ready")?["status"] == "True").then_some(n)
    })
    .await;

    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], "node-reg");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    assert_eq!(labels["beta.kubernetes.io/os"], "linux");
    assert_eq!(labels["beta.kubernetes.io/arch"], "amd64");
    assert_eq!(labels["team"], "blue");
    assert_eq!(
        n["metadata"]["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"],
        "true"
    );
    let st = &n["status"];
    assert_eq!(
        st["capacity"],
        json!({"cpu": "2", "memory": "8Gi", "pods": "110", "ephemeral-storage": "50Gi", "hugepages-2Mi": "0"})
    );
    assert_eq!(
        st["allocatable"],
        json!({"cpu": "1900m", "memory": "8092Mi", "pods": "110", "ephemeral-storage": "50Gi", "hugepages-2Mi": "0"})
    );
    let info = &st["nodeInfo"];
    assert_eq!(info["containerRuntimeVersion"], "containerd://1.6.20-fake");
    assert_eq!(info["machineID"], "machine-1");
    assert_eq!(info["systemUUID"], "uuid-1");
    assert_eq!(info["bootID"], "boot-1");
    assert_eq!(info["kernelVersion"], "6.1.0-test");
    assert_eq!(info["osImage"], "Test Linux");
    assert_eq!(info["kubeletVersion"], "v1.33.0");
    assert_eq!(info["architecture"], "amd64");
    assert_eq!(info["operatingSystem"], "linux");
    assert_eq!(
        st["addresses"],
        json!([{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "node-reg"}])
    );
    assert_eq!(st["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
    assert_eq!(st["images"].as_array().unwrap().len(), 2);
    let types: Vec<&str> = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    );
    let ready = condition(&n, "Ready").unwrap();
    assert_eq!(ready["reason"], "KubeletReady");
    assert_eq!(ready["message"], "kubelet is posting ready status");
    let mem = condition(&n, "MemoryPressure").unwrap();
    assert_eq!(
        (&mem["status"], &mem["reason"]),
        (&json!("False"), &json!("KubeletHasSufficientMemory"))
    );

    // The node watch carries the API's Node (with its UID).
    let mut rx = run.node_rx.clone();
    let published = rx.wait_for(Option::is_some).await.unwrap().clone().unwrap();
    assert_eq!(
        published.metadata.uid.as_deref(),
        n["metadata"]["uid"].as_str()
    );
    assert_eq!(count(&f, "POST nodes"), 1);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_node_is_reconciled_and_its_status_patched() {
    let f = fixture().await;
    let created = f
        .server
        .create(
            "nodes",
            "",
            json!({"metadata": {"name": "node-old", "labels": {"kubernetes.io/hostname": "stale", "keep": "me"}}}),
        )
        .unwrap();
    let run = start(&f, settings("node-old"), false);
    let n = eventually("existing node Ready", || {
        let n = node(&f, "node-old")?;
        (condition(&n, "Ready")?["status"] == "True").then_some(n)
    })
    .await;
    assert_eq!(count(&f, "POST nodes"), 1, "one POST answered 409");
    assert!(count(&f, "PATCH nodes/status") >= 1);
    assert_eq!(n["metadata"]["uid"], created["metadata"]["uid"]);
    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], "node-old");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["keep"], "me");
    assert_eq!(n["status"]["capacity"]["cpu"], "2");
    assert_eq!(n["status"]["nodeInfo"]["bootID"], "boot-1");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_patched_only_on_change_or_after_the_report_frequency() {
    let f = fixture().await;
    let mut s = settings("node-quiet");
    let report = Duration::from_millis(2500);
    s.report_frequency = report;
    let run = start(&f, s, false);
    eventually("registered", || ready_status(&f, "node-quiet")).await;
    let registered_at = Instant::now();
    let heartbeat = |f: &Fixture| {
        condition(&node(f, "node-quiet").unwrap(), "Ready").unwrap()["lastHeartbeatTime"].clone()
    };
    let first_heartbeat = heartbeat(&f);

    // Several periods with nothing changed: the status is read but never patched.
    eventually("a few status computations", || {
        (count(&f, "GET nodes") >= 4).then_some(())
    })
    .await;
    assert_eq!(count(&f, "PATCH nodes/status"), 0);

    // Once the report frequency has passed, the unchanged status is reported again.
    eventually("report after nodeStatusReportFrequency", || {
        (count(&f, "PATCH nodes/status") >= 1).then_some(())
    })
    .await;
    assert!(
        registered_at.elapsed() >= report - PERIOD,
        "patched after {:?}",
        registered_at.elapsed()
    );
    assert_ne!(heartbeat(&f), first_heartbeat, "heartbeat moved");
    assert_eq!(count(&f, "PATCH nodes/status"), 1);

    // A real change is patched at the next period, without waiting for the report.
    let changed_at = Instant::now();
    f.runtime.add_image("nginx:1.25");
    eventually("new image reported", || {
        let n = node(&f, "node-quiet")?;
        (n["status"]["images"].as_array()?.len() == 3).then_some(())
    })
    .await;
    assert!(changed_at.elapsed() < report, "{:?}", changed_at.elapsed());
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_follows_the_runtime_network_condition() {
    let f = fixture().await;
    let run = start(&f, settings("node-net"), false);
    eventually("Ready", || {
        (ready_status(&f, "node-net")? == "True").then_some(())
    })
    .await;

    f.runtime.set_condition(
        "NetworkReady",
        false,
        "NetworkPluginNotReady",
        "Network plugin returns error: cni plugin not initialized",
    );
    let ready = eventually("NotReady", || {
        let c = condition(&node(&f, "node-net")?, "Ready")?;
        (c["status"] == "False").then_some(c)
    })
    .await;
    assert_eq!(ready["reason"], "KubeletNotReady");
    assert_eq!(
        ready["message"],
        "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
    );
    assert_ne!(ready["lastTransitionTime"], Value::Null);

    f.runtime.set_condition("NetworkReady", true, "", "");
    eventually("Ready again", || {
        (ready_status(&f, "node-net")? == "True").then_some(())
    })
    .await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_is_created_with_owner_reference_and_renewed() {
    let f = fixture().await;
    let run = start(&f, settings("node-lease"), true);
    let l = eventually("lease created", || lease(&f, "node-lease")).await;
    let node_uid = node(&f, "node-lease").unwrap()["metadata"]["uid"].clone();
    assert_eq!(
        l["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": "node-lease", "uid": node_uid}])
    );
    assert_eq!(l["spec"]["holderIdentity"], "node-lease");
    assert_eq!(l["spec"]["leaseDurationSeconds"], 40);
    let first = l["spec"]["renewTime"].as_str().unwrap().to_owned();
    let later = eventually("renewTime advances", || {
        renew_time(&f, "node-lease").filter(|t| *t > first)
    })
    .await;
    assert!(later > first);
    assert_eq!(count(&f, "POST leases.coordination.k8s.io"), 1);
    assert!(count(&f, "PUT leases.coordination.k8s.io") >= 1);
    assert!(run.lease.as_ref().unwrap().last_renew().is_some());
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_conflict_is_recovered_by_reading_it_again() {
    let f = fixture().await;
    let run = start(&f, settings("node-conflict"), true);
    eventually("lease renewed once", || {
        (count(&f, "PUT leases.coordination.k8s.io") >= 1).then_some(())
    })
    .await;
    let gets_before = count(&f, "GET leases.coordination.k8s.io");

    // Someone else updates the lease: our cached resourceVersion is now stale.
    let api: kube::Api<Lease> = kube::Api::namespaced(f.client.clone(), "kube-node-lease");
    let mut attempts = 0;
    let other = loop {
        let mut other = api.get("node-conflict").await.unwrap();
        other
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("touched-by".into(), "someone-else".into());
        // The kubelet may renew between our GET and PUT; then just try again.
        match api
            .replace("node-conflict", &Default::default(), &other)
            .await
        {
            Ok(l) => break l,
            Err(e) if attempts < 20 => {
                attempts += 1;
                eprintln!("other writer conflicted: {e}");
            }
            Err(e) => panic!("{e}"),
        }
    };
    let other_rv = other.metadata.resource_version.unwrap();
    let other_renew = renew_time(&f, "node-conflict").unwrap();

    let l = eventually("renewed on top of the other write", || {
        let l = lease(&f, "node-conflict")?;
        let rv = l["metadata"]["resourceVersion"].as_str()?;
        let renewed = l["spec"]["renewTime"].as_str()? > other_renew.as_str();
        (rv != other_rv && renewed).then_some(l)
    })
    .await;
    assert_eq!(
        l["metadata"]["annotations"]["touched-by"], "someone-else",
        "the renewal started from the re-read lease"
    );
    assert!(count(&f, "GET leases.coordination.k8s.io") > gets_before);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_retries_until_the_api_answers() {
    let f = fixture().await;
    f.server.fail_requests(Some(503));
    let run = start(&f, settings("node-late"), true);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(node(&f, "node-late").is_none());
    f.server.fail_requests(None);
    eventually("registered after the API came back", || {
        ready_status(&f, "node-late")
    })
    .await;
    eventually("lease created after registration", || {
        lease(&f, "node-late")
    })
    .await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_lease_converge_after_an_api_outage() {
    let f = fixture().await;
    let run = start(&f, settings("node-outage"), true);
    eventually("lease", || lease(&f, "node-outage")).await;
    eventually("Ready", || {
        (ready_status(&f, "node-outage")? == "True").then_some(())
    })
    .await;

    f.server.fail_requests(Some(503));
    f.runtime.clear_calls();
    f.runtime
        .set_condition("NetworkReady", false, "NetworkPluginNotReady", "cni down");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let renew_during = renew_time(&f, "node-outage").unwrap();
    assert_eq!(ready_status(&f, "node-outage").as_deref(), Some("True"));
    // At most one status computation per period while the API is down (each waits for
    // its bounded API attempts): no busy loop.
    let status_calls = f.runtime.call_count("Status");
    assert!(
        (1..=8).contains(&status_calls),
        "{status_calls} runtime status checks in 1.5 s"
    );

    f.server.fail_requests(None);
    let recovered = Instant::now();
    eventually("status converged", || {
        (ready_status(&f, "node-outage")? == "False").then_some(())
    })
    .await;
    eventually("lease renewed again", || {
        renew_time(&f, "node-outage").filter(|t| *t > renew_during)
    })
    .await;
    assert!(
        recovered.elapsed() < Duration::from_secs(10),
        "converged after {:?}",
        recovered.elapsed()
    );
    run.stop().await;
}

/// `--cloud-provider=external`: the Node registers with upstream's uninitialized taint and the
/// provided-node-ip annotation; addresses the cloud controller manager sets survive the
/// kubelet's later status updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_cloud_provider_registers_tainted_and_keeps_cloud_addresses() {
    use kube::api::{Api, Patch, PatchParams};
    let f = fixture().await;
    let mut s = settings("node-cloud");
    s.external_cloud_provider = true;
    s.provided_node_ip = Some("10.0.0.5".into());
    s.report_frequency = Duration::from_secs(1);
    let run = start(&f, s, false);
    let n = eventually("node registered", || node(&f, "node-cloud")).await;
    assert_eq!(
        n["spec"]["taints"],
        json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}])
    );
    assert_eq!(
        n["metadata"]["annotations"]["alpha.kubernetes.io/provided-node-ip"],
        "10.0.0.5"
    );
    eventually("the kubelet's own addresses", || {
        let n = node(&f, "node-cloud")?;
        (n["status"]["addresses"][0]["address"] == "10.0.0.5").then_some(())
    })
    .await;

    // The cloud controller manager sets the addresses.
    let cloud = json!([{"type": "ExternalIP", "address": "203.0.113.7"}]);
    Api::<Node>::all(f.client.clone())
        .patch_status(
            "node-cloud",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addresses": cloud}})),
        )
        .await
        .unwrap();
    let patched = count(&f, "PATCH nodes/status");
    // The kubelet's next status patch (at the latest after the report frequency) keeps them.
    eventually("a later status patch by the kubelet", || {
        (count(&f, "PATCH nodes/status") > patched).then_some(())
    })
    .await;
    assert_eq!(
        node(&f, "node-cloud").unwrap()["status"]["addresses"],
        cloud
    );
    run.stop().await;
}
