//! Node identity flags: `--node-labels`, `--node-ip`, `--hostname-override`.
//! Owns: upstream's checks of these values (`validateKubeletFlags`, `ParseNodeIPArgument`,
//! `GetHostname`). Receives the flag text; emits the labels, the checked IPs and the node name,
//! or a [`ConfigError`] naming the flag.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kubelet::config::ConfigError;

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
pub(super) fn parse_node_labels(s: &str) -> Result<BTreeMap<String, String>, ConfigError> {
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

/// Upstream `ParseNodeIPArgument`: one IP, or an IPv4/IPv6 dual-stack pair.
pub(super) fn check_node_ip(node_ip: &str) -> Result<(), ConfigError> {
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
pub(super) fn node_name(
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

pub(super) fn machine_hostname() -> std::io::Result<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
}

pub(super) fn non_empty(s: &Option<String>) -> Option<String> {
    s.as_ref().filter(|s| !s.is_empty()).cloned()
}
