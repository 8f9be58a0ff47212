//! Label and field selectors: owns parsing of `labelSelector`/`fieldSelector` query values;
//! emits match decisions for JSON objects.

use serde_json::Value;

/// A selector parse failure.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SelectorError {
    /// The selector text could not be parsed.
    #[error("unable to parse requirement {0:?}: {1}")]
    Parse(String, &'static str),
    /// The field is not supported for this resource.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector (all requirements must match).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<LabelReq>,
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn parse_set(key: &str, rest: &str, part: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Parse(part.to_string(), "expected '(' values ')'"))?;
    if key.is_empty() {
        return Err(SelectorError::Parse(part.to_string(), "empty key"));
    }
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let p = part.as_str();
            if let Some(k) = p.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(k.trim().to_string()));
            } else if let Some((k, v)) = p.split_once("!=") {
                reqs.push(LabelReq::NotEq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = p.split_once("==") {
                reqs.push(LabelReq::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = p.split_once('=') {
                reqs.push(LabelReq::Eq(k.trim().into(), v.trim().into()));
            } else if let Some(idx) = p.find(" notin ") {
                let key = p[..idx].trim();
                let vals = parse_set(key, &p[idx + 7..], p)?;
                reqs.push(LabelReq::NotIn(key.into(), vals));
            } else if let Some(idx) = p.find(" in ") {
                let key = p[..idx].trim();
                let vals = parse_set(key, &p[idx + 4..], p)?;
                reqs.push(LabelReq::In(key.into(), vals));
            } else if p.contains(' ') || p.contains('(') {
                return Err(SelectorError::Parse(p.to_string(), "unknown operator"));
            } else {
                reqs.push(LabelReq::Exists(p.to_string()));
            }
        }
        Ok(LabelSelector { reqs })
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.reqs.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector (`metadata.name=x,spec.nodeName!=y`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

/// Fields every resource supports, plus per-kind extras.
fn field_supported(kind: &str, field: &str) -> bool {
    matches!(field, "metadata.name" | "metadata.namespace")
        || match kind {
            "Pod" => matches!(
                field,
                "spec.nodeName"
                    | "spec.restartPolicy"
                    | "spec.schedulerName"
                    | "spec.serviceAccountName"
                    | "spec.hostNetwork"
                    | "status.phase"
                    | "status.podIP"
                    | "status.nominatedNodeName"
            ),
            "Event" => {
                field.starts_with("involvedObject.")
                    || matches!(field, "reason" | "source" | "type" | "reportingComponent")
            }
            "Secret" => field == "type",
            "CertificateSigningRequest" => field == "spec.signerName",
            "Node" => field == "spec.unschedulable",
            "Namespace" => field == "status.phase",
            _ => false,
        }
}

/// The string value a field selector compares against.
fn field_value(obj: &Value, field: &str) -> String {
    let mut cur = obj;
    for seg in field.split('.') {
        cur = &cur[seg];
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null if field == "spec.hostNetwork" || field == "spec.unschedulable" => {
            "false".to_string()
        }
        _ => String::new(),
    }
}

impl FieldSelector {
    /// Parses a field selector, rejecting fields the kind does not support.
    pub fn parse(s: &str, kind: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let (k, neg, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, false, v)
            } else {
                return Err(SelectorError::Parse(part.clone(), "expected field=value"));
            };
            let k = k.trim();
            if !field_supported(kind, k) {
                return Err(SelectorError::UnsupportedField(k.to_string()));
            }
            reqs.push((k.to_string(), neg, v.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    /// Whether the object satisfies every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs
            .iter()
            .all(|(k, neg, v)| (field_value(obj, k) == *v) != *neg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "p1", "namespace": "ns1", "labels": labels},
               "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_selector_table() {
        let o = obj(json!({"app": "web", "tier": "fe"}));
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web, db)", true),
            ("app in (db)", false),
            ("app notin (db)", true),
            ("app notin (web)", false),
            ("missing notin (web)", true),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=web,tier in (fe,be),!x", true),
            ("app=web,tier=be", false),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).expect(sel);
            assert_eq!(s.matches(&o), want, "selector {sel:?}");
        }
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("app foo (x)").is_err());
    }

    #[test]
    fn field_selector_table() {
        let o = obj(json!({}));
        let cases = [
            ("metadata.name=p1", true),
            ("metadata.name=p2", false),
            ("metadata.namespace=ns1,spec.nodeName=n1", true),
            ("spec.nodeName=", false),
            ("spec.nodeName!=n1", false),
            ("status.phase=Running", true),
        ];
        for (sel, want) in cases {
            let s = FieldSelector::parse(sel, "Pod").expect(sel);
            assert_eq!(s.matches(&o), want, "selector {sel:?}");
        }
        assert_eq!(
            FieldSelector::parse("spec.nodeName=n1", "ConfigMap"),
            Err(SelectorError::UnsupportedField("spec.nodeName".into()))
        );
        let unbound = json!({"metadata": {"name": "x"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.nodeName=", "Pod")
                .expect("parse")
                .matches(&unbound)
        );
    }
}
