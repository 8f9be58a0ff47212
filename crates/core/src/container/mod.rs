//! The runtime-side view of pods (upstream `kubecontainer`): what the container runtime reports
//! about a pod's sandboxes and containers, already decoded from CRI labels/annotations.
//! Produced by `kuberuntime::runtime_status`, cached by the PLEG, consumed by
//! `compute_pod_actions` and status generation. Pure data, no I/O.

use std::collections::BTreeMap;

pub mod cache;

use chrono::{DateTime, Utc};

use crate::types::PodUid;

/// A timestamp from the runtime (CRI gives nanoseconds since the epoch; 0 means unset).
pub type Timestamp = DateTime<Utc>;

/// Converts CRI nanoseconds to a timestamp; 0 (unset) becomes `None`.
pub fn from_unix_nanos(nanos: i64) -> Option<Timestamp> {
    (nanos > 0).then(|| DateTime::from_timestamp_nanos(nanos))
}

/// A pod sandbox as reported by the runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxStatus {
    pub id: String,
    pub ready: bool,
    pub created_at: Option<Timestamp>,
    /// `metadata.attempt` of the sandbox.
    pub attempt: u32,
    /// Pod IPs: primary first.
    pub ips: Vec<String>,
    /// The primary IP exactly as the runtime reported it (`network.ip`, possibly empty);
    /// `None` when the runtime reported no network status.
    pub primary_ip: Option<String>,
    /// Whether the sandbox runs in the host network namespace.
    pub host_network: bool,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A container's state as upstream `kubecontainer.State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

/// One container as reported by the runtime, decoded from its CRI labels/annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerStatus {
    /// The runtime's container ID (without the `containerd://` scheme).
    pub id: String,
    /// The pod spec's container name (`io.kubernetes.container.name`).
    pub name: String,
    /// The sandbox this container belongs to.
    pub sandbox_id: String,
    pub state: ContainerState,
    pub created_at: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub exit_code: i32,
    /// The image as requested in the spec (`image.image` of the CRI status).
    pub image: String,
    /// The resolved image reference (digest), `image_ref` in CRI.
    pub image_ref: String,
    /// The image ID as CRI reports it (`image_id` in newer CRI, else the image ref).
    pub image_id: String,
    /// Spec hash stored in the `io.kubernetes.container.hash` annotation.
    pub hash: u64,
    /// `io.kubernetes.container.restartCount` annotation.
    pub restart_count: u32,
    /// Runtime reason, e.g. `Completed`, `Error`, `OOMKilled`.
    pub reason: String,
    /// Runtime message (e.g. the termination message).
    pub message: String,
    /// `io.kubernetes.container.terminationMessagePath` annotation, if any.
    pub termination_message_path: Option<String>,
    /// Pod-level termination grace period recorded at creation.
    pub termination_grace_period: Option<i64>,
    /// CPU and memory the runtime reports as applied (CRI `ContainerStatus.resources`);
    /// `None` when it reports none.
    pub resources: Option<ContainerResources>,
    /// The identity the container's first process runs as (CRI `ContainerStatus.user`).
    pub user: Option<ContainerUser>,
}

/// Resources the runtime applied to a container (upstream `kubecontainer.ContainerResources`),
/// converted from cgroup terms: each `None` when the runtime leaves it unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerResources {
    /// From the CFS quota and period, in millicores.
    pub cpu_limit_milli: Option<i64>,
    /// From the CPU shares, in millicores.
    pub cpu_request_milli: Option<i64>,
    pub memory_limit_bytes: Option<i64>,
}

/// The user a container runs as (upstream `kubecontainer.ContainerUser`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerUser {
    pub linux: Option<LinuxContainerUser>,
}

/// Linux identity of a container's first process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinuxContainerUser {
    pub uid: i64,
    pub gid: i64,
    pub supplemental_groups: Vec<i64>,
}

impl ContainerStatus {
    pub fn is_running(&self) -> bool {
        self.state == ContainerState::Running
    }
}

/// Everything the runtime knows about one pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodStatus {
    pub uid: PodUid,
    pub name: String,
    pub namespace: String,
    /// Pod IPs from the newest ready sandbox (primary first).
    pub ips: Vec<String>,
    /// Sandboxes, newest first.
    pub sandbox_statuses: Vec<SandboxStatus>,
    /// Containers, newest first (by creation time), all attempts.
    pub container_statuses: Vec<ContainerStatus>,
}

impl PodStatus {
    /// The newest status of the container with `name`, if any.
    pub fn find_container(&self, name: &str) -> Option<&ContainerStatus> {
        self.container_statuses.iter().find(|c| c.name == name)
    }

    /// All statuses of the container with `name`, newest first.
    pub fn containers_named<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = &'a ContainerStatus> + 'a {
        self.container_statuses
            .iter()
            .filter(move |c| c.name == name)
    }

    /// Running containers of this pod.
    pub fn running_containers(&self) -> impl Iterator<Item = &ContainerStatus> {
        self.container_statuses.iter().filter(|c| c.is_running())
    }
}

/// A pod the runtime is running, with just enough to kill it even when the spec is gone
/// (upstream `kubecontainer.Pod`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunningPod {
    pub uid: PodUid,
    pub name: String,
    pub namespace: String,
    /// Sandbox IDs (any state).
    pub sandboxes: Vec<String>,
    /// Containers (any state).
    pub containers: Vec<ContainerStatus>,
}
