//! Client-wide back-off while the API server fails, and `Retry-After` (issue 17, row 3). Owns
//! one state per kubelet client (shared by every clone and every certificate generation):
//! consecutive failures and the instant before which nothing is sent. Receives every request
//! as a tower layer under kube's client and every answer (status and `Retry-After` header, or
//! a transport error). Emits requests unchanged, or fails them at once without sending them
//! ([`ThrottleError`]) while the server is known to be failing.
//!
//! Why client-wide: each API loop of the kubelet (node status, lease, pod status, watches,
//! events, mirror pods, certificates) backs off on its own, but their sum during an outage is
//! not bounded: a watch per referenced Secret/ConfigMap and a status retry per pod grow with
//! the pods. Here, after a failure (connection error, 429 or 5xx) only one request per gap
//! (200 ms doubling to 1 s, plus up to 20 % jitter) goes out as a probe; the others fail fast
//! and their loops back off as for any transport error. The first success closes the gate.
//! A `Retry-After: N` on a 429/5xx answer (what kube-apiserver's max-in-flight and APF
//! filters send) keeps every request back for N seconds (capped at [`MAX_RETRY_AFTER`]), as
//! client-go waits Retry-After before retrying; kube-rs honours it only in its own retry
//! layer, which the kubelet turns off (callers own their retry loops).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::sync;
use tokio::time::Instant;
use tower::BoxError;
use tracing::{info, warn};

/// First gap between probes after a failure.
pub const INITIAL_GAP: Duration = Duration::from_millis(200);
/// Longest gap between probes (before jitter): at most about one request per second reaches a
/// failing server, and the first request after it recovers goes out within this time.
pub const MAX_GAP: Duration = Duration::from_secs(1);
/// Longest `Retry-After` honoured (a larger value is treated as this).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// A request failed without being sent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ThrottleError {
    #[error("request not sent: the API server asked to retry after {retry_after:?}; {left:?} left")]
    RetryAfter {
        retry_after: Duration,
        left: Duration,
    },
    #[error(
        "request not sent: the API server is failing ({failures} failures in a row); next attempt in {left:?}"
    )]
    BackingOff { failures: u32, left: Duration },
}

#[derive(Debug, Default)]
struct State {
    failures: u32,
    /// Before this, no probe goes out (set after each failure and each probe).
    next_probe: Option<Instant>,
    /// The last `Retry-After` and when it ends.
    retry_after: Option<(Duration, Instant)>,
}

/// The shared state of one kubelet client (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct Throttle {
    state: Arc<Mutex<State>>,
}

/// The outcome of one request, as the throttle sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered and was not failing (any 1xx–4xx other than 429).
    Answered,
    /// A transport error, a 429 or a 5xx, with the `Retry-After` it carried.
    Failed { retry_after: Option<Duration> },
}

impl Outcome {
    /// Classifies an HTTP answer.
    pub fn of_response<B>(resp: &http::Response<B>) -> Self {
        let code = resp.status().as_u16();
        if code != 429 && code < 500 {
            return Self::Answered;
        }
        let retry_after = resp
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        Self::Failed { retry_after }
    }
}

/// `Retry-After` in delay-seconds (the form kube-apiserver sends; an HTTP date is ignored):
/// capped at [`MAX_RETRY_AFTER`]; garbage is `None`.
fn parse_retry_after(v: &str) -> Option<Duration> {
    let secs: u64 = v.trim().parse().ok()?;
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

/// The gap after `failures` consecutive failures, before jitter.
fn gap(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    INITIAL_GAP.saturating_mul(1 << doublings).min(MAX_GAP)
}

/// `d` plus up to 20 %.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(1.0 + 0.2 * fastrand::f64())
}

impl Throttle {
    /// Admits a request at `now` (it is sent) or refuses it (it fails at once).
    pub fn admit(&self, now: Instant) -> Result<(), ThrottleError> {
        let mut st = sync::lock(&self.state);
        if let Some((retry_after, until)) = st.retry_after {
            if now < until {
                return Err(ThrottleError::RetryAfter {
                    retry_after,
                    left: until - now,
                });
            }
            st.retry_after = None;
        }
        if st.failures == 0 {
            return Ok(());
        }
        if let Some(at) = st.next_probe
            && now < at
        {
            return Err(ThrottleError::BackingOff {
                failures: st.failures,
                left: at - now,
            });
        }
        // This request is the probe; the next one waits a gap even if this one hangs.
        st.next_probe = Some(now + jittered(gap(st.failures)));
        Ok(())
    }

    /// Records the outcome of a sent request at `now`.
    pub fn observe(&self, outcome: Outcome, now: Instant) {
        let mut st = sync::lock(&self.state);
        match outcome {
            Outcome::Answered => {
                if st.failures > 0 {
                    info!(
                        failures = st.failures,
                        "the API server answers again; sending requests normally"
                    );
                }
                st.failures = 0;
                st.next_probe = None;
            }
            Outcome::Failed { retry_after } => {
                st.failures = st.failures.saturating_add(1);
                if st.failures == 1 {
                    warn!(
                        "API request failed; until the API server answers, at most one request per {:?} (up to {MAX_GAP:?}) is sent",
                        INITIAL_GAP
                    );
                }
                let next = now + jittered(gap(st.failures));
                st.next_probe = Some(st.next_probe.map_or(next, |at| at.max(next)));
                if let Some(d) = retry_after {
                    let until = now + d;
                    if st.retry_after.is_none_or(|(_, u)| u < until) {
                        info!(retry_after = ?d, "the API server asked to retry later; holding every request until then");
                        st.retry_after = Some((d, until));
                    }
                }
            }
        }
    }

    /// Consecutive failures seen (0: the server answers).
    pub fn failures(&self) -> u32 {
        sync::lock(&self.state).failures
    }
}

/// The tower layer.
#[derive(Debug, Clone, Default)]
pub struct ThrottleLayer(pub Throttle);

impl<S> tower::Layer<S> for ThrottleLayer {
    type Service = Throttled<S>;
    fn layer(&self, inner: S) -> Throttled<S> {
        Throttled {
            inner,
            throttle: self.0.clone(),
        }
    }
}

/// A service that refuses requests while the throttle holds them back.
#[derive(Debug, Clone)]
pub struct Throttled<S> {
    inner: S,
    throttle: Throttle,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, R, B> tower::Service<R> for Throttled<S>
where
    S: tower::Service<R, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<Result<http::Response<B>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: R) -> Self::Future {
        if let Err(e) = self.throttle.admit(Instant::now()) {
            return Box::pin(std::future::ready(Err(BoxError::from(e))));
        }
        let fut = self.inner.call(req);
        let throttle = self.throttle.clone();
        Box::pin(async move {
            let res = fut.await.map_err(Into::into);
            let outcome = match &res {
                Ok(resp) => Outcome::of_response(resp),
                Err(_) => Outcome::Failed { retry_after: None },
            };
            throttle.observe(outcome, Instant::now());
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(retry_after: Option<u64>) -> Outcome {
        Outcome::Failed {
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[test]
    fn gaps_double_to_one_second() {
        let ms: Vec<_> = (1..=6).map(|f| gap(f).as_millis()).collect();
        assert_eq!(ms, [200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(gap(u32::MAX), MAX_GAP);
    }

    #[test]
    fn retry_after_parses_seconds_and_caps_hostile_values() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 1 "), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(&u64::MAX.to_string()),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after(""), None);
    }

    #[test]
    fn answers_are_classified_by_status() {
        let resp = |code: u16, ra: Option<&str>| {
            let mut b = http::Response::builder().status(code);
            if let Some(v) = ra {
                b = b.header("Retry-After", v);
            }
            b.body(()).unwrap()
        };
        for ok in [200, 201, 404, 409, 422] {
            assert_eq!(
                Outcome::of_response(&resp(ok, Some("5"))),
                Outcome::Answered
            );
        }
        assert_eq!(Outcome::of_response(&resp(429, Some("2"))), failed(Some(2)));
        assert_eq!(Outcome::of_response(&resp(500, None)), failed(None));
        assert_eq!(Outcome::of_response(&resp(503, Some("x"))), failed(None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_healthy_server_is_never_throttled() {
        let t = Throttle::default();
        for _ in 0..100 {
            t.admit(Instant::now()).unwrap();
            t.observe(Outcome::Answered, Instant::now());
        }
    }

    /// Callers that retry every 50 ms while the server fails: how many requests go out in
    /// the first second and in each later second.
    #[tokio::test(start_paused = true)]
    async fn during_an_outage_one_probe_per_gap_goes_out() {
        let t = Throttle::default();
        let start = Instant::now();
        let mut sent = Vec::new();
        // Ten loops, each retrying every 50 ms, for 20 s.
        while start.elapsed() < Duration::from_secs(20) {
            for _ in 0..10 {
                if t.admit(Instant::now()).is_ok() {
                    sent.push(start.elapsed());
                    t.observe(failed(None), Instant::now());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let per_second = |s: u64| sent.iter().filter(|d| d.as_secs() == s).count();
        // The first request, then probes 200, 400, 800 ms apart (plus jitter).
        assert!(per_second(0) <= 3, "{sent:?}");
        for s in 2..20 {
            assert!(per_second(s) <= 1, "second {s}: {sent:?}");
        }
        // …and the server keeps being probed: the first success is never far away.
        assert!(sent.len() >= 15, "{sent:?}");
        let gaps = sent.windows(2).map(|w| w[1] - w[0]);
        assert!(
            gaps.clone().all(|g| g <= Duration::from_millis(1250)),
            "{sent:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_ends_the_back_off_at_once() {
        let t = Throttle::default();
        t.admit(Instant::now()).unwrap();
        t.observe(failed(None), Instant::now());
        assert!(matches!(
            t.admit(Instant::now()),
            Err(ThrottleError::BackingOff { failures: 1, .. })
        ));
        tokio::time::sleep(Duration::from_millis(250)).await;
        t.admit(Instant::now()).unwrap();
        t.observe(Outcome::Answered, Instant::now());
        for _ in 0..5 {
            t.admit(Instant::now()).unwrap();
        }
        assert_eq!(t.failures(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_goes_out_before_retry_after_ends() {
        let t = Throttle::default();
        let start = Instant::now();
        t.admit(start).unwrap();
        t.observe(failed(Some(3)), start);
        let mut first_after = None;
        while start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            match t.admit(Instant::now()) {
                Ok(()) => {
                    first_after = Some(start.elapsed());
                    break;
                }
                Err(ThrottleError::RetryAfter { retry_after, .. }) => {
                    assert_eq!(retry_after, Duration::from_secs(3));
                }
                Err(e) => panic!("{e}"),
            }
        }
        let first = first_after.unwrap();
        assert!(
            first >= Duration::from_secs(3) && first < Duration::from_millis(3100),
            "{first:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_retry_after_does_not_shorten_a_longer_one() {
        let t = Throttle::default();
        let now = Instant::now();
        t.observe(failed(Some(10)), now);
        t.observe(failed(Some(1)), now);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(matches!(
            t.admit(Instant::now()),
            Err(ThrottleError::RetryAfter { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn through_the_layer_failures_and_retry_after_are_seen() {
        use tower::{Layer, Service, ServiceExt};
        let calls = Arc::new(Mutex::new(0u32));
        let seen = calls.clone();
        let inner = tower::service_fn(move |_: ()| {
            *seen.lock().unwrap() += 1;
            async {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(429)
                        .header("Retry-After", "2")
                        .body(())
                        .unwrap(),
                )
            }
        });
        let mut svc = ThrottleLayer::default().layer(inner);
        let first = svc.ready().await.unwrap().call(()).await.unwrap();
        assert_eq!(first.status(), 429);
        let refused = svc.ready().await.unwrap().call(()).await.unwrap_err();
        assert!(
            refused.downcast_ref::<ThrottleError>().is_some(),
            "{refused}"
        );
        assert_eq!(*calls.lock().unwrap(), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        svc.ready().await.unwrap().call(()).await.unwrap();
        assert_eq!(*calls.lock().unwrap(), 2);
    }
}
