//! The `pods/ephemeralcontainers` subresource (upstream `EphemeralContainersREST` with
//! `podEphemeralContainersStrategy`): owns its update rule (only `spec.ephemeralContainers`
//! of the written pod is kept, everything else comes from the stored pod), the defaulting of
//! ephemeral containers and their validation (`validateEphemeralContainers`,
//! `ValidatePodEphemeralContainersUpdate`, and the create-time ban). Receives the stored and
//! the written pod as JSON; emits the pod to store or a 422 `Invalid` error whose causes name
//! each field as the real API server does.

use crate::error::ApiError;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Upstream's message for any field an ephemeral container may not set.
const NOT_FOR_EPHEMERAL: &str = "cannot be set for an Ephemeral Container";

/// Fields of `EphemeralContainerCommon` the allow list refuses, in the struct's field order
/// (upstream `allowedEphemeralContainerFields`).
const FORBIDDEN_FIELDS: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

/// The annotation that marks a mirror pod (a static pod's API copy).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// One field error (upstream `field.Error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `metav1.CauseType`, e.g. `FieldValueDuplicate`.
    pub reason: &'static str,
    /// The field path, e.g. `spec.ephemeralContainers[0].name`.
    pub field: String,
    /// The error body, e.g. `Duplicate value: "debug"`.
    pub body: String,
}

impl FieldError {
    fn forbidden(field: String, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field,
            body: format!("Forbidden: {detail}"),
        }
    }
    fn required(field: String) -> Self {
        Self {
            reason: "FieldValueRequired",
            field,
            body: "Required value".to_owned(),
        }
    }
    fn duplicate(field: String, value: &str) -> Self {
        Self {
            reason: "FieldValueDuplicate",
            field,
            body: format!("Duplicate value: {value:?}"),
        }
    }
    fn not_found(field: String, value: &str) -> Self {
        Self {
            reason: "FieldValueNotFound",
            field,
            body: format!("Not found: {value:?}"),
        }
    }
    fn invalid(field: String, value: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field,
            body: format!("Invalid value: {value:?}: {detail}"),
        }
    }
}

/// The 422 for `errs` (none: `Ok`).
fn to_result(name: &str, errs: Vec<FieldError>) -> Result<(), ApiError> {
    if errs.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid_causes(
        "Pod",
        name,
        errs.into_iter()
            .map(|e| (e.reason, e.body, e.field))
            .collect(),
    ))
}

/// Upstream `ValidatePodCreate`: a pod cannot be created with ephemeral containers.
pub fn validate_create(pod: &Value) -> Result<(), ApiError> {
    let set = pod["spec"]["ephemeralContainers"]
        .as_array()
        .is_some_and(|l| !l.is_empty());
    if !set {
        return Ok(());
    }
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    to_result(
        name,
        vec![FieldError::forbidden(
            "spec.ephemeralContainers".to_owned(),
            "cannot be set on create",
        )],
    )
}

/// Upstream `SetDefaults_EphemeralContainer` (the container defaults).
fn default_containers(list: &mut Value) {
    for c in list.as_array_mut().into_iter().flatten() {
        let Some(m) = c.as_object_mut() else { continue };
        let image = m
            .get("image")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        m.entry("imagePullPolicy")
            .or_insert_with(|| json!(crate::strategy::image_pull_policy(&image)));
        m.entry("terminationMessagePath")
            .or_insert_with(|| json!("/dev/termination-log"));
        m.entry("terminationMessagePolicy")
            .or_insert_with(|| json!("File"));
        m.entry("resources").or_insert_with(|| json!({}));
    }
}

/// Upstream `dropNonEphemeralContainerUpdates` + validation: the stored pod with the written
/// pod's (defaulted) `spec.ephemeralContainers`; everything else written is ignored.
pub fn prepare_update(old: &Value, written: &Value) -> Result<Value, ApiError> {
    let name = old["metadata"]["name"].as_str().unwrap_or_default();
    let mut list = match &written["spec"]["ephemeralContainers"] {
        Value::Null => json!([]),
        Value::Array(_) => written["spec"]["ephemeralContainers"].clone(),
        _ => {
            return Err(ApiError::bad_request(
                "spec.ephemeralContainers: expected a list of ephemeral containers",
            ));
        }
    };
    default_containers(&mut list);
    let mut new = old.clone();
    if list.as_array().is_some_and(Vec::is_empty) {
        if let Some(spec) = new["spec"].as_object_mut() {
            spec.remove("ephemeralContainers");
        }
    } else {
        new["spec"]["ephemeralContainers"] = list;
    }
    validate_update(name, &new, old)?;
    Ok(new)
}

/// Upstream `ValidatePodEphemeralContainersUpdate`.
pub fn validate_update(name: &str, new: &Value, old: &Value) -> Result<(), ApiError> {
    if old["metadata"]["annotations"][MIRROR_ANNOTATION].is_string() {
        return to_result(
            name,
            vec![FieldError::forbidden(
                String::new(),
                "static pods do not support ephemeral containers",
            )],
        );
    }
    let mut errs = validate_ephemeral_containers(&new["spec"]);
    let path = "spec.ephemeralContainers";
    let new_list: Vec<&Value> = new["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    for o in old["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let oname = o["name"].as_str().unwrap_or_default();
        match new_list.iter().find(|n| n["name"] == o["name"]) {
            None => errs.push(FieldError::forbidden(
                path.to_owned(),
                &format!("existing ephemeral containers {oname:?} may not be removed\n"),
            )),
            Some(n) if *n != o => errs.push(FieldError::forbidden(
                path.to_owned(),
                &format!(
                    "existing ephemeral containers {oname:?} may not be changed\n  - {o}\n  + {n}"
                ),
            )),
            Some(_) => {}
        }
    }
    to_result(name, errs)
}

/// Upstream `IsDNS1123Label` message, or `None` when `v` is one.
fn dns1123_label_problem(v: &str) -> Option<String> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && v.starts_with(|c: char| c.is_ascii_alphanumeric())
        && v.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        return None;
    }
    if v.len() > 63 {
        return Some("must be no more than 63 characters".to_owned());
    }
    Some("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_owned())
}

/// Whether a JSON value is Go's zero value for its field (absent, null, `""`, `[]`, `{}`).
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
    }
}

/// Upstream `validateEphemeralContainers` for the spec's list.
pub fn validate_ephemeral_containers(spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let names = |list: &str| -> Vec<String> {
        spec[list]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    };
    let others: BTreeSet<String> = names("containers")
        .into_iter()
        .chain(names("initContainers"))
        .collect();
    let mut all = others.clone();
    let volumes: BTreeSet<&str> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for (i, ec) in spec["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = |f: &str| format!("spec.ephemeralContainers[{i}].{f}");
        if !ec.is_object() {
            errs.push(FieldError::invalid(
                format!("spec.ephemeralContainers[{i}]"),
                &ec.to_string(),
                "must be an object",
            ));
            continue;
        }
        let name = ec["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(at("name")));
        } else if let Some(problem) = dns1123_label_problem(name) {
            errs.push(FieldError::invalid(at("name"), name, &problem));
        }
        if ec["image"].as_str().is_none_or(|s| s.trim().is_empty()) {
            errs.push(FieldError::required(at("image")));
        }
        for (j, m) in ec["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let vname = m["name"].as_str().unwrap_or_default();
            if !volumes.contains(vname) {
                errs.push(FieldError::not_found(
                    at(&format!("volumeMounts[{j}].name")),
                    vname,
                ));
            }
        }
        if !name.is_empty() && !all.insert(name.to_owned()) {
            errs.push(FieldError::duplicate(at("name"), name));
        }
        if let Some(target) = ec["targetContainerName"].as_str().filter(|t| !t.is_empty())
            && !others.contains(target)
        {
            errs.push(FieldError::not_found(at("targetContainerName"), target));
        }
        for f in FORBIDDEN_FIELDS {
            if !is_zero(&ec[*f]) {
                errs.push(FieldError::forbidden(at(f), NOT_FOR_EPHEMERAL));
            }
        }
        for (j, m) in ec["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            for f in ["subPath", "subPathExpr"] {
                if !is_zero(&m[f]) {
                    errs.push(FieldError::forbidden(
                        at(&format!("volumeMounts[{j}].{f}")),
                        NOT_FOR_EPHEMERAL,
                    ));
                }
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "namespace": "default", "uid": "u1",
                "resourceVersion": "7"},
            "spec": {"containers": [{"name": "app", "image": "busybox"}],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "volumes": [{"name": "data", "emptyDir": {}}]},
            "status": {"phase": "Running"}})
    }

    fn with(list: Value) -> Value {
        let mut p = pod();
        p["spec"]["ephemeralContainers"] = list;
        p
    }

    fn causes(e: &ApiError) -> Vec<(String, String)> {
        e.causes
            .iter()
            .map(|(_, msg, field)| (field.clone(), msg.clone()))
            .collect()
    }

    #[test]
    fn only_ephemeral_containers_change_and_they_are_defaulted() {
        let old = pod();
        let mut written = with(json!([{"name": "debug", "image": "busybox:1.36",
            "targetContainerName": "app", "stdin": true, "tty": true}]));
        // Everything else in the written pod is ignored.
        written["spec"]["containers"][0]["image"] = json!("nginx");
        written["metadata"]["labels"] = json!({"x": "y"});
        written["status"]["phase"] = json!("Failed");
        let got = prepare_update(&old, &written).expect("valid");
        assert_eq!(got["spec"]["containers"], old["spec"]["containers"]);
        assert_eq!(got["metadata"], old["metadata"]);
        assert_eq!(got["status"], old["status"]);
        assert_eq!(
            got["spec"]["ephemeralContainers"],
            json!([{"name": "debug", "image": "busybox:1.36", "targetContainerName": "app",
                "stdin": true, "tty": true, "imagePullPolicy": "IfNotPresent",
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File", "resources": {}}])
        );
        // Writing the same list again (undefaulted) changes nothing.
        let again = prepare_update(&got, &written).expect("unchanged");
        assert_eq!(again, got);
    }

    #[test]
    fn invalid_ephemeral_containers_name_each_field() {
        let old = pod();
        let bad = with(json!([
            {"name": "app", "image": "busybox"},
            {"name": "debug", "image": "busybox", "targetContainerName": "nope",
             "ports": [{"containerPort": 80}], "resources": {"limits": {"cpu": "1"}},
             "livenessProbe": {"exec": {"command": ["true"]}},
             "readinessProbe": {"exec": {"command": ["true"]}},
             "startupProbe": {"exec": {"command": ["true"]}},
             "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
             "volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": "x"},
                              {"name": "missing", "mountPath": "/m"}]},
            {"name": "Bad_Name"},
            {"name": "debug", "image": "busybox"},
        ]));
        let e = prepare_update(&old, &bad).expect_err("invalid");
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        let want = [
            (
                "spec.ephemeralContainers[0].name",
                "Duplicate value: \"app\"",
            ),
            (
                "spec.ephemeralContainers[1].volumeMounts[1].name",
                "Not found: \"missing\"",
            ),
            (
                "spec.ephemeralContainers[1].targetContainerName",
                "Not found: \"nope\"",
            ),
            (
                "spec.ephemeralContainers[1].ports",
                "Forbidden: cannot be set for an Ephemeral Container",
            ),
            (
                "spec.ephemeralContainers[1].resources",
                "Forbidden: cannot be set for an Ephemeral Container",
            ),
            (
                "spec.ephemeralContainers[1].livenessProbe",
                "Forbidden: cannot be set for an Ephemeral Container",
            ),
            (
                "spec.ephemeralContainers[1].readinessProbe",
                "Forbidden: cannot be set for an Ephemeral Container",
            ),
            (
                "spec.ephemeralContainers[1].startupProbe",
                "Forbidden: cannot be set for an Ephemeral Container",
            ),
            (
                "spec.ephemeralContainers[1].lifecycle",
                "Forbidden: cannot be set for an Ephemeral Container",
            ),
            (
                "spec.ephemeralContainers[1].volumeMounts[0].subPath",
                "Forbidden: cannot be set for an Ephemeral Container",
            ),
            ("spec.ephemeralContainers[2].image", "Required value"),
            (
                "spec.ephemeralContainers[3].name",
                "Duplicate value: \"debug\"",
            ),
        ];
        let got = causes(&e);
        for (field, msg) in want {
            assert!(
                got.contains(&(field.to_owned(), msg.to_owned())),
                "missing {field}: {msg} in {got:#?}"
            );
        }
        assert!(
            got.iter()
                .any(|(f, m)| f == "spec.ephemeralContainers[2].name"
                    && m.starts_with("Invalid value: \"Bad_Name\": a lowercase RFC 1123 label")),
            "{got:#?}"
        );
        assert!(
            e.message.starts_with("Pod \"p\" is invalid: ["),
            "{}",
            e.message
        );
        // The target must be a regular or init container, not another ephemeral one.
        let chained = with(json!([{"name": "d1", "image": "busybox"},
            {"name": "d2", "image": "busybox", "targetContainerName": "d1"}]));
        let e = prepare_update(&old, &chained).expect_err("ephemeral target");
        assert_eq!(
            causes(&e),
            [(
                "spec.ephemeralContainers[1].targetContainerName".to_owned(),
                "Not found: \"d1\"".to_owned()
            )]
        );
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: spec.ephemeralContainers[1].targetContainerName: Not found: \"d1\""
        );
        let init_target =
            with(json!([{"name": "d", "image": "busybox", "targetContainerName": "init"}]));
        assert!(prepare_update(&old, &init_target).is_ok());
    }

    #[test]
    fn existing_ephemeral_containers_cannot_change_or_go() {
        let old = prepare_update(
            &pod(),
            &with(json!([{"name": "debug", "image": "busybox"}])),
        )
        .expect("added");
        let removed = pod();
        let e = prepare_update(&old, &removed).expect_err("removed");
        assert_eq!(
            causes(&e),
            [(
                "spec.ephemeralContainers".to_owned(),
                "Forbidden: existing ephemeral containers \"debug\" may not be removed\n"
                    .to_owned()
            )]
        );
        let changed = with(json!([{"name": "debug", "image": "alpine"}]));
        let e = prepare_update(&old, &changed).expect_err("changed");
        let (field, msg) = causes(&e).remove(0);
        assert_eq!(field, "spec.ephemeralContainers");
        assert!(
            msg.starts_with(
                "Forbidden: existing ephemeral containers \"debug\" may not be changed\n"
            ),
            "{msg}"
        );
        // Adding a second one next to the unchanged first is fine.
        let added = with(json!([{"name": "debug", "image": "busybox"},
            {"name": "debug2", "image": "busybox"}]));
        let got = prepare_update(&old, &added).expect("added");
        assert_eq!(
            got["spec"]["ephemeralContainers"].as_array().map(Vec::len),
            Some(2)
        );
    }

    #[test]
    fn mirror_pods_and_create_refuse_ephemeral_containers() {
        let mut mirror = pod();
        mirror["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "abc"});
        let e = prepare_update(&mirror, &with(json!([{"name": "d", "image": "busybox"}])))
            .expect_err("mirror pod");
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: : Forbidden: static pods do not support ephemeral containers"
        );
        let e =
            validate_create(&with(json!([{"name": "d", "image": "busybox"}]))).expect_err("create");
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: spec.ephemeralContainers: Forbidden: cannot be set on create"
        );
        assert!(validate_create(&pod()).is_ok());
        assert!(validate_create(&with(json!([]))).is_ok());
    }

    #[test]
    fn hostile_bodies_are_refused_not_crashed_on() {
        let old = pod();
        for body in [with(json!("not a list")), with(json!({"name": "x"}))] {
            let e = prepare_update(&old, &body).expect_err("bad shape");
            assert_eq!(e.code, 400, "{e}");
        }
        for list in [json!([1, null, "x"]), json!([{"name": 7, "image": []}])] {
            let e = prepare_update(&old, &with(list)).expect_err("bad items");
            assert_eq!(e.code, 422, "{e}");
        }
        // A very long name is refused with the label length message.
        let long = "a".repeat(300);
        let e = prepare_update(&old, &with(json!([{"name": long, "image": "busybox"}])))
            .expect_err("long name");
        assert!(
            e.message.contains("must be no more than 63 characters"),
            "{}",
            e.message
        );
    }
}
