//! Registry pull rate limit (upstream `throttleImagePulling` with client-go's token bucket):
//! owns a token bucket of `registryBurst` tokens refilled at `registryPullQPS` per second.
//! Receives pull attempts; answers at once whether one may go ahead: an attempt over the limit
//! is refused (upstream fails it with "pull QPS exceeded", it does not wait).

use std::sync::Mutex;

use crate::sync;
use tokio::time::Instant;

/// The error text of a refused pull, as upstream.
pub const PULL_QPS_EXCEEDED: &str = "pull QPS exceeded";

/// A token bucket that starts full.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: Instant::now(),
        }
    }

    /// Takes a token if one is available at `now` (client-go `TryAccept`).
    pub fn try_accept(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = self.last.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The pull limiter shared by all pulls of an image manager.
#[derive(Debug)]
pub struct PullLimiter {
    bucket: Mutex<TokenBucket>,
}

impl PullLimiter {
    /// `None` when `qps` is 0 (or negative): no limit, as upstream.
    pub fn from_config(qps: i32, burst: i32) -> Option<Self> {
        (qps > 0).then(|| Self {
            bucket: Mutex::new(TokenBucket::new(
                f64::from(qps),
                u32::try_from(burst).unwrap_or(0),
            )),
        })
    }

    /// Whether a pull may start now.
    pub fn try_accept(&self) -> bool {
        sync::lock(&self.bucket).try_accept(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_burst_then_refills_at_qps() {
        let limiter = PullLimiter::from_config(5, 10).expect("qps > 0 limits");
        let accepted = (0..15).filter(|_| limiter.try_accept()).count();
        assert_eq!(accepted, 10, "the burst, then nothing at the same instant");
        tokio::time::advance(Duration::from_millis(199)).await;
        assert!(
            !limiter.try_accept(),
            "less than one token after 199ms at 5/s"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(limiter.try_accept(), "one token every 200ms");
        assert!(!limiter.try_accept());
        // A long pause refills up to the burst, never beyond.
        tokio::time::advance(Duration::from_secs(60)).await;
        let accepted = (0..15).filter(|_| limiter.try_accept()).count();
        assert_eq!(accepted, 10);
    }

    #[test]
    fn zero_qps_means_no_limit() {
        assert!(PullLimiter::from_config(0, 10).is_none());
        assert!(PullLimiter::from_config(-1, 10).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn zero_burst_refuses_everything() {
        let limiter = PullLimiter::from_config(5, 0).expect("qps > 0 limits");
        assert!(!limiter.try_accept());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!limiter.try_accept());
    }
}
