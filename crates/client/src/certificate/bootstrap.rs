//! TLS bootstrap and the kubelet's API client (upstream `bootstrap.LoadClientConfig` /
//! `LoadClientCert` and `buildKubeletClientConfig`): decides whether `--kubeconfig` still
//! holds a valid client certificate; when it does not and `--bootstrap-kubeconfig` is set,
//! writes a kubeconfig with the bootstrap kubeconfig's cluster whose client certificate and key
//! are `<cert-dir>/kubelet-client-current.pem`, and gets that certificate through a CSR made
//! with the bootstrap credentials. With `rotateCertificates` the returned client follows the
//! client certificate manager's pair (see `transport`); without it the first certificate is
//! awaited before the kubelet starts, as upstream. Receives the paths and flags; emits the
//! shared `kube::Client` and the manager the agent runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use tracing::{info, warn};

use super::csr::{ApiSigner, CertificateSigner, Template};
use super::manager::{CertificateManager, Kind, ManagerConfig, Timings};
use super::store::{FileStore, write_private};
use super::transport::RotatingClient;
use super::{CertError, CertInfo, CertKey};
use crate::apiclient::{ClientSettings, client_from_kubeconfig, config_from_parsed};
use crate::clock::Clock;

/// What the API client is built from (flags and config).
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// `--kubeconfig`.
    pub kubeconfig: PathBuf,
    /// `--bootstrap-kubeconfig`.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir`.
    pub cert_dir: PathBuf,
    pub node_name: String,
    /// `rotateCertificates`.
    pub rotate: bool,
    pub settings: ClientSettings,
    pub timings: Timings,
}

/// The kubelet's API client and, with rotation, the manager that keeps its certificate.
pub struct ApiClient {
    pub client: kube::Client,
    /// Run by the agent (`AgentConfig::client_certificates`).
    pub certificates: Option<Arc<CertificateManager>>,
}

/// The prefix of the client certificate files in `--cert-dir`.
pub const CLIENT_PREFIX: &str = "kubelet-client";

/// Builds the API client as upstream's kubelet does at start-up (see the module doc).
pub async fn api_client(opts: &ClientOptions) -> Result<ApiClient, CertError> {
    if opts.bootstrap_kubeconfig.is_none() && !opts.rotate {
        let client = client_from_kubeconfig(&opts.kubeconfig, &opts.settings)
            .await
            .map_err(|e| CertError::Api(format!("unable to load kubeconfig: {e}")))?;
        return Ok(ApiClient {
            client,
            certificates: None,
        });
    }
    let mut bootstrap_signer: Option<Arc<dyn CertificateSigner>> = None;
    if let Some(bootstrap) = &opts.bootstrap_kubeconfig {
        let valid = client_config_still_valid(&opts.kubeconfig);
        if valid {
            info!(path = %opts.kubeconfig.display(), "Current kubeconfig file contents are still valid, no bootstrap necessary");
        } else {
            let store = FileStore::new(CLIENT_PREFIX, &opts.cert_dir, None, None)?;
            write_kubeconfig_from_bootstrap(bootstrap, &opts.kubeconfig, &store.current_path())?;
            info!(
                "Use the bootstrap credentials to request a cert, and set kubeconfig to point to the certificate dir"
            );
        }
        match client_from_kubeconfig(bootstrap, &opts.settings).await {
            Ok(client) => bootstrap_signer = Some(Arc::new(ApiSigner::new(client))),
            // kubeadm deletes bootstrap-kubelet.conf after the join while its drop-in keeps
            // passing the flag: with a valid kubeconfig that is fine (no fallback then).
            Err(e) if valid => warn!(
                error = %e,
                "the bootstrap kubeconfig does not load; an expired client certificate will not be renewed with it"
            ),
            Err(e) => {
                return Err(CertError::Api(format!(
                    "unable to load bootstrap kubeconfig: {e}"
                )));
            }
        }
    }
    let kubeconfig = read_kubeconfig(&opts.kubeconfig)?;
    let identity = user_identity(&opts.kubeconfig, &kubeconfig);
    if opts.rotate && bootstrap_signer.is_none() && identity.is_none() {
        warn!(
            path = %opts.kubeconfig.display(),
            "rotateCertificates: the kubeconfig has no client certificate and no --bootstrap-kubeconfig is set; client certificate rotation is off"
        );
        let client = client_from_kubeconfig(&opts.kubeconfig, &opts.settings)
            .await
            .map_err(|e| CertError::Api(format!("unable to load kubeconfig: {e}")))?;
        return Ok(ApiClient {
            client,
            certificates: None,
        });
    }
    let (cert_file, key_file) = match &identity {
        Some(Identity::Files { cert, key }) => (Some(cert.clone()), Some(key.clone())),
        _ => (None, None),
    };
    let store = FileStore::new(CLIENT_PREFIX, &opts.cert_dir, cert_file, key_file)?;
    let clock = Clock::new();
    let mut force = false;
    let mut initial = match store.current() {
        Ok(c) => c,
        Err(e) if bootstrap_signer.is_some() => {
            warn!(error = %e, "the stored client certificate does not load; bootstrapping a new one");
            None
        }
        Err(e) => return Err(e),
    };
    if initial.is_none()
        && let Some(Identity::Data { cert, key }) = &identity
    {
        // A pair embedded in the kubeconfig (kubeadm's control-plane nodes): stored, used
        // until it is rotated out at once, as upstream.
        let pair = CertKey::from_pem(&opts.kubeconfig.display().to_string(), cert, key)?;
        if let Err(e) = store.update(&pair, clock.now()) {
            warn!(error = %e, "Unable to set the cert/key pair to the bootstrap certificate");
        }
        initial = Some(pair);
        force = true;
    }
    let base = base_config(&opts.kubeconfig, kubeconfig).await?;
    let rotating = RotatingClient::new(base, opts.settings.clone(), initial.as_ref())?;
    let client = rotating.client();
    let on_update = {
        let rotating = rotating.clone();
        Arc::new(move |pair: &CertKey| rotating.rotate(pair))
    };
    let manager = CertificateManager::new(
        ManagerConfig {
            kind: Kind::Client,
            template: Template::node_client(&opts.node_name),
            store,
            cert_dir: opts.cert_dir.clone(),
            signer: Arc::new(ApiSigner::new(client.clone())),
            bootstrap: bootstrap_signer,
            on_update,
            clock,
            timings: opts.timings,
        },
        initial.clone(),
        force,
    );
    let valid = initial
        .as_ref()
        .is_some_and(|c| !c.info.expired_at(SystemTime::now()));
    if opts.rotate {
        return Ok(ApiClient {
            client,
            certificates: Some(manager),
        });
    }
    // Bootstrap without rotation: wait for the certificate, then use the kubeconfig as is.
    if !valid {
        info!("Using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file");
        manager.rotate().await?;
    }
    let client = client_from_kubeconfig(&opts.kubeconfig, &opts.settings)
        .await
        .map_err(|e| CertError::Api(format!("unable to load kubeconfig: {e}")))?;
    Ok(ApiClient {
        client,
        certificates: None,
    })
}

fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, CertError> {
    Kubeconfig::read_from(path).map_err(|e| CertError::Kubeconfig {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// The kubeconfig's cluster settings without any client certificate (the manager supplies
/// the identity).
async fn base_config(path: &Path, mut kubeconfig: Kubeconfig) -> Result<kube::Config, CertError> {
    for named in &mut kubeconfig.auth_infos {
        if let Some(a) = &mut named.auth_info {
            a.client_certificate = None;
            a.client_certificate_data = None;
            a.client_key = None;
            a.client_key_data = None;
        }
    }
    config_from_parsed(path, kubeconfig)
        .await
        .map_err(|e| CertError::Kubeconfig {
            path: path.to_owned(),
            message: e.to_string(),
        })
}

/// How the current context's user presents a client certificate.
enum Identity {
    Files { cert: PathBuf, key: PathBuf },
    Data { cert: String, key: String },
}

/// The context named by `current-context`.
fn current_context(kubeconfig: &Kubeconfig) -> Option<&Context> {
    let name = kubeconfig.current_context.as_deref()?;
    kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == name)?
        .context
        .as_ref()
}

fn current_user(kubeconfig: &Kubeconfig) -> Option<&AuthInfo> {
    let user = current_context(kubeconfig)?.user.as_deref()?;
    kubeconfig
        .auth_infos
        .iter()
        .find(|a| a.name == user)?
        .auth_info
        .as_ref()
}

fn current_cluster(kubeconfig: &Kubeconfig) -> Option<&Cluster> {
    let cluster = &current_context(kubeconfig)?.cluster;
    kubeconfig
        .clusters
        .iter()
        .find(|c| &c.name == cluster)?
        .cluster
        .as_ref()
}

/// A path in a kubeconfig, relative to the kubeconfig's directory.
fn resolve(kubeconfig_path: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_owned()
    } else {
        kubeconfig_path
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(p)
    }
}

fn user_identity(path: &Path, kubeconfig: &Kubeconfig) -> Option<Identity> {
    use base64::Engine;
    let user = current_user(kubeconfig)?;
    let decode = |s: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    };
    if let (Some(c), Some(k)) = (&user.client_certificate_data, &user.client_key_data) {
        use secrecy::ExposeSecret;
        return Some(Identity::Data {
            cert: decode(c)?,
            key: decode(k.expose_secret())?,
        });
    }
    match (&user.client_certificate, &user.client_key) {
        (Some(c), Some(k)) => Some(Identity::Files {
            cert: resolve(path, c),
            key: resolve(path, k),
        }),
        _ => None,
    }
}

/// Upstream `isClientConfigStillValid`: the kubeconfig exists, loads, has a client
/// certificate and key that belong together, and no certificate in it has expired. Every
/// failure is logged and means "bootstrap".
pub fn client_config_still_valid(path: &Path) -> bool {
    if !path.exists() {
        return false;
    }
    let kubeconfig = match read_kubeconfig(path) {
        Ok(k) => k,
        Err(e) => {
            warn!(error = %e, "unable to read existing bootstrap client config from {}", path.display());
            return false;
        }
    };
    let (cert, key) = match user_identity(path, &kubeconfig) {
        Some(Identity::Data { cert, key }) => (cert, key),
        Some(Identity::Files { cert, key }) => {
            match (
                std::fs::read_to_string(&cert),
                std::fs::read_to_string(&key),
            ) {
                (Ok(c), Ok(k)) => (c, k),
                _ => {
                    warn!(
                        "unable to load TLS configuration from existing bootstrap client config read from {}",
                        path.display()
                    );
                    return false;
                }
            }
        }
        None => {
            warn!(
                "unable to read TLS certificates from existing bootstrap client config read from {}",
                path.display()
            );
            return false;
        }
    };
    let pair = match CertKey::from_pem(&path.display().to_string(), &cert, &key) {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "unable to load TLS certificates from existing bootstrap client config read from {}", path.display());
            return false;
        }
    };
    let now = SystemTime::now();
    for der in &pair.chain {
        match CertInfo::parse(der.as_ref()) {
            Some(info) if !info.expired_at(now) => {}
            Some(info) => {
                warn!(
                    "part of the existing bootstrap client certificate in {} is expired: {}",
                    path.display(),
                    chrono::DateTime::<chrono::Utc>::from(info.not_after)
                );
                return false;
            }
            None => return false,
        }
    }
    true
}

/// Upstream `writeKubeconfigFromBootstrapping`: the bootstrap kubeconfig's server and CA, and
/// `pem_path` as both client certificate and key, in context `default-context` (0600).
pub fn write_kubeconfig_from_bootstrap(
    bootstrap: &Path,
    kubeconfig: &Path,
    pem_path: &Path,
) -> Result<(), CertError> {
    let source = read_kubeconfig(bootstrap)?;
    let cluster = current_cluster(&source).ok_or_else(|| CertError::Kubeconfig {
        path: bootstrap.to_owned(),
        message: "the current context names no cluster".into(),
    })?;
    if cluster.server.as_deref().unwrap_or_default().is_empty() {
        return Err(CertError::Kubeconfig {
            path: bootstrap.to_owned(),
            message: "the current cluster has no server".into(),
        });
    }
    let out = Kubeconfig {
        clusters: vec![NamedCluster {
            name: "default-cluster".into(),
            cluster: Some(Cluster {
                server: cluster.server.clone(),
                insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
                certificate_authority: cluster
                    .certificate_authority
                    .as_deref()
                    .map(|p| resolve(bootstrap, p).display().to_string()),
                certificate_authority_data: if cluster.certificate_authority.is_some() {
                    None
                } else {
                    cluster.certificate_authority_data.clone()
                },
                ..Default::default()
            }),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "default-auth".into(),
            auth_info: Some(AuthInfo {
                client_certificate: Some(pem_path.display().to_string()),
                client_key: Some(pem_path.display().to_string()),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: "default-context".into(),
            context: Some(Context {
                cluster: "default-cluster".into(),
                user: Some("default-auth".into()),
                namespace: Some("default".into()),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        current_context: Some("default-context".into()),
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        ..Default::default()
    };
    let yaml = crate::yaml::to_string(&out).map_err(|e| CertError::Kubeconfig {
        path: kubeconfig.to_owned(),
        message: e.to_string(),
    })?;
    if let Some(dir) = kubeconfig.parent() {
        std::fs::create_dir_all(dir).map_err(|e| CertError::io(dir, e))?;
    }
    write_private(kubeconfig, yaml.as_bytes())
}

#[cfg(test)]
#[path = "bootstrap_tests.rs"]
mod tests;
