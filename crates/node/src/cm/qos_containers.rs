//! cm::qos_containers — the QoS-level cgroups (upstream qos_container_manager_linux.go):
//! `<root>/kubepods/burstable` and `<root>/kubepods/besteffort` (Guaranteed pods sit directly
//! in `kubepods`). Receives the active pods; emits the settings of both cgroups: BestEffort
//! always 2 shares, Burstable the shares of the sum of its pods' cpu requests, huge pages
//! unbounded. Pure; `cm::ContainerManager` applies them.

use k8s_openapi::api::core::v1::Pod;

use super::cgroups::{CgroupName, ResourceConfig};
use super::resources::{MIN_SHARES, milli, milli_cpu_to_shares, pod_requests};
use crate::qos;

pub const BURSTABLE: &str = "burstable";
pub const BEST_EFFORT: &str = "besteffort";

/// The QoS cgroup names below the node allocatable cgroup (`<root>/kubepods`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosCgroups {
    pub guaranteed: CgroupName,
    pub burstable: CgroupName,
    pub best_effort: CgroupName,
}

impl QosCgroups {
    pub fn new(kubepods: &CgroupName) -> Self {
        Self {
            guaranteed: kubepods.clone(),
            burstable: kubepods.child(BURSTABLE),
            best_effort: kubepods.child(BEST_EFFORT),
        }
    }

    /// The parent cgroup of a pod of QoS `class`.
    pub fn for_class(&self, class: &str) -> &CgroupName {
        match class {
            qos::GUARANTEED => &self.guaranteed,
            qos::BURSTABLE => &self.burstable,
            _ => &self.best_effort,
        }
    }
}

/// Upstream `setCPUCgroupConfig` + `setHugePagesConfig`: (burstable, besteffort) settings.
/// `hugepage_sizes` are the host's page sizes; each gets an unbounded limit.
pub fn qos_settings<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    hugepage_sizes: &[u64],
) -> (ResourceConfig, ResourceConfig) {
    let burstable_milli: i64 = pods
        .into_iter()
        .filter(|p| qos::pod_qos_class(p) == qos::BURSTABLE)
        .map(|p| milli(&pod_requests(p, false), "cpu"))
        .fold(0i64, i64::saturating_add);
    let unbounded = Some(hugepage_sizes.iter().map(|s| (*s, i64::MAX)).collect());
    let burstable = ResourceConfig {
        cpu_shares: Some(milli_cpu_to_shares(burstable_milli)),
        hugepage_limits: unbounded.clone(),
        ..Default::default()
    };
    let best_effort = ResourceConfig {
        cpu_shares: Some(MIN_SHARES),
        hugepage_limits: unbounded,
        ..Default::default()
    };
    (burstable, best_effort)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": uid, "uid": uid},
            "spec": {"containers": containers}}))
        .unwrap()
    }

    #[test]
    fn names() {
        let q = QosCgroups::new(&CgroupName::from_path("/rk/kubepods"));
        assert_eq!(q.for_class("Guaranteed").to_cgroupfs(), "/rk/kubepods");
        assert_eq!(
            q.for_class("Burstable").to_cgroupfs(),
            "/rk/kubepods/burstable"
        );
        assert_eq!(
            q.for_class("BestEffort").to_cgroupfs(),
            "/rk/kubepods/besteffort"
        );
    }

    #[test]
    fn burstable_shares_sum_burstable_requests_only() {
        let cases: Vec<(&str, Vec<Pod>, u64)> = vec![
            ("no pods", vec![], 2),
            (
                "two burstable pods",
                vec![
                    pod(
                        "a",
                        json!([{"name": "c", "resources": {"requests": {"cpu": "250m"}}}]),
                    ),
                    pod(
                        "b",
                        json!([{"name": "c", "resources": {"requests": {"cpu": "750m", "memory": "1Mi"}}}]),
                    ),
                ],
                1024,
            ),
            (
                "guaranteed and besteffort pods do not count",
                vec![
                    pod(
                        "g",
                        json!([{"name": "c", "resources": {
                        "requests": {"cpu": "1", "memory": "1Mi"}, "limits": {"cpu": "1", "memory": "1Mi"}}}]),
                    ),
                    pod("e", json!([{"name": "c"}])),
                    pod(
                        "b",
                        json!([{"name": "c", "resources": {"requests": {"memory": "1Mi"}}}]),
                    ),
                ],
                2,
            ),
        ];
        for (name, pods, shares) in cases {
            let (b, e) = qos_settings(&pods, &[2 << 20]);
            assert_eq!(b.cpu_shares, Some(shares), "{name}");
            assert_eq!(e.cpu_shares, Some(2), "{name}");
            assert_eq!(
                b.hugepage_limits.as_ref().unwrap().get(&(2 << 20)),
                Some(&i64::MAX),
                "{name}"
            );
        }
    }
}
