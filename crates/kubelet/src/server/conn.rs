//! Per-connection timeouts of the HTTP ports. Owns a connection's phase (reading a request
//! head, serving a request, idle between requests); receives the bytes the connection reads
//! and writes (through [`Watched`]), the start of each request and the end of its response
//! body ([`Tracked`]); emits the end of the connection (the [`watchdog`] future completes)
//! when a request head takes longer than the header-read timeout or the connection stays
//! idle longer than the idle timeout. A request in flight — a followed log, a slow
//! download — has no deadline here. hyper's own header-read timer is not used: it also runs
//! while a keep-alive connection waits for its next request, so it would close idle
//! connections after the header timeout instead of upstream's 90 s `IdleTimeout`.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::sync;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// What a connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request head to complete (since the connection opened, or since the
    /// first byte after an idle period).
    Head { since: Instant },
    /// `n` requests are being served (their response bodies are not finished).
    Busy { n: usize },
    /// A response was finished and nothing has arrived since (last write progress `since`).
    Idle { since: Instant },
}

/// The phase shared by a connection's IO, its service and its watchdog.
#[derive(Debug)]
pub(crate) struct Clock {
    phase: Mutex<Phase>,
    changed: Notify,
    head: Duration,
    idle: Duration,
}

impl Clock {
    /// A clock for a connection that just opened: its first request head is awaited.
    pub(crate) fn new(head: Duration, idle: Duration) -> Arc<Self> {
        Arc::new(Self {
            phase: Mutex::new(Phase::Head {
                since: Instant::now(),
            }),
            changed: Notify::new(),
            head,
            idle,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Phase> {
        // The phase is a plain value: a panic elsewhere cannot leave it half-written.
        sync::lock(&self.phase)
    }

    /// Bytes arrived: an idle connection starts reading a request head.
    fn on_read(&self) {
        let mut p = self.lock();
        if let Phase::Idle { .. } = *p {
            *p = Phase::Head {
                since: Instant::now(),
            };
            drop(p);
            self.changed.notify_one();
        }
    }

    /// Bytes left: output of a finished response is still being delivered, which is not
    /// idleness (only extends a deadline, so the watchdog finds out when it wakes).
    fn on_write(&self) {
        let mut p = self.lock();
        if let Phase::Idle { .. } = *p {
            *p = Phase::Idle {
                since: Instant::now(),
            };
        }
    }

    /// A request head is complete and its service starts; the guard ends the request.
    pub(crate) fn begin(self: &Arc<Self>) -> RequestGuard {
        let mut p = self.lock();
        *p = match *p {
            Phase::Busy { n } => Phase::Busy { n: n + 1 },
            Phase::Head { .. } | Phase::Idle { .. } => Phase::Busy { n: 1 },
        };
        drop(p);
        self.changed.notify_one();
        RequestGuard(Some(self.clone()))
    }

    fn end(&self) {
        let mut p = self.lock();
        *p = match *p {
            Phase::Busy { n } if n > 1 => Phase::Busy { n: n - 1 },
            _ => Phase::Idle {
                since: Instant::now(),
            },
        };
        drop(p);
        self.changed.notify_one();
    }

    /// When the connection must end, if no request is in flight.
    #[cfg(test)]
    fn deadline(&self) -> Option<Instant> {
        match *self.lock() {
            Phase::Head { since } => Some(since + self.head),
            Phase::Idle { since } => Some(since + self.idle),
            Phase::Busy { .. } => None,
        }
    }
}

/// Completes when the connection has to be closed: a request head took longer than the
/// header-read timeout, or no request came for the idle timeout. Select it against the
/// connection's future and drop that one when this completes.
pub(crate) async fn watchdog(clock: Arc<Clock>) -> &'static str {
    loop {
        let next = {
            let phase = *clock.lock();
            let now = Instant::now();
            match phase {
                Phase::Busy { .. } => None,
                Phase::Head { since } if now >= since + clock.head => {
                    return "request head not received in time";
                }
                Phase::Idle { since } if now >= since + clock.idle => return "idle",
                Phase::Head { since } => Some(since + clock.head),
                Phase::Idle { since } => Some(since + clock.idle),
            }
        };
        match next {
            None => clock.changed.notified().await,
            Some(deadline) => tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {}
                _ = clock.changed.notified() => {}
            },
        }
    }
}

/// Ends a request when dropped (its response body finished or was dropped).
#[derive(Debug)]
pub(crate) struct RequestGuard(Option<Arc<Clock>>);

impl RequestGuard {
    fn finish(&mut self) {
        if let Some(c) = self.0.take() {
            c.end();
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A response body that ends its request when its last frame is taken or it is dropped.
pub(crate) struct Tracked<B> {
    inner: B,
    guard: RequestGuard,
}

impl<B> Tracked<B> {
    pub(crate) fn new(inner: B, guard: RequestGuard) -> Self {
        Self { inner, guard }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.guard.finish();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's stream, reporting reads and writes to its [`Clock`].
pub(crate) struct Watched<S> {
    inner: S,
    clock: Arc<Clock>,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, clock: Arc<Clock>) -> Self {
        Self { inner, clock }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.on_read();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.clock.on_write();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.clock.on_write();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
