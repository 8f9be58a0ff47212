//! Black-box tests: the real `/usr/bin/kubectl` (v1.32) against an in-process fake API server.

use fake_apiserver::{FakeApiServer, KubeconfigAuth, Options};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const KUBECTL: &str = "/usr/bin/kubectl";

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("kubectl output is not JSON ({e}): {}", self.stdout))
    }
}

async fn start(opts: Options) -> (FakeApiServer, tempfile::TempDir) {
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

async fn kubectl_in(server: &FakeApiServer, stdin: Option<&str>, args: &[&str]) -> Out {
    let mut cmd = Command::new(KUBECTL);
    cmd.arg("--kubeconfig")
        .arg(&server.kubeconfig_path)
        .args(args)
        .env("HOME", std::env::temp_dir())
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

async fn kubectl(server: &FakeApiServer, args: &[&str]) -> Out {
    kubectl_in(server, None, args).await
}

async fn ok(server: &FakeApiServer, args: &[&str]) -> Out {
    let out = kubectl(server, args).await;
    assert!(
        out.ok,
        "kubectl {args:?} failed: {}{}",
        out.stdout, out.stderr
    );
    out
}

async fn ok_stdin(server: &FakeApiServer, stdin: &str, args: &[&str]) -> Out {
    let out = kubectl_in(server, Some(stdin), args).await;
    assert!(
        out.ok,
        "kubectl {args:?} failed: {}{}",
        out.stdout, out.stderr
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_crud_apply_patch_and_errors() {
    let (s, _dir) = start(Options::default()).await;
    let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm1","labels":{"a":"b"}},"data":{"k":"v"}}"#;
    let out = ok_stdin(&s, cm, &["create", "-f", "-"]).await;
    assert!(
        out.stdout.contains("configmap/cm1 created"),
        "{}",
        out.stdout
    );
    // 409 AlreadyExists.
    let dup = kubectl_in(&s, Some(cm), &["create", "-f", "-"]).await;
    assert!(!dup.ok);
    assert!(dup.stderr.contains("AlreadyExists"), "{}", dup.stderr);
    let got = ok(&s, &["get", "cm", "cm1", "-o", "json"]).await.json();
    assert_eq!(got["data"]["k"], "v");
    assert!(
        got["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert!(got["metadata"]["creationTimestamp"].is_string());
    let rv1: u64 = got["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .parse()
        .expect("num");

    ok(&s, &["patch", "cm", "cm1", "-p", r#"{"data":{"s":"1"}}"#]).await;
    ok(
        &s,
        &[
            "patch",
            "cm",
            "cm1",
            "--type=merge",
            "-p",
            r#"{"data":{"m":"2","k":null}}"#,
        ],
    )
    .await;
    ok(
        &s,
        &[
            "patch",
            "cm",
            "cm1",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/data/j","value":"3"}]"#,
        ],
    )
    .await;
    ok(&s, &["label", "cm", "cm1", "x=y"]).await;
    let got = ok(&s, &["get", "cm", "cm1", "-o", "json"]).await.json();
    assert_eq!(got["data"], json!({"s": "1", "m": "2", "j": "3"}));
    assert_eq!(got["metadata"]["labels"], json!({"a": "b", "x": "y"}));
    let rv2: u64 = got["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .parse()
        .expect("num");
    assert!(rv2 > rv1);

    // A bad JSON patch is a client error, not a crash.
    let bad = kubectl(
        &s,
        &[
            "patch",
            "cm",
            "cm1",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/nope"}]"#,
        ],
    )
    .await;
    assert!(!bad.ok);

    // Selectors.
    let names = ok(&s, &["get", "cm", "-l", "x=y,a in (b,c)", "-o", "name"]).await;
    assert_eq!(names.stdout.trim(), "configmap/cm1");
    let none = ok(&s, &["get", "cm", "-l", "x!=y", "-o", "name"]).await;
    assert_eq!(none.stdout.trim(), "");
    let by_field = ok(
        &s,
        &[
            "get",
            "cm",
            "--field-selector",
            "metadata.name=cm1",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(by_field.stdout.trim(), "configmap/cm1");

    // Stale resourceVersion on replace: 409 Conflict.
    let mut stale = got.clone();
    stale["metadata"]["resourceVersion"] = json!(rv1.to_string());
    let conflict = kubectl_in(&s, Some(&stale.to_string()), &["replace", "-f", "-"]).await;
    assert!(!conflict.ok);
    assert!(
        conflict.stderr.contains("the object has been modified"),
        "{}",
        conflict.stderr
    );

    // apply: create then update through strategic merge patch with last-applied.
    let applied = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm2"},"data":{"a":"1","b":"2"}}"#;
    assert!(
        ok_stdin(&s, applied, &["apply", "-f", "-"])
            .await
            .stdout
            .contains("created")
    );
    let applied2 =
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm2"},"data":{"a":"9"}}"#;
    assert!(
        ok_stdin(&s, applied2, &["apply", "-f", "-"])
            .await
            .stdout
            .contains("configured")
    );
    let cm2 = s.get("configmaps", "default", "cm2").expect("cm2 stored");
    assert_eq!(cm2["data"], json!({"a": "9"}));

    ok(&s, &["delete", "cm", "cm1"]).await;
    let missing = kubectl(&s, &["get", "cm", "cm1"]).await;
    assert!(!missing.ok);
    assert!(missing.stderr.contains("NotFound"), "{}", missing.stderr);
    let missing_del = kubectl(&s, &["delete", "cm", "cm1"]).await;
    assert!(
        missing_del.stderr.contains("not found"),
        "{}",
        missing_del.stderr
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_nodes_and_graceful_deletion() {
    let (s, _dir) = start(Options::default()).await;
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1","labels":{"app":"web"}},
        "spec":{"nodeName":"ghost","containers":[{"name":"c","image":"busybox"}]},
        "status":{"phase":"Running"}}"#;
    ok_stdin(&s, pod, &["create", "-f", "-"]).await;
    let got = ok(&s, &["get", "pod", "p1", "-o", "json"]).await.json();
    // Client-supplied status is dropped; a pod bound to a missing node stays Pending.
    assert_eq!(got["status"]["phase"], "Pending");
    assert_eq!(got["spec"]["containers"][0]["imagePullPolicy"], "Always");
    ok(&s, &["get", "pods", "-o", "wide"]).await;
    let d = ok(&s, &["describe", "pod", "p1"]).await;
    assert!(d.stdout.contains("Pending"), "{}", d.stdout);
    let sel = ok(
        &s,
        &[
            "get",
            "pods",
            "--field-selector",
            "spec.nodeName=ghost",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(sel.stdout.trim(), "pod/p1");

    // Invalid object: 422.
    let invalid =
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"bad"},"spec":{"containers":[]}}"#;
    let out = kubectl_in(&s, Some(invalid), &["create", "-f", "-"]).await;
    assert!(!out.ok);
    assert!(out.stderr.contains("is invalid"), "{}", out.stderr);

    // Node create and status patch through the subresource.
    ok_stdin(
        &s,
        r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}"#,
        &["create", "-f", "-"],
    )
    .await;
    ok(&s, &["patch", "node", "n1", "--subresource=status", "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True"}],"addresses":[{"type":"InternalIP","address":"10.0.0.1"}]}}"#]).await;
    // A status patch on the main resource does not change status.
    ok(
        &s,
        &[
            "patch",
            "node",
            "n1",
            "-p",
            r#"{"status":{"phase":"x"},"spec":{"unschedulable":true}}"#,
        ],
    )
    .await;
    let node = ok(&s, &["get", "node", "n1", "-o", "json"]).await.json();
    assert_eq!(node["status"]["conditions"][0]["type"], "Ready");
    assert!(node["status"]["phase"].is_null());
    assert_eq!(node["spec"]["unschedulable"], true);
    ok(&s, &["get", "nodes", "-o", "wide"]).await;

    // Graceful deletion of a scheduled pod sets deletionTimestamp and keeps the object.
    ok(&s, &["delete", "pod", "p1", "--wait=false"]).await;
    let deleting = s.get("pods", "default", "p1").expect("pod still stored");
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(deleting["metadata"]["deletionGracePeriodSeconds"], 30);
    ok(&s, &["delete", "pod", "p1", "--grace-period=0", "--force"]).await;
    assert!(s.get("pods", "default", "p1").is_none());

    // An unscheduled pod is deleted immediately.
    ok(&s, &["run", "p2", "--image=busybox"]).await;
    ok(&s, &["delete", "pod", "p2", "--wait=false"]).await;
    assert!(s.get("pods", "default", "p2").is_none());
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_namespaces_and_discovery() {
    let (s, _dir) = start(Options::default()).await;
    let res = ok(&s, &["api-resources"]).await.stdout;
    for r in [
        "pods",
        "nodes",
        "leases",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "events",
        "namespaces",
        "services",
    ] {
        assert!(
            res.lines().any(|l| l.starts_with(r)),
            "api-resources lacks {r}: {res}"
        );
    }
    ok(&s, &["version"]).await;
    let lease = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"n1","namespace":"kube-node-lease"},
        "spec":{"holderIdentity":"n1","leaseDurationSeconds":40}}"#;
    ok_stdin(&s, lease, &["apply", "-f", "-"]).await;
    ok(
        &s,
        &[
            "-n",
            "kube-node-lease",
            "patch",
            "lease",
            "n1",
            "--type=merge",
            "-p",
            r#"{"spec":{"renewTime":"2024-01-01T00:00:00.000000Z"}}"#,
        ],
    )
    .await;
    let got = ok(
        &s,
        &["-n", "kube-node-lease", "get", "lease", "n1", "-o", "json"],
    )
    .await
    .json();
    assert_eq!(got["spec"]["renewTime"], "2024-01-01T00:00:00.000000Z");

    // kubectl's typed generators (`create namespace|configmap|secret|token`) send protobuf,
    // which the fixture does not decode: it must refuse clearly (415), not misbehave.
    let proto = kubectl(&s, &["create", "namespace", "team"]).await;
    assert!(!proto.ok);
    assert!(proto.stderr.contains("protobuf"), "{}", proto.stderr);
    let objs = r#"{"apiVersion":"v1","kind":"List","items":[
        {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team"}},
        {"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"team"},"data":{"a":"b"}},
        {"apiVersion":"v1","kind":"Secret","metadata":{"name":"sec","namespace":"team"},"stringData":{"a":"b"}},
        {"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"sa","namespace":"team"}}]}"#;
    ok_stdin(&s, objs, &["create", "-f", "-"]).await;
    let ns = ok(&s, &["get", "ns", "team", "-o", "json"]).await.json();
    assert_eq!(ns["status"]["phase"], "Active");
    let secret = s.get("secrets", "team", "sec").expect("secret");
    assert_eq!(secret["data"]["a"], "Yg==");
    assert!(secret.get("stringData").is_none());
    assert_eq!(secret["type"], "Opaque");
    let req = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["api"],"expirationSeconds":3600}}"#;
    let tr = ok_stdin(
        &s,
        req,
        &[
            "create",
            "--raw",
            "/api/v1/namespaces/team/serviceaccounts/sa/token",
            "-f",
            "-",
        ],
    )
    .await
    .json();
    let token = tr["status"]["token"].as_str().expect("token");
    assert_eq!(token.split('.').count(), 3, "JWT-shaped: {token}");
    assert!(tr["status"]["expirationTimestamp"].is_string());
    // The issued token authenticates.
    let with_token = Command::new(KUBECTL)
        .args([
            "--kubeconfig=/dev/null",
            &format!("--server={}", s.url),
            "--insecure-skip-tls-verify",
            &format!("--token={token}"),
            "get",
            "ns",
            "team",
            "-o",
            "name",
        ])
        .output()
        .await
        .expect("kubectl");
    assert_eq!(
        String::from_utf8_lossy(&with_token.stdout).trim(),
        "namespace/team"
    );
    let missing_ns = kubectl_in(
        &s,
        Some(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"nope"}}"#,
        ),
        &["create", "-f", "-"],
    )
    .await;
    assert!(
        missing_ns.stderr.contains("namespaces \"nope\" not found"),
        "{}",
        missing_ns.stderr
    );
    ok(&s, &["delete", "namespace", "team", "--wait=false"]).await;
    assert!(s.list("configmaps", Some("team")).is_empty());
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_streams_changes() {
    let (s, _dir) = start(Options::default()).await;
    s.create(
        "configmaps",
        "default",
        json!({"metadata": {"name": "before"}}),
    )
    .expect("create");
    let mut child = Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(&s.kubeconfig_path)
        .args([
            "get",
            "configmaps",
            "-w",
            "-o",
            "name",
            "--request-timeout=15s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn kubectl get -w");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let read = async {
        while let Ok(Some(l)) = lines.next_line().await {
            seen.push(l.clone());
            if l == "configmap/before" {
                s.create(
                    "configmaps",
                    "default",
                    json!({"metadata": {"name": "after"}}),
                )
                .expect("create after");
            }
            if l == "configmap/after" {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(15), read)
        .await
        .expect("watch produced both objects in time");
    assert_eq!(seen, vec!["configmap/before", "configmap/after"]);
    child.kill().await.expect("kill kubectl");

    // Raw watch with initial events, the initial-events-end bookmark and a server timeout.
    let raw = ok(&s, &["get", "--raw",
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"]).await;
    let events: Vec<Value> = raw
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("event json"))
        .collect();
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[1]["type"], "ADDED");
    assert_eq!(events[2]["type"], "BOOKMARK");
    assert_eq!(
        events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    // A too-old resourceVersion yields an Expired (410) ERROR event.
    s.compact();
    let old = ok(
        &s,
        &[
            "get",
            "--raw",
            "/api/v1/configmaps?watch=true&resourceVersion=1&timeoutSeconds=1",
        ],
    )
    .await;
    let ev: Value = serde_json::from_str(old.stdout.trim()).expect("error event");
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth_and_plain_http() {
    let (s, dir) = start(Options {
        kubeconfig_auth: KubeconfigAuth::Token,
        ..Options::default()
    })
    .await;
    ok(&s, &["get", "namespaces"]).await;
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, s.ca_pem.as_deref().expect("ca")).expect("write ca");
    let ca_arg = format!("--certificate-authority={}", ca.display());
    let server_arg = format!("--server={}", s.url);
    let bad = Command::new(KUBECTL)
        .args([
            "--kubeconfig=/dev/null",
            &server_arg,
            &ca_arg,
            "--token=wrong",
            "get",
            "ns",
        ])
        .output()
        .await
        .expect("kubectl");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("Unauthorized") || err.contains("provide credentials"),
        "{err}"
    );
    s.shutdown().await;

    let (h, _dir2) = start(Options {
        tls: false,
        require_auth: false,
        ..Options::default()
    })
    .await;
    assert!(h.url.starts_with("http://"));
    let out = ok(&h, &["get", "ns", "-o", "name"]).await;
    assert!(out.stdout.contains("namespace/default"));
    h.shutdown().await;
}
