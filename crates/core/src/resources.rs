//! Pod resources: requests (upstream `resourcehelper.PodRequests`, the KEP-753 sidecar rules),
//! the resource fit (upstream `noderesources.fitsRequest`) the predicate admit handler applies,
//! resource names and the canonical quantity strings Go prints. Receives pods and a Node's
//! `status.allocatable`; emits request totals and the resources that do not fit. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::config::Quantity;

/// Requests by resource name, exact, in nano-units (value × 10⁹).
pub type ResourceNanos = BTreeMap<String, i128>;

pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";
pub const HUGEPAGES_PREFIX: &str = "hugepages-";
const ATTACHABLE_VOLUMES_PREFIX: &str = "attachable-volumes-";
const NATIVE_DOMAIN: &str = "kubernetes.io/";
const REQUESTS_PREFIX: &str = "requests.";

/// Feature switches of the request computation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestOptions {
    /// The `PodLevelResources` gate (off by default in v1.33): pod-level `spec.resources`
    /// requests for cpu, memory and hugepages replace the container totals.
    pub pod_level_resources: bool,
    /// Leaves `spec.overhead` out.
    pub exclude_overhead: bool,
}

fn nanos(q: &ApiQuantity) -> i128 {
    // Quantities from the API server are validated; a static manifest's unparsable one has
    // already been refused by source validation, so zero is only a defensive fallback.
    Quantity::parse(&q.0).map(|q| q.nanos()).unwrap_or(0)
}

fn add_list(acc: &mut ResourceNanos, list: Option<&BTreeMap<String, ApiQuantity>>) {
    for (name, q) in list.into_iter().flatten() {
        *acc.entry(name.clone()).or_insert(0) += nanos(q);
    }
}

fn add_all(acc: &mut ResourceNanos, other: &ResourceNanos) {
    for (name, v) in other {
        *acc.entry(name.clone()).or_insert(0) += v;
    }
}

fn max_into(acc: &mut ResourceNanos, other: &ResourceNanos) {
    for (name, v) in other {
        let e = acc.entry(name.clone()).or_insert(*v);
        if *v > *e {
            *e = *v;
        }
    }
}

fn container_requests(c: &Container) -> ResourceNanos {
    let mut r = ResourceNanos::new();
    add_list(
        &mut r,
        c.resources.as_ref().and_then(|r| r.requests.as_ref()),
    );
    r
}

fn is_restartable(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Upstream `IsSupportedPodLevelResource`.
fn is_pod_level_resource(name: &str) -> bool {
    name == CPU || name == MEMORY || name.starts_with(HUGEPAGES_PREFIX)
}

/// Upstream `PodRequests` from the spec: regular containers summed; init containers run one at
/// a time, each alongside the restartable (sidecar) init containers started before it, and
/// sidecars keep running with the regular containers; the pod needs the maximum of those
/// phases. Pod-level requests (when enabled) override, then `overhead` is added.
pub fn pod_requests(pod: &Pod, opts: RequestOptions) -> ResourceNanos {
    let Some(spec) = pod.spec.as_ref() else {
        return ResourceNanos::new();
    };
    let mut total = ResourceNanos::new();
    for c in &spec.containers {
        add_all(&mut total, &container_requests(c));
    }
    let mut sidecars = ResourceNanos::new();
    let mut init_peak = ResourceNanos::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container_requests(c);
        let phase = if is_restartable(c) {
            add_all(&mut total, &own);
            add_all(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut combined = own;
            add_all(&mut combined, &sidecars);
            combined
        };
        max_into(&mut init_peak, &phase);
    }
    max_into(&mut total, &init_peak);
    if opts.pod_level_resources
        && let Some(requests) = spec.resources.as_ref().and_then(|r| r.requests.as_ref())
        && requests.keys().any(|k| is_pod_level_resource(k))
    {
        for (name, q) in requests {
            if is_pod_level_resource(name) {
                total.insert(name.clone(), nanos(q));
            }
        }
    }
    if !opts.exclude_overhead {
        add_list(&mut total, spec.overhead.as_ref());
    }
    total
}

/// Upstream `IsPrefixedNativeResource`.
fn is_prefixed_native(name: &str) -> bool {
    name.contains(NATIVE_DOMAIN)
}

/// Upstream `IsNativeResource`: unqualified names and `*kubernetes.io/` names.
fn is_native(name: &str) -> bool {
    !name.contains('/') || is_prefixed_native(name)
}

/// Upstream `IsExtendedResourceName`: a domain-qualified name outside `kubernetes.io`, not
/// starting with `requests.`, whose `requests.<name>` form is a valid qualified name.
pub fn is_extended_resource_name(name: &str) -> bool {
    if is_native(name) || name.starts_with(REQUESTS_PREFIX) {
        return false;
    }
    is_qualified_name(&format!("{REQUESTS_PREFIX}{name}"))
}

/// Upstream `IsScalarResourceName`: resources counted as plain integers besides cpu, memory and
/// ephemeral storage.
pub fn is_scalar_resource_name(name: &str) -> bool {
    is_extended_resource_name(name)
        || name.starts_with(HUGEPAGES_PREFIX)
        || is_prefixed_native(name)
        || name.starts_with(ATTACHABLE_VOLUMES_PREFIX)
}

/// `[prefix/]name` with a DNS-1123 subdomain prefix and a ≤63-character name of
/// alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

fn ceil_div(n: i128, d: i128) -> i64 {
    let (q, r) = (n / d, n % d);
    let v = if r > 0 { q + 1 } else { q };
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Upstream scheduler `framework.Resource`: cpu in millicores, the rest in whole units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub scalar: BTreeMap<String, i64>,
}

impl Resource {
    /// Upstream `Resource.Add` of a resource list (`pods` and unknown names are ignored).
    pub fn from_nanos(list: &ResourceNanos) -> Self {
        let mut r = Resource::default();
        for (name, &v) in list {
            match name.as_str() {
                CPU => r.milli_cpu = r.milli_cpu.saturating_add(ceil_div(v, 1_000_000)),
                MEMORY => r.memory = r.memory.saturating_add(ceil_div(v, 1_000_000_000)),
                EPHEMERAL_STORAGE => {
                    r.ephemeral_storage = r
                        .ephemeral_storage
                        .saturating_add(ceil_div(v, 1_000_000_000))
                }
                n if is_scalar_resource_name(n) => {
                    let e = r.scalar.entry(name.clone()).or_insert(0);
                    *e = e.saturating_add(ceil_div(v, 1_000_000_000));
                }
                _ => {}
            }
        }
        r
    }

    /// A resource list from the API (e.g. `status.allocatable`).
    pub fn from_list(list: &BTreeMap<String, ApiQuantity>) -> Self {
        let mut nanos_list = ResourceNanos::new();
        add_list(&mut nanos_list, Some(list));
        Self::from_nanos(&nanos_list)
    }

    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        for (name, v) in &other.scalar {
            let e = self.scalar.entry(name.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }
}

/// A resource the node has too little of (upstream `InsufficientResource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsufficientResource {
    pub name: String,
    pub requested: i64,
    pub used: i64,
    pub capacity: i64,
}

impl InsufficientResource {
    /// The kubelet's admission reason: `OutOfcpu`, `OutOfmemory`, `OutOf<name>`.
    pub fn reason(&self) -> String {
        format!("OutOf{}", self.name)
    }

    /// Upstream `InsufficientResourceError.Error()`.
    pub fn message(&self) -> String {
        format!(
            "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}",
            self.name, self.requested, self.used, self.capacity
        )
    }
}

/// The node's allocatable resources and which names it reports.
#[derive(Debug, Clone, Default)]
pub struct Allocatable {
    pub resource: Resource,
    /// Allocatable `pods` (upstream `AllowedPodNumber`, the quantity rounded up); `None` when
    /// the node does not report it.
    pub pods: Option<i64>,
    pub reported: BTreeSet<String>,
}

impl Allocatable {
    pub fn from_list(list: &BTreeMap<String, ApiQuantity>) -> Self {
        Self {
            resource: Resource::from_list(list),
            pods: list.get(PODS).map(|q| ceil_div(nanos(q), 1_000_000_000)),
            reported: list.keys().cloned().collect(),
        }
    }
}

/// The pod count of upstream `fitsRequest`: one more pod must fit next to the `active` ones
/// within allocatable `pods` (which the node status computes as `maxPods`, lowered to
/// `podsPerCore` × cores when that is set). Checked whatever the pod requests. A node that
/// does not report `pods` is not counted against (as for cpu and memory in [`fits`]).
pub fn fits_pod_count(active: usize, allocatable: &Allocatable) -> Option<InsufficientResource> {
    let capacity = allocatable.pods?;
    let used = i64::try_from(active).unwrap_or(i64::MAX);
    (used.saturating_add(1) > capacity).then(|| InsufficientResource {
        name: PODS.to_owned(),
        requested: 1,
        used,
        capacity,
    })
}

/// Upstream `fitsRequest` without the pod count (that is [`fits_pod_count`]): every resource whose
/// request exceeds allocatable minus what `used` already requests, in upstream order (cpu,
/// memory, ephemeral-storage, then the others by name). Extended resources the node does not
/// report are ignored, as upstream's `removeMissingExtendedResources`; so are cpu, memory and
/// ephemeral-storage when unreported (upstream would count them as zero capacity; the node
/// status may simply not know them yet).
pub fn fits(
    pod: &Resource,
    allocatable: &Allocatable,
    used: &Resource,
) -> Vec<InsufficientResource> {
    let mut out = Vec::new();
    if pod.milli_cpu == 0 && pod.memory == 0 && pod.ephemeral_storage == 0 && pod.scalar.is_empty()
    {
        return out;
    }
    let alloc = &allocatable.resource;
    let mut check = |name: &str, requested: i64, capacity: i64, used: i64| {
        if requested > 0 && requested > capacity.saturating_sub(used) {
            out.push(InsufficientResource {
                name: name.to_owned(),
                requested,
                used,
                capacity,
            });
        }
    };
    let reported = |name: &str| allocatable.reported.contains(name);
    if reported(CPU) {
        check(CPU, pod.milli_cpu, alloc.milli_cpu, used.milli_cpu);
    }
    if reported(MEMORY) {
        check(MEMORY, pod.memory, alloc.memory, used.memory);
    }
    if reported(EPHEMERAL_STORAGE) {
        check(
            EPHEMERAL_STORAGE,
            pod.ephemeral_storage,
            alloc.ephemeral_storage,
            used.ephemeral_storage,
        );
    }
    for (name, &requested) in &pod.scalar {
        if is_extended_resource_name(name) && !reported(name) {
            continue;
        }
        let capacity = alloc.scalar.get(name).copied().unwrap_or(0);
        let used = used.scalar.get(name).copied().unwrap_or(0);
        check(name, requested, capacity, used);
    }
    out
}

// Resource names and the canonical quantity strings Go's `resource.Quantity` prints (node
// status, pod status, the CPU manager and huge pages share them).

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";

/// How Go prints a quantity: decimal (`100m`, `4`, `2k`) or binary (`16Gi`, `1500`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantityFormat {
    DecimalSI,
    BinarySI,
}

/// The canonical string Go's `resource.Quantity` gives a value of `milli`/1000 in `format`.
pub fn format_quantity(milli: i128, format: QuantityFormat) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let n = milli / 1000;
    if format == QuantityFormat::BinarySI && n.abs() >= 1024 {
        let (mut n, mut exp) = (n, 0);
        while n % 1024 == 0 && exp < 6 {
            n /= 1024;
            exp += 1;
        }
        return format!("{n}{}", ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp]);
    }
    let (mut n, mut exp) = (n, 0);
    while n != 0 && n % 1000 == 0 && exp < 6 {
        n /= 1000;
        exp += 1;
    }
    format!("{n}{}", ["", "k", "M", "G", "T", "P", "E"][exp])
}

/// A quantity string's value × 1000 (rounded up), as Go's `MilliValue`.
pub fn parse_milli(q: &str) -> Option<i128> {
    Quantity::parse(q).ok().map(|q| i128::from(q.milli_value()))
}

/// The format Go's kubelet uses for a resource: bytes are binary, the rest decimal.
pub fn format_of(resource: &str) -> QuantityFormat {
    if resource == MEMORY || resource == EPHEMERAL_STORAGE || is_huge_page_resource(resource) {
        QuantityFormat::BinarySI
    } else {
        QuantityFormat::DecimalSI
    }
}

pub fn is_huge_page_resource(name: &str) -> bool {
    name.starts_with(HUGEPAGES_PREFIX)
}

/// Upstream `IsExtendedResourceName`: a domain-prefixed name outside `kubernetes.io` that is
/// not a quota `requests.` name.
pub fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// `hugepages-2Mi` for a 2 MiB page size.
pub fn huge_page_resource_name(page_size: u64) -> String {
    format!(
        "{HUGEPAGES_PREFIX}{}",
        format_quantity(i128::from(page_size) * 1000, QuantityFormat::BinarySI)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, ApiQuantity> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ApiQuantity((*v).to_owned())))
            .collect()
    }

    fn container(name: &str, req: &[(&str, &str)], sidecar: bool) -> Container {
        Container {
            name: name.to_owned(),
            resources: Some(ResourceRequirements {
                requests: Some(list(req)),
                ..Default::default()
            }),
            restart_policy: sidecar.then(|| "Always".to_owned()),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>, overhead: &[(&str, &str)]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: Some(init),
                overhead: (!overhead.is_empty()).then(|| list(overhead)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn req(p: &Pod) -> Resource {
        Resource::from_nanos(&pod_requests(p, RequestOptions::default()))
    }

    #[test]
    fn pod_requests_table() {
        struct Case {
            name: &'static str,
            pod: Pod,
            cpu: i64,
            memory: i64,
        }
        let c = |n, cpu, mem| container(n, &[("cpu", cpu), ("memory", mem)], false);
        let s = |n, cpu, mem| container(n, &[("cpu", cpu), ("memory", mem)], true);
        let cases = vec![
            Case {
                name: "regular containers are summed",
                pod: pod(
                    vec![c("a", "100m", "1Mi"), c("b", "250m", "2Mi")],
                    vec![],
                    &[],
                ),
                cpu: 350,
                memory: 3 << 20,
            },
            Case {
                name: "init containers take the max",
                pod: pod(
                    vec![c("a", "2", "1G"), c("b", "1", "1G")],
                    vec![c("i1", "2", "1G"), c("i2", "2", "3G")],
                    &[],
                ),
                cpu: 3000,
                memory: 3_000_000_000,
            },
            Case {
                name: "sidecars accumulate and run with the containers",
                pod: pod(
                    vec![c("a", "100m", "100Mi")],
                    vec![s("s1", "200m", "50Mi"), c("i1", "1", "10Mi")],
                    &[],
                ),
                // max(100m+200m, 200m+1) = 1200m; memory max(150Mi, 60Mi) = 150Mi
                cpu: 1200,
                memory: 150 << 20,
            },
            Case {
                name: "init before the sidecar does not add it",
                pod: pod(
                    vec![c("a", "100m", "1Mi")],
                    vec![
                        c("i0", "500m", "1Mi"),
                        s("s1", "300m", "1Mi"),
                        c("i1", "250m", "1Mi"),
                    ],
                    &[],
                ),
                // phases: i0 500m; s1 300m; i1 550m; steady 400m
                cpu: 550,
                memory: 2 << 20,
            },
            Case {
                name: "overhead is added",
                pod: pod(
                    vec![c("a", "100m", "1Mi")],
                    vec![],
                    &[("cpu", "50m"), ("memory", "1Mi")],
                ),
                cpu: 150,
                memory: 2 << 20,
            },
            Case {
                name: "milli rounding happens on the total",
                pod: pod(
                    vec![c("a", "0.0005", "1"), c("b", "0.0005", "1")],
                    vec![],
                    &[],
                ),
                cpu: 1,
                memory: 2,
            },
        ];
        for case in cases {
            let r = req(&case.pod);
            assert_eq!(r.milli_cpu, case.cpu, "{}", case.name);
            assert_eq!(r.memory, case.memory, "{}", case.name);
        }
    }

    #[test]
    fn pod_level_requests_override_when_enabled() {
        let mut p = pod(
            vec![container("a", &[("cpu", "1")], false)],
            vec![],
            &[("cpu", "100m")],
        );
        p.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
            requests: Some(list(&[("cpu", "2")])),
            ..Default::default()
        });
        assert_eq!(req(&p).milli_cpu, 1100);
        let on = RequestOptions {
            pod_level_resources: true,
            ..Default::default()
        };
        assert_eq!(Resource::from_nanos(&pod_requests(&p, on)).milli_cpu, 2100);
    }

    #[test]
    fn resource_names() {
        assert!(is_extended_resource_name("example.com/gpu"));
        assert!(!is_extended_resource_name("kubernetes.io/foo"));
        assert!(!is_extended_resource_name("cpu"));
        assert!(!is_extended_resource_name("requests.example.com/x"));
        assert!(!is_extended_resource_name("Bad_Domain/x"));
        assert!(is_scalar_resource_name("hugepages-2Mi"));
        assert!(is_scalar_resource_name("attachable-volumes-aws-ebs"));
        assert!(is_scalar_resource_name("kubernetes.io/batteries"));
        assert!(!is_scalar_resource_name("storage"));
        let r = Resource::from_list(&list(&[("pods", "110"), ("storage", "1Gi"), ("cpu", "2")]));
        assert_eq!(r.milli_cpu, 2000);
        assert!(r.scalar.is_empty());
    }

    #[test]
    fn fit_reports_each_short_resource_in_order() {
        let alloc = Allocatable::from_list(&list(&[
            ("cpu", "1"),
            ("memory", "1Gi"),
            ("ephemeral-storage", "10Gi"),
            ("hugepages-2Mi", "0"),
            ("example.com/gpu", "2"),
        ]));
        let used = Resource::from_list(&list(&[("cpu", "500m"), ("example.com/gpu", "1")]));
        let p = Resource::from_list(&list(&[
            ("cpu", "2"),
            ("memory", "2Gi"),
            ("hugepages-2Mi", "2Mi"),
            ("example.com/gpu", "2"),
            ("other.io/missing", "5"),
        ]));
        let short = fits(&p, &alloc, &used);
        let names: Vec<_> = short.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["cpu", "memory", "example.com/gpu", "hugepages-2Mi"]);
        assert_eq!(short[0].reason(), "OutOfcpu");
        assert_eq!(
            short[0].message(),
            "Node didn't have enough resource: cpu, requested: 2000, used: 500, capacity: 1000"
        );
        assert_eq!(short[1].reason(), "OutOfmemory");
        assert_eq!(
            short[1].message(),
            "Node didn't have enough resource: memory, requested: 2147483648, used: 0, capacity: 1073741824"
        );
        assert_eq!(short[2].reason(), "OutOfexample.com/gpu");
        assert_eq!(
            short[2].message(),
            "Node didn't have enough resource: example.com/gpu, requested: 2, used: 1, capacity: 2"
        );
        assert_eq!(short[3].reason(), "OutOfhugepages-2Mi");
    }

    #[test]
    fn fit_ephemeral_storage_and_exact_fit() {
        let alloc = Allocatable::from_list(&list(&[("cpu", "1"), ("ephemeral-storage", "1Gi")]));
        let used = Resource::from_list(&list(&[("cpu", "600m")]));
        let exact = Resource::from_list(&list(&[("cpu", "400m")]));
        assert!(fits(&exact, &alloc, &used).is_empty());
        let p = Resource::from_list(&list(&[("ephemeral-storage", "2Gi")]));
        let short = fits(&p, &alloc, &used);
        assert_eq!(short[0].reason(), "OutOfephemeral-storage");
        // Memory is not reported by this node: not checked.
        let m = Resource::from_list(&list(&[("memory", "1Ti")]));
        assert!(fits(&m, &alloc, &used).is_empty());
        // Nothing requested: always fits.
        assert!(fits(&Resource::default(), &Allocatable::default(), &used).is_empty());
    }
}
