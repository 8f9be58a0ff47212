//! kuberuntime::ephemeral — ephemeral containers (`kubectl debug`): owns the view of a pod's
//! `spec.ephemeralContainers` as plain containers (upstream converts `EphemeralContainerCommon`
//! to `Container` the same way) and the choice of which to start (upstream
//! `computePodActions`' `EphemeralContainersToStart`). Receives the pod and the runtime's view;
//! emits containers and indices. Pure.
//!
//! Upstream semantics: an ephemeral container is started once, when the runtime has no record
//! of it; it is never restarted (whatever the pod's restart policy) and never killed on its
//! own, only with the pod.

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};

use crate::container::PodStatus;

/// The pod's ephemeral containers, in spec order.
pub fn ephemeral_containers(pod: &Pod) -> &[EphemeralContainer] {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or_default()
}

/// The container an ephemeral container runs as (everything but `targetContainerName`).
pub fn as_container(ec: &EphemeralContainer) -> Container {
    // Destructured in full so a field added to the API type is not silently dropped.
    let EphemeralContainer {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        target_container_name: _,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    } = ec.clone();
    Container {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    }
}

/// Every ephemeral container as a plain container (status generation, config generation).
pub fn ephemeral_specs(pod: &Pod) -> Vec<Container> {
    ephemeral_containers(pod).iter().map(as_container).collect()
}

/// `targetContainerName` of an ephemeral container, if set and non-empty.
pub fn target_container_name(ec: &EphemeralContainer) -> Option<&str> {
    ec.target_container_name
        .as_deref()
        .filter(|t| !t.is_empty())
}

/// Indices into `spec.ephemeralContainers` to start now: those the runtime has no record of
/// (in any state). Nothing while the pod is being deleted. Upstream starts them even before
/// initialization completes; the caller only asks once the sandbox is kept (not recreated).
pub fn ephemeral_containers_to_start(pod: &Pod, status: &PodStatus) -> Vec<usize> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    ephemeral_containers(pod)
        .iter()
        .enumerate()
        .filter(|(_, ec)| status.find_container(&ec.name).is_none())
        .map(|(i, _)| i)
        .collect()
}
