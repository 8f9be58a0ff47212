//! The CI smoke of every fuzz target: a fixed seed and a bounded number of inputs each
//! (`Target::smoke_inputs`), under the panic and 64 MiB per-input limits of the long runs, so a
//! parser regression fails `./dev/test.sh`. The per-input time limit is 5 s here, not 1 s: CI
//! shares its CPU and disk, and a debug-build input that stalls for half a second there is
//! noise; the regressions this catches (hangs, blow-ups) take far longer.

use std::time::Duration;

use rkubelet_fuzz::{Limits, find, run_target};

#[global_allocator]
static ALLOC: rkubelet_fuzz::alloc::Counting = rkubelet_fuzz::alloc::Counting;

fn smoke(name: &str) {
    let target = find(name).unwrap_or_else(|| panic!("no target {name}"));
    let limits = Limits {
        seed: 0x5eed,
        inputs: Some(target.smoke_inputs),
        max_input_time: Duration::from_secs(5),
        ..Limits::default()
    };
    match run_target(target, &limits) {
        Ok(report) => {
            eprintln!("{report}");
            assert_eq!(report.inputs, target.smoke_inputs);
            assert!(
                report.max_input_alloc.is_some(),
                "counting allocator not installed"
            );
        }
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn smoke_static_pod() {
    smoke("static-pod");
}

#[test]
fn smoke_kubelet_config() {
    smoke("kubelet-config");
}

#[test]
fn smoke_quantity() {
    smoke("quantity");
}

#[test]
fn smoke_duration() {
    smoke("duration");
}

#[test]
fn smoke_http_query() {
    smoke("http-query");
}

#[test]
fn smoke_http_route() {
    smoke("http-route");
}

#[test]
fn smoke_cri_log() {
    smoke("cri-log");
}

#[test]
fn smoke_smp_diff() {
    smoke("smp-diff");
}

#[test]
fn smoke_cri_status() {
    smoke("cri-status");
}

#[test]
fn every_target_has_a_smoke_test() {
    let covered = [
        "static-pod",
        "kubelet-config",
        "quantity",
        "duration",
        "http-query",
        "http-route",
        "cri-log",
        "smp-diff",
        "cri-status",
    ];
    for t in rkubelet_fuzz::TARGETS {
        assert!(
            covered.contains(&t.name),
            "target {} has no smoke test",
            t.name
        );
    }
}
