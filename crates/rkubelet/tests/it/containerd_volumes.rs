//! Volumes and pod networking files on the real containerd: emptyDir shared between an init
//! container and the main container, a memory emptyDir on tmpfs with its size, hostPath,
//! downwardAPI files, hostAliases in the managed /etc/hosts, clean-up on removal, ClusterFirst
//! DNS, a kubelet restart with mounted volumes (no double mounts, orphans cleaned), and
//! `recursiveReadOnly` on a runtime without the feature.

use crate::common;

use std::time::Duration;

use common::{Kubelet, container, cri, phase, running};

const IMAGE: &str = "docker.io/library/busybox:latest";

async fn exec(id: &str, cmd: &[&str]) -> (i32, String) {
    let (code, out, _) = common::exec_in(id, cmd).await;
    (code, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_and_hosts_file_reach_the_containers() {
    let mut k = Kubelet::new();
    let host_dir = k.dir.path().join("host-data");
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: vols
  labels:
    app: vols
    tier: backend
  annotations:
    note: 'say "hi" twice'
spec:
  terminationGracePeriodSeconds: 1
  hostAliases:
  - ip: "10.9.8.7"
    hostnames: ["alias-one", "alias-two"]
  volumes:
  - name: work
    emptyDir: {{}}
  - name: cache
    emptyDir:
      medium: Memory
      sizeLimit: 16Mi
  - name: host
    hostPath:
      path: {host}
      type: DirectoryOrCreate
  - name: info
    downwardAPI:
      items:
      - path: labels
        fieldRef:
          fieldPath: metadata.labels
      - path: name
        fieldRef:
          fieldPath: metadata.name
      - path: note
        fieldRef:
          fieldPath: metadata.annotations['note']
  initContainers:
  - name: writer
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo from-init > /work/hello; echo on-host > /host/file"]
    volumeMounts:
    - name: work
      mountPath: /work
    - name: host
      mountPath: /host
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - name: work
      mountPath: /work
    - name: cache
      mountPath: /cache
    - name: info
      mountPath: /info
      readOnly: true
"#,
        host = host_dir.display()
    );
    k.write_manifest("vols.yaml", &manifest);
    k.start();
    let p = k
        .wait_pod("vols", Duration::from_secs(60), "Running", |p| {
            running(p, "main")
        })
        .await;
    assert_eq!(phase(&p), "Running");
    let id = container(&p, "containerStatuses", "main").unwrap()["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        exec(&id, &["cat", "/work/hello"]).await,
        (0, "from-init\n".into())
    );
    assert_eq!(
        std::fs::read_to_string(host_dir.join("file")).unwrap(),
        "on-host\n"
    );
    let (_, mounts) = exec(&id, &["cat", "/proc/mounts"]).await;
    let cache = mounts
        .lines()
        .find(|l| l.contains(" /cache "))
        .unwrap_or_else(|| panic!("{mounts}"));
    assert!(
        cache.starts_with("tmpfs /cache tmpfs") && cache.contains("size=16384k"),
        "{cache}"
    );
    assert_eq!(exec(&id, &["cat", "/info/name"]).await.1, "vols-test-node");
    assert_eq!(
        exec(&id, &["cat", "/info/labels"]).await.1,
        "app=\"vols\"\ntier=\"backend\""
    );
    assert_eq!(
        exec(&id, &["cat", "/info/note"]).await.1,
        "say \"hi\" twice"
    );
    let (code, _) = exec(&id, &["sh", "-c", "echo x > /info/x"]).await;
    assert_ne!(code, 0, "readOnly mount must refuse writes");
    let (_, hosts) = exec(&id, &["cat", "/etc/hosts"]).await;
    assert!(
        hosts.starts_with("# Kubernetes-managed hosts file."),
        "{hosts}"
    );
    assert!(hosts.contains("10.9.8.7\talias-one\talias-two"), "{hosts}");
    let ip = p["status"]["podIP"].as_str().unwrap();
    assert!(hosts.contains(&format!("{ip}\tvols-test-node")), "{hosts}");

    // Removing the pod unmounts and removes its volumes; hostPath data stays.
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let pod_dir = k.root().join("pods").join(&uid);
    assert!(
        pod_dir
            .join("volumes/kubernetes.io~empty-dir/work")
            .is_dir()
    );
    k.remove_manifest("vols.yaml");
    let rt = cri().await;
    common::wait_pod_containers_gone(&k, &rt, &uid, Duration::from_secs(20)).await;
    let start = std::time::Instant::now();
    while pod_dir.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "pod dir not removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(&uid),
        "a mount of the pod is left behind"
    );
    assert!(host_dir.join("file").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_host_path_reports_failed_mount_and_waits() {
    let mut k = Kubelet::new();
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: badmount\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: h\n    hostPath:\n      path: /definitely/not/here\n      type: Directory\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n    volumeMounts:\n    - name: h\n      mountPath: /h\n"
    );
    k.write_manifest("badmount.yaml", &manifest);
    k.start();
    let p = k
        .wait_pod(
            "badmount",
            Duration::from_secs(30),
            "ContainerCreating",
            |p| {
                container(p, "containerStatuses", "c")
                    .is_some_and(|c| c["state"]["waiting"]["reason"] == "ContainerCreating")
            },
        )
        .await;
    assert_eq!(phase(&p), "Pending");
    let start = std::time::Instant::now();
    loop {
        let log = k.log_text();
        if log.contains("FailedMount")
            && log.contains("hostPath type check failed: /definitely/not/here is not a directory")
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no FailedMount event:\n{}",
            common::tail(&log, 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_group_owns_files_written_into_an_empty_dir() {
    let mut k = Kubelet::new();
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fsgroup\nspec:\n  terminationGracePeriodSeconds: 1\n  securityContext:\n    runAsUser: 1000\n    fsGroup: 2000\n  volumes:\n  - name: data\n    emptyDir: {{}}\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"echo hi > /data/f; exec sleep 3600\"]\n    volumeMounts:\n    - name: data\n      mountPath: /data\n"
    );
    k.write_manifest("fsgroup.yaml", &manifest);
    k.start();
    let p = k
        .wait_pod("fsgroup", Duration::from_secs(60), "Running", |p| {
            running(p, "c")
        })
        .await;
    let id = container(&p, "containerStatuses", "c").unwrap()["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut out = String::new();
    for _ in 0..20 {
        out = exec(&id, &["stat", "-c", "%u %g", "/data/f"]).await.1;
        if !out.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        out, "1000 2000\n",
        "the file a non-root container wrote belongs to the fsGroup"
    );
    let (_, dir) = exec(&id, &["stat", "-c", "%g %A", "/data"]).await;
    assert_eq!(
        dir, "2000 drwxrwsrwx\n",
        "the volume root is group-owned with setgid"
    );
    let (_, groups) = exec(&id, &["id", "-G"]).await;
    assert!(groups.split_whitespace().any(|g| g == "2000"), "{groups}");
}

/// How many mounts of the host have `path` as their mount point.
fn mounts_at(path: &std::path::Path) -> usize {
    let want = path.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(want.as_str()))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_dns_and_a_restart_with_mounted_volumes() {
    let mut k = Kubelet::new();
    k.append_config("clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\n");
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: team\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: mem\n    emptyDir:\n      medium: Memory\n      sizeLimit: 8Mi\n  - name: info\n    downwardAPI:\n      items:\n      - path: name\n        fieldRef:\n          fieldPath: metadata.name\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n    volumeMounts:\n    - name: mem\n      mountPath: /mem\n    - name: info\n      mountPath: /info\n"
        )
    };
    k.write_manifest("keep.yaml", &pod("keep"));
    k.write_manifest("drop.yaml", &pod("drop"));
    k.start();
    let mut uids = Vec::new();
    for name in ["keep", "drop"] {
        let p = k
            .wait_pod(name, Duration::from_secs(60), "Running", |p| {
                running(p, "c")
            })
            .await;
        uids.push(p["metadata"]["uid"].as_str().unwrap().to_owned());
    }
    let keep = k.pod("keep").await.unwrap();
    let id = container(&keep, "containerStatuses", "c").unwrap()["containerID"]
        .as_str()
        .unwrap()
        .to_owned();

    // ClusterFirst: the cluster nameserver, the namespace search path and ndots:5.
    let (_, resolv) = exec(&id, &["cat", "/etc/resolv.conf"]).await;
    assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
    assert!(
        resolv.contains("search team.svc.cluster.local svc.cluster.local cluster.local"),
        "{resolv}"
    );
    assert!(resolv.contains("options ndots:5"), "{resolv}");

    let root = k.root();
    let mem_dir = |uid: &str| {
        root.join("pods")
            .join(uid)
            .join("volumes/kubernetes.io~empty-dir/mem")
    };
    assert_eq!(mounts_at(&mem_dir(&uids[0])), 1);

    // Restart with one manifest gone: the kept pod is adopted without a second tmpfs mount,
    // the dropped pod's containers, mounts and directory go.
    k.kill9();
    k.remove_manifest("drop.yaml");
    k.start();
    k.wait_pod(
        "keep",
        Duration::from_secs(60),
        "Running after restart",
        |p| running(p, "c") && p["status"]["conditions"].is_array(),
    )
    .await;
    let rt = cri().await;
    common::wait_pod_containers_gone(&k, &rt, &uids[1], Duration::from_secs(30)).await;
    let dropped_dir = k.root().join("pods").join(&uids[1]);
    let start = std::time::Instant::now();
    while dropped_dir.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the orphaned pod directory was not removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(mounts_at(&mem_dir(&uids[1])), 0, "orphan tmpfs unmounted");
    // Let a few syncs pass: still exactly one mount for the kept pod, same container.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(mounts_at(&mem_dir(&uids[0])), 1, "nothing remounted twice");
    let after = k.pod("keep").await.unwrap();
    assert_eq!(
        container(&after, "containerStatuses", "c").unwrap()["containerID"],
        id.as_str()
    );
    assert_eq!(exec(&id, &["cat", "/info/name"]).await.1, "keep-test-node");
}

/// `recursiveReadOnly` on containerd 1.6, which reports no runtime handler features: `Enabled`
/// fails the container with upstream's message, `IfPossible` runs with a read-only mount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursive_read_only_enabled_is_refused_and_if_possible_falls_back() {
    let mut k = Kubelet::new();
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: rro\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: data\n    emptyDir: {{}}\n  containers:\n  - name: enabled\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n    volumeMounts:\n    - {{name: data, mountPath: /data, readOnly: true, recursiveReadOnly: Enabled}}\n  - name: ifpossible\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n    volumeMounts:\n    - {{name: data, mountPath: /data, readOnly: true, recursiveReadOnly: IfPossible}}\n"
    );
    k.write_manifest("rro.yaml", &manifest);
    k.start();
    let p = k
        .wait_pod(
            "rro",
            Duration::from_secs(60),
            "enabled refused, ifpossible running",
            |p| {
                running(p, "ifpossible")
                    && container(p, "containerStatuses", "enabled").is_some_and(|c| {
                        c["state"]["waiting"]["reason"] == "CreateContainerConfigError"
                    })
            },
        )
        .await;
    let enabled = container(&p, "containerStatuses", "enabled").unwrap();
    assert_eq!(
        enabled["state"]["waiting"]["message"],
        "failed to resolve recursive read-only mode: volume \"data\" requested recursive read-only mode, but it is not supported by the runtime"
    );
    let id = container(&p, "containerStatuses", "ifpossible").unwrap()["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, out) = exec(&id, &["touch", "/data/x"]).await;
    assert_ne!(code, 0, "the IfPossible mount is read-only: {out}");
}
