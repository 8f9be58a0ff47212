//! kuberuntime::env_objects — the ConfigMaps and Secrets one container's environment names
//! (`env[].valueFrom.{configMapKeyRef,secretKeyRef}`, `envFrom[].{configMapRef,secretRef}`),
//! fetched through [`PodObjects`] before the container is created. Receives the pod and
//! container; emits a snapshot the pure `env` module reads synchronously through
//! [`EnvObjects`], so every lookup's outcome (found, missing, failed) is fixed for one start.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::env::EnvObjects;
use crate::objects::PodObjects;

type Key = (String, String);
type Lookup<T> = Result<Option<T>, String>;

/// The objects one container's environment refers to, as fetched.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct EnvObjectsSnapshot {
    config_maps: HashMap<Key, Lookup<BTreeMap<String, String>>>,
    secrets: HashMap<Key, Lookup<BTreeMap<String, Vec<u8>>>>,
}

/// Names of the ConfigMaps and Secrets `container` takes environment variables from.
pub fn referenced_names(container: &Container) -> (Vec<String>, Vec<String>) {
    let mut config_maps = Vec::new();
    let mut secrets = Vec::new();
    for from in container.env_from.iter().flatten() {
        if let Some(cm) = &from.config_map_ref {
            config_maps.push(cm.name.clone());
        }
        if let Some(s) = &from.secret_ref {
            secrets.push(s.name.clone());
        }
    }
    for var in container.env.iter().flatten() {
        let Some(source) = &var.value_from else {
            continue;
        };
        if let Some(r) = &source.config_map_key_ref {
            config_maps.push(r.name.clone());
        }
        if let Some(r) = &source.secret_key_ref {
            secrets.push(r.name.clone());
        }
    }
    for names in [&mut config_maps, &mut secrets] {
        names.sort();
        names.dedup();
    }
    (config_maps, secrets)
}

impl EnvObjectsSnapshot {
    /// Fetches every object `container` names, in the pod's namespace.
    pub async fn load(objects: &dyn PodObjects, pod: &Pod, container: &Container) -> Self {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let (config_maps, secrets) = referenced_names(container);
        let mut snapshot = Self::default();
        for name in config_maps {
            let got = objects
                .config_map(namespace, &name)
                .await
                .map(|cm| cm.map(|cm| cm.data.unwrap_or_default()))
                .map_err(|e| e.to_string());
            snapshot
                .config_maps
                .insert((namespace.to_owned(), name), got);
        }
        for name in secrets {
            let got = objects
                .secret(namespace, &name)
                .await
                .map(|s| {
                    s.map(|s| {
                        s.data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0))
                            .collect()
                    })
                })
                .map_err(|e| e.to_string());
            snapshot.secrets.insert((namespace.to_owned(), name), got);
        }
        snapshot
    }
}

fn answer<T: Clone>(map: &HashMap<Key, Lookup<T>>, namespace: &str, name: &str) -> Lookup<T> {
    map.get(&(namespace.to_owned(), name.to_owned()))
        .cloned()
        .unwrap_or_else(|| Err(format!("{namespace}/{name} was not fetched")))
}

impl EnvObjects for EnvObjectsSnapshot {
    fn config_map(&self, namespace: &str, name: &str) -> Lookup<BTreeMap<String, String>> {
        answer(&self.config_maps, namespace, name)
    }

    fn secret(&self, namespace: &str, name: &str) -> Lookup<BTreeMap<String, Vec<u8>>> {
        answer(&self.secrets, namespace, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::FakeObjects;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn container() -> Container {
        serde_json::from_value(json!({
            "name": "c",
            "envFrom": [{"configMapRef": {"name": "cm-a"}}, {"secretRef": {"name": "s-a"}}],
            "env": [
                {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm-b", "key": "k"}}},
                {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "cm-a", "key": "k"}}},
                {"name": "Z", "valueFrom": {"secretKeyRef": {"name": "s-b", "key": "k"}}},
                {"name": "P", "value": "plain"},
            ],
        }))
        .unwrap()
    }

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        }
    }

    #[test]
    fn names_from_env_and_env_from_deduplicated() {
        let (cms, secrets) = referenced_names(&container());
        assert_eq!(cms, ["cm-a", "cm-b"]);
        assert_eq!(secrets, ["s-a", "s-b"]);
    }

    #[tokio::test]
    async fn snapshot_keeps_found_missing_and_failed_apart() {
        let objects = FakeObjects::default();
        objects.set_config_map(ConfigMap {
            metadata: meta("cm-a"),
            data: Some([("k".to_owned(), "v".to_owned())].into()),
            ..Default::default()
        });
        objects.set_secret(Secret {
            metadata: meta("s-a"),
            data: Some([("k".to_owned(), ByteString(b"\x00bin".to_vec()))].into()),
            ..Default::default()
        });
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("ns".into());
        let snap = EnvObjectsSnapshot::load(&objects, &pod, &container()).await;
        assert_eq!(snap.config_map("ns", "cm-a").unwrap().unwrap()["k"], "v");
        assert_eq!(snap.config_map("ns", "cm-b").unwrap(), None);
        assert_eq!(snap.secret("ns", "s-a").unwrap().unwrap()["k"], b"\x00bin");
        assert_eq!(snap.secret("ns", "s-b").unwrap(), None);
        assert!(snap.config_map("other", "cm-a").is_err(), "never fetched");

        let standalone =
            EnvObjectsSnapshot::load(&crate::objects::NoApiServer, &pod, &container()).await;
        let err = standalone.config_map("ns", "cm-a").unwrap_err();
        assert!(err.contains("no kubeClient defined"), "{err}");
    }
}
