use super::*;
use crate::container::cache::PodCache;
use crate::container::{ContainerState, ContainerStatus, PodStatus as RtPodStatus};
use crate::status::manager::StatusManager;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{
    ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus as ApiContainerStatus, PodStatus,
};
use std::sync::Arc;
use tokio::sync::watch;

fn pod(ns: &str, name: &str, uid: &str, containers: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: containers
                .iter()
                .map(|c| Container {
                    name: (*c).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        status: None,
    }
}

fn state(pods: Vec<Pod>) -> (ServerState, watch::Sender<crate::types::PodsSnapshot>) {
    let (tx, rx) = watch::channel(crate::types::pods_snapshot(pods));
    (ServerState::basic(rx, StatusManager::new(), Vec::new()), tx)
}

async fn get(st: &ServerState, ep: Endpoints, method: Method, uri: &str) -> (StatusCode, String) {
    let req = Request::builder().method(method).uri(uri).body(()).unwrap();
    let resp = route(st, ep, &req).await;
    let code = resp.status();
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&b).into_owned())
}

#[tokio::test]
async fn unknown_and_disabled_paths() {
    let (mut st, _tx) = state(Vec::new());
    st.configz = Some(Arc::new(serde_json::json!({"port": 10250})));
    let (c, b) = get(&st, Endpoints::Secure, Method::GET, "/configz").await;
    assert_eq!(c, StatusCode::OK);
    assert_eq!(b, r#"{"kubeletconfig":{"port":10250}}"#);
    // The read-only port has no debugging handlers at all.
    assert_eq!(
        get(&st, Endpoints::ReadOnly, Method::GET, "/configz").await,
        (StatusCode::NOT_FOUND, "404 page not found\n".into())
    );
    st.debugging_handlers = false;
    assert_eq!(
        get(&st, Endpoints::Secure, Method::GET, "/configz").await,
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "Debug endpoints are disabled.\n".into()
        )
    );
    st.debugging_handlers = true;
    assert_eq!(
        get(&st, Endpoints::Secure, Method::GET, "/nope").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&st, Endpoints::Secure, Method::GET, "/metrics").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&st, Endpoints::Healthz, Method::GET, "/pods").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&st, Endpoints::Secure, Method::GET, "/run/ns/p/c")
            .await
            .0,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        get(&st, Endpoints::Secure, Method::GET, "/healthz/ping").await,
        (StatusCode::OK, "ok".into())
    );
}

#[tokio::test]
async fn running_pods_come_from_the_runtime_cache() {
    let (mut st, _tx) = state(Vec::new());
    let cache = PodCache::new();
    let ctr = |name: &str, state| ContainerStatus {
        id: format!("id-{name}"),
        name: name.into(),
        state,
        sandbox_id: String::new(),
        created_at: None,
        started_at: None,
        finished_at: None,
        exit_code: 0,
        image: "busybox:latest".into(),
        image_ref: String::new(),
        image_id: String::new(),
        hash: 0,
        restart_count: 0,
        reason: String::new(),
        message: String::new(),
        termination_message_path: None,
        termination_grace_period: None,
        resources: None,
        user: None,
    };
    cache.set(
        "u1",
        Ok(RtPodStatus {
            uid: "u1".into(),
            name: "web".into(),
            namespace: "default".into(),
            container_statuses: vec![
                ctr("app", ContainerState::Running),
                ctr("old", ContainerState::Exited),
            ],
            ..Default::default()
        }),
        tokio::time::Instant::now(),
    );
    cache.set(
        "u2",
        Ok(RtPodStatus {
            uid: "u2".into(),
            name: "gone".into(),
            namespace: "default".into(),
            container_statuses: vec![ctr("x", ContainerState::Exited)],
            ..Default::default()
        }),
        tokio::time::Instant::now(),
    );
    st.pod_cache = Some(cache);
    let (c, b) = get(&st, Endpoints::Secure, Method::GET, "/runningpods/").await;
    assert_eq!(c, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["kind"], "PodList");
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["name"], "web");
    assert_eq!(items[0]["metadata"]["uid"], "u1");
    assert_eq!(
        items[0]["spec"]["containers"],
        serde_json::json!([{"name": "app", "image": "busybox:latest"}])
    );
}

#[tokio::test]
async fn container_log_lookup_errors_as_upstream() {
    let p = pod("ns", "web", "u1", &["app", "side"]);
    let (st, _tx) = state(vec![p.clone()]);
    let cs = |name: &str, state: ApiState, last: Option<ApiState>| ApiContainerStatus {
        name: name.into(),
        container_id: Some(format!("containerd://{name}-now")),
        state: Some(state),
        last_state: last,
        ..Default::default()
    };
    st.status.set_pod_status(
        &p,
        PodStatus {
            container_statuses: Some(vec![
                cs(
                    "app",
                    ApiState {
                        running: Some(ContainerStateRunning::default()),
                        ..Default::default()
                    },
                    None,
                ),
                cs(
                    "side",
                    ApiState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some("ImagePullBackOff".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    Some(ApiState {
                        terminated: Some(ContainerStateTerminated::default()),
                        ..Default::default()
                    }),
                ),
            ]),
            ..Default::default()
        },
    );
    let g = |uri: &'static str| {
        let st = st.clone();
        async move { get(&st, Endpoints::Secure, Method::GET, uri).await }
    };
    assert_eq!(
        g("/containerLogs/ns/nope/app").await,
        (
            StatusCode::NOT_FOUND,
            "pod \"ns/nope\" does not exist\n".into()
        )
    );
    assert_eq!(
        g("/containerLogs/ns/web/zzz").await,
        (
            StatusCode::NOT_FOUND,
            "container \"zzz\" not found in pod \"ns/web\"\n".into()
        )
    );
    assert_eq!(
        g("/containerLogs/ns/web/app?previous=true").await,
        (
            StatusCode::BAD_REQUEST,
            "previous terminated container \"app\" in pod \"web\" not found".into()
        )
    );
    assert_eq!(
        g("/containerLogs/ns/web/side").await,
        (
            StatusCode::BAD_REQUEST,
            "container \"side\" in pod \"web\" is waiting to start: trying and failing to pull image"
                .into()
        )
    );
    assert_eq!(
        g("/containerLogs/ns/web/app?tailLines=x").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        g("/containerLogs/ns/web/app?tailLines=-1").await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        g("/containerLogs/ns/web/app?sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z")
            .await
            .0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
}

#[test]
fn log_container_id_picks_current_or_previous() {
    let p = pod("ns", "web", "u1", &["app"]);
    let status = PodStatus {
        container_statuses: Some(vec![ApiContainerStatus {
            name: "app".into(),
            container_id: Some("containerd://new".into()),
            state: Some(ApiState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            last_state: Some(ApiState {
                terminated: Some(ContainerStateTerminated {
                    container_id: Some("containerd://old".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    };
    assert_eq!(
        log_container_id(&p, Some(&status), "app", false).unwrap(),
        "containerd://new"
    );
    assert_eq!(
        log_container_id(&p, Some(&status), "app", true).unwrap(),
        "containerd://old"
    );
    assert_eq!(
        log_container_id(&p, None, "app", false).unwrap_err(),
        "container \"app\" in pod \"web\" is not available"
    );
}

#[tokio::test]
async fn system_logs_list_serve_and_refuse_traversal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("log");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("syslog"), "hello\n").unwrap();
    std::fs::write(dir.path().join("secret"), "nope\n").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret"), root.join("escape")).unwrap();
    let (mut st, _tx) = state(Vec::new());
    st.system_logs = Some(root);
    let g = |uri: &'static str| {
        let st = st.clone();
        async move { get(&st, Endpoints::Secure, Method::GET, uri).await }
    };
    assert_eq!(
        g("/logs/").await,
        (
            StatusCode::OK,
            "<pre>\n<a href=\"escape\">escape</a>\n<a href=\"sub/\">sub/</a>\n<a href=\"syslog\">syslog</a>\n</pre>\n"
                .into()
        )
    );
    assert_eq!(g("/logs/syslog").await, (StatusCode::OK, "hello\n".into()));
    assert_eq!(g("/logs/sub").await.0, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(g("/logs").await.0, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(g("/logs/../secret").await.0, StatusCode::BAD_REQUEST);
    assert_eq!(g("/logs/%2e%2e/secret").await.0, StatusCode::BAD_REQUEST);
    assert_eq!(g("/logs/escape").await.0, StatusCode::NOT_FOUND);
    assert_eq!(g("/logs/missing").await.0, StatusCode::NOT_FOUND);
    st.system_logs = None;
    assert_eq!(
        get(&st, Endpoints::Secure, Method::GET, "/logs/").await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn metrics_endpoints_serve_the_registries_and_count_requests() {
    let (mut st, _tx) = state(Vec::new());
    assert_eq!(
        get(&st, Endpoints::ReadOnly, Method::GET, "/metrics")
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let metrics = crate::metrics::KubeletMetrics::new("node-a");
    st.metrics = Some(metrics.clone());
    st.probe_metrics = Some(crate::prober::metrics::ProbeMetrics::default());
    let (c, b) = get(&st, Endpoints::Secure, Method::GET, "/metrics").await;
    assert_eq!(c, StatusCode::OK);
    assert!(b.contains("kubelet_node_name{node=\"node-a\"} 1"), "{b}");
    assert!(b.contains("# TYPE process_start_time_seconds gauge"), "{b}");
    let (c, b) = get(&st, Endpoints::ReadOnly, Method::GET, "/metrics/probes").await;
    assert_eq!(c, StatusCode::OK);
    assert!(b.contains("prober_probe_total"), "{b}");
    assert_eq!(
        get(&st, Endpoints::Secure, Method::POST, "/metrics")
            .await
            .0,
        StatusCode::METHOD_NOT_ALLOWED
    );
    // Both ports are instrumented; healthz is not.
    get(&st, Endpoints::Healthz, Method::GET, "/healthz").await;
    let served = metrics.render();
    assert!(
        served.contains(
            "kubelet_http_requests_total{long_running=\"false\",method=\"GET\",path=\"metrics\",server_type=\"readwrite\"} 1"
        ),
        "{served}"
    );
    assert!(
        served.contains("path=\"metrics/probes\",server_type=\"readonly\"} 1"),
        "{served}"
    );
    assert!(!served.contains("path=\"healthz\""), "{served}");
}

#[tokio::test]
async fn stats_summary_serves_the_latest_snapshot() {
    use crate::stats::{
        ContainerStats as CStats, FsStats, MemoryStats, PodReference, PodStats, StatsHandle,
        Summary,
    };
    let (mut st, _tx) = state(Vec::new());
    assert_eq!(
        get(&st, Endpoints::Secure, Method::GET, "/stats/summary")
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let now = chrono::Utc::now();
    let fs = FsStats {
        time: now,
        used_bytes: Some(4096),
        ..Default::default()
    };
    let mut summary = Summary::default();
    summary.node.node_name = "node-a".into();
    summary.node.fs = Some(fs.clone());
    summary.node.memory = Some(MemoryStats {
        time: now,
        working_set_bytes: Some(123),
        ..Default::default()
    });
    summary.pods.push(PodStats {
        pod_ref: PodReference {
            name: "p".into(),
            namespace: "default".into(),
            uid: "u1".into(),
        },
        containers: vec![CStats {
            name: "c".into(),
            logs: Some(fs.clone()),
            ..Default::default()
        }],
        ephemeral_storage: Some(fs),
        ..Default::default()
    });
    let (stats_tx, stats_rx) = watch::channel(Arc::new(summary));
    st.stats = Some(StatsHandle::injected(stats_rx));

    let (c, b) = get(&st, Endpoints::ReadOnly, Method::GET, "/stats/summary").await;
    assert_eq!(c, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["node"]["nodeName"], "node-a");
    assert_eq!(v["node"]["memory"]["workingSetBytes"], 123);
    assert_eq!(v["node"]["fs"]["usedBytes"], 4096);
    assert_eq!(v["pods"][0]["podRef"]["uid"], "u1");
    assert_eq!(v["pods"][0]["ephemeral-storage"]["usedBytes"], 4096);
    assert_eq!(v["pods"][0]["containers"][0]["logs"]["usedBytes"], 4096);

    let (c, b) = get(
        &st,
        Endpoints::Secure,
        Method::GET,
        "/stats/summary?only_cpu_and_memory=true",
    )
    .await;
    assert_eq!(c, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["node"]["memory"]["workingSetBytes"], 123);
    assert!(v["node"].get("fs").is_none(), "{v}");
    assert!(v["pods"][0].get("ephemeral-storage").is_none(), "{v}");
    assert!(v["pods"][0]["containers"][0].get("logs").is_none(), "{v}");

    // A new snapshot is served as soon as the provider publishes it.
    let mut next = Summary::default();
    next.node.node_name = "node-b".into();
    stats_tx.send(Arc::new(next)).unwrap();
    let (_, b) = get(&st, Endpoints::Secure, Method::GET, "/stats/summary").await;
    assert!(b.contains("\"nodeName\":\"node-b\""), "{b}");
    assert_eq!(
        get(
            &st,
            Endpoints::Secure,
            Method::GET,
            "/stats/summary?only_cpu_and_memory=maybe"
        )
        .await
        .0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn resource_and_cadvisor_metrics_from_the_latest_snapshot() {
    use crate::stats::{CpuStats, PodReference, PodStats, StatsHandle, Summary};
    let (mut st, _tx) = state(vec![pod("default", "web", "u1", &["app"])]);
    for path in ["/metrics/resource", "/metrics/cadvisor"] {
        assert_eq!(
            get(&st, Endpoints::ReadOnly, Method::GET, path).await.0,
            StatusCode::NOT_FOUND,
            "{path} without stats"
        );
    }
    let (stats_tx, stats_rx) = watch::channel(Arc::new(Summary::default()));
    st.stats = Some(StatsHandle::injected(stats_rx));
    st.pod_cgroup_root = Some("/".into());
    let cache = PodCache::default();
    cache.set(
        "u1",
        Ok(RtPodStatus {
            uid: "u1".into(),
            name: "web".into(),
            namespace: "default".into(),
            container_statuses: vec![ContainerStatus {
                id: "cid".into(),
                name: "app".into(),
                sandbox_id: "sb".into(),
                state: ContainerState::Running,
                created_at: None,
                started_at: None,
                finished_at: None,
                exit_code: 0,
                image: "busybox:latest".into(),
                image_ref: String::new(),
                image_id: String::new(),
                hash: 0,
                restart_count: 0,
                reason: String::new(),
                message: String::new(),
                termination_message_path: None,
                termination_grace_period: None,
                resources: None,
                user: None,
            }],
            ..Default::default()
        }),
        tokio::time::Instant::now(),
    );
    st.pod_cache = Some(cache);

    // Nothing collected yet: the scrape error is set.
    let (c, b) = get(&st, Endpoints::Secure, Method::GET, "/metrics/resource").await;
    assert_eq!(c, StatusCode::OK);
    assert!(b.ends_with("resource_scrape_error 1\n"), "{b}");

    let when = chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
    let cpu = Some(CpuStats {
        time: when,
        usage_nano_cores: None,
        usage_core_nano_seconds: Some(2_500_000_000),
    });
    let mut s = Summary::default();
    s.node.node_name = "node-a".into();
    s.pods.push(PodStats {
        pod_ref: PodReference {
            name: "web".into(),
            namespace: "default".into(),
            uid: "u1".into(),
        },
        containers: vec![crate::stats::ContainerStats {
            name: "app".into(),
            cpu: cpu.clone(),
            ..Default::default()
        }],
        cpu,
        ..Default::default()
    });
    stats_tx.send(Arc::new(s)).unwrap();
    let (c, b) = get(&st, Endpoints::ReadOnly, Method::GET, "/metrics/resource").await;
    assert_eq!(c, StatusCode::OK);
    assert!(
        b.contains("container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\",pod=\"web\"} 2.5 1700000000123\n"),
        "{b}"
    );
    assert!(b.ends_with("resource_scrape_error 0\n"), "{b}");
    let (c, b) = get(&st, Endpoints::Secure, Method::GET, "/metrics/cadvisor").await;
    assert_eq!(c, StatusCode::OK);
    assert!(
        b.contains("container_cpu_usage_seconds_total{container=\"app\",cpu=\"total\",id=\"/kubepods/besteffort/podu1/cid\",image=\"busybox:latest\",name=\"cid\",namespace=\"default\",pod=\"web\"} 2.5 1700000000123\n"),
        "{b}"
    );
    assert_eq!(
        get(&st, Endpoints::Secure, Method::PUT, "/metrics/cadvisor")
            .await
            .0,
        StatusCode::METHOD_NOT_ALLOWED
    );
}

/// A pod `ns/p` whose container `c` runs (status manager and fake runtime), so a routed
/// `/run/ns/p/c` reaches the runtime's ExecSync.
fn exec_fixture() -> (
    ServerState,
    watch::Sender<crate::types::PodsSnapshot>,
    Arc<rkubelet_cri::fake::FakeRuntime>,
) {
    let p = pod("ns", "p", "u1", &["c"]);
    let (mut st, tx) = state(vec![p.clone()]);
    st.status.set_pod_status(
        &p,
        PodStatus {
            container_statuses: Some(vec![ApiContainerStatus {
                name: "c".into(),
                container_id: Some("containerd://abc".into()),
                state: Some(ApiState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        },
    );
    let rt = Arc::new(rkubelet_cri::fake::FakeRuntime::new());
    st.runtime = Some(rt.clone());
    st.configz = Some(Arc::new(serde_json::json!({"port": 10250})));
    (st, tx, rt)
}

/// Spellings of debug endpoints that a prefix check on the raw path and a router that
/// strips or normalises segments would disagree on.
pub(crate) const HOSTILE: &[&str] = &[
    "//run/ns/p/c?cmd=id",
    "///run/ns/p/c?cmd=id",
    "/./run/ns/p/c?cmd=id",
    "/pods/../run/ns/p/c?cmd=id",
    "/healthz/../run/ns/p/c?cmd=id",
    "/%2frun/ns/p/c?cmd=id",
    "/%2Frun/ns/p/c?cmd=id",
    "/run%2fns%2fp%2fc?cmd=id",
    "/run%2Fns/p/c?cmd=id",
    "/r%75n/ns/p/c?cmd=id",
    "/run//ns/p/c?cmd=id",
    "/run/ns/p/c/?cmd=id",
    "/Run/ns/p/c?cmd=id",
    "/RUN/ns/p/c?cmd=id",
    "//configz",
    "/%63onfigz",
    "//containerLogs/ns/p/c",
    "//runningpods/",
    "//checkpoint/ns/p/c",
    "//exec/ns/p/c?command=id&output=1",
    "//logs/",
];

#[tokio::test]
async fn hostile_spellings_never_reach_a_handler() {
    let (mut st, _tx, rt) = exec_fixture();
    // Positive control: the canonical spelling does reach ExecSync on the secure port.
    let (code, _) = get(&st, Endpoints::Secure, Method::POST, "/run/ns/p/c?cmd=id").await;
    assert_ne!(code, StatusCode::NOT_FOUND);
    assert_eq!(rt.call_count("ExecSync"), 1, "control: {:?}", rt.calls());
    for ep in [Endpoints::ReadOnly, Endpoints::Healthz] {
        let (code, _) = get(&st, ep, Method::POST, "/run/ns/p/c?cmd=id").await;
        assert_eq!(code, StatusCode::NOT_FOUND, "{ep:?}");
    }
    for debugging in [false, true] {
        st.debugging_handlers = debugging;
        for path in HOSTILE {
            for method in [Method::POST, Method::GET] {
                for ep in [Endpoints::ReadOnly, Endpoints::Healthz, Endpoints::Secure] {
                    let (code, body) = get(&st, ep, method.clone(), path).await;
                    let allowed: &[StatusCode] = match ep {
                        // Unknown or malformed on the ports without debugging handlers.
                        Endpoints::ReadOnly | Endpoints::Healthz => {
                            &[StatusCode::NOT_FOUND, StatusCode::BAD_REQUEST]
                        }
                        // Malformed (400), unknown (`/Run`: 404), a debug root with the
                        // handlers off (405) or a wrong shape (404/405).
                        Endpoints::Secure => &[
                            StatusCode::BAD_REQUEST,
                            StatusCode::NOT_FOUND,
                            StatusCode::METHOD_NOT_ALLOWED,
                        ],
                    };
                    assert!(
                        allowed.contains(&code),
                        "{method} {path} on {ep:?} (debugging {debugging}): {code} {body}"
                    );
                    assert!(!body.contains("kubeletconfig"), "{path}: {body}");
                }
            }
        }
    }
    assert_eq!(rt.call_count("ExecSync"), 1, "{:?}", rt.calls());
    assert_eq!(rt.call_count("Exec"), 0);
    assert_eq!(rt.call_count("CheckpointContainer"), 0);
    assert_eq!(rt.call_count("ContainerStatus"), 0);
    // With debugging handlers on the secure port refuses them as malformed, not routed.
    st.debugging_handlers = true;
    for path in [
        "//run/ns/p/c?cmd=id",
        "/./run/ns/p/c",
        "/%2frun/ns/p/c",
        "//configz",
    ] {
        assert_eq!(
            get(&st, Endpoints::Secure, Method::POST, path).await,
            (StatusCode::BAD_REQUEST, "invalid URL path\n".into()),
            "{path}"
        );
    }
    assert_eq!(
        get(&st, Endpoints::Secure, Method::POST, "/Run/ns/p/c")
            .await
            .0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn each_port_serves_only_its_endpoints() {
    let (mut st, _tx, _rt) = exec_fixture();
    st.metrics = Some(crate::metrics::KubeletMetrics::new("n"));
    let ok = |c: StatusCode| c == StatusCode::OK;
    // Healthz port: health only.
    assert!(ok(get(&st, Endpoints::Healthz, Method::GET, "/healthz")
        .await
        .0));
    assert!(ok(get(
        &st,
        Endpoints::Healthz,
        Method::GET,
        "/healthz/ping"
    )
    .await
    .0));
    for path in [
        "/pods",
        "/metrics",
        "/stats/summary",
        "/configz",
        "/runningpods/",
    ] {
        assert_eq!(
            get(&st, Endpoints::Healthz, Method::GET, path).await.0,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    // Read-only port: health, pods, stats and metrics, reads only.
    for path in ["/healthz", "/pods", "/pods/", "/metrics"] {
        assert!(
            ok(get(&st, Endpoints::ReadOnly, Method::GET, path).await.0),
            "{path}"
        );
        assert!(
            ok(get(&st, Endpoints::ReadOnly, Method::HEAD, path).await.0),
            "{path}"
        );
        assert_eq!(
            get(&st, Endpoints::ReadOnly, Method::POST, path).await.0,
            StatusCode::METHOD_NOT_ALLOWED,
            "{path}"
        );
    }
    for path in [
        "/configz",
        "/runningpods/",
        "/containerLogs/ns/p/c",
        "/logs/",
        "/run/ns/p/c",
        "/exec/ns/p/c",
        "/attach/ns/p/c",
        "/portForward/ns/p",
        "/checkpoint/ns/p/c",
        "/debug/pprof/",
        "/spec/",
    ] {
        for m in [Method::GET, Method::POST] {
            assert_eq!(
                get(&st, Endpoints::ReadOnly, m.clone(), path).await,
                (StatusCode::NOT_FOUND, "404 page not found\n".into()),
                "{m} {path}"
            );
        }
    }
    // The metrics path label is the route's, never the raw path (40 here plus `GET /spec/`).
    let metrics = st.metrics.clone().unwrap();
    for i in 0..20 {
        get(&st, Endpoints::ReadOnly, Method::GET, &format!("/x{i}")).await;
        get(&st, Endpoints::ReadOnly, Method::GET, &format!("//pods{i}")).await;
    }
    let text = metrics.render();
    assert!(!text.contains("path=\"x1"), "{text}");
    assert!(
        text.contains(
            "kubelet_http_requests_total{long_running=\"false\",method=\"GET\",path=\"other\",server_type=\"readonly\"} 41"
        ),
        "{text}"
    );
}

/// A fake runtime with one running container; returns it and the container's id.
async fn one_running_container() -> (Arc<rkubelet_cri::fake::FakeRuntime>, String) {
    use rkubelet_cri::RuntimeService;
    let rt = Arc::new(rkubelet_cri::fake::FakeRuntime::with_images(&["busybox"]));
    let sandbox = rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: "p".into(),
                    uid: "u1".into(),
                    namespace: "ns".into(),
                    attempt: 0,
                }),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let id = rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: sandbox,
            config: Some(api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "c".into(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: "busybox".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sandbox_config: None,
        })
        .await
        .unwrap()
        .container_id;
    rt.start_container(api::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    (rt, id)
}

#[test]
fn a_log_reader_asking_after_the_runtime_shut_down_gets_not_running_not_a_panic() {
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (cri, id) = tokio_rt.block_on(one_running_container());
    let (mut running, mut missing) = tokio_rt.block_on(async {
        (
            container_running(cri.clone(), id.clone()),
            container_running(cri.clone(), "nope".into()),
        )
    });
    // Asked from the log reader's own thread while the runtime runs: the real answer.
    let (mut running, mut missing) = std::thread::spawn(move || {
        assert!(running(), "the container runs");
        assert!(!missing(), "an unknown container does not");
        (running, missing)
    })
    .join()
    .unwrap();
    // A CRI call that waits (as a real one does on its socket) needs the runtime's drivers.
    cri.set_latency("ContainerStatus", std::time::Duration::from_millis(20));
    drop(tokio_rt);
    // After the runtime shut down (kubelet stopping): "not running", so the reader ends.
    let answers = std::thread::spawn(move || (running(), missing()))
        .join()
        .expect("the log reader's thread does not panic");
    assert_eq!(answers, (false, false));
}

/// GET `uri` on the read-only port with these `Accept-Encoding` values; the status, the
/// `Content-Encoding` and `Vary` headers and the raw body.
async fn get_encoded(
    st: &ServerState,
    uri: &str,
    accept: &[&str],
) -> (StatusCode, Option<String>, Option<String>, Vec<u8>) {
    let mut req = Request::builder().method(Method::GET).uri(uri);
    for a in accept {
        req = req.header(http::header::ACCEPT_ENCODING, *a);
    }
    let resp = route(st, Endpoints::ReadOnly, &req.body(()).unwrap()).await;
    let header = |name| {
        resp.headers()
            .get(name)
            .map(|v: &http::HeaderValue| v.to_str().unwrap().to_owned())
    };
    let (enc, vary) = (
        header(http::header::CONTENT_ENCODING),
        header(http::header::VARY),
    );
    let code = resp.status();
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    (code, enc, vary, b.to_vec())
}

fn gunzip(b: &[u8]) -> String {
    use std::io::Read;
    let mut out = String::new();
    flate2::read::GzDecoder::new(b)
        .read_to_string(&mut out)
        .unwrap();
    out
}

#[tokio::test]
async fn metrics_endpoints_gzip_when_the_client_accepts_it() {
    use crate::stats::{StatsHandle, Summary};
    let (mut st, _tx) = state(vec![pod("default", "web", "u1", &["app"])]);
    st.metrics = Some(crate::metrics::KubeletMetrics::new("node-a"));
    st.probe_metrics = Some(crate::prober::metrics::ProbeMetrics::default());
    let mut summary = Summary::default();
    summary.node.node_name = "node-a".into();
    let (_stats_tx, stats_rx) = watch::channel(Arc::new(summary));
    st.stats = Some(StatsHandle::injected(stats_rx));
    let expect = [
        ("/metrics", "kubelet_node_name{node=\"node-a\"} 1"),
        ("/metrics/probes", "prober_probe_total"),
        ("/metrics/resource", "resource_scrape_error 0"),
        ("/metrics/cadvisor", "container_scrape_error 0"),
    ];
    for (path, line) in expect {
        // Identity without the header.
        let (c, enc, vary, plain) = get_encoded(&st, path, &[]).await;
        assert_eq!(c, StatusCode::OK, "{path}");
        assert_eq!(enc, None, "{path}");
        assert_eq!(vary.as_deref(), Some("Accept-Encoding"), "{path}");
        let plain = String::from_utf8(plain).unwrap();
        assert!(plain.contains(line), "{path}: {plain}");
        // gzip as Prometheus asks for it, and as curl --compressed does.
        for accept in ["gzip", "deflate, gzip, br, zstd"] {
            let (c, enc, vary, z) = get_encoded(&st, path, &[accept]).await;
            assert_eq!(c, StatusCode::OK, "{path}");
            assert_eq!(enc.as_deref(), Some("gzip"), "{path} {accept}");
            assert_eq!(vary.as_deref(), Some("Accept-Encoding"), "{path}");
            let text = gunzip(&z);
            assert!(text.contains(line), "{path}: {text}");
            assert!(text.starts_with("# HELP "), "{path}: {text}");
        }
    }
}

#[tokio::test]
async fn metrics_encoding_attacks_fall_back_to_identity() {
    let (mut st, _tx) = state(Vec::new());
    st.metrics = Some(crate::metrics::KubeletMetrics::new("node-a"));
    let long = "br;q=0.5, ".repeat(2_000);
    for accept in [
        "gzip;q=0",
        "*;q=0",
        "identity",
        "gzip;q=2",
        "gzip;q=NaN",
        "gzip;q=",
        "gzip;;;q",
        "gzipgzip",
        ",,,,",
        "",
        "identity;q=1, gzip;q=0.1",
        long.as_str(),
    ] {
        let (c, enc, _, body) = get_encoded(&st, "/metrics", &[accept]).await;
        assert_eq!(c, StatusCode::OK, "{accept}");
        assert_eq!(enc, None, "{accept:.40}");
        let body = String::from_utf8(body).expect("identity body is plain text");
        assert!(
            body.contains("kubelet_node_name{node=\"node-a\"} 1"),
            "{accept:.40}"
        );
    }
    // Other endpoints do not change coding: JSON stays identity even when gzip is accepted.
    let (c, enc, _, _) = get_encoded(&st, "/pods", &["gzip"]).await;
    assert_eq!(c, StatusCode::OK);
    assert_eq!(enc, None);
}

#[test]
fn a_huge_since_seconds_means_from_the_beginning_not_a_panic() {
    let q = |v: &str| HashMap::from([("sinceSeconds".to_owned(), v.to_owned())]);
    // Past chrono's `Duration` range (i64::MAX ms) and past its date range: no lower bound.
    for v in [
        i64::MAX.to_string(),
        (i64::MAX / 1000 + 1).to_string(),
        "10000000000000".to_owned(),
    ] {
        let opts = log_options(&q(&v)).unwrap_or_else(|e| panic!("sinceSeconds={v}: {e:?}"));
        assert_eq!(opts.since, None, "sinceSeconds={v}");
    }
    // Beyond int64, as upstream's query decoding: a 400, never a panic.
    for v in [u64::MAX.to_string(), "99999999999999999999999".to_owned()] {
        assert_eq!(
            log_options(&q(&v)).map(|_| ()).unwrap_err().0,
            StatusCode::BAD_REQUEST,
            "sinceSeconds={v}"
        );
    }
    // At or below zero is invalid, as the API validates (>= 1).
    for v in ["0", "-1", &i64::MIN.to_string()] {
        assert_eq!(
            log_options(&q(v)).map(|_| ()).unwrap_err().0,
            StatusCode::UNPROCESSABLE_ENTITY,
            "sinceSeconds={v}"
        );
    }
    // An ordinary value still bounds the log.
    let since = log_options(&q("60")).unwrap().since.unwrap();
    let ago = chrono::Utc::now() - since;
    assert!((59..=61).contains(&ago.num_seconds()), "{ago}");
}
