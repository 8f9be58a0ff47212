//! Patch generation checked two ways: exact bodies for the shapes the kubelet relies on, and
//! differentially: the generated patch, applied by the real upstream merge code
//! (`kubectl patch --local --type strategic`), must turn the old object into the new one.

use std::process::Command;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, Node, NodeAddress, NodeCondition,
    NodeStatus, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};

use super::*;

fn kubectl_apply(obj: &Value, patch: &Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("obj.json");
    std::fs::write(&f, obj.to_string()).unwrap();
    let out = Command::new("kubectl")
        .env("KUBECONFIG", "/dev/null")
        .args([
            "patch",
            "--local",
            "-o",
            "json",
            "--type",
            "strategic",
            "-f",
        ])
        .arg(&f)
        .arg("-p")
        .arg(patch.to_string())
        .output()
        .expect("kubectl must be installed (/usr/bin/kubectl) for the patch differential tests");
    assert!(
        out.status.success(),
        "kubectl patch failed: {}\npatch: {patch}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn pod_obj(status: &PodStatus) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": serde_json::to_value(status).unwrap(),
    })
}

/// Applies our pod status patch with kubectl and checks the result carries `new`.
fn check_pod(old: &PodStatus, new: &PodStatus) -> Value {
    let patch = pod_status_patch("u1", old, new).unwrap();
    assert_eq!(
        patch.pointer("/metadata/uid"),
        Some(&json!("u1")),
        "{patch}"
    );
    let got = kubectl_apply(&pod_obj(old), &patch);
    assert_eq!(
        got["status"],
        serde_json::to_value(new).unwrap(),
        "patch {patch}"
    );
    patch
}

fn cond(t: &str, s: &str) -> PodCondition {
    PodCondition {
        type_: t.into(),
        status: s.into(),
        ..Default::default()
    }
}

fn running(name: &str, ready: bool) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: "busybox".into(),
        image_id: "sha256:1".into(),
        ready,
        restart_count: 0,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn base() -> PodStatus {
    PodStatus {
        phase: Some("Pending".into()),
        conditions: Some(vec![cond("PodScheduled", "True")]),
        qos_class: Some("BestEffort".into()),
        ..Default::default()
    }
}

#[test]
fn unchanged_status_is_only_the_uid_precondition() {
    let p = pod_status_patch("u1", &base(), &base()).unwrap();
    assert_eq!(p, json!({"metadata": {"uid": "u1"}}));
}

#[test]
fn pending_to_running_with_conditions_ips_and_containers() {
    let mut new = base();
    new.phase = Some("Running".into());
    new.conditions = Some(vec![
        cond("PodReadyToStartContainers", "True"),
        cond("Initialized", "True"),
        cond("Ready", "True"),
        cond("ContainersReady", "True"),
        cond("PodScheduled", "True"),
    ]);
    new.pod_ip = Some("10.0.0.5".into());
    new.pod_ips = Some(vec![PodIP {
        ip: "10.0.0.5".into(),
    }]);
    new.container_statuses = Some(vec![running("c", true)]);
    let patch = check_pod(&base(), &new);
    // Unchanged PodScheduled is only named in the order, not repeated.
    let order = patch["status"]["$setElementOrder/conditions"]
        .as_array()
        .unwrap();
    assert_eq!(order.len(), 5);
    let conds = patch["status"]["conditions"].as_array().unwrap();
    assert_eq!(conds.len(), 4, "{patch}");
}

#[test]
fn condition_change_carries_only_changed_fields_plus_key() {
    let mut old = base();
    old.conditions = Some(vec![cond("Ready", "False"), cond("PodScheduled", "True")]);
    let mut new = old.clone();
    new.conditions = Some(vec![cond("Ready", "True"), cond("PodScheduled", "True")]);
    let patch = check_pod(&old, &new);
    assert_eq!(
        patch["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}])
    );
}

#[test]
fn removed_fields_become_null_and_removed_conditions_are_deleted() {
    let mut old = base();
    old.message = Some("m".into());
    old.reason = Some("r".into());
    old.pod_ip = Some("10.0.0.5".into());
    old.pod_ips = Some(vec![PodIP {
        ip: "10.0.0.5".into(),
    }]);
    old.conditions = Some(vec![cond("Ready", "False"), cond("PodScheduled", "True")]);
    let mut new = base();
    new.conditions = Some(vec![cond("PodScheduled", "True")]);
    let patch = check_pod(&old, &new);
    assert_eq!(patch["status"]["message"], Value::Null);
    assert!(
        patch["status"]["conditions"]
            .as_array()
            .unwrap()
            .contains(&json!({"type": "Ready", "$patch": "delete"}))
    );
}

#[test]
fn container_statuses_are_replaced_whole() {
    let mut old = base();
    old.container_statuses = Some(vec![running("a", true), running("b", true)]);
    let mut new = old.clone();
    new.container_statuses = Some(vec![running("a", false), running("b", true)]);
    let patch = check_pod(&old, &new);
    assert_eq!(
        patch["status"]["containerStatuses"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn dual_stack_pod_ips_and_reordering() {
    let mut old = base();
    old.pod_ips = Some(vec![PodIP {
        ip: "10.0.0.5".into(),
    }]);
    let mut new = old.clone();
    new.pod_ips = Some(vec![
        PodIP {
            ip: "fd00::5".into(),
        },
        PodIP {
            ip: "10.0.0.5".into(),
        },
    ]);
    check_pod(&old, &new);
    let mut reordered = base();
    reordered.conditions = Some(vec![cond("A", "True"), cond("B", "True")]);
    let mut swapped = reordered.clone();
    swapped.conditions = Some(vec![cond("B", "True"), cond("A", "True")]);
    check_pod(&reordered, &swapped);
}

fn node(status: NodeStatus) -> Node {
    Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("n1".into()),
            uid: Some("nu".into()),
            ..Default::default()
        },
        status: Some(status),
        ..Default::default()
    }
}

fn ncond(t: &str, s: &str, heartbeat: &str) -> NodeCondition {
    NodeCondition {
        type_: t.into(),
        status: s.into(),
        reason: Some(format!("{t}{s}")),
        last_heartbeat_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            heartbeat.parse().unwrap(),
        )),
        ..Default::default()
    }
}

fn addr(t: &str, a: &str) -> NodeAddress {
    NodeAddress {
        type_: t.into(),
        address: a.into(),
    }
}

fn check_node(old: &Node, new: &Node) -> Value {
    let patch = node_status_patch(old, new).unwrap();
    let mut old_obj = serde_json::to_value(old).unwrap();
    old_obj["apiVersion"] = json!("v1");
    old_obj["kind"] = json!("Node");
    let got = kubectl_apply(&old_obj, &patch);
    assert_eq!(
        got["status"],
        serde_json::to_value(&new.status).unwrap(),
        "patch {patch}"
    );
    assert_eq!(
        got["metadata"]["labels"],
        serde_json::to_value(&new.metadata.labels).unwrap_or(Value::Null),
        "patch {patch}"
    );
    patch
}

#[test]
fn node_heartbeat_only_touches_heartbeat_times() {
    let t0 = "2026-01-01T00:00:00Z";
    let t1 = "2026-01-01T00:00:10Z";
    let old = node(NodeStatus {
        conditions: Some(vec![
            ncond("MemoryPressure", "False", t0),
            ncond("Ready", "True", t0),
        ]),
        addresses: Some(vec![addr("InternalIP", "10.0.0.1"), addr("Hostname", "n1")]),
        ..Default::default()
    });
    let mut new = old.clone();
    new.status.as_mut().unwrap().conditions = Some(vec![
        ncond("MemoryPressure", "False", t1),
        ncond("Ready", "True", t1),
    ]);
    let patch = check_node(&old, &new);
    assert_eq!(
        patch,
        json!({"status": {
            "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
            "conditions": [
                {"type": "MemoryPressure", "lastHeartbeatTime": t1},
                {"type": "Ready", "lastHeartbeatTime": t1},
            ],
        }})
    );
}

#[test]
fn node_addresses_are_replaced_and_labels_ride_along() {
    let old = node(NodeStatus {
        addresses: Some(vec![
            addr("InternalIP", "10.0.0.1"),
            addr("InternalIP", "10.0.0.2"),
            addr("Hostname", "n1"),
        ]),
        ..Default::default()
    });
    let mut new = old.clone();
    new.status.as_mut().unwrap().addresses =
        Some(vec![addr("InternalIP", "10.0.0.3"), addr("Hostname", "n1")]);
    new.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
    let patch = check_node(&old, &new);
    let list = patch["status"]["addresses"].as_array().unwrap();
    assert_eq!(list.last(), Some(&json!({"$patch": "replace"})));
}

#[test]
fn node_capacity_images_and_node_info() {
    let old = node(NodeStatus {
        capacity: Some([("cpu".to_owned(), Quantity("2".into()))].into()),
        images: Some(vec![k8s_openapi::api::core::v1::ContainerImage {
            names: Some(vec!["busybox:latest".into()]),
            size_bytes: Some(1000),
        }]),
        ..Default::default()
    });
    let mut new = old.clone();
    let st = new.status.as_mut().unwrap();
    st.capacity = Some(
        [
            ("cpu".to_owned(), Quantity("2".into())),
            ("memory".to_owned(), Quantity("1Gi".into())),
        ]
        .into(),
    );
    st.images = Some(vec![]);
    st.node_info = Some(k8s_openapi::api::core::v1::NodeSystemInfo {
        kubelet_version: "v1.33.0".into(),
        ..Default::default()
    });
    check_node(&old, &new);
}
