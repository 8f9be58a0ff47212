//! `ephemeralContainerStatuses` (upstream `convertToAPIContainerStatuses` on the ephemeral
//! containers): waiting until created, running, terminated with the runtime's reason and
//! exit code, restart count 0, start errors as waiting reasons, no effect on phase or
//! readiness, and no `started`/`ready` from the prober.

use k8s_openapi::api::core::v1::EphemeralContainer;

use super::*;

fn with_debug(mut p: Pod) -> Pod {
    if let Some(spec) = p.spec.as_mut() {
        spec.ephemeral_containers = Some(
            ["debug-b", "debug-a"]
                .iter()
                .map(|n| EphemeralContainer {
                    name: (*n).into(),
                    image: Some("busybox".into()),
                    target_container_name: Some("app".into()),
                    ..Default::default()
                })
                .collect(),
        );
    }
    p
}

fn ephemeral<'a>(s: &'a ApiPodStatus, name: &str) -> &'a ApiContainerStatus {
    s.ephemeral_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .expect("ephemeral container status present")
}

#[test]
fn no_ephemeral_containers_no_list() {
    let p = pod("Always", vec![], vec![ctr("app")]);
    let rt = runtime(
        vec![sb(true)],
        vec![rc("app", "c1", ContainerState::Running, 0, 1)],
    );
    assert_eq!(Gen::new(&p, &rt).run().ephemeral_container_statuses, None);
}

#[test]
fn ephemeral_container_states_and_reasons() {
    let p = with_debug(pod("Always", vec![], vec![ctr("app")]));
    let app = rc("app", "c1", ContainerState::Running, 0, 1);

    // Not started yet: waiting ContainerCreating, sorted by name, restartCount 0.
    let rt = runtime(vec![sb(true)], vec![app.clone()]);
    let s = Gen::new(&p, &rt).run();
    let names: Vec<&str> = s
        .ephemeral_container_statuses
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["debug-a", "debug-b"]);
    let a = ephemeral(&s, "debug-a");
    assert_eq!(waiting_reason(a).as_deref(), Some(CONTAINER_CREATING));
    assert_eq!((a.restart_count, a.ready, a.started), (0, false, None));
    assert_eq!(a.image, "busybox");
    // Ephemeral containers are not regular ones: the phase and readiness follow `app` only.
    assert_eq!(s.phase.as_deref(), Some(RUNNING));
    assert_eq!(csum(&s, "ContainersReady").0, yes());
    assert!(
        s.container_statuses
            .iter()
            .flatten()
            .all(|c| c.name == "app")
    );

    // debug-a running, debug-b exited 3: the runtime's states, IDs, reason and exit code.
    let mut running = rc("debug-a", "e1", ContainerState::Running, 0, 10);
    running.hash = 0;
    let exited = rc("debug-b", "e2", ContainerState::Exited, 3, 11);
    let rt = runtime(vec![sb(true)], vec![app.clone(), running, exited]);
    let s = Gen::new(&p, &rt).run();
    let a = ephemeral(&s, "debug-a");
    assert!(a.state.as_ref().and_then(|s| s.running.as_ref()).is_some());
    assert_eq!(a.container_id.as_deref(), Some("containerd://e1"));
    assert_eq!((a.restart_count, a.ready, a.started), (0, false, None));
    let b = ephemeral(&s, "debug-b");
    assert_eq!(terminated(b), Some((3, Some("Error".into()))));
    assert_eq!(b.restart_count, 0);
    assert_eq!(s.phase.as_deref(), Some(RUNNING));

    // A failed start shows as the waiting reason and message.
    let rt = runtime(vec![sb(true)], vec![app]);
    let mut g = Gen::new(&p, &rt);
    g.errors.insert(
        "debug-a".into(),
        (
            "CreateContainerConfigError".into(),
            "unable to find target container app".into(),
        ),
    );
    let s = g.run();
    let a = ephemeral(&s, "debug-a");
    assert_eq!(
        waiting_reason(a).as_deref(),
        Some("CreateContainerConfigError")
    );
    assert_eq!(
        a.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.message.as_deref()),
        Some("unable to find target container app")
    );
}

#[test]
fn ephemeral_containers_wait_with_pod_initializing_while_init_runs() {
    let p = with_debug(pod("Always", vec![ctr("init")], vec![ctr("app")]));
    let rt = runtime(
        vec![sb(true)],
        vec![rc("init", "i1", ContainerState::Running, 0, 1)],
    );
    let s = Gen::new(&p, &rt).run();
    assert_eq!(
        waiting_reason(ephemeral(&s, "debug-a")).as_deref(),
        Some(POD_INITIALIZING)
    );
}

#[test]
fn hostile_ephemeral_names_do_not_break_status_generation() {
    // Named like the regular container, duplicated: one status per spec entry, no panic, and
    // the regular container's status is untouched.
    let mut p = pod("Always", vec![], vec![ctr("app")]);
    if let Some(spec) = p.spec.as_mut() {
        spec.ephemeral_containers = Some(
            ["app", "dup", "dup"]
                .iter()
                .map(|n| EphemeralContainer {
                    name: (*n).into(),
                    ..Default::default()
                })
                .collect(),
        );
    }
    let rt = runtime(
        vec![sb(true)],
        vec![rc("app", "c1", ContainerState::Running, 0, 1)],
    );
    let s = Gen::new(&p, &rt).run();
    assert_eq!(
        s.ephemeral_container_statuses.as_ref().map(Vec::len),
        Some(3)
    );
    assert_eq!(s.container_statuses.as_ref().map(Vec::len), Some(1));
    assert_eq!(s.phase.as_deref(), Some(RUNNING));
}
