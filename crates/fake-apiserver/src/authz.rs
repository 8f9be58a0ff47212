//! Authorization: owns the fixture's (small) policy; receives the authenticated user and the
//! request's attributes (upstream `authorizer.Attributes`, derived from method, path and
//! query as the request-info resolver does), emits allow or a 403 `Forbidden` Status worded as
//! RBAC's. The policy: bootstrap token users (`system:bootstrappers`) get only what upstream's
//! `system:node-bootstrapper` ClusterRole grants (create/get/list/watch
//! certificatesigningrequests) plus discovery; every other authenticated user may do anything.

use crate::authn::{BOOTSTRAPPERS, MASTERS, UserInfo};
use crate::error::ApiError;
use std::collections::HashMap;

/// What a request does (upstream `authorizer.AttributesRecord`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// Whether this is a resource request (else a non-resource path).
    pub resource_request: bool,
    /// API group ("" for core).
    pub group: String,
    /// Resource plural.
    pub resource: String,
    /// Subresource ("" for none).
    pub subresource: String,
    /// Namespace ("" for cluster scope).
    pub namespace: String,
    /// Object name ("" for collections).
    pub name: String,
    /// Request path.
    pub path: String,
}

/// Derives the attributes of a request (upstream `RequestInfoFactory`).
pub fn attributes(method: &str, path: &str, query: &HashMap<String, String>) -> Attributes {
    let clean = path.trim_end_matches('/');
    let segs: Vec<&str> = clean.trim_matches('/').split('/').collect();
    let non_resource = |verb: &str| Attributes {
        verb: verb.to_owned(),
        path: clean.to_owned(),
        ..Attributes::default()
    };
    let lower = method.to_ascii_lowercase();
    let (group, rest) = match segs.as_slice() {
        ["api", _v, rest @ ..] if !rest.is_empty() => ("", rest),
        ["apis", g, _v, rest @ ..] if !rest.is_empty() => (*g, rest),
        _ => {
            let verb = match method {
                "GET" | "HEAD" => "get",
                "POST" => "post",
                "PUT" => "put",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => lower.as_str(),
            };
            return non_resource(verb);
        }
    };
    let (namespace, resource, name, subresource) = match rest {
        ["namespaces", ns, sub @ ("status" | "finalize")] => (*ns, "namespaces", *ns, *sub),
        ["namespaces", ns, parts @ ..] if !parts.is_empty() => (
            *ns,
            parts[0],
            parts.get(1).copied().unwrap_or_default(),
            parts.get(2).copied().unwrap_or_default(),
        ),
        ["namespaces", ns] => (*ns, "namespaces", *ns, ""),
        parts => (
            "",
            parts.first().copied().unwrap_or_default(),
            parts.get(1).copied().unwrap_or_default(),
            parts.get(2).copied().unwrap_or_default(),
        ),
    };
    let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (method, name.is_empty()) {
        ("GET" | "HEAD", true) if watch => "watch",
        ("GET" | "HEAD", true) => "list",
        ("GET" | "HEAD", false) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "deletecollection",
        ("DELETE", false) => "delete",
        _ => lower.as_str(),
    };
    Attributes {
        verb: verb.to_owned(),
        resource_request: true,
        group: group.to_owned(),
        resource: resource.to_owned(),
        subresource: subresource.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        path: clean.to_owned(),
    }
}

/// Non-resource paths every authenticated user may GET (upstream `system:discovery`,
/// `system:public-info-viewer`, `system:basic-user`).
fn discovery_path(path: &str) -> bool {
    matches!(
        path,
        "" | "/" | "/api" | "/apis" | "/version" | "/healthz" | "/livez" | "/readyz"
    ) || path.starts_with("/api/")
        || path.starts_with("/apis/")
        || path.starts_with("/openapi/")
}

/// Upstream `system:node-bootstrapper`: certificatesigningrequests create/get/list/watch.
fn node_bootstrapper_allows(a: &Attributes) -> bool {
    a.resource_request
        && a.group == "certificates.k8s.io"
        && a.resource == "certificatesigningrequests"
        && a.subresource.is_empty()
        && matches!(a.verb.as_str(), "create" | "get" | "list" | "watch")
}

/// Whether `user` may do `a`.
pub fn allowed(user: &UserInfo, a: &Attributes) -> bool {
    if user.in_group(MASTERS) || !user.in_group(BOOTSTRAPPERS) {
        return true;
    }
    if !a.resource_request {
        return a.verb == "get" && discovery_path(&a.path);
    }
    // `system:basic-user`: every authenticated user may ask who they are.
    let whoami = a.group == "authentication.k8s.io"
        && a.resource == "selfsubjectreviews"
        && a.verb == "create";
    whoami || node_bootstrapper_allows(a)
}

/// Allow, or the 403 RBAC would answer.
pub fn authorize(user: &UserInfo, a: &Attributes) -> Result<(), ApiError> {
    if allowed(user, a) {
        return Ok(());
    }
    let u = &user.name;
    if !a.resource_request {
        return Err(ApiError::forbidden(
            None,
            &format!(
                "forbidden: User \"{u}\" cannot {} path \"{}\"",
                a.verb, a.path
            ),
        ));
    }
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let qualified = if a.group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    let subject = if a.name.is_empty() {
        qualified.clone()
    } else {
        format!("{qualified} \"{}\"", a.name)
    };
    Err(ApiError::forbidden(
        Some((&qualified, &a.group, &a.name)),
        &format!(
            "{subject} is forbidden: User \"{u}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            a.verb, a.group
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: &str, path: &str, watch: bool) -> Attributes {
        let mut q = HashMap::new();
        if watch {
            q.insert("watch".to_owned(), "true".to_owned());
        }
        attributes(method, path, &q)
    }

    #[test]
    fn request_info_like_upstream() {
        let a = attrs("GET", "/api/v1/namespaces/default/pods", true);
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.namespace.as_str()),
            ("watch", "pods", "default")
        );
        let a = attrs(
            "PUT",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/c1/approval",
            false,
        );
        assert_eq!(
            (a.verb.as_str(), a.name.as_str(), a.subresource.as_str()),
            ("update", "c1", "approval")
        );
        let a = attrs("DELETE", "/api/v1/namespaces/kube-system", false);
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.name.as_str()),
            ("delete", "namespaces", "kube-system")
        );
        let a = attrs("PUT", "/api/v1/namespaces/ns1/finalize", false);
        assert_eq!(
            (a.resource.as_str(), a.name.as_str(), a.subresource.as_str()),
            ("namespaces", "ns1", "finalize")
        );
        let a = attrs("GET", "/apis/certificates.k8s.io/v1", false);
        assert!(!a.resource_request);
    }

    #[test]
    fn bootstrappers_get_only_the_node_bootstrapper_role() {
        let boot = UserInfo::new("system:bootstrap:abcdef", vec![BOOTSTRAPPERS.to_owned()]);
        let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
        let one = format!("{csrs}/c1");
        let approval = format!("{csrs}/c1/approval");
        let status = format!("{csrs}/c1/status");
        for (method, path, watch, ok) in [
            ("POST", csrs, false, true),
            ("GET", csrs, false, true),
            ("GET", csrs, true, true),
            ("GET", one.as_str(), false, true),
            ("PUT", approval.as_str(), false, false),
            ("PUT", status.as_str(), false, false),
            ("DELETE", one.as_str(), false, false),
            ("PATCH", one.as_str(), false, false),
            (
                "GET",
                "/api/v1/namespaces/kube-system/secrets",
                false,
                false,
            ),
            ("POST", "/api/v1/nodes", false, false),
            ("GET", "/api", false, true),
            ("GET", "/apis/certificates.k8s.io/v1", false, true),
            (
                "POST",
                "/apis/authentication.k8s.io/v1/tokenreviews",
                false,
                false,
            ),
            (
                "POST",
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                false,
                true,
            ),
        ] {
            let a = attrs(method, path, watch);
            assert_eq!(allowed(&boot, &a), ok, "{method} {path} watch={watch}");
        }
        let node = UserInfo::new("system:node:n1", vec!["system:nodes".to_owned()]);
        assert!(allowed(&node, &attrs("POST", "/api/v1/nodes", false)));
        assert!(allowed(&UserInfo::admin(), &attrs("DELETE", csrs, false)));
    }

    #[test]
    fn forbidden_message_reads_like_rbac() {
        let boot = UserInfo::new("system:bootstrap:abcdef", vec![BOOTSTRAPPERS.to_owned()]);
        let e = authorize(
            &boot,
            &attrs("GET", "/api/v1/namespaces/kube-system/secrets", false),
        )
        .expect_err("forbidden");
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "secrets is forbidden: User \"system:bootstrap:abcdef\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
        );
        let e = authorize(
            &boot,
            &attrs(
                "PUT",
                "/apis/certificates.k8s.io/v1/certificatesigningrequests/c1/approval",
                false,
            ),
        )
        .expect_err("forbidden");
        assert_eq!(
            e.message,
            "certificatesigningrequests.certificates.k8s.io \"c1\" is forbidden: User \"system:bootstrap:abcdef\" cannot update resource \"certificatesigningrequests/approval\" in API group \"certificates.k8s.io\" at the cluster scope"
        );
    }
}
