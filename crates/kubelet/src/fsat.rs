//! No-follow, fd-relative file system helpers shared by everything that walks a tree a pod or
//! a container can write (volume walks, the atomic writer, subPath, removal, `/logs/`) and by
//! the kubelet's own data directories. Owns nothing; receives an open directory fd and a name;
//! emits fds opened without ever following a link in the name's place.

use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;

use rustix::fs::{Dir, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// How a directory is opened: read-only, never through a link in its place.
pub(crate) const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// How a file is opened for reading: never through a link in its place, never blocking on a
/// FIFO or device, never becoming a controlling terminal.
pub(crate) const FILE_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// Opens the directory `name` under `parent` (a path under `CWD`) without following a link
/// in its place.
pub(crate) fn open_dir_at<P: rustix::path::Arg>(
    parent: impl AsFd,
    name: P,
) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty())
}

/// Opens `name` under `dir` for reading with [`FILE_FLAGS`] and checks what was opened (it may
/// have been swapped since a stat): `Ok(None)` when it is not a regular file.
pub(crate) fn open_regular_at<P: rustix::path::Arg>(
    dir: impl AsFd,
    name: P,
) -> Result<Option<(OwnedFd, Stat)>, Errno> {
    let fd = rustix::fs::openat(dir, name, FILE_FLAGS, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    Ok((FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then_some((fd, st)))
}

/// Entry names of `dir` (without `.` and `..`), listed before anything is changed.
pub(crate) fn list_dir(dir: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
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
