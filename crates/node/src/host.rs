//! Host facts for the Node object (what upstream gets from cadvisor's `MachineInfo` and
//! `VersionInfo`): owns nothing; reads machine-id, system UUID, boot ID, kernel version, OS
//! image, CPU count, memory and swap, the capacity of the filesystem holding the kubelet root
//! directory and the huge page pools once from the host; emits one [`HostInfo`] value that the
//! node status setters consume. Every fact that cannot be read is left empty/zero and logged.

use std::path::{Path, PathBuf};

use tracing::{debug, warn};

/// One huge page pool (`/sys/kernel/mm/hugepages/hugepages-<size>kB`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HugePages {
    /// Page size in bytes.
    pub page_size: u64,
    /// Pages configured in the pool (`nr_hugepages`).
    pub num_pages: u64,
}

/// Facts about the machine, read once at start-up (upstream caches cadvisor's machine info
/// the same way). Fields are public so tests and standalone callers can build one directly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostInfo {
    /// `/etc/machine-id` (or `/var/lib/dbus/machine-id`).
    pub machine_id: String,
    /// `/sys/class/dmi/id/product_uuid`; empty when unreadable (needs root on most hosts).
    pub system_uuid: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// `uname -r`.
    pub kernel_version: String,
    /// `PRETTY_NAME` from `/etc/os-release`, `Linux` when absent (as cadvisor).
    pub os_image: String,
    /// Go's `GOOS`: always `linux` here.
    pub operating_system: String,
    /// Go's `GOARCH` naming of the architecture this binary runs on (`amd64`, `arm64`, …).
    pub architecture: String,
    /// Online logical CPUs.
    pub num_cores: u64,
    /// `MemTotal`, bytes.
    pub memory_capacity: u64,
    /// `SwapTotal`, bytes.
    pub swap_capacity: u64,
    /// Size of the filesystem holding the kubelet root directory, bytes; `None` if unknown.
    pub ephemeral_storage_capacity: Option<u64>,
    /// Huge page pools, smallest page size first.
    pub huge_pages: Vec<HugePages>,
}

impl HostInfo {
    /// Reads the facts of this host; `root_dir` is the kubelet root directory (its
    /// filesystem gives `ephemeral-storage`).
    pub fn read(root_dir: &Path) -> Self {
        Self::read_at(Path::new("/"), root_dir)
    }

    /// Like [`HostInfo::read`] with every host file looked up under `host_root` (tests point
    /// it at a fake tree). `root_dir` is used as given.
    pub fn read_at(host_root: &Path, root_dir: &Path) -> Self {
        let file = |p: &str| host_root.join(p.trim_start_matches('/'));
        let read = |p: &str| read_trimmed(&file(p));
        let machine_id = read("/etc/machine-id")
            .or_else(|| read("/var/lib/dbus/machine-id"))
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string(file("/proc/meminfo")).unwrap_or_default();
        let num_cores = read("/sys/devices/system/cpu/online")
            .and_then(|s| count_cpu_list(&s))
            .or_else(|| {
                std::thread::available_parallelism()
                    .ok()
                    .map(|n| n.get() as u64)
            })
            .unwrap_or(0);
        let info = HostInfo {
            machine_id,
            system_uuid: read("/sys/class/dmi/id/product_uuid").unwrap_or_default(),
            boot_id: read("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
            kernel_version: read("/proc/sys/kernel/osrelease").unwrap_or_default(),
            os_image: std::fs::read_to_string(file("/etc/os-release"))
                .ok()
                .and_then(|s| os_release_pretty_name(&s))
                .unwrap_or_else(|| "Linux".to_owned()),
            operating_system: std::env::consts::OS.to_owned(),
            architecture: go_arch(std::env::consts::ARCH).to_owned(),
            num_cores,
            memory_capacity: meminfo_bytes(&meminfo, "MemTotal").unwrap_or(0),
            swap_capacity: meminfo_bytes(&meminfo, "SwapTotal").unwrap_or(0),
            ephemeral_storage_capacity: filesystem_capacity(root_dir),
            huge_pages: read_huge_pages(&file("/sys/kernel/mm/hugepages")),
        };
        if info.memory_capacity == 0 {
            warn!("cannot read MemTotal from /proc/meminfo; node memory capacity will be 0");
        }
        if info.ephemeral_storage_capacity.is_none() {
            warn!(root_dir = %root_dir.display(), "cannot stat the kubelet root filesystem; node reports no ephemeral-storage capacity");
        }
        debug!(?info, "host facts");
        info
    }
}

fn read_trimmed(path: &Path) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

/// Go's `GOARCH` for a Rust `target_arch`.
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "loongarch64" => "loong64",
        "mips64" if cfg!(target_endian = "little") => "mips64le",
        "mips" if cfg!(target_endian = "little") => "mipsle",
        other => other,
    }
}

/// A `/proc/meminfo` value (`Key:   123 kB`) in bytes.
pub fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let (k, rest) = line.split_once(':')?;
        if k.trim() != key {
            return None;
        }
        let mut parts = rest.split_whitespace();
        let n: u64 = parts.next()?.parse().ok()?;
        Some(match parts.next() {
            Some("kB") => n.saturating_mul(1024),
            _ => n,
        })
    })
}

/// `PRETTY_NAME` from an os-release file, unquoted.
pub fn os_release_pretty_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|line| {
        let value = line.trim().strip_prefix("PRETTY_NAME=")?;
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        (!value.is_empty()).then(|| value.to_owned())
    })
}

/// Number of CPUs in a kernel CPU list (`0-3,6,8-9`).
pub fn count_cpu_list(list: &str) -> Option<u64> {
    let mut n = 0u64;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
                n += b.checked_sub(a)? + 1;
            }
            None => {
                part.parse::<u64>().ok()?;
                n += 1;
            }
        }
    }
    (n > 0).then_some(n)
}

/// Page size in bytes of a `hugepages-<N>kB` directory name.
pub fn huge_page_dir_size(name: &str) -> Option<u64> {
    let kib: u64 = name
        .strip_prefix("hugepages-")?
        .strip_suffix("kB")?
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

fn read_huge_pages(dir: &Path) -> Vec<HugePages> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut pools: Vec<HugePages> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let page_size = huge_page_dir_size(e.file_name().to_str()?)?;
            let num_pages = read_trimmed(&e.path().join("nr_hugepages"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            Some(HugePages {
                page_size,
                num_pages,
            })
        })
        .collect();
    pools.sort_by_key(|p| p.page_size);
    pools
}

/// Total size in bytes of the filesystem holding `path` (or its nearest existing ancestor,
/// since the root directory may not exist yet on a fresh node).
pub fn filesystem_capacity(path: &Path) -> Option<u64> {
    let mut p: PathBuf = path.to_owned();
    while !p.exists() {
        if !p.pop() {
            return None;
        }
    }
    statvfs_capacity(&p)
}

/// The filesystem's size (`statvfs(2)`: blocks × fragment size).
fn statvfs_capacity(path: &Path) -> Option<u64> {
    crate::hostfs::statvfs(path)
        .ok()
        .map(|usage| usage.capacity_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo_os_release_cpu_lists_and_hugepage_dirs() {
        let meminfo = "MemTotal:       16323932 kB\nMemFree:  1 kB\nSwapTotal:  0 kB\n";
        assert_eq!(meminfo_bytes(meminfo, "MemTotal"), Some(16323932 * 1024));
        assert_eq!(meminfo_bytes(meminfo, "SwapTotal"), Some(0));
        assert_eq!(meminfo_bytes(meminfo, "Mem"), None);
        assert_eq!(
            os_release_pretty_name(
                "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"
            )
            .as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            os_release_pretty_name("PRETTY_NAME=Alpine\n").as_deref(),
            Some("Alpine")
        );
        assert_eq!(os_release_pretty_name("NAME=x\n"), None);
        assert_eq!(count_cpu_list("0-3,6,8-9\n"), Some(7));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("x"), None);
        assert_eq!(huge_page_dir_size("hugepages-2048kB"), Some(2 << 20));
        assert_eq!(huge_page_dir_size("hugepages-1048576kB"), Some(1 << 30));
        assert_eq!(huge_page_dir_size("other"), None);
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("s390x"), "s390x");
    }

    #[test]
    fn reads_a_fake_host_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let put = |p: &str, s: &str| {
            let f = root.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, s).unwrap();
        };
        put("etc/machine-id", "abc123\n");
        put("proc/sys/kernel/random/boot_id", "boot-1\n");
        put("proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
        put("etc/os-release", "PRETTY_NAME=\"Test OS 1\"\n");
        put("proc/meminfo", "MemTotal: 2048 kB\nSwapTotal: 1024 kB\n");
        put("sys/devices/system/cpu/online", "0-1\n");
        put(
            "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            "3\n",
        );
        put(
            "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages",
            "0\n",
        );
        let info = HostInfo::read_at(root, &root.join("var/lib/kubelet"));
        assert_eq!(info.machine_id, "abc123");
        assert_eq!(info.system_uuid, "");
        assert_eq!(info.boot_id, "boot-1");
        assert_eq!(info.kernel_version, "6.1.0-18-amd64");
        assert_eq!(info.os_image, "Test OS 1");
        assert_eq!(info.num_cores, 2);
        assert_eq!(info.memory_capacity, 2048 * 1024);
        assert_eq!(info.swap_capacity, 1024 * 1024);
        assert!(info.ephemeral_storage_capacity.is_some_and(|c| c > 0));
        assert_eq!(
            info.huge_pages,
            vec![
                HugePages {
                    page_size: 2 << 20,
                    num_pages: 3
                },
                HugePages {
                    page_size: 1 << 30,
                    num_pages: 0
                }
            ]
        );
    }
}
