//! KubeletConfiguration (`kubelet.config.k8s.io/v1beta1`): types, loading, defaults, checks.
//! Owns: reading `--config` and `--config-dir` drop-ins, upstream defaulting and validation.
//! Receives file paths (and, via the binary's CLI, flag overrides applied on top); emits the
//! effective [`KubeletConfiguration`] every other module reads, or a [`ConfigError`] that
//! names the file and field at fault.

mod defaults;
mod duration;
pub mod features;
mod load;
mod quantity;
pub mod support;
mod types;
mod validate;
pub mod yaml;

pub use defaults::{
    DEFAULT_CONTAINER_RUNTIME_ENDPOINT, DEFAULT_EVICTION_HARD, DEFAULT_POD_LOGS_DIR,
    DEFAULT_RESOLV_CONF, DEFAULT_VOLUME_PLUGIN_DIR, LEGACY_READ_ONLY_PORT, apply_gated_defaults,
};
pub use duration::{Duration, ParseDurationError, parse_go_duration};
pub use features::{Feature, FeatureGateError, FeatureGates};
pub use load::{LoadOptions, Loaded, load_config, load_config_upstream, load_config_with};
pub use quantity::{Quantity, QuantityError, ThresholdError, ThresholdValue};
pub use types::*;
pub use validate::{EVICTION_SIGNALS, validate};

use std::fmt;

/// A field present in a config document but not in v1beta1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownField {
    /// JSON path of the field, e.g. `authentication.webhook.cacheTtl`.
    pub path: String,
    /// The closest known field name at that level, if one is close.
    pub suggestion: Option<String>,
}

impl fmt::Display for UnknownField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.path)?;
        if let Some(s) = &self.suggestion {
            write!(f, " (did you mean {s:?}?)")?;
        }
        Ok(())
    }
}

fn list_unknown(fields: &[UnknownField]) -> String {
    let plural = if fields.len() == 1 { "" } else { "s" };
    let names: Vec<String> = fields.iter().map(ToString::to_string).collect();
    format!("unknown field{plural} {}", names.join(", "))
}

fn list_invalid(errors: &[String]) -> String {
    errors.iter().map(|e| format!("\n  - {e}")).collect()
}

/// Everything that can go wrong turning files and flags into a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("kubelet config {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("kubelet config {path}: file is empty")]
    Empty { path: String },
    /// Not parsable as YAML/JSON, or not a mapping.
    #[error("kubelet config {path}: {message}")]
    Syntax { path: String, message: String },
    /// `apiVersion`/`kind` missing or not `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`.
    #[error("kubelet config {path}: {message}")]
    TypeMeta { path: String, message: String },
    /// A field holds a value of the wrong type or an unparsable duration/quantity.
    #[error("kubelet config {path}: {field}: {message}")]
    Field {
        path: String,
        field: String,
        message: String,
    },
    #[error("kubelet config {path}: {}", list_unknown(.fields))]
    UnknownFields {
        path: String,
        fields: Vec<UnknownField>,
    },
    /// A key given twice in one mapping (strict decoding).
    #[error("kubelet config {path}: duplicate field{} {}", if .fields.len() == 1 { "" } else { "s" }, .fields.iter().map(|f| format!("{f:?}")).collect::<Vec<_>>().join(", "))]
    DuplicateFields { path: String, fields: Vec<String> },
    #[error("kubelet config dir {path}: {source}")]
    ConfigDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Validation failures, all of them, each naming its field.
    #[error("invalid kubelet configuration:{}", list_invalid(.0))]
    Invalid(Vec<String>),
    /// Fields set to values rkubelet does not implement (see `support`), all of them.
    #[error("unsupported kubelet configuration:{}", list_invalid(.0))]
    Unsupported(Vec<String>),
    /// A command-line flag value that parsed but is not acceptable.
    #[error("invalid value for --{flag}: {message}")]
    Flag { flag: String, message: String },
    #[error("{0}")]
    Hostname(String),
}
