//! systemd's readiness and watchdog protocols (`sd_notify(3)`, `sd_watchdog_enabled(3)`), as
//! upstream's kubelet sends `READY=1` once it serves and, with the `SystemdWatchdog` gate (on
//! by default), `WATCHDOG=1` every half `WATCHDOG_USEC` while its health checks pass (upstream
//! `pkg/kubelet/watchdog`). Owns: reading `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`,
//! sending datagrams to the socket, and the watchdog task. Receives the socket address (a
//! path, or `@name` for the abstract namespace) and the kubelet's health checks (those of
//! `/healthz`); emits the state strings. Without `NOTIFY_SOCKET` (not started by systemd with
//! `Type=notify`) nothing is sent; without `WATCHDOG_USEC` (no `WatchdogSec=`) no watchdog runs.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use kubelet::health::HealthCheck;
use tokio_util::sync::CancellationToken;

/// Why a notification could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("NOTIFY_SOCKET {0:?} is not a unix socket address (expected a path or @name)")]
    BadAddress(String),
    #[error("sending {state:?} to NOTIFY_SOCKET {socket:?}: {source}")]
    Send {
        state: String,
        socket: String,
        source: std::io::Error,
    },
}

/// Sends `state` (e.g. `READY=1`) to the socket named by the environment's `NOTIFY_SOCKET`.
/// Returns whether a notification was sent.
pub fn notify(state: &str) -> Result<bool, NotifyError> {
    match std::env::var_os("NOTIFY_SOCKET") {
        Some(socket) if !socket.is_empty() => {
            notify_to(&socket.to_string_lossy(), state)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Sends `state` to `socket`: an absolute path, or `@name` for the Linux abstract namespace.
pub fn notify_to(socket: &str, state: &str) -> Result<(), NotifyError> {
    let send_err = |source| NotifyError::Send {
        state: state.to_owned(),
        socket: socket.to_owned(),
        source,
    };
    let sock = UnixDatagram::unbound().map_err(send_err)?;
    if let Some(name) = socket.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|_| NotifyError::BadAddress(socket.to_owned()))?;
        sock.send_to_addr(state.as_bytes(), &addr)
            .map_err(send_err)?;
    } else if socket.starts_with('/') {
        sock.send_to(state.as_bytes(), socket).map_err(send_err)?;
    } else {
        return Err(NotifyError::BadAddress(socket.to_owned()));
    }
    Ok(())
}

/// Upstream's smallest accepted watchdog timeout (`minimalNotifyInterval`).
pub const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(1);

/// The pause before the one retry of a failed `WATCHDOG=1` (upstream's back-off: 1s, 2 steps).
pub const WATCHDOG_RETRY: Duration = Duration::from_secs(1);

/// A watchdog configuration systemd passed that cannot be used: start-up stops, as upstream.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WatchdogError {
    #[error("configure watchdog: error converting WATCHDOG_USEC: {0:?}")]
    BadUsec(String),
    #[error("configure watchdog: WATCHDOG_USEC must be a positive number")]
    ZeroUsec,
    #[error("configure watchdog: error converting WATCHDOG_PID: {0:?}")]
    BadPid(String),
    #[error("configure watchdog timeout too small: {0:?}")]
    TooSmall(Duration),
}

/// go-systemd's `SdWatchdogEnabled` plus upstream's checks: the watchdog timeout systemd set
/// for this process (`WATCHDOG_USEC`, for `WATCHDOG_PID` when that is set), `None` when there
/// is none (unset, or meant for another process), and the ping interval is half of it.
pub fn watchdog_interval(
    usec: Option<&str>,
    pid: Option<&str>,
    my_pid: u32,
) -> Result<Option<Duration>, WatchdogError> {
    let usec = match usec {
        None | Some("") => return Ok(None),
        Some(u) => u,
    };
    let micros: u64 = usec
        .parse()
        .map_err(|_| WatchdogError::BadUsec(usec.to_owned()))?;
    if micros == 0 {
        return Err(WatchdogError::ZeroUsec);
    }
    if let Some(pid) = pid.filter(|p| !p.is_empty()) {
        let pid: u32 = pid
            .parse()
            .map_err(|_| WatchdogError::BadPid(pid.to_owned()))?;
        if pid != my_pid {
            return Ok(None);
        }
    }
    let timeout = Duration::from_micros(micros);
    if timeout <= MIN_WATCHDOG_TIMEOUT {
        return Err(WatchdogError::TooSmall(timeout));
    }
    Ok(Some(timeout / 2))
}

/// The first failing health check, named (`None`: healthy).
fn unhealthy(checks: &[(String, HealthCheck)]) -> Option<String> {
    checks
        .iter()
        .find_map(|(name, check)| check().err().map(|e| format!("{name} failed: {e}")))
}

/// Every `interval`: when every check passes, sends `WATCHDOG=1` to `socket` (one retry after
/// [`WATCHDOG_RETRY`]); when one fails, sends nothing, so systemd restarts a kubelet that
/// stays unhealthy. Runs until `cancel`.
pub async fn run_watchdog(
    socket: String,
    interval: Duration,
    checks: Vec<(String, HealthCheck)>,
    cancel: CancellationToken,
) {
    tracing::info!(?interval, "Starting systemd watchdog with interval");
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        if let Some(why) = unhealthy(&checks) {
            tracing::error!(
                error = %why,
                "Do not notify watchdog this iteration as the kubelet is reportedly not healthy"
            );
            continue;
        }
        let mut sent = notify_to(&socket, "WATCHDOG=1");
        if sent.is_err() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(WATCHDOG_RETRY) => {}
            }
            sent = notify_to(&socket, "WATCHDOG=1");
        }
        match sent {
            Ok(()) => tracing::trace!("Watchdog plugin notified"),
            Err(e) => tracing::error!(error = %e, "Failed to notify watchdog"),
        }
    }
}

/// Reads the process environment and spawns [`run_watchdog`] when systemd asked for one.
/// Returns whether a watchdog runs; errors on an unusable `WATCHDOG_USEC`/`WATCHDOG_PID`.
pub fn start_watchdog(
    checks: Vec<(String, HealthCheck)>,
    cancel: CancellationToken,
) -> Result<bool, WatchdogError> {
    let var = |name| std::env::var(name).ok();
    let interval = watchdog_interval(
        var("WATCHDOG_USEC").as_deref(),
        var("WATCHDOG_PID").as_deref(),
        std::process::id(),
    )?;
    let Some(interval) = interval else {
        tracing::info!("Systemd watchdog is not enabled");
        return Ok(false);
    };
    let Some(socket) = var("NOTIFY_SOCKET").filter(|s| !s.is_empty()) else {
        tracing::error!(
            "failed to notify systemd watchdog, notification not supported - (i.e. NOTIFY_SOCKET is unset)"
        );
        return Ok(false);
    };
    tokio::spawn(run_watchdog(socket, interval, checks, cancel));
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(sock: &UnixDatagram) -> String {
        sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 256];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn ready_reaches_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        notify_to(path.to_str().unwrap(), "READY=1").unwrap();
        assert_eq!(receive(&listener), "READY=1");
    }

    #[test]
    fn ready_reaches_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("rkubelet-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        notify_to(&format!("@{name}"), "READY=1").unwrap();
        assert_eq!(receive(&listener), "READY=1");
    }

    #[test]
    fn bad_addresses_and_missing_listeners_are_errors() {
        let err = notify_to("relative.sock", "READY=1").unwrap_err();
        assert_eq!(
            err.to_string(),
            "NOTIFY_SOCKET \"relative.sock\" is not a unix socket address (expected a path or @name)"
        );
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone.sock");
        let err = notify_to(gone.to_str().unwrap(), "READY=1").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("sending \"READY=1\" to NOTIFY_SOCKET"),
            "{err}"
        );
    }

    #[test]
    fn watchdog_interval_follows_sd_watchdog_enabled() {
        assert_eq!(watchdog_interval(None, None, 7), Ok(None));
        assert_eq!(watchdog_interval(Some(""), None, 7), Ok(None));
        assert_eq!(
            watchdog_interval(Some("10000000"), None, 7),
            Ok(Some(Duration::from_secs(5)))
        );
        assert_eq!(
            watchdog_interval(Some("10000000"), Some("7"), 7),
            Ok(Some(Duration::from_secs(5)))
        );
        // Meant for another process (a parent that forked us): not ours.
        assert_eq!(watchdog_interval(Some("10000000"), Some("8"), 7), Ok(None));
        assert_eq!(
            watchdog_interval(Some("ten"), None, 7)
                .unwrap_err()
                .to_string(),
            "configure watchdog: error converting WATCHDOG_USEC: \"ten\""
        );
        assert_eq!(
            watchdog_interval(Some("0"), None, 7),
            Err(WatchdogError::ZeroUsec)
        );
        assert_eq!(
            watchdog_interval(Some("10000000"), Some("x"), 7),
            Err(WatchdogError::BadPid("x".into()))
        );
        assert_eq!(
            watchdog_interval(Some("1000000"), None, 7),
            Err(WatchdogError::TooSmall(Duration::from_secs(1)))
        );
    }

    /// The next datagram within `wait_ms`, if any.
    async fn recv_within(listener: &tokio::net::UnixDatagram, wait_ms: u64) -> Option<String> {
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_millis(wait_ms), listener.recv(&mut buf))
            .await
            .ok()?
            .unwrap();
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    #[tokio::test]
    async fn watchdog_pings_only_while_healthy() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let listener = tokio::net::UnixDatagram::bind(&path).unwrap();
        let healthy = Arc::new(AtomicBool::new(true));
        let flag = healthy.clone();
        let check: HealthCheck = Arc::new(move || {
            if flag.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("sync loop stuck".into())
            }
        });
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_watchdog(
            path.to_str().unwrap().to_owned(),
            Duration::from_millis(50),
            vec![("syncloop".into(), check)],
            cancel.clone(),
        ));
        let recv = |wait_ms| recv_within(&listener, wait_ms);
        for _ in 0..3 {
            assert_eq!(recv(5_000).await.as_deref(), Some("WATCHDOG=1"));
        }
        // Unhealthy: no ping (the ones already queued are drained first).
        healthy.store(false, Ordering::SeqCst);
        while recv(200).await.is_some() {}
        assert_eq!(recv(300).await, None, "no ping while unhealthy");
        healthy.store(true, Ordering::SeqCst);
        assert_eq!(recv(5_000).await.as_deref(), Some("WATCHDOG=1"));
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }
}
