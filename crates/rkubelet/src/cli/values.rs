//! Flag value syntax as pflag and Go parse it.
//! Owns: the `value_parser`s of the command line (Go integers and booleans, durations, IPs,
//! pflag's `key=value` and `key<value` maps, klog's `--vmodule`, `--reserved-memory`).
//! Receives one flag occurrence's text; emits the typed value or a message clap prints after
//! `invalid argument "v" for "--flag" flag:`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kubelet::config::features::parse_feature_gates_flag;
use kubelet::config::{
    Duration, MemoryReservation, Quantity, ThresholdValue, VModuleItem, parse_go_duration,
};

/// One `--manifest-url-header` occurrence: `key:value` pairs in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderPairs(pub Vec<(String, String)>);

pub(super) fn parse_gates(s: &str) -> Result<BTreeMap<String, bool>, String> {
    parse_feature_gates_flag(s).map_err(|e| e.to_string())
}

pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s).map_err(|e| e.to_string())
}

pub(super) fn parse_level(s: &str) -> Result<u32, String> {
    s.parse::<u32>()
        .map_err(|_| format!("{s:?} is not a log level (expected a number such as 0 or 4)"))
}

/// Go `strconv.ParseInt(s, 0, 32)`: optional sign, `0x`/`0o`/`0b`/leading-`0` prefixes.
pub(super) fn parse_int32(s: &str) -> Result<i32, String> {
    let err = || format!("{s:?} is not a 32-bit integer");
    parse_int64(s)
        .map_err(|_| err())
        .and_then(|v| i32::try_from(v).map_err(|_| err()))
}

/// Go `strconv.ParseBool`.
pub(crate) fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (expected true or false)")),
    }
}

pub(super) fn parse_ip(s: &str) -> Result<String, String> {
    s.parse::<IpAddr>()
        .map(|_| s.to_string())
        .map_err(|_| format!("{s:?} is not a valid IP address"))
}

/// `key:value[,key:value...]`; keys and values are trimmed; empty items are skipped.
pub(super) fn parse_header_pairs(s: &str) -> Result<HeaderPairs, String> {
    let mut pairs = Vec::new();
    for item in s.split(',').filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once(':')
            .ok_or_else(|| format!("malformed pair {item:?}, expect string:string"))?;
        pairs.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(HeaderPairs(pairs))
}

/// Go `strconv.ParseInt(s, 0, 64)`.
pub(super) fn parse_int64(s: &str) -> Result<i64, String> {
    let err = || format!("{s:?} is not a 64-bit integer");
    let (neg, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return Err(err());
    }
    let magnitude = i128::from_str_radix(digits, radix).map_err(|_| err())?;
    i64::try_from(if neg { -magnitude } else { magnitude }).map_err(|_| err())
}

/// One occurrence of a pflag map flag (`MapStringString`, `LangleSeparatedMapStringString`):
/// its pairs in order. The first occurrence replaces the configured map; later ones add keys.
#[derive(Debug, Clone, PartialEq)]
pub struct MapFlag<T>(pub Vec<(String, T)>);

/// `k<sep>v[,k<sep>v...]` with keys and values trimmed and empty items skipped, as pflag's
/// map flags split them; `whole` takes the text as one pair (`NewMapStringStringNoSplit`).
fn pairs(s: &str, sep: char, whole: bool) -> Result<Vec<(String, String)>, String> {
    let items: Vec<&str> = if whole {
        vec![s]
    } else {
        s.split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .collect()
    };
    items
        .into_iter()
        .map(|item| {
            let (k, v) = item
                .split_once(sep)
                .ok_or_else(|| format!("malformed pair {item:?}, expect string{sep}string"))?;
            Ok((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

fn typed<T>(
    s: &str,
    sep: char,
    whole: bool,
    value: impl Fn(&str) -> Result<T, String>,
) -> Result<MapFlag<T>, String> {
    pairs(s, sep, whole)?
        .into_iter()
        .map(|(k, v)| {
            let parsed = value(&v).map_err(|e| format!("{k}: {e}"))?;
            Ok((k, parsed))
        })
        .collect::<Result<_, String>>()
        .map(MapFlag)
}

/// `key=value,...` (`MapStringString`).
pub(super) fn parse_string_map(s: &str) -> Result<MapFlag<String>, String> {
    typed(s, '=', false, |v| Ok(v.to_owned()))
}

/// One `key=value` per occurrence, commas kept (`MapStringStringNoSplit`).
pub(super) fn parse_string_pair(s: &str) -> Result<MapFlag<String>, String> {
    typed(s, '=', true, |v| Ok(v.to_owned()))
}

/// `resource=quantity,...` (`--system-reserved`, `--kube-reserved`).
pub(super) fn parse_quantity_map(s: &str) -> Result<MapFlag<Quantity>, String> {
    typed(s, '=', false, parse_quantity)
}

/// `signal=duration,...` (`--eviction-soft-grace-period`).
pub(super) fn parse_duration_map(s: &str) -> Result<MapFlag<Duration>, String> {
    typed(s, '=', false, parse_duration)
}

/// `signal=quantity-or-percentage,...` (`--eviction-minimum-reclaim`).
pub(super) fn parse_threshold_map(s: &str) -> Result<MapFlag<ThresholdValue>, String> {
    typed(s, '=', false, parse_threshold)
}

/// `signal<quantity-or-percentage,...` (`--eviction-hard`, `--eviction-soft`).
pub(super) fn parse_langle_threshold_map(s: &str) -> Result<MapFlag<ThresholdValue>, String> {
    typed(s, '<', false, parse_threshold)
}

pub(super) fn parse_quantity(s: &str) -> Result<Quantity, String> {
    Quantity::parse(s).map_err(|e| e.to_string())
}

fn parse_threshold(s: &str) -> Result<ThresholdValue, String> {
    ThresholdValue::parse(s).map_err(|e| e.to_string())
}

/// The folded map of every occurrence (later keys win); `None` when the flag was not given.
pub(super) fn merged<T: Clone>(occurrences: &[MapFlag<T>]) -> Option<BTreeMap<String, T>> {
    if occurrences.is_empty() {
        return None;
    }
    Some(
        occurrences
            .iter()
            .flat_map(|m| m.0.iter().cloned())
            .collect(),
    )
}

/// A repeatable comma-separated list flag (pflag `StringSlice`): the given values replace the
/// configured list; an empty value clears it. `None` when the flag was not given.
pub(super) fn joined(occurrences: &[String]) -> Option<Vec<String>> {
    if occurrences.is_empty() {
        return None;
    }
    Some(
        occurrences
            .iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// klog's `--vmodule`: `pattern=N[,pattern=N...]`.
pub(super) fn parse_vmodule(s: &str) -> Result<Vec<VModuleItem>, String> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|item| {
            let bad = || format!("{item:?}: expect comma-separated list of pattern=N");
            let (pattern, level) = item.split_once('=').ok_or_else(bad)?;
            if pattern.is_empty() {
                return Err(bad());
            }
            let verbosity = level.parse::<u32>().map_err(|_| bad())?;
            Ok(VModuleItem {
                file_pattern: pattern.to_owned(),
                verbosity,
            })
        })
        .collect()
}

/// `--reserved-memory`: `numa:type=quantity[,type=quantity...][;numa:...]`, where a type is
/// `memory` or `hugepages-<size>`.
pub(super) fn parse_reserved_memory(s: &str) -> Result<Vec<MemoryReservation>, String> {
    let mut out = Vec::new();
    for node in s.split(';').filter(|n| !n.is_empty()) {
        let bad = || format!("{node:?}: expected numaNodeID:type=quantity[,type=quantity...]");
        let (id, limits) = node.split_once(':').ok_or_else(bad)?;
        let numa_node = id.trim().parse::<i32>().map_err(|_| bad())?;
        let mut parsed = BTreeMap::new();
        for limit in limits.split(',') {
            let (kind, amount) = limit.split_once('=').ok_or_else(bad)?;
            let kind = kind.trim();
            if kind != "memory" && !kind.starts_with("hugepages-") {
                return Err(format!(
                    "{node:?}: unknown memory type {kind:?} (expected memory or hugepages-<size>)"
                ));
            }
            parsed.insert(kind.to_owned(), parse_quantity(amount.trim())?);
        }
        out.push(MemoryReservation {
            numa_node,
            limits: parsed,
        });
    }
    Ok(out)
}
