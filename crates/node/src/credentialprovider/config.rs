//! Docker config formats (upstream `config.go`): owns the parsing of `.dockerconfigjson`
//! (`{"auths": {location: entry}}`) and legacy `.dockercfg` (`{location: entry}`) bytes, where an
//! entry has `username`/`password` or `auth` = base64(`user:password`) (which wins). Receives
//! untrusted secret bytes; emits a [`DockerConfig`] or a [`ConfigError`] naming the field and
//! what was expected — never a value, since values are credentials.
//!
//! As Go's `encoding/json` into a struct: field names match case-insensitively, unknown fields
//! and `null` are ignored, a field of the wrong type is an error. `auth` is decoded with
//! padding when it ends in `=` (after trimming spaces), without otherwise; CR/LF are skipped.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::{Map, Value};

/// One location's credentials (upstream `DockerConfigEntry`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DockerConfigEntry {
    pub username: String,
    pub password: String,
    pub email: String,
}

impl std::fmt::Debug for DockerConfigEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerConfigEntry")
            .field("username", &format_args!("<{} bytes>", self.username.len()))
            .field("password", &format_args!("<{} bytes>", self.password.len()))
            .finish_non_exhaustive()
    }
}

/// Credentials by registry location (upstream `DockerConfig`).
pub type DockerConfig = BTreeMap<String, DockerConfigEntry>;

/// Why docker config bytes were refused. `field` is a JSON path such as
/// `auths["registry.example.com"].auth`; no variant carries a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid JSON: {0}")]
    Json(String),
    #[error("{field}: expected {expected}")]
    Type {
        field: String,
        expected: &'static str,
    },
    #[error("{field}: illegal base64 data at input byte {offset}")]
    Base64 { field: String, offset: usize },
    #[error("{field}: unable to parse auth field, must be formatted as base64(username:password)")]
    AuthFormat { field: String },
    #[error("{field}: decoded credentials are not valid UTF-8")]
    AuthUtf8 { field: String },
}

/// Parses `.dockerconfigjson` bytes (upstream `DockerConfigJSON`): the `auths` object.
pub fn parse_docker_config_json(data: &[u8]) -> Result<DockerConfig, ConfigError> {
    let top = parse_object(data, "the top level")?;
    match field(&top, "auths") {
        None | Some(Value::Null) => Ok(DockerConfig::new()),
        Some(Value::Object(auths)) => parse_entries(auths, "auths"),
        Some(_) => Err(ConfigError::Type {
            field: "auths".to_owned(),
            expected: "an object",
        }),
    }
}

/// Parses legacy `.dockercfg` bytes: locations at the top level.
pub fn parse_dockercfg(data: &[u8]) -> Result<DockerConfig, ConfigError> {
    let top = parse_object(data, "the top level")?;
    parse_entries(&top, "")
}

fn parse_object(data: &[u8], what: &str) -> Result<Map<String, Value>, ConfigError> {
    // serde_json's syntax errors give a position, never the input.
    match serde_json::from_slice::<Value>(data) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ConfigError::Type {
            field: what.to_owned(),
            expected: "an object",
        }),
        Err(e) => Err(ConfigError::Json(json_error_text(&e))),
    }
}

fn json_error_text(e: &serde_json::Error) -> String {
    let kind = match e.classify() {
        serde_json::error::Category::Eof => "unexpected end of JSON input",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "invalid data",
        serde_json::error::Category::Io => "read error",
    };
    format!("{kind} at line {} column {}", e.line(), e.column())
}

/// A JSON object key as it may appear in a message: escaped and bounded.
fn shown_key(k: &str) -> String {
    const MAX: usize = 128;
    let mut s: String = k.chars().take(MAX).collect();
    if k.chars().count() > MAX {
        s.push('…');
    }
    format!("{:?}", s)
}

/// Go's struct field matching: an exact match first, else ASCII case-insensitive.
fn field<'a>(m: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    m.get(name).or_else(|| {
        m.iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
            .next_back()
    })
}

fn parse_entries(m: &Map<String, Value>, parent: &str) -> Result<DockerConfig, ConfigError> {
    let mut out = DockerConfig::new();
    for (loc, v) in m {
        let path = format!("{parent}[{}]", shown_key(loc));
        let entry = match v {
            Value::Null => DockerConfigEntry::default(),
            Value::Object(e) => parse_entry(e, &path)?,
            _ => {
                return Err(ConfigError::Type {
                    field: path,
                    expected: "an object",
                });
            }
        };
        out.insert(loc.clone(), entry);
    }
    Ok(out)
}

fn string_field(m: &Map<String, Value>, name: &str, path: &str) -> Result<String, ConfigError> {
    match field(m, name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ConfigError::Type {
            field: format!("{path}.{name}"),
            expected: "a string",
        }),
    }
}

fn parse_entry(m: &Map<String, Value>, path: &str) -> Result<DockerConfigEntry, ConfigError> {
    let mut entry = DockerConfigEntry {
        username: string_field(m, "username", path)?,
        password: string_field(m, "password", path)?,
        email: string_field(m, "email", path)?,
    };
    let auth = string_field(m, "auth", path)?;
    if !auth.is_empty() {
        let (user, pass) = decode_auth_field(&auth, &format!("{path}.auth"))?;
        entry.username = user;
        entry.password = pass;
    }
    Ok(entry)
}

/// Go's `base64.StdEncoding`/`RawStdEncoding`: lenient about the unused trailing bits.
fn engine(padded: bool) -> GeneralPurpose {
    let config = GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(if padded {
            DecodePaddingMode::RequireCanonical
        } else {
            DecodePaddingMode::RequireNone
        });
    GeneralPurpose::new(&base64::alphabet::STANDARD, config)
}

/// Upstream `decodeDockerConfigFieldAuth`: base64(`username:password`), split at the first
/// `:`.
fn decode_auth_field(value: &str, field: &str) -> Result<(String, String), ConfigError> {
    let padded = value.trim().ends_with('=');
    // Go's decoder skips CR and LF anywhere in the input.
    let cleaned: String = value
        .chars()
        .filter(|c| !matches!(c, '\r' | '\n'))
        .collect();
    // Go names the first byte outside the alphabet; the crate may report a later position.
    let bad_byte = cleaned
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')));
    let decoded = engine(padded).decode(cleaned.as_bytes()).map_err(|e| {
        let offset = bad_byte.unwrap_or(match e {
            base64::DecodeError::InvalidByte(o, _)
            | base64::DecodeError::InvalidLastSymbol(o, _) => o,
            base64::DecodeError::InvalidLength(n) => n,
            base64::DecodeError::InvalidPadding => cleaned.len(),
        });
        ConfigError::Base64 {
            field: field.to_owned(),
            offset,
        }
    })?;
    let text = String::from_utf8(decoded).map_err(|_| ConfigError::AuthUtf8 {
        field: field.to_owned(),
    })?;
    match text.split_once(':') {
        Some((user, pass)) => Ok((user.to_owned(), pass.to_owned())),
        None => Err(ConfigError::AuthFormat {
            field: field.to_owned(),
        }),
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
