//! cm — the container manager (upstream pkg/kubelet/cm; the CPU manager lives in
//! `cpumanager`): owns the kubelet's cgroup tree
//! `<cgroupRoot>/kubepods{,/burstable,/besteffort}/pod<uid>` through the `CgroupFs` it is
//! handed (cgroupfs driver, or systemd slices `kubepods-burstable-pod<uid>.slice`). Receives the kubelet config (`CmConfig`), the node capacity and the
//! active pods (a `watch` of the desired pods); emits cgroup parents for sandboxes, creates pod
//! cgroups before sandboxes exist, keeps the QoS cgroups' shares current (on every pod change
//! and every minute), enforces node allocatable at start and destroys orphaned pod cgroups
//! when housekeeping asks. `ContainerManager` is a cheap clonable handle; its background task
//! (`run`) joins the agent's task tree.

pub mod allocatable;
pub mod cgroups;
pub mod cpumanager;
pub mod node_setup;
pub mod pod_containers;
pub mod pod_resize;
pub mod qos_containers;
pub mod resources;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::cgroups::{CgroupError, CgroupFs, CgroupName};
use self::qos_containers::QosCgroups;
use self::resources::{PodCgroupOptions, ResourceList};
use crate::sync;

/// The node allocatable cgroup's name below `cgroupRoot`.
pub const KUBEPODS: &str = "kubepods";

/// Failures of the container manager; each names the cgroup involved.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    #[error("failed to create the node allocatable cgroup {cgroup}: {source}")]
    NodeAllocatable { cgroup: String, source: CgroupError },
    #[error("failed to create the QoS cgroup {cgroup}: {source}")]
    Qos { cgroup: String, source: CgroupError },
    #[error("failed to enforce {what} on cgroup {cgroup}: {detail}")]
    Reserved {
        what: &'static str,
        cgroup: String,
        detail: String,
    },
    #[error("unable to ensure pod container exists: {0}")]
    PodCgroup(CgroupError),
}

/// Settings of the container manager, resolved from the kubelet config.
#[derive(Debug, Clone)]
pub struct CmConfig {
    /// `cgroupRoot` (default `/`).
    pub cgroup_root: String,
    /// Pod cgroup knobs (`cpuCFSQuota`, `cpuCFSQuotaPeriod`, `podPidsLimit`).
    pub pod_options: PodCgroupOptions,
    /// `enforceNodeAllocatable`.
    pub enforce_node_allocatable: BTreeSet<String>,
    /// `systemReserved` / `kubeReserved` in nano-units.
    pub system_reserved: ResourceList,
    pub kube_reserved: ResourceList,
    /// `systemReservedCgroup` / `kubeReservedCgroup` (cgroupfs paths).
    pub system_reserved_cgroup: String,
    pub kube_reserved_cgroup: String,
    /// The node's capacity in nano-units: cpu, memory, `hugepages-<size>`, `pid`.
    pub capacity: ResourceList,
    /// Huge page sizes of the host, bytes.
    pub hugepage_sizes: Vec<u64>,
    /// How often the QoS cgroups are refreshed without a pod change (upstream: 1 minute).
    pub qos_update_period: Duration,
    /// Feature gate `DisableCPUQuotaWithExclusiveCPUs` (on by default): a pod given exclusive
    /// CPUs by the static CPU manager gets no CFS quota on its pod cgroup.
    pub disable_cpu_quota_with_exclusive_cpus: bool,
}

impl Default for CmConfig {
    fn default() -> Self {
        Self {
            cgroup_root: "/".to_owned(),
            pod_options: PodCgroupOptions::default(),
            enforce_node_allocatable: BTreeSet::from([allocatable::ENFORCE_PODS.to_owned()]),
            system_reserved: ResourceList::new(),
            kube_reserved: ResourceList::new(),
            system_reserved_cgroup: String::new(),
            kube_reserved_cgroup: String::new(),
            capacity: ResourceList::new(),
            hugepage_sizes: Vec::new(),
            qos_update_period: Duration::from_secs(60),
            disable_cpu_quota_with_exclusive_cpus: true,
        }
    }
}

/// The node's capacity for the container manager: cpu (cores), memory and huge pages from the
/// host facts, and `pid` from `/proc/sys/kernel/pid_max` (upstream `pidlimit.PIDs`).
pub fn node_capacity(host: &crate::host::HostInfo, pid_max: Option<i64>) -> ResourceList {
    const G: i128 = 1_000_000_000;
    let mut c = ResourceList::new();
    c.insert("cpu".to_owned(), i128::from(host.num_cores) * G);
    c.insert("memory".to_owned(), i128::from(host.memory_capacity) * G);
    for hp in &host.huge_pages {
        c.insert(
            crate::resources::huge_page_resource_name(hp.page_size),
            i128::from(hp.page_size) * i128::from(hp.num_pages) * G,
        );
    }
    if let Some(pids) = pid_max {
        c.insert(allocatable::PID.to_owned(), i128::from(pids) * G);
    }
    c
}

/// `/proc/sys/kernel/pid_max`, if readable.
pub fn read_pid_max() -> Option<i64> {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Upstream `swapControllerAvailable`: v1 has `memory.memsw.limit_in_bytes` in the memory
/// hierarchy; v2 has `memory.swap.max` in the cgroups below the root.
pub fn swap_controller_available(mount_root: &std::path::Path, v2: bool) -> bool {
    if v2 {
        std::fs::read_to_string(mount_root.join("cgroup.subtree_control"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"))
    } else {
        mount_root
            .join("memory/memory.memsw.limit_in_bytes")
            .exists()
    }
}

struct Inner {
    fs: Arc<dyn CgroupFs>,
    cfg: CmConfig,
    kubepods: CgroupName,
    qos: QosCgroups,
    /// The active pods (set once the sync loop exists).
    pods: OnceLock<watch::Receiver<crate::types::PodsSnapshot>>,
    /// Serialises QoS updates (pod syncs and the periodic task race otherwise).
    qos_lock: Mutex<()>,
}

/// Handle to the container manager.
#[derive(Clone)]
pub struct ContainerManager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ContainerManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerManager")
            .field("kubepods", &self.inner.kubepods)
            .field("fs", &self.inner.fs)
            .finish()
    }
}

impl ContainerManager {
    pub fn new(cfg: CmConfig, fs: Arc<dyn CgroupFs>) -> Self {
        let kubepods = CgroupName::from_path(&cfg.cgroup_root).child(KUBEPODS);
        let qos = QosCgroups::new(&kubepods);
        Self {
            inner: Arc::new(Inner {
                fs,
                cfg,
                kubepods,
                qos,
                pods: OnceLock::new(),
                qos_lock: Mutex::new(()),
            }),
        }
    }

    /// The cgroup filesystem in use.
    pub fn fs(&self) -> &Arc<dyn CgroupFs> {
        &self.inner.fs
    }

    /// `<cgroupRoot>/kubepods`.
    pub fn kubepods(&self) -> &CgroupName {
        &self.inner.kubepods
    }

    /// Gives the manager the desired pods (the QoS cgroups follow them).
    pub fn set_active_pods(&self, pods: watch::Receiver<crate::types::PodsSnapshot>) {
        let _ = self.inner.pods.set(pods);
    }

    /// Upstream `setupNode` + `enforceNodeAllocatableCgroups` + QoS `Start`: creates (or, after
    /// a restart, updates) `kubepods` with the allocatable limits, the reserved cgroups' limits
    /// when enforced, and the QoS cgroups. Existing pod cgroups are left alone (adopted).
    pub fn start(&self) -> Result<(), CmError> {
        let cfg = &self.inner.cfg;
        let fs = self.inner.fs.as_ref();
        let e = allocatable::enforcement(
            &cfg.enforce_node_allocatable,
            &cfg.capacity,
            &cfg.system_reserved,
            &cfg.kube_reserved,
        );
        let kubepods = &self.inner.kubepods;
        let result = if fs.exists(kubepods) {
            fs.update(kubepods, &e.pods)
        } else {
            fs.create(kubepods, &e.pods)
        };
        result.map_err(|source| CmError::NodeAllocatable {
            cgroup: kubepods.to_string(),
            source,
        })?;
        info!(cgroup = %kubepods, memory = ?e.pods.memory, cpu_shares = ?e.pods.cpu_shares, pids = ?e.pods.pids_limit, "node allocatable cgroup ready");
        for (what, path, rc) in [
            (
                "system-reserved",
                &cfg.system_reserved_cgroup,
                &e.system_reserved,
            ),
            ("kube-reserved", &cfg.kube_reserved_cgroup, &e.kube_reserved),
        ] {
            let Some(rc) = rc else { continue };
            // Upstream `enforceExistingCgroup`: the cgroup must already exist. The path is in the
            // driver's form (`/system.slice` with systemd).
            let name = fs.driver().parse_name(path);
            if !fs.exists(&name) {
                return Err(CmError::Reserved {
                    what,
                    cgroup: name.to_string(),
                    detail: "cgroup does not exist".to_owned(),
                });
            }
            fs.update(&name, rc).map_err(|e| CmError::Reserved {
                what,
                cgroup: name.to_string(),
                detail: e.to_string(),
            })?;
            info!(cgroup = %name, what, "enforced reserved limits");
        }
        let (burstable, best_effort) = qos_containers::qos_settings(&[], &cfg.hugepage_sizes);
        for (name, rc) in [
            (&self.inner.qos.burstable, burstable),
            (&self.inner.qos.best_effort, best_effort),
        ] {
            // After a restart the burstable shares are recomputed on the first update.
            let rc = if fs.exists(name) {
                cgroups::ResourceConfig {
                    cpu_shares: None,
                    ..rc
                }
            } else {
                rc
            };
            let result = if fs.exists(name) {
                fs.update(name, &rc)
            } else {
                fs.create(name, &rc)
            };
            result.map_err(|source| CmError::Qos {
                cgroup: name.to_string(),
                source,
            })?;
        }
        Ok(())
    }

    /// The pod's cgroup (`<root>/kubepods/<qos>/pod<uid>`).
    pub fn pod_cgroup_name(&self, pod: &Pod) -> CgroupName {
        pod_containers::pod_cgroup_name(&self.inner.qos, pod)
    }

    /// The cgroup parent handed to the runtime for this pod's sandbox: upstream's
    /// `GetPodContainerName` cgroupfs form (with systemd the expanded slice path
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`, whose last
    /// component is the slice the runtime puts the pod's scopes in).
    pub fn pod_cgroup_parent(&self, pod: &Pod) -> Result<String, CmError> {
        let name = self.pod_cgroup_name(pod);
        self.inner
            .fs
            .driver()
            .cgroupfs_path(&name)
            .map_err(|source| {
                CmError::PodCgroup(CgroupError::Name {
                    cgroup: name.to_string(),
                    source,
                })
            })
    }

    /// The cgroup driver in use.
    pub fn driver(&self) -> cgroups::CgroupDriver {
        self.inner.fs.driver()
    }

    pub fn pod_cgroup_exists(&self, pod: &Pod) -> bool {
        self.inner.fs.exists(&self.pod_cgroup_name(pod))
    }

    /// Upstream SyncPod's `pcm.EnsureExists` (with `UpdateQOSCgroups` first): creates the pod
    /// cgroup with its pod-level limits when it does not exist yet.
    pub fn ensure_pod_cgroup(&self, pod: &Pod) -> Result<(), CmError> {
        self.ensure_pod_cgroup_with(pod, false)
    }

    /// [`Self::ensure_pod_cgroup`] for a pod whose regular containers may hold exclusive CPUs
    /// of the static CPU manager (`exclusive_cpus`): with `DisableCPUQuotaWithExclusiveCPUs`
    /// such a pod cgroup gets no CFS quota, as upstream's `EnsureExists`.
    pub fn ensure_pod_cgroup_with(&self, pod: &Pod, exclusive_cpus: bool) -> Result<(), CmError> {
        let name = self.pod_cgroup_name(pod);
        if self.inner.fs.exists(&name) {
            return Ok(());
        }
        if let Err(e) = self.update_qos_cgroups(Some(pod)) {
            debug!(error = %e, "failed to update QoS cgroups while syncing pod");
        }
        let mut options = self.inner.cfg.pod_options;
        if exclusive_cpus && self.inner.cfg.disable_cpu_quota_with_exclusive_cpus {
            debug!(pod = ?pod.metadata.name, "Disabled CFS quota");
            options.enforce_cpu_limits = false;
        }
        let rc = resources::resource_config_for_pod(pod, options);
        self.inner
            .fs
            .create(&name, &rc)
            .map_err(CmError::PodCgroup)?;
        info!(cgroup = %name, cpu_shares = ?rc.cpu_shares, cpu_quota = ?rc.cpu_quota, memory = ?rc.memory, "created pod cgroup");
        Ok(())
    }

    /// Upstream `UpdateCgroups`: burstable shares from the active pods (plus `extra`, a pod
    /// about to start), besteffort 2 shares.
    pub fn update_qos_cgroups(&self, extra: Option<&Pod>) -> Result<(), CmError> {
        let _guard = sync::lock(&self.inner.qos_lock);
        let snapshot = self
            .inner
            .pods
            .get()
            .map(|rx| rx.borrow().clone())
            .unwrap_or_default();
        let extra = extra.filter(|p| !snapshot.iter().any(|s| s.metadata.uid == p.metadata.uid));
        // Upstream counts active pods only: finished ones no longer hold cpu.
        let active = snapshot.iter().filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        });
        let (burstable, best_effort) = qos_containers::qos_settings(
            active.map(|p| &**p).chain(extra),
            &self.inner.cfg.hugepage_sizes,
        );
        for (name, rc) in [
            (&self.inner.qos.burstable, burstable),
            (&self.inner.qos.best_effort, best_effort),
        ] {
            self.inner
                .fs
                .update(name, &rc)
                .map_err(|source| CmError::Qos {
                    cgroup: name.to_string(),
                    source,
                })?;
        }
        Ok(())
    }

    /// The pod cgroups present on the host, by pod uid.
    pub fn pod_cgroups_on_host(&self) -> BTreeMap<String, CgroupName> {
        pod_containers::pods_on_host(self.inner.fs.as_ref(), &self.inner.qos)
    }

    /// Upstream `cleanupOrphanedPodCgroups`: destroys (killing leftover processes first) the
    /// pod cgroups of pods not in `keep`. A pod whose volumes still exist
    /// (`volumes_exist(uid)`) only gets its cpu reduced to the minimum until they are gone.
    /// Returns the uids whose cgroups were destroyed and how many orphans are left behind.
    /// Blocking (kill retries sleep).
    pub fn cleanup_orphaned_pod_cgroups(
        &self,
        keep: &HashSet<String>,
        volumes_exist: &dyn Fn(&str) -> bool,
    ) -> OrphanSweep {
        let mut sweep = OrphanSweep::default();
        for (uid, name) in self.pod_cgroups_on_host() {
            if keep.contains(&uid) {
                continue;
            }
            if volumes_exist(&uid) {
                debug!(%uid, "orphaned pod cgroup, volumes not yet removed: reducing cpu to minimum");
                let rc = cgroups::ResourceConfig {
                    cpu_shares: Some(resources::MIN_SHARES),
                    ..Default::default()
                };
                if let Err(e) = self.inner.fs.update(&name, &rc) {
                    debug!(%uid, error = %e, "failed to reduce cpu of orphaned pod cgroup");
                }
                sweep.left_behind += 1;
                continue;
            }
            info!(%uid, cgroup = %name, "orphaned pod found, removing pod cgroups");
            match self.inner.fs.destroy(&name) {
                Ok(()) => sweep.destroyed.push(uid),
                Err(e) => {
                    sweep.left_behind += 1;
                    warn!(%uid, cgroup = %name, error = %e, "failed to remove orphaned pod cgroup; retrying at next housekeeping")
                }
            }
        }
        sweep
    }

    /// Keeps the QoS cgroups current: on every change of the active pods and every
    /// `qos_update_period`. Ends with `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        let mut pods = self.inner.pods.get().cloned();
        let mut tick = tokio::time::interval(self.inner.cfg.qos_update_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {}
                changed = changed(&mut pods) => if !changed { pods = None; continue },
            }
            // cgroupfs writes block (a memory limit write can wait on reclaim).
            let cm = self.clone();
            match tokio::task::spawn_blocking(move || cm.update_qos_cgroups(None)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => warn!(error = %e, "failed to update QoS cgroups"),
                Err(e) => warn!(error = %e, "QoS cgroup update task failed"),
            }
        }
    }
}

async fn changed(rx: &mut Option<watch::Receiver<crate::types::PodsSnapshot>>) -> bool {
    match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// What one sweep of the pod cgroups did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OrphanSweep {
    /// The pods whose cgroups were destroyed.
    pub destroyed: Vec<String>,
    /// Orphaned pod cgroups still there (volumes not yet removed, or a failed removal).
    pub left_behind: usize,
}

#[cfg(test)]
mod tests {
    use super::cgroups::CgroupVersion;
    use super::cgroups::fake::FakeCgroupFs;
    use super::*;
    use serde_json::json;

    const G: i128 = 1_000_000_000;

    fn pod(uid: &str, containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": uid, "uid": uid},
            "spec": {"containers": containers}}))
        .unwrap()
    }

    fn manager(fs: &Arc<FakeCgroupFs>) -> ContainerManager {
        let cfg = CmConfig {
            cgroup_root: "/rk".to_owned(),
            capacity: BTreeMap::from([
                ("cpu".to_owned(), 2 * G),
                ("memory".to_owned(), (4 << 30) * G),
            ]),
            system_reserved: BTreeMap::from([("memory".to_owned(), (1 << 30) * G)]),
            ..CmConfig::default()
        };
        ContainerManager::new(cfg, fs.clone())
    }

    #[test]
    fn start_creates_the_tree_and_enforces_allocatable() {
        let fs = Arc::new(FakeCgroupFs::new(CgroupVersion::V1));
        let cm = manager(&fs);
        cm.start().unwrap();
        let kubepods = fs.get("/rk/kubepods").unwrap();
        assert_eq!(kubepods.memory, Some(3 << 30));
        assert_eq!(kubepods.cpu_shares, Some(2048));
        assert_eq!(
            fs.get("/rk/kubepods/besteffort").unwrap().cpu_shares,
            Some(2)
        );
        assert_eq!(
            fs.get("/rk/kubepods/burstable").unwrap().cpu_shares,
            Some(2)
        );
    }

    #[test]
    fn restart_adopts_existing_pod_cgroups() {
        let fs = Arc::new(FakeCgroupFs::new(CgroupVersion::V1));
        fs.insert(
            "/rk/kubepods/burstable",
            cgroups::ResourceConfig {
                cpu_shares: Some(700),
                ..Default::default()
            },
        );
        fs.add_pids("/rk/kubepods/burstable/podold", &[4242]);
        let cm = manager(&fs);
        cm.start().unwrap();
        assert!(fs.get("/rk/kubepods/burstable/podold").is_some());
        assert_eq!(fs.killed(), Vec::<i32>::new());
        // Shares kept until the first update with the real pods.
        assert_eq!(
            fs.get("/rk/kubepods/burstable").unwrap().cpu_shares,
            Some(700)
        );
    }

    #[test]
    fn pod_with_exclusive_cpus_gets_no_cfs_quota_unless_the_gate_is_off() {
        let g = |uid: &str| {
            pod(
                uid,
                json!([{"name": "c", "resources": {
                "requests": {"cpu": "2", "memory": "10Mi"}, "limits": {"cpu": "2", "memory": "10Mi"}}}]),
            )
        };
        let fs = Arc::new(FakeCgroupFs::new(CgroupVersion::V2));
        let cm = manager(&fs);
        cm.start().unwrap();
        cm.ensure_pod_cgroup_with(&g("shared"), false).unwrap();
        assert_eq!(
            fs.get("/rk/kubepods/podshared").unwrap().cpu_quota,
            Some(200_000)
        );
        cm.ensure_pod_cgroup_with(&g("excl"), true).unwrap();
        assert_eq!(fs.get("/rk/kubepods/podexcl").unwrap().cpu_quota, Some(-1));

        // DisableCPUQuotaWithExclusiveCPUs=false: the quota stays.
        let fs = Arc::new(FakeCgroupFs::new(CgroupVersion::V2));
        let cm = ContainerManager::new(
            CmConfig {
                cgroup_root: "/rk".to_owned(),
                capacity: BTreeMap::from([
                    ("cpu".to_owned(), 4 * G),
                    ("memory".to_owned(), (4 << 30) * G),
                ]),
                disable_cpu_quota_with_exclusive_cpus: false,
                ..CmConfig::default()
            },
            fs.clone(),
        );
        cm.start().unwrap();
        cm.ensure_pod_cgroup_with(&g("excl"), true).unwrap();
        assert_eq!(
            fs.get("/rk/kubepods/podexcl").unwrap().cpu_quota,
            Some(200_000)
        );
    }

    #[test]
    fn ensure_pod_cgroup_updates_qos_and_orphans_are_destroyed() {
        let fs = Arc::new(FakeCgroupFs::new(CgroupVersion::V2));
        let cm = manager(&fs);
        cm.start().unwrap();
        let (tx, rx) = watch::channel(Arc::new(Vec::new()));
        cm.set_active_pods(rx);
        let b = pod(
            "b1",
            json!([{"name": "c", "resources": {
            "requests": {"cpu": "500m", "memory": "10Mi"}, "limits": {"cpu": "1", "memory": "20Mi"}}}]),
        );
        cm.ensure_pod_cgroup(&b).unwrap();
        let pc = fs.get("/rk/kubepods/burstable/podb1").unwrap();
        assert_eq!(pc.cpu_shares, Some(512));
        assert_eq!(pc.cpu_quota, Some(100_000));
        assert_eq!(pc.memory, Some(20 << 20));
        // The pod about to start already counts for the burstable shares.
        assert_eq!(
            fs.get("/rk/kubepods/burstable").unwrap().cpu_shares,
            Some(512)
        );
        assert_eq!(
            cm.pod_cgroup_parent(&b).unwrap(),
            "/rk/kubepods/burstable/podb1"
        );

        tx.send(Arc::new(vec![Arc::new(b.clone())])).unwrap();
        fs.add_pids("/rk/kubepods/besteffort/podgone", &[99_999_999]);
        fs.insert(
            "/rk/kubepods/podpending",
            cgroups::ResourceConfig::default(),
        );
        let keep: HashSet<String> = ["b1".to_owned()].into();
        let sweep = cm.cleanup_orphaned_pod_cgroups(&keep, &|uid| uid == "pending");
        assert_eq!(sweep.destroyed, vec!["gone".to_owned()]);
        assert_eq!(sweep.left_behind, 1, "the pod whose volumes remain");
        assert_eq!(fs.killed(), vec![99_999_999]);
        assert!(fs.get("/rk/kubepods/besteffort/podgone").is_none());
        assert!(fs.get("/rk/kubepods/burstable/podb1").is_some());
        // Volumes still there: only cpu reduced.
        assert_eq!(
            fs.get("/rk/kubepods/podpending").unwrap().cpu_shares,
            Some(2)
        );

        // Removing the pod from the active set drops the burstable shares back to 2.
        tx.send(Arc::new(Vec::new())).unwrap();
        cm.update_qos_cgroups(None).unwrap();
        assert_eq!(
            fs.get("/rk/kubepods/burstable").unwrap().cpu_shares,
            Some(2)
        );
    }
}
