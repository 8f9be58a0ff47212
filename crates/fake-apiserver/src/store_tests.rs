//! Unit tests of the store: resourceVersions, conflicts, preconditions, paging, history/410,
//! status rules and deletion.

use super::*;
use crate::resources::find;

fn res(plural: &str) -> &'static ResourceInfo {
    crate::resources::RESOURCES
        .iter()
        .find(|r| r.plural == plural)
        .expect("resource")
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .parse()
        .expect("number")
}

fn pod(name: &str, node: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"app": name}},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1"}]}})
}

#[test]
fn create_sets_metadata_and_rejects_duplicates() {
    let s = Store::new(100);
    let cm = s
        .create(
            res("configmaps"),
            "default",
            json!({"metadata": {"name": "a"}}),
        )
        .expect("create");
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["namespace"], "default");
    assert_eq!(cm["metadata"]["generation"], 1);
    assert!(
        cm["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| u.len() == 36)
    );
    assert_eq!(rv_of(&cm), s.resource_version());
    let dup = s.create(
        res("configmaps"),
        "default",
        json!({"metadata": {"name": "a"}}),
    );
    assert_eq!(
        dup.map_err(|e| (e.code, e.reason)),
        Err((409, "AlreadyExists"))
    );
    let no_ns = s.create(
        res("configmaps"),
        "missing",
        json!({"metadata": {"name": "a"}}),
    );
    assert_eq!(no_ns.map_err(|e| e.code), Err(404));
    let generated = s
        .create(
            res("configmaps"),
            "default",
            json!({"metadata": {"generateName": "x-"}}),
        )
        .expect("generateName");
    assert!(
        generated["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("x-") && n.len() == 7)
    );
    let invalid = s.create(
        res("configmaps"),
        "default",
        json!({"metadata": {"name": "Bad_Name"}}),
    );
    assert_eq!(invalid.map_err(|e| e.code), Err(422));
}

#[test]
fn update_enforces_resource_version_and_uid() {
    let s = Store::new(100);
    let lease = res("leases");
    let created = s
        .create(
            lease,
            "kube-node-lease",
            json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}}),
        )
        .expect("create");
    let mut next = created.clone();
    next["spec"]["renewTime"] = json!("2024-01-01T00:00:00.000000Z");
    let updated = s
        .update(lease, "kube-node-lease", "n1", next.clone(), false)
        .expect("update");
    assert!(rv_of(&updated) > rv_of(&created));
    // Same stale rv again: conflict.
    let stale = s.update(lease, "kube-node-lease", "n1", next, false);
    assert_eq!(
        stale.map_err(|e| (e.code, e.reason)),
        Err((409, "Conflict"))
    );
    // No-op update keeps the rv.
    let same = s
        .update(lease, "kube-node-lease", "n1", updated.clone(), false)
        .expect("noop");
    assert_eq!(rv_of(&same), rv_of(&updated));
    // uid precondition inside a patch body.
    let bad_uid = s.patch(
        lease,
        "kube-node-lease",
        "n1",
        PatchType::Strategic,
        &json!({"metadata": {"uid": "other"}, "spec": {"holderIdentity": "x"}}),
        false,
    );
    assert_eq!(bad_uid.map_err(|e| e.code), Err(409));
    let uid = created["metadata"]["uid"].clone();
    let good = s
        .patch(
            lease,
            "kube-node-lease",
            "n1",
            PatchType::Strategic,
            &json!({"metadata": {"uid": uid}, "spec": {"holderIdentity": "x"}}),
            false,
        )
        .expect("patch");
    assert_eq!(good["spec"]["holderIdentity"], "x");
    let missing = s.update(
        lease,
        "kube-node-lease",
        "nope",
        json!({"metadata": {}}),
        false,
    );
    assert_eq!(missing.map_err(|e| e.code), Err(404));
}

#[test]
fn status_subresource_rules_for_pods() {
    let s = Store::new(100);
    let pods = res("pods");
    s.create(pods, "default", pod("p", "n1")).expect("create");
    let patched = s
        .patch(
            pods,
            "default",
            "p",
            PatchType::Strategic,
            &json!({
        "spec": {"containers": [{"name": "c", "image": "changed:2"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
            true,
        )
        .expect("status patch");
    assert_eq!(patched["status"]["phase"], "Running");
    assert_eq!(patched["spec"]["containers"][0]["image"], "busybox:1");
    assert_eq!(patched["metadata"]["generation"], 1);
    let main = s
        .patch(
            pods,
            "default",
            "p",
            PatchType::Merge,
            &json!({"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "y"}}}),
            false,
        )
        .expect("main patch");
    assert_eq!(main["status"]["phase"], "Running");
    assert_eq!(main["metadata"]["labels"]["x"], "y");
}

#[test]
fn list_selectors_and_paging() {
    let s = Store::new(100);
    let pods = res("pods");
    for (name, node) in [("a", "n1"), ("b", "n2"), ("c", "n1"), ("d", "n1")] {
        s.create(pods, "default", pod(name, node)).expect("create");
    }
    let opts = ListOpts {
        fields: FieldSelector::parse("spec.nodeName=n1", "Pod").expect("fs"),
        limit: 2,
        ..ListOpts::default()
    };
    let page1 = s.list(pods, Some("default"), &opts).expect("page1");
    assert_eq!(page1["kind"], "PodList");
    let names = |l: &Value| -> Vec<String> {
        l["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["metadata"]["name"].as_str().expect("name").to_string())
            .collect()
    };
    assert_eq!(names(&page1), ["a", "c"]);
    assert_eq!(page1["metadata"]["remainingItemCount"], 1);
    let token = page1["metadata"]["continue"]
        .as_str()
        .expect("continue")
        .to_string();
    let page2 = s
        .list(
            pods,
            Some("default"),
            &ListOpts {
                continue_token: Some(token.clone()),
                ..opts.clone()
            },
        )
        .expect("page2");
    assert_eq!(names(&page2), ["d"]);
    assert!(page2["metadata"]["continue"].is_null());
    assert_eq!(
        page2["metadata"]["resourceVersion"],
        page1["metadata"]["resourceVersion"]
    );
    let labels = ListOpts {
        labels: LabelSelector::parse("app in (b,d)").expect("ls"),
        ..ListOpts::default()
    };
    assert_eq!(
        names(&s.list(pods, None, &labels).expect("list")),
        ["b", "d"]
    );
    s.create(pods, "default", pod("e", "n1")).expect("create");
    s.compact();
    let expired = s.list(
        pods,
        Some("default"),
        &ListOpts {
            continue_token: Some(token),
            ..opts
        },
    );
    assert_eq!(expired.map_err(|e| e.code), Err(410));
}

#[test]
fn watch_history_and_gone() {
    let s = Store::new(3);
    let cms = res("configmaps");
    let start = s.resource_version();
    for n in ["a", "b"] {
        s.create(cms, "default", json!({"metadata": {"name": n}}))
            .expect("create");
    }
    let (backlog, now, _rx) = s.watch(cms, None, Some(start)).expect("watch");
    assert_eq!(now, s.resource_version());
    let kinds: Vec<_> = backlog
        .iter()
        .map(|e| (e.kind, e.object["metadata"]["name"].clone()))
        .collect();
    assert_eq!(kinds, [("ADDED", json!("a")), ("ADDED", json!("b"))]);
    // Push the start out of the 3-event history.
    for n in ["c", "d", "e"] {
        s.create(cms, "default", json!({"metadata": {"name": n}}))
            .expect("create");
    }
    let gone = s.watch(cms, None, Some(start));
    assert_eq!(
        gone.map(|_| ()).map_err(|e| (e.code, e.reason)),
        Err((410, "Expired"))
    );
    let future = s.resource_version() + 5;
    let too_large = s.watch(cms, None, Some(future));
    assert_eq!(too_large.map(|_| ()).map_err(|e| e.code), Err(504));
    let (snapshot, _, _) = s.watch(cms, Some("default"), None).expect("from now");
    assert_eq!(snapshot.len(), 5);
    assert!(snapshot.iter().all(|e| e.kind == "ADDED"));
}

#[test]
fn graceful_pod_deletion_and_preconditions() {
    let s = Store::new(100);
    let pods = res("pods");
    let p = s.create(pods, "default", pod("p", "n1")).expect("create");
    let wrong = s.delete(
        pods,
        "default",
        "p",
        &DeleteOpts {
            uid: Some("nope".into()),
            ..DeleteOpts::default()
        },
    );
    assert_eq!(wrong.map(|_| ()).map_err(|e| e.code), Err(409));
    let (obj, removed) = s
        .delete(
            pods,
            "default",
            "p",
            &DeleteOpts {
                grace_period_seconds: Some(20),
                ..DeleteOpts::default()
            },
        )
        .expect("graceful");
    assert!(!removed);
    assert_eq!(obj["metadata"]["deletionGracePeriodSeconds"], 20);
    assert!(obj["metadata"]["deletionTimestamp"].is_string());
    // A longer grace period does not extend it.
    let (again, _) = s
        .delete(
            pods,
            "default",
            "p",
            &DeleteOpts {
                grace_period_seconds: Some(60),
                ..DeleteOpts::default()
            },
        )
        .expect("again");
    assert_eq!(again["metadata"]["deletionGracePeriodSeconds"], 20);
    let uid = p["metadata"]["uid"].as_str().map(str::to_string);
    let (_, removed) = s
        .delete(
            pods,
            "default",
            "p",
            &DeleteOpts {
                grace_period_seconds: Some(0),
                uid,
                ..DeleteOpts::default()
            },
        )
        .expect("final");
    assert!(removed);
    assert_eq!(s.get(pods, "default", "p").map_err(|e| e.code), Err(404));
    // Terminal pods go immediately.
    s.create(pods, "default", pod("done", "n1"))
        .expect("create");
    s.patch(
        pods,
        "default",
        "done",
        PatchType::Merge,
        &json!({"status": {"phase": "Succeeded"}}),
        true,
    )
    .expect("status");
    let (_, removed) = s
        .delete(pods, "default", "done", &DeleteOpts::default())
        .expect("delete");
    assert!(removed);
}

#[test]
fn finalizers_hold_deletion_until_removed() {
    let s = Store::new(100);
    let cms = find("", "v1", "configmaps").expect("configmaps");
    s.create(
        cms,
        "default",
        json!({"metadata": {"name": "f", "finalizers": ["x/y"]}}),
    )
    .expect("create");
    let (obj, removed) = s
        .delete(cms, "default", "f", &DeleteOpts::default())
        .expect("delete");
    assert!(!removed);
    assert!(obj["metadata"]["deletionTimestamp"].is_string());
    s.patch(
        cms,
        "default",
        "f",
        PatchType::Merge,
        &json!({"metadata": {"finalizers": null}}),
        false,
    )
    .expect("clear finalizers");
    assert_eq!(s.get(cms, "default", "f").map_err(|e| e.code), Err(404));
}
