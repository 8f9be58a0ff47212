//! API pods with fields this kubelet does not know, as a newer API server sends them: the
//! fake API server stores the raw object, the agent's API source decodes it, and admission
//! rejects the pod (`Failed`, reason `UnknownPodField`, the field's path in the message)
//! without starting anything, while a pod with only an unknown metadata field runs.

use crate::common;

use std::time::Duration;

use fake_apiserver::Options;
use kubelet::agent::{Agent, AgentConfig};
use rkubelet_cri::fake::FakeRuntime;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NODE: &str = "unknown-fields-node";
const IMAGE: &str = "docker.io/library/busybox:latest";

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "containers": [{
                "name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "env": [{"name": "A", "value": "a"}, {"name": "B", "valueFrom": {}}],
            }],
            "volumes": [{"name": "v", "projected": {"sources": [{"configMap": {"name": "cm"}}]}}],
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_pods_with_unknown_fields_are_rejected_naming_the_field() {
    let common::ApiFixture {
        dir,
        server,
        client,
    } = common::api_fixture(Options::default()).await;
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let cfg = AgentConfig::for_tests(dir.path(), NODE);
    let agent = Agent::start(
        cfg,
        common::agent::api_deps(&fake, &client),
        CancellationToken::new(),
    )
    .await
    .unwrap();

    let mut cases = Vec::new();
    let mut p = pod("file-key-ref");
    p["spec"]["containers"][0]["env"][1]["valueFrom"]["fileKeyRef"] =
        json!({"path": "x.env", "volumeName": "v", "key": "K"});
    cases.push((p, "spec.containers[0].env[1].valueFrom.fileKeyRef"));
    let mut p = pod("pod-certificate");
    p["spec"]["volumes"][0]["projected"]["sources"][0]["podCertificate"] =
        json!({"signerName": "example.com/s", "keyType": "ED25519"});
    cases.push((p, "spec.volumes[0].projected.sources[0].podCertificate"));
    let mut p = pod("restart-rules");
    p["spec"]["containers"][0]["restartPolicyRules"] =
        json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]);
    cases.push((p, "spec.containers[0].restartPolicyRules"));
    let mut p = pod("hostname-override");
    p["spec"]["hostnameOverride"] = json!("other");
    cases.push((p, "spec.hostnameOverride"));
    let mut fine = pod("unknown-metadata");
    fine["metadata"]["newMetadataField"] = json!("x");
    // No references to objects that do not exist: this one must run.
    fine["spec"].as_object_mut().unwrap().remove("volumes");
    fine["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("env");
    for (p, _) in &cases {
        let stored = server.create("pods", "default", p.clone()).unwrap();
        // The fake API server keeps the field, as a newer real one would send it.
        assert_ne!(stored["spec"], pod("x")["spec"], "{stored}");
    }
    server.create("pods", "default", fine).unwrap();

    let deadline = Instant::now() + Duration::from_secs(30);
    for (p, path) in &cases {
        let name = p["metadata"]["name"].as_str().unwrap();
        let status = loop {
            let st = server
                .get("pods", "default", name)
                .map(|p| p["status"].clone())
                .unwrap_or(Value::Null);
            if st["phase"] == "Failed" {
                break st;
            }
            assert!(Instant::now() < deadline, "{name} never Failed: {st}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(status["reason"], "UnknownPodField", "{status}");
        let msg = status["message"].as_str().unwrap();
        assert!(
            msg.starts_with("Pod was rejected: unknown field ") && msg.contains(path),
            "{msg}"
        );
    }
    loop {
        let st = server
            .get("pods", "default", "unknown-metadata")
            .map(|p| p["status"].clone())
            .unwrap_or(Value::Null);
        if st["phase"] == "Running" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "unknown-metadata never Running: {st}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Only the pod without a refused field got a sandbox.
    assert_eq!(fake.sandboxes().len(), 1);
    agent.shutdown().await;
    drop(server);
}
