//! Scrape-time families built from a snapshot (`/metrics/resource`, `/metrics/cadvisor`):
//! collects the rows of one family, then writes them in client_golang's gather order (series
//! sorted by their label values, label names sorted) into an [`Exposition`]. A family without
//! rows is left out entirely, as client_golang does. Owns nothing beyond one scrape.

use chrono::{DateTime, Utc};

use super::registry::{Exposition, MetricKind};

/// One sample: label pairs, value and optional timestamp (ms since the epoch).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}

/// The rows of one family.
#[derive(Debug)]
pub struct Family {
    name: &'static str,
    help: String,
    kind: MetricKind,
    rows: Vec<Row>,
}

impl Family {
    pub fn new(name: &'static str, help: impl Into<String>, kind: MetricKind) -> Self {
        Self {
            name,
            help: help.into(),
            kind,
            rows: Vec::new(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Adds a sample.
    pub fn push(&mut self, labels: Vec<(&'static str, String)>, value: f64, ts: Option<i64>) {
        self.rows.push(Row {
            labels,
            value,
            timestamp_ms: ts,
        });
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Writes the family (nothing when it has no rows).
    pub fn write(mut self, out: &mut Exposition) {
        if self.rows.is_empty() {
            return;
        }
        for r in &mut self.rows {
            r.labels.sort_by_key(|(k, _)| *k);
        }
        self.rows.sort_by(|a, b| {
            a.labels
                .iter()
                .map(|(_, v)| v)
                .cmp(b.labels.iter().map(|(_, v)| v))
                .then(a.timestamp_ms.cmp(&b.timestamp_ms))
        });
        let mut w = out.family(self.name, &self.help, self.kind);
        for r in &self.rows {
            let labels: Vec<(&str, &str)> =
                r.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            w.sample_at("", &labels, r.value, r.timestamp_ms);
        }
    }
}

/// A stats time as a Prometheus sample timestamp.
pub fn millis(t: &DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// Nanoseconds of CPU time as seconds.
pub fn ns_to_seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A time as seconds since the epoch, with the fractional part (upstream
/// `float64(t.UnixNano()) / float64(time.Second)`).
pub fn unix_seconds(t: &DateTime<Utc>) -> f64 {
    t.timestamp_nanos_opt()
        .map_or(t.timestamp() as f64, |n| n as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_sorted_by_label_values_and_empty_family_omitted() {
        let mut out = Exposition::new();
        let mut f = Family::new("x_total", "X.", MetricKind::Counter);
        f.push(
            vec![("pod", "b".into()), ("container", "a".into())],
            2.0,
            Some(5),
        );
        f.push(
            vec![("pod", "a".into()), ("container", "b".into())],
            1.0,
            None,
        );
        f.push(
            vec![("pod", "z".into()), ("container", "a".into())],
            3.0,
            None,
        );
        f.write(&mut out);
        Family::new("y", "Y.", MetricKind::Gauge).write(&mut out);
        assert_eq!(
            out.finish(),
            "# HELP x_total X.\n# TYPE x_total counter\n\
             x_total{container=\"a\",pod=\"b\"} 2 5\n\
             x_total{container=\"a\",pod=\"z\"} 3\n\
             x_total{container=\"b\",pod=\"a\"} 1\n"
        );
    }

    #[test]
    fn time_conversions() {
        let t = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.250Z")
            .unwrap_or_default()
            .with_timezone(&Utc);
        assert_eq!(millis(&t), 1_767_323_045_250);
        assert!((unix_seconds(&t) - 1_767_323_045.25).abs() < 1e-6);
        assert_eq!(ns_to_seconds(1_500_000_000), 1.5);
    }
}
