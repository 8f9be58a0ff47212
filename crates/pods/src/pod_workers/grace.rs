//! The grace period of a pod kill (upstream `calculateEffectiveGracePeriod`). Owns no state:
//! receives the grace period a terminating worker already uses, the pod (its
//! `deletionGracePeriodSeconds` and spec) and a kill's override; emits the grace period to use
//! and whether it shortened the one in use (which restarts the running kill).

use k8s_openapi::api::core::v1::Pod;

/// The API server's default `terminationGracePeriodSeconds`.
pub const DEFAULT_TERMINATION_GRACE_PERIOD: i64 = 30;

/// The grace period to use for a kill, and whether it is shorter than `current` (the one a
/// terminating worker already uses). A grace period only ever decreases: the pod's
/// `deletionGracePeriodSeconds` (set by the API server) and then `grace_override` (eviction,
/// force kill) replace the current value only when smaller; with neither and no current
/// value, the spec's `terminationGracePeriodSeconds`. Never below 1.
pub fn effective_grace_period(
    current: Option<i64>,
    pod: Option<&Pod>,
    grace_override: Option<i64>,
) -> (i64, bool) {
    let mut grace = current;
    let mut lower = |candidate: Option<i64>| {
        if let Some(c) = candidate
            && grace.is_none_or(|g| c < g)
        {
            grace = Some(c);
        }
    };
    lower(pod.and_then(|p| p.metadata.deletion_grace_period_seconds));
    lower(grace_override);
    let grace = grace
        .unwrap_or_else(|| {
            pod.and_then(|p| p.spec.as_ref())
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(DEFAULT_TERMINATION_GRACE_PERIOD)
        })
        .max(1);
    (grace, current.is_some_and(|c| c != grace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Option<i64>, deletion: Option<i64>) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"containers": []},
        }))
        .expect("pod");
        if let Some(s) = p.spec.as_mut() {
            s.termination_grace_period_seconds = spec;
        }
        p.metadata.deletion_grace_period_seconds = deletion;
        p
    }

    #[test]
    fn first_kill_takes_the_smallest_of_deletion_grace_and_override() {
        let cases = [
            // (spec, deletion, override) → grace
            ((Some(20), None, None), 20),
            ((None, None, None), DEFAULT_TERMINATION_GRACE_PERIOD),
            ((Some(20), Some(10), None), 10),
            ((Some(20), None, Some(5)), 5),
            // The override never lengthens what the API server asked for (upstream).
            ((Some(20), Some(10), Some(15)), 10),
            ((Some(20), Some(10), Some(3)), 3),
            // An override may be longer than the spec when nothing else is set.
            ((Some(20), None, Some(40)), 40),
            // Force delete (0) and negative values become 1.
            ((Some(20), Some(0), None), 1),
            ((Some(0), None, None), 1),
            ((Some(20), None, Some(-3)), 1),
        ];
        for ((spec, deletion, over), want) in cases {
            let p = pod(spec, deletion);
            assert_eq!(
                effective_grace_period(None, Some(&p), over),
                (want, false),
                "spec {spec:?} deletion {deletion:?} override {over:?}"
            );
        }
        assert_eq!(effective_grace_period(None, None, None), (30, false));
    }

    #[test]
    fn a_running_kill_is_only_ever_shortened() {
        let p = pod(Some(30), None);
        assert_eq!(
            effective_grace_period(Some(30), Some(&p), None),
            (30, false)
        );
        assert_eq!(
            effective_grace_period(Some(30), Some(&p), Some(60)),
            (30, false)
        );
        assert_eq!(
            effective_grace_period(Some(30), Some(&p), Some(5)),
            (5, true)
        );
        // The API server lowering deletionGracePeriodSeconds shortens it too.
        let lowered = pod(Some(30), Some(4));
        assert_eq!(
            effective_grace_period(Some(30), Some(&lowered), None),
            (4, true)
        );
        assert_eq!(
            effective_grace_period(Some(4), Some(&lowered), None),
            (4, false)
        );
        // Force delete during a graceful one.
        let forced = pod(Some(30), Some(0));
        assert_eq!(
            effective_grace_period(Some(30), Some(&forced), None),
            (1, true)
        );
        assert_eq!(
            effective_grace_period(Some(1), Some(&forced), None),
            (1, false)
        );
    }
}
