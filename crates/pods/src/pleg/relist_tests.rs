//! Cost tests of the relisting PLEG (CRI calls per relist, per-pod refreshes, concurrent
//! inspections) on the fake runtime: counts and paused-clock durations, never wall-clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::fake::FakeRuntime;
use rkubelet_cri::{CriError, RuntimeService};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::kuberuntime::runtime_status::testutil::{
    container, pod, run_sandbox, spec, stop_sandbox,
};

struct Fixture {
    rt: FakeRuntime,
    pleg: GenericPleg,
    cache: PodCache,
    rx: mpsc::Receiver<PodLifecycleEvent>,
}

fn fixture(relist_period: Duration) -> Fixture {
    let rt = FakeRuntime::with_images(&["busybox"]);
    let cache = PodCache::new();
    let (tx, rx) = mpsc::channel(10_000);
    let dyn_rt: Arc<dyn RuntimeService> = Arc::new(rt.clone());
    let pleg = GenericPleg::new(dyn_rt, cache.clone(), relist_period, tx);
    Fixture {
        rt,
        pleg,
        cache,
        rx,
    }
}

/// `n` pods `u000`…, each with a ready sandbox and one running container; returns the pods
/// with their sandbox IDs.
async fn running_pods(rt: &FakeRuntime, n: usize) -> Vec<(Pod, String)> {
    let mut pods = Vec::with_capacity(n);
    for i in 0..n {
        let p = pod(&format!("u{i:03}"), &format!("web-{i}"));
        let sb = run_sandbox(rt, &p, 0, false).await;
        container(rt, &sb, &p, &spec("app"), 0, true).await;
        pods.push((p, sb));
    }
    pods
}

fn drain(rx: &mut mpsc::Receiver<PodLifecycleEvent>) -> Vec<PodLifecycleEvent> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

fn sorted_calls(rt: &FakeRuntime) -> Vec<String> {
    let mut calls = rt.calls();
    calls.sort();
    calls
}

fn request(uid: &str) -> BTreeMap<PodUid, (String, String)> {
    BTreeMap::from([(uid.to_string(), ("web".to_string(), "default".to_string()))])
}

#[tokio::test(start_paused = true)]
async fn an_idle_relist_of_110_pods_costs_two_listings_and_no_pod_work() {
    let mut f = fixture(RELIST_PERIOD);
    let pods = running_pods(&f.rt, 110).await;
    f.pleg.relist().await.unwrap();
    assert_eq!(
        drain(&mut f.rx).len(),
        220,
        "a sandbox and a container per pod"
    );
    assert_eq!(f.cache.len(), 110);
    assert_eq!(f.rt.call_count("ContainerStatus"), 110);

    // A sentinel in the cache shows whether an idle relist rewrites a pod's entry.
    f.cache
        .set("u007", Err("sentinel".to_string()), Instant::now());
    f.rt.clear_calls();
    for _ in 0..5 {
        tokio::time::advance(RELIST_PERIOD).await;
        f.pleg.relist().await.unwrap();
    }
    assert_eq!(
        f.rt.calls(),
        ["ListPodSandbox", "ListContainers"].repeat(5),
        "nothing changed: one listing of each kind per relist, nothing per pod"
    );
    assert!(drain(&mut f.rx).is_empty());
    assert_eq!(
        f.cache.get("u007").1.as_deref(),
        Some("sentinel"),
        "no pod's cache entry is rewritten"
    );
    assert!(f.pleg.to_reinspect.is_empty());

    // One pod changes: only that pod is inspected.
    let (p, sb) = &pods[42];
    let extra = container(&f.rt, sb, p, &spec("sidecar"), 0, true).await;
    f.rt.clear_calls();
    f.pleg.relist().await.unwrap();
    assert_eq!(
        sorted_calls(&f.rt),
        [
            "ContainerStatus",
            "ContainerStatus",
            "ListContainers",
            "ListContainers",
            "ListPodSandbox",
            "ListPodSandbox",
            "PodSandboxStatus",
        ],
        "two listings plus one pod's inspection"
    );
    let events = drain(&mut f.rx);
    assert_eq!(events.len(), 1);
    assert_eq!(
        (
            events[0].uid.as_str(),
            events[0].kind,
            events[0].container_id.as_deref()
        ),
        (
            "u042",
            PlegEventKind::ContainerStarted,
            Some(extra.as_str())
        )
    );
}

#[tokio::test(start_paused = true)]
async fn a_pod_refresh_costs_only_that_pods_calls_and_the_next_relist_repeats_nothing() {
    let mut f = fixture(RELIST_PERIOD);
    let pods = running_pods(&f.rt, 3).await;
    f.pleg.relist().await.unwrap();
    drain(&mut f.rx);

    let (p, sb) = &pods[1];
    let started = container(&f.rt, sb, p, &spec("sidecar"), 0, true).await;
    let created = container(&f.rt, sb, p, &spec("late"), 0, false).await;
    f.rt.clear_calls();
    f.pleg.refresh_pods(request("u001")).await;
    assert_eq!(
        sorted_calls(&f.rt),
        [
            "ContainerStatus",
            "ContainerStatus",
            "ContainerStatus",
            "ListContainers",
            "ListPodSandbox",
            "PodSandboxStatus",
        ],
        "one pod's filtered listings and statuses, no listing of the whole runtime"
    );
    let events = drain(&mut f.rx);
    assert_eq!(
        events,
        vec![PodLifecycleEvent {
            uid: "u001".into(),
            kind: PlegEventKind::ContainerStarted,
            container_id: Some(started.clone()),
        }],
        "the events a relist would send (a created container is not news)"
    );
    let status = f.cache.get("u001").0.unwrap();
    let state = |id: &str| {
        status
            .container_statuses
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.state)
    };
    assert_eq!(state(&started), Some(ContainerState::Running));
    assert_eq!(state(&created), Some(ContainerState::Created));
    assert_eq!(status.ips.len(), 1);

    f.rt.clear_calls();
    f.pleg.relist().await.unwrap();
    assert!(drain(&mut f.rx).is_empty(), "no event is sent twice");
    assert_eq!(f.rt.calls(), ["ListPodSandbox", "ListContainers"]);

    // The pod's change after the refresh is still the relist's news.
    f.rt.exit_container(&started, 2);
    f.pleg.relist().await.unwrap();
    let events = drain(&mut f.rx);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, PlegEventKind::ContainerDied);
}

#[tokio::test(start_paused = true)]
async fn a_refresh_answers_a_waiting_pod_worker_even_without_a_state_change() {
    let mut f = fixture(RELIST_PERIOD);
    running_pods(&f.rt, 1).await;
    f.pleg.relist().await.unwrap();
    drain(&mut f.rx);
    tokio::time::advance(Duration::from_millis(10)).await;
    let sync_start = Instant::now();
    // The sync changes the runtime (it takes a moment), then asks for the refresh.
    tokio::time::advance(Duration::from_millis(1)).await;
    let before =
        tokio::time::timeout(Duration::ZERO, f.cache.get_newer_than("u000", sync_start)).await;
    assert!(before.is_err(), "the worker waits for news");
    f.pleg.refresh_pods(request("u000")).await;
    let fresh =
        tokio::time::timeout(Duration::ZERO, f.cache.get_newer_than("u000", sync_start)).await;
    assert!(fresh.is_ok(), "the pod's entry is as new as the refresh");
    assert!(drain(&mut f.rx).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_refresh_of_a_pod_that_is_gone_deletes_it_like_a_relist() {
    let mut f = fixture(RELIST_PERIOD);
    let pods = running_pods(&f.rt, 2).await;
    f.pleg.relist().await.unwrap();
    drain(&mut f.rx);
    let (_, sb) = &pods[0];
    for c in f.rt.containers() {
        if c.pod_sandbox_id == *sb {
            f.rt.exit_container(&c.id, 0);
            f.rt.remove_container(rkubelet_cri::api::RemoveContainerRequest {
                container_id: c.id.clone(),
            })
            .await
            .unwrap();
        }
    }
    f.rt.remove_pod_sandbox(rkubelet_cri::api::RemovePodSandboxRequest {
        pod_sandbox_id: sb.clone(),
    })
    .await
    .unwrap();
    f.pleg.refresh_pods(request("u000")).await;
    let kinds: Vec<PlegEventKind> = drain(&mut f.rx).iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            PlegEventKind::ContainerDied,
            PlegEventKind::ContainerRemoved,
            PlegEventKind::ContainerDied,
            PlegEventKind::ContainerRemoved,
        ]
    );
    assert_eq!(f.cache.len(), 1, "the gone pod's entry is deleted");
    assert!(!f.pleg.records.contains_key("u000"));
    f.pleg.relist().await.unwrap();
    assert!(
        drain(&mut f.rx).is_empty(),
        "and the relist repeats nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_refresh_is_retried_by_the_next_relist() {
    let mut f = fixture(RELIST_PERIOD);
    let pods = running_pods(&f.rt, 2).await;
    f.pleg.relist().await.unwrap();
    drain(&mut f.rx);
    let (p, sb) = &pods[0];
    let c = container(&f.rt, sb, p, &spec("sidecar"), 0, true).await;
    f.rt.fail_next(
        "PodSandboxStatus",
        CriError::unknown("PodSandboxStatus", "boom"),
    );
    f.pleg.refresh_pods(request("u000")).await;
    assert!(drain(&mut f.rx).is_empty(), "no events without a status");
    assert!(f.cache.get("u000").1.is_some_and(|e| e.contains("boom")));

    f.pleg.relist().await.unwrap();
    let events = drain(&mut f.rx);
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].kind, events[0].container_id.as_deref()),
        (PlegEventKind::ContainerStarted, Some(c.as_str()))
    );
    assert!(f.cache.get("u000").0.is_some());
    assert!(f.pleg.to_reinspect.is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_trigger_refreshes_one_pod_and_a_full_request_wins() {
    let f = fixture(Duration::from_secs(3600));
    let Fixture {
        rt,
        pleg,
        cache,
        mut rx,
    } = f;
    let pods = running_pods(&rt, 5).await;
    let trigger = pleg.relist_trigger();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(pleg.run(cancel.clone()));
    // The first tick relists at once.
    for _ in 0..10 {
        rx.recv().await.unwrap();
    }

    let (p, sb) = &pods[3];
    let c = container(&rt, sb, p, &spec("sidecar"), 0, true).await;
    rt.clear_calls();
    trigger.request_pod("u003", "web-3", "default");
    let event = rx.recv().await.unwrap();
    assert_eq!(
        (event.uid.as_str(), event.container_id.as_deref()),
        ("u003", Some(c.as_str()))
    );
    assert_eq!(
        rt.call_count("ListPodSandbox"),
        1,
        "the pod's own listing only"
    );
    assert_eq!(rt.call_count("ContainerStatus"), 2);
    assert_eq!(
        cache.get("u003").0.unwrap().container_statuses.len(),
        2,
        "the woken reader sees the new container"
    );

    // Requests coalesce; a full one among them makes it a relist, which serves the pods too.
    let (p, sb) = &pods[0];
    let c0 = container(&rt, sb, p, &spec("sidecar"), 0, true).await;
    rt.clear_calls();
    trigger.request_pod("u000", "web-0", "default");
    trigger.request_pod("u001", "web-1", "default");
    trigger.request();
    let event = rx.recv().await.unwrap();
    assert_eq!(event.container_id.as_deref(), Some(c0.as_str()));
    assert_eq!(
        rt.call_count("ListPodSandbox"),
        2,
        "one relist: the full listing plus u000's inspection, nothing for u001"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(rx.try_recv().is_err());
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn changed_pods_are_inspected_concurrently() {
    let mut f = fixture(RELIST_PERIOD);
    let pods = running_pods(&f.rt, 250).await;
    f.pleg.relist().await.unwrap();
    drain(&mut f.rx);
    let latency = Duration::from_millis(100);
    for method in [
        "ListPodSandbox",
        "ListContainers",
        "PodSandboxStatus",
        "ContainerStatus",
    ] {
        f.rt.set_latency(method, latency);
    }
    for (p, sb) in pods.iter().step_by(5) {
        container(&f.rt, sb, p, &spec("sidecar"), 0, true).await;
    }
    f.rt.clear_calls();
    let start = Instant::now();
    f.pleg.relist().await.unwrap();
    let took = start.elapsed();
    assert_eq!(drain(&mut f.rx).len(), 50);
    assert_eq!(f.rt.call_count("ContainerStatus"), 100);
    // Two full listings, then 50 pods 16 at a time (4 waves), each a round of listings and a
    // round of statuses: 10 latencies. One pod after the other would take 2 + 50 × 4 = 202.
    assert_eq!(took, latency * 10, "took {took:?}");
}

/// Creates a container of `pod` in `sandbox` whose termination message path is backed by
/// `host_path` (as a kubelet mount would), starts it and lets it exit with `exit_code`.
async fn exited_with_message_file(
    rt: &FakeRuntime,
    sandbox: &str,
    p: &Pod,
    host_path: &std::path::Path,
    exit_code: i32,
) -> String {
    use crate::kuberuntime::labels::{container_annotations, container_labels};
    let c = spec("app");
    let id = rt
        .create_container(rkubelet_cri::api::CreateContainerRequest {
            pod_sandbox_id: sandbox.into(),
            config: Some(rkubelet_cri::api::ContainerConfig {
                metadata: Some(rkubelet_cri::api::ContainerMetadata {
                    name: c.name.clone(),
                    attempt: 0,
                }),
                image: Some(rkubelet_cri::api::ImageSpec {
                    image: "busybox".into(),
                    ..Default::default()
                }),
                labels: container_labels(&c, p),
                annotations: container_annotations(&c, p, 0, 0xabc),
                mounts: vec![rkubelet_cri::api::Mount {
                    container_path: "/dev/termination-log".into(),
                    host_path: host_path.display().to_string(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            sandbox_config: None,
        })
        .await
        .unwrap()
        .container_id;
    rt.start_container(rkubelet_cri::api::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    assert!(rt.exit_container(&id, exit_code));
    id
}

/// A container whose termination message path is a FIFO (made by an init container in an
/// emptyDir and mounted with a subPath) used to hang the relist for good: the message was
/// opened with a blocking `open`. Now it is refused, and every pod's events flow.
#[tokio::test]
async fn a_fifo_termination_message_does_not_stall_the_relist() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let mut f = fixture(RELIST_PERIOD);
    let hostile = pod("u-fifo", "hostile");
    let hostile_sb = run_sandbox(&f.rt, &hostile, 0, false).await;
    let hostile_c = exited_with_message_file(&f.rt, &hostile_sb, &hostile, &fifo, 3).await;
    let bystander = pod("u-ok", "bystander");
    let bystander_sb = run_sandbox(&f.rt, &bystander, 0, false).await;
    let bystander_c = container(&f.rt, &bystander_sb, &bystander, &spec("app"), 0, true).await;

    if tokio::time::timeout(Duration::from_secs(5), f.pleg.relist())
        .await
        .is_err()
    {
        // Let the blocked reader go, so the test fails instead of hanging.
        let _ = rustix::fs::open(
            &fifo,
            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NONBLOCK,
            rustix::fs::Mode::empty(),
        );
        panic!("the relist hung on the FIFO at the termination message path");
    }
    let events = drain(&mut f.rx);
    let has = |id: &str, kind: PlegEventKind| {
        events
            .iter()
            .any(|e| e.container_id.as_deref() == Some(id) && e.kind == kind)
    };
    assert!(has(&hostile_c, PlegEventKind::ContainerDied), "{events:?}");
    assert!(
        has(&bystander_c, PlegEventKind::ContainerStarted),
        "{events:?}"
    );
    let (status, err) = f.cache.get("u-fifo");
    assert_eq!(err, None);
    let status = status.unwrap();
    let c = status.find_container("app").unwrap();
    assert_eq!(c.exit_code, 3);
    assert!(
        c.message.contains("not a regular file but a FIFO"),
        "{}",
        c.message
    );
    assert!(f.cache.get("u-ok").0.is_some());
}

/// A pod whose inspection does not answer (here: every `ContainerStatus` takes an hour) is
/// given up after `POD_INSPECTION_TIMEOUT`; the other pods' events flow in that relist, and
/// the slow pod's in the next relist that can inspect it.
#[tokio::test(start_paused = true)]
async fn one_pods_slow_inspection_does_not_hold_back_the_others() {
    let mut f = fixture(RELIST_PERIOD);
    let slow = pod("u-slow", "slow");
    let slow_sb = run_sandbox(&f.rt, &slow, 0, false).await;
    let slow_c = container(&f.rt, &slow_sb, &slow, &spec("app"), 0, true).await;
    // A pod with a sandbox only: its inspection never asks for a container status.
    let quick = pod("u-quick", "quick");
    let quick_sb = run_sandbox(&f.rt, &quick, 0, false).await;
    f.pleg.relist().await.unwrap();
    drain(&mut f.rx);

    f.rt.set_latency("ContainerStatus", Duration::from_secs(3600));
    assert!(f.rt.exit_container(&slow_c, 1));
    stop_sandbox(&f.rt, &quick_sb).await;
    let started = Instant::now();
    f.pleg.relist().await.unwrap();
    let took = started.elapsed();
    assert!(
        took <= POD_INSPECTION_TIMEOUT + Duration::from_secs(1),
        "the relist waited {took:?} for the slow pod"
    );
    let events = drain(&mut f.rx);
    assert_eq!(
        events
            .iter()
            .map(|e| (e.uid.as_str(), e.kind))
            .collect::<Vec<_>>(),
        vec![("u-quick", PlegEventKind::ContainerDied)],
        "only the quick pod's event; the slow pod's waits for its inspection"
    );
    let (_, err) = f.cache.get("u-slow");
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("no answer within 10s")),
        "{err:?}"
    );

    // Once the runtime answers again, the next relist re-inspects the slow pod.
    f.rt.set_latency("ContainerStatus", Duration::ZERO);
    f.pleg.relist().await.unwrap();
    let events = drain(&mut f.rx);
    assert!(
        events.iter().any(|e| e.uid == "u-slow"
            && e.kind == PlegEventKind::ContainerDied
            && e.container_id.as_deref() == Some(slow_c.as_str())),
        "{events:?}"
    );
}
