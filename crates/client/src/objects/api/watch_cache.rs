//! Per-object watches for ConfigMaps and Secrets (upstream `watch_based_manager.go`
//! `objectCache`, the default `Watch` change-detection strategy): owns one reference-counted
//! entry per `(namespace, name)` with the object as the last list/watch reported it. Receives
//! add/remove-reference calls (from pod registration) and lookups; emits one list+watch
//! (`fieldSelector=metadata.name=<name>`) per referenced object, handed as a future to the
//! `ApiObjectsTask` to run, and stops it when the last reference goes or the object turns out
//! to be immutable.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::objects::ObjectError;
use crate::sync;

/// A task for the `ApiObjectsTask` to run (it ends when its watch is stopped or the task's
/// cancellation fires).
pub type BoxTask = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The kinds watched one object at a time.
pub trait Watched:
    kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// Lower-case kind for messages (upstream's wording: `configmap`, `secret`).
    const KIND: &'static str;
    /// `immutable: true`.
    fn immutable(&self) -> bool;
}

impl Watched for ConfigMap {
    const KIND: &'static str = "configmap";
    fn immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

impl Watched for Secret {
    const KIND: &'static str = "secret";
    fn immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

/// What the watch of one object knows.
#[derive(Debug, Clone)]
enum Slot<K> {
    /// No complete list yet.
    Unsynced,
    /// Listed: the object, or `None` when it does not exist.
    Synced(Option<Arc<K>>),
}

struct Entry<K> {
    refs: usize,
    slot: Arc<watch::Sender<Slot<K>>>,
    stop: CancellationToken,
}

/// The answer of [`ObjectCache::get`].
#[derive(Debug, Clone, PartialEq)]
pub enum Cached<K> {
    /// No registered pod refers to the object: ask the API server directly.
    NotRegistered,
    /// From the watch: the object or `None` when it does not exist.
    Found(Option<K>),
}

type Key = (String, String);

/// The watched objects of one kind.
pub struct ObjectCache<K: Watched> {
    client: kube::Client,
    /// Parent of every watch's stop token: cancelled when the task shuts down.
    root: CancellationToken,
    tasks: mpsc::UnboundedSender<BoxTask>,
    entries: Mutex<HashMap<Key, Entry<K>>>,
}

impl<K: Watched> Debug for ObjectCache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache")
            .field("kind", &K::KIND)
            .field("entries", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl<K: Watched> ObjectCache<K> {
    pub fn new(
        client: kube::Client,
        root: CancellationToken,
        tasks: mpsc::UnboundedSender<BoxTask>,
    ) -> Self {
        Self {
            client,
            root,
            tasks,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry<K>>> {
        sync::lock(&self.entries)
    }

    /// One more pod refers to `namespace/name`; the first reference starts its watch
    /// (upstream `AddReference`).
    pub fn add_ref(&self, namespace: &str, name: &str) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut entries = self.lock();
        if let Some(e) = entries.get_mut(&key) {
            e.refs += 1;
            return;
        }
        let slot = Arc::new(watch::Sender::new(Slot::Unsynced));
        let stop = self.root.child_token();
        let task = watch_object::<K>(
            self.client.clone(),
            key.clone(),
            Arc::clone(&slot),
            stop.clone(),
        );
        if self.tasks.send(Box::pin(task)).is_err() {
            debug!(
                kind = K::KIND,
                namespace, name, "objects task gone; not watching"
            );
        }
        entries.insert(
            key,
            Entry {
                refs: 1,
                slot,
                stop,
            },
        );
    }

    /// One pod less refers to `namespace/name`; the last one stops its watch and forgets the
    /// object (upstream `DeleteReference`).
    pub fn remove_ref(&self, namespace: &str, name: &str) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut entries = self.lock();
        if let Some(e) = entries.get_mut(&key) {
            e.refs = e.refs.saturating_sub(1);
            if e.refs == 0 {
                e.stop.cancel();
                entries.remove(&key);
            }
        }
    }

    /// The object from its watch, waiting up to `timeout` for the watch's first list (upstream
    /// polls `hasSynced` for one second, then "failed to sync … cache"). An immutable object
    /// stops its watch; the cached copy is served from then on.
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Cached<K>, ObjectError> {
        let key = (namespace.to_owned(), name.to_owned());
        let rx = self.lock().get(&key).map(|e| e.slot.subscribe());
        let Some(mut rx) = rx else {
            return Ok(Cached::NotRegistered);
        };
        let object = match tokio::time::timeout(
            timeout,
            rx.wait_for(|s| matches!(s, Slot::Synced(_))),
        )
        .await
        {
            Err(_) => return Err(ObjectError::NotSynced { kind: K::KIND }),
            // The entry went away while waiting (its last pod was unregistered).
            Ok(Err(_)) => return Ok(Cached::NotRegistered),
            Ok(Ok(slot)) => match &*slot {
                Slot::Synced(o) => o.clone(),
                Slot::Unsynced => None,
            },
        };
        if let Some(o) = &object
            && o.immutable()
            && let Some(e) = self.lock().get(&key)
            && !e.stop.is_cancelled()
        {
            debug!(
                kind = K::KIND,
                namespace, name, "stopped watching for changes - object is immutable"
            );
            e.stop.cancel();
        }
        Ok(Cached::Found(object.map(|o| K::clone(&o))))
    }

    /// `(namespace, name)` of the objects whose watch is running, sorted.
    pub fn watched(&self) -> Vec<(String, String)> {
        let mut keys: Vec<Key> = self
            .lock()
            .iter()
            .filter(|(_, e)| !e.stop.is_cancelled())
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// `(namespace, name)` of every referenced object with its reference count, sorted.
    pub fn references(&self) -> Vec<((String, String), usize)> {
        let mut refs: Vec<_> = self
            .lock()
            .iter()
            .map(|(k, e)| (k.clone(), e.refs))
            .collect();
        refs.sort();
        refs
    }
}

/// Lists and watches one object until `stop` fires, publishing into `slot`. Errors are retried
/// by the watcher with back-off; the last known state stays served meanwhile (as the
/// reflector's store does).
async fn watch_object<K: Watched>(
    client: kube::Client,
    (namespace, name): Key,
    slot: Arc<watch::Sender<Slot<K>>>,
    stop: CancellationToken,
) {
    if stop.is_cancelled() {
        return;
    }
    let api: kube::Api<K> = kube::Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher::watcher(api, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut staging: Option<Option<Arc<K>>> = None;
    let mut failures: u32 = 0;
    debug!(kind = K::KIND, %namespace, %name, "watching object");
    loop {
        let item = tokio::select! {
            _ = stop.cancelled() => break,
            item = stream.next() => item,
        };
        match item {
            None => {
                warn!(kind = K::KIND, %namespace, %name, "object watch stream ended");
                break;
            }
            Some(Ok(event)) => {
                if failures > 0 {
                    info!(kind = K::KIND, %namespace, %name, failures, "object watch recovered");
                    failures = 0;
                }
                match event {
                    Event::Init => staging = Some(None),
                    Event::InitApply(o) => staging = Some(Some(Arc::new(o))),
                    Event::InitDone => {
                        let listed = staging.take().flatten();
                        slot.send_replace(Slot::Synced(listed));
                    }
                    Event::Apply(o) => {
                        slot.send_replace(Slot::Synced(Some(Arc::new(o))));
                    }
                    Event::Delete(_) => {
                        slot.send_replace(Slot::Synced(None));
                    }
                }
            }
            Some(Err(err)) => {
                failures += 1;
                warn!(
                    kind = K::KIND, %namespace, %name, attempt = failures, error = %err,
                    "object list/watch failed; keeping the last state and retrying with back-off"
                );
            }
        }
    }
    debug!(kind = K::KIND, %namespace, %name, "stopped watching object");
}
