//! Placeholder for `rkubelet doctor` (built by the `doctor` helper's branch, which replaces this
//! file at merge): the agreed interface only.

use std::process::ExitCode;

/// `rkubelet doctor` arguments (placeholder).
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {}

/// Placeholder: not built on this branch.
pub async fn run(args: DoctorArgs) -> ExitCode {
    let _ = args;
    eprintln!("error: rkubelet doctor is not built on this branch");
    ExitCode::from(1)
}
