//! Network readers of the stats provider (what cadvisor reads for the kubelet): interface
//! counters from `/proc/net/dev` (the host's) and `/proc/<pid>/net/dev` of a process in a
//! pod's cgroup (the pod's network namespace), and the upstream-shaped [`NetworkStats`] built
//! from them (`eth0` inline, as upstream's `cadvisorInfoToNetworkStats` for node and pods). Pure
//! parsers plus reads through [`StatsFs`]; owns no state.

use std::path::Path;

use chrono::{DateTime, Utc};

use super::cgroup::CgroupLayout;
use super::fs::StatsFs;
use super::system::process_start_ticks;
use super::types::{InterfaceStats, NetworkStats};

/// Upstream `defaultNetworkInterfaceName`: the interface whose counters are inlined (node and
/// pods alike; a host without `eth0` gets an empty inline part, as upstream).
pub const DEFAULT_INTERFACE: &str = "eth0";

/// Interfaces cadvisor leaves out (name prefixes, case-insensitive): loopback and the host
/// sides of container links.
const IGNORED_PREFIXES: &[&str] = &["lo", "veth", "docker", "nerdctl"];

fn ignored(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    IGNORED_PREFIXES.iter().any(|p| lower.starts_with(p))
}

/// `/proc/net/dev`: one entry per interface (bytes and errors, both directions), in file
/// order, without the interfaces cadvisor ignores.
pub fn parse_net_dev(s: &str) -> Vec<InterfaceStats> {
    s.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            let v: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs …
            if v.len() < 11 || name.is_empty() || ignored(name) {
                return None;
            }
            Some(InterfaceStats {
                name: name.to_owned(),
                rx_bytes: Some(v[0]),
                rx_errors: Some(v[2]),
                tx_bytes: Some(v[8]),
                tx_errors: Some(v[10]),
            })
        })
        .collect()
}

/// Upstream's `NetworkStats` from a list of interfaces: `eth0` inline when present.
fn network_stats(interfaces: Vec<InterfaceStats>, now: DateTime<Utc>) -> NetworkStats {
    let inline = interfaces
        .iter()
        .find(|i| i.name == DEFAULT_INTERFACE)
        .cloned()
        .unwrap_or_default();
    NetworkStats {
        time: now,
        default: inline,
        interfaces,
    }
}

/// The network namespace of a process directory (`/proc` or `/proc/<pid>`): its `net/dev`.
fn read_net_dev(fs: &dyn StatsFs, proc_dir: &Path, now: DateTime<Utc>) -> Option<NetworkStats> {
    let dev = fs.read_to_string(&proc_dir.join("net/dev")).ok()?;
    Some(network_stats(parse_net_dev(&dev), now))
}

/// The host's interfaces (`/proc/net/dev`), `eth0` inline.
pub fn read_node_network(
    fs: &dyn StatsFs,
    proc: &Path,
    now: DateTime<Utc>,
) -> Option<NetworkStats> {
    read_net_dev(fs, proc, now)
}

/// PIDs of the processes directly in a cgroup (`cgroup.procs`).
fn procs(fs: &dyn StatsFs, dir: &Path) -> Vec<u32> {
    fs.read_to_string(&dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// The process a pod's network was read through: its pid and its start time (clock ticks
/// after boot, field 22 of `/proc/<pid>/stat`). The start time tells the same process from a
/// later one that was given the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetProcess {
    pid: u32,
    start: u64,
}

impl NetProcess {
    #[cfg(test)]
    pub fn for_test(pid: u32, start: u64) -> Self {
        Self { pid, start }
    }
}

/// The start time of process `pid` (see [`NetProcess`]).
fn start_time(fs: &dyn StatsFs, proc: &Path, pid: u32) -> Option<u64> {
    process_start_ticks(fs, proc, &pid.to_string())
}

/// A pod's network reading and the process it was read through.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupNetwork {
    pub stats: Option<NetworkStats>,
    pub process: Option<NetProcess>,
}

/// The network of the namespace the cgroup's processes share: `/proc/<pid>/net/dev` of the
/// first one readable, `eth0` inline (hostNetwork pods see the host's interfaces, as
/// upstream reports them).
///
/// `known` is the process the last reading went through (cAdvisor too keeps a container's
/// pid): while it is the same process (same start time), its `net/dev` answers and the cgroup
/// is not looked at. Otherwise the processes are those of the cgroup at `rel` or, when it has
/// none itself (a pod's processes live in its containers' cgroups), of its direct children in
/// name order, read one child at a time: the first child with a readable process answers. v1
/// reads the `pids` hierarchy, else `memory`.
pub fn read_cgroup_network(
    fs: &dyn StatsFs,
    layout: &CgroupLayout,
    proc: &Path,
    rel: &str,
    now: DateTime<Utc>,
    known: Option<NetProcess>,
) -> CgroupNetwork {
    if let Some(p) = known
        && start_time(fs, proc, p.pid) == Some(p.start)
        && let Some(stats) = read_net_dev(fs, &proc.join(p.pid.to_string()), now)
    {
        return CgroupNetwork {
            stats: Some(stats),
            process: known,
        };
    }
    let (process, stats) = find_cgroup_network(fs, layout, proc, rel, now)
        .map_or((None, None), |(process, stats)| (process, Some(stats)));
    CgroupNetwork { stats, process }
}

/// The first process of the cgroup (or of its first child that has one) whose `net/dev` is
/// readable, with that reading. The start time is read before `net/dev`, so a pid reused in
/// between is caught at the next reading rather than remembered.
fn find_cgroup_network(
    fs: &dyn StatsFs,
    layout: &CgroupLayout,
    proc: &Path,
    rel: &str,
    now: DateTime<Utc>,
) -> Option<(Option<NetProcess>, NetworkStats)> {
    let dirs = [layout.dir("pids", rel), layout.dir("memory", rel)];
    let dir = dirs.iter().find(|d| fs.exists(d))?;
    let of = |pids: Vec<u32>| {
        pids.into_iter().find_map(|pid| {
            let process = start_time(fs, proc, pid).map(|start| NetProcess { pid, start });
            read_net_dev(fs, &proc.join(pid.to_string()), now).map(|stats| (process, stats))
        })
    };
    let own = procs(fs, dir);
    if !own.is_empty() {
        return of(own);
    }
    let mut children = fs.list_dir(dir).unwrap_or_default();
    children.sort();
    children
        .into_iter()
        .find_map(|child| of(procs(fs, &dir.join(child))))
}

#[cfg(test)]
mod tests {
    use super::super::fs::FakeFs;
    use super::*;
    use crate::stats::cgroup::CgroupMode;

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3293      31    0    0    0     0          0         0     3293      31    0    0    0     0       0          0
  eth0: 128537985    4021    3    0    0     0          0         0   222716    2334    7    0    0     0       0          0
vethab12:  100  1 0 0 0 0 0 0  200 2 0 0 0 0 0 0
  cni0:    10       1    0    0    0     0          0         0       20       2    0    0    0     0       0          0
";

    #[test]
    fn net_dev_keeps_bytes_and_errors_and_drops_loopback_and_veths() {
        let ifs = parse_net_dev(NET_DEV);
        assert_eq!(
            ifs,
            vec![
                InterfaceStats {
                    name: "eth0".into(),
                    rx_bytes: Some(128_537_985),
                    rx_errors: Some(3),
                    tx_bytes: Some(222_716),
                    tx_errors: Some(7),
                },
                InterfaceStats {
                    name: "cni0".into(),
                    rx_bytes: Some(10),
                    rx_errors: Some(0),
                    tx_bytes: Some(20),
                    tx_errors: Some(0),
                },
            ]
        );
        assert!(parse_net_dev("garbage\n x: 1 2\n").is_empty());
    }

    #[test]
    fn node_network_inlines_eth0_and_lists_every_interface() {
        let fs = FakeFs::default();
        let now = Utc::now();
        let dev = format!("{NET_DEV}  ens5: 500 5 1 0 0 0 0 0 600 6 2 0 0 0 0 0\n");
        fs.set_file("/proc/net/dev", &dev);
        let n = read_node_network(&fs, Path::new("/proc"), now).unwrap();
        assert_eq!(n.default.name, "eth0");
        assert_eq!(n.default.rx_bytes, Some(128_537_985));
        assert_eq!(n.interfaces.len(), 3, "{n:?}");

        // No eth0: the inline part is empty (upstream), the interfaces are still listed.
        fs.set_file(
            "/proc/net/dev",
            "h\nh\n  lo: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n  ens3: 9 1 0 0 0 0 0 0 8 1 0 0 0 0 0 0\n",
        );
        let n = read_node_network(&fs, Path::new("/proc"), now).unwrap();
        assert_eq!(n.default, InterfaceStats::default());
        let json = serde_json::to_value(&n).unwrap();
        assert_eq!(json["name"], "");
        assert!(json.get("rxBytes").is_none(), "{json}");
        assert_eq!(json["interfaces"][0]["name"], "ens3");
        assert_eq!(json["interfaces"][0]["txBytes"], 8);
    }

    #[test]
    fn pod_network_from_a_process_of_a_container_cgroup_v1() {
        let fs = FakeFs::default();
        let layout = CgroupLayout {
            mount: "/cg".into(),
            mode: CgroupMode::V1,
        };
        let pod = "/kubepods/besteffort/podu1";
        // The pod cgroup itself holds no process; its sandbox's and container's do. The first
        // listed process is gone: the next one answers.
        fs.set_file(format!("/cg/pids{pod}/cgroup.procs"), "");
        fs.set_file(format!("/cg/pids{pod}/aaa/cgroup.procs"), "41\n");
        fs.set_file(format!("/cg/pids{pod}/bbb/cgroup.procs"), "42\n43\n");
        fs.set_file("/proc/42/net/dev", NET_DEV);
        let now = Utc::now();
        let n = read_cgroup_network(&fs, &layout, Path::new("/proc"), pod, now, None)
            .stats
            .unwrap();
        assert_eq!(n.default.name, "eth0");
        assert_eq!(n.default.rx_bytes, Some(128_537_985));
        assert_eq!(n.interfaces.len(), 2);
        assert!(
            read_cgroup_network(
                &fs,
                &layout,
                Path::new("/proc"),
                "/kubepods/podnone",
                now,
                None
            ) == CgroupNetwork {
                stats: None,
                process: None
            }
        );
    }

    #[test]
    fn pod_network_v2_reads_the_unified_dir_and_no_eth0_leaves_the_inline_part_empty() {
        let fs = FakeFs::default();
        let layout = CgroupLayout {
            mount: "/cg".into(),
            mode: CgroupMode::V2,
        };
        fs.set_file("/cg/kubepods/podu2/cgroup.procs", "7\n");
        fs.set_file(
            "/proc/7/net/dev",
            "h\nh\n  lo: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n  net1: 5 1 0 0 0 0 0 0 6 1 0 0 0 0 0 0\n",
        );
        let n = read_cgroup_network(
            &fs,
            &layout,
            Path::new("/proc"),
            "/kubepods/podu2",
            Utc::now(),
            None,
        )
        .stats
        .unwrap();
        assert_eq!(n.default, InterfaceStats::default());
        assert_eq!(n.interfaces[0].name, "net1");
    }

    /// 110 pods every 10 s: a pod's network costs its own `cgroup.procs`, the first child's,
    /// and one `net/dev`; the other containers' cgroups are not read.
    #[test]
    fn pod_network_stops_at_the_first_child_that_answers() {
        let fs = FakeFs::default();
        let layout = CgroupLayout {
            mount: "/cg".into(),
            mode: CgroupMode::V1,
        };
        let pod = "/kubepods/podu3";
        fs.set_file(format!("/cg/pids{pod}/cgroup.procs"), "");
        for (child, pid) in [("c1", 51), ("c2", 52), ("c3", 53)] {
            fs.set_file(
                format!("/cg/pids{pod}/{child}/cgroup.procs"),
                &format!("{pid}\n"),
            );
            fs.set_file(format!("/proc/{pid}/net/dev"), NET_DEV);
        }
        let n = read_cgroup_network(&fs, &layout, Path::new("/proc"), pod, Utc::now(), None);
        assert_eq!(n.stats.unwrap().default.name, "eth0");
        let reads = fs.reads();
        let want: Vec<std::path::PathBuf> = [
            format!("/cg/pids{pod}/cgroup.procs"),
            format!("/cg/pids{pod}/c1/cgroup.procs"),
            "/proc/51/stat".to_string(),
            "/proc/51/net/dev".to_string(),
        ]
        .into_iter()
        .map(Into::into)
        .collect();
        assert_eq!(reads, want);
    }

    /// `/proc/<pid>/stat` with start time `start`; the command name holds spaces and a `)`.
    fn proc_stat(pid: u32, start: u64) -> String {
        format!("{pid} (a) b (c) S 1 1 1 0 -1 4194560 10 0 0 0 3 4 0 0 20 0 1 0 {start} 1 2 3")
    }

    /// Pod `pod` with its process `pid` (start time `start`) in its first container's cgroup.
    fn pod_with_process(fs: &FakeFs, pod: &str, pid: u32, start: u64) {
        fs.set_file(format!("/cg/pids{pod}/cgroup.procs"), "");
        fs.set_file(
            format!("/cg/pids{pod}/c1/cgroup.procs"),
            &format!("{pid}\n"),
        );
        fs.set_file(format!("/proc/{pid}/stat"), &proc_stat(pid, start));
        fs.set_file(format!("/proc/{pid}/net/dev"), NET_DEV);
    }

    fn v1() -> CgroupLayout {
        CgroupLayout {
            mount: "/cg".into(),
            mode: CgroupMode::V1,
        }
    }

    #[test]
    fn the_start_time_is_counted_after_the_last_parenthesis() {
        let fs = FakeFs::default();
        fs.set_file("/proc/9/stat", &proc_stat(9, 218_831));
        assert_eq!(start_time(&fs, Path::new("/proc"), 9), Some(218_831));
        fs.set_file("/proc/10/stat", "10 (x) S 1 2");
        assert_eq!(start_time(&fs, Path::new("/proc"), 10), None);
        assert_eq!(start_time(&fs, Path::new("/proc"), 11), None);
    }

    /// Every 10–30 s per pod: while the process the last reading went through lives, its
    /// `stat` and `net/dev` are the only reads; the cgroup is not listed.
    #[test]
    fn a_remembered_process_answers_without_a_look_at_the_cgroup() {
        let fs = FakeFs::default();
        let pod = "/kubepods/podu4";
        pod_with_process(&fs, pod, 61, 5000);
        let proc = Path::new("/proc");
        let first = read_cgroup_network(&fs, &v1(), proc, pod, Utc::now(), None);
        assert_eq!(first.process, Some(NetProcess::for_test(61, 5000)));
        let before = fs.reads().len();
        let again = read_cgroup_network(&fs, &v1(), proc, pod, Utc::now(), first.process);
        assert_eq!(again.stats.unwrap().default.rx_bytes, Some(128_537_985));
        assert_eq!(again.process, first.process);
        let reads: Vec<_> = fs.reads().split_off(before);
        let want: Vec<std::path::PathBuf> = vec!["/proc/61/stat".into(), "/proc/61/net/dev".into()];
        assert_eq!(reads, want);
    }

    /// The remembered process is gone and its pid belongs to another process now (a host
    /// process, say): its `net/dev` must not be read as the pod's.
    #[test]
    fn a_reused_pid_is_not_taken_for_the_remembered_process() {
        let fs = FakeFs::default();
        let pod = "/kubepods/podu5";
        pod_with_process(&fs, pod, 71, 100);
        let proc = Path::new("/proc");
        let first = read_cgroup_network(&fs, &v1(), proc, pod, Utc::now(), None);
        // The sandbox was replaced: pid 72 is the pod's now, and pid 71 a host process's.
        pod_with_process(&fs, pod, 72, 300);
        fs.set_file("/proc/71/stat", &proc_stat(71, 200));
        fs.set_file(
            "/proc/71/net/dev",
            "h\nh\n  eth0: 9 9 0 0 0 0 0 0 9 9 0 0 0 0 0 0\n",
        );
        let n = read_cgroup_network(&fs, &v1(), proc, pod, Utc::now(), first.process);
        assert_eq!(n.process, Some(NetProcess::for_test(72, 300)));
        assert_eq!(n.stats.unwrap().default.rx_bytes, Some(128_537_985));
        // Read once, by the first reading (when 71 was the pod's), never again.
        let host_reads = fs
            .reads()
            .into_iter()
            .filter(|p| p == Path::new("/proc/71/net/dev"));
        assert_eq!(host_reads.count(), 1);
        // A process that is gone altogether: the cgroup is looked at again.
        fs.remove_file("/proc/72/stat");
        fs.remove_file("/proc/72/net/dev");
        let gone = read_cgroup_network(&fs, &v1(), proc, pod, Utc::now(), n.process);
        assert_eq!(
            gone,
            CgroupNetwork {
                stats: None,
                process: None
            }
        );
    }
}
