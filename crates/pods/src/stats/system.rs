//! System containers and start times of the stats provider (upstream
//! `GetSystemContainersStats`, `systemBootTime`): where the `kubelet`, `runtime`, `misc` and
//! `pods` cgroups are, the node's boot time (`btime` of `/proc/stat`) and a process's start
//! time. As upstream, `kubelet` is `kubeletCgroups` or else the kubelet's own cgroup from
//! `/proc/self/cgroup` (left out, with a warning, when its v1 `cpu` and `memory` cgroups
//! differ: "not unified"), `runtime` only `--runtime-cgroups` and `misc` only `systemCgroups`.
//! Owns the resolved kubelet cgroup ([`SystemLocator`]); receives settings and reads through
//! [`StatsFs`]; emits [`SystemCgroups`] and the system [`ContainerStats`].

use std::path::Path;

use chrono::{DateTime, TimeDelta, Utc};

use super::cgroup::{self, CgroupLayout, CgroupMode};
use super::fs::StatsFs;
use super::types::{ContainerStats, CpuStats};
use super::{StatsSettings, memory_stats};

/// Upstream `SystemContainerKubelet` & co.
pub const KUBELET: &str = "kubelet";
pub const RUNTIME: &str = "runtime";
pub const MISC: &str = "misc";
pub const PODS: &str = "pods";

/// `USER_HZ`: the unit of `/proc/<pid>/stat` start times.
const USER_HZ: i64 = 100;

/// Where one system container's figures are, relative to the hierarchy roots: the memory and
/// CPU accounting cgroups (different on v1 hosts that place them apart; equal on v2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysCgroup {
    pub memory: String,
    pub cpu: String,
}

impl SysCgroup {
    /// A configured cgroup name (`kubeletCgroups`, `--runtime-cgroups`…): the same path in
    /// every hierarchy.
    pub fn named(name: &str) -> Self {
        Self {
            memory: name.to_owned(),
            cpu: name.to_owned(),
        }
    }
}

/// The system containers to report in one collection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemCgroups {
    /// When the node booted (`btime`), read once.
    pub boot_time: Option<DateTime<Utc>>,
    pub kubelet: Option<SysCgroup>,
    /// The kubelet process's start time (upstream reports the kubelet's own creation time).
    pub kubelet_start: Option<DateTime<Utc>>,
    pub runtime: Option<SysCgroup>,
    pub misc: Option<SysCgroup>,
    pub pods: Option<SysCgroup>,
}

/// `/proc/<pid>/cgroup`: the process's memory and CPU cgroups (v1: the `memory` and
/// `cpu`/`cpuacct` lines, CPU falling back to memory's; v2: the `0::` line).
pub fn parse_proc_cgroup(s: &str, mode: CgroupMode) -> Option<SysCgroup> {
    let mut memory = None;
    let mut cpu = None;
    for line in s.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        match mode {
            CgroupMode::V2 if controllers.is_empty() => return Some(SysCgroup::named(path)),
            CgroupMode::V2 => {}
            CgroupMode::V1 => {
                for c in controllers.split(',') {
                    match c {
                        "memory" => memory = Some(path.to_owned()),
                        "cpu" | "cpuacct" => cpu = Some(path.to_owned()),
                        _ => {}
                    }
                }
            }
        }
    }
    let memory = memory?;
    Some(SysCgroup {
        cpu: cpu.unwrap_or_else(|| memory.clone()),
        memory,
    })
}

/// The boot time: `btime` (seconds since the epoch) of `/proc/stat`.
pub fn read_boot_time(fs: &dyn StatsFs, proc: &Path) -> Option<DateTime<Utc>> {
    let stat = fs.read_to_string(&proc.join("stat")).ok()?;
    let secs = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    DateTime::from_timestamp(secs, 0)
}

/// When process `pid` (`self` allowed) started, in clock ticks after boot: field 22 of
/// `/proc/<pid>/stat`.
pub fn process_start_ticks(fs: &dyn StatsFs, proc: &Path, pid: &str) -> Option<u64> {
    let stat = fs.read_to_string(&proc.join(pid).join("stat")).ok()?;
    // `pid (comm) state …`: comm may hold spaces and parentheses; fields resume after the last `)`.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// When process `pid` (`self` allowed) started: [`process_start_ticks`] + the boot time.
pub fn process_start_time(
    fs: &dyn StatsFs,
    proc: &Path,
    pid: &str,
    boot: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let ticks = i64::try_from(process_start_ticks(fs, proc, pid)?).ok()?;
    Some(boot + TimeDelta::milliseconds(ticks.saturating_mul(1000 / USER_HZ)))
}

/// The kubelet's cgroup and the kubelet process's start time.
type KubeletCgroup = Option<(SysCgroup, Option<DateTime<Utc>>)>;

/// Resolves the system containers once per collection; the boot time and the kubelet's own
/// cgroup are read once (neither changes while the kubelet runs).
#[derive(Debug, Clone, Default)]
pub struct SystemLocator {
    once: Option<(Option<DateTime<Utc>>, KubeletCgroup)>,
}

impl SystemLocator {
    pub fn resolve(
        &mut self,
        fs: &dyn StatsFs,
        layout: &CgroupLayout,
        s: &StatsSettings,
    ) -> SystemCgroups {
        let (boot_time, kubelet) = self
            .once
            .get_or_insert_with(|| {
                let boot = read_boot_time(fs, &s.proc_root);
                (boot, locate_kubelet(fs, layout, s, boot))
            })
            .clone();
        let root = s.cgroup_root.trim_end_matches('/');
        let pods = if s.cgroups_per_qos {
            super::kubepods_path(&s.cgroup_root, s.cgroup_driver)
                .unwrap_or_else(|| format!("{root}/kubepods"))
        } else if root.is_empty() {
            "/".to_owned()
        } else {
            root.to_owned()
        };
        let named = |n: &str| (!n.is_empty()).then(|| SysCgroup::named(n));
        SystemCgroups {
            boot_time,
            kubelet_start: kubelet.as_ref().and_then(|(_, t)| *t),
            kubelet: kubelet.map(|(cg, _)| cg),
            runtime: named(&s.runtime_cgroups),
            misc: named(&s.system_cgroups),
            pods: Some(SysCgroup::named(&pods)),
        }
    }
}

/// The kubelet's cgroup (configured, else its own) and the kubelet process's start time.
fn locate_kubelet(
    fs: &dyn StatsFs,
    layout: &CgroupLayout,
    s: &StatsSettings,
    boot: Option<DateTime<Utc>>,
) -> KubeletCgroup {
    let proc = s.proc_root.as_path();
    let cg = if s.kubelet_cgroups.is_empty() {
        let cg = fs
            .read_to_string(&proc.join("self/cgroup"))
            .ok()
            .and_then(|c| parse_proc_cgroup(&c, layout.mode))?;
        if cg.memory != cg.cpu {
            // Upstream's getContainer refuses to account a split process the same way.
            tracing::warn!(
                cpu = %cg.cpu,
                memory = %cg.memory,
                "Failed to find cgroups of kubelet: cpu and memory cgroup hierarchy not unified; \
                 the kubelet system container is left out of the stats (set kubeletCgroups)"
            );
            return None;
        }
        cg
    } else {
        SysCgroup::named(&s.kubelet_cgroups)
    };
    let start = boot.and_then(|boot| process_start_time(fs, proc, "self", boot));
    Some((cg, start))
}

/// One system container's stats (cpu, memory; no filesystems, as upstream); `None` when its
/// memory cgroup cannot be read. Start time: `start`, else the memory cgroup directory's
/// modification time (cadvisor's creation time of a raw cgroup).
pub fn system_container(
    fs: &dyn StatsFs,
    layout: &CgroupLayout,
    name: &str,
    cg: &SysCgroup,
    start: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<ContainerStats> {
    let memory = cgroup::read_memory(fs, layout, &cg.memory)?;
    let start = start.or_else(|| {
        fs.modified(&layout.dir("memory", &cg.memory))
            .ok()
            .map(DateTime::<Utc>::from)
    });
    Some(ContainerStats {
        name: name.to_owned(),
        start_time: start,
        cpu: cgroup::read_cpu_ns(fs, layout, &cg.cpu).map(|ns| CpuStats {
            time: now,
            usage_nano_cores: None,
            usage_core_nano_seconds: Some(ns),
        }),
        memory: Some(memory_stats(memory, None, now)),
        rootfs: None,
        logs: None,
    })
}

/// The `systemContainers` of the node, in upstream's name order.
pub fn system_containers(
    fs: &dyn StatsFs,
    layout: &CgroupLayout,
    sys: &SystemCgroups,
    now: DateTime<Utc>,
) -> Vec<ContainerStats> {
    [
        (KUBELET, &sys.kubelet, sys.kubelet_start),
        (RUNTIME, &sys.runtime, None),
        (MISC, &sys.misc, None),
        (PODS, &sys.pods, None),
    ]
    .into_iter()
    .filter_map(|(name, cg, start)| system_container(fs, layout, name, cg.as_ref()?, start, now))
    .collect()
}

#[cfg(test)]
#[path = "system_tests.rs"]
mod tests;
