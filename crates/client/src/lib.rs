//! rkubelet-client: everything that talks to the Kubernetes API server on the kubelet's behalf.
//! The rate-limited client built from the kubeconfig and two-way strategic merge patches
//! (`apiclient`), ConfigMaps, Secrets, service links and service account tokens for pods
//! (`objects`), client and serving certificates, TLS bootstrap and rotation (`certificate`), the
//! node Lease (`nodelease`), RuntimeClass handlers (`runtimeclass`) and events to the API with
//! upstream's correlation, aggregation and rate limit (`events_api`). Depends on
//! `rkubelet-config` and `rkubelet-core` only (docs/architecture.md).

pub mod apiclient;
pub mod certificate;
pub mod events_api;
pub mod nodelease;
pub mod objects;
pub mod runtimeclass;

pub(crate) use rkubelet_config::yaml;
pub(crate) use rkubelet_core::{clock, events, metrics, nofollow, sync, types};
