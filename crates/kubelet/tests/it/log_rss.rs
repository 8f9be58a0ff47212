//! A large container log read through the `/containerLogs` handler keeps the kubelet's memory
//! flat: a 256 MiB CRI log is streamed to a slow consumer while the process's VmRSS may grow by
//! at most 16 MiB. Its own test binary, so no other test's allocations share the process.
//!
//! The manual variant reads 1 GiB: `RKUBELET_LOG_RSS_MIB=1024 cargo nextest run -p
//! rkubelet-kubelet --test it log_rss:: --no-capture` (measured on the 2-core dev machine, dev profile: 1 GiB of
//! log, 725 MiB of text, in 3.9 s; VmRSS 6 MiB → peak 7 MiB; 256 MiB: 0.9 s, 6 → 8 MiB).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet::server::{Endpoints, ServerState, routes};
use kubelet::status::manager::StatusManager;
use rkubelet_cri::RuntimeService;
use rkubelet_cri::api;
use rkubelet_cri::fake::FakeRuntime;
use tokio::sync::watch;

const IMAGE: &str = "docker.io/library/busybox:latest";
const MIB: u64 = 1 << 20;

/// VmRSS of this process, in bytes.
fn vm_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

/// Writes a CRI log of at least `size` bytes (lines of ~150 bytes, every 10th one split into a
/// partial and a full record); returns the number of output lines.
fn write_log(path: &Path, size: u64) -> u64 {
    let mut block = Vec::new();
    let mut lines = 0;
    for i in 0..10_000u32 {
        if i % 10 == 0 {
            writeln!(
                block,
                "2024-01-01T00:00:00.{i:09}Z stdout P partial-{i:05} {:40}",
                ""
            )
            .unwrap();
            writeln!(block, "2024-01-01T00:00:00.{i:09}Z stdout F rest").unwrap();
        } else {
            writeln!(
                block,
                "2024-01-01T00:00:00.{i:09}Z stderr F line-{i:05} {:100}",
                ""
            )
            .unwrap();
        }
        lines += 1;
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut written = 0;
    let mut total_lines = 0;
    while written < size {
        f.write_all(&block).unwrap();
        written += block.len() as u64;
        total_lines += lines;
    }
    f.flush().unwrap();
    total_lines
}

/// A kubelet server state with one running pod `default/big` whose container `app` logs to
/// `log_dir/app/0.log` (through the fake runtime).
async fn server_state(log_dir: &Path) -> ServerState {
    let rt = FakeRuntime::with_images(&[IMAGE]);
    let sandbox = rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: "big".into(),
                    uid: "u1".into(),
                    namespace: "default".into(),
                    attempt: 0,
                }),
                log_directory: log_dir.display().to_string(),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let id = rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: sandbox,
            config: Some(api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "app".into(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: IMAGE.into(),
                    ..Default::default()
                }),
                log_path: "app/0.log".into(),
                labels: HashMap::from([("io.kubernetes.container.name".into(), "app".into())]),
                ..Default::default()
            }),
            sandbox_config: Some(api::PodSandboxConfig {
                log_directory: log_dir.display().to_string(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .container_id;
    rt.start_container(api::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    let pod = Pod {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some("big".into()),
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let status = StatusManager::new();
    status.set_pod_status(
        &pod,
        PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                container_id: Some(format!("containerd://{id}")),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        },
    );
    let (_tx, rx) = watch::channel(kubelet::types::pods_snapshot([pod]));
    let mut state = ServerState::basic(rx, status, Vec::new());
    state.runtime = Some(Arc::new(rt));
    state
}

/// Reads a log of `size` bytes through the handler with a slow consumer; returns the RSS
/// growth seen at its highest.
async fn rss_growth_reading(size: u64) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("app")).unwrap();
    let lines = write_log(&dir.path().join("app/0.log"), size);
    let state = server_state(dir.path()).await;
    let req = Request::builder()
        .method(Method::GET)
        .uri("/containerLogs/default/big/app")
        .body(())
        .unwrap();
    let baseline = vm_rss();
    let started = Instant::now();
    let resp = routes::route(&state, Endpoints::Secure, &req).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let (mut peak, mut frames, mut bytes, mut newlines) = (baseline, 0u64, 0u64, 0u64);
    while let Some(frame) = body.frame().await {
        let data = frame.unwrap().into_data().unwrap();
        bytes += data.len() as u64;
        newlines += memchr_count(&data);
        frames += 1;
        if frames % 16 == 0 {
            peak = peak.max(vm_rss());
            // A slow consumer: the reader must wait for it, not buffer ahead.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    peak = peak.max(vm_rss());
    assert_eq!(newlines, lines, "every line arrived");
    eprintln!(
        "read {} MiB of log ({} MiB of text) in {:?}; VmRSS {} MiB -> peak {} MiB",
        size / MIB,
        bytes / MIB,
        started.elapsed(),
        baseline / MIB,
        peak / MIB
    );
    peak - baseline
}

fn memchr_count(data: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', data).count() as u64
}

/// 256 MiB by default; `RKUBELET_LOG_RSS_MIB=1024` for the manual 1 GiB run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_large_log_keeps_rss_flat() {
    let mib: u64 = match std::env::var("RKUBELET_LOG_RSS_MIB") {
        Ok(v) => v
            .parse()
            .expect("RKUBELET_LOG_RSS_MIB must be a number of MiB"),
        Err(_) => 256,
    };
    let growth = rss_growth_reading(mib * MIB).await;
    assert!(
        growth <= 16 * MIB,
        "VmRSS grew by {} KiB reading {mib} MiB",
        growth / 1024
    );
}
