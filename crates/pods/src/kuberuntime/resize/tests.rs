//! Pure tests of the resize decisions: which containers update, which restart, and the order
//! of pod cgroup and container changes.

use super::*;
use crate::container::{ContainerState, ContainerStatus};
use serde_json::json;

fn container(
    name: &str,
    cpu: (&str, &str),
    mem: (&str, &str),
    policy: serde_json::Value,
) -> serde_json::Value {
    json!({"name": name, "image": "busybox", "resizePolicy": policy,
        "resources": {"requests": {"cpu": cpu.0, "memory": mem.0},
                      "limits": {"cpu": cpu.1, "memory": mem.1}}})
}

fn pod(containers: Vec<serde_json::Value>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": containers}
    }))
    .unwrap()
}

fn running(names: &[&str]) -> PodStatus {
    PodStatus {
        container_statuses: names
            .iter()
            .map(|n| ContainerStatus {
                id: format!("id-{n}"),
                name: (*n).to_owned(),
                sandbox_id: "sb".into(),
                state: ContainerState::Running,
                created_at: None,
                started_at: None,
                finished_at: None,
                exit_code: 0,
                image: String::new(),
                image_ref: String::new(),
                image_id: String::new(),
                hash: 0,
                restart_count: 0,
                reason: String::new(),
                message: String::new(),
                termination_message_path: None,
                termination_grace_period: None,
                resources: None,
                user: None,
            })
            .collect(),
        ..Default::default()
    }
}

fn res(cpu: (&str, &str), mem: (&str, &str)) -> ResourceRequirements {
    serde_json::from_value(json!({"requests": {"cpu": cpu.0, "memory": mem.0},
                                  "limits": {"cpu": cpu.1, "memory": mem.1}}))
    .unwrap()
}

fn action_for(p: &Pod, st: &PodStatus, actuated: &[(&str, ResourceRequirements)]) -> ResizeAction {
    let map: BTreeMap<String, ResourceRequirements> = actuated
        .iter()
        .map(|(n, r)| ((*n).to_owned(), r.clone()))
        .collect();
    compute_pod_resize_action(p, st, &|n| map.get(n).cloned())
}

#[test]
fn not_required_updates_in_place_decreases_first() {
    // a: cpu limit up; b: cpu limit down; c: memory limit up; d: unchanged.
    let p = pod(vec![
        container("a", ("100m", "500m"), ("64Mi", "128Mi"), json!(null)),
        container("b", ("100m", "200m"), ("64Mi", "128Mi"), json!(null)),
        container("c", ("100m", "300m"), ("64Mi", "256Mi"), json!(null)),
        container("d", ("100m", "300m"), ("64Mi", "128Mi"), json!(null)),
    ]);
    let before = res(("100m", "300m"), ("64Mi", "128Mi"));
    let act = action_for(
        &p,
        &running(&["a", "b", "c", "d"]),
        &[
            ("a", before.clone()),
            ("b", before.clone()),
            ("c", before.clone()),
            ("d", before),
        ],
    );
    let cpu: Vec<&str> = act.cpu.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(cpu, vec!["b", "a"], "the decrease goes first");
    let mem: Vec<&str> = act.memory.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(mem, vec!["c"]);
    assert!(act.restart.is_empty());
    assert!(act.update_pod_resources);
    assert_eq!(act.cpu[1].desired.cpu_limit_milli, 500);
    assert_eq!(act.cpu[1].current.cpu_limit_milli, 300);
    assert_eq!(act.cpu[1].container_id, "id-a");
}

#[test]
fn restart_container_policy_restarts_only_for_its_resource() {
    let policy = json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"},
                        {"resourceName": "cpu", "restartPolicy": "NotRequired"}]);
    let before = res(("100m", "300m"), ("64Mi", "128Mi"));
    // Memory limit change with RestartContainer for memory: restart.
    let p = pod(vec![container(
        "a",
        ("100m", "300m"),
        ("64Mi", "256Mi"),
        policy.clone(),
    )]);
    let act = action_for(&p, &running(&["a"]), &[("a", before.clone())]);
    assert_eq!(
        act.restart,
        vec![("id-a".to_owned(), "a".to_owned(), false, 0)]
    );
    assert!(act.memory.is_empty() && act.cpu.is_empty());
    let mut actions = PodActions::default();
    merge_restarts(&mut actions, &act);
    assert_eq!(actions.containers_to_start, vec![0]);
    assert_eq!(
        actions.containers_to_kill["id-a"].message,
        "Container a resize requires restart"
    );
    // CPU change with NotRequired for cpu: in place, no restart.
    let p = pod(vec![container(
        "a",
        ("200m", "300m"),
        ("64Mi", "128Mi"),
        policy,
    )]);
    let act = action_for(&p, &running(&["a"]), &[("a", before)]);
    assert!(act.restart.is_empty());
    assert_eq!(act.cpu.len(), 1);
    assert_eq!(act.cpu[0].desired.cpu_request_milli, 200);
}

#[test]
fn nothing_for_unrecorded_stopped_or_memory_request_only_changes() {
    let before = res(("100m", "300m"), ("64Mi", "128Mi"));
    let p = pod(vec![container(
        "a",
        ("100m", "300m"),
        ("96Mi", "128Mi"),
        json!(null),
    )]);
    // Not running: the next start uses the new resources.
    assert!(action_for(&p, &running(&[]), &[("a", before.clone())]).is_empty());
    // No actuated record: assumed to run with its allocation.
    assert!(action_for(&p, &running(&["a"]), &[]).is_empty());
    // Memory request only: recorded as actuated, no runtime call.
    let act = action_for(&p, &running(&["a"]), &[("a", before)]);
    assert_eq!(act.actuate_only, vec!["a".to_owned()]);
    assert!(act.cpu.is_empty() && act.memory.is_empty() && !act.update_pod_resources);
}

fn rc(shares: u64, quota: i64, mem: i64) -> ResourceConfig {
    ResourceConfig {
        cpu_shares: Some(shares),
        cpu_quota: Some(quota),
        cpu_period: Some(100_000),
        memory: Some(mem),
        ..Default::default()
    }
}

fn kinds(steps: &[ResizeStep]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s {
            ResizeStep::PodCgroup {
                resource, limit, ..
            } => {
                format!(
                    "pod-{resource:?}-{}",
                    if *limit { "limit" } else { "request" }
                )
            }
            ResizeStep::Containers(r) => format!("containers-{r:?}"),
        })
        .collect()
}

#[test]
fn pod_cgroup_grows_before_and_shrinks_after_its_containers() {
    let upd = ContainerUpdate {
        name: "a".into(),
        container_id: "id".into(),
        desired: ResourceValues::default(),
        current: ResourceValues::default(),
    };
    let act = ResizeAction {
        memory: vec![upd.clone()],
        cpu: vec![upd],
        update_pod_resources: true,
        ..Default::default()
    };
    // Everything grows: pod first, then containers.
    let up = resize_steps(
        &rc(102, 30_000, 128 << 20),
        &rc(204, 50_000, 256 << 20),
        &act,
    );
    assert_eq!(
        kinds(&up),
        vec![
            "pod-Memory-limit",
            "containers-Memory",
            "pod-Cpu-limit",
            "pod-Cpu-request",
            "containers-Cpu"
        ]
    );
    match &up[2] {
        ResizeStep::PodCgroup { config, .. } => {
            assert_eq!(config.cpu_quota, Some(50_000));
            assert_eq!(config.cpu_shares, None);
        }
        s => panic!("{s:?}"),
    }
    // Everything shrinks: containers first, then requests, then limits.
    let down = resize_steps(
        &rc(204, 50_000, 256 << 20),
        &rc(102, 30_000, 128 << 20),
        &act,
    );
    assert_eq!(
        kinds(&down),
        vec![
            "containers-Memory",
            "pod-Memory-limit",
            "containers-Cpu",
            "pod-Cpu-request",
            "pod-Cpu-limit"
        ]
    );
    // An unlimited new quota is an increase; an unset new memory limit keeps the current one.
    let mut unlimited = rc(102, -1, 0);
    unlimited.memory = None;
    let steps = resize_steps(&rc(102, 30_000, 128 << 20), &unlimited, &act);
    assert_eq!(
        kinds(&steps),
        vec!["containers-Memory", "pod-Cpu-limit", "containers-Cpu"]
    );
}

#[test]
fn values_follow_upstream_rounding_and_defaults() {
    let v = ResourceValues::of(Some(&res(("1", "1500m"), ("1Gi", "1.5Gi"))));
    assert_eq!(v.cpu_request_milli, 1000);
    assert_eq!(v.cpu_limit_milli, 1500);
    assert_eq!(v.memory_limit, 1_610_612_736);
    let only_limit: ResourceRequirements =
        serde_json::from_value(json!({"limits": {"cpu": "250m"}})).unwrap();
    assert_eq!(ResourceValues::of(Some(&only_limit)).cpu_request_milli, 250);
}
