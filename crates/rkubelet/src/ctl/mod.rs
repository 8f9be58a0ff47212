//! Operator subcommands of the `rkubelet` binary (TEMPORARY on the `doctor` branch: the
//! subcommand dispatch of issue 19 replaces this file at merge; `logs` and `doctor` keep their
//! modules and interfaces). Receives argv; emits the subcommand's exit code, or `None` when
//! argv names no subcommand (then the binary is the kubelet).

pub mod doctor;
pub mod logs;

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "rkubelet")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Print a container's logs from the pod log directory (works with the kubelet down).
    Logs(logs::LogsArgs),
    /// Check the node and print each problem with its fix.
    Doctor(doctor::DoctorArgs),
}

/// Runs `rkubelet logs …` / `rkubelet doctor …`; `None` for anything else.
pub fn dispatch() -> Option<ExitCode> {
    let first = std::env::args_os().nth(1)?;
    if first != "logs" && first != "doctor" {
        return None;
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return Some(ExitCode::from(1));
        }
    };
    Some(runtime.block_on(async {
        match cli.command {
            Command::Logs(a) => logs::run(a).await,
            Command::Doctor(a) => doctor::run(a).await,
        }
    }))
}
