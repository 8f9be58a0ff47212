//! Table tests for `compute_pod_actions`, mirroring upstream's `TestComputePodActions*`
//! (regular containers, init containers, restartable init containers).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::*;
use crate::container::SandboxStatus;

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

fn with_liveness(mut c: Container) -> Container {
    c.liveness_probe = Some(Probe::default());
    c
}

fn with_startup(mut c: Container) -> Container {
    c.startup_probe = Some(Probe::default());
    c
}

fn pod(policy: &str, init: Vec<Container>, containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("foo".into()),
            namespace: Some("new".into()),
            uid: Some("12345678".into()),
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

/// Three regular containers, like upstream's base test pod.
fn basic(policy: &str) -> Pod {
    pod(policy, vec![], vec![ctr("foo1"), ctr("foo2"), ctr("foo3")])
}

fn with_inits(policy: &str) -> Pod {
    pod(
        policy,
        vec![ctr("init1"), ctr("init2"), ctr("init3")],
        vec![ctr("foo1"), ctr("foo2")],
    )
}

fn with_sidecars(policy: &str, first: Container) -> Pod {
    pod(
        policy,
        vec![first, ctr("init2"), sidecar("sidecar3")],
        vec![ctr("foo1"), ctr("foo2")],
    )
}

fn sandbox(id: &str, ready: bool, attempt: u32) -> SandboxStatus {
    SandboxStatus {
        id: id.into(),
        ready,
        created_at: None,
        attempt,
        ips: vec!["10.0.0.2".into()],
        primary_ip: Some("10.0.0.2".into()),
        host_network: false,
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}

use ContainerState::{Created, Exited, Running, Unknown};

/// A runtime container of `name` whose hash matches the spec in `pod`; ID `id-<name>`.
fn cs(pod: &Pod, name: &str, state: ContainerState, exit_code: i32) -> ContainerStatus {
    let spec = pod.spec.as_ref().expect("spec");
    let spec_c = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .expect("container in spec");
    ContainerStatus {
        id: format!("id-{name}"),
        name: name.into(),
        sandbox_id: "sb1".into(),
        state,
        created_at: None,
        started_at: None,
        finished_at: None,
        exit_code,
        image: "busybox".into(),
        image_ref: String::new(),
        image_id: String::new(),
        hash: hash_container(spec_c),
        restart_count: 0,
        reason: String::new(),
        message: String::new(),
        termination_message_path: None,
        termination_grace_period: None,
        resources: None,
        user: None,
    }
}

fn status(sandboxes: Vec<SandboxStatus>, containers: Vec<ContainerStatus>) -> PodStatus {
    PodStatus {
        uid: "12345678".into(),
        name: "foo".into(),
        namespace: "new".into(),
        ips: vec!["10.0.0.2".into()],
        sandbox_statuses: sandboxes,
        container_statuses: containers,
    }
}

fn ready_sb() -> Vec<SandboxStatus> {
    vec![sandbox("sb1", true, 0)]
}

fn dead_sb() -> Vec<SandboxStatus> {
    vec![sandbox("sb1", false, 0)]
}

/// Expected actions; `kill` is `(container, reason, message)` keyed by `id-<container>`.
#[derive(Default)]
struct Want {
    kill_pod: bool,
    create: bool,
    sandbox: Option<&'static str>,
    attempt: u32,
    init: Vec<usize>,
    start: Vec<usize>,
    kill: Vec<(&'static str, KillReason, &'static str)>,
}

impl Want {
    /// Reusing the ready sandbox `sb1`.
    fn keep() -> Self {
        Want {
            sandbox: Some("sb1"),
            ..Want::default()
        }
    }
    fn build(self) -> PodActions {
        PodActions {
            kill_pod: self.kill_pod,
            create_sandbox: self.create,
            sandbox_id: self.sandbox.map(str::to_owned),
            attempt: self.attempt,
            init_containers_to_start: self.init,
            containers_to_start: self.start,
            containers_to_kill: self
                .kill
                .into_iter()
                .map(|(name, reason, message)| {
                    (
                        format!("id-{name}"),
                        ContainerToKill {
                            name: name.into(),
                            reason,
                            message: message.into(),
                        },
                    )
                })
                .collect(),
            ephemeral_containers_to_start: Vec::new(),
        }
    }
}

#[derive(Default)]
struct FakeProbes {
    liveness: BTreeMap<&'static str, ProbeResult>,
    startup: BTreeMap<&'static str, ProbeResult>,
}

impl ProbeResults for FakeProbes {
    fn liveness(&self, id: &str) -> Option<ProbeResult> {
        self.liveness.get(id).copied()
    }
    fn startup(&self, id: &str) -> Option<ProbeResult> {
        self.startup.get(id).copied()
    }
    fn readiness(&self, _: &str) -> Option<ProbeResult> {
        None
    }
}

struct Case {
    name: &'static str,
    pod: Pod,
    status: PodStatus,
    probes: Option<FakeProbes>,
    want: Want,
}

fn run(cases: Vec<Case>) {
    for case in cases {
        let got = match &case.probes {
            Some(p) => compute_pod_actions_with_probes(&case.pod, &case.status, p),
            None => compute_pod_actions(&case.pod, &case.status),
        };
        assert_eq!(got, case.want.build(), "case: {}", case.name);
    }
}

/// Regular pods: `all(pod, state, exit)` gives every regular container that state.
fn all(p: &Pod, state: ContainerState, exit: i32) -> Vec<ContainerStatus> {
    ["foo1", "foo2", "foo3"]
        .iter()
        .map(|n| cs(p, n, state, exit))
        .collect()
}

#[test]
fn regular_containers() {
    let always = basic("Always");
    let on_failure = basic("OnFailure");
    let never = basic("Never");
    let mut changed_spec = basic("Always");
    let mut st_changed = all(&changed_spec, Running, 0);
    st_changed[1].hash = 1;
    if let Some(spec) = changed_spec.spec.as_mut() {
        spec.containers[1].image = Some("busybox:new".into());
    }
    let mut host_net = basic("Always");
    if let Some(spec) = host_net.spec.as_mut() {
        spec.host_network = Some(true);
    }
    let mut host_sb = sandbox("sb1", true, 0);
    host_sb.host_network = true;
    host_sb.ips.clear();
    host_sb.primary_ip = Some(String::new());
    let mut no_ip = sandbox("sb1", true, 0);
    no_ip.ips.clear();
    no_ip.primary_ip = Some(String::new());
    let mut deleted = basic("Always");
    deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));

    run(vec![
        Case {
            name: "create sandbox and all containers",
            pod: always.clone(),
            status: status(vec![], vec![]),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                start: vec![0, 1, 2],
                ..Want::default()
            },
        },
        Case {
            name: "everything running: nothing to do",
            pod: always.clone(),
            status: status(ready_sb(), all(&always, Running, 0)),
            probes: None,
            want: Want::keep(),
        },
        Case {
            name: "Always restarts exited containers",
            pod: always.clone(),
            status: status(
                ready_sb(),
                vec![
                    cs(&always, "foo1", Running, 0),
                    cs(&always, "foo2", Exited, 0),
                    cs(&always, "foo3", Exited, 1),
                ],
            ),
            probes: None,
            want: Want {
                start: vec![1, 2],
                ..Want::keep()
            },
        },
        Case {
            name: "OnFailure restarts failed containers only",
            pod: on_failure.clone(),
            status: status(
                ready_sb(),
                vec![
                    cs(&on_failure, "foo1", Running, 0),
                    cs(&on_failure, "foo2", Exited, 0),
                    cs(&on_failure, "foo3", Exited, 1),
                ],
            ),
            probes: None,
            want: Want {
                start: vec![2],
                ..Want::keep()
            },
        },
        Case {
            name: "Never restarts nothing",
            pod: never.clone(),
            status: status(
                ready_sb(),
                vec![
                    cs(&never, "foo1", Running, 0),
                    cs(&never, "foo2", Exited, 0),
                    cs(&never, "foo3", Exited, 1),
                ],
            ),
            probes: None,
            want: Want::keep(),
        },
        Case {
            name: "Never, all exited: kill the pod",
            pod: never.clone(),
            status: status(ready_sb(), all(&never, Exited, 0)),
            probes: None,
            want: Want {
                kill_pod: true,
                ..Want::keep()
            },
        },
        Case {
            name: "sandbox dead, Always: recreate everything",
            pod: always.clone(),
            status: status(dead_sb(), all(&always, Exited, 0)),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                sandbox: Some("sb1"),
                attempt: 1,
                start: vec![0, 1, 2],
                ..Want::default()
            },
        },
        Case {
            name: "sandbox dead, OnFailure: recreate all but the succeeded",
            pod: on_failure.clone(),
            status: status(
                dead_sb(),
                vec![
                    cs(&on_failure, "foo1", Exited, 1),
                    cs(&on_failure, "foo2", Exited, 0),
                    cs(&on_failure, "foo3", Exited, 2),
                ],
            ),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                sandbox: Some("sb1"),
                attempt: 1,
                start: vec![0, 2],
                ..Want::default()
            },
        },
        Case {
            name: "sandbox without IP: recreate",
            pod: always.clone(),
            status: status(vec![no_ip], all(&always, Running, 0)),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                sandbox: Some("sb1"),
                attempt: 1,
                start: vec![0, 1, 2],
                ..Want::default()
            },
        },
        Case {
            name: "host-network sandbox needs no IP",
            pod: host_net.clone(),
            status: status(vec![host_sb], all(&host_net, Running, 0)),
            probes: None,
            want: Want::keep(),
        },
        Case {
            name: "network namespace mode changed: recreate, old sandbox not reused",
            pod: host_net.clone(),
            status: status(ready_sb(), all(&host_net, Running, 0)),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                sandbox: None,
                attempt: 1,
                start: vec![0, 1, 2],
                ..Want::default()
            },
        },
        Case {
            name: "multiple ready sandboxes: reconcile with a new one",
            pod: always.clone(),
            status: status(
                vec![sandbox("sb2", true, 1), sandbox("sb1", true, 0)],
                all(&always, Running, 0),
            ),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                sandbox: Some("sb2"),
                attempt: 2,
                start: vec![0, 1, 2],
                ..Want::default()
            },
        },
        Case {
            name: "spec changed: kill and restart",
            pod: changed_spec.clone(),
            status: status(ready_sb(), st_changed.clone()),
            probes: None,
            want: Want {
                start: vec![1],
                kill: vec![(
                    "foo2",
                    KillReason::None,
                    "Container foo2 definition changed, will be restarted",
                )],
                ..Want::keep()
            },
        },
        Case {
            name: "Never, sandbox dead, containers ran: do not recreate",
            pod: never.clone(),
            status: status(dead_sb(), all(&never, Exited, 1)),
            probes: None,
            want: Want {
                kill_pod: true,
                sandbox: Some("sb1"),
                attempt: 1,
                ..Want::default()
            },
        },
        Case {
            name: "OnFailure, sandbox dead, all succeeded: do not recreate",
            pod: on_failure.clone(),
            status: status(dead_sb(), all(&on_failure, Exited, 0)),
            probes: None,
            want: Want {
                kill_pod: true,
                sandbox: Some("sb1"),
                attempt: 1,
                ..Want::default()
            },
        },
        Case {
            name: "Never, sandbox dead, no container ever created: recreate",
            pod: never.clone(),
            status: status(dead_sb(), vec![]),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                sandbox: Some("sb1"),
                attempt: 1,
                start: vec![0, 1, 2],
                ..Want::default()
            },
        },
        Case {
            name: "unknown state: kill before restarting",
            pod: always.clone(),
            status: status(
                ready_sb(),
                vec![
                    cs(&always, "foo1", Unknown, 0),
                    cs(&always, "foo2", Running, 0),
                    cs(&always, "foo3", Running, 0),
                ],
            ),
            probes: None,
            want: Want {
                start: vec![0],
                kill: vec![(
                    "foo1",
                    KillReason::Unknown,
                    "Container is in \"unknown\" state, try killing it before restart",
                )],
                ..Want::keep()
            },
        },
        Case {
            name: "created state: start again",
            pod: never.clone(),
            status: status(
                ready_sb(),
                vec![
                    cs(&never, "foo1", Created, 0),
                    cs(&never, "foo2", Running, 0),
                    cs(&never, "foo3", Running, 0),
                ],
            ),
            probes: None,
            want: Want {
                start: vec![0],
                ..Want::keep()
            },
        },
        Case {
            name: "pod being deleted: no restarts, all exited kills the pod",
            pod: deleted.clone(),
            status: status(ready_sb(), all(&deleted, Exited, 1)),
            probes: None,
            want: Want {
                kill_pod: true,
                ..Want::keep()
            },
        },
    ]);
}

/// After the sandbox died, every init container runs again in the new one: the `Exited 0` of
/// init containers from the old sandbox (left over when their removal failed) do not count.
#[test]
fn init_containers_of_an_old_sandbox_do_not_count() {
    let p = with_inits("Always");
    let in_sb = |name: &str, sb: &str, state, exit| {
        let mut c = cs(&p, name, state, exit);
        c.sandbox_id = sb.into();
        c.id = format!("id-{name}-{sb}");
        c
    };
    let sandboxes = vec![sandbox("sb2", true, 1), sandbox("sb1", false, 0)];
    let old_run = vec![
        in_sb("init2", "sb1", Exited, 0),
        in_sb("init3", "sb1", Exited, 0),
        in_sb("foo1", "sb1", Exited, 137),
        in_sb("foo2", "sb1", Exited, 137),
    ];
    let want = |init: Vec<usize>| PodActions {
        sandbox_id: Some("sb2".into()),
        attempt: 1,
        init_containers_to_start: init,
        ..PodActions::default()
    };

    // The sandbox died: kill, new sandbox, start from the first init container.
    let mut dead = old_run.clone();
    dead.insert(0, in_sb("init1", "sb1", Exited, 0));
    let got = compute_pod_actions(&p, &status(vec![sandbox("sb1", false, 0)], dead));
    assert!(got.kill_pod && got.create_sandbox, "{got:?}");
    assert_eq!(got.init_containers_to_start, vec![0]);
    assert!(got.containers_to_start.is_empty());

    // init1 ran in the new sandbox: init2 is next, not the regular containers.
    let mut st = old_run.clone();
    st.insert(0, in_sb("init1", "sb2", Exited, 0));
    assert_eq!(
        compute_pod_actions(&p, &status(sandboxes.clone(), st)),
        want(vec![1])
    );

    // init2 too: init3 is next.
    let mut st = old_run.clone();
    st.insert(0, in_sb("init2", "sb2", Exited, 0));
    st.insert(1, in_sb("init1", "sb2", Exited, 0));
    assert_eq!(
        compute_pod_actions(&p, &status(sandboxes.clone(), st)),
        want(vec![2])
    );

    // All three in the new sandbox: initialized, the regular containers start.
    let mut st = old_run;
    for name in ["init1", "init2", "init3"] {
        st.insert(0, in_sb(name, "sb2", Exited, 0));
    }
    let got = compute_pod_actions(&p, &status(sandboxes, st));
    assert_eq!(
        got,
        PodActions {
            containers_to_start: vec![0, 1],
            ..want(vec![])
        }
    );
}

/// Upstream `PodSandboxChanged` recreates an IP-less sandbox only when the pod is not
/// host-network and the runtime reported a network status whose primary IP is empty.
#[test]
fn sandbox_ip_check_as_upstream() {
    let always = basic("Always");
    let mut host_net = basic("Always");
    if let Some(spec) = host_net.spec.as_mut() {
        spec.host_network = Some(true);
    }
    let recreate = Want {
        kill_pod: true,
        create: true,
        sandbox: Some("sb1"),
        attempt: 1,
        start: vec![0, 1, 2],
        ..Want::default()
    };

    // The runtime said nothing about the network (it may not manage it): keep the sandbox.
    let mut no_network = sandbox("sb1", true, 0);
    no_network.ips.clear();
    no_network.primary_ip = None;
    // A network status with additional IPs but no primary one: recreate.
    let mut no_primary = sandbox("sb1", true, 0);
    no_primary.ips = vec!["fd00::2".into()];
    no_primary.primary_ip = Some(String::new());
    // Host network: neither an empty IP nor a missing network status matters.
    let mut host_empty = sandbox("sb1", true, 0);
    host_empty.host_network = true;
    host_empty.ips.clear();
    host_empty.primary_ip = Some(String::new());
    let mut host_none = host_empty.clone();
    host_none.primary_ip = None;

    for (name, pod, sb, want) in [
        ("no network status", &always, no_network, Want::keep()),
        (
            "network status without primary IP",
            &always,
            no_primary,
            recreate,
        ),
        (
            "host network, empty IP",
            &host_net,
            host_empty,
            Want::keep(),
        ),
        (
            "host network, no network status",
            &host_net,
            host_none,
            Want::keep(),
        ),
    ] {
        let got = compute_pod_actions(pod, &status(vec![sb], all(pod, Running, 0)));
        assert_eq!(got, want.build(), "case: {name}");
    }
}

#[test]
fn probe_failures_on_regular_containers() {
    let mk = |policy| {
        pod(
            policy,
            vec![],
            vec![with_liveness(ctr("foo1")), with_startup(ctr("foo2"))],
        )
    };
    let probes = || FakeProbes {
        liveness: BTreeMap::from([("id-foo1", ProbeResult::Failure)]),
        startup: BTreeMap::from([("id-foo2", ProbeResult::Failure)]),
    };
    let running = |p: &Pod| vec![cs(p, "foo1", Running, 0), cs(p, "foo2", Running, 0)];
    let always = mk("Always");
    let never = mk("Never");
    run(vec![
        Case {
            name: "liveness and startup failures restart under Always",
            pod: always.clone(),
            status: status(ready_sb(), running(&always)),
            probes: Some(probes()),
            want: Want {
                start: vec![0, 1],
                kill: vec![
                    (
                        "foo1",
                        KillReason::LivenessProbe,
                        "Container foo1 failed liveness probe, will be restarted",
                    ),
                    (
                        "foo2",
                        KillReason::StartupProbe,
                        "Container foo2 failed startup probe, will be restarted",
                    ),
                ],
                ..Want::keep()
            },
        },
        Case {
            name: "probe failures under Never kill without restart, then the pod",
            pod: never.clone(),
            status: status(ready_sb(), running(&never)),
            probes: Some(probes()),
            want: Want {
                kill_pod: true,
                kill: vec![
                    (
                        "foo1",
                        KillReason::LivenessProbe,
                        "Container foo1 failed liveness probe",
                    ),
                    (
                        "foo2",
                        KillReason::StartupProbe,
                        "Container foo2 failed startup probe",
                    ),
                ],
                ..Want::keep()
            },
        },
        Case {
            name: "probes not run yet: keep",
            pod: always.clone(),
            status: status(ready_sb(), running(&always)),
            probes: Some(FakeProbes::default()),
            want: Want::keep(),
        },
    ]);
}

#[test]
fn kill_reason_strings() {
    assert_eq!(KillReason::None.as_str(), "");
    assert_eq!(KillReason::LivenessProbe.as_str(), "LivenessProbe");
    assert_eq!(KillReason::StartupProbe.as_str(), "StartupProbe");
    assert_eq!(
        KillReason::FailedPostStartHook.as_str(),
        "FailedPostStartHook"
    );
    assert_eq!(KillReason::Unknown.as_str(), "Unknown");
}

mod ephemeral;
mod init;
