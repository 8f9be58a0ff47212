//! System containers, boot and process start times.

use std::time::{Duration, SystemTime};

use super::*;
use crate::stats::fs::FakeFs;

fn v1() -> CgroupLayout {
    CgroupLayout {
        mount: "/cg".into(),
        mode: CgroupMode::V1,
    }
}

fn settings() -> StatsSettings {
    StatsSettings {
        cgroup_mount: "/cg".into(),
        cgroup_root: "/rk".into(),
        ..StatsSettings::new(
            "n",
            Path::new("/var/lib/kubelet"),
            Path::new("/var/log/pods"),
        )
    }
}

const PROC_STAT: &str = "cpu  1 2 3 4\nctxt 5\nbtime 1700000000\nprocesses 9\n";

#[test]
fn proc_cgroup_v1_takes_memory_and_cpuacct_and_v2_the_unified_line() {
    let v1_text =
        "12:pids:/x\n4:memory:/process_api/abc\n3:cpu,cpuacct:/system.slice/k.service\n0::/\n";
    assert_eq!(
        parse_proc_cgroup(v1_text, CgroupMode::V1),
        Some(SysCgroup {
            memory: "/process_api/abc".into(),
            cpu: "/system.slice/k.service".into()
        })
    );
    // No cpuacct line: CPU from the memory cgroup.
    assert_eq!(
        parse_proc_cgroup("4:memory:/m\n", CgroupMode::V1),
        Some(SysCgroup::named("/m"))
    );
    assert_eq!(parse_proc_cgroup("1:cpu:/c\n", CgroupMode::V1), None);
    assert_eq!(
        parse_proc_cgroup("1:name=systemd:/s\n0::/kubelet.slice\n", CgroupMode::V2),
        Some(SysCgroup::named("/kubelet.slice"))
    );
}

#[test]
fn boot_time_and_process_start_time() {
    let fs = FakeFs::default();
    fs.set_file("/proc/stat", PROC_STAT);
    // comm with a space and a parenthesis; starttime (field 22) = 12345 ticks.
    fs.set_file(
        "/proc/self/stat",
        "77 (rk (x) y) S 1 77 77 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 9 0 12345 1000 50\n",
    );
    let boot = read_boot_time(&fs, Path::new("/proc")).unwrap();
    assert_eq!(boot.timestamp(), 1_700_000_000);
    let start = process_start_time(&fs, Path::new("/proc"), "self", boot).unwrap();
    assert_eq!(start.timestamp_millis(), 1_700_000_000_000 + 123_450);
    fs.set_file("/proc/stat", "cpu 1 2\n");
    assert_eq!(read_boot_time(&fs, Path::new("/proc")), None);
}

#[test]
fn system_containers_v1_kubelet_from_its_own_cgroup_runtime_only_when_configured() {
    let fs = FakeFs::default();
    let layout = v1();
    fs.set_file("/proc/stat", PROC_STAT);
    fs.set_file(
        "/proc/self/stat",
        "77 (rkubelet) S 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 9 0 500 1 1\n",
    );
    fs.set_file("/proc/self/cgroup", "4:memory:/k\n2:cpu,cpuacct:/k\n");
    for (dir, usage) in [("k", 100), ("rt", 200), ("rk/kubepods", 300)] {
        fs.set_file(
            format!("/cg/memory/{dir}/memory.usage_in_bytes"),
            &usage.to_string(),
        );
        fs.set_file(
            format!("/cg/memory/{dir}/memory.stat"),
            "total_inactive_file 10\ntotal_rss 5\n",
        );
    }
    fs.set_file("/cg/cpuacct/k/cpuacct.usage", "9000");
    fs.set_file("/cg/cpuacct/rt/cpuacct.usage", "2000");
    fs.set_file("/cg/cpuacct/rk/kubepods/cpuacct.usage", "3000");
    let pods_created = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
    fs.set_mtime("/cg/memory/rk/kubepods", pods_created);

    let s = StatsSettings {
        runtime_cgroups: "/rt".into(),
        ..settings()
    };
    let now = Utc::now();
    let sys = SystemLocator::default().resolve(&fs, &layout, &s);
    assert_eq!(sys.kubelet, Some(SysCgroup::named("/k")));
    assert_eq!(sys.runtime, Some(SysCgroup::named("/rt")));
    assert_eq!(sys.pods, Some(SysCgroup::named("/rk/kubepods")));
    assert_eq!(sys.misc, None);

    let cs = system_containers(&fs, &layout, &sys, now);
    let names: Vec<&str> = cs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["kubelet", "runtime", "pods"]);
    let get = |n: &str| cs.iter().find(|c| c.name == n).unwrap();
    let k = get("kubelet");
    assert_eq!(k.memory.as_ref().unwrap().working_set_bytes, Some(90));
    assert_eq!(k.cpu.as_ref().unwrap().usage_core_nano_seconds, Some(9000));
    assert_eq!(
        k.start_time.unwrap().timestamp(),
        1_700_000_005,
        "the kubelet process's start"
    );
    assert_eq!(
        get("runtime").cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(2000)
    );
    assert_eq!(get("runtime").start_time, None, "no mtime in the fake");
    let pods = get("pods");
    assert_eq!(pods.memory.as_ref().unwrap().usage_bytes, Some(300));
    assert_eq!(
        pods.start_time,
        Some(DateTime::<Utc>::from(pods_created)),
        "cgroup directory time"
    );
    assert!(pods.rootfs.is_none() && pods.logs.is_none());

    // Without --runtime-cgroups there is no runtime container (upstream does not look for
    // the runtime's process); a kubelet whose v1 cpu and memory cgroups differ is left out.
    let sys = SystemLocator::default().resolve(&fs, &layout, &settings());
    assert_eq!(sys.runtime, None);
    fs.set_file("/proc/self/cgroup", "4:memory:/k\n2:cpu,cpuacct:/\n");
    let sys = SystemLocator::default().resolve(&fs, &layout, &settings());
    assert_eq!((&sys.kubelet, sys.kubelet_start), (&None, None));
    let names: Vec<String> = system_containers(&fs, &layout, &sys, now)
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["pods"]);
}

#[test]
fn system_containers_v2_with_configured_cgroups_and_misc() {
    let fs = FakeFs::default();
    let layout = CgroupLayout {
        mount: "/cg".into(),
        mode: CgroupMode::V2,
    };
    for (dir, usec) in [
        ("kubelet.slice", 10),
        ("runtime.slice", 20),
        ("system.slice", 30),
        ("kubepods", 40),
    ] {
        fs.set_file(format!("/cg/{dir}/memory.current"), "1000");
        fs.set_file(
            format!("/cg/{dir}/memory.stat"),
            "inactive_file 100\nanon 50\n",
        );
        fs.set_file(
            format!("/cg/{dir}/cpu.stat"),
            &format!("usage_usec {usec}\n"),
        );
    }
    let s = StatsSettings {
        cgroup_root: "/".into(),
        kubelet_cgroups: "/kubelet.slice".into(),
        runtime_cgroups: "/runtime.slice".into(),
        system_cgroups: "/system.slice".into(),
        ..settings()
    };
    let sys = SystemLocator::default().resolve(&fs, &layout, &s);
    assert_eq!(sys.pods, Some(SysCgroup::named("/kubepods")));
    let cs = system_containers(&fs, &layout, &sys, Utc::now());
    let got: Vec<(&str, Option<u64>, Option<u64>)> = cs
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds),
                c.memory.as_ref().and_then(|m| m.working_set_bytes),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("kubelet", Some(10_000), Some(900)),
            ("runtime", Some(20_000), Some(900)),
            ("misc", Some(30_000), Some(900)),
            ("pods", Some(40_000), Some(900)),
        ]
    );

    // cgroupsPerQOS off: `pods` is the cgroup root itself.
    let s = StatsSettings {
        cgroups_per_qos: false,
        ..s
    };
    let sys = SystemLocator::default().resolve(&fs, &layout, &s);
    assert_eq!(sys.pods, Some(SysCgroup::named("/")));
}

#[test]
fn this_host_kubelet_cgroup_and_boot_time_resolve() {
    use crate::stats::fs::SystemFs;
    let layout = CgroupLayout::detect(&SystemFs, Path::new("/sys/fs/cgroup"));
    let s = StatsSettings::new("n", Path::new("/tmp"), Path::new("/tmp"));
    let sys = SystemLocator::default().resolve(&SystemFs, &layout, &s);
    // This process's own cgroups decide whether upstream would account it.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let unified = parse_proc_cgroup(&own, layout.mode).is_some_and(|c| c.memory == c.cpu);
    assert_eq!(sys.kubelet.is_some(), unified, "{own} {sys:?}");
    if !unified {
        return;
    }
    let start = sys.kubelet_start.unwrap();
    let boot = read_boot_time(&SystemFs, Path::new("/proc")).unwrap();
    assert!(boot <= start && start <= Utc::now(), "{boot} {start}");
    let cs = system_containers(&SystemFs, &layout, &sys, Utc::now());
    let k = cs.iter().find(|c| c.name == "kubelet").unwrap();
    assert!(k.memory.as_ref().unwrap().usage_bytes.unwrap() > 0, "{k:?}");
}
