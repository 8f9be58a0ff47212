//! The kubelet's data directory tree (upstream `setupDataDirs`): `<root>`, `pods/`, `plugins/`,
//! `plugins_registry/`, `pod-resources/` 0750, `checkpoints/` 0700 and the pod logs root 0750.
//! Receives the two roots; emits directories. A directory this call creates gets exactly its
//! mode (created with it, corrected only when the umask narrowed it); an existing one is left as
//! the administrator made it, as upstream's `MkdirAll` does.
//!
//! Also [`tighten_pod_dirs`], once at start-up: the pod directories an older rkubelet made
//! with the umask's mode (0755, so any local user could read the Secret and ConfigMap payloads
//! and tokens under them) get upstream's 0750, never through a link.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fd::AsFd;
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
    let fd = crate::nofollow::open_dir_at(CWD, dir)?;
    if rustix::fs::fstat(&fd)?.st_mode & 0o7777 != mode {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    }
    Ok(())
}

/// The subdirectories of `<root>/pods/<uid>` upstream's `makePodDataDirs` makes 0750 (ours
/// adds `containers`, as the kubelet's `kuberuntime::sync` creates it).
pub const POD_SUBDIRS: [&str; 3] = ["volumes", "plugins", "containers"];

/// Takes every bit [`DATA_DIR_MODE`] does not have off `<root>/pods/<uid>` and its
/// [`POD_SUBDIRS`] (0755 becomes 0750; an administrator's narrower 0700 stays). Each directory
/// is opened `O_DIRECTORY|O_NOFOLLOW` from its parent's fd and changed through that fd: a link
/// or a file in the place of one is skipped, and nothing below these levels (the volumes, which
/// pods write) is looked at. Returns the directories changed; a failure on one pod directory is
/// logged and the others go on.
pub fn tighten_pod_dirs(root_dir: &Path) -> Vec<PathBuf> {
    let pods = root_dir.join("pods");
    let mut changed = Vec::new();
    let pods_fd = match crate::nofollow::open_dir_at(CWD, &pods) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return changed,
        Err(e) => {
            tracing::warn!(dir = %pods.display(), error = %e, "cannot check pod directory modes");
            return changed;
        }
    };
    let names = match crate::nofollow::list_dir(pods_fd.as_fd()) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(dir = %pods.display(), error = %e, "cannot list pod directories");
            return changed;
        }
    };
    for name in names {
        let pod_dir = pods.join(&name);
        let pod_fd = match crate::nofollow::open_dir_at(&pods_fd, name.as_os_str()) {
            Ok(fd) => fd,
            // A link or a file: not a pod directory of ours; never followed.
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => continue,
            Err(e) => {
                tracing::warn!(dir = %pod_dir.display(), error = %e, "cannot check pod directory mode");
                continue;
            }
        };
        match tighten(&pod_fd) {
            Ok(true) => changed.push(pod_dir.clone()),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(dir = %pod_dir.display(), error = %e, "cannot tighten pod directory mode")
            }
        }
        for sub in POD_SUBDIRS {
            let dir = pod_dir.join(sub);
            let result = crate::nofollow::open_dir_at(&pod_fd, sub).and_then(|fd| tighten(&fd));
            match result {
                Ok(true) => changed.push(dir),
                Ok(false)
                | Err(
                    rustix::io::Errno::NOENT | rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR,
                ) => {}
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot tighten pod directory mode")
                }
            }
        }
    }
    for dir in &changed {
        tracing::info!(dir = %dir.display(), "pod directory mode tightened to 0750 (made by an older rkubelet)");
    }
    changed
}

/// Clears the bits [`DATA_DIR_MODE`] lacks on the directory `fd`; `true` when it changed.
fn tighten(fd: &rustix::fd::OwnedFd) -> Result<bool, rustix::io::Errno> {
    let mode = rustix::fs::fstat(fd)?.st_mode & 0o7777;
    let want = mode & DATA_DIR_MODE;
    if mode == want {
        return Ok(false);
    }
    rustix::fs::fchmod(fd, Mode::from_raw_mode(want))?;
    Ok(true)
}

#[cfg(test)]
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

    #[test]
    fn pod_dirs_of_an_older_rkubelet_are_tightened_without_following_links() {
        use std::os::unix::fs::symlink;
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("kubelet");
        let pods = root.join("pods");
        let chmod = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        // An older rkubelet's pod: everything 0755 (umask 022), a payload file 0644 and a
        // pod-writable emptyDir 0777 below `volumes`.
        let old = pods.join("uid-old");
        let empty_dir = old.join("volumes/kubernetes.io~empty-dir/scratch");
        std::fs::create_dir_all(&empty_dir).unwrap();
        std::fs::create_dir_all(old.join("plugins")).unwrap();
        std::fs::create_dir_all(old.join("containers/app")).unwrap();
        let secret = old.join("volumes/kubernetes.io~secret/token");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("token"), "t").unwrap();
        for d in [
            &old,
            &old.join("volumes"),
            &old.join("plugins"),
            &old.join("containers"),
        ] {
            chmod(d, 0o755);
        }
        chmod(&empty_dir, 0o777);
        chmod(&secret.join("token"), 0o644);
        // An administrator's narrower mode stays; a link and a file in the pods dir are
        // skipped, and what a link points at is never changed.
        let strict = pods.join("uid-strict");
        std::fs::create_dir_all(&strict).unwrap();
        chmod(&strict, 0o700);
        let outside = base.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        chmod(&outside, 0o755);
        symlink(&outside, pods.join("uid-link")).unwrap();
        let outside_sub = base.path().join("outside-plugins");
        std::fs::create_dir(&outside_sub).unwrap();
        chmod(&outside_sub, 0o777);
        std::fs::create_dir(pods.join("uid-sublink")).unwrap();
        chmod(&pods.join("uid-sublink"), 0o750);
        symlink(&outside_sub, pods.join("uid-sublink/plugins")).unwrap();
        std::fs::write(pods.join("stray-file"), "x").unwrap();
        chmod(&pods.join("stray-file"), 0o644);

        let mut changed = tighten_pod_dirs(&root);
        changed.sort();
        assert_eq!(
            changed,
            [
                old.clone(),
                old.join("containers"),
                old.join("plugins"),
                old.join("volumes")
            ]
        );
        for d in [
            &old,
            &old.join("volumes"),
            &old.join("plugins"),
            &old.join("containers"),
        ] {
            assert_eq!(mode(d), 0o750, "{}", d.display());
        }
        // Below the pod's own levels nothing changes: the pod-writable volume and the payload
        // (now out of other users' reach through the 0750 directories above it).
        assert_eq!(mode(&empty_dir), 0o777);
        assert_eq!(mode(&secret.join("token")), 0o644);
        assert_eq!(mode(&strict), 0o700);
        assert_eq!(mode(&outside), 0o755);
        assert_eq!(mode(&outside_sub), 0o777);
        assert_eq!(mode(&pods.join("stray-file")), 0o644);
        // Idempotent, and a missing pods dir is nothing to do.
        assert!(tighten_pod_dirs(&root).is_empty());
        assert!(tighten_pod_dirs(&base.path().join("nowhere")).is_empty());
    }
}
