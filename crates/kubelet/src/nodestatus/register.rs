//! Node registration (upstream `initialNode`, `tryRegisterWithAPIServer` and its `reconcile*`
//! helpers): owns the shape of the Node this kubelet creates. Receives the settings, host facts
//! and a status snapshot; emits the initial Node (name, default and configured labels, taints,
//! the controller-managed attach/detach annotation, a full status) — pure, also what standalone
//! admission uses — and, with a client, one registration attempt: `POST nodes`, or on
//! `AlreadyExists` a `GET` of the existing Node, reconciled and status-patched when needed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tracing::info;

use super::NodeStatusSettings;
use super::resources::{is_huge_page_resource, quantities_equal};
use super::setters::{NodeEvent, StatusInputs, set_node_status, status_mut};
use crate::apiclient::bounded;
use crate::apiclient::patch::{PatchError, node_status_patch};
use crate::host::HostInfo;

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_OS: &str = "kubernetes.io/os";
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
pub const LABEL_BETA_OS: &str = "beta.kubernetes.io/os";
pub const LABEL_BETA_ARCH: &str = "beta.kubernetes.io/arch";
pub const ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Labels the kubelet owns on an existing Node (upstream `updateDefaultLabels`).
const DEFAULT_LABELS: &[&str] = &[
    LABEL_HOSTNAME,
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    LABEL_OS,
    LABEL_ARCH,
    "node.kubernetes.io/windows-build",
    LABEL_BETA_OS,
    LABEL_BETA_ARCH,
];

/// Failures of one registration attempt (retried with back-off by the manager).
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("registering node {node}: {source}")]
    Create { node: String, source: kube::Error },
    #[error("node {node} already exists but reading it failed: {source}")]
    Get { node: String, source: kube::Error },
    #[error("reconciling existing node {node}: {source}")]
    Patch { node: String, source: kube::Error },
    #[error("reconciling existing node {node}: {source}")]
    PatchBody { node: String, source: PatchError },
}

/// Upstream `initialNode`: the Node this kubelet registers, status filled by the setters.
pub fn initial_node(
    settings: &NodeStatusSettings,
    host: &HostInfo,
    inputs: &StatusInputs,
    now: &Time,
) -> Node {
    initial_node_with_events(settings, host, inputs, now).0
}

pub(crate) fn initial_node_with_events(
    settings: &NodeStatusSettings,
    host: &HostInfo,
    inputs: &StatusInputs,
    now: &Time,
) -> (Node, Vec<NodeEvent>) {
    let mut labels = BTreeMap::from([
        (LABEL_HOSTNAME.to_owned(), settings.hostname.clone()),
        (LABEL_OS.to_owned(), host.operating_system.clone()),
        (LABEL_ARCH.to_owned(), host.architecture.clone()),
        (LABEL_BETA_OS.to_owned(), host.operating_system.clone()),
        (LABEL_BETA_ARCH.to_owned(), host.architecture.clone()),
    ]);
    for (k, v) in &settings.node_labels {
        if let Some(default) = labels.get(k)
            && default != v
        {
            info!(node = %settings.node_name, label = %k, value = %v, default = %default, "node label overrides the default");
        }
        labels.insert(k.clone(), v.clone());
    }
    let unschedulable = !settings.register_schedulable;
    let mut taints = settings.register_with_taints.clone();
    if unschedulable
        && !taints
            .iter()
            .any(|t| t.key == TAINT_UNSCHEDULABLE && t.effect == "NoSchedule")
    {
        taints.push(Taint {
            key: TAINT_UNSCHEDULABLE.to_owned(),
            effect: "NoSchedule".to_owned(),
            ..Default::default()
        });
    }
    let mut annotations = BTreeMap::from([(
        ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH.to_owned(),
        "true".to_owned(),
    )]);
    if settings.external_cloud_provider {
        // Upstream: the cloud controller manager removes the taint once it initialised the node.
        taints.push(Taint {
            key: super::TAINT_EXTERNAL_CLOUD_PROVIDER.to_owned(),
            value: Some("true".to_owned()),
            effect: "NoSchedule".to_owned(),
            ..Default::default()
        });
        if let Some(ips) = &settings.provided_node_ip {
            annotations.insert(super::ANNOTATION_PROVIDED_NODE_IP.to_owned(), ips.clone());
        }
    }
    let mut node = Node {
        metadata: ObjectMeta {
            name: Some(settings.node_name.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            unschedulable: unschedulable.then_some(true),
            taints: (!taints.is_empty()).then_some(taints),
            provider_id: settings.provider_id.clone().filter(|p| !p.is_empty()),
            ..Default::default()
        }),
        status: None,
    };
    let events = set_node_status(&mut node, settings, host, inputs, now);
    (node, events)
}

/// Upstream's reconciliation of a previously registered Node with the initial one: the
/// attach/detach annotation, the default labels, missing capacity/allocatable and the huge
/// page sizes. Returns whether `existing` changed (then its status must be patched).
pub fn reconcile_existing_node(initial: &Node, existing: &mut Node) -> bool {
    let mut changed = reconcile_attach_detach_annotation(initial, existing);
    changed |= reconcile_default_labels(initial, existing);
    changed |= reconcile_default_resources(initial, existing);
    changed |= reconcile_huge_pages(initial, existing);
    changed
}

fn reconcile_attach_detach_annotation(initial: &Node, existing: &mut Node) -> bool {
    let key = ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH;
    let want = initial
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key));
    let have = existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key));
    if want.map_or("", String::as_str) == have.map_or("", String::as_str) {
        return false;
    }
    let annotations = existing
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    match want {
        Some(v) => annotations.insert(key.to_owned(), v.clone()),
        None => annotations.remove(key),
    };
    true
}

fn reconcile_default_labels(initial: &Node, existing: &mut Node) -> bool {
    let empty = BTreeMap::new();
    let want = initial.metadata.labels.as_ref().unwrap_or(&empty);
    let labels = existing.metadata.labels.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for key in DEFAULT_LABELS {
        let Some(value) = want.get(*key) else {
            continue;
        };
        if labels.get(*key) != Some(value) {
            labels.insert((*key).to_owned(), value.clone());
            changed = true;
        }
        if value.is_empty() {
            labels.remove(*key);
        }
    }
    changed
}

/// Upstream `updateDefaultResources`: an existing Node without capacity/allocatable gets the
/// initial node's. (Upstream also zeroes extended resources when the device manager has no
/// checkpoint; this kubelet has no device plugins, so resources advertised by others stay.)
fn reconcile_default_resources(initial: &Node, existing: &mut Node) -> bool {
    let init = initial.status.clone().unwrap_or_default();
    let status = status_mut(existing);
    let mut changed = false;
    if status.capacity.is_none() {
        changed |= init.capacity.is_some();
        status.capacity = Some(init.capacity.unwrap_or_default());
    }
    if status.allocatable.is_none() {
        changed |= init.allocatable.is_some();
        status.allocatable = Some(init.allocatable.unwrap_or_default());
    }
    changed
}

/// Upstream `reconcileHugePageResource`: huge page sizes of the initial node replace changed
/// or missing ones; sizes the host no longer has are removed.
fn reconcile_huge_pages(initial: &Node, existing: &mut Node) -> bool {
    let mut changed = reconcile_default_resources(initial, existing);
    let init = initial.status.clone().unwrap_or_default();
    let (init_cap, init_alloc) = (
        init.capacity.unwrap_or_default(),
        init.allocatable.unwrap_or_default(),
    );
    let status = status_mut(existing);
    let capacity = status.capacity.get_or_insert_with(BTreeMap::new);
    let allocatable = status.allocatable.get_or_insert_with(BTreeMap::new);
    for (name, cap) in init_cap.iter().filter(|(k, _)| is_huge_page_resource(k)) {
        let supported = capacity.contains_key(name);
        if !supported || !quantities_equal(capacity.get(name), Some(cap)) {
            capacity.insert(name.clone(), cap.clone());
            changed = true;
        }
        let want_alloc = init_alloc.get(name);
        if !supported || !quantities_equal(allocatable.get(name), want_alloc) {
            match want_alloc {
                Some(a) => allocatable.insert(name.clone(), a.clone()),
                None => allocatable.remove(name),
            };
            changed = true;
        }
    }
    let stale: Vec<String> = capacity
        .keys()
        .filter(|k| is_huge_page_resource(k) && !init_cap.contains_key(*k))
        .cloned()
        .collect();
    for name in stale {
        info!(resource = %name, "removing huge page size the host no longer supports");
        capacity.remove(&name);
        allocatable.remove(&name);
        changed = true;
    }
    changed
}

/// One upstream `tryRegisterWithAPIServer`: creates `node`, or reconciles the existing Node of
/// that name. Returns the Node as the API server now has it.
pub(crate) async fn try_register(
    api: &Api<Node>,
    node: &Node,
    timeout: std::time::Duration,
) -> Result<Node, RegisterError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    match bounded(timeout, api.create(&PostParams::default(), node)).await {
        Ok(created) => {
            info!(node = %name, "registered node with the API server");
            return Ok(created);
        }
        Err(kube::Error::Api(s)) if s.is_already_exists() => {}
        Err(source) => return Err(RegisterError::Create { node: name, source }),
    }
    let existing = bounded(timeout, api.get(&name))
        .await
        .map_err(|source| RegisterError::Get {
            node: name.clone(),
            source,
        })?;
    info!(node = %name, "node was previously registered; reconciling it");
    let mut reconciled = existing.clone();
    if !reconcile_existing_node(node, &mut reconciled) {
        return Ok(existing);
    }
    let patch =
        node_status_patch(&existing, &reconciled).map_err(|source| RegisterError::PatchBody {
            node: name.clone(),
            source,
        })?;
    let params = PatchParams::default();
    bounded(
        timeout,
        api.patch_status(&name, &params, &Patch::Strategic(patch)),
    )
    .await
    .map_err(|source| RegisterError::Patch { node: name, source })
}
