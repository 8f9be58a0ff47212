use super::*;
use std::path::Path;

pub(super) const HEADER: &str =
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/// A scratch directory removed on drop (rkubelet has no tempfile dev-dependency).
pub(super) struct Scratch(pub(super) PathBuf);
impl Scratch {
    pub(super) fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("rkubelet-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
    pub(super) fn write(&self, name: &str, body: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
        p
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn parse(args: &[&str]) -> Flags {
    Flags::try_parse_from(std::iter::once("rkubelet").chain(args.iter().copied())).unwrap()
}

pub(super) fn parse_err(args: &[&str]) -> String {
    Flags::try_parse_from(std::iter::once("rkubelet").chain(args.iter().copied()))
        .unwrap_err()
        .to_string()
}

pub(super) fn resolve_ok(flags: &Flags) -> (KubeletConfiguration, NodeOptions) {
    resolve_with(flags, || Ok("Test-Host\n".to_string())).unwrap()
}

#[test]
fn clap_definition_is_consistent() {
    use clap::CommandFactory;
    Flags::command().debug_assert();
}

#[test]
fn credential_provider_flags() {
    let (_, node) = resolve_ok(&parse(&[]));
    assert_eq!(node.image_credential_provider_config, None);
    let (_, node) = resolve_ok(&parse(&[
        "--image-credential-provider-config=/etc/kubernetes/credential-providers.yaml",
        "--image-credential-provider-bin-dir",
        "/usr/libexec/kubernetes/credential-providers",
    ]));
    assert_eq!(
        node.image_credential_provider_config.as_deref(),
        Some(Path::new("/etc/kubernetes/credential-providers.yaml"))
    );
    assert_eq!(
        node.image_credential_provider_bin_dir,
        Path::new("/usr/libexec/kubernetes/credential-providers")
    );
}

#[test]
fn container_gc_flags_and_pod_infra_image() {
    let (_, node) = resolve_ok(&parse(&[]));
    assert_eq!(node.container_gc, ContainerGcPolicy::default());
    assert_eq!(node.container_gc.max_per_pod_container, 1);
    assert_eq!(node.container_gc.max_containers, -1);
    assert_eq!(node.pod_infra_container_image, "registry.k8s.io/pause:3.10");
    assert!(!node.warnings.iter().any(|w| w.contains("dead-containers")));

    let (_, node) = resolve_ok(&parse(&[
        "--minimum-container-ttl-duration",
        "1m30s",
        "--maximum-dead-containers-per-container",
        "2",
        "--maximum-dead-containers",
        "-1",
        "--pod-infra-container-image",
        "example.com/pause:1",
    ]));
    assert_eq!(
        node.container_gc,
        ContainerGcPolicy {
            min_age: std::time::Duration::from_secs(90),
            max_per_pod_container: 2,
            max_containers: -1,
        }
    );
    assert_eq!(node.pod_infra_container_image, "example.com/pause:1");
    assert!(node.warnings.contains(&"Flag --maximum-dead-containers has been deprecated, Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.".to_owned()));
    assert_eq!(
        node.warnings
            .iter()
            .filter(|w| w.starts_with("Flag --m"))
            .count(),
        3
    );
    assert!(parse_err(&["--maximum-dead-containers", "x"]).contains("is not a 32-bit integer"));
}

#[test]
fn kubeadm_and_distribution_flags() {
    let f = parse(&[
        "--cloud-provider=external",
        "--provider-id=aws:///eu-west-1a/i-0123",
        "--register-with-taints=dedicated=gpu:NoSchedule,node-role.kubernetes.io/control-plane:NoSchedule",
        "--node-status-update-frequency=4s",
        "--logging-format=json",
        "--pod-infra-container-image=registry.k8s.io/pause:3.10",
    ]);
    let (c, n) = resolve_ok(&f);
    assert!(n.external_cloud_provider);
    assert_eq!(c.provider_id, "aws:///eu-west-1a/i-0123");
    let taints: Vec<(&str, Option<&str>, &str)> = c
        .register_with_taints
        .iter()
        .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
        .collect();
    assert_eq!(
        taints,
        [
            ("dedicated", Some("gpu"), "NoSchedule"),
            ("node-role.kubernetes.io/control-plane", None, "NoSchedule")
        ]
    );
    assert_eq!(c.node_status_update_frequency, Duration::from_secs(4));
    assert_eq!(
        (c.logging.format.as_str(), n.log_format),
        ("json", LogFormat::Json)
    );
    let deprecated: Vec<&str> = n
        .warnings
        .iter()
        .filter_map(|w| w.strip_prefix("Flag --"))
        .filter_map(|w| w.split_once(" has been deprecated, "))
        .map(|(flag, _)| flag)
        .collect();
    assert_eq!(
        deprecated,
        [
            "node-status-update-frequency",
            "logging-format",
            "register-with-taints",
            "pod-infra-container-image"
        ],
        "--provider-id and --cloud-provider are not deprecated upstream"
    );
    assert!(n.warnings.contains(&"Flag --pod-infra-container-image has been deprecated, will be removed in 1.35. Image garbage collector will get sandbox image information from CRI.".to_owned()));
    let (_, n) = resolve_ok(&parse(&["--cloud-provider="]));
    assert!(!n.external_cloud_provider);
    // The version the Node reports: ours, or the one `--version=v1.33.0-...` sets.
    assert_eq!(n.kubelet_version, "v1.33.0");
    let (_, n) = resolve_ok(&parse(&["--version=v1.33.0-rk.1"]));
    assert_eq!(n.kubelet_version, "v1.33.0-rk.1");

    let err = resolve(&parse(&["--cloud-provider=aws"]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid value for --cloud-provider: cloud provider \"aws\" was specified, but built-in cloud providers are disabled. Please set --cloud-provider=external and migrate to an external cloud provider"
    );
    let err = resolve(&parse(&["--logging-format=xml"]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("logging.format: Unsupported value: \"xml\""),
        "{err}"
    );
    for (arg, want) in [
        (
            "a=b:Sometimes",
            "invalid taint effect: Sometimes, unsupported taint effect",
        ),
        ("a=b=c:NoSchedule", "invalid taint spec: a=b=c:NoSchedule"),
        ("a:b:NoSchedule", "invalid taint spec: a:b:NoSchedule"),
        ("-bad:NoSchedule", "invalid taint spec: -bad:NoSchedule, "),
        ("a=b c:NoSchedule", "invalid taint spec: a=b c:NoSchedule, "),
        (
            "a:NoSchedule,a=x:NoSchedule",
            "duplicated taints with the same key and effect: a:NoSchedule",
        ),
    ] {
        let err = parse_err(&[&format!("--register-with-taints={arg}")]);
        assert!(err.contains(want), "{arg}: {err}");
    }
    // The last occurrence wins, as with pflag: later flags override (KUBELET_EXTRA_ARGS).
    let f = parse(&[
        "--container-runtime-endpoint=unix:///a.sock",
        "--register-with-taints=a:NoSchedule",
        "--container-runtime-endpoint=unix:///b.sock",
        "--register-with-taints=",
    ]);
    assert_eq!(
        f.container_runtime_endpoint.as_deref(),
        Some("unix:///b.sock")
    );
    assert_eq!(f.register_with_taints, Some(Taints(Vec::new())));
    assert_eq!(
        parse(&["--cluster-dns=a", "--cluster-dns=b"]).cluster_dns,
        ["a", "b"]
    );
}

/// kubeadm's `config.yaml` and each `kubeadm-flags.env` variant (packaging/kubeadm):
/// the zero values kubeadm writes get upstream's defaults and draw no warning.
#[test]
fn kubeadm_fixture_files_resolve_with_upstream_defaults() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/kubeadm");
    let read = |f: &str| std::fs::read_to_string(fixtures.join(f)).unwrap();
    // kubeadm's `cgroupDriver: systemd` belongs to another part of this work.
    let config = read("config.yaml").replace("cgroupDriver: systemd", "cgroupDriver: cgroupfs");
    let dir = Scratch::new("kubeadm");
    let cfg = dir.write("config.yaml", &config);
    let zero_fields: Vec<&str> = config
        .lines()
        .filter_map(|l| l.trim().split_once(": "))
        .filter(|(_, v)| ["0s", "0", "\"0\"", "{}", "\"\""].contains(v))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(zero_fields.len(), 24, "{zero_fields:?}");
    for (file, node_name, external) in [
        ("kubeadm-flags.env", "test-host", false),
        ("kubeadm-flags-node-ip.env", "worker-1", false),
        ("kubeadm-flags-cloud.env", "test-host", true),
    ] {
        let env = read(file);
        let args = env
            .trim()
            .strip_prefix("KUBELET_KUBEADM_ARGS=\"")
            .and_then(|a| a.strip_suffix('"'))
            .unwrap();
        let mut argv = vec!["--config", cfg.to_str().unwrap()];
        argv.extend(args.split_whitespace());
        let (c, n) = resolve_ok(&parse(&argv));
        assert_eq!(
            (n.node_name.as_str(), n.external_cloud_provider),
            (node_name, external),
            "{file}"
        );
        assert_eq!(
            c.container_runtime_endpoint,
            "unix:///var/run/containerd/containerd.sock"
        );
        assert_eq!(n.pod_infra_container_image, "registry.k8s.io/pause:3.10");
        for w in &n.warnings {
            for field in &zero_fields {
                assert!(!w.contains(field), "{file}: warning about {field}: {w}");
            }
        }
        // Upstream's defaults replaced every zero.
        let d = |s: i64| Duration::from_secs(s);
        assert_eq!(c.sync_frequency, d(60));
        assert_eq!(
            (c.file_check_frequency, c.http_check_frequency),
            (d(20), d(20))
        );
        assert_eq!(c.node_status_update_frequency, d(10));
        assert_eq!(c.node_status_report_frequency, d(300));
        assert_eq!(c.streaming_connection_idle_timeout, d(4 * 3600));
        assert_eq!(
            (c.image_minimum_gc_age, c.image_maximum_gc_age),
            (d(120), d(0))
        );
        assert_eq!(c.eviction_pressure_transition_period, d(300));
        assert_eq!(c.cpu_manager_reconcile_period, d(10));
        assert_eq!(c.runtime_request_timeout, d(120));
        assert_eq!(c.volume_stats_agg_period, d(60));
        assert_eq!(c.shutdown_grace_period, d(0));
        assert_eq!(c.shutdown_grace_period_critical_pods, d(0));
        assert_eq!(c.authentication.webhook.cache_ttl, d(120));
        assert!(c.authentication.webhook.enabled && !c.authentication.anonymous.enabled);
        assert_eq!(
            c.authentication.x509.client_ca_file,
            "/etc/kubernetes/pki/ca.crt"
        );
        assert_eq!(c.authorization.mode, "Webhook");
        assert_eq!(c.authorization.webhook.cache_authorized_ttl, d(300));
        assert_eq!(c.authorization.webhook.cache_unauthorized_ttl, d(30));
        assert_eq!(
            (c.healthz_bind_address.as_str(), c.healthz_port),
            ("127.0.0.1", 10248)
        );
        assert_eq!(c.read_only_port, 0);
        assert_eq!(
            (c.cluster_dns.as_slice(), c.cluster_domain.as_str()),
            (&["10.96.0.10".to_owned()][..], "cluster.local")
        );
        assert_eq!(c.static_pod_path, "/etc/kubernetes/manifests");
        assert_eq!((n.log_format, n.verbosity), (LogFormat::Text, 0));
    }
}

#[test]
fn no_flags_means_defaults_and_nothing_overridden() {
    let f = parse(&[]);
    assert_eq!(f.root_dir, Path::new("/var/lib/kubelet"));
    assert_eq!(f.cert_dir, None);
    assert_eq!(
        (f.config.as_ref(), f.port, f.sync_frequency, f.verbosity),
        (None, None, None, None)
    );
    let (c, n) = resolve_ok(&f);
    // Without --config, upstream's flag-era defaults apply.
    assert_eq!(c.read_only_port, 10255);
    assert_eq!(c.authorization.mode, "AlwaysAllow");
    assert_eq!(n.node_name, "test-host");
    assert_eq!((n.verbosity, n.kubeconfig.as_ref()), (0, None));
    // Only the support table's warnings for upstream defaults rkubelet does not implement
    // (fields true by default, gates on by default): no flag was used.
    let defaults = n
        .warnings
        .iter()
        .filter(|w| w.contains(" is true, which rkubelet does not implement"))
        .count();
    assert_eq!(defaults, 3, "{:?}", n.warnings);
    assert!(
        n.warnings.iter().all(|w| {
            w.contains(" is true, which rkubelet does not implement")
                || (w.starts_with("feature gate ")
                    && w.contains("=true (by default) is not implemented"))
        }),
        "{:?}",
        n.warnings
    );
}

#[test]
fn values_parse_like_pflag() {
    let f = parse(&[
        "--v=4",
        "--port",
        "0x2800",
        "--read-only-port=0",
        "--sync-frequency=1m30s",
        "--address=::",
        "--fail-swap-on=false",
        "--register-node",
        "--max-pods=-1",
    ]);
    assert_eq!(f.verbosity, Some(4));
    assert_eq!(f.port, Some(10240));
    assert_eq!(f.read_only_port, Some(0));
    assert_eq!(f.sync_frequency, Some(Duration::from_secs(90)));
    assert_eq!(f.address.as_deref(), Some("::"));
    assert_eq!(
        (f.fail_swap_on, f.register_node, f.max_pods),
        (Some(false), Some(true), Some(-1))
    );
    assert_eq!(parse(&["-v", "3"]).verbosity, Some(3));
    assert_eq!(parse(&["-v5"]).verbosity, Some(5));
    assert_eq!(parse(&["--port=010"]).port, Some(8));
}

#[test]
fn cgroup_flags_reach_the_config_and_node_options() {
    let f = parse(&[
        "--kubelet-cgroups=/kubelet.slice",
        "--runtime-cgroups=/runtime.slice",
    ]);
    let (c, n) = resolve_ok(&f);
    assert_eq!(c.kubelet_cgroups, "/kubelet.slice");
    assert_eq!(n.runtime_cgroups, "/runtime.slice");
    // --kubelet-cgroups is a deprecated config-backed flag; --runtime-cgroups is not.
    let deprecated: Vec<&String> = n
        .warnings
        .iter()
        .filter(|w| w.contains("has been deprecated"))
        .collect();
    assert_eq!(deprecated.len(), 1, "{:?}", n.warnings);
    assert!(deprecated[0].contains("--kubelet-cgroups"));
    // --system-cgroups needs a cgroupRoot, as upstream validates.
    let err = resolve(&parse(&["--system-cgroups", "/system.slice"])).unwrap_err();
    assert!(
        err.to_string().contains("systemCgroups (--system-cgroups)"),
        "{err}"
    );
    let (_, n) = resolve_ok(&parse(&[]));
    assert_eq!(n.runtime_cgroups, "");
}

#[test]
fn bad_values_are_rejected_with_the_flag_named() {
    let cases: &[(&[&str], &str)] = &[
        (&["--sync-frequency=banana"], "\"banana\" is not a duration"),
        (&["--runtime-request-timeout=5"], "missing unit"),
        (&["--port=abc"], "\"abc\" is not a 32-bit integer"),
        (&["--port=4294967296"], "is not a 32-bit integer"),
        (
            &["--address=localhost"],
            "\"localhost\" is not a valid IP address",
        ),
        (&["--healthz-bind-address="], "is not a valid IP address"),
        (
            &["--manifest-url-header=novalue"],
            "malformed pair \"novalue\", expect string:string",
        ),
        (&["--fail-swap-on=maybe"], "\"maybe\" is not a boolean"),
        (&["--v=loud"], "is not a log level"),
        (&["--no-such-flag"], "unexpected argument '--no-such-flag'"),
    ];
    for (args, want) in cases {
        let err = parse_err(args);
        assert!(err.contains(want), "args {args:?}: {err}");
        let flag = args[0].split('=').next().unwrap();
        assert!(err.contains(flag), "error should name {flag}: {err}");
    }
}

#[test]
fn precedence_flags_over_drop_ins_over_file_over_defaults() {
    let dir = Scratch::new("precedence");
    let cfg = dir.write(
        "config.yaml",
        &format!("{HEADER}port: 11111\nsyncFrequency: 30s\nstaticPodPath: /etc/kubernetes/manifests\nmaxPods: 50\nclusterDNS: [10.0.0.10]\nlogging:\n  verbosity: 2\n"),
    );
    dir.write(
        "conf.d/10.conf",
        &format!("{HEADER}port: 12222\nmaxPods: 60\n"),
    );
    let conf_d = dir.0.join("conf.d");
    let base = [
        "--config",
        cfg.to_str().unwrap(),
        "--config-dir",
        conf_d.to_str().unwrap(),
    ];

    let (c, n) = resolve_ok(&parse(&base));
    assert_eq!(c.port, 12222, "drop-in beats file");
    assert_eq!(c.max_pods, 60);
    assert_eq!(
        c.sync_frequency,
        Duration::from_secs(30),
        "file beats default"
    );
    assert_eq!(c.static_pod_path, "/etc/kubernetes/manifests");
    assert_eq!(c.file_check_frequency, Duration::from_secs(20), "default");
    assert_eq!(
        c.read_only_port, 0,
        "with --config the v1beta1 default applies"
    );
    assert_eq!(n.verbosity, 2, "logging.verbosity from the file");

    let mut args = base.to_vec();
    args.extend([
        "--port=13333",
        "--sync-frequency=5s",
        "--v=6",
        "--cluster-dns=10.0.0.2,10.0.0.3",
        "--cluster-dns=10.0.0.4",
    ]);
    let (c, n) = resolve_ok(&parse(&args));
    assert_eq!(c.port, 13333, "flag beats drop-in");
    assert_eq!(c.sync_frequency, Duration::from_secs(5), "flag beats file");
    assert_eq!(c.max_pods, 60, "flags not given leave the config alone");
    assert_eq!(c.cluster_dns, ["10.0.0.2", "10.0.0.3", "10.0.0.4"]);
    assert_eq!(n.verbosity, 6);
    assert_eq!(c.logging.verbosity, 6);
    let deprecated: Vec<&String> = n
        .warnings
        .iter()
        .filter(|w| w.contains("has been deprecated"))
        .collect();
    assert_eq!(deprecated.len(), 3, "{:?}", n.warnings);
    assert!(n.warnings.iter().any(|w| w.starts_with(
        "Flag --port has been deprecated, This parameter should be set via the config file"
    )));

    let (c, _) = resolve_ok(&parse(&[&base[..], &["--cluster-dns="]].concat()));
    assert!(
        c.cluster_dns.is_empty(),
        "an empty --cluster-dns clears the list"
    );
}

#[test]
fn manifest_url_headers_replace_then_append() {
    let dir = Scratch::new("headers");
    let cfg = dir.write(
        "config.yaml",
        &format!("{HEADER}staticPodURLHeader:\n  old: [x]\n"),
    );
    let f = parse(&[
        "--config",
        cfg.to_str().unwrap(),
        "--manifest-url=http://example.com/pods",
        "--manifest-url-header",
        "a:hello,b:again,c:world",
        "--manifest-url-header",
        "b: beautiful",
    ]);
    let (c, _) = resolve_ok(&f);
    assert_eq!(c.static_pod_url, "http://example.com/pods");
    let got: Vec<(&str, Vec<&str>)> = c
        .static_pod_url_header
        .iter()
        .map(|(k, v)| (k.as_str(), v.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a", vec!["hello"]),
            ("b", vec!["again", "beautiful"]),
            ("c", vec!["world"])
        ]
    );
}

#[test]
fn config_errors_surface_from_resolve() {
    let dir = Scratch::new("errors");
    let cfg = dir.write("config.yaml", &format!("{HEADER}syncFrequency: banana\n"));
    let err = resolve_with(&parse(&["--config", cfg.to_str().unwrap()]), || {
        Ok("h".into())
    })
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "kubelet config {}: syncFrequency: \"banana\" is not a duration (expected a Go duration such as \"1m0s\" or \"20s\")",
            cfg.display()
        )
    );
    // Flags are validated with the rest of the configuration.
    let err = resolve_with(&parse(&["--port=0", "--max-pods=-2"]), || Ok("h".into())).unwrap_err();
    let ConfigError::Invalid(errs) = err else {
        panic!("expected validation errors")
    };
    assert_eq!(errs.len(), 2, "{errs:?}");
    // Unknown fields are dropped with a warning naming them (upstream's lenient fallback).
    let cfg = dir.write("unknown.yaml", &format!("{HEADER}maxPod: 3\n"));
    let (c, n) = resolve_with(&parse(&["--config", cfg.to_str().unwrap()]), || {
        Ok("h".into())
    })
    .unwrap();
    assert_eq!(c.max_pods, 110);
    assert!(
        n.warnings[0].starts_with("using lenient decoding as strict decoding failed: ")
            && n.warnings[0].ends_with("unknown field \"maxPod\" (did you mean \"maxPods\"?)"),
        "{:?}",
        n.warnings
    );
    // A bad value stops it, named with its flag.
    let err = resolve_with(&parse(&["--cgroup-driver=cgroupv2"]), || Ok("h".into()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cgroupDriver (--cgroup-driver) \"cgroupv2\" is invalid"),
        "{err}"
    );
}

#[test]
fn node_name_and_identity_flags() {
    let f = parse(&[
        "--hostname-override",
        "  Node-A.Example ",
        "--node-ip=10.0.0.5,fd00::5",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        "--root-dir=/tmp/kl",
    ]);
    let (_, n) = resolve_with(&f, || panic!("machine hostname not needed")).unwrap();
    assert_eq!(n.node_name, "node-a.example");
    assert_eq!(n.hostname_override.as_deref(), Some("  Node-A.Example "));
    assert_eq!(n.node_ip.as_deref(), Some("10.0.0.5,fd00::5"));
    assert_eq!(
        n.kubeconfig.as_deref(),
        Some(Path::new("/etc/kubernetes/kubelet.conf"))
    );
    assert_eq!(n.root_dir, Path::new("/tmp/kl"));

    let empty = resolve_with(&parse(&[]), || Ok(" \n".into())).unwrap_err();
    assert_eq!(empty.to_string(), "empty hostname is invalid");
    let failed = resolve_with(&parse(&[]), || Err(std::io::Error::other("boom"))).unwrap_err();
    assert_eq!(failed.to_string(), "couldn't determine hostname: boom");
    // An empty override means "use the machine hostname".
    let (_, n) = resolve_with(&parse(&["--hostname-override="]), || Ok("Box".into())).unwrap();
    assert_eq!((n.node_name.as_str(), n.hostname_override), ("box", None));

    for (ip, want) in [
        ("10.0.0.300", "could not parse \"10.0.0.300\""),
        ("10.0.0.1,10.0.0.2", "one IPv4 and one IPv6"),
        ("10.0.0.1,fd00::1,fd00::2", "single IP or a dual-stack pair"),
    ] {
        let arg = format!("--node-ip={ip}");
        let err = resolve_with(&parse(&[&arg]), || Ok("h".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid value for --node-ip: ") && err.contains(want),
            "{ip}: {err}"
        );
    }
}

#[test]
fn every_flag_is_in_the_support_table() {
    use clap::CommandFactory;
    let table: Vec<&str> = support::FLAGS.iter().map(|(f, _)| *f).collect();
    let mut flags = Vec::new();
    for arg in Flags::command().get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if long == "help" {
            continue;
        }
        flags.push(long.to_owned());
        assert!(
            table.contains(&long),
            "--{long} has no row in kubelet::config::support::FLAGS"
        );
    }
    assert_eq!(
        flags.len(),
        table.len(),
        "stale rows in FLAGS: {table:?} vs {flags:?}"
    );
}

#[test]
fn feature_gates_flag_merges_over_the_config_per_gate() {
    let dir = Scratch::new("gates");
    let cfg = dir.write(
        "config.yaml",
        &format!("{HEADER}featureGates:\n  NodeSwap: false\n  ImageMaximumGCAge: false\n"),
    );
    let (c, n) = resolve_ok(&parse(&[
        "--config",
        cfg.to_str().unwrap(),
        "--feature-gates=NodeSwap=true,KubeletCrashLoopBackOffMax=true",
        "--feature-gates",
        "GracefulNodeShutdown=false",
    ]));
    let gates = c.gates();
    use kubelet::config::Feature;
    assert!(gates.enabled(Feature::NodeSwap), "flag wins");
    assert!(!gates.enabled(Feature::ImageMaximumGcAge), "config kept");
    assert!(gates.enabled(Feature::KubeletCrashLoopBackOffMax));
    assert!(!gates.enabled(Feature::GracefulNodeShutdown));
    // The gate's default applies although the file was decoded before the flag was seen.
    assert_eq!(
        c.crash_loop_back_off.max_container_restart_period,
        Some(Duration::from_mins(5))
    );
    assert!(
        n.warnings
            .iter()
            .any(|w| w.starts_with("Flag --feature-gates has been deprecated")),
        "{:?}",
        n.warnings
    );
    let err = resolve(&parse(&["--feature-gates=NoSuchGate=true"]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unrecognized feature gate: NoSuchGate"),
        "{err}"
    );
    let err = resolve(&parse(&["--feature-gates=SidecarContainers=false"]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "cannot set feature gate SidecarContainers to false, feature is locked to true"
        ),
        "{err}"
    );
    let err = parse_err(&["--feature-gates=NodeSwap"]);
    assert!(
        err.contains("--feature-gates") && err.contains("malformed pair"),
        "{err}"
    );
}

#[test]
fn go_integer_and_bool_syntax() {
    for (s, want) in [
        ("10250", 10250),
        ("-999", -999),
        ("+5", 5),
        ("0x10", 16),
        ("0o17", 15),
        ("017", 15),
        ("0b101", 5),
        ("0", 0),
    ] {
        assert_eq!(parse_int32(s), Ok(want), "{s}");
    }
    for s in ["", "-", "0x", "1e3", "2147483648", "--1", "0x-1", "1_000"] {
        assert!(parse_int32(s).is_err(), "{s}");
    }
    for (s, want) in [
        ("1", true),
        ("T", true),
        ("True", true),
        ("0", false),
        ("f", false),
        ("FALSE", false),
    ] {
        assert_eq!(parse_bool(s), Ok(want), "{s}");
    }
    assert!(parse_bool("yes").is_err());
}

#[test]
fn node_labels_parse_and_refuse_foreign_kubernetes_io_labels() {
    let l = parse_node_labels("a=b, node-role.kubernetes.io/worker=,kubernetes.io/os=linux")
        .unwrap_err()
        .to_string();
    assert!(l.contains("node-role.kubernetes.io/worker"), "{l}");
    let ok = parse_node_labels("a=b,node.kubernetes.io/pool=x,kubernetes.io/os=linux").unwrap();
    assert_eq!(ok.get("a").map(String::as_str), Some("b"));
    assert_eq!(ok.len(), 3);
    let bad = parse_node_labels("novalue").unwrap_err().to_string();
    assert!(
        bad.contains("node-labels") && bad.contains("key=value"),
        "{bad}"
    );
    assert!(parse_node_labels("").unwrap().is_empty());
}

#[test]
fn certificate_flags() {
    let f = parse(&[
        "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        "--rotate-certificates",
        "--hostname-override=n1",
    ]);
    let (c, n) = resolve_with(&f, || panic!("machine hostname not needed")).unwrap();
    assert!(c.rotate_certificates);
    assert_eq!(
        n.bootstrap_kubeconfig.as_deref(),
        Some(Path::new("/etc/kubernetes/bootstrap-kubelet.conf"))
    );
    assert!(
        n.warnings.iter().any(|w| w.contains("rotate-certificates")),
        "deprecated flag warned: {:?}",
        n.warnings
    );
    let (c, n) =
        resolve_with(&parse(&["--rotate-certificates=false"]), || Ok("n1".into())).unwrap();
    assert!(!c.rotate_certificates);
    assert_eq!(n.bootstrap_kubeconfig, None);
    // kubeadm's documented flag for serving-certificate bootstrap: the config field.
    let (c, n) = resolve_with(
        &parse(&["--rotate-server-certificates"]),
        || Ok("n1".into()),
    )
    .unwrap();
    assert!(c.server_tls_bootstrap);
    assert!(
        n.warnings
            .iter()
            .any(|w| w.contains("rotate-server-certificates")),
        "deprecated flag warned: {:?}",
        n.warnings
    );
    let (c, _) = resolve_with(&parse(&["--rotate-server-certificates=false"]), || {
        Ok("n1".into())
    })
    .unwrap();
    assert!(!c.server_tls_bootstrap);
}
