//! Fault matrix row 4 (issue 17): a slow or stuck runtime. The kubelet talks to the shared dev
//! containerd through a CRI proxy in the test (`common/cri_proxy.rs`) that adds latency to every
//! call or holds chosen calls without answering.
//!
//! The runtime is a containerd of the test's own (`dev/runtime.sh`, dev dir
//! /tmp/rkubelet-faults-cri), so the test does not depend on the shared one.
//!
//! What must hold: (4a) with 2 s on every call, pods still start and reach Running (no call
//! exceeds `runtimeRequestTimeout`); (4b) one pod's `CreateContainer` never answers: the kubelet
//! gives up after `runtimeRequestTimeout` (the pod shows `CreateContainerError` with the
//! deadline), retries one call at a time (no pile-up), and a pod created meanwhile reaches
//! Running in normal time; once the runtime answers, the stuck pod runs too; (4c) the runtime's
//! `ListPodSandbox`/`ListContainers` hang: the PLEG turns unhealthy after its relist threshold
//! (`/healthz/pleg` fails; the short form shortens upstream's 3 min with the test-only
//! `RKUBELET_TEST_PLEG_RELIST_THRESHOLD`) and healthy again once the calls answer; (4d) the
//! `StopContainer` of a pod being deleted never answers: the kill ends at its deadline, the
//! sandbox is stopped anyway and the pod goes, while another pod starts; running pods are left
//! alone throughout.

use crate::common;
use crate::common::cri_proxy;

use std::time::{Duration, Instant};

use common::faults;
use common::faults_runtime::OwnContainerd;
use common::{Kubelet, container, pod_containers, running, tail};
use cri_proxy::CriProxy;
use rkubelet_cri::RemoteRuntime;
use serde_json::Value;

const IMAGE: &str = "docker.io/library/busybox:latest";

fn manifest(name: &str, container: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: {container}\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"100000\"]\n"
    )
}

/// Starts pod `name` and waits until its container runs: the time it took.
async fn start_pod(k: &Kubelet, name: &str, container: &str, timeout: Duration) -> Duration {
    let t = Instant::now();
    k.write_manifest(&format!("{name}.yaml"), &manifest(name, container));
    k.wait_pod(name, timeout, "Running", |p| running(p, container))
        .await;
    t.elapsed()
}

fn uid(p: &Value) -> String {
    p["metadata"]["uid"].as_str().unwrap().to_owned()
}

/// The dev dir of this test's own containerd (row 2 has another one).
const DEV_DIR: &str = "/tmp/rkubelet-faults-cri";

/// IDs of the running containers of pod `uid`, straight from containerd.
async fn running_ids(rt: &RemoteRuntime, uid: &str) -> Vec<String> {
    let mut ids: Vec<String> = pod_containers(rt, uid)
        .await
        .into_iter()
        .filter(|c| c.state == rkubelet_cri::api::ContainerState::ContainerRunning as i32)
        .map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

/// The status code of `/healthz/pleg`.
async fn pleg_ok(k: &Kubelet) -> Option<u16> {
    k.get(k.healthz_port, "/healthz/pleg").await.map(|r| r.0)
}

/// Polls `f` every 100 ms until it holds, or panics after `timeout` with the kubelet log.
async fn wait_until<F, Fut>(k: &Kubelet, timeout: Duration, what: &str, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t = Instant::now();
    while !f().await {
        assert!(
            t.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}\nkubelet log tail:\n{}",
            tail(&k.log_text(), 80)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_stuck_runtime() {
    let request_timeout = faults::pick(Duration::from_secs(5), Duration::from_secs(10));
    // Upstream's 3 min in the full form; the short form shortens it (test-only variable).
    let pleg_threshold = faults::pick(Duration::from_secs(10), Duration::from_secs(180));
    let threshold_env = faults::pick(Some("10s"), None);

    let ctd = OwnContainerd::up(DEV_DIR).await;
    let rt = ctd.cri().await;
    let sock_dir = tempfile::tempdir().unwrap();
    let proxy = CriProxy::start(ctd.endpoint(), &sock_dir.path().join("cri-proxy.sock")).await;
    let mut k = Kubelet::new();
    k.append_config(&format!(
        "runtimeRequestTimeout: {}s\n",
        request_timeout.as_secs()
    ));
    let envs: Vec<(&str, &str)> = threshold_env
        .map(|v| ("RKUBELET_TEST_PLEG_RELIST_THRESHOLD", v))
        .into_iter()
        .collect();
    k.start_on(&proxy.endpoint(), &envs);

    // A pod started with a healthy runtime: the baseline start time.
    let baseline = start_pod(&k, "base", "main", Duration::from_secs(60)).await;
    let base = k.pod("base").await.unwrap();
    let base_ids = running_ids(&rt, &uid(&base)).await;
    assert_eq!(base_ids.len(), 1, "{base_ids:?}");

    // 4a: 2 s on every call.
    let n_slow = faults::pick(2, 5);
    proxy.faults.set_latency(Duration::from_secs(2));
    let t = Instant::now();
    for i in 0..n_slow {
        k.write_manifest(
            &format!("slow{i}.yaml"),
            &manifest(&format!("slow{i}"), "main"),
        );
    }
    for i in 0..n_slow {
        k.wait_pod(
            &format!("slow{i}"),
            Duration::from_secs(180),
            "Running under 2 s latency",
            |p| running(p, "main"),
        )
        .await;
    }
    let slow_start = t.elapsed();
    proxy.faults.set_latency(Duration::ZERO);
    assert!(
        !k.log_mentions("deadline exceeded"),
        "a call timed out under 2 s latency with runtimeRequestTimeout {request_timeout:?}:\n{}",
        tail(&k.log_text(), 60)
    );
    faults::report(
        "4a",
        &format!("2 s latency on every CRI call, {n_slow} pods"),
        "pods reach Running, no call times out",
        &format!(
            "{n_slow} pods Running in {:.1} s (baseline pod {:.1} s without latency)",
            slow_start.as_secs_f64(),
            baseline.as_secs_f64()
        ),
    );

    // 4b: the `stuck` pod's CreateContainer never answers.
    proxy.faults.hold("CreateContainer", Some("stuck-ctr"));
    k.write_manifest("stuck.yaml", &manifest("stuck", "stuck-ctr"));
    wait_until(
        &k,
        Duration::from_secs(60),
        "the held CreateContainer",
        || async { proxy.faults.held_total("CreateContainer") >= 1 },
    )
    .await;
    let held_at = Instant::now();
    // Meanwhile a new pod starts as usual.
    let fresh = start_pod(&k, "fresh", "main", Duration::from_secs(60)).await;
    let fresh_bound = baseline.max(Duration::from_secs(5)) * 3;
    assert!(
        fresh <= fresh_bound,
        "pod fresh took {fresh:?} with another pod's CreateContainer stuck (baseline {baseline:?})"
    );
    // The stuck call ends at runtimeRequestTimeout and the pod says why.
    k.wait_pod(
        "stuck",
        request_timeout + Duration::from_secs(20),
        "CreateContainerError with the deadline",
        |p| {
            container(p, "containerStatuses", "stuck-ctr").is_some_and(|c| {
                c["state"]["waiting"]["reason"] == "CreateContainerError"
                    && c["state"]["waiting"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("deadline exceeded"))
            })
        },
    )
    .await;
    let timed_out_after = held_at.elapsed();
    assert!(
        timed_out_after + Duration::from_millis(500) >= request_timeout,
        "CreateContainerError after {timed_out_after:?}, before runtimeRequestTimeout {request_timeout:?}"
    );
    assert!(
        k.log_mentions("CRI CreateContainer: deadline exceeded"),
        "the kubelet log does not name the timed-out call:\n{}",
        tail(&k.log_text(), 60)
    );
    // The kubelet retries (after its back-off), one call at a time.
    wait_until(
        &k,
        request_timeout * 2 + Duration::from_secs(40),
        "a second CreateContainer attempt",
        || async { proxy.faults.held_total("CreateContainer") >= 2 },
    )
    .await;
    assert_eq!(
        proxy.faults.held_max("CreateContainer"),
        1,
        "CreateContainer calls piled up for the stuck pod"
    );
    proxy.faults.release_all();
    k.wait_pod(
        "stuck",
        Duration::from_secs(90),
        "Running once the runtime answers",
        |p| running(p, "stuck-ctr"),
    )
    .await;
    assert_eq!(
        running_ids(&rt, &uid(&base)).await,
        base_ids,
        "pod base was disturbed"
    );
    faults::report(
        "4b",
        &format!(
            "one pod's CreateContainer never answers, runtimeRequestTimeout {} s",
            request_timeout.as_secs()
        ),
        "call times out with CreateContainerError, retried one at a time, other pods start",
        &format!(
            "timed out after {:.1} s; fresh pod Running in {:.1} s meanwhile (baseline {:.1} s); {} attempts, max 1 in flight",
            timed_out_after.as_secs_f64(),
            fresh.as_secs_f64(),
            baseline.as_secs_f64(),
            proxy.faults.held_total("CreateContainer")
        ),
    );

    // 4c: the relist calls hang: the PLEG turns unhealthy after its threshold, then recovers.
    let fresh_uid = uid(&k.pod("fresh").await.unwrap());
    let fresh_ids = running_ids(&rt, &fresh_uid).await;
    assert_eq!(pleg_ok(&k).await, Some(200));
    proxy.faults.hold("ListPodSandbox", None);
    proxy.faults.hold("ListContainers", None);
    let hung_at = Instant::now();
    let unhealthy_after = wait_until(
        &k,
        pleg_threshold + request_timeout + Duration::from_secs(30),
        "/healthz/pleg to fail",
        || async { pleg_ok(&k).await == Some(500) },
    )
    .await;
    let (_, body) = k.get(k.healthz_port, "/healthz/pleg").await.unwrap();
    assert!(body.contains("pleg was last seen active"), "{body}");
    // The threshold runs from the start of the last successful relist, which can precede the
    // hang by up to one relist period (1 s).
    assert!(
        hung_at.elapsed() + Duration::from_secs(1) >= pleg_threshold,
        "PLEG unhealthy after {unhealthy_after:?}, before its threshold {pleg_threshold:?}"
    );
    proxy.faults.release_all();
    let healthy_after = wait_until(
        &k,
        Duration::from_secs(30),
        "/healthz/pleg ok again",
        || async { pleg_ok(&k).await == Some(200) },
    )
    .await;
    assert!(
        healthy_after <= Duration::from_secs(5),
        "PLEG healthy {healthy_after:?} after the runtime answered again"
    );
    assert_eq!(
        running_ids(&rt, &uid(&base)).await,
        base_ids,
        "pod base was disturbed"
    );
    assert_eq!(
        running_ids(&rt, &fresh_uid).await,
        fresh_ids,
        "pod fresh was disturbed"
    );
    faults::report(
        "4c",
        &format!(
            "ListPodSandbox+ListContainers hang, PLEG threshold {} s",
            pleg_threshold.as_secs()
        ),
        "PLEG unhealthy after the threshold, healthy again when answered, pods untouched",
        &format!(
            "/healthz/pleg failed {:.1} s after the hang; ok {:.1} s after release",
            unhealthy_after.as_secs_f64(),
            healthy_after.as_secs_f64()
        ),
    );
    // 4d: deleting pod `stuck`, whose StopContainer never answers: the kill gives up at its
    // deadline (runtimeRequestTimeout + grace), the pod still goes, other pods keep starting.
    let stuck_uid = uid(&k.pod("stuck").await.unwrap());
    let stuck_ids = running_ids(&rt, &stuck_uid).await;
    assert_eq!(stuck_ids.len(), 1, "{stuck_ids:?}");
    proxy.faults.hold("StopContainer", Some(&stuck_ids[0]));
    k.remove_manifest("stuck.yaml");
    let deleted_at = Instant::now();
    wait_until(
        &k,
        Duration::from_secs(30),
        "the held StopContainer",
        || async { proxy.faults.held_total("StopContainer") >= 1 },
    )
    .await;
    let fresh2 = start_pod(&k, "fresh2", "main", Duration::from_secs(60)).await;
    assert!(
        fresh2 <= fresh_bound,
        "pod fresh2 took {fresh2:?} with another pod's StopContainer stuck (baseline {baseline:?})"
    );
    wait_until(
        &k,
        request_timeout * 3 + Duration::from_secs(60),
        "pod stuck gone from /pods and its containers from the runtime",
        || async {
            k.pod("stuck").await.is_none() && pod_containers(&rt, &stuck_uid).await.is_empty()
        },
    )
    .await;
    let removed_after = deleted_at.elapsed();
    assert!(
        removed_after >= request_timeout,
        "pod stuck removed {removed_after:?} after deletion, before its StopContainer's deadline"
    );
    assert!(
        k.log_mentions("CRI StopContainer: deadline exceeded"),
        "the kubelet log does not name the timed-out StopContainer:\n{}",
        tail(&k.log_text(), 60)
    );
    assert!(
        proxy.faults.held_max("StopContainer") <= 1,
        "StopContainer calls piled up"
    );
    proxy.faults.release_all();
    assert_eq!(
        running_ids(&rt, &uid(&base)).await,
        base_ids,
        "pod base was disturbed"
    );
    faults::report(
        "4d",
        "one pod's StopContainer never answers while it is deleted",
        "the kill times out, the pod is still removed, other pods start",
        &format!(
            "pod removed {:.1} s after deletion; fresh pod Running in {:.1} s meanwhile",
            removed_after.as_secs_f64(),
            fresh2.as_secs_f64()
        ),
    );

    // The kubelet (declared after the proxy) stops first, through the proxy.
    drop(k);
    drop(proxy);
    drop(ctd);
}
