//! A pod's `imagePullSecrets` (upstream `getPullSecretsForPod` and `secrets.MakeDockerKeyring`):
//! owns fetching the named Secrets and turning those of type `kubernetes.io/dockerconfigjson`
//! (key `.dockerconfigjson`) and `kubernetes.io/dockercfg` (key `.dockercfg`) into a keyring.
//! Receives the pod and the object source; emits the Secrets (a Warning event
//! `FailedToRetrieveImagePullSecret` names those that could not be read — the pull goes on
//! without them, as upstream) and a keyring, or a [`SecretError`] naming the secret whose
//! content is malformed.

use k8s_openapi::api::core::v1::{Pod, Secret};

use super::config::{ConfigError, parse_docker_config_json, parse_dockercfg};
use super::keyring::BasicDockerKeyring;
use crate::events::{EventRecorder, EventType};
use crate::objects::PodObjects;
use crate::types::PodExt;

pub const SECRET_TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
pub const SECRET_TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
pub const DOCKERCFG_KEY: &str = ".dockercfg";

/// A pull secret whose docker config could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("couldn't parse image pull secret {namespace}/{name} (key {key:?}): {source}")]
pub struct SecretError {
    pub namespace: String,
    pub name: String,
    pub key: &'static str,
    #[source]
    pub source: ConfigError,
}

/// The keyring of `secrets` (upstream `MakeDockerKeyring` without the node keyring): only
/// Secrets of a docker config type with a non-empty key count; others are ignored.
pub fn make_docker_keyring(secrets: &[Secret]) -> Result<BasicDockerKeyring, SecretError> {
    let mut keyring = BasicDockerKeyring::default();
    for secret in secrets {
        let ty = secret.type_.as_deref().unwrap_or_default();
        let data = |key: &str| {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.as_slice())
                .filter(|b| !b.is_empty())
        };
        let parsed = if ty == SECRET_TYPE_DOCKER_CONFIG_JSON
            && let Some(bytes) = data(DOCKER_CONFIG_JSON_KEY)
        {
            Some((DOCKER_CONFIG_JSON_KEY, parse_docker_config_json(bytes)))
        } else if ty == SECRET_TYPE_DOCKERCFG
            && let Some(bytes) = data(DOCKERCFG_KEY)
        {
            Some((DOCKERCFG_KEY, parse_dockercfg(bytes)))
        } else {
            None
        };
        if let Some((key, result)) = parsed {
            let cfg = result.map_err(|source| SecretError {
                namespace: secret.metadata.namespace.clone().unwrap_or_default(),
                name: secret.metadata.name.clone().unwrap_or_default(),
                key,
                source,
            })?;
            keyring.add(&cfg);
        }
    }
    Ok(keyring)
}

/// The Secrets named in `pod.spec.imagePullSecrets` (empty names skipped). Those that cannot
/// be read (missing, API error, standalone mode) are left out and named in one Warning event,
/// with upstream's wording; the pull then goes on with the others.
pub async fn pull_secrets_for_pod(
    pod: &Pod,
    objects: Option<&dyn PodObjects>,
    events: &dyn EventRecorder,
) -> Vec<Secret> {
    let names: Vec<&str> = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
        .map(|r| r.name.as_str())
        .filter(|n| !n.is_empty())
        .collect();
    let mut secrets = Vec::new();
    let mut failed = Vec::new();
    for name in names {
        let found = match objects {
            Some(o) => o.secret(pod.namespace(), name).await,
            None => Ok(None),
        };
        match found {
            Ok(Some(s)) => secrets.push(s),
            Ok(None) => {
                tracing::info!(pod = %pod.full_name(), secret = %name, "unable to retrieve pull secret (not found), the image pull may not succeed");
                failed.push(name);
            }
            Err(e) => {
                tracing::info!(pod = %pod.full_name(), secret = %name, error = %e, "unable to retrieve pull secret, the image pull may not succeed");
                failed.push(name);
            }
        }
    }
    if !failed.is_empty() {
        events.event(
            pod,
            EventType::Warning,
            "FailedToRetrieveImagePullSecret",
            &format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                failed.join(", ")
            ),
        );
    }
    secrets
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
