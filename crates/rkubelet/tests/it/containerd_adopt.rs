//! Swapping the Go kubelet for rkubelet on a running node (issue 16 E). The test plays the Go
//! kubelet 1.33: it creates pod sandboxes and containers on the real containerd through CRI
//! with every label, annotation, metadata field, log path, cgroup parent and container hash
//! computed the way upstream does (each value cites the upstream function it reproduces;
//! written here independently of the kubelet crate), lays out `<root>/pods/<uid>` and
//! `/var/log/pods` the same way, and leaves the checkpoint files a 1.33 kubelet leaves. Then
//! rkubelet starts on that root dir and must adopt everything: same sandbox and container IDs,
//! restart counts and start times carried into the status, a completed init container not run
//! again. Static pods are the documented exception (docs/kubeadm.md, "Swapping the Go kubelet"): their
//! UID is upstream's hash of a Go struct dump, which rkubelet does not reproduce, so they are
//! replaced exactly once.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::api::{fixture, wait_for};
use common::{Kubelet, NODE, container, cri, pod_containers, tail};
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use rkubelet_cri::api::{
    ContainerConfig, ContainerMetadata, ContainerState, ContainerStatusRequest,
    CreateContainerRequest, DnsConfig, ImageSpec, ImageStatusRequest, KeyValue,
    LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, ListPodSandboxRequest, Mount,
    NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxFilter, PodSandboxMetadata,
    PodSandboxState, PortMapping, Protocol, PullImageRequest, RunPodSandboxRequest,
    SecurityProfile, StartContainerRequest, StopContainerRequest, security_profile::ProfileType,
};
use rkubelet_cri::{ImageService, RemoteRuntime, RuntimeService};
use serde_json::{Value, json};

const IMAGE: &str = "docker.io/library/busybox:latest";

/// A container command that exits 3 the first time it runs in a pod (marker in the pod's
/// emptyDir) and runs until SIGTERM afterwards: the same spec gives an exited instance 0 and a
/// running instance 1, as a crash and a kubelet restart leave them. The crash leaves a
/// termination message in the file the Go kubelet mounted.
const CRASH_ONCE: &str = "if [ -f /data/crashed-once ]; then trap 'exit 0' TERM; while true; do sleep 1; done; else touch /data/crashed-once; echo -n crashed under go > /dev/termination-log; exit 3; fi";
const RUN: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

// ---------------------------------------------------------------------------------------------
// The Go kubelet 1.33, reproduced for this test.
// ---------------------------------------------------------------------------------------------

/// `kubecontainer.HashContainer` (pkg/kubelet/container/helpers.go, v1.31+): FNV-32a over
/// `hashutil.DeepHashObject` of `json.Marshal(map{"name","image"})`, i.e. over the go-spew
/// `%#v` rendering of a `[]byte`: `([]uint8)[<decimal bytes separated by spaces>]`.
fn go_hash_container(c: &Container) -> u64 {
    let image = c.image.as_deref().unwrap_or_default();
    // encoding/json sorts map keys; the test's names and images need no escaping.
    assert!(
        !format!("{}{image}", c.name).contains(['"', '\\', '<', '>', '&']),
        "test values must not need JSON escaping"
    );
    let json = format!("{{\"image\":\"{image}\",\"name\":\"{}\"}}", c.name);
    let spew = format!(
        "([]uint8)[{}]",
        json.bytes()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut h: u32 = 0x811c_9dc5; // hash/fnv New32a
    for b in spew.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    u64::from(h)
}

/// The test's hash against upstream's own vector (pkg/kubelet/container/helpers_test.go
/// `TestHashContainer`: name "test_container", image "foo/image:v1").
#[test]
fn go_hash_matches_the_upstream_vector() {
    let c = Container {
        name: "test_container".into(),
        image: Some("foo/image:v1".into()),
        command: Some(vec!["/bin/testcmd".into()]),
        ..Default::default()
    };
    assert_eq!(go_hash_container(&c), 0x8e45_cbd0);
}

/// What the Go kubelet knows about the node while it creates the objects.
struct GoNode {
    root: PathBuf,
    pod_logs_dir: PathBuf,
    cgroup_root: String,
    image_ref: String,
}

fn meta(pod: &Pod) -> (&str, &str, &str) {
    (
        pod.metadata.name.as_deref().unwrap(),
        pod.metadata.namespace.as_deref().unwrap(),
        pod.metadata.uid.as_deref().unwrap(),
    )
}

/// QoS class (pkg/apis/core/v1/helper/qos `ComputePodQOS`), for the pods of this test: any
/// request or limit makes it Burstable (no pod here is Guaranteed), none BestEffort.
fn go_qos(pod: &Pod) -> &'static str {
    let spec = pod.spec.as_ref().unwrap();
    let any = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            c.resources.as_ref().is_some_and(|r| {
                r.requests.as_ref().is_some_and(|m| !m.is_empty())
                    || r.limits.as_ref().is_some_and(|m| !m.is_empty())
            })
        });
    if any { "burstable" } else { "besteffort" }
}

/// The pod cgroup with the cgroupfs driver (pkg/kubelet/cm `podContainerManagerImpl.GetPodContainerName`:
/// `[cgroupRoot, "kubepods", <qos unless guaranteed>, "pod"+uid]`, cgroupfs `CgroupName.ToCgroupfs`).
fn go_cgroup_parent(node: &GoNode, pod: &Pod) -> String {
    format!(
        "{}/kubepods/{}/pod{}",
        node.cgroup_root,
        go_qos(pod),
        meta(pod).2
    )
}

/// `BuildPodLogsDirectory` (pkg/kubelet/kuberuntime/helpers.go): `<podLogsDir>/<ns>_<name>_<uid>`.
fn go_pod_log_dir(node: &GoNode, pod: &Pod) -> PathBuf {
    let (name, ns, uid) = meta(pod);
    node.pod_logs_dir.join(format!("{ns}_{name}_{uid}"))
}

/// `MilliCPUToShares` (pkg/kubelet/cm/helpers_linux.go): 1024 shares per CPU, at least 2.
fn go_cpu_shares(c: &Container) -> i64 {
    let milli = c
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get("cpu"))
        .map(|q| q.0.trim_end_matches('m').parse::<i64>().unwrap())
        .unwrap_or(0);
    (milli * 1024 / 1000).max(2)
}

/// `generatePodSandboxConfig` + `generatePodSandboxLinuxConfig`
/// (pkg/kubelet/kuberuntime/kuberuntime_sandbox.go).
fn go_sandbox_config(node: &GoNode, pod: &Pod, attempt: u32) -> PodSandboxConfig {
    let (name, ns, uid) = meta(pod);
    let spec = pod.spec.as_ref().unwrap();
    let host_network = go_host_network(pod);
    // newPodLabels (labels.go): the pod's labels plus name/namespace/uid.
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert("io.kubernetes.pod.name".into(), name.into());
    labels.insert("io.kubernetes.pod.namespace".into(), ns.into());
    labels.insert("io.kubernetes.pod.uid".into(), uid.into());
    // newPodAnnotations (labels.go): the pod's annotations as they are.
    let annotations: HashMap<String, String> = pod
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    // kubecontainer.MakePortMappings + generatePodSandboxConfig: every container port.
    let port_mappings = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .map(|p| PortMapping {
            protocol: Protocol::Tcp as i32,
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    // GetPodDNS (pkg/kubelet/network/dns): ClusterFirst without clusterDNS falls back to the
    // host's resolv.conf (here only nameserver lines matter).
    let servers = std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("nameserver").map(|s| s.trim().to_owned()))
        .collect();
    PodSandboxConfig {
        // metadata: name, uid, namespace, attempt.
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: ns.into(),
            attempt,
        }),
        // GeneratePodHostNameAndDomain: the pod name when spec.hostname is empty; left empty
        // for a host-network pod (it has the node's).
        hostname: if host_network {
            String::new()
        } else {
            name.into()
        },
        log_directory: go_pod_log_dir(node, pod).display().to_string(),
        dns_config: Some(DnsConfig {
            servers,
            searches: Vec::new(),
            options: Vec::new(),
        }),
        port_mappings,
        labels,
        annotations,
        linux: Some(LinuxPodSandboxConfig {
            // generatePodSandboxLinuxConfig: the pod cgroup from the container manager.
            cgroup_parent: go_cgroup_parent(node, pod),
            security_context: Some(LinuxSandboxSecurityContext {
                // namespacesForPod (helpers_linux.go / kuberuntime_sandbox_linux.go).
                namespace_options: Some(go_namespaces(pod)),
                // getSeccompProfile with seccompDefault off: Unconfined.
                seccomp: Some(SecurityProfile {
                    profile_type: ProfileType::Unconfined as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        windows: None,
    }
}

fn go_host_network(pod: &Pod) -> bool {
    pod.spec.as_ref().unwrap().host_network == Some(true)
}

/// `namespacesForPod` (kuberuntime/util `NamespacesForPod`): the network namespace is the
/// node's for a host-network pod (`NetworkNamespaceForPod`, the value `podSandboxChanged`
/// compares), PID per container, IPC per pod.
fn go_namespaces(pod: &Pod) -> NamespaceOption {
    NamespaceOption {
        network: if go_host_network(pod) {
            NamespaceMode::Node as i32
        } else {
            NamespaceMode::Pod as i32
        },
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// Which kind of container, for the `io.kubernetes.container.*` annotations.
fn find_container<'a>(pod: &'a Pod, name: &str) -> &'a Container {
    let spec = pod.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap()
}

/// `newContainerLabels` (labels.go): pod name, namespace, uid and the container name.
fn go_container_labels(pod: &Pod, c: &Container) -> HashMap<String, String> {
    let (name, ns, uid) = meta(pod);
    HashMap::from([
        ("io.kubernetes.pod.name".into(), name.into()),
        ("io.kubernetes.pod.namespace".into(), ns.into()),
        ("io.kubernetes.pod.uid".into(), uid.into()),
        ("io.kubernetes.container.name".into(), c.name.clone()),
    ])
}

/// `newContainerAnnotations` (labels.go, v1.33): hash (hex), restartCount (decimal),
/// terminationMessagePath, terminationMessagePolicy, the pod's deletion/termination grace
/// periods when set, the preStop handler and the ports as JSON when present.
fn go_container_annotations(
    pod: &Pod,
    c: &Container,
    restart_count: u32,
) -> HashMap<String, String> {
    let mut a = HashMap::from([
        (
            "io.kubernetes.container.hash".to_owned(),
            format!("{:x}", go_hash_container(c)),
        ),
        (
            "io.kubernetes.container.restartCount".to_owned(),
            restart_count.to_string(),
        ),
        (
            "io.kubernetes.container.terminationMessagePath".to_owned(),
            c.termination_message_path.clone().unwrap_or_default(),
        ),
        (
            "io.kubernetes.container.terminationMessagePolicy".to_owned(),
            c.termination_message_policy.clone().unwrap_or_default(),
        ),
    ]);
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        a.insert(
            "io.kubernetes.pod.deletionGracePeriod".into(),
            g.to_string(),
        );
    }
    if let Some(g) = pod.spec.as_ref().unwrap().termination_grace_period_seconds {
        a.insert(
            "io.kubernetes.pod.terminationGracePeriod".into(),
            g.to_string(),
        );
    }
    if let Some(pre_stop) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        a.insert(
            "io.kubernetes.container.preStopHandler".into(),
            serde_json::to_string(pre_stop).unwrap(),
        );
    }
    if let Some(ports) = c.ports.as_ref().filter(|p| !p.is_empty()) {
        a.insert(
            "io.kubernetes.container.ports".into(),
            serde_json::to_string(ports).unwrap(),
        );
    }
    a
}

/// `generateContainerConfig` (kuberuntime_container.go) with `makeMounts` (kubelet_pods.go:
/// volume mounts, `<podDir>/etc-hosts` on /etc/hosts) and the termination-message file
/// (`<podDir>/containers/<name>/<8 hex>` on terminationMessagePath, mode 0666).
fn go_container_config(
    node: &GoNode,
    pod: &Pod,
    c: &Container,
    restart_count: u32,
    instance: &str,
) -> ContainerConfig {
    let uid = meta(pod).2;
    let pod_dir = node.root.join("pods").join(uid);
    let mut mounts = Vec::new();
    for vm in c.volume_mounts.iter().flatten() {
        // The volume plugins' paths (pkg/volume/emptydir, projected):
        // volumes/kubernetes.io~<plugin>/<name>; projected volumes are mounted read-only.
        let v = go_volume(pod, &vm.name);
        mounts.push(Mount {
            container_path: vm.mount_path.clone(),
            host_path: go_volume_dir(&pod_dir, v).display().to_string(),
            readonly: v.projected.is_some(),
            ..Default::default()
        });
    }
    mounts.push(Mount {
        container_path: "/etc/hosts".into(),
        host_path: pod_dir.join("etc-hosts").display().to_string(),
        ..Default::default()
    });
    let term_dir = pod_dir.join("containers").join(&c.name);
    std::fs::create_dir_all(&term_dir).unwrap();
    let term_file = term_dir.join(instance);
    std::fs::write(&term_file, "").unwrap();
    set_mode(&term_file, 0o666);
    mounts.push(Mount {
        container_path: c.termination_message_path.clone().unwrap(),
        host_path: term_file.display().to_string(),
        ..Default::default()
    });
    // BuildContainerLogsDirectory: generateContainerConfig creates <podLogDir>/<container>.
    std::fs::create_dir_all(go_pod_log_dir(node, pod).join(&c.name)).unwrap();
    let burstable = go_qos(pod) == "burstable";
    ContainerConfig {
        // metadata.attempt is the restart count.
        metadata: Some(ContainerMetadata {
            name: c.name.clone(),
            attempt: restart_count,
        }),
        // The image ID from EnsureImageExists, and the image as the user wrote it.
        image: Some(ImageSpec {
            image: node.image_ref.clone(),
            user_specified_image: c.image.clone().unwrap(),
            ..Default::default()
        }),
        command: c.command.clone().unwrap_or_default(),
        args: c.args.clone().unwrap_or_default(),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: c
            .env
            .iter()
            .flatten()
            .map(|e| KeyValue {
                key: e.name.clone(),
                value: e.value.clone().unwrap_or_default(),
            })
            .collect(),
        mounts,
        labels: go_container_labels(pod, c),
        annotations: go_container_annotations(pod, c, restart_count),
        // buildContainerLogsPath: <container>/<restartCount>.log, relative to the log dir.
        log_path: format!("{}/{restart_count}.log", c.name),
        linux: Some(LinuxContainerConfig {
            // generateLinuxContainerResources / calculateLinuxResources with cpuCFSQuota on:
            // shares from the request, period 100ms, no quota without a limit; OOM score of a
            // Burstable container with no memory request is 999, BestEffort 1000
            // (pkg/kubelet/qos GetContainerOOMScoreAdjust).
            resources: Some(LinuxContainerResources {
                cpu_shares: go_cpu_shares(c),
                cpu_period: 100_000,
                oom_score_adj: if burstable { 999 } else { 1000 },
                ..Default::default()
            }),
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(go_namespaces(pod)),
                seccomp: Some(SecurityProfile {
                    profile_type: ProfileType::Unconfined as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

fn go_volume<'a>(pod: &'a Pod, name: &str) -> &'a k8s_openapi::api::core::v1::Volume {
    let volumes = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap();
    let v = volumes.iter().find(|v| v.name == name).unwrap();
    assert!(
        v.empty_dir.is_some() || v.projected.is_some(),
        "only emptyDir and projected volumes here"
    );
    v
}

fn go_volume_dir(pod_dir: &Path, v: &k8s_openapi::api::core::v1::Volume) -> PathBuf {
    let plugin = if v.projected.is_some() {
        "kubernetes.io~projected"
    } else {
        "kubernetes.io~empty-dir"
    };
    pod_dir.join("volumes").join(plugin).join(&v.name)
}

/// A projected (service account token) volume as the Go kubelet sets it up: a tmpfs (the
/// wrapped memory-backed emptyDir, pkg/volume/emptydir `setupTmpfs`) holding the payload in
/// the AtomicWriter layout (pkg/volume/util/atomic_writer.go): a `..<UTC timestamp>.<random>`
/// directory, `..data` pointing at it, and each file as a symlink through `..data`.
fn go_projected_volume(dir: &Path) {
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(dir)
        .status()
        .expect("run mount")
        .success();
    assert!(ok, "mount a tmpfs on {}", dir.display());
    let ts = dir.join("..2026_11_26_08_00_00.1234567890");
    std::fs::create_dir(&ts).unwrap();
    std::fs::write(ts.join("token"), "go-kubelet-token").unwrap();
    std::fs::write(ts.join("namespace"), "default").unwrap();
    for f in ["token", "namespace"] {
        set_mode(&ts.join(f), 0o644);
    }
    std::os::unix::fs::symlink("..2026_11_26_08_00_00.1234567890", dir.join("..data")).unwrap();
    for f in ["token", "namespace"] {
        std::os::unix::fs::symlink(format!("..data/{f}"), dir.join(f)).unwrap();
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// What the Go kubelet does for a pod before the first container (`SyncPod`: `makePodDataDirs`
/// `pods/<uid>/{volumes,plugins,containers}`, the emptyDir volumes, the hosts file, the
/// sandbox log dir) and `createPodSandbox`.
async fn go_run_sandbox(rt: &RemoteRuntime, node: &GoNode, pod: &Pod) -> String {
    let uid = meta(pod).2;
    let pod_dir = node.root.join("pods").join(uid);
    for sub in ["volumes", "plugins", "containers"] {
        std::fs::create_dir_all(pod_dir.join(sub)).unwrap();
    }
    for v in pod.spec.as_ref().unwrap().volumes.iter().flatten() {
        let dir = go_volume_dir(&pod_dir, v);
        std::fs::create_dir_all(&dir).unwrap();
        if v.projected.is_some() {
            go_projected_volume(&dir);
        } else {
            set_mode(&dir, 0o777);
        }
    }
    // ensureHostsFile (kubelet_pods.go): the managed hosts file (the pod IP is not known
    // before the sandbox exists; the test does not depend on it), or the node's for a
    // host-network pod (nodeHostsFileContent).
    let hosts = if go_host_network(pod) {
        format!(
            "# Kubernetes-managed hosts file (host network).\n{}",
            std::fs::read_to_string("/etc/hosts").unwrap_or_default()
        )
    } else {
        format!(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n10.0.0.1\t{}\n",
            meta(pod).0
        )
    };
    std::fs::write(pod_dir.join("etc-hosts"), hosts).unwrap();
    set_mode(&pod_dir.join("etc-hosts"), 0o644);
    let config = go_sandbox_config(node, pod, 0);
    std::fs::create_dir_all(&config.log_directory).unwrap();
    rt.run_pod_sandbox(RunPodSandboxRequest {
        config: Some(config),
        runtime_handler: String::new(),
    })
    .await
    .expect("RunPodSandbox")
    .pod_sandbox_id
}

/// `startContainer`: CreateContainer with the sandbox config, then StartContainer.
async fn go_start_container(
    rt: &RemoteRuntime,
    node: &GoNode,
    pod: &Pod,
    sandbox: &str,
    name: &str,
    restart_count: u32,
    instance: &str,
) -> String {
    let c = find_container(pod, name);
    let id = rt
        .create_container(CreateContainerRequest {
            pod_sandbox_id: sandbox.into(),
            config: Some(go_container_config(node, pod, c, restart_count, instance)),
            sandbox_config: Some(go_sandbox_config(node, pod, 0)),
        })
        .await
        .expect("CreateContainer")
        .container_id;
    rt.start_container(StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .expect("StartContainer");
    id
}

async fn container_state(rt: &RemoteRuntime, id: &str) -> (i32, i32, i64) {
    let s = rt
        .container_status(ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        })
        .await
        .expect("ContainerStatus")
        .status
        .unwrap();
    (s.state, s.exit_code, s.started_at)
}

async fn wait_exited(rt: &RemoteRuntime, id: &str, code: i32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (state, exit, _) = container_state(rt, id).await;
        if state == ContainerState::ContainerExited as i32 {
            assert_eq!(exit, code, "container {id} exit code");
            return;
        }
        assert!(Instant::now() < deadline, "container {id} did not exit");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ensure_image(rt: &RemoteRuntime) -> String {
    let spec = ImageSpec {
        image: IMAGE.into(),
        ..Default::default()
    };
    let status = rt
        .image_status(ImageStatusRequest {
            image: Some(spec.clone()),
            verbose: false,
        })
        .await
        .expect("ImageStatus");
    if let Some(img) = status.image {
        return img.id;
    }
    rt.pull_image(PullImageRequest {
        image: Some(spec),
        ..Default::default()
    })
    .await
    .expect("PullImage")
    .image_ref
}

/// Sandboxes of pod `uid`: (id, attempt, ready).
async fn sandboxes(rt: &RemoteRuntime, uid: &str) -> Vec<(String, u32, bool)> {
    let mut out: Vec<_> = rt
        .list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(PodSandboxFilter {
                label_selector: [("io.kubernetes.pod.uid".to_owned(), uid.to_owned())].into(),
                ..Default::default()
            }),
        })
        .await
        .expect("ListPodSandbox")
        .items
        .into_iter()
        .map(|s| {
            (
                s.id,
                s.metadata.map_or(0, |m| m.attempt),
                s.state == PodSandboxState::SandboxReady as i32,
            )
        })
        .collect();
    out.sort();
    out
}

/// Containers of pod `uid`: id → (name, state).
async fn containers(rt: &RemoteRuntime, uid: &str) -> BTreeMap<String, (String, i32)> {
    pod_containers(rt, uid)
        .await
        .into_iter()
        .map(|c| {
            (
                c.id,
                (c.metadata.map(|m| m.name).unwrap_or_default(), c.state),
            )
        })
        .collect()
}

fn rfc3339(nanos: i64) -> String {
    chrono::DateTime::from_timestamp(nanos / 1_000_000_000, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The test's kubelet node, as the Go kubelet saw it.
fn go_node(k: &Kubelet, image_ref: String) -> GoNode {
    GoNode {
        root: k.root(),
        pod_logs_dir: k.logs(),
        cgroup_root: k.cgroup_root.clone(),
        image_ref,
    }
}

/// FNV-32a (hash/fnv `New32a`), what `checksum.New` (pkg/kubelet/checkpointmanager/checksum)
/// feeds with `dump.ForHash` of the checkpoint.
fn go_fnv32a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Checkpoint files a 1.33 Go kubelet leaves in its root dir with the default configuration
/// (cpuManagerPolicy none, memoryManagerPolicy None, InPlacePodVerticalScaling on), as
/// `(file, contents)`, for `pods` (every container's resources, as admitted and as started).
///
/// `cpu_manager_state` is byte-exact: pkg/kubelet/cm/cpumanager/state/checkpoint.go
/// `MarshalCheckpoint` sums the go-spew dump of the checkpoint (Entries an empty map, checksum
/// 0) and writes `policyName`, `defaultCpuSet`, `checksum` (entries omitted when empty).
/// `allocated_pods_state` / `actuated_pods_state` are byte-exact too (allocation/state
/// `NewCheckpoint`: the JSON of `PodResourceCheckpointInfo` as a string in `data`, summed by
/// `checksum.New(data)` = FNV-32a over `(string)<data>`); rkubelet reads them. The others
/// belong to managers rkubelet does not implement (memory manager, DRA, device plugins); their
/// checksums are not asserted to be upstream's: rkubelet must start with them present and
/// leave them untouched.
fn go_checkpoints(root: &Path, pods: &[&Pod]) -> Vec<(&'static str, String)> {
    let cpu_sum = go_fnv32a(
        "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string) Entries:(map[string]map[string]string)map[] Checksum:(checksum.Checksum)0}",
    );
    // The value found on every kubeadm node with the default CPU manager policy.
    assert_eq!(cpu_sum, 1_353_318_690);
    // encoding/json: map keys sorted, ResourceRequirements with omitempty fields.
    let entries: serde_json::Map<String, Value> = pods
        .iter()
        .map(|pod| {
            let spec = pod.spec.as_ref().unwrap();
            let resources: serde_json::Map<String, Value> = spec
                .init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
                .map(|c| {
                    let r = c.resources.clone().unwrap_or_default();
                    (c.name.clone(), serde_json::to_value(r).unwrap())
                })
                .collect();
            (
                meta(pod).2.to_owned(),
                json!({ "ContainerResources": resources }),
            )
        })
        .collect();
    let allocations = if entries.is_empty() {
        "{}".to_owned()
    } else {
        serde_json::to_string(&json!({ "entries": entries })).unwrap()
    };
    let files = vec![
        (
            "cpu_manager_state",
            format!(r#"{{"policyName":"none","defaultCpuSet":"","checksum":{cpu_sum}}}"#),
        ),
        (
            "memory_manager_state",
            r#"{"policyName":"None","machineState":{},"checksum":1162283653}"#.to_owned(),
        ),
        (
            "dra_manager_state",
            r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":{}}","Checksum":1422813003}"#.to_owned(),
        ),
        (
            "device-plugins/kubelet_internal_checkpoint",
            r#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":2262205670}"#.to_owned(),
        ),
        (
            "allocated_pods_state",
            format!(
                r#"{{"data":{},"checksum":{}}}"#,
                serde_json::to_string(&allocations).unwrap(),
                go_fnv32a(&format!("(string){allocations}"))
            ),
        ),
        (
            "actuated_pods_state",
            format!(
                r#"{{"data":{},"checksum":{}}}"#,
                serde_json::to_string(&allocations).unwrap(),
                go_fnv32a(&format!("(string){allocations}"))
            ),
        ),
    ];
    for (name, contents) in &files {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    files
}

/// The Go-only checkpoints are still as the Go kubelet left them (a swap back finds them).
fn assert_go_checkpoints_kept(root: &Path, files: &[(&str, String)]) {
    for (name, contents) in files {
        if matches!(
            *name,
            "memory_manager_state"
                | "dra_manager_state"
                | "device-plugins/kubelet_internal_checkpoint"
        ) {
            assert_eq!(
                &std::fs::read_to_string(root.join(name)).unwrap(),
                contents,
                "{name} was modified"
            );
        }
    }
    let cpu: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("cpu_manager_state")).unwrap())
            .unwrap();
    assert_eq!(cpu["policyName"], "none", "{cpu}");
    assert_eq!(cpu["checksum"], 1_353_318_690, "{cpu}");
}

// ---------------------------------------------------------------------------------------------
// API pods.
// ---------------------------------------------------------------------------------------------

/// A pod as the API server stores it after defaulting (pkg/apis/core/v1/defaults.go: restart
/// policy, DNS policy, termination message path/policy, pull policy, grace period 30 unless
/// set).
fn api_pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["nodeName"] = json!(NODE);
    spec["restartPolicy"] = json!("Always");
    spec["dnsPolicy"] = json!("ClusterFirst");
    spec["schedulerName"] = json!("default-scheduler");
    spec["securityContext"] = json!({});
    spec["enableServiceLinks"] = json!(true);
    spec["automountServiceAccountToken"] = json!(false);
    for list in ["initContainers", "containers"] {
        for c in spec[list].as_array_mut().into_iter().flatten() {
            c["image"] = json!(IMAGE);
            c["imagePullPolicy"] = json!("IfNotPresent");
            c["terminationMessagePath"] = json!("/dev/termination-log");
            c["terminationMessagePolicy"] = json!("File");
        }
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "default",
            "labels": {"app": name, "tier": "adopt"},
            "annotations": {"example.com/owner": "go-kubelet-era"},
        },
        "spec": spec,
    })
}

fn two_containers_pod() -> Value {
    api_pod(
        "two",
        json!({
            "terminationGracePeriodSeconds": 5,
            "serviceAccountName": "default",
            "volumes": [
                {"name": "data", "emptyDir": {}},
                // What the ServiceAccount admission plugin adds (trimmed to two sources).
                {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ]}},
            ],
            "containers": [
                {
                    "name": "app",
                    "command": ["sh", "-c", CRASH_ONCE],
                    "resources": {"requests": {"cpu": "10m"}},
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "true"]}}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {
                    "name": "side",
                    "command": ["sh", "-c", RUN],
                    "resources": {"requests": {"cpu": "20m"}},
                    "volumeMounts": [{
                        "name": "kube-api-access-x7k2p",
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        "readOnly": true,
                    }],
                },
            ],
        }),
    )
}

fn inited_pod() -> Value {
    api_pod(
        "inited",
        json!({
            "terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "work", "emptyDir": {}}],
            "initContainers": [
                {
                    "name": "init",
                    "command": ["sh", "-c", "echo ran >> /work/init-runs"],
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                },
                {
                    "name": "sidecar",
                    "restartPolicy": "Always",
                    "command": ["sh", "-c", RUN],
                },
            ],
            "containers": [{
                "name": "main",
                "command": ["sh", "-c", RUN],
                "volumeMounts": [{"name": "work", "mountPath": "/work"}],
            }],
        }),
    )
}

fn host_network_pod() -> Value {
    api_pod(
        "hostnet",
        json!({
            "hostNetwork": true,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "agent", "command": ["sh", "-c", RUN]}],
        }),
    )
}

/// The kubelet's view (`/pods` on the read-only port) of pod `name` in `default`.
async fn kubelet_pod(k: &Kubelet, name: &str) -> Option<Value> {
    k.pods()
        .await
        .into_iter()
        .find(|p| p["metadata"]["name"] == name && p["metadata"]["namespace"] == "default")
}

fn cstatus<'a>(p: &'a Value, field: &str, name: &str) -> &'a Value {
    container(p, field, name).unwrap_or_else(|| panic!("no {field} entry {name}: {p}"))
}

fn cid(id: &str) -> String {
    format!("containerd://{id}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_kubelet_api_pods_are_adopted_without_restarts() {
    let mut k = Kubelet::new();
    let (server, client) = fixture(k.dir.path()).await;
    server
        .create(
            "serviceaccounts",
            "default",
            json!({"metadata": {"name": "default"}}),
        )
        .unwrap();
    k.extra_args = vec!["--kubeconfig".into(), server.kubeconfig_path.clone().into()];
    let rt = cri().await;
    let node = go_node(&k, ensure_image(&rt).await);

    // The API pods, as the scheduler bound them to this node.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut created = BTreeMap::new();
    for obj in [two_containers_pod(), inited_pod(), host_network_pod()] {
        let pod: Pod = serde_json::from_value(obj).unwrap();
        let pod = pods.create(&PostParams::default(), &pod).await.unwrap();
        created.insert(pod.metadata.name.clone().unwrap(), pod);
    }
    let two = &created["two"];
    let inited = &created["inited"];
    let hostnet = &created["hostnet"];
    let checkpoints = go_checkpoints(&k.root(), &[two, inited, hostnet]);

    // What the Go kubelet did on this node. Pod "two": app crashed once (instance 0 exited 3,
    // instance 1 running), side running.
    let two_sb = go_run_sandbox(&rt, &node, two).await;
    let app0 = go_start_container(&rt, &node, two, &two_sb, "app", 0, "1a2b3c4d").await;
    wait_exited(&rt, &app0, 3).await;
    let app1 = go_start_container(&rt, &node, two, &two_sb, "app", 1, "5e6f7a8b").await;
    let side = go_start_container(&rt, &node, two, &two_sb, "side", 0, "9c0d1e2f").await;
    // Pod "inited": the init container completed, the sidecar and main running.
    let inited_sb = go_run_sandbox(&rt, &node, inited).await;
    let init = go_start_container(&rt, &node, inited, &inited_sb, "init", 0, "0a1b2c3d").await;
    wait_exited(&rt, &init, 0).await;
    let sidecar =
        go_start_container(&rt, &node, inited, &inited_sb, "sidecar", 0, "3f2e1d0c").await;
    let main = go_start_container(&rt, &node, inited, &inited_sb, "main", 0, "4e5f6a7b").await;
    // Pod "hostnet": the node's network namespace.
    let hostnet_sb = go_run_sandbox(&rt, &node, hostnet).await;
    let agent = go_start_container(&rt, &node, hostnet, &hostnet_sb, "agent", 0, "7d6c5b4a").await;

    let two_uid = meta(two).2.to_owned();
    let inited_uid = meta(inited).2.to_owned();
    let hostnet_uid = meta(hostnet).2.to_owned();
    let uids = [two_uid.clone(), inited_uid.clone(), hostnet_uid.clone()];
    let mut before = BTreeMap::new();
    for (uid, sandbox, count) in [
        (&two_uid, &two_sb, 3),
        (&inited_uid, &inited_sb, 3),
        (&hostnet_uid, &hostnet_sb, 1),
    ] {
        let cs = containers(&rt, uid).await;
        assert_eq!(cs.len(), count, "{cs:?}");
        let sbs = sandboxes(&rt, uid).await;
        assert_eq!(sbs, vec![(sandbox.clone(), 0, true)]);
        before.insert(uid.clone(), (cs, sbs));
    }
    let started = |id: String| {
        let rt = &rt;
        async move { rfc3339(container_state(rt, &id).await.2) }
    };
    let app1_started = started(app1.clone()).await;
    let side_started = started(side.clone()).await;
    let main_started = started(main.clone()).await;
    let sidecar_started = started(sidecar.clone()).await;
    let agent_started = started(agent.clone()).await;

    // The statuses the Go kubelet posted.
    let go_status = |cs: Value, init: Value| {
        json!({"status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": cs,
            "initContainerStatuses": init,
        }})
    };
    let two_status = go_status(
        json!([
            {"name": "app", "ready": true, "restartCount": 1, "image": IMAGE, "imageID": node.image_ref,
             "containerID": cid(&app1), "started": true, "state": {"running": {"startedAt": app1_started}},
             "lastState": {"terminated": {"exitCode": 3, "reason": "Error", "containerID": cid(&app0)}}},
            {"name": "side", "ready": true, "restartCount": 0, "image": IMAGE, "imageID": node.image_ref,
             "containerID": cid(&side), "started": true, "state": {"running": {"startedAt": side_started}}},
        ]),
        json!(null),
    );
    let inited_status = go_status(
        json!([
            {"name": "main", "ready": true, "restartCount": 0, "image": IMAGE, "imageID": node.image_ref,
             "containerID": cid(&main), "started": true, "state": {"running": {"startedAt": main_started}}},
        ]),
        json!([
            {"name": "init", "ready": true, "restartCount": 0, "image": IMAGE, "imageID": node.image_ref,
             "containerID": cid(&init), "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "sidecar", "ready": true, "restartCount": 0, "image": IMAGE, "imageID": node.image_ref,
             "containerID": cid(&sidecar), "started": true, "state": {"running": {"startedAt": sidecar_started}}},
        ]),
    );
    let hostnet_status = go_status(
        json!([
            {"name": "agent", "ready": true, "restartCount": 0, "image": IMAGE, "imageID": node.image_ref,
             "containerID": cid(&agent), "started": true, "state": {"running": {"startedAt": agent_started}}},
        ]),
        json!(null),
    );
    for (name, st) in [
        ("two", two_status),
        ("inited", inited_status),
        ("hostnet", hostnet_status),
    ] {
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&st))
            .await
            .unwrap();
    }

    // The swap: rkubelet starts on the Go kubelet's root dir.
    k.start();

    // rkubelet's own view: everything running, restart counts and start times carried over.
    let two_seen = wait_for(
        &k,
        Duration::from_secs(60),
        "pod two running in /pods",
        || async {
            let p = kubelet_pod(&k, "two").await?;
            let ok = ["app", "side"].iter().all(|c| {
                container(&p, "containerStatuses", c)
                    .is_some_and(|s| s["state"]["running"].is_object())
            });
            ok.then_some(p)
        },
    )
    .await;
    let inited_seen = wait_for(
        &k,
        Duration::from_secs(60),
        "pod inited running in /pods",
        || async {
            let p = kubelet_pod(&k, "inited").await?;
            container(&p, "containerStatuses", "main")
                .is_some_and(|s| s["state"]["running"].is_object())
                .then_some(p)
        },
    )
    .await;
    let hostnet_seen = wait_for(
        &k,
        Duration::from_secs(60),
        "pod hostnet running in /pods",
        || async {
            let p = kubelet_pod(&k, "hostnet").await?;
            container(&p, "containerStatuses", "agent")
                .is_some_and(|s| s["state"]["running"].is_object())
                .then_some(p)
        },
    )
    .await;
    let app = cstatus(&two_seen, "containerStatuses", "app");
    assert_eq!(app["containerID"], cid(&app1), "{app}");
    assert_eq!(app["restartCount"], 1, "RESTARTS 1 stays 1: {app}");
    assert_eq!(app["state"]["running"]["startedAt"], app1_started, "{app}");
    assert_eq!(app["lastState"]["terminated"]["exitCode"], 3, "{app}");
    assert_eq!(
        app["lastState"]["terminated"]["containerID"],
        cid(&app0),
        "{app}"
    );
    assert_eq!(
        app["lastState"]["terminated"]["message"], "crashed under go",
        "the termination message is read through the Go kubelet's mount: {app}"
    );
    let s = cstatus(&two_seen, "containerStatuses", "side");
    assert_eq!(s["containerID"], cid(&side), "{s}");
    assert_eq!(s["restartCount"], 0, "{s}");
    assert_eq!(s["state"]["running"]["startedAt"], side_started, "{s}");
    let m = cstatus(&inited_seen, "containerStatuses", "main");
    assert_eq!(m["containerID"], cid(&main), "{m}");
    assert_eq!(m["state"]["running"]["startedAt"], main_started, "{m}");
    let i = cstatus(&inited_seen, "initContainerStatuses", "init");
    assert_eq!(i["containerID"], cid(&init), "{i}");
    assert_eq!(i["state"]["terminated"]["reason"], "Completed", "{i}");
    assert_eq!(i["state"]["terminated"]["exitCode"], 0, "{i}");
    let sc = cstatus(&inited_seen, "initContainerStatuses", "sidecar");
    assert_eq!(sc["containerID"], cid(&sidecar), "{sc}");
    assert_eq!(sc["state"]["running"]["startedAt"], sidecar_started, "{sc}");
    let a = cstatus(&hostnet_seen, "containerStatuses", "agent");
    assert_eq!(a["containerID"], cid(&agent), "{a}");
    assert_eq!(a["state"]["running"]["startedAt"], agent_started, "{a}");

    // The API status rkubelet posts says the same.
    let api_app = wait_for(
        &k,
        Duration::from_secs(30),
        "pod two Ready in the API",
        || async {
            let p = server.get("pods", "default", "two")?;
            let ready = p["status"]["conditions"].as_array()?.iter().any(|c| {
                c["type"] == "Ready" && c["status"] == "True" && c["lastTransitionTime"].is_string()
            });
            ready.then(|| cstatus(&p, "containerStatuses", "app").clone())
        },
    )
    .await;
    assert_eq!(api_app["restartCount"], 1, "{api_app}");
    assert_eq!(api_app["containerID"], cid(&app1), "{api_app}");

    // The service account token volume stays live: rkubelet writes its token onto the Go
    // kubelet's tmpfs (the one the container's bind mount shows), without mounting another.
    let projected = k
        .root()
        .join("pods")
        .join(&two_uid)
        .join("volumes/kubernetes.io~projected/kube-api-access-x7k2p");
    let token = wait_for(
        &k,
        Duration::from_secs(30),
        "rkubelet's token in the container",
        || {
            let side = side.clone();
            async move {
                let (code, out, _) = common::exec_in(
                    &side,
                    &["cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"],
                )
                .await;
                (code == 0 && out != "go-kubelet-token").then_some(out)
            }
        },
    )
    .await;
    assert_eq!(
        token.split('.').count(),
        3,
        "a JWT from TokenRequest: {token}"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = projected.display().to_string();
    assert_eq!(
        mounts
            .lines()
            .filter(|l| l.split(' ').nth(4) == Some(want.as_str()))
            .count(),
        1,
        "one tmpfs on {want}"
    );

    // Two sync periods (syncFrequency 10s) later nothing was restarted, recreated or re-run:
    // the same sandboxes and containers, in the same states.
    let until = Instant::now() + Duration::from_secs(25);
    while Instant::now() < until {
        for uid in &uids {
            let now = (containers(&rt, uid).await, sandboxes(&rt, uid).await);
            assert_eq!(now, before[uid], "pod {uid}\n{}", tail(&k.log_text(), 60));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (id, start) in [
        (&app1, &app1_started),
        (&side, &side_started),
        (&main, &main_started),
        (&sidecar, &sidecar_started),
        (&agent, &agent_started),
    ] {
        assert_eq!(
            &started(id.clone()).await,
            start,
            "container {id} was not restarted"
        );
    }
    // The init container ran once; the emptyDir data written under the Go kubelet is intact.
    assert_eq!(
        common::exec_in(&main, &["cat", "/work/init-runs"]).await.1,
        "ran\n"
    );
    assert_eq!(
        common::exec_in(&app1, &["ls", "/data/crashed-once"])
            .await
            .0,
        0,
        "the emptyDir of pod two kept its data"
    );
    // The pod dirs and log dirs are the same ones.
    for uid in &uids {
        assert!(k.root().join("pods").join(uid).join("etc-hosts").is_file());
    }
    assert!(go_pod_log_dir(&node, two).join("app/1.log").is_file());
    assert!(go_pod_log_dir(&node, two).join("app/0.log").is_file());
    assert_go_checkpoints_kept(&k.root(), &checkpoints);

    // A later restart continues the Go kubelet's numbering: app's instance 1 exits, rkubelet
    // starts instance 2 (metadata attempt, restartCount annotation, log file 2.log).
    rt.stop_container(StopContainerRequest {
        container_id: app1.clone(),
        timeout: 10,
    })
    .await
    .expect("StopContainer");
    let app2 = wait_for(
        &k,
        Duration::from_secs(60),
        "app restarted by rkubelet",
        || async {
            pod_containers(&rt, &two_uid).await.into_iter().find(|c| {
                c.metadata
                    .as_ref()
                    .is_some_and(|m| m.name == "app" && m.attempt == 2)
                    && c.state == ContainerState::ContainerRunning as i32
            })
        },
    )
    .await;
    assert_eq!(
        app2.annotations["io.kubernetes.container.restartCount"], "2",
        "{app2:?}"
    );
    let log_path = rt
        .container_status(ContainerStatusRequest {
            container_id: app2.id.clone(),
            verbose: false,
        })
        .await
        .expect("ContainerStatus")
        .status
        .unwrap()
        .log_path;
    assert_eq!(
        Path::new(&log_path),
        go_pod_log_dir(&node, two).join("app/2.log")
    );
    wait_for(
        &k,
        Duration::from_secs(30),
        "RESTARTS 2 in the API",
        || async {
            let p = server.get("pods", "default", "two")?;
            (cstatus(&p, "containerStatuses", "app")["restartCount"] == 2).then_some(())
        },
    )
    .await;

    // Clean up: delete the pods through the API; rkubelet stops them.
    for name in ["two", "inited", "hostnet"] {
        pods.delete(name, &Default::default()).await.unwrap();
    }
    for uid in &uids {
        common::wait_pod_containers_gone(&k, &rt, uid, Duration::from_secs(60)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Static pods: the documented exception.
// ---------------------------------------------------------------------------------------------

/// A static pod the Go kubelet ran is replaced once. Its UID (config/common.go
/// `applyDefaults`: md5 over `hash.DeepHashObject` of the decoded internal `core.Pod`, then
/// `host:<node>` and `file:<path>`) is a go-spew dump of every field of the Go struct,
/// including Kubernetes-version-specific ones; rkubelet derives its own. The old sandbox and
/// containers are stopped and removed, the pod runs again under rkubelet's UID, and nothing is
/// left of the old one in the runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_kubelet_static_pod_is_replaced_exactly_once() {
    let mut k = Kubelet::new();
    let rt = cri().await;
    let node = go_node(&k, ensure_image(&rt).await);
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ctrl\n  namespace: kube-system\n  labels:\n    component: ctrl\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, \"{RUN}\"]\n"
    );
    k.write_manifest("ctrl.yaml", &manifest);
    // The Go kubelet's static pod: applyDefaults renames it `<name>-<node>` (generatePodName),
    // sets the UID (an md5, 32 hex digits) and the config annotations; the defaults of the
    // API (terminationMessagePath, policy) are applied by the decoder.
    let go_uid = "5f1c3a0e9b7d4c2a8e6f0b1d3c5a7e9f";
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": format!("ctrl-{NODE}"), "namespace": "kube-system", "uid": go_uid,
            "labels": {"component": "ctrl"},
            "annotations": {
                "kubernetes.io/config.hash": go_uid,
                "kubernetes.io/config.source": "file",
                "kubernetes.io/config.seen": "2026-11-26T08:00:00.000000000Z",
            },
        },
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", RUN],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }],
        },
    }))
    .unwrap();
    let checkpoints = go_checkpoints(&k.root(), &[&pod]);
    let go_sb = go_run_sandbox(&rt, &node, &pod).await;
    let go_c = go_start_container(&rt, &node, &pod, &go_sb, "c", 0, "6b7c8d9e").await;

    k.start();
    let p = k
        .wait_pod(
            "ctrl",
            Duration::from_secs(60),
            "the static pod running",
            |p| common::running(p, "c"),
        )
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    assert_ne!(uid, go_uid, "rkubelet derives its own static pod UID");
    let c = cstatus(&p, "containerStatuses", "c");
    assert_eq!(c["restartCount"], 0, "{c}");
    assert_ne!(c["containerID"], cid(&go_c));
    // The Go kubelet's instance is gone from the runtime: stopped and removed as an orphan.
    common::wait_pod_containers_gone(&k, &rt, go_uid, Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sandboxes(&rt, go_uid).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the Go kubelet's sandbox is still there\n{}",
            tail(&k.log_text(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Its pod dir and log dir are cleaned up like any removed pod's.
    let old_dir = k.root().join("pods").join(go_uid);
    let old_logs = go_pod_log_dir(&node, &pod);
    let deadline = Instant::now() + Duration::from_secs(90);
    while old_dir.exists() || old_logs.exists() {
        assert!(
            Instant::now() < deadline,
            "left behind: pod dir {} {}, log dir {} {}\n{}",
            old_dir.display(),
            old_dir.exists(),
            old_logs.display(),
            old_logs.exists(),
            tail(&k.log_text(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_go_checkpoints_kept(&k.root(), &checkpoints);
    // Exactly once: the new instance stays.
    let new = containers(&rt, &uid).await;
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        assert_eq!(containers(&rt, &uid).await, new);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
