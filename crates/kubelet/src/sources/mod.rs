//! Pod sources: the `staticPodPath` directory/file watcher (`file`), the `staticPodURL`
//! poller (`http`) and, with a kubeconfig, the API server's pods bound to this node (`api`).
//! The static sources read manifests, turn them into validated static pods
//! (`decode` → `defaults` → `static_pod` → `validation`/`api_refs`) and emit the full current
//! set as `PodUpdate { op: Set, .. }` to the config merger (`crate::config_merge`). Pod fields
//! the kubelet does not know are caught at decode (`unknown_fields`).

pub mod api;
pub mod api_refs;
pub mod decode;
pub mod defaults;
pub mod file;
pub mod http;
pub mod names;
pub mod static_pod;
pub mod unknown_fields;
pub mod validation;

pub use file::{FileSource, FileSourceError, ManifestSnapshot, read_manifests};
pub use http::{FetchError, HttpSource, HttpSourceError};
pub use static_pod::{
    ManifestError, ManifestOrigin, make_static_pod, static_pod_name, static_pod_uid,
    static_pods_from_manifest,
};
pub use validation::{FieldError, validate_pod};
