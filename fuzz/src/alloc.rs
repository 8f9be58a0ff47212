//! A counting global allocator: forwards every call to [`System`] and keeps the bytes live now
//! and the high-water mark since the last [`reset_peak`]. The runner binary and the smoke tests
//! install it with `#[global_allocator]`; the runner reads the per-input peak from it.
//!
//! Counts are process-wide: run one target per process (the CLI and nextest do) for exact
//! figures; threads running in parallel (plain `cargo test`) can only inflate them.

// `GlobalAlloc` is an unsafe trait, so implementing it needs `unsafe impl`; this is the only
// unsafe code in the harness and it only forwards each call unchanged to `System`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering::Relaxed};

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The counting allocator (`#[global_allocator] static A: Counting = Counting;`).
pub struct Counting;

fn grow(n: usize) {
    let now = LIVE.fetch_add(n as isize, Relaxed) + n as isize;
    PEAK.fetch_max(now, Relaxed);
}

fn shrink(n: usize) {
    LIVE.fetch_sub(n as isize, Relaxed);
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the bookkeeping only touches atomics and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) };
        shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            grow(new_size);
            shrink(layout.size());
        }
        p
    }
}

/// Bytes allocated and not yet freed.
pub fn live() -> isize {
    LIVE.load(Relaxed)
}

/// Starts a new measurement: the peak becomes the live byte count; returns that baseline.
pub fn reset_peak() -> isize {
    let now = LIVE.load(Relaxed);
    PEAK.store(now, Relaxed);
    now
}

/// The highest live byte count since [`reset_peak`].
pub fn peak() -> isize {
    PEAK.load(Relaxed)
}

/// Whether the counting allocator is the global allocator of this process (checked once by
/// allocating, then remembered).
pub fn installed() -> bool {
    if INSTALLED.load(Relaxed) {
        return true;
    }
    let before = LIVE.load(Relaxed);
    let probe = std::hint::black_box(vec![0u8; 4096]);
    let seen = LIVE.load(Relaxed) != before;
    drop(probe);
    if seen {
        INSTALLED.store(true, Relaxed);
    }
    seen
}
