//! A small Prometheus registry: counter, gauge and histogram families with label vectors, and
//! the text exposition format 0.0.4 (`# HELP` / `# TYPE`, escaped label values and help, labels
//! sorted by name, series sorted by label values, families sorted by name, Go-style numbers).
//! Owns each family's series (behind a mutex per family); receives increments/observations from
//! the instrumented components; emits text when a [`Registry`] (or any [`Collector`]) renders.
//!
//! Collectors that compute their series at scrape time from a snapshot (process metrics, and the
//! stats-based `/metrics/resource` / `/metrics/cadvisor` endpoints) implement [`Collector`] and
//! write through [`Exposition::family`] / [`FamilyWriter::sample`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::sync;
use tracing::warn;

/// `prometheus.DefBuckets`.
pub const DEFAULT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// `prometheus.ExponentialBuckets(start, factor, count)`: computed by repeated multiplication,
/// as upstream, so the bucket bounds (and their printed form) are the same floats.
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    let mut next = start;
    for _ in 0..count {
        out.push(next);
        next *= factor;
    }
    out
}

/// The `# TYPE` of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// Something that writes metric families into an exposition when scraped.
pub trait Collector: Send + Sync {
    fn collect(&self, out: &mut Exposition);
}

/// Text being assembled for one scrape: one block per family, rendered in name order.
#[derive(Debug, Default)]
pub struct Exposition {
    families: BTreeMap<String, String>,
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts (or continues, when a family is written twice) the family `name`. `# HELP` and
    /// `# TYPE` are written once, on first use.
    pub fn family(&mut self, name: &str, help: &str, kind: MetricKind) -> FamilyWriter<'_> {
        debug_assert!(valid_metric_name(name), "invalid metric name {name:?}");
        let buf = self.families.entry(name.to_owned()).or_insert_with(|| {
            let mut b = String::new();
            let _ = writeln!(b, "# HELP {name} {}", escape_help(help));
            let _ = writeln!(b, "# TYPE {name} {}", kind.as_str());
            b
        });
        FamilyWriter {
            buf,
            name: name.to_owned(),
        }
    }

    /// The exposition text (families sorted by name).
    pub fn finish(self) -> String {
        let mut out = String::new();
        for block in self.families.into_values() {
            out.push_str(&block);
        }
        out
    }
}

/// Writes the samples of one family.
pub struct FamilyWriter<'a> {
    buf: &'a mut String,
    name: String,
}

impl FamilyWriter<'_> {
    /// One sample line: `<name><suffix>{labels} value`. Labels are written sorted by name
    /// (`le` and `quantile` last), as client_golang does; samples appear in call order, so a
    /// scrape-time collector writes its series in a stable order itself.
    pub fn sample(&mut self, suffix: &str, labels: &[(&str, &str)], value: f64) {
        self.sample_at(suffix, labels, value, None);
    }

    /// As `sample`, with an explicit timestamp in milliseconds since the epoch (what
    /// `/metrics/resource` writes for stats taken at a known time).
    pub fn sample_at(
        &mut self,
        suffix: &str,
        labels: &[(&str, &str)],
        value: f64,
        timestamp_ms: Option<i64>,
    ) {
        let mut sorted = labels.to_vec();
        sorted.sort_by_key(|(k, _)| (matches!(*k, "le" | "quantile"), *k));
        self.buf.push_str(&self.name);
        self.buf.push_str(suffix);
        write_labels(self.buf, &sorted);
        self.buf.push(' ');
        self.buf.push_str(&format_value(value));
        if let Some(ts) = timestamp_ms {
            self.buf.push(' ');
            self.buf.push_str(&ts.to_string());
        }
        self.buf.push('\n');
    }
}

fn write_labels(buf: &mut String, labels: &[(&str, &str)]) {
    if labels.is_empty() {
        return;
    }
    buf.push('{');
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            buf.push(',');
        }
        buf.push_str(k);
        buf.push_str("=\"");
        buf.push_str(&escape_label_value(v));
        buf.push('"');
    }
    buf.push('}');
}

/// Label values: `\` → `\\`, `"` → `\"`, newline → `\n`.
pub fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Help text: `\` → `\\`, newline → `\n`.
pub fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A number as Go's `strconv.FormatFloat(v, 'g', -1, 64)` prints it (what client_golang's text
/// encoder uses): shortest round-trip digits, exponent form below 1e-4 and from 1e6
/// (`1e+06`, `1.5e-05`), `+Inf`, `-Inf`, `NaN`.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if v == 0.0 {
        return "0".to_owned();
    }
    let sci = format!("{v:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return format!("{v}");
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{v}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Name, help and label names of a family.
#[derive(Debug, Clone)]
pub struct Desc {
    pub name: String,
    pub help: String,
    pub labels: Vec<&'static str>,
}

impl Desc {
    pub fn new(name: impl Into<String>, help: impl Into<String>, labels: &[&'static str]) -> Self {
        Self {
            name: name.into(),
            help: help.into(),
            labels: labels.to_vec(),
        }
    }
}

/// Series keyed by label values (in the declared label order).
struct Series<V> {
    desc: Desc,
    values: Mutex<BTreeMap<Vec<String>, V>>,
}

impl<V: Clone> Series<V> {
    fn new(desc: Desc, init: Option<V>) -> Self {
        let mut values = BTreeMap::new();
        // A family without labels has its one series from the start (upstream prints 0).
        if desc.labels.is_empty()
            && let Some(v) = init
        {
            values.insert(Vec::new(), v);
        }
        Self {
            desc,
            values: Mutex::new(values),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Vec<String>, V>> {
        sync::lock(&self.values)
    }

    /// Runs `f` on the series of `labels`, creating it with `init` first.
    fn with(&self, labels: &[&str], init: impl FnOnce() -> V, f: impl FnOnce(&mut V)) {
        if labels.len() != self.desc.labels.len() {
            warn!(metric = %self.desc.name, expected = self.desc.labels.len(), got = labels.len(), "metric used with the wrong number of label values; ignored");
            debug_assert!(false, "{}: wrong number of label values", self.desc.name);
            return;
        }
        let key: Vec<String> = labels.iter().map(|s| (*s).to_owned()).collect();
        let mut map = self.lock();
        f(map.entry(key).or_insert_with(init));
    }

    /// Keeps only the series whose label values (declared order) satisfy `keep`.
    fn retain(&self, mut keep: impl FnMut(&[String]) -> bool) {
        self.lock().retain(|k, _| keep(k));
    }

    fn get(&self, labels: &[&str]) -> Option<V> {
        let key: Vec<String> = labels.iter().map(|s| (*s).to_owned()).collect();
        self.lock().get(&key).cloned()
    }

    /// Label pairs sorted by label name, for each series, in Go's series order.
    fn sorted_snapshot(&self) -> Vec<(Vec<(&'static str, String)>, V)> {
        let mut order: Vec<usize> = (0..self.desc.labels.len()).collect();
        order.sort_by_key(|&i| self.desc.labels[i]);
        let mut rows: Vec<(Vec<(&'static str, String)>, V)> = self
            .lock()
            .iter()
            .map(|(key, v)| {
                let pairs = order
                    .iter()
                    .map(|&i| (self.desc.labels[i], key.get(i).cloned().unwrap_or_default()))
                    .collect();
                (pairs, v.clone())
            })
            .collect();
        rows.sort_by(|a, b| a.0.iter().map(|(_, v)| v).cmp(b.0.iter().map(|(_, v)| v)));
        rows
    }
}

fn as_refs<'a>(pairs: &'a [(&'static str, String)]) -> Vec<(&'a str, &'a str)> {
    pairs.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// A monotonically increasing counter per label set.
pub struct CounterVec(Series<f64>);

impl CounterVec {
    pub fn new(desc: Desc) -> Self {
        Self(Series::new(desc, Some(0.0)))
    }

    pub fn inc(&self, labels: &[&str]) {
        self.add(labels, 1.0);
    }

    /// Adds `v` (negative or NaN values are ignored: counters never go down).
    pub fn add(&self, labels: &[&str], v: f64) {
        if v.is_nan() || v < 0.0 {
            return;
        }
        self.0.with(labels, || 0.0, |c| *c += v);
    }

    /// The current value, if the series exists.
    pub fn get(&self, labels: &[&str]) -> Option<f64> {
        self.0.get(labels)
    }

    /// Drops the series whose label values (declared order) do not satisfy `keep`.
    pub fn retain(&self, keep: impl FnMut(&[String]) -> bool) {
        self.0.retain(keep);
    }

    pub fn desc(&self) -> &Desc {
        &self.0.desc
    }
}

impl Collector for CounterVec {
    fn collect(&self, out: &mut Exposition) {
        let d = &self.0.desc;
        let mut w = out.family(&d.name, &d.help, MetricKind::Counter);
        for (pairs, v) in self.0.sorted_snapshot() {
            w.sample("", &as_refs(&pairs), v);
        }
    }
}

/// A value that goes up and down, per label set.
pub struct GaugeVec(Series<f64>);

impl GaugeVec {
    pub fn new(desc: Desc) -> Self {
        Self(Series::new(desc, Some(0.0)))
    }

    /// A gauge without labels that has no sample until first set (a feature that is off
    /// reports nothing rather than 0).
    pub fn unset(desc: Desc) -> Self {
        Self(Series::new(desc, None))
    }

    pub fn set(&self, labels: &[&str], v: f64) {
        self.0.with(labels, || 0.0, |g| *g = v);
    }

    pub fn add(&self, labels: &[&str], v: f64) {
        self.0.with(labels, || 0.0, |g| *g += v);
    }

    pub fn get(&self, labels: &[&str]) -> Option<f64> {
        self.0.get(labels)
    }

    /// Drops the series whose label values (declared order) do not satisfy `keep`.
    pub fn retain(&self, keep: impl FnMut(&[String]) -> bool) {
        self.0.retain(keep);
    }

    pub fn desc(&self) -> &Desc {
        &self.0.desc
    }
}

impl Collector for GaugeVec {
    fn collect(&self, out: &mut Exposition) {
        let d = &self.0.desc;
        let mut w = out.family(&d.name, &d.help, MetricKind::Gauge);
        for (pairs, v) in self.0.sorted_snapshot() {
            w.sample("", &as_refs(&pairs), v);
        }
    }
}

/// One histogram series: per-bucket (non-cumulative) counts, sum and count.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramData {
    /// `counts[i]` observations fell in bucket `i` (`counts[len]` is above the last bound).
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl HistogramData {
    fn new(buckets: usize) -> Self {
        Self {
            counts: vec![0; buckets + 1],
            sum: 0.0,
            count: 0,
        }
    }
}

/// Observations sorted into fixed buckets, per label set.
pub struct HistogramVec {
    series: Series<HistogramData>,
    buckets: Arc<[f64]>,
}

impl HistogramVec {
    /// `buckets` must be sorted ascending; `+Inf` is implicit.
    pub fn new(desc: Desc, buckets: &[f64]) -> Self {
        let mut b: Vec<f64> = buckets.iter().copied().filter(|v| v.is_finite()).collect();
        b.sort_by(f64::total_cmp);
        b.dedup();
        let init = HistogramData::new(b.len());
        Self {
            series: Series::new(desc, Some(init)),
            buckets: b.into(),
        }
    }

    pub fn observe(&self, labels: &[&str], v: f64) {
        let n = self.buckets.len();
        // `le` is inclusive: the first bucket whose bound is >= v.
        let idx = self.buckets.partition_point(|b| *b < v);
        self.series.with(
            labels,
            || HistogramData::new(n),
            |h| {
                if let Some(c) = h.counts.get_mut(idx) {
                    *c += 1;
                }
                h.sum += v;
                h.count += 1;
            },
        );
    }

    pub fn get(&self, labels: &[&str]) -> Option<HistogramData> {
        self.series.get(labels)
    }

    /// Drops the series whose label values (declared order) do not satisfy `keep`.
    pub fn retain(&self, keep: impl FnMut(&[String]) -> bool) {
        self.series.retain(keep);
    }

    pub fn buckets(&self) -> &[f64] {
        &self.buckets
    }

    pub fn desc(&self) -> &Desc {
        &self.series.desc
    }
}

impl Collector for HistogramVec {
    fn collect(&self, out: &mut Exposition) {
        let d = &self.series.desc;
        let mut w = out.family(&d.name, &d.help, MetricKind::Histogram);
        for (pairs, h) in self.series.sorted_snapshot() {
            let base = as_refs(&pairs);
            let mut cumulative = 0u64;
            for (i, bound) in self.buckets.iter().enumerate() {
                cumulative += h.counts.get(i).copied().unwrap_or(0);
                let le = format_value(*bound);
                let mut labels = base.clone();
                labels.push(("le", &le));
                w.sample("_bucket", &labels, cumulative as f64);
            }
            let mut labels = base.clone();
            labels.push(("le", "+Inf"));
            w.sample("_bucket", &labels, h.count as f64);
            w.sample("_sum", &base, h.sum);
            w.sample("_count", &base, h.count as f64);
        }
    }
}

/// An ordered set of collectors rendered together (one endpoint's worth). Built once, then
/// shared read-only.
#[derive(Clone, Default)]
pub struct Registry {
    collectors: Vec<Arc<dyn Collector>>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, c: Arc<dyn Collector>) {
        self.collectors.push(c);
    }

    /// Writes every collector into `out`.
    pub fn collect_into(&self, out: &mut Exposition) {
        for c in &self.collectors {
            c.collect(out);
        }
    }

    /// The text exposition of every collector.
    pub fn render(&self) -> String {
        let mut out = Exposition::new();
        self.collect_into(&mut out);
        out.finish()
    }
}

impl Collector for Registry {
    fn collect(&self, out: &mut Exposition) {
        self.collect_into(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_value_matches_go() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (0.005, "0.005"),
            (2.5, "2.5"),
            (3600.0, "3600"),
            (999_999.0, "999999"),
            (1e6, "1e+06"),
            (1_517_907_968.0, "1.517907968e+09"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
            (1e21, "1e+21"),
            (123.456, "123.456"),
        ];
        for (v, want) in cases {
            assert_eq!(format_value(*v), *want, "{v}");
        }
    }

    #[test]
    fn exponential_buckets_as_upstream() {
        let b = exponential_buckets(0.005, 2.5, 14);
        assert_eq!(b.len(), 14);
        assert_eq!(b[0], 0.005);
        assert_eq!(format_value(b[1]), "0.0125");
        assert_eq!(format_value(b[6]), "1.220703125");
        assert!((b[13] - 745.058_059_692_382_8).abs() < 1e-9);
    }

    #[test]
    fn escaping_of_label_values_and_help() {
        assert_eq!(escape_label_value(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label_value("x\ny"), "x\\ny");
        assert_eq!(
            escape_help("line\\one\ntwo \"q\""),
            "line\\\\one\\ntwo \"q\""
        );

        let c = CounterVec::new(Desc::new(
            "t_total",
            "Help with \\ and\nnewline.",
            &["path"],
        ));
        c.inc(&["/a\"b\\c\nd"]);
        assert_eq!(
            render(&c),
            "# HELP t_total Help with \\\\ and\\nnewline.\n# TYPE t_total counter\n\
             t_total{path=\"/a\\\"b\\\\c\\nd\"} 1\n"
        );
    }

    fn render(c: &dyn Collector) -> String {
        let mut out = Exposition::new();
        c.collect(&mut out);
        out.finish()
    }

    #[test]
    fn unlabelled_families_start_at_zero_and_labelled_ones_empty() {
        let plain = GaugeVec::new(Desc::new("g", "A gauge.", &[]));
        assert_eq!(render(&plain), "# HELP g A gauge.\n# TYPE g gauge\ng 0\n");
        let vec = GaugeVec::new(Desc::new("gv", "Labelled.", &["x"]));
        assert_eq!(render(&vec), "# HELP gv Labelled.\n# TYPE gv gauge\n");
        let h = HistogramVec::new(Desc::new("h", "H.", &[]), &[1.0]);
        assert_eq!(
            render(&h),
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n"
        );
    }

    #[test]
    fn labels_sorted_by_name_and_series_by_values() {
        // Declared out of name order: rendered as b, then z (Go sorts label pairs by name).
        let c = CounterVec::new(Desc::new("c_total", "C.", &["z", "b"]));
        c.inc(&["1", "y"]);
        c.add(&["2", "x"], 2.0);
        c.inc(&["0", "y"]);
        c.add(&["0", "y"], -5.0); // ignored
        assert_eq!(
            render(&c),
            "# HELP c_total C.\n# TYPE c_total counter\n\
             c_total{b=\"x\",z=\"2\"} 2\n\
             c_total{b=\"y\",z=\"0\"} 1\n\
             c_total{b=\"y\",z=\"1\"} 1\n"
        );
        assert_eq!(c.get(&["2", "x"]), Some(2.0));
        assert_eq!(c.get(&["9", "x"]), None);
    }

    #[test]
    fn histogram_buckets_sum_and_count() {
        let h = HistogramVec::new(
            Desc::new("lat_seconds", "Latency.", &["op"]),
            &[0.1, 1.0, 5.0],
        );
        for v in [0.05, 0.1, 0.7, 3.0, 9.0] {
            h.observe(&["get"], v);
        }
        let data = h.get(&["get"]).expect("series exists");
        assert_eq!(data.counts, vec![2, 1, 1, 1]);
        assert_eq!(data.count, 5);
        assert!((data.sum - 12.85).abs() < 1e-9);
        assert_eq!(
            render(&h),
            "# HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n\
             lat_seconds_bucket{op=\"get\",le=\"0.1\"} 2\n\
             lat_seconds_bucket{op=\"get\",le=\"1\"} 3\n\
             lat_seconds_bucket{op=\"get\",le=\"5\"} 4\n\
             lat_seconds_bucket{op=\"get\",le=\"+Inf\"} 5\n\
             lat_seconds_sum{op=\"get\"} 12.85\n\
             lat_seconds_count{op=\"get\"} 5\n"
        );
    }

    #[test]
    fn registry_sorts_families_by_name_and_merges_duplicates() {
        let mut reg = Registry::new();
        let b = Arc::new(GaugeVec::new(Desc::new("b_metric", "B.", &[])));
        let a = Arc::new(CounterVec::new(Desc::new("a_total", "A.", &[])));
        reg.register(b.clone());
        reg.register(a.clone());
        b.set(&[], 7.5);
        a.inc(&[]);
        assert_eq!(
            reg.render(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n\
             # HELP b_metric B.\n# TYPE b_metric gauge\nb_metric 7.5\n"
        );
        let mut out = Exposition::new();
        out.family("x", "X.", MetricKind::Gauge)
            .sample("", &[("k", "1")], 1.0);
        out.family("x", "ignored second help", MetricKind::Gauge)
            .sample("", &[("k", "2")], 2.0);
        assert_eq!(
            out.finish(),
            "# HELP x X.\n# TYPE x gauge\nx{k=\"1\"} 1\nx{k=\"2\"} 2\n"
        );
    }

    #[test]
    fn scrape_time_samples_sort_labels_and_carry_timestamps() {
        let mut out = Exposition::new();
        let mut w = out.family(
            "container_cpu_usage_seconds_total",
            "Cpu.",
            MetricKind::Counter,
        );
        w.sample_at(
            "",
            &[("pod", "p"), ("container", "c"), ("namespace", "ns")],
            1.5,
            Some(1_700_000_000_123),
        );
        w.sample("_bucket", &[("le", "1"), ("a", "x")], 2.0);
        assert_eq!(
            out.finish(),
            "# HELP container_cpu_usage_seconds_total Cpu.\n\
             # TYPE container_cpu_usage_seconds_total counter\n\
             container_cpu_usage_seconds_total{container=\"c\",namespace=\"ns\",pod=\"p\"} 1.5 1700000000123\n\
             container_cpu_usage_seconds_total_bucket{a=\"x\",le=\"1\"} 2\n"
        );
    }

    #[test]
    fn retain_drops_series() {
        let h = HistogramVec::new(Desc::new("h", "H.", &["pod"]), &[1.0]);
        h.observe(&["a"], 0.5);
        h.observe(&["b"], 0.5);
        h.retain(|l| l[0] != "a");
        assert!(h.get(&["a"]).is_none());
        assert!(h.get(&["b"]).is_some());
    }
}
