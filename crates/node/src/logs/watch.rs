//! inotify watch on the container log directories (`<podLogsDir>/<ns>_<name>_<uid>/<container>/`).
//! Owns the inotify instance and its watch descriptors. Receives directories to watch (the
//! manager adds each running container's directory; with `podLogsDir` known, new pod and
//! container directories are picked up as they are created). Emits batches of paths whose
//! files were written, created or renamed into place, deduplicated per batch, or that the
//! queue overflowed (everything may have changed) or the watch was lost.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use futures::StreamExt;
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask};
use tracing::debug;

/// Events of one read, as the manager sees them.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Batch {
    /// Files written, created or renamed into a watched directory.
    Files(BTreeSet<PathBuf>),
    /// The kernel dropped events: check everything.
    Overflow,
    /// The inotify instance failed; the manager falls back to the timer and retries.
    Lost,
}

pub(super) struct DirWatcher {
    stream: EventStream<Vec<u8>>,
    /// Watched directory, and its depth below `podLogsDir` (0 = the root; 2 = a container
    /// directory; `None` for directories added by path).
    dirs: HashMap<WatchDescriptor, (PathBuf, Option<usize>)>,
    watched: HashMap<PathBuf, WatchDescriptor>,
}

/// The most events in one batch.
const MAX_BATCH: usize = 64;

/// The directory depth below `podLogsDir` at which log files live.
const CONTAINER_DEPTH: usize = 2;

impl DirWatcher {
    /// A watcher; with `root` (`podLogsDir`), that directory and the pod and container
    /// directories already under it are watched.
    pub fn new(root: Option<&Path>) -> std::io::Result<Self> {
        let inotify = Inotify::init()?;
        let stream = inotify.into_event_stream(vec![0u8; 64 * 1024])?;
        let mut w = Self {
            stream,
            dirs: HashMap::new(),
            watched: HashMap::new(),
        };
        if let Some(root) = root {
            w.add_tree(root, 0);
        }
        Ok(w)
    }

    /// Watches `dir` and, below `podLogsDir`, the directories under it down to the container
    /// level.
    fn add_tree(&mut self, dir: &Path, depth: usize) {
        if !self.add(dir, Some(depth)) || depth >= CONTAINER_DEPTH {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                self.add_tree(&e.path(), depth + 1);
            }
        }
    }

    /// Watches a container's log directory.
    pub fn add_dir(&mut self, dir: &Path) {
        if !self.watched.contains_key(dir) {
            self.add(dir, None);
        }
    }

    fn add(&mut self, dir: &Path, depth: Option<usize>) -> bool {
        if self.watched.contains_key(dir) {
            return true;
        }
        let mask = WatchMask::MODIFY
            | WatchMask::CREATE
            | WatchMask::MOVED_TO
            | WatchMask::DELETE_SELF
            | WatchMask::ONLYDIR;
        match self.stream.watches().add(dir, mask) {
            Ok(wd) => {
                // The same directory under another name (a symlink in `podLogsDir`) gives the
                // descriptor already known: the runtime's spelling (added by path, no depth)
                // wins, since the manager looks live files up by the runtime's log path.
                let entry = self
                    .dirs
                    .entry(wd.clone())
                    .or_insert((dir.to_owned(), depth));
                if depth.is_none() {
                    entry.0 = dir.to_owned();
                }
                self.watched.insert(dir.to_owned(), wd);
                true
            }
            Err(e) => {
                debug!(dir = %dir.display(), error = %e, "cannot watch log directory");
                false
            }
        }
    }

    /// The next batch: waits for one event, then takes every event already read.
    pub async fn next(&mut self) -> Batch {
        let mut files = BTreeSet::new();
        let mut overflow = false;
        let first = match self.stream.next().await {
            Some(Ok(ev)) => ev,
            _ => return Batch::Lost,
        };
        let mut pending = Some(first);
        // A busy writer never lets the queue run dry: a batch ends after this many events so
        // that its wake-ups go out at once.
        let mut budget = MAX_BATCH;
        while let Some(ev) = pending.take() {
            budget -= 1;
            if ev.mask.contains(EventMask::Q_OVERFLOW) {
                overflow = true;
            } else if ev.mask.contains(EventMask::IGNORED) {
                if let Some((dir, _)) = self.dirs.remove(&ev.wd) {
                    self.watched.remove(&dir);
                }
            } else if let (Some((dir, depth)), Some(name)) = (self.dirs.get(&ev.wd), &ev.name) {
                let (path, depth) = (dir.join(name), *depth);
                match depth {
                    Some(d) if ev.mask.contains(EventMask::ISDIR) => {
                        if d < CONTAINER_DEPTH {
                            self.add_tree(&path, d + 1);
                        }
                    }
                    _ => {
                        files.insert(path);
                    }
                }
            }
            // Events already buffered are taken without waiting.
            if budget > 0
                && let Some(Some(Ok(ev))) = futures::FutureExt::now_or_never(self.stream.next())
            {
                pending = Some(ev);
            }
        }
        if overflow {
            Batch::Overflow
        } else {
            Batch::Files(files)
        }
    }
}

/// The next batch of an optional watcher; never ready without one.
pub(super) async fn next_opt(w: &mut Option<DirWatcher>) -> Batch {
    match w {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    async fn batch(w: &mut DirWatcher) -> Batch {
        tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .expect("an inotify event within 5 s")
    }

    #[tokio::test]
    async fn writes_in_new_pod_and_container_dirs_are_seen() {
        let root = tempfile::tempdir().unwrap();
        let mut w = DirWatcher::new(Some(root.path())).unwrap();
        // A pod directory, then its container directory, created after the watch started.
        let pod = root.path().join("ns_p_uid");
        std::fs::create_dir(&pod).unwrap();
        assert_eq!(batch(&mut w).await, Batch::Files(BTreeSet::new()));
        let c = pod.join("c");
        std::fs::create_dir(&c).unwrap();
        assert_eq!(batch(&mut w).await, Batch::Files(BTreeSet::new()));
        let log = c.join("0.log");
        let mut f = std::fs::File::create(&log).unwrap();
        // Many writes: batches name only the one file.
        for _ in 0..100 {
            f.write_all(b"line\n").unwrap();
        }
        let mut seen = BTreeSet::new();
        while seen.is_empty() {
            match batch(&mut w).await {
                Batch::Files(files) => seen.extend(files),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, BTreeSet::from([log]));
        // Deeper directories are not watched (not log directories).
        let deep = c.join("deeper");
        std::fs::create_dir(&deep).unwrap();
        std::fs::write(deep.join("x.log"), "x").unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
        while let Ok(b) = tokio::time::timeout_at(deadline, w.next()).await {
            if let Batch::Files(files) = b {
                assert!(!files.contains(&deep.join("x.log")), "{files:?}");
            }
        }
    }
}
