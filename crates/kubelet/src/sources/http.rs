//! The `staticPodURL` source (upstream `http.go`): polls the URL every `httpCheckFrequency`
//! with the `staticPodURLHeader` headers. The body is a Pod or a PodList (JSON or YAML); each
//! new body is turned into static pods and emitted as `PodUpdate { op: Set, source: Http }`.
//! As upstream: an unchanged body emits nothing, an empty body emits an empty set, and errors
//! (transport, non-200, bad manifest) are logged and keep the previous set. Only `http://`.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::decode::MAX_MANIFEST_BYTES;
use super::static_pod::{ManifestError, ManifestOrigin, static_pods_from_manifest};
use crate::types::{PodOp, PodSource, PodUpdate};

/// Per-request timeout (upstream's `http.Client{Timeout: 10s}`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an `HttpSource` could not be built from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum HttpSourceError {
    #[error("staticPodURL {url:?} is not a valid URL: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error(
        "staticPodURL {url:?}: scheme {scheme:?} is not supported (only http:// is; https is not supported yet)"
    )]
    UnsupportedScheme { url: String, scheme: String },
    #[error("staticPodURLHeader {name:?}: {reason}")]
    InvalidHeader { name: String, reason: String },
}

/// Why one poll of the URL produced no pods.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: {reason}")]
    Request { url: String, reason: String },
    #[error("{url}: request timed out after {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("{url}: {status}")]
    Status { url: String, status: StatusCode },
    #[error("zero-length data received from {url}")]
    Empty { url: String },
    #[error("{url}: {source}")]
    Manifest { url: String, source: ManifestError },
}

/// Polls `staticPodURL` and emits its static pods.
pub struct HttpSource {
    url: String,
    uri: Uri,
    headers: HeaderMap,
    node_name: String,
    period: Duration,
    last_error: watch::Sender<Option<String>>,
}

impl HttpSource {
    /// `headers` is `staticPodURLHeader` (name → values); `period` is `httpCheckFrequency`.
    pub fn new(
        url: &str,
        headers: &BTreeMap<String, Vec<String>>,
        node_name: impl Into<String>,
        period: Duration,
    ) -> Result<Self, HttpSourceError> {
        let uri: Uri =
            url.parse()
                .map_err(|e: http::uri::InvalidUri| HttpSourceError::InvalidUrl {
                    url: url.into(),
                    reason: e.to_string(),
                })?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(HttpSourceError::UnsupportedScheme {
                    url: url.into(),
                    scheme: other.into(),
                });
            }
            None => {
                return Err(HttpSourceError::InvalidUrl {
                    url: url.into(),
                    reason: "missing scheme (expected http://)".into(),
                });
            }
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(HttpSourceError::InvalidUrl {
                url: url.into(),
                reason: "missing host".into(),
            });
        }
        let mut map = HeaderMap::new();
        for (name, values) in headers {
            let invalid = |reason: String| HttpSourceError::InvalidHeader {
                name: name.clone(),
                reason,
            };
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| invalid(format!("invalid header name: {e}")))?;
            for v in values {
                // The value is not shown: staticPodURLHeader often carries a credential.
                let mut value = HeaderValue::from_str(v)
                    .map_err(|e| invalid(format!("invalid value (not shown): {e}")))?;
                // Printed as `Sensitive` by any `Debug` of the request.
                value.set_sensitive(true);
                map.append(header.clone(), value);
            }
        }
        Ok(HttpSource {
            url: url.into(),
            uri,
            headers: map,
            node_name: node_name.into(),
            period,
            last_error: watch::channel(None).0,
        })
    }

    /// The error of the last poll (`None` after a successful one).
    pub fn last_error(&self) -> watch::Receiver<Option<String>> {
        self.last_error.subscribe()
    }

    /// Runs until `cancel`: polls at once, then every `period`. Returns early when `tx` closes.
    pub async fn run(self, tx: mpsc::Sender<PodUpdate>, cancel: CancellationToken) {
        tracing::info!(url = %self.url, "watching static pod URL");
        let client: Client<HttpConnector, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let mut ticker = tokio::time::interval(self.period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last_body: Option<Bytes> = None;
        let mut failures = 0u32;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let fetched = tokio::select! {
                _ = cancel.cancelled() => return,
                r = self.fetch(&client) => r,
            };
            let (update, outcome) = self.evaluate(fetched, &mut last_body);
            if let Some(update) = update {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    sent = tx.send(update) => if sent.is_err() { return },
                }
            }
            if let Some(outcome) = outcome {
                self.report(outcome, &mut failures);
            }
        }
    }

    /// Turns one poll's result into the update to send (if any) and the poll's outcome (`None`
    /// for an unchanged body: nothing new to report, the last outcome stands).
    fn evaluate(
        &self,
        fetched: Result<Bytes, FetchError>,
        last_body: &mut Option<Bytes>,
    ) -> (Option<PodUpdate>, Option<Result<(), FetchError>>) {
        let set = |pods: Vec<Pod>| PodUpdate::new(PodOp::Set, PodSource::Http, pods);
        let body = match fetched {
            Ok(body) => body,
            Err(e) => return (None, Some(Err(e))),
        };
        if body.is_empty() {
            // An empty set still lets the source count as seen. Forget the last body so the
            // pods come back when it is served again (upstream would skip it as unchanged).
            *last_body = None;
            let err = FetchError::Empty {
                url: self.url.clone(),
            };
            return (Some(set(Vec::new())), Some(Err(err)));
        }
        if last_body.as_ref() == Some(&body) {
            return (None, None);
        }
        *last_body = Some(body.clone());
        let origin = ManifestOrigin::Url(&self.url);
        match static_pods_from_manifest(&body, &self.node_name, &origin, true) {
            Ok(pods) => (Some(set(pods)), Some(Ok(()))),
            Err(source) => (
                None,
                Some(Err(FetchError::Manifest {
                    url: self.url.clone(),
                    source,
                })),
            ),
        }
    }

    /// Logs as upstream: the first three failures loudly, then quietly until a success.
    fn report(&self, outcome: Result<(), FetchError>, failures: &mut u32) {
        match outcome {
            Ok(()) => {
                if *failures > 0 {
                    tracing::info!(url = %self.url, "successfully read pods from URL");
                }
                *failures = 0;
                self.last_error.send_replace(None);
            }
            Err(e) => {
                match *failures {
                    0..=2 => tracing::warn!(error = %e, "failed to read pods from URL"),
                    3 => tracing::warn!(error = %e,
                        "failed to read pods from URL; dropping verbosity of this message"),
                    _ => tracing::debug!(error = %e, "failed to read pods from URL"),
                }
                *failures = failures.saturating_add(1);
                self.last_error.send_replace(Some(e.to_string()));
            }
        }
    }

    async fn fetch(
        &self,
        client: &Client<HttpConnector, Empty<Bytes>>,
    ) -> Result<Bytes, FetchError> {
        match tokio::time::timeout(REQUEST_TIMEOUT, self.fetch_inner(client)).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout {
                url: self.url.clone(),
                timeout: REQUEST_TIMEOUT,
            }),
        }
    }

    async fn fetch_inner(
        &self,
        client: &Client<HttpConnector, Empty<Bytes>>,
    ) -> Result<Bytes, FetchError> {
        let request_err = |reason: String| FetchError::Request {
            url: self.url.clone(),
            reason,
        };
        let mut req = Request::get(self.uri.clone())
            .body(Empty::<Bytes>::new())
            .map_err(|e| request_err(e.to_string()))?;
        *req.headers_mut() = self.headers.clone();
        let resp = client
            .request(req)
            .await
            .map_err(|e| request_err(error_chain(&e)))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_MANIFEST_BYTES)
            .collect()
            .await
            .map_err(|e| request_err(format!("reading body: {e}")))?
            .to_bytes();
        if status != StatusCode::OK {
            return Err(FetchError::Status {
                url: self.url.clone(),
                status,
            });
        }
        Ok(body)
    }
}

/// `e` and its sources, `: `-separated (hyper's top-level errors are terse).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
