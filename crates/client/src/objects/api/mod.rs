//! The API server [`PodObjects`]: owns the registered pods' object references, the per-object
//! ConfigMap/Secret watches ([`watch_cache`]), the all-namespaces services informer and
//! the token cache ([`super::tokens`]). Receives pod (un)registrations and lookups from the pod
//! workers, volume plugins and environment generation; emits list/watch/GET/TokenRequest calls
//! to the API server and answers from its caches. [`ApiObjects`] is the cheap cloneable handle;
//! [`ApiObjectsTask::run`] runs every watch and the cleanup until cancelled.
//!
//! Choices: a lookup of an object no registered pod refers to is a direct GET (upstream answers
//! "object not registered"); a registered object whose watch has not listed within
//! `sync_timeout` is [`ObjectError::NotSynced`] (upstream: one second, also the default here).
//! Watches are not stopped for idleness (upstream recycles watches not read for five resync
//! periods and restarts them on the next read). `service_env` answers from whatever the
//! informer has (upstream refuses API pods' environments until services have synced; callers
//! can check [`ApiObjects::services_synced`]).

pub mod references;
pub mod watch_cache;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::references::PodReferences;
use self::watch_cache::{BoxTask, Cached, ObjectCache, Watched};
use super::services::{self, ServiceLink};
use super::tokens::{GC_PERIOD, TokenManager};
use super::{ObjectError, PodObjects, TokenGrant, TokenRequest};
use crate::apiclient::bounded;
use crate::clock::Clock;
use crate::sync;

/// Timing of [`ApiObjects`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiObjectsSettings {
    /// How long a lookup of a registered object waits for its watch's first list before
    /// failing with [`ObjectError::NotSynced`] (upstream: `wait.PollImmediate(10ms, 1s)`).
    pub sync_timeout: Duration,
    /// Bound of each direct GET and TokenRequest.
    pub request_timeout: Duration,
}

impl Default for ApiObjectsSettings {
    fn default() -> Self {
        Self {
            sync_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// What one registered pod refers to.
#[derive(Debug, Clone)]
struct Registration {
    namespace: String,
    refs: PodReferences,
}

/// The services as the informer reports them, keyed by `(namespace, name)`. A (re)list is
/// staged and replaces the current set once complete.
#[derive(Debug, Default)]
struct ServiceSet {
    current: BTreeMap<(String, String), ServiceLink>,
    staging: Option<BTreeMap<(String, String), ServiceLink>>,
}

impl ServiceSet {
    /// Applies one watcher event; `true` when a complete list has just been applied.
    fn apply(&mut self, event: Event<Service>) -> bool {
        let key = |s: &ServiceLink| (s.namespace.clone(), s.name.clone());
        match event {
            Event::Init => self.staging = Some(BTreeMap::new()),
            Event::InitApply(s) => {
                let link = ServiceLink::from_service(&s);
                self.staging
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key(&link), link);
            }
            Event::InitDone => {
                self.current = self.staging.take().unwrap_or_default();
                return true;
            }
            Event::Apply(s) => {
                let link = ServiceLink::from_service(&s);
                self.current.insert(key(&link), link);
            }
            Event::Delete(s) => {
                let link = ServiceLink::from_service(&s);
                self.current.remove(&key(&link));
            }
        }
        false
    }
}

struct Shared {
    client: kube::Client,
    settings: ApiObjectsSettings,
    registered: Mutex<HashMap<String, Registration>>,
    config_maps: ObjectCache<ConfigMap>,
    secrets: ObjectCache<Secret>,
    services: RwLock<ServiceSet>,
    services_synced: watch::Sender<bool>,
    tokens: TokenManager,
}

/// The API server objects of the pods on this node (cloneable handle).
#[derive(Clone)]
pub struct ApiObjects {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ApiObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiObjects")
            .field("settings", &self.shared.settings)
            .field("config_maps", &self.shared.config_maps)
            .field("secrets", &self.shared.secrets)
            .field("tokens", &self.shared.tokens)
            .finish_non_exhaustive()
    }
}

/// Runs the watches of [`ApiObjects`]: the services informer, one task per watched
/// ConfigMap/Secret and the periodic token cleanup.
pub struct ApiObjectsTask {
    shared: Arc<Shared>,
    root: CancellationToken,
    tasks: mpsc::UnboundedReceiver<BoxTask>,
}

impl ApiObjects {
    /// The handle and the task that must run for watches to make progress.
    pub fn new(client: kube::Client, settings: ApiObjectsSettings) -> (Self, ApiObjectsTask) {
        Self::with_clock(client, settings, Clock::new())
    }

    /// [`ApiObjects::new`] with the wall clock token refresh decisions use (tests anchor it
    /// away from the system time to make refreshes due).
    pub fn with_clock(
        client: kube::Client,
        settings: ApiObjectsSettings,
        clock: Clock,
    ) -> (Self, ApiObjectsTask) {
        let (tx, rx) = mpsc::unbounded_channel();
        let root = CancellationToken::new();
        let shared = Arc::new(Shared {
            config_maps: ObjectCache::new(client.clone(), root.clone(), tx.clone()),
            secrets: ObjectCache::new(client.clone(), root.clone(), tx),
            tokens: TokenManager::new(client.clone(), settings.request_timeout, clock),
            client,
            settings,
            registered: Mutex::new(HashMap::new()),
            services: RwLock::new(ServiceSet::default()),
            services_synced: watch::Sender::new(false),
        });
        let task = ApiObjectsTask {
            shared: Arc::clone(&shared),
            root,
            tasks: rx,
        };
        (Self { shared }, task)
    }

    /// Whether the services informer has completed a list (upstream `serviceHasSynced`;
    /// upstream refuses to build the environment of an API pod before that).
    pub fn services_synced(&self) -> bool {
        *self.shared.services_synced.borrow()
    }

    /// Waits up to `timeout` for the services informer's first list; `true` once synced.
    pub async fn wait_services_synced(&self, timeout: Duration) -> bool {
        let mut rx = self.shared.services_synced.subscribe();
        matches!(
            tokio::time::timeout(timeout, rx.wait_for(|s| *s)).await,
            Ok(Ok(_))
        )
    }

    /// `(namespace, name)` of the ConfigMaps being watched.
    pub fn watched_config_maps(&self) -> Vec<(String, String)> {
        self.shared.config_maps.watched()
    }

    /// `(namespace, name)` of the Secrets being watched.
    pub fn watched_secrets(&self) -> Vec<(String, String)> {
        self.shared.secrets.watched()
    }

    /// How many service account tokens are cached.
    pub fn cached_tokens(&self) -> usize {
        self.shared.tokens.len()
    }

    async fn lookup<K: Watched>(
        &self,
        cache: &ObjectCache<K>,
        namespace: &str,
        name: &str,
    ) -> Result<Option<K>, ObjectError> {
        match cache
            .get(namespace, name, self.shared.settings.sync_timeout)
            .await?
        {
            Cached::Found(o) => Ok(o),
            Cached::NotRegistered => {
                debug!(
                    kind = K::KIND,
                    namespace, name, "object of no registered pod; GET"
                );
                let api: kube::Api<K> =
                    kube::Api::namespaced(self.shared.client.clone(), namespace);
                bounded(self.shared.settings.request_timeout, api.get_opt(name))
                    .await
                    .map_err(|e| ObjectError::Api {
                        kind: K::KIND,
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                        message: e.to_string(),
                    })
            }
        }
    }
}

fn pod_key(pod: &Pod) -> String {
    match pod.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_owned(),
        _ => format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

impl Shared {
    fn add_refs(&self, r: &Registration) {
        for name in &r.refs.config_maps {
            self.config_maps.add_ref(&r.namespace, name);
        }
        for name in &r.refs.secrets {
            self.secrets.add_ref(&r.namespace, name);
        }
    }

    fn remove_refs(&self, r: &Registration) {
        for name in &r.refs.config_maps {
            self.config_maps.remove_ref(&r.namespace, name);
        }
        for name in &r.refs.secrets {
            self.secrets.remove_ref(&r.namespace, name);
        }
    }
}

#[async_trait]
impl PodObjects for ApiObjects {
    fn services_synced(&self) -> bool {
        ApiObjects::services_synced(self)
    }

    /// Upstream `RegisterPod`: references of the new spec are added before those of the
    /// previous registration are dropped, so objects used by both keep their watch.
    fn register_pod(&self, pod: &Pod) {
        let registration = Registration {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
            refs: PodReferences::of(pod),
        };
        let shared = &self.shared;
        let mut registered = sync::lock(&shared.registered);
        shared.add_refs(&registration);
        if let Some(previous) = registered.insert(pod_key(pod), registration) {
            shared.remove_refs(&previous);
        }
    }

    /// Upstream `UnregisterPod` for ConfigMaps and Secrets, plus upstream
    /// `DeleteServiceAccountToken` for the pod's tokens.
    fn unregister_pod(&self, uid: &str) {
        let shared = &self.shared;
        let previous = sync::lock(&shared.registered).remove(uid);
        if let Some(previous) = previous {
            shared.remove_refs(&previous);
        }
        shared.tokens.forget_pod(uid);
    }

    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ConfigMap>, ObjectError> {
        self.lookup(&self.shared.config_maps, namespace, name).await
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, ObjectError> {
        self.lookup(&self.shared.secrets, namespace, name).await
    }

    async fn service_account_token(
        &self,
        request: &TokenRequest,
    ) -> Result<TokenGrant, ObjectError> {
        self.shared.tokens.get(request).await
    }

    fn service_env(&self, pod: &Pod) -> BTreeMap<String, String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let links = pod
            .spec
            .as_ref()
            .and_then(|s| s.enable_service_links)
            .unwrap_or(true);
        let set = sync::read(&self.shared.services);
        services::service_env(set.current.values(), namespace, links)
    }
}

impl ApiObjectsTask {
    /// Runs the services informer, the object watches (started as pods register) and the
    /// token cleanup until `cancel` fires; then stops every watch and waits for all of them.
    pub async fn run(self, cancel: CancellationToken) {
        let Self {
            shared,
            root,
            mut tasks,
        } = self;
        let mut set: JoinSet<()> = JoinSet::new();
        // The informer and the cleanup run as long as the kubelet: their panic is this task's
        // (fatal, through the supervisor); a per-object watch's panic only loses that watch.
        let singletons = [
            set.spawn(services_informer(Arc::clone(&shared), root.clone()))
                .id(),
            set.spawn(token_cleanup(Arc::clone(&shared), root.clone()))
                .id(),
        ];
        let mut senders_alive = true;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                task = tasks.recv(), if senders_alive => match task {
                    Some(task) => {
                        set.spawn(task);
                    }
                    None => senders_alive = false,
                },
                Some(done) = set.join_next_with_id(), if !set.is_empty() => {
                    if let Err(err) = done
                        && err.is_panic()
                    {
                        if singletons.contains(&err.id()) {
                            std::panic::resume_unwind(err.into_panic());
                        }
                        warn!(error = %err, "an API objects task panicked");
                    }
                }
            }
        }
        root.cancel();
        // Futures queued but never spawned hold no connection; dropping them is enough.
        tasks.close();
        while tasks.try_recv().is_ok() {}
        while set.join_next().await.is_some() {}
        info!("API objects watches stopped");
    }
}

/// Lists and watches every service (upstream's service informer), reconnecting with back-off.
async fn services_informer(shared: Arc<Shared>, stop: CancellationToken) {
    let api: kube::Api<Service> = kube::Api::all(shared.client.clone());
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut failures: u32 = 0;
    loop {
        let item = tokio::select! {
            _ = stop.cancelled() => return,
            item = stream.next() => item,
        };
        match item {
            None => {
                warn!("service watch stream ended");
                return;
            }
            Some(Ok(event)) => {
                if failures > 0 {
                    info!(failures, "service list/watch recovered");
                    failures = 0;
                }
                let listed = sync::write(&shared.services).apply(event);
                if listed {
                    shared.services_synced.send_replace(true);
                }
            }
            Some(Err(err)) => {
                failures += 1;
                warn!(attempt = failures, error = %err, "service list/watch failed; keeping the last services and retrying with back-off");
            }
        }
    }
}

/// Drops expired tokens every [`GC_PERIOD`].
async fn token_cleanup(shared: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(GC_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {
                let dropped = shared.tokens.cleanup();
                if dropped > 0 {
                    debug!(dropped, "dropped expired service account tokens");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn service(ns: &str, name: &str, ip: &str) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": ip, "ports": [{"port": 80}]}
        }))
        .unwrap()
    }

    #[test]
    fn service_set_stages_relists() {
        let mut set = ServiceSet::default();
        assert!(!set.apply(Event::Init));
        assert!(!set.apply(Event::InitApply(service("a", "x", "10.0.0.1"))));
        assert!(set.current.is_empty());
        assert!(set.apply(Event::InitDone));
        assert_eq!(set.current.len(), 1);
        assert!(!set.apply(Event::Apply(service("a", "y", "10.0.0.2"))));
        assert_eq!(set.current.len(), 2);
        assert!(!set.apply(Event::Delete(service("a", "x", "10.0.0.1"))));
        assert_eq!(set.current.len(), 1);
        // A relist replaces the set only when complete.
        set.apply(Event::Init);
        set.apply(Event::InitApply(service("b", "z", "10.0.0.3")));
        assert!(set.current.contains_key(&("a".into(), "y".into())));
        set.apply(Event::InitDone);
        assert_eq!(
            set.current.keys().cloned().collect::<Vec<_>>(),
            [("b".to_owned(), "z".to_owned())]
        );
    }

    #[test]
    fn pods_without_uid_are_keyed_by_name() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(pod_key(&pod), "ns/p");
    }
}
