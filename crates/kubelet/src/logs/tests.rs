//! Tests of the log manager against the fake runtime (the fake does not write logs: the tests
//! play the runtime's part by writing the live file, and recreating it after a reopen).
#![allow(clippy::unwrap_used)]

use super::*;
use rkubelet_cri::api;
use rkubelet_cri::fake::FakeRuntime;

struct Env {
    rt: Arc<FakeRuntime>,
    dir: tempfile::TempDir,
    id: String,
}

impl Env {
    async fn new() -> Self {
        let rt = Arc::new(FakeRuntime::with_images(&["busybox:1.36"]));
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("c")).unwrap();
        let sb = rt
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(api::PodSandboxConfig {
                    metadata: Some(api::PodSandboxMetadata {
                        name: "p".to_owned(),
                        uid: "u".to_owned(),
                        namespace: "ns".to_owned(),
                        attempt: 0,
                    }),
                    ..Default::default()
                }),
                runtime_handler: String::new(),
            })
            .await
            .unwrap()
            .pod_sandbox_id;
        let id = rt
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: sb,
                config: Some(api::ContainerConfig {
                    metadata: Some(api::ContainerMetadata {
                        name: "c".to_owned(),
                        attempt: 0,
                    }),
                    image: Some(api::ImageSpec {
                        image: "busybox:1.36".to_owned(),
                        ..Default::default()
                    }),
                    log_path: "c/0.log".to_owned(),
                    ..Default::default()
                }),
                sandbox_config: Some(api::PodSandboxConfig {
                    log_directory: dir.path().to_string_lossy().into_owned(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .container_id;
        rt.start_container(api::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
        Self { rt, dir, id }
    }

    fn live(&self) -> PathBuf {
        self.dir.path().join("c/0.log")
    }

    fn write_live(&self, bytes: usize) {
        std::fs::write(self.live(), "x".repeat(bytes)).unwrap();
    }

    fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir.path().join("c"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    fn manager(&self, max_size: u64, max_files: usize) -> ContainerLogManager {
        ContainerLogManager::new(
            self.rt.clone(),
            LogManagerConfig {
                policy: LogRotatePolicy {
                    max_size,
                    max_files,
                },
                max_workers: 1,
                monitor_interval: Duration::from_secs(10),
            },
        )
    }
}

#[test]
fn config_validation_names_fields() {
    let i = Duration::from_secs(10);
    assert_eq!(
        LogManagerConfig::from_config(10, 1, 1, i)
            .unwrap_err()
            .to_string(),
        "invalid containerLogMaxFiles 1, must be > 1"
    );
    assert_eq!(
        LogManagerConfig::from_config(10, 5, 0, i)
            .unwrap_err()
            .to_string(),
        "containerLogMaxWorkers 0 must be greater than or equal to 1"
    );
    assert_eq!(LogManagerConfig::from_config(-1, 5, 1, i).unwrap(), None);
    let c = LogManagerConfig::from_config(10 * 1024 * 1024, 5, 2, i)
        .unwrap()
        .unwrap();
    assert_eq!(c.policy.max_size, 10 * 1024 * 1024);
    assert_eq!(c.policy.max_files, 5);
}

#[tokio::test(start_paused = true)]
async fn rotates_compresses_and_keeps_at_most_max_files() {
    let env = Env::new().await;
    let manager = env.manager(100, 3);
    env.write_live(50);
    assert_eq!(
        manager.rotate_logs().await.unwrap(),
        vec![(env.id.clone(), Outcome::Kept)]
    );
    assert_eq!(env.rt.call_count("ReopenContainerLog"), 0);

    let mut rotated = Vec::new();
    for round in 0..4 {
        env.write_live(100 + round);
        let out = manager.rotate_logs().await.unwrap();
        let Outcome::Rotated(path) = &out[0].1 else {
            panic!("round {round}: {out:?}");
        };
        rotated.push(path.file_name().unwrap().to_string_lossy().into_owned());
        assert!(
            !env.live().exists(),
            "renamed away until the runtime reopens"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    assert_eq!(env.rt.call_count("ReopenContainerLog"), 4);
    for r in &rotated {
        assert!(
            r.starts_with("0.log.") && r.len() == "0.log.YYYYMMDD-HHMMSS".len(),
            "{r}"
        );
    }
    // The runtime reopened the live file: max 3 files = the live one, the newest rotated
    // (uncompressed) and one compressed.
    env.write_live(10);
    assert_eq!(
        env.files(),
        vec![
            "0.log".to_owned(),
            format!("{}.gz", rotated[2]),
            rotated[3].clone(),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn failed_reopen_renames_back_and_missing_log_is_reopened() {
    let env = Env::new().await;
    let manager = env.manager(10, 5);
    env.write_live(20);
    env.rt.fail_next(
        "ReopenContainerLog",
        CriError::unknown("ReopenContainerLog", "boom"),
    );
    assert!(
        manager.rotate_logs().await.unwrap().is_empty(),
        "failure logged"
    );
    assert_eq!(env.files(), vec!["0.log"], "the live file is put back");
    let err = manager.process_container(&env.id).await;
    assert!(matches!(err, Ok(Outcome::Rotated(_))), "{err:?}");

    // No live file (a reopen that did not land): the manager asks for a reopen first.
    let err = manager.process_container(&env.id).await.unwrap_err();
    assert!(matches!(err, LogError::Stat { .. }), "{err:?}");
    assert_eq!(env.rt.call_count("ReopenContainerLog"), 3);
}

#[tokio::test(start_paused = true)]
async fn periodic_task_rotates_and_stops_on_cancel() {
    let env = Env::new().await;
    let manager = env.manager(10, 5);
    env.write_live(20);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(cancel.clone()));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(env.rt.call_count("ReopenContainerLog"), 1);
    env.write_live(20);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(env.rt.call_count("ReopenContainerLog"), 2);
    cancel.cancel();
    task.await.unwrap();
    // Two rotations (the fake runtime does not recreate the live file): the older one is
    // compressed, the newer one not.
    let files = env.files();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(
        files[0].ends_with(".gz") && !files[1].ends_with(".gz"),
        "{files:?}"
    );
}
