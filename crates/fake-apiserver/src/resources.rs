//! Resource table: owns the list of served resources; emits discovery documents
//! (`/api`, `/api/v1`, `/apis`, `/apis/<group>/<version>`, `/version`).

use serde_json::{Value, json};

/// A resource served by the fake API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group ("" for core).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Plural resource name (path segment).
    pub plural: &'static str,
    /// Singular name.
    pub singular: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Whether a `/status` subresource exists.
    pub has_status: bool,
    /// Short names for kubectl.
    pub short_names: &'static [&'static str],
}

impl ResourceInfo {
    /// `apiVersion` of objects of this resource.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Name used in error messages (`pods`, `leases.coordination.k8s.io`).
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

#[allow(clippy::too_many_arguments)]
const fn res(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    has_status: bool,
    short_names: &'static [&'static str],
) -> ResourceInfo {
    ResourceInfo {
        group,
        version,
        plural,
        singular,
        kind,
        namespaced,
        has_status,
        short_names,
    }
}

/// Every resource the server serves.
pub const RESOURCES: &[ResourceInfo] = &[
    res(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        false,
        true,
        &["ns"],
    ),
    res("", "v1", "nodes", "node", "Node", false, true, &["no"]),
    res("", "v1", "pods", "pod", "Pod", true, true, &["po"]),
    res("", "v1", "events", "event", "Event", true, false, &["ev"]),
    res(
        "",
        "v1",
        "configmaps",
        "configmap",
        "ConfigMap",
        true,
        false,
        &["cm"],
    ),
    res("", "v1", "secrets", "secret", "Secret", true, false, &[]),
    res(
        "",
        "v1",
        "services",
        "service",
        "Service",
        true,
        true,
        &["svc"],
    ),
    res(
        "",
        "v1",
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
        true,
        false,
        &["sa"],
    ),
    res(
        "coordination.k8s.io",
        "v1",
        "leases",
        "lease",
        "Lease",
        true,
        false,
        &[],
    ),
    res(
        "events.k8s.io",
        "v1",
        "events",
        "event",
        "Event",
        true,
        false,
        &["ev"],
    ),
    res(
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        "certificatesigningrequest",
        "CertificateSigningRequest",
        false,
        true,
        &["csr"],
    ),
    res(
        "node.k8s.io",
        "v1",
        "runtimeclasses",
        "runtimeclass",
        "RuntimeClass",
        false,
        false,
        &[],
    ),
];

/// Looks up a resource by group, version and plural.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Groups other than core, in discovery order.
pub fn groups() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in RESOURCES {
        if !r.group.is_empty() && !out.contains(&r.group) {
            out.push(r.group);
        }
    }
    for (g, ..) in crate::reviews::REVIEW_RESOURCES {
        if !out.contains(g) {
            out.push(g);
        }
    }
    out
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `APIResourceList` for one group version.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let mut items = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        items.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
            "shortNames": r.short_names,
            "categories": if matches!(r.plural, "pods" | "services") && r.group.is_empty() { vec!["all"] } else { Vec::new() },
        }));
        if r.has_status {
            items.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if r.plural == "pods" && r.group.is_empty() {
            items.push(json!({
                "name": "pods/resize",
                "singularName": "",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["get", "patch", "update"],
            }));
            items.push(json!({
                "name": "pods/log",
                "singularName": "",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["get"],
            }));
            items.push(json!({
                "name": "pods/ephemeralcontainers",
                "singularName": "",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if r.plural == "certificatesigningrequests" {
            items.push(json!({
                "name": "certificatesigningrequests/approval",
                "singularName": "",
                "namespaced": false,
                "kind": "CertificateSigningRequest",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if r.plural == "serviceaccounts" {
            items.push(json!({
                "name": "serviceaccounts/token",
                "singularName": "",
                "namespaced": true,
                "group": "authentication.k8s.io",
                "version": "v1",
                "kind": "TokenRequest",
                "verbs": ["create"],
            }));
        }
    }
    for (g, v, plural, kind) in crate::reviews::REVIEW_RESOURCES {
        if *g == group && *v == version {
            items.push(json!({
                "name": plural,
                "singularName": kind.to_lowercase(),
                "namespaced": false,
                "kind": kind,
                "verbs": ["create"],
            }));
        }
    }
    if items.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": items,
    }))
}

/// `APIVersions` for `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// `APIGroup` for one group.
pub fn group_doc(group: &str) -> Option<Value> {
    let version = RESOURCES
        .iter()
        .find(|r| r.group == group && !group.is_empty())
        .map(|r| r.version)
        .or_else(|| {
            crate::reviews::REVIEW_RESOURCES
                .iter()
                .find(|(g, ..)| *g == group)
                .map(|(_, v, ..)| *v)
        })?;
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    Some(json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [gv.clone()],
        "preferredVersion": gv,
    }))
}

/// `APIGroupList` for `/apis`.
pub fn group_list() -> Value {
    let groups: Vec<Value> = groups()
        .into_iter()
        .filter_map(|g| {
            let mut doc = group_doc(g)?;
            if let Some(o) = doc.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            Some(doc)
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/version` document.
pub fn version_doc() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_lists_status_and_token_subresources() {
        let core = resource_list("", "v1").expect("core list");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        for n in [
            "pods",
            "pods/status",
            "pods/resize",
            "pods/ephemeralcontainers",
            "nodes/status",
            "serviceaccounts/token",
        ] {
            assert!(names.contains(&n), "missing {n}");
        }
        assert!(resource_list("coordination.k8s.io", "v1").is_some());
        assert!(resource_list("apps", "v1").is_none());
        assert_eq!(group_list()["groups"][0]["name"], "coordination.k8s.io");
    }
}
