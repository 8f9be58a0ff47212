//! Request authorization for the kubelet's HTTPS port (upstream `pkg/kubelet/server/auth.go`
//! plus the webhook authorizer). Owns the SubjectAccessReview answer cache; receives the user,
//! the request's method and its parsed route (never the raw path); emits allowed / forbidden
//! (with upstream's 403 text).
//!
//! Mapping as upstream (with fine-grained kubelet authz): resource `nodes`, name = node name,
//! verb from the HTTP method; subresource `stats`/`metrics`/`log`/`spec`/`checkpoint` by the
//! parsed route's root, `pods`, `healthz`, `configz` for those endpoints with `proxy` as the
//! fallback checked second, and `proxy` for everything else (malformed paths included). As
//! upstream, the verb of `/exec`, `/attach` and `/portForward` follows the method too, so a
//! websocket upgrade (HTTP GET) needs only `get` on `nodes/proxy` (upstream documents this
//! rather than changing it).

use std::sync::Arc;
use std::time::Duration;

use http::Method;

use super::authn::{LOCAL_ADMINS_GROUP, UserInfo};
use super::cache::ReviewCache;
use super::path::Route;
use super::review::ReviewApi;

/// What a request asks for, in API terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub node_name: String,
    /// Checked in order; any one allowed is enough.
    pub subresources: &'static [&'static str],
}

/// Upstream `GetRequestAttributes`, from the parsed route (never the raw path): the verb
/// from the method, the subresources from the route's root.
pub fn request_attributes(method: &Method, route: &Route, node_name: &str) -> Attributes {
    let verb = match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    Attributes {
        verb: verb.to_owned(),
        node_name: node_name.to_owned(),
        subresources: route.root().subresources(),
    }
}

/// Upstream's 403 body.
pub fn forbidden_message(user: &UserInfo, attrs: &Attributes) -> String {
    format!(
        "Forbidden (user={}, verb={}, resource=nodes, subresource(s)=[{}])\n",
        user.name,
        attrs.verb,
        attrs.subresources.join(" ")
    )
}

/// Authorization errors (webhook unreachable…): upstream answers 500.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Authorization error (user={user}, verb={verb}, resource=nodes, subresource(s)=[{subresources}]): {message}"
)]
pub struct AuthzError {
    pub user: String,
    pub verb: String,
    pub subresources: String,
    pub message: String,
}

/// `authorization.mode`, or the local socket's fixed policy.
pub enum Authorizer {
    AlwaysAllow,
    Webhook(WebhookAuthorizer),
    /// The local unix socket: members of [`LOCAL_ADMINS_GROUP`] (root, by `SO_PEERCRED`) may
    /// do everything, anyone else nothing.
    LocalAdmins,
}

/// How many SubjectAccessReview answers are kept (least recently used evicted first).
pub const ACCESS_CACHE_SIZE: usize = 8192;

/// What a SubjectAccessReview answer depends on: a structured key, so no two different
/// requests can share an entry (`groups ["a,b"]` and `["a", "b"]` differ).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AccessKey {
    user: UserInfo,
    verb: String,
    node_name: String,
    subresource: &'static str,
}

/// SubjectAccessReview with allowed answers cached for `allowed_ttl`
/// (`cacheAuthorizedTTL`) and denied ones for `denied_ttl` (`cacheUnauthorizedTTL`); errors
/// are not cached; identical reviews in flight are made once.
pub struct WebhookAuthorizer {
    api: Arc<dyn ReviewApi>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    cache: ReviewCache<AccessKey, bool>,
}

impl WebhookAuthorizer {
    pub fn new(api: Arc<dyn ReviewApi>, allowed_ttl: Duration, denied_ttl: Duration) -> Self {
        Self {
            api,
            allowed_ttl,
            denied_ttl,
            cache: ReviewCache::new(ACCESS_CACHE_SIZE),
        }
    }

    async fn allowed(
        &self,
        user: &UserInfo,
        attrs: &Attributes,
        sub: &'static str,
    ) -> Result<bool, String> {
        let key = AccessKey {
            user: user.clone(),
            verb: attrs.verb.clone(),
            node_name: attrs.node_name.clone(),
            subresource: sub,
        };
        self.cache
            .get_or_fetch(key, || async {
                let d = self.api.access_review(user, attrs, sub).await?;
                let ttl = if d.allowed {
                    self.allowed_ttl
                } else {
                    self.denied_ttl
                };
                Ok((d.allowed, ttl))
            })
            .await
    }
}

impl Authorizer {
    /// Whether `user` may do `attrs`.
    pub async fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Result<bool, AuthzError> {
        let w = match self {
            Authorizer::AlwaysAllow => return Ok(true),
            Authorizer::LocalAdmins => {
                return Ok(user.groups.iter().any(|g| g == LOCAL_ADMINS_GROUP));
            }
            Authorizer::Webhook(w) => w,
        };
        let mut last_err = None;
        for sub in attrs.subresources {
            match w.allowed(user, attrs, sub).await {
                Ok(true) => return Ok(true),
                Ok(false) => {}
                Err(e) => last_err = Some(e),
            }
        }
        match last_err {
            Some(message) => Err(AuthzError {
                user: user.name.clone(),
                verb: attrs.verb.clone(),
                subresources: attrs.subresources.join(" "),
                message,
            }),
            None => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::review::AccessDecision;
    use std::sync::Mutex;

    #[test]
    fn path_to_attributes_table() {
        let cases: &[(Method, &str, &str, &[&str])] = &[
            (Method::GET, "/pods", "get", &["pods", "proxy"]),
            (Method::GET, "/pods/", "get", &["pods", "proxy"]),
            (Method::GET, "/runningpods/", "get", &["pods", "proxy"]),
            (Method::GET, "/podsx", "get", &["proxy"]),
            (Method::GET, "/stats/summary", "get", &["stats"]),
            (Method::GET, "/stats", "get", &["stats"]),
            (Method::GET, "/statsz", "get", &["proxy"]),
            (Method::GET, "/metrics/cadvisor", "get", &["metrics"]),
            (Method::GET, "/logs/syslog", "get", &["log"]),
            (Method::GET, "/logs/", "get", &["log"]),
            (
                Method::GET,
                "/healthz/syncloop",
                "get",
                &["healthz", "proxy"],
            ),
            (Method::GET, "/configz", "get", &["configz", "proxy"]),
            (Method::GET, "/containerLogs/ns/p/c", "get", &["proxy"]),
            (Method::POST, "/run/ns/p/c", "create", &["proxy"]),
            (
                Method::POST,
                "/checkpoint/ns/p/c",
                "create",
                &["checkpoint"],
            ),
            (Method::GET, "/spec/", "get", &["spec"]),
            // Malformed spellings are never promoted to a narrower subresource.
            (Method::GET, "//stats/summary", "get", &["proxy"]),
            (Method::GET, "/stats/../run/a/b/c", "get", &["proxy"]),
            // A websocket exec is a GET: `get` as upstream; SPDY posts.
            (Method::GET, "/exec/ns/p/c", "get", &["proxy"]),
            (Method::POST, "/exec/ns/p/uid/c", "create", &["proxy"]),
            (Method::GET, "/attach/ns/p/c", "get", &["proxy"]),
            (Method::POST, "/portForward/ns/p", "create", &["proxy"]),
            (Method::GET, "/execx", "get", &["proxy"]),
            (Method::PUT, "/x", "update", &["proxy"]),
            (Method::PATCH, "/x", "patch", &["proxy"]),
            (Method::DELETE, "/x", "delete", &["proxy"]),
            (Method::OPTIONS, "/x", "", &["proxy"]),
        ];
        for (m, path, verb, subs) in cases {
            let a = request_attributes(m, &crate::server::path::parse(path), "node-1");
            assert_eq!(a.verb, *verb, "{m} {path}");
            assert_eq!(a.subresources, *subs, "{m} {path}");
            assert_eq!(a.node_name, "node-1");
        }
        let a = request_attributes(&Method::GET, &crate::server::path::parse("/pods"), "n");
        assert_eq!(
            forbidden_message(&UserInfo::anonymous(), &a),
            "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
        );
    }

    struct Rules {
        calls: Mutex<Vec<String>>,
        allow: Mutex<Vec<(String, String)>>,
    }

    #[async_trait::async_trait]
    impl ReviewApi for Rules {
        async fn token_review(&self, _: &str) -> Result<Option<UserInfo>, String> {
            unreachable!()
        }
        async fn access_review(
            &self,
            user: &UserInfo,
            _: &Attributes,
            sub: &str,
        ) -> Result<AccessDecision, String> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("{}/{sub}", user.name));
            if user.name == "broken" {
                return Err("webhook down".into());
            }
            let allowed = self
                .allow
                .lock()
                .unwrap()
                .iter()
                .any(|(u, s)| *u == user.name && s == sub);
            Ok(AccessDecision {
                allowed,
                reason: String::new(),
            })
        }
    }

    fn user(name: &str) -> UserInfo {
        UserInfo {
            name: name.into(),
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn webhook_decisions_are_cached_per_ttl() {
        let rules = Arc::new(Rules {
            calls: Mutex::new(Vec::new()),
            allow: Mutex::new(vec![("alice".into(), "proxy".into())]),
        });
        let authz = Authorizer::Webhook(WebhookAuthorizer::new(
            rules.clone(),
            Duration::from_secs(300),
            Duration::from_secs(30),
        ));
        let pods = request_attributes(&Method::GET, &crate::server::path::parse("/pods"), "n");
        let logs = request_attributes(&Method::GET, &crate::server::path::parse("/logs/x"), "n");
        // `pods` denied, then the `proxy` fallback allowed.
        assert_eq!(authz.authorize(&user("alice"), &pods).await, Ok(true));
        assert_eq!(authz.authorize(&user("alice"), &logs).await, Ok(false));
        assert_eq!(authz.authorize(&user("bob"), &logs).await, Ok(false));
        assert_eq!(
            *rules.calls.lock().unwrap(),
            vec!["alice/pods", "alice/proxy", "alice/log", "bob/log"]
        );
        // Everything cached now.
        authz.authorize(&user("alice"), &pods).await.unwrap();
        authz.authorize(&user("bob"), &logs).await.unwrap();
        assert_eq!(rules.calls.lock().unwrap().len(), 4);
        // Denials expire after 30 s, allowances after 300 s.
        rules
            .allow
            .lock()
            .unwrap()
            .push(("bob".into(), "log".into()));
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(authz.authorize(&user("bob"), &logs).await, Ok(true));
        authz.authorize(&user("alice"), &pods).await.unwrap();
        assert_eq!(
            rules.calls.lock().unwrap().len(),
            6,
            "alice/pods (a denial) re-asked, alice/proxy still cached"
        );
        rules.allow.lock().unwrap().clear();
        tokio::time::advance(Duration::from_secs(270)).await;
        assert_eq!(authz.authorize(&user("alice"), &pods).await, Ok(false));
        // Errors surface (500 upstream) and are not cached.
        let err = authz.authorize(&user("broken"), &logs).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("Authorization error (user=broken, verb=get")
        );
        let _ = authz.authorize(&user("broken"), &logs).await;
        let broken = rules
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.starts_with("broken"))
            .count();
        assert_eq!(broken, 2);
        assert_eq!(
            Authorizer::AlwaysAllow.authorize(&user("x"), &logs).await,
            Ok(true)
        );
    }

    /// The local socket: root (by peer uid) may do everything, any other uid nothing, and a
    /// user merely named like root gets nothing.
    #[tokio::test]
    async fn local_socket_allows_root_only() {
        use crate::server::authn::{LOCAL_ROOT_USER, LocalPeer};
        let exec = request_attributes(
            &Method::POST,
            &crate::server::path::parse("/exec/ns/p/c"),
            "n",
        );
        let events = request_attributes(
            &Method::GET,
            &crate::server::path::parse("/debug/rkubelet/events"),
            "n",
        );
        for attrs in [&exec, &events] {
            assert_eq!(
                Authorizer::LocalAdmins
                    .authorize(&LocalPeer::from_uid(0).user(), attrs)
                    .await,
                Ok(true)
            );
            assert_eq!(
                Authorizer::LocalAdmins
                    .authorize(&LocalPeer::from_uid(1000).user(), attrs)
                    .await,
                Ok(false)
            );
        }
        assert_eq!(LocalPeer::from_uid(65534), LocalPeer::User(65534));
        assert_eq!(
            Authorizer::LocalAdmins
                .authorize(&user(LOCAL_ROOT_USER), &events)
                .await,
            Ok(false)
        );
    }

    /// Allows only the user whose groups are exactly `["a,b"]`.
    struct ExactGroups;

    #[async_trait::async_trait]
    impl ReviewApi for ExactGroups {
        async fn token_review(&self, _: &str) -> Result<Option<UserInfo>, String> {
            unreachable!()
        }
        async fn access_review(
            &self,
            user: &UserInfo,
            _: &Attributes,
            _: &str,
        ) -> Result<AccessDecision, String> {
            Ok(AccessDecision {
                allowed: user.groups == ["a,b"],
                reason: String::new(),
            })
        }
    }

    #[tokio::test]
    async fn cache_keys_do_not_collide() {
        let authz = Authorizer::Webhook(WebhookAuthorizer::new(
            Arc::new(ExactGroups),
            Duration::from_secs(300),
            Duration::from_secs(300),
        ));
        let attrs = request_attributes(&Method::GET, &crate::server::path::parse("/pods"), "n");
        let joined = UserInfo {
            name: "u".into(),
            uid: String::new(),
            groups: vec!["a,b".into()],
        };
        let split = UserInfo {
            groups: vec!["a".into(), "b".into()],
            ..joined.clone()
        };
        // Either order: the first answer must not be reused for the other user.
        assert_eq!(authz.authorize(&joined, &attrs).await, Ok(true));
        assert_eq!(authz.authorize(&split, &attrs).await, Ok(false));
        let authz2 = Authorizer::Webhook(WebhookAuthorizer::new(
            Arc::new(ExactGroups),
            Duration::from_secs(300),
            Duration::from_secs(300),
        ));
        assert_eq!(authz2.authorize(&split, &attrs).await, Ok(false));
        assert_eq!(authz2.authorize(&joined, &attrs).await, Ok(true));
        // Name/uid boundaries are structural too.
        let a = UserInfo {
            name: "x".into(),
            uid: "y\u{0}z".into(),
            groups: vec![],
        };
        let b = UserInfo {
            name: "x\u{0}y".into(),
            uid: "z".into(),
            groups: vec![],
        };
        let key = |u: &UserInfo| AccessKey {
            user: u.clone(),
            verb: "get".into(),
            node_name: "n".into(),
            subresource: "pods",
        };
        assert_ne!(key(&a), key(&b));
    }
}
