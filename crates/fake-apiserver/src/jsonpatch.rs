//! JSON patch (RFC 6902) and JSON merge patch (RFC 7386): owns applying those two patch
//! formats to a JSON object; emits the patched object.

use serde_json::{Map, Value};

/// A JSON or merge patch that could not be applied.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    /// The patch document is malformed.
    #[error("invalid JSON patch: {0}")]
    Malformed(String),
    /// An operation referenced a missing path.
    #[error("jsonpatch {op} operation does not apply: doc is missing path: {path:?}")]
    MissingPath {
        /// Operation name.
        op: String,
        /// JSON pointer.
        path: String,
    },
    /// A `test` operation failed.
    #[error("testing value {path} failed")]
    TestFailed {
        /// JSON pointer.
        path: String,
    },
}

/// Applies an RFC 7386 merge patch.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut out = match target {
                Value::Object(t) => t.clone(),
                _ => Map::new(),
            };
            for (k, v) in p {
                if v.is_null() {
                    out.remove(k);
                } else {
                    let cur = out.get(k).cloned().unwrap_or(Value::Null);
                    out.insert(k.clone(), merge_patch(&cur, v));
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn parse_pointer(p: &str) -> Result<Vec<String>, PatchError> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let rest = p
        .strip_prefix('/')
        .ok_or_else(|| PatchError::Malformed(format!("path {p:?} must start with '/'")))?;
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn get<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for seg in path {
        cur = match cur {
            Value::Object(m) => m.get(seg)?,
            Value::Array(a) => a.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn parent_mut<'a>(doc: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = doc;
    for seg in path {
        cur = match cur {
            Value::Object(m) => m.get_mut(seg)?,
            Value::Array(a) => a.get_mut(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn missing(op: &str, path: &[String]) -> PatchError {
    PatchError::MissingPath {
        op: op.to_string(),
        path: format!("/{}", path.join("/")),
    }
}

fn add(doc: &mut Value, path: &[String], value: Value, op: &str) -> Result<(), PatchError> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parent) {
        Some(Value::Object(m)) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let idx = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>().map_err(|_| missing(op, path))?
            };
            if idx > a.len() {
                return Err(missing(op, path));
            }
            a.insert(idx, value);
            Ok(())
        }
        _ => Err(missing(op, path)),
    }
}

fn remove(doc: &mut Value, path: &[String], op: &str) -> Result<Value, PatchError> {
    let Some((last, parent)) = path.split_last() else {
        return Err(missing(op, path));
    };
    match parent_mut(doc, parent) {
        Some(Value::Object(m)) => m.remove(last).ok_or_else(|| missing(op, path)),
        Some(Value::Array(a)) => {
            let idx = last.parse::<usize>().map_err(|_| missing(op, path))?;
            if idx >= a.len() {
                return Err(missing(op, path));
            }
            Ok(a.remove(idx))
        }
        _ => Err(missing(op, path)),
    }
}

/// Applies an RFC 6902 JSON patch.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Array(ops) = patch else {
        return Err(PatchError::Malformed(
            "a JSON patch must be a list of operations".into(),
        ));
    };
    let mut doc = target.clone();
    for op in ops {
        let name = op["op"]
            .as_str()
            .ok_or_else(|| PatchError::Malformed(format!("operation {op} has no \"op\"")))?;
        let path = parse_pointer(op["path"].as_str().unwrap_or(""))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| PatchError::Malformed(format!("operation {op} has no \"value\"")))
        };
        let from = || parse_pointer(op["from"].as_str().unwrap_or(""));
        match name {
            "add" => add(&mut doc, &path, value()?, name)?,
            "remove" => {
                remove(&mut doc, &path, name)?;
            }
            "replace" => {
                remove(&mut doc, &path, name)?;
                add(&mut doc, &path, value()?, name)?;
            }
            "move" => {
                let v = remove(&mut doc, &from()?, name)?;
                add(&mut doc, &path, v, name)?;
            }
            "copy" => {
                let f = from()?;
                let v = get(&doc, &f).cloned().ok_or_else(|| missing(name, &f))?;
                add(&mut doc, &path, v, name)?;
            }
            "test" => {
                if get(&doc, &path) != Some(&value()?) {
                    return Err(PatchError::TestFailed {
                        path: format!("/{}", path.join("/")),
                    });
                }
            }
            other => {
                return Err(PatchError::Malformed(format!(
                    "unknown operation {other:?}"
                )));
            }
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc_examples() {
        let t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        let p = json!({"a": "z", "c": {"f": null}});
        assert_eq!(merge_patch(&t, &p), json!({"a": "z", "c": {"d": "e"}}));
        assert_eq!(
            merge_patch(&json!({"a": [1]}), &json!({"a": [2]})),
            json!({"a": [2]})
        );
    }

    #[test]
    fn json_patch_ops() {
        let t = json!({"metadata": {"labels": {"a/b": "1"}}, "list": [1, 2]});
        let p = json!([
            {"op": "add", "path": "/list/-", "value": 3},
            {"op": "replace", "path": "/metadata/labels/a~1b", "value": "2"},
            {"op": "test", "path": "/list/0", "value": 1},
            {"op": "remove", "path": "/list/1"},
            {"op": "copy", "from": "/list", "path": "/copy"},
        ]);
        let out = json_patch(&t, &p).expect("patch");
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"a/b": "2"}}, "list": [1, 3], "copy": [1, 3]})
        );
        let bad = json!([{"op": "remove", "path": "/nope"}]);
        assert!(matches!(
            json_patch(&t, &bad),
            Err(PatchError::MissingPath { .. })
        ));
        let failing = json!([{"op": "test", "path": "/list/0", "value": 9}]);
        assert!(matches!(
            json_patch(&t, &failing),
            Err(PatchError::TestFailed { .. })
        ));
    }
}
