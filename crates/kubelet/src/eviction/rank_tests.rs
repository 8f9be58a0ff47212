//! Ranking tables, eviction messages, local storage limits and critical pods.

use chrono::DateTime;
use serde_json::json;

use super::*;
use crate::eviction::thresholds::{Amount, Observation};
use crate::stats::{ContainerStats, MemoryStats, PodReference, ProcessStats, VolumeStats};

fn pod(name: &str, spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": name,
                     "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": spec,
    }))
    .unwrap()
}

fn fs(used: u64) -> Option<FsStats> {
    Some(FsStats {
        used_bytes: Some(used),
        inodes_used: Some(used / 100),
        ..FsStats::default()
    })
}

fn stats(name: &str, ws: u64, rootfs: u64, logs: u64, volume: u64, procs: u64) -> PodStats {
    PodStats {
        pod_ref: PodReference {
            name: name.into(),
            namespace: "default".into(),
            uid: name.into(),
        },
        containers: vec![ContainerStats {
            name: "c".into(),
            memory: Some(MemoryStats {
                working_set_bytes: Some(ws),
                ..MemoryStats::default()
            }),
            rootfs: fs(rootfs),
            logs: fs(logs),
            ..ContainerStats::default()
        }],
        memory: Some(MemoryStats {
            working_set_bytes: Some(ws),
            ..MemoryStats::default()
        }),
        volume_stats: vec![VolumeStats {
            name: "scratch".into(),
            fs: fs(volume).unwrap_or_default(),
        }],
        ephemeral_storage: fs(rootfs + logs + volume),
        process_stats: Some(ProcessStats {
            process_count: Some(procs),
        }),
        ..PodStats::default()
    }
}

fn container(requests: serde_json::Value, priority: i32) -> serde_json::Value {
    json!({"priority": priority, "containers": [{"name": "c", "resources": {"requests": requests}}],
           "volumes": [{"name": "scratch", "emptyDir": {}}]})
}

fn names(pods: &[Pod]) -> Vec<&str> {
    pods.iter().map(|p| p.name()).collect()
}

#[test]
fn memory_ranking_exceeds_requests_then_priority_then_usage_over_request() {
    // (name, memory request, priority, working set)
    let table = [
        ("under-request", "500", 0, 400u64),
        ("over-high-prio", "100", 1000, 300),
        ("over-low-prio-small", "100", 0, 200),
        ("over-low-prio-big", "100", 0, 900),
        ("besteffort", "0", 0, 150),
    ];
    let mut pods: Vec<Pod> = table
        .iter()
        .map(|(n, r, p, _)| pod(n, container(json!({"memory": r}), *p)))
        .collect();
    let mut summary = Summary::default();
    for (n, _, _, ws) in table {
        summary.pods.push(stats(n, ws, 0, 0, 0, 0));
    }
    pods.push(pod("no-stats", container(json!({}), 5000)));
    rank_pods(&mut pods, Signal::MemoryAvailable, &summary);
    assert_eq!(
        names(&pods),
        [
            "no-stats",
            "over-low-prio-big",
            "besteffort",
            "over-low-prio-small",
            "over-high-prio",
            "under-request"
        ]
    );
}

#[test]
fn disk_ranking_measures_what_the_filesystem_holds() {
    // (name, ephemeral-storage request, rootfs, logs, emptyDir)
    let table = [
        ("big-layer", "0", 5000u64, 0u64, 0u64),
        ("big-volume", "0", 0, 100, 3000),
        ("requested", "10000", 0, 0, 8000),
        ("small", "0", 10, 10, 10),
    ];
    let mut summary = Summary::default();
    let mut pods = Vec::new();
    for (n, r, root, logs, vol) in table {
        pods.push(pod(n, container(json!({"ephemeral-storage": r}), 0)));
        summary.pods.push(stats(n, 0, root, logs, vol, 0));
    }
    // One filesystem: layers, logs and volumes all count.
    rank_pods(&mut pods, Signal::NodeFsAvailable, &summary);
    assert_eq!(
        names(&pods),
        ["big-layer", "big-volume", "small", "requested"]
    );
    // Dedicated imagefs: nodefs counts logs + volumes, imagefs the writable layers.
    summary.dedicated_image_fs = true;
    rank_pods(&mut pods, Signal::NodeFsAvailable, &summary);
    assert_eq!(
        names(&pods),
        ["big-volume", "small", "big-layer", "requested"]
    );
    rank_pods(&mut pods, Signal::ImageFsAvailable, &summary);
    assert_eq!(names(&pods)[0], "big-layer");
    // Inodes: no requests, most inodes first.
    summary.dedicated_image_fs = false;
    rank_pods(&mut pods, Signal::NodeFsInodesFree, &summary);
    assert_eq!(
        names(&pods),
        ["requested", "big-layer", "big-volume", "small"]
    );
}

#[test]
fn pid_ranking_priority_then_process_count() {
    let table = [
        ("few", 0, 3u64),
        ("many", 0, 30),
        ("many-important", 100, 300),
    ];
    let mut summary = Summary::default();
    let mut pods = Vec::new();
    for (n, prio, procs) in table {
        pods.push(pod(n, container(json!({}), prio)));
        summary.pods.push(stats(n, 0, 0, 0, 0, procs));
    }
    rank_pods(&mut pods, Signal::PidAvailable, &summary);
    assert_eq!(names(&pods), ["many", "few", "many-important"]);
}

#[test]
fn eviction_messages_as_upstream() {
    let p = pod("hog", container(json!({"memory": "100Mi"}), 0));
    let summary = Summary {
        pods: vec![stats("hog", 300 * 1024 * 1024, 4096, 1024, 0, 0)],
        ..Summary::default()
    };
    let obs: Observations = [(
        Signal::MemoryAvailable,
        Observation {
            available: 50 * 1024 * 1024,
            capacity: 1 << 30,
            time: DateTime::from_timestamp(1, 0).unwrap(),
        },
    )]
    .into();
    let t = Threshold {
        signal: Signal::MemoryAvailable,
        value: Amount::Quantity {
            value: 100 << 20,
            text: "100Mi".into(),
        },
        grace_period: std::time::Duration::ZERO,
        min_reclaim: None,
    };
    assert_eq!(
        eviction_message(Resource::Memory, &p, &summary, &[t], &obs),
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container c was using 300Mi, request is 100Mi, has larger consumption of memory. "
    );
    // Disk: usage is writable layer + logs; no threshold observation → no threshold part.
    assert_eq!(
        eviction_message(Resource::EphemeralStorage, &p, &summary, &[], &obs),
        "The node was low on resource: ephemeral-storage. Container c was using 5Ki, request is 0, has larger consumption of ephemeral-storage. "
    );
}

#[test]
fn local_storage_limits_emptydir_pod_and_container() {
    let ed = pod(
        "ed",
        json!({"containers": [{"name": "c"}], "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Ki"}}]}),
    );
    let s = stats("ed", 0, 0, 0, 2048, 0);
    assert_eq!(
        local_storage_violation(&ed, &s, false).as_deref(),
        Some("Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Ki\". ")
    );
    assert_eq!(
        local_storage_violation(&ed, &stats("ed", 0, 0, 0, 1024, 0), false),
        None
    );

    let lim = |l: &str| {
        pod(
            "lim",
            json!({"containers": [{"name": "c", "resources": {"limits": {"ephemeral-storage": l}}}],
                   "volumes": [{"name": "scratch", "emptyDir": {}}]}),
        )
    };
    // Pod total (layer 1000 + logs 100 + volume 5000) over the 4Ki sum of limits.
    assert_eq!(
        local_storage_violation(&lim("4Ki"), &stats("lim", 0, 1000, 100, 5000, 0), false)
            .as_deref(),
        Some("Pod ephemeral local storage usage exceeds the total limit of containers 4Ki. ")
    );
    // Container: layer + logs over its limit, pod total under it.
    assert_eq!(
        local_storage_violation(&lim("1000"), &stats("lim", 0, 900, 200, 0, 0), false).as_deref(),
        Some("Pod ephemeral local storage usage exceeds the total limit of containers 1000. ")
    );
    let two = pod(
        "two",
        json!({"containers": [{"name": "c", "resources": {"limits": {"ephemeral-storage": "1000"}}},
                              {"name": "d", "resources": {"limits": {"ephemeral-storage": "100000"}}}]}),
    );
    assert_eq!(
        local_storage_violation(&two, &stats("two", 0, 900, 200, 0, 0), false).as_deref(),
        Some("Container c exceeded its local ephemeral storage limit \"1000\". ")
    );
    // With a dedicated imagefs the writable layer does not count for the container.
    assert_eq!(
        local_storage_violation(&two, &stats("two", 0, 900, 200, 0, 0), true),
        None
    );
}

#[test]
fn critical_pods_static_mirror_and_system_priority() {
    let mut p = pod("x", json!({"containers": []}));
    assert!(!is_critical_pod(&p));
    p.spec.as_mut().unwrap().priority = Some(SYSTEM_CRITICAL_PRIORITY);
    assert!(is_critical_pod(&p));
    let mut s = pod("s", json!({"containers": []}));
    s.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/config.source".into(), "file".into());
    assert!(is_critical_pod(&s));
    let mut m = pod("m", json!({"containers": []}));
    m.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/config.mirror".into(), "hash".into());
    assert!(is_critical_pod(&m));
}
