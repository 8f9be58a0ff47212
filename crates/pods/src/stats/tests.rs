//! Summary building from a fake filesystem and CRI stats.

use super::*;
use rkubelet_cri::api as cri;

fn pod(uid: &str, name: &str, spec: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": spec,
    }))
    .unwrap()
}

fn cri_stat(uid: &str, name: &str, ws: u64, cpu: u64, layer: u64) -> cri::ContainerStats {
    cri::ContainerStats {
        attributes: Some(cri::ContainerAttributes {
            id: format!("{uid}-{name}"),
            metadata: Some(cri::ContainerMetadata {
                name: name.to_owned(),
                attempt: 0,
            }),
            labels: [
                (POD_UID_LABEL.to_owned(), uid.to_owned()),
                (CONTAINER_NAME_LABEL.to_owned(), name.to_owned()),
            ]
            .into(),
            annotations: Default::default(),
        }),
        cpu: Some(cri::CpuUsage {
            timestamp: 1,
            usage_core_nano_seconds: Some(cri::UInt64Value { value: cpu }),
            usage_nano_cores: None,
        }),
        memory: Some(cri::MemoryUsage {
            timestamp: 1,
            working_set_bytes: Some(cri::UInt64Value { value: ws }),
            ..Default::default()
        }),
        writable_layer: Some(cri::FilesystemUsage {
            timestamp: 1,
            fs_id: None,
            used_bytes: Some(cri::UInt64Value { value: layer }),
            inodes_used: Some(cri::UInt64Value { value: 3 }),
        }),
        ..Default::default()
    }
}

#[test]
fn summary_from_fake_host_cri_stats_and_pod_cgroups() {
    let fake = FakeFs::default();
    // Node: v1 root memory cgroup + meminfo + pids.
    fake.set_file("/cg/memory/memory.usage_in_bytes", "1000");
    fake.set_file("/cg/memory/memory.stat", "total_inactive_file 400\n");
    fake.set_file("/proc/meminfo", "MemTotal: 10 kB\n");
    fake.set_file("/proc/sys/kernel/pid_max", "1000");
    fake.set_file("/proc/loadavg", "0 0 0 1/120 5");
    let root_fs = FsUsage {
        capacity_bytes: 100_000,
        available_bytes: 40_000,
        used_bytes: 55_000,
        inodes: 1000,
        inodes_free: 900,
    };
    fake.set_fs("/", 1, root_fs);
    fake.set_fs(
        "/images",
        2,
        FsUsage {
            capacity_bytes: 5_000,
            ..root_fs
        },
    );
    // Guaranteed pod with its own cgroup and network; BestEffort pod without one (CRI sums).
    let guaranteed = guaranteed_pod_cgroup(&fake, 42);
    // Start times, host network, the `pods` system container.
    fake.set_file("/proc/stat", "cpu 1 2 3 4\nbtime 1700000000\n");
    fake.set_file(
        "/proc/net/dev",
        "h\nh\n  lo: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n  eth0: 10 1 0 0 0 0 0 0 20 1 0 0 0 0 0 0\n",
    );
    fake.set_file("/cg/memory/kubepods/memory.usage_in_bytes", "900");
    fake.set_file("/cg/memory/kubepods/memory.stat", "total_inactive_file 0\n");
    let best = pod(
        "b1",
        "bpod",
        serde_json::json!({
            "containers": [{"name": "a"}, {"name": "b"}],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "ram", "emptyDir": {"medium": "Memory"}}
            ]
        }),
    );
    fake.set_dir(
        "/var/lib/kubelet/pods/b1/volumes/kubernetes.io~empty-dir/scratch",
        DirUsage {
            bytes: 5000,
            inodes: 2,
        },
    );
    // The managed /etc/hosts counts toward ephemeral storage (CVE-2020-8557).
    fake.set_dir(
        "/var/lib/kubelet/pods/b1/etc-hosts",
        DirUsage {
            bytes: 900,
            inodes: 1,
        },
    );
    fake.set_dir(
        "/var/log/pods/default_bpod_b1/a",
        DirUsage {
            bytes: 100,
            inodes: 1,
        },
    );
    let settings = StatsSettings {
        cgroup_mount: "/cg".into(),
        ..StatsSettings::new(
            "n1",
            Path::new("/var/lib/kubelet"),
            Path::new("/var/log/pods"),
        )
    };
    let layout = CgroupLayout::detect(&fake, &settings.cgroup_mount);
    let now = Utc::now();
    let sandbox_created = DateTime::from_timestamp(1_750_000_000, 0).unwrap();
    let container_created = DateTime::from_timestamp(1_750_000_001, 0).unwrap();
    let created = CreatedTimes {
        sandboxes: [("g1".to_owned(), sandbox_created)].into(),
        containers: [("b1-a".to_owned(), container_created)].into(),
    };
    let system = SystemLocator::default().resolve(&fake, &layout, &settings);
    let s = build_summary(
        &CollectInput {
            fs: Arc::new(fake),
            settings,
            layout,
            created,
            system,
            pods: crate::types::pods_snapshot([guaranteed, best]),
            cri_stats: vec![
                cri_stat("b1", "a", 10, 5, 1000),
                cri_stat("b1", "b", 20, 6, 2000),
                cri_stat("g1", "c", 999, 999, 1),
            ],
            image_fs: Some(cri::FilesystemUsage {
                timestamp: 1,
                fs_id: Some(cri::FilesystemIdentifier {
                    mountpoint: "/images".into(),
                }),
                used_bytes: Some(cri::UInt64Value { value: 77 }),
                inodes_used: Some(cri::UInt64Value { value: 7 }),
            }),
            now,
            now_mono: tokio::time::Instant::now(),
        },
        &mut housekeeping::PodHousekeeping::new(Duration::from_secs(10)),
    );
    let mem = s.node.memory.as_ref().unwrap();
    assert_eq!(mem.working_set_bytes, Some(600));
    assert_eq!(mem.available_bytes, Some(10 * 1024 - 600));
    let nodefs = s.node.fs.as_ref().unwrap();
    assert_eq!(nodefs.available_bytes, Some(40_000));
    assert_eq!(nodefs.inodes_free, Some(900));
    let imagefs = s.node.runtime.as_ref().unwrap().image_fs.as_ref().unwrap();
    assert_eq!(imagefs.capacity_bytes, Some(5_000));
    assert_eq!(imagefs.used_bytes, Some(77));
    assert!(s.dedicated_image_fs);
    let rl = s.node.rlimit.as_ref().unwrap();
    assert_eq!((rl.maxpid, rl.curproc), (Some(1000), Some(120)));

    let g = s.pod("g1").unwrap();
    assert_eq!(
        g.memory.as_ref().unwrap().working_set_bytes,
        Some(600),
        "from the pod cgroup"
    );
    assert_eq!(g.cpu.as_ref().unwrap().usage_core_nano_seconds, Some(42));
    assert_eq!(g.start_time, Some(sandbox_created));
    let gnet = g.network.as_ref().unwrap();
    assert_eq!(
        (gnet.default.name.as_str(), gnet.default.rx_bytes),
        ("eth0", Some(555))
    );
    assert_eq!(s.node.start_time.unwrap().timestamp(), 1_700_000_000);
    let nnet = s.node.network.as_ref().unwrap();
    assert_eq!(
        (nnet.default.name.as_str(), nnet.interfaces.len()),
        ("eth0", 1)
    );
    let sys: Vec<&str> = s
        .node
        .system_containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        sys,
        ["pods"],
        "no /proc/self in the fake: no kubelet container"
    );

    let b = s.pod("b1").unwrap();
    assert_eq!(
        b.memory.as_ref().unwrap().working_set_bytes,
        Some(30),
        "sum of CRI containers"
    );
    assert_eq!(b.cpu.as_ref().unwrap().usage_core_nano_seconds, Some(11));
    assert_eq!(b.containers[0].start_time, Some(container_created));
    assert_eq!(
        b.containers[1].start_time, None,
        "unknown to ListContainers"
    );
    assert_eq!(b.start_time, None);
    assert!(b.network.is_none(), "no pod cgroup");
    assert_eq!(
        b.volume_stats.len(),
        1,
        "memory-backed emptyDirs are not disk"
    );
    assert_eq!(b.volume_stats[0].fs.used_bytes, Some(5000));
    // layers 1000 + 2000, logs of a 100, emptyDir 5000, /etc/hosts 900.
    assert_eq!(b.ephemeral_storage.as_ref().unwrap().used_bytes, Some(9000));
    assert_eq!(b.containers[0].logs.as_ref().unwrap().used_bytes, Some(100));
    assert_eq!(
        b.containers[1].rootfs.as_ref().unwrap().used_bytes,
        Some(2000)
    );

    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["node"]["nodeName"], "n1");
    assert_eq!(json["node"]["rlimit"]["maxpid"], 1000);
    assert_eq!(json["pods"][1]["podRef"]["uid"], "b1");
    assert_eq!(json["pods"][1]["volume"][0]["usedBytes"], 5000);
    assert_eq!(json["pods"][1]["ephemeral-storage"]["usedBytes"], 9000);
    assert_eq!(json["node"]["startTime"], "2023-11-14T22:13:20Z");
    assert_eq!(json["node"]["network"]["name"], "eth0");
    assert_eq!(json["node"]["systemContainers"][0]["name"], "pods");
    assert_eq!(json["pods"][0]["startTime"], "2025-06-15T15:06:40Z");
    assert_eq!(json["pods"][0]["network"]["rxBytes"], 555);
    assert_eq!(
        json["pods"][1]["containers"][0]["startTime"],
        "2025-06-15T15:06:41Z"
    );

    // only_cpu_and_memory keeps start times, CPU, memory and system containers.
    let mut slim = s.clone();
    slim.retain_cpu_and_memory();
    let json = serde_json::to_value(&slim).unwrap();
    assert!(json["node"]["network"].is_null() && json["node"]["fs"].is_null());
    assert_eq!(json["node"]["systemContainers"][0]["name"], "pods");
    assert!(json["node"]["startTime"].is_string());
    assert!(json["pods"][0]["network"].is_null());
    assert!(json["pods"][0]["startTime"].is_string());
    assert!(json["pods"][1]["containers"][0]["startTime"].is_string());
    assert!(json["pods"][1]["ephemeral-storage"].is_null());
}

#[test]
fn pod_cgroup_paths_follow_the_qos_layout() {
    let g = pod(
        "u1",
        "p",
        serde_json::json!({"containers": [{"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]}),
    );
    let b = pod(
        "u2",
        "p",
        serde_json::json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}),
    );
    let e = pod(
        "u3",
        "p",
        serde_json::json!({"containers": [{"name": "c"}]}),
    );
    let fs = CgroupDriver::Cgroupfs;
    assert_eq!(pod_cgroup_path("/", fs, &g).unwrap(), "/kubepods/podu1");
    assert_eq!(
        pod_cgroup_path("/", fs, &b).unwrap(),
        "/kubepods/burstable/podu2"
    );
    assert_eq!(
        pod_cgroup_path("/rk-x", fs, &e).unwrap(),
        "/rk-x/kubepods/besteffort/podu3"
    );
    // The systemd driver reads the expanded slice paths.
    let sd = CgroupDriver::Systemd;
    assert_eq!(
        pod_cgroup_path("/", sd, &g).unwrap(),
        "/kubepods.slice/kubepods-podu1.slice"
    );
    assert_eq!(
        pod_cgroup_path("/", sd, &b).unwrap(),
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu2.slice"
    );
    assert_eq!(kubepods_path("/", sd).as_deref(), Some("/kubepods.slice"));
}

/// A provider task (node `n1`, cgroups under `/cg`) that collects at start, on request and on
/// pod changes only (its period is an hour).
fn spawn_provider(
    fs: FakeFs,
    rt: rkubelet_cri::fake::FakeRuntime,
    pods: watch::Receiver<crate::types::PodsSnapshot>,
) -> (StatsHandle, CancellationToken, tokio::task::JoinHandle<()>) {
    spawn_provider_with(fs, rt, pods, None)
}

/// `spawn_provider`, reusing `latest` (the PLEG's listing) when given.
fn spawn_provider_with(
    fs: FakeFs,
    rt: rkubelet_cri::fake::FakeRuntime,
    pods: watch::Receiver<crate::types::PodsSnapshot>,
    latest: Option<crate::pleg::LatestListing>,
) -> (StatsHandle, CancellationToken, tokio::task::JoinHandle<()>) {
    let settings = StatsSettings {
        cgroup_mount: "/cg".into(),
        interval: Duration::from_secs(3600),
        ..StatsSettings::new(
            "n1",
            Path::new("/var/lib/kubelet"),
            Path::new("/var/log/pods"),
        )
    };
    let (provider, handle) = StatsProvider::new(
        Arc::new(fs),
        Arc::new(rt.clone()),
        Arc::new(rt),
        settings,
        pods,
    );
    let provider = match latest {
        Some(l) => provider.with_latest_listing(l),
        None => provider,
    };
    let cancel = CancellationToken::new();
    let task = tokio::spawn(provider.run(cancel.clone()));
    (handle, cancel, task)
}

#[tokio::test]
async fn provider_collects_soon_after_the_desired_pods_change() {
    let rt = rkubelet_cri::fake::FakeRuntime::with_images(&["docker.io/library/busybox:latest"]);
    let (pods_tx, pods) = watch::channel(crate::types::pods_snapshot([]));
    let (handle, cancel, task) = spawn_provider(FakeFs::default(), rt, pods);
    let mut snapshots = handle.subscribe();
    snapshots.changed().await.unwrap();
    assert!(
        handle.latest().pods.is_empty(),
        "the first, immediate collection"
    );
    let pod = pod(
        "u1",
        "p",
        serde_json::json!({"containers": [{"name": "c"}]}),
    );
    let changed_at = tokio::time::Instant::now();
    pods_tx.send_replace(crate::types::pods_snapshot([pod]));
    tokio::time::timeout(Duration::from_secs(5), snapshots.changed())
        .await
        .expect("a collection follows the pod change, not the 1 h period")
        .unwrap();
    assert!(changed_at.elapsed() >= POD_CHANGE_DELAY);
    assert_eq!(handle.latest().pods[0].pod_ref.uid, "u1");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn provider_task_publishes_and_answers_refresh_requests() {
    let fake_fs = FakeFs::default();
    fake_fs.set_file("/cg/cpuacct/cpuacct.usage", "1000000000");
    fake_fs.set_file("/cg/memory/kubepods/memory.usage_in_bytes", "100");
    fake_fs.set_file("/cg/memory/kubepods/memory.stat", "");
    fake_fs.set_file("/cg/cpuacct/kubepods/cpuacct.usage", "1000");
    fake_fs.set_fs(
        "/",
        1,
        FsUsage {
            capacity_bytes: 1000,
            available_bytes: 500,
            used_bytes: 500,
            inodes: 10,
            inodes_free: 5,
        },
    );
    let rt = rkubelet_cri::fake::FakeRuntime::with_images(&["docker.io/library/busybox:latest"]);
    let (_pods_tx, pods) = watch::channel(crate::types::pods_snapshot([]));
    let (handle, cancel, task) = spawn_provider(fake_fs.clone(), rt, pods);
    let first = handle.refresh().await;
    assert_eq!(first.node.node_name, "n1");
    assert_eq!(first.node.fs.as_ref().unwrap().available_bytes, Some(500));
    let image_fs = first
        .node
        .runtime
        .as_ref()
        .unwrap()
        .image_fs
        .as_ref()
        .unwrap();
    assert!(image_fs.used_bytes.unwrap() > 0, "{image_fs:?}");
    assert_eq!(
        first.node.cpu.as_ref().unwrap().usage_nano_cores,
        None,
        "no rate from a single reading"
    );
    assert_eq!(
        first.node.system_containers[0]
            .cpu
            .as_ref()
            .unwrap()
            .usage_nano_cores,
        None
    );
    // One more CPU second later: a rate appears, for the node and the system containers.
    tokio::time::sleep(Duration::from_millis(20)).await;
    fake_fs.set_file("/cg/cpuacct/cpuacct.usage", "1010000000");
    fake_fs.set_file("/cg/cpuacct/kubepods/cpuacct.usage", "5000000");
    let second = handle.refresh().await;
    assert!(second.node.cpu.as_ref().unwrap().usage_nano_cores.unwrap() > 0);
    let pods = &second.node.system_containers[0];
    assert_eq!(pods.name, "pods");
    assert!(pods.cpu.as_ref().unwrap().usage_nano_cores.unwrap() > 0);
    assert_eq!(handle.latest(), second);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn provider_takes_start_times_from_the_ready_sandbox_and_the_container() {
    use rkubelet_cri::RuntimeService;
    let rt = rkubelet_cri::fake::FakeRuntime::with_images(&["docker.io/library/busybox:latest"]);
    let sandbox = |attempt: u32| cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt,
            }),
            log_directory: "/var/log/pods/default_p_u1".into(),
            ..Default::default()
        }),
        runtime_handler: String::new(),
    };
    let stop = |id: String| cri::StopPodSandboxRequest { pod_sandbox_id: id };
    // An old stopped attempt, the ready one, and a newer attempt that is not ready.
    let old = rt.run_pod_sandbox(sandbox(0)).await.unwrap().pod_sandbox_id;
    rt.stop_pod_sandbox(stop(old)).await.unwrap();
    let ready = rt.run_pod_sandbox(sandbox(1)).await.unwrap().pod_sandbox_id;
    let newer = rt.run_pod_sandbox(sandbox(2)).await.unwrap().pod_sandbox_id;
    rt.stop_pod_sandbox(stop(newer)).await.unwrap();
    let cid = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: ready.clone(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: "c".into(),
                    attempt: 0,
                }),
                image: Some(cri::ImageSpec {
                    image: "docker.io/library/busybox:latest".into(),
                    ..Default::default()
                }),
                log_path: "c/0.log".into(),
                labels: [
                    (POD_UID_LABEL.to_owned(), "u1".to_owned()),
                    (CONTAINER_NAME_LABEL.to_owned(), "c".to_owned()),
                ]
                .into(),
                ..Default::default()
            }),
            sandbox_config: None,
        })
        .await
        .unwrap()
        .container_id;
    rt.start_container(cri::StartContainerRequest {
        container_id: cid.clone(),
    })
    .await
    .unwrap();
    let ready_created = rt.sandbox(&ready).unwrap().created_at;
    let container_created = rt.container(&cid).unwrap().created_at;

    let (_pods_tx, pods) = watch::channel(crate::types::pods_snapshot([pod(
        "u1",
        "p",
        serde_json::json!({"containers": [{"name": "c"}]}),
    )]));
    let want = (
        Some(DateTime::from_timestamp_nanos(ready_created)),
        Some(DateTime::from_timestamp_nanos(container_created)),
    );
    let start_times = |s: &Arc<Summary>| {
        let p = s.pod("u1").unwrap();
        (p.start_time, p.containers[0].start_time)
    };
    let (handle, cancel, task) = spawn_provider(FakeFs::default(), rt.clone(), pods.clone());
    assert_eq!(start_times(&handle.refresh().await), want);
    cancel.cancel();
    task.await.unwrap();

    // The same times from the PLEG's recent listing, without listing the runtime again.
    let (events, _rx) = tokio::sync::mpsc::channel(8);
    let mut pleg = crate::pleg::GenericPleg::new(
        Arc::new(rt.clone()),
        crate::container::cache::PodCache::new(),
        Duration::from_secs(1),
        events,
    );
    pleg.relist().await.unwrap();
    rt.clear_calls();
    let (handle, cancel, task) = spawn_provider_with(
        FakeFs::default(),
        rt.clone(),
        pods,
        Some(pleg.latest_listing()),
    );
    assert_eq!(start_times(&handle.refresh().await), want);
    assert_eq!(
        (
            rt.call_count("ListPodSandbox"),
            rt.call_count("ListContainers")
        ),
        (0, 0),
        "the PLEG's listing served"
    );
    cancel.cancel();
    task.await.unwrap();
}

/// A guaranteed pod `g1` with its own cgroup (CPU `cpu_ns`) and a network, in `fake`.
fn guaranteed_pod_cgroup(fake: &FakeFs, cpu_ns: u64) -> Pod {
    fake.set_file("/cg/memory/kubepods/podg1/memory.usage_in_bytes", "700");
    fake.set_file(
        "/cg/memory/kubepods/podg1/memory.stat",
        "total_inactive_file 100\n",
    );
    fake.set_file(
        "/cg/cpuacct/kubepods/podg1/cpuacct.usage",
        &cpu_ns.to_string(),
    );
    fake.set_file("/cg/pids/kubepods/podg1/sandbox/cgroup.procs", "4242\n");
    fake.set_file(
        "/proc/4242/net/dev",
        "h\nh\n  eth0: 555 1 0 0 0 0 0 0 666 1 0 0 0 0 0 0\n",
    );
    pod(
        "g1",
        "gpod",
        serde_json::json!({"containers": [{"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]}),
    )
}

fn pod_cpu(s: &Summary) -> CpuStats {
    s.pods[0].cpu.clone().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_pod_cgroup_is_read_when_due_and_a_cached_reading_keeps_its_time_and_rate() {
    let fake = FakeFs::default();
    let rt = rkubelet_cri::fake::FakeRuntime::with_images(&["docker.io/library/busybox:latest"]);
    let (_pods_tx, pods) = watch::channel(crate::types::pods_snapshot([guaranteed_pod_cgroup(
        &fake,
        1_000_000_000,
    )]));
    // The provider's interval is an hour: a pod is due one to two hours after it was read.
    let (handle, cancel, task) = spawn_provider(fake.clone(), rt, pods);
    let first = handle.refresh().await;
    assert_eq!(pod_cpu(&first).usage_core_nano_seconds, Some(1_000_000_000));
    assert_eq!(
        first.pods[0].network.as_ref().unwrap().default.rx_bytes,
        Some(555)
    );

    // Not due: the next collection reports the same reading, taken at the same time.
    fake.set_file("/cg/cpuacct/kubepods/podg1/cpuacct.usage", "1500000000");
    tokio::time::advance(Duration::from_secs(60)).await;
    let cached = handle.refresh().await;
    assert_eq!(pod_cpu(&cached), pod_cpu(&first));
    assert_eq!(cached.pods[0].network, first.pods[0].network);

    // Due (the hour plus its jitter of up to another hour): read afresh, with a rate from the
    // two readings.
    std::thread::sleep(Duration::from_millis(5));
    tokio::time::advance(Duration::from_secs(2 * 3600)).await;
    let fresh = handle.refresh().await;
    let cpu = pod_cpu(&fresh);
    assert_eq!(cpu.usage_core_nano_seconds, Some(1_500_000_000));
    assert!(cpu.time > pod_cpu(&first).time);
    let rate = cpu.usage_nano_cores;
    assert!(rate.is_some_and(|r| r > 0), "{cpu:?}");

    // A changed reading brings the interval back to the base: not due a minute later, and the
    // cached reading keeps its rate.
    fake.set_file("/cg/cpuacct/kubepods/podg1/cpuacct.usage", "9000000000");
    tokio::time::advance(Duration::from_secs(60)).await;
    let again = handle.refresh().await;
    assert_eq!(pod_cpu(&again), cpu, "same reading, same time, same rate");
    cancel.cancel();
    task.await.unwrap();
}
