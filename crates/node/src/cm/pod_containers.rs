//! cm::pod_containers — naming and discovery of pod cgroups (upstream
//! pod_container_manager_linux.go): a pod's cgroup is `pod<uid>` under its QoS cgroup.
//! Receives pods (or the QoS cgroup listing); emits cgroup names and the uid → cgroup map of
//! the pod cgroups found on the host. Pure apart from the `CgroupFs` it is handed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use super::cgroups::{CgroupFs, CgroupName};
use super::qos_containers::{BEST_EFFORT, BURSTABLE, QosCgroups};
use crate::qos;

pub const POD_PREFIX: &str = "pod";

/// Upstream `GetPodContainerName`.
pub fn pod_cgroup_name(qos_cgroups: &QosCgroups, pod: &Pod) -> CgroupName {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    qos_cgroups
        .for_class(qos::pod_qos_class(pod))
        .child(&format!("{POD_PREFIX}{uid}"))
}

/// Upstream `GetAllPodsFromCgroups`: every `pod<uid>` child of the three QoS cgroups.
pub fn pods_on_host(fs: &dyn CgroupFs, qos_cgroups: &QosCgroups) -> BTreeMap<String, CgroupName> {
    let mut out = BTreeMap::new();
    for parent in [
        &qos_cgroups.guaranteed,
        &qos_cgroups.burstable,
        &qos_cgroups.best_effort,
    ] {
        let children = match fs.children(parent) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(cgroup = %parent, error = %e, "listing pod cgroups failed");
                continue;
            }
        };
        for child in children {
            if parent == &qos_cgroups.guaranteed && (child == BURSTABLE || child == BEST_EFFORT) {
                continue;
            }
            if let Some(uid) = child.strip_prefix(POD_PREFIX).filter(|u| !u.is_empty()) {
                out.insert(uid.to_owned(), parent.child(&child));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::cgroups::fake::FakeCgroupFs;
    use crate::cm::cgroups::{CgroupVersion, ResourceConfig};
    use serde_json::json;

    #[test]
    fn names_by_qos_class() {
        let q = QosCgroups::new(&CgroupName::from_path("/kubepods"));
        let cases = [
            (json!([{"name": "c"}]), "/kubepods/besteffort/poduid1"),
            (
                json!([{"name": "c", "resources": {"requests": {"cpu": "1"}}}]),
                "/kubepods/burstable/poduid1",
            ),
            (
                json!([{"name": "c", "resources": {
                    "requests": {"cpu": "1", "memory": "1Mi"}, "limits": {"cpu": "1", "memory": "1Mi"}}}]),
                "/kubepods/poduid1",
            ),
        ];
        for (containers, want) in cases {
            let pod: Pod = serde_json::from_value(
                json!({"metadata": {"uid": "uid1"}, "spec": {"containers": containers}}),
            )
            .unwrap();
            assert_eq!(pod_cgroup_name(&q, &pod).to_cgroupfs(), want);
        }
    }

    #[test]
    fn discovery_skips_qos_cgroups_and_foreign_dirs() {
        let fs = FakeCgroupFs::new(CgroupVersion::V1);
        for p in [
            "/kubepods/burstable/poda",
            "/kubepods/besteffort/podb",
            "/kubepods/podc",
            "/kubepods/other",
            "/kubepods/pod",
        ] {
            fs.insert(p, ResourceConfig::default());
        }
        let q = QosCgroups::new(&CgroupName::from_path("/kubepods"));
        let found = pods_on_host(&fs, &q);
        let got: Vec<(&str, String)> = found
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_cgroupfs()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", "/kubepods/burstable/poda".to_owned()),
                ("b", "/kubepods/besteffort/podb".to_owned()),
                ("c", "/kubepods/podc".to_owned()),
            ]
        );
    }
}
