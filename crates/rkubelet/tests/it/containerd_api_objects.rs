//! API objects in pods, end to end: the `rkubelet` binary in API-server mode against the fake
//! API server, on the real containerd. ConfigMap and Secret volumes and environment variables,
//! a projected volume with a service account token and downward API labels, service-link
//! variables (incl. `KUBERNETES_SERVICE_*`), a ConfigMap update and a label change reaching
//! the mounted files,
//! and a pod whose ConfigMap is missing waiting in ContainerCreating until it appears.

use crate::common;

use std::time::Duration;

use common::api::{fixture, running_in_api, wait_for};
use common::{Kubelet, NODE, exec_in};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const IMAGE: &str = "docker.io/library/busybox:latest";

fn consumer_pod(name: &str, config_map: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "consumer"}},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "volumes": [
                {"name": "cfg", "configMap": {"name": config_map}},
                {"name": "sec", "secret": {"secretName": "app-secret", "defaultMode": 0o400}},
                {"name": "proj", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600, "audience": "vault"}},
                    {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                    {"configMap": {"name": config_map, "items": [{"key": "greeting", "path": "cm/greeting"}]}},
                ]}},
            ],
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "env": [
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": config_map, "key": "greeting"}}},
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "password"}}},
                    {"name": "MISSING", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": true}}},
                ],
                "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": config_map}}],
                "volumeMounts": [
                    {"name": "cfg", "mountPath": "/etc/cfg"},
                    {"name": "sec", "mountPath": "/etc/sec"},
                    {"name": "proj", "mountPath": "/var/run/proj"},
                ],
            }],
        },
    }))
    .unwrap()
}

fn container_id(status: &Value) -> String {
    status["containerStatuses"][0]["containerID"]
        .as_str()
        .expect("a container ID")
        .to_owned()
}

async fn cat(id: &str, path: &str) -> String {
    let (code, out, err) = exec_in(id, &["cat", path]).await;
    assert_eq!(code, 0, "cat {path}: {err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_maps_secrets_tokens_and_service_links_reach_the_container() {
    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    for (plural, ns, obj) in [
        (
            "configmaps",
            "default",
            json!({"metadata": {"name": "app-config"}, "data": {"greeting": "hello", "color": "blue"}}),
        ),
        (
            "secrets",
            "default",
            json!({"metadata": {"name": "app-secret"}, "data": {"password": "czNjcmV0"}}),
        ),
        (
            "serviceaccounts",
            "default",
            json!({"metadata": {"name": "default"}}),
        ),
        (
            "services",
            "default",
            json!({"metadata": {"name": "kubernetes"}, "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}),
        ),
        (
            "services",
            "default",
            json!({"metadata": {"name": "backend-api"}, "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 8080, "protocol": "TCP"}]}}),
        ),
    ] {
        server.create(plural, ns, obj).unwrap();
    }
    k.extra_args = vec!["--kubeconfig".into(), server.kubeconfig_path.clone().into()];
    k.start();

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &consumer_pod("consumer", "app-config"),
    )
    .await
    .unwrap();
    let st = wait_for(
        &k,
        Duration::from_secs(60),
        "pod consumer Running in the API",
        || async { running_in_api(&server, "consumer") },
    )
    .await;
    let id = container_id(&st);

    assert_eq!(cat(&id, "/etc/cfg/greeting").await, "hello");
    assert_eq!(cat(&id, "/etc/cfg/color").await, "blue");
    assert_eq!(cat(&id, "/etc/sec/password").await, "s3cret");
    let (_, mode, _) = exec_in(&id, &["stat", "-L", "-c", "%a", "/etc/sec/password"]).await;
    assert_eq!(mode.trim(), "400");
    let token = cat(&id, "/var/run/proj/token").await;
    assert_eq!(token.split('.').count(), 3, "a JWT-shaped token: {token}");
    assert_eq!(cat(&id, "/var/run/proj/labels").await, "app=\"consumer\"");
    assert_eq!(cat(&id, "/var/run/proj/cm/greeting").await, "hello");

    let (_, env, _) = exec_in(&id, &["env"]).await;
    for want in [
        "GREETING=hello",
        "PASSWORD=s3cret",
        "CFG_greeting=hello",
        "CFG_color=blue",
        "KUBERNETES_SERVICE_HOST=10.96.0.1",
        "KUBERNETES_SERVICE_PORT=443",
        "KUBERNETES_SERVICE_PORT_HTTPS=443",
        "BACKEND_API_SERVICE_HOST=10.96.0.10",
        "BACKEND_API_PORT=tcp://10.96.0.10:8080",
    ] {
        assert!(
            env.lines().any(|l| l == want),
            "{want} missing from the environment:\n{env}"
        );
    }
    assert!(
        !env.contains("MISSING="),
        "optional missing key stays unset"
    );

    // A ConfigMap update reaches the mounted file (not the environment, as upstream).
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.patch(
        "app-config",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"greeting": "bonjour"}})),
    )
    .await
    .unwrap();
    let start = std::time::Instant::now();
    loop {
        let now = cat(&id, "/etc/cfg/greeting").await;
        if now == "bonjour" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "the ConfigMap update never reached the file (still {now:?})\n{}",
            common::tail(&k.log_text(), 60)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(cat(&id, "/var/run/proj/cm/greeting").await, "bonjour");

    // A label change reaches the downward API file.
    pods.patch(
        "consumer",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "web"}}})),
    )
    .await
    .unwrap();
    let start = std::time::Instant::now();
    loop {
        let now = cat(&id, "/var/run/proj/labels").await;
        if now == "app=\"consumer\"\ntier=\"web\"" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "the label change never reached the downward API file (still {now:?})"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // A pod whose ConfigMap does not exist waits (FailedMount), then starts once it appears.
    pods.create(&PostParams::default(), &consumer_pod("late", "late-config"))
        .await
        .unwrap();
    let waiting = wait_for(
        &k,
        Duration::from_secs(30),
        "pod late waiting in ContainerCreating",
        || async {
            let st = common::api::api_status(&server, "late")?;
            let reason = st["containerStatuses"][0]["state"]["waiting"]["reason"].as_str()?;
            (reason == "ContainerCreating").then_some(st)
        },
    )
    .await;
    assert_eq!(waiting["phase"], "Pending", "{waiting}");
    wait_for(
        &k,
        Duration::from_secs(20),
        "a FailedMount event for pod late",
        || async {
            server
                .list("events", Some("default"))
                .into_iter()
                .find(|e| e["involvedObject"]["name"] == "late" && e["reason"] == "FailedMount")
        },
    )
    .await;
    server
        .create(
            "configmaps",
            "default",
            json!({"metadata": {"name": "late-config"}, "data": {"greeting": "finally"}}),
        )
        .unwrap();
    let st = wait_for(
        &k,
        Duration::from_secs(60),
        "pod late Running once its ConfigMap exists",
        || async { running_in_api(&server, "late") },
    )
    .await;
    assert_eq!(
        cat(&container_id(&st), "/etc/cfg/greeting").await,
        "finally"
    );
}
