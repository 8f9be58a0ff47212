//! Rotation decisions of the certificate manager in paused time, with a local CA as signer.

use super::*;
use crate::certificate::testutil::TestCa;
use crate::events::CollectingRecorder;
use async_trait::async_trait;
use std::os::unix::fs::PermissionsExt;

/// A signer backed by a local CA: issues certificates valid from the clock's now for `life`,
/// records every request, and fails the first `fail` requests (or all, with `fail_always`).
struct FakeSigner {
    ca: Arc<TestCa>,
    clock: Clock,
    life: Duration,
    fail: Mutex<u32>,
    fail_always: AtomicBool,
    error: &'static str,
    seen: Mutex<Vec<SigningRequest>>,
}

impl FakeSigner {
    fn new(ca: &Arc<TestCa>, clock: Clock, life: Duration) -> Arc<Self> {
        Arc::new(Self {
            ca: ca.clone(),
            clock,
            life,
            fail: Mutex::new(0),
            fail_always: AtomicBool::new(false),
            error: "the server is currently unable to handle the request (503)",
            seen: Mutex::new(Vec::new()),
        })
    }

    fn seen(&self) -> Vec<SigningRequest> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl CertificateSigner for FakeSigner {
    async fn sign(&self, req: &SigningRequest, _wait: Duration) -> Result<String, CertError> {
        self.seen.lock().unwrap().push(req.clone());
        {
            let mut fail = self.fail.lock().unwrap();
            if *fail > 0 || self.fail_always.load(Ordering::SeqCst) {
                *fail = fail.saturating_sub(1);
                return Err(CertError::Api(self.error.into()));
            }
        }
        let now = SystemTime::from(self.clock.now());
        Ok(self.ca.sign_request(&req.csr_pem, now, self.life))
    }
}

struct Setup {
    manager: Arc<CertificateManager>,
    signer: Arc<FakeSigner>,
    bootstrap: Arc<FakeSigner>,
    updates: Arc<Mutex<Vec<CertKey>>>,
    dir: tempfile::TempDir,
    ca: Arc<TestCa>,
    clock: Clock,
}

fn setup(kind: Kind, initial: Option<(SystemTime, Duration)>, with_bootstrap: bool) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(TestCa::new());
    let clock = Clock::new();
    let signer = FakeSigner::new(&ca, clock, Duration::from_secs(100));
    let bootstrap = FakeSigner::new(&ca, clock, Duration::from_secs(100));
    let updates = Arc::new(Mutex::new(Vec::new()));
    let template = match kind {
        Kind::Client => Template::node_client("n1"),
        Kind::Serving => {
            Template::node_serving("n1", &["n1".into()], &["10.0.0.5".parse().unwrap()]).unwrap()
        }
    };
    let initial = initial.map(|(nb, life)| {
        let (c, k) = ca.issue_at(&template.common_name, &["system:nodes"], nb, life);
        CertKey::from_pem("initial", &c, &k).unwrap()
    });
    let prefix = match kind {
        Kind::Client => "kubelet-client",
        Kind::Serving => "kubelet-server",
    };
    let store = FileStore::new(prefix, dir.path(), None, None).unwrap();
    let on_update: OnUpdate = {
        let updates = updates.clone();
        Arc::new(move |p: &CertKey| {
            updates.lock().unwrap().push(p.clone());
            Ok(())
        })
    };
    let manager = CertificateManager::new(
        ManagerConfig {
            kind,
            template,
            store,
            cert_dir: dir.path().to_owned(),
            signer: signer.clone(),
            bootstrap: with_bootstrap.then(|| bootstrap.clone() as Arc<dyn CertificateSigner>),
            on_update,
            clock,
            timings: Timings::default(),
        },
        initial,
        false,
    );
    Setup {
        manager,
        signer,
        bootstrap,
        updates,
        dir,
        ca,
        clock,
    }
}

fn now() -> SystemTime {
    // Whole seconds, as certificates carry them.
    let secs = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    std::time::UNIX_EPOCH + Duration::from_secs(secs)
}

#[test]
fn deadline_is_70_to_90_percent_of_the_life_and_retries_back_off_as_upstream() {
    let nb = std::time::UNIX_EPOCH + Duration::from_secs(1000);
    let life = Duration::from_secs(100);
    assert_eq!(
        rotation_deadline(nb, life, 0.0),
        nb + Duration::from_secs(70)
    );
    assert_eq!(
        rotation_deadline(nb, life, 1.0),
        nb + Duration::from_secs(90)
    );
    assert_eq!(
        rotation_deadline(nb, life, 0.5),
        nb + Duration::from_secs(80)
    );
    let t = Timings::default();
    let delays: Vec<u64> = (0..7).map(|a| retry_delay(&t, a, 0.0).as_secs()).collect();
    assert_eq!(delays, [2, 4, 8, 16, 32, 32, 32]);
    assert!(retry_delay(&t, 0, 1.0) <= Duration::from_millis(2200));
}

#[tokio::test(start_paused = true)]
async fn rotates_between_70_and_90_percent_and_hands_on_the_new_pair() {
    let nb = now();
    let s = setup(Kind::Client, Some((nb, Duration::from_secs(100))), true);
    let events = CollectingRecorder::default();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(
        s.manager
            .clone()
            .run(Arc::new(events.clone()), cancel.clone()),
    );
    // Nothing before 70 % of the life.
    tokio::time::sleep(Duration::from_secs(68)).await;
    assert!(s.updates.lock().unwrap().is_empty());
    tokio::time::sleep(Duration::from_secs(24)).await;
    let updates = s.updates.lock().unwrap().clone();
    assert_eq!(updates.len(), 1, "one rotation by 90 %");
    let rotated_at = SystemTime::from(s.clock.now());
    let new = &updates[0];
    assert!(
        new.info.not_before > nb + Duration::from_secs(68),
        "{:?}",
        new.info
    );
    assert!(new.info.not_before <= rotated_at);
    assert_eq!(new.info.common_name, "system:node:n1");
    // Through the current credentials, with upstream's signer and usages and a generated name.
    assert!(s.bootstrap.seen().is_empty());
    let req = &s.signer.seen()[0];
    assert_eq!(
        req.signer_name,
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(req.usages, ["digital signature", "client auth"]);
    assert_eq!(req.name, None);
    // Stored and current.
    let link = s.dir.path().join("kubelet-client-current.pem");
    let stored = std::fs::read_to_string(&link).unwrap();
    assert_eq!(stored, new.combined_pem());
    assert_eq!(s.manager.current().unwrap().info, new.info);
    assert_eq!(s.manager.renew_errors(), 0);
    assert!(events.events().is_empty());
    cancel.cancel();
    task.await.unwrap();
    drop(s.ca);
}

#[tokio::test(start_paused = true)]
async fn failing_renewal_backs_off_counts_and_warns_the_node_near_expiry() {
    let nb = now();
    let s = setup(Kind::Client, Some((nb, Duration::from_secs(10_000))), true);
    s.signer.fail_always.store(true, Ordering::SeqCst);
    let events = CollectingRecorder::default();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(
        s.manager
            .clone()
            .run(Arc::new(events.clone()), cancel.clone()),
    );
    // Rotation starts between 7000 s and 9000 s; no warning while 10 % or more is left.
    tokio::time::sleep(Duration::from_secs(8999)).await;
    assert!(
        events.with_reason("ClientCertificateExpiring").is_empty(),
        "{:?}",
        events.events()
    );
    // Under 10 % left: one warning, not one per failure.
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert!(
        s.manager.renew_errors() >= 4,
        "{}",
        s.manager.renew_errors()
    );
    let warnings = events.with_reason("ClientCertificateExpiring");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].event_type, EventType::Warning);
    assert!(
        warnings[0]
            .message
            .contains("client certificate expires at")
            && warnings[0].message.contains("503"),
        "{}",
        warnings[0].message
    );
    // Retries every 32 s once the back-off is used up.
    let a = s.manager.renew_errors();
    tokio::time::sleep(Duration::from_secs(64)).await;
    let b = s.manager.renew_errors();
    assert!((1..=3).contains(&(b - a)), "{a} -> {b}");
    // The bootstrap credentials are not used while the certificate is valid and not refused.
    assert!(s.bootstrap.seen().is_empty());
    // Renewal works again: rotated, and the counter stays.
    s.signer.fail_always.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_eq!(s.updates.lock().unwrap().len(), 1);
    assert!(s.manager.renew_errors() >= b);
    let metrics = {
        let mut out = Exposition::new();
        s.manager.collect(&mut out);
        out.finish()
    };
    assert!(
        metrics.contains(&format!(
            "kubelet_certificate_manager_client_expiration_renew_errors {}\n",
            s.manager.renew_errors()
        )),
        "{metrics}"
    );
    assert!(metrics.contains("# TYPE kubelet_certificate_manager_client_ttl_seconds gauge"));
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn expired_certificate_is_renewed_with_the_bootstrap_credentials() {
    let long_ago = now() - Duration::from_secs(500);
    let s = setup(
        Kind::Client,
        Some((long_ago, Duration::from_secs(100))),
        true,
    );
    assert!(s.manager.ttl_seconds() < 0.0);
    let events = CollectingRecorder::default();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(
        s.manager
            .clone()
            .run(Arc::new(events.clone()), cancel.clone()),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(s.updates.lock().unwrap().len(), 1);
    assert!(
        s.signer.seen().is_empty(),
        "the expired certificate is not used"
    );
    let req = &s.bootstrap.seen()[0];
    // Upstream's bootstrap request: a name digested from the key, subject and usages.
    let name = req.name.clone().unwrap();
    assert!(name.starts_with("node-csr-"), "{name}");
    assert!(
        !s.dir.path().join(BOOTSTRAP_KEY_FILE).exists(),
        "the bootstrap key file is removed once the certificate is stored"
    );
    assert!(s.manager.ttl_seconds() > 90.0);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn bootstrap_key_survives_failed_tries_so_the_request_name_stays() {
    let s = setup(Kind::Client, None, true);
    *s.bootstrap.fail.lock().unwrap() = 2;
    let cancel = CancellationToken::new();
    let task = tokio::spawn(
        s.manager
            .clone()
            .run(Arc::new(CollectingRecorder::default()), cancel.clone()),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tmp = s.dir.path().join(BOOTSTRAP_KEY_FILE);
    assert_eq!(
        std::fs::metadata(&tmp).unwrap().permissions().mode() & 0o777,
        0o600
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let seen = s.bootstrap.seen();
    assert_eq!(seen.len(), 3, "two failures then success");
    assert!(
        seen.iter().all(|r| r.name == seen[0].name),
        "same name each try"
    );
    assert_eq!(s.updates.lock().unwrap().len(), 1);
    assert!(!tmp.exists());
    assert_eq!(s.manager.renew_errors(), 2);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn refused_credentials_fall_back_to_bootstrap_and_without_it_keep_failing() {
    let s = setup(Kind::Client, Some((now(), Duration::from_secs(100))), true);
    let signer = Arc::new(FakeSigner {
        error: "cannot create certificate signing request: ApiError: Unauthorized (HTTP 401)",
        ..Arc::try_unwrap(FakeSigner::new(&s.ca, s.clock, Duration::from_secs(100)))
            .ok()
            .unwrap()
    });
    signer.fail_always.store(true, Ordering::SeqCst);
    let manager = CertificateManager::new(
        ManagerConfig {
            kind: Kind::Client,
            template: Template::node_client("n1"),
            store: FileStore::new("kubelet-client", s.dir.path(), None, None).unwrap(),
            cert_dir: s.dir.path().to_owned(),
            signer: signer.clone(),
            bootstrap: Some(s.bootstrap.clone()),
            on_update: Arc::new(|_| Ok(())),
            clock: s.clock,
            timings: Timings::default(),
        },
        s.manager.current(),
        true,
    );
    manager.rotate().await.unwrap();
    assert_eq!(signer.seen().len(), 1);
    assert_eq!(s.bootstrap.seen().len(), 1);
    // No bootstrap kubeconfig: the refusal is the result.
    let alone = CertificateManager::new(
        ManagerConfig {
            kind: Kind::Client,
            template: Template::node_client("n1"),
            store: FileStore::new("kubelet-client", s.dir.path(), None, None).unwrap(),
            cert_dir: s.dir.path().to_owned(),
            signer: signer.clone(),
            bootstrap: None,
            on_update: Arc::new(|_| Ok(())),
            clock: s.clock,
            timings: Timings::default(),
        },
        None,
        true,
    );
    let err = alone.rotate().await.unwrap_err().to_string();
    assert!(err.contains("401"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn serving_certificate_missing_an_address_rotates_at_once_and_records_its_age() {
    // The initial serving certificate has no SANs: it does not satisfy the template.
    let s = setup(
        Kind::Serving,
        Some((now(), Duration::from_secs(1000))),
        false,
    );
    let cancel = CancellationToken::new();
    let task = tokio::spawn(
        s.manager
            .clone()
            .run(Arc::new(CollectingRecorder::default()), cancel.clone()),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let updates = s.updates.lock().unwrap().clone();
    assert_eq!(updates.len(), 1);
    assert_eq!(
        updates[0].info.ips,
        ["10.0.0.5".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(updates[0].info.dns_names, ["n1"]);
    let req = &s.signer.seen()[0];
    assert_eq!(req.signer_name, "kubernetes.io/kubelet-serving");
    assert_eq!(req.usages, ["digital signature", "server auth"]);
    assert!(s.dir.path().join("kubelet-server-current.pem").exists());
    let mut out = Exposition::new();
    s.manager.collect(&mut out);
    let text = out.finish();
    assert!(
        text.contains("kubelet_certificate_manager_server_rotation_seconds_count 1"),
        "{text}"
    );
    assert!(
        text.contains("kubelet_server_expiration_renew_errors 0"),
        "{text}"
    );
    assert!(
        text.contains("kubelet_certificate_manager_server_ttl_seconds 9"),
        "{text}"
    );
    cancel.cancel();
    task.await.unwrap();
}

#[test]
fn ttl_is_infinite_without_a_certificate() {
    let s = setup(Kind::Client, None, false);
    assert_eq!(s.manager.ttl_seconds(), f64::INFINITY);
    let mut out = Exposition::new();
    s.manager.collect(&mut out);
    assert!(
        out.finish()
            .contains("kubelet_certificate_manager_client_ttl_seconds +Inf"),
    );
}
