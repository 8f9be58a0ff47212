use super::*;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, PodResourceClaimStatus};
use k8s_openapi::jiff::Timestamp;

fn t(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap())
}

fn cond(type_: &str, status: &str, at: i64) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(t(at)),
        ..PodCondition::default()
    }
}

fn running(name: &str, since: Time) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(since),
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

fn status(phase: &str, conditions: Vec<PodCondition>) -> PodStatus {
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        ..PodStatus::default()
    }
}

fn find<'a>(s: &'a PodStatus, type_: &str) -> Option<&'a PodCondition> {
    s.conditions.iter().flatten().find(|c| c.type_ == type_)
}

#[test]
fn conditions_not_owned_by_the_kubelet_are_kept_from_the_api() {
    let api = status(
        "Running",
        vec![
            cond("example.com/Gate", "True", 5),
            cond("Ready", "False", 1),
            cond("PodScheduled", "True", 1),
        ],
    );
    // Our copy of the foreign condition is stale; the API's wins.
    let ours = status(
        "Running",
        vec![
            cond("example.com/Gate", "False", 1),
            cond("Ready", "True", 9),
            cond("PodScheduled", "True", 1),
        ],
    );
    let m = merge_pod_status(&api, &ours, true, &t(100));
    let types: Vec<_> = m
        .conditions
        .iter()
        .flatten()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("example.com/Gate", "True"),
            ("Ready", "True"),
            ("PodScheduled", "True")
        ]
    );
}

#[test]
fn resource_claim_statuses_belong_to_the_api() {
    let mut api = status("Running", vec![]);
    api.resource_claim_statuses = Some(vec![PodResourceClaimStatus {
        name: "gpu".into(),
        ..PodResourceClaimStatus::default()
    }]);
    let ours = status("Running", vec![]);
    let m = merge_pod_status(&api, &ours, false, &t(0));
    assert_eq!(m.resource_claim_statuses, api.resource_claim_statuses);
}

#[test]
fn terminal_phase_waits_for_running_containers() {
    let api = status("Running", vec![cond("Ready", "True", 1)]);
    let mut ours = status("Failed", vec![cond("Ready", "True", 1)]);
    ours.reason = Some("DeadlineExceeded".into());
    ours.container_statuses = Some(vec![running("c", t(1))]);
    let m = merge_pod_status(&api, &ours, true, &t(50));
    assert_eq!(m.phase.as_deref(), Some("Running"));
    assert_eq!(m.reason, None);
    assert_eq!(find(&m, "Ready").unwrap().status, "True");

    // Containers gone: the terminal phase goes out and readiness is forced off.
    let m = merge_pod_status(&api, &ours, false, &t(50));
    assert_eq!(m.phase.as_deref(), Some("Failed"));
    assert_eq!(m.reason.as_deref(), Some("DeadlineExceeded"));
    for c in ["Ready", "ContainersReady"] {
        let c = find(&m, c).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some("PodFailed"))
        );
        assert_eq!(c.last_transition_time, Some(t(50)));
    }
}

#[test]
fn succeeded_pods_report_pod_completed_readiness() {
    let api = status("Running", vec![]);
    let ours = status("Succeeded", vec![cond("ContainersReady", "True", 3)]);
    let m = merge_pod_status(&api, &ours, false, &t(7));
    assert_eq!(
        find(&m, "Ready").unwrap().reason.as_deref(),
        Some("PodCompleted")
    );
    assert_eq!(find(&m, "ContainersReady").unwrap().status, "False");
}

#[test]
fn terminal_phase_in_the_api_is_never_left() {
    let api = status("Succeeded", vec![]);
    let ours = status("Running", vec![]);
    let m = merge_pod_status(&api, &ours, false, &t(0));
    assert_eq!(m.phase.as_deref(), Some("Succeeded"));
}

#[test]
fn disruption_target_goes_out_with_the_terminal_phase_only() {
    let api = status("Running", vec![]);
    let ours = status("Failed", vec![cond("DisruptionTarget", "True", 3)]);
    // Still running: neither the phase nor the condition is sent.
    let m = merge_pod_status(&api, &ours, true, &t(9));
    assert!(find(&m, "DisruptionTarget").is_none());
    let m = merge_pod_status(&api, &ours, false, &t(9));
    assert_eq!(
        find(&m, "DisruptionTarget").unwrap().last_transition_time,
        Some(t(9))
    );
    // Already terminal in the API: the API's own copy stays.
    let api = status("Failed", vec![cond("DisruptionTarget", "True", 2)]);
    let m = merge_pod_status(&api, &ours, false, &t(9));
    assert_eq!(
        find(&m, "DisruptionTarget").unwrap().last_transition_time,
        Some(t(2))
    );
}

#[test]
fn needs_update_follows_versions_and_targets() {
    assert!(needs_update(None, 1, None));
    let p = Pushed {
        version: 5,
        api_uid: "m1".into(),
    };
    assert!(!needs_update(Some(&p), 5, None));
    assert!(!needs_update(Some(&p), 4, Some("m1")));
    assert!(needs_update(Some(&p), 6, None));
    // A recreated mirror pod gets the status again.
    assert!(needs_update(Some(&p), 5, Some("m2")));
}

#[test]
fn needs_reconcile_ignores_precision_order_and_foreign_conditions() {
    let sub_second = Time(Timestamp::new(10, 500_000_000).unwrap());
    let mut ours = status("Running", vec![cond("Ready", "True", 1)]);
    ours.container_statuses = Some(vec![running("b", sub_second), running("a", t(10))]);
    let mut api = status(
        "Running",
        vec![
            cond("Ready", "True", 1),
            cond("example.com/Gate", "False", 4),
        ],
    );
    api.container_statuses = Some(vec![running("a", t(10)), running("b", t(10))]);
    assert!(!needs_reconcile(&api, &ours));
    // Empty lists and missing ones are the same to the API.
    ours.init_container_statuses = Some(vec![]);
    assert!(!needs_reconcile(&api, &ours));

    // Someone flipped a kubelet-owned condition.
    let mut changed = api.clone();
    changed.conditions = Some(vec![cond("Ready", "False", 1)]);
    assert!(needs_reconcile(&changed, &ours));
    // Or the phase.
    let mut changed = api.clone();
    changed.phase = Some("Pending".into());
    assert!(needs_reconcile(&changed, &ours));
    // A missing kubelet condition.
    let mut changed = api;
    changed.conditions = None;
    assert!(needs_reconcile(&changed, &ours));
}
