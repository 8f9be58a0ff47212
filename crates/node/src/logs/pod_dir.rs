//! Finding a container's log in the pod log directory without the kubelet (upstream
//! `BuildPodLogsDirectory` / `BuildContainerLogsDirectory` read backwards), for `rkubelet logs`
//! when the kubelet is down. Receives the pod logs directory (trusted: it comes from the
//! configuration) and the operator's namespace, pod, container and `--previous`; emits the open
//! container directory and the name of the log file to read, or an error worded as kubectl's.
//!
//! The tree below the pod logs directory is treated as untrusted (a container with a hostPath
//! mount of it can plant entries): names given on the command line are checked to be single
//! path components, directories are opened with `O_NOFOLLOW` relative to their parent, a
//! symlink anywhere on the way is refused, and the log file is handed to the reader through
//! the open directory (`/proc/self/fd/N/<file>`), so renaming a directory later cannot redirect
//! the read; the reader itself opens files with `O_NOFOLLOW`.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, statat};
use rustix::io::Errno;

use crate::nofollow::{list_dir, open_dir_at};

/// Why a container log could not be found.
#[derive(Debug, thiserror::Error)]
pub enum PodLogError {
    #[error("invalid {field} {value:?}: {why}")]
    BadName {
        field: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("cannot read the pod logs directory {path}: {source}")]
    PodsDir { path: PathBuf, source: Errno },
    #[error(
        "pods \"{pod}\" not found in namespace \"{namespace}\" (no {namespace}_{pod}_<uid> directory in {dir})"
    )]
    PodNotFound {
        namespace: String,
        pod: String,
        dir: PathBuf,
    },
    #[error("refusing to follow the symlink {0} in the pod log directory")]
    Symlink(PathBuf),
    #[error("{0} is not a regular file")]
    NotRegular(PathBuf),
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: Errno },
    #[error("pod {pod} has no container log directories")]
    NoContainers { pod: String },
    #[error("a container name must be specified for pod {pod}, choose one of: [{}]", .choices.join(" "))]
    ContainerRequired { pod: String, choices: Vec<String> },
    #[error("container {container} is not valid for pod {pod}")]
    ContainerNotFound { container: String, pod: String },
    #[error("container \"{container}\" in pod \"{pod}\" is waiting to start - no logs yet")]
    NoLogs { container: String, pod: String },
    #[error("previous terminated container \"{container}\" in pod \"{pod}\" not found")]
    NoPrevious { container: String, pod: String },
}

/// Checks that `value` can only name one entry of a directory (no `/`, not `.`/`..`, not
/// empty, no NUL).
pub fn check_name(field: &'static str, value: &str) -> Result<(), PodLogError> {
    let why = if value.is_empty() {
        Some("must not be empty")
    } else if value == "." || value == ".." {
        Some("must not be \".\" or \"..\"")
    } else if value.contains('/') {
        Some("must not contain '/'")
    } else if value.contains('\0') {
        Some("must not contain NUL")
    } else if value.contains('_') && field != "container" {
        Some("must not contain '_' (it separates namespace, name and UID in the log directory)")
    } else {
        None
    };
    match why {
        Some(why) => Err(PodLogError::BadName {
            field,
            value: value.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// What the operator asked for.
#[derive(Debug, Clone, Default)]
pub struct PodLogQuery {
    pub namespace: String,
    /// The pod's name, or a static pod's manifest name (matched as `<pod>-<node_name>`).
    pub pod: String,
    pub container: Option<String>,
    pub previous: bool,
    /// The node's name, for static pods' `<name>-<node>` mirror names.
    pub node_name: Option<String>,
}

/// A container's log file, found.
#[derive(Debug)]
pub struct PodLog {
    /// The pod's full name (a static pod's includes the node name).
    pub pod: String,
    pub uid: String,
    pub container: String,
    /// The restart count whose log this is.
    pub restart: u32,
    /// The container's log directory (for messages) and the open directory itself.
    pub dir: PathBuf,
    dir_fd: OwnedFd,
    /// `<restart>.log`.
    pub file: String,
}

impl PodLog {
    /// The path the log reader opens: through the open directory, so that it reads the
    /// directory checked here, whatever happens to the names above it.
    pub fn reader_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.dir_fd.as_raw_fd())).join(&self.file)
    }

    /// The log file's path as the operator knows it.
    pub fn display_path(&self) -> PathBuf {
        self.dir.join(&self.file)
    }

    /// `text` (a reader error) with [`Self::reader_path`]'s directory spelled as [`Self::dir`].
    pub fn describe(&self, text: &str) -> String {
        let fd_dir = format!("/proc/self/fd/{}", self.dir_fd.as_raw_fd());
        text.replace(&fd_dir, &self.dir.display().to_string())
    }
}

fn file_type(dir: &OwnedFd, name: &OsStr) -> Result<FileType, Errno> {
    statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map(|s| FileType::from_raw_mode(s.st_mode))
}

/// Opens the directory `name` of `parent` (`path` names it in errors); a symlink is refused.
fn open_subdir(parent: &OwnedFd, name: &OsStr, path: &Path) -> Result<OwnedFd, PodLogError> {
    match file_type(parent, name) {
        Ok(FileType::Symlink) => return Err(PodLogError::Symlink(path.to_owned())),
        Ok(FileType::Directory) => {}
        Ok(_) => {
            return Err(PodLogError::Open {
                path: path.to_owned(),
                source: Errno::NOTDIR,
            });
        }
        Err(source) => {
            return Err(PodLogError::Open {
                path: path.to_owned(),
                source,
            });
        }
    }
    open_dir_at(parent, name).map_err(|source| match source {
        // Swapped for a link since the stat.
        Errno::LOOP | Errno::NOTDIR => PodLogError::Symlink(path.to_owned()),
        source => PodLogError::Open {
            path: path.to_owned(),
            source,
        },
    })
}

/// The restart count a log file belongs to: `<n>.log`, `<n>.log.<stamp>` or `….gz`.
fn restart_of(name: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(name).ok()?;
    let (n, rest) = s.split_once(".log")?;
    if !(rest.is_empty() || rest.starts_with('.')) || n.is_empty() {
        return None;
    }
    if !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// Finds the log `q` asks for under `pods_dir`.
pub fn find_pod_log(pods_dir: &Path, q: &PodLogQuery) -> Result<PodLog, PodLogError> {
    check_name("namespace", &q.namespace)?;
    check_name("pod name", &q.pod)?;
    if let Some(c) = &q.container {
        check_name("container", c)?;
    }
    let root = rustix::fs::openat(
        rustix::fs::CWD,
        pods_dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| PodLogError::PodsDir {
        path: pods_dir.to_owned(),
        source,
    })?;
    let entries = list_dir(root.as_fd()).map_err(|source| PodLogError::PodsDir {
        path: pods_dir.to_owned(),
        source,
    })?;
    // (pod name, uid, entry name) of the pod's directories: the exact name first, else a
    // static pod's `<name>-<node>`.
    let candidates = |pod: &str| -> Vec<(String, String, std::ffi::OsString)> {
        entries
            .iter()
            .filter_map(|e| {
                let s = e.to_str()?;
                let mut parts = s.splitn(3, '_');
                let (ns, name, uid) = (parts.next()?, parts.next()?, parts.next()?);
                (ns == q.namespace && name == pod && !uid.is_empty())
                    .then(|| (name.to_owned(), uid.to_owned(), e.clone()))
            })
            .collect()
    };
    let mut found = candidates(&q.pod);
    if found.is_empty()
        && let Some(node) = &q.node_name
    {
        found = candidates(&format!("{}-{node}", q.pod));
    }
    // Several UIDs (the pod was recreated): the newest directory.
    let mut newest: Option<(i64, String, String, std::ffi::OsString)> = None;
    for (name, uid, entry) in found {
        let path = pods_dir.join(&entry);
        let st = statat(&root, &entry, AtFlags::SYMLINK_NOFOLLOW).map_err(|source| {
            PodLogError::Open {
                path: path.clone(),
                source,
            }
        })?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            return Err(PodLogError::Symlink(path));
        }
        let key = (st.st_mtime, uid.clone());
        if newest
            .as_ref()
            .is_none_or(|(t, u, _, _)| key > (*t, u.clone()))
        {
            newest = Some((st.st_mtime, uid, name, entry));
        }
    }
    let Some((_, uid, pod, entry)) = newest else {
        return Err(PodLogError::PodNotFound {
            namespace: q.namespace.clone(),
            pod: q.pod.clone(),
            dir: pods_dir.to_owned(),
        });
    };
    let pod_path = pods_dir.join(&entry);
    let pod_fd = open_subdir(&root, &entry, &pod_path)?;
    let containers = {
        let mut names: Vec<String> = list_dir(pod_fd.as_fd())
            .map_err(|source| PodLogError::Open {
                path: pod_path.clone(),
                source,
            })?
            .into_iter()
            .filter_map(|n| n.into_string().ok())
            .collect();
        names.sort();
        names
    };
    let container = match &q.container {
        Some(c) => {
            if !containers.contains(c) {
                return Err(PodLogError::ContainerNotFound {
                    container: c.clone(),
                    pod: pod.clone(),
                });
            }
            c.clone()
        }
        None => match containers.as_slice() {
            [] => return Err(PodLogError::NoContainers { pod }),
            [one] => one.clone(),
            _ => {
                return Err(PodLogError::ContainerRequired {
                    pod,
                    choices: containers,
                });
            }
        },
    };
    let dir = pod_path.join(&container);
    let dir_fd = open_subdir(&pod_fd, OsStr::new(&container), &dir)?;
    let mut restarts: Vec<u32> = list_dir(dir_fd.as_fd())
        .map_err(|source| PodLogError::Open {
            path: dir.clone(),
            source,
        })?
        .iter()
        .filter_map(|n| restart_of(n.as_bytes()))
        .collect();
    restarts.sort_unstable();
    restarts.dedup();
    let restart = if q.previous {
        match restarts.as_slice() {
            [.., prev, _] => *prev,
            _ => {
                return Err(PodLogError::NoPrevious { container, pod });
            }
        }
    } else {
        match restarts.last() {
            Some(n) => *n,
            None => return Err(PodLogError::NoLogs { container, pod }),
        }
    };
    let file = format!("{restart}.log");
    // The live file may be gone with only rotated ones left; those the reader checks itself.
    match file_type(&dir_fd, OsStr::new(&file)) {
        Ok(FileType::Symlink) => return Err(PodLogError::Symlink(dir.join(&file))),
        Ok(FileType::RegularFile) | Err(Errno::NOENT) => {}
        Ok(_) => return Err(PodLogError::NotRegular(dir.join(&file))),
        Err(source) => {
            return Err(PodLogError::Open {
                path: dir.join(&file),
                source,
            });
        }
    }
    Ok(PodLog {
        pod,
        uid,
        container,
        restart,
        dir,
        dir_fd,
        file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_numbers_come_from_log_file_names_only() {
        assert_eq!(restart_of(b"3.log"), Some(3));
        assert_eq!(restart_of(b"12.log.20240101-000000"), Some(12));
        assert_eq!(restart_of(b"12.log.20240101-000000.gz"), Some(12));
        assert_eq!(restart_of(b"x.log"), None);
        assert_eq!(restart_of(b"3.logx"), None);
        assert_eq!(restart_of(b".log"), None);
    }
}
