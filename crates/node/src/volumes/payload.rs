//! Shared pieces of the API-backed volume plugins (configMap, secret, projected): the errors
//! they report, worded as upstream's, the payload type handed to the atomic writer and file-mode
//! conversion. Receives nothing; pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::objects::ObjectError;

use super::atomic_writer::FileProjection;

/// Files of a volume by relative path, as the atomic writer takes them.
pub type Payload = BTreeMap<String, FileProjection>;

/// Upstream's defaulted `defaultMode` of configMap, secret and projected volumes (0644).
pub const DEFAULT_MODE: i32 = 0o644;

/// Why the contents of an API-backed volume could not be produced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The object does not exist and the source is not optional (upstream's NotFound wording
    /// of the kubelet's object managers: `configmap "name" not found`).
    #[error("{kind} {name:?} not found")]
    NotFound { kind: &'static str, name: String },
    /// An `items` entry names a key the ConfigMap lacks.
    #[error("configmap references non-existent config key: {0}")]
    MissingConfigMapKey(String),
    /// An `items` entry names a key the Secret lacks.
    #[error("references non-existent secret key: {0}")]
    MissingSecretKey(String),
    /// The object could not be looked up.
    #[error(transparent)]
    Object(#[from] ObjectError),
    /// Two projected sources name the same path (upstream's pod validation wording).
    #[error("{field}: Invalid value: {value:?}: conflicting duplicate paths")]
    ConflictingPaths { field: String, value: String },
    /// A downwardAPI item could not be resolved.
    #[error("{0}")]
    DownwardApi(String),
    /// A projection this kubelet does not implement.
    #[error("{0} projection is not supported by this rkubelet yet")]
    Unsupported(&'static str),
    /// Several sources failed (upstream `utilerrors.NewAggregate`).
    #[error("[{}]", join(.0))]
    Aggregate(Vec<SourceError>),
}

fn join(errs: &[SourceError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `Ok` for no errors, the error itself for one, an aggregate (duplicate messages dropped, as
/// upstream's aggregate does) for several.
pub fn aggregate(errs: Vec<SourceError>) -> Result<(), SourceError> {
    let mut seen = std::collections::HashSet::new();
    let mut unique: Vec<SourceError> = errs
        .into_iter()
        .filter(|e| seen.insert(e.to_string()))
        .collect();
    match unique.len() {
        0 => Ok(()),
        1 => Err(unique.remove(0)),
        _ => Err(SourceError::Aggregate(unique)),
    }
}

/// The object a configMap or secret source names, as looked up; when it does not exist, an
/// empty one named `namespace/name` for an `optional` source, upstream's NotFound otherwise.
pub fn found_or_empty<T>(
    found: Option<T>,
    kind: &'static str,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<T, SourceError>
where
    T: Default + k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    match found {
        Some(obj) => Ok(obj),
        None if optional => {
            let mut obj = T::default();
            let meta = obj.metadata_mut();
            meta.name = Some(name.to_owned());
            meta.namespace = Some(namespace.to_owned());
            Ok(obj)
        }
        None => Err(SourceError::NotFound {
            kind,
            name: name.to_owned(),
        }),
    }
}

/// A spec mode (`0..=0777`, validated by the API server) as a permission mode; nonsense values
/// fall back to 0644 rather than failing the volume.
pub fn file_mode(mode: i32) -> u32 {
    u32::try_from(mode).map_or(0o644, super::atomic_writer::permission_bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_wording_matches_upstream() {
        assert_eq!(aggregate(vec![]), Ok(()));
        let one = SourceError::NotFound {
            kind: "configmap",
            name: "a".into(),
        };
        assert_eq!(
            aggregate(vec![one.clone()]).unwrap_err().to_string(),
            "configmap \"a\" not found"
        );
        let two = SourceError::MissingSecretKey("k".into());
        assert_eq!(
            aggregate(vec![one.clone(), two, one])
                .unwrap_err()
                .to_string(),
            "[configmap \"a\" not found, references non-existent secret key: k]"
        );
        assert_eq!(file_mode(0o600), 0o600);
        assert_eq!(file_mode(-1), 0o644);
        // API validation admits 0..=0777; anything above never becomes setuid/setgid/sticky.
        assert_eq!(file_mode(0o4755), 0o755);
        assert_eq!(file_mode(0o7777), 0o777);
    }
}
