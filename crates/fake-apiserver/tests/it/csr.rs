//! The certificates API over HTTPS as a kubelet uses it: bootstrap-token authentication, CSR
//! create/watch, approval (auto and manual), signing with the server's CA, the issued
//! certificate authenticating on the same port, and the attacks a bootstrap token holder or a
//! bad certificate can try.

use crate::common;

use base64::Engine as _;
use bytes::Bytes;
use common::{Conn, send_json};
use fake_apiserver::{BootstrapToken, FakeApiServer, Options};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const TOKEN: &str = "abcdef.0123456789abcdef";

async fn server(opts: Options) -> (FakeApiServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FakeApiServer::start(Options {
        kubeconfig_path: Some(dir.path().join("kubeconfig")),
        ..opts
    })
    .await
    .expect("start");
    s.create_bootstrap_token(&BootstrapToken::new("abcdef", "0123456789abcdef"))
        .expect("bootstrap token");
    (s, dir)
}

/// How a test request authenticates.
enum Auth<'a> {
    None,
    Bearer(&'a str),
    Cert(&'a str, &'a str),
}

fn tls_config(s: &FakeApiServer, auth: &Auth<'_>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let ca = CertificateDer::from_pem_slice(s.ca_pem.as_deref().expect("ca").as_bytes())
        .expect("ca pem");
    roots.add(ca).expect("root");
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let cfg = match auth {
        Auth::Cert(cert, key) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .expect("cert pem"),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key pem"),
            )
            .expect("client auth"),
        _ => builder.with_no_client_auth(),
    };
    Arc::new(cfg)
}

async fn connect(s: &FakeApiServer, auth: &Auth<'_>) -> Conn {
    let tcp = tokio::net::TcpStream::connect(s.addr)
        .await
        .expect("connect");
    let tls = tokio_rustls::TlsConnector::from(tls_config(s, auth))
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("TLS handshake (a bad client certificate must not fail the handshake)");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("http handshake");
    tokio::spawn(conn);
    send
}

async fn call(
    s: &FakeApiServer,
    auth: &Auth<'_>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut conn = connect(s, auth).await;
    let token = match auth {
        Auth::Bearer(t) => Some(*t),
        _ => None,
    };
    send_json(&mut conn, method, path, "application/json", token, body).await
}

async fn patch(s: &FakeApiServer, path: &str, ct: &str, body: Value) -> (u16, Value) {
    let mut conn = connect(s, &Auth::None).await;
    send_json(
        &mut conn,
        "PATCH",
        path,
        ct,
        Some(s.token.as_str()),
        Some(body),
    )
    .await
}

/// A CSR object and its private key (PEM), as the kubelet builds them: ECDSA P-256.
fn kubelet_csr(
    name: &str,
    cn: &str,
    org: &str,
    sans: &[&str],
    signer: &str,
    usages: &[&str],
) -> (Value, String) {
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
        .expect("params");
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.distinguished_name.push(DnType::OrganizationName, org);
    let pem = p.serialize_request(&key).expect("csr").pem().expect("pem");
    let obj = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": signer,
            "usages": usages,
            "expirationSeconds": 3600,
        },
    });
    (obj, key.serialize_pem())
}

fn client_csr(name: &str, node: &str) -> (Value, String) {
    kubelet_csr(
        name,
        &format!("system:node:{node}"),
        "system:nodes",
        &[],
        "kubernetes.io/kube-apiserver-client-kubelet",
        &["digital signature", "client auth"],
    )
}

fn certificate(csr: &Value) -> Option<String> {
    let b = csr["status"]["certificate"].as_str()?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b)
        .expect("base64");
    Some(String::from_utf8(raw).expect("pem"))
}

async fn issued(s: &FakeApiServer, name: &str) -> Value {
    s.wait_for(Duration::from_secs(10), |s| {
        s.csr(name).filter(|c| certificate(c).is_some())
    })
    .await
    .unwrap_or_else(|| panic!("{name} was not issued: {:?}", s.csr(name)))
}

/// Reads a watch stream until an event's object satisfies `done`.
async fn watch_until(
    s: &FakeApiServer,
    auth: &Auth<'_>,
    path: &str,
    done: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut conn = connect(s, auth).await;
    let mut req = http::Request::builder()
        .uri(path)
        .header("host", "localhost");
    if let Auth::Bearer(t) = auth {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = conn
        .send_request(req.body(Full::new(Bytes::new())).expect("req"))
        .await
        .expect("watch");
    assert_eq!(resp.status(), 200, "watch refused");
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("watch event in time")
            .expect("stream open")
            .expect("frame");
        if let Some(d) = frame.data_ref() {
            buf.extend_from_slice(d);
        }
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let ev: Value = serde_json::from_slice(&line).expect("event json");
            let finished = done(&ev["object"]);
            events.push(ev);
            if finished {
                return events;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_token_to_auto_approved_client_certificate_that_authenticates() {
    let (s, _d) = server(Options {
        csr_auto_approve: true,
        csr_cert_lifetime: Duration::from_secs(30),
        ..Options::default()
    })
    .await;
    let boot = Auth::Bearer(TOKEN);
    let (csr, key) = client_csr("node-csr-1", "n1");
    let (code, created) = call(&s, &boot, "POST", CSRS, Some(csr)).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["username"], "system:bootstrap:abcdef");
    assert_eq!(
        created["spec"]["groups"],
        json!([
            "system:bootstrappers",
            "system:bootstrappers:kubeadm:default-node-token",
            "system:authenticated"
        ])
    );
    // The kubelet's wait: watch the one CSR by name with the bootstrap credentials.
    let events = watch_until(
        &s,
        &boot,
        &format!("{CSRS}?fieldSelector=metadata.name%3Dnode-csr-1&watch=true"),
        |o| o["status"]["certificate"].is_string(),
    )
    .await;
    let last = &events.last().expect("events")["object"];
    let approved = &last["status"]["conditions"][0];
    assert_eq!(approved["type"], "Approved");
    assert_eq!(approved["reason"], "AutoApproved");
    assert_eq!(
        approved["message"],
        "Auto approving kubelet client certificate after SubjectAccessReview."
    );
    let cert = certificate(last).expect("certificate");
    let certs = s.issued_certificates();
    assert_eq!(certs.len(), 1);
    assert_eq!(certs[0].certificate_pem, cert);
    assert_eq!(certs[0].common_name, "system:node:n1");
    assert_eq!(
        (certs[0].not_after - certs[0].not_before).num_seconds(),
        33,
        "the configured 30 s maximum wins over expirationSeconds 3600 (+3 s backdate)"
    );

    // The certificate authenticates as CN / O on the same port.
    let me = Auth::Cert(&cert, &key);
    let (code, who) = call(
        &s,
        &me,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
    )
    .await;
    assert_eq!(code, 201, "{who}");
    assert_eq!(
        who["status"]["userInfo"],
        json!({"username": "system:node:n1", "groups": ["system:nodes", "system:authenticated"]})
    );
    // A bootstrapper asking for more than a node client certificate gets nothing approved.
    let (masters, _) = kubelet_csr(
        "escalate-1",
        "admin",
        "system:masters",
        &[],
        "kubernetes.io/kube-apiserver-client",
        &["client auth"],
    );
    assert_eq!(call(&s, &boot, "POST", CSRS, Some(masters)).await.0, 201);
    let (node_masters, _) = kubelet_csr(
        "escalate-2",
        "system:node:n1",
        "system:masters",
        &[],
        "kubernetes.io/kube-apiserver-client-kubelet",
        &["digital signature", "client auth"],
    );
    assert_eq!(
        call(&s, &boot, "POST", CSRS, Some(node_masters)).await.0,
        201
    );
    // Renewal with the node's own certificate: selfnodeclient.
    let (renew, _) = client_csr("node-csr-2", "n1");
    let (code, created) = call(&s, &me, "POST", CSRS, Some(renew)).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["username"], "system:node:n1");
    let renewed = issued(&s, "node-csr-2").await;
    assert_eq!(
        renewed["status"]["conditions"][0]["message"],
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    );
    // The controllers went past the escalation attempts (created earlier) without approving.
    for name in ["escalate-1", "escalate-2"] {
        let c = s.csr(name).expect("csr");
        assert!(c["status"]["conditions"].is_null(), "{name}: {c}");
    }
    // A node may do more than a bootstrapper (no node authorizer here).
    let (code, _) = call(
        &s,
        &me,
        "POST",
        "/api/v1/nodes",
        Some(json!({"metadata": {"name": "n1"}})),
    )
    .await;
    assert_eq!(code, 201);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_csrs_need_manual_approval_and_get_sans_and_server_auth() {
    let (s, _d) = server(Options {
        csr_auto_approve: true,
        ..Options::default()
    })
    .await;
    let admin = Auth::Bearer(&s.token);
    let (serving, _) = kubelet_csr(
        "serving-1",
        "system:node:n1",
        "system:nodes",
        &["n1", "127.0.0.1"],
        "kubernetes.io/kubelet-serving",
        &["digital signature", "key encipherment", "server auth"],
    );
    let (code, _) = call(&s, &admin, "POST", CSRS, Some(serving)).await;
    assert_eq!(code, 201);
    // A client CSR created after it is auto-approved and issued: the controllers ran past
    // the serving CSR and left it pending.
    let (client, _) = client_csr("client-1", "n1");
    assert_eq!(call(&s, &admin, "POST", CSRS, Some(client)).await.0, 201);
    issued(&s, "client-1").await;
    let pending = s.csr("serving-1").expect("csr");
    assert!(pending["status"]["conditions"].is_null(), "{pending}");
    s.approve_csr("serving-1").expect("approve");
    let done = issued(&s, "serving-1").await;
    let pem = certificate(&done).expect("cert");
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
    let cert = block.parse_x509().expect("x509");
    let eku = cert
        .extended_key_usage()
        .expect("eku")
        .expect("eku present")
        .value;
    assert!(eku.server_auth && !eku.client_auth);
    let sans = cert
        .subject_alternative_name()
        .expect("san")
        .expect("san present")
        .value;
    assert_eq!(sans.general_names.len(), 2);
    let secs =
        (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()) as u64;
    assert_eq!(
        secs,
        3600 + 300,
        "expirationSeconds honoured, NotBefore backdated 5 min"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_for_a_signer_fail_without_a_certificate() {
    let (s, _d) = server(Options::default()).await;
    let admin = Auth::Bearer(&s.token);
    // Valid for the API (any subject), invalid for the kubelet client signer.
    let (masters, _) = kubelet_csr(
        "escalate",
        "system:node:n1",
        "system:masters",
        &[],
        "kubernetes.io/kube-apiserver-client-kubelet",
        &["digital signature", "client auth"],
    );
    assert_eq!(call(&s, &admin, "POST", CSRS, Some(masters)).await.0, 201);
    s.approve_csr("escalate").expect("approve");
    let failed = s
        .wait_for(Duration::from_secs(10), |s| {
            s.csr("escalate").filter(|c| {
                c["status"]["conditions"]
                    .as_array()
                    .is_some_and(|a| a.len() == 2)
            })
        })
        .await
        .expect("failed condition");
    let f = &failed["status"]["conditions"][1];
    assert_eq!(f["type"], "Failed");
    assert_eq!(f["reason"], "SignerValidationFailure");
    assert_eq!(f["message"], "subject organization is not system:nodes");
    assert!(failed["status"]["certificate"].is_null());
    assert!(s.issued_certificates().is_empty());
    // An unknown signer is left alone (approved, never issued, never failed).
    let (custom, _) = kubelet_csr(
        "custom",
        "x",
        "y",
        &[],
        "example.com/signer",
        &["client auth"],
    );
    assert_eq!(call(&s, &admin, "POST", CSRS, Some(custom)).await.0, 201);
    s.approve_csr("custom").expect("approve");
    // Denied stays denied and cannot be approved.
    let (denied, _) = client_csr("denied", "n1");
    assert_eq!(call(&s, &admin, "POST", CSRS, Some(denied)).await.0, 201);
    s.deny_csr("denied").expect("deny");
    let e = s.approve_csr("denied").expect_err("approve after deny");
    assert_eq!(e.code, 422);
    assert!(e.message.contains("mutually exclusive"), "{}", e.message);
    // The controllers handled everything before: a later CSR is signed, the others not.
    let (later, _) = kubelet_csr(
        "later",
        "alice",
        "devs",
        &[],
        "kubernetes.io/kube-apiserver-client",
        &["client auth"],
    );
    assert_eq!(call(&s, &admin, "POST", CSRS, Some(later)).await.0, 201);
    s.approve_csr("later").expect("approve");
    issued(&s, "later").await;
    assert!(certificate(&s.csr("custom").expect("custom")).is_none());
    assert!(certificate(&s.csr("denied").expect("denied")).is_none());
    assert_eq!(s.issued_certificates().len(), 1);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_and_status_subresources_change_only_their_part() {
    let (s, _d) = server(Options::default()).await;
    let admin = Auth::Bearer(&s.token);
    let (csr, _) = client_csr("c1", "n1");
    let (_, created) = call(&s, &admin, "POST", CSRS, Some(csr)).await;
    // Approval via PUT with a forged spec and certificate: only the condition lands.
    let mut body = created.clone();
    body["spec"]["username"] = json!("mallory");
    body["status"] = json!({"certificate": "eA==", "conditions": [
        {"type": "Approved", "status": "True", "reason": "Manual", "message": "ok"}]});
    let (code, out) = call(
        &s,
        &admin,
        "PUT",
        &format!("{CSRS}/c1/approval"),
        Some(body),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["spec"]["username"], "admin");
    assert_eq!(out["status"]["conditions"][0]["reason"], "Manual");
    assert!(out["status"]["conditions"][0]["lastTransitionTime"].is_string());
    let signed = issued(&s, "c1").await;
    // The certificate can never be replaced through /status.
    let mut forged = signed.clone();
    forged["status"]["certificate"] =
        json!(base64::engine::general_purpose::STANDARD.encode(s.ca_pem.as_deref().expect("ca")));
    let (code, out) = call(
        &s,
        &admin,
        "PUT",
        &format!("{CSRS}/c1/status"),
        Some(forged),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap_or_default()
            .contains("may not modify existing certificate content")
    );
    // Approval conditions cannot be added through /status.
    let (csr2, _) = client_csr("c2", "n1");
    let (_, c2) = call(&s, &admin, "POST", CSRS, Some(csr2)).await;
    let mut sneaky = c2.clone();
    sneaky["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
    let (code, _) = call(
        &s,
        &admin,
        "PUT",
        &format!("{CSRS}/c2/status"),
        Some(sneaky),
    )
    .await;
    assert_eq!(code, 422);
    // The main resource never changes spec or status.
    let mut main = c2.clone();
    main["spec"]["signerName"] = json!("example.com/other");
    main["metadata"]["labels"] = json!({"k": "v"});
    let (code, out) = call(&s, &admin, "PUT", &format!("{CSRS}/c2"), Some(main)).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(
        out["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(out["metadata"]["labels"]["k"], "v");
    // PATCH works on both subresources too (merge patch; JSON patch).
    let (code, out) = patch(
        &s,
        &format!("{CSRS}/c2/status"),
        "application/merge-patch+json",
        json!({"status": {"conditions": [{"type": "Failed", "status": "True",
            "reason": "ExternalSigner", "message": "no"}]}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    let c2 = s.csr("c2").expect("c2");
    assert_eq!(c2["status"]["conditions"][0]["type"], "Failed");
    let (code, out) = patch(
        &s,
        &format!("{CSRS}/c2/approval"),
        "application/json-patch+json",
        json!([{"op": "add", "path": "/status/conditions/-", "value":
            {"type": "Denied", "status": "True", "reason": "Patched"}}]),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    let c2 = s.csr("c2").expect("c2");
    assert_eq!(c2["status"]["conditions"][1]["reason"], "Patched");
    assert_eq!(
        c2["status"]["conditions"][0]["type"], "Failed",
        "approval keeps the other conditions it was sent"
    );
    // Field selector on spec.signerName, as upstream.
    let (code, list) = call(
        &s,
        &admin,
        "GET",
        &format!(
            "{CSRS}?fieldSelector=spec.signerName%3Dkubernetes.io%2Fkube-apiserver-client-kubelet"
        ),
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2));
    let (_, none) = call(
        &s,
        &admin,
        "GET",
        &format!("{CSRS}?fieldSelector=spec.signerName%3Dkubernetes.io%2Fkubelet-serving"),
        None,
    )
    .await;
    assert_eq!(none["items"].as_array().map(Vec::len), Some(0));
    // Validation on create names the field.
    let (mut bad, _) = client_csr("c3", "n1");
    bad["spec"]["request"] = json!("bm90IGEgY3Ny");
    let (code, out) = call(&s, &admin, "POST", CSRS, Some(bad)).await;
    assert_eq!(code, 422);
    assert!(
        out["message"]
            .as_str()
            .unwrap_or_default()
            .contains("spec.request"),
        "{out}"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_tokens_are_checked_as_upstream_and_only_reach_csrs() {
    let (s, _d) = server(Options::default()).await;
    let mut expired = BootstrapToken::new("expird", "0123456789abcdef");
    expired.expiration = Some(chrono::Utc::now() - chrono::Duration::seconds(1));
    s.create_bootstrap_token(&expired).expect("expired");
    let mut signing_only = BootstrapToken::new("signon", "0123456789abcdef");
    signing_only.usage_authentication = false;
    s.create_bootstrap_token(&signing_only)
        .expect("signing only");
    for bad in [
        "abcdef.ffffffffffffffff",
        "expird.0123456789abcdef",
        "signon.0123456789abcdef",
        "zzzzzz.0123456789abcdef",
        "abcdef.0123456789ABCDEF",
        "not-a-token",
    ] {
        let (code, out) = call(&s, &Auth::Bearer(bad), "GET", CSRS, None).await;
        assert_eq!(code, 401, "{bad}: {out}");
    }
    assert_eq!(call(&s, &Auth::None, "GET", CSRS, None).await.0, 401);

    let boot = Auth::Bearer(TOKEN);
    assert_eq!(call(&s, &boot, "GET", CSRS, None).await.0, 200);
    // The scheme is case-insensitive, as upstream's bearer token authenticator.
    let mut conn = connect(&s, &Auth::None).await;
    let req = http::Request::builder()
        .uri(CSRS)
        .header("host", "localhost")
        .header("authorization", format!("bearer {TOKEN}"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    assert_eq!(
        conn.send_request(req).await.expect("response").status(),
        200
    );
    assert_eq!(
        call(&s, &boot, "GET", "/apis/certificates.k8s.io/v1", None)
            .await
            .0,
        200
    );
    let (csr, _) = client_csr("mine", "n1");
    let (code, created) = call(&s, &boot, "POST", CSRS, Some(csr)).await;
    assert_eq!(code, 201);
    let mut approve = created.clone();
    approve["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
    let forged =
        json!(base64::engine::general_purpose::STANDARD.encode(s.ca_pem.as_deref().expect("ca")));
    let mut status = created.clone();
    status["status"] = json!({"certificate": forged});
    let attacks: Vec<(&str, String, Option<Value>)> = vec![
        ("PUT", format!("{CSRS}/mine/approval"), Some(approve)),
        ("PUT", format!("{CSRS}/mine/status"), Some(status)),
        ("PATCH", format!("{CSRS}/mine"), Some(json!({}))),
        ("DELETE", format!("{CSRS}/mine"), None),
        (
            "GET",
            "/api/v1/namespaces/kube-system/secrets".to_owned(),
            None,
        ),
        (
            "GET",
            "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef".to_owned(),
            None,
        ),
        (
            "POST",
            "/api/v1/nodes".to_owned(),
            Some(json!({"metadata": {"name": "n1"}})),
        ),
        ("GET", "/api/v1/pods".to_owned(), None),
        (
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews".to_owned(),
            Some(json!({"spec": {"token": TOKEN}})),
        ),
        (
            "POST",
            "/api/v1/namespaces/default/serviceaccounts/default/token".to_owned(),
            Some(json!({})),
        ),
    ];
    for (method, path, body) in attacks {
        let (code, out) = call(&s, &boot, method, &path, body).await;
        assert_eq!(code, 403, "{method} {path}: {out}");
        assert_eq!(out["reason"], "Forbidden");
        assert!(
            out["message"]
                .as_str()
                .unwrap_or_default()
                .contains("User \"system:bootstrap:abcdef\" cannot"),
            "{out}"
        );
    }
    let mine = s.csr("mine").expect("still there");
    assert!(mine["status"]["conditions"].is_null() && mine["status"]["certificate"].is_null());
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_or_foreign_client_certificates_get_401_not_a_tls_error() {
    let (s, _d) = server(Options {
        csr_auto_approve: true,
        csr_cert_lifetime: Duration::from_secs(2),
        ..Options::default()
    })
    .await;
    let whoami = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let (csr, key) = client_csr("short", "n1");
    assert_eq!(
        call(&s, &Auth::Bearer(TOKEN), "POST", CSRS, Some(csr))
            .await
            .0,
        201
    );
    let cert = certificate(&issued(&s, "short").await).expect("cert");
    let me = Auth::Cert(&cert, &key);
    // One keep-alive connection: the certificate is judged on every request, not once at the
    // handshake.
    let mut conn = connect(&s, &me).await;
    let whoami_req = || {
        http::Request::builder()
            .method("POST")
            .uri(whoami)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(review.to_string())))
            .expect("request")
    };
    let resp = conn.send_request(whoami_req()).await.expect("response");
    assert_eq!(resp.status(), 201);
    resp.into_body().collect().await.expect("body");
    let expiry = s.issued_certificates()[0].not_after;
    let wait = (expiry - chrono::Utc::now()).num_milliseconds().max(0) as u64 + 1100;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let resp = conn.send_request(whoami_req()).await.expect("response");
    assert_eq!(
        resp.status(),
        401,
        "expired certificate on an open connection"
    );
    resp.into_body().collect().await.expect("body");
    let (code, out) = call(&s, &me, "POST", whoami, Some(review.clone())).await;
    assert_eq!(code, 401, "expired certificate on a new connection: {out}");
    // A certificate from another CA, even with a masters subject.
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, "admin");
    p.distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    let foreign = p.self_signed(&key).expect("self-signed").pem();
    let key_pem = key.serialize_pem();
    let (code, _) = call(
        &s,
        &Auth::Cert(&foreign, &key_pem),
        "GET",
        "/api/v1/secrets",
        None,
    )
    .await;
    assert_eq!(code, 401);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minted_certificates_and_a_lifetime_changed_at_run_time() {
    let (s, _d) = server(Options {
        csr_auto_approve: true,
        ..Options::default()
    })
    .await;
    let whoami = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let now = chrono::Utc::now();
    let hour = chrono::Duration::hours(1);
    let (cert, key) = s
        .mint_client_certificate(
            "system:node:n7",
            Some("system:nodes"),
            now - hour,
            now + hour,
        )
        .expect("mint");
    let (code, who) = call(
        &s,
        &Auth::Cert(&cert, &key),
        "POST",
        whoami,
        Some(review.clone()),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(who["status"]["userInfo"]["username"], "system:node:n7");
    for (from, to, what) in [
        (now - hour - hour, now - hour, "expired"),
        (now + hour, now + hour + hour, "not yet valid"),
    ] {
        let (cert, key) = s
            .mint_client_certificate("system:node:n7", Some("system:nodes"), from, to)
            .expect("mint");
        let (code, _) = call(
            &s,
            &Auth::Cert(&cert, &key),
            "POST",
            whoami,
            Some(review.clone()),
        )
        .await;
        assert_eq!(code, 401, "{what}");
    }
    s.set_csr_cert_lifetime(Duration::from_secs(20));
    let (csr, _) = client_csr("after-change", "n7");
    assert_eq!(
        call(&s, &Auth::Bearer(TOKEN), "POST", CSRS, Some(csr))
            .await
            .0,
        201
    );
    issued(&s, "after-change").await;
    let c = &s.issued_certificates()[0];
    assert_eq!(
        (c.not_after - c.not_before).num_seconds(),
        22,
        "20 s + 2 s backdate"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signer_makes_no_progress_during_an_outage() {
    let (mut s, _d) = server(Options::default()).await;
    let (csr, _) = client_csr("during-outage", "n1");
    let token = s.token.clone();
    assert_eq!(
        call(&s, &Auth::Bearer(&token), "POST", CSRS, Some(csr))
            .await
            .0,
        201
    );
    s.pause().await;
    s.approve_csr("during-outage")
        .expect("approve in the store");
    // Without the controllers stopped this is signed within milliseconds.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(s.issued_certificates().is_empty());
    assert!(certificate(&s.csr("during-outage").expect("csr")).is_none());
    s.resume().await.expect("resume");
    issued(&s, "during-outage").await;
    s.shutdown().await;
}
