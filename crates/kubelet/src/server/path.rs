//! The kubelet API's request paths, parsed once into a typed [`Route`]. Owns nothing; receives
//! the raw request path; emits the route that authentication, the authorization attributes,
//! the per-port endpoint and debug-handler gates, the request metrics and the dispatcher all
//! read. No other code looks at the raw path.
//!
//! Hostile spellings are refused here, before anything else sees them: empty segments (`//`,
//! except the single trailing `/` a few endpoints accept), `.` and `..` segments (raw or
//! percent-encoded), percent-encoding that decodes to `/`, `\`, NUL or another control byte,
//! malformed escapes, non-UTF-8, and any `%` in a segment that selects the endpoint (`/r%75n`
//! is not `/run`). Such a path is [`Route::Malformed`] (400) and is never routed. Names are
//! matched case-sensitively (`/Run` is unknown, 404).

/// The first path segment: which part of the API a path belongs to (also for unknown
/// shapes, so authorization and metrics still group them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    Healthz,
    Pods,
    RunningPods,
    Stats,
    Metrics,
    Spec,
    Configz,
    ContainerLogs,
    Logs,
    Run,
    Exec,
    Attach,
    PortForward,
    Checkpoint,
    Debug,
    /// Anything else (including `/`).
    Other,
}

impl Root {
    fn of(seg: &str) -> Root {
        match seg {
            "healthz" => Root::Healthz,
            "pods" => Root::Pods,
            "runningpods" => Root::RunningPods,
            "stats" => Root::Stats,
            "metrics" => Root::Metrics,
            "spec" => Root::Spec,
            "configz" => Root::Configz,
            "containerLogs" => Root::ContainerLogs,
            "logs" => Root::Logs,
            "run" => Root::Run,
            "exec" => Root::Exec,
            "attach" => Root::Attach,
            "portForward" => Root::PortForward,
            "checkpoint" => Root::Checkpoint,
            "debug" => Root::Debug,
            _ => Root::Other,
        }
    }

    /// The upstream spelling of the first segment (`other` for unknown ones).
    pub fn name(self) -> &'static str {
        match self {
            Root::Healthz => "healthz",
            Root::Pods => "pods",
            Root::RunningPods => "runningpods",
            Root::Stats => "stats",
            Root::Metrics => "metrics",
            Root::Spec => "spec",
            Root::Configz => "configz",
            Root::ContainerLogs => "containerLogs",
            Root::Logs => "logs",
            Root::Run => "run",
            Root::Exec => "exec",
            Root::Attach => "attach",
            Root::PortForward => "portForward",
            Root::Checkpoint => "checkpoint",
            Root::Debug => "debug",
            Root::Other => "other",
        }
    }

    /// Served only with `enableDebuggingHandlers` (upstream `InstallDebuggingHandlers`).
    pub fn is_debug(self) -> bool {
        matches!(
            self,
            Root::Run
                | Root::Exec
                | Root::Attach
                | Root::PortForward
                | Root::ContainerLogs
                | Root::Logs
                | Root::Configz
                | Root::RunningPods
                | Root::Checkpoint
                | Root::Debug
        )
    }

    /// The `nodes` subresources a request must be allowed (any one is enough, checked in
    /// order): upstream `GetRequestAttributes` with fine-grained kubelet authorization.
    pub fn subresources(self) -> &'static [&'static str] {
        match self {
            Root::Stats => &["stats"],
            Root::Metrics => &["metrics"],
            Root::Logs => &["log"],
            Root::Spec => &["spec"],
            Root::Checkpoint => &["checkpoint"],
            Root::Pods | Root::RunningPods => &["pods", "proxy"],
            Root::Healthz => &["healthz", "proxy"],
            Root::Configz => &["configz", "proxy"],
            _ => &["proxy"],
        }
    }
}

/// `/metrics…` endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsKind {
    /// `/metrics`: kubelet and process series.
    Kubelet,
    Probes,
    Resource,
    Cadvisor,
}

/// Streaming endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Exec,
    Attach,
    PortForward,
}

/// A container addressed by a path (`{ns}/{pod}[/{uid}]/{container}`), decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRef {
    pub namespace: String,
    pub pod: String,
    pub uid: Option<String>,
    pub container: String,
}

/// rkubelet's operator views under `/debug/rkubelet/` (a namespace upstream's kubelet does
/// not use), read by `rkubelet get/describe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorView {
    /// `/debug/rkubelet/events`: the ring of recent pod and node events.
    Events,
    /// `/debug/rkubelet/node`: capacity, conditions, runtime, PLEG, certificates.
    Node,
    /// `/debug/rkubelet/pods/{ns}/{name}`: the pod, its worker's step and last error, its
    /// events.
    Pod { namespace: String, name: String },
}

/// A parsed request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/healthz`, `/healthz/{check}`.
    Healthz {
        check: Option<String>,
    },
    /// `/pods`, `/pods/`.
    Pods,
    /// `/runningpods/` (and `/runningpods`).
    RunningPods,
    /// `/stats/summary`.
    StatsSummary,
    Metrics(MetricsKind),
    Configz,
    /// `/containerLogs/{ns}/{pod}/{container}`.
    ContainerLogs(ContainerRef),
    /// `/logs…`: `rest` is the validated remainder after `/logs` as sent (`""`, `"/"`,
    /// `"/dir/file"`, `"/dir/"`), still percent-encoded.
    SystemLogs {
        rest: String,
    },
    /// `/run/{ns}/{pod}[/{uid}]/{container}`.
    Run(ContainerRef),
    /// `/checkpoint/{ns}/{pod}/{container}`.
    Checkpoint(ContainerRef),
    /// `/exec|attach/{ns}/{pod}[/{uid}]/{container}`, `/portForward/{ns}/{pod}[/{uid}]`
    /// (port-forward has an empty `container`).
    Stream(StreamKind, ContainerRef),
    /// `/debug/rkubelet/…`.
    Operator(OperatorView),
    /// A well-formed path that names no endpoint (404, or 405 for a debug root with debugging
    /// handlers off).
    Unknown(Root),
    /// A refused spelling (400); never routed.
    Malformed,
}

impl Route {
    /// The first segment the route belongs to (`Other` for malformed paths).
    pub fn root(&self) -> Root {
        match self {
            Route::Healthz { .. } => Root::Healthz,
            Route::Pods => Root::Pods,
            Route::RunningPods => Root::RunningPods,
            Route::StatsSummary => Root::Stats,
            Route::Metrics(_) => Root::Metrics,
            Route::Configz => Root::Configz,
            Route::ContainerLogs(_) => Root::ContainerLogs,
            Route::SystemLogs { .. } => Root::Logs,
            Route::Run(_) => Root::Run,
            Route::Checkpoint(_) => Root::Checkpoint,
            Route::Stream(StreamKind::Exec, _) => Root::Exec,
            Route::Stream(StreamKind::Attach, _) => Root::Attach,
            Route::Stream(StreamKind::PortForward, _) => Root::PortForward,
            Route::Operator(_) => Root::Debug,
            Route::Unknown(r) => *r,
            Route::Malformed => Root::Other,
        }
    }

    /// The `path` label of `kubelet_http_requests_*` (upstream `getURLRootPath`: the first
    /// segment, `metrics/<second>` under `/metrics`), from a fixed set so a client cannot
    /// create series.
    pub fn metrics_label(&self) -> &'static str {
        match self {
            Route::Metrics(MetricsKind::Kubelet) => "metrics",
            Route::Metrics(MetricsKind::Probes) => "metrics/probes",
            Route::Metrics(MetricsKind::Resource) => "metrics/resource",
            Route::Metrics(MetricsKind::Cadvisor) => "metrics/cadvisor",
            Route::Unknown(Root::Metrics) => "other",
            other => other.root().name(),
        }
    }
}

/// Percent-decodes one segment; `None` for a malformed escape, non-UTF-8, or a decoded `/`,
/// `\`, NUL or control character (C0 and C1).
fn decode_segment(raw: &str) -> Option<String> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let v = std::str::from_utf8(hex)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())?;
            i += 3;
            v
        } else {
            i += 1;
            b[i - 1]
        };
        if c == b'/' || c == b'\\' || c < 0x20 || c == 0x7f {
            return None;
        }
        out.push(c);
    }
    // C1 controls (U+0080–U+009F, e.g. CSI) start terminal escape sequences as well.
    String::from_utf8(out)
        .ok()
        .filter(|s| !s.chars().any(char::is_control))
}

/// Parses a request path (the URI path, without the query).
pub fn parse(path: &str) -> Route {
    let Some(body) = path.strip_prefix('/') else {
        return Route::Malformed;
    };
    if body.is_empty() {
        return Route::Unknown(Root::Other);
    }
    let (body, trailing) = match body.strip_suffix('/') {
        Some(b) => (b, true),
        None => (body, false),
    };
    let raw: Vec<&str> = body.split('/').collect();
    let mut segs = Vec::with_capacity(raw.len());
    for r in &raw {
        if r.is_empty() {
            return Route::Malformed;
        }
        let Some(d) = decode_segment(r) else {
            return Route::Malformed;
        };
        if d == "." || d == ".." {
            return Route::Malformed;
        }
        segs.push(d);
    }
    // Segments that select the endpoint must be sent literally.
    let literal = |i: usize| raw.get(i).is_some_and(|r| !r.contains('%'));
    if !literal(0) {
        return Route::Malformed;
    }
    let root = Root::of(&segs[0]);
    let args: Vec<&str> = segs[1..].iter().map(String::as_str).collect();
    let cref = |ns: &str, pod: &str, uid: Option<&str>, c: &str| ContainerRef {
        namespace: ns.to_owned(),
        pod: pod.to_owned(),
        uid: uid.map(str::to_owned),
        container: c.to_owned(),
    };
    let unknown = Route::Unknown(root);
    match root {
        Root::Healthz => match (args.as_slice(), trailing) {
            ([], false) => Route::Healthz { check: None },
            ([c], false) => Route::Healthz {
                check: Some((*c).to_owned()),
            },
            _ => unknown,
        },
        Root::Pods => match args.as_slice() {
            [] => Route::Pods,
            _ => unknown,
        },
        Root::RunningPods => match args.as_slice() {
            [] => Route::RunningPods,
            _ => unknown,
        },
        Root::Stats => match (args.as_slice(), trailing) {
            (["summary"], false) if literal(1) => Route::StatsSummary,
            ([_], false) if !literal(1) => Route::Malformed,
            _ => unknown,
        },
        Root::Metrics => {
            if args.len() == 1 && !literal(1) {
                return Route::Malformed;
            }
            match (args.as_slice(), trailing) {
                ([], false) => Route::Metrics(MetricsKind::Kubelet),
                (["probes"], false) => Route::Metrics(MetricsKind::Probes),
                (["resource"], false) => Route::Metrics(MetricsKind::Resource),
                (["cadvisor"], false) => Route::Metrics(MetricsKind::Cadvisor),
                _ => unknown,
            }
        }
        Root::Configz => match (args.as_slice(), trailing) {
            ([], false) => Route::Configz,
            _ => unknown,
        },
        Root::ContainerLogs => match (args.as_slice(), trailing) {
            ([ns, pod, c], false) => Route::ContainerLogs(cref(ns, pod, None, c)),
            _ => unknown,
        },
        Root::Logs => {
            let rest = &path["/logs".len()..];
            Route::SystemLogs {
                rest: rest.to_owned(),
            }
        }
        Root::Run => match (args.as_slice(), trailing) {
            ([ns, pod, c], false) => Route::Run(cref(ns, pod, None, c)),
            ([ns, pod, uid, c], false) => Route::Run(cref(ns, pod, Some(uid), c)),
            _ => unknown,
        },
        Root::Checkpoint => match (args.as_slice(), trailing) {
            ([ns, pod, c], false) => Route::Checkpoint(cref(ns, pod, None, c)),
            _ => unknown,
        },
        Root::Exec | Root::Attach => {
            let kind = if root == Root::Exec {
                StreamKind::Exec
            } else {
                StreamKind::Attach
            };
            match (args.as_slice(), trailing) {
                ([ns, pod, c], false) => Route::Stream(kind, cref(ns, pod, None, c)),
                ([ns, pod, uid, c], false) => Route::Stream(kind, cref(ns, pod, Some(uid), c)),
                _ => unknown,
            }
        }
        Root::PortForward => match (args.as_slice(), trailing) {
            ([ns, pod], false) => Route::Stream(StreamKind::PortForward, cref(ns, pod, None, "")),
            ([ns, pod, uid], false) => {
                Route::Stream(StreamKind::PortForward, cref(ns, pod, Some(uid), ""))
            }
            _ => unknown,
        },
        Root::Debug if literal(1) && literal(2) => match (args.as_slice(), trailing) {
            (["rkubelet", "events"], false) => Route::Operator(OperatorView::Events),
            (["rkubelet", "node"], false) => Route::Operator(OperatorView::Node),
            (["rkubelet", "pods", ns, name], false) => Route::Operator(OperatorView::Pod {
                namespace: (*ns).to_owned(),
                name: (*name).to_owned(),
            }),
            _ => unknown,
        },
        Root::Spec | Root::Debug | Root::Other => unknown,
    }
}

#[cfg(test)]
#[path = "path_tests.rs"]
mod tests;
