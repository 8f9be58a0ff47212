//! Stopping and removing things on the runtime (upstream `killContainer`, `killPodWithSyncResult`
//! and the removal half of container GC for pods that are gone). Containers are stopped in
//! parallel, each with its grace period; emits `Killing` events.

use std::path::Path;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::api::{
    RemoveContainerRequest, RemovePodSandboxRequest, StopContainerRequest, StopPodSandboxRequest,
};
use tracing::{info, warn};

use crate::container::ContainerStatus;
use crate::events::EventType;
use crate::kuberuntime::runtime_status::get_pod_status;
use crate::kuberuntime::start::{legacy_log_name, pod_log_dir};
use crate::kuberuntime::sync::Syncer;
use crate::pod_workers::SyncError;

/// Upstream always gives a container at least this long to stop unless a kill overrides it.
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;

/// One container to stop.
#[derive(Debug, Clone)]
pub struct KillTarget {
    pub id: String,
    pub name: String,
    /// The pod's grace period (from the spec, or recorded on the container for orphans).
    pub grace_period: i64,
    /// The `Killing` event message; default `Stopping container <name>`.
    pub message: Option<String>,
}

impl KillTarget {
    /// A container of a pod the kubelet has a spec for.
    pub fn for_container(pod: &Pod, c: &ContainerStatus, message: Option<String>) -> Self {
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        Self {
            id: c.id.clone(),
            name: c.name.clone(),
            grace_period: grace,
            message,
        }
    }

    /// A container of a runtime pod without a spec (grace recorded at creation).
    pub fn orphan(c: &ContainerStatus) -> Self {
        Self {
            id: c.id.clone(),
            name: c.name.clone(),
            grace_period: c.termination_grace_period.unwrap_or(30),
            message: None,
        }
    }
}

/// Stops `targets` in parallel. The grace period is the target's own (at least 2 s) unless
/// `grace_override` is given, which wins as upstream.
pub async fn kill_containers(
    syncer: &Syncer,
    pod: Option<&Pod>,
    targets: Vec<KillTarget>,
    grace_override: Option<i64>,
) -> Result<(), SyncError> {
    let kills = targets.into_iter().map(|t| async move {
        let grace = grace_override
            .unwrap_or_else(|| t.grace_period.max(MINIMUM_GRACE_PERIOD_SECONDS))
            .max(0);
        if let Some(pod) = pod {
            let message = t
                .message
                .clone()
                .unwrap_or_else(|| format!("Stopping container {}", t.name));
            syncer
                .events
                .event(pod, EventType::Normal, "Killing", &message);
        }
        info!(container = %t.name, id = %t.id, grace_period = grace, "stopping container");
        let result = syncer
            .runtime
            .stop_container(StopContainerRequest {
                container_id: t.id.clone(),
                timeout: grace,
            })
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(format!("stopping container {} ({}): {e}", t.name, t.id)),
        }
    });
    let errors: Vec<String> = join_all(kills)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(SyncError(errors.join("; ")))
    }
}

/// Removes every container and sandbox of a pod and its log directory (used once a pod is gone
/// from the config, in place of upstream's container GC for deleted pods).
pub async fn remove_pod_content(
    syncer: &Syncer,
    uid: &str,
    name: &str,
    namespace: &str,
) -> Result<(), SyncError> {
    let rt = syncer.runtime.as_ref();
    let status = get_pod_status(rt, uid, name, namespace)
        .await
        .map_err(|e| SyncError(e.to_string()))?;
    let mut errors = Vec::new();
    for c in &status.container_statuses {
        if let Err(e) = rt
            .remove_container(RemoveContainerRequest {
                container_id: c.id.clone(),
            })
            .await
            && !e.is_not_found()
        {
            errors.push(format!("removing container {} ({}): {e}", c.name, c.id));
        }
        if let Some(dir) = &syncer.config.container_log_symlink_dir {
            let link = dir.join(legacy_log_name(name, namespace, &c.name, &c.id));
            remove_quietly(&link);
        }
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
            errors.push(format!("removing sandbox {id}: {e}"));
        }
    }
    if !errors.is_empty() {
        return Err(SyncError(errors.join("; ")));
    }
    let logs = pod_log_dir(&syncer.config.pod_logs_dir, namespace, name, uid);
    if let Err(e) = std::fs::remove_dir_all(&logs)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(dir = %logs.display(), error = %e, "failed to remove pod log directory");
    }
    info!(pod = %format!("{namespace}/{name}"), %uid, containers = status.container_statuses.len(), sandboxes = status.sandbox_statuses.len(), "removed pod content from the runtime");
    Ok(())
}

fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(path = %path.display(), error = %e, "failed to remove file");
    }
}
