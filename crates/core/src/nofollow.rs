//! No-follow, fd-relative file system helpers shared by everything that walks a tree a pod or
//! a container can write (volume walks, the atomic writer, subPath, removal, `/logs/`) and by
//! the kubelet's own data directories. Owns nothing; receives an open directory fd and a name;
//! emits fds opened without ever following a link in the name's place. Also the one way the
//! kubelet replaces a state file it reads back ([`atomic_write`]): the old content or the new,
//! never a torn one, whatever fails (a crash, a full disk) in between.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use rustix::fs::{Dir, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// How a directory is opened: read-only, never through a link in its place.
pub const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// How a file is opened for reading: never through a link in its place, never blocking on a
/// FIFO or device, never becoming a controlling terminal.
pub const FILE_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// Opens the directory `name` under `parent` (a path under `CWD`) without following a link
/// in its place.
pub fn open_dir_at<P: rustix::path::Arg>(parent: impl AsFd, name: P) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty())
}

/// Opens `name` under `dir` for reading with [`FILE_FLAGS`] and checks what was opened (it may
/// have been swapped since a stat): `Ok(None)` when it is not a regular file.
pub fn open_regular_at<P: rustix::path::Arg>(
    dir: impl AsFd,
    name: P,
) -> Result<Option<(OwnedFd, Stat)>, Errno> {
    let fd = rustix::fs::openat(dir, name, FILE_FLAGS, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    Ok((FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then_some((fd, st)))
}

/// What [`open_regular_by_reference`] found at a path.
#[derive(Debug)]
pub enum ByReference {
    /// The regular file, opened for reading.
    Opened(OwnedFd),
    /// Something else (a link, FIFO, device, socket, directory): nothing of it was opened.
    NotRegular(FileType),
    /// The inode reopened is not the one checked.
    Changed,
}

/// Opens the file at `path` for reading only if it is a regular file, without ever opening
/// anything else, not even non-blocking: the name is opened as a bare reference
/// (`O_PATH|O_NOFOLLOW`, which neither follows a link in its place, nor blocks on a FIFO, nor
/// runs a device's `open`), its type read from that reference, and the very inode checked then
/// opened for reading (`O_NONBLOCK|O_NOCTTY`) through `/proc/self/fd`, never through the name
/// again. (`O_NOFOLLOW` cannot be used there: `/proc/self/fd/N` is itself a link.)
pub fn open_regular_by_reference(path: &Path) -> Result<ByReference, Errno> {
    use std::os::fd::AsRawFd;
    let reference = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&reference)?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        return Ok(ByReference::NotRegular(kind));
    }
    let proc_path = format!("/proc/self/fd/{}", reference.as_raw_fd());
    let fd = rustix::fs::open(
        proc_path.as_str(),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let reopened = rustix::fs::fstat(&fd)?;
    if (reopened.st_dev, reopened.st_ino) != (st.st_dev, st.st_ino)
        || FileType::from_raw_mode(reopened.st_mode) != FileType::RegularFile
    {
        return Ok(ByReference::Changed);
    }
    Ok(ByReference::Opened(fd))
}

/// Entry names of `dir` (without `.` and `..`), listed before anything is changed.
pub fn list_dir(dir: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
    let mut names = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsString::from_vec(name.to_vec()));
        }
    }
    Ok(names)
}

/// How [`atomic_write`] leaves the file.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// Permission bits of the new file (set exactly, whatever the umask).
    pub mode: u32,
    /// Flush the file and the directory entry to the disk before returning (state the kubelet
    /// reads back after a crash or a power cut); without it the replacement is still atomic
    /// for readers but may be lost on a power cut (files rebuilt at every use).
    pub durable: bool,
}

impl WriteOptions {
    /// A state file the kubelet reads back: flushed to disk.
    pub const fn durable(mode: u32) -> Self {
        Self {
            mode,
            durable: true,
        }
    }
}

/// The steps of [`atomic_write`], named in its errors (and the points a test can fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    OpenDir,
    CreateTemp,
    Write,
    SyncFile,
    Rename,
    SyncDir,
}

impl Step {
    fn describe(self) -> &'static str {
        match self {
            Step::OpenDir => "opening the directory",
            Step::CreateTemp => "creating the temporary file",
            Step::Write => "writing the temporary file",
            Step::SyncFile => "flushing the temporary file",
            Step::Rename => "renaming the temporary file over it",
            Step::SyncDir => "flushing the directory",
        }
    }
}

/// Replaces `path` with a file holding `data`: a temporary file `.<name>.tmp` in the same
/// directory (a stale one removed first, then created with `O_EXCL | O_NOFOLLOW`, so nothing
/// planted there is followed or reused), written, flushed, renamed over `path` (which replaces
/// a link in `path`'s place rather than following it) and the directory flushed. Readers and a
/// restart after a crash at any point see the old content or the new one. On a failure the
/// temporary file is removed (a full disk gets its space back) and `path` is untouched; the
/// error keeps the `io::ErrorKind` (`StorageFull` on ENOSPC) and names the step that failed.
/// The directory's own path is followed: it is the operator's (a root dir may be a symlink).
pub fn atomic_write(path: &Path, data: &[u8], opts: WriteOptions) -> std::io::Result<()> {
    atomic_write_with(path, data, opts, &mut |_| Ok(()))
}

/// [`atomic_write`] with `before` called ahead of each step (a test fails or inspects there).
pub fn atomic_write_with(
    path: &Path,
    data: &[u8],
    opts: WriteOptions,
    before: &mut dyn FnMut(Step) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let fail = |step: Step, e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("{}: {e}", step.describe()))
    };
    let Some(name) = path.file_name() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "expected a path ending in a file name",
        ));
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let step = |s: Step, before: &mut dyn FnMut(Step) -> std::io::Result<()>| {
        before(s).map_err(|e| fail(s, e))
    };

    step(Step::OpenDir, before)?;
    let dir = rustix::fs::openat(
        rustix::fs::CWD,
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fail(Step::OpenDir, e.into()))?;

    step(Step::CreateTemp, before)?;
    match rustix::fs::unlinkat(&dir, &*tmp_name, rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(fail(Step::CreateTemp, e.into())),
    }
    let fd = rustix::fs::openat(
        &dir,
        &*tmp_name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(opts.mode & 0o7777),
    )
    .map_err(|e| fail(Step::CreateTemp, e.into()))?;
    let mut file = std::fs::File::from(fd);
    let filled = (|| {
        // The umask may have narrowed the mode asked for.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(opts.mode & 0o7777))
            .map_err(|e| fail(Step::CreateTemp, e.into()))?;
        step(Step::Write, before)?;
        file.write_all(data).map_err(|e| fail(Step::Write, e))?;
        if opts.durable {
            step(Step::SyncFile, before)?;
            file.sync_all().map_err(|e| fail(Step::SyncFile, e))?;
        }
        drop(file);
        step(Step::Rename, before)?;
        rustix::fs::renameat(&dir, &*tmp_name, &dir, name).map_err(|e| fail(Step::Rename, e.into()))
    })();
    if let Err(e) = filled {
        let _ = rustix::fs::unlinkat(&dir, &*tmp_name, rustix::fs::AtFlags::empty());
        return Err(e);
    }
    if opts.durable {
        step(Step::SyncDir, before)?;
        rustix::fs::fsync(&dir).map_err(|e| fail(Step::SyncDir, e.into()))?;
    }
    Ok(())
}

#[cfg(any(test, feature = "test-util"))]
#[path = "nofollow_testutil.rs"]
#[allow(clippy::unwrap_used)]
pub mod testutil;

#[cfg(test)]
#[path = "nofollow_tests.rs"]
mod tests;
