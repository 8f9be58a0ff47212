//! The static-pod rule against API object references (upstream `HasAPIObjectReference`,
//! PreventStaticPodAPIReferences): receives a pod, answers which API resource it references.
//! Pure.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Volume, VolumeProjection};

/// Upstream `HasAPIObjectReference` (PreventStaticPodAPIReferences): the plural resource a
/// static pod references, `Ok(None)` when it references none.
pub fn api_object_reference(pod: &Pod) -> Result<Option<&'static str>, String> {
    let Some(spec) = &pod.spec else {
        return Ok(None);
    };
    let sa = spec
        .service_account_name
        .as_deref()
        .or(spec.service_account.as_deref());
    if sa.is_some_and(|s| !s.is_empty()) {
        return Ok(Some("serviceaccounts"));
    }
    if references_secrets(spec) {
        return Ok(Some("secrets"));
    }
    if references_config_maps(spec) {
        return Ok(Some("configmaps"));
    }
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return Ok(Some("resourceclaims"));
    }
    for v in spec.volumes.iter().flatten() {
        let found = if v.config_map.is_some() {
            Some("configmaps (via configmap volumes)")
        } else if v.secret.is_some() {
            Some("secrets (via secret volumes)")
        } else if v.csi.is_some() {
            Some("csidrivers (via CSI volumes)")
        } else if v.glusterfs.is_some() {
            Some("endpoints (via glusterFS volumes)")
        } else if v.persistent_volume_claim.is_some() {
            Some("persistentvolumeclaims")
        } else if v.ephemeral.is_some() {
            Some("persistentvolumeclaims (via ephemeral volumes)")
        } else if v.azure_file.is_some() {
            Some("secrets (via azureFile volumes)")
        } else if let Some(p) = &v.projected {
            projected_reference(v, p.sources.as_deref().unwrap_or_default())?
        } else {
            None
        };
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

fn projected_reference(
    v: &Volume,
    sources: &[VolumeProjection],
) -> Result<Option<&'static str>, String> {
    for s in sources {
        if s.config_map.is_some() {
            return Ok(Some("configmaps (via projected volumes)"));
        } else if s.secret.is_some() {
            return Ok(Some("secrets (via projected volumes)"));
        } else if s.service_account_token.is_some() {
            return Ok(Some("serviceaccounts (via projected volumes)"));
        } else if s.cluster_trust_bundle.is_some() {
            return Ok(Some("clustertrustbundles"));
        } else if s.downward_api.is_none() {
            return Err(format!("unknown source for projected volume {:?}", v.name));
        }
    }
    Ok(None)
}

fn all_containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
}

fn references_secrets(spec: &PodSpec) -> bool {
    if spec
        .image_pull_secrets
        .as_ref()
        .is_some_and(|s| !s.is_empty())
    {
        return true;
    }
    let in_env = all_containers(spec).any(|c| {
        c.env_from.iter().flatten().any(|e| e.secret_ref.is_some())
            || c.env.iter().flatten().any(|e| {
                e.value_from
                    .as_ref()
                    .is_some_and(|f| f.secret_key_ref.is_some())
            })
    });
    // Volume plugins whose secretRef names a Secret (upstream VisitPodSecretNames).
    let in_volumes = spec.volumes.iter().flatten().any(|v| {
        v.secret.is_some()
            || v.azure_file.is_some()
            || v.cephfs.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.cinder.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.flex_volume
                .as_ref()
                .is_some_and(|s| s.secret_ref.is_some())
            || v.iscsi.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.rbd.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.scale_io.is_some()
            || v.storageos.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.csi
                .as_ref()
                .is_some_and(|s| s.node_publish_secret_ref.is_some())
            || v.projected
                .as_ref()
                .is_some_and(|p| p.sources.iter().flatten().any(|s| s.secret.is_some()))
    });
    in_env || in_volumes
}

fn references_config_maps(spec: &PodSpec) -> bool {
    let in_env = all_containers(spec).any(|c| {
        c.env_from
            .iter()
            .flatten()
            .any(|e| e.config_map_ref.is_some())
            || c.env.iter().flatten().any(|e| {
                e.value_from
                    .as_ref()
                    .is_some_and(|f| f.config_map_key_ref.is_some())
            })
    });
    let in_volumes = spec.volumes.iter().flatten().any(|v| {
        v.config_map.is_some()
            || v.projected
                .as_ref()
                .is_some_and(|p| p.sources.iter().flatten().any(|s| s.config_map.is_some()))
    });
    in_env || in_volumes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        if spec.get("containers").is_none() {
            spec["containers"] = serde_json::json!([{"name": "c", "image": "x"}]);
        }
        serde_json::from_value(serde_json::json!({"spec": spec})).unwrap()
    }

    #[test]
    fn references_table() {
        let cases: Vec<(serde_json::Value, Result<Option<&str>, &str>)> = vec![
            (serde_json::json!({}), Ok(None)),
            (
                serde_json::json!({"volumes": [
                    {"name": "h", "hostPath": {"path": "/x"}}, {"name": "e", "emptyDir": {}},
                    {"name": "d", "projected": {"sources": [{"downwardAPI": {"items": []}}]}}]}),
                Ok(None),
            ),
            (
                serde_json::json!({"serviceAccountName": "sa"}),
                Ok(Some("serviceaccounts")),
            ),
            (
                serde_json::json!({"serviceAccount": "sa"}),
                Ok(Some("serviceaccounts")),
            ),
            (
                serde_json::json!({"imagePullSecrets": [{"name": "s"}]}),
                Ok(Some("secrets")),
            ),
            (
                serde_json::json!({"containers": [{"name": "c", "image": "x",
                    "envFrom": [{"configMapRef": {"name": "cm"}}]}]}),
                Ok(Some("configmaps")),
            ),
            (
                serde_json::json!({"initContainers": [{"name": "i", "image": "x",
                    "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}),
                Ok(Some("secrets")),
            ),
            (
                serde_json::json!({"volumes": [{"name": "p", "persistentVolumeClaim": {"claimName": "c"}}]}),
                Ok(Some("persistentvolumeclaims")),
            ),
            (
                serde_json::json!({"volumes": [{"name": "p", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "t"}}]}}]}),
                Ok(Some("serviceaccounts (via projected volumes)")),
            ),
            (
                serde_json::json!({"volumes": [{"name": "c", "csi": {"driver": "d"}}]}),
                Ok(Some("csidrivers (via CSI volumes)")),
            ),
            (
                serde_json::json!({"volumes": [{"name": "p", "projected": {"sources": [{}]}}]}),
                Err("unknown source for projected volume \"p\""),
            ),
        ];
        for (spec, want) in cases {
            let got = api_object_reference(&pod(spec.clone()));
            assert_eq!(got, want.map_err(String::from), "{spec}");
        }
    }
}
