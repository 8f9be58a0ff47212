//! The CSR signer (upstream `pkg/controller/certificates/signer` + `authority`): owns the CA
//! key and the maximum certificate lifetime (`--cluster-signing-duration`); receives an
//! approved CSR, emits either a PEM certificate (subject and SANs of the request, key usages of
//! `spec.usages`, lifetime min(`expirationSeconds`, maximum)) or the message of a `Failed`
//! condition when the request is not valid for its signer.

use crate::certificates::{
    self, ParsedCsr, SIGNER_APISERVER_CLIENT, SIGNER_KUBELET_CLIENT, SIGNER_KUBELET_SERVING,
};
use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType, SerialNumber, SubjectPublicKeyInfo,
};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upstream's `--cluster-signing-duration` default (one year).
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// Upstream backdates NotBefore by 5 minutes to absorb clock skew.
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// Upstream's "short" lifetime below which NotAfter is not backdated.
const SHORT: Duration = Duration::from_secs(8 * 3600);

/// Signing failures that are not the request's fault.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// rcgen rejected the certificate.
    #[error("signing certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
}

/// One certificate the signer issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCertificate {
    /// Name of the CSR it answered.
    pub csr_name: String,
    /// `spec.signerName` of the CSR.
    pub signer_name: String,
    /// Subject common name.
    pub common_name: String,
    /// The certificate (PEM).
    pub certificate_pem: String,
    /// Start of validity.
    pub not_before: chrono::DateTime<chrono::Utc>,
    /// End of validity.
    pub not_after: chrono::DateTime<chrono::Utc>,
}

/// The signer: the CA issuer plus the maximum lifetime.
pub struct Signer {
    issuer: Issuer<'static, KeyPair>,
    /// Maximum lifetime in milliseconds (changeable while running).
    max_lifetime_ms: AtomicU64,
}

/// Whether the signer handles `signer_name`, and if so whether the request is valid for it
/// (upstream `getCSRVerificationFuncForSignerName`): None = not ours (left alone),
/// Some(Err) = recognized but invalid (a `Failed` condition).
pub fn check_for_signer(
    signer_name: &str,
    csr: &ParsedCsr,
    usages: &[String],
) -> Option<Result<(), String>> {
    match signer_name {
        SIGNER_KUBELET_CLIENT => Some(certificates::validate_kubelet_client(csr, usages)),
        SIGNER_KUBELET_SERVING => Some(certificates::validate_kubelet_serving(csr, usages)),
        SIGNER_APISERVER_CLIENT => Some(certificates::validate_apiserver_client(usages)),
        _ => None,
    }
}

/// Upstream `signer.duration`: the maximum unless a shorter `expirationSeconds` was asked for;
/// requests under 10 minutes get 10 minutes (validation refuses them anyway).
pub fn lifetime(max: Duration, expiration_seconds: Option<i64>) -> Duration {
    let Some(s) = expiration_seconds else {
        return max;
    };
    let requested = Duration::from_secs(u64::try_from(s).unwrap_or(0));
    if requested > max {
        max
    } else if requested < Duration::from_secs(600) {
        Duration::from_secs(600)
    } else {
        requested
    }
}

/// NotBefore backdating: upstream's 5 minutes, but at most a tenth of the lifetime so that
/// the very short lifetimes tests use (30 s) keep their rotation point (a fraction of
/// NotAfter − NotBefore) in the future. A deliberate, documented difference.
fn backdate(ttl: Duration) -> Duration {
    BACKDATE.min(ttl / 10)
}

fn usages_to_rcgen(usages: &[String], params: &mut CertificateParams) {
    for u in usages {
        let ku = match u.as_str() {
            "signing" | "digital signature" => Some(KeyUsagePurpose::DigitalSignature),
            "content commitment" => Some(KeyUsagePurpose::ContentCommitment),
            "key encipherment" => Some(KeyUsagePurpose::KeyEncipherment),
            "key agreement" => Some(KeyUsagePurpose::KeyAgreement),
            "data encipherment" => Some(KeyUsagePurpose::DataEncipherment),
            "cert sign" => Some(KeyUsagePurpose::KeyCertSign),
            "crl sign" => Some(KeyUsagePurpose::CrlSign),
            "encipher only" => Some(KeyUsagePurpose::EncipherOnly),
            "decipher only" => Some(KeyUsagePurpose::DecipherOnly),
            _ => None,
        };
        if let Some(k) = ku {
            if !params.key_usages.contains(&k) {
                params.key_usages.push(k);
            }
            continue;
        }
        let eku = match u.as_str() {
            "any" => ExtendedKeyUsagePurpose::Any,
            "server auth" => ExtendedKeyUsagePurpose::ServerAuth,
            "client auth" => ExtendedKeyUsagePurpose::ClientAuth,
            "code signing" => ExtendedKeyUsagePurpose::CodeSigning,
            "email protection" | "s/mime" => ExtendedKeyUsagePurpose::EmailProtection,
            "timestamping" => ExtendedKeyUsagePurpose::TimeStamping,
            "ocsp signing" => ExtendedKeyUsagePurpose::OcspSigning,
            "ipsec end system" => ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 5]),
            "ipsec tunnel" => ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 6]),
            "ipsec user" => ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 7]),
            "microsoft sgc" => {
                ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 4, 1, 311, 10, 3, 3])
            }
            "netscape sgc" => ExtendedKeyUsagePurpose::Other(vec![2, 16, 840, 1, 113730, 4, 1]),
            _ => continue,
        };
        if !params.extended_key_usages.contains(&eku) {
            params.extended_key_usages.push(eku);
        }
    }
}

fn dn_type(oid: &str) -> DnType {
    match oid {
        "2.5.4.3" => DnType::CommonName,
        "2.5.4.10" => DnType::OrganizationName,
        "2.5.4.11" => DnType::OrganizationalUnitName,
        "2.5.4.6" => DnType::CountryName,
        "2.5.4.7" => DnType::LocalityName,
        "2.5.4.8" => DnType::StateOrProvinceName,
        other => DnType::CustomDnType(
            other
                .split('.')
                .filter_map(|p| p.parse::<u64>().ok())
                .collect(),
        ),
    }
}

fn to_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn to_chrono(t: time::OffsetDateTime) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(t.unix_timestamp(), t.nanosecond()).unwrap_or_default()
}

impl Signer {
    /// A signer with the CA `issuer` and the maximum lifetime `max_lifetime`.
    pub fn new(issuer: Issuer<'static, KeyPair>, max_lifetime: Duration) -> Self {
        Signer {
            issuer,
            max_lifetime_ms: AtomicU64::new(to_ms(max_lifetime)),
        }
    }

    /// The maximum lifetime.
    pub fn max_lifetime(&self) -> Duration {
        Duration::from_millis(self.max_lifetime_ms.load(Ordering::Relaxed))
    }

    /// Changes the maximum lifetime for certificates signed from now on.
    pub fn set_max_lifetime(&self, d: Duration) {
        self.max_lifetime_ms.store(to_ms(d), Ordering::Relaxed);
    }

    /// A client certificate for `cn` / `org` with a fresh ECDSA P-256 key, signed by the CA with
    /// exactly the given validity (which may lie in the past): for tests of expired or
    /// soon-expiring credentials. Returns (certificate PEM, key PEM).
    pub fn mint_client_certificate(
        &self,
        cn: &str,
        org: Option<&str>,
        not_before: chrono::DateTime<chrono::Utc>,
        not_after: chrono::DateTime<chrono::Utc>,
    ) -> Result<(String, String), SignError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        let to_time = |t: chrono::DateTime<chrono::Utc>| {
            time::OffsetDateTime::from_unix_timestamp(t.timestamp())
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        };
        params.not_before = to_time(not_before);
        params.not_after = to_time(not_after);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The certificate template for a request (upstream `PermissiveSigningPolicy`), or why it
    /// cannot be represented (a subject attribute type repeated: rcgen keeps one value per
    /// type, and silently dropping a group would be worse than refusing).
    fn template(
        &self,
        csr: &ParsedCsr,
        usages: &[String],
        ttl: Duration,
        now: time::OffsetDateTime,
    ) -> Result<CertificateParams, String> {
        let mut params = CertificateParams::default();
        for (i, (oid, value)) in csr.subject.iter().enumerate() {
            if csr.subject[..i].iter().any(|(o, _)| o == oid) {
                return Err(format!(
                    "fake-apiserver cannot sign subjects with the attribute {oid} repeated"
                ));
            }
            params.distinguished_name.push(dn_type(oid), value.as_str());
        }
        for d in &csr.dns_names {
            let name = d
                .clone()
                .try_into()
                .map_err(|e| format!("DNS SAN {d:?}: {e}"))?;
            params.subject_alt_names.push(SanType::DnsName(name));
        }
        for ip in &csr.ip_addresses {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        for e in &csr.emails {
            let v = e
                .clone()
                .try_into()
                .map_err(|err| format!("email SAN {e:?}: {err}"))?;
            params.subject_alt_names.push(SanType::Rfc822Name(v));
        }
        for u in &csr.uris {
            let v = u
                .clone()
                .try_into()
                .map_err(|err| format!("URI SAN {u:?}: {err}"))?;
            params.subject_alt_names.push(SanType::URI(v));
        }
        usages_to_rcgen(usages, &mut params);
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
        let mut serial =
            Sha256::digest(format!("{nanos}/{}", csr.common_name).as_bytes())[..16].to_vec();
        serial[0] &= 0x7f;
        params.serial_number = Some(SerialNumber::from(serial));
        let to_time = |d: Duration| time::Duration::try_from(d).unwrap_or(time::Duration::ZERO);
        params.not_before = now - to_time(backdate(ttl));
        params.not_after = if ttl < SHORT {
            now + to_time(ttl)
        } else {
            now + to_time(ttl) - to_time(backdate(ttl))
        };
        Ok(params)
    }

    /// Signs `csr` for `csr_name`: `Ok(Err(msg))` when the request cannot be issued (a
    /// `Failed` condition with `msg`).
    pub fn sign(
        &self,
        csr_name: &str,
        signer_name: &str,
        csr: &ParsedCsr,
        usages: &[String],
        expiration_seconds: Option<i64>,
    ) -> Result<Result<IssuedCertificate, String>, SignError> {
        let ttl = lifetime(self.max_lifetime(), expiration_seconds);
        let now = time::OffsetDateTime::now_utc();
        let params = match self.template(csr, usages, ttl, now) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        let key = match SubjectPublicKeyInfo::from_der(&csr.public_key_der) {
            Ok(k) => k,
            Err(e) => return Ok(Err(format!("unsupported public key: {e}"))),
        };
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Ok(IssuedCertificate {
            csr_name: csr_name.to_owned(),
            signer_name: signer_name.to_owned(),
            common_name: csr.common_name.clone(),
            certificate_pem: cert.pem(),
            not_before: to_chrono(params.not_before),
            not_after: to_chrono(params.not_after),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetime_is_upstreams_duration_rule() {
        let year = DEFAULT_MAX_LIFETIME;
        assert_eq!(lifetime(year, None), year);
        assert_eq!(lifetime(year, Some(3600)), Duration::from_secs(3600));
        assert_eq!(lifetime(year, Some(100)), Duration::from_secs(600));
        let short = Duration::from_secs(30);
        assert_eq!(lifetime(short, Some(3600)), short);
        assert_eq!(lifetime(short, None), short);
    }

    #[test]
    fn issues_the_requested_subject_sans_usages_and_lifetime() {
        use crate::certificates::parse_pem;
        use crate::certificates::tests::csr_pem;
        use x509_parser::prelude::FromDer as _;
        let ca = crate::tls::TlsMaterial::generate().expect("ca");
        let signer = Signer::new(ca.ca_issuer().expect("issuer"), Duration::from_secs(30));
        let req = parse_pem(
            csr_pem("system:node:n1", Some("system:nodes"), &["n1", "10.1.2.3"]).as_bytes(),
        )
        .expect("csr");
        let usages = vec![
            "digital signature".to_owned(),
            "key encipherment".to_owned(),
            "server auth".to_owned(),
        ];
        let issued = signer
            .sign("csr-1", SIGNER_KUBELET_SERVING, &req, &usages, Some(3600))
            .expect("sign")
            .expect("issued");
        assert_eq!(issued.csr_name, "csr-1");
        assert_eq!(
            (issued.not_after - issued.not_before).num_seconds(),
            33,
            "30 s plus a 3 s backdate"
        );
        let (_, pem) =
            x509_parser::pem::parse_x509_pem(issued.certificate_pem.as_bytes()).expect("pem");
        let cert = pem.parse_x509().expect("x509");
        let ca_der = pem_der(&ca.ca_pem);
        let (_, ca_cert) =
            x509_parser::certificate::X509Certificate::from_der(&ca_der).expect("ca der");
        cert.verify_signature(Some(ca_cert.public_key()))
            .expect("signed by the CA");
        assert_eq!(
            cert.subject()
                .iter_common_name()
                .next()
                .and_then(|a| a.as_str().ok()),
            Some("system:node:n1")
        );
        assert_eq!(
            cert.subject()
                .iter_organization()
                .next()
                .and_then(|a| a.as_str().ok()),
            Some("system:nodes")
        );
        let eku = cert
            .extended_key_usage()
            .expect("eku")
            .expect("present")
            .value;
        assert!(eku.server_auth && !eku.client_auth);
        let ku = cert.key_usage().expect("ku").expect("present").value;
        assert!(ku.digital_signature() && ku.key_encipherment() && !ku.key_cert_sign());
        let bc = cert
            .basic_constraints()
            .expect("bc")
            .expect("present")
            .value;
        assert!(!bc.ca);
        let san = cert
            .subject_alternative_name()
            .expect("san")
            .expect("present")
            .value;
        assert_eq!(san.general_names.len(), 2);
        assert_eq!(
            cert.public_key().raw,
            req.public_key_der.as_slice(),
            "the requester's key"
        );
    }

    #[test]
    fn repeated_subject_attributes_fail_instead_of_losing_a_group() {
        use rcgen::DistinguishedName;
        let ca = crate::tls::TlsMaterial::generate().expect("ca");
        let signer = Signer::new(ca.ca_issuer().expect("issuer"), DEFAULT_MAX_LIFETIME);
        let key = KeyPair::generate().expect("key");
        let mut p = CertificateParams::default();
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, "alice");
        p.distinguished_name.push(DnType::OrganizationName, "devs");
        // Same OID under another key: rcgen writes both, as a real two-group CSR would be.
        p.distinguished_name
            .push(DnType::CustomDnType(vec![2, 5, 4, 10]), "ops");
        let pem = p.serialize_request(&key).expect("csr").pem().expect("pem");
        let req = crate::certificates::parse_pem(pem.as_bytes()).expect("parse");
        assert_eq!(req.organizations, vec!["devs", "ops"]);
        let usages = vec!["client auth".to_owned()];
        let out = signer
            .sign("c", SIGNER_APISERVER_CLIENT, &req, &usages, None)
            .expect("sign call");
        assert_eq!(
            out.expect_err("refused"),
            "fake-apiserver cannot sign subjects with the attribute 2.5.4.10 repeated"
        );
    }

    fn pem_der(pem: &str) -> Vec<u8> {
        x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .expect("pem")
            .1
            .contents
    }

    #[test]
    fn backdate_scales_for_short_lifetimes() {
        assert_eq!(backdate(DEFAULT_MAX_LIFETIME), BACKDATE);
        assert_eq!(backdate(Duration::from_secs(30)), Duration::from_secs(3));
    }
}
