//! status::generate::conditions — the pod conditions the kubelet owns (upstream
//! `status/generate.go`: `GenerateContainersReadyCondition`, `GeneratePodReadyCondition`,
//! `GeneratePodInitializedCondition`, `GeneratePodReadyToStartContainersCondition`), the
//! status manager's `lastTransitionTime` bookkeeping, and `NeedToReconcilePodReadiness`.
//! Receives the freshly generated container statuses and phase (or, for the readiness check,
//! the API pod); emits the full condition list (or whether to sync now). Pure.

use k8s_openapi::api::core::v1::{
    ContainerStatus as ApiContainerStatus, Pod, PodCondition, PodStatus as ApiPodStatus,
};

use super::{
    CONTAINERS_NOT_INITIALIZED, CONTAINERS_NOT_READY, FAILED, KUBELET_CONDITIONS, POD_COMPLETED,
    POD_FAILED, READINESS_GATES_NOT_READY, SUCCEEDED, StatusInputs, init_specs, k8s_time,
    observed_generation, regular_specs,
};
use crate::kuberuntime::actions::{is_restartable_init_container, pod_sandbox_changed};

fn condition(
    type_: &str,
    status: bool,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.map(str::to_owned),
        message,
        ..PodCondition::default()
    }
}

/// All conditions: those the kubelet doesn't own (kept from the API status), `DisruptionTarget`
/// from the previous status, then the kubelet's own with transition times.
pub(super) fn conditions(
    inp: &StatusInputs,
    old: &ApiPodStatus,
    pod_status: &ApiPodStatus,
    s: &ApiPodStatus,
    phase: &str,
) -> Vec<PodCondition> {
    let pod = inp.pod;
    let mut out: Vec<PodCondition> = pod_status
        .conditions
        .iter()
        .flatten()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    if let Some(dt) = old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
    {
        match out.iter_mut().find(|c| c.type_ == "DisruptionTarget") {
            Some(existing) => *existing = dt.clone(),
            None => out.push(dt.clone()),
        }
    }
    let mut all: Vec<ApiContainerStatus> = s.init_container_statuses.clone().unwrap_or_default();
    all.extend(s.container_statuses.clone().unwrap_or_default());

    let mut own = vec![
        condition(
            "PodReadyToStartContainers",
            !pod_sandbox_changed(pod, inp.runtime).changed,
            None,
            None,
        ),
        initialized_condition(pod, &all, phase),
    ];
    let containers_ready = containers_ready_condition(pod, &all, phase);
    own.push(pod_ready_condition(pod, &out, &containers_ready));
    own.push(containers_ready);
    own.push(condition("PodScheduled", true, None, None));
    for mut c in own {
        c.observed_generation = observed_generation(pod);
        let previous = old.conditions.iter().flatten().find(|o| o.type_ == c.type_);
        c.last_transition_time = match previous {
            Some(p) if p.status == c.status && p.last_transition_time.is_some() => {
                p.last_transition_time.clone()
            }
            _ => k8s_time(Some(inp.now)),
        };
        out.push(c);
    }
    out
}

fn names(list: &[&str]) -> String {
    format!("[{}]", list.join(" "))
}

fn status_of<'a>(all: &'a [ApiContainerStatus], name: &str) -> Option<&'a ApiContainerStatus> {
    all.iter().find(|s| s.name == name)
}

/// Upstream `GenerateContainersReadyCondition`.
fn containers_ready_condition(pod: &Pod, all: &[ApiContainerStatus], phase: &str) -> PodCondition {
    let mut unknown = Vec::new();
    let mut unready = Vec::new();
    let sidecars = init_specs(pod)
        .iter()
        .filter(|c| is_restartable_init_container(c));
    for c in sidecars.chain(regular_specs(pod)) {
        match status_of(all, &c.name) {
            Some(st) if !st.ready => unready.push(c.name.as_str()),
            Some(_) => {}
            None => unknown.push(c.name.as_str()),
        }
    }
    if (phase == SUCCEEDED && unknown.is_empty()) || phase == FAILED {
        let reason = if phase == FAILED {
            POD_FAILED
        } else {
            POD_COMPLETED
        };
        return condition("ContainersReady", false, Some(reason), None);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            names(&unknown)
        ));
    }
    if !unready.is_empty() {
        messages.push(format!(
            "containers with unready status: {}",
            names(&unready)
        ));
    }
    if messages.is_empty() {
        condition("ContainersReady", true, None, None)
    } else {
        condition(
            "ContainersReady",
            false,
            Some(CONTAINERS_NOT_READY),
            Some(messages.join(", ")),
        )
    }
}

/// Upstream `GeneratePodReadyCondition`: ContainersReady plus readiness gates.
fn pod_ready_condition(
    pod: &Pod,
    conditions: &[PodCondition],
    containers_ready: &PodCondition,
) -> PodCondition {
    if containers_ready.status != "True" {
        return PodCondition {
            type_: "Ready".into(),
            ..containers_ready.clone()
        };
    }
    let gates = pod
        .spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten());
    let messages: Vec<String> = gates
        .filter_map(
            |g| match conditions.iter().find(|c| c.type_ == g.condition_type) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {:?} does not exist.",
                    g.condition_type
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {:?} is not \"True\", but {}",
                    g.condition_type, c.status
                )),
                Some(_) => None,
            },
        )
        .collect();
    if messages.is_empty() {
        condition("Ready", true, None, None)
    } else {
        condition(
            "Ready",
            false,
            Some(READINESS_GATES_NOT_READY),
            Some(messages.join(", ")),
        )
    }
}

/// Upstream `NeedToReconcilePodReadiness`: the pod has readiness gates and the `Ready`
/// condition in its API status disagrees (status or message) with the one its own API status
/// implies, e.g. after someone else changed a gate's condition. Such a pod is synced at once.
pub fn need_to_reconcile_pod_readiness(pod: &Pod) -> bool {
    let has_gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    let Some(status) = pod.status.as_ref().filter(|_| has_gates) else {
        return false;
    };
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let Some(current) = conditions.iter().find(|c| c.type_ == "Ready") else {
        return false;
    };
    let mut all: Vec<ApiContainerStatus> =
        status.init_container_statuses.clone().unwrap_or_default();
    all.extend(status.container_statuses.clone().unwrap_or_default());
    let phase = status.phase.as_deref().unwrap_or_default();
    let expected = pod_ready_condition(
        pod,
        conditions,
        &containers_ready_condition(pod, &all, phase),
    );
    current.status != expected.status
        || current.message.as_deref().unwrap_or_default()
            != expected.message.as_deref().unwrap_or_default()
}

/// Upstream `GeneratePodInitializedCondition`.
fn initialized_condition(pod: &Pod, all: &[ApiContainerStatus], phase: &str) -> PodCondition {
    let mut unknown = Vec::new();
    let mut incomplete = Vec::new();
    for c in init_specs(pod) {
        let Some(st) = status_of(all, &c.name) else {
            unknown.push(c.name.as_str());
            continue;
        };
        let done = if is_restartable_init_container(c) {
            st.started == Some(true)
        } else {
            st.ready
        };
        if !done {
            incomplete.push(c.name.as_str());
        }
    }
    if phase == SUCCEEDED && unknown.is_empty() {
        return condition("Initialized", true, Some(POD_COMPLETED), None);
    }
    // A regular container that ran means initialization happened (sidecars may be restarting).
    let regular_started = all.iter().any(|st| {
        regular_specs(pod).iter().any(|c| c.name == st.name)
            && st
                .state
                .as_ref()
                .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
    });
    if regular_started {
        return condition("Initialized", true, None, None);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            names(&unknown)
        ));
    }
    if !incomplete.is_empty() {
        messages.push(format!(
            "containers with incomplete status: {}",
            names(&incomplete)
        ));
    }
    if messages.is_empty() {
        condition("Initialized", true, None, None)
    } else {
        condition(
            "Initialized",
            false,
            Some(CONTAINERS_NOT_INITIALIZED),
            Some(messages.join(", ")),
        )
    }
}
