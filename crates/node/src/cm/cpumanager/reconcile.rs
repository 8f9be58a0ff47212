//! Reconcile decisions of the CPU manager (upstream `reconcileState` and `removeStaleState`):
//! which assignments belong to pods that are gone, and which running containers need their
//! cpuset pushed again. Pure: receives the state, what was last pushed and the running
//! containers; emits the work. The manager task performs it.

use std::collections::{BTreeMap, BTreeSet};

use super::cpuset::CpuSet;
use super::state::State;

/// (pod UID, container name).
pub type ContainerKey = (String, String);

/// A container the runtime runs for an active pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningContainer {
    pub pod_uid: String,
    pub name: String,
    pub id: String,
}

/// Assignments whose pod is not active or whose container is no longer in the pod spec.
/// `active` maps each active pod UID to all its container names (init and regular).
pub fn stale_assignments(
    state: &State,
    active: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<ContainerKey> {
    state
        .assignments
        .iter()
        .flat_map(|(pod, containers)| {
            containers
                .keys()
                .filter(|c| !active.get(pod).is_some_and(|names| names.contains(*c)))
                .map(|c| (pod.clone(), c.clone()))
        })
        .collect()
}

/// Running containers whose cpuset (own CPUs, else the shared pool) differs from the one last
/// pushed to them, with the cpuset to push. Nothing while the pool is empty (policy `none`).
pub fn cpusets_to_push(
    state: &State,
    last_pushed: &BTreeMap<ContainerKey, CpuSet>,
    running: &[RunningContainer],
) -> Vec<(RunningContainer, CpuSet)> {
    running
        .iter()
        .filter_map(|c| {
            let want = state.get_or_default(&c.pod_uid, &c.name);
            if want.is_empty() {
                return None;
            }
            let key = (c.pod_uid.clone(), c.name.clone());
            (last_pushed.get(&key) != Some(&want)).then(|| (c.clone(), want))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    fn running(pod: &str, name: &str) -> RunningContainer {
        RunningContainer {
            pod_uid: pod.into(),
            name: name.into(),
            id: format!("{pod}-{name}-id"),
        }
    }

    #[test]
    fn stale_are_gone_pods_and_gone_containers() {
        let mut state = State {
            default_cpu_set: set("0"),
            ..Default::default()
        };
        state.set("a", "c1", set("1"));
        state.set("a", "old", set("2"));
        state.set("b", "c", set("3"));
        let active = BTreeMap::from([("a".to_owned(), BTreeSet::from(["c1".to_owned()]))]);
        assert_eq!(
            stale_assignments(&state, &active),
            vec![
                ("a".to_owned(), "old".to_owned()),
                ("b".to_owned(), "c".to_owned())
            ]
        );
    }

    #[test]
    fn pushes_only_what_differs_from_the_last_push() {
        let mut state = State {
            default_cpu_set: set("0,2"),
            ..Default::default()
        };
        state.set("g", "c", set("1"));
        let cs = [running("g", "c"), running("be", "c"), running("bu", "c")];
        let last = BTreeMap::from([
            (("g".to_owned(), "c".to_owned()), set("1")),
            (("be".to_owned(), "c".to_owned()), set("0-2")),
        ]);
        let plan: Vec<(String, String)> = cpusets_to_push(&state, &last, &cs)
            .into_iter()
            .map(|(c, s)| (c.id, s.to_string()))
            .collect();
        assert_eq!(
            plan,
            vec![
                ("be-c-id".to_owned(), "0,2".to_owned()),
                ("bu-c-id".to_owned(), "0,2".to_owned())
            ]
        );
        // Policy none: empty pool, nothing to push.
        assert!(cpusets_to_push(&State::default(), &BTreeMap::new(), &cs).is_empty());
    }
}
