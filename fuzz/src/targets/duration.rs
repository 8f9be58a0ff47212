//! Target `duration`: Go duration strings (`config::parse_go_duration`, upstream
//! `time.ParseDuration`) as every KubeletConfiguration duration field is read, directly and
//! through serde. Properties: no panic; an accepted duration prints (Go's `Duration.String`)
//! to a string that parses back to the same value; serde and the parser agree.

use kubelet::config::{Duration, parse_go_duration};

use super::Target;
use crate::mutate::mutate;
use crate::rng::Rng;

pub const TARGET: Target = Target {
    name: "duration",
    about: "Go duration strings (parse, print round-trip, serde)",
    generate,
    run,
    smoke_inputs: 300_000,
};

const SEEDS: &[&str] = &[
    "1m0s",
    "20s",
    "1h2m3.5s",
    "500ms",
    "1.5h",
    "-1s",
    "+2m",
    "0",
    "0s",
    "1us",
    "1\u{b5}s",
    "1\u{3bc}s",
    "100ns",
    "2562047h47m16.854775807s",
    "-2562047h47m16.854775808s",
    ".5s",
    "1.s",
    "3h1m1s1ms1us1ns",
    "0.000000001s",
];

const DICT: &[&str] = &[
    "ns",
    "us",
    "\u{b5}s",
    "\u{3bc}s",
    "ms",
    "s",
    "m",
    "h",
    "d",
    ".",
    "-",
    "+",
    "9223372036854775807",
    "9223372036854775808",
    "2562047",
    "0000000000000000000001",
    ".99999999999999999999",
    "h",
    "mh",
    "sm",
];

fn generate(rng: &mut Rng) -> Vec<u8> {
    let seeds: Vec<&[u8]> = SEEDS.iter().map(|s| s.as_bytes()).collect();
    mutate(rng, &seeds, DICT, 256)
}

fn run(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    let parsed = parse_go_duration(&s);
    if let Ok(d) = parsed {
        let text = d.to_string();
        assert_eq!(
            parse_go_duration(&text),
            Ok(d),
            "{s:?} printed as {text:?} does not parse back"
        );
    }
    let via_serde = serde_json::from_value::<Duration>(serde_json::Value::String(s.to_string()));
    assert_eq!(
        via_serde.ok(),
        parsed.ok(),
        "serde and parse_go_duration disagree on {s:?}"
    );
}
