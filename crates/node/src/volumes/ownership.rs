//! fsGroup ownership of volume contents (upstream `volume.SetVolumeOwnership`): every file and
//! directory gets the pod's fsGroup as its group, group read/write (read-only for read-only
//! volumes) and, for directories, group execute plus setgid so new files inherit the group.
//! `fsGroupChangePolicy: OnRootMismatch` skips the walk when the volume root already matches.
//! Receives a volume directory whose contents a container may have written: the walk is by fd,
//! never follows a link (links get their group with `lchown` semantics only), never leaves the
//! volume's filesystem, and gives FIFOs, sockets and devices their group only (they are never
//! opened, so their modes stay).

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Gid, Mode, Stat};
use tracing::warn;

use crate::nofollow::{FILE_FLAGS, list_dir, open_dir_at};

const RW_MASK: u32 = 0o660;
const RO_MASK: u32 = 0o440;
const EXEC_MASK: u32 = 0o110;
const SETGID: u32 = 0o2000;
/// Deeper trees are left as they are below this depth (logged), not walked.
const MAX_DEPTH: usize = 1024;

/// Applies `fs_group` to everything under `dir`.
pub fn set_volume_ownership(
    dir: &Path,
    fs_group: u32,
    change_policy: Option<&str>,
    read_only: bool,
) -> Result<(), String> {
    let mask = if read_only { RO_MASK } else { RW_MASK };
    let err = |what: &str, e: rustix::io::Errno| format!("{what} {}: {e}", dir.display());
    let root = open_dir_at(rustix::fs::CWD, dir).map_err(|e| err("opening", e))?;
    let st = rustix::fs::fstat(&root).map_err(|e| err("stat", e))?;
    if change_policy == Some("OnRootMismatch") && root_matches(&st, fs_group, mask) {
        return Ok(());
    }
    let gid = Gid::from_raw(fs_group);
    apply(root.as_fd(), &st, gid, mask).map_err(|e| err("chown/chmod", e))?;
    walk(dir, root.as_fd(), st.st_dev, gid, mask, 0)
}

fn root_matches(st: &Stat, gid: u32, mask: u32) -> bool {
    let want = mask | EXEC_MASK | SETGID;
    st.st_gid == gid && st.st_mode & want == want
}

/// Group and mode of an opened file or directory.
fn apply(fd: BorrowedFd<'_>, st: &Stat, gid: Gid, mask: u32) -> Result<(), rustix::io::Errno> {
    rustix::fs::fchown(fd, None, Some(gid))?;
    let mut mode = st.st_mode | mask;
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        mode |= EXEC_MASK | SETGID;
    }
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & 0o7777))
}

fn walk(
    root: &Path,
    dir: BorrowedFd<'_>,
    dev: u64,
    gid: Gid,
    mask: u32,
    depth: usize,
) -> Result<(), String> {
    let err = |name: &OsStr, e: rustix::io::Errno| {
        format!("{}: {}: {e}", root.display(), Path::new(name).display())
    };
    if depth >= MAX_DEPTH {
        warn!(volume = %root.display(), "fsGroup ownership: tree deeper than {MAX_DEPTH} levels left as is");
        return Ok(());
    }
    for name in list_dir(dir).map_err(|e| format!("listing {}: {e}", root.display()))? {
        let Ok(st) = rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue; // removed meanwhile
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                let Ok(sub) = open_dir_at(dir, &name) else {
                    continue; // replaced meanwhile (a link is refused, not followed)
                };
                let st = rustix::fs::fstat(&sub).map_err(|e| err(&name, e))?;
                if st.st_dev != dev {
                    continue; // a mount point: not this volume's
                }
                apply(sub.as_fd(), &st, gid, mask).map_err(|e| err(&name, e))?;
                walk(root, sub.as_fd(), dev, gid, mask, depth + 1)?;
            }
            FileType::RegularFile => {
                let Ok(fd) = rustix::fs::openat(dir, &name, FILE_FLAGS, Mode::empty()) else {
                    continue;
                };
                let st = rustix::fs::fstat(&fd).map_err(|e| err(&name, e))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                    continue;
                }
                apply(fd.as_fd(), &st, gid, mask).map_err(|e| err(&name, e))?;
            }
            // Links (and FIFOs, sockets, devices, which are never opened): group only, on
            // the entry itself.
            _ => rustix::fs::chownat(dir, &name, None, Some(gid), AtFlags::SYMLINK_NOFOLLOW)
                .or_else(|e| {
                    if e == rustix::io::Errno::NOENT {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .map_err(|e| err(&name, e))?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    #[test]
    fn group_and_modes_applied_recursively() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("vol");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/f"), "x").unwrap();
        std::fs::set_permissions(d.join("sub/f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        set_volume_ownership(&d, 4242, None, false).unwrap();
        let f = std::fs::metadata(d.join("sub/f")).unwrap();
        assert_eq!(f.gid(), 4242);
        assert_eq!(f.permissions().mode() & 0o7777, 0o660);
        let sub = std::fs::metadata(d.join("sub")).unwrap();
        assert_eq!(sub.permissions().mode() & SETGID, SETGID);
        let st = rustix::fs::stat(&d).unwrap();
        assert!(root_matches(&st, 4242, RW_MASK));
        // OnRootMismatch leaves a matching volume alone.
        std::fs::set_permissions(d.join("sub/f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        set_volume_ownership(&d, 4242, Some("OnRootMismatch"), false).unwrap();
        assert_eq!(
            std::fs::metadata(d.join("sub/f"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        set_volume_ownership(&d, 4242, Some("Always"), true).unwrap();
        assert_eq!(
            std::fs::metadata(d.join("sub/f"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o640
        );
    }

    #[test]
    fn links_in_the_volume_are_never_followed() {
        let base = tempfile::tempdir().unwrap();
        let canary = base.path().join("canary");
        std::fs::create_dir(&canary).unwrap();
        std::fs::write(canary.join("f"), "x").unwrap();
        std::fs::set_permissions(canary.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o700)).unwrap();
        let d = base.path().join("vol");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::os::unix::fs::symlink(canary.join("f"), d.join("file-link")).unwrap();
        std::os::unix::fs::symlink(&canary, d.join("sub/dir-link")).unwrap();
        let before = (
            std::fs::metadata(&canary).unwrap(),
            std::fs::metadata(canary.join("f")).unwrap(),
        );
        set_volume_ownership(&d, 4343, None, false).unwrap();
        for (path, was) in [(canary.clone(), &before.0), (canary.join("f"), &before.1)] {
            let now = std::fs::metadata(&path).unwrap();
            assert_eq!(now.gid(), was.gid(), "{path:?}");
            assert_eq!(now.mode(), was.mode(), "{path:?}");
        }
        // The links themselves carry the group.
        assert_eq!(
            std::fs::symlink_metadata(d.join("file-link"))
                .unwrap()
                .gid(),
            4343
        );
        assert_eq!(
            std::fs::symlink_metadata(d.join("sub/dir-link"))
                .unwrap()
                .gid(),
            4343
        );
        assert_eq!(std::fs::metadata(d.join("sub")).unwrap().gid(), 4343);
        // A link in place of the volume root itself is refused.
        std::os::unix::fs::symlink(&canary, base.path().join("vol2")).unwrap();
        assert!(set_volume_ownership(&base.path().join("vol2"), 4343, None, false).is_err());
        assert_eq!(std::fs::metadata(&canary).unwrap().gid(), before.0.gid());
    }
}
