//! The `static` CPU manager policy (upstream `policy_static.go`): containers of Guaranteed pods
//! with an integer CPU request get CPUs of their own, taken by topology from the shared pool
//! minus the reserved CPUs; every other container runs on the shared pool. Init containers'
//! CPUs are handed on to the pod's next containers (not sidecars'). Pure: receives the state,
//! mutates it, emits errors with upstream's wording.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::assignment::take_by_topology;
use super::cpuset::CpuSet;
use super::state::State;
use super::topology::CpuTopology;
use crate::qos::{GUARANTEED, nanos_to_milli, nanos_to_units, parse_quantity_nanos, pod_qos_class};
use crate::types::PodExt;

/// The static policy with its reserved CPUs and the pod whose init CPUs may be reused.
#[derive(Debug, Clone)]
pub struct StaticPolicy {
    topology: CpuTopology,
    reserved: CpuSet,
    cpus_to_reuse: BTreeMap<String, CpuSet>,
}

impl StaticPolicy {
    /// `reserved_cpus` (`reservedSystemCPUs`) wins; otherwise `num_reserved` CPUs are taken by
    /// topology (lowest cores first).
    pub fn new(
        topology: CpuTopology,
        num_reserved: usize,
        reserved_cpus: &CpuSet,
    ) -> Result<Self, String> {
        let all = topology.cpus();
        let reserved = if reserved_cpus.is_empty() {
            take_by_topology(&topology, &all, num_reserved).unwrap_or_default()
        } else {
            if !reserved_cpus.is_subset(&all) {
                return Err(format!(
                    "reservedSystemCPUs {reserved_cpus:?} are not all online CPUs of this node (online: \"{all}\")",
                    reserved_cpus = reserved_cpus.to_string()
                ));
            }
            reserved_cpus.clone()
        };
        if reserved.len() != num_reserved {
            return Err(format!(
                "unable to reserve the required amount of CPUs (size of {reserved} did not equal {num_reserved})"
            ));
        }
        Ok(Self {
            topology,
            reserved,
            cpus_to_reuse: BTreeMap::new(),
        })
    }

    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    /// Upstream `validateState`: initializes an empty state with every CPU in the shared pool,
    /// and refuses a state that does not fit this node and reservation.
    pub fn start(&self, state: &mut State) -> Result<bool, String> {
        let all = self.topology.cpus();
        if state.default_cpu_set.is_empty() {
            if !state.assignments.is_empty() {
                return Err("default cpuset cannot be empty".to_owned());
            }
            state.default_cpu_set = all;
            return Ok(true);
        }
        let default = &state.default_cpu_set;
        if !self.reserved.is_subset(default) {
            return Err(format!(
                "not all reserved cpus: \"{}\" are present in defaultCpuSet: \"{default}\"",
                self.reserved
            ));
        }
        let mut known = default.clone();
        for (pod, containers) in &state.assignments {
            for (container, cpus) in containers {
                if !default.intersection(cpus).is_empty() {
                    return Err(format!(
                        "pod: {pod}, container: {container} cpuset: \"{cpus}\" overlaps with default cpuset \"{default}\""
                    ));
                }
                known = known.union(cpus);
            }
        }
        if known != all {
            return Err(format!(
                "current set of available CPUs \"{all}\" doesn't match with CPUs in state \"{known}\""
            ));
        }
        Ok(false)
    }

    fn update_cpus_to_reuse(&mut self, pod: &Pod, container: &Container, cpus: &CpuSet) {
        let uid = pod.uid().to_owned();
        self.cpus_to_reuse.retain(|k, _| *k == uid);
        let reuse = self.cpus_to_reuse.entry(uid).or_default();
        let init = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .and_then(|ics| ics.iter().find(|c| c.name == container.name));
        match init {
            Some(ic) if ic.restart_policy.as_deref() != Some("Always") => {
                *reuse = reuse.union(cpus);
            }
            _ => *reuse = reuse.difference(cpus),
        }
    }

    /// Gives `container` exclusive CPUs when it qualifies. `Ok(true)` when the state changed.
    pub fn allocate(
        &mut self,
        state: &mut State,
        pod: &Pod,
        container: &Container,
    ) -> Result<bool, String> {
        let n = guaranteed_cpus(pod, container);
        if n == 0 {
            return Ok(false);
        }
        if let Some(cpus) = state.get(pod.uid(), &container.name).cloned() {
            self.update_cpus_to_reuse(pod, container, &cpus);
            return Ok(false);
        }
        let reusable = self
            .cpus_to_reuse
            .get(pod.uid())
            .cloned()
            .unwrap_or_default();
        let allocatable = state
            .default_cpu_set
            .difference(&self.reserved)
            .union(&reusable);
        let cpus = take_by_topology(&self.topology, &allocatable, n)?;
        state.default_cpu_set = state.default_cpu_set.difference(&cpus);
        state.set(pod.uid(), &container.name, cpus.clone());
        self.update_cpus_to_reuse(pod, container, &cpus);
        Ok(true)
    }

    /// Returns the container's CPUs to the pool (those no sibling still holds).
    pub fn remove_container(&mut self, state: &mut State, pod_uid: &str, container: &str) -> bool {
        let Some(cpus) = state.get(pod_uid, container).cloned() else {
            return false;
        };
        let siblings: CpuSet = state
            .assignments
            .get(pod_uid)
            .into_iter()
            .flatten()
            .filter(|(name, _)| name.as_str() != container)
            .fold(CpuSet::new(), |acc, (_, s)| acc.union(s));
        state.delete(pod_uid, container);
        state.default_cpu_set = state.default_cpu_set.union(&cpus.difference(&siblings));
        true
    }
}

/// Upstream `guaranteedCPUs`: the integer CPU request of a container of a Guaranteed pod, else 0.
pub fn guaranteed_cpus(pod: &Pod, container: &Container) -> usize {
    if pod_qos_class(pod) != GUARANTEED {
        return 0;
    }
    let Some(res) = container.resources.as_ref() else {
        return 0;
    };
    // A missing request defaults to the limit (the API server does this for new pods).
    let q = res
        .requests
        .as_ref()
        .and_then(|r| r.get("cpu"))
        .or_else(|| res.limits.as_ref().and_then(|l| l.get("cpu")));
    let Some(nanos) = q.and_then(|q| parse_quantity_nanos(&q.0)) else {
        return 0;
    };
    let (units, milli) = (nanos_to_units(nanos), nanos_to_milli(nanos));
    if units <= 0 || units * 1000 != milli {
        return 0;
    }
    usize::try_from(units).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    /// A pod from `(name, cpu request = limit, init?, sidecar?)`; memory makes it Guaranteed
    /// when every CPU is set.
    fn pod(uid: &str, containers: &[(&str, Option<&str>, bool, bool)]) -> Pod {
        let mk = |(name, cpu, _, sidecar): &(&str, Option<&str>, bool, bool)| {
            let mut c = serde_json::json!({"name": name, "image": "busybox"});
            if let Some(cpu) = cpu {
                let r = serde_json::json!({"cpu": cpu, "memory": "64Mi"});
                c["resources"] = serde_json::json!({"requests": r, "limits": r});
            }
            if *sidecar {
                c["restartPolicy"] = "Always".into();
            }
            c
        };
        let init: Vec<_> = containers.iter().filter(|c| c.2).map(mk).collect();
        let app: Vec<_> = containers.iter().filter(|c| !c.2).map(mk).collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"initContainers": init, "containers": app}
        }))
        .unwrap()
    }

    fn container<'p>(pod: &'p Pod, name: &str) -> &'p Container {
        let spec = pod.spec.as_ref().unwrap();
        spec.init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .find(|c| c.name == name)
            .unwrap()
    }

    fn started(policy: &StaticPolicy) -> State {
        let mut state = State::default();
        assert!(policy.start(&mut state).unwrap());
        state
    }

    #[test]
    fn reserved_cpus_by_topology_or_explicit() {
        let ht = CpuTopology::uniform(1, 2, 2);
        for (topo, n, explicit, want) in [
            (CpuTopology::uniform(1, 2, 1), 1, "", Ok("0")),
            (ht.clone(), 1, "", Ok("0")),
            (ht.clone(), 2, "", Ok("0,2")),
            (CpuTopology::uniform(2, 2, 1), 2, "", Ok("0-1")),
            (ht.clone(), 1, "3", Ok("3")),
            (ht.clone(), 2, "1,3", Ok("1,3")),
            (
                ht.clone(),
                5,
                "",
                Err("unable to reserve the required amount of CPUs (size of  did not equal 5)"),
            ),
            (
                ht.clone(),
                1,
                "7",
                Err(
                    "reservedSystemCPUs \"7\" are not all online CPUs of this node (online: \"0-3\")",
                ),
            ),
        ] {
            let got = StaticPolicy::new(topo, n, &set(explicit)).map(|p| p.reserved().to_string());
            assert_eq!(
                got.as_deref().map_err(String::as_str),
                want,
                "{n} {explicit}"
            );
        }
    }

    #[test]
    fn allocation_table() {
        // (topology, reserved count, pods to allocate in order, expected per container, pool)
        let no_ht = CpuTopology::uniform(1, 2, 1);
        let ht = CpuTopology::uniform(1, 2, 2);
        let dual = CpuTopology::uniform(2, 2, 1);
        type Case<'a> = (
            &'a str,
            &'a CpuTopology,
            usize,
            Vec<(&'a str, &'a str, Result<&'a str, &'a str>)>,
            &'a str,
        );
        let cases: Vec<Case> = vec![
            (
                "2 cpus no HT: one exclusive",
                &no_ht,
                1,
                vec![("g1", "c", Ok("1"))],
                "0",
            ),
            (
                "2 cpus no HT: second pod does not fit",
                &no_ht,
                1,
                vec![
                    ("g1", "c", Ok("1")),
                    (
                        "g2",
                        "c",
                        Err(
                            "not enough cpus available to satisfy request: requested=1, available=0",
                        ),
                    ),
                ],
                "0",
            ),
            (
                "2 cpus no HT: burstable stays shared",
                &no_ht,
                1,
                vec![("b", "c", Ok(""))],
                "0-1",
            ),
            (
                "2 cpus no HT: fractional stays shared",
                &no_ht,
                1,
                vec![("f", "c", Ok(""))],
                "0-1",
            ),
            (
                "4 cpus HT: 2 cpus take a whole core",
                &ht,
                1,
                vec![("g2cpu", "c", Ok("1,3"))],
                "0,2",
            ),
            (
                "4 cpus HT: 1 cpu shares the reserved core",
                &ht,
                1,
                vec![("g1", "c", Ok("2"))],
                "0-1,3",
            ),
            (
                "4 cpus HT: then a second single fills the free core",
                &ht,
                1,
                vec![("g1", "c", Ok("2")), ("g1b", "c", Ok("1"))],
                "0,3",
            ),
            (
                "2 sockets: 2 cpus from the free socket",
                &dual,
                1,
                vec![("g2cpu", "c", Ok("2-3"))],
                "0-1",
            ),
        ];
        for (name, topo, reserved, steps, pool) in cases {
            let mut policy = StaticPolicy::new(topo.clone(), reserved, &CpuSet::new()).unwrap();
            let mut state = started(&policy);
            for (which, cname, want) in steps {
                let p = match which {
                    "g1" => pod("g1", &[("c", Some("1"), false, false)]),
                    "g1b" => pod("g1b", &[("c", Some("1"), false, false)]),
                    "g2" => pod("g2", &[("c", Some("1"), false, false)]),
                    "g2cpu" => pod("g2cpu", &[("c", Some("2"), false, false)]),
                    "f" => pod("f", &[("c", Some("500m"), false, false)]),
                    _ => pod(
                        "b",
                        &[("c", None, false, false), ("d", Some("1"), false, false)],
                    ),
                };
                let got = policy.allocate(&mut state, &p, container(&p, cname));
                match want {
                    Ok(cpus) => {
                        got.unwrap();
                        let assigned = state
                            .get(p.uid(), cname)
                            .map(|s| s.to_string())
                            .unwrap_or_default();
                        assert_eq!(assigned, cpus, "{name}: {which}");
                    }
                    Err(e) => assert_eq!(got.unwrap_err(), e, "{name}: {which}"),
                }
            }
            assert_eq!(state.default_cpu_set.to_string(), pool, "{name}: pool");
            assert!(
                policy.start(&mut state.clone()).is_ok(),
                "{name}: state stays valid"
            );
        }
    }

    #[test]
    fn init_cpus_are_reused_but_not_sidecar_cpus() {
        let topo = CpuTopology::uniform(1, 4, 1); // 4 CPUs
        let mut policy = StaticPolicy::new(topo, 1, &CpuSet::new()).unwrap();
        let mut state = started(&policy);
        let p = pod(
            "p",
            &[
                ("init", Some("2"), true, false),
                ("app", Some("2"), false, false),
            ],
        );
        for c in ["init", "app"] {
            policy.allocate(&mut state, &p, container(&p, c)).unwrap();
        }
        assert_eq!(state.get("p", "init").unwrap().to_string(), "1-2");
        assert_eq!(state.get("p", "app").unwrap().to_string(), "1-2");
        assert_eq!(state.default_cpu_set.to_string(), "0,3");
        // Releasing the init container keeps the CPUs the app container still holds.
        assert!(policy.remove_container(&mut state, "p", "init"));
        assert_eq!(state.default_cpu_set.to_string(), "0,3");
        assert!(policy.remove_container(&mut state, "p", "app"));
        assert_eq!(state.default_cpu_set.to_string(), "0-3");
        assert!(state.assignments.is_empty());

        let mut state = started(&policy);
        let s = pod(
            "s",
            &[
                ("sidecar", Some("1"), true, true),
                ("app", Some("1"), false, false),
            ],
        );
        for c in ["sidecar", "app"] {
            policy.allocate(&mut state, &s, container(&s, c)).unwrap();
        }
        assert_eq!(state.get("s", "sidecar").unwrap().to_string(), "1");
        assert_eq!(state.get("s", "app").unwrap().to_string(), "2");
    }

    #[test]
    fn allocate_is_idempotent_and_release_returns_cpus() {
        let mut policy =
            StaticPolicy::new(CpuTopology::uniform(1, 2, 1), 1, &CpuSet::new()).unwrap();
        let mut state = started(&policy);
        let p = pod("g", &[("c", Some("1"), false, false)]);
        assert!(policy.allocate(&mut state, &p, container(&p, "c")).unwrap());
        assert!(!policy.allocate(&mut state, &p, container(&p, "c")).unwrap());
        assert_eq!(state.get("g", "c").unwrap().to_string(), "1");
        assert!(policy.remove_container(&mut state, "g", "c"));
        assert!(!policy.remove_container(&mut state, "g", "c"));
        assert_eq!(state.default_cpu_set.to_string(), "0-1");
    }

    #[test]
    fn start_validates_a_restored_state() {
        let policy = StaticPolicy::new(CpuTopology::uniform(1, 4, 1), 1, &CpuSet::new()).unwrap();
        let mut ok = State {
            default_cpu_set: set("0,3"),
            ..Default::default()
        };
        ok.set("p", "c", set("1-2"));
        assert!(!policy.start(&mut ok).unwrap());
        for (default, assigned, want) in [
            (
                "1-3",
                "",
                "not all reserved cpus: \"0\" are present in defaultCpuSet: \"1-3\"",
            ),
            (
                "0-2",
                "2-3",
                "pod: p, container: c cpuset: \"2-3\" overlaps with default cpuset \"0-2\"",
            ),
            (
                "0-1",
                "",
                "current set of available CPUs \"0-3\" doesn't match with CPUs in state \"0-1\"",
            ),
            ("", "1", "default cpuset cannot be empty"),
        ] {
            let mut state = State {
                default_cpu_set: set(default),
                ..Default::default()
            };
            if !assigned.is_empty() {
                state.set("p", "c", set(assigned));
            }
            assert_eq!(policy.start(&mut state).unwrap_err(), want);
        }
    }

    #[test]
    fn guaranteed_cpus_needs_guaranteed_integer_requests() {
        for (cpu, want) in [
            (Some("1"), 1),
            (Some("2000m"), 2),
            (Some("1500m"), 0),
            (None, 0),
        ] {
            let p = pod("x", &[("c", cpu, false, false)]);
            assert_eq!(guaranteed_cpus(&p, container(&p, "c")), want, "{cpu:?}");
        }
    }
}
