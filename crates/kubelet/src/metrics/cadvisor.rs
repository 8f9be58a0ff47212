//! `/metrics/cadvisor`: the `container_*` and `machine_*` series cadvisor exposes through the
//! kubelet (`google/cadvisor` `metrics/prometheus.go` and `prometheus_machine.go`, with the
//! kubelet's label function from `pkg/kubelet/server/server.go`), rendered at scrape time from
//! the stats provider's latest [`Summary`] plus in-memory state: the runtime pod cache
//! (container IDs and images), the desired pods (their cgroup paths) and the host facts read at
//! start-up. Receives those; emits the text exposition. Rows as cadvisor has them: the root
//! cgroup `id="/"` (node totals), `<cgroupRoot>/kubepods` (the `pods` system container), one row
//! per pod cgroup (`container=""`, `id=/kubepods/<qos>/pod<uid>`), one per container
//! (`id=<pod cgroup>/<container id>`, `name=<container id>`, `image=<image>`) and the pod's
//! network on its sandbox's row (`name=<sandbox id>`; image unknown here, so empty);
//! stats-derived samples carry their stats time as the timestamp.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;

use crate::cm::cgroups::CgroupDriver;
use crate::container::PodStatus;
use crate::host::HostInfo;
use crate::stats::{
    CpuStats, FsStats, MemoryStats, NetworkStats, Summary, kubepods_path, pod_cgroup_path,
};
use crate::types::PodExt;

use super::registry::{Exposition, MetricKind};
use super::rows::{Family, millis, ns_to_seconds};

/// Families `/metrics/cadvisor` can carry (cadvisor's names).
pub const CADVISOR_METRIC_NAMES: &[&str] = &[
    "container_cpu_usage_seconds_total",
    "container_memory_usage_bytes",
    "container_memory_working_set_bytes",
    "container_memory_rss",
    "container_network_receive_bytes_total",
    "container_network_receive_errors_total",
    "container_network_transmit_bytes_total",
    "container_network_transmit_errors_total",
    "container_fs_usage_bytes",
    "container_start_time_seconds",
    "container_last_seen",
    "container_scrape_error",
    "machine_cpu_cores",
    "machine_memory_bytes",
    "machine_swap_bytes",
    "machine_scrape_error",
];

/// What the runtime says about one container: its ID and image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRef {
    pub id: String,
    pub image: String,
}

/// Everything one `/metrics/cadvisor` scrape renders.
#[derive(Debug, Clone)]
pub struct CadvisorInput<'a> {
    pub summary: &'a Summary,
    /// Pod UID → the pod's cgroup (`/kubepods/besteffort/pod<uid>`).
    pub pod_cgroups: HashMap<String, String>,
    /// (pod UID, container name) → the newest container of that name.
    pub containers: HashMap<(String, String), ContainerRef>,
    /// Pod UID → its newest sandbox's ID (the pause container, which carries the pod's
    /// network series in cadvisor).
    pub sandboxes: HashMap<String, String>,
    /// `<cgroupRoot>/kubepods` when the kubelet runs per-QoS cgroups.
    pub kubepods: Option<String>,
    /// Host facts (machine_* series); `None`: `machine_scrape_error 1`.
    pub machine: Option<&'a HostInfo>,
    /// The scrape time (`container_last_seen`).
    pub now: DateTime<Utc>,
}

impl<'a> CadvisorInput<'a> {
    /// Joins the snapshot with the desired pods (cgroup paths, when `pod_cgroup_root` is the
    /// `cgroupRoot` of per-QoS cgroups) and the runtime's pods (container IDs and images).
    pub fn new(
        summary: &'a Summary,
        pods: &[impl std::borrow::Borrow<Pod>],
        runtime_pods: &[PodStatus],
        pod_cgroup_root: Option<(&str, CgroupDriver)>,
        machine: Option<&'a HostInfo>,
        now: DateTime<Utc>,
    ) -> Self {
        let pod_cgroups = match pod_cgroup_root {
            Some((root, driver)) => pods
                .iter()
                .map(std::borrow::Borrow::borrow)
                .filter_map(|p: &Pod| Some((p.uid().to_owned(), pod_cgroup_path(root, driver, p)?)))
                .collect(),
            None => HashMap::new(),
        };
        let mut containers = HashMap::new();
        let mut sandboxes = HashMap::new();
        for p in runtime_pods {
            let newest = p
                .sandbox_statuses
                .iter()
                .find(|s| s.ready)
                .or(p.sandbox_statuses.first());
            if let Some(sb) = newest {
                sandboxes.insert(p.uid.clone(), sb.id.clone());
            }
            // Newest first: the first of each name is the attempt the stats describe.
            for c in &p.container_statuses {
                containers
                    .entry((p.uid.clone(), c.name.clone()))
                    .or_insert_with(|| ContainerRef {
                        id: c.id.clone(),
                        image: c.image.clone(),
                    });
            }
        }
        let kubepods = pod_cgroup_root.and_then(|(r, driver)| kubepods_path(r, driver));
        Self {
            summary,
            pod_cgroups,
            containers,
            sandboxes,
            kubepods,
            machine,
            now,
        }
    }
}

/// The base labels of one cadvisor container (the kubelet's `containerPrometheusLabelsFunc`).
#[derive(Debug, Clone, Default)]
struct Base {
    container: String,
    id: String,
    image: String,
    name: String,
    namespace: String,
    pod: String,
}

impl Base {
    fn labels(&self) -> Vec<(&'static str, String)> {
        vec![
            ("container", self.container.clone()),
            ("id", self.id.clone()),
            ("image", self.image.clone()),
            ("name", self.name.clone()),
            ("namespace", self.namespace.clone()),
            ("pod", self.pod.clone()),
        ]
    }

    fn with(&self, key: &'static str, value: &str) -> Vec<(&'static str, String)> {
        let mut l = self.labels();
        l.push((key, value.to_owned()));
        l
    }
}

/// One cadvisor container's figures.
struct Row<'a> {
    base: Base,
    cpu: Option<&'a CpuStats>,
    memory: Option<&'a MemoryStats>,
    network: Option<&'a NetworkStats>,
    fs: Option<&'a FsStats>,
    start: Option<DateTime<Utc>>,
}

struct Families {
    cpu: Family,
    mem_usage: Family,
    mem_ws: Family,
    mem_rss: Family,
    rx_bytes: Family,
    rx_errors: Family,
    tx_bytes: Family,
    tx_errors: Family,
    fs_usage: Family,
    start: Family,
    last_seen: Family,
}

impl Families {
    fn new() -> Self {
        use MetricKind::{Counter, Gauge};
        Self {
            cpu: Family::new(
                "container_cpu_usage_seconds_total",
                "Cumulative cpu time consumed in seconds.",
                Counter,
            ),
            mem_usage: Family::new(
                "container_memory_usage_bytes",
                "Current memory usage in bytes, including all memory regardless of when it was accessed",
                Gauge,
            ),
            mem_ws: Family::new(
                "container_memory_working_set_bytes",
                "Current working set in bytes.",
                Gauge,
            ),
            mem_rss: Family::new("container_memory_rss", "Size of RSS in bytes.", Gauge),
            rx_bytes: Family::new(
                "container_network_receive_bytes_total",
                "Cumulative count of bytes received",
                Counter,
            ),
            rx_errors: Family::new(
                "container_network_receive_errors_total",
                "Cumulative count of errors encountered while receiving",
                Counter,
            ),
            tx_bytes: Family::new(
                "container_network_transmit_bytes_total",
                "Cumulative count of bytes transmitted",
                Counter,
            ),
            tx_errors: Family::new(
                "container_network_transmit_errors_total",
                "Cumulative count of errors encountered while transmitting",
                Counter,
            ),
            fs_usage: Family::new(
                "container_fs_usage_bytes",
                "Number of bytes that are consumed by the container on this filesystem.",
                Gauge,
            ),
            start: Family::new(
                "container_start_time_seconds",
                "Start time of the container since unix epoch in seconds.",
                Gauge,
            ),
            last_seen: Family::new(
                "container_last_seen",
                "Last time a container was seen by the exporter",
                Gauge,
            ),
        }
    }

    fn add(&mut self, r: &Row<'_>, now: &DateTime<Utc>) {
        let b = &r.base;
        if let Some(cpu) = r.cpu
            && let Some(ns) = cpu.usage_core_nano_seconds
            && ns > 0
        {
            // Without per-CPU figures cadvisor reports the total under `cpu="total"`.
            self.cpu.push(
                b.with("cpu", "total"),
                ns_to_seconds(ns),
                Some(millis(&cpu.time)),
            );
        }
        if let Some(m) = r.memory {
            let ts = Some(millis(&m.time));
            for (fam, v) in [
                (&mut self.mem_usage, m.usage_bytes),
                (&mut self.mem_ws, m.working_set_bytes),
                (&mut self.mem_rss, m.rss_bytes),
            ] {
                if let Some(v) = v {
                    fam.push(b.labels(), v as f64, ts);
                }
            }
        }
        if let Some(n) = r.network {
            let ts = Some(millis(&n.time));
            let ifaces: Vec<_> = if n.interfaces.is_empty() && !n.default.name.is_empty() {
                vec![&n.default]
            } else {
                n.interfaces.iter().collect()
            };
            for i in ifaces {
                for (fam, v) in [
                    (&mut self.rx_bytes, i.rx_bytes),
                    (&mut self.rx_errors, i.rx_errors),
                    (&mut self.tx_bytes, i.tx_bytes),
                    (&mut self.tx_errors, i.tx_errors),
                ] {
                    if let Some(v) = v {
                        fam.push(b.with("interface", &i.name), v as f64, ts);
                    }
                }
            }
        }
        if let Some(fs) = r.fs
            && let Some(used) = fs.used_bytes
        {
            // The device of the writable layer is not in the snapshot.
            self.fs_usage
                .push(b.with("device", ""), used as f64, Some(millis(&fs.time)));
        }
        if let Some(t) = &r.start {
            self.start.push(b.labels(), t.timestamp() as f64, None);
        }
        let seen_at = r
            .cpu
            .map(|c| c.time)
            .or(r.memory.map(|m| m.time))
            .or(r.network.map(|n| n.time));
        if let Some(t) = seen_at {
            self.last_seen
                .push(b.labels(), now.timestamp() as f64, Some(millis(&t)));
        }
    }

    fn write(self, out: &mut Exposition) {
        for f in [
            self.cpu,
            self.mem_usage,
            self.mem_ws,
            self.mem_rss,
            self.rx_bytes,
            self.rx_errors,
            self.tx_bytes,
            self.tx_errors,
            self.fs_usage,
            self.start,
            self.last_seen,
        ] {
            f.write(out);
        }
    }
}

/// The exposition of `/metrics/cadvisor`.
pub fn render(inp: &CadvisorInput<'_>) -> String {
    let mut out = Exposition::new();
    collect(inp, &mut out);
    out.finish()
}

/// Writes the cadvisor families into `out`.
pub fn collect(inp: &CadvisorInput<'_>, out: &mut Exposition) {
    let s = inp.summary;
    let failed = super::resource::is_empty(s);
    let mut fams = Families::new();
    if !failed {
        fams.add(
            &Row {
                base: Base {
                    id: "/".to_owned(),
                    ..Base::default()
                },
                cpu: s.node.cpu.as_ref(),
                memory: s.node.memory.as_ref(),
                network: s.node.network.as_ref(),
                fs: None,
                start: s.node.start_time,
            },
            &inp.now,
        );
        if let Some(kubepods) = &inp.kubepods
            && let Some(c) = s.node.system_containers.iter().find(|c| c.name == "pods")
        {
            fams.add(
                &Row {
                    base: Base {
                        id: kubepods.clone(),
                        ..Base::default()
                    },
                    cpu: c.cpu.as_ref(),
                    memory: c.memory.as_ref(),
                    network: None,
                    fs: None,
                    start: c.start_time,
                },
                &inp.now,
            );
        }
        for pod in &s.pods {
            let uid = &pod.pod_ref.uid;
            let Some(cgroup) = inp.pod_cgroups.get(uid) else {
                continue;
            };
            let pod_base = Base {
                id: cgroup.clone(),
                namespace: pod.pod_ref.namespace.clone(),
                pod: pod.pod_ref.name.clone(),
                ..Base::default()
            };
            for c in &pod.containers {
                let Some(r) = inp.containers.get(&(uid.clone(), c.name.clone())) else {
                    continue;
                };
                fams.add(
                    &Row {
                        base: Base {
                            container: c.name.clone(),
                            id: format!("{cgroup}/{}", r.id),
                            image: r.image.clone(),
                            name: r.id.clone(),
                            ..pod_base.clone()
                        },
                        cpu: c.cpu.as_ref(),
                        memory: c.memory.as_ref(),
                        network: None,
                        fs: c.rootfs.as_ref(),
                        start: c.start_time,
                    },
                    &inp.now,
                );
            }
            // Only the sandbox has network series in cadvisor (its containerd handler drops
            // them for the containers sharing the sandbox's namespace; pod cgroups have none).
            // The snapshot has no CPU/memory of the pause container itself.
            if let Some(sb) = inp.sandboxes.get(uid)
                && pod.network.is_some()
            {
                fams.add(
                    &Row {
                        base: Base {
                            id: format!("{cgroup}/{sb}"),
                            name: sb.clone(),
                            ..pod_base.clone()
                        },
                        cpu: None,
                        memory: None,
                        network: pod.network.as_ref(),
                        fs: None,
                        start: None,
                    },
                    &inp.now,
                );
            }
            fams.add(
                &Row {
                    base: pod_base,
                    cpu: pod.cpu.as_ref(),
                    memory: pod.memory.as_ref(),
                    network: None,
                    fs: None,
                    start: pod.start_time,
                },
                &inp.now,
            );
        }
    }
    fams.write(out);
    let mut err = Family::new(
        "container_scrape_error",
        "1 if there was an error while getting container metrics, 0 otherwise",
        MetricKind::Gauge,
    );
    err.push(Vec::new(), if failed { 1.0 } else { 0.0 }, None);
    err.write(out);
    machine(inp.machine, out);
}

/// `machine_*` (cadvisor's machine collector: no timestamps, labels `boot_id`, `machine_id`,
/// `system_uuid`).
fn machine(m: Option<&HostInfo>, out: &mut Exposition) {
    if let Some(m) = m {
        let labels = || {
            vec![
                ("boot_id", m.boot_id.clone()),
                ("machine_id", m.machine_id.clone()),
                ("system_uuid", m.system_uuid.clone()),
            ]
        };
        for (name, help, v) in [
            (
                "machine_cpu_cores",
                "Number of logical CPU cores.",
                m.num_cores,
            ),
            (
                "machine_memory_bytes",
                "Amount of memory installed on the machine.",
                m.memory_capacity,
            ),
            (
                "machine_swap_bytes",
                "Amount of swap memory available on the machine.",
                m.swap_capacity,
            ),
        ] {
            let mut f = Family::new(name, help, MetricKind::Gauge);
            f.push(labels(), v as f64, None);
            f.write(out);
        }
    }
    let mut err = Family::new(
        "machine_scrape_error",
        "1 if there was an error while getting machine metrics, 0 otherwise.",
        MetricKind::Gauge,
    );
    err.push(Vec::new(), if m.is_some() { 0.0 } else { 1.0 }, None);
    err.write(out);
}
