//! CVE-2017-1002102 on the real containerd: a payload volume (downwardAPI here; configMap,
//! secret and projected share the mount and writer paths) is mounted read-only even when the
//! pod does not ask for it, so a container cannot swap `..data` for a link to a host
//! directory; and when the volume directory is tampered with anyway (from the host, standing
//! in for a runtime that let a write through), the kubelet's next refresh rebuilds it without
//! following the planted links: a host-side canary directory survives untouched.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Kubelet, NODE, container, running};

const IMAGE: &str = "docker.io/library/busybox:latest";

fn assert_canary(canary: &Path) {
    assert_eq!(
        std::fs::read_to_string(canary.join("keep")).unwrap(),
        "precious",
        "the host canary file was changed"
    );
    let names: Vec<_> = std::fs::read_dir(canary)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["keep"], "the host canary directory was changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_volume_is_read_only_and_a_swapped_data_link_is_never_followed() {
    let mut k = Kubelet::new();
    let canary = k.dir.path().join("host-canary-dir");
    std::fs::create_dir(&canary).unwrap();
    std::fs::write(canary.join("keep"), "precious").unwrap();
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: secvol
  labels:
    app: secvol
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: info
    downwardAPI:
      items:
      - path: name
        fieldRef:
          fieldPath: metadata.name
      - path: meta/labels
        fieldRef:
          fieldPath: metadata.labels
  containers:
  - name: c
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - name: info
      mountPath: /vol
      readOnly: false
"#
    );
    k.write_manifest("secvol.yaml", &manifest);
    k.start();
    let p = k
        .wait_pod("secvol", Duration::from_secs(60), "Running", |p| {
            running(p, "c")
        })
        .await;
    let id = container(&p, "containerStatuses", "c").unwrap()["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    let name = format!("secvol-{NODE}");

    // The attack from inside: refused by the read-only mount.
    let attack = format!("rm /vol/..data && ln -s {} /vol/..data", canary.display());
    let (code, _, err) = common::exec_in(&id, &["sh", "-c", &attack]).await;
    assert_ne!(code, 0, "swapping ..data must fail");
    assert!(err.contains("Read-only file system"), "{err}");
    let (code, _, err) = common::exec_in(&id, &["sh", "-c", "echo x > /vol/new"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("Read-only file system"), "{err}");
    let (_, mounts, _) = common::exec_in(&id, &["cat", "/proc/mounts"]).await;
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some("/vol"))
        .unwrap_or_else(|| panic!("{mounts}"));
    let opts = line.split(' ').nth(3).unwrap();
    assert!(opts.split(',').any(|o| o == "ro"), "{line}");
    let (_, got, _) = common::exec_in(&id, &["cat", "/vol/name"]).await;
    assert_eq!(got, name);
    assert_canary(&canary);

    // The same tampering from the host side: `..data` to the canary (absolute), a visible
    // name to a file in it, the timestamped directory gone. The next periodic sync
    // (syncFrequency 10s) rewrites the volume without following any of it.
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let vol = k
        .root()
        .join("pods")
        .join(uid)
        .join("volumes/kubernetes.io~downward-api/info");
    let data = vol.join("..data");
    // The created tree has upstream's modes (setupDataDirs, makePodDataDirs, the writer).
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let pod_dir = k.root().join("pods").join(uid);
    for (path, want) in [
        (k.root(), 0o750),
        (k.root().join("pods"), 0o750),
        (k.root().join("plugins"), 0o750),
        (k.root().join("checkpoints"), 0o700),
        (k.logs(), 0o750),
        (pod_dir.clone(), 0o750),
        (pod_dir.join("volumes"), 0o750),
        (data.clone(), 0o755),
        (vol.join("name"), 0o644),
        (vol.join("meta"), 0o755),
        (vol.join("meta/labels"), 0o644),
    ] {
        assert_eq!(mode(&path), want, "{path:?}");
    }
    let old_ts = std::fs::read_link(&data).unwrap();
    std::fs::remove_dir_all(vol.join(&old_ts)).unwrap();
    std::fs::remove_file(&data).unwrap();
    std::os::unix::fs::symlink(&canary, &data).unwrap();
    std::fs::remove_file(vol.join("name")).unwrap();
    std::os::unix::fs::symlink(canary.join("keep"), vol.join("name")).unwrap();

    let start = Instant::now();
    loop {
        let rebuilt = std::fs::read_link(&data)
            .is_ok_and(|t| t.to_string_lossy().starts_with("..") && !t.is_absolute());
        if rebuilt {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(45),
            "volume not rebuilt:\n{}",
            common::tail(&k.log_text(), 30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_canary(&canary);
    assert_eq!(
        std::fs::read_link(vol.join("name")).unwrap(),
        Path::new("..data/name")
    );
    // The container sees the rebuilt payload through its (read-only) mount.
    let (_, got, _) = common::exec_in(&id, &["cat", "/vol/name"]).await;
    assert_eq!(got, name);
    let (_, got, _) = common::exec_in(&id, &["cat", "/vol/meta/labels"]).await;
    assert_eq!(got, "app=\"secvol\"");
    assert!(
        k.log_text().contains("did not create"),
        "the rebuild is logged:\n{}",
        common::tail(&k.log_text(), 30)
    );
}
