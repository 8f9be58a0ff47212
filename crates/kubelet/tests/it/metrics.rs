//! `/metrics` and `/metrics/probes` of a whole agent on the `FakeRuntime` (paused time): the
//! kubelet_* series move as pods start, fail and go away; every upstream family name is exposed;
//! and the text passes `promtool check metrics` (Debian package `prometheus`, installed by
//! `dev/runtime.sh`; the tests fail, never skip, without it).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::events::CollectingRecorder;
use kubelet::metrics::KubeletMetrics;
use rkubelet_cri::CriError;
use rkubelet_cri::fake::{Behaviour, FakeRuntime};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::common;

use common::agent::{IMAGE, fake_deps, set, static_pod, uid, wait_until};
use common::promtool_check;

const NODE: &str = "node-m";

/// Family names of the upstream kubelet's `/metrics` this kubelet must expose (from
/// `pkg/kubelet/metrics/metrics.go`, `pkg/kubelet/server/metrics` and client_golang's process
/// collector).
const UPSTREAM_NAMES: &[&str] = &[
    "kubelet_node_name",
    "kubelet_running_pods",
    "kubelet_running_containers",
    "kubelet_desired_pods",
    "kubelet_active_pods",
    "kubelet_mirror_pods",
    "kubelet_restarted_pods_total",
    "kubelet_pod_start_duration_seconds",
    "kubelet_pod_start_sli_duration_seconds",
    "kubelet_pod_start_total_duration_seconds",
    "kubelet_pod_worker_duration_seconds",
    "kubelet_pod_worker_start_duration_seconds",
    "kubelet_pleg_relist_duration_seconds",
    "kubelet_pleg_relist_interval_seconds",
    "kubelet_pleg_last_seen_seconds",
    "kubelet_runtime_operations_total",
    "kubelet_runtime_operations_duration_seconds",
    "kubelet_runtime_operations_errors_total",
    "kubelet_run_podsandbox_duration_seconds",
    "kubelet_run_podsandbox_errors_total",
    "kubelet_started_pods_total",
    "kubelet_started_pods_errors_total",
    "kubelet_started_containers_total",
    "kubelet_started_containers_errors_total",
    "kubelet_evictions",
    "kubelet_image_pull_duration_seconds",
    "kubelet_http_requests_total",
    "kubelet_http_requests_duration_seconds",
    "kubelet_http_inflight_requests",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
];

fn pod(yaml_spec: &str, name: &str) -> Pod {
    let yaml = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{yaml_spec}");
    static_pod(&yaml, name, NODE)
}

fn simple(name: &str, image: &str, extra: &str) -> Pod {
    pod(
        &format!(
            "  terminationGracePeriodSeconds: 1\n  containers:\n  - name: {name}-c\n    image: {image}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n{extra}"
        ),
        name,
    )
}

fn running(agent: &Agent, p: &Pod) -> bool {
    agent.status.get_pod_status(uid(p)).is_some_and(|s| {
        s.phase.as_deref() == Some("Running")
            && s.container_statuses.as_ref().is_some_and(|cs| {
                !cs.is_empty()
                    && cs
                        .iter()
                        .all(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
            })
    })
}

fn value(m: &KubeletMetrics, name: &str, labels: &[&str]) -> f64 {
    m.value(name, labels).unwrap_or(0.0)
}

fn count(m: &KubeletMetrics, name: &str, labels: &[&str]) -> u64 {
    m.histogram_count(name, labels).unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_pods_through_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    fake.on_start("withinit-init", Behaviour::ExitImmediately(0));
    let deps = fake_deps(&fake, &CollectingRecorder::default());
    let agent = Agent::start(
        AgentConfig::for_tests(dir.path(), NODE),
        deps,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let m = agent.metrics.clone();

    let probe =
        "    readinessProbe:\n      exec:\n        command: [\"true\"]\n      periodSeconds: 1\n";
    let mut pods = vec![
        simple("web-0", IMAGE, probe),
        simple("web-1", IMAGE, ""),
        // Not on the node: pulled once.
        simple("pulled", "docker.io/library/nginx:1.25", ""),
        pod(
            &format!(
                "  terminationGracePeriodSeconds: 1\n  initContainers:\n  - name: withinit-init\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"true\"]\n  containers:\n  - name: withinit-c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n"
            ),
            "withinit",
        ),
    ];
    set(&agent, pods.clone()).await;
    wait_until("4 pods running", Duration::from_secs(60), || {
        pods.iter().all(|p| running(&agent, p))
    })
    .await;

    // A container whose first CreateContainer fails, then starts on the worker's retry.
    fake.fail_next(
        "CreateContainer",
        CriError::unknown("CreateContainer", "injected failure"),
    );
    pods.push(simple("flaky", IMAGE, ""));
    set(&agent, pods.clone()).await;
    wait_until("flaky running", Duration::from_secs(120), || {
        running(&agent, &pods[4])
    })
    .await;
    wait_until(
        "gauges caught up (relist + housekeeping)",
        Duration::from_secs(30),
        || {
            value(&m, "kubelet_running_pods", &[]) == 5.0
                && value(&m, "kubelet_desired_pods", &["true"]) == 5.0
                && value(&m, "kubelet_running_containers", &["running"]) == 5.0
        },
    )
    .await;
    let web0 = pods[0].clone();
    wait_until("readiness probes ran", Duration::from_secs(30), || {
        agent
            .prober
            .metrics()
            .snapshot()
            .iter()
            .any(|(l, n)| l.pod == "web-0-node-m" && l.result == "successful" && *n >= 2)
    })
    .await;

    // Gauges.
    assert_eq!(value(&m, "kubelet_node_name", &[NODE]), 1.0);
    assert_eq!(value(&m, "kubelet_running_containers", &["exited"]), 1.0);
    assert_eq!(value(&m, "kubelet_desired_pods", &[""]), 0.0);
    assert_eq!(value(&m, "kubelet_active_pods", &["true"]), 5.0);
    assert_eq!(value(&m, "kubelet_mirror_pods", &[]), 0.0);
    assert!(value(&m, "kubelet_pleg_last_seen_seconds", &[]) > 1.6e9);

    // Pod and container starts.
    assert_eq!(value(&m, "kubelet_started_pods_total", &[]), 5.0);
    assert_eq!(value(&m, "kubelet_started_pods_errors_total", &[]), 0.0);
    assert_eq!(
        value(&m, "kubelet_started_containers_total", &["init_container"]),
        1.0
    );
    let regular = value(&m, "kubelet_started_containers_total", &["container"]);
    assert_eq!(regular, 6.0, "5 containers, one of them twice");
    assert_eq!(
        value(
            &m,
            "kubelet_started_containers_errors_total",
            &["container", "CreateContainerError"]
        ),
        1.0
    );

    // Runtime operations, counted by the CRI decorator with upstream's names.
    assert_eq!(
        value(&m, "kubelet_runtime_operations_total", &["run_podsandbox"]),
        5.0
    );
    assert_eq!(
        value(
            &m,
            "kubelet_runtime_operations_total",
            &["create_container"]
        ),
        7.0
    );
    assert_eq!(
        value(
            &m,
            "kubelet_runtime_operations_errors_total",
            &["create_container"]
        ),
        1.0
    );
    assert_eq!(
        value(&m, "kubelet_runtime_operations_total", &["pull_image"]),
        1.0
    );
    assert!(value(&m, "kubelet_runtime_operations_total", &["list_podsandbox"]) >= 2.0);
    assert!(value(&m, "kubelet_runtime_operations_total", &["exec_sync"]) >= 2.0);
    assert_eq!(
        count(
            &m,
            "kubelet_runtime_operations_duration_seconds",
            &["run_podsandbox"]
        ),
        5
    );
    assert_eq!(
        count(&m, "kubelet_run_podsandbox_duration_seconds", &[""]),
        5
    );
    assert_eq!(
        count(&m, "kubelet_image_pull_duration_seconds", &["0-10MB"]),
        1
    );

    // Timings.
    assert!(count(&m, "kubelet_pleg_relist_duration_seconds", &[]) >= 2);
    assert!(count(&m, "kubelet_pleg_relist_interval_seconds", &[]) >= 1);
    assert_eq!(count(&m, "kubelet_pod_start_duration_seconds", &[]), 5);
    assert_eq!(
        count(&m, "kubelet_pod_worker_start_duration_seconds", &[]),
        5
    );
    assert!(count(&m, "kubelet_pod_worker_duration_seconds", &["create"]) >= 5);
    assert!(count(&m, "kubelet_pod_worker_duration_seconds", &["sync"]) >= 1);

    // The exposition: every upstream family, valid for promtool.
    let text = agent.metrics.render();
    for name in UPSTREAM_NAMES {
        assert!(
            text.contains(&format!("\n# TYPE {name} "))
                || text.starts_with(&format!("# HELP {name} ")),
            "{name} missing from /metrics:\n{text}"
        );
    }
    assert!(text.contains("kubelet_started_containers_errors_total{code=\"CreateContainerError\",container_type=\"container\"} 1\n"));
    assert!(text.contains("kubelet_running_pods 5\n"));
    promtool_check(&text);

    // /metrics/probes.
    let probes = agent.prober.metrics().render();
    assert!(
        probes.contains(&format!(
            "prober_probe_total{{container=\"web-0-c\",namespace=\"default\",pod=\"web-0-node-m\",pod_uid=\"{}\",probe_type=\"Readiness\",result=\"successful\"}} ",
            uid(&web0)
        )),
        "{probes}"
    );
    assert!(probes.contains("# TYPE prober_probe_duration_seconds histogram\n"));
    assert!(probes.contains("prober_probe_duration_seconds_count{container=\"web-0-c\",namespace=\"default\",pod=\"web-0-node-m\",probe_type=\"Readiness\"} "));
    assert!(probes.contains("# TYPE process_start_time_seconds gauge\n"));
    promtool_check(&probes);

    // Everything goes away: the gauges follow.
    set(&agent, vec![]).await;
    wait_until("runtime empty", Duration::from_secs(60), || {
        fake.containers().is_empty() && fake.sandboxes().is_empty()
    })
    .await;
    wait_until("gauges at zero", Duration::from_secs(30), || {
        value(&m, "kubelet_running_pods", &[]) == 0.0
            && value(&m, "kubelet_running_containers", &["running"]) == 0.0
            && value(&m, "kubelet_desired_pods", &["true"]) == 0.0
            && value(&m, "kubelet_active_pods", &["true"]) == 0.0
            && !agent.prober.metrics().render().contains("web-0-node-m")
    })
    .await;
    assert!(value(&m, "kubelet_runtime_operations_total", &["stop_podsandbox"]) >= 5.0);
    assert!(
        value(
            &m,
            "kubelet_runtime_operations_total",
            &["remove_container"]
        ) >= 6.0
    );
    agent.shutdown().await;
}

#[test]
fn synthetic_exposition_with_awkward_label_values_passes_promtool() {
    let m = KubeletMetrics::new("node \"quoted\" \\ back\nslash");
    m.inc_eviction("memory.available");
    m.inc_eviction("nodefs.inodesFree");
    m.record_http_request("GET", "/pods", "readonly", Duration::from_millis(12));
    m.record_http_request("POST", "/exec/ns/p/c", "readwrite", Duration::from_secs(30));
    m.record_runtime_operation("version", Duration::from_micros(800), false);
    m.record_started_container("init_container", Some("ErrImagePull"));
    m.observe_image_pull(3 << 30, Duration::from_secs(400));
    m.set_running(3, &[("running", 4), ("exited", 2)]);
    m.record_restarted_pod(true);
    let text = m.render();
    assert!(
        text.contains("kubelet_node_name{node=\"node \\\"quoted\\\" \\\\ back\\nslash\"} 1\n"),
        "{text}"
    );
    assert!(text.contains(
        "kubelet_image_pull_duration_seconds_bucket{image_size_in_bytes=\"1GB-5GB\",le=\"360\"} 0\n"
    ));
    assert!(text.contains(
        "kubelet_image_pull_duration_seconds_bucket{image_size_in_bytes=\"1GB-5GB\",le=\"480\"} 1\n"
    ));
    assert!(text.contains("kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"version\",le=\"0.005\"} 1\n"));
    // Families appear in name order.
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    promtool_check(&text);
}

/// Every family upstream's `/metrics/resource` can carry (`collectors/resource_metrics.go`;
/// `scrape_error` is deprecated and hidden since 1.30).
const UPSTREAM_RESOURCE_NAMES: &[&str] = &[
    "node_cpu_usage_seconds_total",
    "node_memory_working_set_bytes",
    "node_swap_usage_bytes",
    "container_start_time_seconds",
    "container_cpu_usage_seconds_total",
    "container_memory_working_set_bytes",
    "container_swap_usage_bytes",
    "container_swap_limit_bytes",
    "pod_cpu_usage_seconds_total",
    "pod_memory_working_set_bytes",
    "pod_swap_usage_bytes",
    "scrape_error",
    "resource_scrape_error",
];

/// Families of cadvisor's container and machine collectors with the metric sets the kubelet
/// enables (cpu, memory, network, disk usage/io, process, OOM, load) — the ones this kubelet
/// may write.
const UPSTREAM_CADVISOR_NAMES: &[&str] = &[
    "container_cpu_usage_seconds_total",
    "container_cpu_user_seconds_total",
    "container_cpu_system_seconds_total",
    "container_cpu_cfs_periods_total",
    "container_cpu_cfs_throttled_periods_total",
    "container_cpu_cfs_throttled_seconds_total",
    "container_cpu_load_average_10s",
    "container_memory_cache",
    "container_memory_rss",
    "container_memory_swap",
    "container_memory_usage_bytes",
    "container_memory_working_set_bytes",
    "container_memory_max_usage_bytes",
    "container_memory_failcnt",
    "container_memory_failures_total",
    "container_memory_mapped_file",
    "container_network_receive_bytes_total",
    "container_network_receive_errors_total",
    "container_network_receive_packets_total",
    "container_network_receive_packets_dropped_total",
    "container_network_transmit_bytes_total",
    "container_network_transmit_errors_total",
    "container_network_transmit_packets_total",
    "container_network_transmit_packets_dropped_total",
    "container_fs_usage_bytes",
    "container_fs_limit_bytes",
    "container_fs_inodes_free",
    "container_fs_inodes_total",
    "container_start_time_seconds",
    "container_last_seen",
    "container_scrape_error",
    "container_oom_events_total",
    "container_processes",
    "container_threads",
    "machine_cpu_cores",
    "machine_cpu_physical_cores",
    "machine_cpu_sockets",
    "machine_memory_bytes",
    "machine_swap_bytes",
    "machine_scrape_error",
];

/// The family names (`# TYPE` lines) of an exposition.
fn families(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// `GET path` on a plain-HTTP port: status code and body.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap();
    (code, body)
}

#[test]
fn exported_name_lists_are_upstream_names() {
    for n in kubelet::metrics::resource::RESOURCE_METRIC_NAMES {
        assert!(UPSTREAM_RESOURCE_NAMES.contains(n), "{n}");
    }
    for n in kubelet::metrics::cadvisor::CADVISOR_METRIC_NAMES {
        assert!(UPSTREAM_CADVISOR_NAMES.contains(n), "{n}");
    }
}

/// `/metrics/resource` and `/metrics/cadvisor` of an agent on the fake runtime, with a stats
/// snapshot injected as the provider would publish it: upstream names only, the running pod's
/// container under its cgroup id / runtime ID / image, and promtool accepts both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_and_cadvisor_endpoints_serve_the_snapshot() {
    use kubelet::cm::cgroups::CgroupVersion;
    use kubelet::cm::cgroups::fake::FakeCgroupFs;
    use kubelet::eviction::StatsSource;
    use kubelet::stats::{
        ContainerStats, CpuStats, InterfaceStats, MemoryStats, NetworkStats, PodReference,
        PodStats, StatsHandle, Summary,
    };

    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let (stats_tx, stats_rx) = tokio::sync::watch::channel(Arc::new(Summary::default()));
    let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
    cfg.read_only_addr = Some("127.0.0.1:0".parse().unwrap());
    cfg.cgroups.per_qos = true;
    cfg.cgroups.fs = Some(Arc::new(FakeCgroupFs::new(CgroupVersion::V2)));
    cfg.cgroups.cm.cgroup_root = "/rk".to_owned();
    cfg.eviction.stats = StatsSource::Injected(StatsHandle::injected(stats_rx));
    let agent = Agent::start(
        cfg,
        fake_deps(&fake, &CollectingRecorder::default()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let addr = agent.read_only_addr.unwrap();

    // Before the first snapshot: scrape errors only.
    let (code, body) = http_get(addr, "/metrics/resource").await;
    assert_eq!(code, 200);
    assert!(body.ends_with("resource_scrape_error 1\n"), "{body}");
    let (_, body) = http_get(addr, "/metrics/cadvisor").await;
    assert!(body.contains("container_scrape_error 1\n"), "{body}");

    let web = simple("web-0", IMAGE, "");
    set(&agent, vec![web.clone()]).await;
    wait_until("web-0 running", Duration::from_secs(30), || {
        running(&agent, &web)
    })
    .await;
    let cid = agent
        .status
        .get_pod_status(uid(&web))
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().next())
        .and_then(|c| c.container_id)
        .unwrap();
    let cid = cid
        .split_once("://")
        .map_or(cid.as_str(), |(_, id)| id)
        .to_owned();
    let now = chrono::Utc::now();
    let cpu = |ns| {
        Some(CpuStats {
            time: now,
            usage_nano_cores: None,
            usage_core_nano_seconds: Some(ns),
        })
    };
    let mem = |ws| {
        Some(MemoryStats {
            time: now,
            working_set_bytes: Some(ws),
            usage_bytes: Some(ws + 1000),
            rss_bytes: Some(ws / 2),
            ..Default::default()
        })
    };
    let eth0 = InterfaceStats {
        name: "eth0".into(),
        rx_bytes: Some(100),
        rx_errors: Some(0),
        tx_bytes: Some(200),
        tx_errors: Some(0),
    };
    let mut s = Summary::default();
    s.node.node_name = NODE.into();
    s.node.cpu = cpu(50_000_000_000);
    s.node.memory = mem(1 << 30);
    s.node.network = Some(NetworkStats {
        time: now,
        default: eth0.clone(),
        interfaces: vec![eth0.clone()],
    });
    s.pods.push(PodStats {
        pod_ref: PodReference {
            name: web.metadata.name.clone().unwrap(),
            namespace: web.metadata.namespace.clone().unwrap(),
            uid: uid(&web).to_owned(),
        },
        start_time: Some(now),
        containers: vec![ContainerStats {
            name: "web-0-c".into(),
            start_time: Some(now),
            cpu: cpu(1_250_000_000),
            memory: mem(52_428_800),
            ..Default::default()
        }],
        cpu: cpu(1_300_000_000),
        memory: mem(53_000_000),
        network: Some(NetworkStats {
            time: now,
            default: eth0.clone(),
            interfaces: vec![eth0],
        }),
        ..Default::default()
    });
    stats_tx.send(Arc::new(s)).unwrap();
    let ts = now.timestamp_millis();
    let pod_name = web.metadata.name.clone().unwrap();

    let (code, resource) = http_get(addr, "/metrics/resource").await;
    assert_eq!(code, 200);
    for f in families(&resource) {
        assert!(UPSTREAM_RESOURCE_NAMES.contains(&f.as_str()), "{f}");
    }
    assert!(
        resource.contains(&format!(
            "container_cpu_usage_seconds_total{{container=\"web-0-c\",namespace=\"default\",pod=\"{pod_name}\"}} 1.25 {ts}\n"
        )),
        "{resource}"
    );
    assert!(
        resource.ends_with("resource_scrape_error 0\n"),
        "{resource}"
    );
    promtool_check(&resource);

    let want = format!(
        "container_memory_working_set_bytes{{container=\"web-0-c\",id=\"/rk/kubepods/besteffort/pod{}/{cid}\",image=\"{IMAGE}\",name=\"{cid}\",namespace=\"default\",pod=\"{pod_name}\"}} 5.24288e+07 {ts}\n",
        uid(&web)
    );
    // The container row appears once the runtime pod cache (PLEG relist) knows the container.
    let start = Instant::now();
    let cadvisor = loop {
        let (code, body) = http_get(addr, "/metrics/cadvisor").await;
        assert_eq!(code, 200);
        if body.contains(&want) {
            break body;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no container row {want}\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for f in families(&cadvisor) {
        assert!(UPSTREAM_CADVISOR_NAMES.contains(&f.as_str()), "{f}");
    }
    assert!(
        cadvisor.contains(&format!(
            "container_cpu_usage_seconds_total{{container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 50 {ts}\n"
        )),
        "{cadvisor}"
    );
    assert!(
        cadvisor.contains(&format!(
            "container_cpu_usage_seconds_total{{container=\"\",cpu=\"total\",id=\"/rk/kubepods/besteffort/pod{}\",image=\"\",name=\"\",namespace=\"default\",pod=\"{pod_name}\"}} 1.3 {ts}\n",
            uid(&web)
        )),
        "{cadvisor}"
    );
    assert!(cadvisor.contains("machine_cpu_cores{"), "{cadvisor}");
    assert!(
        cadvisor.contains("container_scrape_error 0\n"),
        "{cadvisor}"
    );
    promtool_check(&cadvisor);
    agent.shutdown().await;
}
