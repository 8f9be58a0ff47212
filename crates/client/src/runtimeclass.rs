//! RuntimeClass lookup (upstream pkg/kubelet/runtimeclass `Manager`): owns the cache of the
//! cluster's RuntimeClasses (node.k8s.io/v1, cluster-scoped), kept by one list+watch of all of
//! them in API-server mode ([`RuntimeClassTask::run`], upstream's informer). Receives a pod's
//! `spec.runtimeClassName` at sandbox creation; emits the CRI runtime handler to pass to
//! `RunPodSandbox`, or why there is none.
//!
//! As upstream: no name (or an empty one) is the runtime's default handler `""`; a name the
//! cache does not hold (including before the first list) is a NotFound error, so the sandbox is
//! not created and the pod is retried. The kubelet reads only `handler`: `overhead` reaches pods
//! through the API server's RuntimeClass admission plugin, which copies it into
//! `spec.overhead` at pod creation.
//!
//! Deliberate divergence: upstream's kubelet without an API client has no manager and runs
//! every pod with the default handler, ignoring `runtimeClassName`. That silently downgrades a
//! pod that asked for a sandboxed runtime, so here a named class without an API server is an
//! error ([`RuntimeClassError::NoApiServer`]) and the pod never starts.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::sync;
use futures::StreamExt;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Why a pod's runtime handler could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeClassError {
    /// No RuntimeClass of that name (upstream's NotFound error, verbatim).
    #[error("runtimeclasses.node.k8s.io \"{name}\" not found")]
    NotFound { name: String },
    /// Standalone mode: the class cannot be read, and the pod must not fall back to the
    /// default handler.
    #[error(
        "spec.runtimeClassName: RuntimeClass \"{name}\" cannot be looked up without an API server (standalone mode); refusing to run the pod with the default runtime handler"
    )]
    NoApiServer { name: String },
}

/// Name → handler, as the informer reports them. A (re)list is staged and replaces the current
/// set once complete, so a relist never makes known classes vanish midway.
#[derive(Debug, Default)]
struct ClassSet {
    current: BTreeMap<String, String>,
    staging: Option<BTreeMap<String, String>>,
}

fn name_of(rc: &RuntimeClass) -> String {
    rc.metadata.name.clone().unwrap_or_default()
}

impl ClassSet {
    /// Applies one watcher event; `true` when a complete list has just been applied.
    fn apply(&mut self, event: Event<RuntimeClass>) -> bool {
        match event {
            Event::Init => self.staging = Some(BTreeMap::new()),
            Event::InitApply(rc) => {
                self.staging
                    .get_or_insert_with(BTreeMap::new)
                    .insert(name_of(&rc), rc.handler);
            }
            Event::InitDone => {
                self.current = self.staging.take().unwrap_or_default();
                return true;
            }
            Event::Apply(rc) => {
                self.current.insert(name_of(&rc), rc.handler);
            }
            Event::Delete(rc) => {
                self.current.remove(&name_of(&rc));
            }
        }
        false
    }
}

#[derive(Debug)]
struct Cache {
    classes: RwLock<ClassSet>,
    synced: watch::Sender<bool>,
}

impl Cache {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            classes: RwLock::new(ClassSet::default()),
            synced: watch::Sender::new(false),
        })
    }
}

/// Resolves `runtimeClassName`s (cheap cloneable handle). The default is standalone mode.
#[derive(Debug, Clone, Default)]
pub struct RuntimeClassManager {
    /// `None`: standalone mode, no API server to read classes from.
    cache: Option<Arc<Cache>>,
}

/// The informer of [`RuntimeClassManager::new`]: lists and watches every RuntimeClass until
/// cancelled.
pub struct RuntimeClassTask {
    cache: Arc<Cache>,
    client: kube::Client,
}

impl RuntimeClassManager {
    /// Standalone mode: no class can be resolved.
    pub fn standalone() -> Self {
        Self::default()
    }

    /// API-server mode: the handle, and the task that must run for the cache to fill.
    pub fn new(client: kube::Client) -> (Self, RuntimeClassTask) {
        let cache = Cache::new();
        let task = RuntimeClassTask {
            cache: Arc::clone(&cache),
            client,
        };
        (Self { cache: Some(cache) }, task)
    }

    /// A fixed set of `(name, handler)` classes, already synced (tests).
    pub fn with_classes<'a>(classes: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let cache = Cache::new();
        {
            let mut set = sync::write(&cache.classes);
            set.current = classes
                .into_iter()
                .map(|(n, h)| (n.to_owned(), h.to_owned()))
                .collect();
        }
        cache.synced.send_replace(true);
        Self { cache: Some(cache) }
    }

    /// Upstream `LookupRuntimeHandler`: the CRI runtime handler for `runtime_class_name`.
    pub fn lookup_runtime_handler(
        &self,
        runtime_class_name: Option<&str>,
    ) -> Result<String, RuntimeClassError> {
        let Some(name) = runtime_class_name.filter(|n| !n.is_empty()) else {
            // The default RuntimeClass: the runtime's default handler.
            return Ok(String::new());
        };
        let Some(cache) = &self.cache else {
            return Err(RuntimeClassError::NoApiServer {
                name: name.to_owned(),
            });
        };
        let set = sync::read(&cache.classes);
        set.current
            .get(name)
            .cloned()
            .ok_or_else(|| RuntimeClassError::NotFound {
                name: name.to_owned(),
            })
    }

    /// Whether the informer has completed a list (always `false` in standalone mode).
    pub fn has_synced(&self) -> bool {
        self.cache.as_ref().is_some_and(|c| *c.synced.borrow())
    }

    /// Waits up to `timeout` for the informer's first list; `true` once synced.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        let mut rx = cache.synced.subscribe();
        matches!(
            tokio::time::timeout(timeout, rx.wait_for(|s| *s)).await,
            Ok(Ok(_))
        )
    }
}

impl RuntimeClassTask {
    /// Lists and watches all RuntimeClasses (`/apis/node.k8s.io/v1/runtimeclasses`), retrying
    /// with back-off and keeping the last known classes while the API server is unreachable.
    pub async fn run(self, cancel: CancellationToken) {
        let api: kube::Api<RuntimeClass> = kube::Api::all(self.client.clone());
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut failures: u32 = 0;
        loop {
            let item = tokio::select! {
                _ = cancel.cancelled() => return,
                item = stream.next() => item,
            };
            match item {
                None => {
                    warn!("RuntimeClass watch stream ended");
                    return;
                }
                Some(Ok(event)) => {
                    if failures > 0 {
                        info!(failures, "RuntimeClass list/watch recovered");
                        failures = 0;
                    }
                    let listed = sync::write(&self.cache.classes).apply(event);
                    if listed {
                        debug!("RuntimeClass cache synced");
                        self.cache.synced.send_replace(true);
                    }
                }
                Some(Err(err)) => {
                    failures += 1;
                    warn!(attempt = failures, error = %err, "RuntimeClass list/watch failed; keeping the last classes and retrying with back-off");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn class(name: &str, handler: &str) -> RuntimeClass {
        RuntimeClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            handler: handler.into(),
            ..Default::default()
        }
    }

    #[test]
    fn no_name_is_the_default_handler_in_every_mode() {
        for m in [
            RuntimeClassManager::standalone(),
            RuntimeClassManager::with_classes([("sandbox", "kata")]),
        ] {
            assert_eq!(m.lookup_runtime_handler(None).unwrap(), "");
            assert_eq!(m.lookup_runtime_handler(Some("")).unwrap(), "");
        }
    }

    #[test]
    fn a_known_class_gives_its_handler() {
        let m = RuntimeClassManager::with_classes([("sandbox", "kata"), ("alt", "runc-alt")]);
        assert_eq!(m.lookup_runtime_handler(Some("sandbox")).unwrap(), "kata");
        assert_eq!(m.lookup_runtime_handler(Some("alt")).unwrap(), "runc-alt");
        assert!(m.has_synced());
    }

    #[test]
    fn an_unknown_class_is_upstreams_not_found() {
        let m = RuntimeClassManager::with_classes([("sandbox", "kata")]);
        let err = m.lookup_runtime_handler(Some("gvisor")).unwrap_err();
        assert_eq!(
            err,
            RuntimeClassError::NotFound {
                name: "gvisor".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "runtimeclasses.node.k8s.io \"gvisor\" not found"
        );
    }

    #[test]
    fn without_an_api_server_a_named_class_never_falls_back() {
        let m = RuntimeClassManager::standalone();
        let err = m.lookup_runtime_handler(Some("sandbox")).unwrap_err();
        assert!(matches!(err, RuntimeClassError::NoApiServer { .. }));
        let msg = err.to_string();
        assert!(msg.starts_with("spec.runtimeClassName: "), "{msg}");
        assert!(msg.contains("\"sandbox\""), "{msg}");
        assert!(!m.has_synced());
    }

    #[test]
    fn before_the_first_list_every_class_is_not_found() {
        let cache = Cache::new();
        let m = RuntimeClassManager { cache: Some(cache) };
        assert!(matches!(
            m.lookup_runtime_handler(Some("sandbox")),
            Err(RuntimeClassError::NotFound { .. })
        ));
        assert!(!m.has_synced());
    }

    #[test]
    fn watch_events_update_the_cache_and_relists_replace_it_whole() {
        let cache = Cache::new();
        let m = RuntimeClassManager {
            cache: Some(Arc::clone(&cache)),
        };
        let apply = |e| cache.classes.write().unwrap().apply(e);
        assert!(!apply(Event::Init));
        assert!(!apply(Event::InitApply(class("a", "runc-alt"))));
        // Staged only: not visible before the list completes.
        assert!(m.lookup_runtime_handler(Some("a")).is_err());
        assert!(apply(Event::InitDone));
        assert_eq!(m.lookup_runtime_handler(Some("a")).unwrap(), "runc-alt");

        apply(Event::Apply(class("b", "kata")));
        assert_eq!(m.lookup_runtime_handler(Some("b")).unwrap(), "kata");
        apply(Event::Delete(class("a", "runc-alt")));
        assert!(m.lookup_runtime_handler(Some("a")).is_err());

        // A relist keeps the old set until complete, then replaces it.
        apply(Event::Init);
        apply(Event::InitApply(class("c", "gvisor")));
        assert_eq!(m.lookup_runtime_handler(Some("b")).unwrap(), "kata");
        apply(Event::InitDone);
        assert!(m.lookup_runtime_handler(Some("b")).is_err());
        assert_eq!(m.lookup_runtime_handler(Some("c")).unwrap(), "gvisor");
    }

    #[tokio::test(start_paused = true)]
    async fn wait_synced_times_out_in_standalone_and_unsynced_modes() {
        assert!(
            !RuntimeClassManager::standalone()
                .wait_synced(Duration::from_secs(1))
                .await
        );
        let m = RuntimeClassManager {
            cache: Some(Cache::new()),
        };
        assert!(!m.wait_synced(Duration::from_secs(1)).await);
        assert!(
            RuntimeClassManager::with_classes([])
                .wait_synced(Duration::from_secs(1))
                .await
        );
    }
}
