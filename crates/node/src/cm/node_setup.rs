//! Start-up checks and process settings on the host (upstream `cm.NewContainerManager`'s swap
//! check, `setupNode`'s kernel tunables and cgroup v1 check, and the server's `oomScoreAdj` and
//! `maxOpenFiles`). Owns no state. Receives the effective configuration and the host paths
//! (`/proc`, the cgroup mount) so tests can use a fake tree; emits a [`NodeSetupError`] that
//! stops the kubelet, or warnings to log.
//!
//! Divergence: with `protectKernelDefaults: false` (the default) upstream rewrites the six
//! kernel tunables below; rkubelet leaves the host's values alone and warns about each one
//! that differs.

use std::path::{Path, PathBuf};

use crate::cm::cgroups::{CgroupVersion, detect_version};
use crate::config::KubeletConfiguration;

/// The sysctls upstream's `setupKernelTunables` wants, with their values.
pub const KERNEL_TUNABLES: &[(&str, i64)] = &[
    ("vm/overcommit_memory", 1),
    ("vm/panic_on_oom", 0),
    ("kernel/panic", 10),
    ("kernel/panic_on_oops", 1),
    ("kernel/keys/root_maxkeys", 1_000_000),
    ("kernel/keys/root_maxbytes", 25_000_000),
];

/// Failures that stop the kubelet at start.
#[derive(Debug, thiserror::Error)]
pub enum NodeSetupError {
    #[error(
        "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false. /proc/swaps contained: {0:?}"
    )]
    SwapOn(Vec<String>),
    #[error("failSwapOn: reading {path}: {source}")]
    ReadSwaps {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("protectKernelDefaults: {}", .0.join(", "))]
    KernelDefaults(Vec<String>),
    #[error(
        "kubelet is configured to not run on a host using cgroup v1 (failCgroupV1: true). cgroup v1 support is in maintenance mode, please migrate to cgroup v2"
    )]
    CgroupV1,
}

/// Where the host's files are.
#[derive(Debug, Clone)]
pub struct HostPaths {
    /// procfs (`/proc`).
    pub proc_root: PathBuf,
    /// The cgroup mount (`/sys/fs/cgroup`).
    pub cgroup_mount: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        Self {
            proc_root: PathBuf::from("/proc"),
            cgroup_mount: PathBuf::from("/sys/fs/cgroup"),
        }
    }
}

/// Runs every start-up check the configuration asks for; returns warnings to log.
pub fn check_node(
    kc: &KubeletConfiguration,
    host: &HostPaths,
) -> Result<Vec<String>, NodeSetupError> {
    let mut warnings = Vec::new();
    if kc.fail_swap_on {
        check_swap(&host.proc_root)?;
    }
    if kc.fail_cgroup_v1 && detect_version(&host.cgroup_mount) == CgroupVersion::V1 {
        return Err(NodeSetupError::CgroupV1);
    }
    let differing = kernel_tunables(&host.proc_root);
    if kc.protect_kernel_defaults {
        if !differing.is_empty() {
            return Err(NodeSetupError::KernelDefaults(differing));
        }
    } else {
        warnings.extend(differing.into_iter().map(|d| {
            format!("{d} (rkubelet does not change kernel tunables; upstream sets them when protectKernelDefaults is false)")
        }));
    }
    Ok(warnings)
}

/// Upstream: more than the header line in `/proc/swaps` means swap is on. A missing file
/// means no swap.
pub fn check_swap(proc_root: &Path) -> Result<(), NodeSetupError> {
    let path = proc_root.join("swaps");
    let data = match std::fs::read_to_string(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(NodeSetupError::ReadSwaps { path, source }),
    };
    let lines: Vec<String> = data.trim().lines().map(str::to_owned).collect();
    if lines.len() > 1 {
        return Err(NodeSetupError::SwapOn(lines));
    }
    Ok(())
}

/// Each kernel tunable whose value differs from upstream's, in upstream's wording (an
/// unreadable one is reported too).
pub fn kernel_tunables(proc_root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (name, want) in KERNEL_TUNABLES {
        let path = proc_root.join("sys").join(name);
        match std::fs::read_to_string(&path) {
            Ok(s) => match s.trim().parse::<i64>() {
                Ok(v) if v == *want => {}
                Ok(v) => out.push(format!(
                    "invalid kernel flag: {name}, expected value: {want}, actual value: {v}"
                )),
                Err(_) => out.push(format!(
                    "invalid kernel flag: {name}, expected value: {want}, actual value: {:?}",
                    s.trim()
                )),
            },
            Err(e) => out.push(format!("reading kernel flag {name}: {e}")),
        }
    }
    out
}

/// `oomScoreAdj`: writes the kubelet's own OOM score adjustment. Upstream logs a failure and
/// goes on; so does the caller with the returned warning.
pub fn apply_oom_score_adj(proc_root: &Path, value: i32) -> Option<String> {
    let path = proc_root.join("self").join("oom_score_adj");
    match std::fs::write(&path, value.to_string()) {
        Ok(()) => None,
        Err(e) => Some(format!(
            "oomScoreAdj: failed to set {} to {value}: {e}",
            path.display()
        )),
    }
}

/// `maxOpenFiles`: sets the soft and hard `RLIMIT_NOFILE`. Upstream logs a failure and goes
/// on; so does the caller with the returned warning.
pub fn set_max_open_files(n: i64) -> Option<String> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let Ok(n) = u64::try_from(n) else {
        return Some(format!("maxOpenFiles: {n} is negative"));
    };
    match setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(n),
            maximum: Some(n),
        },
    ) {
        Ok(()) => None,
        Err(e) => Some(format!(
            "maxOpenFiles: failed to set rlimit on max file handles to {n}: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_config;

    fn host(dir: &Path) -> HostPaths {
        HostPaths {
            proc_root: dir.join("proc"),
            cgroup_mount: dir.join("cgroup"),
        }
    }

    fn write(path: &Path, body: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }

    /// A fake host with swap off, cgroup v2 and upstream's kernel tunables.
    fn good_host(dir: &Path) -> HostPaths {
        let h = host(dir);
        write(
            &h.proc_root.join("swaps"),
            "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n",
        );
        write(&h.cgroup_mount.join("cgroup.controllers"), "cpu memory\n");
        for (name, v) in KERNEL_TUNABLES {
            write(&h.proc_root.join("sys").join(name), &format!("{v}\n"));
        }
        h
    }

    #[test]
    fn swap_on_fails_start_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let h = good_host(dir.path());
        let mut kc = load_config(None, None).unwrap();
        assert!(kc.fail_swap_on, "upstream default");
        assert!(check_node(&kc, &h).unwrap().is_empty());
        write(
            &h.proc_root.join("swaps"),
            "Filename Type Size Used Priority\n/swapfile file 1048572 0 -2\n",
        );
        let err = check_node(&kc, &h).unwrap_err().to_string();
        assert!(
            err.starts_with("running with swap on is not supported, please disable swap or set --fail-swap-on flag to false. /proc/swaps contained: [\"Filename"),
            "{err}"
        );
        kc.fail_swap_on = false;
        assert!(check_node(&kc, &h).is_ok());
        // No /proc/swaps (no swap support in the kernel): swap is off.
        std::fs::remove_file(h.proc_root.join("swaps")).unwrap();
        kc.fail_swap_on = true;
        assert!(check_node(&kc, &h).is_ok());
    }

    #[test]
    fn protect_kernel_defaults_names_each_differing_sysctl() {
        let dir = tempfile::tempdir().unwrap();
        let h = good_host(dir.path());
        let mut kc = load_config(None, None).unwrap();
        kc.protect_kernel_defaults = true;
        assert!(check_node(&kc, &h).unwrap().is_empty());
        write(&h.proc_root.join("sys/vm/overcommit_memory"), "0\n");
        write(&h.proc_root.join("sys/kernel/panic"), "0\n");
        let err = check_node(&kc, &h).unwrap_err().to_string();
        assert_eq!(
            err,
            "protectKernelDefaults: invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0, invalid kernel flag: kernel/panic, expected value: 10, actual value: 0"
        );
        // Without protection the kubelet starts and warns about each differing value.
        kc.protect_kernel_defaults = false;
        let w = check_node(&kc, &h).unwrap();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("vm/overcommit_memory"), "{w:?}");
        // An unreadable tunable is reported, not skipped.
        std::fs::remove_file(h.proc_root.join("sys/kernel/keys/root_maxkeys")).unwrap();
        kc.protect_kernel_defaults = true;
        let err = check_node(&kc, &h).unwrap_err().to_string();
        assert!(
            err.contains("reading kernel flag kernel/keys/root_maxkeys"),
            "{err}"
        );
    }

    #[test]
    fn fail_cgroup_v1_refuses_a_v1_host() {
        let dir = tempfile::tempdir().unwrap();
        let h = good_host(dir.path());
        let mut kc = load_config(None, None).unwrap();
        kc.fail_cgroup_v1 = true;
        assert!(check_node(&kc, &h).is_ok(), "v2 host");
        std::fs::remove_file(h.cgroup_mount.join("cgroup.controllers")).unwrap();
        let err = check_node(&kc, &h).unwrap_err().to_string();
        assert!(err.contains("failCgroupV1: true"), "{err}");
        kc.fail_cgroup_v1 = false;
        assert!(check_node(&kc, &h).is_ok(), "the default runs on v1");
    }

    #[test]
    fn oom_score_adj_is_written_and_a_refusal_only_warns() {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        std::fs::create_dir_all(proc_root.join("self")).unwrap();
        assert_eq!(apply_oom_score_adj(&proc_root, -999), None);
        assert_eq!(
            std::fs::read_to_string(proc_root.join("self/oom_score_adj")).unwrap(),
            "-999"
        );
        let w = apply_oom_score_adj(&dir.path().join("missing"), -999).unwrap();
        assert!(w.starts_with("oomScoreAdj: failed to set"), "{w}");
    }

    #[test]
    fn max_open_files_sets_the_nofile_limit() {
        use rustix::process::{Resource, getrlimit};
        let before = getrlimit(Resource::Nofile);
        let (Some(soft), Some(hard)) = (before.current, before.maximum) else {
            panic!("unlimited nofile: {before:?}");
        };
        // Lower than both limits, so it works without privileges too (this test's process
        // only; nextest runs each test in its own process).
        let target = soft.min(hard) - 1;
        assert_eq!(set_max_open_files(i64::try_from(target).unwrap()), None);
        let after = getrlimit(Resource::Nofile);
        assert_eq!((after.current, after.maximum), (Some(target), Some(target)));
        assert!(set_max_open_files(-1).unwrap().contains("negative"));
    }
}
