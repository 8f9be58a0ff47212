//! `certificates.k8s.io/v1` CertificateSigningRequests (upstream
//! `pkg/registry/certificates/certificates/strategy.go`, `pkg/apis/certificates/validation`
//! and the kubelet CSR helpers of `pkg/apis/certificates`): owns create/update rules of the
//! main resource and the `status` and `approval` subresources, PKCS#10 parsing with signature
//! check, and the kubelet client/serving request checks; receives CSR objects (JSON), emits
//! the object to store, a parsed request, or an `ApiError`.

use crate::authn::UserInfo;
use crate::error::ApiError;
use crate::resources::ResourceInfo;
use crate::strategy::Subresource;
use base64::Engine as _;
use serde_json::{Value, json};
use std::net::IpAddr;
use x509_parser::prelude::FromDer as _;

/// The CSR kind.
pub const KIND: &str = "CertificateSigningRequest";
/// Kubelet client certificates (`kubernetes.io/kube-apiserver-client-kubelet`).
pub const SIGNER_KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Kubelet serving certificates.
pub const SIGNER_KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// Client certificates for kube-apiserver.
pub const SIGNER_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// The v1beta1-only signer refused by v1.
pub const SIGNER_LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// Every usage upstream accepts (`allValidUsages`), sorted.
pub const VALID_USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// A parsed, signature-checked PKCS#10 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCsr {
    /// Subject attributes in order, as (OID dotted string, value).
    pub subject: Vec<(String, String)>,
    /// Subject common name ("" if none).
    pub common_name: String,
    /// Subject organizations.
    pub organizations: Vec<String>,
    /// DNS SANs.
    pub dns_names: Vec<String>,
    /// IP SANs.
    pub ip_addresses: Vec<IpAddr>,
    /// Email SANs.
    pub emails: Vec<String>,
    /// URI SANs.
    pub uris: Vec<String>,
    /// The DER SubjectPublicKeyInfo.
    pub public_key_der: Vec<u8>,
}

const OID_CN: &str = "2.5.4.3";
const OID_O: &str = "2.5.4.10";

/// Parses `spec.request` (base64 in JSON) as upstream `ParseCSR` + `CheckSignature`; the error
/// reads like Go's.
pub fn parse_request(request_b64: &str) -> Result<ParsedCsr, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(request_b64.trim())
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_owned())?;
    parse_pem(&bytes)
}

/// [`parse_request`] on PEM bytes.
pub fn parse_pem(pem_bytes: &[u8]) -> Result<ParsedCsr, String> {
    let start = find(pem_bytes, b"-----BEGIN ")
        .ok_or_else(|| "PEM block type must be CERTIFICATE REQUEST".to_owned())?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem_bytes[start..])
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_owned())?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".to_owned());
    }
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
            .map_err(|e| format!("asn1: structure error: {e}"))?;
    csr.verify_signature()
        .map_err(|e| format!("x509: signature verification failed: {e}"))?;
    let info = &csr.certification_request_info;
    let mut subject = Vec::new();
    for rdn in info.subject.iter() {
        for attr in rdn.iter() {
            let value = attr
                .as_str()
                .map_err(|_| "x509: subject attribute is not a string".to_owned())?;
            subject.push((attr.attr_type().to_id_string(), value.to_owned()));
        }
    }
    let mut parsed = ParsedCsr {
        common_name: subject
            .iter()
            .find(|(o, _)| o == OID_CN)
            .map(|(_, v)| v.clone())
            .unwrap_or_default(),
        organizations: subject
            .iter()
            .filter(|(o, _)| o == OID_O)
            .map(|(_, v)| v.clone())
            .collect(),
        subject,
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        emails: Vec::new(),
        uris: Vec::new(),
        public_key_der: info.subject_pki.raw.to_vec(),
    };
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(d) => parsed.dns_names.push((*d).to_owned()),
                    GeneralName::RFC822Name(e) => parsed.emails.push((*e).to_owned()),
                    GeneralName::URI(u) => parsed.uris.push((*u).to_owned()),
                    GeneralName::IPAddress(b) => {
                        let ip = match b.len() {
                            4 => <[u8; 4]>::try_from(*b).ok().map(IpAddr::from),
                            16 => <[u8; 16]>::try_from(*b).ok().map(IpAddr::from),
                            _ => None,
                        }
                        .ok_or_else(|| "x509: invalid IP SAN length".to_owned())?;
                        parsed.ip_addresses.push(ip);
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(parsed)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn usage_set(usages: &[String]) -> std::collections::BTreeSet<&str> {
    usages.iter().map(String::as_str).collect()
}

fn usages_match(usages: &[String], with_rsa: &[&str], without: &[&str]) -> bool {
    let set = usage_set(usages);
    set == with_rsa.iter().copied().collect() || set == without.iter().copied().collect()
}

/// Upstream `ValidateKubeletClientCSR`: O exactly `system:nodes`, no SANs, CN
/// `system:node:…`, usages {digital signature, client auth} (+ key encipherment).
pub fn validate_kubelet_client(csr: &ParsedCsr, usages: &[String]) -> Result<(), String> {
    if csr.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if !csr.dns_names.is_empty() {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if !csr.emails.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !csr.ip_addresses.is_empty() {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if !csr.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    if !csr.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    let full = ["client auth", "digital signature", "key encipherment"];
    if !usages_match(usages, &full, &["client auth", "digital signature"]) {
        return Err(format!("usages did not match {full:?}").replace('"', ""));
    }
    Ok(())
}

/// Upstream `ValidateKubeletServingCSR`: O exactly `system:nodes`, at least one DNS or IP SAN,
/// no email/URI SANs, usages {digital signature, server auth} (+ key encipherment), CN
/// `system:node:…`.
pub fn validate_kubelet_serving(csr: &ParsedCsr, usages: &[String]) -> Result<(), String> {
    if csr.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if csr.dns_names.is_empty() && csr.ip_addresses.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !csr.emails.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !csr.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    let full = ["digital signature", "key encipherment", "server auth"];
    if !usages_match(usages, &full, &["digital signature", "server auth"]) {
        return Err(format!("usages did not match {full:?}").replace('"', ""));
    }
    if !csr.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// Upstream `validAPIServerClientUsages`: optional digital signature / key encipherment,
/// required client auth, nothing else.
pub fn validate_apiserver_client(usages: &[String]) -> Result<(), String> {
    let mut client_auth = false;
    for u in usages {
        match u.as_str() {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if !client_auth {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok(())
}

/// `spec.usages` as strings.
pub fn usages(csr: &Value) -> Vec<String> {
    csr["spec"]["usages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| u.as_str().map(str::to_owned))
        .collect()
}

fn conditions(csr: &Value) -> Vec<&Value> {
    csr["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .collect()
}

/// Whether a condition of `ty` is present (and not False/Unknown).
pub fn has_condition(csr: &Value, ty: &str) -> bool {
    conditions(csr)
        .iter()
        .any(|c| c["type"] == ty && c["status"].as_str().is_none_or(|s| s == "True"))
}

/// `status.certificate` decoded, if any.
pub fn certificate_pem(csr: &Value) -> Option<String> {
    let b = csr["status"]["certificate"]
        .as_str()
        .filter(|s| !s.is_empty())?;
    let raw = base64::engine::general_purpose::STANDARD.decode(b).ok()?;
    String::from_utf8(raw).ok()
}

/// Upstream `PrepareForCreate`: spec.username/uid/groups from the requester (extra is not
/// tracked by this fixture), status cleared.
pub fn prepare_for_create(obj: &mut Value, user: Option<&UserInfo>) {
    if !obj["spec"].is_object() {
        obj["spec"] = json!({});
    }
    if let Some(spec) = obj["spec"].as_object_mut() {
        for f in ["username", "uid", "groups", "extra"] {
            spec.remove(f);
        }
        if let Some(u) = user {
            spec.insert("username".into(), json!(u.name));
            if !u.uid.is_empty() {
                spec.insert("uid".into(), json!(u.uid));
            }
            spec.insert("groups".into(), json!(u.groups));
        }
    }
    obj["status"] = json!({});
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Upstream `populateConditionTimestamps`.
fn populate_condition_timestamps(new: &mut Value, old: &Value) {
    let now = now_rfc3339();
    let old_conds: Vec<Value> = conditions(old).into_iter().cloned().collect();
    if let Some(conds) = new["status"]["conditions"].as_array_mut() {
        for c in conds {
            if !c.is_object() {
                continue;
            }
            if c["lastUpdateTime"].as_str().is_none_or(str::is_empty) {
                c["lastUpdateTime"] = json!(now);
            }
            if c["lastTransitionTime"].as_str().is_none_or(str::is_empty) {
                let previous = old_conds.iter().find(|o| {
                    o["type"] == c["type"]
                        && o["status"] == c["status"]
                        && o["lastTransitionTime"]
                            .as_str()
                            .is_some_and(|t| !t.is_empty())
                });
                c["lastTransitionTime"] = match previous {
                    Some(o) => o["lastTransitionTime"].clone(),
                    None => json!(now),
                };
            }
        }
    }
}

fn condition_indices(csr: &Value, ty: &str) -> Vec<usize> {
    conditions(csr)
        .iter()
        .enumerate()
        .filter(|(_, c)| c["type"] == ty)
        .map(|(i, _)| i)
        .collect()
}

/// Upstream `preserveConditionInstances`.
fn preserve_condition_instances(new: &mut Value, old: &Value, ty: &str) {
    let oi = condition_indices(old, ty);
    let ni = condition_indices(new, ty);
    if oi.len() != ni.len() {
        return;
    }
    for (o, n) in oi.into_iter().zip(ni) {
        new["status"]["conditions"][n] = old["status"]["conditions"][o].clone();
    }
}

fn set_or_remove(obj: &mut Value, key: &str, v: Option<Value>) {
    match v {
        Some(v) => obj[key] = v,
        None => {
            if let Some(m) = obj.as_object_mut() {
                m.remove(key);
            }
        }
    }
}

/// The update of a stored CSR through `sub`: main resource (metadata only; spec and status
/// kept), `/status` (certificate and conditions other than Approved/Denied) or `/approval`
/// (conditions only), each validated as upstream.
pub fn prepare_update(
    info: &ResourceInfo,
    old: &Value,
    mut new: Value,
    sub: Subresource,
) -> Result<Value, ApiError> {
    let old_spec = old.get("spec").cloned();
    match sub {
        Subresource::Approval => {
            populate_condition_timestamps(&mut new, old);
            let conds = new["status"].get("conditions").cloned();
            set_or_remove(&mut new, "status", old.get("status").cloned());
            if !new["status"].is_object() {
                new["status"] = json!({});
            }
            set_or_remove(&mut new["status"], "conditions", conds);
        }
        Subresource::Status => {
            preserve_condition_instances(&mut new, old, "Approved");
            preserve_condition_instances(&mut new, old, "Denied");
            populate_condition_timestamps(&mut new, old);
        }
        _ => set_or_remove(&mut new, "status", old.get("status").cloned()),
    }
    set_or_remove(&mut new, "spec", old_spec);
    let new = crate::strategy::prepare_update(info, old, new, true)?;
    validate(&new, Some(old), sub)?;
    Ok(new)
}

/// Create-time validation (upstream `ValidateCertificateSigningRequestCreate`).
pub fn validate_create(obj: &Value) -> Result<(), ApiError> {
    validate(obj, None, Subresource::Main)
}

/// Names: upstream does not care what CSRs are called, beyond being a path segment.
pub fn validate_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(ApiError::invalid(
            KIND,
            name,
            "metadata.name: Required value: name or generateName is required",
        ));
    }
    if name == "." || name == ".." || name.contains('/') || name.contains('%') {
        return Err(ApiError::invalid(
            KIND,
            name,
            &format!(
                "metadata.name: Invalid value: \"{name}\": may not be '.' or '..' and may not contain '/' or '%'"
            ),
        ));
    }
    Ok(())
}

type Cause = (&'static str, String, String);

fn signer_name_causes(signer: &str, out: &mut Vec<Cause>) {
    let field = "spec.signerName".to_owned();
    if signer.is_empty() {
        out.push(("FieldValueRequired", "Required value".into(), field));
        return;
    }
    if signer == SIGNER_LEGACY_UNKNOWN {
        out.push((
            "FieldValueInvalid",
            format!(
                "Invalid value: \"{signer}\": the legacy signerName is not allowed via this API version"
            ),
            field,
        ));
        return;
    }
    if signer.len() > 571 {
        out.push((
            "FieldValueTooLong",
            "Too long: may not be more than 571 bytes".into(),
            field,
        ));
        return;
    }
    let ok = signer.split_once('/').is_some_and(|(domain, path)| {
        crate::strategy::is_dns_subdomain(domain)
            && domain.contains('.')
            && !path.is_empty()
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'/'))
    });
    if !ok {
        out.push((
            "FieldValueInvalid",
            format!(
                "Invalid value: \"{signer}\": must be a fully qualified domain and path of the form 'example.com/signer-name'"
            ),
            field,
        ));
    }
}

fn certificate_error(pem_b64: &str) -> Option<String> {
    let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(pem_b64) else {
        return Some("must contain at least one CERTIFICATE PEM block".into());
    };
    let mut blocks = 0;
    for pem in x509_parser::pem::Pem::iter_from_buffer(&raw) {
        let Ok(pem) = pem else {
            break;
        };
        if pem.label != "CERTIFICATE" {
            return Some(format!(
                "only CERTIFICATE PEM blocks are allowed, found {:?}",
                pem.label
            ));
        }
        if pem.parse_x509().is_err() {
            return Some("x509: malformed certificate".into());
        }
        blocks += 1;
    }
    (blocks == 0).then(|| "must contain at least one CERTIFICATE PEM block".into())
}

fn condition_causes(csr: &Value, out: &mut Vec<Cause>) {
    let mut seen: Vec<String> = Vec::new();
    let (mut approved, mut denied) = (false, false);
    for (i, c) in conditions(csr).iter().enumerate() {
        let field = |f: &str| format!("status.conditions[{i}].{f}");
        let ty = c["type"].as_str().unwrap_or_default();
        if ty.is_empty() {
            out.push(("FieldValueRequired", "Required value".into(), field("type")));
        }
        let status = c["status"].as_str().unwrap_or_default();
        let allowed: &[&str] = if matches!(ty, "Approved" | "Denied" | "Failed") {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        if status.is_empty() {
            out.push((
                "FieldValueRequired",
                "Required value".into(),
                field("status"),
            ));
        } else if !allowed.contains(&status) {
            let list: Vec<String> = allowed.iter().map(|s| format!("\"{s}\"")).collect();
            out.push((
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: \"{status}\": supported values: {}",
                    list.join(", ")
                ),
                field("status"),
            ));
        }
        let exclusive = match ty {
            "Approved" => {
                approved = true;
                denied
            }
            "Denied" => {
                denied = true;
                approved
            }
            _ => false,
        };
        if exclusive {
            out.push((
                "FieldValueInvalid",
                format!(
                    "Invalid value: \"{ty}\": Approved and Denied conditions are mutually exclusive"
                ),
                field("type"),
            ));
        }
        if seen.iter().any(|s| s == ty) {
            out.push((
                "FieldValueDuplicate",
                format!("Duplicate value: \"{ty}\""),
                field("type"),
            ));
        }
        seen.push(ty.to_owned());
    }
}

/// Upstream `validateCertificateSigningRequest` (+ the update rules when `old` is given).
pub fn validate(csr: &Value, old: Option<&Value>, sub: Subresource) -> Result<(), ApiError> {
    let name = csr["metadata"]["name"].as_str().unwrap_or_default();
    let mut causes: Vec<Cause> = Vec::new();
    let request = csr["spec"]["request"].as_str().unwrap_or_default();
    if let Err(e) = parse_request(request) {
        causes.push((
            "FieldValueInvalid",
            format!("Invalid value: \"<request data>\": {e}"),
            "spec.request".into(),
        ));
    }
    let us = usages(csr);
    if us.is_empty() {
        causes.push((
            "FieldValueRequired",
            "Required value".into(),
            "spec.usages".into(),
        ));
    }
    if !csr["spec"]["usages"].is_null() && !csr["spec"]["usages"].is_array() {
        causes.push((
            "FieldValueInvalid",
            "Invalid value: must be a list of strings".into(),
            "spec.usages".into(),
        ));
    }
    for (i, u) in us.iter().enumerate() {
        if !VALID_USAGES.contains(&u.as_str()) {
            let list: Vec<String> = VALID_USAGES.iter().map(|s| format!("\"{s}\"")).collect();
            causes.push((
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: \"{u}\": supported values: {}",
                    list.join(", ")
                ),
                format!("spec.usages[{i}]"),
            ));
        }
        if us[..i].contains(u) {
            causes.push((
                "FieldValueDuplicate",
                format!("Duplicate value: \"{u}\""),
                format!("spec.usages[{i}]"),
            ));
        }
    }
    signer_name_causes(
        csr["spec"]["signerName"].as_str().unwrap_or_default(),
        &mut causes,
    );
    let exp = &csr["spec"]["expirationSeconds"];
    if !exp.is_null() {
        match exp.as_i64() {
            Some(s) if s >= 600 && s <= i64::from(i32::MAX) => {}
            Some(s) => causes.push((
                "FieldValueInvalid",
                format!(
                    "Invalid value: {s}: may not specify a duration less than 600 seconds (10 minutes)"
                ),
                "spec.expirationSeconds".into(),
            )),
            None => causes.push((
                "FieldValueInvalid",
                "Invalid value: must be an integer".into(),
                "spec.expirationSeconds".into(),
            )),
        }
    }
    condition_causes(csr, &mut causes);
    let cert = csr["status"]["certificate"].as_str().unwrap_or_default();
    let cert_changed =
        old.is_none_or(|o| o["status"]["certificate"] != csr["status"]["certificate"]);
    if cert_changed
        && !cert.is_empty()
        && let Some(e) = certificate_error(cert)
    {
        causes.push((
            "FieldValueInvalid",
            format!("Invalid value: \"<certificate data>\": {e}"),
            "status.certificate".into(),
        ));
    }
    if let Some(old) = old {
        update_causes(csr, old, sub, &mut causes);
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_causes(KIND, name, causes))
    }
}

fn update_causes(csr: &Value, old: &Value, sub: Subresource, causes: &mut Vec<Cause>) {
    let find = |v: &Value, ty: &str| -> Vec<Value> {
        conditions(v)
            .into_iter()
            .filter(|c| c["type"] == ty)
            .cloned()
            .collect()
    };
    let forbidden = |msg: String| {
        (
            "FieldValueForbidden",
            format!("Forbidden: {msg}"),
            "status.conditions".to_owned(),
        )
    };
    for ty in ["Approved", "Denied", "Failed"] {
        if find(csr, ty).len() < find(old, ty).len() {
            causes.push(forbidden(format!(
                "updates may not remove a condition of type \"{ty}\""
            )));
        }
    }
    if sub != Subresource::Approval {
        for ty in ["Approved", "Denied"] {
            let (o, n) = (find(old, ty), find(csr, ty));
            if n.len() > o.len() {
                causes.push(forbidden(format!(
                    "updates may not add a condition of type \"{ty}\""
                )));
            } else if n.len() == o.len() && n != o {
                causes.push(forbidden(format!(
                    "updates may not modify a condition of type \"{ty}\""
                )));
            }
        }
    }
    if csr["status"]["certificate"] != old["status"]["certificate"] {
        let field = "status.certificate".to_owned();
        if sub != Subresource::Status {
            causes.push((
                "FieldValueForbidden",
                "Forbidden: updates may not set certificate content".into(),
                field,
            ));
        } else if old["status"]["certificate"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
        {
            causes.push((
                "FieldValueForbidden",
                "Forbidden: updates may not modify existing certificate content".into(),
                field,
            ));
        }
    }
}

/// apimachinery `duration.HumanDuration`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        return match s % 60 {
            0 => format!("{m}m"),
            r => format!("{m}m{r}s"),
        };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        return match m % 60 {
            0 => format!("{h}h"),
            r => format!("{h}h{r}m"),
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    if h < 24 * 8 {
        return match h % 24 {
            0 => format!("{}d", h / 24),
            r => format!("{}d{r}h", h / 24),
        };
    }
    if h < 24 * 365 * 2 {
        return format!("{}d", h / 24);
    }
    if h < 24 * 365 * 8 {
        return match (h / 24) % 365 {
            0 => format!("{}y", h / 24 / 365),
            r => format!("{}y{r}d", h / 24 / 365),
        };
    }
    format!("{}y", h / 24 / 365)
}

/// kubectl's CONDITION column (upstream printer's `extractCSRStatus`).
pub fn condition_column(csr: &Value) -> String {
    let mut s = if has_condition(csr, "Denied") {
        "Denied".to_owned()
    } else if has_condition(csr, "Approved") {
        "Approved".to_owned()
    } else {
        "Pending".to_owned()
    };
    if has_condition(csr, "Failed") {
        s.push_str(",Failed");
    }
    if csr["status"]["certificate"]
        .as_str()
        .is_some_and(|c| !c.is_empty())
    {
        s.push_str(",Issued");
    }
    s
}

#[cfg(test)]
#[path = "certificates_tests.rs"]
pub(crate) mod tests;
