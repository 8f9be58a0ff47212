//! `/metrics/resource` from a hand-built snapshot: exact series, labels, values, timestamps and
//! `resource_scrape_error`; plus the fixture the cadvisor tests share.

use chrono::{DateTime, Utc};

use super::resource::{RESOURCE_METRIC_NAMES, is_empty, render};
use crate::stats::{
    ContainerStats, CpuStats, FsStats, InterfaceStats, MemoryStats, NetworkStats, PodReference,
    PodStats, Summary,
};

/// 2026-01-02T03:04:05.250Z = 1767323045250 ms.
pub(crate) fn t() -> DateTime<Utc> {
    at("2026-01-02T03:04:05.250Z")
}

pub(crate) fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn cpu(ns: u64) -> Option<CpuStats> {
    Some(CpuStats {
        time: t(),
        usage_nano_cores: Some(1),
        usage_core_nano_seconds: Some(ns),
    })
}

fn mem(ws: u64, usage: u64, rss: u64) -> Option<MemoryStats> {
    Some(MemoryStats {
        time: t(),
        working_set_bytes: Some(ws),
        usage_bytes: Some(usage),
        rss_bytes: Some(rss),
        ..Default::default()
    })
}

fn net(name: &str, rx: u64, tx: u64) -> Option<NetworkStats> {
    let iface = InterfaceStats {
        name: name.into(),
        rx_bytes: Some(rx),
        rx_errors: Some(1),
        tx_bytes: Some(tx),
        tx_errors: Some(2),
    };
    Some(NetworkStats {
        time: t(),
        default: iface.clone(),
        interfaces: vec![iface],
    })
}

/// Node + pod `default/web` (uid u1: container `app` with everything, `side` with no stats
/// but a start time) + pod `prod/db` (uid u2: container `pg`).
pub(crate) fn fixture() -> Summary {
    let mut s = Summary::default();
    s.node.node_name = "node-a".into();
    s.node.cpu = cpu(12_500_000_000);
    s.node.memory = mem(2_147_483_648, 3_000_000_000, 1_000_000_000);
    s.node.network = net("eth0", 1000, 2000);
    s.node.start_time = Some(at("2026-01-01T00:00:00Z"));
    s.node.system_containers = vec![ContainerStats {
        name: "pods".into(),
        cpu: cpu(5_000_000_000),
        memory: mem(100_000_000, 200_000_000, 90_000_000),
        ..Default::default()
    }];
    s.pods = vec![
        PodStats {
            pod_ref: PodReference {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u1".into(),
            },
            start_time: Some(at("2026-01-02T03:00:00Z")),
            containers: vec![
                ContainerStats {
                    name: "app".into(),
                    start_time: Some(at("2026-01-02T03:00:01.5Z")),
                    cpu: cpu(1_500_000_000),
                    memory: mem(52_428_800, 60_000_000, 50_000_000),
                    rootfs: Some(FsStats {
                        time: t(),
                        used_bytes: Some(4096),
                        ..Default::default()
                    }),
                    logs: None,
                },
                ContainerStats {
                    name: "side".into(),
                    start_time: Some(at("2026-01-02T03:00:02Z")),
                    ..Default::default()
                },
            ],
            cpu: cpu(2_000_000_000),
            memory: mem(60_000_000, 70_000_000, 55_000_000),
            network: net("eth0", 10, 20),
            ..Default::default()
        },
        PodStats {
            pod_ref: PodReference {
                name: "db".into(),
                namespace: "prod".into(),
                uid: "u2".into(),
            },
            containers: vec![ContainerStats {
                name: "pg".into(),
                cpu: cpu(3_000_000_000),
                memory: mem(1_000_000, 1_000_000, 1_000_000),
                ..Default::default()
            }],
            cpu: cpu(3_000_000_000),
            memory: mem(1_000_000, 1_000_000, 1_000_000),
            ..Default::default()
        },
    ];
    s
}

#[test]
fn renders_upstream_series_with_stats_timestamps() {
    let text = render(&fixture());
    let want = "\
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\",pod=\"web\"} 1.5 1767323045250
container_cpu_usage_seconds_total{container=\"pg\",namespace=\"prod\",pod=\"db\"} 3 1767323045250
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container=\"app\",namespace=\"default\",pod=\"web\"} 5.24288e+07 1767323045250
container_memory_working_set_bytes{container=\"pg\",namespace=\"prod\",pod=\"db\"} 1e+06 1767323045250
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container=\"app\",namespace=\"default\",pod=\"web\"} 1.7673228015e+09
container_start_time_seconds{container=\"side\",namespace=\"default\",pod=\"web\"} 1.767322802e+09
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 12.5 1767323045250
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 2.147483648e+09 1767323045250
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 2 1767323045250
pod_cpu_usage_seconds_total{namespace=\"prod\",pod=\"db\"} 3 1767323045250
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 6e+07 1767323045250
pod_memory_working_set_bytes{namespace=\"prod\",pod=\"db\"} 1e+06 1767323045250
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
";
    assert_eq!(text, want);
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split_whitespace().nth(2).unwrap();
        assert!(RESOURCE_METRIC_NAMES.contains(&name), "{name}");
    }
}

#[test]
fn missing_snapshot_is_a_scrape_error_with_no_series() {
    assert!(is_empty(&Summary::default()));
    assert_eq!(
        render(&Summary::default()),
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n\
         # TYPE resource_scrape_error gauge\nresource_scrape_error 1\n"
    );
}

#[test]
fn absent_figures_leave_their_series_out() {
    let mut s = fixture();
    s.node.cpu = None;
    s.pods.truncate(1);
    s.pods[0].memory = None;
    s.pods[0].containers[0].start_time = Some(at("1970-01-01T00:00:00Z"));
    s.pods[0].containers[0]
        .cpu
        .as_mut()
        .unwrap()
        .usage_core_nano_seconds = None;
    let text = render(&s);
    assert!(!text.contains("node_cpu_usage_seconds_total"), "{text}");
    assert!(!text.contains("pod_memory_working_set_bytes"), "{text}");
    assert!(
        !text.contains("container_cpu_usage_seconds_total"),
        "{text}"
    );
    // Start times at the epoch are skipped, as upstream.
    assert!(
        !text.contains("container=\"app\",namespace=\"default\",pod=\"web\"} 1.767"),
        "{text}"
    );
    assert!(text.contains("resource_scrape_error 0\n"), "{text}");
    assert!(
        text.contains("node_memory_working_set_bytes 2.147483648e+09 1767323045250\n"),
        "{text}"
    );
}
