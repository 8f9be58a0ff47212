//! kuberuntime::actions — `compute_pod_actions`, the kubelet's central decision (upstream
//! `computePodActions` + `computeInitContainerActions`, sidecar-aware). Receives the desired
//! `Pod`, the runtime's `PodStatus` and probe results; emits [`PodActions`]: whether to kill the
//! pod, (re)create the sandbox, which init/regular containers to start and which to kill.
//! Pure: no I/O, no clock. The side effects live in `kuberuntime::sync`.
//!
//! Ephemeral containers come from `kuberuntime::ephemeral`. Out of scope (as upstream
//! behaviour it is absent, not wrong): in-place resource resize (`computePodResizeAction`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::container::{ContainerState, ContainerStatus, PodStatus};
use crate::kuberuntime::ephemeral::ephemeral_containers_to_start;
use crate::kuberuntime::hash::hash_container;

/// Why a container is killed (upstream `containerKillReason`); chooses the grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// No specific reason (e.g. the spec changed).
    None,
    StartupProbe,
    LivenessProbe,
    FailedPostStartHook,
    Unknown,
}

impl KillReason {
    /// Upstream's string for the reason (`""` for none).
    pub fn as_str(self) -> &'static str {
        match self {
            KillReason::None => "",
            KillReason::StartupProbe => "StartupProbe",
            KillReason::LivenessProbe => "LivenessProbe",
            KillReason::FailedPostStartHook => "FailedPostStartHook",
            KillReason::Unknown => "Unknown",
        }
    }
}

/// A container to stop, keyed in [`PodActions::containers_to_kill`] by its runtime ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerToKill {
    /// The spec name of the container.
    pub name: String,
    pub reason: KillReason,
    /// Upstream's message, e.g. `Container c definition changed, will be restarted`.
    pub message: String,
}

/// What to do to bring the runtime in line with the spec (upstream `podActions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every container and the sandbox first. Also set when a fresh sandbox is created
    /// (killing an empty pod is a no-op), as upstream.
    pub kill_pod: bool,
    /// Create a new sandbox (after killing the old one); init containers must then be purged.
    pub create_sandbox: bool,
    /// The existing sandbox (the one to reuse when `!create_sandbox`, the one being replaced
    /// otherwise). `None` when there is none, or when its network namespace mode changed.
    pub sandbox_id: Option<String>,
    /// The attempt number for a new sandbox (the current one's when not creating).
    pub attempt: u32,
    /// Indices into `spec.initContainers`, to start in this order.
    pub init_containers_to_start: Vec<usize>,
    /// Indices into `spec.containers`, to start in this order.
    pub containers_to_start: Vec<usize>,
    /// Containers to stop, keyed by runtime container ID.
    pub containers_to_kill: BTreeMap<String, ContainerToKill>,
    /// Indices into `spec.ephemeralContainers`, to start (before init containers) in the kept
    /// sandbox; never set with `create_sandbox`.
    pub ephemeral_containers_to_start: Vec<usize>,
}

/// A probe's latest result (upstream `proberesults.Result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

/// The prober's results, by runtime container ID (`None`: the probe has not run yet). Only
/// consulted for containers whose spec defines the corresponding probe (readiness: by status
/// generation). The probe manager implements this; until it exists use [`NoProber`].
pub trait ProbeResults {
    fn liveness(&self, container_id: &str) -> Option<ProbeResult>;
    fn startup(&self, container_id: &str) -> Option<ProbeResult>;
    fn readiness(&self, container_id: &str) -> Option<ProbeResult>;
}

/// No prober: every configured probe counts as having succeeded, so a running container is
/// started, live and ready.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProber;

impl ProbeResults for NoProber {
    fn liveness(&self, _: &str) -> Option<ProbeResult> {
        Some(ProbeResult::Success)
    }
    fn startup(&self, _: &str) -> Option<ProbeResult> {
        Some(ProbeResult::Success)
    }
    fn readiness(&self, _: &str) -> Option<ProbeResult> {
        Some(ProbeResult::Success)
    }
}

/// Upstream `PodSandboxChanged`'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxChange {
    /// A new sandbox is needed.
    pub changed: bool,
    /// Attempt number for the new sandbox, or the current one's.
    pub attempt: u32,
    /// The newest sandbox's ID (`None` if there is none or the network mode changed).
    pub sandbox_id: Option<String>,
}

/// Upstream `PodSandboxChanged`: a new sandbox is needed when there is none, more than one is
/// ready, the newest is not ready, its host-network mode differs from the spec, or the runtime
/// reported a network status without a primary IP for a pod that is not host-network (no
/// network status at all is not a reason: the runtime may not manage the network).
pub fn pod_sandbox_changed(pod: &Pod, status: &PodStatus) -> SandboxChange {
    let Some(newest) = status.sandbox_statuses.first() else {
        return SandboxChange {
            changed: true,
            attempt: 0,
            sandbox_id: None,
        };
    };
    let ready = status.sandbox_statuses.iter().filter(|s| s.ready).count();
    let max_attempt = status
        .sandbox_statuses
        .iter()
        .map(|s| s.attempt)
        .max()
        .unwrap_or(0);
    let host_network = is_host_network(pod);
    let (changed, keep_id) = if ready > 1 || !newest.ready {
        (true, true)
    } else if newest.host_network != host_network {
        (true, false)
    } else if !host_network && newest.primary_ip.as_deref() == Some("") {
        (true, true)
    } else {
        (false, true)
    };
    SandboxChange {
        changed,
        attempt: if changed {
            max_attempt.saturating_add(1)
        } else {
            max_attempt
        },
        sandbox_id: keep_id.then(|| newest.id.clone()),
    }
}

/// `spec.hostNetwork`.
pub fn is_host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// `spec.restartPolicy`, defaulted to `Always`.
pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// Upstream `shouldRestartOnFailure`: any policy but `Never`.
pub fn should_restart_on_failure(pod: &Pod) -> bool {
    restart_policy(pod) != "Never"
}

/// A sidecar: an init container with `restartPolicy: Always`.
pub fn is_restartable_init_container(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Upstream `ShouldContainerBeRestarted`: start it if never run (or its history was GC'd), or
/// if it is created/unknown, or exited and the pod's restart policy asks for it. Never once the
/// pod is being deleted.
pub fn should_container_be_restarted(container: &Container, pod: &Pod, status: &PodStatus) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(s) = status.find_container(&container.name) else {
        return true;
    };
    match s.state {
        ContainerState::Running => false,
        ContainerState::Unknown | ContainerState::Created => true,
        ContainerState::Exited => match restart_policy(pod) {
            "Never" => false,
            "OnFailure" => s.exit_code != 0,
            _ => true,
        },
    }
}

/// Upstream `hasAnyRegularContainerCreated`: a regular container exists in the runtime in any
/// known state, which means initialization finished at some point.
pub fn has_any_regular_container_created(pod: &Pod, status: &PodStatus) -> bool {
    regular_containers(pod).any(|c| {
        status
            .find_container(&c.name)
            .is_some_and(|s| s.state != ContainerState::Unknown)
    })
}

/// Upstream `isInitContainerFailed`: OOM-killed, exited non-zero, or unknown.
pub fn is_init_container_failed(s: &ContainerStatus) -> bool {
    s.reason == "OOMKilled"
        || (s.state == ContainerState::Exited && s.exit_code != 0)
        || s.state == ContainerState::Unknown
}

fn regular_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| s.containers.iter())
}

fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
}

fn container_succeeded(c: &Container, status: &PodStatus) -> bool {
    status
        .find_container(&c.name)
        .is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == 0)
}

fn state_str(state: ContainerState) -> &'static str {
    match state {
        ContainerState::Created => "created",
        ContainerState::Running => "running",
        ContainerState::Exited => "exited",
        ContainerState::Unknown => "unknown",
    }
}

/// Decides the pod's actions with no prober (every probe counts as passed).
pub fn compute_pod_actions(pod: &Pod, status: &PodStatus) -> PodActions {
    compute_pod_actions_with_probes(pod, status, &NoProber)
}

/// Upstream `computePodActions` with liveness/startup results from `probes`.
pub fn compute_pod_actions_with_probes(
    pod: &Pod,
    status: &PodStatus,
    probes: &dyn ProbeResults,
) -> PodActions {
    let sandbox = pod_sandbox_changed(pod, status);
    let mut changes = PodActions {
        kill_pod: sandbox.changed,
        create_sandbox: sandbox.changed,
        sandbox_id: sandbox.sandbox_id,
        attempt: sandbox.attempt,
        ..PodActions::default()
    };

    // A new sandbox means everything restarts from the beginning.
    if sandbox.changed {
        if !should_restart_on_failure(pod)
            && sandbox.attempt != 0
            && !status.container_statuses.is_empty()
        {
            // A Never pod that already ran: don't bring it back, just clean up.
            changes.create_sandbox = false;
            return changes;
        }
        let on_failure = restart_policy(pod) == "OnFailure";
        let to_start: Vec<usize> = regular_containers(pod)
            .enumerate()
            .filter(|(_, c)| !(on_failure && container_succeeded(c, status)))
            .map(|(i, _)| i)
            .collect();
        if to_start.is_empty() && has_any_regular_container_created(pod, status) {
            // Initialized before and nothing left to run: no new sandbox.
            changes.create_sandbox = false;
            return changes;
        }
        if !init_containers(pod).is_empty() {
            changes.init_containers_to_start = vec![0];
            return changes;
        }
        changes.containers_to_start = to_start;
        return changes;
    }

    // Ephemeral containers may start before initialization completes (upstream order).
    changes.ephemeral_containers_to_start = ephemeral_containers_to_start(pod, status);

    let initialized = compute_init_container_actions(pod, status, probes, &mut changes);
    if changes.kill_pod || !initialized {
        return changes;
    }

    let restart_on_failure = should_restart_on_failure(pod);
    let mut keep = 0usize;
    for (idx, container) in regular_containers(pod).enumerate() {
        let cstatus = status.find_container(&container.name);
        let running = cstatus.filter(|s| s.state == ContainerState::Running);
        let Some(running) = running else {
            if should_container_be_restarted(container, pod, status) {
                changes.containers_to_start.push(idx);
                if let Some(s) = cstatus.filter(|s| s.state == ContainerState::Unknown) {
                    // Not knowing whether it runs, stop it before starting a new instance.
                    changes.containers_to_kill.insert(
                        s.id.clone(),
                        ContainerToKill {
                            name: s.name.clone(),
                            reason: KillReason::Unknown,
                            message: format!(
                                "Container is in {:?} state, try killing it before restart",
                                state_str(s.state)
                            ),
                        },
                    );
                }
            }
            continue;
        };

        let (mut message, reason, restart) = if running.hash != hash_container(container) {
            // A changed spec restarts regardless of the restart policy.
            (
                format!("Container {} definition changed", container.name),
                KillReason::None,
                true,
            )
        } else if container.liveness_probe.is_some()
            && probes.liveness(&running.id) == Some(ProbeResult::Failure)
        {
            (
                format!("Container {} failed liveness probe", container.name),
                KillReason::LivenessProbe,
                restart_on_failure,
            )
        } else if container.startup_probe.is_some()
            && probes.startup(&running.id) == Some(ProbeResult::Failure)
        {
            (
                format!("Container {} failed startup probe", container.name),
                KillReason::StartupProbe,
                restart_on_failure,
            )
        } else {
            keep += 1;
            continue;
        };
        if restart {
            message.push_str(", will be restarted");
            changes.containers_to_start.push(idx);
        }
        changes.containers_to_kill.insert(
            running.id.clone(),
            ContainerToKill {
                name: running.name.clone(),
                reason,
                message,
            },
        );
    }

    if keep == 0 && changes.containers_to_start.is_empty() {
        changes.kill_pod = true;
        // Sidecars must not keep a finished pod alive.
        changes.init_containers_to_start.clear();
    }
    changes
}

/// Upstream `computeInitContainerActions`: starts the first init container not yet run, keeps
/// sidecars running (restarting exited ones, killing those failing probes or whose spec
/// changed) and stops the pod when a non-restartable init container failed under `Never`.
/// Returns whether the pod is initialized.
fn compute_init_container_actions(
    pod: &Pod,
    status: &PodStatus,
    probes: &dyn ProbeResults,
    changes: &mut PodActions,
) -> bool {
    let inits = init_containers(pod);
    if inits.is_empty() {
        return true;
    }
    // Only init containers of the sandbox in use count: a new sandbox runs every init
    // container again, and the old ones' `Exited 0` must not count as done. `sync` purges
    // them (upstream `purgeInitContainers`); this also holds when a removal failed. An empty
    // sandbox ID means the runtime did not say, and counts as the current one.
    let current = changes.sandbox_id.clone().unwrap_or_default();
    let find_init = |name: &str| {
        status
            .find_container(name)
            .filter(|s| s.sandbox_id.is_empty() || s.sandbox_id == current)
    };
    // A created or running regular container means initialization happened before, even if
    // the init containers have since been removed from the runtime. (Exited ones don't count:
    // they may belong to a previous sandbox, e.g. after a node reboot.)
    let mut initialized = regular_containers(pod).any(|c| {
        status
            .find_container(&c.name)
            .is_some_and(|s| matches!(s.state, ContainerState::Created | ContainerState::Running))
    });
    let mut previously_initialized = initialized;
    let restart_on_failure = should_restart_on_failure(pod);
    let last = inits.len() - 1;
    let mut to_start = Vec::new();

    // Walk backwards: completed init containers may have been garbage-collected, so the last
    // one with a status tells how far initialization got.
    for i in (0..inits.len()).rev() {
        let c = &inits[i];
        let sidecar = is_restartable_init_container(c);
        let Some(s) = find_init(&c.name) else {
            if previously_initialized && sidecar {
                to_start.push(i);
            }
            continue;
        };
        if previously_initialized && !sidecar {
            continue;
        }
        let kill = |changes: &mut PodActions, reason, message: String| {
            changes.containers_to_kill.insert(
                s.id.clone(),
                ContainerToKill {
                    name: c.name.clone(),
                    reason,
                    message,
                },
            );
        };
        match s.state {
            // Create and start are one step; stuck in created means the start failed.
            ContainerState::Created => to_start.push(i),
            ContainerState::Running if sidecar => 'sidecar: {
                if c.startup_probe.is_some() {
                    match probes.startup(&s.id) {
                        Some(ProbeResult::Success) => {}
                        Some(ProbeResult::Failure) => {
                            kill(
                                changes,
                                KillReason::StartupProbe,
                                format!("Init container {} failed startup probe", c.name),
                            );
                            to_start.push(i);
                            break 'sidecar;
                        }
                        // Not run yet or inconclusive: wait.
                        None | Some(ProbeResult::Unknown) => break 'sidecar,
                    }
                }
                if i == last {
                    initialized = true;
                } else if !previously_initialized {
                    to_start.push(i + 1);
                }
                if s.hash != hash_container(c) {
                    kill(
                        changes,
                        KillReason::None,
                        format!("Init container {} definition changed", c.name),
                    );
                    to_start.push(i);
                    break 'sidecar;
                }
                if c.liveness_probe.is_some() {
                    match probes.liveness(&s.id) {
                        None => break 'sidecar,
                        Some(ProbeResult::Failure) => {
                            kill(
                                changes,
                                KillReason::LivenessProbe,
                                format!("Init container {} failed liveness probe", c.name),
                            );
                            to_start.push(i);
                        }
                        Some(_) => {}
                    }
                }
            }
            // A regular init container still running: wait for it.
            ContainerState::Running => {}
            ContainerState::Exited => {
                if sidecar {
                    to_start.push(i);
                } else if is_init_container_failed(s) {
                    if !restart_on_failure {
                        changes.kill_pod = true;
                        changes.init_containers_to_start.clear();
                        return false;
                    }
                    to_start.push(i);
                } else if i == last {
                    initialized = true;
                } else {
                    to_start.push(i + 1);
                }
            }
            ContainerState::Unknown => {
                if !sidecar && !restart_on_failure {
                    changes.kill_pod = true;
                    changes.init_containers_to_start.clear();
                    return false;
                }
                kill(
                    changes,
                    KillReason::Unknown,
                    format!(
                        "Init container is in {:?} state, try killing it before restart",
                        state_str(s.state)
                    ),
                );
                to_start.push(i);
            }
        }
        previously_initialized = true;
    }

    if !previously_initialized {
        to_start.push(0);
    }
    to_start.reverse();
    changes.init_containers_to_start.extend(to_start);
    initialized
}

#[cfg(test)]
mod tests;
