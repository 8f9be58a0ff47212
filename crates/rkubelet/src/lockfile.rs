//! `--lock-file` and `--exit-on-lock-contention`, as upstream's `flock.Acquire` and
//! `watchForLockfileContention`: the kubelet opens (creating, mode 0600) the lock file and takes
//! an exclusive `flock`, waiting while another process holds it; with
//! `--exit-on-lock-contention` it then watches the file with inotify and stops as soon as
//! another process opens it (a second kubelet about to wait for the lock) or it is deleted
//! (`IN_DELETE_SELF`, which the kernel reports once no descriptor holds it open).
//! Owns: the lock file descriptor (held until the process exits) and the inotify watch.
//! Receives the paths from the command line; emits [`Contention`], which `main` selects on
//! beside SIGTERM to shut down cleanly (pods keep running, as on SIGTERM).

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use inotify::{EventMask, EventStream, Inotify, WatchMask};
use tokio_stream::StreamExt;

/// What can go wrong taking or watching the lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("unable to acquire file lock on {path:?}: {source}")]
    Acquire {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("unable to watch lockfile {path:?}: {source}")]
    Watch {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The held lock; dropping it releases the lock (the process exiting does the same).
#[derive(Debug)]
pub struct Lock {
    _file: File,
    contention: Option<EventStream<Vec<u8>>>,
}

impl Lock {
    /// Opens `path` (creating it 0600) and waits for an exclusive `flock` on it; with `watch`,
    /// starts watching it for other openers once the lock is held.
    pub async fn acquire(path: &Path, watch: bool) -> Result<Lock, LockError> {
        let owned = path.to_owned();
        let file = tokio::task::spawn_blocking(move || lock_blocking(&owned))
            .await
            .map_err(|e| LockError::Acquire {
                path: path.to_owned(),
                source: io::Error::other(e),
            })??;
        // Our own open came before the watch, so only later openers are seen.
        let contention = if watch { Some(watch_file(path)?) } else { None };
        Ok(Lock {
            _file: file,
            contention,
        })
    }

    /// Resolves when another process opens or deletes the lock file, with what happened;
    /// never resolves without `--exit-on-lock-contention`.
    pub async fn contended(&mut self) -> String {
        let Some(events) = &mut self.contention else {
            return std::future::pending().await;
        };
        match events.next().await {
            Some(Ok(ev)) => describe(ev.mask),
            Some(Err(e)) => format!("inotify watcher error: {e}"),
            None => "inotify watcher closed".to_owned(),
        }
    }
}

/// Upstream `flock.Acquire`: open read-write (created 0600, close-on-exec) and `flock(LOCK_EX)`,
/// blocking while another process holds it.
fn lock_blocking(path: &Path) -> Result<File, LockError> {
    let err = |source| LockError::Acquire {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    file.lock().map_err(err)?;
    Ok(file)
}

/// An inotify watch for `IN_OPEN | IN_DELETE_SELF` on the lock file.
fn watch_file(path: &Path) -> Result<EventStream<Vec<u8>>, LockError> {
    let err = |source| LockError::Watch {
        path: path.to_owned(),
        source,
    };
    let inotify = Inotify::init().map_err(err)?;
    inotify
        .watches()
        .add(path, WatchMask::OPEN | WatchMask::DELETE_SELF)
        .map_err(err)?;
    inotify.into_event_stream(vec![0u8; 4096]).map_err(err)
}

fn describe(mask: EventMask) -> String {
    if mask.contains(EventMask::DELETE_SELF) {
        "the lock file was deleted".to_owned()
    } else if mask.contains(EventMask::OPEN) {
        "another process opened the lock file".to_owned()
    } else {
        format!("inotify event {mask:?} on the lock file")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_second_holder_waits_and_an_opener_stops_a_watching_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet.lock");
        let mut first = Lock::acquire(&path, true).await.unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);

        // A second "kubelet" blocks on the lock; its open wakes the first one.
        let second_path = path.clone();
        let second = tokio::spawn(async move { Lock::acquire(&second_path, false).await });
        let why = tokio::time::timeout(Duration::from_secs(10), first.contended())
            .await
            .expect("the holder sees the contention");
        assert_eq!(why, "another process opened the lock file");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!second.is_finished(), "the lock is still held");
        // The first exits (drops its lock): the second gets it.
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("the second takes the lock once released")
            .unwrap()
            .unwrap();
        drop(second);
    }

    /// Two processes: util-linux `flock(1)` (the same `flock(2)` a second kubelet takes) waits
    /// while we hold the lock, its open stops us, and it gets the lock once we let go.
    #[tokio::test]
    async fn another_process_waits_for_the_lock_and_its_open_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet.lock");
        let mut held = Lock::acquire(&path, true).await.unwrap();
        let mut other = tokio::process::Command::new("flock")
            .arg("--exclusive")
            .arg(&path)
            .arg("true")
            .spawn()
            .expect("util-linux flock(1)");
        let why = tokio::time::timeout(Duration::from_secs(10), held.contended())
            .await
            .expect("the other process's open is seen");
        assert_eq!(why, "another process opened the lock file");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            other.try_wait().unwrap().is_none(),
            "flock(1) waits while the lock is held"
        );
        drop(held);
        let status = tokio::time::timeout(Duration::from_secs(10), other.wait())
            .await
            .expect("flock(1) gets the lock once released")
            .unwrap();
        assert!(status.success());
    }

    #[tokio::test]
    async fn without_the_exit_flag_contention_is_not_watched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet.lock");
        let mut quiet = Lock::acquire(&path, false).await.unwrap();
        let _reader = File::open(&path).unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(200), quiet.contended())
                .await
                .is_err(),
            "no watch without --exit-on-lock-contention"
        );
    }

    #[tokio::test]
    async fn an_unopenable_path_is_named() {
        let err = Lock::acquire(Path::new("/nonexistent-dir/x/kubelet.lock"), false)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("unable to acquire file lock on \"/nonexistent-dir/x/kubelet.lock\""),
            "{err}"
        );
    }
}
