//! kuberuntime::sandbox_config: builds the CRI `PodSandboxConfig` for a pod (upstream
//! `generatePodSandboxConfig`, `GetPodDNS`, `GeneratePodHostNameAndDomain`). Receives the pod,
//! the sandbox attempt and a `SandboxContext` (node settings plus the host resolv.conf contents
//! already read by the caller); emits the config and the warning events upstream records
//! (`MissingClusterDNS`, `DNSConfigForming`). Pure: no I/O.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_cri::v1::{
    DnsConfig, Int64Value, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode,
    NamespaceOption, PodSandboxConfig, PodSandboxMetadata, PortMapping, Protocol, SeLinuxOption,
    SecurityProfile, SupplementalGroupsPolicy, UserNamespace, security_profile::ProfileType,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodDNSConfig, PodSpec};

use super::labels;
use crate::security::sysctl::to_dots_separator;
use crate::types::PodExt;

/// Upstream `MaxDNSNameservers`.
const MAX_DNS_NAMESERVERS: usize = 3;
/// Upstream `MaxDNSSearchPathsExpanded` (ExpandedDNSConfig is GA).
const MAX_DNS_SEARCH_PATHS: usize = 32;
/// Upstream `MaxDNSSearchListCharsExpanded`.
const MAX_DNS_SEARCH_LIST_CHARS: usize = 2048;
/// Upstream `DNS1123SubdomainMaxLength`: longer search paths crash some resolvers.
const MAX_SEARCH_PATH_LEN: usize = 253;
/// Linux nodename limit for a pod hostname (64 bytes with the terminating NUL).
const HOSTNAME_MAX_LEN: usize = 63;
/// Limit for `setHostnameAsFQDN` hostnames.
const FQDN_MAX_LEN: usize = 64;
/// DNS options for pods using the cluster DNS.
const CLUSTER_DNS_OPTIONS: &[&str] = &["ndots:5"];

/// Node-level inputs of sandbox generation.
#[derive(Debug, Clone, Default)]
pub struct SandboxContext {
    pub node_name: String,
    /// `--pod-logs-dir` / `podLogsDir` (default `/var/log/pods`).
    pub pod_logs_dir: PathBuf,
    /// Contents of the `resolvConf` file; `None` when `resolvConf` is set to "" (pods then get
    /// localhost nameservers, as upstream).
    pub host_resolv_conf: Option<String>,
    /// The node's IPs; only used when `host_resolv_conf` is `None` (picks `127.0.0.1`/`::1`).
    pub node_ips: Vec<String>,
    /// `clusterDNS` from the kubelet config.
    pub cluster_dns: Vec<String>,
    /// `clusterDomain` from the kubelet config (may be empty).
    pub cluster_domain: String,
    /// The pod's cgroup parent from the container manager (e.g. `/kubepods/besteffort/pod<uid>`).
    pub cgroup_parent: Option<String>,
}

/// Which object a warning event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarningObject {
    Pod,
    Node,
}

/// A warning the caller should record as a `Warning` event (upstream records it inline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxWarning {
    pub object: WarningObject,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxConfigError {
    #[error("pod Hostname {hostname:?} is not a valid DNS label: {reasons}")]
    InvalidHostname { hostname: String, reasons: String },
    #[error("pod Subdomain {subdomain:?} is not a valid DNS label: {reasons}")]
    InvalidSubdomain { subdomain: String, reasons: String },
    #[error("hostname for pod {pod:?} was invalid: {hostname:?}")]
    EmptyTruncatedHostname { pod: String, hostname: String },
    #[error(
        "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({FQDN_MAX_LEN} characters is the max, {} characters requested)",
        fqdn.len()
    )]
    FqdnTooLong { fqdn: String },
    #[error("{0}")]
    ResolvConf(String),
    /// `hostUsers: false` on a runtime without user-namespace support (containerd 1.6 reports
    /// no runtime handler features, so upstream treats it as unsupported).
    #[error(
        "spec.hostUsers is false, but RuntimeClass handler {handler:?} does not support user namespaces"
    )]
    UserNamespacesUnsupported { handler: String },
    #[error("unsupported supplementalGroupsPolicy: {0}")]
    SupplementalGroupsPolicy(String),
}

/// Generates the sandbox config for `pod` (upstream `generatePodSandboxConfig`). Returns the
/// config and the warnings to record as events.
pub fn generate_pod_sandbox_config(
    pod: &Pod,
    attempt: u32,
    ctx: &SandboxContext,
) -> Result<(PodSandboxConfig, Vec<SandboxWarning>), SandboxConfigError> {
    let default_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let mut warnings = Vec::new();

    let dns_config = pod_dns_config(pod, ctx, &mut warnings)?;

    let hostname = if is_host_network(spec) {
        // The runtime uses the node's hostname (the pod shares its UTS namespace).
        String::new()
    } else {
        let (hostname, domain) = pod_hostname_and_domain(pod, &ctx.cluster_domain)?;
        nodename_for_kernel(hostname, &domain, spec.set_hostname_as_fqdn)?
    };

    let port_mappings = spec.containers.iter().flat_map(port_mappings).collect();

    let config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: pod.name().to_owned(),
            uid: pod.uid().to_owned(),
            namespace: pod.namespace().to_owned(),
            attempt,
        }),
        hostname,
        log_directory: pod_logs_directory(
            &ctx.pod_logs_dir,
            pod.namespace(),
            pod.name(),
            pod.uid(),
        )
        .to_string_lossy()
        .into_owned(),
        dns_config: Some(dns_config),
        port_mappings,
        labels: labels::sandbox_labels(pod),
        annotations: labels::sandbox_annotations(pod),
        linux: Some(linux_config(spec, ctx)?),
        windows: None,
    };
    Ok((config, warnings))
}

/// `<podLogsDir>/<namespace>_<name>_<uid>` (upstream `BuildPodLogsDirectory`).
pub fn pod_logs_directory(pod_logs_dir: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    pod_logs_dir.join(format!("{namespace}_{name}_{uid}"))
}

/// Parses resolv.conf contents into (nameservers, searches, options): `nameserver` lines
/// accumulate, the last `search` and `options` lines win, search domains lose a trailing dot.
/// A `nameserver` line without an address is skipped (sandbox generation rejects it).
pub fn parse_resolv_conf(contents: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let parsed = parse_resolv_conf_checked(contents);
    (parsed.nameservers, parsed.searches, parsed.options)
}

struct ResolvConf {
    nameservers: Vec<String>,
    searches: Vec<String>,
    options: Vec<String>,
    errors: Vec<String>,
}

fn parse_resolv_conf_checked(contents: &str) -> ResolvConf {
    let mut out = ResolvConf {
        nameservers: Vec::new(),
        searches: Vec::new(),
        options: Vec::new(),
        errors: Vec::new(),
    };
    for line in contents.split('\n') {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let Some(keyword) = fields.next() else {
            continue;
        };
        match keyword {
            "nameserver" => match fields.next() {
                Some(server) => out.nameservers.push(server.to_owned()),
                None => out.errors.push("nameserver list is empty ".to_owned()),
            },
            "search" => {
                out.searches = fields
                    .map(|s| s.strip_suffix('.').unwrap_or(s).to_owned())
                    .collect();
            }
            "options" => out.options = fields.map(str::to_owned).collect(),
            _ => {}
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DnsType {
    Cluster,
    Host,
    None,
}

fn is_host_network(spec: &PodSpec) -> bool {
    spec.host_network.unwrap_or(false)
}

fn dns_type(spec: &PodSpec) -> DnsType {
    // An unset policy is what the API server defaults to ClusterFirst.
    match spec.dns_policy.as_deref().unwrap_or("ClusterFirst") {
        "None" => DnsType::None,
        "ClusterFirstWithHostNet" => DnsType::Cluster,
        "ClusterFirst" if !is_host_network(spec) => DnsType::Cluster,
        "ClusterFirst" | "Default" => DnsType::Host,
        other => {
            tracing::error!(
                dns_policy = other,
                "invalid DNSPolicy; falling back to the ClusterFirst policy"
            );
            DnsType::Cluster
        }
    }
}

/// Upstream `GetPodDNS`.
fn pod_dns_config(
    pod: &Pod,
    ctx: &SandboxContext,
    warnings: &mut Vec<SandboxWarning>,
) -> Result<DnsConfig, SandboxConfigError> {
    let default_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);

    let mut config = DnsConfig::default();
    if let Some(contents) = &ctx.host_resolv_conf {
        let parsed = parse_resolv_conf_checked(contents);
        if !parsed.errors.is_empty() {
            return Err(SandboxConfigError::ResolvConf(parsed.errors.join(", ")));
        }
        config.servers = parsed.nameservers;
        config.searches = parsed.searches;
        config.options = parsed.options;
    }

    let mut use_host = false;
    match dns_type(spec) {
        DnsType::None => config = DnsConfig::default(),
        DnsType::Cluster if !ctx.cluster_dns.is_empty() => {
            config.servers = ctx.cluster_dns.clone();
            config.searches = cluster_first_searches(config.searches, pod, &ctx.cluster_domain);
            config.options = CLUSTER_DNS_OPTIONS
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
        }
        DnsType::Cluster => {
            let node_msg = "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.";
            warnings.push(SandboxWarning {
                object: WarningObject::Node,
                reason: "MissingClusterDNS",
                message: node_msg.to_owned(),
            });
            warnings.push(SandboxWarning {
                object: WarningObject::Pod,
                reason: "MissingClusterDNS",
                message: format!("pod: {:?}. {node_msg}", format_pod(pod)),
            });
            use_host = true;
        }
        DnsType::Host => use_host = true,
    }
    if use_host && ctx.host_resolv_conf.is_none() {
        for ip in &ctx.node_ips {
            config.servers.push(if ip.contains(':') {
                "::1".to_owned()
            } else {
                "127.0.0.1".to_owned()
            });
        }
        if config.servers.is_empty() {
            config.servers.push("127.0.0.1".to_owned());
        }
        config.searches = vec![".".to_owned()];
    }

    if let Some(pod_dns) = &spec.dns_config {
        append_pod_dns_config(&mut config, pod_dns);
    }
    fit_limits(&mut config, warnings);
    Ok(config)
}

/// `name_namespace(uid)`, upstream `format.Pod`.
fn format_pod(pod: &Pod) -> String {
    format!("{}_{}({})", pod.name(), pod.namespace(), pod.uid())
}

fn cluster_first_searches(host_searches: Vec<String>, pod: &Pod, domain: &str) -> Vec<String> {
    if domain.is_empty() {
        return host_searches;
    }
    let mut searches = vec![
        format!("{}.svc.{domain}", pod.namespace()),
        format!("svc.{domain}"),
        domain.to_owned(),
    ];
    searches.extend(host_searches);
    dedup(searches)
}

fn dedup(items: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

fn append_pod_dns_config(config: &mut DnsConfig, pod_dns: &PodDNSConfig) {
    let mut servers = std::mem::take(&mut config.servers);
    servers.extend(pod_dns.nameservers.iter().flatten().cloned());
    config.servers = dedup(servers);
    let mut searches = std::mem::take(&mut config.searches);
    searches.extend(pod_dns.searches.iter().flatten().cloned());
    config.searches = dedup(searches);

    // Options merge by name; the pod's values win. Upstream iterates a Go map (random order);
    // we keep first-seen order so the result is stable.
    let mut merged: Vec<(String, String)> = Vec::new();
    let mut set = |name: &str, value: &str| match merged.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = value.to_owned(),
        None => merged.push((name.to_owned(), value.to_owned())),
    };
    for op in &config.options {
        match op.split_once(':') {
            Some((name, value)) => set(name, value),
            None => set(op, ""),
        }
    }
    for op in pod_dns.options.iter().flatten() {
        set(
            op.name.as_deref().unwrap_or_default(),
            op.value.as_deref().unwrap_or_default(),
        );
    }
    config.options = merged
        .into_iter()
        .map(|(name, value)| {
            if value.is_empty() {
                name
            } else {
                format!("{name}:{value}")
            }
        })
        .collect();
}

fn fit_limits(config: &mut DnsConfig, warnings: &mut Vec<SandboxWarning>) {
    if config.servers.len() > MAX_DNS_NAMESERVERS {
        config.servers.truncate(MAX_DNS_NAMESERVERS);
        warnings.push(SandboxWarning {
            object: WarningObject::Pod,
            reason: "DNSConfigForming",
            message: format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
                config.servers.join(" ")
            ),
        });
    }

    let mut exceeded = false;
    if config.searches.len() > MAX_DNS_SEARCH_PATHS {
        config.searches.truncate(MAX_DNS_SEARCH_PATHS);
        exceeded = true;
    }
    let before = config.searches.len();
    config.searches.retain(|s| s.len() <= MAX_SEARCH_PATH_LEN);
    exceeded |= config.searches.len() != before;
    let line_len = config.searches.join(" ").len();
    if line_len > MAX_DNS_SEARCH_LIST_CHARS {
        let mut cut_len = 0;
        let mut cut_num = 0;
        for search in config.searches.iter().rev() {
            cut_len += search.len() + 1;
            cut_num += 1;
            if line_len - cut_len.min(line_len) <= MAX_DNS_SEARCH_LIST_CHARS {
                break;
            }
        }
        let keep = config.searches.len() - cut_num;
        config.searches.truncate(keep);
        exceeded = true;
    }
    if exceeded {
        warnings.push(SandboxWarning {
            object: WarningObject::Pod,
            reason: "DNSConfigForming",
            message: format!(
                "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                config.searches.join(" ")
            ),
        });
    }
}

/// Upstream `GeneratePodHostNameAndDomain`: (hostname, domain).
pub fn pod_hostname_and_domain(
    pod: &Pod,
    cluster_domain: &str,
) -> Result<(String, String), SandboxConfigError> {
    let spec = pod.spec.as_ref();
    let mut hostname = pod.name().to_owned();
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        let reasons = dns1123_label_errors(h);
        if !reasons.is_empty() {
            return Err(SandboxConfigError::InvalidHostname {
                hostname: h.to_owned(),
                reasons: reasons.join(";"),
            });
        }
        hostname = h.to_owned();
    }
    if hostname.len() > HOSTNAME_MAX_LEN {
        let cut: String = hostname.chars().take(HOSTNAME_MAX_LEN).collect();
        let trimmed = cut.trim_end_matches(['-', '.']);
        tracing::error!(
            pod = pod.name(),
            truncated = trimmed,
            "hostname for pod was too long, truncated it"
        );
        if trimmed.is_empty() {
            return Err(SandboxConfigError::EmptyTruncatedHostname {
                pod: pod.name().to_owned(),
                hostname,
            });
        }
        hostname = trimmed.to_owned();
    }
    let mut domain = String::new();
    if let Some(sub) = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        let reasons = dns1123_label_errors(sub);
        if !reasons.is_empty() {
            return Err(SandboxConfigError::InvalidSubdomain {
                subdomain: sub.to_owned(),
                reasons: reasons.join(";"),
            });
        }
        domain = format!("{sub}.{}.svc.{cluster_domain}", pod.namespace());
    }
    Ok((hostname, domain))
}

/// Upstream `GetNodenameForKernel`: the FQDN when `setHostnameAsFQDN` and a domain exist.
fn nodename_for_kernel(
    hostname: String,
    domain: &str,
    set_hostname_as_fqdn: Option<bool>,
) -> Result<String, SandboxConfigError> {
    if domain.is_empty() || set_hostname_as_fqdn != Some(true) {
        return Ok(hostname);
    }
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > FQDN_MAX_LEN {
        return Err(SandboxConfigError::FqdnTooLong { fqdn });
    }
    Ok(fqdn)
}

/// Upstream `IsDNS1123Label` messages.
fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > HOSTNAME_MAX_LEN {
        errs.push(format!(
            "must be no more than {HOSTNAME_MAX_LEN} characters"
        ));
    }
    let bytes = value.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let valid = !bytes.is_empty()
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-');
    if !valid {
        errs.push(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                .to_owned(),
        );
    }
    errs
}

/// Port mappings of one container (upstream `MakePortMappings`): every declared port, host
/// port or not; a repeated port name (or repeated unnamed family/protocol/ports tuple) is
/// skipped.
fn port_mappings(container: &Container) -> Vec<PortMapping> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for port in container.ports.iter().flatten() {
        let protocol = port.protocol.as_deref().unwrap_or("TCP");
        let host_ip = port.host_ip.clone().unwrap_or_default();
        let host_port = port.host_port.unwrap_or(0);
        let name = match port.name.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => n.to_owned(),
            None => {
                let family = if host_ip.is_empty() {
                    "any"
                } else if host_ip.contains(':') {
                    "v6"
                } else {
                    "v4"
                };
                format!(
                    "{family}-{protocol}-{host_ip}:{}:{host_port}",
                    port.container_port
                )
            }
        };
        if seen.contains(&name) {
            tracing::info!(
                port_name = name,
                container = container.name,
                "port name conflicted, it is defined more than once"
            );
            continue;
        }
        seen.push(name);
        out.push(PortMapping {
            protocol: runtime_protocol(protocol) as i32,
            container_port: port.container_port,
            host_port,
            host_ip,
        });
    }
    out
}

fn runtime_protocol(protocol: &str) -> Protocol {
    match protocol {
        "UDP" => Protocol::Udp,
        "SCTP" => Protocol::Sctp,
        "TCP" => Protocol::Tcp,
        other => {
            tracing::warn!(protocol = other, "unknown protocol, defaulting to TCP");
            Protocol::Tcp
        }
    }
}

/// The user namespace of a pod (upstream `GetOrCreateUserNamespaceMappings` with the
/// UserNamespacesSupport gate on, its 1.33 default): the node's unless `hostUsers: false`,
/// which needs runtime support this kubelet never detects (containerd 1.6 has none), so it is
/// refused before the runtime sees it.
fn user_namespace(spec: &PodSpec) -> Result<UserNamespace, SandboxConfigError> {
    if spec.host_users == Some(false) {
        return Err(SandboxConfigError::UserNamespacesUnsupported {
            handler: String::new(),
        });
    }
    Ok(UserNamespace {
        mode: NamespaceMode::Node as i32,
        uids: Vec::new(),
        gids: Vec::new(),
    })
}

/// The namespace options shared by the sandbox and its containers (upstream
/// `NamespacesForPod`).
pub fn namespaces_for_pod(spec: &PodSpec) -> Result<NamespaceOption, SandboxConfigError> {
    let node_or = |host: Option<bool>, otherwise: NamespaceMode| {
        if host.unwrap_or(false) {
            NamespaceMode::Node
        } else {
            otherwise
        }
    };
    let pid_default = if spec.share_process_namespace.unwrap_or(false) {
        NamespaceMode::Pod
    } else {
        NamespaceMode::Container
    };
    Ok(NamespaceOption {
        network: node_or(spec.host_network, NamespaceMode::Pod) as i32,
        pid: node_or(spec.host_pid, pid_default) as i32,
        ipc: node_or(spec.host_ipc, NamespaceMode::Pod) as i32,
        target_id: String::new(),
        userns_options: Some(user_namespace(spec)?),
    })
}

/// True when any container (init, regular, ephemeral) asks for privileged mode.
fn has_privileged_container(spec: &PodSpec) -> bool {
    let privileged = |sc: Option<&k8s_openapi::api::core::v1::SecurityContext>| {
        sc.and_then(|sc| sc.privileged).unwrap_or(false)
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| privileged(c.security_context.as_ref()))
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| privileged(c.security_context.as_ref()))
}

/// Supplemental groups upstream passes for a pod: `fsGroup` first, then `supplementalGroups`.
pub(crate) fn pod_supplemental_groups(spec: &PodSpec) -> Vec<i64> {
    let Some(sc) = &spec.security_context else {
        return Vec::new();
    };
    sc.fs_group
        .into_iter()
        .chain(sc.supplemental_groups.iter().flatten().copied())
        .collect()
}

/// `supplementalGroupsPolicy` (unset: Merge); a value CRI does not know is an error, as
/// upstream.
pub(crate) fn supplemental_groups_policy(spec: &PodSpec) -> Result<i32, SandboxConfigError> {
    let policy = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.supplemental_groups_policy.as_deref());
    match policy {
        None | Some("Merge") => Ok(SupplementalGroupsPolicy::Merge as i32),
        Some("Strict") => Ok(SupplementalGroupsPolicy::Strict as i32),
        Some(other) => Err(SandboxConfigError::SupplementalGroupsPolicy(
            other.to_owned(),
        )),
    }
}

pub(crate) fn runtime_selinux(
    opts: Option<&k8s_openapi::api::core::v1::SELinuxOptions>,
) -> Option<SeLinuxOption> {
    opts.map(|o| SeLinuxOption {
        user: o.user.clone().unwrap_or_default(),
        role: o.role.clone().unwrap_or_default(),
        r#type: o.type_.clone().unwrap_or_default(),
        level: o.level.clone().unwrap_or_default(),
    })
}

/// Upstream `generatePodSandboxLinuxConfig` (without overhead/resources). Sysctl names are
/// sent dot-separated (upstream converts `net/ipv4/...` before sandbox creation: runc checks
/// namespacing on the dotted form).
fn linux_config(
    spec: &PodSpec,
    ctx: &SandboxContext,
) -> Result<LinuxPodSandboxConfig, SandboxConfigError> {
    let pod_sc = spec.security_context.as_ref();
    let sysctls: HashMap<String, String> = pod_sc
        .and_then(|sc| sc.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (to_dots_separator(&s.name), s.value.clone()))
        .collect();
    let security_context = LinuxSandboxSecurityContext {
        namespace_options: Some(namespaces_for_pod(spec)?),
        selinux_options: runtime_selinux(pod_sc.and_then(|sc| sc.se_linux_options.as_ref())),
        run_as_user: pod_sc
            .and_then(|sc| sc.run_as_user)
            .map(|value| Int64Value { value }),
        run_as_group: pod_sc
            .and_then(|sc| sc.run_as_group)
            .map(|value| Int64Value { value }),
        supplemental_groups: pod_supplemental_groups(spec),
        supplemental_groups_policy: supplemental_groups_policy(spec)?,
        privileged: has_privileged_container(spec),
        // The sandbox always runs with the runtime's default profile (upstream #84623).
        seccomp: Some(SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        }),
        ..Default::default()
    };
    Ok(LinuxPodSandboxConfig {
        cgroup_parent: ctx.cgroup_parent.clone().unwrap_or_default(),
        security_context: Some(security_context),
        sysctls,
        overhead: None,
        resources: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "uid-1"},
            "spec": spec,
        }))
        .expect("valid pod")
    }

    fn simple_spec() -> serde_json::Value {
        json!({"containers": [{"name": "c", "image": "busybox"}]})
    }

    fn ctx() -> SandboxContext {
        SandboxContext {
            node_name: "node-1".to_owned(),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            host_resolv_conf: Some(
                "# host\nnameserver 192.168.1.1\nnameserver 192.168.1.2\nsearch corp.example. lab.example\noptions edns0 timeout:2\n"
                    .to_owned(),
            ),
            node_ips: vec!["192.168.1.10".to_owned()],
            cluster_dns: vec!["10.96.0.10".to_owned()],
            cluster_domain: "cluster.local".to_owned(),
            cgroup_parent: Some("/kubepods/besteffort/poduid-1".to_owned()),
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn basic_pod_fields() {
        let (cfg, warnings) = generate_pod_sandbox_config(&pod(simple_spec()), 2, &ctx()).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(
            cfg.metadata,
            Some(PodSandboxMetadata {
                name: "web".to_owned(),
                uid: "uid-1".to_owned(),
                namespace: "prod".to_owned(),
                attempt: 2,
            })
        );
        assert_eq!(cfg.hostname, "web");
        assert_eq!(cfg.log_directory, "/var/log/pods/prod_web_uid-1");
        assert_eq!(
            cfg.dns_config,
            Some(DnsConfig {
                servers: strings(&["10.96.0.10"]),
                searches: strings(&[
                    "prod.svc.cluster.local",
                    "svc.cluster.local",
                    "cluster.local",
                    "corp.example",
                    "lab.example"
                ]),
                options: strings(&["ndots:5"]),
            })
        );
        assert!(cfg.port_mappings.is_empty());
        assert_eq!(cfg.labels, labels::sandbox_labels(&pod(simple_spec())));
        assert_eq!(
            cfg.annotations,
            labels::sandbox_annotations(&pod(simple_spec()))
        );
        let linux = cfg.linux.unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/besteffort/poduid-1");
        assert!(linux.sysctls.is_empty());
        let sc = linux.security_context.unwrap();
        assert_eq!(
            sc.namespace_options,
            Some(NamespaceOption {
                network: NamespaceMode::Pod as i32,
                pid: NamespaceMode::Container as i32,
                ipc: NamespaceMode::Pod as i32,
                target_id: String::new(),
                // UserNamespacesSupport is on by default (1.33): the node's user namespace.
                userns_options: Some(UserNamespace {
                    mode: NamespaceMode::Node as i32,
                    uids: vec![],
                    gids: vec![],
                }),
            })
        );
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            ProfileType::RuntimeDefault as i32
        );
        assert!(!sc.privileged);
        assert_eq!(sc.run_as_user, None);
        assert!(sc.supplemental_groups.is_empty());
    }

    #[test]
    fn dns_policies() {
        let host = DnsConfig {
            servers: strings(&["192.168.1.1", "192.168.1.2"]),
            searches: strings(&["corp.example", "lab.example"]),
            options: strings(&["edns0", "timeout:2"]),
        };
        let no_resolv = |mut c: SandboxContext, ips: &[&str]| {
            c.host_resolv_conf = None;
            c.node_ips = strings(ips);
            c
        };
        let no_domain = SandboxContext {
            cluster_domain: String::new(),
            ..ctx()
        };
        #[rustfmt::skip]
        let cases: Vec<(&str, serde_json::Value, SandboxContext, DnsConfig)> = vec![
            ("Default uses the host's resolv.conf",
             json!({"dnsPolicy": "Default"}), ctx(), host.clone()),
            ("hostNetwork with ClusterFirst falls back to Default",
             json!({"dnsPolicy": "ClusterFirst", "hostNetwork": true}), ctx(), host.clone()),
            ("ClusterFirstWithHostNet on hostNetwork uses the cluster DNS",
             json!({"dnsPolicy": "ClusterFirstWithHostNet", "hostNetwork": true}), ctx(),
             DnsConfig {
                 servers: strings(&["10.96.0.10"]),
                 searches: strings(&["prod.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example", "lab.example"]),
                 options: strings(&["ndots:5"]),
             }),
            ("unset policy means ClusterFirst",
             json!({}), no_domain.clone(),
             DnsConfig {
                 servers: strings(&["10.96.0.10"]),
                 searches: strings(&["corp.example", "lab.example"]),
                 options: strings(&["ndots:5"]),
             }),
            ("None takes only the pod's dnsConfig",
             json!({"dnsPolicy": "None", "dnsConfig": {
                 "nameservers": ["1.1.1.1"], "searches": ["a.example"],
                 "options": [{"name": "ndots", "value": "2"}, {"name": "single-request"}]}}),
             ctx(),
             DnsConfig {
                 servers: strings(&["1.1.1.1"]),
                 searches: strings(&["a.example"]),
                 options: strings(&["ndots:2", "single-request"]),
             }),
            ("ClusterFirst merges dnsConfig: duplicates dropped, pod options win",
             json!({"dnsConfig": {
                 "nameservers": ["10.96.0.10", "8.8.8.8"], "searches": ["cluster.local", "x.example"],
                 "options": [{"name": "ndots", "value": "1"}, {"name": "edns0"}]}}),
             ctx(),
             DnsConfig {
                 servers: strings(&["10.96.0.10", "8.8.8.8"]),
                 searches: strings(&["prod.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example", "lab.example", "x.example"]),
                 options: strings(&["ndots:1", "edns0"]),
             }),
            ("no resolv.conf: localhost and a '.' search",
             json!({"dnsPolicy": "Default"}), no_resolv(ctx(), &["192.168.1.10", "fd00::10"]),
             DnsConfig {
                 servers: strings(&["127.0.0.1", "::1"]),
                 searches: strings(&["."]),
                 options: vec![],
             }),
            ("no resolv.conf and no node IPs: 127.0.0.1",
             json!({"dnsPolicy": "Default"}), no_resolv(ctx(), &[]),
             DnsConfig {
                 servers: strings(&["127.0.0.1"]),
                 searches: strings(&["."]),
                 options: vec![],
             }),
        ];
        for (name, spec, c, want) in cases {
            let mut spec = spec;
            spec["containers"] = json!([{"name": "c"}]);
            let (cfg, warnings) = generate_pod_sandbox_config(&pod(spec), 0, &c).unwrap();
            assert_eq!(cfg.dns_config, Some(want), "{name}");
            assert!(warnings.is_empty(), "{name}: {warnings:?}");
        }
    }

    #[test]
    fn cluster_first_without_cluster_dns_warns_and_uses_host() {
        let c = SandboxContext {
            cluster_dns: vec![],
            ..ctx()
        };
        let (cfg, warnings) = generate_pod_sandbox_config(&pod(simple_spec()), 0, &c).unwrap();
        assert_eq!(
            cfg.dns_config.unwrap().servers,
            strings(&["192.168.1.1", "192.168.1.2"])
        );
        let msg = "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.";
        assert_eq!(
            warnings,
            vec![
                SandboxWarning {
                    object: WarningObject::Node,
                    reason: "MissingClusterDNS",
                    message: msg.to_owned(),
                },
                SandboxWarning {
                    object: WarningObject::Pod,
                    reason: "MissingClusterDNS",
                    message: format!("pod: \"web_prod(uid-1)\". {msg}"),
                },
            ]
        );
    }

    #[test]
    fn dns_limits_truncate_with_warnings() {
        let many: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        let long = "a".repeat(254);
        let mut searches = vec![long.clone()];
        searches.extend(many.iter().cloned());
        let spec = json!({
            "dnsPolicy": "None",
            "containers": [{"name": "c"}],
            "dnsConfig": {"nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4"], "searches": searches},
        });
        let (cfg, warnings) = generate_pod_sandbox_config(&pod(spec), 0, &ctx()).unwrap();
        let dns = cfg.dns_config.unwrap();
        assert_eq!(dns.servers, strings(&["1.1.1.1", "2.2.2.2", "3.3.3.3"]));
        // First 32 entries kept, then the over-long one dropped.
        assert_eq!(dns.searches, many[..31].to_vec());
        assert_eq!(warnings.len(), 2);
        assert_eq!(warnings[0].reason, "DNSConfigForming");
        assert_eq!(
            warnings[0].message,
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 1.1.1.1 2.2.2.2 3.3.3.3"
        );
        assert!(warnings[1].message.starts_with(
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: d0.example d1.example"
        ));

        // Total length over 2048 chars: trailing paths are cut until it fits.
        let big: Vec<String> = (0..20)
            .map(|i| format!("{i:02}{}", "b".repeat(198)))
            .collect();
        let spec = json!({"dnsPolicy": "None", "containers": [{"name": "c"}], "dnsConfig": {"searches": big}});
        let (cfg, warnings) = generate_pod_sandbox_config(&pod(spec), 0, &ctx()).unwrap();
        let searches = cfg.dns_config.unwrap().searches;
        assert_eq!(
            searches.len(),
            10,
            "10 * 201 - 1 = 2009 chars fit, 11 do not"
        );
        assert!(searches.join(" ").len() <= MAX_DNS_SEARCH_LIST_CHARS);
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn hostnames() {
        let long_name = format!("{}-{}", "a".repeat(62), "b".repeat(10));
        #[rustfmt::skip]
        let cases: Vec<(&str, &str, serde_json::Value, Result<&str, &str>)> = vec![
            ("pod name", "web", json!({}), Ok("web")),
            ("spec.hostname", "web", json!({"hostname": "db-0"}), Ok("db-0")),
            ("subdomain without FQDN", "web", json!({"hostname": "db-0", "subdomain": "db"}), Ok("db-0")),
            ("FQDN", "web", json!({"hostname": "db-0", "subdomain": "db", "setHostnameAsFQDN": true}),
             Ok("db-0.db.prod.svc.cluster.local")),
            ("truncated to 63 without trailing dash", &long_name, json!({}), Ok(&long_name[..62])),
            ("hostNetwork leaves it to the runtime", "web", json!({"hostNetwork": true, "hostname": "x"}), Ok("")),
            ("invalid hostname", "web", json!({"hostname": "Bad_Name"}),
             Err("pod Hostname \"Bad_Name\" is not a valid DNS label: a lowercase RFC 1123 label must consist of")),
            ("invalid subdomain", "web", json!({"subdomain": "-x"}),
             Err("pod Subdomain \"-x\" is not a valid DNS label")),
            ("FQDN too long", "web",
             json!({"hostname": "h".repeat(40), "subdomain": "s".repeat(10), "setHostnameAsFQDN": true}),
             Err("failed to construct FQDN from pod hostname and cluster domain, FQDN")),
        ];
        for (name, pod_name, mut spec, want) in cases {
            spec["containers"] = json!([{"name": "c"}]);
            let mut p = pod(spec);
            p.metadata.name = Some(pod_name.to_owned());
            let got = generate_pod_sandbox_config(&p, 0, &ctx());
            match want {
                Ok(h) => assert_eq!(got.unwrap().0.hostname, h, "{name}"),
                Err(prefix) => {
                    let err = got.unwrap_err().to_string();
                    assert!(err.starts_with(prefix), "{name}: {err}");
                }
            }
        }
    }

    #[test]
    fn port_mappings_from_all_containers() {
        let spec = json!({"containers": [
            {"name": "a", "ports": [
                {"containerPort": 80, "hostPort": 8080},
                {"containerPort": 53, "protocol": "UDP", "hostIP": "127.0.0.1", "hostPort": 5353},
                {"containerPort": 9090},
                {"containerPort": 80, "hostPort": 8080},
            ]},
            {"name": "b", "ports": [{"containerPort": 7000, "protocol": "SCTP", "name": "s"}]},
        ]});
        let (cfg, _) = generate_pod_sandbox_config(&pod(spec), 0, &ctx()).unwrap();
        let pm = |protocol: Protocol, container_port, host_port, host_ip: &str| PortMapping {
            protocol: protocol as i32,
            container_port,
            host_port,
            host_ip: host_ip.to_owned(),
        };
        assert_eq!(
            cfg.port_mappings,
            vec![
                pm(Protocol::Tcp, 80, 8080, ""),
                pm(Protocol::Udp, 53, 5353, "127.0.0.1"),
                pm(Protocol::Tcp, 9090, 0, ""),
                pm(Protocol::Sctp, 7000, 0, ""),
            ]
        );
    }

    #[test]
    fn linux_security_context() {
        #[rustfmt::skip]
        let cases: Vec<(serde_json::Value, (NamespaceMode, NamespaceMode, NamespaceMode))> = vec![
            (json!({"hostNetwork": true}), (NamespaceMode::Node, NamespaceMode::Container, NamespaceMode::Pod)),
            (json!({"hostPID": true, "hostIPC": true}), (NamespaceMode::Pod, NamespaceMode::Node, NamespaceMode::Node)),
            (json!({"shareProcessNamespace": true}), (NamespaceMode::Pod, NamespaceMode::Pod, NamespaceMode::Pod)),
        ];
        for (mut spec, (network, pid, ipc)) in cases {
            spec["containers"] = json!([{"name": "c"}]);
            let (cfg, _) = generate_pod_sandbox_config(&pod(spec.clone()), 0, &ctx()).unwrap();
            let ns = cfg
                .linux
                .unwrap()
                .security_context
                .unwrap()
                .namespace_options
                .unwrap();
            assert_eq!(
                (ns.network, ns.pid, ns.ipc),
                (network as i32, pid as i32, ipc as i32),
                "{spec}"
            );
        }

        let spec = json!({
            "containers": [{"name": "c"}],
            "initContainers": [{"name": "i", "securityContext": {"privileged": true}}],
            "securityContext": {
                "runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000],
                "sysctls": [{"name": "net.core.somaxconn", "value": "1024"}],
                "seLinuxOptions": {"level": "s0:c1"},
            },
        });
        let (cfg, _) = generate_pod_sandbox_config(
            &pod(spec),
            0,
            &SandboxContext {
                cgroup_parent: None,
                ..ctx()
            },
        )
        .unwrap();
        let linux = cfg.linux.unwrap();
        assert_eq!(linux.cgroup_parent, "");
        assert_eq!(
            linux.sysctls.get("net.core.somaxconn").map(String::as_str),
            Some("1024")
        );
        let sc = linux.security_context.unwrap();
        assert_eq!(sc.run_as_user, Some(Int64Value { value: 1000 }));
        assert_eq!(sc.run_as_group, Some(Int64Value { value: 3000 }));
        assert_eq!(sc.supplemental_groups, vec![2000, 4000]);
        assert!(sc.privileged);
        assert_eq!(sc.selinux_options.unwrap().level, "s0:c1");
    }

    #[test]
    fn resolv_conf_parsing() {
        let (ns, search, opts) = parse_resolv_conf(
            "nameserver 1.1.1.1\n  # comment\nsearch a.example.\nnameserver 2.2.2.2 extra\nsearch b.example c.example.\noptions ndots:2\noptions rotate\ndomain x\nnameserver\n",
        );
        assert_eq!(ns, strings(&["1.1.1.1", "2.2.2.2"]));
        assert_eq!(search, strings(&["b.example", "c.example"]));
        assert_eq!(opts, strings(&["rotate"]));

        let c = SandboxContext {
            host_resolv_conf: Some("nameserver\n".to_owned()),
            ..ctx()
        };
        let err = generate_pod_sandbox_config(&pod(simple_spec()), 0, &c).unwrap_err();
        assert_eq!(err.to_string(), "nameserver list is empty ");
    }
}
