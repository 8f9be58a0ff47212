//! Pod start benchmark on the real containerd: for N = 1, 10, 30 busybox pods, time from
//! "manifests written" to "every pod Running in rkubelet's /pods" and compare it with a raw CRI
//! client doing RunPodSandbox → CreateContainer → StartContainer for the same pods concurrently.
//! Also reports rkubelet's peak RSS (VmHWM). Prints a Markdown table and writes JSON.
//!
//! Usage: podstart --endpoint unix:///tmp/rkubelet-dev/containerd.sock \
//!                 --kubelet target/release/rkubelet [--counts 1,10,30] [--rounds 5] [--out FILE]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::{StandaloneKubelet, http_get, parse_counts, proc_status_kib, summary};
use rkubelet_cri::api::{
    ContainerConfig, ContainerMetadata, CreateContainerRequest, ImageSpec, LinuxPodSandboxConfig,
    PodSandboxConfig, PodSandboxMetadata, RunPodSandboxRequest, StartContainerRequest,
};
use rkubelet_cri::{RemoteRuntime, RuntimeService};
use serde_json::{Value, json};

const IMAGE: &str = "docker.io/library/busybox:latest";
const BENCH_LABEL: &str = "rkubelet.bench";

struct Args {
    endpoint: String,
    kubelet: PathBuf,
    counts: Vec<usize>,
    rounds: usize,
    out: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        endpoint: std::env::var("RKUBELET_CRI_ENDPOINT").unwrap_or_default(),
        kubelet: PathBuf::from("target/release/rkubelet"),
        counts: vec![1, 10, 30],
        rounds: 5,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--endpoint" => args.endpoint = val()?,
            "--kubelet" => args.kubelet = PathBuf::from(val()?),
            "--counts" => args.counts = parse_counts(&val()?)?,
            "--rounds" => args.rounds = val()?.parse().context("--rounds: expected a number")?,
            "--out" => args.out = Some(PathBuf::from(val()?)),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.endpoint.is_empty() {
        bail!("--endpoint (or RKUBELET_CRI_ENDPOINT) is required");
    }
    Ok(args)
}

// ---------- raw CRI ----------

async fn raw_pod(rt: &RemoteRuntime, logs: &Path, round: usize, i: usize) -> Result<f64> {
    let start = Instant::now();
    let uid = format!("bench-raw-{round}-{i}");
    let log_dir = logs.join(&uid);
    std::fs::create_dir_all(log_dir.join("c"))?;
    let sandbox_config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: uid.clone(),
            uid: uid.clone(),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: uid.clone(),
        log_directory: log_dir.to_string_lossy().into_owned(),
        labels: HashMap::from([(BENCH_LABEL.to_owned(), "raw".to_owned())]),
        linux: Some(LinuxPodSandboxConfig::default()),
        ..Default::default()
    };
    let sb = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .pod_sandbox_id;
    let c = rt
        .create_container(CreateContainerRequest {
            pod_sandbox_id: sb,
            config: Some(ContainerConfig {
                metadata: Some(ContainerMetadata {
                    name: "c".into(),
                    attempt: 0,
                }),
                image: Some(ImageSpec {
                    image: IMAGE.into(),
                    ..Default::default()
                }),
                command: vec!["sleep".into(), "3600".into()],
                log_path: "c/0.log".into(),
                ..Default::default()
            }),
            sandbox_config: Some(sandbox_config),
        })
        .await?
        .container_id;
    rt.start_container(StartContainerRequest { container_id: c })
        .await?;
    Ok(start.elapsed().as_secs_f64())
}

/// Returns (per-pod seconds, all-started seconds).
async fn raw_round(
    rt: &RemoteRuntime,
    logs: &Path,
    n: usize,
    round: usize,
) -> Result<(Vec<f64>, f64)> {
    let start = Instant::now();
    let results = futures::future::join_all((0..n).map(|i| raw_pod(rt, logs, round, i))).await;
    let all = start.elapsed().as_secs_f64();
    let per = results.into_iter().collect::<Result<Vec<_>>>()?;
    common::remove_sandboxes(rt, BENCH_LABEL, "raw").await?;
    Ok((per, all))
}

// ---------- rkubelet ----------

/// name → seconds since `t0` when first seen Running with all containers running.
async fn poll_running(
    port: u16,
    names: &[String],
    t0: Instant,
    timeout: Duration,
) -> Result<HashMap<String, f64>> {
    let mut seen = HashMap::new();
    while seen.len() < names.len() {
        if t0.elapsed() > timeout {
            bail!(
                "only {}/{} pods Running after {timeout:?}",
                seen.len(),
                names.len()
            );
        }
        if let Some(body) = http_get(port, "/pods").await
            && let Ok(v) = serde_json::from_str::<Value>(&body)
        {
            for p in v["items"].as_array().into_iter().flatten() {
                let name = p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let running = p["status"]["phase"] == "Running"
                    && p["status"]["containerStatuses"]
                        .as_array()
                        .is_some_and(|cs| {
                            !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object())
                        });
                if running && names.contains(&name) {
                    seen.entry(name)
                        .or_insert_with(|| t0.elapsed().as_secs_f64());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(seen)
}

async fn wait_empty(port: u16, timeout: Duration) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if let Some(body) = http_get(port, "/pods").await
            && serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["items"].as_array().map(|a| a.is_empty()))
                == Some(true)
        {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            bail!("pods not gone after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn kubelet_round(
    k: &StandaloneKubelet,
    rt: &RemoteRuntime,
    n: usize,
    round: usize,
) -> Result<(Vec<f64>, f64)> {
    let names: Vec<String> = (0..n)
        .map(|i| format!("bench-{round}-{i}-bench-node"))
        .collect();
    let t0 = Instant::now();
    for i in 0..n {
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bench-{round}-{i}\n  namespace: bench\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
        );
        let tmp = k.manifests.join(format!(".p{i}.tmp"));
        std::fs::write(&tmp, yaml)?;
        std::fs::rename(&tmp, k.manifests.join(format!("p{i}.yaml")))?;
    }
    let seen = poll_running(k.port, &names, t0, Duration::from_secs(120)).await?;
    let all = seen.values().cloned().fold(0.0, f64::max);
    for i in 0..n {
        std::fs::remove_file(k.manifests.join(format!("p{i}.yaml")))?;
    }
    wait_empty(k.port, Duration::from_secs(60)).await?;
    // Wait for the runtime to be clean too, so rounds do not overlap.
    common::wait_sandboxes_gone(
        rt,
        "io.kubernetes.pod.namespace",
        "bench",
        Duration::from_secs(60),
    )
    .await?;
    Ok((seen.into_values().collect(), all))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let rt = RemoteRuntime::connect(&args.endpoint, Duration::from_secs(120)).await?;
    let dir = std::env::temp_dir().join(format!("rkubelet-bench-{}", std::process::id()));
    let raw_logs = dir.join("raw-logs");
    let k = StandaloneKubelet::start(&args.kubelet, &args.endpoint, &dir, "bench-node", "").await?;

    let mut rows = Vec::new();
    println!(
        "| pods | raw CRI all-running p50 / p99 (s) | rkubelet all-running p50 / p99 (s) | ratio p50 | raw per-pod p50 | rkubelet per-pod p50 |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for &n in &args.counts {
        let (mut raw_all, mut kl_all, mut raw_per, mut kl_per) = (vec![], vec![], vec![], vec![]);
        for round in 0..args.rounds {
            let (per, all) = raw_round(&rt, &raw_logs, n, round).await?;
            raw_per.extend(per);
            raw_all.push(all);
            let (per, all) = kubelet_round(&k, &rt, n, round).await?;
            kl_per.extend(per);
            kl_all.push(all);
        }
        let (ra50, ra99) = summary(raw_all.clone());
        let (ka50, ka99) = summary(kl_all.clone());
        let (rp50, _) = summary(raw_per);
        let (kp50, _) = summary(kl_per);
        println!(
            "| {n} | {ra50:.3} / {ra99:.3} | {ka50:.3} / {ka99:.3} | {:.2} | {rp50:.3} | {kp50:.3} |",
            ka50 / ra50
        );
        rows.push(json!({
            "pods": n, "rounds": args.rounds,
            "raw_all_running_s": {"p50": ra50, "p99": ra99, "samples": raw_all},
            "rkubelet_all_running_s": {"p50": ka50, "p99": ka99, "samples": kl_all},
            "ratio_p50": ka50 / ra50,
            "raw_per_pod_p50_s": rp50, "rkubelet_per_pod_p50_s": kp50,
        }));
    }
    let hwm = proc_status_kib(k.child.pid(), "VmHWM");
    println!(
        "\nrkubelet peak RSS (VmHWM): {} KiB",
        hwm.map_or("?".into(), |v| v.to_string())
    );
    let out = json!({"endpoint": args.endpoint, "results": rows, "rkubelet_vm_hwm_kib": hwm});
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    }
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
