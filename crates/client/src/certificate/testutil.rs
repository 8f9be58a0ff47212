//! A test certificate authority: issues pairs and signs certificate requests with chosen
//! lifetimes (the unit tests' stand-in for the API server's signer).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, PublicKeyData, SanType,
    SignatureAlgorithm,
};

pub struct TestCa {
    issuer: rcgen::Issuer<'static, KeyPair>,
    pub ca_pem: String,
}

struct RawKey(Vec<u8>);

impl PublicKeyData for RawKey {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }
    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

fn offset(t: SystemTime) -> time::OffsetDateTime {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).unwrap_or(0))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCa {
    pub fn new() -> Self {
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, "test-ca");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().expect("ca key");
        let ca = p.self_signed(&key).expect("ca cert");
        Self {
            ca_pem: ca.pem(),
            issuer: rcgen::Issuer::new(p, key),
        }
    }

    fn params(
        cn: &str,
        orgs: &[&str],
        not_before: SystemTime,
        life: Duration,
    ) -> CertificateParams {
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name.push(DnType::OrganizationName, *o);
        }
        p.not_before = offset(not_before);
        p.not_after = offset(not_before + life);
        p
    }

    /// A new key and a certificate for it valid from now (whole seconds) for `life`.
    pub fn issue(&self, cn: &str, orgs: &[&str], life: Duration) -> (String, String) {
        self.issue_at(cn, orgs, SystemTime::now(), life)
    }

    pub fn issue_at(
        &self,
        cn: &str,
        orgs: &[&str],
        not_before: SystemTime,
        life: Duration,
    ) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let cert = Self::params(cn, orgs, not_before, life)
            .signed_by(&key, &self.issuer)
            .expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    /// Signs a PEM certificate request (ECDSA P-256) as the API server's signer would: the
    /// request's subject and SANs, valid from `not_before` for `life`.
    pub fn sign_request(&self, csr_pem: &str, not_before: SystemTime, life: Duration) -> String {
        use rustls::pki_types::pem::PemObject;
        use x509_parser::extensions::GeneralName;
        use x509_parser::prelude::FromDer;
        let der =
            rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(csr_pem.as_bytes())
                .expect("csr pem");
        let (_, req) =
            x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
                .expect("csr der");
        let info = &req.certification_request_info;
        let cn = info
            .subject
            .iter_common_name()
            .next()
            .and_then(|c| c.as_str().ok())
            .unwrap_or_default()
            .to_owned();
        let orgs: Vec<String> = info
            .subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_owned))
            .collect();
        let org_refs: Vec<&str> = orgs.iter().map(String::as_str).collect();
        let mut p = Self::params(&cn, &org_refs, not_before, life);
        if let Some(exts) = req.requested_extensions() {
            for ext in exts {
                if let x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) = ext {
                    for n in &san.general_names {
                        match n {
                            GeneralName::DNSName(d) => p
                                .subject_alt_names
                                .push(SanType::DnsName((*d).try_into().expect("dns"))),
                            GeneralName::IPAddress(b) if b.len() == 4 => {
                                let a: [u8; 4] = (*b).try_into().expect("v4");
                                p.subject_alt_names
                                    .push(SanType::IpAddress(std::net::IpAddr::from(a)));
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        let key = RawKey(info.subject_pki.subject_public_key.data.to_vec());
        p.signed_by(&key, &self.issuer).expect("sign request").pem()
    }
}
