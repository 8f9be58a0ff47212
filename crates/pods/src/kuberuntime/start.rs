//! Starting things on the runtime (upstream `createPodSandbox` and `startContainer`): sandbox
//! creation with its log directory, and the per-container sequence
//! backoff check → image → config → CreateContainer → StartContainer, each step failing with the
//! upstream waiting reason (CrashLoopBackOff, ErrImagePull…, CreateContainerConfigError,
//! CreateContainerError, RunContainerError). Emits the upstream events for each step.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};
use rkubelet_cri::api::{
    CreateContainerRequest, Mount, PodSandboxConfig, PodSandboxStatusRequest, RunPodSandboxRequest,
    StartContainerRequest,
};
use rkubelet_cri::error::go_duration;
use tracing::{debug, info, warn};

use crate::container::{ContainerState, PodStatus};
use crate::env::{EnvContext, EnvObjects, invalid_env_from_keys, make_environment};
use crate::events::EventType;
use crate::images::ImageError;
use crate::kuberuntime::actions::{KillReason, is_host_network};
use crate::kuberuntime::container_config::sandbox_resources;
use crate::kuberuntime::container_config::{
    ContainerContext, ImageUser, generate_container_config,
};
use crate::kuberuntime::context::RuntimeContext;
use crate::kuberuntime::env_objects::EnvObjectsSnapshot;
use crate::kuberuntime::ephemeral::{as_container, target_container_name};
use crate::kuberuntime::hash::hash_container;
use crate::kuberuntime::hooks::{HookTarget, run_hook};
use crate::kuberuntime::kill::{KillTarget, kill_containers, termination_grace_period};
use crate::kuberuntime::labels::{format_pod, legacy_log_name};
use crate::kuberuntime::sandbox_config::{
    SandboxContext, WarningObject, generate_pod_sandbox_config, pod_hostname_and_domain,
    pod_logs_directory,
};
use crate::metrics::timeline;
use crate::pod_workers::SyncError;
use crate::qos::pod_qos_class;
use crate::types::PodExt;
use crate::volumes::{HostsInfo, MountedVolume};

/// Why a container (or the sandbox) could not be started; `reason()` is the waiting reason.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    CrashLoopBackOff(String),
    #[error("{}", .0.message)]
    Image(ImageError),
    #[error("{0}")]
    CreateContainerConfig(String),
    #[error("{0}")]
    CreateContainer(String),
    #[error("{0}")]
    RunContainer(String),
    #[error("Failed to create pod sandbox: {0}")]
    CreatePodSandbox(String),
    /// The postStart hook failed; the container was killed.
    #[error("{0}")]
    PostStartHook(String),
}

impl StartError {
    /// The container waiting reason upstream reports for this failure.
    pub fn reason(&self) -> &str {
        match self {
            StartError::CrashLoopBackOff(_) => "CrashLoopBackOff",
            StartError::Image(e) => e.reason.as_str(),
            StartError::CreateContainerConfig(_) => "CreateContainerConfigError",
            StartError::CreateContainer(_) => "CreateContainerError",
            StartError::RunContainer(_) => "RunContainerError",
            StartError::CreatePodSandbox(_) => "CreatePodSandboxError",
            StartError::PostStartHook(_) => "PostStartHookError",
        }
    }
}

/// A sandbox ready to take containers.
#[derive(Debug, Clone)]
pub struct SandboxInfo {
    pub id: String,
    pub config: PodSandboxConfig,
    pub ips: Vec<String>,
}

/// Starts a pod's sandbox and containers for one sync.
pub struct Starter<'a> {
    ctx: &'a RuntimeContext,
    pod: &'a Pod,
    status: &'a PodStatus,
    volumes: &'a BTreeMap<String, MountedVolume>,
    /// The pod's `imagePullSecrets`, read once per sync at the first image pull check
    /// (upstream `getPullSecretsForPod` in `SyncPod`).
    pull_secrets: tokio::sync::OnceCell<Vec<k8s_openapi::api::core::v1::Secret>>,
}

/// The CrashLoopBackOff key prefix of a container (upstream `getStableKey` without the hash).
pub fn backoff_key_prefix(pod: &Pod, container: &str) -> String {
    format!(
        "{}_{}_{}_{}",
        pod.name(),
        pod.namespace(),
        pod.uid(),
        container
    )
}

/// The restart count to use when the runtime has no record of a container: one more than the
/// highest `<n>.log` in its log directory (upstream `calcRestartCountByLogDir`).
pub fn restart_count_from_log_dir(dir: &Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stem = name.split('.').next()?;
            (name.starts_with(stem) && name[stem.len()..].starts_with(".log"))
                .then(|| stem.parse::<u32>().ok())
                .flatten()
        })
        .max()
        .map_or(0, |n| n + 1)
}

impl<'a> Starter<'a> {
    pub fn new(
        ctx: &'a RuntimeContext,
        pod: &'a Pod,
        status: &'a PodStatus,
        volumes: &'a BTreeMap<String, MountedVolume>,
    ) -> Self {
        Self {
            ctx,
            pod,
            status,
            volumes,
            pull_secrets: tokio::sync::OnceCell::new(),
        }
    }

    /// Upstream `makeMounts`' recursive read-only step, against the pod's runtime handler.
    async fn resolve_recursive_read_only(
        &self,
        container: &Container,
        mounts: &mut [Mount],
    ) -> Result<(), String> {
        use crate::kuberuntime::recursive_read_only as rro;
        // An unknown runtime class already failed the sandbox; here it supports nothing.
        let supports = match self.ctx.runtime_classes.lookup_runtime_handler(
            self.pod
                .spec
                .as_ref()
                .and_then(|s| s.runtime_class_name.as_deref()),
        ) {
            Ok(handler) => rro::runtime_supports(&*self.ctx.runtime, &handler).await,
            Err(_) => false,
        };
        rro::apply(container, mounts, supports)
    }

    /// Upstream `makeMounts`: volumeMounts (subPathExpr expanded with `env`, the container's
    /// environment), the managed `/etc/hosts` and the termination log.
    async fn container_mounts(
        &self,
        sandbox: &SandboxInfo,
        container: &Container,
        env: &[(String, String)],
    ) -> Result<Vec<Mount>, String> {
        let ctx = self.ctx;
        let host_network = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let ips = if host_network {
            &ctx.config.host_ips
        } else {
            &sandbox.ips
        };
        let (hostname, domain) =
            pod_hostname_and_domain(self.pod, &ctx.config.sandbox.cluster_domain)
                .map_err(|e| e.to_string())?;
        ctx.volumes
            .container_mounts(
                self.pod,
                container,
                self.volumes,
                &HostsInfo {
                    pod_ips: ips,
                    hostname: &hostname,
                    domain: &domain,
                },
                env,
            )
            .await
            .map_err(|e| e.to_string())
    }

    fn sandbox_config(&self, attempt: u32) -> Result<PodSandboxConfig, StartError> {
        let cgroup_ctx;
        let ctx = match &self.ctx.cgroups {
            Some(cm) => {
                let parent = cm
                    .pod_cgroup_parent(self.pod)
                    .map_err(|e| StartError::CreatePodSandbox(e.to_string()))?;
                cgroup_ctx = SandboxContext {
                    cgroup_parent: Some(parent),
                    ..self.ctx.config.sandbox.clone()
                };
                &cgroup_ctx
            }
            None => &self.ctx.config.sandbox,
        };
        let (mut config, warnings) = generate_pod_sandbox_config(self.pod, attempt, ctx)
            .map_err(|e| StartError::CreatePodSandbox(e.to_string()))?;
        if let Some(linux) = config.linux.as_mut() {
            let (resources, overhead) =
                sandbox_resources(self.pod, &self.ctx.config.runtime_options);
            linux.resources = Some(resources);
            linux.overhead = Some(overhead);
        }
        for w in warnings {
            // Node-object events need the API event sink; until then they are logged.
            if w.object == WarningObject::Node {
                warn!(node = %self.ctx.config.node_name, reason = w.reason, "{}", w.message);
            } else {
                self.ctx
                    .events
                    .event(self.pod, EventType::Warning, w.reason, &w.message);
            }
        }
        Ok(config)
    }

    /// Uses a sandbox that already runs (its config regenerated for container creation).
    pub fn existing_sandbox(&self, id: &str, attempt: u32) -> Result<SandboxInfo, SyncError> {
        let config = self.sandbox_config(attempt).map_err(SyncError::Sandbox)?;
        Ok(SandboxInfo {
            id: id.to_owned(),
            config,
            ips: self.status.ips.clone(),
        })
    }

    /// Creates a new sandbox (upstream `createPodSandbox`), reporting `FailedCreatePodSandBox`.
    pub async fn create_sandbox(&self, attempt: u32) -> Result<SandboxInfo, StartError> {
        let pod = self.pod;
        if attempt > 0 {
            self.ctx.events.event(
                pod,
                EventType::Normal,
                "SandboxChanged",
                "Pod sandbox changed, it will be killed and re-created.",
            );
        }
        let fail = |msg: String| {
            self.ctx.events.event(
                pod,
                EventType::Warning,
                "FailedCreatePodSandBox",
                &format!("Failed to create pod sandbox: {msg}"),
            );
            StartError::CreatePodSandbox(msg)
        };
        let config = self.sandbox_config(attempt).map_err(|e| match e {
            StartError::CreatePodSandbox(msg) => fail(msg),
            other => other,
        })?;
        let log_directory = PathBuf::from(&config.log_directory);
        off_worker(move || std::fs::create_dir_all(&log_directory))
            .await
            .map_err(|e| {
                fail(format!(
                    "creating log directory {}: {e}",
                    config.log_directory
                ))
            })?;
        // Upstream looks the handler up after the config and log directory; an unknown class
        // (or, here, any named class without an API server) fails the sandbox, never falling
        // back to the default handler.
        let runtime_handler = self
            .ctx
            .runtime_classes
            .lookup_runtime_handler(
                pod.spec
                    .as_ref()
                    .and_then(|s| s.runtime_class_name.as_deref()),
            )
            .map_err(|e| fail(e.to_string()))?;
        if !runtime_handler.is_empty() {
            debug!(pod = %pod.full_name(), uid = %pod.uid(), %runtime_handler, "running pod with runtime handler");
        }
        let started = tokio::time::Instant::now();
        let resp = self
            .ctx
            .runtime
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler,
            })
            .await
            .map_err(|e| fail(e.to_string()))?;
        let id = resp.pod_sandbox_id;
        timeline::mark(pod.uid(), "sandbox_created");
        info!(pod = %pod.full_name(), uid = %pod.uid(), sandbox = %id, attempt, elapsed = ?started.elapsed(), "created pod sandbox");
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let mut ips = Vec::new();
        if !host_network {
            let st = self
                .ctx
                .runtime
                .pod_sandbox_status(PodSandboxStatusRequest {
                    pod_sandbox_id: id.clone(),
                    verbose: false,
                })
                .await
                .map_err(|e| fail(e.to_string()))?;
            if let Some(net) = st.status.and_then(|s| s.network) {
                if !net.ip.is_empty() {
                    ips.push(net.ip.clone());
                }
                ips.extend(net.additional_ips.into_iter().map(|i| i.ip));
            }
        }
        timeline::mark(pod.uid(), "sandbox_ready");
        Ok(SandboxInfo { id, config, ips })
    }

    /// Starts one init or regular container (upstream `startContainer`); returns its ID.
    pub async fn start_container(
        &self,
        sandbox: &SandboxInfo,
        container: &Container,
        is_init: bool,
    ) -> Result<String, StartError> {
        self.start(sandbox, container, is_init, None).await
    }

    /// Starts an ephemeral container (upstream `startContainer` with an ephemeral start
    /// spec): with a `targetContainerName`, it joins that container's PID namespace, named by
    /// the newest runtime record of the target; no record is a `CreateContainerConfigError`
    /// (upstream `getTargetID`).
    pub async fn start_ephemeral_container(
        &self,
        sandbox: &SandboxInfo,
        ec: &EphemeralContainer,
    ) -> Result<String, StartError> {
        let container = as_container(ec);
        let target = match target_container_name(ec) {
            None => None,
            Some(name) => match self.status.find_container(name) {
                Some(t) => Some(t.id.as_str()),
                None => {
                    let msg = format!("unable to find target container {name}");
                    self.ctx.events.event(
                        self.pod,
                        EventType::Warning,
                        "Failed",
                        &format!("Error: {msg}"),
                    );
                    return Err(StartError::CreateContainerConfig(msg));
                }
            },
        };
        self.start(sandbox, &container, false, target).await
    }

    async fn start(
        &self,
        sandbox: &SandboxInfo,
        container: &Container,
        is_init: bool,
        pid_namespace_target: Option<&str>,
    ) -> Result<String, StartError> {
        let (pod, ctx) = (self.pod, self.ctx);
        self.check_backoff(container)?;

        let pull_secrets = self
            .pull_secrets
            .get_or_init(|| {
                crate::credentialprovider::secrets::pull_secrets_for_pod(
                    pod,
                    ctx.objects.as_deref(),
                    ctx.events.as_ref(),
                )
            })
            .await;
        let ensured = ctx
            .images
            .ensure_image(pod, container, Some(&sandbox.config), pull_secrets)
            .await
            .map_err(StartError::Image)?;
        timeline::mark_container(pod.uid(), "image_ready", &container.name);
        let image_ref = ensured.image_ref;

        let log_dir = pod_logs_directory(
            &ctx.config.pod_logs_dir,
            pod.namespace(),
            pod.name(),
            pod.uid(),
        )
        .join(&container.name);
        let prev_restarts = self
            .status
            .find_container(&container.name)
            .map(|prev| prev.restart_count);
        let failed = |msg: String| {
            ctx.events
                .event(pod, EventType::Warning, "Failed", &format!("Error: {msg}"));
            msg
        };
        // One trip off the async workers: the restart count from the old logs (when the
        // runtime has no record), then the log directory.
        let dir = log_dir.clone();
        let (restart_count, created) = off_worker(move || {
            let count = prev_restarts.map_or_else(|| restart_count_from_log_dir(&dir), |n| n + 1);
            Ok((count, std::fs::create_dir_all(&dir)))
        })
        .await
        .unwrap_or_else(|e| (prev_restarts.map_or(0, |n| n + 1), Err(e)));
        created.map_err(|e| {
            StartError::CreateContainerConfig(failed(format!(
                "creating container log directory {}: {e}",
                log_dir.display()
            )))
        })?;
        // The pull-policy check (or the pull) already read the image's record; ask the
        // runtime again only when it did not (`Always` with a failed size lookup).
        let image = match ensured.image {
            Some(image) => Some(image),
            None => ctx
                .images
                .image_status(&image_ref)
                .await
                .map_err(|e| StartError::CreateContainerConfig(failed(e.to_string())))?,
        };
        let image_user = ImageUser::from_image(image.as_ref());
        // Upstream order (`GenerateRunContainerOptions`): the environment, then the mounts,
        // whose subPathExprs expand with it.
        let (env_objects, service_env) = match &ctx.objects {
            Some(objects)
                if !objects.services_synced() && !pod.source().is_some_and(|s| s.is_static()) =>
            {
                return Err(StartError::CreateContainerConfig(failed(
                    "services have not yet been read at least once, cannot construct envvars"
                        .to_owned(),
                )));
            }
            Some(objects) => (
                Some(EnvObjectsSnapshot::load(objects.as_ref(), pod, container).await),
                objects.service_env(pod),
            ),
            None => (None, Default::default()),
        };
        let cpuset = ctx.cpu_manager.as_ref().and_then(|m| {
            let cpus = m.container_cpuset(pod.uid(), &container.name)?;
            Some((cpus, m.container_has_exclusive_cpus(pod, &container.name)))
        });
        // Scoped: the env context borrows trait objects that must not live across awaits.
        let env_context = || {
            let mut env =
                EnvContext::new(&ctx.config.node_name, &sandbox.ips, &ctx.config.host_ips);
            env.service_env = &service_env;
            env.objects = env_objects.as_ref().map(|o| o as &dyn EnvObjects);
            env
        };
        let uses_sub_path_expr = container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.sub_path_expr.as_deref().is_some_and(|e| !e.is_empty()));
        let envs = if uses_sub_path_expr {
            make_environment(pod, container, &env_context())
                .map_err(|e| StartError::CreateContainerConfig(failed(e.to_string())))?
        } else {
            Vec::new()
        };
        let mut mounts = self
            .container_mounts(sandbox, container, &envs)
            .await
            .map_err(|e| StartError::CreateContainerConfig(failed(e)))?;
        if crate::kuberuntime::recursive_read_only::requested(container) {
            self.resolve_recursive_read_only(container, &mut mounts)
                .await
                .map_err(|e| StartError::CreateContainerConfig(failed(e)))?;
        }
        let config = {
            let env = env_context();
            for warning in invalid_env_from_keys(pod, container, &env) {
                ctx.events.event(
                    pod,
                    EventType::Warning,
                    "InvalidEnvironmentVariableNames",
                    &warning,
                );
            }
            generate_container_config(
                pod,
                container,
                &ContainerContext {
                    env: &env,
                    image_ref: &image_ref,
                    restart_count,
                    qos_class: pod_qos_class(pod),
                    image_user: &image_user,
                    mounts: &mounts,
                    options: &ctx.config.runtime_options,
                    cpuset_cpus: cpuset.as_ref().map(|(cpus, exclusive)| {
                        crate::kuberuntime::container_config::CpuAssignment {
                            cpus,
                            exclusive: *exclusive,
                        }
                    }),
                    pid_namespace_target,
                },
            )
            .map_err(|e| StartError::CreateContainerConfig(failed(e.to_string())))?
        };
        let log_path = config.log_path.clone();
        timeline::mark_container(pod.uid(), "container_config", &container.name);

        let created = ctx
            .runtime
            .create_container(CreateContainerRequest {
                pod_sandbox_id: sandbox.id.clone(),
                config: Some(config),
                sandbox_config: Some(sandbox.config.clone()),
            })
            .await
            .map_err(|e| StartError::CreateContainer(failed(e.to_string())))?;
        let id = created.container_id;
        timeline::mark_container(pod.uid(), "container_created", &container.name);
        ctx.events.event(
            pod,
            EventType::Normal,
            "Created",
            &format!("Created container: {}", container.name),
        );
        ctx.runtime
            .start_container(StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .map_err(|e| StartError::RunContainer(failed(e.to_string())))?;
        timeline::mark_container(pod.uid(), "container_started", &container.name);
        ctx.events.event(
            pod,
            EventType::Normal,
            "Started",
            &format!("Started container {}", container.name),
        );
        info!(pod = %pod.full_name(), uid = %pod.uid(), container = %container.name, id = %id, restart_count, init = is_init, "started container");
        self.link_legacy_log(
            &id,
            &container.name,
            &sandbox.config.log_directory,
            &log_path,
        )
        .await;
        self.post_start(sandbox, container, &id).await?;
        timeline::mark_container(pod.uid(), "post_start_done", &container.name);
        Ok(id)
    }

    /// Upstream: runs the postStart hook before the container counts as started; on failure
    /// the container is killed (`FailedPostStartHook`) and restarted per the restart policy.
    async fn post_start(
        &self,
        sandbox: &SandboxInfo,
        container: &Container,
        id: &str,
    ) -> Result<(), StartError> {
        let Some(hook) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
        else {
            return Ok(());
        };
        let (pod, ctx) = (self.pod, self.ctx);
        let pod_ip = sandbox
            .ips
            .first()
            .or_else(|| {
                is_host_network(pod)
                    .then(|| ctx.config.host_ips.first())
                    .flatten()
            })
            .cloned()
            .unwrap_or_default();
        let target = HookTarget {
            runtime: ctx.runtime.as_ref(),
            pod,
            container,
            container_id: id,
            pod_ip: &pod_ip,
        };
        let Err(msg) = run_hook(hook, &target).await else {
            return Ok(());
        };
        warn!(pod = %pod.full_name(), uid = %pod.uid(), container = %container.name, error = %msg, "postStart hook failed");
        // The hook's output may hold secrets: the event only says that it failed.
        ctx.events.event(
            pod,
            EventType::Warning,
            "FailedPostStartHook",
            "PostStartHook failed",
        );
        let kill = KillTarget {
            id: id.to_owned(),
            name: container.name.clone(),
            grace_period: termination_grace_period(
                pod,
                Some(container),
                KillReason::FailedPostStartHook,
            ),
            message: Some("FailedPostStartHook".to_owned()),
            spec: Some(container.clone()),
            sidecar: false,
            pod_ip,
        };
        if let Err(e) = kill_containers(ctx, Some(pod), vec![kill], None).await {
            warn!(pod = %pod.full_name(), container = %container.name, error = %e, "killing container after failed postStart hook");
        }
        Err(StartError::PostStartHook(msg))
    }

    /// Upstream `doBackOff`: refuses to restart a container that exited too recently.
    fn check_backoff(&self, container: &Container) -> Result<(), StartError> {
        let Some(last) = self
            .status
            .containers_named(&container.name)
            .find(|c| c.state == ContainerState::Exited)
        else {
            return Ok(());
        };
        let ctx = self.ctx;
        let now = tokio::time::Instant::now();
        let finished = last
            .finished_at
            .map(|t| ctx.clock.instant_of(t))
            .unwrap_or(now);
        let key = format!(
            "{}_{}",
            backoff_key_prefix(self.pod, &container.name),
            hash_container(container)
        );
        let mut backoff = crate::sync::lock(&ctx.crash_backoff);
        if backoff.is_in_backoff_since(&key, finished, now) {
            let delay = go_duration(backoff.get(&key));
            drop(backoff);
            ctx.events.event(
                self.pod,
                EventType::Warning,
                "BackOff",
                &format!(
                    "Back-off restarting failed container {} in pod {}",
                    container.name,
                    format_pod(self.pod)
                ),
            );
            debug!(pod = %self.pod.full_name(), container = %container.name, %delay, "container in CrashLoopBackOff");
            return Err(StartError::CrashLoopBackOff(format!(
                "back-off {delay} restarting failed container={} pod={}",
                container.name,
                format_pod(self.pod)
            )));
        }
        backoff.next(&key, finished);
        Ok(())
    }

    /// Upstream keeps `/var/log/containers/<pod>_<ns>_<container>-<id>.log` symlinks for log
    /// shippers; failures only warn.
    async fn link_legacy_log(&self, id: &str, name: &str, log_directory: &str, log_path: &str) {
        let Some(dir) = self.ctx.config.container_log_symlink_dir.clone() else {
            return;
        };
        let link = dir.join(legacy_log_name(
            self.pod.name(),
            self.pod.namespace(),
            name,
            id,
        ));
        let target = Path::new(log_directory).join(log_path);
        let made = link.clone();
        let result = off_worker(move || {
            std::fs::create_dir_all(&dir).and_then(|()| std::os::unix::fs::symlink(&target, &made))
        })
        .await;
        if let Err(e) = result
            && e.kind() != std::io::ErrorKind::AlreadyExists
        {
            warn!(link = %link.display(), error = %e, "failed to create container log symlink");
        }
    }
}

/// Runs blocking file work on the blocking pool, not on an async worker thread; a panic in it
/// comes back as an I/O error.
pub(crate) async fn off_worker<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn go_durations() {
        for (secs, want) in [
            (10, "10s"),
            (80, "1m20s"),
            (160, "2m40s"),
            (300, "5m0s"),
            (3600, "1h0m0s"),
        ] {
            assert_eq!(go_duration(Duration::from_secs(secs)), want);
        }
    }

    #[test]
    fn restart_count_from_logs() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(restart_count_from_log_dir(dir.path()), 0);
        for f in ["0.log", "3.log", "2.log.20250101-000000", "junk"] {
            std::fs::write(dir.path().join(f), "").expect("write");
        }
        assert_eq!(restart_count_from_log_dir(dir.path()), 4);
        assert_eq!(restart_count_from_log_dir(&dir.path().join("missing")), 0);
    }
}
