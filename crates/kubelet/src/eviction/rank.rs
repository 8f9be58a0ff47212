//! Pure eviction decisions over pods and their stats (upstream `helpers.go` ranking and
//! messages, `localStorageEviction`, `IsCriticalPod`): which pod goes first for memory, disk
//! or PID pressure, the `Evicted` message, and which pods broke their local storage limits.

use std::cmp::Ordering;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::thresholds::{Observations, Resource, Signal, Threshold, format_binary, format_decimal};
use crate::config::Quantity;
use crate::mirror::is_mirror_pod;
use crate::resources::{RequestOptions, pod_requests};
use crate::stats::{FsStats, PodStats, Summary};
use crate::types::PodExt;

/// Upstream `SystemCriticalPriority` (2 × 10⁹).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Upstream `IsCriticalPod`: static pods, mirror pods and pods at system-critical priority.
pub fn is_critical_pod(pod: &Pod) -> bool {
    let is_static = pod.source().is_some_and(|s| s.is_static());
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    is_static || is_mirror_pod(pod) || priority >= SYSTEM_CRITICAL_PRIORITY
}

fn priority(p: &Pod) -> i32 {
    p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Upstream `GetResourceRequestQuantity` for the pod, as an integer value.
fn pod_request(pod: &Pod, resource: &str) -> i64 {
    let n = pod_requests(pod, RequestOptions::default())
        .get(resource)
        .copied()
        .unwrap_or(0);
    i64::try_from(n / 1_000_000_000).unwrap_or(i64::MAX)
}

fn used(fs: Option<&FsStats>) -> i64 {
    fs.and_then(|f| f.used_bytes)
        .map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

fn inodes(fs: Option<&FsStats>) -> i64 {
    fs.and_then(|f| f.inodes_used)
        .map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// Which of a pod's filesystem usages count for a disk signal (upstream `fsStatsType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskMeasure {
    pub root: bool,
    pub logs: bool,
    pub local_volumes: bool,
}

/// Upstream `podDiskUsage`: (bytes, inodes).
pub fn pod_disk_usage(stats: &PodStats, m: DiskMeasure) -> (i64, i64) {
    let (mut b, mut i) = (0i64, 0i64);
    for c in &stats.containers {
        if m.root {
            b += used(c.rootfs.as_ref());
            i += inodes(c.rootfs.as_ref());
        }
        if m.logs {
            b += used(c.logs.as_ref());
            i += inodes(c.logs.as_ref());
        }
    }
    if m.local_volumes {
        for v in &stats.volume_stats {
            b += used(Some(&v.fs));
            i += inodes(Some(&v.fs));
        }
    }
    (b, i)
}

fn memory_usage(s: &PodStats) -> i64 {
    s.memory
        .as_ref()
        .and_then(|m| m.working_set_bytes)
        .map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// true sorts first (upstream `cmpBool`).
fn first_if(a: bool, b: bool) -> Ordering {
    b.cmp(&a)
}

/// The pods in eviction order for `signal` (upstream `buildSignalToRankFunc` + rank funcs).
/// Pods without stats go first, as upstream.
pub fn rank_pods(pods: &mut [Pod], signal: Signal, summary: &Summary) {
    let stats = |p: &Pod| summary.pod(p.uid());
    let dedicated = summary.dedicated_image_fs;
    match signal.resource() {
        Resource::Memory => pods.sort_by(|a, b| {
            let (sa, sb) = (stats(a), stats(b));
            let (Some(sa), Some(sb)) = (sa, sb) else {
                return first_if(sa.is_none(), sb.is_none());
            };
            let (ua, ub) = (memory_usage(sa), memory_usage(sb));
            let (ra, rb) = (pod_request(a, "memory"), pod_request(b, "memory"));
            first_if(ua > ra, ub > rb)
                .then(priority(a).cmp(&priority(b)))
                .then((ub - rb).cmp(&(ua - ra)))
        }),
        Resource::Pids => pods.sort_by(|a, b| {
            let (sa, sb) = (stats(a), stats(b));
            let (Some(sa), Some(sb)) = (sa, sb) else {
                return first_if(sa.is_none(), sb.is_none());
            };
            let count = |s: &PodStats| {
                s.process_stats
                    .as_ref()
                    .and_then(|p| p.process_count)
                    .unwrap_or(0)
            };
            priority(a)
                .cmp(&priority(b))
                .then(count(sb).cmp(&count(sa)))
        }),
        Resource::EphemeralStorage | Resource::Inodes => {
            let image_signal =
                matches!(signal, Signal::ImageFsAvailable | Signal::ImageFsInodesFree);
            let measure = match (dedicated, image_signal) {
                (true, false) => DiskMeasure {
                    root: false,
                    logs: true,
                    local_volumes: true,
                },
                (true, true) => DiskMeasure {
                    root: true,
                    logs: false,
                    local_volumes: false,
                },
                (false, _) => DiskMeasure {
                    root: true,
                    logs: true,
                    local_volumes: true,
                },
            };
            let bytes = signal.resource() == Resource::EphemeralStorage;
            let usage = |s: &PodStats| {
                let (b, i) = pod_disk_usage(s, measure);
                if bytes { b } else { i }
            };
            let request = |p: &Pod| {
                if bytes {
                    pod_request(p, "ephemeral-storage")
                } else {
                    0
                }
            };
            pods.sort_by(|a, b| {
                let (sa, sb) = (stats(a), stats(b));
                let (Some(sa), Some(sb)) = (sa, sb) else {
                    return first_if(sa.is_none(), sb.is_none());
                };
                let (ua, ub) = (usage(sa), usage(sb));
                let (ra, rb) = (request(a), request(b));
                first_if(ua > ra, ub > rb)
                    .then(priority(a).cmp(&priority(b)))
                    .then((ub - rb).cmp(&(ua - ra)))
            });
        }
    }
}

fn format_resource(resource: Resource, v: i64) -> String {
    if resource.is_bytes() {
        format_binary(v)
    } else {
        format_decimal(v)
    }
}

fn container_request(c: &Container, resource: &str) -> (i64, String) {
    match c
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(resource))
        .and_then(|q| Quantity::parse(&q.0).ok())
    {
        Some(q) => (q.value(), q.as_str().to_owned()),
        None => (0, "0".to_owned()),
    }
}

/// Upstream `evictionMessage`: the starved resource, the threshold and what was available,
/// and every container using more than it requested.
pub fn eviction_message(
    resource: Resource,
    pod: &Pod,
    summary: &Summary,
    thresholds: &[Threshold],
    obs: &Observations,
) -> String {
    let mut msg = format!("The node was low on resource: {}. ", resource.as_str());
    if let Some((t, o)) = thresholds
        .iter()
        .filter(|t| t.signal.resource() == resource)
        .find_map(|t| obs.get(&t.signal).map(|o| (t, o)))
    {
        msg += &format!(
            "Threshold quantity: {}, available: {}. ",
            t.value.display(o.capacity),
            format_resource(resource, o.available)
        );
    }
    let Some(stats) = summary.pod(pod.uid()) else {
        return msg;
    };
    let Some(spec) = pod.spec.as_ref() else {
        return msg;
    };
    let containers: Vec<&Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    for cs in &stats.containers {
        let Some(c) = containers.iter().find(|c| c.name == cs.name) else {
            continue;
        };
        let (req, req_text) = container_request(c, resource.as_str());
        let usage = match resource {
            Resource::EphemeralStorage => match (
                cs.rootfs.as_ref().and_then(|f| f.used_bytes),
                cs.logs.as_ref().and_then(|f| f.used_bytes),
            ) {
                (Some(r), Some(l)) => i64::try_from(r.saturating_add(l)).ok(),
                _ => None,
            },
            Resource::Memory => cs
                .memory
                .as_ref()
                .and_then(|m| m.working_set_bytes)
                .and_then(|v| i64::try_from(v).ok()),
            _ => None,
        };
        if let Some(u) = usage
            && u > req
        {
            msg += &format!(
                "Container {} was using {}, request is {}, has larger consumption of {}. ",
                c.name,
                format_binary(u),
                req_text,
                resource.as_str()
            );
        }
    }
    msg
}

fn limit_of(c: &Container, resource: &str) -> Option<Quantity> {
    c.resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get(resource))
        .and_then(|q| Quantity::parse(&q.0).ok())
}

/// Upstream `localStorageEviction` for one pod: the message of the first broken limit
/// (emptyDir `sizeLimit`, then the pod's total ephemeral-storage limit, then a container's).
pub fn local_storage_violation(
    pod: &Pod,
    stats: &PodStats,
    dedicated_image_fs: bool,
) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    for v in spec.volumes.iter().flatten() {
        let Some(ed) = &v.empty_dir else { continue };
        let Some(size) = ed
            .size_limit
            .as_ref()
            .and_then(|q| Quantity::parse(&q.0).ok())
        else {
            continue;
        };
        let Some(vs) = stats.volume_stats.iter().find(|s| s.name == v.name) else {
            continue;
        };
        let Some(u) = vs.fs.used_bytes else { continue };
        if size.value() > 0 && i64::try_from(u).unwrap_or(i64::MAX) > size.value() {
            return Some(format!(
                "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                v.name,
                size.as_str()
            ));
        }
    }
    // Upstream `PodLimits`: regular containers summed, at least any init container's.
    let mut total: Option<i64> = None;
    for c in &spec.containers {
        if let Some(q) = limit_of(c, "ephemeral-storage") {
            total = Some(total.unwrap_or(0).saturating_add(q.value()));
        }
    }
    for c in spec.init_containers.iter().flatten() {
        if let Some(q) = limit_of(c, "ephemeral-storage") {
            total = Some(total.unwrap_or(0).max(q.value()));
        }
    }
    if let Some(limit) = total {
        let usage = used(stats.ephemeral_storage.as_ref());
        if usage > limit {
            return Some(format!(
                "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                format_binary(limit)
            ));
        }
    }
    for cs in &stats.containers {
        let Some(c) = spec.containers.iter().find(|c| c.name == cs.name) else {
            continue;
        };
        let Some(limit) = limit_of(c, "ephemeral-storage").filter(|q| q.value() != 0) else {
            continue;
        };
        let mut usage = used(cs.logs.as_ref());
        if !dedicated_image_fs {
            usage += used(cs.rootfs.as_ref());
        }
        if limit.value() < usage {
            return Some(format!(
                "Container {} exceeded its local ephemeral storage limit {:?}. ",
                cs.name,
                limit.as_str()
            ));
        }
    }
    None
}

#[cfg(test)]
#[path = "rank_tests.rs"]
mod tests;
