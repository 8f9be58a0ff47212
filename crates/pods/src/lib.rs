//! rkubelet-pods: the machinery that runs pods. One serial worker per pod (`pod_workers`),
//! the runtime manager (`kuberuntime`: pure `compute_pod_actions`, then the CRI side effects),
//! the pod lifecycle event generator (`pleg`), probes (`prober`), every pod's API status
//! (`status`: the pure generator and the manager that owns it) and the stats of pods and the
//! node (`stats`). Depends on `rkubelet-config`, `rkubelet-core`, `rkubelet-client`,
//! `rkubelet-node` and `rkubelet-cri` (docs/architecture.md).

pub mod kuberuntime;
pub mod pleg;
pub mod pod_workers;
pub mod prober;
pub mod stats;
pub mod status;

pub(crate) use rkubelet_client::{apiclient, objects, runtimeclass};
#[cfg(test)]
pub(crate) use rkubelet_core::log_capture;
pub(crate) use rkubelet_core::{
    backoff, clock, container, data_dirs, env, events, metrics, nofollow, qos, resources,
    spare_capacity, supervisor, sync, types,
};
pub(crate) use rkubelet_node::{allocation, cm, credentialprovider, images, security, volumes};
