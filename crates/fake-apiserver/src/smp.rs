//! Strategic merge patch: owns applying an `application/strategic-merge-patch+json` body to a
//! JSON object using the patch strategies and merge keys of the upstream Go structs (the kinds
//! this server stores); emits the patched object. Follows upstream `strategicpatch.StrategicMergePatch`
//! with `MergeParallelList` and `IgnoreUnmatchedNulls`.

use serde_json::{Map, Value};

/// A strategic merge patch that could not be applied.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SmpError {
    /// The patch is not well formed.
    #[error("invalid strategic merge patch: {0}")]
    BadPatch(String),
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";

/// Patch metadata of one field, as declared by the Go struct tags upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Meta {
    merge: bool,
    key: Option<&'static str>,
}

const fn merge(key: Option<&'static str>) -> Meta {
    Meta { merge: true, key }
}

/// Patch metadata for a field path (field names only, list indexes omitted).
fn lookup(kind: &str, path: &[String]) -> Meta {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["metadata", "ownerReferences"] => merge(Some("uid")),
        ["metadata", "finalizers"] => merge(None),
        _ => match kind {
            "Pod" => pod_meta(&p),
            "Node" => node_meta(&p),
            "Service" => match p.as_slice() {
                ["spec", "ports"] => merge(Some("port")),
                ["status", "conditions"] => merge(Some("type")),
                _ => Meta::default(),
            },
            "ServiceAccount" => match p.as_slice() {
                ["secrets"] => merge(Some("name")),
                _ => Meta::default(),
            },
            _ => Meta::default(),
        },
    }
}

fn container_meta(field: &str) -> Meta {
    match field {
        "ports" => merge(Some("containerPort")),
        "env" => merge(Some("name")),
        "volumeMounts" => merge(Some("mountPath")),
        "volumeDevices" => merge(Some("devicePath")),
        _ => Meta::default(),
    }
}

fn pod_meta(p: &[&str]) -> Meta {
    match p {
        ["spec", "volumes"] => merge(Some("name")),
        [
            "spec",
            "containers" | "initContainers" | "ephemeralContainers",
        ] => merge(Some("name")),
        [
            "spec",
            "containers" | "initContainers" | "ephemeralContainers",
            f,
        ] => container_meta(f),
        ["spec", "imagePullSecrets"] => merge(Some("name")),
        ["spec", "hostAliases"] => merge(Some("ip")),
        ["spec", "topologySpreadConstraints"] => merge(Some("topologyKey")),
        ["spec", "resourceClaims"] => merge(Some("name")),
        ["spec", "schedulingGates"] => merge(Some("name")),
        ["status", "conditions"] => merge(Some("type")),
        ["status", "podIPs" | "hostIPs"] => merge(Some("ip")),
        ["status", "resourceClaimStatuses"] => merge(Some("name")),
        _ => Meta::default(),
    }
}

fn node_meta(p: &[&str]) -> Meta {
    match p {
        ["spec", "podCIDRs"] => merge(None),
        ["status", "conditions"] => merge(Some("type")),
        ["status", "addresses"] => merge(Some("type")),
        _ => Meta::default(),
    }
}

fn bad(msg: impl Into<String>) -> SmpError {
    SmpError::BadPatch(msg.into())
}

/// Applies a strategic merge patch to `original` (an object of kind `kind`).
pub fn apply(kind: &str, original: &Value, patch: &Value) -> Result<Value, SmpError> {
    let (Value::Object(orig), Value::Object(p)) = (original, patch) else {
        return Err(bad("patch and object must both be JSON objects"));
    };
    let merged = merge_map(kind, &mut Vec::new(), orig.clone(), p.clone())?;
    Ok(Value::Object(merged))
}

fn same_type(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

fn discard_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, discard_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(discard_nulls).collect()),
        other => other,
    }
}

/// Upstream `removeDirectives`: drops maps carrying `$patch` (and list items that are such
/// maps), recursively. Returns None when the value itself must be dropped.
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

/// A patch value taken as-is (no original to merge with): nulls and directives dropped.
fn take_patch_value(original: &mut Map<String, Value>, key: String, v: Value) {
    if let Some(v) = remove_directives(discard_nulls(v)) {
        original.insert(key, v);
    }
}

fn merge_map(
    kind: &str,
    path: &mut Vec<String>,
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
) -> Result<Map<String, Value>, SmpError> {
    if let Some(d) = patch.get(DIRECTIVE) {
        return match d.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(patch)
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(bad(format!("unknown patch type {d} in {}", path.join(".")))),
        };
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_set_element_order(kind, path, &mut original, &mut patch)?;
    for (k, patch_v) in patch {
        let (key, is_delete_list) = match k.strip_prefix(DELETE_PRIMITIVE) {
            Some(stripped) => (stripped.to_string(), true),
            None => (k, false),
        };
        if patch_v.is_null() {
            original.remove(&key);
            continue;
        }
        let Some(orig_v) = original.remove(&key) else {
            if !is_delete_list {
                take_patch_value(&mut original, key, patch_v);
            }
            continue;
        };
        if !same_type(&orig_v, &patch_v) {
            if is_delete_list {
                original.insert(key, orig_v);
            } else {
                take_patch_value(&mut original, key, patch_v);
            }
            continue;
        }
        path.push(key.clone());
        let meta = lookup(kind, path);
        let merged = match (orig_v, patch_v) {
            (Value::Object(o), Value::Object(p)) => Value::Object(merge_map(kind, path, o, p)?),
            (Value::Array(o), Value::Array(p)) => {
                if meta.merge {
                    Value::Array(merge_slice(kind, path, o, p, meta.key, is_delete_list)?)
                } else {
                    Value::Array(p)
                }
            }
            (_, p) => p,
        };
        path.pop();
        original.insert(key, merged);
    }
    Ok(original)
}

fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), SmpError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(list) = retain else {
        return Err(bad("$retainKeys must be a list"));
    };
    let keep: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
    for (k, v) in patch.iter() {
        if v.is_null() || k.starts_with(DELETE_PRIMITIVE) || k.starts_with(SET_ORDER) {
            continue;
        }
        if !keep.contains(&k.as_str()) {
            return Err(bad(format!(
                "doesn't satisfy retainKeys: key {k:?} is not in $retainKeys"
            )));
        }
    }
    original.retain(|k, _| keep.contains(&k.as_str()));
    Ok(())
}

fn merge_set_element_order(
    kind: &str,
    path: &mut Vec<String>,
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), SmpError> {
    let directives: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ORDER))
        .cloned()
        .collect();
    for dkey in directives {
        let Some(order_v) = patch.remove(&dkey) else {
            continue;
        };
        let field = dkey[SET_ORDER.len()..].to_string();
        let Value::Array(order) = order_v else {
            return Err(bad(format!("{dkey} must be a list")));
        };
        let orig_list = match original.get(&field) {
            Some(Value::Array(a)) => Some(a.clone()),
            Some(_) => return Err(bad(format!("{field} in the object is not a list"))),
            None => None,
        };
        let patch_list = match patch.remove(&field) {
            Some(Value::Array(a)) => Some(a),
            Some(_) => return Err(bad(format!("{field} in the patch is not a list"))),
            None => None,
        };
        path.push(field.clone());
        let meta = lookup(kind, path);
        let merged = match (&orig_list, patch_list) {
            (Some(o), None) => o.clone(),
            (None, Some(p)) => p.into_iter().filter_map(remove_directives).collect(),
            (Some(o), Some(p)) => {
                if meta.merge {
                    merge_slice(kind, path, o.clone(), p, meta.key, false)?
                } else {
                    p
                }
            }
            (None, None) => {
                path.pop();
                continue;
            }
        };
        path.pop();
        let (patch_items, server_only) = partition(merged, &order, meta.key);
        let orig_order = orig_list.unwrap_or_default();
        let normalized = normalize_order(patch_items, server_only, &order, &orig_order, meta.key);
        original.insert(field, Value::Array(normalized));
    }
    Ok(())
}

fn index_of(list: &[Value], v: &Value, key: Option<&str>) -> Option<usize> {
    match key {
        Some(k) => {
            let want = v.get(k)?;
            list.iter().position(|x| x.get(k) == Some(want))
        }
        None => list.iter().position(|x| x == v),
    }
}

fn partition(merged: Vec<Value>, by: &[Value], key: Option<&str>) -> (Vec<Value>, Vec<Value>) {
    merged
        .into_iter()
        .partition(|v| index_of(by, v, key).is_some())
}

/// Go's `sort.SliceStable` on short inputs is an insertion sort; upstream's comparator is not
/// a strict weak order, so reproduce the insertion sort exactly to get the same output.
fn sort_by_order(list: &mut [Value], order: &[Value], key: Option<&str>) {
    let less = |a: &Value, b: &Value| match (index_of(order, a, key), index_of(order, b, key)) {
        (Some(i), Some(j)) => i < j,
        _ => true,
    };
    for i in 1..list.len() {
        let mut j = i;
        while j > 0 && less(&list[j], &list[j - 1]) {
            list.swap(j, j - 1);
            j -= 1;
        }
    }
}

fn normalize_order(
    mut patch_items: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    sort_by_order(&mut patch_items, patch_order, key);
    sort_by_order(&mut server_only, server_order, key);
    // Merge: server-only items are the left list, patch items the right list.
    let (left, right) = (server_only, patch_items);
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut i, mut j) = (0, 0);
    while i < left.len() || j < right.len() {
        if i >= left.len() {
            out.push(right[j].clone());
            j += 1;
        } else if j >= right.len() {
            out.push(left[i].clone());
            i += 1;
        } else {
            let li = index_of(server_order, &left[i], key);
            let ri = index_of(server_order, &right[j], key);
            match (li, ri) {
                (Some(a), Some(b)) if a < b => {
                    out.push(left[i].clone());
                    i += 1;
                }
                _ => {
                    out.push(right[j].clone());
                    j += 1;
                }
            }
        }
    }
    out
}

fn dedup_scalars(list: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(list.len());
    for v in list {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

fn merge_slice(
    kind: &str,
    path: &mut Vec<String>,
    original: Vec<Value>,
    patch: Vec<Value>,
    key: Option<&'static str>,
    is_delete_list: bool,
) -> Result<Vec<Value>, SmpError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let elem_is_map = original
        .iter()
        .chain(patch.iter())
        .next()
        .is_some_and(Value::is_object);
    if !elem_is_map {
        if is_delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let orig_order = original.clone();
        let merged = dedup_scalars(original.into_iter().chain(patch.iter().cloned()).collect());
        let (p, s) = partition(merged, &patch, None);
        return Ok(normalize_order(p, s, &patch, &orig_order, None));
    }
    let Some(k) = key else {
        return Err(bad(format!(
            "cannot merge lists without merge key for {}",
            path.join(".")
        )));
    };
    let (original, patch) = merge_special_elements(original, patch, k)?;
    let orig_order = original.clone();
    let mut merged = original;
    for item in &patch {
        let Value::Object(pm) = item else {
            return Err(bad(format!(
                "{}: list items must be objects",
                path.join(".")
            )));
        };
        let Some(kv) = pm.get(k) else {
            return Err(bad(format!(
                "map: {item} does not contain declared merge key: {k}"
            )));
        };
        match merged.iter().position(|x| x.get(k) == Some(kv)) {
            Some(pos) => {
                let o = match std::mem::take(&mut merged[pos]) {
                    Value::Object(o) => o,
                    _ => Map::new(),
                };
                merged[pos] = Value::Object(merge_map(kind, path, o, pm.clone())?);
            }
            None => merged.push(item.clone()),
        }
    }
    let (p, s) = partition(merged, &patch, Some(k));
    Ok(normalize_order(p, s, &patch, &orig_order, Some(k)))
}

fn merge_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut plain = Vec::new();
    let mut replace = false;
    for v in patch {
        match v.get(DIRECTIVE).and_then(Value::as_str) {
            None if v.get(DIRECTIVE).is_none() => plain.push(v),
            Some("delete") => {
                let Some(kv) = v.get(key) else {
                    return Err(bad(format!(
                        "map: {v} does not contain declared merge key: {key}"
                    )));
                };
                original.retain(|x| x.get(key) != Some(kv));
            }
            Some("replace") => replace = true,
            Some("merge") => return Err(bad("merging lists cannot yet be specified in the patch")),
            _ => return Err(bad(format!("unknown patch type in list element {v}"))),
        }
    }
    if replace {
        Ok((plain, Vec::new()))
    } else {
        Ok((original, plain))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_merge_by_type() {
        let pod = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}});
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let out = apply("Pod", &pod, &patch).expect("apply");
        assert_eq!(
            out["status"]["conditions"],
            // Upstream puts patched items whose position is unknown before server-only items.
            json!([{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}])
        );
    }

    #[test]
    fn set_element_order_and_delete() {
        let node = json!({"status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "h"}]}});
        let patch = json!({"status": {
            "$setElementOrder/addresses": [{"type": "Hostname"}, {"type": "InternalIP"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}});
        let out = apply("Node", &node, &patch).expect("apply");
        assert_eq!(
            out["status"]["addresses"],
            json!([{"type": "Hostname", "address": "h"}, {"type": "InternalIP", "address": "10.0.0.2"}])
        );
        let del = json!({"status": {"addresses": [{"type": "Hostname", "$patch": "delete"}]}});
        let out = apply("Node", &node, &del).expect("apply");
        assert_eq!(
            out["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.1"}])
        );
    }

    #[test]
    fn missing_merge_key_is_an_error() {
        let pod = json!({"status": {"conditions": [{"type": "Ready"}]}});
        let patch = json!({"status": {"conditions": [{"status": "True"}]}});
        assert!(apply("Pod", &pod, &patch).is_err());
    }
}
