//! Manifest decoding: receives the raw bytes of a static pod manifest (YAML or JSON, possibly
//! several `---` documents, a `v1 Pod` each or, where allowed, a `v1 PodList`) and emits the
//! decoded `Pod`s, not yet defaulted, or an error naming what is wrong (a field this kubelet
//! does not know, where it would change what runs, included). Pure but for a log line per
//! ignored unknown field.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::static_pod::ManifestError;
use super::unknown_fields::CheckedPod;

/// Upper bound on a manifest's size (upstream `maxConfigLength`, 10 MiB).
pub const MAX_MANIFEST_BYTES: usize = 10 * 1024 * 1024;

/// Decodes every document in `data`. Empty documents are skipped; a manifest without any pod
/// is an error. `allow_list` admits `kind: PodList` documents (the HTTP source).
pub fn decode_manifest(data: &[u8], allow_list: bool) -> Result<Vec<Pod>, ManifestError> {
    if data.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge(MAX_MANIFEST_BYTES));
    }
    let mut pods = Vec::new();
    let mut objects = 0;
    for doc in documents(data)? {
        if doc.is_null() {
            continue;
        }
        objects += 1;
        pods.extend(decode_object(doc, allow_list)?);
    }
    // An explicit empty PodList is a valid, empty manifest; nothing at all is not.
    if objects == 0 {
        return Err(ManifestError::Parse("no pod found in the manifest".into()));
    }
    Ok(pods)
}

/// Splits the manifest into JSON values. Data starting with `{` is JSON (as upstream's
/// `yaml.ToJSON` shortcut); anything else is YAML, possibly multi-document.
fn documents(data: &[u8]) -> Result<Vec<Value>, ManifestError> {
    let text = std::str::from_utf8(data)
        .map_err(|e| ManifestError::Parse(format!("manifest is not UTF-8: {e}")))?;
    if text.trim_start().starts_with('{') {
        return serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .map(|r| r.map_err(|e| ManifestError::Parse(format!("invalid JSON: {e}"))))
            .collect();
    }
    crate::yaml::documents::<Value>(text)
        .map_err(|e| ManifestError::Parse(format!("invalid YAML: {e}")))
}

fn decode_object(doc: Value, allow_list: bool) -> Result<Vec<Pod>, ManifestError> {
    if !doc.is_object() {
        return Err(ManifestError::Parse(format!(
            "expected an object, got {}",
            type_name(&doc)
        )));
    }
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    let api_version = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind.is_empty() {
        return Err(ManifestError::Parse("Object 'Kind' is missing".into()));
    }
    if api_version.is_empty() {
        return Err(ManifestError::Parse(
            "Object 'apiVersion' is missing".into(),
        ));
    }
    let is_list = kind == "PodList" && allow_list;
    if kind != "Pod" && !is_list {
        let expected = if allow_list { "Pod or PodList" } else { "Pod" };
        return Err(ManifestError::Parse(format!(
            "expected kind {expected}, got {kind:?}"
        )));
    }
    if api_version != "v1" {
        return Err(ManifestError::Parse(format!(
            "no kind {kind:?} is registered for version {api_version:?}"
        )));
    }
    if is_list {
        let items = match doc.get("items") {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(items)) => items.clone(),
            Some(other) => {
                return Err(ManifestError::Parse(format!(
                    "items: expected an array, got {}",
                    type_name(other)
                )));
            }
        };
        return items
            .into_iter()
            .enumerate()
            .map(|(i, item)| decode_pod(item, &format!("items[{i}]")))
            .collect();
    }
    Ok(vec![decode_pod(doc, "")?])
}

/// Decodes one pod; a field this kubelet does not know refuses the pod where it would change
/// what runs (see [`super::unknown_fields`]), and is logged once otherwise.
/// `at` is where the pod is in the document (`items[3]` in a list, empty otherwise).
fn decode_pod(value: Value, at: &str) -> Result<Pod, ManifestError> {
    let checked = serde_path_to_error::deserialize::<_, CheckedPod>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = if path == "." || path.is_empty() {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        };
        if at.is_empty() {
            ManifestError::Parse(msg)
        } else {
            ManifestError::Parse(format!("{at}.{msg}"))
        }
    })?;
    let prefix = if at.is_empty() {
        String::new()
    } else {
        format!("{at}.")
    };
    if let Some(refusal) = checked.unknown.refusal(&prefix) {
        return Err(ManifestError::UnknownField(refusal));
    }
    let name = checked.pod.metadata.name.as_deref().unwrap_or_default();
    checked.unknown.log_ignored(name);
    Ok(checked.pod)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::PodExt;

    const POD_YAML: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: nginx\n";

    #[test]
    fn yaml_json_and_multi_document() {
        let pods = decode_manifest(POD_YAML.as_bytes(), false).unwrap();
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].name(), "web");

        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"x"}]}}"#;
        let pods = decode_manifest(json.as_bytes(), false).unwrap();
        assert_eq!(pods[0].name(), "j");

        let multi = format!(
            "---\n{POD_YAML}---\n{}\n---\n",
            POD_YAML.replace("web", "db")
        );
        let pods = decode_manifest(multi.as_bytes(), false).unwrap();
        let names: Vec<_> = pods.iter().map(|p| p.name().to_string()).collect();
        assert_eq!(names, ["web", "db"]);
    }

    #[test]
    fn pod_list_only_when_allowed() {
        let list = "apiVersion: v1\nkind: PodList\nitems:\n- metadata:\n    name: a\n  spec:\n    containers: []\n- metadata:\n    name: b\n";
        let pods = decode_manifest(list.as_bytes(), true).unwrap();
        assert_eq!(pods.len(), 2);
        let err = decode_manifest(list.as_bytes(), false).unwrap_err();
        assert!(err.to_string().contains("expected kind Pod"), "{err}");
        let empty = "apiVersion: v1\nkind: PodList\nitems: []\n";
        assert!(decode_manifest(empty.as_bytes(), true).unwrap().is_empty());
    }

    #[test]
    fn errors() {
        let cases: &[(&str, &str)] = &[
            ("", "no pod found"),
            ("metadata:\n  name: x\n", "Object 'Kind' is missing"),
            (
                "kind: Pod\nmetadata:\n  name: x\n",
                "Object 'apiVersion' is missing",
            ),
            (
                "apiVersion: apps/v1\nkind: Deployment\n",
                "expected kind Pod, got \"Deployment\"",
            ),
            (
                "apiVersion: v2\nkind: Pod\n",
                "no kind \"Pod\" is registered for version \"v2\"",
            ),
            (
                "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: c\n    ports:\n    - containerPort: http\n",
                "spec.containers[0].ports[0].containerPort: invalid type",
            ),
            ("a: [b\n", "invalid YAML"),
            ("{\"kind\": ", "invalid JSON"),
            ("- 1\n- 2\n", "expected an object, got an array"),
        ];
        for (input, want) in cases {
            let err = decode_manifest(input.as_bytes(), false)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{input:?}: {err}");
        }
    }

    #[test]
    fn unknown_fields_that_change_what_runs_refuse_the_pod() {
        use crate::sources::unknown_fields::tests::{REFUSED, pod_with};
        for (at, field, path) in REFUSED {
            let doc = pod_with(at, field);
            for text in [
                serde_json::to_string(&doc).unwrap(),
                crate::yaml::to_string(&doc).unwrap(),
            ] {
                let err = decode_manifest(text.as_bytes(), false)
                    .unwrap_err()
                    .to_string();
                assert!(err.contains(path), "{path}: {err}");
            }
            // In a PodList (staticPodURL), the item is refused too.
            let list = serde_json::json!({"apiVersion": "v1", "kind": "PodList", "items": [doc]});
            let err = decode_manifest(list.to_string().as_bytes(), true)
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("items[0].{path}")), "{err}");
        }
        // Unknown metadata or status fields are only logged.
        let doc = pod_with(&["metadata"], "newMeta");
        assert_eq!(
            decode_manifest(doc.to_string().as_bytes(), false)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn the_billion_laughs_family_is_refused() {
        use crate::yaml::testdata::{
            deep_block_nesting, deep_nesting, large_anchor, nested_anchors,
        };
        for bomb in [
            nested_anchors(),
            large_anchor(),
            deep_nesting(),
            deep_block_nesting(),
        ] {
            let doc = format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nbomb:\n  {}",
                bomb.replace('\n', "\n  ")
            );
            let start = std::time::Instant::now();
            let err = decode_manifest(doc.as_bytes(), false)
                .unwrap_err()
                .to_string();
            assert!(
                start.elapsed() < std::time::Duration::from_secs(5),
                "{:?}",
                start.elapsed()
            );
            assert!(
                err.starts_with("couldn't parse as pod: invalid YAML: "),
                "{err}"
            );
        }
    }
}
