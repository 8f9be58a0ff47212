//! rkubelet-core: the vocabulary every layer of the kubelet shares, with no manager in it.
//! Pod identity and sources (`types`), the runtime-side pod view and its cache (`container`),
//! the clock and back-off, events (`events`: the recorder trait every manager emits through),
//! health checks, the metrics registry and families, task supervision, poison-recovering locks
//! (`sync`), Go-compatible string formatting, the Kubernetes version, the shrinking of per-pod
//! maps after churn (`spare_capacity`) and the no-follow file primitives (`nofollow`) every
//! writer of kubelet state uses. It depends on `rkubelet-config` only; every other kubelet crate
//! depends on it (docs/architecture.md).

pub mod admit;
pub mod backoff;
pub mod clock;
pub mod container;
pub mod data_dirs;
pub mod env;
pub mod events;
pub mod gostr;
pub mod health;
#[cfg(any(test, feature = "test-util"))]
pub mod log_capture;
pub mod metrics;
pub mod nofollow;
pub mod qos;
pub mod resources;
pub mod spare_capacity;
pub mod supervisor;
pub mod sync;
pub mod types;
pub mod version;

pub(crate) use rkubelet_config as config;
