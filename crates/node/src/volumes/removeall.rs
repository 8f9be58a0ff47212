//! `rm -rf --one-file-system` for the kubelet's volume and pod directories (upstream
//! `RemoveAllOneFilesystem`, stricter). Receives a directory the kubelet
//! owns (by path, or as an entry name relative to an open directory fd) and removes it with
//! everything under it, walking by fd (`openat(O_NOFOLLOW|O_DIRECTORY)`, `unlinkat`) so a link
//! planted by a container is removed, never followed; emits the first error. Nothing on another
//! mount is touched: every entry is checked with `statx(AT_SYMLINK_NOFOLLOW)` against the parent
//! directory's device and mount ID (a bind mount of the same filesystem has the same device but
//! its own mount ID), and a mount point is reported and left in place, with the directories
//! above it. Depth is the pod's to choose: the walk is iterative, holds one directory open at a
//! time and keeps a name and an inode per level, so a tree of any depth is removed with
//! bounded fds and memory linear in the depth.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, Statx, StatxFlags};
use rustix::io::Errno;

use crate::nofollow::open_dir_at;

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

/// One directory entered by the walk (the bottom one is open; the others are known by name).
struct Level {
    /// Its name in the directory above (or in the starting parent).
    name: Vec<u8>,
    /// `(dev major, dev minor, ino)`: what `..` must be when the walk climbs back to it.
    id: Id,
    /// Entries of it that stay (a mount point, an error, a directory not emptied): skipped when
    /// it is listed again.
    kept: Vec<Vec<u8>>,
}

/// `(dev major, dev minor, ino)` of an object.
type Id = (u32, u32, u64);

fn id_of(st: &Statx) -> Id {
    (st.stx_dev_major, st.stx_dev_minor, st.stx_ino)
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

/// The one removal walk: `path` names `name` of `parent` in messages. Iterative and of bounded
/// fds, whatever the depth: only the directory being emptied is open (and its listing); the
/// levels above are kept as a name and an inode each (O(depth) memory, no path per level).
/// Climbing back goes through the kernel's `..`, which must be the directory the walk came
/// down through: a directory moved meanwhile stops the walk with an error rather than letting
/// it remove anything elsewhere. A level is listed again after each subdirectory it held is
/// done (what was removed is gone; what stays is remembered in `kept` and skipped).
fn remove_tree_at(parent: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<(), RemoveError> {
    let home_st = statx_fd(parent).map_err(|e| RemoveError::io(path, e))?;
    let home = Place::of(&home_st);
    let Some((start, start_id)) = step(parent, name.as_bytes(), home, || path.to_path_buf())?
    else {
        return Ok(());
    };
    let mut first_err: Option<RemoveError> = None;
    let mut levels = vec![Level {
        name: name.as_bytes().to_vec(),
        id: start_id,
        kept: Vec::new(),
    }];
    // The path of the bottom level (or of `child` below it), built only for an error.
    let path_of = |levels: &[Level], child: Option<&[u8]>| -> PathBuf {
        let mut p = path.to_path_buf();
        for level in levels.iter().skip(1) {
            p.push(OsStr::from_bytes(&level.name));
        }
        if let Some(child) = child {
            p.push(OsStr::from_bytes(child));
        }
        p
    };
    let mut dir = Some(start);
    while let Some(mut current) = dir.take() {
        // Empty `current` of files and links; stop at its first subdirectory still to enter.
        let mut descend = None;
        while let Some(entry) = current.read() {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    first_err.get_or_insert_with(|| RemoveError::io(&path_of(&levels, None), e));
                    break;
                }
            };
            let entry_name = entry.file_name().to_bytes();
            let Some(level) = levels.last_mut() else {
                break;
            };
            if entry_name == b"."
                || entry_name == b".."
                || level.kept.iter().any(|k| k == entry_name)
            {
                continue;
            }
            let entry_name = entry_name.to_vec();
            let stepped = current
                .fd()
                .map_err(|e| RemoveError::io(&path_of(&levels, None), e))
                .and_then(|dirfd| {
                    step(dirfd, &entry_name, home, || {
                        path_of(&levels, Some(&entry_name))
                    })
                });
            match stepped {
                Ok(Some(child)) => {
                    descend = Some((entry_name, child));
                    break;
                }
                Ok(None) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                    if let Some(level) = levels.last_mut() {
                        level.kept.push(entry_name);
                    }
                }
            }
        }
        if let Some((child_name, (child, child_id))) = descend {
            // Only the child stays open: `current` is dropped here.
            levels.push(Level {
                name: child_name,
                id: child_id,
                kept: Vec::new(),
            });
            dir = Some(child);
            continue;
        }
        // `current` is as empty as it gets: climb to its parent and remove it there.
        let Some(done) = levels.pop() else {
            break;
        };
        let up = match levels.last() {
            None => None,
            Some(above) => match climb(&current, above.id) {
                Ok(up) => Some(up),
                Err(e) => {
                    let mut p = path_of(&levels, None);
                    p.push(OsStr::from_bytes(&done.name));
                    first_err.get_or_insert(RemoveError::io(&p, e));
                    break;
                }
            },
        };
        drop(current);
        let removed = match &up {
            Some(up) => up
                .fd()
                .and_then(|fd| unlink(fd, &done.name, AtFlags::REMOVEDIR)),
            None => unlink(parent, &done.name, AtFlags::REMOVEDIR),
        };
        if let Err(e) = removed {
            // Fails (ENOTEMPTY) when something below stayed; that error is not the first.
            first_err.get_or_insert_with(|| {
                let mut p = path_of(&levels, None);
                if !levels.is_empty() {
                    p.push(OsStr::from_bytes(&done.name));
                }
                RemoveError::io(&p, e)
            });
            if let Some(level) = levels.last_mut() {
                level.kept.push(done.name);
            }
        }
        dir = up;
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Opens the parent of the directory `dir` through `..` and lists it afresh, provided it is
/// the directory `expected` names.
fn climb(dir: &Dir, expected: Id) -> std::io::Result<Dir> {
    let up = open_dir_at(dir.fd()?, "..")?;
    let st = statx_fd(&up)?;
    if id_of(&st) != expected {
        return Err(std::io::Error::other(
            "a directory was moved while it was being removed",
        ));
    }
    Ok(Dir::new(up)?)
}

/// Handles the entry `name` of `dirfd`: a directory on the same mount is opened (to be emptied
/// next), anything else on the same mount is unlinked, anything on another mount is refused.
/// `path` names the entry in errors (built only when one happens).
fn step(
    dirfd: BorrowedFd<'_>,
    name: &[u8],
    home: Place,
    path: impl Fn() -> PathBuf,
) -> Result<Option<(Dir, Id)>, RemoveError> {
    let st = match rustix::fs::statx(dirfd, name, AtFlags::SYMLINK_NOFOLLOW, MASK) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(RemoveError::io(&path(), e)),
    };
    if !Place::of(&st).same_mount(home) {
        return Err(RemoveError::MountPoint(path()));
    }
    if !is_dir(&st) {
        return match rustix::fs::unlinkat(dirfd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(None),
            Err(Errno::BUSY) => Err(RemoveError::MountPoint(path())),
            Err(e) => Err(RemoveError::io(&path(), e)),
        };
    }
    let child = match open_dir_at(dirfd, name) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(RemoveError::io(&path(), e)),
    };
    // What was opened decides (the entry may have been swapped since the statx).
    let st = statx_fd(&child).map_err(|e| RemoveError::io(&path(), e))?;
    if !Place::of(&st).same_mount(home) {
        return Err(RemoveError::MountPoint(path()));
    }
    Dir::new(child)
        .map(|dir| Some((dir, id_of(&st))))
        .map_err(|e| RemoveError::io(&path(), e))
}

fn unlink(dir: BorrowedFd<'_>, name: &[u8], flags: AtFlags) -> rustix::io::Result<()> {
    match rustix::fs::unlinkat(dir, name, flags) {
        Err(Errno::NOENT) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use std::os::fd::AsRawFd;

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

    /// A temporary directory on tmpfs where there is one: 60,000 `mkdir`s and `rmdir`s take
    /// a second there and tens of seconds on a journaled disk (for `rm -rf` as well).
    fn fast_tempdir() -> tempfile::TempDir {
        tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
    }

    /// Builds `levels` nested directories `d` under `top` by fd (past PATH_MAX), with a file
    /// and a link out of the tree at the bottom; answers the canary the link points at.
    fn deep_tree(top: &Path, levels: usize) -> PathBuf {
        let canary = top.join("canary");
        std::fs::write(&canary, "alive").unwrap();
        let victim = top.join("deep");
        std::fs::create_dir(&victim).unwrap();
        let mut fd = open_dir_at(CWD, &victim).unwrap();
        for _ in 0..levels {
            rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
            fd = open_dir_at(&fd, "d").unwrap();
        }
        std::fs::write(format!("/proc/self/fd/{}/f", fd.as_raw_fd()), "x").unwrap();
        rustix::fs::symlinkat(&canary, &fd, "link").unwrap();
        canary
    }

    /// Depth (issue 28 A1): a container can nest 60,000 directories in an emptyDir. Removal
    /// finishes in seconds with one directory open at a time and a name per level (before:
    /// one fd and the whole path so far per level, past the fd limit and growing with
    /// depth²), follows no link and leaves nothing.
    #[test]
    fn a_tree_60000_levels_deep_is_removed_in_seconds() {
        let dir = fast_tempdir();
        let canary = deep_tree(dir.path(), 60_000);
        let victim = dir.path().join("deep");
        let fds_before = std::fs::read_dir("/proc/self/fd").unwrap().count();
        let start = std::time::Instant::now();
        remove_all_one_filesystem(&victim).unwrap();
        let elapsed = start.elapsed();
        assert!(!victim.exists());
        assert!(elapsed < std::time::Duration::from_secs(30), "{elapsed:?}");
        assert_eq!(std::fs::read_to_string(&canary).unwrap(), "alive");
        let fds_after = std::fs::read_dir("/proc/self/fd").unwrap().count();
        assert!(fds_after <= fds_before, "{fds_before} -> {fds_after}");
    }

    /// The walk holds a bounded number of fds: under an fd limit far below the depth, a
    /// 5,000-level tree still goes (a walk holding one fd per level fails with EMFILE).
    /// Runs in a child process so the lowered limit touches no other test.
    #[test]
    fn deep_removal_needs_no_fd_per_level() {
        if std::env::var_os("RKUBELET_REMOVEALL_CHILD").is_some() {
            let dir = fast_tempdir();
            deep_tree(dir.path(), 5_000);
            let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
            let limit = rustix::process::Rlimit {
                current: Some(open + 16),
                maximum: rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum,
            };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, limit).unwrap();
            remove_all_one_filesystem(&dir.path().join("deep")).unwrap();
            assert!(!dir.path().join("deep").exists());
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "volumes::removeall::tests::deep_removal_needs_no_fd_per_level",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("RKUBELET_REMOVEALL_CHILD", "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "the child ran the test: {text}");
    }

    /// A wide and deep tree: each directory is listed again after each subdirectory it held
    /// is done (only one is open at a time); every entry goes.
    #[test]
    fn wide_and_deep_trees_are_removed_level_by_level() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("v");
        let mut frontier = vec![victim.clone()];
        for _ in 0..6 {
            let mut next = Vec::new();
            for d in &frontier {
                for n in ["a", "b", "c"] {
                    std::fs::create_dir_all(d.join(n)).unwrap();
                    std::fs::write(d.join(format!("f{n}")), "x").unwrap();
                    next.push(d.join(n));
                }
            }
            frontier = next;
        }
        assert_eq!(frontier.len(), 729);
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

    /// Needs root (mount): a tmpfs and a same-filesystem bind mount under the tree are not
    /// crossed; their contents survive and the error names the mount point.
    #[test]
    #[cfg_attr(not(rkubelet_tests_as_root), ignore = "needs root (mount)")]
    fn never_crosses_a_tmpfs_or_a_bind_mount() {
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
    #[cfg_attr(not(rkubelet_tests_as_root), ignore = "needs root (mount)")]
    fn entry_removal_never_crosses_a_mount() {
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
