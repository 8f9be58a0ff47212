//! Kubernetes resource quantities and eviction-threshold values for the kubelet configuration.
//! Owns: the `resource.ParseQuantity` grammar (`100Mi`, `500m`, `1.5G`, `1e3`) and threshold
//! values that may also be percentages (`10%`). Receives strings from config files; emits
//! [`Quantity`] (exact value in nano-units, original text kept for `/configz`) and
//! [`ThresholdValue`].

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const EXAMPLES: &str = "expected e.g. \"100Mi\", \"500m\", \"1.5G\" or \"1e3\"";

/// A resource quantity as written (`"100Mi"`), with its exact value in nano-units.
#[derive(Debug, Clone)]
pub struct Quantity {
    raw: String,
    /// Value × 10⁹, rounded up; saturates at the i128 range for absurdly large inputs.
    nanos: i128,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{input:?} is not a quantity ({EXAMPLES})")]
    Format { input: String },
    #[error("{input:?} is not a quantity: unknown suffix {suffix:?} ({EXAMPLES})")]
    Suffix { input: String, suffix: String },
}

/// The pieces of a quantity string, split the way upstream's parser splits them.
struct Parts<'a> {
    negative: bool,
    /// Integer digits without leading zeros (may be empty).
    num: &'a str,
    /// Fraction digits (may be empty).
    denom: &'a str,
    suffix: &'a str,
}

const SUFFIX_CHARS: &[u8] = b"eEinumkKMGTP";

/// Splits `[+-]?[0-9]*(\.[0-9]*)?` + suffix; mirrors upstream quirks such as accepting "1.G".
fn split(s: &str) -> Option<Parts<'_>> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut negative = false;
    if pos < end && (b[0] == b'-' || b[0] == b'+') {
        negative = b[0] == b'-';
        pos += 1;
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    let zero = Parts {
        negative,
        num: "",
        denom: "",
        suffix: "",
    };
    if pos >= end {
        return Some(zero);
    }
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = &s[num_start..pos];
    let mut denom = "";
    if pos < end && b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[start..pos];
    }
    let suffix_start = pos;
    while pos < end && SUFFIX_CHARS.contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return None;
    }
    Some(Parts {
        negative,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// Decimal exponent and power-of-two exponent for a suffix.
fn interpret_suffix(suffix: &str) -> Option<(i64, u32)> {
    let dec = match suffix {
        "n" => -9,
        "u" => -6,
        "m" => -3,
        "" => 0,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        "T" => 12,
        "P" => 15,
        "E" => 18,
        "Ki" => return Some((0, 10)),
        "Mi" => return Some((0, 20)),
        "Gi" => return Some((0, 30)),
        "Ti" => return Some((0, 40)),
        "Pi" => return Some((0, 50)),
        "Ei" => return Some((0, 60)),
        _ => {
            let exp = suffix.strip_prefix(['e', 'E']).filter(|e| !e.is_empty())?;
            return exp.parse::<i64>().ok().map(|e| (e, 0));
        }
    };
    Some((dec, 0))
}

fn pow10(exp: u32) -> Option<i128> {
    10i128.checked_pow(exp)
}

/// Exact value × 10⁹ of mantissa digits × 10^exp10 × 2^exp2, rounded up, saturating.
fn scaled_nanos(digits: &str, mut exp10: i64, exp2: u32) -> i128 {
    let digits = digits.trim_start_matches('0');
    // Keep at most 36 significant digits; the rest cannot matter at nano precision.
    let keep = digits.len().min(36);
    exp10 = exp10.saturating_add((digits.len() - keep) as i64);
    // Dropped non-zero digits still make the value round up (only the fraction path can
    // have any: 36 kept digits with a non-negative exponent saturate anyway).
    let dropped = digits[keep..].bytes().any(|c| c != b'0');
    let mut mantissa: i128 = 0;
    for c in digits[..keep].bytes() {
        mantissa = mantissa * 10 + i128::from(c - b'0');
    }
    if mantissa == 0 {
        return 0;
    }
    let Some(mut v) = 1i128
        .checked_shl(exp2)
        .and_then(|p| mantissa.checked_mul(p))
    else {
        return i128::MAX;
    };
    // Saturating: an exponent near i64::MAX (`1e9223372036854775807`) must not wrap negative.
    exp10 = exp10.saturating_add(9);
    if exp10 >= 0 {
        let factor = u32::try_from(exp10).ok().and_then(pow10);
        return factor.and_then(|f| v.checked_mul(f)).unwrap_or(i128::MAX);
    }
    match u32::try_from(exp10.unsigned_abs()).ok().and_then(pow10) {
        Some(div) => {
            let (q, r) = (v / div, v % div);
            v = if r > 0 || dropped { q + 1 } else { q };
            v
        }
        // Smaller than one nano-unit but not zero: rounds up to one.
        None => 1,
    }
}

impl Quantity {
    /// Parses a Kubernetes quantity with upstream's grammar.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let format = || QuantityError::Format {
            input: input.to_string(),
        };
        if input.is_empty() {
            return Err(format());
        }
        let parts = split(input).ok_or_else(format)?;
        let (exp10, exp2) =
            interpret_suffix(parts.suffix).ok_or_else(|| QuantityError::Suffix {
                input: input.to_string(),
                suffix: parts.suffix.to_string(),
            })?;
        let digits = format!("{}{}", parts.num, parts.denom);
        let exp10 = exp10.saturating_sub(parts.denom.len() as i64);
        let magnitude = scaled_nanos(&digits, exp10, exp2);
        let nanos = if parts.negative {
            -magnitude
        } else {
            magnitude
        };
        Ok(Quantity {
            raw: input.to_string(),
            nanos,
        })
    }

    /// A plain integer quantity (e.g. bytes), written in decimal.
    pub fn from_i64(v: i64) -> Self {
        Quantity {
            raw: v.to_string(),
            nanos: i128::from(v) * 1_000_000_000,
        }
    }

    /// The text as written in the configuration.
    pub fn as_str(&self) -> &str {
        &self.raw
    }
    /// Value × 10⁹.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }
    /// Integer value, rounded up (like upstream `Quantity.Value()`), saturating at i64.
    pub fn value(&self) -> i64 {
        let (q, r) = (self.nanos / 1_000_000_000, self.nanos % 1_000_000_000);
        let v = if r > 0 { q + 1 } else { q };
        i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
    }
    /// Value × 1000, rounded up (like upstream `Quantity.MilliValue()`), saturating at i64.
    pub fn milli_value(&self) -> i64 {
        let (q, r) = (self.nanos / 1_000_000, self.nanos % 1_000_000);
        let v = if r > 0 { q + 1 } else { q };
        i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
    }
    pub fn as_f64(&self) -> f64 {
        self.nanos as f64 / 1e9
    }
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }
}

impl Default for Quantity {
    /// Zero, written `"0"`.
    fn default() -> Self {
        Quantity::from_i64(0)
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}
impl Eq for Quantity {}
impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}
impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.raw)
    }
}

struct QuantityVisitor;

impl Visitor<'_> for QuantityVisitor {
    type Value = Quantity;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a quantity such as \"100Mi\" or a number")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
        Quantity::parse(v).map_err(E::custom)
    }
    // Upstream's `Quantity.UnmarshalJSON` parses an unquoted JSON number as the quantity
    // text it spells (`infoBufferSize: 0`, `memory: 1e9`).
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
        Quantity::parse(&v.to_string()).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
        Quantity::parse(&v.to_string()).map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
        if !v.is_finite() {
            return Err(E::custom(format!("{v} is not a quantity")));
        }
        Quantity::parse(&v.to_string()).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(QuantityVisitor)
    }
}

/// An eviction threshold or minimum-reclaim value: an absolute quantity or a percentage of
/// capacity.
#[derive(Debug, Clone, PartialEq)]
pub enum ThresholdValue {
    Quantity(Quantity),
    /// `percent` is in 0..=100; `raw` is the text as written (e.g. `"10%"`).
    Percentage {
        raw: String,
        percent: f64,
    },
}

/// Why a string is not a threshold value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThresholdError {
    #[error("{input:?} is not a quantity or a percentage (expected e.g. \"100Mi\" or \"10%\")")]
    Format { input: String },
    #[error("{input:?} is not a valid percentage: must be between 0% and 100%")]
    PercentRange { input: String },
    #[error("{input:?} must not be negative")]
    Negative { input: String },
}

impl ThresholdValue {
    pub fn parse(input: &str) -> Result<Self, ThresholdError> {
        if input.ends_with('%') {
            let number = input.trim_end_matches('%');
            let percent = number.parse::<f32>().map_err(|_| ThresholdError::Format {
                input: input.to_string(),
            })?;
            if !(0.0..=100.0).contains(&percent) {
                return Err(ThresholdError::PercentRange {
                    input: input.to_string(),
                });
            }
            return Ok(ThresholdValue::Percentage {
                raw: input.to_string(),
                percent: f64::from(percent),
            });
        }
        let q = Quantity::parse(input).map_err(|_| ThresholdError::Format {
            input: input.to_string(),
        })?;
        if q.is_negative() {
            return Err(ThresholdError::Negative {
                input: input.to_string(),
            });
        }
        Ok(ThresholdValue::Quantity(q))
    }

    pub fn as_str(&self) -> &str {
        match self {
            ThresholdValue::Quantity(q) => q.as_str(),
            ThresholdValue::Percentage { raw, .. } => raw,
        }
    }

    /// Upstream treats exactly `"0%"` and `"100%"` as "no threshold for this signal".
    pub fn disables_signal(&self) -> bool {
        matches!(self, ThresholdValue::Percentage { raw, .. } if raw == "0%" || raw == "100%")
    }

    /// The percentage as a fraction of capacity (0.0..=1.0), if this is a percentage.
    pub fn fraction(&self) -> Option<f64> {
        match self {
            ThresholdValue::Percentage { percent, .. } => Some(percent / 100.0),
            ThresholdValue::Quantity(_) => None,
        }
    }
}

impl FromStr for ThresholdValue {
    type Err = ThresholdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ThresholdValue::parse(s)
    }
}

impl fmt::Display for ThresholdValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ThresholdValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

struct ThresholdVisitor;

impl Visitor<'_> for ThresholdVisitor {
    type Value = ThresholdValue;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a quantity (e.g. \"100Mi\") or percentage (e.g. \"10%\") string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<ThresholdValue, E> {
        ThresholdValue::parse(v).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for ThresholdValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(ThresholdVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KI: i128 = 1024;
    const N: i128 = 1_000_000_000;

    #[test]
    fn parses_quantities() {
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("00", 0),
            ("-0", 0),
            ("+", 0),
            ("1", N),
            ("+1", N),
            ("-1", -N),
            ("100Mi", 100 * KI * KI * N),
            ("1Gi", KI * KI * KI * N),
            ("10Ki", 10 * KI * N),
            ("1Ei", (1i128 << 60) * N),
            ("1.5Gi", 3 * (1i128 << 29) * N),
            ("500m", N / 2),
            ("1e3", 1000 * N),
            ("1E3", 1000 * N),
            ("1e-3", N / 1000),
            ("1.5G", 1_500_000_000 * N),
            ("1.G", 1_000_000_000 * N),
            (".5", N / 2),
            ("0.5", N / 2),
            ("1k", 1000 * N),
            ("1M", 1_000_000 * N),
            ("1T", 1_000_000_000_000 * N),
            ("1P", 1_000_000_000_000_000 * N),
            ("1E", 1_000_000_000_000_000_000 * N),
            ("100n", 100),
            ("1u", 1000),
            ("1n", 1),
            ("0.1n", 1),
            ("123456789", 123_456_789 * N),
            ("007", 7 * N),
        ];
        for (input, want) in cases {
            let q = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.nanos(), *want, "input {input:?}");
            assert_eq!(q.as_str(), *input);
        }
    }

    #[test]
    fn extreme_exponents_saturate_instead_of_wrapping() {
        // Fuzz reproducers (`quantity` target): the exponent arithmetic overflowed (a panic in
        // debug builds; in release the value wrapped to one nano-unit).
        for input in [
            "61e9223372036854775807",
            "1e9223372036854775807",
            "1111111111111111111111111111111111111111e9223372036854775807",
        ] {
            assert_eq!(
                Quantity::parse(input).unwrap().nanos(),
                i128::MAX,
                "{input}"
            );
        }
        assert_eq!(
            Quantity::parse("-1e9223372036854775807").unwrap().nanos(),
            -i128::MAX
        );
        for input in ["1e-9223372036854775808", "0.1e-9223372036854775808"] {
            assert_eq!(Quantity::parse(input).unwrap().nanos(), 1, "{input}");
        }
    }

    #[test]
    fn digits_beyond_the_kept_precision_still_round_up() {
        // Fuzz reproducer (`quantity` target, differential against the pod-resource parser):
        // the digits past the 36th were dropped before rounding, so this rounded down.
        let q = Quantity::parse("123456789.12345670000000000000000000089k").unwrap();
        assert_eq!(q.nanos(), 123_456_789_123_456_700_001);
        let q = Quantity::parse("0.100000000000000000000000000000000000000").unwrap();
        assert_eq!(q.nanos(), N / 10);
    }

    #[test]
    fn rejects_bad_quantities() {
        let cases: &[(&str, &str)] = &[
            ("", "is not a quantity"),
            ("lots", "is not a quantity"),
            ("10%", "is not a quantity"),
            ("1 Gi", "is not a quantity"),
            ("1Gb", "is not a quantity"),
            ("1..2", "is not a quantity"),
            ("--1", "is not a quantity"),
            ("1i", "unknown suffix \"i\""),
            ("1e", "unknown suffix \"e\""),
            ("1Mm", "unknown suffix \"Mm\""),
            ("1KiB", "is not a quantity"),
            ("0x10", "is not a quantity"),
        ];
        for (input, want) in cases {
            let err = Quantity::parse(input).expect_err(input).to_string();
            assert!(err.contains(want), "input {input:?}: {err}");
        }
    }

    #[test]
    fn integer_views_round_up() {
        assert_eq!(Quantity::parse("100Mi").unwrap().value(), 104_857_600);
        assert_eq!(Quantity::parse("500m").unwrap().value(), 1);
        assert_eq!(Quantity::parse("500m").unwrap().milli_value(), 500);
        assert_eq!(Quantity::parse("1.5").unwrap().milli_value(), 1500);
        assert_eq!(Quantity::parse("1n").unwrap().milli_value(), 1);
        assert_eq!(Quantity::parse("1e100").unwrap().value(), i64::MAX);
        assert_eq!(Quantity::from_i64(42).value(), 42);
        assert_eq!(
            Quantity::parse("1Gi").unwrap(),
            Quantity::parse("1024Mi").unwrap()
        );
    }

    #[test]
    fn parses_threshold_values() {
        let p = ThresholdValue::parse("10%").unwrap();
        assert_eq!(p.fraction(), Some(0.1));
        assert!(!p.disables_signal());
        assert!(ThresholdValue::parse("0%").unwrap().disables_signal());
        assert!(ThresholdValue::parse("100%").unwrap().disables_signal());
        assert_eq!(
            ThresholdValue::parse("7.5%").unwrap().fraction(),
            Some(0.075)
        );
        let q = ThresholdValue::parse("100Mi").unwrap();
        assert_eq!(
            q,
            ThresholdValue::Quantity(Quantity::parse("100Mi").unwrap())
        );
        assert_eq!(q.to_string(), "100Mi");

        let bad: &[(&str, &str)] = &[
            ("lots", "\"lots\" is not a quantity or a percentage"),
            ("abc%", "is not a quantity or a percentage"),
            ("150%", "must be between 0% and 100%"),
            ("-5%", "must be between 0% and 100%"),
            ("NaN%", "must be between 0% and 100%"),
            ("-1Gi", "must not be negative"),
        ];
        for (input, want) in bad {
            let err = ThresholdValue::parse(input).expect_err(input).to_string();
            assert!(err.contains(want), "input {input:?}: {err}");
        }
    }

    #[test]
    fn serde_keeps_the_written_text() {
        let q: Quantity = serde_json::from_str("\"1.5Gi\"").unwrap();
        assert_eq!(serde_json::to_string(&q).unwrap(), "\"1.5Gi\"");
        let t: ThresholdValue = serde_json::from_str("\"15%\"").unwrap();
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"15%\"");
        assert_eq!(
            serde_json::from_str::<Quantity>("100").unwrap().value(),
            100
        );
    }

    #[test]
    fn bare_json_numbers_decode_like_upstream_unmarshal_json() {
        let q: Quantity = serde_json::from_str("0").unwrap();
        assert!(q.is_zero());
        assert_eq!(q.as_str(), "0");
        let q: Quantity = serde_json::from_str("1048576").unwrap();
        assert_eq!(q.value(), 1_048_576);
        let q: Quantity = serde_json::from_str("-3").unwrap();
        assert_eq!(q.value(), -3);
        let q: Quantity = serde_json::from_str("1.5").unwrap();
        assert_eq!(q.milli_value(), 1500);
        let q: Quantity = serde_json::from_str("1e3").unwrap();
        assert_eq!(q.value(), 1000);
        // Still written back as a string, as upstream.
        assert_eq!(serde_json::to_string(&q).unwrap(), "\"1000\"");
        // Other JSON types stay type errors.
        let err = serde_json::from_str::<Quantity>("true")
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected a quantity"), "{err}");
    }
}
