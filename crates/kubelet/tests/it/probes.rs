//! Probes, lifecycle hooks, sidecar termination order and active deadlines through the whole
//! agent (sync loop → pod workers → kuberuntime → prober) against the `FakeRuntime`, with
//! paused time; plus 1,000 pod churns with probes that must leave no worker or result behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::fake::{ExecBehaviour, FakeRuntime};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, set, static_pod, uid, wait_until};

const NODE: &str = "node-a";

/// A static pod from YAML `spec` lines (indented two spaces under `spec:`).
fn pod(name: &str, spec: &str) -> Pod {
    let yaml = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec}");
    static_pod(&yaml, name, NODE)
}

fn container(name: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n{extra}"
    )
}

struct Harness {
    fake: FakeRuntime,
    events: CollectingRecorder,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Self {
        Self {
            fake: FakeRuntime::with_images(&[IMAGE]),
            events: CollectingRecorder::default(),
            _dir: tempfile::tempdir().unwrap(),
        }
    }

    async fn start(&self) -> Agent {
        let cfg = AgentConfig::for_tests(self._dir.path(), NODE);
        let deps = fake_deps(&self.fake, &self.events);
        Agent::start(cfg, deps, CancellationToken::new())
            .await
            .unwrap()
    }

    fn messages(&self, reason: &str) -> Vec<String> {
        self.events
            .with_reason(reason)
            .into_iter()
            .map(|e| e.message)
            .collect()
    }
}

fn api_status(agent: &Agent, p: &Pod) -> Option<k8s_openapi::api::core::v1::PodStatus> {
    agent.status.get_pod_status(uid(p))
}

fn condition(agent: &Agent, p: &Pod, kind: &str) -> Option<String> {
    api_status(agent, p)?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.status)
}

fn container_status(
    agent: &Agent,
    p: &Pod,
    name: &str,
) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    let s = api_status(agent, p)?;
    s.container_statuses
        .into_iter()
        .flatten()
        .chain(s.init_container_statuses.into_iter().flatten())
        .find(|c| c.name == name)
}

fn running(agent: &Agent, p: &Pod, name: &str) -> bool {
    container_status(agent, p, name)
        .and_then(|c| c.state)
        .is_some_and(|s| s.running.is_some())
}

fn reply(code: i32, out: &str) -> ExecBehaviour {
    ExecBehaviour::Reply {
        exit_code: code,
        stdout: out.as_bytes().to_vec(),
        stderr: Vec::new(),
    }
}

#[tokio::test(start_paused = true)]
async fn failing_exec_liveness_restarts_after_threshold_times_period() {
    let h = Harness::new();
    let p = pod(
        "live",
        &format!(
            "  terminationGracePeriodSeconds: 30\n  containers:\n{}",
            container(
                "c",
                "    livenessProbe:\n      exec: {command: [check]}\n      periodSeconds: 1\n      failureThreshold: 3\n      terminationGracePeriodSeconds: 1\n"
            )
        ),
    );
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("c running", Duration::from_secs(30), || {
        running(&agent, &p, "c")
    })
    .await;
    let healthy_for = Duration::from_secs(4);
    tokio::time::sleep(healthy_for).await;
    assert_eq!(h.fake.call_count("StopContainer"), 0, "healthy: no kill");

    h.fake.on_exec("c", reply(1, "boom"));
    let broke = Instant::now();
    wait_until("a kill", Duration::from_secs(30), || {
        h.fake.call_count("StopContainer") > 0
    })
    .await;
    let took = broke.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took <= Duration::from_secs(4),
        "killed after {took:?}; want ≈ failureThreshold × period = 3s"
    );
    h.fake.on_exec("c", reply(0, ""));
    wait_until("restarted", Duration::from_secs(30), || {
        container_status(&agent, &p, "c").is_some_and(|c| c.restart_count == 1)
            && running(&agent, &p, "c")
    })
    .await;
    let unhealthy = h.messages("Unhealthy");
    assert!(unhealthy.len() >= 3, "{unhealthy:?}");
    assert!(unhealthy.iter().all(|m| m == "Liveness probe failed: boom"));
    assert!(
        h.messages("Killing")
            .contains(&"Container c failed liveness probe, will be restarted".to_owned()),
        "{:?}",
        h.messages("Killing")
    );
    let total: u64 = agent
        .prober
        .metrics()
        .snapshot()
        .iter()
        .filter(|(l, _)| l.probe_type == "Liveness" && l.result == "failed" && l.container == "c")
        .map(|(_, n)| n)
        .sum();
    assert!(total >= 3, "prober_probe_total failed = {total}");
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn readiness_flips_ready_both_ways() {
    let h = Harness::new();
    h.fake.on_exec("c", reply(1, "not yet"));
    let p = pod(
        "ready",
        &format!(
            "  containers:\n{}",
            container(
                "c",
                "    readinessProbe:\n      exec: {command: [ready]}\n      periodSeconds: 1\n      failureThreshold: 2\n      successThreshold: 2\n"
            )
        ),
    );
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("c running", Duration::from_secs(30), || {
        running(&agent, &p, "c")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(condition(&agent, &p, "Ready").as_deref(), Some("False"));
    assert!(!container_status(&agent, &p, "c").unwrap().ready);

    h.fake.on_exec("c", reply(0, ""));
    wait_until("ready", Duration::from_secs(10), || {
        condition(&agent, &p, "Ready").as_deref() == Some("True")
    })
    .await;
    assert_eq!(
        condition(&agent, &p, "ContainersReady").as_deref(),
        Some("True")
    );
    assert!(container_status(&agent, &p, "c").unwrap().ready);

    h.fake.on_exec("c", reply(1, "down"));
    wait_until("not ready again", Duration::from_secs(10), || {
        condition(&agent, &p, "Ready").as_deref() == Some("False")
    })
    .await;
    assert_eq!(
        h.fake.call_count("StopContainer"),
        0,
        "readiness never kills"
    );
    assert!(
        h.messages("Unhealthy")
            .contains(&"Readiness probe failed: down".to_owned())
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn startup_probe_gates_liveness_and_readiness() {
    // Liveness and readiness are httpGet probes against a counting server on the host; the
    // startup probe is exec, scripted through the fake runtime.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                break;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    let h = Harness::new();
    h.fake.on_exec("c", reply(1, "starting"));
    let probe = |kind: &str| {
        format!(
            "    {kind}:\n      httpGet: {{host: 127.0.0.1, port: {port}, path: /}}\n      periodSeconds: 1\n"
        )
    };
    let p = pod(
        "startup",
        &format!(
            "  containers:\n{}",
            container(
                "c",
                &format!(
                    "{}{}    startupProbe:\n      exec: {{command: [started]}}\n      periodSeconds: 1\n      failureThreshold: 30\n",
                    probe("livenessProbe"),
                    probe("readinessProbe")
                )
            )
        ),
    );
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("c running", Duration::from_secs(30), || {
        running(&agent, &p, "c")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "no liveness/readiness before startup"
    );
    let c = container_status(&agent, &p, "c").unwrap();
    assert_eq!((c.started, c.ready), (Some(false), false));

    h.fake.on_exec("c", reply(0, ""));
    wait_until("started and ready", Duration::from_secs(10), || {
        container_status(&agent, &p, "c").is_some_and(|c| c.started == Some(true) && c.ready)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        hits.load(Ordering::SeqCst) >= 2,
        "liveness/readiness run after startup"
    );
    assert_eq!(h.fake.call_count("StopContainer"), 0);
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn failed_post_start_hook_kills_and_restarts_the_container() {
    let h = Harness::new();
    h.fake.on_exec("c", reply(1, "secret output"));
    let p = pod(
        "poststart",
        &format!(
            "  terminationGracePeriodSeconds: 1\n  containers:\n{}",
            container(
                "c",
                "    lifecycle:\n      postStart:\n        exec: {command: [setup]}\n"
            )
        ),
    );
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("two start attempts", Duration::from_secs(60), || {
        h.fake.call_count("StartContainer") >= 2
    })
    .await;
    let failed = h.messages("FailedPostStartHook");
    assert!(!failed.is_empty());
    assert!(
        failed.iter().all(|m| m == "PostStartHook failed"),
        "{failed:?}"
    );
    assert!(
        h.messages("Killing")
            .contains(&"FailedPostStartHook".to_owned())
    );

    h.fake.on_exec("c", reply(0, ""));
    wait_until(
        "running after a good hook",
        Duration::from_secs(120),
        || running(&agent, &p, "c"),
    )
    .await;
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pre_stop_runs_first_and_sidecars_stop_after_regular_containers() {
    let h = Harness::new();
    let p = pod(
        "order",
        &format!(
            "  terminationGracePeriodSeconds: 10\n  initContainers:\n{}{}  containers:\n{}",
            container("side1", "    restartPolicy: Always\n"),
            container("side2", "    restartPolicy: Always\n"),
            container(
                "app",
                "    lifecycle:\n      preStop:\n        sleep: {seconds: 3}\n"
            )
        ),
    );
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("all running", Duration::from_secs(60), || {
        ["side1", "side2", "app"]
            .iter()
            .all(|c| running(&agent, &p, c))
    })
    .await;
    let start_order: Vec<String> = {
        let mut cs = h.fake.containers();
        cs.sort_by_key(|c| c.created_at);
        cs.into_iter().map(|c| c.metadata.unwrap().name).collect()
    };
    assert_eq!(start_order, ["side1", "side2", "app"]);

    // Each stop takes 1 s, so the order shows in when each container exits.
    h.fake.set_latency("StopContainer", Duration::from_secs(1));
    let ids: Vec<(String, String)> = h
        .fake
        .containers()
        .into_iter()
        .map(|c| (c.id.clone(), c.metadata.unwrap().name))
        .collect();
    let removed = Instant::now();
    set(&agent, vec![]).await;
    let mut exited: Vec<(String, Duration)> = Vec::new();
    while exited.len() < ids.len() {
        assert!(
            removed.elapsed() < Duration::from_secs(30),
            "stuck: {exited:?}"
        );
        for (id, name) in &ids {
            let gone = h.fake.container(id).is_none_or(|c| c.state != 1);
            if gone && !exited.iter().any(|(n, _)| n == name) {
                exited.push((name.clone(), removed.elapsed()));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let order: Vec<&str> = exited.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(order, ["app", "side2", "side1"], "{exited:?}");
    assert!(
        exited[0].1 >= Duration::from_secs(3),
        "app's preStop (3 s) ran before it was stopped: {exited:?}"
    );
    let mut killing = h.messages("Killing");
    killing.sort();
    assert_eq!(
        killing,
        [
            "Stopping container app",
            "Stopping container side1",
            "Stopping container side2"
        ]
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn active_deadline_fails_the_pod_and_kills_containers() {
    let h = Harness::new();
    let p = pod(
        "deadline",
        &format!(
            "  activeDeadlineSeconds: 3\n  terminationGracePeriodSeconds: 1\n  containers:\n{}",
            container("c", "")
        ),
    );
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("c running", Duration::from_secs(30), || {
        running(&agent, &p, "c")
    })
    .await;
    wait_until("failed", Duration::from_secs(10), || {
        api_status(&agent, &p).and_then(|s| s.phase).as_deref() == Some("Failed")
    })
    .await;
    let s = api_status(&agent, &p).unwrap();
    assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        s.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    wait_until("containers stopped", Duration::from_secs(30), || {
        h.fake.call_count("StopContainer") >= 1 && !running(&agent, &p, "c")
    })
    .await;
    assert_eq!(h.messages("DeadlineExceeded").len(), 1);
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn thousand_pod_churn_with_probes_leaves_no_workers_or_results() {
    let h = Harness::new();
    let agent = h.start().await;
    let probes = "    livenessProbe:\n      exec: {command: [ok]}\n      periodSeconds: 1\n    readinessProbe:\n      exec: {command: [ok]}\n      periodSeconds: 1\n";
    for round in 0..10 {
        let pods: Vec<Pod> = (0..100)
            .map(|i| {
                pod(
                    &format!("churn{round}-{i}"),
                    &format!(
                        "  terminationGracePeriodSeconds: 1\n  containers:\n{}",
                        container("c", probes)
                    ),
                )
            })
            .collect();
        set(&agent, pods.clone()).await;
        wait_until("100 pods ready", Duration::from_secs(120), || {
            pods.iter()
                .all(|p| condition(&agent, p, "Ready").as_deref() == Some("True"))
        })
        .await;
        assert_eq!(
            agent.prober.sizes().0,
            200,
            "one worker per (pod, container, kind)"
        );
        set(&agent, vec![]).await;
        wait_until("runtime empty", Duration::from_secs(120), || {
            h.fake.containers().is_empty() && h.fake.sandboxes().is_empty()
        })
        .await;
        wait_until("workers and results gone", Duration::from_secs(30), || {
            agent.workers.sizes() == (0, 0) && agent.prober.sizes() == (0, 0)
        })
        .await;
    }
    assert!(
        agent.prober.metrics().snapshot().is_empty(),
        "metrics series dropped with pods"
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn sidecar_startup_probe_gates_the_next_container() {
    let h = Harness::new();
    h.fake.on_exec("side", reply(1, "warming up"));
    let p = pod(
        "gate",
        &format!(
            "  terminationGracePeriodSeconds: 1\n  initContainers:\n{}  containers:\n{}",
            container(
                "side",
                "    restartPolicy: Always\n    startupProbe:\n      exec: {command: [up]}\n      periodSeconds: 1\n      failureThreshold: 60\n"
            ),
            container("app", "")
        ),
    );
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("sidecar running", Duration::from_secs(30), || {
        running(&agent, &p, "side")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        container_status(&agent, &p, "app")
            .is_none_or(|c| c.state.and_then(|s| s.running).is_none()),
        "app waits for the sidecar's startup probe"
    );
    assert_eq!(h.fake.containers().len(), 1);

    h.fake.on_exec("side", reply(0, ""));
    wait_until("app running", Duration::from_secs(10), || {
        running(&agent, &p, "app")
    })
    .await;
    let side = container_status(&agent, &p, "side").unwrap();
    assert_eq!(side.started, Some(true));
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn sidecars_do_not_block_pod_completion() {
    let h = Harness::new();
    h.fake.on_start(
        "app",
        rkubelet_cri::fake::Behaviour::ExitAfter(Duration::from_secs(2), 0),
    );
    let p = pod(
        "done",
        &format!(
            "  restartPolicy: Never\n  terminationGracePeriodSeconds: 5\n  initContainers:\n{}  containers:\n{}",
            container("side", "    restartPolicy: Always\n"),
            container("app", "")
        ),
    );
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("Succeeded", Duration::from_secs(30), || {
        api_status(&agent, &p).and_then(|s| s.phase).as_deref() == Some("Succeeded")
    })
    .await;
    wait_until("sidecar stopped", Duration::from_secs(30), || {
        !running(&agent, &p, "side") && h.fake.call_count("StopContainer") >= 1
    })
    .await;
    assert!(
        h.messages("Killing")
            .contains(&"Stopping container side".to_owned())
    );
    agent.shutdown().await;
}
