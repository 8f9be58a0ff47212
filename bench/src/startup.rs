//! Start-up latency benchmark: how long a standalone `rkubelet` on an empty node (no static
//! pods, empty manifest directory, the container runtime reachable) takes from `exec` to
//! `/healthz` answering `ok` on its healthz port. Each run spawns the binary, polls
//! `GET /healthz` every millisecond, records the time, then stops the kubelet with SIGTERM and
//! waits for it to exit. The first run uses a fresh root directory (nothing cached); the others
//! reuse it, as a restarted kubelet does. Prints p50/p99 over the runs and writes JSON.
//!
//! Usage: startup --endpoint unix:///tmp/rkubelet-dist/containerd.sock \
//!                --kubelet target/dist/rkubelet [--runs 30] [--out FILE]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::{ChildGuard, http_get_status, summary};
use serde_json::json;

struct Args {
    endpoint: String,
    kubelet: PathBuf,
    runs: usize,
    out: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        endpoint: std::env::var("RKUBELET_CRI_ENDPOINT").unwrap_or_default(),
        kubelet: PathBuf::from("target/dist/rkubelet"),
        runs: 30,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--endpoint" => args.endpoint = val()?,
            "--kubelet" => args.kubelet = PathBuf::from(val()?),
            "--runs" => args.runs = val()?.parse().context("--runs: expected a number")?,
            "--out" => args.out = Some(PathBuf::from(val()?)),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.endpoint.is_empty() {
        bail!("--endpoint (or RKUBELET_CRI_ENDPOINT) is required");
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    Ok(args)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// One start: spawn, poll `/healthz` until `ok` (20 s limit), SIGTERM, wait. Returns the
/// milliseconds from spawn to the first `ok`.
async fn one_start(args: &Args, dir: &Path, run: usize) -> Result<f64> {
    let port = free_port()?;
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests)?;
    let config = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nenableServer: false\nreadOnlyPort: 0\nhealthzPort: {port}\nstaticPodPath: {}\npodLogsDir: {}\n",
        manifests.display(),
        dir.join("logs").display()
    );
    std::fs::write(dir.join("config.yaml"), config)?;
    let log = std::fs::File::create(dir.join(format!("kubelet-{run}.log")))?;
    let t0 = Instant::now();
    let child = Command::new(&args.kubelet)
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .arg("--container-runtime-endpoint")
        .arg(&args.endpoint)
        .arg("--root-dir")
        .arg(dir.join("root"))
        .arg("--hostname-override")
        .arg("startup-node")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", args.kubelet.display()))?;
    let mut guard = ChildGuard(child);
    let elapsed = loop {
        if let Some((200, body)) = http_get_status(port, "/healthz").await
            && body.trim() == "ok"
        {
            break t0.elapsed();
        }
        if let Some(status) = guard.0.try_wait()? {
            bail!(
                "rkubelet exited with {status} before /healthz was ok; see {}",
                dir.join(format!("kubelet-{run}.log")).display()
            );
        }
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("/healthz not ok after 20 s (run {run})");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    // SIGTERM and wait for the exit, so the next run's start does not overlap this shutdown.
    drop(guard);
    Ok(elapsed.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let dir = std::env::temp_dir().join(format!("rkubelet-startup-{}", std::process::id()));
    let mut samples = Vec::with_capacity(args.runs);
    for run in 0..args.runs {
        let ms = one_start(&args, &dir, run).await?;
        if run == 0 {
            println!("run 0 (fresh root dir): {ms:.1} ms");
        }
        samples.push(ms);
    }
    let first = samples[0];
    let (p50, p99) = summary(samples.clone());
    let warm: Vec<f64> = samples.iter().skip(1).copied().collect();
    let (warm_p50, warm_p99) = if warm.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        summary(warm.clone())
    };
    println!("| runs | first start (ms) | p50 (ms) | p99 (ms) | restarts p50 / p99 (ms) |");
    println!("|---:|---:|---:|---:|---:|");
    println!(
        "| {} | {first:.1} | {p50:.1} | {p99:.1} | {warm_p50:.1} / {warm_p99:.1} |",
        args.runs
    );
    if let Some(path) = &args.out {
        let out = json!({
            "endpoint": args.endpoint, "kubelet": args.kubelet, "runs": args.runs,
            "first_start_ms": first,
            "start_to_healthz_ms": {"p50": p50, "p99": p99},
            "restart_to_healthz_ms": {"p50": warm_p50, "p99": warm_p99},
            "samples_ms": samples,
        });
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
