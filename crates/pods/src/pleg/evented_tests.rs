use rkubelet_cri::fake::FakeRuntime;
use tokio::sync::mpsc;

use super::*;
use crate::container::ContainerState;
use crate::container::cache::PodCache;
use crate::kuberuntime::runtime_status::testutil::{container, pod, run_sandbox, spec};
use crate::pleg::{RELIST_PERIOD, RELIST_THRESHOLD};

use PlegEventKind as K;

fn evented(rt: &FakeRuntime) -> (EventedPleg, PodCache, mpsc::Receiver<PodLifecycleEvent>) {
    let cache = PodCache::new();
    let (tx, rx) = mpsc::channel(100);
    let runtime: Arc<dyn RuntimeService> = Arc::new(rt.clone());
    let generic = GenericPleg::new(runtime, cache.clone(), RELIST_PERIOD, tx);
    (EventedPleg::new(generic), cache, rx)
}

fn cached_state(cache: &PodCache, id: &str) -> Option<ContainerState> {
    let (status, _) = cache.get("u1");
    status?
        .container_statuses
        .iter()
        .find(|c| c.id == id)
        .map(|c| c.state)
}

/// The next event about `id`, within `within` of (paused) time.
async fn next_about(
    rx: &mut mpsc::Receiver<PodLifecycleEvent>,
    id: &str,
    within: Duration,
) -> Option<PlegEventKind> {
    tokio::time::timeout(within, async {
        loop {
            let e = rx.recv().await?;
            if e.container_id.as_deref() == Some(id) {
                return Some(e.kind);
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// Less than the relist period: an event this fast came from the stream, not a relist.
const FAST: Duration = Duration::from_millis(300);

/// Waits (in paused time) until `cond` holds, for at most `limit`.
async fn wait_until(limit: Duration, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "condition not met within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn container_events_reach_the_sync_loop_with_the_cache_updated_first() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    rt.serve_container_events();
    let (pleg, cache, mut rx) = evented(&rt);
    let health = pleg.generic.health();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(pleg.run(cancel.clone()));
    wait_until(FAST, || rt.open_event_streams() == 1).await;

    let p = pod("u1", "web");
    let sb = run_sandbox(&rt, &p, 0, false).await;
    assert_eq!(
        next_about(&mut rx, &sb, FAST).await,
        Some(K::ContainerStarted)
    );
    let c = container(&rt, &sb, &p, &spec("app"), 0, true).await;
    assert_eq!(
        next_about(&mut rx, &c, FAST).await,
        Some(K::ContainerStarted)
    );
    assert_eq!(
        cached_state(&cache, &c),
        Some(ContainerState::Running),
        "the woken reader sees the new state"
    );

    // Idle: no relisting every second while events flow, and the PLEG stays healthy.
    let lists = rt.call_count("ListPodSandbox");
    tokio::time::sleep(Duration::from_secs(200)).await;
    assert_eq!(rt.call_count("ListPodSandbox"), lists, "no relist in 200 s");
    assert_eq!(health.healthy(), Ok(()));
    tokio::time::sleep(EVENTED_RELIST_PERIOD).await;
    assert!(
        rt.call_count("ListPodSandbox") > lists,
        "the fallback relist still runs every 300 s"
    );

    // (That relist started from its own records and repeated the start: harmless.)
    while rx.try_recv().is_ok() {}
    rt.exit_container(&c, 2);
    assert_eq!(next_about(&mut rx, &c, FAST).await, Some(K::ContainerDied));
    assert_eq!(cached_state(&cache, &c), Some(ContainerState::Exited));

    rt.remove_container(api::RemoveContainerRequest {
        container_id: c.clone(),
    })
    .await
    .unwrap();
    assert_eq!(next_about(&mut rx, &c, FAST).await, Some(K::ContainerDied));
    assert_eq!(
        rx.recv().await.map(|e| e.kind),
        Some(K::ContainerRemoved),
        "a deleted container is reported dead, then removed"
    );
    assert_eq!(cached_state(&cache, &c), None);
    rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: sb.clone(),
    })
    .await
    .unwrap();
    wait_until(FAST, || cache.is_empty()).await;
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lost_stream_falls_back_to_relisting_then_returns_to_events() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    rt.serve_container_events();
    let p = pod("u1", "web");
    let sb = run_sandbox(&rt, &p, 0, false).await;
    let a = container(&rt, &sb, &p, &spec("a"), 0, true).await;
    let b = container(&rt, &sb, &p, &spec("b"), 0, true).await;
    let (pleg, cache, mut rx) = evented(&rt);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(pleg.run(cancel.clone()));
    wait_until(FAST, || rt.open_event_streams() == 1).await;
    while rx.try_recv().is_ok() {}

    // The stream ends and cannot be re-opened at once.
    rt.fail_next(
        "GetContainerEvents",
        CriError::unknown("GetContainerEvents", "not now"),
    );
    rt.end_event_streams(None);
    wait_until(Duration::from_secs(2), || {
        rt.call_count("GetContainerEvents") == 2
    })
    .await;
    assert_eq!(rt.open_event_streams(), 0);
    // Meanwhile the relist (every second) reports what happens.
    rt.exit_container(&a, 1);
    assert_eq!(
        next_about(&mut rx, &a, Duration::from_millis(1100)).await,
        Some(K::ContainerDied),
        "the fallback relist sees the exit within a relist period"
    );
    assert_eq!(cached_state(&cache, &a), Some(ContainerState::Exited));

    // The second attempt (after the doubled backoff) opens it again: back to events.
    wait_until(Duration::from_secs(3), || rt.open_event_streams() == 1).await;
    assert_eq!(rt.call_count("GetContainerEvents"), 3, "no retry storm");
    while rx.try_recv().is_ok() {}
    let lists = rt.call_count("ListPodSandbox");
    rt.exit_container(&b, 1);
    assert_eq!(next_about(&mut rx, &b, FAST).await, Some(K::ContainerDied));
    tokio::time::sleep(Duration::from_secs(60)).await;
    // The open was answered with b's event (as containerd answers it): one catch-up relist,
    // the event's own inspection, and at most one relist while the open was pending; then
    // nothing for the rest of the minute.
    assert!(
        rt.call_count("ListPodSandbox") <= lists + 3,
        "back on events: no more relisting every second ({} lists)",
        rt.call_count("ListPodSandbox") - lists
    );
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_runtime_restart_resyncs_and_goes_back_to_events() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    rt.serve_container_events();
    let p = pod("u1", "web");
    let sb = run_sandbox(&rt, &p, 0, false).await;
    let a = container(&rt, &sb, &p, &spec("a"), 0, true).await;
    let (pleg, cache, mut rx) = evented(&rt);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(pleg.run(cancel.clone()));
    wait_until(FAST, || rt.open_event_streams() == 1).await;
    while rx.try_recv().is_ok() {}

    // The runtime goes away: the stream breaks, nothing answers for a while.
    let down = |m: &'static str| CriError::unavailable(m, "/run/fake.sock", "connection refused");
    for _ in 0..3 {
        rt.fail_next("GetContainerEvents", down("GetContainerEvents"));
        rt.fail_next("ListPodSandbox", down("ListPodSandbox"));
    }
    rt.end_event_streams(Some(down("GetContainerEvents")));
    // While it is down the container dies; no event is ever sent for it on a stream.
    wait_until(Duration::from_secs(2), || {
        rt.call_count("GetContainerEvents") >= 2
    })
    .await;
    assert_eq!(rt.open_event_streams(), 0);
    rt.exit_container(&a, 1);
    // The re-sync after the restart reports it, and the stream is open again.
    assert_eq!(
        next_about(&mut rx, &a, Duration::from_secs(20)).await,
        Some(K::ContainerDied)
    );
    assert_eq!(cached_state(&cache, &a), Some(ContainerState::Exited));
    wait_until(Duration::from_secs(40), || rt.open_event_streams() == 1).await;
    let opens = rt.call_count("GetContainerEvents");
    assert!(opens <= 6, "backoff, not a retry storm: {opens} opens");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn unimplemented_falls_back_at_once_and_logs_once() {
    let capture = crate::log_capture::LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // The fake answers Unimplemented by default, as containerd 1.6 does.
    let rt = FakeRuntime::with_images(&["busybox"]);
    let p = pod("u1", "web");
    let sb = run_sandbox(&rt, &p, 0, false).await;
    let c = container(&rt, &sb, &p, &spec("app"), 0, true).await;
    let (pleg, cache, mut rx) = evented(&rt);
    let health = pleg.generic.health();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(pleg.run(cancel.clone()));
    assert_eq!(
        next_about(&mut rx, &c, FAST).await,
        Some(K::ContainerStarted)
    );

    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        rt.call_count("GetContainerEvents"),
        1,
        "asked once, never again"
    );
    assert!(
        rt.call_count("ListPodSandbox") >= 100,
        "relisting every second: {}",
        rt.call_count("ListPodSandbox")
    );
    rt.exit_container(&c, 0);
    assert_eq!(
        next_about(&mut rx, &c, Duration::from_millis(1100)).await,
        Some(K::ContainerDied)
    );
    assert_eq!(cached_state(&cache, &c), Some(ContainerState::Exited));
    assert_eq!(health.healthy(), Ok(()));
    assert!(RELIST_THRESHOLD > RELIST_PERIOD);
    cancel.cancel();
    task.await.unwrap();

    let logs = capture.text();
    let lines: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("does not serve GetContainerEvents"))
        .collect();
    assert_eq!(lines.len(), 1, "{logs}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(
        lines[0].contains("unknown method GetContainerEvents"),
        "reason: {}",
        lines[0]
    );
}

/// kubernetes#121003 / #121349 / #123087: a pod worker that created and started a container
/// must never be handed a status without it, or with it still `CREATED`, after its sync —
/// that is what made upstream's evented PLEG start the container twice. Upstream writes the
/// event's own (older) status into the cache and bumps the cache's global time every 2 s; a
/// worker waiting for "newer than my last sync" then wakes on the stale entry.
#[tokio::test(start_paused = true)]
async fn a_worker_is_never_woken_with_a_status_older_than_its_sync() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    rt.serve_container_events();
    let p = pod("u1", "web");
    let sb = run_sandbox(&rt, &p, 0, false).await;
    let (mut pleg, cache, _rx) = evented(&rt);
    pleg.generic.relist().await.unwrap();
    // The open is answered with the first event, as containerd's.
    let open = tokio::spawn({
        let rt = rt.clone();
        async move {
            rt.get_container_events(api::GetEventsRequest::default())
                .await
        }
    });
    wait_until(Duration::from_secs(1), || rt.open_event_streams() == 1).await;

    // The worker's sync: create the container; its CREATED event is handled mid-sync.
    let c = container(&rt, &sb, &p, &spec("app"), 0, false).await;
    let mut stream = open.await.unwrap().unwrap();
    let created = stream.next().await.unwrap().unwrap();
    assert_eq!(
        created.container_event_type,
        ContainerEventType::ContainerCreatedEvent as i32
    );
    tokio::time::advance(Duration::from_millis(5)).await;
    pleg.handle_event(created.clone()).await;
    assert_eq!(cached_state(&cache, &c), Some(ContainerState::Created));
    tokio::time::advance(Duration::from_millis(5)).await;
    rt.start_container(api::StartContainerRequest {
        container_id: c.clone(),
    })
    .await
    .unwrap();
    tokio::time::advance(Duration::from_millis(5)).await;
    let last_sync = Instant::now();

    // Its next round waits for data newer than its sync; the mid-sync entry (Created) must
    // not satisfy it, however long it waits (upstream's global bump came after 2 s).
    let waiting = tokio::time::timeout(
        Duration::from_secs(10),
        cache.get_newer_than("u1", last_sync),
    )
    .await;
    assert!(waiting.is_err(), "woken with a stale status: {waiting:?}");

    // A late-delivered copy of the CREATED event is re-inspected, not trusted: the cache
    // then holds the running container, and that is what the worker gets.
    pleg.handle_event(created).await;
    let status = cache.get_newer_than("u1", last_sync).await.unwrap();
    let states: Vec<ContainerState> = status.container_statuses.iter().map(|c| c.state).collect();
    assert_eq!(states, vec![ContainerState::Running]);
    assert_eq!(rt.containers().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn hostile_events_are_ignored_without_touching_the_cache() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    let (mut pleg, cache, mut rx) = evented(&rt);
    let no_sandbox = api::ContainerEventResponse {
        container_id: "x".into(),
        container_event_type: ContainerEventType::ContainerStartedEvent as i32,
        ..Default::default()
    };
    pleg.handle_event(no_sandbox).await;
    let bad_type = api::ContainerEventResponse {
        container_id: "x".into(),
        container_event_type: 99,
        pod_sandbox_status: Some(api::PodSandboxStatus {
            metadata: Some(api::PodSandboxMetadata {
                uid: "u1".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    pleg.handle_event(bad_type).await;
    let no_uid = api::ContainerEventResponse {
        container_id: "x".into(),
        pod_sandbox_status: Some(api::PodSandboxStatus {
            metadata: Some(api::PodSandboxMetadata::default()),
            ..Default::default()
        }),
        ..Default::default()
    };
    pleg.handle_event(no_uid).await;
    assert!(rx.try_recv().is_err(), "no lifecycle event");
    assert!(cache.is_empty());
    assert_eq!(rt.call_count("ListPodSandbox"), 0, "nothing inspected");
}

/// The same race through the running PLEG: the container is created (its CREATED event
/// handled), started, and the worker's sync ends while the STARTED event's inspection is still
/// slow in coming. The worker must get the running container, not the `CREATED` entry that a
/// periodic bump of the cache's global time (upstream) would hand it.
#[tokio::test(start_paused = true)]
async fn a_worker_waiting_after_its_sync_gets_the_started_container() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    rt.serve_container_events();
    let p = pod("u1", "web");
    let sb = run_sandbox(&rt, &p, 0, false).await;
    let (pleg, cache, _rx) = evented(&rt);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(pleg.run(cancel.clone()));
    wait_until(FAST, || rt.open_event_streams() == 1).await;

    let c = container(&rt, &sb, &p, &spec("app"), 0, false).await;
    wait_until(FAST, || {
        cached_state(&cache, &c) == Some(ContainerState::Created)
    })
    .await;
    rt.set_latency("ContainerStatus", Duration::from_secs(3));
    rt.start_container(api::StartContainerRequest {
        container_id: c.clone(),
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let last_sync = Instant::now();

    // Within a few relist periods (the inspections take 3 s each here), not at the 300 s
    // fallback relist.
    let status = tokio::time::timeout(
        Duration::from_secs(10),
        cache.get_newer_than("u1", last_sync),
    )
    .await
    .expect("a waiting worker gets a fresh status from a relist")
    .unwrap();
    let states: Vec<ContainerState> = status.container_statuses.iter().map(|c| c.state).collect();
    assert_eq!(states, vec![ContainerState::Running]);
    cancel.cancel();
    task.await.unwrap();
}

/// containerd answers the open of the event stream only with the first event (found on the
/// real node: the guest test `evented-pleg` hung with no pod ever started). Until the open is
/// answered the relist runs at its period and the PLEG stays healthy; the stream is used once
/// it opens.
#[tokio::test(start_paused = true)]
async fn an_unanswered_open_does_not_hold_up_the_relist() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    rt.serve_container_events();
    // The open is not answered for an hour (no subscriber meanwhile: nothing is streamed).
    rt.set_latency("GetContainerEvents", Duration::from_secs(3600));
    let p = pod("u1", "web");
    let sb = run_sandbox(&rt, &p, 0, false).await;
    let (pleg, _cache, mut rx) = evented(&rt);
    let health = pleg.generic.health();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(pleg.run(cancel.clone()));
    let c = container(&rt, &sb, &p, &spec("app"), 0, true).await;
    assert_eq!(
        next_about(&mut rx, &c, RELIST_PERIOD * 3).await,
        Some(K::ContainerStarted),
        "the relist saw the container while the open was pending"
    );
    tokio::time::sleep(RELIST_THRESHOLD).await;
    assert_eq!(health.healthy(), Ok(()));
    let lists = rt.call_count("ListPodSandbox");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        rt.call_count("ListPodSandbox") >= lists + 5,
        "relisting every period while the open is pending"
    );
    cancel.cancel();
    task.await.unwrap();
}
