//! security::sysctl: which pod sysctls this node accepts (upstream `pkg/kubelet/sysctl` and
//! `component-helpers/node/util/sysctl`). Owns the safe-sysctl set, the namespaced-ness table,
//! `allowedUnsafeSysctls` pattern validation (`*` wildcards) and the `SysctlForbidden` admission
//! handler. Receives pods and the configured patterns; emits admission rejections with the
//! upstream reason and message. Pure, except `kernel_version` (reads `/proc`, once, at start-up).

use k8s_openapi::api::core::v1::Pod;

use crate::admit::{AdmitHandler, Rejection};

/// Admission reason for a pod asking for a sysctl this node does not allow.
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";
/// Upstream `SysctlMaxLength`.
const SYSCTL_MAX_LENGTH: usize = 253;
/// The regex upstream reports for an invalid pattern (`SysctlContainSlashPatternFmt`).
const PATTERN_FMT: &str = "([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]";

/// The safe sysctls (namespaced and isolated from other pods) with the kernel version that
/// introduced each one, when not ancient.
const SAFE_SYSCTLS: &[(&str, Option<(u32, u32)>)] = &[
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
    ("net.ipv4.tcp_fin_timeout", Some((4, 6))),
    ("net.ipv4.tcp_keepalive_intvl", Some((4, 5))),
    ("net.ipv4.tcp_keepalive_probes", Some((4, 5))),
    ("net.ipv4.tcp_rmem", Some((4, 15))),
    ("net.ipv4.tcp_wmem", Some((4, 15))),
];

/// The kernel namespace that isolates a sysctl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    Ipc,
    Net,
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Namespace::Ipc => "ipc",
            Namespace::Net => "net",
        })
    }
}

/// The namespace a sysctl lives in, `None` when it is not known to be namespaced (upstream
/// `NamespacedBy`).
pub fn namespaced_by(name: &str) -> Option<Namespace> {
    if name == "kernel.sem" {
        return Some(Namespace::Ipc);
    }
    const PREFIXES: &[(&str, Namespace)] = &[
        ("kernel.shm", Namespace::Ipc),
        ("kernel.msg", Namespace::Ipc),
        ("fs.mqueue.", Namespace::Ipc),
        ("net.", Namespace::Net),
    ];
    PREFIXES
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map(|(_, ns)| *ns)
}

/// `net/ipv4/conf/eth0.100/rp_filter` → `net.ipv4.conf.eth0/100.rp_filter`: a name whose first
/// separator is `/` swaps `/` and `.` (sysctl.d(5)); others are returned unchanged.
pub fn to_dots_separator(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                other => other,
            })
            .collect(),
        _ => name.to_owned(),
    }
}

/// Upstream `IsValidSysctlPattern`: dot- or slash-separated lowercase segments, the last one
/// optionally ending in `*`.
pub fn is_valid_pattern(pattern: &str) -> bool {
    if pattern.is_empty() || pattern.len() > SYSCTL_MAX_LENGTH {
        return false;
    }
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let mid = |b: u8| alnum(b) || b == b'-' || b == b'_';
    let segments: Vec<&str> = pattern.split(['.', '/']).collect();
    let (last, inner) = segments.split_last().unwrap_or((&"", &[]));
    let inner_ok = inner.iter().all(|s| {
        let b = s.as_bytes();
        !b.is_empty() && alnum(b[0]) && alnum(b[b.len() - 1]) && b.iter().all(|c| mid(*c))
    });
    // Last segment: `([a-z0-9][-_a-z0-9]*)?[a-z0-9*]`.
    let b = last.as_bytes();
    let last_ok = match b.split_last() {
        None => false,
        Some((end, rest)) => {
            (alnum(*end) || *end == b'*')
                && (rest.is_empty() || (alnum(rest[0]) && rest.iter().all(|c| mid(*c))))
        }
    };
    inner_ok && last_ok
}

/// (major, minor) of the running kernel from `/proc/sys/kernel/osrelease`.
pub fn kernel_version() -> Option<(u32, u32)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    parse_kernel_version(&release)
}

fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The safe sysctls available on a kernel of this version (upstream `SafeSysctlAllowlist`):
/// those introduced by a newer kernel, or all versioned ones when the version is unknown, are
/// left out.
pub fn safe_sysctls(kernel: Option<(u32, u32)>) -> Vec<&'static str> {
    SAFE_SYSCTLS
        .iter()
        .filter(|(name, min)| match (min, kernel) {
            (None, _) => true,
            (Some(min), Some(k)) if k >= *min => true,
            (Some(_), _) => {
                tracing::warn!(
                    sysctl = name,
                    ?kernel,
                    "kernel version is too small, dropping the sysctl from safe sysctl list"
                );
                false
            }
        })
        .map(|(name, _)| *name)
        .collect()
}

/// A bad `allowedUnsafeSysctls` entry (upstream `NewAllowlist` errors; the Go kubelet refuses
/// to start with them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SysctlError {
    #[error(
        "sysctl {0:?} must have at most {SYSCTL_MAX_LENGTH} characters and match regex {PATTERN_FMT}"
    )]
    InvalidPattern(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    PrefixNotNamespaced(String),
    #[error("the sysctl {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

/// Checks every entry of `allowedUnsafeSysctls` (for config validation at start-up).
pub fn validate_patterns(patterns: &[String]) -> Result<(), SysctlError> {
    SysctlAllowlist::new(patterns.iter().map(String::as_str)).map(|_| ())
}

/// The node's sysctl allowlist and the `SysctlForbidden` admission rule (upstream
/// `patternAllowlist`).
#[derive(Debug, Clone, Default)]
pub struct SysctlAllowlist {
    sysctls: Vec<(String, Namespace)>,
    prefixes: Vec<(String, Namespace)>,
}

impl SysctlAllowlist {
    /// An allowlist of exact names and `prefix*` patterns, each known to be namespaced.
    pub fn new<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<Self, SysctlError> {
        let mut list = Self::default();
        for raw in patterns {
            list.add(raw)?;
        }
        Ok(list)
    }

    fn add(&mut self, raw: &str) -> Result<(), SysctlError> {
        if !is_valid_pattern(raw) {
            return Err(SysctlError::InvalidPattern(raw.to_owned()));
        }
        let pattern = to_dots_separator(raw);
        match pattern.strip_suffix('*') {
            Some(prefix) => {
                let ns = namespaced_by(prefix)
                    .ok_or_else(|| SysctlError::PrefixNotNamespaced(pattern.clone()))?;
                self.prefixes.push((prefix.to_owned(), ns));
            }
            None => {
                let ns = namespaced_by(&pattern)
                    .ok_or_else(|| SysctlError::NotNamespaced(pattern.clone()))?;
                self.sysctls.push((pattern, ns));
            }
        }
        Ok(())
    }

    /// What the kubelet builds at start-up: the safe set for `kernel` plus
    /// `allowedUnsafeSysctls`. An invalid entry is logged and skipped (it can only allow
    /// less); `validate_patterns` is the strict start-up check.
    pub fn for_node(allowed_unsafe: &[String], kernel: Option<(u32, u32)>) -> Self {
        let mut list = Self::default();
        for pattern in safe_sysctls(kernel)
            .into_iter()
            .chain(allowed_unsafe.iter().map(String::as_str))
        {
            if let Err(e) = list.add(pattern) {
                tracing::error!(error = %e, "ignoring invalid allowedUnsafeSysctls entry");
            }
        }
        list
    }

    /// `for_node` on the running kernel.
    pub fn from_config(allowed_unsafe: &[String]) -> Self {
        Self::for_node(allowed_unsafe, kernel_version())
    }

    /// Upstream `validateSysctl`: the error text that follows `forbidden sysctl: `.
    pub fn validate(&self, name: &str, host_net: bool, host_ipc: bool) -> Result<(), String> {
        let name = to_dots_separator(name);
        let ns = self
            .sysctls
            .iter()
            .find(|(s, _)| *s == name)
            .or_else(|| self.prefixes.iter().find(|(p, _)| name.starts_with(p)))
            .map(|(_, ns)| *ns)
            .ok_or_else(|| format!("{name:?} not allowlisted"))?;
        if (ns == Namespace::Ipc && host_ipc) || (ns == Namespace::Net && host_net) {
            return Err(format!("{name:?} not allowed with host {ns} enabled"));
        }
        Ok(())
    }
}

impl AdmitHandler for SysctlAllowlist {
    fn admit(&self, pod: &Pod, _active: &[&Pod]) -> Result<(), Rejection> {
        let Some(spec) = &pod.spec else {
            return Ok(());
        };
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|sc| sc.sysctls.as_ref());
        let (host_net, host_ipc) = (
            spec.host_network.unwrap_or(false),
            spec.host_ipc.unwrap_or(false),
        );
        for s in sysctls.into_iter().flatten() {
            if let Err(e) = self.validate(&s.name, host_net, host_ipc) {
                return Err(Rejection {
                    reason: FORBIDDEN_REASON.to_owned(),
                    message: format!("forbidden sysctl: {e}"),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn namespaces() {
        #[rustfmt::skip]
        let cases = [
            ("kernel.sem", Some(Namespace::Ipc)),
            ("kernel.shmmax", Some(Namespace::Ipc)),
            ("kernel.shm_rmid_forced", Some(Namespace::Ipc)),
            ("kernel.msgmax", Some(Namespace::Ipc)),
            ("fs.mqueue.msg_max", Some(Namespace::Ipc)),
            ("net.core.somaxconn", Some(Namespace::Net)),
            ("kernel.sem_foo", None),
            ("kernel.panic", None),
            ("vm.swappiness", None),
            ("fs.mqueue", None),
        ];
        for (name, want) in cases {
            assert_eq!(namespaced_by(name), want, "{name}");
        }
    }

    #[test]
    fn slash_separated_names() {
        #[rustfmt::skip]
        let cases = [
            ("net/ipv4/conf/eth0.100/rp_filter", "net.ipv4.conf.eth0/100.rp_filter"),
            ("net.ipv4.conf.eth0/100.rp_filter", "net.ipv4.conf.eth0/100.rp_filter"),
            ("kernel/shm_rmid_forced", "kernel.shm_rmid_forced"),
            ("kernel", "kernel"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(to_dots_separator(input), want, "{input}");
        }
    }

    #[test]
    fn pattern_syntax() {
        #[rustfmt::skip]
        let cases = [
            ("net.core.somaxconn", true), ("net.*", true), ("kernel.shm*", true),
            ("net/ipv4/ip_forward", true), ("a", true), ("*", true), ("net.ipv4.tcp-x_y", true),
            ("", false), ("net..core", false), ("Net.core", false), (".net", false),
            ("net.", false), ("net.*.x", false), ("net.core-", false), ("net.-core", false),
            ("net.c*re", false),
        ];
        for (p, want) in cases {
            assert_eq!(is_valid_pattern(p), want, "{p:?}");
        }
        assert!(!is_valid_pattern(&"a".repeat(254)));
    }

    #[test]
    fn allowlist_construction_errors() {
        let err = |p: &str| SysctlAllowlist::new([p]).unwrap_err().to_string();
        assert_eq!(
            err("kernel.*"),
            "the sysctls \"kernel.*\" are not known to be namespaced"
        );
        assert_eq!(
            err("vm.swappiness"),
            "the sysctl \"vm.swappiness\" are not known to be namespaced"
        );
        assert!(
            err("Bad!")
                .starts_with("sysctl \"Bad!\" must have at most 253 characters and match regex")
        );
        assert!(SysctlAllowlist::new(["net.*", "kernel.msg*", "kernel.sem"]).is_ok());
        assert!(validate_patterns(&strings(&["net.core.somaxconn", "kernel/shm*"])).is_ok());
        assert!(validate_patterns(&strings(&["kernel.panic"])).is_err());
    }

    #[test]
    fn safe_set_depends_on_kernel() {
        let all = safe_sysctls(Some((6, 1)));
        assert_eq!(all.len(), SAFE_SYSCTLS.len());
        let old = safe_sysctls(Some((4, 4)));
        assert!(old.contains(&"net.ipv4.ip_local_reserved_ports"));
        assert!(!old.contains(&"net.ipv4.tcp_keepalive_time"));
        let unknown = safe_sysctls(None);
        assert_eq!(
            unknown,
            vec![
                "kernel.shm_rmid_forced",
                "net.ipv4.ip_local_port_range",
                "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range",
                "net.ipv4.ip_unprivileged_port_start",
            ]
        );
        assert_eq!(parse_kernel_version("6.18.44-fc-v595\n"), Some((6, 18)));
        assert_eq!(parse_kernel_version("5.10-rc1"), Some((5, 10)));
        assert_eq!(parse_kernel_version("garbage"), None);
    }

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c"}]);
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn admission() {
        let list = SysctlAllowlist::for_node(
            &strings(&["kernel.msg*", "net.core.somaxconn", "bad pattern"]),
            Some((6, 1)),
        );
        let sysctls = |names: &[&str]| json!({"sysctls": names.iter().map(|n| json!({"name": n, "value": "1"})).collect::<Vec<_>>()});
        #[rustfmt::skip]
        let cases: Vec<(&str, serde_json::Value, Option<&str>)> = vec![
            ("no sysctls", json!({}), None),
            ("safe", json!({"securityContext": sysctls(&["kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range"])}), None),
            ("safe, slash form", json!({"securityContext": sysctls(&["net/ipv4/tcp_syncookies"])}), None),
            ("allowed unsafe exact", json!({"securityContext": sysctls(&["net.core.somaxconn"])}), None),
            ("allowed unsafe wildcard", json!({"securityContext": sysctls(&["kernel.msgmax"])}), None),
            ("unsafe", json!({"securityContext": sysctls(&["kernel.shm_rmid_forced", "net.core.rmem_max"])}),
             Some("forbidden sysctl: \"net.core.rmem_max\" not allowlisted")),
            ("not namespaced", json!({"securityContext": sysctls(&["vm.swappiness"])}),
             Some("forbidden sysctl: \"vm.swappiness\" not allowlisted")),
            ("net sysctl with hostNetwork", json!({"hostNetwork": true, "securityContext": sysctls(&["net.ipv4.tcp_syncookies"])}),
             Some("forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled")),
            ("ipc sysctl with hostIPC", json!({"hostIPC": true, "securityContext": sysctls(&["kernel.msgmax"])}),
             Some("forbidden sysctl: \"kernel.msgmax\" not allowed with host ipc enabled")),
            ("ipc sysctl with hostNetwork is fine", json!({"hostNetwork": true, "securityContext": sysctls(&["kernel.shm_rmid_forced"])}), None),
        ];
        for (name, spec, want) in cases {
            let got = list.admit(&pod(spec), &[]);
            match want {
                None => assert!(got.is_ok(), "{name}: {got:?}"),
                Some(msg) => {
                    let r = got.unwrap_err();
                    assert_eq!(
                        (r.reason.as_str(), r.message.as_str()),
                        (FORBIDDEN_REASON, msg),
                        "{name}"
                    );
                }
            }
        }
        // Without allowedUnsafeSysctls only the safe set passes.
        let strict = SysctlAllowlist::for_node(&[], Some((6, 1)));
        assert!(strict.validate("net.core.somaxconn", false, false).is_err());
        assert!(
            strict
                .validate("net.ipv4.tcp_keepalive_time", false, false)
                .is_ok()
        );
    }
}
