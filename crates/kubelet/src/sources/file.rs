//! The `staticPodPath` source (upstream `file.go`/`file_linux.go`): owns the watch on a
//! manifest directory (non-recursive, dotfiles ignored) or a single manifest file. Receives
//! inotify events (debounced) and a `fileCheckFrequency` tick; on each, re-reads every manifest
//! and emits the full current set as `PodUpdate { op: Set, source: File }` when it changed (and
//! always once at start). A bad file is logged, recorded in `errors()`, and skipped without
//! disturbing the pods of other files. As upstream, a file that turns bad on an inotify event
//! keeps its previous pods until the next periodic re-list, so a half-written manifest never
//! kills its pod. Each manifest's pods are kept with the bytes they were decoded from, so a
//! periodic re-read of unchanged files costs the reads and a comparison, not a decode.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use inotify::{EventMask, EventStream, Inotify, WatchMask};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::decode::MAX_MANIFEST_BYTES;
use super::static_pod::{ManifestError, ManifestOrigin, static_pods_from_manifest};
use crate::types::{PodOp, PodSource, PodUpdate};

/// How long to wait after a filesystem event before re-reading, to coalesce bursts of events
/// (an editor's write + rename, `cp` of several files).
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(20);

/// Why one manifest file (or the path itself) could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileSourceError {
    #[error("path does not exist, ignoring")]
    PathMissing,
    #[error("path is not a directory or file")]
    NotDirOrFile,
    #[error("provided manifest path is a directory, not recursing into manifest path")]
    NestedDirectory,
    #[error("reading: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

/// The static pods of one manifest, in document order, shared by the reader's cache and every
/// update sent from them.
pub type ManifestPods = Arc<[Arc<Pod>]>;

/// The pods of each valid manifest, by file.
pub type ManifestFiles = BTreeMap<PathBuf, ManifestPods>;

/// The outcome of reading `staticPodPath` once.
#[derive(Debug, Default)]
pub struct ManifestSnapshot {
    /// The static pods of every valid manifest, by file (documents in file order). A file
    /// whose bytes are the ones of the last read shares that read's pods.
    pub files: ManifestFiles,
    /// The problem with each manifest that was skipped (the path itself when it is missing).
    pub errors: BTreeMap<PathBuf, String>,
    /// The files among `errors` that exist but whose content was rejected (parse/validation).
    pub invalid: BTreeSet<PathBuf>,
    /// How many files were decoded by this read (the others were unchanged).
    pub decoded: usize,
}

/// Reads `path` (a directory of manifests or one manifest file) synchronously, decoding every
/// manifest.
pub fn read_manifests(path: &Path, node_name: &str) -> ManifestSnapshot {
    ManifestReader::new(node_name).read(path)
}

/// Reads `staticPodPath` again and again, decoding only the manifests whose bytes changed.
///
/// A static pod is a pure function of the manifest's bytes, the node name and the file's path
/// (its UID hashes all three), so pods decoded from the same bytes at the same path are the
/// pods a fresh decode would give. The bytes are compared in full, never a size or a time: an
/// edit that keeps both is still seen. Only valid manifests are kept; a bad one is decoded
/// (and its error reported) at every read, as before.
#[derive(Debug)]
pub struct ManifestReader {
    node_name: String,
    decoded: HashMap<PathBuf, DecodedManifest>,
}

#[derive(Debug)]
struct DecodedManifest {
    data: Vec<u8>,
    pods: ManifestPods,
}

impl ManifestReader {
    pub fn new(node_name: impl Into<String>) -> Self {
        ManifestReader {
            node_name: node_name.into(),
            decoded: HashMap::new(),
        }
    }

    /// Reads `path` (a directory of manifests or one manifest file) synchronously.
    pub fn read(&mut self, path: &Path) -> ManifestSnapshot {
        let mut snap = ManifestSnapshot::default();
        let files = match manifest_files(path) {
            Ok(files) => files,
            Err(e) => {
                snap.errors.insert(path.to_path_buf(), e.to_string());
                self.decoded.clear();
                return snap;
            }
        };
        for file in files {
            match self.read_file(&file, &mut snap.decoded) {
                Ok(pods) => {
                    snap.files.insert(file, pods);
                }
                // A file that vanished between listing and reading is simply gone.
                Err(FileSourceError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    if matches!(e, FileSourceError::Manifest(_)) {
                        snap.invalid.insert(file.clone());
                    }
                    snap.errors.insert(file, e.to_string());
                }
            }
        }
        // Only what this read found valid is kept for the next one.
        self.decoded.retain(|file, _| snap.files.contains_key(file));
        snap
    }

    fn read_file(
        &mut self,
        file: &Path,
        decoded: &mut usize,
    ) -> Result<ManifestPods, FileSourceError> {
        let data = read_manifest_file(file)?;
        if let Some(known) = self.decoded.get(file)
            && known.data == data
        {
            return Ok(known.pods.clone());
        }
        *decoded += 1;
        let pods: ManifestPods =
            static_pods_from_manifest(&data, &self.node_name, &ManifestOrigin::File(file), false)?
                .into_iter()
                .map(Arc::new)
                .collect();
        let entry = DecodedManifest {
            data,
            pods: pods.clone(),
        };
        self.decoded.insert(file.to_path_buf(), entry);
        Ok(pods)
    }
}

/// The manifest files `path` stands for: a directory's entries, or the file itself.
fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, FileSourceError> {
    let meta = std::fs::metadata(path).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            FileSourceError::PathMissing
        } else {
            FileSourceError::Io(e)
        }
    })?;
    if meta.is_dir() {
        Ok(list_dir(path)?)
    } else if meta.is_file() {
        Ok(vec![path.to_path_buf()])
    } else {
        Err(FileSourceError::NotDirOrFile)
    }
}

/// The directory's non-hidden entries, sorted by name.
fn list_dir(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    files.sort();
    Ok(files)
}

/// One manifest file's bytes, refused before reading when it is not a regular file or is
/// over the size limit.
fn read_manifest_file(file: &Path) -> Result<Vec<u8>, FileSourceError> {
    use std::os::unix::fs::OpenOptionsExt;
    // The checks are made on the file that was opened, not on the name (which may be replaced
    // in between); without blocking, so a FIFO put there is refused instead of waited on.
    let mut handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file)
        .map_err(|e| match e.raw_os_error() {
            // A unix socket cannot be opened at all.
            Some(libc::ENXIO) => FileSourceError::NotDirOrFile,
            _ => FileSourceError::Io(e),
        })?;
    let meta = handle.metadata()?;
    if meta.is_dir() {
        return Err(FileSourceError::NestedDirectory);
    }
    if !meta.is_file() {
        return Err(FileSourceError::NotDirOrFile);
    }
    if meta.len() > MAX_MANIFEST_BYTES as u64 {
        return Err(ManifestError::TooLarge(MAX_MANIFEST_BYTES).into());
    }
    // The limit holds for what is read, too: the file may grow after the look at its size.
    let mut data = Vec::with_capacity(meta.len() as usize);
    (&mut handle)
        .take(MAX_MANIFEST_BYTES as u64 + 1)
        .read_to_end(&mut data)?;
    if data.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge(MAX_MANIFEST_BYTES).into());
    }
    Ok(data)
}

/// Watches `staticPodPath` and emits its static pods.
pub struct FileSource {
    path: PathBuf,
    node_name: String,
    period: Duration,
    debounce: Duration,
    use_inotify: bool,
    errors: watch::Sender<BTreeMap<PathBuf, String>>,
}

impl FileSource {
    /// `path` is `staticPodPath`, `period` is `fileCheckFrequency` (upstream default 20s).
    pub fn new(path: impl Into<PathBuf>, node_name: impl Into<String>, period: Duration) -> Self {
        let path: PathBuf = path.into();
        // Upstream trims trailing separators; `Path` already ignores them except for "/".
        let path = path.components().collect::<PathBuf>();
        FileSource {
            path,
            node_name: node_name.into(),
            period,
            debounce: DEFAULT_DEBOUNCE,
            use_inotify: true,
            errors: watch::channel(BTreeMap::new()).0,
        }
    }

    /// Overrides the event debounce (tests).
    pub fn with_debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// Turns the inotify watch off, leaving only the periodic re-read (tests, odd filesystems).
    pub fn with_inotify(mut self, enabled: bool) -> Self {
        self.use_inotify = enabled;
        self
    }

    /// The current problems, per manifest file (or the path itself), as of the last read.
    pub fn errors(&self) -> watch::Receiver<BTreeMap<PathBuf, String>> {
        self.errors.subscribe()
    }

    /// Runs until `cancel`: reads at once, then on every debounced inotify event and every
    /// `period`. Returns early when `tx` is closed.
    pub async fn run(self, tx: mpsc::Sender<PodUpdate>, cancel: CancellationToken) {
        tracing::info!(path = %self.path.display(), "watching static pod path");
        let mut ticker = tokio::time::interval(self.period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut watcher: Option<Watcher> = None;
        let mut watch_error: Option<String> = None;
        let mut deadline: Option<Instant> = None;
        let mut reader = ManifestReader::new(&self.node_name);
        // What was sent last, as the readers' shared pods (no copy of them is kept here).
        let mut sent_once = false;
        let mut last_files: ManifestFiles = BTreeMap::new();
        loop {
            let (reread, periodic) = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {
                    if watcher.is_none() && self.use_inotify {
                        watcher = self.start_watch(&mut watch_error);
                    }
                    (true, true)
                }
                outcome = next_event(&mut watcher) => {
                    if outcome == WatchOutcome::Lost {
                        watcher = None;
                    }
                    if outcome != WatchOutcome::Ignored {
                        deadline.get_or_insert_with(|| Instant::now() + self.debounce);
                    }
                    (false, false)
                }
                _ = sleep_until_opt(deadline) => (true, false),
            };
            if !reread {
                continue;
            }
            deadline = None;
            let Some(snap) = self.read_and_record(&mut reader).await else {
                continue;
            };
            let mut files = snap.files;
            if !periodic {
                for bad in &snap.invalid {
                    if let Some(previous) = last_files.get(bad) {
                        files.insert(bad.clone(), previous.clone());
                    }
                }
            }
            // Every file answered with the pods it had: the set is the one already sent.
            if sent_once && same_manifests(&files, &last_files) {
                continue;
            }
            // New bytes that decode to the very pods already sent (an edit of a comment).
            if sent_once && flatten(&files).eq(flatten(&last_files)) {
                last_files = files;
                continue;
            }
            if crate::metrics::timeline::enabled() {
                mark_new_pods(sent_once.then_some(&last_files), &files);
            }
            let update = PodUpdate {
                op: PodOp::Set,
                source: PodSource::File,
                pods: flatten(&files).cloned().collect(),
            };
            last_files = files;
            tokio::select! {
                _ = cancel.cancelled() => return,
                sent = tx.send(update) => if sent.is_err() { return },
            }
            sent_once = true;
        }
    }

    /// Reads the path off the runtime threads, records and logs the errors.
    /// `reader` goes to the blocking thread and comes back with what it decoded.
    async fn read_and_record(&self, reader: &mut ManifestReader) -> Option<ManifestSnapshot> {
        let path = self.path.clone();
        let mut lent = std::mem::replace(reader, ManifestReader::new(&self.node_name));
        let read = tokio::task::spawn_blocking(move || {
            let snap = lent.read(&path);
            (lent, snap)
        });
        let snap = match read.await {
            Ok((back, snap)) => {
                *reader = back;
                snap
            }
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "reading static pod path failed");
                return None;
            }
        };
        let previous = self.errors.borrow().clone();
        for (file, err) in &snap.errors {
            if previous.get(file) == Some(err) {
                tracing::debug!(path = %file.display(), "static pod manifest {}: {err}", file.display());
            } else if file == &self.path && err == &FileSourceError::PathMissing.to_string() {
                tracing::info!(path = %file.display(), "static pod path {}: {err}", file.display());
            } else {
                tracing::error!(path = %file.display(), "static pod manifest {}: {err}", file.display());
            }
        }
        self.errors.send_replace(snap.errors.clone());
        Some(snap)
    }

    fn start_watch(&self, last_error: &mut Option<String>) -> Option<Watcher> {
        match Watcher::start(&self.path) {
            Ok(w) => {
                *last_error = None;
                Some(w)
            }
            Err(e) => {
                let msg = e.to_string();
                if last_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(path = %self.path.display(), error = %msg,
                        "cannot watch static pod path with inotify; relying on periodic re-reads");
                }
                *last_error = Some(msg);
                None
            }
        }
    }
}

/// The same files, each holding the very pods it held before (not a copy: a decode of equal
/// bytes is not needed to know they are equal).
fn same_manifests(files: &ManifestFiles, before: &ManifestFiles) -> bool {
    files.len() == before.len()
        && files
            .iter()
            .zip(before)
            .all(|((f, p), (bf, bp))| f == bf && Arc::ptr_eq(p, bp))
}

/// The pods of every file, in path order (the order they are sent in).
fn flatten(files: &ManifestFiles) -> impl Iterator<Item = &Arc<Pod>> {
    files.values().flat_map(|p| p.iter())
}

/// Timeline: the pods of this set that the previous set did not hold.
fn mark_new_pods(previous: Option<&ManifestFiles>, files: &ManifestFiles) {
    use crate::types::PodExt;
    let known: std::collections::HashSet<&str> = previous
        .into_iter()
        .flat_map(flatten)
        .map(|p| p.uid())
        .collect();
    for pod in flatten(files).filter(|p| !known.contains(p.uid())) {
        crate::metrics::timeline::mark_seen(pod.uid(), &pod.full_name());
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchOutcome {
    /// A manifest may have changed.
    Changed,
    /// Hidden file or another file than the watched one.
    Ignored,
    /// The watch is gone (path removed or moved, stream error): re-read and re-watch later.
    Lost,
}

struct Watcher {
    stream: EventStream<[u8; 4096]>,
    /// In single-file mode, the file's name inside the watched parent directory.
    only: Option<OsString>,
}

impl Watcher {
    fn start(path: &Path) -> io::Result<Watcher> {
        let meta = std::fs::metadata(path)?;
        // A single file is watched through its directory so editors' rename-over still works.
        let (dir, only) = if meta.is_dir() {
            (path.to_path_buf(), None)
        } else {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            (dir.to_path_buf(), path.file_name().map(OsString::from))
        };
        let inotify = Inotify::init()?;
        inotify.watches().add(
            &dir,
            WatchMask::CREATE
                | WatchMask::MODIFY
                | WatchMask::CLOSE_WRITE
                | WatchMask::ATTRIB
                | WatchMask::MOVED_FROM
                | WatchMask::MOVED_TO
                | WatchMask::DELETE
                | WatchMask::DELETE_SELF
                | WatchMask::MOVE_SELF,
        )?;
        Ok(Watcher {
            stream: inotify.into_event_stream([0u8; 4096])?,
            only,
        })
    }

    fn classify(&self, mask: EventMask, name: Option<&OsString>) -> WatchOutcome {
        if mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED) {
            return WatchOutcome::Lost;
        }
        if mask.contains(EventMask::Q_OVERFLOW) {
            return WatchOutcome::Changed;
        }
        let Some(name) = name else {
            return WatchOutcome::Ignored;
        };
        if name.to_string_lossy().starts_with('.') {
            return WatchOutcome::Ignored;
        }
        match &self.only {
            Some(only) if only != name => WatchOutcome::Ignored,
            _ => WatchOutcome::Changed,
        }
    }
}

async fn next_event(watcher: &mut Option<Watcher>) -> WatchOutcome {
    let Some(w) = watcher.as_mut() else {
        return std::future::pending().await;
    };
    match w.stream.next().await {
        Some(Ok(ev)) => w.classify(ev.mask, ev.name.as_ref()),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "inotify watch on static pod path failed");
            WatchOutcome::Lost
        }
        None => WatchOutcome::Lost,
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
