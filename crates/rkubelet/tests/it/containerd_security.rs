//! End-to-end tests of pod and container security settings on the real containerd started by
//! `dev/runtime.sh up` (`RKUBELET_CRI_ENDPOINT`): users and groups, read-only rootfs,
//! capabilities, no_new_privs, seccomp, shared PID namespace, host network, runAsNonRoot and
//! sysctls. Each test looks inside the containers with CRI ExecSync. They run one at a time
//! (nextest test group `containerd`).

use crate::common;

use std::time::Duration;

use common::{Kubelet, NODE, container, cri, phase, running};
use rkubelet_cri::RuntimeService;
use serde_json::Value;

const IMAGE: &str = "docker.io/library/busybox:latest";
const WAIT: Duration = Duration::from_secs(60);

/// A static pod manifest: `spec` is the YAML under `spec:` (indented by 2).
fn pod_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n{spec}"
    )
}

/// One container entry that sleeps; `extra` is YAML indented by 4.
fn sleeper(name: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n{extra}"
    )
}

/// Runs `cmd` in container `name` of pod `p`: (exit code, stdout, stderr).
async fn exec(p: &Value, name: &str, cmd: &[&str]) -> (i32, String, String) {
    let id = container(p, "containerStatuses", name)
        .and_then(|c| c["containerID"].as_str())
        .and_then(|id| id.strip_prefix("containerd://"))
        .unwrap_or_else(|| panic!("no container ID for {name}: {}", p["status"]))
        .to_owned();
    common::exec_in(&id, cmd).await
}

/// A line of /proc/self/status (e.g. `CapEff`) as seen by the shell in the container.
async fn proc_status(p: &Value, name: &str, field: &str) -> String {
    let (code, out, err) = exec(
        p,
        name,
        &["grep", &format!("^{field}:"), "/proc/self/status"],
    )
    .await;
    assert_eq!(code, 0, "{name}: grep {field}: {err}");
    out.split_once(':')
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default()
}

async fn wait_running(k: &Kubelet, name: &str, containers: &[&str]) -> Value {
    k.wait_pod(name, WAIT, "all containers running", |p| {
        phase(p) == "Running" && containers.iter().all(|c| running(p, c))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_context_reaches_the_container() {
    let mut k = Kubelet::new();
    let root = "    securityContext:\n      runAsUser: 0\n";
    let containers = [
        sleeper("ids", ""),
        sleeper(
            "ro",
            "    securityContext:\n      runAsUser: 0\n      readOnlyRootFilesystem: true\n",
        ),
        sleeper("plain", root),
        sleeper(
            "nocap",
            "    securityContext:\n      runAsUser: 0\n      capabilities:\n        drop: [\"NET_RAW\"]\n",
        ),
        sleeper(
            "prefixed",
            "    securityContext:\n      runAsUser: 0\n      capabilities:\n        drop: [\"CAP_NET_RAW\"]\n",
        ),
        sleeper(
            "nnp",
            "    securityContext:\n      runAsUser: 0\n      allowPrivilegeEscalation: false\n",
        ),
        sleeper(
            "seccomp",
            "    securityContext:\n      runAsUser: 0\n      seccompProfile:\n        type: RuntimeDefault\n",
        ),
    ]
    .concat();
    k.write_manifest(
        "sec.yaml",
        &pod_yaml(
            "sec",
            &format!(
                "  securityContext:\n    runAsUser: 1000\n    runAsGroup: 3000\n    supplementalGroups: [4000, 5000]\n  containers:\n{containers}"
            ),
        ),
    );
    k.start();
    let p = wait_running(
        &k,
        "sec",
        &["ids", "ro", "plain", "nocap", "prefixed", "nnp", "seccomp"],
    )
    .await;

    // runAsUser / runAsGroup / supplementalGroups.
    let (code, out, err) = exec(&p, "ids", &["id"]).await;
    assert_eq!(code, 0, "id: {err}");
    assert!(out.starts_with("uid=1000 gid=3000"), "id: {out}");
    let groups = out.split("groups=").nth(1).unwrap_or_default();
    for g in ["3000", "4000", "5000"] {
        assert!(groups.contains(g), "group {g} missing from {out:?}");
    }
    let (_, out, _) = exec(&p, "plain", &["id", "-u"]).await;
    assert_eq!(
        out.trim(),
        "0",
        "the container's runAsUser wins over the pod's"
    );

    // readOnlyRootFilesystem: `/` refuses writes; the writable default does not.
    let (code, _, err) = exec(&p, "ro", &["touch", "/probe"]).await;
    assert_ne!(code, 0, "write to a read-only rootfs succeeded");
    assert!(err.contains("Read-only file system"), "stderr: {err}");
    let (code, _, err) = exec(&p, "plain", &["touch", "/probe"]).await;
    assert_eq!(code, 0, "write to a writable rootfs failed: {err}");

    // Dropping NET_RAW (bit 13) clears it from the effective set, with or without `CAP_`.
    const NET_RAW: u64 = 1 << 13;
    let caps = |hex: String| u64::from_str_radix(&hex, 16).unwrap();
    let default = caps(proc_status(&p, "plain", "CapEff").await);
    assert_ne!(
        default & NET_RAW,
        0,
        "default set lacks NET_RAW: {default:x}"
    );
    for name in ["nocap", "prefixed"] {
        let dropped = caps(proc_status(&p, name, "CapEff").await);
        assert_eq!(dropped, default & !NET_RAW, "{name}: {dropped:x}");
    }

    // allowPrivilegeEscalation: false → no_new_privs.
    assert_eq!(proc_status(&p, "nnp", "NoNewPrivs").await, "1");
    assert_eq!(proc_status(&p, "plain", "NoNewPrivs").await, "0");

    // RuntimeDefault seccomp filters; the default (seccompDefault off) is Unconfined.
    assert_eq!(proc_status(&p, "seccomp", "Seccomp").await, "2");
    assert_eq!(proc_status(&p, "plain", "Seccomp").await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_process_namespace_shows_the_other_containers_processes() {
    let mut k = Kubelet::new();
    let script = |n: &str| {
        format!(
            "  - name: {n}\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"36{n}\"]\n"
        )
    };
    k.write_manifest(
        "shared.yaml",
        &pod_yaml(
            "shared",
            &format!(
                "  shareProcessNamespace: true\n  containers:\n{}{}",
                script("01"),
                script("02")
            ),
        ),
    );
    k.write_manifest(
        "private.yaml",
        &pod_yaml(
            "private",
            &format!("  containers:\n{}{}", script("03"), script("04")),
        ),
    );
    k.start();
    let shared = wait_running(&k, "shared", &["01", "02"]).await;
    let private = wait_running(&k, "private", &["03", "04"]).await;
    let (code, out, err) = exec(&shared, "02", &["ps"]).await;
    assert_eq!(code, 0, "ps: {err}");
    assert!(out.contains("sleep 3601"), "shared PID namespace: {out}");
    let (_, out, _) = exec(&private, "04", &["ps"]).await;
    assert!(
        !out.contains("sleep 3603"),
        "separate PID namespaces leak: {out}"
    );
}

/// Interface names in a /proc/net/dev listing.
fn interfaces(net_dev: &str) -> Vec<String> {
    net_dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_network_pod_sees_the_hosts_interfaces() {
    let mut k = Kubelet::new();
    k.write_manifest(
        "hostnet.yaml",
        &pod_yaml(
            "hostnet",
            &format!("  hostNetwork: true\n  containers:\n{}", sleeper("c", "")),
        ),
    );
    k.write_manifest(
        "podnet.yaml",
        &pod_yaml("podnet", &format!("  containers:\n{}", sleeper("c", ""))),
    );
    k.start();
    let hostnet = wait_running(&k, "hostnet", &["c"]).await;
    let podnet = wait_running(&k, "podnet", &["c"]).await;
    // Stable host interfaces (veths come and go with other pods).
    let host: Vec<String> = interfaces(&std::fs::read_to_string("/proc/net/dev").unwrap())
        .into_iter()
        .filter(|n| n != "lo" && !n.starts_with("veth"))
        .collect();
    assert!(!host.is_empty(), "host has no interfaces besides lo");
    let (code, out, err) = exec(&hostnet, "c", &["cat", "/proc/net/dev"]).await;
    assert_eq!(code, 0, "{err}");
    let seen = interfaces(&out);
    for name in &host {
        assert!(
            seen.contains(name),
            "host interface {name} missing in hostNetwork pod: {seen:?}"
        );
    }
    let (_, out, _) = exec(&podnet, "c", &["cat", "/proc/net/dev"]).await;
    let pod_seen = interfaces(&out);
    assert!(
        host.iter().any(|n| !pod_seen.contains(n)),
        "a pod-network pod sees every host interface: {pod_seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_non_root_with_a_root_image_is_a_config_error() {
    let mut k = Kubelet::new();
    k.write_manifest(
        "nonroot.yaml",
        &pod_yaml(
            "nonroot",
            &format!(
                "  containers:\n{}",
                sleeper("c", "    securityContext:\n      runAsNonRoot: true\n")
            ),
        ),
    );
    k.start();
    let p = k
        .wait_pod("nonroot", WAIT, "CreateContainerConfigError", |p| {
            container(p, "containerStatuses", "c")
                .is_some_and(|c| c["state"]["waiting"]["reason"] == "CreateContainerConfigError")
        })
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let c = container(&p, "containerStatuses", "c").unwrap();
    assert_eq!(
        c["state"]["waiting"]["message"].as_str().unwrap(),
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"nonroot-{NODE}_default({uid})\", container: c)"
        )
    );
    assert_eq!(phase(&p), "Pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sysctls_are_admitted_by_the_allowlist() {
    let mut k = Kubelet::new();
    k.append_config("allowedUnsafeSysctls: [\"net.core.somaxconn\"]\n");
    let sysctls = |list: &str| {
        format!(
            "  securityContext:\n    sysctls:\n{list}  containers:\n{}",
            sleeper("c", "")
        )
    };
    k.write_manifest(
        "unsafe.yaml",
        &pod_yaml(
            "unsafe",
            &sysctls("    - name: kernel.msgmax\n      value: \"65536\"\n"),
        ),
    );
    k.write_manifest(
        "allowed.yaml",
        &pod_yaml(
            "allowed",
            &sysctls(
                "    - name: net.core.somaxconn\n      value: \"1234\"\n    - name: net/ipv4/ip_local_port_range\n      value: \"20000 30000\"\n",
            ),
        ),
    );
    k.start();
    let rejected = k
        .wait_pod("unsafe", WAIT, "Failed with SysctlForbidden", |p| {
            phase(p) == "Failed"
        })
        .await;
    assert_eq!(rejected["status"]["reason"], "SysctlForbidden");
    assert_eq!(
        rejected["status"]["message"],
        "Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted"
    );

    let p = wait_running(&k, "allowed", &["c"]).await;
    let (_, out, err) = exec(&p, "c", &["cat", "/proc/sys/net/core/somaxconn"]).await;
    assert_eq!(out.trim(), "1234", "{err}");
    let (_, out, err) = exec(&p, "c", &["cat", "/proc/sys/net/ipv4/ip_local_port_range"]).await;
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["20000", "30000"],
        "{err}"
    );
    // The rejected pod never reached the runtime and stays Failed.
    let again = k.pod("unsafe").await.unwrap();
    assert_eq!(phase(&again), "Failed");
    assert!(
        container(&again, "containerStatuses", "c")
            .is_none_or(|c| c["containerID"].as_str().is_none_or(str::is_empty)),
        "rejected pod got a container: {}",
        again["status"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seccomp_default_localhost_profiles_and_privileged() {
    let mut k = Kubelet::new();
    k.append_config("seccompDefault: true\n");
    // A Localhost profile under <root-dir>/seccomp that refuses mkdir.
    let profiles = k.root().join("seccomp").join("profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("deny-mkdir.json"),
        r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let containers = [
        sleeper("plain", ""),
        sleeper(
            "local",
            "    securityContext:\n      seccompProfile:\n        type: Localhost\n        localhostProfile: profiles/deny-mkdir.json\n",
        ),
        sleeper(
            "unconfined",
            "    securityContext:\n      seccompProfile:\n        type: Unconfined\n",
        ),
        sleeper("priv", "    securityContext:\n      privileged: true\n"),
    ]
    .concat();
    k.write_manifest(
        "seccomp.yaml",
        &pod_yaml("seccomp", &format!("  containers:\n{containers}")),
    );
    k.start();
    let p = wait_running(&k, "seccomp", &["plain", "local", "unconfined", "priv"]).await;

    // seccompDefault: no profile anywhere means RuntimeDefault.
    assert_eq!(proc_status(&p, "plain", "Seccomp").await, "2");
    assert_eq!(proc_status(&p, "unconfined", "Seccomp").await, "0");
    assert_eq!(proc_status(&p, "local", "Seccomp").await, "2");
    let (code, _, err) = exec(&p, "local", &["mkdir", "/tmp/x"]).await;
    assert_ne!(code, 0, "mkdir allowed under the deny-mkdir profile");
    assert!(err.contains("Operation not permitted"), "stderr: {err}");
    let (code, _, err) = exec(&p, "plain", &["mkdir", "/tmp/x"]).await;
    assert_eq!(code, 0, "mkdir refused under RuntimeDefault: {err}");

    // privileged: every capability, including CAP_SYS_ADMIN (bit 21).
    let caps = |hex: String| u64::from_str_radix(&hex, 16).unwrap();
    let privileged = caps(proc_status(&p, "priv", "CapEff").await);
    let plain = caps(proc_status(&p, "plain", "CapEff").await);
    assert_ne!(
        privileged & (1 << 21),
        0,
        "privileged CapEff {privileged:x}"
    );
    assert_eq!(plain & (1 << 21), 0, "default CapEff {plain:x}");
    assert_eq!(privileged & plain, plain);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_users_false_is_refused_before_the_runtime() {
    let mut k = Kubelet::new();
    k.write_manifest(
        "userns.yaml",
        &pod_yaml(
            "userns",
            &format!("  hostUsers: false\n  containers:\n{}", sleeper("c", "")),
        ),
    );
    k.write_manifest(
        "neighbour.yaml",
        &pod_yaml("neighbour", &format!("  containers:\n{}", sleeper("c", ""))),
    );
    k.start();
    // The neighbour is not disturbed.
    wait_running(&k, "neighbour", &["c"]).await;
    let msg =
        "spec.hostUsers is false, but RuntimeClass handler \"\" does not support user namespaces";
    let deadline = std::time::Instant::now() + WAIT;
    while !k.log_mentions(msg) {
        assert!(
            std::time::Instant::now() < deadline,
            "no user-namespace error in the log:\n{}",
            common::tail(&k.log_text(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let p = k.pod("userns").await.unwrap();
    assert_eq!(phase(&p), "Pending");
    let c = container(&p, "containerStatuses", "c").unwrap();
    assert_eq!(c["state"]["waiting"]["reason"], "ContainerCreating");
    // No sandbox was ever asked for.
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let sandboxes = cri()
        .await
        .list_pod_sandbox(rkubelet_cri::api::ListPodSandboxRequest {
            filter: Some(rkubelet_cri::api::PodSandboxFilter {
                label_selector: [("io.kubernetes.pod.uid".to_owned(), uid)].into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    assert!(sandboxes.items.is_empty(), "{:?}", sandboxes.items);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apparmor_profile_needs_apparmor_on_the_host() {
    let mut k = Kubelet::new();
    k.write_manifest(
        "aa.yaml",
        &pod_yaml(
            "aa",
            &format!(
                "  containers:\n{}",
                sleeper(
                    "c",
                    "    securityContext:\n      appArmorProfile:\n        type: RuntimeDefault\n"
                )
            ),
        ),
    );
    k.start();
    match kubelet::security::apparmor::host_support() {
        Err(why) => {
            let p = k
                .wait_pod("aa", WAIT, "rejected for AppArmor", |p| {
                    phase(p) == "Failed"
                })
                .await;
            assert_eq!(p["status"]["reason"], "AppArmor");
            assert_eq!(
                p["status"]["message"].as_str().unwrap(),
                format!("Pod was rejected: Cannot enforce AppArmor: {why}")
            );
        }
        Ok(()) => {
            wait_running(&k, "aa", &["c"]).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_supplemental_groups_policy_is_refused_without_runtime_support() {
    let mut k = Kubelet::new();
    k.write_manifest(
        "strict.yaml",
        &pod_yaml(
            "strict",
            &format!(
                "  securityContext:\n    supplementalGroupsPolicy: Strict\n  containers:\n{}",
                sleeper("c", "")
            ),
        ),
    );
    k.start();
    let p = k
        .wait_pod("strict", WAIT, "rejected", |p| phase(p) == "Failed")
        .await;
    assert_eq!(
        p["status"]["reason"],
        "SupplementalGroupsPolicyNotSupported"
    );
    assert_eq!(
        p["status"]["message"],
        "Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node"
    );
}
