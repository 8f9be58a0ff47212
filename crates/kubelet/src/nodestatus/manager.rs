//! The node status loop (upstream `syncNodeStatus`, `registerWithAPIServer`,
//! `updateNodeStatus`/`tryUpdateNodeStatus` and the runtime-state half of `updateRuntimeUp`):
//! owns the registration retries, the runtime readiness state, the last report time and the
//! published Node. Receives a `kube::Client` (and for status reads and patches the heartbeat
//! client, `apiclient::heartbeat_client`), the CRI services, settings, host facts, named
//! health checks (PLEG), an optional pressure input and an event recorder; emits `POST nodes`,
//! `GET nodes/{name}`, strategic-merge `PATCH nodes/{name}/status`, `UpdateRuntimeConfig` when
//! the node's pod CIDR changes, node events, and the latest API Node on a watch channel.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeRuntimeHandler, NodeRuntimeHandlerFeatures};
use kube::Api;
use kube::api::{GetParams, Patch, PatchParams};
use rkubelet_cri::api as cri;
use rkubelet_cri::{ImageService, RuntimeService};
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::NodeStatusSettings;
use super::register::{LABEL_ARCH, LABEL_OS, initial_node_with_events, try_register};
use super::setters::{
    NodeEvent, NodePressure, StatusInputs, node_status_has_changed, set_node_status,
};
use crate::apiclient::RetryBackoff;
use crate::apiclient::patch::{PatchError, node_status_patch};
use crate::apiclient::{api_time, bounded};
use crate::clock::Clock;
use crate::events::{EventRecorder, EventType, LoggingRecorder};
use crate::health::HealthCheck;
use crate::host::HostInfo;

/// Upstream `nodeStatusUpdateRetry`: attempts per status update before waiting a period.
pub const NODE_STATUS_UPDATE_RETRY: usize = 5;
/// Upstream `baseRuntimeSyncThreshold` (`maxWaitForContainerRuntime`, 30 s): without a
/// successful runtime status check for this long the runtime is reported down.
pub const RUNTIME_SYNC_THRESHOLD: Duration = Duration::from_secs(30);
/// Registration back-off: 100 ms doubling to 7 s, as upstream `registerWithAPIServer`.
const REGISTER_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(7));

/// Whether the node is under pressure (the eviction manager's verdict).
pub type PressureFn = Arc<dyn Fn() -> NodePressure + Send + Sync>;

/// A further reason for the node not to be ready, checked after the runtime and network ones
/// (upstream `nodeShutdownManagerErrorsFunc`: `node is shutting down`).
pub type NotReadyFn = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Failures of one status update attempt.
#[derive(Debug, thiserror::Error)]
pub enum NodeStatusError {
    #[error("error getting node {node}: {source}")]
    Get { node: String, source: kube::Error },
    #[error("patching status of node {node}: {source}")]
    Patch { node: String, source: kube::Error },
    #[error("building the status patch of node {node}: {source}")]
    PatchBody { node: String, source: PatchError },
}

/// Runtime readiness as upstream's `runtimeState` tracks it from CRI `Status`.
#[derive(Debug, Default)]
pub(crate) struct RuntimeState {
    last_sync: Option<Instant>,
    runtime_error: Option<String>,
    network_error: Option<String>,
    handlers: Vec<NodeRuntimeHandler>,
    features: Option<bool>,
}

fn describe_condition(c: Option<&cri::RuntimeCondition>) -> String {
    match c {
        None => "<nil>".to_owned(),
        Some(c) => format!(
            "{}={} reason:{} message:{}",
            c.r#type, c.status, c.reason, c.message
        ),
    }
}

impl RuntimeState {
    /// Takes in one successful CRI `Status` answer at `now`.
    pub(crate) fn observe(&mut self, resp: &cri::StatusResponse, now: Instant) {
        let conditions = resp.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
        let find = |t: &str| conditions.iter().find(|c| c.r#type == t);
        let network = find("NetworkReady");
        self.network_error = (!network.is_some_and(|c| c.status)).then(|| {
            format!(
                "container runtime network not ready: {}",
                describe_condition(network)
            )
        });
        let runtime = find("RuntimeReady");
        if !runtime.is_some_and(|c| c.status) {
            self.runtime_error = Some(format!(
                "container runtime not ready: {}",
                describe_condition(runtime)
            ));
            return;
        }
        self.runtime_error = None;
        self.handlers = resp
            .runtime_handlers
            .iter()
            .map(|h| {
                let f = h.features.unwrap_or_default();
                NodeRuntimeHandler {
                    name: Some(h.name.clone()),
                    features: Some(NodeRuntimeHandlerFeatures {
                        recursive_read_only_mounts: Some(f.recursive_read_only_mounts),
                        user_namespaces: Some(f.user_namespaces),
                    }),
                }
            })
            .collect();
        self.features = resp.features.map(|f| f.supplemental_groups_policy);
        self.last_sync = Some(now);
    }

    /// The runtime handlers of the last ready `Status`.
    pub(crate) fn handlers(&self) -> &[NodeRuntimeHandler] {
        &self.handlers
    }

    /// Upstream `runtimeErrors` + `networkErrors`, flattened in that order.
    pub(crate) fn not_ready(&self, now: Instant, health: &[(String, HealthCheck)]) -> Vec<String> {
        let mut errs = Vec::new();
        match self.last_sync {
            None => {
                errs.push("container runtime status check may not have completed yet".to_owned())
            }
            Some(t) if now >= t + RUNTIME_SYNC_THRESHOLD => {
                errs.push("container runtime is down".to_owned())
            }
            Some(_) => {}
        }
        for (name, check) in health {
            if let Err(e) = check() {
                errs.push(format!("{name} is not healthy: {e}"));
            }
        }
        errs.extend(self.runtime_error.clone());
        errs.extend(self.network_error.clone());
        errs
    }
}

/// Owner of this node's registration and status in the API server.
pub struct NodeStatusManager {
    /// Registration (upstream's `kubeClient`).
    api: Api<Node>,
    /// Status reads and patches (upstream's `heartbeatClient`).
    heartbeat: Api<Node>,
    runtime: Arc<dyn RuntimeService>,
    images: Arc<dyn ImageService>,
    settings: NodeStatusSettings,
    host: HostInfo,
    health: Vec<(String, HealthCheck)>,
    pressure: PressureFn,
    not_ready: Option<NotReadyFn>,
    sync_now: Arc<Notify>,
    events: Arc<dyn EventRecorder>,
    clock: Clock,
    node_tx: watch::Sender<Option<Arc<Node>>>,
    runtime_state: RuntimeState,
    runtime_name: String,
    last_report: Option<Instant>,
    pod_cidr: String,
    last_unschedulable: bool,
}

impl NodeStatusManager {
    /// `health`: named kubelet health checks (upstream adds `("PLEG", …)`); a failing one
    /// makes the node NotReady with `<name> is not healthy: <error>`. The receiver holds the
    /// latest Node seen in the API (`None` until registration or the first read succeeds).
    pub fn new(
        client: kube::Client,
        runtime: Arc<dyn RuntimeService>,
        images: Arc<dyn ImageService>,
        settings: NodeStatusSettings,
        host: HostInfo,
        health: Vec<(String, HealthCheck)>,
    ) -> (Self, watch::Receiver<Option<Arc<Node>>>) {
        let (node_tx, node_rx) = watch::channel(None);
        let last_unschedulable = !settings.register_schedulable;
        let manager = Self {
            api: Api::all(client.clone()),
            heartbeat: Api::all(client),
            runtime,
            images,
            settings,
            host,
            health,
            pressure: Arc::new(NodePressure::default),
            not_ready: None,
            sync_now: Arc::new(Notify::new()),
            events: Arc::new(LoggingRecorder),
            clock: Clock::new(),
            node_tx,
            runtime_state: RuntimeState::default(),
            runtime_name: "unknown".to_owned(),
            last_report: None,
            pod_cidr: String::new(),
            last_unschedulable,
        };
        (manager, node_rx)
    }

    /// Reads and patches the status through `client` (upstream's heartbeat client, see
    /// [`crate::apiclient::heartbeat_client`]); registration keeps the main client.
    pub fn with_heartbeat_client(mut self, client: kube::Client) -> Self {
        self.heartbeat = Api::all(client);
        self
    }

    /// Records node events (NodeReady, NodeHasSufficientMemory, NodeRebooted, …) here
    /// instead of only logging them.
    pub fn with_events(mut self, events: Arc<dyn EventRecorder>) -> Self {
        self.events = events;
        self
    }

    /// Reports memory/disk/PID pressure from this input (default: never under pressure).
    pub fn with_pressure(mut self, pressure: PressureFn) -> Self {
        self.pressure = pressure;
        self
    }

    /// Makes the node NotReady with `f`'s reason while it has one (the node shutdown manager).
    pub fn with_not_ready(mut self, f: NotReadyFn) -> Self {
        self.not_ready = Some(f);
        self
    }

    /// Updates the status at once whenever `sync_now` is notified (upstream's
    /// `syncNodeStatus` calls from the node shutdown manager), besides every period.
    pub fn with_sync_trigger(mut self, sync_now: Arc<Notify>) -> Self {
        self.sync_now = sync_now;
        self
    }

    /// Registers the node (if `register_node`), then updates its status every
    /// `update_frequency` until `cancel` fires. Never gives up on API errors.
    pub async fn run(mut self, cancel: CancellationToken) {
        let node = self.settings.node_name.clone();
        info!(%node, period = ?self.settings.update_frequency, "node status manager started");
        if self.settings.register_node {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.register() => {}
            }
        }
        let mut ticker = tokio::time::interval(self.settings.update_frequency);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let sync_now = self.sync_now.clone();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = ticker.tick() => {}
                _ = sync_now.notified() => {}
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.update_node_status() => {}
            }
        }
        info!(%node, "node status manager stopped");
    }

    /// Upstream `registerWithAPIServer`: retries until the Node exists in the API.
    async fn register(&mut self) {
        let mut backoff = RetryBackoff::new(REGISTER_BACKOFF.0, REGISTER_BACKOFF.1);
        loop {
            let inputs = self.gather_inputs().await;
            let now = api_time(self.clock.now());
            let (node, events) =
                initial_node_with_events(&self.settings, &self.host, &inputs, &now);
            info!(node = %self.settings.node_name, "attempting to register node");
            match try_register(&self.api, &node, self.settings.request_timeout).await {
                Ok(registered) => {
                    self.record(events);
                    self.last_report = Some(Instant::now());
                    self.publish(registered);
                    return;
                }
                Err(e) => {
                    let delay = backoff.next_delay();
                    warn!(node = %self.settings.node_name, error = %e, retry_in = ?delay, "unable to register node with the API server");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Upstream `updateNodeStatus`: up to [`NODE_STATUS_UPDATE_RETRY`] attempts.
    async fn update_node_status(&mut self) {
        let inputs = self.gather_inputs().await;
        for attempt in 0..NODE_STATUS_UPDATE_RETRY {
            match self.try_update_node_status(attempt, &inputs).await {
                Ok(()) => return,
                Err(e) => {
                    warn!(node = %self.settings.node_name, attempt, error = %e, "error updating node status, will retry")
                }
            }
        }
        error!(node = %self.settings.node_name, retries = NODE_STATUS_UPDATE_RETRY, "unable to update node status: retries exhausted; trying again next period");
    }

    /// Upstream `tryUpdateNodeStatus`: read the Node (the first attempt may be served from the
    /// API server's cache), compute the status on a copy, patch only if it changed or the
    /// report period expired.
    async fn try_update_node_status(
        &mut self,
        attempt: usize,
        inputs: &StatusInputs,
    ) -> Result<(), NodeStatusError> {
        let name = self.settings.node_name.clone();
        let params = if attempt == 0 {
            GetParams::any()
        } else {
            GetParams::default()
        };
        let timeout = self.settings.request_timeout;
        let original = bounded(timeout, self.heartbeat.get_with(&name, &params))
            .await
            .map_err(|source| NodeStatusError::Get {
                node: name.clone(),
                source,
            })?;
        self.publish(original.clone());
        let mut node = original.clone();
        let labels_changed = self.ensure_os_arch_labels(&mut node);
        let cidr_changed = self.update_pod_cidr(&node).await;
        let now = api_time(self.clock.now());
        let mut events = set_node_status(&mut node, &self.settings, &self.host, inputs, &now);
        events.extend(self.schedulable_event(&node));
        let changed = labels_changed
            || cidr_changed
            || node_status_has_changed(original.status.as_ref(), node.status.as_ref());
        let report_due = self
            .last_report
            .is_some_and(|t| t.elapsed() >= self.settings.report_frequency);
        if !changed && !report_due {
            debug!(node = %name, "node status unchanged; not patching");
            self.record(events);
            return Ok(());
        }
        let patch =
            node_status_patch(&original, &node).map_err(|source| NodeStatusError::PatchBody {
                node: name.clone(),
                source,
            })?;
        debug!(node = %name, changed, report_due, %patch, "patching node status");
        let params = PatchParams::default();
        let updated = bounded(
            timeout,
            self.heartbeat
                .patch_status(&name, &params, &Patch::Strategic(patch)),
        )
        .await
        .map_err(|source| NodeStatusError::Patch {
            node: name.clone(),
            source,
        })?;
        self.last_report = Some(Instant::now());
        self.record(events);
        self.publish(updated);
        Ok(())
    }

    /// Upstream `updateNode`: the `kubernetes.io/os` and `kubernetes.io/arch` labels must
    /// match this host.
    fn ensure_os_arch_labels(&self, node: &mut Node) -> bool {
        let labels = node.metadata.labels.get_or_insert_with(Default::default);
        let mut changed = false;
        for (key, want) in [
            (LABEL_OS, &self.host.operating_system),
            (LABEL_ARCH, &self.host.architecture),
        ] {
            if labels.get(key) != Some(want) {
                labels.insert(key.to_owned(), want.clone());
                changed = true;
            }
        }
        changed
    }

    /// Upstream `updatePodCIDR`: hands a new `spec.podCIDRs` to the runtime.
    async fn update_pod_cidr(&mut self, node: &Node) -> bool {
        let cidrs = node
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidrs.as_ref())
            .map(|c| c.join(","))
            .unwrap_or_default();
        if cidrs.is_empty() || cidrs == self.pod_cidr {
            return false;
        }
        let req = cri::UpdateRuntimeConfigRequest {
            runtime_config: Some(cri::RuntimeConfig {
                network_config: Some(cri::NetworkConfig {
                    pod_cidr: cidrs.clone(),
                }),
            }),
        };
        match self.runtime.update_runtime_config(req).await {
            Ok(_) => {
                info!(node = %self.settings.node_name, old = %self.pod_cidr, new = %cidrs, "updated pod CIDR in the runtime");
                self.pod_cidr = cidrs;
                true
            }
            Err(e) => {
                warn!(node = %self.settings.node_name, pod_cidr = %cidrs, error = %e, "failed to hand the pod CIDR to the runtime");
                false
            }
        }
    }

    /// Upstream `recordNodeSchedulableEvent`.
    fn schedulable_event(&mut self, node: &Node) -> Option<NodeEvent> {
        let unschedulable = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if unschedulable == self.last_unschedulable {
            return None;
        }
        self.last_unschedulable = unschedulable;
        let reason = if unschedulable {
            "NodeNotSchedulable"
        } else {
            "NodeSchedulable"
        };
        Some(NodeEvent {
            event_type: EventType::Normal,
            reason: reason.to_owned(),
            message: format!("Node {} status is now: {reason}", self.settings.node_name),
        })
    }

    /// One snapshot of the runtime side: CRI Status (readiness), Version, ListImages, the
    /// health checks and pressure.
    async fn gather_inputs(&mut self) -> StatusInputs {
        let node = &self.settings.node_name;
        let now = Instant::now();
        let before = self.runtime_state.not_ready(now, &[]);
        match self
            .runtime
            .status(cri::StatusRequest { verbose: false })
            .await
        {
            Ok(resp) => self.runtime_state.observe(&resp, now),
            Err(e) => warn!(%node, error = %e, "container runtime status check failed"),
        }
        let after = self.runtime_state.not_ready(now, &[]);
        if before != after {
            match after.is_empty() {
                true => info!(%node, "container runtime is ready"),
                false => warn!(%node, errors = ?after, "container runtime not ready"),
            }
        }
        let runtime_version = match self.runtime.version(cri::VersionRequest::default()).await {
            Ok(v) => {
                self.runtime_name = v.runtime_name;
                Some(v.runtime_version)
            }
            Err(e) => {
                warn!(%node, error = %e, "cannot read the container runtime version");
                None
            }
        };
        let images = match self
            .images
            .list_images(cri::ListImagesRequest::default())
            .await
        {
            Ok(r) => r.images,
            Err(e) => {
                warn!(%node, error = %e, "cannot list images for the node status");
                Vec::new()
            }
        };
        StatusInputs {
            runtime_name: self.runtime_name.clone(),
            runtime_version,
            images,
            runtime_handlers: self.runtime_state.handlers().to_vec(),
            supplemental_groups_policy: self.runtime_state.features,
            not_ready: {
                let mut errs = self.runtime_state.not_ready(now, &self.health);
                errs.extend(self.not_ready.as_ref().and_then(|f| f()));
                errs
            },
            pressure: (self.pressure)(),
        }
    }

    fn record(&self, events: Vec<NodeEvent>) {
        for e in events {
            if e.reason == "NodeNotReady" {
                info!(node = %self.settings.node_name, "node became not ready");
            }
            self.events.node_event(e.event_type, &e.reason, &e.message);
        }
    }

    /// Publishes `node` unless the channel already holds that version.
    fn publish(&self, node: Node) {
        self.node_tx.send_if_modified(|current| {
            let same = current.as_ref().is_some_and(|c| {
                c.metadata.uid == node.metadata.uid
                    && c.metadata.resource_version.is_some()
                    && c.metadata.resource_version == node.metadata.resource_version
            });
            if !same {
                *current = Some(Arc::new(node));
            }
            !same
        });
    }
}
