//! Bounded YAML: the one place the kubelet parses or writes YAML. Receives text from files and
//! bodies an outsider may have written (static pod manifests, `staticPodURL` bodies, the config
//! file and its drop-ins, the bootstrap kubeconfig, the credential provider config); emits
//! `serde` values, or a [`serde_saphyr::Error`] naming what was exceeded and where.
//!
//! The size limits on the input (10 MiB for a manifest) do not bound what a YAML document
//! *expands* to: an anchor of 1 MiB referenced a million times is a few MiB of text and a
//! terabyte of values. Every parse here therefore runs under an expansion budget that counts
//! the nodes and scalar bytes produced, alias replays included, and the nesting depth; a
//! document over any of them is refused while it is being read, before the memory is spent.
//!
//! Scalars are resolved as YAML 1.2 (the schema the kubelet always used): only `true`/`false`
//! are booleans, `0644` and `1_000` stay strings.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_saphyr::{Budget, DuplicateKeyPolicy, Options};

/// Most nodes (mappings, sequences, scalars) one parse may produce, alias replays included.
/// A 110-pod `PodList` is ~30,000; at ~100 bytes a decoded node, the cap bounds memory to
/// tens of MiB.
pub const MAX_NODES: usize = 500_000;

/// Most scalar bytes one parse may produce, alias replays included: the largest manifest
/// (10 MiB) plus room for ordinary anchors.
pub const MAX_SCALAR_BYTES: usize = 32 * 1024 * 1024;

/// Deepest nesting of mappings and sequences. A pod is about a dozen levels deep.
pub const MAX_DEPTH: usize = 64;

/// The parser options of every read: the expansion budget, YAML 1.2 scalars, no source
/// snippets in errors (they would echo outside text into logs). `duplicates` says how keys
/// repeated in one mapping are handled.
pub fn options(duplicates: DuplicateKeyPolicy) -> Options {
    let mut budget = Budget::default();
    budget.max_nodes = MAX_NODES;
    budget.max_events = MAX_NODES.saturating_mul(2);
    budget.max_total_scalar_bytes = MAX_SCALAR_BYTES;
    budget.max_depth = MAX_DEPTH;
    let mut opts = Options::default();
    opts.budget = Some(budget);
    opts.alias_limits.max_total_replayed_events = MAX_NODES;
    opts.duplicate_keys = duplicates;
    opts.strict_booleans = true;
    opts.leading_zero_numbers_as_strings = true;
    opts.underscored_numbers_as_strings = true;
    opts.with_snippet = false;
    opts
}

/// Decodes one YAML document into `T`; a key repeated in one mapping is an error.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, options(DuplicateKeyPolicy::Error))
}

/// [`from_str`] for bytes (which must be UTF-8).
pub fn from_slice<T: DeserializeOwned>(data: &[u8]) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_slice_with_options(data, options(DuplicateKeyPolicy::Error))
}

/// Decodes every document of a `---`-separated stream; empty documents are skipped. The
/// budget covers the whole stream.
pub fn documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, serde_saphyr::Error> {
    serde_saphyr::from_str_multiple_with_options::<T, Vec<T>>(
        text,
        options(DuplicateKeyPolicy::Error),
    )
}

/// Runs `seed` over the single document in `text` with repeated keys passed to it one by one
/// (for a reader that records them, as a lenient Go decoder does).
pub fn with_duplicates<S, V>(text: &str, seed: S) -> Result<V, serde_saphyr::Error>
where
    S: for<'de> serde::de::DeserializeSeed<'de, Value = V>,
{
    serde_saphyr::with_deserializer_from_str_with_options(
        text,
        options(DuplicateKeyPolicy::PassThrough),
        |de| seed.deserialize(de),
    )
}

/// Writes `value` as one YAML document.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(value)
}

#[cfg(any(test, feature = "test-util"))]
#[path = "yaml_testdata.rs"]
pub mod testdata;

#[cfg(test)]
#[path = "yaml_tests.rs"]
mod tests;
