//! Client-side rate limit of API requests (`kubeAPIQPS` / `kubeAPIBurst`, client-go's token
//! bucket `flowcontrol.NewTokenBucketRateLimiter` that every request waits on). Owns the bucket:
//! `burst` tokens, refilled at `qps` per second. Receives requests as a tower layer under
//! kube's client; a request waits (in `poll_ready`, so in order) until a token is free, then
//! goes on unchanged. Event writes do not spend the bucket: upstream sends them on a client of
//! their own limited only by `eventRecordQPS`/`eventBurst` (applied by the event recorder), so
//! their token is given back when the request turns out to be one.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// client-go's defaults for a zero `QPS` / `Burst` (`rest.DefaultQPS`, `rest.DefaultBurst`).
pub const DEFAULT_QPS: f64 = 5.0;
pub const DEFAULT_BURST: u32 = 10;

/// The limit to apply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub qps: f64,
    pub burst: u32,
}

impl RateLimit {
    /// From `kubeAPIQPS` / `kubeAPIBurst`: zero means client-go's default (5 QPS, burst 10),
    /// as upstream passes the values through a rest config.
    pub fn from_config(qps: i32, burst: i32) -> Self {
        Self {
            qps: if qps == 0 {
                DEFAULT_QPS
            } else {
                f64::from(qps)
            },
            burst: if burst <= 0 {
                DEFAULT_BURST
            } else {
                u32::try_from(burst).unwrap_or(DEFAULT_BURST)
            },
        }
    }
}

/// A token bucket that lends tokens ahead: taking one from an empty bucket says how long to
/// wait for it (`golang.org/x/time/rate` reservations, which client-go's limiter uses).
#[derive(Debug)]
struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(limit: RateLimit) -> Self {
        Self {
            qps: limit.qps,
            burst: f64::from(limit.burst.max(1)),
            tokens: f64::from(limit.burst.max(1)),
            last: Instant::now(),
        }
    }

    /// Takes a token at `now`; the wait until it is really there (zero when it is).
    fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }

    /// Gives back a token taken for a request that does not spend the bucket.
    fn refund(&mut self) {
        self.tokens = (self.tokens + 1.0).min(self.burst);
    }
}

/// The tower layer.
#[derive(Debug, Clone, Copy)]
pub struct RateLimitLayer(pub RateLimit);

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: Bucket::new(self.0),
            wait: None,
            ready: false,
        }
    }
}

/// A service whose requests wait for a token. kube's client puts a `Buffer` over it, so one
/// instance (one bucket) serves every clone of the client, in request order.
#[derive(Debug)]
pub struct RateLimited<S> {
    inner: S,
    bucket: Bucket,
    /// The wait for the token already taken for the next request.
    wait: Option<Pin<Box<Sleep>>>,
    /// A token is held for the next request.
    ready: bool,
}

/// What the limiter needs to know of a request: whether it is an event write, which upstream
/// limits on its own client (`eventRecordQPS`) rather than by `kubeAPIQPS`.
pub trait LimitedRequest {
    fn is_event_write(&self) -> bool;
}

impl<B> LimitedRequest for http::Request<B> {
    fn is_event_write(&self) -> bool {
        let writes = matches!(
            *self.method(),
            http::Method::POST | http::Method::PATCH | http::Method::PUT
        );
        writes && is_events_path(self.uri().path())
    }
}

/// `/api/v1/namespaces/NS/events[/NAME]` or `/apis/events.k8s.io/v1/namespaces/NS/events[/NAME]`.
fn is_events_path(path: &str) -> bool {
    let rest = if let Some(r) = path.strip_prefix("/api/v1/namespaces/") {
        r
    } else if let Some(r) = path.strip_prefix("/apis/events.k8s.io/v1/namespaces/") {
        r
    } else {
        return false;
    };
    let mut parts = rest.split('/');
    let (ns, resource) = (parts.next(), parts.next());
    let name = parts.next();
    ns.is_some_and(|n| !n.is_empty())
        && resource == Some("events")
        && parts.next().is_none()
        && name.is_none_or(|n| !n.is_empty())
}

impl<S, R> tower::Service<R> for RateLimited<S>
where
    S: tower::Service<R>,
    R: LimitedRequest,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if !self.ready {
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
                self.ready = true;
            } else {
                let delay = self.bucket.reserve(Instant::now());
                if delay.is_zero() {
                    self.ready = true;
                } else {
                    let mut sleep = Box::pin(tokio::time::sleep(delay));
                    if sleep.as_mut().poll(cx).is_pending() {
                        self.wait = Some(sleep);
                        return Poll::Pending;
                    }
                    self.ready = true;
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        self.ready = false;
        if req.is_event_write() {
            self.bucket.refund();
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tower::{Layer, Service, ServiceExt};

    fn get(path: &str) -> http::Request<()> {
        http::Request::get(path).body(()).unwrap()
    }

    fn post(path: &str) -> http::Request<()> {
        http::Request::post(path).body(()).unwrap()
    }

    /// Sends `n` requests through a limited service as fast as it lets them; returns when
    /// each reached the inner service, in ms since the start.
    async fn arrivals(limit: RateLimit, n: usize) -> Vec<u128> {
        let start = Instant::now();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let inner = tower::service_fn(move |_: http::Request<()>| {
            log.lock().unwrap().push(start.elapsed().as_millis());
            async { Ok::<_, std::convert::Infallible>(()) }
        });
        let mut svc = RateLimitLayer(limit).layer(inner);
        for _ in 0..n {
            svc.ready()
                .await
                .unwrap()
                .call(get("/api/v1/nodes/n"))
                .await
                .unwrap();
        }
        seen.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_spaced_at_qps() {
        let got = arrivals(
            RateLimit {
                qps: 10.0,
                burst: 3,
            },
            7,
        )
        .await;
        assert_eq!(got, [0, 0, 0, 100, 200, 300, 400]);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_refills_up_to_burst_only() {
        let limit = RateLimit { qps: 2.0, burst: 2 };
        let start = Instant::now();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let inner = tower::service_fn(move |_: http::Request<()>| {
            log.lock().unwrap().push(start.elapsed().as_millis());
            async { Ok::<_, std::convert::Infallible>(()) }
        });
        let mut svc = RateLimitLayer(limit).layer(inner);
        for _ in 0..2 {
            svc.ready()
                .await
                .unwrap()
                .call(get("/api/v1/nodes/n"))
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        for _ in 0..3 {
            svc.ready()
                .await
                .unwrap()
                .call(get("/api/v1/nodes/n"))
                .await
                .unwrap();
        }
        let got = seen.lock().unwrap().clone();
        assert_eq!(got, [0, 0, 60_000, 60_000, 60_500]);
    }

    #[test]
    fn zero_config_values_mean_client_go_defaults() {
        assert_eq!(
            RateLimit::from_config(0, 0),
            RateLimit {
                qps: 5.0,
                burst: 10
            }
        );
        assert_eq!(
            RateLimit::from_config(50, 100),
            RateLimit {
                qps: 50.0,
                burst: 100
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn through_kube_buffer_concurrent_callers_share_one_bucket() {
        // kube's Client wraps the stack in a Buffer; concurrent callers all wait on it.
        let start = Instant::now();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let inner = tower::service_fn(move |_: http::Request<()>| {
            log.lock().unwrap().push(start.elapsed().as_millis());
            async { Ok::<_, std::convert::Infallible>(()) }
        });
        let svc = tower::buffer::Buffer::new(
            RateLimitLayer(RateLimit { qps: 4.0, burst: 1 }).layer(inner),
            16,
        );
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let mut s = svc.clone();
            tasks.spawn(async move {
                s.ready()
                    .await
                    .unwrap()
                    .call(get("/api/v1/nodes/n"))
                    .await
                    .unwrap()
            });
        }
        while tasks.join_next().await.is_some() {}
        let got = seen.lock().unwrap().clone();
        assert_eq!(got, [0, 250, 500, 750]);
    }

    #[tokio::test(start_paused = true)]
    async fn event_writes_do_not_spend_the_bucket() {
        let start = Instant::now();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let inner = tower::service_fn(move |r: http::Request<()>| {
            log.lock()
                .unwrap()
                .push((r.uri().path().to_owned(), start.elapsed().as_millis()));
            async { Ok::<_, std::convert::Infallible>(()) }
        });
        let mut svc = RateLimitLayer(RateLimit {
            qps: 10.0,
            burst: 2,
        })
        .layer(inner);
        // Ten events, then three pod reads: the events leave the burst untouched.
        for i in 0..10 {
            let path = format!("/api/v1/namespaces/ns{i}/events");
            svc.ready().await.unwrap().call(post(&path)).await.unwrap();
        }
        for _ in 0..3 {
            let r = get("/api/v1/namespaces/ns/pods/p");
            svc.ready().await.unwrap().call(r).await.unwrap();
        }
        let got: Vec<u128> = seen.lock().unwrap().iter().map(|(_, t)| *t).collect();
        assert_eq!(got, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 100]);
    }

    #[test]
    fn only_event_writes_are_exempt() {
        let exempt = |m: &str, p: &str| {
            http::Request::builder()
                .method(m)
                .uri(p)
                .body(())
                .unwrap()
                .is_event_write()
        };
        assert!(exempt("POST", "/api/v1/namespaces/default/events"));
        assert!(exempt("PATCH", "/api/v1/namespaces/default/events/p.1a2b"));
        assert!(exempt(
            "POST",
            "/apis/events.k8s.io/v1/namespaces/kube-system/events"
        ));
        // Reads, other resources, look-alike paths and deeper paths spend the bucket.
        assert!(!exempt("GET", "/api/v1/namespaces/default/events"));
        assert!(!exempt("POST", "/api/v1/namespaces/default/pods"));
        assert!(!exempt("PATCH", "/api/v1/namespaces/events/pods/x/status"));
        assert!(!exempt("POST", "/api/v1/namespaces//events"));
        assert!(!exempt("PATCH", "/api/v1/namespaces/default/events/"));
        assert!(!exempt(
            "PATCH",
            "/api/v1/namespaces/default/events/x/status"
        ));
        assert!(!exempt("POST", "/api/v1/events"));
        assert!(!exempt(
            "POST",
            "/apis/events.k8s.io/v1beta1/namespaces/d/events"
        ));
    }
}
