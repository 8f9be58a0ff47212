//! CPU manager (upstream `pkg/kubelet/cm/cpumanager`): owns the CPU assignment state (shared
//! pool + exclusive CPUs per container) and its checkpoint `<rootDir>/cpu_manager_state`.
//! Receives pods at admission (allocate; refusal → `UnexpectedAdmissionError`), container
//! starts (which cpuset to create a container with), pod terminations (release), and every
//! `cpuManagerReconcilePeriod` the running containers (from the PLEG cache). Emits cpusets
//! into container configs and CRI `UpdateContainerResources` when a running container's
//! cpuset must follow the pool.
//!
//! The state sits behind one mutex inside [`CpuManager`] because admission is synchronous in
//! the sync loop; every method holds it only for in-memory work plus the small checkpoint
//! write, never across an await. The reconcile task ([`CpuManager::run`]) is the only place
//! that talks to the runtime.

pub mod assignment;
pub mod cpuset;
pub mod policy_static;
pub mod reconcile;
pub mod state;
pub mod topology;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::RuntimeService;
use rkubelet_cri::api::{LinuxContainerResources, UpdateContainerResourcesRequest};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::admit::{AdmitHandler, Rejection};
use crate::container::cache::PodCache;
use crate::types::PodExt;

use crate::sync;
use cpuset::CpuSet;
use policy_static::StaticPolicy;
use reconcile::{ContainerKey, RunningContainer, cpusets_to_push, stale_assignments};
use state::{Checkpoint, CheckpointError, State};

/// `cpuManagerPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuManagerPolicy {
    /// Nothing is pinned; containers get no cpuset from the kubelet.
    #[default]
    None,
    Static,
}

impl CpuManagerPolicy {
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Static => "static",
        }
    }

    /// The config value (`none`/`static`, as validated).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "" | "none" => Some(Self::None),
            "static" => Some(Self::Static),
            _ => None,
        }
    }
}

/// Settings of the CPU manager, resolved from the kubelet config.
#[derive(Debug, Clone)]
pub struct CpuManagerConfig {
    pub policy: CpuManagerPolicy,
    /// `cpuManagerReconcilePeriod` (default 10s).
    pub reconcile_period: Duration,
    /// `reservedSystemCPUs` (empty: reserve by count).
    pub reserved_system_cpus: CpuSet,
    /// `kubeReserved.cpu + systemReserved.cpu` in millicores (with `reservedSystemCPUs`, the
    /// number of those CPUs × 1000, as upstream overrides systemReserved.cpu).
    pub reserved_cpu_millis: i64,
    /// Where `cpu_manager_state` lives (`<rootDir>`).
    pub state_dir: PathBuf,
    /// The sysfs CPU directory (`/sys/devices/system/cpu`).
    pub sysfs_cpu_dir: PathBuf,
}

impl CpuManagerConfig {
    /// Policy `none` with its checkpoint in `state_dir`.
    pub fn none(state_dir: PathBuf) -> Self {
        Self {
            policy: CpuManagerPolicy::None,
            reconcile_period: Duration::from_secs(10),
            reserved_system_cpus: CpuSet::new(),
            reserved_cpu_millis: 0,
            state_dir,
            sysfs_cpu_dir: PathBuf::from("/sys/devices/system/cpu"),
        }
    }
}

/// Start-up failures (upstream wording, plus the file to remove where upstream names it).
#[derive(Debug, thiserror::Error)]
pub enum CpuManagerError {
    #[error(
        "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"
    )]
    ZeroReservation,
    #[error("[cpumanager] discovering the CPU topology: {0}")]
    Topology(#[from] topology::TopologyError),
    #[error("[cpumanager] {0}")]
    Policy(String),
    #[error(
        "could not restore state from checkpoint: {reason}, please drain this node and delete the CPU manager checkpoint file {path:?} before restarting Kubelet"
    )]
    Checkpoint { reason: String, path: PathBuf },
    #[error(
        "[cpumanager] static policy invalid state: {reason}, please drain node and remove policy state file {path:?}"
    )]
    InvalidState { reason: String, path: PathBuf },
}

struct Inner {
    policy: Option<StaticPolicy>,
    state: State,
    checkpoint: Checkpoint,
    /// The cpuset each container was last created with or updated to.
    last_pushed: BTreeMap<ContainerKey, CpuSet>,
    /// Pods whose assignments looked stale at the previous reconcile (removed when they
    /// still look stale one period later, so a just-admitted pod is never raced).
    stale_once: BTreeSet<ContainerKey>,
}

impl Inner {
    fn save(&self) {
        if let Err(e) = self.checkpoint.store(&self.state) {
            warn!(error = %e, "failed to store the CPU manager checkpoint");
        }
    }

    fn remove(&mut self, pod_uid: &str, container: &str) -> bool {
        self.last_pushed
            .remove(&(pod_uid.to_owned(), container.to_owned()));
        match &mut self.policy {
            Some(p) => p.remove_container(&mut self.state, pod_uid, container),
            None => false,
        }
    }
}

/// Handle to the CPU manager (cheap to clone).
#[derive(Clone)]
pub struct CpuManager {
    inner: Arc<Mutex<Inner>>,
    policy: CpuManagerPolicy,
    reconcile_period: Duration,
}

impl CpuManager {
    /// Reads the topology, builds the policy, restores and validates the checkpoint.
    pub fn new(cfg: &CpuManagerConfig) -> Result<Self, CpuManagerError> {
        let checkpoint = Checkpoint::new(&cfg.state_dir, cfg.policy.name());
        let path = checkpoint.path().to_path_buf();
        let policy = match cfg.policy {
            CpuManagerPolicy::None => None,
            CpuManagerPolicy::Static => {
                let topo = topology::discover(&cfg.sysfs_cpu_dir)?;
                if cfg.reserved_cpu_millis <= 0 {
                    return Err(CpuManagerError::ZeroReservation);
                }
                let num_reserved =
                    usize::try_from((cfg.reserved_cpu_millis + 999) / 1000).unwrap_or(usize::MAX);
                info!(cpus = %topo.cpus(), cores = topo.num_cores, sockets = topo.num_sockets, numa_nodes = topo.num_numa_nodes, "CPU topology");
                let policy = StaticPolicy::new(topo, num_reserved, &cfg.reserved_system_cpus)
                    .map_err(CpuManagerError::Policy)?;
                info!(reserved = %policy.reserved(), "reserved CPUs not available for exclusive assignment");
                Some(policy)
            }
        };
        let mut state = checkpoint
            .restore()
            .map_err(|e| CpuManagerError::Checkpoint {
                reason: match e {
                    CheckpointError::Invalid(r) => r,
                    other => other.to_string(),
                },
                path: path.clone(),
            })?;
        if let Some(p) = &policy {
            let initialized = p
                .start(&mut state)
                .map_err(|reason| CpuManagerError::InvalidState { reason, path })?;
            if initialized {
                checkpoint
                    .store(&state)
                    .map_err(|e| CpuManagerError::Checkpoint {
                        reason: e.to_string(),
                        path: checkpoint.path().to_path_buf(),
                    })?;
            }
        }
        info!(policy = cfg.policy.name(), pool = %state.default_cpu_set, "CPU manager started");
        Ok(Self {
            inner: Arc::new(Mutex::new(Inner {
                policy,
                state,
                checkpoint,
                last_pushed: BTreeMap::new(),
                stale_once: BTreeSet::new(),
            })),
            policy: cfg.policy,
            reconcile_period: cfg.reconcile_period,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every mutation completes before the lock is released; a poisoned lock is usable.
        sync::lock(&self.inner)
    }

    pub fn policy(&self) -> CpuManagerPolicy {
        self.policy
    }

    /// A copy of the current state (pool and assignments).
    pub fn state(&self) -> State {
        self.lock().state.clone()
    }

    /// Allocates CPUs for every init and regular container of `pod` (upstream topology
    /// manager admission with policy `none`). On failure nothing of the pod stays allocated.
    pub fn allocate_pod(&self, pod: &Pod) -> Result<(), String> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let Some(policy) = inner.policy.as_mut() else {
            return Ok(());
        };
        let spec = pod.spec.as_ref();
        let containers = spec
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .chain(spec.map(|s| s.containers.iter()).into_iter().flatten());
        let mut changed = false;
        let mut result = Ok(());
        for c in containers {
            match policy.allocate(&mut inner.state, pod, c) {
                Ok(ch) => changed |= ch,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_err() {
            let names: Vec<String> = inner
                .state
                .assignments
                .get(pod.uid())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            for name in names {
                changed |= policy.remove_container(&mut inner.state, pod.uid(), &name);
            }
        }
        if changed {
            inner.save();
        }
        if result.is_ok() {
            debug!(pod = %pod.full_name(), uid = %pod.uid(), assignments = ?inner.state.assignments.get(pod.uid()), "CPU manager admitted pod");
        }
        result
    }

    /// The cpuset to create the container with (`LinuxContainerResources.cpuset_cpus`): its
    /// own CPUs, else the shared pool; `None` with policy `none`.
    pub fn container_cpuset(&self, pod_uid: &str, container: &str) -> Option<String> {
        let mut inner = self.lock();
        inner.policy.as_ref()?;
        let cpus = inner.state.get_or_default(pod_uid, container);
        if cpus.is_empty() {
            return None;
        }
        let s = cpus.to_string();
        inner
            .last_pushed
            .insert((pod_uid.to_owned(), container.to_owned()), cpus);
        Some(s)
    }

    /// Upstream `ContainerHasExclusiveCPUs`: regular container `container` of `pod` holds CPUs
    /// of its own (an assignment in the state). Init containers never count.
    pub fn container_has_exclusive_cpus(&self, pod: &Pod, container: &str) -> bool {
        let regular = pod
            .spec
            .as_ref()
            .is_some_and(|s| s.containers.iter().any(|c| c.name == container));
        regular && self.has_assignment(pod.uid(), container)
    }

    /// Upstream `PodHasExclusiveCPUs`: some regular container of `pod` holds CPUs of its own.
    pub fn pod_has_exclusive_cpus(&self, pod: &Pod) -> bool {
        pod.spec.as_ref().is_some_and(|s| {
            s.containers
                .iter()
                .any(|c| self.has_assignment(pod.uid(), &c.name))
        })
    }

    fn has_assignment(&self, pod_uid: &str, container: &str) -> bool {
        self.lock()
            .state
            .assignments
            .get(pod_uid)
            .is_some_and(|m| m.contains_key(container))
    }

    /// Returns every CPU of the pod to the pool (the pod no longer runs anything).
    pub fn release_pod(&self, pod_uid: &str) {
        let mut inner = self.lock();
        let names: Vec<String> = inner
            .state
            .assignments
            .get(pod_uid)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let mut changed = false;
        for name in &names {
            changed |= inner.remove(pod_uid, name);
        }
        inner.last_pushed.retain(|(p, _), _| p != pod_uid);
        if changed {
            info!(uid = %pod_uid, pool = %inner.state.default_cpu_set, "CPU manager released the pod's CPUs");
            inner.save();
        }
    }

    /// The admission rule for this manager.
    pub fn admit_handler(&self) -> CpuManagerAdmit {
        CpuManagerAdmit(self.clone())
    }

    /// One reconcile pass: drops stale assignments (when `sources_ready`), then pushes the
    /// right cpuset to every running container of `active` pods whose cpuset changed.
    pub async fn reconcile(
        &self,
        runtime: &dyn RuntimeService,
        active: &[Pod],
        sources_ready: bool,
        cache: &PodCache,
    ) {
        if self.policy == CpuManagerPolicy::None {
            return;
        }
        let names: BTreeMap<String, BTreeSet<String>> = active
            .iter()
            .map(|p| {
                let spec = p.spec.as_ref();
                let names = spec
                    .and_then(|s| s.init_containers.as_ref())
                    .into_iter()
                    .flatten()
                    .chain(spec.map(|s| s.containers.iter()).into_iter().flatten())
                    .map(|c| c.name.clone())
                    .collect();
                (p.uid().to_owned(), names)
            })
            .collect();
        let running: Vec<RunningContainer> = active
            .iter()
            .filter_map(|p| cache.get(p.uid()).0)
            .flat_map(|status| {
                let uid = status.uid.clone();
                status
                    .running_containers()
                    .map(|c| RunningContainer {
                        pod_uid: uid.clone(),
                        name: c.name.clone(),
                        id: c.id.clone(),
                    })
                    .collect::<Vec<_>>()
            })
            .filter(|c| names.get(&c.pod_uid).is_some_and(|n| n.contains(&c.name)))
            .collect();
        let plan = {
            let mut inner = self.lock();
            if sources_ready {
                let stale: BTreeSet<ContainerKey> = stale_assignments(&inner.state, &names)
                    .into_iter()
                    .collect();
                let mut changed = false;
                for (pod, container) in stale.intersection(&inner.stale_once.clone()) {
                    info!(uid = %pod, container = %container, "CPU manager removing stale assignment");
                    changed |= inner.remove(pod, container);
                }
                inner.stale_once = stale;
                if changed {
                    inner.save();
                }
            }
            cpusets_to_push(&inner.state, &inner.last_pushed, &running)
        };
        for (c, cpus) in plan {
            let req = UpdateContainerResourcesRequest {
                container_id: c.id.clone(),
                linux: Some(LinuxContainerResources {
                    cpuset_cpus: cpus.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            };
            match runtime.update_container_resources(req).await {
                Ok(_) => {
                    info!(uid = %c.pod_uid, container = %c.name, id = %c.id, cpuset = %cpus, "CPU manager updated the container's cpuset");
                    self.lock()
                        .last_pushed
                        .insert((c.pod_uid.clone(), c.name.clone()), cpus);
                }
                Err(e) => {
                    warn!(uid = %c.pod_uid, container = %c.name, id = %c.id, error = %e, "CPU manager failed to update the container's cpuset");
                }
            }
        }
    }

    /// The reconcile loop: every `cpuManagerReconcilePeriod` until `cancel`.
    pub async fn run(
        self,
        runtime: Arc<dyn RuntimeService>,
        inputs: ReconcileInputs,
        cancel: CancellationToken,
    ) {
        if self.policy == CpuManagerPolicy::None {
            return;
        }
        let mut tick = tokio::time::interval(self.reconcile_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let active = (inputs.active_pods)();
            let ready = (inputs.sources_ready)();
            self.reconcile(runtime.as_ref(), &active, ready, &inputs.cache)
                .await;
        }
    }
}

/// What the reconcile loop reads.
pub struct ReconcileInputs {
    /// Admitted, non-terminal pods.
    pub active_pods: Box<dyn Fn() -> Vec<Pod> + Send + Sync>,
    /// Whether every pod source has reported (stale state is only dropped then).
    pub sources_ready: Box<dyn Fn() -> bool + Send + Sync>,
    /// The PLEG's view of the runtime.
    pub cache: PodCache,
}

/// Admission of the CPU manager: a pod whose CPUs cannot be allocated is refused as upstream's
/// topology manager admit handler does.
pub struct CpuManagerAdmit(pub CpuManager);

impl AdmitHandler for CpuManagerAdmit {
    fn admit(&self, pod: &Pod, _active: &[&Pod]) -> Result<(), Rejection> {
        self.0.allocate_pod(pod).map_err(|e| Rejection {
            reason: "UnexpectedAdmissionError".to_owned(),
            message: format!("Allocate failed due to {e}, which is unexpected"),
        })
    }
}

#[cfg(test)]
mod tests;
