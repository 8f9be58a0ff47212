//! Network readers of the stats provider (what cadvisor reads for the kubelet): interface
//! counters from `/proc/net/dev` (the host's) and `/proc/<pid>/net/dev` of a process in a
//! pod's cgroup (the pod's network namespace), and the upstream-shaped [`NetworkStats`] built
//! from them (`eth0` inline, as upstream's `cadvisorInfoToNetworkStats` for node and pods). Pure
//! parsers plus reads through [`StatsFs`]; owns no state.

use std::path::Path;

use chrono::{DateTime, Utc};

use super::cgroup::CgroupLayout;
use super::fs::StatsFs;
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

/// The network of the namespace the cgroup's processes share: `/proc/<pid>/net/dev` of the
/// first one readable, `eth0` inline (hostNetwork pods see the host's interfaces, as
/// upstream reports them). The processes are those of the cgroup at `rel` or, when it has none
/// itself (a pod's processes live in its containers' cgroups), of its direct children in name
/// order, read one child at a time: the first child with a readable process answers, so a pod
/// costs one `cgroup.procs` read every collection, not one per container. v1 reads the `pids`
/// hierarchy, else `memory`.
pub fn read_cgroup_network(
    fs: &dyn StatsFs,
    layout: &CgroupLayout,
    proc: &Path,
    rel: &str,
    now: DateTime<Utc>,
) -> Option<NetworkStats> {
    let dirs = [layout.dir("pids", rel), layout.dir("memory", rel)];
    let dir = dirs.iter().find(|d| fs.exists(d))?;
    let of = |pids: Vec<u32>| {
        pids.into_iter()
            .find_map(|pid| read_net_dev(fs, &proc.join(pid.to_string()), now))
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
#[allow(clippy::unwrap_used)]
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
        let n = read_cgroup_network(&fs, &layout, Path::new("/proc"), pod, now).unwrap();
        assert_eq!(n.default.name, "eth0");
        assert_eq!(n.default.rx_bytes, Some(128_537_985));
        assert_eq!(n.interfaces.len(), 2);
        assert!(
            read_cgroup_network(&fs, &layout, Path::new("/proc"), "/kubepods/podnone", now)
                .is_none()
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
        )
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
        let n = read_cgroup_network(&fs, &layout, Path::new("/proc"), pod, Utc::now());
        assert_eq!(n.unwrap().default.name, "eth0");
        let reads = fs.reads();
        let want: Vec<std::path::PathBuf> = [
            format!("/cg/pids{pod}/cgroup.procs"),
            format!("/cg/pids{pod}/c1/cgroup.procs"),
            "/proc/51/net/dev".to_string(),
        ]
        .into_iter()
        .map(Into::into)
        .collect();
        assert_eq!(reads, want);
    }
}
