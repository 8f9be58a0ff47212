//! Tests of the upstream flags of `cli/upstream.rs`: every upstream 1.33 flag is accepted, each
//! family lands in its field over the file and drop-ins, and each is honoured, refused or warned
//! exactly as its field.

use super::tests::{HEADER, Scratch, parse, parse_err, resolve_ok};
use super::*;
use clap::CommandFactory;
use kubelet::config::{Quantity, ThresholdValue};

/// Every flag the upstream 1.33 kubelet accepts on Linux. Derived from upstream's
/// `cmd/kubelet/app/options/options.go` (`KubeletFlags.AddFlags`, `AddKubeletConfigFlags`),
/// `pkg/kubelet/config/flags.go` (`ContainerRuntimeOptions.AddFlags`), component-base
/// `logs/api/v1` (`AddFlags`, with the json format `cmd/kubelet` registers) and `verflag`, as
/// the generated reference lists them (kubernetes/website
/// `content/en/docs/reference/command-line-tools-reference/kubelet.md`, v1.34, plus
/// `--cloud-config` and `--register-schedulable`, which 1.34 removed: kubernetes#130161,
/// kubernetes#122384). `--help`/`-h` is clap's own.
const UPSTREAM_1_33_FLAGS: &[&str] = &[
    "address",
    "allowed-unsafe-sysctls",
    "anonymous-auth",
    "authentication-token-webhook",
    "authentication-token-webhook-cache-ttl",
    "authorization-mode",
    "authorization-webhook-cache-authorized-ttl",
    "authorization-webhook-cache-unauthorized-ttl",
    "bootstrap-kubeconfig",
    "cert-dir",
    "cgroup-driver",
    "cgroup-root",
    "cgroups-per-qos",
    "client-ca-file",
    "cloud-config",
    "cloud-provider",
    "cluster-dns",
    "cluster-domain",
    "config",
    "config-dir",
    "container-log-max-files",
    "container-log-max-size",
    "container-runtime-endpoint",
    "contention-profiling",
    "cpu-cfs-quota",
    "cpu-cfs-quota-period",
    "cpu-manager-policy",
    "cpu-manager-policy-options",
    "cpu-manager-reconcile-period",
    "enable-controller-attach-detach",
    "enable-debugging-handlers",
    "enable-server",
    "enforce-node-allocatable",
    "event-burst",
    "event-qps",
    "eviction-hard",
    "eviction-max-pod-grace-period",
    "eviction-minimum-reclaim",
    "eviction-pressure-transition-period",
    "eviction-soft",
    "eviction-soft-grace-period",
    "exit-on-lock-contention",
    "experimental-allocatable-ignore-eviction",
    "experimental-mounter-path",
    "fail-cgroupv1",
    "fail-swap-on",
    "feature-gates",
    "file-check-frequency",
    "hairpin-mode",
    "healthz-bind-address",
    "healthz-port",
    "hostname-override",
    "http-check-frequency",
    "image-credential-provider-bin-dir",
    "image-credential-provider-config",
    "image-gc-high-threshold",
    "image-gc-low-threshold",
    "image-service-endpoint",
    "kernel-memcg-notification",
    "kube-api-burst",
    "kube-api-content-type",
    "kube-api-qps",
    "kube-reserved",
    "kube-reserved-cgroup",
    "kubeconfig",
    "kubelet-cgroups",
    "local-storage-capacity-isolation",
    "lock-file",
    "log-flush-frequency",
    "log-json-info-buffer-size",
    "log-json-split-stream",
    "log-text-info-buffer-size",
    "log-text-split-stream",
    "logging-format",
    "make-iptables-util-chains",
    "manifest-url",
    "manifest-url-header",
    "max-open-files",
    "max-pods",
    "maximum-dead-containers",
    "maximum-dead-containers-per-container",
    "memory-manager-policy",
    "minimum-container-ttl-duration",
    "minimum-image-ttl-duration",
    "node-ip",
    "node-labels",
    "node-status-max-images",
    "node-status-update-frequency",
    "oom-score-adj",
    "pod-cidr",
    "pod-infra-container-image",
    "pod-manifest-path",
    "pod-max-pids",
    "pods-per-core",
    "port",
    "protect-kernel-defaults",
    "provider-id",
    "qos-reserved",
    "read-only-port",
    "register-node",
    "register-schedulable",
    "register-with-taints",
    "registry-burst",
    "registry-qps",
    "reserved-cpus",
    "reserved-memory",
    "resolv-conf",
    "root-dir",
    "rotate-certificates",
    "rotate-server-certificates",
    "runonce",
    "runtime-cgroups",
    "runtime-request-timeout",
    "seccomp-default",
    "serialize-image-pulls",
    "streaming-connection-idle-timeout",
    "sync-frequency",
    "system-cgroups",
    "system-reserved",
    "system-reserved-cgroup",
    "tls-cert-file",
    "tls-cipher-suites",
    "tls-min-version",
    "tls-private-key-file",
    "topology-manager-policy",
    "topology-manager-policy-options",
    "topology-manager-scope",
    "v",
    "version",
    "vmodule",
    "volume-plugin-dir",
    "volume-stats-agg-period",
];

#[test]
fn every_upstream_flag_is_accepted_and_classified() {
    let ours: Vec<String> = Flags::command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .filter(|l| l != "help")
        .collect();
    for flag in UPSTREAM_1_33_FLAGS {
        assert!(ours.iter().any(|o| o == flag), "--{flag} is not a flag");
        // The parser knows it: at worst it wants a value.
        if let Err(e) = Flags::try_parse_from(["rkubelet", &format!("--{flag}")]) {
            assert_ne!(
                e.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "--{flag}: {e}"
            );
        }
        assert!(
            support::FLAGS.iter().any(|(f, _)| f == flag),
            "--{flag} has no row in kubelet::config::support::FLAGS"
        );
    }
    // And nothing beyond upstream's set.
    for o in &ours {
        assert!(
            UPSTREAM_1_33_FLAGS.contains(&o.as_str()),
            "--{o} is not an upstream 1.33 flag"
        );
    }
    assert_eq!(ours.len(), UPSTREAM_1_33_FLAGS.len());
    assert_eq!(parse(&["--v=3"]).verbosity, Some(3), "-v/--v both");
}

fn th(s: &str) -> ThresholdValue {
    ThresholdValue::parse(s).unwrap()
}

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

#[test]
fn config_backed_flag_families_win_over_file_and_drop_ins() {
    let dir = Scratch::new("upstream-precedence");
    let cfg = dir.write(
        "config.yaml",
        &format!(
            "{HEADER}authentication:\n  x509: {{clientCAFile: /etc/file-ca.crt}}\n  anonymous: {{enabled: false}}\nauthorization: {{mode: Webhook}}\ntlsCertFile: /etc/file.crt\nevictionHard: {{memory.available: 100Mi, nodefs.available: 10%}}\nkubeReserved: {{cpu: 100m}}\nsystemReserved: {{memory: 1Gi}}\neventRecordQPS: 5\nreservedSystemCPUs: \"3\"\ncgroupRoot: /file\nseccompDefault: false\npodPidsLimit: 100\nallowedUnsafeSysctls: [kernel.shm_rmid_forced]\n"
        ),
    );
    dir.write(
        "conf.d/10.conf",
        &format!("{HEADER}eventRecordQPS: 7\nkubeReserved: {{memory: 2Gi}}\ncgroupRoot: /dropin\n"),
    );
    let conf_d = dir.0.join("conf.d");
    let base = [
        "--config",
        cfg.to_str().unwrap(),
        "--config-dir",
        conf_d.to_str().unwrap(),
    ];
    let (c, _) = resolve_ok(&parse(&base));
    assert_eq!((c.event_record_qps, c.cgroup_root.as_str()), (7, "/dropin"));
    assert!(!c.authentication.anonymous.enabled);

    let mut args = base.to_vec();
    args.extend([
        "--anonymous-auth",
        "--authentication-token-webhook=false",
        "--authentication-token-webhook-cache-ttl=1m",
        "--authorization-mode=AlwaysAllow",
        "--client-ca-file=/etc/kubernetes/pki/ca.crt",
        "--tls-cert-file=/etc/flag.crt",
        "--tls-private-key-file=/etc/flag.key",
        "--tls-cipher-suites=TLS_AES_128_GCM_SHA256",
        "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "--eviction-hard=memory.available<1Gi",
        "--eviction-hard",
        "imagefs.available<15%",
        "--eviction-soft=memory.available<2Gi",
        "--eviction-soft-grace-period=memory.available=1m30s",
        "--eviction-minimum-reclaim=memory.available=100Mi",
        "--kube-reserved=cpu=200m, memory=500Mi",
        "--system-reserved=cpu=100m",
        "--event-qps=0",
        "--reserved-cpus=0-1",
        "--cgroup-root=/flag",
        "--seccomp-default",
        "--protect-kernel-defaults",
        "--pod-max-pids=0x1000",
        "--container-log-max-size=20Mi",
        "--image-gc-high-threshold=90",
        "--allowed-unsafe-sysctls=net.core.somaxconn,kernel.msg*",
        "--streaming-connection-idle-timeout=1h",
        "--enable-debugging-handlers=false",
        "--fail-cgroupv1",
    ]);
    let (c, n) = resolve_ok(&parse(&args));
    assert!(c.authentication.anonymous.enabled, "flag beats file");
    assert!(!c.authentication.webhook.enabled);
    assert_eq!(c.authentication.webhook.cache_ttl, Duration::from_secs(60));
    assert_eq!(c.authorization.mode, "AlwaysAllow");
    assert_eq!(
        c.authentication.x509.client_ca_file,
        "/etc/kubernetes/pki/ca.crt"
    );
    assert_eq!(
        (c.tls_cert_file.as_str(), c.tls_private_key_file.as_str()),
        ("/etc/flag.crt", "/etc/flag.key")
    );
    assert_eq!(
        c.tls_cipher_suites,
        [
            "TLS_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
        ]
    );
    // The first occurrence replaces the file's map, later ones add keys (pflag maps).
    assert_eq!(
        c.eviction_hard.into_iter().collect::<Vec<_>>(),
        [
            ("imagefs.available".to_owned(), th("15%")),
            ("memory.available".to_owned(), th("1Gi"))
        ]
    );
    assert_eq!(c.eviction_soft["memory.available"], th("2Gi"));
    assert_eq!(
        c.eviction_soft_grace_period["memory.available"],
        Duration::from_secs(90)
    );
    assert_eq!(c.eviction_minimum_reclaim["memory.available"], th("100Mi"));
    assert_eq!(
        c.kube_reserved.into_iter().collect::<Vec<_>>(),
        [
            ("cpu".to_owned(), q("200m")),
            ("memory".to_owned(), q("500Mi"))
        ],
        "flag beats drop-in and file, whole map"
    );
    assert_eq!(c.system_reserved.len(), 1);
    assert_eq!(c.event_record_qps, 0, "flag beats drop-in");
    assert_eq!(c.reserved_system_cpus, "0-1");
    assert_eq!(c.cgroup_root, "/flag");
    assert!(c.seccomp_default && c.protect_kernel_defaults && c.fail_cgroup_v1);
    assert_eq!(c.pod_pids_limit, 4096);
    assert_eq!(c.container_log_max_size, q("20Mi"));
    assert_eq!(c.image_gc_high_threshold_percent, 90);
    assert_eq!(
        c.allowed_unsafe_sysctls,
        ["net.core.somaxconn", "kernel.msg*"]
    );
    assert_eq!(
        c.streaming_connection_idle_timeout,
        Duration::from_secs(3600)
    );
    assert!(!c.enable_debugging_handlers);
    // Upstream's deprecation warning for each deprecated flag used, none for the others.
    let deprecated: Vec<&str> = n
        .warnings
        .iter()
        .filter_map(|w| w.strip_prefix("Flag --"))
        .filter_map(|w| {
            w.split_once(" has been deprecated, This parameter should be set via the config file")
        })
        .map(|(flag, _)| flag)
        .collect();
    assert!(deprecated.contains(&"anonymous-auth"), "{deprecated:?}");
    assert!(deprecated.contains(&"eviction-hard"));
    assert_eq!(deprecated.len(), 24, "{deprecated:?}");
    for undeprecated in ["seccomp-default", "fail-cgroupv1"] {
        assert!(!n.warnings.iter().any(|w| w.contains(undeprecated)));
    }
}

#[test]
fn seccomp_default_flag_only_turns_the_field_on() {
    let dir = Scratch::new("upstream-seccomp");
    let cfg = dir.write("config.yaml", &format!("{HEADER}seccompDefault: true\n"));
    let (c, _) = resolve_ok(&parse(&[
        "--config",
        cfg.to_str().unwrap(),
        "--seccomp-default=false",
    ]));
    assert!(c.seccomp_default, "upstream ORs the flag with the field");
    let (c, _) = resolve_ok(&parse(&[]));
    assert!(!c.seccomp_default);
}

fn resolve_err(args: &[&str]) -> String {
    resolve(&parse(args)).unwrap_err().to_string()
}

/// A flag whose field is refused unless default is refused with the same message as the field
/// set in the file (the message names both).
#[test]
fn a_refused_field_is_refused_the_same_way_by_its_flag() {
    let dir = Scratch::new("upstream-refused");
    for (flag, yaml, named) in [
        (
            "--runonce",
            "runOnce: true",
            "runOnce (--runonce) is set to true, which rkubelet does not support (run-once mode is not implemented)",
        ),
        (
            "--vmodule=pod_workers*=4",
            "logging: {vmodule: [{filePattern: \"pod_workers*\", verbosity: 4}]}",
            "logging.vmodule (--vmodule) is set to",
        ),
        (
            "--volume-plugin-dir=/opt/flex",
            "volumePluginDir: /opt/flex",
            "volumePluginDir (--volume-plugin-dir)",
        ),
        (
            "--kernel-memcg-notification",
            "kernelMemcgNotification: true",
            "kernelMemcgNotification (--kernel-memcg-notification)",
        ),
        (
            "--qos-reserved=memory=50%",
            "qosReserved: {memory: 50%}",
            "qosReserved (--qos-reserved)",
        ),
        (
            "--pod-cidr=10.1.0.0/24",
            "podCIDR: 10.1.0.0/24",
            "podCIDR (--pod-cidr)",
        ),
        (
            "--contention-profiling",
            "enableContentionProfiling: true",
            "enableContentionProfiling (--contention-profiling)",
        ),
        (
            "--enable-controller-attach-detach=false",
            "enableControllerAttachDetach: false",
            "enableControllerAttachDetach (--enable-controller-attach-detach)",
        ),
        (
            "--volume-stats-agg-period=2m",
            "volumeStatsAggPeriod: 2m",
            "volumeStatsAggPeriod (--volume-stats-agg-period)",
        ),
        (
            "--log-text-split-stream",
            "logging: {options: {text: {splitStream: true}}}",
            "logging.options (--log-text-split-stream, --log-text-info-buffer-size, --log-json-split-stream, --log-json-info-buffer-size)",
        ),
        (
            "--memory-manager-policy=Static",
            "memoryManagerPolicy: Static",
            "memoryManagerPolicy (--memory-manager-policy) \"Static\" is not implemented yet",
        ),
    ] {
        let cfg = dir.write("c.yaml", &format!("{HEADER}{yaml}\n"));
        let by_file = resolve_err(&["--config", cfg.to_str().unwrap()]);
        let plain = dir.write("plain.yaml", HEADER);
        let by_flag = resolve_err(&["--config", plain.to_str().unwrap(), flag]);
        assert_eq!(by_flag, by_file, "{flag}");
        assert!(by_flag.contains(named), "{flag}: {by_flag}");
    }
}

/// A warned field draws the same warning from its flag.
#[test]
fn a_warned_field_is_warned_the_same_way_by_its_flag() {
    let dir = Scratch::new("upstream-warned");
    for (flag, yaml, named) in [
        (
            "--log-flush-frequency=10s",
            "logging: {flushFrequency: 10s}",
            "logging.flushFrequency (--log-flush-frequency) is set to \"10s\"",
        ),
        (
            "--kube-api-content-type=application/json",
            "contentType: application/json",
            "contentType (--kube-api-content-type) is set to",
        ),
    ] {
        let cfg = dir.write("c.yaml", &format!("{HEADER}{yaml}\n"));
        let (_, by_file) = resolve_ok(&parse(&["--config", cfg.to_str().unwrap()]));
        let plain = dir.write("plain.yaml", HEADER);
        let (_, by_flag) = resolve_ok(&parse(&["--config", plain.to_str().unwrap(), flag]));
        let warned = |n: &NodeOptions| -> Vec<String> {
            n.warnings
                .iter()
                .filter(|w| w.contains(named))
                .cloned()
                .collect()
        };
        assert_eq!(warned(&by_flag).len(), 1, "{flag}: {:?}", by_flag.warnings);
        assert_eq!(warned(&by_flag), warned(&by_file), "{flag}");
    }
    // --log-flush-frequency and --vmodule are not deprecated upstream.
    let (_, n) = resolve_ok(&parse(&["--log-flush-frequency=5s"]));
    assert!(
        !n.warnings.iter().any(|w| w.contains("has been deprecated")),
        "{:?}",
        n.warnings
    );
}

#[test]
fn flag_only_settings_are_honoured_refused_or_warned_by_name() {
    // Deprecated ones at their default: accepted with upstream's deprecation warning.
    let (_, n) = resolve_ok(&parse(&[
        "--register-schedulable",
        "--experimental-allocatable-ignore-eviction=false",
        "--experimental-mounter-path=",
        "--cloud-config=/etc/kubernetes/cloud.conf",
    ]));
    for w in [
        "Flag --register-schedulable has been deprecated, will be removed in a future version",
        "Flag --experimental-allocatable-ignore-eviction has been deprecated, will be removed in 1.25 or later.",
        "Flag --experimental-mounter-path has been deprecated, will be removed in 1.25 or later. in favor of using CSI.",
        "Flag --cloud-config has been deprecated, will be removed in 1.25 or later, in favor of removing cloud provider code from Kubelet.",
    ] {
        assert!(n.warnings.iter().any(|x| x == w), "{w}: {:?}", n.warnings);
    }
    assert!(
        n.warnings.iter().any(|w| w.starts_with(
            "--cloud-config is set to \"/etc/kubernetes/cloud.conf\", which has no effect"
        )),
        "{:?}",
        n.warnings
    );
    // Off their default: refused, all named in one error.
    let err = resolve_err(&[
        "--register-schedulable=false",
        "--experimental-allocatable-ignore-eviction",
        "--experimental-mounter-path=/sbin/mount.helper",
    ]);
    for named in [
        "--register-schedulable is false, which rkubelet does not support",
        "--experimental-allocatable-ignore-eviction is true, which rkubelet does not support",
        "--experimental-mounter-path is set to \"/sbin/mount.helper\", which rkubelet does not support",
    ] {
        assert!(err.contains(named), "{named}: {err}");
    }
    // The lock file.
    let (_, n) = resolve_ok(&parse(&[]));
    assert_eq!((n.lock_file, n.exit_on_lock_contention), (None, false));
    let (_, n) = resolve_ok(&parse(&[
        "--lock-file=/var/run/kubelet.lock",
        "--exit-on-lock-contention",
    ]));
    assert_eq!(
        n.lock_file.as_deref(),
        Some(std::path::Path::new("/var/run/kubelet.lock"))
    );
    assert!(n.exit_on_lock_contention);
    assert_eq!(
        resolve_err(&["--exit-on-lock-contention"]),
        "invalid value for --exit-on-lock-contention: cannot exit on lock file contention: no lock file specified (set --lock-file)"
    );
}

#[test]
fn upstream_flag_values_parse_like_pflag_or_name_the_flag() {
    let cases: &[(&str, &str)] = &[
        (
            "--eviction-hard=memory.available=1Gi",
            "malformed pair \"memory.available=1Gi\", expect string<string",
        ),
        (
            "--kube-reserved=cpu",
            "malformed pair \"cpu\", expect string=string",
        ),
        ("--system-reserved=cpu=lots", "cpu: "),
        (
            "--eviction-soft-grace-period=memory.available=soon",
            "memory.available: \"soon\" is not a duration",
        ),
        ("--reserved-memory=0:cpu=1", "unknown memory type \"cpu\""),
        (
            "--reserved-memory=x:memory=1Gi",
            "expected numaNodeID:type=quantity",
        ),
        ("--vmodule=gc", "expect comma-separated list of pattern=N"),
        (
            "--pod-max-pids=9223372036854775808",
            "is not a 64-bit integer",
        ),
        ("--anonymous-auth=maybe", "\"maybe\" is not a boolean"),
        ("--container-log-max-size=big", "--container-log-max-size"),
    ];
    for (arg, want) in cases {
        let err = parse_err(&[arg]);
        assert!(err.contains(want), "{arg}: {err}");
        let flag = arg.split('=').next().unwrap();
        assert!(err.contains(flag), "error should name {flag}: {err}");
    }
    // Values pflag accepts.
    let f = parse(&[
        "--cpu-manager-policy-options=full-pcpus-only=true",
        "--cpu-manager-policy-options",
        "align-by-socket=true",
        "--reserved-memory=0:memory=1Gi,hugepages-1M=2Gi;1:memory=2Gi",
        "--vmodule=gc*=2,pleg=4",
        "--max-open-files=-1",
    ]);
    assert_eq!(f.upstream.cpu_manager_policy_options.len(), 2);
    let reserved = f.upstream.reserved_memory.concat();
    assert_eq!(
        reserved
            .iter()
            .map(|r| (r.numa_node, r.limits.len()))
            .collect::<Vec<_>>(),
        [(0, 2), (1, 1)]
    );
    let v = f.upstream.vmodule.concat();
    assert_eq!(
        v.iter()
            .map(|i| (i.file_pattern.as_str(), i.verbosity))
            .collect::<Vec<_>>(),
        [("gc*", 2), ("pleg", 4)]
    );
    assert_eq!(f.upstream.max_open_files, Some(-1));
    // An empty list value clears the configured list.
    let (c, _) = resolve_ok(&parse(&["--enforce-node-allocatable="]));
    assert!(c.enforce_node_allocatable.is_empty());
}
