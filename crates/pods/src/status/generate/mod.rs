//! status::generate — the API `PodStatus` the kubelet reports for a pod (upstream
//! `generateAPIPodStatus`, `convertToAPIContainerStatuses`, `getPhase`, the prober's
//! `UpdatePodStatus` and the status manager's condition-time/start-time bookkeeping).
//! Receives [`StatusInputs`] (spec, runtime view, previous status, sync errors, probe results,
//! the current time); emits a `k8s_openapi` `PodStatus`. Pure: time comes in as `now`.
//!
//! Timestamps are truncated to whole seconds, as the API (and upstream's status manager) stores
//! them, so regenerating an unchanged pod yields an identical status.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus as ApiContainerStatus, ContainerUser, HostIP,
    LinuxContainerUser, Pod, PodIP, PodStatus as ApiPodStatus, ResourceRequirements,
    VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::container::{ContainerState, ContainerStatus, ContainerUser as RuntimeUser, PodStatus};
use crate::env::sort_pod_ips;
use crate::kuberuntime::actions::{
    NoProber, ProbeResult, ProbeResults, has_any_regular_container_created,
    is_restartable_init_container, restart_policy, should_container_be_restarted,
};
use crate::kuberuntime::ephemeral::ephemeral_specs;
use crate::qos::pod_qos_class;
use crate::resources::{CPU, MEMORY, QuantityFormat, format_quantity, parse_milli};
use crate::types::PodExt;

mod conditions;
use conditions::conditions;
pub use conditions::need_to_reconcile_pod_readiness;

/// Waiting reason of a regular container that has not been created yet.
pub const CONTAINER_CREATING: &str = "ContainerCreating";
/// Waiting reason of regular containers while init containers run.
pub const POD_INITIALIZING: &str = "PodInitializing";
/// Reason for a container that vanished from the runtime.
pub const CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
pub const UNKNOWN_CONTAINER_STATUSES: &str = "UnknownContainerStatuses";
pub const POD_COMPLETED: &str = "PodCompleted";
pub const POD_FAILED: &str = "PodFailed";
pub const CONTAINERS_NOT_READY: &str = "ContainersNotReady";
pub const CONTAINERS_NOT_INITIALIZED: &str = "ContainersNotInitialized";
pub const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// Pod phases.
pub const PENDING: &str = "Pending";
pub const RUNNING: &str = "Running";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";

/// Condition types the kubelet owns (upstream `PodConditionsByKubelet` plus
/// `PodReadyToStartContainers`, whose gate is on by default).
const KUBELET_CONDITIONS: [&str; 7] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodResizeInProgress",
    "PodResizePending",
    "PodReadyToStartContainers",
];

/// Everything status generation looks at.
pub struct StatusInputs<'a> {
    pub pod: &'a Pod,
    /// The runtime's view of the pod.
    pub runtime: &'a PodStatus,
    /// The last status the status manager holds; `None` falls back to `pod.status`.
    pub old: Option<&'a ApiPodStatus>,
    /// Container name → (waiting reason, message) from the last sync, e.g.
    /// `("CrashLoopBackOff", "back-off 10s restarting failed container=c pod=p_ns(uid)")`.
    pub sync_errors: &'a BTreeMap<String, (String, String)>,
    /// The pod worker decided the pod is terminal (its containers will not restart).
    pub pod_is_terminal: bool,
    /// The node's IPs, primary first. Empty leaves `hostIP(s)` unset (upstream standalone).
    pub host_ips: &'a [String],
    /// Runtime name for container IDs (`containerd` → `containerd://<id>`).
    pub runtime_name: &'a str,
    pub now: DateTime<Utc>,
}

/// Builds the pod's API status (upstream `generateAPIPodStatus`) with no prober: running
/// containers are started and ready.
pub fn generate_api_pod_status(inp: &StatusInputs) -> ApiPodStatus {
    generate_api_pod_status_with_probes(inp, &NoProber)
}

/// [`generate_api_pod_status`] with startup/readiness results from the prober.
pub fn generate_api_pod_status_with_probes(
    inp: &StatusInputs,
    probes: &dyn ProbeResults,
) -> ApiPodStatus {
    let pod = inp.pod;
    let default_old = ApiPodStatus::default();
    let pod_status = pod.status.as_ref().unwrap_or(&default_old);
    let old = inp.old.unwrap_or(pod_status);
    let inits = init_specs(pod);
    let regulars = regular_specs(pod);
    let has_init = !inits.is_empty();

    let mut s = ApiPodStatus::default();
    let pod_ips = sort_pod_ips(&inp.runtime.ips, inp.host_ips);
    s.pod_ip = pod_ips.first().cloned();
    s.pod_ips =
        (!pod_ips.is_empty()).then(|| pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect());
    s.qos_class = Some(pod_qos_class(pod).to_owned());

    let mut regular = convert_statuses(
        inp,
        regulars,
        old.container_statuses.as_deref().unwrap_or_default(),
        has_init,
        false,
    );
    let mut init = convert_statuses(
        inp,
        inits,
        old.init_container_statuses.as_deref().unwrap_or_default(),
        has_init,
        true,
    );

    // Phase first (on the started values carried over from the previous status), then probes.
    let mut phase = get_phase(
        pod,
        &init,
        &regular,
        inp.pod_is_terminal,
        has_any_active_regular_container_started(pod, inp.runtime),
    );
    if !is_terminal(phase) {
        if let Some(p) = old.phase.as_deref().filter(|p| is_terminal(p)) {
            phase = static_phase(p);
        } else if let Some(p) = pod_status.phase.as_deref().filter(|p| is_terminal(p)) {
            phase = static_phase(p);
        }
    }
    if old.phase.as_deref() == Some(phase) {
        s.reason = old
            .reason
            .clone()
            .filter(|r| !r.is_empty())
            .or_else(|| pod_status.reason.clone());
        s.message = old
            .message
            .clone()
            .filter(|m| !m.is_empty())
            .or_else(|| pod_status.message.clone());
    }
    // The active deadline handler asks for eviction (upstream `PodSyncHandlers.ShouldEvict`).
    if past_active_deadline(pod, old.start_time.as_ref(), inp.now) {
        phase = "Failed";
        s.reason = Some(DEADLINE_EXCEEDED_REASON.to_owned());
        s.message = Some(DEADLINE_EXCEEDED_MESSAGE.to_owned());
    }
    // Pods never leave a terminal phase the API server already shows.
    if let Some(p) = pod_status.phase.as_deref().filter(|p| is_terminal(p)) {
        phase = static_phase(p);
    }
    s.phase = Some(phase.to_owned());

    apply_probe_results(probes, regulars, &mut regular, false);
    apply_probe_results(probes, inits, &mut init, true);
    s.container_statuses = Some(regular);
    s.init_container_statuses = Some(init);
    s.ephemeral_container_statuses = ephemeral_statuses(inp, old, has_init);

    s.conditions = Some(conditions(inp, old, pod_status, &s, phase));

    if let Some(primary) = inp.host_ips.first() {
        s.host_ip = Some(primary.clone());
        s.host_ips = Some(
            inp.host_ips
                .iter()
                .take(2)
                .map(|ip| HostIP { ip: ip.clone() })
                .collect(),
        );
        if pod
            .spec
            .as_ref()
            .and_then(|sp| sp.host_network)
            .unwrap_or(false)
        {
            if s.pod_ip.is_none() {
                s.pod_ip = Some(primary.clone());
                s.pod_ips = Some(vec![PodIP {
                    ip: primary.clone(),
                }]);
            }
            if let (Some(second), Some(ips)) = (inp.host_ips.get(1), s.pod_ips.as_mut())
                && ips.len() == 1
                && is_v6(&ips[0].ip) != is_v6(second)
            {
                ips.push(PodIP { ip: second.clone() });
            }
        }
    }

    s.start_time = old.start_time.clone().or_else(|| k8s_time(Some(inp.now)));
    s.observed_generation = observed_generation(pod);
    s
}

/// The `metadata.generation` the status reflects (upstream `CalculatePodStatusObservedGeneration`
/// with `PodObservedGenerationTracking`, on by default since 1.34); unset for generation 0.
pub fn observed_generation(pod: &Pod) -> Option<i64> {
    pod.metadata.generation.filter(|g| *g != 0)
}

/// Upstream's `cm.MinShares` as millicores: CPU requests at or below it look alike.
const MIN_SHARES_MILLI: i128 = 2;
/// Upstream's `cm.MinMilliCPULimit`: the smallest CFS quota (1 ms per 100 ms period).
const MIN_MILLI_CPU_LIMIT: i128 = 10;

/// Upstream `convertContainerStatusResources`: the spec's resources, with the CPU and memory
/// the runtime reports for a running container (or, when it reports none, the values of the
/// previous status of the same running container). A container that does not run shows its
/// spec's resources.
fn status_resources(
    spec: &Container,
    cs: &ContainerStatus,
    container_id: &str,
    old: Option<&ApiContainerStatus>,
) -> ResourceRequirements {
    let mut res = spec.resources.clone().unwrap_or_default();
    if cs.state != ContainerState::Running {
        return res;
    }
    let old = old
        .filter(|o| o.state.as_ref().is_some_and(|s| s.running.is_some()))
        .filter(|o| o.container_id.as_deref() == Some(container_id))
        .and_then(|o| o.resources.as_ref());
    let keep_old = |list: &mut BTreeMap<String, Quantity>,
                    old: Option<&BTreeMap<String, Quantity>>,
                    name: &str| {
        if let Some(q) = old.and_then(|l| l.get(name)) {
            list.insert(name.to_owned(), q.clone());
        }
    };
    let milli_of = |list: &BTreeMap<String, Quantity>| {
        list.get(CPU).and_then(|q| parse_milli(&q.0)).unwrap_or(0)
    };
    let runtime = cs.resources.clone().unwrap_or_default();
    if let Some(limits) = res.limits.as_mut() {
        let old_limits = old.and_then(|o| o.limits.as_ref());
        match runtime.cpu_limit_milli.map(i128::from) {
            Some(m) if m > MIN_MILLI_CPU_LIMIT || milli_of(limits) > MIN_MILLI_CPU_LIMIT => {
                limits.insert(CPU.into(), cpu_quantity(m));
            }
            Some(_) => {}
            None => keep_old(limits, old_limits, CPU),
        }
        match runtime.memory_limit_bytes {
            Some(b) => {
                limits.insert(MEMORY.into(), memory_quantity(b));
            }
            None => keep_old(limits, old_limits, MEMORY),
        }
    }
    if let Some(requests) = res.requests.as_mut() {
        let old_requests = old.and_then(|o| o.requests.as_ref());
        match runtime.cpu_request_milli.map(i128::from) {
            Some(m) if m > MIN_SHARES_MILLI || milli_of(requests) > MIN_SHARES_MILLI => {
                requests.insert(CPU.into(), cpu_quantity(m));
            }
            Some(_) => {}
            None => keep_old(requests, old_requests, CPU),
        }
        // Runtimes do not report memory requests.
        keep_old(requests, old_requests, MEMORY);
    }
    res
}

fn cpu_quantity(milli: i128) -> Quantity {
    Quantity(format_quantity(milli, QuantityFormat::DecimalSI))
}

fn memory_quantity(bytes: i64) -> Quantity {
    Quantity(format_quantity(
        i128::from(bytes) * 1000,
        QuantityFormat::BinarySI,
    ))
}

/// Upstream `convertContainerStatusUser`.
fn status_user(user: &RuntimeUser) -> ContainerUser {
    ContainerUser {
        linux: user.linux.as_ref().map(|l| LinuxContainerUser {
            uid: l.uid,
            gid: l.gid,
            supplemental_groups: Some(l.supplemental_groups.clone()).filter(|g| !g.is_empty()),
        }),
    }
}

/// Upstream's third `convertToAPIContainerStatuses` call: ephemeral containers as regular
/// ones (sorted by name, waiting `ContainerCreating`/`PodInitializing` until started, the last
/// start error as the waiting reason). The prober never sets their `started`/`ready`. `None`
/// when the pod has none (the API omits the empty list).
fn ephemeral_statuses(
    inp: &StatusInputs,
    old: &ApiPodStatus,
    has_init: bool,
) -> Option<Vec<ApiContainerStatus>> {
    let specs = ephemeral_specs(inp.pod);
    if specs.is_empty() {
        return None;
    }
    Some(convert_statuses(
        inp,
        &specs,
        old.ephemeral_container_statuses
            .as_deref()
            .unwrap_or_default(),
        has_init,
        false,
    ))
}

/// Pod reason once `activeDeadlineSeconds` passed.
pub const DEADLINE_EXCEEDED_REASON: &str = "DeadlineExceeded";
/// Pod message once `activeDeadlineSeconds` passed (upstream `activeDeadlineHandler`).
pub const DEADLINE_EXCEEDED_MESSAGE: &str =
    "Pod was active on the node longer than the specified deadline";

/// Upstream `pastActiveDeadline`: the pod has run at least `activeDeadlineSeconds` since the
/// start time the status manager recorded.
pub fn past_active_deadline(pod: &Pod, start_time: Option<&Time>, now: DateTime<Utc>) -> bool {
    let Some(deadline) = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds) else {
        return false;
    };
    let Some(start) = start_time else {
        return false;
    };
    let elapsed_ms = now.timestamp_millis() - start.0.as_millisecond();
    elapsed_ms >= deadline.saturating_mul(1000)
}

/// Upstream `getPhase`, with `pod_has_initialized` meaning a regular container of the current
/// sandbox exists (restarting sidecars don't send an initialized pod back to Pending).
pub fn get_phase(
    pod: &Pod,
    init: &[ApiContainerStatus],
    regular: &[ApiContainerStatus],
    pod_is_terminal: bool,
    pod_has_initialized: bool,
) -> &'static str {
    let find = |list: &'_ [ApiContainerStatus], name: &str| -> Option<ApiContainerStatus> {
        list.iter().find(|s| s.name == name).cloned()
    };
    let state_of = |s: &ApiContainerStatus| s.state.clone().unwrap_or_default();
    let last_terminated = |s: &ApiContainerStatus| {
        s.last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .map(|t| t.exit_code)
    };

    let mut pending_sidecars = 0;
    let mut pending_inits = 0;
    let mut failed_inits = 0;
    for c in init_specs(pod)
        .iter()
        .filter(|c| !is_restartable_init_container(c))
    {
        let Some(st) = find(init, &c.name) else {
            pending_inits += 1;
            continue;
        };
        let state = state_of(&st);
        if state.running.is_some() {
            pending_inits += 1;
        } else if let Some(t) = &state.terminated {
            if t.exit_code != 0 {
                failed_inits += 1;
            }
        } else if state.waiting.is_some() {
            match last_terminated(&st) {
                Some(code) if code != 0 => failed_inits += 1,
                Some(_) => {}
                None => pending_inits += 1,
            }
        } else {
            pending_inits += 1;
        }
    }

    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in init_specs(pod)
        .iter()
        .filter(|c| is_restartable_init_container(c))
    {
        let Some(st) = find(init, &c.name) else {
            unknown += 1;
            continue;
        };
        let state = state_of(&st);
        if state.running.is_some() {
            if st.started != Some(true) {
                pending_sidecars += 1;
            }
            running += 1;
        } else if state.terminated.is_some() {
            // Terminated sidecars don't count toward the phase.
        } else if state.waiting.is_some() {
            if last_terminated(&st).is_none() {
                pending_sidecars += 1;
                waiting += 1;
            }
        } else {
            pending_sidecars += 1;
            unknown += 1;
        }
    }
    for c in regular_specs(pod) {
        let Some(st) = find(regular, &c.name) else {
            unknown += 1;
            continue;
        };
        let state = state_of(&st);
        if state.running.is_some() {
            running += 1;
        } else if let Some(t) = &state.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if state.waiting.is_some() {
            if last_terminated(&st).is_some() {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }

    let policy = restart_policy(pod);
    if failed_inits > 0 && policy == "Never" {
        return FAILED;
    }
    if pending_inits > 0 || (pending_sidecars > 0 && !pod_has_initialized) || waiting > 0 {
        return PENDING;
    }
    if running > 0 && unknown == 0 {
        return RUNNING;
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        let is_static = pod.source().is_some_and(|s| s.is_static());
        if pod_is_terminal && !is_static {
            return if stopped == succeeded {
                SUCCEEDED
            } else {
                FAILED
            };
        }
        if policy == "Always" {
            return RUNNING;
        }
        if stopped == succeeded {
            return SUCCEEDED;
        }
        if policy == "Never" {
            return FAILED;
        }
        return RUNNING;
    }
    PENDING
}

/// Upstream `HasAnyActiveRegularContainerStarted`: a regular container belongs to the newest
/// sandbox, if that sandbox is ready.
pub fn has_any_active_regular_container_started(pod: &Pod, runtime: &PodStatus) -> bool {
    let Some(active) = runtime.sandbox_statuses.first().filter(|s| s.ready) else {
        return false;
    };
    runtime
        .container_statuses
        .iter()
        .filter(|c| c.sandbox_id == active.id)
        .any(|c| regular_specs(pod).iter().any(|spec| spec.name == c.name))
}

fn init_specs(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
}

fn regular_specs(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
}

fn is_terminal(phase: &str) -> bool {
    phase == SUCCEEDED || phase == FAILED
}

fn static_phase(phase: &str) -> &'static str {
    match phase {
        SUCCEEDED => SUCCEEDED,
        FAILED => FAILED,
        RUNNING => RUNNING,
        _ => PENDING,
    }
}

fn is_v6(ip: &str) -> bool {
    ip.contains(':')
}

use crate::clock::k8s_time;

fn waiting(reason: Option<&str>, message: Option<&str>) -> ApiState {
    ApiState {
        waiting: Some(ContainerStateWaiting {
            reason: reason.map(str::to_owned),
            message: message.map(str::to_owned),
        }),
        ..ApiState::default()
    }
}

fn terminated_unknown(message: &str) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: 137,
        reason: Some(CONTAINER_STATUS_UNKNOWN.into()),
        message: Some(message.into()),
        ..ContainerStateTerminated::default()
    }
}

/// Upstream `convertToAPIContainerStatuses` for one list (regular or init containers).
fn convert_statuses(
    inp: &StatusInputs,
    specs: &[Container],
    previous: &[ApiContainerStatus],
    has_init: bool,
    is_init: bool,
) -> Vec<ApiContainerStatus> {
    let pod = inp.pod;
    let old: HashMap<&str, &ApiContainerStatus> =
        previous.iter().map(|s| (s.name.as_str(), s)).collect();
    let default_reason = if has_init {
        POD_INITIALIZING
    } else {
        CONTAINER_CREATING
    };

    // Defaults: waiting, carrying restart count and last state (or an old terminated status).
    let mut statuses: Vec<ApiContainerStatus> = specs
        .iter()
        .map(|c| match old.get(c.name.as_str()) {
            Some(o) if o.state.as_ref().is_some_and(|s| s.terminated.is_some()) => (*o).clone(),
            o => ApiContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                state: Some(waiting(Some(default_reason), None)),
                restart_count: o.map_or(0, |o| o.restart_count),
                last_state: o.and_then(|o| o.last_state.clone()),
                volume_mounts: volume_mount_statuses(c),
                ..ApiContainerStatus::default()
            },
        })
        .collect();
    let index: HashMap<&str, usize> = specs
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();

    // Containers the runtime lost but that used to run: show them as stopped, not waiting.
    for (i, c) in specs.iter().enumerate() {
        if inp.runtime.find_container(&c.name).is_some() {
            continue;
        }
        let Some(o) = old.get(c.name.as_str()) else {
            continue;
        };
        let ostate = o.state.clone().unwrap_or_default();
        if ostate.terminated.is_some() || ostate.running.is_none() {
            continue;
        }
        let st = &mut statuses[i];
        let is_default = st
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .is_some_and(|w| w.reason.as_deref() == Some(default_reason));
        let has_last = st
            .last_state
            .as_ref()
            .is_some_and(|l| l.terminated.is_some());
        if !is_default || has_last {
            continue;
        }
        st.last_state = Some(ApiState {
            terminated: Some(terminated_unknown(
                "The container could not be located when the pod was deleted.  The container used to be Running",
            )),
            ..ApiState::default()
        });
        if pod.metadata.deletion_timestamp.is_none() {
            st.restart_count += 1;
        }
    }

    // The newest runtime instance sets the state, the one before it the last state.
    let mut runtime: Vec<&ContainerStatus> = inp.runtime.container_statuses.iter().collect();
    runtime.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for cs in runtime {
        let Some(&i) = index.get(cs.name.as_str()) else {
            continue;
        };
        let count = seen.entry(cs.name.as_str()).or_insert(0);
        if *count >= 2 {
            continue;
        }
        let converted = convert_one(inp, cs, old.get(cs.name.as_str()).copied(), &specs[i]);
        if *count == 0 {
            statuses[i] = converted;
        } else {
            statuses[i].last_state = converted.state;
        }
        *count += 1;
    }

    // Containers that will be (re)started show why they are waiting.
    for (i, c) in specs.iter().enumerate() {
        if is_init {
            let newest = inp.runtime.find_container(&c.name);
            if newest.is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == 0) {
                continue;
            }
            let is_waiting = statuses[i]
                .state
                .as_ref()
                .is_some_and(|s| s.waiting.is_some());
            if newest.is_none()
                && !is_restartable_init_container(c)
                && has_any_regular_container_created(pod, inp.runtime)
                && is_waiting
            {
                statuses[i].state = Some(ApiState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 0,
                        reason: Some("Completed".into()),
                        message: Some("Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally".into()),
                        ..ContainerStateTerminated::default()
                    }),
                    ..ApiState::default()
                });
                continue;
            }
        }
        if !should_container_be_restarted(c, pod, inp.runtime) {
            continue;
        }
        let Some((reason, message)) = inp.sync_errors.get(&c.name) else {
            continue;
        };
        let st = &mut statuses[i];
        if st.state.as_ref().is_some_and(|s| s.terminated.is_some()) {
            st.last_state = st.state.clone();
        }
        st.state = Some(waiting(Some(reason), Some(message)));
    }

    if !is_init {
        statuses.sort_by(|a, b| a.name.cmp(&b.name));
    }
    statuses
}

/// Upstream `convertContainerStatus`: one runtime container as an API status.
fn convert_one(
    inp: &StatusInputs,
    cs: &ContainerStatus,
    old: Option<&ApiContainerStatus>,
    spec: &Container,
) -> ApiContainerStatus {
    let cid = format!("{}://{}", inp.runtime_name, cs.id);
    let mut status = ApiContainerStatus {
        name: cs.name.clone(),
        restart_count: i32::try_from(cs.restart_count).unwrap_or(i32::MAX),
        image: cs.image.clone(),
        image_id: cs.image_ref.clone(),
        container_id: Some(cid.clone()),
        volume_mounts: old.and_then(|o| o.volume_mounts.clone()),
        // As upstream 1.33+ (InPlacePodVerticalScaling, SupplementalGroupsPolicy): what the
        // container runs with, what it was given, and the identity it runs as.
        resources: Some(status_resources(spec, cs, &cid, old)),
        allocated_resources: spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .filter(|r| !r.is_empty()),
        user: cs.user.as_ref().map(status_user),
        ..ApiContainerStatus::default()
    };
    let old_running = old
        .and_then(|o| o.state.as_ref())
        .is_some_and(|s| s.running.is_some());
    let state = match cs.state {
        ContainerState::Running => {
            // Keep the previous started value until the prober result is applied.
            status.started = old.and_then(|o| o.started);
            ApiState {
                running: Some(ContainerStateRunning {
                    started_at: k8s_time(cs.started_at),
                }),
                ..ApiState::default()
            }
        }
        ContainerState::Created => waiting(None, None),
        ContainerState::Exited => ApiState {
            terminated: Some(ContainerStateTerminated {
                exit_code: cs.exit_code,
                reason: Some(cs.reason.clone()).filter(|r| !r.is_empty()),
                message: Some(cs.message.clone()).filter(|m| !m.is_empty()),
                started_at: k8s_time(cs.started_at),
                finished_at: k8s_time(cs.finished_at),
                container_id: Some(cid),
                signal: None,
            }),
            ..ApiState::default()
        },
        ContainerState::Unknown if old_running => {
            status.restart_count = old.map_or(0, |o| o.restart_count).saturating_add(1);
            ApiState {
                terminated: Some(terminated_unknown(
                    "The container could not be located when the pod was terminated",
                )),
                ..ApiState::default()
            }
        }
        ContainerState::Unknown => waiting(None, None),
    };
    status.state = Some(state);
    status
}

/// Volume mount statuses from the spec (recursive read-only is not supported by the runtime
/// handler as far as rkubelet knows, so read-only mounts report `Disabled`).
fn volume_mount_statuses(c: &Container) -> Option<Vec<VolumeMountStatus>> {
    let mounts = c.volume_mounts.as_ref()?;
    Some(
        mounts
            .iter()
            .map(|m| {
                let ro = m.read_only.unwrap_or(false);
                VolumeMountStatus {
                    name: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    read_only: ro.then_some(true),
                    recursive_read_only: ro.then(|| "Disabled".to_owned()),
                }
            })
            .collect(),
    )
}

/// The prober's `UpdatePodStatus`: `started` and `ready` per container.
fn apply_probe_results(
    probes: &dyn ProbeResults,
    specs: &[Container],
    statuses: &mut [ApiContainerStatus],
    is_init: bool,
) {
    for st in statuses.iter_mut() {
        let Some(spec) = specs.iter().find(|c| c.name == st.name) else {
            continue;
        };
        let running = st.state.as_ref().is_some_and(|s| s.running.is_some());
        let id = st
            .container_id
            .as_deref()
            .map(|id| id.split_once("://").map_or(id, |(_, rest)| rest))
            .unwrap_or_default()
            .to_owned();
        let started = running
            && match probes.startup(&id) {
                Some(r) => r == ProbeResult::Success,
                None => spec.startup_probe.is_none(),
            };
        st.started = Some(started);
        if is_init && !is_restartable_init_container(spec) {
            st.ready = st
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0);
            continue;
        }
        if !started {
            continue;
        }
        st.ready =
            probes.readiness(&id) == Some(ProbeResult::Success) || spec.readiness_probe.is_none();
    }
}

#[cfg(test)]
mod tests;
