//! `rkubelet logs POD`: a container's log read straight from the pod log directory, with the
//! semantics of the kubelet's `/containerLogs` (the same reader, the same options), so it works
//! while the kubelet is down. Receives kubectl-style flags; finds the file with
//! `kubelet::logs::pod_dir` (no symlink followed, names checked), streams it to stdout. With
//! `-f` the CRI runtime, when it answers, tells when the container stops; otherwise it follows
//! until interrupted.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use kubelet::config::{load_config_upstream, parse_go_duration};
use kubelet::kuberuntime::labels::{
    CONTAINER_NAME_LABEL, CONTAINER_RESTART_COUNT_ANNOTATION, POD_UID_LABEL,
};
use kubelet::logs::pod_dir::{PodLog, PodLogQuery, find_pod_log};
use kubelet::server::logs::{LogOptions, WriteOutput, read_logs_blocking};
use rkubelet_cri::api::{ContainerFilter, ContainerState, ContainerStateValue};
use rkubelet_cri::{RemoteRuntime, RuntimeService, api};

const DEFAULT_CONFIG: &str = "/var/lib/kubelet/config.yaml";
const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";
const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
/// Bound of each question to the runtime while following.
const RUNTIME_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// The pod: its name, or a static pod's manifest name (also accepted as `<name>-<node>`).
    pub pod: String,
    /// The pod's namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// The container; required when the pod has more than one.
    #[arg(short = 'c', long)]
    pub container: Option<String>,
    /// Keep streaming new lines (across log rotation) until the container stops.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The previous (terminated) instance of the container.
    #[arg(short = 'p', long)]
    pub previous: bool,
    /// Lines of recent log to show; -1 shows all.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub tail: i64,
    /// Only lines newer than this duration (e.g. 5s, 2m, 3h).
    #[arg(long)]
    pub since: Option<String>,
    /// Only lines after this RFC3339 time.
    #[arg(long = "since-time")]
    pub since_time: Option<String>,
    /// Prefix each line with its RFC3339Nano timestamp.
    #[arg(long)]
    pub timestamps: bool,
    /// Stop after this many bytes.
    #[arg(long = "limit-bytes")]
    pub limit_bytes: Option<i64>,
    /// The kubelet configuration file (read for podLogsDir and containerRuntimeEndpoint;
    /// default /var/lib/kubelet/config.yaml when it exists).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The pod log directory (overrides the configuration's podLogsDir; default /var/log/pods).
    #[arg(long = "pod-logs-dir")]
    pub pod_logs_dir: Option<PathBuf>,
    /// The CRI endpoint asked, with -f, whether the container still runs.
    #[arg(long = "container-runtime-endpoint")]
    pub container_runtime_endpoint: Option<String>,
    /// The node's name, for static pods (default: the hostname, lower-cased).
    #[arg(long = "hostname-override")]
    pub hostname_override: Option<String>,
}

/// What the flags ask, or the first flag that is wrong.
fn log_options(a: &LogsArgs, now: chrono::DateTime<chrono::Utc>) -> Result<LogOptions, String> {
    if a.since.is_some() && a.since_time.is_some() {
        return Err("at most one of --since or --since-time may be specified".into());
    }
    let since = match (&a.since, &a.since_time) {
        (Some(d), _) => {
            let d = parse_go_duration(d)
                .map_err(|e| format!("invalid --since {d:?}: {e}"))?
                .as_std();
            if d.is_zero() {
                return Err("--since must be greater than 0".into());
            }
            // As kubectl: whole seconds, rounded up. Go durations stop at ~292 years (a
            // longer one is refused above as out of range); should the subtraction still not
            // fit a date, clamp to the earliest one (every line is newer).
            let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
            let back = i64::try_from(secs)
                .ok()
                .and_then(chrono::TimeDelta::try_seconds)
                .and_then(|delta| now.checked_sub_signed(delta));
            Some(back.unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC))
        }
        (None, Some(t)) => Some(
            chrono::DateTime::parse_from_rfc3339(t)
                .map_err(|e| format!("invalid --since-time {t:?} (expected RFC3339): {e}"))?
                .with_timezone(&chrono::Utc),
        ),
        (None, None) => None,
    };
    let tail = match a.tail {
        -1 => None,
        n if n < -1 => return Err("--tail must be greater than or equal to -1".into()),
        n => Some(usize::try_from(n).unwrap_or(usize::MAX)),
    };
    let limit_bytes = match a.limit_bytes {
        None => None,
        Some(n) if n < 1 => return Err("--limit-bytes must be greater than 0".into()),
        Some(n) => u64::try_from(n).ok(),
    };
    Ok(LogOptions {
        since,
        tail,
        limit_bytes,
        timestamps: a.timestamps,
        follow: a.follow && !a.previous,
    })
}

/// podLogsDir and containerRuntimeEndpoint: flags, else the configuration file, else defaults.
fn locations(a: &LogsArgs) -> Result<(PathBuf, String), String> {
    let config = a
        .config
        .clone()
        .or_else(|| Some(PathBuf::from(DEFAULT_CONFIG)).filter(|p| p.exists()));
    let (mut dir, mut endpoint) = (None, None);
    if let Some(path) = &config {
        match load_config_upstream(Some(path), None) {
            Ok(l) => {
                dir = Some(l.config.pod_logs_dir).filter(|d| !d.is_empty());
                endpoint = Some(l.config.container_runtime_endpoint).filter(|e| !e.is_empty());
            }
            // An explicit file must load; the default one is only a hint.
            Err(e) if a.config.is_some() => return Err(e.to_string()),
            Err(e) => eprintln!("warning: ignoring {}: {e}", path.display()),
        }
    }
    let dir = a
        .pod_logs_dir
        .clone()
        .or(dir.map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_POD_LOGS_DIR));
    let endpoint = a
        .container_runtime_endpoint
        .clone()
        .or(endpoint)
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
    Ok((dir, endpoint))
}

fn node_name(a: &LogsArgs) -> Option<String> {
    a.hostname_override
        .clone()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_lowercase())
}

/// Whether the container instance whose log is read still runs, per the runtime (a runtime
/// that does not answer in time counts as "stopped", as the kubelet's reader does).
async fn container_running(rt: &RemoteRuntime, log: &Instance) -> bool {
    let filter = ContainerFilter {
        state: Some(ContainerStateValue {
            state: ContainerState::ContainerRunning as i32,
        }),
        label_selector: [
            (POD_UID_LABEL.to_owned(), log.uid.clone()),
            (CONTAINER_NAME_LABEL.to_owned(), log.container.clone()),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let req = api::ListContainersRequest {
        filter: Some(filter),
    };
    match tokio::time::timeout(RUNTIME_TIMEOUT, rt.list_containers(req)).await {
        Ok(Ok(resp)) => resp.containers.iter().any(|c| {
            c.annotations
                .get(CONTAINER_RESTART_COUNT_ANNOTATION)
                .is_none_or(|n| n.parse::<u32>().ok() == Some(log.restart))
        }),
        // A runtime that stopped answering: the container counts as stopped.
        _ => false,
    }
}

/// The container instance whose log is followed.
struct Instance {
    uid: String,
    container: String,
    restart: u32,
}

/// The reader's "still running?" callback for `-f`.
async fn running_check(log: &PodLog, endpoint: &str) -> Box<dyn FnMut() -> bool + Send> {
    let key = Instance {
        uid: log.uid.clone(),
        container: log.container.clone(),
        restart: log.restart,
    };
    match RemoteRuntime::connect(endpoint, RUNTIME_TIMEOUT).await {
        Ok(rt) => {
            let handle = tokio::runtime::Handle::current();
            Box::new(move || handle.block_on(container_running(&rt, &key)))
        }
        Err(e) => {
            eprintln!(
                "warning: cannot ask the runtime at {endpoint} whether container {:?} runs \
                 ({e}); following until interrupted",
                log.container
            );
            Box::new(|| true)
        }
    }
}

pub async fn run(args: LogsArgs) -> ExitCode {
    let fail = |msg: &str| {
        eprintln!("error: {}", super::terminal::escape(msg));
        ExitCode::from(1)
    };
    let opts = match log_options(&args, chrono::Utc::now()) {
        Ok(o) => o,
        Err(e) => return fail(&e),
    };
    let (dir, endpoint) = match locations(&args) {
        Ok(l) => l,
        Err(e) => return fail(&e),
    };
    let query = PodLogQuery {
        namespace: args.namespace.clone(),
        pod: args.pod.clone(),
        container: args.container.clone(),
        previous: args.previous,
        node_name: node_name(&args),
    };
    let log = match find_pod_log(&dir, &query) {
        Ok(l) => l,
        Err(e) => return fail(&e.to_string()),
    };
    let mut running: Box<dyn FnMut() -> bool + Send> = if opts.follow {
        running_check(&log, &endpoint).await
    } else {
        Box::new(|| false)
    };
    let read = tokio::task::spawn_blocking(move || {
        let mut out = WriteOutput(std::io::BufWriter::new(std::io::stdout()));
        let result = read_logs_blocking(&log.reader_path(), &opts, &mut out, &mut *running);
        let _ = out.0.flush();
        result.map_err(|e| log.describe(&e.to_string()))
    })
    .await;
    match read {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => fail(&e),
        Err(e) => fail(&format!("the log reader failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: LogsArgs,
    }

    fn opts(argv: &[&str]) -> Result<LogOptions, String> {
        let a = Cmd::try_parse_from(std::iter::once("logs").chain(argv.iter().copied()))
            .unwrap()
            .args;
        let now = chrono::DateTime::parse_from_rfc3339("2024-01-01T00:10:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        log_options(&a, now)
    }

    #[test]
    fn flags_map_to_the_readers_options_as_the_query_does() {
        let o = opts(&[
            "p",
            "--tail",
            "3",
            "--limit-bytes",
            "10",
            "--timestamps",
            "-f",
        ])
        .unwrap();
        assert_eq!(o.tail, Some(3));
        assert_eq!(o.limit_bytes, Some(10));
        assert!(o.timestamps && o.follow);
        assert_eq!(opts(&["p"]).unwrap(), LogOptions::default());
        let o = opts(&["p", "--since", "1m30s"]).unwrap();
        assert_eq!(o.since.unwrap().to_rfc3339(), "2024-01-01T00:08:30+00:00");
        let o = opts(&["p", "--since", "1500ms"]).unwrap();
        assert_eq!(o.since.unwrap().to_rfc3339(), "2024-01-01T00:09:58+00:00");
        let o = opts(&["p", "--since-time", "2024-01-01T00:05:00Z"]).unwrap();
        assert_eq!(o.since.unwrap().to_rfc3339(), "2024-01-01T00:05:00+00:00");
        // -p never follows: a terminated container writes nothing more.
        assert!(!opts(&["p", "-p", "-f"]).unwrap().follow);
    }

    #[test]
    fn bad_flag_values_are_named() {
        let err = |argv: &[&str]| opts(argv).unwrap_err();
        assert!(
            err(&["p", "--since", "5s", "--since-time", "2024-01-01T00:00:00Z"])
                .contains("at most one of --since or --since-time")
        );
        assert!(err(&["p", "--since", "soon"]).starts_with("invalid --since \"soon\""));
        // The longest Go duration reaches back ~292 years; a longer one is refused as
        // kubectl's duration parser refuses it; neither panics.
        let o = opts(&["p", "--since", "2562047h47m16.854775807s"]).unwrap();
        assert_eq!(o.since.unwrap().to_rfc3339(), "1731-09-22T00:22:43+00:00");
        assert!(
            err(&["p", "--since", "2562048h"]).starts_with("invalid --since \"2562048h\""),
            "{}",
            err(&["p", "--since", "2562048h"])
        );
        assert!(err(&["p", "--since", "99999999999999999999999s"]).starts_with("invalid --since"));
        assert!(err(&["p", "--since", "0s"]).contains("--since must be greater than 0"));
        assert!(err(&["p", "--since-time", "yesterday"]).starts_with("invalid --since-time"));
        assert!(err(&["p", "--tail", "-2"]).contains("--tail must be greater than or equal to -1"));
        assert!(err(&["p", "--limit-bytes", "0"]).contains("--limit-bytes must be greater than 0"));
    }
}
