//! `ApiObjects` (the API server `PodObjects`) against the in-repo fake API server (real network
//! I/O, real time): ConfigMaps/Secrets served from per-object watches of registered pods,
//! watches stopped on unregister, direct GETs for unregistered objects, missing objects,
//! Secret bytes, immutable objects, service-link environment (incl. the master `kubernetes`
//! service and `enableServiceLinks: false`) and bound service account tokens with reuse,
//! refresh and the failed-refresh fallback, and the projected token file following a refresh.

use crate::common;

use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Patch, PatchParams};
use kubelet::clock::Clock;
use kubelet::objects::api::{ApiObjects, ApiObjectsSettings};
use kubelet::objects::{ObjectError, PodObjects, TokenRequest};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NS: &str = "ns";

struct Fixture {
    server: FakeApiServer,
    client: kube::Client,
    objects: ApiObjects,
    cancel: CancellationToken,
    task: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Fixture {
    async fn stop(self) {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the objects task ends on cancel")
            .unwrap();
    }

    fn count(&self, key: &str) -> u64 {
        self.server
            .request_counts()
            .get(key)
            .copied()
            .unwrap_or_default()
    }
}

fn settings() -> ApiObjectsSettings {
    ApiObjectsSettings {
        sync_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
    }
}

async fn fixture_with(clock: Option<Clock>) -> Fixture {
    let common::ApiFixture {
        dir,
        server,
        client,
    } = common::api_fixture(Options::default()).await;
    server
        .create("namespaces", "", json!({"metadata": {"name": NS}}))
        .unwrap();
    let (objects, task) = match clock {
        Some(clock) => ApiObjects::with_clock(client.clone(), settings(), clock),
        None => ApiObjects::new(client.clone(), settings()),
    };
    let cancel = CancellationToken::new();
    let task = tokio::spawn(task.run(cancel.clone()));
    Fixture {
        server,
        client,
        objects,
        cancel,
        task,
        _dir: dir,
    }
}

async fn fixture() -> Fixture {
    fixture_with(None).await
}

fn pod(name: &str, spec: Value) -> Pod {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}")},
        "spec": spec,
    }))
    .unwrap()
}

fn cm_volume_pod(name: &str, cm: &str) -> Pod {
    pod(
        name,
        json!({"volumes": [{"name": "v", "configMap": {"name": cm}}]}),
    )
}

fn data(cm: &ConfigMap, key: &str) -> String {
    cm.data.as_ref().unwrap()[key].clone()
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn registered_config_map_is_served_and_updated_from_its_watch() {
    let f = fixture().await;
    f.server
        .create(
            "configmaps",
            NS,
            json!({"metadata": {"name": "cm"}, "data": {"k": "v1"}}),
        )
        .unwrap();
    f.objects.register_pod(&cm_volume_pod("p", "cm"));
    assert_eq!(
        f.objects.watched_config_maps(),
        [(NS.to_owned(), "cm".to_owned())]
    );
    let cm = f.objects.config_map(NS, "cm").await.unwrap().unwrap();
    assert_eq!(data(&cm, "k"), "v1");
    assert_eq!(f.count("LIST configmaps"), 1);
    eventually("the watch request", || async {
        f.count("WATCH configmaps") >= 1
    })
    .await;

    let api: kube::Api<ConfigMap> = kube::Api::namespaced(f.client.clone(), NS);
    api.patch(
        "cm",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v2"}})),
    )
    .await
    .unwrap();
    let changed = Instant::now();
    eventually("the update to reach the watch cache", || async {
        data(&f.objects.config_map(NS, "cm").await.unwrap().unwrap(), "k") == "v2"
    })
    .await;
    assert!(
        changed.elapsed() < Duration::from_secs(1),
        "{:?}",
        changed.elapsed()
    );
    // Served from the watch: never a GET, no relist.
    assert_eq!(f.count("GET configmaps"), 0);
    assert_eq!(f.count("LIST configmaps"), 1);

    // A second pod shares the watch; the first leaving keeps it.
    f.objects.register_pod(&cm_volume_pod("q", "cm"));
    f.objects.unregister_pod("uid-p");
    assert_eq!(f.objects.watched_config_maps().len(), 1);
    assert_eq!(f.count("LIST configmaps"), 1);
    f.stop().await;
}

#[tokio::test]
async fn unregistering_stops_the_watch_and_lookups_fall_back_to_get() {
    let f = fixture().await;
    f.server
        .create(
            "configmaps",
            NS,
            json!({"metadata": {"name": "cm"}, "data": {"k": "v1"}}),
        )
        .unwrap();
    f.objects.register_pod(&cm_volume_pod("p", "cm"));
    f.objects.config_map(NS, "cm").await.unwrap().unwrap();
    eventually("the watch request", || async {
        f.count("WATCH configmaps") >= 1
    })
    .await;
    let watches = f.count("WATCH configmaps");

    f.objects.unregister_pod("uid-p");
    assert!(f.objects.watched_config_maps().is_empty());
    // No longer cached: the next lookup asks the API server.
    let cm = f.objects.config_map(NS, "cm").await.unwrap().unwrap();
    assert_eq!(data(&cm, "k"), "v1");
    assert_eq!(f.count("GET configmaps"), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.count("WATCH configmaps"), watches);
    assert_eq!(f.count("LIST configmaps"), 1);
    f.stop().await;
}

#[tokio::test]
async fn re_registration_moves_the_watches_to_the_new_references() {
    let f = fixture().await;
    for name in ["a", "b"] {
        f.server
            .create(
                "configmaps",
                NS,
                json!({"metadata": {"name": name}, "data": {"k": name}}),
            )
            .unwrap();
    }
    f.objects.register_pod(&cm_volume_pod("p", "a"));
    f.objects.register_pod(&cm_volume_pod("p", "a"));
    assert_eq!(f.objects.watched_config_maps(), [(NS.into(), "a".into())]);
    f.objects.register_pod(&cm_volume_pod("p", "b"));
    assert_eq!(f.objects.watched_config_maps(), [(NS.into(), "b".into())]);
    let cm = f.objects.config_map(NS, "b").await.unwrap().unwrap();
    assert_eq!(data(&cm, "k"), "b");
    f.objects.unregister_pod("uid-p");
    assert!(f.objects.watched_config_maps().is_empty());
    f.stop().await;
}

#[tokio::test]
async fn missing_objects_are_none_whether_watched_or_not() {
    let f = fixture().await;
    let p = pod(
        "p",
        json!({
            "volumes": [{"name": "v", "configMap": {"name": "absent-cm"}}],
            "imagePullSecrets": [{"name": "absent-secret"}],
        }),
    );
    f.objects.register_pod(&p);
    assert_eq!(
        f.objects.watched_secrets(),
        [(NS.to_owned(), "absent-secret".to_owned())]
    );
    assert_eq!(f.objects.config_map(NS, "absent-cm").await.unwrap(), None);
    assert_eq!(f.objects.secret(NS, "absent-secret").await.unwrap(), None);
    assert_eq!(f.count("GET configmaps") + f.count("GET secrets"), 0);
    // Not referenced by any pod: a GET answering 404.
    assert_eq!(f.objects.config_map(NS, "other").await.unwrap(), None);
    assert_eq!(f.objects.secret("nowhere", "other").await.unwrap(), None);
    assert_eq!(f.count("GET configmaps"), 1);

    // Created later: the watch picks it up.
    f.server
        .create(
            "configmaps",
            NS,
            json!({"metadata": {"name": "absent-cm"}, "data": {"k": "now"}}),
        )
        .unwrap();
    eventually("the created ConfigMap", || async {
        f.objects
            .config_map(NS, "absent-cm")
            .await
            .unwrap()
            .is_some()
    })
    .await;
    f.stop().await;
}

#[tokio::test]
async fn secret_bytes_are_intact() {
    let f = fixture().await;
    let bytes: Vec<u8> = (0..=255u8).rev().collect();
    f.server
        .create(
            "secrets",
            NS,
            json!({"metadata": {"name": "s"}, "data": {"bin": base64(&bytes)}, "stringData": {"txt": "héllo"}}),
        )
        .unwrap();
    f.objects.register_pod(&pod(
        "p",
        json!({"containers": [{"name": "c", "image": "i", "envFrom": [{"secretRef": {"name": "s"}}]}]}),
    ));
    for _ in 0..2 {
        let secret = f.objects.secret(NS, "s").await.unwrap().unwrap();
        let data = secret.data.unwrap();
        assert_eq!(data["bin"].0, bytes);
        assert_eq!(data["txt"].0, "héllo".as_bytes());
        f.objects.unregister_pod("uid-p"); // second round: through a GET
    }
    assert_eq!(f.count("GET secrets"), 1);
    f.stop().await;
}

#[tokio::test]
async fn immutable_objects_stop_being_watched_but_stay_served() {
    let f = fixture().await;
    f.server
        .create(
            "configmaps",
            NS,
            json!({"metadata": {"name": "frozen"}, "immutable": true, "data": {"k": "v"}}),
        )
        .unwrap();
    f.objects.register_pod(&cm_volume_pod("p", "frozen"));
    assert_eq!(f.objects.watched_config_maps().len(), 1);
    let cm = f.objects.config_map(NS, "frozen").await.unwrap().unwrap();
    assert_eq!(data(&cm, "k"), "v");
    assert!(f.objects.watched_config_maps().is_empty());
    let cm = f.objects.config_map(NS, "frozen").await.unwrap().unwrap();
    assert_eq!(data(&cm, "k"), "v");
    assert_eq!(f.count("GET configmaps"), 0);
    f.stop().await;
}

#[tokio::test]
async fn lookups_of_registered_objects_fail_when_the_watch_cannot_list() {
    let common::ApiFixture {
        dir: _dir,
        server,
        client,
    } = common::api_fixture(Options::default()).await;
    let (objects, task) = ApiObjects::new(
        client,
        ApiObjectsSettings {
            sync_timeout: Duration::from_millis(300),
            ..settings()
        },
    );
    let cancel = CancellationToken::new();
    let task = tokio::spawn(task.run(cancel.clone()));
    server.fail_requests(Some(503));
    objects.register_pod(&cm_volume_pod("p", "cm"));
    let err = objects.config_map(NS, "cm").await.unwrap_err();
    assert_eq!(err, ObjectError::NotSynced { kind: "configmap" });
    assert_eq!(
        err.to_string(),
        "failed to sync configmap cache: timed out waiting for the condition"
    );
    cancel.cancel();
    task.await.unwrap();
}

fn service(name: &str, ip: Option<&str>, ports: Value) -> Value {
    let mut spec = json!({"ports": ports});
    if let Some(ip) = ip {
        spec["clusterIP"] = json!(ip);
    }
    json!({"metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn service_env_has_the_master_service_and_the_pod_namespace_services() {
    let f = fixture().await;
    let s = &f.server;
    s.create(
        "services",
        "default",
        service(
            "kubernetes",
            Some("10.96.0.1"),
            json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
        ),
    )
    .unwrap();
    s.create(
        "services",
        "default",
        service("default-only", Some("10.96.0.2"), json!([{"port": 80}])),
    )
    .unwrap();
    s.create(
        "services",
        NS,
        service(
            "web-api",
            Some("10.96.0.10"),
            json!([{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]),
        ),
    )
    .unwrap();
    s.create(
        "services",
        NS,
        service("headless", Some("None"), json!([{"port": 80}])),
    )
    .unwrap();
    assert!(f.objects.wait_services_synced(Duration::from_secs(5)).await);
    // The informer lists once and then follows changes.
    let links = pod("p", json!({}));
    eventually("the services in the informer", || async {
        f.objects
            .service_env(&links)
            .contains_key("WEB_API_SERVICE_HOST")
    })
    .await;
    let env = f.objects.service_env(&links);
    assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
    assert_eq!(env["KUBERNETES_SERVICE_PORT"], "443");
    assert_eq!(env["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
    assert_eq!(env["KUBERNETES_PORT"], "tcp://10.96.0.1:443");
    assert_eq!(env["KUBERNETES_PORT_443_TCP"], "tcp://10.96.0.1:443");
    assert_eq!(env["KUBERNETES_PORT_443_TCP_PROTO"], "tcp");
    assert_eq!(env["KUBERNETES_PORT_443_TCP_PORT"], "443");
    assert_eq!(env["KUBERNETES_PORT_443_TCP_ADDR"], "10.96.0.1");
    assert_eq!(env["WEB_API_SERVICE_HOST"], "10.96.0.10");
    assert_eq!(env["WEB_API_SERVICE_PORT"], "80");
    assert_eq!(env["WEB_API_SERVICE_PORT_HTTP"], "80");
    assert_eq!(env["WEB_API_SERVICE_PORT_DNS"], "53");
    assert_eq!(env["WEB_API_PORT"], "tcp://10.96.0.10:80");
    assert_eq!(env["WEB_API_PORT_53_UDP"], "udp://10.96.0.10:53");
    assert!(!env.keys().any(|k| k.starts_with("HEADLESS_")));
    assert!(!env.keys().any(|k| k.starts_with("DEFAULT_ONLY_")));
    assert_eq!(env.len(), 8 + 13, "{env:#?}");

    let no_links = pod("q", json!({"enableServiceLinks": false}));
    let env = f.objects.service_env(&no_links);
    assert!(env.keys().all(|k| k.starts_with("KUBERNETES_")), "{env:#?}");
    assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");

    // A new service shows up without a new list.
    s.create(
        "services",
        NS,
        service("late", None, json!([{"port": 8080}])),
    )
    .unwrap();
    eventually("the new service", || async {
        f.objects
            .service_env(&links)
            .contains_key("LATE_SERVICE_HOST")
    })
    .await;
    assert_eq!(f.count("LIST services"), 1);
    f.stop().await;
}

fn token_request(audience: &str) -> TokenRequest {
    TokenRequest {
        namespace: NS.into(),
        service_account: "default".into(),
        audience: audience.into(),
        expiration_seconds: 600,
        pod_name: "p".into(),
        pod_uid: "uid-p".into(),
    }
}

async fn token_fixture(clock: Option<Clock>) -> Fixture {
    let f = fixture_with(clock).await;
    f.server
        .create(
            "serviceaccounts",
            NS,
            json!({"metadata": {"name": "default"}}),
        )
        .unwrap();
    f
}

#[tokio::test]
async fn tokens_are_bound_to_the_pod_and_reused_until_a_refresh_is_due() {
    let f = token_fixture(None).await;
    let request = token_request("");
    let before = chrono::Utc::now();
    let grant = f.objects.service_account_token(&request).await.unwrap();
    let claims = jwt_claims(&grant.token);
    assert_eq!(claims["sub"], "system:serviceaccount:ns:default");
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "p");
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], "uid-p");
    assert_eq!(
        claims["exp"].as_i64().unwrap(),
        grant.expiration.timestamp()
    );
    let lifetime = grant.expiration - before;
    assert!((599..=601).contains(&lifetime.num_seconds()), "{lifetime}");

    let again = f.objects.service_account_token(&request).await.unwrap();
    assert_eq!(again, grant);
    assert_eq!(f.count("POST serviceaccounts/token"), 1);

    // Another audience is another token.
    let other = f
        .objects
        .service_account_token(&token_request("vault"))
        .await
        .unwrap();
    assert_ne!(other.token, grant.token);
    assert_eq!(jwt_claims(&other.token)["aud"], json!(["vault"]));
    assert_eq!(f.objects.cached_tokens(), 2);
    // The pod going away forgets its tokens.
    f.objects.unregister_pod("uid-p");
    assert_eq!(f.objects.cached_tokens(), 0);

    let missing = TokenRequest {
        service_account: "missing".into(),
        ..token_request("")
    };
    let err = f.objects.service_account_token(&missing).await.unwrap_err();
    assert!(
        matches!(&err, ObjectError::Api { kind: "serviceaccount", message, .. } if message.starts_with("failed to fetch token")),
        "{err}"
    );
    f.stop().await;
}

#[tokio::test]
async fn due_tokens_are_refreshed_and_a_failed_refresh_serves_the_valid_one() {
    // 490 s ahead: a fresh 600 s token is past 80 % of its life, but not expired.
    let ahead = Clock::anchored(chrono::Utc::now() + chrono::Duration::seconds(490));
    let f = token_fixture(Some(ahead)).await;
    let request = token_request("");
    let first = f.objects.service_account_token(&request).await.unwrap();
    let second = f.objects.service_account_token(&request).await.unwrap();
    assert_ne!(first.token, second.token);
    assert_eq!(f.count("POST serviceaccounts/token"), 2);

    f.server.fail_requests(Some(500));
    let third = f.objects.service_account_token(&request).await.unwrap();
    assert_eq!(third, second);
    f.server.fail_requests(None);
    f.stop().await;

    // 700 s ahead: every token is already expired; a failed refresh is an error.
    let late = Clock::anchored(chrono::Utc::now() + chrono::Duration::seconds(700));
    let f = token_fixture(Some(late)).await;
    f.objects.service_account_token(&request).await.unwrap();
    f.server.fail_requests(Some(500));
    let err = f.objects.service_account_token(&request).await.unwrap_err();
    assert!(
        err.to_string().contains("token expired and refresh failed"),
        "{err}"
    );
    f.server.fail_requests(None);
    f.stop().await;
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The claims of a JWT (unpadded base64url payload).
fn jwt_claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT");
    let mut bits = 0u32;
    let mut nbits = 0;
    let mut out = Vec::new();
    for c in payload.bytes() {
        let v = match c {
            b'-' => 62,
            b'_' => 63,
            _ => B64.iter().position(|b| *b == c).expect("base64url") as u32,
        };
        bits = bits << 6 | v;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    serde_json::from_slice(&out).unwrap()
}

/// Mounts nothing: the volume manager's files land in plain directories.
struct NoMounts;

#[async_trait::async_trait]
impl kubelet::volumes::Mounter for NoMounts {
    async fn mount_tmpfs(&self, _dir: &std::path::Path, _size: Option<i64>) -> Result<(), String> {
        Ok(())
    }
    async fn unmount(&self, _dir: &std::path::Path) -> Result<(), String> {
        Ok(())
    }
    fn is_mount_point(&self, _dir: &std::path::Path) -> bool {
        false
    }
    async fn bind_mount(
        &self,
        _source: &std::path::Path,
        _target: &std::path::Path,
    ) -> Result<(), String> {
        Ok(())
    }
}

/// The token file of a projected volume, as the volume manager writes it on each pod sync.
async fn token_file_over_two_syncs(clock: Option<Clock>) -> (String, String) {
    let f = token_fixture(clock).await;
    let root = tempfile::tempdir().unwrap();
    let volumes = kubelet::volumes::VolumeManager::new(
        kubelet::volumes::VolumeConfig {
            root_dir: root.path().to_owned(),
            node_memory_bytes: 1 << 30,
            node_hosts_file: "/etc/hosts".into(),
        },
        std::sync::Arc::new(NoMounts),
    )
    .with_objects(std::sync::Arc::new(f.objects.clone()));
    let p = pod(
        "p",
        json!({"volumes": [{"name": "t", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 600}}
        ]}}]}),
    );
    f.objects.register_pod(&p);
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let mounted = volumes.mount_pod_volumes(&p).await.unwrap();
        let path = mounted["t"].host_path.join("token");
        tokens.push(std::fs::read_to_string(&path).unwrap());
    }
    f.stop().await;
    (tokens.remove(0), tokens.remove(0))
}

#[tokio::test]
async fn projected_token_file_is_rewritten_when_the_token_is_refreshed() {
    let (first, second) = token_file_over_two_syncs(None).await;
    assert_eq!(jwt_claims(&first)["kubernetes.io"]["pod"]["name"], "p");
    assert_eq!(first, second, "a fresh token is reused on the next sync");
    // Past 80 % of its life every sync refreshes it, and the file follows.
    let ahead = Clock::anchored(chrono::Utc::now() + chrono::Duration::seconds(490));
    let (first, second) = token_file_over_two_syncs(Some(ahead)).await;
    assert_ne!(first, second, "the refreshed token reached the file");
}
