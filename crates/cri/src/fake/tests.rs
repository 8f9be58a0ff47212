//! Tests of `FakeRuntime`: lifecycle, containerd-like errors, filters, scripting, images.

use std::collections::HashMap;
use std::time::Duration;

use super::*;
use crate::api::{ContainerState, PodSandboxState};
use crate::traits::RuntimeService;

const BUSYBOX: &str = "docker.io/library/busybox:latest";

fn sandbox_config(name: &str, uid: &str) -> api::PodSandboxConfig {
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.to_string(),
            uid: uid.to_string(),
            namespace: "default".to_string(),
            attempt: 0,
        }),
        log_directory: format!("/var/log/pods/default_{name}_{uid}"),
        labels: HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.to_string())]),
        annotations: HashMap::from([("a".to_string(), "b".to_string())]),
        ..Default::default()
    }
}

fn host_network(mut cfg: api::PodSandboxConfig) -> api::PodSandboxConfig {
    cfg.linux = Some(api::LinuxPodSandboxConfig {
        security_context: Some(api::LinuxSandboxSecurityContext {
            namespace_options: Some(api::NamespaceOption {
                network: api::NamespaceMode::Node as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    cfg
}

fn container_config(name: &str, image: &str) -> api::ContainerConfig {
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: image.to_string(),
            ..Default::default()
        }),
        log_path: format!("{name}/0.log"),
        labels: HashMap::from([("io.kubernetes.container.name".to_string(), name.to_string())]),
        ..Default::default()
    }
}

async fn run(rt: &FakeRuntime, cfg: api::PodSandboxConfig) -> Result<String, CriError> {
    rt.run_pod_sandbox(api::RunPodSandboxRequest {
        config: Some(cfg),
        runtime_handler: String::new(),
    })
    .await
    .map(|r| r.pod_sandbox_id)
}

pub(super) async fn create(rt: &FakeRuntime, sid: &str, name: &str) -> Result<String, CriError> {
    rt.create_container(api::CreateContainerRequest {
        pod_sandbox_id: sid.to_string(),
        config: Some(container_config(name, BUSYBOX)),
        sandbox_config: Some(api::PodSandboxConfig {
            log_directory: "/var/log/pods/x".to_string(),
            ..Default::default()
        }),
    })
    .await
    .map(|r| r.container_id)
}

async fn start(rt: &FakeRuntime, id: &str) -> Result<(), CriError> {
    rt.start_container(api::StartContainerRequest {
        container_id: id.to_string(),
    })
    .await
    .map(|_| ())
}

async fn stop(rt: &FakeRuntime, id: &str, timeout: i64) -> Result<(), CriError> {
    rt.stop_container(api::StopContainerRequest {
        container_id: id.to_string(),
        timeout,
    })
    .await
    .map(|_| ())
}

async fn status(rt: &FakeRuntime, id: &str) -> Result<api::ContainerStatus, CriError> {
    rt.container_status(api::ContainerStatusRequest {
        container_id: id.to_string(),
        verbose: false,
    })
    .await
    .map(|r| r.status.expect("status set"))
}

/// A runtime with busybox, one READY sandbox and one RUNNING container named `name`.
pub(super) async fn running(name: &str) -> (FakeRuntime, String, String) {
    let rt = FakeRuntime::with_images(&["busybox"]);
    let sid = run(&rt, sandbox_config("p", "uid-1")).await.expect("run");
    let cid = create(&rt, &sid, name).await.expect("create");
    start(&rt, &cid).await.expect("start");
    (rt, sid, cid)
}

#[tokio::test(start_paused = true)]
async fn full_lifecycle_like_containerd() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    let sid = run(&rt, sandbox_config("web", "uid-1")).await.expect("run");
    assert_eq!(sid.len(), 64);
    assert!(sid.chars().all(|c| c.is_ascii_hexdigit()));

    let sb = rt
        .pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: sid.clone(),
            verbose: false,
        })
        .await
        .expect("status")
        .status
        .expect("set");
    assert_eq!(sb.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(sb.metadata.as_ref().map(|m| m.name.as_str()), Some("web"));
    assert_eq!(sb.annotations.get("a").map(String::as_str), Some("b"));
    let ip = sb
        .network
        .as_ref()
        .map(|n| n.ip.clone())
        .unwrap_or_default();
    assert!(ip.starts_with("10.88."), "{ip}");

    let cid = create(&rt, &sid, "app").await.expect("create");
    let st = status(&rt, &cid).await.expect("status");
    assert_eq!(st.state, ContainerState::ContainerCreated as i32);
    assert!(st.created_at > sb.created_at);
    assert_eq!(st.started_at, 0);
    assert_eq!(st.log_path, "/var/log/pods/x/app/0.log");

    tokio::time::advance(Duration::from_secs(3)).await;
    start(&rt, &cid).await.expect("start");
    let st = status(&rt, &cid).await.expect("status");
    assert_eq!(st.state, ContainerState::ContainerRunning as i32);
    // Readings at one instant are nudged apart by a nanosecond each.
    let gap = st.started_at - st.created_at;
    assert!(
        (2_999_000_000..=3_000_000_000).contains(&gap),
        "clock follows tokio time: {gap}"
    );
    assert_eq!(st.reason, "");
    assert_eq!(st.image.as_ref().map(|i| i.image.as_str()), Some(BUSYBOX));
    assert!(
        st.image_ref
            .starts_with("docker.io/library/busybox@sha256:")
    );

    stop(&rt, &cid, 30).await.expect("stop");
    let st = status(&rt, &cid).await.expect("status");
    assert_eq!(st.state, ContainerState::ContainerExited as i32);
    assert_eq!((st.exit_code, st.reason.as_str()), (SIGTERM_EXIT, "Error"));
    assert!(st.finished_at > st.started_at);

    rt.remove_container(api::RemoveContainerRequest {
        container_id: cid.clone(),
    })
    .await
    .expect("remove");
    assert!(status(&rt, &cid).await.expect_err("gone").is_not_found());
    rt.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: sid.clone(),
    })
    .await
    .expect("stop sandbox");
    rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: sid.clone(),
    })
    .await
    .expect("remove sandbox");
    assert!(rt.sandboxes().is_empty());
    assert_eq!(
        rt.calls(),
        [
            "RunPodSandbox",
            "PodSandboxStatus",
            "CreateContainer",
            "ContainerStatus",
            "StartContainer",
            "ContainerStatus",
            "StopContainer",
            "ContainerStatus",
            "RemoveContainer",
            "ContainerStatus",
            "StopPodSandbox",
            "RemovePodSandbox",
        ]
    );
    assert_eq!(rt.call_count("ContainerStatus"), 4);
    rt.clear_calls();
    assert!(rt.calls().is_empty());
}

#[tokio::test]
async fn ips_timestamps_and_ids() {
    let rt = FakeRuntime::new();
    let a = run(&rt, sandbox_config("a", "1")).await.expect("a");
    let b = run(&rt, sandbox_config("b", "2")).await.expect("b");
    let h = run(&rt, host_network(sandbox_config("h", "3")))
        .await
        .expect("h");
    assert_ne!(a, b);
    let ip = |id: &str| {
        rt.sandbox(id)
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .unwrap_or_default()
    };
    assert!(ip(&a).starts_with("10.88."));
    assert_ne!(ip(&a), ip(&b));
    assert_eq!(ip(&h), "", "host-network sandboxes get no pod IP");
    let created: Vec<i64> = rt.sandboxes().iter().map(|s| s.created_at).collect();
    assert!(created.windows(2).all(|w| w[0] < w[1]), "{created:?}");

    rt.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: a.clone(),
    })
    .await
    .expect("stop");
    let st = rt.sandbox(&a).expect("exists");
    assert_eq!(st.state, PodSandboxState::SandboxNotready as i32);
    assert_eq!(ip(&a), "", "a stopped sandbox reports no IP");
}

#[tokio::test]
async fn missing_objects_follow_containerd_semantics() {
    let rt = FakeRuntime::new();
    let bogus = "0123456789abcdef";
    let cases: Vec<(&str, Result<(), CriError>)> = vec![
        (
            "StopPodSandbox",
            rt.stop_pod_sandbox(api::StopPodSandboxRequest {
                pod_sandbox_id: bogus.into(),
            })
            .await
            .map(|_| ()),
        ),
        (
            "PodSandboxStatus",
            rt.pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: bogus.into(),
                verbose: false,
            })
            .await
            .map(|_| ()),
        ),
        ("StopContainer", stop(&rt, bogus, 1).await),
        ("ContainerStatus", status(&rt, bogus).await.map(|_| ())),
        ("StartContainer", start(&rt, bogus).await),
        ("CreateContainer", create(&rt, bogus, "c").await.map(|_| ())),
    ];
    for (method, result) in cases {
        let err = result.expect_err(method);
        assert!(err.is_not_found(), "{method}: {err:?}");
        assert_eq!(err.method(), method);
    }
    // Removal is idempotent.
    rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: bogus.into(),
    })
    .await
    .expect("remove missing sandbox is ok");
    rt.remove_container(api::RemoveContainerRequest {
        container_id: bogus.into(),
    })
    .await
    .expect("remove missing container is ok");
}

#[tokio::test]
async fn create_checks_sandbox_image_and_name() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    let sid = run(&rt, sandbox_config("p", "u")).await.expect("run");

    let err = rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: sid.clone(),
            config: Some(container_config("c", "nginx")),
            sandbox_config: None,
        })
        .await
        .expect_err("image missing");
    assert!(err.is_not_found(), "{err:?}");
    assert!(err.message().contains("failed to resolve image"), "{err}");

    let first = create(&rt, &sid, "c").await.expect("create");
    let err = create(&rt, &sid, "c").await.expect_err("name reserved");
    assert_eq!(err.code(), tonic::Code::Unknown);
    assert!(err.message().contains("is reserved for"), "{err}");
    assert!(err.message().contains(&first), "{err}");

    rt.remove_container(api::RemoveContainerRequest {
        container_id: first,
    })
    .await
    .expect("remove");
    create(&rt, &sid, "c")
        .await
        .expect("name free after removal");

    let err = run(&rt, sandbox_config("p", "u"))
        .await
        .expect_err("dup sandbox");
    assert!(
        err.message().contains("failed to reserve sandbox name"),
        "{err}"
    );

    rt.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: sid.clone(),
    })
    .await
    .expect("stop");
    let err = create(&rt, &sid, "d").await.expect_err("sandbox not ready");
    assert!(err.is_not_found(), "{err:?}");

    // Creating by image ID works (the kubelet passes the ID from PullImage/ImageStatus).
    let sid2 = run(&rt, sandbox_config("q", "v")).await.expect("run");
    let image_id = rt.add_image("busybox");
    rt.create_container(api::CreateContainerRequest {
        pod_sandbox_id: sid2,
        config: Some(container_config("byid", &image_id)),
        sandbox_config: None,
    })
    .await
    .expect("create by image id");
}

#[tokio::test]
async fn target_pid_namespace_needs_a_running_container_of_the_same_sandbox() {
    let (rt, sid, app) = running("app").await;
    let with_target = |name: &str, target: &str| {
        let mut cfg = container_config(name, BUSYBOX);
        cfg.linux = Some(api::LinuxContainerConfig {
            security_context: Some(api::LinuxContainerSecurityContext {
                namespace_options: Some(api::NamespaceOption {
                    pid: api::NamespaceMode::Target as i32,
                    target_id: target.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        cfg
    };
    let create_in = |sid: String, cfg: api::ContainerConfig| {
        let rt = rt.clone();
        async move {
            rt.create_container(api::CreateContainerRequest {
                pod_sandbox_id: sid,
                config: Some(cfg),
                sandbox_config: None,
            })
            .await
        }
    };
    create_in(sid.clone(), with_target("debug", &app))
        .await
        .expect("a running target in the same sandbox");

    let err = create_in(sid.clone(), with_target("d2", "nope"))
        .await
        .expect_err("unknown target");
    assert!(
        err.message()
            .contains("invalid target container: container \"nope\" does not exist"),
        "{err}"
    );
    let other = run(&rt, sandbox_config("q", "uid-2")).await.expect("run");
    let err = create_in(other, with_target("d3", &app))
        .await
        .expect_err("other sandbox");
    assert!(
        err.message().contains("does not belong to sandbox"),
        "{err}"
    );
    stop(&rt, &app, 0).await.expect("stop");
    let err = create_in(sid, with_target("d4", &app))
        .await
        .expect_err("exited target");
    assert!(
        err.message()
            .contains("is not running - in state CONTAINER_EXITED"),
        "{err}"
    );
}

#[tokio::test]
async fn start_twice_and_in_stopped_sandbox_fail() {
    let (rt, sid, cid) = running("app").await;
    let err = start(&rt, &cid).await.expect_err("already running");
    assert_eq!(err.code(), tonic::Code::Unknown);
    assert!(err.message().contains("CONTAINER_RUNNING"), "{err}");

    let c2 = create(&rt, &sid, "second").await.expect("create");
    rt.kill_sandbox(&sid);
    let err = start(&rt, &c2).await.expect_err("sandbox not running");
    assert!(err.message().contains("is not running"), "{err}");
    // Killing the sandbox left the running container alone.
    assert_eq!(
        status(&rt, &cid).await.expect("st").state,
        ContainerState::ContainerRunning as i32
    );
}

#[tokio::test(start_paused = true)]
async fn scripted_start_behaviours() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    rt.on_start("ok", Behaviour::ExitImmediately(0));
    rt.on_start("bad", Behaviour::ExitImmediately(2));
    rt.on_start("later", Behaviour::ExitAfter(Duration::from_secs(10), 3));
    rt.on_start("oom", Behaviour::OomKilledAfter(Duration::from_secs(5)));
    rt.on_start(
        "broken",
        Behaviour::FailStart("exec: \"nope\": not found".into()),
    );
    let sid = run(&rt, sandbox_config("p", "u")).await.expect("run");
    let mut ids = HashMap::new();
    for name in ["ok", "bad", "later", "oom", "broken"] {
        let id = create(&rt, &sid, name).await.expect("create");
        let result = start(&rt, &id).await;
        assert_eq!(result.is_err(), name == "broken", "{name}: {result:?}");
        ids.insert(name, id);
    }
    let get = |name: &str| rt.container(&ids[name]).expect("exists");
    let exited = |s: &api::ContainerStatus| s.state == ContainerState::ContainerExited as i32;

    let s = get("ok");
    assert!(exited(&s));
    assert_eq!((s.exit_code, s.reason.as_str()), (0, "Completed"));
    assert!(s.finished_at > s.started_at);
    let s = get("bad");
    assert_eq!((s.exit_code, s.reason.as_str()), (2, "Error"));
    let s = get("broken");
    assert!(exited(&s));
    assert_eq!((s.exit_code, s.reason.as_str()), (128, "StartError"));
    assert!(s.message.contains("nope"));

    assert!(!exited(&get("later")) && !exited(&get("oom")));
    tokio::time::advance(Duration::from_secs(6)).await;
    let s = get("oom");
    assert!(exited(&s));
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "OOMKilled"));
    assert!((4_999_000_000..=5_000_000_000).contains(&(s.finished_at - s.started_at)));
    assert!(!exited(&get("later")));
    tokio::time::advance(Duration::from_secs(5)).await;
    let s = get("later");
    assert_eq!((s.exit_code, s.reason.as_str()), (3, "Error"));
    // The exit time is when it was due, not when it was observed.
    let took = s.finished_at - s.started_at;
    assert!((9_999_000_000..=10_000_000_000).contains(&took), "{took}");
}

#[tokio::test(start_paused = true)]
async fn stop_exit_codes_and_grace_period() {
    let (rt, sid, plain) = running("plain").await;
    rt.on_stop("graceful", 0);
    rt.on_stop("stubborn", SIGKILL_EXIT);
    let mut ids = HashMap::new();
    for name in ["graceful", "stubborn", "killed"] {
        let id = create(&rt, &sid, name).await.expect("create");
        start(&rt, &id).await.expect("start");
        ids.insert(name, id);
    }
    stop(&rt, &plain, 10).await.expect("stop");
    stop(&rt, &ids["graceful"], 10).await.expect("stop");
    stop(&rt, &ids["killed"], 0).await.expect("stop");
    let t0 = tokio::time::Instant::now();
    stop(&rt, &ids["stubborn"], 7).await.expect("stop");
    assert_eq!(
        t0.elapsed(),
        Duration::from_secs(7),
        "waits the grace period"
    );
    let code = |id: &str| {
        let s = rt.container(id).expect("exists");
        (s.exit_code, s.reason)
    };
    assert_eq!(code(&plain), (SIGTERM_EXIT, "Error".into()));
    assert_eq!(code(&ids["graceful"]), (0, "Completed".into()));
    assert_eq!(code(&ids["killed"]), (SIGKILL_EXIT, "Error".into()));
    assert_eq!(code(&ids["stubborn"]), (SIGKILL_EXIT, "Error".into()));
    // Stopping an exited container is a no-op.
    stop(&rt, &plain, 10).await.expect("idempotent");
    assert_eq!(code(&plain), (SIGTERM_EXIT, "Error".into()));
}

#[tokio::test]
async fn sandbox_stop_and_remove_cascade_to_containers() {
    let (rt, sid, cid) = running("app").await;
    let created_only = create(&rt, &sid, "idle").await.expect("create");
    rt.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: sid.clone(),
    })
    .await
    .expect("stop");
    let s = rt.container(&cid).expect("exists");
    assert_eq!(s.state, ContainerState::ContainerExited as i32);
    assert_eq!(s.exit_code, SIGKILL_EXIT);
    let s = rt.container(&created_only).expect("exists");
    assert_eq!(s.state, ContainerState::ContainerCreated as i32);

    rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: sid.clone(),
    })
    .await
    .expect("remove");
    assert!(rt.containers().is_empty());
    assert!(rt.sandboxes().is_empty());
    // Names are free again.
    run(&rt, sandbox_config("p", "uid-1")).await.expect("rerun");
}

#[tokio::test]
async fn list_filters() {
    let rt = FakeRuntime::with_images(&["busybox"]);
    let s1 = run(&rt, sandbox_config("one", "u1")).await.expect("run");
    let s2 = run(&rt, sandbox_config("two", "u2")).await.expect("run");
    let c1 = create(&rt, &s1, "a").await.expect("c");
    let c2 = create(&rt, &s1, "b").await.expect("c");
    let c3 = create(&rt, &s2, "a").await.expect("c");
    start(&rt, &c1).await.expect("start");
    rt.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: s2.clone(),
    })
    .await
    .expect("stop");

    let sandboxes = |f: Option<api::PodSandboxFilter>| {
        let rt = rt.clone();
        async move {
            rt.list_pod_sandbox(api::ListPodSandboxRequest { filter: f })
                .await
                .expect("list")
                .items
                .into_iter()
                .map(|s| s.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(sandboxes(None).await, [s1.as_str(), s2.as_str()]);
    let by_state = |state: PodSandboxState| api::PodSandboxFilter {
        state: Some(api::PodSandboxStateValue {
            state: state as i32,
        }),
        ..Default::default()
    };
    assert_eq!(
        sandboxes(Some(by_state(PodSandboxState::SandboxReady))).await,
        [s1.as_str()]
    );
    assert_eq!(
        sandboxes(Some(by_state(PodSandboxState::SandboxNotready))).await,
        [s2.as_str()]
    );
    let by_id = api::PodSandboxFilter {
        id: s2[..12].to_string(),
        ..Default::default()
    };
    assert_eq!(
        sandboxes(Some(by_id)).await,
        [s2.as_str()],
        "unique ID prefix"
    );
    let by_label = api::PodSandboxFilter {
        label_selector: HashMap::from([("io.kubernetes.pod.uid".into(), "u1".into())]),
        ..Default::default()
    };
    assert_eq!(sandboxes(Some(by_label)).await, [s1.as_str()]);
    let no_match = api::PodSandboxFilter {
        id: "ffffnotthere".into(),
        ..Default::default()
    };
    assert!(sandboxes(Some(no_match)).await.is_empty());

    let containers = |f: api::ContainerFilter| {
        let rt = rt.clone();
        async move {
            rt.list_containers(api::ListContainersRequest { filter: Some(f) })
                .await
                .expect("list")
                .containers
                .into_iter()
                .map(|c| c.id)
                .collect::<Vec<_>>()
        }
    };
    let by_sandbox = api::ContainerFilter {
        pod_sandbox_id: s1.clone(),
        ..Default::default()
    };
    assert_eq!(containers(by_sandbox).await, [c1.as_str(), c2.as_str()]);
    let by_state = api::ContainerFilter {
        state: Some(api::ContainerStateValue {
            state: ContainerState::ContainerCreated as i32,
        }),
        ..Default::default()
    };
    assert_eq!(containers(by_state).await, [c2.as_str(), c3.as_str()]);
    let by_label = api::ContainerFilter {
        label_selector: HashMap::from([("io.kubernetes.container.name".into(), "a".into())]),
        ..Default::default()
    };
    assert_eq!(containers(by_label).await, [c1.as_str(), c3.as_str()]);
    let by_id = api::ContainerFilter {
        id: c3.clone(),
        ..Default::default()
    };
    assert_eq!(containers(by_id).await, [c3.as_str()]);
    let listed = rt.containers();
    assert_eq!(listed[0].pod_sandbox_id, s1);
    assert!(listed[0].image_ref.starts_with("sha256:"));
}

#[tokio::test(start_paused = true)]
async fn injected_failures_and_latency() {
    let rt = FakeRuntime::new();
    rt.fail_next("Version", CriError::unavailable("Version", "fake", "down"));
    rt.fail_next("Version", CriError::unknown("Version", "second"));
    let v = || rt.version(api::VersionRequest::default());
    assert!(v().await.expect_err("first").is_unavailable());
    assert_eq!(v().await.expect_err("second").message(), "second");
    assert_eq!(v().await.expect("third").runtime_name, "containerd");
    assert_eq!(rt.call_count("Version"), 3, "failed calls are recorded too");

    rt.set_latency("Status", Duration::from_secs(4));
    let t0 = tokio::time::Instant::now();
    let st = rt
        .status(api::StatusRequest::default())
        .await
        .expect("status");
    assert_eq!(t0.elapsed(), Duration::from_secs(4));
    let conds = st.status.expect("set").conditions;
    assert!(conds.iter().all(|c| c.status) && conds.len() == 2);
    rt.set_latency("Status", Duration::ZERO);
    let t0 = tokio::time::Instant::now();
    rt.status(api::StatusRequest::default())
        .await
        .expect("status");
    assert_eq!(t0.elapsed(), Duration::ZERO);

    rt.set_condition(
        "NetworkReady",
        false,
        "NetworkPluginNotReady",
        "cni config uninitialized",
    );
    let conds = rt
        .status(api::StatusRequest::default())
        .await
        .expect("status")
        .status
        .expect("set")
        .conditions;
    let net = conds
        .iter()
        .find(|c| c.r#type == "NetworkReady")
        .expect("present");
    assert!(!net.status);
    assert_eq!(net.reason, "NetworkPluginNotReady");
}

#[test]
#[should_panic(expected = "unknown CRI method")]
fn fail_next_rejects_unknown_method_names() {
    FakeRuntime::new().fail_next("run_pod_sandbox", CriError::unknown("RunPodSandbox", "x"));
}

#[tokio::test]
async fn exit_and_oom_kill_on_demand() {
    let (rt, sid, cid) = running("app").await;
    assert!(rt.exit_container(&cid, 7));
    assert!(!rt.exit_container(&cid, 7), "already exited");
    let s = rt.container(&cid).expect("exists");
    assert_eq!((s.exit_code, s.reason.as_str()), (7, "Error"));
    let c2 = create(&rt, &sid, "mem").await.expect("create");
    start(&rt, &c2).await.expect("start");
    assert!(rt.oom_kill_container(&c2[..10]), "unique prefix accepted");
    let s = rt.container(&c2).expect("exists");
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "OOMKilled"));
}
