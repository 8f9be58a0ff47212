//! The whole sync machinery (merger → sync loop → pod workers → kuberuntime → PLEG → status)
//! against the `FakeRuntime`, with paused time: CrashLoopBackOff timing, the termination path,
//! adoption after a kubelet restart, orphan clean-up, and 100-pod churn without leaks.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use kubelet::sources::{ManifestOrigin, static_pods_from_manifest};
use rkubelet_cri::fake::{Behaviour, FakeRuntime};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, phase, set, static_pod, wait_until};

const NODE: &str = "node-a";

fn pod(name: &str, restart: &str, grace: u32) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {restart}\n  terminationGracePeriodSeconds: {grace}\n  containers:\n  - name: {name}-c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
    );
    static_pod(&yaml, name, NODE)
}

struct Harness {
    fake: FakeRuntime,
    events: CollectingRecorder,
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        Self {
            fake: FakeRuntime::with_images(&[IMAGE]),
            events: CollectingRecorder::default(),
            _dir: dir,
            root,
        }
    }

    async fn start(&self) -> Agent {
        self.start_with(|_| {}).await
    }

    /// The first event with `reason`, waited for.
    async fn first_event(&self, reason: &str) -> kubelet::events::RecordedEvent {
        wait_until(&format!("{reason} event"), Duration::from_secs(30), || {
            !self.events.with_reason(reason).is_empty()
        })
        .await;
        self.events.with_reason(reason).remove(0)
    }

    /// Where the agent keeps the logs of `p` (`AgentConfig::for_tests`' layout).
    fn pod_logs(&self, p: &Pod) -> std::path::PathBuf {
        kubelet::kuberuntime::sandbox_config::pod_logs_directory(
            &self.root.join("pods-logs"),
            p.metadata.namespace.as_deref().unwrap_or("default"),
            p.metadata.name.as_deref().unwrap(),
            common::agent::uid(p),
        )
    }

    async fn start_with(&self, tweak: impl FnOnce(&mut AgentConfig)) -> Agent {
        let mut cfg = AgentConfig::for_tests(&self.root, NODE);
        tweak(&mut cfg);
        let deps = fake_deps(&self.fake, &self.events);
        Agent::start(cfg, deps, CancellationToken::new())
            .await
            .unwrap()
    }
}

fn all_running(agent: &Agent, pod: &Pod) -> bool {
    agent
        .status
        .get_pod_status(pod.metadata.uid.as_deref().unwrap())
        .is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.container_statuses.as_ref().is_some_and(|cs| {
                    !cs.is_empty()
                        && cs
                            .iter()
                            .all(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
                })
        })
}

#[tokio::test(start_paused = true)]
async fn crash_loop_backoff_doubles_between_restarts() {
    let h = Harness::new();
    let p = pod("crash", "Always", 1);
    h.fake.on_start("crash-c", Behaviour::ExitImmediately(1));
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;

    let mut starts = Vec::new();
    let begin = Instant::now();
    while starts.len() < 5 && begin.elapsed() < Duration::from_secs(300) {
        let n = h.fake.call_count("StartContainer");
        while starts.len() < n {
            starts.push(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        starts.len(),
        5,
        "container restarts observed: {}",
        starts.len()
    );
    let gaps: Vec<f64> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    // Upstream: the first restart is immediate (the back-off entry is created by it), then
    // 10 s, 20 s, 40 s. A restart happens at the first sync after the window, so each gap is
    // the back-off plus at most a relist and a worker retry period of slack.
    for (gap, want) in gaps.iter().zip([0.0, 10.0, 20.0, 40.0]) {
        assert!(*gap >= want && *gap < want + 12.0, "gaps {gaps:?}");
    }
    // The status catches up with the fifth start at the next sync.
    let uid = p.metadata.uid.clone().unwrap();
    wait_until("restartCount 4", Duration::from_secs(30), || {
        agent
            .status
            .get_pod_status(&uid)
            .and_then(|s| s.container_statuses)
            .is_some_and(|cs| cs[0].restart_count == 4)
    })
    .await;
    let backoffs = h.events.with_reason("BackOff");
    assert!(!backoffs.is_empty());
    assert!(
        backoffs[0].message.starts_with(
            "Back-off restarting failed container crash-c in pod crash-node-a_default("
        )
    );
    agent.shutdown().await;
}

/// `crashLoopBackOff.maxContainerRestartPeriod` (with `KubeletCrashLoopBackOffMax`) caps the
/// restart back-off: with 15s the delays go 0, 10s, 15s, 15s instead of 0, 10s, 20s, 40s.
#[tokio::test(start_paused = true)]
async fn crash_loop_backoff_stops_at_the_configured_max() {
    let h = Harness::new();
    let p = pod("capped", "Always", 1);
    h.fake.on_start("capped-c", Behaviour::ExitImmediately(1));
    let agent = h
        .start_with(|cfg| cfg.crash_loop_max = Some(Duration::from_secs(15)))
        .await;
    set(&agent, vec![p.clone()]).await;

    let mut starts = Vec::new();
    let begin = Instant::now();
    while starts.len() < 5 && begin.elapsed() < Duration::from_secs(300) {
        let n = h.fake.call_count("StartContainer");
        while starts.len() < n {
            starts.push(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(starts.len(), 5, "container restarts: {}", starts.len());
    let gaps: Vec<f64> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    // Each gap is the back-off plus at most a relist and a worker retry period of slack; the
    // uncapped schedule would make the last one at least 40 s.
    for (gap, want) in gaps.iter().zip([0.0, 10.0, 15.0, 15.0]) {
        assert!(*gap >= want && *gap < want + 12.0, "gaps {gaps:?}");
    }
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn removed_pod_is_killed_with_its_grace_period_and_removed() {
    let h = Harness::new();
    let p = pod("term", "Always", 7);
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("pod running", Duration::from_secs(30), || {
        all_running(&agent, &p)
    })
    .await;
    assert_eq!(h.fake.containers().len(), 1);

    h.fake.clear_calls();
    set(&agent, vec![]).await;
    wait_until("runtime empty", Duration::from_secs(60), || {
        h.fake.containers().is_empty() && h.fake.sandboxes().is_empty()
    })
    .await;
    let calls = h.fake.calls();
    let pos = |m: &str| {
        calls
            .iter()
            .position(|c| c == m)
            .unwrap_or_else(|| panic!("{m} not called: {calls:?}"))
    };
    assert!(pos("StopContainer") < pos("StopPodSandbox"));
    assert!(pos("StopPodSandbox") < pos("RemovePodSandbox"));
    let killing = h.events.with_reason("Killing");
    assert_eq!(killing.last().unwrap().message, "Stopping container term-c");
    // Workers and statuses are forgotten by housekeeping.
    wait_until("workers forgotten", Duration::from_secs(10), || {
        agent.workers.sizes() == (0, 0)
    })
    .await;
    assert!(agent.status.is_empty());
    assert!(agent.pods.borrow().is_empty());
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn restart_adopts_running_containers_and_kills_orphans() {
    let h = Harness::new();
    let keep = pod("keep", "Always", 1);
    let gone = pod("gone", "Always", 1);
    let agent = h.start().await;
    set(&agent, vec![keep.clone(), gone.clone()]).await;
    wait_until("both running", Duration::from_secs(30), || {
        all_running(&agent, &keep) && all_running(&agent, &gone)
    })
    .await;
    let before: Vec<_> = h.fake.containers().into_iter().map(|c| c.id).collect();
    // A kubelet shutdown leaves pods running.
    agent.shutdown().await;
    assert_eq!(h.fake.containers().len(), 2);
    h.fake.clear_calls();

    // The new kubelet only has `keep`.
    let agent = h.start().await;
    set(&agent, vec![keep.clone()]).await;
    wait_until("keep running again", Duration::from_secs(30), || {
        all_running(&agent, &keep)
    })
    .await;
    wait_until("orphan removed", Duration::from_secs(30), || {
        h.fake.containers().len() == 1
    })
    .await;
    let after: Vec<_> = h.fake.containers().into_iter().map(|c| c.id).collect();
    assert!(
        before.contains(&after[0]),
        "adopted container must be one of the old ones"
    );
    let keep_status = agent
        .status
        .get_pod_status(keep.metadata.uid.as_deref().unwrap())
        .unwrap();
    let c = &keep_status.container_statuses.unwrap()[0];
    assert_eq!(
        c.container_id.as_deref(),
        Some(format!("containerd://{}", after[0]).as_str())
    );
    assert_eq!(c.restart_count, 0);
    let calls = h.fake.calls();
    for m in ["RunPodSandbox", "CreateContainer", "StartContainer"] {
        assert!(
            !calls.iter().any(|c| c == m),
            "{m} called after restart: {calls:?}"
        );
    }
    assert_eq!(phase(&agent, &gone), None);
    agent.shutdown().await;
}

/// Upstream `cleanupOrphanedPodDirs(allPods, runningRuntimePods)`: the directory of a pod no
/// source has (e.g. a static pod the Go kubelet started under another UID) stays while its
/// containers still run, because they use its files (hosts file, termination-message file,
/// volumes); it goes once the orphan is killed.
#[tokio::test(start_paused = true)]
async fn an_orphans_pod_dir_stays_until_its_containers_are_gone() {
    let h = Harness::new();
    let gone = pod("gone", "Always", 30);
    let agent = h.start().await;
    set(&agent, vec![gone.clone()]).await;
    wait_until("running", Duration::from_secs(30), || {
        all_running(&agent, &gone)
    })
    .await;
    agent.shutdown().await;
    let pod_dir = h.root.join("kubelet/pods").join(common::agent::uid(&gone));
    assert!(pod_dir.join("etc-hosts").is_file());

    // The next kubelet has no source for it; stopping its container takes a while.
    h.fake.set_latency("StopContainer", Duration::from_secs(20));
    let agent = h.start().await;
    set(&agent, vec![]).await;
    wait_until("the orphan being killed", Duration::from_secs(30), || {
        h.fake.call_count("StopContainer") > 0
    })
    .await;
    // Several housekeeping passes (every 2 s) while the container still runs.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(h.fake.containers().len(), 1, "still stopping");
    assert!(
        pod_dir.join("etc-hosts").is_file(),
        "the pod dir of a running orphan was removed"
    );
    wait_until("orphan gone", Duration::from_secs(60), || {
        h.fake.containers().is_empty()
    })
    .await;
    wait_until("pod dir removed", Duration::from_secs(60), || {
        !pod_dir.exists()
    })
    .await;
    agent.shutdown().await;
}

/// A kubelet killed between stopping a removed pod and removing it leaves a stopped sandbox
/// and an exited container of a pod no source has: the next kubelet removes them at its first
/// housekeeping, not a container-GC period (60 s) later.
#[tokio::test(start_paused = true)]
async fn dead_orphan_content_is_removed_at_housekeeping() {
    let h = Harness::new();
    let gone = pod("gone", "Always", 1);
    let agent = h.start().await;
    set(&agent, vec![gone.clone()]).await;
    wait_until("running", Duration::from_secs(30), || {
        all_running(&agent, &gone)
    })
    .await;
    agent.shutdown().await;
    // What the killed kubelet got done: the container stopped, the sandbox stopped.
    for c in h.fake.containers() {
        assert!(h.fake.exit_container(&c.id, 137));
    }
    for s in h.fake.sandboxes() {
        assert!(h.fake.kill_sandbox(&s.id));
    }
    assert_eq!(
        (h.fake.containers().len(), h.fake.sandboxes().len()),
        (1, 1)
    );

    let agent = h.start().await;
    set(&agent, vec![]).await;
    wait_until("dead orphan removed", Duration::from_secs(10), || {
        h.fake.containers().is_empty() && h.fake.sandboxes().is_empty()
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn restart_policy_never_success_is_terminal() {
    let h = Harness::new();
    let p = pod("once", "Never", 1);
    h.fake.on_start("once-c", Behaviour::ExitImmediately(0));
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("Succeeded", Duration::from_secs(30), || {
        phase(&agent, &p).as_deref() == Some("Succeeded")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        h.fake.call_count("StartContainer"),
        1,
        "a completed Never pod is not restarted"
    );
    let s = agent
        .status
        .get_pod_status(p.metadata.uid.as_deref().unwrap())
        .unwrap();
    let term = s.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(
        (term.exit_code, term.reason.as_deref()),
        (0, Some("Completed"))
    );
    agent.shutdown().await;
}

/// The pod sandbox dies (pause process gone): upstream kills the pod, creates a new sandbox,
/// removes the old init containers and runs every init container again in the new sandbox.
#[tokio::test(start_paused = true)]
async fn lost_sandbox_reruns_every_init_container() {
    let h = Harness::new();
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: relaunch\nspec:\n  terminationGracePeriodSeconds: 1\n  initContainers:\n  - name: init-a\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n  - name: init-b\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n  containers:\n  - name: app\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n"
    );
    let p = static_pod(&yaml, "relaunch", NODE);
    h.fake.on_start("init-a", Behaviour::ExitImmediately(0));
    h.fake.on_start("init-b", Behaviour::ExitImmediately(0));
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("pod running", Duration::from_secs(30), || {
        all_running(&agent, &p)
    })
    .await;
    let first = h.fake.sandboxes().remove(0).id;
    assert!(h.fake.kill_sandbox(&first));

    // (sandbox, container name, state) of every container the runtime has.
    let containers = || -> Vec<(String, String, i32)> {
        h.fake
            .containers()
            .into_iter()
            .map(|c| {
                let name = c.metadata.map(|m| m.name).unwrap_or_default();
                (c.pod_sandbox_id, name, c.state)
            })
            .collect()
    };
    let running = rkubelet_cri::api::ContainerState::ContainerRunning as i32;
    let exited = rkubelet_cri::api::ContainerState::ContainerExited as i32;
    wait_until(
        "app running in a new sandbox",
        Duration::from_secs(60),
        || {
            containers()
                .iter()
                .any(|(sb, name, state)| *sb != first && name == "app" && *state == running)
        },
    )
    .await;
    let second = h
        .fake
        .sandboxes()
        .into_iter()
        .find(|s| s.id != first)
        .expect("a new sandbox")
        .id;
    let now = containers();
    for init in ["init-a", "init-b"] {
        assert!(
            now.contains(&(second.clone(), init.to_owned(), exited)),
            "{init} ran again in the new sandbox: {now:?}"
        );
        assert!(
            !now.iter().any(|(sb, name, _)| *sb == first && name == init),
            "{init} of the old sandbox was removed: {now:?}"
        );
    }
    assert!(
        h.fake.calls().iter().any(|c| c == "StopPodSandbox"),
        "the dead sandbox was stopped (its network released)"
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn hundred_pod_churn_leaves_nothing_behind() {
    let h = Harness::new();
    let agent = h.start().await;
    for round in 0..2 {
        let pods: Vec<Pod> = (0..100)
            .map(|i| pod(&format!("churn{round}-{i}"), "Always", 1))
            .collect();
        set(&agent, pods.clone()).await;
        wait_until("100 pods running", Duration::from_secs(120), || {
            pods.iter().all(|p| all_running(&agent, p))
        })
        .await;
        assert_eq!(h.fake.containers().len(), 100);
        set(&agent, vec![]).await;
        wait_until("runtime empty", Duration::from_secs(120), || {
            h.fake.containers().is_empty() && h.fake.sandboxes().is_empty()
        })
        .await;
        wait_until("workers forgotten", Duration::from_secs(30), || {
            agent.workers.sizes() == (0, 0)
        })
        .await;
        assert!(
            agent.status.is_empty(),
            "statuses leaked: {}",
            agent.status.len()
        );
    }
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pods_beyond_max_pods_are_rejected_out_of_pods() {
    let h = Harness::new();
    let agent = h.start_with(|c| c.node_status.max_pods = 2).await;
    let pods: Vec<Pod> = (0..3).map(|i| pod(&format!("m{i}"), "Always", 1)).collect();
    set(&agent, pods.clone()).await;
    wait_until("two running", Duration::from_secs(30), || {
        pods.iter().filter(|p| all_running(&agent, p)).count() == 2
    })
    .await;
    let rejected: Vec<_> = pods
        .iter()
        .filter_map(|p| {
            agent
                .status
                .get_pod_status(p.metadata.uid.as_deref().unwrap())
        })
        .filter(|s| s.phase.as_deref() == Some("Failed"))
        .collect();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].reason.as_deref(), Some("OutOfpods"));
    assert_eq!(
        rejected[0].message.as_deref(),
        Some(
            "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
        )
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(h.fake.sandboxes().len(), 2, "a rejected pod never starts");
    assert_eq!(h.events.with_reason("OutOfpods").len(), 1);
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn empty_dir_is_set_up_mounted_and_removed_with_the_pod() {
    let h = Harness::new();
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: vol\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: work\n    emptyDir: {{}}\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    volumeMounts:\n    - name: work\n      mountPath: /work\n"
    );
    let p = static_pods_from_manifest(
        yaml.as_bytes(),
        NODE,
        &ManifestOrigin::File(Path::new("/m/vol.yaml")),
        false,
    )
    .unwrap()
    .remove(0);
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    wait_until("running", Duration::from_secs(30), || {
        all_running(&agent, &p)
    })
    .await;
    let uid = p.metadata.uid.clone().unwrap();
    let pod_dir = h.root.join("kubelet/pods").join(&uid);
    let work = pod_dir.join("volumes/kubernetes.io~empty-dir/work");
    assert!(work.is_dir());
    let id = h.fake.containers()[0].id.clone();
    let mounts = h.fake.container(&id).unwrap().mounts;
    let by_path = |p: &str| {
        mounts
            .iter()
            .find(|m| m.container_path == p)
            .map(|m| m.host_path.clone())
    };
    assert_eq!(by_path("/work"), Some(work.to_string_lossy().into_owned()));
    assert_eq!(
        by_path("/etc/hosts"),
        Some(pod_dir.join("etc-hosts").to_string_lossy().into_owned())
    );
    assert!(
        by_path("/dev/termination-log")
            .is_some_and(|p| p.starts_with(&*pod_dir.join("containers/c").to_string_lossy()))
    );

    set(&agent, vec![]).await;
    wait_until("pod dir removed", Duration::from_secs(60), || {
        !pod_dir.exists()
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn sandbox_config_errors_are_reported_as_failed_create_pod_sandbox() {
    let h = Harness::new();
    let mut p = pod("userns", "Always", 1);
    p.spec.as_mut().unwrap().host_users = Some(false);
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    let e = h.first_event("FailedCreatePodSandBox").await;
    assert!(
        e.message.starts_with("Failed to create pod sandbox: "),
        "{}",
        e.message
    );
    assert!(e.message.contains("hostUsers"), "{}", e.message);
    assert_eq!(
        h.fake.call_count("RunPodSandbox"),
        0,
        "the runtime never sees the pod"
    );
    agent.shutdown().await;
}

/// The log directories are made off the async workers; their failures still reach the user
/// with the same wording: the pod's log directory (sandbox creation) and a container's.
#[tokio::test(start_paused = true)]
async fn log_directory_failures_keep_their_messages() {
    // A file where the pod's log directory goes: the sandbox is never created.
    let h = Harness::new();
    let p = pod("nolog", "Always", 1);
    let pod_logs = h.pod_logs(&p);
    std::fs::create_dir_all(h.root.join("pods-logs")).unwrap();
    std::fs::write(&pod_logs, "not a directory").unwrap();
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    let e = h.first_event("FailedCreatePodSandBox").await;
    assert!(
        e.message
            .starts_with("Failed to create pod sandbox: creating log directory "),
        "{}",
        e.message
    );
    assert_eq!(h.fake.call_count("RunPodSandbox"), 0);
    agent.shutdown().await;

    // A file where the container's log directory goes: the container is never created.
    let h = Harness::new();
    let p = pod("clog", "Always", 1);
    let pod_logs = h.pod_logs(&p);
    std::fs::create_dir_all(&pod_logs).unwrap();
    std::fs::write(pod_logs.join("clog-c"), "not a directory").unwrap();
    let agent = h.start().await;
    set(&agent, vec![p.clone()]).await;
    let e = h.first_event("Failed").await;
    assert!(
        e.message
            .starts_with("Error: creating container log directory "),
        "{}",
        e.message
    );
    assert!(e.message.contains("clog-c"), "{}", e.message);
    assert_eq!(h.fake.call_count("CreateContainer"), 0);
    agent.shutdown().await;
}
