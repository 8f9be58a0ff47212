//! subPath on the real containerd: a link planted by an init container (`ln -s / escape`)
//! never gives a container the host's root (CVE-2017-1002101: CreateContainerConfigError with
//! upstream's message, host canary untouched); directory, file, in-volume link and subPathExpr
//! subPaths work through bind mounts under `volume-subpaths/`, reused on a container restart;
//! nothing stays mounted under the pod directory once the pod is gone.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{Kubelet, NODE, container, cri, phase, running};

const IMAGE: &str = "docker.io/library/busybox:latest";
const WAIT: Duration = Duration::from_secs(60);

/// Lines of the host's mountinfo whose mount point lies under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let want = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|mp| mp.starts_with(&want)))
        .map(str::to_owned)
        .collect()
}

async fn wait_pod_dir_gone(k: &Kubelet, uid: &str) {
    let rt = cri().await;
    common::wait_pod_containers_gone(k, &rt, uid, Duration::from_secs(30)).await;
    let pod_dir = k.root().join("pods").join(uid);
    let start = std::time::Instant::now();
    while pod_dir.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "pod dir not removed; still mounted: {:?}\n{}",
            mounts_under(&pod_dir),
            common::tail(&k.log_text(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(mounts_under(&pod_dir), Vec::<String>::new());
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(uid),
        "a mount of the pod is left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_link_to_the_host_root_is_refused() {
    let mut k = Kubelet::new();
    // What the main container would overwrite if it saw the host's root.
    let canary = k.dir.path().join("canary");
    std::fs::write(&canary, "alive").unwrap();
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: escape
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: vol
    emptyDir: {{}}
  initContainers:
  - name: plant
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "ln -s / /vol/escape && ln -s ../../../../../../.. /vol/up"]
    volumeMounts:
    - name: vol
      mountPath: /vol
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo pwned > /host{canary}; sleep 3600"]
    volumeMounts:
    - name: vol
      mountPath: /host
      subPath: escape
  - name: climber
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo pwned > /host{canary}; sleep 3600"]
    volumeMounts:
    - name: vol
      mountPath: /host
      subPath: up
"#,
        canary = canary.display()
    );
    k.write_manifest("escape.yaml", &manifest);
    k.start();
    let config_error = |p: &serde_json::Value, c: &str| {
        container(p, "containerStatuses", c)
            .is_some_and(|s| s["state"]["waiting"]["reason"] == "CreateContainerConfigError")
    };
    let p = k
        .wait_pod("escape", WAIT, "CreateContainerConfigError", |p| {
            config_error(p, "main") && config_error(p, "climber")
        })
        .await;
    assert_eq!(phase(&p), "Pending");
    for c in ["main", "climber"] {
        let s = container(&p, "containerStatuses", c).unwrap();
        assert_eq!(
            s["state"]["waiting"]["message"].as_str().unwrap(),
            format!("failed to prepare subPath for volumeMount \"vol\" of container \"{c}\"")
        );
    }
    let log = k.log_text();
    assert!(
        log.contains("Error: failed to prepare subPath for volumeMount"),
        "no Failed event:\n{}",
        common::tail(&log, 30)
    );
    // Let a few retries pass: still nothing started, nothing written, nothing mounted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "alive");
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let pod_dir = k.root().join("pods").join(&uid);
    assert_eq!(
        mounts_under(&pod_dir.join("volume-subpaths")),
        Vec::<String>::new()
    );
    let rt = cri().await;
    let created: Vec<_> = common::pod_containers(&rt, &uid)
        .await
        .into_iter()
        .filter_map(|c| c.metadata.map(|m| m.name))
        .collect();
    assert_eq!(
        created,
        vec!["plant".to_owned()],
        "only the init container ran"
    );

    k.remove_manifest("escape.yaml");
    wait_pod_dir_gone(&k, &uid).await;
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_paths_and_sub_path_exprs_are_bind_mounted_and_cleaned_up() {
    let mut k = Kubelet::new();
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: subok
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: vol
    emptyDir: {{}}
  initContainers:
  - name: prep
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "mkdir -p /vol/dir && echo dir-content > /vol/dir/f && echo file-content > /vol/file.txt && ln -s dir /vol/link"]
    volumeMounts:
    - name: vol
      mountPath: /vol
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    command: ["sh", "-c", "echo from-expr > /expr/out; exec sleep 3600"]
    volumeMounts:
    - name: vol
      mountPath: /d
      subPath: dir
    - name: vol
      mountPath: /etc/app.txt
      subPath: file.txt
      readOnly: true
    - name: vol
      mountPath: /expr
      subPathExpr: logs/$(POD_NAME)
    - name: vol
      mountPath: /linked
      subPath: link
    - name: vol
      mountPath: /fresh
      subPath: made/by/kubelet
"#
    );
    k.write_manifest("subok.yaml", &manifest);
    k.start();
    let p = k
        .wait_pod("subok", WAIT, "Running", |p| running(p, "main"))
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let id = container(&p, "containerStatuses", "main").unwrap()["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    let exec = |cmd: &'static [&'static str]| {
        let id = id.clone();
        async move {
            let (code, out, _) = common::exec_in(&id, cmd).await;
            (code, out)
        }
    };
    assert_eq!(exec(&["cat", "/d/f"]).await, (0, "dir-content\n".into()));
    assert_eq!(
        exec(&["cat", "/etc/app.txt"]).await,
        (0, "file-content\n".into())
    );
    let (code, _) = exec(&["sh", "-c", "echo x > /etc/app.txt"]).await;
    assert_ne!(code, 0, "a readOnly file subPath refuses writes");
    assert_eq!(
        exec(&["cat", "/linked/f"]).await,
        (0, "dir-content\n".into()),
        "a link inside the volume is followed"
    );
    assert_eq!(exec(&["ls", "-a", "/fresh"]).await, (0, ".\n..\n".into()));

    let pod_dir = k.root().join("pods").join(&uid);
    let vol = pod_dir.join("volumes/kubernetes.io~empty-dir/vol");
    let out = vol.join(format!("logs/subok-{NODE}/out"));
    let start = std::time::Instant::now();
    while !out.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no {out:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "from-expr\n");
    assert!(vol.join("made/by/kubelet").is_dir());
    let subpaths = pod_dir.join("volume-subpaths/vol/main");
    let targets: Vec<_> = (0..5).map(|i| subpaths.join(i.to_string())).collect();
    for t in &targets {
        assert_eq!(mounts_under(t).len(), 1, "{t:?} mounted once");
    }
    assert!(std::fs::symlink_metadata(&targets[1]).unwrap().is_file());

    // A container restart reuses the bind mounts (none doubled).
    use rkubelet_cri::RuntimeService;
    cri()
        .await
        .stop_container(rkubelet_cri::api::StopContainerRequest {
            container_id: id.trim_start_matches("containerd://").to_owned(),
            timeout: 0,
        })
        .await
        .unwrap();
    let p = k
        .wait_pod("subok", WAIT, "restarted", |p| {
            running(p, "main")
                && container(p, "containerStatuses", "main")
                    .is_some_and(|c| c["restartCount"].as_i64() == Some(1))
        })
        .await;
    let id2 = container(&p, "containerStatuses", "main").unwrap()["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(id2, id);
    let (_, f, _) = common::exec_in(&id2, &["cat", "/d/f"]).await;
    assert_eq!(f, "dir-content\n");
    for t in &targets {
        assert_eq!(mounts_under(t).len(), 1, "{t:?} still mounted once");
    }

    k.remove_manifest("subok.yaml");
    wait_pod_dir_gone(&k, &uid).await;
}

/// The kubelet dies with a subPath bind mount in place and the pod is gone when it comes back:
/// the orphaned pod's subPath mount is unmounted and its directory removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_cleans_up_the_sub_path_mounts_of_an_orphaned_pod() {
    let mut k = Kubelet::new();
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: orphan
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: vol
    emptyDir: {{}}
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - name: vol
      mountPath: /data
      subPath: some/dir
"#
    );
    k.write_manifest("orphan.yaml", &manifest);
    k.start();
    let p = k
        .wait_pod("orphan", WAIT, "Running", |p| running(p, "main"))
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let target = k
        .root()
        .join("pods")
        .join(&uid)
        .join("volume-subpaths/vol/main/0");
    assert_eq!(mounts_under(&target).len(), 1);

    k.kill9();
    k.remove_manifest("orphan.yaml");
    k.start();
    wait_pod_dir_gone(&k, &uid).await;
}
