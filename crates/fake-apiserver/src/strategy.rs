//! Per-kind create/update rules: owns defaulting, validation and the spec/status split of the
//! stored kinds (pods, nodes, namespaces, services, ...); receives incoming and stored objects,
//! emits the object to store or an `ApiError`.

use crate::error::ApiError;
use crate::resources::ResourceInfo;
use serde_json::{Value, json};

/// Whether `name` is a valid RFC 1123 subdomain.
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn invalid_name(info: &ResourceInfo, name: &str) -> ApiError {
    ApiError::invalid(
        info.kind,
        name,
        &format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ),
    )
}

/// Validates an object about to be stored (create or update).
pub fn validate(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    if info.kind == crate::certificates::KIND {
        crate::certificates::validate_name(name)?;
    } else if name.is_empty() {
        return Err(ApiError::invalid(
            info.kind,
            name,
            "metadata.name: Required value: name or generateName is required",
        ));
    } else if !is_dns_subdomain(name) {
        return Err(invalid_name(info, name));
    }
    for field in ["labels", "annotations"] {
        let v = &obj["metadata"][field];
        if let Some(m) = v.as_object() {
            if let Some((k, _)) = m.iter().find(|(_, v)| !v.is_string()) {
                return Err(ApiError::invalid(
                    info.kind,
                    name,
                    &format!("metadata.{field}.{k}: Invalid value: must be a string"),
                ));
            }
        } else if !v.is_null() {
            return Err(ApiError::invalid(
                info.kind,
                name,
                &format!("metadata.{field}: Invalid value: must be a map of strings"),
            ));
        }
    }
    if info.kind == "Pod" {
        validate_pod(name, obj)?;
    }
    if info.kind == "RuntimeClass" {
        validate_runtime_class(name, obj)?;
    }
    if info.kind == "Lease"
        && let Some(d) = obj["spec"].get("leaseDurationSeconds")
        && d.as_i64().is_none_or(|d| d <= 0)
    {
        return Err(ApiError::invalid(
            "Lease",
            name,
            "spec.leaseDurationSeconds: Invalid value: must be greater than 0",
        ));
    }
    Ok(())
}

/// Whether `s` is a valid RFC 1123 label (at most 63 characters, no dots).
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

/// Upstream `ValidateRuntimeClass`: `handler` is a required DNS label (the CRI handler name).
fn validate_runtime_class(name: &str, obj: &Value) -> Result<(), ApiError> {
    match obj.get("handler").and_then(Value::as_str) {
        None | Some("") => Err(ApiError::invalid(
            "RuntimeClass",
            name,
            "handler: Required value",
        )),
        Some(h) if !is_dns_label(h) => Err(ApiError::invalid(
            "RuntimeClass",
            name,
            &format!(
                "handler: Invalid value: \"{h}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
            ),
        )),
        Some(_) => Ok(()),
    }
}

fn validate_pod(name: &str, obj: &Value) -> Result<(), ApiError> {
    let containers = obj["spec"]["containers"].as_array();
    if containers.is_none_or(|c| c.is_empty()) {
        return Err(ApiError::invalid(
            "Pod",
            name,
            "spec.containers: Required value",
        ));
    }
    for (i, c) in containers.into_iter().flatten().enumerate() {
        if c["name"].as_str().is_none_or(str::is_empty) {
            return Err(ApiError::invalid(
                "Pod",
                name,
                &format!("spec.containers[{i}].name: Required value"),
            ));
        }
        if c["image"].as_str().is_none_or(str::is_empty) {
            return Err(ApiError::invalid(
                "Pod",
                name,
                &format!("spec.containers[{i}].image: Required value"),
            ));
        }
    }
    Ok(())
}

/// Upstream's default `imagePullPolicy` for an image reference.
pub(crate) fn image_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        "IfNotPresent"
    } else if !last.contains(':') || last.ends_with(":latest") {
        "Always"
    } else {
        "IfNotPresent"
    }
}

fn set_default(obj: &mut Value, key: &str, v: Value) {
    if let Some(m) = obj.as_object_mut() {
        m.entry(key.to_string()).or_insert(v);
    }
}

fn qos_class(spec: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for c in spec["containers"].as_array().into_iter().flatten() {
        let req = &c["resources"]["requests"];
        let lim = &c["resources"]["limits"];
        for r in ["cpu", "memory"] {
            if !req[r].is_null() || !lim[r].is_null() {
                any = true;
            }
            let request = if req[r].is_null() { &lim[r] } else { &req[r] };
            if lim[r].is_null() || request != &lim[r] {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Folds a Secret's write-only `stringData` into base64 `data`, as the API server does.
pub fn normalize_secret(obj: &mut Value) {
    use base64::Engine as _;
    let Some(string_data) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return;
    };
    if let Some(m) = string_data.as_object() {
        for (k, v) in m {
            let encoded =
                base64::engine::general_purpose::STANDARD.encode(v.as_str().unwrap_or_default());
            obj["data"][k] = json!(encoded);
        }
    }
}

/// Applies create-time defaults (the fields real API server defaulting fills in).
pub fn default_on_create(
    info: &ResourceInfo,
    obj: &mut Value,
    cluster_ip: impl FnOnce() -> String,
) {
    match info.kind {
        "Pod" => {
            let spec = &mut obj["spec"];
            set_default(spec, "restartPolicy", json!("Always"));
            set_default(spec, "dnsPolicy", json!("ClusterFirst"));
            set_default(spec, "terminationGracePeriodSeconds", json!(30));
            set_default(spec, "schedulerName", json!("default-scheduler"));
            set_default(spec, "securityContext", json!({}));
            set_default(spec, "enableServiceLinks", json!(true));
            set_default(spec, "priority", json!(0));
            for list in ["containers", "initContainers"] {
                if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
                    for c in cs {
                        let image = c["image"].as_str().unwrap_or_default().to_string();
                        set_default(c, "imagePullPolicy", json!(image_pull_policy(&image)));
                        set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
                        set_default(c, "terminationMessagePolicy", json!("File"));
                        set_default(c, "resources", json!({}));
                    }
                }
            }
            let qos = qos_class(&obj["spec"]);
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        "Namespace" => {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
        "Service" => {
            let spec = &mut obj["spec"];
            set_default(spec, "type", json!("ClusterIP"));
            set_default(spec, "sessionAffinity", json!("None"));
            if spec["clusterIP"].is_null() {
                let ip = cluster_ip();
                spec["clusterIP"] = json!(ip);
                spec["clusterIPs"] = json!([ip]);
            }
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    set_default(p, "protocol", json!("TCP"));
                    let port = p["port"].clone();
                    set_default(p, "targetPort", port);
                }
            }
            set_default(obj, "status", json!({"loadBalancer": {}}));
        }
        "Secret" => {
            set_default(obj, "type", json!("Opaque"));
            normalize_secret(obj);
        }
        "Node" => {
            set_default(obj, "spec", json!({}));
            set_default(obj, "status", json!({}));
        }
        crate::certificates::KIND => obj["status"] = json!({}),
        _ => {}
    }
}

/// Blanks the pod spec fields an update may change, to compare the rest.
fn mutable_pod_fields_cleared(spec: &Value) -> Value {
    let mut s = spec.clone();
    for list in ["containers", "initContainers"] {
        if let Some(cs) = s.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                if let Some(m) = c.as_object_mut() {
                    m.remove("image");
                }
            }
        }
    }
    if let Some(m) = s.as_object_mut() {
        m.remove("activeDeadlineSeconds");
        m.remove("tolerations");
        m.remove("terminationGracePeriodSeconds");
    }
    s
}

/// Upstream `ValidateContainerStateTransition`: unless the pod (or, for init containers, the
/// container) restarts, a terminated container may not become non-terminated.
fn validate_container_state_transitions(
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    let policy = old["spec"]["restartPolicy"].as_str().unwrap_or("Always");
    for (list, spec_list, list_policy) in [
        ("containerStatuses", "containers", policy),
        ("initContainerStatuses", "initContainers", policy),
        ("ephemeralContainerStatuses", "ephemeralContainers", "Never"),
    ] {
        for (i, o) in old["status"][list]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let Some(exit) = o["state"]["terminated"]["exitCode"]
                .as_i64()
                .or_else(|| o["state"]["terminated"].is_object().then_some(0))
            else {
                continue;
            };
            let cname = &o["name"];
            let sidecar = spec_list == "initContainers"
                && old["spec"][spec_list]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["name"] == *cname && c["restartPolicy"] == "Always");
            if list_policy == "Always" || sidecar || (exit != 0 && list_policy == "OnFailure") {
                continue;
            }
            let revived = new["status"][list]
                .as_array()
                .into_iter()
                .flatten()
                .any(|n| n["name"] == *cname && n["state"]["terminated"].is_null());
            if revived {
                return Err(ApiError::invalid(
                    "Pod",
                    name,
                    &format!(
                        "status.{list}[{i}].state: Forbidden: may not be transitioned to non-terminated state"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The part of an object a write goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself (spec and metadata; status kept).
    Main,
    /// `/status` (status only).
    Status,
    /// `pods/{name}/ephemeralcontainers` (`spec.ephemeralContainers` only).
    EphemeralContainers,
    /// `pods/{name}/resize` (containers' `resources` and `resizePolicy` only).
    Resize,
    /// `certificatesigningrequests/{name}/approval` (`status.conditions` only).
    Approval,
}

/// [`prepare_update`] for any subresource.
pub fn prepare_subresource_update(
    info: &ResourceInfo,
    old: &Value,
    new: Value,
    sub: Subresource,
) -> Result<Value, ApiError> {
    if info.kind == crate::certificates::KIND {
        return crate::certificates::prepare_update(info, old, new, sub);
    }
    match sub {
        Subresource::Main => prepare_update(info, old, new, false),
        Subresource::Status => prepare_update(info, old, new, true),
        Subresource::EphemeralContainers => {
            let mut out = crate::ephemeral::prepare_update(old, &new)?;
            if old.get("spec") != out.get("spec") {
                let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
                out["metadata"]["generation"] = json!(g);
            }
            validate(info, &out)?;
            Ok(out)
        }
        Subresource::Resize => crate::resize::prepare_resize(old, &new),
        Subresource::Approval => Err(ApiError::path_not_found(&format!(
            "{}/approval",
            info.plural
        ))),
    }
}

/// Merges an update into the stored object following the resource's spec/status split.
/// `status_sub` selects the `/status` subresource rules.
pub fn prepare_update(
    info: &ResourceInfo,
    old: &Value,
    mut new: Value,
    status_sub: bool,
) -> Result<Value, ApiError> {
    let name = old["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if status_sub {
        for field in ["spec"] {
            match old.get(field) {
                Some(v) => new[field] = v.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove(field);
                    }
                }
            }
        }
        if info.kind == "Pod" {
            new["metadata"]["ownerReferences"] = old["metadata"]["ownerReferences"].clone();
            validate_container_state_transitions(&name, old, &new)?;
        }
    } else if info.kind == "RuntimeClass" && old.get("handler") != new.get("handler") {
        // Upstream `ValidateRuntimeClassUpdate`.
        return Err(ApiError::invalid(
            "RuntimeClass",
            &name,
            &format!(
                "handler: Invalid value: {}: field is immutable",
                new.get("handler").unwrap_or(&Value::Null)
            ),
        ));
    } else if info.has_status {
        match old.get("status") {
            Some(v) => new["status"] = v.clone(),
            None => {
                if let Some(m) = new.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        if info.kind == "Pod"
            && mutable_pod_fields_cleared(&old["spec"]) != mutable_pod_fields_cleared(&new["spec"])
        {
            return Err(ApiError::invalid(
                "Pod",
                &name,
                "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
            ));
        }
    }
    // Server-managed metadata always comes from the stored object.
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
    ] {
        match old["metadata"].get(field) {
            Some(v) => new["metadata"][field] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(field);
                }
            }
        }
    }
    for (k, v) in [("kind", info.kind), ("apiVersion", "")] {
        let v = if k == "apiVersion" {
            info.api_version()
        } else {
            v.to_string()
        };
        new[k] = json!(v);
    }
    if new["metadata"]["ownerReferences"].is_null()
        && let Some(m) = new["metadata"].as_object_mut()
    {
        m.remove("ownerReferences");
    }
    if info.kind == "Secret" {
        normalize_secret(&mut new);
    }
    if !status_sub && old.get("spec") != new.get("spec") {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        new["metadata"]["generation"] = json!(g);
    }
    validate(info, &new)?;
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    fn pods() -> &'static ResourceInfo {
        find("", "v1", "pods").expect("pods")
    }

    #[test]
    fn pod_defaults_and_qos() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "image": "busybox", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running"}});
        default_on_create(pods(), &mut pod, String::new);
        assert_eq!(
            pod["status"],
            json!({"phase": "Pending", "qosClass": "Guaranteed"})
        );
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
    }

    #[test]
    fn status_and_spec_split() {
        let old = json!({"metadata": {"name": "p", "uid": "u1", "generation": 1},
            "spec": {"containers": [{"name": "c", "image": "a"}]}, "status": {"phase": "Pending"}});
        let mut via_status = old.clone();
        via_status["spec"]["containers"][0]["image"] = json!("b");
        via_status["status"]["phase"] = json!("Running");
        let out = prepare_update(pods(), &old, via_status.clone(), true).expect("status");
        assert_eq!(out["spec"], old["spec"]);
        assert_eq!(out["status"]["phase"], "Running");
        let out = prepare_update(pods(), &old, via_status, false).expect("main");
        assert_eq!(out["status"], old["status"]);
        assert_eq!(out["spec"]["containers"][0]["image"], "b");
        assert_eq!(out["metadata"]["generation"], 2);
        let mut bad = old.clone();
        bad["spec"]["containers"][0]["name"] = json!("renamed");
        assert_eq!(
            prepare_update(pods(), &old, bad, false).map_err(|e| e.code),
            Err(422)
        );
    }

    #[test]
    fn terminated_containers_stay_terminated_unless_restarting() {
        let old = |policy: &str| {
            json!({"metadata": {"name": "p"}, "spec": {"restartPolicy": policy,
                "containers": [{"name": "c", "image": "a"}]},
                "status": {"containerStatuses": [{"name": "c", "state": {"terminated": {"exitCode": 1}}}]}})
        };
        let mut new = old("Never");
        new["status"]["containerStatuses"][0]["state"] = json!({"running": {}});
        for (policy, ok) in [("Never", false), ("OnFailure", true), ("Always", true)] {
            let got = prepare_update(pods(), &old(policy), new.clone(), true).map(|_| ());
            assert_eq!(got.is_ok(), ok, "{policy}: {got:?}");
        }
    }

    #[test]
    fn names_validated() {
        for (n, ok) in [
            ("a", true),
            ("a.b-c", true),
            ("A", false),
            ("-a", false),
            ("", false),
        ] {
            assert_eq!(is_dns_subdomain(n), ok, "{n}");
        }
    }
}
