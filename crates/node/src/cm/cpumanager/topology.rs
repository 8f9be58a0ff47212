//! CPU topology (upstream `cpumanager/topology`): which logical CPUs exist and how they group
//! into cores, sockets (physical packages) and NUMA nodes. Discovered from a sysfs CPU
//! directory (`/sys/devices/system/cpu` on a node; a temp dir with the same layout in tests);
//! emits an immutable [`CpuTopology`] with the queries the allocator needs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::cpuset::CpuSet;

/// Where one logical CPU sits. `core` is unique across sockets: the lowest CPU id of the core
/// (sysfs `core_id` repeats on every socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuInfo {
    pub numa: u32,
    pub socket: u32,
    pub core: u32,
}

/// CPU id → placement, for a subset of the machine's CPUs (upstream `CPUDetails`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuDetails(pub BTreeMap<u32, CpuInfo>);

impl CpuDetails {
    pub fn cpus(&self) -> CpuSet {
        self.0.keys().copied().collect()
    }

    /// Only the entries of `cpus`.
    pub fn keep_only(&self, cpus: &CpuSet) -> CpuDetails {
        CpuDetails(
            self.0
                .iter()
                .filter(|(id, _)| cpus.contains(**id))
                .map(|(id, info)| (*id, *info))
                .collect(),
        )
    }

    fn ids(&self, key: impl Fn(&CpuInfo) -> u32) -> Vec<u32> {
        let set: BTreeSet<u32> = self.0.values().map(key).collect();
        set.into_iter().collect()
    }

    fn cpus_where(&self, pred: impl Fn(&CpuInfo) -> bool) -> CpuSet {
        self.0
            .iter()
            .filter(|(_, info)| pred(info))
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn numa_nodes(&self) -> Vec<u32> {
        self.ids(|i| i.numa)
    }
    pub fn sockets(&self) -> Vec<u32> {
        self.ids(|i| i.socket)
    }
    pub fn cores(&self) -> Vec<u32> {
        self.ids(|i| i.core)
    }
    pub fn cpus_in_numa(&self, numa: u32) -> CpuSet {
        self.cpus_where(|i| i.numa == numa)
    }
    pub fn cpus_in_socket(&self, socket: u32) -> CpuSet {
        self.cpus_where(|i| i.socket == socket)
    }
    pub fn cpus_in_core(&self, core: u32) -> CpuSet {
        self.cpus_where(|i| i.core == core)
    }
    pub fn sockets_in_numa(&self, numa: u32) -> Vec<u32> {
        self.sub_ids(|i| i.numa == numa, |i| i.socket)
    }
    pub fn numa_in_socket(&self, socket: u32) -> Vec<u32> {
        self.sub_ids(|i| i.socket == socket, |i| i.numa)
    }
    pub fn cores_in_socket(&self, socket: u32) -> Vec<u32> {
        self.sub_ids(|i| i.socket == socket, |i| i.core)
    }
    pub fn cores_in_numa(&self, numa: u32) -> Vec<u32> {
        self.sub_ids(|i| i.numa == numa, |i| i.core)
    }

    fn sub_ids(&self, pred: impl Fn(&CpuInfo) -> bool, key: impl Fn(&CpuInfo) -> u32) -> Vec<u32> {
        let set: BTreeSet<u32> = self.0.values().filter(|i| pred(i)).map(key).collect();
        set.into_iter().collect()
    }
}

/// The machine's CPUs (upstream `CPUTopology`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuTopology {
    pub num_cpus: usize,
    pub num_cores: usize,
    pub num_sockets: usize,
    pub num_numa_nodes: usize,
    pub details: CpuDetails,
}

impl CpuTopology {
    /// Builds the topology from per-CPU placements (core ids already made unique).
    pub fn from_details(details: CpuDetails) -> Self {
        Self {
            num_cpus: details.0.len(),
            num_cores: details.cores().len(),
            num_sockets: details.sockets().len(),
            num_numa_nodes: details.numa_nodes().len(),
            details,
        }
    }

    /// A regular machine for tests and fakes: CPU ids numbered like Linux does on most x86
    /// boxes (first thread of every core, then the sibling threads), one NUMA node per socket.
    pub fn uniform(sockets: u32, cores_per_socket: u32, threads_per_core: u32) -> Self {
        let cores = sockets * cores_per_socket;
        let mut map = BTreeMap::new();
        for thread in 0..threads_per_core {
            for core in 0..cores {
                let cpu = thread * cores + core;
                let socket = core / cores_per_socket;
                map.insert(
                    cpu,
                    CpuInfo {
                        numa: socket,
                        socket,
                        core,
                    },
                );
            }
        }
        Self::from_details(CpuDetails(map))
    }

    pub fn cpus(&self) -> CpuSet {
        self.details.cpus()
    }

    pub fn cpus_per_core(&self) -> usize {
        self.num_cpus.checked_div(self.num_cores).unwrap_or(0)
    }

    pub fn cpus_per_socket(&self) -> usize {
        self.num_cpus.checked_div(self.num_sockets).unwrap_or(0)
    }
}

/// Why the topology could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("no online CPUs found under {0}")]
    Empty(PathBuf),
}

fn read(path: PathBuf) -> Result<String, TopologyError> {
    std::fs::read_to_string(&path).map_err(|source| TopologyError::Read { path, source })
}

fn read_u32(path: PathBuf) -> Result<u32, TopologyError> {
    let s = read(path.clone())?;
    s.trim().parse().map_err(|_| TopologyError::Parse {
        path,
        reason: format!("{:?} is not a number", s.trim()),
    })
}

/// NUMA node of a CPU: the `node<N>` entry in its directory (0 when the kernel has no NUMA).
fn numa_of(cpu_dir: &Path) -> u32 {
    std::fs::read_dir(cpu_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("node"))
                .and_then(|n| n.parse().ok())
        })
        .min()
        .unwrap_or(0)
}

/// Reads the topology of the online CPUs under `root` (`/sys/devices/system/cpu`).
pub fn discover(root: &Path) -> Result<CpuTopology, TopologyError> {
    let online_path = root.join("online");
    let online = CpuSet::parse(&read(online_path.clone())?).map_err(|e| TopologyError::Parse {
        path: online_path,
        reason: e.to_string(),
    })?;
    // (socket, sysfs core_id) → CPUs, to give each core a machine-unique id.
    let mut raw: BTreeMap<u32, (u32, u32, u32)> = BTreeMap::new();
    for cpu in online.iter() {
        let dir = root.join(format!("cpu{cpu}"));
        let socket = read_u32(dir.join("topology/physical_package_id"))?;
        let core_id = read_u32(dir.join("topology/core_id"))?;
        raw.insert(cpu, (numa_of(&dir), socket, core_id));
    }
    if raw.is_empty() {
        return Err(TopologyError::Empty(root.to_path_buf()));
    }
    let mut first_of_core: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    for (cpu, (_, socket, core_id)) in &raw {
        first_of_core.entry((*socket, *core_id)).or_insert(*cpu);
    }
    let details = raw
        .into_iter()
        .map(|(cpu, (numa, socket, core_id))| {
            let core = first_of_core
                .get(&(socket, core_id))
                .copied()
                .unwrap_or(cpu);
            (cpu, CpuInfo { numa, socket, core })
        })
        .collect();
    Ok(CpuTopology::from_details(CpuDetails(details)))
}

/// Test helper: writes a sysfs-like CPU directory for `(cpu, numa, socket, core_id)` entries.
#[cfg(test)]
pub(crate) fn write_fake_sysfs(root: &Path, cpus: &[(u32, u32, u32, u32)]) {
    let online: CpuSet = cpus.iter().map(|c| c.0).collect();
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(root.join("online"), format!("{online}\n")).unwrap();
    for (cpu, numa, socket, core) in cpus {
        let dir = root.join(format!("cpu{cpu}"));
        std::fs::create_dir_all(dir.join("topology")).unwrap();
        std::fs::create_dir_all(dir.join(format!("node{numa}"))).unwrap();
        std::fs::write(
            dir.join("topology/physical_package_id"),
            format!("{socket}\n"),
        )
        .unwrap();
        std::fs::write(dir.join("topology/core_id"), format!("{core}\n")).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovers_two_sockets_with_hyperthreads() {
        let dir = tempfile::tempdir().unwrap();
        // 2 sockets × 2 cores × 2 threads; core_id repeats per socket; cpu N and N+4 are siblings.
        let cpus: Vec<(u32, u32, u32, u32)> = (0..8)
            .map(|cpu| {
                let core = cpu % 4;
                (cpu, core / 2, core / 2, core % 2)
            })
            .collect();
        write_fake_sysfs(dir.path(), &cpus);
        // An offline CPU directory is ignored.
        std::fs::create_dir_all(dir.path().join("cpu8/topology")).unwrap();
        let topo = discover(dir.path()).unwrap();
        assert_eq!(topo.num_cpus, 8);
        assert_eq!(topo.num_cores, 4);
        assert_eq!(topo.num_sockets, 2);
        assert_eq!(topo.num_numa_nodes, 2);
        assert_eq!(topo.cpus_per_core(), 2);
        assert_eq!(topo.cpus_per_socket(), 4);
        assert_eq!(topo.details.cpus_in_core(1).to_string(), "1,5");
        assert_eq!(topo.details.cpus_in_socket(1).to_string(), "2-3,6-7");
        assert_eq!(topo.details.cores_in_socket(1), vec![2, 3]);
        assert_eq!(topo, CpuTopology::uniform(2, 2, 2));
    }

    #[test]
    fn missing_files_are_errors_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let err = discover(dir.path()).unwrap_err();
        assert!(err.to_string().contains("online"), "{err}");
        std::fs::write(dir.path().join("online"), "0\n").unwrap();
        let err = discover(dir.path()).unwrap_err();
        assert!(err.to_string().contains("physical_package_id"), "{err}");
    }

    #[test]
    fn this_host_has_a_topology() {
        let topo = discover(Path::new("/sys/devices/system/cpu")).unwrap();
        assert!(topo.num_cpus >= 1);
        assert!(topo.cpus_per_core() >= 1);
    }
}
