//! Client-side rate limit of API requests (`kubeAPIQPS` / `kubeAPIBurst`, client-go's token
//! bucket `flowcontrol.NewTokenBucketRateLimiter` that every request waits on). Owns the bucket:
//! `burst` tokens, refilled at `qps` per second. Receives requests as a tower layer under
//! kube's client; a request takes its token when it is issued (so tokens go in request order)
//! and waits for it in its own future, then goes on unchanged. Nothing waits in `poll_ready`:
//! a request that does not spend the bucket is never queued behind ones that wait.
//!
//! Two kinds of requests do not spend it, as upstream sends them on clients of their own:
//! event writes (limited only by `eventRecordQPS`/`eventBurst`, which the event recorder
//! applies) and requests marked [`Unthrottled`] (the heartbeat client: node status and the
//! node lease, upstream `HeartbeatClient` built with QPS −1; see [`super::heartbeat_client`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::sync;
use tokio::time::Instant;
use tower::ServiceExt;

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
}

/// A request extension: the request does not spend the `kubeAPIQPS` bucket (upstream's
/// heartbeat client has no rate limiter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unthrottled;

/// The tower layer.
#[derive(Debug, Clone, Copy)]
pub struct RateLimitLayer(pub RateLimit);

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
            bucket: Arc::new(std::sync::Mutex::new(Bucket::new(self.0))),
        }
    }
}

/// A service whose requests wait for a token in their own futures. Clones share the bucket
/// and the inner service (reached in turn for its readiness and the call only).
#[derive(Debug)]
pub struct RateLimited<S> {
    inner: Arc<tokio::sync::Mutex<S>>,
    bucket: Arc<std::sync::Mutex<Bucket>>,
}

impl<S> Clone for RateLimited<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            bucket: self.bucket.clone(),
        }
    }
}

/// What the limiter needs to know of a request: whether it spends the bucket.
pub trait LimitedRequest {
    /// An event write, which upstream limits on its own client (`eventRecordQPS`).
    fn is_event_write(&self) -> bool;
    /// Marked [`Unthrottled`] (the heartbeat client).
    fn is_unthrottled(&self) -> bool;
}

impl<B> LimitedRequest for http::Request<B> {
    fn is_event_write(&self) -> bool {
        let writes = matches!(
            *self.method(),
            http::Method::POST | http::Method::PATCH | http::Method::PUT
        );
        writes && is_events_path(self.uri().path())
    }

    fn is_unthrottled(&self) -> bool {
        self.extensions().get::<Unthrottled>().is_some()
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

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, R> tower::Service<R> for RateLimited<S>
where
    S: tower::Service<R> + Send + 'static,
    S::Future: Send + 'static,
    R: LimitedRequest + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    /// Always ready: the wait for a token is in the request's future, the inner service's
    /// readiness is awaited there too.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: R) -> Self::Future {
        let delay = if req.is_event_write() || req.is_unthrottled() {
            Duration::ZERO
        } else {
            sync::lock(&self.bucket).reserve(Instant::now())
        };
        let inner = self.inner.clone();
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let response = {
                let mut svc = inner.lock().await;
                svc.ready().await?.call(req)
            };
            response.await
        })
    }
}

#[cfg(test)]
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

    #[tokio::test(start_paused = true)]
    async fn unthrottled_requests_do_not_wait_behind_limited_ones() {
        // kubeAPIQPS exhausted: ten limited reads are queued through kube's Buffer (due at
        // 0, 1 s, … 9 s); a lease renewal marked Unthrottled issued after them goes out at once.
        let start = Instant::now();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let inner = tower::service_fn(move |r: http::Request<()>| {
            log.lock()
                .unwrap()
                .push((r.uri().path().to_owned(), start.elapsed().as_millis()));
            async { Ok::<_, std::convert::Infallible>(()) }
        });
        let svc = tower::buffer::Buffer::new(
            RateLimitLayer(RateLimit { qps: 1.0, burst: 1 }).layer(inner),
            16,
        );
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let mut s = svc.clone();
            tasks.spawn(async move {
                s.ready()
                    .await
                    .unwrap()
                    .call(get("/api/v1/namespaces/ns/pods/p"))
                    .await
                    .unwrap()
            });
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut lease =
            http::Request::put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n")
                .body(())
                .unwrap();
        lease.extensions_mut().insert(Unthrottled);
        let mut s = svc.clone();
        s.ready().await.unwrap().call(lease).await.unwrap();
        let at = |p: &str| {
            seen.lock()
                .unwrap()
                .iter()
                .filter(|(path, _)| path.ends_with(p))
                .map(|(_, t)| *t)
                .collect::<Vec<_>>()
        };
        assert_eq!(at("leases/n"), [1500], "the heartbeat went out at once");
        assert_eq!(at("pods/p"), [0, 1000], "the others are still held back");
        while tasks.join_next().await.is_some() {}
        assert_eq!(
            at("pods/p"),
            [0, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000],
            "the heartbeat spent no token"
        );
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
