//! projected volumes (upstream `volume/projected`): one directory merged from configMap,
//! secret, downwardAPI and serviceAccountToken sources, all written with the projected
//! `defaultMode` unless an item sets its own. Refuses items naming the same path twice (upstream
//! pod validation); otherwise collects every source, later sources overwriting earlier ones,
//! and reports all failures together. Receives the pod, the volume source and [`PodObjects`]
//! (objects and bound tokens); emits the payload (the manager writes it onto a tmpfs).

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{
    DownwardAPIVolumeSource, Pod, ProjectedVolumeSource, ServiceAccountTokenProjection,
};

use crate::objects::{PodObjects, TokenRequest};
use crate::types::PodExt;

use super::atomic_writer::FileProjection;
use super::payload::{DEFAULT_MODE, Payload, SourceError, aggregate, file_mode};
use super::{configmap, downward, secret};

/// Upstream's default `expirationSeconds` of a serviceAccountToken projection.
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

/// Mode of token files when the pod has an fsGroup: fsGroup ownership then adds group read
/// (0640), as upstream relies on.
const TOKEN_MODE_WITH_FS_GROUP: u32 = 0o600;

/// The token request of a serviceAccountToken source, bound to `pod`.
pub fn token_request(pod: &Pod, source: &ServiceAccountTokenProjection) -> TokenRequest {
    let spec = pod.spec.as_ref();
    let service_account = spec
        .and_then(|s| s.service_account_name.as_deref())
        .or_else(|| spec.and_then(|s| s.service_account.as_deref()))
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    TokenRequest {
        namespace: pod.namespace().to_owned(),
        service_account: service_account.to_owned(),
        audience: source.audience.clone().unwrap_or_default(),
        expiration_seconds: source
            .expiration_seconds
            .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS),
        pod_name: pod.name().to_owned(),
        pod_uid: pod.uid().to_owned(),
    }
}

/// Upstream `validateProjectionSources`' duplicate check: an explicit path (configMap/secret
/// `items`, downwardAPI items) may appear only once; `field` is the volume's field path
/// (`spec.volumes[i].projected`).
pub fn check_paths(source: &ProjectedVolumeSource, field: &str) -> Result<(), SourceError> {
    let mut seen = HashSet::new();
    let mut errs = Vec::new();
    let mut conflict = |path: &str, value: &str| {
        if !path.is_empty() && !seen.insert(path.to_owned()) {
            errs.push(SourceError::ConflictingPaths {
                field: field.to_owned(),
                value: value.to_owned(),
            });
        }
    };
    for src in source.sources.iter().flatten() {
        if let Some(s) = &src.secret {
            for item in s.items.iter().flatten() {
                conflict(&item.path, &s.name);
            }
        }
        if let Some(c) = &src.config_map {
            for item in c.items.iter().flatten() {
                conflict(&item.path, &c.name);
            }
        }
        if let Some(d) = &src.downward_api {
            for item in d.items.iter().flatten() {
                conflict(&item.path, &item.path);
            }
        }
    }
    aggregate(errs)
}

/// The files of a projected volume of `pod`; `field` names the volume in errors.
pub async fn volume_payload(
    objects: &dyn PodObjects,
    pod: &Pod,
    source: &ProjectedVolumeSource,
    field: &str,
) -> Result<Payload, SourceError> {
    check_paths(source, field)?;
    let default_mode = source.default_mode.unwrap_or(DEFAULT_MODE);
    let has_fs_group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|c| c.fs_group)
        .is_some();
    let namespace = pod.namespace();
    let mut payload = Payload::new();
    let mut errs = Vec::new();
    for src in source.sources.iter().flatten() {
        let part = if let Some(s) = &src.secret {
            let optional = s.optional.unwrap_or(false);
            match secret::get(objects, namespace, &s.name, optional).await {
                Ok(obj) => secret::make_payload(
                    s.items.as_deref().unwrap_or_default(),
                    &obj,
                    default_mode,
                    optional,
                ),
                Err(e) => Err(e),
            }
        } else if let Some(c) = &src.config_map {
            let optional = c.optional.unwrap_or(false);
            match configmap::get(objects, namespace, &c.name, optional).await {
                Ok(obj) => configmap::make_payload(
                    c.items.as_deref().unwrap_or_default(),
                    &obj,
                    default_mode,
                    optional,
                ),
                Err(e) => Err(e),
            }
        } else if let Some(d) = &src.downward_api {
            let da = DownwardAPIVolumeSource {
                default_mode: Some(default_mode),
                items: d.items.clone(),
            };
            downward::payload(pod, &da).map_err(SourceError::DownwardApi)
        } else if let Some(t) = &src.service_account_token {
            // Upstream: the projected defaultMode, but 0600 when fsGroup ownership will follow.
            let mode = if has_fs_group {
                TOKEN_MODE_WITH_FS_GROUP
            } else {
                file_mode(default_mode)
            };
            match objects.service_account_token(&token_request(pod, t)).await {
                Ok(grant) => Ok(Payload::from([(
                    t.path.clone(),
                    FileProjection {
                        data: grant.token.into_bytes(),
                        mode,
                    },
                )])),
                Err(e) => Err(e.into()),
            }
        } else if src.cluster_trust_bundle.is_some() {
            Err(SourceError::Unsupported("clusterTrustBundle"))
        } else {
            Ok(Payload::new())
        };
        match part {
            Ok(p) => payload.extend(p),
            Err(e) => errs.push(e),
        }
    }
    aggregate(errs)?;
    Ok(payload)
}
