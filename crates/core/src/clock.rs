//! Wall-clock time derived from `tokio::time`, so that paused-time tests move the wall clock
//! too. Owns one (wall, instant) anchor; converts runtime timestamps to instants for backoff.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::time::Instant;

/// A wall clock that advances with `tokio::time::Instant`.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base_wall: DateTime<Utc>,
    base: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// Anchors the clock at the current system time.
    pub fn new() -> Self {
        Self::anchored(Utc::now())
    }

    /// Anchors the clock at `wall` (tests).
    pub fn anchored(wall: DateTime<Utc>) -> Self {
        Self {
            base_wall: wall,
            base: Instant::now(),
        }
    }

    /// Current wall time.
    pub fn now(&self) -> DateTime<Utc> {
        let elapsed = Instant::now().saturating_duration_since(self.base);
        self.base_wall + chrono::Duration::from_std(elapsed).unwrap_or_default()
    }

    /// The instant that corresponds to wall time `t` (clamped to the anchor's past at most
    /// as far as the instant type allows).
    pub fn instant_of(&self, t: DateTime<Utc>) -> Instant {
        let now_wall = self.now();
        let now = Instant::now();
        if t >= now_wall {
            let ahead = (t - now_wall).to_std().unwrap_or_default();
            now + ahead
        } else {
            let behind = (now_wall - t).to_std().unwrap_or(Duration::ZERO);
            now.checked_sub(behind).unwrap_or(self.base)
        }
    }
}

/// Second-precision API time.
pub fn k8s_time(t: Option<DateTime<Utc>>) -> Option<Time> {
    let t = t?;
    k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
        .ok()
        .map(Time)
}
