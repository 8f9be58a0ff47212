//! Node registration and node status (upstream `kubelet_node_status.go` and
//! `pkg/kubelet/nodestatus`): owns this kubelet's Node object in the API server. Receives the
//! settings below, host facts ([`crate::host::HostInfo`]), CRI version/status/images, kubelet health checks
//! (PLEG) and node pressure; registers the Node (POST, or reconcile an existing one), computes
//! its status every `nodeStatusUpdateFrequency` with pure setters and emits a strategic-merge
//! `PATCH nodes/{name}/status` when it changed or `nodeStatusReportFrequency` elapsed. The
//! latest Node seen in the API is published on a watch channel (UID for owner references,
//! labels/taints/allocatable for admission). [`initial_node`] alone serves standalone mode.

pub mod addresses;
pub mod manager;
pub mod register;
pub mod resources;
pub mod setters;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;

pub use manager::{NodeStatusManager, PressureFn};
pub use register::{initial_node, reconcile_existing_node};
pub use resources::Reservations;
pub use setters::{NodeEvent, NodePressure, StatusInputs};

/// The version this kubelet reports as `kubeletVersion` / `kubeProxyVersion` by default: the
/// Kubernetes release rkubelet follows ([`crate::version::KUBERNETES_VERSION`]).
pub const DEFAULT_KUBELET_VERSION: &str = crate::version::KUBERNETES_VERSION;

/// The taint a node registered with `--cloud-provider=external` carries until the cloud
/// controller manager has initialised it (upstream `TaintExternalCloudProvider`).
pub const TAINT_EXTERNAL_CLOUD_PROVIDER: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The annotation carrying `--node-ip` for the cloud controller manager (upstream
/// `AnnotationAlphaProvidedIPAddr`).
pub const ANNOTATION_PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

/// Everything node registration and status need from the configuration (see the field docs
/// for the KubeletConfiguration field / flag each one comes from).
#[derive(Debug, Clone)]
pub struct NodeStatusSettings {
    /// The node name (`--hostname-override` or the host name, lowercased).
    pub node_name: String,
    /// The host name: the `kubernetes.io/hostname` label and the `Hostname` address.
    /// Upstream equals the node name unless a cloud provider renames the node.
    pub hostname: String,
    /// The `InternalIP`s: `--node-ip` (one address, or an IPv4/IPv6 pair), or the address
    /// chosen as upstream ([`addresses::choose_node_ips`]). Empty with an external cloud
    /// provider and no `--node-ip`: the Node then reports its host name alone.
    pub node_ips: Vec<IpAddr>,
    /// `--node-labels`.
    pub node_labels: BTreeMap<String, String>,
    /// `registerWithTaints`.
    pub register_with_taints: Vec<Taint>,
    /// `registerNode`: create the Node if it does not exist.
    pub register_node: bool,
    /// `--register-schedulable` (deprecated upstream flag, default true).
    pub register_schedulable: bool,
    /// `providerID`.
    pub provider_id: Option<String>,
    /// `--cloud-provider=external`: register with [`TAINT_EXTERNAL_CLOUD_PROVIDER`] and leave
    /// the addresses the cloud controller manager set.
    pub external_cloud_provider: bool,
    /// `--node-ip` as given, announced in [`ANNOTATION_PROVIDED_NODE_IP`] with an external
    /// cloud provider.
    pub provided_node_ip: Option<String>,
    /// `maxPods`.
    pub max_pods: i64,
    /// `podsPerCore` (0 = no per-core limit).
    pub pods_per_core: i64,
    /// `port`: advertised as `status.daemonEndpoints.kubeletEndpoint.Port`.
    pub port: i32,
    /// `nodeStatusMaxImages` (-1 = no cap).
    pub node_status_max_images: i32,
    /// `localStorageCapacityIsolation`: report `ephemeral-storage`.
    pub local_storage_capacity_isolation: bool,
    /// `systemReserved`, `kubeReserved`, `evictionHard`.
    pub reservations: Reservations,
    /// `nodeStatusUpdateFrequency` (default 10 s): how often the status is computed.
    pub update_frequency: Duration,
    /// `nodeStatusReportFrequency` (default 5 min): the longest time between two patches.
    pub report_frequency: Duration,
    /// `kubeletVersion` (and `kubeProxyVersion` while [`Self::report_kube_proxy_version`]).
    pub kubelet_version: String,
    /// Fill the deprecated `status.nodeInfo.kubeProxyVersion` with the kubelet's version: only
    /// with the `DisableNodeKubeProxyVersion` gate off (on by default in 1.33, which leaves the
    /// field empty and clears a value an older kubelet wrote).
    pub report_kube_proxy_version: bool,
    /// Bound on each API call (upstream's heartbeat client timeout:
    /// min(`nodeStatusUpdateFrequency`, `nodeLeaseDurationSeconds`), default 10 s). Also stops
    /// a call from sitting in the client's own retries of 503s during an outage.
    pub request_timeout: Duration,
}

impl NodeStatusSettings {
    /// Upstream defaults for a node named `node_name` (hostname = node name, no node IPs).
    pub fn new(node_name: &str) -> Self {
        Self {
            node_name: node_name.to_owned(),
            hostname: node_name.to_owned(),
            node_ips: Vec::new(),
            node_labels: BTreeMap::new(),
            register_with_taints: Vec::new(),
            register_node: true,
            register_schedulable: true,
            provider_id: None,
            external_cloud_provider: false,
            provided_node_ip: None,
            max_pods: 110,
            pods_per_core: 0,
            port: 10250,
            node_status_max_images: 50,
            local_storage_capacity_isolation: true,
            reservations: Reservations::default(),
            update_frequency: Duration::from_secs(10),
            report_frequency: Duration::from_secs(300),
            kubelet_version: DEFAULT_KUBELET_VERSION.to_owned(),
            report_kube_proxy_version: false,
            request_timeout: Duration::from_secs(10),
        }
    }
}
