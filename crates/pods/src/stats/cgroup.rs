//! Cgroup and procfs readers of the stats provider (what cadvisor reads for the kubelet):
//! memory usage / working set (usage − inactive_file) and CPU time of a cgroup on v1
//! (`memory.usage_in_bytes`, `memory.stat` `total_*`, `cpuacct.usage`) and v2
//! (`memory.current`, `memory.stat`, `cpu.stat` `usage_usec`), node memory from
//! `/proc/meminfo` and the root cgroup, and process counts (`pid_max`, `threads-max`,
//! `/proc/loadavg`). Pure parsers plus reads through [`StatsFs`]; owns no state.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::fs::StatsFs;

/// Which cgroup hierarchy the host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupMode {
    /// One hierarchy per controller under `<mount>/<controller>` (cgroup2 at `unified` is
    /// controller-less on hybrid hosts and ignored).
    V1,
    /// The unified hierarchy at `<mount>`.
    V2,
}

/// Where the cgroup hierarchies are mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    pub mount: PathBuf,
    pub mode: CgroupMode,
}

impl CgroupLayout {
    /// `<mount>/cgroup.controllers` exists only on a pure v2 host.
    pub fn detect(fs: &dyn StatsFs, mount: &Path) -> Self {
        let mode = if fs.exists(&mount.join("cgroup.controllers")) {
            CgroupMode::V2
        } else {
            CgroupMode::V1
        };
        Self {
            mount: mount.to_path_buf(),
            mode,
        }
    }

    /// The directory of the cgroup at `rel` in `controller`'s hierarchy (v2: the unified one).
    pub fn dir(&self, controller: &str, rel: &str) -> PathBuf {
        let rel = rel.trim_start_matches('/');
        match self.mode {
            CgroupMode::V1 => self.mount.join(controller).join(rel),
            CgroupMode::V2 => self.mount.join(rel),
        }
    }
}

/// Memory figures of one cgroup, in bytes (page faults are counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemorySample {
    pub usage: u64,
    pub working_set: u64,
    pub rss: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
}

/// One reading of a cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupSample {
    pub memory: Option<MemorySample>,
    /// Cumulative CPU time in nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// Processes (tasks) in the cgroup (`pids.current`).
    pub pids: Option<u64>,
}

/// `key value` lines (`memory.stat`, `cpu.stat`).
pub fn parse_flat_keyed(s: &str) -> HashMap<&str, u64> {
    s.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?, it.next()?.parse().ok()?))
        })
        .collect()
}

/// The values of `keys` in a flat-keyed file (`key value` lines), 0 for a missing key; as in
/// `parse_flat_keyed`, a line whose value is not a number is skipped and a repeated key's last
/// line wins. No map is built: a pod's `memory.stat` has dozens of lines and four are wanted.
pub fn flat_values<const N: usize>(s: &str, keys: [&str; N]) -> [u64; N] {
    let mut out = [0; N];
    for line in s.lines() {
        let mut it = line.split_whitespace();
        let (Some(key), Some(value)) = (it.next(), it.next()) else {
            continue;
        };
        if let Some(i) = keys.iter().position(|k| *k == key)
            && let Ok(value) = value.parse()
        {
            out[i] = value;
        }
    }
    out
}

/// `/proc/meminfo` in bytes (`kB` values × 1024).
pub fn parse_meminfo(s: &str) -> HashMap<&str, u64> {
    s.lines()
        .filter_map(|l| {
            let (k, rest) = l.split_once(':')?;
            let mut it = rest.split_whitespace();
            let v: u64 = it.next()?.parse().ok()?;
            let v = if it.next() == Some("kB") { v * 1024 } else { v };
            Some((k.trim(), v))
        })
        .collect()
}

fn read_u64(fs: &dyn StatsFs, path: &Path) -> Option<u64> {
    fs.read_to_string(path).ok()?.trim().parse().ok()
}

/// Memory of a cgroup at `rel` (relative to the hierarchy root), if it exists.
pub fn read_memory(fs: &dyn StatsFs, layout: &CgroupLayout, rel: &str) -> Option<MemorySample> {
    let dir = layout.dir("memory", rel);
    match layout.mode {
        CgroupMode::V1 => {
            let usage = read_u64(fs, &dir.join("memory.usage_in_bytes"))?;
            let stat = fs.read_to_string(&dir.join("memory.stat")).ok()?;
            let [inactive_file, rss, pgfault, pgmajfault] = flat_values(
                &stat,
                [
                    "total_inactive_file",
                    "total_rss",
                    "total_pgfault",
                    "total_pgmajfault",
                ],
            );
            Some(MemorySample {
                usage,
                working_set: usage.saturating_sub(inactive_file),
                rss,
                page_faults: pgfault,
                major_page_faults: pgmajfault,
            })
        }
        CgroupMode::V2 => {
            let usage = read_u64(fs, &dir.join("memory.current"))?;
            let stat = fs.read_to_string(&dir.join("memory.stat")).ok()?;
            let [inactive_file, anon, pgfault, pgmajfault] =
                flat_values(&stat, ["inactive_file", "anon", "pgfault", "pgmajfault"]);
            Some(MemorySample {
                usage,
                working_set: usage.saturating_sub(inactive_file),
                rss: anon,
                page_faults: pgfault,
                major_page_faults: pgmajfault,
            })
        }
    }
}

/// Cumulative CPU time (ns) of a cgroup at `rel`.
pub fn read_cpu_ns(fs: &dyn StatsFs, layout: &CgroupLayout, rel: &str) -> Option<u64> {
    match layout.mode {
        CgroupMode::V1 => read_u64(fs, &layout.dir("cpuacct", rel).join("cpuacct.usage")),
        CgroupMode::V2 => {
            let stat = fs
                .read_to_string(&layout.dir("cpu", rel).join("cpu.stat"))
                .ok()?;
            parse_flat_keyed(&stat)
                .get("usage_usec")
                .map(|u| u.saturating_mul(1000))
        }
    }
}

/// A cgroup's memory, CPU and process count; `None` when its memory cgroup does not exist.
pub fn read_cgroup(fs: &dyn StatsFs, layout: &CgroupLayout, rel: &str) -> Option<CgroupSample> {
    let memory = read_memory(fs, layout, rel)?;
    Some(CgroupSample {
        memory: Some(memory),
        cpu_usage_ns: read_cpu_ns(fs, layout, rel),
        pids: read_u64(fs, &layout.dir("pids", rel).join("pids.current")),
    })
}

/// Node memory: capacity from `/proc/meminfo`, working set from the root cgroup as cadvisor
/// computes it (v1: root `memory.usage_in_bytes` − `total_inactive_file`; v2, whose root has
/// no `memory.current`: MemTotal − MemFree − inactive file pages). Returns (capacity, sample).
pub fn read_node_memory(
    fs: &dyn StatsFs,
    layout: &CgroupLayout,
    proc: &Path,
) -> Option<(u64, MemorySample)> {
    let meminfo = fs.read_to_string(&proc.join("meminfo")).ok()?;
    let meminfo = parse_meminfo(&meminfo);
    let total = *meminfo.get("MemTotal")?;
    let sample = match layout.mode {
        CgroupMode::V1 => read_memory(fs, layout, "/"),
        CgroupMode::V2 => None,
    };
    let sample = sample.unwrap_or_else(|| {
        let usage = total.saturating_sub(meminfo.get("MemFree").copied().unwrap_or(0));
        let stat = fs
            .read_to_string(&layout.mount.join("memory.stat"))
            .unwrap_or_default();
        let stat = parse_flat_keyed(&stat);
        let inactive = stat
            .get("inactive_file")
            .or_else(|| meminfo.get("Inactive(file)"))
            .copied()
            .unwrap_or(0);
        MemorySample {
            usage,
            working_set: usage.saturating_sub(inactive),
            rss: stat.get("anon").copied().unwrap_or(0),
            page_faults: stat.get("pgfault").copied().unwrap_or(0),
            major_page_faults: stat.get("pgmajfault").copied().unwrap_or(0),
        }
    });
    Some((total, sample))
}

/// Node CPU time (ns): the root cgroup's, or the `cpu` line of `/proc/stat` (USER_HZ = 100).
pub fn read_node_cpu_ns(fs: &dyn StatsFs, layout: &CgroupLayout, proc: &Path) -> Option<u64> {
    if let Some(ns) = read_cpu_ns(fs, layout, "/") {
        return Some(ns);
    }
    let stat = fs.read_to_string(&proc.join("stat")).ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    let busy: u64 = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, x)| *x)
        .sum();
    Some(busy.saturating_mul(10_000_000))
}

/// Upstream `pidlimit.Stats`: the usable PID limit (min of `pid_max` and `threads-max`) and
/// the number of running processes (threads, the `/proc/loadavg` total).
pub fn read_pid_stats(fs: &dyn StatsFs, proc: &Path) -> Option<(u64, u64)> {
    let pid_max = read_u64(fs, &proc.join("sys/kernel/pid_max"))?;
    let max =
        read_u64(fs, &proc.join("sys/kernel/threads-max")).map_or(pid_max, |t| t.min(pid_max));
    let loadavg = fs.read_to_string(&proc.join("loadavg")).ok()?;
    let running = loadavg
        .split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()?;
    Some((max, running))
}

#[cfg(test)]
mod tests {
    use super::super::fs::SystemFs;
    use super::*;

    fn write(root: &Path, rel: &str, content: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    #[test]
    fn flat_values_reads_what_parse_flat_keyed_reads() {
        let stat = "cache 10\ntotal_rss 7\nrss x\ntotal_rss 9\nbroken\npgfault 3 extra\n";
        let map = parse_flat_keyed(stat);
        let keys = ["total_rss", "pgfault", "cache", "rss", "missing"];
        let want = keys.map(|k| map.get(k).copied().unwrap_or(0));
        assert_eq!(flat_values(stat, keys), want);
        assert_eq!(want, [9, 3, 10, 0, 0]);
    }

    #[test]
    fn v1_tree_pod_and_node_memory_cpu_and_pids() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path();
        write(m, "memory/memory.usage_in_bytes", "3000000000\n");
        write(
            m,
            "memory/memory.stat",
            "cache 1\ntotal_inactive_file 1000000000\ntotal_rss 1500000000\ntotal_pgfault 9\ntotal_pgmajfault 2\n",
        );
        let pod = "kubepods/burstable/podabc";
        write(m, &format!("memory/{pod}/memory.usage_in_bytes"), "300\n");
        write(
            m,
            &format!("memory/{pod}/memory.stat"),
            "inactive_file 7\ntotal_inactive_file 100\ntotal_rss 150\n",
        );
        write(m, &format!("cpuacct/{pod}/cpuacct.usage"), "123456789\n");
        write(m, &format!("pids/{pod}/pids.current"), "4\n");
        write(m, "cpuacct/cpuacct.usage", "999\n");
        let proc = m.join("proc");
        write(&proc, "meminfo", "MemTotal: 4000000 kB\nMemFree: 1 kB\n");

        let layout = CgroupLayout::detect(&SystemFs, m);
        assert_eq!(layout.mode, CgroupMode::V1);
        let s = read_cgroup(&SystemFs, &layout, pod).unwrap();
        assert_eq!(
            s.memory.unwrap(),
            MemorySample {
                usage: 300,
                working_set: 200,
                rss: 150,
                page_faults: 0,
                major_page_faults: 0
            }
        );
        assert_eq!(s.cpu_usage_ns, Some(123_456_789));
        assert_eq!(s.pids, Some(4));
        assert!(read_cgroup(&SystemFs, &layout, "kubepods/podnone").is_none());

        let (cap, node) = read_node_memory(&SystemFs, &layout, &proc).unwrap();
        assert_eq!(cap, 4_000_000 * 1024);
        assert_eq!(node.working_set, 2_000_000_000);
        assert_eq!(node.major_page_faults, 2);
        assert_eq!(read_node_cpu_ns(&SystemFs, &layout, &proc), Some(999));
    }

    #[test]
    fn v2_tree_pod_and_node_memory_cpu_and_pids() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path();
        write(m, "cgroup.controllers", "cpu memory pids\n");
        write(m, "memory.stat", "anon 10\ninactive_file 1048576\n");
        let pod = "kubepods/podxyz";
        write(m, &format!("{pod}/memory.current"), "5000\n");
        write(
            m,
            &format!("{pod}/memory.stat"),
            "anon 3000\ninactive_file 1000\npgfault 5\npgmajfault 1\n",
        );
        write(
            m,
            &format!("{pod}/cpu.stat"),
            "usage_usec 250\nuser_usec 200\n",
        );
        write(m, &format!("{pod}/pids.current"), "2\n");
        let proc = m.join("proc");
        write(
            &proc,
            "meminfo",
            "MemTotal: 8192 kB\nMemFree: 2048 kB\nInactive(file): 9 kB\n",
        );
        write(
            &proc,
            "stat",
            "cpu  100 0 50 1000 7 1 1 0 0 0\ncpu0 1 1 1 1\n",
        );

        let layout = CgroupLayout::detect(&SystemFs, m);
        assert_eq!(layout.mode, CgroupMode::V2);
        let s = read_cgroup(&SystemFs, &layout, pod).unwrap();
        assert_eq!(
            s.memory.unwrap(),
            MemorySample {
                usage: 5000,
                working_set: 4000,
                rss: 3000,
                page_faults: 5,
                major_page_faults: 1
            }
        );
        assert_eq!(s.cpu_usage_ns, Some(250_000));
        assert_eq!(s.pids, Some(2));

        // Root memory.stat's inactive_file wins over meminfo's.
        let (cap, node) = read_node_memory(&SystemFs, &layout, &proc).unwrap();
        assert_eq!(cap, 8192 * 1024);
        assert_eq!(node.usage, 6144 * 1024);
        assert_eq!(node.working_set, 6144 * 1024 - 1_048_576);
        // No root cpu.stat: /proc/stat busy jiffies (100+50+1+1) × 10 ms.
        assert_eq!(
            read_node_cpu_ns(&SystemFs, &layout, &proc),
            Some(152 * 10_000_000)
        );
    }

    #[test]
    fn pid_stats_take_the_smaller_limit_and_the_loadavg_total() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "sys/kernel/pid_max", "4194304\n");
        write(dir.path(), "sys/kernel/threads-max", "62000\n");
        write(dir.path(), "loadavg", "0.10 0.20 0.30 2/345 6789\n");
        assert_eq!(read_pid_stats(&SystemFs, dir.path()), Some((62_000, 345)));
    }

    #[test]
    fn this_host_yields_node_memory_cpu_and_pids() {
        let mount = Path::new("/sys/fs/cgroup");
        let layout = CgroupLayout::detect(&SystemFs, mount);
        let proc = Path::new("/proc");
        let (cap, m) = read_node_memory(&SystemFs, &layout, proc).unwrap();
        assert!(
            cap > 0 && m.working_set > 0 && m.working_set <= m.usage,
            "{cap} {m:?}"
        );
        assert!(m.usage <= cap.saturating_mul(2), "{cap} {m:?}");
        assert!(read_node_cpu_ns(&SystemFs, &layout, proc).unwrap() > 0);
        let (max, cur) = read_pid_stats(&SystemFs, proc).unwrap();
        assert!(cur > 0 && cur < max, "{cur} {max}");
    }
}
