//! The kubelet's read-only HTTP port and healthz port. Owns the listeners; reads the desired
//! pods (pod manager snapshot), their statuses (status manager) and health checks. Serves
//! `GET /pods` (a v1 PodList with current statuses, as upstream does for standalone pods) and
//! `GET /healthz` (+ `/healthz/<check>`); the full authenticated API comes later.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::status::manager::StatusManager;
use crate::types::PodExt;

/// A named health check (`ping`, `syncloop`, `pleg`…).
pub type HealthCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the handlers read.
#[derive(Clone)]
pub struct ServerState {
    pub pods: watch::Receiver<Arc<Vec<Pod>>>,
    pub status: StatusManager,
    pub checks: Vec<(String, HealthCheck)>,
}

/// Server errors.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Which endpoints a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    /// `healthzPort`: health only.
    Healthz,
    /// `readOnlyPort`: pods and health, no authentication.
    ReadOnly,
}

/// Binds `addr` (fails fast so a port clash is reported at start-up).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// Serves on `listener` until `cancel` fires; in-flight connections are closed then.
pub async fn serve(
    listener: TcpListener,
    endpoints: Endpoints,
    state: ServerState,
    cancel: CancellationToken,
) {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, ?endpoints, "serving HTTP");
    }
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let state = state.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(route(&state, endpoints, &req)) }
                    });
                    if let Err(e) = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await
                    {
                        debug!(%peer, error = %e, "HTTP connection ended with an error");
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

fn route(
    state: &ServerState,
    endpoints: Endpoints,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n".into(),
        );
    }
    match (endpoints, path) {
        (_, "/healthz") => healthz(state, None, req.uri().query().unwrap_or_default()),
        (_, p) if p.starts_with("/healthz/") => healthz(state, Some(&p["/healthz/".len()..]), ""),
        (Endpoints::ReadOnly, "/pods" | "/pods/") => pods(state),
        _ => text(StatusCode::NOT_FOUND, "404 page not found\n".into()),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Upstream healthz: `ok`, or a per-check listing with `healthz check failed` and 500.
fn healthz(state: &ServerState, only: Option<&str>, query: &str) -> Response<Full<Bytes>> {
    let mut checks: Vec<(&str, Result<(), String>)> = vec![("ping", Ok(())), ("log", Ok(()))];
    checks.extend(state.checks.iter().map(|(n, c)| (n.as_str(), c())));
    if let Some(name) = only {
        return match checks.iter().find(|(n, _)| *n == name) {
            Some((_, Ok(()))) => text(StatusCode::OK, "ok".into()),
            Some((n, Err(e))) => {
                warn!(check = n, error = %e, "healthz check failed");
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("internal server error: {e}\n"),
                )
            }
            None => text(StatusCode::NOT_FOUND, "404 page not found\n".into()),
        };
    }
    let failed = checks.iter().any(|(_, r)| r.is_err());
    if !failed && !query.contains("verbose") {
        return text(StatusCode::OK, "ok".into());
    }
    let mut body = String::new();
    for (name, r) in &checks {
        match r {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(e) => {
                warn!(check = name, error = %e, "healthz check failed");
                body.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    if failed {
        body.push_str("healthz check failed\n");
        text(StatusCode::INTERNAL_SERVER_ERROR, body)
    } else {
        body.push_str("healthz check passed\n");
        text(StatusCode::OK, body)
    }
}

/// The desired pods with their current statuses as a v1 `PodList`.
pub fn pod_list(state: &ServerState) -> serde_json::Value {
    let pods = state.pods.borrow().clone();
    let items: Vec<Pod> = pods
        .iter()
        .map(|p| {
            let mut p = p.clone();
            if let Some(s) = state.status.get_pod_status(p.uid()) {
                p.status = Some(s);
            }
            p
        })
        .collect();
    serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    })
}

fn pods(state: &ServerState) -> Response<Full<Bytes>> {
    match serde_json::to_vec(&pod_list(state)) {
        Ok(body) => {
            let mut resp = Response::new(Full::new(Bytes::from(body)));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            resp
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding pods: {e}\n"),
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn state(failing: bool) -> (ServerState, watch::Sender<Arc<Vec<Pod>>>) {
        let (tx, rx) = watch::channel(Arc::new(Vec::new()));
        let check: HealthCheck = Arc::new(move || {
            if failing {
                Err("pleg was last seen active 3m0.1s ago; threshold is 3m0s".to_owned())
            } else {
                Ok(())
            }
        });
        let state = ServerState {
            pods: rx,
            status: StatusManager::new(),
            checks: vec![("pleg".to_owned(), check)],
        };
        (state, tx)
    }

    async fn body(resp: Response<Full<Bytes>>) -> (StatusCode, String) {
        let code = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn healthz_reports_failing_checks_like_upstream() {
        let (ok, _tx) = state(false);
        assert_eq!(
            body(healthz(&ok, None, "")).await,
            (StatusCode::OK, "ok".into())
        );
        let (bad, _tx) = state(true);
        let (code, text) = body(healthz(&bad, None, "")).await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            text,
            "[+]ping ok\n[+]log ok\n[-]pleg failed: reason withheld\nhealthz check failed\n"
        );
        let (code, _) = body(healthz(&bad, Some("pleg"), "")).await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body(healthz(&bad, Some("ping"), "")).await.0,
            StatusCode::OK
        );
        assert_eq!(
            body(healthz(&bad, Some("nope"), "")).await.0,
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test]
    async fn pods_carry_the_status_manager_status() {
        let (st, tx) = state(false);
        let pod = Pod {
            metadata: ObjectMeta {
                uid: Some("u1".into()),
                name: Some("p".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        tx.send_replace(Arc::new(vec![pod.clone()]));
        st.status.set_pod_status(
            &pod,
            k8s_openapi::api::core::v1::PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            },
        );
        let list = pod_list(&st);
        assert_eq!(list["kind"], "PodList");
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["items"][0]["status"]["phase"], "Running");
        assert_eq!(list["items"][0]["metadata"]["uid"], "u1");
    }
}
