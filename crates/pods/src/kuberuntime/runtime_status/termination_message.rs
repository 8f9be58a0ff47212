//! Termination messages (upstream `getTerminationMessage`, `readLastStringFromContainerLogs`
//! and the message budget of the status manager's `normalizeStatus`). Receives an exited
//! container's CRI status (its mounts and log path) and annotations; emits the text the
//! container left for the kubelet. Owns the one way the kubelet reads a file a pod can write
//! into ([`read_pod_file_tail`]) and the deadline of each such read.
//!
//! Everything read here is hostile. The file behind the termination message mount may be a
//! FIFO, a device node, a socket or a symlink planted by an init container in an `emptyDir`
//! and mounted with a `subPath`; a blocking `open` of a FIFO never returns, and opening some
//! devices has effects of its own (`/dev/watchdog` arms the host's watchdog). So the name is
//! first opened as a bare reference (`O_PATH|O_NOFOLLOW`: nothing of the file's own is run),
//! its type is read from that reference, and only a regular file is opened for reading,
//! through that same reference, never through the name again. At most the last 4 KiB of a
//! message file and the last 80 log lines (at most 2 KiB of their text) are read, and every
//! read runs off the async workers under a deadline, so one container can never hold back
//! the inspection of the others.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerState, Pod, PodStatus as ApiPodStatus};
use rkubelet_cri::api;
use rustix::fs::FileType;
use tracing::{debug, warn};

use crate::container::ContainerStatus;
use crate::kuberuntime::labels::ContainerAnnotationInfo;
use crate::nofollow::{self, ByReference};

/// Upper bound of a termination message read from the file (upstream
/// `MaxContainerTerminationMessageLength`): its last 4 KiB are kept.
pub const MAX_TERMINATION_MESSAGE_LENGTH: usize = 4 * 1024;
/// Upper bound of all the termination messages of one pod (upstream
/// `MaxPodTerminationMessageLogLength`): each container's message is cut to an even share.
pub const MAX_POD_TERMINATION_MESSAGE_LENGTH: usize = 12 * 1024;
/// Upper bound of a termination message taken from the logs (upstream
/// `MaxContainerTerminationMessageLogLength`).
pub const MAX_TERMINATION_MESSAGE_LOG_LENGTH: usize = 2 * 1024;
/// How many log lines are considered for a termination message taken from the logs
/// (upstream `MaxContainerTerminationMessageLogLines`).
pub const MAX_TERMINATION_MESSAGE_LOG_LINES: usize = 80;
/// How far back from the end a log file is searched for those lines: containerd splits log
/// lines at 16 KiB, so 80 lines end well within it.
const LOG_TAIL_READ_LIMIT: u64 = 2 * 1024 * 1024;
/// How much of a log file is read per step backwards while looking for the last lines.
const LOG_TAIL_CHUNK: u64 = 64 * 1024;
/// How long reading one container's termination message (file, then logs) may take. A regular
/// file on a local disk answers in microseconds; a file on a stuck network or FUSE file system
/// may never answer, and must not hold back the rest of the pod's inspection.
pub const TERMINATION_MESSAGE_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Reading a file a pod can write failed, or was refused; names the file.
#[derive(Debug, thiserror::Error)]
pub enum PodFileError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path} is a {kind}, not a regular file: not read")]
    NotRegular { path: String, kind: &'static str },
    #[error("{path}: no answer within {after:?}: not read")]
    TimedOut { path: String, after: Duration },
    #[error("{path}: the read was lost: {reason}")]
    Lost { path: String, reason: String },
}

impl PodFileError {
    /// Nothing is there (the container never wrote a message, or a log was removed).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    fn io(path: &Path, source: impl Into<io::Error>) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source: source.into(),
        }
    }
}

/// What a file type is called in a refusal.
fn file_type_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of unknown type",
    }
}

/// Opens `path` for reading if, and only if, it is a regular file, never opening anything
/// else ([`nofollow::open_regular_by_reference`]): the pod may have put any file type there, or
/// swap it meanwhile.
pub fn open_pod_file(path: &Path) -> Result<File, PodFileError> {
    match nofollow::open_regular_by_reference(path).map_err(|e| PodFileError::io(path, e))? {
        ByReference::Opened(fd) => Ok(File::from(fd)),
        ByReference::NotRegular(kind) => Err(PodFileError::NotRegular {
            path: path.display().to_string(),
            kind: file_type_name(kind),
        }),
        ByReference::Changed => Err(PodFileError::Lost {
            path: path.display().to_string(),
            reason: "the file changed while it was opened".into(),
        }),
    }
}

/// The last `max` bytes of the regular file at `path` (see [`open_pod_file`]), and whether
/// that is the whole file. Blocking: run it off the async workers.
pub fn read_pod_file_tail(path: &Path, max: u64) -> Result<(Vec<u8>, bool), PodFileError> {
    let file = open_pod_file(path)?;
    let len = file
        .metadata()
        .map_err(|e| PodFileError::io(path, e))?
        .len();
    let start = len.saturating_sub(max);
    let data = read_range(&file, start, len - start).map_err(|e| PodFileError::io(path, e))?;
    Ok((data, start == 0))
}

/// Up to `len` bytes from `offset` (fewer if the file shrank meanwhile).
fn read_range(file: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut data = vec![0; usize::try_from(len).unwrap_or(usize::MAX)];
    let mut filled = 0;
    while filled < data.len() {
        match file.read_at(&mut data[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    data.truncate(filled);
    Ok(data)
}

/// The end of the log file at `path` holding its last `lines` lines, reading backwards at most
/// `limit` bytes; and whether that is the whole file. Blocking.
fn read_log_tail(path: &Path, lines: usize, limit: u64) -> Result<(Vec<u8>, bool), PodFileError> {
    let file = open_pod_file(path)?;
    let len = file
        .metadata()
        .map_err(|e| PodFileError::io(path, e))?
        .len();
    let floor = len.saturating_sub(limit);
    let mut start = len;
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut newlines = 0;
    // One newline more than lines: the line before them must end inside what was read, or
    // the first line counted would be cut.
    while start > floor && newlines <= lines {
        let from = start.saturating_sub(LOG_TAIL_CHUNK).max(floor);
        let chunk = read_range(&file, from, start - from).map_err(|e| PodFileError::io(path, e))?;
        newlines += chunk.iter().filter(|b| **b == b'\n').count();
        chunks.push(chunk);
        start = from;
    }
    let data = chunks.into_iter().rev().flatten().collect();
    Ok((data, start == 0))
}

/// Runs the blocking `read` on the blocking pool, giving up on it after `deadline` (the thread
/// finishes on its own; nothing waits for it).
pub async fn read_with_deadline<T: Send + 'static>(
    path: &str,
    deadline: Duration,
    read: impl FnOnce() -> Result<T, PodFileError> + Send + 'static,
) -> Result<T, PodFileError> {
    match tokio::time::timeout(deadline, tokio::task::spawn_blocking(read)).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(PodFileError::Lost {
            path: path.to_owned(),
            reason: join.to_string(),
        }),
        Err(_) => {
            warn!(
                path,
                ?deadline,
                "reading a file a pod can write did not finish in time; given up"
            );
            Err(PodFileError::TimedOut {
                path: path.to_owned(),
                after: deadline,
            })
        }
    }
}

/// The termination message of an exited container (upstream `convertToKubeContainerStatus`):
/// the file mounted at its termination message path, or, with `FallbackToLogsOnError`, a
/// non-zero exit and a container that did run, the tail of its log when the file is empty
/// or missing. At most [`TERMINATION_MESSAGE_READ_TIMEOUT`] is spent on it.
pub(super) async fn termination_message(
    status: &api::ContainerStatus,
    converted: &ContainerStatus,
    annotations: &ContainerAnnotationInfo,
) -> String {
    termination_message_within(
        status,
        converted,
        annotations,
        TERMINATION_MESSAGE_READ_TIMEOUT,
    )
    .await
}

/// [`termination_message`] with the deadline given.
pub(super) async fn termination_message_within(
    status: &api::ContainerStatus,
    converted: &ContainerStatus,
    annotations: &ContainerAnnotationInfo,
    deadline: Duration,
) -> String {
    let fallback_to_logs = annotations.termination_message_policy == "FallbackToLogsOnError"
        && converted.exit_code != 0
        && converted.reason != "ContainerCannotRun";
    let path = annotations.termination_message_path.as_str();
    // Upstream takes the first mount at the path.
    let host_path = (!path.is_empty())
        .then(|| status.mounts.iter().find(|m| m.container_path == path))
        .flatten()
        .map(|m| m.host_path.clone());
    let check_logs = match host_path {
        None => fallback_to_logs,
        Some(host_path) => {
            let read = {
                let host_path = host_path.clone();
                move || {
                    read_pod_file_tail(Path::new(&host_path), MAX_TERMINATION_MESSAGE_LENGTH as u64)
                }
            };
            match read_with_deadline(&host_path, deadline, read).await {
                Ok((data, _)) if data.is_empty() => fallback_to_logs,
                Ok((data, _)) => return String::from_utf8_lossy(&data).into_owned(),
                Err(e) if e.is_not_found() => fallback_to_logs,
                Err(e) => {
                    debug!(container_id = %status.id, error = %e, "termination message not read");
                    return format!(
                        "Error on reading termination log {host_path}: {}",
                        reason(&e)
                    );
                }
            }
        }
    };
    if !check_logs {
        return String::new();
    }
    last_log_text(&status.log_path, deadline).await
}

/// What went wrong, without the path the caller already names.
fn reason(e: &PodFileError) -> String {
    match e {
        PodFileError::Io { source, .. } => source.to_string(),
        PodFileError::NotRegular { kind, .. } => format!("not a regular file but a {kind}"),
        PodFileError::TimedOut { after, .. } => format!("no answer within {after:?}"),
        PodFileError::Lost { reason, .. } => reason.clone(),
    }
}

/// The text of the last log lines of a container, at most
/// [`MAX_TERMINATION_MESSAGE_LOG_LENGTH`] bytes of it (upstream
/// `readLastStringFromContainerLogs`).
async fn last_log_text(log_path: &str, deadline: Duration) -> String {
    let read = {
        let log_path = log_path.to_owned();
        move || {
            read_log_tail(
                Path::new(&log_path),
                MAX_TERMINATION_MESSAGE_LOG_LINES,
                LOG_TAIL_READ_LIMIT,
            )
        }
    };
    match read_with_deadline(log_path, deadline, read).await {
        Ok((data, whole_file)) => log_tail_text(&data, whole_file),
        Err(e) => format!("Error on reading termination message from logs: {e}"),
    }
}

/// Extracts the message text of the last [`MAX_TERMINATION_MESSAGE_LOG_LINES`] CRI log lines
/// in `data` (`<time> <stream> <P|F> <text>`), keeping the last
/// [`MAX_TERMINATION_MESSAGE_LOG_LENGTH`] bytes. `whole_file` says whether `data` starts at
/// the beginning of the file; otherwise its first, cut line is dropped.
#[doc(hidden)] // public for the fuzz targets (fuzz/)
pub fn log_tail_text(data: &[u8], whole_file: bool) -> String {
    let mut lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    if data.ends_with(b"\n") {
        lines.pop();
    }
    if !whole_file && !lines.is_empty() {
        lines.remove(0);
    }
    let skip = lines
        .len()
        .saturating_sub(MAX_TERMINATION_MESSAGE_LOG_LINES);
    let mut out: Vec<u8> = Vec::new();
    for line in &lines[skip..] {
        match parse_cri_log_line(line) {
            Some((partial, content)) => {
                out.extend_from_slice(content);
                if !partial {
                    out.push(b'\n');
                }
            }
            None => debug!("skipping a malformed CRI log line"),
        }
    }
    let start = out.len().saturating_sub(MAX_TERMINATION_MESSAGE_LOG_LENGTH);
    String::from_utf8_lossy(&out[start..]).into_owned()
}

/// Splits a CRI log line into (partial?, content); `None` when it is not in CRI format.
fn parse_cri_log_line(line: &[u8]) -> Option<(bool, &[u8])> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let timestamp = parts.next()?;
    let stream = parts.next()?;
    let tags = parts.next()?;
    let content = parts.next().unwrap_or_default();
    if timestamp.is_empty() || !(stream == b"stdout" || stream == b"stderr") {
        return None;
    }
    match tags.split(|b| *b == b':').next()? {
        b"P" => Some((true, content)),
        b"F" => Some((false, content)),
        _ => None,
    }
}

/// Cuts every termination message of the pod's containers and init containers (current and
/// last state) to an even share of [`MAX_POD_TERMINATION_MESSAGE_LENGTH`], as upstream's
/// `normalizeStatus` does: the share is the budget over the number of containers and init
/// containers in the spec, and each message keeps its beginning (cut at a character
/// boundary). Ephemeral containers are left alone, as upstream.
pub fn bound_pod_termination_messages(pod: &Pod, status: &mut ApiPodStatus) {
    let spec = pod.spec.as_ref();
    let containers = spec.map_or(0, |s| {
        s.containers.len() + s.init_containers.as_ref().map_or(0, Vec::len)
    });
    let per_container = MAX_POD_TERMINATION_MESSAGE_LENGTH / containers.max(1);
    let cut = |state: Option<&mut ContainerState>| {
        let Some(message) = state
            .and_then(|s| s.terminated.as_mut())
            .and_then(|t| t.message.as_mut())
        else {
            return;
        };
        if message.len() > per_container {
            let mut end = per_container;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
    };
    for s in status
        .container_statuses
        .iter_mut()
        .chain(status.init_container_statuses.iter_mut())
        .flatten()
    {
        cut(s.state.as_mut());
        cut(s.last_state.as_mut());
    }
}

#[cfg(test)]
#[path = "termination_message_tests.rs"]
mod tests;
