//! Tests of the container GC: selection tables and runs against the fake runtime.

use super::*;
use rkubelet_cri::fake::FakeRuntime;
use std::collections::HashMap;

const SEC: i64 = 1_000_000_000;

fn c(
    id: &str,
    uid: &str,
    name: &str,
    created_s: i64,
    attempt: u32,
    state: ContainerState,
) -> GcContainer {
    GcContainer {
        id: id.to_owned(),
        pod_uid: uid.to_owned(),
        name: name.to_owned(),
        sandbox_id: format!("sb-{uid}"),
        created_at: created_s * SEC,
        attempt,
        state,
    }
}

fn dead(id: &str, uid: &str, name: &str, created_s: i64) -> GcContainer {
    c(id, uid, name, created_s, 0, ContainerState::ContainerExited)
}

fn states(removed: &[&str], terminated: &[&str]) -> impl Fn(&str) -> PodGcState {
    let removed: Vec<String> = removed.iter().map(|s| (*s).to_owned()).collect();
    let terminated: Vec<String> = terminated.iter().map(|s| (*s).to_owned()).collect();
    move |uid: &str| {
        if removed.iter().any(|r| r == uid) {
            PodGcState::Removed
        } else if terminated.iter().any(|t| t == uid) {
            PodGcState::Terminated
        } else {
            PodGcState::Active
        }
    }
}

fn ids(v: &[&GcContainer]) -> Vec<String> {
    v.iter().map(|c| c.id.clone()).collect()
}

fn policy(min_age_s: u64, per: i32, max: i32) -> ContainerGcPolicy {
    ContainerGcPolicy {
        min_age: Duration::from_secs(min_age_s),
        max_per_pod_container: per,
        max_containers: max,
    }
}

#[test]
fn container_selection_table() {
    let now = 1000 * SEC;
    struct Case {
        name: &'static str,
        containers: Vec<GcContainer>,
        policy: ContainerGcPolicy,
        sources_ready: bool,
        evict_non_deleted: bool,
        removed_pods: Vec<&'static str>,
        terminated_pods: Vec<&'static str>,
        want: Vec<&'static str>,
    }
    let base = |name, containers, policy, want| Case {
        name,
        containers,
        policy,
        sources_ready: true,
        evict_non_deleted: false,
        removed_pods: vec![],
        terminated_pods: vec![],
        want,
    };
    let cases = vec![
        base(
            "keeps the newest dead container per container, removes older ones oldest first",
            vec![
                dead("a1", "p", "a", 10),
                dead("a3", "p", "a", 30),
                dead("a2", "p", "a", 20),
                dead("b1", "p", "b", 5),
            ],
            policy(0, 1, -1),
            vec!["a1", "a2"],
        ),
        base(
            "running containers are never candidates",
            vec![
                c("r", "p", "a", 1, 5, ContainerState::ContainerRunning),
                dead("a1", "p", "a", 10),
                dead("a2", "p", "a", 20),
            ],
            policy(0, 1, -1),
            vec!["a1"],
        ),
        base(
            "newest by creation time whatever the attempt (a restarted kubelet may reset it)",
            vec![
                c("x", "p", "a", 50, 1, ContainerState::ContainerExited),
                c("y", "p", "a", 10, 2, ContainerState::ContainerExited),
                c("z", "p", "a", 10, 1, ContainerState::ContainerExited),
            ],
            policy(0, 1, -1),
            vec!["z", "y"],
        ),
        base(
            "containers younger than minimum age are kept",
            vec![
                dead("old", "p", "a", 100),
                dead("mid", "p", "a", 900),
                dead("young", "p", "a", 990),
            ],
            policy(60, 0, -1),
            vec!["old", "mid"],
        ),
        base(
            "negative per-container limit keeps all",
            vec![dead("a1", "p", "a", 10), dead("a2", "p", "a", 20)],
            policy(0, -1, -1),
            vec![],
        ),
        base(
            "global cap: equal share per unit first, then the oldest overall",
            vec![
                dead("a1", "p", "a", 10),
                dead("a2", "p", "a", 20),
                dead("a3", "p", "a", 30),
                dead("b1", "q", "b", 15),
                dead("b2", "q", "b", 25),
                dead("c1", "r", "c", 5),
            ],
            policy(0, -1, 2),
            // share = max(2/3, 1) = 1: a1, a2, b1 go (oldest first); then 3 left
            // (a3, b2, c1) > 2: the oldest, c1.
            vec!["a1", "a2", "b1", "c1"],
        ),
        base(
            "global cap not exceeded removes nothing",
            vec![dead("a1", "p", "a", 10), dead("b1", "q", "b", 15)],
            policy(0, -1, 5),
            vec![],
        ),
        Case {
            removed_pods: vec!["gone"],
            ..base(
                "deleted pods lose every dead container once sources are ready",
                vec![
                    dead("g1", "gone", "a", 10),
                    dead("g2", "gone", "a", 20),
                    dead("k1", "p", "a", 10),
                ],
                policy(0, 1, -1),
                vec!["g1", "g2"],
            )
        },
        Case {
            removed_pods: vec!["gone"],
            sources_ready: false,
            ..base(
                "deleted pods are treated as live until all sources are ready",
                vec![dead("g1", "gone", "a", 10), dead("g2", "gone", "a", 20)],
                policy(0, 1, -1),
                vec!["g1"],
            )
        },
        Case {
            terminated_pods: vec!["done"],
            ..base(
                "terminated pods keep their last container in a periodic run",
                vec![dead("d1", "done", "a", 10)],
                policy(0, 1, -1),
                vec![],
            )
        },
        Case {
            terminated_pods: vec!["done"],
            evict_non_deleted: true,
            ..base(
                "delete_all_unused_containers also empties terminated pods",
                vec![dead("d1", "done", "a", 10), dead("k1", "p", "a", 10)],
                policy(0, 1, -1),
                vec!["d1"],
            )
        },
    ];
    for case in cases {
        let st = states(&case.removed_pods, &case.terminated_pods);
        let got = select_containers(
            &case.containers,
            &case.policy,
            now,
            case.sources_ready,
            case.evict_non_deleted,
            &st,
        );
        assert_eq!(ids(&got), case.want, "{}", case.name);
    }
}

fn sb(id: &str, uid: &str, created_s: i64, attempt: u32, ready: bool) -> GcSandbox {
    GcSandbox {
        id: id.to_owned(),
        pod_uid: uid.to_owned(),
        created_at: created_s * SEC,
        attempt,
        ready,
    }
}

#[test]
fn sandbox_selection_table() {
    let sandboxes = vec![
        sb("p-old", "p", 10, 0, false),
        sb("p-mid", "p", 20, 1, false),
        sb("p-new", "p", 30, 2, false),
        sb("q-ready", "q", 10, 0, true),
        sb("q-dead", "q", 5, 0, false),
        sb("g-1", "gone", 10, 0, false),
        sb("g-2", "gone", 20, 1, false),
        sb("g-busy", "gone", 30, 2, false),
        sb("t-1", "done", 10, 0, false),
    ];
    let containers = vec![GcContainer {
        sandbox_id: "g-busy".to_owned(),
        ..dead("x", "gone", "a", 10)
    }];
    let st = states(&["gone"], &["done"]);
    let got: Vec<&str> = select_sandboxes(&sandboxes, &containers, false, &st)
        .iter()
        .map(|s| s.id.as_str())
        .collect();
    // A live pod keeps its newest sandbox (p-new, q-ready); a ready sandbox or one with
    // containers is never removed; a deleted pod loses all dead ones; a terminated pod keeps one.
    assert_eq!(got, vec!["g-1", "g-2", "p-old", "p-mid", "q-dead"]);
    let got: Vec<&str> = select_sandboxes(&sandboxes, &containers, true, &st)
        .iter()
        .map(|s| s.id.as_str())
        .collect();
    assert_eq!(got, vec!["t-1", "g-1", "g-2", "p-old", "p-mid", "q-dead"]);
}

#[test]
fn log_dir_selection() {
    let names = vec![
        "default_web_uid-live".to_owned(),
        "kube-system_dns_x_uid-gone".to_owned(),
        "ns_pod_uid-done".to_owned(),
    ];
    let st = states(&["uid-gone"], &["uid-done"]);
    assert_eq!(pod_uid_of_log_dir("kube-system_dns_x_uid-gone"), "uid-gone");
    assert_eq!(
        select_log_dirs(&names, true, &st),
        vec!["kube-system_dns_x_uid-gone"]
    );
    assert!(select_log_dirs(&names, false, &st).is_empty());
}

#[test]
fn legacy_symlink_names() {
    let id = "a".repeat(64);
    assert_eq!(
        container_id_of_legacy_symlink(&format!("web_default_app-{id}.log")),
        Some(id.as_str())
    );
    assert_eq!(container_id_of_legacy_symlink("short-abc.log"), None);
    assert_eq!(container_id_of_legacy_symlink(&format!("{id}.log")), None);
    assert_eq!(container_id_of_legacy_symlink(&format!("x-{id}.txt")), None);
}

#[tokio::test(start_paused = true)]
async fn dead_legacy_symlinks_are_removed_unless_the_container_runs() {
    let mut env = Env::new();
    env.sandbox("p", 0).await;
    let dead_id = env.dead_container("p", "app", 0).await;
    let links = tempfile::tempdir().unwrap();
    let dangling = |name: &str| {
        let link = links.path().join(name);
        std::os::unix::fs::symlink(links.path().join("missing"), &link).unwrap();
        link
    };
    let unknown = dangling(&format!("x_ns_gone-{}.log", "c".repeat(64)));
    let exited = dangling(&format!("pod-p_ns_app-{dead_id}.log"));
    let live_target = links.path().join("target.log");
    std::fs::write(&live_target, "x").unwrap();
    let healthy = links.path().join("ok.log");
    std::os::unix::fs::symlink(&live_target, &healthy).unwrap();
    // A running container whose log is mid-rotation keeps its link.
    let sid = env.sandboxes["p"].clone();
    let running = env
        .rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: sid,
            config: Some(api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "run".to_owned(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: "busybox:1.36".to_owned(),
                    ..Default::default()
                }),
                labels: [(POD_UID_LABEL.to_owned(), "p".to_owned())].into(),
                ..Default::default()
            }),
            sandbox_config: None,
        })
        .await
        .unwrap()
        .container_id;
    env.rt
        .start_container(api::StartContainerRequest {
            container_id: running.clone(),
        })
        .await
        .unwrap();
    let mid_rotation = dangling(&format!("pod-p_ns_run-{running}.log"));
    let gc = ContainerGc::new(
        env.rt.clone(),
        ContainerGcConfig {
            policy: ContainerGcPolicy::default(),
            pod_logs_dir: env.logs.path().to_owned(),
            container_log_symlink_dir: Some(links.path().to_owned()),
        },
        Arc::new(|_: &str| PodGcState::Active),
        Arc::new(|| true),
    )
    .with_clock(env.clock);
    gc.garbage_collect().await.unwrap();
    assert!(!unknown.is_symlink(), "container unknown to the runtime");
    assert!(!exited.is_symlink(), "exited container");
    assert!(mid_rotation.is_symlink(), "running container");
    assert!(healthy.is_symlink(), "target exists");
}

/// A fake runtime with one sandbox per pod UID and helpers to add exited containers.
struct Env {
    rt: Arc<FakeRuntime>,
    sandboxes: HashMap<String, String>,
    logs: tempfile::TempDir,
    /// Anchored with the fake runtime's clock so both follow paused time alike.
    clock: Clock,
}

impl Env {
    fn new() -> Self {
        Self {
            rt: Arc::new(FakeRuntime::with_images(&["busybox:1.36"])),
            sandboxes: HashMap::new(),
            logs: tempfile::tempdir().unwrap(),
            clock: Clock::new(),
        }
    }

    fn log_dir(&self, uid: &str) -> PathBuf {
        self.logs.path().join(format!("ns_pod-{uid}_{uid}"))
    }

    async fn sandbox(&mut self, uid: &str, attempt: u32) -> String {
        let dir = self.log_dir(uid);
        std::fs::create_dir_all(dir.join("c")).unwrap();
        let resp = self
            .rt
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(api::PodSandboxConfig {
                    metadata: Some(api::PodSandboxMetadata {
                        name: format!("pod-{uid}"),
                        uid: uid.to_owned(),
                        namespace: "ns".to_owned(),
                        attempt,
                    }),
                    log_directory: dir.to_string_lossy().into_owned(),
                    labels: [(POD_UID_LABEL.to_owned(), uid.to_owned())].into(),
                    ..Default::default()
                }),
                runtime_handler: String::new(),
            })
            .await
            .unwrap();
        self.sandboxes
            .insert(uid.to_owned(), resp.pod_sandbox_id.clone());
        resp.pod_sandbox_id
    }

    /// Creates, starts and exits container `name` (attempt `attempt`) of pod `uid`; writes its
    /// log file so removal of logs can be checked.
    async fn dead_container(&mut self, uid: &str, name: &str, attempt: u32) -> String {
        let sid = self.sandboxes[uid].clone();
        let dir = self.log_dir(uid);
        let resp = self
            .rt
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: sid,
                config: Some(api::ContainerConfig {
                    metadata: Some(api::ContainerMetadata {
                        name: name.to_owned(),
                        attempt,
                    }),
                    image: Some(api::ImageSpec {
                        image: "busybox:1.36".to_owned(),
                        ..Default::default()
                    }),
                    log_path: format!("c/{attempt}.log"),
                    labels: [
                        (POD_UID_LABEL.to_owned(), uid.to_owned()),
                        (CONTAINER_NAME_LABEL.to_owned(), name.to_owned()),
                    ]
                    .into(),
                    ..Default::default()
                }),
                sandbox_config: Some(api::PodSandboxConfig {
                    log_directory: dir.to_string_lossy().into_owned(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap();
        let id = resp.container_id;
        std::fs::write(dir.join(format!("c/{attempt}.log")), "x\n").unwrap();
        self.rt
            .start_container(api::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap();
        assert!(self.rt.exit_container(&id, 1));
        tokio::time::advance(Duration::from_secs(1)).await;
        id
    }

    fn gc(&self, policy: ContainerGcPolicy, state: PodStateFn, ready: bool) -> ContainerGc {
        ContainerGc::new(
            self.rt.clone(),
            ContainerGcConfig {
                policy,
                pod_logs_dir: self.logs.path().to_owned(),
                container_log_symlink_dir: None,
            },
            state,
            Arc::new(move || ready),
        )
        .with_clock(self.clock)
    }

    fn container_ids(&self) -> Vec<String> {
        self.rt.containers().into_iter().map(|c| c.id).collect()
    }
}

#[tokio::test(start_paused = true)]
async fn gc_run_removes_old_dead_containers_sandboxes_and_log_dirs() {
    let mut env = Env::new();
    env.sandbox("live", 0).await;
    let c0 = env.dead_container("live", "app", 0).await;
    let c1 = env.dead_container("live", "app", 1).await;
    let c2 = env.dead_container("live", "app", 2).await;
    // The live pod's first sandbox died and was replaced.
    let old_sb = env.sandboxes["live"].clone();
    assert!(env.rt.kill_sandbox(&old_sb));
    env.sandbox("live", 1).await;
    env.sandbox("gone", 0).await;
    let g0 = env.dead_container("gone", "app", 0).await;

    let state: PodStateFn = Arc::new(|uid: &str| {
        if uid == "gone" {
            PodGcState::Removed
        } else {
            PodGcState::Active
        }
    });
    let report = env
        .gc(ContainerGcPolicy::default(), state, true)
        .garbage_collect()
        .await
        .unwrap();
    let mut want = vec![c0.clone(), c1.clone(), g0.clone()];
    want.sort();
    let mut got = report.containers.clone();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(env.container_ids(), vec![c2.clone()]);
    // Logs of removed containers went with them; the kept one's log stays.
    assert!(!env.log_dir("live").join("c/0.log").exists());
    assert!(env.log_dir("live").join("c/2.log").exists());
    // The old sandbox of the live pod still holds c2, so it stays; the gone pod's sandbox
    // (still ready) is stopped only by its pod worker, not by GC.
    assert!(report.sandboxes.is_empty(), "{report:?}");
    assert_eq!(report.log_dirs, vec![env.log_dir("gone")]);
    assert!(env.log_dir("live").exists());

    // Once the gone pod's sandbox is dead it is removed; the live pod's old one too when its
    // last container is gone (delete_all with a policy of 0 per container).
    let gone_sb = env.sandboxes["gone"].clone();
    assert!(env.rt.kill_sandbox(&gone_sb));
    let state: PodStateFn = Arc::new(|uid: &str| {
        if uid == "gone" {
            PodGcState::Removed
        } else {
            PodGcState::Active
        }
    });
    let gc = env.gc(policy(0, 0, -1), state, true);
    let report = gc.delete_all_unused_containers().await.unwrap();
    assert_eq!(report.containers, vec![c2]);
    let mut sbs = report.sandboxes.clone();
    sbs.sort();
    let mut want = vec![old_sb, gone_sb];
    want.sort();
    assert_eq!(sbs, want);
    assert_eq!(
        env.rt.sandboxes().len(),
        1,
        "the live pod's newest sandbox stays"
    );
}

#[tokio::test(start_paused = true)]
async fn periodic_loop_collects_and_reports_failures() {
    let mut env = Env::new();
    env.sandbox("p", 0).await;
    env.dead_container("p", "app", 0).await;
    let keep = env.dead_container("p", "app", 1).await;
    let events = crate::events::CollectingRecorder::default();
    let gc = env.gc(
        ContainerGcPolicy::default(),
        Arc::new(|_: &str| PodGcState::Active),
        true,
    );
    let cancel = CancellationToken::new();
    env.rt.fail_next(
        "ListContainers",
        CriError::unknown("ListContainers", "boom"),
    );
    let task = tokio::spawn(gc.run(
        CONTAINER_GC_PERIOD,
        Arc::new(events.clone()),
        cancel.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(env.container_ids().len(), 2, "first run failed");
    tokio::time::sleep(CONTAINER_GC_PERIOD).await;
    assert_eq!(env.container_ids(), vec![keep]);
    cancel.cancel();
    task.await.unwrap();
    let failed = events.with_reason("ContainerGCFailed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].event_type, EventType::Warning);
    assert!(
        failed[0].message.starts_with("failed to list containers"),
        "{failed:?}"
    );
}
