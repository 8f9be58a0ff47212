//! The stats provider (what cadvisor + the CRI stats provider give the Go kubelet): a
//! background task that owns the latest [`Summary`] and publishes it on a `watch` channel.
//! Every `interval` (and on a [`StatsHandle::refresh`] request) it reads node memory
//! (`/proc/meminfo` + root cgroup working set), node CPU, nodefs (`statvfs` of the root dir),
//! imagefs (CRI `ImageFsInfo` + `statvfs` of its mountpoint), PID usage, and per pod the
//! memory/CPU/process count of its cgroup (`<cgroupRoot>/kubepods[/burstable|/besteffort]/pod<uid>`,
//! or the sum of CRI `ListContainerStats` when there is none), writable layers (CRI), log
//! directory and disk emptyDir sizes, start times (boot time; CRI sandbox / container
//! `created_at` from the PLEG's recent listing, else one `ListPodSandbox` + `ListContainers`
//! per collection), network
//! (the host's `/proc/net/dev`; a pod's from a process of its cgroup) and the system
//! containers (`kubelet`, `runtime`, `misc`, `pods`). A pod's cgroup and network are read when
//! cAdvisor's dynamic housekeeping says it is due ([`housekeeping`]: every 10–20 s while its
//! values change, every 15–30 s while they do not); the node's at every collection. Tree walks
//! happen here, in a blocking task, never on a request path. Receives the desired pods on a
//! watch channel; file reads go through [`StatsFs`].

pub mod cgroup;
pub use rkubelet_node::hostfs as fs;
pub mod housekeeping;
pub mod net;
pub mod system;
pub mod types;

pub use fs::{DirUsage, FakeFs, FsUsage, StatsFs, SystemFs};
pub use types::*;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::api as cri;
use rkubelet_cri::{ImageService, RuntimeService};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::cm::cgroups::{CgroupDriver, CgroupName};
use crate::cm::qos_containers::QosCgroups;
use crate::kuberuntime::labels::{CONTAINER_NAME_LABEL, POD_UID_LABEL};
use crate::pleg::LatestListing;
use crate::types::PodExt;
use crate::volumes::EMPTY_DIR_PLUGIN;
use cgroup::{CgroupLayout, MemorySample};
use housekeeping::{PodHousekeeping, PodReading};
use system::{SystemCgroups, SystemLocator};

/// Where the provider looks.
#[derive(Debug, Clone)]
pub struct StatsSettings {
    pub node_name: String,
    /// `--root-dir`: nodefs, pod volume directories.
    pub root_dir: PathBuf,
    /// `podLogsDir`.
    pub pod_logs_dir: PathBuf,
    /// Where the cgroup hierarchies are mounted (`/sys/fs/cgroup`).
    pub cgroup_mount: PathBuf,
    /// procfs (`/proc`).
    pub proc_root: PathBuf,
    /// `cgroupRoot` (`/` by default).
    pub cgroup_root: String,
    /// `cgroupsPerQOS`: pods have `kubepods/…/pod<uid>` cgroups.
    pub cgroups_per_qos: bool,
    /// `cgroupDriver`: where those cgroups are on the filesystem (systemd: slice paths).
    pub cgroup_driver: CgroupDriver,
    /// How often to collect (upstream's housekeeping: 10 s).
    pub interval: Duration,
    /// `kubeletCgroups`: the kubelet's cgroup; empty: the kubelet process's own.
    pub kubelet_cgroups: String,
    /// `--runtime-cgroups`: reported as the `runtime` system container when set.
    pub runtime_cgroups: String,
    /// `systemCgroups`: reported as the `misc` system container when set.
    pub system_cgroups: String,
}

impl StatsSettings {
    pub fn new(node_name: &str, root_dir: &Path, pod_logs_dir: &Path) -> Self {
        Self {
            node_name: node_name.to_owned(),
            root_dir: root_dir.to_path_buf(),
            pod_logs_dir: pod_logs_dir.to_path_buf(),
            cgroup_mount: PathBuf::from("/sys/fs/cgroup"),
            proc_root: PathBuf::from("/proc"),
            cgroup_root: "/".to_owned(),
            cgroups_per_qos: true,
            cgroup_driver: CgroupDriver::Cgroupfs,
            interval: Duration::from_secs(10),
            kubelet_cgroups: String::new(),
            runtime_cgroups: String::new(),
            system_cgroups: String::new(),
        }
    }
}

type RefreshRequest = oneshot::Sender<Arc<Summary>>;

/// How long after a change of the desired pods the provider collects (coalescing a burst of
/// pod additions into one collection).
pub const POD_CHANGE_DELAY: Duration = Duration::from_secs(1);

/// How old the PLEG's listing may be for its creation times to serve a collection (the PLEG
/// relists every second; a pod that started since has no start time until the next one).
pub const LISTING_MAX_AGE: Duration = Duration::from_secs(2);

/// Read side of the stats: the latest snapshot, and a way to ask for a fresh one.
#[derive(Clone)]
pub struct StatsHandle {
    rx: watch::Receiver<Arc<Summary>>,
    refresh: Option<mpsc::Sender<RefreshRequest>>,
}

impl std::fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsHandle")
            .field("collector", &self.refresh.is_some())
            .finish()
    }
}

impl StatsHandle {
    /// Stats that someone else publishes (tests): `refresh` returns the latest value.
    pub fn injected(rx: watch::Receiver<Arc<Summary>>) -> Self {
        Self { rx, refresh: None }
    }

    pub fn latest(&self) -> Arc<Summary> {
        self.rx.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<Summary>> {
        self.rx.clone()
    }

    /// A snapshot collected after this call (upstream `summaryProvider.Get(ctx, true)`).
    pub async fn refresh(&self) -> Arc<Summary> {
        if let Some(tx) = &self.refresh {
            let (reply, rx) = oneshot::channel();
            if tx.send(reply).await.is_ok()
                && let Ok(s) = rx.await
            {
                return s;
            }
        }
        self.latest()
    }
}

/// The collecting task.
pub struct StatsProvider {
    fs: Arc<dyn StatsFs>,
    runtime: Arc<dyn RuntimeService>,
    images: Arc<dyn ImageService>,
    settings: StatsSettings,
    layout: CgroupLayout,
    pods: watch::Receiver<crate::types::PodsSnapshot>,
    tx: watch::Sender<Arc<Summary>>,
    refresh_rx: mpsc::Receiver<RefreshRequest>,
    /// Previous cumulative CPU readings by key, for `usageNanoCores`.
    prev_cpu: HashMap<String, PrevCpu>,
    /// Each pod's cgroup reading and when it is next due (cAdvisor's dynamic housekeeping).
    pod_readings: PodHousekeeping,
    /// Where the system containers are (boot time and the kubelet's cgroup, read once).
    locator: SystemLocator,
    /// The PLEG's listing: its creation times serve when it is recent.
    latest_listing: Option<LatestListing>,
}

impl StatsProvider {
    pub fn new(
        fs: Arc<dyn StatsFs>,
        runtime: Arc<dyn RuntimeService>,
        images: Arc<dyn ImageService>,
        settings: StatsSettings,
        pods: watch::Receiver<crate::types::PodsSnapshot>,
    ) -> (Self, StatsHandle) {
        let (tx, rx) = watch::channel(Arc::new(Summary::default()));
        let (refresh_tx, refresh_rx) = mpsc::channel(8);
        let layout = CgroupLayout::detect(fs.as_ref(), &settings.cgroup_mount);
        let pod_readings = PodHousekeeping::new(settings.interval);
        (
            Self {
                fs,
                runtime,
                images,
                settings,
                layout,
                pods,
                tx,
                refresh_rx,
                prev_cpu: HashMap::new(),
                pod_readings,
                locator: SystemLocator::default(),
                latest_listing: None,
            },
            StatsHandle {
                rx,
                refresh: Some(refresh_tx),
            },
        )
    }

    /// Takes creation times from the PLEG's listing when it is at most
    /// [`LISTING_MAX_AGE`] old, instead of listing the runtime.
    pub fn with_latest_listing(mut self, latest: LatestListing) -> Self {
        self.latest_listing = Some(latest);
        self
    }

    /// Collects every `interval`, on request, and [`POD_CHANGE_DELAY`] after the desired pods
    /// change (so a new pod shows up in the Summary without waiting for the next period, as
    /// upstream's CRI stats provider, which lists pods per request), until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pod_change_due: Option<tokio::time::Instant> = None;
        loop {
            let due = pod_change_due;
            let pod_change = async move {
                match due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let reply = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => None,
                r = self.refresh_rx.recv() => r,
                Ok(()) = self.pods.changed(), if pod_change_due.is_none() => {
                    pod_change_due = Some(tokio::time::Instant::now() + POD_CHANGE_DELAY);
                    continue;
                }
                () = pod_change => None,
            };
            pod_change_due = None;
            let summary = Arc::new(self.collect().await);
            self.tx.send_replace(summary.clone());
            if let Some(reply) = reply {
                let _ = reply.send(summary);
            }
        }
    }

    /// One collection.
    pub async fn collect(&mut self) -> Summary {
        let container_stats = async {
            match self
                .runtime
                .list_container_stats(cri::ListContainerStatsRequest { filter: None })
                .await
            {
                Ok(r) => r.stats,
                Err(e) => {
                    warn!(error = %e, "stats: ListContainerStats failed");
                    Vec::new()
                }
            }
        };
        let image_fs = async {
            match self.images.image_fs_info(cri::ImageFsInfoRequest {}).await {
                Ok(r) => r.image_filesystems.into_iter().next(),
                Err(e) => {
                    warn!(error = %e, "stats: ImageFsInfo failed");
                    None
                }
            }
        };
        // The runtime calls of one collection go out together.
        let (cri_stats, image_fs, created) =
            tokio::join!(container_stats, image_fs, self.created_times());
        let pods = self.pods.borrow_and_update().clone();
        let mut input = CollectInput {
            fs: self.fs.clone(),
            settings: self.settings.clone(),
            layout: self.layout.clone(),
            pods,
            cri_stats,
            image_fs,
            created,
            system: SystemCgroups::default(),
            now: Utc::now(),
            now_mono: tokio::time::Instant::now(),
        };
        let mut locator = std::mem::take(&mut self.locator);
        let mut readings = std::mem::replace(
            &mut self.pod_readings,
            PodHousekeeping::new(self.settings.interval),
        );
        let collected = tokio::task::spawn_blocking(move || {
            input.system = locator.resolve(input.fs.as_ref(), &input.layout, &input.settings);
            (build_summary(&input, &mut readings), locator, readings)
        })
        .await;
        let mut summary = match collected {
            Ok((s, locator, readings)) => {
                self.locator = locator;
                self.pod_readings = readings;
                s
            }
            Err(e) => {
                warn!(error = %e, "stats: collection task failed");
                return Summary::default();
            }
        };
        self.fill_nano_cores(&mut summary);
        debug!(pods = summary.pods.len(), "stats collected");
        summary
    }

    /// Creation times of the sandboxes (by pod UID: the newest ready one, else the newest)
    /// and containers (by ID): from the PLEG's recent listing, else from one `ListPodSandbox`
    /// and one `ListContainers`.
    async fn created_times(&self) -> CreatedTimes {
        if let Some(latest) = self
            .latest_listing
            .as_ref()
            .and_then(|l| l.fresh(LISTING_MAX_AGE))
        {
            return CreatedTimes::from_listing(
                latest.listing.sandboxes(),
                latest.listing.containers(),
            );
        }
        let (sandboxes, containers) = tokio::join!(
            self.runtime
                .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }),
            self.runtime
                .list_containers(cri::ListContainersRequest { filter: None })
        );
        let sandboxes = sandboxes.map(|r| r.items).unwrap_or_else(|e| {
            warn!(error = %e, "stats: ListPodSandbox failed");
            Vec::new()
        });
        let containers = containers.map(|r| r.containers).unwrap_or_else(|e| {
            warn!(error = %e, "stats: ListContainers failed");
            Vec::new()
        });
        CreatedTimes::from_listing(&sandboxes, &containers)
    }

    fn fill_nano_cores(&mut self, summary: &mut Summary) {
        let mut next = HashMap::new();
        let mut rate = |key: String, cpu: &mut Option<CpuStats>| {
            let Some(cpu) = cpu else { return };
            let Some(total) = cpu.usage_core_nano_seconds else {
                return;
            };
            if let Some(prev) = self.prev_cpu.get(&key) {
                let dt = (cpu.time - prev.at).num_nanoseconds().unwrap_or(0);
                if dt > 0 && total >= prev.total {
                    let cores = (total - prev.total) as f64 / dt as f64;
                    cpu.usage_nano_cores = Some((cores * 1e9) as u64);
                } else if dt == 0 && total == prev.total {
                    // The same reading again (a pod not due for housekeeping): its rate stands.
                    cpu.usage_nano_cores = prev.nano_cores;
                }
            }
            next.insert(
                key,
                PrevCpu {
                    total,
                    at: cpu.time,
                    nano_cores: cpu.usage_nano_cores,
                },
            );
        };
        rate("/".to_owned(), &mut summary.node.cpu);
        for c in &mut summary.node.system_containers {
            rate(format!("system/{}", c.name), &mut c.cpu);
        }
        for p in &mut summary.pods {
            rate(p.pod_ref.uid.clone(), &mut p.cpu);
            for c in &mut p.containers {
                rate(format!("{}/{}", p.pod_ref.uid, c.name), &mut c.cpu);
            }
        }
        self.prev_cpu = next;
    }
}

/// A cumulative CPU reading and the rate computed from it.
#[derive(Debug, Clone, Copy)]
struct PrevCpu {
    total: u64,
    at: DateTime<Utc>,
    nano_cores: Option<u64>,
}

/// Everything one collection reads, moved into the blocking task.
pub struct CollectInput {
    pub fs: Arc<dyn StatsFs>,
    pub settings: StatsSettings,
    pub layout: CgroupLayout,
    pub pods: crate::types::PodsSnapshot,
    pub cri_stats: Vec<cri::ContainerStats>,
    pub image_fs: Option<cri::FilesystemUsage>,
    /// Sandbox and container creation times (start times).
    pub created: CreatedTimes,
    /// The system containers to report.
    pub system: SystemCgroups,
    pub now: DateTime<Utc>,
    /// The same moment on the runtime's clock: when pods are due for housekeeping.
    pub now_mono: tokio::time::Instant,
}

/// CRI creation times: sandboxes by pod UID, containers by container ID.
#[derive(Debug, Clone, Default)]
pub struct CreatedTimes {
    pub sandboxes: HashMap<String, DateTime<Utc>>,
    pub containers: HashMap<String, DateTime<Utc>>,
}

impl CreatedTimes {
    /// From a listing: each pod's newest ready sandbox (else its newest), every container.
    pub fn from_listing(sandboxes: &[cri::PodSandbox], containers: &[cri::Container]) -> Self {
        // (ready, created_at) orders the candidates of one pod.
        let mut best: HashMap<&str, (bool, i64)> = HashMap::new();
        for sb in sandboxes {
            let Some(meta) = sb.metadata.as_ref() else {
                continue;
            };
            let key = (
                sb.state == cri::PodSandboxState::SandboxReady as i32,
                sb.created_at,
            );
            let e = best.entry(&meta.uid).or_insert(key);
            if key > *e {
                *e = key;
            }
        }
        Self {
            sandboxes: best
                .into_iter()
                .map(|(uid, (_, at))| (uid.to_owned(), DateTime::from_timestamp_nanos(at)))
                .collect(),
            containers: containers
                .iter()
                .map(|c| (c.id.clone(), DateTime::from_timestamp_nanos(c.created_at)))
                .collect(),
        }
    }
}

fn fs_stats(u: FsUsage, now: DateTime<Utc>) -> FsStats {
    FsStats {
        time: now,
        available_bytes: Some(u.available_bytes),
        capacity_bytes: Some(u.capacity_bytes),
        used_bytes: Some(u.used_bytes),
        inodes_free: Some(u.inodes_free),
        inodes: Some(u.inodes),
        inodes_used: Some(u.inodes.saturating_sub(u.inodes_free)),
    }
}

pub(crate) fn memory_stats(
    m: MemorySample,
    capacity: Option<u64>,
    now: DateTime<Utc>,
) -> MemoryStats {
    MemoryStats {
        time: now,
        available_bytes: capacity.map(|c| c.saturating_sub(m.working_set)),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: Some(m.rss),
        page_faults: Some(m.page_faults),
        major_page_faults: Some(m.major_page_faults),
    }
}

fn dir_fs_stats(u: DirUsage, now: DateTime<Utc>) -> FsStats {
    FsStats {
        time: now,
        used_bytes: Some(u.bytes),
        inodes_used: Some(u.inodes),
        ..FsStats::default()
    }
}

/// The pod's cgroup path relative to the hierarchy root, as the container manager names it
/// (`/kubepods/burstable/pod<uid>`; with systemd
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`). `None` for a
/// name the driver cannot represent (no such cgroup can exist).
pub fn pod_cgroup_path(cgroup_root: &str, driver: CgroupDriver, pod: &Pod) -> Option<String> {
    let qos = QosCgroups::new(&kubepods_name(cgroup_root));
    driver
        .cgroupfs_path(&crate::cm::pod_containers::pod_cgroup_name(&qos, pod))
        .ok()
}

/// `<cgroupRoot>/kubepods` in the driver's form (`/kubepods.slice` with systemd).
pub fn kubepods_path(cgroup_root: &str, driver: CgroupDriver) -> Option<String> {
    driver.cgroupfs_path(&kubepods_name(cgroup_root)).ok()
}

fn kubepods_name(cgroup_root: &str) -> CgroupName {
    CgroupName::from_path(cgroup_root).child(crate::cm::KUBEPODS)
}

fn add(a: &mut Option<u64>, b: Option<u64>) {
    if let Some(b) = b {
        *a = Some(a.unwrap_or(0).saturating_add(b));
    }
}

/// Builds the snapshot (blocking: reads files and walks directories). Pod cgroups are read
/// when `readings` says they are due.
pub fn build_summary(inp: &CollectInput, readings: &mut PodHousekeeping) -> Summary {
    let fs = inp.fs.as_ref();
    let s = &inp.settings;
    let now = inp.now;
    let mut node = NodeStats {
        node_name: s.node_name.clone(),
        ..NodeStats::default()
    };
    if let Some((capacity, m)) = cgroup::read_node_memory(fs, &inp.layout, &s.proc_root) {
        node.memory = Some(memory_stats(m, Some(capacity), now));
    }
    node.cpu = cgroup::read_node_cpu_ns(fs, &inp.layout, &s.proc_root).map(|ns| CpuStats {
        time: now,
        usage_nano_cores: None,
        usage_core_nano_seconds: Some(ns),
    });
    node.start_time = inp.system.boot_time;
    node.network = net::read_node_network(fs, &s.proc_root, now);
    node.system_containers = system::system_containers(fs, &inp.layout, &inp.system, now);
    match fs.statfs(&s.root_dir) {
        Ok(u) => node.fs = Some(fs_stats(u, now)),
        Err(e) => {
            warn!(path = %s.root_dir.display(), error = %e, "stats: statfs of the root dir failed")
        }
    }
    let mut dedicated_image_fs = false;
    let mut image_fs_usage = None;
    if let Some(ifs) = &inp.image_fs {
        let mount = ifs
            .fs_id
            .as_ref()
            .map(|f| PathBuf::from(&f.mountpoint))
            .unwrap_or_default();
        let mut stats = match fs.statfs(&mount) {
            Ok(u) => {
                image_fs_usage = Some(u);
                fs_stats(u, now)
            }
            Err(_) => FsStats {
                time: now,
                ..FsStats::default()
            },
        };
        stats.used_bytes = ifs.used_bytes.as_ref().map(|v| v.value);
        stats.inodes_used = ifs.inodes_used.as_ref().map(|v| v.value);
        if let (Ok(a), Ok(b)) = (fs.device(&mount), fs.device(&s.root_dir)) {
            dedicated_image_fs = a != b;
        }
        node.runtime = Some(RuntimeStats {
            image_fs: Some(stats),
        });
    }
    if let Some((max, cur)) = cgroup::read_pid_stats(fs, &s.proc_root) {
        node.rlimit = Some(RlimitStats {
            time: now,
            maxpid: i64::try_from(max).ok(),
            curproc: i64::try_from(cur).ok(),
        });
    }

    // CRI stats by pod UID, then container name (the newest attempt wins).
    let mut by_pod: HashMap<&str, HashMap<&str, (u32, &cri::ContainerStats)>> = HashMap::new();
    for c in &inp.cri_stats {
        let Some(attrs) = &c.attributes else { continue };
        let (Some(uid), Some(name)) = (
            attrs.labels.get(POD_UID_LABEL),
            attrs
                .labels
                .get(CONTAINER_NAME_LABEL)
                .or(attrs.metadata.as_ref().map(|m| &m.name)),
        ) else {
            continue;
        };
        let attempt = attrs.metadata.as_ref().map_or(0, |m| m.attempt);
        let entry = by_pod.entry(uid).or_default();
        if entry.get(name.as_str()).is_none_or(|(a, _)| *a <= attempt) {
            entry.insert(name, (attempt, c));
        }
    }

    let pods = inp
        .pods
        .iter()
        .map(|pod| pod_stats(inp, readings, pod, by_pod.get(pod.uid()), image_fs_usage))
        .collect();
    readings.finish_round();
    Summary {
        node,
        pods,
        dedicated_image_fs,
    }
}

fn pod_stats(
    inp: &CollectInput,
    readings: &mut PodHousekeeping,
    pod: &Pod,
    cri: Option<&HashMap<&str, (u32, &cri::ContainerStats)>>,
    image_fs: Option<FsUsage>,
) -> PodStats {
    let fs = inp.fs.as_ref();
    let s = &inp.settings;
    let now = inp.now;
    let log_dir = s
        .pod_logs_dir
        .join(format!("{}_{}_{}", pod.namespace(), pod.name(), pod.uid()));
    let mut containers = Vec::new();
    let mut eph = FsStats {
        time: now,
        ..FsStats::default()
    };
    if let Some(image_fs) = image_fs {
        eph.capacity_bytes = Some(image_fs.capacity_bytes);
        eph.available_bytes = Some(image_fs.available_bytes);
    }
    let mut sum_mem: Option<MemorySample> = None;
    let mut sum_cpu: Option<u64> = None;
    let spec = pod.spec.as_ref();
    let names = spec
        .into_iter()
        .flat_map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
        })
        .map(|c| c.name.as_str());
    for name in names {
        let stat = cri.and_then(|m| m.get(name)).map(|(_, c)| *c);
        let Some(stat) = stat else {
            continue;
        };
        let logs = fs
            .dir_usage(&log_dir.join(name))
            .map(|u| dir_fs_stats(u, now))
            .ok();
        let rootfs = stat.writable_layer.as_ref().map(|w| FsStats {
            time: now,
            used_bytes: w.used_bytes.as_ref().map(|v| v.value),
            inodes_used: w.inodes_used.as_ref().map(|v| v.value),
            ..FsStats::default()
        });
        let memory = stat.memory.as_ref().map(|m| MemoryStats {
            time: now,
            available_bytes: m.available_bytes.as_ref().map(|v| v.value),
            usage_bytes: m.usage_bytes.as_ref().map(|v| v.value),
            working_set_bytes: m.working_set_bytes.as_ref().map(|v| v.value),
            rss_bytes: m.rss_bytes.as_ref().map(|v| v.value),
            page_faults: m.page_faults.as_ref().map(|v| v.value),
            major_page_faults: m.major_page_faults.as_ref().map(|v| v.value),
        });
        let cpu = stat.cpu.as_ref().map(|c| CpuStats {
            time: now,
            usage_nano_cores: None,
            usage_core_nano_seconds: c.usage_core_nano_seconds.as_ref().map(|v| v.value),
        });
        if let Some(m) = &memory {
            let acc = sum_mem.get_or_insert_with(MemorySample::default);
            acc.usage += m.usage_bytes.unwrap_or(0);
            acc.working_set += m.working_set_bytes.unwrap_or(0);
            acc.rss += m.rss_bytes.unwrap_or(0);
            acc.page_faults += m.page_faults.unwrap_or(0);
            acc.major_page_faults += m.major_page_faults.unwrap_or(0);
        }
        if let Some(c) = cpu.as_ref().and_then(|c| c.usage_core_nano_seconds) {
            *sum_cpu.get_or_insert(0) += c;
        }
        for f in [&rootfs, &logs].into_iter().flatten() {
            add(&mut eph.used_bytes, f.used_bytes);
            add(&mut eph.inodes_used, f.inodes_used);
        }
        let start_time = stat
            .attributes
            .as_ref()
            .and_then(|a| inp.created.containers.get(&a.id))
            .copied();
        containers.push(ContainerStats {
            name: name.to_owned(),
            start_time,
            cpu,
            memory,
            rootfs,
            logs,
        });
    }
    let mut volume_stats = Vec::new();
    for v in spec.and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
        let Some(ed) = &v.empty_dir else { continue };
        if ed.medium.as_deref() == Some("Memory") {
            continue;
        }
        let dir = s
            .root_dir
            .join("pods")
            .join(pod.uid())
            .join("volumes")
            .join(EMPTY_DIR_PLUGIN)
            .join(&v.name);
        if let Ok(u) = fs.dir_usage(&dir) {
            let st = dir_fs_stats(u, now);
            add(&mut eph.used_bytes, st.used_bytes);
            add(&mut eph.inodes_used, st.inodes_used);
            volume_stats.push(VolumeStats {
                name: v.name.clone(),
                fs: st,
            });
        }
    }
    // The kubelet-managed `/etc/hosts` is writable by the pod's containers: it counts toward
    // the pod's ephemeral storage (upstream's fix of CVE-2020-8557).
    let etc_hosts = s.root_dir.join("pods").join(pod.uid()).join("etc-hosts");
    if let Ok(u) = fs.dir_usage(&etc_hosts) {
        let st = dir_fs_stats(u, now);
        add(&mut eph.used_bytes, st.used_bytes);
        add(&mut eph.inodes_used, st.inodes_used);
    }
    let cg_path = s
        .cgroups_per_qos
        .then(|| pod_cgroup_path(&s.cgroup_root, s.cgroup_driver, pod))
        .flatten();
    let reading = cg_path.as_ref().map(|p| {
        readings.reading(pod.uid(), p, inp.now_mono, |known| {
            let network = net::read_cgroup_network(fs, &inp.layout, &s.proc_root, p, now, known);
            PodReading {
                cgroup: cgroup::read_cgroup(fs, &inp.layout, p),
                network: network.stats,
                net_process: network.process,
                at: now,
            }
        })
    });
    let network = reading.and_then(|r| r.network.clone());
    // A pod cgroup's reading carries the time it was taken; the CRI sum is of this collection.
    let (memory, cpu_ns, pids, at) = match reading.and_then(|r| r.cgroup.map(|cg| (cg, r.at))) {
        Some((cg, at)) => (cg.memory, cg.cpu_usage_ns, cg.pids, at),
        None => (sum_mem, sum_cpu, None, now),
    };
    PodStats {
        pod_ref: PodReference {
            name: pod.name().to_owned(),
            namespace: pod.namespace().to_owned(),
            uid: pod.uid().to_owned(),
        },
        start_time: inp.created.sandboxes.get(pod.uid()).copied(),
        containers,
        cpu: cpu_ns.map(|ns| CpuStats {
            time: at,
            usage_nano_cores: None,
            usage_core_nano_seconds: Some(ns),
        }),
        memory: memory.map(|m| memory_stats(m, None, at)),
        network,
        volume_stats,
        ephemeral_storage: Some(eph),
        process_stats: pids.map(|p| ProcessStats {
            process_count: Some(p),
        }),
    }
}

#[cfg(test)]
mod tests;
