//! Two-way strategic merge patches (upstream `strategicpatch.CreateTwoWayMergePatch`) for the
//! objects the kubelet writes: pod status (`preparePatchBytesForPodStatus`) and node status
//! (`PatchNodeStatus`). Receives the last state seen in the API and the desired state; emits the
//! minimal patch body. Pure; owns nothing.
//!
//! Lists follow the patch strategies of the Kubernetes types: lists with a merge key are merged
//! element by element (changed elements carry only their changes plus the key, removed ones a
//! `$patch: delete` directive, and `$setElementOrder/<list>` records the new order); every other
//! list is atomic and replaced whole.

use k8s_openapi::api::core::v1::{Node, PodStatus};
use serde_json::{Map, Value, json};

/// Serialisation failures (never expected for well-formed API types).
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("serialising {what}: {source}")]
    Serialize {
        what: &'static str,
        source: serde_json::Error,
    },
}

/// Which object a patch is for: decides the merge keys of its lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Pod,
    Node,
}

impl PatchKind {
    /// The merge key of the list at `path` (object keys from the root, list indices left out),
    /// or `None` for an atomic list.
    fn merge_key(self, path: &[&str]) -> Option<&'static str> {
        match (self, path) {
            (PatchKind::Pod, ["status", "conditions"]) => Some("type"),
            (PatchKind::Pod, ["status", "podIPs" | "hostIPs"]) => Some("ip"),
            (PatchKind::Pod, ["status", "resourceClaimStatuses"]) => Some("name"),
            (PatchKind::Node, ["status", "conditions" | "addresses"]) => Some("type"),
            (PatchKind::Node, ["status", "volumesAttached"]) => Some("name"),
            (_, ["metadata", "ownerReferences"]) => Some("uid"),
            _ => None,
        }
    }
}

/// The strategic merge patch turning `old` into `new` (`None` when they are equal).
pub fn two_way_merge_patch(old: &Value, new: &Value, kind: PatchKind) -> Option<Value> {
    let mut path = Vec::new();
    diff_value(old, new, kind, &mut path)
}

/// Upstream `preparePatchBytesForPodStatus`: `{"metadata":{"uid":…},"status":{…changes…}}`.
/// The uid is always present: the API server refuses the patch if the pod was recreated.
pub fn pod_status_patch(uid: &str, old: &PodStatus, new: &PodStatus) -> Result<Value, PatchError> {
    let ser = |s: &PodStatus| {
        serde_json::to_value(s).map_err(|source| PatchError::Serialize {
            what: "pod status",
            source,
        })
    };
    let old = json!({ "status": ser(old)? });
    let new = json!({ "metadata": { "uid": uid }, "status": ser(new)? });
    Ok(two_way_merge_patch(&old, &new, PatchKind::Pod).unwrap_or_else(|| json!({})))
}

/// Upstream `PatchNodeStatus`: the changes of `new`'s metadata (labels, annotations) and status
/// relative to `old`; the spec is never part of it. Changed addresses are sent whole with a
/// `$patch: replace` directive, as the kubelet does, so stale addresses cannot survive a merge.
pub fn node_status_patch(old: &Node, new: &Node) -> Result<Value, PatchError> {
    let ser = |n: &Node| -> Result<Value, PatchError> {
        let err = |source| PatchError::Serialize {
            what: "node",
            source,
        };
        Ok(json!({
            "metadata": serde_json::to_value(&n.metadata).map_err(err)?,
            "status": serde_json::to_value(&n.status).map_err(err)?,
        }))
    };
    let (old_v, new_v) = (ser(old)?, ser(new)?);
    let mut patch =
        two_way_merge_patch(&old_v, &new_v, PatchKind::Node).unwrap_or_else(|| json!({}));
    let old_addrs = old.status.as_ref().and_then(|s| s.addresses.as_ref());
    let new_addrs = new.status.as_ref().and_then(|s| s.addresses.as_ref());
    if old_addrs != new_addrs
        && let Some(status) = patch.get_mut("status").and_then(Value::as_object_mut)
    {
        status.remove("$setElementOrder/addresses");
        let mut list = match new_v.pointer("/status/addresses") {
            Some(Value::Array(a)) => a.clone(),
            _ => Vec::new(),
        };
        list.push(json!({ "$patch": "replace" }));
        status.insert("addresses".to_owned(), Value::Array(list));
    }
    Ok(patch)
}

fn diff_value<'a>(
    old: &'a Value,
    new: &'a Value,
    kind: PatchKind,
    path: &mut Vec<&'a str>,
) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => diff_object(o, n, kind, path).map(Value::Object),
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

fn diff_object<'a>(
    old: &'a Map<String, Value>,
    new: &'a Map<String, Value>,
    kind: PatchKind,
    path: &mut Vec<&'a str>,
) -> Option<Map<String, Value>> {
    let mut out = Map::new();
    for (k, nv) in new {
        let Some(ov) = old.get(k) else {
            out.insert(k.clone(), nv.clone());
            continue;
        };
        path.push(k);
        match (ov, nv, kind.merge_key(path)) {
            (Value::Array(oa), Value::Array(na), Some(key)) if keyed(oa, key) && keyed(na, key) => {
                if let Some((list, order)) = diff_keyed_list(oa, na, key, kind, path) {
                    out.insert(format!("$setElementOrder/{k}"), Value::Array(order));
                    if !list.is_empty() {
                        out.insert(k.clone(), Value::Array(list));
                    }
                }
            }
            _ => {
                if let Some(d) = diff_value(ov, nv, kind, path) {
                    out.insert(k.clone(), d);
                }
            }
        }
        path.pop();
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(k.clone(), Value::Null);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// True if every element is an object carrying `key`.
fn keyed(list: &[Value], key: &str) -> bool {
    list.iter().all(|e| e.get(key).is_some())
}

/// The patch list and `$setElementOrder` of a list merged by `key`; `None` if unchanged.
fn diff_keyed_list<'a>(
    old: &'a [Value],
    new: &'a [Value],
    key: &str,
    kind: PatchKind,
    path: &mut Vec<&'a str>,
) -> Option<(Vec<Value>, Vec<Value>)> {
    if old == new {
        return None;
    }
    let find = |list: &'a [Value], k: &Value| list.iter().find(|e| e.get(key) == Some(k));
    let mut changes = Vec::new();
    for n in new {
        let k = n.get(key).unwrap_or(&Value::Null);
        match find(old, k) {
            None => changes.push(n.clone()),
            Some(o) => {
                if let Some(Value::Object(mut d)) = diff_value(o, n, kind, path) {
                    d.insert(key.to_owned(), k.clone());
                    changes.push(Value::Object(d));
                }
            }
        }
    }
    for o in old {
        let k = o.get(key).unwrap_or(&Value::Null);
        if find(new, k).is_none() {
            changes.push(json!({ key: k, "$patch": "delete" }));
        }
    }
    let order = new
        .iter()
        .map(|n| json!({ key: n.get(key).unwrap_or(&Value::Null) }))
        .collect();
    Some((changes, order))
}

#[cfg(test)]
mod tests;
