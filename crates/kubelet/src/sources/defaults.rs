//! API-server defaulting for a decoded pod (the user-visible part of upstream
//! `SetObjectDefaults_Pod`): receives a `Pod` straight from a manifest and fills in the
//! fields the API server would. Pure; emits nothing.

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, HTTPGetAction, Lifecycle, ObjectFieldSelector, Pod,
    PodSecurityContext, PodSpec, Probe, Volume,
};

/// Default file mode of secret/configMap/downwardAPI/projected volumes (0644).
const DEFAULT_MODE: i32 = 0o644;

/// Applies the API server's defaults to `pod` in place.
pub fn set_pod_defaults(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    set_pod_spec_defaults(spec);
}

fn set_pod_spec_defaults(spec: &mut PodSpec) {
    set_if_empty(&mut spec.dns_policy, "ClusterFirst");
    set_if_empty(&mut spec.restart_policy, "Always");
    set_if_empty(&mut spec.scheduler_name, "default-scheduler");
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.enable_service_links.get_or_insert(true);
    let host_network = spec.host_network.unwrap_or(false);

    for c in spec.containers.iter_mut() {
        set_container_defaults(c, host_network);
    }
    for c in spec.init_containers.iter_mut().flatten() {
        set_container_defaults(c, host_network);
    }
    for v in spec.volumes.iter_mut().flatten() {
        set_volume_defaults(v);
    }
}

fn set_if_empty(field: &mut Option<String>, value: &str) {
    if field.as_deref().unwrap_or_default().is_empty() {
        *field = Some(value.to_string());
    }
}

/// Go's zero value counts as unset for these non-pointer int fields.
fn set_if_zero(field: &mut Option<i32>, value: i32) {
    if field.unwrap_or(0) == 0 {
        *field = Some(value);
    }
}

fn set_container_defaults(c: &mut Container, host_network: bool) {
    if c.image_pull_policy
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        let policy = if image_tag_is_latest(c.image.as_deref().unwrap_or_default()) {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.image_pull_policy = Some(policy.to_string());
    }
    set_if_empty(&mut c.termination_message_path, "/dev/termination-log");
    set_if_empty(&mut c.termination_message_policy, "File");
    for p in c.ports.iter_mut().flatten() {
        set_if_empty(&mut p.protocol, "TCP");
        if host_network && p.host_port.unwrap_or(0) == 0 {
            p.host_port = Some(p.container_port);
        }
    }
    for p in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        set_probe_defaults(p);
    }
    if let Some(lc) = &mut c.lifecycle {
        set_lifecycle_defaults(lc);
    }
    for e in c.env.iter_mut().flatten() {
        if let Some(f) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            set_field_selector_defaults(f);
        }
    }
    // Requests default to limits for every resource that has a limit but no request.
    if let Some(res) = &mut c.resources
        && let Some(limits) = &res.limits
    {
        let requests = res.requests.get_or_insert_with(Default::default);
        for (k, v) in limits {
            requests.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// Upstream `SetDefaults_Container`: pull Always when the tag is `latest`, explicitly or
/// implicitly (no tag and no digest); IfNotPresent otherwise (including unparsable names).
fn image_tag_is_latest(image: &str) -> bool {
    if image.is_empty() {
        return false;
    }
    let (name_and_tag, has_digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name_and_tag.rsplit('/').next().unwrap_or(name_and_tag);
    let (repo_last, tag) = match last.split_once(':') {
        Some((r, t)) => (r, Some(t)),
        None => (last, None),
    };
    // A repository path with upper case letters is not a valid reference.
    let path_start = name_and_tag.find('/').map_or(0, |i| i + 1);
    let repo_path = &name_and_tag[path_start..name_and_tag.len() - last.len()];
    if repo_last.chars().any(|c| c.is_ascii_uppercase())
        || (path_start > 0 && repo_path.chars().any(|c| c.is_ascii_uppercase()))
    {
        return false;
    }
    match tag {
        Some(t) => t == "latest",
        None => !has_digest,
    }
}

fn set_probe_defaults(p: &mut Probe) {
    set_if_zero(&mut p.timeout_seconds, 1);
    set_if_zero(&mut p.period_seconds, 10);
    set_if_zero(&mut p.success_threshold, 1);
    set_if_zero(&mut p.failure_threshold, 3);
    if let Some(h) = &mut p.http_get {
        set_http_get_defaults(h);
    }
    if let Some(g) = &mut p.grpc {
        g.service.get_or_insert_with(String::new);
    }
}

fn set_lifecycle_defaults(lc: &mut Lifecycle) {
    for h in [&mut lc.post_start, &mut lc.pre_stop].into_iter().flatten() {
        if let Some(g) = &mut h.http_get {
            set_http_get_defaults(g);
        }
    }
}

fn set_http_get_defaults(h: &mut HTTPGetAction) {
    set_if_empty(&mut h.path, "/");
    set_if_empty(&mut h.scheme, "HTTP");
}

fn set_field_selector_defaults(f: &mut ObjectFieldSelector) {
    set_if_empty(&mut f.api_version, "v1");
}

fn set_volume_defaults(v: &mut Volume) {
    let name = std::mem::take(&mut v.name);
    if *v == (Volume::default()) {
        v.empty_dir = Some(EmptyDirVolumeSource::default());
    }
    v.name = name;
    if let Some(h) = &mut v.host_path {
        h.type_.get_or_insert_with(String::new);
    }
    if let Some(s) = &mut v.secret {
        s.default_mode.get_or_insert(DEFAULT_MODE);
    }
    if let Some(s) = &mut v.config_map {
        s.default_mode.get_or_insert(DEFAULT_MODE);
    }
    if let Some(d) = &mut v.downward_api {
        d.default_mode.get_or_insert(DEFAULT_MODE);
        for item in d.items.iter_mut().flatten() {
            if let Some(f) = &mut item.field_ref {
                set_field_selector_defaults(f);
            }
        }
    }
    if let Some(p) = &mut v.projected {
        p.default_mode.get_or_insert(DEFAULT_MODE);
        for s in p.sources.iter_mut().flatten() {
            if let Some(t) = &mut s.service_account_token {
                t.expiration_seconds.get_or_insert(3600);
            }
            for item in s
                .downward_api
                .iter_mut()
                .flat_map(|d| d.items.iter_mut().flatten())
            {
                if let Some(f) = &mut item.field_ref {
                    set_field_selector_defaults(f);
                }
            }
        }
    }
    if let Some(i) = &mut v.iscsi {
        set_if_empty(&mut i.iscsi_interface, "default");
    }
    if let Some(r) = &mut v.rbd {
        set_if_empty(&mut r.pool, "rbd");
        set_if_empty(&mut r.user, "admin");
        set_if_empty(&mut r.keyring, "/etc/ceph/keyring");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_from(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn pod_spec_defaults() {
        let mut pod = pod_from(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
                "ports": [{"containerPort": 80}],
                "livenessProbe": {"httpGet": {"port": 80}},
                "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 0, "timeoutSeconds": 5},
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}],
                "volumes": [{"name": "v"}]}
        }));
        set_pod_defaults(&mut pod);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.security_context, Some(PodSecurityContext::default()));
        assert_eq!(spec.enable_service_links, Some(true));
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
        let port = &c.ports.as_ref().unwrap()[0];
        assert_eq!(port.protocol.as_deref(), Some("TCP"));
        assert_eq!(port.host_port, None);
        let l = c.liveness_probe.as_ref().unwrap();
        assert_eq!(
            (
                l.timeout_seconds,
                l.period_seconds,
                l.success_threshold,
                l.failure_threshold
            ),
            (Some(1), Some(10), Some(1), Some(3))
        );
        let h = l.http_get.as_ref().unwrap();
        assert_eq!(
            (h.path.as_deref(), h.scheme.as_deref()),
            (Some("/"), Some("HTTP"))
        );
        let r = c.readiness_probe.as_ref().unwrap();
        assert_eq!((r.period_seconds, r.timeout_seconds), (Some(10), Some(5)));
        let req = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(req["cpu"].0, "500m");
        assert_eq!(req["memory"].0, "1Gi");
        let v = &spec.volumes.as_ref().unwrap()[0];
        assert_eq!(v.name, "v");
        assert_eq!(v.empty_dir, Some(EmptyDirVolumeSource::default()));
    }

    #[test]
    fn host_network_defaults_host_ports() {
        let mut pod = pod_from(serde_json::json!({
            "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "x",
                "ports": [{"containerPort": 8080}, {"containerPort": 9090, "hostPort": 9091}]}]}
        }));
        set_pod_defaults(&mut pod);
        let ports = pod.spec.unwrap().containers[0].ports.clone().unwrap();
        assert_eq!(ports[0].host_port, Some(8080));
        assert_eq!(ports[1].host_port, Some(9091));
    }

    #[test]
    fn pull_policy_from_tag() {
        let cases = [
            ("nginx", true),
            ("nginx:latest", true),
            ("nginx:1.27", false),
            ("registry.local:5000/nginx", true),
            ("registry.local:5000/nginx:1.0", false),
            ("nginx@sha256:abcd", false),
            ("nginx:latest@sha256:abcd", true),
            ("", false),
            ("Nginx", false),
        ];
        for (image, latest) in cases {
            assert_eq!(image_tag_is_latest(image), latest, "{image}");
        }
        let mut pod = pod_from(serde_json::json!({
            "spec": {"containers": [{"name": "c", "image": "busybox"},
                                    {"name": "d", "image": "busybox", "imagePullPolicy": "Never"}]}
        }));
        set_pod_defaults(&mut pod);
        let spec = pod.spec.unwrap();
        assert_eq!(
            spec.containers[0].image_pull_policy.as_deref(),
            Some("Always")
        );
        assert_eq!(
            spec.containers[1].image_pull_policy.as_deref(),
            Some("Never")
        );
    }

    #[test]
    fn explicit_values_are_kept() {
        let mut pod = pod_from(serde_json::json!({
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "dnsPolicy": "Default", "enableServiceLinks": false,
                     "containers": [{"name": "c", "image": "x",
                        "terminationMessagePolicy": "FallbackToLogsOnError"}]}
        }));
        set_pod_defaults(&mut pod);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(0));
        assert_eq!(spec.dns_policy.as_deref(), Some("Default"));
        assert_eq!(spec.enable_service_links, Some(false));
        assert_eq!(
            spec.containers[0].termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
    }
}
