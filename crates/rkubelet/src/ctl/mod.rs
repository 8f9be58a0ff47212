//! The operator commands of the `rkubelet` binary (`rkubelet get|describe|logs|doctor|
//! completion|man`); `rkubelet` without one of them is the kubelet, with upstream's flags.
//! Owns the subcommand parser ([`Ctl`]) and the commands that ask the running kubelet over its
//! root-only local socket (`get pods|events|node`, `describe pod`); receives the command
//! line; emits kubectl-shaped text on stdout, errors on stderr, exit 0 on success and 1 on
//! error. `logs` and `doctor` live in their own modules and also work without a kubelet.

pub mod client;
pub mod describe;
pub mod doctor;
pub mod logs;
pub mod printers;
pub mod tabwriter;
pub mod terminal;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use chrono::Utc;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Pod;
use kubelet::server::operator::{EventReport, NodeReport, PodReport};

use self::client::{Client, ClientError, segment};
use self::printers::{PodColumns, PodRow, pod_row};

/// The first arguments that select an operator command instead of the kubelet.
pub const COMMANDS: &[&str] = &["get", "describe", "logs", "doctor", "completion", "man"];

/// Whether the command line (`argv[1]`) names an operator command.
pub fn is_ctl_command(first: Option<&OsString>) -> bool {
    first
        .and_then(|a| a.to_str())
        .is_some_and(|a| COMMANDS.contains(&a))
}

/// Operator commands.
#[derive(Debug, Parser)]
#[command(
    name = "rkubelet",
    about = "Operator commands: look at the pods, events and node of the kubelet running on this node",
    subcommand_required = true,
    disable_version_flag = true
)]
pub struct Ctl {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Display pods, events or the node, as `kubectl get` does.
    Get(GetArgs),
    /// Show a pod in detail, as `kubectl describe pod` does, with the kubelet's own view.
    Describe(DescribeArgs),
    /// Print a container's logs (works when the kubelet is down).
    Logs(logs::LogsArgs),
    /// Check the node the way an operator would.
    Doctor(doctor::DoctorArgs),
    /// Print a shell completion script (the kubelet's flags and these commands).
    Completion(CompletionArgs),
    /// Print the man page (roff).
    Man,
}

/// How every command finds the running kubelet.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// The kubelet's root directory (its `--root-dir`); the socket is `<root-dir>/rkubelet/rkubelet.sock`.
    #[arg(
        long = "root-dir",
        value_name = "DIR",
        default_value = "/var/lib/kubelet"
    )]
    pub root_dir: PathBuf,
    /// The kubelet's local socket (overrides `--root-dir`).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

impl Target {
    pub fn socket_path(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(|| kubelet::server::local::socket_path(&self.root_dir))
    }

    fn client(&self) -> Client {
        Client::new(&self.socket_path())
    }
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(subcommand)]
    pub what: GetWhat,
}

#[derive(Debug, Subcommand)]
pub enum GetWhat {
    /// The pods the kubelet runs.
    #[command(visible_aliases = ["pod", "po"])]
    Pods(GetPodsArgs),
    /// The kubelet's recent events (kept in memory: the last 1000).
    #[command(visible_aliases = ["event", "ev"])]
    Events(GetEventsArgs),
    /// This node as the kubelet sees it.
    #[command(visible_aliases = ["nodes", "no"])]
    Node(GetNodeArgs),
}

/// `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Wide,
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub struct GetPodsArgs {
    /// Only this pod.
    pub name: Option<String>,
    /// The namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// After listing, print rows again as pods change.
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[command(flatten)]
    pub target: Target,
}

#[derive(Debug, Args)]
pub struct GetEventsArgs {
    /// The namespace (node events are in `default`).
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format (`yaml` or `json`).
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// After listing, print new events as they happen.
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[command(flatten)]
    pub target: Target,
}

#[derive(Debug, Args)]
pub struct GetNodeArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    #[command(flatten)]
    pub target: Target,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    #[command(subcommand)]
    pub what: DescribeWhat,
}

#[derive(Debug, Subcommand)]
pub enum DescribeWhat {
    /// A pod: spec, containers, conditions, volumes, events and the kubelet's worker.
    #[command(visible_aliases = ["pods", "po"])]
    Pod(DescribePodArgs),
}

#[derive(Debug, Args)]
pub struct DescribePodArgs {
    pub name: String,
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    #[command(flatten)]
    pub target: Target,
}

#[derive(Debug, Args)]
pub struct CompletionArgs {
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// How often `-w` asks the kubelet again.
const WATCH_PERIOD: Duration = Duration::from_secs(1);

/// A command's failure: printed as kubectl does (`error: …`), exit 1.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("Error from server (NotFound): pods \"{0}\" not found")]
    PodNotFound(String),
    #[error("encoding the output: {0}")]
    Encode(String),
    #[error("writing the output: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs an operator command line (`args[0]` is the program).
pub fn main(args: Vec<OsString>) -> ExitCode {
    let ctl = match Ctl::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run(ctl.command))
}

async fn run(command: Command) -> ExitCode {
    let result = match command {
        Command::Logs(args) => return logs::run(args).await,
        Command::Doctor(args) => return doctor::run(args).await,
        Command::Completion(args) => completion(args.shell),
        Command::Man => man(),
        Command::Get(GetArgs {
            what: GetWhat::Pods(args),
        }) => get_pods(&args).await,
        Command::Get(GetArgs {
            what: GetWhat::Events(args),
        }) => get_events(&args).await,
        Command::Get(GetArgs {
            what: GetWhat::Node(args),
        }) => get_node(&args).await,
        Command::Describe(DescribeArgs {
            what: DescribeWhat::Pod(args),
        }) => describe_pod(&args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A server error may quote what a pod wrote.
            eprintln!("error: {}", terminal::escape(&e.to_string()));
            ExitCode::from(1)
        }
    }
}

/// The whole CLI: the kubelet's flags and the operator commands (completion and man page).
pub fn full_command() -> clap::Command {
    let ctl = Ctl::command();
    crate::cli::Flags::command()
        .subcommands(ctl.get_subcommands().cloned())
        .args_conflicts_with_subcommands(true)
}

fn completion(shell: Shell) -> Result<(), CtlError> {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut full_command(), "rkubelet", &mut out);
    std::io::stdout().write_all(&out)?;
    Ok(())
}

fn man() -> Result<(), CtlError> {
    let mut out = Vec::new();
    clap_mangen::Man::new(full_command()).render(&mut out)?;
    std::io::stdout().write_all(&out)?;
    Ok(())
}

fn print(text: &str) -> Result<(), CtlError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn encode<T: serde::Serialize>(v: &T, output: Output) -> Result<String, CtlError> {
    match output {
        // serde_json escapes C0 controls; C1 controls (8-bit CSI, OSC) can only be inside
        // strings, where `\u009b` means the same character.
        Output::Json => serde_json::to_string_pretty(v)
            .map(|s| terminal::escape_c1_json(&s) + "\n")
            .map_err(|e| CtlError::Encode(e.to_string())),
        Output::Yaml | Output::Wide => {
            kubelet::yaml::to_string(v).map_err(|e| CtlError::Encode(e.to_string()))
        }
    }
}

/// The pods `get pods` shows, sorted as kubectl sorts a list (namespace, name).
async fn fetch_pods(client: &Client, args: &GetPodsArgs) -> Result<Vec<Pod>, CtlError> {
    #[derive(serde::Deserialize)]
    struct List {
        #[serde(default)]
        items: Vec<Pod>,
    }
    let list: List = client.get_json("/pods").await?;
    let mut pods: Vec<Pod> = list
        .items
        .into_iter()
        .filter(|p| args.all_namespaces || p.metadata.namespace.as_deref() == Some(&args.namespace))
        .filter(|p| {
            args.name
                .as_deref()
                .is_none_or(|n| p.metadata.name.as_deref() == Some(n))
        })
        .collect();
    pods.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    Ok(pods)
}

/// What makes a watched row worth printing again: READY, STATUS, the restart count, IP.
type RowKey = (String, String, String, String);

/// What makes a watched row worth printing again (not its age).
fn row_key(r: &PodRow) -> RowKey {
    let restarts = r.restarts.split(' ').next().unwrap_or_default().to_owned();
    (r.ready.clone(), r.status.clone(), restarts, r.ip.clone())
}

async fn get_pods(args: &GetPodsArgs) -> Result<(), CtlError> {
    let client = args.target.client();
    let pods = fetch_pods(&client, args).await?;
    let cols = PodColumns {
        all_namespaces: args.all_namespaces,
        wide: args.output == Some(Output::Wide),
    };
    if let Some(o @ (Output::Json | Output::Yaml)) = args.output {
        let text = match (&args.name, pods.first()) {
            (Some(_), Some(p)) => encode(p, o)?,
            (Some(n), None) => return Err(CtlError::PodNotFound(n.clone())),
            (None, _) => encode(
                &serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": pods}),
                o,
            )?,
        };
        return print(&text);
    }
    let now = Utc::now();
    let rows: Vec<PodRow> = pods.iter().map(|p| pod_row(p, now)).collect();
    match printers::pods_table(&rows, cols, &args.namespace) {
        Ok(t) => print(&t)?,
        Err(_) if args.name.is_some() => {
            return Err(CtlError::PodNotFound(args.name.clone().unwrap_or_default()));
        }
        Err(none) if !args.watch => {
            eprintln!("{none}");
            return Ok(());
        }
        // Watching an empty list: the header comes with the first row, as kubectl does.
        Err(_) => {}
    }
    if !args.watch {
        return Ok(());
    }
    let mut printed_header = !rows.is_empty();
    let mut seen: BTreeMap<(String, String), (PodRow, RowKey)> = rows
        .into_iter()
        .map(|r| {
            (
                (r.namespace.clone(), r.name.clone()),
                (r.clone(), row_key(&r)),
            )
        })
        .collect();
    loop {
        tokio::time::sleep(WATCH_PERIOD).await;
        let pods = fetch_pods(&client, args).await?;
        let now = Utc::now();
        let mut current = BTreeMap::new();
        for p in &pods {
            let r = pod_row(p, now);
            current.insert((r.namespace.clone(), r.name.clone()), r);
        }
        let mut out = String::new();
        for (k, r) in &current {
            let key = row_key(r);
            if seen.get(k).is_none_or(|(_, old)| *old != key) {
                out.push_str(&watch_line(r, cols, &mut printed_header));
                seen.insert(k.clone(), (r.clone(), key));
            }
        }
        // Gone: kubectl prints the deleted object's last row once more.
        let gone: Vec<_> = seen
            .keys()
            .filter(|k| !current.contains_key(*k))
            .cloned()
            .collect();
        for k in gone {
            if let Some((r, _)) = seen.remove(&k) {
                out.push_str(&watch_line(&r, cols, &mut printed_header));
            }
        }
        if !out.is_empty() {
            print(&out)?;
        }
    }
}

/// One row printed while watching (kubectl flushes its writer per object, so each row is
/// aligned on its own; the header comes with the first).
fn watch_line(r: &PodRow, cols: PodColumns, printed_header: &mut bool) -> String {
    let mut w = tabwriter::TabWriter::table();
    if !*printed_header {
        w.write(&printers::pods_header(cols));
        *printed_header = true;
    }
    w.write(&printers::pods_line(r, cols));
    w.flush()
}

async fn get_events(args: &GetEventsArgs) -> Result<(), CtlError> {
    let client = args.target.client();
    let report: EventReport = client.get_json("/debug/rkubelet/events").await?;
    let ns = (!args.all_namespaces).then_some(args.namespace.as_str());
    if let Some(o @ (Output::Json | Output::Yaml)) = args.output {
        let items: Vec<_> = report
            .items
            .iter()
            .filter(|e| printers::event_in(e, ns))
            .collect();
        return print(&encode(&serde_json::json!({"items": items}), o)?);
    }
    let now = Utc::now();
    let mut printed_header = false;
    match printers::events_table(&report.items, ns, now) {
        Ok(t) => {
            print(&t)?;
            printed_header = true;
        }
        Err(none) if !args.watch => {
            eprintln!("{none}");
            return Ok(());
        }
        Err(_) => {}
    }
    if !args.watch {
        return Ok(());
    }
    let mut last_seq = report.items.iter().map(|e| e.seq).max().unwrap_or(0);
    loop {
        tokio::time::sleep(WATCH_PERIOD).await;
        let report: EventReport = client.get_json("/debug/rkubelet/events").await?;
        let now = Utc::now();
        let mut out = String::new();
        for e in report.items.iter().filter(|e| e.seq > last_seq) {
            if printers::event_in(e, ns) {
                let mut w = tabwriter::TabWriter::table();
                if !printed_header {
                    w.write(printers::events_header(ns.is_none()));
                    printed_header = true;
                }
                w.write(&printers::events_line(e, ns.is_none(), now));
                out.push_str(&w.flush());
            }
        }
        last_seq = report.items.iter().map(|e| e.seq).max().unwrap_or(last_seq);
        if !out.is_empty() {
            print(&out)?;
        }
    }
}

async fn get_node(args: &GetNodeArgs) -> Result<(), CtlError> {
    let report: NodeReport = args
        .target
        .client()
        .get_json("/debug/rkubelet/node")
        .await?;
    match args.output {
        Some(o @ (Output::Json | Output::Yaml)) => print(&encode(&report, o)?),
        o => print(&printers::node_text(
            &report,
            o == Some(Output::Wide),
            Utc::now(),
        )),
    }
}

async fn describe_pod(args: &DescribePodArgs) -> Result<(), CtlError> {
    let path = format!(
        "/debug/rkubelet/pods/{}/{}",
        segment(&args.namespace),
        segment(&args.name)
    );
    let report: PodReport = match args.target.client().get_json(&path).await {
        Ok(r) => r,
        Err(ClientError::Status { status: 404, .. }) => {
            return Err(CtlError::PodNotFound(args.name.clone()));
        }
        Err(e) => return Err(e.into()),
    };
    print(&describe::describe_pod(&report, Utc::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_output_escape_control_characters() {
        let msg = "a\x1b[2J\x1b]52;c;eA==\x07\rb\u{9b}0m";
        let v = serde_json::json!({"status": {"message": msg}});
        for o in [Output::Json, Output::Yaml] {
            let text = encode(&v, o).unwrap();
            assert!(
                !text.chars().any(|c| c.is_control() && c != '\n'),
                "{o:?}: {text:?}"
            );
            let back: serde_json::Value = match o {
                Output::Json => serde_json::from_str(&text).unwrap(),
                _ => kubelet::yaml::from_str(&text).unwrap(),
            };
            assert_eq!(back, v, "{o:?}: {text}");
        }
    }

    #[test]
    fn cli_definitions_are_consistent() {
        Ctl::command().debug_assert();
        full_command().debug_assert();
    }

    /// Only an operator command as the first argument leaves the kubelet's flag parsing.
    #[test]
    fn dispatch_is_by_the_first_argument_only() {
        let arg = |s: &str| Some(OsString::from(s));
        for c in COMMANDS {
            assert!(is_ctl_command(arg(c).as_ref()), "{c}");
        }
        for kubelet in [
            "--config",
            "--root-dir",
            "-v",
            "--help",
            "--version",
            "pods",
            "",
        ] {
            assert!(!is_ctl_command(arg(kubelet).as_ref()), "{kubelet}");
        }
        assert!(!is_ctl_command(None));
        // The kubelet's flags keep parsing as before.
        let flags = crate::cli::Flags::try_parse_from(["rkubelet", "--root-dir", "/x", "--v", "2"])
            .unwrap();
        assert_eq!(flags.root_dir, PathBuf::from("/x"));
        // An operator command's own flags.
        let ctl = Ctl::try_parse_from(["rkubelet", "get", "po", "-A", "-o", "wide", "-w"]).unwrap();
        let Command::Get(GetArgs {
            what: GetWhat::Pods(p),
        }) = ctl.command
        else {
            panic!("not get pods");
        };
        assert!(p.all_namespaces && p.watch && p.output == Some(Output::Wide));
        assert_eq!(
            p.target.socket_path(),
            PathBuf::from("/var/lib/kubelet/rkubelet/rkubelet.sock")
        );
    }
}
