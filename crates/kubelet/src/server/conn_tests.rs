//! Tests of the connection timeouts: the phase clock alone (paused time) and whole
//! connections over sockets (short configured timeouts).

use super::*;

const HEAD: Duration = Duration::from_secs(30);
const IDLE: Duration = Duration::from_secs(90);

#[tokio::test(start_paused = true)]
async fn a_silent_new_connection_ends_after_the_header_timeout() {
    let clock = Clock::new(HEAD, IDLE);
    let start = Instant::now();
    assert_eq!(watchdog(clock).await, "request head not received in time");
    assert_eq!(start.elapsed(), HEAD);
}

#[tokio::test(start_paused = true)]
async fn idle_lasts_the_idle_timeout_and_a_new_head_the_header_timeout() {
    let clock = Clock::new(HEAD, IDLE);
    let dog = tokio::spawn(watchdog(clock.clone()));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let guard = clock.begin();
    // A request in flight (a followed log) has no deadline.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!dog.is_finished());
    drop(guard);
    let idle_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!dog.is_finished(), "idle for 60 s of 90 s");
    // The first byte of the next request: its head has 30 s from now.
    clock.on_read();
    let head_from = Instant::now();
    assert_eq!(dog.await.unwrap(), "request head not received in time");
    assert_eq!(head_from.elapsed(), HEAD);
    assert!(idle_from.elapsed() < IDLE + HEAD);

    let clock = Clock::new(HEAD, IDLE);
    drop(clock.begin());
    let idle_from = Instant::now();
    assert_eq!(watchdog(clock).await, "idle");
    assert_eq!(idle_from.elapsed(), IDLE);
}

#[tokio::test(start_paused = true)]
async fn output_progress_after_the_body_is_not_idleness() {
    let clock = Clock::new(HEAD, IDLE);
    drop(clock.begin());
    let dog = tokio::spawn(watchdog(clock.clone()));
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        clock.on_write();
    }
    assert!(!dog.is_finished());
    let last = Instant::now();
    assert_eq!(dog.await.unwrap(), "idle");
    assert_eq!(last.elapsed(), IDLE);
}

#[tokio::test(start_paused = true)]
async fn overlapping_requests_keep_the_connection_busy_until_the_last_ends() {
    let clock = Clock::new(HEAD, IDLE);
    let a = clock.begin();
    let b = clock.begin();
    drop(a);
    assert_eq!(clock.deadline(), None);
    drop(b);
    assert_eq!(clock.deadline(), Some(Instant::now() + IDLE));
}

#[tokio::test(start_paused = true)]
async fn a_tracked_body_ends_its_request_at_its_last_frame() {
    use http_body_util::{BodyExt, Full};
    let clock = Clock::new(HEAD, IDLE);
    let mut body = Tracked::new(Full::new(bytes::Bytes::from_static(b"ok")), clock.begin());
    assert_eq!(clock.deadline(), None);
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "ok");
    assert_eq!(
        clock.deadline(),
        None,
        "one frame taken, the end not yet seen"
    );
    assert!(body.frame().await.is_none());
    assert_eq!(clock.deadline(), Some(Instant::now() + IDLE));
    drop(body);
    assert_eq!(clock.deadline(), Some(Instant::now() + IDLE));
}

// ---- whole connections over sockets --------------------------------------------------------

use crate::server::{Resp, ServerState, serve_connection};
use crate::status::manager::StatusManager;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Header-read and idle timeouts of the socket tests.
const SHORT_HEAD: Duration = Duration::from_millis(200);
const SHORT_IDLE: Duration = Duration::from_millis(600);

/// Serves one connection with `handler` (timeouts [`SHORT_HEAD`], [`SHORT_IDLE`]) and returns
/// the client's end.
async fn one_connection<H, F>(handler: H) -> tokio::net::TcpStream
where
    H: Fn(Request<Incoming>) -> F + Send + 'static,
    F: std::future::Future<Output = Resp> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, peer) = listener.accept().await.unwrap();
        let (_tx, rx) = tokio::sync::watch::channel(Arc::new(Vec::new()));
        let mut st = ServerState::basic(rx, StatusManager::new(), Vec::new());
        st.header_read_timeout = SHORT_HEAD;
        st.idle_timeout = SHORT_IDLE;
        serve_connection(stream, &st, peer, handler).await;
    });
    tokio::net::TcpStream::connect(addr).await.unwrap()
}

/// Reads until EOF or error; returns what was read and when the read ended.
async fn read_until_closed(conn: &mut tokio::net::TcpStream) -> (Vec<u8>, Instant) {
    let mut all = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("the connection is closed within 10 s")
        {
            Ok(0) | Err(_) => return (all, Instant::now()),
            Ok(n) => all.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn a_slow_streamed_body_longer_than_the_idle_timeout_is_not_cut() {
    let mut conn = one_connection(|_req| async {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            // Chunks 150 ms apart, then a pause longer than the idle timeout (a followed
            // log with nothing new), then the last chunk: 1.5 s in all.
            for i in 0..4 {
                tx.send(bytes::Bytes::from(format!("line {i}\n")))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            tokio::time::sleep(SHORT_IDLE + SHORT_HEAD).await;
            tx.send(bytes::Bytes::from_static(b"last\n")).await.unwrap();
        });
        crate::server::stream(rx)
    })
    .await;
    conn.write_all(b"GET /containerLogs/ns/p/c?follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let start = Instant::now();
    let (got, closed) = read_until_closed(&mut conn).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    for want in ["line 0", "line 3", "last", "\r\n0\r\n\r\n"] {
        assert!(text.contains(want), "{want:?} missing: {text}");
    }
    // After the body the connection idles out: closed one idle timeout after the last byte.
    let took = closed - start;
    assert!(
        took >= Duration::from_millis(1400) + SHORT_IDLE && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test]
async fn an_upgraded_connection_is_not_timed() {
    let mut conn = one_connection(|mut req| async move {
        let upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let io = upgrade.await.unwrap();
            let mut io = hyper_util::rt::TokioIo::new(io);
            let mut buf = [0u8; 64];
            loop {
                let n = io.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                io.write_all(&buf[..n]).await.unwrap();
            }
        });
        let mut resp = Response::new(http_body_util::Empty::new().boxed());
        *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        resp.headers_mut()
            .insert(http::header::CONNECTION, "Upgrade".parse().unwrap());
        resp.headers_mut()
            .insert(http::header::UPGRADE, "SPDY/3.1".parse().unwrap());
        resp
    })
    .await;
    conn.write_all(b"POST /exec/ns/p/c?command=sh HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = conn.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 101"), "{:?}", &buf[..n]);
    // Silent for longer than both timeouts, then a half "frame", a pause, the rest.
    tokio::time::sleep(SHORT_IDLE * 2).await;
    conn.write_all(b"ping").await.unwrap();
    tokio::time::sleep(SHORT_HEAD * 2).await;
    conn.write_all(b"!").await.unwrap();
    let mut echoed = Vec::new();
    while echoed.len() < 5 {
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_ne!(n, 0, "the upgraded stream was closed");
        echoed.extend_from_slice(&buf[..n]);
    }
    assert_eq!(echoed, b"ping!");
}

#[tokio::test]
async fn a_head_begun_after_an_idle_period_has_the_header_timeout() {
    let mut conn =
        one_connection(|_req| async { crate::server::text(StatusCode::OK, "ok".into()) }).await;
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = conn.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // Idle for a while (the idle timeout would end it about 500 ms after the write below).
    tokio::time::sleep(SHORT_HEAD / 2).await;
    conn.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    let started = Instant::now();
    let (got, closed) = read_until_closed(&mut conn).await;
    assert!(got.is_empty(), "{got:?}");
    let took = closed - started;
    // Closed by the header timeout, well before the idle timeout would have ended it.
    assert!(
        took >= SHORT_HEAD - Duration::from_millis(20) && took < SHORT_IDLE - SHORT_HEAD,
        "{took:?}"
    );
}
