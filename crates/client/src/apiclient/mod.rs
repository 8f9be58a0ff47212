//! The kubelet's connection to the API server (upstream `kubeClient` from `--kubeconfig`):
//! builds one `kube::Client` from a kubeconfig file (token, client certificates, CA, exec
//! plugins as kube supports them) and holds the shared retry policy of API callers. Owns no
//! pod or node state; pod source, status sync and events use it, node status and the lease
//! its [`heartbeat_client`] (no `kubeAPIQPS` limit, as upstream's heartbeat client).

pub mod patch;
pub mod rate_limit;
pub mod throttle;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Failures turning a kubeconfig into a client.
#[derive(Debug, thiserror::Error)]
pub enum ApiClientError {
    #[error("reading kubeconfig {path}: {source}")]
    Read {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {path}: {source}")]
    Config {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {path}: building the client: {source}")]
    Client { path: PathBuf, source: kube::Error },
}

/// Client settings from the KubeletConfiguration.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// Per-request timeout (upstream uses `runtimeRequestTimeout`-independent client defaults).
    pub timeout: Duration,
    /// `kubeAPIQPS` / `kubeAPIBurst`: every request waits for a token (`None`: unlimited).
    pub rate_limit: Option<rate_limit::RateLimit>,
    /// Back-off while the server fails and `Retry-After`, shared by every client built from
    /// these settings (clones share it: certificate rotation keeps it).
    pub throttle: throttle::Throttle,
}

impl Default for ClientSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            rate_limit: None,
            throttle: throttle::Throttle::default(),
        }
    }
}

/// Builds a client from the kubeconfig at `path` (its current context).
pub async fn client_from_kubeconfig(
    path: &Path,
    settings: &ClientSettings,
) -> Result<kube::Client, ApiClientError> {
    let config = config_from_kubeconfig(path).await?;
    client_from_config(config, settings).map_err(|source| ApiClientError::Client {
        path: path.to_owned(),
        source,
    })
}

/// The client configuration of the kubeconfig at `path` (its current context).
pub async fn config_from_kubeconfig(path: &Path) -> Result<kube::Config, ApiClientError> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| ApiClientError::Read {
        path: path.to_owned(),
        source,
    })?;
    config_from_parsed(path, kubeconfig).await
}

/// As [`config_from_kubeconfig`], from an already parsed kubeconfig (`path` names it in
/// errors).
pub async fn config_from_parsed(
    path: &Path,
    kubeconfig: Kubeconfig,
) -> Result<kube::Config, ApiClientError> {
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| ApiClientError::Config {
            path: path.to_owned(),
            source,
        })
}

/// Builds a client from a resolved configuration with the kubelet's timeouts, retry policy
/// and rate limit.
pub fn client_from_config(
    mut config: kube::Config,
    settings: &ClientSettings,
) -> Result<kube::Client, kube::Error> {
    config.read_timeout = Some(settings.timeout);
    config.write_timeout = Some(settings.timeout);
    config.connect_timeout = Some(Duration::from_secs(10));
    // Every caller owns its retry loop (status sync, lease, node status, watch); kube's own
    // retry layer would hold a call open through a long 503 outage instead of failing fast.
    // Failures and `Retry-After` are handled client-wide by the throttle layer instead.
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&throttle::ThrottleLayer(settings.throttle.clone()));
    Ok(match settings.rate_limit {
        Some(limit) => builder
            .with_layer(&rate_limit::RateLimitLayer(limit))
            .build(),
        None => builder.build(),
    })
}

/// The heartbeat client (upstream `kubeDeps.HeartbeatClient`): the same connection, identity
/// and certificate rotation as `client`, but its requests never spend nor wait for the
/// `kubeAPIQPS` bucket, so node status updates and lease renewals go out while other API
/// callers are being held back. The client-wide failure back-off ([`throttle`]) still applies.
pub fn heartbeat_client(client: &kube::Client) -> kube::Client {
    let inner = client.clone();
    let service = tower::service_fn(move |mut req: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        async move {
            req.extensions_mut().insert(rate_limit::Unthrottled);
            inner.send(req).await
        }
    });
    kube::Client::new(service, client.default_namespace())
}

/// Exponential back-off between retries of API calls: 200 ms doubling to `max`, as the
/// upstream kubelet's client-go retry loops roughly do. Pure; callers own the sleeping.
#[derive(Debug, Clone)]
pub struct RetryBackoff {
    next: Duration,
    initial: Duration,
    max: Duration,
}

impl RetryBackoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            next: initial,
            initial,
            max,
        }
    }

    /// The delay before the next attempt; doubles each call up to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// After a success.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// An API call that did not finish within its time bound.
#[derive(Debug, thiserror::Error)]
#[error("request timed out after {0:?}")]
pub struct RequestTimeout(pub Duration);

/// Runs one API call with a time bound; running out of time is a `kube::Error::Service`
/// carrying [`RequestTimeout`].
pub async fn bounded<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| Err(kube::Error::Service(Box::new(RequestTimeout(timeout)))))
}

/// Second-precision API time, as the API server stores `metav1.Time`.
pub fn api_time(
    t: chrono::DateTime<chrono::Utc>,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use fake_apiserver::{FakeApiServer, Options};
    use k8s_openapi::api::core::v1::Namespace;

    #[test]
    fn backoff_doubles_to_max_and_resets() {
        let mut b = RetryBackoff::new(Duration::from_millis(200), Duration::from_secs(1));
        let seq: Vec<_> = (0..5).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(seq, [200, 400, 800, 1000, 1000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(200));
    }

    #[tokio::test]
    async fn client_from_fixture_kubeconfig_talks_https_with_client_cert() {
        let dir = tempfile::tempdir().unwrap();
        let server = FakeApiServer::start(Options {
            kubeconfig_path: Some(dir.path().join("kubeconfig")),
            ..Options::default()
        })
        .await
        .unwrap();
        let client = client_from_kubeconfig(&server.kubeconfig_path, &ClientSettings::default())
            .await
            .unwrap();
        let ns: kube::Api<Namespace> = kube::Api::all(client);
        let list = ns.list(&Default::default()).await.unwrap();
        assert!(
            list.items
                .iter()
                .any(|n| n.metadata.name.as_deref() == Some("default")),
            "{:?}",
            list.items
        );
    }

    #[tokio::test]
    async fn heartbeats_do_not_wait_behind_kube_api_qps() {
        use k8s_openapi::api::coordination::v1::Lease;
        let server = FakeApiServer::start(Options::default()).await.unwrap();
        let settings = ClientSettings {
            rate_limit: Some(rate_limit::RateLimit { qps: 1.0, burst: 1 }),
            ..ClientSettings::default()
        };
        let client = client_from_kubeconfig(&server.kubeconfig_path, &settings)
            .await
            .unwrap();
        // Forty reads queue on the bucket: the last one is due in about 40 s.
        let mut flood = tokio::task::JoinSet::new();
        for _ in 0..40 {
            let ns: kube::Api<Namespace> = kube::Api::all(client.clone());
            flood.spawn(async move { ns.get("default").await });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let start = std::time::Instant::now();
        let leases: kube::Api<Lease> =
            kube::Api::namespaced(heartbeat_client(&client), "kube-node-lease");
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}
        }))
        .unwrap();
        let created = tokio::time::timeout(
            Duration::from_secs(5),
            leases.create(&Default::default(), &lease),
        )
        .await
        .expect("the lease waited behind the rate-limited flood")
        .unwrap();
        assert_eq!(created.metadata.name.as_deref(), Some("n1"));
        let renewed = tokio::time::timeout(Duration::from_secs(5), leases.get("n1"))
            .await
            .expect("the lease read waited behind the flood")
            .unwrap();
        assert_eq!(renewed.metadata.name.as_deref(), Some("n1"));
        assert!(start.elapsed() < Duration::from_secs(5));
        // The flood is still being held back by kubeAPIQPS.
        assert!(flood.len() > 30, "{} of 40 reads left", flood.len());
        flood.abort_all();
    }

    #[tokio::test]
    async fn missing_kubeconfig_names_the_file() {
        let Err(err) = client_from_kubeconfig(
            Path::new("/nonexistent/kubeconfig"),
            &ClientSettings::default(),
        )
        .await
        else {
            panic!("a missing kubeconfig must be an error");
        };
        assert!(err.to_string().contains("/nonexistent/kubeconfig"), "{err}");
    }
}
