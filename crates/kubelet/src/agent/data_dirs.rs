//! The kubelet's data directory tree (upstream `setupDataDirs`): `<root>`, `pods/`, `plugins/`,
//! `plugins_registry/`, `pod-resources/` 0750, `checkpoints/` 0700 and the pod logs root 0750.
//! Receives the two roots; emits directories. A directory this call creates gets exactly its
//! mode (created with it, corrected only when the umask narrowed it); an existing one is left as
//! the administrator made it, as upstream's `MkdirAll` does.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, Mode};

/// Group-readable, no access for others (upstream's 0750).
pub const DATA_DIR_MODE: u32 = 0o750;
/// Checkpoint archives hold container memory: owner only (upstream's 0700).
pub const CHECKPOINTS_DIR_MODE: u32 = 0o700;

/// Every directory of the tree with its mode, parents first.
pub fn data_dirs(root_dir: &Path, pod_logs_dir: &Path) -> Vec<(PathBuf, u32)> {
    vec![
        (root_dir.to_path_buf(), DATA_DIR_MODE),
        (pod_logs_dir.to_path_buf(), DATA_DIR_MODE),
        (root_dir.join("pods"), DATA_DIR_MODE),
        (root_dir.join("plugins"), DATA_DIR_MODE),
        (root_dir.join("plugins_registry"), DATA_DIR_MODE),
        (root_dir.join("pod-resources"), DATA_DIR_MODE),
        (root_dir.join("checkpoints"), CHECKPOINTS_DIR_MODE),
    ]
}

/// Creates the tree; the first failure is returned with its path.
pub fn setup_data_dirs(
    root_dir: &Path,
    pod_logs_dir: &Path,
) -> Result<(), (PathBuf, std::io::Error)> {
    for (dir, mode) in data_dirs(root_dir, pod_logs_dir) {
        create_dir_with_mode(&dir, mode).map_err(|e| (dir, e))?;
    }
    Ok(())
}

/// `mkdir -p` with `mode` for every directory it creates (the last one set exactly, through
/// an fd opened without following links); an existing directory is not changed.
pub fn create_dir_with_mode(dir: &Path, mode: u32) -> std::io::Result<()> {
    if std::fs::symlink_metadata(dir).is_ok() {
        // Existing (or a link an administrator made): as upstream, only created ones get
        // the mode; `create` below still fails on a non-directory.
        return std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(dir);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)?;
    let fd = crate::fsat::open_dir_at(CWD, dir)?;
    if rustix::fs::fstat(&fd)?.st_mode & 0o7777 != mode {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn tree_is_created_with_upstream_modes() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("var/lib/kubelet");
        let logs = base.path().join("var/log/pods");
        setup_data_dirs(&root, &logs).unwrap();
        for (rel, want) in [
            ("var/lib/kubelet", 0o750),
            ("var/lib/kubelet/pods", 0o750),
            ("var/lib/kubelet/plugins", 0o750),
            ("var/lib/kubelet/plugins_registry", 0o750),
            ("var/lib/kubelet/pod-resources", 0o750),
            ("var/lib/kubelet/checkpoints", 0o700),
            ("var/log/pods", 0o750),
        ] {
            assert_eq!(mode(&base.path().join(rel)), want, "{rel}");
        }
        // Idempotent; existing directories keep what an administrator set.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        setup_data_dirs(&root, &logs).unwrap();
        assert_eq!(mode(&root), 0o755);
        assert_eq!(mode(&root.join("checkpoints")), 0o700);
    }

    #[test]
    fn a_file_in_the_way_is_an_error() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("kubelet");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("pods"), "x").unwrap();
        let (path, _) = setup_data_dirs(&root, &base.path().join("logs")).unwrap_err();
        assert_eq!(path, root.join("pods"));
    }
}
