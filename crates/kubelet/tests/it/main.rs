//! The kubelet library's integration tests in one binary: each module was one test file and
//! keeps its name (`node_shutdown::…`), `common` is their shared set-up (fake API server,
//! fake-runtime agent, private D-Bus). Modules named `containerd_*` drive the real containerd of
//! `dev/runtime.sh` and run one at a time (`.config/nextest.toml`).
//!
//! One binary, not one per file: each of ~100 test binaries linked the whole crate graph
//! (~70 MB apiece), which cost CI about 7 GB of disk and minutes of linking.

// Everything in this binary is test code, but clippy's `allow-unwrap-in-tests` (clippy.toml)
// covers only `#[test]` functions and `#[cfg(test)]` modules, not the shared helpers.
#![allow(clippy::unwrap_used)]

mod common;

mod api_certificates;
mod api_ephemeral;
mod api_events;
mod api_faults;
mod api_lifecycle;
mod api_mode;
mod api_node;
mod api_objects;
mod api_resize;
mod api_source;
mod api_status;
mod api_unknown_fields;
mod architecture;
mod cgroups;
mod containerd_grpc_probe;
mod containerd_metrics;
mod cpumanager;
mod dra;
mod evented_pleg;
mod eviction;
mod gc_agent;
mod log_rss;
mod metrics;
mod no_credentials_in_logs;
mod node_shutdown;
mod pod_lifecycle;
mod pod_workers;
mod probes;
mod recursive_read_only;
mod resize;
mod runtime_faults;
mod runtimeclass;
mod security_restart;
mod server_auth;
mod start_path;
mod supervision;
mod sync_machinery;
mod systemd_cgroups;
