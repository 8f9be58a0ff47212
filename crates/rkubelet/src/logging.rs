//! klog-compatible log output (upstream `k8s.io/klog/v2` text format and component-base's
//! `logs/json` format) as a `tracing-subscriber` event formatter.
//! Owns: the line layout of both formats, the `-v` → level filter, and the mapping of tracing
//! levels to klog severities and verbosities. Receives tracing events (message, fields, level,
//! call site); emits one line per event on stderr.
//!
//! Levels: ERROR → klog `E` (JSON: no `v`, as zapr's errors), WARN → `W` (`v` 0), INFO → `I`
//! (`v` 0), DEBUG → `I` at verbosity 4, TRACE → `I` at verbosity 6. `-v N` shows DEBUG from 4 and
//! TRACE from 6; other crates (HTTP, TLS, kube-rs) log warnings only. `RUST_LOG` overrides.
//! A field named `error` is written as `err`, upstream's key for errors.

use std::fmt::{self, Write as _};

use kubelet::gostr::go_quote;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// `logging.format` / `--logging-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// Upstream's registry of formats (the configuration's validation refuses others first,
    /// with the same message).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "" | "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!(
                "logging.format: Unsupported value: {}: supported values: \"text\", \"json\"",
                go_quote(other)
            )),
        }
    }
}

/// The klog verbosity a tracing level stands for.
pub fn verbosity_of(level: &Level) -> u32 {
    match *level {
        Level::TRACE => 6,
        Level::DEBUG => 4,
        _ => 0,
    }
}

/// The default filter for `-v verbosity`: rkubelet's own crates at the level the verbosity
/// shows, everything else at warnings.
pub fn default_filter(verbosity: u32) -> String {
    let level = match verbosity {
        0..=3 => "info",
        4..=5 => "debug",
        _ => "trace",
    };
    format!("warn,rkubelet={level},kubelet={level},rkubelet_cri={level}")
}

/// Installs the global subscriber: stderr, `format`, the `-v` filter (`RUST_LOG` overrides).
pub fn init(format: LogFormat, verbosity: u32) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter(verbosity)));
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(Klog::new(format));
    // A second initialisation (tests) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(layer)
        .try_init();
}

/// The event formatter.
#[derive(Debug, Clone)]
pub struct Klog {
    format: LogFormat,
    pid: u32,
}

impl Klog {
    pub fn new(format: LogFormat) -> Self {
        Self {
            format,
            pid: std::process::id(),
        }
    }
}

/// A field value, typed as tracing recorded it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
    /// `?x`, `%x` and errors: written as a quoted string.
    Text(String),
}

/// What one event carries.
#[derive(Debug, Default)]
pub struct Record {
    pub message: String,
    pub fields: Vec<(String, Value)>,
    /// `log` crate records carry their call site as fields.
    log_file: Option<String>,
    log_line: Option<u64>,
    /// The macro records the event's message first; a later field that is also named
    /// `message` (`info!(message, "evicting pod")`) is an ordinary key/value.
    message_seen: bool,
}

impl Record {
    fn push(&mut self, field: &Field, value: Value) {
        let name = field.name();
        match (name, value) {
            ("message", Value::Str(s) | Value::Text(s)) if !self.message_seen => {
                self.message_seen = true;
                self.message = s;
            }
            ("log.file", Value::Str(s) | Value::Text(s)) => self.log_file = Some(s),
            ("log.line", Value::U64(n)) => self.log_line = Some(n),
            ("log.line", Value::I64(n)) => self.log_line = u64::try_from(n).ok(),
            (n, _) if n.starts_with("log.") => {}
            ("error", v) => self.fields.push(("err".to_owned(), v)),
            (n, v) => self.fields.push((n.to_owned(), v)),
        }
    }
}

impl Visit for Record {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, Value::Str(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, Value::I64(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, Value::U64(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, Value::F64(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, Value::Bool(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, Value::Text(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, Value::Text(format!("{value:?}")));
    }
}

/// klog's severity letter.
fn severity(level: &Level) -> char {
    match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

/// The last `n` components of a source path (`/`-separated).
fn path_tail(path: &str, n: usize) -> &str {
    let mut cut = path.len();
    for _ in 0..n {
        match path[..cut].rfind('/') {
            Some(i) => cut = i,
            None => return path,
        }
    }
    &path[cut + 1..]
}

/// klog's text line: `Lmmdd hh:mm:ss.uuuuuu PID file:line] "msg" key=value ...`, with the
/// pid right-aligned in 7 columns and the file's base name.
pub fn text_line<Tz: chrono::TimeZone>(
    time: &chrono::DateTime<Tz>,
    pid: u32,
    level: &Level,
    file: &str,
    line: u32,
    record: &Record,
) -> String
where
    Tz::Offset: fmt::Display,
{
    let mut out = String::with_capacity(128);
    let _ = write!(
        out,
        "{}{} {:>7} {}:{}] ",
        severity(level),
        time.format("%m%d %H:%M:%S%.6f"),
        pid,
        path_tail(file, 1),
        line
    );
    out.push_str(&go_quote(&record.message));
    for (key, value) in &record.fields {
        out.push(' ');
        out.push_str(key);
        match value {
            Value::Str(s) | Value::Text(s) => write_text_value(&mut out, s),
            Value::I64(n) => {
                let _ = write!(out, "={n}");
            }
            Value::U64(n) => {
                let _ = write!(out, "={n}");
            }
            Value::F64(n) => {
                let _ = write!(out, "={n}");
            }
            Value::Bool(b) => {
                let _ = write!(out, "={b}");
            }
        }
    }
    out.push('\n');
    out
}

/// klog's string value: quoted on one line, or the `=<` block with one tab-indented line per
/// line of a multi-line value.
fn write_text_value(out: &mut String, s: &str) {
    if !s.contains('\n') {
        out.push('=');
        out.push_str(&go_quote(s));
        return;
    }
    out.push_str("=<\n");
    let mut rest = s;
    while let Some(i) = rest.find('\n') {
        out.push('\t');
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
    }
    if rest.is_empty() {
        out.push_str(" >");
    } else {
        out.push('\t');
        out.push_str(rest);
        out.push_str("\n >");
    }
}

/// component-base's JSON line (zap with `ts` in float milliseconds since the epoch, `caller`
/// as `dir/file:line`, `msg`, `v` except on errors, then the fields in order).
pub fn json_line(
    unix_nanos: i128,
    level: &Level,
    file: &str,
    line: u32,
    record: &Record,
) -> String {
    let mut out = String::with_capacity(160);
    // Millisecond float precision is what upstream writes; the cast is the point here.
    #[allow(clippy::cast_precision_loss)]
    let ts = unix_nanos as f64 / 1e6;
    let _ = write!(out, "{{\"ts\":{ts}");
    let _ = write!(
        out,
        ",\"caller\":{}",
        json_str(&format!("{}:{line}", path_tail(file, 2)))
    );
    let _ = write!(out, ",\"msg\":{}", json_str(&record.message));
    if *level != Level::ERROR {
        let _ = write!(out, ",\"v\":{}", verbosity_of(level));
    }
    for (key, value) in &record.fields {
        let _ = write!(out, ",{}:", json_str(key));
        match value {
            Value::Str(s) | Value::Text(s) => out.push_str(&json_str(s)),
            Value::I64(n) => {
                let _ = write!(out, "{n}");
            }
            Value::U64(n) => {
                let _ = write!(out, "{n}");
            }
            Value::F64(n) => out.push_str(
                &serde_json::Number::from_f64(*n)
                    .map_or_else(|| json_str(&n.to_string()), |n| n.to_string()),
            ),
            Value::Bool(b) => {
                let _ = write!(out, "{b}");
            }
        }
    }
    out.push_str("}\n");
    out
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

impl<S, N> FormatEvent<S, N> for Klog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut record = Record::default();
        event.record(&mut record);
        let meta = event.metadata();
        let file = record
            .log_file
            .clone()
            .or_else(|| meta.file().map(str::to_owned))
            .unwrap_or_else(|| "???".to_owned());
        let line = record
            .log_line
            .and_then(|l| u32::try_from(l).ok())
            .or(meta.line())
            .unwrap_or(1);
        let text = match self.format {
            LogFormat::Text => text_line(
                &chrono::Local::now(),
                self.pid,
                meta.level(),
                &file,
                line,
                &record,
            ),
            LogFormat::Json => {
                let now = chrono::Utc::now();
                let nanos = i128::from(now.timestamp()) * 1_000_000_000
                    + i128::from(now.timestamp_subsec_nanos());
                json_line(nanos, meta.level(), &file, line, &record)
            }
        };
        writer.write_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn record(message: &str, fields: &[(&str, Value)]) -> Record {
        Record {
            message: message.to_owned(),
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            ..Record::default()
        }
    }

    #[test]
    fn text_line_has_klogs_header_and_structured_values() {
        let t = chrono::Utc
            .with_ymd_and_hms(2026, 11, 26, 0, 37, 0)
            .unwrap()
            .checked_add_signed(chrono::TimeDelta::microseconds(123_456))
            .unwrap();
        let r = record(
            "Pod status updated",
            &[
                ("pod", Value::Text("kube-system/etcd-node".into())),
                ("status", Value::U64(101)),
                ("ready", Value::Bool(true)),
                ("delta", Value::I64(-3)),
                ("q", Value::Str("say \"hi\"\tnow".into())),
            ],
        );
        assert_eq!(
            text_line(
                &t,
                1234,
                &Level::INFO,
                "crates/pods/src/status/manager.rs",
                123,
                &r
            ),
            "I1126 00:37:00.123456    1234 manager.rs:123] \"Pod status updated\" pod=\"kube-system/etcd-node\" status=101 ready=true delta=-3 q=\"say \\\"hi\\\"\\tnow\"\n"
        );
        let r = record("boom", &[("err", Value::Text("no such file".into()))]);
        assert_eq!(
            text_line(&t, 7, &Level::ERROR, "main.rs", 9, &r),
            "E1126 00:37:00.123456       7 main.rs:9] \"boom\" err=\"no such file\"\n"
        );
        assert!(text_line(&t, 7, &Level::WARN, "a.rs", 1, &r).starts_with("W1126 "));
        assert!(text_line(&t, 7, &Level::DEBUG, "a.rs", 1, &r).starts_with("I1126 "));
        // A pid wider than the column is not cut.
        assert!(
            text_line(&t, 12_345_678, &Level::INFO, "a.rs", 1, &r).contains(" 12345678 a.rs:1] ")
        );
    }

    #[test]
    fn multi_line_values_use_klogs_block_form() {
        let t = chrono::Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let r = record(
            "m",
            &[
                ("out", Value::Str("a\nb".into())),
                ("x", Value::Str("c\n".into())),
            ],
        );
        assert_eq!(
            text_line(&t, 1, &Level::INFO, "f.rs", 2, &r),
            "I0102 03:04:05.000000       1 f.rs:2] \"m\" out=<\n\ta\n\tb\n > x=<\n\tc\n >\n"
        );
    }

    /// Attack: a pod-controlled string (a container message, a file name) cannot forge a log
    /// line: messages are quoted, multi-line values indented, JSON escaped.
    #[test]
    fn hostile_values_cannot_forge_log_lines() {
        let forged = "x\nE1126 00:00:00.000000       1 forged.rs:1] \"pwned\"\r\n";
        let t = chrono::Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let r = record(forged, &[("msg", Value::Text(forged.into()))]);
        let text = text_line(&t, 1, &Level::INFO, "f.rs", 2, &r);
        let mut lines = text.lines();
        assert!(lines.next().unwrap().starts_with("I0102 03:04:05.000000 "));
        for line in lines {
            assert!(line.starts_with('\t') || line.starts_with(" >"), "{line:?}");
        }
        let json = json_line(0, &Level::INFO, "f.rs", 2, &r);
        assert_eq!(json.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["msg"], forged);
    }

    #[test]
    fn json_line_uses_component_bases_field_names() {
        let r = record(
            "Pod status updated",
            &[
                ("pod", Value::Text("default/web".into())),
                ("restarts", Value::I64(2)),
                ("ok", Value::Bool(false)),
                ("ratio", Value::F64(0.5)),
            ],
        );
        let nanos = 1_764_117_420_123_456_789_i128;
        let line = json_line(
            nanos,
            &Level::DEBUG,
            "crates/pods/src/status/manager.rs",
            42,
            &r,
        );
        assert!(line.ends_with("}\n"));
        assert_eq!(
            line,
            "{\"ts\":1764117420123.4568,\"caller\":\"status/manager.rs:42\",\"msg\":\"Pod status updated\",\"v\":4,\"pod\":\"default/web\",\"restarts\":2,\"ok\":false,\"ratio\":0.5}\n"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["v"], 4);
        // Errors carry no verbosity, as zapr writes them.
        let r = record("failed", &[("err", Value::Text("x".into()))]);
        let mut v: serde_json::Value =
            serde_json::from_str(&json_line(0, &Level::ERROR, "main.rs", 1, &r)).unwrap();
        assert_eq!(v.as_object_mut().unwrap().remove("ts"), Some(0.into()));
        assert_eq!(
            v,
            serde_json::json!({"caller": "main.rs:1", "msg": "failed", "err": "x"})
        );
        let v: serde_json::Value =
            serde_json::from_str(&json_line(0, &Level::WARN, "a/b/c.rs", 1, &r)).unwrap();
        assert_eq!(
            (v["v"].as_u64(), v["caller"].as_str()),
            (Some(0), Some("b/c.rs:1"))
        );
    }

    #[test]
    fn formats_parse_as_upstreams_registry() {
        assert_eq!(LogFormat::parse("text"), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(""), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse("json"), Ok(LogFormat::Json));
        assert_eq!(
            LogFormat::parse("xml").unwrap_err(),
            "logging.format: Unsupported value: \"xml\": supported values: \"text\", \"json\""
        );
    }

    #[test]
    fn verbosity_maps_to_levels() {
        assert_eq!(
            default_filter(0),
            "warn,rkubelet=info,kubelet=info,rkubelet_cri=info"
        );
        assert!(default_filter(3).contains("kubelet=info"));
        assert!(default_filter(4).contains("kubelet=debug"));
        assert!(default_filter(6).contains("kubelet=trace"));
        assert_eq!(verbosity_of(&Level::DEBUG), 4);
        assert_eq!(verbosity_of(&Level::WARN), 0);
    }

    /// The formatter inside a real subscriber: fields, `error` renamed, call site of this file.
    #[test]
    fn events_render_through_the_subscriber() {
        use std::sync::{Arc, Mutex};
        use tracing_subscriber::layer::SubscriberExt;
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        for format in [LogFormat::Text, LogFormat::Json] {
            let buf = Buf::default();
            let sink = buf.clone();
            let subscriber = tracing_subscriber::registry().with(
                tracing_subscriber::fmt::layer()
                    .with_writer(move || sink.clone())
                    .event_format(Klog::new(format)),
            );
            let err = std::io::Error::other("disk on fire");
            tracing::subscriber::with_default(subscriber, || {
                tracing::warn!(error = %err, pod = "default/web", n = 3, "sync failed for {}", "web");
            });
            let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
            // A field that is itself called `message` stays a field; the text stays the text.
            let sink = Buf::default();
            let writer = sink.clone();
            let subscriber = tracing_subscriber::registry().with(
                tracing_subscriber::fmt::layer()
                    .with_writer(move || writer.clone())
                    .event_format(Klog::new(format)),
            );
            let message = "The node was low on resource";
            tracing::subscriber::with_default(subscriber, || {
                tracing::info!(grace_period = 1, message, "evicting pod");
            });
            let line = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
            match format {
                LogFormat::Text => assert!(
                    line.ends_with("] \"evicting pod\" grace_period=1 message=\"The node was low on resource\"\n"),
                    "{line}"
                ),
                LogFormat::Json => {
                    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                    assert_eq!(v["msg"], "evicting pod", "{line}");
                    assert_eq!(v["message"], message, "{line}");
                }
            }
            match format {
                LogFormat::Text => {
                    assert!(out.starts_with('W'), "{out}");
                    let body = out.split_once("logging.rs:").unwrap().1;
                    assert!(
                        body.ends_with("] \"sync failed for web\" err=\"disk on fire\" pod=\"default/web\" n=3\n"),
                        "{out}"
                    );
                    assert!(out.contains(&format!(" {} logging.rs:", std::process::id())));
                }
                LogFormat::Json => {
                    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
                    assert_eq!(v["msg"], "sync failed for web");
                    assert_eq!(v["err"], "disk on fire");
                    assert_eq!(v["n"], 3);
                    assert_eq!(v["v"], 0);
                    assert!(v["caller"].as_str().unwrap().starts_with("src/logging.rs:"));
                    assert!(v["ts"].as_f64().unwrap() > 1.7e12, "milliseconds: {v}");
                }
            }
        }
    }
}
