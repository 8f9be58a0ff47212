//! Private images, end to end: the `rkubelet` binary in API-server mode pulls from the
//! password-protected registry `dev/registry.sh up` runs on 127.0.0.1 (plain HTTP through a
//! containerd `hosts.toml`), with the real containerd. An anonymous pull is refused with
//! containerd's 401 message (ErrImagePull), a wrong password in the pod's
//! `kubernetes.io/dockerconfigjson` pull secret is refused the same way, the right one pulls
//! and runs the pod, and neither password ever reaches the kubelet's log or its events. A
//! credential provider plugin (`--image-credential-provider-config`/`-bin-dir`), answering
//! without credentials until the test enables it, then pulls for a pod without a secret.
//!
//! The whole scenario is one test: it removes the registry image from containerd first, so the
//! pull really goes to the registry, and parallel tests would race on that image.

use crate::common;

use std::time::Duration;

use base64::Engine;
use common::api::{api_status, fixture, running_in_api, wait_for};
use common::{Kubelet, NODE, cri};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use rkubelet_cri::ImageService;
use rkubelet_cri::api::{ImageSpec, ImageStatusRequest, RemoveImageRequest};
use serde_json::{Value, json};

/// `RKUBELET_REGISTRY*` from `dev/registry.sh env`; the test fails (never skips) without them.
fn registry() -> (String, String, String) {
    let var = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("{k} is not set: run ./dev/test.sh, or `dev/registry.sh up && eval $(dev/registry.sh env)`")
        })
    };
    (
        var("RKUBELET_REGISTRY"),
        var("RKUBELET_REGISTRY_USER"),
        var("RKUBELET_REGISTRY_PASSWORD"),
    )
}

fn pull_secret(name: &str, registry: &str, user: &str, password: &str) -> Value {
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    let auth = b64(format!("{user}:{password}").as_bytes());
    let config = json!({"auths": {format!("http://{registry}"): {"auth": auth}}});
    json!({
        "metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": b64(config.to_string().as_bytes())},
    })
}

fn pod(name: &str, image: &str, secret: Option<&str>) -> Pod {
    let secrets: Vec<Value> = secret.map(|s| json!({"name": s})).into_iter().collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "imagePullSecrets": secrets,
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "Always",
                "command": ["sleep", "3600"],
            }],
        },
    }))
    .unwrap()
}

/// The container's waiting message once the pull has failed at least once.
fn pull_failure(server: &fake_apiserver::FakeApiServer, name: &str) -> Option<String> {
    let st = api_status(server, name)?;
    let waiting = &st["containerStatuses"][0]["state"]["waiting"];
    match waiting["reason"].as_str()? {
        "ErrImagePull" | "ImagePullBackOff" => Some(waiting["message"].as_str()?.to_owned()),
        _ => None,
    }
}

async fn image_present(image: &str) -> bool {
    cri()
        .await
        .image_status(ImageStatusRequest {
            image: Some(ImageSpec {
                image: image.to_owned(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .unwrap()
        .image
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_registry_needs_the_pods_pull_secret() {
    let (registry, user, password) = registry();
    let image = format!("{registry}/private/app:1");
    let wrong_password = "not-the-password-Zq9";

    // The pull must go to the registry: no local copy.
    cri()
        .await
        .remove_image(RemoveImageRequest {
            image: Some(ImageSpec {
                image: image.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    assert!(!image_present(&image).await, "{image} still in containerd");
    // RemoveImage deletes every name of the image: the private image must be its own image,
    // or removing it takes the busybox the other tests run with.
    assert!(
        image_present("docker.io/library/busybox:latest").await,
        "removing {image} removed docker.io/library/busybox:latest too"
    );

    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    server
        .create(
            "secrets",
            "default",
            pull_secret("regcred", &registry, &user, &password),
        )
        .unwrap();
    server
        .create(
            "secrets",
            "default",
            pull_secret("wrongcred", &registry, &user, wrong_password),
        )
        .unwrap();
    server
        .create(
            "serviceaccounts",
            "default",
            json!({"metadata": {"name": "default"}}),
        )
        .unwrap();
    // A plugin that gives the registry's credentials once `enabled` exists (never cached).
    let plugin_dir = k.dir.path().join("plugins");
    std::fs::create_dir(&plugin_dir).unwrap();
    let answer = |auth: Value| {
        json!({
            "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
            "kind": "CredentialProviderResponse",
            "cacheKeyType": "Registry",
            "cacheDuration": "0s",
            "auth": auth,
        })
        .to_string()
    };
    let enabled = k.dir.path().join("enabled");
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\nif [ -f {} ]; then\ncat <<'EOF'\n{}\nEOF\nelse\ncat <<'EOF'\n{}\nEOF\nfi\n",
        enabled.display(),
        answer(json!({registry.clone(): {"username": user, "password": password}})),
        answer(json!({})),
    );
    let plugin = plugin_dir.join("registry-login");
    std::fs::write(&plugin, script).unwrap();
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let provider_config = k.dir.path().join("credential-providers.yaml");
    std::fs::write(
        &provider_config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: registry-login\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [\"{registry}\"]\n  defaultCacheDuration: 10m\n"
        ),
    )
    .unwrap();
    // The harness runs it at `--v 4` with the kubelet crate at debug level.
    k.extra_args = vec![
        "--kubeconfig".into(),
        server.kubeconfig_path.clone().into(),
        "--image-credential-provider-config".into(),
        provider_config.into(),
        "--image-credential-provider-bin-dir".into(),
        plugin_dir.into(),
    ];
    k.start();

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("anonymous", &image, None))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("wrong-password", &image, Some("wrongcred")),
    )
    .await
    .unwrap();

    // containerd's words for a 401 from the registry, as the Go kubelet shows them (the
    // `rpc error: code = Unknown` prefix stripped).
    let denied = format!(
        "failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": pulling from host {registry} failed with status code [manifests 1]: 401 Unauthorized"
    );
    for name in ["anonymous", "wrong-password"] {
        let msg = wait_for(
            &k,
            Duration::from_secs(60),
            &format!("pod {name} failing to pull"),
            || async { pull_failure(&server, name) },
        )
        .await;
        assert!(
            msg == denied
                || msg == format!("Back-off pulling image {image:?}: ErrImagePull: {denied}"),
            "{name}: {msg}\nwant {denied}"
        );
    }
    assert!(!image_present(&image).await);

    pods.create(
        &PostParams::default(),
        &pod("with-secret", &image, Some("regcred")),
    )
    .await
    .unwrap();
    wait_for(
        &k,
        Duration::from_secs(90),
        "pod with-secret Running in the API",
        || async { running_in_api(&server, "with-secret") },
    )
    .await;
    assert!(image_present(&image).await);
    // Still refused to the others (policy Always: every start pulls with its own credentials).
    assert!(pull_failure(&server, "anonymous").is_some());

    // The plugin's credentials: a pod without any pull secret.
    std::fs::write(&enabled, "").unwrap();
    pods.create(&PostParams::default(), &pod("via-plugin", &image, None))
        .await
        .unwrap();
    wait_for(
        &k,
        Duration::from_secs(90),
        "pod via-plugin Running in the API",
        || async { running_in_api(&server, "via-plugin") },
    )
    .await;

    // No credential in the log or the events: not the passwords, not the base64 `auth`.
    let log = k.log_text();
    let events = serde_json::to_string(&server.list("events", Some("default"))).unwrap();
    assert!(
        events.contains("Failed to pull image"),
        "the failure events were posted: {events}"
    );
    let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
    for secret in [
        password.clone(),
        wrong_password.to_owned(),
        b64(format!("{user}:{password}")),
        b64(format!("{user}:{wrong_password}")),
    ] {
        assert!(
            !log.contains(&secret),
            "a credential reached the kubelet log"
        );
        assert!(!events.contains(&secret), "a credential reached an event");
    }
    k.stop();
}
