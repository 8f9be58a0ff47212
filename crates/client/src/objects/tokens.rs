//! Bound service account tokens (upstream `pkg/kubelet/token` `Manager`): owns the token cache
//! keyed by the [`TokenRequest`]. Receives token requests from projected volumes; emits
//! `POST serviceaccounts/{sa}/token` TokenRequests bound to the pod and hands out the cached
//! token until [`requires_refresh`] says to renew it. A failed renewal keeps serving the old
//! token while it is valid; expired entries are dropped by [`TokenManager::cleanup`] (run
//! every [`GC_PERIOD`] by `ApiObjectsTask`) and a pod's entries by
//! [`TokenManager::forget_pod`].

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::authentication::v1::{
    BoundObjectReference, TokenRequest as ApiTokenRequest, TokenRequestSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use tracing::{debug, warn};

use super::{ObjectError, TokenGrant, TokenRequest};
use crate::apiclient::bounded;
use crate::clock::Clock;
use crate::sync;

/// A token is renewed at the latest this long after it was issued (upstream `maxTTL`).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Up to this much earlier, randomly, so tokens do not renew in lock step (upstream
/// `maxJitter`; whole seconds as upstream's truncation gives).
pub const MAX_JITTER: Duration = Duration::from_secs(10);
/// How often expired entries are dropped (upstream `gcPeriod`).
pub const GC_PERIOD: Duration = Duration::from_secs(60);

/// One cached TokenRequest answer.
#[derive(Clone, PartialEq, Eq)]
pub struct CachedToken {
    pub token: String,
    pub expiration: DateTime<Utc>,
    /// The lifetime the API server granted (`spec.expirationSeconds` of the answer).
    pub expiration_seconds: i64,
}

/// The token is a credential: never printed, only its length.
impl std::fmt::Debug for CachedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedToken")
            .field(
                "token",
                &format_args!("<redacted, {} bytes>", self.token.len()),
            )
            .field("expiration", &self.expiration)
            .field("expiration_seconds", &self.expiration_seconds)
            .finish()
    }
}

impl CachedToken {
    fn grant(&self) -> TokenGrant {
        TokenGrant {
            token: self.token.clone(),
            expiration: self.expiration,
        }
    }

    /// Upstream `expired`: strictly after the expiration time.
    pub fn expired(&self, now: DateTime<Utc>) -> bool {
        now > self.expiration
    }
}

/// Upstream `requiresRefresh`: with `iat = expiration - expiration_seconds`, renew when `now`
/// is after `iat + 24h - jitter`, or after `expiration - 20 % of the lifetime - jitter`
/// (i.e. past 80 % of the lifetime), or before `iat` (the clock went back).
pub fn requires_refresh(token: &CachedToken, now: DateTime<Utc>, jitter: Duration) -> bool {
    let jitter = chrono::Duration::from_std(jitter).unwrap_or_default();
    let lifetime = chrono::Duration::seconds(token.expiration_seconds);
    let issued = token.expiration - lifetime;
    let max_ttl = chrono::Duration::from_std(MAX_TTL).unwrap_or_default();
    if now > issued + max_ttl - jitter {
        return true;
    }
    let last_fifth = chrono::Duration::seconds(token.expiration_seconds * 20 / 100);
    if now > token.expiration - last_fifth - jitter {
        return true;
    }
    now < issued
}

/// A random whole number of seconds below [`MAX_JITTER`] (std's random hasher keys as the
/// entropy source; no RNG dependency).
pub fn random_jitter() -> Duration {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x5eed);
    Duration::from_secs(h.finish() % MAX_JITTER.as_secs().max(1))
}

/// The token cache and its API calls.
pub struct TokenManager {
    client: kube::Client,
    request_timeout: Duration,
    clock: Clock,
    cache: Mutex<HashMap<TokenRequest, CachedToken>>,
}

impl std::fmt::Debug for TokenManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenManager")
            .field("cached", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl TokenManager {
    pub fn new(client: kube::Client, request_timeout: Duration, clock: Clock) -> Self {
        Self {
            client,
            request_timeout,
            clock,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TokenRequest, CachedToken>> {
        sync::lock(&self.cache)
    }

    /// Upstream `GetServiceAccountToken`: the cached token unless it needs a refresh; else a new
    /// one; if that fails, the cached one while it has not expired.
    pub async fn get(&self, request: &TokenRequest) -> Result<TokenGrant, ObjectError> {
        let cached = self.lock().get(request).cloned();
        if let Some(c) = &cached
            && !requires_refresh(c, self.clock.now(), random_jitter())
        {
            return Ok(c.grant());
        }
        match self.fetch(request).await {
            Ok(fresh) => {
                let grant = fresh.grant();
                self.lock().insert(request.clone(), fresh);
                Ok(grant)
            }
            Err(message) => match cached {
                None => Err(api_error(
                    request,
                    format!("failed to fetch token: {message}"),
                )),
                Some(c) if c.expired(self.clock.now()) => Err(api_error(
                    request,
                    format!("token expired and refresh failed: {message}"),
                )),
                Some(c) => {
                    warn!(
                        namespace = %request.namespace,
                        service_account = %request.service_account,
                        pod = %request.pod_name,
                        error = %message,
                        "couldn't update token; using the cached one"
                    );
                    Ok(c.grant())
                }
            },
        }
    }

    /// POSTs the TokenRequest bound to the pod.
    async fn fetch(&self, request: &TokenRequest) -> Result<CachedToken, String> {
        let api: kube::Api<ServiceAccount> =
            kube::Api::namespaced(self.client.clone(), &request.namespace);
        let body = ApiTokenRequest {
            spec: TokenRequestSpec {
                audiences: if request.audience.is_empty() {
                    Vec::new()
                } else {
                    vec![request.audience.clone()]
                },
                expiration_seconds: Some(request.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".to_owned()),
                    kind: Some("Pod".to_owned()),
                    name: Some(request.pod_name.clone()),
                    uid: Some(request.pod_uid.clone()),
                }),
            },
            ..Default::default()
        };
        let answer = bounded(
            self.request_timeout,
            api.create_token_request(&request.service_account, &PostParams::default(), &body),
        )
        .await
        .map_err(|e| e.to_string())?;
        let status = answer
            .status
            .ok_or_else(|| "TokenRequest answer without status".to_owned())?;
        let ts = status.expiration_timestamp.0;
        let expiration = DateTime::from_timestamp(
            ts.as_second(),
            u32::try_from(ts.subsec_nanosecond()).unwrap_or(0),
        )
        .ok_or_else(|| "TokenRequest expiration out of range".to_owned())?;
        debug!(
            namespace = %request.namespace,
            service_account = %request.service_account,
            pod = %request.pod_name,
            %expiration,
            "service account token issued"
        );
        Ok(CachedToken {
            token: status.token,
            expiration,
            // Upstream never refreshes a token whose answer lacks the lifetime; using the
            // requested one instead keeps it renewing.
            expiration_seconds: answer
                .spec
                .expiration_seconds
                .unwrap_or(request.expiration_seconds),
        })
    }

    /// Drops every token bound to pod `uid` (upstream `DeleteServiceAccountToken`).
    pub fn forget_pod(&self, uid: &str) {
        self.lock().retain(|k, _| k.pod_uid != uid);
    }

    /// Drops expired entries (upstream `cleanup`); returns how many.
    pub fn cleanup(&self) -> usize {
        let now = self.clock.now();
        let mut cache = self.lock();
        let before = cache.len();
        cache.retain(|_, t| !t.expired(now));
        before - cache.len()
    }

    /// How many tokens are cached.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn api_error(request: &TokenRequest, message: String) -> ObjectError {
    ObjectError::Api {
        kind: "serviceaccount",
        namespace: request.namespace.clone(),
        name: request.service_account.clone(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// Issued at 00:00, lifetime `secs`.
    fn token(secs: i64) -> CachedToken {
        CachedToken {
            token: "t".into(),
            expiration: at("2025-01-01T00:00:00Z") + chrono::Duration::seconds(secs),
            expiration_seconds: secs,
        }
    }

    const NO_JITTER: Duration = Duration::ZERO;

    #[test]
    fn one_hour_token_refreshes_after_80_percent() {
        let t = token(3600);
        assert!(!requires_refresh(&t, at("2025-01-01T00:00:00Z"), NO_JITTER));
        assert!(!requires_refresh(&t, at("2025-01-01T00:30:00Z"), NO_JITTER));
        // 80 % of 3600 s = 2880 s = 00:48:00; strictly after it.
        assert!(!requires_refresh(&t, at("2025-01-01T00:48:00Z"), NO_JITTER));
        assert!(requires_refresh(&t, at("2025-01-01T00:48:01Z"), NO_JITTER));
        assert!(requires_refresh(&t, at("2025-01-01T02:00:00Z"), NO_JITTER));
    }

    #[test]
    fn jitter_brings_the_refresh_forward() {
        let t = token(3600);
        let now = at("2025-01-01T00:47:55Z");
        assert!(!requires_refresh(&t, now, NO_JITTER));
        assert!(requires_refresh(&t, now, Duration::from_secs(9)));
    }

    #[test]
    fn long_tokens_refresh_after_24_hours() {
        // A one-year token: 80 % is far away, the 24 h bound applies.
        let t = token(365 * 24 * 3600);
        assert!(!requires_refresh(&t, at("2025-01-01T23:59:59Z"), NO_JITTER));
        assert!(!requires_refresh(&t, at("2025-01-02T00:00:00Z"), NO_JITTER));
        assert!(requires_refresh(&t, at("2025-01-02T00:00:01Z"), NO_JITTER));
        assert!(requires_refresh(
            &t,
            at("2025-01-01T23:59:55Z"),
            Duration::from_secs(9)
        ));
    }

    #[test]
    fn clock_before_issue_time_refreshes() {
        let t = token(3600);
        assert!(requires_refresh(&t, at("2024-12-31T23:59:59Z"), NO_JITTER));
    }

    #[test]
    fn expired_is_strictly_after_expiration() {
        let t = token(600);
        assert!(!t.expired(at("2025-01-01T00:10:00Z")));
        assert!(t.expired(at("2025-01-01T00:10:01Z")));
    }

    #[test]
    fn jitter_stays_below_the_maximum() {
        for _ in 0..100 {
            assert!(random_jitter() < MAX_JITTER);
        }
    }
}
