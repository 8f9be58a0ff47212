//! System containers and start times of the stats provider (upstream
//! `GetSystemContainersStats`, `systemBootTime`): where the `kubelet`, `runtime`, `misc` and
//! `pods` cgroups are (configured names, else the kubelet's own cgroup from
//! `/proc/self/cgroup` and the container runtime's from the process serving the CRI socket),
//! the node's boot time (`btime` of `/proc/stat`) and a process's start time. Owns the cached
//! runtime PID ([`SystemLocator`]); receives settings and reads through [`StatsFs`]; emits
//! [`SystemCgroups`] and the system [`ContainerStats`].

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

/// Process names (`/proc/<pid>/comm`) of container runtimes serving the CRI.
const RUNTIME_COMMS: &[&str] = &["containerd", "crio", "cri-dockerd", "dockerd"];

/// How long to wait before looking for the runtime process again when it was not found.
const RUNTIME_RETRY: TimeDelta = TimeDelta::seconds(60);

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
    pub kubelet: Option<SysCgroup>,
    /// The kubelet process's start time (upstream reports the kubelet's own creation time).
    pub kubelet_start: Option<DateTime<Utc>>,
    pub runtime: Option<SysCgroup>,
    pub misc: Option<SysCgroup>,
    pub pods: Option<SysCgroup>,
}

/// `/proc/<pid>/cgroup`: the process's memory and CPU accounting cgroups (v1: the `memory`
/// and `cpuacct` lines, CPU falling back to memory's; v2: the `0::` line).
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
                        "cpuacct" => cpu = Some(path.to_owned()),
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

/// When process `pid` (`self` allowed) started: field 22 of `/proc/<pid>/stat` (clock ticks
/// after boot) + the boot time.
pub fn process_start_time(
    fs: &dyn StatsFs,
    proc: &Path,
    pid: &str,
    boot: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let stat = fs.read_to_string(&proc.join(pid).join("stat")).ok()?;
    // `pid (comm) state …`: comm may hold spaces and parentheses; fields resume after the last `)`.
    let (_, rest) = stat.rsplit_once(')')?;
    let ticks: i64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some(boot + TimeDelta::milliseconds(ticks.saturating_mul(1000 / USER_HZ)))
}

/// The socket inodes bound to `socket` (`/proc/net/unix`: the listener and its accepted
/// connections carry the path).
fn socket_inodes(fs: &dyn StatsFs, proc: &Path, socket: &Path) -> Vec<String> {
    let Ok(table) = fs.read_to_string(&proc.join("net/unix")) else {
        return Vec::new();
    };
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 8 && Path::new(f[7]) == socket).then(|| f[6].to_owned())
        })
        .collect()
}

/// The container runtime's PID: among the processes named like a runtime, the one holding
/// the CRI socket `socket`; without a socket match, the only such process (several runtimes,
/// none serving our socket: none).
pub fn find_runtime_pid(fs: &dyn StatsFs, proc: &Path, socket: Option<&Path>) -> Option<u32> {
    let candidates: Vec<u32> = fs
        .list_dir(proc)
        .ok()?
        .iter()
        .filter_map(|n| n.parse::<u32>().ok())
        .filter(|pid| {
            fs.read_to_string(&proc.join(pid.to_string()).join("comm"))
                .is_ok_and(|c| RUNTIME_COMMS.contains(&c.trim()))
        })
        .collect();
    let inodes = socket.map_or_else(Vec::new, |s| socket_inodes(fs, proc, s));
    if !inodes.is_empty() {
        let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
        for pid in &candidates {
            let fd_dir = proc.join(pid.to_string()).join("fd");
            let fds = fs.list_dir(&fd_dir).unwrap_or_default();
            let holds = fds.iter().any(|fd| {
                fs.read_link(&fd_dir.join(fd))
                    .is_ok_and(|t| wanted.iter().any(|w| t.as_os_str() == w.as_str()))
            });
            if holds {
                return Some(*pid);
            }
        }
    }
    match candidates.as_slice() {
        [only] => Some(*only),
        _ => None,
    }
}

/// Resolves the system containers once per collection; caches the runtime PID (checked by
/// name each time, looked up again at most once a minute when missing).
#[derive(Debug, Clone, Default)]
pub struct SystemLocator {
    runtime_pid: Option<u32>,
    runtime_tried_at: Option<DateTime<Utc>>,
    kubelet: Option<(SysCgroup, Option<DateTime<Utc>>)>,
}

impl SystemLocator {
    pub fn resolve(
        &mut self,
        fs: &dyn StatsFs,
        layout: &CgroupLayout,
        s: &StatsSettings,
        now: DateTime<Utc>,
    ) -> SystemCgroups {
        let proc = s.proc_root.as_path();
        let own = |pid: &str| {
            fs.read_to_string(&proc.join(pid).join("cgroup"))
                .ok()
                .and_then(|c| parse_proc_cgroup(&c, layout.mode))
        };
        if self.kubelet.is_none() {
            let cg = if s.kubelet_cgroups.is_empty() {
                own("self")
            } else {
                Some(SysCgroup::named(&s.kubelet_cgroups))
            };
            let start = read_boot_time(fs, proc)
                .and_then(|boot| process_start_time(fs, proc, "self", boot));
            self.kubelet = cg.map(|cg| (cg, start));
        }
        let runtime = if s.runtime_cgroups.is_empty() {
            if let Some(pid) = self.runtime_pid {
                let alive = fs
                    .read_to_string(&proc.join(pid.to_string()).join("comm"))
                    .is_ok_and(|c| RUNTIME_COMMS.contains(&c.trim()));
                if !alive {
                    self.runtime_pid = None;
                }
            }
            let due = self
                .runtime_tried_at
                .is_none_or(|at| now - at >= RUNTIME_RETRY);
            if self.runtime_pid.is_none() && due {
                self.runtime_tried_at = Some(now);
                self.runtime_pid = find_runtime_pid(fs, proc, s.runtime_endpoint.as_deref());
            }
            self.runtime_pid.and_then(|pid| own(&pid.to_string()))
        } else {
            Some(SysCgroup::named(&s.runtime_cgroups))
        };
        let root = s.cgroup_root.trim_end_matches('/');
        let pods = if s.cgroups_per_qos {
            format!("{root}/kubepods")
        } else if root.is_empty() {
            "/".to_owned()
        } else {
            root.to_owned()
        };
        SystemCgroups {
            kubelet: self.kubelet.as_ref().map(|(cg, _)| cg.clone()),
            kubelet_start: self.kubelet.as_ref().and_then(|(_, t)| *t),
            runtime,
            misc: (!s.system_cgroups.is_empty()).then(|| SysCgroup::named(&s.system_cgroups)),
            pods: Some(SysCgroup::named(&pods)),
        }
    }
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
#[allow(clippy::unwrap_used)]
mod tests;
