//! Loading of the kubelet config file and `--config-dir` drop-ins.
//! Owns: YAML/JSON parsing, the apiVersion/kind check, unknown-field detection (error, or
//! warning in upstream-compatible lenient mode), relative-path resolution, and the drop-in
//! merge (RFC 7386 JSON merge patch, files in lexical order). Receives paths; emits a decoded,
//! defaulted [`KubeletConfiguration`] plus warnings. Validation is separate (`validate`).
//!
//! Order, as upstream: the base (config file, or flag-era defaults without one) is decoded and
//! defaulted first; drop-ins are then merged over it, each overriding what it names.

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

use super::defaults::{apply_defaults, apply_legacy_defaults};
use super::types::{API_VERSION, KIND, KubeletConfiguration};
use super::{ConfigError, UnknownField};

/// How to treat fields that v1beta1 does not define.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// `true`: unknown fields are an error. `false`: they are dropped with a warning, which is
    /// what the upstream kubelet does for v1beta1 (its strict decode falls back to lenient).
    pub strict: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { strict: true }
    }
}

/// The loaded configuration and any warnings (ignored unknown fields) to log.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: KubeletConfiguration,
    pub warnings: Vec<String>,
}

/// Loads `--config` (optional) and merges `--config-dir` drop-ins (optional), strictly:
/// unknown fields are errors. Without a config file the base is the flag-era defaults.
pub fn load_config(
    path: Option<&Path>,
    config_dir: Option<&Path>,
) -> Result<KubeletConfiguration, ConfigError> {
    load_config_with(path, config_dir, &LoadOptions::default()).map(|l| l.config)
}

/// Upstream `DecodeKubeletConfiguration`: strict first; when strict decoding fails only for
/// unknown or duplicate fields, decode leniently and warn (so a config written for a newer
/// kubelet still starts). Wrong types and bad values fail either way.
pub fn load_config_upstream(
    path: Option<&Path>,
    config_dir: Option<&Path>,
) -> Result<Loaded, ConfigError> {
    match load_config_with(path, config_dir, &LoadOptions { strict: true }) {
        Err(strict @ (ConfigError::UnknownFields { .. } | ConfigError::DuplicateFields { .. })) => {
            // One warning, as upstream logs; it names every unknown and duplicate field.
            let mut loaded = load_config_with(path, config_dir, &LoadOptions { strict: false })?;
            loaded.warnings = vec![format!(
                "using lenient decoding as strict decoding failed: {strict}"
            )];
            Ok(loaded)
        }
        other => other,
    }
}

/// [`load_config`] with explicit options.
pub fn load_config_with(
    path: Option<&Path>,
    config_dir: Option<&Path>,
    opts: &LoadOptions,
) -> Result<Loaded, ConfigError> {
    let mut warnings = Vec::new();
    let mut doc = match path {
        Some(p) => {
            let abs = absolute(p)?;
            let mut doc = read_checked(&abs, opts, &mut warnings)?;
            apply_defaults(&mut doc);
            doc
        }
        None => {
            let mut doc = Map::new();
            apply_defaults(&mut doc);
            apply_legacy_defaults(&mut doc);
            doc
        }
    };
    if let Some(dir) = config_dir {
        for file in drop_in_files(dir)? {
            let patch = read_checked(&file, opts, &mut warnings)?;
            merge_patch(&mut doc, patch);
        }
    }
    doc.insert("apiVersion".into(), Value::String(API_VERSION.into()));
    doc.insert("kind".into(), Value::String(KIND.into()));
    let label = match (path, config_dir) {
        (Some(p), _) => p.display().to_string(),
        (None, Some(d)) => d.display().to_string(),
        (None, None) => "(defaults)".to_string(),
    };
    let mut doc = Value::Object(doc);
    strip_nulls(&mut doc);
    let config =
        serde_path_to_error::deserialize::<_, KubeletConfiguration>(&doc).map_err(|e| {
            ConfigError::Field {
                path: label,
                field: e.path().to_string(),
                message: e.inner().to_string(),
            }
        })?;
    Ok(Loaded { config, warnings })
}

fn absolute(p: &Path) -> Result<PathBuf, ConfigError> {
    std::path::absolute(p).map_err(|source| ConfigError::Io {
        path: p.display().to_string(),
        source,
    })
}

/// Reads one document, checks its type and fields, and resolves its relative paths.
fn read_checked(
    path: &Path,
    opts: &LoadOptions,
    warnings: &mut Vec<String>,
) -> Result<Map<String, Value>, ConfigError> {
    let label = path.display().to_string();
    let (mut doc, duplicates) = parse_document(path, &label)?;
    check_type_meta(&doc, &label)?;
    let unknown = strip_unknown_fields(&mut doc, &label)?;
    if !duplicates.is_empty() {
        if opts.strict {
            return Err(ConfigError::DuplicateFields {
                path: label,
                fields: duplicates,
            });
        }
        for field in duplicates {
            warnings.push(format!(
                "kubelet config {label}: duplicate field {field:?}, the last value is used"
            ));
        }
    }
    if !unknown.is_empty() {
        if opts.strict {
            return Err(ConfigError::UnknownFields {
                path: label,
                fields: unknown,
            });
        }
        for field in unknown {
            warnings.push(format!(
                "kubelet config {label}: ignoring unknown field {field}"
            ));
        }
    }
    let mut map = match doc {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    if let Some(dir) = path.parent() {
        resolve_relative_paths(&mut map, dir);
    }
    Ok(map)
}

/// Parses one file; also returns the paths of keys given twice in one mapping (the last one
/// wins, as in a lenient Go decode).
fn parse_document(path: &Path, label: &str) -> Result<(Value, Vec<String>), ConfigError> {
    let bytes = std::fs::read(path).map_err(|source| ConfigError::Io {
        path: label.into(),
        source,
    })?;
    if bytes.is_empty() {
        return Err(ConfigError::Empty { path: label.into() });
    }
    let syntax = |message: String| ConfigError::Syntax {
        path: label.into(),
        message,
    };
    let text = String::from_utf8(bytes).map_err(|e| syntax(format!("not valid UTF-8: {e}")))?;
    let mut duplicates = Vec::new();
    let value = if text.trim_start().starts_with('{') {
        let mut de = serde_json::Deserializer::from_str(&text);
        serde::de::DeserializeSeed::deserialize(Tolerant::new(&mut duplicates), &mut de)
            .and_then(|v| de.end().map(|()| v))
            .map_err(|e| syntax(format!("invalid JSON: {e}")))?
    } else {
        // Repeated keys reach the reader, which records them (the last one wins); aliases,
        // depth and size are bounded by the YAML expansion budget.
        crate::yaml::with_duplicates(&text, Tolerant::new(&mut duplicates))
            .map_err(|e| syntax(format!("invalid YAML: {e}")))?
    };
    match value {
        Value::Object(_) => Ok((value, duplicates)),
        // A document holding only comments: report the missing apiVersion/kind.
        Value::Null => Ok((Value::Object(Map::new()), duplicates)),
        other => Err(syntax(format!(
            "expected a KubeletConfiguration mapping, found {}",
            kind_of(&other)
        ))),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn check_type_meta(doc: &Value, label: &str) -> Result<(), ConfigError> {
    let err = |message: String| ConfigError::TypeMeta {
        path: label.into(),
        message,
    };
    match doc.get("apiVersion") {
        None | Some(Value::Null) => {
            return Err(err(format!(
                "apiVersion is missing (expected {API_VERSION:?})"
            )));
        }
        Some(Value::String(v)) if v == API_VERSION => {}
        Some(other) => {
            return Err(err(format!(
                "apiVersion {other} is not supported (expected {API_VERSION:?})"
            )));
        }
    }
    match doc.get("kind") {
        None | Some(Value::Null) => Err(err(format!("kind is missing (expected {KIND:?})"))),
        Some(Value::String(k)) if k == KIND => Ok(()),
        Some(other) => Err(err(format!(
            "kind {other} is not supported (expected {KIND:?})"
        ))),
    }
}

/// Deserializes any document into a JSON value, recording keys repeated within one mapping
/// (the last value wins).
struct Tolerant<'a> {
    duplicates: &'a mut Vec<String>,
    path: String,
}

impl<'a> Tolerant<'a> {
    fn new(duplicates: &'a mut Vec<String>) -> Self {
        Tolerant {
            duplicates,
            path: String::new(),
        }
    }
    fn child(&mut self, step: &str) -> Tolerant<'_> {
        let path = if self.path.is_empty() {
            step.to_owned()
        } else {
            format!("{}.{step}", self.path)
        };
        Tolerant {
            duplicates: self.duplicates,
            path,
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Tolerant<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Tolerant<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a configuration value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.child(&out.len().to_string()))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self.child(&key))?;
            if out.insert(key.clone(), value).is_some() {
                let dup = self.child(&key).path;
                self.duplicates.push(dup);
            }
        }
        Ok(Value::Object(out))
    }
}

/// Removes `null` members of objects: decoding `null` into a Go value leaves it unset.
/// (In drop-ins `null` still matters: the merge patch uses it to delete a field.)
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Decodes `doc` repeatedly, removing each unknown field serde reports, until it decodes or
/// fails for another reason (returned as a field error).
fn strip_unknown_fields(doc: &mut Value, label: &str) -> Result<Vec<UnknownField>, ConfigError> {
    let mut unknown = Vec::new();
    loop {
        let mut probe = doc.clone();
        strip_nulls(&mut probe);
        let err = match serde_path_to_error::deserialize::<_, KubeletConfiguration>(&probe) {
            Ok(_) => return Ok(unknown),
            Err(e) => e,
        };
        let message = err.inner().to_string();
        let segments: Vec<serde_path_to_error::Segment> = err.path().iter().cloned().collect();
        let field_error = || ConfigError::Field {
            path: label.into(),
            field: err.path().to_string(),
            message: message.clone(),
        };
        let Some(name) = unknown_field_name(&message) else {
            return Err(field_error());
        };
        if !remove_at(doc, &segments, &name) {
            return Err(field_error());
        }
        let suggestion = suggest(&name, &expected_fields(&message));
        unknown.push(UnknownField {
            path: err.path().to_string(),
            suggestion,
        });
    }
}

/// The field name in serde's "unknown field `x`, expected ..." message.
fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

/// The known field names listed in serde's unknown-field message.
fn expected_fields(message: &str) -> Vec<String> {
    let Some(idx) = message.find(", expected") else {
        return Vec::new();
    };
    message[idx..]
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Removes key `name` from the object at `segments` (whose last step is `name` itself).
fn remove_at(doc: &mut Value, segments: &[serde_path_to_error::Segment], name: &str) -> bool {
    use serde_path_to_error::Segment;
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    if !matches!(last, Segment::Map { key } if key == name) {
        return false;
    }
    let mut cur = doc;
    for seg in parents {
        let next = match seg {
            Segment::Map { key } => cur.get_mut(key.as_str()),
            Segment::Seq { index } => cur.get_mut(*index),
            _ => None,
        };
        match next {
            Some(v) => cur = v,
            None => return false,
        }
    }
    cur.as_object_mut().and_then(|m| m.remove(name)).is_some()
}

/// The closest known name: same letters in another case, or within a small edit distance.
fn suggest(name: &str, known: &[String]) -> Option<String> {
    if let Some(k) = known.iter().find(|k| k.eq_ignore_ascii_case(name)) {
        return Some(k.clone());
    }
    let limit = (name.len() / 4).clamp(1, 3);
    let chars = name.chars().count();
    known
        .iter()
        // The edit distance is at least the length difference: skip hopeless candidates, so a
        // long unknown key costs nothing (found by the `kubelet-config` fuzz target).
        .filter(|k| k.chars().count().abs_diff(chars) <= limit)
        .map(|k| {
            (
                edit_distance(&name.to_ascii_lowercase(), &k.to_ascii_lowercase()),
                k,
            )
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.clone())
}

/// Edit distance counting insertions, deletions, substitutions and adjacent swaps as one.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The fields upstream treats as file paths (`KubeletConfigurationPathRefs`).
const PATH_FIELDS: &[&[&str]] = &[
    &["staticPodPath"],
    &["authentication", "x509", "clientCAFile"],
    &["tlsCertFile"],
    &["tlsPrivateKeyFile"],
    &["resolvConf"],
    &["volumePluginDir"],
    &["podLogsDir"],
];

/// Makes relative paths absolute against `root` (the directory of the file they came from).
/// Empty paths mean "none" and are left alone, as are absolute ones.
fn resolve_relative_paths(doc: &mut Map<String, Value>, root: &Path) {
    for path in PATH_FIELDS {
        let Some((last, parents)) = path.split_last() else {
            continue;
        };
        let mut cur = Some(&mut *doc);
        for key in parents {
            cur = cur
                .and_then(|m| m.get_mut(*key))
                .and_then(Value::as_object_mut);
        }
        if let Some(Value::String(s)) = cur.and_then(|m| m.get_mut(*last))
            && !s.is_empty()
            && !s.starts_with('/')
        {
            *s = clean_join(root, s).display().to_string();
        }
    }
}

/// `root` joined with `rel`, lexically cleaned like Go's `filepath.Join`.
fn clean_join(root: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for comp in root.join(rel).components() {
        match comp {
            Component::CurDir => {}
            // `root` is absolute, so popping never goes above "/".
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Drop-in files: every `*.conf` under `dir`, walked depth-first in lexical order (as Go's
/// `filepath.WalkDir`). Symlinks are not descended into.
fn drop_in_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let mut out = Vec::new();
    let meta = std::fs::metadata(dir).map_err(|source| dir_err(dir, source))?;
    if !meta.is_dir() {
        if is_conf(dir) {
            out.push(dir.to_path_buf());
        }
        return Ok(out);
    }
    walk(dir, &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
    let mut entries = std::fs::read_dir(dir)
        .map_err(|source| dir_err(dir, source))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| dir_err(dir, source))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let file_type = entry.file_type().map_err(|source| dir_err(&path, source))?;
        if file_type.is_dir() {
            walk(&path, out)?;
        } else if is_conf(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn is_conf(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".conf"))
}

fn dir_err(path: &Path, source: std::io::Error) -> ConfigError {
    ConfigError::ConfigDir {
        path: path.display().to_string(),
        source,
    }
}

/// RFC 7386 merge: objects merge key by key, `null` removes, anything else replaces.
fn merge_patch(target: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.remove(&key);
            }
            Value::Object(p) => match target.get_mut(&key) {
                Some(Value::Object(t)) => merge_patch(t, p),
                _ => {
                    let mut fresh = Map::new();
                    merge_patch(&mut fresh, p);
                    target.insert(key, Value::Object(fresh));
                }
            },
            other => {
                target.insert(key, other);
            }
        }
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
