//! Streaming end to end: the real `/usr/bin/kubectl` (v1.32) → the fake API server's
//! `pods/exec|attach|portforward` proxy → the `rkubelet` binary's `/exec`, `/attach`,
//! `/portForward` → containerd's stream server (`RKUBELET_CRI_ENDPOINT`), plus `kubectl logs`
//! through the API server's log proxy and one direct `/exec` without upgrade headers.
//!
//! What this shows about protocols: kubectl 1.32 first tries a websocket (`v5.channel.k8s.io`
//! for exec/attach, the SPDY-over-websocket tunnel for port-forward). The API server and the
//! kubelet pass it on byte for byte; containerd 1.6's stream server refuses the websocket
//! (403: it knows only the pre-v5 channel protocols) and serves SPDY (`v4.channel.k8s.io`,
//! `portforward.k8s.io`); a websocket port-forward without `port` query parameters is refused
//! by the kubelet itself (400, as upstream). kubectl falls back to SPDY each time. The fake API
//! server's request counters record both attempts (`GET pods/exec` = websocket, `POST
//! pods/exec` = SPDY).

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::api::{fixture, running_in_api, wait_for};
use common::{Kubelet, tail};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const IMAGE: &str = "docker.io/library/busybox:latest";
const KUBECTL: &str = "/usr/bin/kubectl";

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn kubectl_cmd(server: &FakeApiServer, args: &[&str]) -> tokio::process::Command {
    assert!(
        Path::new(KUBECTL).exists(),
        "{KUBECTL} is required by the streaming tests but is missing"
    );
    let mut cmd = tokio::process::Command::new(KUBECTL);
    cmd.arg("--kubeconfig")
        .arg(&server.kubeconfig_path)
        .args(args)
        // A discovery cache of this run only.
        .env("HOME", server.kubeconfig_path.parent().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn kubectl(server: &FakeApiServer, stdin: Option<&str>, args: &[&str]) -> Out {
    let mut cmd = kubectl_cmd(server, args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("spawn kubectl");
    if let Some(input) = stdin {
        let mut si = child.stdin.take().unwrap();
        si.write_all(input.as_bytes()).await.unwrap();
        drop(si);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
        .unwrap();
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `curl` to the kubelet's HTTPS port with the API server's client certificate.
fn curl_kubelet(k: &Kubelet, cert_dir: &Path, method: &str, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "-X",
            method,
            "-w",
            "\n%{http_code}",
        ])
        .arg("--cacert")
        .arg(k.root().join("pki/kubelet.crt"))
        .arg("--cert")
        .arg(cert_dir.join("client.crt"))
        .arg("--key")
        .arg(cert_dir.join("client.key"))
        .arg(format!("https://127.0.0.1:{}{path}", k.secure_port))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (
        code.trim()
            .parse()
            .unwrap_or_else(|_| panic!("curl {path}: {text}")),
        body.to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_attach_port_forward_and_logs_through_the_api_server() {
    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    // The kubelet trusts the API server's client certificate (its CA signs it).
    let certs = k.dir.path().join("apiserver-pki");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::write(certs.join("ca.crt"), server.ca_pem.clone().unwrap()).unwrap();
    let (cert, key) = server.client_cert.clone().unwrap();
    std::fs::write(certs.join("client.crt"), cert).unwrap();
    std::fs::write(certs.join("client.key"), key).unwrap();
    let cfg_path = k.dir.path().join("config.yaml");
    let cfg = std::fs::read_to_string(&cfg_path).unwrap().replace(
        "authentication:\n",
        &format!(
            "authentication:\n  x509:\n    clientCAFile: {}\n",
            certs.join("ca.crt").display()
        ),
    );
    std::fs::write(&cfg_path, cfg).unwrap();
    k.extra_args = vec![
        "--kubeconfig".into(),
        server.kubeconfig_path.clone().into(),
        // The API server reaches the kubelet at the node's InternalIP.
        "--node-ip=127.0.0.1".into(),
    ];
    k.start();

    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "nodeName": common::NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                 "command": ["sh", "-c", "echo started; i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done"]},
                {"name": "www", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                 "command": ["sh", "-c", "mkdir -p /www && echo hello-from-pf > /www/index.html && exec httpd -f -p 8080 -h /www"]},
            ],
        },
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_for(&k, Duration::from_secs(90), "pod web Running", || async {
        let st = running_in_api(&server, "web")?;
        let all = st["containerStatuses"]
            .as_array()?
            .iter()
            .all(|c| c["state"]["running"].is_object());
        all.then_some(())
    })
    .await;
    let fail = |what: &str, out: &Out| {
        panic!(
            "{what}: code {:?}\nstdout: {}\nstderr: {}\nkubelet log tail:\n{}",
            out.code,
            out.stdout,
            out.stderr,
            tail(&k.log_text(), 40)
        )
    };

    // exec: output, stdin, exit code.
    let out = kubectl(
        &server,
        None,
        &["exec", "web", "-c", "main", "--", "echo", "hi"],
    )
    .await;
    if out.code != Some(0) || out.stdout != "hi\n" {
        fail("kubectl exec echo hi", &out);
    }
    let counts = server.request_counts();
    assert!(
        counts.get("GET pods/exec").copied().unwrap_or(0) >= 1,
        "kubectl tried a websocket first: {counts:?}"
    );
    assert!(
        counts.get("POST pods/exec").copied().unwrap_or(0) >= 1,
        "kubectl fell back to SPDY: {counts:?}"
    );
    let out = kubectl(
        &server,
        Some("line one\nline two\n"),
        &["exec", "-i", "web", "-c", "main", "--", "cat"],
    )
    .await;
    if out.code != Some(0) || out.stdout != "line one\nline two\n" {
        fail("kubectl exec -i cat", &out);
    }
    let out = kubectl(
        &server,
        None,
        &[
            "exec",
            "web",
            "-c",
            "main",
            "--",
            "sh",
            "-c",
            "echo to-err >&2; exit 3",
        ],
    )
    .await;
    if out.code != Some(3) || !out.stderr.contains("to-err") {
        fail("kubectl exec exit 3", &out);
    }
    let out = kubectl(&server, None, &["exec", "web", "-c", "nope", "--", "true"]).await;
    if out.code == Some(0)
        || !out
            .stderr
            .contains("container nope is not valid for pod web")
    {
        fail("kubectl exec into a missing container", &out);
    }

    // logs through the API server's log proxy.
    let out = kubectl(&server, None, &["logs", "web", "-c", "main"]).await;
    if out.code != Some(0) || !out.stdout.starts_with("started\ntick 1\n") {
        fail("kubectl logs", &out);
    }

    // attach: the running process's output.
    let mut attach = kubectl_cmd(&server, &["attach", "web", "-c", "main"])
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn kubectl attach");
    let mut lines = BufReader::new(attach.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(l)) = lines.next_line().await {
            if l.starts_with("tick ") {
                return Some(l);
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    attach.kill().await.unwrap();
    let attach_out = attach.wait_with_output().await.unwrap();
    assert!(
        line.is_some(),
        "kubectl attach printed no tick: {}\n{}",
        String::from_utf8_lossy(&attach_out.stderr),
        tail(&k.log_text(), 40)
    );

    // port-forward to httpd in container www.
    let local = common::free_port();
    let mut pf = kubectl_cmd(
        &server,
        &["port-forward", "pod/web", &format!("{local}:8080")],
    )
    .stdin(Stdio::null())
    .spawn()
    .expect("spawn kubectl port-forward");
    let mut pf_out = BufReader::new(pf.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(l)) = pf_out.next_line().await {
            if l.contains("Forwarding from 127.0.0.1") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(ready, "kubectl port-forward did not start");
    let mut page = String::new();
    for _ in 0..2 {
        // Two connections over one forwarding session.
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", local))
            .await
            .unwrap();
        s.write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        page.clear();
        tokio::time::timeout(Duration::from_secs(20), s.read_to_string(&mut page))
            .await
            .expect("forwarded response in time")
            .unwrap();
        assert!(
            page.starts_with("HTTP/1.") && page.contains("hello-from-pf"),
            "{page}\n{}",
            tail(&k.log_text(), 40)
        );
    }
    pf.kill().await.unwrap();
    // kubectl tried its websocket tunnel first (GET); the kubelet refuses a websocket
    // port-forward without `port` query parameters with 400, as upstream, and kubectl fell
    // back to SPDY (POST).
    let counts = server.request_counts();
    assert!(
        counts.get("GET pods/portforward").copied().unwrap_or(0) >= 1,
        "{counts:?}"
    );
    assert!(
        counts.get("POST pods/portforward").copied().unwrap_or(0) >= 1,
        "{counts:?}"
    );

    // Directly at the kubelet without upgrade headers: upstream's proxy error.
    let (code, body) = curl_kubelet(
        &k,
        &certs,
        "POST",
        "/exec/default/web/main?command=ls&output=1",
    );
    assert_eq!((code, body.as_str()), (500, "Upgrade request required\n"));
    let (code, body) = curl_kubelet(&k, &certs, "POST", "/exec/default/web/main?command=ls");
    assert_eq!(
        (code, body.as_str()),
        (400, "you must specify at least 1 of stdin, stdout, stderr")
    );
    let (code, body) = curl_kubelet(&k, &certs, "POST", "/exec/default/nope/main?output=1");
    assert_eq!((code, body.as_str()), (404, "pod does not exist"));
    let (code, body) = curl_kubelet(&k, &certs, "POST", "/exec/default/web/ghost?output=1");
    assert_eq!(
        (code, body.as_str()),
        (500, "container not found (\"ghost\")")
    );
    // What containerd answered (the kubelet logs each stream server answer): for exec,
    // attach and port-forward alike, a refusal of the websocket attempt, then 101 for SPDY.
    let answers: Vec<String> = k
        .log_text()
        .lines()
        .filter(|l| l.contains("stream server answered"))
        .map(str::to_owned)
        .collect();
    eprintln!("stream server answers:\n{}", answers.join("\n"));
    assert!(
        answers
            .iter()
            .any(|l| l.contains("websocket=true") && !l.contains("status=101")),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .any(|l| l.contains("websocket=false") && l.contains("status=101")),
        "{answers:?}"
    );

    server.shutdown().await;
}
