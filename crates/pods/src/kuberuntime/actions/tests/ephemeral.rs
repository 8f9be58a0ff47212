//! `compute_pod_actions` with ephemeral containers (upstream
//! `TestComputePodActionsWithInitAndEphemeralContainers` and the ephemeral cases of
//! `TestComputePodActions`): started once when the runtime has no record of them, in the kept
//! sandbox, even before initialization is done; never restarted, never killed on their own.

use k8s_openapi::api::core::v1::EphemeralContainer;

use super::*;

fn debug(name: &str) -> EphemeralContainer {
    EphemeralContainer {
        name: name.into(),
        image: Some("busybox".into()),
        target_container_name: Some("foo1".into()),
        ..Default::default()
    }
}

fn with_ephemeral(mut p: Pod, names: &[&str]) -> Pod {
    if let Some(spec) = p.spec.as_mut() {
        spec.ephemeral_containers = Some(names.iter().map(|n| debug(n)).collect());
    }
    p
}

/// A runtime record of ephemeral container `name` (hash of its container view).
fn ecs(p: &Pod, name: &str, state: ContainerState, exit_code: i32) -> ContainerStatus {
    let ec = crate::kuberuntime::ephemeral::ephemeral_containers(p)
        .iter()
        .find(|e| e.name == name)
        .expect("ephemeral container in spec");
    let mut s = cs(&basic("Always"), "foo1", state, exit_code);
    s.id = format!("id-{name}");
    s.name = name.into();
    s.hash = hash_container(&crate::kuberuntime::ephemeral::as_container(ec));
    s
}

fn running_regulars(p: &Pod) -> Vec<ContainerStatus> {
    all(p, Running, 0)
}

#[test]
fn ephemeral_containers_start_once_and_are_never_restarted() {
    let mut cases = Vec::new();
    for policy in ["Always", "OnFailure", "Never"] {
        let p = with_ephemeral(basic(policy), &["debug1", "debug2"]);
        cases.push(Case {
            name: "no record of either: start both, in spec order",
            pod: p.clone(),
            status: status(ready_sb(), running_regulars(&p)),
            probes: None,
            want: Want::keep(),
        });
        let mut sts = running_regulars(&p);
        sts.push(ecs(&p, "debug1", Running, 0));
        cases.push(Case {
            name: "debug1 running: start only debug2",
            pod: p.clone(),
            status: status(ready_sb(), sts),
            probes: None,
            want: Want::keep(),
        });
        for exit in [0, 1] {
            let mut sts = running_regulars(&p);
            sts.push(ecs(&p, "debug1", Exited, exit));
            sts.push(ecs(&p, "debug2", Exited, exit));
            cases.push(Case {
                name: "both exited: neither restarted, whatever the restart policy",
                pod: p.clone(),
                status: status(ready_sb(), sts),
                probes: None,
                want: Want::keep(),
            });
        }
        let mut sts = running_regulars(&p);
        sts.push(ecs(&p, "debug1", Unknown, 0));
        sts.push(ecs(&p, "debug2", Created, 0));
        cases.push(Case {
            name: "unknown or created: neither killed nor started again",
            pod: p.clone(),
            status: status(ready_sb(), sts),
            probes: None,
            want: Want::keep(),
        });
    }
    // The tables above share `Want::keep()`; the ephemeral part is checked here per case.
    let expected: [&[usize]; 5] = [&[0, 1], &[1], &[], &[], &[]];
    for (i, case) in cases.into_iter().enumerate() {
        let got = compute_pod_actions(&case.pod, &case.status);
        let mut want = case.want.build();
        want.ephemeral_containers_to_start = expected[i % 5].to_vec();
        assert_eq!(got, want, "case {i}: {}", case.name);
    }
}

#[test]
fn ephemeral_containers_wait_for_a_ready_sandbox() {
    let p = with_ephemeral(basic("Always"), &["debug1"]);
    // No sandbox yet: create it and the regular containers; the ephemeral one waits.
    let got = compute_pod_actions(&p, &status(vec![], vec![]));
    assert!(got.create_sandbox, "{got:?}");
    assert!(got.ephemeral_containers_to_start.is_empty(), "{got:?}");
    // The sandbox died: recreated first, the ephemeral container is not started in the old one.
    let got = compute_pod_actions(&p, &status(dead_sb(), all(&p, Exited, 0)));
    assert!(got.create_sandbox && got.kill_pod, "{got:?}");
    assert!(got.ephemeral_containers_to_start.is_empty(), "{got:?}");
    // Ready again: now it starts.
    let got = compute_pod_actions(&p, &status(ready_sb(), running_regulars(&p)));
    assert_eq!(got.ephemeral_containers_to_start, vec![0]);
}

#[test]
fn ephemeral_containers_start_before_initialization_completes() {
    let p = with_ephemeral(with_inits("Always"), &["debug1"]);
    let sts = vec![cs(&p, "init1", Exited, 0), cs(&p, "init2", Running, 0)];
    let got = compute_pod_actions(&p, &status(ready_sb(), sts));
    assert_eq!(got.ephemeral_containers_to_start, vec![0]);
    assert!(got.init_containers_to_start.is_empty(), "{got:?}");
    assert!(got.containers_to_start.is_empty(), "{got:?}");
}

#[test]
fn no_ephemeral_container_starts_in_a_pod_being_deleted() {
    let mut p = with_ephemeral(basic("Always"), &["debug1"]);
    p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let got = compute_pod_actions(&p, &status(ready_sb(), running_regulars(&p)));
    assert!(got.ephemeral_containers_to_start.is_empty(), "{got:?}");
}

#[test]
fn a_running_ephemeral_container_does_not_keep_a_finished_pod_alive() {
    // Regular containers done under Never: the pod is killed, ephemeral container included
    // (it is never kept or killed on its own).
    let p = with_ephemeral(basic("Never"), &["debug1"]);
    let mut sts = all(&p, Exited, 0);
    sts.push(ecs(&p, "debug1", Running, 0));
    let got = compute_pod_actions(&p, &status(ready_sb(), sts));
    assert!(got.kill_pod, "{got:?}");
    assert!(got.containers_to_kill.is_empty(), "{got:?}");
    assert!(got.ephemeral_containers_to_start.is_empty(), "{got:?}");
}

#[test]
fn hostile_ephemeral_specs_decide_without_panicking() {
    // An API server that does not validate could send an ephemeral container named like a
    // regular one, duplicates, or an empty name: the regular container's record counts as
    // the ephemeral one's (nothing extra starts), duplicates start at most once per record.
    let mut p = with_ephemeral(basic("Always"), &["foo1", "dup", "dup", ""]);
    let got = compute_pod_actions(&p, &status(ready_sb(), running_regulars(&p)));
    assert_eq!(got.ephemeral_containers_to_start, vec![1, 2, 3]);
    assert!(got.containers_to_kill.is_empty(), "{got:?}");
    let mut sts = running_regulars(&p);
    sts.push(ecs(&p, "dup", Exited, 0));
    let got = compute_pod_actions(&p, &status(ready_sb(), sts));
    assert_eq!(got.ephemeral_containers_to_start, vec![3]);
    // A target naming itself or nothing known is the starter's problem, not the decision's.
    if let Some(ecs) = p
        .spec
        .as_mut()
        .and_then(|s| s.ephemeral_containers.as_mut())
    {
        ecs[1].target_container_name = Some("dup".into());
    }
    let got = compute_pod_actions(&p, &status(ready_sb(), running_regulars(&p)));
    assert_eq!(got.ephemeral_containers_to_start, vec![1, 2, 3]);
}
