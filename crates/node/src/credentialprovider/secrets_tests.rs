use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{LocalObjectReference, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::events::CollectingRecorder;
use crate::objects::{FakeObjects, NoApiServer};

fn secret(name: &str, ty: &str, key: &str, data: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("team".into()),
            ..Default::default()
        },
        type_: Some(ty.into()),
        data: Some(BTreeMap::from([(
            key.to_owned(),
            ByteString(data.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

fn users(k: &BasicDockerKeyring, image: &str) -> Vec<String> {
    k.lookup(image).into_iter().map(|a| a.username).collect()
}

#[test]
fn both_secret_types_feed_one_keyring_in_secret_order() {
    let secrets = [
        secret(
            "json",
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            DOCKER_CONFIG_JSON_KEY,
            r#"{"auths": {"reg.io": {"username": "from-json", "password": "p"}}}"#,
        ),
        secret(
            "cfg",
            SECRET_TYPE_DOCKERCFG,
            DOCKERCFG_KEY,
            r#"{"reg.io": {"username": "from-cfg", "password": "p"}}"#,
        ),
        // Wrong type for the key, wrong key for the type, an Opaque secret: all ignored.
        secret(
            "mixed",
            SECRET_TYPE_DOCKERCFG,
            DOCKER_CONFIG_JSON_KEY,
            "not json",
        ),
        secret("opaque", "Opaque", DOCKER_CONFIG_JSON_KEY, "not json"),
        secret(
            "empty",
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            DOCKER_CONFIG_JSON_KEY,
            "",
        ),
    ];
    let k = make_docker_keyring(&secrets).unwrap();
    assert_eq!(users(&k, "reg.io/app"), ["from-json", "from-cfg"]);
}

#[test]
fn a_malformed_secret_is_an_error_naming_it() {
    let secrets = [
        secret(
            "good",
            SECRET_TYPE_DOCKERCFG,
            DOCKERCFG_KEY,
            r#"{"reg.io": {"username": "u"}}"#,
        ),
        secret(
            "broken",
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            DOCKER_CONFIG_JSON_KEY,
            r#"{"auths": {"reg.io": {"auth": "hunter2!"}}}"#,
        ),
    ];
    let err = make_docker_keyring(&secrets).unwrap_err();
    assert_eq!(
        err.to_string(),
        "couldn't parse image pull secret team/broken (key \".dockerconfigjson\"): auths[\"reg.io\"].auth: illegal base64 data at input byte 7"
    );
}

fn pod_with_pull_secrets(names: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("team".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            image_pull_secrets: Some(
                names
                    .iter()
                    .map(|n| LocalObjectReference {
                        name: (*n).to_owned(),
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn missing_secrets_are_named_in_one_event_and_the_rest_used() {
    let objects = FakeObjects::default();
    objects.set_secret(secret(
        "present",
        SECRET_TYPE_DOCKERCFG,
        DOCKERCFG_KEY,
        "{}",
    ));
    let events = CollectingRecorder::default();
    let pod = pod_with_pull_secrets(&["absent-1", "present", "", "absent-2"]);
    let got = pull_secrets_for_pod(&pod, Some(&objects), &events).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].metadata.name.as_deref(), Some("present"));
    let ev = events.with_reason("FailedToRetrieveImagePullSecret");
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].event_type, EventType::Warning);
    assert_eq!(
        ev[0].message,
        "Unable to retrieve some image pull secrets (absent-1, absent-2); attempting to pull the image may not succeed."
    );

    // No pull secrets: nothing fetched, no event.
    let events = CollectingRecorder::default();
    assert!(
        pull_secrets_for_pod(&pod_with_pull_secrets(&[]), Some(&objects), &events)
            .await
            .is_empty()
    );
    assert!(events.events().is_empty());

    // Standalone mode: the lookups fail, the event says so.
    let events = CollectingRecorder::default();
    assert!(
        pull_secrets_for_pod(&pod, Some(&NoApiServer), &events)
            .await
            .is_empty()
    );
    assert_eq!(
        events.with_reason("FailedToRetrieveImagePullSecret").len(),
        1
    );
}
