//! `rm -rf --one-file-system` for the kubelet's volume and pod directories (upstream
//! `RemoveAllOneFilesystem`, stricter). Receives a directory the kubelet
//! owns (by path, or as an entry name relative to an open directory fd) and removes it with
//! everything under it, walking by fd (`openat(O_NOFOLLOW|O_DIRECTORY)`, `unlinkat`) so a link
//! planted by a container is removed, never followed; emits the first error. Nothing on another
//! mount is touched: every entry is checked with `statx(AT_SYMLINK_NOFOLLOW)` against the parent
//! directory's device and mount ID (a bind mount of the same filesystem has the same device but
//! its own mount ID), and a mount point is reported and left in place, with the directories
//! above it.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, Statx, StatxFlags};
use rustix::io::Errno;

use crate::fsat::open_dir_at;

#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// Upstream's wording; the path names the mount point left in place.
    #[error("cannot delete directory {0}: it is a mount point")]
    MountPoint(PathBuf),
    #[error("removing {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl RemoveError {
    fn io(path: &Path, source: impl Into<std::io::Error>) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source: source.into(),
        }
    }
}

impl From<RemoveError> for std::io::Error {
    fn from(e: RemoveError) -> Self {
        let kind = match &e {
            RemoveError::MountPoint(_) => ErrorKind::ResourceBusy,
            RemoveError::Io { source, .. } => source.kind(),
        };
        std::io::Error::new(kind, e)
    }
}

/// Which filesystem and mount an object is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    dev: (u32, u32),
    /// `None` on a kernel without `STATX_MNT_ID` (before 5.8): the device alone decides.
    mnt_id: Option<u64>,
}

impl Place {
    fn of(st: &Statx) -> Self {
        Self {
            dev: (st.stx_dev_major, st.stx_dev_minor),
            mnt_id: (st.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(st.stx_mnt_id),
        }
    }

    fn same_mount(self, other: Self) -> bool {
        self.dev == other.dev
            && match (self.mnt_id, other.mnt_id) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

const MASK: StatxFlags = StatxFlags::TYPE.union(StatxFlags::MNT_ID);

fn statx_fd(fd: impl AsFd) -> rustix::io::Result<Statx> {
    rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, MASK)
}

fn is_dir(st: &Statx) -> bool {
    FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::Directory
}

/// One directory being emptied.
struct Frame {
    dir: Dir,
    /// Its name in the parent frame's directory (or in the starting parent).
    name: Vec<u8>,
    path: PathBuf,
}

/// Removes `path` and everything under it without crossing a mount point or following a link.
/// A missing `path` is fine. Removes all it can and returns the first error; a mount point
/// anywhere below (or `path` itself being one) is a [`RemoveError::MountPoint`].
pub fn remove_all_one_filesystem(path: &Path) -> Result<(), RemoveError> {
    let Some(name) = path.file_name() else {
        return Err(RemoveError::io(path, ErrorKind::InvalidInput));
    };
    // The kubelet's own path up to `path` is trusted (links in it are followed); from `path`
    // on nothing is.
    let parent_path = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let parent = match rustix::fs::openat(
        CWD,
        parent_path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(RemoveError::io(parent_path, e)),
    };
    remove_tree_at(parent.as_fd(), name, path)
}

/// Removes the entry `name` of the directory `parent` as [`remove_all_one_filesystem`] does:
/// a link or file is unlinked, a directory emptied (never through a link, never across a
/// mount) and removed. A missing entry is fine. Error paths are relative to `parent`.
pub(crate) fn remove_entry_at(parent: BorrowedFd<'_>, name: &OsStr) -> Result<(), RemoveError> {
    remove_tree_at(parent, name, Path::new(name))
}

/// The one removal walk: `path` names `name` of `parent` in messages. Iterative (one open
/// directory per level), so a deep tree does not recurse on the stack.
fn remove_tree_at(parent: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<(), RemoveError> {
    let home = Place::of(&statx_fd(parent).map_err(|e| RemoveError::io(path, e))?);
    let Some(start) = step(parent, name.as_bytes(), path, home)? else {
        return Ok(());
    };
    let mut first_err: Option<RemoveError> = None;
    let mut stack = vec![Frame {
        dir: start,
        name: name.as_bytes().to_vec(),
        path: path.to_path_buf(),
    }];
    while let Some(top) = stack.last_mut() {
        let entry = match top.dir.next() {
            None => {
                if let Some(done) = stack.pop() {
                    let up = match stack.last() {
                        Some(frame) => frame.dir.fd(),
                        None => Ok(parent),
                    };
                    // Fails (ENOTEMPTY) when something below stayed; that error is not the first.
                    if let Err(e) = up.and_then(|fd| unlink(fd, &done.name, AtFlags::REMOVEDIR)) {
                        first_err.get_or_insert(RemoveError::io(&done.path, e));
                    }
                }
                continue;
            }
            Some(Err(e)) => {
                // Its directory stays (not empty); the parent's removal of it fails quietly.
                let path = top.path.clone();
                stack.pop();
                first_err.get_or_insert(RemoveError::io(&path, e));
                continue;
            }
            Some(Ok(entry)) => entry,
        };
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = name.to_vec();
        let child_path = top.path.join(OsStr::from_bytes(&name));
        let stepped = top
            .dir
            .fd()
            .map_err(|e| RemoveError::io(&top.path, e))
            .and_then(|dirfd| step(dirfd, &name, &child_path, home));
        match stepped {
            Ok(Some(child)) => stack.push(Frame {
                dir: child,
                name,
                path: child_path,
            }),
            Ok(None) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Handles the entry `name` of `dirfd`: a directory on the same mount is opened (to be emptied
/// next), anything else on the same mount is unlinked, anything on another mount is refused.
fn step(
    dirfd: BorrowedFd<'_>,
    name: &[u8],
    path: &Path,
    home: Place,
) -> Result<Option<Dir>, RemoveError> {
    let st = match rustix::fs::statx(dirfd, name, AtFlags::SYMLINK_NOFOLLOW, MASK) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(RemoveError::io(path, e)),
    };
    if !Place::of(&st).same_mount(home) {
        return Err(RemoveError::MountPoint(path.to_path_buf()));
    }
    if !is_dir(&st) {
        return match rustix::fs::unlinkat(dirfd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(None),
            Err(Errno::BUSY) => Err(RemoveError::MountPoint(path.to_path_buf())),
            Err(e) => Err(RemoveError::io(path, e)),
        };
    }
    let child = match open_dir_at(dirfd, name) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(RemoveError::io(path, e)),
    };
    // What was opened decides (the entry may have been swapped since the statx).
    let st = statx_fd(&child).map_err(|e| RemoveError::io(path, e))?;
    if !Place::of(&st).same_mount(home) {
        return Err(RemoveError::MountPoint(path.to_path_buf()));
    }
    Dir::new(child)
        .map(Some)
        .map_err(|e| RemoveError::io(path, e))
}

fn unlink(dir: BorrowedFd<'_>, name: &[u8], flags: AtFlags) -> rustix::io::Result<()> {
    match rustix::fs::unlinkat(dir, name, flags) {
        Err(Errno::NOENT) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn removes_a_tree_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("canary"), "alive").unwrap();
        let victim = dir.path().join("victim");
        std::fs::create_dir_all(victim.join("a/b/c")).unwrap();
        std::fs::write(victim.join("a/b/c/f"), "x").unwrap();
        std::fs::write(victim.join("top"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, victim.join("a/link-dir")).unwrap();
        std::os::unix::fs::symlink(outside.join("canary"), victim.join("link-file")).unwrap();
        std::os::unix::fs::symlink("/nonexistent", victim.join("a/b/dangling")).unwrap();

        remove_all_one_filesystem(&victim).unwrap();
        assert!(!victim.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("canary")).unwrap(),
            "alive"
        );
        // Missing is fine; a file or a link given directly is unlinked (not its target).
        remove_all_one_filesystem(&victim).unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        remove_all_one_filesystem(&link).unwrap();
        assert!(link.symlink_metadata().is_err());
        assert!(outside.join("canary").exists());
    }

    #[test]
    fn deep_trees_do_not_recurse_on_the_stack() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("deep");
        let mut p = victim.clone();
        // Deep enough to matter, shallow enough for PATH_MAX-free creation via relative steps.
        for _ in 0..300 {
            p.push("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        remove_all_one_filesystem(&victim).unwrap();
        assert!(!victim.exists());
    }

    fn mount(args: &[&str]) {
        let out = std::process::Command::new("mount")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount {args:?}: {out:?}");
    }

    fn umount(p: &Path) {
        let _ = std::process::Command::new("umount").arg(p).output();
    }

    fn can_mount() -> bool {
        rustix::process::geteuid().is_root()
    }

    /// Needs root (mount): a tmpfs and a same-filesystem bind mount under the tree are not
    /// crossed; their contents survive and the error names the mount point.
    #[test]
    fn never_crosses_a_tmpfs_or_a_bind_mount() {
        if !can_mount() {
            eprintln!("skipped: needs root to mount");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("pod");
        let tmpfs = victim.join("volumes/mem");
        let bind = victim.join("volume-subpaths/v/c/0");
        let source = dir.path().join("elsewhere");
        std::fs::create_dir_all(&tmpfs).unwrap();
        std::fs::create_dir_all(&bind).unwrap();
        std::fs::create_dir_all(&source).unwrap();
        std::fs::write(source.join("canary"), "bind").unwrap();
        std::fs::write(victim.join("plain"), "x").unwrap();
        mount(&["-t", "tmpfs", "tmpfs", tmpfs.to_str().unwrap()]);
        mount(&["--bind", source.to_str().unwrap(), bind.to_str().unwrap()]);
        std::fs::write(tmpfs.join("canary"), "tmpfs").unwrap();

        let err = remove_all_one_filesystem(&victim).unwrap_err();
        let tmpfs_alive = std::fs::read_to_string(tmpfs.join("canary"));
        let bind_alive = std::fs::read_to_string(source.join("canary"));
        umount(&tmpfs);
        umount(&bind);
        assert!(matches!(err, RemoveError::MountPoint(_)), "{err}");
        assert!(
            err.to_string().contains("volumes/mem") || err.to_string().contains("volume-subpaths"),
            "{err}"
        );
        assert_eq!(tmpfs_alive.unwrap(), "tmpfs");
        assert_eq!(bind_alive.unwrap(), "bind");
        assert!(!victim.join("plain").exists(), "the rest was removed");
        assert!(victim.exists(), "directories above a mount point stay");

        // The start itself being a mount point is refused outright.
        let mp = dir.path().join("mp");
        std::fs::create_dir(&mp).unwrap();
        mount(&["-t", "tmpfs", "tmpfs", mp.to_str().unwrap()]);
        std::fs::write(mp.join("canary"), "x").unwrap();
        let err = remove_all_one_filesystem(&mp).unwrap_err();
        let alive = mp.join("canary").exists();
        umount(&mp);
        assert!(
            matches!(err, RemoveError::MountPoint(ref p) if p == &mp),
            "{err}"
        );
        assert!(alive);

        // Unmounted, the same tree goes.
        remove_all_one_filesystem(&victim).unwrap();
        assert!(!victim.exists());
    }

    /// Needs root (mount): the fd-relative entry point (the atomic writer's) stops at a mount
    /// point below the entry, as the path one does, and names it relative to the parent.
    #[test]
    fn entry_removal_never_crosses_a_mount() {
        if !can_mount() {
            eprintln!("skipped: needs root to mount");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mp = dir.path().join("entry/sub/mnt");
        std::fs::create_dir_all(&mp).unwrap();
        std::fs::write(dir.path().join("entry/sub/f"), "x").unwrap();
        mount(&["-t", "tmpfs", "tmpfs", mp.to_str().unwrap()]);
        std::fs::write(mp.join("canary"), "tmpfs").unwrap();
        let parent = open_dir_at(CWD, dir.path()).unwrap();
        let err = remove_entry_at(parent.as_fd(), OsStr::new("entry")).unwrap_err();
        let alive = std::fs::read_to_string(mp.join("canary"));
        umount(&mp);
        assert!(
            matches!(err, RemoveError::MountPoint(ref p) if p == Path::new("entry/sub/mnt")),
            "{err}"
        );
        assert_eq!(alive.unwrap(), "tmpfs");
        assert!(!dir.path().join("entry/sub/f").exists());
        // As an io::Error (how the atomic writer reports it) the message is kept.
        let io: std::io::Error = err.into();
        assert_eq!(io.kind(), ErrorKind::ResourceBusy);
        assert!(io.to_string().contains("it is a mount point"), "{io}");
        remove_entry_at(parent.as_fd(), OsStr::new("entry")).unwrap();
        assert!(!dir.path().join("entry").exists());
    }
}
