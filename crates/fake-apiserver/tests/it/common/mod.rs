//! Shared helpers of the kubectl black-box suites: an in-process fake API server with its own
//! kubeconfig and HOME, and kubectl invocations with timeouts; one raw HTTP/1 JSON request for
//! the suites that talk to the server without kubectl.

#![allow(dead_code)]

use fake_apiserver::{FakeApiServer, Options};
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

pub const KUBECTL: &str = "/usr/bin/kubectl";

pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("kubectl output is not JSON ({e}): {}", self.stdout))
    }
}

pub async fn start(opts: Options) -> (FakeApiServer, tempfile::TempDir) {
    assert!(
        Path::new(KUBECTL).exists(),
        "{KUBECTL} is required for the kubectl black-box tests but is missing"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        kubeconfig_path: Some(dir.path().join("kubeconfig")),
        bookmark_interval: Duration::from_millis(200),
        ..opts
    };
    let server = FakeApiServer::start(opts)
        .await
        .expect("start fake apiserver");
    (server, dir)
}

pub async fn kubectl_in(server: &FakeApiServer, stdin: Option<&str>, args: &[&str]) -> Out {
    kubectl_with(server, &server.kubeconfig_path, stdin, args).await
}

/// kubectl with another kubeconfig (e.g. a bootstrap token or an issued certificate) against
/// `server`.
pub async fn kubectl_with(
    server: &FakeApiServer,
    kubeconfig: &Path,
    stdin: Option<&str>,
    args: &[&str],
) -> Out {
    let mut cmd = Command::new(KUBECTL);
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        // Discovery cache per server, not shared with other runs.
        .env(
            "HOME",
            server.kubeconfig_path.parent().expect("kubeconfig dir"),
        )
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn kubectl");
    if let Some(input) = stdin {
        use tokio::io::AsyncWriteExt;
        let mut si = child.stdin.take().expect("stdin");
        si.write_all(input.as_bytes()).await.expect("write stdin");
        drop(si);
    }
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
        .expect("kubectl output");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub async fn kubectl(server: &FakeApiServer, args: &[&str]) -> Out {
    kubectl_in(server, None, args).await
}

pub async fn ok(server: &FakeApiServer, args: &[&str]) -> Out {
    let out = kubectl(server, args).await;
    assert!(
        out.ok,
        "kubectl {args:?} failed: {}{}",
        out.stdout, out.stderr
    );
    out
}

pub async fn ok_stdin(server: &FakeApiServer, stdin: &str, args: &[&str]) -> Out {
    let out = kubectl_in(server, Some(stdin), args).await;
    assert!(
        out.ok,
        "kubectl {args:?} failed: {}{}",
        out.stdout, out.stderr
    );
    out
}

/// An HTTP/1 connection to the server (plain or TLS).
pub type Conn = hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>;

/// Sends one request with a JSON (or patch) body of content type `ct` and an optional bearer
/// token; the status and the body parsed as JSON (`Null` when it is not JSON).
pub async fn send_json(
    conn: &mut Conn,
    method: &str,
    path: &str,
    ct: &str,
    bearer: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    use http_body_util::BodyExt as _;
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", ct);
    if let Some(t) = bearer {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let resp = conn
        .send_request(
            req.body(http_body_util::Full::new(bytes::Bytes::from(body)))
                .expect("request"),
        )
        .await
        .expect("response");
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Stops a `fake-apiserver` binary the test started with SIGTERM and returns its exit status
/// (it must exit within 10 s).
pub async fn terminate(child: &mut tokio::process::Child) -> std::process::ExitStatus {
    let pid = child.id().expect("pid").to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .expect("kill");
    assert!(killed.success());
    tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits after SIGTERM")
        .expect("wait")
}
