//! API-mode helpers for the containerd end-to-end tests: the fake API server fixture with a
//! kubelet client of it, and polling helpers that read the fixture's store directly.

use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Options};
use serde_json::Value;

use super::{Kubelet, tail};

/// The fake API server (kubeconfig in `dir`) and a client of it.
pub async fn fixture(dir: &std::path::Path) -> (FakeApiServer, kube::Client) {
    let server = FakeApiServer::start(Options {
        kubeconfig_path: Some(dir.join("kubeconfig")),
        ..Options::default()
    })
    .await
    .expect("start the fake API server");
    let client = kubelet::apiclient::client_from_kubeconfig(
        &server.kubeconfig_path,
        &kubelet::apiclient::ClientSettings::default(),
    )
    .await
    .unwrap();
    (server, client)
}

/// Polls `f` every 200 ms until it returns `Some` or `timeout` passes.
pub async fn wait_for<T, F, Fut>(k: &Kubelet, timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}\nkubelet log tail:\n{}",
            tail(&k.log_text(), 80)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The `status` of pod `name` in namespace `default`, if it exists.
pub fn api_status(server: &FakeApiServer, name: &str) -> Option<Value> {
    server
        .get("pods", "default", name)
        .map(|p| p["status"].clone())
}

/// The status of pod `name` once it is Running with a pod IP, a running first container and
/// Ready=True.
pub fn running_in_api(server: &FakeApiServer, name: &str) -> Option<Value> {
    let st = api_status(server, name)?;
    let running = st["phase"] == "Running"
        && st["podIP"].is_string()
        && st["containerStatuses"][0]["state"]["running"].is_object()
        && st["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
    running.then_some(st)
}
