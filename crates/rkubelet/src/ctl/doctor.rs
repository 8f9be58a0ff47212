//! `rkubelet doctor`: checks the node as an operator would and prints each finding with its
//! fix. Receives where to look (flags, defaulting to the kubelet's); gathers the facts with
//! `kubelet::doctor::gather`, judges them with `kubelet::doctor::check`, prints text or JSON.
//! Exit code: 0 nothing wrong, 1 warnings, 2 errors.

use std::path::PathBuf;
use std::process::ExitCode;

use kubelet::config::parse_go_duration;
use kubelet::doctor::gather::{GatherOptions, gather};
use kubelet::doctor::{check, exit_code, render_json, render_text};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
}

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// The kubelet configuration file (default /var/lib/kubelet/config.yaml when it exists;
    /// otherwise the kubelet's defaults are checked against).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The CRI endpoint (default: the configuration's containerRuntimeEndpoint, else
    /// unix:///run/containerd/containerd.sock).
    #[arg(long = "container-runtime-endpoint")]
    pub container_runtime_endpoint: Option<String>,
    /// The kubeconfig of the kubelet, for the clock check (default
    /// /etc/kubernetes/kubelet.conf when it exists).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubelet's root directory (certificates in <root-dir>/pki, nodefs headroom).
    #[arg(long = "root-dir", default_value = "/var/lib/kubelet")]
    pub root_dir: PathBuf,
    /// containerd's configuration file, read for SystemdCgroup when the runtime does not tell
    /// its cgroup driver.
    #[arg(long = "containerd-config")]
    pub containerd_config: Option<PathBuf>,
    /// Bound of each call to the runtime and the API server.
    #[arg(long, default_value = "5s")]
    pub timeout: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
}

pub async fn run(args: DoctorArgs) -> ExitCode {
    let timeout = match parse_go_duration(&args.timeout).map(|d| d.as_std()) {
        Ok(t) if !t.is_zero() => t,
        Ok(_) => {
            eprintln!("error: --timeout must be greater than 0");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: invalid --timeout {:?}: {e}", args.timeout);
            return ExitCode::from(2);
        }
    };
    let facts = gather(&GatherOptions {
        config: args.config,
        endpoint: args.container_runtime_endpoint,
        kubeconfig: args.kubeconfig,
        root_dir: args.root_dir,
        containerd_config: args.containerd_config,
        timeout,
    })
    .await;
    let findings = check(&facts);
    let text = match args.output {
        Output::Text => render_text(&findings),
        Output::Json => render_json(&findings),
    };
    print!("{text}");
    ExitCode::from(exit_code(&findings))
}
