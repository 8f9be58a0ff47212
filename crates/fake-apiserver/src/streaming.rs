//! `pods/{name}/exec`, `pods/{name}/attach` and `pods/{name}/portforward` (the real API
//! server's `ExecLocation`/`AttachLocation`/`PortForwardLocation` plus its upgrade-aware
//! proxy). Owns the spliced connections (on the serving loop's [`StreamTasks`], ended when the
//! server stops); receives the client's upgrade request and the stored pod/node; emits the
//! node kubelet's answer: its `101` and a two-way byte splice over the kubelet's HTTPS port,
//! or its error status passed through.
//!
//! The proxy is protocol-agnostic: kubectl's websocket (`v5.channel.k8s.io`) attempt reaches
//! the kubelet and the runtime as is, and kubectl falls back to SPDY when they refuse it (an
//! API server >= 1.30 would translate websockets to SPDY itself; this one does not).

use crate::error::ApiError;
use crate::logs::{container_names, dial_kubelet, pct_encode, pod_kubelet};
use crate::resources;
use crate::server::Body;
use crate::store::Store;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const KUBELET_TIMEOUT: Duration = Duration::from_secs(30);

/// The spliced connections of one serving loop (put in each request's extensions).
#[derive(Debug, Clone, Default)]
pub struct StreamTasks {
    pub tracker: TaskTracker,
    pub cancel: CancellationToken,
}

impl StreamTasks {
    /// Ends every spliced connection and waits for their tasks.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// A Go-style boolean query value (`Convert_Slice_string_To_bool`): present and neither `0`
/// nor `false` means true.
fn flag(query: &[(String, String)], key: &str) -> bool {
    query
        .iter()
        .find(|(k, _)| k == key)
        .is_some_and(|(_, v)| v != "0" && !v.eq_ignore_ascii_case("false"))
}

fn first<'a>(query: &'a [(String, String)], key: &str) -> &'a str {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

fn all<'a>(query: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    query
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The container of `pod` a request means (upstream `streamLocation`): the named one, which
/// must exist, or the only one.
pub fn resolve_container(pod: &Value, name: &str, requested: &str) -> Result<String, ApiError> {
    let names_of = |list: &str| -> Vec<String> {
        pod["spec"][list]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    };
    if !requested.is_empty() {
        return if container_names(pod).iter().any(|c| c == requested) {
            Ok(requested.to_owned())
        } else {
            Err(ApiError::bad_request(format!(
                "container {requested} is not valid for pod {name}"
            )))
        };
    }
    let containers = names_of("containers");
    match containers.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}"
        ))),
        many => {
            let mut msg = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                many.join(" ")
            );
            let init = names_of("initContainers");
            if !init.is_empty() {
                msg.push_str(&format!(
                    " or one of the init containers: [{}]",
                    init.join(" ")
                ));
            }
            Err(ApiError::bad_request(msg))
        }
    }
}

/// The kubelet path and query for subresource `sub` (`exec`, `attach`, `portforward`) of
/// `ns/name` (upstream `streamParams` + `url.Values.Encode`: keys sorted, values in order).
pub fn kubelet_location(
    pod: &Value,
    ns: &str,
    name: &str,
    sub: &str,
    query: &[(String, String)],
) -> Result<String, ApiError> {
    let mut params: Vec<(&str, String)> = Vec::new();
    let path = match sub {
        "exec" | "attach" => {
            let container = resolve_container(pod, name, first(query, "container"))?;
            if sub == "exec" {
                for c in all(query, "command") {
                    params.push(("command", c.to_owned()));
                }
            }
            for (opt, param) in [
                ("stdin", "input"),
                ("stdout", "output"),
                ("stderr", "error"),
                ("tty", "tty"),
            ] {
                if flag(query, opt) {
                    params.push((param, "1".to_owned()));
                }
            }
            format!("/{sub}/{ns}/{name}/{container}")
        }
        _ => {
            let mut ports = Vec::new();
            for p in all(query, "ports") {
                let port: i32 = p
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid port {p:?}")))?;
                ports.push(port.to_string());
            }
            if !ports.is_empty() {
                params.push(("port", ports.join(",")));
            }
            format!("/portForward/{ns}/{name}")
        }
    };
    // A stable sort keeps the values of one key in order.
    params.sort_by_key(|(k, _)| *k);
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", pct_encode(v)))
        .collect();
    Ok(if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.join("&"))
    })
}

/// Whether a `Connection` header names the `upgrade` token.
fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Proxies an exec/attach/portforward request to the kubelet of the pod's node.
pub async fn proxy(
    store: &Store,
    tls: Arc<rustls::ClientConfig>,
    ns: &str,
    name: &str,
    sub: &str,
    query: &[(String, String)],
    mut req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let pods = resources::find("", "v1", "pods").ok_or_else(|| ApiError::internal("no pods"))?;
    let pod = store.get(pods, ns, name)?;
    let location = kubelet_location(&pod, ns, name, sub, query)?;
    let (host, port) = pod_kubelet(store, &pod, name)?;
    if !is_upgrade(req.headers()) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let url = format!("https://{host}:{port}{location}");
    let fail = |e: String| ApiError::internal(format!("error dialing backend: {url}: {e}"));
    let mut out = Request::builder()
        .method(req.method().clone())
        .uri(&location);
    for (k, v) in req.headers() {
        // The caller's credentials stay here; the kubelet sees this server's client cert.
        if k != header::HOST
            && k != header::AUTHORIZATION
            && k != header::CONTENT_LENGTH
            && k != header::TRANSFER_ENCODING
        {
            out = out.header(k, v);
        }
    }
    let out = out
        .header(header::HOST, format!("{host}:{port}"))
        .body(Empty::<Bytes>::new())
        .map_err(|e| fail(e.to_string()))?;
    let tasks = req
        .extensions()
        .get::<StreamTasks>()
        .cloned()
        .unwrap_or_default();
    let client_upgrade = hyper::upgrade::on(&mut req);
    let connect = async {
        let (mut sender, conn) = dial_kubelet(tls, &host, port, KUBELET_TIMEOUT, &fail).await?;
        let cancel = tasks.cancel.clone();
        tasks.tracker.spawn(async move {
            tokio::select! {
                r = conn.with_upgrades() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "kubelet stream connection ended");
                    }
                }
                _ = cancel.cancelled() => {}
            }
        });
        sender
            .send_request(out)
            .await
            .map_err(|e| fail(e.to_string()))
    };
    let resp = tokio::time::timeout(KUBELET_TIMEOUT, connect)
        .await
        .map_err(|_| fail("i/o timeout".into()))??;
    let status = resp.status();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        let mut answer = Response::new(BodyExt::boxed(Full::new(Bytes::new())));
        *answer.status_mut() = status;
        *answer.headers_mut() = resp.headers().clone();
        let backend = hyper::upgrade::on(resp);
        let cancel = tasks.cancel.clone();
        tasks.tracker.spawn(async move {
            tokio::select! {
                _ = splice(client_upgrade, backend) => {}
                _ = cancel.cancelled() => {}
            }
        });
        return Ok(answer);
    }
    if status.as_u16() < 400 {
        return Err(ApiError::internal(format!(
            "invalid upgrade response: status code {}",
            status.as_u16()
        )));
    }
    let headers = resp.headers().clone();
    let body = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .ok()
        .and_then(Result::ok)
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut answer = Response::new(BodyExt::boxed(Full::new(body)));
    *answer.status_mut() = status;
    for (k, v) in &headers {
        if k != header::CONTENT_LENGTH && k != header::TRANSFER_ENCODING {
            answer.headers_mut().append(k, v.clone());
        }
    }
    Ok(answer)
}

/// Copies bytes both ways until one direction ends, then closes both.
async fn splice(client: OnUpgrade, backend: OnUpgrade) {
    let (client, backend) = match tokio::try_join!(client, backend) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade failed");
            return;
        }
    };
    let (mut client_rd, mut client_wr) = tokio::io::split(TokioIo::new(client));
    let (mut backend_rd, mut backend_wr) = tokio::io::split(TokioIo::new(backend));
    tokio::select! {
        _ = tokio::io::copy(&mut client_rd, &mut backend_wr) => {}
        _ = tokio::io::copy(&mut backend_rd, &mut client_wr) => {}
    }
    let _ = client_wr.shutdown().await;
    let _ = backend_wr.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn exec_location_keeps_the_command_order_and_sorts_keys() {
        let pod = json!({"spec": {"containers": [{"name": "main"}]}});
        let query = q(&[
            ("command", "sh"),
            ("command", "-c"),
            ("command", "echo a b"),
            ("stdout", "true"),
            ("stdin", "true"),
            ("stderr", "false"),
            ("tty", "0"),
        ]);
        assert_eq!(
            kubelet_location(&pod, "ns", "web", "exec", &query).unwrap(),
            "/exec/ns/web/main?command=sh&command=-c&command=echo%20a%20b&input=1&output=1"
        );
        assert_eq!(
            kubelet_location(
                &pod,
                "ns",
                "web",
                "attach",
                &q(&[("stdout", ""), ("command", "x")])
            )
            .unwrap(),
            "/attach/ns/web/main?output=1"
        );
        assert_eq!(
            kubelet_location(&pod, "ns", "web", "portforward", &q(&[])).unwrap(),
            "/portForward/ns/web"
        );
        assert_eq!(
            kubelet_location(
                &pod,
                "ns",
                "web",
                "portforward",
                &q(&[("ports", "80"), ("ports", "8080")])
            )
            .unwrap(),
            "/portForward/ns/web?port=80%2C8080"
        );
    }

    #[test]
    fn container_choice_as_the_api_server() {
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}],
            "initContainers": [{"name": "i"}]}});
        let err = |pod: &Value, c: &str| resolve_container(pod, "web", c).unwrap_err().message;
        assert_eq!(
            err(&two, ""),
            "a container name must be specified for pod web, choose one of: [a b] or one of the init containers: [i]"
        );
        assert_eq!(err(&two, "x"), "container x is not valid for pod web");
        assert_eq!(resolve_container(&two, "web", "i").unwrap(), "i");
        let none = json!({"spec": {"containers": []}});
        assert_eq!(
            err(&none, ""),
            "a container name must be specified for pod web"
        );
    }
}
