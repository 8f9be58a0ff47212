//! Atomic writer for projected-style volumes (upstream `volume/util/atomic_writer.go`): writes a
//! complete payload into a fresh timestamped directory, points `..data` at it with a symlink swap
//! (rename over the old link), and keeps user-visible names as symlinks through `..data`, so
//! a reader sees either the old or the new payload, never a mix. Receives a volume directory and
//! a payload; owns nothing but the files under that directory.
//!
//! The directory's contents are hostile input (a container that could write to it may have
//! replaced anything): every operation is relative to the volume directory's fd, no walk or
//! removal ever follows a symlink, `..data` is trusted only when it is exactly what this writer
//! creates (a link named `..<timestamp>` to a real sibling directory), and anything else found
//! in the directory is unlinked (links themselves, never their targets) before the payload is
//! written afresh.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use rustix::io::Errno;
use tracing::warn;

use super::removeall::{RemoveError, remove_entry_at};
use crate::nofollow::{list_dir, open_dir_at, open_regular_at};

/// One file of a payload: contents and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum AtomicWriteError {
    #[error("invalid path {path:?} in volume payload: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("writing volume payload under {dir}: {what}: {source}")]
    Io {
        dir: PathBuf,
        what: String,
        source: std::io::Error,
    },
}

const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";
/// Mode of the timestamped directory and of directories inside it (upstream 0755).
const DIR_MODE: u32 = 0o755;
/// Upstream's limits on payload paths.
const MAX_FILE_NAME: usize = 255;
const MAX_PATH: usize = 4096;
/// Deeper trees found in an old payload directory make it "different" rather than walked.
const MAX_DEPTH: usize = 256;

/// Permission bits only: setuid, setgid and sticky are never applied from a payload's modes
/// (API validation admits 0..=0777 only).
pub fn permission_bits(mode: u32) -> u32 {
    mode & 0o777
}

/// The payload path cleaned (empty and `.` elements dropped) after upstream `validatePath`:
/// relative, no `..` element, not starting with `..`, names ≤ 255 bytes, path ≤ 4096 bytes.
fn clean_path(path: &str) -> Result<String, AtomicWriteError> {
    let bad = |reason| AtomicWriteError::InvalidPath {
        path: path.to_owned(),
        reason,
    };
    if path.is_empty() {
        return Err(bad("must not be empty"));
    }
    if path.starts_with('/') {
        return Err(bad("must be relative"));
    }
    if path.len() > MAX_PATH {
        return Err(bad("must be at most 4096 characters"));
    }
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(bad("must not contain '..'"));
    }
    if parts.iter().any(|p| p.len() > MAX_FILE_NAME) {
        return Err(bad("file names must be at most 255 characters"));
    }
    if parts.iter().any(|p| p.contains('\0')) {
        return Err(bad("must not contain NUL"));
    }
    match parts.first() {
        None => Err(bad("must not be empty")),
        Some(first) if first.starts_with("..") => Err(bad("must not start with '..'")),
        Some(_) => Ok(parts.join("/")),
    }
}

/// Whether `name` is shaped as a timestamped directory of this writer (or upstream's):
/// `..YYYY_MM_DD_HH_MM_SS.` followed by 1 to 32 alphanumerics.
fn is_timestamp_name(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b"..") else {
        return false;
    };
    if rest.len() < 21 || rest.len() > 20 + 32 {
        return false;
    }
    let (stamp, suffix) = rest.split_at(19);
    let stamp_ok = stamp.iter().enumerate().all(|(i, c)| match i {
        4 | 7 | 10 | 13 | 16 => *c == b'_',
        _ => c.is_ascii_digit(),
    });
    stamp_ok
        && suffix.first() == Some(&b'.')
        && suffix.len() > 1
        && suffix[1..].iter().all(u8::is_ascii_alphanumeric)
}

struct Ctx<'a> {
    dir: &'a Path,
}

impl Ctx<'_> {
    fn err(&self, what: impl std::fmt::Display) -> impl FnOnce(Errno) -> AtomicWriteError + '_ {
        let what = what.to_string();
        move |e| AtomicWriteError::Io {
            dir: self.dir.to_path_buf(),
            what,
            source: e.into(),
        }
    }

    fn io_err(
        &self,
        what: impl std::fmt::Display,
    ) -> impl FnOnce(std::io::Error) -> AtomicWriteError + '_ {
        let what = what.to_string();
        move |source| AtomicWriteError::Io {
            dir: self.dir.to_path_buf(),
            what,
            source,
        }
    }

    fn rm_err(
        &self,
        what: impl std::fmt::Display,
    ) -> impl FnOnce(RemoveError) -> AtomicWriteError + '_ {
        let io = self.io_err(what);
        move |e| io(e.into())
    }
}

/// Writes `payload` into `target_dir` atomically. Returns `true` when anything changed
/// (including the repair of a tampered directory).
pub fn write_payload(
    target_dir: &Path,
    payload: &BTreeMap<String, FileProjection>,
) -> Result<bool, AtomicWriteError> {
    let mut files: BTreeMap<String, &FileProjection> = BTreeMap::new();
    for (path, file) in payload {
        files.insert(clean_path(path)?, file);
    }
    check_no_file_dir_conflict(&files)?;
    let cx = Ctx { dir: target_dir };
    // The volume directory itself is the kubelet's (under `<root>/pods/<uid>/volumes`).
    std::fs::create_dir_all(target_dir).map_err(cx.io_err("creating the volume directory"))?;
    let root = open_dir_at(CWD, target_dir).map_err(cx.err("opening the volume directory"))?;
    let root = root.as_fd();
    let top: BTreeSet<&str> = files.keys().filter_map(|k| k.split('/').next()).collect();

    let current = trusted_data_dir(root);
    if let Some(ts) = &current
        && layout_is_ours(root, ts, &top)
        && same_payload(root, ts, &files)
    {
        return Ok(false);
    }
    if current.is_none() && entry_exists(root, DATA_DIR) {
        warn!(dir = %target_dir.display(), "volume directory has a ..data this writer did not create; rebuilding it");
    }

    // 1. The new payload in a fresh directory.
    let stamp = new_timestamp_dir(&cx, root)?;
    if let Err(e) = write_files(&cx, root, &stamp, &files) {
        let _ = remove_entry_at(root, OsStr::new(&stamp));
        return Err(e);
    }
    // 2. User-visible names link through `..data`; whatever occupies one of them otherwise
    //    (a file, a directory, a link elsewhere) is removed, never followed.
    for name in &top {
        let want = format!("{DATA_DIR}/{name}");
        match rustix::fs::readlinkat(root, *name, Vec::new()) {
            Ok(target) if target.as_bytes() == want.as_bytes() => continue,
            Err(Errno::NOENT) => {}
            _ => remove_entry_at(root, OsStr::new(name))
                .map_err(cx.rm_err(format!("removing tampered {name:?}")))?,
        }
        rustix::fs::symlinkat(want.as_str(), root, *name)
            .map_err(cx.err(format!("linking {name:?}")))?;
    }
    // 3. Swap `..data` to it (a rename replaces a link without following it; a real
    //    directory in its place is removed first).
    remove_entry_at(root, OsStr::new(DATA_DIR_TMP)).map_err(cx.rm_err("removing ..data_tmp"))?;
    rustix::fs::symlinkat(stamp.as_str(), root, DATA_DIR_TMP)
        .map_err(cx.err("linking ..data_tmp"))?;
    if current.is_none() && !is_symlink(root, DATA_DIR) {
        remove_entry_at(root, OsStr::new(DATA_DIR)).map_err(cx.rm_err("removing ..data"))?;
    }
    rustix::fs::renameat(root, DATA_DIR_TMP, root, DATA_DIR)
        .map_err(cx.err("renaming ..data_tmp to ..data"))?;
    // 4. Everything else goes: names no longer in the payload, the old payload directory,
    //    stale or foreign entries.
    let mut last_err = None;
    for name in list_dir(root).map_err(cx.err("listing the volume directory"))? {
        let keep = name == DATA_DIR
            || name.as_bytes() == stamp.as_bytes()
            || name.to_str().is_some_and(|n| top.contains(n));
        if !keep && let Err(e) = remove_entry_at(root, &name) {
            warn!(dir = %target_dir.display(), entry = ?name, error = %e, "pruning volume directory entry failed");
            last_err = Some(cx.rm_err(format!("removing {name:?}"))(e));
        }
    }
    match last_err {
        Some(e) => Err(e),
        None => Ok(true),
    }
}

/// A payload cannot hold both `a` and `a/b`.
fn check_no_file_dir_conflict(
    files: &BTreeMap<String, &FileProjection>,
) -> Result<(), AtomicWriteError> {
    for path in files.keys() {
        let mut prefix = path.as_str();
        while let Some((parent, _)) = prefix.rsplit_once('/') {
            if files.contains_key(parent) {
                return Err(AtomicWriteError::InvalidPath {
                    path: path.clone(),
                    reason: "a parent directory is also a file of the payload",
                });
            }
            prefix = parent;
        }
    }
    Ok(())
}

fn entry_exists(dir: BorrowedFd<'_>, name: &str) -> bool {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok()
}

fn is_symlink(dir: BorrowedFd<'_>, name: &str) -> bool {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
}

/// The timestamped directory `..data` names, when `..data` is exactly what this writer makes:
/// a symlink whose target is one `..<timestamp>` name of a real directory (not a link) in the
/// volume directory.
fn trusted_data_dir(root: BorrowedFd<'_>) -> Option<String> {
    let target = rustix::fs::readlinkat(root, DATA_DIR, Vec::new()).ok()?;
    let name = target.to_str().ok()?;
    if !is_timestamp_name(name.as_bytes()) {
        return None;
    }
    let st = rustix::fs::statat(root, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    (FileType::from_raw_mode(st.st_mode) == FileType::Directory).then(|| name.to_owned())
}

/// The volume directory holds exactly `..data`, its timestamped directory and one correct
/// link per user-visible name.
fn layout_is_ours(root: BorrowedFd<'_>, ts: &str, top: &BTreeSet<&str>) -> bool {
    let Ok(names) = list_dir(root) else {
        return false;
    };
    let mut seen = 0;
    for name in &names {
        if name == DATA_DIR || name.as_bytes() == ts.as_bytes() {
            continue;
        }
        let Some(n) = name.to_str().filter(|n| top.contains(n)) else {
            return false;
        };
        let want = format!("{DATA_DIR}/{n}");
        match rustix::fs::readlinkat(root, n, Vec::new()) {
            Ok(t) if t.as_bytes() == want.as_bytes() => seen += 1,
            _ => return false,
        }
    }
    seen == top.len()
}

/// Same files with the same contents (upstream `shouldWritePayload` compares contents only:
/// modes come from the immutable volume spec, and fsGroup ownership adjusts them after
/// writing, so comparing them would rewrite such payloads on every sync). A link or special
/// file anywhere in the old tree makes it different.
fn same_payload(root: BorrowedFd<'_>, ts: &str, files: &BTreeMap<String, &FileProjection>) -> bool {
    let Ok(dir) = open_dir_at(root, OsStr::new(ts)) else {
        return false;
    };
    let mut existing = BTreeSet::new();
    if !collect_files(dir.as_fd(), "", 0, &mut existing) {
        return false;
    }
    existing.len() == files.len()
        && files.iter().all(|(rel, f)| {
            existing.contains(rel)
                && read_at(dir.as_fd(), rel, f.data.len() + 1).is_ok_and(|d| d == f.data)
        })
}

/// Regular files under `dir` by relative path; `false` when anything else (a link, a device,
/// a non-UTF-8 name, a too-deep tree) is found.
fn collect_files(
    dir: BorrowedFd<'_>,
    prefix: &str,
    depth: usize,
    out: &mut BTreeSet<String>,
) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let Ok(names) = list_dir(dir) else {
        return false;
    };
    for name in names {
        let Some(n) = name.to_str() else {
            return false;
        };
        let rel = if prefix.is_empty() {
            n.to_owned()
        } else {
            format!("{prefix}/{n}")
        };
        let Ok(st) = rustix::fs::statat(dir, n, AtFlags::SYMLINK_NOFOLLOW) else {
            return false;
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {
                out.insert(rel);
            }
            FileType::Directory => {
                let Ok(sub) = open_dir_at(dir, &name) else {
                    return false;
                };
                if !collect_files(sub.as_fd(), &rel, depth + 1, out) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// Reads at most `limit` bytes of the regular file `rel` under `dir`, following no link.
fn read_at(dir: BorrowedFd<'_>, rel: &str, limit: usize) -> Result<Vec<u8>, Errno> {
    let (parents, name) = match rel.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, rel),
    };
    let mut held: Option<OwnedFd> = None;
    for part in parents.into_iter().flat_map(|p| p.split('/')) {
        let base = held.as_ref().map_or(dir, AsFd::as_fd);
        held = Some(open_dir_at(base, OsStr::new(part))?);
    }
    let base = held.as_ref().map_or(dir, AsFd::as_fd);
    let Some((fd, _)) = open_regular_at(base, name)? else {
        return Err(Errno::INVAL);
    };
    let mut out = Vec::new();
    std::fs::File::from(fd)
        .take(u64::try_from(limit).unwrap_or(u64::MAX))
        .read_to_end(&mut out)
        .map_err(|e| e.raw_os_error().map_or(Errno::IO, Errno::from_raw_os_error))?;
    Ok(out)
}

/// Creates `..<timestamp>` (mode 0755 whatever the umask) and returns its name.
fn new_timestamp_dir(cx: &Ctx<'_>, root: BorrowedFd<'_>) -> Result<String, AtomicWriteError> {
    let now = chrono::Utc::now()
        .format("%Y_%m_%d_%H_%M_%S.%f")
        .to_string();
    for attempt in 0..100u32 {
        let name = if attempt == 0 {
            format!("..{now}")
        } else {
            format!("..{now}{attempt}")
        };
        match rustix::fs::mkdirat(root, name.as_str(), Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) => {
                let fd = open_dir_at(root, OsStr::new(&name))
                    .map_err(cx.err(format!("opening {name}")))?;
                exact_mode(&fd, DIR_MODE).map_err(cx.err(format!("chmod {name}")))?;
                return Ok(name);
            }
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(cx.err("creating the timestamped directory")(e)),
        }
    }
    Err(cx.err("creating the timestamped directory")(Errno::EXIST))
}

/// Sets the mode only when creation (through the umask) did not already give it.
fn exact_mode(fd: &OwnedFd, mode: u32) -> Result<(), Errno> {
    let st = rustix::fs::fstat(fd)?;
    if st.st_mode & 0o7777 != mode {
        rustix::fs::fchmod(fd, Mode::from_raw_mode(mode))?;
    }
    Ok(())
}

/// Writes every file under the (just created) `stamp` directory, each created with its final
/// mode, never through a link.
fn write_files(
    cx: &Ctx<'_>,
    root: BorrowedFd<'_>,
    stamp: &str,
    files: &BTreeMap<String, &FileProjection>,
) -> Result<(), AtomicWriteError> {
    let ts = open_dir_at(root, OsStr::new(stamp)).map_err(cx.err(format!("opening {stamp}")))?;
    for (rel, file) in files {
        let (parents, name) = match rel.rsplit_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, rel.as_str()),
        };
        let mut held: Option<OwnedFd> = None;
        for part in parents.into_iter().flat_map(|p| p.split('/')) {
            let base = held.as_ref().map_or(ts.as_fd(), AsFd::as_fd);
            let created = match rustix::fs::mkdirat(base, part, Mode::from_raw_mode(DIR_MODE)) {
                Ok(()) => true,
                Err(Errno::EXIST) => false,
                Err(e) => return Err(cx.err(format!("creating directory of {rel:?}"))(e)),
            };
            let sub = open_dir_at(base, OsStr::new(part))
                .map_err(cx.err(format!("opening directory of {rel:?}")))?;
            if created {
                exact_mode(&sub, DIR_MODE)
                    .map_err(cx.err(format!("chmod directory of {rel:?}")))?;
            }
            held = Some(sub);
        }
        let base = held.as_ref().map_or(ts.as_fd(), AsFd::as_fd);
        let mode = permission_bits(file.mode);
        let fd = rustix::fs::openat(
            base,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(cx.err(format!("creating {rel:?}")))?;
        exact_mode(&fd, mode).map_err(cx.err(format!("chmod {rel:?}")))?;
        let mut f = std::fs::File::from(fd);
        f.write_all(&file.data)
            .map_err(cx.io_err(format!("writing {rel:?}")))?;
        f.sync_all()
            .map_err(cx.io_err(format!("syncing {rel:?}")))?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "atomic_writer_tests.rs"]
mod tests;
