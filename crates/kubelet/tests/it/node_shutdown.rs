//! Graceful node shutdown end to end: the whole agent on the fake runtime, the fake API
//! server, a private `dbus-daemon` and the test logind of `node_shutdown/logind.rs` (real
//! D-Bus, real time). The kubelet raises logind's `InhibitDelayMaxSec` through its drop-in,
//! holds a delay lock, and on `PrepareForShutdown(true)` marks the Node NotReady, refuses new
//! pods, stops pods by priority (lowest first, each group within its budget) with their final
//! status in the API before the group's budget ends, and releases the lock; on
//! `PrepareForShutdown(false)` it is Ready again and holds a new lock. When logind is missing
//! or its delay cannot cover the grace period the kubelet says so loudly (Warning event on the
//! Node, `kubelet_graceful_shutdown_*` gauges). Forged and malformed signals are ignored; a
//! restarted bus is watched again.

use crate::common;
mod logind;

use std::collections::HashMap;
use std::time::Duration;

use common::dbus::BusDaemon;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use kubelet::nodeshutdown::{NodeShutdownSettings, PriorityBudget};
use logind::FakeLogind;
use rkubelet_cri::fake::FakeRuntime;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NODE: &str = "shutdown-node";
const IMAGE: &str = "docker.io/library/busybox:latest";
const NS: &str = "default";
/// Each group's budget in the end-to-end test (seconds).
const BUDGET: i64 = 6;
const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// (pod name, priority); the container of each is named `c-<pod>`.
const PODS: [(&str, i32); 3] = [("low", 0), ("mid", 1000), ("critical", 2_000_001_000)];

fn settings(bus: &BusDaemon, conf_dir: &std::path::Path) -> NodeShutdownSettings {
    NodeShutdownSettings {
        groups: [0, 1000, 2_000_000_000]
            .into_iter()
            .map(|priority| PriorityBudget {
                priority,
                grace_period_seconds: BUDGET,
            })
            .collect(),
        logind_conf_dir: conf_dir.to_owned(),
        bus_address: Some(bus.address.clone()),
        reconnect_period: Duration::from_secs(1),
    }
}

/// A standalone agent on the fake runtime with graceful shutdown on `bus` (logind's drop-ins in
/// `conf`); the temporary root directory lives as long as the returned guard.
async fn standalone_agent(
    bus: &BusDaemon,
    conf: &std::path::Path,
) -> (Agent, FakeRuntime, CollectingRecorder, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let events = CollectingRecorder::default();
    let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
    cfg.node_shutdown = Some(settings(bus, conf));
    let agent = Agent::start(
        cfg,
        common::agent::fake_deps(&fake, &events),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    (agent, fake, events, dir)
}

/// Polls `f` every 50 ms for up to `secs`.
async fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn pod(name: &str, priority: i32) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": NODE,
            "priority": priority,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": format!("c-{name}"), "image": IMAGE, "imagePullPolicy": "IfNotPresent"}],
        },
    }))
    .unwrap()
}

fn container_running(fake: &FakeRuntime, name: &str) -> bool {
    fake.containers().iter().any(|c| {
        c.metadata.as_ref().is_some_and(|m| m.name == name)
            && c.state == rkubelet_cri::api::ContainerState::ContainerRunning as i32
    })
}

fn gauge(agent: &Agent, name: &str) -> Option<f64> {
    agent.metrics.value(name, &[])
}

fn node_events(server: &fake_apiserver::FakeApiServer, reason: &str) -> Vec<Value> {
    server
        .list("events", Some(NS))
        .into_iter()
        .filter(|e| e["reason"] == reason && e["involvedObject"]["kind"] == "Node")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_pods_by_priority_and_posts_their_status_in_time() {
    let bus = BusDaemon::start().await;
    let conf = tempfile::tempdir().unwrap();
    // logind starts below the requested 18 s: the kubelet must raise it.
    let logind = FakeLogind::start(&bus, Duration::from_secs(5), conf.path()).await;
    let f = common::api_fixture(fake_apiserver::Options::default()).await;
    let fake = FakeRuntime::with_images(&[IMAGE]);
    for (name, _) in PODS {
        // The containers ignore SIGTERM: each takes its whole grace period to stop.
        fake.on_stop(&format!("c-{name}"), 137);
    }
    let mut cfg = AgentConfig::for_tests(f.dir.path(), NODE);
    // Long: NotReady must come from the shutdown manager's immediate node update.
    cfg.node_status.update_frequency = Duration::from_secs(60);
    cfg.api.status_sync_period = Duration::from_secs(1);
    cfg.node_shutdown = Some(settings(&bus, conf.path()));
    let agent = Agent::start(
        cfg,
        common::agent::api_deps(&fake, &f.client),
        CancellationToken::new(),
    )
    .await
    .unwrap();

    // Start-up: drop-in written (upstream's name and content), logind reloaded through
    // systemd's KillUnit, one delay lock held and listed, the gauges say so.
    eventually(10, "the inhibitor lock", || {
        (logind.held().len() == 1).then_some(())
    })
    .await;
    let held = logind.held();
    assert_eq!(
        held[0],
        (
            "shutdown".to_owned(),
            "kubelet".to_owned(),
            "Kubelet needs time to handle node shutdown".to_owned(),
            "delay".to_owned(),
            std::process::id()
        )
    );
    assert_eq!(
        std::fs::read_to_string(conf.path().join("99-kubelet.conf")).unwrap(),
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=18\n"
    );
    assert_eq!(
        logind.reloads(),
        [("systemd-logind.service".to_owned(), "all".to_owned(), 1)]
    );
    assert_eq!(logind.delay(), Duration::from_secs(18));
    eventually(5, "the protected gauge", || {
        (gauge(&agent, "kubelet_graceful_shutdown_protected") == Some(1.0)).then_some(())
    })
    .await;
    assert_eq!(
        gauge(&agent, "kubelet_graceful_shutdown_inhibit_lock_held"),
        Some(1.0)
    );
    assert_eq!(
        gauge(&agent, "kubelet_graceful_shutdown_inhibit_delay_seconds"),
        Some(18.0)
    );

    let pods: Api<Pod> = Api::namespaced(f.client.clone(), NS);
    for (name, priority) in PODS {
        pods.create(&PostParams::default(), &pod(name, priority))
            .await
            .unwrap();
    }
    for (name, _) in PODS {
        eventually(30, &format!("{name} running"), || {
            let p = f.server.get("pods", NS, name)?;
            (p["status"]["phase"] == "Running").then_some(())
        })
        .await;
    }

    let uids: HashMap<&str, String> = PODS
        .iter()
        .map(|(name, _)| {
            let p = f.server.get("pods", NS, name).unwrap();
            (*name, p["metadata"]["uid"].as_str().unwrap().to_owned())
        })
        .collect();
    let t0 = Instant::now();
    logind.prepare_for_shutdown(true).await;

    // For each pod: when its terminal status showed in the API and whether its container
    // still ran at that moment; and whether the others still ran when the first one showed.
    let mut terminal: HashMap<&str, (Duration, bool)> = HashMap::new();
    // When the kill of each pod began: its status manager entry got the shutdown reason.
    let mut killed: HashMap<&str, Duration> = HashMap::new();
    let mut not_ready_at = None;
    let mut others_running_when_low_terminal = None;
    let released_at = eventually(
        30,
        "every pod's final status and the lock's release",
        || {
            if not_ready_at.is_none()
                && let Some(n) = f.server.get("nodes", "", NODE)
                && condition(&n, "Ready").is_some_and(|c| c["status"] == "False")
            {
                not_ready_at = Some((t0.elapsed(), condition(&n, "Ready").unwrap().clone()));
            }
            for (name, _) in PODS {
                if !killed.contains_key(name)
                    && agent
                        .status
                        .get_pod_status(&uids[name])
                        .is_some_and(|s| s.reason.as_deref() == Some("Terminated"))
                {
                    killed.insert(name, t0.elapsed());
                }
                let Some(p) = f.server.get("pods", NS, name) else {
                    continue;
                };
                if !terminal.contains_key(name)
                    && p["status"]["phase"] == "Failed"
                    && p["status"]["reason"] == "Terminated"
                {
                    let running = container_running(&fake, &format!("c-{name}"));
                    terminal.insert(name, (t0.elapsed(), running));
                    if name == "low" {
                        others_running_when_low_terminal = Some(
                            container_running(&fake, "c-mid")
                                && container_running(&fake, "c-critical"),
                        );
                    }
                }
            }
            (terminal.len() == PODS.len() && logind.held().is_empty()).then(|| t0.elapsed())
        },
    )
    .await;

    // NotReady with upstream's message, at once (the periodic update is a minute away).
    let (at, ready) = not_ready_at.expect("the node went NotReady");
    assert!(at < Duration::from_secs(2), "NotReady after {at:?}");
    assert_eq!(ready["reason"], "KubeletNotReady");
    assert_eq!(ready["message"], "node is shutting down");

    // As upstream, the terminal status (with DisruptionTarget) goes out only once the pod's
    // containers stopped; they ignore SIGTERM, so each kill lasts its grace period: the 6 s
    // budget less the 3 s status reserve. Lowest priority first: the others still ran when
    // low's status showed, and each next group began once the previous kill was over.
    let budget = Duration::from_secs(u64::try_from(BUDGET).unwrap());
    let grace = Duration::from_secs(3);
    let slack = Duration::from_millis(300);
    assert_eq!(others_running_when_low_terminal, Some(true), "{terminal:?}");
    assert!(killed["low"] < slack, "{killed:?}");
    assert!(killed["mid"] + slack >= killed["low"] + grace, "{killed:?}");
    assert!(
        killed["critical"] + slack >= killed["mid"] + grace,
        "{killed:?}"
    );
    for (name, _) in PODS {
        let (at, running) = terminal[name];
        assert!(
            !running,
            "{name}: terminal while its container ran: {terminal:?}"
        );
        // In the API before the group's budget ended (the kill was seen at most one poll
        // after it began, so the margin is generous).
        assert!(
            at + slack < killed[name] + budget,
            "{name}: terminal at {at:?}, kill began by {:?}",
            killed[name]
        );
        assert!(
            at + slack >= killed[name] + grace,
            "{name}: {terminal:?} {killed:?}"
        );
    }
    let critical = terminal["critical"].0;
    // The lock goes after the last group, within the requested period.
    assert!(
        released_at >= critical,
        "released at {released_at:?}, {terminal:?}"
    );
    assert!(
        released_at < killed["critical"] + budget,
        "released at {released_at:?}, {killed:?}"
    );

    for (name, _) in PODS {
        let p = f.server.get("pods", NS, name).unwrap();
        assert_eq!(p["status"]["message"], MESSAGE);
        let dt = condition(&p, "DisruptionTarget").expect("DisruptionTarget");
        assert_eq!(dt["status"], "True");
        assert_eq!(dt["reason"], "TerminationByKubelet");
        assert_eq!(dt["message"], MESSAGE);
    }
    let events = node_events(&f.server, "NodeShutdown");
    assert!(
        events.iter().any(
            |e| e["message"] == "Shutdown manager detected shutdown event" && e["type"] == "Normal"
        ),
        "{events:?}"
    );
    let start = gauge(&agent, "kubelet_graceful_shutdown_start_time_seconds").unwrap();
    let end = gauge(&agent, "kubelet_graceful_shutdown_end_time_seconds").unwrap();
    assert!(start > 0.0 && end >= start, "start {start} end {end}");
    let state = std::fs::read_to_string(
        f.dir
            .path()
            .join("kubelet")
            .join("graceful_node_shutdown_state"),
    )
    .unwrap();
    assert!(
        state.contains("\"startTime\"") && state.contains("\"endTime\""),
        "{state}"
    );

    // New pods are refused while shutting down.
    pods.create(&PostParams::default(), &pod("late", 0))
        .await
        .unwrap();
    let late = eventually(10, "late pod rejected", || {
        let p = f.server.get("pods", NS, "late")?;
        (p["status"]["phase"] == "Failed").then_some(p)
    })
    .await;
    assert_eq!(late["status"]["reason"], "NodeShutdown");
    assert_eq!(
        late["status"]["message"],
        "Pod was rejected: Pod was rejected as the node is shutting down."
    );

    // Cancelled: Ready again and a new lock.
    logind.prepare_for_shutdown(false).await;
    eventually(10, "Ready again", || {
        let n = f.server.get("nodes", "", NODE)?;
        (condition(&n, "Ready")?["status"] == "True").then_some(())
    })
    .await;
    eventually(10, "the lock taken again", || {
        (logind.held().len() == 1 && logind.inhibit_calls() == 2).then_some(())
    })
    .await;
    assert_eq!(
        gauge(&agent, "kubelet_graceful_shutdown_inhibit_lock_held"),
        Some(1.0)
    );
    assert_eq!(
        gauge(&agent, "kubelet_graceful_shutdown_protected"),
        Some(1.0)
    );
    assert!(
        node_events(&f.server, "NodeShutdown")
            .iter()
            .any(|e| e["message"] == "Shutdown manager detected shutdown cancellation")
    );
    assert!(agent.task_health().is_ok(), "{:?}", agent.task_health());
    agent.shutdown().await;
    // Stopping the kubelet releases the lock.
    eventually(5, "lock released on kubelet stop", || {
        logind.held().is_empty().then_some(())
    })
    .await;
}

/// Starts an API-mode agent with graceful shutdown on `bus` and waits for its Warning event.
async fn expect_unprotected(
    bus: &BusDaemon,
    conf: &std::path::Path,
    want_in_message: &str,
) -> (Agent, common::ApiFixture) {
    let f = common::api_fixture(fake_apiserver::Options::default()).await;
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let mut cfg = AgentConfig::for_tests(f.dir.path(), NODE);
    cfg.node_shutdown = Some(settings(bus, conf));
    let agent = Agent::start(
        cfg,
        common::agent::api_deps(&fake, &f.client),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let event = eventually(15, "the Warning event on the Node", || {
        node_events(&f.server, "GracefulNodeShutdownUnprotected")
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["name"], NODE);
    let message = event["message"].as_str().unwrap();
    assert!(
        message.starts_with("Graceful node shutdown is not fully in effect (18s requested): "),
        "{message}"
    );
    assert!(message.contains(want_in_message), "{message}");
    assert_eq!(
        gauge(&agent, "kubelet_graceful_shutdown_protected"),
        Some(0.0)
    );
    // The kubelet itself keeps running.
    assert!(agent.task_health().is_ok(), "{:?}", agent.task_health());
    (agent, f)
}

/// No logind on the bus (kubernetes/kubernetes#107043: the lock silently missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_logind_is_reported_loudly() {
    let bus = BusDaemon::start().await;
    let conf = tempfile::tempdir().unwrap();
    let (agent, f) = expect_unprotected(
        &bus,
        conf.path(),
        "failed reading InhibitDelayMaxUSec property from logind",
    )
    .await;
    assert_eq!(
        gauge(&agent, "kubelet_graceful_shutdown_inhibit_lock_held"),
        Some(0.0)
    );
    // Reported once, not on every retry.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        node_events(&f.server, "GracefulNodeShutdownUnprotected").len(),
        1
    );
    // logind appears later: the kubelet takes the lock on its next attempt.
    let logind = FakeLogind::start(&bus, Duration::from_secs(30), conf.path()).await;
    eventually(15, "the lock once logind is there", || {
        (logind.held().len() == 1).then_some(())
    })
    .await;
    eventually(5, "the protected gauge", || {
        (gauge(&agent, "kubelet_graceful_shutdown_protected") == Some(1.0)).then_some(())
    })
    .await;
    agent.shutdown().await;
}

/// A later drop-in keeps `InhibitDelayMaxSec` below the grace period (#110755, Debian's
/// unattended-upgrades sets 30 s): loud, and the lock is still taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inhibit_delay_that_cannot_be_raised_is_reported_loudly() {
    let bus = BusDaemon::start().await;
    let conf = tempfile::tempdir().unwrap();
    std::fs::write(
        conf.path().join("zz-admin.conf"),
        "[Login]\nInhibitDelayMaxSec=5\n",
    )
    .unwrap();
    let logind = FakeLogind::start(&bus, Duration::from_secs(5), conf.path()).await;
    let (agent, _f) = expect_unprotected(
        &bus,
        conf.path(),
        "node shutdown manager was unable to update logind InhibitDelayMaxSec to 18s (ShutdownGracePeriod), current value of InhibitDelayMaxSec (5s) is less than requested ShutdownGracePeriod",
    )
    .await;
    assert!(conf.path().join("99-kubelet.conf").exists());
    assert_eq!(logind.reloads().len(), 1);
    assert_eq!(logind.held().len(), 1, "the lock is taken all the same");
    assert_eq!(
        gauge(&agent, "kubelet_graceful_shutdown_inhibit_lock_held"),
        Some(1.0)
    );
    assert_eq!(
        gauge(&agent, "kubelet_graceful_shutdown_inhibit_delay_seconds"),
        Some(5.0)
    );
    agent.shutdown().await;
}

/// Attacks: a `PrepareForShutdown` from another bus client (upstream's match rule accepts
/// any sender) and one from logind whose body is not a boolean are both ignored; the real
/// signal afterwards still works. Standalone mode, a static pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_malformed_signals_are_ignored() {
    let bus = BusDaemon::start().await;
    let conf = tempfile::tempdir().unwrap();
    let logind = FakeLogind::start(&bus, Duration::from_secs(30), conf.path()).await;
    let (agent, _fake, events, _dir) = standalone_agent(&bus, conf.path()).await;
    let web = common::agent::static_pod(
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: web, namespace: default}}\nspec:\n  containers: [{{name: c, image: {IMAGE}}}]\n"
        ),
        "web",
        NODE,
    );
    common::agent::set(&agent, vec![web.clone()]).await;
    eventually(20, "web running and the lock held", || {
        (common::agent::phase(&agent, &web).as_deref() == Some("Running")
            && logind.held().len() == 1)
            .then_some(())
    })
    .await;

    let intruder = bus.client().await;
    intruder
        .emit_signal(
            None::<()>,
            logind::LOGIND_PATH,
            logind::LOGIND_IFACE,
            "PrepareForShutdown",
            &(true,),
        )
        .await
        .unwrap();
    logind.malformed_prepare_for_shutdown().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        events.with_reason("NodeShutdown").is_empty(),
        "{:?}",
        events.events()
    );
    assert_eq!(logind.held().len(), 1);
    assert_eq!(
        common::agent::phase(&agent, &web).as_deref(),
        Some("Running")
    );

    logind.prepare_for_shutdown(true).await;
    eventually(15, "web terminated by the shutdown", || {
        let s = agent.status.get_pod_status(common::agent::uid(&web))?;
        (s.reason.as_deref() == Some("Terminated") && logind.held().is_empty()).then_some(s)
    })
    .await;
    assert_eq!(events.with_reason("NodeShutdown").len(), 1);
    agent.shutdown().await;
}

/// Upstream `TestRestart`: the bus goes away (every connection breaks) and comes back; the
/// kubelet watches again, takes a new lock, and handles the next shutdown on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_bus_is_watched_again() {
    let bus = BusDaemon::start().await;
    let conf = tempfile::tempdir().unwrap();
    let logind = FakeLogind::start(&bus, Duration::from_secs(30), conf.path()).await;
    let (agent, _fake, events, _dir) = standalone_agent(&bus, conf.path()).await;
    eventually(10, "the first lock", || {
        (logind.held().len() == 1).then_some(())
    })
    .await;

    drop(logind);
    let bus = bus.restart().await;
    let logind = FakeLogind::start(&bus, Duration::from_secs(30), conf.path()).await;
    eventually(20, "a lock from the new logind", || {
        (logind.held().len() == 1).then_some(())
    })
    .await;
    eventually(5, "the protected gauge", || {
        (gauge(&agent, "kubelet_graceful_shutdown_protected") == Some(1.0)).then_some(())
    })
    .await;
    logind.prepare_for_shutdown(true).await;
    eventually(10, "the shutdown handled on the new connection", || {
        (!events.with_reason("NodeShutdown").is_empty() && logind.held().is_empty()).then_some(())
    })
    .await;
    assert!(agent.task_health().is_ok(), "{:?}", agent.task_health());
    agent.shutdown().await;
}

/// On a real node the system bus and logind stop once the kubelet releases its lock (seen in
/// the guest test, dev/vm/guest/tests/shutdown.sh): the lost bus is expected then, so the
/// kubelet neither posts `GracefulNodeShutdownUnprotected` nor reports the lock unprotected as
/// a failure while the node shuts down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bus_going_away_during_a_shutdown_is_expected() {
    let bus = BusDaemon::start().await;
    let conf = tempfile::tempdir().unwrap();
    let logind = FakeLogind::start(&bus, Duration::from_secs(30), conf.path()).await;
    let (agent, _fake, events, _dir) = standalone_agent(&bus, conf.path()).await;
    eventually(10, "the lock", || (logind.held().len() == 1).then_some(())).await;
    logind.prepare_for_shutdown(true).await;
    eventually(10, "the shutdown handled", || {
        (!events.with_reason("NodeShutdown").is_empty() && logind.held().is_empty()).then_some(())
    })
    .await;
    // The node goes down: logind and the bus stop.
    drop(logind);
    drop(bus);
    // Several reconnection attempts (1 s, then 2 s) pass without a Warning.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        events
            .with_reason("GracefulNodeShutdownUnprotected")
            .is_empty(),
        "{:?}",
        events.with_reason("GracefulNodeShutdownUnprotected")
    );
    assert!(agent.task_health().is_ok(), "{:?}", agent.task_health());
    agent.shutdown().await;
}
