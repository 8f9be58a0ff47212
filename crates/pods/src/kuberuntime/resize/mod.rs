//! kuberuntime::resize — in-place pod resize actuation (upstream `computePodResizeAction` and
//! `doPodResizeAction`). Receives the pod with its allocated resources, the runtime's view and
//! the resources last actuated per container; decides purely which running containers get a
//! CRI `UpdateContainerResources` (decreases ordered before increases), which must restart per
//! their `resizePolicy`, and in which order the pod cgroup and the containers change (a pod
//! limit grows before its containers and shrinks after them); then acts through CRI and the
//! container manager, and records what was actuated in the allocation manager.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use tracing::{info, warn};

use crate::allocation::resize_conditions::REASON_ERROR;
use crate::allocation::{AllocationManager, resources_equal};
use crate::cm::cgroups::ResourceConfig;
use crate::container::PodStatus;
use crate::kuberuntime::actions::{ContainerToKill, KillReason, PodActions};
use crate::kuberuntime::container_config::calculate_linux_resources;
use crate::kuberuntime::context::RuntimeContext;
use crate::qos::parse_quantity_nanos;
use crate::types::PodExt;

/// A resource whose resize is ordered on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeResource {
    Cpu,
    Memory,
}

/// The cpu/memory values of a container that the runtime enforces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceValues {
    pub cpu_request_milli: i64,
    pub cpu_limit_milli: i64,
    pub memory_limit: i64,
    pub memory_request: i64,
}

fn value(r: Option<&ResourceRequirements>, limits: bool, name: &str, milli: bool) -> i64 {
    let map = r.and_then(|r| {
        if limits {
            r.limits.as_ref()
        } else {
            r.requests.as_ref()
        }
    });
    let n = map
        .and_then(|m| m.get(name))
        .and_then(|q| parse_quantity_nanos(&q.0))
        .unwrap_or(0);
    let div = if milli { 1_000_000 } else { 1_000_000_000 };
    // Round up, as `MilliValue()`/`Value()`.
    i64::try_from((n + div - 1).div_euclid(div)).unwrap_or(i64::MAX)
}

impl ResourceValues {
    pub fn of(r: Option<&ResourceRequirements>) -> Self {
        let cpu_limit_milli = value(r, true, "cpu", true);
        let mut cpu_request_milli = value(r, false, "cpu", true);
        // A missing request defaults to the limit (as the API server defaults new pods).
        if cpu_request_milli == 0 {
            cpu_request_milli = cpu_limit_milli;
        }
        Self {
            cpu_request_milli,
            cpu_limit_milli,
            memory_limit: value(r, true, "memory", false),
            memory_request: value(r, false, "memory", false),
        }
    }
}

/// One running container whose resources change in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUpdate {
    pub name: String,
    pub container_id: String,
    pub desired: ResourceValues,
    pub current: ResourceValues,
}

/// What a resize asks of the runtime (upstream `podActions.ContainersToUpdate` and the
/// resize-driven entries of `ContainersToKill`/`ContainersToStart`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResizeAction {
    /// Memory limit updates, decreases first.
    pub memory: Vec<ContainerUpdate>,
    /// CPU limit (or, unchanged limit, request) updates, decreases first.
    pub cpu: Vec<ContainerUpdate>,
    /// Containers to restart with their new resources: (container ID, name, is_init, index).
    pub restart: Vec<(String, String, bool, usize)>,
    /// Containers whose change needs no runtime call (memory request only): recorded as
    /// actuated at once.
    pub actuate_only: Vec<String>,
    /// The pod cgroup must follow (upstream `UpdatePodResources`).
    pub update_pod_resources: bool,
}

impl ResizeAction {
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty()
            && self.cpu.is_empty()
            && self.restart.is_empty()
            && self.actuate_only.is_empty()
            && !self.update_pod_resources
    }
}

/// The container's policy for `resource` (`NotRequired` when unset).
fn restart_required(c: &Container, resource: &str) -> bool {
    c.resize_policy
        .iter()
        .flatten()
        .find(|p| p.resource_name == resource)
        .is_some_and(|p| p.restart_policy == "RestartContainer")
}

/// Puts a decrease before every increase, increases after (upstream's prepend/append).
fn push_ordered(list: &mut Vec<ContainerUpdate>, u: ContainerUpdate, desired: i64, current: i64) {
    if desired < current {
        list.insert(0, u);
    } else {
        list.push(u);
    }
}

/// Upstream `computePodResizeAction` for every running resizable container (regular
/// containers and sidecars) of `pod` (which carries the allocated resources). `actuated`
/// gives what each container runs with; a container without a record is taken as running
/// with its allocation (it was started before records were kept), so it is never restarted
/// or updated on a guess.
pub fn compute_pod_resize_action(
    pod: &Pod,
    status: &PodStatus,
    actuated: &dyn Fn(&str) -> Option<ResourceRequirements>,
) -> ResizeAction {
    let mut action = ResizeAction::default();
    let Some(spec) = pod.spec.as_ref() else {
        return action;
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"))
        .map(|(i, c)| (true, i, c));
    let regular = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (false, i, c));
    for (is_init, idx, c) in sidecars.chain(regular) {
        let Some(running) = status.find_container(&c.name).filter(|s| s.is_running()) else {
            continue;
        };
        let Some(current_res) = actuated(&c.name) else {
            continue;
        };
        if resources_equal(Some(&current_res), c.resources.as_ref()) {
            continue;
        }
        let desired = ResourceValues::of(c.resources.as_ref());
        let current = ResourceValues::of(Some(&current_res));
        let mem_lim = desired.memory_limit != current.memory_limit;
        let cpu_lim = desired.cpu_limit_milli != current.cpu_limit_milli;
        let cpu_req = desired.cpu_request_milli != current.cpu_request_milli;
        if !mem_lim && !cpu_lim && !cpu_req {
            action.actuate_only.push(c.name.clone());
            continue;
        }
        let restart = (mem_lim && restart_required(c, "memory"))
            || ((cpu_lim || cpu_req) && restart_required(c, "cpu"));
        action.update_pod_resources = true;
        if restart {
            action
                .restart
                .push((running.id.clone(), c.name.clone(), is_init, idx));
            continue;
        }
        let update = ContainerUpdate {
            name: c.name.clone(),
            container_id: running.id.clone(),
            desired,
            current,
        };
        if mem_lim {
            push_ordered(
                &mut action.memory,
                update.clone(),
                desired.memory_limit,
                current.memory_limit,
            );
        }
        if cpu_lim {
            push_ordered(
                &mut action.cpu,
                update,
                desired.cpu_limit_milli,
                current.cpu_limit_milli,
            );
        } else if cpu_req {
            push_ordered(
                &mut action.cpu,
                update,
                desired.cpu_request_milli,
                current.cpu_request_milli,
            );
        }
    }
    action
}

/// Adds the containers a resize restarts to the sync's kill and start lists.
pub fn merge_restarts(actions: &mut PodActions, resize: &ResizeAction) {
    for (id, name, is_init, idx) in &resize.restart {
        actions.containers_to_kill.insert(
            id.clone(),
            ContainerToKill {
                name: name.clone(),
                reason: KillReason::None,
                message: format!("Container {name} resize requires restart"),
            },
        );
        let list = if *is_init {
            &mut actions.init_containers_to_start
        } else {
            &mut actions.containers_to_start
        };
        if !list.contains(idx) {
            list.push(*idx);
            list.sort_unstable();
        }
    }
}

/// One step of the resize, in the order it must run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResizeStep {
    /// Write to the pod cgroup: the limit (quota+period / memory) or the request (shares).
    PodCgroup {
        resource: ResizeResource,
        limit: bool,
        config: ResourceConfig,
    },
    /// `UpdateContainerResources` for the action's containers of this resource, in order.
    Containers(ResizeResource),
}

/// `None`/-1/0 quota means unlimited: compare as the largest value.
fn quota_rank(q: Option<i64>) -> i64 {
    match q {
        Some(q) if q > 0 => q,
        _ => i64::MAX,
    }
}

fn memory_rank(m: Option<i64>) -> i64 {
    match m {
        Some(m) if m > 0 => m,
        _ => i64::MAX,
    }
}

/// Upstream `doPodResizeAction`'s ordering: per resource (memory first, then cpu), a pod
/// limit that grows and a pod request that grows are written before the containers change,
/// a request that shrinks and then a limit that shrinks after them. `current` is the pod
/// cgroup's present setting, `new` what the allocated pod calls for (an unset new limit keeps
/// the current one).
pub fn resize_steps(
    current: &ResourceConfig,
    new: &ResourceConfig,
    action: &ResizeAction,
) -> Vec<ResizeStep> {
    let mut steps = Vec::new();
    if !action.memory.is_empty() || action.update_pod_resources {
        let (cur, want) = (
            memory_rank(current.memory),
            memory_rank(new.memory.or(current.memory)),
        );
        let step = ResizeStep::PodCgroup {
            resource: ResizeResource::Memory,
            limit: true,
            config: ResourceConfig {
                memory: new.memory.or(current.memory),
                ..Default::default()
            },
        };
        if want > cur {
            steps.push(step.clone());
        }
        if !action.memory.is_empty() {
            steps.push(ResizeStep::Containers(ResizeResource::Memory));
        }
        if want < cur {
            steps.push(step);
        }
    }
    if !action.cpu.is_empty() || action.update_pod_resources {
        let new_quota = new.cpu_quota.or(current.cpu_quota);
        let (cur_lim, want_lim) = (quota_rank(current.cpu_quota), quota_rank(new_quota));
        let (cur_req, want_req) = (current.cpu_shares.unwrap_or(0), new.cpu_shares.unwrap_or(0));
        let limit = ResizeStep::PodCgroup {
            resource: ResizeResource::Cpu,
            limit: true,
            config: ResourceConfig {
                cpu_quota: new_quota,
                cpu_period: new.cpu_period.or(current.cpu_period),
                ..Default::default()
            },
        };
        let request = ResizeStep::PodCgroup {
            resource: ResizeResource::Cpu,
            limit: false,
            config: ResourceConfig {
                cpu_shares: new.cpu_shares,
                ..Default::default()
            },
        };
        if want_lim > cur_lim {
            steps.push(limit.clone());
        }
        if want_req > cur_req {
            steps.push(request.clone());
        }
        if !action.cpu.is_empty() {
            steps.push(ResizeStep::Containers(ResizeResource::Cpu));
        }
        if want_req < cur_req {
            steps.push(request);
        }
        if want_lim < cur_lim {
            steps.push(limit);
        }
    }
    steps
}

/// The pod as it currently runs: each container with its actuated resources when recorded.
fn actuated_pod(pod: &Pod, actuated: &dyn Fn(&str) -> Option<ResourceRequirements>) -> Pod {
    let mut out = pod.clone();
    if let Some(spec) = out.spec.as_mut() {
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            if let Some(r) = actuated(&c.name) {
                c.resources = Some(r);
            }
        }
    }
    out
}

/// The resources sent for one container update: the resized resource at its desired value,
/// the other at its current one (upstream `updatePodContainerResources`).
fn update_values(
    u: &ContainerUpdate,
    resource: ResizeResource,
    current: ResourceValues,
) -> ResourceValues {
    match resource {
        ResizeResource::Memory => ResourceValues {
            memory_limit: u.desired.memory_limit,
            memory_request: u.desired.memory_request,
            ..current
        },
        ResizeResource::Cpu => ResourceValues {
            cpu_limit_milli: u.desired.cpu_limit_milli,
            cpu_request_milli: u.desired.cpu_request_milli,
            ..current
        },
    }
}

impl RuntimeContext {
    /// The pod to act on for this sync: admits its allocation if new, allocates a pending
    /// resize when it fits, and keeps `PodResizeInProgress` in line with what was actuated.
    /// `None` without an allocation manager (the desired spec is used as is).
    pub(crate) fn allocated_pod(&self, pod: &Pod, status: &PodStatus) -> Option<Pod> {
        let alloc = self.allocation.as_ref()?;
        let now = self.clock.now();
        if !alloc.is_pod_allocated(pod.uid()) {
            alloc.add_pod(pod);
        }
        let allocated = alloc.handle_pod_resources_resize(pod, now);
        let running = status.running_containers().map(|c| c.name.as_str());
        if alloc.is_pod_resize_in_progress(&allocated, running) {
            alloc
                .conditions()
                .set_in_progress(pod.uid(), "", "", false, now);
        } else {
            alloc.conditions().clear_in_progress(pod.uid());
        }
        Some(allocated)
    }

    /// The resize this sync must carry out (empty when there is nothing to resize).
    pub(crate) fn compute_resize(&self, pod: &Pod, status: &PodStatus) -> ResizeAction {
        let Some(alloc) = &self.allocation else {
            return ResizeAction::default();
        };
        let uid = pod.uid().to_owned();
        compute_pod_resize_action(pod, status, &|name| alloc.actuated_resources(&uid, name))
    }

    /// Records that a freshly started container runs with its (allocated) resources.
    pub(crate) fn record_actuated(&self, pod: &Pod, container: &Container) {
        if let Some(alloc) = &self.allocation
            && let Err(e) = alloc.set_actuated_resources(pod.uid(), container)
        {
            warn!(pod = %pod.full_name(), container = %container.name, error = %e, "failed to record actuated resources");
        }
    }

    /// Upstream `doPodResizeAction`, then records the actuated resources. On failure the
    /// pod's `PodResizeInProgress` carries reason `Error`; later syncs retry.
    pub(crate) async fn do_pod_resize_action(
        &self,
        pod: &Pod,
        action: &ResizeAction,
    ) -> Result<(), String> {
        let Some(alloc) = &self.allocation else {
            return Ok(());
        };
        let result = self.apply_resize(alloc, pod, action).await;
        match &result {
            Ok(()) => {
                info!(pod = %pod.full_name(), uid = %pod.uid(), "pod resize actuated");
            }
            Err(e) => {
                warn!(pod = %pod.full_name(), uid = %pod.uid(), error = %e, "pod resize failed");
                alloc.conditions().set_in_progress(
                    pod.uid(),
                    REASON_ERROR,
                    e,
                    true,
                    self.clock.now(),
                );
            }
        }
        result
    }

    async fn apply_resize(
        &self,
        alloc: &AllocationManager,
        pod: &Pod,
        action: &ResizeAction,
    ) -> Result<(), String> {
        let uid = pod.uid().to_owned();
        let steps = match &self.cgroups {
            Some(cm) => {
                let current = cm.pod_resource_config(&actuated_pod(pod, &|n| {
                    alloc.actuated_resources(&uid, n)
                }));
                resize_steps(&current, &cm.pod_resource_config(pod), action)
            }
            None => resize_steps(
                &ResourceConfig::default(),
                &ResourceConfig::default(),
                action,
            )
            .into_iter()
            .filter(|s| matches!(s, ResizeStep::Containers(_)))
            .collect(),
        };
        let mut current: BTreeMap<&str, ResourceValues> = action
            .memory
            .iter()
            .chain(&action.cpu)
            .map(|u| (u.name.as_str(), u.current))
            .collect();
        for step in steps {
            match step {
                ResizeStep::PodCgroup { config, .. } => {
                    let Some(cm) = self.cgroups.clone() else {
                        continue;
                    };
                    let p = pod.clone();
                    tokio::task::spawn_blocking(move || cm.set_pod_cgroup_config(&p, &config))
                        .await
                        .map_err(|e| format!("pod cgroup task failed: {e}"))?
                        .map_err(|e| e.to_string())?;
                }
                ResizeStep::Containers(resource) => {
                    let list = match resource {
                        ResizeResource::Memory => &action.memory,
                        ResizeResource::Cpu => &action.cpu,
                    };
                    for u in list {
                        let cur = current.get(u.name.as_str()).copied().unwrap_or(u.current);
                        let v = update_values(u, resource, cur);
                        let linux = calculate_linux_resources(
                            Some(i128::from(v.cpu_request_milli) * 1_000_000),
                            Some(i128::from(v.cpu_limit_milli) * 1_000_000),
                            (v.memory_limit > 0)
                                .then(|| i128::from(v.memory_limit) * 1_000_000_000),
                            &self.config.runtime_options,
                        );
                        let req = rkubelet_cri::api::UpdateContainerResourcesRequest {
                            container_id: u.container_id.clone(),
                            linux: Some(linux),
                            ..Default::default()
                        };
                        self.runtime
                            .update_container_resources(req)
                            .await
                            .map_err(|e| {
                                format!("failed to update resources of container {}: {e}", u.name)
                            })?;
                        current.insert(u.name.as_str(), v);
                    }
                }
            }
        }
        let spec = pod.spec.as_ref();
        let names: Vec<&str> = action
            .memory
            .iter()
            .chain(&action.cpu)
            .map(|u| u.name.as_str())
            .chain(action.actuate_only.iter().map(String::as_str))
            .collect();
        for c in spec
            .into_iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .filter(|c| names.contains(&c.name.as_str()))
        {
            alloc
                .set_actuated_resources(&uid, c)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
