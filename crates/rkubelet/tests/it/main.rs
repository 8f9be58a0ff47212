//! Black-box tests of the `rkubelet` binary in one test binary: each module was one test file
//! and keeps its name (`containerd_stats::…`), `common` is the harness (kubelet process, fake
//! API server, CRI client, fault tools). Modules named `containerd_*` drive the real containerd
//! of `dev/runtime.sh` and run one at a time (`.config/nextest.toml`).
//!
//! One binary, not one per file: each of ~100 test binaries linked the whole crate graph
//! (~70 MB apiece), which cost CI about 7 GB of disk and minutes of linking.

// Everything in this binary is test code, but clippy's `allow-unwrap-in-tests` (clippy.toml)
// covers only `#[test]` functions and `#[cfg(test)]` modules, not the shared helpers.
#![allow(clippy::unwrap_used)]

mod common;

mod cli;
mod containerd;
mod containerd_adopt;
mod containerd_api;
mod containerd_api_objects;
mod containerd_certificates;
mod containerd_cgroups;
mod containerd_cpumanager;
mod containerd_ctl;
mod containerd_ctl_logs_doctor;
mod containerd_ephemeral;
mod containerd_etc_hosts;
mod containerd_evented_pleg;
mod containerd_eviction;
mod containerd_example_config;
mod containerd_faults_api;
mod containerd_faults_disk;
mod containerd_faults_kill;
mod containerd_faults_logs;
mod containerd_faults_reboot;
mod containerd_faults_runtime;
mod containerd_faults_slowcri;
mod containerd_faults_soak;
mod containerd_gc;
mod containerd_hostile_files;
mod containerd_kubeadm;
mod containerd_lifecycle;
mod containerd_private_image;
mod containerd_probes;
mod containerd_resize;
mod containerd_resource_metrics;
mod containerd_runtimeclass;
mod containerd_sandbox_loss;
mod containerd_security;
mod containerd_security_volumes;
mod containerd_server;
mod containerd_stats;
mod containerd_streaming;
mod containerd_subpath;
mod containerd_volumes;
mod ctl;
