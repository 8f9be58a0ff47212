//! cm::resources — pod-level resource math (upstream `resourcehelper.PodRequests/PodLimits`,
//! `ResourceConfigForPod`, `MilliCPUToShares/Quota`, `HugePageLimits`). Receives a `Pod`;
//! emits resource lists (exact nano-units) and the `ResourceConfig` of the pod's cgroup. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::cgroups::ResourceConfig;
use crate::qos::{self, nanos_to_milli, nanos_to_units, parse_quantity_nanos};

/// A resource list in nano-units (value × 10⁹), as exact as Go's `resource.Quantity`.
pub type ResourceList = BTreeMap<String, i128>;

pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262_144;
pub const SHARES_PER_CPU: u64 = 1024;
pub const MILLI_CPU_TO_CPU: i64 = 1000;
/// 100 ms, the default CFS period (µs).
pub const QUOTA_PERIOD: u64 = 100_000;
/// 1 ms, the smallest quota the kernel accepts (µs).
pub const MIN_QUOTA_PERIOD: i64 = 1000;
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// Upstream `MilliCPUToShares`: requests → `cpu.shares`, clamped to [2, 262144].
pub fn milli_cpu_to_shares(milli_cpu: i64) -> u64 {
    if milli_cpu <= 0 {
        return MIN_SHARES;
    }
    let shares = u64::try_from(milli_cpu)
        .unwrap_or(u64::MAX)
        .saturating_mul(SHARES_PER_CPU)
        / 1000;
    shares.clamp(MIN_SHARES, MAX_SHARES)
}

/// Upstream `MilliCPUToQuota`: limits → `cpu.cfs_quota_us` for `period`; 0 when there is no
/// limit, never below 1 ms.
pub fn milli_cpu_to_quota(milli_cpu: i64, period: u64) -> i64 {
    if milli_cpu <= 0 {
        return 0;
    }
    let period = i64::try_from(period).unwrap_or(i64::MAX);
    (milli_cpu.saturating_mul(period) / MILLI_CPU_TO_CPU).max(MIN_QUOTA_PERIOD)
}

fn to_list(map: Option<&BTreeMap<String, Quantity>>) -> ResourceList {
    map.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), parse_quantity_nanos(&v.0).unwrap_or(0)))
        .collect()
}

fn add(into: &mut ResourceList, from: &ResourceList) {
    for (k, v) in from {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

fn max_into(into: &mut ResourceList, from: &ResourceList) {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_insert(*v);
        if *v > *e {
            *e = *v;
        }
    }
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Which kind of container a `ContainerFn`-style visitor sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    Regular,
    Init,
}

/// Upstream `AggregateContainerRequests`/`Limits`: regular containers and sidecars add up;
/// each regular init container runs alongside the sidecars started before it, and the pod
/// needs the largest of those moments. `visit` sees every container's list (an init
/// container's cumulative one, as upstream's `ContainerFn`).
fn aggregate(
    pod: &Pod,
    limits: bool,
    visit: &mut dyn FnMut(&ResourceList, ContainerKind),
) -> ResourceList {
    let get = |c: &Container| {
        let r = c.resources.as_ref();
        to_list(r.and_then(|r| {
            if limits {
                r.limits.as_ref()
            } else {
                r.requests.as_ref()
            }
        }))
    };
    let mut total = ResourceList::new();
    let Some(spec) = pod.spec.as_ref() else {
        return total;
    };
    for c in &spec.containers {
        let list = get(c);
        visit(&list, ContainerKind::Regular);
        add(&mut total, &list);
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let own = get(c);
        let at_start = if is_sidecar(c) {
            add(&mut total, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut tmp = own;
            add(&mut tmp, &sidecars);
            tmp
        };
        visit(&at_start, ContainerKind::Init);
        max_into(&mut init_max, &at_start);
    }
    max_into(&mut total, &init_max);
    total
}

fn overhead(pod: &Pod) -> Option<ResourceList> {
    pod.spec
        .as_ref()
        .and_then(|s| s.overhead.as_ref())
        .map(|o| to_list(Some(o)))
}

/// Upstream `PodRequests` (pod-level resources off): aggregated container requests plus the
/// pod overhead unless `exclude_overhead`.
pub fn pod_requests(pod: &Pod, exclude_overhead: bool) -> ResourceList {
    let mut reqs = aggregate(pod, false, &mut |_, _| {});
    if !exclude_overhead && let Some(o) = overhead(pod) {
        add(&mut reqs, &o);
    }
    reqs
}

/// Upstream `PodLimits`: aggregated container limits; the overhead is added only to the
/// resources that have a limit.
pub fn pod_limits(pod: &Pod, exclude_overhead: bool) -> ResourceList {
    pod_limits_with(pod, exclude_overhead, &mut |_, _| {})
}

fn pod_limits_with(
    pod: &Pod,
    exclude_overhead: bool,
    visit: &mut dyn FnMut(&ResourceList, ContainerKind),
) -> ResourceList {
    let mut limits = aggregate(pod, true, visit);
    if !exclude_overhead && let Some(o) = overhead(pod) {
        for (k, v) in o {
            if let Some(l) = limits.get_mut(&k) {
                *l += v;
            }
        }
    }
    limits
}

/// Upstream `MilliValue()` of a list entry (0 when missing).
pub fn milli(list: &ResourceList, name: &str) -> i64 {
    list.get(name)
        .map_or(0, |v| i64::try_from(nanos_to_milli(*v)).unwrap_or(i64::MAX))
}

/// Upstream `Value()` of a list entry (0 when missing).
pub fn units(list: &ResourceList, name: &str) -> i64 {
    list.get(name)
        .map_or(0, |v| i64::try_from(nanos_to_units(*v)).unwrap_or(i64::MAX))
}

/// Upstream `HugePageLimits`: page size in bytes → limit in bytes, from `hugepages-<size>`
/// entries (sizes that do not parse are skipped).
pub fn hugepage_limits(list: &ResourceList) -> BTreeMap<u64, i64> {
    list.keys()
        .filter_map(|k| {
            let size = k.strip_prefix(HUGEPAGES_PREFIX)?;
            let bytes = parse_quantity_nanos(size).map(nanos_to_units)?;
            let bytes = u64::try_from(bytes).ok().filter(|b| *b > 0)?;
            Some((bytes, units(list, k)))
        })
        .fold(BTreeMap::new(), |mut acc, (size, limit)| {
            *acc.entry(size).or_insert(0) += limit;
            acc
        })
}

/// Node-level knobs of pod cgroup settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCgroupOptions {
    /// `cpuCFSQuota`: enforce CPU limits (else quota -1).
    pub enforce_cpu_limits: bool,
    /// `cpuCFSQuotaPeriod` in µs.
    pub cpu_period: u64,
    /// `podPidsLimit` (> 0 sets `pids.max`).
    pub pod_pids_limit: i64,
}

impl Default for PodCgroupOptions {
    fn default() -> Self {
        Self {
            enforce_cpu_limits: true,
            cpu_period: QUOTA_PERIOD,
            pod_pids_limit: -1,
        }
    }
}

/// Upstream `ResourceConfigForPod` plus the pod pids limit of `EnsureExists`: Guaranteed pods
/// get shares, quota/period and the memory limit; Burstable pods shares, plus quota/period
/// only if every container limits cpu and a memory limit only if every container limits
/// memory; BestEffort pods 2 shares. Huge page limits come from the requests.
pub fn resource_config_for_pod(pod: &Pod, opts: PodCgroupOptions) -> ResourceConfig {
    let reqs = pod_requests(pod, false);
    let mut cpu_declared = true;
    let mut memory_declared = true;
    let limits = pod_limits_with(pod, false, &mut |list, _| {
        if list.get("cpu").copied().unwrap_or(0) == 0 {
            cpu_declared = false;
        }
        if list.get("memory").copied().unwrap_or(0) == 0 {
            memory_declared = false;
        }
    });
    let shares = milli_cpu_to_shares(milli(&reqs, "cpu"));
    let mut quota = milli_cpu_to_quota(milli(&limits, "cpu"), opts.cpu_period);
    if !opts.enforce_cpu_limits {
        quota = -1;
    }
    let memory = units(&limits, "memory");
    let mut rc = ResourceConfig::default();
    match qos::pod_qos_class(pod) {
        qos::GUARANTEED => {
            rc.cpu_shares = Some(shares);
            rc.cpu_quota = Some(quota);
            rc.cpu_period = Some(opts.cpu_period);
            rc.memory = Some(memory);
        }
        qos::BURSTABLE => {
            rc.cpu_shares = Some(shares);
            if cpu_declared {
                rc.cpu_quota = Some(quota);
                rc.cpu_period = Some(opts.cpu_period);
            }
            if memory_declared {
                rc.memory = Some(memory);
            }
        }
        _ => rc.cpu_shares = Some(MIN_SHARES),
    }
    rc.hugepage_limits = Some(hugepage_limits(&reqs));
    if opts.pod_pids_limit > 0 {
        rc.pids_limit = Some(opts.pod_pids_limit);
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u"}, "spec": spec}))
            .unwrap()
    }

    fn c(name: &str, req: serde_json::Value, lim: serde_json::Value) -> serde_json::Value {
        json!({"name": name, "image": "busybox", "resources": {"requests": req, "limits": lim}})
    }

    fn sidecar(name: &str, req: serde_json::Value, lim: serde_json::Value) -> serde_json::Value {
        let mut v = c(name, req, lim);
        v["restartPolicy"] = json!("Always");
        v
    }

    const G: i128 = 1_000_000_000;

    #[test]
    fn shares_and_quota_math() {
        for (milli, shares) in [
            (0, 2),
            (1, 2),
            (5, 5),
            (100, 102),
            (250, 256),
            (1000, 1024),
            (500_000, 262_144),
        ] {
            assert_eq!(milli_cpu_to_shares(milli), shares, "milli {milli}");
        }
        for (milli, period, quota) in [
            (0, 100_000, 0),
            (1, 100_000, 1000),
            (5, 100_000, 1000),
            (250, 100_000, 25_000),
            (1500, 100_000, 150_000),
            (500, 50_000, 25_000),
        ] {
            assert_eq!(
                milli_cpu_to_quota(milli, period),
                quota,
                "milli {milli} period {period}"
            );
        }
    }

    #[test]
    fn requests_and_limits_with_init_sidecars_and_overhead() {
        // (spec, cpu request milli, memory limit bytes)
        let cases: Vec<(&str, serde_json::Value, i64, i64, i64)> = vec![
            (
                "regular containers add up",
                json!({"containers": [
                    c("a", json!({"cpu": "100m"}), json!({"memory": "100Mi"})),
                    c("b", json!({"cpu": "200m"}), json!({"memory": "50Mi"}))]}),
                300,
                150 << 20,
                0,
            ),
            (
                "a big init container wins",
                json!({"initContainers": [c("i", json!({"cpu": "1"}), json!({"memory": "1Gi", "cpu": "2"}))],
                       "containers": [c("a", json!({"cpu": "100m"}), json!({"memory": "100Mi"}))]}),
                1000,
                1 << 30,
                2000,
            ),
            (
                "sidecars add to regular containers and to later init containers",
                json!({"initContainers": [
                        sidecar("s", json!({"cpu": "200m"}), json!({"memory": "200Mi"})),
                        c("i", json!({"cpu": "500m"}), json!({"memory": "300Mi"}))],
                       "containers": [c("a", json!({"cpu": "100m"}), json!({"memory": "100Mi"}))]}),
                // regular+sidecar = 300m; init i with sidecar = 700m → 700m.
                700,
                500 << 20,
                0,
            ),
            (
                "init container before the sidecar does not see it",
                json!({"initContainers": [
                        c("i", json!({"cpu": "250m"}), json!({"memory": "100Mi"})),
                        sidecar("s", json!({"cpu": "200m"}), json!({"memory": "200Mi"}))],
                       "containers": [c("a", json!({"cpu": "100m"}), json!({"memory": "100Mi"}))]}),
                300,
                300 << 20,
                0,
            ),
            (
                "overhead adds to requests and only to present limits",
                json!({"overhead": {"cpu": "50m", "memory": "10Mi"},
                       "containers": [c("a", json!({"cpu": "100m"}), json!({"memory": "100Mi"}))]}),
                150,
                110 << 20,
                0,
            ),
        ];
        for (name, spec, cpu_req, mem_lim, cpu_lim) in cases {
            let p = pod(spec);
            let reqs = pod_requests(&p, false);
            let lims = pod_limits(&p, false);
            assert_eq!(milli(&reqs, "cpu"), cpu_req, "{name}: cpu request");
            assert_eq!(units(&lims, "memory"), mem_lim, "{name}: memory limit");
            assert_eq!(milli(&lims, "cpu"), cpu_lim, "{name}: cpu limit");
        }
        let p = pod(
            json!({"overhead": {"cpu": "50m"}, "containers": [c("a", json!({"cpu": "100m"}), json!({}))]}),
        );
        assert_eq!(pod_requests(&p, true).get("cpu"), Some(&(G / 10)));
    }

    #[test]
    fn pod_cgroup_settings_per_qos() {
        let opts = PodCgroupOptions::default();
        // Guaranteed: requests == limits everywhere.
        let g = pod(json!({"containers": [
            c("a", json!({"cpu": "500m", "memory": "64Mi"}), json!({"cpu": "500m", "memory": "64Mi"}))]}));
        let rc = resource_config_for_pod(&g, opts);
        assert_eq!(rc.cpu_shares, Some(512));
        assert_eq!(rc.cpu_quota, Some(50_000));
        assert_eq!(rc.cpu_period, Some(100_000));
        assert_eq!(rc.memory, Some(64 << 20));
        assert_eq!(rc.pids_limit, None);
        assert_eq!(rc.hugepage_limits, Some(BTreeMap::new()));

        // Burstable, one container without a cpu limit: no quota; both limit memory.
        let b = pod(json!({"containers": [
            c("a", json!({"cpu": "250m", "memory": "32Mi"}), json!({"cpu": "1", "memory": "64Mi"})),
            c("b", json!({"cpu": "250m", "memory": "32Mi"}), json!({"memory": "64Mi"}))]}));
        let rc = resource_config_for_pod(
            &b,
            PodCgroupOptions {
                pod_pids_limit: 100,
                ..opts
            },
        );
        assert_eq!(rc.cpu_shares, Some(512));
        assert_eq!(rc.cpu_quota, None);
        assert_eq!(rc.cpu_period, None);
        assert_eq!(rc.memory, Some(128 << 20));
        assert_eq!(rc.pids_limit, Some(100));

        // Burstable with every cpu limit set, cfs quota disabled: quota -1.
        let b2 = pod(json!({"containers": [c("a", json!({"cpu": "250m"}), json!({"cpu": "1"}))]}));
        let rc = resource_config_for_pod(
            &b2,
            PodCgroupOptions {
                enforce_cpu_limits: false,
                ..opts
            },
        );
        assert_eq!(rc.cpu_quota, Some(-1));
        assert_eq!(rc.cpu_period, Some(100_000));
        assert_eq!(rc.memory, None);

        // An init container without limits makes limits undeclared.
        let b3 = pod(json!({
            "initContainers": [c("i", json!({"cpu": "100m"}), json!({}))],
            "containers": [c("a", json!({"cpu": "250m", "memory": "1Mi"}), json!({"cpu": "1", "memory": "2Mi"}))]}));
        let rc = resource_config_for_pod(&b3, opts);
        assert_eq!((rc.cpu_quota, rc.memory), (None, None));

        // BestEffort.
        let be = pod(json!({"containers": [{"name": "a", "image": "busybox"}]}));
        let rc = resource_config_for_pod(&be, opts);
        assert_eq!(rc.cpu_shares, Some(2));
        assert_eq!((rc.cpu_quota, rc.memory), (None, None));

        // Huge pages from requests.
        let hp = pod(json!({"containers": [c("a",
            json!({"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "4Mi"}),
            json!({"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "4Mi"}))]}));
        let rc = resource_config_for_pod(&hp, opts);
        assert_eq!(
            rc.hugepage_limits,
            Some(BTreeMap::from([(2 << 20, 4 << 20)]))
        );
    }
}
