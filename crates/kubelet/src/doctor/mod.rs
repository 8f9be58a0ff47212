//! `rkubelet doctor`: the node checks an operator runs at 3 a.m. Owns the decisions only:
//! receives the [`Facts`] the I/O layer ([`gather`]) collected about the node (runtime answers,
//! file contents, statvfs numbers, certificate dates), emits [`Finding`]s — one per check, each
//! with a severity and, when something is wrong, the fix — and the exit code (0 nothing
//! wrong, 1 warnings, 2 errors). Every check is a pure function of the facts, so tests feed
//! facts and assert findings.
//!
//! Thresholds (chosen after upstream, and printed in the findings):
//! - certificates: error when expired, warning when less than 10 % of the lifetime is left —
//!   where the kubelet's certificate manager itself starts warning (it rotates at 70–90 %);
//! - clock skew against the API server's `Date`: warning from 5 s, error from 60 s (the
//!   header has one-second resolution);
//! - disk and inodes: error when the free amount is below the `evictionHard` threshold (the
//!   kubelet is evicting), warning below twice the threshold.

pub mod gather;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::config::ThresholdValue;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The check could not run (missing input); not a problem.
    Skip,
    Ok,
    Warn,
    Error,
}

impl Severity {
    /// The tag printed before a finding.
    pub fn tag(self) -> &'static str {
        match self {
            Severity::Skip => "[skip]",
            Severity::Ok => "[ok]",
            Severity::Warn => "[warn]",
            Severity::Error => "[error]",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// The check's short name (`runtime`, `swap`, …).
    pub check: &'static str,
    pub severity: Severity,
    pub message: String,
    /// What to do about it (for warnings and errors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    fn new(check: &'static str, severity: Severity, message: impl Into<String>) -> Self {
        Self {
            check,
            severity,
            message: message.into(),
            fix: None,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// The kubelet configuration as far as the checks need it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFacts {
    /// The file read, or `None` when the defaults are used.
    pub path: Option<PathBuf>,
    /// Why the file could not be used (the checks then run on the defaults).
    pub error: Option<String>,
    pub cgroup_driver: String,
    pub fail_swap_on: bool,
    pub eviction_hard: BTreeMap<String, ThresholdValue>,
    pub pod_logs_dir: PathBuf,
}

impl ConfigFacts {
    /// How a setting of the configuration is named in a fix.
    fn where_set(&self) -> String {
        match &self.path {
            Some(p) => format!("in {}", p.display()),
            None => "in the kubelet configuration file".to_owned(),
        }
    }
}

/// What the CRI runtime answered.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuntimeFacts {
    pub endpoint: String,
    /// `Version`: name, version, CRI API version — or why the call failed.
    pub version: Option<Result<RuntimeVersion, String>>,
    /// `Status` conditions that are false: (type, reason, message).
    pub failed_conditions: Vec<(String, String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeVersion {
    pub name: String,
    pub version: String,
    pub api_version: String,
}

/// The cgroup driver the runtime uses, and how it was learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeCgroupDriver {
    /// `systemd` or `cgroupfs`, and where it came from.
    Known { driver: String, source: String },
    /// Why it could not be learnt.
    Unknown(String),
}

/// The CNI configuration directory and what is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniFacts {
    pub dir: PathBuf,
    /// Where the directory's name came from ("the runtime's configuration", "default").
    pub source: String,
    /// Network configuration files (`*.conf`, `*.conflist`, `*.json`), or why listing failed.
    pub files: Result<Vec<String>, String>,
}

/// One active swap area from `/proc/swaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapArea {
    pub name: String,
    pub size_kib: u64,
}

/// Kernel settings the pod network needs; `None` when the file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KernelFacts {
    pub br_netfilter_loaded: Option<bool>,
    pub ip_forward: Option<String>,
    /// `None` also when `/proc/sys/net/bridge` does not exist (br_netfilter not loaded).
    pub bridge_nf_call_iptables: Option<String>,
}

/// The clock against the API server's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClockFacts {
    /// No kubeconfig: nothing to compare with.
    NoKubeconfig,
    /// The request failed.
    Unreachable { server: String, error: String },
    /// The server's `Date` and the local time halfway through the request.
    Measured {
        server: String,
        server_time: SystemTime,
        local_time: SystemTime,
    },
}

/// A certificate the kubelet uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    /// "client" or "serving".
    pub role: &'static str,
    pub path: PathBuf,
    /// (notBefore, notAfter), or why the file could not be read.
    pub validity: Result<(SystemTime, SystemTime), String>,
}

/// Free space of a file system the kubelet evicts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskFacts {
    /// `nodefs` or `imagefs`.
    pub signal_prefix: &'static str,
    pub path: PathBuf,
    /// statvfs numbers, or why it failed.
    pub stat: Result<FsStat, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStat {
    pub bytes_total: u64,
    pub bytes_avail: u64,
    pub inodes_total: u64,
    pub inodes_free: u64,
}

/// The pod log directory: writable or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDirFacts {
    pub path: PathBuf,
    /// `false`: not created yet; `writable` then tells whether the kubelet can create it.
    pub exists: bool,
    pub writable: Result<(), String>,
}

/// Everything the checks look at.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    pub now: SystemTime,
    pub config: ConfigFacts,
    pub runtime: RuntimeFacts,
    pub runtime_cgroup_driver: RuntimeCgroupDriver,
    pub cni: Option<CniFacts>,
    /// Active swap areas, or why `/proc/swaps` could not be read.
    pub swap: Result<Vec<SwapArea>, String>,
    pub kernel: KernelFacts,
    pub clock: ClockFacts,
    pub certs: Vec<CertFacts>,
    pub disks: Vec<DiskFacts>,
    pub log_dir: LogDirFacts,
}

/// All checks, in the order they are printed.
pub fn check(f: &Facts) -> Vec<Finding> {
    let mut out = vec![check_config(&f.config)];
    out.extend(check_runtime(&f.runtime));
    out.push(check_cni(f.cni.as_ref()));
    out.push(check_cgroup_driver(&f.config, &f.runtime_cgroup_driver));
    out.push(check_swap(&f.config, &f.swap));
    out.extend(check_kernel(&f.kernel));
    out.push(check_clock(&f.clock));
    out.extend(f.certs.iter().map(|c| check_cert(c, f.now)));
    out.extend(
        f.disks
            .iter()
            .flat_map(|d| check_disk(d, &f.config.eviction_hard)),
    );
    out.push(check_log_dir(&f.log_dir));
    out
}

/// 0 when nothing is wrong, 1 with warnings, 2 with errors.
pub fn exit_code(findings: &[Finding]) -> u8 {
    match findings.iter().map(|f| f.severity).max() {
        Some(Severity::Error) => 2,
        Some(Severity::Warn) => 1,
        _ => 0,
    }
}

/// The counts line printed last.
pub fn summary(findings: &[Finding]) -> String {
    let count = |s| findings.iter().filter(|f| f.severity == s).count();
    let (e, w) = (count(Severity::Error), count(Severity::Warn));
    format!(
        "summary: {} ok, {} warning{}, {} error{}, {} skipped",
        count(Severity::Ok),
        w,
        if w == 1 { "" } else { "s" },
        e,
        if e == 1 { "" } else { "s" },
        count(Severity::Skip),
    )
}

/// Plain text: one line per finding with its tag, an indented `fix:` line, the summary.
pub fn render_text(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        out.push_str(&format!(
            "{:<7} {}: {}\n",
            f.severity.tag(),
            f.check,
            f.message
        ));
        if let Some(fix) = &f.fix {
            out.push_str(&format!("        fix: {fix}\n"));
        }
    }
    out.push_str(&summary(findings));
    out.push('\n');
    out
}

/// `-o json`: the findings, the summary counts and the exit code.
pub fn render_json(findings: &[Finding]) -> String {
    let count = |s| findings.iter().filter(|f| f.severity == s).count();
    let v = serde_json::json!({
        "findings": findings,
        "summary": {
            "ok": count(Severity::Ok),
            "warnings": count(Severity::Warn),
            "errors": count(Severity::Error),
            "skipped": count(Severity::Skip),
        },
        "exitCode": exit_code(findings),
    });
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    s
}

fn check_config(c: &ConfigFacts) -> Finding {
    match (&c.path, &c.error) {
        (Some(p), Some(e)) => Finding::new(
            "config",
            Severity::Error,
            format!(
                "{} cannot be used ({e}); the checks below use the defaults",
                p.display()
            ),
        )
        .fix(format!(
            "correct {} (the kubelet refuses to start with it)",
            p.display()
        )),
        (Some(p), None) => Finding::new("config", Severity::Ok, format!("read {}", p.display())),
        (None, _) => Finding::new(
            "config",
            Severity::Skip,
            "no kubelet configuration file; the checks below use the defaults",
        ),
    }
}

fn check_runtime(r: &RuntimeFacts) -> Vec<Finding> {
    let mut out = Vec::new();
    match &r.version {
        None => out.push(Finding::new(
            "runtime",
            Severity::Skip,
            format!("{} was not asked", r.endpoint),
        )),
        Some(Ok(v)) => out.push(Finding::new(
            "runtime",
            Severity::Ok,
            format!(
                "{} {} (CRI {}) at {}",
                v.name, v.version, v.api_version, r.endpoint
            ),
        )),
        Some(Err(e)) => out.push(
            Finding::new(
                "runtime",
                Severity::Error,
                format!("no CRI runtime answers at {}: {e}", r.endpoint),
            )
            .fix(
                "start the runtime (systemctl status containerd; journalctl -u containerd), \
                 or point --container-runtime-endpoint / containerRuntimeEndpoint at its socket",
            ),
        ),
    }
    for (kind, reason, message) in &r.failed_conditions {
        let fix = if kind == "NetworkReady" {
            "install a CNI network plugin configuration (the runtime reports the pod network \
             not ready until one is present)"
        } else {
            "look at the runtime's log (journalctl -u containerd)"
        };
        out.push(
            Finding::new(
                "runtime",
                Severity::Warn,
                format!("runtime condition {kind} is false: {reason}: {message}"),
            )
            .fix(fix),
        );
    }
    out
}

fn check_cni(c: Option<&CniFacts>) -> Finding {
    let Some(c) = c else {
        return Finding::new(
            "cni",
            Severity::Skip,
            "the runtime did not answer; CNI configuration not checked",
        );
    };
    let fix = format!(
        "install a network plugin (its DaemonSet, or a *.conflist in {}); until then only \
         hostNetwork pods start",
        c.dir.display()
    );
    match &c.files {
        Ok(files) if !files.is_empty() => Finding::new(
            "cni",
            Severity::Ok,
            format!("{} in {} ({})", files.join(", "), c.dir.display(), c.source),
        ),
        Ok(_) => Finding::new(
            "cni",
            Severity::Warn,
            format!(
                "no network configuration in {} ({})",
                c.dir.display(),
                c.source
            ),
        )
        .fix(fix),
        Err(e) => Finding::new(
            "cni",
            Severity::Warn,
            format!("cannot list {} ({}): {e}", c.dir.display(), c.source),
        )
        .fix(fix),
    }
}

fn check_cgroup_driver(c: &ConfigFacts, runtime: &RuntimeCgroupDriver) -> Finding {
    let kubelet = if c.cgroup_driver.is_empty() {
        "cgroupfs"
    } else {
        c.cgroup_driver.as_str()
    };
    match runtime {
        RuntimeCgroupDriver::Known { driver, source } if driver == kubelet => Finding::new(
            "cgroup-driver",
            Severity::Ok,
            format!("kubelet and runtime both use {kubelet} (runtime: {source})"),
        ),
        RuntimeCgroupDriver::Known { driver, source } => Finding::new(
            "cgroup-driver",
            Severity::Error,
            format!(
                "the kubelet uses {kubelet} but the runtime uses {driver} (runtime: {source}); \
                 pods fail to start or run outside the kubelet's cgroups"
            ),
        )
        .fix(format!(
            "set cgroupDriver: {driver} {}, or change the runtime (containerd: SystemdCgroup = {} \
             in the runc options of /etc/containerd/config.toml, then restart it)",
            c.where_set(),
            kubelet == "systemd"
        )),
        RuntimeCgroupDriver::Unknown(why) => Finding::new(
            "cgroup-driver",
            Severity::Warn,
            format!("kubelet uses {kubelet}; the runtime's driver is unknown ({why})"),
        )
        .fix(format!(
            "make sure the runtime uses {kubelet} too (containerd: SystemdCgroup = {} in the runc \
             options of its config.toml; pass --containerd-config if it is elsewhere)",
            kubelet == "systemd"
        )),
    }
}

/// `/proc/swaps`: the active swap areas (the header line is skipped).
pub fn parse_proc_swaps(text: &str) -> Vec<SwapArea> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?.to_owned();
            let size_kib = f.nth(1)?.parse().ok()?;
            Some(SwapArea { name, size_kib })
        })
        .collect()
}

fn check_swap(c: &ConfigFacts, swap: &Result<Vec<SwapArea>, String>) -> Finding {
    let areas = match swap {
        Ok(a) => a,
        Err(e) => {
            return Finding::new(
                "swap",
                Severity::Warn,
                format!("cannot read /proc/swaps: {e}"),
            )
            .fix("check that /proc is mounted");
        }
    };
    if areas.is_empty() {
        return Finding::new("swap", Severity::Ok, "swap is off");
    }
    let list = areas
        .iter()
        .map(|a| format!("{} {} MiB", a.name, a.size_kib / 1024))
        .collect::<Vec<_>>()
        .join(", ");
    if c.fail_swap_on {
        Finding::new(
            "swap",
            Severity::Error,
            format!("swap is on ({list}) and failSwapOn is true: the kubelet refuses to start"),
        )
        .fix(format!(
            "swapoff -a and remove the swap entries from /etc/fstab, or set failSwapOn: false {}",
            c.where_set()
        ))
    } else {
        Finding::new(
            "swap",
            Severity::Ok,
            format!("swap is on ({list}) and failSwapOn is false"),
        )
    }
}

fn check_kernel(k: &KernelFacts) -> Vec<Finding> {
    let mut out = Vec::new();
    out.push(match k.br_netfilter_loaded {
        Some(true) => Finding::new("kernel", Severity::Ok, "module br_netfilter is loaded"),
        Some(false) => Finding::new(
            "kernel",
            Severity::Warn,
            "module br_netfilter is not loaded",
        )
        .fix(
            "modprobe br_netfilter, and add it to /etc/modules-load.d/k8s.conf so it loads \
                 at boot (bridge CNI plugins and kube-proxy need it)",
        ),
        None => Finding::new(
            "kernel",
            Severity::Skip,
            "cannot tell whether br_netfilter is loaded (/sys/module and /proc/modules unreadable)",
        ),
    });
    let sysctl =
        |name: &str, value: &Option<String>, sev: Severity, why: &str| match value.as_deref() {
            Some("1") => Finding::new("kernel", Severity::Ok, format!("{name} = 1")),
            Some(v) => {
                Finding::new("kernel", sev, format!("{name} = {v} (want 1: {why})")).fix(format!(
                    "sysctl -w {name}=1, and put \"{name} = 1\" in /etc/sysctl.d/k8s.conf so it \
                 survives a reboot"
                ))
            }
            None => Finding::new(
                "kernel",
                sev,
                format!("{name} is not available (want 1: {why})"),
            )
            .fix(format!(
                "modprobe br_netfilter (it provides net.bridge.*), then sysctl -w {name}=1 and \
                 put it in /etc/sysctl.d/k8s.conf"
            )),
        };
    out.push(sysctl(
        "net.ipv4.ip_forward",
        &k.ip_forward,
        Severity::Error,
        "pods cannot reach other nodes or the outside",
    ));
    out.push(sysctl(
        "net.bridge.bridge-nf-call-iptables",
        &k.bridge_nf_call_iptables,
        Severity::Warn,
        "bridged pod traffic bypasses iptables, so Services break",
    ));
    out
}

/// Skew from which clock findings warn, and from which they are errors.
pub const SKEW_WARN: Duration = Duration::from_secs(5);
pub const SKEW_ERROR: Duration = Duration::from_secs(60);

fn check_clock(c: &ClockFacts) -> Finding {
    match c {
        ClockFacts::NoKubeconfig => Finding::new(
            "clock",
            Severity::Skip,
            "no kubeconfig: skew against the API server not checked",
        ),
        ClockFacts::Unreachable { server, error } => Finding::new(
            "clock",
            Severity::Warn,
            format!("cannot reach the API server {server} to compare clocks: {error}"),
        )
        .fix("check the kubeconfig and the network path to its server"),
        ClockFacts::Measured {
            server,
            server_time,
            local_time,
        } => {
            let (skew, dir) = match local_time.duration_since(*server_time) {
                Ok(d) => (d, "ahead of"),
                Err(e) => (e.duration(), "behind"),
            };
            let secs = skew.as_secs();
            let msg = format!("local clock is {secs}s {dir} the API server {server}");
            let sev = if skew >= SKEW_ERROR {
                Severity::Error
            } else if skew >= SKEW_WARN {
                Severity::Warn
            } else {
                return Finding::new(
                    "clock",
                    Severity::Ok,
                    format!(
                        "local clock within {}s of the API server {server}",
                        SKEW_WARN.as_secs()
                    ),
                );
            };
            Finding::new(
                "clock",
                sev,
                format!(
                    "{msg} (warning from {}s, error from {}s)",
                    SKEW_WARN.as_secs(),
                    SKEW_ERROR.as_secs()
                ),
            )
            .fix("enable time synchronisation: timedatectl set-ntp true (chrony or systemd-timesyncd)")
        }
    }
}

fn days(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 2 * 86_400 {
        format!("{} days", secs / 86_400)
    } else {
        format!("{}h", secs / 3600)
    }
}

fn check_cert(c: &CertFacts, now: SystemTime) -> Finding {
    let check = if c.role == "client" {
        "client-cert"
    } else {
        "serving-cert"
    };
    let (not_before, not_after) = match &c.validity {
        Ok(v) => *v,
        Err(e) => {
            return Finding::new(check, Severity::Skip, format!("{}: {e}", c.path.display()));
        }
    };
    let expiry = chrono::DateTime::<chrono::Utc>::from(not_after).to_rfc3339();
    let fix = if c.role == "client" {
        "check the kubelet's log for certificate rotation errors and the CSRs \
         (kubectl get csr); if it expired, re-join the node (kubeadm: move \
         kubelet-client-current.pem aside, write a bootstrap kubeconfig, restart the kubelet)"
    } else {
        "renew it: with serverTLSBootstrap approve the kubelet-serving CSR (kubectl get csr), \
         otherwise replace tlsCertFile or remove it so the kubelet generates a new one"
    };
    let Ok(left) = not_after.duration_since(now) else {
        return Finding::new(
            check,
            Severity::Error,
            format!("{} expired at {expiry}", c.path.display()),
        )
        .fix(fix);
    };
    let life = not_after.duration_since(not_before).unwrap_or_default();
    if left < life / 10 {
        Finding::new(
            check,
            Severity::Warn,
            format!(
                "{} expires in {} ({expiry}): less than 10% of its lifetime is left, so \
                 rotation is late",
                c.path.display(),
                days(left)
            ),
        )
        .fix(fix)
    } else {
        Finding::new(
            check,
            Severity::Ok,
            format!("{} valid for {} ({expiry})", c.path.display(), days(left)),
        )
    }
}

/// The number of free units `threshold` asks to keep out of `capacity`.
fn threshold_amount(t: &ThresholdValue, capacity: u64) -> u64 {
    match t {
        ThresholdValue::Quantity(q) => u64::try_from(q.value()).unwrap_or(0),
        ThresholdValue::Percentage { percent, .. } => {
            (capacity as f64 * percent / 100.0).ceil() as u64
        }
    }
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b}B")
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

fn check_disk(d: &DiskFacts, eviction: &BTreeMap<String, ThresholdValue>) -> Vec<Finding> {
    let check = d.signal_prefix;
    let st = match &d.stat {
        Ok(s) => *s,
        Err(e) => {
            return vec![
                Finding::new(
                    check,
                    Severity::Warn,
                    format!("cannot stat {}: {e}", d.path.display()),
                )
                .fix("create the directory or check its mount"),
            ];
        }
    };
    let mut out = Vec::new();
    let rows = [
        (
            "available",
            st.bytes_avail,
            st.bytes_total,
            human_bytes as fn(u64) -> String,
        ),
        ("inodesFree", st.inodes_free, st.inodes_total, |n: u64| {
            format!("{n} inodes")
        }),
    ];
    for (suffix, free, total, show) in rows {
        let signal = format!("{}.{suffix}", d.signal_prefix);
        let Some(t) = eviction.get(&signal).filter(|t| !t.disables_signal()) else {
            out.push(Finding::new(
                check,
                Severity::Ok,
                format!(
                    "{} free on {} (no evictionHard for {signal})",
                    show(free),
                    d.path.display()
                ),
            ));
            continue;
        };
        if total == 0 {
            // A file system without inode accounting (btrfs reports 0).
            continue;
        }
        let need = threshold_amount(t, total);
        let msg = format!(
            "{} free of {} on {}; evictionHard {signal}<{}",
            show(free),
            show(total),
            d.path.display(),
            t.as_str()
        );
        let fix = format!(
            "free space on {} (crictl rmi --prune, old logs, unused volumes) or enlarge it",
            d.path.display()
        );
        out.push(if free < need {
            Finding::new(
                check,
                Severity::Error,
                format!("{msg}: the kubelet is evicting pods"),
            )
            .fix(fix)
        } else if free < need.saturating_mul(2) {
            Finding::new(
                check,
                Severity::Warn,
                format!("{msg}: less than twice the threshold left"),
            )
            .fix(fix)
        } else {
            Finding::new(check, Severity::Ok, msg)
        });
    }
    out
}

fn check_log_dir(l: &LogDirFacts) -> Finding {
    match &l.writable {
        Ok(()) if !l.exists => Finding::new(
            "log-dir",
            Severity::Ok,
            format!(
                "{} does not exist yet; the kubelet creates it at start (its parent is writable)",
                l.path.display()
            ),
        ),
        Err(e) if !l.exists => Finding::new(
            "log-dir",
            Severity::Error,
            format!(
                "{} does not exist and cannot be created: {e}",
                l.path.display()
            ),
        )
        .fix(format!(
            "create {} (mode 0755, owned by root) on a writable file system; containers' \
             logs are written there",
            l.path.display()
        )),
        Ok(()) => Finding::new(
            "log-dir",
            Severity::Ok,
            format!("{} is writable", l.path.display()),
        ),
        Err(e) => Finding::new(
            "log-dir",
            Severity::Error,
            format!("{} is not writable: {e}", l.path.display()),
        )
        .fix(format!(
            "create {} (mode 0755, owned by root) on a writable file system; containers' \
             logs are written there",
            l.path.display()
        )),
    }
}

#[cfg(test)]
mod tests;
