//! `authentication.k8s.io/v1 tokenreviews` and `selfsubjectreviews` (`kubectl auth whoami`),
//! `authorization.k8s.io/v1 subjectaccessreviews`: owns the test-configurable answers (a
//! token → user table and an authorizer callback);
//! receives the POSTed review, emits it back with `status` filled (201), as a real API server
//! does. Nothing is stored: reviews are create-only, virtual resources.

use crate::error::ApiError;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Who a token authenticates as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenUser {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// One SubjectAccessReview as the authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessRequest {
    pub user: String,
    pub groups: Vec<String>,
    pub verb: String,
    pub namespace: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// Non-resource requests: the path (resource fields empty).
    pub path: String,
}

/// The decision of the authorizer: allowed, and a reason.
pub type Authorizer = Arc<dyn Fn(&AccessRequest) -> (bool, String) + Send + Sync>;

/// Answers for the review APIs. By default no token is known and only members of
/// `system:masters` are allowed everything.
pub struct Reviews {
    tokens: Mutex<HashMap<String, TokenUser>>,
    authorizer: Mutex<Authorizer>,
}

impl Default for Reviews {
    fn default() -> Self {
        Self {
            tokens: Mutex::new(HashMap::new()),
            authorizer: Mutex::new(Arc::new(|r: &AccessRequest| {
                if r.groups.iter().any(|g| g == "system:masters") {
                    (true, String::new())
                } else {
                    (false, String::new())
                }
            })),
        }
    }
}

impl Reviews {
    /// Makes `token` authenticate as `user`.
    pub fn add_token(&self, token: &str, user: TokenUser) {
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.to_owned(), user);
    }

    /// Replaces the authorizer behind SubjectAccessReviews.
    pub fn set_authorizer(&self, f: Authorizer) {
        *self.authorizer.lock().unwrap_or_else(|e| e.into_inner()) = f;
    }

    fn user_for(&self, token: &str) -> Option<TokenUser> {
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()
    }

    /// `POST tokenreviews`: the review with `status` filled.
    pub fn token_review(&self, mut review: Value) -> Result<Value, ApiError> {
        if !review.is_object() {
            return Err(ApiError::bad_request("TokenReview body must be an object"));
        }
        let token = review["spec"]["token"].as_str().unwrap_or_default();
        if token.is_empty() {
            return Err(ApiError::bad_request(
                "token is required for TokenReview in authentication",
            ));
        }
        let audiences = review["spec"]["audiences"].clone();
        let status = match self.user_for(token) {
            Some(u) => {
                let mut s = json!({
                    "authenticated": true,
                    "user": {"username": u.username, "uid": u.uid, "groups": u.groups},
                });
                if audiences.is_array() {
                    s["audiences"] = audiences;
                }
                s
            }
            None => json!({"user": {}, "error": "invalid bearer token"}),
        };
        review["apiVersion"] = json!("authentication.k8s.io/v1");
        review["kind"] = json!("TokenReview");
        if review.get("metadata").is_none_or(|m| !m.is_object()) {
            review["metadata"] = json!({});
        }
        review["metadata"]["creationTimestamp"] = Value::Null;
        review["status"] = status;
        Ok(review)
    }

    /// `POST subjectaccessreviews`: the review with `status` filled (422 without a subject or
    /// without attributes, as upstream validation).
    pub fn subject_access_review(&self, mut review: Value) -> Result<Value, ApiError> {
        if !review.is_object() {
            return Err(ApiError::bad_request(
                "SubjectAccessReview body must be an object",
            ));
        }
        let spec = &review["spec"];
        let strs = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let ra = &spec["resourceAttributes"];
        let nra = &spec["nonResourceAttributes"];
        let req = AccessRequest {
            user: s(&spec["user"]),
            groups: strs(&spec["groups"]),
            verb: if ra.is_object() {
                s(&ra["verb"])
            } else {
                s(&nra["verb"])
            },
            namespace: s(&ra["namespace"]),
            group: s(&ra["group"]),
            resource: s(&ra["resource"]),
            subresource: s(&ra["subresource"]),
            name: s(&ra["name"]),
            path: s(&nra["path"]),
        };
        if req.user.is_empty() && req.groups.is_empty() {
            return Err(ApiError::invalid(
                "SubjectAccessReview",
                "",
                "spec.user: Invalid value: \"\": at least one of user or group must be specified",
            ));
        }
        if ra.is_object() == nra.is_object() {
            return Err(ApiError::invalid(
                "SubjectAccessReview",
                "",
                "spec.resourceAttributes: Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
        let f = self
            .authorizer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (allowed, reason) = f(&req);
        let mut status = json!({"allowed": allowed});
        if !reason.is_empty() {
            status["reason"] = json!(reason);
        }
        review["apiVersion"] = json!("authorization.k8s.io/v1");
        review["kind"] = json!("SubjectAccessReview");
        if review.get("metadata").is_none_or(|m| !m.is_object()) {
            review["metadata"] = json!({});
        }
        review["metadata"]["creationTimestamp"] = Value::Null;
        review["status"] = status;
        Ok(review)
    }
}

/// `POST selfsubjectreviews`: who the caller is (upstream `SelfSubjectReview`).
pub fn self_subject_review(
    mut review: Value,
    user: Option<&crate::authn::UserInfo>,
) -> Result<Value, ApiError> {
    if !review.is_object() {
        return Err(ApiError::bad_request(
            "SelfSubjectReview body must be an object",
        ));
    }
    let user = user.cloned().unwrap_or_default();
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    review["apiVersion"] = json!("authentication.k8s.io/v1");
    review["kind"] = json!("SelfSubjectReview");
    review["metadata"] = json!({"creationTimestamp": null});
    review["status"] = json!({"userInfo": info});
    Ok(review)
}

/// Review resources for discovery: (group, version, plural, kind).
pub const REVIEW_RESOURCES: &[(&str, &str, &str, &str)] = &[
    ("authentication.k8s.io", "v1", "tokenreviews", "TokenReview"),
    (
        "authentication.k8s.io",
        "v1",
        "selfsubjectreviews",
        "SelfSubjectReview",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_review_fills_status_from_the_table() {
        let r = Reviews::default();
        r.add_token(
            "t1",
            TokenUser {
                username: "alice".into(),
                uid: "u".into(),
                groups: vec!["devs".into()],
            },
        );
        let out = r
            .token_review(json!({"spec": {"token": "t1"}}))
            .expect("review");
        assert_eq!(out["status"]["authenticated"], true);
        assert_eq!(out["status"]["user"]["username"], "alice");
        assert_eq!(out["status"]["user"]["groups"][0], "devs");
        assert_eq!(out["kind"], "TokenReview");
        let out = r
            .token_review(json!({"spec": {"token": "nope"}}))
            .expect("review");
        assert_eq!(out["status"]["authenticated"], Value::Null);
        assert!(r.token_review(json!({"spec": {}})).is_err());
    }

    #[test]
    fn subject_access_review_uses_the_authorizer() {
        let r = Reviews::default();
        let sar = |user: &str, groups: Value| {
            json!({"spec": {"user": user, "groups": groups, "resourceAttributes": {
                "verb": "get", "resource": "nodes", "subresource": "proxy", "name": "n1"}}})
        };
        let out = r
            .subject_access_review(sar("admin", json!(["system:masters"])))
            .expect("sar");
        assert_eq!(out["status"]["allowed"], true);
        let out = r.subject_access_review(sar("bob", json!([]))).expect("sar");
        assert_eq!(out["status"]["allowed"], false);
        r.set_authorizer(Arc::new(|q: &AccessRequest| {
            (
                q.user == "bob" && q.subresource == "proxy",
                "rule".to_owned(),
            )
        }));
        let out = r.subject_access_review(sar("bob", json!([]))).expect("sar");
        assert_eq!(out["status"]["allowed"], true);
        assert_eq!(out["status"]["reason"], "rule");
        let err = r
            .subject_access_review(json!({"spec": {"user": "", "resourceAttributes": {}}}))
            .expect_err("no subject");
        assert_eq!(err.code, 422);
    }
}
