//! The memory allocator of a process that runs for months: owns the choice of allocator
//! (mimalloc) and its settings; receives nothing and emits nothing.
//!
//! A kubelet's work comes in bursts — 110 pods start, their specs, gRPC buffers and status
//! patches are built and dropped — and, in between, a steady trickle of small, short-lived
//! blocks: the PLEG decodes two runtime listings a second (every label and annotation a string
//! of its own), housekeeping builds sets of pod UIDs every two seconds. glibc malloc spent a
//! fifth of a steady kubelet's CPU on that trickle (most of it consolidating its fast bins on
//! the next larger request) and kept the memory of a burst in its arenas until asked to trim.
//! mimalloc serves small blocks from per-thread, per-size pages and gives a page back to the
//! kernel once it is empty. Two settings make it as frugal with memory as the trimmed glibc
//! was (measured with `churn steady`, 110 pods, in `bench/README.md`):
//! - arenas are not committed eagerly ([`ARENA_EAGER_COMMIT`] off): by default on Linux an
//!   arena counts as committed from the start and its empty pages are never decommitted, so
//!   the resident memory only grows (46 MiB anonymous against glibc's 20);
//! - an empty page is purged at once ([`PURGE_DELAY`] 0 ms instead of 1 s).
//!
//! mimalloc reads its options when the process loads and reserves its first arena (1 GiB of
//! address space, where everything a kubelet allocates fits) at the first allocation, both
//! before `main`: set from `main`, the eager-commit setting came too late for that arena
//! (measured: 42 MiB anonymous). So the settings are made by a constructor that the loader runs
//! before mimalloc's own (`.init_array` priority 100 against mimalloc's 101).
#![allow(unsafe_code)]

use std::ffi::{c_int, c_long};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's option numbers (`mi_option_t`, a C enum, in its `mimalloc.h`; the Rust binding
/// does not name these two). Checked against mimalloc's own names by
/// `tests::the_options_are_the_ones_meant`.
const ARENA_EAGER_COMMIT: c_int = 4;
const PURGE_DELAY: c_int = 15;

unsafe extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
}

/// Sets the allocator up for a long-running agent. Runs as a constructor, before mimalloc's
/// (which reads the options) and before anything is allocated.
extern "C" fn configure() {
    // SAFETY: plain setters of mimalloc's static option table (no allocation, no other thread
    // yet), with option numbers in range.
    unsafe {
        mi_option_set(ARENA_EAGER_COMMIT, 0);
        mi_option_set(PURGE_DELAY, 0);
    }
}

/// The loader runs `.init_array` entries in ascending priority; mimalloc's process set-up is a
/// `constructor(101)`.
#[used]
#[unsafe(link_section = ".init_array.00100")]
static CONFIGURE: extern "C" fn() = configure;

#[cfg(test)]
mod tests {
    use std::ffi::{c_char, c_void};

    use super::*;

    /// The two settings as mimalloc has them now: (eager commit, purge delay in ms).
    fn settings() -> (c_long, c_long) {
        unsafe extern "C" {
            fn mi_option_get(option: c_int) -> c_long;
        }
        // SAFETY: reads of mimalloc's option table.
        unsafe {
            (
                mi_option_get(ARENA_EAGER_COMMIT),
                mi_option_get(PURGE_DELAY),
            )
        }
    }

    /// mimalloc's own listing of its options (`option 'name': value` lines).
    fn options_listing() -> String {
        unsafe extern "C" {
            fn mi_options_print_out(
                out: Option<unsafe extern "C" fn(*const c_char, *mut c_void)>,
                arg: *mut c_void,
            );
        }
        unsafe extern "C" fn append(msg: *const c_char, arg: *mut c_void) {
            // SAFETY: `arg` is the `String` passed below, alive for the call; `msg` is a
            // NUL-terminated line from mimalloc.
            unsafe {
                let out = &mut *arg.cast::<String>();
                out.push_str(&std::ffi::CStr::from_ptr(msg).to_string_lossy());
            }
        }
        let mut out = String::new();
        // SAFETY: the callback only appends to `out`, which outlives the call.
        unsafe { mi_options_print_out(Some(append), (&raw mut out).cast::<c_void>()) };
        out
    }

    /// The option numbers name the options meant: mimalloc lists them by name after they
    /// were set (a new mimalloc that renumbered its options fails here, not in production).
    #[test]
    fn the_options_are_the_ones_meant() {
        assert_eq!(settings(), (0, 0), "set before main by the constructor");
        let listing = options_listing();
        for line in ["option 'arena_eager_commit': 0", "option 'purge_delay': 0"] {
            assert!(listing.contains(line), "{line:?} not in:\n{listing}");
        }
    }

    /// Memory freed in the middle of the heap (not at its end) goes back to the kernel without
    /// being asked: the process's anonymous RSS falls once the blocks are dropped. Runs in a
    /// thread of its own so its pages hold only this test's blocks.
    #[test]
    fn freed_pages_go_back_to_the_kernel() {
        let (before, after) = std::thread::spawn(|| {
            // 64 MiB in 64 KiB blocks, each touched so it is resident; every 64th is kept so
            // the free space is not one run at the end (a page that still holds a block stays,
            // as in any allocator).
            let mut blocks: Vec<Vec<u8>> = (0..1024).map(|_| vec![1u8; 64 * 1024]).collect();
            let before = anon_kib();
            let keep: Vec<Vec<u8>> = blocks
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| i % 64 == 63)
                .map(|(_, b)| std::mem::take(b))
                .collect();
            drop(blocks);
            let after = anon_kib();
            drop(keep);
            (before, after)
        })
        .join()
        .expect("test thread");
        assert!(before > 0, "RssAnon unreadable");
        assert!(
            after + 32 * 1024 < before,
            "most of the ~60 MiB freed should be back: RssAnon {before} KiB -> {after} KiB"
        );
    }

    /// The process's resident anonymous memory (`RssAnon` of /proc/self/status) in KiB.
    fn anon_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| kubelet::metrics::process::parse_status_kb(&s, "RssAnon"))
            .map_or(0, |bytes| (bytes / 1024.0) as u64)
    }
}
