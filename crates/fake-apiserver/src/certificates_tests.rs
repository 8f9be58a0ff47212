use super::*;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

/// A PEM CSR with CN, at most one O and SANs (IPs or DNS names).
pub(crate) fn csr_pem(cn: &str, org: Option<&str>, sans: &[&str]) -> String {
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
        .expect("params");
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = org {
        p.distinguished_name.push(DnType::OrganizationName, o);
    }
    p.serialize_request(&key).expect("csr").pem().expect("pem")
}

pub(crate) fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn csr_obj(request_pem: &str, signer: &str, usages: &[&str]) -> Value {
    json!({
        "metadata": {"name": "csr-1"},
        "spec": {"request": b64(request_pem), "signerName": signer, "usages": usages},
    })
}

fn client_csr() -> Value {
    let pem = csr_pem("system:node:n1", Some("system:nodes"), &[]);
    csr_obj(
        &pem,
        SIGNER_KUBELET_CLIENT,
        &["digital signature", "client auth"],
    )
}

fn info() -> &'static ResourceInfo {
    crate::resources::find("certificates.k8s.io", "v1", "certificatesigningrequests")
        .expect("csr resource")
}

#[test]
fn parses_subject_sans_and_checks_the_signature() {
    let pem = csr_pem(
        "system:node:n1",
        Some("system:nodes"),
        &["n1.example", "10.0.0.7"],
    );
    let p = parse_pem(pem.as_bytes()).expect("parse");
    assert_eq!(p.common_name, "system:node:n1");
    assert_eq!(p.organizations, vec!["system:nodes"]);
    assert_eq!(p.dns_names, vec!["n1.example"]);
    assert_eq!(
        p.ip_addresses,
        vec!["10.0.0.7".parse::<IpAddr>().expect("ip")]
    );
    let wrong_label = pem.replace("CERTIFICATE REQUEST", "CERTIFICATE");
    assert_eq!(
        parse_pem(wrong_label.as_bytes()),
        Err("PEM block type must be CERTIFICATE REQUEST".to_owned())
    );
    assert!(parse_pem(b"not pem at all").is_err());
    // Flip a byte of the signature (the DER ends with it).
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
    let mut der = block.contents.clone();
    let last = der.len() - 5;
    der[last] ^= 0x55;
    let tampered = format!(
        "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
        base64::engine::general_purpose::STANDARD.encode(&der)
    );
    let err = parse_pem(tampered.as_bytes()).expect_err("bad signature");
    assert!(err.contains("signature") || err.contains("asn1"), "{err}");
}

#[test]
fn create_validation_names_each_field() {
    assert!(validate_create(&client_csr()).is_ok());
    let pem = csr_pem("system:node:n1", Some("system:nodes"), &[]);
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            csr_obj("garbage", SIGNER_KUBELET_CLIENT, &["client auth"]),
            "spec.request",
            "PEM block type must be CERTIFICATE REQUEST",
        ),
        (
            csr_obj(&pem, SIGNER_KUBELET_CLIENT, &[]),
            "spec.usages",
            "Required value",
        ),
        (
            csr_obj(&pem, SIGNER_KUBELET_CLIENT, &["client auth", "flying"]),
            "spec.usages[1]",
            "Unsupported value: \"flying\"",
        ),
        (
            csr_obj(&pem, SIGNER_KUBELET_CLIENT, &["client auth", "client auth"]),
            "spec.usages[1]",
            "Duplicate value: \"client auth\"",
        ),
        (
            csr_obj(&pem, "", &["client auth"]),
            "spec.signerName",
            "Required value",
        ),
        (
            csr_obj(&pem, SIGNER_LEGACY_UNKNOWN, &["client auth"]),
            "spec.signerName",
            "legacy signerName is not allowed",
        ),
        (
            csr_obj(&pem, "no-slash", &["client auth"]),
            "spec.signerName",
            "must be a fully qualified domain and path",
        ),
    ];
    for (obj, field, msg) in cases {
        let e = validate_create(&obj).expect_err(field);
        assert_eq!(e.code, 422);
        assert!(
            e.causes
                .iter()
                .any(|(_, m, f)| f == field && m.contains(msg)),
            "{field}: {:?}",
            e.causes
        );
    }
    let mut short = client_csr();
    short["spec"]["expirationSeconds"] = json!(599);
    let e = validate_create(&short).expect_err("too short");
    assert!(e.message.contains(
        "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds"
    ));
    let mut custom = client_csr();
    custom["spec"]["signerName"] = json!("example.com/my-signer");
    assert!(validate_create(&custom).is_ok());
}

#[test]
fn create_takes_the_requester_and_clears_status() {
    let mut obj = client_csr();
    obj["spec"]["username"] = json!("someone-else");
    obj["spec"]["groups"] = json!(["system:masters"]);
    obj["status"] =
        json!({"certificate": b64("x"), "conditions": [{"type": "Approved", "status": "True"}]});
    let user = UserInfo::new(
        "system:bootstrap:abcdef",
        vec!["system:bootstrappers".into()],
    );
    prepare_for_create(&mut obj, Some(&user));
    assert_eq!(obj["spec"]["username"], "system:bootstrap:abcdef");
    assert_eq!(
        obj["spec"]["groups"],
        json!(["system:bootstrappers", "system:authenticated"])
    );
    assert_eq!(obj["status"], json!({}));
}

fn stored() -> Value {
    let mut obj = client_csr();
    prepare_for_create(&mut obj, None);
    obj["kind"] = json!(KIND);
    obj["apiVersion"] = json!("certificates.k8s.io/v1");
    obj["metadata"]["uid"] = json!("u1");
    obj["metadata"]["resourceVersion"] = json!("5");
    obj
}

fn with_condition(obj: &Value, ty: &str) -> Value {
    let mut next = obj.clone();
    let mut conds = next["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conds.push(json!({"type": ty, "status": "True", "reason": "R", "message": "m"}));
    next["status"]["conditions"] = json!(conds);
    next
}

#[test]
fn approval_changes_only_conditions_and_stamps_them() {
    let old = stored();
    let mut next = with_condition(&old, "Approved");
    next["spec"]["username"] = json!("mallory");
    next["status"]["certificate"] = json!(b64("forged"));
    let out = prepare_update(info(), &old, next, Subresource::Approval).expect("approve");
    assert_eq!(out["spec"], old["spec"]);
    assert!(out["status"]["certificate"].is_null());
    let c = &out["status"]["conditions"][0];
    assert_eq!(c["type"], "Approved");
    assert!(c["lastUpdateTime"].is_string() && c["lastTransitionTime"].is_string());
    // Approved and Denied are mutually exclusive, and conditions cannot be removed.
    let denied = with_condition(&out, "Denied");
    let e = prepare_update(info(), &out, denied, Subresource::Approval).expect_err("both");
    assert!(e.message.contains("mutually exclusive"), "{}", e.message);
    let mut removed = out.clone();
    removed["status"]["conditions"] = json!([]);
    let e = prepare_update(info(), &out, removed, Subresource::Approval).expect_err("remove");
    assert!(
        e.message
            .contains("updates may not remove a condition of type \"Approved\""),
        "{}",
        e.message
    );
}

#[test]
fn status_sets_the_certificate_once_and_never_approves() {
    let old = stored();
    let e = prepare_update(
        info(),
        &old,
        with_condition(&old, "Approved"),
        Subresource::Status,
    )
    .expect_err("approve via status");
    assert!(
        e.message
            .contains("updates may not add a condition of type \"Approved\""),
        "{}",
        e.message
    );
    let ca = crate::tls::TlsMaterial::generate().expect("tls");
    let mut next = old.clone();
    next["status"]["certificate"] = json!(b64(&ca.ca_pem));
    let issued = prepare_update(info(), &old, next, Subresource::Status).expect("cert");
    assert!(issued["status"]["certificate"].is_string());
    let mut again = issued.clone();
    again["status"]["certificate"] = json!(b64(&ca.server_cert_pem));
    let e = prepare_update(info(), &issued, again, Subresource::Status).expect_err("modify");
    assert!(
        e.message
            .contains("may not modify existing certificate content")
    );
    let mut junk = old.clone();
    junk["status"]["certificate"] = json!(b64("not a certificate"));
    let e = prepare_update(info(), &old, junk, Subresource::Status).expect_err("junk");
    assert!(e.message.contains("status.certificate"), "{}", e.message);
    // Failed is a status condition.
    let failed = prepare_update(
        info(),
        &old,
        with_condition(&old, "Failed"),
        Subresource::Status,
    )
    .expect("failed");
    assert_eq!(condition_column(&failed), "Pending,Failed");
    // The main resource keeps spec and status.
    let mut main = with_condition(&old, "Approved");
    main["metadata"]["labels"] = json!({"a": "b"});
    let out = prepare_update(info(), &old, main, Subresource::Main).expect("main");
    assert_eq!(out["status"], old["status"]);
    assert_eq!(out["metadata"]["labels"]["a"], "b");
}

#[test]
fn kubelet_request_checks_match_upstream() {
    let u = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let client =
        parse_pem(csr_pem("system:node:n1", Some("system:nodes"), &[]).as_bytes()).expect("client");
    assert_eq!(
        validate_kubelet_client(&client, &u(&["digital signature", "client auth"])),
        Ok(())
    );
    assert_eq!(
        validate_kubelet_client(
            &client,
            &u(&["digital signature", "key encipherment", "client auth"])
        ),
        Ok(())
    );
    assert!(
        validate_kubelet_client(&client, &u(&["client auth", "server auth"]))
            .expect_err("usages")
            .starts_with("usages did not match")
    );
    let other_org =
        parse_pem(csr_pem("system:node:n1", Some("system:masters"), &[]).as_bytes()).expect("o");
    assert_eq!(
        validate_kubelet_client(&other_org, &u(&["client auth"])),
        Err("subject organization is not system:nodes".into())
    );
    let with_san =
        parse_pem(csr_pem("system:node:n1", Some("system:nodes"), &["n1"]).as_bytes()).expect("s");
    assert_eq!(
        validate_kubelet_client(&with_san, &u(&["digital signature", "client auth"])),
        Err("DNS subjectAltNames are not allowed".into())
    );
    let bad_cn = parse_pem(csr_pem("alice", Some("system:nodes"), &[]).as_bytes()).expect("cn");
    assert_eq!(
        validate_kubelet_client(&bad_cn, &u(&["digital signature", "client auth"])),
        Err("subject common name does not begin with system:node:".into())
    );
    let serving = &u(&["digital signature", "key encipherment", "server auth"]);
    assert_eq!(validate_kubelet_serving(&with_san, serving), Ok(()));
    assert_eq!(
        validate_kubelet_serving(&client, serving),
        Err("DNS or IP subjectAltName is required".into())
    );
    assert!(
        validate_kubelet_serving(&with_san, &u(&["server auth", "client auth"]))
            .expect_err("usages")
            .starts_with("usages did not match")
    );
    assert_eq!(validate_apiserver_client(&u(&["client auth"])), Ok(()));
    assert!(validate_apiserver_client(&u(&["server auth", "client auth"])).is_err());
    assert!(validate_apiserver_client(&u(&["digital signature"])).is_err());
}

#[test]
fn printer_columns() {
    assert_eq!(human_duration(600), "10m");
    assert_eq!(human_duration(3600), "60m");
    assert_eq!(human_duration(86400), "24h");
    assert_eq!(human_duration(365 * 86400), "365d");
    assert_eq!(condition_column(&stored()), "Pending");
    let mut issued = with_condition(&stored(), "Approved");
    issued["status"]["certificate"] = json!("eA==");
    assert_eq!(condition_column(&issued), "Approved,Issued");
    assert_eq!(
        condition_column(&with_condition(&stored(), "Denied")),
        "Denied"
    );
}
