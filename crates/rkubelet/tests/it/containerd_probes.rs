//! Probes, lifecycle hooks, sidecars, termination messages and active deadlines, end to end:
//! the `rkubelet` binary on the real containerd of `dev/runtime.sh up`, with busybox `sh`,
//! `httpd` as targets. Short grace periods and 1 s probe periods keep each test brief.

use crate::common;

use std::time::{Duration, Instant};

use common::{Kubelet, container, phase, running};
use serde_json::Value;

const IMAGE: &str = "docker.io/library/busybox:latest";

fn pod_yaml(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

/// One container running `script` with extra YAML (indented 4 spaces).
fn c(name: &str, script: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script:?}]\n{extra}"
    )
}

fn condition(p: &Value, kind: &str) -> Option<String> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

fn restarts(p: &Value, name: &str) -> i64 {
    container(p, "containerStatuses", name)
        .and_then(|c| c["restartCount"].as_i64())
        .unwrap_or(0)
}

const TRAP: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_liveness_failure_restarts_the_container() {
    let mut k = Kubelet::new();
    let script = "touch /tmp/healthy; sleep 3; rm /tmp/healthy; trap 'exit 0' TERM; while true; do sleep 0.2; done";
    k.write_manifest(
        "live.yaml",
        &pod_yaml(
            "live",
            &format!(
                "  terminationGracePeriodSeconds: 5\n  containers:\n{}",
                c(
                    "c",
                    script,
                    "    livenessProbe:\n      exec: {command: [cat, /tmp/healthy]}\n      periodSeconds: 1\n      failureThreshold: 2\n      terminationGracePeriodSeconds: 1\n"
                )
            ),
        ),
    );
    k.start();
    k.wait_pod("live", Duration::from_secs(60), "running", |p| {
        running(p, "c")
    })
    .await;
    let start = Instant::now();
    k.wait_pod("live", Duration::from_secs(40), "restarted once", |p| {
        restarts(p, "c") >= 1
    })
    .await;
    assert!(
        start.elapsed() >= Duration::from_secs(3),
        "killed only after the file went away and 2 failures: {:?}",
        start.elapsed()
    );
    let log = k.log_text();
    assert!(
        log.contains("Liveness probe failed"),
        "no Unhealthy event in log"
    );
    assert!(
        log.contains("Container c failed liveness probe, will be restarted"),
        "no Killing event in log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_readiness_flips_both_ways_and_tcp_by_port_name() {
    let mut k = Kubelet::new();
    let script = "mkdir -p /www; httpd -p 8080 -h /www; sleep 3; echo ok > /www/ready.html; sleep 6; rm /www/ready.html; trap 'exit 0' TERM; while true; do sleep 0.2; done";
    k.write_manifest(
        "ready.yaml",
        &pod_yaml(
            "ready",
            &format!(
                "  terminationGracePeriodSeconds: 2\n  containers:\n{}{}",
                c(
                    "web",
                    script,
                    "    ports:\n    - {name: http, containerPort: 8080}\n    readinessProbe:\n      httpGet: {path: /ready.html, port: http}\n      periodSeconds: 1\n      failureThreshold: 1\n"
                ),
                c(
                    "tcp",
                    TRAP,
                    "    ports:\n    - {name: peer, containerPort: 8080}\n    readinessProbe:\n      tcpSocket: {port: peer}\n      periodSeconds: 1\n    livenessProbe:\n      tcpSocket: {port: 8080}\n      periodSeconds: 1\n"
                )
            ),
        ),
    );
    k.start();
    let p = k
        .wait_pod(
            "ready",
            Duration::from_secs(60),
            "running, not ready",
            |p| running(p, "web") && running(p, "tcp"),
        )
        .await;
    assert_eq!(condition(&p, "Ready").as_deref(), Some("False"));
    let p = k
        .wait_pod("ready", Duration::from_secs(20), "Ready", |p| {
            condition(p, "Ready").as_deref() == Some("True")
        })
        .await;
    assert_eq!(
        container(&p, "containerStatuses", "web").unwrap()["ready"],
        true
    );
    assert_eq!(
        container(&p, "containerStatuses", "tcp").unwrap()["ready"],
        true
    );
    let p = k
        .wait_pod("ready", Duration::from_secs(20), "not Ready again", |p| {
            condition(p, "Ready").as_deref() == Some("False")
        })
        .await;
    assert_eq!(
        container(&p, "containerStatuses", "web").unwrap()["ready"],
        false
    );
    assert_eq!(
        restarts(&p, "web") + restarts(&p, "tcp"),
        0,
        "tcp liveness holds"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_probe_delays_liveness() {
    let mut k = Kubelet::new();
    // Liveness would fail at once (failureThreshold 1) if it ran before startup passed.
    k.write_manifest(
        "slow.yaml",
        &pod_yaml(
            "slow",
            &format!(
                "  terminationGracePeriodSeconds: 2\n  containers:\n{}",
                c(
                    "c",
                    "sleep 4; touch /tmp/started; trap 'exit 0' TERM; while true; do sleep 0.2; done",
                    "    startupProbe:\n      exec: {command: [cat, /tmp/started]}\n      periodSeconds: 1\n      failureThreshold: 30\n    livenessProbe:\n      exec: {command: [cat, /tmp/started]}\n      periodSeconds: 1\n      failureThreshold: 1\n"
                )
            ),
        ),
    );
    k.start();
    let p = k
        .wait_pod("slow", Duration::from_secs(60), "running", |p| {
            running(p, "c")
        })
        .await;
    assert_eq!(
        container(&p, "containerStatuses", "c").unwrap()["started"],
        false
    );
    let p = k
        .wait_pod("slow", Duration::from_secs(30), "started", |p| {
            container(p, "containerStatuses", "c").is_some_and(|c| c["started"] == true)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = k.pod("slow").await.unwrap();
    assert_eq!(restarts(&p, "c") + restarts(&later, "c"), 0);
    assert_eq!(condition(&later, "Ready").as_deref(), Some("True"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_start_file_is_seen_and_termination_message_is_reported() {
    let mut k = Kubelet::new();
    let script = "for i in $(seq 1 50); do [ -f /tmp/hook ] && break; sleep 0.1; done; printf 'saw %s' \"$(cat /tmp/hook)\" > /dev/termination-log; exit 3";
    k.write_manifest(
        "hook.yaml",
        &pod_yaml(
            "hook",
            &format!(
                "  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n  containers:\n{}",
                c(
                    "c",
                    script,
                    "    lifecycle:\n      postStart:\n        exec: {command: [sh, -c, 'echo -n posted > /tmp/hook']}\n"
                )
            ),
        ),
    );
    k.start();
    let p = k
        .wait_pod("hook", Duration::from_secs(60), "Failed", |p| {
            phase(p) == "Failed"
        })
        .await;
    let term = &container(&p, "containerStatuses", "c").unwrap()["state"]["terminated"];
    assert_eq!(term["exitCode"], 3);
    assert_eq!(term["message"], "saw posted", "{term}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_deadline_fails_pod_and_pre_stop_runs_before_sigterm() {
    let mut k = Kubelet::new();
    let script =
        "trap 'echo term >> /dev/termination-log; exit 0' TERM; while true; do sleep 0.2; done";
    k.write_manifest(
        "deadline.yaml",
        &pod_yaml(
            "deadline",
            &format!(
                "  activeDeadlineSeconds: 4\n  terminationGracePeriodSeconds: 5\n  containers:\n{}",
                c(
                    "c",
                    script,
                    "    lifecycle:\n      preStop:\n        exec: {command: [sh, -c, 'echo prestop >> /dev/termination-log']}\n"
                )
            ),
        ),
    );
    k.start();
    k.wait_pod("deadline", Duration::from_secs(60), "running", |p| {
        running(p, "c")
    })
    .await;
    let p = k
        .wait_pod(
            "deadline",
            Duration::from_secs(30),
            "Failed and stopped",
            |p| {
                phase(p) == "Failed"
                    && container(p, "containerStatuses", "c")
                        .is_some_and(|c| c["state"]["terminated"].is_object())
            },
        )
        .await;
    assert_eq!(p["status"]["reason"], "DeadlineExceeded");
    assert_eq!(
        p["status"]["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    let term = &container(&p, "containerStatuses", "c").unwrap()["state"]["terminated"];
    assert_eq!(term["message"], "prestop\nterm\n", "{term}");
    assert_eq!(term["exitCode"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_pre_stop_is_cut_at_the_grace_period() {
    let mut k = Kubelet::new();
    let script =
        "trap 'echo term >> /dev/termination-log; exit 0' TERM; while true; do sleep 0.2; done";
    k.write_manifest(
        "cut.yaml",
        &pod_yaml(
            "cut",
            &format!(
                "  activeDeadlineSeconds: 3\n  terminationGracePeriodSeconds: 3\n  containers:\n{}",
                c(
                    "c",
                    script,
                    "    lifecycle:\n      preStop:\n        sleep: {seconds: 60}\n"
                )
            ),
        ),
    );
    k.start();
    k.wait_pod("cut", Duration::from_secs(60), "running", |p| {
        running(p, "c")
    })
    .await;
    let failed_at = Instant::now();
    k.wait_pod("cut", Duration::from_secs(20), "Failed", |p| {
        phase(p) == "Failed"
    })
    .await;
    let p = k
        .wait_pod("cut", Duration::from_secs(20), "stopped", |p| {
            container(p, "containerStatuses", "c")
                .is_some_and(|c| c["state"]["terminated"].is_object())
        })
        .await;
    let took = failed_at.elapsed();
    assert!(
        took < Duration::from_secs(12),
        "a 60 s preStop was cut at the 3 s grace period: stopped after {took:?}"
    );
    let term = &container(&p, "containerStatuses", "c").unwrap()["state"]["terminated"];
    assert_eq!(
        term["message"], "term\n",
        "SIGTERM after the cut preStop: {term}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_starts_before_main_and_stops_after_it() {
    let mut k = Kubelet::new();
    k.write_manifest(
        "side.yaml",
        &pod_yaml(
            "side",
            &format!(
                "  activeDeadlineSeconds: 5\n  terminationGracePeriodSeconds: 10\n  initContainers:\n{}  containers:\n{}",
                c(
                    "sidecar",
                    "trap 'sleep 1; exit 0' TERM; while true; do sleep 0.2; done",
                    "    restartPolicy: Always\n"
                ),
                c(
                    "app",
                    TRAP,
                    "    lifecycle:\n      preStop:\n        sleep: {seconds: 2}\n"
                )
            ),
        ),
    );
    k.start();
    let p = k
        .wait_pod("side", Duration::from_secs(60), "both running", |p| {
            running(p, "app")
                && container(p, "initContainerStatuses", "sidecar")
                    .is_some_and(|c| c["state"]["running"].is_object())
        })
        .await;
    let started = |p: &Value, field: &str, name: &str| {
        container(p, field, name).unwrap()["state"]["running"]["startedAt"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        started(&p, "initContainerStatuses", "sidecar") <= started(&p, "containerStatuses", "app")
    );
    let p = k
        .wait_pod("side", Duration::from_secs(40), "both stopped", |p| {
            phase(p) == "Failed"
                && container(p, "containerStatuses", "app")
                    .is_some_and(|c| c["state"]["terminated"].is_object())
                && container(p, "initContainerStatuses", "sidecar")
                    .is_some_and(|c| c["state"]["terminated"].is_object())
        })
        .await;
    let finished = |field: &str, name: &str| {
        container(&p, field, name).unwrap()["state"]["terminated"]["finishedAt"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (app, side) = (
        finished("containerStatuses", "app"),
        finished("initContainerStatuses", "sidecar"),
    );
    assert!(
        side > app,
        "sidecar stopped after app: sidecar {side}, app {app}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn termination_message_falls_back_to_logs_on_error() {
    let mut k = Kubelet::new();
    k.write_manifest(
        "logs.yaml",
        &pod_yaml(
            "logs",
            &format!(
                "  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n  containers:\n{}",
                c(
                    "c",
                    "echo first; echo last words; exit 7",
                    "    terminationMessagePolicy: FallbackToLogsOnError\n"
                )
            ),
        ),
    );
    k.start();
    let p = k
        .wait_pod("logs", Duration::from_secs(60), "Failed", |p| {
            phase(p) == "Failed"
        })
        .await;
    let term = &container(&p, "containerStatuses", "c").unwrap()["state"]["terminated"];
    assert_eq!(term["exitCode"], 7);
    assert_eq!(term["message"], "first\nlast words\n", "{term}");
}
