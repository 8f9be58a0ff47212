//! Unit tests of the node status setters, the initial node, registration reconciliation and
//! the runtime readiness state (all pure).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use rkubelet_cri::api as cri;
use tokio::time::Instant;

use super::manager::RuntimeState;
use super::register::reconcile_existing_node;
use super::resources::{QuantityFormat, format_quantity, set_machine_info};
use super::setters::*;
use super::*;
use crate::config::{Quantity, ThresholdValue};
use crate::events::EventType;
use crate::health::HealthCheck;
use crate::host::{HostInfo, HugePages};

const GI: u64 = 1 << 30;

fn host() -> HostInfo {
    HostInfo {
        machine_id: "m-1".into(),
        system_uuid: "u-1".into(),
        boot_id: "b-1".into(),
        kernel_version: "6.1.0-18-amd64".into(),
        os_image: "Debian GNU/Linux 12 (bookworm)".into(),
        operating_system: "linux".into(),
        architecture: "amd64".into(),
        num_cores: 4,
        memory_capacity: 16 * GI,
        swap_capacity: 0,
        ephemeral_storage_capacity: Some(100 * GI),
        huge_pages: vec![
            HugePages {
                page_size: 2 << 20,
                num_pages: 512,
            },
            HugePages {
                page_size: GI,
                num_pages: 0,
            },
        ],
    }
}

fn settings() -> NodeStatusSettings {
    let mut s = NodeStatusSettings::new("node-a");
    s.node_ips = vec!["10.0.0.5".parse().unwrap()];
    s
}

fn t(secs: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + secs).unwrap())
}

fn q(s: &str) -> ApiQuantity {
    ApiQuantity(s.to_owned())
}

fn node(name: &str) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.to_owned());
    n
}

fn status(n: &Node) -> &NodeStatus {
    n.status.as_ref().unwrap()
}

fn cond<'a>(n: &'a Node, type_: &str) -> &'a k8s_openapi::api::core::v1::NodeCondition {
    status(n)
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap()
}

fn addresses(n: &Node) -> Vec<(String, String)> {
    status(n)
        .addresses
        .clone()
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect()
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_owned(), b.to_owned())
}

#[test]
fn addresses_single_dual_stack_and_hostname_ip() {
    let mut n = node("node-a");
    set_addresses(&mut n, &["10.0.0.5".parse().unwrap()], "node-a").unwrap();
    assert_eq!(
        addresses(&n),
        [pair("InternalIP", "10.0.0.5"), pair("Hostname", "node-a")]
    );

    let ips = ["10.0.0.5".parse().unwrap(), "fd00::5".parse().unwrap()];
    set_addresses(&mut n, &ips, "node-a").unwrap();
    assert_eq!(
        addresses(&n),
        [
            pair("InternalIP", "10.0.0.5"),
            pair("InternalIP", "fd00::5"),
            pair("Hostname", "node-a")
        ]
    );

    let ips = ["fd00::5".parse().unwrap(), "10.0.0.5".parse().unwrap()];
    set_addresses(&mut n, &ips, "node-a").unwrap();
    assert_eq!(addresses(&n)[0], pair("InternalIP", "fd00::5"));

    set_addresses(&mut n, &[], "192.168.1.9").unwrap();
    assert_eq!(
        addresses(&n),
        [
            pair("InternalIP", "192.168.1.9"),
            pair("Hostname", "192.168.1.9")
        ]
    );

    let err = set_addresses(&mut n, &[], "node-a").unwrap_err();
    assert!(err.to_string().contains("node-a"), "{err}");
    // The previous addresses stay, as upstream leaves them on a setter error.
    assert_eq!(addresses(&n)[0], pair("InternalIP", "192.168.1.9"));
}

#[test]
fn quantities_print_as_go_does() {
    use QuantityFormat::*;
    let cases = [
        (4000, DecimalSI, "4"),
        (3700, DecimalSI, "3700m"),
        (100, DecimalSI, "100m"),
        (110_000, DecimalSI, "110"),
        (1_000_000, DecimalSI, "1k"),
        (0, BinarySI, "0"),
        (1000 * 1000, BinarySI, "1k"),
        (16 * 1024 * 1024 * 1024 * 1000, BinarySI, "16Gi"),
        (1024 * 1000 * 1000, BinarySI, "1000Ki"),
        (96_636_764_000 * 1000, BinarySI, "96636764000"),
        (1500, BinarySI, "1500m"),
    ];
    for (milli, format, want) in cases {
        assert_eq!(format_quantity(milli, format), want, "{milli} {format:?}");
    }
    assert_eq!(resources::huge_page_resource_name(2 << 20), "hugepages-2Mi");
    assert_eq!(resources::huge_page_resource_name(GI), "hugepages-1Gi");
}

fn reservations() -> Reservations {
    let quantities = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity::parse(v).unwrap()))
            .collect()
    };
    Reservations {
        system_reserved: quantities(&[("cpu", "100m"), ("memory", "100Mi")]),
        kube_reserved: quantities(&[("cpu", "200m"), ("memory", "200Mi"), ("pid", "100")]),
        eviction_hard: BTreeMap::from([
            (
                "memory.available".to_owned(),
                ThresholdValue::parse("100Mi").unwrap(),
            ),
            (
                "nodefs.available".to_owned(),
                ThresholdValue::parse("10%").unwrap(),
            ),
            (
                "imagefs.available".to_owned(),
                ThresholdValue::parse("15%").unwrap(),
            ),
        ]),
    }
}

#[test]
fn capacity_and_allocatable_with_reservations_percentages_and_hugepages() {
    let mut s = settings();
    s.reservations = reservations();
    let mut n = node("node-a");
    set_machine_info(&mut n, &s, &host());
    let st = status(&n);
    let want_cap = BTreeMap::from([
        ("cpu".to_owned(), q("4")),
        ("memory".to_owned(), q("16Gi")),
        ("pods".to_owned(), q("110")),
        ("ephemeral-storage".to_owned(), q("100Gi")),
        ("hugepages-2Mi".to_owned(), q("1Gi")),
        ("hugepages-1Gi".to_owned(), q("0")),
    ]);
    assert_eq!(st.capacity.as_ref().unwrap(), &want_cap);
    let want_alloc = BTreeMap::from([
        ("cpu".to_owned(), q("3700m")),
        // 16Gi − 400Mi reserved − 1Gi of huge pages.
        ("memory".to_owned(), q("14960Mi")),
        ("pods".to_owned(), q("110")),
        // 100Gi − int(100Gi × float32(0.1)), as Go computes the percentage.
        ("ephemeral-storage".to_owned(), q("96636764000")),
        ("hugepages-2Mi".to_owned(), q("1Gi")),
        ("hugepages-1Gi".to_owned(), q("0")),
    ]);
    assert_eq!(st.allocatable.as_ref().unwrap(), &want_alloc);
}

#[test]
fn allocatable_clamps_at_zero_and_keeps_extended_resources() {
    let mut s = settings();
    s.reservations.system_reserved =
        BTreeMap::from([("memory".to_owned(), Quantity::parse("100Gi").unwrap())]);
    s.pods_per_core = 10;
    s.local_storage_capacity_isolation = false;
    let mut n = node("node-a");
    let st = n.status.get_or_insert_with(Default::default);
    st.capacity = Some(BTreeMap::from([("example.com/dongle".to_owned(), q("4"))]));
    st.allocatable = Some(BTreeMap::from([
        ("example.com/dongle".to_owned(), q("2")),
        ("example.com/gone".to_owned(), q("1")),
    ]));
    set_machine_info(&mut n, &s, &host());
    let st = status(&n);
    let cap = st.capacity.as_ref().unwrap();
    let alloc = st.allocatable.as_ref().unwrap();
    assert_eq!(cap["example.com/dongle"], q("4"));
    assert_eq!(alloc["example.com/dongle"], q("4"));
    assert!(!alloc.contains_key("example.com/gone"));
    assert_eq!(alloc["memory"], q("0"));
    assert_eq!(cap["pods"], q("40"), "podsPerCore × cores caps maxPods");
    assert!(!cap.contains_key("ephemeral-storage"));
}

#[test]
fn percentage_eviction_of_memory_and_disabled_signals() {
    let mut s = settings();
    s.reservations.eviction_hard = BTreeMap::from([
        (
            "memory.available".to_owned(),
            ThresholdValue::parse("5%").unwrap(),
        ),
        (
            "nodefs.available".to_owned(),
            ThresholdValue::parse("0%").unwrap(),
        ),
    ]);
    let mut h = host();
    h.huge_pages.clear();
    let mut n = node("node-a");
    set_machine_info(&mut n, &s, &h);
    let alloc = status(&n).allocatable.clone().unwrap();
    let mem = 16 * GI as i64;
    let reserved = (mem as f64 * f64::from(5f32 / 100f32)) as i64;
    assert_eq!(alloc["memory"], q(&(mem - reserved).to_string()));
    assert_eq!(
        alloc["ephemeral-storage"],
        q("100Gi"),
        "0% disables the signal"
    );
}

fn inputs() -> StatusInputs {
    StatusInputs {
        runtime_name: "containerd".into(),
        runtime_version: Some("1.6.20".into()),
        ..Default::default()
    }
}

#[test]
fn node_info_versions_machine_ids_and_reboot_event() {
    let s = settings();
    let mut n = node("node-a");
    let events = set_node_status(&mut n, &s, &host(), &inputs(), &t(0));
    assert!(!events.iter().any(|e| e.reason == "NodeRebooted"));
    let info = status(&n).node_info.clone().unwrap();
    assert_eq!(info.machine_id, "m-1");
    assert_eq!(info.system_uuid, "u-1");
    assert_eq!(info.boot_id, "b-1");
    assert_eq!(info.kernel_version, "6.1.0-18-amd64");
    assert_eq!(info.os_image, "Debian GNU/Linux 12 (bookworm)");
    assert_eq!(info.container_runtime_version, "containerd://1.6.20");
    assert_eq!(info.kubelet_version, DEFAULT_KUBELET_VERSION);
    // DisableNodeKubeProxyVersion is on by default in 1.33: the field stays empty.
    assert_eq!(info.kube_proxy_version, "");
    assert_eq!(info.operating_system, "linux");
    assert_eq!(info.architecture, "amd64");
    assert_eq!(info.swap.unwrap().capacity, Some(0));
    assert_eq!(
        status(&n)
            .daemon_endpoints
            .clone()
            .unwrap()
            .kubelet_endpoint
            .unwrap()
            .port,
        10250
    );

    let mut h = host();
    h.boot_id = "b-2".into();
    let mut inp = inputs();
    inp.runtime_version = None;
    let events = set_node_status(&mut n, &s, &h, &inp, &t(10));
    let reboot = events.iter().find(|e| e.reason == "NodeRebooted").unwrap();
    assert_eq!(reboot.event_type, EventType::Warning);
    assert_eq!(
        reboot.message,
        "Node node-a has been rebooted, boot id: b-2"
    );
    let info = status(&n).node_info.clone().unwrap();
    assert_eq!(info.container_runtime_version, "containerd://Unknown");
}

fn image(id: &str, size: u64, tags: &[&str], digests: &[&str]) -> cri::Image {
    cri::Image {
        id: id.into(),
        size,
        repo_tags: tags.iter().map(|s| (*s).to_owned()).collect(),
        repo_digests: digests.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

#[test]
fn images_sorted_by_size_capped_and_named_by_digests_then_tags() {
    let imgs = vec![
        image("sha256:a", 10, &["a:1"], &["a@sha256:1"]),
        image(
            "sha256:b",
            30,
            &["b:1", "b:2", "b:3", "b:4"],
            &["b@sha256:1", "b@sha256:2"],
        ),
        image("sha256:c", 20, &[], &["c@sha256:1"]),
        image("sha256:d", 20, &["d:1"], &[]),
    ];
    let mut n = node("node-a");
    set_images(&mut n, 3, &imgs);
    let got: Vec<(Vec<String>, i64)> = status(&n)
        .images
        .clone()
        .unwrap()
        .into_iter()
        .map(|i| (i.names.unwrap(), i.size_bytes.unwrap()))
        .collect();
    let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        got,
        vec![
            (
                names(&["b@sha256:1", "b@sha256:2", "b:1", "b:2", "b:3"]),
                30
            ),
            (names(&["d:1"]), 20),
            (names(&["c@sha256:1"]), 20),
        ]
    );
    set_images(&mut n, -1, &imgs);
    assert_eq!(status(&n).images.as_ref().unwrap().len(), 4);
    set_images(&mut n, 0, &imgs);
    assert_eq!(status(&n).images, None);
    set_images(&mut n, 50, &[]);
    assert_eq!(status(&n).images, None);
}

#[test]
fn ready_condition_transitions_only_move_the_transition_time_on_status_change() {
    let s = settings();
    let mut n = node("node-a");
    let events = set_node_status(&mut n, &s, &host(), &inputs(), &t(0));
    let ready = cond(&n, "Ready");
    assert_eq!(ready.status, "True");
    assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("kubelet is posting ready status")
    );
    assert_eq!(ready.last_transition_time, Some(t(0)));
    assert!(
        !events.iter().any(|e| e.reason == "NodeReady"),
        "a new Ready condition records no event"
    );
    let types: Vec<&str> = status(&n)
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(
        types,
        ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    );

    let events = set_node_status(&mut n, &s, &host(), &inputs(), &t(10));
    assert!(events.is_empty(), "{events:?}");
    let ready = cond(&n, "Ready");
    assert_eq!(ready.last_heartbeat_time, Some(t(10)));
    assert_eq!(ready.last_transition_time, Some(t(0)));

    let mut inp = inputs();
    inp.not_ready = vec![
        "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized".into(),
    ];
    let events = set_node_status(&mut n, &s, &host(), &inp, &t(20));
    let ready = cond(&n, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
    assert_eq!(ready.message.as_deref(), Some(inp.not_ready[0].as_str()));
    assert_eq!(ready.last_transition_time, Some(t(20)));
    assert_eq!(
        events,
        vec![NodeEvent {
            event_type: EventType::Normal,
            reason: "NodeNotReady".into(),
            message: "Node node-a status is now: NodeNotReady".into()
        }]
    );

    inp.not_ready
        .push("PLEG is not healthy: pleg has yet to be successful".into());
    set_node_status(&mut n, &s, &host(), &inp, &t(30));
    let ready = cond(&n, "Ready");
    assert_eq!(
        ready.message.as_deref(),
        Some(format!("[{}, {}]", inp.not_ready[0], inp.not_ready[1]).as_str())
    );
    assert_eq!(ready.last_transition_time, Some(t(20)), "still False");

    let events = set_node_status(&mut n, &s, &host(), &inputs(), &t(40));
    assert_eq!(cond(&n, "Ready").status, "True");
    assert_eq!(cond(&n, "Ready").last_transition_time, Some(t(40)));
    assert_eq!(events[0].reason, "NodeReady");
}

#[test]
fn ready_requires_capacities_and_aggregates_like_go() {
    let mut n = node("node-a");
    set_ready_condition(&mut n, &t(0), &[], true);
    assert_eq!(
        cond(&n, "Ready").message.as_deref(),
        Some("missing node capacity for resources: cpu, memory, pods, ephemeral-storage")
    );
    assert_eq!(aggregate_message(&[]), None);
    assert_eq!(
        aggregate_message(&["a".into(), "a".into()]).as_deref(),
        Some("a")
    );
    assert_eq!(
        aggregate_message(&["a".into(), "b".into(), "a".into()]).as_deref(),
        Some("[a, b]")
    );
}

#[test]
fn pressure_conditions_have_upstream_reasons_and_only_change_on_transitions() {
    let mut n = node("node-a");
    let ev = set_pressure_condition(&mut n, PressureKind::Memory, false, &t(0)).unwrap();
    assert_eq!(ev.reason, "NodeHasSufficientMemory");
    assert_eq!(
        ev.message,
        "Node node-a status is now: NodeHasSufficientMemory"
    );
    set_pressure_condition(&mut n, PressureKind::Disk, false, &t(0));
    set_pressure_condition(&mut n, PressureKind::Pid, false, &t(0));
    let expect = [
        (
            "MemoryPressure",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        (
            "DiskPressure",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        (
            "PIDPressure",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
    ];
    for (type_, reason, message) in expect {
        let c = cond(&n, type_);
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some(reason));
        assert_eq!(c.message.as_deref(), Some(message));
    }
    assert!(set_pressure_condition(&mut n, PressureKind::Memory, false, &t(5)).is_none());
    let c = cond(&n, "MemoryPressure");
    assert_eq!(
        (
            c.last_heartbeat_time.clone(),
            c.last_transition_time.clone()
        ),
        (Some(t(5)), Some(t(0)))
    );
    let ev = set_pressure_condition(&mut n, PressureKind::Memory, true, &t(9)).unwrap();
    assert_eq!(ev.reason, "NodeHasInsufficientMemory");
    let c = cond(&n, "MemoryPressure");
    assert_eq!(c.status, "True");
    assert_eq!(c.reason.as_deref(), Some("KubeletHasInsufficientMemory"));
    assert_eq!(c.last_transition_time, Some(t(9)));
}

#[test]
fn external_cloud_provider_taints_annotates_and_keeps_cloud_addresses() {
    let mut s = settings();
    s.external_cloud_provider = true;
    s.provided_node_ip = Some("10.0.0.5".into());
    let n = initial_node(&s, &host(), &inputs(), &t(0));
    let taints = n.spec.clone().unwrap().taints.unwrap();
    assert_eq!(
        taints,
        [Taint {
            key: "node.cloudprovider.kubernetes.io/uninitialized".into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]
    );
    assert_eq!(
        n.metadata.annotations.clone().unwrap()["alpha.kubernetes.io/provided-node-ip"],
        "10.0.0.5"
    );
    // The kubelet still reports its own addresses until the cloud controller manager set some;
    // then they stand.
    assert_eq!(addresses(&n)[0], pair("InternalIP", "10.0.0.5"));
    let mut cloud = n.clone();
    status_mut(&mut cloud).addresses = Some(vec![k8s_openapi::api::core::v1::NodeAddress {
        type_: "ExternalIP".into(),
        address: "203.0.113.7".into(),
    }]);
    set_node_status(&mut cloud, &s, &host(), &inputs(), &t(10));
    assert_eq!(addresses(&cloud), [pair("ExternalIP", "203.0.113.7")]);
    // Without the external provider: no taint, no annotation, our addresses win.
    let mut plain = settings();
    plain.provided_node_ip = Some("10.0.0.5".into());
    let n = initial_node(&plain, &host(), &inputs(), &t(0));
    assert_eq!(n.spec.unwrap().taints, None);
    assert!(
        !n.metadata
            .annotations
            .unwrap()
            .contains_key("alpha.kubernetes.io/provided-node-ip")
    );
    set_node_status(&mut cloud, &plain, &host(), &inputs(), &t(20));
    assert_eq!(addresses(&cloud)[0], pair("InternalIP", "10.0.0.5"));
}

#[test]
fn external_cloud_provider_without_node_ip_reports_the_host_name_alone() {
    let mut s = settings();
    s.external_cloud_provider = true;
    s.node_ips = Vec::new();
    let n = initial_node(&s, &host(), &inputs(), &t(0));
    assert_eq!(addresses(&n), [pair("Hostname", &s.hostname)]);
    // The cloud controller manager's addresses then stand.
    let mut cloud = n.clone();
    status_mut(&mut cloud).addresses = Some(vec![k8s_openapi::api::core::v1::NodeAddress {
        type_: "InternalIP".into(),
        address: "10.1.2.3".into(),
    }]);
    set_node_status(&mut cloud, &s, &host(), &inputs(), &t(10));
    assert_eq!(addresses(&cloud), [pair("InternalIP", "10.1.2.3")]);
}

#[test]
fn initial_node_labels_taints_annotation_and_status() {
    let mut s = settings();
    s.node_labels = BTreeMap::from([
        ("node-role.kubernetes.io/worker".to_owned(), String::new()),
        ("kubernetes.io/hostname".to_owned(), "custom".to_owned()),
    ]);
    s.register_with_taints = vec![Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: "NoSchedule".into(),
        ..Default::default()
    }];
    s.register_schedulable = false;
    s.provider_id = Some("fake://node-a".into());
    let n = initial_node(&s, &host(), &inputs(), &t(0));
    assert_eq!(n.metadata.name.as_deref(), Some("node-a"));
    let labels = n.metadata.labels.clone().unwrap();
    let want = BTreeMap::from([
        ("beta.kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ("beta.kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ("kubernetes.io/hostname".to_owned(), "custom".to_owned()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("node-role.kubernetes.io/worker".to_owned(), String::new()),
    ]);
    assert_eq!(labels, want);
    assert_eq!(
        n.metadata.annotations.clone().unwrap()["volumes.kubernetes.io/controller-managed-attach-detach"],
        "true"
    );
    let spec = n.spec.clone().unwrap();
    assert_eq!(spec.unschedulable, Some(true));
    assert_eq!(spec.provider_id.as_deref(), Some("fake://node-a"));
    let taints: Vec<(String, String)> = spec
        .taints
        .unwrap()
        .into_iter()
        .map(|t| (t.key, t.effect))
        .collect();
    assert_eq!(
        taints,
        [
            pair("dedicated", "NoSchedule"),
            pair("node.kubernetes.io/unschedulable", "NoSchedule")
        ]
    );
    assert_eq!(cond(&n, "Ready").status, "True");
    assert_eq!(status(&n).capacity.as_ref().unwrap()["cpu"], q("4"));

    let plain = initial_node(&settings(), &host(), &inputs(), &t(0));
    let spec = plain.spec.unwrap();
    assert_eq!((spec.unschedulable, spec.taints), (None, None));
    assert_eq!(
        plain.metadata.labels.unwrap()["kubernetes.io/hostname"],
        "node-a"
    );
}

#[test]
fn reconcile_existing_node_fixes_labels_annotation_and_hugepages() {
    let initial = initial_node(&settings(), &host(), &inputs(), &t(0));
    let mut existing = node("node-a");
    existing.metadata.labels = Some(BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), "old".to_owned()),
        ("team".to_owned(), "x".to_owned()),
    ]));
    assert!(reconcile_existing_node(&initial, &mut existing));
    let labels = existing.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "node-a");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["team"], "x", "other labels stay");
    assert_eq!(
        existing.metadata.annotations.clone().unwrap()["volumes.kubernetes.io/controller-managed-attach-detach"],
        "true"
    );
    let st = status(&existing);
    assert_eq!(st.capacity, status(&initial).capacity);
    assert_eq!(st.allocatable, status(&initial).allocatable);
    assert!(
        !reconcile_existing_node(&initial, &mut existing),
        "idempotent"
    );

    // A huge page size the host lost goes; a changed pool size is updated.
    let st = existing.status.as_mut().unwrap();
    let cap = st.capacity.as_mut().unwrap();
    cap.insert("hugepages-32Mi".into(), q("0"));
    cap.insert("hugepages-2Mi".into(), q("2Gi"));
    cap.insert("example.com/dongle".into(), q("1"));
    assert!(reconcile_existing_node(&initial, &mut existing));
    let cap = status(&existing).capacity.clone().unwrap();
    assert!(!cap.contains_key("hugepages-32Mi"));
    assert_eq!(cap["hugepages-2Mi"], q("1Gi"));
    assert_eq!(cap["example.com/dongle"], q("1"));
}

#[test]
fn status_change_detection_ignores_heartbeats_and_quantity_spelling() {
    let s = settings();
    let mut a = node("node-a");
    set_node_status(&mut a, &s, &host(), &inputs(), &t(0));
    let mut b = a.clone();
    set_node_status(&mut b, &s, &host(), &inputs(), &t(10));
    assert_ne!(a, b, "heartbeats moved");
    assert!(!node_status_has_changed(
        a.status.as_ref(),
        b.status.as_ref()
    ));

    let cap = b.status.as_mut().unwrap().capacity.as_mut().unwrap();
    cap.insert("memory".into(), q("16384Mi"));
    assert!(!node_status_has_changed(
        a.status.as_ref(),
        b.status.as_ref()
    ));

    let mut inp = inputs();
    inp.not_ready = vec!["x".into()];
    set_node_status(&mut b, &s, &host(), &inp, &t(20));
    assert!(node_status_has_changed(
        a.status.as_ref(),
        b.status.as_ref()
    ));

    let mut c = a.clone();
    let mut more = inputs();
    more.images = vec![image("sha256:z", 1, &["z:1"], &[])];
    set_node_status(&mut c, &s, &host(), &more, &t(0));
    assert!(node_status_has_changed(
        a.status.as_ref(),
        c.status.as_ref()
    ));
}

fn runtime_status(network: (bool, &str, &str), runtime_ready: bool) -> cri::StatusResponse {
    cri::StatusResponse {
        status: Some(cri::RuntimeStatus {
            conditions: vec![
                cri::RuntimeCondition {
                    r#type: "RuntimeReady".into(),
                    status: runtime_ready,
                    reason: if runtime_ready { "" } else { "Broken" }.into(),
                    message: String::new(),
                },
                cri::RuntimeCondition {
                    r#type: "NetworkReady".into(),
                    status: network.0,
                    reason: network.1.into(),
                    message: network.2.into(),
                },
            ],
        }),
        runtime_handlers: vec![cri::RuntimeHandler {
            name: "runc".into(),
            features: Some(cri::RuntimeHandlerFeatures {
                recursive_read_only_mounts: true,
                user_namespaces: false,
            }),
        }],
        features: Some(cri::RuntimeFeatures {
            supplemental_groups_policy: true,
        }),
        ..Default::default()
    }
}

#[test]
fn runtime_state_messages_follow_upstream() {
    let start = Instant::now();
    let mut rs = RuntimeState::default();
    assert_eq!(
        rs.not_ready(start, &[]),
        ["container runtime status check may not have completed yet"]
    );
    rs.observe(&runtime_status((true, "", ""), true), start);
    assert!(rs.not_ready(start, &[]).is_empty());

    rs.observe(
        &runtime_status(
            (false, "NetworkPluginNotReady", "cni plugin not initialized"),
            true,
        ),
        start,
    );
    assert_eq!(
        rs.not_ready(start, &[]),
        [
            "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized"
        ]
    );

    let pleg: HealthCheck = Arc::new(|| Err("pleg has yet to be successful".to_owned()));
    // Upstream's maxWaitForContainerRuntime: up at 29.9 s after the last good check, down at 30 s.
    assert!(
        !rs.not_ready(start + Duration::from_millis(29_900), &[])
            .contains(&"container runtime is down".to_owned())
    );
    let errs = rs.not_ready(
        start + Duration::from_secs(30),
        &[("PLEG".to_owned(), pleg)],
    );
    assert_eq!(errs[0], "container runtime is down");
    assert_eq!(
        errs[1],
        "PLEG is not healthy: pleg has yet to be successful"
    );

    let mut fresh = RuntimeState::default();
    fresh.observe(&runtime_status((true, "", ""), false), start);
    assert_eq!(
        fresh.not_ready(start, &[]),
        [
            "container runtime status check may not have completed yet",
            "container runtime not ready: RuntimeReady=false reason:Broken message:"
        ]
    );
}

#[test]
fn runtime_handlers_and_features_reach_the_status() {
    let start = Instant::now();
    let mut rs = RuntimeState::default();
    rs.observe(&runtime_status((true, "", ""), true), start);
    let mut inp = inputs();
    inp.runtime_handlers = rs.handlers().to_vec();
    inp.supplemental_groups_policy = Some(true);
    let mut n = node("node-a");
    set_node_status(&mut n, &settings(), &host(), &inp, &t(0));
    let st = status(&n);
    let h = &st.runtime_handlers.as_ref().unwrap()[0];
    assert_eq!(h.name.as_deref(), Some("runc"));
    let f = h.features.clone().unwrap();
    assert_eq!(
        (f.recursive_read_only_mounts, f.user_namespaces),
        (Some(true), Some(false))
    );
    assert_eq!(
        st.features.clone().unwrap().supplemental_groups_policy,
        Some(true)
    );
    let mut bare = node("node-a");
    set_node_status(&mut bare, &settings(), &host(), &inputs(), &t(0));
    assert_eq!(status(&bare).runtime_handlers, None);
    assert_eq!(status(&bare).features, None);
}

/// With `DisableNodeKubeProxyVersion` off the deprecated field carries the kubelet's version;
/// turned on (1.33's default) it is cleared, also where an older kubelet had filled it.
#[test]
fn kube_proxy_version_follows_disable_node_kube_proxy_version() {
    let mut s = settings();
    s.report_kube_proxy_version = true;
    let mut n = Node::default();
    set_node_status(&mut n, &s, &host(), &inputs(), &t(0));
    let filled = status(&n).node_info.clone().unwrap().kube_proxy_version;
    assert_eq!(filled, DEFAULT_KUBELET_VERSION);
    s.report_kube_proxy_version = false;
    set_node_status(&mut n, &s, &host(), &inputs(), &t(1));
    assert_eq!(status(&n).node_info.clone().unwrap().kube_proxy_version, "");
}
