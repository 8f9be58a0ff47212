//! TLS of the kubelet's HTTPS port. Owns the serving certificate files in `--cert-dir` when it
//! generates them; receives the TLS settings (`tlsCertFile`/`tlsPrivateKeyFile`,
//! `tlsMinVersion`, `tlsCipherSuites`, `authentication.x509.clientCAFile`); emits the current
//! rustls `ServerConfig` for each new connection plus the client CA verifier the
//! authenticator uses per request, both reloaded when the files change on disk.
//!
//! Client certificates are requested but not required during the handshake, and their chain
//! is checked per request (as the Go kubelet does), so a bad certificate gets a 401, not a
//! handshake failure; the handshake still proves possession of the certificate's key.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::sync;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme, SupportedCipherSuite};

/// What the serving TLS is built from.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// `tlsCertFile` / `tlsPrivateKeyFile`; both empty → self-signed in `cert_dir`.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// `--cert-dir` (default `<rootDir>/pki`).
    pub cert_dir: PathBuf,
    /// Host name and addresses the self-signed certificate is for.
    pub hostname: String,
    pub ips: Vec<std::net::IpAddr>,
    /// `tlsMinVersion` (`""`, `VersionTLS12`, `VersionTLS13`; 1.0/1.1 are raised to 1.2).
    pub min_version: String,
    /// `tlsCipherSuites` (Go names).
    pub cipher_suites: Vec<String>,
    /// `tlsCurvePreferences` (Go `tls.CurveID` numbers, in preference order; empty: defaults).
    pub curve_preferences: Vec<i32>,
    /// `authentication.x509.clientCAFile`.
    pub client_ca_file: Option<PathBuf>,
    /// `serverTLSBootstrap`: serve the pair the serving certificate manager keeps in
    /// `cert_dir` (`kubelet-server-current.pem`); until it exists every handshake fails, as
    /// upstream ("no serving certificate available for the kubelet"). No self-signed pair.
    pub server_tls_bootstrap: bool,
}

/// Start-up errors; each names the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{field}: reading {path}: {source}")]
    Read {
        field: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{field}: {path}: {message}")]
    Pem {
        field: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("tlsCertFile and tlsPrivateKeyFile must be set together")]
    HalfPair,
    #[error("tlsMinVersion: {0:?} is not supported (expected VersionTLS12 or VersionTLS13)")]
    MinVersion(String),
    #[error(
        "tlsCipherSuites: {0:?} is not supported (supported: the TLS 1.3 suites and the ECDHE AES-GCM / CHACHA20-POLY1305 TLS 1.2 suites)"
    )]
    CipherSuite(String),
    #[error(
        "tlsCurvePreferences: {0} is not supported (supported: 23 (P-256), 24 (P-384), 29 (X25519))"
    )]
    Curve(i32),
    #[error("tlsCipherSuites: no suite usable with tlsMinVersion {0}")]
    NoSuites(String),
    #[error("generating the self-signed serving certificate in {dir}: {message}")]
    Generate { dir: PathBuf, message: String },
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

/// Maps a Go cipher suite name to the rustls suite (`None`: not implemented by rustls).
pub fn cipher_suite(name: &str) -> Option<SupportedCipherSuite> {
    use rustls::crypto::ring::cipher_suite as cs;
    Some(match name {
        "TLS_AES_128_GCM_SHA256" => cs::TLS13_AES_128_GCM_SHA256,
        "TLS_AES_256_GCM_SHA384" => cs::TLS13_AES_256_GCM_SHA384,
        "TLS_CHACHA20_POLY1305_SHA256" => cs::TLS13_CHACHA20_POLY1305_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        _ => return None,
    })
}

/// Maps a Go `tls.CurveID` to the rustls key-exchange group (`None`: not available).
pub fn curve(id: i32) -> Option<&'static dyn rustls::crypto::SupportedKxGroup> {
    use rustls::crypto::ring::kx_group;
    Some(match id {
        23 => kx_group::SECP256R1,
        24 => kx_group::SECP384R1,
        29 => kx_group::X25519,
        _ => return None,
    })
}

fn tls13(s: &SupportedCipherSuite) -> bool {
    matches!(s, SupportedCipherSuite::Tls13(_))
}

/// The crypto provider with the configured suites. As in Go, TLS 1.3 suites are not
/// configurable: all of them stay enabled, and the list selects the TLS 1.2 suites.
fn provider(settings: &TlsSettings) -> Result<(CryptoProvider, bool), TlsError> {
    let only13 = match settings.min_version.as_str() {
        "" | "VersionTLS12" => false,
        "VersionTLS10" | "VersionTLS11" => {
            tracing::warn!(
                tlsMinVersion = %settings.min_version,
                "TLS 1.0/1.1 are not implemented; the minimum is TLS 1.2"
            );
            false
        }
        "VersionTLS13" => true,
        other => return Err(TlsError::MinVersion(other.to_owned())),
    };
    let mut p = rustls::crypto::ring::default_provider();
    if !settings.cipher_suites.is_empty() {
        let mut suites: Vec<SupportedCipherSuite> =
            p.cipher_suites.iter().copied().filter(tls13).collect();
        for name in &settings.cipher_suites {
            let s = cipher_suite(name).ok_or_else(|| TlsError::CipherSuite(name.clone()))?;
            if !tls13(&s) && !suites.iter().any(|x| x.suite() == s.suite()) {
                suites.push(s);
            }
        }
        p.cipher_suites = suites;
    }
    if only13 {
        p.cipher_suites.retain(tls13);
    }
    if !settings.curve_preferences.is_empty() {
        p.kx_groups = settings
            .curve_preferences
            .iter()
            .map(|id| curve(*id).ok_or(TlsError::Curve(*id)))
            .collect::<Result<_, _>>()?;
    }
    if p.cipher_suites.is_empty() {
        return Err(TlsError::NoSuites(settings.min_version.clone()));
    }
    Ok((p, only13))
}

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        field,
        path: path.to_owned(),
        source,
    })
}

fn pem_err(field: &'static str, path: &Path, message: impl Into<String>) -> TlsError {
    TlsError::Pem {
        field,
        path: path.to_owned(),
        message: message.into(),
    }
}

fn load_certs(field: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let data = read(field, path)?;
    let certs = CertificateDer::pem_slice_iter(&data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(field, path, e.to_string()))?;
    if certs.is_empty() {
        return Err(pem_err(field, path, "no PEM certificate found"));
    }
    Ok(certs)
}

fn load_key(field: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let data = read(field, path)?;
    PrivateKeyDer::from_pem_slice(&data).map_err(|e| pem_err(field, path, e.to_string()))
}

/// The serving certificate files: the configured pair, or `kubelet.crt`/`kubelet.key` in the
/// cert dir, generated (self-signed CA + serving certificate, as upstream) when missing and
/// reused afterwards.
pub fn serving_files(settings: &TlsSettings) -> Result<(PathBuf, PathBuf), TlsError> {
    if settings.server_tls_bootstrap {
        let current = settings.cert_dir.join(BOOTSTRAP_SERVING_FILE);
        return Ok((current.clone(), current));
    }
    match (&settings.cert_file, &settings.key_file) {
        (Some(c), Some(k)) => return Ok((c.clone(), k.clone())),
        (None, None) => {}
        _ => return Err(TlsError::HalfPair),
    }
    let crt = settings.cert_dir.join("kubelet.crt");
    let key = settings.cert_dir.join("kubelet.key");
    if crt.exists() && key.exists() {
        return Ok((crt, key));
    }
    let gen_err = |message: String| TlsError::Generate {
        dir: settings.cert_dir.clone(),
        message,
    };
    let (cert_pem, key_pem) =
        generate_self_signed(&settings.hostname, &settings.ips).map_err(gen_err)?;
    std::fs::create_dir_all(&settings.cert_dir).map_err(|e| gen_err(e.to_string()))?;
    // Each file whole or absent; the certificate last, so a pair is complete once both exist.
    let write = |path: &Path, data: &str, mode| {
        crate::nofollow::atomic_write(
            path,
            data.as_bytes(),
            crate::nofollow::WriteOptions::durable(mode),
        )
        .map_err(|e| gen_err(format!("{}: {e}", path.display())))
    };
    write(&key, &key_pem, 0o600)?;
    write(&crt, &cert_pem, 0o644)?;
    tracing::info!(cert = %crt.display(), "generated a self-signed serving certificate");
    Ok((crt, key))
}

/// The serving pair of `serverTLSBootstrap` in the cert dir (certificates and key in one
/// file, a symlink the serving certificate manager swaps).
pub const BOOTSTRAP_SERVING_FILE: &str = "kubelet-server-current.pem";

/// The certificate resolver before a serving certificate is issued: no certificate, so the
/// handshake fails.
#[derive(Debug)]
struct NoServingCertificate;

impl rustls::server::ResolvesServerCert for NoServingCertificate {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        tracing::debug!("no serving certificate available for the kubelet");
        None
    }
}

/// A CA (`<host>-ca@<unix time>`) and a serving certificate (`<host>@<unix time>`) signed by
/// it for the host name, `localhost`, the addresses and loopback; the certificate file holds
/// both (leaf first).
pub fn generate_self_signed(
    hostname: &str,
    ips: &[std::net::IpAddr],
) -> Result<(String, String), String> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose, SanType,
    };
    let now = chrono::Utc::now().timestamp();
    let e = |e: rcgen::Error| e.to_string();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, format!("{hostname}-ca@{now}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let ca_key = KeyPair::generate().map_err(e)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(e)?;
    let issuer = rcgen::Issuer::new(ca, ca_key);

    let mut leaf = CertificateParams::default();
    leaf.distinguished_name
        .push(DnType::CommonName, format!("{hostname}@{now}"));
    let mut sans = vec![];
    for name in [hostname, "localhost"] {
        if !name.is_empty() {
            sans.push(SanType::DnsName(name.try_into().map_err(e)?));
        }
    }
    let mut all_ips: Vec<std::net::IpAddr> = ips.to_vec();
    for ip in [
        std::net::IpAddr::from([127, 0, 0, 1]),
        std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
    ] {
        if !all_ips.contains(&ip) {
            all_ips.push(ip);
        }
    }
    sans.extend(all_ips.into_iter().map(SanType::IpAddress));
    leaf.subject_alt_names = sans;
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_key = KeyPair::generate().map_err(e)?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(e)?;
    Ok((
        format!("{}{}", leaf_cert.pem(), ca_cert.pem()),
        leaf_key.serialize_pem(),
    ))
}

/// Why a client certificate is refused when its version is the reason.
pub const X509_V1_REFUSAL: &str = "client certificate is X.509 v1; only v3 is supported";

/// A client presented an X.509 v1 certificate (what `openssl x509 -req` makes without an
/// extension file). The Go kubelet accepts those; rustls/webpki parse only v3, and rkubelet
/// keeps refusing them rather than validate paths itself (docs/security.md).
#[derive(thiserror::Error)]
#[error("{X509_V1_REFUSAL}")]
pub struct X509V1Certificate;

/// rustls shows the reason of a certificate error with `Debug`: say it in words.
impl std::fmt::Debug for X509V1Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(X509_V1_REFUSAL)
    }
}

/// The X.509 version (1, 2 or 3) of a DER certificate; `None` when it does not parse.
pub fn x509_version(der: &[u8]) -> Option<u32> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    cert.version().0.checked_add(1)
}

/// A failed check of a client certificate, explained when the certificate is X.509 v1: the
/// error then says so and the refusal is logged, instead of webpki's bare "unsupported
/// certificate version" at debug level.
fn explain_client_cert_error<T>(
    cert: &CertificateDer<'_>,
    result: Result<T, rustls::Error>,
) -> Result<T, rustls::Error> {
    result.map_err(|e| {
        if x509_version(cert.as_ref()) != Some(1) {
            return e;
        }
        tracing::warn!(error = %e, "{X509_V1_REFUSAL}");
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
            Arc::new(X509V1Certificate),
        )))
    })
}

/// Accepts any client certificate during the handshake (checking only the handshake
/// signatures); the chain is verified per request by the authenticator with `inner`.
#[derive(Debug)]
struct DeferredClientAuth {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for DeferredClientAuth {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        explain_client_cert_error(cert, self.inner.verify_tls12_signature(message, cert, dss))
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        explain_client_cert_error(cert, self.inner.verify_tls13_signature(message, cert, dss))
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// One loaded generation of the files: the serving configuration and, with a client CA, the
/// verifier for client chains.
struct Loaded {
    config: Arc<rustls::ServerConfig>,
    client_ca: Option<Arc<dyn ClientCertVerifier>>,
}

/// What identifies a file's content on disk (a rename, rewrite or symlink swap changes it).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    })
}

/// How often the files are checked for changes unless set otherwise.
pub const DEFAULT_RELOAD_PERIOD: Duration = Duration::from_secs(5);

/// The serving TLS of the HTTPS port, reloadable: `tlsCertFile`/`tlsPrivateKeyFile` (or the
/// generated pair) and `clientCAFile` are re-read when they change on disk ([`Self::watch`]
/// polls them) or when [`Self::reload`] is called (certificate rotation can call it after
/// writing a new pair). A new generation that fails to load is logged and the previous one
/// stays in use. New connections take the current configuration; client chains are verified
/// per request with the current client CA.
pub struct ServingTls {
    settings: TlsSettings,
    provider: Arc<CryptoProvider>,
    only13: bool,
    crt: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<Loaded>>,
    stamps: Mutex<Vec<Option<FileStamp>>>,
    period_ms: AtomicU64,
}

impl std::fmt::Debug for ServingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingTls")
            .field("crt", &self.crt)
            .field("key", &self.key)
            .field("client_ca", &self.settings.client_ca_file)
            .finish()
    }
}

impl ServingTls {
    /// The configuration for a new connection.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        self.read().config.clone()
    }

    /// The current client CA verifier (`None` without `clientCAFile`).
    pub fn client_ca(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.read().client_ca.clone()
    }

    fn read(&self) -> Arc<Loaded> {
        sync::read(&self.current).clone()
    }

    /// How often [`Self::watch`] looks at the files.
    pub fn set_reload_period(&self, period: Duration) {
        let ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
        self.period_ms.store(ms, Ordering::Relaxed);
    }

    /// Re-reads every file now and swaps the new generation in; on error the current one
    /// stays. Blocking file I/O: call from a blocking context.
    pub fn reload(&self) -> Result<(), TlsError> {
        let loaded = load(
            &self.settings,
            &self.provider,
            self.only13,
            &self.crt,
            &self.key,
        )?;
        *sync::write(&self.current) = Arc::new(loaded);
        Ok(())
    }

    /// Reloads when a file's stamp changed since the last look (a failed attempt is not
    /// retried until the files change again). `Some(result)` when it tried.
    fn reload_if_changed(&self) -> Option<Result<(), TlsError>> {
        let now: Vec<Option<FileStamp>> = watched_files(&self.settings, &self.crt, &self.key)
            .into_iter()
            .map(stamp)
            .collect();
        {
            let mut seen = sync::lock(&self.stamps);
            if *seen == now {
                return None;
            }
            *seen = now;
        }
        Some(self.reload())
    }

    /// Polls the files until `cancel` fires, reloading on change.
    pub async fn watch(self: Arc<Self>, cancel: tokio_util::sync::CancellationToken) {
        loop {
            let period = Duration::from_millis(self.period_ms.load(Ordering::Relaxed));
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
            let me = self.clone();
            match tokio::task::spawn_blocking(move || me.reload_if_changed()).await {
                Ok(None) => {}
                Ok(Some(Ok(()))) => {
                    tracing::info!(cert = %self.crt.display(), client_ca = ?self.settings.client_ca_file, "reloaded the serving certificate and client CA");
                }
                Ok(Some(Err(e))) => {
                    tracing::error!(error = %e, "reloading the serving TLS files failed; keeping the previous ones");
                }
                Err(e) => tracing::error!(error = %e, "the TLS reload task failed"),
            }
        }
    }
}

/// Loads one generation from the files.
fn load(
    settings: &TlsSettings,
    provider: &Arc<CryptoProvider>,
    only13: bool,
    crt: &Path,
    key: &Path,
) -> Result<Loaded, TlsError> {
    let (cert_field, key_field) = if settings.server_tls_bootstrap {
        ("serverTLSBootstrap", "serverTLSBootstrap")
    } else if settings.cert_file.is_some() {
        ("tlsCertFile", "tlsPrivateKeyFile")
    } else {
        ("--cert-dir", "--cert-dir")
    };
    // serverTLSBootstrap before the first certificate: nothing to serve yet.
    let pair = if settings.server_tls_bootstrap && !crt.exists() {
        None
    } else {
        Some((load_certs(cert_field, crt)?, load_key(key_field, key)?))
    };
    let versions: &[&'static rustls::SupportedProtocolVersion] = if only13 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12, &rustls::version::TLS13]
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let (builder, client_ca) = match &settings.client_ca_file {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in load_certs("authentication.x509.clientCAFile", path)? {
                roots.add(c).map_err(|e| {
                    pem_err("authentication.x509.clientCAFile", path, e.to_string())
                })?;
            }
            let inner: Arc<dyn ClientCertVerifier> =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| {
                        pem_err("authentication.x509.clientCAFile", path, e.to_string())
                    })?;
            let deferred = Arc::new(DeferredClientAuth {
                inner: inner.clone(),
            });
            (builder.with_client_cert_verifier(deferred), Some(inner))
        }
        None => (builder.with_no_client_auth(), None),
    };
    let mut config = match pair {
        Some((chain, key)) => builder
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::Rustls(format!("{}: {e}", crt.display())))?,
        None => builder.with_cert_resolver(Arc::new(NoServingCertificate)),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Loaded {
        config: Arc::new(config),
        client_ca,
    })
}

/// Builds the serving TLS from the settings (generating the self-signed pair if needed).
pub fn build(settings: &TlsSettings) -> Result<Arc<ServingTls>, TlsError> {
    let (provider, only13) = provider(settings)?;
    let provider = Arc::new(provider);
    let (crt, key) = serving_files(settings)?;
    // Stamps first: a change while loading is picked up by the next look.
    let stamps = watched_files(settings, &crt, &key)
        .into_iter()
        .map(stamp)
        .collect();
    let loaded = load(settings, &provider, only13, &crt, &key)?;
    let tls = ServingTls {
        settings: settings.clone(),
        provider,
        only13,
        crt,
        key,
        current: RwLock::new(Arc::new(loaded)),
        stamps: Mutex::new(stamps),
        period_ms: AtomicU64::new(0),
    };
    tls.set_reload_period(DEFAULT_RELOAD_PERIOD);
    Ok(Arc::new(tls))
}

fn watched_files<'a>(settings: &'a TlsSettings, crt: &'a Path, key: &'a Path) -> Vec<&'a Path> {
    let mut v = vec![crt, key];
    if let Some(ca) = &settings.client_ca_file {
        v.push(ca);
    }
    v
}

impl super::authn::ClientCaSource for ServingTls {
    fn current(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.client_ca()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_suite_names_map_or_name_the_field() {
        assert!(cipher_suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256").is_some());
        assert!(cipher_suite("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305").is_some());
        assert!(cipher_suite("TLS_RSA_WITH_AES_128_CBC_SHA").is_none());
        let s = TlsSettings {
            cipher_suites: vec!["TLS_RSA_WITH_3DES_EDE_CBC_SHA".into()],
            ..Default::default()
        };
        let err = provider(&s).unwrap_err().to_string();
        assert!(
            err.starts_with("tlsCipherSuites: \"TLS_RSA_WITH_3DES_EDE_CBC_SHA\""),
            "{err}"
        );
        let s = TlsSettings {
            cipher_suites: vec!["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()],
            ..Default::default()
        };
        let (p, only13) = provider(&s).unwrap();
        assert!(!only13);
        assert_eq!(p.cipher_suites.iter().filter(|s| !tls13(s)).count(), 1);
        assert_eq!(p.cipher_suites.iter().filter(|s| tls13(s)).count(), 3);
        let s = TlsSettings {
            min_version: "VersionTLS13".into(),
            ..Default::default()
        };
        let (p, only13) = provider(&s).unwrap();
        assert!(only13 && p.cipher_suites.iter().all(tls13));
        let s = TlsSettings {
            min_version: "TLS1.2".into(),
            ..Default::default()
        };
        assert!(
            provider(&s)
                .unwrap_err()
                .to_string()
                .starts_with("tlsMinVersion")
        );
    }

    const V1_CLIENT_CRT: &str = include_str!("../../tests/fixtures/x509v1/client.crt");
    const V1_CLIENT_KEY: &str = include_str!("../../tests/fixtures/x509v1/client.key");
    const V1_CLIENT_CA: &str = include_str!("../../tests/fixtures/x509v1/ca.crt");

    fn der(pem: &str) -> CertificateDer<'static> {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn x509_version_is_read_from_the_der_and_garbage_is_no_version() {
        let v1 = der(V1_CLIENT_CRT);
        assert_eq!(x509_version(v1.as_ref()), Some(1));
        assert_eq!(x509_version(der(V1_CLIENT_CA).as_ref()), Some(3));
        let (generated, _) = generate_self_signed("node-1", &[]).unwrap();
        assert_eq!(x509_version(der(&generated).as_ref()), Some(3));
        // Hostile input: every truncation, a huge declared length, nothing at all.
        for len in 0..v1.as_ref().len() {
            assert_eq!(x509_version(&v1.as_ref()[..len]), None, "prefix {len}");
        }
        assert_eq!(
            x509_version(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff, 0x02]),
            None
        );
        assert_eq!(x509_version(b"not a certificate"), None);
    }

    /// rustls/webpki refuse an X.509 v1 client certificate at the handshake (the Go kubelet
    /// accepts it); the refusal says why, in the error and in the log.
    #[tokio::test]
    async fn v1_client_certificate_is_refused_at_the_handshake_with_the_reason() {
        use rustls::pki_types::PrivateKeyDer;
        use rustls::pki_types::pem::PemObject;

        let capture = crate::log_capture::LogCapture::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(capture.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("client-ca.crt");
        std::fs::write(&ca_file, V1_CLIENT_CA).unwrap();
        let serving = build(&TlsSettings {
            cert_dir: dir.path().join("pki"),
            hostname: "node-1".into(),
            client_ca_file: Some(ca_file),
            ..Default::default()
        })
        .unwrap();

        // The client trusts the generated serving CA (second in the file) and presents the v1
        // certificate (no key/certificate consistency check: rustls cannot parse v1 either).
        let served = std::fs::read(dir.path().join("pki/kubelet.crt")).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&served).skip(1) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = provider
            .key_provider
            .load_private_key(PrivateKeyDer::from_pem_slice(V1_CLIENT_KEY.as_bytes()).unwrap())
            .unwrap();
        let certified = rustls::sign::CertifiedKey::new(vec![der(V1_CLIENT_CRT)], key);
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));

        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(serving.config());
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let client_side = async {
            // With TLS 1.3 the client learns of the refusal only when it reads.
            let mut tls = connector.connect(name, client_io).await?;
            let mut buf = [0u8; 1];
            tokio::io::AsyncReadExt::read(&mut tls, &mut buf).await
        };
        let (server, client) = tokio::join!(acceptor.accept(server_io), client_side);

        let err = server
            .expect_err("the v1 certificate must be refused")
            .to_string();
        assert!(err.contains(X509_V1_REFUSAL), "{err}");
        assert!(client.is_err(), "the client sees the alert: {client:?}");
        let logged = capture.text();
        assert!(
            logged.contains("WARN") && logged.contains(X509_V1_REFUSAL),
            "{logged}"
        );
    }

    #[test]
    fn curve_preferences_map_go_ids_or_name_the_field() {
        let (p, _) = provider(&TlsSettings::default()).unwrap();
        let default_groups = p.kx_groups.len();
        let s = TlsSettings {
            curve_preferences: vec![24, 29],
            ..Default::default()
        };
        let (p, _) = provider(&s).unwrap();
        let names: Vec<_> = p.kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(
            names,
            [rustls::NamedGroup::secp384r1, rustls::NamedGroup::X25519],
            "in the configured order, only those"
        );
        assert!(default_groups >= 3);
        for id in [25, 4588, -1] {
            let s = TlsSettings {
                curve_preferences: vec![29, id],
                ..Default::default()
            };
            let err = provider(&s).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("tlsCurvePreferences: {id} is not supported")),
                "{err}"
            );
        }
    }

    #[test]
    fn self_signed_pair_is_generated_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let s = TlsSettings {
            cert_dir: dir.path().join("pki"),
            hostname: "node-1".into(),
            ..Default::default()
        };
        let built = build(&s).unwrap();
        assert!(built.client_ca().is_none());
        let crt = std::fs::read_to_string(dir.path().join("pki/kubelet.crt")).unwrap();
        assert_eq!(crt.matches("BEGIN CERTIFICATE").count(), 2);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("pki/kubelet.key"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        build(&s).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("pki/kubelet.crt")).unwrap(),
            crt
        );
        let half = TlsSettings {
            cert_file: Some(dir.path().join("x.crt")),
            ..s
        };
        assert!(matches!(build(&half), Err(TlsError::HalfPair)));
    }
}

#[cfg(test)]
mod bootstrap_tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;

    /// A TLS handshake against `serving` trusting `ca_pem`; `Ok` when it completes.
    async fn handshake(serving: &ServingTls, ca_pem: &str) -> Result<(), String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(serving.config());
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let name = rustls::pki_types::ServerName::try_from("10.0.0.5").unwrap();
        let (server, client) = tokio::join!(
            acceptor.accept(server_io),
            connector.connect(name, client_io)
        );
        server.map_err(|e| e.to_string())?;
        client.map_err(|e| e.to_string())?;
        Ok(())
    }

    /// serverTLSBootstrap: no self-signed pair; handshakes fail until the serving certificate
    /// manager stores a pair, then the issued certificate is served after a reload.
    #[tokio::test]
    async fn bootstrap_mode_serves_nothing_until_the_issued_pair_exists() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        std::fs::create_dir_all(&pki).unwrap();
        let serving = build(&TlsSettings {
            cert_dir: pki.clone(),
            hostname: "node-1".into(),
            server_tls_bootstrap: true,
            ..Default::default()
        })
        .unwrap();
        assert!(!pki.join("kubelet.crt").exists(), "no self-signed pair");
        let ca = crate::certificate::testutil::TestCa::new();
        let err = handshake(&serving, &ca.ca_pem).await.unwrap_err();
        assert!(!err.is_empty());

        let template = crate::certificate::csr::Template::node_serving(
            "node-1",
            &["node-1".into()],
            &["10.0.0.5".parse().unwrap()],
        )
        .unwrap();
        let req = crate::certificate::csr::new_request(&template).unwrap();
        let cert = ca.sign_request(
            &req.csr_pem,
            std::time::SystemTime::now(),
            Duration::from_secs(60),
        );
        let pair = crate::certificate::CertKey::from_pem("issued", &cert, &req.key_pem).unwrap();
        let store =
            crate::certificate::store::FileStore::new("kubelet-server", &pki, None, None).unwrap();
        store.update(&pair, chrono::Utc::now()).unwrap();
        serving.reload().unwrap();
        handshake(&serving, &ca.ca_pem).await.unwrap();
    }
}
