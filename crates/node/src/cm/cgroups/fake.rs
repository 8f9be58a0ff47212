//! cm::cgroups::fake — an in-memory `CgroupFs` for tests: a map of cgroups to the settings last
//! applied (merged as the kernel would keep them) and the pids "inside" them. Destroying a
//! cgroup with pids records that they were killed.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use super::{CgroupFs, CgroupName, CgroupVersion, ResourceConfig, Result};
use crate::sync;

#[derive(Debug)]
pub struct FakeCgroupFs {
    version: CgroupVersion,
    state: Mutex<FakeState>,
}

#[derive(Debug, Default)]
struct FakeState {
    groups: BTreeMap<CgroupName, ResourceConfig>,
    pids: BTreeMap<CgroupName, Vec<i32>>,
    killed: Vec<i32>,
    destroyed: Vec<CgroupName>,
}

impl FakeCgroupFs {
    pub fn new(version: CgroupVersion) -> Self {
        Self {
            version,
            state: Mutex::new(FakeState::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, FakeState> {
        sync::lock(&self.state)
    }

    /// The settings of `path` (`/kubepods/pod<uid>`), if it exists.
    pub fn get(&self, path: &str) -> Option<ResourceConfig> {
        self.state()
            .groups
            .get(&CgroupName::from_path(path))
            .cloned()
    }

    /// Every existing cgroup, as cgroupfs paths.
    pub fn paths(&self) -> Vec<String> {
        self.state()
            .groups
            .keys()
            .map(CgroupName::to_cgroupfs)
            .collect()
    }

    /// Puts processes in a cgroup (creating it without settings if missing).
    pub fn add_pids(&self, path: &str, pids: &[i32]) {
        let name = CgroupName::from_path(path);
        let mut s = self.state();
        s.groups.entry(name.clone()).or_default();
        s.pids.entry(name).or_default().extend_from_slice(pids);
    }

    /// Creates a cgroup as if a previous kubelet had left it behind.
    pub fn insert(&self, path: &str, resources: ResourceConfig) {
        self.state()
            .groups
            .insert(CgroupName::from_path(path), resources);
    }

    pub fn killed(&self) -> Vec<i32> {
        self.state().killed.clone()
    }

    pub fn destroyed(&self) -> Vec<String> {
        self.state()
            .destroyed
            .iter()
            .map(CgroupName::to_cgroupfs)
            .collect()
    }
}

fn merge(into: &mut ResourceConfig, r: &ResourceConfig) {
    if r.cpu_shares.is_some() {
        into.cpu_shares = r.cpu_shares;
    }
    if r.cpu_quota.is_some_and(|q| q != 0) {
        into.cpu_quota = r.cpu_quota;
    }
    if r.cpu_period.is_some_and(|p| p != 0) {
        into.cpu_period = r.cpu_period;
    }
    if r.memory.is_some_and(|m| m != 0) {
        into.memory = r.memory;
    }
    if r.pids_limit.is_some() {
        into.pids_limit = r.pids_limit;
    }
    if r.hugepage_limits.is_some() {
        into.hugepage_limits.clone_from(&r.hugepage_limits);
    }
}

impl CgroupFs for FakeCgroupFs {
    fn version(&self) -> CgroupVersion {
        self.version
    }

    fn exists(&self, name: &CgroupName) -> bool {
        name.is_root() || self.state().groups.contains_key(name)
    }

    fn create(&self, name: &CgroupName, resources: &ResourceConfig) -> Result<()> {
        let mut s = self.state();
        let mut level = CgroupName::root();
        for comp in name.components() {
            level = level.child(comp);
            s.groups.entry(level.clone()).or_default();
        }
        if let Some(g) = s.groups.get_mut(name) {
            merge(g, resources);
        }
        Ok(())
    }

    fn update(&self, name: &CgroupName, resources: &ResourceConfig) -> Result<()> {
        let mut s = self.state();
        let g = s.groups.entry(name.clone()).or_default();
        merge(g, resources);
        Ok(())
    }

    fn destroy(&self, name: &CgroupName) -> Result<()> {
        let mut s = self.state();
        let prefix = name.components().to_vec();
        let doomed: Vec<CgroupName> = s
            .groups
            .keys()
            .filter(|k| k.components().starts_with(&prefix))
            .cloned()
            .collect();
        for d in &doomed {
            s.groups.remove(d);
            if let Some(pids) = s.pids.remove(d) {
                s.killed.extend(pids);
            }
        }
        if !doomed.is_empty() {
            s.destroyed.push(name.clone());
        }
        Ok(())
    }

    fn children(&self, name: &CgroupName) -> Result<Vec<String>> {
        let depth = name.components().len();
        Ok(self
            .state()
            .groups
            .keys()
            .filter(|k| {
                k.components().len() == depth + 1 && k.components().starts_with(name.components())
            })
            .map(|k| k.base().to_owned())
            .collect())
    }

    fn pids(&self, name: &CgroupName) -> Result<Vec<i32>> {
        let s = self.state();
        Ok(s.pids
            .iter()
            .filter(|(k, _)| k.components().starts_with(name.components()))
            .flat_map(|(_, v)| v.iter().copied())
            .collect())
    }
}
