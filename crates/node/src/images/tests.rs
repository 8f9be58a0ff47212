//! Tests of the image manager: pull policies, events, back-off, concurrency and rate limits.

use super::*;
use crate::events::CollectingRecorder;
use rkubelet_cri::fake::FakeRuntime;
use serde_json::json;

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "prod", "uid": "uid-1"},
        "spec": {"containers": [{"name": "c"}]},
    }))
    .expect("valid pod")
}

fn container(image: &str, policy: Option<&str>) -> Container {
    Container {
        name: "c".to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: policy.map(str::to_owned),
        ..Default::default()
    }
}

struct Env {
    rt: Arc<FakeRuntime>,
    events: CollectingRecorder,
    manager: ImageManager,
}

fn env(rt: FakeRuntime, serialize: bool, max_parallel: Option<u32>) -> Env {
    let rt = Arc::new(rt);
    let events = CollectingRecorder::default();
    let manager = ImageManager::new(
        rt.clone(),
        Arc::new(events.clone()),
        serialize,
        max_parallel,
    );
    Env {
        rt,
        events,
        manager,
    }
}

fn messages(events: &CollectingRecorder) -> Vec<(String, String)> {
    events
        .events()
        .into_iter()
        .map(|e| (e.reason, e.message))
        .collect()
}

fn pair(reason: &str, message: &str) -> (String, String) {
    (reason.to_owned(), message.to_owned())
}

#[test]
fn reference_parsing_and_default_policy() {
    #[rustfmt::skip]
    let cases: Vec<(&str, Result<&str, &str>, PullPolicy)> = vec![
        ("busybox", Ok("busybox:latest"), PullPolicy::Always),
        ("busybox:latest", Ok("busybox:latest"), PullPolicy::Always),
        ("busybox:1.0", Ok("busybox:1.0"), PullPolicy::IfNotPresent),
        ("localhost:5000/team/app", Ok("localhost:5000/team/app:latest"), PullPolicy::Always),
        ("registry.example.com:5000/a/b:v1.2_3", Ok("registry.example.com:5000/a/b:v1.2_3"), PullPolicy::IfNotPresent),
        ("[fd00::1]:5000/app:1", Ok("[fd00::1]:5000/app:1"), PullPolicy::IfNotPresent),
        ("my__app.x-y---z", Ok("my__app.x-y---z:latest"), PullPolicy::Always),
        (concat!("busybox@sha256:", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
         Ok(concat!("busybox@sha256:", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")),
         PullPolicy::IfNotPresent),
        (concat!("busybox:latest@sha256:", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
         Ok(concat!("busybox:latest@sha256:", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")),
         PullPolicy::Always),
        ("", Err("couldn't parse image reference \"\": invalid reference format"), PullPolicy::IfNotPresent),
        ("busybox:", Err("couldn't parse image reference \"busybox:\": invalid reference format"), PullPolicy::IfNotPresent),
        ("Busybox", Err("couldn't parse image reference \"Busybox\": invalid reference format: repository name (Busybox) must be lowercase"), PullPolicy::IfNotPresent),
        ("a//b", Err("couldn't parse image reference \"a//b\": invalid reference format"), PullPolicy::IfNotPresent),
        ("app-:1", Err("couldn't parse image reference \"app-:1\": invalid reference format"), PullPolicy::IfNotPresent),
        ("busybox@sha256:abc", Err("couldn't parse image reference \"busybox@sha256:abc\": invalid reference format"), PullPolicy::IfNotPresent),
        ("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
         Err("couldn't parse image reference \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\": invalid repository name (0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef), cannot specify 64-byte hexadecimal strings"),
         PullPolicy::IfNotPresent),
    ];
    for (image, want, policy) in cases {
        assert_eq!(
            apply_default_image_tag(image).as_deref(),
            want.map_err(str::to_owned).as_deref(),
            "{image}"
        );
        assert_eq!(pull_policy(&container(image, None)), policy, "{image}");
    }
    assert_eq!(
        pull_policy(&container("busybox", Some("Never"))),
        PullPolicy::Never
    );
    assert_eq!(
        pull_policy(&container("busybox", Some("IfNotPresent"))),
        PullPolicy::IfNotPresent
    );
}

#[tokio::test(start_paused = true)]
async fn present_image_with_if_not_present_is_not_pulled() {
    let e = env(FakeRuntime::with_images(&["busybox:1.0"]), true, None);
    let id = e.rt.add_image("busybox:1.0");
    let got = e
        .manager
        .ensure_image_exists(&pod(), &container("busybox:1.0", None), None, &[])
        .await;
    assert_eq!(got, Ok(id));
    assert_eq!(e.rt.call_count("PullImage"), 0);
    assert_eq!(
        messages(&e.events),
        vec![pair(
            "Pulled",
            "Container image \"busybox:1.0\" already present on machine"
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn always_pulls_and_reports_size() {
    let e = env(FakeRuntime::with_images(&["busybox:1.0"]), true, None);
    let id = e.rt.add_image("busybox:1.0");
    let got = e
        .manager
        .ensure_image_exists(&pod(), &container("busybox:1.0", Some("Always")), None, &[])
        .await;
    assert_eq!(got, Ok(id));
    assert_eq!(e.rt.call_count("PullImage"), 1);
    let size =
        e.rt.image_status(ImageStatusRequest {
            image: Some(ImageSpec {
                image: "busybox:1.0".to_owned(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .unwrap()
        .image
        .unwrap()
        .size;
    assert_eq!(
        messages(&e.events),
        vec![
            pair("Pulling", "Pulling image \"busybox:1.0\""),
            pair(
                "Pulled",
                &format!(
                    "Successfully pulled image \"busybox:1.0\" in 0s (0s including waiting). Image size: {size} bytes."
                )
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn untagged_image_defaults_to_always_and_latest() {
    let e = env(FakeRuntime::new(), true, None);
    let got = e
        .manager
        .ensure_image_exists(&pod(), &container("busybox", None), None, &[])
        .await
        .unwrap();
    assert!(got.starts_with("sha256:"), "{got}");
    assert!(e.rt.has_image("busybox:latest"));
    assert_eq!(e.rt.call_count("ImageStatus"), 1, "only the size lookup");
    let status = e.manager.image_status("busybox").await.unwrap();
    assert_eq!(status.map(|i| i.id), Some(got));
    assert_eq!(e.manager.image_status("nginx:1").await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn never_policy_with_missing_image() {
    let e = env(FakeRuntime::new(), true, None);
    let got = e
        .manager
        .ensure_image_exists(&pod(), &container("busybox:1.0", Some("Never")), None, &[])
        .await;
    let msg = "Container image \"busybox:1.0\" is not present with pull policy of Never";
    assert_eq!(
        got,
        Err(ImageError::new(ImageErrorReason::ErrImageNeverPull, msg))
    );
    assert_eq!(got.unwrap_err().reason.as_str(), "ErrImageNeverPull");
    assert_eq!(messages(&e.events), vec![pair("ErrImageNeverPull", msg)]);
    assert_eq!(e.rt.call_count("PullImage"), 0);
}

#[tokio::test(start_paused = true)]
async fn invalid_name_and_inspect_failures() {
    let e = env(FakeRuntime::new(), true, None);
    let err = e
        .manager
        .ensure_image_exists(&pod(), &container("busybox:", None), None, &[])
        .await
        .unwrap_err();
    assert_eq!(err.reason, ImageErrorReason::InvalidImageName);
    assert_eq!(
        err.message,
        "Failed to apply default image tag \"busybox:\": couldn't parse image reference \"busybox:\": invalid reference format"
    );

    e.rt.fail_next("ImageStatus", CriError::unknown("ImageStatus", "boom"));
    let err = e
        .manager
        .ensure_image_exists(&pod(), &container("busybox:1.0", None), None, &[])
        .await
        .unwrap_err();
    assert_eq!(err.reason, ImageErrorReason::ImageInspectError);
    assert_eq!(err.message, "Failed to inspect image \"busybox:1.0\": boom");
    let reasons: Vec<String> = e.events.events().into_iter().map(|e| e.reason).collect();
    assert_eq!(reasons, vec!["InspectFailed", "InspectFailed"]);
}

#[tokio::test(start_paused = true)]
async fn pull_failures_back_off_then_retry() {
    let e = env(FakeRuntime::new(), true, None);
    e.rt.fail_pull("busybox:1.0", "not found");
    let p = pod();
    let c = container("busybox:1.0", None);
    let pull_err = "failed to pull and unpack image \"docker.io/library/busybox:1.0\": not found";

    let err = e
        .manager
        .ensure_image_exists(&p, &c, None, &[])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ImageError::new(ImageErrorReason::ErrImagePull, pull_err)
    );
    assert_eq!(
        messages(&e.events)[1..],
        [pair(
            "Failed",
            &format!("Failed to pull image \"busybox:1.0\": {pull_err}")
        )]
    );

    // Inside the 10s window: back-off, carrying the last pull error, no pull.
    tokio::time::advance(Duration::from_secs(9)).await;
    let err = e
        .manager
        .ensure_image_exists(&p, &c, None, &[])
        .await
        .unwrap_err();
    assert_eq!(err.reason, ImageErrorReason::ImagePullBackOff);
    assert_eq!(
        err.message,
        format!("Back-off pulling image \"busybox:1.0\": ErrImagePull: {pull_err}")
    );
    assert_eq!(
        messages(&e.events).last(),
        Some(&pair("BackOff", "Back-off pulling image \"busybox:1.0\""))
    );
    assert_eq!(e.rt.call_count("PullImage"), 1);

    // After 10s: pulled again; it fails again and the delay doubles to 20s.
    tokio::time::advance(Duration::from_secs(1)).await;
    let err = e
        .manager
        .ensure_image_exists(&p, &c, None, &[])
        .await
        .unwrap_err();
    assert_eq!(err.reason, ImageErrorReason::ErrImagePull);
    assert_eq!(e.rt.call_count("PullImage"), 2);
    tokio::time::advance(Duration::from_secs(19)).await;
    let err = e
        .manager
        .ensure_image_exists(&p, &c, None, &[])
        .await
        .unwrap_err();
    assert_eq!(err.reason, ImageErrorReason::ImagePullBackOff);
    assert_eq!(e.rt.call_count("PullImage"), 2);

    // The registry recovers: the next attempt after the window succeeds.
    e.rt.clear_pull_failure("busybox:1.0");
    tokio::time::advance(Duration::from_secs(1)).await;
    let id = e
        .manager
        .ensure_image_exists(&p, &c, None, &[])
        .await
        .unwrap();
    assert!(id.starts_with("sha256:"));
    assert_eq!(e.rt.call_count("PullImage"), 3);

    // Success leaves no back-off behind: an Always pull goes straight to the runtime.
    let always = container("busybox:1.0", Some("Always"));
    e.manager
        .ensure_image_exists(&p, &always, None, &[])
        .await
        .unwrap();
    assert_eq!(e.rt.call_count("PullImage"), 4);

    // Other pods are not affected by this pod's back-off.
    assert_eq!(e.manager.backoff_len(), 1);
    tokio::time::advance(Duration::from_secs(601)).await;
    e.manager
        .ensure_image_exists(&p, &always, None, &[])
        .await
        .unwrap();
    assert_eq!(
        e.manager.backoff_len(),
        0,
        "idle entries are collected after a pull"
    );
}

#[tokio::test(start_paused = true)]
async fn non_unknown_errors_keep_the_grpc_code() {
    let e = env(FakeRuntime::new(), true, None);
    e.rt.fail_next(
        "PullImage",
        CriError::not_found("PullImage", "manifest unknown"),
    );
    let err = e
        .manager
        .ensure_image_exists(&pod(), &container("busybox:1.0", None), None, &[])
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "rpc error: code = NotFound desc = manifest unknown"
    );

    let e = env(FakeRuntime::new(), true, None);
    e.rt.fail_next(
        "PullImage",
        CriError::unknown("PullImage", "RegistryUnavailable: connection refused"),
    );
    let err = e
        .manager
        .ensure_image_exists(&pod(), &container("busybox:1.0", None), None, &[])
        .await
        .unwrap_err();
    assert_eq!(err.reason, ImageErrorReason::RegistryUnavailable);
    assert_eq!(
        err.message,
        "image pull failed for busybox:1.0 because the registry is unavailable: connection refused"
    );
}

async fn two_pulls(e: &Env) -> Duration {
    e.rt.set_latency("PullImage", Duration::from_secs(1));
    let start = Instant::now();
    let p = pod();
    let (a, b) = (container("a:1", None), container("b:1", None));
    let (ra, rb) = tokio::join!(
        e.manager.ensure_image_exists(&p, &a, None, &[]),
        e.manager.ensure_image_exists(&p, &b, None, &[])
    );
    assert!(ra.is_ok() && rb.is_ok());
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn serialized_pulls_wait_for_each_other() {
    let e = env(FakeRuntime::new(), true, None);
    assert_eq!(two_pulls(&e).await, Duration::from_secs(2));
    let pulled: Vec<String> = e
        .events
        .with_reason("Pulled")
        .into_iter()
        .map(|ev| ev.message)
        .collect();
    assert!(
        pulled[0].contains("in 1s (1s including waiting)"),
        "{pulled:?}"
    );
    assert!(
        pulled[1].contains("in 1s (2s including waiting)"),
        "{pulled:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn registry_qps_refuses_pulls_over_the_limit() {
    let rt = Arc::new(FakeRuntime::new());
    let events = CollectingRecorder::default();
    let manager =
        ImageManager::new(rt.clone(), Arc::new(events.clone()), false, None).with_pull_limit(1, 2);
    let p = pod();
    let pull = |image: &'static str| {
        let c = container(image, Some("Always"));
        let (m, p) = (&manager, p.clone());
        async move { m.ensure_image_exists(&p, &c, None, &[]).await }
    };
    assert!(pull("a:1").await.is_ok());
    assert!(pull("b:1").await.is_ok());
    let err = pull("c:1").await.unwrap_err();
    assert_eq!(
        err,
        ImageError::new(ImageErrorReason::ErrImagePull, "pull QPS exceeded")
    );
    assert_eq!(
        messages(&events).last(),
        Some(&pair(
            "Failed",
            "Failed to pull image \"c:1\": pull QPS exceeded"
        ))
    );
    assert_eq!(
        rt.call_count("PullImage"),
        2,
        "a refused pull never reaches the runtime"
    );
    // One token per second: another image may be pulled after a second.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(pull("d:1").await.is_ok());
    assert_eq!(rt.call_count("PullImage"), 3);
    // Without a limit nothing is refused.
    let unlimited =
        ImageManager::new(rt.clone(), Arc::new(events.clone()), false, None).with_pull_limit(0, 0);
    for image in ["e:1", "f:1", "g:1", "h:1"] {
        let c = container(image, Some("Always"));
        assert!(
            unlimited
                .ensure_image_exists(&p, &c, None, &[])
                .await
                .is_ok()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn parallel_pulls_run_together() {
    let e = env(FakeRuntime::new(), false, None);
    assert_eq!(two_pulls(&e).await, Duration::from_secs(1));
    let e = env(FakeRuntime::new(), false, Some(1));
    assert_eq!(two_pulls(&e).await, Duration::from_secs(2));
    let e = env(FakeRuntime::new(), false, Some(2));
    assert_eq!(two_pulls(&e).await, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn ensure_image_hands_back_the_record_the_pull_policy_check_read() {
    let e = env(FakeRuntime::with_images(&["busybox:1.0"]), true, None);
    let id = e.rt.add_image("busybox:1.0");
    e.rt.clear_calls();
    let got = e
        .manager
        .ensure_image(&pod(), &container("busybox:1.0", None), None, &[])
        .await
        .unwrap();
    assert_eq!(got.image_ref, id);
    assert_eq!(got.image.as_ref().map(|i| i.id.as_str()), Some(id.as_str()));
    // The record is the one the runtime returns for the image: no second lookup needed.
    let direct = e.manager.image_status(&id).await.unwrap();
    assert_eq!(got.image, direct);
    assert_eq!(
        e.rt.call_count("ImageStatus"),
        2,
        "one here, one for `direct`"
    );
}

#[tokio::test(start_paused = true)]
async fn ensure_image_after_a_pull_hands_back_the_size_lookup_record() {
    let e = env(FakeRuntime::new(), true, None);
    let got = e
        .manager
        .ensure_image(&pod(), &container("busybox:1.0", None), None, &[])
        .await
        .unwrap();
    assert_eq!(e.rt.call_count("PullImage"), 1);
    let image = got.image.expect("the size lookup's record");
    assert_eq!(image.id, got.image_ref);
    // Not present → pulled → size lookup: two ImageStatus calls in all, none left for later.
    assert_eq!(e.rt.call_count("ImageStatus"), 2);
}
