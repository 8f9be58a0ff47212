//! rkubelet-node: the kubelet's managers of node resources, below the pod machinery. The
//! container manager (`cm`: QoS and pod cgroups, node allocatable, the CPU manager), volumes
//! (`volumes`: every in-tree plugin, atomic writer, subPath, removal, all by fd), images and their
//! pulls (`images`), credential provider plugins (`credentialprovider`), container log rotation
//! (`logs`), node-side security checks (`security`), in-place resize allocation (`allocation`),
//! host facts (`host`) and the host filesystem edge the stats read through (`hostfs`). Depends
//! on `rkubelet-config`, `rkubelet-core`, `rkubelet-client` and `rkubelet-cri`
//! (docs/architecture.md).

pub mod allocation;
pub mod cm;
pub mod credentialprovider;
pub mod host;
pub mod hostfs;
pub mod images;
pub mod logs;
pub mod security;
pub mod volumes;

pub(crate) use rkubelet_client::objects;
pub(crate) use rkubelet_config::{self as config, yaml};
pub(crate) use rkubelet_core::{
    admit, backoff, clock, container, env, events, gostr, nofollow, qos, resources, sync, types,
};
