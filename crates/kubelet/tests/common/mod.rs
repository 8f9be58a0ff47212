//! Shared set-up of the kubelet library's integration tests: the in-repo fake API server with
//! its kubeconfig in a temporary directory and a kubelet API client built from that kubeconfig
//! exactly as `--kubeconfig` builds one; `agent`: the fake-runtime agent helpers.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod agent;

use fake_apiserver::{FakeApiServer, Options};
use kubelet::apiclient::{ClientSettings, client_from_kubeconfig};

/// A running fake API server and a client of it; the directory holds the kubeconfig.
pub struct ApiFixture {
    pub dir: tempfile::TempDir,
    pub server: FakeApiServer,
    pub client: kube::Client,
}

/// Starts the fake API server with `options` (its kubeconfig path is set here).
pub async fn api_fixture(options: Options) -> ApiFixture {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeApiServer::start(Options {
        kubeconfig_path: Some(dir.path().join("kubeconfig")),
        ..options
    })
    .await
    .expect("the fake API server starts");
    let client = client_from_kubeconfig(&server.kubeconfig_path, &ClientSettings::default())
        .await
        .unwrap();
    ApiFixture {
        dir,
        server,
        client,
    }
}
