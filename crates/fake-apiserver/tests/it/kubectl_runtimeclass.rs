//! Black-box tests: the real `/usr/bin/kubectl` (v1.32) against an in-process fake API server
//! serving RuntimeClasses (node.k8s.io/v1, cluster-scoped): discovery, create, get, list,
//! delete, and upstream's validation of `handler` (required DNS label, immutable).

use crate::common;

use common::{kubectl, kubectl_in, ok, ok_stdin, start};
use fake_apiserver::Options;

const ALT: &str = r#"{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass","metadata":{"name":"alt"},
    "handler":"runc-alt","overhead":{"podFixed":{"cpu":"250m","memory":"64Mi"}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimeclasses_are_served_cluster_scoped_with_upstream_validation() {
    let (s, _dir) = start(Options::default()).await;
    let res = ok(
        &s,
        &["api-resources", "--api-group=node.k8s.io", "-o", "wide"],
    )
    .await
    .stdout;
    let line = res
        .lines()
        .find(|l| l.starts_with("runtimeclasses"))
        .unwrap_or_else(|| panic!("api-resources lacks runtimeclasses: {res}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert!(cols.contains(&"node.k8s.io/v1"), "{line}");
    assert!(cols.contains(&"false"), "cluster-scoped: {line}");
    assert!(cols.contains(&"RuntimeClass"), "{line}");

    ok_stdin(&s, ALT, &["create", "-f", "-"]).await;
    let got = ok(&s, &["get", "runtimeclass", "alt", "-o", "json"])
        .await
        .json();
    assert_eq!(got["handler"], "runc-alt");
    assert_eq!(got["overhead"]["podFixed"]["cpu"], "250m");
    assert_eq!(got["apiVersion"], "node.k8s.io/v1");
    assert!(got["metadata"].get("namespace").is_none(), "{got}");
    // Namespace flags are ignored for cluster-scoped resources, as with a real server.
    let listed = ok(
        &s,
        &["-n", "kube-system", "get", "runtimeclasses", "-o", "name"],
    )
    .await
    .stdout;
    assert_eq!(listed.trim(), "runtimeclass.node.k8s.io/alt");
    // kubectl's table: upstream's NAME, HANDLER, AGE columns.
    let table = ok(&s, &["get", "runtimeclasses"]).await.stdout;
    let mut lines = table.lines();
    let head: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(head, ["NAME", "HANDLER", "AGE"], "{table}");
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(&row[..2], ["alt", "runc-alt"], "{table}");
    assert_eq!(
        s.get("runtimeclasses", "", "alt").expect("stored")["handler"],
        "runc-alt"
    );

    // `handler` is immutable (upstream ValidateRuntimeClassUpdate).
    let out = kubectl(
        &s,
        &[
            "patch",
            "runtimeclass",
            "alt",
            "--type=merge",
            "-p",
            r#"{"handler":"runc"}"#,
        ],
    )
    .await;
    assert!(!out.ok, "{}", out.stdout);
    assert!(
        out.stderr.contains("handler: Invalid value") && out.stderr.contains("field is immutable"),
        "{}",
        out.stderr
    );
    // Required, and a DNS label (it names a CRI runtime handler).
    for (body, want) in [
        (
            r#"{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass","metadata":{"name":"none"}}"#,
            "handler: Required value",
        ),
        (
            r#"{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass","metadata":{"name":"bad"},"handler":"../runc"}"#,
            "handler: Invalid value: \"../runc\"",
        ),
    ] {
        let out = kubectl_in(&s, Some(body), &["create", "-f", "-"]).await;
        assert!(!out.ok, "{}", out.stdout);
        assert!(out.stderr.contains(want), "{want} not in {}", out.stderr);
    }

    ok(&s, &["delete", "runtimeclass", "alt"]).await;
    assert!(s.get("runtimeclasses", "", "alt").is_none());
    let out = kubectl(&s, &["get", "runtimeclass", "alt"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("runtimeclasses.node.k8s.io \"alt\" not found"),
        "{}",
        out.stderr
    );
    s.shutdown().await;
}
