//! Which ConfigMaps and Secrets a pod refers to (upstream `podutil.VisitPodConfigmapNames` /
//! `VisitPodSecretNames`, as the configmap and secret managers use them on `RegisterPod`).
//! Receives a pod; emits the sorted, de-duplicated names. No I/O.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, Pod};

/// The names (in the pod's namespace) of the ConfigMaps and Secrets `pod` uses.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PodReferences {
    pub config_maps: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
}

impl PodReferences {
    /// Every reference of every container (init, regular, ephemeral), every volume (incl.
    /// projected sources and the in-tree plugins' secret refs) and, for Secrets,
    /// `imagePullSecrets`. Empty names are dropped.
    pub fn of(pod: &Pod) -> Self {
        let mut refs = Self::default();
        let Some(spec) = pod.spec.as_ref() else {
            return refs;
        };
        for r in spec.image_pull_secrets.iter().flatten() {
            refs.secret(&r.name);
        }
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .map(|c| (c.env.as_deref(), c.env_from.as_deref()));
        let ephemeral = spec
            .ephemeral_containers
            .iter()
            .flatten()
            .map(|c| (c.env.as_deref(), c.env_from.as_deref()));
        for (env, env_from) in containers.chain(ephemeral) {
            refs.container(env.unwrap_or_default(), env_from.unwrap_or_default());
        }
        for v in spec.volumes.iter().flatten() {
            if let Some(cm) = &v.config_map {
                refs.config_map(&cm.name);
            }
            if let Some(s) = &v.secret {
                refs.secret(s.secret_name.as_deref().unwrap_or_default());
            }
            if let Some(p) = &v.projected {
                for source in p.sources.iter().flatten() {
                    if let Some(cm) = &source.config_map {
                        refs.config_map(&cm.name);
                    }
                    if let Some(s) = &source.secret {
                        refs.secret(&s.name);
                    }
                }
            }
            if let Some(a) = &v.azure_file {
                refs.secret(&a.secret_name);
            }
            if let Some(s) = &v.scale_io {
                refs.secret(&s.secret_ref.name);
            }
            let optional_refs = [
                v.cephfs.as_ref().and_then(|s| s.secret_ref.as_ref()),
                v.cinder.as_ref().and_then(|s| s.secret_ref.as_ref()),
                v.flex_volume.as_ref().and_then(|s| s.secret_ref.as_ref()),
                v.rbd.as_ref().and_then(|s| s.secret_ref.as_ref()),
                v.iscsi.as_ref().and_then(|s| s.secret_ref.as_ref()),
                v.storageos.as_ref().and_then(|s| s.secret_ref.as_ref()),
                v.csi
                    .as_ref()
                    .and_then(|s| s.node_publish_secret_ref.as_ref()),
            ];
            for r in optional_refs.into_iter().flatten() {
                refs.secret(&r.name);
            }
        }
        refs
    }

    fn container(&mut self, env: &[EnvVar], env_from: &[EnvFromSource]) {
        for from in env_from {
            if let Some(cm) = &from.config_map_ref {
                self.config_map(&cm.name);
            }
            if let Some(s) = &from.secret_ref {
                self.secret(&s.name);
            }
        }
        for var in env {
            let Some(source) = &var.value_from else {
                continue;
            };
            if let Some(r) = &source.config_map_key_ref {
                self.config_map(&r.name);
            }
            if let Some(r) = &source.secret_key_ref {
                self.secret(&r.name);
            }
        }
    }

    fn config_map(&mut self, name: &str) {
        if !name.is_empty() {
            self.config_maps.insert(name.to_owned());
        }
    }

    fn secret(&mut self, name: &str) {
        if !name.is_empty() {
            self.secrets.insert(name.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_volume_env_and_pull_secret_references() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "imagePullSecrets": [{"name": "pull"}, {"name": ""}],
                "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "init-cm"}}]}],
                "containers": [{
                    "name": "c",
                    "envFrom": [{"secretRef": {"name": "env-secret"}}],
                    "env": [
                        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "key-cm", "key": "k"}}},
                        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "key-secret", "key": "k"}}},
                        {"name": "C", "value": "plain"}
                    ]
                }],
                "ephemeralContainers": [{"name": "e", "env": [
                    {"name": "D", "valueFrom": {"secretKeyRef": {"name": "eph-secret", "key": "k"}}}
                ]}],
                "volumes": [
                    {"name": "v1", "configMap": {"name": "vol-cm"}},
                    {"name": "v2", "secret": {"secretName": "vol-secret"}},
                    {"name": "v3", "projected": {"sources": [
                        {"configMap": {"name": "proj-cm"}},
                        {"secret": {"name": "proj-secret"}},
                        {"serviceAccountToken": {"path": "token"}}
                    ]}},
                    {"name": "v4", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-secret"}}},
                    {"name": "v5", "emptyDir": {}}
                ]
            }
        }))
        .unwrap();
        let refs = PodReferences::of(&pod);
        let names = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>();
        assert_eq!(
            names(&refs.config_maps),
            ["init-cm", "key-cm", "proj-cm", "vol-cm"]
        );
        assert_eq!(
            names(&refs.secrets),
            [
                "csi-secret",
                "env-secret",
                "eph-secret",
                "key-secret",
                "proj-secret",
                "pull",
                "vol-secret"
            ]
        );
    }

    #[test]
    fn pod_without_spec_references_nothing() {
        assert_eq!(PodReferences::of(&Pod::default()), PodReferences::default());
    }
}
