//! Test fixtures of the runtime-side pod view, for this crate's tests and (feature `test-util`)
//! the kubelet facade's: a pod and container spec, and sandboxes and containers created in a
//! `FakeRuntime` with the labels and annotations the kubelet would give them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rkubelet_cri::fake::FakeRuntime;

use super::*;
use crate::kuberuntime::labels::{
    container_annotations, container_labels, sandbox_annotations, sandbox_labels,
};

pub fn pod(uid: &str, name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            labels: Some(BTreeMap::from([("app".into(), name.into())])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            termination_grace_period_seconds: Some(30),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn spec(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox".into()),
        termination_message_path: Some("/dev/termination-log".into()),
        termination_message_policy: Some("File".into()),
        ..Default::default()
    }
}

pub async fn run_sandbox(rt: &FakeRuntime, pod: &Pod, attempt: u32, host_network: bool) -> String {
    let linux = host_network.then(|| api::LinuxPodSandboxConfig {
        security_context: Some(api::LinuxSandboxSecurityContext {
            namespace_options: Some(api::NamespaceOption {
                network: api::NamespaceMode::Node as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    rt.run_pod_sandbox(api::RunPodSandboxRequest {
        config: Some(api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                attempt,
            }),
            labels: sandbox_labels(pod),
            annotations: sandbox_annotations(pod),
            linux,
            ..Default::default()
        }),
        runtime_handler: String::new(),
    })
    .await
    .unwrap()
    .pod_sandbox_id
}

/// Creates (and optionally starts) a container the way the kubelet does: kubelet labels
/// and annotations, restart count = attempt, hash 0xabc.
pub async fn container(
    rt: &FakeRuntime,
    sandbox_id: &str,
    pod: &Pod,
    c: &Container,
    attempt: u32,
    start: bool,
) -> String {
    let id = rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: c.name.clone(),
                    attempt,
                }),
                image: Some(api::ImageSpec {
                    image: "busybox".into(),
                    ..Default::default()
                }),
                labels: container_labels(c, pod),
                annotations: container_annotations(c, pod, attempt, 0xabc),
                ..Default::default()
            }),
            sandbox_config: None,
        })
        .await
        .unwrap()
        .container_id;
    if start {
        rt.start_container(api::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    }
    id
}

/// A container without the kubelet's labels (someone else's, e.g. `ctr run`).
pub async fn stop_sandbox(rt: &FakeRuntime, id: &str) {
    rt.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .unwrap();
}
