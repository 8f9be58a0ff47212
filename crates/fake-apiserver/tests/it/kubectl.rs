//! Black-box tests: the real `/usr/bin/kubectl` (v1.32) against an in-process fake API server
//! (CRUD, apply, patches, errors, namespaces, auth).

use crate::common;

use common::{KUBECTL, kubectl, kubectl_in, ok, ok_stdin, start};
use fake_apiserver::{KubeconfigAuth, Options};
use serde_json::json;
use tokio::process::Command;

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

    // Server-side dry run is refused, never persisted.
    let dry = kubectl_in(
        &s,
        Some(applied),
        &["create", "--dry-run=server", "-f", "-"],
    )
    .await;
    assert!(!dry.ok);
    assert!(dry.stderr.contains("dryRun"), "{}", dry.stderr);
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
    let wide = ok(&s, &["get", "pods", "-o", "wide"]).await.stdout;
    let row: Vec<&str> = wide
        .lines()
        .nth(1)
        .expect("pod row")
        .split_whitespace()
        .collect();
    assert_eq!(row[..3], ["p1", "0/1", "Pending"], "{wide}");
    assert!(row.contains(&"ghost"), "{wide}");
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

    // kubectl's typed generators send protobuf bodies.
    ok(&s, &["create", "namespace", "team"]).await;
    ok(
        &s,
        &[
            "-n",
            "team",
            "create",
            "configmap",
            "proto",
            "--from-literal=a=b",
        ],
    )
    .await;
    let cm = s
        .get("configmaps", "team", "proto")
        .expect("protobuf configmap");
    assert_eq!(cm["data"], json!({"a": "b"}));
    assert!(cm["metadata"].get("generateName").is_none());
    ok(
        &s,
        &[
            "-n",
            "team",
            "create",
            "secret",
            "generic",
            "psec",
            "--from-literal=x=y",
        ],
    )
    .await;
    let psec = s.get("secrets", "team", "psec").expect("protobuf secret");
    assert_eq!(
        (psec["data"]["x"].as_str(), psec["type"].as_str()),
        (Some("eQ=="), Some("Opaque"))
    );
    ok(&s, &["-n", "team", "create", "serviceaccount", "psa"]).await;
    let jwt = ok(
        &s,
        &["-n", "team", "create", "token", "psa", "--audience=api"],
    )
    .await;
    assert_eq!(jwt.stdout.trim().split('.').count(), 3, "{}", jwt.stdout);
    let objs = r#"{"apiVersion":"v1","kind":"List","items":[
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
