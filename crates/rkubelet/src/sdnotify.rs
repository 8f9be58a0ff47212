//! systemd's readiness protocol (`sd_notify(3)`), as upstream's kubelet sends `READY=1` once
//! it serves. Owns: reading `NOTIFY_SOCKET` and sending one datagram to it. Receives the
//! socket address (a path, or `@name` for the abstract namespace); emits the state string.
//! Without `NOTIFY_SOCKET` (not started by systemd with `Type=notify`) nothing is sent.

use std::os::unix::net::UnixDatagram;

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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
}
