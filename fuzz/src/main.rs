//! `rkubelet-fuzz`: runs one fuzz target (or `all`, one after another) for a number of inputs
//! or a time budget, or replays one input. Prints a report line per target; on the first
//! panic, slow input (> 1 s) or allocation peak (> 64 MiB) prints the reproducer and exits 1.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rkubelet_fuzz::runner::run_one;
use rkubelet_fuzz::{Limits, TARGETS, Target, find, run_target};

#[global_allocator]
static ALLOC: rkubelet_fuzz::alloc::Counting = rkubelet_fuzz::alloc::Counting;

#[derive(Parser, Debug)]
#[command(about = "Fuzz rkubelet's parsers of outside input (stable toolchain)")]
struct Args {
    /// A target name, `all`, or `list`.
    target: String,
    /// Stop after this many inputs per target.
    #[arg(long)]
    inputs: Option<u64>,
    /// Stop after this many seconds per target.
    #[arg(long)]
    seconds: Option<f64>,
    /// PRNG seed (decimal or 0x-hex).
    #[arg(long, default_value = "0x5eed", value_parser = parse_seed)]
    seed: u64,
    /// First input index (inputs are a pure function of seed and index).
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Per-input time limit in milliseconds (default 1000).
    #[arg(long, default_value_t = 1000)]
    max_ms: u64,
    /// Per-input allocation limit in MiB (default 64).
    #[arg(long, default_value_t = 64)]
    max_mib: usize,
    /// Replay one input given in hex (as a failure prints it) instead of fuzzing.
    #[arg(long)]
    replay: Option<String>,
}

fn parse_seed(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| e.to_string())
}

fn targets(name: &str) -> Result<Vec<&'static Target>, String> {
    if name == "all" {
        return Ok(TARGETS.iter().collect());
    }
    find(name).map(|t| vec![t]).ok_or_else(|| {
        let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
        format!(
            "unknown target {name:?}; targets: all, {}",
            names.join(", ")
        )
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.target == "list" {
        for t in TARGETS {
            println!("{:16} {}", t.name, t.about);
        }
        return ExitCode::SUCCESS;
    }
    let targets = match targets(&args.target) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some(hex_input) = &args.replay {
        let Ok(input) = hex::decode(hex_input.trim()) else {
            eprintln!("--replay wants the hex string a failure report prints");
            return ExitCode::from(2);
        };
        let mut ok = true;
        for t in targets {
            let (outcome, took, peak) = run_one(t, &input);
            println!(
                "{}: {} in {:.3} ms, peak allocation {} bytes",
                t.name,
                outcome
                    .as_ref()
                    .map_or_else(|e| format!("PANIC: {e}"), |()| "ok".into()),
                took.as_secs_f64() * 1e3,
                peak
            );
            ok &= outcome.is_ok();
        }
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let limits = Limits {
        seed: args.seed,
        inputs: args.inputs.or(args.seconds.is_none().then_some(100_000)),
        duration: args.seconds.map(Duration::from_secs_f64),
        start: args.start,
        max_input_time: Duration::from_millis(args.max_ms),
        max_input_alloc: args.max_mib << 20,
        ..Limits::default()
    };
    let mut failed = false;
    for t in targets {
        match run_target(t, &limits) {
            Ok(report) => println!("{report}"),
            Err(failure) => {
                eprintln!("{failure}");
                failed = true;
                break;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
