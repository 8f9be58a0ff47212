//! The termination message readers against hostile files: FIFOs, links, devices, sockets,
//! directories, huge files and logs, a read that never answers; and the pod-wide budget.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus as ApiContainerStatus,
    Pod, PodSpec, PodStatus as ApiPodStatus,
};
use rustix::fs::{CWD, FileType as RawType, Mode};

use super::*;
use crate::kuberuntime::runtime_status::to_container_status;

const WAIT: Duration = Duration::from_secs(5);

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(CWD, path, RawType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
}

/// An exited container whose termination message path is backed by `host_path` and whose log
/// is `log_path`.
fn exited(
    host_path: &Path,
    log_path: &Path,
    exit_code: i32,
    policy: &str,
) -> (
    api::ContainerStatus,
    ContainerStatus,
    ContainerAnnotationInfo,
) {
    let status = api::ContainerStatus {
        id: "c1".into(),
        state: api::ContainerState::ContainerExited as i32,
        exit_code,
        reason: if exit_code == 0 { "Completed" } else { "Error" }.into(),
        mounts: vec![api::Mount {
            container_path: "/dev/termination-log".into(),
            host_path: host_path.display().to_string(),
            ..Default::default()
        }],
        log_path: log_path.display().to_string(),
        ..Default::default()
    };
    let converted = to_container_status(&status, "sb1");
    let annotations = ContainerAnnotationInfo {
        termination_message_path: "/dev/termination-log".into(),
        termination_message_policy: policy.into(),
        ..Default::default()
    };
    (status, converted, annotations)
}

/// The message, or a failure if reading it takes longer than `WAIT` (the blocking open of
/// a FIFO never returns: the writer end is then opened to let the stuck reader go).
async fn message_of(host_path: &Path, log_path: &Path, exit_code: i32, policy: &str) -> String {
    let (status, converted, annotations) = exited(host_path, log_path, exit_code, policy);
    let read = termination_message(&status, &converted, &annotations);
    match tokio::time::timeout(WAIT, read).await {
        Ok(message) => message,
        Err(_) => {
            for stuck in [host_path, log_path] {
                let _ = rustix::fs::open(
                    stuck,
                    rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NONBLOCK,
                    Mode::empty(),
                );
            }
            panic!("reading the termination message of {host_path:?} hung");
        }
    }
}

fn cri_log(lines: impl IntoIterator<Item = String>) -> String {
    lines
        .into_iter()
        .map(|l| format!("2026-01-01T00:00:00.000000000Z stdout F {l}\n"))
        .collect()
}

#[tokio::test]
async fn a_fifo_at_the_termination_message_path_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let log = dir.path().join("0.log");
    std::fs::write(&log, cri_log(["from the log".to_owned()])).unwrap();

    let message = message_of(&fifo, &log, 1, "File").await;
    assert!(
        message.starts_with(&format!(
            "Error on reading termination log {}: ",
            fifo.display()
        )) && message.contains("not a regular file but a FIFO"),
        "{message}"
    );
    // As upstream, a file that cannot be read is not replaced by the logs.
    let message = message_of(&fifo, &log, 1, "FallbackToLogsOnError").await;
    assert!(message.contains("FIFO"), "{message}");
}

#[tokio::test]
async fn a_fifo_in_place_of_the_log_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log");
    mkfifo(&log);
    let missing = dir.path().join("termination-log");
    let message = message_of(&missing, &log, 1, "FallbackToLogsOnError").await;
    assert!(
        message.starts_with("Error on reading termination message from logs: ")
            && message.contains("is a FIFO, not a regular file"),
        "{message}"
    );
}

#[tokio::test]
async fn links_devices_sockets_and_directories_are_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "host secret").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let socket = dir.path().join("socket");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let log = dir.path().join("0.log");

    for (path, kind) in [
        (link.as_path(), "symbolic link"),
        (Path::new("/dev/null"), "character device"),
        (socket.as_path(), "socket"),
        (dir.path(), "directory"),
    ] {
        match read_pod_file_tail(path, 4096) {
            Err(PodFileError::NotRegular { kind: k, .. }) => assert_eq!(k, kind, "{path:?}"),
            other => panic!("{path:?} ({kind}) was not refused: {other:?}"),
        }
        let message = message_of(path, &log, 0, "File").await;
        assert!(
            message.contains(&format!("not a regular file but a {kind}")),
            "{path:?}: {message}"
        );
        assert!(!message.contains("host secret"));
    }
    // The link's target itself is a regular file and is read.
    assert_eq!(message_of(&secret, &log, 0, "File").await, "host secret");
}

#[tokio::test]
async fn a_huge_message_file_gives_its_last_4_kib() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("termination-log");
    let mut data = vec![b'a'; 1024 * 1024 - 4096];
    data.extend(std::iter::repeat_n(b'z', 4096));
    std::fs::write(&file, &data).unwrap();

    let (tail, whole) = read_pod_file_tail(&file, MAX_TERMINATION_MESSAGE_LENGTH as u64).unwrap();
    assert_eq!(tail.len(), 4096);
    assert!(!whole);
    assert!(tail.iter().all(|b| *b == b'z'));

    let message = message_of(&file, &dir.path().join("0.log"), 0, "File").await;
    assert_eq!(message, "z".repeat(4096));

    // A small file is read whole.
    std::fs::write(&file, "bye").unwrap();
    assert_eq!(
        read_pod_file_tail(&file, 4096).unwrap(),
        (b"bye".to_vec(), true)
    );
}

#[tokio::test]
async fn the_log_fallback_keeps_the_last_80_lines_and_at_most_2_kib() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("termination-log");
    let log = dir.path().join("0.log");

    // 200 short lines: the last 80 of them.
    std::fs::write(&log, cri_log((0..200).map(|i| format!("l{i}")))).unwrap();
    let message = message_of(&missing, &log, 1, "FallbackToLogsOnError").await;
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(lines.len(), 80);
    assert_eq!(lines[0], "l120");
    assert_eq!(lines[79], "l199");

    // Long lines: the last 2 KiB of their text.
    std::fs::write(
        &log,
        cri_log((0..100).map(|i| format!("{i:04}{}", "x".repeat(500)))),
    )
    .unwrap();
    let message = message_of(&missing, &log, 1, "FallbackToLogsOnError").await;
    assert_eq!(message.len(), MAX_TERMINATION_MESSAGE_LOG_LENGTH);
    assert!(message.ends_with("x\n"));

    // A 3 MiB log: only its end is read, and still gives the last lines.
    let big = cri_log((0..60_000).map(|i| format!("line{i:05}{}", "y".repeat(20))));
    assert!(big.len() > 3 * 1024 * 1024);
    std::fs::write(&log, &big).unwrap();
    let (data, whole) =
        read_log_tail(&log, MAX_TERMINATION_MESSAGE_LOG_LINES, LOG_TAIL_READ_LIMIT).unwrap();
    assert!(!whole);
    assert!(
        data.len() as u64 <= LOG_TAIL_CHUNK,
        "read {} bytes",
        data.len()
    );
    let message = message_of(&missing, &log, 1, "FallbackToLogsOnError").await;
    assert!(
        message.ends_with(&format!("line59999{}\n", "y".repeat(20))),
        "{message}"
    );
    assert!(message.len() <= MAX_TERMINATION_MESSAGE_LOG_LENGTH);

    // No fallback for a clean exit or the File policy.
    assert_eq!(
        message_of(&missing, &log, 0, "FallbackToLogsOnError").await,
        ""
    );
    assert_eq!(message_of(&missing, &log, 1, "File").await, "");
}

#[tokio::test]
async fn a_read_that_never_answers_is_given_up_at_its_deadline() {
    let (release, stuck) = std::sync::mpsc::channel::<()>();
    let started = Instant::now();
    let result = read_with_deadline("/stuck", Duration::from_millis(200), move || {
        let _ = stuck.recv();
        Ok(())
    })
    .await;
    assert!(
        matches!(result, Err(PodFileError::TimedOut { ref path, .. }) if path == "/stuck"),
        "{result:?}"
    );
    assert!(started.elapsed() < WAIT);
    drop(release);
}

fn terminated(name: &str, message: &str) -> ApiContainerStatus {
    let state = |m: &str| ContainerState {
        terminated: Some(ContainerStateTerminated {
            message: Some(m.to_owned()),
            ..Default::default()
        }),
        ..Default::default()
    };
    ApiContainerStatus {
        name: name.into(),
        state: Some(state(message)),
        last_state: Some(state(message)),
        ..Default::default()
    }
}

#[test]
fn a_pods_messages_share_12_kib() {
    let container = |name: &str| Container {
        name: name.into(),
        ..Default::default()
    };
    let pod = Pod {
        spec: Some(PodSpec {
            containers: vec![container("a"), container("b"), container("c")],
            init_containers: Some(vec![container("i")]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let full = "m".repeat(MAX_TERMINATION_MESSAGE_LENGTH);
    // A message of multi-byte characters is cut at a character boundary.
    let wide = format!("a{}", "é".repeat(MAX_TERMINATION_MESSAGE_LENGTH / 2 - 1));
    let mut status = ApiPodStatus {
        container_statuses: Some(vec![
            terminated("a", &full),
            terminated("b", "short"),
            terminated("c", &wide),
        ]),
        init_container_statuses: Some(vec![terminated("i", &full)]),
        ephemeral_container_statuses: Some(vec![terminated("debug", &full)]),
        ..Default::default()
    };
    bound_pod_termination_messages(&pod, &mut status);

    let share = MAX_POD_TERMINATION_MESSAGE_LENGTH / 4;
    let message = |s: &ApiContainerStatus, last: bool| {
        let state = if last { &s.last_state } else { &s.state };
        state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .message
            .clone()
            .unwrap()
    };
    let mut total = 0;
    for s in status
        .container_statuses
        .iter()
        .chain(status.init_container_statuses.iter())
        .flatten()
    {
        for last in [false, true] {
            let m = message(s, last);
            assert!(m.len() <= share, "{}: {} bytes", s.name, m.len());
            if !last {
                total += m.len();
            }
        }
    }
    assert!(total <= MAX_POD_TERMINATION_MESSAGE_LENGTH);
    let containers = status.container_statuses.as_ref().unwrap();
    assert_eq!(message(&containers[0], false), "m".repeat(share));
    assert_eq!(message(&containers[1], false), "short");
    assert_eq!(
        message(&containers[2], false),
        format!("a{}", "é".repeat(share / 2 - 1))
    );
    // Ephemeral containers are not counted nor cut, as upstream.
    let ephemeral = &status.ephemeral_container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        message(ephemeral, false).len(),
        MAX_TERMINATION_MESSAGE_LENGTH
    );

    // One container alone keeps all of its (at most 4 KiB) message.
    let pod = Pod {
        spec: Some(PodSpec {
            containers: vec![container("a")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut status = ApiPodStatus {
        container_statuses: Some(vec![terminated("a", &full)]),
        ..Default::default()
    };
    bound_pod_termination_messages(&pod, &mut status);
    assert_eq!(
        message(&status.container_statuses.unwrap()[0], false).len(),
        MAX_TERMINATION_MESSAGE_LENGTH
    );
}

/// The status manager applies the budget to every status it records (upstream
/// `updateStatusInternal` calls `normalizeStatus`).
#[test]
fn the_status_manager_keeps_a_pods_messages_within_12_kib() {
    let containers: Vec<Container> = (0..6)
        .map(|i| Container {
            name: format!("c{i}"),
            ..Default::default()
        })
        .collect();
    let pod = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            uid: Some("u1".into()),
            name: Some("p".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: containers.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let full = "m".repeat(MAX_TERMINATION_MESSAGE_LENGTH);
    let status = ApiPodStatus {
        container_statuses: Some(
            containers
                .iter()
                .map(|c| terminated(&c.name, &full))
                .collect(),
        ),
        ..Default::default()
    };
    let manager = crate::status::manager::StatusManager::new();
    manager.set_pod_status(&pod, status);
    let recorded = manager.get_pod_status("u1").unwrap();
    let total: usize = recorded
        .container_statuses
        .iter()
        .flatten()
        .map(|s| {
            let t = s.state.as_ref().unwrap().terminated.as_ref().unwrap();
            t.message.as_ref().unwrap().len()
        })
        .sum();
    assert_eq!(total, MAX_POD_TERMINATION_MESSAGE_LENGTH);
}
