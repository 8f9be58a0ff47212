//! TokenReview and SubjectAccessReview through the real `kubectl create -f` (discovery must
//! list them; the created object comes back with `status` filled).

use crate::common;

use common::{kubectl_in, ok_stdin, start};
use fake_apiserver::Options;
use fake_apiserver::reviews::{AccessRequest, TokenUser};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_token_and_subject_access_reviews() {
    let (s, _dir) = start(Options::default()).await;
    s.reviews().add_token(
        "t-alice",
        TokenUser {
            username: "alice".into(),
            uid: "42".into(),
            groups: vec!["devs".into()],
        },
    );
    let tr = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"t-alice"}}"#;
    let out = ok_stdin(&s, tr, &["create", "-f", "-", "-o", "json"])
        .await
        .json();
    assert_eq!(out["kind"], "TokenReview");
    assert_eq!(out["status"]["authenticated"], true);
    assert_eq!(out["status"]["user"]["username"], "alice");
    let bad = tr.replace("t-alice", "nope");
    let out = ok_stdin(&s, &bad, &["create", "-f", "-", "-o", "json"])
        .await
        .json();
    assert_ne!(out["status"]["authenticated"], true);

    s.reviews().set_authorizer(Arc::new(|r: &AccessRequest| {
        (
            r.user == "alice" && r.subresource == "proxy" && r.name == "n1",
            "test rule".to_owned(),
        )
    }));
    let sar = |user: &str| {
        format!(
            r#"{{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{{"user":"{user}","resourceAttributes":{{"verb":"get","resource":"nodes","subresource":"proxy","name":"n1"}}}}}}"#
        )
    };
    let out = ok_stdin(&s, &sar("alice"), &["create", "-f", "-", "-o", "json"])
        .await
        .json();
    assert_eq!(out["status"]["allowed"], true);
    assert_eq!(out["status"]["reason"], "test rule");
    let out = ok_stdin(&s, &sar("bob"), &["create", "-f", "-", "-o", "json"])
        .await
        .json();
    assert_eq!(out["status"]["allowed"], false);
    let invalid = kubectl_in(
        &s,
        Some(r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"get"}}}"#),
        &["create", "-f", "-"],
    )
    .await;
    assert!(!invalid.ok);
    assert!(invalid.stderr.contains("is invalid"), "{}", invalid.stderr);
}
