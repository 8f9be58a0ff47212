//! Authentication (upstream `apiserver/pkg/authentication` + the bootstrap token
//! authenticator of `plugin/pkg/auth/authenticator/token/bootstrap`): owns the request's
//! [`UserInfo`]; receives a verified client certificate or a bearer token, emits who the caller
//! is (or nothing, which the HTTP layer answers with 401).

use crate::store::Store;
use serde_json::Value;
use x509_parser::prelude::FromDer as _;

/// The group every authenticated user gets.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of bootstrap token users.
pub const BOOTSTRAPPERS: &str = "system:bootstrappers";
/// The group that may do anything.
pub const MASTERS: &str = "system:masters";
/// Name prefix of bootstrap token Secrets in `kube-system`.
pub const BOOTSTRAP_SECRET_PREFIX: &str = "bootstrap-token-";
/// Secret type of bootstrap tokens.
pub const BOOTSTRAP_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";

/// Who made a request (upstream `user.Info`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// User name (`admin`, `system:node:n1`, `system:bootstrap:abcdef`).
    pub name: String,
    /// UID ("" for certificate and bootstrap token users).
    pub uid: String,
    /// Groups, `system:authenticated` included.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user with `groups` plus `system:authenticated` (as upstream's group adder).
    pub fn new(name: impl Into<String>, groups: Vec<String>) -> Self {
        let mut groups = groups;
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups,
        }
    }

    /// The fixture's admin (admin token, admin client certificate).
    pub fn admin() -> Self {
        Self::new("admin", vec![MASTERS.to_owned()])
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// The identity in a client certificate that already passed chain verification: CN is the
/// user name, each O a group (upstream `x509.CommonNameUserConversion`).
pub fn user_from_certificate(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    if name.is_empty() {
        return None;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some(UserInfo::new(name, groups))
}

/// Splits `<id>.<secret>` (upstream `bootstraptokenutil.ParseToken`: a 6-character id and a
/// 16-character secret, lowercase letters and digits).
pub fn parse_bootstrap_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

/// A bootstrap token as kubeadm writes it (`kubeadm token create`): the Secret
/// `kube-system/bootstrap-token-<id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    /// 6 characters `[a-z0-9]`.
    pub id: String,
    /// 16 characters `[a-z0-9]`.
    pub secret: String,
    /// `expiration` (None: never).
    pub expiration: Option<chrono::DateTime<chrono::Utc>>,
    /// `usage-bootstrap-authentication: "true"` (false leaves the key out).
    pub usage_authentication: bool,
    /// `auth-extra-groups` (each `system:bootstrappers:…`).
    pub extra_groups: Vec<String>,
}

impl BootstrapToken {
    /// A token usable for authentication with kubeadm's default extra group
    /// `system:bootstrappers:kubeadm:default-node-token`, expiring in 24 h as kubeadm's default.
    pub fn new(id: &str, secret: &str) -> Self {
        BootstrapToken {
            id: id.to_owned(),
            secret: secret.to_owned(),
            expiration: Some(chrono::Utc::now() + chrono::Duration::hours(24)),
            usage_authentication: true,
            extra_groups: vec!["system:bootstrappers:kubeadm:default-node-token".to_owned()],
        }
    }

    /// `<id>.<secret>`, what a kubeconfig's `token:` holds.
    pub fn token(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    /// The Secret object (create it in `kube-system`).
    pub fn secret_object(&self) -> Value {
        let mut data = serde_json::Map::new();
        data.insert("token-id".into(), self.id.clone().into());
        data.insert("token-secret".into(), self.secret.clone().into());
        if self.usage_authentication {
            data.insert("usage-bootstrap-authentication".into(), "true".into());
            data.insert("usage-bootstrap-signing".into(), "true".into());
        }
        if let Some(exp) = self.expiration {
            let t = exp.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            data.insert("expiration".into(), t.into());
        }
        if !self.extra_groups.is_empty() {
            data.insert(
                "auth-extra-groups".into(),
                self.extra_groups.join(",").into(),
            );
        }
        serde_json::json!({
            "metadata": {"name": format!("{BOOTSTRAP_SECRET_PREFIX}{}", self.id), "namespace": "kube-system"},
            "type": BOOTSTRAP_SECRET_TYPE,
            "stringData": data,
        })
    }
}

fn secret_data(secret: &Value, key: &str) -> Option<String> {
    use base64::Engine as _;
    let raw = secret["data"][key].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(raw).ok()?;
    String::from_utf8(bytes).ok()
}

/// Upstream `ValidateBootstrapGroupName`: `system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`.
fn valid_extra_group(g: &str) -> bool {
    let Some(rest) = g.strip_prefix("system:bootstrappers:") else {
        return false;
    };
    !rest.is_empty()
        && rest.len() <= 256
        && rest
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
        && rest
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Why a bootstrap token did not authenticate (only logged, as upstream; the client sees 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootstrapTokenError {
    /// Not `<6>.<16>` lowercase alphanumerics.
    #[error("not a bootstrap token")]
    Malformed,
    /// No Secret `kube-system/bootstrap-token-<id>`.
    #[error("no secret {0} to match bootstrap bearer token")]
    NoSecret(String),
    /// The Secret is being deleted.
    #[error("bootstrap secret {0} is deleted and awaiting removal")]
    Deleted(String),
    /// Wrong Secret type.
    #[error("bootstrap secret {0} has invalid type, expected {BOOTSTRAP_SECRET_TYPE}")]
    WrongType(String),
    /// `token-secret` or `token-id` does not match.
    #[error("bootstrap secret {0} has an invalid value for key {1}")]
    Mismatch(String, &'static str),
    /// `expiration` is in the past or unparseable.
    #[error("bootstrap secret {0} has expired")]
    Expired(String),
    /// `usage-bootstrap-authentication` is not `true`.
    #[error("bootstrap secret {0} not marked usage-bootstrap-authentication=true")]
    NotForAuthentication(String),
    /// `auth-extra-groups` names a group outside `system:bootstrappers:`.
    #[error("bootstrap secret {0} has an invalid value for key auth-extra-groups: {1:?}")]
    BadGroup(String, String),
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Upstream's bootstrap token authenticator: `<id>.<secret>` against the Secret
/// `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token`. The user is
/// `system:bootstrap:<id>` in `system:bootstrappers` plus the Secret's `auth-extra-groups`.
pub fn authenticate_bootstrap_token(
    store: &Store,
    token: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<UserInfo, BootstrapTokenError> {
    let (id, secret) = parse_bootstrap_token(token).ok_or(BootstrapTokenError::Malformed)?;
    let name = format!("{BOOTSTRAP_SECRET_PREFIX}{id}");
    let info = crate::resources::find("", "v1", "secrets")
        .ok_or_else(|| BootstrapTokenError::NoSecret(name.clone()))?;
    let obj = store
        .get(info, "kube-system", &name)
        .map_err(|_| BootstrapTokenError::NoSecret(name.clone()))?;
    if !obj["metadata"]["deletionTimestamp"].is_null() {
        return Err(BootstrapTokenError::Deleted(name));
    }
    if obj["type"] != BOOTSTRAP_SECRET_TYPE || !obj["data"].is_object() {
        return Err(BootstrapTokenError::WrongType(name));
    }
    let stored_secret = secret_data(&obj, "token-secret").unwrap_or_default();
    if !constant_time_eq(stored_secret.as_bytes(), secret.as_bytes()) {
        return Err(BootstrapTokenError::Mismatch(name, "token-secret"));
    }
    if secret_data(&obj, "token-id").as_deref() != Some(id) {
        return Err(BootstrapTokenError::Mismatch(name, "token-id"));
    }
    if let Some(exp) = secret_data(&obj, "expiration") {
        let expired = chrono::DateTime::parse_from_rfc3339(exp.trim())
            .map(|t| now > t.with_timezone(&chrono::Utc))
            .unwrap_or(true);
        if expired {
            return Err(BootstrapTokenError::Expired(name));
        }
    }
    if secret_data(&obj, "usage-bootstrap-authentication").as_deref() != Some("true") {
        return Err(BootstrapTokenError::NotForAuthentication(name));
    }
    let mut groups = vec![BOOTSTRAPPERS.to_owned()];
    if let Some(extra) = secret_data(&obj, "auth-extra-groups") {
        for g in extra.split(',').map(str::trim) {
            if !valid_extra_group(g) {
                return Err(BootstrapTokenError::BadGroup(name, g.to_owned()));
            }
            if !groups.iter().any(|x| x == g) {
                groups.push(g.to_owned());
            }
        }
    }
    groups.sort();
    Ok(UserInfo::new(format!("system:bootstrap:{id}"), groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn store_with(data: Value, ty: &str) -> std::sync::Arc<Store> {
        let store = Store::new(100);
        let info = crate::resources::find("", "v1", "secrets").expect("secrets");
        store
            .create(
                info,
                "kube-system",
                json!({"metadata": {"name": "bootstrap-token-abcdef"}, "type": ty, "data": data}),
            )
            .expect("secret");
        store
    }

    fn good() -> Value {
        json!({
            "token-id": b64("abcdef"),
            "token-secret": b64("0123456789abcdef"),
            "usage-bootstrap-authentication": b64("true"),
            "auth-extra-groups": b64("system:bootstrappers:kubeadm:default-node-token"),
            "expiration": b64("2999-01-01T00:00:00Z"),
        })
    }

    const TOKEN: &str = "abcdef.0123456789abcdef";

    #[test]
    fn token_format() {
        assert_eq!(
            parse_bootstrap_token(TOKEN),
            Some(("abcdef", "0123456789abcdef"))
        );
        for bad in [
            "abcdef0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef.0123456789abcdef.x",
        ] {
            assert_eq!(parse_bootstrap_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn valid_token_is_a_bootstrapper_with_extra_groups() {
        let store = store_with(good(), BOOTSTRAP_SECRET_TYPE);
        let u = authenticate_bootstrap_token(&store, TOKEN, chrono::Utc::now()).expect("user");
        assert_eq!(u.name, "system:bootstrap:abcdef");
        assert_eq!(
            u.groups,
            vec![
                "system:bootstrappers",
                "system:bootstrappers:kubeadm:default-node-token",
                "system:authenticated"
            ]
        );
    }

    #[test]
    fn every_upstream_rejection() {
        let now = chrono::Utc::now();
        let with = |k: &str, v: Option<&str>| {
            let mut d = good();
            match v {
                Some(v) => d[k] = json!(b64(v)),
                None => {
                    d.as_object_mut().map(|m| m.remove(k));
                }
            }
            d
        };
        let cases = [
            (
                with("token-secret", Some("ffffffffffffffff")),
                "token-secret",
            ),
            (with("token-id", Some("zzzzzz")), "token-id"),
            (with("expiration", Some("2001-01-01T00:00:00Z")), "expired"),
            (with("expiration", Some("tomorrow")), "expired"),
            (
                with("usage-bootstrap-authentication", Some("false")),
                "usage",
            ),
            (with("usage-bootstrap-authentication", None), "usage"),
            (with("auth-extra-groups", Some("system:masters")), "groups"),
        ];
        for (data, what) in cases {
            let store = store_with(data, BOOTSTRAP_SECRET_TYPE);
            let err = authenticate_bootstrap_token(&store, TOKEN, now).expect_err(what);
            let ok = match what {
                "token-secret" => {
                    err == BootstrapTokenError::Mismatch(
                        "bootstrap-token-abcdef".into(),
                        "token-secret",
                    )
                }
                "token-id" => matches!(err, BootstrapTokenError::Mismatch(_, "token-id")),
                "expired" => matches!(err, BootstrapTokenError::Expired(_)),
                "usage" => matches!(err, BootstrapTokenError::NotForAuthentication(_)),
                _ => matches!(err, BootstrapTokenError::BadGroup(..)),
            };
            assert!(ok, "{what}: {err:?}");
        }
        let store = store_with(good(), "Opaque");
        assert!(matches!(
            authenticate_bootstrap_token(&store, TOKEN, now),
            Err(BootstrapTokenError::WrongType(_))
        ));
        assert!(matches!(
            authenticate_bootstrap_token(&store, "zzzzzz.0123456789abcdef", now),
            Err(BootstrapTokenError::NoSecret(_))
        ));
    }
}
