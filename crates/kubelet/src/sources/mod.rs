//! Static pod sources: the `staticPodPath` directory/file watcher and the `staticPodURL`
//! poller. Each reads manifests, turns them into validated static pods and emits the full
//! current set as `PodUpdate { op: Set, .. }` to the config merger (`crate::config_merge`).

pub mod api_refs;
pub mod decode;
pub mod defaults;
pub mod file;
pub mod http;
pub mod names;
pub mod static_pod;
pub mod validation;

pub use static_pod::{ManifestError, ManifestOrigin, make_static_pod, static_pods_from_manifest};
