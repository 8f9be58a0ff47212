//! What a container can make the prober keep: an exec probe's or hook's output, an HTTP
//! probe's body, and the events they become, each bounded as upstream bounds them (10 KiB of
//! output) and every event message within `MAX_EVENT_MESSAGE_LENGTH`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ExecAction, HTTPGetAction, LifecycleHandler};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rkubelet_cri::fake::{ExecBehaviour, FakeRuntime};
use tokio_util::sync::CancellationToken;

use super::handlers::{MAX_BODY, MAX_EXEC_OUTPUT, Outcome, Target, exec_output, run_exec};
use super::tests::{pod, status};
use super::*;
use crate::events::{CollectingRecorder, MAX_EVENT_MESSAGE_LENGTH};
use crate::kuberuntime::hooks::{HookTarget, run_hook};
use crate::kuberuntime::runtime_status::testutil as rt;

const MIB: usize = 1024 * 1024;

/// A fake runtime with a running container `c` whose every exec prints `stdout` and fails.
async fn noisy_container(stdout: Vec<u8>) -> (FakeRuntime, String) {
    let fake = FakeRuntime::with_images(&["busybox"]);
    let p = rt::pod("u1", "p");
    let sb = rt::run_sandbox(&fake, &p, 0, false).await;
    let id = rt::container(&fake, &sb, &p, &rt::spec("c"), 0, true).await;
    fake.on_exec(
        "c",
        ExecBehaviour::Reply {
            exit_code: 1,
            stdout,
            stderr: b"and stderr".to_vec(),
        },
    );
    (fake, id)
}

#[tokio::test]
async fn an_exec_probe_printing_1_mib_keeps_its_first_10_kib() {
    let (fake, id) = noisy_container(vec![b'a'; MIB]).await;
    let c = pod().spec.unwrap().containers.remove(0);
    let t = Target {
        runtime: &fake,
        container: &c,
        container_id: &id,
        pod_ip: "10.0.0.1",
        timeout: Duration::from_secs(1),
    };
    let exec = ExecAction {
        command: Some(vec!["noisy".into()]),
    };
    let outcome = run_exec(&exec, &t).await;
    assert_eq!(outcome.outcome, Outcome::Failure);
    assert_eq!(outcome.output.len(), MAX_EXEC_OUTPUT);
    assert!(outcome.output.bytes().all(|b| b == b'a'));
}

#[test]
fn exec_output_is_stdout_then_stderr_within_10_kib() {
    let out = exec_output(&[b'o'; 6 * 1024], &[b'e'; 6 * 1024]);
    assert_eq!(out.len(), MAX_EXEC_OUTPUT);
    assert_eq!(
        out,
        format!("{}{}", "o".repeat(6 * 1024), "e".repeat(4 * 1024))
    );
    assert_eq!(exec_output(b"ok\n", b"warn\n"), "ok\nwarn\n");
    // Invalid UTF-8 grows on replacement (3 bytes each): still within the bound.
    let out = exec_output(&[0xff; MIB], &[]);
    assert!(out.len() <= MAX_EXEC_OUTPUT, "{} bytes", out.len());
    assert!(out.chars().all(|c| c == char::REPLACEMENT_CHARACTER));
}

/// The probe's failure event carries the output, cut to the event limit; the result is the
/// same as with a short output.
#[tokio::test(start_paused = true)]
async fn a_probe_printing_1_mib_makes_an_event_within_the_limit() {
    let (fake, id) = noisy_container(vec![b'a'; MIB]).await;
    let events = CollectingRecorder::default();
    let (m, mut rx) = ProbeManager::new(
        Arc::new(fake),
        Arc::new(events.clone()),
        Clock::new(),
        CancellationToken::new(),
    );
    m.update_pod(&pod(), &status(Some(&id)), "10.0.0.1");
    let update = rx.recv().await.unwrap();
    assert_eq!(
        update.result,
        crate::kuberuntime::actions::ProbeResult::Failure
    );
    let unhealthy = events.with_reason("Unhealthy");
    assert!(!unhealthy.is_empty());
    for e in &unhealthy {
        assert!(
            e.message.len() <= MAX_EVENT_MESSAGE_LENGTH,
            "{} bytes",
            e.message.len()
        );
        assert!(
            e.message.starts_with("Readiness probe failed: aaaa"),
            "{}",
            e.message
        );
        assert!(e.message.ends_with(" ..."), "{}", e.message);
    }
    m.shutdown().await;
}

#[tokio::test]
async fn an_exec_hook_printing_1_mib_fails_with_at_most_10_kib_of_it() {
    let (fake, id) = noisy_container(vec![b'a'; MIB]).await;
    let p = pod();
    let c = p.spec.as_ref().unwrap().containers[0].clone();
    let handler = LifecycleHandler {
        exec: Some(ExecAction {
            command: Some(vec!["noisy".into()]),
        }),
        ..Default::default()
    };
    let target = HookTarget {
        runtime: &fake,
        pod: &p,
        container: &c,
        container_id: &id,
        pod_ip: "10.0.0.1",
    };
    let err = run_hook(&handler, &target).await.unwrap_err();
    assert!(err.starts_with("Exec lifecycle hook"), "{}", &err[..200]);
    assert!(
        err.len() < MAX_EXEC_OUTPUT + 512,
        "hook error is {} bytes",
        err.len()
    );
}

#[tokio::test]
async fn an_http_probe_answering_1_mib_keeps_10_kib_of_the_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 2048];
        let _ = s.read(&mut buf).await.unwrap();
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {MIB}\r\n\r\n");
        s.write_all(head.as_bytes()).await.unwrap();
        // The prober stops reading after 10 KiB: the rest may not be taken.
        let _ = s.write_all(&vec![b'b'; MIB]).await;
    });
    let fake = FakeRuntime::new();
    let c = pod().spec.unwrap().containers.remove(0);
    let t = Target {
        runtime: &fake,
        container: &c,
        container_id: "x",
        pod_ip: "127.0.0.1",
        timeout: Duration::from_secs(5),
    };
    let get = HTTPGetAction {
        port: IntOrString::Int(i32::from(port)),
        path: Some("/".into()),
        ..Default::default()
    };
    let outcome = handlers::run_http_get(&get, &t).await;
    assert_eq!(outcome.outcome, Outcome::Success);
    assert_eq!(outcome.output.len(), MAX_BODY);
}
