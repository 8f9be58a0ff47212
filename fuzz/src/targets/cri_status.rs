//! Target `cri-status`: what the container runtime reports, turned into the pod's API status.
//! Inputs are raw bytes decoded into a pod spec, CRI `PodSandboxStatus`es and
//! `ContainerStatus`es (labels, annotations, timestamps, states, IPs — all runtime-controlled)
//! and run through `kuberuntime::runtime_status` (`to_sandbox_status`, `determine_pod_ips`,
//! `to_container_status`, the label/annotation decoders), then
//! `status::generate::generate_api_pod_status` and the status patch. Properties: no panic;
//! once the API shows the generated status, regeneration settles after one round; the strategic merge
//! patch from the pod's previous status to the new one applies back to the new one.

use std::collections::{BTreeMap, HashMap};

use chrono::DateTime;
use k8s_cri::v1 as api;
use k8s_openapi::api::core::v1::{Container, Pod, PodReadinessGate, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet::container::PodStatus;
use kubelet::kuberuntime::labels::{
    CONTAINER_HASH_ANNOTATION, CONTAINER_NAME_LABEL, CONTAINER_PORTS_ANNOTATION,
    CONTAINER_PRE_STOP_HANDLER_ANNOTATION, CONTAINER_RESTART_COUNT_ANNOTATION,
    CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION, CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION,
    POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL, container_info_from_annotations,
    container_info_from_labels, sandbox_info_from_labels,
};
use kubelet::kuberuntime::runtime_status::{
    determine_pod_ips, to_container_status, to_sandbox_status,
};
use kubelet::status::generate::{StatusInputs, generate_api_pod_status};

use super::Target;
use super::smp_diff::{check_round_trip, pod_status, unique_merge_keys};
use crate::rng::{Bytes, Rng};

pub const TARGET: Target = Target {
    name: "cri-status",
    about: "CRI sandbox/container status -> runtime status -> API pod status (+ patch)",
    generate,
    run,
    smoke_inputs: 30_000,
};

const NAMES: &[&str] = &["a", "b", "init", "side", "", "gone"];

const VALUES: &[&str] = &[
    "",
    "0",
    "1",
    "-1",
    "ff",
    "ffffffffffffffff",
    "10000000000000000",
    "4294967296",
    "abc",
    "{}",
    "[]",
    "null",
    r#"{"exec":{"command":["sh"]}}"#,
    r#"{"httpGet":{"port":"x"}}"#,
    r#"{"sleep":{"seconds":-5}}"#,
    r#"[{"containerPort":80,"protocol":"TCP"}]"#,
    r#"[{"containerPort":"x"}]"#,
    "/dev/termination-log",
    "File",
    "FallbackToLogsOnError",
    "10.0.0.1",
    "fd00::1",
    "::ffff:1.2.3.4",
    "1.2.3",
    "300.1.1.1",
    " 10.0.0.2",
    "\u{0}",
    "\u{1f600}",
];

fn generate(rng: &mut Rng) -> Vec<u8> {
    let len = if rng.one_in(8) {
        rng.small(64)
    } else {
        rng.range(64, 2048)
    };
    (0..len).map(|_| rng.byte()).collect()
}

fn text(b: &mut Bytes) -> String {
    if b.below(4) == 0 {
        String::from_utf8_lossy(b.slice(16)).into_owned()
    } else {
        b.pick(VALUES).to_string()
    }
}

/// A CRI timestamp: unset, plausible, or anything.
fn nanos(b: &mut Bytes) -> i64 {
    match b.below(4) {
        0 => 0,
        1 => 1_700_000_000_000_000_000 + i64::from(b.u32()) * 1_000_000,
        2 => i64::from(b.u32()),
        _ => b.i64(),
    }
}

fn enum_i32(b: &mut Bytes) -> i32 {
    match b.below(4) {
        0..=2 => b.below(5) as i32,
        _ => b.u32() as i32,
    }
}

fn map(b: &mut Bytes, keys: &[&str]) -> HashMap<String, String> {
    (0..b.below(8))
        .map(|_| {
            let k = if b.below(5) == 0 {
                text(b)
            } else {
                b.pick(keys).to_string()
            };
            (k, text(b))
        })
        .collect()
}

const SANDBOX_KEYS: &[&str] = &[POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL, "x"];

const CONTAINER_KEYS: &[&str] = &[
    CONTAINER_NAME_LABEL,
    CONTAINER_HASH_ANNOTATION,
    CONTAINER_RESTART_COUNT_ANNOTATION,
    CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION,
    CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION,
    CONTAINER_PRE_STOP_HANDLER_ANNOTATION,
    CONTAINER_PORTS_ANNOTATION,
    POD_UID_LABEL,
];

fn sandbox(b: &mut Bytes) -> api::PodSandboxStatus {
    api::PodSandboxStatus {
        id: format!("sb{}", b.below(4)),
        metadata: b.bool().then(|| api::PodSandboxMetadata {
            attempt: b.u32(),
            ..Default::default()
        }),
        state: enum_i32(b),
        created_at: nanos(b),
        network: b.bool().then(|| api::PodSandboxNetworkStatus {
            ip: text(b),
            additional_ips: (0..b.below(3))
                .map(|_| api::PodIp { ip: text(b) })
                .collect(),
        }),
        linux: b.bool().then(|| api::LinuxPodSandboxStatus {
            namespaces: Some(api::Namespace {
                options: b.bool().then(|| api::NamespaceOption {
                    network: enum_i32(b),
                    ..Default::default()
                }),
            }),
        }),
        labels: map(b, SANDBOX_KEYS),
        annotations: map(b, SANDBOX_KEYS),
        ..Default::default()
    }
}

fn container(b: &mut Bytes) -> api::ContainerStatus {
    let mut labels = map(b, CONTAINER_KEYS);
    if b.below(4) != 0 {
        labels.insert(CONTAINER_NAME_LABEL.into(), b.pick(NAMES).to_string());
    }
    api::ContainerStatus {
        id: format!("c{}", b.below(8)),
        state: enum_i32(b),
        created_at: nanos(b),
        started_at: nanos(b),
        finished_at: nanos(b),
        exit_code: b.u32() as i32,
        image: b.bool().then(|| api::ImageSpec {
            image: text(b),
            ..Default::default()
        }),
        image_ref: text(b),
        image_id: text(b),
        reason: text(b),
        message: text(b),
        labels,
        annotations: map(b, CONTAINER_KEYS),
        ..Default::default()
    }
}

fn pod(b: &mut Bytes) -> Pod {
    let spec_container = |name: &str| Container {
        name: name.into(),
        image: Some("img".into()),
        ..Default::default()
    };
    let mut init: Vec<Container> = Vec::new();
    if b.bool() {
        init.push(spec_container("init"));
    }
    if b.bool() {
        let mut side = spec_container("side");
        side.restart_policy = Some("Always".into());
        init.push(side);
    }
    let containers = ["a", "b"][..1 + b.below(2)]
        .iter()
        .map(|n| spec_container(n))
        .collect();
    let status = pod_status(b);
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            init_containers: (!init.is_empty()).then_some(init),
            restart_policy: Some(b.pick(&["Always", "OnFailure", "Never"]).to_string()),
            readiness_gates: b.bool().then(|| {
                vec![PodReadinessGate {
                    condition_type: "X".into(),
                }]
            }),
            ..Default::default()
        }),
        status: b.bool().then_some(status),
    }
}

fn run(data: &[u8]) {
    let mut b = Bytes::new(data);
    let pod = pod(&mut b);
    let sandboxes: Vec<api::PodSandboxStatus> = (0..b.below(3)).map(|_| sandbox(&mut b)).collect();
    let containers: Vec<api::ContainerStatus> =
        (0..b.below(6)).map(|_| container(&mut b)).collect();

    let mut runtime = PodStatus {
        uid: "uid-1".into(),
        name: "p".into(),
        namespace: "ns".into(),
        ..Default::default()
    };
    for (i, sb) in sandboxes.iter().enumerate() {
        let _ = sandbox_info_from_labels(&sb.labels);
        let converted = to_sandbox_status(sb);
        if i == 0 && converted.ready {
            runtime.ips = determine_pod_ips("ns/p", sb);
        }
        runtime.sandbox_statuses.push(converted);
    }
    for c in &containers {
        let _ = container_info_from_labels(&c.labels);
        let _ = container_info_from_annotations(&c.annotations);
        let sandbox_id = sandboxes.first().map_or("", |s| s.id.as_str());
        runtime
            .container_statuses
            .push(to_container_status(c, sandbox_id));
    }
    runtime
        .container_statuses
        .sort_by_key(|c| std::cmp::Reverse(c.created_at));

    let sync_errors: BTreeMap<String, (String, String)> = (0..b.below(3))
        .map(|_| (b.pick(NAMES).to_string(), (text(&mut b), text(&mut b))))
        .collect();
    let host_ips: Vec<String> = (0..b.below(3)).map(|_| text(&mut b)).collect();
    let now = DateTime::from_timestamp(1_700_000_000 + i64::from(b.u32() % 100_000_000), 0)
        .unwrap_or_default();
    let mut inputs = StatusInputs {
        pod: &pod,
        runtime: &runtime,
        old: None,
        sync_errors: &sync_errors,
        pod_is_terminal: b.bool(),
        host_ips: &host_ips,
        runtime_name: "containerd",
        now,
    };
    let status = generate_api_pod_status(&inputs);
    // Steady state: once the API shows what the kubelet generated, regenerating from the same
    // runtime view converges: the second regeneration changes nothing. (The first may: as
    // upstream, a container in an unknown state is "terminated" only while its previous status
    // says running.) Not with sync errors: as upstream, whether a container's last sync error
    // shows depends on its previous state (an init container the runtime lost is first
    // "Completed", and a "Completed" old status then takes the error, and back).
    if sync_errors.is_empty() {
        let mut settled = pod.clone();
        settled.status = Some(status.clone());
        inputs.pod = &settled;
        let second = generate_api_pod_status(&inputs);
        let mut settled = pod.clone();
        settled.status = Some(second.clone());
        inputs.pod = &settled;
        let third = generate_api_pod_status(&inputs);
        assert!(
            third == second,
            "regenerating from an unchanged runtime does not settle\n  second: {}\n  third:  {}",
            serde_json::to_string(&second).unwrap_or_default(),
            serde_json::to_string(&third).unwrap_or_default(),
        );
    }
    let old = pod.status.clone().unwrap_or_default();
    if unique_merge_keys(&old) && unique_merge_keys(&status) {
        check_round_trip("uid-1", &old, &status);
    }
}
