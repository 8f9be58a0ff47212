//! `compute_pod_actions` tables for init containers and sidecars (upstream
//! `TestComputePodActionsWithInitContainers` / `...WithRestartableInitContainers`).

use super::*;

#[test]
fn init_containers() {
    let always = with_inits("Always");
    let on_failure = with_inits("OnFailure");
    let never = with_inits("Never");
    let inits = |p: &Pod, states: &[(&str, ContainerState, i32)]| -> Vec<ContainerStatus> {
        states.iter().map(|(n, s, e)| cs(p, n, *s, *e)).collect()
    };
    let mut oom = cs(&never, "init1", Exited, 0);
    oom.reason = "OOMKilled".into();

    run(vec![
        Case {
            name: "initialization done: start all containers",
            pod: always.clone(),
            status: status(
                ready_sb(),
                inits(
                    &always,
                    &[
                        ("init1", Exited, 0),
                        ("init2", Exited, 0),
                        ("init3", Exited, 0),
                    ],
                ),
            ),
            probes: None,
            want: Want {
                start: vec![0, 1],
                ..Want::keep()
            },
        },
        Case {
            name: "nothing started: start the first init container",
            pod: always.clone(),
            status: status(ready_sb(), vec![]),
            probes: None,
            want: Want {
                init: vec![0],
                ..Want::keep()
            },
        },
        Case {
            name: "initialization in progress: wait",
            pod: always.clone(),
            status: status(
                ready_sb(),
                inits(&always, &[("init1", Exited, 0), ("init2", Running, 0)]),
            ),
            probes: None,
            want: Want::keep(),
        },
        Case {
            name: "next init container after a success",
            pod: always.clone(),
            status: status(ready_sb(), inits(&always, &[("init1", Exited, 0)])),
            probes: None,
            want: Want {
                init: vec![1],
                ..Want::keep()
            },
        },
        Case {
            name: "sandbox dead: recreate and start the first init container",
            pod: always.clone(),
            status: status(
                dead_sb(),
                inits(&always, &[("init1", Exited, 0), ("init2", Running, 0)]),
            ),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                sandbox: Some("sb1"),
                attempt: 1,
                init: vec![0],
                ..Want::default()
            },
        },
        Case {
            name: "init failed, Always: restart it",
            pod: always.clone(),
            status: status(
                ready_sb(),
                inits(&always, &[("init1", Exited, 0), ("init2", Exited, 1)]),
            ),
            probes: None,
            want: Want {
                init: vec![1],
                ..Want::keep()
            },
        },
        Case {
            name: "init failed, OnFailure: restart it",
            pod: on_failure.clone(),
            status: status(
                ready_sb(),
                inits(&on_failure, &[("init1", Exited, 0), ("init2", Exited, 1)]),
            ),
            probes: None,
            want: Want {
                init: vec![1],
                ..Want::keep()
            },
        },
        Case {
            name: "init failed, Never: kill the pod",
            pod: never.clone(),
            status: status(
                ready_sb(),
                inits(&never, &[("init1", Exited, 0), ("init2", Exited, 1)]),
            ),
            probes: None,
            want: Want {
                kill_pod: true,
                ..Want::keep()
            },
        },
        Case {
            name: "OOM-killed init counts as failed even with exit 0",
            pod: never.clone(),
            status: status(ready_sb(), vec![oom]),
            probes: None,
            want: Want {
                kill_pod: true,
                ..Want::keep()
            },
        },
        Case {
            name: "init unknown, Always: kill and restart it",
            pod: always.clone(),
            status: status(
                ready_sb(),
                inits(&always, &[("init1", Exited, 0), ("init2", Unknown, 0)]),
            ),
            probes: None,
            want: Want {
                init: vec![1],
                kill: vec![(
                    "init2",
                    KillReason::Unknown,
                    "Init container is in \"unknown\" state, try killing it before restart",
                )],
                ..Want::keep()
            },
        },
        Case {
            name: "init unknown, Never: kill the pod",
            pod: never.clone(),
            status: status(
                ready_sb(),
                inits(&never, &[("init1", Exited, 0), ("init2", Unknown, 0)]),
            ),
            probes: None,
            want: Want {
                kill_pod: true,
                ..Want::keep()
            },
        },
        Case {
            name: "sandbox dead, init failed, Never: only kill",
            pod: never.clone(),
            status: status(
                dead_sb(),
                inits(&never, &[("init1", Exited, 0), ("init2", Exited, 1)]),
            ),
            probes: None,
            want: Want {
                kill_pod: true,
                sandbox: Some("sb1"),
                attempt: 1,
                ..Want::default()
            },
        },
        Case {
            name: "sandbox dead, Never, no container visible: recreate",
            pod: never.clone(),
            status: status(dead_sb(), vec![]),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                sandbox: Some("sb1"),
                attempt: 1,
                init: vec![0],
                ..Want::default()
            },
        },
        Case {
            name: "sandbox dead, init failed, OnFailure: recreate",
            pod: on_failure.clone(),
            status: status(
                dead_sb(),
                inits(&on_failure, &[("init1", Exited, 0), ("init2", Exited, 1)]),
            ),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                sandbox: Some("sb1"),
                attempt: 1,
                init: vec![0],
                ..Want::default()
            },
        },
        Case {
            name: "earlier statuses missing, last init running: don't restart earlier ones",
            pod: always.clone(),
            status: status(ready_sb(), inits(&always, &[("init3", Running, 0)])),
            probes: None,
            want: Want::keep(),
        },
        Case {
            name: "init stuck in created: restart it",
            pod: always.clone(),
            status: status(
                ready_sb(),
                inits(&always, &[("init1", Exited, 0), ("init2", Created, 0)]),
            ),
            probes: None,
            want: Want {
                init: vec![1],
                ..Want::keep()
            },
        },
        Case {
            name: "init containers garbage-collected, regular containers running: keep",
            pod: always.clone(),
            status: status(
                ready_sb(),
                inits(&always, &[("foo1", Running, 0), ("foo2", Running, 0)]),
            ),
            probes: None,
            want: Want::keep(),
        },
    ]);
}

#[test]
fn sidecars() {
    let always = with_sidecars("Always", sidecar("sidecar1"));
    let never = with_sidecars("Never", sidecar("sidecar1"));
    let on_failure = with_sidecars("OnFailure", sidecar("sidecar1"));
    let startup = with_sidecars("Always", with_startup(sidecar("sidecar1")));
    let liveness = with_sidecars("Always", with_liveness(sidecar("sidecar1")));
    let st = |p: &Pod, states: &[(&str, ContainerState, i32)]| -> Vec<ContainerStatus> {
        states.iter().map(|(n, s, e)| cs(p, n, *s, *e)).collect()
    };
    let probe = |kind: &str, r: Option<ProbeResult>| {
        let mut p = FakeProbes::default();
        if let Some(r) = r {
            match kind {
                "startup" => p.startup.insert("id-sidecar1", r),
                _ => p.liveness.insert("id-sidecar1", r),
            };
        }
        Some(p)
    };
    let initialized = [
        ("sidecar1", Running, 0),
        ("init2", Exited, 0),
        ("sidecar3", Running, 0),
    ];
    let mut changed = st(&always, &initialized);
    changed[0].hash = 7;

    run(vec![
        Case {
            name: "initialized: start all containers",
            pod: always.clone(),
            status: status(ready_sb(), st(&always, &initialized)),
            probes: None,
            want: Want {
                start: vec![0, 1],
                ..Want::keep()
            },
        },
        Case {
            name: "nothing started: start the first (sidecar)",
            pod: always.clone(),
            status: status(ready_sb(), vec![]),
            probes: None,
            want: Want {
                init: vec![0],
                ..Want::keep()
            },
        },
        Case {
            name: "sidecar stuck in created: restart it",
            pod: always.clone(),
            status: status(ready_sb(), st(&always, &[("sidecar1", Created, 0)])),
            probes: None,
            want: Want {
                init: vec![0],
                ..Want::keep()
            },
        },
        Case {
            name: "sidecar running (no startup probe): start the next",
            pod: always.clone(),
            status: status(ready_sb(), st(&always, &[("sidecar1", Running, 0)])),
            probes: None,
            want: Want {
                init: vec![1],
                ..Want::keep()
            },
        },
        Case {
            name: "startup probe not run yet: wait",
            pod: startup.clone(),
            status: status(ready_sb(), st(&startup, &[("sidecar1", Running, 0)])),
            probes: probe("startup", None),
            want: Want::keep(),
        },
        Case {
            name: "startup probe inconclusive: wait",
            pod: startup.clone(),
            status: status(ready_sb(), st(&startup, &[("sidecar1", Running, 0)])),
            probes: probe("startup", Some(ProbeResult::Unknown)),
            want: Want::keep(),
        },
        Case {
            name: "startup probe succeeded: start the next",
            pod: startup.clone(),
            status: status(ready_sb(), st(&startup, &[("sidecar1", Running, 0)])),
            probes: probe("startup", Some(ProbeResult::Success)),
            want: Want {
                init: vec![1],
                ..Want::keep()
            },
        },
        Case {
            name: "startup probe failed: kill and restart the sidecar",
            pod: startup.clone(),
            status: status(ready_sb(), st(&startup, &[("sidecar1", Running, 0)])),
            probes: probe("startup", Some(ProbeResult::Failure)),
            want: Want {
                init: vec![0],
                kill: vec![(
                    "sidecar1",
                    KillReason::StartupProbe,
                    "Init container sidecar1 failed startup probe",
                )],
                ..Want::keep()
            },
        },
        Case {
            name: "liveness not run yet: the next init container still starts",
            pod: liveness.clone(),
            status: status(ready_sb(), st(&liveness, &[("sidecar1", Running, 0)])),
            probes: probe("liveness", None),
            want: Want {
                init: vec![1],
                ..Want::keep()
            },
        },
        Case {
            name: "liveness failed: restart the sidecar and start the next",
            pod: liveness.clone(),
            status: status(ready_sb(), st(&liveness, &[("sidecar1", Running, 0)])),
            probes: probe("liveness", Some(ProbeResult::Failure)),
            want: Want {
                init: vec![0, 1],
                kill: vec![(
                    "sidecar1",
                    KillReason::LivenessProbe,
                    "Init container sidecar1 failed liveness probe",
                )],
                ..Want::keep()
            },
        },
        Case {
            name: "terminated sidecar restarts alongside the next init container",
            pod: always.clone(),
            status: status(
                ready_sb(),
                st(&always, &[("sidecar1", Exited, 1), ("init2", Exited, 0)]),
            ),
            probes: None,
            want: Want {
                init: vec![0, 2],
                ..Want::keep()
            },
        },
        Case {
            name: "terminated sidecar restarts alongside the regular containers",
            pod: always.clone(),
            status: status(
                ready_sb(),
                st(
                    &always,
                    &[
                        ("sidecar1", Exited, 1),
                        ("init2", Exited, 0),
                        ("sidecar3", Running, 0),
                    ],
                ),
            ),
            probes: None,
            want: Want {
                init: vec![0],
                start: vec![0, 1],
                ..Want::keep()
            },
        },
        Case {
            name: "sandbox dead, sidecar failed, Never: only kill",
            pod: never.clone(),
            status: status(dead_sb(), st(&never, &[("sidecar1", Exited, 1)])),
            probes: None,
            want: Want {
                kill_pod: true,
                sandbox: Some("sb1"),
                attempt: 1,
                ..Want::default()
            },
        },
        Case {
            name: "sandbox dead, sidecar failed, OnFailure: recreate",
            pod: on_failure.clone(),
            status: status(dead_sb(), st(&on_failure, &[("sidecar1", Exited, 1)])),
            probes: None,
            want: Want {
                kill_pod: true,
                create: true,
                sandbox: Some("sb1"),
                attempt: 1,
                init: vec![0],
                ..Want::default()
            },
        },
        Case {
            name: "failed sidecar restarts even under Never",
            pod: never.clone(),
            status: status(ready_sb(), st(&never, &[("sidecar1", Exited, 1)])),
            probes: None,
            want: Want {
                init: vec![0],
                ..Want::keep()
            },
        },
        Case {
            name: "unknown sidecar under Never: kill and restart it",
            pod: never.clone(),
            status: status(ready_sb(), st(&never, &[("sidecar1", Unknown, 0)])),
            probes: None,
            want: Want {
                init: vec![0],
                kill: vec![(
                    "sidecar1",
                    KillReason::Unknown,
                    "Init container is in \"unknown\" state, try killing it before restart",
                )],
                ..Want::keep()
            },
        },
        Case {
            name: "sidecar restarts while regular containers run, even under Never",
            pod: never.clone(),
            status: status(
                ready_sb(),
                st(
                    &never,
                    &[
                        ("sidecar1", Exited, 1),
                        ("init2", Exited, 0),
                        ("sidecar3", Running, 0),
                        ("foo1", Running, 0),
                        ("foo2", Running, 0),
                    ],
                ),
            ),
            probes: None,
            want: Want {
                init: vec![0],
                ..Want::keep()
            },
        },
        Case {
            name: "all regular containers done under Never: kill the pod, no sidecar restarts",
            pod: never.clone(),
            status: status(
                ready_sb(),
                st(
                    &never,
                    &[
                        ("sidecar1", Exited, 137),
                        ("init2", Exited, 0),
                        ("sidecar3", Running, 0),
                        ("foo1", Exited, 0),
                        ("foo2", Exited, 0),
                    ],
                ),
            ),
            probes: None,
            want: Want {
                kill_pod: true,
                ..Want::keep()
            },
        },
        Case {
            name: "sidecar definition changed: kill and restart it",
            pod: always.clone(),
            status: status(
                ready_sb(),
                changed
                    .into_iter()
                    .chain(st(&always, &[("foo1", Running, 0), ("foo2", Running, 0)]))
                    .collect(),
            ),
            probes: None,
            want: Want {
                init: vec![0],
                kill: vec![(
                    "sidecar1",
                    KillReason::None,
                    "Init container sidecar1 definition changed",
                )],
                ..Want::keep()
            },
        },
        Case {
            name: "statuses of earlier init containers gone, sidecar3 running: restart sidecar1 and regulars",
            pod: always.clone(),
            status: status(ready_sb(), st(&always, &[("sidecar3", Running, 0)])),
            probes: None,
            want: Want {
                init: vec![0],
                start: vec![0, 1],
                ..Want::keep()
            },
        },
    ]);
}
