//! `process_*` metrics of the kubelet's own process (client_golang's process collector):
//! CPU seconds, resident and virtual memory, open and maximum file descriptors, start time.
//! Owns nothing but the procfs root it reads; receives scrapes; emits the families computed from
//! `/proc/self/{stat,status,limits,fd}` and `/proc/stat` at scrape time (no fork, no cache).
//! The parsers are pure functions; the collector reads a procfs root (a temp dir in tests).

use std::path::{Path, PathBuf};

use crate::metrics::registry::{Collector, Exposition, MetricKind};

/// `/proc` reports CPU and start times in USER_HZ ticks, which the Linux ABI fixes at 100.
const USER_HZ: f64 = 100.0;

/// What `/proc/self/stat` gives us (fields 14, 15 and 22).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StatFields {
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub start_ticks: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may contain spaces and parentheses,
/// so fields are counted from after its last `)`.
pub fn parse_stat(content: &str) -> Option<StatFields> {
    let rest = &content[content.rfind(')')? + 1..];
    // rest starts at field 3 (state).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(StatFields {
        utime_ticks: field(14)?,
        stime_ticks: field(15)?,
        start_ticks: field(22)?,
    })
}

/// A `kB` line of `/proc/<pid>/status` (e.g. `VmRSS`), in bytes.
pub fn parse_status_kb(content: &str, key: &str) -> Option<f64> {
    content.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        if k.trim() != key {
            return None;
        }
        let kb: f64 = v.split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024.0)
    })
}

/// The soft limit of a `/proc/<pid>/limits` row (e.g. `Max open files`); `unlimited` is -1,
/// as client_golang reports it.
pub fn parse_limit(content: &str, row: &str) -> Option<f64> {
    let line = content.lines().find(|l| l.starts_with(row))?;
    let soft = line[row.len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        return Some(-1.0);
    }
    soft.parse().ok()
}

/// `btime` (boot time, seconds since the epoch) from `/proc/stat`.
pub fn parse_btime(content: &str) -> Option<f64> {
    content
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The process collector, reading `<proc_root>/self/...` and `<proc_root>/stat`.
#[derive(Debug, Clone)]
pub struct ProcessCollector {
    proc_root: PathBuf,
}

impl Default for ProcessCollector {
    fn default() -> Self {
        Self::new("/proc")
    }
}

impl ProcessCollector {
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self {
            proc_root: proc_root.into(),
        }
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.proc_root.join(rel)).ok()
    }

    /// `process_start_time_seconds`, if procfs can tell.
    pub fn start_time_seconds(&self) -> Option<f64> {
        let stat = parse_stat(&self.read("self/stat")?)?;
        let btime = parse_btime(&self.read("stat")?)?;
        Some(btime + stat.start_ticks as f64 / USER_HZ)
    }

    /// Writes `process_start_time_seconds` only (what `/metrics/probes` carries, as
    /// component-base's `RegisterProcessStartTime`).
    pub fn collect_start_time(&self, out: &mut Exposition, help: &str) {
        if let Some(v) = self.start_time_seconds() {
            out.family("process_start_time_seconds", help, MetricKind::Gauge)
                .sample("", &[], v);
        }
    }
}

fn count_entries(dir: &Path) -> Option<f64> {
    Some(std::fs::read_dir(dir).ok()?.count() as f64)
}

impl Collector for ProcessCollector {
    fn collect(&self, out: &mut Exposition) {
        let mut gauge = |name: &str, help: &str, v: Option<f64>| {
            if let Some(v) = v {
                out.family(name, help, MetricKind::Gauge).sample("", &[], v);
            }
        };
        let stat = self.read("self/stat").and_then(|s| parse_stat(&s));
        let status = self.read("self/status");
        let limits = self.read("self/limits");
        gauge(
            "process_open_fds",
            "Number of open file descriptors.",
            count_entries(&self.proc_root.join("self/fd")),
        );
        gauge(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            limits
                .as_deref()
                .and_then(|l| parse_limit(l, "Max open files")),
        );
        gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            status.as_deref().and_then(|s| parse_status_kb(s, "VmRSS")),
        );
        gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            status.as_deref().and_then(|s| parse_status_kb(s, "VmSize")),
        );
        gauge(
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            limits
                .as_deref()
                .and_then(|l| parse_limit(l, "Max address space")),
        );
        gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            self.start_time_seconds(),
        );
        if let Some(st) = stat {
            out.family(
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
                MetricKind::Counter,
            )
            .sample("", &[], (st.utime_ticks + st.stime_ticks) as f64 / USER_HZ);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (rk (weird) name) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 9 0 123456 987654321 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn stat_fields_after_the_command_name() {
        assert_eq!(
            parse_stat(STAT),
            Some(StatFields {
                utime_ticks: 250,
                stime_ticks: 75,
                start_ticks: 123_456,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn status_limits_and_btime() {
        let status = "Name:\trkubelet\nVmSize:\t  123456 kB\nVmRSS:\t    2048 kB\n";
        assert_eq!(parse_status_kb(status, "VmRSS"), Some(2048.0 * 1024.0));
        assert_eq!(parse_status_kb(status, "VmSize"), Some(123_456.0 * 1024.0));
        assert_eq!(parse_status_kb(status, "VmSwap"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max address space         unlimited            unlimited            bytes     \n\
                      Max open files            1048576              1048576              files     \n";
        assert_eq!(parse_limit(limits, "Max open files"), Some(1_048_576.0));
        assert_eq!(parse_limit(limits, "Max address space"), Some(-1.0));
        assert_eq!(parse_limit(limits, "Max processes"), None);
        assert_eq!(
            parse_btime("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000.0)
        );
    }

    #[test]
    fn collector_reads_a_fake_procfs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("self/fd")).unwrap();
        for fd in ["0", "1", "2"] {
            std::fs::write(root.join("self/fd").join(fd), "").unwrap();
        }
        std::fs::write(root.join("self/stat"), STAT).unwrap();
        std::fs::write(
            root.join("self/status"),
            "VmSize:\t1000 kB\nVmRSS:\t10 kB\n",
        )
        .unwrap();
        std::fs::write(
            root.join("self/limits"),
            "Max address space         unlimited            unlimited            bytes\n\
             Max open files            1024                 4096                 files\n",
        )
        .unwrap();
        std::fs::write(root.join("stat"), "btime 1700000000\n").unwrap();
        let mut out = Exposition::new();
        ProcessCollector::new(root).collect(&mut out);
        let text = out.finish();
        for line in [
            "process_cpu_seconds_total 3.25\n",
            "process_open_fds 3\n",
            "process_max_fds 1024\n",
            "process_resident_memory_bytes 10240\n",
            "process_virtual_memory_bytes 1.024e+06\n",
            "process_virtual_memory_max_bytes -1\n",
            "process_start_time_seconds 1.70000123456e+09\n",
            "# TYPE process_cpu_seconds_total counter\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn collector_on_the_real_procfs_reports_this_process() {
        let mut out = Exposition::new();
        ProcessCollector::default().collect(&mut out);
        let text = out.finish();
        for name in [
            "process_cpu_seconds_total ",
            "process_open_fds ",
            "process_max_fds ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_start_time_seconds ",
        ] {
            let line = text
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("no {name} in\n{text}"));
            let v: f64 = line[name.len()..].parse().unwrap();
            assert!(v >= 0.0, "{line}");
        }
        let start = ProcessCollector::default().start_time_seconds().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            start <= now + 1.0 && start > now - 86_400.0 * 365.0,
            "{start}"
        );
    }
}
