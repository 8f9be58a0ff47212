//! TLS material and kubeconfig: owns the self-signed CA (also the CSR signer's CA), the serving
//! certificate and the admin client certificate; emits a rustls `ServerConfig` (client
//! certificates optional and verified after the handshake, so a bad one gets 401 as from
//! kube-apiserver), the CA as an rcgen issuer, and kubeconfig YAML.

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;

/// TLS setup failures.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Certificate generation failed.
    #[error("generating {what}: {source}")]
    Rcgen {
        /// Which certificate.
        what: &'static str,
        /// Underlying error.
        source: rcgen::Error,
    },
    /// rustls rejected the configuration.
    #[error("building TLS config: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built.
    #[error("building client verifier: {0}")]
    Verifier(String),
}

/// PEM material for a CA, a serving cert and an admin client cert.
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    /// CA certificate (PEM).
    pub ca_pem: String,
    /// Serving certificate (PEM).
    pub server_cert_pem: String,
    server_cert_der: Vec<u8>,
    server_key_der: Vec<u8>,
    ca_der: Vec<u8>,
    ca_key_der: Vec<u8>,
    /// Admin client certificate (PEM), CN `admin`, O `system:masters`.
    pub client_cert_pem: String,
    /// Admin client key (PEM).
    pub client_key_pem: String,
    client_cert_der: Vec<u8>,
    client_key_der: Vec<u8>,
}

/// Accepts any kubelet serving certificate, as kube-apiserver does without
/// `--kubelet-certificate-authority`; signatures are still checked.
#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn rc(what: &'static str) -> impl FnOnce(rcgen::Error) -> TlsError {
    move |source| TlsError::Rcgen { what, source }
}

impl TlsMaterial {
    /// Generates a fresh CA, a serving cert for 127.0.0.1/localhost and an admin client cert.
    pub fn generate() -> Result<Self, TlsError> {
        let ca_key = KeyPair::generate().map_err(rc("CA key"))?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(rc("CA"))?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "fake-apiserver-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(rc("CA cert"))?;
        let issuer = Issuer::new(ca_params, ca_key);

        let srv_key = KeyPair::generate().map_err(rc("server key"))?;
        let mut srv_params =
            CertificateParams::new(vec!["localhost".to_string(), "kubernetes".to_string()])
                .map_err(rc("server"))?;
        srv_params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        srv_params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        srv_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let srv_cert = srv_params
            .signed_by(&srv_key, &issuer)
            .map_err(rc("server cert"))?;

        let cli_key = KeyPair::generate().map_err(rc("client key"))?;
        let mut cli_params = CertificateParams::new(Vec::<String>::new()).map_err(rc("client"))?;
        cli_params
            .distinguished_name
            .push(DnType::CommonName, "admin");
        cli_params
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        cli_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cli_cert = cli_params
            .signed_by(&cli_key, &issuer)
            .map_err(rc("client cert"))?;

        Ok(TlsMaterial {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().to_vec(),
            ca_key_der: issuer.key().serialize_der(),
            server_cert_pem: srv_cert.pem(),
            server_cert_der: srv_cert.der().to_vec(),
            server_key_der: srv_key.serialize_der(),
            client_cert_pem: cli_cert.pem(),
            client_key_pem: cli_key.serialize_pem(),
            client_cert_der: cli_cert.der().to_vec(),
            client_key_der: cli_key.serialize_der(),
        })
    }

    /// The client-certificate verifier: chains to the CA, valid now, client auth usage.
    pub fn client_verifier(&self) -> Result<ClientCertAuthenticator, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(self.ca_der.clone()))?;
        let inner =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?;
        Ok(ClientCertAuthenticator { inner })
    }

    /// A rustls server config that offers HTTP/1.1 and accepts (but does not require) client
    /// certificates; they are verified against the CA after the handshake by
    /// [`ClientCertAuthenticator::authenticate`] (kube-apiserver likewise requests client
    /// certificates in TLS and verifies them in its x509 authenticator: 401, not a TLS alert).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Arc::new(DeferredClientVerifier(self.client_verifier()?.inner));
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![
                    CertificateDer::from(self.server_cert_der.clone()),
                    CertificateDer::from(self.ca_der.clone()),
                ],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key_der.clone())),
            )?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }

    /// The CA as an rcgen issuer (the CSR signer signs with it).
    pub fn ca_issuer(&self) -> Result<Issuer<'static, KeyPair>, TlsError> {
        let key = KeyPair::try_from(self.ca_key_der.as_slice()).map_err(rc("CA key"))?;
        Issuer::from_ca_cert_der(&CertificateDer::from(self.ca_der.clone()), key)
            .map_err(rc("CA issuer"))
    }
}

/// Verifies a client certificate chain presented in the handshake and turns it into a user.
#[derive(Debug, Clone)]
pub struct ClientCertAuthenticator {
    inner: Arc<dyn rustls::server::danger::ClientCertVerifier>,
}

impl ClientCertAuthenticator {
    /// The user of a presented chain, or None when it does not verify (wrong CA, expired, not
    /// valid yet, no client-auth usage) or names no user.
    pub fn authenticate(&self, chain: &[CertificateDer<'_>]) -> Option<crate::authn::UserInfo> {
        let (leaf, intermediates) = chain.split_first()?;
        let now = rustls::pki_types::UnixTime::now();
        if let Err(e) = self.inner.verify_client_cert(leaf, intermediates, now) {
            tracing::debug!(error = %e, "client certificate rejected");
            return None;
        }
        crate::authn::user_from_certificate(leaf)
    }
}

/// The client certificate chain a connection presented, judged per request.
#[derive(Debug)]
pub struct PeerCertificates {
    chain: Vec<CertificateDer<'static>>,
    verifier: ClientCertAuthenticator,
}

impl PeerCertificates {
    /// Keeps `chain` (leaf first) for verification by `verifier`.
    pub fn new(chain: &[CertificateDer<'_>], verifier: ClientCertAuthenticator) -> Self {
        PeerCertificates {
            chain: chain.iter().map(|c| c.clone().into_owned()).collect(),
            verifier,
        }
    }

    /// The user, if the chain verifies now.
    pub fn user(&self) -> Option<crate::authn::UserInfo> {
        self.verifier.authenticate(&self.chain)
    }
}

/// Accepts any client certificate in the handshake (signatures over the handshake are still
/// checked); the chain itself is judged per request by [`ClientCertAuthenticator`].
#[derive(Debug)]
struct DeferredClientVerifier(Arc<dyn rustls::server::danger::ClientCertVerifier>);

impl rustls::server::danger::ClientCertVerifier for DeferredClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

impl TlsMaterial {
    /// A rustls client config for calling kubelets: presents the admin client certificate and
    /// does not verify the kubelet's serving certificate.
    pub fn kubelet_client_config(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
            .with_client_auth_cert(
                vec![CertificateDer::from(self.client_cert_der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.client_key_der.clone())),
            )?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

/// Credentials written into a kubeconfig.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeconfigAuth {
    /// Admin client certificate and key.
    ClientCert,
    /// Static bearer token.
    Token,
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Kubeconfig YAML for `server` with embedded CA data (when `ca_pem` is Some).
pub fn kubeconfig(
    server: &str,
    ca_pem: Option<&str>,
    auth: KubeconfigAuth,
    client: Option<(&str, &str)>,
    token: &str,
) -> String {
    let cluster_tls = match ca_pem {
        Some(ca) => format!("    certificate-authority-data: {}\n", b64(ca)),
        None => String::new(),
    };
    let user = match (auth, client) {
        (KubeconfigAuth::ClientCert, Some((cert, key))) => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(cert),
            b64(key)
        ),
        _ => format!("    token: {token}\n"),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n{cluster_tls}users:\n- name: admin\n  user:\n{user}contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: admin\n    namespace: default\ncurrent-context: fake\npreferences: {{}}\n"
    )
}

/// A bootstrap kubeconfig as kubeadm writes `/etc/kubernetes/bootstrap-kubelet.conf`: the
/// server, its CA and a bootstrap `token:`.
pub fn bootstrap_kubeconfig(server: &str, ca_pem: Option<&str>, token: &str) -> String {
    let cluster_tls = match ca_pem {
        Some(ca) => format!("    certificate-authority-data: {}\n", b64(ca)),
        None => String::new(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: {server}\n{cluster_tls}users:\n- name: tls-bootstrap-token-user\n  user:\n    token: {token}\ncontexts:\n- name: tls-bootstrap-token-user@kubernetes\n  context:\n    cluster: kubernetes\n    user: tls-bootstrap-token-user\ncurrent-context: tls-bootstrap-token-user@kubernetes\npreferences: {{}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn material_builds_a_server_config() {
        let m = TlsMaterial::generate().expect("generate");
        assert!(m.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(m.client_key_pem.contains("PRIVATE KEY"));
        let cfg = m.server_config().expect("config");
        assert_eq!(cfg.alpn_protocols, vec![b"http/1.1".to_vec()]);
        let kc = kubeconfig(
            "https://127.0.0.1:1",
            Some(&m.ca_pem),
            KubeconfigAuth::ClientCert,
            Some((&m.client_cert_pem, &m.client_key_pem)),
            "t",
        );
        assert!(kc.contains("client-key-data: "));
        assert!(kc.contains("certificate-authority-data: "));
    }
}
