//! Certificate signing requests (client-go `util/certificate/csr` and the kubelet's
//! `requestNodeCertificate`): builds the PEM request for a new ECDSA P-256 key from a
//! template, names it as upstream (`node-csr-<digest>` for bootstrap requests, `csr-<random>`
//! for rotations), creates the certificates.k8s.io/v1 object and waits for it to be approved
//! and issued (watch on its name, with a deadline). Receives the template and an API client;
//! emits the issued certificate PEM, or an error with upstream's wording.

use std::net::IpAddr;
use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use sha2::Digest;
use tracing::{debug, info};

use super::{CertError, CertKey, NODES_GROUP, node_common_name};

/// The subject and names a request asks for (upstream's `x509.CertificateRequest` template).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl Template {
    /// `system:node:<name>` in `system:nodes`, no SANs (the client certificate).
    pub fn node_client(node_name: &str) -> Self {
        Self {
            common_name: node_common_name(node_name),
            organizations: vec![NODES_GROUP.to_owned()],
            dns_names: Vec::new(),
            ips: Vec::new(),
        }
    }

    /// The serving certificate: the node identity plus its host names and addresses, sorted
    /// and deduplicated as upstream's `addressesToHostnamesAndIPs`. `None` without an IP
    /// (upstream requests no serving certificate then).
    pub fn node_serving(node_name: &str, hostnames: &[String], ips: &[IpAddr]) -> Option<Self> {
        let mut dns_names = Vec::new();
        let mut all_ips: Vec<IpAddr> = ips.to_vec();
        for h in hostnames.iter().filter(|h| !h.is_empty()) {
            match h.parse::<IpAddr>() {
                Ok(ip) => all_ips.push(ip),
                Err(_) => dns_names.push(h.clone()),
            }
        }
        dns_names.sort();
        dns_names.dedup();
        all_ips.sort_by_key(|ip| ip.to_string());
        all_ips.dedup();
        if all_ips.is_empty() {
            return None;
        }
        Some(Self {
            dns_names,
            ips: all_ips,
            ..Self::node_client(node_name)
        })
    }

    /// Whether a certificate has everything this template asks for (upstream
    /// `certSatisfiesTemplate`: same CN; no requested DNS name, IP or organization missing).
    pub fn satisfied_by(&self, cert: &super::CertInfo) -> bool {
        cert.common_name == self.common_name
            && self.dns_names.iter().all(|d| cert.dns_names.contains(d))
            && self.ips.iter().all(|ip| cert.ips.contains(ip))
            && self
                .organizations
                .iter()
                .all(|o| cert.organizations.contains(o))
    }
}

/// A new key and its signed request.
pub struct NewKey {
    /// PKCS#8 PEM.
    pub key_pem: String,
    /// `CERTIFICATE REQUEST` PEM.
    pub csr_pem: String,
    /// DER SubjectPublicKeyInfo.
    pub spki: Vec<u8>,
}

/// A fresh ECDSA P-256 key.
pub fn generate_key() -> Result<String, CertError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| CertError::Generate(e.to_string()))?;
    Ok(key.serialize_pem())
}

/// The request for `key_pem` (a PKCS#8 ECDSA key) asking for `template`.
pub fn build_request(key_pem: &str, template: &Template) -> Result<NewKey, CertError> {
    use rcgen::{CertificateParams, DnType, PublicKeyData, SanType};
    let g = |e: rcgen::Error| CertError::Generate(e.to_string());
    let key = rcgen::KeyPair::from_pem(key_pem).map_err(g)?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, template.common_name.clone());
    for o in &template.organizations {
        params
            .distinguished_name
            .push(DnType::OrganizationName, o.clone());
    }
    for d in &template.dns_names {
        params
            .subject_alt_names
            .push(SanType::DnsName(d.clone().try_into().map_err(g)?));
    }
    for ip in &template.ips {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    let csr = params.serialize_request(&key).map_err(g)?;
    Ok(NewKey {
        key_pem: key.serialize_pem(),
        csr_pem: csr.pem().map_err(g)?,
        spki: key.subject_public_key_info(),
    })
}

/// A new key and request for `template`.
pub fn new_request(template: &Template) -> Result<NewKey, CertError> {
    build_request(&generate_key()?, template)
}

/// Upstream's `digestedName`: `node-csr-` and the unpadded URL-safe base64 of SHA-512/256
/// over the public key, the CN, the organizations and the usages, each base64-encoded and
/// followed by `|` (so a node restarting with the same key asks under the same name).
pub fn digested_name(spki: &[u8], template: &Template, usages: &[&str]) -> String {
    use base64::Engine;
    let enc = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let mut h = sha2::Sha512_256::new();
    let mut write = |b: &[u8]| {
        h.update(enc(b).as_bytes());
        h.update(b"|");
    };
    write(spki);
    write(template.common_name.as_bytes());
    for o in &template.organizations {
        write(o.as_bytes());
    }
    for u in usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", enc(&h.finalize()))
}

/// What to ask a signer for.
#[derive(Debug, Clone)]
pub struct SigningRequest {
    /// `None`: `generateName: csr-`.
    pub name: Option<String>,
    pub csr_pem: String,
    pub signer_name: &'static str,
    pub usages: Vec<String>,
    /// The requester's public key, to check a reused request was made with it.
    pub spki: Vec<u8>,
}

/// Something that turns a signing request into an issued certificate (the API server's CSR
/// API; tests substitute a local CA).
#[async_trait]
pub trait CertificateSigner: Send + Sync {
    /// The issued certificate PEM; waits at most `wait` for approval and issuance.
    async fn sign(&self, req: &SigningRequest, wait: Duration) -> Result<String, CertError>;
}

/// The CSR API of an API server.
#[derive(Clone)]
pub struct ApiSigner {
    client: kube::Client,
}

impl ApiSigner {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

/// An API error as a `CertError`, keeping the HTTP status in the message for callers that
/// tell an authentication failure apart.
fn api_err(context: &str, e: kube::Error) -> CertError {
    match &e {
        kube::Error::Api(s) => CertError::Api(format!("{context}: {e} (HTTP {})", s.code)),
        _ => CertError::Api(format!("{context}: {e}")),
    }
}

/// Whether `e` is the API server refusing the credentials (401).
pub fn is_unauthorized(e: &CertError) -> bool {
    matches!(e, CertError::Api(m) if m.contains("(HTTP 401)"))
}

#[async_trait]
impl CertificateSigner for ApiSigner {
    async fn sign(&self, req: &SigningRequest, wait: Duration) -> Result<String, CertError> {
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        let (name, uid) = request_certificate(&api, req).await?;
        debug!(csr = %name, "Waiting for client certificate to be issued");
        match tokio::time::timeout(wait, wait_for_certificate(&api, &name, &uid)).await {
            Ok(r) => r,
            Err(_) => Err(CertError::Timeout(format!(
                "timed out waiting for certificate signing request {name} to be approved and issued"
            ))),
        }
    }
}

/// Creates the request, or reuses the same-named one made earlier with the same key
/// (upstream `RequestCertificate`). Returns its name and UID.
async fn request_certificate(
    api: &Api<CertificateSigningRequest>,
    req: &SigningRequest,
) -> Result<(String, String), CertError> {
    let obj = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: req.name.clone(),
            generate_name: req.name.is_none().then(|| "csr-".to_owned()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(req.csr_pem.as_bytes().to_vec()),
            signer_name: req.signer_name.to_owned(),
            usages: Some(req.usages.clone()),
            ..Default::default()
        },
        status: None,
    };
    let created = match api.create(&PostParams::default(), &obj).await {
        Ok(c) => c,
        Err(kube::Error::Api(s)) if s.code == 409 && req.name.is_some() => {
            info!("csr for this node already exists, reusing");
            let name = req.name.as_deref().unwrap_or_default();
            let existing = api
                .get(name)
                .await
                .map_err(|e| api_err("cannot retrieve certificate signing request", e))?;
            ensure_compatible(&existing, req)
                .map_err(|m| CertError::Api(format!("retrieved csr is not compatible: {m}")))?;
            info!("csr for this node is still valid");
            existing
        }
        Err(e) => return Err(api_err("cannot create certificate signing request", e)),
    };
    let name = created.metadata.name.clone().unwrap_or_default();
    let uid = created.metadata.uid.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(CertError::Api(
            "the created certificate signing request has no name".into(),
        ));
    }
    Ok((name, uid))
}

/// Upstream `ensureCompatible`: same signer, same subject, the request made with our key,
/// and no expired certificate issued for it.
fn ensure_compatible(
    existing: &CertificateSigningRequest,
    req: &SigningRequest,
) -> Result<(), String> {
    if existing.spec.signer_name != req.signer_name {
        return Err(format!(
            "csr signerNames differ: new {:?}, orig: {:?}",
            existing.spec.signer_name, req.signer_name
        ));
    }
    let theirs = request_subject_and_key(&existing.spec.request.0)?;
    let ours = request_subject_and_key(req.csr_pem.as_bytes())?;
    if theirs.0 != ours.0 {
        return Err(format!(
            "csr subjects differ: new: {:?}, orig: {:?}",
            theirs.0, ours.0
        ));
    }
    if theirs.1 != req.spki {
        return Err("the existing request was made with another key".into());
    }
    if let Some(cert) = existing
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
    {
        let text = String::from_utf8_lossy(&cert.0);
        for block in super::pem_blocks(&text)? {
            use rustls::pki_types::pem::PemObject;
            let der = rustls::pki_types::CertificateDer::from_pem_slice(block.text.as_bytes())
                .map_err(|e| format!("error parsing signed certificate for CSR: {e}"))?;
            let info = super::CertInfo::parse(der.as_ref())
                .ok_or("error parsing signed certificate for CSR")?;
            if info.expired_at(std::time::SystemTime::now()) {
                return Err("one of the certificates for the CSR has expired".into());
            }
        }
    }
    Ok(())
}

/// The subject (as text) and the SubjectPublicKeyInfo of a PEM request.
fn request_subject_and_key(pem: &[u8]) -> Result<(String, Vec<u8>), String> {
    use rustls::pki_types::pem::PemObject;
    use x509_parser::prelude::FromDer;
    let der = rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(pem)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_owned())?;
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
            .map_err(|e| format!("unable to parse csr: {e}"))?;
    let info = &csr.certification_request_info;
    Ok((info.subject.to_string(), info.subject_pki.raw.to_vec()))
}

/// What one look at the request says.
#[derive(Debug, PartialEq)]
enum Progress {
    Pending,
    Issued(String),
}

/// Upstream `WaitForCertificate`'s condition: denied or failed ends the wait with an error,
/// approved with a certificate ends it with the certificate.
fn progress(csr: &CertificateSigningRequest, name: &str, uid: &str) -> Result<Progress, CertError> {
    if !uid.is_empty() && csr.metadata.uid.as_deref().is_some_and(|u| u != uid) {
        return Err(CertError::Api(format!("csr {name:?} changed UIDs")));
    }
    let Some(status) = &csr.status else {
        return Ok(Progress::Pending);
    };
    let mut approved = false;
    for c in status.conditions.iter().flatten() {
        let refused = |verdict| CertError::Refused {
            name: name.to_owned(),
            verdict,
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        };
        match c.type_.as_str() {
            "Denied" => return Err(refused("is denied")),
            "Failed" => return Err(refused("failed")),
            "Approved" => approved = true,
            _ => {}
        }
    }
    if approved {
        match status.certificate.as_ref().filter(|c| !c.0.is_empty()) {
            Some(cert) => {
                info!(csr = name, "certificate signing request {name} is issued");
                return Ok(Progress::Issued(
                    String::from_utf8_lossy(&cert.0).into_owned(),
                ));
            }
            None => {
                info!(
                    csr = name,
                    "certificate signing request {name} is approved, waiting to be issued"
                );
            }
        }
    }
    Ok(Progress::Pending)
}

/// Watches request `name` until it is issued (or refused, deleted, replaced).
async fn wait_for_certificate(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    uid: &str,
) -> Result<String, CertError> {
    let mut retry =
        crate::apiclient::RetryBackoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let current = match api.get(name).await {
            Ok(c) => c,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(CertError::Api(format!("csr {name:?} was deleted")));
            }
            Err(e) => {
                debug!(error = %e, "cannot read the certificate signing request; retrying");
                tokio::time::sleep(retry.next_delay()).await;
                continue;
            }
        };
        if let Progress::Issued(cert) = progress(&current, name, uid)? {
            return Ok(cert);
        }
        let rv = current
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        let stream = match api.watch(&params, &rv).await {
            Ok(s) => s,
            Err(e) => {
                debug!(error = %e, "cannot watch the certificate signing request; retrying");
                tokio::time::sleep(retry.next_delay()).await;
                continue;
            }
        };
        retry.reset();
        let mut stream = stream.boxed();
        loop {
            match stream.try_next().await {
                Ok(Some(WatchEvent::Added(c) | WatchEvent::Modified(c))) => {
                    if c.metadata.name.as_deref() != Some(name) {
                        continue;
                    }
                    if let Progress::Issued(cert) = progress(&c, name, uid)? {
                        return Ok(cert);
                    }
                }
                Ok(Some(WatchEvent::Deleted(c))) if c.metadata.name.as_deref() == Some(name) => {
                    return Err(CertError::Api(format!("csr {name:?} was deleted")));
                }
                Ok(Some(_)) => {}
                // The watch ended (timeout, error, expired version): look again.
                Ok(None) | Err(_) => break,
            }
        }
    }
}

/// Checks an issued certificate against the key it was requested for.
pub fn issued_pair(cert_pem: &str, key_pem: &str) -> Result<CertKey, CertError> {
    CertKey::from_pem("the issued certificate", cert_pem, key_pem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::{CLIENT_USAGES, CertInfo};
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };

    #[test]
    fn request_carries_the_template_and_the_key() {
        let t = Template::node_serving(
            "n1",
            &["n1.example".into(), "10.0.0.9".into(), "".into()],
            &["10.0.0.5".parse().unwrap(), "10.0.0.5".parse().unwrap()],
        )
        .unwrap();
        assert_eq!(t.dns_names, ["n1.example"]);
        assert_eq!(t.ips.len(), 2, "{:?}", t.ips);
        let k = new_request(&t).unwrap();
        assert!(k.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        let (subject, spki) = request_subject_and_key(k.csr_pem.as_bytes()).unwrap();
        assert!(
            subject.contains("CN=system:node:n1") && subject.contains("O=system:nodes"),
            "{subject}"
        );
        assert_eq!(spki, k.spki);
        // Signed by a CA, the certificate satisfies the template and matches the key.
        let ca = crate::certificate::testutil::TestCa::new();
        let cert = ca.sign_request(
            &k.csr_pem,
            std::time::SystemTime::now(),
            Duration::from_secs(30),
        );
        let pair = issued_pair(&cert, &k.key_pem).unwrap();
        assert!(t.satisfied_by(&pair.info), "{:?}", pair.info);
        let mut other = t.clone();
        other.dns_names.push("missing.example".into());
        assert!(!other.satisfied_by(&pair.info));
        // Hostile: a certificate for another key is refused.
        let foreign = new_request(&t).unwrap();
        assert!(issued_pair(&cert, &foreign.key_pem).is_err());
        // No IP, no serving template (upstream's default).
        assert!(Template::node_serving("n1", &["n1".into()], &[]).is_none());
    }

    #[test]
    fn digested_name_is_stable_per_key_and_changes_with_any_input() {
        let t = Template::node_client("n1");
        let a = digested_name(b"key-a", &t, CLIENT_USAGES);
        assert_eq!(a, digested_name(b"key-a", &t, CLIENT_USAGES));
        assert!(a.starts_with("node-csr-"));
        // 32 bytes of digest in unpadded base64url.
        assert_eq!(a.len(), "node-csr-".len() + 43, "{a}");
        assert_ne!(a, digested_name(b"key-b", &t, CLIENT_USAGES));
        assert_ne!(
            a,
            digested_name(b"key-a", &Template::node_client("n2"), CLIENT_USAGES)
        );
        assert_ne!(a, digested_name(b"key-a", &t, &["client auth"]));
        // The delimiter keeps concatenations apart (upstream's CN:foo,ORG:bar example).
        let mut x = Template::node_client("x");
        x.common_name = "foo".into();
        x.organizations = vec!["bar".into()];
        let mut y = x.clone();
        y.common_name = "foob".into();
        y.organizations = vec!["ar".into()];
        assert_ne!(digested_name(b"k", &x, &[]), digested_name(b"k", &y, &[]));
    }

    fn csr(conditions: &[(&str, &str)], cert: Option<&str>) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("csr-1".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Default::default(),
            status: Some(CertificateSigningRequestStatus {
                certificate: cert.map(|c| k8s_openapi::ByteString(c.as_bytes().to_vec())),
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, r)| CertificateSigningRequestCondition {
                            type_: (*t).into(),
                            status: "True".into(),
                            reason: Some((*r).into()),
                            message: Some("m".into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
            }),
        }
    }

    #[test]
    fn progress_follows_upstreams_conditions() {
        assert_eq!(
            progress(&csr(&[], None), "csr-1", "u1").unwrap(),
            Progress::Pending
        );
        assert_eq!(
            progress(&csr(&[("Approved", "A")], None), "csr-1", "u1").unwrap(),
            Progress::Pending
        );
        assert_eq!(
            progress(&csr(&[("Approved", "A")], Some("PEM")), "csr-1", "u1").unwrap(),
            Progress::Issued("PEM".into())
        );
        let err = progress(&csr(&[("Denied", "NoWay")], None), "csr-1", "u1")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "certificate signing request csr-1 is denied, reason: NoWay, message: m"
        );
        let err = progress(
            &csr(&[("Approved", "A"), ("Failed", "Bad")], Some("PEM")),
            "csr-1",
            "u1",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("failed, reason: Bad"), "{err}");
        assert!(progress(&csr(&[], None), "csr-1", "other-uid").is_err());
        // A certificate without approval is not taken.
        assert_eq!(
            progress(&csr(&[], Some("PEM")), "csr-1", "u1").unwrap(),
            Progress::Pending
        );
    }

    #[test]
    fn reused_request_must_be_ours() {
        let t = Template::node_client("n1");
        let k = new_request(&t).unwrap();
        let req = SigningRequest {
            name: Some(digested_name(&k.spki, &t, CLIENT_USAGES)),
            csr_pem: k.csr_pem.clone(),
            signer_name: crate::certificate::CLIENT_SIGNER,
            usages: CLIENT_USAGES.iter().map(|s| (*s).to_owned()).collect(),
            spki: k.spki.clone(),
        };
        let mut existing = csr(&[], None);
        existing.spec.signer_name = crate::certificate::CLIENT_SIGNER.into();
        existing.spec.request = k8s_openapi::ByteString(k.csr_pem.as_bytes().to_vec());
        ensure_compatible(&existing, &req).unwrap();
        let other = new_request(&t).unwrap();
        existing.spec.request = k8s_openapi::ByteString(other.csr_pem.as_bytes().to_vec());
        assert!(ensure_compatible(&existing, &req).is_err());
        existing.spec.request = k8s_openapi::ByteString(b"garbage".to_vec());
        assert!(ensure_compatible(&existing, &req).is_err());
        existing.spec.request = k8s_openapi::ByteString(k.csr_pem.as_bytes().to_vec());
        existing.spec.signer_name = "example.com/other".into();
        assert!(ensure_compatible(&existing, &req).is_err());
        let _ = CertInfo::parse(b"");
    }
}
