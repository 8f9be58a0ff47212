//! The serving certificate manager (upstream `NewKubeletServerCertificateManager`, used with
//! `serverTLSBootstrap`): a manager of kind `Serving` for the node's host name and addresses,
//! storing `kubelet-server-*.pem` in `--cert-dir` and reloading the HTTPS port's TLS after
//! each new pair. Receives the API client, the node's names and addresses and the serving
//! TLS; emits the manager the agent runs.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use super::CertError;
use super::csr::{ApiSigner, Template};
use super::manager::{CertificateManager, Kind, ManagerConfig, OnUpdate, Timings};
use super::store::FileStore;
use crate::clock::Clock;

/// The prefix of the serving certificate files in `--cert-dir`.
pub const SERVER_PREFIX: &str = "kubelet-server";

/// Makes the HTTPS server take up a newly stored serving certificate; the reason on failure.
pub type Reload = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The serving certificate manager; `Ok(None)` when the node has no IP address to ask for
/// (upstream requests nothing then).
pub fn serving_manager(
    client: kube::Client,
    node_name: &str,
    hostnames: &[String],
    ips: &[IpAddr],
    cert_dir: &Path,
    reload_tls: Reload,
    timings: Timings,
) -> Result<Option<Arc<CertificateManager>>, CertError> {
    let Some(template) = Template::node_serving(node_name, hostnames, ips) else {
        return Ok(None);
    };
    let store = FileStore::new(SERVER_PREFIX, cert_dir, None, None)?;
    let initial = match store.current() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "the stored serving certificate does not load; requesting a new one");
            None
        }
    };
    let on_update: OnUpdate = Arc::new(move |_pair| {
        reload_tls().map_err(|e| CertError::invalid("serving certificate", e))
    });
    Ok(Some(CertificateManager::new(
        ManagerConfig {
            kind: Kind::Serving,
            template,
            store,
            cert_dir: cert_dir.to_owned(),
            signer: Arc::new(ApiSigner::new(client)),
            bootstrap: None,
            on_update,
            clock: Clock::new(),
            timings,
        },
        initial,
        false,
    )))
}
