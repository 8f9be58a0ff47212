//! Safe subPath mounts (upstream `subpath_linux.go`): owns `<pod dir>/volume-subpaths/`.
//! Receives a set-up volume's host directory and a subPath (or an expanded subPathExpr);
//! resolves it from an fd of the volume root one component at a time with
//! `openat(O_NOFOLLOW)`, creating missing directories with `mkdirat` relative to their parent;
//! bind-mounts the opened object (`/proc/<pid>/fd/<n>`, never the path string) onto
//! `volume-subpaths/<volume>/<container>/<index>` and emits that target as the CRI mount's host
//! path. Also tears those bind mounts down with the pod.
//!
//! What a container can plant in its volume is hostile: a symbolic link is read (the link the
//! walk opened, with `readlinkat`) and followed only while it stays inside the volume, as
//! upstream's `EvalSymlinks` + `PathWithinBase` allow (configMap keys are links into `..data`);
//! an absolute target or a `..` above the volume root is refused. Since the mount source is the
//! already-open fd, swapping a component for a link between the walk and the mount changes
//! nothing (CVE-2017-1002101, CVE-2021-25741).
//!
//! Depth is hostile too: a subPath (or an expanded subPathExpr) is bounded by `PATH_MAX`
//! ([`MAX_SUB_PATH_BYTES`], [`MAX_SUB_PATH_DEPTH`]) before anything is opened, and so is the
//! path a resolution walks through links; the walk holds at most two fds and one name per
//! level, whatever the depth.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use tracing::{debug, warn};

use super::Mounter;
use crate::nofollow::open_dir_at;

/// `<pod dir>/volume-subpaths`.
pub const SUBPATHS_DIR: &str = "volume-subpaths";

/// Symbolic links followed in one resolution before giving up (the kernel's `MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;

/// The longest subPath (after subPathExpr expansion), and the longest path a resolution may
/// walk below the volume root: `PATH_MAX` (4096, with its NUL), where upstream's walk of the
/// host path fails with `ENAMETOOLONG`. Upstream counts the volume's own host path too; this
/// bound counts only the part below the volume root, so nothing upstream accepts is refused.
pub const MAX_SUB_PATH_BYTES: usize = 4095;

/// The most levels a subPath (or a resolution) may go below the volume root: as many
/// one-letter names as fit in [`MAX_SUB_PATH_BYTES`].
pub const MAX_SUB_PATH_DEPTH: usize = MAX_SUB_PATH_BYTES / 2 + 1;

#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    /// Upstream `makeMounts` wording (shown to the user as is).
    #[error("error SubPath `{0}` must not be an absolute path")]
    Absolute(String),
    /// Upstream `makeMounts` + `ValidatePathNoBacksteps` wording.
    #[error("unable to provision SubPath `{0}`: must not contain '..'")]
    Backsteps(String),
    /// A subPath longer than a path can be (the value itself is not repeated: it may be huge).
    #[error(
        "subPath is {bytes} bytes long in {depth} levels; at most {MAX_SUB_PATH_BYTES} bytes and {MAX_SUB_PATH_DEPTH} levels are allowed (PATH_MAX)"
    )]
    TooLong { bytes: usize, depth: usize },
    /// [`SubPathError::TooLong`] of one container's volumeMount (what the user is shown).
    #[error(
        "{field} of volumeMount {volume:?} of container {container:?} is {bytes} bytes long in {depth} levels; at most {MAX_SUB_PATH_BYTES} bytes and {MAX_SUB_PATH_DEPTH} levels are allowed (PATH_MAX)"
    )]
    MountTooLong {
        /// `subPath`, or `subPathExpr` (before or after expansion).
        field: &'static str,
        volume: String,
        container: String,
        bytes: usize,
        depth: usize,
    },
    /// Links inside the volume led the walk deeper than a subPath may go.
    #[error(
        "subpath under {path} resolves to {bytes} bytes in {depth} levels; at most {MAX_SUB_PATH_BYTES} bytes and {MAX_SUB_PATH_DEPTH} levels are allowed (PATH_MAX)"
    )]
    ResolvedTooLong {
        path: PathBuf,
        bytes: usize,
        depth: usize,
    },
    /// A directory the walk came through was moved while a link's `..` climbed back to it.
    #[error("subpath directory {0} was moved during resolution")]
    Moved(PathBuf),
    #[error("cannot open volume directory {path}: {source}")]
    OpenRoot { path: PathBuf, source: Errno },
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: Errno },
    /// A missing directory could not be created (upstream reports it apart).
    #[error("cannot create directory {path}: {source}")]
    Create { path: PathBuf, source: Errno },
    #[error("subpath {path} is outside of the volume (symbolic link to {target:?})")]
    Escapes { path: PathBuf, target: String },
    #[error("too many levels of symbolic links in subpath {0}")]
    Loop(PathBuf),
    #[error("{0} is not a directory")]
    NotDir(PathBuf),
    #[error("{what} {name:?} cannot be used as a directory name")]
    BadName { what: &'static str, name: String },
    #[error("error checking subpath mount {path}: {source}")]
    Target {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("error mounting {path}: {message}")]
    Mount { path: PathBuf, message: String },
    #[error("error unmounting {path}: {message}")]
    Unmount { path: PathBuf, message: String },
    #[error("error cleaning subpath mount {path}: {source}")]
    Clean {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("subpath resolution task failed: {0}")]
    Task(String),
    /// A subPathExpr that could not be expanded (upstream's wording).
    #[error(transparent)]
    Expand(#[from] crate::env::EnvError),
}

impl SubPathError {
    /// A missing directory could not be created (upstream's separate user-facing message).
    pub fn is_create(&self) -> bool {
        matches!(self, Self::Create { .. })
    }
}

/// `(bytes, levels)` of a subPath when it is longer than [`MAX_SUB_PATH_BYTES`] or deeper than
/// [`MAX_SUB_PATH_DEPTH`] (levels are its names other than `.`). Linear in the length, so a
/// 120 KB field is refused in microseconds.
pub fn exceeds_bounds(sub: &str) -> Option<(usize, usize)> {
    let depth = sub
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .count();
    (sub.len() > MAX_SUB_PATH_BYTES || depth > MAX_SUB_PATH_DEPTH).then_some((sub.len(), depth))
}

/// [`validate`] for one container's volumeMount: a subPath (or expanded subPathExpr) past the
/// bounds is refused with a message naming the field, the volumeMount, the container and the
/// limit.
pub fn validate_mount(
    sub: &str,
    field: &'static str,
    volume: &str,
    container: &str,
) -> Result<(), SubPathError> {
    if let Some((bytes, depth)) = exceeds_bounds(sub) {
        return Err(SubPathError::MountTooLong {
            field,
            volume: volume.to_owned(),
            container: container.to_owned(),
            bytes,
            depth,
        });
    }
    validate(sub)
}

/// Expands a volumeMount's subPathExpr with the container's environment within the bounds: an
/// expression already longer than [`MAX_SUB_PATH_BYTES`] is refused before expanding, and each
/// value is cut just past the bound first (a value that long makes any expansion using it too
/// long anyway), so a short expression repeating a huge variable cannot expand to gigabytes.
/// The expansion is then bounded by [`validate_mount`] like a subPath.
pub fn expand_expr(
    expr: &str,
    env: &[(String, String)],
    volume: &str,
    container: &str,
) -> Result<String, SubPathError> {
    if let Some((bytes, depth)) = exceeds_bounds(expr) {
        return Err(SubPathError::MountTooLong {
            field: "subPathExpr",
            volume: volume.to_owned(),
            container: container.to_owned(),
            bytes,
            depth,
        });
    }
    let cut = |v: &str| -> String {
        let end = (MAX_SUB_PATH_BYTES + 1..=v.len())
            .find(|i| v.is_char_boundary(*i))
            .unwrap_or(v.len());
        v[..end].to_owned()
    };
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), cut(v))).collect();
    let sub = crate::env::expand_sub_path_expr(expr, &env)?;
    validate_mount(&sub, "subPathExpr", volume, container)?;
    Ok(sub)
}

/// Refuses what upstream `makeMounts` refuses before touching the disk: an absolute subPath or
/// one with a `..` component; and one longer than a path can be (checked first, so a huge
/// value is never copied into a message).
pub fn validate(sub: &str) -> Result<(), SubPathError> {
    if let Some((bytes, depth)) = exceeds_bounds(sub) {
        return Err(SubPathError::TooLong { bytes, depth });
    }
    if Path::new(sub).is_absolute() {
        return Err(SubPathError::Absolute(sub.to_owned()));
    }
    if sub.split('/').any(|part| part == "..") {
        return Err(SubPathError::Backsteps(sub.to_owned()));
    }
    Ok(())
}

/// A subPath opened inside its volume: the fd pins the object that will be mounted.
#[derive(Debug)]
pub struct Resolved {
    fd: OwnedFd,
    is_dir: bool,
    dev: u64,
    ino: u64,
    /// Where the walk found it (for messages only; never opened again).
    path: PathBuf,
}

impl Resolved {
    /// `/proc/<pid>/fd/<n>`: names the open object itself, whatever happens to its path (the
    /// kubelet's pid, not `self`, so an external `mount` process resolves it the same way).
    pub fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.fd.as_raw_fd()
        ))
    }

    pub fn is_dir(&self) -> bool {
        self.is_dir
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Opens `sub` under `volume_root` without ever leaving it (upstream `doSafeOpen` after
/// `SafeMakeDir`): every component is opened with `O_PATH|O_NOFOLLOW` relative to its parent's
/// fd; a symbolic link is read and spliced into the remaining components when it is relative
/// and stays inside the volume, refused otherwise; a missing component is created as a
/// directory with the volume root's mode. The last component may be any file type.
///
/// The walk holds two fds at most (the directory it is in and the entry it opens) and one name
/// and inode per level; a link's `..` reopens the parent through the kernel's `..` and checks
/// it is the directory the walk came through. The path walked so far is bounded like the
/// subPath itself ([`MAX_SUB_PATH_BYTES`], [`MAX_SUB_PATH_DEPTH`]): links cannot grow it past
/// what upstream's `PATH_MAX`-bound walk would reach either.
pub fn resolve(volume_root: &Path, sub: &str) -> Result<Resolved, SubPathError> {
    resolve_walk(volume_root, sub).map(|(r, _)| r)
}

/// The levels of a resolution below the volume root, and the one directory fd it holds.
struct Walk {
    root_path: PathBuf,
    root_id: (u64, u64),
    /// Name and `(dev, ino)` of each directory entered below the root.
    levels: Vec<(OsString, (u64, u64))>,
    /// Bytes of the levels' names joined with `/`.
    bytes: usize,
    /// The directory at the bottom of `levels` (the root when there are none).
    dir: OwnedFd,
    /// The most fds the walk held at once (a test's witness).
    peak_fds: usize,
}

impl Walk {
    /// Where the walk is, or `name` below it (for messages only).
    fn path(&self, name: Option<&OsStr>) -> PathBuf {
        let mut p = self.root_path.clone();
        for (level, _) in &self.levels {
            p.push(level);
        }
        if let Some(name) = name {
            p.push(name);
        }
        p
    }

    /// `(bytes, depth)` of the path to `name` below the walk, refused past the bounds (before
    /// anything is opened or created there).
    fn child_within_bounds(&self, name: &OsStr) -> Result<(usize, usize), SubPathError> {
        let bytes = self.bytes + usize::from(!self.levels.is_empty()) + name.len();
        let depth = self.levels.len() + 1;
        if bytes > MAX_SUB_PATH_BYTES || depth > MAX_SUB_PATH_DEPTH {
            return Err(SubPathError::ResolvedTooLong {
                path: self.root_path.clone(),
                bytes,
                depth,
            });
        }
        Ok((bytes, depth))
    }

    /// Enters the directory `name` (opened as `fd`, `id`).
    fn enter(&mut self, name: OsString, fd: OwnedFd, id: (u64, u64)) -> Result<(), SubPathError> {
        let (bytes, _) = self.child_within_bounds(&name)?;
        self.bytes = bytes;
        self.levels.push((name, id));
        self.dir = fd;
        Ok(())
    }

    /// Goes back up one level through `..`, which must be the directory the walk came
    /// through (a directory moved meanwhile is refused); above the root is refused.
    fn leave(&mut self) -> Result<(), SubPathError> {
        let Some((name, _)) = self.levels.pop() else {
            return Err(SubPathError::Escapes {
                path: self.root_path.clone(),
                target: "..".into(),
            });
        };
        self.bytes = self
            .bytes
            .saturating_sub(name.len() + usize::from(!self.levels.is_empty()));
        let expected = self.levels.last().map_or(self.root_id, |(_, id)| *id);
        let path = self.path(None);
        let up = rustix::fs::openat(
            &self.dir,
            "..",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|source| SubPathError::Open {
            path: path.clone(),
            source,
        })?;
        self.peak_fds = self.peak_fds.max(2);
        let st = rustix::fs::fstat(&up).map_err(|source| SubPathError::Open {
            path: path.clone(),
            source,
        })?;
        if (st.st_dev, st.st_ino) != expected {
            return Err(SubPathError::Moved(path));
        }
        self.dir = up;
        Ok(())
    }
}

/// [`resolve`], also answering the most fds the walk held at once.
fn resolve_walk(volume_root: &Path, sub: &str) -> Result<(Resolved, usize), SubPathError> {
    validate(sub)?;
    // The volume root is the kubelet's (or the hostPath the pod named): resolved once, as
    // upstream's `EvalSymlinks(volumePath)`, then never looked up by path again.
    let root_path = std::fs::canonicalize(volume_root).map_err(|e| SubPathError::OpenRoot {
        path: volume_root.to_path_buf(),
        source: Errno::from_io_error(&e).unwrap_or(Errno::IO),
    })?;
    let root = rustix::fs::open(
        &root_path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| SubPathError::OpenRoot {
        path: root_path.clone(),
        source,
    })?;
    let root_stat = rustix::fs::fstat(&root).map_err(|source| SubPathError::OpenRoot {
        path: root_path.clone(),
        source,
    })?;
    // Upstream creates missing directories with the volume root's permissions (`GetMode`).
    let dir_mode = Mode::from_raw_mode(root_stat.st_mode) & Mode::from_raw_mode(0o7777);

    let mut walk = Walk {
        root_path,
        root_id: (root_stat.st_dev, root_stat.st_ino),
        levels: Vec::new(),
        bytes: 0,
        dir: root,
        peak_fds: 1,
    };
    let mut pending: VecDeque<OsString> = components(OsStr::new(sub));
    let mut links = 0;
    let mut last: Option<(OwnedFd, OsString)> = None;

    while let Some(name) = pending.pop_front() {
        if let Some((_, name)) = last.take() {
            // A non-directory with components left under it.
            return Err(SubPathError::NotDir(walk.path(Some(&name))));
        }
        if name == ".." {
            walk.leave()?;
            continue;
        }
        walk.child_within_bounds(&name)?;
        let fd = match rustix::fs::openat(
            &walk.dir,
            name.as_os_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => create_dir(&walk.dir, &name, &walk.path(Some(&name)), dir_mode)?,
            Err(source) => {
                return Err(SubPathError::Open {
                    path: walk.path(Some(&name)),
                    source,
                });
            }
        };
        walk.peak_fds = walk.peak_fds.max(2);
        let st = rustix::fs::fstat(&fd).map_err(|source| SubPathError::Open {
            path: walk.path(Some(&name)),
            source,
        })?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                let path = walk.path(Some(&name));
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(SubPathError::Loop(path));
                }
                // The link this walk opened, not whatever the name points at by now.
                let target = rustix::fs::readlinkat(&fd, "", Vec::new()).map_err(|source| {
                    SubPathError::Open {
                        path: path.clone(),
                        source,
                    }
                })?;
                let target = OsStr::from_bytes(target.as_bytes());
                if target.is_empty() || Path::new(target).is_absolute() {
                    return Err(SubPathError::Escapes {
                        path,
                        target: target.to_string_lossy().into_owned(),
                    });
                }
                debug!(link = %path.display(), target = %target.to_string_lossy(), "subpath follows a link inside the volume");
                for c in components(target).into_iter().rev() {
                    pending.push_front(c);
                }
            }
            FileType::Directory => walk.enter(name, fd, (st.st_dev, st.st_ino))?,
            _ => last = Some((fd, name)),
        }
    }
    let peak_fds = walk.peak_fds;
    let (fd, path, is_dir) = match last {
        Some((fd, name)) => {
            let path = walk.path(Some(&name));
            (fd, path, false)
        }
        None => {
            let path = walk.path(None);
            (walk.dir, path, true)
        }
    };
    let st = rustix::fs::fstat(&fd).map_err(|source| SubPathError::Open {
        path: path.clone(),
        source,
    })?;
    let resolved = Resolved {
        fd,
        is_dir,
        dev: st.st_dev,
        ino: st.st_ino,
        path,
    };
    Ok((resolved, peak_fds))
}

/// Path components of `p` (`.` and empty ones dropped; `..` kept for the walk to handle).
fn components(p: &OsStr) -> VecDeque<OsString> {
    p.as_bytes()
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(|c| OsStr::from_bytes(c).to_os_string())
        .collect()
}

/// `mkdirat` relative to the parent fd, then the new directory is opened without following a
/// link (whatever replaced it meanwhile is either refused or an object the pod already owns)
/// and given `mode` (the umask narrowed `mkdirat`'s), as upstream `doSafeMakeDir`.
fn create_dir(
    parent: &OwnedFd,
    name: &OsStr,
    path: &Path,
    mode: Mode,
) -> Result<OwnedFd, SubPathError> {
    match rustix::fs::mkdirat(parent, name, mode) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(source) => {
            return Err(SubPathError::Create {
                path: path.to_path_buf(),
                source,
            });
        }
    }
    let dir = open_dir_at(parent, name).map_err(|source| SubPathError::Create {
        path: path.to_path_buf(),
        source,
    })?;
    rustix::fs::fchmod(&dir, mode).map_err(|source| SubPathError::Create {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(dir)
}

/// `<pod dir>/volume-subpaths/<volume>/<container>/<index>` (upstream `getSubpathBindTarget`).
pub fn bind_target(
    pod_dir: &Path,
    volume: &str,
    container: &str,
    index: usize,
) -> Result<PathBuf, SubPathError> {
    for (what, name) in [("volume name", volume), ("container name", container)] {
        let single = Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if name.is_empty() || name.contains('/') || !single {
            return Err(SubPathError::BadName {
                what,
                name: name.to_owned(),
            });
        }
    }
    Ok(pod_dir
        .join(SUBPATHS_DIR)
        .join(volume)
        .join(container)
        .join(index.to_string()))
}

/// One volumeMount with a subPath.
#[derive(Debug, Clone, Copy)]
pub struct SubPathMount<'a> {
    pub pod_dir: &'a Path,
    /// The pod's volume name.
    pub volume: &'a str,
    /// The set-up volume's host directory.
    pub volume_path: &'a Path,
    pub container: &'a str,
    /// The volumeMount's index in the container's volumeMounts.
    pub index: usize,
    /// Already validated and expanded.
    pub sub_path: &'a str,
}

/// Resolves the subPath and bind-mounts it onto its target (upstream `doBindSubPath`); returns
/// the target, the host path to hand to the runtime. A target already mounted with the same
/// object (a container restart) is reused; one mounted with something else is replaced.
pub async fn prepare(
    mounter: &dyn Mounter,
    req: &SubPathMount<'_>,
) -> Result<PathBuf, SubPathError> {
    let target = bind_target(req.pod_dir, req.volume, req.container, req.index)?;
    let (root, sub) = (req.volume_path.to_path_buf(), req.sub_path.to_owned());
    let resolved = tokio::task::spawn_blocking(move || resolve(&root, &sub))
        .await
        .map_err(|e| SubPathError::Task(e.to_string()))??;

    if mounter.is_mount_point(&target) {
        let mounted =
            std::fs::symlink_metadata(&target).map_err(|source| SubPathError::Target {
                path: target.clone(),
                source,
            })?;
        if (mounted.dev(), mounted.ino()) == (resolved.dev, resolved.ino) {
            debug!(target = %target.display(), "subpath already mounted");
            return Ok(target);
        }
        mounter
            .unmount(&target)
            .await
            .map_err(|message| SubPathError::Unmount {
                path: target.clone(),
                message,
            })?;
    }
    let (made, is_dir) = (target.clone(), resolved.is_dir);
    tokio::task::spawn_blocking(move || make_target(&made, is_dir))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
        .map_err(|source| SubPathError::Target {
            path: target.clone(),
            source,
        })?;
    // The fd stays open (in `resolved`) until the mount returned.
    let source = resolved.proc_path();
    debug!(source = %source.display(), subpath = %resolved.path.display(), target = %target.display(), "bind-mounting subpath");
    if let Err(message) = mounter.bind_mount(&source, &target).await {
        if let Err(e) = remove_target(&target) {
            warn!(target = %target.display(), error = %e, "removing the subpath mount target after a failed mount");
        }
        return Err(SubPathError::Mount {
            path: resolved.path.clone(),
            message,
        });
    }
    drop(resolved);
    Ok(target)
}

/// An empty directory (0750) or file (0640) matching the source's type, as upstream
/// `prepareSubpathTarget` (a file serves any non-directory source). A leftover of the other
/// type (the subPath changed type since) is replaced.
fn make_target(target: &Path, is_dir: bool) -> std::io::Result<()> {
    if let Some(parent) = target.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)?;
    }
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() == is_dir && (is_dir || m.is_file()) => return Ok(()),
        Ok(_) => remove_target(target)?,
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if is_dir {
        std::fs::DirBuilder::new().mode(0o750).create(target)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(target)
            .map(drop)
    }
}

/// Removes an unmounted target: an empty directory or a file, never anything recursively.
fn remove_target(target: &Path) -> std::io::Result<()> {
    let res = match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() => std::fs::remove_dir(target),
        Ok(_) => std::fs::remove_file(target),
        Err(e) => Err(e),
    };
    match res {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Unmounts and removes every subpath bind mount of a pod (upstream `cleanSubPaths`, for all
/// volumes): `volume-subpaths/<volume>/<container>/<index>` is unmounted until it is no mount
/// point, then removed as an empty directory or file (never recursively, so nothing is
/// deleted through a mount that would not go); the emptied directories go too. Continues past
/// failures and returns the first.
pub async fn clean_sub_paths(mounter: &dyn Mounter, pod_dir: &Path) -> Result<(), SubPathError> {
    let base = pod_dir.join(SUBPATHS_DIR);
    let mut first_err = None;
    for volume_dir in dirs_in(&base, &mut first_err) {
        for container_dir in dirs_in(&volume_dir, &mut first_err) {
            let entries = match std::fs::read_dir(&container_dir) {
                Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
                Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
                Err(source) => {
                    first_err.get_or_insert(SubPathError::Clean {
                        path: container_dir.clone(),
                        source,
                    });
                    continue;
                }
            };
            for target in entries {
                if let Err(e) = clean_one(mounter, &target).await {
                    warn!(target = %target.display(), error = %e, "cleaning a subpath mount failed");
                    first_err.get_or_insert(e);
                }
            }
            remove_empty_dir(&container_dir, &mut first_err);
        }
        remove_empty_dir(&volume_dir, &mut first_err);
    }
    remove_empty_dir(&base, &mut first_err);
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Unmounts (stacked mounts included) and removes one subpath target.
async fn clean_one(mounter: &dyn Mounter, target: &Path) -> Result<(), SubPathError> {
    let mut tries = 0;
    while mounter.is_mount_point(target) {
        tries += 1;
        if tries > 8 {
            return Err(SubPathError::Unmount {
                path: target.to_path_buf(),
                message: "still a mount point after unmounting".into(),
            });
        }
        mounter
            .unmount(target)
            .await
            .map_err(|message| SubPathError::Unmount {
                path: target.to_path_buf(),
                message,
            })?;
    }
    remove_target(target).map_err(|source| SubPathError::Clean {
        path: target.to_path_buf(),
        source,
    })
}

/// The subdirectories of `dir` (not following links); none when it does not exist.
fn dirs_in(dir: &Path, first_err: &mut Option<SubPathError>) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect(),
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            first_err.get_or_insert(SubPathError::Clean {
                path: dir.to_path_buf(),
                source,
            });
            Vec::new()
        }
    }
}

fn remove_empty_dir(dir: &Path, first_err: &mut Option<SubPathError>) {
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            first_err.get_or_insert(SubPathError::Clean {
                path: dir.to_path_buf(),
                source: e,
            });
        }
        _ => {}
    }
}

#[cfg(test)]
#[path = "subpath_tests.rs"]
mod tests;
