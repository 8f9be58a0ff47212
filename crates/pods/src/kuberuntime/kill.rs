//! Stopping and removing things on the runtime (upstream `killContainer`, `killPodWithSyncResult`,
//! `terminationOrdering` and the removal half of container GC for pods that are gone).
//! Containers are stopped in parallel, each after its preStop hook and with the grace period
//! left; with sidecars, regular containers go first and sidecars follow in reverse order.
//! Emits `Killing` and `FailedPreStopHook` events.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_cri::CriError;
use rkubelet_cri::api::{
    ContainerStatusRequest, RemoveContainerRequest, RemovePodSandboxRequest, StopContainerRequest,
    StopPodSandboxRequest,
};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::container::{ContainerStatus, PodStatus};
use crate::events::EventType;
use crate::kuberuntime::actions::{KillReason, is_restartable_init_container};
use crate::kuberuntime::context::RuntimeContext;
use crate::kuberuntime::gc::remove_container_logs;
use crate::kuberuntime::hooks::{HookTarget, run_pre_stop};
use crate::kuberuntime::labels::legacy_log_name;
use crate::kuberuntime::runtime_status::get_pod_status;
use crate::kuberuntime::sandbox_config::pod_logs_directory;
use crate::pod_workers::{Failures, SyncError};
use crate::types::PodExt;

/// Stopping one container or sandbox failed.
#[derive(Debug, thiserror::Error)]
pub enum KillError {
    #[error("stopping container {name} ({id}): {source}")]
    Container {
        name: String,
        id: String,
        #[source]
        source: CriError,
    },
    #[error("stopping sandbox {id}: {source}")]
    Sandbox {
        id: String,
        #[source]
        source: CriError,
    },
}

/// Removing one container or sandbox of a pod that is gone failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    #[error("removing container {name} ({id}): {source}")]
    Container {
        name: String,
        id: String,
        #[source]
        source: CriError,
    },
    #[error("removing sandbox {id}: {source}")]
    Sandbox {
        id: String,
        #[source]
        source: CriError,
    },
}

/// Upstream always gives a container at least this long to stop.
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;

/// One container to stop.
#[derive(Debug, Clone)]
pub struct KillTarget {
    pub id: String,
    pub name: String,
    /// The grace period: the pod's (deletion grace, then spec), the probe's for liveness or
    /// startup kills that set one, or the one recorded on the container for orphans.
    pub grace_period: i64,
    /// The `Killing` event message; default `Stopping container <name>`.
    pub message: Option<String>,
    /// The container's spec (for its preStop hook); `None` for orphans.
    pub spec: Option<Container>,
    /// A sidecar (restartable init container): stopped after the regular containers.
    pub sidecar: bool,
    /// Where httpGet hooks go by default.
    pub pod_ip: String,
}

/// The spec of container `name` in `pod` (regular or init).
pub fn container_spec<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

/// Upstream `setTerminationGracePeriod`.
pub fn termination_grace_period(pod: &Pod, spec: Option<&Container>, reason: KillReason) -> i64 {
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        return g;
    }
    let Some(pod_grace) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    else {
        return MINIMUM_GRACE_PERIOD_SECONDS;
    };
    let probe = match reason {
        KillReason::LivenessProbe => spec.and_then(|c| c.liveness_probe.as_ref()),
        KillReason::StartupProbe => spec.and_then(|c| c.startup_probe.as_ref()),
        _ => None,
    };
    probe
        .and_then(|p| p.termination_grace_period_seconds)
        .unwrap_or(pod_grace)
}

impl KillTarget {
    /// A container of a pod the kubelet has a spec for.
    pub fn for_container(
        pod: &Pod,
        c: &ContainerStatus,
        message: Option<String>,
        reason: KillReason,
        pod_ip: &str,
    ) -> Self {
        let spec = container_spec(pod, &c.name);
        Self {
            id: c.id.clone(),
            name: c.name.clone(),
            grace_period: termination_grace_period(pod, spec, reason),
            message,
            sidecar: spec.is_some_and(|s| {
                is_restartable_init_container(s)
                    && pod
                        .spec
                        .as_ref()
                        .and_then(|p| p.init_containers.as_ref())
                        .is_some_and(|i| i.iter().any(|x| x.name == s.name))
            }),
            spec: spec.cloned(),
            pod_ip: pod_ip.to_owned(),
        }
    }

    /// A container of a runtime pod without a spec (grace recorded at creation).
    pub fn orphan(c: &ContainerStatus) -> Self {
        Self {
            id: c.id.clone(),
            name: c.name.clone(),
            grace_period: c.termination_grace_period.unwrap_or(30),
            message: None,
            spec: None,
            sidecar: false,
            pod_ip: String::new(),
        }
    }
}

/// Upstream `terminationOrdering`: with sidecars, each sidecar waits for every regular
/// container and every later sidecar to stop first.
#[derive(Clone)]
pub struct TerminationOrdering {
    running: Arc<watch::Sender<BTreeSet<String>>>,
    /// name → the names that must stop first.
    prereqs: Arc<std::collections::HashMap<String, Vec<String>>>,
}

impl TerminationOrdering {
    /// The ordering for stopping `targets` of `pod`; `None` when the pod has no sidecars.
    pub fn for_pod(pod: &Pod, targets: &[KillTarget]) -> Option<Self> {
        let spec = pod.spec.as_ref()?;
        let sidecars: Vec<&str> = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| is_restartable_init_container(c))
            .map(|c| c.name.as_str())
            .collect();
        if sidecars.is_empty() {
            return None;
        }
        let regular: Vec<String> = spec.containers.iter().map(|c| c.name.clone()).collect();
        let mut prereqs = std::collections::HashMap::new();
        for (i, name) in sidecars.iter().enumerate() {
            let mut before = regular.clone();
            before.extend(sidecars[i + 1..].iter().map(|s| (*s).to_owned()));
            prereqs.insert((*name).to_owned(), before);
        }
        let running = targets.iter().map(|t| t.name.clone()).collect();
        Some(Self {
            running: Arc::new(watch::channel(running).0),
            prereqs: Arc::new(prereqs),
        })
    }

    /// Waits (at most `grace` seconds) until the containers that must stop before `name` have;
    /// returns the whole seconds waited.
    pub async fn wait_for_turn(&self, name: &str, grace: i64) -> i64 {
        let Some(before) = self.prereqs.get(name) else {
            return 0;
        };
        let start = tokio::time::Instant::now();
        let mut rx = self.running.subscribe();
        let limit = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
        let _ = tokio::time::timeout(
            limit,
            rx.wait_for(|running| !before.iter().any(|b| running.contains(b))),
        )
        .await;
        i64::try_from(start.elapsed().as_secs()).unwrap_or(i64::MAX)
    }

    /// `name` has stopped.
    pub fn terminated(&self, name: &str) {
        self.running.send_modify(|r| {
            r.remove(name);
        });
    }
}

/// Stops `targets` in parallel (upstream `killContainer` each): `Killing` event, preStop hook
/// within the grace period (`grace_override` wins over the target's own), the sidecar
/// ordering's wait, then StopContainer with what is left (at least 2 s).
pub async fn kill_containers(
    ctx: &RuntimeContext,
    pod: Option<&Pod>,
    targets: Vec<KillTarget>,
    grace_override: Option<i64>,
) -> Result<(), Failures<KillError>> {
    let ordering = pod.and_then(|p| TerminationOrdering::for_pod(p, &targets));
    let kills = targets.into_iter().map(|t| {
        let ordering = ordering.clone();
        async move {
            let result = kill_one(ctx, pod, &t, grace_override, ordering.as_ref()).await;
            if let Some(o) = &ordering {
                o.terminated(&t.name);
            }
            result
        }
    });
    let errors: Vec<KillError> = join_all(kills)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    match Failures::from_vec(errors) {
        None => Ok(()),
        Some(failures) => Err(failures),
    }
}

async fn kill_one(
    ctx: &RuntimeContext,
    pod: Option<&Pod>,
    t: &KillTarget,
    grace_override: Option<i64>,
    ordering: Option<&TerminationOrdering>,
) -> Result<(), KillError> {
    let mut grace = grace_override.unwrap_or(t.grace_period);
    if let Some(pod) = pod {
        let message = t
            .message
            .clone()
            .unwrap_or_else(|| format!("Stopping container {}", t.name));
        ctx.events
            .event(pod, EventType::Normal, "Killing", &message);
        let pre_stop = t
            .spec
            .as_ref()
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.as_ref());
        if let (Some(hook), Some(spec)) = (pre_stop, t.spec.as_ref())
            && grace > 0
        {
            let target = HookTarget {
                runtime: ctx.runtime.as_ref(),
                pod,
                container: spec,
                container_id: &t.id,
                pod_ip: &t.pod_ip,
            };
            let (took, error) = run_pre_stop(hook, &target, grace).await;
            if let Some(e) = error {
                warn!(container = %t.name, id = %t.id, error = %e, "preStop hook failed");
                ctx.events.event(
                    pod,
                    EventType::Warning,
                    "FailedPreStopHook",
                    "PreStopHook failed",
                );
            }
            grace -= took;
        }
    }
    if let Some(o) = ordering
        && grace > 0
    {
        grace -= o.wait_for_turn(&t.name, grace).await;
    }
    let grace = grace.max(MINIMUM_GRACE_PERIOD_SECONDS);
    info!(container = %t.name, id = %t.id, grace_period = grace, "stopping container");
    let result = ctx
        .runtime
        .stop_container(StopContainerRequest {
            container_id: t.id.clone(),
            timeout: grace,
        })
        .await;
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(source) => Err(KillError::Container {
            name: t.name.clone(),
            id: t.id.clone(),
            source,
        }),
    }
}

/// Removes every container and sandbox of a pod and its log directory (used once a pod is gone
/// from the config, in place of upstream's container GC for deleted pods).
pub async fn remove_pod_content(
    ctx: &RuntimeContext,
    uid: &str,
    name: &str,
    namespace: &str,
) -> Result<(), SyncError> {
    let rt = ctx.runtime.as_ref();
    let status = get_pod_status(rt, uid, name, namespace).await?;
    let mut errors = Vec::new();
    let mut links = Vec::new();
    for c in &status.container_statuses {
        if let Err(e) = rt
            .remove_container(RemoveContainerRequest {
                container_id: c.id.clone(),
            })
            .await
            && !e.is_not_found()
        {
            errors.push(RemoveError::Container {
                name: c.name.clone(),
                id: c.id.clone(),
                source: e,
            });
        }
        if let Some(dir) = &ctx.config.container_log_symlink_dir {
            links.push(dir.join(legacy_log_name(name, namespace, &c.name, &c.id)));
        }
    }
    if !links.is_empty() {
        // The legacy log links, all in one trip off the async workers.
        let _ =
            tokio::task::spawn_blocking(move || links.iter().for_each(|l| remove_quietly(l))).await;
    }
    for sb in &status.sandbox_statuses {
        let id = sb.id.clone();
        let stopped = rt
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await;
        let removed = match stopped {
            Err(e) if !e.is_not_found() => Err(e),
            _ => rt
                .remove_pod_sandbox(RemovePodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .await
                .map(|_| ()),
        };
        if let Err(e) = removed
            && !e.is_not_found()
        {
            errors.push(RemoveError::Sandbox { id, source: e });
        }
    }
    if let Some(failures) = Failures::from_vec(errors) {
        return Err(SyncError::Remove(failures));
    }
    let logs = pod_logs_directory(&ctx.config.pod_logs_dir, namespace, name, uid);
    // A pod's logs can be large: removed off the async worker threads.
    let removing = logs.clone();
    let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&removing))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    if let Err(e) = removed
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(dir = %logs.display(), error = %e, "failed to remove pod log directory");
    }
    info!(pod = %format!("{namespace}/{name}"), %uid, containers = status.container_statuses.len(), sandboxes = status.sandbox_statuses.len(), "removed pod content from the runtime");
    Ok(())
}

/// Removes every init container of `status` with its logs and legacy log link, once the pod
/// was killed to get a new sandbox (upstream `purgeInitContainers`), so that all of them run
/// again in the new sandbox. Failures are logged and skipped, as upstream.
pub async fn purge_init_containers(ctx: &RuntimeContext, pod: &Pod, status: &PodStatus) {
    let init_names: BTreeSet<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    let rt = ctx.runtime.as_ref();
    let (name, namespace) = (pod.name(), pod.namespace());
    for c in status
        .container_statuses
        .iter()
        .filter(|c| init_names.contains(c.name.as_str()))
    {
        let log_path = match rt
            .container_status(ContainerStatusRequest {
                container_id: c.id.clone(),
                verbose: false,
            })
            .await
        {
            Ok(resp) => resp.status.map(|s| s.log_path).unwrap_or_default(),
            Err(e) if e.is_not_found() => continue,
            Err(e) => {
                warn!(pod = %pod.full_name(), container = %c.name, id = %c.id, error = %e, "failed to inspect init container before removal");
                continue;
            }
        };
        let link = ctx
            .config
            .container_log_symlink_dir
            .as_ref()
            .map(|dir| dir.join(legacy_log_name(name, namespace, &c.name, &c.id)));
        // The log files and the link, in one trip off the async workers.
        let _ = tokio::task::spawn_blocking(move || {
            remove_container_logs(Path::new(&log_path));
            if let Some(link) = link {
                remove_quietly(&link);
            }
        })
        .await;
        match rt
            .remove_container(RemoveContainerRequest {
                container_id: c.id.clone(),
            })
            .await
        {
            Ok(_) => {
                debug!(pod = %pod.full_name(), container = %c.name, id = %c.id, "removed init container of the old sandbox");
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                warn!(pod = %pod.full_name(), container = %c.name, id = %c.id, error = %e, "failed to remove init container of the old sandbox");
            }
        }
    }
}

fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(path = %path.display(), error = %e, "failed to remove file");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "terminationGracePeriodSeconds": 20,
                "initContainers": [
                    {"name": "s1", "restartPolicy": "Always"},
                    {"name": "init"},
                    {"name": "s2", "restartPolicy": "Always"},
                ],
                "containers": [
                    {"name": "app", "livenessProbe": {"terminationGracePeriodSeconds": 3}},
                    {"name": "app2"},
                ],
            }
        }))
        .expect("pod")
    }

    fn target(name: &str) -> KillTarget {
        KillTarget {
            id: name.into(),
            name: name.into(),
            grace_period: 10,
            message: None,
            spec: None,
            sidecar: false,
            pod_ip: String::new(),
        }
    }

    #[test]
    fn grace_period_sources() {
        let p = pod();
        let app = container_spec(&p, "app");
        assert_eq!(termination_grace_period(&p, app, KillReason::None), 20);
        assert_eq!(
            termination_grace_period(&p, app, KillReason::LivenessProbe),
            3
        );
        assert_eq!(
            termination_grace_period(&p, app, KillReason::StartupProbe),
            20
        );
        let mut deleting = p.clone();
        deleting.metadata.deletion_grace_period_seconds = Some(7);
        assert_eq!(
            termination_grace_period(&deleting, app, KillReason::LivenessProbe),
            7
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sidecars_wait_for_regular_containers_then_later_sidecars() {
        let p = pod();
        let targets: Vec<KillTarget> = ["s1", "s2", "app", "app2"].map(target).into();
        let o = TerminationOrdering::for_pod(&p, &targets).expect("has sidecars");
        let start = tokio::time::Instant::now();
        let (o1, o2) = (o.clone(), o.clone());
        let s1 = tokio::spawn(async move { (o1.wait_for_turn("s1", 30).await, start.elapsed()) });
        let s2 = tokio::spawn(async move { (o2.wait_for_turn("s2", 30).await, start.elapsed()) });
        assert_eq!(
            o.wait_for_turn("app", 30).await,
            0,
            "regular containers never wait"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        o.terminated("app");
        tokio::time::sleep(Duration::from_secs(2)).await;
        o.terminated("app2");
        let (waited2, at2) = s2.await.expect("s2");
        assert_eq!((waited2, at2), (4, Duration::from_secs(4)));
        tokio::time::sleep(Duration::from_secs(1)).await;
        o.terminated("s2");
        let (waited1, at1) = s1.await.expect("s1");
        assert_eq!((waited1, at1), (5, Duration::from_secs(5)));
        // A turn that never comes is cut at the grace period.
        let o = TerminationOrdering::for_pod(&p, &targets).expect("has sidecars");
        assert_eq!(o.wait_for_turn("s1", 3).await, 3);
        let none = serde_json::from_value::<Pod>(serde_json::json!({"spec": {"containers": []}}))
            .expect("pod");
        assert!(TerminationOrdering::for_pod(&none, &targets).is_none());
    }
}
