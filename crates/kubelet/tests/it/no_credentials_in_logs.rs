//! CVE-2020-8564/8565/8566: no credential reaches a log line at any verbosity. Every target
//! (ours, tonic/h2/hyper, kube, rustls through the `log` bridge) logs at TRACE into a buffer
//! while credentials flow: a CRI image pull with registry auth through the real gRPC client,
//! a TokenReview of a bearer token, a bound service account TokenRequest, a client built
//! from a kubeconfig holding a private key, and image pulls with a pod's pull secrets (a wrong
//! and a right password tried over gRPC, a malformed secret refused). None of the secrets may
//! appear in the output.
//! One test per binary: the subscriber is process-global.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::Options;
use fake_apiserver::reviews::TokenUser;
use kubelet::objects::api::{ApiObjects, ApiObjectsSettings};
use kubelet::objects::{PodObjects, TokenRequest};
use kubelet::server::review::{KubeReviews, ReviewApi};
use rkubelet_cri::fake::{FakeRuntime, serve_unix};
use rkubelet_cri::{ImageService, RemoteRuntime, api};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const IMAGE: &str = "docker.io/library/busybox:latest";
const REGISTRY_PASSWORD: &str = "Pa55-registry-c0ffee-9f1e";
const REGISTRY_AUTH: &str = "cHVsbGVyOlBhNTUtcmVnaXN0cnk=";
const IDENTITY_TOKEN: &str = "identity-tok-5b7d1e0a";
const REGISTRY_TOKEN: &str = "registry-tok-8c2f4a6b";
const BEARER: &str = "bearer-secret-3e9a77d0c1";
const PRIVATE_IMAGE: &str = "127.0.0.1:5055/private/app:1";
const PULL_SECRET_PASSWORD: &str = "pull-secret-pw-71c3e2";
const WRONG_PULL_PASSWORD: &str = "wrong-pull-pw-40aa9d";
const MALFORMED_AUTH: &str = "malformed-auth-pw-6e1b!!";

fn auth() -> api::AuthConfig {
    api::AuthConfig {
        username: "puller".into(),
        password: REGISTRY_PASSWORD.into(),
        auth: REGISTRY_AUTH.into(),
        server_address: "docker.io".into(),
        identity_token: IDENTITY_TOKEN.into(),
        registry_token: REGISTRY_TOKEN.into(),
    }
}

fn pull(auth: api::AuthConfig) -> api::PullImageRequest {
    api::PullImageRequest {
        image: Some(api::ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        auth: Some(auth),
        sandbox_config: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_the_logs_at_trace() {
    let capture = common::LogCapture::default();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .with_ansi(false)
        .try_init()
        .unwrap();

    // 1. A registry-authenticated pull over real CRI gRPC, a success and a refusal.
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::new();
    let server = serve_unix(
        Arc::new(fake.clone()),
        Arc::new(fake.clone()),
        &dir.path().join("cri.sock"),
    )
    .await
    .unwrap();
    let remote = RemoteRuntime::connect(&server.endpoint(), Duration::from_secs(10))
        .await
        .unwrap();
    let pulled = remote.pull_image(pull(auth())).await.unwrap();
    assert!(!pulled.image_ref.is_empty());
    fake.fail_pull(IMAGE, "pull access denied, authorization failed");
    let err = remote.pull_image(pull(auth())).await.unwrap_err();
    assert!(err.to_string().contains("authorization failed"), "{err}");
    server.shutdown().await;

    // 2. A bearer token checked through TokenReview, accepted and refused.
    let api_fixture = common::api_fixture(Options::default()).await;
    api_fixture.server.reviews().add_token(
        BEARER,
        TokenUser {
            username: "bob".into(),
            uid: "uid-bob".into(),
            groups: vec!["people".into()],
        },
    );
    let reviews = KubeReviews(api_fixture.client.clone());
    let user = reviews.token_review(BEARER).await.unwrap().unwrap();
    assert_eq!(user.name, "bob");
    let unknown = format!("{BEARER}-unknown");
    assert_eq!(reviews.token_review(&unknown).await.unwrap(), None);

    // 3. A bound service account token, requested and logged by its holder's Debug.
    let server = &api_fixture.server;
    server
        .create("namespaces", "", json!({"metadata": {"name": "ns"}}))
        .unwrap();
    server
        .create(
            "serviceaccounts",
            "ns",
            json!({"metadata": {"name": "default"}}),
        )
        .unwrap();
    let (objects, task) = ApiObjects::new(
        api_fixture.client.clone(),
        ApiObjectsSettings {
            sync_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
        },
    );
    let cancel = CancellationToken::new();
    let task = tokio::spawn(task.run(cancel.clone()));
    let grant = objects
        .service_account_token(&TokenRequest {
            namespace: "ns".into(),
            service_account: "default".into(),
            audience: String::new(),
            expiration_seconds: 600,
            pod_name: "p".into(),
            pod_uid: "uid-p".into(),
        })
        .await
        .unwrap();
    assert!(grant.token.len() > 20);
    tracing::debug!(?grant, "granted");
    cancel.cancel();
    task.await.unwrap();

    // 4. A client from the kubeconfig (client certificate and private key inline).
    let kubeconfig = std::fs::read_to_string(&server.kubeconfig_path).unwrap();
    let key_data = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-key-data:"))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .expect("the fixture kubeconfig holds client-key-data");
    let client = kubelet::apiclient::client_from_kubeconfig(
        &server.kubeconfig_path,
        &kubelet::apiclient::ClientSettings::default(),
    )
    .await
    .unwrap();
    let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    ns.get("ns").await.unwrap();

    // 5. Pull secrets through the image manager over real CRI gRPC.
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let pull_auth = b64(&format!("puller:{PULL_SECRET_PASSWORD}"));
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::new();
    fake.require_pull_credentials(PRIVATE_IMAGE, "puller", PULL_SECRET_PASSWORD);
    let cri = serve_unix(
        Arc::new(fake.clone()),
        Arc::new(fake.clone()),
        &dir.path().join("cri.sock"),
    )
    .await
    .unwrap();
    let remote = RemoteRuntime::connect(&cri.endpoint(), Duration::from_secs(10))
        .await
        .unwrap();
    let images = kubelet::images::ImageManager::new(
        Arc::new(remote),
        Arc::new(kubelet::events::LoggingRecorder),
        true,
        None,
    );
    let docker_secret =
        |name: &str, config: serde_json::Value| -> k8s_openapi::api::core::v1::Secret {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns"},
                "type": "kubernetes.io/dockerconfigjson",
                "data": {".dockerconfigjson": b64(&config.to_string())},
            }))
            .unwrap()
        };
    let secrets = [docker_secret(
        "regcred",
        json!({"auths": {
            "127.0.0.1:5055": {"auth": pull_auth},
            "127.0.0.1:5055/private": {"username": "puller", "password": WRONG_PULL_PASSWORD},
        }}),
    )];
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"},
        "spec": {"containers": [{"name": "c", "image": PRIVATE_IMAGE}]},
    }))
    .unwrap();
    let container = &pod.spec.as_ref().unwrap().containers[0];
    images
        .ensure_image_exists(&pod, container, None, &secrets)
        .await
        .unwrap();
    assert_eq!(
        fake.pulls().len(),
        2,
        "the wrong password first, then the right one"
    );
    let keyring = kubelet::credentialprovider::secrets::make_docker_keyring(&secrets).unwrap();
    let creds = keyring.lookup("127.0.0.1:5055/private/app");
    tracing::debug!(?keyring, ?creds, "pull secret keyring");
    let malformed = [docker_secret(
        "broken",
        json!({"auths": {"127.0.0.1:5055": {"auth": MALFORMED_AUTH}}}),
    )];
    let err = images
        .ensure_image_exists(&pod, container, None, &malformed)
        .await
        .unwrap_err();
    assert!(err.message.contains("ns/broken"), "{err}");
    tracing::warn!(error = %err, "malformed pull secret");
    cri.shutdown().await;

    let logs = capture.text();
    // Hundreds of lines from every layer, so a leak anywhere would show.
    assert!(logs.lines().count() > 100, "{logs}");
    // The capture works: our CRI client and the HTTP stack did log at TRACE.
    assert!(logs.contains("CRI call"), "nothing captured:\n{logs}");
    assert!(logs.contains("granted"), "{logs}");
    assert!(logs.contains("<redacted, "), "{logs}");
    for secret in [
        REGISTRY_PASSWORD,
        REGISTRY_AUTH,
        IDENTITY_TOKEN,
        REGISTRY_TOKEN,
        BEARER,
        PULL_SECRET_PASSWORD,
        WRONG_PULL_PASSWORD,
        pull_auth.as_str(),
        MALFORMED_AUTH.trim_end_matches('!'),
        grant.token.as_str(),
        key_data.as_str(),
        // A chunk of the key: a partial print must not pass either.
        &key_data[key_data.len() / 2..key_data.len() / 2 + 24],
    ] {
        assert!(
            !logs.contains(secret),
            "secret {secret:?} found in the logs:\n{logs}"
        );
    }
}
