//! Black-box: the real `/usr/bin/kubectl` (v1.32) against the fake API server's
//! `pods/ephemeralcontainers` subresource: `kubectl debug --target` (strategic merge patch on
//! the subresource), `kubectl patch --subresource=ephemeralcontainers` (strategic and JSON
//! merge), a raw PUT and GET, and the real server's 422s: duplicate names, forbidden fields,
//! an unknown target, removing or changing an existing one, and ephemeral containers on create.

use crate::common;

use common::{kubectl, kubectl_in, ok, ok_stdin, start};
use fake_apiserver::Options;
use serde_json::json;

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},
  "spec":{"nodeName":"n1","containers":[{"name":"app","image":"busybox:1.36"}]}}"#;

fn ephemeral_names(pod: &serde_json::Value) -> Vec<String> {
    pod["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect()
}

/// Sorted: a strategic merge patch puts new list items first (as upstream does).
fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_debug_and_patch_through_the_ephemeralcontainers_subresource() {
    let (s, _dir) = start(Options::default()).await;
    ok_stdin(&s, POD, &["create", "-f", "-"]).await;

    // kubectl debug: discovery, GET, then a strategic merge patch on the subresource.
    let out = ok(
        &s,
        &[
            "debug",
            "web",
            "--image=busybox:1.36",
            "--target=app",
            "-c",
            "debugger",
            "--",
            "sleep",
            "1",
        ],
    )
    .await;
    assert!(!out.stderr.contains("error"), "{}", out.stderr);
    let pod = ok(&s, &["get", "pod", "web", "-o", "json"]).await.json();
    let ec = &pod["spec"]["ephemeralContainers"][0];
    assert_eq!(ec["name"], "debugger");
    assert_eq!(ec["targetContainerName"], "app");
    assert_eq!(ec["command"], json!(["sleep", "1"]));
    assert_eq!(ec["imagePullPolicy"], "IfNotPresent");
    assert_eq!(ec["terminationMessagePolicy"], "File");
    // The regular containers are untouched.
    assert_eq!(pod["spec"]["containers"][0]["name"], "app");

    // kubectl patch --subresource, strategic merge: adds a second one by name.
    ok(
        &s,
        &[
            "patch",
            "pod",
            "web",
            "--subresource=ephemeralcontainers",
            "-p",
            r#"{"spec":{"ephemeralContainers":[{"name":"second","image":"busybox:1.36","stdin":true}]}}"#,
        ],
    )
    .await;
    let raw = ok(
        &s,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods/web/ephemeralcontainers",
        ],
    )
    .await
    .json();
    assert_eq!(raw["kind"], "Pod");
    assert_eq!(sorted(ephemeral_names(&raw)), ["debugger", "second"]);

    // A raw PUT of the whole pod: only the ephemeral containers count.
    let mut put = raw.clone();
    put["spec"]["ephemeralContainers"]
        .as_array_mut()
        .expect("list")
        .push(json!({"name": "third", "image": "busybox:1.36"}));
    put["spec"]["containers"][0]["image"] = json!("nginx");
    ok_stdin(
        &s,
        &put.to_string(),
        &[
            "replace",
            "--raw",
            "/api/v1/namespaces/default/pods/web/ephemeralcontainers",
            "-f",
            "-",
        ],
    )
    .await;
    let pod = ok(&s, &["get", "pod", "web", "-o", "json"]).await.json();
    assert_eq!(
        sorted(ephemeral_names(&pod)),
        ["debugger", "second", "third"]
    );
    assert_eq!(pod["spec"]["containers"][0]["image"], "busybox:1.36");

    // The real server's refusals, with their field paths.
    let refused = [
        (
            "strategic",
            r#"{"spec":{"ephemeralContainers":[{"name":"app","image":"busybox"}]}}"#,
            r#"spec.ephemeralContainers[0].name: Duplicate value: "app""#,
        ),
        (
            "strategic",
            r#"{"spec":{"ephemeralContainers":[{"name":"p","image":"busybox","ports":[{"containerPort":80}]}]}}"#,
            "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
        ),
        (
            "strategic",
            r#"{"spec":{"ephemeralContainers":[{"name":"t","image":"busybox","targetContainerName":"nope"}]}}"#,
            r#"spec.ephemeralContainers[0].targetContainerName: Not found: "nope""#,
        ),
        (
            "merge",
            r#"{"spec":{"ephemeralContainers":null}}"#,
            r#"existing ephemeral containers "debugger" may not be removed"#,
        ),
        (
            "strategic",
            r#"{"spec":{"ephemeralContainers":[{"name":"debugger","image":"alpine"}]}}"#,
            r#"existing ephemeral containers "debugger" may not be changed"#,
        ),
    ];
    for (ptype, patch, want) in refused {
        let out = kubectl(
            &s,
            &[
                "patch",
                "pod",
                "web",
                "--subresource=ephemeralcontainers",
                &format!("--type={ptype}"),
                "-p",
                patch,
            ],
        )
        .await;
        assert!(!out.ok, "{patch} was accepted");
        assert!(
            out.stderr.contains("is invalid") && out.stderr.contains(want),
            "{patch}: want {want:?} in {}",
            out.stderr
        );
    }
    let pod = ok(&s, &["get", "pod", "web", "-o", "json"]).await.json();
    assert_eq!(
        sorted(ephemeral_names(&pod)),
        ["debugger", "second", "third"]
    );

    // Not through the pod itself, and not on create.
    let out = kubectl(
        &s,
        &[
            "patch",
            "pod",
            "web",
            "-p",
            r#"{"spec":{"ephemeralContainers":[{"name":"x","image":"busybox"}]}}"#,
        ],
    )
    .await;
    assert!(
        !out.ok && out.stderr.contains("Forbidden"),
        "{}",
        out.stderr
    );
    let with_ec = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"born"},
      "spec":{"containers":[{"name":"app","image":"busybox"}],
      "ephemeralContainers":[{"name":"d","image":"busybox"}]}}"#;
    let out = kubectl_in(&s, Some(with_ec), &["create", "-f", "-"]).await;
    assert!(!out.ok, "created a pod with ephemeral containers");
    assert!(
        out.stderr
            .contains("spec.ephemeralContainers: Forbidden: cannot be set on create"),
        "{}",
        out.stderr
    );
}
