//! The target registry: one entry per parser of outside input. Each target is a generator
//! (a pure function of an [`Rng`]) and a runner (`fn(&[u8])` that panics on a broken property),
//! so adding a target is one file with those two functions plus one line in [`TARGETS`].

use crate::rng::Rng;

mod cri_log;
mod cri_status;
mod duration;
mod http;
mod kubelet_config;
mod quantity;
mod smp_diff;
mod static_pod;

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    pub about: &'static str,
    /// Builds input number `i` from its own generator.
    pub generate: fn(&mut Rng) -> Vec<u8>,
    /// Runs one input; panics (as the parsers under test would) when a property breaks.
    pub run: fn(&[u8]),
    /// Inputs the `cargo test` smoke runs (debug build; all targets together stay well under
    /// two minutes on two cores).
    pub smoke_inputs: u64,
}

/// Every target, in the order `all` runs them.
pub const TARGETS: &[Target] = &[
    static_pod::TARGET,
    kubelet_config::TARGET,
    quantity::TARGET,
    duration::TARGET,
    http::TARGET,
    http::ROUTE,
    cri_log::TARGET,
    smp_diff::TARGET,
    cri_status::TARGET,
];

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
