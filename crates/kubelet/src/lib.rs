//! rkubelet library: a Kubernetes node agent. Data path (see DESIGN.md):
//! sources → config_merge → pod_manager → sync_loop → pod_workers → kuberuntime (pure
//! `compute_pod_actions`, then CRI side effects); PLEG events feed back into the sync loop and
//! the status manager owns every pod's API status.

pub mod admission;
pub use rkubelet_core::admit;
pub mod agent;
pub mod allocation;
pub use rkubelet_client::apiclient;
pub use rkubelet_client::certificate;
pub use rkubelet_core::backoff;
pub use rkubelet_core::clock;
pub mod cm;
pub use rkubelet_config as config;
pub mod config_merge;
pub use rkubelet_core::container;
pub mod credentialprovider;
pub use rkubelet_core::data_dirs;
pub mod doctor;
pub use rkubelet_client::events_api;
pub use rkubelet_core::env;
pub use rkubelet_core::events;
pub mod events_ring;
pub mod eviction;
pub use rkubelet_core::fsat;
pub use rkubelet_core::gostr;
pub mod images;
pub mod kuberuntime;
#[cfg(test)]
use rkubelet_core::log_capture;
pub mod logs;
pub use rkubelet_core::maps;
pub mod metrics;
pub mod mirror;
pub use rkubelet_client::nodelease;
pub mod nodeshutdown;
pub mod nodestatus;
pub use rkubelet_client::objects;
pub mod pleg;
pub mod pod_manager;
pub mod pod_workers;
pub use rkubelet_core::qos;
pub mod prober;
pub use rkubelet_client::runtimeclass;
pub use rkubelet_core::resources;
pub mod security;
pub mod server;
pub mod sources;
pub mod stats;
pub mod status;
pub use rkubelet_core::supervisor;
pub mod sync_loop;
pub use rkubelet_core::types;
pub use rkubelet_core::version;
pub mod volumes;
pub use rkubelet_config::yaml;
