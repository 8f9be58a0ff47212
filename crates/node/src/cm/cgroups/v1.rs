//! cm::cgroups::v1 — cgroup v1 (one hierarchy per controller under the mount root, e.g.
//! `/sys/fs/cgroup/cpu`). Creates cgroups in the controllers the kubelet manages (cpu, cpuacct,
//! cpuset, memory, pids, hugetlb — those mounted), writes `cpu.shares`, `cpu.cfs_*`,
//! `memory.limit_in_bytes`, `pids.max`, `hugetlb.<size>.limit_in_bytes`; destroys from every
//! mounted hierarchy (runc also puts containers in devices, freezer, blkio, …).

use std::path::{Path, PathBuf};

use super::{
    CgroupError, CgroupFs, CgroupName, CgroupVersion, ResourceConfig, Result, child_dirs,
    hugepage_size_bytes, hugepage_size_name, io_err, kill_all, read_procs_recursive, remove_tree,
    write_file,
};

/// Controllers a pod/QoS cgroup is created in.
const MANAGED: &[&str] = &["cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb"];
/// Controllers a cgroup must be present in to "exist".
const REQUIRED: &[&str] = &["cpu", "cpuset", "memory", "pids"];

#[derive(Debug, Clone)]
pub struct V1Fs {
    root: PathBuf,
}

impl V1Fs {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    fn mount(&self, controller: &str) -> Option<PathBuf> {
        let p = self.root.join(controller);
        p.is_dir().then_some(p)
    }

    /// Every mounted hierarchy (each directory under the root).
    fn all_mounts(&self) -> Vec<PathBuf> {
        child_dirs(&self.root)
            .unwrap_or_default()
            .into_iter()
            .map(|d| self.root.join(d))
            .collect()
    }

    /// Creates `name` under `mount`, level by level; new cpuset levels inherit their parent's
    /// `cpuset.cpus`/`cpuset.mems` (an empty cpuset cannot hold tasks).
    fn mkdir(&self, name: &CgroupName, controller: &str, mount: &Path) -> Result<()> {
        let mut level = CgroupName::root();
        for comp in name.components() {
            let parent_dir = level.dir(mount);
            level = level.child(comp);
            let dir = level.dir(mount);
            if dir.is_dir() {
                continue;
            }
            std::fs::create_dir(&dir)
                .or_else(|e| {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .map_err(io_err(name, "creating", &dir))?;
            if controller == "cpuset" {
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let current = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
                    if current.trim().is_empty() {
                        let from = parent_dir.join(file);
                        let value = std::fs::read_to_string(&from)
                            .map_err(io_err(name, "reading", &from))?;
                        write_file(name, &dir.join(file), value.trim())?;
                    }
                }
            }
        }
        Ok(())
    }

    fn set(&self, name: &CgroupName, r: &ResourceConfig) -> Result<()> {
        if let Some(cpu) = self.mount("cpu") {
            let dir = name.dir(&cpu);
            if let Some(shares) = r.cpu_shares {
                write_file(name, &dir.join("cpu.shares"), &shares.to_string())?;
            }
            if let Some(period) = r.cpu_period.filter(|p| *p != 0) {
                write_file(name, &dir.join("cpu.cfs_period_us"), &period.to_string())?;
            }
            if let Some(quota) = r.cpu_quota.filter(|q| *q != 0) {
                write_file(name, &dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
            }
        }
        if let Some(memory) = self.mount("memory") {
            let dir = name.dir(&memory);
            if let Some(limit) = r.memory.filter(|m| *m != 0) {
                write_file(name, &dir.join("memory.limit_in_bytes"), &limit.to_string())?;
            }
        }
        if let Some(pids) = self.mount("pids")
            && let Some(limit) = r.pids_limit
        {
            let value = if limit > 0 {
                limit.to_string()
            } else {
                "max".to_owned()
            };
            write_file(name, &name.dir(&pids).join("pids.max"), &value)?;
        }
        if let (Some(hugetlb), Some(limits)) = (self.mount("hugetlb"), &r.hugepage_limits) {
            let dir = name.dir(&hugetlb);
            for size in supported_hugepage_sizes(&hugetlb, "limit_in_bytes") {
                let limit = limits.get(&size).copied().unwrap_or(0);
                let file = dir.join(format!(
                    "hugetlb.{}.limit_in_bytes",
                    hugepage_size_name(size)
                ));
                write_file(name, &file, &limit.to_string())?;
            }
        }
        Ok(())
    }
}

/// Page sizes the hugetlb controller at `mount` offers (from its `hugetlb.<size>.<suffix>` files).
pub(crate) fn supported_hugepage_sizes(mount: &Path, suffix: &str) -> Vec<u64> {
    let mut sizes: Vec<u64> = std::fs::read_dir(mount)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let size = name
                .strip_prefix("hugetlb.")?
                .strip_suffix(&format!(".{suffix}"))?
                .to_owned();
            hugepage_size_bytes(&size)
        })
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

impl CgroupFs for V1Fs {
    fn version(&self) -> CgroupVersion {
        CgroupVersion::V1
    }

    fn exists(&self, name: &CgroupName) -> bool {
        REQUIRED
            .iter()
            .filter_map(|c| self.mount(c))
            .all(|m| name.dir(&m).is_dir())
    }

    fn create(&self, name: &CgroupName, resources: &ResourceConfig) -> Result<()> {
        for controller in MANAGED {
            if let Some(mount) = self.mount(controller) {
                self.mkdir(name, controller, &mount)?;
            }
        }
        self.set(name, resources)
    }

    fn update(&self, name: &CgroupName, resources: &ResourceConfig) -> Result<()> {
        self.set(name, resources)
    }

    fn destroy(&self, name: &CgroupName) -> Result<()> {
        kill_all(name, || self.pids(name).unwrap_or_default())?;
        for mount in self.all_mounts() {
            let dir = name.dir(&mount);
            remove_tree(&dir).map_err(io_err(name, "removing", &dir))?;
        }
        Ok(())
    }

    fn children(&self, name: &CgroupName) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for controller in MANAGED {
            if let Some(mount) = self.mount(controller) {
                let dir = name.dir(&mount);
                out.extend(child_dirs(&dir).map_err(io_err(name, "listing", &dir))?);
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn pids(&self, name: &CgroupName) -> Result<Vec<i32>> {
        let mut out = Vec::new();
        for mount in self.all_mounts() {
            let dir = name.dir(&mount);
            read_procs_recursive(&dir, &mut out).map_err(|source| CgroupError::Io {
                cgroup: name.to_string(),
                action: "reading pids of",
                path: dir.clone(),
                source,
            })?;
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A v1 layout in a temp dir: controller directories with the root files that matter.
    fn v1_root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for c in [
            "cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "devices",
        ] {
            std::fs::create_dir(dir.path().join(c)).unwrap();
        }
        std::fs::write(dir.path().join("cpuset/cpuset.cpus"), "0-3\n").unwrap();
        std::fs::write(dir.path().join("cpuset/cpuset.mems"), "0\n").unwrap();
        std::fs::write(dir.path().join("hugetlb/hugetlb.2MB.limit_in_bytes"), "").unwrap();
        std::fs::write(dir.path().join("hugetlb/hugetlb.1GB.limit_in_bytes"), "").unwrap();
        // The hybrid host's empty unified mount is just another directory to v1.
        std::fs::create_dir(dir.path().join("unified")).unwrap();
        std::fs::write(dir.path().join("unified/cgroup.controllers"), "").unwrap();
        dir
    }

    fn read(root: &Path, rel: &str) -> String {
        std::fs::read_to_string(root.join(rel)).unwrap()
    }

    #[test]
    fn create_writes_v1_files() {
        let root = v1_root();
        let fs = V1Fs::new(root.path());
        assert_eq!(super::super::detect_version(root.path()), CgroupVersion::V1);
        let name = CgroupName::from_path("/kubepods/burstable/pod1");
        assert!(!fs.exists(&name));
        let res = ResourceConfig {
            cpu_shares: Some(512),
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            memory: Some(128 << 20),
            pids_limit: Some(1024),
            hugepage_limits: Some(BTreeMap::from([(2 << 20, 4 << 20)])),
        };
        fs.create(&name, &res).unwrap();
        assert!(fs.exists(&name));
        let p = root.path();
        assert_eq!(read(p, "cpu/kubepods/burstable/pod1/cpu.shares"), "512");
        assert_eq!(
            read(p, "cpu/kubepods/burstable/pod1/cpu.cfs_quota_us"),
            "50000"
        );
        assert_eq!(
            read(p, "cpu/kubepods/burstable/pod1/cpu.cfs_period_us"),
            "100000"
        );
        assert_eq!(
            read(p, "memory/kubepods/burstable/pod1/memory.limit_in_bytes"),
            (128u64 << 20).to_string()
        );
        assert_eq!(read(p, "pids/kubepods/burstable/pod1/pids.max"), "1024");
        assert_eq!(
            read(
                p,
                "hugetlb/kubepods/burstable/pod1/hugetlb.2MB.limit_in_bytes"
            ),
            (4u64 << 20).to_string()
        );
        // Sizes not requested are limited to 0.
        assert_eq!(
            read(
                p,
                "hugetlb/kubepods/burstable/pod1/hugetlb.1GB.limit_in_bytes"
            ),
            "0"
        );
        // Every new cpuset level inherits cpus/mems.
        for level in ["kubepods", "kubepods/burstable", "kubepods/burstable/pod1"] {
            assert_eq!(read(p, &format!("cpuset/{level}/cpuset.cpus")), "0-3");
            assert_eq!(read(p, &format!("cpuset/{level}/cpuset.mems")), "0");
        }
        assert!(p.join("cpuacct/kubepods/burstable/pod1").is_dir());
        // Not a managed controller: not created.
        assert!(!p.join("devices/kubepods").exists());
        assert_eq!(
            fs.children(&CgroupName::from_path("/kubepods")).unwrap(),
            vec!["burstable"]
        );
    }

    #[test]
    fn update_leaves_unset_values_and_writes_max_pids() {
        let root = v1_root();
        let fs = V1Fs::new(root.path());
        let name = CgroupName::from_path("/kubepods");
        fs.create(
            &name,
            &ResourceConfig {
                cpu_shares: Some(2048),
                ..Default::default()
            },
        )
        .unwrap();
        fs.update(
            &name,
            &ResourceConfig {
                pids_limit: Some(-1),
                cpu_quota: Some(-1),
                ..Default::default()
            },
        )
        .unwrap();
        let p = root.path();
        assert_eq!(read(p, "cpu/kubepods/cpu.shares"), "2048");
        assert_eq!(read(p, "cpu/kubepods/cpu.cfs_quota_us"), "-1");
        assert_eq!(read(p, "pids/kubepods/pids.max"), "max");
        assert!(!p.join("memory/kubepods/memory.limit_in_bytes").exists());
    }

    #[test]
    fn destroy_removes_from_every_hierarchy() {
        let root = v1_root();
        let fs = V1Fs::new(root.path());
        let name = CgroupName::from_path("/kubepods/besteffort/pod2");
        fs.create(&name, &ResourceConfig::default()).unwrap();
        // runc's container leaf, also in a hierarchy the kubelet does not manage.
        let p = root.path();
        std::fs::create_dir_all(p.join("devices/kubepods/besteffort/pod2/ctr")).unwrap();
        std::fs::create_dir_all(p.join("memory/kubepods/besteffort/pod2/ctr")).unwrap();
        std::fs::write(
            p.join("memory/kubepods/besteffort/pod2/ctr/cgroup.procs"),
            "",
        )
        .unwrap();
        assert_eq!(fs.pids(&name).unwrap(), Vec::<i32>::new());
        fs.destroy(&name).unwrap();
        for c in ["cpu", "cpuset", "memory", "pids", "devices", "hugetlb"] {
            assert!(!p.join(c).join("kubepods/besteffort/pod2").exists(), "{c}");
            assert!(p.join(c).join("kubepods/besteffort").exists() || c == "devices");
        }
        assert!(!fs.exists(&name));
        // Destroying again is fine.
        fs.destroy(&name).unwrap();
    }

    #[test]
    fn pids_are_read_recursively() {
        let root = v1_root();
        let fs = V1Fs::new(root.path());
        let name = CgroupName::from_path("/kubepods/pod3");
        fs.create(&name, &ResourceConfig::default()).unwrap();
        let p = root.path();
        std::fs::write(p.join("cpu/kubepods/pod3/cgroup.procs"), "").unwrap();
        std::fs::create_dir_all(p.join("cpu/kubepods/pod3/c1")).unwrap();
        std::fs::write(p.join("cpu/kubepods/pod3/c1/cgroup.procs"), "12\n15\n").unwrap();
        std::fs::write(p.join("memory/kubepods/pod3/cgroup.procs"), "12\n").unwrap();
        assert_eq!(fs.pids(&name).unwrap(), vec![12, 15]);
    }
}
