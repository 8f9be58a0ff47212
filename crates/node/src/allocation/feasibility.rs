//! allocation::feasibility — whether a pod's desired resources can be allocated now (upstream
//! `canResizePod` of v1.33): `Infeasible` when the node's allocatable could never hold them
//! (or the pod cannot be resized at all), `Deferred` when they do not fit next to the other
//! pods' allocations today. Receives the desired pod, the Node's allocatable and the other
//! active pods (with allocated resources); emits the verdict with upstream's message. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::resources::{Allocatable, RequestOptions, Resource, fits, pod_requests};
use crate::types::PodExt;

/// The outcome of a resize request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResizeVerdict {
    Fits,
    /// Does not fit now; retried on later syncs (message: the first short resource).
    Deferred(String),
    /// Can never fit on this node.
    Infeasible(String),
}

/// Upstream `IsInPlacePodVerticalScalingAllowed` (Linux): static pods are never resized.
fn resize_not_allowed(pod: &Pod) -> Option<&'static str> {
    pod.source()
        .is_some_and(|s| s.is_static())
        .then_some("In-place resize of static-pods is not supported")
}

/// Upstream `canResizePod`: `allocatable` is the Node's `status.allocatable` (`None` while the
/// node reports none: then only the static-pod rule applies), `others` the other active pods
/// with their allocated resources.
pub fn can_resize_pod(
    pod: &Pod,
    allocatable: Option<&BTreeMap<String, Quantity>>,
    others: &[&Pod],
) -> ResizeVerdict {
    if let Some(msg) = resize_not_allowed(pod) {
        return ResizeVerdict::Infeasible(msg.to_owned());
    }
    let Some(list) = allocatable.filter(|a| !a.is_empty()) else {
        return ResizeVerdict::Fits;
    };
    let opts = RequestOptions::default();
    let alloc = Allocatable::from_list(list);
    let wanted = Resource::from_nanos(&pod_requests(pod, opts));
    let reported = |n: &str| alloc.reported.contains(n);
    let over_mem = reported("memory") && wanted.memory > alloc.resource.memory;
    let over_cpu = reported("cpu") && wanted.milli_cpu > alloc.resource.milli_cpu;
    if over_mem || over_cpu {
        let detail = if over_mem {
            format!(
                "memory, requested: {}, capacity: {}",
                wanted.memory, alloc.resource.memory
            )
        } else {
            format!(
                "cpu, requested: {}, capacity: {}",
                wanted.milli_cpu, alloc.resource.milli_cpu
            )
        };
        return ResizeVerdict::Infeasible(format!("Node didn't have enough capacity: {detail}"));
    }
    let mut used = Resource::default();
    for p in others {
        used.add(&Resource::from_nanos(&pod_requests(p, opts)));
    }
    match fits(&wanted, &alloc, &used).first() {
        Some(short) => ResizeVerdict::Deferred(short.message()),
        None => ResizeVerdict::Fits,
    }
}

/// Upstream's resize admit handler with the static CPU manager (and without the
/// `InPlacePodVerticalScalingExclusiveCPUs` gate): a Guaranteed pod's CPU cannot be resized
/// (its exclusive cpuset would no longer match). `allocated` is the pod with its current
/// allocation.
pub fn static_cpu_manager_forbids(desired: &Pod, allocated: &Pod) -> Option<String> {
    if crate::qos::pod_qos_class(desired) != crate::qos::GUARANTEED {
        return None;
    }
    let cpu = |p: &Pod| -> Vec<Option<i128>> {
        let spec = p.spec.as_ref();
        spec.into_iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .map(|c| {
                c.resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|r| r.get("cpu"))
                    .and_then(|q| crate::qos::parse_quantity_nanos(&q.0))
            })
            .collect()
    };
    (cpu(desired) != cpu(allocated)).then(|| {
        "Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\""
            .to_owned()
    })
}
