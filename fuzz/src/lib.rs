//! rkubelet-fuzz: a stable-toolchain fuzz and property harness for the kubelet's parsers of
//! outside input. Owns the input generators (seed-corpus mutation and structured generators
//! over a deterministic PRNG), the per-input runner (panic capture, wall-time and allocation
//! limits, reproducers) and the target registry. Receives a target name and limits; emits a
//! [`runner::Report`] or a [`runner::Failure`] carrying a replayable input.

pub mod alloc;
pub mod mutate;
pub mod rng;
pub mod runner;
pub mod targets;

pub use runner::{Failure, Limits, Report, run_target};
pub use targets::{TARGETS, Target, find};
