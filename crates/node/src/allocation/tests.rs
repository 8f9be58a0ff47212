//! Allocation manager tests: admission records, resize verdicts, checkpoint recovery.

use super::*;
use k8s_openapi::api::core::v1::NodeStatus;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

use crate::allocation::resize_conditions::{POD_RESIZE_IN_PROGRESS, POD_RESIZE_PENDING};

fn pod(uid: &str, cpu: &str, mem: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "ns", "uid": uid},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": cpu, "memory": mem},
                          "limits": {"cpu": cpu, "memory": mem}}}]}
    }))
    .unwrap()
}

fn node(cpu: &str, mem: &str) -> watch::Receiver<Arc<Node>> {
    let n = Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("n".into()),
            ..Default::default()
        },
        status: Some(NodeStatus {
            allocatable: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity(cpu.into())),
                ("memory".to_owned(), Quantity(mem.into())),
                ("pods".to_owned(), Quantity("110".into())),
            ])),
            ..Default::default()
        }),
        ..Default::default()
    };
    watch::channel(Arc::new(n)).1
}

use std::collections::BTreeMap;

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

fn cpu_of(p: &Pod) -> String {
    p.spec.as_ref().unwrap().containers[0]
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap()["cpu"]
        .0
        .clone()
}

fn manager(active: Vec<Pod>) -> AllocationManager {
    let m = AllocationManager::in_memory().with_node(node("2", "4Gi"));
    m.set_active_pods(Box::new(move || active.clone()));
    m
}

#[test]
fn admit_records_the_allocation_and_keeps_an_existing_one() {
    let m = manager(vec![]);
    let p = pod("a", "500m", "1Gi");
    assert!(!m.is_pod_allocated("a"));
    m.add_pod(&p);
    let got = m.allocated_resources("a", "c").unwrap();
    assert_eq!(got.requests.unwrap()["cpu"].0, "500m");
    // A later spec (e.g. seen first after a kubelet restart) does not replace the allocation.
    let again = m.add_pod(&pod("a", "900m", "1Gi"));
    assert_eq!(cpu_of(&again), "500m");
}

#[test]
fn resize_that_fits_is_allocated_and_in_progress() {
    let other = pod("b", "1", "1Gi");
    let m = manager(vec![other.clone()]);
    m.add_pod(&other);
    m.add_pod(&pod("a", "500m", "1Gi"));
    let out = m.handle_pod_resources_resize(&pod("a", "1", "1Gi"), now());
    assert_eq!(cpu_of(&out), "1");
    assert_eq!(
        m.allocated_resources("a", "c").unwrap().requests.unwrap()["cpu"].0,
        "1"
    );
    let conds = m.conditions().get("a");
    assert_eq!(conds.len(), 1);
    assert_eq!(conds[0].type_, POD_RESIZE_IN_PROGRESS);
}

#[test]
fn resize_that_does_not_fit_now_is_deferred() {
    // Node 2 cpu; the other pod holds 1; 1.5 for this one does not fit next to it.
    let other = pod("b", "1", "1Gi");
    let m = manager(vec![other.clone()]);
    m.add_pod(&other);
    m.add_pod(&pod("a", "500m", "1Gi"));
    let out = m.handle_pod_resources_resize(&pod("a", "1500m", "1Gi"), now());
    assert_eq!(cpu_of(&out), "500m", "the old allocation stays in force");
    let conds = m.conditions().get("a");
    assert_eq!(conds.len(), 1);
    assert_eq!(conds[0].type_, POD_RESIZE_PENDING);
    assert_eq!(conds[0].reason.as_deref(), Some("Deferred"));
    assert_eq!(
        conds[0].message.as_deref(),
        Some("Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000")
    );
    assert!(m.conditions().is_deferred("a"));
    // The other pod shrinks: the retry on a later sync allocates.
    let m2 = manager(vec![pod("b", "500m", "1Gi")]);
    m2.add_pod(&pod("a", "500m", "1Gi"));
    let out = m2.handle_pod_resources_resize(&pod("a", "1500m", "1Gi"), now());
    assert_eq!(cpu_of(&out), "1500m");
    assert!(!m2.conditions().is_deferred("a"));
}

#[test]
fn resize_bigger_than_the_node_is_infeasible() {
    let m = manager(vec![]);
    m.add_pod(&pod("a", "500m", "1Gi"));
    m.handle_pod_resources_resize(&pod("a", "5", "1Gi"), now());
    let c = &m.conditions().get("a")[0];
    assert_eq!(c.reason.as_deref(), Some("Infeasible"));
    assert_eq!(
        c.message.as_deref(),
        Some("Node didn't have enough capacity: cpu, requested: 5000, capacity: 2000")
    );
    // Memory is reported first when both are too big, as upstream.
    m.handle_pod_resources_resize(&pod("a", "5", "8Gi"), now());
    assert_eq!(
        m.conditions().get("a")[0].message.as_deref(),
        Some(
            "Node didn't have enough capacity: memory, requested: 8589934592, capacity: 4294967296"
        )
    );
    // Reverting the request clears the pending condition.
    m.handle_pod_resources_resize(&pod("a", "500m", "1Gi"), now());
    assert!(m.conditions().get("a").is_empty());
}

#[test]
fn static_pods_are_never_resized() {
    let mut p = pod("a", "500m", "1Gi");
    p.metadata.annotations = Some(BTreeMap::from([(
        crate::types::CONFIG_SOURCE_ANNOTATION.to_owned(),
        "file".to_owned(),
    )]));
    assert_eq!(
        can_resize_pod(&p, None, &[]),
        ResizeVerdict::Infeasible("In-place resize of static-pods is not supported".into())
    );
}

#[test]
fn equal_quantities_in_other_units_are_no_resize() {
    let m = manager(vec![]);
    m.add_pod(&pod("a", "1", "1Gi"));
    let (_, differs) = m.update_pod_from_allocation(&pod("a", "1000m", "1024Mi"));
    assert!(!differs);
}

#[test]
fn in_progress_until_actuated() {
    let m = manager(vec![]);
    let p = pod("a", "500m", "1Gi");
    m.add_pod(&p);
    let c = &p.spec.as_ref().unwrap().containers[0];
    m.set_actuated_resources("a", c).unwrap();
    assert!(!m.is_pod_resize_in_progress(&p, ["c"]));
    let bigger = m.handle_pod_resources_resize(&pod("a", "1", "1Gi"), now());
    assert!(m.is_pod_resize_in_progress(&bigger, ["c"]));
    // Not running: nothing to actuate.
    assert!(!m.is_pod_resize_in_progress(&bigger, []));
    m.set_actuated_resources("a", &bigger.spec.as_ref().unwrap().containers[0])
        .unwrap();
    assert!(!m.is_pod_resize_in_progress(&bigger, ["c"]));
}

#[test]
fn checkpoint_survives_a_restart_and_corruption_stops_the_start() {
    let d = tempfile::tempdir().unwrap();
    let p = pod("a", "500m", "1Gi");
    {
        let m = AllocationManager::new(d.path()).unwrap();
        m.add_pod(&p);
        m.set_actuated_resources("a", &p.spec.as_ref().unwrap().containers[0])
            .unwrap();
    }
    let m = AllocationManager::new(d.path()).unwrap();
    assert_eq!(
        m.allocated_resources("a", "c").unwrap().requests.unwrap()["cpu"].0,
        "500m"
    );
    assert!(m.actuated_resources("a", "c").is_some());
    m.remove_pod("a");
    assert!(
        AllocationManager::new(d.path())
            .unwrap()
            .allocated_resources("a", "c")
            .is_none()
    );

    // A truncated, garbage or empty file of either checkpoint stops the start with upstream's
    // advice naming the file (never a panic, never a silent reset); once the operator has
    // deleted it, the manager starts empty and the next admission rewrites a valid one.
    m.add_pod(&p);
    m.set_actuated_resources("a", &p.spec.as_ref().unwrap().containers[0])
        .unwrap();
    for name in [ALLOCATED_FILE, ACTUATED_FILE] {
        let path = d.path().join(name);
        let full = std::fs::read(&path).unwrap();
        for damaged in [&full[..full.len() - 7], b"\x00\xffgarbage".as_slice(), b""] {
            std::fs::write(&path, damaged).unwrap();
            let e = AllocationManager::new(d.path()).err().unwrap().to_string();
            assert!(
                e.starts_with("could not restore state from checkpoint: ")
                    && e.ends_with(&format!(
                        "please drain this node and delete pod resource information checkpoint file {path:?} before restarting Kubelet"
                    )),
                "{e}"
            );
        }
        std::fs::remove_file(&path).unwrap();
    }
    let m = AllocationManager::new(d.path()).unwrap();
    assert!(m.allocated_resources("a", "c").is_none());
    m.add_pod(&p);
    assert!(Checkpoint::new(d.path(), ALLOCATED_FILE).load().is_ok());
    assert!(
        AllocationManager::new(d.path())
            .unwrap()
            .allocated_resources("a", "c")
            .is_some()
    );
}

#[test]
fn orphans_are_forgotten() {
    let m = manager(vec![]);
    m.add_pod(&pod("a", "1", "1Gi"));
    m.add_pod(&pod("b", "1", "1Gi"));
    m.remove_orphaned_pods(&HashSet::from(["b".to_owned()]));
    assert!(!m.is_pod_allocated("a"));
    assert!(m.is_pod_allocated("b"));
}

#[test]
fn static_cpu_manager_blocks_guaranteed_cpu_resizes_only() {
    let m = manager(vec![]).with_static_cpu_manager(true);
    m.add_pod(&pod("a", "1", "1Gi"));
    m.handle_pod_resources_resize(&pod("a", "2", "1Gi"), now());
    let c = &m.conditions().get("a")[0];
    assert_eq!(c.reason.as_deref(), Some("Infeasible"));
    assert_eq!(
        c.message.as_deref(),
        Some("Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\"")
    );
    // Memory of the same Guaranteed pod may change.
    let out = m.handle_pod_resources_resize(&pod("a", "1", "2Gi"), now());
    assert!(
        m.conditions()
            .get("a")
            .iter()
            .all(|c| c.type_ != POD_RESIZE_PENDING)
    );
    assert_eq!(
        out.spec.unwrap().containers[0]
            .resources
            .as_ref()
            .unwrap()
            .limits
            .as_ref()
            .unwrap()["memory"]
            .0,
        "2Gi"
    );
}
