use serde_json::{Value, json};

use super::*;

/// A pod with one extra field at `at` (a JSON pointer-like list of keys/indices).
pub(crate) fn pod_with(at: &[&str], field: &str) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
        "spec": {
            "securityContext": {},
            "containers": [{
                "name": "c",
                "image": "i",
                "env": [
                    {"name": "A", "value": "a"},
                    {"name": "B", "valueFrom": {}},
                ],
                "envFrom": [{"configMapRef": {"name": "cm"}}],
                "securityContext": {},
                "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
                "livenessProbe": {"exec": {"command": ["true"]}},
                "resources": {},
            }],
            "initContainers": [{"name": "i", "image": "i"}],
            "ephemeralContainers": [{"name": "e", "image": "i"}],
            "volumes": [
                {"name": "v", "projected": {"sources": [{"configMap": {"name": "cm"}}]}},
            ],
        },
        "status": {},
    });
    let mut cur = &mut pod;
    for step in at {
        cur = match step.parse::<usize>() {
            Ok(i) => &mut cur[i],
            Err(_) => &mut cur[*step],
        };
    }
    cur[field] = json!({"x": "1"});
    pod
}

/// Every place the issue names, with the path the refusal must name.
pub(crate) const REFUSED: &[(&[&str], &str, &str)] = &[
    (
        &["spec", "volumes", "0", "projected", "sources", "0"],
        "podCertificate",
        "spec.volumes[0].projected.sources[0].podCertificate",
    ),
    (
        &["spec", "containers", "0", "env", "1", "valueFrom"],
        "fileKeyRef",
        "spec.containers[0].env[1].valueFrom.fileKeyRef",
    ),
    (
        &["spec", "containers", "0", "envFrom", "0"],
        "fileRef",
        "spec.containers[0].envFrom[0].fileRef",
    ),
    (
        &["spec", "containers", "0"],
        "restartPolicyRules",
        "spec.containers[0].restartPolicyRules",
    ),
    (&["spec"], "hostnameOverride", "spec.hostnameOverride"),
    (
        &["spec", "securityContext"],
        "newPodKnob",
        "spec.securityContext.newPodKnob",
    ),
    (
        &["spec", "containers", "0", "securityContext"],
        "newKnob",
        "spec.containers[0].securityContext.newKnob",
    ),
    (
        &["spec", "containers", "0", "lifecycle"],
        "stopSignal2",
        "spec.containers[0].lifecycle.stopSignal2",
    ),
    (
        &["spec", "containers", "0", "livenessProbe"],
        "newProbe",
        "spec.containers[0].livenessProbe.newProbe",
    ),
    (
        &["spec", "containers", "0", "resources"],
        "newResources",
        "spec.containers[0].resources.newResources",
    ),
    (
        &["spec", "initContainers", "0"],
        "newField",
        "spec.initContainers[0].newField",
    ),
    (
        &["spec", "ephemeralContainers", "0"],
        "newField",
        "spec.ephemeralContainers[0].newField",
    ),
    (
        &["spec", "volumes", "0"],
        "newVolumeType",
        "spec.volumes[0].newVolumeType",
    ),
];

fn decode(v: &Value) -> CheckedPod {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn each_listed_field_is_refused_with_its_path() {
    for (at, field, path) in REFUSED {
        let checked = decode(&pod_with(at, field));
        assert_eq!(checked.unknown.refused, [*path], "{path}");
        let msg = checked.unknown.refusal("").unwrap();
        assert!(msg.contains(path), "{msg}");
    }
}

#[test]
fn other_unknown_fields_are_only_noted() {
    for (at, field, path) in [
        (&["metadata"][..], "newMeta", "metadata.newMeta"),
        (&["status"][..], "newStatus", "status.newStatus"),
        (&["spec"][..], "workloadRef", "spec.workloadRef"),
        (&[][..], "topLevel", "topLevel"),
    ] {
        let checked = decode(&pod_with(at, field));
        assert!(checked.unknown.refused.is_empty(), "{path}");
        assert_eq!(checked.unknown.ignored, [path]);
        assert_eq!(checked.unknown.refusal(""), None);
    }
}

#[test]
fn a_known_pod_has_no_unknown_fields_and_decodes_as_pod_does() {
    let v = pod_with(&["metadata"], "labels");
    let checked = decode(&v);
    assert_eq!(checked.unknown, Unknown::default());
    let plain: Pod = serde_json::from_value(v).unwrap();
    assert_eq!(checked.pod, plain);
}

#[test]
fn ignored_paths_are_logged_once_with_indices_folded() {
    assert!(first_sighting("spec.unit_test_only[0].x"));
    assert!(!first_sighting("spec.unit_test_only[0].x"));
    assert!(!first_sighting("spec.unit_test_only[7].x"));
    assert!(first_sighting("spec.unit_test_only[7].y"));
}

#[test]
fn admission_refuses_recorded_pods_until_forgotten() {
    let fields = UnknownFields::default();
    let admit = UnknownFieldsAdmit {
        fields: fields.clone(),
    };
    let pod = fields.observe(decode(&pod_with(
        &["spec", "containers", "0", "env", "1", "valueFrom"],
        "fileKeyRef",
    )));
    let err = admit.admit(&pod, &[]).unwrap_err();
    assert_eq!(err.reason, REASON);
    assert!(
        err.message
            .contains("spec.containers[0].env[1].valueFrom.fileKeyRef"),
        "{}",
        err.message
    );
    // The same pod without the field (a later version of it) is admitted.
    let fixed = fields.observe(decode(&pod_with(&["metadata"], "labels")));
    assert!(admit.admit(&fixed, &[]).is_ok());
    fields.observe(decode(&pod_with(&["spec"], "hostnameOverride")));
    assert!(admit.admit(&pod, &[]).is_err());
    fields.forget("uid-p");
    assert!(admit.admit(&pod, &[]).is_ok());
    fields.observe(decode(&pod_with(&["spec"], "hostnameOverride")));
    fields.retain(|_| false);
    assert!(admit.admit(&pod, &[]).is_ok());
}

#[test]
fn watch_events_and_lists_decode_through_checked_pod() {
    let pod = pod_with(&["spec", "containers", "0"], "restartPolicyRules");
    let event: kube::core::WatchEvent<CheckedPod> =
        serde_json::from_value(json!({"type": "ADDED", "object": pod})).unwrap();
    let kube::core::WatchEvent::Added(checked) = event else {
        panic!("not added");
    };
    assert_eq!(
        checked.unknown.refused,
        ["spec.containers[0].restartPolicyRules"]
    );
    let list: kube::core::ObjectList<CheckedPod> = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"},
        "items": [pod],
    }))
    .unwrap();
    assert_eq!(list.items[0].unknown.refused.len(), 1);
}
