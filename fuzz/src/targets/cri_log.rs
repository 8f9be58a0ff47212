//! Target `cri-log`: container log lines in the CRI format (`<RFC3339Nano> <stream> <P|F> <msg>`)
//! as the `/containerLogs` reader (`server::logs::parse_cri_line`) and the termination-message
//! log tail (`kuberuntime::runtime_status::log_tail_text`) parse them. Log content is written
//! by the container, so it is fully hostile. Properties: no panic; a parsed record's message is
//! the tail of the line. (Kept small so it can follow the log reader as that module changes.)

use kubelet::kuberuntime::runtime_status::log_tail_text;
use kubelet::server::logs::parse_cri_line;

use super::Target;
use crate::mutate::mutate;
use crate::rng::Rng;

pub const TARGET: Target = Target {
    name: "cri-log",
    about: "CRI container log line parsing (log reader + termination-message tail)",
    generate,
    run,
    smoke_inputs: 300_000,
};

const SEEDS: &[&str] = &[
    "2024-01-02T03:04:05.123456789Z stdout F hello world\n",
    "2024-01-02T03:04:05.1Z stderr P part one\n2024-01-02T03:04:05.2Z stderr F part two\n",
    "2024-01-02T03:04:05+02:00 stdout F:x:y tagged\n2024-01-02T03:04:05Z stdout F \n",
    "2016-10-06T00:17:09.669794202Z stdout F the content\n2016-10-06T00:17:09.669794203Z stderr F \u{1f600}\n",
    "not a cri line\n\n\n2024-01-02T03:04:05Z stdin F nope\n",
];

const DICT: &[&str] = &[
    " stdout ",
    " stderr ",
    " F ",
    " P ",
    "F:",
    "P:",
    "Z",
    "T",
    "+14:00",
    "-23:59",
    "+99:99",
    ".000000000000000000001",
    "9999-12-31T23:59:59.999999999Z",
    "0000-01-01T00:00:00Z",
    "2024-02-30T00:00:00Z",
    "2024-01-02T24:00:60Z",
    "\n",
    "\r",
    "\u{0}",
];

fn generate(rng: &mut Rng) -> Vec<u8> {
    let seeds: Vec<&[u8]> = SEEDS.iter().map(|s| s.as_bytes()).collect();
    mutate(rng, &seeds, DICT, 16 << 10)
}

fn run(data: &[u8]) {
    for line in data.split(|b| *b == b'\n') {
        if let Some(rec) = parse_cri_line(line) {
            assert!(
                line.ends_with(&rec.msg),
                "the message is not the tail of the line"
            );
        }
    }
    let _ = log_tail_text(data, true);
    let _ = log_tail_text(data, false);
}
