//! Pod validation for static pods: the user-visible subset of upstream `ValidatePodCreate`.
//! Receives a defaulted `Pod`, emits upstream-style field errors
//! (`spec.containers[0].image: Required value`). Pure.

use crate::volumes::git_repo_disabled_message;
use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Pod, PodSpec, Probe, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The kind of a field error, as upstream's `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    Required,
    Invalid,
    NotSupported,
    Duplicate,
    Forbidden,
    NotFound,
    TooLong,
}

impl ErrorType {
    fn as_str(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::NotFound => "Not found",
            ErrorType::TooLong => "Too long",
        }
    }
}

/// The offending value carried by a field error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    Omitted,
    Str(String),
    Int(i64),
}

/// One validation error on one field, formatted like upstream's `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FieldError {
    pub field: String,
    pub kind: ErrorType,
    pub value: BadValue,
    pub detail: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.kind.as_str())?;
        let shows_value = !matches!(
            self.kind,
            ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong
        );
        if shows_value {
            match &self.value {
                BadValue::Omitted => {}
                BadValue::Str(s) => write!(f, ": {s:?}")?,
                BadValue::Int(i) => write!(f, ": {i}")?,
            }
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

fn err(field: &str, kind: ErrorType, value: BadValue, detail: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_string(),
        kind,
        value,
        detail: detail.into(),
    }
}
fn required(field: &str, detail: impl Into<String>) -> FieldError {
    err(field, ErrorType::Required, BadValue::Omitted, detail)
}
fn invalid_str(field: &str, value: &str, detail: impl Into<String>) -> FieldError {
    err(
        field,
        ErrorType::Invalid,
        BadValue::Str(value.into()),
        detail,
    )
}
fn invalid_int(field: &str, value: i64, detail: impl Into<String>) -> FieldError {
    err(field, ErrorType::Invalid, BadValue::Int(value), detail)
}
fn forbidden(field: &str, detail: impl Into<String>) -> FieldError {
    err(field, ErrorType::Forbidden, BadValue::Omitted, detail)
}
fn duplicate(field: &str, value: &str) -> FieldError {
    err(field, ErrorType::Duplicate, BadValue::Str(value.into()), "")
}
fn not_supported(field: &str, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    err(
        field,
        ErrorType::NotSupported,
        BadValue::Str(value.into()),
        format!("supported values: {}", list.join(", ")),
    )
}

use super::names::{
    is_dns1123_label, is_dns1123_subdomain, is_env_var_name, is_qualified_name,
    is_valid_label_value, is_valid_port_name, is_valid_port_num,
};

/// Validates a defaulted static pod as the API server would on create. Empty when valid.
pub fn validate_pod(pod: &Pod) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_metadata(pod, &mut errs);
    match &pod.spec {
        Some(spec) => validate_spec(spec, &mut errs),
        None => errs.push(required("spec.containers", "")),
    }
    errs
}

fn validate_metadata(pod: &Pod, errs: &mut Vec<FieldError>) {
    let meta = &pod.metadata;
    match meta.name.as_deref() {
        None | Some("") => errs.push(required(
            "metadata.name",
            "name or generateName is required",
        )),
        Some(name) => errs.extend(
            is_dns1123_subdomain(name)
                .into_iter()
                .map(|m| invalid_str("metadata.name", name, m)),
        ),
    }
    // A static pod's UID comes from its manifest (or its hash) and names directories
    // (`pods/<uid>`, the log directory) and the pod cgroup: one safe path component only.
    if let Some(uid) = meta.uid.as_deref() {
        errs.extend(
            uid_problems(uid)
                .into_iter()
                .map(|m| invalid_str("metadata.uid", uid, m)),
        );
    }
    match meta.namespace.as_deref() {
        None | Some("") => errs.push(required("metadata.namespace", "")),
        Some(ns) => errs.extend(
            is_dns1123_label(ns)
                .into_iter()
                .map(|m| invalid_str("metadata.namespace", ns, m)),
        ),
    }
    for (k, v) in meta.labels.iter().flatten() {
        errs.extend(
            is_qualified_name(k)
                .into_iter()
                .map(|m| invalid_str("metadata.labels", k, m)),
        );
        errs.extend(
            is_valid_label_value(v)
                .into_iter()
                .map(|m| invalid_str("metadata.labels", v, m)),
        );
    }
    let mut total = 0usize;
    for (k, v) in meta.annotations.iter().flatten() {
        errs.extend(
            is_qualified_name(&k.to_lowercase())
                .into_iter()
                .map(|m| invalid_str("metadata.annotations", k, m)),
        );
        total += k.len() + v.len();
    }
    if total > 256 * 1024 {
        errs.push(err(
            "metadata.annotations",
            ErrorType::TooLong,
            BadValue::Omitted,
            "must have at most 262144 bytes",
        ));
    }
}

/// Longest UID accepted from a manifest (a UUID is 36 characters, the content hash 32).
const MAX_UID_LEN: usize = 128;

/// Why `uid` cannot be used as a path component (and cgroup name): empty when it can.
fn uid_problems(uid: &str) -> Vec<String> {
    let mut out = Vec::new();
    if uid.is_empty() {
        out.push("must not be empty".to_owned());
    }
    if uid.len() > MAX_UID_LEN {
        out.push(format!("must be no more than {MAX_UID_LEN} characters"));
    }
    if !uid
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        out.push(
            "must consist of alphanumeric characters, '-', '_' or '.' (no '/', NUL or other characters)"
                .to_owned(),
        );
    }
    if uid.contains("..") || uid == "." {
        out.push("must not be '.' or contain '..'".to_owned());
    }
    out
}

fn validate_spec(spec: &PodSpec, errs: &mut Vec<FieldError>) {
    let volumes = validate_volumes(spec.volumes.as_deref().unwrap_or_default(), errs);
    let containers = &spec.containers;
    if containers.is_empty() {
        errs.push(required("spec.containers", ""));
    }
    let mut names = BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        validate_container(c, &path, &volumes, &mut names, errs);
        if c.restart_policy.is_some() {
            errs.push(forbidden(
                &format!("{path}.restartPolicy"),
                "may not be set for non-init containers",
            ));
        }
        for (field, probe) in [
            ("livenessProbe", &c.liveness_probe),
            ("startupProbe", &c.startup_probe),
        ] {
            if let Some(st) = probe.as_ref().and_then(|p| p.success_threshold)
                && st != 1
            {
                errs.push(invalid_int(
                    &format!("{path}.{field}.successThreshold"),
                    st.into(),
                    "must be 1",
                ));
            }
        }
        if c.readiness_probe
            .as_ref()
            .is_some_and(|p| p.termination_grace_period_seconds.is_some())
        {
            errs.push(forbidden(
                &format!("{path}.readinessProbe.terminationGracePeriodSeconds"),
                "must not be set for readinessProbes",
            ));
        }
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let path = format!("spec.initContainers[{i}]");
        validate_container(c, &path, &volumes, &mut names, errs);
        match c.restart_policy.as_deref() {
            Some("Always") => {}
            Some(other) => errs.push(not_supported(
                &format!("{path}.restartPolicy"),
                other,
                &["Always"],
            )),
            None => {
                let msg = "may not be set for init containers without restartPolicy=Always";
                for (field, set) in [
                    ("lifecycle", c.lifecycle.is_some()),
                    ("livenessProbe", c.liveness_probe.is_some()),
                    ("readinessProbe", c.readiness_probe.is_some()),
                    ("startupProbe", c.startup_probe.is_some()),
                ] {
                    if set {
                        errs.push(forbidden(&format!("{path}.{field}"), msg));
                    }
                }
            }
        }
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.push(forbidden(
            "spec.ephemeralContainers",
            "cannot be set on create",
        ));
    }
    validate_host_ports(spec, errs);

    match spec.restart_policy.as_deref().unwrap_or_default() {
        "Always" | "OnFailure" | "Never" => {}
        "" => errs.push(required("spec.restartPolicy", "")),
        other => errs.push(not_supported(
            "spec.restartPolicy",
            other,
            &["Always", "OnFailure", "Never"],
        )),
    }
    let dns_policy = spec.dns_policy.as_deref().unwrap_or_default();
    match dns_policy {
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        "" => errs.push(required("spec.dnsPolicy", "")),
        other => errs.push(not_supported(
            "spec.dnsPolicy",
            other,
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        )),
    }
    validate_dns_config(spec, dns_policy, errs);

    if spec.termination_grace_period_seconds.is_none() {
        errs.push(required("spec.terminationGracePeriodSeconds", ""));
    }
    if let Some(ads) = spec.active_deadline_seconds
        && !(1..=i64::from(i32::MAX)).contains(&ads)
    {
        errs.push(invalid_int(
            "spec.activeDeadlineSeconds",
            ads,
            "must be between 1 and 2147483647, inclusive",
        ));
    }
    for (field, value) in [("hostname", &spec.hostname), ("subdomain", &spec.subdomain)] {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
            errs.extend(
                is_dns1123_label(v)
                    .into_iter()
                    .map(|m| invalid_str(&format!("spec.{field}"), v, m)),
            );
        }
    }
    if let Some(n) = spec.node_name.as_deref().filter(|v| !v.is_empty()) {
        errs.extend(
            is_dns1123_subdomain(n)
                .into_iter()
                .map(|m| invalid_str("spec.nodeName", n, m)),
        );
    }
    // Upstream `ValidateRuntimeClassName`: a DNS subdomain (the empty string included).
    if let Some(n) = spec.runtime_class_name.as_deref() {
        errs.extend(
            is_dns1123_subdomain(n)
                .into_iter()
                .map(|m| invalid_str("spec.runtimeClassName", n, m)),
        );
    }
}

fn validate_volumes<'a>(volumes: &'a [Volume], errs: &mut Vec<FieldError>) -> BTreeSet<&'a str> {
    let mut names = BTreeSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}].name");
        if v.name.is_empty() {
            errs.push(required(&path, ""));
        } else {
            let msgs = is_dns1123_label(&v.name);
            if !msgs.is_empty() {
                errs.extend(msgs.into_iter().map(|m| invalid_str(&path, &v.name, m)));
            } else if names.contains(v.name.as_str()) {
                errs.push(duplicate(&path, &v.name));
            }
        }
        names.insert(v.name.as_str());
        if v.git_repo.is_some() {
            errs.push(forbidden(
                &format!("spec.volumes[{i}].gitRepo"),
                git_repo_disabled_message(&v.name),
            ));
        }
    }
    names
}

fn validate_container(
    c: &Container,
    path: &str,
    volumes: &BTreeSet<&str>,
    names: &mut BTreeSet<String>,
    errs: &mut Vec<FieldError>,
) {
    let name_path = format!("{path}.name");
    if c.name.is_empty() {
        errs.push(required(&name_path, ""));
    } else {
        let msgs = is_dns1123_label(&c.name);
        if !msgs.is_empty() {
            errs.extend(
                msgs.into_iter()
                    .map(|m| invalid_str(&name_path, &c.name, m)),
            );
        } else if names.contains(&c.name) {
            errs.push(duplicate(&name_path, &c.name));
        }
    }
    names.insert(c.name.clone());

    let image = c.image.as_deref().unwrap_or_default();
    if image.is_empty() {
        errs.push(required(&format!("{path}.image"), ""));
    } else if image.trim() != image {
        errs.push(invalid_str(
            &format!("{path}.image"),
            image,
            "must not have leading or trailing whitespace",
        ));
    }
    match c.image_pull_policy.as_deref().unwrap_or_default() {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => errs.push(required(&format!("{path}.imagePullPolicy"), "")),
        other => errs.push(not_supported(
            &format!("{path}.imagePullPolicy"),
            other,
            &["Always", "IfNotPresent", "Never"],
        )),
    }
    match c.termination_message_policy.as_deref().unwrap_or_default() {
        "File" | "FallbackToLogsOnError" => {}
        "" => errs.push(required(&format!("{path}.terminationMessagePolicy"), "")),
        other => errs.push(not_supported(
            &format!("{path}.terminationMessagePolicy"),
            other,
            &["File", "FallbackToLogsOnError"],
        )),
    }
    validate_ports(c.ports.as_deref().unwrap_or_default(), path, errs);
    for (i, e) in c.env.iter().flatten().enumerate() {
        let p = format!("{path}.env[{i}].name");
        if e.name.is_empty() {
            errs.push(required(&p, ""));
        } else {
            errs.extend(
                is_env_var_name(&e.name)
                    .into_iter()
                    .map(|m| invalid_str(&p, &e.name, m)),
            );
        }
        if e.value.as_ref().is_some_and(|v| !v.is_empty()) && e.value_from.is_some() {
            errs.push(invalid_str(
                &format!("{path}.env[{i}].valueFrom"),
                "",
                "may not be specified when `value` is not empty",
            ));
        }
    }
    validate_mounts(
        c.volume_mounts.as_deref().unwrap_or_default(),
        path,
        volumes,
        errs,
    );
    for (field, probe) in [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ] {
        if let Some(p) = probe {
            validate_probe(p, &format!("{path}.{field}"), errs);
        }
    }
}

fn validate_ports(ports: &[ContainerPort], path: &str, errs: &mut Vec<FieldError>) {
    let mut names = BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let ip = format!("{path}.ports[{i}]");
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            let msgs = is_valid_port_name(name);
            if !msgs.is_empty() {
                errs.extend(
                    msgs.into_iter()
                        .map(|m| invalid_str(&format!("{ip}.name"), name, m)),
                );
            } else if !names.insert(name) {
                errs.push(duplicate(&format!("{ip}.name"), name));
            }
        }
        if p.container_port == 0 {
            errs.push(required(&format!("{ip}.containerPort"), ""));
        } else {
            errs.extend(
                is_valid_port_num(p.container_port.into())
                    .into_iter()
                    .map(|m| {
                        invalid_int(&format!("{ip}.containerPort"), p.container_port.into(), m)
                    }),
            );
        }
        if let Some(hp) = p.host_port.filter(|hp| *hp != 0) {
            errs.extend(
                is_valid_port_num(hp.into())
                    .into_iter()
                    .map(|m| invalid_int(&format!("{ip}.hostPort"), hp.into(), m)),
            );
        }
        match p.protocol.as_deref().unwrap_or_default() {
            "TCP" | "UDP" | "SCTP" => {}
            "" => errs.push(required(&format!("{ip}.protocol"), "")),
            other => errs.push(not_supported(
                &format!("{ip}.protocol"),
                other,
                &["SCTP", "TCP", "UDP"],
            )),
        }
    }
}

fn validate_host_ports(spec: &PodSpec, errs: &mut Vec<FieldError>) {
    let host_network = spec.host_network.unwrap_or(false);
    let mut seen = BTreeSet::new();
    for (ci, c) in spec.containers.iter().enumerate() {
        for (pi, p) in c.ports.iter().flatten().enumerate() {
            let path = format!("spec.containers[{ci}].ports[{pi}].hostPort");
            let host_port = p.host_port.unwrap_or(0);
            if host_network && host_port != p.container_port {
                errs.push(invalid_int(
                    &path,
                    host_port.into(),
                    "must match `containerPort` when `hostNetwork` is true",
                ));
            }
            if host_port == 0 {
                continue;
            }
            let key = format!(
                "{}/{}/{}",
                p.protocol.as_deref().unwrap_or_default(),
                p.host_ip.as_deref().unwrap_or_default(),
                host_port
            );
            if !seen.insert(key.clone()) {
                errs.push(duplicate(&path, &key));
            }
        }
    }
}

fn validate_mounts(
    mounts: &[VolumeMount],
    path: &str,
    volumes: &BTreeSet<&str>,
    errs: &mut Vec<FieldError>,
) {
    let mut paths = BTreeSet::new();
    for (i, m) in mounts.iter().enumerate() {
        let mp = format!("{path}.volumeMounts[{i}]");
        if m.name.is_empty() {
            errs.push(required(&format!("{mp}.name"), ""));
        } else if !volumes.contains(m.name.as_str()) {
            errs.push(err(
                &format!("{mp}.name"),
                ErrorType::NotFound,
                BadValue::Str(m.name.clone()),
                "",
            ));
        }
        if m.mount_path.is_empty() {
            errs.push(required(&format!("{mp}.mountPath"), ""));
        } else if !paths.insert(m.mount_path.as_str()) {
            errs.push(invalid_str(
                &format!("{mp}.mountPath"),
                &m.mount_path,
                "must be unique",
            ));
        }
        // Past PATH_MAX: refused without the (possibly huge) value; the other checks would
        // repeat it.
        let too_long = |field: &str, v: &str| {
            crate::volumes::subpath::exceeds_bounds(v).map(|(bytes, _)| {
                err(
                    &format!("{mp}.{field}"),
                    ErrorType::TooLong,
                    BadValue::Omitted,
                    format!(
                        "may not be more than {} bytes (PATH_MAX) or {} levels; it is {bytes} bytes",
                        crate::volumes::subpath::MAX_SUB_PATH_BYTES,
                        crate::volumes::subpath::MAX_SUB_PATH_DEPTH
                    ),
                )
            })
        };
        if let Some(e) = m
            .sub_path_expr
            .as_deref()
            .and_then(|v| too_long("subPathExpr", v))
        {
            errs.push(e);
        }
        if let Some(e) = m.sub_path.as_deref().and_then(|v| too_long("subPath", v)) {
            errs.push(e);
        } else if let Some(sp) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            if sp.starts_with('/') {
                errs.push(invalid_str(
                    &format!("{mp}.subPath"),
                    sp,
                    "must be a relative path",
                ));
            }
            if sp.split('/').any(|part| part == "..") {
                errs.push(invalid_str(
                    &format!("{mp}.subPath"),
                    sp,
                    "must not contain '..'",
                ));
            }
        }
    }
}

fn validate_port_ref(port: &IntOrString, path: &str, errs: &mut Vec<FieldError>) {
    match port {
        IntOrString::Int(n) => errs.extend(
            is_valid_port_num((*n).into())
                .into_iter()
                .map(|m| invalid_int(path, (*n).into(), m)),
        ),
        IntOrString::String(s) => errs.extend(
            is_valid_port_name(s)
                .into_iter()
                .map(|m| invalid_str(path, s, m)),
        ),
    }
}

fn validate_probe(p: &Probe, path: &str, errs: &mut Vec<FieldError>) {
    let handlers = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ]
    .iter()
    .filter(|h| **h)
    .count();
    match handlers {
        0 => errs.push(required(path, "must specify a handler type")),
        1 => {}
        _ => errs.push(forbidden(path, "may not specify more than 1 handler type")),
    }
    if let Some(h) = &p.http_get {
        validate_port_ref(&h.port, &format!("{path}.httpGet.port"), errs);
    }
    if let Some(t) = &p.tcp_socket {
        validate_port_ref(&t.port, &format!("{path}.tcpSocket.port"), errs);
    }
    for (field, value) in [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ] {
        if let Some(v) = value.filter(|v| *v < 0) {
            errs.push(invalid_int(
                &format!("{path}.{field}"),
                v.into(),
                "must be greater than or equal to 0",
            ));
        }
    }
    if let Some(t) = p.termination_grace_period_seconds.filter(|t| *t <= 0) {
        errs.push(invalid_int(
            &format!("{path}.terminationGracePeriodSeconds"),
            t,
            "must be greater than 0",
        ));
    }
}

fn validate_dns_config(spec: &PodSpec, dns_policy: &str, errs: &mut Vec<FieldError>) {
    match (&spec.dns_config, dns_policy) {
        (None, "None") => errs.push(required(
            "spec.dnsConfig",
            "must provide `dnsConfig` when `dnsPolicy` is None",
        )),
        (Some(cfg), _) => {
            let ns = cfg.nameservers.as_deref().unwrap_or_default();
            if dns_policy == "None" && ns.is_empty() {
                errs.push(required(
                    "spec.dnsConfig.nameservers",
                    "must provide at least one DNS nameserver when `dnsPolicy` is None",
                ));
            }
            if ns.len() > 3 {
                errs.push(invalid_str(
                    "spec.dnsConfig.nameservers",
                    &ns.join(" "),
                    "must not have more than 3 nameservers",
                ));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::defaults::set_pod_defaults;

    /// A valid, defaulted pod with `patch` merged into `spec` (JSON merge of the top level).
    fn pod_with(meta: serde_json::Value, spec_patch: serde_json::Value) -> Pod {
        let mut spec = serde_json::json!({
            "containers": [{"name": "c", "image": "nginx"}]
        });
        for (k, v) in spec_patch.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let mut meta_v = serde_json::json!({"name": "web-n1", "namespace": "default"});
        for (k, v) in meta.as_object().unwrap() {
            meta_v[k] = v.clone();
        }
        let mut pod: Pod =
            serde_json::from_value(serde_json::json!({"metadata": meta_v, "spec": spec})).unwrap();
        set_pod_defaults(&mut pod);
        pod
    }

    fn messages(pod: &Pod) -> Vec<String> {
        validate_pod(pod).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn static_pod_uid_must_be_one_safe_path_component() {
        let long = "u".repeat(129);
        #[rustfmt::skip]
        let bad: &[(&str, &str)] = &[
            ("../../etc", "must consist of alphanumeric characters"),
            ("../../etc", "must not be '.' or contain '..'"),
            ("a/b", "no '/', NUL"),
            ("/abs", "no '/', NUL"),
            ("a\0b", "no '/', NUL"),
            ("..", "must not be '.' or contain '..'"),
            (".", "must not be '.' or contain '..'"),
            ("a b", "must consist of alphanumeric characters"),
            (&long, "must be no more than 128 characters"),
        ];
        for (uid, want) in bad {
            let got = messages(&pod_with(
                serde_json::json!({"uid": uid}),
                serde_json::json!({}),
            ));
            assert!(
                got.iter().any(|m| m
                    .starts_with(&format!("metadata.uid: Invalid value: {uid:?}: "))
                    && m.contains(want)),
                "uid {uid:?}: {got:?}"
            );
        }
        for uid in [
            "4d0c3b64-9a6e-4b8f-a5c0-3f6a2f0d9a11",
            "0123456789abcdef0123456789abcdef",
            "Fixed_UID.v2",
        ] {
            assert_eq!(
                messages(&pod_with(
                    serde_json::json!({"uid": uid}),
                    serde_json::json!({})
                )),
                Vec::<String>::new(),
                "{uid}"
            );
        }
    }

    #[test]
    fn a_manifest_with_a_traversing_uid_is_refused_naming_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("evil.yaml");
        std::fs::write(
            &file,
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: evil\n  uid: ../../../etc\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
        )
        .unwrap();
        let snap = crate::sources::read_manifests(dir.path(), "n1");
        assert!(snap.files.is_empty(), "{:?}", snap.files);
        assert!(snap.invalid.contains(&file));
        let msg = &snap.errors[&file];
        assert!(
            msg.contains("metadata.uid: Invalid value: \"../../../etc\""),
            "{msg}"
        );
    }

    #[test]
    fn git_repo_volumes_are_forbidden_naming_the_volume() {
        let pod = pod_with(
            serde_json::json!({}),
            serde_json::json!({
                "volumes": [{"name": "ok", "emptyDir": {}},
                            {"name": "src", "gitRepo": {"repository": "https://example.com/r.git"}}],
            }),
        );
        assert_eq!(
            messages(&pod),
            vec![format!(
                "spec.volumes[1].gitRepo: Forbidden: {}",
                git_repo_disabled_message("src")
            )]
        );
        assert!(
            git_repo_disabled_message("src")
                .starts_with("volume \"src\": git-repo volume plugin has been disabled")
        );
    }

    /// A hostile manifest's `runtimeClassName` never reaches a lookup or an event unchecked:
    /// path-like, oversized and empty names are refused naming the field.
    #[test]
    fn runtime_class_name_must_be_a_dns_subdomain() {
        let long = "a".repeat(254);
        for (name, want) in [
            ("../../etc/passwd", "a lowercase RFC 1123 subdomain"),
            ("Kata", "a lowercase RFC 1123 subdomain"),
            ("", "a lowercase RFC 1123 subdomain"),
            (long.as_str(), "must be no more than 253 characters"),
        ] {
            let pod = pod_with(
                serde_json::json!({}),
                serde_json::json!({"runtimeClassName": name}),
            );
            let msgs = messages(&pod);
            assert_eq!(msgs.len(), 1, "{name:?}: {msgs:?}");
            assert!(
                msgs[0].starts_with("spec.runtimeClassName: Invalid value: ")
                    && msgs[0].contains(want),
                "{name:?}: {msgs:?}"
            );
        }
        for ok in ["kata", "gvisor.sandbox", "runc-alt"] {
            let pod = pod_with(
                serde_json::json!({}),
                serde_json::json!({"runtimeClassName": ok}),
            );
            assert_eq!(messages(&pod), Vec::<String>::new(), "{ok}");
        }
    }

    #[test]
    fn valid_pod_has_no_errors() {
        let pod = pod_with(
            serde_json::json!({"labels": {"app": "web", "example.com/tier": ""}}),
            serde_json::json!({
                "volumes": [{"name": "data", "hostPath": {"path": "/data"}}],
                "initContainers": [{"name": "init", "image": "busybox"},
                                   {"name": "sidecar", "image": "busybox", "restartPolicy": "Always",
                                    "readinessProbe": {"exec": {"command": ["true"]}}}],
                "containers": [{"name": "c", "image": "nginx",
                    "ports": [{"name": "http", "containerPort": 80}],
                    "env": [{"name": "A_B", "value": "1"}, {"name": "my.env-name", "value": "x"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "livenessProbe": {"httpGet": {"port": "http"}}}],
                "activeDeadlineSeconds": 10
            }),
        );
        assert_eq!(messages(&pod), Vec::<String>::new());
    }

    #[test]
    fn error_table() {
        let dns_label = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
        let cases: Vec<(serde_json::Value, serde_json::Value, Vec<String>)> = vec![
            (
                serde_json::json!({"name": "Foo-n1"}),
                serde_json::json!({}),
                vec!["metadata.name: Invalid value: \"Foo-n1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into()],
            ),
            (
                serde_json::json!({"namespace": "kube.system"}),
                serde_json::json!({}),
                vec!["metadata.namespace: Invalid value: \"kube.system\": must not contain dots".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"containers": []}),
                vec!["spec.containers: Required value".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"containers": [{"name": "c"}]}),
                vec!["spec.containers[0].image: Required value".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"containers": [{"name": "My_C", "image": "x"}]}),
                vec![format!("spec.containers[0].name: Invalid value: \"My_C\": {dns_label}")],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"initContainers": [{"name": "c", "image": "x"}]}),
                vec!["spec.initContainers[0].name: Duplicate value: \"c\"".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"initContainers": [{"name": "i", "image": "x", "restartPolicy": "OnFailure"}]}),
                vec!["spec.initContainers[0].restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\"".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"initContainers": [{"name": "i", "image": "x", "livenessProbe": {"exec": {"command": ["true"]}}}]}),
                vec!["spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"restartPolicy": "Sometimes"}),
                vec!["spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"dnsPolicy": "Nope"}),
                vec!["spec.dnsPolicy: Unsupported value: \"Nope\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"dnsPolicy": "None"}),
                vec!["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"containers": [{"name": "c", "image": "x", "imagePullPolicy": "Sometimes"}]}),
                vec!["spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"containers": [{"name": "c", "image": "x", "ports": [
                    {"name": "http", "containerPort": 70000},
                    {"name": "http", "containerPort": 81, "protocol": "ICMP"}]}]}),
                vec![
                    "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive".into(),
                    "spec.containers[0].ports[1].name: Duplicate value: \"http\"".into(),
                    "spec.containers[0].ports[1].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"".into(),
                ],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"containers": [{"name": "c", "image": "x", "env": [{"name": "A=B"}, {"name": ""}]}]}),
                vec![
                    "spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='".into(),
                    "spec.containers[0].env[1].name: Required value".into(),
                ],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}],
                    "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "w", "mountPath": "/w"}]}]}),
                vec![
                    "spec.volumes[1].name: Duplicate value: \"v\"".into(),
                    "spec.containers[0].volumeMounts[0].name: Not found: \"w\"".into(),
                ],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"activeDeadlineSeconds": 0}),
                vec!["spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"containers": [{"name": "c", "image": "x", "livenessProbe": {"successThreshold": 2}}]}),
                vec![
                    "spec.containers[0].livenessProbe: Required value: must specify a handler type".into(),
                    "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1".into(),
                ],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"containers": [{"name": "c", "image": "x", "restartPolicy": "Always"}]}),
                vec!["spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers".into()],
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"containers": [
                    {"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}]},
                    {"name": "b", "image": "x", "ports": [{"containerPort": 81, "hostPort": 8080}]}]}),
                vec!["spec.containers[1].ports[0].hostPort: Duplicate value: \"TCP//8080\"".into()],
            ),
            (
                serde_json::json!({"labels": {"bad key": "v", "ok": "-bad-"}}),
                serde_json::json!({}),
                vec![
                    "metadata.labels: Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into(),
                    "metadata.labels: Invalid value: \"-bad-\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into(),
                ],
            ),
        ];
        for (meta, spec, want) in cases {
            let pod = pod_with(meta.clone(), spec.clone());
            assert_eq!(messages(&pod), want, "meta {meta} spec {spec}");
        }
    }

    /// Depth (issue 28 A1): a 120 KB subPath in a static manifest is refused at validation,
    /// naming the field and the limit without repeating the value.
    #[test]
    fn a_sub_path_past_path_max_is_too_long() {
        let deep = "d/".repeat(60_000);
        let got = messages(&pod_with(
            serde_json::json!({}),
            serde_json::json!({
                "volumes": [{"name": "v", "emptyDir": {}}],
                "containers": [{"name": "c", "image": "nginx", "volumeMounts": [
                    {"name": "v", "mountPath": "/a", "subPath": deep},
                    {"name": "v", "mountPath": "/b", "subPathExpr": deep},
                    {"name": "v", "mountPath": "/c", "subPath": "ok/path"},
                ]}],
            }),
        ));
        let want = |i: usize, field: &str| {
            format!(
                "spec.containers[0].volumeMounts[{i}].{field}: Too long: may not be more than 4095 bytes (PATH_MAX) or 2048 levels; it is 120000 bytes"
            )
        };
        assert_eq!(got, vec![want(0, "subPath"), want(1, "subPathExpr")]);
    }
}
