//! The kubelet's CRI label/annotation contract (upstream `kuberuntime/labels.go`), both ways.
//! Receives a `Pod`/`Container` (plus restart count and spec hash) and emits the label and
//! annotation maps put on sandboxes and containers; receives those maps back from the runtime and
//! decodes them, tolerating missing or garbled values (logged, then defaulted) as upstream does.
//! Pure: no I/O.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use k8s_openapi::api::core::v1::{Container, ContainerPort, LifecycleHandler, Pod};
use tracing::{debug, warn};

use crate::types::PodExt;

/// Label: the pod's name (sandboxes and containers).
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
/// Label: the pod's namespace (sandboxes and containers).
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// Label: the pod's UID (sandboxes and containers); the key the kubelet filters by.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// Label: the container's name in the pod spec (containers only).
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// Annotation: `metadata.deletionGracePeriodSeconds` when the container was created.
pub const POD_DELETION_GRACE_PERIOD_ANNOTATION: &str = "io.kubernetes.pod.deletionGracePeriod";
/// Annotation: `spec.terminationGracePeriodSeconds` when the container was created.
pub const POD_TERMINATION_GRACE_PERIOD_ANNOTATION: &str =
    "io.kubernetes.pod.terminationGracePeriod";
/// Annotation: the container spec hash, lower-case hex without prefix.
pub const CONTAINER_HASH_ANNOTATION: &str = "io.kubernetes.container.hash";
/// Annotation: the container's restart count, decimal.
pub const CONTAINER_RESTART_COUNT_ANNOTATION: &str = "io.kubernetes.container.restartCount";
/// Annotation: `terminationMessagePath` of the container spec.
pub const CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePath";
/// Annotation: `terminationMessagePolicy` of the container spec.
pub const CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePolicy";
/// Annotation: the preStop handler as JSON (lets the kubelet run it without the pod spec).
pub const CONTAINER_PRE_STOP_HANDLER_ANNOTATION: &str = "io.kubernetes.container.preStopHandler";
/// Annotation: the container ports as a JSON array.
pub const CONTAINER_PORTS_ANNOTATION: &str = "io.kubernetes.container.ports";

/// Read access to a label or annotation map, whichever map type holds it.
pub trait LabelLookup {
    fn lookup(&self, key: &str) -> Option<&str>;
}

impl<S: BuildHasher> LabelLookup for HashMap<String, String, S> {
    fn lookup(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl LabelLookup for BTreeMap<String, String> {
    fn lookup(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

fn pod_name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn pod_namespace(pod: &Pod) -> String {
    pod.metadata.namespace.clone().unwrap_or_default()
}

fn pod_uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// Labels of a pod sandbox: the pod's own labels plus name, namespace and UID (upstream
/// `newPodLabels`; the kubelet's keys win over a pod label of the same name).
pub fn sandbox_labels(pod: &Pod) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(POD_NAME_LABEL.to_string(), pod_name(pod));
    labels.insert(POD_NAMESPACE_LABEL.to_string(), pod_namespace(pod));
    labels.insert(POD_UID_LABEL.to_string(), pod_uid(pod));
    labels
}

/// Annotations of a pod sandbox: the pod's annotations verbatim (upstream `newPodAnnotations`).
pub fn sandbox_annotations(pod: &Pod) -> HashMap<String, String> {
    pod.metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Labels of a container: pod name, namespace, UID and the container name (upstream
/// `newContainerLabels`). Pod labels are *not* copied onto containers.
pub fn container_labels(container: &Container, pod: &Pod) -> HashMap<String, String> {
    HashMap::from([
        (POD_NAME_LABEL.to_string(), pod_name(pod)),
        (POD_NAMESPACE_LABEL.to_string(), pod_namespace(pod)),
        (POD_UID_LABEL.to_string(), pod_uid(pod)),
        (CONTAINER_NAME_LABEL.to_string(), container.name.clone()),
    ])
}

/// Annotations of a container (upstream `newContainerAnnotations`): spec hash (hex), restart
/// count (decimal), termination message path/policy, the pod's deletion and termination grace
/// periods when set, the preStop handler and the ports as JSON when present. Callers that add
/// device-plugin annotations must let these keys win.
pub fn container_annotations(
    container: &Container,
    pod: &Pod,
    restart_count: u32,
    hash: u64,
) -> HashMap<String, String> {
    let mut annotations = HashMap::new();
    annotations.insert(CONTAINER_HASH_ANNOTATION.to_string(), format!("{hash:x}"));
    annotations.insert(
        CONTAINER_RESTART_COUNT_ANNOTATION.to_string(),
        restart_count.to_string(),
    );
    annotations.insert(
        CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION.to_string(),
        container
            .termination_message_path
            .clone()
            .unwrap_or_default(),
    );
    annotations.insert(
        CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION.to_string(),
        container
            .termination_message_policy
            .clone()
            .unwrap_or_default(),
    );
    if let Some(grace) = pod.metadata.deletion_grace_period_seconds {
        annotations.insert(
            POD_DELETION_GRACE_PERIOD_ANNOTATION.to_string(),
            grace.to_string(),
        );
    }
    if let Some(grace) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        annotations.insert(
            POD_TERMINATION_GRACE_PERIOD_ANNOTATION.to_string(),
            grace.to_string(),
        );
    }
    if let Some(pre_stop) = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
    {
        match serde_json::to_string(pre_stop) {
            Ok(json) => {
                annotations.insert(CONTAINER_PRE_STOP_HANDLER_ANNOTATION.to_string(), json);
            }
            Err(err) => warn!(
                container = %container.name,
                error = %err,
                "unable to encode the preStop handler of the container as JSON"
            ),
        }
    }
    if let Some(ports) = container.ports.as_ref().filter(|p| !p.is_empty()) {
        match serde_json::to_string(ports) {
            Ok(json) => {
                annotations.insert(CONTAINER_PORTS_ANNOTATION.to_string(), json);
            }
            Err(err) => warn!(
                container = %container.name,
                error = %err,
                "unable to encode the ports of the container as JSON"
            ),
        }
    }
    annotations
}

/// What a sandbox's labels say (upstream `labeledPodSandboxInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxLabelInfo {
    /// The pod's own labels (the kubelet's keys removed).
    pub labels: BTreeMap<String, String>,
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
}

/// What a container's labels say (upstream `labeledContainerInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerLabelInfo {
    pub container_name: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
}

/// What a container's annotations say (upstream `annotatedContainerInfo`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerAnnotationInfo {
    /// Spec hash; 0 when missing or not valid hex.
    pub hash: u64,
    /// Restart count; 0 when missing or not a valid number.
    pub restart_count: u32,
    pub pod_deletion_grace_period: Option<i64>,
    pub pod_termination_grace_period: Option<i64>,
    /// Empty when missing.
    pub termination_message_path: String,
    /// Empty when missing (`File` / `FallbackToLogsOnError` otherwise).
    pub termination_message_policy: String,
    pub pre_stop_handler: Option<LifecycleHandler>,
    pub ports: Vec<ContainerPort>,
}

fn string_value(map: &impl LabelLookup, key: &str) -> String {
    match map.lookup(key) {
        Some(v) => v.to_string(),
        None => {
            debug!(
                label = key,
                "entry lacks the label; it may be an old or foreign one"
            );
            String::new()
        }
    }
}

/// Decodes a sandbox's labels (upstream `getPodSandboxInfoFromLabels`).
pub fn sandbox_info_from_labels(labels: &HashMap<String, String>) -> SandboxLabelInfo {
    SandboxLabelInfo {
        labels: labels
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    POD_NAME_LABEL | POD_NAMESPACE_LABEL | POD_UID_LABEL
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        pod_name: string_value(labels, POD_NAME_LABEL),
        pod_namespace: string_value(labels, POD_NAMESPACE_LABEL),
        pod_uid: string_value(labels, POD_UID_LABEL),
    }
}

/// Decodes a container's labels (upstream `getContainerInfoFromLabels`).
pub fn container_info_from_labels(labels: &impl LabelLookup) -> ContainerLabelInfo {
    ContainerLabelInfo {
        container_name: string_value(labels, CONTAINER_NAME_LABEL),
        pod_name: string_value(labels, POD_NAME_LABEL),
        pod_namespace: string_value(labels, POD_NAMESPACE_LABEL),
        pod_uid: string_value(labels, POD_UID_LABEL),
    }
}

/// Parses an optional annotation; a missing key is `None` silently, a garbled one is `None`
/// with a log line naming the key and the value.
fn parsed<T>(
    map: &impl LabelLookup,
    key: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Option<T> {
    let raw = map.lookup(key)?;
    match parse(raw) {
        Ok(v) => Some(v),
        Err(err) => {
            warn!(annotation = key, value = raw, error = %err, "unable to decode annotation; ignoring it");
            None
        }
    }
}

/// Decodes a container's annotations (upstream `getContainerInfoFromAnnotations`).
pub fn container_info_from_annotations(annotations: &impl LabelLookup) -> ContainerAnnotationInfo {
    let hash = parsed(annotations, CONTAINER_HASH_ANNOTATION, |s| {
        u64::from_str_radix(s, 16).map_err(|e| e.to_string())
    });
    let restart_count = parsed(annotations, CONTAINER_RESTART_COUNT_ANNOTATION, |s| {
        s.parse::<u32>().map_err(|e| e.to_string())
    });
    let int64 = |key: &str| {
        parsed(annotations, key, |s| {
            s.parse::<i64>().map_err(|e| e.to_string())
        })
    };
    let pre_stop_handler = parsed(annotations, CONTAINER_PRE_STOP_HANDLER_ANNOTATION, |s| {
        serde_json::from_str::<LifecycleHandler>(s).map_err(|e| e.to_string())
    });
    let ports = parsed(annotations, CONTAINER_PORTS_ANNOTATION, |s| {
        serde_json::from_str::<Vec<ContainerPort>>(s).map_err(|e| e.to_string())
    });
    ContainerAnnotationInfo {
        hash: hash.unwrap_or(0),
        restart_count: restart_count.unwrap_or(0),
        pod_deletion_grace_period: int64(POD_DELETION_GRACE_PERIOD_ANNOTATION),
        pod_termination_grace_period: int64(POD_TERMINATION_GRACE_PERIOD_ANNOTATION),
        termination_message_path: string_value(
            annotations,
            CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION,
        ),
        termination_message_policy: string_value(
            annotations,
            CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION,
        ),
        pre_stop_handler,
        ports: ports.unwrap_or_default(),
    }
}

/// `name_namespace(uid)`, upstream's `format.Pod`.
pub fn format_pod(pod: &Pod) -> String {
    format!("{}_{}({})", pod.name(), pod.namespace(), pod.uid())
}

/// `<pod>_<ns>_<container>-<id>.log` (upstream `logSymlink`), cut to ext4's 255-byte limit.
pub fn legacy_log_name(pod: &str, namespace: &str, container: &str, id: &str) -> String {
    let mut base = format!("{pod}_{namespace}_{container}-{id}");
    base.truncate(255 - ".log".len());
    format!("{base}.log")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ExecAction, Lifecycle, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                uid: Some("uid-1".into()),
                labels: Some(BTreeMap::from([
                    ("app".into(), "web".into()),
                    (POD_NAME_LABEL.into(), "spoofed".into()),
                ])),
                annotations: Some(BTreeMap::from([("a".into(), "b".into())])),
                deletion_grace_period_seconds: Some(5),
                ..Default::default()
            },
            spec: Some(PodSpec {
                termination_grace_period_seconds: Some(30),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container() -> Container {
        Container {
            name: "nginx".into(),
            termination_message_path: Some("/dev/termination-log".into()),
            termination_message_policy: Some("FallbackToLogsOnError".into()),
            ports: Some(vec![ContainerPort {
                container_port: 80,
                protocol: Some("TCP".into()),
                name: Some("http".into()),
                ..Default::default()
            }]),
            lifecycle: Some(Lifecycle {
                pre_stop: Some(LifecycleHandler {
                    exec: Some(ExecAction {
                        command: Some(vec!["sleep".into(), "1".into()]),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn sandbox_labels_round_trip() {
        let labels = sandbox_labels(&pod());
        assert_eq!(labels[POD_NAME_LABEL], "web");
        assert_eq!(labels[POD_NAMESPACE_LABEL], "prod");
        assert_eq!(labels[POD_UID_LABEL], "uid-1");
        assert_eq!(labels["app"], "web");
        let info = sandbox_info_from_labels(&labels);
        assert_eq!(info.pod_name, "web");
        assert_eq!(info.pod_namespace, "prod");
        assert_eq!(info.pod_uid, "uid-1");
        assert_eq!(
            info.labels,
            BTreeMap::from([("app".to_string(), "web".to_string())])
        );
        assert_eq!(
            sandbox_annotations(&pod()),
            HashMap::from([("a".to_string(), "b".to_string())])
        );
    }

    #[test]
    fn container_labels_round_trip() {
        let labels = container_labels(&container(), &pod());
        assert_eq!(labels.len(), 4, "pod labels are not copied onto containers");
        let info = container_info_from_labels(&labels);
        assert_eq!(
            info,
            ContainerLabelInfo {
                container_name: "nginx".into(),
                pod_name: "web".into(),
                pod_namespace: "prod".into(),
                pod_uid: "uid-1".into(),
            }
        );
    }

    #[test]
    fn container_annotations_round_trip() {
        let c = container();
        let annotations = container_annotations(&c, &pod(), 3, 0xdead_beef_0042);
        assert_eq!(annotations[CONTAINER_HASH_ANNOTATION], "deadbeef0042");
        assert_eq!(annotations[CONTAINER_RESTART_COUNT_ANNOTATION], "3");
        assert_eq!(annotations[POD_DELETION_GRACE_PERIOD_ANNOTATION], "5");
        assert_eq!(annotations[POD_TERMINATION_GRACE_PERIOD_ANNOTATION], "30");
        let info = container_info_from_annotations(&annotations);
        assert_eq!(info.hash, 0xdead_beef_0042);
        assert_eq!(info.restart_count, 3);
        assert_eq!(info.pod_deletion_grace_period, Some(5));
        assert_eq!(info.pod_termination_grace_period, Some(30));
        assert_eq!(info.termination_message_path, "/dev/termination-log");
        assert_eq!(info.termination_message_policy, "FallbackToLogsOnError");
        assert_eq!(
            info.pre_stop_handler,
            c.lifecycle.and_then(|l| l.pre_stop),
            "preStop handler survives the JSON round trip"
        );
        assert_eq!(info.ports, c.ports.unwrap_or_default());
        // The same decoding works on the BTreeMap copies kept in runtime statuses.
        let sorted: BTreeMap<String, String> = annotations.into_iter().collect();
        assert_eq!(container_info_from_annotations(&sorted), info);
    }

    #[test]
    fn optional_annotations_absent_when_unset() {
        let mut p = pod();
        p.metadata.deletion_grace_period_seconds = None;
        p.spec = None;
        let c = Container {
            name: "bare".into(),
            ..Default::default()
        };
        let annotations = container_annotations(&c, &p, 0, 0);
        for key in [
            POD_DELETION_GRACE_PERIOD_ANNOTATION,
            POD_TERMINATION_GRACE_PERIOD_ANNOTATION,
            CONTAINER_PRE_STOP_HANDLER_ANNOTATION,
            CONTAINER_PORTS_ANNOTATION,
        ] {
            assert!(!annotations.contains_key(key), "{key} must be absent");
        }
        assert_eq!(annotations[CONTAINER_HASH_ANNOTATION], "0");
        assert_eq!(
            annotations[CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION],
            ""
        );
    }

    #[test]
    fn garbled_and_missing_values_default() {
        struct Case {
            name: &'static str,
            entries: &'static [(&'static str, &'static str)],
            hash: u64,
            restart_count: u32,
            termination_grace: Option<i64>,
            ports: usize,
            pre_stop: bool,
        }
        let cases = [
            Case {
                name: "empty",
                entries: &[],
                hash: 0,
                restart_count: 0,
                termination_grace: None,
                ports: 0,
                pre_stop: false,
            },
            Case {
                name: "garbled",
                entries: &[
                    (CONTAINER_HASH_ANNOTATION, "not-hex"),
                    (CONTAINER_RESTART_COUNT_ANNOTATION, "-1"),
                    (POD_TERMINATION_GRACE_PERIOD_ANNOTATION, "thirty"),
                    (CONTAINER_PORTS_ANNOTATION, "{"),
                    (CONTAINER_PRE_STOP_HANDLER_ANNOTATION, "[]"),
                ],
                hash: 0,
                restart_count: 0,
                termination_grace: None,
                ports: 0,
                pre_stop: false,
            },
            Case {
                name: "valid",
                entries: &[
                    (CONTAINER_HASH_ANNOTATION, "ff"),
                    (CONTAINER_RESTART_COUNT_ANNOTATION, "12"),
                    (POD_TERMINATION_GRACE_PERIOD_ANNOTATION, "0"),
                    (CONTAINER_PORTS_ANNOTATION, r#"[{"containerPort":1}]"#),
                    (CONTAINER_PRE_STOP_HANDLER_ANNOTATION, "{}"),
                ],
                hash: 255,
                restart_count: 12,
                termination_grace: Some(0),
                ports: 1,
                pre_stop: true,
            },
        ];
        for case in cases {
            let map: HashMap<String, String> = case
                .entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let info = container_info_from_annotations(&map);
            assert_eq!(info.hash, case.hash, "{}", case.name);
            assert_eq!(info.restart_count, case.restart_count, "{}", case.name);
            assert_eq!(
                info.pod_termination_grace_period, case.termination_grace,
                "{}",
                case.name
            );
            assert_eq!(info.ports.len(), case.ports, "{}", case.name);
            assert_eq!(
                info.pre_stop_handler.is_some(),
                case.pre_stop,
                "{}",
                case.name
            );
        }
    }
}
