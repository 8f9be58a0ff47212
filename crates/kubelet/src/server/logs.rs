//! The one container log reader (upstream `kuberuntime/logs` and `util/tail`). Owns nothing but
//! the files it opens; receives a container's live log path and the request's [`LogOptions`];
//! emits the log text in bounded chunks, either to a blocking [`LogOutput`]
//! ([`read_logs_blocking`]: a CLI, a test) or through a bounded channel an async consumer drains
//! ([`spawn_reader`]: the HTTP server; the reader runs on a thread of its own and stops when the
//! receiver is dropped).
//!
//! Reads the CRI format `<RFC3339Nano> <stream> <P|F> <msg>` (or Docker JSON lines: the first line
//! picks the format, as upstream), rotated files `<n>.log.<YYYYMMDD-HHMMSS>` and their gzip
//! `….gz` before the live file, all incrementally: `tailLines` scans the newest files backwards
//! in fixed-size blocks counting lines, `limitBytes` stops the reading once reached, gzip is
//! decoded as a stream. A reader holds at most a few [`CHUNK`]s and the longest line it accepts
//! ([`MAX_LINE`]), whatever the size of the log.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Size of the chunks handed to a consumer, of the read buffers and of the tail scan blocks.
pub const CHUNK: usize = 64 * 1024;
/// The longest log line kept (containerd splits lines at 16 KiB); a longer one is dropped.
pub const MAX_LINE: usize = 1024 * 1024;
/// Chunks a channel consumer may lag behind before the reader waits for it.
const CHANNEL_CHUNKS: usize = 4;
/// How often a follower without file events checks whether the container still runs.
const FOLLOW_CHECK: Duration = Duration::from_secs(1);
/// How often a follower polls when inotify is unavailable.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Log request options (`PodLogOptions` as the kubelet applies them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    /// Only records at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only the last N lines (`tailLines`).
    pub tail: Option<usize>,
    /// Stop after this many bytes (`limitBytes`).
    pub limit_bytes: Option<u64>,
    /// Prefix each record with its timestamp.
    pub timestamps: bool,
    /// Keep reading new records while the container runs.
    pub follow: bool,
}

/// One parsed CRI log record (owned).
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
    #[error("failed to get parse function: unsupported log format: {line:?}")]
    Format { line: String },
    #[error("starting the log reader: {0}")]
    Spawn(std::io::Error),
}

fn read_err(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Read {
        path: path.to_owned(),
        source,
    }
}

/// One parsed line, borrowing the line's bytes where it can.
#[derive(Debug)]
struct LogLine<'a> {
    time: DateTime<Utc>,
    partial: bool,
    msg: Cow<'a, [u8]>,
}

/// The fields of a CRI line: time, stream, partial flag, message.
fn split_cri(line: &[u8]) -> Option<(DateTime<Utc>, &str, bool, &[u8])> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let ts = std::str::from_utf8(parts.next()?).ok()?;
    let time = DateTime::parse_from_rfc3339(ts).ok()?.with_timezone(&Utc);
    let stream = std::str::from_utf8(parts.next()?).ok()?;
    if stream != "stdout" && stream != "stderr" {
        return None;
    }
    let tag = parts.next()?;
    // Tags are `:`-separated; the first is the partial/full flag.
    let partial = tag.split(|b| *b == b':').next() == Some(b"P");
    Some((time, stream, partial, parts.next().unwrap_or_default()))
}

/// Parses one CRI line (without its trailing newline).
pub fn parse_cri_line(line: &[u8]) -> Option<LogRecord> {
    let (time, stream, partial, msg) = split_cri(line)?;
    Some(LogRecord {
        time,
        stream: stream.to_owned(),
        partial,
        msg: msg.to_vec(),
    })
}

/// A Docker `json-file` line (`{"log":…,"stream":…,"time":…}`).
#[derive(serde::Deserialize)]
struct DockerLine {
    #[serde(default)]
    log: String,
    #[serde(default)]
    stream: String,
    #[serde(default)]
    time: Option<String>,
}

/// The line formats upstream reads; the first line of a read picks one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogFormat {
    Cri,
    DockerJson,
}

impl LogFormat {
    fn detect(line: &[u8]) -> Option<Self> {
        if split_cri(line).is_some() {
            Some(Self::Cri)
        } else if serde_json::from_slice::<DockerLine>(line).is_ok() {
            Some(Self::DockerJson)
        } else {
            None
        }
    }

    fn parse(self, line: &[u8]) -> Option<LogLine<'_>> {
        match self {
            Self::Cri => {
                let (time, _, partial, msg) = split_cri(line)?;
                Some(LogLine {
                    time,
                    partial,
                    msg: Cow::Borrowed(msg),
                })
            }
            Self::DockerJson => {
                let d: DockerLine = serde_json::from_slice(line).ok()?;
                if d.stream != "stdout" && d.stream != "stderr" {
                    return None;
                }
                let time = match d.time {
                    Some(t) => DateTime::parse_from_rfc3339(&t).ok()?.with_timezone(&Utc),
                    None => DateTime::<Utc>::MIN_UTC,
                };
                // The message carries its own newline; it is written as is.
                Some(LogLine {
                    time,
                    partial: true,
                    msg: Cow::Owned(d.log.into_bytes()),
                })
            }
        }
    }
}

/// `RFC3339NanoFixed`, as upstream prints timestamps.
pub fn format_time(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string()
}

/// The rotated files of `path` (`<path>.<YYYYMMDD-HHMMSS>[.gz]`), oldest first. Temporary files
/// of a compression in progress are left out, and so is a `.gz` whose uncompressed original is
/// still there (the compression has not finished removing it).
pub fn rotated_files(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(base)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let prefix = format!("{base}.");
    let mut out: Vec<(String, bool, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stamp = name.strip_prefix(&prefix)?;
            let (stamp, gz) = match stamp.strip_suffix(".gz") {
                Some(s) => (s, true),
                None => (stamp, false),
            };
            let valid = stamp.len() == 15
                && stamp.as_bytes()[8] == b'-'
                && stamp
                    .bytes()
                    .enumerate()
                    .all(|(i, b)| i == 8 || b.is_ascii_digit());
            valid.then(|| (stamp.to_owned(), gz, e.path()))
        })
        .collect();
    // Plain before gzip for the same stamp, so the duplicate `.gz` is the one dropped.
    out.sort();
    out.dedup_by(|later, earlier| later.0 == earlier.0);
    out.into_iter().map(|(_, _, p)| p).collect()
}

/// Where the reader's text goes. Blocking; implemented by `Vec<u8>` (tests), [`WriteOutput`]
/// (a CLI's stdout) and the channel behind [`spawn_reader`].
pub trait LogOutput {
    /// Takes the next bytes of log text; `false` once the consumer is gone (the reader stops).
    fn write(&mut self, data: &[u8]) -> bool;
    /// Hands on whatever is buffered: called before a follower waits for new lines and at the
    /// end; `false` once the consumer is gone.
    fn flush(&mut self) -> bool {
        true
    }
}

impl LogOutput for Vec<u8> {
    fn write(&mut self, data: &[u8]) -> bool {
        self.extend_from_slice(data);
        true
    }
}

/// A [`LogOutput`] over a `std::io::Write` (a terminal, a file); the first write error stops the
/// reader.
pub struct WriteOutput<W>(pub W);

impl<W: io::Write> LogOutput for WriteOutput<W> {
    fn write(&mut self, data: &[u8]) -> bool {
        self.0.write_all(data).is_ok()
    }
    fn flush(&mut self) -> bool {
        self.0.flush().is_ok()
    }
}

/// Whether the reader goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    More,
    Done,
}

/// Applies the options to parsed lines and writes them out.
struct Emitter<'o> {
    out: &'o mut dyn LogOutput,
    since: Option<DateTime<Utc>>,
    timestamps: bool,
    /// Bytes still allowed (`limitBytes`).
    remaining: Option<u64>,
    /// Lines still allowed (`tailLines` without follow, as upstream's "limited mode").
    lines_left: Option<usize>,
    format: Option<LogFormat>,
}

impl Emitter<'_> {
    /// One complete line of the log (without its newline).
    fn line(&mut self, line: &[u8]) -> Result<Flow, LogError> {
        let format = match self.format {
            Some(f) => f,
            None => {
                let f = LogFormat::detect(line).ok_or_else(|| LogError::Format {
                    line: String::from_utf8_lossy(&line[..line.len().min(256)]).into_owned(),
                })?;
                self.format = Some(f);
                f
            }
        };
        let Some(rec) = format.parse(line) else {
            debug!(
                line = %String::from_utf8_lossy(&line[..line.len().min(256)]),
                "skipping a malformed log line"
            );
            return Ok(Flow::More);
        };
        if self.since.is_none_or(|s| rec.time >= s) && self.record(&rec) == Flow::Done {
            return Ok(Flow::Done);
        }
        if let Some(n) = &mut self.lines_left {
            *n = n.saturating_sub(1);
            if *n == 0 {
                return Ok(Flow::Done);
            }
        }
        Ok(Flow::More)
    }

    fn record(&mut self, rec: &LogLine<'_>) -> Flow {
        if self.timestamps {
            let mut prefix = format_time(&rec.time);
            prefix.push(' ');
            if self.put(prefix.as_bytes()) == Flow::Done {
                return Flow::Done;
            }
        }
        if self.put(&rec.msg) == Flow::Done {
            return Flow::Done;
        }
        if rec.partial {
            Flow::More
        } else {
            self.put(b"\n")
        }
    }

    fn put(&mut self, data: &[u8]) -> Flow {
        let take = self.remaining.map_or(data.len(), |r| {
            data.len().min(usize::try_from(r).unwrap_or(usize::MAX))
        });
        if take > 0 && !self.out.write(&data[..take]) {
            return Flow::Done;
        }
        match &mut self.remaining {
            Some(r) => {
                *r -= take as u64;
                if *r == 0 { Flow::Done } else { Flow::More }
            }
            None => Flow::More,
        }
    }
}

/// What [`LineReader::next`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// A complete line, in [`LineReader::line`].
    Line,
    /// A complete line longer than [`MAX_LINE`], dropped.
    Overlong,
    /// The end of the input for now; an incomplete last line stays buffered.
    Eof,
}

/// Splits a byte stream into lines, keeping at most [`MAX_LINE`] bytes of one line.
struct LineReader<R> {
    inner: R,
    line: Vec<u8>,
    /// The line being read is over the limit: its bytes are skipped up to its newline.
    overlong: bool,
    /// `line` holds a complete line handed out by the last `next`.
    complete: bool,
    /// Position in the underlying file of everything consumed (incomplete line included).
    pos: u64,
}

impl<R: BufRead> LineReader<R> {
    fn new(inner: R, pos: u64) -> Self {
        Self {
            inner,
            line: Vec::new(),
            overlong: false,
            complete: false,
            pos,
        }
    }

    fn line(&self) -> &[u8] {
        &self.line
    }

    /// An incomplete last line is buffered (or was dropped for its length).
    fn has_partial(&self) -> bool {
        !self.complete && (!self.line.is_empty() || self.overlong)
    }

    fn next(&mut self) -> io::Result<Next> {
        if std::mem::take(&mut self.complete) {
            self.line.clear();
        }
        loop {
            let buf = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(Next::Eof);
            }
            let newline = memchr::memchr(b'\n', buf);
            let take = newline.unwrap_or(buf.len());
            if !self.overlong {
                if self.line.len() + take > MAX_LINE {
                    self.overlong = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(&buf[..take]);
                }
            }
            let used = take + usize::from(newline.is_some());
            self.inner.consume(used);
            self.pos += used as u64;
            if newline.is_some() {
                if std::mem::take(&mut self.overlong) {
                    return Ok(Next::Overlong);
                }
                self.complete = true;
                return Ok(Next::Line);
            }
        }
    }

    /// Forgets a buffered incomplete line (the file it came from was truncated or replaced).
    fn reset_partial(&mut self, pos: u64) {
        self.line.clear();
        self.overlong = false;
        self.complete = false;
        self.pos = pos;
    }
}

/// Feeds every complete line of `lines` to `em` until the input ends for now.
fn pump<R: BufRead>(
    lines: &mut LineReader<R>,
    em: &mut Emitter<'_>,
    path: &Path,
) -> Result<Flow, LogError> {
    loop {
        match lines.next().map_err(read_err(path))? {
            Next::Line => {
                if em.line(lines.line())? == Flow::Done {
                    return Ok(Flow::Done);
                }
            }
            Next::Overlong => debug!(path = %path.display(), "dropped an overlong log line"),
            Next::Eof => return Ok(Flow::More),
        }
    }
}

/// One file to read: a rotated one (plain or gzip) or the live one.
struct Source {
    path: PathBuf,
    file: File,
    gz: bool,
    live: bool,
    /// Length when opened (the end of a non-follow read of the live file).
    len: u64,
    ino: u64,
}

/// Opens a log file for reading: never through a symlink in its place (`O_NOFOLLOW`), never
/// blocking on a FIFO; anything but a regular file is refused.
fn open_log_file(path: &Path) -> io::Result<File> {
    match crate::nofollow::open_regular_at(rustix::fs::CWD, path)? {
        Some((fd, _)) => Ok(File::from(fd)),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        )),
    }
}

impl Source {
    fn open(path: &Path, live: bool) -> io::Result<Self> {
        let file = open_log_file(path)?;
        let meta = file.metadata()?;
        Ok(Self {
            gz: !live && path.extension().is_some_and(|e| e == "gz"),
            path: path.to_owned(),
            file,
            live,
            len: meta.len(),
            ino: meta.ino(),
        })
    }
}

/// The files of the log, oldest first: the rotated ones, then the live one if it exists.
fn open_sources(path: &Path) -> Result<Vec<Source>, LogError> {
    let live = match Source::open(path, true) {
        Ok(s) => Some(s),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if rotated_files(path).is_empty() {
                return Err(LogError::Open {
                    path: path.to_owned(),
                    source: e,
                });
            }
            None
        }
        Err(source) => {
            return Err(LogError::Open {
                path: path.to_owned(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for rotated in rotated_files(path) {
        // A file compressed since the listing is read from its `.gz`.
        let opened = Source::open(&rotated, false).or_else(|e| {
            if e.kind() != io::ErrorKind::NotFound || rotated.extension().is_some_and(|x| x == "gz")
            {
                return Err(e);
            }
            let mut gz = rotated.clone().into_os_string();
            gz.push(".gz");
            Source::open(Path::new(&gz), false)
        });
        match opened {
            // The live file rotated since it was opened: it is read once, as the live file.
            Ok(s) if live.as_ref().is_some_and(|l| l.ino == s.ino) => {}
            Ok(s) => out.push(s),
            Err(e) => debug!(path = %rotated.display(), error = %e, "skipping a rotated log"),
        }
    }
    out.extend(live);
    Ok(out)
}

/// Where reading starts in one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pos {
    /// At this byte offset (plain files).
    Offset(u64),
    /// After this many lines (gzip files, which cannot seek).
    Skip(u64),
}

/// Where reading starts: files before `index` are skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Start {
    index: usize,
    pos: Pos,
}

/// The result of scanning one file from its end for `k` lines.
enum Back {
    Found(Pos),
    /// The file holds fewer lines than wanted: this many.
    Short(u64),
}

/// Upstream's `FindTailLineStartIndex` across files: the start of the last `n` lines of the
/// log, scanning the newest files backwards in blocks of [`CHUNK`] bytes. A line is a
/// newline-terminated one; an incomplete last line of the live file does not count, one of a
/// rotated file (which is complete) does.
fn find_tail_start(sources: &mut [Source], n: u64) -> Result<Start, LogError> {
    let mut need = n;
    for i in (0..sources.len()).rev() {
        let src = &mut sources[i];
        if need == 0 && !src.live {
            return Ok(Start {
                index: i + 1,
                pos: Pos::Offset(0),
            });
        }
        let back = if src.gz {
            count_gz(src, need)
        } else {
            count_back(src, need)
        }
        .map_err(read_err(&src.path))?;
        match back {
            Back::Found(pos) => return Ok(Start { index: i, pos }),
            Back::Short(lines) => need = need.saturating_sub(lines),
        }
    }
    Ok(Start {
        index: 0,
        pos: Pos::Offset(0),
    })
}

fn count_back(src: &Source, k: u64) -> io::Result<Back> {
    let len = src.len;
    let mut last = [0u8];
    let unterminated = !src.live && len > 0 && {
        src.file.read_exact_at(&mut last, len - 1)?;
        last[0] != b'\n'
    };
    // The last k lines start after the (k+1)-th newline from the end, or after the k-th
    // when the last line has none.
    let want = (k + 1).saturating_sub(u64::from(unterminated));
    if want == 0 {
        return Ok(Back::Found(Pos::Offset(len)));
    }
    let mut seen = 0u64;
    let mut buf = vec![0u8; CHUNK];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(CHUNK as u64);
        let block = &mut buf[..usize::try_from(end - start).unwrap_or(CHUNK)];
        src.file.read_exact_at(block, start)?;
        for i in memchr::memrchr_iter(b'\n', block) {
            seen += 1;
            if seen == want {
                return Ok(Back::Found(Pos::Offset(start + i as u64 + 1)));
            }
        }
        end = start;
    }
    Ok(Back::Short(seen + u64::from(unterminated)))
}

/// Lines of a gzip file, counted by decoding it as a stream.
fn count_gz(src: &mut Source, k: u64) -> io::Result<Back> {
    src.file.seek(SeekFrom::Start(0))?;
    let mut dec = flate2::read::MultiGzDecoder::new(&src.file);
    let mut buf = vec![0u8; CHUNK];
    let (mut lines, mut last) = (0u64, b'\n');
    loop {
        let n = match dec.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
        last = buf[n - 1];
    }
    let total = lines + u64::from(last != b'\n');
    Ok(if total >= k {
        Back::Found(Pos::Skip(total - k))
    } else {
        Back::Short(total)
    })
}

/// Reads a rotated file from `pos` to its end.
fn read_rotated(src: &mut Source, pos: Pos, em: &mut Emitter<'_>) -> Result<Flow, LogError> {
    let path = src.path.clone();
    let err = read_err(&path);
    if src.gz {
        src.file.seek(SeekFrom::Start(0)).map_err(err)?;
        let dec = flate2::read::MultiGzDecoder::new(&src.file);
        let mut lines = LineReader::new(BufReader::with_capacity(CHUNK, dec), 0);
        if let Pos::Skip(mut skip) = pos {
            while skip > 0 {
                match lines.next().map_err(read_err(&path))? {
                    Next::Line | Next::Overlong => skip -= 1,
                    Next::Eof => break,
                }
            }
        }
        read_to_end(&mut lines, em, &path)
    } else {
        let off = match pos {
            Pos::Offset(o) => o,
            Pos::Skip(_) => 0,
        };
        src.file.seek(SeekFrom::Start(off)).map_err(err)?;
        let body = (&src.file).take(src.len.saturating_sub(off));
        let mut lines = LineReader::new(BufReader::with_capacity(CHUNK, body), off);
        read_to_end(&mut lines, em, &path)
    }
}

/// Every line of a complete file, its unterminated last line included.
fn read_to_end<R: BufRead>(
    lines: &mut LineReader<R>,
    em: &mut Emitter<'_>,
    path: &Path,
) -> Result<Flow, LogError> {
    if pump(lines, em, path)? == Flow::Done {
        return Ok(Flow::Done);
    }
    if lines.has_partial() && !lines.overlong {
        return em.line(lines.line());
    }
    Ok(Flow::More)
}

/// Reads the logs of the container whose live file is `path` into `out`, blocking. With
/// `follow`, keeps reading new lines (also across a rotation of `path`, without losing the old
/// file's last lines) until `running` reports the container stopped and nothing new arrived,
/// or `out` reports its consumer gone. `out` is flushed at the end.
pub fn read_logs_blocking(
    path: &Path,
    opts: &LogOptions,
    out: &mut dyn LogOutput,
    running: &mut dyn FnMut() -> bool,
) -> Result<(), LogError> {
    let mut sources = open_sources(path)?;
    let mut em = Emitter {
        out,
        since: opts.since,
        timestamps: opts.timestamps,
        remaining: opts.limit_bytes,
        lines_left: opts.tail.filter(|_| !opts.follow),
        format: None,
    };
    if opts.limit_bytes != Some(0) && em.lines_left != Some(0) {
        read_existing(path, opts, &mut sources, &mut em, running)?;
    }
    em.out.flush();
    Ok(())
}

/// The read proper: what the files hold now, then (with `follow`) what is appended.
fn read_existing(
    path: &Path,
    opts: &LogOptions,
    sources: &mut [Source],
    em: &mut Emitter<'_>,
    running: &mut dyn FnMut() -> bool,
) -> Result<Flow, LogError> {
    let start = match opts.tail {
        Some(n) => find_tail_start(sources, n as u64)?,
        None => Start {
            index: 0,
            pos: Pos::Offset(0),
        },
    };
    let mut live = None;
    for (i, src) in sources.iter_mut().enumerate().skip(start.index) {
        let pos = if i == start.index {
            start.pos
        } else {
            Pos::Offset(0)
        };
        let off = match pos {
            Pos::Offset(o) => o,
            Pos::Skip(_) => 0,
        };
        if !src.live {
            if read_rotated(src, pos, em)? == Flow::Done {
                return Ok(Flow::Done);
            }
            continue;
        }
        let path = src.path.clone();
        let file = src.file.try_clone().map_err(read_err(&path))?;
        if opts.follow {
            let mut l = LiveFile::at(file, src.ino, off).map_err(read_err(&path))?;
            if pump(&mut l.lines, em, &path)? == Flow::Done {
                return Ok(Flow::Done);
            }
            live = Some(l);
        } else {
            // Up to the length seen when opened; a half-written last line is not a record yet.
            let mut file = file;
            file.seek(SeekFrom::Start(off)).map_err(read_err(&path))?;
            let body = file.take(src.len.saturating_sub(off));
            let mut lines = LineReader::new(BufReader::with_capacity(CHUNK, body), off);
            if pump(&mut lines, em, &path)? == Flow::Done {
                return Ok(Flow::Done);
            }
        }
    }
    if !opts.follow {
        return Ok(Flow::More);
    }
    follow(path, live, em, running)
}

/// The followed live file: a reader on an open handle and the file's inode.
struct LiveFile {
    lines: LineReader<BufReader<File>>,
    ino: u64,
}

impl LiveFile {
    fn at(mut file: File, ino: u64, offset: u64) -> io::Result<Self> {
        file.seek(SeekFrom::Start(offset))?;
        Ok(Self {
            lines: LineReader::new(BufReader::with_capacity(CHUNK, file), offset),
            ino,
        })
    }

    /// `path` from its start, or `None` when it does not exist (yet).
    fn open(path: &Path) -> Result<Option<Self>, LogError> {
        let file = match open_log_file(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(LogError::Open {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let ino = file.metadata().map_err(read_err(path))?.ino();
        Self::at(file, ino, 0).map(Some).map_err(read_err(path))
    }

    /// Reads again from the start (the file was truncated in place: copytruncate).
    fn rewind(&mut self) -> io::Result<()> {
        self.lines.inner.seek(SeekFrom::Start(0))?;
        self.lines.reset_partial(0);
        Ok(())
    }
}

/// Streams the lines appended to the live file, woken by inotify events on its directory (the
/// [`FOLLOW_CHECK`] timeout is the fallback and the cadence of the "still running?" check). The
/// open handle is kept, so when `path` names a new file (rotation), the rest of the old one is
/// read before switching.
fn follow(
    path: &Path,
    mut live: Option<LiveFile>,
    em: &mut Emitter<'_>,
    running: &mut dyn FnMut() -> bool,
) -> Result<Flow, LogError> {
    let mut waiter = Waiter::new(path);
    let mut first_wait = true;
    loop {
        let before = live.as_ref().map(|l| l.lines.pos);
        if let Some(l) = &mut live
            && pump(&mut l.lines, em, path)? == Flow::Done
        {
            return Ok(Flow::Done);
        }
        // Stat the path only after reading: when it names a new file, the runtime has reopened
        // its log, so nothing more is written to the old one once it is drained below.
        match std::fs::metadata(path) {
            Ok(m) if live.as_ref().is_none_or(|l| l.ino != m.ino()) => {
                if let Some(l) = &mut live
                    && pump(&mut l.lines, em, path)? == Flow::Done
                {
                    return Ok(Flow::Done);
                }
                live = LiveFile::open(path)?;
                continue;
            }
            Ok(m) => {
                if let Some(l) = &mut live
                    && m.len() < l.lines.pos
                {
                    l.rewind().map_err(read_err(path))?;
                    continue;
                }
            }
            Err(_) => {}
        }
        if live.as_ref().map(|l| l.lines.pos) != before {
            continue;
        }
        if !em.out.flush() {
            return Ok(Flow::Done);
        }
        // Asked once before the first wait too, so following a stopped container ends at once.
        let woken = !std::mem::take(&mut first_wait) && waiter.wait(FOLLOW_CHECK);
        if !woken && !running() {
            // The container is gone: one last read for what it wrote before it stopped.
            if let Some(l) = &mut live {
                return pump(&mut l.lines, em, path);
            }
            return Ok(Flow::More);
        }
    }
}

/// Waits for inotify events of the live file's directory (writes, creations, renames), or
/// sleeps [`FOLLOW_POLL`] when inotify is unavailable.
struct Waiter {
    inotify: Option<inotify::Inotify>,
    buf: Vec<u8>,
}

impl Waiter {
    fn new(path: &Path) -> Self {
        use inotify::{Inotify, WatchMask};
        let inotify = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .and_then(|dir| {
                let ino = Inotify::init().ok()?;
                ino.watches()
                    .add(
                        dir,
                        WatchMask::MODIFY
                            | WatchMask::CREATE
                            | WatchMask::MOVED_TO
                            | WatchMask::MOVED_FROM,
                    )
                    .ok()?;
                Some(ino)
            });
        Self {
            inotify,
            buf: vec![0; 4096],
        }
    }

    /// `true` when something happened in the directory before `timeout`.
    fn wait(&mut self, timeout: Duration) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let Some(ino) = &mut self.inotify else {
            std::thread::sleep(FOLLOW_POLL);
            return false;
        };
        let ts = Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let ready = {
            let mut fds = [PollFd::new(&*ino, PollFlags::IN)];
            // An interrupted wait counts as a wake-up: the caller just reads again.
            poll(&mut fds, Some(&ts)).map_or(true, |n| n > 0)
        };
        if ready {
            while let Ok(events) = ino.read_events(&mut self.buf) {
                if events.count() == 0 {
                    break;
                }
            }
        }
        ready
    }
}

/// An item of [`spawn_reader`]'s channel: log text, or the error that ended the read.
pub type LogChunk = Result<Bytes, LogError>;

/// The [`LogOutput`] of [`spawn_reader`]: chunks of up to [`CHUNK`] bytes into a bounded
/// channel (the reader blocks while the consumer lags).
struct ChannelOutput {
    tx: mpsc::Sender<LogChunk>,
    buf: Vec<u8>,
    /// Something (maybe an empty marker) was sent: the consumer knows the read started.
    started: bool,
    cancel: CancellationToken,
}

impl ChannelOutput {
    fn send(&mut self) -> bool {
        if self.cancel.is_cancelled() {
            return false;
        }
        self.started = true;
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx.blocking_send(Ok(Bytes::from(chunk))).is_ok()
    }
}

impl LogOutput for ChannelOutput {
    fn write(&mut self, data: &[u8]) -> bool {
        self.buf.extend_from_slice(data);
        self.buf.len() < CHUNK || self.send()
    }

    /// Also sends an empty chunk if nothing was sent yet, so a consumer waiting for the first
    /// item (to choose the response status) goes on while a follower waits for new lines.
    fn flush(&mut self) -> bool {
        if !self.buf.is_empty() || !self.started {
            return self.send();
        }
        !self.tx.is_closed() && !self.cancel.is_cancelled()
    }
}

/// Starts [`read_logs_blocking`] on a thread of its own; the text arrives in chunks on the
/// returned bounded channel, and an error, if one ends the read, as the last item. The first
/// item comes once the files are open and the first line parsed (an error there comes before any
/// text), or, for a follower, once it waits for new lines. The read stops when the receiver is
/// dropped or `cancel` fires; `running` (called on the reader thread while a follower is idle)
/// tells whether the container still runs.
pub fn spawn_reader(
    path: PathBuf,
    opts: LogOptions,
    mut running: Box<dyn FnMut() -> bool + Send>,
    cancel: CancellationToken,
) -> Result<mpsc::Receiver<LogChunk>, LogError> {
    let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
    std::thread::Builder::new()
        .name("container-log".into())
        .spawn(move || {
            let mut out = ChannelOutput {
                tx,
                buf: Vec::with_capacity(CHUNK),
                started: false,
                cancel,
            };
            if let Err(e) = read_logs_blocking(&path, &opts, &mut out, &mut *running) {
                if !out.buf.is_empty() {
                    out.send();
                }
                // A consumer that is gone needs no error.
                let _ = out.tx.blocking_send(Err(e));
            }
        })
        .map_err(LogError::Spawn)?;
    Ok(rx)
}

#[cfg(test)]
#[path = "logs_tests.rs"]
mod tests;
