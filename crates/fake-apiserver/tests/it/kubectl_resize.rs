//! Black-box tests of the `pods/resize` subresource with the real kubectl (v1.32): strategic,
//! merge and JSON patches, replace (PUT), and upstream's 422 field errors.

use crate::common;

use common::{kubectl, kubectl_in, ok, start};
use fake_apiserver::Options;

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"rz"},
 "spec":{"nodeName":"n1","containers":[{"name":"c","image":"busybox",
  "resources":{"requests":{"cpu":"100m","memory":"64Mi"},"limits":{"cpu":"300m","memory":"128Mi"}}}]}}"#;

#[tokio::test]
async fn resize_subresource_patches_and_validates() {
    let (s, _d) = start(Options::default()).await;
    kubectl_in(&s, Some(POD), &["create", "-f", "-"]).await;
    let gen0 = ok(&s, &["get", "pod", "rz", "-o", "json"]).await.json()["metadata"]["generation"]
        .as_i64()
        .unwrap_or(0);

    // Strategic merge (kubectl's default): only the named container's cpu limit changes.
    let out = ok(
        &s,
        &[
            "patch",
            "pod",
            "rz",
            "--subresource",
            "resize",
            "-o",
            "json",
            "-p",
            r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"500m"}}}]}}"#,
        ],
    )
    .await
    .json();
    let c = &out["spec"]["containers"][0];
    assert_eq!(c["resources"]["limits"]["cpu"], "500m");
    assert_eq!(c["resources"]["requests"]["memory"], "64Mi");
    assert_eq!(c["image"], "busybox");
    assert_eq!(out["metadata"]["generation"].as_i64(), Some(gen0 + 1));
    // The API server sets no resize conditions itself.
    assert!(
        out["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|c| !c["type"]
                .as_str()
                .unwrap_or_default()
                .starts_with("PodResize"))
    );

    // The same change through the main resource is refused.
    let plain = kubectl(
        &s,
        &[
            "patch",
            "pod",
            "rz",
            "-p",
            r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"600m"}}}]}}"#,
        ],
    )
    .await;
    assert!(
        !plain.ok && plain.stderr.contains("Forbidden"),
        "{}",
        plain.stderr
    );

    // JSON patch and resizePolicy.
    let out = ok(
        &s,
        &[
            "patch", "pod", "rz", "--subresource", "resize", "--type", "json", "-o", "json", "-p",
            r#"[{"op":"replace","path":"/spec/containers/0/resources/requests/cpu","value":"200m"},
                {"op":"add","path":"/spec/containers/0/resizePolicy","value":[{"resourceName":"memory","restartPolicy":"RestartContainer"}]},
                {"op":"replace","path":"/spec/containers/0/image","value":"ignored"}]"#,
        ],
    )
    .await
    .json();
    let c = &out["spec"]["containers"][0];
    assert_eq!(c["resources"]["requests"]["cpu"], "200m");
    assert_eq!(c["resizePolicy"][0]["restartPolicy"], "RestartContainer");
    assert_eq!(
        c["image"], "busybox",
        "non-resize fields are dropped, not applied"
    );

    // A JSON merge patch replaces the whole container list: the name and image stay the
    // stored ones, but `resources` is whatever the list carries (here: requests removed).
    let bad = kubectl(
        &s,
        &[
            "patch", "pod", "rz", "--subresource", "resize", "--type", "merge", "-p",
            r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"500m","memory":"128Mi"}}}]}}"#,
        ],
    )
    .await;
    assert!(!bad.ok);
    assert!(
        bad.stderr.contains(
            "spec.containers[0].resources.requests: Forbidden: resource requests cannot be removed"
        ),
        "{}",
        bad.stderr
    );

    for (patch, want) in [
        (
            r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"ephemeral-storage":"1Gi"}}}]}}"#,
            "spec: Forbidden: only cpu and memory resources are mutable",
        ),
        (
            r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"900m"}}}]}}"#,
            "must be less than or equal to cpu limit of 500m",
        ),
        (
            r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"500m","memory":"128Mi"}}}]}}"#,
            "Pod QOS Class may not change as a result of resizing",
        ),
    ] {
        let out = kubectl(
            &s,
            &["patch", "pod", "rz", "--subresource", "resize", "-p", patch],
        )
        .await;
        assert!(!out.ok, "{patch} accepted");
        assert!(out.stderr.contains(want), "{patch}: {}", out.stderr);
        assert!(out.stderr.contains("is invalid"), "{}", out.stderr);
    }

    // Replace (PUT) with a stale resourceVersion conflicts; with the current one it applies.
    let mut cur = ok(&s, &["get", "pod", "rz", "-o", "json"]).await.json();
    cur["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "400m".into();
    let mut stale = cur.clone();
    stale["metadata"]["resourceVersion"] = "1".into();
    let conflict = kubectl_in(
        &s,
        Some(&stale.to_string()),
        &["replace", "--subresource", "resize", "-f", "-"],
    )
    .await;
    assert!(
        !conflict.ok && conflict.stderr.contains("modified"),
        "{}",
        conflict.stderr
    );
    let out = kubectl_in(
        &s,
        Some(&cur.to_string()),
        &[
            "replace",
            "--subresource",
            "resize",
            "-f",
            "-",
            "-o",
            "json",
        ],
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(
        out.json()["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "400m"
    );
}
