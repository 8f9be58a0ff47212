//! Test support for real-runtime tests (feature `fake`): the one place that hands a test the
//! endpoint of the dev containerd. Owns the two rules every real-runtime test keeps: it fails
//! (never skips) when no containerd is configured, and, under nextest, it runs inside the
//! one-at-a-time `containerd` test group. A kubelet under test removes runtime pods that none
//! of its sources has, so a real-runtime test outside that group can have its pods collected
//! by a concurrently running test kubelet; a test that lost its place in the group (a renamed
//! module, a filter that stopped matching) fails here with its name instead of flaking.
//! Receives: the environment (`RKUBELET_CRI_ENDPOINT`, nextest's `NEXTEST*` variables).
//! Emits: the endpoint, or a panic naming the broken rule.

/// The nextest test group real-runtime tests run in (`.config/nextest.toml`).
pub const REAL_RUNTIME_TEST_GROUP: &str = "containerd";

/// Why a real-runtime test may not run where it is.
#[derive(Debug, PartialEq, Eq)]
pub enum PlacementError {
    /// `RKUBELET_CRI_ENDPOINT` is unset or empty.
    NoEndpoint,
    /// Run by nextest outside the `containerd` group (`group` is what nextest reported).
    OutsideGroup { test: String, group: String },
}

impl std::fmt::Display for PlacementError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoEndpoint => write!(
                f,
                "RKUBELET_CRI_ENDPOINT is not set: run ./dev/test.sh, or `eval $(dev/runtime.sh env)` \
                 after `dev/runtime.sh up`"
            ),
            Self::OutsideGroup { test, group } => write!(
                f,
                "real-runtime test {test:?} runs in nextest test group {group:?}, not \
                 {REAL_RUNTIME_TEST_GROUP:?}: give it a name the `containerd` override of \
                 .config/nextest.toml matches (module `containerd*`, or the rkubelet-cri \
                 `containerd` test binary)"
            ),
        }
    }
}

/// Decides whether a real-runtime test may run, from an environment lookup (pure; tested).
pub fn check_placement(env: impl Fn(&str) -> Option<String>) -> Result<String, PlacementError> {
    let endpoint = env("RKUBELET_CRI_ENDPOINT")
        .filter(|e| !e.is_empty())
        .ok_or(PlacementError::NoEndpoint)?;
    if env("NEXTEST").as_deref() == Some("1") {
        let group = env("NEXTEST_TEST_GROUP").unwrap_or_default();
        if group != REAL_RUNTIME_TEST_GROUP {
            return Err(PlacementError::OutsideGroup {
                test: env("NEXTEST_TEST_NAME").unwrap_or_default(),
                group,
            });
        }
    }
    Ok(endpoint)
}

/// The dev containerd's endpoint for a real-runtime test; panics when the test may not run
/// (no endpoint, or outside the one-at-a-time group under nextest).
pub fn real_runtime_endpoint() -> String {
    match check_placement(|k| std::env::var(k).ok()) {
        Ok(endpoint) => endpoint,
        Err(e) => panic!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn no_endpoint_fails() {
        assert_eq!(check_placement(env(&[])), Err(PlacementError::NoEndpoint));
        assert_eq!(
            check_placement(env(&[("RKUBELET_CRI_ENDPOINT", "")])),
            Err(PlacementError::NoEndpoint)
        );
    }

    #[test]
    fn outside_the_group_under_nextest_fails_with_the_test_name() {
        let Err(err) = check_placement(env(&[
            ("RKUBELET_CRI_ENDPOINT", "unix:///c.sock"),
            ("NEXTEST", "1"),
            ("NEXTEST_TEST_GROUP", "@global"),
            ("NEXTEST_TEST_NAME", "busybox_pod_lifecycle"),
        ])) else {
            panic!("a real-runtime test outside the group was allowed");
        };
        assert_eq!(
            err,
            PlacementError::OutsideGroup {
                test: "busybox_pod_lifecycle".into(),
                group: "@global".into()
            }
        );
        assert!(err.to_string().contains("busybox_pod_lifecycle"));
    }

    #[test]
    fn inside_the_group_or_without_nextest_runs() {
        let inside = env(&[
            ("RKUBELET_CRI_ENDPOINT", "unix:///c.sock"),
            ("NEXTEST", "1"),
            ("NEXTEST_TEST_GROUP", "containerd"),
        ]);
        assert_eq!(check_placement(inside).as_deref(), Ok("unix:///c.sock"));
        // `cargo test` runs one binary's tests in threads of one process: no group to check.
        let plain = env(&[("RKUBELET_CRI_ENDPOINT", "unix:///c.sock")]);
        assert_eq!(check_placement(plain).as_deref(), Ok("unix:///c.sock"));
    }
}
