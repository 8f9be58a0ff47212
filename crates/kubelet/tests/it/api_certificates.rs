//! The kubelet's certificates against the fake API server's CSR API (real HTTPS, real time,
//! fake runtime): TLS bootstrap from a token-only bootstrap kubeconfig to a Ready node (manual
//! approval, and auto-approval without rotation), client certificate rotation with 30 s
//! certificates while a pod runs and API calls keep succeeding, re-bootstrap after the client
//! certificate expired without a restart, and the serving certificate requested, served on
//! the HTTPS port once approved, and rotated.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fake_apiserver::{BootstrapToken, FakeApiServer, Options};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kubelet::agent::{Agent, AgentConfig};
use kubelet::apiclient::ClientSettings;
use kubelet::certificate::bootstrap::{ApiClient, ClientOptions, api_client};
use kubelet::certificate::manager::Timings;
use rkubelet_cri::fake::FakeRuntime;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NODE: &str = "cert-node";

struct Env {
    dir: tempfile::TempDir,
    server: FakeApiServer,
    token: BootstrapToken,
}

impl Env {
    async fn start(lifetime: Duration, auto_approve: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = FakeApiServer::start(Options {
            kubeconfig_path: Some(dir.path().join("admin.conf")),
            csr_cert_lifetime: lifetime,
            csr_auto_approve: auto_approve,
            bookmark_interval: Duration::from_secs(1),
            ..Options::default()
        })
        .await
        .expect("the fake API server starts");
        let token = BootstrapToken::new("abcdef", "0123456789abcdef");
        server.create_bootstrap_token(&token).unwrap();
        server
            .write_bootstrap_kubeconfig(&dir.path().join("bootstrap-kubelet.conf"), &token.token())
            .unwrap();
        Self { dir, server, token }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubelet.conf")
    }

    fn cert_dir(&self) -> PathBuf {
        self.dir.path().join("pki")
    }

    fn options(&self, rotate: bool) -> ClientOptions {
        ClientOptions {
            kubeconfig: self.kubeconfig(),
            bootstrap_kubeconfig: Some(self.dir.path().join("bootstrap-kubelet.conf")),
            cert_dir: self.cert_dir(),
            node_name: NODE.into(),
            rotate,
            settings: ClientSettings::default(),
            timings: Timings::default(),
        }
    }

    fn csrs(&self) -> Vec<Value> {
        self.server.list("certificatesigningrequests", None)
    }

    /// CSRs with `signer`, oldest first.
    fn csrs_for(&self, signer: &str) -> Vec<Value> {
        self.csrs()
            .into_iter()
            .filter(|c| c["spec"]["signerName"] == signer)
            .collect()
    }

    async fn start_agent(&self, api: ApiClient, tune: impl FnOnce(&mut AgentConfig)) -> Agent {
        let fake = FakeRuntime::with_images(&[common::agent::IMAGE]);
        let mut cfg = AgentConfig::for_tests(self.dir.path(), NODE);
        cfg.node_status.update_frequency = Duration::from_secs(1);
        cfg.api.node_lease_duration_secs = 4;
        cfg.api.status_sync_period = Duration::from_secs(1);
        cfg.api.mirror_period = Duration::from_secs(1);
        cfg.client_certificates = api.certificates.clone();
        tune(&mut cfg);
        Agent::start(
            cfg,
            common::agent::api_deps(&fake, &api.client),
            CancellationToken::new(),
        )
        .await
        .unwrap()
    }
}

/// Polls `f` every 100 ms for up to `secs`.
async fn wait<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ready(obj: &Value) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"].as_str().unwrap().to_owned()
}

fn issued(obj: &Value) -> bool {
    obj["status"]["certificate"]
        .as_str()
        .is_some_and(|c| !c.is_empty())
}

/// The current pair's file (the target of the symlink).
fn current_target(cert_dir: &Path, prefix: &str) -> Option<PathBuf> {
    std::fs::read_link(cert_dir.join(format!("{prefix}-current.pem"))).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bootstrap_to_a_ready_node_with_manual_approval() {
    let env = Env::start(Duration::from_secs(3600), false).await;
    let api = api_client(&env.options(true)).await.unwrap();
    // The kubeconfig is written at once, pointing at the certificate to come.
    let kc = std::fs::read_to_string(env.kubeconfig()).unwrap();
    let pem = env.cert_dir().join("kubelet-client-current.pem");
    assert!(
        kc.contains(&format!("client-certificate: {}", pem.display())),
        "{kc}"
    );
    assert!(
        kc.contains(&format!("client-key: {}", pem.display())),
        "{kc}"
    );
    assert!(!kc.contains(&env.token.secret), "{kc}");
    let agent = env.start_agent(api, |_| {}).await;

    let csr = wait(20, "the client CSR", || {
        env.csrs_for("kubernetes.io/kube-apiserver-client-kubelet")
            .pop()
    })
    .await;
    let csr_name = name(&csr);
    assert!(csr_name.starts_with("node-csr-"), "{csr_name}");
    assert_eq!(
        csr["spec"]["usages"],
        serde_json::json!(["digital signature", "client auth"])
    );
    assert_eq!(
        csr["spec"]["username"],
        format!("system:bootstrap:{}", env.token.id)
    );
    assert!(
        csr["spec"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g == "system:bootstrappers"),
        "{csr}"
    );
    // The key waits in the cert dir while the request is pending.
    assert!(env.cert_dir().join("kubelet-client.key.tmp").exists());
    // Not approved: no certificate, no Node.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(env.server.get("nodes", "", NODE).is_none());
    env.server.approve_csr(&csr_name).unwrap();

    wait(30, "the Node to be Ready", || {
        env.server.get("nodes", "", NODE).filter(ready)
    })
    .await;
    let target = current_target(&env.cert_dir(), "kubelet-client").unwrap();
    let file = target.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        file.starts_with("kubelet-client-2") && file.ends_with(".pem"),
        "{file}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!env.cert_dir().join("kubelet-client.key.tmp").exists());
    assert!(kubelet::certificate::bootstrap::client_config_still_valid(
        &env.kubeconfig()
    ));
    let metrics = agent.metrics.render();
    let ttl = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubelet_certificate_manager_client_ttl_seconds "))
        .expect("the client TTL gauge")
        .parse::<f64>()
        .unwrap();
    assert!(ttl > 3000.0 && ttl <= 3600.0, "{ttl}");
    agent.shutdown().await;

    // Restarted: the kubeconfig is valid, no new request.
    let before = env.csrs().len();
    let api = api_client(&env.options(true)).await.unwrap();
    let nodes: Api<Node> = Api::all(api.client.clone());
    nodes.get(NODE).await.unwrap();
    assert_eq!(env.csrs().len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bootstrap_with_auto_approval_waits_for_the_certificate_without_rotation() {
    let env = Env::start(Duration::from_secs(3600), true).await;
    // Without rotation the first certificate is awaited before the client is returned.
    let api = tokio::time::timeout(Duration::from_secs(30), api_client(&env.options(false)))
        .await
        .expect("auto-approved in time")
        .unwrap();
    assert!(api.certificates.is_none());
    assert!(kubelet::certificate::bootstrap::client_config_still_valid(
        &env.kubeconfig()
    ));
    let agent = env.start_agent(api, |_| {}).await;
    wait(30, "the Node to be Ready", || {
        env.server.get("nodes", "", NODE).filter(ready)
    })
    .await;
    let csr = env.csrs_for("kubernetes.io/kube-apiserver-client-kubelet");
    assert_eq!(csr.len(), 1);
    assert!(issued(&csr[0]));
    agent.shutdown().await;
}

/// Calls `GET /api/v1/nodes/<node>` with the kubelet's shared client every 50 ms until
/// `stop`; counts calls and failures.
fn hammer(
    client: kube::Client,
    stop: CancellationToken,
) -> (
    Arc<AtomicU64>,
    Arc<std::sync::Mutex<Vec<String>>>,
    tokio::task::JoinHandle<()>,
) {
    let calls = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (c, f) = (calls.clone(), failures.clone());
    let task = tokio::spawn(async move {
        let nodes: Api<Node> = Api::all(client);
        while !stop.is_cancelled() {
            match nodes.get(NODE).await {
                Ok(_) => {}
                Err(e) => f.lock().unwrap().push(e.to_string()),
            }
            c.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    (calls, failures, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_rotates_under_a_running_pod_without_failed_calls() {
    let env = Env::start(Duration::from_secs(30), true).await;
    let api = api_client(&env.options(true)).await.unwrap();
    let client = api.client.clone();
    let agent = env.start_agent(api, |_| {}).await;
    wait(30, "the Node to be Ready", || {
        env.server.get("nodes", "", NODE).filter(ready)
    })
    .await;
    let first = current_target(&env.cert_dir(), "kubelet-client").unwrap();
    // A static pod runs; its mirror pod shows it in the API.
    let pod = common::agent::static_pod(
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: web, namespace: default}}\nspec:\n  containers:\n  - {{name: c, image: {}}}\n",
            common::agent::IMAGE
        ),
        "web",
        NODE,
    );
    common::agent::set(&agent, vec![pod.clone()]).await;
    wait(20, "the pod to run", || {
        (common::agent::phase(&agent, &pod).as_deref() == Some("Running")).then_some(())
    })
    .await;
    let started = agent
        .status
        .get_pod_status(common::agent::uid(&pod))
        .unwrap();
    let stop = CancellationToken::new();
    let (calls, failures, task) = hammer(client, stop.clone());
    // One rotation happens within 21–27 s of the first certificate's start.
    let second = wait(40, "a rotated client certificate", || {
        current_target(&env.cert_dir(), "kubelet-client").filter(|t| *t != first)
    })
    .await;
    // Calls go on over the new certificate for a while.
    let at_swap = calls.load(Ordering::SeqCst);
    wait(10, "calls after the swap", || {
        (calls.load(Ordering::SeqCst) > at_swap + 20).then_some(())
    })
    .await;
    stop.cancel();
    task.await.unwrap();
    let failed = failures.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "{} calls failed: {failed:?}",
        failed.len()
    );
    assert!(calls.load(Ordering::SeqCst) > 100);
    // The rotation CSR was made with the node's own certificate, not the bootstrap token.
    let client_csrs = env.csrs_for("kubernetes.io/kube-apiserver-client-kubelet");
    assert!(client_csrs.len() >= 2, "{client_csrs:?}");
    let renewal = client_csrs
        .iter()
        .find(|c| c["spec"]["username"] == format!("system:node:{NODE}"))
        .expect("a renewal made with the node's certificate");
    assert!(name(renewal).starts_with("csr-"), "{}", name(renewal));
    assert!(issued(renewal));
    assert!(second.exists() && first.exists());
    // The pod was never disturbed: same container, still running.
    let now = agent
        .status
        .get_pod_status(common::agent::uid(&pod))
        .unwrap();
    assert_eq!(now.phase.as_deref(), Some("Running"));
    let ids = |s: &k8s_openapi::api::core::v1::PodStatus| {
        s.container_statuses
            .iter()
            .flatten()
            .map(|c| (c.container_id.clone(), c.restart_count))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&now), ids(&started));
    // The lease keeps being renewed with the new certificate.
    let renewed =
        env.server.get("leases", "kube-node-lease", NODE).unwrap()["spec"]["renewTime"].clone();
    wait(10, "the lease renewed after the rotation", || {
        let l = env.server.get("leases", "kube-node-lease", NODE)?;
        (l["spec"]["renewTime"] != renewed).then_some(())
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_client_certificate_is_renewed_with_the_bootstrap_token_without_restart() {
    let env = Env::start(Duration::from_secs(20), true).await;
    let api = api_client(&env.options(true)).await.unwrap();
    let agent = env.start_agent(api, |_| {}).await;
    wait(30, "the Node to be Ready", || {
        env.server.get("nodes", "", NODE).filter(ready)
    })
    .await;
    let first = current_target(&env.cert_dir(), "kubelet-client").unwrap();
    // Nobody approves renewals any more: the certificate runs out.
    env.server.set_csr_auto_approve(false);
    let renewal = wait(
        30,
        "a renewal request made with the node's certificate",
        || {
            env.csrs_for("kubernetes.io/kube-apiserver-client-kubelet")
                .into_iter()
                .find(|c| c["spec"]["username"] == format!("system:node:{NODE}"))
        },
    )
    .await;
    assert!(!issued(&renewal));
    // After the expiry the kubelet asks again with the bootstrap token; approve that one.
    let rebootstrap = wait(40, "a request made with the bootstrap token again", || {
        env.csrs_for("kubernetes.io/kube-apiserver-client-kubelet")
            .into_iter()
            .filter(|c| c["spec"]["username"] == format!("system:bootstrap:{}", env.token.id))
            .find(|c| !issued(c))
    })
    .await;
    env.server.approve_csr(&name(&rebootstrap)).unwrap();
    let second = wait(20, "the new certificate", || {
        current_target(&env.cert_dir(), "kubelet-client").filter(|t| *t != first)
    })
    .await;
    assert!(second.exists());
    // The same agent talks to the API again: the lease is renewed.
    let renewed =
        env.server.get("leases", "kube-node-lease", NODE).unwrap()["spec"]["renewTime"].clone();
    wait(15, "the lease renewed with the new certificate", || {
        let l = env.server.get("leases", "kube-node-lease", NODE)?;
        (l["spec"]["renewTime"] != renewed).then_some(())
    })
    .await;
    let metrics = agent.metrics.render();
    let errors = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubelet_certificate_manager_client_expiration_renew_errors "))
        .unwrap()
        .parse::<f64>()
        .unwrap();
    assert!(errors >= 1.0, "{metrics}");
    agent.shutdown().await;
}

/// Completes a TLS handshake with the kubelet's HTTPS port trusting `ca_pem`; returns the
/// served leaf certificate.
async fn served_certificate(addr: std::net::SocketAddr, ca_pem: &str) -> Result<Vec<u8>, String> {
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
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (_, conn) = tls.get_ref();
    Ok(conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_certificate_is_requested_served_and_rotated() {
    let env = Env::start(Duration::from_secs(30), true).await;
    let api = api_client(&env.options(true)).await.unwrap();
    let cert_dir = env.cert_dir();
    let agent = env
        .start_agent(api, |cfg| {
            cfg.server = Some(kubelet::server::setup::SecureConfig {
                addr: "127.0.0.1:0".parse().unwrap(),
                tls: kubelet::server::tls::TlsSettings {
                    cert_dir: cert_dir.clone(),
                    hostname: NODE.into(),
                    ips: vec!["127.0.0.1".parse().unwrap()],
                    server_tls_bootstrap: true,
                    ..Default::default()
                },
                anonymous: true,
                webhook_authn: None,
                authz: kubelet::server::setup::AuthzMode::AlwaysAllow,
                configz: None,
                system_logs: None,
                debugging_handlers: false,
            });
        })
        .await;
    let addr = agent.secure_addr.unwrap();
    let ca = env.server.ca_pem.clone().unwrap();
    let serving = wait(20, "the serving CSR", || {
        env.csrs_for("kubernetes.io/kubelet-serving").pop()
    })
    .await;
    assert_eq!(
        serving["spec"]["usages"],
        serde_json::json!(["digital signature", "server auth"])
    );
    assert_eq!(serving["spec"]["username"], format!("system:node:{NODE}"));
    // Never auto-approved (kubeadm#1602); meanwhile no handshake completes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!issued(&env.server.csr(&name(&serving)).unwrap()));
    assert!(served_certificate(addr, &ca).await.is_err());
    assert!(
        !cert_dir.join("kubelet.crt").exists(),
        "no self-signed pair"
    );

    env.server.approve_csr(&name(&serving)).unwrap();
    let first = wait(20, "the issued serving certificate on the port", || {
        current_target(&cert_dir, "kubelet-server")
    })
    .await;
    let mut served = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(c) = served_certificate(addr, &ca).await {
            served = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let served = served.expect("the port serves the issued certificate");
    let on_disk = std::fs::read_to_string(&first).unwrap();
    let pair = kubelet::certificate::CertKey::from_pem("served", &on_disk, &on_disk).unwrap();
    assert_eq!(served, pair.chain[0].as_ref());
    assert!(pair.info.ips.contains(&"127.0.0.1".parse().unwrap()));
    assert!(pair.info.dns_names.contains(&NODE.to_owned()));

    // Rotation: a second serving CSR within 21–27 s; approved, then served.
    let second_csr = wait(40, "the serving renewal CSR", || {
        env.csrs_for("kubernetes.io/kubelet-serving")
            .into_iter()
            .find(|c| name(c) != name(&serving))
    })
    .await;
    env.server.approve_csr(&name(&second_csr)).unwrap();
    let second = wait(20, "the rotated serving certificate", || {
        current_target(&cert_dir, "kubelet-server").filter(|t| *t != first)
    })
    .await;
    let on_disk = std::fs::read_to_string(&second).unwrap();
    let pair = kubelet::certificate::CertKey::from_pem("rotated", &on_disk, &on_disk).unwrap();
    let mut rotated_served = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if served_certificate(addr, &ca).await.ok().as_deref() == Some(pair.chain[0].as_ref()) {
            rotated_served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rotated_served, "the port serves the rotated certificate");
    let metrics = agent.metrics.render();
    assert!(
        metrics.contains("kubelet_certificate_manager_server_rotation_seconds_count 1"),
        "{metrics}"
    );
    // (The first serving request may fail while the client certificate is still on its way.)
    assert!(metrics.contains("# TYPE kubelet_server_expiration_renew_errors counter"));
    assert!(metrics.contains("kubelet_certificate_manager_server_ttl_seconds "));
    agent.shutdown().await;
}
