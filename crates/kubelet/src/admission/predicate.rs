//! admission::predicate — the kubelet's predicate admit handler (upstream
//! `lifecycle.NewPredicateAdmitHandler` + `generalFilter`, minus the supplemental-groups check
//! that lives in `security::groups`). Owns a
//! receiver of the current Node (from the API server, or the locally computed initial Node);
//! receives the pod being admitted and the active pods; emits the first rejection in upstream
//! order: OS label, OS field, resources, node affinity/selector, node name, host ports, then
//! NoExecute taints (not for static pods).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use tokio::sync::watch;

use super::node_affinity::{node_name_fits, required_node_affinity_matches};
use super::ports::conflicting_port;
use super::taints::untolerated_no_execute;
use super::{AdmitHandler, Rejection};
use crate::resources::{Allocatable, RequestOptions, Resource, fits, fits_pod_count, pod_requests};
use crate::types::PodExt;

/// Reason: the pod's `kubernetes.io/os` label is not this node's OS.
pub const POD_OS_SELECTOR_MISMATCH: &str = "PodOSSelectorNodeLabelDoesNotMatch";
/// Reason: the pod's `spec.os.name` is not this node's OS.
pub const POD_OS_NOT_SUPPORTED: &str = "PodOSNotSupported";
/// Reason (predicate name): nodeSelector / required node affinity do not match.
pub const NODE_AFFINITY: &str = "NodeAffinity";
/// Reason (predicate name): `spec.nodeName` is another node.
pub const NODE_NAME: &str = "NodeName";
/// Reason (predicate name): a host port is taken.
pub const NODE_PORTS: &str = "NodePorts";
/// Reason (predicate name): an untolerated NoExecute taint.
pub const TAINT_TOLERATION: &str = "TaintToleration";

const NODE_AFFINITY_DESC: &str = "node(s) didn't match Pod's node affinity/selector";
const NODE_NAME_DESC: &str = "node(s) didn't match the requested node name";
const NODE_PORTS_DESC: &str = "node(s) didn't have free ports for the requested pod ports";
const TAINT_DESC: &str = "node(s) had taints that the pod didn't tolerate";

/// The OS this kubelet runs pods for.
const NODE_OS: &str = "linux";
const OS_LABEL: &str = "kubernetes.io/os";

/// Feature switches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PredicateOptions {
    /// The `PodLevelResources` gate (off by default in v1.33).
    pub pod_level_resources: bool,
}

/// Upstream `PredicateFailureError`: reason = predicate name, message
/// `Predicate <name> failed: <description>`.
fn predicate_failure(name: &str, desc: &str) -> Rejection {
    Rejection {
        reason: name.to_owned(),
        message: format!("Predicate {name} failed: {desc}"),
    }
}

/// Whether the Node carries enough to check against: a placeholder without a name (the node
/// is not known yet) is not, and then only the node-independent checks run.
fn node_known(node: &Node) -> bool {
    node.metadata.name.as_deref().is_some_and(|n| !n.is_empty())
}

/// All predicate checks for `pod` on `node`, with `active` the pods already admitted.
pub fn check_pod(
    pod: &Pod,
    active: &[&Pod],
    node: &Node,
    options: PredicateOptions,
) -> Result<(), Rejection> {
    // Upstream compares against the node's OS label, forced to the kubelet's own OS.
    if pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(OS_LABEL))
        .is_some_and(|os| os != NODE_OS)
    {
        return Err(Rejection {
            reason: POD_OS_SELECTOR_MISMATCH.to_owned(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .to_owned(),
        });
    }
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.os.as_ref())
        .is_some_and(|os| os.name != NODE_OS)
    {
        return Err(Rejection {
            reason: POD_OS_NOT_SUPPORTED.to_owned(),
            message: "Failed to admit pod as the OS field doesn't match node OS".to_owned(),
        });
    }
    let known = node_known(node);
    if known {
        check_resources(pod, active, node, options)?;
        if !required_node_affinity_matches(pod, node) {
            return Err(predicate_failure(NODE_AFFINITY, NODE_AFFINITY_DESC));
        }
        if !node_name_fits(pod, node) {
            return Err(predicate_failure(NODE_NAME, NODE_NAME_DESC));
        }
    }
    if conflicting_port(pod, active).is_some() {
        return Err(predicate_failure(NODE_PORTS, NODE_PORTS_DESC));
    }
    let is_static = pod.source().is_some_and(|s| s.is_static());
    if known && !is_static {
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default();
        let tolerations = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default();
        if untolerated_no_execute(taints, tolerations).is_some() {
            return Err(predicate_failure(TAINT_TOLERATION, TAINT_DESC));
        }
    }
    Ok(())
}

/// The resource fit (upstream `noderesources.Fits`): the pod count against allocatable `pods`
/// (`maxPods`, or `podsPerCore` × cores when lower), then the requests; admits when the node
/// reports no allocatable resources yet.
fn check_resources(
    pod: &Pod,
    active: &[&Pod],
    node: &Node,
    options: PredicateOptions,
) -> Result<(), Rejection> {
    let Some(list) = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .filter(|a| !a.is_empty())
    else {
        return Ok(());
    };
    let opts = RequestOptions {
        pod_level_resources: options.pod_level_resources,
        ..Default::default()
    };
    let allocatable = Allocatable::from_list(list);
    let mut used = Resource::default();
    for p in active {
        used.add(&Resource::from_nanos(&pod_requests(p, opts)));
    }
    let wanted = Resource::from_nanos(&pod_requests(pod, opts));
    // Upstream `fitsRequest` reports the pod count before any requested resource.
    let too_many = fits_pod_count(active.len(), &allocatable);
    match too_many
        .as_ref()
        .or(fits(&wanted, &allocatable, &used).first())
    {
        Some(short) => Err(Rejection {
            reason: short.reason(),
            message: short.message(),
        }),
        None => Ok(()),
    }
}

/// The predicate admit handler over the current Node.
pub struct NodePredicates {
    node: watch::Receiver<Arc<Node>>,
    options: PredicateOptions,
}

impl NodePredicates {
    pub fn new(node: watch::Receiver<Arc<Node>>) -> Self {
        Self {
            node,
            options: PredicateOptions::default(),
        }
    }

    pub fn with_options(mut self, options: PredicateOptions) -> Self {
        self.options = options;
        self
    }
}

impl AdmitHandler for NodePredicates {
    fn admit(&self, pod: &Pod, active: &[&Pod]) -> Result<(), Rejection> {
        let node = self.node.borrow().clone();
        check_pod(pod, active, &node, self.options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Admission;
    use crate::types::CONFIG_SOURCE_ANNOTATION;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, NodeSpec, NodeStatus, PodOS, PodSpec, ResourceRequirements,
        Taint, Toleration,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    }

    fn node(allocatable: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(BTreeMap::from([
                    ("kubernetes.io/hostname".to_owned(), "n1".to_owned()),
                    ("zone".to_owned(), "a".to_owned()),
                ])),
                ..Default::default()
            },
            status: Some(NodeStatus {
                allocatable: Some(list(allocatable)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(name: &str, requests: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                annotations: Some(BTreeMap::from([(
                    CONFIG_SOURCE_ANNOTATION.to_owned(),
                    "api".to_owned(),
                )])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(list(requests)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn check(p: &Pod, active: &[&Pod], n: &Node) -> Result<(), Rejection> {
        check_pod(p, active, n, PredicateOptions::default())
    }

    #[test]
    fn resource_rejections_use_upstream_reasons_and_messages() {
        let n = node(&[
            ("cpu", "1"),
            ("memory", "1Gi"),
            ("ephemeral-storage", "1Gi"),
            ("pods", "110"),
        ]);
        let running = pod("running", &[("cpu", "500m"), ("memory", "512Mi")]);
        let err = check(&pod("p", &[("cpu", "2")]), &[&running], &n).unwrap_err();
        assert_eq!(err.reason, "OutOfcpu");
        assert_eq!(
            err.message,
            "Node didn't have enough resource: cpu, requested: 2000, used: 500, capacity: 1000"
        );
        let err = check(&pod("p", &[("memory", "600Mi")]), &[&running], &n).unwrap_err();
        assert_eq!(err.reason, "OutOfmemory");
        assert_eq!(
            err.message,
            "Node didn't have enough resource: memory, requested: 629145600, used: 536870912, capacity: 1073741824"
        );
        let err = check(&pod("p", &[("ephemeral-storage", "2Gi")]), &[], &n).unwrap_err();
        assert_eq!(err.reason, "OutOfephemeral-storage");
        let err = check(&pod("p", &[("hugepages-2Mi", "2Mi")]), &[], &n).unwrap_err();
        assert_eq!(err.reason, "OutOfhugepages-2Mi");
        assert_eq!(
            err.message,
            "Node didn't have enough resource: hugepages-2Mi, requested: 2097152, used: 0, capacity: 0"
        );
        assert!(check(&pod("p", &[("cpu", "500m")]), &[&running], &n).is_ok());
        // Extended resources the node does not report are left to others (DRA, cluster level).
        assert!(check(&pod("p", &[("example.com/gpu", "1")]), &[], &n).is_ok());
        let gpu = node(&[("cpu", "1"), ("example.com/gpu", "1")]);
        let err = check(&pod("p", &[("example.com/gpu", "2")]), &[], &gpu).unwrap_err();
        assert_eq!(err.reason, "OutOfexample.com/gpu");
    }

    #[test]
    fn pods_are_counted_against_allocatable_pods() {
        // Allocatable `pods` is what the node status computed from maxPods and podsPerCore;
        // upstream `fitsRequest` counts every pod, whatever it requests, and first.
        let n = node(&[("cpu", "1"), ("pods", "2")]);
        let a = pod("a", &[]);
        let b = pod("b", &[]);
        assert!(check(&pod("p", &[]), &[&a], &n).is_ok());
        let err = check(&pod("p", &[]), &[&a, &b], &n).unwrap_err();
        assert_eq!(err.reason, "OutOfpods");
        assert_eq!(
            err.message,
            "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
        );
        // Too many pods is reported before a resource that does not fit either.
        let err = check(&pod("p", &[("cpu", "2")]), &[&a, &b], &n).unwrap_err();
        assert_eq!(err.reason, "OutOfpods");
        // A node reporting no pods (yet) does not count them, as for cpu and memory.
        let unreported = node(&[("cpu", "1")]);
        assert!(check(&pod("p", &[]), &[&a, &b], &unreported).is_ok());
        let none = node(&[("pods", "0")]);
        let err = check(&pod("p", &[]), &[], &none).unwrap_err();
        assert_eq!(
            err.message,
            "Node didn't have enough resource: pods, requested: 1, used: 0, capacity: 0"
        );
    }

    #[test]
    fn pods_per_core_limits_admission_through_the_node_status() {
        use crate::host::HostInfo;
        use crate::nodestatus::{NodeStatusSettings, StatusInputs, initial_node};
        // maxPods 110 but podsPerCore 1 on 2 cores: the third pod is refused.
        let mut settings = NodeStatusSettings::new("n1");
        settings.pods_per_core = 1;
        let host = HostInfo {
            num_cores: 2,
            ..HostInfo::default()
        };
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let n = initial_node(&settings, &host, &StatusInputs::default(), &now);
        let (a, b) = (pod("a", &[]), pod("b", &[]));
        assert!(check(&pod("p", &[]), &[&a], &n).is_ok());
        let err = check(&pod("p", &[]), &[&a, &b], &n).unwrap_err();
        assert_eq!(
            (err.reason.as_str(), err.message.as_str()),
            (
                "OutOfpods",
                "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
            )
        );
    }

    #[test]
    fn missing_node_data_admits() {
        let greedy = pod("p", &[("cpu", "100"), ("memory", "1Ti")]);
        // Known node without allocatable yet.
        let mut n = node(&[]);
        assert!(check(&greedy, &[], &n).is_ok());
        n.status = None;
        assert!(check(&greedy, &[], &n).is_ok());
        // Placeholder node: nothing node-specific is checked.
        let mut selective = greedy.clone();
        selective.spec.as_mut().unwrap().node_selector =
            Some(BTreeMap::from([("zone".to_owned(), "b".to_owned())]));
        assert!(check(&selective, &[], &Node::default()).is_ok());
        // Through the watch handler too.
        let (_tx, rx) = watch::channel(Arc::new(Node::default()));
        let admission = Admission::new(vec![Box::new(NodePredicates::new(rx))]);
        assert!(admission.admit(&selective, &[]).is_ok());
    }

    #[test]
    fn handler_follows_node_updates() {
        let (tx, rx) = watch::channel(Arc::new(node(&[("cpu", "1")])));
        let h = NodePredicates::new(rx);
        let p = pod("p", &[("cpu", "2")]);
        assert_eq!(h.admit(&p, &[]).unwrap_err().reason, "OutOfcpu");
        tx.send_replace(Arc::new(node(&[("cpu", "4")])));
        assert!(h.admit(&p, &[]).is_ok());
    }

    #[test]
    fn node_selector_and_name() {
        let n = node(&[("cpu", "1")]);
        let mut p = pod("p", &[]);
        p.spec.as_mut().unwrap().node_selector =
            Some(BTreeMap::from([("zone".to_owned(), "b".to_owned())]));
        let err = check(&p, &[], &n).unwrap_err();
        assert_eq!(err.reason, "NodeAffinity");
        assert_eq!(
            err.message,
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
        );
        p.spec.as_mut().unwrap().node_selector =
            Some(BTreeMap::from([("zone".to_owned(), "a".to_owned())]));
        assert!(check(&p, &[], &n).is_ok());
        p.spec.as_mut().unwrap().node_name = Some("n2".into());
        let err = check(&p, &[], &n).unwrap_err();
        assert_eq!(err.reason, "NodeName");
        assert_eq!(
            err.message,
            "Predicate NodeName failed: node(s) didn't match the requested node name"
        );
    }

    #[test]
    fn resources_are_reported_before_affinity() {
        let n = node(&[("cpu", "1")]);
        let mut p = pod("p", &[("cpu", "2")]);
        p.spec.as_mut().unwrap().node_selector =
            Some(BTreeMap::from([("zone".to_owned(), "b".to_owned())]));
        assert_eq!(check(&p, &[], &n).unwrap_err().reason, "OutOfcpu");
    }

    #[test]
    fn host_port_conflicts() {
        let n = node(&[]);
        let with_port = |name: &str| {
            let mut p = pod(name, &[]);
            p.spec.as_mut().unwrap().containers[0].ports = Some(vec![ContainerPort {
                container_port: 8080,
                host_port: Some(8080),
                ..Default::default()
            }]);
            p
        };
        let a = with_port("a");
        let err = check(&with_port("b"), &[&a], &n).unwrap_err();
        assert_eq!(err.reason, "NodePorts");
        assert_eq!(
            err.message,
            "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
        );
        assert!(check(&with_port("b"), &[], &n).is_ok());
    }

    #[test]
    fn no_execute_taints_except_for_static_pods() {
        let mut n = node(&[]);
        n.spec = Some(NodeSpec {
            taints: Some(vec![
                Taint {
                    key: "maintenance".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                },
                Taint {
                    key: "dedicated".into(),
                    value: Some("db".into()),
                    effect: "NoExecute".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        });
        let mut p = pod("p", &[]);
        let err = check(&p, &[], &n).unwrap_err();
        assert_eq!(err.reason, "TaintToleration");
        assert_eq!(
            err.message,
            "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
        );
        p.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("db".into()),
            ..Default::default()
        }]);
        assert!(check(&p, &[], &n).is_ok());
        let mut static_pod = pod("s", &[]);
        static_pod
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CONFIG_SOURCE_ANNOTATION.to_owned(), "file".to_owned());
        assert!(check(&static_pod, &[], &n).is_ok());
    }

    #[test]
    fn os_checks() {
        let n = node(&[]);
        let mut p = pod("p", &[]);
        p.metadata.labels = Some(BTreeMap::from([(
            OS_LABEL.to_owned(),
            "windows".to_owned(),
        )]));
        let err = check(&p, &[], &n).unwrap_err();
        assert_eq!(err.reason, "PodOSSelectorNodeLabelDoesNotMatch");
        assert_eq!(
            err.message,
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
        );
        p.metadata.labels = None;
        p.spec.as_mut().unwrap().os = Some(PodOS {
            name: "windows".into(),
        });
        let err = check(&p, &[], &n).unwrap_err();
        assert_eq!(err.reason, "PodOSNotSupported");
        assert_eq!(
            err.message,
            "Failed to admit pod as the OS field doesn't match node OS"
        );
        p.spec.as_mut().unwrap().os = Some(PodOS {
            name: "linux".into(),
        });
        assert!(check(&p, &[], &n).is_ok());
    }
}
