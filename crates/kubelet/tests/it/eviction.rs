//! The eviction manager inside a whole agent on the `FakeRuntime`, with paused time and
//! injected stats: a memory threshold evicts the right pod (Failed/Evicted, upstream message)
//! while the other keeps running, admission refuses BestEffort pods under memory pressure,
//! and disk pressure tries node-level reclaim before evicting.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::DateTime;
use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig, AgentDeps};
use kubelet::config::ThresholdValue;
use kubelet::events::CollectingRecorder;
use kubelet::eviction::{
    EvictionSettings, EvictionWiring, NodeReclaimer, StatsSource, parse_thresholds,
};
use kubelet::stats::{
    ContainerStats, FsStats, MemoryStats, NodeStats, PodReference, PodStats, StatsHandle, Summary,
    VolumeStats,
};
use kubelet::types::{PodOp, PodSource, PodUpdate};
use rkubelet_cri::fake::FakeRuntime;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const IMAGE: &str = "docker.io/library/busybox:latest";
const MI: u64 = 1024 * 1024;

fn pod(name: &str, resources: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {
            "nodeName": "node-a",
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": format!("{name}-c"), "image": IMAGE,
                            "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
                            "resources": resources}],
            "volumes": [{"name": "scratch", "emptyDir": {}}]
        }
    }))
    .unwrap()
}

fn uid(p: &Pod) -> &str {
    p.metadata.uid.as_deref().unwrap()
}

struct Harness {
    fake: FakeRuntime,
    _dir: tempfile::TempDir,
    agent: Agent,
    stats: watch::Sender<Arc<Summary>>,
    reclaims: Arc<Reclaimer>,
}

/// Frees the disk (publishes `after`) the first time it is asked to, never again.
struct Reclaimer {
    calls: Mutex<Vec<&'static str>>,
    stats: watch::Sender<Arc<Summary>>,
    after: Mutex<Option<Summary>>,
}

#[async_trait]
impl NodeReclaimer for Reclaimer {
    async fn delete_dead_containers(&self) -> Result<u64, String> {
        self.calls.lock().unwrap().push("containers");
        Ok(0)
    }
    async fn delete_unused_images(&self) -> Result<u64, String> {
        self.calls.lock().unwrap().push("images");
        if let Some(s) = self.after.lock().unwrap().take() {
            self.stats.send_replace(Arc::new(s));
        }
        Ok(0)
    }
}

async fn start(hard: &[(&str, &str)]) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let (stats, rx) = watch::channel(Arc::new(Summary::default()));
    let reclaims = Arc::new(Reclaimer {
        calls: Mutex::default(),
        stats: stats.clone(),
        after: Mutex::default(),
    });
    let hard: BTreeMap<String, ThresholdValue> = hard
        .iter()
        .map(|(k, v)| ((*k).to_owned(), ThresholdValue::parse(v).unwrap()))
        .collect();
    let mut cfg = AgentConfig::for_tests(dir.path(), "node-a");
    cfg.eviction = EvictionWiring {
        stats: StatsSource::Injected(StatsHandle::injected(rx)),
        settings: EvictionSettings {
            thresholds: parse_thresholds(
                &hard,
                &BTreeMap::new(),
                &BTreeMap::new(),
                &BTreeMap::new(),
            )
            .unwrap(),
            monitoring_interval: Duration::from_secs(1),
            pressure_transition_period: Duration::from_secs(60),
            ..EvictionSettings::default()
        },
        extra_reclaimers: vec![reclaims.clone() as Arc<dyn NodeReclaimer>],
    };
    let agent = Agent::start(
        cfg,
        AgentDeps {
            runtime: Arc::new(fake.clone()),
            images: Arc::new(fake.clone()),
            events: Arc::new(CollectingRecorder::default()),
            api: None,
        },
        CancellationToken::new(),
    )
    .await
    .unwrap();
    Harness {
        fake,
        _dir: dir,
        agent,
        stats,
        reclaims,
    }
}

impl Harness {
    async fn set(&self, pods: Vec<Pod>) {
        self.agent
            .source_tx
            .send(PodUpdate::new(PodOp::Set, PodSource::Api, pods))
            .await
            .unwrap();
    }

    fn status(&self, p: &Pod) -> Option<k8s_openapi::api::core::v1::PodStatus> {
        self.agent.status.get_pod_status(uid(p))
    }

    fn running(&self, p: &Pod) -> bool {
        self.status(p).is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.container_statuses
                    .iter()
                    .flatten()
                    .all(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
        })
    }

    fn running_in_runtime(&self, p: &Pod) -> usize {
        self.fake
            .containers()
            .iter()
            .filter(|c| c.labels.get("io.kubernetes.pod.uid").map(String::as_str) == Some(uid(p)))
            .filter(|c| c.state == rkubelet_cri::api::ContainerState::ContainerRunning as i32)
            .count()
    }
}

async fn wait_until(what: &str, limit: Duration, mut pred: impl FnMut() -> bool) {
    let start = Instant::now();
    while !pred() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn node(mem_available: u64, disk_available: u64, secs: i64) -> NodeStats {
    let t = DateTime::from_timestamp(secs, 0).unwrap();
    NodeStats {
        node_name: "node-a".into(),
        memory: Some(MemoryStats {
            time: t,
            available_bytes: Some(mem_available),
            working_set_bytes: Some(4096 * MI - mem_available),
            ..MemoryStats::default()
        }),
        fs: Some(FsStats {
            time: t,
            available_bytes: Some(disk_available),
            capacity_bytes: Some(10_000 * MI),
            inodes: Some(1_000_000),
            inodes_free: Some(900_000),
            ..FsStats::default()
        }),
        ..NodeStats::default()
    }
}

fn pod_stats(p: &Pod, working_set: u64, volume: u64) -> PodStats {
    let c = &p.spec.as_ref().unwrap().containers[0].name;
    let mem = MemoryStats {
        working_set_bytes: Some(working_set),
        ..MemoryStats::default()
    };
    PodStats {
        pod_ref: PodReference {
            name: p.metadata.name.clone().unwrap(),
            namespace: "default".into(),
            uid: uid(p).to_owned(),
        },
        containers: vec![ContainerStats {
            name: c.clone(),
            memory: Some(mem.clone()),
            rootfs: Some(FsStats {
                used_bytes: Some(4096),
                ..FsStats::default()
            }),
            logs: Some(FsStats {
                used_bytes: Some(4096),
                ..FsStats::default()
            }),
            ..ContainerStats::default()
        }],
        memory: Some(mem),
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

#[tokio::test(start_paused = true)]
async fn memory_pressure_evicts_the_best_effort_hog_and_refuses_new_best_effort_pods() {
    let h = start(&[("memory.available", "100Mi")]).await;
    let hog = pod("hog", serde_json::json!({}));
    let calm = pod(
        "calm",
        serde_json::json!({"requests": {"memory": "200Mi"}, "limits": {"memory": "400Mi"}}),
    );
    h.set(vec![hog.clone(), calm.clone()]).await;
    wait_until("both pods running", Duration::from_secs(30), || {
        h.running(&hog) && h.running(&calm)
    })
    .await;
    // Healthy node: nothing happens.
    h.stats.send_replace(Arc::new(Summary {
        node: node(1024 * MI, 5000 * MI, 1),
        pods: vec![pod_stats(&hog, 300 * MI, 0), pod_stats(&calm, 100 * MI, 0)],
        ..Summary::default()
    }));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(h.running(&hog) && h.running(&calm));
    assert!(!h.agent.pressure.borrow().memory);

    h.stats.send_replace(Arc::new(Summary {
        node: node(50 * MI, 5000 * MI, 2),
        pods: vec![pod_stats(&hog, 300 * MI, 0), pod_stats(&calm, 100 * MI, 0)],
        ..Summary::default()
    }));
    wait_until("hog evicted", Duration::from_secs(10), || {
        h.status(&hog)
            .is_some_and(|s| s.reason.as_deref() == Some("Evicted"))
    })
    .await;
    let st = h.status(&hog).unwrap();
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(
        st.message.as_deref(),
        Some(
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container hog-c was using 300Mi, request is 0, has larger consumption of memory. "
        )
    );
    let dt = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("DisruptionTarget condition");
    assert_eq!(dt.reason.as_deref(), Some("TerminationByKubelet"));
    assert!(h.agent.pressure.borrow().memory);
    wait_until("hog's containers stopped", Duration::from_secs(10), || {
        h.running_in_runtime(&hog) == 0
    })
    .await;
    // It stays evicted, the other pod keeps running, and only one pod went.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let st = h.status(&hog).unwrap();
    assert_eq!(
        (st.phase.as_deref(), st.reason.as_deref()),
        (Some("Failed"), Some("Evicted"))
    );
    assert!(h.running(&calm));
    assert_eq!(h.running_in_runtime(&calm), 1);
    assert!(
        h.reclaims.calls.lock().unwrap().is_empty(),
        "no node reclaim for memory"
    );

    // Under memory pressure a new BestEffort pod is refused; a Burstable one is admitted.
    let late = pod("late", serde_json::json!({}));
    let late_burstable = pod("late-b", serde_json::json!({"requests": {"memory": "1Mi"}}));
    h.set(vec![
        hog.clone(),
        calm.clone(),
        late.clone(),
        late_burstable.clone(),
    ])
    .await;
    wait_until("late pods decided", Duration::from_secs(10), || {
        h.status(&late).is_some() && h.running(&late_burstable)
    })
    .await;
    let st = h.status(&late).unwrap();
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(st.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was rejected: The node had condition: [MemoryPressure]. ")
    );
    assert_eq!(h.running_in_runtime(&late), 0);
    h.agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn disk_pressure_reclaims_node_resources_before_evicting_the_biggest_writer() {
    let h = start(&[("nodefs.available", "100Mi")]).await;
    let writer = pod("writer", serde_json::json!({}));
    let idle = pod("idle", serde_json::json!({}));
    h.set(vec![writer.clone(), idle.clone()]).await;
    wait_until("both pods running", Duration::from_secs(30), || {
        h.running(&writer) && h.running(&idle)
    })
    .await;
    let pods = vec![pod_stats(&writer, MI, 150 * MI), pod_stats(&idle, MI, 0)];
    // The first reclaim frees enough.
    *h.reclaims.after.lock().unwrap() = Some(Summary {
        node: node(2048 * MI, 500 * MI, 2),
        pods: pods.clone(),
        ..Summary::default()
    });
    h.stats.send_replace(Arc::new(Summary {
        node: node(2048 * MI, 50 * MI, 1),
        pods: pods.clone(),
        ..Summary::default()
    }));
    wait_until("node reclaim tried", Duration::from_secs(10), || {
        h.reclaims.calls.lock().unwrap().len() >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(*h.reclaims.calls.lock().unwrap(), ["containers", "images"]);
    assert!(h.running(&writer) && h.running(&idle), "reclaim was enough");
    assert!(
        h.agent.pressure.borrow().disk,
        "pressure stays for the transition period"
    );

    // Low again and reclaim frees nothing: the writer goes.
    h.stats.send_replace(Arc::new(Summary {
        node: node(2048 * MI, 50 * MI, 3),
        pods,
        ..Summary::default()
    }));
    wait_until("writer evicted", Duration::from_secs(10), || {
        h.status(&writer)
            .is_some_and(|s| s.reason.as_deref() == Some("Evicted"))
    })
    .await;
    assert_eq!(h.reclaims.calls.lock().unwrap().len(), 4);
    let st = h.status(&writer).unwrap();
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    let msg = st.message.unwrap();
    assert!(
        msg.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: 100Mi, available: 50Mi. Container writer-c was using 8Ki, request is 0, has larger consumption of ephemeral-storage. "),
        "{msg}"
    );
    wait_until("writer stopped", Duration::from_secs(10), || {
        h.running_in_runtime(&writer) == 0
    })
    .await;
    assert!(h.running(&idle));
    // Disk pressure refuses every non-critical pod.
    let late = pod("late", serde_json::json!({"requests": {"memory": "1Mi"}}));
    h.set(vec![writer.clone(), idle.clone(), late.clone()])
        .await;
    wait_until("late pod decided", Duration::from_secs(10), || {
        h.status(&late).is_some()
    })
    .await;
    assert_eq!(
        h.status(&late).unwrap().message.as_deref(),
        Some("Pod was rejected: The node had condition: [DiskPressure]. ")
    );
    h.agent.shutdown().await;
}
