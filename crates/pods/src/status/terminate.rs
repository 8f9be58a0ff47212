//! status::terminate — the final status of a pod whose termination is complete (upstream
//! status manager `TerminatePod`, `hasPodInitialized`, `initializedContainers`). Receives the
//! pod (its API status tells whether it initialized) and its last known status; emits the
//! status with every unaccounted container terminated and, unless static, a terminal phase.
//! Pure.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
};
use tracing::debug;

use crate::status::manager::is_terminal_phase;
use crate::types::PodExt;

/// Reason of a container the kubelet could not find when the pod was terminated.
pub const CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
/// Message upstream's `TerminatePod` gives such a container.
pub const NOT_LOCATED_MESSAGE: &str =
    "The container could not be located when the pod was terminated";

/// The pure part of upstream `TerminatePod`: `last` (the status manager's status, or the API
/// pod's status when there is none) made final.
/// - Once the pod has initialized (no init containers, or evidence in the API status that a
///   regular container ran or the last init container completed), every regular container
///   without a terminated state becomes terminated `ContainerStatusUnknown`, exit code 137.
/// - Init containers up to the last one that shows any attempt to start (at least the first)
///   get the same treatment; the waiting ones after it stay waiting.
/// - A pod that is not static moves to `Failed` unless its phase is already terminal.
pub fn terminated_pod_status(pod: &Pod, last: Option<&PodStatus>) -> PodStatus {
    let mut status = last.or(pod.status.as_ref()).cloned().unwrap_or_default();
    let unknown = || ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 137,
            reason: Some(CONTAINER_STATUS_UNKNOWN.to_owned()),
            message: Some(NOT_LOCATED_MESSAGE.to_owned()),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    };
    let has_terminated =
        |c: &ContainerStatus| c.state.as_ref().is_some_and(|s| s.terminated.is_some());
    if has_pod_initialized(pod) {
        for c in status.container_statuses.iter_mut().flatten() {
            if !has_terminated(c) {
                c.state = Some(unknown());
            }
        }
    }
    if let Some(init) = status.init_container_statuses.as_mut() {
        let attempted = init
            .iter()
            .rposition(|c| !is_waiting(c) || last_terminated(c).is_some())
            .unwrap_or(0);
        for c in init.iter_mut().take(attempted + 1) {
            if !has_terminated(c) {
                c.state = Some(unknown());
            }
        }
    }
    let is_static = pod.source().is_some_and(|s| s.is_static());
    if !is_static && !is_terminal_phase(status.phase.as_deref()) {
        debug!(pod = %pod.full_name(), uid = %pod.uid(), old = ?status.phase, reason = "pod terminated", "marking terminal pod as failed");
        status.phase = Some("Failed".to_owned());
    }
    status
}

fn is_waiting(c: &ContainerStatus) -> bool {
    c.state.as_ref().is_some_and(|s| s.waiting.is_some())
}

fn last_terminated(c: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    c.last_state.as_ref().and_then(|s| s.terminated.as_ref())
}

/// Upstream `hasPodInitialized`, read from the API pod's status: no init containers, a regular
/// container that left the waiting state or terminated before, or a last init container that
/// completed successfully.
fn has_pod_initialized(pod: &Pod) -> bool {
    let no_init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_none_or(Vec::is_empty);
    if no_init {
        return true;
    }
    let Some(api) = pod.status.as_ref() else {
        return false;
    };
    if api
        .container_statuses
        .iter()
        .flatten()
        .any(|c| last_terminated(c).is_some() || !is_waiting(c))
    {
        return true;
    }
    api.init_container_statuses
        .as_ref()
        .and_then(|l| l.last())
        .is_some_and(|c| {
            let ok = |t: Option<&ContainerStateTerminated>| t.is_some_and(|t| t.exit_code == 0);
            ok(last_terminated(c)) || ok(c.state.as_ref().and_then(|s| s.terminated.as_ref()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerStateRunning, ContainerStateWaiting, PodSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn waiting(name: &str, reason: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.into()),
                    message: None,
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }
    }

    fn running(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }
    }

    fn exited(name: &str, code: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }
    }

    fn pod(init: &[&str], source: &str) -> Pod {
        let c = |n: &&str| Container {
            name: (*n).into(),
            ..Container::default()
        };
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                uid: Some("u".into()),
                annotations: Some(
                    [(
                        crate::types::CONFIG_SOURCE_ANNOTATION.to_owned(),
                        source.to_owned(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                init_containers: Some(init.iter().map(c).collect()),
                containers: vec![c(&"app")],
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    fn state(c: &ContainerStatus) -> (&str, Option<i32>, Option<&str>) {
        let s = c.state.as_ref().unwrap();
        if let Some(t) = &s.terminated {
            ("terminated", Some(t.exit_code), t.reason.as_deref())
        } else if let Some(w) = &s.waiting {
            ("waiting", None, w.reason.as_deref())
        } else {
            ("running", None, None)
        }
    }

    #[test]
    fn never_started_pod_fails_with_unknown_containers() {
        let last = PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![waiting("app", "ContainerCreating")]),
            ..PodStatus::default()
        };
        let s = terminated_pod_status(&pod(&[], "api"), Some(&last));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let c = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            state(c),
            ("terminated", Some(137), Some(CONTAINER_STATUS_UNKNOWN))
        );
        let t = c.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(
            t.message.as_deref(),
            Some("The container could not be located when the pod was terminated")
        );
    }

    #[test]
    fn terminal_phase_and_terminated_containers_are_kept() {
        let last = PodStatus {
            phase: Some("Succeeded".into()),
            reason: Some("r".into()),
            container_statuses: Some(vec![exited("app", 0)]),
            ..PodStatus::default()
        };
        let s = terminated_pod_status(&pod(&[], "api"), Some(&last));
        assert_eq!(s, last);
        // A running container left in the status (status lagging behind): unknown, Failed.
        let last = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![running("app")]),
            ..PodStatus::default()
        };
        let s = terminated_pod_status(&pod(&[], "api"), Some(&last));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(
            state(&s.container_statuses.unwrap()[0]).2,
            Some(CONTAINER_STATUS_UNKNOWN)
        );
    }

    #[test]
    fn static_pods_keep_their_phase() {
        let last = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![waiting("app", "CrashLoopBackOff")]),
            ..PodStatus::default()
        };
        let s = terminated_pod_status(&pod(&[], "file"), Some(&last));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(state(&s.container_statuses.unwrap()[0]).0, "terminated");
    }

    #[test]
    fn uninitialized_pod_keeps_waiting_regular_containers_and_later_init_containers() {
        let last = PodStatus {
            phase: Some("Pending".into()),
            init_container_statuses: Some(vec![
                exited("i1", 0),
                running("i2"),
                waiting("i3", "PodInitializing"),
            ]),
            container_statuses: Some(vec![waiting("app", "PodInitializing")]),
            ..PodStatus::default()
        };
        let p = pod(&["i1", "i2", "i3"], "api");
        let s = terminated_pod_status(&p, Some(&last));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let init = s.init_container_statuses.as_ref().unwrap();
        assert_eq!(state(&init[0]), ("terminated", Some(0), None));
        assert_eq!(
            state(&init[1]),
            ("terminated", Some(137), Some(CONTAINER_STATUS_UNKNOWN))
        );
        assert_eq!(state(&init[2]), ("waiting", None, Some("PodInitializing")));
        assert_eq!(
            state(&s.container_statuses.as_ref().unwrap()[0]).0,
            "waiting",
            "the pod never initialized: its app container stays waiting"
        );

        // All init containers waiting: the first one still counts as attempted.
        let last = PodStatus {
            init_container_statuses: Some(vec![
                waiting("i1", "PodInitializing"),
                waiting("i2", "x"),
            ]),
            ..PodStatus::default()
        };
        let s = terminated_pod_status(&pod(&["i1", "i2"], "api"), Some(&last));
        let init = s.init_container_statuses.unwrap();
        assert_eq!(state(&init[0]).0, "terminated");
        assert_eq!(state(&init[1]).0, "waiting");
        assert_eq!(
            s.phase.as_deref(),
            Some("Failed"),
            "no phase at all: Failed"
        );
    }

    #[test]
    fn initialization_is_read_from_the_api_status() {
        let mut p = pod(&["i1"], "api");
        let last = PodStatus {
            phase: Some("Running".into()),
            init_container_statuses: Some(vec![exited("i1", 0)]),
            container_statuses: Some(vec![waiting("app", "CrashLoopBackOff")]),
            ..PodStatus::default()
        };
        assert_eq!(
            state(
                &terminated_pod_status(&p, Some(&last))
                    .container_statuses
                    .unwrap()[0]
            )
            .0,
            "waiting"
        );
        // The API saw the last init container complete: the pod initialized.
        p.status = Some(PodStatus {
            init_container_statuses: Some(vec![exited("i1", 0)]),
            ..PodStatus::default()
        });
        assert_eq!(
            state(
                &terminated_pod_status(&p, Some(&last))
                    .container_statuses
                    .unwrap()[0]
            )
            .0,
            "terminated"
        );
        // Without a kubelet status the API pod's status is the starting point.
        p.status = Some(PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![running("app")]),
            ..PodStatus::default()
        });
        let s = terminated_pod_status(&p, None);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(state(&s.container_statuses.unwrap()[0]).0, "terminated");
    }
}
