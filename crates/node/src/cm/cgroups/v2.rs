//! cm::cgroups::v2 — the unified cgroup v2 hierarchy at the mount root. Creating a cgroup
//! first enables the controllers the kubelet needs (cpu, cpuset, memory, pids, hugetlb — those
//! the parent offers in `cgroup.controllers`) in every ancestor's `cgroup.subtree_control`;
//! settings are converted from v1 units: shares → `cpu.weight`, quota/period → `cpu.max`,
//! memory → `memory.max`, `pids.max`, `hugetlb.<size>.max`.

use std::path::{Path, PathBuf};

use super::{
    CgroupError, CgroupFs, CgroupName, CgroupVersion, ResourceConfig, Result, child_dirs, cpu_max,
    hugepage_size_name, io_err, kill_all, read_procs_recursive, remove_tree, shares_to_weight,
    write_file,
};

const WANTED: &[&str] = &["cpuset", "cpu", "memory", "pids", "hugetlb"];

#[derive(Debug, Clone)]
pub struct V2Fs {
    root: PathBuf,
}

impl V2Fs {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    fn available(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("cgroup.controllers"))
            .unwrap_or_default()
            .split_whitespace()
            .filter(|c| WANTED.contains(c))
            .map(str::to_owned)
            .collect()
    }

    /// Enables the wanted controllers of `dir` for its children (skips what is already on).
    fn enable_controllers(name: &CgroupName, dir: &Path) -> Result<()> {
        let available = Self::available(dir);
        if available.is_empty() {
            return Ok(());
        }
        let file = dir.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&file).unwrap_or_default();
        let missing: Vec<String> = available
            .iter()
            .filter(|c| !enabled.split_whitespace().any(|e| e == c.as_str()))
            .map(|c| format!("+{c}"))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if write_file(name, &file, &missing.join(" ")).is_ok() {
            return Ok(());
        }
        // One at a time, as runc falls back to: the ones that work still get enabled.
        let mut first_err = None;
        for m in &missing {
            if let Err(e) = write_file(name, &file, m)
                && first_err.is_none()
            {
                first_err = Some(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn set(&self, name: &CgroupName, r: &ResourceConfig) -> Result<()> {
        let dir = name.dir(&self.root);
        if let Some(shares) = r.cpu_shares {
            let weight = shares_to_weight(shares);
            if weight != 0 {
                write_file(name, &dir.join("cpu.weight"), &weight.to_string())?;
            }
        }
        if let Some(max) = cpu_max(r.cpu_quota, r.cpu_period) {
            write_file(name, &dir.join("cpu.max"), &max)?;
        }
        if let Some(limit) = r.memory.filter(|m| *m != 0) {
            let value = if limit < 0 {
                "max".to_owned()
            } else {
                limit.to_string()
            };
            write_file(name, &dir.join("memory.max"), &value)?;
        }
        if let Some(limit) = r.pids_limit {
            let value = if limit > 0 {
                limit.to_string()
            } else {
                "max".to_owned()
            };
            write_file(name, &dir.join("pids.max"), &value)?;
        }
        if let Some(limits) = &r.hugepage_limits
            && Self::available(&name.parent().dir(&self.root))
                .iter()
                .any(|c| c == "hugetlb")
        {
            for size in super::v1::supported_hugepage_sizes(&dir, "max") {
                let limit = limits.get(&size).copied().unwrap_or(0);
                let file = dir.join(format!("hugetlb.{}.max", hugepage_size_name(size)));
                write_file(name, &file, &limit.to_string())?;
            }
        }
        Ok(())
    }
}

impl CgroupFs for V2Fs {
    fn version(&self) -> CgroupVersion {
        CgroupVersion::V2
    }

    fn exists(&self, name: &CgroupName) -> bool {
        name.dir(&self.root).is_dir()
    }

    fn create(&self, name: &CgroupName, resources: &ResourceConfig) -> Result<()> {
        let mut level = CgroupName::root();
        for comp in name.components() {
            Self::enable_controllers(name, &level.dir(&self.root))?;
            level = level.child(comp);
            let dir = level.dir(&self.root);
            if !dir.is_dir() {
                std::fs::create_dir(&dir)
                    .or_else(|e| {
                        if e.kind() == std::io::ErrorKind::AlreadyExists {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })
                    .map_err(io_err(name, "creating", &dir))?;
            }
        }
        self.set(name, resources)
    }

    fn update(&self, name: &CgroupName, resources: &ResourceConfig) -> Result<()> {
        self.set(name, resources)
    }

    fn destroy(&self, name: &CgroupName) -> Result<()> {
        kill_all(name, || self.pids(name).unwrap_or_default())?;
        let dir = name.dir(&self.root);
        remove_tree(&dir).map_err(io_err(name, "removing", &dir))
    }

    fn children(&self, name: &CgroupName) -> Result<Vec<String>> {
        let dir = name.dir(&self.root);
        child_dirs(&dir).map_err(io_err(name, "listing", &dir))
    }

    fn pids(&self, name: &CgroupName) -> Result<Vec<i32>> {
        let dir = name.dir(&self.root);
        let mut out = Vec::new();
        read_procs_recursive(&dir, &mut out).map_err(|source| CgroupError::Io {
            cgroup: name.to_string(),
            action: "reading pids of",
            path: dir.clone(),
            source,
        })?;
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn v2_root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("cgroup.subtree_control"), "").unwrap();
        dir
    }

    fn read(root: &Path, rel: &str) -> String {
        std::fs::read_to_string(root.join(rel)).unwrap()
    }

    #[test]
    fn create_enables_controllers_and_writes_v2_files() {
        let root = v2_root();
        let p = root.path();
        assert_eq!(super::super::detect_version(p), CgroupVersion::V2);
        let fs = V2Fs::new(p);
        // The kernel fills a new cgroup's cgroup.controllers from the parent's subtree_control;
        // a temp dir does not, so pre-create the intermediate level as the kernel would show it.
        std::fs::create_dir(p.join("kubepods")).unwrap();
        std::fs::write(
            p.join("kubepods/cgroup.controllers"),
            "cpuset cpu memory pids hugetlb",
        )
        .unwrap();
        std::fs::create_dir(p.join("kubepods/pod1")).unwrap();
        std::fs::write(p.join("kubepods/pod1/hugetlb.2MB.max"), "max").unwrap();
        std::fs::write(p.join("kubepods/pod1/hugetlb.1GB.max"), "max").unwrap();
        let name = CgroupName::from_path("/kubepods/pod1");
        let res = ResourceConfig {
            cpu_shares: Some(1024),
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            memory: Some(64 << 20),
            pids_limit: Some(-1),
            hugepage_limits: Some(BTreeMap::from([(2 << 20, 2 << 20)])),
        };
        fs.create(&name, &res).unwrap();
        assert!(fs.exists(&name));
        assert_eq!(
            read(p, "cgroup.subtree_control"),
            "+cpuset +cpu +memory +hugetlb +pids"
        );
        assert_eq!(
            read(p, "kubepods/cgroup.subtree_control"),
            "+cpuset +cpu +memory +pids +hugetlb"
        );
        assert_eq!(read(p, "kubepods/pod1/cpu.weight"), "39");
        assert_eq!(read(p, "kubepods/pod1/cpu.max"), "50000 100000");
        assert_eq!(
            read(p, "kubepods/pod1/memory.max"),
            (64u64 << 20).to_string()
        );
        assert_eq!(read(p, "kubepods/pod1/pids.max"), "max");
        assert_eq!(
            read(p, "kubepods/pod1/hugetlb.2MB.max"),
            (2u64 << 20).to_string()
        );
        assert_eq!(read(p, "kubepods/pod1/hugetlb.1GB.max"), "0");
        assert_eq!(
            fs.children(&CgroupName::from_path("kubepods")).unwrap(),
            vec!["pod1"]
        );
    }

    #[test]
    fn unlimited_cpu_and_already_enabled_controllers() {
        let root = v2_root();
        let p = root.path();
        std::fs::write(
            p.join("cgroup.subtree_control"),
            "cpuset cpu memory hugetlb pids\n",
        )
        .unwrap();
        let fs = V2Fs::new(p);
        let name = CgroupName::from_path("/kubepods");
        fs.create(
            &name,
            &ResourceConfig {
                cpu_shares: Some(2),
                cpu_quota: Some(-1),
                cpu_period: Some(100_000),
                ..Default::default()
            },
        )
        .unwrap();
        // Nothing was missing: subtree_control untouched.
        assert_eq!(
            read(p, "cgroup.subtree_control"),
            "cpuset cpu memory hugetlb pids\n"
        );
        assert_eq!(read(p, "kubepods/cpu.weight"), "1");
        assert_eq!(read(p, "kubepods/cpu.max"), "max 100000");
        assert!(!p.join("kubepods/memory.max").exists());
    }

    #[test]
    fn destroy_removes_tree() {
        let root = v2_root();
        let p = root.path();
        let fs = V2Fs::new(p);
        let name = CgroupName::from_path("/kubepods/burstable/pod9");
        fs.create(&name, &ResourceConfig::default()).unwrap();
        std::fs::create_dir_all(p.join("kubepods/burstable/pod9/ctr")).unwrap();
        std::fs::write(p.join("kubepods/burstable/pod9/ctr/cgroup.procs"), "").unwrap();
        fs.destroy(&name).unwrap();
        assert!(!fs.exists(&name));
        assert!(p.join("kubepods/burstable").is_dir());
    }
}
