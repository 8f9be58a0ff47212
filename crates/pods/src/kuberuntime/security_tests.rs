//! Table tests: the CRI `LinuxContainerSecurityContext` and `LinuxSandboxSecurityContext` that
//! kuberuntime generates for a range of pod specs, compared field by field with what upstream's
//! `determineEffectiveSecurityContext` / `generatePodSandboxLinuxConfig` send (image user root
//! unless stated; UserNamespacesSupport on, as in 1.33; seccompDefault off).

use std::collections::HashMap;

use k8s_cri::v1::{
    Capability, Int64Value, LinuxContainerSecurityContext, LinuxSandboxSecurityContext,
    NamespaceMode, NamespaceOption, SeLinuxOption, SecurityProfile, SupplementalGroupsPolicy,
    UserNamespace, security_profile::ProfileType,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::env::EnvContext;
use crate::kuberuntime::container_config::{
    ContainerContext, ImageUser, RuntimeOptions, generate_container_config,
};
use crate::kuberuntime::sandbox_config::{SandboxContext, generate_pod_sandbox_config};

const MASKED: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

fn pod(meta: serde_json::Value, spec: serde_json::Value) -> Pod {
    let mut metadata = json!({"name": "web", "namespace": "prod", "uid": "uid-1"});
    if let (Some(m), Some(extra)) = (metadata.as_object_mut(), meta.as_object()) {
        m.extend(extra.clone());
    }
    serde_json::from_value(json!({"metadata": metadata, "spec": spec})).expect("valid pod")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn namespaces(network: NamespaceMode, pid: NamespaceMode, ipc: NamespaceMode) -> NamespaceOption {
    NamespaceOption {
        network: network as i32,
        pid: pid as i32,
        ipc: ipc as i32,
        target_id: String::new(),
        userns_options: Some(UserNamespace {
            mode: NamespaceMode::Node as i32,
            uids: vec![],
            gids: vec![],
        }),
    }
}

fn profile(t: ProfileType, localhost_ref: &str) -> Option<SecurityProfile> {
    Some(SecurityProfile {
        profile_type: t as i32,
        localhost_ref: localhost_ref.to_owned(),
    })
}

/// What upstream sends for a container with no security settings and a root image.
#[allow(deprecated)]
fn base() -> LinuxContainerSecurityContext {
    LinuxContainerSecurityContext {
        capabilities: None,
        privileged: false,
        namespace_options: Some(namespaces(
            NamespaceMode::Pod,
            NamespaceMode::Container,
            NamespaceMode::Pod,
        )),
        selinux_options: None,
        run_as_user: Some(Int64Value { value: 0 }),
        run_as_group: None,
        run_as_username: String::new(),
        readonly_rootfs: false,
        supplemental_groups: vec![],
        supplemental_groups_policy: SupplementalGroupsPolicy::Merge as i32,
        no_new_privs: false,
        masked_paths: strings(MASKED),
        readonly_paths: strings(READONLY),
        seccomp: profile(ProfileType::Unconfined, ""),
        apparmor: None,
        apparmor_profile: String::new(),
        seccomp_profile_path: String::new(),
    }
}

fn container_sc(p: &Pod, image_user: &ImageUser) -> Result<LinuxContainerSecurityContext, String> {
    let env = EnvContext::new("node-1", &[], &[]);
    let options = RuntimeOptions::default();
    let c = &p.spec.as_ref().expect("spec").containers[0];
    let ctx = ContainerContext {
        env: &env,
        image_ref: "sha256:abc",
        restart_count: 0,
        qos_class: "BestEffort",
        image_user,
        mounts: &[],
        options: &options,
        cpuset_cpus: None,
        pid_namespace_target: None,
    };
    generate_container_config(p, c, &ctx)
        .map(|cfg| {
            cfg.linux
                .and_then(|l| l.security_context)
                .expect("security context")
        })
        .map_err(|e| e.to_string())
}

#[test]
#[allow(deprecated)]
fn container_security_context_table() {
    type Case = (
        &'static str,
        serde_json::Value,
        serde_json::Value,
        ImageUser,
        Result<LinuxContainerSecurityContext, &'static str>,
    );
    let root = ImageUser::default();
    let cases: Vec<Case> = vec![
        (
            "nothing set",
            json!({}),
            json!({"containers": [{"name": "c"}]}),
            root.clone(),
            Ok(base()),
        ),
        (
            "pod-level users, groups, SELinux",
            json!({}),
            json!({"containers": [{"name": "c"}], "securityContext": {
                "runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 3000, "supplementalGroups": [4000, 5000],
                "supplementalGroupsPolicy": "Strict",
                "seLinuxOptions": {"user": "u", "role": "r", "type": "t", "level": "s0"}}}),
            root.clone(),
            Ok(LinuxContainerSecurityContext {
                run_as_user: Some(Int64Value { value: 1000 }),
                run_as_group: Some(Int64Value { value: 2000 }),
                supplemental_groups: vec![3000, 4000, 5000],
                supplemental_groups_policy: SupplementalGroupsPolicy::Strict as i32,
                selinux_options: Some(SeLinuxOption {
                    user: "u".into(),
                    role: "r".into(),
                    r#type: "t".into(),
                    level: "s0".into(),
                }),
                ..base()
            }),
        ),
        (
            "container settings win and add their own",
            json!({}),
            json!({"securityContext": {"runAsUser": 1000, "runAsGroup": 2000},
                   "containers": [{"name": "c", "securityContext": {
                "runAsUser": 0, "runAsGroup": 0, "privileged": true, "readOnlyRootFilesystem": true,
                "allowPrivilegeEscalation": false, "procMount": "Unmasked",
                "capabilities": {"add": ["cap_sys_time", "NET_ADMIN"], "drop": ["ALL"]}}}]}),
            root.clone(),
            Ok(LinuxContainerSecurityContext {
                run_as_user: Some(Int64Value { value: 0 }),
                run_as_group: Some(Int64Value { value: 0 }),
                privileged: true,
                readonly_rootfs: true,
                no_new_privs: true,
                masked_paths: vec![],
                readonly_paths: vec![],
                capabilities: Some(Capability {
                    add_capabilities: strings(&["SYS_TIME", "NET_ADMIN"]),
                    drop_capabilities: strings(&["ALL"]),
                    add_ambient_capabilities: vec![],
                }),
                ..base()
            }),
        ),
        (
            "host namespaces",
            json!({}),
            json!({"containers": [{"name": "c"}], "hostNetwork": true, "hostPID": true, "hostIPC": true}),
            root.clone(),
            Ok(LinuxContainerSecurityContext {
                namespace_options: Some(namespaces(
                    NamespaceMode::Node,
                    NamespaceMode::Node,
                    NamespaceMode::Node,
                )),
                ..base()
            }),
        ),
        (
            "shared process namespace",
            json!({}),
            json!({"containers": [{"name": "c"}], "shareProcessNamespace": true, "hostUsers": true}),
            root.clone(),
            Ok(LinuxContainerSecurityContext {
                namespace_options: Some(namespaces(
                    NamespaceMode::Pod,
                    NamespaceMode::Pod,
                    NamespaceMode::Pod,
                )),
                ..base()
            }),
        ),
        (
            "image user by name",
            json!({}),
            json!({"containers": [{"name": "c"}]}),
            ImageUser {
                uid: None,
                username: "app".into(),
            },
            Ok(LinuxContainerSecurityContext {
                run_as_user: None,
                run_as_username: "app".into(),
                ..base()
            }),
        ),
        (
            "image uid with runAsNonRoot",
            json!({}),
            json!({"containers": [{"name": "c", "securityContext": {"runAsNonRoot": true}}]}),
            ImageUser {
                uid: Some(65534),
                username: String::new(),
            },
            Ok(LinuxContainerSecurityContext {
                run_as_user: Some(Int64Value { value: 65534 }),
                ..base()
            }),
        ),
        (
            "seccomp and AppArmor from the pod fields",
            json!({}),
            json!({"containers": [{"name": "c"}], "securityContext": {
                "seccompProfile": {"type": "RuntimeDefault"}, "appArmorProfile": {"type": "RuntimeDefault"}}}),
            root.clone(),
            Ok(LinuxContainerSecurityContext {
                seccomp: profile(ProfileType::RuntimeDefault, ""),
                apparmor: profile(ProfileType::RuntimeDefault, ""),
                apparmor_profile: "runtime/default".into(),
                ..base()
            }),
        ),
        (
            "AppArmor legacy annotation",
            json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "localhost/k8s-deny"}}),
            json!({"containers": [{"name": "c"}]}),
            root.clone(),
            Ok(LinuxContainerSecurityContext {
                apparmor: profile(ProfileType::Localhost, "k8s-deny"),
                apparmor_profile: "localhost/k8s-deny".into(),
                ..base()
            }),
        ),
        (
            "hostUsers false",
            json!({}),
            json!({"containers": [{"name": "c"}], "hostUsers": false}),
            root.clone(),
            Err(
                "spec.hostUsers is false, but RuntimeClass handler \"\" does not support user namespaces",
            ),
        ),
        (
            "unknown supplementalGroupsPolicy",
            json!({}),
            json!({"containers": [{"name": "c"}], "securityContext": {"supplementalGroupsPolicy": "Bogus"}}),
            root.clone(),
            Err("unsupported supplementalGroupsPolicy: Bogus"),
        ),
        (
            "Localhost AppArmor without a name",
            json!({}),
            json!({"containers": [{"name": "c", "securityContext": {"appArmorProfile": {"type": "Localhost"}}}]}),
            root.clone(),
            Err("missing localhost apparmor profile name"),
        ),
    ];
    for (name, meta, spec, image_user, want) in cases {
        let got = container_sc(&pod(meta, spec), &image_user);
        assert_eq!(got, want.map_err(str::to_owned), "{name}");
    }
}

fn sandbox_ctx() -> SandboxContext {
    SandboxContext {
        node_name: "node-1".to_owned(),
        pod_logs_dir: "/var/log/pods".into(),
        host_resolv_conf: Some("nameserver 10.0.0.1\n".to_owned()),
        ..Default::default()
    }
}

#[test]
fn sandbox_security_context_table() {
    let sandbox_base = LinuxSandboxSecurityContext {
        namespace_options: Some(namespaces(
            NamespaceMode::Pod,
            NamespaceMode::Container,
            NamespaceMode::Pod,
        )),
        seccomp: profile(ProfileType::RuntimeDefault, ""),
        supplemental_groups_policy: SupplementalGroupsPolicy::Merge as i32,
        ..Default::default()
    };
    type Case = (
        &'static str,
        serde_json::Value,
        Result<
            (
                LinuxSandboxSecurityContext,
                Vec<(&'static str, &'static str)>,
            ),
            &'static str,
        >,
    );
    let cases: Vec<Case> = vec![
        (
            "nothing set",
            json!({"containers": [{"name": "c"}]}),
            Ok((sandbox_base.clone(), vec![])),
        ),
        (
            "pod settings, a privileged init container, sysctls in both spellings",
            json!({
                "initContainers": [{"name": "i", "securityContext": {"privileged": true}}],
                "containers": [{"name": "c", "securityContext": {"runAsUser": 5}}],
                "hostPID": true,
                "securityContext": {
                    "runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 3000, "supplementalGroups": [4000],
                    "seLinuxOptions": {"level": "s0:c1"},
                    "sysctls": [{"name": "net/ipv4/ip_local_port_range", "value": "20000 30000"},
                                {"name": "kernel.shm_rmid_forced", "value": "1"}]}}),
            Ok((
                LinuxSandboxSecurityContext {
                    namespace_options: Some(namespaces(
                        NamespaceMode::Pod,
                        NamespaceMode::Node,
                        NamespaceMode::Pod,
                    )),
                    run_as_user: Some(Int64Value { value: 1000 }),
                    run_as_group: Some(Int64Value { value: 2000 }),
                    supplemental_groups: vec![3000, 4000],
                    selinux_options: Some(SeLinuxOption {
                        level: "s0:c1".into(),
                        ..Default::default()
                    }),
                    privileged: true,
                    ..sandbox_base.clone()
                },
                vec![
                    ("net.ipv4.ip_local_port_range", "20000 30000"),
                    ("kernel.shm_rmid_forced", "1"),
                ],
            )),
        ),
        (
            "hostUsers false",
            json!({"containers": [{"name": "c"}], "hostUsers": false}),
            Err(
                "spec.hostUsers is false, but RuntimeClass handler \"\" does not support user namespaces",
            ),
        ),
    ];
    for (name, spec, want) in cases {
        let got = generate_pod_sandbox_config(&pod(json!({}), spec), 0, &sandbox_ctx())
            .map(|(cfg, _)| {
                let linux = cfg.linux.expect("linux config");
                (
                    linux.security_context.expect("security context"),
                    linux.sysctls,
                )
            })
            .map_err(|e| e.to_string());
        let want = want
            .map(|(sc, sysctls)| {
                let map: HashMap<String, String> = sysctls
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect();
                (sc, map)
            })
            .map_err(str::to_owned);
        assert_eq!(got, want, "{name}");
    }
}
