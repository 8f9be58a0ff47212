//! The eviction manager task (upstream `managerImpl`: `synchronize`, `reclaimNodeLevelResources`,
//! `localStorageEviction`, `evictPod`, `Admit`). Owns the [`EvictionState`] and the pressure
//! sender; receives stats through a [`StatsHandle`], the active pods through a function, node
//! reclaimers and a [`PodEvictor`]; emits the pressure, evictions and events.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::rank::{eviction_message, is_critical_pod, local_storage_violation, rank_pods};
use super::thresholds::{
    EvictionState, Pressure, Signal, observations, sort_by_eviction_priority, thresholds_met,
};
use super::{
    DISRUPTION_REASON, EvictionSettings, IMMEDIATE_GRACE_PERIOD, POD_CLEANUP_TIMEOUT, REASON,
};
use crate::admission::taints::tolerates;
use crate::admit::{AdmitHandler, Rejection};
use crate::events::{EventRecorder, EventType};
use crate::nodestatus::setters::NodePressure;
use crate::pod_workers::{KillOptions, PodWork, PodWorkers, WorkerPhase};
use crate::qos::{BEST_EFFORT, pod_qos_class};
use crate::stats::StatsHandle;
use crate::status::manager::{DISRUPTION_TARGET, StatusManager};
use crate::types::PodExt;

/// Frees node-level resources before pods are evicted (upstream `ContainerGC` /
/// `ImageGC`); implemented by the garbage collectors.
#[async_trait]
pub trait NodeReclaimer: Send + Sync {
    /// Removes every dead container and sandbox (upstream `DeleteAllUnusedContainers`).
    /// Returns the bytes freed when known.
    async fn delete_dead_containers(&self) -> Result<u64, String>;
    /// Removes images no container uses (upstream `DeleteUnusedImages`).
    async fn delete_unused_images(&self) -> Result<u64, String>;
}

/// Ends a pod abnormally (upstream `PodTerminator`).
pub trait PodEvictor: Send + Sync {
    /// Marks the pod `Failed`/`Evicted` with `message` and kills it within `grace_period`
    /// seconds; with `disruption`, adds the `DisruptionTarget` condition.
    fn evict(&self, pod: &Pod, grace_period: i64, message: &str, disruption: bool);
    /// The pod's containers are stopped and its volumes gone.
    fn is_cleaned_up(&self, uid: &str) -> bool;
}

/// The pods the kubelet runs (admitted, not terminal, not terminating).
pub type ActivePodsFn = Arc<dyn Fn() -> Vec<Pod> + Send + Sync>;

/// Evicts through the status manager and the pod workers, the path `activeDeadlineSeconds`
/// takes: the status turns `Failed` first, then the worker terminates the pod with the
/// override grace period; later status generations keep the terminal phase and reason.
pub struct WorkerEvictor {
    pub status: StatusManager,
    pub workers: PodWorkers,
    pub events: Arc<dyn EventRecorder>,
}

impl PodEvictor for WorkerEvictor {
    fn evict(&self, pod: &Pod, grace_period: i64, message: &str, disruption: bool) {
        self.events.event(pod, EventType::Warning, REASON, message);
        info!(pod = %pod.full_name(), uid = %pod.uid(), grace_period, message, "evicting pod");
        let mut st = self.status.get_pod_status(pod.uid()).unwrap_or_default();
        st.phase = Some("Failed".to_owned());
        st.reason = Some(REASON.to_owned());
        st.message = Some(message.to_owned());
        if disruption {
            let cond = PodCondition {
                type_: DISRUPTION_TARGET.to_owned(),
                status: "True".to_owned(),
                reason: Some(DISRUPTION_REASON.to_owned()),
                message: Some(message.to_owned()),
                last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
                ..PodCondition::default()
            };
            let conds = st.conditions.get_or_insert_with(Vec::new);
            conds.retain(|c| c.type_ != DISRUPTION_TARGET);
            conds.push(cond);
        }
        self.status.set_pod_status(pod, st);
        self.workers.update_pod(PodWork::kill(
            pod.clone(),
            KillOptions {
                grace_period_override: Some(grace_period),
                removed: false,
            },
        ));
    }

    /// Containers stopped and volumes torn down (the worker finished `syncTerminatedPod`).
    fn is_cleaned_up(&self, uid: &str) -> bool {
        matches!(self.workers.phase(uid), None | Some(WorkerPhase::Finished))
    }
}

/// The eviction manager.
pub struct EvictionManager {
    settings: EvictionSettings,
    stats: StatsHandle,
    reclaimers: Vec<Arc<dyn NodeReclaimer>>,
    evictor: Arc<dyn PodEvictor>,
    active_pods: ActivePodsFn,
    events: Arc<dyn EventRecorder>,
    state: EvictionState,
    pressure: watch::Sender<NodePressure>,
    metrics: Option<crate::metrics::KubeletMetrics>,
}

impl EvictionManager {
    pub fn new(
        settings: EvictionSettings,
        stats: StatsHandle,
        reclaimers: Vec<Arc<dyn NodeReclaimer>>,
        evictor: Arc<dyn PodEvictor>,
        active_pods: ActivePodsFn,
        events: Arc<dyn EventRecorder>,
        pressure: watch::Sender<NodePressure>,
    ) -> Self {
        Self {
            settings,
            stats,
            reclaimers,
            evictor,
            active_pods,
            events,
            state: EvictionState::default(),
            pressure,
            metrics: None,
        }
    }

    /// Counts evictions in `kubelet_evictions{eviction_signal}`.
    pub fn with_metrics(mut self, metrics: crate::metrics::KubeletMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Evaluates every monitoring interval; after an eviction, waits (up to 30 s) for the
    /// evicted pods to stop and evaluates again at once, as upstream.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let evicted = self.synchronize().await;
            if !evicted.is_empty() {
                info!(pods = ?evicted, "eviction manager: pods evicted, waiting for pod to be cleaned up");
                let deadline = Instant::now() + POD_CLEANUP_TIMEOUT;
                while Instant::now() < deadline
                    && !evicted.iter().all(|u| self.evictor.is_cleaned_up(u))
                {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
                // Judge the next pass on stats taken after the clean-up (upstream asks the
                // summary provider for fresh stats on every pass).
                self.stats.refresh().await;
                continue;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(self.settings.monitoring_interval) => {}
            }
        }
    }

    fn publish(&self, pressure: &BTreeSet<Pressure>) {
        let p = NodePressure {
            memory: pressure.contains(&Pressure::Memory),
            disk: pressure.contains(&Pressure::Disk),
            pid: pressure.contains(&Pressure::Pid),
        };
        self.pressure.send_if_modified(|old| {
            let changed = *old != p;
            if changed {
                info!(
                    memory = p.memory,
                    disk = p.disk,
                    pid = p.pid,
                    "eviction manager: node pressure changed"
                );
            }
            *old = p;
            changed
        });
    }

    fn grace_period(&self, pod: &Pod, hard: bool) -> i64 {
        if hard {
            return IMMEDIATE_GRACE_PERIOD;
        }
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        if self.settings.max_pod_grace_period > 0 {
            own.min(self.settings.max_pod_grace_period)
        } else {
            own
        }
    }

    fn evict(&self, pod: &Pod, grace: i64, message: &str, disruption: bool) -> bool {
        if is_critical_pod(pod) {
            warn!(pod = %pod.full_name(), "eviction manager: cannot evict a critical pod");
            return false;
        }
        self.evictor.evict(pod, grace, message, disruption);
        true
    }

    /// One pass (upstream `synchronize`); returns the UIDs of the pods it evicted.
    pub async fn synchronize(&mut self) -> Vec<String> {
        let thresholds = self.settings.thresholds.clone();
        if thresholds.is_empty() && !self.settings.local_storage_capacity_isolation {
            return Vec::new();
        }
        let active = (self.active_pods)();
        let summary = self.stats.latest();
        let obs = observations(&summary, self.settings.pods_memory_limit);
        let eval = self.state.evaluate(
            &thresholds,
            &obs,
            Instant::now(),
            self.settings.pressure_transition_period,
        );
        self.publish(&eval.pressure);

        if self.settings.local_storage_capacity_isolation {
            let mut evicted = Vec::new();
            for pod in &active {
                let Some(stats) = summary.pod(pod.uid()) else {
                    continue;
                };
                if let Some(msg) = local_storage_violation(pod, stats, summary.dedicated_image_fs)
                    && self.evict(pod, IMMEDIATE_GRACE_PERIOD, &msg, false)
                {
                    evicted.push(pod.uid().to_owned());
                }
            }
            if !evicted.is_empty() {
                return evicted;
            }
        }

        let mut act_on = eval.act_on;
        if act_on.is_empty() {
            debug!("eviction manager: no resources are starved");
            return Vec::new();
        }
        sort_by_eviction_priority(&mut act_on);
        let Some(to_reclaim) = act_on.first().cloned() else {
            return Vec::new();
        };
        let resource = to_reclaim.signal.resource();
        info!(
            resource = resource.as_str(),
            "eviction manager: attempting to reclaim"
        );
        self.events.node_event(
            EventType::Warning,
            "EvictionThresholdMet",
            &format!("Attempting to reclaim {}", resource.as_str()),
        );
        if self
            .reclaim_node_level(to_reclaim.signal, summary.dedicated_image_fs)
            .await
        {
            info!(
                resource = resource.as_str(),
                "eviction manager: able to reduce resource pressure without evicting pods"
            );
            return Vec::new();
        }
        if active.is_empty() {
            warn!(
                "eviction manager: eviction thresholds have been met, but no pods are active to evict"
            );
            return Vec::new();
        }
        let mut ranked = active;
        rank_pods(&mut ranked, to_reclaim.signal, &summary);
        debug!(pods = ?ranked.iter().map(|p| p.full_name()).collect::<Vec<_>>(), "eviction manager: pods ranked for eviction");
        for pod in &ranked {
            let grace = self.grace_period(pod, to_reclaim.is_hard());
            let msg = eviction_message(resource, pod, &summary, &act_on, &obs);
            if self.evict(pod, grace, &msg, true) {
                if let Some(m) = &self.metrics {
                    m.inc_eviction(to_reclaim.signal.as_str());
                }
                return vec![pod.uid().to_owned()];
            }
        }
        info!("eviction manager: unable to evict any pods from the node");
        Vec::new()
    }

    /// Upstream `reclaimNodeLevelResources`: dead containers, then unused images, for disk
    /// signals (nodefs only when the images share its filesystem). True when the thresholds
    /// (with their minimum reclaim) are no longer met afterwards.
    async fn reclaim_node_level(&self, signal: Signal, dedicated_image_fs: bool) -> bool {
        let applies = match signal {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable | Signal::PidAvailable => {
                false
            }
            Signal::NodeFsAvailable | Signal::NodeFsInodesFree => !dedicated_image_fs,
            Signal::ImageFsAvailable | Signal::ImageFsInodesFree => true,
        };
        if !applies || self.reclaimers.is_empty() {
            return false;
        }
        for r in &self.reclaimers {
            match r.delete_dead_containers().await {
                Ok(freed) => info!(freed, "eviction manager: deleted dead containers"),
                Err(e) => warn!(error = %e, "eviction manager: deleting dead containers failed"),
            }
            match r.delete_unused_images().await {
                Ok(freed) => info!(freed, "eviction manager: deleted unused images"),
                Err(e) => warn!(error = %e, "eviction manager: deleting unused images failed"),
            }
        }
        let summary = self.stats.refresh().await;
        let obs = observations(&summary, self.settings.pods_memory_limit);
        thresholds_met(&self.settings.thresholds, &obs, true).is_empty()
    }
}

/// Upstream eviction `Admit`: under memory pressure only BestEffort pods that don't tolerate
/// the memory-pressure taint are refused; under disk or PID pressure every pod is, except
/// critical ones.
pub struct EvictionAdmit {
    pub pressure: watch::Receiver<NodePressure>,
}

impl AdmitHandler for EvictionAdmit {
    fn admit(&self, pod: &Pod, _active: &[&Pod]) -> Result<(), Rejection> {
        let p = *self.pressure.borrow();
        let mut conditions = Vec::new();
        for (on, kind) in [
            (p.memory, Pressure::Memory),
            (p.disk, Pressure::Disk),
            (p.pid, Pressure::Pid),
        ] {
            if on {
                conditions.push(kind.condition_type());
            }
        }
        if conditions.is_empty() || is_critical_pod(pod) {
            return Ok(());
        }
        if conditions == ["MemoryPressure"] {
            if pod_qos_class(pod) != BEST_EFFORT {
                return Ok(());
            }
            let taint = Taint {
                key: "node.kubernetes.io/memory-pressure".to_owned(),
                effect: "NoSchedule".to_owned(),
                ..Taint::default()
            };
            let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_ref());
            if tolerations
                .into_iter()
                .flatten()
                .any(|t| tolerates(t, &taint))
            {
                return Ok(());
            }
        }
        Err(Rejection {
            reason: REASON.to_owned(),
            message: format!("The node had condition: [{}]. ", conditions.join(" ")),
        })
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
