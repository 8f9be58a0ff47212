//! allocation — the allocation manager of in-place pod resize (upstream
//! pkg/kubelet/allocation, `InPlacePodVerticalScaling`): owns the resources each admitted pod's
//! containers were allocated (the source of truth for what a pod may use, which can lag the
//! desired spec while a resize is pending) and the resources last actuated through the
//! runtime; both are checkpointed under the root dir (`allocated_pods_state`,
//! `actuated_pods_state`). Receives pods from the sync path and the Node's allocatable;
//! decides whether a resize fits (allocate), must wait (`Deferred`) or never can
//! (`Infeasible`); emits the allocated pod (desired spec with allocated resources) and the
//! `PodResizePending`/`PodResizeInProgress` conditions.
//!
//! Other modules read allocations through [`AllocationManager::allocated_resources`] (e.g. for
//! `containerStatuses[].allocatedResources`) and actuated values through
//! [`AllocationManager::actuated_resources`] (`containerStatuses[].resources`).

pub mod checkpoint;
pub mod feasibility;
pub mod resize_conditions;
pub mod status;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, Node, Pod, ResourceRequirements};
use tokio::sync::watch;
use tracing::{error, info, warn};

use self::checkpoint::{
    ACTUATED_FILE, ALLOCATED_FILE, Allocations, Checkpoint, CheckpointError, PodResources,
};
pub use self::feasibility::{ResizeVerdict, can_resize_pod, static_cpu_manager_forbids};
use crate::allocation::resize_conditions::{REASON_INFEASIBLE, ResizeConditions};
use crate::sync;
use crate::types::PodExt;

/// Failures of the allocation manager.
#[derive(Debug, thiserror::Error)]
pub enum AllocationError {
    #[error("failed to checkpoint pod resources: {0}")]
    Checkpoint(#[from] CheckpointError),
    /// Upstream `NewStateCheckpoint`'s refusal (the Go kubelet panics with it): a damaged
    /// record cannot be told from a resize in flight, so the operator drains and deletes.
    #[error(
        "could not restore state from checkpoint: {source}, please drain this node and delete pod resource information checkpoint file {path:?} before restarting Kubelet"
    )]
    Restore {
        path: std::path::PathBuf,
        source: CheckpointError,
    },
}

/// The currently active pods (admitted, not terminal) with their desired specs.
pub type ActivePods = Box<dyn Fn() -> Vec<Pod> + Send + Sync>;

struct Store {
    data: Allocations,
    file: Option<Checkpoint>,
}

impl Store {
    /// Loads the checkpoint (a missing one is an empty record); a damaged one is upstream's
    /// start-up error naming the file, never a panic and never a silent reset.
    fn open(file: Checkpoint) -> Result<Self, AllocationError> {
        let data = file.load().map_err(|source| AllocationError::Restore {
            path: file.path().to_path_buf(),
            source,
        })?;
        Ok(Self {
            data,
            file: Some(file),
        })
    }

    fn persist(&self) -> Result<(), AllocationError> {
        if let Some(cp) = &self.file {
            cp.store(&self.data)?;
        }
        Ok(())
    }

    fn set_pod(&mut self, uid: &str, res: PodResources) -> Result<(), AllocationError> {
        if self.data.get(uid) == Some(&res) {
            return Ok(());
        }
        self.data.insert(uid.to_owned(), res);
        self.persist()
    }

    fn set_container(
        &mut self,
        uid: &str,
        name: &str,
        res: ResourceRequirements,
    ) -> Result<(), AllocationError> {
        let pod = self.data.entry(uid.to_owned()).or_default();
        if pod.get(name) == Some(&res) {
            return Ok(());
        }
        pod.insert(name.to_owned(), res);
        self.persist()
    }

    fn remove(&mut self, uid: &str) -> Result<(), AllocationError> {
        if self.data.remove(uid).is_some() {
            self.persist()?;
        }
        Ok(())
    }
}

struct Inner {
    allocated: Store,
    actuated: Store,
}

/// Handle to the allocation manager; clones share state.
#[derive(Clone)]
pub struct AllocationManager {
    inner: Arc<Mutex<Inner>>,
    node: Option<watch::Receiver<Arc<Node>>>,
    active: Arc<OnceLock<ActivePods>>,
    conditions: ResizeConditions,
    /// `cpuManagerPolicy: static`: Guaranteed pods' CPU cannot be resized.
    static_cpu_manager: bool,
}

impl std::fmt::Debug for AllocationManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocationManager").finish_non_exhaustive()
    }
}

/// Whether a container's resources can be resized in place: regular containers and sidecars
/// (upstream `IsResizableContainer` without `InPlacePodVerticalScalingInitContainers`).
fn resizable_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let regular = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    init.chain(regular.iter())
}

/// Upstream `allocationFromPod`.
fn allocation_from_pod(pod: &Pod) -> PodResources {
    resizable_containers(pod)
        .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

/// A resource requirement with empty maps normalised away (the API drops them too).
fn normalized(r: Option<&ResourceRequirements>) -> ResourceRequirements {
    let mut r = r.cloned().unwrap_or_default();
    if r.requests.as_ref().is_some_and(|m| m.is_empty()) {
        r.requests = None;
    }
    if r.limits.as_ref().is_some_and(|m| m.is_empty()) {
        r.limits = None;
    }
    if r.claims.as_ref().is_some_and(|m| m.is_empty()) {
        r.claims = None;
    }
    r
}

/// Semantic equality of resource requirements: quantities compared by value (`1` == `1000m`).
pub fn resources_equal(a: Option<&ResourceRequirements>, b: Option<&ResourceRequirements>) -> bool {
    let (a, b) = (normalized(a), normalized(b));
    let same = |x: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                y: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        let x = x.clone().unwrap_or_default();
        let y = y.clone().unwrap_or_default();
        x.len() == y.len()
            && x.iter().all(|(k, v)| {
                y.get(k).is_some_and(|w| {
                    crate::qos::parse_quantity_nanos(&v.0) == crate::qos::parse_quantity_nanos(&w.0)
                })
            })
    };
    same(&a.requests, &b.requests) && same(&a.limits, &b.limits) && a.claims == b.claims
}

/// Upstream `updatePodFromAllocation`: the pod with each recorded container's resources
/// replaced by its allocation, and whether anything differed.
pub fn update_pod_from_allocation(pod: &Pod, alloc: &PodResources) -> (Pod, bool) {
    let mut out = pod.clone();
    let mut updated = false;
    if let Some(spec) = out.spec.as_mut() {
        let lists = [
            spec.containers.iter_mut().collect::<Vec<_>>(),
            spec.init_containers
                .iter_mut()
                .flatten()
                .collect::<Vec<_>>(),
        ];
        for c in lists.into_iter().flatten() {
            if let Some(a) = alloc.get(&c.name)
                && !resources_equal(c.resources.as_ref(), Some(a))
            {
                c.resources = Some(a.clone());
                updated = true;
            }
        }
    }
    (out, updated)
}

impl AllocationManager {
    /// A manager checkpointing to `dir` (the kubelet root dir); a damaged checkpoint there is
    /// [`AllocationError::Restore`].
    pub fn new(dir: &std::path::Path) -> Result<Self, AllocationError> {
        Ok(Self::build(
            Store::open(Checkpoint::new(dir, ALLOCATED_FILE))?,
            Store::open(Checkpoint::new(dir, ACTUATED_FILE))?,
        ))
    }

    /// A manager that keeps nothing on disk (tests).
    pub fn in_memory() -> Self {
        let empty = || Store {
            data: Allocations::new(),
            file: None,
        };
        Self::build(empty(), empty())
    }

    fn build(allocated: Store, actuated: Store) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                allocated,
                actuated,
            })),
            node: None,
            active: Arc::new(OnceLock::new()),
            conditions: ResizeConditions::new(),
            static_cpu_manager: false,
        }
    }

    /// The Node whose `status.allocatable` bounds resizes.
    pub fn with_node(mut self, node: watch::Receiver<Arc<Node>>) -> Self {
        self.node = Some(node);
        self
    }

    /// The static CPU manager is in use (Guaranteed pods' CPU resizes are infeasible).
    pub fn with_static_cpu_manager(mut self, on: bool) -> Self {
        self.static_cpu_manager = on;
        self
    }

    /// The active pods whose allocations count against a resize (set once, after the sync
    /// loop exists).
    pub fn set_active_pods(&self, active: ActivePods) {
        let _ = self.active.set(active);
    }

    /// The resize conditions this manager sets.
    pub fn conditions(&self) -> &ResizeConditions {
        &self.conditions
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        sync::lock(&self.inner)
    }

    /// The resources allocated to a container (upstream `GetContainerResourceAllocation`):
    /// what `containerStatuses[].allocatedResources` reports.
    pub fn allocated_resources(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Option<ResourceRequirements> {
        self.lock()
            .allocated
            .data
            .get(pod_uid)
            .and_then(|p| p.get(container))
            .cloned()
    }

    /// The resources last applied to a running container through the runtime (upstream
    /// `GetActuatedResources`): what `containerStatuses[].resources` reports.
    pub fn actuated_resources(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Option<ResourceRequirements> {
        self.lock()
            .actuated
            .data
            .get(pod_uid)
            .and_then(|p| p.get(container))
            .cloned()
    }

    /// Whether the pod has an allocation (upstream `IsPodAllocated`).
    pub fn is_pod_allocated(&self, pod_uid: &str) -> bool {
        self.lock().allocated.data.contains_key(pod_uid)
    }

    /// Upstream `UpdatePodFromAllocation`.
    pub fn update_pod_from_allocation(&self, pod: &Pod) -> (Pod, bool) {
        let inner = self.lock();
        match inner.allocated.data.get(pod.uid()) {
            Some(a) => update_pod_from_allocation(pod, a),
            None => (pod.clone(), false),
        }
    }

    /// Upstream `SetAllocatedResources`: checkpoints the pod's current container resources.
    pub fn set_allocated_resources(&self, pod: &Pod) -> Result<(), AllocationError> {
        self.lock()
            .allocated
            .set_pod(pod.uid(), allocation_from_pod(pod))
    }

    /// Upstream `SetActuatedResources`: the container now runs with `container.resources`.
    pub fn set_actuated_resources(
        &self,
        pod_uid: &str,
        container: &Container,
    ) -> Result<(), AllocationError> {
        self.lock().actuated.set_container(
            pod_uid,
            &container.name,
            container.resources.clone().unwrap_or_default(),
        )
    }

    /// Upstream `AddPod` after admission: records the admitted pod's resources unless an
    /// allocation exists already (a kubelet restart keeps the checkpointed one, the source of
    /// truth). Returns the pod with its allocated resources.
    pub fn add_pod(&self, pod: &Pod) -> Pod {
        let mut inner = self.lock();
        if let Some(a) = inner.allocated.data.get(pod.uid()) {
            return update_pod_from_allocation(pod, a).0;
        }
        if let Err(e) = inner.allocated.set_pod(pod.uid(), allocation_from_pod(pod)) {
            error!(pod = %pod.full_name(), uid = %pod.uid(), error = %e, "failed to record the pod's allocation");
        }
        pod.clone()
    }

    /// Upstream `RemovePod`: forgets a removed pod's allocations and conditions.
    pub fn remove_pod(&self, pod_uid: &str) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        for store in [&mut inner.allocated, &mut inner.actuated] {
            if let Err(e) = store.remove(pod_uid) {
                warn!(uid = %pod_uid, error = %e, "failed to delete pod allocation");
            }
        }
        drop(guard);
        self.conditions.remove(pod_uid);
    }

    /// Upstream `RemoveOrphanedPods`: forgets every pod not in `keep`.
    pub fn remove_orphaned_pods(&self, keep: &HashSet<String>) {
        let orphans: Vec<String> = {
            let inner = self.lock();
            inner
                .allocated
                .data
                .keys()
                .chain(inner.actuated.data.keys())
                .filter(|u| !keep.contains(*u))
                .cloned()
                .collect()
        };
        for uid in orphans {
            self.remove_pod(&uid);
        }
    }

    /// Other active pods with their allocated resources.
    fn allocated_others(&self, uid: &str) -> Vec<Pod> {
        let Some(active) = self.active.get() else {
            return Vec::new();
        };
        active()
            .into_iter()
            .filter(|p| p.uid() != uid)
            .map(|p| self.update_pod_from_allocation(&p).0)
            .collect()
    }

    /// Upstream `handlePodResourcesResize` on each sync of a running pod: when the desired
    /// resources differ from the allocation, allocate them if they fit (then the resize is in
    /// progress), else record why not (`PodResizePending` Deferred/Infeasible). Returns the
    /// pod to act on: the desired spec with the allocated resources.
    pub fn handle_pod_resources_resize(&self, pod: &Pod, now: DateTime<Utc>) -> Pod {
        let uid = pod.uid().to_owned();
        let (allocated, differs) = self.update_pod_from_allocation(pod);
        if !differs {
            self.conditions.clear_pending(&uid);
            return allocated;
        }
        let allocatable = self
            .node
            .as_ref()
            .and_then(|n| n.borrow().status.as_ref()?.allocatable.clone());
        let others = self.allocated_others(&uid);
        let other_refs: Vec<&Pod> = others.iter().collect();
        let verdict = match self
            .static_cpu_manager
            .then(|| static_cpu_manager_forbids(pod, &allocated))
            .flatten()
        {
            Some(msg) => ResizeVerdict::Infeasible(msg),
            None => can_resize_pod(pod, allocatable.as_ref(), &other_refs),
        };
        match verdict {
            ResizeVerdict::Fits => {
                if let Err(e) = self.set_allocated_resources(pod) {
                    error!(pod = %pod.full_name(), %uid, error = %e, "failed to allocate the resize; keeping the old allocation");
                    return allocated;
                }
                info!(pod = %pod.full_name(), %uid, "pod resize allocated");
                self.conditions.clear_pending(&uid);
                self.conditions.clear_in_progress(&uid);
                self.conditions.set_in_progress(&uid, "", "", true, now);
                pod.clone()
            }
            ResizeVerdict::Deferred(message) => {
                if self.conditions.set_pending(
                    &uid,
                    crate::allocation::resize_conditions::REASON_DEFERRED,
                    &message,
                    now,
                ) {
                    info!(pod = %pod.full_name(), %uid, %message, "pod resize deferred");
                }
                allocated
            }
            ResizeVerdict::Infeasible(message) => {
                if self
                    .conditions
                    .set_pending(&uid, REASON_INFEASIBLE, &message, now)
                {
                    warn!(pod = %pod.full_name(), %uid, %message, "pod resize infeasible");
                }
                allocated
            }
        }
    }

    /// Whether any running container of the (allocated) pod has not had its allocation
    /// actuated yet (upstream `isPodResizeInProgress`). A running container without an
    /// actuated record counts as actuated (it was started before records were kept).
    pub fn is_pod_resize_in_progress<'a>(
        &self,
        allocated_pod: &Pod,
        running: impl IntoIterator<Item = &'a str>,
    ) -> bool {
        let running: HashSet<&str> = running.into_iter().collect();
        let inner = self.lock();
        let actuated = inner.actuated.data.get(allocated_pod.uid());
        resizable_containers(allocated_pod)
            .filter(|c| running.contains(c.name.as_str()))
            .any(|c| {
                actuated
                    .and_then(|a| a.get(&c.name))
                    .is_some_and(|a| !resources_equal(Some(a), c.resources.as_ref()))
            })
    }
}

#[cfg(test)]
mod tests;
