//! Scheduler decisions without an API server: which pods get pushed when.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

struct Fixture {
    sched: Scheduler,
    status: StatusManager,
    targets: Arc<Mutex<HashMap<String, StatusTarget>>>,
    reclaimed: Arc<AtomicBool>,
}

fn fixture() -> Fixture {
    let status = StatusManager::new();
    let targets: Arc<Mutex<HashMap<String, StatusTarget>>> = Arc::default();
    let reclaimed = Arc::new(AtomicBool::new(false));
    let t = targets.clone();
    let r = reclaimed.clone();
    let sched = Scheduler {
        status: status.clone(),
        lookup: Arc::new(move |uid| t.lock().unwrap().get(uid).cloned()),
        can_be_deleted: Arc::new(move |_| r.load(Ordering::SeqCst)),
        settings: ApiSyncSettings::default(),
        pods: HashMap::new(),
    };
    Fixture {
        sched,
        status,
        targets,
        reclaimed,
    }
}

impl Fixture {
    fn set(&self, uid: &str, phase: &str) {
        let pod = Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                name: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        self.status.set_pod_status(
            &pod,
            PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            },
        );
    }

    fn target(&self, uid: &str, api_uid: &str) {
        self.targets.lock().unwrap().insert(
            uid.into(),
            StatusTarget {
                namespace: "default".into(),
                name: uid.into(),
                api_uid: api_uid.into(),
                ..StatusTarget::default()
            },
        );
    }

    fn plan(&mut self, full: bool, now: Instant) -> Vec<String> {
        self.sched
            .plan(full, 8, now)
            .into_iter()
            .map(|j| j.uid)
            .collect()
    }

    fn finish(&mut self, uid: &str, outcome: Outcome, now: Instant) {
        let v = self.status.get_versioned(uid).unwrap().version;
        self.finish_version(uid, v, outcome, false, now);
    }

    fn finish_version(
        &mut self,
        uid: &str,
        version: u64,
        outcome: Outcome,
        for_deletion: bool,
        now: Instant,
    ) {
        self.sched.record(
            Finished {
                uid: uid.into(),
                version,
                api_uid: self.targets.lock().unwrap()[uid].api_uid.clone(),
                for_deletion,
                outcome,
            },
            now,
        );
    }
}

fn synced(deleting: bool, deleted: bool) -> Outcome {
    Outcome::Synced {
        patched: true,
        deleting,
        deleted,
        written: None,
    }
}

fn failed() -> Outcome {
    Outcome::Failed {
        synced: false,
        deleting: false,
        error: ApiSyncError::Get {
            pod: "default/x".into(),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        },
    }
}

#[test]
fn new_versions_are_pushed_once_oldest_first_and_one_at_a_time() {
    let mut f = fixture();
    let now = Instant::now();
    for uid in ["b", "a", "c"] {
        f.set(uid, "Pending");
        f.target(uid, &format!("api-{uid}"));
    }
    assert_eq!(f.plan(false, now), ["b", "a", "c"]);
    // In flight: not scheduled again even with a newer version.
    f.set("a", "Running");
    assert!(f.plan(false, now).is_empty());
    // The push of the older version finishes: the newer one goes next.
    f.finish_version("a", 2, synced(false, false), false, now);
    assert_eq!(f.plan(false, now), ["a"]);
    f.finish("a", synced(false, false), now);
    f.finish("b", synced(false, false), now);
    f.finish("c", synced(false, false), now);
    assert!(f.plan(false, now).is_empty());
    assert!(f.plan(true, now).is_empty());
}

#[test]
fn capacity_bounds_the_jobs_of_one_pass() {
    let mut f = fixture();
    for i in 0..20 {
        let uid = format!("p{i}");
        f.set(&uid, "Pending");
        f.target(&uid, &uid);
    }
    assert_eq!(f.sched.plan(false, 4, Instant::now()).len(), 4);
    assert_eq!(f.sched.plan(false, 100, Instant::now()).len(), 16);
}

#[test]
fn static_pod_without_mirror_waits_for_its_target() {
    let mut f = fixture();
    let now = Instant::now();
    f.set("s", "Running");
    assert!(f.plan(false, now).is_empty());
    assert!(f.plan(true, now).is_empty());
    f.target("s", "mirror-1");
    assert_eq!(f.plan(false, now), ["s"]);
    f.finish("s", synced(false, false), now);
    // The mirror pod was recreated: the full pass notices the new object.
    f.target("s", "mirror-2");
    assert!(f.plan(false, now).is_empty());
    assert_eq!(f.plan(true, now), ["s"]);
}

#[test]
fn full_pass_reconciles_when_the_api_copy_differs() {
    let mut f = fixture();
    let now = Instant::now();
    f.set("p", "Running");
    f.target("p", "p");
    assert_eq!(f.plan(false, now), ["p"]);
    f.finish("p", synced(false, false), now);
    let ours = f.status.get_pod_status("p").unwrap();
    f.targets.lock().unwrap().get_mut("p").unwrap().api_status = Some(ours.clone());
    assert!(f.plan(true, now).is_empty());
    let mut theirs = ours;
    theirs.conditions = Some(vec![PodCondition {
        type_: "example.com/Gate".into(),
        status: "True".into(),
        ..PodCondition::default()
    }]);
    f.targets.lock().unwrap().get_mut("p").unwrap().api_status = Some(theirs.clone());
    assert!(
        f.plan(true, now).is_empty(),
        "foreign conditions are not ours to fix"
    );
    theirs.phase = Some("Pending".into());
    f.targets.lock().unwrap().get_mut("p").unwrap().api_status = Some(theirs);
    assert!(
        f.plan(false, now).is_empty(),
        "only the full pass reconciles"
    );
    assert_eq!(f.plan(true, now), ["p"]);
}

#[test]
fn failures_back_off_per_pod_and_recovery_releases_everyone() {
    let mut f = fixture();
    let now = Instant::now();
    for uid in ["a", "b"] {
        f.set(uid, "Running");
        f.target(uid, uid);
    }
    assert_eq!(f.plan(false, now), ["a", "b"]);
    f.finish("a", failed(), now);
    f.finish("b", failed(), now);
    assert!(f.plan(false, now).is_empty());
    let wake = f.sched.next_wake(now, now + Duration::from_secs(10));
    assert_eq!(wake, now + Duration::from_millis(200));
    let later = now + Duration::from_millis(200);
    assert_eq!(f.plan(false, later), ["a", "b"]);
    f.finish("a", failed(), later);
    f.finish("b", failed(), later);
    // Doubled: not due 200 ms later.
    assert!(f.plan(false, later + Duration::from_millis(200)).is_empty());
    // A success (here a new pod's) shows the API is back: the others go at once.
    f.set("c", "Running");
    f.target("c", "c");
    let t = later + Duration::from_millis(100);
    assert_eq!(f.plan(false, t), ["c"]);
    f.finish("c", synced(false, false), t);
    assert_eq!(f.plan(false, t), ["a", "b"]);
}

#[test]
fn deletion_waits_for_reclaim_then_is_scheduled_once_per_period() {
    let mut f = fixture();
    let now = Instant::now();
    f.set("p", "Succeeded");
    f.target("p", "p");
    assert_eq!(f.plan(false, now), ["p"]);
    // The GET showed a deletionTimestamp; the worker is not done.
    f.finish("p", synced(true, false), now);
    assert!(f.plan(false, now).is_empty());
    assert_eq!(
        f.sched.next_wake(now, now + Duration::from_secs(10)),
        now + Duration::from_secs(1),
        "deleting pods are polled"
    );
    f.reclaimed.store(true, Ordering::SeqCst);
    let jobs = f.sched.plan(false, 8, now);
    assert_eq!(jobs.len(), 1);
    assert!(jobs[0].for_deletion);
    // The API phase was not terminal yet: no delete; not retried at every poll.
    let v = f.status.get_versioned("p").unwrap().version;
    f.finish_version("p", v, synced(true, false), true, now);
    assert!(f.plan(false, now + Duration::from_secs(1)).is_empty());
    assert_eq!(f.plan(false, now + Duration::from_secs(10)), ["p"]);
    f.finish_version(
        "p",
        v,
        synced(true, true),
        true,
        now + Duration::from_secs(10),
    );
    // Deleted: forgotten, whatever comes next.
    f.set("p", "Failed");
    assert!(f.plan(true, now + Duration::from_secs(20)).is_empty());
    f.status.delete("p");
    f.plan(true, now + Duration::from_secs(20));
    assert!(f.sched.pods.is_empty());
}

#[test]
fn pods_seen_deleting_by_the_source_are_deleted_on_the_full_pass() {
    let mut f = fixture();
    let now = Instant::now();
    f.set("p", "Failed");
    f.target("p", "p");
    assert_eq!(f.plan(false, now), ["p"]);
    f.finish("p", synced(false, false), now);
    f.reclaimed.store(true, Ordering::SeqCst);
    assert!(f.plan(true, now).is_empty(), "not being deleted");
    f.targets.lock().unwrap().get_mut("p").unwrap().deleting = true;
    assert_eq!(f.plan(true, now), ["p"]);
}

#[test]
fn gone_pods_are_not_fetched_again_for_the_same_version() {
    let mut f = fixture();
    let now = Instant::now();
    f.set("p", "Running");
    f.target("p", "p");
    assert_eq!(f.plan(false, now), ["p"]);
    f.finish(
        "p",
        Outcome::Gone {
            reason: "not found",
        },
        now,
    );
    assert!(f.plan(false, now).is_empty());
    assert!(f.plan(true, now).is_empty());
    f.set("p", "Succeeded");
    assert_eq!(f.plan(false, now), ["p"]);
}
