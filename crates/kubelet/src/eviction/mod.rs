//! The eviction manager (upstream `pkg/kubelet/eviction`): owns the eviction state (when each
//! threshold was first met, when each pressure was last seen) and the node's pressure verdict.
//! Receives stats snapshots from the stats provider, the active pods and its settings; every
//! monitoring interval it evaluates the thresholds, reclaims node-level resources first
//! ([`NodeReclaimer`]), then evicts at most one pod (phase `Failed`, reason `Evicted`, upstream
//! message) through a [`PodEvictor`]. Emits the pressure on a `watch` channel (node conditions)
//! and an admission handler refusing pods under pressure as upstream.
//!
//! - [`thresholds`]: signals, config parsing, observations, the pure evaluation step.
//! - [`rank`]: ranking, messages, local storage limits, critical pods.
//! - [`manager`]: the task, the real evictor over pod workers + status manager, admission.

pub mod manager;
pub mod rank;
pub mod thresholds;

pub use manager::{
    ActivePodsFn, EvictionAdmit, EvictionManager, NodeReclaimer, PodEvictor, WorkerEvictor,
};
pub use thresholds::{Pressure, Signal, Threshold, add_allocatable_thresholds, parse_thresholds};

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::Duration as ConfigDuration;
use crate::config::ThresholdValue;

use crate::types::EVICTED_REASON as REASON;
/// The condition upstream adds to pods evicted for node pressure (`PodDisruptionConditions`).
pub const DISRUPTION_REASON: &str = "TerminationByKubelet";
/// Upstream `immediateEvictionGracePeriodSeconds`.
pub const IMMEDIATE_GRACE_PERIOD: i64 = 1;
/// Upstream `podCleanupTimeout`.
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Eviction failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvictionError {
    /// A bad eviction setting; the message names the field.
    #[error("{0}")]
    Config(String),
}

/// The eviction manager's settings.
#[derive(Debug, Clone)]
pub struct EvictionSettings {
    pub thresholds: Vec<Threshold>,
    /// `evictionPressureTransitionPeriod` (5 min).
    pub pressure_transition_period: Duration,
    /// `evictionMaxPodGracePeriod` (seconds; 0 = the pod's own).
    pub max_pod_grace_period: i64,
    /// How often to evaluate (upstream's fixed 10 s; `evictionMonitoringInterval`).
    pub monitoring_interval: Duration,
    /// `localStorageCapacityIsolation`: enforce emptyDir and ephemeral-storage limits.
    pub local_storage_capacity_isolation: bool,
    /// The memory limit of the pods cgroup (`kubepods`), bytes: the capacity of the
    /// `allocatableMemory.available` signal. `None` (no pods cgroup): no such signal.
    pub pods_memory_limit: Option<u64>,
}

impl Default for EvictionSettings {
    fn default() -> Self {
        Self {
            thresholds: Vec::new(),
            pressure_transition_period: Duration::from_secs(300),
            max_pod_grace_period: 0,
            monitoring_interval: Duration::from_secs(10),
            local_storage_capacity_isolation: true,
            pods_memory_limit: None,
        }
    }
}

impl EvictionSettings {
    /// Settings from the configuration fields (errors name the field).
    #[allow(clippy::too_many_arguments)]
    pub fn from_config(
        hard: &BTreeMap<String, ThresholdValue>,
        soft: &BTreeMap<String, ThresholdValue>,
        soft_grace: &BTreeMap<String, ConfigDuration>,
        min_reclaim: &BTreeMap<String, ThresholdValue>,
        pressure_transition_period: ConfigDuration,
        max_pod_grace_period: i32,
        monitoring_interval: Duration,
        local_storage_capacity_isolation: bool,
    ) -> Result<Self, EvictionError> {
        if monitoring_interval.is_zero() {
            return Err(EvictionError::Config(
                "evictionMonitoringInterval: must be greater than 0".to_owned(),
            ));
        }
        Ok(Self {
            thresholds: parse_thresholds(hard, soft, soft_grace, min_reclaim)?,
            pressure_transition_period: pressure_transition_period.as_std(),
            max_pod_grace_period: i64::from(max_pod_grace_period),
            monitoring_interval,
            local_storage_capacity_isolation,
            pods_memory_limit: None,
        })
    }

    /// Node allocatable as the container manager enforces it: `pods_memory_limit` is the
    /// memory limit it put on the pods cgroup, and with `pods` in `enforceNodeAllocatable`
    /// the hard `memory.available` thresholds gain their `allocatableMemory.available` twins
    /// (upstream `ParseThresholdConfig`).
    pub fn with_node_allocatable<'a>(
        mut self,
        enforce_node_allocatable: impl IntoIterator<Item = &'a str>,
        pods_memory_limit: Option<u64>,
    ) -> Self {
        add_allocatable_thresholds(&mut self.thresholds, enforce_node_allocatable);
        self.pods_memory_limit = pods_memory_limit;
        self
    }
}

/// Where the stats come from.
// Built once at startup: the settings stay inline rather than boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Default)]
pub enum StatsSource {
    /// No stats: no eviction manager runs and the node never reports pressure.
    #[default]
    Disabled,
    /// Collect from this host.
    Host(crate::stats::StatsSettings),
    /// Someone else publishes them (tests).
    Injected(crate::stats::StatsHandle),
}

/// What the agent needs to run the stats provider and the eviction manager.
#[derive(Clone, Default)]
pub struct EvictionWiring {
    pub stats: StatsSource,
    pub settings: EvictionSettings,
    /// Node-level reclaimers added to the agent's own (tests).
    pub extra_reclaimers: Vec<std::sync::Arc<dyn NodeReclaimer>>,
}

impl std::fmt::Debug for EvictionWiring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvictionWiring")
            .field("stats", &self.stats)
            .field("settings", &self.settings)
            .field("extra_reclaimers", &self.extra_reclaimers.len())
            .finish()
    }
}
