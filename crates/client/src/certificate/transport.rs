//! The API client whose client certificate can change under it (upstream
//! `certificate.UpdateTransport`): one `kube::Client` that every component clones, over a
//! service that sends each request through the current *generation* — an inner client built
//! from the cluster settings and the current certificate. [`RotatingClient::rotate`] builds a
//! new generation and swaps it in; the old one is dropped once its in-flight requests finish,
//! closing its pooled connections, and its open watch streams are ended at the next event
//! boundary (upstream closes all connections), so watchers re-watch with the new certificate.
//! Ordinary requests in flight during a swap complete on the old connection: none fails.
//! Receives the cluster `kube::Config` and certificate pairs; owns the generations.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame};
use kube::client::Body;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tracing::info;

use super::{CertError, CertKey};
use crate::apiclient::{ClientSettings, client_from_config};
use crate::sync;

/// One inner client and the token that ends its watches.
#[derive(Clone)]
struct Generation {
    client: kube::Client,
    retired: CancellationToken,
}

/// The shared, swappable API client.
pub struct RotatingClient {
    /// The cluster (server, CA, TLS options) without credentials.
    base: kube::Config,
    settings: ClientSettings,
    current: RwLock<Generation>,
}

impl std::fmt::Debug for RotatingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RotatingClient")
            .field("server", &self.base.cluster_url)
            .finish_non_exhaustive()
    }
}

/// `base` with `pair` as its client certificate (none: anonymous, as upstream's transport
/// before the first certificate).
fn with_identity(base: &kube::Config, pair: Option<&CertKey>) -> kube::Config {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let mut config = base.clone();
    config.auth_info = kube::config::AuthInfo {
        client_certificate_data: pair.map(|p| b64(&p.cert_pem)),
        client_key_data: pair.map(|p| b64(&p.key_pem).into()),
        ..Default::default()
    };
    config
}

impl RotatingClient {
    /// A client for the cluster in `base` presenting `pair`.
    pub fn new(
        base: kube::Config,
        settings: ClientSettings,
        pair: Option<&CertKey>,
    ) -> Result<Arc<Self>, CertError> {
        let client = client_from_config(with_identity(&base, pair), &settings)
            .map_err(|e| CertError::Api(e.to_string()))?;
        Ok(Arc::new(Self {
            base,
            settings,
            current: RwLock::new(Generation {
                client,
                retired: CancellationToken::new(),
            }),
        }))
    }

    /// The client components use; it always sends through the current generation.
    pub fn client(self: &Arc<Self>) -> kube::Client {
        kube::Client::new(
            SwapService {
                owner: self.clone(),
            },
            self.base.default_namespace.clone(),
        )
    }

    fn generation(&self) -> Generation {
        sync::read(&self.current).clone()
    }

    /// Moves every request after this call to a client presenting `pair`, and ends the
    /// watches of the previous generation.
    pub fn rotate(&self, pair: &CertKey) -> Result<(), CertError> {
        let client = client_from_config(with_identity(&self.base, Some(pair)), &self.settings)
            .map_err(|e| CertError::Api(e.to_string()))?;
        let old = std::mem::replace(
            &mut *sync::write(&self.current),
            Generation {
                client,
                retired: CancellationToken::new(),
            },
        );
        info!(
            "certificate rotation detected, shutting down client connections to start using new credentials"
        );
        old.retired.cancel();
        Ok(())
    }
}

/// The tower service under the shared client.
#[derive(Clone)]
struct SwapService {
    owner: Arc<RotatingClient>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tower::Service<http::Request<Body>> for SwapService {
    type Response = http::Response<GenerationBody<Body>>;
    type Error = kube::Error;
    type Future = BoxFuture<Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let generation = self.owner.generation();
        let watch = is_watch(req.uri());
        Box::pin(async move {
            let resp = generation.client.send(req).await?;
            Ok(resp.map(|body| {
                if watch {
                    GenerationBody::watch(body, generation.retired)
                } else {
                    GenerationBody::plain(body)
                }
            }))
        })
    }
}

/// `?watch=true` (or `1`): a stream that lives until the server or the client ends it.
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
    })
}

/// A response body; a watch body ends (cleanly, between two events) once its generation is
/// retired.
pub struct GenerationBody<B> {
    inner: B,
    retired: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    /// The last byte passed on was a newline (or nothing was): an event boundary.
    at_boundary: bool,
}

impl<B> GenerationBody<B> {
    fn plain(inner: B) -> Self {
        Self {
            inner,
            retired: None,
            at_boundary: true,
        }
    }

    fn watch(inner: B, retired: CancellationToken) -> Self {
        Self {
            inner,
            retired: Some(Box::pin(retired.cancelled_owned())),
            at_boundary: true,
        }
    }
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for GenerationBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let retired = match &mut this.retired {
            Some(f) => f.as_mut().poll(cx).is_ready(),
            None => false,
        };
        if retired && this.at_boundary {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
            && let Some(last) = data.last()
        {
            this.at_boundary = *last == b'\n';
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_requests_are_recognised() {
        let u = |s: &str| s.parse::<http::Uri>().unwrap();
        assert!(is_watch(&u("/api/v1/pods?watch=true&resourceVersion=1")));
        assert!(is_watch(&u("/api/v1/pods?fieldSelector=x&watch=1")));
        assert!(!is_watch(&u("/api/v1/pods?watch=false")));
        assert!(!is_watch(&u("/api/v1/pods")));
        assert!(!is_watch(&u("/api/v1/pods?labelSelector=watch%3Dtrue")));
    }

    #[tokio::test]
    async fn a_retired_watch_ends_between_events_and_a_plain_body_does_not() {
        use http_body_util::BodyExt;
        use http_body_util::StreamBody;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let inner = StreamBody::new(stream);
        let token = CancellationToken::new();
        let mut body = GenerationBody::watch(inner, token.clone());
        tx.send(Ok(Frame::data(Bytes::from_static(b"{\"type\":\"ADDED\""))))
            .await
            .unwrap();
        let f = body.frame().await.unwrap().unwrap();
        assert_eq!(f.data_ref().unwrap().as_ref(), b"{\"type\":\"ADDED\"");
        // Retired mid-event: the rest of the event still comes, then the stream ends.
        token.cancel();
        tx.send(Ok(Frame::data(Bytes::from_static(b"}\n"))))
            .await
            .unwrap();
        let f = body.frame().await.unwrap().unwrap();
        assert_eq!(f.data_ref().unwrap().as_ref(), b"}\n");
        assert!(body.frame().await.is_none(), "ends at the boundary");

        // An idle watch ends as soon as it is retired.
        let (_tx2, rx2) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        let inner = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx2));
        let token = CancellationToken::new();
        let mut body = GenerationBody::watch(inner, token.clone());
        let waiter = tokio::spawn(async move { body.frame().await.is_none() });
        tokio::task::yield_now().await;
        token.cancel();
        assert!(waiter.await.unwrap());

        // A plain body is never cut.
        let body = GenerationBody::plain(Body::from(b"{\"kind\":\"Pod\"}".to_vec()));
        let all = body.collect().await.unwrap().to_bytes();
        assert_eq!(all.as_ref(), b"{\"kind\":\"Pod\"}");
    }

    /// Against the fake API server: an anonymous generation is refused, the rotated one (the
    /// admin certificate) is accepted on the same shared client, and a watch opened before the
    /// swap ends cleanly so its owner re-watches on the new generation.
    #[tokio::test]
    async fn rotation_moves_the_shared_client_to_the_new_certificate_and_ends_old_watches() {
        use futures::StreamExt;
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, WatchParams};
        let dir = tempfile::tempdir().unwrap();
        let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Options {
            kubeconfig_path: Some(dir.path().join("kubeconfig")),
            ..Default::default()
        })
        .await
        .unwrap();
        let mut base = crate::apiclient::config_from_kubeconfig(&server.kubeconfig_path)
            .await
            .unwrap();
        base.auth_info = Default::default();
        let rotating = RotatingClient::new(base, ClientSettings::default(), None).unwrap();
        let client = rotating.client();
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let err = cms.list(&Default::default()).await.unwrap_err().to_string();
        assert!(err.contains("401") || err.contains("nauthorized"), "{err}");

        let (cert, key) = server.client_cert.clone().unwrap();
        let admin = CertKey::from_pem("admin", &cert, &key).unwrap();
        rotating.rotate(&admin).unwrap();
        cms.list(&Default::default()).await.unwrap();
        let mut watch = cms
            .watch(&WatchParams::default().timeout(60), "0")
            .await
            .unwrap()
            .boxed();
        // A second rotation retires the generation the watch runs on: it ends, no error.
        rotating.rotate(&admin).unwrap();
        let end = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                match watch.next().await {
                    None => return Ok(()),
                    Some(Err(e)) => return Err(e.to_string()),
                    Some(Ok(_)) => {}
                }
            }
        })
        .await
        .expect("the old watch ends after the rotation");
        assert_eq!(end, Ok(()));
        // The shared client keeps working.
        cms.list(&Default::default()).await.unwrap();
    }
}
