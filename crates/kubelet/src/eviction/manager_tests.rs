//! The manager against injected stats, a recording evictor and a fake reclaimer.

use std::sync::Mutex;

use chrono::DateTime;
use serde_json::json;

use super::*;
use crate::events::CollectingRecorder;
use crate::eviction::thresholds::Amount;
use crate::eviction::{EvictionSettings, Threshold};
use crate::stats::{FsStats, MemoryStats, NodeStats, PodReference, PodStats, Summary, VolumeStats};

fn pod(name: &str, spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": name,
                     "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": spec,
    }))
    .unwrap()
}

#[derive(Default)]
struct Recorder {
    evicted: Mutex<Vec<(String, i64, String, bool)>>,
}

impl PodEvictor for Recorder {
    fn evict(&self, pod: &Pod, grace_period: i64, message: &str, disruption: bool) {
        self.evicted.lock().unwrap().push((
            pod.name().to_owned(),
            grace_period,
            message.to_owned(),
            disruption,
        ));
    }
    fn is_cleaned_up(&self, _uid: &str) -> bool {
        true
    }
}

/// Frees the disk: replaces the stats with a healthy node when called.
struct Reclaimer {
    calls: Mutex<Vec<&'static str>>,
    stats: watch::Sender<Arc<Summary>>,
    after: Option<Summary>,
}

#[async_trait]
impl NodeReclaimer for Reclaimer {
    async fn delete_dead_containers(&self) -> Result<u64, String> {
        self.calls.lock().unwrap().push("containers");
        Ok(0)
    }
    async fn delete_unused_images(&self) -> Result<u64, String> {
        self.calls.lock().unwrap().push("images");
        if let Some(s) = &self.after {
            self.stats.send_replace(Arc::new(s.clone()));
        }
        Ok(1)
    }
}

fn node(mem_avail: u64, disk_avail: u64, secs: i64) -> NodeStats {
    let t = DateTime::from_timestamp(secs, 0).unwrap();
    NodeStats {
        memory: Some(MemoryStats {
            time: t,
            available_bytes: Some(mem_avail),
            working_set_bytes: Some(1000 - mem_avail),
            ..MemoryStats::default()
        }),
        fs: Some(FsStats {
            time: t,
            available_bytes: Some(disk_avail),
            capacity_bytes: Some(1000),
            ..FsStats::default()
        }),
        ..NodeStats::default()
    }
}

fn pstats(name: &str, ws: u64, volume: u64) -> PodStats {
    PodStats {
        pod_ref: PodReference {
            name: name.into(),
            namespace: "default".into(),
            uid: name.into(),
        },
        containers: vec![crate::stats::ContainerStats {
            name: "c".into(),
            memory: Some(MemoryStats {
                working_set_bytes: Some(ws),
                ..MemoryStats::default()
            }),
            ..Default::default()
        }],
        memory: Some(MemoryStats {
            working_set_bytes: Some(ws),
            ..MemoryStats::default()
        }),
        volume_stats: vec![VolumeStats {
            name: "scratch".into(),
            fs: FsStats {
                used_bytes: Some(volume),
                ..FsStats::default()
            },
        }],
        ..PodStats::default()
    }
}

fn threshold(signal: Signal, q: i64, grace: u64) -> Threshold {
    Threshold {
        signal,
        value: Amount::Quantity {
            value: q,
            text: q.to_string(),
        },
        grace_period: Duration::from_secs(grace),
        min_reclaim: None,
    }
}

struct Setup {
    manager: EvictionManager,
    pressure: watch::Receiver<NodePressure>,
    evictor: Arc<Recorder>,
    stats: watch::Sender<Arc<Summary>>,
}

fn setup(
    thresholds: Vec<Threshold>,
    pods: Vec<Pod>,
    summary: Summary,
    reclaimer: Option<Arc<Reclaimer>>,
    stats: Option<watch::Sender<Arc<Summary>>>,
) -> Setup {
    let settings = EvictionSettings {
        thresholds,
        max_pod_grace_period: 20,
        ..EvictionSettings::default()
    };
    setup_with(settings, pods, summary, reclaimer, stats)
}

fn setup_with(
    settings: EvictionSettings,
    pods: Vec<Pod>,
    summary: Summary,
    reclaimer: Option<Arc<Reclaimer>>,
    stats: Option<watch::Sender<Arc<Summary>>>,
) -> Setup {
    let stats = stats.unwrap_or_else(|| watch::channel(Arc::new(Summary::default())).0);
    stats.send_replace(Arc::new(summary));
    let evictor = Arc::new(Recorder::default());
    let (pressure_tx, pressure) = watch::channel(NodePressure::default());
    let manager = EvictionManager::new(
        settings,
        StatsHandle::injected(stats.subscribe()),
        reclaimer
            .into_iter()
            .map(|r| r as Arc<dyn NodeReclaimer>)
            .collect(),
        evictor.clone(),
        Arc::new(move || pods.clone()),
        Arc::new(CollectingRecorder::default()),
        pressure_tx,
    );
    Setup {
        manager,
        pressure,
        evictor,
        stats,
    }
}

fn spec(mem_request: &str, grace: i64) -> serde_json::Value {
    json!({"terminationGracePeriodSeconds": grace,
           "containers": [{"name": "c", "resources": {"requests": {"memory": mem_request}}}],
           "volumes": [{"name": "scratch", "emptyDir": {}}]})
}

#[tokio::test(start_paused = true)]
async fn hard_memory_threshold_evicts_the_top_ranked_non_critical_pod_once() {
    let mut critical = pod("critical", spec("0", 30));
    critical.spec.as_mut().unwrap().priority = Some(2_000_000_000);
    let pods = vec![
        pod("small", spec("0", 30)),
        critical,
        pod("guarded", spec("900", 30)),
    ];
    let summary = Summary {
        node: node(50, 900, 1),
        pods: vec![
            pstats("small", 100, 0),
            pstats("critical", 800, 0),
            pstats("guarded", 300, 0),
        ],
        ..Summary::default()
    };
    let mut s = setup(
        vec![threshold(Signal::MemoryAvailable, 100, 0)],
        pods,
        summary,
        None,
        None,
    );
    let evicted = s.manager.synchronize().await;
    assert_eq!(evicted, vec!["small".to_owned()]);
    let got = s.evictor.evicted.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let (name, grace, msg, disruption) = &got[0];
    assert_eq!((name.as_str(), *grace, *disruption), ("small", 1, true));
    assert!(
        msg.starts_with("The node was low on resource: memory. Threshold quantity: 100, available: 50. Container c was using 100, request is 0"),
        "{msg}"
    );
    assert!(s.pressure.borrow().memory);
    assert!(!s.pressure.borrow().disk);
    // The same stats again: nothing new, no second eviction.
    assert!(s.manager.synchronize().await.is_empty());
}

/// The `pods` system container (the kubepods cgroup) with this working set.
fn pods_cgroup(working_set: u64, secs: i64) -> crate::stats::ContainerStats {
    crate::stats::ContainerStats {
        name: "pods".into(),
        memory: Some(MemoryStats {
            time: DateTime::from_timestamp(secs, 0).unwrap(),
            working_set_bytes: Some(working_set),
            ..MemoryStats::default()
        }),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn pods_over_node_allocatable_are_evicted_with_pods_enforced() {
    // The node has plenty of memory (900 of 1000 available), but the pods use 950 of the
    // 1000 the kubepods cgroup may hold: `allocatableMemory.available` (50) is under the
    // hard `memory.available` threshold (100) copied to it.
    let pods = vec![pod("small", spec("0", 30)), pod("big", spec("0", 30))];
    let mut node_stats = node(900, 900, 1);
    node_stats.system_containers = vec![pods_cgroup(950, 1)];
    let summary = Summary {
        node: node_stats,
        pods: vec![pstats("small", 100, 0), pstats("big", 850, 0)],
        ..Summary::default()
    };
    let hard = vec![threshold(Signal::MemoryAvailable, 100, 0)];
    let enforced = EvictionSettings {
        thresholds: hard.clone(),
        ..EvictionSettings::default()
    }
    .with_node_allocatable(["pods"], Some(1000));
    let mut s = setup_with(enforced, pods.clone(), summary.clone(), None, None);
    assert_eq!(s.manager.synchronize().await, vec!["big".to_owned()]);
    let got = s.evictor.evicted.lock().unwrap().clone();
    let (_, grace, msg, disruption) = &got[0];
    assert_eq!((*grace, *disruption), (1, true), "a hard threshold");
    assert!(
        msg.starts_with("The node was low on resource: memory. Threshold quantity: 100, available: 50. Container c was using 850, request is 0"),
        "{msg}"
    );
    assert!(s.pressure.borrow().memory, "MemoryPressure");

    // Without `pods` in enforceNodeAllocatable there is no such threshold: nothing happens.
    let not_enforced = EvictionSettings {
        thresholds: hard,
        ..EvictionSettings::default()
    }
    .with_node_allocatable(["system-reserved"], Some(1000));
    let mut s = setup_with(not_enforced, pods, summary, None, None);
    assert!(s.manager.synchronize().await.is_empty());
    assert!(!s.pressure.borrow().memory);
}

#[tokio::test(start_paused = true)]
async fn soft_threshold_waits_for_its_grace_period_and_caps_the_pod_grace() {
    let pods = vec![pod("p", spec("0", 60))];
    let mk = |secs| Summary {
        node: node(50, 900, secs),
        pods: vec![pstats("p", 100, 0)],
        ..Summary::default()
    };
    let mut s = setup(
        vec![threshold(Signal::MemoryAvailable, 100, 30)],
        pods,
        mk(1),
        None,
        None,
    );
    assert!(s.manager.synchronize().await.is_empty());
    assert!(
        s.pressure.borrow().memory,
        "pressure before the grace period ends"
    );
    tokio::time::advance(Duration::from_secs(30)).await;
    s.stats.send_replace(Arc::new(mk(2)));
    assert_eq!(s.manager.synchronize().await, vec!["p".to_owned()]);
    assert_eq!(
        s.evictor.evicted.lock().unwrap()[0].1,
        20,
        "min(60, evictionMaxPodGracePeriod)"
    );
}

#[tokio::test(start_paused = true)]
async fn disk_pressure_tries_node_reclaim_first() {
    let pods = vec![pod("writer", spec("0", 30)), pod("idle", spec("0", 30))];
    let low = Summary {
        node: node(900, 10, 1),
        pods: vec![pstats("writer", 0, 500), pstats("idle", 0, 1)],
        ..Summary::default()
    };
    let healthy = Summary {
        node: node(900, 600, 2),
        ..low.clone()
    };
    // Reclaim frees enough: nobody is evicted.
    let (tx, _) = watch::channel(Arc::new(Summary::default()));
    let reclaimer = Arc::new(Reclaimer {
        calls: Mutex::default(),
        stats: tx.clone(),
        after: Some(healthy),
    });
    let mut s = setup(
        vec![threshold(Signal::NodeFsAvailable, 100, 0)],
        pods.clone(),
        low.clone(),
        Some(reclaimer.clone()),
        Some(tx),
    );
    assert!(s.manager.synchronize().await.is_empty());
    assert_eq!(*reclaimer.calls.lock().unwrap(), ["containers", "images"]);
    assert!(s.evictor.evicted.lock().unwrap().is_empty());
    assert!(s.pressure.borrow().disk);

    // Reclaim frees nothing: the biggest disk user goes.
    let (tx, _) = watch::channel(Arc::new(Summary::default()));
    let reclaimer = Arc::new(Reclaimer {
        calls: Mutex::default(),
        stats: tx.clone(),
        after: None,
    });
    let mut s = setup(
        vec![threshold(Signal::NodeFsAvailable, 100, 0)],
        pods,
        low,
        Some(reclaimer.clone()),
        Some(tx),
    );
    assert_eq!(s.manager.synchronize().await, vec!["writer".to_owned()]);
    assert_eq!(reclaimer.calls.lock().unwrap().len(), 2);
    let msg = s.evictor.evicted.lock().unwrap()[0].2.clone();
    assert!(
        msg.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: 100, available: 10. "),
        "{msg}"
    );
}

#[tokio::test(start_paused = true)]
async fn local_storage_limit_evicts_without_any_threshold() {
    let pods = vec![
        pod(
            "capped",
            json!({"containers": [{"name": "c"}], "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "100"}}]}),
        ),
        pod("free", spec("0", 30)),
    ];
    let summary = Summary {
        node: node(900, 900, 1),
        pods: vec![pstats("capped", 0, 200), pstats("free", 0, 5000)],
        ..Summary::default()
    };
    let mut s = setup(Vec::new(), pods, summary, None, None);
    assert_eq!(s.manager.synchronize().await, vec!["capped".to_owned()]);
    let got = s.evictor.evicted.lock().unwrap()[0].clone();
    assert_eq!(
        (got.1, got.2.as_str(), got.3),
        (
            1,
            "Usage of EmptyDir volume \"scratch\" exceeds the limit \"100\". ",
            false
        )
    );
}

#[test]
fn admission_under_pressure_as_upstream() {
    let (tx, rx) = watch::channel(NodePressure::default());
    let admit = EvictionAdmit { pressure: rx };
    let best_effort = pod("be", json!({"containers": [{"name": "c"}]}));
    let tolerant = pod(
        "tol",
        json!({"containers": [{"name": "c"}],
               "tolerations": [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}]}),
    );
    let burstable = pod("bu", spec("10Mi", 30));
    let mut critical = pod("crit", json!({"containers": [{"name": "c"}]}));
    critical.spec.as_mut().unwrap().priority = Some(2_000_000_100);
    let ok = |p: &Pod| admit.admit(p, &[]).is_ok();

    assert!(ok(&best_effort));
    tx.send_replace(NodePressure {
        memory: true,
        ..NodePressure::default()
    });
    let err = admit.admit(&best_effort, &[]).unwrap_err();
    assert_eq!(err.reason, "Evicted");
    assert_eq!(err.message, "The node had condition: [MemoryPressure]. ");
    assert!(ok(&tolerant) && ok(&burstable) && ok(&critical));

    tx.send_replace(NodePressure {
        memory: true,
        disk: true,
        pid: false,
    });
    assert!(!ok(&tolerant) && !ok(&burstable) && ok(&critical));
    assert_eq!(
        admit.admit(&burstable, &[]).unwrap_err().message,
        "The node had condition: [MemoryPressure DiskPressure]. "
    );
    tx.send_replace(NodePressure {
        pid: true,
        ..NodePressure::default()
    });
    assert_eq!(
        admit.admit(&burstable, &[]).unwrap_err().message,
        "The node had condition: [PIDPressure]. "
    );
}
