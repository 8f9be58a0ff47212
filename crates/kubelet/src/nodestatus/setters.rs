//! Node status setters (upstream `pkg/kubelet/nodestatus/setters.go`): small pure functions
//! over `&mut Node`, applied in upstream order by [`set_node_status`]. Receives the settings,
//! host facts and one [`StatusInputs`] snapshot (CRI version/images/handlers/features,
//! readiness errors, pressure) plus the current time; emits the node's addresses, nodeInfo,
//! daemon endpoints, images, runtime handlers, features and conditions, and the node events
//! upstream records on condition transitions. Owns no state.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeFeatures, NodeRuntimeHandler, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::warn;

use super::NodeStatusSettings;
use super::resources::{self, CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use crate::events::EventType;
use crate::host::HostInfo;

/// Upstream `MaxNamesPerImageInNodeStatus`.
pub const MAX_NAMES_PER_IMAGE: usize = 5;

/// A node event to record (upstream `recordNodeStatusEvent` and friends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    pub event_type: EventType,
    pub reason: String,
    pub message: String,
}

/// Whether the node is under memory, disk or PID pressure (the eviction manager's verdict;
/// all false until there is one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodePressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

/// One snapshot of the runtime-side inputs of a status computation.
#[derive(Debug, Clone, Default)]
pub struct StatusInputs {
    /// CRI `Version.runtime_name` (`containerd`).
    pub runtime_name: String,
    /// CRI `Version.runtime_version`; `None` when the call failed (reported as `Unknown`).
    pub runtime_version: Option<String>,
    /// CRI `ListImages` (empty when the call failed, as upstream clears the list).
    pub images: Vec<rkubelet_cri::api::Image>,
    /// CRI `Status.runtime_handlers`, converted.
    pub runtime_handlers: Vec<NodeRuntimeHandler>,
    /// CRI `Status.features.supplemental_groups_policy`; `None` if the runtime reports none.
    pub supplemental_groups_policy: Option<bool>,
    /// Why the node is not ready, in upstream order (runtime, PLEG/health checks, network);
    /// empty when it is.
    pub not_ready: Vec<String>,
    pub pressure: NodePressure,
}

/// Setter failures; the other setters still run and the node keeps the old value.
#[derive(Debug, thiserror::Error)]
pub enum SetterError {
    #[error(
        "can't get ip address of node {node}: no node IP configured and hostname {hostname:?} is not an IP"
    )]
    NoNodeIp { node: String, hostname: String },
}

pub(crate) fn status_mut(node: &mut Node) -> &mut NodeStatus {
    node.status.get_or_insert_with(NodeStatus::default)
}

pub(crate) fn node_info_mut(node: &mut Node) -> &mut NodeSystemInfo {
    status_mut(node)
        .node_info
        .get_or_insert_with(NodeSystemInfo::default)
}

/// Upstream `NodeAddress` without a cloud provider: the configured node IPs (primary, then
/// the secondary of a dual-stack pair), else the hostname if it is an IP, as `InternalIP`,
/// then the `Hostname`.
pub fn set_addresses(
    node: &mut Node,
    node_ips: &[IpAddr],
    hostname: &str,
) -> Result<(), SetterError> {
    let ips: Vec<IpAddr> = if node_ips.is_empty() {
        hostname.parse::<IpAddr>().into_iter().collect()
    } else {
        node_ips.iter().take(2).copied().collect()
    };
    if ips.is_empty() {
        return Err(SetterError::NoNodeIp {
            node: node.metadata.name.clone().unwrap_or_default(),
            hostname: hostname.to_owned(),
        });
    }
    let mut addresses: Vec<NodeAddress> = ips
        .iter()
        .map(|ip| NodeAddress {
            type_: "InternalIP".to_owned(),
            address: ip.to_string(),
        })
        .collect();
    addresses.push(NodeAddress {
        type_: "Hostname".to_owned(),
        address: hostname.to_owned(),
    });
    status_mut(node).addresses = Some(addresses);
    Ok(())
}

/// Upstream `VersionInfo`: kernel, OS image, `<runtime>://<version>` (`Unknown` when the
/// runtime did not answer), kubelet version and the deprecated kube-proxy version: the kubelet's
/// own with the `DisableNodeKubeProxyVersion` gate off, else cleared (`report_kube_proxy_version`).
pub fn set_version_info(
    node: &mut Node,
    host: &HostInfo,
    inputs: &StatusInputs,
    kubelet_version: &str,
    report_kube_proxy_version: bool,
) {
    let info = node_info_mut(node);
    info.kernel_version = host.kernel_version.clone();
    info.os_image = host.os_image.clone();
    info.container_runtime_version = format!(
        "{}://{}",
        inputs.runtime_name,
        inputs.runtime_version.as_deref().unwrap_or("Unknown")
    );
    info.kubelet_version = kubelet_version.to_owned();
    info.kube_proxy_version = if report_kube_proxy_version {
        kubelet_version.to_owned()
    } else {
        String::new()
    };
}

/// Upstream `GoRuntime`: operating system and architecture in Go naming.
pub fn set_go_runtime(node: &mut Node, host: &HostInfo) {
    let info = node_info_mut(node);
    info.operating_system = host.operating_system.clone();
    info.architecture = host.architecture.clone();
}

/// Upstream `DaemonEndpoints`: the kubelet's API port.
pub fn set_daemon_endpoints(node: &mut Node, port: i32) {
    status_mut(node).daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint { port }),
    });
}

/// Upstream `Images`: images by size (largest first, then ID descending), at most
/// `max_images` of them (-1 = all), each named by up to 5 of its digests then tags.
pub fn set_images(node: &mut Node, max_images: i32, images: &[rkubelet_cri::api::Image]) {
    let mut sorted: Vec<&rkubelet_cri::api::Image> = images.iter().collect();
    sorted.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| b.id.cmp(&a.id)));
    if let Ok(max) = usize::try_from(max_images) {
        sorted.truncate(max);
    }
    let list: Vec<ContainerImage> = sorted
        .into_iter()
        .map(|img| ContainerImage {
            names: Some(
                img.repo_digests
                    .iter()
                    .chain(&img.repo_tags)
                    .take(MAX_NAMES_PER_IMAGE)
                    .cloned()
                    .collect(),
            ),
            size_bytes: Some(i64::try_from(img.size).unwrap_or(i64::MAX)),
        })
        .collect();
    status_mut(node).images = (!list.is_empty()).then_some(list);
}

/// Upstream `RuntimeHandlers`.
pub fn set_runtime_handlers(node: &mut Node, handlers: &[NodeRuntimeHandler]) {
    status_mut(node).runtime_handlers = (!handlers.is_empty()).then(|| handlers.to_vec());
}

/// Upstream `NodeFeatures`: set once the runtime reports its features.
pub fn set_features(node: &mut Node, supplemental_groups_policy: Option<bool>) {
    if let Some(sgp) = supplemental_groups_policy {
        status_mut(node).features = Some(NodeFeatures {
            supplemental_groups_policy: Some(sgp),
        });
    }
}

/// The three pressure conditions, in upstream order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PressureKind {
    Memory,
    Disk,
    Pid,
}

impl PressureKind {
    /// (condition type, (reason, message, event) under pressure, (…) without).
    #[allow(clippy::type_complexity)]
    fn texts(
        self,
    ) -> (
        &'static str,
        [(&'static str, &'static str, &'static str); 2],
    ) {
        match self {
            PressureKind::Memory => (
                "MemoryPressure",
                [
                    (
                        "KubeletHasInsufficientMemory",
                        "kubelet has insufficient memory available",
                        "NodeHasInsufficientMemory",
                    ),
                    (
                        "KubeletHasSufficientMemory",
                        "kubelet has sufficient memory available",
                        "NodeHasSufficientMemory",
                    ),
                ],
            ),
            PressureKind::Disk => (
                "DiskPressure",
                [
                    (
                        "KubeletHasDiskPressure",
                        "kubelet has disk pressure",
                        "NodeHasDiskPressure",
                    ),
                    (
                        "KubeletHasNoDiskPressure",
                        "kubelet has no disk pressure",
                        "NodeHasNoDiskPressure",
                    ),
                ],
            ),
            PressureKind::Pid => (
                "PIDPressure",
                [
                    (
                        "KubeletHasInsufficientPID",
                        "kubelet has insufficient PID available",
                        "NodeHasInsufficientPID",
                    ),
                    (
                        "KubeletHasSufficientPID",
                        "kubelet has sufficient PID available",
                        "NodeHasSufficientPID",
                    ),
                ],
            ),
        }
    }
}

fn status_event(node: &Node, reason: &str) -> NodeEvent {
    NodeEvent {
        event_type: EventType::Normal,
        reason: reason.to_owned(),
        message: format!(
            "Node {} status is now: {reason}",
            node.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

/// Upstream `MemoryPressureCondition` / `DiskPressureCondition` / `PIDPressureCondition`:
/// heartbeat every time; status, reason, message and transition time only on a change.
pub fn set_pressure_condition(
    node: &mut Node,
    kind: PressureKind,
    under_pressure: bool,
    now: &Time,
) -> Option<NodeEvent> {
    let (type_, texts) = kind.texts();
    let (want, (reason, message, event)) = if under_pressure {
        ("True", texts[0])
    } else {
        ("False", texts[1])
    };
    let conditions = status_mut(node).conditions.get_or_insert_with(Vec::new);
    let idx = match conditions.iter().position(|c| c.type_ == type_) {
        Some(i) => i,
        None => {
            conditions.push(NodeCondition {
                type_: type_.to_owned(),
                status: "Unknown".to_owned(),
                ..Default::default()
            });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[idx];
    c.last_heartbeat_time = Some(now.clone());
    if c.status == want {
        return None;
    }
    c.status = want.to_owned();
    c.reason = Some(reason.to_owned());
    c.message = Some(message.to_owned());
    c.last_transition_time = Some(now.clone());
    Some(status_event(node, event))
}

/// Go's `utilerrors.NewAggregate(errs).Error()`: nothing for no errors, the message for one,
/// `[a, b]` for several (duplicates dropped).
pub fn aggregate_message(errs: &[String]) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.len() {
        0 => None,
        1 => Some(seen[0].to_owned()),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

/// Upstream `ReadyCondition`: `KubeletReady` / `kubelet is posting ready status`, or
/// `KubeletNotReady` with the aggregated runtime, health and missing-capacity errors. Reason
/// and message are refreshed each time; the transition time only moves when the status flips.
pub fn set_ready_condition(
    node: &mut Node,
    now: &Time,
    not_ready: &[String],
    local_storage_capacity_isolation: bool,
) -> Option<NodeEvent> {
    let mut errs = not_ready.to_vec();
    let capacity = node.status.as_ref().and_then(|s| s.capacity.as_ref());
    let mut required = vec![CPU, MEMORY, PODS];
    if local_storage_capacity_isolation {
        required.push(EPHEMERAL_STORAGE);
    }
    let missing: Vec<&str> = required
        .into_iter()
        .filter(|r| !capacity.is_some_and(|c| c.contains_key(*r)))
        .collect();
    if !missing.is_empty() {
        errs.push(format!(
            "missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    let (status, reason, message) = match aggregate_message(&errs) {
        None => (
            "True",
            "KubeletReady",
            "kubelet is posting ready status".to_owned(),
        ),
        Some(m) => ("False", "KubeletNotReady", m),
    };
    let mut cond = NodeCondition {
        type_: "Ready".to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    };
    let conditions = status_mut(node).conditions.get_or_insert_with(Vec::new);
    let Some(old) = conditions.iter_mut().find(|c| c.type_ == "Ready") else {
        conditions.push(cond);
        return None;
    };
    let flipped = old.status != cond.status;
    if !flipped {
        cond.last_transition_time = old.last_transition_time.clone();
    }
    *old = cond;
    flipped.then(|| {
        if status == "True" {
            status_event(node, "NodeReady")
        } else {
            status_event(node, "NodeNotReady")
        }
    })
}

/// Every setter in upstream order (addresses, machine info, version info, daemon endpoints,
/// images, Go runtime, runtime handlers, features, memory/disk/PID pressure, Ready). Setter
/// errors are logged and leave the old value, as upstream. Returns the events to record.
pub fn set_node_status(
    node: &mut Node,
    settings: &NodeStatusSettings,
    host: &HostInfo,
    inputs: &StatusInputs,
    now: &Time,
) -> Vec<NodeEvent> {
    let mut events = Vec::new();
    // With an external cloud provider, addresses it already set take precedence (upstream
    // returns early from its NodeAddress setter).
    let cloud_set = settings.external_cloud_provider
        && node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .is_some_and(|a| !a.is_empty());
    let waits_for_cloud = settings.external_cloud_provider && settings.node_ips.is_empty();
    if !cloud_set && waits_for_cloud {
        // No node IP given: the cloud controller manager will set them (upstream reports the
        // host name alone meanwhile).
        status_mut(node).addresses = Some(vec![NodeAddress {
            type_: "Hostname".to_owned(),
            address: settings.hostname.clone(),
        }]);
    } else if !cloud_set && let Err(e) = set_addresses(node, &settings.node_ips, &settings.hostname)
    {
        warn!(node = %settings.node_name, error = %e, "node addresses not updated");
    }
    events.extend(resources::set_machine_info(node, settings, host));
    set_version_info(
        node,
        host,
        inputs,
        &settings.kubelet_version,
        settings.report_kube_proxy_version,
    );
    set_daemon_endpoints(node, settings.port);
    set_images(node, settings.node_status_max_images, &inputs.images);
    set_go_runtime(node, host);
    set_runtime_handlers(node, &inputs.runtime_handlers);
    set_features(node, inputs.supplemental_groups_policy);
    let p = inputs.pressure;
    for (kind, under) in [
        (PressureKind::Memory, p.memory),
        (PressureKind::Disk, p.disk),
        (PressureKind::Pid, p.pid),
    ] {
        events.extend(set_pressure_condition(node, kind, under, now));
    }
    events.extend(set_ready_condition(
        node,
        now,
        &inputs.not_ready,
        settings.local_storage_capacity_isolation,
    ));
    events
}

/// Upstream `nodeStatusHasChanged`: anything but the conditions' heartbeat times differs
/// (conditions compared by type, quantities by value).
pub fn node_status_has_changed(old: Option<&NodeStatus>, new: Option<&NodeStatus>) -> bool {
    let (old, new) = match (old, new) {
        (None, None) => return false,
        (Some(o), Some(n)) => (o, n),
        _ => return true,
    };
    let conditions = |s: &NodeStatus| {
        let mut c = s.conditions.clone().unwrap_or_default();
        c.sort_by(|a, b| a.type_.cmp(&b.type_));
        for x in &mut c {
            x.last_heartbeat_time = None;
        }
        c
    };
    if conditions(old) != conditions(new) {
        return true;
    }
    if !resources::resource_lists_equal(old.capacity.as_ref(), new.capacity.as_ref())
        || !resources::resource_lists_equal(old.allocatable.as_ref(), new.allocatable.as_ref())
    {
        return true;
    }
    let rest = |s: &NodeStatus| NodeStatus {
        conditions: None,
        capacity: None,
        allocatable: None,
        ..s.clone()
    };
    rest(old) != rest(new)
}
