//! The certificate manager (client-go `certificate.Manager` and the kubelet's client and
//! serving managers): holds the current pair, sleeps until the jittered rotation deadline
//! (70–90 % of the certificate's life), requests a new certificate for a fresh key, stores it
//! and hands it on (to the API client's transport, or to the HTTPS port), retrying with
//! upstream's back-off (2 s doubling for 5 tries, then every 32 s). Beyond upstream: a client
//! certificate that is missing, expired or refused is renewed with the bootstrap credentials
//! without a restart, and while less than 10 % of the life remains and renewal keeps failing
//! a Warning event goes to the Node. Receives the template, the store and the signers; emits
//! the current pair, the metrics upstream names, and logs with upstream's messages.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::csr::{
    CertificateSigner, SigningRequest, Template, build_request, digested_name, generate_key,
    is_unauthorized, issued_pair,
};
use super::store::{FileStore, write_private};
use super::{CLIENT_SIGNER, CLIENT_USAGES, CertError, CertKey, SERVING_SIGNER, SERVING_USAGES};
use crate::clock::Clock;
use crate::events::{EventRecorder, EventType};
use crate::metrics::registry::{Collector, Desc, Exposition, HistogramVec, MetricKind};
use crate::sync;

/// Which certificate a manager keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The API client certificate (`kubelet-client`).
    Client,
    /// The HTTPS port's certificate (`kubelet-server`).
    Serving,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Client => CLIENT_SIGNER,
            Kind::Serving => SERVING_SIGNER,
        }
    }

    fn usages(self) -> &'static [&'static str] {
        match self {
            Kind::Client => CLIENT_USAGES,
            Kind::Serving => SERVING_USAGES,
        }
    }

    fn warning_reason(self) -> &'static str {
        match self {
            Kind::Client => "ClientCertificateExpiring",
            Kind::Serving => "ServingCertificateExpiring",
        }
    }
}

/// How long requests may wait for issuance, and the retry cadence.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// A rotation's wait for the signed certificate (upstream `certificateWaitTimeout`, 15 min).
    pub rotation_wait: Duration,
    /// A bootstrap request's wait (upstream `requestNodeCertificate`, 3600 s).
    pub bootstrap_wait: Duration,
    /// First retry delay; doubles for `backoff_steps` tries (upstream 2 s × 2, 5 steps).
    pub backoff: Duration,
    pub backoff_steps: u32,
    /// The delay between tries after that (upstream 32 s).
    pub poll: Duration,
    /// The Node warning repeats at most this often while renewal keeps failing.
    pub warning_repeat: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            rotation_wait: Duration::from_secs(15 * 60),
            bootstrap_wait: Duration::from_secs(3600),
            backoff: Duration::from_secs(2),
            backoff_steps: 5,
            poll: Duration::from_secs(32),
            warning_repeat: Duration::from_secs(600),
        }
    }
}

/// Called with each new pair once it is stored (the client's transport swap, the HTTPS
/// port's reload).
pub type OnUpdate = Arc<dyn Fn(&CertKey) -> Result<(), CertError> + Send + Sync>;

/// What a manager is built from.
pub struct ManagerConfig {
    pub kind: Kind,
    pub template: Template,
    pub store: FileStore,
    /// `--cert-dir` (the bootstrap key is kept there between tries).
    pub cert_dir: PathBuf,
    /// Requests authenticated by the current certificate (the kubelet's API client).
    pub signer: Arc<dyn CertificateSigner>,
    /// Requests authenticated by the bootstrap kubeconfig (client certificates only).
    pub bootstrap: Option<Arc<dyn CertificateSigner>>,
    pub on_update: OnUpdate,
    pub clock: Clock,
    pub timings: Timings,
}

/// Metric state that is not derived from the current pair.
#[derive(Default)]
struct Stats {
    renew_errors: u64,
    last_warning: Option<Instant>,
}

/// Keeps one certificate current.
pub struct CertificateManager {
    cfg: ManagerConfig,
    current: RwLock<Option<CertKey>>,
    /// Rotate at once (upstream `forceRotation`: the pair came from a kubeconfig, not a CSR).
    force: AtomicBool,
    stats: Mutex<Stats>,
    rotation_seconds: HistogramVec,
}

impl std::fmt::Debug for CertificateManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateManager")
            .field("kind", &self.cfg.kind)
            .field("current", &self.current())
            .finish_non_exhaustive()
    }
}

/// Upstream's buckets of `kubelet_certificate_manager_server_rotation_seconds`.
const ROTATION_BUCKETS: &[f64] = &[
    60.0,
    3600.0,
    14400.0,
    86400.0,
    604800.0,
    2592000.0,
    7776000.0,
    15552000.0,
    31104000.0,
    124416000.0,
];

/// Where the bootstrap key waits for its certificate (upstream `kubelet-client.key.tmp`).
pub const BOOTSTRAP_KEY_FILE: &str = "kubelet-client.key.tmp";

/// The rotation deadline upstream computes: `notBefore + life × (0.7 + 0.2 × fraction)`.
pub fn rotation_deadline(not_before: SystemTime, life: Duration, fraction: f64) -> SystemTime {
    let f = 0.7 + 0.2 * fraction.clamp(0.0, 1.0);
    not_before + life.mul_f64(f)
}

/// The delay before retry `attempt` (0-based): `backoff × 2^attempt` with up to 10 % jitter
/// for the first `backoff_steps` tries, then `poll`.
pub fn retry_delay(t: &Timings, attempt: u32, fraction: f64) -> Duration {
    if attempt < t.backoff_steps {
        let base = t.backoff.saturating_mul(1u32 << attempt.min(16));
        base.mul_f64(1.0 + 0.1 * fraction.clamp(0.0, 1.0))
    } else {
        t.poll
    }
}

impl CertificateManager {
    /// A manager starting from `initial` (what the store or a kubeconfig held). `force`:
    /// rotate as soon as it runs.
    pub fn new(cfg: ManagerConfig, initial: Option<CertKey>, force: bool) -> Arc<Self> {
        let rotation_seconds = HistogramVec::new(
            Desc::new(
                "kubelet_certificate_manager_server_rotation_seconds",
                "[ALPHA] Histogram of the number of seconds the previous certificate lived before being rotated.",
                &[],
            ),
            ROTATION_BUCKETS,
        );
        Arc::new(Self {
            cfg,
            current: RwLock::new(initial),
            force: AtomicBool::new(force),
            stats: Mutex::new(Stats::default()),
            rotation_seconds,
        })
    }

    /// The pair in use (`None` before the first one).
    pub fn current(&self) -> Option<CertKey> {
        sync::read(&self.current).clone()
    }

    pub fn kind(&self) -> Kind {
        self.cfg.kind
    }

    fn now(&self) -> SystemTime {
        SystemTime::from(self.cfg.clock.now())
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        sync::lock(&self.stats)
    }

    /// Renewal failures so far (the `*_renew_errors` counter).
    pub fn renew_errors(&self) -> u64 {
        self.stats().renew_errors
    }

    /// Seconds until the current certificate expires (negative once expired), `+Inf` without
    /// one, truncated as upstream's TTL gauges.
    pub fn ttl_seconds(&self) -> f64 {
        match self.current() {
            Some(c) => {
                let now = self.now();
                match c.info.not_after.duration_since(now) {
                    Ok(left) => left.as_secs_f64().trunc(),
                    Err(e) => -e.duration().as_secs_f64().trunc(),
                }
            }
            None => f64::INFINITY,
        }
    }

    /// How long to wait before the next rotation; zero when it is due now.
    fn time_to_rotation(&self) -> Duration {
        let name = self.cfg.kind.name();
        if self.force.swap(false, Ordering::SeqCst) {
            return Duration::ZERO;
        }
        let Some(current) = self.current() else {
            return Duration::ZERO;
        };
        if !self.cfg.template.satisfied_by(&current.info) {
            info!(
                "{name}: Current certificate does not have the requested subject, names or addresses"
            );
            return Duration::ZERO;
        }
        let deadline = rotation_deadline(
            current.info.not_before,
            current.info.lifetime(),
            super::random_fraction(),
        );
        info!(
            "{name}: Certificate expiration is {}, rotation deadline is {}",
            chrono::DateTime::<chrono::Utc>::from(current.info.not_after),
            chrono::DateTime::<chrono::Utc>::from(deadline),
        );
        deadline.duration_since(self.now()).unwrap_or_default()
    }

    /// Runs rotations until `cancel`; `events` receives the Node warning.
    pub async fn run(self: Arc<Self>, events: Arc<dyn EventRecorder>, cancel: CancellationToken) {
        let name = self.cfg.kind.name();
        info!("{name}: Certificate rotation is enabled");
        loop {
            let wait = self.time_to_rotation();
            if !wait.is_zero() {
                info!("{name}: Waiting {wait:?} for next certificate rotation");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            let mut attempt = 0u32;
            loop {
                let result = tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = self.rotate() => r,
                };
                let Err(e) = result else { break };
                self.stats().renew_errors += 1;
                self.warn_if_expiring(events.as_ref(), &e);
                if attempt == self.cfg.timings.backoff_steps {
                    error!("{name}: Reached backoff limit, still unable to rotate certs: {e}");
                }
                let delay = retry_delay(&self.cfg.timings, attempt, super::random_fraction());
                attempt = attempt.saturating_add(1);
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }

    /// A Node warning when less than 10 % of the life is left (or the certificate expired)
    /// and renewal just failed; repeated at most every `warning_repeat`.
    fn warn_if_expiring(&self, events: &dyn EventRecorder, err: &CertError) {
        let Some(current) = self.current() else {
            return;
        };
        let life = current.info.lifetime();
        let left = current
            .info
            .not_after
            .duration_since(self.now())
            .unwrap_or_default();
        if left >= life / 10 {
            return;
        }
        {
            let mut stats = self.stats();
            if stats
                .last_warning
                .is_some_and(|t| t.elapsed() < self.cfg.timings.warning_repeat)
            {
                return;
            }
            stats.last_warning = Some(Instant::now());
        }
        let what = match self.cfg.kind {
            Kind::Client => "client",
            Kind::Serving => "serving",
        };
        let expiry = chrono::DateTime::<chrono::Utc>::from(current.info.not_after).to_rfc3339();
        let message = if left.is_zero() {
            format!(
                "The kubelet's {what} certificate expired at {expiry} and renewing it keeps failing: {err}"
            )
        } else {
            format!(
                "The kubelet's {what} certificate expires at {expiry} ({}s left) and renewing it keeps failing: {err}",
                left.as_secs()
            )
        };
        events.node_event(EventType::Warning, self.cfg.kind.warning_reason(), &message);
    }

    /// One rotation: a new key, a request, the issued certificate stored and handed on.
    pub async fn rotate(&self) -> Result<(), CertError> {
        let name = self.cfg.kind.name();
        info!("{name}: Rotating certificates");
        let now = self.now();
        let current = self.current();
        let usable = current.as_ref().is_some_and(|c| !c.info.expired_at(now));
        let bootstrap = self.cfg.bootstrap.clone();
        let result = match (&bootstrap, usable) {
            (Some(b), false) => {
                info!(
                    "{name}: no valid client certificate; requesting one with the bootstrap credentials"
                );
                self.request(b.as_ref(), true).await
            }
            _ => {
                if !usable && current.is_some() && self.cfg.kind == Kind::Client {
                    error!(
                        "The currently active client certificate has expired and no --bootstrap-kubeconfig is set; renewal cannot succeed until new credentials are provided"
                    );
                }
                match self.request(self.cfg.signer.as_ref(), false).await {
                    Err(e) if is_unauthorized(&e) && bootstrap.is_some() => {
                        warn!(
                            error = %e,
                            "{name}: the API server refused the current certificate; requesting a new one with the bootstrap credentials"
                        );
                        match &bootstrap {
                            Some(b) => self.request(b.as_ref(), true).await,
                            None => Err(e),
                        }
                    }
                    r => r,
                }
            }
        };
        let (pair, via_bootstrap) = result.map_err(|e| {
            error!("{name}: certificate request was not signed: {e}");
            e
        })?;
        self.cfg
            .store
            .update(&pair, self.cfg.clock.now())
            .map_err(|e| {
                error!("{name}: Unable to store the new cert/key pair: {e}");
                e
            })?;
        if via_bootstrap {
            let tmp = self.cfg.cert_dir.join(BOOTSTRAP_KEY_FILE);
            if let Err(e) = std::fs::remove_file(&tmp)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                info!(path = %tmp.display(), error = %e, "Failed cleaning up private key file");
            }
        }
        let old = sync::write(&self.current).replace(pair.clone());
        if let Some(old) = old
            && self.cfg.kind == Kind::Serving
        {
            let lived = self
                .now()
                .duration_since(old.info.not_before)
                .unwrap_or_default();
            self.rotation_seconds.observe(&[], lived.as_secs_f64());
        }
        (self.cfg.on_update)(&pair)?;
        info!(
            not_after = %chrono::DateTime::<chrono::Utc>::from(pair.info.not_after),
            "{name}: rotated to a new certificate"
        );
        Ok(())
    }

    /// Requests and waits for one certificate; `bootstrap`: the request is authenticated
    /// by the bootstrap credentials, its key is kept in `kubelet-client.key.tmp` between
    /// tries and its name is digested from the key (upstream's bootstrap request).
    async fn request(
        &self,
        signer: &dyn CertificateSigner,
        bootstrap: bool,
    ) -> Result<(CertKey, bool), CertError> {
        let key_pem = if bootstrap {
            self.bootstrap_key()?
        } else {
            generate_key()?
        };
        let req = build_request(&key_pem, &self.cfg.template)?;
        let usages = self.cfg.kind.usages();
        let signing = SigningRequest {
            name: bootstrap.then(|| digested_name(&req.spki, &self.cfg.template, usages)),
            csr_pem: req.csr_pem,
            signer_name: self.cfg.kind.name(),
            usages: usages.iter().map(|u| (*u).to_owned()).collect(),
            spki: req.spki,
        };
        let wait = if bootstrap {
            self.cfg.timings.bootstrap_wait
        } else {
            // Beyond upstream: stop waiting once the current certificate expires, so the
            // next try can fall back to the bootstrap credentials instead of waiting on a
            // request nobody can approve in time.
            let left = self
                .current()
                .and_then(|c| c.info.not_after.duration_since(self.now()).ok())
                .map(|d| d + Duration::from_secs(1));
            match (left, self.cfg.bootstrap.is_some()) {
                (Some(left), true) => self.cfg.timings.rotation_wait.min(left),
                _ => self.cfg.timings.rotation_wait,
            }
        };
        let cert = signer.sign(&signing, wait).await?;
        Ok((issued_pair(&cert, &req.key_pem)?, bootstrap))
    }

    /// The bootstrap key: reused from `kubelet-client.key.tmp` when it loads, else a new one
    /// written there (0600) so a retry or restart asks under the same name.
    fn bootstrap_key(&self) -> Result<String, CertError> {
        let path = self.cfg.cert_dir.join(BOOTSTRAP_KEY_FILE);
        if let Ok(text) = std::fs::read_to_string(&path) {
            if rcgen::KeyPair::from_pem(&text).is_ok() {
                return Ok(text);
            }
            warn!(path = %path.display(), "the saved bootstrap key does not load; generating a new one");
        }
        let key = generate_key()?;
        std::fs::create_dir_all(&self.cfg.cert_dir)
            .map_err(|e| CertError::io(&self.cfg.cert_dir, e))?;
        write_private(&path, key.as_bytes())?;
        Ok(key)
    }
}

impl Collector for CertificateManager {
    fn collect(&self, out: &mut Exposition) {
        let errors = self.renew_errors() as f64;
        let ttl = self.ttl_seconds();
        match self.cfg.kind {
            Kind::Client => {
                out.family(
                    "kubelet_certificate_manager_client_ttl_seconds",
                    "[ALPHA] Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until certificate expiry (negative if already expired). If client certificate is invalid or unused, the value will be +INF.",
                    MetricKind::Gauge,
                )
                .sample("", &[], ttl);
                out.family(
                    "kubelet_certificate_manager_client_expiration_renew_errors",
                    "[ALPHA] Counter of certificate renewal errors.",
                    MetricKind::Counter,
                )
                .sample("", &[], errors);
            }
            Kind::Serving => {
                out.family(
                    "kubelet_certificate_manager_server_ttl_seconds",
                    "[ALPHA] Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the value will be +INF.",
                    MetricKind::Gauge,
                )
                .sample("", &[], ttl);
                out.family(
                    "kubelet_server_expiration_renew_errors",
                    "[ALPHA] Counter of certificate renewal errors.",
                    MetricKind::Counter,
                )
                .sample("", &[], errors);
                self.rotation_seconds.collect(out);
            }
        }
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
