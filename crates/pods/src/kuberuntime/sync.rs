//! The kuberuntime side effects (upstream `SyncPod`, `killPod`, `syncTerminatingPod`,
//! `syncTerminatedPod`): owns the CrashLoopBackOff state and the reason cache (the last start
//! error of each container). Receives work from pod workers with the runtime status from the
//! PLEG cache; decides through `compute_pod_actions`, acts through CRI, writes the generated
//! API status to the status manager and reports events.

use crate::objects::PodObjects;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::RuntimeService;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::clock::Clock;
use crate::cm::ContainerManager;
use crate::cm::cpumanager::CpuManager;
use crate::container::{PodStatus, RunningPod};
use crate::events::{EventRecorder, EventType};
use crate::images::ImageManager;
use crate::kuberuntime::actions::{
    KillReason, NoProber, PodActions, ProbeResults, compute_pod_actions_with_probes,
    is_host_network,
};
use crate::kuberuntime::ephemeral::ephemeral_containers;
use crate::kuberuntime::kill::{
    KillError, KillTarget, kill_containers, purge_init_containers, remove_pod_content,
};
use crate::kuberuntime::runtime_status::get_pod_status;
use crate::kuberuntime::start::{SandboxInfo, StartError, Starter};
use crate::metrics::KubeletMetrics;
use crate::metrics::kubelet::{CONTAINER, EPHEMERAL_CONTAINER, INIT_CONTAINER};
use crate::pleg::RelistTrigger;
use crate::pod_workers::{Failures, PodCgroupError, PodSyncer, SyncError, UpdateType};
use crate::prober::ProbeManager;
use crate::runtimeclass::RuntimeClassManager;
use crate::status::generate::{
    DEADLINE_EXCEEDED_MESSAGE, DEADLINE_EXCEEDED_REASON, StatusInputs,
    generate_api_pod_status_with_probes,
};
use crate::status::manager::StatusManager;
use crate::types::{PodExt, PodUid};
use crate::volumes::VolumeManager;

pub use crate::kuberuntime::context::{RuntimeContext, SyncerConfig};

/// Per-pod record of the last start failure of each container (upstream `ReasonCache`).
type Reasons = BTreeMap<String, (String, String)>;

/// Makes pods run on the container runtime.
pub struct Syncer {
    /// What the side-effect files (start, kill, resize) act with.
    pub(crate) ctx: RuntimeContext,
    reasons: Mutex<HashMap<PodUid, Reasons>>,
    relist: Option<RelistTrigger>,
    /// The pods whose runtime state this round changed: UID → (name, namespace). The PLEG is
    /// asked to refresh them when their worker's round is over (`round_finished`).
    changed: Mutex<HashMap<PodUid, (String, String)>>,
    prober: Option<ProbeManager>,
    metrics: Option<KubeletMetrics>,
}

impl Syncer {
    pub fn new(
        runtime: Arc<dyn RuntimeService>,
        images: ImageManager,
        status: StatusManager,
        events: Arc<dyn EventRecorder>,
        config: SyncerConfig,
        clock: Clock,
        volumes: VolumeManager,
    ) -> Self {
        Self {
            ctx: RuntimeContext {
                runtime,
                images,
                status,
                events,
                config,
                clock,
                crash_backoff: Mutex::new(Backoff::for_containers()),
                volumes,
                objects: None,
                cpu_manager: None,
                cgroups: None,
                runtime_classes: RuntimeClassManager::standalone(),
                allocation: None,
            },
            reasons: Mutex::new(HashMap::new()),
            changed: Mutex::new(HashMap::new()),
            relist: None,
            prober: None,
            metrics: None,
        }
    }

    /// Caps the CrashLoopBackOff delay (`crashLoopBackOff.maxContainerRestartPeriod` with the
    /// `KubeletCrashLoopBackOffMax` gate); without it, 10s doubling to 300s.
    pub fn with_crash_loop_max(mut self, max: std::time::Duration) -> Self {
        self.ctx.crash_backoff = Mutex::new(Backoff::for_containers_with_max(max));
        self
    }

    /// Resolves pods' `runtimeClassName` to the handler passed to `RunPodSandbox`.
    pub fn with_runtime_classes(mut self, classes: RuntimeClassManager) -> Self {
        self.ctx.runtime_classes = classes;
        self
    }

    /// Counts sandbox and container start attempts (`kubelet_started_*`).
    pub fn with_metrics(mut self, metrics: KubeletMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Upstream counts a container start once past the back-off check, and its failure by
    /// waiting reason.
    fn count_container_start(&self, is_init: bool, result: Result<(), &StartError>) {
        let Some(m) = &self.metrics else { return };
        let kind = if is_init { INIT_CONTAINER } else { CONTAINER };
        match result {
            Err(StartError::CrashLoopBackOff(_)) => {}
            Err(e) => m.record_started_container(kind, Some(e.reason())),
            Ok(()) => m.record_started_container(kind, None),
        }
    }

    /// Creates each pod's cgroup before its sandbox and hands it to the runtime as the cgroup
    /// parent (upstream SyncPod `pcm.EnsureExists`).
    pub fn with_cgroups(mut self, cm: ContainerManager) -> Self {
        self.ctx.cgroups = Some(cm);
        self
    }

    /// Enables in-place pod resize (upstream `InPlacePodVerticalScaling`): pods run with their
    /// allocated resources, resizes are admitted and actuated through CRI and the pod cgroup.
    pub fn with_allocation(mut self, allocation: crate::allocation::AllocationManager) -> Self {
        self.ctx.allocation = Some(allocation);
        self
    }

    /// Gives container environments the API server's ConfigMaps, Secrets and service links
    /// (without, references to them fail as upstream's kubelet without a kube client).
    pub fn with_objects(mut self, objects: Arc<dyn PodObjects>) -> Self {
        self.ctx.objects = Some(objects);
        self
    }

    /// Gives new containers the CPU manager's cpusets; terminated pods release their CPUs.
    pub fn with_cpu_manager(mut self, cpu_manager: CpuManager) -> Self {
        self.ctx.cpu_manager = Some(cpu_manager);
        self
    }

    /// Lets the syncer ask the PLEG to look at the runtime right after it changed something.
    pub fn with_relist_trigger(mut self, trigger: RelistTrigger) -> Self {
        self.relist = Some(trigger);
        self
    }

    /// Lets the syncer feed the prober and use its results (without one, every probe counts
    /// as passed).
    pub fn with_prober(mut self, prober: ProbeManager) -> Self {
        self.prober = Some(prober);
        self
    }

    fn probes(&self) -> &dyn ProbeResults {
        match &self.prober {
            Some(p) => p,
            None => &NoProber,
        }
    }

    /// The pod's IP for hooks and probes: the sandbox's, or the node's for host-network pods.
    pub(crate) fn pod_ip(&self, pod: &Pod, status: &PodStatus) -> String {
        status
            .ips
            .first()
            .or_else(|| {
                is_host_network(pod)
                    .then(|| self.ctx.config.host_ips.first())
                    .flatten()
            })
            .cloned()
            .unwrap_or_default()
    }

    fn kill_targets<'s>(
        &self,
        pod: &Pod,
        containers: impl Iterator<Item = &'s crate::container::ContainerStatus>,
        status: &PodStatus,
    ) -> Vec<KillTarget> {
        let ip = self.pod_ip(pod, status);
        containers
            .map(|c| KillTarget::for_container(pod, c, None, KillReason::None, &ip))
            .collect()
    }

    /// Notes that this round changed the pod in the runtime: once the round is over, the PLEG
    /// refreshes it (one pod's status calls, not a whole relist).
    ///
    /// Not at once: the worker's next round wants data newer than the end of this one, and a
    /// refresh that began before the round ended (the PLEG runs on another thread) would be
    /// too old for it, so the worker would sit out a whole relist period with its containers
    /// already running.
    fn runtime_changed(&self, pod: &Pod) {
        if self.relist.is_some() {
            self.changed_pods().insert(
                pod.uid().to_string(),
                (pod.name().to_string(), pod.namespace().to_string()),
            );
        }
    }

    fn changed_pods(&self) -> MutexGuard<'_, HashMap<PodUid, (String, String)>> {
        crate::sync::lock(&self.changed)
    }

    fn reasons(&self) -> MutexGuard<'_, HashMap<PodUid, Reasons>> {
        crate::sync::lock(&self.reasons)
    }

    /// Generates the pod's API status from the runtime view and hands it to the status manager.
    fn update_status(
        &self,
        pod: &Pod,
        status: &PodStatus,
        pod_is_terminal: bool,
    ) -> Option<String> {
        let old = self.ctx.status.get_pod_status(pod.uid());
        let reasons = self.reasons().get(pod.uid()).cloned().unwrap_or_default();
        let api = generate_api_pod_status_with_probes(
            &StatusInputs {
                pod,
                runtime: status,
                old: old.as_ref(),
                sync_errors: &reasons,
                pod_is_terminal,
                host_ips: &self.ctx.config.host_ips,
                now: self.ctx.clock.now(),
                runtime_name: &self.ctx.config.runtime_name,
            },
            self.probes(),
        );
        let mut api = api;
        if let Some(alloc) = &self.ctx.allocation {
            alloc.apply_to_status(pod, &mut api);
        }
        let deadline = api.reason.as_deref() == Some(DEADLINE_EXCEEDED_REASON);
        if deadline
            && old.as_ref().and_then(|o| o.reason.as_deref()) != Some(DEADLINE_EXCEEDED_REASON)
        {
            self.ctx.events.event(
                pod,
                EventType::Normal,
                DEADLINE_EXCEEDED_REASON,
                DEADLINE_EXCEEDED_MESSAGE,
            );
        }
        let phase = api.phase.clone();
        self.ctx.status.set_pod_status(pod, api);
        phase
    }

    fn record_start_result(&self, pod: &Pod, container: &str, result: Result<(), &StartError>) {
        let mut reasons = self.reasons();
        match result {
            Ok(()) => {
                if let Some(r) = reasons.get_mut(pod.uid()) {
                    r.remove(container);
                }
            }
            Err(e) => {
                reasons
                    .entry(pod.uid().to_owned())
                    .or_default()
                    .insert(container.to_owned(), (e.reason().to_owned(), e.to_string()));
            }
        }
    }

    fn forget_pod(&self, pod: &Pod) {
        self.reasons().remove(pod.uid());
        self.ctx.status.delete(pod.uid());
        if let Some(p) = &self.prober {
            p.remove_pod(pod.uid());
        }
    }

    /// The runtime's freshest view of a pod (after acting on it).
    async fn refetch(&self, pod: &Pod) -> Result<PodStatus, SyncError> {
        get_pod_status(
            self.ctx.runtime.as_ref(),
            pod.uid(),
            pod.name(),
            pod.namespace(),
        )
        .await
        .map_err(SyncError::Status)
    }

    /// Upstream `makePodDataDirs`: the pod directory and its subdirectories 0750, in one trip
    /// off the async workers (this runs on every sync).
    async fn make_pod_dirs(&self, pod: &Pod) -> Result<(), SyncError> {
        let base = self.ctx.config.root_dir.join("pods").join(pod.uid());
        let made = base.clone();
        tokio::task::spawn_blocking(move || {
            for sub in ["", "volumes", "plugins", "containers"] {
                let dir = made.join(sub);
                crate::data_dirs::create_dir_with_mode(&dir, crate::data_dirs::DATA_DIR_MODE)
                    .map_err(|source| SyncError::Dirs { dir, source })?;
            }
            Ok(())
        })
        .await
        .unwrap_or_else(|e| {
            Err(SyncError::Dirs {
                dir: base,
                source: std::io::Error::other(e),
            })
        })
    }
}

#[async_trait]
impl PodSyncer for Syncer {
    fn round_finished(&self, uid: &str) {
        let changed = self.changed_pods().remove(uid);
        if let (Some((name, namespace)), Some(t)) = (changed, &self.relist) {
            t.request_pod(uid, &name, &namespace);
        }
    }

    async fn sync_pod(
        &self,
        update_type: UpdateType,
        pod: &Pod,
        status: &PodStatus,
        cancel: &CancellationToken,
    ) -> Result<bool, SyncError> {
        // In-place resize: act on the allocated resources, not the desired ones.
        let allocated = self.ctx.allocated_pod(pod, status);
        let pod = allocated.as_ref().unwrap_or(pod);
        if let Some(p) = &self.prober {
            p.update_pod(pod, status, &self.pod_ip(pod, status));
        }
        let phase = self.update_status(pod, status, false);
        if matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
            return Ok(true);
        }
        if update_type == UpdateType::Create {
            info!(pod = %pod.full_name(), uid = %pod.uid(), "syncing new pod");
        }
        self.make_pod_dirs(pod).await?;
        if let Some(cm) = &self.ctx.cgroups
            && let Err(e) = ensure_pod_cgroup(
                cm,
                pod,
                self.ctx
                    .cpu_manager
                    .as_ref()
                    .is_some_and(|m| m.pod_has_exclusive_cpus(pod)),
            )
            .await
        {
            self.ctx.events.event(
                pod,
                EventType::Warning,
                "FailedToCreatePodContainer",
                &e.to_string(),
            );
            return Err(SyncError::Cgroup {
                uid: pod.uid().to_owned(),
                source: Box::new(e),
            });
        }

        let mut actions = compute_pod_actions_with_probes(pod, status, self.probes());
        let resize = if actions.kill_pod || actions.create_sandbox {
            Default::default()
        } else {
            self.ctx.compute_resize(pod, status)
        };
        crate::kuberuntime::resize::merge_restarts(&mut actions, &resize);
        debug!(pod = %pod.full_name(), uid = %pod.uid(), ?actions, "computed pod actions");

        if actions.kill_pod {
            if status.sandbox_statuses.is_empty() && status.container_statuses.is_empty() {
                // A new pod: the runtime has nothing of it to stop (upstream's kill of the
                // empty running pod stops nothing either), so nothing is said about killing.
                debug!(pod = %pod.full_name(), uid = %pod.uid(), "no sandbox yet, creating the first");
            } else {
                let reason = if actions.create_sandbox {
                    "pod sandbox changed, it will be killed and re-created"
                } else {
                    "no containers to keep or start"
                };
                info!(pod = %pod.full_name(), uid = %pod.uid(), reason, "killing pod");
                let targets = self.kill_targets(pod, status.running_containers(), status);
                self.kill_pod(pod, status, targets, None).await?;
                self.runtime_changed(pod);
            }
            if !actions.create_sandbox {
                return Ok(false);
            }
            // Every init container runs again in the new sandbox.
            purge_init_containers(&self.ctx, pod, status).await;
        } else if !actions.containers_to_kill.is_empty() {
            let targets: Vec<KillTarget> = actions
                .containers_to_kill
                .iter()
                .filter_map(|(id, k)| {
                    let c = status.container_statuses.iter().find(|c| &c.id == id)?;
                    info!(pod = %pod.full_name(), uid = %pod.uid(), container = %k.name, reason = %k.message, "killing container");
                    Some(KillTarget::for_container(
                        pod,
                        c,
                        Some(k.message.clone()),
                        k.reason,
                        &self.pod_ip(pod, status),
                    ))
                })
                .collect();
            kill_containers(&self.ctx, Some(pod), targets, None).await?;
            self.runtime_changed(pod);
        }
        if cancel.is_cancelled() {
            return Err(SyncError::Cancelled);
        }
        if !resize.is_empty() {
            let resized = self.ctx.do_pod_resize_action(pod, &resize).await;
            // Report the new allocation/actuation (and conditions) at once.
            let fresh = self.ctx.allocated_pod(pod, status);
            self.update_status(fresh.as_ref().unwrap_or(pod), status, false);
            resized.map_err(SyncError::Resize)?;
        }

        // Upstream `WaitForAttachAndMount`, on every sync: containers start only with their
        // volumes in place, and ConfigMap/Secret/downward API/projected contents of running
        // pods are refreshed (a failure leaves running containers alone).
        let volumes = match self.ctx.volumes.mount_pod_volumes(pod).await {
            Ok(v) => v,
            Err(e) => {
                self.ctx
                    .events
                    .event(pod, EventType::Warning, "FailedMount", &e.to_string());
                return Err(SyncError::Mount {
                    pod: pod.full_name(),
                    source: Box::new(e),
                });
            }
        };
        if !actions.create_sandbox
            && actions.init_containers_to_start.is_empty()
            && actions.containers_to_start.is_empty()
            && actions.ephemeral_containers_to_start.is_empty()
        {
            return Ok(false);
        }
        // Upstream `PrepareDynamicResources` before a sandbox is made: no DRA driver is ever
        // registered here, so a pod with resource claims stays pending, retried with backoff.
        if actions.create_sandbox
            && let Some(e) = crate::kuberuntime::dra::unpreparable_claims(pod)
        {
            self.ctx.events.event(
                pod,
                EventType::Warning,
                crate::kuberuntime::dra::FAILED_PREPARE_DYNAMIC_RESOURCES,
                &crate::kuberuntime::dra::event_message(&e),
            );
            return Err(SyncError::DynamicResources(e));
        }
        let starter = Starter::new(&self.ctx, pod, status, &volumes);
        let sandbox = if actions.create_sandbox {
            let created = starter.create_sandbox(actions.attempt).await;
            if let Some(m) = &self.metrics {
                m.record_started_pod(created.is_err());
            }
            match created {
                Ok(s) => s,
                Err(e) => return Err(SyncError::Sandbox(e)),
            }
        } else {
            match actions.sandbox_id.as_deref() {
                Some(id) => starter.existing_sandbox(id, actions.attempt)?,
                None => return Ok(false),
            }
        };

        let mut failed = Vec::new();
        // Upstream step 5: ephemeral containers first, so a debug container starts even while
        // an init container keeps failing.
        self.start_ephemeral_containers(&starter, &sandbox, pod, &actions, cancel, &mut failed)
            .await;
        let spec = pod.spec.as_ref();
        let init = spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default();
        for &idx in &actions.init_containers_to_start {
            let Some(c) = init.get(idx) else { continue };
            if cancel.is_cancelled() {
                break;
            }
            let result = starter.start_container(&sandbox, c, true).await;
            if result.is_ok() {
                self.ctx.record_actuated(pod, c);
            }
            self.count_container_start(true, result.as_ref().map(|_| ()));
            self.record_start_result(pod, &c.name, result.as_ref().map(|_| ()));
            if let Err(e) = result {
                let sidecar = c.restart_policy.as_deref() == Some("Always");
                failed.push(e);
                if !sidecar {
                    break;
                }
            }
        }
        let regular = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
        for &idx in &actions.containers_to_start {
            let Some(c) = regular.get(idx) else { continue };
            if cancel.is_cancelled() {
                break;
            }
            let result = starter.start_container(&sandbox, c, false).await;
            if result.is_ok() {
                self.ctx.record_actuated(pod, c);
            }
            self.count_container_start(false, result.as_ref().map(|_| ()));
            self.record_start_result(pod, &c.name, result.as_ref().map(|_| ()));
            if let Err(e) = result {
                failed.push(e);
            }
        }
        self.runtime_changed(pod);
        match Failures::from_vec(failed) {
            None => Ok(false),
            Some(failures) => Err(SyncError::Start(failures)),
        }
    }

    async fn sync_terminating_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        grace_period: i64,
    ) -> Result<(), SyncError> {
        if let Some(p) = &self.prober {
            p.stop_liveness_and_startup(pod.uid());
        }
        self.update_status(pod, status, false);
        let targets = self.kill_targets(pod, status.running_containers(), status);
        self.kill_pod(pod, status, targets, Some(grace_period))
            .await?;
        let after = self.refetch(pod).await?;
        let still_running: Vec<&str> = after
            .running_containers()
            .map(|c| c.name.as_str())
            .collect();
        if !still_running.is_empty() {
            return Err(SyncError::StillRunning(
                still_running.into_iter().map(str::to_owned).collect(),
            ));
        }
        self.update_status(pod, &after, true);
        info!(pod = %pod.full_name(), uid = %pod.uid(), "pod terminated: all containers stopped");
        Ok(())
    }

    async fn sync_terminating_runtime_pod(&self, running: &RunningPod) -> Result<(), SyncError> {
        info!(pod = %format!("{}/{}", running.namespace, running.name), uid = %running.uid, reason = "orphaned: not in any pod source", "killing runtime pod");
        let targets: Vec<KillTarget> = running
            .containers
            .iter()
            .filter(|c| c.is_running())
            .map(KillTarget::orphan)
            .collect();
        kill_containers(&self.ctx, None, targets, Some(1)).await?;
        self.unmount(&running.uid).await?;
        remove_pod_content(&self.ctx, &running.uid, &running.name, &running.namespace).await
    }

    async fn sync_terminated_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        removed: bool,
    ) -> Result<(), SyncError> {
        // Nothing runs any more: no probe has anything left to look at (upstream `RemovePod`).
        if let Some(p) = &self.prober {
            p.remove_pod(pod.uid());
        }
        // Volumes go once nothing runs (upstream unmounts in syncTerminatedPod).
        self.unmount(pod.uid()).await?;
        // Nothing runs: the pod's exclusive CPUs go back to the shared pool.
        if let Some(m) = &self.ctx.cpu_manager {
            m.release_pod(pod.uid());
        }
        if !removed {
            self.update_status(pod, status, true);
            // Upstream `TerminatePod`: the final status (a terminal phase for pods that are
            // not static), which lets the API syncer remove a gracefully deleted pod.
            self.ctx.status.terminate_pod(pod);
            return Ok(());
        }
        remove_pod_content(&self.ctx, pod.uid(), pod.name(), pod.namespace()).await?;
        if let Some(alloc) = &self.ctx.allocation {
            alloc.remove_pod(pod.uid());
        }
        // Never through a mount point: anything still mounted stays, named in the warning.
        if let Err(e) = self.ctx.volumes.remove_pod_dir(pod.uid()).await {
            let base = self.ctx.config.root_dir.join("pods").join(pod.uid());
            warn!(pod = %pod.full_name(), uid = %pod.uid(), dir = %base.display(), error = %e, "failed to remove pod directory");
        }
        self.forget_pod(pod);
        crate::sync::lock(&self.ctx.crash_backoff).gc(tokio::time::Instant::now());
        info!(pod = %pod.full_name(), uid = %pod.uid(), "pod removed: containers, sandboxes and directories cleaned up");
        Ok(())
    }
}

impl Syncer {
    /// Starts the ephemeral containers `actions` names; a failure is recorded (waiting reason
    /// in the status) and does not stop the other starts.
    async fn start_ephemeral_containers(
        &self,
        starter: &Starter<'_>,
        sandbox: &SandboxInfo,
        pod: &Pod,
        actions: &PodActions,
        cancel: &CancellationToken,
        failed: &mut Vec<StartError>,
    ) {
        let ephemeral = ephemeral_containers(pod);
        for &idx in &actions.ephemeral_containers_to_start {
            let Some(ec) = ephemeral.get(idx) else {
                continue;
            };
            if cancel.is_cancelled() {
                break;
            }
            let started = starter.start_ephemeral_container(sandbox, ec).await;
            let result = started.as_ref().map(|_| ());
            if let Some(m) = &self.metrics {
                match result {
                    Err(StartError::CrashLoopBackOff(_)) => {}
                    Err(e) => m.record_started_container(EPHEMERAL_CONTAINER, Some(e.reason())),
                    Ok(()) => m.record_started_container(EPHEMERAL_CONTAINER, None),
                }
            }
            self.record_start_result(pod, &ec.name, result);
            if let Err(e) = started {
                failed.push(e);
            }
        }
    }

    async fn unmount(&self, uid: &str) -> Result<(), SyncError> {
        self.ctx
            .volumes
            .unmount_pod_volumes(uid)
            .await
            .map_err(|e| SyncError::Unmount(Box::new(e)))
    }

    /// Upstream `killPodWithSyncResult`: stops `targets`, then every sandbox even when a
    /// container could not be stopped (a StopContainer that timed out on a stuck runtime):
    /// stopping the sandbox stops what still runs in it, so the pod can terminate. Both
    /// failures are reported, and the caller retries.
    async fn kill_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        targets: Vec<KillTarget>,
        grace_override: Option<i64>,
    ) -> Result<(), SyncError> {
        let killed = kill_containers(&self.ctx, Some(pod), targets, grace_override).await;
        let stopped = self.stop_sandboxes(pod, status).await;
        match (killed, stopped) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(SyncError::Kill(e)),
            (Err(Failures(mut a)), Err(Failures(b))) => {
                a.extend(b);
                Err(SyncError::Kill(Failures(a)))
            }
        }
    }

    /// Stops every sandbox of the pod, ready or not (upstream `killPodWithSyncResult`): a
    /// sandbox whose pause process died still holds its network until stopped.
    async fn stop_sandboxes(
        &self,
        pod: &Pod,
        status: &PodStatus,
    ) -> Result<(), Failures<KillError>> {
        for sb in &status.sandbox_statuses {
            let req = rkubelet_cri::api::StopPodSandboxRequest {
                pod_sandbox_id: sb.id.clone(),
            };
            if let Err(e) = self.ctx.runtime.stop_pod_sandbox(req).await
                && !e.is_not_found()
            {
                self.ctx.events.event(
                    pod,
                    EventType::Warning,
                    "FailedKillPod",
                    &format!("error killing pod: failed to \"KillPodSandbox\" for \"{}\" with KillPodSandboxError: \"{e}\"", pod.uid()),
                );
                return Err(Failures(vec![KillError::Sandbox {
                    id: sb.id.clone(),
                    source: e,
                }]));
            }
        }
        Ok(())
    }
}

/// `ContainerManager::ensure_pod_cgroup` off the async worker threads: it writes cgroupfs
/// files (a memory limit write can wait on reclaim) under the QoS lock.
async fn ensure_pod_cgroup(
    cm: &ContainerManager,
    pod: &Pod,
    exclusive_cpus: bool,
) -> Result<(), PodCgroupError> {
    let (cm, pod) = (cm.clone(), pod.clone());
    match tokio::task::spawn_blocking(move || cm.ensure_pod_cgroup_with(&pod, exclusive_cpus)).await
    {
        Ok(r) => r.map_err(PodCgroupError::Manager),
        Err(e) => Err(PodCgroupError::Task(e)),
    }
}
