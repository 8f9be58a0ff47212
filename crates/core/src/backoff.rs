//! Per-key exponential backoff (upstream `flowcontrol.Backoff`), used for CrashLoopBackOff and
//! image-pull backoff. Owns one map of key → (current delay, last update); callers pass the
//! event time (e.g. a container's `finishedAt`) so decisions are reproducible. Time comes from
//! `tokio::time::Instant` so tests can pause it.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::KubeletConfiguration;

#[derive(Debug, Clone, Copy)]
struct Entry {
    backoff: Duration,
    last_update: Instant,
}

/// Exponential backoff keyed by string: `initial` doubling up to `max`; an entry idle for more
/// than `2 * max` starts over at `initial` (upstream's reset after 10 min for containers).
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Backoff {
    /// CrashLoopBackOff parameters: 10s doubling to 300s.
    pub fn for_containers() -> Self {
        Self::new(Duration::from_secs(10), Duration::from_secs(300))
    }

    /// CrashLoopBackOff with `crashLoopBackOff.maxContainerRestartPeriod` (upstream
    /// `newCrashLoopBackOff` with `KubeletCrashLoopBackOffMax`): doubling up to `max`, starting
    /// at 10s or at `max` when that is shorter.
    pub fn for_containers_with_max(max: Duration) -> Self {
        Self::new(Duration::from_secs(10).min(max), max)
    }

    /// Image pull backoff parameters: 10s doubling to 300s.
    pub fn for_image_pulls() -> Self {
        Self::new(Duration::from_secs(10), Duration::from_secs(300))
    }

    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    /// The current delay for `key` (zero when unknown).
    pub fn get(&self, key: &str) -> Duration {
        self.entries.get(key).map(|e| e.backoff).unwrap_or_default()
    }

    /// Records one more failure at `event_time` (upstream `Next`): first failure → `initial`;
    /// later → doubled, capped at `max`; a failure more than `2 * max` after the previous
    /// record (the container ran that long: it was stable) → `initial` again. The record is
    /// stamped with the current time, as upstream.
    pub fn next(&mut self, key: &str, event_time: Instant) {
        let (initial, max) = (self.initial, self.max);
        let now = Instant::now();
        let entry = self.entries.entry(key.to_owned()).or_insert(Entry {
            backoff: Duration::ZERO,
            last_update: now,
        });
        if entry.backoff.is_zero() || has_expired(event_time, entry.last_update, max) {
            entry.backoff = initial;
        } else {
            entry.backoff = (entry.backoff * 2).min(max);
        }
        entry.last_update = now;
    }

    /// True while `now` is still inside the backoff window that started at `event_time`
    /// (upstream `IsInBackOffSince`); never when `event_time` came more than `2 * max` after
    /// the last record.
    pub fn is_in_backoff_since(&self, key: &str, event_time: Instant, now: Instant) -> bool {
        let Some(entry) = self.entries.get(key) else {
            return false;
        };
        if has_expired(event_time, entry.last_update, self.max) {
            return false;
        }
        now.saturating_duration_since(event_time) < entry.backoff
    }

    /// True while `now` is inside the window that began at the last recorded failure
    /// (upstream `IsInBackOffSinceUpdate`).
    pub fn is_in_backoff_since_update(&self, key: &str, now: Instant) -> bool {
        let Some(entry) = self.entries.get(key) else {
            return false;
        };
        if has_expired(now, entry.last_update, self.max) {
            return false;
        }
        now.saturating_duration_since(entry.last_update) < entry.backoff
    }

    /// Forgets `key` (e.g. after a successful pull).
    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Drops entries idle for more than `2 * max` (upstream `GC`).
    pub fn gc(&mut self, now: Instant) {
        let max = self.max;
        self.entries
            .retain(|_, e| !has_expired(now, e.last_update, max));
    }

    /// Number of tracked keys (for leak tests).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Upstream `newCrashLoopBackOff`: with the `KubeletCrashLoopBackOffMax` gate (off by default
/// before 1.35) the container restart back-off stops at
/// `crashLoopBackOff.maxContainerRestartPeriod` (validated to 1s..300s; 300s when unset).
/// `None`: the gate is off, upstream's 10s..300s apply.
pub fn crash_loop_max(c: &KubeletConfiguration) -> Option<Duration> {
    let gate = c
        .gates()
        .enabled(crate::config::Feature::KubeletCrashLoopBackOffMax);
    gate.then(|| {
        c.crash_loop_back_off
            .max_container_restart_period
            .map_or(Duration::from_secs(300), |d| d.as_std())
    })
}

fn has_expired(now: Instant, last_update: Instant, max: Duration) -> bool {
    now.saturating_duration_since(last_update) > max * 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn doubles_to_cap_and_resets_after_idle() {
        let mut b = Backoff::for_containers();
        let t0 = Instant::now();
        b.next("c", t0);
        assert_eq!(b.get("c"), Duration::from_secs(10));
        let mut expected = 10;
        for _ in 0..8 {
            b.next("c", t0);
            expected = (expected * 2).min(300);
            assert_eq!(b.get("c").as_secs(), expected);
        }
        assert_eq!(b.get("c"), Duration::from_secs(300));
        // Idle for more than 10 minutes: back to the initial delay.
        let later = t0 + Duration::from_secs(601);
        b.next("c", later);
        assert_eq!(b.get("c"), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn configured_max_caps_the_delay() {
        let t0 = Instant::now();
        let delays = |mut b: Backoff| {
            (0..6)
                .map(|_| {
                    b.next("c", t0);
                    b.get("c").as_secs()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            delays(Backoff::for_containers_with_max(Duration::from_secs(30))),
            [10, 20, 30, 30, 30, 30]
        );
        // Below the initial delay: every restart waits `max`.
        assert_eq!(
            delays(Backoff::for_containers_with_max(Duration::from_secs(2))),
            [2, 2, 2, 2, 2, 2]
        );
        assert_eq!(
            delays(Backoff::for_containers_with_max(Duration::from_secs(300))),
            delays(Backoff::for_containers())
        );
        // The stable-run reset follows the cap too: failing more than 2 × 30s after the last
        // restart starts over.
        let mut b = Backoff::for_containers_with_max(Duration::from_secs(30));
        b.next("c", t0);
        b.next("c", t0);
        b.next("c", t0 + Duration::from_secs(61));
        assert_eq!(b.get("c"), Duration::from_secs(10));
    }

    /// Upstream measures expiry from the failure (`event_time`) to the last record, which is
    /// stamped when recorded: a container restarted late and failing at once stays backed off
    /// although `now` is more than `2 * max` past its previous failure.
    #[tokio::test(start_paused = true)]
    async fn expiry_is_judged_at_the_failure_not_now() {
        let mut b = Backoff::for_containers_with_max(Duration::from_secs(15));
        let t0 = Instant::now();
        b.next("c", t0);
        // Failed again at +10 s; the restart (and its record) came only at +35 s.
        tokio::time::advance(Duration::from_secs(35)).await;
        b.next("c", t0 + Duration::from_secs(10));
        assert_eq!(b.get("c"), Duration::from_secs(15));
        let failed = Instant::now();
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(b.is_in_backoff_since("c", failed, Instant::now()));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!b.is_in_backoff_since("c", failed, Instant::now()));
        // A container that ran for more than 2 × max before failing is not backed off.
        let late = failed + Duration::from_secs(31);
        assert!(!b.is_in_backoff_since("c", late, late));
    }

    #[tokio::test(start_paused = true)]
    async fn in_backoff_window() {
        let mut b = Backoff::for_containers();
        let t0 = Instant::now();
        assert!(!b.is_in_backoff_since("c", t0, t0));
        b.next("c", t0);
        assert!(b.is_in_backoff_since("c", t0, t0 + Duration::from_secs(9)));
        assert!(!b.is_in_backoff_since("c", t0, t0 + Duration::from_secs(10)));
        b.gc(t0 + Duration::from_secs(700));
        assert!(b.is_empty());
    }
}
