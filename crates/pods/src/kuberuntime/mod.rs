//! kuberuntime: turns a desired pod plus the runtime's view of it into CRI calls.
//! Pure decisions (`actions`, `env`, `hash`, `sandbox_config`, `container_config`, `labels`) are
//! kept apart from the side effects (`runtime_status` reads, `sync` acts).

pub mod actions;
pub mod container_config;
pub mod context;
pub mod dra;
pub mod env_objects;
pub mod ephemeral;
pub mod gc;
pub mod hash;
pub mod hooks;
pub mod kill;
pub mod labels;
pub mod recursive_read_only;
pub mod resize;
pub mod runtime_status;
pub mod sandbox_config;
pub mod start;
pub mod sync;

#[cfg(test)]
mod security_tests;
