//! The third client of `podstart`: the raw CRI client sending rkubelet's own requests. For
//! each benchmark pod it decodes the manifest rkubelet gets, applies the static source's
//! defaults, and builds the sandbox and container configs with rkubelet's generators (cgroup
//! parent, DNS and hostname, log directory, labels and annotations, `/etc/hosts` and
//! termination-log mounts, resources, security context). It then makes the same three calls as
//! the plain raw client, without the kubelet around them.
//!
//! Between the plain raw client and rkubelet this separates two things: what the runtime
//! spends on the richer requests (plain raw → raw with rkubelet's requests), and what the
//! kubelet adds around the calls (that → rkubelet).
//!
//! The pods are made so that rkubelet, running beside them on the same runtime, ignores them:
//! the kubelet's pod-UID label is left off (rkubelet's runtime listing skips sandboxes and
//! containers without it, so they are never killed as orphans), and their cgroups live under
//! their own root, [`CGROUP_ROOT`], away from the `kubepods` tree rkubelet sweeps.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use k8s_openapi::api::core::v1::Pod;
use kubelet::env::EnvContext;
use kubelet::kuberuntime::container_config::{
    ContainerContext, ImageUser, RuntimeOptions, generate_container_config,
};
use kubelet::kuberuntime::labels::POD_UID_LABEL;
use kubelet::kuberuntime::sandbox_config::{SandboxContext, generate_pod_sandbox_config};
use kubelet::qos::pod_qos_class;
use kubelet::sources::decode::decode_manifest;
use kubelet::sources::defaults::set_pod_defaults;
use rkubelet_cri::api::{ContainerConfig, ImageSpec, ImageStatusRequest, Mount, PodSandboxConfig};
use rkubelet_cri::{ImageService, RemoteRuntime};

/// The cgroup (under every hierarchy) that holds these pods' cgroups.
pub const CGROUP_ROOT: &str = "rkubelet-bench-raw";

/// What the configs of every pod share: the node's settings as rkubelet has them.
pub struct KubeletRequests {
    node: String,
    dir: PathBuf,
    image_ref: String,
    sandbox: SandboxContext,
    options: RuntimeOptions,
}

impl KubeletRequests {
    /// `dir` holds the pods' log directories and per-pod files; `node` is rkubelet's node
    /// name. The image is resolved to its ID, as rkubelet's image manager does.
    pub async fn new(rt: &RemoteRuntime, dir: &Path, node: &str, image: &str) -> Result<Self> {
        let status = rt
            .image_status(ImageStatusRequest {
                image: Some(ImageSpec {
                    image: image.to_owned(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await?;
        let image_ref = status
            .image
            .map(|i| i.id)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| anyhow!("image {image} is not present in the runtime"))?;
        let sandbox = SandboxContext {
            node_name: node.to_owned(),
            pod_logs_dir: dir.join("logs"),
            // rkubelet's default `resolvConf`.
            host_resolv_conf: std::fs::read_to_string("/etc/resolv.conf").ok(),
            node_ips: vec!["127.0.0.1".to_owned()],
            ..Default::default()
        };
        Ok(Self {
            node: node.to_owned(),
            dir: dir.to_owned(),
            image_ref,
            sandbox,
            options: RuntimeOptions::default(),
        })
    }

    /// The sandbox and container configs rkubelet would send for the pod of `manifest`, given
    /// `uid`; creates the files and directories rkubelet would have made for them.
    pub fn configs(
        &self,
        manifest: &str,
        uid: &str,
    ) -> Result<(PodSandboxConfig, ContainerConfig)> {
        let mut pod: Pod = decode_manifest(manifest.as_bytes(), false)
            .map_err(|e| anyhow!("{e}"))?
            .into_iter()
            .next()
            .context("the manifest holds no pod")?;
        set_pod_defaults(&mut pod);
        let meta = &mut pod.metadata;
        meta.uid = Some(uid.to_owned());
        meta.name = meta.name.as_ref().map(|n| format!("{n}-{}", self.node));

        let mut sandbox_ctx = self.sandbox.clone();
        sandbox_ctx.cgroup_parent = Some(format!("/{CGROUP_ROOT}/pod{uid}"));
        let (mut sandbox, _warnings) = generate_pod_sandbox_config(&pod, 0, &sandbox_ctx)?;
        sandbox.labels.remove(POD_UID_LABEL);
        std::fs::create_dir_all(Path::new(&sandbox.log_directory).join("c"))?;

        let container = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .context("the pod has no container")?;
        let pod_dir = self.dir.join("pods").join(uid);
        std::fs::create_dir_all(&pod_dir)?;
        let hosts = pod_dir.join("etc-hosts");
        std::fs::write(&hosts, "127.0.0.1\tlocalhost\n")?;
        let termination_log = pod_dir.join("termination-log");
        std::fs::write(&termination_log, "")?;
        let mounts = [
            Mount {
                container_path: "/etc/hosts".into(),
                host_path: hosts.to_string_lossy().into_owned(),
                ..Default::default()
            },
            Mount {
                container_path: container
                    .termination_message_path
                    .clone()
                    .unwrap_or_else(|| "/dev/termination-log".into()),
                host_path: termination_log.to_string_lossy().into_owned(),
                ..Default::default()
            },
        ];
        let env = EnvContext::new(&self.node, &[], &self.sandbox.node_ips);
        let ctx = ContainerContext {
            env: &env,
            image_ref: &self.image_ref,
            restart_count: 0,
            qos_class: pod_qos_class(&pod),
            image_user: &ImageUser::default(),
            mounts: &mounts,
            options: &self.options,
            cpuset_cpus: None,
            pid_namespace_target: None,
        };
        let mut config = generate_container_config(&pod, container, &ctx)?;
        config.labels.remove(POD_UID_LABEL);
        Ok((sandbox, config))
    }
}

/// Removes the pod cgroups runc left under [`CGROUP_ROOT`] in every hierarchy (the runtime
/// removes a container's own cgroup, not the parents it created).
pub fn remove_cgroups() {
    // A v2-only host has one hierarchy at the top; a v1 or hybrid host one per directory
    // (`unified` included).
    let top = Path::new("/sys/fs/cgroup");
    let hierarchies = std::fs::read_dir(top)
        .into_iter()
        .flatten()
        .flatten()
        .map(|h| h.path());
    for root in std::iter::once(top.to_owned())
        .chain(hierarchies)
        .map(|h| h.join(CGROUP_ROOT))
    {
        for pod in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let _ = std::fs::remove_dir(pod.path());
        }
        let _ = std::fs::remove_dir(&root);
    }
}
