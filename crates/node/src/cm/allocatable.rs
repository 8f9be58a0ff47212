//! cm::allocatable — node allocatable enforcement (upstream node_container_manager_linux.go).
//! Receives the node's capacity (cpu, memory, huge pages, pid), `systemReserved`,
//! `kubeReserved` and `enforceNodeAllocatable`; emits the settings of the `kubepods` cgroup
//! (capacity − reservations when `pods` is enforced, else the capacity, so its cpu.shares are
//! never the low default) and of the system/kube reserved cgroups. Pure.

use std::collections::{BTreeMap, BTreeSet};

use super::cgroups::ResourceConfig;
use super::resources::{self, ResourceList, milli_cpu_to_shares};
use crate::config::Quantity;

pub const ENFORCE_PODS: &str = "pods";
pub const ENFORCE_SYSTEM_RESERVED: &str = "system-reserved";
pub const ENFORCE_KUBE_RESERVED: &str = "kube-reserved";
pub const ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE: &str = "system-reserved-compressible";
pub const ENFORCE_KUBE_RESERVED_COMPRESSIBLE: &str = "kube-reserved-compressible";
/// The process-ID resource of `systemReserved`/`kubeReserved` (upstream `pidlimit.PIDs`).
pub const PID: &str = "pid";

/// Converts a reservation map to nano-units.
pub fn reserved_list(map: &BTreeMap<String, Quantity>) -> ResourceList {
    map.iter().map(|(k, q)| (k.clone(), q.nanos())).collect()
}

/// Upstream `getNodeAllocatableAbsoluteImpl`: capacity − (systemReserved + kubeReserved) per
/// capacity resource, clamped at 0 (no eviction threshold here, unlike the Node's status).
pub fn allocatable(
    capacity: &ResourceList,
    system_reserved: &ResourceList,
    kube_reserved: &ResourceList,
) -> ResourceList {
    capacity
        .iter()
        .map(|(k, cap)| {
            let reserved = system_reserved.get(k).copied().unwrap_or(0)
                + kube_reserved.get(k).copied().unwrap_or(0);
            (k.clone(), (cap - reserved).max(0))
        })
        .collect()
}

/// Upstream `getCgroupConfig`: cpu → shares; unless `compressible_only`, memory → limit,
/// pid → pids.max and huge pages.
pub fn cgroup_config(list: &ResourceList, compressible_only: bool) -> ResourceConfig {
    let mut rc = ResourceConfig::default();
    if list.contains_key("cpu") {
        rc.cpu_shares = Some(milli_cpu_to_shares(resources::milli(list, "cpu")));
    }
    if compressible_only {
        return rc;
    }
    if list.contains_key("memory") {
        rc.memory = Some(resources::units(list, "memory"));
    }
    if list.contains_key(PID) {
        rc.pids_limit = Some(resources::units(list, PID));
    }
    rc.hugepage_limits = Some(resources::hugepage_limits(list));
    rc
}

/// What enforcing node allocatable writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enforcement {
    /// Settings of `<cgroupRoot>/kubepods`.
    pub pods: ResourceConfig,
    /// Settings of `systemReservedCgroup`, when enforced.
    pub system_reserved: Option<ResourceConfig>,
    /// Settings of `kubeReservedCgroup`, when enforced.
    pub kube_reserved: Option<ResourceConfig>,
}

/// Upstream `enforceNodeAllocatableCgroups`.
pub fn enforcement(
    enforce: &BTreeSet<String>,
    capacity: &ResourceList,
    system_reserved: &ResourceList,
    kube_reserved: &ResourceList,
) -> Enforcement {
    let pods = if enforce.contains(ENFORCE_PODS) {
        allocatable(capacity, system_reserved, kube_reserved)
    } else {
        capacity.clone()
    };
    let reserved = |full: &str, compressible: &str, list: &ResourceList| {
        if enforce.contains(full) {
            Some(cgroup_config(list, false))
        } else if enforce.contains(compressible) {
            Some(cgroup_config(list, true))
        } else {
            None
        }
    };
    Enforcement {
        pods: cgroup_config(&pods, false),
        system_reserved: reserved(
            ENFORCE_SYSTEM_RESERVED,
            ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
            system_reserved,
        ),
        kube_reserved: reserved(
            ENFORCE_KUBE_RESERVED,
            ENFORCE_KUBE_RESERVED_COMPRESSIBLE,
            kube_reserved,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: i128 = 1_000_000_000;

    fn list(items: &[(&str, i128)]) -> ResourceList {
        items.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn allocatable_subtracts_reservations() {
        let cap = list(&[
            ("cpu", 4 * G),
            ("memory", (8 << 30) * G),
            ("pid", 4_194_304 * G),
        ]);
        let sys = list(&[("cpu", G / 2), ("memory", (1 << 30) * G), ("pid", 1000 * G)]);
        let kube = list(&[
            ("cpu", G / 2),
            ("memory", (512 << 20) * G),
            ("ephemeral-storage", G),
        ]);
        let a = allocatable(&cap, &sys, &kube);
        assert_eq!(a["cpu"], 3 * G);
        assert_eq!(a["memory"], ((8 << 30) - (1 << 30) - (512 << 20)) * G);
        assert_eq!(a["pid"], (4_194_304 - 1000) * G);
        assert!(
            !a.contains_key("ephemeral-storage"),
            "only capacity resources"
        );
        // Never negative.
        let a = allocatable(
            &list(&[("cpu", G)]),
            &list(&[("cpu", 2 * G)]),
            &ResourceList::new(),
        );
        assert_eq!(a["cpu"], 0);
    }

    #[test]
    fn enforcement_table() {
        let cap = list(&[
            ("cpu", 2 * G),
            ("memory", (4 << 30) * G),
            ("pid", 32768 * G),
        ]);
        let sys = list(&[("cpu", G / 10), ("memory", (100 << 20) * G)]);
        let kube = list(&[("memory", (200 << 20) * G), ("pid", 768 * G)]);

        let e = enforcement(&set(&["pods"]), &cap, &sys, &kube);
        assert_eq!(e.pods.cpu_shares, Some(milli_cpu_to_shares(1900)));
        assert_eq!(e.pods.memory, Some((4 << 30) - (300 << 20)));
        assert_eq!(e.pods.pids_limit, Some(32000));
        assert_eq!(
            (e.system_reserved.clone(), e.kube_reserved.clone()),
            (None, None)
        );

        // Without `pods`, kubepods still gets the whole capacity (its shares stay high).
        let e = enforcement(&set(&[]), &cap, &sys, &kube);
        assert_eq!(e.pods.cpu_shares, Some(2048));
        assert_eq!(e.pods.memory, Some(4 << 30));

        let e = enforcement(
            &set(&["pods", "system-reserved", "kube-reserved-compressible"]),
            &cap,
            &sys,
            &kube,
        );
        let sr = e.system_reserved.unwrap();
        assert_eq!(sr.cpu_shares, Some(102));
        assert_eq!(sr.memory, Some(100 << 20));
        let kr = e.kube_reserved.unwrap();
        assert_eq!(kr.cpu_shares, None, "no cpu reserved");
        assert_eq!(kr.memory, None, "compressible only");
        assert_eq!(kr.pids_limit, None);
    }
}
