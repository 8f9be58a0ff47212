//! Pod fields this kubelet does not know. Receives a pod's serialized form (a static manifest's
//! document, a `staticPodURL` item, an API list or watch object); emits the typed `Pod` plus
//! the paths of every field the `k8s-openapi` types dropped, split into the ones that change
//! what runs (refused) and the rest (logged once by name).
//!
//! The Go kubelet ignores unknown fields too, but it knows every field of its own version; this
//! kubelet's types may lag, and a pod whose container, volume, env source, security context,
//! lifecycle or resources carry a field it cannot see would run with part of its meaning
//! missing (a projected `podCertificate`, an env `fileKeyRef`, `restartPolicyRules`). Such a pod
//! is refused with the field named: a static pod at decode ([`super::decode`]); an API pod at
//! admission ([`UnknownFieldsAdmit`], status `Failed`, reason [`REASON`]), through the registry
//! the API source fills ([`UnknownFields`]). Deliberate divergence from upstream (docs/refused.md).
//!
//! Detection rides on the one decode the pod goes through anyway: `serde_ignored` reports each
//! key the typed visitor skips, so no second parse and no comparison of trees.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};
use tracing::warn;

use crate::admit::{AdmitHandler, Rejection};
use crate::sync;
use crate::types::PodExt;

/// The rejection reason of an API pod refused for an unknown field (rkubelet's own).
pub const REASON: &str = "UnknownPodField";

/// The `spec` subtrees whose every field changes what the kubelet runs.
const REFUSED_SUBTREES: &[&str] = &[
    "containers",
    "initContainers",
    "ephemeralContainers",
    "volumes",
    "securityContext",
    "resources",
];

/// Top-level `PodSpec` fields of later Kubernetes versions that change what the kubelet runs
/// (other unknown top-level spec fields, e.g. scheduling ones, are only logged).
const REFUSED_SPEC_FIELDS: &[&str] = &["hostnameOverride"];

/// Most distinct field paths logged (each once per process); past it, nothing more is logged.
const MAX_LOGGED: usize = 1024;

/// The unknown fields found in one pod, as paths like `spec.containers[0].env[1].valueFrom.x`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unknown {
    /// Fields that make the pod refused.
    pub refused: Vec<String>,
    /// Fields that are only logged.
    pub ignored: Vec<String>,
}

impl Unknown {
    fn push(&mut self, path: Vec<Step>) {
        let text = render(&path);
        if is_refused(&path) {
            self.refused.push(text);
        } else {
            self.ignored.push(text);
        }
    }

    /// The refusal message naming every refused field (each path after `prefix`, e.g.
    /// `items[0].` in a list), or `None` when nothing is refused.
    pub fn refusal(&self, prefix: &str) -> Option<String> {
        let (what, them) = match self.refused.len() {
            0 => return None,
            1 => ("field", "it"),
            _ => ("fields", "them"),
        };
        let paths: Vec<String> = self
            .refused
            .iter()
            .map(|p| format!("{prefix}{p}"))
            .collect();
        Some(format!(
            "unknown {what} {}: this kubelet does not know {them} and would run the pod without {them}",
            paths.join(", ")
        ))
    }

    /// Logs each ignored field path once per process (indices folded: `containers[*]`).
    pub fn log_ignored(&self, pod: &str) {
        for path in &self.ignored {
            if first_sighting(path) {
                warn!(pod, field = %path, "ignoring a pod field this kubelet does not know (logged once per field)");
            }
        }
    }
}

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

fn steps(path: &serde_ignored::Path<'_>) -> Vec<Step> {
    let mut out = Vec::new();
    let mut cur = path;
    loop {
        match cur {
            serde_ignored::Path::Root => break,
            serde_ignored::Path::Seq { parent, index } => {
                out.push(Step::Index(*index));
                cur = parent;
            }
            serde_ignored::Path::Map { parent, key } => {
                out.push(Step::Key(key.clone()));
                cur = parent;
            }
            serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => cur = parent,
        }
    }
    out.reverse();
    out
}

fn render(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Key(k) if s.is_empty() => s.push_str(k),
            Step::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Step::Index(i) => {
                let _ = write!(s, "[{i}]");
            }
        }
    }
    s
}

fn is_refused(path: &[Step]) -> bool {
    match path {
        [Step::Key(spec), Step::Key(field), rest @ ..] if spec == "spec" => {
            REFUSED_SUBTREES.contains(&field.as_str())
                || (rest.is_empty() && REFUSED_SPEC_FIELDS.contains(&field.as_str()))
        }
        _ => false,
    }
}

/// `true` the first time a path (indices folded) is seen in this process.
fn first_sighting(path: &str) -> bool {
    static LOGGED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let mut folded = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                folded.push_str("[*]");
            }
            ']' => in_index = false,
            _ if in_index => {}
            c => folded.push(c),
        }
    }
    let mut logged = sync::lock(&LOGGED);
    if logged.len() >= MAX_LOGGED || logged.contains(&folded) {
        return false;
    }
    logged.insert(folded)
}

/// Decodes a pod from `de`, collecting the fields its types do not have.
pub fn decode_pod<'de, D: Deserializer<'de>>(de: D) -> Result<(Pod, Unknown), D::Error> {
    let mut unknown = Unknown::default();
    let pod = serde_ignored::deserialize(de, |path| unknown.push(steps(&path)))?;
    Ok((pod, unknown))
}

/// A pod as the API server sent it, with the fields this kubelet's types dropped: what the API
/// source lists and watches instead of `Pod` (one decode, the unknown keys noted on the way).
#[derive(Debug, Clone, Default)]
pub struct CheckedPod {
    pub pod: Pod,
    pub unknown: Unknown,
}

impl<'de> Deserialize<'de> for CheckedPod {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let (pod, unknown) = decode_pod(de)?;
        Ok(CheckedPod { pod, unknown })
    }
}

impl k8s_openapi::Resource for CheckedPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for CheckedPod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.pod.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.pod.metadata
    }
}

/// The refusals of the API pods currently known, by pod UID: filled by the API source, read
/// by [`UnknownFieldsAdmit`]. Holds only pods with a refused field, and only while the API
/// source has them.
#[derive(Debug, Clone, Default)]
pub struct UnknownFields {
    refused: Arc<Mutex<HashMap<String, String>>>,
}

impl UnknownFields {
    /// Records what `checked` says about its pod (logging its ignored fields once) and returns
    /// the pod.
    pub fn observe(&self, checked: CheckedPod) -> Pod {
        let CheckedPod { pod, unknown } = checked;
        unknown.log_ignored(&pod.full_name());
        let mut map = sync::lock(&self.refused);
        match unknown.refusal("") {
            Some(message) => {
                map.insert(pod.uid().to_owned(), message);
            }
            None => {
                map.remove(pod.uid());
            }
        }
        pod
    }

    /// Forgets a pod the API source no longer has.
    pub fn forget(&self, uid: &str) {
        sync::lock(&self.refused).remove(uid);
    }

    /// Keeps only the pods `keep` accepts (after a relist).
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        sync::lock(&self.refused).retain(|uid, _| keep(uid));
    }

    /// The refusal message of pod `uid`, if it has a refused field.
    pub fn refusal(&self, uid: &str) -> Option<String> {
        sync::lock(&self.refused).get(uid).cloned()
    }
}

/// Refuses API pods with a field this kubelet does not know where it would change what runs.
#[derive(Debug, Clone, Default)]
pub struct UnknownFieldsAdmit {
    pub fields: UnknownFields,
}

impl AdmitHandler for UnknownFieldsAdmit {
    fn admit(&self, pod: &Pod, _active: &[&Pod]) -> Result<(), Rejection> {
        match self.fields.refusal(pod.uid()) {
            None => Ok(()),
            Some(message) => Err(Rejection {
                reason: REASON.to_owned(),
                message,
            }),
        }
    }
}

#[cfg(test)]
#[path = "unknown_fields_tests.rs"]
pub(crate) mod tests;
