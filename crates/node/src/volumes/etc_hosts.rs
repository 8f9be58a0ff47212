//! The kubelet-managed `/etc/hosts` of a pod (upstream `managedHostsFileContent` /
//! `nodeHostsFileContent` / `ensureHostsFile`): owns `<pod dir>/etc-hosts`. Receives the pod's
//! IPs, hostname, domain and `hostAliases` (or the node's hosts file for hostNetwork pods);
//! emits the content (pure) and writes it in place ([`write_in_place`]).
//!
//! The file is bind-mounted read-write into every container of the pod, so it is written in
//! place, never replaced: a container already running holds the same inode the stats measure
//! (replacing it by rename left running containers a now-unlinked file to fill unseen by
//! ephemeral-storage accounting and eviction, CVE-2020-8557). A pod cannot replace the file
//! itself, but nothing at that name is trusted: it is opened without following a link and
//! without blocking, and anything that is not a regular file is removed and a new file made.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::HostAlias;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Permission bits of the file (upstream's `0644`, set whatever the umask).
const MODE: u32 = 0o644;

#[derive(Debug, thiserror::Error)]
pub enum EtcHostsError {
    #[error("writing the pod's hosts file {path}: {step}: {source}")]
    Io {
        path: PathBuf,
        step: &'static str,
        source: std::io::Error,
    },
}

impl EtcHostsError {
    fn at<'a>(path: &'a Path, step: &'static str) -> impl FnOnce(Errno) -> Self + 'a {
        move |e| Self::Io {
            path: path.to_path_buf(),
            step,
            source: e.into(),
        }
    }

    /// As an `io::Error` of the same kind, the message kept.
    pub fn into_io(self) -> std::io::Error {
        let kind = match &self {
            Self::Io { source, .. } => source.kind(),
        };
        std::io::Error::new(kind, self)
    }
}

/// Writes `data` into the file at `path` in place (upstream `ensureHostsFile` at each container
/// start): the same inode stays, so every container that mounted it sees the new content and
/// every byte any of them wrote is in the file the stats measure. The content is written from
/// the start and the file then cut to its length (a reader never sees it empty). `path`'s
/// directory is the kubelet's and is created when missing; the entry itself is opened with
/// `O_NOFOLLOW | O_NONBLOCK` and must be a regular file: a link, FIFO, directory or device in
/// its place is removed (never followed, never crossing a mount) and a new file made.
pub fn write_in_place(path: &Path, data: &[u8]) -> Result<(), EtcHostsError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(EtcHostsError::Io {
            path: path.to_path_buf(),
            step: "expected a path ending in a file name",
            source: ErrorKind::InvalidInput.into(),
        });
    };
    std::fs::create_dir_all(parent).map_err(|source| EtcHostsError::Io {
        path: parent.to_path_buf(),
        step: "creating the pod directory",
        source,
    })?;
    let dir = rustix::fs::open(
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(EtcHostsError::at(parent, "opening the pod directory"))?;
    let fd = match open_regular(&dir, name).map_err(EtcHostsError::at(path, "opening"))? {
        Some(fd) => fd,
        None => {
            super::removeall::remove_entry_at(dir.as_fd(), name).map_err(|e| {
                EtcHostsError::Io {
                    path: path.to_path_buf(),
                    step: "removing what is not a regular file",
                    source: e.into(),
                }
            })?;
            rustix::fs::openat(
                &dir,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(MODE),
            )
            .map_err(EtcHostsError::at(path, "creating"))?
        }
    };
    let file = std::fs::File::from(fd);
    file.write_all_at(data, 0)
        .map_err(|source| EtcHostsError::Io {
            path: path.to_path_buf(),
            step: "writing",
            source,
        })?;
    rustix::fs::ftruncate(&file, data.len() as u64)
        .map_err(EtcHostsError::at(path, "truncating"))?;
    rustix::fs::fchmod(&file, Mode::from_raw_mode(MODE))
        .map_err(EtcHostsError::at(path, "setting its mode"))?;
    Ok(())
}

/// Opens `name` of `dir` for writing (created when missing) when it is a regular file;
/// `None` when something else is there. Looked at first without following a link, so no
/// FIFO or device is ever opened, and checked again on the opened fd (it may have changed).
fn open_regular(dir: &OwnedFd, name: &OsStr) -> Result<Option<OwnedFd>, Errno> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile => return Ok(None),
        Ok(_) | Err(Errno::NOENT) => {}
        Err(e) => return Err(e),
    }
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::NOCTTY
        | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(MODE)) {
        Ok(fd) => fd,
        // A link (ELOOP), a directory, a FIFO without a reader (ENXIO) put there meanwhile.
        Err(Errno::LOOP | Errno::ISDIR | Errno::NXIO) => return Ok(None),
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd)?;
    Ok((FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then_some(fd))
}

const HEADER: &str = "# Kubernetes-managed hosts file.\n";
const ALIASES_HEADER: &str = "\n# Entries added by HostAliases.\n";

/// Content for a pod with its own network namespace.
pub fn managed_content(
    pod_ips: &[String],
    hostname: &str,
    domain: &str,
    aliases: &[HostAlias],
) -> String {
    let mut s = String::from(HEADER);
    s.push_str("127.0.0.1\tlocalhost\n");
    s.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    s.push_str("fe00::0\tip6-localnet\n");
    s.push_str("fe00::0\tip6-mcastprefix\n");
    s.push_str("fe00::1\tip6-allnodes\n");
    s.push_str("fe00::2\tip6-allrouters\n");
    for ip in pod_ips {
        if domain.is_empty() {
            s.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            s.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    s.push_str(&aliases_section(aliases));
    s
}

/// Content for a hostNetwork pod: the node's hosts file plus the aliases.
pub fn node_content(node_hosts: &str, aliases: &[HostAlias]) -> String {
    let mut s = String::from(HEADER);
    s.push_str(node_hosts);
    if !node_hosts.is_empty() && !node_hosts.ends_with('\n') {
        s.push('\n');
    }
    s.push_str(&aliases_section(aliases));
    s
}

fn aliases_section(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut s = String::from(ALIASES_HEADER);
    for a in aliases {
        let names = a.hostnames.clone().unwrap_or_default();
        s.push_str(&format!("{}\t{}\n", a.ip, names.join("\t")));
    }
    s
}

#[cfg(test)]
#[path = "etc_hosts_tests.rs"]
mod write_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_file_matches_upstream_layout() {
        let aliases = vec![HostAlias {
            ip: "10.1.2.3".into(),
            hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
        }];
        let got = managed_content(
            &["10.88.0.5".into()],
            "web",
            "sub.ns.svc.cluster.local",
            &aliases,
        );
        assert_eq!(
            got,
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n10.88.0.5\tweb.sub.ns.svc.cluster.local\tweb\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"
        );
        let plain = managed_content(&["10.88.0.5".into()], "web", "", &[]);
        assert!(plain.ends_with("fe00::2\tip6-allrouters\n10.88.0.5\tweb\n"));
        let host = node_content("127.0.0.1 localhost", &aliases);
        assert!(host.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n"));
    }
}
