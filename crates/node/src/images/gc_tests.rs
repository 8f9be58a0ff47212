//! Tests of the image GC: selection tables and runs against the fake runtime.

use super::*;
use crate::events::CollectingRecorder;
use rkubelet_cri::api;
use rkubelet_cri::fake::FakeRuntime;

fn rec(t0: Instant, detected_s: u64, used_s: Option<u64>, size: u64, pinned: bool) -> ImageRecord {
    ImageRecord {
        first_detected: t0 + Duration::from_secs(detected_s),
        last_used: used_s.map(|s| t0 + Duration::from_secs(s)),
        size,
        pinned,
    }
}

fn ids(v: &[&Candidate]) -> Vec<String> {
    v.iter().map(|c| c.id.clone()).collect()
}

#[test]
fn eviction_order_skips_in_use_and_pinned_and_sorts_lru() {
    let t0 = Instant::now();
    let records: HashMap<String, ImageRecord> = [
        ("used-recently", rec(t0, 0, Some(50), 1, false)),
        ("used-long-ago", rec(t0, 0, Some(10), 1, false)),
        ("never-used-late", rec(t0, 20, None, 1, false)),
        ("never-used-early", rec(t0, 5, None, 1, false)),
        ("in-use", rec(t0, 0, Some(60), 1, false)),
        ("pinned", rec(t0, 0, None, 1, true)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let in_use: HashSet<String> = ["in-use".to_owned()].into();
    let order: Vec<String> = eviction_order(&records, &in_use)
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(
        order,
        vec![
            "never-used-early",
            "never-used-late",
            "used-long-ago",
            "used-recently"
        ]
    );
}

#[test]
fn space_selection_table() {
    let t0 = Instant::now();
    let now = t0 + Duration::from_secs(1000);
    let cand = |id: &str, detected_s: u64, used_s: Option<u64>, size: u64| Candidate {
        id: id.to_owned(),
        record: rec(t0, detected_s, used_s, size, false),
    };
    let candidates = vec![
        cand("a", 0, None, 100),
        cand("fresh", 950, None, 1000), // detected 50s ago: younger than min age
        cand("b", 0, Some(10), 200),
        cand("c", 0, Some(20), 300),
        cand("used-now", 0, Some(1000), 400),
    ];
    let min_age = Duration::from_secs(120);
    #[rustfmt::skip]
    let cases: Vec<(u64, Duration, Vec<&str>)> = vec![
        (50, min_age, vec!["a"]),
        (100, min_age, vec!["a"]),
        (101, min_age, vec!["a", "b"]),
        (550, min_age, vec!["a", "b", "c"]),
        // Not enough eligible: everything eligible is selected, never the fresh or in-use one.
        (u64::MAX, min_age, vec!["a", "b", "c"]),
        // Without a minimum age the fresh image is eligible too.
        (u64::MAX, Duration::ZERO, vec!["a", "fresh", "b", "c"]),
    ];
    for (want_bytes, age, want) in cases {
        let got = select_for_space(&candidates, want_bytes, now, age);
        assert_eq!(ids(&got), want, "bytes {want_bytes} min age {age:?}");
    }
}

#[test]
fn max_age_selection() {
    let t0 = Instant::now();
    let cand = |id: &str, used_s: Option<u64>| Candidate {
        id: id.to_owned(),
        record: rec(t0, 0, used_s, 1, false),
    };
    let candidates = vec![
        cand("never", None),
        cand("old", Some(10)),
        cand("recent", Some(500)),
    ];
    let max_age = Duration::from_secs(300);
    let at = |s: u64| t0 + Duration::from_secs(s);
    assert!(
        select_old(&candidates, at(1000), t0, Duration::ZERO).is_empty(),
        "off"
    );
    assert!(
        select_old(&candidates, at(300), t0, max_age).is_empty(),
        "the kubelet has not run longer than max age yet"
    );
    assert_eq!(
        ids(&select_old(&candidates, at(400), t0, max_age)),
        vec!["never", "old"]
    );
    assert_eq!(
        ids(&select_old(&candidates, at(801), t0, max_age)),
        vec!["never", "old", "recent"]
    );
}

#[test]
fn amount_to_free_table() {
    let policy = ImageGcPolicy {
        high_threshold_percent: 85,
        low_threshold_percent: 80,
        ..ImageGcPolicy::default()
    };
    #[rustfmt::skip]
    let cases: Vec<(u64, u64, Option<u64>)> = vec![
        (1000, 200, None),      // 80% used: below the high threshold
        (1000, 151, Some(49)),  // 151*100/1000 = 15% free → 85% used (integer math as upstream)
        (1000, 150, Some(50)),  // 85%: free down to 80% used, i.e. 200 available
        (1000, 0, Some(200)),
        (1000, 2000, None),     // available is clamped to the capacity
        (0, 0, None),
    ];
    for (cap, avail, want) in cases {
        assert_eq!(amount_to_free(cap, avail, &policy), want, "{cap} {avail}");
    }
}

#[test]
fn policy_validation_names_the_fields() {
    let p = |high, low| ImageGcPolicy {
        high_threshold_percent: high,
        low_threshold_percent: low,
        ..ImageGcPolicy::default()
    };
    assert!(p(85, 80).validate().is_ok());
    assert_eq!(
        p(101, 80).validate().unwrap_err().to_string(),
        "invalid imageGCHighThresholdPercent 101, must be in range [0-100]"
    );
    assert_eq!(
        p(85, -1).validate().unwrap_err().to_string(),
        "invalid imageGCLowThresholdPercent -1, must be in range [0-100]"
    );
    assert_eq!(
        p(50, 60).validate().unwrap_err().to_string(),
        "imageGCLowThresholdPercent 60 can not be higher than imageGCHighThresholdPercent 50"
    );
    assert!(p(100, 80).disabled());
    assert!(!p(99, 80).disabled());
}

#[test]
fn pinned_names_are_normalized() {
    assert_eq!(
        normalize_name("busybox"),
        "docker.io/library/busybox:latest"
    );
    assert_eq!(normalize_name("user/app:1"), "docker.io/user/app:1");
    assert_eq!(
        normalize_name("registry.k8s.io/pause:3.10"),
        "registry.k8s.io/pause:3.10"
    );
    assert_eq!(
        normalize_name("localhost:5000/a"),
        "localhost:5000/a:latest"
    );
}

struct Env {
    rt: Arc<FakeRuntime>,
    events: CollectingRecorder,
    gc: ImageGc,
}

fn env(images: &[&str], policy: ImageGcPolicy, usage: FsUsage) -> Env {
    let rt = Arc::new(FakeRuntime::with_images(images));
    let events = CollectingRecorder::default();
    let gc = ImageGc::new(
        rt.clone(),
        rt.clone(),
        ImageGcConfig {
            policy,
            pinned_images: vec!["registry.k8s.io/pause:3.10".to_owned()],
        },
        Arc::new(move |_: &Path| Ok(usage)),
        Arc::new(events.clone()),
    )
    .unwrap();
    Env { rt, events, gc }
}

/// Creates an exited container using `image` (in use although not running).
async fn exited_container(rt: &FakeRuntime, image: &str) {
    let sb = rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: "p".to_owned(),
                    uid: "u".to_owned(),
                    namespace: "ns".to_owned(),
                    attempt: 0,
                }),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let id = rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: sb,
            config: Some(api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "c".to_owned(),
                    attempt: 0,
                }),
                image: Some(ImageSpec {
                    image: image.to_owned(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sandbox_config: None,
        })
        .await
        .unwrap()
        .container_id;
    rt.start_container(api::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    assert!(rt.exit_container(&id, 0));
}

const FULL: FsUsage = FsUsage {
    capacity: 100,
    available: 10,
};

#[tokio::test(start_paused = true)]
async fn gc_frees_lru_unused_images_only_after_min_age() {
    let e = env(
        &[
            "busybox:1.36",
            "old:1",
            "older:1",
            "registry.k8s.io/pause:3.10",
        ],
        ImageGcPolicy::default(),
        FULL,
    );
    exited_container(&e.rt, "busybox:1.36").await;
    // First run: every image is new (younger than 2m): nothing can go, the event says so.
    let err = e.gc.garbage_collect().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Failed to garbage collect required amount of images. Attempted to free 10 bytes, but only found 0 bytes eligible to free."
    );
    let failed = e.events.with_reason("FreeDiskSpaceFailed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].message, err.to_string());
    assert_eq!(e.rt.images().len(), 4);

    // Past the minimum age: one unused image (10 bytes wanted) is enough; the in-use busybox
    // and the pinned pause image stay.
    tokio::time::advance(Duration::from_secs(121)).await;
    e.gc.garbage_collect().await.unwrap();
    let left = e.rt.images();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(e.rt.has_image("busybox:1.36"));
    assert!(e.rt.has_image("registry.k8s.io/pause:3.10"));
    // delete_unused_images removes the rest of the unused ones and reports their size.
    let remaining_unused = ["old:1", "older:1"]
        .into_iter()
        .find(|i| e.rt.has_image(i))
        .unwrap();
    let size = e.gc.records().await.values().map(|r| r.size).max().unwrap();
    let freed = e.gc.delete_unused_images().await.unwrap();
    assert!(!e.rt.has_image(remaining_unused));
    assert!(freed > 0 && freed <= size, "{freed}");
    assert_eq!(e.rt.images().len(), 2);
    assert_eq!(e.gc.records().await.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn below_threshold_nothing_goes_but_max_age_applies() {
    let policy = ImageGcPolicy {
        min_age: Duration::from_secs(1),
        max_age: Duration::from_secs(600),
        ..ImageGcPolicy::default()
    };
    let roomy = FsUsage {
        capacity: 100,
        available: 90,
    };
    let e = env(&["busybox:1.36", "stale:1"], policy, roomy);
    exited_container(&e.rt, "busybox:1.36").await;
    e.gc.garbage_collect().await.unwrap();
    tokio::time::advance(Duration::from_secs(300)).await;
    e.gc.garbage_collect().await.unwrap();
    assert_eq!(
        e.rt.images().len(),
        2,
        "below the threshold and not past max age"
    );
    tokio::time::advance(Duration::from_secs(301)).await;
    e.gc.garbage_collect().await.unwrap();
    assert_eq!(e.rt.images().len(), 1);
    assert!(
        e.rt.has_image("busybox:1.36"),
        "in-use images never age out"
    );
}

#[tokio::test(start_paused = true)]
async fn periodic_loop_reports_repeated_failures() {
    let e = env(&["busybox:1.36"], ImageGcPolicy::default(), FULL);
    for _ in 0..2 {
        e.rt.fail_next("ImageFsInfo", CriError::unknown("ImageFsInfo", "boom"));
    }
    let cancel = CancellationToken::new();
    let task = tokio::spawn(e.gc.clone().run(Duration::from_secs(300), cancel.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        e.events.with_reason("ImageGCFailed").is_empty(),
        "one failure is only logged"
    );
    tokio::time::sleep(Duration::from_secs(300)).await;
    let failed = e.events.with_reason("ImageGCFailed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].message.contains("boom"), "{failed:?}");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn disabled_gc_idles_until_cancelled_and_touches_nothing() {
    let policy = ImageGcPolicy {
        high_threshold_percent: 100,
        low_threshold_percent: 99,
        ..ImageGcPolicy::default()
    };
    let e = env(&["busybox:1.36"], policy, FULL);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(e.gc.clone().run(Duration::from_secs(300), cancel.clone()));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(
        !task.is_finished(),
        "a disabled GC still runs until shutdown"
    );
    assert_eq!(
        e.rt.call_count("ImageFsInfo"),
        0,
        "and never looks at the disk"
    );
    cancel.cancel();
    task.await.unwrap();
}
