//! The operator's local socket: the kubelet API (same parsed routes and handlers as the HTTPS
//! port) on a unix socket `<root-dir>/rkubelet/rkubelet.sock`, for `rkubelet get`/`describe`
//! on the node itself; no network port. Owns the socket file and its private directory;
//! receives connections; identifies each by the uid the kernel reports for it (`SO_PEERCRED`,
//! never anything the client sends): root is the local administrator and may do everything,
//! any other uid is authenticated as itself and refused (403).
//!
//! The socket is created safely: its directory is created 0700 and must be a real directory
//! (not a symlink) owned by the kubelet's user; an existing path is removed only when it is a
//! socket owned by that user (a symlink, file or someone else's socket is refused, never
//! followed); the socket is made 0600 (only root can connect).

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use tokio::net::UnixListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::authn::LocalPeer;
use super::authz::Authorizer;
use super::{ServerError, ServerState, accept_failed, authorize_and_dispatch, serve_connection};

/// The socket's directory under the root dir.
pub const SOCKET_DIR: &str = "rkubelet";
/// The socket's file name.
pub const SOCKET_NAME: &str = "rkubelet.sock";

/// `<root-dir>/rkubelet/rkubelet.sock`.
pub fn socket_path(root_dir: &Path) -> PathBuf {
    root_dir.join(SOCKET_DIR).join(SOCKET_NAME)
}

fn refuse(path: &Path, message: impl Into<String>) -> ServerError {
    ServerError::LocalSocket {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Creates (or checks) the private directory and binds the socket at `path`, mode 0600.
pub fn bind_local(path: &Path) -> Result<UnixListener, ServerError> {
    let dir = path
        .parent()
        .ok_or_else(|| refuse(path, "the socket path has no directory"))?;
    let me = rustix::process::geteuid().as_raw();
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(|e| refuse(dir, format!("creating the directory: {e}")))?;
        }
        Err(e) => return Err(refuse(dir, e.to_string())),
        Ok(_) => {}
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| refuse(dir, e.to_string()))?;
    if !meta.file_type().is_dir() {
        return Err(refuse(
            dir,
            "not a directory (a symlink or file is never followed)",
        ));
    }
    if meta.uid() != me {
        return Err(refuse(
            dir,
            format!(
                "owned by uid {}, not by this kubelet (uid {me})",
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        let fd = crate::nofollow::open_dir_at(rustix::fs::CWD, dir)
            .map_err(|e| refuse(dir, e.to_string()))?;
        rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o700))
            .map_err(|e| refuse(dir, format!("making the directory private: {e}")))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() && m.uid() == me => {
            // A stale socket of ours (the previous run).
            std::fs::remove_file(path)
                .map_err(|e| refuse(path, format!("removing the stale socket: {e}")))?;
        }
        Ok(m) => {
            let what = if m.file_type().is_symlink() {
                "a symlink".to_owned()
            } else if m.file_type().is_socket() {
                format!("a socket owned by uid {}", m.uid())
            } else {
                "not a socket".to_owned()
            };
            return Err(refuse(
                path,
                format!("refusing to replace it: {what}; remove it by hand if it is safe"),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(refuse(path, e.to_string())),
    }
    let listener = UnixListener::bind(path).map_err(|e| refuse(path, format!("binding: {e}")))?;
    // Only this user can enter the directory, so nothing can swap the file meanwhile.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| refuse(path, format!("setting mode 0600: {e}")))?;
    Ok(listener)
}

/// Serves the local socket until `cancel` fires; in-flight connections are closed then.
pub async fn serve_local(listener: UnixListener, state: ServerState, cancel: CancellationToken) {
    let path = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf));
    if let Some(p) = &path {
        info!(socket = %p.display(), "serving the local operator socket");
    }
    let authorizer = Arc::new(Authorizer::LocalAdmins);
    let streams = state.streams.clone();
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((s, _)) => s,
                    Err(e) => {
                        accept_failed(&e).await;
                        continue;
                    }
                };
                let peer = match stream.peer_cred() {
                    Ok(c) => LocalPeer::from_uid(c.uid()),
                    Err(e) => {
                        debug!(error = %e, "local socket: no peer credentials; closing");
                        continue;
                    }
                };
                let state = state.clone();
                let authorizer = authorizer.clone();
                conns.spawn(async move {
                    let st = state.clone();
                    let label = match peer {
                        LocalPeer::Root => "local uid 0".to_owned(),
                        LocalPeer::User(uid) => format!("local uid {uid}"),
                    };
                    serve_connection(stream, &st, label, move |req: Request<Incoming>| {
                        let state = state.clone();
                        let authorizer = authorizer.clone();
                        async move {
                            let route = super::path::parse(req.uri().path());
                            authorize_and_dispatch(&state, &authorizer, &peer.user(), &route, &req)
                                .await
                        }
                    })
                    .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
    streams.shutdown().await;
    if let Some(p) = path {
        // Ours, in our private directory: gone with the kubelet.
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[tokio::test]
    async fn socket_is_owner_only_in_a_private_directory_and_stale_sockets_are_replaced() {
        let root = tempfile::tempdir().unwrap();
        let path = socket_path(root.path());
        let listener = bind_local(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.uid(), rustix::process::geteuid().as_raw());
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        drop(listener);
        // The previous run's socket (ours) is replaced; a loosened directory is made private.
        std::fs::set_permissions(
            path.parent().unwrap(),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let _again = bind_local(&path).unwrap();
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(mode(&path), 0o600);
    }

    /// Attack: something planted at the socket path (a symlink to a file the kubelet could
    /// clobber, a regular file, a directory symlink) is refused, never followed or removed.
    #[tokio::test]
    async fn planted_symlinks_and_files_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let path = socket_path(root.path());
        std::fs::create_dir(path.parent().unwrap()).unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        symlink(&victim, &path).unwrap();
        let err = bind_local(&path).unwrap_err().to_string();
        assert!(
            err.contains("a symlink") && err.contains("rkubelet.sock"),
            "{err}"
        );
        assert!(
            std::fs::symlink_metadata(&path)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // A dangling symlink (bind would follow it and create the target) is refused too.
        std::fs::remove_file(&path).unwrap();
        symlink(root.path().join("elsewhere.sock"), &path).unwrap();
        assert!(bind_local(&path).is_err());
        assert!(!root.path().join("elsewhere.sock").exists());
        // A regular file.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "x").unwrap();
        let err = bind_local(&path).unwrap_err().to_string();
        assert!(err.contains("not a socket"), "{err}");
        // The directory itself a symlink to somewhere else.
        let root2 = tempfile::tempdir().unwrap();
        let elsewhere = root2.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, root2.path().join(SOCKET_DIR)).unwrap();
        let err = bind_local(&socket_path(root2.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a directory"), "{err}");
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
    }

    /// Attack: a socket or directory owned by another user is refused (it could be theirs
    /// to swap); needs root to chown, as the kubelet runs.
    #[tokio::test]
    async fn foreign_owned_socket_or_directory_is_refused() {
        assert_eq!(
            rustix::process::geteuid().as_raw(),
            0,
            "this test runs as root (as the kubelet does)"
        );
        let root = tempfile::tempdir().unwrap();
        let path = socket_path(root.path());
        drop(bind_local(&path).unwrap());
        std::os::unix::fs::lchown(&path, Some(65534), Some(65534)).unwrap();
        let err = bind_local(&path).unwrap_err().to_string();
        assert!(err.contains("a socket owned by uid 65534"), "{err}");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::lchown(path.parent().unwrap(), Some(65534), Some(65534)).unwrap();
        let err = bind_local(&path).unwrap_err().to_string();
        assert!(err.contains("owned by uid 65534"), "{err}");
    }
}
