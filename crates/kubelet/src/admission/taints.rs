//! admission::taints — upstream `Toleration.ToleratesTaint` and `FindMatchingUntoleratedTaint`
//! as the kubelet applies them at admission: only `NoExecute` taints of the Node matter (the
//! scheduler owns NoSchedule/PreferNoSchedule), and static pods are exempt. Receives a pod's
//! tolerations and the Node's taints; emits the first untolerated taint. Pure.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// The only taint effect the kubelet checks at admission.
pub const NO_EXECUTE: &str = "NoExecute";

/// Upstream `ToleratesTaint` with the `TaintTolerationComparisonOperators` gate off (its
/// default): an empty effect matches every effect, an empty key (with `Exists`) every key;
/// `Exists` matches any value, `Equal` (or no operator) the exact value; `Lt`/`Gt` and unknown
/// operators match nothing.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// Upstream `FindMatchingUntoleratedTaint`: the first taint passing `filter` that no
/// toleration tolerates.
pub fn find_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    filter: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| filter(t))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// The first `NoExecute` taint of the node the pod does not tolerate.
pub fn untolerated_no_execute<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    find_untolerated_taint(taints, tolerations, |t| t.effect == NO_EXECUTE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            value: (!value.is_empty()).then(|| value.to_owned()),
            effect: effect.to_owned(),
            ..Default::default()
        }
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Toleration {
            key: opt(key),
            operator: opt(op),
            value: opt(value),
            effect: opt(effect),
            ..Default::default()
        }
    }

    #[test]
    fn toleration_matching() {
        let t = taint("dedicated", "gpu", "NoExecute");
        let cases = [
            (tol("dedicated", "Equal", "gpu", "NoExecute"), true),
            (tol("dedicated", "", "gpu", "NoExecute"), true),
            (tol("dedicated", "Equal", "cpu", "NoExecute"), false),
            (tol("dedicated", "Exists", "", "NoExecute"), true),
            (tol("dedicated", "Exists", "", ""), true),
            (tol("dedicated", "Equal", "gpu", ""), true),
            (tol("dedicated", "Exists", "", "NoSchedule"), false),
            (tol("other", "Exists", "", ""), false),
            (tol("", "Exists", "", ""), true),
            (tol("", "Exists", "", "NoExecute"), true),
            (tol("", "Exists", "", "NoSchedule"), false),
            (tol("dedicated", "Gt", "1", ""), false),
            (tol("dedicated", "Bogus", "gpu", ""), false),
        ];
        for (tl, want) in cases {
            assert_eq!(tolerates(&tl, &t), want, "{tl:?}");
        }
        // Equal with no value matches a taint without value.
        assert!(tolerates(
            &tol("k", "Equal", "", ""),
            &taint("k", "", "NoExecute")
        ));
    }

    #[test]
    fn only_no_execute_taints_count() {
        let taints = vec![
            taint("a", "", "NoSchedule"),
            taint("b", "", "PreferNoSchedule"),
            taint("c", "1", "NoExecute"),
            taint("d", "", "NoExecute"),
        ];
        let found = untolerated_no_execute(&taints, &[]).map(|t| t.key.as_str());
        assert_eq!(found, Some("c"));
        let found =
            untolerated_no_execute(&taints, &[tol("c", "Exists", "", "")]).map(|t| t.key.as_str());
        assert_eq!(found, Some("d"));
        let all = [tol("", "Exists", "", "")];
        assert!(untolerated_no_execute(&taints, &all).is_none());
        assert!(untolerated_no_execute(&taints[..2], &[]).is_none());
    }
}
