//! admission::node_affinity — upstream `nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)`
//! and the `NodeName` filter: the pod's `spec.nodeSelector` and required node affinity
//! (`requiredDuringSchedulingIgnoredDuringExecution`: terms ORed, requirements within a term
//! ANDed; `matchExpressions` on labels with In/NotIn/Exists/DoesNotExist/Gt/Lt, `matchFields`
//! on `metadata.name`) against the Node's labels and name. Receives a pod and a Node; emits
//! match decisions. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, Pod};

/// A requirement upstream's parser refuses; a term containing one never matches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{key}: operator {operator:?} is not supported")]
    Operator { key: String, operator: String },
    #[error("{key}: operator {operator} needs {expected}")]
    Values {
        key: String,
        operator: String,
        expected: &'static str,
    },
    #[error("{key}: {value:?} is not an integer")]
    Integer { key: String, value: String },
}

type Labels = BTreeMap<String, String>;

fn integer(key: &str, value: &str) -> Result<i64, SelectorError> {
    value.parse::<i64>().map_err(|_| SelectorError::Integer {
        key: key.to_owned(),
        value: value.to_owned(),
    })
}

/// Upstream `labels.NewRequirement` + `Requirement.Matches` for one label expression.
fn label_requirement_matches(
    r: &NodeSelectorRequirement,
    labels: &Labels,
) -> Result<bool, SelectorError> {
    let values = r.values.as_deref().unwrap_or_default();
    let bad = |expected| SelectorError::Values {
        key: r.key.clone(),
        operator: r.operator.clone(),
        expected,
    };
    let label = labels.get(&r.key);
    match r.operator.as_str() {
        "In" | "NotIn" => {
            if values.is_empty() {
                return Err(bad("at least one value"));
            }
            let found = label.is_some_and(|v| values.contains(v));
            Ok(if r.operator == "In" { found } else { !found })
        }
        "Exists" | "DoesNotExist" => {
            if !values.is_empty() {
                return Err(bad("no values"));
            }
            Ok(label.is_some() == (r.operator == "Exists"))
        }
        "Gt" | "Lt" => {
            let [bound] = values else {
                return Err(bad("exactly one value"));
            };
            let bound = integer(&r.key, bound)?;
            let Some(v) = label.and_then(|v| v.parse::<i64>().ok()) else {
                return Ok(false);
            };
            Ok(if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            })
        }
        other => Err(SelectorError::Operator {
            key: r.key.clone(),
            operator: other.to_owned(),
        }),
    }
}

/// Upstream `nodeSelectorRequirementsAsFieldSelector` + match: In/NotIn with exactly one value
/// on the Node's fields (only `metadata.name` exists; other keys read as empty).
fn field_requirement_matches(
    r: &NodeSelectorRequirement,
    node_name: &str,
) -> Result<bool, SelectorError> {
    let values = r.values.as_deref().unwrap_or_default();
    let field = if r.key == "metadata.name" {
        node_name
    } else {
        ""
    };
    match r.operator.as_str() {
        "In" | "NotIn" => {
            let [value] = values else {
                return Err(SelectorError::Values {
                    key: r.key.clone(),
                    operator: r.operator.clone(),
                    expected: "exactly one value",
                });
            };
            Ok((field == value) == (r.operator == "In"))
        }
        other => Err(SelectorError::Operator {
            key: r.key.clone(),
            operator: other.to_owned(),
        }),
    }
}

/// One non-empty term: every label and field requirement must hold.
fn term_matches(
    exprs: &[NodeSelectorRequirement],
    fields: &[NodeSelectorRequirement],
    labels: &Labels,
    node_name: &str,
) -> Result<bool, SelectorError> {
    let mut ok = true;
    for r in exprs {
        ok &= label_requirement_matches(r, labels)?;
    }
    for r in fields {
        let m = field_requirement_matches(r, node_name)?;
        // A node without a name has no fields: field requirements are not applied.
        if !node_name.is_empty() {
            ok &= m;
        }
    }
    Ok(ok)
}

/// Upstream `LazyErrorNodeSelector.Match`: terms ORed; an empty term matches nothing; a term
/// that does not parse does not match (its error is returned only when no term matched).
pub fn node_selector_matches(selector: &NodeSelector, node: &Node) -> Result<bool, SelectorError> {
    let empty = Labels::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let mut first_err = None;
    for term in &selector.node_selector_terms {
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            continue;
        }
        let term_result = term_matches(exprs, fields, labels, name);
        match term_result {
            Ok(true) => return Ok(true),
            Ok(false) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(false),
    }
}

/// Upstream `GetRequiredNodeAffinity(pod).Match(node)`: every `nodeSelector` label equal, and
/// (if set) the required node affinity matching. Parse errors count as no match.
pub fn required_node_affinity_matches(pod: &Pod, node: &Node) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    if let Some(selector) = spec.node_selector.as_ref().filter(|s| !s.is_empty()) {
        let labels = node.metadata.labels.as_ref();
        let all_equal = selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
        if !all_equal {
            return false;
        }
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        Some(sel) => node_selector_matches(sel, node).unwrap_or(false),
        None => true,
    }
}

/// Upstream `nodename.Fits`: an empty `spec.nodeName` or this node's name.
pub fn node_name_fits(pod: &Pod, node: &Node) -> bool {
    let wanted = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    wanted.is_empty() || Some(wanted) == node.metadata.name.as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelectorTerm, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str, labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    fn term(
        exprs: Vec<NodeSelectorRequirement>,
        fields: Vec<NodeSelectorRequirement>,
    ) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(exprs),
            match_fields: Some(fields),
        }
    }

    fn pod_with(terms: Vec<NodeSelectorTerm>, selector: &[(&str, &str)]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                node_selector: Some(
                    selector
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                affinity: Some(Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                            node_selector_terms: terms,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn label_operators() {
        let n = node("n1", &[("zone", "a"), ("cores", "8"), ("word", "x")]);
        let cases: &[(NodeSelectorRequirement, bool)] = &[
            (req("zone", "In", &["a", "b"]), true),
            (req("zone", "In", &["b"]), false),
            (req("missing", "In", &["a"]), false),
            (req("zone", "NotIn", &["b"]), true),
            (req("zone", "NotIn", &["a"]), false),
            (req("missing", "NotIn", &["a"]), true),
            (req("zone", "Exists", &[]), true),
            (req("missing", "Exists", &[]), false),
            (req("zone", "DoesNotExist", &[]), false),
            (req("missing", "DoesNotExist", &[]), true),
            (req("cores", "Gt", &["4"]), true),
            (req("cores", "Gt", &["8"]), false),
            (req("cores", "Lt", &["9"]), true),
            (req("cores", "Lt", &["8"]), false),
            (req("word", "Gt", &["1"]), false),
            (req("missing", "Lt", &["1"]), false),
        ];
        for (r, want) in cases {
            let sel = NodeSelector {
                node_selector_terms: vec![term(vec![r.clone()], vec![])],
            };
            assert_eq!(node_selector_matches(&sel, &n).unwrap(), *want, "{r:?}");
        }
    }

    #[test]
    fn invalid_requirements_never_match() {
        let n = node("n1", &[("cores", "8")]);
        for r in [
            req("cores", "Gt", &["x"]),
            req("cores", "Gt", &["1", "2"]),
            req("cores", "In", &[]),
            req("cores", "Exists", &["8"]),
            req("cores", "Like", &["8"]),
        ] {
            let sel = NodeSelector {
                node_selector_terms: vec![term(vec![r.clone()], vec![])],
            };
            assert!(node_selector_matches(&sel, &n).is_err(), "{r:?}");
            assert!(!required_node_affinity_matches(
                &pod_with(sel.node_selector_terms, &[]),
                &n
            ));
        }
        // A valid term still matches next to an invalid one.
        let sel = NodeSelector {
            node_selector_terms: vec![
                term(vec![req("cores", "Gt", &["x"])], vec![]),
                term(vec![req("cores", "Exists", &[])], vec![]),
            ],
        };
        assert!(node_selector_matches(&sel, &n).unwrap());
    }

    #[test]
    fn terms_are_ored_and_requirements_anded() {
        let n = node("n1", &[("zone", "a"), ("disk", "ssd")]);
        let both = term(
            vec![req("zone", "In", &["a"]), req("disk", "In", &["hdd"])],
            vec![],
        );
        assert!(!required_node_affinity_matches(
            &pod_with(vec![both.clone()], &[]),
            &n
        ));
        let other = term(vec![req("disk", "Exists", &[])], vec![]);
        assert!(required_node_affinity_matches(
            &pod_with(vec![both, other], &[]),
            &n
        ));
        // Empty terms match nothing; no terms at all match nothing.
        let empty = NodeSelectorTerm::default();
        assert!(!required_node_affinity_matches(
            &pod_with(vec![empty], &[]),
            &n
        ));
        assert!(!required_node_affinity_matches(&pod_with(vec![], &[]), &n));
    }

    #[test]
    fn match_fields_on_node_name() {
        let n = node("n1", &[]);
        let t = |op, v| term(vec![], vec![req("metadata.name", op, &[v])]);
        assert!(required_node_affinity_matches(
            &pod_with(vec![t("In", "n1")], &[]),
            &n
        ));
        assert!(!required_node_affinity_matches(
            &pod_with(vec![t("In", "n2")], &[]),
            &n
        ));
        assert!(required_node_affinity_matches(
            &pod_with(vec![t("NotIn", "n2")], &[]),
            &n
        ));
        assert!(!required_node_affinity_matches(
            &pod_with(vec![t("NotIn", "n1")], &[]),
            &n
        ));
        let two = term(vec![], vec![req("metadata.name", "In", &["n1", "n2"])]);
        assert!(!required_node_affinity_matches(
            &pod_with(vec![two], &[]),
            &n
        ));
    }

    #[test]
    fn node_selector_needs_every_label() {
        let n = node("n1", &[("zone", "a"), ("disk", "ssd")]);
        let any = term(vec![req("zone", "Exists", &[])], vec![]);
        assert!(required_node_affinity_matches(
            &pod_with(vec![any.clone()], &[("zone", "a")]),
            &n
        ));
        assert!(!required_node_affinity_matches(
            &pod_with(vec![any.clone()], &[("zone", "a"), ("gpu", "yes")]),
            &n
        ));
        assert!(!required_node_affinity_matches(
            &pod_with(vec![any], &[("zone", "b")]),
            &n
        ));
        assert!(required_node_affinity_matches(&Pod::default(), &n));
    }

    #[test]
    fn node_name() {
        let n = node("n1", &[]);
        let mut p = Pod {
            spec: Some(PodSpec::default()),
            ..Default::default()
        };
        assert!(node_name_fits(&p, &n));
        p.spec.as_mut().unwrap().node_name = Some("n1".into());
        assert!(node_name_fits(&p, &n));
        p.spec.as_mut().unwrap().node_name = Some("n2".into());
        assert!(!node_name_fits(&p, &n));
    }
}
