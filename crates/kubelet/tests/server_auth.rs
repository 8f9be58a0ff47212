//! The kubelet HTTPS port end to end: TLS with a generated serving certificate, x509 client
//! certificates, bearer tokens through the fake API server's TokenReview, and authorization
//! through its SubjectAccessReview (answers cached).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fake_apiserver::Options;
use fake_apiserver::reviews::{AccessRequest, TokenUser};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kubelet::server::setup::{self, AuthzMode, SecureConfig};
use kubelet::server::tls::TlsSettings;
use kubelet::server::{self, ServerState};
use kubelet::status::manager::StatusManager;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

fn ca(name: &str) -> Ca {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: rcgen::Issuer::new(p, key),
    }
}

/// A client certificate (CN = user, O = groups) signed by `ca`: (cert PEM, key PEM).
fn client_cert(ca: &Ca, user: &str, groups: &[&str]) -> (String, String) {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name.push(rcgen::DnType::CommonName, user);
    for g in groups {
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, *g);
    }
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn client_config(server_crt: &str, cert: Option<&(String, String)>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    // kubelet.crt holds the serving certificate and its self-signed CA.
    for c in CertificateDer::pem_slice_iter(server_crt.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = match cert {
        Some((c, k)) => b
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(c.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(k.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    };
    Arc::new(cfg)
}

async fn request(
    cfg: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = send
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&body).into_owned())
}

fn secure_config(dir: &std::path::Path, client_ca: &std::path::Path) -> SecureConfig {
    SecureConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        tls: TlsSettings {
            cert_dir: dir.join("pki"),
            hostname: "node-1".into(),
            client_ca_file: Some(client_ca.to_owned()),
            ..Default::default()
        },
        anonymous: false,
        webhook_authn: Some(Duration::from_secs(120)),
        authz: AuthzMode::Webhook {
            allowed_ttl: Duration::from_secs(300),
            denied_ttl: Duration::from_secs(30),
        },
        configz: None,
        system_logs: None,
        debugging_handlers: true,
    }
}

#[tokio::test]
async fn auth_matrix_against_token_and_subject_access_reviews() {
    let api = common::api_fixture(Options::default()).await;
    let reviews = api.server.reviews();
    for (token, user) in [("allowed-token", "bob"), ("denied-token", "eve")] {
        reviews.add_token(
            token,
            TokenUser {
                username: user.into(),
                uid: format!("uid-{user}"),
                groups: vec!["people".into()],
            },
        );
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::<AccessRequest>::new()));
    let seen2 = seen.clone();
    reviews.set_authorizer(Arc::new(move |r: &AccessRequest| {
        seen2.lock().unwrap().push(r.clone());
        let allowed = matches!(r.user.as_str(), "alice" | "bob")
            && r.resource == "nodes"
            && r.name == "node-1";
        (allowed, String::new())
    }));

    let dir = tempfile::tempdir().unwrap();
    let good_ca = ca("client-ca");
    let other_ca = ca("someone-else");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &good_ca.pem).unwrap();
    let cfg = secure_config(dir.path(), &ca_file);
    let (tls, auth) = setup::build(&cfg, Some(setup::kube_reviews(api.client.clone()))).unwrap();
    let listener = server::bind(cfg.addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_pods_tx, pods_rx) = watch::channel(Arc::new(Vec::<Pod>::new()));
    let mut state = ServerState::basic(pods_rx, StatusManager::new(), Vec::new());
    state.node_name = "node-1".into();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(server::serve_secure(
        listener,
        tls,
        Arc::new(auth),
        state,
        cancel.clone(),
    ));

    let crt = std::fs::read_to_string(dir.path().join("pki/kubelet.crt")).unwrap();
    let plain = client_config(&crt, None);
    let bad = client_config(&crt, Some(&client_cert(&other_ca, "mallory", &[])));
    let good = client_config(&crt, Some(&client_cert(&good_ca, "alice", &["admins"])));

    let (code, body) = request(plain.clone(), addr, "GET", "/pods", None).await;
    assert_eq!(
        (code, body.as_str()),
        (401, "Unauthorized"),
        "no credentials"
    );
    let (code, _) = request(bad, addr, "GET", "/pods", None).await;
    assert_eq!(code, 401, "client certificate from an unknown CA");
    let (code, body) = request(good, addr, "GET", "/pods", None).await;
    assert_eq!(code, 200, "good client certificate: {body}");
    assert!(body.contains("\"kind\":\"PodList\""), "{body}");
    let (code, body) = request(plain.clone(), addr, "GET", "/pods", Some("allowed-token")).await;
    assert_eq!(code, 200, "allowed token: {body}");
    let (code, body) = request(plain.clone(), addr, "GET", "/pods", Some("denied-token")).await;
    assert_eq!(code, 403, "denied token");
    assert_eq!(
        body,
        "Forbidden (user=eve, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
    );
    let (code, _) = request(plain.clone(), addr, "GET", "/pods", Some("unknown-token")).await;
    assert_eq!(code, 401, "unknown token");
    // Health needs no identity.
    let (code, body) = request(plain.clone(), addr, "GET", "/healthz", None).await;
    assert_eq!((code, body.as_str()), (200, "ok"));

    // The SubjectAccessReviews carried upstream's attributes.
    {
        let seen = seen.lock().unwrap();
        let alice = seen.iter().find(|r| r.user == "alice").unwrap();
        assert_eq!(
            (
                alice.verb.as_str(),
                alice.resource.as_str(),
                alice.subresource.as_str()
            ),
            ("get", "nodes", "pods")
        );
        assert!(alice.groups.contains(&"admins".to_owned()));
        assert!(alice.groups.contains(&"system:authenticated".to_owned()));
        let eve: Vec<&str> = seen
            .iter()
            .filter(|r| r.user == "eve")
            .map(|r| r.subresource.as_str())
            .collect();
        assert_eq!(eve, vec!["pods", "proxy"]);
    }
    // Answers are cached: repeating the token requests asks the API server nothing new.
    let before = api.server.request_counts();
    request(plain.clone(), addr, "GET", "/pods", Some("allowed-token")).await;
    request(plain.clone(), addr, "GET", "/pods", Some("denied-token")).await;
    assert_eq!(api.server.request_counts(), before);
    assert_eq!(before.get("POST tokenreviews"), Some(&3));

    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn webhooks_without_an_api_client_are_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca("x").pem).unwrap();
    let mut cfg = secure_config(dir.path(), &ca_file);
    let err = setup::build(&cfg, None).err().unwrap().to_string();
    assert!(
        err.starts_with(
            "authentication.webhook.enabled: no client provided, cannot use webhook authentication"
        ),
        "{err}"
    );
    cfg.webhook_authn = None;
    let err = setup::build(&cfg, None).err().unwrap().to_string();
    assert!(
        err.starts_with("authorization.mode: Webhook: no client provided"),
        "{err}"
    );
    cfg.authz = AuthzMode::AlwaysAllow;
    assert!(setup::build(&cfg, None).is_ok());
}
