//! The node lease heartbeat (upstream component-helpers `lease.controller` as the kubelet
//! configures it in `pkg/kubelet/nodelease`): owns the `kube-node-lease/<node>` Lease and the
//! last object written. Receives a `kube::Client` (the agent gives it the heartbeat client,
//! `apiclient::heartbeat_client`, so renewals never wait behind `kubeAPIQPS`), the node name,
//! `nodeLeaseDurationSeconds` and the node watch of the status manager (for the Node UID of
//! the owner reference); emits `GET`/`POST` of the Lease until it exists, then a `PUT` with a
//! fresh `renewTime` every renew interval (0.25 × duration) from the cached object, re-reading
//! it on conflicts. The time of the last successful renewal is exposed through
//! [`LeaseHealth`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::apiclient::bounded;
use crate::clock::Clock;
use crate::sync;

/// Namespace of node leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Upstream `nodeLeaseRenewIntervalFraction`.
pub const RENEW_INTERVAL_FRACTION: f64 = 0.25;
/// Upstream `maxUpdateRetries`.
const MAX_UPDATE_RETRIES: usize = 5;
/// Back-off of `backoffEnsureLease`: starts at upstream's 2 × 100 ms but stops doubling at
/// 1 s instead of upstream's 7 s. The API client already holds every request back while the
/// server fails (`apiclient::throttle`: one probe per second at most, for all loops together),
/// so retrying often costs the server nothing, and the lease, which is what keeps the node
/// Ready, is renewed within about a second of the server's recovery rather than up to 7 s.
const ENSURE_BACKOFF: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(1));

/// Failures talking to the API about the lease; all are retried.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("reading lease {LEASE_NAMESPACE}/{name}: {source}")]
    Get { name: String, source: kube::Error },
    #[error("creating lease {LEASE_NAMESPACE}/{name}: {source}")]
    Create { name: String, source: kube::Error },
    #[error("renewing lease {LEASE_NAMESPACE}/{name}: {source}")]
    Update { name: String, source: kube::Error },
    #[error("renewing lease {LEASE_NAMESPACE}/{name}: failed {MAX_UPDATE_RETRIES} attempts")]
    Retries { name: String },
}

/// Read side of the lease heartbeat: when it last succeeded.
#[derive(Debug, Clone, Default)]
pub struct LeaseHealth(Arc<Mutex<Option<DateTime<Utc>>>>);

impl LeaseHealth {
    /// The `renewTime` of the last successful create or renew.
    pub fn last_renew(&self) -> Option<DateTime<Utc>> {
        *sync::lock(&self.0)
    }

    fn set(&self, t: DateTime<Utc>) {
        *sync::lock(&self.0) = Some(t);
    }
}

/// The node lease controller.
pub struct NodeLease {
    api: Api<Lease>,
    node_name: String,
    duration_secs: i32,
    renew_interval: Duration,
    request_timeout: Duration,
    node_rx: watch::Receiver<Option<Arc<Node>>>,
    latest: Option<Lease>,
    health: LeaseHealth,
    clock: Clock,
}

impl NodeLease {
    /// A lease of `duration_secs` (`nodeLeaseDurationSeconds`, default 40) renewed every
    /// 0.25 × that. `node_rx` is the status manager's node watch.
    pub fn new(
        client: kube::Client,
        node_name: &str,
        duration_secs: i32,
        node_rx: watch::Receiver<Option<Arc<Node>>>,
    ) -> Self {
        let renew_interval =
            Duration::from_secs_f64(f64::from(duration_secs.max(1)) * RENEW_INTERVAL_FRACTION);
        Self {
            api: Api::namespaced(client, LEASE_NAMESPACE),
            node_name: node_name.to_owned(),
            duration_secs,
            renew_interval,
            request_timeout: Duration::from_secs(10).min(Duration::from_secs(
                u64::try_from(duration_secs.max(1)).unwrap_or(1),
            )),
            node_rx,
            latest: None,
            health: LeaseHealth::default(),
            clock: Clock::new(),
        }
    }

    /// Overrides the renew interval (tests).
    pub fn with_renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = interval;
        self
    }

    /// Bounds each API call (upstream's heartbeat client timeout: min(
    /// `nodeStatusUpdateFrequency`, lease duration); default min(10 s, lease duration)).
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// A handle reporting the last successful renewal.
    pub fn health(&self) -> LeaseHealth {
        self.health.clone()
    }

    /// Creates and renews the lease until `cancel` fires. Until the lease exists it also
    /// tries again as soon as the Node (needed for the owner reference) becomes known.
    pub async fn run(mut self, cancel: CancellationToken) {
        info!(node = %self.node_name, interval = ?self.renew_interval, "node lease controller started");
        let mut node_watch_open = true;
        loop {
            self.node_rx.borrow_and_update();
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.sync() => {}
            }
            let wait_for_node = node_watch_open && self.latest.is_none();
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(self.renew_interval) => {}
                r = self.node_rx.changed(), if wait_for_node => node_watch_open = r.is_ok(),
            }
        }
        info!(node = %self.node_name, "node lease controller stopped");
    }

    /// Upstream `sync`: renew from the cached lease; if that fails (or there is none yet),
    /// make sure the lease exists and renew the object read back.
    async fn sync(&mut self) {
        if let Some(latest) = self.latest.clone() {
            match self.retry_update_lease(latest).await {
                Ok(()) => return,
                Err(e) => {
                    info!(node = %self.node_name, error = %e, "renewing from the cached lease failed; reading it again")
                }
            }
        }
        let (lease, created) = self.backoff_ensure_lease().await;
        self.latest = lease.clone();
        if let Some(lease) = lease
            && !created
            && let Err(e) = self.retry_update_lease(lease).await
        {
            warn!(node = %self.node_name, error = %e, retry_in = ?self.renew_interval, "failed to renew node lease");
        }
    }

    /// Upstream `backoffEnsureLease`: retries [`Self::ensure_lease`] with back-off until it
    /// succeeds. `None` when the lease does not exist and cannot be created yet (Node unknown).
    async fn backoff_ensure_lease(&mut self) -> (Option<Lease>, bool) {
        let mut backoff = crate::apiclient::RetryBackoff::new(ENSURE_BACKOFF.0, ENSURE_BACKOFF.1);
        loop {
            match self.ensure_lease().await {
                Ok(r) => return r,
                Err(e) => {
                    let delay = backoff.next_delay();
                    warn!(node = %self.node_name, error = %e, retry_in = ?delay, "failed to ensure the node lease exists, will retry");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Upstream `ensureLease`: reads the lease, creating it when missing. Returns the lease
    /// and whether this call created it.
    async fn ensure_lease(&mut self) -> Result<(Option<Lease>, bool), LeaseError> {
        let name = self.node_name.clone();
        match bounded(self.request_timeout, self.api.get(&name)).await {
            Ok(lease) => return Ok((Some(lease), false)),
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(source) => return Err(LeaseError::Get { name, source }),
        }
        let lease = self.new_lease(None);
        if !has_owner(&lease) {
            debug!(node = %name, "node not registered yet; creating its lease once its UID is known");
            return Ok((None, false));
        }
        let created = bounded(
            self.request_timeout,
            self.api.create(&PostParams::default(), &lease),
        )
        .await
        .map_err(|source| LeaseError::Create { name, source })?;
        info!(node = %self.node_name, "created node lease");
        self.renewed(&created);
        Ok((Some(created), true))
    }

    /// Upstream `retryUpdateLease`: up to 5 `PUT`s; a conflict re-reads the lease first.
    async fn retry_update_lease(&mut self, mut base: Lease) -> Result<(), LeaseError> {
        let name = self.node_name.clone();
        for _ in 0..MAX_UPDATE_RETRIES {
            let lease = self.new_lease(Some(&base));
            let params = PostParams::default();
            let put = self.api.replace(&name, &params, &lease);
            match bounded(self.request_timeout, put).await {
                Ok(updated) => {
                    debug!(node = %name, "renewed node lease");
                    self.renewed(&updated);
                    self.latest = Some(updated);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    info!(node = %name, "node lease changed under us; reading it again");
                    match self.backoff_ensure_lease().await {
                        (Some(fresh), _) => base = fresh,
                        (None, _) => return Err(LeaseError::Retries { name }),
                    }
                }
                Err(source) => {
                    warn!(node = %name, error = %LeaseError::Update { name: name.clone(), source }, "failed to renew node lease");
                }
            }
        }
        Err(LeaseError::Retries { name })
    }

    /// Upstream `newLease` + the kubelet's `SetNodeOwnerFunc`: a new lease (or a copy of
    /// `base`) renewed now, owned by the Node once its UID is known.
    fn new_lease(&self, base: Option<&Lease>) -> Lease {
        let mut lease = base.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.node_name.clone()),
                namespace: Some(LEASE_NAMESPACE.to_owned()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.node_name.clone()),
                lease_duration_seconds: Some(self.duration_secs),
                ..Default::default()
            }),
        });
        let now = self.clock.now();
        lease.spec.get_or_insert_with(LeaseSpec::default).renew_time = Some(micro_time(now));
        if !has_owner(&lease)
            && let Some(uid) = self
                .node_rx
                .borrow()
                .as_ref()
                .and_then(|n| n.metadata.uid.clone())
        {
            lease.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".to_owned(),
                kind: "Node".to_owned(),
                name: self.node_name.clone(),
                uid,
                ..Default::default()
            }]);
        }
        lease
    }

    fn renewed(&self, lease: &Lease) {
        let t = lease
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .and_then(|t| DateTime::<Utc>::from_timestamp_micros(t.0.as_microsecond()))
            .unwrap_or_else(|| self.clock.now());
        self.health.set(t);
    }
}

fn has_owner(lease: &Lease) -> bool {
    lease
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| !o.is_empty())
}

fn micro_time(t: DateTime<Utc>) -> MicroTime {
    MicroTime(
        k8s_openapi::jiff::Timestamp::from_microsecond(t.timestamp_micros())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_keeps_microseconds() {
        let t = DateTime::<Utc>::from_timestamp_micros(1_700_000_000_123_456).unwrap();
        assert_eq!(micro_time(t).0.as_microsecond(), 1_700_000_000_123_456);
    }

    #[test]
    fn owner_detection() {
        let mut lease = Lease::default();
        assert!(!has_owner(&lease));
        lease.metadata.owner_references = Some(vec![OwnerReference::default()]);
        assert!(has_owner(&lease));
    }
}
