//! API objects pods consume (upstream configmap/secret managers, token manager and the
//! services lister): ConfigMaps, Secrets, service account tokens and the service-link
//! environment. [`PodObjects`] is the I/O edge the volume plugins and environment generation
//! read through; `api::ApiObjects` implements it against the API server, [`FakeObjects`] in
//! memory for tests, and [`NoApiServer`] answers standalone mode's "no kubeClient" errors.
//! Receives pod registrations (which objects to keep fresh); emits objects on request.

use crate::sync;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

pub mod api;
pub mod services;
pub mod tokens;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};

/// Failures looking up an object (besides "it does not exist", which is `Ok(None)`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// Standalone mode: upstream's wording when there is no kube client.
    #[error("couldn't get {kind} {namespace}/{name}, no kubeClient defined")]
    NoApiServer {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// The API server could not be asked or refused (message from the client).
    #[error("failed to get {kind} {namespace}/{name}: {message}")]
    Api {
        kind: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
    /// The object is not registered/cached yet and the wait for it ran out.
    #[error("failed to sync {kind} cache: timed out waiting for the condition")]
    NotSynced { kind: &'static str },
}

/// What a projected `serviceAccountToken` source asks for (upstream TokenRequestSpec, bound to
/// the pod).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenRequest {
    pub namespace: String,
    /// `spec.serviceAccountName` (`default` when unset).
    pub service_account: String,
    /// Empty: the API server's default audiences.
    pub audience: String,
    /// `expirationSeconds` (default 3600, at least 600).
    pub expiration_seconds: i64,
    /// The pod the token is bound to.
    pub pod_name: String,
    pub pod_uid: String,
}

/// A token and when it expires.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenGrant {
    pub token: String,
    pub expiration: DateTime<Utc>,
}

/// The token is a credential: never printed (CVE-2020-8564 class), only its length.
impl std::fmt::Debug for TokenGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenGrant")
            .field(
                "token",
                &format_args!("<redacted, {} bytes>", self.token.len()),
            )
            .field("expiration", &self.expiration)
            .finish()
    }
}

/// The API objects pods read. Implementations cache; every method may be called on each pod
/// sync.
#[async_trait]
pub trait PodObjects: Send + Sync {
    /// The pod's ConfigMaps/Secrets should be kept fresh from now on (upstream
    /// `RegisterPod`). Idempotent; a changed spec replaces the earlier registration.
    fn register_pod(&self, pod: &Pod);
    /// The pod is gone: stop keeping its objects (upstream `UnregisterPod`).
    fn unregister_pod(&self, uid: &str);
    /// `Ok(None)` when the ConfigMap does not exist.
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ConfigMap>, ObjectError>;
    /// `Ok(None)` when the Secret does not exist.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, ObjectError>;
    /// A bound service account token; cached and renewed by the implementation (upstream
    /// refreshes at 80 % of its life or after 24 h).
    async fn service_account_token(
        &self,
        request: &TokenRequest,
    ) -> Result<TokenGrant, ObjectError>;
    /// Service-link variables for `pod` (upstream `getServiceEnvVarMap`: the `kubernetes`
    /// service of the `default` namespace always, the pod's namespace's services when
    /// `enableServiceLinks` is not false). Empty in standalone mode.
    fn service_env(&self, pod: &Pod) -> BTreeMap<String, String>;
    /// Whether the services have been read at least once (upstream refuses to build the
    /// environment of API pods before, as their service links would be missing).
    fn services_synced(&self) -> bool {
        true
    }
}

/// Standalone mode: every lookup fails as upstream does without a kube client.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoApiServer;

#[async_trait]
impl PodObjects for NoApiServer {
    fn register_pod(&self, _pod: &Pod) {}
    fn unregister_pod(&self, _uid: &str) {}
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ConfigMap>, ObjectError> {
        Err(no_api_server("configmap", namespace, name))
    }
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, ObjectError> {
        Err(no_api_server("secret", namespace, name))
    }
    async fn service_account_token(
        &self,
        request: &TokenRequest,
    ) -> Result<TokenGrant, ObjectError> {
        Err(no_api_server(
            "serviceaccount",
            &request.namespace,
            &request.service_account,
        ))
    }
    fn service_env(&self, _pod: &Pod) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
}

fn no_api_server(kind: &'static str, namespace: &str, name: &str) -> ObjectError {
    ObjectError::NoApiServer {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// In-memory objects for tests: set them, change them, count token requests.
#[derive(Debug, Default, Clone)]
pub struct FakeObjects {
    inner: Arc<Mutex<FakeState>>,
}

#[derive(Debug, Default)]
struct FakeState {
    config_maps: HashMap<(String, String), ConfigMap>,
    secrets: HashMap<(String, String), Secret>,
    service_env: BTreeMap<String, String>,
    registered: HashMap<String, Pod>,
    token_requests: Vec<TokenRequest>,
    token_lifetime: Option<chrono::Duration>,
}

impl FakeObjects {
    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        sync::lock(&self.inner)
    }

    /// Adds or replaces a ConfigMap (`namespace`/`name` from its metadata).
    pub fn set_config_map(&self, cm: ConfigMap) {
        let key = key_of(&cm.metadata);
        self.lock().config_maps.insert(key, cm);
    }

    pub fn remove_config_map(&self, namespace: &str, name: &str) {
        self.lock()
            .config_maps
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// Adds or replaces a Secret.
    pub fn set_secret(&self, secret: Secret) {
        let key = key_of(&secret.metadata);
        self.lock().secrets.insert(key, secret);
    }

    pub fn set_service_env(&self, env: BTreeMap<String, String>) {
        self.lock().service_env = env;
    }

    /// Tokens expire after this long (default one hour).
    pub fn set_token_lifetime(&self, lifetime: chrono::Duration) {
        self.lock().token_lifetime = Some(lifetime);
    }

    /// Every token request made so far.
    pub fn token_requests(&self) -> Vec<TokenRequest> {
        self.lock().token_requests.clone()
    }

    /// UIDs of the pods currently registered.
    pub fn registered(&self) -> Vec<String> {
        let mut uids: Vec<String> = self.lock().registered.keys().cloned().collect();
        uids.sort();
        uids
    }
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned()),
        meta.name.clone().unwrap_or_default(),
    )
}

#[async_trait]
impl PodObjects for FakeObjects {
    fn register_pod(&self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.lock().registered.insert(uid, pod.clone());
    }
    fn unregister_pod(&self, uid: &str) {
        self.lock().registered.remove(uid);
    }
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ConfigMap>, ObjectError> {
        Ok(self
            .lock()
            .config_maps
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned())
    }
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, ObjectError> {
        Ok(self
            .lock()
            .secrets
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned())
    }
    async fn service_account_token(
        &self,
        request: &TokenRequest,
    ) -> Result<TokenGrant, ObjectError> {
        let mut st = self.lock();
        st.token_requests.push(request.clone());
        let n = st.token_requests.len();
        let lifetime = st
            .token_lifetime
            .unwrap_or_else(|| chrono::Duration::hours(1));
        Ok(TokenGrant {
            token: format!(
                "fake-token-{}-{}-{n}",
                request.service_account, request.pod_name
            ),
            expiration: Utc::now() + lifetime,
        })
    }
    fn service_env(&self, _pod: &Pod) -> BTreeMap<String, String> {
        self.lock().service_env.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[tokio::test]
    async fn standalone_lookups_fail_with_upstream_wording() {
        let err = NoApiServer.config_map("ns", "cm").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "couldn't get configmap ns/cm, no kubeClient defined"
        );
        assert!(NoApiServer.service_env(&Pod::default()).is_empty());
    }

    #[tokio::test]
    async fn fake_objects_answer_what_was_set() {
        let f = FakeObjects::default();
        f.set_config_map(ConfigMap {
            metadata: ObjectMeta {
                name: Some("cm".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            data: Some([("k".to_owned(), "v".to_owned())].into()),
            ..Default::default()
        });
        let cm = f.config_map("ns", "cm").await.unwrap().unwrap();
        assert_eq!(cm.data.unwrap()["k"], "v");
        assert_eq!(f.config_map("ns", "other").await.unwrap(), None);
        f.remove_config_map("ns", "cm");
        assert_eq!(f.config_map("ns", "cm").await.unwrap(), None);
    }
}
