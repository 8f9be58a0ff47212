//! rkubelet-kubelet, the facade: pod sources, config merge, the pod manager, mirror pods, the
//! sync loop, admission, eviction, node shutdown, node status, the HTTP server, the
//! instrumented syncer and scrapers, and the agent that assembles every layer. The lower crates
//! (config, core, client, node, pods) are re-exported at the paths they had when this was one
//! crate. Data path: sources → config_merge → pod_manager → sync_loop → pod_workers →
//! kuberuntime (pure `compute_pod_actions`, then CRI side effects); PLEG events feed back into
//! the sync loop and the status manager owns every pod's API status (docs/architecture.md).

pub mod admission;
pub use rkubelet_core::admit;
pub mod agent;
pub use rkubelet_client::apiclient;
pub use rkubelet_client::certificate;
pub use rkubelet_config as config;
pub use rkubelet_core::backoff;
pub use rkubelet_core::clock;
pub use rkubelet_node::allocation;
pub use rkubelet_node::cm;
pub mod config_merge;
pub use rkubelet_core::container;
pub use rkubelet_core::data_dirs;
pub use rkubelet_node::credentialprovider;
pub use rkubelet_node::hostfs;
pub mod doctor;
pub use rkubelet_client::events_api;
pub use rkubelet_core::env;
pub use rkubelet_core::events;
pub mod events_ring;
pub mod eviction;
pub use rkubelet_core::gostr;
pub use rkubelet_core::health;
#[cfg(test)]
use rkubelet_core::log_capture;
pub use rkubelet_core::nofollow;
pub use rkubelet_core::spare_capacity;
pub use rkubelet_node::host;
pub use rkubelet_node::images;
pub use rkubelet_node::logs;
pub use rkubelet_pods::kuberuntime;
pub mod metrics;
pub mod mirror;
pub use rkubelet_client::nodelease;
pub mod nodeshutdown;
pub mod nodestatus;
pub use rkubelet_client::objects;
pub use rkubelet_pods::pleg;
pub mod pod_manager;
pub use rkubelet_client::runtimeclass;
pub use rkubelet_core::qos;
pub use rkubelet_core::resources;
pub use rkubelet_node::security;
pub use rkubelet_pods::pod_workers;
pub use rkubelet_pods::prober;
pub mod server;
pub mod sources;
pub use rkubelet_core::supervisor;
pub use rkubelet_core::sync;
pub use rkubelet_pods::stats;
pub use rkubelet_pods::status;
pub mod sync_loop;
pub use rkubelet_config::yaml;
pub use rkubelet_core::types;
pub use rkubelet_core::version;
pub use rkubelet_node::volumes;
