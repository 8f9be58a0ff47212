//! Eviction thresholds and their evaluation (upstream `eviction/api/types.go` and the
//! threshold half of `helpers.go`): signals, parsing of `evictionHard`/`evictionSoft`/
//! `evictionSoftGracePeriod`/`evictionMinimumReclaim`, observations from a stats
//! [`Summary`], thresholds met (with minimum reclaim), and [`EvictionState`], the pure step
//! that applies grace periods and the pressure transition period. Owns no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::warn;

use super::EvictionError;
use crate::config::Duration as ConfigDuration;
use crate::config::ThresholdValue;
use crate::stats::Summary;

/// What the eviction manager watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    MemoryAvailable,
    /// Memory left to the pods cgroup (`kubepods`) under its node allocatable limit.
    AllocatableMemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
}

/// The resource a signal starves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Memory,
    EphemeralStorage,
    Inodes,
    Pids,
}

impl Resource {
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
    /// Counted in bytes (binary SI) rather than as a number (decimal SI).
    pub fn is_bytes(self) -> bool {
        matches!(self, Resource::Memory | Resource::EphemeralStorage)
    }
}

/// A node condition the eviction manager reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pressure {
    Memory,
    Disk,
    Pid,
}

impl Pressure {
    pub fn condition_type(self) -> &'static str {
        match self {
            Pressure::Memory => "MemoryPressure",
            Pressure::Disk => "DiskPressure",
            Pressure::Pid => "PIDPressure",
        }
    }
}

impl Signal {
    pub const ALL: [Signal; 7] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }

    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => Resource::EphemeralStorage,
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }

    pub fn pressure(self) -> Pressure {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Pressure::Memory,
            Signal::PidAvailable => Pressure::Pid,
            _ => Pressure::Disk,
        }
    }
}

/// A threshold value: an absolute amount or a fraction of capacity.
#[derive(Debug, Clone, PartialEq)]
pub enum Amount {
    /// Bytes, inodes or PIDs; `text` is the quantity as configured (for messages).
    Quantity { value: i64, text: String },
    /// 0.0..=1.0 (single precision, as upstream parses it).
    Percentage(f32),
}

impl Amount {
    fn from_config(v: &ThresholdValue) -> Self {
        match v {
            ThresholdValue::Quantity(q) => Amount::Quantity {
                value: q.value(),
                text: q.as_str().to_owned(),
            },
            ThresholdValue::Percentage { percent, .. } => {
                Amount::Percentage(*percent as f32 / 100.0)
            }
        }
    }

    /// Upstream `GetThresholdQuantity`.
    pub fn quantity(&self, capacity: i64) -> i64 {
        match self {
            Amount::Quantity { value, .. } => *value,
            Amount::Percentage(p) => (capacity as f64 * f64::from(*p)) as i64,
        }
    }

    /// The threshold as upstream prints it in eviction messages.
    pub fn display(&self, capacity: i64) -> String {
        match self {
            Amount::Quantity { text, .. } => text.clone(),
            Amount::Percentage(_) => format_binary(self.quantity(capacity)),
        }
    }
}

/// One eviction threshold. Hard thresholds have a zero grace period.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: Amount,
    pub grace_period: Duration,
    pub min_reclaim: Option<Amount>,
}

impl Threshold {
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }
}

fn parse_statements(
    field: &str,
    map: &BTreeMap<String, ThresholdValue>,
) -> Result<Vec<(Signal, Amount)>, EvictionError> {
    let mut out = Vec::new();
    for (name, value) in map {
        let Some(signal) = Signal::parse(name) else {
            if crate::config::EVICTION_SIGNALS.contains(&name.as_str()) {
                warn!(
                    field,
                    signal = %name,
                    "eviction signal is accepted but not enforced by rkubelet"
                );
                continue;
            }
            return Err(EvictionError::Config(format!(
                "{field}: unsupported eviction signal {name:?} (expected one of {})",
                Signal::ALL.map(Signal::as_str).join(", ")
            )));
        };
        if value.disables_signal() {
            continue;
        }
        if let ThresholdValue::Quantity(q) = value
            && (q.is_zero() || q.is_negative())
        {
            return Err(EvictionError::Config(format!(
                "{field}: eviction threshold {name} must be positive: {q}"
            )));
        }
        out.push((signal, Amount::from_config(value)));
    }
    Ok(out)
}

/// Upstream `ParseThresholdConfig`: hard thresholds, then soft ones with their grace
/// periods, each with its minimum reclaim. Errors name the field.
pub fn parse_thresholds(
    hard: &BTreeMap<String, ThresholdValue>,
    soft: &BTreeMap<String, ThresholdValue>,
    soft_grace: &BTreeMap<String, ConfigDuration>,
    min_reclaim: &BTreeMap<String, ThresholdValue>,
) -> Result<Vec<Threshold>, EvictionError> {
    let mut reclaims = BTreeMap::new();
    for (name, value) in min_reclaim {
        let Some(signal) = Signal::parse(name) else {
            continue;
        };
        match value {
            ThresholdValue::Percentage { percent, .. } if *percent <= 0.0 => {
                return Err(EvictionError::Config(format!(
                    "evictionMinimumReclaim: eviction percentage minimum reclaim {name} must be positive: {value}"
                )));
            }
            ThresholdValue::Quantity(q) if q.is_negative() => {
                return Err(EvictionError::Config(format!(
                    "evictionMinimumReclaim: negative eviction minimum reclaim specified for {name}"
                )));
            }
            _ => {}
        }
        reclaims.insert(signal, Amount::from_config(value));
    }
    let mut out = Vec::new();
    for (signal, value) in parse_statements("evictionHard", hard)? {
        out.push(Threshold {
            signal,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: None,
        });
    }
    for (signal, value) in parse_statements("evictionSoft", soft)? {
        let Some(grace) = soft_grace.get(signal.as_str()) else {
            return Err(EvictionError::Config(format!(
                "evictionSoftGracePeriod: grace period must be specified for the soft eviction threshold {}",
                signal.as_str()
            )));
        };
        if grace.is_negative() {
            return Err(EvictionError::Config(format!(
                "evictionSoftGracePeriod: invalid eviction grace period specified: {grace}, must be a positive value"
            )));
        }
        out.push(Threshold {
            signal,
            value,
            grace_period: grace.as_std(),
            min_reclaim: None,
        });
    }
    for t in &mut out {
        t.min_reclaim = reclaims.get(&t.signal).cloned();
    }
    Ok(out)
}

/// The pods' node allocatable enforcement (`pods` in `enforceNodeAllocatable`).
pub const ENFORCE_PODS: &str = "pods";

/// Upstream `ParseThresholdConfig`'s last step (`addAllocatableThresholds`): with `pods` in
/// `enforceNodeAllocatable`, every hard `memory.available` threshold gets an
/// `allocatableMemory.available` twin with the same value and minimum reclaim, appended.
pub fn add_allocatable_thresholds<'a>(
    thresholds: &mut Vec<Threshold>,
    enforce_node_allocatable: impl IntoIterator<Item = &'a str>,
) {
    if !enforce_node_allocatable
        .into_iter()
        .any(|k| k == ENFORCE_PODS)
    {
        return;
    }
    let twins: Vec<Threshold> = thresholds
        .iter()
        .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
        .map(|t| Threshold {
            signal: Signal::AllocatableMemoryAvailable,
            ..t.clone()
        })
        .collect();
    thresholds.extend(twins);
}

/// What was seen for one signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub available: i64,
    pub capacity: i64,
    pub time: DateTime<Utc>,
}

pub type Observations = BTreeMap<Signal, Observation>;

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Upstream `makeSignalObservations`. `pods_memory_limit` is the memory limit of the pods
/// cgroup (`kubepods`: the node allocatable the container manager enforces); with the
/// working set of the `pods` system container it gives `allocatableMemory.available`
/// (available = limit − working set, capacity = the limit, as cadvisor reports a limited
/// cgroup). A `pods` container reporting its own available bytes is taken as it is.
pub fn observations(summary: &Summary, pods_memory_limit: Option<u64>) -> Observations {
    let mut out = Observations::new();
    let node = &summary.node;
    if let Some(m) = node
        .system_containers
        .iter()
        .find(|c| c.name == crate::stats::system::PODS)
        .and_then(|c| c.memory.as_ref())
        && let Some(ws) = m.working_set_bytes
        && let Some(avail) = m
            .available_bytes
            .or_else(|| pods_memory_limit.map(|l| l.saturating_sub(ws)))
    {
        out.insert(
            Signal::AllocatableMemoryAvailable,
            Observation {
                available: to_i64(avail),
                capacity: to_i64(avail.saturating_add(ws)),
                time: m.time,
            },
        );
    }
    if let Some(m) = &node.memory
        && let (Some(avail), Some(ws)) = (m.available_bytes, m.working_set_bytes)
    {
        out.insert(
            Signal::MemoryAvailable,
            Observation {
                available: to_i64(avail),
                capacity: to_i64(avail.saturating_add(ws)),
                time: m.time,
            },
        );
    }
    let fs_obs =
        |out: &mut Observations, fs: &crate::stats::FsStats, bytes: Signal, inodes: Signal| {
            if let (Some(a), Some(c)) = (fs.available_bytes, fs.capacity_bytes) {
                out.insert(
                    bytes,
                    Observation {
                        available: to_i64(a),
                        capacity: to_i64(c),
                        time: fs.time,
                    },
                );
            }
            if let (Some(a), Some(c)) = (fs.inodes_free, fs.inodes) {
                out.insert(
                    inodes,
                    Observation {
                        available: to_i64(a),
                        capacity: to_i64(c),
                        time: fs.time,
                    },
                );
            }
        };
    if let Some(fs) = &node.fs {
        fs_obs(
            &mut out,
            fs,
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
        );
    }
    if let Some(fs) = node.runtime.as_ref().and_then(|r| r.image_fs.as_ref()) {
        fs_obs(
            &mut out,
            fs,
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        );
    }
    if let Some(r) = &node.rlimit
        && let (Some(max), Some(cur)) = (r.maxpid, r.curproc)
    {
        out.insert(
            Signal::PidAvailable,
            Observation {
                available: max - cur,
                capacity: max,
                time: r.time,
            },
        );
    }
    out
}

/// Upstream `thresholdsMet`: thresholds whose signal is below the threshold (plus the minimum
/// reclaim when `enforce_min_reclaim`).
pub fn thresholds_met(
    thresholds: &[Threshold],
    obs: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(o) = obs.get(&t.signal) else {
                return false;
            };
            let mut q = t.value.quantity(o.capacity);
            if enforce_min_reclaim && let Some(r) = &t.min_reclaim {
                q = q.saturating_add(r.quantity(o.capacity));
            }
            q > o.available
        })
        .cloned()
        .collect()
}

/// What one evaluation concluded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evaluation {
    /// Node conditions to report (observed within the transition period).
    pub pressure: BTreeSet<Pressure>,
    /// Thresholds met past their grace period whose stats are new: act on these.
    pub act_on: Vec<Threshold>,
}

/// The eviction manager's memory between passes (upstream `thresholdsFirstObservedAt`,
/// `nodeConditionsLastObservedAt`, `thresholdsMet`, `lastObservations`).
#[derive(Debug, Default)]
pub struct EvictionState {
    first_observed: Vec<(Threshold, Instant)>,
    conditions_last_observed: BTreeMap<Pressure, Instant>,
    thresholds_met: Vec<Threshold>,
    last_observations: Observations,
}

impl EvictionState {
    /// One pass of upstream `synchronize` up to the choice of thresholds to act on.
    pub fn evaluate(
        &mut self,
        config: &[Threshold],
        obs: &Observations,
        now: Instant,
        transition_period: Duration,
    ) -> Evaluation {
        let mut met = thresholds_met(config, obs, false);
        // Thresholds met before stay until their minimum reclaim is satisfied too.
        if !self.thresholds_met.is_empty() {
            for t in thresholds_met(&self.thresholds_met, obs, true) {
                if !met.contains(&t) {
                    met.push(t);
                }
            }
        }
        let first_observed: Vec<(Threshold, Instant)> = met
            .iter()
            .map(|t| {
                let at = self
                    .first_observed
                    .iter()
                    .find(|(old, _)| old == t)
                    .map_or(now, |(_, at)| *at);
                (t.clone(), at)
            })
            .collect();
        for t in &met {
            self.conditions_last_observed
                .insert(t.signal.pressure(), now);
        }
        let pressure: BTreeSet<Pressure> = self
            .conditions_last_observed
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) < transition_period)
            .map(|(p, _)| *p)
            .collect();
        let past_grace: Vec<Threshold> = first_observed
            .iter()
            .filter(|(t, at)| now.saturating_duration_since(*at) >= t.grace_period)
            .map(|(t, _)| t.clone())
            .collect();
        self.first_observed = first_observed;
        self.thresholds_met = past_grace.clone();
        // Only act when the stats behind a threshold are newer than last time.
        let act_on = past_grace
            .into_iter()
            .filter(|t| {
                let Some(o) = obs.get(&t.signal) else {
                    return false;
                };
                self.last_observations
                    .get(&t.signal)
                    .is_none_or(|last| o.time > last.time)
            })
            .collect();
        self.last_observations = obs.clone();
        Evaluation { pressure, act_on }
    }
}

/// Upstream `byEvictionPriority`: memory signals first; otherwise the configured order.
pub fn sort_by_eviction_priority(thresholds: &mut [Threshold]) {
    thresholds.sort_by_key(|t| t.signal.resource() != Resource::Memory);
}

/// A byte count as `resource.Quantity` prints a binary-SI value (`150Mi`, `1536`).
pub fn format_binary(v: i64) -> String {
    if v == 0 {
        return "0".to_owned();
    }
    if v.abs() < 1024 {
        return v.to_string();
    }
    let mut n = v;
    let mut i = 0;
    while n % 1024 == 0 && i < 6 {
        n /= 1024;
        i += 1;
    }
    let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i];
    format!("{n}{suffix}")
}

/// A count as `resource.Quantity` prints a decimal-SI value (`5k`, `1500`).
pub fn format_decimal(v: i64) -> String {
    if v == 0 {
        return "0".to_owned();
    }
    let mut n = v;
    let mut i = 0;
    while n % 1000 == 0 && i < 6 {
        n /= 1000;
        i += 1;
    }
    let suffix = ["", "k", "M", "G", "T", "P", "E"][i];
    format!("{n}{suffix}")
}

#[cfg(test)]
#[path = "thresholds_tests.rs"]
mod tests;
