//! Integration test of `RemoteRuntime` against the real containerd started by
//! `dev/runtime.sh up` (endpoint in `RKUBELET_CRI_ENDPOINT`). Drives one busybox pod through
//! its whole CRI lifecycle and checks error mapping for unknown IDs. Cleans up what it created
//! even when an assertion fails.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rkubelet_cri::api;
use rkubelet_cri::{ImageService, RemoteRuntime, RuntimeService};

const BUSYBOX: &str = "docker.io/library/busybox:latest";

fn endpoint() -> String {
    rkubelet_cri::testing::real_runtime_endpoint()
}

async fn connect() -> RemoteRuntime {
    let endpoint = endpoint();
    RemoteRuntime::connect(&endpoint, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("connect to {endpoint}: {e}"))
}

/// A unique pod UID per run so parallel or leftover runs do not collide on sandbox names.
fn unique_uid() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("cri-it-{}-{nanos}", std::process::id())
}

fn sandbox_config(uid: &str, log_dir: &Path) -> api::PodSandboxConfig {
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "cri-it".into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: "cri-it".into(),
        log_directory: log_dir.display().to_string(),
        labels: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
        linux: Some(api::LinuxPodSandboxConfig::default()),
        ..Default::default()
    }
}

#[tokio::test]
async fn version_status_and_images() {
    let rt = connect().await;
    let v = rt
        .version(api::VersionRequest::default())
        .await
        .expect("version");
    assert_eq!(v.runtime_name, "containerd");
    assert_eq!(v.runtime_api_version, "v1");

    let st = rt
        .status(api::StatusRequest::default())
        .await
        .expect("status");
    let conds = st.status.expect("status set").conditions;
    let runtime_ready = conds
        .iter()
        .find(|c| c.r#type == "RuntimeReady")
        .expect("cond");
    assert!(runtime_ready.status, "{conds:?}");

    let image = rt
        .image_status(api::ImageStatusRequest {
            image: Some(api::ImageSpec {
                image: BUSYBOX.into(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .expect("image status")
        .image
        .expect("busybox is present (dev/runtime.sh up imports it)");
    assert!(image.id.starts_with("sha256:"), "{image:?}");
    assert!(image.repo_tags.iter().any(|t| t == BUSYBOX), "{image:?}");

    let missing = rt
        .image_status(api::ImageStatusRequest {
            image: Some(api::ImageSpec {
                image: "docker.io/library/not-there:never".into(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .expect("a missing image is not an error");
    assert!(missing.image.is_none());
}

#[tokio::test]
async fn unknown_ids_map_to_expected_errors() {
    let rt = connect().await;
    let bogus = "0000000000000000000000000000000000000000000000000000000000bogus0";
    let err = rt
        .container_status(api::ContainerStatusRequest {
            container_id: bogus.into(),
            verbose: false,
        })
        .await
        .expect_err("no such container");
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(err.method(), "ContainerStatus");

    let err = rt
        .pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: bogus.into(),
            verbose: false,
        })
        .await
        .expect_err("no such sandbox");
    assert!(err.is_not_found(), "{err:?}");

    let err = rt
        .start_container(api::StartContainerRequest {
            container_id: bogus.into(),
        })
        .await
        .expect_err("no such container");
    assert!(err.is_not_found(), "{err:?}");

    // The semantics FakeRuntime copies: stop of an unknown ID is NotFound on containerd 1.6,
    // removal is idempotent.
    let err = rt
        .stop_container(api::StopContainerRequest {
            container_id: bogus.into(),
            timeout: 1,
        })
        .await
        .expect_err("no such container");
    assert!(err.is_not_found(), "{err:?}");
    let err = rt
        .stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: bogus.into(),
        })
        .await
        .expect_err("no such sandbox");
    assert!(err.is_not_found(), "{err:?}");
    rt.remove_container(api::RemoveContainerRequest {
        container_id: bogus.into(),
    })
    .await
    .expect("RemoveContainer of an unknown ID is ok");
    rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: bogus.into(),
    })
    .await
    .expect("RemovePodSandbox of an unknown ID is ok");
}

/// Waits until `path` has a line ending in `suffix` (CRI log format), up to 10 s.
async fn wait_for_log_line(path: &Path, suffix: &str) -> Result<String, String> {
    let mut content = String::new();
    for _ in 0..100 {
        content = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = content.lines().find(|l| l.ends_with(suffix)) {
            return Ok(line.to_string());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "no line ending in {suffix:?} in {}: {content:?}",
        path.display()
    ))
}

async fn container_state(rt: &RemoteRuntime, id: &str) -> api::ContainerStatus {
    rt.container_status(api::ContainerStatusRequest {
        container_id: id.into(),
        verbose: false,
    })
    .await
    .expect("container status")
    .status
    .expect("status set")
}

async fn pod_lifecycle(
    rt: RemoteRuntime,
    created: Arc<Mutex<Vec<String>>>,
    log_dir: std::path::PathBuf,
) {
    let uid = unique_uid();
    let sandbox_config = sandbox_config(&uid, &log_dir);
    let sid = rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("run pod sandbox")
        .pod_sandbox_id;
    created.lock().expect("lock").push(sid.clone());

    let sb = rt
        .pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: sid.clone(),
            verbose: false,
        })
        .await
        .expect("sandbox status")
        .status
        .expect("set");
    assert_eq!(sb.state, api::PodSandboxState::SandboxReady as i32);
    assert_eq!(
        sb.metadata.as_ref().map(|m| m.uid.as_str()),
        Some(uid.as_str())
    );

    let cid = rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: sid.clone(),
            config: Some(api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "c".into(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: BUSYBOX.into(),
                    ..Default::default()
                }),
                command: vec!["sh".into(), "-c".into(), "echo hello; sleep 3600".into()],
                log_path: "c/0.log".into(),
                ..Default::default()
            }),
            sandbox_config: Some(sandbox_config),
        })
        .await
        .expect("create container")
        .container_id;

    rt.start_container(api::StartContainerRequest {
        container_id: cid.clone(),
    })
    .await
    .expect("start container");
    let st = container_state(&rt, &cid).await;
    assert_eq!(
        st.state,
        api::ContainerState::ContainerRunning as i32,
        "{st:?}"
    );
    assert!(st.started_at > 0);
    let log_path = log_dir.join("c/0.log");
    assert_eq!(st.log_path, log_path.display().to_string());

    let line = wait_for_log_line(&log_path, " stdout F hello")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        line.contains('T') && line.contains('Z'),
        "timestamp first: {line}"
    );

    let out = rt
        .exec_sync(api::ExecSyncRequest {
            container_id: cid.clone(),
            cmd: vec!["echo".into(), "hi".into()],
            timeout: 10,
        })
        .await
        .expect("exec sync");
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.stdout, b"hi\n");

    // Exits of SIGTERM (143) or, if it ignores that, of the SIGKILL at the 2 s timeout (137).
    rt.stop_container(api::StopContainerRequest {
        container_id: cid.clone(),
        timeout: 2,
    })
    .await
    .expect("stop container");
    let st = container_state(&rt, &cid).await;
    assert_eq!(
        st.state,
        api::ContainerState::ContainerExited as i32,
        "{st:?}"
    );
    assert!(matches!(st.exit_code, 137 | 143), "{st:?}");
    assert_eq!(st.reason, "Error");

    rt.remove_container(api::RemoveContainerRequest {
        container_id: cid.clone(),
    })
    .await
    .expect("remove container");
    let err = rt
        .container_status(api::ContainerStatusRequest {
            container_id: cid,
            verbose: false,
        })
        .await
        .expect_err("removed");
    assert!(err.is_not_found(), "{err:?}");

    rt.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: sid.clone(),
    })
    .await
    .expect("stop pod sandbox");
    rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: sid.clone(),
    })
    .await
    .expect("remove pod sandbox");
    let err = rt
        .pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: sid,
            verbose: false,
        })
        .await
        .expect_err("removed");
    assert!(err.is_not_found(), "{err:?}");
}

#[tokio::test]
async fn busybox_pod_lifecycle() {
    let rt = connect().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("pod-logs");
    std::fs::create_dir_all(&log_dir).expect("create log dir");
    let created = Arc::new(Mutex::new(Vec::new()));

    // Run the body as a task so a failed assertion still lets us clean up.
    let result = tokio::spawn(pod_lifecycle(rt.clone(), created.clone(), log_dir)).await;

    let leftovers = created.lock().map(|v| v.clone()).unwrap_or_default();
    for sid in leftovers {
        // Best effort: removing the sandbox also removes its containers.
        let _ = rt
            .stop_pod_sandbox(api::StopPodSandboxRequest {
                pod_sandbox_id: sid.clone(),
            })
            .await;
        let _ = rt
            .remove_pod_sandbox(api::RemovePodSandboxRequest {
                pod_sandbox_id: sid,
            })
            .await;
    }
    if let Err(e) = result {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        panic!("test task failed: {e}");
    }
}
