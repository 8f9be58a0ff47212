//! core::qos — the pod QoS class (upstream `v1qos.GetPodQOS` / `ComputePodQOS`). Receives a
//! `Pod`, emits `"Guaranteed" | "Burstable" | "BestEffort"`. Pure.
//!
//! Also holds a small resource-quantity parser (exact, in nano-units) used here, by `core::env`
//! for the downward API, and by the container manager, volumes and allocation.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub const GUARANTEED: &str = "Guaranteed";
pub const BURSTABLE: &str = "Burstable";
pub const BEST_EFFORT: &str = "BestEffort";

/// Upstream `GetPodQOS`: the class already recorded in `status.qosClass` if any, else the
/// computed one (with the v1.33 default feature gates, i.e. pod-level resources ignored).
pub fn pod_qos_class(pod: &Pod) -> &'static str {
    let recorded = pod.status.as_ref().and_then(|s| s.qos_class.as_deref());
    match recorded {
        Some(GUARANTEED) => GUARANTEED,
        Some(BURSTABLE) => BURSTABLE,
        Some(BEST_EFFORT) => BEST_EFFORT,
        _ => compute_pod_qos(pod, false),
    }
}

/// Upstream `ComputePodQOS`. `pod_level_resources` mirrors the `PodLevelResources` feature gate
/// (alpha, off by default in v1.33): when on and `spec.resources` is set, only the pod-level
/// requests/limits decide the class. Init containers count like regular containers; ephemeral
/// containers never do. Unparsable quantities count as zero.
pub fn compute_pod_qos(pod: &Pod, pod_level_resources: bool) -> &'static str {
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    let spec = pod.spec.as_ref();
    let pod_resources = spec
        .and_then(|s| s.resources.as_ref())
        .filter(|_| pod_level_resources);
    if let Some(res) = pod_resources {
        if let Some(req) = res.requests.as_ref().filter(|r| !r.is_empty()) {
            add_qos_resources(&mut requests, req);
        }
        if let Some(lim) = res.limits.as_ref().filter(|l| !l.is_empty())
            && !add_qos_resources(&mut limits, lim)
        {
            guaranteed = false;
        }
    } else {
        let containers = spec
            .map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .into_iter()
            .flatten();
        for c in containers {
            let (req, lim) = container_resources(c);
            if let Some(req) = req {
                add_qos_resources(&mut requests, req);
            }
            let has_both_limits = lim.is_some_and(|l| add_qos_resources(&mut limits, l));
            if !has_both_limits {
                guaranteed = false;
            }
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return BEST_EFFORT;
    }
    if guaranteed
        && requests
            .iter()
            .any(|(name, req)| limits.get(name) != Some(req))
    {
        guaranteed = false;
    }
    if guaranteed && requests.len() == limits.len() {
        GUARANTEED
    } else {
        BURSTABLE
    }
}

type ResourceList = BTreeMap<String, Quantity>;

fn container_resources(c: &Container) -> (Option<&ResourceList>, Option<&ResourceList>) {
    let res = c.resources.as_ref();
    (
        res.and_then(|r| r.requests.as_ref()),
        res.and_then(|r| r.limits.as_ref()),
    )
}

/// Adds the positive cpu/memory quantities of `list` into `acc`; returns whether both cpu and
/// memory were positive in `list`.
fn add_qos_resources<'a>(
    acc: &mut BTreeMap<&'a str, i128>,
    list: &'a BTreeMap<String, Quantity>,
) -> bool {
    let mut seen = 0;
    for (name, q) in list {
        if name != "cpu" && name != "memory" {
            continue;
        }
        let v = parse_quantity_nanos(&q.0).unwrap_or(0);
        if v > 0 {
            seen += 1;
            *acc.entry(name.as_str()).or_insert(0) += v;
        }
    }
    seen == 2
}

const NANOS: i128 = 1_000_000_000;

/// Parses a Kubernetes resource quantity (`100m`, `1.5Gi`, `2e3`, `500M`, …) into an exact
/// number of nano-units (value × 10⁹), rounding sub-nano precision up as upstream does.
/// Returns `None` for malformed input or values beyond ±2⁶³ units. One grammar for the whole
/// kubelet: this is [`crate::config::Quantity`]'s parser (a second copy here rounded before
/// applying binary suffixes, so `0.0000000001Ei` came out ten times too large — found by the
/// `quantity` fuzz target's differential check).
#[doc(hidden)] // public for the fuzz targets (fuzz/)
pub fn parse_quantity_nanos(s: &str) -> Option<i128> {
    let nanos = crate::config::Quantity::parse(s.trim()).ok()?.nanos();
    (nanos.abs() <= i128::from(i64::MAX) * NANOS).then_some(nanos)
}

/// Upstream `Quantity.MilliValue()` (rounded up).
pub fn nanos_to_milli(nanos: i128) -> i128 {
    div_ceil(nanos, 1_000_000)
}

/// Upstream `Quantity.Value()` (rounded up).
pub fn nanos_to_units(nanos: i128) -> i128 {
    div_ceil(nanos, NANOS)
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && (a > 0) == (b > 0) {
        q + 1
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus, ResourceRequirements};

    use super::*;

    fn rl(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        if pairs.is_empty() {
            return None;
        }
        Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), Quantity((*v).to_string())))
                .collect(),
        )
    }

    fn c(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: rl(req),
                limits: rl(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: (!init.is_empty()).then_some(init),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn qos_table() {
        let both = [("cpu", "100m"), ("memory", "100Mi")];
        let cases: Vec<(&str, Pod, &str)> = vec![
            (
                "no resources",
                pod(vec![c("a", &[], &[])], vec![]),
                BEST_EFFORT,
            ),
            (
                "only extended resources",
                pod(
                    vec![c(
                        "a",
                        &[("nvidia.com/gpu", "1")],
                        &[("nvidia.com/gpu", "1")],
                    )],
                    vec![],
                ),
                BEST_EFFORT,
            ),
            (
                "zero requests are ignored",
                pod(vec![c("a", &[("cpu", "0")], &[])], vec![]),
                BEST_EFFORT,
            ),
            (
                "limits equal requests",
                pod(vec![c("a", &both, &both)], vec![]),
                GUARANTEED,
            ),
            (
                // The API server would default requests to limits; undefaulted, upstream says
                // Burstable because the request and limit sets differ in size.
                "limits only, requests not defaulted",
                pod(vec![c("a", &[], &both)], vec![]),
                BURSTABLE,
            ),
            (
                "equal after normalisation",
                pod(
                    vec![c(
                        "a",
                        &[("cpu", "0.1"), ("memory", "104857600")],
                        &[("cpu", "100m"), ("memory", "100Mi")],
                    )],
                    vec![],
                ),
                GUARANTEED,
            ),
            (
                "requests lower than limits",
                pod(
                    vec![c("a", &[("cpu", "50m"), ("memory", "100Mi")], &both)],
                    vec![],
                ),
                BURSTABLE,
            ),
            (
                "cpu limit only",
                pod(vec![c("a", &[("cpu", "1")], &[("cpu", "1")])], vec![]),
                BURSTABLE,
            ),
            (
                "one guaranteed one best-effort container",
                pod(vec![c("a", &both, &both), c("b", &[], &[])], vec![]),
                BURSTABLE,
            ),
            (
                "two guaranteed containers",
                pod(vec![c("a", &both, &both), c("b", &both, &both)], vec![]),
                GUARANTEED,
            ),
            (
                "best-effort init container breaks guaranteed",
                pod(vec![c("a", &both, &both)], vec![c("i", &[], &[])]),
                BURSTABLE,
            ),
            (
                "guaranteed init container",
                pod(vec![c("a", &both, &both)], vec![c("i", &both, &both)]),
                GUARANTEED,
            ),
            (
                "burstable init container only",
                pod(
                    vec![c("a", &[], &[])],
                    vec![c("i", &[("memory", "1Gi")], &[])],
                ),
                BURSTABLE,
            ),
        ];
        for (name, p, want) in cases {
            assert_eq!(compute_pod_qos(&p, false), want, "{name}");
            assert_eq!(pod_qos_class(&p), want, "{name}");
        }
    }

    #[test]
    fn pod_level_resources_when_enabled() {
        let both = [("cpu", "1"), ("memory", "1Gi")];
        let mut p = pod(vec![c("a", &[], &[])], vec![]);
        if let Some(spec) = p.spec.as_mut() {
            spec.resources = Some(ResourceRequirements {
                requests: rl(&both),
                limits: rl(&both),
                ..Default::default()
            });
        }
        assert_eq!(compute_pod_qos(&p, true), GUARANTEED);
        assert_eq!(compute_pod_qos(&p, false), BEST_EFFORT);
    }

    #[test]
    fn recorded_class_wins() {
        let mut p = pod(vec![c("a", &[], &[])], vec![]);
        p.status = Some(PodStatus {
            qos_class: Some("Burstable".into()),
            ..Default::default()
        });
        assert_eq!(pod_qos_class(&p), BURSTABLE);
    }

    #[test]
    fn quantity_parsing() {
        let cases: &[(&str, Option<i128>)] = &[
            ("1", Some(NANOS)),
            ("100m", Some(NANOS / 10)),
            ("0.1", Some(NANOS / 10)),
            (".5", Some(NANOS / 2)),
            ("1.", Some(NANOS)),
            ("1Ki", Some(1024 * NANOS)),
            ("1.5Gi", Some(1_610_612_736 * NANOS)),
            ("500M", Some(500_000_000 * NANOS)),
            ("1e3", Some(1000 * NANOS)),
            ("1E3", Some(1000 * NANOS)),
            ("2e-3", Some(2_000_000)),
            ("1E", Some(1_000_000_000_000_000_000 * NANOS)),
            ("-1", Some(-NANOS)),
            ("+1k", Some(1000 * NANOS)),
            ("10n", Some(10)),
            ("0.1n", Some(1)),
            ("", None),
            ("abc", None),
            ("1Gb", None),
            ("1.2.3", None),
            ("1e", None),
            ("16Ei", None),
            ("-16Ei", None),
            // Fuzz reproducers: binary suffixes apply before rounding to nano-units.
            ("1.4294967295Mi", Some(1_498_935_962_632_192)),
            ("0.0000000001Ei", Some(115_292_150_460_684_698)),
            (" 2 ", Some(2 * NANOS)),
        ];
        for (input, want) in cases {
            assert_eq!(parse_quantity_nanos(input), *want, "{input}");
        }
        assert_eq!(nanos_to_milli(1), 1);
        assert_eq!(nanos_to_units(NANOS + 1), 2);
        assert_eq!(nanos_to_units(0), 0);
    }
}
