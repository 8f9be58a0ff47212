//! The filesystem edge of the stats provider: owns nothing; receives paths and answers file
//! contents, directory listings, symlink targets, modification times, `statvfs(2)` figures,
//! device numbers and `du`-style directory usage. [`SystemFs`]
//! reads the host; tests point the readers at temp-dir trees or use [`FakeFs`].

use crate::sync;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// `statvfs(2)` of one filesystem, in bytes and inodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsUsage {
    pub capacity_bytes: u64,
    /// Free to unprivileged users (`f_bavail`), as cadvisor reports `available`.
    pub available_bytes: u64,
    /// Capacity − free (`f_blocks − f_bfree`).
    pub used_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// Disk usage of a directory tree (`du`: allocated blocks, and how many inodes it holds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirUsage {
    pub bytes: u64,
    pub inodes: u64,
}

/// Reads the stats provider needs from files and filesystems.
pub trait StatsFs: Send + Sync {
    fn read_to_string(&self, path: &Path) -> io::Result<String>;
    fn exists(&self, path: &Path) -> bool;
    fn statfs(&self, path: &Path) -> io::Result<FsUsage>;
    /// The device a path lives on (to tell whether two paths share a filesystem).
    fn device(&self, path: &Path) -> io::Result<u64>;
    /// `du` of a tree; a missing directory is empty.
    fn dir_usage(&self, path: &Path) -> io::Result<DirUsage>;
    /// The names of a directory's entries (any order).
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Where a symlink points (`/proc/<pid>/fd/<n>` → `socket:[inode]`).
    fn read_link(&self, path: &Path) -> io::Result<PathBuf>;
    /// Last modification time (a cgroup directory's: cadvisor's container creation time).
    fn modified(&self, path: &Path) -> io::Result<SystemTime>;
}

/// The host's filesystems.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemFs;

impl StatsFs for SystemFs {
    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn statfs(&self, path: &Path) -> io::Result<FsUsage> {
        statvfs(path)
    }
    fn device(&self, path: &Path) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(std::fs::metadata(path)?.dev())
    }
    fn dir_usage(&self, path: &Path) -> io::Result<DirUsage> {
        du(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    }
    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(path)
    }
    fn modified(&self, path: &Path) -> io::Result<SystemTime> {
        std::fs::metadata(path)?.modified()
    }
}

/// One directory [`du`] has entered: how to find it again and what is left to enter in it.
struct DuLevel {
    /// Its name in the directory above (empty for the top).
    name: std::ffi::OsString,
    /// `(dev, ino)`: what `..` (or a walk down again) must find.
    id: (u64, u64),
    /// Subdirectories not entered yet, with the `(dev, ino)` they were listed with.
    pending: Vec<(std::ffi::OsString, (u64, u64))>,
}

/// `du` semantics: allocated 512-byte blocks of every entry (hard links counted once), not
/// following symlinks and not crossing into other filesystems. The tree may be a pod's
/// (emptyDir), so it is walked by directory fd: each entry is looked at with `fstatat` without
/// following links, each subdirectory opened `O_NOFOLLOW | O_DIRECTORY` under its parent's fd
/// and checked to be the one just looked at. A directory swapped for a link in between is not
/// entered, and no path is walked from `/` again per entry.
///
/// Depth is the pod's to choose, so it is not bounded and neither are fds nor memory allowed to
/// grow with it past a name and an inode per level: only the top directory and the one being
/// listed are open. Climbing back goes through the kernel's `..`, checked to be the directory
/// the walk came down through; when it is not (a container moved a directory meanwhile), the
/// walk goes down again from the top by name, checking each level, and drops only the levels
/// that are gone.
pub fn du(path: &Path) -> io::Result<DirUsage> {
    use rustix::fs::{AtFlags, statat};
    let root = match rustix::fs::lstat(path) {
        Ok(st) => st,
        Err(e) if e == rustix::io::Errno::NOENT => return Ok(DirUsage::default()),
        Err(e) => return Err(e.into()),
    };
    let dev = root.st_dev;
    let mut tally = DuTally::default();
    tally.count(&root);
    if !is_dir(&root) {
        return Ok(tally.usage);
    }
    let Some(top) = crate::nofollow::open_dir_at(rustix::fs::CWD, path)
        .ok()
        .filter(|fd| rustix::fs::fstat(fd).is_ok_and(|st| same_inode(&st, &root)))
    else {
        return Ok(tally.usage);
    };
    let mut levels = vec![DuLevel {
        name: std::ffi::OsString::new(),
        id: (root.st_dev, root.st_ino),
        pending: Vec::new(),
    }];
    // Lists the directory just entered (the bottom level): counts its entries and keeps its
    // subdirectories on this filesystem to enter.
    let list = |fd: &OwnedFd, tally: &mut DuTally| {
        let mut subdirs = Vec::new();
        for name in crate::nofollow::list_dir(fd.as_fd()).unwrap_or_default() {
            let Ok(st) = statat(fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            tally.count(&st);
            if is_dir(&st) && st.st_dev == dev {
                subdirs.push((name, (st.st_dev, st.st_ino)));
            }
        }
        subdirs
    };
    let mut current = top.try_clone()?;
    levels[0].pending = list(&current, &mut tally);
    while let Some(bottom) = levels.last_mut() {
        if let Some((name, id)) = bottom.pending.pop() {
            let Ok(child) = crate::nofollow::open_dir_at(&current, name.as_os_str()) else {
                continue;
            };
            if !rustix::fs::fstat(&child).is_ok_and(|st| (st.st_dev, st.st_ino) == id) {
                continue;
            }
            let pending = list(&child, &mut tally);
            levels.push(DuLevel { name, id, pending });
            current = child;
            continue;
        }
        levels.pop();
        let Some(above) = levels.last() else {
            break;
        };
        current = match climb(&current, above.id) {
            Some(up) => up,
            None => walk_down(&top, &mut levels)?,
        };
    }
    Ok(tally.usage)
}

/// The parent of `dir` through `..`, when it is the directory `expected` names.
fn climb(dir: &OwnedFd, expected: (u64, u64)) -> Option<OwnedFd> {
    let up = crate::nofollow::open_dir_at(dir, "..").ok()?;
    rustix::fs::fstat(&up)
        .is_ok_and(|st| (st.st_dev, st.st_ino) == expected)
        .then_some(up)
}

/// Opens the bottom of `levels` again from `top` by name, each level checked to be the
/// directory it was; the levels that are not any more (and what was left to enter in them)
/// are dropped.
fn walk_down(top: &OwnedFd, levels: &mut Vec<DuLevel>) -> io::Result<OwnedFd> {
    let mut fd = top.try_clone()?;
    for i in 1..levels.len() {
        let next = crate::nofollow::open_dir_at(&fd, levels[i].name.as_os_str())
            .ok()
            .filter(|child| {
                rustix::fs::fstat(child).is_ok_and(|st| (st.st_dev, st.st_ino) == levels[i].id)
            });
        match next {
            Some(child) => fd = child,
            None => {
                levels.truncate(i);
                break;
            }
        }
    }
    Ok(fd)
}

fn is_dir(st: &rustix::fs::Stat) -> bool {
    rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
}

fn same_inode(a: &rustix::fs::Stat, b: &rustix::fs::Stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

/// What [`du`] has counted so far.
#[derive(Default)]
struct DuTally {
    usage: DirUsage,
    /// Files with several links, counted once.
    seen: std::collections::HashSet<(u64, u64)>,
}

impl DuTally {
    fn count(&mut self, st: &rustix::fs::Stat) {
        if st.st_nlink > 1 && !is_dir(st) && !self.seen.insert((st.st_dev, st.st_ino)) {
            return;
        }
        let blocks = u64::try_from(st.st_blocks).unwrap_or(0);
        self.usage.bytes = self.usage.bytes.saturating_add(blocks.saturating_mul(512));
        self.usage.inodes += 1;
    }
}

/// `statvfs(2)` (through rustix's safe wrapper). The kubelet's one call of it (node capacity,
/// image GC and the stats provider all read filesystems through here).
pub fn statvfs(path: &Path) -> io::Result<FsUsage> {
    let st = rustix::fs::statvfs(path)?;
    let (blocks, bfree, bavail, frsize, files, ffree) = (
        st.f_blocks,
        st.f_bfree,
        st.f_bavail,
        st.f_frsize,
        st.f_files,
        st.f_ffree,
    );
    Ok(FsUsage {
        capacity_bytes: blocks.saturating_mul(frsize),
        available_bytes: bavail.saturating_mul(frsize),
        used_bytes: blocks.saturating_sub(bfree).saturating_mul(frsize),
        inodes: files,
        inodes_free: ffree,
    })
}

/// An in-memory [`StatsFs`]: files, symlinks, modification times, filesystems (by path
/// prefix) and directory usages set by the test; directories exist implicitly above every
/// file and link. Every file read is logged, for tests of a collection's cost. Clones share
/// state.
#[derive(Debug, Clone, Default)]
pub struct FakeFs {
    inner: Arc<Mutex<FakeInner>>,
}

#[derive(Debug, Default)]
struct FakeInner {
    files: HashMap<PathBuf, String>,
    filesystems: Vec<(PathBuf, u64, FsUsage)>,
    dirs: HashMap<PathBuf, DirUsage>,
    links: HashMap<PathBuf, PathBuf>,
    mtimes: HashMap<PathBuf, SystemTime>,
    reads: Vec<PathBuf>,
}

impl FakeFs {
    fn lock(&self) -> std::sync::MutexGuard<'_, FakeInner> {
        sync::lock(&self.inner)
    }
    pub fn set_file(&self, path: impl Into<PathBuf>, content: &str) {
        self.lock().files.insert(path.into(), content.to_owned());
    }
    /// A filesystem mounted at `mount` (device `dev`); the longest matching mount wins.
    pub fn set_fs(&self, mount: impl Into<PathBuf>, dev: u64, usage: FsUsage) {
        let mount = mount.into();
        let mut inner = self.lock();
        inner.filesystems.retain(|(m, _, _)| *m != mount);
        inner.filesystems.push((mount, dev, usage));
    }
    pub fn set_dir(&self, path: impl Into<PathBuf>, usage: DirUsage) {
        self.lock().dirs.insert(path.into(), usage);
    }
    pub fn set_link(&self, path: impl Into<PathBuf>, target: impl Into<PathBuf>) {
        self.lock().links.insert(path.into(), target.into());
    }
    pub fn set_mtime(&self, path: impl Into<PathBuf>, t: SystemTime) {
        self.lock().mtimes.insert(path.into(), t);
    }
    pub fn remove_file(&self, path: impl AsRef<Path>) {
        self.lock().files.remove(path.as_ref());
    }
    /// Every path `read_to_string` was asked for so far, in order (found or not).
    pub fn reads(&self) -> Vec<PathBuf> {
        self.lock().reads.clone()
    }
    fn fs_of(&self, path: &Path) -> io::Result<(u64, FsUsage)> {
        self.lock()
            .filesystems
            .iter()
            .filter(|(m, _, _)| path.starts_with(m))
            .max_by_key(|(m, _, _)| m.as_os_str().len())
            .map(|(_, d, u)| (*d, *u))
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no fake filesystem"))
    }
}

impl StatsFs for FakeFs {
    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        let mut inner = self.lock();
        inner.reads.push(path.to_owned());
        inner
            .files
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, path.display().to_string()))
    }
    fn exists(&self, path: &Path) -> bool {
        let inner = self.lock();
        inner.files.keys().any(|p| p.starts_with(path)) || inner.dirs.contains_key(path)
    }
    fn statfs(&self, path: &Path) -> io::Result<FsUsage> {
        self.fs_of(path).map(|(_, u)| u)
    }
    fn device(&self, path: &Path) -> io::Result<u64> {
        self.fs_of(path).map(|(d, _)| d)
    }
    fn dir_usage(&self, path: &Path) -> io::Result<DirUsage> {
        Ok(self.lock().dirs.get(path).copied().unwrap_or_default())
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let inner = self.lock();
        let mut names: Vec<String> = inner
            .files
            .keys()
            .chain(inner.links.keys())
            .chain(inner.dirs.keys())
            .filter_map(|p| p.strip_prefix(path).ok())
            .filter_map(|rest| rest.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if names.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                path.display().to_string(),
            ));
        }
        names.sort();
        names.dedup();
        Ok(names)
    }
    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        self.lock()
            .links
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, path.display().to_string()))
    }
    fn modified(&self, path: &Path) -> io::Result<SystemTime> {
        self.lock()
            .mtimes
            .get(path)
            .copied()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, path.display().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn du_counts_allocated_blocks_and_inodes_and_a_missing_dir_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a"), vec![1u8; 64 * 1024]).unwrap();
        std::fs::write(dir.path().join("b"), b"x").unwrap();
        let u = du(dir.path()).unwrap();
        assert_eq!(u.inodes, 4, "root, sub, a, b");
        assert!(u.bytes >= 64 * 1024, "{u:?}");
        assert_eq!(
            du(&dir.path().join("missing")).unwrap(),
            DirUsage::default()
        );
    }

    #[test]
    fn du_never_follows_a_link_and_counts_hard_links_once() {
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("secret"), vec![1u8; 256 * 1024]).unwrap();
        let pod = tempfile::tempdir().unwrap();
        std::fs::write(pod.path().join("a"), vec![1u8; 64 * 1024]).unwrap();
        std::fs::hard_link(pod.path().join("a"), pod.path().join("a2")).unwrap();
        // A pod plants links to the host's tree, as a directory entry and deeper down.
        std::os::unix::fs::symlink(host.path(), pod.path().join("to-host")).unwrap();
        std::fs::create_dir(pod.path().join("d")).unwrap();
        std::os::unix::fs::symlink(host.path().join("secret"), pod.path().join("d/s")).unwrap();
        let u = du(pod.path()).unwrap();
        assert_eq!(u.inodes, 5, "root, a (once), to-host, d, d/s: {u:?}");
        assert!(
            (64 * 1024..128 * 1024).contains(&u.bytes),
            "the 64 KiB file once, nothing of the host's 256 KiB: {u:?}"
        );
        // A root that is itself a link is the link alone.
        let root_link = pod.path().join("to-host");
        assert_eq!(du(&root_link).unwrap().inodes, 1);
    }

    #[test]
    fn du_walks_a_tree_deeper_than_a_path_could_name() {
        // 3000 levels of 2-byte names: 6000 bytes of path, past PATH_MAX (4096), built by fd.
        let top = tempfile::tempdir().unwrap();
        let mut fd = crate::nofollow::open_dir_at(rustix::fs::CWD, top.path()).unwrap();
        for _ in 0..3000 {
            rustix::fs::mkdirat(&fd, "d", rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
            fd = crate::nofollow::open_dir_at(&fd, "d").unwrap();
        }
        // A file at the bottom, 3000 levels down (1 MiB, written for real so it has blocks).
        let file = rustix::fs::openat(
            &fd,
            "f",
            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CREATE,
            rustix::fs::Mode::from_raw_mode(0o644),
        )
        .unwrap();
        let mut file = std::fs::File::from(file);
        std::io::Write::write_all(&mut file, &vec![7u8; 1 << 20]).unwrap();
        file.sync_all().unwrap();
        drop((file, fd));
        let u = du(top.path()).unwrap();
        assert_eq!(u.inodes, 1 + 3000 + 1, "every level and the file: {u:?}");
        assert!(
            u.bytes >= 1 << 20,
            "the file at the bottom is counted: {u:?}"
        );
        // Clean up by fd (remove_dir_all cannot name the bottom either).
        crate::volumes::removeall::remove_all_one_filesystem(top.path()).unwrap();
    }

    /// Depth does not cost fds: the walk holds two directories open at most, so a tree far
    /// deeper than the fd limit is counted (before, one fd per level up to a cap of 2048).
    #[test]
    fn du_holds_a_bounded_number_of_fds_whatever_the_depth() {
        let top = tempfile::tempdir().unwrap();
        let mut fd = crate::nofollow::open_dir_at(rustix::fs::CWD, top.path()).unwrap();
        for i in 0..5000 {
            // A side file per level and a second branch every 1000 levels.
            rustix::fs::mkdirat(&fd, "d", rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
            if i % 1000 == 0 {
                rustix::fs::mkdirat(&fd, "e", rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
            }
            fd = crate::nofollow::open_dir_at(&fd, "d").unwrap();
        }
        drop(fd);
        let fds_before = std::fs::read_dir("/proc/self/fd").unwrap().count();
        let u = du(top.path()).unwrap();
        let fds_after = std::fs::read_dir("/proc/self/fd").unwrap().count();
        assert_eq!(u.inodes, 1 + 5000 + 5, "{u:?}");
        assert!(
            fds_after <= fds_before,
            "no fd leaked: {fds_before} -> {fds_after}"
        );
        crate::volumes::removeall::remove_all_one_filesystem(top.path()).unwrap();
    }

    #[test]
    fn statvfs_of_a_real_directory_is_consistent() {
        let dir = tempfile::tempdir().unwrap();
        let u = SystemFs.statfs(dir.path()).unwrap();
        assert!(u.capacity_bytes > 0 && u.available_bytes <= u.capacity_bytes);
        assert!(u.used_bytes <= u.capacity_bytes);
    }
}
