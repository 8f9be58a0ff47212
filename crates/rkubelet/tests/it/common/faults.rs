//! The fault matrix's shared vocabulary (issue 17): which form a row runs in (the short CI form
//! or the full one), and how a row reports its figures so `dev/faults.sh` can print the table.
//!
//! Receives: env `RKUBELET_FAULTS` (`short`, the default, or `full`) and
//! `RKUBELET_FAULTS_REPORT` (a file path; unset → rows go to stderr only).
//! Emits: one tab-separated line per row (`row, mode, fault, holds, figure`) into the report
//! file (appended; many test processes share it), and the same on stderr.

use std::io::Write;

/// The form the fault tests run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// CI: shortened durations and thresholds, a few iterations each (≤ 10 min for all rows).
    Short,
    /// The whole matrix as the issue states it (`dev/faults.sh --full`).
    Full,
}

pub fn mode() -> Mode {
    match std::env::var("RKUBELET_FAULTS").as_deref() {
        Ok("full") => Mode::Full,
        Ok("short") | Err(_) => Mode::Short,
        Ok(other) => panic!("RKUBELET_FAULTS must be `short` or `full`, not {other:?}"),
    }
}

/// `short` in the CI form, `full` in the full one.
pub fn pick<T>(short: T, full: T) -> T {
    match mode() {
        Mode::Short => short,
        Mode::Full => full,
    }
}

/// One row of the table: `row` is the matrix row ("1", "2a", …), `fault` what was done,
/// `holds` what was checked, `figure` the measured figures (e.g. "max 3.2 req/s, recovery
/// 4.1 s"). Call it only after the row's assertions passed: a reported row is a passed row.
pub fn report(row: &str, fault: &str, holds: &str, figure: &str) {
    let mode = match mode() {
        Mode::Short => "short",
        Mode::Full => "full",
    };
    let clean = |s: &str| s.replace(['\t', '\n', '|'], " ");
    let line = [row, mode, fault, holds, figure].map(clean).join("\t");
    eprintln!("FAULT-ROW\t{line}");
    if let Ok(path) = std::env::var("RKUBELET_FAULTS_REPORT") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open RKUBELET_FAULTS_REPORT {path}: {e}"));
        // One write of one line: appends from concurrent processes do not interleave.
        f.write_all(format!("{line}\n").as_bytes())
            .unwrap_or_else(|e| panic!("write RKUBELET_FAULTS_REPORT {path}: {e}"));
    }
}
