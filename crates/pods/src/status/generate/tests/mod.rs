//! Tests for `status::generate`: phases, waiting reasons, init containers, restarts, sidecars,
//! terminal pods, conditions and their transition times.

use std::collections::BTreeMap;

use chrono::TimeZone;
use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::container::SandboxStatus;
use crate::kuberuntime::hash::hash_container;

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + secs, 0)
        .single()
        .expect("valid time")
}

fn t(secs: i64) -> Option<Time> {
    k8s_time(Some(at(secs)))
}

fn ctr(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox".into()),
        ..Default::default()
    }
}

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..ctr(name)
    }
}

fn pod(policy: &str, init: Vec<Container>, containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("uid".into()),
            annotations: Some(BTreeMap::from([(
                "kubernetes.io/config.source".to_owned(),
                "api".to_owned(),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: (!init.is_empty()).then_some(init),
            containers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn sb(ready: bool) -> SandboxStatus {
    SandboxStatus {
        id: "sb1".into(),
        ready,
        created_at: None,
        attempt: 0,
        ips: vec!["10.1.0.7".into()],
        primary_ip: Some("10.1.0.7".into()),
        host_network: false,
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}

/// A runtime container; `created` orders instances (newer = larger).
fn rc(name: &str, id: &str, state: ContainerState, exit: i32, created: i64) -> ContainerStatus {
    let exited = state == ContainerState::Exited;
    ContainerStatus {
        id: id.into(),
        name: name.into(),
        sandbox_id: "sb1".into(),
        state,
        created_at: Some(at(created)),
        started_at: Some(at(created + 1)),
        finished_at: exited.then(|| at(created + 5)),
        exit_code: exit,
        image: "docker.io/library/busybox:latest".into(),
        image_ref: "docker.io/library/busybox@sha256:abc".into(),
        image_id: "sha256:def".into(),
        hash: hash_container(&ctr(name)),
        restart_count: 0,
        reason: if exited {
            if exit == 0 { "Completed" } else { "Error" }.into()
        } else {
            String::new()
        },
        message: String::new(),
        termination_message_path: None,
        termination_grace_period: None,
        resources: None,
        user: None,
    }
}

fn runtime(sandboxes: Vec<SandboxStatus>, containers: Vec<ContainerStatus>) -> PodStatus {
    let ips = sandboxes
        .first()
        .filter(|s| s.ready)
        .map(|s| s.ips.clone())
        .unwrap_or_default();
    PodStatus {
        uid: "uid".into(),
        name: "p".into(),
        namespace: "ns".into(),
        ips,
        sandbox_statuses: sandboxes,
        container_statuses: containers,
    }
}

struct Gen<'a> {
    pod: &'a Pod,
    runtime: &'a PodStatus,
    old: Option<&'a ApiPodStatus>,
    errors: BTreeMap<String, (String, String)>,
    terminal: bool,
    host_ips: Vec<String>,
    probes: Option<&'a dyn ProbeResults>,
    now: i64,
}

impl<'a> Gen<'a> {
    fn new(pod: &'a Pod, runtime: &'a PodStatus) -> Self {
        Gen {
            pod,
            runtime,
            old: None,
            errors: BTreeMap::new(),
            terminal: false,
            host_ips: vec!["192.168.0.10".into()],
            probes: None,
            now: 100,
        }
    }
    fn run(&self) -> ApiPodStatus {
        let inp = StatusInputs {
            pod: self.pod,
            runtime: self.runtime,
            old: self.old,
            sync_errors: &self.errors,
            pod_is_terminal: self.terminal,
            host_ips: &self.host_ips,
            runtime_name: "containerd",
            now: at(self.now),
        };
        match self.probes {
            Some(p) => generate_api_pod_status_with_probes(&inp, p),
            None => generate_api_pod_status(&inp),
        }
    }
}

fn cond<'a>(s: &'a ApiPodStatus, type_: &str) -> &'a PodCondition {
    s.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .expect("condition present")
}

/// (status, reason, message) of a condition.
fn csum(s: &ApiPodStatus, type_: &str) -> (String, Option<String>, Option<String>) {
    let c = cond(s, type_);
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn st<'a>(s: &'a ApiPodStatus, name: &str) -> &'a ApiContainerStatus {
    s.container_statuses
        .iter()
        .flatten()
        .chain(s.init_container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .expect("container status present")
}

fn waiting_reason(c: &ApiContainerStatus) -> Option<String> {
    c.state.as_ref()?.waiting.as_ref()?.reason.clone()
}

fn terminated(c: &ApiContainerStatus) -> Option<(i32, Option<String>)> {
    let t = c.state.as_ref()?.terminated.as_ref()?;
    Some((t.exit_code, t.reason.clone()))
}

fn last_terminated(c: &ApiContainerStatus) -> Option<(i32, Option<String>)> {
    let t = c.last_state.as_ref()?.terminated.as_ref()?;
    Some((t.exit_code, t.reason.clone()))
}

fn yes() -> String {
    "True".into()
}

fn no() -> String {
    "False".into()
}

use ContainerState::{Created, Exited, Running, Unknown};

#[test]
fn fresh_pod_is_pending_with_container_creating() {
    let p = pod("Always", vec![], vec![ctr("b"), ctr("a")]);
    let rt = runtime(vec![], vec![]);
    let s = Gen::new(&p, &rt).run();
    assert_eq!(s.phase.as_deref(), Some(PENDING));
    assert_eq!(waiting_reason(st(&s, "a")), Some(CONTAINER_CREATING.into()));
    assert_eq!(st(&s, "a").image, "busybox");
    assert_eq!(st(&s, "a").started, Some(false));
    // Regular statuses are sorted by name, as upstream.
    let names: Vec<&str> = s
        .container_statuses
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(csum(&s, "PodReadyToStartContainers").0, no());
    assert_eq!(csum(&s, "Initialized"), (yes(), None, None));
    let unready = (
        no(),
        Some(CONTAINERS_NOT_READY.into()),
        Some("containers with unready status: [b a]".into()),
    );
    assert_eq!(csum(&s, "ContainersReady"), unready);
    assert_eq!(csum(&s, "Ready"), unready);
    assert_eq!(csum(&s, "PodScheduled").0, yes());
    assert_eq!(cond(&s, "Ready").last_transition_time, t(100));
    assert_eq!(s.start_time, t(100));
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    assert_eq!(s.pod_ip, None);
    assert_eq!(s.host_ip.as_deref(), Some("192.168.0.10"));
    let order: Vec<&str> = s
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(
        order,
        [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
}

#[test]
fn running_pod() {
    let p = pod("Always", vec![], vec![ctr("a")]);
    let rt = runtime(vec![sb(true)], vec![rc("a", "c1", Running, 0, 10)]);
    let s = Gen::new(&p, &rt).run();
    assert_eq!(s.phase.as_deref(), Some(RUNNING));
    let a = st(&s, "a");
    assert_eq!(a.container_id.as_deref(), Some("containerd://c1"));
    assert_eq!(a.image_id, "docker.io/library/busybox@sha256:abc");
    assert_eq!(a.image, "docker.io/library/busybox:latest");
    assert_eq!(
        a.state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.clone()),
        t(11)
    );
    assert!(a.ready);
    assert_eq!(a.started, Some(true));
    for c in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
    ] {
        assert_eq!(csum(&s, c), (yes(), None, None), "{c}");
    }
    assert_eq!(s.pod_ip.as_deref(), Some("10.1.0.7"));
    assert_eq!(
        s.pod_ips,
        Some(vec![PodIP {
            ip: "10.1.0.7".into()
        }])
    );
    assert_eq!(
        s.host_ips,
        Some(vec![HostIP {
            ip: "192.168.0.10".into()
        }])
    );
}

#[test]
fn init_containers_in_progress_and_done() {
    let p = pod("Always", vec![ctr("init1"), ctr("init2")], vec![ctr("app")]);

    let rt = runtime(vec![sb(true)], vec![rc("init1", "i1", Running, 0, 1)]);
    let s = Gen::new(&p, &rt).run();
    assert_eq!(s.phase.as_deref(), Some(PENDING));
    assert_eq!(waiting_reason(st(&s, "app")), Some(POD_INITIALIZING.into()));
    assert_eq!(
        waiting_reason(st(&s, "init2")),
        Some(POD_INITIALIZING.into())
    );
    assert_eq!(
        csum(&s, "Initialized"),
        (
            no(),
            Some(CONTAINERS_NOT_INITIALIZED.into()),
            Some("containers with incomplete status: [init1 init2]".into())
        )
    );
    let init_names: Vec<&str> = s
        .init_container_statuses
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(init_names, ["init1", "init2"]);

    let rt = runtime(
        vec![sb(true)],
        vec![
            rc("app", "a1", Running, 0, 3),
            rc("init2", "i2", Exited, 0, 2),
            rc("init1", "i1", Exited, 0, 1),
        ],
    );
    let s = Gen::new(&p, &rt).run();
    assert_eq!(s.phase.as_deref(), Some(RUNNING));
    assert_eq!(
        terminated(st(&s, "init1")),
        Some((0, Some("Completed".into())))
    );
    assert!(st(&s, "init1").ready);
    assert_eq!(st(&s, "init1").started, Some(false));
    assert_eq!(csum(&s, "Initialized"), (yes(), None, None));

    // Init containers garbage-collected after the app started: treated as completed.
    let rt = runtime(vec![sb(true)], vec![rc("app", "a1", Running, 0, 3)]);
    let s = Gen::new(&p, &rt).run();
    assert_eq!(
        terminated(st(&s, "init1")),
        Some((0, Some("Completed".into())))
    );
    assert_eq!(s.phase.as_deref(), Some(RUNNING));
}

#[test]
fn init_failure_under_never_fails_the_pod() {
    let p = pod("Never", vec![ctr("init1")], vec![ctr("app")]);
    let rt = runtime(vec![sb(true)], vec![rc("init1", "i1", Exited, 3, 1)]);
    let s = Gen::new(&p, &rt).run();
    assert_eq!(s.phase.as_deref(), Some(FAILED));
    assert_eq!(terminated(st(&s, "init1")), Some((3, Some("Error".into()))));
    assert_eq!(csum(&s, "ContainersReady").1, Some(POD_FAILED.into()));

    // Under Always the same failure keeps the pod pending (the init container restarts).
    let p = pod("Always", vec![ctr("init1")], vec![ctr("app")]);
    let mut errors = BTreeMap::new();
    errors.insert(
        "init1".to_owned(),
        (
            "CrashLoopBackOff".to_owned(),
            "back-off 10s restarting failed container=init1 pod=p_ns(uid)".to_owned(),
        ),
    );
    let mut g = Gen::new(&p, &rt);
    g.errors = errors;
    let s = g.run();
    assert_eq!(s.phase.as_deref(), Some(PENDING));
    assert_eq!(
        waiting_reason(st(&s, "init1")),
        Some("CrashLoopBackOff".into())
    );
    assert_eq!(
        last_terminated(st(&s, "init1")),
        Some((3, Some("Error".into())))
    );
}

#[test]
fn restart_keeps_previous_instance_as_last_state() {
    let p = pod("Always", vec![], vec![ctr("app")]);
    let mut newest = rc("app", "c2", Running, 0, 20);
    newest.restart_count = 1;
    let rt = runtime(
        vec![sb(true)],
        vec![
            rc("app", "c1", Exited, 1, 10),
            newest,
            rc("app", "c0", Exited, 2, 5),
        ],
    );
    let s = Gen::new(&p, &rt).run();
    let app = st(&s, "app");
    assert_eq!(app.restart_count, 1);
    assert_eq!(app.container_id.as_deref(), Some("containerd://c2"));
    assert_eq!(last_terminated(app), Some((1, Some("Error".into()))));
    let last = app
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .expect("last");
    assert_eq!(last.container_id.as_deref(), Some("containerd://c1"));
    assert_eq!(last.finished_at, t(15));
}

#[test]
fn waiting_reasons_from_sync_errors() {
    let p = pod("Always", vec![], vec![ctr("app"), ctr("img")]);
    let rt = runtime(vec![sb(true)], vec![rc("app", "c1", Exited, 1, 10)]);
    let mut g = Gen::new(&p, &rt);
    g.errors.insert(
        "app".into(),
        (
            "CrashLoopBackOff".into(),
            "back-off 10s restarting failed container=app pod=p_ns(uid)".into(),
        ),
    );
    g.errors
        .insert("img".into(), ("ErrImagePull".into(), "pull failed".into()));
    let s = g.run();
    let app = st(&s, "app");
    assert_eq!(waiting_reason(app), Some("CrashLoopBackOff".into()));
    assert_eq!(last_terminated(app), Some((1, Some("Error".into()))));
    let img = st(&s, "img");
    assert_eq!(waiting_reason(img), Some("ErrImagePull".into()));
    assert_eq!(
        img.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.message.clone()),
        Some("pull failed".into())
    );
    assert_eq!(img.last_state, None);
    assert_eq!(s.phase.as_deref(), Some(PENDING));

    // A container that won't restart (Never) keeps its terminated state despite an error.
    let p = pod("Never", vec![], vec![ctr("app")]);
    let mut g = Gen::new(&p, &rt);
    g.errors
        .insert("app".into(), ("CrashLoopBackOff".into(), "x".into()));
    let s = g.run();
    assert_eq!(terminated(st(&s, "app")), Some((1, Some("Error".into()))));
}

#[test]
fn phases_table() {
    // (restart policy, exit codes of two containers (None = running), terminal, static, want)
    type PhaseCase = (&'static str, [Option<i32>; 2], bool, bool, &'static str);
    let cases: &[PhaseCase] = &[
        ("Always", [None, None], false, false, RUNNING),
        ("Always", [None, Some(0)], false, false, RUNNING),
        ("Always", [Some(0), Some(1)], false, false, RUNNING),
        ("OnFailure", [Some(0), Some(0)], false, false, SUCCEEDED),
        ("OnFailure", [Some(0), Some(1)], false, false, RUNNING),
        ("Never", [Some(0), Some(0)], false, false, SUCCEEDED),
        ("Never", [Some(0), Some(1)], false, false, FAILED),
        ("Never", [None, Some(1)], false, false, RUNNING),
        ("Always", [Some(0), Some(0)], true, false, SUCCEEDED),
        ("Always", [Some(0), Some(137)], true, false, FAILED),
        ("Always", [Some(0), Some(0)], true, true, RUNNING),
    ];
    for (policy, exits, terminal, is_static, want) in cases {
        let mut p = pod(policy, vec![], vec![ctr("a"), ctr("b")]);
        if *is_static {
            p.metadata.annotations = Some(BTreeMap::from([(
                "kubernetes.io/config.source".to_owned(),
                "file".to_owned(),
            )]));
        }
        let containers = ["a", "b"]
            .iter()
            .zip(exits)
            .map(|(n, e)| match e {
                None => rc(n, n, Running, 0, 1),
                Some(code) => rc(n, n, Exited, *code, 1),
            })
            .collect();
        let rt = runtime(vec![sb(true)], containers);
        let mut g = Gen::new(&p, &rt);
        g.terminal = *terminal;
        let s = g.run();
        assert_eq!(
            s.phase.as_deref(),
            Some(*want),
            "{policy} {exits:?} terminal={terminal} static={is_static}"
        );
        if *want == SUCCEEDED {
            let completed = (no(), Some(POD_COMPLETED.into()), None);
            assert_eq!(csum(&s, "ContainersReady"), completed);
            assert_eq!(csum(&s, "Ready"), completed);
        }
    }
}

#[test]
fn get_phase_waiting_and_unknown_statuses() {
    let p = pod("Always", vec![], vec![ctr("a")]);
    let status = |state: ApiState, last: Option<ApiState>| ApiContainerStatus {
        name: "a".into(),
        state: Some(state),
        last_state: last,
        ..Default::default()
    };
    let term = |code| ApiState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(get_phase(&p, &[], &[], false, false), PENDING);
    assert_eq!(
        get_phase(&p, &[], &[status(waiting(None, None), None)], false, false),
        PENDING
    );
    assert_eq!(
        get_phase(
            &p,
            &[],
            &[status(
                waiting(Some("CrashLoopBackOff"), None),
                Some(term(1))
            )],
            false,
            false
        ),
        RUNNING
    );
    assert_eq!(
        get_phase(&p, &[], &[status(ApiState::default(), None)], false, false),
        PENDING
    );
}

#[test]
fn vanished_and_unknown_containers() {
    let p = pod("Always", vec![], vec![ctr("app")]);
    let old_running = ApiPodStatus {
        phase: Some(RUNNING.into()),
        container_statuses: Some(vec![ApiContainerStatus {
            name: "app".into(),
            restart_count: 2,
            state: Some(ApiState {
                running: Some(ContainerStateRunning { started_at: t(1) }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        start_time: t(0),
        ..Default::default()
    };

    // Gone from the runtime: waiting, with an unknown termination recorded and a restart counted.
    let rt = runtime(vec![sb(true)], vec![]);
    let mut g = Gen::new(&p, &rt);
    g.old = Some(&old_running);
    let s = g.run();
    let app = st(&s, "app");
    assert_eq!(waiting_reason(app), Some(CONTAINER_CREATING.into()));
    assert_eq!(
        last_terminated(app),
        Some((137, Some(CONTAINER_STATUS_UNKNOWN.into())))
    );
    assert_eq!(app.restart_count, 3);
    assert_eq!(s.start_time, t(0));
    assert_eq!(s.phase.as_deref(), Some(RUNNING));

    // Reported unknown by the runtime: terminated with 137.
    let rt = runtime(vec![sb(true)], vec![rc("app", "c1", Unknown, 0, 1)]);
    let mut g = Gen::new(&p, &rt);
    g.old = Some(&old_running);
    let s = g.run();
    let app = st(&s, "app");
    assert_eq!(
        terminated(app),
        Some((137, Some(CONTAINER_STATUS_UNKNOWN.into())))
    );
    assert_eq!(
        app.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.message.clone()),
        Some("The container could not be located when the pod was terminated".into())
    );
    assert_eq!(app.restart_count, 3);

    // Created but never started: waiting without a reason.
    let rt = runtime(vec![sb(true)], vec![rc("app", "c1", Created, 0, 1)]);
    let s = Gen::new(&p, &rt).run();
    assert_eq!(waiting_reason(st(&s, "app")), None);

    // An old terminated status is kept when the runtime no longer has the container.
    let p = pod("Never", vec![], vec![ctr("app")]);
    let done = ApiPodStatus {
        phase: Some(SUCCEEDED.into()),
        reason: Some("Done".into()),
        container_statuses: Some(vec![ApiContainerStatus {
            name: "app".into(),
            state: Some(ApiState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 0,
                    reason: Some("Completed".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let rt = runtime(vec![], vec![]);
    let mut g = Gen::new(&p, &rt);
    g.old = Some(&done);
    let s = g.run();
    assert_eq!(
        terminated(st(&s, "app")),
        Some((0, Some("Completed".into())))
    );
    assert_eq!(s.phase.as_deref(), Some(SUCCEEDED));
    assert_eq!(s.reason.as_deref(), Some("Done"));
}

#[test]
fn terminal_phase_is_sticky() {
    let p = pod("Always", vec![], vec![ctr("app")]);
    let rt = runtime(vec![], vec![]);
    let old = ApiPodStatus {
        phase: Some(FAILED.into()),
        reason: Some("Evicted".into()),
        message: Some("The node was low on resource".into()),
        ..Default::default()
    };
    let mut g = Gen::new(&p, &rt);
    g.old = Some(&old);
    let s = g.run();
    assert_eq!(s.phase.as_deref(), Some(FAILED));
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    assert_eq!(s.message.as_deref(), Some("The node was low on resource"));
}

#[test]
fn transition_times_carry_over_only_when_status_is_unchanged() {
    let p = pod("Always", vec![], vec![ctr("app")]);
    let rt = runtime(vec![sb(true)], vec![rc("app", "c1", Running, 0, 1)]);
    let first = Gen::new(&p, &rt).run();
    assert_eq!(cond(&first, "Ready").last_transition_time, t(100));

    let mut g = Gen::new(&p, &rt);
    g.old = Some(&first);
    g.now = 200;
    let second = g.run();
    assert_eq!(cond(&second, "Ready").last_transition_time, t(100));
    assert_eq!(second, first, "regenerating an unchanged pod is stable");

    let rt = runtime(vec![sb(true)], vec![rc("app", "c1", Exited, 1, 1)]);
    let mut g = Gen::new(&p, &rt);
    g.old = Some(&first);
    g.now = 300;
    let third = g.run();
    assert_eq!(cond(&third, "Ready").last_transition_time, t(300));
    assert_eq!(cond(&third, "PodScheduled").last_transition_time, t(100));
}

#[test]
fn sidecars_started_and_phase_lag() {
    let p = pod(
        "Always",
        vec![sidecar("proxy"), ctr("init")],
        vec![ctr("app")],
    );
    let rt = runtime(vec![sb(true)], vec![rc("proxy", "s1", Running, 0, 1)]);
    // First generation: `started` is not known when the phase is computed (as upstream).
    let first = Gen::new(&p, &rt).run();
    assert_eq!(first.phase.as_deref(), Some(PENDING));
    assert_eq!(st(&first, "proxy").started, Some(true));
    assert!(st(&first, "proxy").ready);
    assert_eq!(
        csum(&first, "Initialized").2,
        Some("containers with incomplete status: [init]".into())
    );

    let rt = runtime(
        vec![sb(true)],
        vec![
            rc("app", "a1", Running, 0, 3),
            rc("init", "i1", Exited, 0, 2),
            rc("proxy", "s1", Running, 0, 1),
        ],
    );
    let mut g = Gen::new(&p, &rt);
    g.old = Some(&first);
    let s = g.run();
    assert_eq!(s.phase.as_deref(), Some(RUNNING));
    assert_eq!(csum(&s, "ContainersReady"), (yes(), None, None));

    // A sidecar that is restarting doesn't send an initialized pod back to Pending.
    let rt = runtime(
        vec![sb(true)],
        vec![
            rc("app", "a1", Running, 0, 3),
            rc("proxy", "s2", Created, 0, 4),
            rc("proxy", "s1", Exited, 137, 1),
        ],
    );
    let mut g = Gen::new(&p, &rt);
    g.old = Some(&s);
    let s = g.run();
    assert_eq!(s.phase.as_deref(), Some(RUNNING));
    assert_eq!(
        csum(&s, "ContainersReady").2,
        Some("containers with unready status: [proxy]".into())
    );
    assert_eq!(csum(&s, "Initialized").0, yes());
}

struct Probes {
    startup: Option<ProbeResult>,
    readiness: Option<ProbeResult>,
}

impl ProbeResults for Probes {
    fn liveness(&self, _: &str) -> Option<ProbeResult> {
        None
    }
    fn startup(&self, _: &str) -> Option<ProbeResult> {
        self.startup
    }
    fn readiness(&self, _: &str) -> Option<ProbeResult> {
        self.readiness
    }
}

#[test]
fn probe_results_drive_started_and_ready() {
    let mut app = ctr("app");
    app.readiness_probe = Some(Probe::default());
    app.startup_probe = Some(Probe::default());
    let p = pod("Always", vec![], vec![app]);
    let rt = runtime(vec![sb(true)], vec![rc("app", "c1", Running, 0, 1)]);
    let cases = [
        (None, None, false, false),
        (Some(ProbeResult::Failure), None, false, false),
        (Some(ProbeResult::Success), None, true, false),
        (
            Some(ProbeResult::Success),
            Some(ProbeResult::Failure),
            true,
            false,
        ),
        (
            Some(ProbeResult::Success),
            Some(ProbeResult::Success),
            true,
            true,
        ),
    ];
    for (startup, readiness, started, ready) in cases {
        let probes = Probes { startup, readiness };
        let mut g = Gen::new(&p, &rt);
        g.probes = Some(&probes);
        let s = g.run();
        assert_eq!(
            st(&s, "app").started,
            Some(started),
            "{startup:?}/{readiness:?}"
        );
        assert_eq!(st(&s, "app").ready, ready, "{startup:?}/{readiness:?}");
    }
}

#[test]
fn readiness_gates_and_foreign_conditions() {
    let mut p = pod("Always", vec![], vec![ctr("app")]);
    if let Some(spec) = p.spec.as_mut() {
        spec.readiness_gates = Some(vec![
            PodReadinessGate {
                condition_type: "example.com/lb".into(),
            },
            PodReadinessGate {
                condition_type: "example.com/dns".into(),
            },
        ]);
    }
    p.status = Some(ApiPodStatus {
        conditions: Some(vec![
            PodCondition {
                type_: "example.com/lb".into(),
                status: "False".into(),
                ..Default::default()
            },
            PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            },
        ]),
        ..Default::default()
    });
    let rt = runtime(vec![sb(true)], vec![rc("app", "c1", Running, 0, 1)]);
    let s = Gen::new(&p, &rt).run();
    assert_eq!(
        s.conditions.as_ref().map(|c| c[0].type_.as_str()),
        Some("example.com/lb")
    );
    assert_eq!(
        csum(&s, "Ready"),
        (
            no(),
            Some(READINESS_GATES_NOT_READY.into()),
            Some("the status of pod readiness gate \"example.com/lb\" is not \"True\", but False, corresponding condition of pod readiness gate \"example.com/dns\" does not exist.".into())
        )
    );
    assert_eq!(csum(&s, "ContainersReady").0, yes());
}

#[test]
fn readiness_is_reconciled_when_a_gate_condition_changed() {
    let gate_msg = "the status of pod readiness gate \"example.com/lb\" is not \"True\", but False";
    let cond = |type_: &str, status: &str, message: Option<&str>| PodCondition {
        type_: type_.into(),
        status: status.into(),
        message: message.map(str::to_owned),
        ..Default::default()
    };
    let app = |ready: bool| ApiContainerStatus {
        name: "app".into(),
        ready,
        ..Default::default()
    };
    let gated = |conditions: Vec<PodCondition>, ready: bool| {
        let mut p = pod("Always", vec![], vec![ctr("app")]);
        if let Some(spec) = p.spec.as_mut() {
            spec.readiness_gates = Some(vec![PodReadinessGate {
                condition_type: "example.com/lb".into(),
            }]);
        }
        p.status = Some(ApiPodStatus {
            phase: Some("Running".into()),
            conditions: Some(conditions),
            container_statuses: Some(vec![app(ready)]),
            ..Default::default()
        });
        p
    };
    // The gate turned True, Ready still says False: sync now.
    let p = gated(
        vec![
            cond("example.com/lb", "True", None),
            cond("Ready", "False", Some(gate_msg)),
        ],
        true,
    );
    assert!(need_to_reconcile_pod_readiness(&p));
    // In agreement.
    let p = gated(
        vec![
            cond("example.com/lb", "True", None),
            cond("Ready", "True", None),
        ],
        true,
    );
    assert!(!need_to_reconcile_pod_readiness(&p));
    let p = gated(
        vec![
            cond("example.com/lb", "False", None),
            cond("Ready", "False", Some(gate_msg)),
        ],
        true,
    );
    assert!(!need_to_reconcile_pod_readiness(&p));
    // The gate went False while Ready is True.
    let p = gated(
        vec![
            cond("example.com/lb", "False", None),
            cond("Ready", "True", None),
        ],
        true,
    );
    assert!(need_to_reconcile_pod_readiness(&p));
    // Only the message differs (the gate condition disappeared).
    let p = gated(vec![cond("Ready", "False", Some(gate_msg))], true);
    assert!(need_to_reconcile_pod_readiness(&p));
    // Containers not ready: the gate does not matter.
    let p = gated(
        vec![
            cond("example.com/lb", "True", None),
            cond(
                "Ready",
                "False",
                Some("containers with unready status: [app]"),
            ),
        ],
        false,
    );
    assert!(!need_to_reconcile_pod_readiness(&p));
    // No Ready condition yet, or no gates: nothing to reconcile.
    let p = gated(vec![cond("example.com/lb", "True", None)], true);
    assert!(!need_to_reconcile_pod_readiness(&p));
    let mut p = gated(
        vec![
            cond("example.com/lb", "True", None),
            cond("Ready", "False", None),
        ],
        true,
    );
    if let Some(spec) = p.spec.as_mut() {
        spec.readiness_gates = None;
    }
    assert!(!need_to_reconcile_pod_readiness(&p));
}

#[test]
fn host_network_pods_use_node_ips() {
    let mut p = pod("Always", vec![], vec![ctr("app")]);
    if let Some(spec) = p.spec.as_mut() {
        spec.host_network = Some(true);
    }
    let mut sandbox = sb(true);
    sandbox.host_network = true;
    sandbox.ips.clear();
    let rt = runtime(vec![sandbox], vec![rc("app", "c1", Running, 0, 1)]);
    let mut g = Gen::new(&p, &rt);
    g.host_ips = vec!["192.168.0.10".into(), "fd00::10".into()];
    let s = g.run();
    assert_eq!(s.pod_ip.as_deref(), Some("192.168.0.10"));
    assert_eq!(
        s.pod_ips,
        Some(vec![
            PodIP {
                ip: "192.168.0.10".into()
            },
            PodIP {
                ip: "fd00::10".into()
            }
        ])
    );
    assert_eq!(csum(&s, "PodReadyToStartContainers").0, yes());

    // Standalone (no host IPs known): hostIP stays unset.
    let mut g = Gen::new(&p, &rt);
    g.host_ips = vec![];
    let s = g.run();
    assert_eq!(s.host_ip, None);
    assert_eq!(s.pod_ip, None);
}

#[test]
fn active_deadline_is_measured_from_the_recorded_start_time() {
    let pod_with = |deadline: Option<i64>| Pod {
        spec: Some(PodSpec {
            active_deadline_seconds: deadline,
            ..Default::default()
        }),
        ..Default::default()
    };
    // (deadline, start, now, past)
    for (deadline, start, now, want) in [
        (None, Some(0), 1000, false),
        (Some(10), None, 1000, false),
        (Some(10), Some(0), 9, false),
        (Some(10), Some(0), 10, true),
        (Some(10), Some(5), 30, true),
    ] {
        let start = start.and_then(t);
        assert_eq!(
            past_active_deadline(&pod_with(deadline), start.as_ref(), at(now)),
            want,
            "deadline {deadline:?} start {start:?} now {now}"
        );
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

fn with_resources(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
    Container {
        resources: Some(ResourceRequirements {
            requests: Some(quantities(requests)),
            limits: Some(quantities(limits)),
            claims: None,
        }),
        ..ctr(name)
    }
}

/// Upstream 1.33+ `convertToAPIContainerStatuses`: `resources` (the spec's, with the CPU and
/// memory the runtime reports for running containers), `allocatedResources` (the requests)
/// and `user` (the runtime's uid/gid/groups).
#[test]
fn container_status_resources_allocated_resources_and_user() {
    let spec = with_resources(
        "app",
        &[("cpu", "100m"), ("memory", "64Mi")],
        &[("cpu", "500m"), ("memory", "128Mi")],
    );
    let p = pod("Always", vec![], vec![spec]);
    let mut running = rc("app", "c1", Running, 0, 10);
    running.resources = Some(crate::container::ContainerResources {
        cpu_limit_milli: Some(250),
        cpu_request_milli: Some(100),
        memory_limit_bytes: Some(256 << 20),
    });
    running.user = Some(crate::container::ContainerUser {
        linux: Some(crate::container::LinuxContainerUser {
            uid: 1000,
            gid: 3000,
            supplemental_groups: vec![3000, 4000],
        }),
    });
    let rt = runtime(vec![sb(true)], vec![running]);
    let s = Gen::new(&p, &rt).run();
    let app = st(&s, "app");
    let res = app.resources.as_ref().expect("resources");
    assert_eq!(
        res.limits,
        Some(quantities(&[("cpu", "250m"), ("memory", "256Mi")]))
    );
    assert_eq!(
        res.requests,
        Some(quantities(&[("cpu", "100m"), ("memory", "64Mi")]))
    );
    assert_eq!(
        app.allocated_resources,
        Some(quantities(&[("cpu", "100m"), ("memory", "64Mi")]))
    );
    let user = app
        .user
        .as_ref()
        .and_then(|u| u.linux.as_ref())
        .expect("user");
    assert_eq!(
        (user.uid, user.gid, user.supplemental_groups.clone()),
        (1000, 3000, Some(vec![3000, 4000]))
    );

    // An exited container shows its spec's resources, whatever the runtime said.
    let mut exited = rc("app", "c1", Exited, 1, 10);
    exited.resources = Some(crate::container::ContainerResources {
        cpu_limit_milli: Some(250),
        ..Default::default()
    });
    let rt = runtime(vec![sb(true)], vec![exited]);
    let s = Gen::new(&p, &rt).run();
    let res = st(&s, "app").resources.clone().expect("resources");
    assert_eq!(
        res.limits,
        Some(quantities(&[("cpu", "500m"), ("memory", "128Mi")]))
    );
    assert_eq!(st(&s, "app").user, None);
}

#[test]
fn container_status_resources_keep_old_values_and_tiny_cpu() {
    // The runtime reports nothing: the previous status of the same running container wins
    // over the spec, the spec fills the rest.
    let spec = with_resources("app", &[("cpu", "1")], &[("cpu", "2"), ("memory", "1Gi")]);
    let p = pod("Always", vec![], vec![spec]);
    let rt = runtime(vec![sb(true)], vec![rc("app", "c1", Running, 0, 10)]);
    let mut old = Gen::new(&p, &rt).run();
    if let Some(cs) = old.container_statuses.as_mut() {
        cs[0].resources = Some(ResourceRequirements {
            limits: Some(quantities(&[("cpu", "1500m")])),
            requests: Some(quantities(&[("cpu", "700m")])),
            claims: None,
        });
    }
    let mut g = Gen::new(&p, &rt);
    g.old = Some(&old);
    let res = st(&g.run(), "app").resources.clone().expect("resources");
    assert_eq!(
        res.limits,
        Some(quantities(&[("cpu", "1500m"), ("memory", "1Gi")]))
    );
    assert_eq!(res.requests, Some(quantities(&[("cpu", "700m")])));
    // A different container ID is a new container: the old values do not carry over.
    let rt2 = runtime(vec![sb(true)], vec![rc("app", "c2", Running, 0, 20)]);
    let mut g = Gen::new(&p, &rt2);
    g.old = Some(&old);
    let res = st(&g.run(), "app").resources.clone().expect("resources");
    assert_eq!(
        res.limits,
        Some(quantities(&[("cpu", "2"), ("memory", "1Gi")]))
    );

    // At or below the smallest effective values, the spec's numbers stay.
    let spec = with_resources("app", &[("cpu", "1m")], &[("cpu", "5m")]);
    let p = pod("Always", vec![], vec![spec]);
    let mut tiny = rc("app", "c1", Running, 0, 10);
    tiny.resources = Some(crate::container::ContainerResources {
        cpu_limit_milli: Some(10),
        cpu_request_milli: Some(2),
        memory_limit_bytes: None,
    });
    let rt = runtime(vec![sb(true)], vec![tiny]);
    let res = st(&Gen::new(&p, &rt).run(), "app")
        .resources
        .clone()
        .expect("resources");
    assert_eq!(res.limits, Some(quantities(&[("cpu", "5m")])));
    assert_eq!(res.requests, Some(quantities(&[("cpu", "1m")])));

    // No resources in the spec: `resources: {}` and no `allocatedResources`, as upstream.
    let p = pod("Always", vec![], vec![ctr("app")]);
    let rt = runtime(vec![sb(true)], vec![rc("app", "c1", Running, 0, 10)]);
    let s = Gen::new(&p, &rt).run();
    assert_eq!(
        st(&s, "app").resources,
        Some(ResourceRequirements::default())
    );
    assert_eq!(st(&s, "app").allocated_resources, None);
}

/// 1.34 `PodObservedGenerationTracking`: the status and each kubelet-owned condition carry
/// the pod's `metadata.generation`; other conditions keep theirs.
#[test]
fn observed_generation_on_status_and_conditions() {
    let mut p = pod("Always", vec![], vec![ctr("app")]);
    p.metadata.generation = Some(3);
    p.status = Some(ApiPodStatus {
        conditions: Some(vec![PodCondition {
            type_: "example.com/gate".into(),
            status: "True".into(),
            observed_generation: Some(1),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let rt = runtime(vec![sb(true)], vec![rc("app", "c1", Running, 0, 10)]);
    let s = Gen::new(&p, &rt).run();
    assert_eq!(s.observed_generation, Some(3));
    for c in s.conditions.iter().flatten() {
        let want = if c.type_ == "example.com/gate" { 1 } else { 3 };
        assert_eq!(c.observed_generation, Some(want), "{}", c.type_);
    }
    for type_ in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        assert_eq!(cond(&s, type_).observed_generation, Some(3), "{type_}");
    }

    // Generation 0 or unset: omitted.
    p.metadata.generation = None;
    let s = Gen::new(&p, &rt).run();
    assert_eq!(s.observed_generation, None);
    assert!(
        s.conditions
            .iter()
            .flatten()
            .filter(|c| c.type_ != "example.com/gate")
            .all(|c| c.observed_generation.is_none())
    );
}
mod ephemeral;
