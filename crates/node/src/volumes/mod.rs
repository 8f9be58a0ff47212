//! Volume manager: owns what is mounted for each pod (the actual state) under
//! `<root-dir>/pods/<uid>/volumes/<plugin~name>/<volume>`. Receives mount requests from
//! `sync_pod` (upstream `WaitForAttachAndMount`, here performed in place and idempotent),
//! unmount requests from `sync_terminated_pod`, and orphan clean-up from housekeeping; emits the
//! CRI mounts of each container (volumeMounts with subPath/subPathExpr/readOnly/propagation,
//! the managed `/etc/hosts`, the termination-message file). subPaths are bind-mounted safely
//! under `<pod dir>/volume-subpaths/` ([`subpath`]); tear-down never removes anything through a
//! mount point ([`removeall`]).
//!
//! Plugins: emptyDir (disk, and `medium: Memory` as tmpfs sized by sizeLimit or node memory),
//! hostPath (with type checks), downwardAPI (atomic writer), and the API-backed configMap
//! (disk), secret and projected (tmpfs) volumes whose objects and tokens come through
//! [`PodObjects`]. Payload volumes are re-written on every mount call when their contents
//! changed. PVCs and other sources are refused with a clear error.

pub mod atomic_writer;
pub mod configmap;
pub mod downward;
pub mod etc_hosts;
pub mod hostpath;
pub mod ownership;
pub mod payload;
pub mod projected;
pub mod removeall;
pub mod secret;
pub mod subpath;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod, Volume};
use rkubelet_cri::api::{Mount, MountPropagation};
use tracing::{info, warn};

use crate::objects::{NoApiServer, PodObjects};
use crate::sync;
use crate::types::PodExt;

/// Directory names of the plugins, as upstream escapes `kubernetes.io/empty-dir`.
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";
pub const DOWNWARD_API_PLUGIN: &str = "kubernetes.io~downward-api";
pub const CONFIG_MAP_PLUGIN: &str = "kubernetes.io~configmap";
pub const SECRET_PLUGIN: &str = "kubernetes.io~secret";
pub const PROJECTED_PLUGIN: &str = "kubernetes.io~projected";

/// Plugin directories torn down with the pod (hostPath has none).
const PLUGIN_DIRS: [&str; 5] = [
    EMPTY_DIR_PLUGIN,
    DOWNWARD_API_PLUGIN,
    CONFIG_MAP_PLUGIN,
    SECRET_PLUGIN,
    PROJECTED_PLUGIN,
];

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// Upstream's FailedMount wording.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {message}")]
    SetUp { volume: String, message: String },
    #[error("cannot find volume {volume:?} to mount into container {container:?}")]
    MissingVolume { volume: String, container: String },
    /// An invalid subPath, or an unexpandable subPathExpr (upstream's wording, shown as is).
    #[error("{0}")]
    SubPath(String),
    /// Upstream hides the cause (it could describe the host's filesystem); it is logged.
    #[error(
        "failed to create subPath directory for volumeMount {volume:?} of container {container:?}"
    )]
    SubPathCreate { volume: String, container: String },
    #[error("failed to prepare subPath for volumeMount {volume:?} of container {container:?}")]
    SubPathPrepare { volume: String, container: String },
    #[error("unmounting volume {volume:?} of pod {uid}: {message}")]
    TearDown {
        uid: String,
        volume: String,
        message: String,
    },
    #[error("cleaning up subpath mounts of pod {uid}: {source}")]
    SubPathCleanUp {
        uid: String,
        source: subpath::SubPathError,
    },
    #[error(transparent)]
    Remove(#[from] removeall::RemoveError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Mount operations the manager needs from the host (a trait so tests need no privileges).
#[async_trait]
pub trait Mounter: Send + Sync {
    async fn mount_tmpfs(&self, dir: &Path, size_bytes: Option<i64>) -> Result<(), String>;
    async fn unmount(&self, dir: &Path) -> Result<(), String>;
    fn is_mount_point(&self, dir: &Path) -> bool;
    /// Bind-mounts `source` onto `target` (an existing empty directory or file). For subPaths
    /// `source` is `/proc/<pid>/fd/<n>` of an fd the caller keeps open until this returns: the
    /// kernel resolves it to the opened object, and it must not be canonicalized. A mounter
    /// without bind mounts fails every subPath mount.
    async fn bind_mount(&self, source: &Path, target: &Path) -> Result<(), String> {
        Err(format!(
            "bind-mounting {} onto {}: not supported by this mounter",
            source.display(),
            target.display()
        ))
    }
}

/// Mounts with the host's `mount`/`umount` (util-linux), as upstream's mounter does.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemMounter;

#[async_trait]
impl Mounter for SystemMounter {
    async fn mount_tmpfs(&self, dir: &Path, size_bytes: Option<i64>) -> Result<(), String> {
        let mut cmd = tokio::process::Command::new("mount");
        cmd.arg("-t").arg("tmpfs");
        if let Some(size) = size_bytes {
            cmd.arg("-o").arg(format!("size={size}"));
        }
        cmd.arg("tmpfs").arg(dir);
        run(cmd).await
    }

    async fn unmount(&self, dir: &Path) -> Result<(), String> {
        let mut cmd = tokio::process::Command::new("umount");
        cmd.arg(dir);
        run(cmd).await
    }

    fn is_mount_point(&self, dir: &Path) -> bool {
        let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return false;
        };
        let want = dir.as_os_str().as_encoded_bytes();
        info.lines()
            .filter_map(|l| l.split(' ').nth(4))
            .any(|mp| unescape_mountinfo(mp) == want)
    }

    /// `mount(2)` with `MS_BIND` in the kubelet's own process (the source path is handed to the
    /// kernel as is, as `mount --no-canonicalize --bind` would).
    async fn bind_mount(&self, source: &Path, target: &Path) -> Result<(), String> {
        let (src, dst) = (source.to_path_buf(), target.to_path_buf());
        tokio::task::spawn_blocking(move || rustix::mount::mount_bind(&src, &dst))
            .await
            .map_err(|e| format!("bind mount task: {e}"))?
            .map_err(|e| {
                format!(
                    "bind-mounting {} onto {}: {e}",
                    source.display(),
                    target.display()
                )
            })
    }
}

/// A mountinfo path field: space, tab, newline and backslash come octal-escaped (`\040`).
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| {
            b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

async fn run(mut cmd: tokio::process::Command) -> Result<(), String> {
    let out = cmd.output().await.map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// How a volume is backed on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeKind {
    EmptyDir,
    EmptyDirMemory,
    HostPath,
    DownwardApi,
    ConfigMap,
    Secret,
    Projected,
}

impl VolumeKind {
    /// Payload volumes whose contents follow their sources: re-written on every mount call.
    pub fn is_refreshed(self) -> bool {
        matches!(
            self,
            Self::DownwardApi | Self::ConfigMap | Self::Secret | Self::Projected
        )
    }

    /// Mounted read-only into every container whatever `volumeMounts.readOnly` says (upstream's
    /// payload plugins report `ReadOnly` attributes since CVE-2017-1002102): a container that
    /// could write would tamper with what the kubelet rewrites as root.
    pub fn always_read_only(self) -> bool {
        self.is_refreshed()
    }
}

/// One set-up volume of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedVolume {
    pub host_path: PathBuf,
    pub kind: VolumeKind,
}

/// Node-level inputs.
#[derive(Debug, Clone)]
pub struct VolumeConfig {
    pub root_dir: PathBuf,
    /// Sizes memory-backed emptyDirs without a sizeLimit.
    pub node_memory_bytes: i64,
    /// The node's hosts file (copied for hostNetwork pods).
    pub node_hosts_file: PathBuf,
}

/// Handle to the volume manager; clones share the state.
#[derive(Clone)]
pub struct VolumeManager {
    cfg: Arc<VolumeConfig>,
    mounter: Arc<dyn Mounter>,
    objects: Arc<dyn PodObjects>,
    actual: Arc<Mutex<HashMap<String, BTreeMap<String, MountedVolume>>>>,
}

impl VolumeManager {
    pub fn new(cfg: VolumeConfig, mounter: Arc<dyn Mounter>) -> Self {
        Self {
            cfg: Arc::new(cfg),
            mounter,
            objects: Arc::new(NoApiServer),
            actual: Arc::default(),
        }
    }

    /// Reads ConfigMaps, Secrets and service account tokens through `objects` (default:
    /// [`NoApiServer`], standalone mode).
    pub fn with_objects(mut self, objects: Arc<dyn PodObjects>) -> Self {
        self.objects = objects;
        self
    }

    fn actual(&self) -> MutexGuard<'_, HashMap<String, BTreeMap<String, MountedVolume>>> {
        sync::lock(&self.actual)
    }

    /// `<root>/pods/<uid>`.
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.cfg.root_dir.join("pods").join(uid)
    }

    fn plugin_dir(&self, uid: &str, plugin: &str, name: &str) -> PathBuf {
        self.pod_dir(uid).join("volumes").join(plugin).join(name)
    }

    /// Sets up every volume of `pod` (idempotent) and returns them by name. A volume that
    /// fails does not keep the others from being set up; the first failure is returned.
    pub async fn mount_pod_volumes(
        &self,
        pod: &Pod,
    ) -> Result<BTreeMap<String, MountedVolume>, VolumeError> {
        let uid = pod.uid().to_owned();
        let known = self.actual().get(&uid).cloned().unwrap_or_default();
        let mut mounted = BTreeMap::new();
        let mut first_err = None;
        for vol in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            // Set up once (and apply fsGroup once), as upstream's reconciler does; payload
            // volumes (downwardAPI, configMap, secret, projected) are refreshed on every sync.
            if let Some(m) = known.get(&vol.name).filter(|m| !m.kind.is_refreshed()) {
                mounted.insert(vol.name.clone(), m.clone());
                continue;
            }
            let res = match self.set_up(pod, vol).await {
                Ok((m, true)) => apply_fs_group(pod, &m).await.map(|()| m),
                Ok((m, false)) => Ok(m),
                Err(e) => Err(e),
            };
            match res {
                Ok(m) => {
                    mounted.insert(vol.name.clone(), m);
                }
                Err(message) => {
                    warn!(pod = %pod.full_name(), volume = %vol.name, error = %message, "volume set-up failed");
                    // A payload volume set up earlier stays mounted (and known for tear-down).
                    if let Some(m) = known.get(&vol.name) {
                        mounted.insert(vol.name.clone(), m.clone());
                    }
                    first_err.get_or_insert(VolumeError::SetUp {
                        volume: vol.name.clone(),
                        message,
                    });
                }
            }
        }
        {
            let mut actual = self.actual();
            // A pod none of whose volumes could be set up is not recorded as mounted.
            if first_err.is_none() || !mounted.is_empty() || actual.contains_key(&uid) {
                actual.insert(uid, mounted.clone());
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(mounted),
        }
    }

    /// Sets up one volume; `true` when its contents were (re)written.
    async fn set_up(&self, pod: &Pod, vol: &Volume) -> Result<(MountedVolume, bool), String> {
        let uid = pod.uid();
        if let Some(ed) = &vol.empty_dir {
            let dir = self.plugin_dir(uid, EMPTY_DIR_PLUGIN, &vol.name);
            if ed.medium.as_deref() == Some("Memory") {
                let size = ed
                    .size_limit
                    .as_ref()
                    .and_then(|q| crate::qos::parse_quantity_nanos(&q.0))
                    .map(crate::qos::nanos_to_units)
                    .and_then(|b| i64::try_from(b).ok())
                    .unwrap_or(self.cfg.node_memory_bytes);
                self.ensure_tmpfs(&dir, (size > 0).then_some(size)).await?;
                return Ok((
                    MountedVolume {
                        host_path: dir,
                        kind: VolumeKind::EmptyDirMemory,
                    },
                    true,
                ));
            }
            let medium = ed.medium.clone().filter(|m| !m.is_empty());
            let owned = dir.clone();
            tokio::task::spawn_blocking(move || {
                std::fs::create_dir_all(&owned)
                    .map_err(|e| format!("creating {}: {e}", owned.display()))?;
                if let Some(medium) = medium {
                    return Err(format!("emptyDir medium {medium:?} is not supported"));
                }
                set_mode(&owned, 0o777)
            })
            .await
            .map_err(|e| format!("creating {}: {e}", dir.display()))??;
            return Ok((
                MountedVolume {
                    host_path: dir,
                    kind: VolumeKind::EmptyDir,
                },
                true,
            ));
        }
        if let Some(hp) = &vol.host_path {
            let path = PathBuf::from(&hp.path);
            hostpath::check_type(&path, hp.type_.as_deref()).map_err(|e| e.0)?;
            return Ok((
                MountedVolume {
                    host_path: path,
                    kind: VolumeKind::HostPath,
                },
                false,
            ));
        }
        if let Some(da) = &vol.downward_api {
            let dir = self.plugin_dir(uid, DOWNWARD_API_PLUGIN, &vol.name);
            let payload = downward::payload(pod, da)?;
            return write(dir, payload, VolumeKind::DownwardApi, false).await;
        }
        if let Some(src) = &vol.config_map {
            let payload = configmap::volume_payload(&*self.objects, pod.namespace(), src)
                .await
                .map_err(|e| e.to_string())?;
            let dir = self.plugin_dir(uid, CONFIG_MAP_PLUGIN, &vol.name);
            return write(dir, payload, VolumeKind::ConfigMap, true).await;
        }
        if let Some(src) = &vol.secret {
            let payload = secret::volume_payload(&*self.objects, pod.namespace(), src)
                .await
                .map_err(|e| e.to_string())?;
            let dir = self.plugin_dir(uid, SECRET_PLUGIN, &vol.name);
            self.ensure_tmpfs(&dir, None).await?;
            return write(dir, payload, VolumeKind::Secret, true).await;
        }
        if let Some(src) = &vol.projected {
            let index = pod
                .spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .position(|v| v.name == vol.name)
                .unwrap_or_default();
            let field = format!("spec.volumes[{index}].projected");
            let payload = projected::volume_payload(&*self.objects, pod, src, &field)
                .await
                .map_err(|e| e.to_string())?;
            let dir = self.plugin_dir(uid, PROJECTED_PLUGIN, &vol.name);
            self.ensure_tmpfs(&dir, None).await?;
            return write(dir, payload, VolumeKind::Projected, true).await;
        }
        // API pods are not validated by us: refuse gitRepo here too (CVE-2024-10220/CVE-2025-1767).
        if vol.git_repo.is_some() {
            return Err(git_repo_disabled_message(&vol.name));
        }
        Err(format!(
            "volume type of {:?} is not supported by this rkubelet yet (supported: emptyDir, hostPath, downwardAPI, configMap, secret, projected)",
            vol.name
        ))
    }

    /// A memory-backed directory: an emptyDir with `medium: Memory` (`size` bytes) or a
    /// secret or projected volume (upstream wraps such an emptyDir, here without a size limit;
    /// its root's mode is left to [`write`]). Runs on every sync for the payload volumes: the
    /// directory and mount checks go off the async workers.
    async fn ensure_tmpfs(&self, dir: &Path, size: Option<i64>) -> Result<(), String> {
        let (mounter, owned) = (Arc::clone(&self.mounter), dir.to_path_buf());
        let mounted = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&owned)
                .map_err(|e| format!("creating {}: {e}", owned.display()))?;
            Ok::<_, String>(mounter.is_mount_point(&owned))
        })
        .await
        .map_err(|e| format!("creating {}: {e}", dir.display()))??;
        if !mounted {
            self.mounter.mount_tmpfs(dir, size).await?;
        }
        Ok(())
    }

    /// Tears down a pod's volumes (subPath bind mounts first, as upstream cleans them before a
    /// volume's tear-down; then tmpfs unmounted, plugin directories removed without crossing a
    /// mount point; hostPath contents are never touched) and forgets them.
    pub async fn unmount_pod_volumes(&self, uid: &str) -> Result<(), VolumeError> {
        let pod_dir = self.pod_dir(uid);
        subpath::clean_sub_paths(&*self.mounter, &pod_dir)
            .await
            .map_err(|source| VolumeError::SubPathCleanUp {
                uid: uid.to_owned(),
                source,
            })?;
        let volumes_dir = pod_dir.join("volumes");
        for plugin in PLUGIN_DIRS {
            let dir = volumes_dir.join(plugin);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                if self.mounter.is_mount_point(&path) {
                    self.mounter
                        .unmount(&path)
                        .await
                        .map_err(|message| VolumeError::TearDown {
                            uid: uid.to_owned(),
                            volume: e.file_name().to_string_lossy().into_owned(),
                            message,
                        })?;
                }
                remove_all(path).await?;
            }
        }
        self.actual().remove(uid);
        Ok(())
    }

    /// Removes `<root>/pods/<uid>` once its volumes are torn down, never through a mount point:
    /// whatever is still mounted under it stays (with the directories above it) and is named in
    /// the error.
    pub async fn remove_pod_dir(&self, uid: &str) -> Result<(), VolumeError> {
        remove_all(self.pod_dir(uid)).await
    }

    /// Pods with volumes set up (leak checks).
    pub fn mounted_pods(&self) -> HashSet<String> {
        self.actual().keys().cloned().collect()
    }

    /// Removes `<root>/pods/<uid>` of pods that are neither desired nor running (after a
    /// restart, pods deleted meanwhile leave their directories behind).
    /// Runs with every housekeeping: the listing goes off the async workers.
    pub async fn cleanup_orphaned_pod_dirs(&self, keep: &HashSet<String>) {
        let pods = self.cfg.root_dir.join("pods");
        let listed = tokio::task::spawn_blocking(move || {
            std::fs::read_dir(pods).map(|entries| {
                entries
                    .flatten()
                    .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                    .collect::<Vec<_>>()
            })
        })
        .await;
        let Ok(Ok(entries)) = listed else {
            return;
        };
        for (uid, path) in entries {
            if keep.contains(&uid) {
                continue;
            }
            if let Err(err) = self.unmount_pod_volumes(&uid).await {
                warn!(%uid, error = %err, "orphaned pod directory: unmounting failed; will retry");
                continue;
            }
            match self.remove_pod_dir(&uid).await {
                Ok(()) => info!(%uid, "removed orphaned pod directory"),
                Err(err) => {
                    warn!(%uid, dir = %path.display(), error = %err, "orphaned pod directory not removed (nothing is deleted through a mount point)")
                }
            }
        }
    }

    /// The CRI mounts of `container` (upstream `makeMounts`): its volumeMounts, the managed
    /// `/etc/hosts` (unless it mounts its own) and the termination-message file. A subPath (or
    /// a subPathExpr expanded with `env`, the container's environment) is bind-mounted under
    /// `<pod dir>/volume-subpaths/` and that target is the mount's host path.
    pub async fn container_mounts(
        &self,
        pod: &Pod,
        container: &Container,
        volumes: &BTreeMap<String, MountedVolume>,
        hosts: &HostsInfo<'_>,
        env: &[(String, String)],
    ) -> Result<Vec<Mount>, VolumeError> {
        let mut mounts = Vec::new();
        for (index, vm) in container.volume_mounts.iter().flatten().enumerate() {
            let vol = volumes
                .get(&vm.name)
                .ok_or_else(|| VolumeError::MissingVolume {
                    volume: vm.name.clone(),
                    container: container.name.clone(),
                })?;
            let mut host_path = vol.host_path.clone();
            // Bounded (PATH_MAX) for every pod, whichever API server admitted it.
            let sub = match vm.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
                Some(expr) => subpath::expand_expr(expr, env, &vm.name, &container.name),
                None => {
                    let sub = vm.sub_path.clone().unwrap_or_default();
                    subpath::validate_mount(&sub, "subPath", &vm.name, &container.name)
                        .map(|()| sub)
                }
            }
            .map_err(|e| VolumeError::SubPath(e.to_string()))?;
            if !sub.is_empty() {
                host_path = self
                    .sub_path(pod, container, index, &vm.name, &host_path, &sub)
                    .await?;
            }
            mounts.push(Mount {
                container_path: vm.mount_path.clone(),
                host_path: host_path.to_string_lossy().into_owned(),
                readonly: vm.read_only.unwrap_or(false) || vol.kind.always_read_only(),
                propagation: propagation(vm.mount_propagation.as_deref()) as i32,
                ..Default::default()
            });
        }
        let mounts_own_hosts = mounts.iter().any(|m| m.container_path == "/etc/hosts");
        if !mounts_own_hosts && !hosts.pod_ips.is_empty() {
            let path = self.write_hosts_file(pod, hosts).await?;
            mounts.push(Mount {
                container_path: "/etc/hosts".into(),
                host_path: path.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        if let Some(tmp) = container
            .termination_message_path
            .as_deref()
            .filter(|p| !p.is_empty())
        {
            let path = self
                .termination_log_file(pod.uid(), &container.name)
                .await?;
            mounts.push(Mount {
                container_path: tmp.to_owned(),
                host_path: path.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        Ok(mounts)
    }

    /// Upstream `makeMounts`' subPath step: validated, resolved inside the volume and
    /// bind-mounted; the user sees upstream's messages, the cause goes to the log.
    async fn sub_path(
        &self,
        pod: &Pod,
        container: &Container,
        index: usize,
        volume: &str,
        volume_path: &Path,
        sub: &str,
    ) -> Result<PathBuf, VolumeError> {
        subpath::validate(sub).map_err(|e| VolumeError::SubPath(e.to_string()))?;
        let pod_dir = self.pod_dir(pod.uid());
        let req = subpath::SubPathMount {
            pod_dir: &pod_dir,
            volume,
            volume_path,
            container: &container.name,
            index,
            sub_path: sub,
        };
        subpath::prepare(&*self.mounter, &req).await.map_err(|e| {
            warn!(pod = %pod.full_name(), container = %container.name, volume, sub_path = sub, error = %e, "preparing subPath failed");
            let (volume, container) = (volume.to_owned(), container.name.clone());
            if e.is_create() {
                VolumeError::SubPathCreate { volume, container }
            } else {
                VolumeError::SubPathPrepare { volume, container }
            }
        })
    }

    /// The pod's `/etc/hosts` (the node's file read and the pod's written in one trip off the
    /// async workers: this runs on every container start).
    async fn write_hosts_file(
        &self,
        pod: &Pod,
        hosts: &HostsInfo<'_>,
    ) -> Result<PathBuf, VolumeError> {
        let spec = pod.spec.as_ref();
        let aliases = spec
            .and_then(|s| s.host_aliases.clone())
            .unwrap_or_default();
        let managed = (!spec.and_then(|s| s.host_network).unwrap_or(false)).then(|| {
            etc_hosts::managed_content(hosts.pod_ips, hosts.hostname, hosts.domain, &aliases)
        });
        let node_hosts_file = self.cfg.node_hosts_file.clone();
        let path = self.pod_dir(pod.uid()).join("etc-hosts");
        off_worker(path.clone(), move || {
            let content = managed.unwrap_or_else(|| {
                let node = std::fs::read_to_string(&node_hosts_file).unwrap_or_default();
                etc_hosts::node_content(&node, &aliases)
            });
            // In place: running containers keep the file that is measured (CVE-2020-8557).
            etc_hosts::write_in_place(&path, content.as_bytes()).map_err(|e| VolumeError::Io {
                path: path.clone(),
                source: e.into_io(),
            })?;
            Ok(path)
        })
        .await
    }

    /// `<root>/pods/<uid>/containers/<name>/<id>`: an empty world-writable file per container
    /// instance (upstream creates a new one for every start).
    async fn termination_log_file(
        &self,
        uid: &str,
        container: &str,
    ) -> Result<PathBuf, VolumeError> {
        let dir = self.pod_dir(uid).join("containers").join(container);
        let id = format!(
            "{:08x}",
            (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos() ^ d.as_secs() as u32)
                .unwrap_or(0))
        );
        let path = dir.join(id);
        off_worker(path.clone(), move || {
            write_file(&path, b"", 0o666)?;
            Ok(path)
        })
        .await
    }
}

/// fsGroup ownership for the volume kinds upstream manages it for (emptyDir and the payload
/// volumes, whose contents are read-only to the group; never hostPath). The walk runs on a
/// blocking thread.
async fn apply_fs_group(pod: &Pod, m: &MountedVolume) -> Result<(), String> {
    let sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let Some(gid) = sc.and_then(|c| c.fs_group) else {
        return Ok(());
    };
    if m.kind == VolumeKind::HostPath {
        return Ok(());
    }
    let gid = u32::try_from(gid).map_err(|_| format!("fsGroup {gid} is out of range"))?;
    let policy = sc.and_then(|c| c.fs_group_change_policy.clone());
    let (dir, read_only) = (m.host_path.clone(), m.kind.is_refreshed());
    tokio::task::spawn_blocking(move || {
        ownership::set_volume_ownership(&dir, gid, policy.as_deref(), read_only)
    })
    .await
    .map_err(|e| format!("fsGroup ownership of {}: {e}", m.host_path.display()))?
}

/// Writes a payload volume's files atomically, after [`ensure_volume_dir`] when `open_root`
/// (on a blocking thread: both do file I/O); `true` when anything changed.
async fn write(
    dir: PathBuf,
    payload: payload::Payload,
    kind: VolumeKind,
    open_root: bool,
) -> Result<(MountedVolume, bool), String> {
    let target = dir.clone();
    let changed = tokio::task::spawn_blocking(move || {
        if open_root {
            ensure_volume_dir(&target)?;
        }
        atomic_writer::write_payload(&target, &payload).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| format!("writing the payload of {}: {e}", dir.display()))??;
    Ok((
        MountedVolume {
            host_path: dir,
            kind,
        },
        changed,
    ))
}

/// The volume root exists and is world-accessible (0777 as upstream's wrapped emptyDir; a
/// tmpfs root's sticky bit and an fsGroup's setgid bit are left alone).
fn ensure_volume_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let fd = open_dir_nofollow(dir)?;
    let mode = rustix::fs::fstat(&fd)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .st_mode;
    if mode & 0o777 != 0o777 {
        rustix::fs::fchmod(
            &fd,
            rustix::fs::Mode::from_raw_mode((mode & 0o7000) | 0o777),
        )
        .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// Opens a directory of the kubelet's tree, refusing a symlink in its place.
fn open_dir_nofollow(dir: &Path) -> Result<std::os::fd::OwnedFd, String> {
    crate::nofollow::open_dir_at(rustix::fs::CWD, dir)
        .map_err(|e| format!("opening {}: {e}", dir.display()))
}

/// What the managed `/etc/hosts` needs.
#[derive(Debug, Clone, Copy)]
pub struct HostsInfo<'a> {
    pub pod_ips: &'a [String],
    pub hostname: &'a str,
    pub domain: &'a str,
}

fn propagation(p: Option<&str>) -> MountPropagation {
    match p {
        Some("HostToContainer") => MountPropagation::PropagationHostToContainer,
        Some("Bidirectional") => MountPropagation::PropagationBidirectional,
        _ => MountPropagation::PropagationPrivate,
    }
}

/// Runs blocking file work about `path` on the blocking pool, not on an async worker thread;
/// a panic in it comes back as an I/O error about `path`.
async fn off_worker<T: Send + 'static>(
    path: PathBuf,
    work: impl FnOnce() -> Result<T, VolumeError> + Send + 'static,
) -> Result<T, VolumeError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(VolumeError::Io {
            path,
            source: std::io::Error::other(e.to_string()),
        })
    })
}

/// [`removeall::remove_all_one_filesystem`] off the async workers.
async fn remove_all(path: PathBuf) -> Result<(), VolumeError> {
    off_worker(path.clone(), move || {
        removeall::remove_all_one_filesystem(&path).map_err(VolumeError::from)
    })
    .await
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    // A directory of the kubelet's tree, never chmod'ed through a symlink.
    let fd = open_dir_nofollow(path)?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

/// Replaces `path` with a file holding `data` and exactly `mode`, atomically and without
/// following links ([`crate::nofollow::atomic_write`]). Not flushed to disk: these files (a fresh
/// termination-log file) are written anew at every container start.
fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), VolumeError> {
    let io = |source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let opts = crate::nofollow::WriteOptions {
        mode,
        durable: false,
    };
    crate::nofollow::atomic_write(path, data, opts).map_err(io)
}

/// Upstream's message for the gitRepo plugin, disabled (and locked off) since 1.33
/// (CVE-2024-10220, CVE-2025-1767: hooks run from a cloned repository, other pods' repositories
/// read). `volume` is the volume's name.
pub fn git_repo_disabled_message(volume: &str) -> String {
    format!(
        "volume {volume:?}: git-repo volume plugin has been disabled; use an emptyDir volume and an init container that clones the repository instead"
    )
}

#[cfg(test)]
mod api_tests;
#[cfg(test)]
mod tests;
