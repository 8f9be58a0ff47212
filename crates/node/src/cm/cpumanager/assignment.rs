//! Topology-aware CPU picking (upstream `cpu_assignment.go`, `takeByTopologyNUMAPacked`):
//! given the CPUs still free, choose `n` of them packing whole NUMA nodes/sockets first, then
//! whole cores, then single threads from the least-free cores. Pure; receives a topology and a
//! free set, emits the chosen set or the upstream error text.

use super::cpuset::CpuSet;
use super::topology::{CpuDetails, CpuTopology};

struct Accumulator<'a> {
    topo: &'a CpuTopology,
    /// Still-free CPUs (shrinks as CPUs are taken).
    details: CpuDetails,
    needed: usize,
    result: CpuSet,
    /// Upstream `numaFirst` (sockets ≥ NUMA nodes) or `socketsFirst`.
    numa_first: bool,
}

impl<'a> Accumulator<'a> {
    fn take(&mut self, cpus: &CpuSet) {
        self.result = self.result.union(cpus);
        self.details = self
            .details
            .keep_only(&self.details.cpus().difference(&self.result));
        self.needed = self.needed.saturating_sub(cpus.len());
    }

    fn needs(&self, n: usize) -> bool {
        self.needed >= n
    }

    fn satisfied(&self) -> bool {
        self.needed < 1
    }

    /// Upstream `sort`: by free CPUs inside, ascending, then by id.
    fn sorted(&self, mut ids: Vec<u32>, free: impl Fn(&CpuDetails, u32) -> CpuSet) -> Vec<u32> {
        ids.sort_by_key(|id| (free(&self.details, *id).len(), *id));
        ids
    }

    fn sorted_numa_nodes(&self) -> Vec<u32> {
        if self.numa_first {
            self.sorted(self.details.numa_nodes(), CpuDetails::cpus_in_numa)
        } else {
            self.sorted_sockets()
                .into_iter()
                .flat_map(|s| self.sorted(self.details.numa_in_socket(s), CpuDetails::cpus_in_numa))
                .collect()
        }
    }

    fn sorted_sockets(&self) -> Vec<u32> {
        if self.numa_first {
            self.sorted_numa_nodes()
                .into_iter()
                .flat_map(|n| {
                    self.sorted(self.details.sockets_in_numa(n), CpuDetails::cpus_in_socket)
                })
                .collect()
        } else {
            self.sorted(self.details.sockets(), CpuDetails::cpus_in_socket)
        }
    }

    fn sorted_cores(&self) -> Vec<u32> {
        if self.numa_first {
            self.sorted_sockets()
                .into_iter()
                .flat_map(|s| {
                    self.sorted(self.details.cores_in_socket(s), CpuDetails::cpus_in_core)
                })
                .collect()
        } else {
            self.sorted_numa_nodes()
                .into_iter()
                .flat_map(|n| self.sorted(self.details.cores_in_numa(n), CpuDetails::cpus_in_core))
                .collect()
        }
    }

    fn take_full_numa_nodes(&mut self) {
        for numa in self.sorted_numa_nodes() {
            let all = self.topo.details.cpus_in_numa(numa);
            if self.details.cpus_in_numa(numa).len() == all.len() && self.needs(all.len()) {
                self.take(&all);
            }
        }
    }

    fn take_full_sockets(&mut self) {
        let per_socket = self.topo.cpus_per_socket();
        for socket in self.sorted_sockets() {
            let all = self.topo.details.cpus_in_socket(socket);
            if self.details.cpus_in_socket(socket).len() == per_socket && self.needs(all.len()) {
                self.take(&all);
            }
        }
    }

    fn take_full_cores(&mut self) {
        let per_core = self.topo.cpus_per_core();
        for core in self.sorted_cores() {
            let all = self.topo.details.cpus_in_core(core);
            if self.details.cpus_in_core(core).len() == per_core && self.needs(all.len()) {
                self.take(&all);
            }
        }
    }

    fn take_remaining_cpus(&mut self) {
        let order: Vec<u32> = self
            .sorted_cores()
            .into_iter()
            .flat_map(|core| self.details.cpus_in_core(core).iter().collect::<Vec<_>>())
            .collect();
        for cpu in order {
            if self.satisfied() {
                return;
            }
            self.take(&std::iter::once(cpu).collect());
        }
    }
}

/// Picks `n` CPUs of `available` (upstream `takeByTopologyNUMAPacked`).
pub fn take_by_topology(
    topo: &CpuTopology,
    available: &CpuSet,
    n: usize,
) -> Result<CpuSet, String> {
    let mut acc = Accumulator {
        topo,
        details: topo.details.keep_only(available),
        needed: n,
        result: CpuSet::new(),
        numa_first: topo.num_sockets >= topo.num_numa_nodes,
    };
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if acc.needed > acc.details.0.len() {
        return Err(format!(
            "not enough cpus available to satisfy request: requested={n}, available={}",
            available.len()
        ));
    }
    if acc.numa_first {
        acc.take_full_numa_nodes();
        if !acc.satisfied() {
            acc.take_full_sockets();
        }
    } else {
        acc.take_full_sockets();
        if !acc.satisfied() {
            acc.take_full_numa_nodes();
        }
    }
    if !acc.satisfied() {
        acc.take_full_cores();
    }
    if !acc.satisfied() {
        acc.take_remaining_cpus();
    }
    if acc.satisfied() {
        Ok(acc.result)
    } else {
        Err("failed to allocate cpus".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    #[test]
    fn table() {
        let no_ht = CpuTopology::uniform(1, 2, 1); // 2 CPUs, no HT
        let ht = CpuTopology::uniform(1, 2, 2); // 4 CPUs: cores {0,2} {1,3}
        let dual = CpuTopology::uniform(2, 3, 2); // 12 CPUs: socket0 {0-2,6-8} socket1 {3-5,9-11}
        for (name, topo, avail, n, want) in [
            ("zero", &ht, "0-3", 0, Ok("")),
            ("one of two", &no_ht, "0-1", 1, Ok("0")),
            ("last free", &no_ht, "1", 1, Ok("1")),
            (
                "too many",
                &no_ht,
                "1",
                2,
                Err("not enough cpus available to satisfy request: requested=2, available=1"),
            ),
            ("whole core first", &ht, "0-3", 2, Ok("0,2")),
            ("thread of the least free core", &ht, "1-3", 1, Ok("2")),
            ("partial core then whole core", &ht, "1-3", 3, Ok("1-3")),
            ("single thread packs the used core", &ht, "0-3", 1, Ok("0")),
            ("whole socket", &dual, "0-11", 6, Ok("0-2,6-8")),
            ("free socket preferred", &dual, "1-11", 6, Ok("3-5,9-11")),
            ("socket plus a core", &dual, "0-11", 8, Ok("0-3,6-9")),
            ("threads from least free socket", &dual, "1-11", 1, Ok("6")),
            ("cores across sockets", &dual, "0-11", 4, Ok("0-1,6-7")),
        ] {
            let got = take_by_topology(topo, &set(avail), n);
            match want {
                Ok(w) => assert_eq!(got.unwrap().to_string(), w, "{name}"),
                Err(e) => assert_eq!(got.unwrap_err(), e, "{name}"),
            }
        }
    }
}
