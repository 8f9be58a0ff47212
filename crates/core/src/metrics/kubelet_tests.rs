//! Table and recorder tests of the kubelet families: upstream's image size buckets and HTTP
//! label bucketing, every family rendered with its `[ALPHA]` help, each recorder moving its
//! series, the HTTP in-flight guard, and the pod start SLI arithmetic.

use std::time::{Duration, UNIX_EPOCH};

use crate::metrics::kubelet::*;
use crate::metrics::process::ProcessCollector;

#[test]
fn image_size_buckets_as_upstream() {
    const MB: u64 = 1024 * 1024;
    const GB: u64 = 1024 * MB;
    let cases = [
        (0, "0-10MB"),
        (10 * MB - 1, "0-10MB"),
        (10 * MB, "10MB-100MB"),
        (100 * MB, "100MB-500MB"),
        (500 * MB, "500MB-1GB"),
        (GB, "1GB-5GB"),
        (5 * GB, "5GB-10GB"),
        (10 * GB, "10GB-20GB"),
        (20 * GB, "20GB-30GB"),
        (30 * GB, "30GB-40GB"),
        (40 * GB, "40GB-60GB"),
        (60 * GB, "60GB-100GB"),
        (100 * GB, "GT100GB"),
        (u64::MAX, "GT100GB"),
    ];
    for (size, want) in cases {
        assert_eq!(image_size_bucket(size), want, "{size}");
    }
}

#[test]
fn http_request_labels_bucket_method_and_path() {
    let cases = [
        ("GET", "/pods", ("GET", "pods", "false")),
        ("GET", "/stats/summary", ("GET", "stats", "false")),
        ("GET", "/metrics", ("GET", "metrics", "false")),
        (
            "GET",
            "/metrics/cadvisor",
            ("GET", "metrics/cadvisor", "false"),
        ),
        ("GET", "/metrics/nope", ("GET", "other", "false")),
        ("GET", "/healthz/syncloop", ("GET", "healthz", "false")),
        ("POST", "/exec/ns/pod/c", ("POST", "exec", "true")),
        ("GET", "/debug/pprof/heap", ("GET", "debug", "true")),
        // As upstream (its long-running set spells `portforward`).
        (
            "GET",
            "/portForward/ns/pod",
            ("GET", "portForward", "false"),
        ),
        ("PATCH", "/pods", ("other", "pods", "false")),
        ("BREW", "/nothing/here", ("other", "other", "false")),
        ("GET", "/", ("GET", "other", "false")),
    ];
    for (method, path, (m, p, lr)) in cases {
        let got = http_request_labels(method, path);
        assert_eq!(
            (got.0, got.1.as_str(), got.2),
            (m, p, lr),
            "{method} {path}"
        );
    }
}

fn fake_process() -> ProcessCollector {
    ProcessCollector::new("/nonexistent-procfs")
}

#[test]
fn every_family_is_rendered_with_alpha_help() {
    let m = KubeletMetrics::with_process("node-a", fake_process());
    let text = m.render();
    for name in METRIC_NAMES.iter().filter(|n| n.starts_with("kubelet_")) {
        assert!(
            text.contains(&format!("# HELP {name} [ALPHA] ")),
            "{name} missing in\n{text}"
        );
    }
    assert!(text.contains("kubelet_node_name{node=\"node-a\"} 1\n"));
    assert!(text.contains("kubelet_started_pods_total 0\n"));
    assert!(text.contains("kubelet_running_pods 0\n"));
}

#[test]
fn recorders_move_their_series() {
    let m = KubeletMetrics::with_process("n", fake_process());
    m.record_runtime_operation("list_podsandbox", Duration::from_millis(3), false);
    m.record_runtime_operation("list_podsandbox", Duration::from_millis(20), true);
    assert_eq!(
        m.value("kubelet_runtime_operations_total", &["list_podsandbox"]),
        Some(2.0)
    );
    assert_eq!(
        m.value(
            "kubelet_runtime_operations_errors_total",
            &["list_podsandbox"]
        ),
        Some(1.0)
    );
    assert_eq!(
        m.histogram_count(
            "kubelet_runtime_operations_duration_seconds",
            &["list_podsandbox"]
        ),
        Some(2)
    );
    m.record_started_container(INIT_CONTAINER, Some("CreateContainerError"));
    assert_eq!(
        m.value(
            "kubelet_started_containers_errors_total",
            &[INIT_CONTAINER, "CreateContainerError"]
        ),
        Some(1.0)
    );
    // Container states that disappear drop to 0.
    m.set_running(2, &[("running", 3), ("exited", 1)]);
    m.set_running(1, &[("running", 1)]);
    assert_eq!(
        m.value("kubelet_running_containers", &["exited"]),
        Some(0.0)
    );
    assert_eq!(
        m.value("kubelet_running_containers", &["running"]),
        Some(1.0)
    );
    assert_eq!(m.value("kubelet_running_pods", &[]), Some(1.0));
    m.set_pod_counts((1, 2), (1, 1), 2);
    assert_eq!(m.value("kubelet_desired_pods", &["true"]), Some(2.0));
    assert_eq!(m.value("kubelet_active_pods", &[""]), Some(1.0));
    assert_eq!(m.value("kubelet_mirror_pods", &[]), Some(2.0));
    m.inc_eviction("memory.available");
    assert_eq!(
        m.value("kubelet_evictions", &["memory.available"]),
        Some(1.0)
    );
    m.observe_image_pull(50 * 1024 * 1024, Duration::from_secs(3));
    assert_eq!(
        m.histogram_count("kubelet_image_pull_duration_seconds", &["10MB-100MB"]),
        Some(1)
    );
}

#[tokio::test(start_paused = true)]
async fn http_guard_tracks_inflight_and_records_on_drop() {
    let m = KubeletMetrics::with_process("n", fake_process());
    let labels = ["GET", "pods", "readonly", "false"];
    let guard = m.http_request_started("GET", "/pods", "readonly");
    assert_eq!(
        m.value("kubelet_http_inflight_requests", &labels),
        Some(1.0)
    );
    assert_eq!(m.value("kubelet_http_requests_total", &labels), None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(guard);
    assert_eq!(
        m.value("kubelet_http_inflight_requests", &labels),
        Some(0.0)
    );
    assert_eq!(m.value("kubelet_http_requests_total", &labels), Some(1.0));
    let text = m.render();
    assert!(
        text.contains(
            "kubelet_http_requests_duration_seconds_bucket{long_running=\"false\",method=\"GET\",path=\"pods\",server_type=\"readonly\",le=\"0.25\"} 0\n"
        ),
        "{text}"
    );
    assert!(text.contains(
        "kubelet_http_requests_duration_seconds_bucket{long_running=\"false\",method=\"GET\",path=\"pods\",server_type=\"readonly\",le=\"0.5\"} 1\n"
    ));
}

#[test]
fn pod_start_durations_exclude_pulls_and_mark_the_first_network_pod() {
    let m = KubeletMetrics::with_process("n", fake_process());
    let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
    m.record_pod_image_pull(
        "a",
        t0 + Duration::from_secs(2),
        t0 + Duration::from_secs(7),
    );
    m.record_pod_running(
        "a",
        Some(Duration::from_secs(9)),
        Some(t0),
        false,
        t0 + Duration::from_secs(10),
    );
    // Observed once per pod; a host-network pod never is "first_with_network".
    m.record_pod_running(
        "a",
        Some(Duration::from_secs(1)),
        Some(t0),
        false,
        t0 + Duration::from_secs(20),
    );
    m.record_pod_running("b", None, Some(t0), true, t0 + Duration::from_secs(4));
    m.record_pod_running("c", None, None, false, t0);
    assert_eq!(
        m.histogram_count("kubelet_pod_start_duration_seconds", &[]),
        Some(2)
    );
    assert_eq!(
        m.histogram_count("kubelet_pod_start_sli_duration_seconds", &["true"]),
        Some(1)
    );
    assert_eq!(
        m.histogram_count("kubelet_pod_start_sli_duration_seconds", &["false"]),
        Some(1)
    );
    let text = m.render();
    // Pod a: 10 s since creation, 5 s of it pulling.
    assert!(
        text.contains(
            "kubelet_pod_start_sli_duration_seconds_sum{first_with_network=\"true\"} 5\n"
        ),
        "{text}"
    );
    assert!(text.contains(
        "kubelet_pod_start_total_duration_seconds_sum{first_with_network=\"true\"} 10\n"
    ));
    assert!(
        text.contains(
            "kubelet_pod_start_sli_duration_seconds_sum{first_with_network=\"false\"} 4\n"
        )
    );
}
