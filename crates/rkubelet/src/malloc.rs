//! Upkeep of the C allocator (glibc malloc) for a process that runs for months: owns no state;
//! receives the shutdown token; emits a debug line when a trim gives memory back.
//!
//! glibc hands each thread that allocates an arena of its own (up to eight per core) and keeps
//! freed memory inside the arena unless it happens to sit at the arena's top. A kubelet's work
//! comes in bursts — 110 pods start, their specs, gRPC buffers and status patches are built and
//! dropped — so after a burst most of the resident anonymous memory is free yet still counted
//! in the process's RSS, and a second burst lands in other holes of other arenas. Measured with
//! 110 pods on the bench containerd: 31 MiB anonymous, 19 MiB after a `malloc_trim`.
//! Two settings keep that in check, both no-ops on other C libraries:
//! - at most [`ARENAS`] arenas, set before the runtime's threads exist;
//! - every [`CHECK_PERIOD`] the allocator's free bytes are read (`mallinfo2`), and when they
//!   rose by [`TRIM_AFTER`] since the last trim, `malloc_trim(0)` returns the free pages of
//!   every arena (not only the top) to the kernel. A quiet kubelet frees little and never
//!   trims; a burst of pod deletions is handed back within seconds. Reading the free bytes
//!   walks the allocator's bins (about half a millisecond at 110 pods), so it is not done
//!   more often.
#![allow(unsafe_code)]

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::debug;

/// One arena for every thread. Each arena keeps its own partly used pages after a burst, so a
/// second one costs resident memory: at 110 steady pods one arena measured 1.5 MiB less
/// anonymous memory than two, with no CPU cost the benchmark could see (threads keep small
/// blocks in their own caches, so the shared arena's lock is taken rarely).
pub const ARENAS: i32 = 1;
/// How often the free bytes are read: at most this long after a burst, the memory is back.
/// At 2 s the reads alone were 3 % of a steady kubelet's CPU with 110 pods.
pub const CHECK_PERIOD: Duration = Duration::from_secs(10);
/// Free bytes gained since the last trim that are worth a trim (which walks every free chunk
/// and costs a syscall per free page run).
pub const TRIM_AFTER: usize = 1 << 20;

/// Caps the number of malloc arenas. Call before any thread is spawned.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it takes plain integers and is
    // called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Returns the free pages of every arena to the kernel; true when any were released.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the arena locks itself and touches only free chunks.
    unsafe {
        libc::malloc_trim(0) == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Bytes in free chunks of every arena (`fordblks`); 0 where unknown.
pub fn free_bytes() -> usize {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallinfo2 returns a plain struct by value, reading the arenas under their locks.
    unsafe {
        libc::mallinfo2().fordblks
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    0
}

/// Whether `free` bytes, against `at_last_trim`, call for a trim.
fn worth_trimming(free: usize, at_last_trim: usize) -> bool {
    free >= at_last_trim.saturating_add(TRIM_AFTER)
}

/// Checks every [`CHECK_PERIOD`] and trims when worth it, until `cancel` fires.
pub async fn run(cancel: CancellationToken) {
    let mut tick = tokio::time::interval(CHECK_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut at_last_trim = 0;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let free = free_bytes();
        if !worth_trimming(free, at_last_trim) {
            // Memory handed out again lowers the mark, so the next burst counts in full.
            at_last_trim = at_last_trim.min(free);
            continue;
        }
        // /proc is read for the debug line only.
        let watch = tracing::enabled!(tracing::Level::DEBUG)
            .then(|| (anon_kib(), std::time::Instant::now()));
        let (released, left) = tokio::task::spawn_blocking(|| (trim(), free_bytes()))
            .await
            .unwrap_or((false, free));
        at_last_trim = left;
        if let Some((before, started)) = watch {
            debug!(
                free_bytes = free,
                released,
                anon_kib_before = before,
                anon_kib_after = anon_kib(),
                took_us = started.elapsed().as_micros() as u64,
                "trimmed the malloc arenas"
            );
        }
    }
}

/// The process's resident anonymous memory (`RssAnon` of /proc/self/status) in KiB, 0 if
/// unreadable.
fn anon_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| kubelet::metrics::process::parse_status_kb(&s, "RssAnon"))
        .map_or(0, |bytes| (bytes / 1024.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_only_after_a_megabyte_was_freed_since_the_last_trim() {
        assert!(worth_trimming(TRIM_AFTER, 0));
        assert!(!worth_trimming(TRIM_AFTER - 1, 0));
        assert!(!worth_trimming(5 << 20, 5 << 20), "nothing new freed");
        assert!(worth_trimming(6 << 20, 5 << 20));
        assert!(
            !worth_trimming(usize::MAX - 1, usize::MAX - 1),
            "no overflow"
        );
    }

    /// Memory freed in the middle of an arena (not at its top) goes back to the kernel: the
    /// process's anonymous RSS falls after a trim. Runs in a thread of its own so its arena
    /// holds only this test's blocks.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn trim_returns_freed_pages_from_inside_an_arena() {
        let (before, after) = std::thread::spawn(|| {
            // 64 MiB in 64 KiB blocks (under the mmap threshold, so inside the arena), each
            // touched so it is resident; keep every 16th so the free space is not at the top.
            let mut blocks: Vec<Vec<u8>> = (0..1024).map(|_| vec![1u8; 64 * 1024]).collect();
            let keep: Vec<Vec<u8>> = blocks
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| i % 16 == 15)
                .map(|(_, b)| std::mem::take(b))
                .collect();
            drop(blocks);
            let before = anon_kib();
            trim();
            let after = anon_kib();
            drop(keep);
            (before, after)
        })
        .join()
        .expect("test thread");
        assert!(before > 0, "RssAnon unreadable");
        assert!(
            after + 32 * 1024 < before,
            "trim should return most of the ~60 MiB freed: RssAnon {before} KiB -> {after} KiB"
        );
    }
}
