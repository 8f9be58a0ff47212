//! Shared set-up of the kubelet library's integration tests: the in-repo fake API server with
//! its kubeconfig in a temporary directory and a kubelet API client built from that kubeconfig
//! exactly as `--kubeconfig` builds one; `agent`: the fake-runtime agent helpers; `dbus`: a
//! private D-Bus bus; [`LogCapture`]: what the kubelet logged, for a test to read.

#![allow(dead_code)]

pub mod agent;
pub mod dbus;

use std::io::Write;
use std::process::{Command, Stdio};

use fake_apiserver::{FakeApiServer, Options};
use kubelet::apiclient::{ClientSettings, client_from_kubeconfig};

/// A tracing `MakeWriter` appending every log line to one shared buffer (clones share it).
#[derive(Clone, Default)]
pub struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    /// Everything logged so far (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

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

/// Lint findings promtool reports for names upstream itself uses (kept for compatibility).
const ACCEPTED_LINT: &[&str] = &["kubelet_evictions counter metrics should have \"_total\" suffix"];

/// Runs `promtool check metrics` on `text`; fails on a parse error or any lint finding not in
/// `ACCEPTED_LINT`. Fails (never skips) when promtool is missing.
pub fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool not found: install the Debian package `prometheus` (dev/runtime.sh up does)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.code() {
        Some(0) => {}
        // 3: lint problems only; each must be an accepted one.
        Some(3) => {
            for line in report.lines().filter(|l| !l.trim().is_empty()) {
                assert!(
                    ACCEPTED_LINT.contains(&line.trim()),
                    "promtool lint problem {line:?}\nfull report:\n{report}\ntext:\n{text}"
                );
            }
        }
        code => panic!("promtool check metrics failed ({code:?}):\n{report}\ntext:\n{text}"),
    }
}
