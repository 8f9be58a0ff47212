//! status::api_sync::merge — the pure decisions of the API status syncer (upstream
//! `mergePodStatus`, `isPodStatusByKubeletEqual`, `normalizeStatus`, `needsUpdate`,
//! `needsReconcile`). Receives the API pod's status and the kubelet's status (plus the
//! syncer's bookkeeping); emits the status to write, or whether a write is due. Owns nothing.

use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use crate::status::manager::{DISRUPTION_TARGET, is_kubelet_owned_condition, is_terminal_phase};

/// The last status the syncer wrote (or found unnecessary to write) for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// Status-manager version of that status.
    pub version: u64,
    /// UID of the API object it went to (the mirror pod's for a static pod).
    pub api_uid: String,
}

/// Whether the kubelet's status at `version` still has to go to the API object `api_uid`
/// (upstream `needsUpdate` without the deletion part): nothing pushed yet, an older version
/// pushed, or the status went to another object (a recreated mirror pod). `api_uid` is `None`
/// when the caller does not know the target yet.
pub fn needs_update(pushed: Option<&Pushed>, version: u64, api_uid: Option<&str>) -> bool {
    match pushed {
        None => true,
        Some(p) => p.version < version || api_uid.is_some_and(|u| u != p.api_uid),
    }
}

/// Whether the API's copy of the status (as the pod source last saw it) disagrees with the
/// kubelet's in anything the kubelet owns (upstream `needsReconcile`): the syncer then writes
/// again even though its version was pushed.
pub fn needs_reconcile(api: &PodStatus, ours: &PodStatus) -> bool {
    !is_status_by_kubelet_equal(api, ours)
}

/// Upstream `isPodStatusByKubeletEqual`: every kubelet-owned or shared condition of `ours`
/// exists in `api` with the same status, reason and message, and everything but the
/// conditions is equal once both are normalized (second-precision times, sorted container
/// statuses, empty values dropped).
pub fn is_status_by_kubelet_equal(api: &PodStatus, ours: &PodStatus) -> bool {
    let api_conditions = api.conditions.as_deref().unwrap_or_default();
    for c in ours.conditions.iter().flatten() {
        if !is_kubelet_owned_condition(&c.type_) && c.type_ != DISRUPTION_TARGET {
            continue;
        }
        let same = api_conditions.iter().any(|o| {
            o.type_ == c.type_
                && o.status == c.status
                && o.reason.as_deref().unwrap_or_default()
                    == c.reason.as_deref().unwrap_or_default()
                && o.message.as_deref().unwrap_or_default()
                    == c.message.as_deref().unwrap_or_default()
        });
        if !same {
            return false;
        }
    }
    comparable(api, false) == comparable(ours, false)
}

/// A normalized JSON form of a status for comparisons: times at second precision (as the
/// API stores them), container and ephemeral container statuses sorted by name, null, empty
/// strings, lists and objects dropped; the conditions are left out unless `conditions`.
pub fn comparable(status: &PodStatus, conditions: bool) -> Value {
    let mut s = status.clone();
    if !conditions {
        s.conditions = None;
    }
    let by_name = |list: &mut Option<Vec<ContainerStatus>>| {
        if let Some(l) = list {
            l.sort_by(|a, b| a.name.cmp(&b.name));
        }
    };
    by_name(&mut s.container_statuses);
    by_name(&mut s.ephemeral_container_statuses);
    // Serialization writes times at second precision, which is what the API keeps.
    let mut v = serde_json::to_value(&s).unwrap_or(Value::Null);
    prune_empty(&mut v);
    v
}

/// Drops null, `""`, `[]` and `{}` values from objects, recursively (Go's `omitempty`).
fn prune_empty(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for value in map.values_mut() {
                prune_empty(value);
            }
            map.retain(|_, value| !is_empty(value));
        }
        Value::Array(list) => list.iter_mut().for_each(prune_empty),
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Upstream `mergePodStatus`: the status to write over `api` (the API pod's current status)
/// given the kubelet's `ours`.
/// - Conditions the kubelet does not own are kept from `api`; the kubelet's own replace theirs.
///   `DisruptionTarget` (shared) is only written together with the move to a terminal phase.
/// - `resourceClaimStatuses` belong to others and are kept from `api`.
/// - A move to a terminal phase waits until no container could be running, as the pod workers
///   tell (`could_have_running`; phase, reason and message stay as the API has them).
/// - A terminal phase in the API is never left (the API server refuses it).
/// - With a terminal phase, `Ready` and `ContainersReady` are forced to `False`.
pub fn merge_pod_status(
    api: &PodStatus,
    ours: &PodStatus,
    could_have_running: bool,
    now: &Time,
) -> PodStatus {
    let mut merged = ours.clone();
    let api_terminal = is_terminal_phase(api.phase.as_deref());
    let transitioning_to_terminal = !api_terminal && is_terminal_phase(ours.phase.as_deref());

    let mut conditions: Vec<PodCondition> = api
        .conditions
        .iter()
        .flatten()
        .filter(|c| !is_kubelet_owned_condition(&c.type_))
        .cloned()
        .collect();
    for c in ours.conditions.iter().flatten() {
        if is_kubelet_owned_condition(&c.type_) {
            conditions.push(c.clone());
        } else if c.type_ == DISRUPTION_TARGET && transitioning_to_terminal && !could_have_running {
            let mut c = c.clone();
            c.last_transition_time = Some(transition_time(api, &c, now));
            match conditions.iter_mut().find(|o| o.type_ == c.type_) {
                Some(existing) => *existing = c,
                None => conditions.push(c),
            }
        }
    }
    merged.conditions = if conditions.is_empty() && ours.conditions.is_none() {
        None
    } else {
        Some(conditions)
    };
    merged
        .resource_claim_statuses
        .clone_from(&api.resource_claim_statuses);

    if transitioning_to_terminal && could_have_running {
        merged.phase.clone_from(&api.phase);
        merged.reason.clone_from(&api.reason);
        merged.message.clone_from(&api.message);
    }
    if api_terminal && !is_terminal_phase(merged.phase.as_deref()) {
        merged.phase.clone_from(&api.phase);
    }

    if let Some(phase) = merged.phase.clone().filter(|p| is_terminal_phase(Some(p))) {
        let reason = if phase == "Succeeded" {
            "PodCompleted"
        } else {
            "PodFailed"
        };
        let is_true = |t: &str| {
            merged
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == t && c.status == "True")
        };
        if is_true("Ready") || is_true("ContainersReady") {
            for t in ["ContainersReady", "Ready"] {
                set_condition(&mut merged, t, "False", reason, now);
            }
        }
    }
    merged
}

/// The transition time of `c`: kept from `api`'s condition of the same type and status.
fn transition_time(api: &PodStatus, c: &PodCondition, now: &Time) -> Time {
    api.conditions
        .iter()
        .flatten()
        .find(|o| o.type_ == c.type_ && o.status == c.status)
        .and_then(|o| o.last_transition_time.clone())
        .unwrap_or_else(|| now.clone())
}

/// Upstream `UpdatePodCondition`: replaces or appends a condition; its transition time moves
/// only when its status changes.
fn set_condition(status: &mut PodStatus, type_: &str, value: &str, reason: &str, now: &Time) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = Some(now.clone());
            }
            c.status = value.to_owned();
            c.reason = Some(reason.to_owned());
            c.message = None;
            c.last_probe_time = None;
        }
        None => conditions.push(PodCondition {
            type_: type_.to_owned(),
            status: value.to_owned(),
            reason: Some(reason.to_owned()),
            last_transition_time: Some(now.clone()),
            ..PodCondition::default()
        }),
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
