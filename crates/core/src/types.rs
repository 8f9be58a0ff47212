//! Shared vocabulary of the data path: pod sources, pod update operations and the
//! well-known annotation/label keys. Owns no state; every other module speaks these types.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// A pod's UID as a string (`metadata.uid`).
pub type PodUid = String;

/// Where a pod came from (`kubernetes.io/config.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodSource {
    /// Static pods from `staticPodPath`.
    File,
    /// Static pods from `staticPodURL`.
    Http,
    /// Pods bound to this node through the API server.
    Api,
}

impl PodSource {
    /// The value upstream writes into the `kubernetes.io/config.source` annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            PodSource::File => "file",
            PodSource::Http => "http",
            PodSource::Api => "api",
        }
    }

    /// Parses the annotation value back.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "file" => Some(PodSource::File),
            "http" => Some(PodSource::Http),
            "api" => Some(PodSource::Api),
            _ => None,
        }
    }

    /// Static (non-API) sources.
    pub fn is_static(self) -> bool {
        !matches!(self, PodSource::Api)
    }
}

impl fmt::Display for PodSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The operation a pod update carries, as upstream's `kubetypes.PodOperation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodOp {
    /// The full set of pods of one source (sources send this; the merger turns it into the rest).
    Set,
    /// Pods that are new to the kubelet.
    Add,
    /// Pods whose spec (or labels/annotations/deletion fields) changed.
    Update,
    /// Pods the source no longer has: the kubelet kills and forgets them.
    Remove,
    /// Pods that were gracefully deleted (API source only).
    Delete,
    /// Pods whose status alone changed upstream: reconcile, no spec change.
    Reconcile,
}

/// One batch of pod changes from one source. Pods are shared, not copied: a source's cache,
/// the config merger's store, the pod manager and the pod workers hold the same `Arc` until
/// one of them changes it (copy on write).
#[derive(Debug, Clone)]
pub struct PodUpdate {
    pub op: PodOp,
    pub source: PodSource,
    pub pods: Vec<Arc<Pod>>,
}

impl PodUpdate {
    /// An update of pods not shared with anyone yet.
    pub fn new(op: PodOp, source: PodSource, pods: impl IntoIterator<Item = Pod>) -> Self {
        Self {
            op,
            source,
            pods: pods.into_iter().map(Arc::new).collect(),
        }
    }
}

/// Upstream eviction `Reason`: the pod status reason of a pod the kubelet evicted (set by the
/// eviction manager, kept by the status manager).
pub const EVICTED_REASON: &str = "Evicted";

/// Annotation: which source a pod came from.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation: the content hash of a static pod (equals the UID for file/http pods).
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Annotation: when the kubelet first saw this pod (RFC 3339 with nanoseconds).
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Annotation on a mirror pod.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Short helpers on `Pod` used all over the data path.
pub trait PodExt {
    fn uid(&self) -> &str;
    fn name(&self) -> &str;
    fn namespace(&self) -> &str;
    /// `namespace/name` for logs.
    fn full_name(&self) -> String;
    fn source(&self) -> Option<PodSource>;
    fn annotation(&self, key: &str) -> Option<&str>;
}

impl PodExt for Pod {
    fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or_default()
    }
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
    fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }
    fn full_name(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }
    fn source(&self) -> Option<PodSource> {
        self.annotation(CONFIG_SOURCE_ANNOTATION)
            .and_then(PodSource::parse)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }
}

/// The regular desired pods, sorted by full name, as published to readers; each pod is the
/// pod manager's own (shared, not copied).
pub type PodsSnapshot = Arc<Vec<Arc<Pod>>>;

/// A [`PodsSnapshot`] of `pods` (readers' tests and fixtures).
pub fn pods_snapshot(pods: impl IntoIterator<Item = Pod>) -> PodsSnapshot {
    Arc::new(pods.into_iter().map(Arc::new).collect())
}
