//! The kubelet's own certificates (upstream `pkg/kubelet/certificate` and client-go's
//! `util/certificate`): TLS bootstrap of the client certificate (`bootstrap`), the on-disk
//! pair store with its `<prefix>-current.pem` symlink (`store`), certificate signing requests
//! (`csr`), the rotation managers of the client and serving certificates (`manager`) and the
//! API client whose transport follows the current client certificate (`transport`).
//! Receives the kubeconfig paths, `--cert-dir`, the node's name and addresses and an API
//! client; owns the key material in `--cert-dir`; emits the current certificate/key pair to
//! the API client and to the HTTPS port, metrics, and a Node warning when renewal keeps failing.

pub mod bootstrap;
pub mod csr;
pub mod manager;
pub mod serving;
pub mod store;
pub mod transport;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// `kubernetes.io/kube-apiserver-client-kubelet`: the signer of kubelet client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// `kubernetes.io/kubelet-serving`: the signer of kubelet serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The organization of every node identity.
pub const NODES_GROUP: &str = "system:nodes";

/// Usages of a client certificate for an ECDSA key (upstream adds `key encipherment` only for
/// RSA keys, which rkubelet never generates).
pub const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];
/// Usages of a serving certificate for an ECDSA key.
pub const SERVING_USAGES: &[&str] = &["digital signature", "server auth"];

/// The common name of node `node_name`'s certificates.
pub fn node_common_name(node_name: &str) -> String {
    format!("system:node:{node_name}")
}

/// Failures of the certificate machinery; each names the file or object at fault.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what}: {message}")]
    Invalid { what: String, message: String },
    #[error("generating a key or certificate request: {0}")]
    Generate(String),
    #[error("{0}")]
    Api(String),
    #[error("{0}")]
    Timeout(String),
    #[error("certificate signing request {name} {verdict}, reason: {reason}, message: {message}")]
    Refused {
        name: String,
        verdict: &'static str,
        reason: String,
        message: String,
    },
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
}

impl CertError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid(what: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            what: what.into(),
            message: message.into(),
        }
    }
}

/// One PEM block: its label (`CERTIFICATE`, `PRIVATE KEY`, …) and its text, armour included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemBlock {
    pub label: String,
    pub text: String,
}

/// The PEM blocks of `data`, in order; text outside blocks is ignored. An unterminated block
/// or a mismatched END line is an error.
pub fn pem_blocks(data: &str) -> Result<Vec<PemBlock>, String> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in data.lines() {
        let line = line.trim_end();
        match &mut current {
            None => {
                if let Some(label) = line
                    .strip_prefix("-----BEGIN ")
                    .and_then(|l| l.strip_suffix("-----"))
                {
                    current = Some((label.to_owned(), format!("{line}\n")));
                }
            }
            Some((label, text)) => {
                text.push_str(line);
                text.push('\n');
                if let Some(end) = line
                    .strip_prefix("-----END ")
                    .and_then(|l| l.strip_suffix("-----"))
                {
                    if end != label {
                        return Err(format!("PEM block BEGIN {label} ends with END {end}"));
                    }
                    if let Some((label, text)) = current.take() {
                        out.push(PemBlock { label, text });
                    }
                } else if line.starts_with("-----BEGIN ") {
                    return Err(format!("PEM block {label} is not terminated"));
                }
            }
        }
    }
    if let Some((label, _)) = current {
        return Err(format!("PEM block {label} is not terminated"));
    }
    Ok(out)
}

/// What the kubelet needs to know of a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    /// The DER SubjectPublicKeyInfo (to check the certificate belongs to a key).
    pub spki: Vec<u8>,
}

impl CertInfo {
    /// Parses a DER certificate; `None` on anything that is not one.
    pub fn parse(der: &[u8]) -> Option<Self> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let time = |t: x509_parser::time::ASN1Time| {
            let secs = t.timestamp();
            if secs >= 0 {
                UNIX_EPOCH.checked_add(Duration::from_secs(secs.unsigned_abs()))
            } else {
                UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))
            }
        };
        let validity = cert.validity();
        let subject = cert.subject();
        let common_name = subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or_default()
            .to_owned();
        let organizations = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_owned))
            .collect();
        let mut dns_names = Vec::new();
        let mut ips = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => dns_names.push((*d).to_owned()),
                    GeneralName::IPAddress(b) => match b.len() {
                        4 => {
                            let a: [u8; 4] = (*b).try_into().ok()?;
                            ips.push(IpAddr::from(a));
                        }
                        16 => {
                            let a: [u8; 16] = (*b).try_into().ok()?;
                            ips.push(IpAddr::from(a));
                        }
                        _ => {}
                    },
                    _ => {}
                }
            }
        }
        Some(Self {
            not_before: time(validity.not_before)?,
            not_after: time(validity.not_after)?,
            common_name,
            organizations,
            dns_names,
            ips,
            spki: cert.tbs_certificate.subject_pki.raw.to_vec(),
        })
    }

    /// The certificate's whole lifetime.
    pub fn lifetime(&self) -> Duration {
        self.not_after
            .duration_since(self.not_before)
            .unwrap_or_default()
    }

    /// Whether `now` is past `notAfter`.
    pub fn expired_at(&self, now: SystemTime) -> bool {
        now > self.not_after
    }
}

/// A certificate chain and its private key, parsed and checked to belong together.
pub struct CertKey {
    /// Leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// The chain and the key as PEM text (what the store writes and the API client loads).
    pub cert_pem: String,
    pub key_pem: String,
    /// The leaf.
    pub info: CertInfo,
}

impl Clone for CertKey {
    fn clone(&self) -> Self {
        Self {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            cert_pem: self.cert_pem.clone(),
            key_pem: self.key_pem.clone(),
            info: self.info.clone(),
        }
    }
}

impl std::fmt::Debug for CertKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertKey")
            .field("subject", &self.info.common_name)
            .field("not_after", &self.info.not_after)
            .finish_non_exhaustive()
    }
}

impl CertKey {
    /// Parses certificates (leaf first) and a private key from PEM text (one combined file, or
    /// two files' contents). `what` names the source in errors. The key must be the leaf's.
    pub fn from_pem(what: &str, cert_pem: &str, key_pem: &str) -> Result<Self, CertError> {
        let bad = |m: String| CertError::invalid(what, m);
        let certs: Vec<PemBlock> = pem_blocks(cert_pem)
            .map_err(bad)?
            .into_iter()
            .filter(|b| b.label == "CERTIFICATE")
            .collect();
        if certs.is_empty() {
            return Err(bad("no PEM certificate found".into()));
        }
        let key_block = pem_blocks(key_pem)
            .map_err(bad)?
            .into_iter()
            .find(|b| b.label.ends_with("PRIVATE KEY"))
            .ok_or_else(|| bad("no PEM private key found".into()))?;
        let chain = certs
            .iter()
            .map(|b| {
                CertificateDer::from_pem_slice(b.text.as_bytes())
                    .map_err(|e| bad(format!("certificate: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(key_block.text.as_bytes())
            .map_err(|e| bad(format!("private key: {e}")))?;
        let info = chain
            .first()
            .and_then(|leaf| CertInfo::parse(leaf.as_ref()))
            .ok_or_else(|| bad("the certificate does not parse as X.509".into()))?;
        let pair = Self {
            chain,
            key,
            cert_pem: certs.iter().map(|b| b.text.as_str()).collect(),
            key_pem: key_block.text,
            info,
        };
        pair.check_key_matches().map_err(bad)?;
        Ok(pair)
    }

    /// The certificate's public key is the private key's (as Go's `tls.X509KeyPair` checks).
    fn check_key_matches(&self) -> Result<(), String> {
        let provider = rustls::crypto::ring::default_provider();
        let signing = provider
            .key_provider
            .load_private_key(self.key.clone_key())
            .map_err(|e| format!("private key: {e}"))?;
        let spki = signing
            .public_key()
            .ok_or_else(|| "private key: cannot derive its public key".to_owned())?;
        if spki.as_ref() != self.info.spki.as_slice() {
            return Err("the private key does not match the certificate's public key".into());
        }
        Ok(())
    }

    /// The combined file: certificates, then the key (upstream's `<prefix>-<time>.pem`).
    pub fn combined_pem(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }

    /// A rustls certified key (for serving).
    pub fn certified_key(&self) -> Result<rustls::sign::CertifiedKey, String> {
        let provider = rustls::crypto::ring::default_provider();
        let key = provider
            .key_provider
            .load_private_key(self.key.clone_key())
            .map_err(|e| e.to_string())?;
        Ok(rustls::sign::CertifiedKey::new(self.chain.clone(), key))
    }
}

/// A random fraction in `[0, 1)` (std's randomly keyed hasher as the entropy source).
pub(crate) fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x6365_7274);
    // 53 random bits make a uniformly spaced double in [0, 1).
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(any(test, feature = "test-util"))]
pub mod testutil;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks_split_and_refuse_broken_armour() {
        let text = "junk\n-----BEGIN A-----\nQUJD\n-----END A-----\nmore\n-----BEGIN B KEY-----\nRA==\n-----END B KEY-----\n";
        let blocks = pem_blocks(text).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].label, "A");
        assert_eq!(blocks[0].text, "-----BEGIN A-----\nQUJD\n-----END A-----\n");
        assert_eq!(blocks[1].label, "B KEY");
        // Hostile: unterminated, mismatched, nested.
        assert!(pem_blocks("-----BEGIN A-----\nQUJD\n").is_err());
        assert!(pem_blocks("-----BEGIN A-----\nQUJD\n-----END B-----\n").is_err());
        assert!(pem_blocks("-----BEGIN A-----\n-----BEGIN A-----\n-----END A-----\n").is_err());
        assert!(pem_blocks("").unwrap().is_empty());
    }

    #[test]
    fn cert_key_parses_a_pair_and_refuses_a_foreign_key_or_garbage() {
        let ca = testutil::TestCa::new();
        let (cert, key) = ca.issue("system:node:n1", &["system:nodes"], Duration::from_secs(60));
        let pair = CertKey::from_pem("test", &cert, &key).unwrap();
        assert_eq!(pair.info.common_name, "system:node:n1");
        assert_eq!(pair.info.organizations, ["system:nodes"]);
        assert_eq!(pair.info.lifetime(), Duration::from_secs(60));
        let combined = pair.combined_pem();
        let again = CertKey::from_pem("combined", &combined, &combined).unwrap();
        assert_eq!(again.info, pair.info);

        let (_, other_key) = ca.issue("x", &[], Duration::from_secs(60));
        let err = CertKey::from_pem("mixed", &cert, &other_key)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("mixed: the private key does not match"),
            "{err}"
        );
        for garbage in [
            "",
            "hello",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        ] {
            let err = CertKey::from_pem("g", garbage, &key)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("g: "), "{err}");
        }
        assert!(CertKey::from_pem("nokey", &cert, &cert).is_err());
    }

    #[test]
    fn random_fraction_is_in_range() {
        for _ in 0..1000 {
            let f = random_fraction();
            assert!((0.0..1.0).contains(&f), "{f}");
        }
    }
}
