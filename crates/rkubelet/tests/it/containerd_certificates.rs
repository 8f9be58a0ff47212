//! The `rkubelet` binary joining the fake API server the way a kubeadm node does: only a
//! token bootstrap kubeconfig, `rotateCertificates` and `serverTLSBootstrap` in the config. The
//! client certificate is requested, auto-approved and written with the kubeconfig pointing at
//! it; the Node registers; the serving CSR waits for a manual approval and, once approved, the
//! HTTPS port serves the issued certificate. Real containerd (the binary needs a runtime).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::api::wait_for;
use common::{Kubelet, NODE};
use fake_apiserver::{BootstrapToken, FakeApiServer, Options};
use serde_json::Value;

fn ready(n: &Value) -> bool {
    n["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The leaf certificate the kubelet's HTTPS port serves, verified against `ca_pem` for the
/// node's host name.
async fn served_leaf(port: u16, ca_pem: &str) -> Result<Vec<u8>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from(NODE).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    Ok(tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_token_to_ready_node_with_an_approved_serving_certificate() {
    let mut k = Kubelet::new();
    let server = FakeApiServer::start(Options {
        kubeconfig_path: Some(k.dir.path().join("admin.conf")),
        csr_auto_approve: true,
        ..Options::default()
    })
    .await
    .expect("start the fake API server");
    let token = BootstrapToken::new("e2ecrt", "0123456789abcdef");
    server.create_bootstrap_token(&token).unwrap();
    let bootstrap = k.dir.path().join("bootstrap-kubelet.conf");
    server
        .write_bootstrap_kubeconfig(&bootstrap, &token.token())
        .unwrap();
    let kubeconfig = k.dir.path().join("kubelet.conf");
    k.extra_args = vec![
        "--bootstrap-kubeconfig".into(),
        bootstrap.into(),
        "--kubeconfig".into(),
        kubeconfig.clone().into(),
    ];
    k.append_config(
        "nodeStatusUpdateFrequency: 2s\nrotateCertificates: true\nserverTLSBootstrap: true\n",
    );
    k.start();

    wait_for(
        &k,
        Duration::from_secs(40),
        "the Node to be Ready",
        || async { server.get("nodes", "", NODE).filter(ready) },
    )
    .await;
    let pki = k.root().join("pki");
    let current = std::fs::read_link(pki.join("kubelet-client-current.pem")).unwrap();
    assert!(current.starts_with(&pki), "{}", current.display());
    let kc = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(
        kc.contains(&pki.join("kubelet-client-current.pem").display().to_string()),
        "{kc}"
    );
    assert!(!kc.contains(&token.secret), "{kc}");

    let serving = wait_for(&k, Duration::from_secs(30), "the serving CSR", || async {
        server
            .list("certificatesigningrequests", None)
            .into_iter()
            .find(|c| c["spec"]["signerName"] == "kubernetes.io/kubelet-serving")
    })
    .await;
    let ca = server.ca_pem.clone().unwrap();
    assert!(
        served_leaf(k.secure_port, &ca).await.is_err(),
        "no serving certificate before the approval"
    );
    let name = serving["metadata"]["name"].as_str().unwrap().to_owned();
    server.approve_csr(&name).unwrap();
    let leaf = wait_for(
        &k,
        Duration::from_secs(30),
        "the issued serving certificate",
        || {
            let ca = ca.clone();
            async move { served_leaf(k.secure_port, &ca).await.ok() }
        },
    )
    .await;
    let issued = server.csr(&name).unwrap()["status"]["certificate"]
        .as_str()
        .map(|b64| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap()
        })
        .unwrap();
    let issued = String::from_utf8(issued).unwrap();
    let der = {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::CertificateDer::from_pem_slice(issued.as_bytes()).unwrap()
    };
    assert_eq!(leaf, der.as_ref());
    let metrics = k.get(k.port, "/metrics").await.unwrap().1;
    assert!(
        metrics.contains("kubelet_certificate_manager_client_ttl_seconds ")
            && metrics.contains("kubelet_certificate_manager_server_ttl_seconds "),
        "{metrics}"
    );
    k.stop();
}
