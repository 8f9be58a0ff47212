//! Target `quantity`: resource quantities and the other scalar grammars of configuration and
//! runtime files — `config::Quantity::parse` (upstream `resource.ParseQuantity`),
//! `config::ThresholdValue::parse` (`100Mi` or `10%`), the pod-resource parser
//! `qos::parse_quantity_nanos`, `nodestatus::resources::parse_milli` and
//! `cm::cpumanager::cpuset::CpuSet::parse` (`0-3,5`). Properties: no panic; where both
//! quantity parsers accept a (whitespace-free) string within ±2⁶³ units they agree exactly;
//! milli values round up; a parsed CPU set prints back to a string that parses to the same set.

use kubelet::cm::cpumanager::cpuset::CpuSet;
use kubelet::config::{Quantity, ThresholdValue};
use kubelet::nodestatus::resources::parse_milli;
use kubelet::qos::parse_quantity_nanos;

use super::Target;
use crate::mutate::mutate;
use crate::rng::Rng;

pub const TARGET: Target = Target {
    name: "quantity",
    about: "quantities, threshold values, milli values, CPU sets",
    generate,
    run,
    smoke_inputs: 200_000,
};

const SEEDS: &[&str] = &[
    "100Mi",
    "500m",
    "1.5G",
    "1e3",
    "1E3",
    "2Ki",
    "0.1",
    "-1",
    "+5",
    ".5",
    "5.",
    "1.G",
    "1e-3",
    "1E+2",
    "10%",
    "0.5%",
    "100%",
    "7Ei",
    "8Ei",
    "12345678901234567890n",
    "0",
    "000.000",
    "1u",
    "123456789.123456789k",
    "0-3,5,7-9",
    "0",
    "1-1",
    "",
    " 3 ",
];

const DICT: &[&str] = &[
    "n",
    "u",
    "m",
    "k",
    "K",
    "M",
    "G",
    "T",
    "P",
    "E",
    "Ki",
    "Mi",
    "Gi",
    "Ti",
    "Pi",
    "Ei",
    "e",
    "E",
    "e+",
    "e-",
    "i",
    "%",
    ".",
    "-",
    "+",
    ",",
    "0",
    "9",
    "00000000000000000000",
    "99999999999999999999",
    "e9223372036854775807",
    "e-9223372036854775808",
    "e2147483647",
    "4294967295",
    "0-4294967295",
    "0-",
    "-0",
];

fn generate(rng: &mut Rng) -> Vec<u8> {
    let seeds: Vec<&[u8]> = SEEDS.iter().map(|s| s.as_bytes()).collect();
    mutate(rng, &seeds, DICT, 256)
}

fn run(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    let s = s.as_ref();
    let config = Quantity::parse(s);
    let pod = parse_quantity_nanos(s);
    if let Ok(q) = &config {
        let milli = i128::from(q.milli_value());
        assert!(
            milli * 1_000_000 >= q.nanos() || milli == i128::from(i64::MAX),
            "milli value {milli} of {s:?} rounds down"
        );
        assert_eq!(q.as_str(), s, "the raw text is not kept");
        assert_eq!(parse_milli(s), Some(milli));
    }
    if let (Ok(q), Some(n)) = (&config, pod)
        && !s.contains(char::is_whitespace)
    {
        assert_eq!(
            q.nanos(),
            n,
            "config and pod quantity parsers disagree on {s:?}"
        );
    }
    if let Ok(ThresholdValue::Percentage { percent, .. }) = ThresholdValue::parse(s) {
        assert!(
            (0.0..=100.0).contains(&percent),
            "percentage {percent} out of range"
        );
    }
    if let Ok(set) = CpuSet::parse(s) {
        let text = set.to_string();
        assert_eq!(
            CpuSet::parse(&text).ok(),
            Some(set),
            "CPU set {s:?} does not round-trip"
        );
    }
}
