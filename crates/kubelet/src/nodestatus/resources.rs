//! Node capacity and allocatable (upstream `MachineInfo` setter, cadvisor's
//! `CapacityFromMachineInfo` and the container manager's `GetNodeAllocatableReservation` /
//! `hardEvictionReservation`): owns the resource arithmetic and Go-canonical quantity strings.
//! Receives host facts, `maxPods`/`podsPerCore` and the reservations (`systemReserved`,
//! `kubeReserved`, `evictionHard`); emits `status.capacity`, `status.allocatable`, the machine
//! part of `status.nodeInfo` and a `NodeRebooted` event when the boot ID changed. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSwapStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::NodeStatusSettings;
use super::setters::{NodeEvent, node_info_mut, status_mut};
use crate::config::{Quantity, ThresholdValue};
use crate::events::EventType;
use crate::host::HostInfo;

pub use rkubelet_core::resources::{
    CPU, EPHEMERAL_STORAGE, HUGEPAGES_PREFIX, MEMORY, PODS, QuantityFormat, format_of,
    format_quantity, huge_page_resource_name, is_extended_resource, is_huge_page_resource,
    parse_milli,
};

/// What is held back from capacity when computing allocatable.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reservations {
    /// `systemReserved`.
    pub system_reserved: BTreeMap<String, Quantity>,
    /// `kubeReserved`.
    pub kube_reserved: BTreeMap<String, Quantity>,
    /// Effective `evictionHard` (with the default signals merged in, see
    /// `KubeletConfiguration::effective_eviction_hard`): `memory.available` and
    /// `nodefs.available` are reserved from memory and ephemeral-storage.
    pub eviction_hard: BTreeMap<String, ThresholdValue>,
}

/// The machine's capacity in milli-units: cpu, memory, huge pages, pods and (with local
/// storage capacity isolation) ephemeral-storage.
pub fn machine_capacity(settings: &NodeStatusSettings, host: &HostInfo) -> BTreeMap<String, i128> {
    let mut c = BTreeMap::new();
    c.insert(CPU.to_owned(), i128::from(host.num_cores) * 1000);
    c.insert(MEMORY.to_owned(), i128::from(host.memory_capacity) * 1000);
    for hp in &host.huge_pages {
        let bytes = i128::from(hp.page_size) * i128::from(hp.num_pages);
        c.insert(huge_page_resource_name(hp.page_size), bytes * 1000);
    }
    let pods = if settings.pods_per_core > 0 {
        (i128::from(host.num_cores) * i128::from(settings.pods_per_core))
            .min(i128::from(settings.max_pods))
    } else {
        i128::from(settings.max_pods)
    };
    c.insert(PODS.to_owned(), pods * 1000);
    if settings.local_storage_capacity_isolation
        && let Some(bytes) = host.ephemeral_storage_capacity
    {
        c.insert(EPHEMERAL_STORAGE.to_owned(), i128::from(bytes) * 1000);
    }
    c
}

/// Upstream `GetNodeAllocatableReservation`: per capacity resource, systemReserved +
/// kubeReserved + the hard eviction threshold; zero entries left out. Milli-units.
pub fn reservation(capacity: &BTreeMap<String, i128>, r: &Reservations) -> BTreeMap<String, i128> {
    let eviction = hard_eviction_reservation(capacity, &r.eviction_hard);
    capacity
        .keys()
        .filter_map(|k| {
            let sum = [&r.system_reserved, &r.kube_reserved]
                .iter()
                .filter_map(|m| m.get(k))
                .map(|q| i128::from(q.milli_value()))
                .sum::<i128>()
                + eviction.get(k).copied().unwrap_or(0);
            (sum != 0).then(|| (k.clone(), sum))
        })
        .collect()
}

/// Upstream `hardEvictionReservation`: `memory.available` holds back memory and
/// `nodefs.available` ephemeral-storage, absolute or as a percentage of capacity (computed as
/// Go does: the float32 fraction times the integer capacity, truncated).
fn hard_eviction_reservation(
    capacity: &BTreeMap<String, i128>,
    thresholds: &BTreeMap<String, ThresholdValue>,
) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    for (signal, value) in thresholds {
        let resource = match signal.as_str() {
            "memory.available" => MEMORY,
            "nodefs.available" => EPHEMERAL_STORAGE,
            _ => continue,
        };
        if value.disables_signal() {
            continue;
        }
        let milli = match value {
            ThresholdValue::Quantity(q) => i128::from(q.milli_value()),
            ThresholdValue::Percentage { percent, .. } => {
                let milli = capacity.get(resource).copied().unwrap_or(0);
                let cap_value = milli / 1000 + i128::from(milli % 1000 > 0);
                let fraction = f64::from(*percent as f32 / 100.0);
                ((cap_value as f64 * fraction) as i64 as i128) * 1000
            }
        };
        out.insert(resource.to_owned(), milli);
    }
    out
}

/// Upstream `MachineInfo` setter: machine IDs, boot ID (with a `NodeRebooted` event when it
/// changed), swap, capacity (keeping resources other agents advertise) and allocatable =
/// capacity − reservation clamped at 0, huge pages also taken out of allocatable memory.
pub fn set_machine_info(
    node: &mut Node,
    settings: &NodeStatusSettings,
    host: &HostInfo,
) -> Option<NodeEvent> {
    let info = node_info_mut(node);
    info.machine_id = host.machine_id.clone();
    info.system_uuid = host.system_uuid.clone();
    let event = (!info.boot_id.is_empty() && info.boot_id != host.boot_id).then(|| NodeEvent {
        event_type: EventType::Warning,
        reason: "NodeRebooted".to_owned(),
        message: format!(
            "Node {} has been rebooted, boot id: {}",
            settings.node_name, host.boot_id
        ),
    });
    info.boot_id = host.boot_id.clone();
    info.swap = Some(NodeSwapStatus {
        capacity: Some(i64::try_from(host.swap_capacity).unwrap_or(i64::MAX)),
    });

    let machine = machine_capacity(settings, host);
    let reserved = reservation(&machine, &settings.reservations);
    let status = status_mut(node);
    let capacity = status.capacity.get_or_insert_with(BTreeMap::new);
    for (k, milli) in &machine {
        capacity.insert(
            k.clone(),
            ApiQuantity(format_quantity(*milli, format_of(k))),
        );
    }
    let capacity = capacity.clone();
    let allocatable = status.allocatable.get_or_insert_with(BTreeMap::new);
    allocatable.retain(|k, _| capacity.contains_key(k) || !is_extended_resource(k));
    for (k, q) in &capacity {
        let value = match (reserved.get(k), parse_milli(&q.0)) {
            (None, Some(v)) if v >= 0 => q.clone(),
            (None, None) => q.clone(),
            (r, v) => {
                let v = (v.unwrap_or(0) - r.copied().unwrap_or(0)).max(0);
                ApiQuantity(format_quantity(v, format_of(k)))
            }
        };
        allocatable.insert(k.clone(), value);
    }
    let huge_pages: i128 = capacity
        .iter()
        .filter(|(k, _)| is_huge_page_resource(k))
        .filter_map(|(_, q)| parse_milli(&q.0))
        .sum();
    if huge_pages != 0 {
        let memory = allocatable
            .get(MEMORY)
            .and_then(|q| parse_milli(&q.0))
            .unwrap_or(0);
        allocatable.insert(
            MEMORY.to_owned(),
            ApiQuantity(format_quantity(
                (memory - huge_pages).max(0),
                QuantityFormat::BinarySI,
            )),
        );
    }
    event
}

/// Whether two resource lists hold the same values (`"1Gi"` equals `"1024Mi"`), as upstream's
/// semantic equality compares quantities.
pub fn resource_lists_equal(
    a: Option<&BTreeMap<String, ApiQuantity>>,
    b: Option<&BTreeMap<String, ApiQuantity>>,
) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter().all(|(k, qa)| {
            b.get(k)
                .is_some_and(|qb| quantities_equal(Some(qa), Some(qb)))
        })
}

/// Whether two quantities hold the same value, a missing one counting as zero (Go's zero
/// `Quantity`).
pub fn quantities_equal(a: Option<&ApiQuantity>, b: Option<&ApiQuantity>) -> bool {
    let milli = |q: Option<&ApiQuantity>| q.map_or(Some(0), |q| parse_milli(&q.0));
    match (milli(a), milli(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a.map(|q| &q.0) == b.map(|q| &q.0),
    }
}
