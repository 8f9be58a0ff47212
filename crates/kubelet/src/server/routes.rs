//! Endpoint handlers of the kubelet's HTTP(S) ports. Own nothing; receive a request plus the
//! server state (desired pods, statuses, runtime pod cache, CRI runtime, effective config,
//! metrics, the latest stats snapshot); emit upstream-shaped responses: `/pods`,
//! `/runningpods/`, `/healthz*`, `/configz`, `/containerLogs/…`, `/logs/…`, `/run/…`,
//! `/checkpoint/…`, `/stats/summary`, `/metrics`, `/metrics/{probes,resource,cadvisor}`, and
//! hand `/exec/…`, `/attach/…`, `/portForward/…` to `streaming`. Dispatch reads only the
//! route parsed by `path` (malformed paths are 400, unknown ones 404); which routes a port
//! serves at all is decided here (`serves`), before the method and the debug-handler gate.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rkubelet_cri::{CriError, api};
use tracing::warn;

use super::logs::LogOptions;
use super::path::{MetricsKind, Root, Route, StreamKind, parse};
use super::query::{pct_decode, query_pairs};
use super::{Endpoints, Resp, ServerState, json, not_found, text};
use crate::types::PodExt;

/// Parses the request path once and dispatches it (the plain-HTTP ports and tests).
pub async fn route<B>(state: &ServerState, endpoints: Endpoints, req: &Request<B>) -> Resp {
    let parsed = parse(req.uri().path());
    dispatch(state, endpoints, &parsed, req).await
}

/// Dispatches `req` by its parsed `route` (already authenticated and authorized on the
/// secure port); records the request metrics under the route's fixed label.
pub async fn dispatch<B>(
    state: &ServerState,
    endpoints: Endpoints,
    route: &Route,
    req: &Request<B>,
) -> Resp {
    // Upstream instruments the read-only and the authenticated server, not healthz.
    let server_type = match endpoints {
        Endpoints::Healthz => return route_request(state, endpoints, route, req).await,
        Endpoints::ReadOnly => "readonly",
        Endpoints::Secure => "readwrite",
    };
    let _guard = state.metrics.as_ref().map(|m| {
        m.http_request_started(
            req.method().as_str(),
            &format!("/{}", route.metrics_label()),
            server_type,
        )
    });
    route_request(state, endpoints, route, req).await
}

/// Whether `endpoints` serves `route` at all (anything else is 404 there, whatever the
/// method): the healthz port only health (CVE-2019-11248), the read-only port only what
/// upstream's read-only server has (no debugging handlers), the secure port everything.
pub fn serves(endpoints: Endpoints, route: &Route) -> bool {
    match endpoints {
        Endpoints::Healthz => matches!(route, Route::Healthz { .. }),
        Endpoints::ReadOnly => matches!(
            route,
            Route::Healthz { .. } | Route::Pods | Route::StatsSummary | Route::Metrics(_)
        ),
        Endpoints::Secure => true,
    }
}

fn get_or_head(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

async fn route_request<B>(
    state: &ServerState,
    endpoints: Endpoints,
    route: &Route,
    req: &Request<B>,
) -> Resp {
    if *route == Route::Malformed {
        return text(StatusCode::BAD_REQUEST, "invalid URL path\n".into());
    }
    if !serves(endpoints, route) {
        return not_found();
    }
    let method = req.method();
    if route.root().is_debug() && !state.debugging_handlers {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "Debug endpoints are disabled.\n".into(),
        );
    }
    // The read-only port answers reads only.
    if endpoints == Endpoints::ReadOnly && !get_or_head(method) {
        return method_not_allowed();
    }
    let query = || parse_query(req.uri().query());
    match route {
        Route::Healthz { check } if get_or_head(method) => super::healthz(
            state,
            check.as_deref(),
            req.uri().query().unwrap_or_default(),
        ),
        Route::Pods if get_or_head(method) => json(StatusCode::OK, &super::pod_list(state)),
        Route::Metrics(kind) if get_or_head(method) => {
            metrics_endpoint(state, *kind, req.headers())
        }
        Route::StatsSummary if method == Method::GET => stats_summary(state, &query()),
        Route::RunningPods if method == Method::GET => running_pods(state),
        Route::Configz if method == Method::GET => match &state.configz {
            Some(c) => json(
                StatusCode::OK,
                &serde_json::json!({"kubeletconfig": c.as_ref()}),
            ),
            None => not_found(),
        },
        Route::ContainerLogs(c) if method == Method::GET => {
            container_logs(state, &c.namespace, &c.pod, &c.container, &query()).await
        }
        Route::SystemLogs { rest } => {
            if state.system_logs.is_none() {
                return not_found();
            }
            if !get_or_head(method) {
                return method_not_allowed();
            }
            system_logs(state, &format!("/logs{rest}")).await
        }
        Route::Run(c) if method == Method::POST => {
            run(state, &c.namespace, &c.pod, &c.container, &query()).await
        }
        Route::Checkpoint(c) if method == Method::POST => {
            checkpoint(state, &c.namespace, &c.pod, &c.container, &query()).await
        }
        Route::Stream(kind, c) if method == Method::GET || method == Method::POST => {
            let target = super::streaming::StreamTarget {
                kind: *kind,
                namespace: &c.namespace,
                pod: &c.pod,
                uid: c.uid.as_deref(),
                container: (*kind != StreamKind::PortForward).then_some(c.container.as_str()),
            };
            super::streaming::serve(state, &target, req).await
        }
        Route::Operator(view) if get_or_head(method) => super::operator::serve(state, view).await,
        Route::Unknown(Root::Run | Root::Checkpoint) if method != Method::POST => {
            method_not_allowed()
        }
        Route::Unknown(_) | Route::Malformed => not_found(),
        _ => method_not_allowed(),
    }
}

fn method_not_allowed() -> Resp {
    text(
        StatusCode::METHOD_NOT_ALLOWED,
        "405: Method Not Allowed".into(),
    )
}

/// Query parameters (the first value of each, percent-decoded).
pub fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for (k, v) in query_pairs(q) {
        out.entry(k).or_insert(v);
    }
    out
}

/// The desired pod `ns/name`.
fn find_pod(state: &ServerState, ns: &str, name: &str) -> Option<Pod> {
    state
        .pods
        .borrow()
        .iter()
        .find(|p| p.namespace() == ns && p.name() == name)
        .map(|p| (**p).clone())
}

fn spec_has_container(pod: &Pod, name: &str) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers.iter().any(|c| c.name == name)
            || s.init_containers.iter().flatten().any(|c| c.name == name)
            || s.ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == name)
    })
}

/// `/runningpods/`: the pods that have running containers, as the runtime sees them
/// (name, namespace, uid and the running containers' name and image only).
fn running_pods(state: &ServerState) -> Resp {
    let mut items = Vec::new();
    if let Some(cache) = &state.pod_cache {
        let mut all = cache.get_all();
        all.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        for p in all {
            let containers: Vec<Container> = p
                .container_statuses
                .iter()
                .filter(|c| c.is_running())
                .map(|c| Container {
                    name: c.name.clone(),
                    image: Some(c.image.clone()),
                    ..Default::default()
                })
                .collect();
            let sandbox_ready = p.sandbox_statuses.iter().any(|s| s.ready);
            if containers.is_empty() && !sandbox_ready {
                continue;
            }
            items.push(Pod {
                metadata: ObjectMeta {
                    name: Some(p.name.clone()),
                    namespace: Some(p.namespace.clone()),
                    uid: Some(p.uid.clone()),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    containers,
                    ..Default::default()
                }),
                status: None,
            });
        }
    }
    json(
        StatusCode::OK,
        &serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}),
    )
}

/// Parses the `PodLogOptions` query as upstream (400 for undecodable values, 422 for invalid
/// ones).
fn log_options(q: &HashMap<String, String>) -> Result<LogOptions, (StatusCode, String)> {
    let bad = || {
        Err((
            StatusCode::BAD_REQUEST,
            r#"{"message": "Unable to decode query."}"#.to_owned() + "\n",
        ))
    };
    let invalid = |m: &str| Err((StatusCode::UNPROCESSABLE_ENTITY, format!("{m}\n")));
    let flag = |k: &str| -> Result<bool, ()> {
        match q.get(k).map(String::as_str) {
            None | Some("" | "false" | "0" | "False" | "FALSE") => Ok(false),
            Some("true" | "1" | "True" | "TRUE") => Ok(true),
            Some(_) => Err(()),
        }
    };
    let int = |k: &str| -> Result<Option<i64>, ()> {
        q.get(k)
            .filter(|v| !v.is_empty())
            .map(|v| v.parse::<i64>().map_err(|_| ()))
            .transpose()
    };
    let (Ok(follow), Ok(timestamps), Ok(_previous)) =
        (flag("follow"), flag("timestamps"), flag("previous"))
    else {
        return bad();
    };
    let (Ok(tail), Ok(limit), Ok(since_secs)) =
        (int("tailLines"), int("limitBytes"), int("sinceSeconds"))
    else {
        return bad();
    };
    let since_time = match q.get("sinceTime").filter(|v| !v.is_empty()) {
        Some(v) => match chrono::DateTime::parse_from_rfc3339(v) {
            Ok(t) => Some(t.with_timezone(&chrono::Utc)),
            Err(_) => return bad(),
        },
        None => None,
    };
    if tail.is_some_and(|t| t < 0) {
        return invalid("tailLines: Invalid value: must be greater than or equal to 0");
    }
    if limit.is_some_and(|l| l < 1) {
        return invalid("limitBytes: Invalid value: must be greater than 0");
    }
    if since_secs.is_some_and(|s| s < 1) {
        return invalid("sinceSeconds: Invalid value: must be greater than 0");
    }
    if since_secs.is_some() && since_time.is_some() {
        return invalid(
            "sinceSeconds: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
        );
    }
    // A `sinceSeconds` reaching before the representable past means "from the beginning"
    // (no lower bound): the subtraction never overflows.
    let since = since_time.or_else(|| {
        since_secs.and_then(|s| {
            chrono::Duration::try_seconds(s).and_then(|d| chrono::Utc::now().checked_sub_signed(d))
        })
    });
    Ok(LogOptions {
        since,
        tail: tail.and_then(|t| usize::try_from(t).ok()),
        limit_bytes: limit.and_then(|l| u64::try_from(l).ok()),
        timestamps,
        follow,
    })
}

/// Upstream `validateContainerLogStatus`: the container ID whose log is wanted.
fn log_container_id(
    pod: &Pod,
    status: Option<&k8s_openapi::api::core::v1::PodStatus>,
    container: &str,
    previous: bool,
) -> Result<String, String> {
    let pod_name = pod.name();
    let cs = status.and_then(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
            .chain(s.ephemeral_container_statuses.iter().flatten())
            .find(|c| c.name == container)
    });
    let Some(cs) = cs else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        ));
    };
    let last = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let state = cs.state.as_ref();
    let last_id = last
        .and_then(|t| t.container_id.clone())
        .filter(|s| !s.is_empty());
    if previous {
        return last_id.ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        });
    }
    if state.is_some_and(|s| s.running.is_some())
        && let Some(id) = cs.container_id.clone().filter(|s| !s.is_empty())
    {
        return Ok(id);
    }
    if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        return t
            .container_id
            .clone()
            .filter(|s| !s.is_empty())
            .or(last_id)
            .ok_or_else(|| format!("container {container:?} in pod {pod_name:?} is terminated"));
    }
    if let Some(id) = last_id {
        return Ok(id);
    }
    if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
        let reason = w.reason.clone().unwrap_or_default();
        return Err(match reason.as_str() {
            "ErrImagePull" => format!(
                "container {container:?} in pod {pod_name:?} is waiting to start: image can't be pulled"
            ),
            "ImagePullBackOff" => format!(
                "container {container:?} in pod {pod_name:?} is waiting to start: trying and failing to pull image"
            ),
            _ => {
                format!("container {container:?} in pod {pod_name:?} is waiting to start: {reason}")
            }
        });
    }
    Err(format!(
        "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
    ))
}

fn strip_scheme(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, rest)| rest)
}

/// `GET /containerLogs/{ns}/{pod}/{container}`.
async fn container_logs(
    state: &ServerState,
    ns: &str,
    pod_name: &str,
    container: &str,
    q: &HashMap<String, String>,
) -> Resp {
    let opts = match log_options(q) {
        Ok(o) => o,
        Err((code, msg)) => return text(code, msg),
    };
    let previous = matches!(
        q.get("previous").map(String::as_str),
        Some("true" | "1" | "True" | "TRUE")
    );
    let Some(pod) = find_pod(state, ns, pod_name) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod \"{ns}/{pod_name}\" does not exist\n"),
        );
    };
    if !spec_has_container(&pod, container) {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod \"{ns}/{pod_name}\"\n"),
        );
    }
    let status = state.status.get_pod_status(pod.uid());
    let id = match log_container_id(&pod, status.as_ref(), container, previous) {
        Ok(id) => strip_scheme(&id).to_owned(),
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let Some(runtime) = state.runtime.clone() else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no container runtime\n".into(),
        );
    };
    let path = match runtime
        .container_status(api::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
    {
        Ok(r) => r.status.map(|s| s.log_path).unwrap_or_default(),
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("{e}")),
    };
    if path.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            format!("container {id:?} has no log path"),
        );
    }
    let path = PathBuf::from(path);
    super::log_handlers::container_log(
        path,
        opts,
        container_running(runtime, id),
        state.cancel.clone(),
    )
    .await
}

/// How long a log reader waits for the runtime to say whether its container still runs; a
/// CRI call that fails or takes longer counts as stopped.
const RUNNING_QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether container `id` still runs, asked from a log reader's own thread. The CRI call runs
/// as a task on the async runtime and answers through a channel; once that runtime has shut
/// down (the kubelet is stopping) the task is dropped unrun, the channel closes and the
/// answer is "not running", so the reader ends instead of panicking.
fn container_running(
    runtime: std::sync::Arc<dyn rkubelet_cri::RuntimeService>,
    id: String,
) -> Box<dyn FnMut() -> bool + Send> {
    let handle = tokio::runtime::Handle::current();
    Box::new(move || {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let runtime = runtime.clone();
        let id = id.clone();
        // Detached: the answer comes through `tx`, or `tx` is dropped with the task.
        drop(handle.spawn(async move {
            let status = runtime.container_status(api::ContainerStatusRequest {
                container_id: id,
                verbose: false,
            });
            let running = tokio::time::timeout(RUNNING_QUERY_TIMEOUT, status)
                .await
                .ok()
                .and_then(Result::ok)
                .and_then(|r| r.status)
                .is_some_and(|s| s.state == api::ContainerState::ContainerRunning as i32);
            let _ = tx.send(running);
        }));
        // Bounded here too: a runtime shutting down may neither run nor drop the task at once.
        rx.recv_timeout(RUNNING_QUERY_TIMEOUT + std::time::Duration::from_secs(1))
            .unwrap_or(false)
    })
}

/// `GET /logs/…`: files and directory listings under the system log directory.
async fn system_logs(state: &ServerState, path: &str) -> Resp {
    let Some(root) = &state.system_logs else {
        return not_found();
    };
    let rel = path.strip_prefix("/logs").unwrap_or_default();
    let rel = pct_decode(rel);
    if rel.split('/').any(|c| c == "..") {
        return text(StatusCode::BAD_REQUEST, "invalid URL path\n".into());
    }
    if rel.is_empty() {
        return super::log_handlers::redirect("/logs/");
    }
    let mut comps = Vec::new();
    for c in Path::new(rel.trim_start_matches('/')).components() {
        match c {
            Component::Normal(n) => comps.push(n.to_owned()),
            Component::CurDir => {}
            _ => return text(StatusCode::BAD_REQUEST, "invalid URL path\n".into()),
        }
    }
    super::log_handlers::system_log(root.clone(), comps, rel).await
}

/// The running container `name` of `pod` (from the status manager's view).
fn running_container_id(state: &ServerState, pod: &Pod, name: &str) -> Option<String> {
    let status = state.status.get_pod_status(pod.uid())?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .chain(status.ephemeral_container_statuses.iter().flatten())
        .find(|c| c.name == name && c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .and_then(|c| c.container_id.clone())
        .map(|id| strip_scheme(&id).to_owned())
}

/// `POST /run/{ns}/{pod}/{container}?cmd=…`: ExecSync, stdout then stderr.
async fn run(
    state: &ServerState,
    ns: &str,
    pod_name: &str,
    container: &str,
    q: &HashMap<String, String>,
) -> Resp {
    let Some(pod) = find_pod(state, ns, pod_name) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist\n".into());
    };
    let cmd: Vec<String> = q
        .get("cmd")
        .map(|c| c.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let Some(runtime) = state.runtime.clone() else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no container runtime\n".into(),
        );
    };
    let Some(id) = running_container_id(state, &pod, container) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("container not found ({container:?})\n"),
        );
    };
    match runtime
        .exec_sync(api::ExecSyncRequest {
            container_id: id,
            cmd: cmd.clone(),
            timeout: 0,
        })
        .await
    {
        Ok(r) if r.exit_code == 0 => {
            let mut out = r.stdout;
            out.extend_from_slice(&r.stderr);
            super::bytes_response(StatusCode::OK, Bytes::from(out))
        }
        Ok(r) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "command '{}' exited with {}: {}",
                cmd.join(" "),
                r.exit_code,
                String::from_utf8_lossy(&r.stderr)
            ),
        ),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

/// `POST /checkpoint/{ns}/{pod}/{container}`: CRI CheckpointContainer into
/// `<rootDir>/checkpoints/checkpoint-<pod>_<ns>-<container>-<time>.tar`.
async fn checkpoint(
    state: &ServerState,
    ns: &str,
    pod_name: &str,
    container: &str,
    q: &HashMap<String, String>,
) -> Resp {
    let Some(pod) = find_pod(state, ns, pod_name) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist\n".into());
    };
    if !spec_has_container(&pod, container) {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container} does not exist\n"),
        );
    }
    let timeout = match q.get("timeout").filter(|t| !t.is_empty()) {
        Some(t) => match t.parse::<i64>() {
            Ok(t) => t,
            Err(_) => {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("cannot parse value of timeout parameter ({t:?})\n"),
                );
            }
        },
        None => 0,
    };
    let failed = |e: String| {
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("checkpointing of {ns}/{pod_name}/{container} failed ({e})\n"),
        )
    };
    let Some(runtime) = state.runtime.clone() else {
        return failed("no container runtime".into());
    };
    let Some(id) = running_container_id(state, &pod, container) else {
        return failed(format!("container {container} is not running"));
    };
    let dir = state.root_dir.join("checkpoints");
    if let Err(e) =
        crate::data_dirs::create_dir_with_mode(&dir, crate::data_dirs::CHECKPOINTS_DIR_MODE)
    {
        return failed(format!("creating {}: {e}", dir.display()));
    }
    let stamp = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
    let location = dir.join(format!(
        "checkpoint-{pod_name}_{ns}-{container}-{stamp}.tar"
    ));
    match runtime
        .checkpoint_container(api::CheckpointContainerRequest {
            container_id: id,
            location: location.display().to_string(),
            timeout,
        })
        .await
    {
        Ok(_) => json(
            StatusCode::OK,
            &serde_json::json!({"items": [location.display().to_string()]}),
        ),
        Err(e @ CriError::Unimplemented { .. }) => {
            warn!(error = %e, "the container runtime cannot checkpoint containers");
            failed(format!(
                "the container runtime does not implement CheckpointContainer: {e}"
            ))
        }
        Err(e) => failed(e.to_string()),
    }
}

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;

/// `/metrics` (kubelet and process series), `/metrics/probes`, and the stats-based
/// `/metrics/resource` and `/metrics/cadvisor` (rendered from the latest snapshot, 404 when
/// stats are off). gzip-encoded when the request's `Accept-Encoding` accepts gzip, as upstream's
/// Prometheus handler does; identity otherwise.
fn metrics_endpoint(state: &ServerState, kind: MetricsKind, headers: &http::HeaderMap) -> Resp {
    let body = match kind {
        MetricsKind::Kubelet => state.metrics.as_ref().map(|m| m.render()),
        MetricsKind::Probes => state.probe_metrics.as_ref().map(|m| m.render()),
        MetricsKind::Resource => state
            .stats
            .as_ref()
            .map(|s| crate::metrics::resource::render(&s.latest())),
        MetricsKind::Cadvisor => state.stats.as_ref().map(|s| cadvisor_text(state, s)),
    };
    match body {
        Some(body) => super::prometheus_text(body, super::encoding::negotiate(headers)),
        None => not_found(),
    }
}

/// `/metrics/cadvisor` from the latest snapshot, the desired pods and the runtime pod cache.
fn cadvisor_text(state: &ServerState, stats: &crate::stats::StatsHandle) -> String {
    use crate::metrics::cadvisor::{CadvisorInput, render};
    let summary = stats.latest();
    let pods = state.pods.borrow().clone();
    let runtime_pods = state
        .pod_cache
        .as_ref()
        .map(|c| c.get_all())
        .unwrap_or_default();
    render(&CadvisorInput::new(
        &summary,
        &pods,
        &runtime_pods,
        state
            .pod_cgroup_root
            .as_deref()
            .map(|r| (r, state.pod_cgroup_driver)),
        state.machine.as_deref(),
        chrono::Utc::now(),
    ))
}

/// `/stats/summary`: the stats provider's latest snapshot, collected in the background (never
/// on the request path); `only_cpu_and_memory=true` keeps only the CPU and memory stats, as
/// upstream.
fn stats_summary(state: &ServerState, query: &HashMap<String, String>) -> Resp {
    let Some(stats) = &state.stats else {
        return not_found();
    };
    let only_cpu_and_memory = match query.get("only_cpu_and_memory").map(String::as_str) {
        None | Some("" | "false" | "0") => false,
        Some("true" | "1") => true,
        Some(other) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("invalid only_cpu_and_memory value {other:?}: expected true or false\n"),
            );
        }
    };
    let mut summary = (*stats.latest()).clone();
    if only_cpu_and_memory {
        summary.retain_cpu_and_memory();
    }
    match serde_json::to_value(&summary) {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the summary: {e}\n"),
        ),
    }
}
