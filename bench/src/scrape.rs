//! Scrape-cost benchmark on the real containerd: start a release `rkubelet` with N busybox
//! static pods (default 110, the default `maxPods`), wait until all run and the stats provider
//! has seen them, then scrape each monitoring endpoint R times in a row on the read-only port and
//! report per endpoint: p50/p99 latency, response size and the kubelet CPU each scrape costs
//! (`utime + stime` of the kubelet process during the scrapes minus its idle rate). Every
//! endpoint is scraped twice: without `Accept-Encoding` (identity) and with
//! `Accept-Encoding: gzip` as Prometheus sends it (the gzip body is checked to be gzip and
//! decompressed once per endpoint; the latency is the transfer, as a scraper sees it). Prints a
//! Markdown table and writes JSON.
//!
//! Usage: scrape --endpoint unix:///tmp/rkubelet-dev/containerd.sock \
//!               --kubelet target/release/rkubelet [--pods 110] [--requests 200]
//!               [--paths /metrics,/stats/summary] [--out FILE]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::{StandaloneKubelet, http_get, http_get_raw, proc_status_kib, summary};
use rkubelet_cri::RemoteRuntime;
use serde_json::{Value, json};

const IMAGE: &str = "docker.io/library/busybox:latest";
const ENDPOINTS: &[&str] = &[
    "/metrics",
    "/metrics/resource",
    "/metrics/cadvisor",
    "/stats/summary",
    // Not a monitoring endpoint but polled like one (the `podstart` harness reads it every
    // 20 ms while pods start).
    "/pods",
];

struct Args {
    endpoint: String,
    kubelet: PathBuf,
    pods: usize,
    requests: usize,
    paths: Vec<String>,
    out: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        endpoint: std::env::var("RKUBELET_CRI_ENDPOINT").unwrap_or_default(),
        kubelet: PathBuf::from("target/release/rkubelet"),
        pods: 110,
        requests: 200,
        paths: ENDPOINTS.iter().map(|p| p.to_string()).collect(),
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--endpoint" => args.endpoint = val()?,
            "--kubelet" => args.kubelet = PathBuf::from(val()?),
            "--pods" => args.pods = val()?.parse().context("--pods: expected a number")?,
            "--requests" => {
                args.requests = val()?.parse().context("--requests: expected a number")?
            }
            "--paths" => args.paths = val()?.split(',').map(str::to_owned).collect(),
            "--out" => args.out = Some(PathBuf::from(val()?)),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.endpoint.is_empty() {
        bail!("--endpoint (or RKUBELET_CRI_ENDPOINT) is required");
    }
    if args.requests == 0 {
        bail!("--requests must be at least 1");
    }
    Ok(args)
}

/// Clock ticks per second for `/proc/<pid>/stat` times.
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU seconds (user + system) the process has used so far.
fn cpu_seconds(pid: u32, ticks: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after `state`.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks)
}

/// The number of pods in `/pods` that are Running with every container running.
async fn running_pods(port: u16) -> usize {
    let Some(body) = http_get(port, "/pods").await else {
        return 0;
    };
    let Ok(v) = serde_json::from_str::<Value>(&body) else {
        return 0;
    };
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["status"]["phase"] == "Running"
                && p["status"]["containerStatuses"]
                    .as_array()
                    .is_some_and(|cs| {
                        !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object())
                    })
        })
        .count()
}

/// How many pods the latest `/stats/summary` snapshot lists.
async fn summary_pods(port: u16) -> usize {
    http_get(port, "/stats/summary")
        .await
        .and_then(|b| serde_json::from_str::<Value>(&b).ok())
        .and_then(|v| v["pods"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// GET `path` (with `Accept-Encoding: gzip` when `gzip`), failing unless it answers 200 in
/// the asked coding; the raw body's size.
async fn get_ok(port: u16, path: &str, gzip: bool) -> Result<usize> {
    let extra: &[(&str, &str)] = if gzip {
        &[("Accept-Encoding", "gzip")]
    } else {
        &[]
    };
    let Some(r) = http_get_raw(port, path, extra).await else {
        bail!("GET {path}: no HTTP response");
    };
    if r.status != 200 {
        bail!(
            "GET {path}: HTTP {}: {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    let coding = r.header("content-encoding");
    if gzip != (coding == Some("gzip")) {
        bail!("GET {path} (gzip asked: {gzip}): Content-Encoding {coding:?}");
    }
    Ok(r.body.len())
}

/// The decompressed size of one gzip scrape of `path` (a check that it is valid gzip).
async fn gunzipped_len(port: u16, path: &str) -> Result<usize> {
    use std::io::Read;
    let r = http_get_raw(port, path, &[("Accept-Encoding", "gzip")])
        .await
        .context("no HTTP response")?;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_end(&mut out)
        .with_context(|| format!("{path}: the gzip body does not decompress"))?;
    Ok(out.len())
}

struct EndpointResult<'a> {
    path: &'a str,
    gzip: bool,
    latencies_ms: Vec<f64>,
    bytes: usize,
    cpu_ms_per_scrape: f64,
}

async fn scrape(
    port: u16,
    pid: u32,
    path: &str,
    gzip: bool,
    n: usize,
    idle_cores: f64,
    ticks: f64,
) -> Result<EndpointResult<'_>> {
    for _ in 0..5 {
        get_ok(port, path, gzip).await?;
    }
    let cpu0 = cpu_seconds(pid, ticks).context("reading the kubelet's CPU time")?;
    let t0 = Instant::now();
    let mut latencies_ms = Vec::with_capacity(n);
    let mut bytes = 0;
    for _ in 0..n {
        let t = Instant::now();
        bytes = get_ok(port, path, gzip).await?;
        latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid, ticks).context("reading the kubelet's CPU time")? - cpu0;
    let cpu_ms_per_scrape = ((cpu - idle_cores * wall) / n as f64 * 1e3).max(0.0);
    Ok(EndpointResult {
        path,
        gzip,
        latencies_ms,
        bytes,
        cpu_ms_per_scrape,
    })
}

fn write_manifests(dir: &std::path::Path, n: usize) -> Result<()> {
    for i in 0..n {
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: scrape-{i}\n  namespace: bench\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
        );
        let tmp = dir.join(format!(".p{i}.tmp"));
        std::fs::write(&tmp, yaml)?;
        std::fs::rename(&tmp, dir.join(format!("p{i}.yaml")))?;
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let ticks = clock_ticks();
    let rt = RemoteRuntime::connect(&args.endpoint, Duration::from_secs(120)).await?;
    let dir = std::env::temp_dir().join(format!("rkubelet-scrape-{}", std::process::id()));
    let kubelet = StandaloneKubelet::start(
        &args.kubelet,
        &args.endpoint,
        &dir,
        "scrape-node",
        &format!("maxPods: {}\n", args.pods.max(110)),
    )
    .await?;
    let (port, pid, manifests) = (kubelet.port, kubelet.child.pid(), kubelet.manifests.clone());

    write_manifests(&manifests, args.pods)?;
    let t = Instant::now();
    loop {
        let running = running_pods(port).await;
        if running >= args.pods {
            break;
        }
        if t.elapsed() > Duration::from_secs(900) {
            bail!("only {running}/{} pods Running after 900 s", args.pods);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "{} pods running after {:.1} s",
        args.pods,
        t.elapsed().as_secs_f64()
    );
    // Let the stats provider see every pod (it refreshes every 10 s), then settle.
    let t = Instant::now();
    while summary_pods(port).await < args.pods {
        if t.elapsed() > Duration::from_secs(60) {
            bail!("/stats/summary does not list all {} pods", args.pods);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;

    let idle_window = Duration::from_secs(20);
    let c0 = cpu_seconds(pid, ticks).context("reading the kubelet's CPU time")?;
    tokio::time::sleep(idle_window).await;
    let idle_cores = (cpu_seconds(pid, ticks).context("reading the kubelet's CPU time")? - c0)
        / idle_window.as_secs_f64();
    let rss_idle = proc_status_kib(pid, "VmRSS");
    println!(
        "kubelet idle with {} pods: {:.2} % of a core, RSS {} KiB\n",
        args.pods,
        idle_cores * 100.0,
        rss_idle.map_or("?".into(), |v| v.to_string())
    );

    println!(
        "| endpoint | encoding | p50 (ms) | p99 (ms) | response (KiB) | kubelet CPU per scrape (ms) |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for path in &args.paths {
        // Only the Prometheus endpoints are gzip-encoded (as upstream's metrics handler).
        let metrics = path.starts_with("/metrics");
        let plain_len = if metrics {
            gunzipped_len(port, path).await?
        } else {
            get_ok(port, path, false).await?
        };
        let encodings: &[bool] = if metrics { &[false, true] } else { &[false] };
        for &gzip in encodings {
            let r = scrape(port, pid, path, gzip, args.requests, idle_cores, ticks).await?;
            let (p50, p99) = summary(r.latencies_ms.clone());
            let coding = if r.gzip { "gzip" } else { "identity" };
            println!(
                "| `{}` | {coding} | {p50:.2} | {p99:.2} | {:.0} | {:.2} |",
                r.path,
                r.bytes as f64 / 1024.0,
                r.cpu_ms_per_scrape
            );
            rows.push(json!({
                "endpoint": r.path, "encoding": coding, "requests": args.requests,
            "latency_ms": {"p50": p50, "p99": p99},
                "response_bytes": r.bytes, "decoded_bytes": plain_len,
                "kubelet_cpu_ms_per_scrape": r.cpu_ms_per_scrape,
            }));
        }
    }
    let hwm = proc_status_kib(pid, "VmHWM");
    println!(
        "\nrkubelet peak RSS (VmHWM): {} KiB",
        hwm.map_or("?".into(), |v| v.to_string())
    );
    let out = json!({
        "endpoint": args.endpoint, "pods": args.pods,
        "idle_kubelet_cores": idle_cores, "rss_idle_kib": rss_idle, "vm_hwm_kib": hwm,
        "results": rows,
    });
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    }

    for i in 0..args.pods {
        std::fs::remove_file(manifests.join(format!("p{i}.yaml")))?;
    }
    common::wait_sandboxes_gone(
        &rt,
        "io.kubernetes.pod.namespace",
        "bench",
        Duration::from_secs(300),
    )
    .await?;
    drop(kubelet);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
