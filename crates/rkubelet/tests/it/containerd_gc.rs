//! Garbage collection and log rotation on the real containerd (`RKUBELET_CRI_ENDPOINT`):
//! the image GC removes an unused image past the threshold and keeps the one a pod uses; the
//! container GC of the binary keeps one dead container per container of a crash-looping pod;
//! the binary's log rotation keeps at most `containerLogMaxFiles` files (older ones gzipped)
//! while a pod writes fast, and the live file stays readable.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Kubelet, container, cri, phase, pod_containers, running, tail};
use kubelet::events::CollectingRecorder;
use kubelet::images::gc::{ImageGc, ImageGcConfig, ImageGcError, ImageGcPolicy, statvfs_usage};
use rkubelet_cri::api::{ContainerState, ImageSpec, ImageStatusRequest, ListImagesRequest};
use rkubelet_cri::{ImageService, RemoteRuntime};

const IMAGE: &str = "docker.io/library/busybox:latest";

fn one_container(name: &str, script: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: Always\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script:?}]\n"
    )
}

/// The containerd socket path of the endpoint (for `ctr`).
fn socket() -> String {
    common::endpoint().trim_start_matches("unix://").to_owned()
}

/// Builds and imports (namespace `k8s.io`) a one-file image distinct from every other image;
/// returns its name.
fn import_extra_image(dir: &Path) -> String {
    let name = format!("docker.io/rkubelet-test/gc-extra:{}", std::process::id());
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    std::fs::write(rootfs.join("marker"), format!("{name}\n")).unwrap();
    let tar = dir.join("extra.tar");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dev/images/mkimage.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["--rootfs", rootfs.to_str().unwrap()])
        .args(["--out", tar.to_str().unwrap()])
        .args(["--name", &name])
        .output()
        .expect("run mkimage.py");
    assert!(out.status.success(), "mkimage.py: {out:?}");
    let out = Command::new("ctr")
        .args(["--address", &socket(), "-n", "k8s.io", "images", "import"])
        .arg(&tar)
        .output()
        .expect("run ctr");
    assert!(out.status.success(), "ctr import: {out:?}");
    name
}

async fn image_id(rt: &RemoteRuntime, name: &str) -> Option<String> {
    rt.image_status(ImageStatusRequest {
        image: Some(ImageSpec {
            image: name.to_owned(),
            ..Default::default()
        }),
        verbose: false,
    })
    .await
    .expect("ImageStatus")
    .image
    .map(|i| i.id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_gc_removes_unused_image_past_threshold_and_keeps_the_one_in_use() {
    let rt = Arc::new(cri().await);
    let work = tempfile::tempdir().unwrap();
    let extra = import_extra_image(work.path());
    let extra_id = image_id(&rt, &extra).await.expect("extra image imported");
    let busybox_id = image_id(&rt, IMAGE).await.expect("busybox present");

    // A pod uses busybox.
    let mut k = Kubelet::new();
    k.write_manifest("user.yaml", &one_container("user", "exec sleep 3600"));
    k.start();
    k.wait_pod("user", Duration::from_secs(60), "Running", |p| {
        phase(p) == "Running" && running(p, "c")
    })
    .await;

    // Every other image already on this (possibly shared) containerd is pinned by name so the
    // test never removes what other tests need; only busybox (in use) and the extra image are
    // candidates.
    let mut pinned = Vec::new();
    for image in rt
        .list_images(ListImagesRequest { filter: None })
        .await
        .unwrap()
        .images
    {
        if image.id != busybox_id && image.id != extra_id {
            pinned.extend(image.repo_tags);
        }
    }
    let events = CollectingRecorder::default();
    let gc = ImageGc::new(
        rt.clone(),
        rt.clone(),
        ImageGcConfig {
            // Any real disk is above 1% used; free down to 0%: everything eligible goes.
            policy: ImageGcPolicy {
                high_threshold_percent: 1,
                low_threshold_percent: 0,
                min_age: Duration::from_secs(2),
                max_age: Duration::ZERO,
            },
            pinned_images: pinned,
        },
        Arc::new(statvfs_usage),
        Arc::new(events.clone()),
    )
    .unwrap();

    // First run: the images were just detected (younger than the minimum age): none goes.
    let err = gc.garbage_collect().await.unwrap_err();
    assert!(
        matches!(err, ImageGcError::NotEnoughFreed { freed: 0, .. }),
        "{err}"
    );
    assert!(image_id(&rt, &extra).await.is_some(), "too young to go");
    assert_eq!(events.with_reason("FreeDiskSpaceFailed").len(), 1);

    tokio::time::sleep(Duration::from_secs(3)).await;
    let err = gc.garbage_collect().await.unwrap_err();
    let ImageGcError::NotEnoughFreed { freed, .. } = err else {
        panic!("{err}");
    };
    assert!(freed > 0, "freed {freed}");
    assert_eq!(
        image_id(&rt, &extra).await,
        None,
        "the unused image is removed"
    );
    assert_eq!(
        image_id(&rt, IMAGE).await.as_deref(),
        Some(busybox_id.as_str()),
        "the image a running pod uses stays"
    );
    assert!(
        events.with_reason("FreeDiskSpaceFailed")[1]
            .message
            .starts_with("Failed to garbage collect required amount of images. Attempted to free ")
    );
    // Nothing else is eligible.
    assert_eq!(gc.delete_unused_images().await.unwrap(), 0);
    let p = k.pod("user").await.expect("pod");
    assert!(running(&p, "c"), "{}", tail(&k.log_text(), 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_gc_keeps_one_dead_container_of_a_crash_looping_pod() {
    let rt = cri().await;
    let mut k = Kubelet::new();
    k.write_manifest(
        "crash.yaml",
        &one_container("crash", "echo attempt; exit 1"),
    );
    k.start();
    let p = k
        .wait_pod("crash", Duration::from_secs(60), "restarted", |p| {
            container(p, "containerStatuses", "c").is_some_and(|c| c["restartCount"] == 1)
        })
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let log_dir = k
        .logs()
        .join(format!("default_crash-{}_{uid}", common::NODE))
        .join("c");

    // Backoff 10s, 20s: three dead instances exist ~30s in; the GC runs every minute and
    // then leaves one (the newest); it never removes a running container.
    let start = Instant::now();
    let mut max_seen = 0;
    let mut collected = false;
    while start.elapsed() < Duration::from_secs(110) {
        let cs = pod_containers(&rt, &uid).await;
        let dead: Vec<_> = cs
            .iter()
            .filter(|c| c.state != ContainerState::ContainerRunning as i32)
            .collect();
        max_seen = max_seen.max(dead.len());
        if max_seen >= 3 && dead.len() <= 1 {
            collected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        collected,
        "max dead containers seen {max_seen}; containers now: {:?}\n{}",
        pod_containers(&rt, &uid).await,
        tail(&k.log_text(), 40)
    );
    let cs = pod_containers(&rt, &uid).await;
    let newest = cs
        .iter()
        .map(|c| c.metadata.as_ref().unwrap().attempt)
        .max()
        .unwrap();
    assert!(newest >= 2, "{cs:?}");
    // Logs of removed instances went with them; the newest dead one's log stays.
    assert!(
        !log_dir.join("0.log").exists(),
        "0.log of a removed container"
    );
    assert!(log_dir.join(format!("{newest}.log")).exists());
    // The status still has the restart count and last state (from the kept container).
    let p = k.pod("crash").await.unwrap();
    let c = container(&p, "containerStatuses", "c").unwrap();
    assert!(c["restartCount"].as_u64().unwrap() >= 2, "{c}");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1, "{c}");
    assert!(
        k.log_text()
            .contains("container garbage collection removed dead content")
    );
}

/// Files of the container's log directory: (live present, rotated uncompressed, compressed).
fn log_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(Result::ok)
                .map(|e| e.file_name().into_string().unwrap())
                .filter(|n| n.starts_with("0.log") && !n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The numbers of `line-N` entries of CRI-format log text; panics on a malformed line.
fn line_numbers(text: &str) -> Vec<u64> {
    text.lines()
        .map(|l| {
            let mut parts = l.splitn(4, ' ');
            let (ts, stream, tag, msg) = (
                parts.next().unwrap(),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            assert!(ts.ends_with('Z') && ts.contains('T'), "timestamp in {l:?}");
            assert_eq!(stream, "stdout", "{l:?}");
            assert!(tag == "F" || tag == "P", "{l:?}");
            msg.strip_prefix("line-")
                .and_then(|m| m.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("unexpected log line {l:?}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_rotation_keeps_max_files_while_a_pod_writes_fast() {
    let mut k = Kubelet::new();
    k.append_config(
        "containerLogMaxSize: 100Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n",
    );
    // ~130-byte lines, 100 lines per 20ms pause: a few hundred KiB per second.
    let script = "i=0; pad=$(printf '%0100d' 0); while true; do i=$((i+1)); echo \"line-$i $pad\"; if [ $((i % 100)) -eq 0 ]; then usleep 20000; fi; done";
    k.write_manifest("chatty.yaml", &one_container("chatty", script));
    k.start();
    let p = k
        .wait_pod("chatty", Duration::from_secs(60), "Running", |p| {
            phase(p) == "Running" && running(p, "c")
        })
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let dir: PathBuf = k
        .logs()
        .join(format!("default_chatty-{}_{uid}", common::NODE))
        .join("c");

    let start = Instant::now();
    let mut max_files = 0;
    let mut saw_gz = false;
    while start.elapsed() < Duration::from_secs(25) {
        let files = log_files(&dir);
        max_files = max_files.max(files.len());
        assert!(
            files.len() <= 3,
            "more than containerLogMaxFiles: {files:?}"
        );
        saw_gz |= files.iter().any(|f| f.ends_with(".gz"));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        saw_gz,
        "no compressed rotated file seen\n{}",
        tail(&k.log_text(), 30)
    );
    assert_eq!(max_files, 3);

    // The files: live, one uncompressed newest rotated, one compressed older one; names as
    // upstream.
    let files = log_files(&dir);
    let rotated: Vec<&String> = files.iter().filter(|f| *f != "0.log").collect();
    for f in &rotated {
        let ts = f.trim_start_matches("0.log.").trim_end_matches(".gz");
        assert!(
            ts.len() == 15
                && ts.as_bytes()[8] == b'-'
                && ts.replace('-', "").bytes().all(|b| b.is_ascii_digit()),
            "{f}"
        );
    }
    let gz: Vec<&&String> = rotated.iter().filter(|f| f.ends_with(".gz")).collect();
    let plain: Vec<&&String> = rotated.iter().filter(|f| !f.ends_with(".gz")).collect();
    assert!(plain.len() <= 1 && gz.len() <= 2, "{files:?}");

    // Compressed files decompress to CRI log lines, older than the live file's.
    let mut older_max = 0;
    for f in &gz {
        let out = Command::new("gzip")
            .arg("-dc")
            .arg(dir.join(f.as_str()))
            .output()
            .unwrap();
        assert!(out.status.success(), "gzip -dc {f}");
        let nums = line_numbers(&String::from_utf8_lossy(&out.stdout));
        assert!(!nums.is_empty(), "{f} is empty");
        older_max = older_max.max(*nums.iter().max().unwrap());
    }

    // `kubectl logs` reads the live file: it keeps growing with the newest, well-formed lines.
    // Rotation is driven by growth, so the live file may have just been reopened empty when
    // read: read it again until it holds lines (the writer fills it within milliseconds).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut nums = Vec::new();
    for _ in 0..40 {
        let live = std::fs::read_to_string(dir.join("0.log")).expect("live log file");
        nums = line_numbers(&live);
        if !nums.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!nums.is_empty(), "live log stayed empty for 2 s");
    assert!(
        nums.windows(2).all(|w| w[1] == w[0] + 1),
        "live log lines are consecutive"
    );
    assert!(
        nums[0] > older_max,
        "the live file holds newer lines than the compressed ones"
    );
    assert!(
        k.log_text()
            .contains("initializing container log rotate workers"),
        "{}",
        tail(&k.log_text(), 20)
    );
}
