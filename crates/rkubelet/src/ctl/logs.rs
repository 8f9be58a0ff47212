//! Placeholder for `rkubelet logs` (built by the `doctor` helper's branch, which replaces this
//! file at merge): the agreed interface only.

use std::process::ExitCode;

/// `rkubelet logs` arguments (placeholder).
#[derive(clap::Args, Debug)]
pub struct LogsArgs {}

/// Placeholder: not built on this branch.
pub async fn run(args: LogsArgs) -> ExitCode {
    let _ = args;
    eprintln!("error: rkubelet logs is not built on this branch");
    ExitCode::from(1)
}
