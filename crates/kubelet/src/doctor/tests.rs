use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::gather::{containerd_cri_config, systemd_cgroup_in_toml};
use super::*;

const DAY: u64 = 86_400;

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn eviction() -> BTreeMap<String, ThresholdValue> {
    [
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
        ("imagefs.available", "15%"),
        ("imagefs.inodesFree", "5%"),
        ("memory.available", "100Mi"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ThresholdValue::parse(v).unwrap()))
    .collect()
}

/// A node with nothing wrong.
fn healthy() -> Facts {
    let now = t(1000 * DAY);
    Facts {
        now,
        config: ConfigFacts {
            path: Some("/var/lib/kubelet/config.yaml".into()),
            error: None,
            cgroup_driver: "systemd".into(),
            fail_swap_on: true,
            eviction_hard: eviction(),
            pod_logs_dir: "/var/log/pods".into(),
        },
        runtime: RuntimeFacts {
            endpoint: "unix:///run/containerd/containerd.sock".into(),
            version: Some(Ok(RuntimeVersion {
                name: "containerd".into(),
                version: "1.6.20".into(),
                api_version: "v1".into(),
            })),
            failed_conditions: vec![],
        },
        runtime_cgroup_driver: RuntimeCgroupDriver::Known {
            driver: "systemd".into(),
            source: "CRI RuntimeConfig".into(),
        },
        cni: Some(CniFacts {
            dir: "/etc/cni/net.d".into(),
            source: "default".into(),
            files: Ok(vec!["10-flannel.conflist".into()]),
        }),
        swap: Ok(vec![]),
        kernel: KernelFacts {
            br_netfilter_loaded: Some(true),
            ip_forward: Some("1".into()),
            bridge_nf_call_iptables: Some("1".into()),
        },
        clock: ClockFacts::Measured {
            server: "https://10.0.0.1:6443".into(),
            server_time: now,
            local_time: now + Duration::from_secs(1),
        },
        certs: vec![CertFacts {
            role: "client",
            path: "/var/lib/kubelet/pki/kubelet-client-current.pem".into(),
            validity: Ok((
                now - Duration::from_secs(10 * DAY),
                now + Duration::from_secs(355 * DAY),
            )),
        }],
        disks: vec![DiskFacts {
            signal_prefix: "nodefs",
            path: "/var/lib/kubelet".into(),
            stat: Ok(FsStat {
                bytes_total: 100 << 30,
                bytes_avail: 50 << 30,
                inodes_total: 1_000_000,
                inodes_free: 900_000,
            }),
        }],
        log_dir: LogDirFacts {
            path: "/var/log/pods".into(),
            exists: true,
            writable: Ok(()),
        },
    }
}

/// The findings of `check` that are not ok.
fn problems(f: &Facts) -> Vec<Finding> {
    check(f)
        .into_iter()
        .filter(|f| f.severity != Severity::Ok)
        .collect()
}

fn only_problem(f: &Facts) -> Finding {
    let p = problems(f);
    assert_eq!(p.len(), 1, "{p:#?}");
    p.into_iter().next().unwrap()
}

#[test]
fn a_healthy_node_has_only_ok_findings_and_exits_0() {
    let f = check(&healthy());
    assert!(f.iter().all(|f| f.severity == Severity::Ok), "{f:#?}");
    assert_eq!(exit_code(&f), 0);
    let text = render_text(&f);
    assert!(
        text.contains("[ok]    runtime: containerd 1.6.20 (CRI v1) at unix:///run/containerd/containerd.sock\n"),
        "{text}"
    );
    assert!(
        text.ends_with("summary: 13 ok, 0 warnings, 0 errors, 0 skipped\n"),
        "{text}"
    );
    assert!(!text.contains("fix:"), "{text}");
}

#[test]
fn an_unreachable_runtime_is_an_error_with_a_fix_and_exits_2() {
    let mut facts = healthy();
    facts.runtime.version = Some(Err("connection refused".into()));
    let p = only_problem(&facts);
    assert_eq!((p.check, p.severity), ("runtime", Severity::Error));
    assert!(p.message.contains("connection refused"), "{}", p.message);
    assert!(p.fix.unwrap().contains("--container-runtime-endpoint"));
    let findings = check(&facts);
    assert_eq!(exit_code(&findings), 2);
    let text = render_text(&findings);
    assert!(text.contains("[error] runtime: no CRI runtime answers at unix:///run/containerd/containerd.sock: connection refused\n        fix: start the runtime"), "{text}");
    assert!(text.contains("0 warnings, 1 error, 0 skipped"), "{text}");
}

#[test]
fn a_false_runtime_condition_warns() {
    let mut facts = healthy();
    facts.runtime.failed_conditions = vec![(
        "NetworkReady".into(),
        "NetworkPluginNotReady".into(),
        "cni plugin not initialized".into(),
    )];
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Warn);
    assert!(
        p.message
            .contains("NetworkReady is false: NetworkPluginNotReady")
    );
    assert!(p.fix.unwrap().contains("CNI"));
    assert_eq!(exit_code(&check(&facts)), 1);
}

#[test]
fn missing_cni_configuration_warns_and_names_the_directory_and_its_source() {
    let mut facts = healthy();
    facts.cni = Some(CniFacts {
        dir: "/etc/cni/custom".into(),
        source: "the runtime's configuration".into(),
        files: Ok(vec![]),
    });
    let p = only_problem(&facts);
    assert_eq!((p.check, p.severity), ("cni", Severity::Warn));
    assert_eq!(
        p.message,
        "no network configuration in /etc/cni/custom (the runtime's configuration)"
    );
    assert!(p.fix.unwrap().contains("/etc/cni/custom"));
    facts.cni.as_mut().unwrap().files = Err("No such file or directory (os error 2)".into());
    assert!(
        only_problem(&facts)
            .message
            .contains("cannot list /etc/cni/custom")
    );
}

#[test]
fn cgroup_driver_mismatch_is_an_error_and_unknown_a_warning() {
    let mut facts = healthy();
    facts.runtime_cgroup_driver = RuntimeCgroupDriver::Known {
        driver: "cgroupfs".into(),
        source: "SystemdCgroup in /etc/containerd/config.toml".into(),
    };
    let p = only_problem(&facts);
    assert_eq!((p.check, p.severity), ("cgroup-driver", Severity::Error));
    assert!(p.message.contains("the kubelet uses systemd but the runtime uses cgroupfs (runtime: SystemdCgroup in /etc/containerd/config.toml)"), "{}", p.message);
    assert!(
        p.fix
            .as_deref()
            .unwrap()
            .contains("cgroupDriver: cgroupfs in /var/lib/kubelet/config.yaml")
    );
    facts.runtime_cgroup_driver =
        RuntimeCgroupDriver::Unknown("the runtime does not implement CRI RuntimeConfig".into());
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Warn);
    assert!(
        p.message
            .contains("unknown (the runtime does not implement"),
        "{}",
        p.message
    );
    // An empty cgroupDriver is the kubelet's default, cgroupfs.
    facts.config.cgroup_driver = String::new();
    facts.runtime_cgroup_driver = RuntimeCgroupDriver::Known {
        driver: "cgroupfs".into(),
        source: "x".into(),
    };
    assert!(problems(&facts).is_empty());
}

#[test]
fn swap_on_is_an_error_only_with_fail_swap_on() {
    let swaps = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/swapfile                               file\t\t2097148\t\t0\t\t-2\n";
    let mut facts = healthy();
    facts.swap = Ok(parse_proc_swaps(swaps));
    assert_eq!(
        facts.swap,
        Ok(vec![SwapArea {
            name: "/swapfile".into(),
            size_kib: 2_097_148
        }])
    );
    let p = only_problem(&facts);
    assert_eq!((p.check, p.severity), ("swap", Severity::Error));
    assert!(p.message.contains("/swapfile 2047 MiB"), "{}", p.message);
    assert!(
        p.fix
            .unwrap()
            .contains("failSwapOn: false in /var/lib/kubelet/config.yaml")
    );
    facts.config.fail_swap_on = false;
    assert!(problems(&facts).is_empty());
    assert!(parse_proc_swaps("Filename Type Size Used Priority\n").is_empty());
}

#[test]
fn kernel_modules_and_sysctls() {
    let mut facts = healthy();
    facts.kernel.ip_forward = Some("0".into());
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Error);
    assert!(p.message.starts_with("net.ipv4.ip_forward = 0 (want 1"));
    assert!(p.fix.unwrap().contains("sysctl -w net.ipv4.ip_forward=1"));

    let mut facts = healthy();
    facts.kernel.br_netfilter_loaded = Some(false);
    facts.kernel.bridge_nf_call_iptables = None;
    let p = problems(&facts);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(p.iter().all(|f| f.severity == Severity::Warn));
    assert!(
        p[0].fix
            .as_deref()
            .unwrap()
            .contains("modprobe br_netfilter")
    );
    assert!(
        p[1].message
            .contains("net.bridge.bridge-nf-call-iptables is not available")
    );
    assert_eq!(exit_code(&check(&facts)), 1);
}

#[test]
fn clock_skew_thresholds_and_skip_without_kubeconfig() {
    let mut facts = healthy();
    let now = facts.now;
    let at = |local_ahead: i64| ClockFacts::Measured {
        server: "https://api:6443".into(),
        server_time: now,
        local_time: if local_ahead >= 0 {
            now + Duration::from_secs(local_ahead as u64)
        } else {
            now - Duration::from_secs(local_ahead.unsigned_abs())
        },
    };
    facts.clock = at(4);
    assert!(problems(&facts).is_empty());
    facts.clock = at(-5);
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Warn);
    assert!(
        p.message
            .starts_with("local clock is 5s behind the API server https://api:6443")
    );
    facts.clock = at(90);
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Error);
    assert!(p.message.contains("90s ahead of"));
    assert!(p.fix.unwrap().contains("timedatectl set-ntp true"));
    facts.clock = ClockFacts::NoKubeconfig;
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Skip);
    assert_eq!(exit_code(&check(&facts)), 0);
    facts.clock = ClockFacts::Unreachable {
        server: "https://api:6443".into(),
        error: "connection refused".into(),
    };
    assert_eq!(only_problem(&facts).severity, Severity::Warn);
}

#[test]
fn certificate_expiry_thresholds() {
    let mut facts = healthy();
    let now = facts.now;
    let cert = |before: u64, after: u64| {
        Ok((
            now - Duration::from_secs(before),
            now + Duration::from_secs(after),
        ))
    };
    // One year, 30 days left: less than 10 % of the lifetime.
    facts.certs[0].validity = cert(335 * DAY, 30 * DAY);
    let p = only_problem(&facts);
    assert_eq!((p.check, p.severity), ("client-cert", Severity::Warn));
    assert!(p.message.contains("expires in 30 days"), "{}", p.message);
    // 40 days of 365 left: more than 10 %.
    facts.certs[0].validity = cert(325 * DAY, 40 * DAY);
    assert!(problems(&facts).is_empty());
    // Expired.
    facts.certs[0].validity = Ok((t(0), now - Duration::from_secs(1)));
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Error);
    assert!(p.message.contains("expired at"), "{}", p.message);
    assert!(p.fix.unwrap().contains("kubectl get csr"));
    // Not there: skipped, not an error.
    facts.certs = vec![CertFacts {
        role: "serving",
        path: "/var/lib/kubelet/pki/kubelet.crt".into(),
        validity: Err("No such file or directory (os error 2)".into()),
    }];
    let p = only_problem(&facts);
    assert_eq!((p.check, p.severity), ("serving-cert", Severity::Skip));
}

#[test]
fn disk_and_inode_headroom_against_eviction_hard() {
    let mut facts = healthy();
    let set = |f: &mut Facts, avail: u64, inodes_free: u64| {
        f.disks[0].stat = Ok(FsStat {
            bytes_total: 100 << 30,
            bytes_avail: avail,
            inodes_total: 1_000_000,
            inodes_free,
        });
    };
    // 15 GiB of 100 free: over 10 % but under twice it.
    set(&mut facts, 15 << 30, 900_000);
    let p = only_problem(&facts);
    assert_eq!((p.check, p.severity), ("nodefs", Severity::Warn));
    assert!(
        p.message.starts_with(
            "15.0GiB free of 100.0GiB on /var/lib/kubelet; evictionHard nodefs.available<10%"
        ),
        "{}",
        p.message
    );
    // 5 GiB: under the threshold.
    set(&mut facts, 5 << 30, 900_000);
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Error);
    assert!(p.message.ends_with("the kubelet is evicting pods"));
    // Inodes: 4 % free with a 5 % threshold.
    set(&mut facts, 50 << 30, 40_000);
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Error);
    assert!(p.message.contains("inodesFree<5%"), "{}", p.message);
    // A quantity threshold; "0%" disables a signal.
    facts.config.eviction_hard.insert(
        "nodefs.available".into(),
        ThresholdValue::parse("60Gi").unwrap(),
    );
    facts.config.eviction_hard.insert(
        "nodefs.inodesFree".into(),
        ThresholdValue::parse("0%").unwrap(),
    );
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Error);
    assert!(p.message.contains("nodefs.available<60Gi"));
    // statvfs failed.
    facts.disks[0].stat = Err("No such file or directory".into());
    assert_eq!(only_problem(&facts).severity, Severity::Warn);
}

#[test]
fn an_unwritable_log_directory_is_an_error() {
    let mut facts = healthy();
    facts.log_dir.writable = Err("Read-only file system (os error 30)".into());
    let p = only_problem(&facts);
    assert_eq!((p.check, p.severity), ("log-dir", Severity::Error));
    assert_eq!(
        p.message,
        "/var/log/pods is not writable: Read-only file system (os error 30)"
    );
    // Not created yet: fine while the kubelet can create it.
    facts.log_dir.exists = false;
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Error);
    assert!(
        p.message.contains("does not exist and cannot be created"),
        "{}",
        p.message
    );
    facts.log_dir.writable = Ok(());
    assert!(problems(&facts).is_empty());
}

#[test]
fn a_bad_config_file_is_an_error_and_no_file_a_skip() {
    let mut facts = healthy();
    facts.config.error = Some("unknown field \"foo\"".into());
    let p = only_problem(&facts);
    assert_eq!((p.check, p.severity), ("config", Severity::Error));
    facts.config.error = None;
    facts.config.path = None;
    let p = only_problem(&facts);
    assert_eq!(p.severity, Severity::Skip);
}

#[test]
fn exit_code_is_the_worst_severity() {
    let f = |s| Finding::new("x", s, "m");
    assert_eq!(exit_code(&[]), 0);
    assert_eq!(exit_code(&[f(Severity::Ok), f(Severity::Skip)]), 0);
    assert_eq!(exit_code(&[f(Severity::Ok), f(Severity::Warn)]), 1);
    assert_eq!(
        exit_code(&[f(Severity::Warn), f(Severity::Error), f(Severity::Ok)]),
        2
    );
}

#[test]
fn json_output_carries_findings_summary_and_exit_code() {
    let mut facts = healthy();
    facts.kernel.ip_forward = Some("0".into());
    let v: serde_json::Value = serde_json::from_str(&render_json(&check(&facts))).unwrap();
    assert_eq!(v["exitCode"], 2);
    assert_eq!(v["summary"]["errors"], 1);
    let err = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["severity"] == "error")
        .unwrap();
    assert_eq!(err["check"], "kernel");
    assert!(err["fix"].as_str().unwrap().contains("sysctl"));
    let ok = &v["findings"][0];
    assert_eq!(ok["severity"], "ok");
    assert!(ok.get("fix").is_none());
}

#[test]
fn containerd_settings_from_its_cri_config_and_config_file() {
    let cfg = serde_json::json!({
        "containerd": {
            "defaultRuntimeName": "runc",
            "runtimes": {"runc": {"options": {"SystemdCgroup": true}}}
        },
        "cni": {"binDir": "/opt/cni/bin", "confDir": "/etc/cni/other"}
    });
    assert_eq!(
        containerd_cri_config(&cfg),
        (Some(PathBuf::from("/etc/cni/other")), Some(true))
    );
    assert_eq!(containerd_cri_config(&serde_json::json!({})), (None, None));
    let toml = "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  # SystemdCgroup = false\n  SystemdCgroup = true # systemd\n";
    assert_eq!(systemd_cgroup_in_toml(toml), Some(true));
    assert_eq!(systemd_cgroup_in_toml("SystemdCgroup=false"), Some(false));
    assert_eq!(systemd_cgroup_in_toml("version = 2\n"), None);
}
