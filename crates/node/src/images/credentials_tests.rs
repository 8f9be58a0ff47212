//! The image manager with credentials: pull secrets and plugins reach the runtime's
//! `PullImage` as `AuthConfig`s, tried in turn (fake runtime that requires credentials).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rkubelet_cri::fake::FakeRuntime;
use serde_json::json;

use super::*;
use crate::events::CollectingRecorder;

const IMAGE: &str = "127.0.0.1:5055/private/app:1";
const NORMALIZED: &str = "127.0.0.1:5055/private/app:1";
const DENIED: &str = "failed to pull and unpack image \"127.0.0.1:5055/private/app:1\": failed to resolve reference \"127.0.0.1:5055/private/app:1\": pulling from host 127.0.0.1:5055 failed with status code [manifests 1]: 401 Unauthorized";

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "prod", "uid": "uid-1"},
        "spec": {"containers": [{"name": "c"}]},
    }))
    .unwrap()
}

fn container(image: &str, policy: &str) -> Container {
    Container {
        name: "c".to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: Some(policy.to_owned()),
        ..Default::default()
    }
}

fn pull_secret(name: &str, auths: serde_json::Value) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("prod".into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        data: Some(BTreeMap::from([(
            ".dockerconfigjson".to_owned(),
            ByteString(json!({ "auths": auths }).to_string().into_bytes()),
        )])),
        ..Default::default()
    }
}

fn setup() -> (Arc<FakeRuntime>, CollectingRecorder, ImageManager) {
    let rt = Arc::new(FakeRuntime::new());
    rt.require_pull_credentials(IMAGE, "alice", "right-pw");
    let events = CollectingRecorder::default();
    let manager = ImageManager::new(rt.clone(), Arc::new(events.clone()), true, None);
    (rt, events, manager)
}

fn tried(rt: &FakeRuntime) -> Vec<Option<(String, String)>> {
    rt.pulls()
        .into_iter()
        .map(|(image, auth)| {
            assert_eq!(image, NORMALIZED);
            auth.map(|a| (a.username, a.password))
        })
        .collect()
}

fn cred(u: &str, p: &str) -> Option<(String, String)> {
    Some((u.to_owned(), p.to_owned()))
}

#[tokio::test(start_paused = true)]
async fn each_matching_credential_is_tried_most_specific_first() {
    let (rt, events, manager) = setup();
    let secrets = [
        pull_secret(
            "host",
            json!({"127.0.0.1:5055": {"username": "alice", "password": "right-pw"}}),
        ),
        pull_secret(
            "team",
            json!({
                "http://127.0.0.1:5055/private": {"username": "alice", "password": "stale-pw"},
                "other.io": {"username": "nobody", "password": "x"},
            }),
        ),
    ];
    let id = manager
        .ensure_image_exists(&pod(), &container(IMAGE, "Always"), None, &secrets)
        .await
        .unwrap();
    assert!(id.starts_with("sha256:"));
    assert_eq!(
        tried(&rt),
        [cred("alice", "stale-pw"), cred("alice", "right-pw")]
    );
    assert!(events.events().iter().any(|e| e.reason == "Pulled"));
}

#[tokio::test(start_paused = true)]
async fn no_matching_credential_pulls_anonymously_and_fails_as_the_runtime_says() {
    let (rt, events, manager) = setup();
    let secrets = [pull_secret(
        "elsewhere",
        json!({"quay.io": {"username": "a", "password": "b"}}),
    )];
    let err = manager
        .ensure_image_exists(&pod(), &container(IMAGE, "IfNotPresent"), None, &secrets)
        .await
        .unwrap_err();
    assert_eq!(err.reason, ImageErrorReason::ErrImagePull);
    assert_eq!(err.message, DENIED);
    assert_eq!(tried(&rt), [None]);
    let failed = events.with_reason("Failed");
    assert_eq!(
        failed[0].message,
        format!("Failed to pull image {IMAGE:?}: {DENIED}")
    );
}

#[tokio::test(start_paused = true)]
async fn every_credential_failing_gives_the_runtime_errors_once_each() {
    let (rt, _events, manager) = setup();
    let secrets = [pull_secret(
        "wrong",
        json!({
            "127.0.0.1:5055": {"username": "alice", "password": "wrong-1"},
            "127.0.0.1:5055/private/app": {"username": "alice", "password": "wrong-2"},
        }),
    )];
    let err = manager
        .ensure_image_exists(&pod(), &container(IMAGE, "Always"), None, &secrets)
        .await
        .unwrap_err();
    // Both attempts failed the same way: Go's aggregate shows that message once.
    assert_eq!(err.message, DENIED);
    assert_eq!(
        tried(&rt),
        [cred("alice", "wrong-2"), cred("alice", "wrong-1")]
    );
    // Then back-off, as for any pull failure.
    let again = manager
        .ensure_image_exists(&pod(), &container(IMAGE, "Always"), None, &secrets)
        .await
        .unwrap_err();
    assert_eq!(again.reason, ImageErrorReason::ImagePullBackOff);
    assert_eq!(rt.pulls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_malformed_pull_secret_fails_the_container_naming_the_secret() {
    let (rt, events, manager) = setup();
    let mut bad = pull_secret("broken", json!({}));
    bad.data = Some(BTreeMap::from([(
        ".dockerconfigjson".to_owned(),
        ByteString(br#"{"auths": {"127.0.0.1:5055": {"auth": "right-pw!"}}}"#.to_vec()),
    )]));
    let want = "couldn't parse image pull secret prod/broken (key \".dockerconfigjson\"): auths[\"127.0.0.1:5055\"].auth: illegal base64 data at input byte 5";
    for _ in 0..2 {
        let err = manager
            .ensure_image_exists(
                &pod(),
                &container(IMAGE, "Always"),
                None,
                std::slice::from_ref(&bad),
            )
            .await
            .unwrap_err();
        // Not a pull failure: no back-off, the same error on every sync (as upstream).
        assert_eq!(err.reason, ImageErrorReason::ErrImagePull);
        assert_eq!(err.message, want);
        assert!(!err.message.contains("right-pw"));
    }
    assert!(rt.pulls().is_empty());
    assert_eq!(
        events.with_reason("Failed")[0].message,
        format!("Error: {want}")
    );
    // Upstream reads the secrets before using a present image too.
    rt.add_image(IMAGE);
    let err = manager
        .ensure_image_exists(&pod(), &container(IMAGE, "IfNotPresent"), None, &[bad])
        .await
        .unwrap_err();
    assert_eq!(err.message, want);
}

#[tokio::test]
async fn plugin_credentials_come_after_pull_secret_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let response = json!({
        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
        "kind": "CredentialProviderResponse",
        "cacheKeyType": "Registry",
        "auth": {"127.0.0.1:5055": {"username": "alice", "password": "right-pw"}},
    });
    std::fs::write(dir.path().join("response.json"), response.to_string()).unwrap();
    let script = bin.join("registry-login");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat >/dev/null\ncat {}/response.json\n",
            dir.path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.path().join("providers.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: registry-login\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [\"127.0.0.1:5055\"]\n  defaultCacheDuration: 1m\n",
    )
    .unwrap();
    let providers = Arc::new(CredentialProviders::load(&config, &bin).unwrap());

    let (rt, _events, manager) = setup();
    let manager = manager.with_credential_providers(providers);
    let secrets = [pull_secret(
        "stale",
        json!({"127.0.0.1:5055": {"username": "alice", "password": "stale-pw"}}),
    )];
    manager
        .ensure_image_exists(&pod(), &container(IMAGE, "Always"), None, &secrets)
        .await
        .unwrap();
    assert_eq!(
        tried(&rt),
        [cred("alice", "stale-pw"), cred("alice", "right-pw")]
    );
    // A plugin alone is enough.
    manager
        .ensure_image_exists(&pod(), &container(IMAGE, "Always"), None, &[])
        .await
        .unwrap();
    assert_eq!(tried(&rt)[2], cred("alice", "right-pw"));
}

#[test]
fn repository_to_pull_normalizes_as_upstream() {
    let cases = [
        ("busybox", "docker.io/library/busybox"),
        ("busybox:1.36", "docker.io/library/busybox"),
        ("team/app:1", "docker.io/team/app"),
        ("index.docker.io/team/app", "docker.io/team/app"),
        (
            "127.0.0.1:5055/private/busybox:1",
            "127.0.0.1:5055/private/busybox",
        ),
        ("localhost/app", "localhost/app"),
        ("[fd00::1]:5000/app:1", "[fd00::1]:5000/app"),
        (
            concat!(
                "quay.io/a/b@sha256:",
                "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
            ),
            "quay.io/a/b",
        ),
    ];
    for (image, want) in cases {
        assert_eq!(repository_to_pull(image).as_deref(), Ok(want), "{image}");
    }
    assert!(repository_to_pull("Bad").is_err());
}

/// A node-wide docker config under a temp root dir (working and home dirs left out).
fn node_config(root: &std::path::Path, auths: serde_json::Value) -> Arc<NodeDockerConfig> {
    std::fs::write(
        root.join("config.json"),
        json!({ "auths": auths }).to_string(),
    )
    .unwrap();
    Arc::new(NodeDockerConfig::new(
        crate::credentialprovider::node_config::SearchPaths {
            config_json: vec![root.join("config.json")],
            dockercfg: vec![root.join(".dockercfg")],
        },
    ))
}

#[tokio::test]
async fn the_node_docker_config_alone_gives_the_pull_its_credentials() {
    let root = tempfile::tempdir().unwrap();
    let (rt, _events, manager) = setup();
    let manager = manager.with_node_docker_config(node_config(
        root.path(),
        json!({"127.0.0.1:5055": {"auth": "YWxpY2U6cmlnaHQtcHc="}}),
    ));
    manager
        .ensure_image_exists(&pod(), &container(IMAGE, "Always"), None, &[])
        .await
        .unwrap();
    assert_eq!(tried(&rt), [cred("alice", "right-pw")]);
}

#[tokio::test]
async fn node_docker_config_comes_after_pull_secrets_and_before_plugins() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("registry-login");
    let response = json!({
        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
        "kind": "CredentialProviderResponse",
        "cacheKeyType": "Registry",
        "auth": {"127.0.0.1:5055": {"username": "alice", "password": "right-pw"}},
    });
    std::fs::write(
        &script,
        format!("#!/bin/sh\ncat >/dev/null\necho '{response}'\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.path().join("providers.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: registry-login\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [\"127.0.0.1:5055\"]\n  defaultCacheDuration: 1m\n",
    )
    .unwrap();
    let providers = Arc::new(CredentialProviders::load(&config, &bin).unwrap());

    let (rt, _events, manager) = setup();
    let manager = manager
        .with_credential_providers(providers)
        .with_node_docker_config(node_config(
            dir.path(),
            json!({"127.0.0.1:5055": {"username": "alice", "password": "node-pw"}}),
        ));
    let secrets = [pull_secret(
        "stale",
        json!({"127.0.0.1:5055": {"username": "alice", "password": "stale-pw"}}),
    )];
    manager
        .ensure_image_exists(&pod(), &container(IMAGE, "Always"), None, &secrets)
        .await
        .unwrap();
    // Upstream: MakeDockerKeyring(secrets, Union{nodeKeyring, plugins}).
    assert_eq!(
        tried(&rt),
        [
            cred("alice", "stale-pw"),
            cred("alice", "node-pw"),
            cred("alice", "right-pw")
        ]
    );
}
