use super::*;

fn c(ns: &str, pod: &str, uid: Option<&str>, container: &str) -> ContainerRef {
    ContainerRef {
        namespace: ns.into(),
        pod: pod.into(),
        uid: uid.map(Into::into),
        container: container.into(),
    }
}

#[test]
fn endpoints_parse_into_their_routes() {
    let cases: Vec<(&str, Route)> = vec![
        ("/healthz", Route::Healthz { check: None }),
        (
            "/healthz/syncloop",
            Route::Healthz {
                check: Some("syncloop".into()),
            },
        ),
        ("/pods", Route::Pods),
        ("/pods/", Route::Pods),
        ("/runningpods/", Route::RunningPods),
        ("/runningpods", Route::RunningPods),
        ("/stats/summary", Route::StatsSummary),
        ("/metrics", Route::Metrics(MetricsKind::Kubelet)),
        ("/metrics/probes", Route::Metrics(MetricsKind::Probes)),
        ("/metrics/resource", Route::Metrics(MetricsKind::Resource)),
        ("/metrics/cadvisor", Route::Metrics(MetricsKind::Cadvisor)),
        ("/configz", Route::Configz),
        (
            "/containerLogs/ns/p/c",
            Route::ContainerLogs(c("ns", "p", None, "c")),
        ),
        ("/logs", Route::SystemLogs { rest: "".into() }),
        ("/logs/", Route::SystemLogs { rest: "/".into() }),
        (
            "/logs/sub/a%20b.log",
            Route::SystemLogs {
                rest: "/sub/a%20b.log".into(),
            },
        ),
        ("/run/ns/p/c", Route::Run(c("ns", "p", None, "c"))),
        ("/run/ns/p/u/c", Route::Run(c("ns", "p", Some("u"), "c"))),
        (
            "/checkpoint/ns/p/c",
            Route::Checkpoint(c("ns", "p", None, "c")),
        ),
        (
            "/exec/ns/p/c",
            Route::Stream(StreamKind::Exec, c("ns", "p", None, "c")),
        ),
        (
            "/attach/ns/p/u/c",
            Route::Stream(StreamKind::Attach, c("ns", "p", Some("u"), "c")),
        ),
        (
            "/portForward/ns/p",
            Route::Stream(StreamKind::PortForward, c("ns", "p", None, "")),
        ),
        (
            "/portForward/ns/p/u",
            Route::Stream(StreamKind::PortForward, c("ns", "p", Some("u"), "")),
        ),
        // Parameters are decoded.
        ("/run/n%73/p/c", Route::Run(c("ns", "p", None, "c"))),
    ];
    for (path, want) in cases {
        assert_eq!(parse(path), want, "{path}");
    }
}

#[test]
fn unknown_shapes_keep_their_root() {
    let cases: &[(&str, Root)] = &[
        ("/", Root::Other),
        ("/nope", Root::Other),
        ("/Run/ns/p/c", Root::Other),
        ("/RUN/ns/p/c", Root::Other),
        ("/Pods", Root::Other),
        ("/podsx", Root::Other),
        ("/healthz/", Root::Healthz),
        ("/healthz/a/b", Root::Healthz),
        ("/pods/x", Root::Pods),
        ("/stats", Root::Stats),
        ("/stats/summary/", Root::Stats),
        ("/stats/container", Root::Stats),
        ("/metrics/", Root::Metrics),
        ("/metrics/x", Root::Metrics),
        ("/configz/", Root::Configz),
        ("/containerLogs/ns/p", Root::ContainerLogs),
        ("/containerLogs/ns/p/c/", Root::ContainerLogs),
        ("/run/ns/p", Root::Run),
        ("/run/ns/p/c/", Root::Run),
        ("/run/a/b/c/d/e", Root::Run),
        ("/checkpoint/ns/p/u/c", Root::Checkpoint),
        ("/exec/ns/p", Root::Exec),
        ("/portForward/ns", Root::PortForward),
        ("/spec/", Root::Spec),
        ("/debug/pprof/", Root::Debug),
    ];
    for (path, root) in cases {
        assert_eq!(parse(path), Route::Unknown(*root), "{path}");
    }
}

#[test]
fn hostile_spellings_are_malformed() {
    for path in [
        "//run/ns/p/c",
        "//configz",
        "//containerLogs/ns/p/c",
        "//pods",
        "//healthz",
        "///run/ns/p/c",
        "/run//ns/p/c",
        "/run/ns//p/c",
        "/pods//",
        "/./run/ns/p/c",
        "/run/./ns/p/c",
        "/pods/../run/ns/p/c",
        "/healthz/../run/ns/p/c",
        "/run/ns/p/..",
        "/%2frun/ns/p/c",
        "/%2Frun/ns/p/c",
        "/run%2fns/p/c",
        "/run%2Fns%2Fp%2Fc",
        "/run/ns%2fp/c/d",
        "/r%75n/ns/p/c",
        "/%72un/ns/p/c",
        "/%2e/run/ns/p/c",
        "/%2e%2e/run/ns/p/c",
        "/run/%2e%2e/p/c",
        "/run/ns/p/%2E",
        "/stats/%73ummary",
        "/metrics/%63advisor",
        "/run/ns/p/c%00",
        "/run/ns/p/c%C2%9B",
        "/containerLogs/ns/p%C2%85/c",
        "/run/ns/p/c%0a",
        "/run/ns/p/c%5c",
        "/run/ns/p/c%",
        "/run/ns/p/c%zz",
        "/run/ns/p/c%ff",
        "/logs/../etc/passwd",
        "/logs/%2e%2e/secret",
        "/logs/a%2fb",
        "/logs//etc",
        "run/ns/p/c",
        "*",
        "",
    ] {
        assert_eq!(parse(path), Route::Malformed, "{path:?}");
    }
}

#[test]
fn attributes_follow_upstream_subresources() {
    let cases: &[(&str, &[&str])] = &[
        ("/stats/summary", &["stats"]),
        ("/stats", &["stats"]),
        ("/statsz", &["proxy"]),
        ("/metrics", &["metrics"]),
        ("/metrics/cadvisor", &["metrics"]),
        ("/metrics/whatever", &["metrics"]),
        ("/logs/", &["log"]),
        ("/logs/syslog", &["log"]),
        ("/spec/", &["spec"]),
        ("/checkpoint/ns/p/c", &["checkpoint"]),
        ("/pods", &["pods", "proxy"]),
        ("/runningpods/", &["pods", "proxy"]),
        ("/healthz", &["healthz", "proxy"]),
        ("/healthz/ping", &["healthz", "proxy"]),
        ("/configz", &["configz", "proxy"]),
        ("/run/ns/p/c", &["proxy"]),
        ("/exec/ns/p/c", &["proxy"]),
        ("/containerLogs/ns/p/c", &["proxy"]),
        ("/nope", &["proxy"]),
        ("//stats/summary", &["proxy"]),
    ];
    for (path, subs) in cases {
        assert_eq!(parse(path).root().subresources(), *subs, "{path}");
    }
}

#[test]
fn metrics_labels_are_a_fixed_set() {
    let cases: &[(&str, &str)] = &[
        ("/pods", "pods"),
        ("/pods/", "pods"),
        ("/stats/summary", "stats"),
        ("/metrics", "metrics"),
        ("/metrics/cadvisor", "metrics/cadvisor"),
        ("/metrics/x1", "other"),
        ("/containerLogs/ns/p/c", "containerLogs"),
        ("/portForward/ns/p", "portForward"),
        ("/random-1234", "other"),
        ("/random-5678/x", "other"),
        ("//run/x", "other"),
    ];
    for (path, label) in cases {
        assert_eq!(parse(path).metrics_label(), *label, "{path}");
    }
}

#[test]
fn debug_roots() {
    for p in [
        "/run/ns/p/c",
        "/exec/ns/p/c",
        "/attach/ns/p/c",
        "/portForward/ns/p",
        "/containerLogs/ns/p/c",
        "/logs/",
        "/configz",
        "/runningpods/",
        "/checkpoint/ns/p/c",
        "/debug/pprof/",
        "/run/only-two/segs",
    ] {
        assert!(parse(p).root().is_debug(), "{p}");
    }
    for p in [
        "/pods",
        "/healthz",
        "/stats/summary",
        "/metrics",
        "/x",
        "//run/ns/p/c",
    ] {
        assert!(!parse(p).root().is_debug(), "{p}");
    }
}

#[test]
fn operator_views_live_under_debug_rkubelet() {
    assert_eq!(
        parse("/debug/rkubelet/events"),
        Route::Operator(OperatorView::Events)
    );
    assert_eq!(
        parse("/debug/rkubelet/node"),
        Route::Operator(OperatorView::Node)
    );
    assert_eq!(
        parse("/debug/rkubelet/pods/kube-system/etcd-n%31"),
        Route::Operator(OperatorView::Pod {
            namespace: "kube-system".into(),
            name: "etcd-n1".into()
        })
    );
    let r = parse("/debug/rkubelet/events");
    assert!(r.root().is_debug());
    // Authorized as upstream's debug paths: nodes/proxy.
    assert_eq!(r.root().subresources(), &["proxy"]);
    for p in [
        "/debug/rkubelet/events/",
        "/debug/rkubelet/pods/ns",
        "/debug/rkubelet/pods/ns/p/x",
        "/debug/rkubelet",
        "/debug/r%6Bubelet/events",
        "/debug/rkubelet/%65vents",
    ] {
        assert_eq!(parse(p), Route::Unknown(Root::Debug), "{p}");
    }
    assert_eq!(parse("/debug/rkubelet/pods/ns/..%2f"), Route::Malformed);
}
