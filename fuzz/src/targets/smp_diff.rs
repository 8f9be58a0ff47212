//! Target `smp-diff`: the two-way strategic merge patch diff the kubelet sends for pod and node
//! status (`apiclient::patch::two_way_merge_patch`, `pod_status_patch`). Inputs are raw bytes
//! decoded into (a) two arbitrary JSON documents, the second an edit of the first, biased
//! towards the keys and merge-keyed lists the diff treats specially, and (b) two typed
//! `PodStatus`es. Properties: no panic; the diff of equal documents is empty; and for typed
//! statuses with unique merge keys, applying the patch to the old status with the fake API
//! server's strategic-merge implementation (`fake_apiserver::smp::apply`, itself checked
//! against kubectl) yields exactly the new status.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubelet::apiclient::patch::{PatchKind, pod_status_patch, two_way_merge_patch};
use serde_json::{Map, Value, json};

use super::Target;
use crate::rng::{Bytes, Rng};

pub const TARGET: Target = Target {
    name: "smp-diff",
    about: "strategic merge patch diff (pod/node status) + apply round-trip",
    generate,
    run,
    smoke_inputs: 60_000,
};

const KEYS: &[&str] = &[
    "status",
    "metadata",
    "uid",
    "conditions",
    "type",
    "podIPs",
    "hostIPs",
    "ip",
    "resourceClaimStatuses",
    "name",
    "containerStatuses",
    "addresses",
    "volumesAttached",
    "ownerReferences",
    "phase",
    "message",
    "reason",
    "labels",
    "spec",
    "a",
    "b",
    "$patch",
    "$setElementOrder/conditions",
    "$retainKeys",
    "$deleteFromPrimitiveList/x",
    "",
];

const STRINGS: &[&str] = &[
    "",
    "Ready",
    "PodScheduled",
    "Initialized",
    "True",
    "False",
    "10.0.0.1",
    "fd00::1",
    "replace",
    "delete",
    "merge",
    "a",
    "b",
    "\u{0}",
    "\u{1f600}",
];

fn generate(rng: &mut Rng) -> Vec<u8> {
    let len = if rng.one_in(8) {
        rng.small(64)
    } else {
        rng.range(64, 4096)
    };
    (0..len).map(|_| rng.byte()).collect()
}

fn json_value(b: &mut Bytes, depth: usize) -> Value {
    let tag = if depth == 0 { b.below(4) } else { b.below(8) };
    match tag {
        0 => Value::Null,
        1 => Value::Bool(b.bool()),
        2 => match b.below(3) {
            0 => json!(b.below(4)),
            1 => json!(b.i64()),
            _ => serde_json::Number::from_f64(f64::from_bits(b.u64()))
                .map_or(Value::Null, Value::Number),
        },
        3 => Value::String(if b.bool() {
            b.pick(STRINGS).to_string()
        } else {
            String::from_utf8_lossy(b.slice(12)).into_owned()
        }),
        4 | 5 => {
            let n = b.below(5);
            Value::Array((0..n).map(|_| keyed_element(b, depth - 1)).collect())
        }
        _ => Value::Object(object(b, depth - 1)),
    }
}

/// A list element: usually an object carrying one of the merge keys.
fn keyed_element(b: &mut Bytes, depth: usize) -> Value {
    if b.below(4) == 0 {
        return json_value(b, depth);
    }
    let mut m = object(b, depth);
    let key = *b.pick(&["type", "ip", "name", "uid"]);
    m.insert(key.into(), Value::String(b.pick(STRINGS).to_string()));
    Value::Object(m)
}

fn object(b: &mut Bytes, depth: usize) -> Map<String, Value> {
    let n = b.below(5);
    (0..n)
        .map(|_| (b.pick(KEYS).to_string(), json_value(b, depth)))
        .collect()
}

/// `v` with a few random edits (the "new" side of a diff).
fn edit(v: &Value, b: &mut Bytes, depth: usize) -> Value {
    if b.below(6) == 0 || depth == 0 {
        return json_value(b, depth.min(3));
    }
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                match b.below(6) {
                    0 => {}
                    1 => {
                        out.insert(k.clone(), edit(x, b, depth - 1));
                    }
                    _ => {
                        out.insert(k.clone(), x.clone());
                    }
                }
            }
            if b.below(3) == 0 {
                out.insert(b.pick(KEYS).to_string(), json_value(b, 2));
            }
            Value::Object(out)
        }
        Value::Array(a) => {
            let mut out: Vec<Value> = a
                .iter()
                .filter_map(|x| match b.below(5) {
                    0 => None,
                    1 => Some(edit(x, b, depth - 1)),
                    _ => Some(x.clone()),
                })
                .collect();
            if b.bool() && out.len() > 1 {
                out.rotate_left(1);
            }
            if b.below(3) == 0 {
                out.push(keyed_element(b, 2));
            }
            Value::Array(out)
        }
        other => other.clone(),
    }
}

fn time(b: &mut Bytes) -> Option<Time> {
    let secs = i64::from(b.u32() % 4_000_000_000);
    b.bool()
        .then(|| k8s_openapi::jiff::Timestamp::from_second(secs).ok())
        .flatten()
        .map(Time)
}

fn s(b: &mut Bytes) -> Option<String> {
    b.bool().then(|| b.pick(STRINGS).to_string())
}

/// A typed pod status drawn from `b` (merge keys may repeat; the caller checks).
pub(super) fn pod_status(b: &mut Bytes) -> PodStatus {
    let conditions = (0..b.below(5))
        .map(|_| PodCondition {
            type_: b
                .pick(&[
                    "Ready",
                    "PodScheduled",
                    "Initialized",
                    "ContainersReady",
                    "X",
                ])
                .to_string(),
            status: b.pick(&["True", "False", "Unknown"]).to_string(),
            reason: s(b),
            message: s(b),
            last_transition_time: time(b),
            last_probe_time: time(b),
            observed_generation: b.bool().then(|| b.i64()),
        })
        .collect::<Vec<_>>();
    let ips = |b: &mut Bytes| {
        (0..b.below(3))
            .map(|_| b.pick(&["10.0.0.1", "10.0.0.2", "fd00::1", ""]).to_string())
            .collect::<Vec<_>>()
    };
    let container = |b: &mut Bytes| ContainerStatus {
        name: b.pick(&["a", "b", "c"]).to_string(),
        ready: b.bool(),
        restart_count: b.u32() as i32,
        started: b.bool().then(|| b.bool()),
        image: b.pick(STRINGS).to_string(),
        image_id: b.pick(STRINGS).to_string(),
        container_id: s(b),
        state: b.bool().then(|| match b.below(3) {
            0 => ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: time(b),
                }),
                ..Default::default()
            },
            1 => ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: s(b),
                    message: s(b),
                }),
                ..Default::default()
            },
            _ => ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: b.u32() as i32,
                    reason: s(b),
                    finished_at: time(b),
                    ..Default::default()
                }),
                ..Default::default()
            },
        }),
        ..Default::default()
    };
    let pod_ips = ips(b);
    let host_ips = ips(b);
    PodStatus {
        phase: s(b).map(|_| {
            b.pick(&["Pending", "Running", "Succeeded", "Failed"])
                .to_string()
        }),
        conditions: (!conditions.is_empty() || b.bool()).then_some(conditions),
        message: s(b),
        reason: s(b),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.into_iter().map(|ip| PodIP { ip }).collect()),
        host_ips: (!host_ips.is_empty())
            .then(|| host_ips.into_iter().map(|ip| HostIP { ip }).collect()),
        container_statuses: b
            .bool()
            .then(|| (0..b.below(3)).map(|_| container(b)).collect()),
        qos_class: s(b).map(|_| {
            b.pick(&["Guaranteed", "Burstable", "BestEffort"])
                .to_string()
        }),
        start_time: time(b),
        ..Default::default()
    }
}

/// Whether every merge-keyed list of `s` has unique keys (duplicates make any strategic
/// merge ambiguous, upstream included).
pub(super) fn unique_merge_keys(s: &PodStatus) -> bool {
    fn unique<'a>(keys: impl Iterator<Item = &'a str>) -> bool {
        let mut seen = BTreeSet::new();
        keys.into_iter().all(|k| seen.insert(k))
    }
    unique(s.conditions.iter().flatten().map(|c| c.type_.as_str()))
        && unique(s.pod_ips.iter().flatten().map(|ip| ip.ip.as_str()))
        && unique(s.host_ips.iter().flatten().map(|ip| ip.ip.as_str()))
}

/// The strategic-merge round-trip: patching `old` with the diff to `new` gives `new`.
pub(super) fn check_round_trip(uid: &str, old: &PodStatus, new: &PodStatus) {
    let patch = pod_status_patch(uid, old, new).expect("serialising a pod status");
    let old_obj = json!({ "status": serde_json::to_value(old).expect("old status to JSON") });
    let want = json!({
        "metadata": { "uid": uid },
        "status": serde_json::to_value(new).expect("new status to JSON"),
    });
    let got = fake_apiserver::smp::apply("Pod", &old_obj, &patch);
    assert!(
        got.as_ref() == Ok(&want),
        "patch does not turn the old status into the new one\n  old:   {old_obj}\n  new:   {want}\n  patch: {patch}\n  got:   {got:?}"
    );
}

fn run(data: &[u8]) {
    let mut b = Bytes::new(data);
    let old = json_value(&mut b, 5);
    let new = edit(&old, &mut b, 5);
    for kind in [PatchKind::Pod, PatchKind::Node] {
        let _ = two_way_merge_patch(&old, &new, kind);
        assert!(
            two_way_merge_patch(&new, &new, kind).is_none(),
            "diff of a document with itself is not empty: {new}"
        );
    }
    let old = pod_status(&mut b);
    let new = if b.bool() {
        pod_status(&mut b)
    } else {
        old.clone()
    };
    if unique_merge_keys(&old) && unique_merge_keys(&new) {
        check_round_trip("uid-1", &old, &new);
    }
}
