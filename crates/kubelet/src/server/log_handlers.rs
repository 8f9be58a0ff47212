//! Response bodies of the log endpoints; receive what `routes` parsed from the request, emit
//! the response. `/containerLogs/…` streams the reader of [`super::logs`] (running on a thread
//! of its own) through a bounded channel. `/logs/…` resolves the path under the system log
//! directory with an `openat` walk that never follows a symlink out of it (every step is opened
//! with `O_NOFOLLOW`; a link found on the way is read and resolved by hand, and only if it stays
//! inside), then streams the file in chunks or lists the directory. No file I/O runs on the
//! async runtime's threads.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Frame;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::logs::{self, LogChunk, LogOptions};
use super::{Resp, text};
use crate::nofollow::{open_dir_at, open_regular_at};

/// The body of a container log response: the reader's first chunk, then the rest of its
/// channel. An error after the text started ends the body (it is logged).
struct LogBody {
    first: Option<Bytes>,
    rx: mpsc::Receiver<LogChunk>,
}

impl hyper::body::Body for LogBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(b) = self.first.take()
            && !b.is_empty()
        {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        loop {
            return match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(b))) if b.is_empty() => continue,
                Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(Ok(Frame::data(b)))),
                Poll::Ready(Some(Err(e))) => {
                    warn!(error = %e, "reading a container log failed mid-stream");
                    Poll::Ready(None)
                }
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

fn plain_text_headers(resp: &mut Resp) {
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
}

/// Streams the container log whose live file is `path`. The status follows the reader's first
/// item: an error before any text (a missing file, an unsupported format) is a 400 with its
/// message, as upstream; otherwise 200 and the text as it is read.
pub(super) async fn container_log(
    path: PathBuf,
    opts: LogOptions,
    running: Box<dyn FnMut() -> bool + Send>,
    cancel: CancellationToken,
) -> Resp {
    let mut rx = match logs::spawn_reader(path, opts, running, cancel) {
        Ok(rx) => rx,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    };
    match rx.recv().await {
        None => text(StatusCode::OK, String::new()),
        Some(Err(e)) => text(StatusCode::BAD_REQUEST, e.to_string()),
        Some(Ok(first)) => {
            let mut resp = Response::new(
                LogBody {
                    first: Some(first),
                    rx,
                }
                .boxed(),
            );
            plain_text_headers(&mut resp);
            resp
        }
    }
}

/// `GET /logs/…` below `root`: `comps` are the request's path components (percent-decoded,
/// free of `..`), `rel` the decoded path after `/logs` (for the trailing-slash redirect).
pub(super) async fn system_log(root: PathBuf, comps: Vec<OsString>, rel: String) -> Resp {
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    let (found_tx, found_rx) = oneshot::channel();
    let wants_dir = rel.ends_with('/');
    let spawned = std::thread::Builder::new()
        .name("system-log".into())
        .spawn(move || serve_system_log(&root, comps, wants_dir, found_tx, tx));
    if let Err(e) = spawned {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("starting the log reader: {e}\n"),
        );
    }
    match found_rx.await {
        Ok(Target::File) => super::stream(rx),
        Ok(Target::Listing(names)) => listing(&names),
        Ok(Target::Redirect) => redirect(&format!("/logs{rel}/")),
        Ok(Target::Forbidden) => text(StatusCode::FORBIDDEN, "403 Forbidden\n".into()),
        Ok(Target::Error(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        Ok(Target::NotFound) | Err(_) => super::not_found(),
    }
}

/// What a `/logs/` path names.
#[derive(Debug, PartialEq)]
enum Target {
    /// A regular file, streamed on the channel.
    File,
    /// A directory's entries (directories end in `/`).
    Listing(Vec<String>),
    /// A directory asked for without its trailing slash.
    Redirect,
    NotFound,
    Forbidden,
    Error(String),
}

/// The blocking part of `/logs/`: resolve, then list or stream.
fn serve_system_log(
    root: &Path,
    comps: Vec<OsString>,
    wants_dir: bool,
    found: oneshot::Sender<Target>,
    tx: mpsc::Sender<Bytes>,
) {
    let opened = match open_beneath(root, comps) {
        Ok(o) => o,
        Err(e) => {
            let _ = found.send(e);
            return;
        }
    };
    let mut file = match opened {
        Opened::Dir(_) if !wants_dir => {
            let _ = found.send(Target::Redirect);
            return;
        }
        Opened::Dir(fd) => {
            let _ = found.send(match list_dir(&fd) {
                Ok(names) => Target::Listing(names),
                Err(e) => Target::Error(e.to_string()),
            });
            return;
        }
        Opened::File(f) => f,
    };
    if found.send(Target::File).is_err() {
        return;
    }
    let mut buf = vec![0u8; logs::CHUNK];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if tx.blocking_send(Bytes::copy_from_slice(&buf[..n])).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                debug!(error = %e, "reading a system log failed mid-stream");
                return;
            }
        }
    }
}

/// A resolved `/logs/` path.
#[derive(Debug)]
enum Opened {
    Dir(OwnedFd),
    File(File),
}

/// Symlinks followed in one resolution at most (Linux's own limit).
const MAX_LINKS: usize = 40;

fn errno_found(e: rustix::io::Errno) -> Target {
    if e == rustix::io::Errno::ACCESS || e == rustix::io::Errno::PERM {
        Target::Forbidden
    } else {
        Target::NotFound
    }
}

/// Opens `comps` below `root` without ever leaving it: each component is opened relative to
/// the directory before it, with `O_NOFOLLOW`; a symlink is read and its target walked the same
/// way (`..` pops a directory this walk opened, an absolute target must lie under `root`), so a
/// link swapped in at any moment is either resolved inside or refused. Only directories and
/// regular files are opened (a FIFO or a device never is). Escapes and loops are "not found".
fn open_beneath(root: &Path, comps: Vec<OsString>) -> Result<Opened, Target> {
    use rustix::fs::{CWD, openat, readlinkat, statat};
    // The root itself comes from the configuration and is trusted.
    let root_fd = openat(
        CWD,
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno_found)?;
    let roots: Vec<PathBuf> = std::iter::once(root.to_owned())
        .chain(std::fs::canonicalize(root).ok())
        .collect();
    let mut stack: Vec<OwnedFd> = vec![root_fd];
    let mut pending: VecDeque<OsString> = comps.into();
    let mut links = 0;
    while let Some(c) = pending.pop_front() {
        if c.is_empty() || c == "." {
            continue;
        }
        if c == ".." {
            if stack.len() == 1 {
                return Err(Target::NotFound);
            }
            stack.pop();
            continue;
        }
        let Some(dir) = stack.last() else {
            return Err(Target::NotFound);
        };
        let st = statat(dir, &c, AtFlags::SYMLINK_NOFOLLOW).map_err(errno_found)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Target::NotFound);
                }
                let target = readlinkat(dir, &c, Vec::new()).map_err(errno_found)?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                let rest = if target.is_absolute() {
                    let inside = roots
                        .iter()
                        .find_map(|r| target.strip_prefix(r).ok())
                        .ok_or(Target::NotFound)?;
                    stack.truncate(1);
                    inside.to_owned()
                } else {
                    target
                };
                for comp in rest.components().rev() {
                    match comp {
                        Component::Normal(n) => pending.push_front(n.to_owned()),
                        Component::ParentDir => pending.push_front("..".into()),
                        Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
                    }
                }
            }
            FileType::Directory => {
                let fd = open_dir_at(dir, &c).map_err(errno_found)?;
                stack.push(fd);
            }
            FileType::RegularFile => {
                if pending.iter().any(|p| !p.is_empty() && p != ".") {
                    return Err(Target::NotFound);
                }
                // It may have been swapped since the stat: only a regular file is served.
                let Some((fd, _)) = open_regular_at(dir, &c).map_err(errno_found)? else {
                    return Err(Target::NotFound);
                };
                return Ok(Opened::File(File::from(fd)));
            }
            _ => return Err(Target::NotFound),
        }
    }
    stack.pop().map(Opened::Dir).ok_or(Target::NotFound)
}

/// The entries of an open directory, sorted; directories end in `/` (a symlink does not).
fn list_dir(fd: &OwnedFd) -> std::io::Result<Vec<String>> {
    let mut dir = rustix::fs::Dir::read_from(fd)?;
    let mut names = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let raw = entry.file_name();
        if matches!(raw.to_bytes(), b"." | b"..") {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => rustix::fs::statat(fd, raw, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory),
            _ => false,
        };
        let mut name = String::from_utf8_lossy(raw.to_bytes()).into_owned();
        if is_dir {
            name.push('/');
        }
        names.push(name);
    }
    names.sort();
    Ok(names)
}

fn listing(names: &[String]) -> Resp {
    let mut body = String::from("<pre>\n");
    for n in names {
        let esc = html_escape(n);
        body.push_str(&format!("<a href=\"{esc}\">{esc}</a>\n"));
    }
    body.push_str("</pre>\n");
    let mut r = text(StatusCode::OK, body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

pub(super) fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

pub(super) fn redirect(to: &str) -> Resp {
    let mut r = text(StatusCode::MOVED_PERMANENTLY, String::new());
    if let Ok(v) = header::HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

#[cfg(test)]
#[path = "log_handlers_tests.rs"]
mod tests;
