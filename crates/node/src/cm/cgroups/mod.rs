//! cm::cgroups — the cgroup edge (upstream `CgroupManager`). Owns the `CgroupFs` trait and
//! its value types: a cgroup name (`CgroupName`, `[kubepods, burstable, pod<uid>]`, rendered
//! by the `driver` as a cgroupfs path) and the resource settings to write (`ResourceConfig`).
//! Implementations: `v1::V1Fs` (one hierarchy per controller), `v2::V2Fs` (unified),
//! `systemd::SystemdCgroupFs` (`cgroupDriver: systemd`: slices through systemd over either)
//! and `fake::FakeCgroupFs` for tests. `detect` picks v1/v2 as runc does.

pub mod driver;
pub mod fake;
pub mod systemd;
pub mod systemd_dbus;
pub mod v1;
pub mod v2;

pub use driver::CgroupDriver;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Failures of cgroup filesystem operations; each names the cgroup (and file) involved.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup {cgroup}: {action} {path}: {source}")]
    Io {
        cgroup: String,
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cgroup {cgroup}: processes still running after {attempts} kill attempts: {pids:?}")]
    PidsLeft {
        cgroup: String,
        attempts: u32,
        pids: Vec<i32>,
    },
    #[error("cgroup {cgroup}: {source}")]
    Name {
        cgroup: String,
        source: driver::NameError,
    },
    #[error("cgroup {cgroup}: {source}")]
    Systemd {
        cgroup: String,
        source: Box<systemd_dbus::SystemdError>,
    },
}

pub type Result<T, E = CgroupError> = std::result::Result<T, E>;

/// Which cgroup hierarchy the host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// A cgroup as a list of path components below the mount root (upstream `CgroupName`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CgroupName(Vec<String>);

impl CgroupName {
    /// The root cgroup (`/`).
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// Parses a cgroupfs path (`/kubepods/burstable`, `kubepods`, `/`): empty components are
    /// dropped.
    pub fn from_path(path: &str) -> Self {
        Self(
            path.split('/')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    /// This cgroup's child `name`.
    pub fn child(&self, name: &str) -> Self {
        let mut c = self.0.clone();
        c.push(name.to_owned());
        Self(c)
    }

    pub fn components(&self) -> &[String] {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The last component (`""` for the root).
    pub fn base(&self) -> &str {
        self.0.last().map_or("", String::as_str)
    }

    /// The parent cgroup (the root is its own parent).
    pub fn parent(&self) -> Self {
        let mut c = self.0.clone();
        c.pop();
        Self(c)
    }

    /// The cgroupfs form handed to the runtime (`/kubepods/burstable/pod<uid>`).
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// The directory of this cgroup under a hierarchy mounted at `mount`.
    pub fn dir(&self, mount: &Path) -> PathBuf {
        let mut p = mount.to_path_buf();
        p.extend(&self.0);
        p
    }
}

impl fmt::Display for CgroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_cgroupfs())
    }
}

/// Resource settings of a cgroup (upstream `ResourceConfig`), in cgroup v1 units; the v2
/// implementation converts them. `None` leaves the current value alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceConfig {
    /// `cpu.shares` (v2: `cpu.weight` via `shares_to_weight`).
    pub cpu_shares: Option<u64>,
    /// `cpu.cfs_quota_us`; -1 is unlimited, 0 is not written (v2: the first field of `cpu.max`).
    pub cpu_quota: Option<i64>,
    /// `cpu.cfs_period_us` (v2: the second field of `cpu.max`).
    pub cpu_period: Option<u64>,
    /// `memory.limit_in_bytes` (v2: `memory.max`); 0 is not written.
    pub memory: Option<i64>,
    /// `pids.max`; -1 or 0 means `max`.
    pub pids_limit: Option<i64>,
    /// Huge page limits by page size in bytes. When set, every size the host supports that is
    /// missing from the map is limited to 0 (as upstream `maybeSetHugetlb`).
    pub hugepage_limits: Option<BTreeMap<u64, i64>>,
}

/// The cgroup filesystem. Methods are blocking and quick (a handful of small file writes).
pub trait CgroupFs: Send + Sync + fmt::Debug {
    fn version(&self) -> CgroupVersion;
    /// How names map to the cgroup filesystem (`cgroupDriver`).
    fn driver(&self) -> CgroupDriver {
        CgroupDriver::Cgroupfs
    }
    /// Whether the cgroup exists in every controller the kubelet needs.
    fn exists(&self, name: &CgroupName) -> bool;
    /// Creates the cgroup (and missing parents) and applies `resources`.
    fn create(&self, name: &CgroupName, resources: &ResourceConfig) -> Result<()>;
    /// Applies `resources` to an existing cgroup.
    fn update(&self, name: &CgroupName, resources: &ResourceConfig) -> Result<()>;
    /// Kills every process left in the cgroup tree (SIGKILL, a few attempts), then removes the
    /// cgroup and its descendants from every hierarchy. A missing cgroup is not an error.
    fn destroy(&self, name: &CgroupName) -> Result<()>;
    /// Names of the child cgroups (directories) of `name`, from any hierarchy.
    fn children(&self, name: &CgroupName) -> Result<Vec<String>>;
    /// The processes in the cgroup and its descendants.
    fn pids(&self, name: &CgroupName) -> Result<Vec<i32>>;
}

/// The real cgroup filesystem at `mount_root` (normally `/sys/fs/cgroup`): v2 when the root
/// itself is the unified hierarchy (it has `cgroup.controllers`), else v1 (a hybrid host with
/// an extra cgroup2 mount at `unified` counts as v1, as runc decides).
pub fn detect(mount_root: &Path) -> Arc<dyn CgroupFs> {
    if detect_version(mount_root) == CgroupVersion::V2 {
        Arc::new(v2::V2Fs::new(mount_root))
    } else {
        Arc::new(v1::V1Fs::new(mount_root))
    }
}

pub fn detect_version(mount_root: &Path) -> CgroupVersion {
    if mount_root.join("cgroup.controllers").is_file() {
        CgroupVersion::V2
    } else {
        CgroupVersion::V1
    }
}

/// Upstream `HugePageUnitSizeFromByteSize`: `2MB`, `1GB`, `64KB` as the hugetlb files name
/// page sizes.
pub fn hugepage_size_name(bytes: u64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB", "PB"];
    let mut size = bytes;
    let mut i = 0;
    while size >= 1024 && size.is_multiple_of(1024) && i < units.len() - 1 {
        size /= 1024;
        i += 1;
    }
    format!("{size}{}", units[i])
}

/// The inverse of `hugepage_size_name`.
pub fn hugepage_size_bytes(name: &str) -> Option<u64> {
    let digits = name.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = name.split_at(digits);
    let n: u64 = n.parse().ok()?;
    let shift = match unit {
        "B" => 0,
        "KB" => 10,
        "MB" => 20,
        "GB" => 30,
        "TB" => 40,
        "PB" => 50,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// Upstream `CpuSharesToCpuWeight` (runc): maps shares [2, 262144] onto weight [1, 10000].
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

/// The v2 `cpu.max` value for a quota/period pair, or `None` when nothing is to be written
/// (runc: quota 0 and period 0). Quota -1 (or 0 with a period) is `max`.
pub fn cpu_max(quota: Option<i64>, period: Option<u64>) -> Option<String> {
    let q = quota.unwrap_or(0);
    let p = period.unwrap_or(0);
    if q == 0 && p == 0 {
        return None;
    }
    let mut s = if q > 0 {
        q.to_string()
    } else {
        "max".to_owned()
    };
    if p != 0 {
        s.push(' ');
        s.push_str(&p.to_string());
    }
    Some(s)
}

/// Reads `cgroup.procs` of `dir` and every descendant directory.
pub(crate) fn read_procs_recursive(dir: &Path, out: &mut Vec<i32>) -> std::io::Result<()> {
    match std::fs::read_to_string(dir.join("cgroup.procs")) {
        Ok(s) => out.extend(s.lines().filter_map(|l| l.trim().parse::<i32>().ok())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            read_procs_recursive(&entry.path(), out)?;
        }
    }
    Ok(())
}

/// Removes `dir` and its descendant directories, deepest first. cgroupfs directories are
/// removed with `rmdir` (their files are virtual); a few retries absorb `EBUSY` while the
/// kernel finishes tearing down exited tasks.
pub(crate) fn remove_tree(dir: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        }
    }
    let mut last = None;
    for attempt in 0..5u64 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
                // A plain directory (temp-dir tests, or a tmpfs-backed fake): remove the files.
                remove_plain_files(dir)?;
                last = Some(e);
            }
            Err(e) => {
                last = Some(e);
                std::thread::sleep(std::time::Duration::from_millis(10 * (attempt + 1)));
            }
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("rmdir failed")))
}

fn remove_plain_files(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            // On a real cgroupfs files cannot be removed; rmdir works there without this.
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

/// Sends SIGKILL to `pid`. Returns false when the process is already gone (or `pid` is not
/// positive: zero and negative values would signal a process group or every process).
pub(crate) fn kill_pid(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    rustix::process::Pid::from_raw(pid).is_some_and(|pid| {
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok()
    })
}

/// Upstream `tryKillingCgroupProcesses`: kills whatever `pids` reports, up to 5 rounds.
pub(crate) fn kill_all(name: &CgroupName, pids: impl Fn() -> Vec<i32>) -> Result<()> {
    const ATTEMPTS: u32 = 5;
    for attempt in 0..ATTEMPTS {
        let left = pids();
        if left.is_empty() {
            return Ok(());
        }
        if attempt + 1 == ATTEMPTS {
            return Err(CgroupError::PidsLeft {
                cgroup: name.to_string(),
                attempts: ATTEMPTS,
                pids: left,
            });
        }
        tracing::info!(cgroup = %name, pids = ?left, "killing processes left in cgroup");
        for pid in left {
            kill_pid(pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(20 << attempt));
    }
    Ok(())
}

pub(crate) fn write_file(cgroup: &CgroupName, path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|source| CgroupError::Io {
        cgroup: cgroup.to_string(),
        action: "writing",
        path: path.to_path_buf(),
        source,
    })
}

pub(crate) fn io_err(
    cgroup: &CgroupName,
    action: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> CgroupError {
    let cgroup = cgroup.to_string();
    let path = path.to_path_buf();
    move |source| CgroupError::Io {
        cgroup,
        action,
        path,
        source,
    }
}

/// Names of the child directories of `dir` (empty when `dir` is missing).
pub(crate) fn child_dirs(dir: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            out.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        let n = CgroupName::from_path("/kubepods/burstable");
        assert_eq!(n.to_cgroupfs(), "/kubepods/burstable");
        assert_eq!(n.child("podx").to_cgroupfs(), "/kubepods/burstable/podx");
        assert_eq!(n.parent().to_cgroupfs(), "/kubepods");
        assert_eq!(CgroupName::from_path("/").to_cgroupfs(), "/");
        assert!(CgroupName::from_path("//").is_root());
        assert_eq!(
            CgroupName::from_path("a/b").dir(Path::new("/sys/fs/cgroup/cpu")),
            PathBuf::from("/sys/fs/cgroup/cpu/a/b")
        );
    }

    #[test]
    fn hugepage_names() {
        for (bytes, name) in [
            (2 * 1024 * 1024, "2MB"),
            (1024 * 1024 * 1024, "1GB"),
            (64 * 1024, "64KB"),
            (1000, "1000B"),
        ] {
            assert_eq!(hugepage_size_name(bytes), name);
            assert_eq!(hugepage_size_bytes(name), Some(bytes));
        }
        assert_eq!(hugepage_size_bytes("2XB"), None);
    }

    #[test]
    fn weight_and_cpu_max() {
        // runc's table: 2 → 1, 262144 → 10000, 1024 → 39.
        for (shares, weight) in [(0, 0), (2, 1), (1024, 39), (102, 4), (262_144, 10_000)] {
            assert_eq!(shares_to_weight(shares), weight, "shares {shares}");
        }
        let cases = [
            (None, None, None),
            (Some(0), Some(0), None),
            (Some(50_000), Some(100_000), Some("50000 100000")),
            (Some(-1), Some(100_000), Some("max 100000")),
            (Some(0), Some(100_000), Some("max 100000")),
            (Some(20_000), None, Some("20000")),
        ];
        for (q, p, want) in cases {
            assert_eq!(cpu_max(q, p).as_deref(), want, "quota {q:?} period {p:?}");
        }
    }

    #[test]
    fn kill_pid_sends_sigkill_and_never_a_group_signal() {
        use std::os::unix::process::ExitStatusExt;
        assert!(!kill_pid(0), "0 would signal the own process group");
        assert!(!kill_pid(-1), "-1 would signal every process");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        assert!(kill_pid(pid));
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(9), "{status:?}");
    }
}
