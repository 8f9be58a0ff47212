//! Fault matrix row 2 (issue 17): containerd restarted under a running kubelet, with SIGTERM
//! and with SIGKILL (its shims survive), then down for a long outage. Runs on a containerd of
//! its own (`dev/runtime.sh` with dev dir /tmp/rkubelet-faults-rt), never the shared one, in
//! API mode (the fake API server) so the Node's Ready condition can be read.
//!
//! What must hold: the same containers afterwards (IDs via CRI and in the API, restartCount
//! unchanged, same startedAt); the PLEG relists successfully again ≤ 5 s after containerd answers
//! `Version` (observable: `kubelet_pleg_last_seen_seconds` on /metrics moving past its value
//! while containerd was down); during the outage the Node turns `Ready=False` with upstream's
//! message `container runtime is down` (upstream `maxWaitForContainerRuntime`, 30 s) and goes
//! back to `Ready=True` ≤ 10 s after containerd answers again.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::api::{fixture, running_in_api, wait_for};
use common::faults;
use common::faults_runtime::{DEV_DIR, OwnContainerd};
use common::{Kubelet, NODE};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use rkubelet_cri::RuntimeService;
use rkubelet_cri::api::{ContainerState, ListContainersRequest};
use serde_json::json;

const IMAGE: &str = "docker.io/library/busybox:latest";

fn api_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "100000"],
            }],
        },
    }))
    .unwrap()
}

/// Per pod: (containerID, restartCount, startedAt) as the API shows them.
type ApiView = BTreeMap<String, (String, i64, String)>;

fn api_view(server: &FakeApiServer, names: &[String]) -> Option<ApiView> {
    let mut out = BTreeMap::new();
    for n in names {
        let st = running_in_api(server, n)?;
        let c = &st["containerStatuses"][0];
        out.insert(
            n.clone(),
            (
                c["containerID"].as_str()?.to_owned(),
                c["restartCount"].as_i64()?,
                c["state"]["running"]["startedAt"].as_str()?.to_owned(),
            ),
        );
    }
    Some(out)
}

/// IDs of the running containers the runtime has.
async fn running_ids(ctd: &OwnContainerd) -> Vec<String> {
    let mut ids: Vec<String> = ctd
        .cri()
        .await
        .list_containers(ListContainersRequest::default())
        .await
        .expect("ListContainers")
        .containers
        .into_iter()
        .filter(|c| c.state == ContainerState::ContainerRunning as i32)
        .map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

fn node_ready(server: &FakeApiServer) -> Option<(String, String)> {
    let n = server.get("nodes", "", NODE)?;
    let c = n["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .clone();
    Some((
        c["status"].as_str()?.to_owned(),
        c["message"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// Waits (polling every 50 ms) until the PLEG gauge moves past `before`: the time from
/// `answered` to then.
async fn pleg_back(k: &Kubelet, before: u64, answered: Instant) -> Duration {
    loop {
        if k.pleg_last_seen().await.is_some_and(|v| v > before) {
            return answered.elapsed();
        }
        assert!(
            answered.elapsed() < Duration::from_secs(30),
            "the PLEG did not relist within 30 s of containerd answering\n{}",
            common::tail(&k.log_text(), 60)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The gauge while the runtime is down: read after every relist in flight had time to fail.
async fn frozen_pleg(k: &Kubelet) -> u64 {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let v = k
        .pleg_last_seen()
        .await
        .expect("kubelet_pleg_last_seen_seconds");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let again = k
        .pleg_last_seen()
        .await
        .expect("kubelet_pleg_last_seen_seconds");
    assert_eq!(
        v, again,
        "the PLEG still relists successfully with containerd down"
    );
    v
}

/// Same running containers via CRI and, once the statuses are fresh, the same view in the API.
async fn assert_untouched(
    k: &Kubelet,
    server: &FakeApiServer,
    ctd: &OwnContainerd,
    names: &[String],
    ids: &[String],
    view: &ApiView,
    what: &str,
) {
    assert_eq!(
        running_ids(ctd).await,
        ids,
        "{what}: running containers changed"
    );
    // Give the kubelet a few syncs to make a mistake (restart, kill, new sandbox), then compare.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        running_ids(ctd).await,
        ids,
        "{what}: running containers changed"
    );
    let now = wait_for(
        k,
        Duration::from_secs(20),
        "every pod Running in the API",
        || async { api_view(server, names) },
    )
    .await;
    assert_eq!(
        &now, view,
        "{what}: container IDs, restart counts or start times changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_restart_and_outage_leave_pods_alone() {
    let pods_n = faults::pick(8, 30);
    let outage = faults::pick(Duration::from_secs(45), Duration::from_secs(60));
    let ctd = OwnContainerd::up(DEV_DIR).await;
    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    k.extra_args = vec!["--kubeconfig".into(), server.kubeconfig_path.clone().into()];
    // nodeStatusUpdateFrequency stays upstream's 10 s: Ready comes back when the PLEG sees the
    // runtime again, not at the next period.
    k.start_on(ctd.endpoint(), &[]);

    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let names: Vec<String> = (0..pods_n).map(|i| format!("p{i}")).collect();
    for n in &names {
        api.create(&PostParams::default(), &api_pod(n))
            .await
            .unwrap();
    }
    let view = wait_for(
        &k,
        Duration::from_secs(60 + 3 * pods_n as u64),
        "every pod Running in the API",
        || async { api_view(&server, &names) },
    )
    .await;
    let ids = running_ids(&ctd).await;
    assert_eq!(ids.len(), pods_n, "one running container per pod: {ids:?}");
    wait_for(&k, Duration::from_secs(30), "the Node Ready", || async {
        (node_ready(&server)?.0 == "True").then_some(())
    })
    .await;

    // 2a / 2b: a restart with SIGTERM, then one with SIGKILL (the shims must survive both).
    let mut figures = Vec::new();
    for sig in ["TERM", "KILL"] {
        let shims = ctd.shims();
        assert!(
            shims.len() >= pods_n,
            "one shim per pod at least: {shims:?}"
        );
        ctd.kill(sig);
        assert_eq!(
            ctd.shims(),
            shims,
            "SIG{sig} of containerd took shims with it"
        );
        let before = frozen_pleg(&k).await;
        let up = ctd.start();
        let (answered, _) = ctd.wait_answering(Duration::from_secs(30)).await;
        let pleg = pleg_back(&k, before, answered).await;
        up.await.expect("dev/runtime.sh up");
        assert!(
            pleg <= Duration::from_secs(5),
            "SIG{sig}: the PLEG relisted {pleg:?} after containerd answered (> 5 s)"
        );
        let (code, body) = k.healthz().await.expect("GET /healthz");
        assert_eq!(code, 200, "/healthz after SIG{sig}: {body}");
        assert_untouched(&k, &server, &ctd, &names, &ids, &view, &format!("SIG{sig}")).await;
        figures.push((sig, pleg));
    }
    for (row, (sig, pleg)) in ["2a", "2b"].iter().zip(&figures) {
        faults::report(
            row,
            &format!("containerd SIG{sig} + restart, {pods_n} pods"),
            "same container IDs, 0 restarts, shims survive, PLEG relists ≤ 5 s after Version answers",
            &format!(
                "0 restarts; PLEG back {:.1} s after the runtime answered",
                pleg.as_secs_f64()
            ),
        );
    }

    // 2c: containerd down for `outage`: Ready=False with upstream's message, then recovery.
    ctd.kill("KILL");
    let down_at = Instant::now();
    let (_, message) = wait_for(
        &k,
        outage,
        "the Node NotReady while containerd is down",
        || async {
            let (status, message) = node_ready(&server)?;
            (status == "False").then_some(((), message))
        },
    )
    .await;
    let not_ready_after = down_at.elapsed();
    assert_eq!(
        message, "container runtime is down",
        "Ready=False message (upstream's runtimeErrors)"
    );
    // The 30 s run from the last successful status check, up to one status period (10 s)
    // before the kill.
    assert!(
        not_ready_after >= Duration::from_secs(20),
        "NotReady after {not_ready_after:?}, before upstream's 30 s threshold"
    );
    if let Some(rest) = outage.checked_sub(down_at.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    assert_eq!(
        node_ready(&server).map(|r| r.0).as_deref(),
        Some("False"),
        "Ready flipped back while containerd is still down"
    );
    let up = ctd.start();
    let (answered, _) = ctd.wait_answering(Duration::from_secs(30)).await;
    loop {
        if node_ready(&server).is_some_and(|r| r.0 == "True") {
            break;
        }
        assert!(
            answered.elapsed() < Duration::from_secs(30),
            "the Node is not Ready 30 s after containerd answered\n{}",
            common::tail(&k.log_text(), 60)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ready_after = answered.elapsed();
    up.await.expect("dev/runtime.sh up");
    assert!(
        ready_after <= Duration::from_secs(10),
        "Ready=True {ready_after:?} after containerd answered (> 10 s)"
    );
    assert_untouched(&k, &server, &ctd, &names, &ids, &view, "outage").await;
    faults::report(
        "2c",
        &format!(
            "containerd down {} s (SIGKILL), {pods_n} pods",
            outage.as_secs()
        ),
        "Ready=False \"container runtime is down\", pods untouched, Ready=True ≤ 10 s after",
        &format!(
            "NotReady ({message:?}) {:.1} s after the kill; Ready {:.1} s after the runtime answered; 0 restarts",
            not_ready_after.as_secs_f64(),
            ready_after.as_secs_f64()
        ),
    );
    // The kubelet stops first; then `down` removes this containerd's pods (OwnContainerd::drop).
    drop(k);
    drop(ctd);
}
