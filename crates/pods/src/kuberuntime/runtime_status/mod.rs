//! Reads the runtime's view of pods (upstream `GetPodStatus`/`GetPods` of the kuberuntime
//! manager). Receives a `RuntimeService` and a pod identity; emits `PodStatus` (sandboxes and
//! containers decoded from their CRI labels/annotations, newest first, with the pod IPs and the
//! termination messages of exited containers) or the list of `RunningPod`s. Only reads: the CRI
//! list/status calls, plus termination-message files and container logs on the host, which a
//! pod can write: the `termination_message` module reads those only as regular files, bounded
//! in size and time ([`get_pod_status_within`] bounds a whole inspection for the PLEG).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use rkubelet_cri::api;
use rkubelet_cri::{CriError, RuntimeService};
use tracing::{debug, info};

mod termination_message;
use termination_message::termination_message;
pub use termination_message::{
    MAX_POD_TERMINATION_MESSAGE_LENGTH, MAX_TERMINATION_MESSAGE_LENGTH,
    MAX_TERMINATION_MESSAGE_LOG_LENGTH, MAX_TERMINATION_MESSAGE_LOG_LINES,
    bound_pod_termination_messages, log_tail_text,
};

use crate::container::{
    ContainerResources, ContainerState, ContainerStatus, ContainerUser, LinuxContainerUser,
    PodStatus, RunningPod, SandboxStatus, from_unix_nanos,
};
use crate::kuberuntime::labels::{
    POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL, container_info_from_annotations,
    container_info_from_labels,
};

/// How many sandbox (and, separately, container) status calls one pod inspection has in
/// flight at once.
const STATUS_CONCURRENCY: usize = 8;

/// Reading the runtime failed; names the CRI call and the pod.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeStatusError {
    #[error("listing the sandboxes of pod {pod}: {source}")]
    ListPodSandboxes {
        pod: String,
        #[source]
        source: CriError,
    },
    #[error("status of sandbox {sandbox_id} of pod {pod}: {source}")]
    SandboxStatus {
        pod: String,
        sandbox_id: String,
        #[source]
        source: CriError,
    },
    #[error("status of sandbox {sandbox_id} of pod {pod}: the runtime returned no status")]
    SandboxStatusMissing { pod: String, sandbox_id: String },
    #[error("listing the containers of pod {pod}: {source}")]
    ListPodContainers {
        pod: String,
        #[source]
        source: CriError,
    },
    #[error("status of container {container_id} of pod {pod}: {source}")]
    ContainerStatus {
        pod: String,
        container_id: String,
        #[source]
        source: CriError,
    },
    #[error("status of container {container_id} of pod {pod}: the runtime returned no status")]
    ContainerStatusMissing { pod: String, container_id: String },
    #[error("inspecting pod {pod}: no answer within {after:?}; the next relist tries again")]
    InspectionTimedOut { pod: String, after: Duration },
    #[error("listing all pod sandboxes: {0}")]
    ListAllSandboxes(#[source] CriError),
    #[error("listing all containers: {0}")]
    ListAllContainers(#[source] CriError),
}

/// A pod as `name_namespace(uid)`, upstream's `format.Pod`.
fn pod_ref(uid: &str, name: &str, namespace: &str) -> String {
    format!("{name}_{namespace}({uid})")
}

fn uid_selector(uid: &str) -> HashMap<String, String> {
    HashMap::from([(POD_UID_LABEL.to_string(), uid.to_string())])
}

/// How long the PLEG gives one pod's inspection ([`get_pod_status_within`]): a few CRI calls
/// and termination-message reads (each of those under its own, shorter deadline) that
/// normally take milliseconds. Past it the relist goes on without that pod, so one pod can
/// never hold back the events of the others.
pub const POD_INSPECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// [`get_pod_status`], given up after `deadline` ([`RuntimeStatusError::InspectionTimedOut`]).
pub async fn get_pod_status_within(
    rt: &dyn RuntimeService,
    uid: &str,
    name: &str,
    namespace: &str,
    deadline: Duration,
) -> Result<PodStatus, RuntimeStatusError> {
    match tokio::time::timeout(deadline, get_pod_status(rt, uid, name, namespace)).await {
        Ok(result) => result,
        Err(_) => Err(RuntimeStatusError::InspectionTimedOut {
            pod: pod_ref(uid, name, namespace),
            after: deadline,
        }),
    }
}

/// Everything the runtime knows about the pod `uid` (upstream `GetPodStatus`): its sandboxes
/// and containers (all attempts, newest first) and the IPs of its newest sandbox if that one is
/// ready. Objects that vanish between the list and the status call are skipped.
pub async fn get_pod_status(
    rt: &dyn RuntimeService,
    uid: &str,
    name: &str,
    namespace: &str,
) -> Result<PodStatus, RuntimeStatusError> {
    let pod = pod_ref(uid, name, namespace);

    // Both listings, then every status, are asked concurrently: the answers do not depend on
    // each other, and a pod's inspection is on the PLEG's critical path.
    let (sandboxes, containers) = tokio::join!(
        rt.list_pod_sandbox(api::ListPodSandboxRequest {
            filter: Some(api::PodSandboxFilter {
                label_selector: uid_selector(uid),
                ..Default::default()
            }),
        }),
        rt.list_containers(api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                label_selector: uid_selector(uid),
                ..Default::default()
            }),
        }),
    );
    let mut sandboxes = sandboxes
        .map_err(|source| RuntimeStatusError::ListPodSandboxes {
            pod: pod.clone(),
            source,
        })?
        .items;
    sandboxes.sort_by_key(|s| Reverse(s.created_at));
    let containers = containers
        .map_err(|source| RuntimeStatusError::ListPodContainers {
            pod: pod.clone(),
            source,
        })?
        .containers;

    // The calls are collected first: a stream over a borrowing closure would make this future
    // lose `Send` for the pod workers that await it.
    let sandbox_calls: Vec<_> = sandboxes
        .iter()
        .map(|sandbox| {
            rt.pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox.id.clone(),
                verbose: false,
            })
        })
        .collect();
    let container_calls: Vec<_> = containers
        .iter()
        .map(|container| {
            rt.container_status(api::ContainerStatusRequest {
                container_id: container.id.clone(),
                verbose: false,
            })
        })
        .collect();
    let sandbox_answers = stream::iter(sandbox_calls)
        .buffered(STATUS_CONCURRENCY)
        .collect::<Vec<_>>();
    let container_answers = stream::iter(container_calls)
        .buffered(STATUS_CONCURRENCY)
        .collect::<Vec<_>>();
    let (sandbox_answers, container_answers) = tokio::join!(sandbox_answers, container_answers);

    let mut sandbox_statuses = Vec::with_capacity(sandboxes.len());
    let mut ips = Vec::new();
    for (idx, (sandbox, answer)) in sandboxes.iter().zip(sandbox_answers).enumerate() {
        let resp = match answer {
            Ok(resp) => resp,
            Err(e) if e.is_not_found() => {
                debug!(pod = %pod, sandbox_id = %sandbox.id, "sandbox vanished between list and status; skipping it");
                continue;
            }
            Err(source) => {
                return Err(RuntimeStatusError::SandboxStatus {
                    pod,
                    sandbox_id: sandbox.id.clone(),
                    source,
                });
            }
        };
        let Some(status) = resp.status else {
            return Err(RuntimeStatusError::SandboxStatusMissing {
                pod,
                sandbox_id: sandbox.id.clone(),
            });
        };
        let converted = to_sandbox_status(&status);
        // Only the newest sandbox gives the pod its IPs, and only while it is ready.
        if idx == 0 && converted.ready {
            ips = determine_pod_ips(&pod, &status);
        }
        sandbox_statuses.push(converted);
    }

    let mut container_statuses = Vec::with_capacity(containers.len());
    let mut exited = Vec::new();
    for (container, answer) in containers.iter().zip(container_answers) {
        let resp = match answer {
            Ok(resp) => resp,
            Err(e) if e.is_not_found() => {
                debug!(pod = %pod, container_id = %container.id, "container vanished between list and status; skipping it");
                continue;
            }
            Err(source) => {
                return Err(RuntimeStatusError::ContainerStatus {
                    pod,
                    container_id: container.id.clone(),
                    source,
                });
            }
        };
        let Some(status) = resp.status else {
            return Err(RuntimeStatusError::ContainerStatusMissing {
                pod,
                container_id: container.id.clone(),
            });
        };
        let converted = to_container_status(&status, &container.pod_sandbox_id);
        if converted.state == ContainerState::Exited {
            exited.push((container_statuses.len(), status));
        }
        container_statuses.push(converted);
    }
    // The exited containers' messages are read at once: each read has its own deadline, so
    // the pod's inspection waits for the slowest of them, never for their sum.
    let reads: Vec<_> = exited
        .iter()
        .map(|(idx, status)| {
            let annotations = container_info_from_annotations(&status.annotations);
            let converted = &container_statuses[*idx];
            async move { termination_message(status, converted, &annotations).await }
        })
        .collect();
    let messages = futures::future::join_all(reads).await;
    for ((idx, _), extra) in exited.iter().zip(messages) {
        let converted = &mut container_statuses[*idx];
        if !extra.is_empty() {
            if !converted.message.is_empty() {
                converted.message.push_str(": ");
            }
            converted.message.push_str(&extra);
        }
    }
    container_statuses.sort_by_key(|c| Reverse(c.created_at));

    Ok(PodStatus {
        uid: uid.to_string(),
        name: name.to_string(),
        namespace: namespace.to_string(),
        ips,
        sandbox_statuses,
        container_statuses,
    })
}

/// One pod as the runtime lists it, with each sandbox's state (`RunningPod` only carries the
/// sandbox IDs): what the PLEG diffs between relists.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedPod {
    pub pod: RunningPod,
    /// `(sandbox ID, Running if ready else Exited)`, in the order of `pod.sandboxes`.
    pub sandbox_states: Vec<(String, ContainerState)>,
}

/// The pods the runtime has (upstream `GetPods`), grouped by the pod UID; with `all == false`
/// only ready sandboxes and running containers. Entries without the kubelet's pod UID label
/// are not the kubelet's and are ignored.
pub async fn list_pods(
    rt: &dyn RuntimeService,
    all: bool,
) -> Result<Vec<RunningPod>, RuntimeStatusError> {
    Ok(list_pods_with_sandbox_states(rt, all)
        .await?
        .into_iter()
        .map(|p| p.pod)
        .collect())
}

/// `list_pods` plus the state of every sandbox. Pods are ordered newest sandbox first (pods
/// with only containers last), their sandboxes and containers newest first.
pub async fn list_pods_with_sandbox_states(
    rt: &dyn RuntimeService,
    all: bool,
) -> Result<Vec<ListedPod>, RuntimeStatusError> {
    let sandbox_filter = (!all).then(|| api::PodSandboxFilter {
        state: Some(api::PodSandboxStateValue {
            state: api::PodSandboxState::SandboxReady as i32,
        }),
        ..Default::default()
    });
    let sandboxes = rt
        .list_pod_sandbox(api::ListPodSandboxRequest {
            filter: sandbox_filter,
        })
        .await
        .map_err(RuntimeStatusError::ListAllSandboxes)?
        .items;
    let container_filter = (!all).then(|| api::ContainerFilter {
        state: Some(api::ContainerStateValue {
            state: api::ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    });
    let containers = rt
        .list_containers(api::ListContainersRequest {
            filter: container_filter,
        })
        .await
        .map_err(RuntimeStatusError::ListAllContainers)?
        .containers;
    Ok(RuntimeListing {
        sandboxes,
        containers,
    }
    .pods())
}

/// The running part of an unfiltered listing, as `list_pods(rt, false)` would list it: each
/// pod's ready sandboxes and running containers; pods with neither are left out.
pub fn running_only(all: &[ListedPod]) -> Vec<RunningPod> {
    all.iter()
        .filter_map(|listed| {
            let sandboxes: Vec<String> = listed
                .sandbox_states
                .iter()
                .filter(|(_, state)| *state == ContainerState::Running)
                .map(|(id, _)| id.clone())
                .collect();
            let containers: Vec<ContainerStatus> = listed
                .pod
                .containers
                .iter()
                .filter(|c| c.state == ContainerState::Running)
                .cloned()
                .collect();
            (!sandboxes.is_empty() || !containers.is_empty()).then(|| RunningPod {
                uid: listed.pod.uid.clone(),
                name: listed.pod.name.clone(),
                namespace: listed.pod.namespace.clone(),
                sandboxes,
                containers,
            })
        })
        .collect()
}

/// Every sandbox and container the runtime has, as two CRI listings answered them (upstream
/// `GetPods(all)` before grouping). The PLEG diffs `entries`, which borrow from this, so an
/// unchanged pod costs no copy.
#[derive(Debug, Default)]
pub struct RuntimeListing {
    sandboxes: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
}

/// One kubelet-owned sandbox or container of a `RuntimeListing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedEntry<'a> {
    pub uid: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    pub id: &'a str,
    pub is_sandbox: bool,
    /// A sandbox is `Running` while ready, else `Exited`.
    pub state: ContainerState,
}

/// Lists every sandbox and container (one `ListPodSandbox`, one `ListContainers`, unfiltered).
pub async fn list_runtime(rt: &dyn RuntimeService) -> Result<RuntimeListing, RuntimeStatusError> {
    let sandboxes = rt
        .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
        .await
        .map_err(RuntimeStatusError::ListAllSandboxes)?
        .items;
    let containers = rt
        .list_containers(api::ListContainersRequest { filter: None })
        .await
        .map_err(RuntimeStatusError::ListAllContainers)?
        .containers;
    Ok(RuntimeListing {
        sandboxes,
        containers,
    })
}

impl RuntimeListing {
    /// Every sandbox, as `ListPodSandbox` answered.
    pub fn sandboxes(&self) -> &[api::PodSandbox] {
        &self.sandboxes
    }

    /// Every container, as `ListContainers` answered.
    pub fn containers(&self) -> &[api::Container] {
        &self.containers
    }

    /// The kubelet's pods in this listing, grouped by pod UID (what
    /// `list_pods_with_sandbox_states` answers): newest sandbox first, pods known only from
    /// their containers last; a pod's sandboxes and containers newest first.
    pub fn pods(&self) -> Vec<ListedPod> {
        let mut sandboxes: Vec<&api::PodSandbox> = self.sandboxes.iter().collect();
        sandboxes.sort_by_key(|s| Reverse(s.created_at));
        let mut containers: Vec<&api::Container> = self.containers.iter().collect();
        containers.sort_by_key(|c| Reverse(c.created_at));

        // Insertion order = newest sandbox first, then pods known only from their containers.
        let mut order: Vec<String> = Vec::new();
        let mut pods: HashMap<String, ListedPod> = HashMap::new();
        for sandbox in sandboxes {
            let Some(meta) = kubelet_sandbox(sandbox) else {
                continue;
            };
            let listed = entry(
                &mut pods,
                &mut order,
                &meta.uid,
                &meta.name,
                &meta.namespace,
            );
            listed.pod.sandboxes.push(sandbox.id.clone());
            listed
                .sandbox_states
                .push((sandbox.id.clone(), sandbox_state(sandbox.state)));
        }
        for container in containers {
            if kubelet_container_uid(container).is_none() {
                continue;
            }
            let info = container_info_from_labels(&container.labels);
            let listed = entry(
                &mut pods,
                &mut order,
                &info.pod_uid,
                &info.pod_name,
                &info.pod_namespace,
            );
            listed.pod.containers.push(listed_container(container));
        }
        order
            .into_iter()
            .filter_map(|uid| pods.remove(&uid))
            .collect()
    }

    /// The kubelet's sandboxes and containers (those with metadata and the pod UID label),
    /// ordered by pod UID, then a pod's containers before its sandboxes, then ID.
    pub fn entries(&self) -> Vec<ListedEntry<'_>> {
        let mut entries = Vec::with_capacity(self.sandboxes.len() + self.containers.len());
        for sandbox in &self.sandboxes {
            let Some(meta) = kubelet_sandbox(sandbox) else {
                continue;
            };
            entries.push(ListedEntry {
                uid: &meta.uid,
                name: &meta.name,
                namespace: &meta.namespace,
                id: &sandbox.id,
                is_sandbox: true,
                state: sandbox_state(sandbox.state),
            });
        }
        for container in &self.containers {
            let Some(uid) = kubelet_container_uid(container) else {
                continue;
            };
            let label = |key: &str| container.labels.get(key).map_or("", String::as_str);
            entries.push(ListedEntry {
                uid,
                name: label(POD_NAME_LABEL),
                namespace: label(POD_NAMESPACE_LABEL),
                id: &container.id,
                is_sandbox: false,
                state: container_state(container.state),
            });
        }
        entries
            .sort_unstable_by(|a, b| (a.uid, a.is_sandbox, a.id).cmp(&(b.uid, b.is_sandbox, b.id)));
        entries
    }
}

/// A sandbox's metadata when the sandbox is the kubelet's (it has metadata and the kubelet's
/// pod UID label); others are logged and skipped.
fn kubelet_sandbox(sandbox: &api::PodSandbox) -> Option<&api::PodSandboxMetadata> {
    let Some(meta) = sandbox.metadata.as_ref() else {
        debug!(sandbox_id = %sandbox.id, "sandbox has no metadata; ignoring it");
        return None;
    };
    if !sandbox.labels.contains_key(POD_UID_LABEL) {
        debug!(sandbox_id = %sandbox.id, "sandbox lacks the kubelet's labels; not ours");
        return None;
    }
    Some(meta)
}

/// A container's pod UID when the container is the kubelet's (it has metadata and the
/// kubelet's pod UID label); others are logged and skipped.
fn kubelet_container_uid(container: &api::Container) -> Option<&str> {
    if container.metadata.is_none() {
        debug!(container_id = %container.id, "container has no metadata; ignoring it");
        return None;
    }
    let Some(uid) = container.labels.get(POD_UID_LABEL) else {
        debug!(container_id = %container.id, "container lacks the kubelet's labels; not ours");
        return None;
    };
    Some(uid)
}

/// The `ListedPod` of `uid`, created (and its UID appended to `order`) on first sight.
fn entry<'a>(
    pods: &'a mut HashMap<String, ListedPod>,
    order: &mut Vec<String>,
    uid: &str,
    name: &str,
    namespace: &str,
) -> &'a mut ListedPod {
    if !pods.contains_key(uid) {
        order.push(uid.to_string());
    }
    pods.entry(uid.to_string()).or_insert_with(|| ListedPod {
        pod: RunningPod {
            uid: uid.to_string(),
            name: name.to_string(),
            namespace: namespace.to_string(),
            ..Default::default()
        },
        sandbox_states: Vec::new(),
    })
}

fn sandbox_state(state: i32) -> ContainerState {
    if state == api::PodSandboxState::SandboxReady as i32 {
        ContainerState::Running
    } else {
        ContainerState::Exited
    }
}

/// CRI container state → `ContainerState` (upstream `toKubeContainerState`).
pub fn container_state(state: i32) -> ContainerState {
    match api::ContainerState::try_from(state) {
        Ok(api::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(api::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(api::ContainerState::ContainerExited) => ContainerState::Exited,
        Ok(api::ContainerState::ContainerUnknown) | Err(_) => ContainerState::Unknown,
    }
}

fn sorted(map: &HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn sandbox_ips(status: &api::PodSandboxStatus) -> Vec<String> {
    let Some(net) = status.network.as_ref() else {
        return Vec::new();
    };
    std::iter::once(net.ip.clone())
        .filter(|ip| !ip.is_empty())
        .chain(net.additional_ips.iter().map(|ip| ip.ip.clone()))
        .collect()
}

/// A CRI sandbox status in the kubelet's terms.
pub fn to_sandbox_status(status: &api::PodSandboxStatus) -> SandboxStatus {
    let network_mode = status
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .map(|o| o.network);
    SandboxStatus {
        id: status.id.clone(),
        ready: status.state == api::PodSandboxState::SandboxReady as i32,
        created_at: from_unix_nanos(status.created_at),
        attempt: status.metadata.as_ref().map_or(0, |m| m.attempt),
        ips: sandbox_ips(status),
        primary_ip: status.network.as_ref().map(|n| n.ip.clone()),
        host_network: network_mode == Some(api::NamespaceMode::Node as i32),
        labels: sorted(&status.labels),
        annotations: sorted(&status.annotations),
    }
}

/// The pod IPs a ready sandbox reports, primary first (upstream `determinePodSandboxIPs`): none
/// when the runtime reports no network or any unparseable address.
#[doc(hidden)] // public for the fuzz targets (fuzz/)
pub fn determine_pod_ips(pod: &str, status: &api::PodSandboxStatus) -> Vec<String> {
    let Some(net) = status.network.as_ref() else {
        info!(pod = %pod, "pod sandbox status has no network information; cannot report IPs");
        return Vec::new();
    };
    let mut ips = Vec::new();
    // The primary IP may be empty when the runtime does not handle the network (host network).
    if !net.ip.is_empty() {
        if net.ip.parse::<IpAddr>().is_err() {
            info!(pod = %pod, ip = %net.ip, "pod sandbox reported an unparseable primary IP");
            return Vec::new();
        }
        ips.push(net.ip.clone());
    }
    for extra in &net.additional_ips {
        if extra.ip.parse::<IpAddr>().is_err() {
            info!(pod = %pod, ip = %extra.ip, "pod sandbox reported an unparseable additional IP");
            return Vec::new();
        }
        ips.push(extra.ip.clone());
    }
    ips
}

/// What a listed and an inspected container have in common, decoded (upstream
/// `toKubeContainer`); no timestamps beyond creation, no exit details.
struct ContainerBase<'a> {
    id: &'a str,
    sandbox_id: &'a str,
    state: i32,
    created_at: i64,
    image: Option<&'a api::ImageSpec>,
    image_ref: &'a str,
    image_id: &'a str,
    labels: &'a HashMap<String, String>,
    annotations: &'a HashMap<String, String>,
}

impl ContainerBase<'_> {
    fn decode(&self) -> ContainerStatus {
        let labels = container_info_from_labels(self.labels);
        let annotations = container_info_from_annotations(self.annotations);
        // `image_id` is new in CRI (v1.30); older runtimes only give the image ref.
        let image_id = if self.image_id.is_empty() {
            self.image_ref
        } else {
            self.image_id
        };
        ContainerStatus {
            id: self.id.to_string(),
            name: labels.container_name,
            sandbox_id: self.sandbox_id.to_string(),
            state: container_state(self.state),
            created_at: from_unix_nanos(self.created_at),
            started_at: None,
            finished_at: None,
            exit_code: 0,
            image: self.image.map(|i| i.image.clone()).unwrap_or_default(),
            image_ref: self.image_ref.to_string(),
            image_id: image_id.to_string(),
            hash: annotations.hash,
            restart_count: annotations.restart_count,
            reason: String::new(),
            message: String::new(),
            termination_message_path: Some(annotations.termination_message_path)
                .filter(|p| !p.is_empty()),
            termination_grace_period: annotations.pod_termination_grace_period,
            resources: None,
            user: None,
        }
    }
}

/// A CRI container status in the kubelet's terms (upstream `toKubeContainerStatus`), without
/// the termination message from file or logs. CRI statuses do not name the sandbox, so the
/// caller passes it (from the container list).
pub fn to_container_status(status: &api::ContainerStatus, sandbox_id: &str) -> ContainerStatus {
    let mut out = ContainerBase {
        id: &status.id,
        sandbox_id,
        state: status.state,
        created_at: status.created_at,
        image: status.image.as_ref(),
        image_ref: &status.image_ref,
        image_id: &status.image_id,
        labels: &status.labels,
        annotations: &status.annotations,
    }
    .decode();
    if out.state != ContainerState::Created {
        out.started_at = from_unix_nanos(status.started_at);
    }
    if out.state == ContainerState::Exited {
        out.finished_at = from_unix_nanos(status.finished_at);
        out.exit_code = status.exit_code;
        out.reason = status.reason.clone();
        out.message = status.message.clone();
    }
    out.resources = status.resources.as_ref().and_then(container_resources);
    out.user = status.user.as_ref().map(|u| ContainerUser {
        linux: u.linux.as_ref().map(|l| LinuxContainerUser {
            uid: l.uid,
            gid: l.gid,
            supplemental_groups: l.supplemental_groups.clone(),
        }),
    });
    out
}

/// The CPU and memory a runtime reports for a container, back in Kubernetes units (upstream
/// `toKubeContainerResources`); `None` when it reports none of them.
pub fn container_resources(r: &api::ContainerResources) -> Option<ContainerResources> {
    let linux = r.linux.as_ref()?;
    let cpu_limit_milli = (linux.cpu_period > 0)
        .then(|| quota_to_milli_cpu(linux.cpu_quota, linux.cpu_period))
        .filter(|m| *m > 0);
    let cpu_request_milli = (linux.cpu_shares > 0)
        .then(|| shares_to_milli_cpu(linux.cpu_shares))
        .filter(|m| *m > 0);
    let memory_limit_bytes = Some(linux.memory_limit_in_bytes).filter(|b| *b > 0);
    let out = ContainerResources {
        cpu_limit_milli,
        cpu_request_milli,
        memory_limit_bytes,
    };
    (out != ContainerResources::default()).then_some(out)
}

/// Upstream `sharesToMilliCPU`: CPU shares back to millicores (rounded up; 0 below 2 shares).
fn shares_to_milli_cpu(shares: i64) -> i64 {
    const MIN_SHARES: i64 = 2;
    const SHARES_PER_CPU: i64 = 1024;
    if shares < MIN_SHARES {
        return 0;
    }
    let milli = shares.saturating_mul(1000);
    milli / SHARES_PER_CPU + i64::from(milli % SHARES_PER_CPU != 0)
}

/// Upstream `quotaToMilliCPU`: a CFS quota over its period in millicores (0 for no quota).
fn quota_to_milli_cpu(quota: i64, period: i64) -> i64 {
    if quota == -1 || period <= 0 {
        return 0;
    }
    quota.saturating_mul(1000) / period
}

/// A listed (not inspected) container.
fn listed_container(c: &api::Container) -> ContainerStatus {
    ContainerBase {
        id: &c.id,
        sandbox_id: &c.pod_sandbox_id,
        state: c.state,
        created_at: c.created_at,
        image: c.image.as_ref(),
        image_ref: &c.image_ref,
        image_id: &c.image_id,
        labels: &c.labels,
        annotations: &c.annotations,
    }
    .decode()
}

#[cfg(any(test, feature = "test-util"))]
#[allow(clippy::unwrap_used)]
pub mod testutil;

#[cfg(test)]
mod tests {
    use rkubelet_cri::fake::FakeRuntime;

    use super::testutil::*;
    use super::*;
    use crate::kuberuntime::labels::{container_annotations, container_labels};

    async fn foreign_container(rt: &FakeRuntime, sandbox_id: &str) -> String {
        rt.create_container(api::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "stranger".into(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: "busybox".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sandbox_config: None,
        })
        .await
        .unwrap()
        .container_id
    }

    async fn foreign_sandbox(rt: &FakeRuntime) -> String {
        rt.run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: "other".into(),
                    uid: "other-uid".into(),
                    namespace: "x".into(),
                    attempt: 0,
                }),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id
    }

    #[tokio::test(start_paused = true)]
    async fn pod_status_with_several_attempts() {
        let rt = FakeRuntime::with_images(&["busybox"]);
        let p = pod("u1", "web");
        let app = spec("app");
        let sb0 = run_sandbox(&rt, &p, 0, false).await;
        let c0 = container(&rt, &sb0, &p, &app, 0, true).await;
        stop_sandbox(&rt, &sb0).await; // kills c0 (137)
        let sb1 = run_sandbox(&rt, &p, 1, false).await;
        let c1 = container(&rt, &sb1, &p, &app, 1, true).await;
        let created = container(&rt, &sb1, &p, &spec("side"), 0, false).await;
        foreign_container(&rt, &sb1).await;
        // Another pod's objects are not part of this status.
        let other = pod("u2", "db");
        let other_sb = run_sandbox(&rt, &other, 0, false).await;
        container(&rt, &other_sb, &other, &app, 0, true).await;

        let status = get_pod_status(&rt, "u1", "web", "default").await.unwrap();
        assert_eq!(
            (
                status.uid.as_str(),
                status.name.as_str(),
                status.namespace.as_str()
            ),
            ("u1", "web", "default")
        );
        let sandbox_ids: Vec<_> = status
            .sandbox_statuses
            .iter()
            .map(|s| s.id.clone())
            .collect();
        assert_eq!(sandbox_ids, vec![sb1.clone(), sb0.clone()], "newest first");
        let newest = &status.sandbox_statuses[0];
        assert!(newest.ready && !newest.host_network);
        assert_eq!(newest.attempt, 1);
        assert_eq!(newest.labels.get("app").map(String::as_str), Some("web"));
        assert!(!status.sandbox_statuses[1].ready);
        assert_eq!(status.ips.len(), 1, "IP of the ready newest sandbox");
        assert_eq!(status.ips, newest.ips);

        let ids: Vec<_> = status
            .container_statuses
            .iter()
            .map(|c| c.id.clone())
            .collect();
        assert_eq!(
            ids,
            vec![created.clone(), c1.clone(), c0.clone()],
            "newest first, foreign skipped"
        );
        let side = &status.container_statuses[0];
        assert_eq!(side.state, ContainerState::Created);
        assert_eq!(side.started_at, None);
        let running = &status.container_statuses[1];
        assert_eq!(running.name, "app");
        assert_eq!(running.state, ContainerState::Running);
        assert_eq!(running.sandbox_id, sb1);
        assert_eq!(running.restart_count, 1);
        assert_eq!(running.hash, 0xabc);
        assert_eq!(running.termination_grace_period, Some(30));
        assert_eq!(
            running.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert!(running.started_at.is_some() && running.finished_at.is_none());
        assert!(running.image.contains("busybox"));
        assert!(!running.image_ref.is_empty());
        assert_eq!(running.image_id, running.image_ref, "CRI without image_id");
        let dead = &status.container_statuses[2];
        assert_eq!(dead.state, ContainerState::Exited);
        assert_eq!(dead.exit_code, 137);
        assert_eq!(dead.reason, "Error");
        assert_eq!(dead.sandbox_id, sb0);
        assert!(dead.finished_at.is_some());
        assert_eq!(
            status.find_container("app").map(|c| c.id.as_str()),
            Some(c1.as_str())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_ips_unless_the_newest_sandbox_is_ready() {
        let rt = FakeRuntime::with_images(&["busybox"]);
        let p = pod("u1", "web");
        let sb = run_sandbox(&rt, &p, 0, false).await;
        stop_sandbox(&rt, &sb).await;
        let status = get_pod_status(&rt, "u1", "web", "default").await.unwrap();
        assert!(status.ips.is_empty());
        assert_eq!(status.sandbox_statuses.len(), 1);

        let hp = pod("h1", "host");
        run_sandbox(&rt, &hp, 0, true).await;
        let status = get_pod_status(&rt, "h1", "host", "default").await.unwrap();
        assert!(status.sandbox_statuses[0].host_network);
        assert!(status.ips.is_empty(), "host-network sandboxes report no IP");

        let none = get_pod_status(&rt, "nope", "x", "y").await.unwrap();
        assert!(none.sandbox_statuses.is_empty() && none.container_statuses.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn vanished_objects_are_skipped_other_errors_fail() {
        let rt = FakeRuntime::with_images(&["busybox"]);
        let p = pod("u1", "web");
        let sb = run_sandbox(&rt, &p, 0, false).await;
        let c = container(&rt, &sb, &p, &spec("app"), 0, true).await;

        rt.fail_next(
            "ContainerStatus",
            CriError::not_found("ContainerStatus", "gone"),
        );
        rt.fail_next(
            "PodSandboxStatus",
            CriError::not_found("PodSandboxStatus", "gone"),
        );
        let status = get_pod_status(&rt, "u1", "web", "default").await.unwrap();
        assert!(status.container_statuses.is_empty());
        assert!(status.sandbox_statuses.is_empty());

        rt.fail_next(
            "ContainerStatus",
            CriError::unknown("ContainerStatus", "boom"),
        );
        let err = get_pod_status(&rt, "u1", "web", "default")
            .await
            .unwrap_err();
        assert!(
            matches!(&err, RuntimeStatusError::ContainerStatus { container_id, .. } if *container_id == c),
            "{err}"
        );
        assert!(err.to_string().contains("web_default(u1)"), "{err}");

        rt.fail_next(
            "ListPodSandbox",
            CriError::unknown("ListPodSandbox", "boom"),
        );
        let err = get_pod_status(&rt, "u1", "web", "default")
            .await
            .unwrap_err();
        assert!(
            matches!(err, RuntimeStatusError::ListPodSandboxes { .. }),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn list_pods_groups_by_uid_and_ignores_foreign_entries() {
        let rt = FakeRuntime::with_images(&["busybox"]);
        let a = pod("ua", "a");
        let b = pod("ub", "b");
        let sa0 = run_sandbox(&rt, &a, 0, false).await;
        let a_dead = container(&rt, &sa0, &a, &spec("app"), 0, true).await;
        stop_sandbox(&rt, &sa0).await;
        let sa1 = run_sandbox(&rt, &a, 1, false).await;
        let a_live = container(&rt, &sa1, &a, &spec("app"), 1, true).await;
        let sb = run_sandbox(&rt, &b, 0, false).await;
        let b_live = container(&rt, &sb, &b, &spec("db"), 0, true).await;
        foreign_container(&rt, &sb).await;
        let fs = foreign_sandbox(&rt).await;
        foreign_container(&rt, &fs).await;

        let all = list_pods_with_sandbox_states(&rt, true).await.unwrap();
        let uids: Vec<_> = all.iter().map(|p| p.pod.uid.as_str()).collect();
        assert_eq!(
            uids,
            vec!["ub", "ua"],
            "newest sandbox first; foreign pod ignored"
        );
        let pa = &all[1];
        assert_eq!(
            (pa.pod.name.as_str(), pa.pod.namespace.as_str()),
            ("a", "default")
        );
        assert_eq!(pa.pod.sandboxes, vec![sa1.clone(), sa0.clone()]);
        assert_eq!(
            pa.sandbox_states,
            vec![
                (sa1.clone(), ContainerState::Running),
                (sa0.clone(), ContainerState::Exited)
            ]
        );
        let ids: Vec<_> = pa.pod.containers.iter().map(|c| c.id.clone()).collect();
        assert_eq!(ids, vec![a_live.clone(), a_dead.clone()]);
        assert_eq!(pa.pod.containers[0].name, "app");
        assert_eq!(pa.pod.containers[0].hash, 0xabc);
        assert_eq!(pa.pod.containers[0].restart_count, 1);
        assert_eq!(pa.pod.containers[1].state, ContainerState::Exited);
        let pb = &all[0];
        assert_eq!(
            pb.pod.containers.len(),
            1,
            "foreign container in our sandbox ignored"
        );
        assert_eq!(pb.pod.containers[0].id, b_live);

        let running = list_pods(&rt, false).await.unwrap();
        let a_running = running.iter().find(|p| p.uid == "ua").unwrap();
        assert_eq!(a_running.sandboxes, vec![sa1]);
        assert_eq!(a_running.containers.len(), 1);
        assert_eq!(a_running.containers[0].id, a_live);
        assert_eq!(running.len(), 2);

        // Housekeeping's single listing: its running view is what the filtered one answers,
        // and a pod with nothing ready or running is not in it.
        let c = pod("uc", "c");
        let sc = run_sandbox(&rt, &c, 0, false).await;
        container(&rt, &sc, &c, &spec("app"), 0, true).await;
        stop_sandbox(&rt, &sc).await;
        let all = list_pods_with_sandbox_states(&rt, true).await.unwrap();
        assert_eq!(all.len(), 3);
        let derived = running_only(&all);
        assert_eq!(derived, list_pods(&rt, false).await.unwrap());
        assert!(derived.iter().all(|p| p.uid != "uc"), "{derived:?}");

        rt.fail_next(
            "ListContainers",
            CriError::unknown("ListContainers", "boom"),
        );
        assert!(matches!(
            list_pods(&rt, true).await,
            Err(RuntimeStatusError::ListAllContainers(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn termination_message_from_file_and_logs() {
        let dir = tempfile::tempdir().unwrap();
        let rt = FakeRuntime::with_images(&["busybox"]);
        let p = pod("u1", "web");
        let sb = run_sandbox(&rt, &p, 0, false).await;
        let msg_file = dir.path().join("termination-log");
        let create = |name: &str, policy: &str| {
            let mut c = spec(name);
            c.termination_message_policy = Some(policy.into());
            let request = api::CreateContainerRequest {
                pod_sandbox_id: sb.clone(),
                config: Some(api::ContainerConfig {
                    metadata: Some(api::ContainerMetadata {
                        name: name.into(),
                        attempt: 0,
                    }),
                    image: Some(api::ImageSpec {
                        image: "busybox".into(),
                        ..Default::default()
                    }),
                    labels: container_labels(&c, &p),
                    annotations: container_annotations(&c, &p, 0, 1),
                    mounts: vec![api::Mount {
                        container_path: "/dev/termination-log".into(),
                        host_path: msg_file.display().to_string(),
                        ..Default::default()
                    }],
                    log_path: format!("{name}.log"),
                    ..Default::default()
                }),
                sandbox_config: Some(api::PodSandboxConfig {
                    log_directory: dir.path().display().to_string(),
                    ..Default::default()
                }),
            };
            let rt = rt.clone();
            async move {
                let id = rt.create_container(request).await.unwrap().container_id;
                rt.start_container(api::StartContainerRequest {
                    container_id: id.clone(),
                })
                .await
                .unwrap();
                id
            }
        };
        let from_file = create("file", "File").await;
        let from_logs = create("logs", "FallbackToLogsOnError").await;
        rt.exit_container(&from_file, 1);
        rt.exit_container(&from_logs, 2);
        std::fs::write(
            dir.path().join("logs.log"),
            "2026-11-22T10:24:43.554326027Z stdout F hello\n\
             2026-11-22T10:24:43.6Z stderr P part\n\
             2026-11-22T10:24:43.7Z stderr F ial\n",
        )
        .unwrap();

        // Missing file: no message; the log fallback applies.
        let status = get_pod_status(&rt, "u1", "web", "default").await.unwrap();
        assert_eq!(status.find_container("file").unwrap().message, "");
        assert_eq!(
            status.find_container("logs").unwrap().message,
            "hello\npartial\n"
        );

        std::fs::write(&msg_file, "goodbye").unwrap();
        let status = get_pod_status(&rt, "u1", "web", "default").await.unwrap();
        assert_eq!(status.find_container("file").unwrap().message, "goodbye");
        assert_eq!(status.find_container("logs").unwrap().message, "goodbye");
    }

    #[test]
    fn log_tail_keeps_the_last_lines_and_bytes() {
        let mut data = String::from("cut-partial-line\n");
        for i in 0..100 {
            data.push_str(&format!("2026-01-01T00:00:00Z stdout F line{i}\n"));
        }
        data.push_str("garbage without format\n");
        let text = log_tail_text(data.as_bytes(), false);
        assert!(text.starts_with("line21\n"), "{text}");
        assert!(text.ends_with("line99\n"));
        assert_eq!(text.lines().count(), 79, "80 lines, one of them malformed");

        let long = format!("2026-01-01T00:00:00Z stdout F {}\n", "x".repeat(5000));
        let text = log_tail_text(long.as_bytes(), true);
        assert_eq!(text.len(), MAX_TERMINATION_MESSAGE_LOG_LENGTH);
        assert!(text.ends_with("x\n"));
    }

    #[test]
    fn pod_ips_primary_first_and_unparseable_dropped() {
        let status = |ip: &str, extra: &[&str]| api::PodSandboxStatus {
            network: Some(api::PodSandboxNetworkStatus {
                ip: ip.into(),
                additional_ips: extra
                    .iter()
                    .map(|ip| api::PodIp { ip: (*ip).into() })
                    .collect(),
            }),
            ..Default::default()
        };
        let cases: [(&str, &[&str], &[&str]); 4] = [
            ("10.0.0.2", &["fd00::2"], &["10.0.0.2", "fd00::2"]),
            ("", &[], &[]),
            ("not-an-ip", &["fd00::2"], &[]),
            ("10.0.0.2", &["bogus"], &[]),
        ];
        for (ip, extra, want) in cases {
            assert_eq!(
                determine_pod_ips("p", &status(ip, extra)),
                want,
                "{ip} {extra:?}"
            );
        }
        assert!(determine_pod_ips("p", &api::PodSandboxStatus::default()).is_empty());
    }

    #[test]
    fn container_user_and_resources_come_from_the_cri_status() {
        let linux = |period, quota, shares, memory| api::ContainerResources {
            linux: Some(api::LinuxContainerResources {
                cpu_period: period,
                cpu_quota: quota,
                cpu_shares: shares,
                memory_limit_in_bytes: memory,
                ..Default::default()
            }),
            windows: None,
        };
        let status = api::ContainerStatus {
            id: "c1".into(),
            state: api::ContainerState::ContainerRunning as i32,
            resources: Some(linux(100_000, 50_000, 102, 128 << 20)),
            user: Some(api::ContainerUser {
                linux: Some(api::LinuxContainerUser {
                    uid: 1000,
                    gid: 3000,
                    supplemental_groups: vec![3000, 4000],
                }),
            }),
            ..Default::default()
        };
        let got = to_container_status(&status, "sb");
        assert_eq!(
            got.resources,
            Some(ContainerResources {
                cpu_limit_milli: Some(500),
                cpu_request_milli: Some(100),
                memory_limit_bytes: Some(128 << 20),
            })
        );
        assert_eq!(
            got.user,
            Some(ContainerUser {
                linux: Some(LinuxContainerUser {
                    uid: 1000,
                    gid: 3000,
                    supplemental_groups: vec![3000, 4000],
                }),
            })
        );

        // Upstream's unit conversions: shares round up, below 2 shares is nothing; no period
        // or an unlimited quota is no limit; nothing set is no resources at all.
        for (r, want) in [
            (
                linux(100_000, 250_000, 2048, 0),
                (Some(2500), Some(2000), None),
            ),
            (linux(100_000, -1, 2, 1), (None, Some(2), Some(1))),
            (linux(0, 50_000, 1, 0), (None, None, None)),
        ] {
            let got = container_resources(&r).unwrap_or_default();
            assert_eq!(
                (
                    got.cpu_limit_milli,
                    got.cpu_request_milli,
                    got.memory_limit_bytes
                ),
                want,
                "{r:?}"
            );
        }
        assert_eq!(container_resources(&linux(0, 0, 0, 0)), None);
        // Hostile or broken runtime values: no overflow, negatives are "not set".
        assert_eq!(container_resources(&linux(-100_000, -50_000, -2, -1)), None);
        let huge = container_resources(&linux(1, i64::MAX, i64::MAX, i64::MAX)).unwrap();
        assert_eq!(huge.memory_limit_bytes, Some(i64::MAX));
        assert!(huge.cpu_limit_milli.is_some_and(|m| m > 0));
        assert!(huge.cpu_request_milli.is_some_and(|m| m > 0));
        assert_eq!(
            container_resources(&api::ContainerResources::default()),
            None
        );
        let plain = to_container_status(
            &api::ContainerStatus {
                user: Some(api::ContainerUser { linux: None }),
                ..Default::default()
            },
            "sb",
        );
        assert_eq!(
            (plain.resources, plain.user),
            (None, Some(ContainerUser { linux: None }))
        );
    }

    #[test]
    fn sandbox_primary_ip_as_reported() {
        let none = to_sandbox_status(&api::PodSandboxStatus::default());
        assert_eq!(none.primary_ip, None);
        let empty = to_sandbox_status(&api::PodSandboxStatus {
            network: Some(api::PodSandboxNetworkStatus {
                ip: String::new(),
                additional_ips: vec![api::PodIp {
                    ip: "fd00::2".into(),
                }],
            }),
            ..Default::default()
        });
        assert_eq!(
            (empty.primary_ip.as_deref(), empty.ips),
            (Some(""), vec!["fd00::2".to_owned()])
        );
    }

    #[test]
    fn container_states_map_as_upstream() {
        use api::ContainerState as C;
        let cases = [
            (C::ContainerCreated as i32, ContainerState::Created),
            (C::ContainerRunning as i32, ContainerState::Running),
            (C::ContainerExited as i32, ContainerState::Exited),
            (C::ContainerUnknown as i32, ContainerState::Unknown),
            (42, ContainerState::Unknown),
        ];
        for (cri, want) in cases {
            assert_eq!(container_state(cri), want);
        }
    }
}
