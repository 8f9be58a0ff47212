//! In-memory Kubernetes API server test fixture: owns server start-up (listener, TLS, auth,
//! kubeconfig, the certificate controllers) and exposes [`FakeApiServer`] with store
//! inspection helpers for tests; the `fake-apiserver` binary wraps it.

pub mod approver;
pub mod authn;
pub mod authz;
pub mod certificate_controller;
pub mod certificates;
pub mod ephemeral;
pub mod error;
pub mod events;
pub mod faults;
pub mod jsonpatch;
pub mod logs;
pub mod proto;
pub mod resize;
pub mod resources;
pub mod reviews;
pub mod selector;
pub mod server;
pub mod signer;
pub mod smp;
pub mod store;
pub mod strategy;
pub mod streaming;
pub mod table;
pub mod tls;
pub mod watch;

use hyper_util::rt::TokioIo;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use authn::{BootstrapToken, UserInfo};
pub use error::ApiError;
pub use signer::IssuedCertificate;
pub use store::Store;
pub use tls::KubeconfigAuth;

/// Start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Binding the listener failed.
    #[error("binding 127.0.0.1:{port}: {source}")]
    Bind {
        /// Requested port.
        port: u16,
        /// Underlying error.
        source: std::io::Error,
    },
    /// TLS material could not be produced.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Writing the kubeconfig failed.
    #[error("writing kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Target path.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
}

/// Options for [`FakeApiServer::start`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Port on 127.0.0.1 (0 picks a free one).
    pub port: u16,
    /// Serve HTTPS with a generated CA (otherwise plain HTTP).
    pub tls: bool,
    /// Require a client certificate or bearer token on every API request.
    pub require_auth: bool,
    /// Credentials written into the kubeconfig.
    pub kubeconfig_auth: KubeconfigAuth,
    /// Where to write the kubeconfig (default: a file under the system temp dir).
    pub kubeconfig_path: Option<PathBuf>,
    /// Interval between progress BOOKMARKs on watches that allow them.
    pub bookmark_interval: Duration,
    /// Number of changes kept for watches from an older resourceVersion.
    pub history_limit: usize,
    /// Maximum lifetime of certificates the CSR signer issues (kube-controller-manager's
    /// `--cluster-signing-duration`, default one year); a CSR's `expirationSeconds` can only
    /// shorten it. Tests of rotation use seconds (e.g. 30 s).
    pub csr_cert_lifetime: Duration,
    /// Auto-approve kubelet client CSRs as kube-controller-manager's `csrapproving`
    /// controller does (serving CSRs never are).
    pub csr_auto_approve: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            port: 0,
            tls: true,
            require_auth: true,
            kubeconfig_auth: KubeconfigAuth::ClientCert,
            kubeconfig_path: None,
            bookmark_interval: Duration::from_secs(5),
            history_limit: 10_000,
            csr_cert_lifetime: signer::DEFAULT_MAX_LIFETIME,
            csr_auto_approve: false,
        }
    }
}

/// A running fake API server.
pub struct FakeApiServer {
    /// Base URL (`https://127.0.0.1:PORT`).
    pub url: String,
    /// Bound address.
    pub addr: SocketAddr,
    /// Path of the written kubeconfig.
    pub kubeconfig_path: PathBuf,
    /// CA certificate PEM (HTTPS only).
    pub ca_pem: Option<String>,
    /// Admin bearer token (always accepted).
    pub token: String,
    /// Admin client certificate and key PEM (HTTPS only).
    pub client_cert: Option<(String, String)>,
    api: Arc<server::Api>,
    tls: Option<TlsServing>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    controllers: Arc<certificate_controller::CertificateControllers>,
    controllers_cancel: tokio_util::sync::CancellationToken,
    controllers_task: Option<JoinHandle<()>>,
}

/// The TLS acceptor and the verifier of client certificates presented to it.
type TlsServing = (tokio_rustls::TlsAcceptor, tls::ClientCertAuthenticator);

fn resource_by_plural(plural: &str) -> Option<&'static resources::ResourceInfo> {
    resources::RESOURCES
        .iter()
        .find(|r| r.plural == plural || r.qualified() == plural)
}

impl FakeApiServer {
    /// The TokenReview / SubjectAccessReview answers (tokens, authorizer), for tests.
    pub fn reviews(&self) -> &Arc<reviews::Reviews> {
        &self.api.reviews
    }

    /// Binds, writes the kubeconfig and starts serving in the background.
    pub async fn start(opts: Options) -> Result<Self, StartError> {
        let listener = TcpListener::bind(("127.0.0.1", opts.port))
            .await
            .map_err(|source| StartError::Bind {
                port: opts.port,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            port: opts.port,
            source,
        })?;
        let scheme = if opts.tls { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let seed = format!(
            "{}/{}/{:?}",
            std::process::id(),
            addr,
            chrono::Utc::now().timestamp_nanos_opt()
        );
        let token = hex::encode(&Sha256::digest(seed.as_bytes())[..16]);
        let generated = tls::TlsMaterial::generate()?;
        let kubelet_tls = generated.kubelet_client_config()?;
        let ca_issuer = generated.ca_issuer()?;
        let material = opts.tls.then_some(generated);
        let tls_serving = match &material {
            Some(m) => Some((
                tokio_rustls::TlsAcceptor::from(m.server_config()?),
                m.client_verifier()?,
            )),
            None => None,
        };
        let store = Store::new(opts.history_limit);
        store.add_token(token.clone(), UserInfo::admin());
        let controllers = certificate_controller::CertificateControllers::new(
            store.clone(),
            signer::Signer::new(ca_issuer, opts.csr_cert_lifetime),
            opts.csr_auto_approve,
        );
        let controllers_cancel = tokio_util::sync::CancellationToken::new();
        let controllers_task = tokio::spawn(controllers.clone().run(controllers_cancel.clone()));
        let api = Arc::new(server::Api {
            store,
            require_auth: opts.require_auth,
            bookmark_interval: opts.bookmark_interval,
            address: addr.to_string(),
            signing_secret: format!("{token}-signing"),
            counters: Mutex::new(BTreeMap::new()),
            faults: Arc::new(faults::Faults::default()),
            kubelet_tls,
            reviews: Arc::new(reviews::Reviews::default()),
        });
        let kubeconfig_path = opts.kubeconfig_path.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!(
                "fake-apiserver-{}-{}.kubeconfig",
                std::process::id(),
                addr.port()
            ))
        });
        let client_cert = material
            .as_ref()
            .map(|m| (m.client_cert_pem.clone(), m.client_key_pem.clone()));
        let kc = tls::kubeconfig(
            &url,
            material.as_ref().map(|m| m.ca_pem.as_str()),
            opts.kubeconfig_auth,
            client_cert.as_ref().map(|(c, k)| (c.as_str(), k.as_str())),
            &token,
        );
        if let Some(dir) = kubeconfig_path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| StartError::Kubeconfig {
                path: kubeconfig_path.clone(),
                source,
            })?;
        }
        std::fs::write(&kubeconfig_path, kc).map_err(|source| StartError::Kubeconfig {
            path: kubeconfig_path.clone(),
            source,
        })?;
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(serve(listener, tls_serving.clone(), api.clone(), rx));
        Ok(FakeApiServer {
            url,
            addr,
            kubeconfig_path,
            ca_pem: material.map(|m| m.ca_pem),
            token,
            client_cert,
            api,
            tls: tls_serving,
            shutdown: Some(tx),
            task: Some(task),
            controllers,
            controllers_cancel,
            controllers_task: Some(controllers_task),
        })
    }

    /// A CertificateSigningRequest by name.
    pub fn csr(&self, name: &str) -> Option<Value> {
        self.get("certificatesigningrequests", "", name)
    }

    /// Approves a CSR as `kubectl certificate approve` does (an `Approved` condition through
    /// the `approval` subresource; a Denied CSR is refused with 422). Already approved: no-op.
    pub fn approve_csr(&self, name: &str) -> Result<Value, ApiError> {
        self.add_approval_condition(name, "Approved", "FakeApiServerApprove")
    }

    /// Denies a CSR as `kubectl certificate deny` does.
    pub fn deny_csr(&self, name: &str) -> Result<Value, ApiError> {
        self.add_approval_condition(name, "Denied", "FakeApiServerDeny")
    }

    fn add_approval_condition(
        &self,
        name: &str,
        ty: &str,
        reason: &str,
    ) -> Result<Value, ApiError> {
        let info = resource_by_plural("certificatesigningrequests")
            .ok_or_else(|| ApiError::path_not_found("certificatesigningrequests"))?;
        let mut csr = self.api.store.get(info, "", name)?;
        if certificates::has_condition(&csr, ty) {
            return Ok(csr);
        }
        let cond = serde_json::json!({"type": ty, "status": "True", "reason": reason,
            "message": format!("This CSR was {} by the fake API server's test helper.", ty.to_lowercase())});
        if !csr["status"].is_object() {
            csr["status"] = serde_json::json!({});
        }
        match csr["status"]["conditions"].as_array_mut() {
            Some(a) => a.push(cond),
            None => csr["status"]["conditions"] = serde_json::json!([cond]),
        }
        self.api
            .store
            .update_subresource(info, "", name, csr, strategy::Subresource::Approval)
    }

    /// Every certificate the CSR signer issued so far, oldest first.
    pub fn issued_certificates(&self) -> Vec<IssuedCertificate> {
        self.controllers.issued()
    }

    /// Changes the maximum lifetime of certificates signed from now on (see
    /// [`Options::csr_cert_lifetime`]).
    pub fn set_csr_cert_lifetime(&self, d: Duration) {
        self.controllers.signer().set_max_lifetime(d);
    }

    /// A client certificate for `cn` / `org` signed by the server's CA with exactly this
    /// validity (it may be already expired or not yet valid): (certificate PEM, key PEM).
    pub fn mint_client_certificate(
        &self,
        cn: &str,
        org: Option<&str>,
        not_before: chrono::DateTime<chrono::Utc>,
        not_after: chrono::DateTime<chrono::Utc>,
    ) -> Result<(String, String), signer::SignError> {
        self.controllers
            .signer()
            .mint_client_certificate(cn, org, not_before, not_after)
    }

    /// Turns the kubelet client CSR auto-approver on or off at run time.
    pub fn set_csr_auto_approve(&self, on: bool) {
        self.controllers.set_auto_approve(on);
    }

    /// Creates the bootstrap token Secret `kube-system/bootstrap-token-<id>`.
    pub fn create_bootstrap_token(&self, token: &BootstrapToken) -> Result<Value, ApiError> {
        self.create("secrets", "kube-system", token.secret_object())
    }

    /// Writes a bootstrap kubeconfig (this server, its CA, `token:`) to `path`, as kubeadm's
    /// `bootstrap-kubelet.conf`.
    pub fn write_bootstrap_kubeconfig(
        &self,
        path: &std::path::Path,
        token: &str,
    ) -> std::io::Result<()> {
        let kc = tls::bootstrap_kubeconfig(&self.url, self.ca_pem.as_deref(), token);
        std::fs::write(path, kc)
    }

    /// Polls `f` every 20 ms until it returns Some or `timeout` passes.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&FakeApiServer) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(v) = f(self) {
                return Some(v);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The object store (for direct inspection or seeding).
    pub fn store(&self) -> &Arc<Store> {
        &self.api.store
    }

    /// One object by resource plural (`pods`, `nodes`, `leases`, ...); `ns` is ignored for
    /// cluster-scoped resources.
    pub fn get(&self, plural: &str, ns: &str, name: &str) -> Option<Value> {
        let info = resource_by_plural(plural)?;
        self.api.store.get(info, ns, name).ok()
    }

    /// All objects of a resource, optionally in one namespace.
    pub fn list(&self, plural: &str, ns: Option<&str>) -> Vec<Value> {
        resource_by_plural(plural)
            .map(|info| self.api.store.all(info, ns))
            .unwrap_or_default()
    }

    /// Creates an object directly in the store (as if POSTed).
    pub fn create(&self, plural: &str, ns: &str, obj: Value) -> Result<Value, ApiError> {
        let info = resource_by_plural(plural).ok_or_else(|| ApiError::path_not_found(plural))?;
        self.api.store.create(info, ns, obj)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.api.store.resource_version()
    }

    /// Drops the watch history so older resourceVersions get 410 Gone.
    pub fn compact(&self) {
        self.api.store.compact();
    }

    /// Requests served so far, keyed by `VERB resource[/subresource]` (e.g. `PATCH pods/status`).
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        self.api
            .counters
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// Makes every API request (not health checks) fail with `code` (e.g. 500, 503) until
    /// called with `None`: simulates an API server returning errors.
    pub fn fail_requests(&self, code: Option<u16>) {
        self.api
            .faults
            .set_failure(code.map(|code| faults::Failure {
                code,
                retry_after: None,
            }));
    }

    /// The fault switches (outage, failures, 429 with `Retry-After`, latency, dropped
    /// watches) and the log of requests with their arrival times (per-second rates).
    pub fn faults(&self) -> &Arc<faults::Faults> {
        &self.api.faults
    }

    /// Simulates an outage: closes the listener and every open connection (watches end) and
    /// stops the certificate controllers, but keeps the store, credentials and port for
    /// [`FakeApiServer::resume`].
    pub async fn pause(&mut self) {
        self.stop().await;
    }

    /// Starts the certificate controllers (kube-controller-manager's CSR approver and signer)
    /// if they are not running; they resync every CSR on start.
    fn start_controllers(&mut self) {
        if self.controllers_task.is_none() {
            self.controllers_cancel = tokio_util::sync::CancellationToken::new();
            let run = self
                .controllers
                .clone()
                .run(self.controllers_cancel.clone());
            self.controllers_task = Some(tokio::spawn(run));
        }
    }

    /// Serves again on the same address with the same state after [`FakeApiServer::pause`].
    pub async fn resume(&mut self) -> Result<(), StartError> {
        if self.task.is_some() {
            return Ok(());
        }
        let port = self.addr.port();
        let listener = TcpListener::bind(self.addr)
            .await
            .map_err(|source| StartError::Bind { port, source })?;
        let (tx, rx) = oneshot::channel();
        self.task = Some(tokio::spawn(serve(
            listener,
            self.tls.clone(),
            self.api.clone(),
            rx,
        )));
        self.shutdown = Some(tx);
        self.start_controllers();
        Ok(())
    }

    /// Stops accepting connections and closes open ones (watches end); stops the certificate
    /// controllers.
    pub async fn shutdown(mut self) {
        self.stop().await;
    }

    /// Stops serving and the certificate controllers (which, like kube-controller-manager,
    /// make no progress while the API server is down).
    async fn stop(&mut self) {
        self.controllers_cancel.cancel();
        if let Some(t) = self.controllers_task.take() {
            let _ = t.await;
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.controllers_cancel.cancel();
    }
}

async fn serve(
    listener: TcpListener,
    tls: Option<TlsServing>,
    api: Arc<server::Api>,
    mut shutdown: oneshot::Receiver<()>,
) {
    let mut conns = tokio::task::JoinSet::new();
    let streams = streaming::StreamTasks::default();
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        // Taken before the outage check: `set_outage` raises the flag before it bumps the
        // epoch, so a connection either is refused here or sees the bump. One accepted after an
        // outage ended has already seen its bump and is not closed by it.
        let mut epoch = api.faults.connection_epoch();
        if api.faults.outage() {
            api.faults
                .record(tokio::time::Instant::now(), faults::CONNECT.to_owned(), 0);
            // RST instead of FIN: the client sees the connection reset at once.
            let _ = stream.set_zero_linger();
            drop(stream);
            continue;
        }
        let api = api.clone();
        let tls = tls.clone();
        let streams = streams.clone();
        conns.spawn(async move {
            let served = async move {
                match tls {
                    Some((acc, verifier)) => match acc.accept(stream).await {
                        Ok(conn) => {
                            let peer = conn.get_ref().1.peer_certificates().map(|chain| {
                                Arc::new(tls::PeerCertificates::new(chain, verifier.clone()))
                            });
                            serve_conn(TokioIo::new(conn), api, peer, streams).await;
                        }
                        Err(e) => tracing::debug!(error = %e, "TLS handshake failed"),
                    },
                    None => serve_conn(TokioIo::new(stream), api, None, streams).await,
                }
            };
            // An outage begins: every connection open at that moment goes down with the server.
            tokio::select! {
                () = served => {}
                _ = epoch.changed() => {}
            }
        });
    }
    conns.abort_all();
    while conns.join_next().await.is_some() {}
    streams.shutdown().await;
}

/// Serves one connection (HTTP/1.1 with upgrades: exec, attach, port-forward); its client
/// certificate chain, if any, is verified on every request (so one that expires mid-connection
/// stops authenticating, as kube-apiserver's x509 authenticator); upgraded streams are spliced
/// on `streams`.
async fn serve_conn<I>(
    io: I,
    api: Arc<server::Api>,
    peer: Option<Arc<tls::PeerCertificates>>,
    streams: streaming::StreamTasks,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(streams.clone());
        let cert_user = peer.as_ref().and_then(|p| p.user());
        let api = api.clone();
        async move {
            // A connection still open when an outage begins is closed by `serve` soon after;
            // a request read from it in between is not served but reset with the connection.
            if api.faults.outage() {
                api.faults
                    .record(tokio::time::Instant::now(), faults::CONNECT.to_owned(), 0);
                return Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
            }
            Ok(api.handle(req, cert_user).await)
        }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, svc)
        .with_upgrades()
        .await
    {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}
