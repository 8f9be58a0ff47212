//! The rkubelet command line: upstream kubelet flag names, help texts and precedence.
//! Owns: flag parsing ([`Flags`]) and turning flags + config file + drop-ins into the effective
//! configuration ([`resolve`]): flags given on the command line > `--config-dir` drop-ins >
//! `--config` file > defaults. Emits the validated `KubeletConfiguration` and the
//! node-identity options ([`NodeOptions`]) that live outside it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;
use kubelet::config::features::{GATES, PreRelease, parse_feature_gates_flag};
use kubelet::config::{
    ConfigError, Duration, KubeletConfiguration, apply_gated_defaults, load_config_upstream,
    parse_go_duration, support, validate,
};
use kubelet::kuberuntime::gc::ContainerGcPolicy;
use kubelet::version::KUBERNETES_VERSION;

use crate::flagvalues::{Taints, VersionFlag, parse_taints, parse_version_flag};
use crate::logging::LogFormat;

const DEPRECATED: &str = "This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information.";

/// Help text of a config-backed flag, with upstream's deprecation note appended.
macro_rules! deprecated {
    ($text:literal) => {
        concat!(
            $text,
            " (DEPRECATED: This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information.)"
        )
    };
}

const ABOUT: &str = "The kubelet is the primary \"node agent\" that runs on each node.";
const LONG_ABOUT: &str = "The kubelet is the primary \"node agent\" that runs on each
node. It can register the node with the apiserver using one of: the hostname; a flag to
override the hostname; or specific logic for a cloud provider.

The kubelet works in terms of a PodSpec. A PodSpec is a YAML or JSON object
that describes a pod. The kubelet takes a set of PodSpecs that are provided through
various mechanisms (primarily through the apiserver) and ensures that the containers
described in those PodSpecs are running and healthy. The kubelet doesn't manage
containers which were not created by Kubernetes.

Other than from an PodSpec from the apiserver, there are two ways that a container
manifest can be provided to the Kubelet.

File: Path passed as a flag on the command line. Files under this path will be monitored
periodically for updates. The monitoring period is 20s by default and is configurable
via a flag.

HTTP endpoint: HTTP endpoint passed as a parameter on the command line. This endpoint
is checked every 20 seconds (also configurable with a flag).";

/// Command-line flags. Config-backed flags are `Option`s: `None` means "not given", so the
/// config file value stands.
#[derive(Debug, Clone, Parser)]
// `args_override_self`: a flag given twice takes its last value, as pflag does (the kubeadm
// drop-in appends `$KUBELET_EXTRA_ARGS` after `$KUBELET_KUBEADM_ARGS` to override it).
#[command(name = "rkubelet", about = ABOUT, long_about = LONG_ABOUT, allow_negative_numbers = true, args_override_self = true, disable_version_flag = true)]
pub struct Flags {
    #[arg(
        long,
        value_name = "string",
        help = "The Kubelet will load its initial configuration from this file. The path may be absolute or relative; relative paths start at the Kubelet's current working directory. Omit this flag to use the built-in default configuration values. Command-line flags override configuration from this file."
    )]
    pub config: Option<PathBuf>,
    #[arg(
        long = "config-dir",
        value_name = "string",
        help = "Path to a directory to specify drop-ins, allows the user to optionally specify additional configs to overwrite what is provided by default and in the KubeletConfigFile flag. [default='']"
    )]
    pub config_dir: Option<PathBuf>,
    #[arg(
        long,
        value_name = "string",
        help = "Path to a kubeconfig file, specifying how to connect to the API server. Providing --kubeconfig enables API server mode, omitting --kubeconfig enables standalone mode."
    )]
    pub kubeconfig: Option<PathBuf>,
    #[arg(
        long = "hostname-override",
        value_name = "string",
        help = "If non-empty, will use this string as identification instead of the actual hostname. If --cloud-provider is set, the cloud provider determines the name of the node (consult cloud provider documentation to determine if and how the hostname is used)."
    )]
    pub hostname_override: Option<String>,
    #[arg(
        long = "node-ip",
        value_name = "string",
        help = "IP address (or comma-separated dual-stack IP addresses) of the node. If unset, kubelet will use the node's default IPv4 address, if any, or its default IPv6 address if it has no IPv4 addresses. You can pass '::' to make it prefer the default IPv6 address rather than the default IPv4 address."
    )]
    pub node_ip: Option<String>,
    #[arg(
        long = "node-labels",
        value_name = "mapStringString",
        help = "<Warning: Alpha feature> Labels to add when registering the node in the cluster. Labels must be key=value pairs separated by ','. Labels in the 'kubernetes.io' namespace must begin with an allowed prefix ('kubelet.kubernetes.io', 'node.kubernetes.io') or be in the specifically allowed set ('beta.kubernetes.io/arch', 'beta.kubernetes.io/instance-type', 'beta.kubernetes.io/os', 'failure-domain.beta.kubernetes.io/region', 'failure-domain.beta.kubernetes.io/zone', 'kubernetes.io/arch', 'kubernetes.io/hostname', 'kubernetes.io/os', 'node.kubernetes.io/instance-type', 'topology.kubernetes.io/region', 'topology.kubernetes.io/zone')"
    )]
    pub node_labels: Option<String>,
    #[arg(
        long = "cert-dir",
        value_name = "string",
        help = "The directory where the TLS certs are located. If --tls-cert-file and --tls-private-key-file are provided, this flag will be ignored. (default <root-dir>/pki)"
    )]
    pub cert_dir: Option<PathBuf>,
    #[arg(
        long = "root-dir",
        value_name = "string",
        default_value = "/var/lib/kubelet",
        help = "Directory path for managing kubelet files (volume mounts,etc)."
    )]
    pub root_dir: PathBuf,
    /// Overrides `logging.verbosity`.
    #[arg(short = 'v', long = "v", value_name = "Level", value_parser = parse_level, help = "number for the log level verbosity")]
    pub verbosity: Option<u32>,

    #[arg(long = "feature-gates", value_name = "mapStringBool", value_parser = parse_gates, help = feature_gates_help())]
    pub feature_gates: Vec<BTreeMap<String, bool>>,
    #[arg(
        long = "version",
        value_name = "version",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_version_flag,
        help = "--version, --version=raw prints version information and quits; --version=vX.Y.Z... sets the reported version"
    )]
    pub version: Option<VersionFlag>,
    #[arg(
        long = "cloud-provider",
        value_name = "string",
        help = "The provider for cloud services. Set to empty string for running with no cloud provider. Set to 'external' for running with an external cloud provider. If set, the cloud provider determines the name of the node (consult cloud provider documentation to determine if and how the hostname is used)."
    )]
    pub cloud_provider: Option<String>,
    /// Config-backed, but not deprecated upstream.
    #[arg(
        long = "provider-id",
        value_name = "string",
        help = "Unique identifier for identifying the node in a machine database, i.e cloudprovider"
    )]
    pub provider_id: Option<String>,
    #[arg(long = "register-with-taints", value_name = "[]api.Taint", value_parser = parse_taints, help = deprecated!("Register the node with the given list of taints (comma separated \"<key>=<value>:<effect>\"). No-op if register-node is false."))]
    pub register_with_taints: Option<Taints>,
    #[arg(long = "logging-format", value_name = "string", help = deprecated!("Sets the log format. Permitted formats: \"json\" (gated by LoggingBetaOptions), \"text\"."))]
    pub logging_format: Option<String>,
    #[arg(long = "node-status-update-frequency", value_name = "duration", value_parser = parse_duration, help = deprecated!("Specifies how often kubelet posts node status to master. Note: be cautious when changing the constant, it must work with nodeMonitorGracePeriod in nodecontroller. (default 10s)"))]
    pub node_status_update_frequency: Option<Duration>,

    #[arg(long = "pod-manifest-path", value_name = "string", help = deprecated!("Path to the directory containing static pod files to run, or the path to a single static pod file. Files starting with dots will be ignored."))]
    pub pod_manifest_path: Option<String>,
    #[arg(long = "sync-frequency", value_name = "duration", value_parser = parse_duration, help = deprecated!("Max period between synchronizing running containers and config (default 1m0s)"))]
    pub sync_frequency: Option<Duration>,
    #[arg(long = "file-check-frequency", value_name = "duration", value_parser = parse_duration, help = deprecated!("Duration between checking config files for new data (default 20s)"))]
    pub file_check_frequency: Option<Duration>,
    #[arg(long = "http-check-frequency", value_name = "duration", value_parser = parse_duration, help = deprecated!("Duration between checking http for new data (default 20s)"))]
    pub http_check_frequency: Option<Duration>,
    #[arg(long = "manifest-url", value_name = "string", help = deprecated!("URL for accessing additional Pod specifications to run"))]
    pub manifest_url: Option<String>,
    #[arg(long = "manifest-url-header", value_name = "colonSeparatedMultimapStringString", value_parser = parse_header_pairs, help = deprecated!("Comma-separated list of HTTP headers to use when accessing the url provided to --manifest-url. Multiple headers with the same name will be added in the same order provided. This flag can be repeatedly invoked. For example: --manifest-url-header 'a:hello,b:again,c:world' --manifest-url-header 'b:beautiful'"))]
    pub manifest_url_header: Vec<HeaderPairs>,
    #[arg(long, value_name = "ip", value_parser = parse_ip, help = deprecated!("The IP address for the Kubelet to serve on (set to '0.0.0.0' or '::' for listening on all interfaces and IP address families) (default 0.0.0.0)"))]
    pub address: Option<String>,
    #[arg(long, value_name = "int32", value_parser = parse_int32, help = deprecated!("The port for the Kubelet to serve on. (default 10250)"))]
    pub port: Option<i32>,
    #[arg(long = "read-only-port", value_name = "int32", value_parser = parse_int32, help = deprecated!("The read-only port for the Kubelet to serve on with no authentication/authorization (set to 0 to disable) (default 10255)"))]
    pub read_only_port: Option<i32>,
    #[arg(long = "healthz-port", value_name = "int32", value_parser = parse_int32, help = deprecated!("The port of the localhost healthz endpoint (set to 0 to disable) (default 10248)"))]
    pub healthz_port: Option<i32>,
    #[arg(long = "healthz-bind-address", value_name = "ip", value_parser = parse_ip, help = deprecated!("The IP address for the healthz server to serve on (set to '0.0.0.0' or '::' for listening on all interfaces and IP address families) (default 127.0.0.1)"))]
    pub healthz_bind_address: Option<String>,
    #[arg(long = "container-runtime-endpoint", value_name = "string", help = deprecated!("The endpoint of container runtime service. Unix Domain Sockets are supported on Linux, while npipe and tcp endpoints are supported on Windows. Examples:'unix:///path/to/runtime.sock', 'npipe:////./pipe/runtime' (default \"unix:///run/containerd/containerd.sock\")"))]
    pub container_runtime_endpoint: Option<String>,
    #[arg(long = "image-service-endpoint", value_name = "string", help = deprecated!("The endpoint of container image service. If not specified, it will be the same with --container-runtime-endpoint by default. Unix Domain Socket are supported on Linux, while npipe and tcp endpoints are supported on Windows. Examples:'unix:///path/to/runtime.sock', 'npipe:////./pipe/runtime'"))]
    pub image_service_endpoint: Option<String>,
    #[arg(long = "runtime-request-timeout", value_name = "duration", value_parser = parse_duration, help = deprecated!("Timeout of all runtime requests except long running request - pull, logs, exec and attach. When timeout exceeded, kubelet will cancel the request, throw out an error and retry later. (default 2m0s)"))]
    pub runtime_request_timeout: Option<Duration>,
    #[arg(long = "max-pods", value_name = "int32", value_parser = parse_int32, help = deprecated!("Number of Pods that can run on this Kubelet. (default 110)"))]
    pub max_pods: Option<i32>,
    #[arg(long = "cluster-dns", value_name = "strings", help = deprecated!("Comma-separated list of DNS server IP address.  This value is used for containers DNS server in case of Pods with \"dnsPolicy=ClusterFirst\". Note: all DNS servers appearing in the list MUST serve the same set of records otherwise name resolution within the cluster may not work correctly. There is no guarantee as to which DNS server may be contacted for name resolution."))]
    pub cluster_dns: Vec<String>,
    #[arg(long = "cluster-domain", value_name = "string", help = deprecated!("Domain for this cluster.  If set, kubelet will configure all containers to search this domain in addition to the host's search domains"))]
    pub cluster_domain: Option<String>,
    #[arg(long = "resolv-conf", value_name = "string", help = deprecated!("Resolver configuration file used as the basis for the container DNS resolution configuration. (default \"/etc/resolv.conf\")"))]
    pub resolv_conf: Option<String>,
    #[arg(long = "cgroup-driver", value_name = "string", help = deprecated!("Driver that the kubelet uses to manipulate cgroups on the host.  Possible values: 'cgroupfs', 'systemd' (default \"cgroupfs\")"))]
    pub cgroup_driver: Option<String>,
    #[arg(long = "kubelet-cgroups", value_name = "string", help = deprecated!("Optional absolute name of cgroups to create and run the Kubelet in."))]
    pub kubelet_cgroups: Option<String>,
    #[arg(long = "system-cgroups", value_name = "string", help = deprecated!("Optional absolute name of cgroups in which to place all non-kernel processes that are not already inside a cgroup under '/'. Empty for no container. Rolling back the flag requires a reboot."))]
    pub system_cgroups: Option<String>,
    #[arg(
        long = "runtime-cgroups",
        value_name = "string",
        help = "Optional absolute name of cgroups to create and run the runtime in."
    )]
    pub runtime_cgroups: Option<String>,
    #[arg(
        long = "image-credential-provider-config",
        value_name = "string",
        help = "Path to a credential provider plugin config file (JSON/YAML/YML) or a directory of such files (merged in lexicographical order; non-recursive search)."
    )]
    pub image_credential_provider_config: Option<PathBuf>,
    #[arg(
        long = "image-credential-provider-bin-dir",
        value_name = "string",
        help = "The path to the directory where credential provider plugin binaries are located."
    )]
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    #[arg(long = "fail-swap-on", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Makes the Kubelet fail to start if swap is enabled on the node.  (default true)"))]
    pub fail_swap_on: Option<bool>,
    #[arg(long = "register-node", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Register the node with the apiserver. If --kubeconfig is not provided, this flag is irrelevant, as the Kubelet won't have an apiserver to register with. (default true)"))]
    pub register_node: Option<bool>,

    // Container GC (flags only, deprecated upstream in favour of eviction).
    #[arg(long = "minimum-container-ttl-duration", value_name = "duration", value_parser = parse_duration, help = "Minimum age for a finished container before it is garbage collected.  Examples: '300ms', '10s' or '2h45m' (DEPRECATED: Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.)")]
    pub minimum_container_ttl_duration: Option<Duration>,
    #[arg(long = "maximum-dead-containers-per-container", value_name = "int32", value_parser = parse_int32, help = "Maximum number of old instances to retain per container.  Each container takes up some disk space. (default 1) (DEPRECATED: Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.)")]
    pub maximum_dead_containers_per_container: Option<i32>,
    #[arg(long = "maximum-dead-containers", value_name = "int32", value_parser = parse_int32, help = "Maximum number of old instances of containers to retain globally.  Each container takes up some disk space. To disable, set to a negative number. (default -1) (DEPRECATED: Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.)")]
    pub maximum_dead_containers: Option<i32>,
    #[arg(
        long = "pod-infra-container-image",
        value_name = "string",
        help = "Specified image will not be pruned by the image garbage collector. CRI implementations have their own configuration to set this image. (default \"registry.k8s.io/pause:3.10\") (DEPRECATED: will be removed in 1.35. Image garbage collector will get sandbox image information from CRI.)"
    )]
    pub pod_infra_container_image: Option<String>,

    // Client certificates: TLS bootstrap and rotation (kubelet::certificate).
    #[arg(
        long = "bootstrap-kubeconfig",
        value_name = "string",
        help = "Path to a kubeconfig file that will be used to get client certificate for kubelet. If the file specified by --kubeconfig does not exist, the bootstrap kubeconfig is used to request a client certificate from the API server. On success, a kubeconfig file referencing the generated client certificate and key is written to the path specified by --kubeconfig. The client certificate and key file will be stored in the directory pointed by --cert-dir."
    )]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    #[arg(long = "rotate-certificates", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Auto rotate the kubelet client certificates by requesting new certificates from the kube-apiserver when the certificate expiration approaches."))]
    pub rotate_certificates: Option<bool>,
    #[arg(long = "rotate-server-certificates", value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool, help = deprecated!("Auto-request and rotate the kubelet serving certificates by requesting new certificates from the kube-apiserver when the certificate expiration approaches. Requires the RotateKubeletServerCertificate feature gate to be enabled, and approval of the submitted CertificateSigningRequest objects."))]
    pub rotate_server_certificates: Option<bool>,
}

/// One `--manifest-url-header` occurrence: `key:value` pairs in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderPairs(pub Vec<(String, String)>);

/// Node identity and paths that are flags only (not part of `KubeletConfiguration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeOptions {
    pub root_dir: PathBuf,
    pub cert_dir: PathBuf,
    pub kubeconfig: Option<PathBuf>,
    pub hostname_override: Option<String>,
    pub node_ip: Option<String>,
    /// `--node-labels`: labels set on the Node at registration.
    pub node_labels: BTreeMap<String, String>,
    /// Effective verbosity: `--v`, else `logging.verbosity` from the config.
    pub verbosity: u8,
    /// `--hostname-override`, else the machine hostname; trimmed and lower-cased.
    pub node_name: String,
    /// Things to log once logging is up: deprecated flags used, unknown config fields ignored.
    pub warnings: Vec<String>,
    /// `--minimum-container-ttl-duration`, `--maximum-dead-containers-per-container`,
    /// `--maximum-dead-containers`.
    pub container_gc: ContainerGcPolicy,
    /// `--pod-infra-container-image`: kept by the image GC.
    pub pod_infra_container_image: String,
    /// `--runtime-cgroups`: the runtime's cgroup for the `runtime` system container (empty:
    /// the cgroup of the process serving the CRI socket).
    pub runtime_cgroups: String,
    /// `--image-credential-provider-config` (`None`: no plugins) and
    /// `--image-credential-provider-bin-dir`.
    pub image_credential_provider_config: Option<PathBuf>,
    pub image_credential_provider_bin_dir: PathBuf,
    /// `logging.format` (`--logging-format`).
    pub log_format: LogFormat,
    /// `--cloud-provider=external`.
    pub external_cloud_provider: bool,
    /// The version the Node reports: [`KUBERNETES_VERSION`] or `--version=vX.Y.Z...`.
    pub kubelet_version: String,
    /// `--bootstrap-kubeconfig` (`None`: no TLS bootstrap).
    pub bootstrap_kubeconfig: Option<PathBuf>,
}

/// Upstream's deprecation note of `--pod-infra-container-image`.
const POD_INFRA_DEPRECATION: &str =
    "will be removed in 1.35. Image garbage collector will get sandbox image information from CRI.";

/// The pause image the Go kubelet 1.33 defaults `--pod-infra-container-image` to.
pub const DEFAULT_POD_INFRA_CONTAINER_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The container GC policy from its (deprecated) flags, with a warning per flag given.
fn container_gc_policy(flags: &Flags, warnings: &mut Vec<String>) -> ContainerGcPolicy {
    let given = [
        (
            "minimum-container-ttl-duration",
            flags.minimum_container_ttl_duration.is_some(),
        ),
        (
            "maximum-dead-containers-per-container",
            flags.maximum_dead_containers_per_container.is_some(),
        ),
        (
            "maximum-dead-containers",
            flags.maximum_dead_containers.is_some(),
        ),
    ];
    for (name, _) in given.iter().filter(|(_, set)| *set) {
        warnings.push(format!("Flag --{name} has been deprecated, Use --eviction-hard or --eviction-soft instead. Will be removed in a future version."));
    }
    let defaults = ContainerGcPolicy::default();
    ContainerGcPolicy {
        min_age: flags
            .minimum_container_ttl_duration
            .map_or(defaults.min_age, |d| d.as_std()),
        max_per_pod_container: flags
            .maximum_dead_containers_per_container
            .unwrap_or(defaults.max_per_pod_container),
        max_containers: flags
            .maximum_dead_containers
            .unwrap_or(defaults.max_containers),
    }
}

/// `--feature-gates` help: upstream's text and its list of gates with maturity and default.
fn feature_gates_help() -> String {
    let mut out = String::from(
        "A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:",
    );
    out.push_str(
        "\nAllAlpha=true|false (ALPHA - default=false)\nAllBeta=true|false (BETA - default=false)",
    );
    for g in GATES.iter().filter(|g| !g.locked) {
        let stage = match g.pre_release {
            PreRelease::Alpha => "ALPHA",
            PreRelease::Beta => "BETA",
            PreRelease::Ga => "GA",
            PreRelease::Deprecated => "DEPRECATED",
        };
        out.push_str(&format!(
            "\n{}=true|false ({stage} - default={})",
            g.name, g.default
        ));
    }
    out.push_str(&format!(" (DEPRECATED: {DEPRECATED})"));
    out
}

fn parse_gates(s: &str) -> Result<BTreeMap<String, bool>, String> {
    parse_feature_gates_flag(s).map_err(|e| e.to_string())
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s).map_err(|e| e.to_string())
}

fn parse_level(s: &str) -> Result<u32, String> {
    s.parse::<u32>()
        .map_err(|_| format!("{s:?} is not a log level (expected a number such as 0 or 4)"))
}

/// Go `strconv.ParseInt(s, 0, 32)`: optional sign, `0x`/`0o`/`0b`/leading-`0` prefixes.
fn parse_int32(s: &str) -> Result<i32, String> {
    let err = || format!("{s:?} is not a 32-bit integer");
    let (neg, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return Err(err());
    }
    let magnitude = i64::from_str_radix(digits, radix).map_err(|_| err())?;
    i32::try_from(if neg { -magnitude } else { magnitude }).map_err(|_| err())
}

/// Go `strconv.ParseBool`.
pub(crate) fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (expected true or false)")),
    }
}

fn parse_ip(s: &str) -> Result<String, String> {
    s.parse::<IpAddr>()
        .map(|_| s.to_string())
        .map_err(|_| format!("{s:?} is not a valid IP address"))
}

/// `key:value[,key:value...]`; keys and values are trimmed; empty items are skipped.
fn parse_header_pairs(s: &str) -> Result<HeaderPairs, String> {
    let mut pairs = Vec::new();
    for item in s.split(',').filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once(':')
            .ok_or_else(|| format!("malformed pair {item:?}, expect string:string"))?;
        pairs.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(HeaderPairs(pairs))
}

/// Applies the config-backed flags that were given; returns deprecation warnings.
fn apply_flags(flags: &Flags, c: &mut KubeletConfiguration) -> Vec<String> {
    let mut used: Vec<&str> = Vec::new();
    macro_rules! set {
        ($flag:expr, $name:literal, $field:expr) => {
            if let Some(v) = $flag.clone() {
                $field = v;
                used.push($name);
            }
        };
    }
    set!(
        flags.pod_manifest_path,
        "pod-manifest-path",
        c.static_pod_path
    );
    set!(flags.sync_frequency, "sync-frequency", c.sync_frequency);
    set!(
        flags.file_check_frequency,
        "file-check-frequency",
        c.file_check_frequency
    );
    set!(
        flags.http_check_frequency,
        "http-check-frequency",
        c.http_check_frequency
    );
    set!(flags.manifest_url, "manifest-url", c.static_pod_url);
    set!(flags.address, "address", c.address);
    set!(flags.port, "port", c.port);
    set!(flags.read_only_port, "read-only-port", c.read_only_port);
    set!(flags.healthz_port, "healthz-port", c.healthz_port);
    set!(
        flags.healthz_bind_address,
        "healthz-bind-address",
        c.healthz_bind_address
    );
    set!(
        flags.container_runtime_endpoint,
        "container-runtime-endpoint",
        c.container_runtime_endpoint
    );
    set!(
        flags.image_service_endpoint,
        "image-service-endpoint",
        c.image_service_endpoint
    );
    set!(
        flags.runtime_request_timeout,
        "runtime-request-timeout",
        c.runtime_request_timeout
    );
    set!(flags.max_pods, "max-pods", c.max_pods);
    set!(flags.cluster_domain, "cluster-domain", c.cluster_domain);
    set!(flags.resolv_conf, "resolv-conf", c.resolv_conf);
    set!(flags.cgroup_driver, "cgroup-driver", c.cgroup_driver);
    set!(flags.kubelet_cgroups, "kubelet-cgroups", c.kubelet_cgroups);
    set!(flags.system_cgroups, "system-cgroups", c.system_cgroups);
    set!(flags.fail_swap_on, "fail-swap-on", c.fail_swap_on);
    set!(flags.register_node, "register-node", c.register_node);
    set!(
        flags.node_status_update_frequency,
        "node-status-update-frequency",
        c.node_status_update_frequency
    );
    set!(flags.logging_format, "logging-format", c.logging.format);
    if let Some(taints) = &flags.register_with_taints {
        c.register_with_taints = taints.0.clone();
        used.push("register-with-taints");
    }
    // Config-backed like the others, but not deprecated upstream.
    if let Some(id) = &flags.provider_id {
        c.provider_id = id.clone();
    }
    set!(
        flags.rotate_certificates,
        "rotate-certificates",
        c.rotate_certificates
    );
    set!(
        flags.rotate_server_certificates,
        "rotate-server-certificates",
        c.server_tls_bootstrap
    );
    // The first occurrence replaces the configured headers; later ones append per key.
    if !flags.manifest_url_header.is_empty() {
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in flags.manifest_url_header.iter().flat_map(|h| h.0.iter()) {
            headers.entry(k.clone()).or_default().push(v.clone());
        }
        c.static_pod_url_header = headers;
        used.push("manifest-url-header");
    }
    // Comma-separated and repeatable; the given values replace the configured list.
    if !flags.cluster_dns.is_empty() {
        c.cluster_dns = flags
            .cluster_dns
            .iter()
            .flat_map(|v| v.split(','))
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        used.push("cluster-dns");
    }
    if let Some(level) = flags.verbosity {
        c.logging.verbosity = level;
    }
    // Per gate, the flag wins over the config file (upstream `kubeletConfigFlagPrecedence`).
    if !flags.feature_gates.is_empty() {
        for gates in &flags.feature_gates {
            c.feature_gates
                .extend(gates.iter().map(|(k, v)| (k.clone(), *v)));
        }
        apply_gated_defaults(c);
        used.push("feature-gates");
    }
    used.iter()
        .map(|name| format!("Flag --{name} has been deprecated, {DEPRECATED}"))
        .collect()
}

/// Upstream `ParseNodeIPArgument`: one IP, or an IPv4/IPv6 dual-stack pair.
/// Labels in these `kubernetes.io` / `k8s.io` namespaces may be set by the kubelet itself
/// (upstream `kubeletapis.IsKubeletLabel`); other labels in those namespaces are refused.
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
];
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// `--node-labels`: `k=v,k2=v2`; keys in the `kubernetes.io`/`k8s.io` namespaces must be
/// kubelet labels, as upstream's `validateKubeletFlags` requires.
fn parse_node_labels(s: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let err = |message: String| ConfigError::Flag {
        flag: "node-labels".into(),
        message,
    };
    let mut labels = BTreeMap::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(err(format!("{pair:?} is not a key=value pair")));
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(err(format!("{pair:?} has an empty label key")));
        }
        let ns = k.split_once('/').map_or("", |(ns, _)| ns);
        let restricted = ["kubernetes.io", "k8s.io"]
            .iter()
            .any(|r| ns == *r || ns.ends_with(&format!(".{r}")));
        let allowed = KUBELET_LABELS.contains(&k)
            || KUBELET_LABEL_NAMESPACES
                .iter()
                .any(|a| ns == *a || ns.ends_with(&format!(".{a}")));
        if restricted && !allowed {
            return Err(err(format!(
                "unknown 'kubernetes.io' or 'k8s.io' label {k:?}: only kubelet labels may be set"
            )));
        }
        labels.insert(k.to_owned(), v.to_owned());
    }
    Ok(labels)
}

fn check_node_ip(node_ip: &str) -> Result<(), ConfigError> {
    let flag_err = |message: String| ConfigError::Flag {
        flag: "node-ip".into(),
        message,
    };
    let mut ips = Vec::new();
    for part in node_ip.split(',') {
        let ip = part.trim().parse::<IpAddr>().map_err(|_| {
            flag_err(format!(
                "could not parse {:?} as an IP address",
                part.trim()
            ))
        })?;
        ips.push(ip);
    }
    match ips.as_slice() {
        [_] => Ok(()),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(()),
        [_, _] => Err(flag_err(format!(
            "{node_ip:?}: dual-stack --node-ip must have one IPv4 and one IPv6 address"
        ))),
        _ => Err(flag_err(format!(
            "{node_ip:?}: must contain either a single IP or a dual-stack pair of IPs"
        ))),
    }
}

/// Upstream `GetHostname`: the override or the machine name, trimmed and lower-cased.
fn node_name(
    override_name: Option<&str>,
    machine: impl FnOnce() -> std::io::Result<String>,
) -> Result<String, ConfigError> {
    let raw = match override_name {
        Some(name) => name.to_string(),
        None => machine()
            .map_err(|e| ConfigError::Hostname(format!("couldn't determine hostname: {e}")))?,
    };
    let name = raw.trim();
    if name.is_empty() {
        return Err(ConfigError::Hostname("empty hostname is invalid".into()));
    }
    Ok(name.to_lowercase())
}

fn machine_hostname() -> std::io::Result<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
}

fn non_empty(s: &Option<String>) -> Option<String> {
    s.as_ref().filter(|s| !s.is_empty()).cloned()
}

/// Loads `--config` and `--config-dir` (strict, then lenient with a warning for unknown or
/// duplicate fields, as upstream), applies the flags given on the command line, validates the
/// result and applies the support table (`kubelet::config::support`): settings rkubelet does
/// not implement are refused by name or warned about.
pub fn resolve(flags: &Flags) -> Result<(KubeletConfiguration, NodeOptions), ConfigError> {
    resolve_with(flags, machine_hostname)
}

fn resolve_with(
    flags: &Flags,
    machine: impl FnOnce() -> std::io::Result<String>,
) -> Result<(KubeletConfiguration, NodeOptions), ConfigError> {
    let loaded = load_config_upstream(flags.config.as_deref(), flags.config_dir.as_deref())?;
    let mut config = loaded.config;
    let mut warnings = loaded.warnings;
    warnings.extend(apply_flags(flags, &mut config));
    validate(&config)?;
    warnings.extend(support::check(&config)?);
    let node_ip = non_empty(&flags.node_ip);
    if let Some(ip) = &node_ip {
        check_node_ip(ip)?;
    }
    let hostname_override = non_empty(&flags.hostname_override);
    let container_gc = container_gc_policy(flags, &mut warnings);
    if flags.pod_infra_container_image.is_some() {
        warnings.push(format!(
            "Flag --pod-infra-container-image has been deprecated, {POD_INFRA_DEPRECATION}"
        ));
    }
    let log_format =
        LogFormat::parse(&config.logging.format).map_err(|e| ConfigError::Invalid(vec![e]))?;
    let external_cloud_provider = match flags.cloud_provider.as_deref().unwrap_or("") {
        "" => false,
        "external" => true,
        other => {
            return Err(ConfigError::Flag {
                flag: "cloud-provider".into(),
                message: format!(
                    "cloud provider {other:?} was specified, but built-in cloud providers are disabled. Please set --cloud-provider=external and migrate to an external cloud provider"
                ),
            });
        }
    };
    let kubelet_version = match &flags.version {
        Some(VersionFlag::Set(v)) => v.clone(),
        _ => KUBERNETES_VERSION.to_owned(),
    };
    let node = NodeOptions {
        root_dir: flags.root_dir.clone(),
        cert_dir: flags
            .cert_dir
            .clone()
            .unwrap_or_else(|| flags.root_dir.join("pki")),
        kubeconfig: flags
            .kubeconfig
            .clone()
            .filter(|p| !p.as_os_str().is_empty()),
        node_name: node_name(hostname_override.as_deref(), machine)?,
        hostname_override,
        node_ip,
        node_labels: parse_node_labels(flags.node_labels.as_deref().unwrap_or(""))?,
        verbosity: config.verbosity(),
        warnings,
        container_gc,
        pod_infra_container_image: non_empty(&flags.pod_infra_container_image)
            .unwrap_or_else(|| DEFAULT_POD_INFRA_CONTAINER_IMAGE.to_owned()),
        runtime_cgroups: flags.runtime_cgroups.clone().unwrap_or_default(),
        image_credential_provider_config: flags
            .image_credential_provider_config
            .clone()
            .filter(|p| !p.as_os_str().is_empty()),
        image_credential_provider_bin_dir: flags
            .image_credential_provider_bin_dir
            .clone()
            .unwrap_or_default(),
        log_format,
        external_cloud_provider,
        kubelet_version,
        bootstrap_kubeconfig: flags
            .bootstrap_kubeconfig
            .clone()
            .filter(|p| !p.as_os_str().is_empty()),
    };
    Ok((config, node))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::path::Path;

    const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    /// A scratch directory removed on drop (rkubelet has no tempfile dev-dependency).
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!("rkubelet-cli-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
        fn write(&self, name: &str, body: &str) -> PathBuf {
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

    fn parse(args: &[&str]) -> Flags {
        Flags::try_parse_from(std::iter::once("rkubelet").chain(args.iter().copied())).unwrap()
    }

    fn parse_err(args: &[&str]) -> String {
        Flags::try_parse_from(std::iter::once("rkubelet").chain(args.iter().copied()))
            .unwrap_err()
            .to_string()
    }

    fn resolve_ok(flags: &Flags) -> (KubeletConfiguration, NodeOptions) {
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
        // Only the support table's warnings for upstream defaults rkubelet does not implement.
        assert_eq!(n.warnings.len(), 3, "{:?}", n.warnings);
        assert!(
            n.warnings
                .iter()
                .all(|w| w.contains(" is true, which rkubelet does not implement"))
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
        let err =
            resolve_with(&parse(&["--port=0", "--max-pods=-2"]), || Ok("h".into())).unwrap_err();
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
            if ["help", "version"].contains(&long) {
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
}
