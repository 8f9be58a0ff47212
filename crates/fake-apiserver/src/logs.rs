//! `pods/{name}/log` proxy: owns forwarding a log request to the pod's node's kubelet
//! (`/containerLogs/{ns}/{pod}/{container}` over HTTPS on the node's daemon endpoint); receives
//! the API request and the stored pod/node, emits the kubelet's (streamed) response.

use crate::error::ApiError;
use crate::resources;
use crate::server::Body;
use crate::store::Store;
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

/// Query parameters the kubelet understands and the proxy passes through.
const PASSTHROUGH: &[&str] = &[
    "follow",
    "previous",
    "sinceSeconds",
    "sinceTime",
    "timestamps",
    "tailLines",
    "limitBytes",
];

pub(crate) fn container_names(pod: &Value) -> Vec<String> {
    ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|l| pod["spec"][l].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

/// Where the node's kubelet listens: (host, port). InternalIP is preferred, then ExternalIP,
/// then Hostname.
pub(crate) fn kubelet_endpoint(node: &Value) -> Option<(String, u16)> {
    let addrs = node["status"]["addresses"].as_array()?;
    let host = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|t| {
            addrs
                .iter()
                .find(|a| a["type"] == *t)
                .and_then(|a| a["address"].as_str())
                .map(str::to_string)
        })?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
        .unwrap_or(10250);
    Some((host, port))
}

/// Where the kubelet of the node the pod `name` is bound to listens (the API server's
/// `getKubeletConnectionInfo`): an error when the pod is unbound or the node has no address.
pub(crate) fn pod_kubelet(
    store: &Store,
    pod: &Value,
    name: &str,
) -> Result<(String, u16), ApiError> {
    let nodes = resources::find("", "v1", "nodes").ok_or_else(|| ApiError::internal("no nodes"))?;
    let node_name = pod["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(format!("pod {name} does not have a host assigned"))
        })?;
    let node = store.get(nodes, "", node_name)?;
    kubelet_endpoint(&node).ok_or_else(|| {
        ApiError::internal(format!(
            "node {node_name} has no address to reach its kubelet"
        ))
    })
}

/// An HTTP/1.1 connection to a kubelet over TLS with this server's kubelet-client config (the
/// TCP connect bounded by `dial_timeout`); errors are shaped by `fail` (the caller's wording).
pub(crate) async fn dial_kubelet(
    tls: Arc<rustls::ClientConfig>,
    host: &str,
    port: u16,
    dial_timeout: Duration,
    fail: &(dyn Fn(String) -> ApiError + Sync),
) -> Result<KubeletConnection, ApiError> {
    let tcp = tokio::time::timeout(dial_timeout, tokio::net::TcpStream::connect((host, port)))
        .await
        .map_err(|_| fail("dial tcp: i/o timeout".into()))?
        .map_err(|e| fail(format!("dial tcp: {e}")))?;
    let server_name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| fail(format!("invalid host: {e}")))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(server_name, tcp)
        .await
        .map_err(|e| fail(format!("tls: {e}")))?;
    hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| fail(e.to_string()))
}

/// The request sender and connection driver of [`dial_kubelet`].
pub(crate) type KubeletConnection = (
    hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    hyper::client::conn::http1::Connection<
        TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
        Empty<Bytes>,
    >,
);

pub(crate) fn pct_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Proxies `GET .../pods/{name}/log` to the kubelet of the pod's node.
pub async fn proxy(
    store: &Store,
    tls: Arc<rustls::ClientConfig>,
    ns: &str,
    name: &str,
    q: &HashMap<String, String>,
) -> Result<Response<Body>, ApiError> {
    let pods = resources::find("", "v1", "pods").ok_or_else(|| ApiError::internal("no pods"))?;
    let pod = store.get(pods, ns, name)?;
    let names = container_names(&pod);
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) if names.contains(c) => c.clone(),
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None if names.len() == 1 => names[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            )));
        }
    };
    let (host, port) = pod_kubelet(store, &pod, name)?;
    let query: Vec<String> = PASSTHROUGH
        .iter()
        .filter_map(|k| q.get(*k).map(|v| format!("{k}={}", pct_encode(v))))
        .collect();
    let path = format!("/containerLogs/{ns}/{name}/{container}?{}", query.join("&"));
    let url = format!("https://{host}:{port}{path}");
    let fail = |e: String| ApiError::internal(format!("Get \"{url}\": {e}"));
    let (mut sender, conn) = dial_kubelet(tls, &host, port, Duration::from_secs(5), &fail).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "kubelet log connection ended");
        }
    });
    let req = Request::get(&path)
        .header(header::HOST, format!("{host}:{port}"))
        .body(Empty::<Bytes>::new())
        .map_err(|e| fail(e.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let status = resp.status();
    let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
    let mut body = resp.into_body();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data()
                && tx.send(data).await.is_err()
            {
                return;
            }
        }
    });
    let stream = ReceiverStream::new(rx).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut out = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    *out.status_mut() = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        content_type.unwrap_or_else(|| header::HeaderValue::from_static("text/plain")),
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn endpoint_prefers_internal_ip_and_default_port() {
        let node = json!({"status": {"addresses": [
            {"type": "Hostname", "address": "h"}, {"type": "InternalIP", "address": "10.0.0.1"}]}});
        assert_eq!(kubelet_endpoint(&node), Some(("10.0.0.1".into(), 10250)));
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "h"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 11250}}}});
        assert_eq!(kubelet_endpoint(&node), Some(("h".into(), 11250)));
        assert_eq!(kubelet_endpoint(&json!({"status": {}})), None);
        assert_eq!(
            pct_encode("2024-01-01T00:00:00Z"),
            "2024-01-01T00%3A00%3A00Z"
        );
    }
}
