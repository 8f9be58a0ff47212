//! Fault injection and request accounting (issue 17, row 3): owns the switches a test flips to
//! make this server misbehave the way a real kube-apiserver does when it is down, failing,
//! overloaded or slow, and the log of every request it received. Receives each request (and,
//! during an outage, each connection attempt) from the HTTP layer; emits the injected answer
//! (a `metav1.Status` with the real server's reason, `Retry-After` for 429s), the delay, the
//! end of open watches, and per-second rates read back by tests.
//!
//! The switches are reachable only in-process (the [`crate::FakeApiServer`] handle): no HTTP
//! path turns them, so a client under test cannot clear a fault itself.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use serde_json::json;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tokio_stream::Stream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::error::ApiError;
use crate::server::Body;

/// Key under which connection attempts refused during an outage are logged.
pub const CONNECT: &str = "CONNECT";

/// Most requests kept in the log (a 5-minute outage at the kubelet's rate is far below it).
const LOG_LIMIT: usize = 1_000_000;

/// An error answer given to every API request (health checks excepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// HTTP status (500, 503, 429, …).
    pub code: u16,
    /// `Retry-After` seconds (header and `details.retryAfterSeconds`), as the real server's
    /// max-in-flight and priority-and-fairness rejections carry.
    pub retry_after: Option<u32>,
}

impl Failure {
    /// The real server's answer when max-in-flight / APF rejects a request: 429
    /// `TooManyRequests` with `Retry-After`.
    pub fn too_many_requests(retry_after: u32) -> Self {
        Self {
            code: 429,
            retry_after: Some(retry_after),
        }
    }

    /// The answer as the real server writes it.
    pub fn response(&self) -> Response<Body> {
        let mut status = if self.code == 429 {
            // apiserver's `tooManyRequests` (max-in-flight and APF filters).
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Too many requests, please try again later.",
                "reason": "TooManyRequests", "code": 429,
            })
        } else {
            ApiError::injected(self.code).to_status()
        };
        if let Some(secs) = self.retry_after {
            status["details"] = json!({"retryAfterSeconds": secs});
        }
        let mut resp = Response::new(Full::new(Bytes::from(status.to_string())).boxed());
        *resp.status_mut() =
            StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        resp
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// When it arrived (tokio time: paused in paused-time tests).
    pub at: Instant,
    /// `VERB resource[/subresource]` as in [`crate::FakeApiServer::request_counts`] (`LIST
    /// pods`, `WATCH pods`, `PUT leases`, `PATCH pods/status`), or [`CONNECT`] for a connection
    /// reset during an outage; other paths are `VERB /path`.
    pub key: String,
    /// The status code answered (0: connection reset).
    pub code: u16,
}

impl Record {
    /// The verb part of the key (`GET`, `LIST`, `WATCH`, `CONNECT`, …).
    pub fn verb(&self) -> &str {
        self.key.split(' ').next().unwrap_or_default()
    }
}

/// Fault switches and the request log of one server.
pub struct Faults {
    outage: AtomicBool,
    failure: Mutex<Option<Failure>>,
    latency_ms: AtomicU64,
    /// Cancelled (and replaced) to end every watch open at that moment.
    watches: Mutex<CancellationToken>,
    /// Bumped to close every open connection (an outage begins).
    connections: tokio::sync::watch::Sender<u64>,
    log: Mutex<Vec<Record>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            outage: AtomicBool::new(false),
            failure: Mutex::new(None),
            latency_ms: AtomicU64::new(0),
            watches: Mutex::new(CancellationToken::new()),
            connections: tokio::sync::watch::channel(0).0,
            log: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        }
    }
}

impl Faults {
    /// Total outage on (`true`) or off: every open connection is closed now (watches end) and
    /// every new one is reset as soon as it is accepted, before TLS, so clients see
    /// `connection reset` on every request. Unlike `FakeApiServer::pause` (listener closed:
    /// `connection refused`), each attempt is counted (key [`CONNECT`]).
    pub fn set_outage(&self, on: bool) {
        self.outage.store(on, Ordering::SeqCst);
        if on {
            self.connections.send_modify(|g| *g += 1);
            self.drop_watches();
        }
    }

    /// Whether an outage is on.
    pub fn outage(&self) -> bool {
        self.outage.load(Ordering::SeqCst)
    }

    /// Answers every API request (not health checks) with `failure` until called with `None`.
    pub fn set_failure(&self, failure: Option<Failure>) {
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = failure;
    }

    /// The failure answered now, if any.
    pub fn failure(&self) -> Option<Failure> {
        *self.failure.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Delays every API request (not health checks) by `d` before it is served (zero: off).
    pub fn set_latency(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.latency_ms.store(ms, Ordering::SeqCst);
    }

    /// The injected latency.
    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms.load(Ordering::SeqCst))
    }

    /// Ends every watch open now (the response body ends as on a server-side timeout);
    /// watches started later are not affected.
    pub fn drop_watches(&self) {
        let old = std::mem::take(&mut *self.watches.lock().unwrap_or_else(|e| e.into_inner()));
        old.cancel();
    }

    /// The token a new watch ends on.
    pub(crate) fn watch_token(&self) -> CancellationToken {
        self.watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Changes whenever open connections must be closed.
    pub(crate) fn connection_epoch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.connections.subscribe()
    }

    /// Logs one request or refused connection.
    pub(crate) fn record(&self, at: Instant, key: String, code: u16) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() < LOG_LIMIT {
            log.push(Record { at, key, code });
        }
    }

    /// A request is being served (until the guard drops).
    pub(crate) fn enter(&self) -> InFlight<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(self)
    }

    /// Most requests served at the same time since the last [`Faults::reset_max_in_flight`]
    /// (open watches count only until their response headers are sent).
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    /// Starts a new max-in-flight window from the current count.
    pub fn reset_max_in_flight(&self) {
        self.max_in_flight
            .store(self.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// Every request (and refused connection) that arrived in `[from, to)`, oldest first. A
    /// request is logged once answered (a delayed one only after its delay).
    pub fn requests(&self, from: Instant, to: Instant) -> Vec<Record> {
        let mut out: Vec<Record> = self
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|r| r.at >= from && r.at < to)
            .cloned()
            .collect();
        // Logged in the order they were answered; a slow answer can come after a later one.
        out.sort_by_key(|r| r.at);
        out
    }

    /// The highest number of requests selected by `filter` that arrived within any one
    /// second (a sliding window) inside `[from, to)`.
    pub fn max_per_second(
        &self,
        from: Instant,
        to: Instant,
        filter: impl Fn(&Record) -> bool,
    ) -> usize {
        let times: Vec<Instant> = self
            .requests(from, to)
            .into_iter()
            .filter(|r| filter(r))
            .map(|r| r.at)
            .collect();
        max_in_window(&times, Duration::from_secs(1))
    }
}

/// Most timestamps of the sorted `times` within any window of length `window`.
fn max_in_window(times: &[Instant], window: Duration) -> usize {
    let mut best = 0;
    let mut start = 0;
    for (end, t) in times.iter().enumerate() {
        while *t - times[start] >= window {
            start += 1;
        }
        best = best.max(end + 1 - start);
    }
    best
}

/// Counts one request in flight.
pub(crate) struct InFlight<'a>(&'a Faults);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A watch body that ends when [`Faults::drop_watches`] is called.
pub(crate) struct UntilDropped<S> {
    inner: S,
    dropped: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl<S> UntilDropped<S> {
    pub(crate) fn new(inner: S, token: CancellationToken) -> Self {
        Self {
            inner,
            dropped: Box::pin(token.cancelled_owned()),
        }
    }
}

impl<S: Stream + Unpin> Stream for UntilDropped<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        if self.dropped.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Pin::new(&mut self.inner).poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_window_counts_the_busiest_second() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let times = [
            at(0),
            at(100),
            at(900),
            at(1000),
            at(1050),
            at(1899),
            at(3000),
        ];
        // 900, 1000, 1050, 1899 are within one second of each other.
        assert_eq!(max_in_window(&times, Duration::from_secs(1)), 4);
        assert_eq!(max_in_window(&[], Duration::from_secs(1)), 0);
    }

    #[test]
    fn too_many_requests_is_the_real_servers_rejection() {
        let resp = Failure::too_many_requests(3).response();
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "3");
    }

    #[tokio::test]
    async fn a_dropped_watch_ends_and_a_new_one_does_not() {
        let faults = Faults::default();
        let (_tx, rx) = tokio::sync::mpsc::channel::<u8>(1);
        let mut old = UntilDropped::new(
            tokio_stream::wrappers::ReceiverStream::new(rx),
            faults.watch_token(),
        );
        faults.drop_watches();
        let (_tx2, rx2) = tokio::sync::mpsc::channel::<u8>(1);
        let mut new = UntilDropped::new(
            tokio_stream::wrappers::ReceiverStream::new(rx2),
            faults.watch_token(),
        );
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert_eq!(Pin::new(&mut old).poll_next(&mut cx), Poll::Ready(None));
        assert!(Pin::new(&mut new).poll_next(&mut cx).is_pending());
    }
}
