//! Request authentication for the kubelet's HTTPS port (upstream: the `k8s.io/apiserver`
//! delegating authenticator the kubelet builds). Owns the client CA verifier, the TokenReview
//! answer cache and the anonymous switch; receives a connection's client certificates and a
//! request's `Authorization` header; emits the user, "nobody" (→ 401) or an error (→ 401).
//!
//! Order as upstream: x509 client certificate (user = CN, groups = O), then bearer token via
//! TokenReview; a presented but invalid credential is an error even with anonymous enabled;
//! no credential at all is `system:anonymous` when anonymous auth is on. Authenticated (non
//! anonymous) users get the `system:authenticated` group.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use sha2::{Digest, Sha256};

use super::cache::ReviewCache;
use super::review::ReviewApi;

/// An authenticated (or anonymous) user.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

pub const ANONYMOUS_USER: &str = "system:anonymous";
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

impl UserInfo {
    pub fn anonymous() -> Self {
        Self {
            name: ANONYMOUS_USER.to_owned(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED_GROUP.to_owned()],
        }
    }

    fn with_authenticated_group(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.to_owned());
        }
        self
    }
}

/// The group of the local administrator (root on the node's local socket): every kubelet
/// API request is allowed to it there, as to `system:masters` in a cluster.
pub const LOCAL_ADMINS_GROUP: &str = "system:masters";
/// The user name of root on the local socket.
pub const LOCAL_ROOT_USER: &str = "system:rkubelet:local-root";

/// A client of the local unix socket, identified by the uid the kernel reports for the
/// connection (`SO_PEERCRED`), never by anything the client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalPeer {
    /// uid 0: the node's administrator.
    Root,
    /// Any other uid: authenticated as itself, allowed nothing.
    User(u32),
}

impl LocalPeer {
    pub fn from_uid(uid: u32) -> Self {
        if uid == 0 {
            LocalPeer::Root
        } else {
            LocalPeer::User(uid)
        }
    }

    /// The identity the authorizer sees.
    pub fn user(self) -> UserInfo {
        match self {
            LocalPeer::Root => UserInfo {
                name: LOCAL_ROOT_USER.to_owned(),
                uid: "0".to_owned(),
                groups: vec![
                    LOCAL_ADMINS_GROUP.to_owned(),
                    AUTHENTICATED_GROUP.to_owned(),
                ],
            },
            LocalPeer::User(uid) => UserInfo {
                name: format!("system:rkubelet:uid:{uid}"),
                uid: uid.to_string(),
                groups: vec![AUTHENTICATED_GROUP.to_owned()],
            },
        }
    }
}

/// Why a presented credential was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthnError {
    #[error("verifying certificate: {0}")]
    Certificate(String),
    #[error("invalid bearer token")]
    InvalidToken,
    #[error("token review failed: {0}")]
    Webhook(String),
}

/// How many TokenReview answers are kept (least recently used evicted first).
pub const TOKEN_CACHE_SIZE: usize = 8192;

/// Bearer tokens checked through TokenReview, answers (known and unknown tokens alike)
/// cached for `ttl` (`authentication.webhook.cacheTTL`), keyed by the token's SHA-256 so
/// tokens are not kept in memory; identical reviews in flight are made once.
pub struct TokenWebhook {
    api: Arc<dyn ReviewApi>,
    ttl: Duration,
    cache: ReviewCache<[u8; 32], Option<UserInfo>>,
}

impl TokenWebhook {
    pub fn new(api: Arc<dyn ReviewApi>, ttl: Duration) -> Self {
        Self {
            api,
            ttl,
            cache: ReviewCache::new(TOKEN_CACHE_SIZE),
        }
    }

    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, AuthnError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.cache
            .get_or_fetch(key, || async {
                let answer = self.api.token_review(token).await?;
                Ok((answer, self.ttl))
            })
            .await
            .map_err(AuthnError::Webhook)
    }
}

/// Where the current client CA verifier comes from (reloaded with `clientCAFile`).
pub trait ClientCaSource: Send + Sync {
    fn current(&self) -> Option<Arc<dyn ClientCertVerifier>>;
}

/// A fixed verifier.
impl ClientCaSource for Arc<dyn ClientCertVerifier> {
    fn current(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        Some(self.clone())
    }
}

/// The authenticator of the HTTPS port.
pub struct Authenticator {
    /// Verifies client certificate chains against `clientCAFile` (the current one: the chain
    /// is verified per request, so expiry and a replaced CA apply to open connections too).
    pub client_ca: Option<Arc<dyn ClientCaSource>>,
    pub tokens: Option<TokenWebhook>,
    pub anonymous: bool,
}

impl Authenticator {
    /// The user of a connection's client certificate chain (`None` when it presented none or
    /// no client CA is configured).
    pub fn authenticate_cert(
        &self,
        chain: &[CertificateDer<'static>],
    ) -> Option<Result<UserInfo, AuthnError>> {
        let verifier = self.client_ca.as_ref()?.current()?;
        let (leaf, intermediates) = chain.split_first()?;
        Some(
            verifier
                .verify_client_cert(leaf, intermediates, UnixTime::now())
                .map_err(|e| AuthnError::Certificate(e.to_string()))
                .and_then(|_| user_of_cert(leaf))
                .map(UserInfo::with_authenticated_group),
        )
    }

    /// Authenticates a request: `cert` is the connection's certificate result, `authorization`
    /// the request's header. `Ok(None)`: no credential and anonymous auth off.
    pub async fn authenticate(
        &self,
        cert: Option<&Result<UserInfo, AuthnError>>,
        authorization: Option<&str>,
    ) -> Result<Option<UserInfo>, AuthnError> {
        let mut first_err = None;
        match cert {
            Some(Ok(user)) => return Ok(Some(user.clone())),
            Some(Err(e)) => first_err = Some(e.clone()),
            None => {}
        }
        let token = authorization
            .and_then(|h| {
                let (scheme, rest) = h.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .filter(|t| !t.is_empty());
        if let (Some(token), Some(webhook)) = (token, &self.tokens) {
            match webhook.authenticate(token).await {
                Ok(Some(user)) => return Ok(Some(user.with_authenticated_group())),
                Ok(None) => first_err = first_err.or(Some(AuthnError::InvalidToken)),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        match first_err {
            Some(e) => Err(e),
            None if self.anonymous => Ok(Some(UserInfo::anonymous())),
            None => Ok(None),
        }
    }
}

/// User = subject CN, groups = subject O values (upstream `CommonNameUserConversion`).
fn user_of_cert(cert: &CertificateDer<'_>) -> Result<UserInfo, AuthnError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| AuthnError::Certificate(format!("parsing: {e}")))?;
    let subject = parsed.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_owned();
    if name.is_empty() {
        return Err(AuthnError::Certificate(
            "certificate has no common name".to_owned(),
        ));
    }
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Ok(UserInfo {
        name,
        uid: String::new(),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::authz::Attributes;
    use crate::server::review::AccessDecision;
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub(crate) struct CountingReviews {
        pub token_calls: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl ReviewApi for CountingReviews {
        async fn token_review(&self, token: &str) -> Result<Option<UserInfo>, String> {
            self.token_calls.fetch_add(1, Ordering::SeqCst);
            match token {
                "good" => Ok(Some(UserInfo {
                    name: "alice".into(),
                    uid: "1".into(),
                    groups: vec!["devs".into()],
                })),
                "broken" => Err("connection refused".into()),
                _ => Ok(None),
            }
        }
        async fn access_review(
            &self,
            _: &UserInfo,
            _: &Attributes,
            _: &str,
        ) -> Result<AccessDecision, String> {
            unreachable!()
        }
    }

    fn authn(anonymous: bool) -> (Authenticator, Arc<CountingReviews>) {
        let api = Arc::new(CountingReviews {
            token_calls: AtomicUsize::new(0),
        });
        let a = Authenticator {
            client_ca: None,
            tokens: Some(TokenWebhook::new(api.clone(), Duration::from_secs(120))),
            anonymous,
        };
        (a, api)
    }

    #[tokio::test]
    async fn credential_matrix() {
        let (a, _) = authn(true);
        assert_eq!(
            a.authenticate(None, None).await,
            Ok(Some(UserInfo::anonymous()))
        );
        let alice = a
            .authenticate(None, Some("Bearer good"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.groups, vec!["devs", AUTHENTICATED_GROUP]);
        // A bad token is an error even with anonymous on.
        assert_eq!(
            a.authenticate(None, Some("Bearer bad")).await,
            Err(AuthnError::InvalidToken)
        );
        assert!(matches!(
            a.authenticate(None, Some("Bearer broken")).await,
            Err(AuthnError::Webhook(_))
        ));
        // A valid certificate wins; an invalid one fails unless the token is good.
        let bad_cert = Err(AuthnError::Certificate("unknown issuer".into()));
        assert!(a.authenticate(Some(&bad_cert), None).await.is_err());
        assert_eq!(
            a.authenticate(Some(&bad_cert), Some("Bearer good"))
                .await
                .unwrap()
                .unwrap()
                .name,
            "alice"
        );
        let (off, _) = authn(false);
        assert_eq!(off.authenticate(None, None).await, Ok(None));
        assert_eq!(off.authenticate(None, Some("Basic abc")).await, Ok(None));
    }

    #[tokio::test(start_paused = true)]
    async fn token_answers_are_cached_for_the_ttl() {
        let (a, api) = authn(false);
        for _ in 0..3 {
            a.authenticate(None, Some("Bearer good")).await.unwrap();
            let _ = a.authenticate(None, Some("Bearer bad")).await;
        }
        assert_eq!(api.token_calls.load(Ordering::SeqCst), 2);
        tokio::time::advance(Duration::from_secs(119)).await;
        a.authenticate(None, Some("Bearer good")).await.unwrap();
        assert_eq!(api.token_calls.load(Ordering::SeqCst), 2);
        tokio::time::advance(Duration::from_secs(2)).await;
        a.authenticate(None, Some("Bearer good")).await.unwrap();
        assert_eq!(api.token_calls.load(Ordering::SeqCst), 3);
        // Errors are not cached.
        let _ = a.authenticate(None, Some("Bearer broken")).await;
        let _ = a.authenticate(None, Some("Bearer broken")).await;
        assert_eq!(api.token_calls.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn certificate_subject_maps_to_user_and_groups() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n1");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let user = user_of_cert(cert.der()).unwrap();
        assert_eq!(user.name, "system:node:n1");
        assert_eq!(user.groups, vec!["system:nodes"]);
    }

    /// Answers every token after a pause, counting reviews.
    struct SlowReviews(AtomicUsize);

    #[async_trait::async_trait]
    impl ReviewApi for SlowReviews {
        async fn token_review(&self, token: &str) -> Result<Option<UserInfo>, String> {
            self.0.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(Some(UserInfo {
                name: token.to_owned(),
                ..Default::default()
            }))
        }
        async fn access_review(
            &self,
            _: &UserInfo,
            _: &Attributes,
            _: &str,
        ) -> Result<AccessDecision, String> {
            unreachable!()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_with_one_token_make_one_review() {
        let api = Arc::new(SlowReviews(AtomicUsize::new(0)));
        let a = Arc::new(Authenticator {
            client_ca: None,
            tokens: Some(TokenWebhook::new(api.clone(), Duration::from_secs(120))),
            anonymous: false,
        });
        let mut tasks = Vec::new();
        for i in 0..40 {
            let a = a.clone();
            let token = if i % 2 == 0 { "Bearer t1" } else { "Bearer t2" };
            tasks.push(tokio::spawn(async move {
                a.authenticate(None, Some(token))
                    .await
                    .unwrap()
                    .unwrap()
                    .name
            }));
        }
        let mut names = Vec::new();
        for t in tasks {
            names.push(t.await.unwrap());
        }
        assert_eq!(names.iter().filter(|n| *n == "t1").count(), 20);
        assert_eq!(names.iter().filter(|n| *n == "t2").count(), 20);
        assert_eq!(
            api.0.load(Ordering::SeqCst),
            2,
            "one review per distinct token"
        );
    }
}
