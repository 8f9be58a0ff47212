//! downwardAPI volume payloads (upstream `volume/downwardapi` + `fieldpath.FormatMap`): each item
//! becomes a file with the pod field it names; `metadata.labels`/`annotations` as sorted
//! `key="value"` lines with Go `%q` quoting. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{DownwardAPIVolumeSource, Pod};

use super::atomic_writer::FileProjection;

/// Upstream's default mode for projected files.
pub const DEFAULT_MODE: i32 = 0o644;

pub use crate::gostr::{format_map, go_quote};

/// The value of a downward API field path as upstream `ExtractFieldPathAsString` allows it in
/// volumes.
pub fn field_value(pod: &Pod, path: &str) -> Result<String, String> {
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    let subscript = |prefix: &str| -> Option<String> {
        let rest = path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")?;
        Some(rest.to_owned())
    };
    if let Some(k) = subscript("metadata.labels") {
        return Ok(labels.get(&k).cloned().unwrap_or_default());
    }
    if let Some(k) = subscript("metadata.annotations") {
        return Ok(annotations.get(&k).cloned().unwrap_or_default());
    }
    match path {
        "metadata.name" => Ok(pod.metadata.name.clone().unwrap_or_default()),
        "metadata.namespace" => Ok(pod.metadata.namespace.clone().unwrap_or_default()),
        "metadata.uid" => Ok(pod.metadata.uid.clone().unwrap_or_default()),
        "metadata.labels" => Ok(format_map(labels)),
        "metadata.annotations" => Ok(format_map(annotations)),
        other => Err(format!("unsupported fieldPath: {other}")),
    }
}

/// The files of a downwardAPI volume.
pub fn payload(
    pod: &Pod,
    source: &DownwardAPIVolumeSource,
) -> Result<BTreeMap<String, FileProjection>, String> {
    let default_mode = source.default_mode.unwrap_or(DEFAULT_MODE);
    let mut out = BTreeMap::new();
    for item in source.items.iter().flatten() {
        let data = match (&item.field_ref, &item.resource_field_ref) {
            (Some(f), _) => field_value(pod, &f.field_path)?,
            (None, Some(_)) => {
                return Err(format!(
                    "downwardAPI item {:?}: resourceFieldRef in volumes is not supported by this rkubelet yet",
                    item.path
                ));
            }
            (None, None) => return Err(format!("downwardAPI item {:?} has no source", item.path)),
        };
        let mode = item.mode.unwrap_or(default_mode);
        out.insert(
            item.path.clone(),
            FileProjection {
                data: data.into_bytes(),
                mode: super::payload::file_mode(mode),
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, ObjectFieldSelector};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                labels: Some(BTreeMap::from([
                    ("zone".to_owned(), "a\"b".to_owned()),
                    ("app".to_owned(), "web".to_owned()),
                ])),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn labels_file_format_matches_upstream() {
        assert_eq!(
            field_value(&pod(), "metadata.labels").unwrap(),
            "app=\"web\"\nzone=\"a\\\"b\""
        );
        assert_eq!(
            field_value(&pod(), "metadata.labels['app']").unwrap(),
            "web"
        );
        assert_eq!(field_value(&pod(), "metadata.annotations").unwrap(), "");
        assert_eq!(go_quote("a\nb\u{1}é"), "\"a\\nb\\x01é\"");
        assert!(field_value(&pod(), "spec.nodeName").is_err());
    }

    #[test]
    fn payload_uses_item_and_default_modes() {
        let src = DownwardAPIVolumeSource {
            default_mode: Some(0o600),
            items: Some(vec![
                DownwardAPIVolumeFile {
                    path: "name".into(),
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.name".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                DownwardAPIVolumeFile {
                    path: "meta/labels".into(),
                    mode: Some(0o640),
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.labels".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
        };
        let p = payload(&pod(), &src).unwrap();
        assert_eq!(p["name"].data, b"p");
        assert_eq!(p["name"].mode, 0o600);
        assert_eq!(p["meta/labels"].mode, 0o640);
    }
}
