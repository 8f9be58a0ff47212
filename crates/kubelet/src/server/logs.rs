//! CRI container log reader (upstream `kuberuntime/logs`): owns nothing but the files it opens;
//! receives a container's log path and the request's options; emits the log text (or a
//! followed stream) to a sink. Reads the CRI format `<RFC3339Nano> <stream> <P|F> <msg>`,
//! joins partial (`P`) records, and also reads rotated files (`<n>.log.<YYYYMMDD-HHMMSS>` and
//! their gzip `….gz`) before the live one.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio::sync::mpsc;

/// Log request options (`PodLogOptions` as the kubelet applies them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    /// Only records at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only the last N records (`tailLines`).
    pub tail: Option<usize>,
    /// Stop after this many bytes (`limitBytes`).
    pub limit_bytes: Option<u64>,
    /// Prefix each record with its timestamp.
    pub timestamps: bool,
    /// Keep reading new records while the container runs.
    pub follow: bool,
}

/// One parsed CRI log record.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord {
    pub time: DateTime<Utc>,
    pub stream: String,
    /// `P` (partial: no newline ends the message) or `F`.
    pub partial: bool,
    pub msg: Vec<u8>,
}

/// Reader errors.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("failed to open log file {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Parses one CRI line (without its trailing newline).
pub fn parse_cri_line(line: &[u8]) -> Option<LogRecord> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let ts = std::str::from_utf8(parts.next()?).ok()?;
    let time = DateTime::parse_from_rfc3339(ts).ok()?.with_timezone(&Utc);
    let stream = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    if stream != "stdout" && stream != "stderr" {
        return None;
    }
    let tag = parts.next()?;
    // Tags are `:`-separated; the first is the partial/full flag.
    let partial = tag.split(|b| *b == b':').next() == Some(b"P");
    let msg = parts.next().unwrap_or_default().to_vec();
    Some(LogRecord {
        time,
        stream,
        partial,
        msg,
    })
}

/// `RFC3339NanoFixed`, as upstream prints timestamps.
pub fn format_time(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string()
}

/// The rotated files of `path` (`<path>.<YYYYMMDD-HHMMSS>[.gz]`), oldest first.
pub fn rotated_files(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(base)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let prefix = format!("{base}.");
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stamp = name.strip_prefix(&prefix)?;
            let stamp = stamp.strip_suffix(".gz").unwrap_or(stamp);
            // Skip temporary files of an in-progress compression (`….tmp`).
            let valid = stamp.len() == 15
                && stamp.as_bytes()[8] == b'-'
                && stamp
                    .bytes()
                    .enumerate()
                    .all(|(i, b)| i == 8 || b.is_ascii_digit());
            valid.then(|| (stamp.to_owned(), e.path()))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, p)| p).collect()
}

fn open_lines(path: &Path) -> Result<Box<dyn BufRead + Send>, LogError> {
    let f = std::fs::File::open(path).map_err(|source| LogError::Open {
        path: path.to_owned(),
        source,
    })?;
    if path.extension().is_some_and(|e| e == "gz") {
        Ok(Box::new(BufReader::new(flate2::read::GzDecoder::new(f))))
    } else {
        Ok(Box::new(BufReader::new(f)))
    }
}

/// Where the text goes: a buffer (tests, non-streaming) or an HTTP body channel.
pub enum LogSink {
    Buffer(Vec<u8>),
    Channel(mpsc::Sender<Bytes>),
}

/// Writes records through the options (timestamps, limitBytes); `false` once done.
struct Writer<'a> {
    sink: &'a mut LogSink,
    remaining: Option<u64>,
    timestamps: bool,
}

impl Writer<'_> {
    async fn write(&mut self, rec: &LogRecord) -> bool {
        let mut out = Vec::with_capacity(rec.msg.len() + 32);
        if self.timestamps {
            out.extend_from_slice(format_time(&rec.time).as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&rec.msg);
        if !rec.partial {
            out.push(b'\n');
        }
        if let Some(rem) = self.remaining.as_mut() {
            let take = usize::try_from(*rem).unwrap_or(usize::MAX).min(out.len());
            out.truncate(take);
            *rem -= take as u64;
        }
        let ok = match self.sink {
            LogSink::Buffer(b) => {
                b.extend_from_slice(&out);
                true
            }
            LogSink::Channel(tx) => out.is_empty() || tx.send(Bytes::from(out)).await.is_ok(),
        };
        ok && self.remaining != Some(0)
    }
}

/// Reads every complete line of `r` as records (unparsable lines are skipped, as upstream).
fn records(mut r: impl BufRead, path: &Path) -> Result<Vec<LogRecord>, LogError> {
    let mut out = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = r
            .read_until(b'\n', &mut line)
            .map_err(|source| LogError::Read {
                path: path.to_owned(),
                source,
            })?;
        if n == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if let Some(rec) = parse_cri_line(&line) {
            out.push(rec);
        }
    }
    Ok(out)
}

/// Reads the logs of the container whose live file is `path` into `sink`. With `follow`,
/// keeps streaming new records (also across a rotation of `path`, without losing the old
/// file's last lines) until `running` reports the container stopped and nothing new arrived,
/// or the sink is closed.
pub async fn read_logs<F, Fut>(
    path: &Path,
    opts: &LogOptions,
    sink: &mut LogSink,
    running: F,
) -> Result<(), LogError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut w = Writer {
        sink,
        remaining: opts.limit_bytes,
        timestamps: opts.timestamps,
    };
    if opts.limit_bytes == Some(0) {
        return Ok(());
    }
    // Everything already written: rotated files oldest first, then the live file.
    let mut sources = rotated_files(path);
    let live_exists = path.exists();
    if live_exists || sources.is_empty() {
        sources.push(path.to_owned());
    }
    let mut pending: VecDeque<LogRecord> = VecDeque::new();
    let mut live_offset = 0u64;
    let mut live_ino = None;
    for src in &sources {
        if src == path {
            let f = std::fs::File::open(src).map_err(|source| LogError::Open {
                path: src.clone(),
                source,
            })?;
            let meta = f.metadata().map_err(|source| LogError::Read {
                path: src.clone(),
                source,
            })?;
            live_ino = Some(std::os::unix::fs::MetadataExt::ino(&meta));
            let mut data = Vec::new();
            BufReader::new(f)
                .read_to_end(&mut data)
                .map_err(|source| LogError::Read {
                    path: src.clone(),
                    source,
                })?;
            // Only complete lines now; a half-written line is read on the next poll.
            let complete = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            live_offset = complete as u64;
            let recs = records(&data[..complete], src)?;
            push_tail(&mut pending, recs, opts.tail);
        } else {
            let recs = records(open_lines(src)?, src)?;
            push_tail(&mut pending, recs, opts.tail);
        }
    }
    for rec in pending {
        if opts.since.is_some_and(|s| rec.time < s) {
            continue;
        }
        if !w.write(&rec).await {
            return Ok(());
        }
    }
    if !opts.follow {
        return Ok(());
    }
    follow(path, live_offset, live_ino, opts, &mut w, running).await
}

fn push_tail(pending: &mut VecDeque<LogRecord>, recs: Vec<LogRecord>, tail: Option<usize>) {
    pending.extend(recs);
    if let Some(n) = tail {
        while pending.len() > n {
            pending.pop_front();
        }
    }
}

/// How often a follower without file events checks whether the container still runs.
const FOLLOW_CHECK: Duration = Duration::from_secs(1);

/// Streams records appended to the live file, woken by inotify events on its directory (a 1 s
/// timer is the fallback and the cadence of the "still running?" check). The open handle is kept,
/// so after a rotation the rest of the old file is read before switching to the new one.
async fn follow<F, Fut>(
    path: &Path,
    offset: u64,
    ino: Option<u64>,
    opts: &LogOptions,
    w: &mut Writer<'_>,
    running: F,
) -> Result<(), LogError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut live = LiveFile::reopen(path, offset, ino)?;
    let mut events = dir_events(path);
    loop {
        if let LogSink::Channel(tx) = &*w.sink
            && tx.is_closed()
        {
            return Ok(());
        }
        let new = live.read_new(path)?;
        let got = !new.is_empty();
        for rec in new {
            if opts.since.is_some_and(|s| rec.time < s) {
                continue;
            }
            if !w.write(&rec).await {
                return Ok(());
            }
        }
        if got {
            continue;
        }
        let woken = match &mut events {
            Some(ev) => tokio::time::timeout(FOLLOW_CHECK, ev.next())
                .await
                .is_ok_and(|e| e.is_some()),
            None => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                false
            }
        };
        // No new data: stop once the container is gone, after a last read.
        if !woken && !running().await {
            for rec in live.read_new(path)? {
                if !w.write(&rec).await {
                    break;
                }
            }
            return Ok(());
        }
    }
}

/// Inotify events of the directory holding `path` (writes, creations, renames), or `None`
/// when inotify is unavailable (the follower then polls).
fn dir_events(path: &Path) -> Option<inotify::EventStream<[u8; 1024]>> {
    use inotify::{Inotify, WatchMask};
    let dir = path.parent()?;
    let ino = Inotify::init().ok()?;
    ino.watches()
        .add(
            dir,
            WatchMask::MODIFY | WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::MOVED_FROM,
        )
        .ok()?;
    ino.into_event_stream([0u8; 1024]).ok()
}

/// The followed live file: an open handle, its inode and how far complete lines were read.
struct LiveFile {
    file: Option<std::fs::File>,
    ino: Option<u64>,
    offset: u64,
}

impl LiveFile {
    /// Opens `path` again at `offset` if it still is inode `ino` (else from the start).
    fn reopen(path: &Path, offset: u64, ino: Option<u64>) -> Result<Self, LogError> {
        use std::os::unix::fs::MetadataExt;
        let Ok(file) = std::fs::File::open(path) else {
            return Ok(Self {
                file: None,
                ino,
                offset,
            });
        };
        let meta = file.metadata().map_err(|source| LogError::Read {
            path: path.to_owned(),
            source,
        })?;
        let same = ino.is_none_or(|i| i == meta.ino());
        Ok(Self {
            file: Some(file),
            ino: Some(meta.ino()),
            offset: if same { offset } else { 0 },
        })
    }

    /// New complete records: the rest of the open file, then, when `path` now names another
    /// file (rotation) or the file was truncated in place (copytruncate), the new content.
    fn read_new(&mut self, path: &Path) -> Result<Vec<LogRecord>, LogError> {
        use std::os::unix::fs::MetadataExt;
        let mut out = self.read_open(path)?;
        match std::fs::metadata(path) {
            Ok(m) if self.ino != Some(m.ino()) => {
                *self = Self::reopen(path, 0, None)?;
                out.extend(self.read_open(path)?);
            }
            Ok(m) if m.len() < self.offset => {
                self.offset = 0;
                out.extend(self.read_open(path)?);
            }
            _ => {}
        }
        Ok(out)
    }

    fn read_open(&mut self, path: &Path) -> Result<Vec<LogRecord>, LogError> {
        use std::io::Seek;
        let Some(f) = &mut self.file else {
            return Ok(Vec::new());
        };
        let err = |source| LogError::Read {
            path: path.to_owned(),
            source,
        };
        f.seek(std::io::SeekFrom::Start(self.offset)).map_err(err)?;
        let mut data = Vec::new();
        f.read_to_end(&mut data).map_err(err)?;
        // Only complete lines; a half-written line is read again on the next wake-up.
        let complete = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        self.offset += complete as u64;
        records(&data[..complete], path)
    }
}

#[cfg(test)]
#[path = "logs_tests.rs"]
mod tests;
