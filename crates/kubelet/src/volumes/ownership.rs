//! fsGroup ownership of volume contents (upstream `volume.SetVolumeOwnership`): every file and
//! directory gets the pod's fsGroup as its group, group read/write (read-only for read-only
//! volumes) and, for directories, group execute plus setgid so new files inherit the group.
//! `fsGroupChangePolicy: OnRootMismatch` skips the walk when the volume root already matches.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

const RW_MASK: u32 = 0o660;
const RO_MASK: u32 = 0o440;
const EXEC_MASK: u32 = 0o110;
const SETGID: u32 = 0o2000;

/// Applies `fs_group` to everything under `dir`.
pub fn set_volume_ownership(
    dir: &Path,
    fs_group: u32,
    change_policy: Option<&str>,
    read_only: bool,
) -> Result<(), String> {
    let mask = if read_only { RO_MASK } else { RW_MASK };
    if change_policy == Some("OnRootMismatch") && root_matches(dir, fs_group, mask) {
        return Ok(());
    }
    walk(dir, fs_group, mask)
}

fn root_matches(dir: &Path, gid: u32, mask: u32) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| {
        let want = mask | EXEC_MASK | SETGID;
        m.gid() == gid && m.permissions().mode() & want == want
    })
}

fn walk(path: &Path, gid: u32, mask: u32) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::os::unix::fs::lchown(path, None, Some(gid))
        .map_err(|e| format!("chown {}: {e}", path.display()))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mut mode = meta.permissions().mode() | mask;
    if meta.is_dir() {
        mode |= EXEC_MASK | SETGID;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    if meta.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for e in entries.flatten() {
            walk(&e.path(), gid, mask)?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
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
        assert!(root_matches(&d, 4242, RW_MASK));
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
}
