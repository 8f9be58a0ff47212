//! API errors: owns the mapping from failures to HTTP codes; emits `metav1.Status` JSON bodies.

use serde_json::{Value, json};

/// An error returned to an API client as a `metav1.Status` object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason` (`NotFound`, `AlreadyExists`, `Conflict`, ...).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Resource plural (for `details.kind`) if known.
    pub kind: Option<String>,
    /// Object name (for `details.name`) if known.
    pub name: Option<String>,
    /// `details.causes` as (reason, message, field).
    pub causes: Vec<(&'static str, String, String)>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String) -> Self {
        ApiError {
            code,
            reason,
            message,
            kind: None,
            name: None,
            causes: Vec::new(),
        }
    }

    fn with_details(mut self, resource: &str, name: &str) -> Self {
        self.kind = Some(resource.to_string());
        self.name = Some(name.to_string());
        self
    }

    /// 404 for an object that does not exist.
    pub fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
            .with_details(resource, name)
    }

    /// 404 for a path the server does not serve.
    pub fn path_not_found(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409 on create of an existing object.
    pub fn already_exists(resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
        .with_details(resource, name)
    }

    /// 409 on a stale resourceVersion or failed precondition.
    pub fn conflict(resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        )
        .with_details(resource, name)
    }

    /// 422 for an invalid object; `why` reads `field: Kind: detail` as upstream field errors.
    pub fn invalid(kind: &str, name: &str, why: &str) -> Self {
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {why}"),
        )
        .with_details(kind, name);
        let (field, message) = why.split_once(": ").unwrap_or(("", why));
        let reason = if message.starts_with("Forbidden") {
            "FieldValueForbidden"
        } else if message.starts_with("Required value") {
            "FieldValueRequired"
        } else {
            "FieldValueInvalid"
        };
        e.causes
            .push((reason, message.to_string(), field.to_string()));
        e
    }

    /// 422 for an invalid object with several field errors, each `(reason, body, field)` as
    /// upstream's `field.Error` (`FieldValueDuplicate`, `Duplicate value: "x"`,
    /// `spec.a[0].name`); the message aggregates them as upstream (`[e1, e2]` when several).
    pub fn invalid_causes(
        kind: &str,
        name: &str,
        causes: Vec<(&'static str, String, String)>,
    ) -> Self {
        let mut parts: Vec<String> = Vec::new();
        for (_, body, field) in &causes {
            let part = format!("{field}: {body}");
            if !parts.contains(&part) {
                parts.push(part);
            }
        }
        let why = match parts.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {why}"),
        )
        .with_details(kind, name);
        e.causes = causes;
        e
    }

    /// 400 for a malformed request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into())
    }

    /// 401 for a request without valid credentials.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".to_string())
    }

    /// 403 from the authorizer; `details` is (qualified resource, group, name) for resource
    /// requests.
    pub fn forbidden(details: Option<(&str, &str, &str)>, message: &str) -> Self {
        let e = Self::new(403, "Forbidden", message.to_string());
        match details {
            Some((resource, group, name)) => {
                let plural = match resource.strip_suffix(group) {
                    Some(p) if !group.is_empty() => p.trim_end_matches('.'),
                    _ => resource,
                };
                e.with_details(plural, name)
            }
            None => e,
        }
    }

    /// 405 for an unsupported verb.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// 410 for a watch or continue token that is too old.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message.into())
    }

    /// 504 for a watch from a resourceVersion the server has not reached.
    pub fn too_large_resource_version(rv: u64, current: u64) -> Self {
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {rv}, current: {current}"),
        );
        e.causes.push((
            "ResourceVersionTooLarge",
            "Too large resource version".to_string(),
            String::new(),
        ));
        e
    }

    /// 415 for an unsupported patch content type.
    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {ct})"
            ),
        )
    }

    /// A failure injected by a test (`FakeApiServer::fail_requests`).
    pub fn injected(code: u16) -> Self {
        let reason = match code {
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(code, reason, format!("injected failure (HTTP {code})"))
    }

    /// 500 for an internal failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message.into())
    }

    /// The `metav1.Status` body for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.kind.is_some() || self.name.is_some() || !self.causes.is_empty() {
            status["details"] = json!({});
            if let Some(n) = &self.name {
                status["details"]["name"] = json!(n);
            }
            if let Some(k) = &self.kind {
                status["details"]["kind"] = json!(k);
            }
            if !self.causes.is_empty() {
                let causes: Vec<Value> = self
                    .causes
                    .iter()
                    .map(|(reason, message, field)| {
                        json!({"reason": reason, "message": message, "field": field})
                    })
                    .collect();
                status["details"]["causes"] = json!(causes);
            }
        }
        status
    }
}
