//! Go-compatible durations (`metav1.Duration`) for the kubelet configuration.
//! Owns: parsing of Go duration strings (`time.ParseDuration` grammar) and their canonical
//! rendering (`time.Duration.String()`). Receives strings from config files and flags; emits
//! [`Duration`] values (signed nanoseconds) and the strings `/configz` prints.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
/// 1<<63: the magnitude bound Go uses while accumulating (allows exactly i64::MIN).
const LIMIT: u64 = 1 << 63;

/// A signed span of time in nanoseconds, written the way Go writes it (`"1m0s"`, `"500ms"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(i64);

/// Why a string is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseDurationError {
    #[error("{input:?} is not a duration (expected a Go duration such as \"1m0s\" or \"20s\")")]
    Invalid { input: String },
    #[error(
        "{input:?} is not a duration: missing unit (expected a Go duration such as \"1m0s\" or \"20s\")"
    )]
    MissingUnit { input: String },
    #[error(
        "{input:?} is not a duration: unknown unit {unit:?} (valid units are \"ns\", \"us\", \"µs\", \"ms\", \"s\", \"m\", \"h\")"
    )]
    UnknownUnit { input: String, unit: String },
    #[error("{input:?} is not a duration: value out of range")]
    Overflow { input: String },
}

impl Duration {
    pub const ZERO: Duration = Duration(0);

    pub const fn from_nanos(nanos: i64) -> Self {
        Duration(nanos)
    }
    pub const fn from_millis(ms: i64) -> Self {
        Duration(ms.saturating_mul(MILLISECOND as i64))
    }
    pub const fn from_secs(secs: i64) -> Self {
        Duration(secs.saturating_mul(SECOND as i64))
    }
    pub const fn from_mins(mins: i64) -> Self {
        Duration(mins.saturating_mul(MINUTE as i64))
    }
    pub const fn from_hours(hours: i64) -> Self {
        Duration(hours.saturating_mul(HOUR as i64))
    }
    pub const fn as_nanos(self) -> i64 {
        self.0
    }
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }
    /// Whole seconds, truncated toward zero (Go `int64(d.Seconds())`).
    pub const fn as_secs(self) -> i64 {
        self.0 / SECOND as i64
    }
    /// The std duration; negative durations become zero.
    pub fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_nanos(u64::try_from(self.0).unwrap_or(0))
    }
    /// From a std duration, saturating at the largest representable value.
    pub fn from_std(d: std::time::Duration) -> Self {
        Duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> Self {
        d.as_std()
    }
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Self {
        Duration::from_std(d)
    }
}

/// Consumes leading ASCII digits; `None` on overflow past 1<<63.
fn leading_int(s: &str) -> Option<(u64, &str)> {
    let end = s
        .bytes()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(s.len());
    let mut x: u64 = 0;
    for c in s[..end].bytes() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(c - b'0');
        if x > LIMIT {
            return None;
        }
    }
    Some((x, &s[end..]))
}

/// Consumes leading digits of a fraction; stops accumulating precision on overflow (as Go).
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let end = s
        .bytes()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(s.len());
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    for c in s[..end].bytes() {
        if overflow {
            continue;
        }
        if x > (LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let y = x * 10 + u64::from(c - b'0');
        if y > LIMIT {
            overflow = true;
            continue;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[end..])
}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => NANOSECOND,
        "us" | "\u{00b5}s" | "\u{03bc}s" => MICROSECOND,
        "ms" => MILLISECOND,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        _ => return None,
    })
}

/// Parses a Go duration string: `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, or a bare `0`.
pub fn parse_go_duration(input: &str) -> Result<Duration, ParseDurationError> {
    let invalid = || ParseDurationError::Invalid {
        input: input.to_string(),
    };
    let overflow = || ParseDurationError::Overflow {
        input: input.to_string(),
    };
    let mut s = input;
    let mut neg = false;
    if let Some(rest) = s.strip_prefix('-') {
        neg = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        let first = s.as_bytes()[0];
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(invalid());
        }
        let before = s.len();
        let (mut v, rest) = leading_int(s).ok_or_else(overflow)?;
        s = rest;
        let pre = before != s.len();
        let (mut frac, mut scale, mut post) = (0u64, 1f64, false);
        if let Some(rest) = s.strip_prefix('.') {
            let before = rest.len();
            let (f, sc, rest) = leading_fraction(rest);
            (frac, scale, post) = (f, sc, before != rest.len());
            s = rest;
        }
        if !pre && !post {
            return Err(invalid());
        }
        let unit_end = s
            .bytes()
            .position(|c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_end == 0 {
            return Err(ParseDurationError::MissingUnit {
                input: input.to_string(),
            });
        }
        let (unit, rest) = s.split_at(unit_end);
        s = rest;
        let unit_ns = unit_nanos(unit).ok_or_else(|| ParseDurationError::UnknownUnit {
            input: input.to_string(),
            unit: unit.to_string(),
        })?;
        if v > LIMIT / unit_ns {
            return Err(overflow());
        }
        v *= unit_ns;
        if frac > 0 {
            // Float is accurate enough here: the fraction of an hour is at most 3.6e12 ns.
            v += (frac as f64 * (unit_ns as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(overflow());
            }
        }
        total = total.checked_add(v).ok_or_else(overflow)?;
        if total > LIMIT {
            return Err(overflow());
        }
    }
    if neg {
        // total <= 1<<63, so the negation always fits.
        return Ok(Duration((total as i128).wrapping_neg() as i64));
    }
    i64::try_from(total).map(Duration).map_err(|_| overflow())
}

impl FromStr for Duration {
    type Err = ParseDurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_go_duration(s)
    }
}

/// Writes the low `prec` decimal digits of `v` as a fraction without trailing zeros
/// (nothing at all if they are all zero); returns the remaining integer part.
fn frac_digits(v: u64, prec: u32) -> (String, u64) {
    let divisor = 10u64.pow(prec);
    let (int, frac) = (v / divisor, v % divisor);
    if frac == 0 {
        return (String::new(), int);
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    (format!(".{}", digits.trim_end_matches('0')), int)
}

impl fmt::Display for Duration {
    /// Renders exactly like Go's `time.Duration.String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.0 < 0;
        let u = self.0.unsigned_abs();
        let sign = if neg { "-" } else { "" };
        if u == 0 {
            return f.write_str("0s");
        }
        if u < SECOND {
            let (prec, unit) = if u < MICROSECOND {
                (0, "ns")
            } else if u < MILLISECOND {
                (3, "\u{00b5}s")
            } else {
                (6, "ms")
            };
            let (frac, int) = frac_digits(u, prec);
            return write!(f, "{sign}{int}{frac}{unit}");
        }
        let (frac, secs) = frac_digits(u, 9);
        let (s, mins) = (secs % 60, secs / 60);
        if mins == 0 {
            return write!(f, "{sign}{s}{frac}s");
        }
        let (m, hours) = (mins % 60, mins / 60);
        if hours == 0 {
            return write!(f, "{sign}{m}m{s}{frac}s");
        }
        write!(f, "{sign}{hours}h{m}m{s}{frac}s")
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string such as \"1m0s\" or \"20s\"")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        parse_go_duration(v).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("-0", 0),
            ("+0", 0),
            ("0s", 0),
            ("5s", 5 * SECOND as i64),
            ("30s", 30 * SECOND as i64),
            ("1478s", 1478 * SECOND as i64),
            ("-5s", -5 * SECOND as i64),
            ("+5s", 5 * SECOND as i64),
            ("-0s", 0),
            ("5.0s", 5 * SECOND as i64),
            ("5.6s", 5 * SECOND as i64 + 600 * MILLISECOND as i64),
            ("5.s", 5 * SECOND as i64),
            (".5s", 500 * MILLISECOND as i64),
            ("1.0s", SECOND as i64),
            ("1.00s", SECOND as i64),
            ("1.004s", SECOND as i64 + 4 * MILLISECOND as i64),
            ("1.0040s", SECOND as i64 + 4 * MILLISECOND as i64),
            ("100.00100s", 100 * SECOND as i64 + MILLISECOND as i64),
            ("10ns", 10),
            ("11us", 11 * MICROSECOND as i64),
            ("12µs", 12 * MICROSECOND as i64),
            ("12μs", 12 * MICROSECOND as i64),
            ("13ms", 13 * MILLISECOND as i64),
            ("300ms", 300 * MILLISECOND as i64),
            ("14s", 14 * SECOND as i64),
            ("15m", 15 * MINUTE as i64),
            ("16h", 16 * HOUR as i64),
            ("1.5h", 90 * MINUTE as i64),
            ("2m0s", 2 * MINUTE as i64),
            ("3h30m", 3 * HOUR as i64 + 30 * MINUTE as i64),
            (
                "1h2m3.5s",
                (HOUR + 2 * MINUTE + 3 * SECOND + 500 * MILLISECOND) as i64,
            ),
            (
                "10.5s4m",
                (4 * MINUTE + 10 * SECOND + 500 * MILLISECOND) as i64,
            ),
            (
                "-2m3.4s",
                -((2 * MINUTE + 3 * SECOND + 400 * MILLISECOND) as i64),
            ),
            (
                "1h2m3s4ms5us6ns",
                (HOUR + 2 * MINUTE + 3 * SECOND + 4 * MILLISECOND + 5 * MICROSECOND + 6) as i64,
            ),
            (
                "39h9m14.425s",
                (39 * HOUR + 9 * MINUTE + 14 * SECOND + 425 * MILLISECOND) as i64,
            ),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 20 * MINUTE as i64),
            ("9007199254740993ns", 9_007_199_254_740_993),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("0.100000000000000000000h", 6 * MINUTE as i64),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_go_duration(input),
                Ok(Duration(*want)),
                "input {input:?}"
            );
        }
    }

    #[test]
    fn rejects_invalid_durations() {
        let cases: &[(&str, &str)] = &[
            ("", "is not a duration"),
            ("3", "missing unit"),
            ("-", "is not a duration"),
            ("s", "is not a duration"),
            (".", "is not a duration"),
            ("-.", "is not a duration"),
            (".s", "is not a duration"),
            ("+.s", "is not a duration"),
            ("1d", "unknown unit \"d\""),
            ("1hour", "unknown unit \"hour\""),
            ("banana", "is not a duration"),
            (" 1s", "is not a duration"),
            ("1s ", "unknown unit \"s \""),
            ("9223372036854775808ns", "out of range"),
            ("9223372036854775810ns", "out of range"),
            ("-9223372036854775809ns", "out of range"),
            ("3000000h", "out of range"),
        ];
        for (input, want) in cases {
            let err = parse_go_duration(input).expect_err(input).to_string();
            assert!(err.contains(want), "input {input:?}: {err}");
        }
        assert_eq!(
            parse_go_duration("banana").unwrap_err().to_string(),
            "\"banana\" is not a duration (expected a Go duration such as \"1m0s\" or \"20s\")"
        );
    }

    #[test]
    fn formats_like_go() {
        // Expected strings are Go's time.Duration.String() outputs.
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (500_000_000, "500ms"),
            (100_000_000, "100ms"),
            (3_300_000_000, "3.3s"),
            (20_000_000_000, "20s"),
            (60_000_000_000, "1m0s"),
            (120_000_000_000, "2m0s"),
            (4 * 60_000_000_000 + 5_000_000_000, "4m5s"),
            (4 * 60_000_000_000 + 5_001_000_000, "4m5.001s"),
            (
                5 * 3_600_000_000_000 + 6 * 60_000_000_000 + 7_001_000_000,
                "5h6m7.001s",
            ),
            (3_600_000_000_000, "1h0m0s"),
            (4 * 3_600_000_000_000, "4h0m0s"),
            (8 * 60_000_000_000 + 1, "8m0.000000001s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            (-1, "-1ns"),
            (-1_000_000_000, "-1s"),
        ];
        for (nanos, want) in cases {
            assert_eq!(Duration(*nanos).to_string(), *want, "nanos {nanos}");
        }
    }

    #[test]
    fn round_trips_through_text() {
        for s in [
            "0s", "1ns", "1.5µs", "500ms", "20s", "1m0s", "2m0s", "1h0m0s", "4h0m0s", "1h2m3.5s",
            "-1s",
        ] {
            let d: Duration = s.parse().unwrap();
            assert_eq!(d.to_string(), s);
        }
    }

    #[test]
    fn converts_to_std() {
        assert_eq!(
            Duration::from_secs(20).as_std(),
            std::time::Duration::from_secs(20)
        );
        assert_eq!(Duration::from_secs(-20).as_std(), std::time::Duration::ZERO);
        let std: std::time::Duration = Duration::from_millis(1500).into();
        assert_eq!(std, std::time::Duration::from_millis(1500));
        assert_eq!(
            Duration::from(std::time::Duration::from_millis(250)),
            Duration::from_millis(250)
        );
    }

    #[test]
    fn serde_uses_strings() {
        let d: Duration = serde_json::from_str("\"1m\"").unwrap();
        assert_eq!(d, Duration::from_mins(1));
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"1m0s\"");
        let err = serde_json::from_str::<Duration>("60")
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected a duration string"), "{err}");
    }
}
