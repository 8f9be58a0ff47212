//! The rkubelet command line: upstream kubelet flag names, help texts and precedence.
//! Owns: flag parsing ([`Flags`]) and turning flags + config file + drop-ins into the effective
//! configuration ([`resolve`]): flags given on the command line > `--config-dir` drop-ins >
//! `--config` file > defaults. Emits the validated `KubeletConfiguration` and the
//! node-identity options ([`NodeOptions`]) that live outside it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Parser;
use kubelet::config::features::{GATES, PreRelease};
use kubelet::config::{
    ConfigError, Duration, KubeletConfiguration, load_config_upstream, support, validate,
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

mod apply;
mod node;
mod upstream;
mod values;

use apply::apply_flags;
use node::{check_node_ip, machine_hostname, node_name, non_empty, parse_node_labels};
pub use upstream::UpstreamFlags;
pub use values::HeaderPairs;
pub(crate) use values::parse_bool;
use values::{parse_duration, parse_gates, parse_header_pairs, parse_int32, parse_ip, parse_level};

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

    /// The other upstream 1.33 flags (`cli/upstream.rs`).
    #[command(flatten)]
    pub upstream: UpstreamFlags,
}

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
    /// `--lock-file` (`None`: no lock) and `--exit-on-lock-contention`.
    pub lock_file: Option<PathBuf>,
    pub exit_on_lock_contention: bool,
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
    warnings.extend(upstream::apply_upstream(&flags.upstream, &mut config));
    validate(&config)?;
    warnings.extend(support::check(&config)?);
    let node_ip = non_empty(&flags.node_ip);
    if let Some(ip) = &node_ip {
        check_node_ip(ip)?;
    }
    let hostname_override = non_empty(&flags.hostname_override);
    let lock = upstream::flag_only(&flags.upstream, &mut warnings)?;
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
        lock_file: lock.lock_file,
        exit_on_lock_contention: lock.exit_on_lock_contention,
    };
    Ok((config, node))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod upstream_tests;
