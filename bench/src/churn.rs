//! Pod churn benchmark: rounds of N-pod create/delete, the kubelet's memory after each round.
//! Receives the mode and sizes on the command line; emits a Markdown table (one row per round)
//! and optional JSON.
//!
//! - `churn real`: a release `rkubelet` with static pods on a (private) containerd; after each
//!   round (all N Running, manifests removed, runtime empty, a settle pause) the kubelet's
//!   `VmRSS`, `VmHWM` and thread count.
//! - `churn fake`: the kubelet agent in this process on the in-memory `FakeRuntime`; after each
//!   round this process's `VmRSS` and, built with `--features dhat-heap`, the live heap (bytes
//!   and blocks) from the `dhat` allocator — which tells state kept for deleted pods (live heap
//!   grows) from allocator retention (RSS grows, live heap flat). With the feature a
//!   `dhat-heap.json` is written after the last round, before the agent stops (open it in dhat's
//!   viewer, or sort its `eb` fields).
//! - `churn steady`: N plain pods on the real containerd; after a settle pause the kubelet's
//!   CPU (utime + stime, in cores) over a window and its RSS.
//!
//! Usage:
//!   churn real --endpoint unix:///tmp/rkubelet-churn/containerd.sock \
//!              --kubelet target/release/rkubelet [--pods 100] [--rounds 10] [--out FILE]
//!   churn fake [--pods 100] [--rounds 10] [--settle-secs 5] [--profile-running] [--out FILE]
//!   churn steady --endpoint … --kubelet … [--pods 110] [--settle-secs 120] [--window-secs 60]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::{StandaloneKubelet, http_get, proc_status_kib};
use rkubelet_cri::RemoteRuntime;
use serde_json::{Value, json};

#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const IMAGE: &str = "docker.io/library/busybox:latest";
const NAMESPACE: &str = "churn";

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Real,
    Fake,
    Steady,
}

struct Args {
    mode: Mode,
    endpoint: String,
    kubelet: PathBuf,
    pods: usize,
    rounds: usize,
    settle: Duration,
    window: Duration,
    /// `fake` with dhat: write the profile while the last round's pods all run.
    profile_running: bool,
    out: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut it = std::env::args().skip(1);
    let mode = match it.next().as_deref() {
        Some("real") => Mode::Real,
        Some("fake") => Mode::Fake,
        Some("steady") => Mode::Steady,
        other => bail!("expected the mode `real`, `fake` or `steady` first, got {other:?}"),
    };
    let mut args = Args {
        mode,
        endpoint: std::env::var("RKUBELET_CRI_ENDPOINT").unwrap_or_default(),
        kubelet: PathBuf::from("target/release/rkubelet"),
        pods: if mode == Mode::Steady { 110 } else { 100 },
        rounds: 10,
        settle: Duration::from_secs(if mode == Mode::Steady { 120 } else { 5 }),
        window: Duration::from_secs(60),
        profile_running: false,
        out: None,
    };
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--endpoint" => args.endpoint = val()?,
            "--kubelet" => args.kubelet = PathBuf::from(val()?),
            "--pods" => args.pods = val()?.parse().context("--pods: expected a number")?,
            "--rounds" => args.rounds = val()?.parse().context("--rounds: expected a number")?,
            "--settle-secs" => {
                args.settle = Duration::from_secs(
                    val()?
                        .parse()
                        .context("--settle-secs: expected a number of seconds")?,
                )
            }
            "--window-secs" => {
                args.window = Duration::from_secs(
                    val()?
                        .parse()
                        .context("--window-secs: expected a number of seconds")?,
                )
            }
            "--profile-running" => args.profile_running = true,
            "--out" => args.out = Some(PathBuf::from(val()?)),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.mode != Mode::Fake && args.endpoint.is_empty() {
        bail!("--endpoint (or RKUBELET_CRI_ENDPOINT) is required for a real containerd");
    }
    Ok(args)
}

/// A churn pod: a busybox `sleep` with an emptyDir volume and (with `probe`) an exec
/// readiness probe every 10 s, so pod churn also exercises the volume and probe managers.
fn manifest(round: usize, i: usize, probe: bool) -> String {
    let probe = if probe {
        "    readinessProbe:\n      exec:\n        command: [\"true\"]\n      periodSeconds: 10\n"
    } else {
        ""
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: churn-{round}-{i}\n  namespace: {NAMESPACE}\n  labels:\n    app: churn\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n{probe}    volumeMounts:\n    - name: data\n      mountPath: /data\n  volumes:\n  - name: data\n    emptyDir: {{}}\n"
    )
}

/// One row of the result: memory after a round.
struct Sample {
    round: usize,
    secs: f64,
    rss_kib: Option<u64>,
    hwm_kib: Option<u64>,
    /// VmRSS split: anonymous (heap, stacks) and file-backed (the binary's code pages).
    anon_kib: Option<u64>,
    file_kib: Option<u64>,
    threads: Option<u64>,
    heap: Option<(u64, u64)>,
    /// VmRSS and live heap while the round's N pods were all running.
    running_rss_kib: Option<u64>,
    running_heap: Option<(u64, u64)>,
}

impl Sample {
    fn json(&self) -> Value {
        json!({
            "round": self.round, "round_s": self.secs, "vm_rss_kib": self.rss_kib,
            "vm_hwm_kib": self.hwm_kib, "rss_anon_kib": self.anon_kib,
            "rss_file_kib": self.file_kib, "threads": self.threads,
            "live_heap_bytes": self.heap.map(|h| h.0), "live_heap_blocks": self.heap.map(|h| h.1),
            "running_vm_rss_kib": self.running_rss_kib,
            "running_live_heap_bytes": self.running_heap.map(|h| h.0),
        })
    }
}

fn proc_sample(pid: u32, round: usize, secs: f64, heap: Option<(u64, u64)>) -> Sample {
    Sample {
        round,
        secs,
        rss_kib: proc_status_kib(pid, "VmRSS"),
        hwm_kib: proc_status_kib(pid, "VmHWM"),
        anon_kib: proc_status_kib(pid, "RssAnon"),
        file_kib: proc_status_kib(pid, "RssFile"),
        threads: proc_status_kib(pid, "Threads"),
        heap,
        running_rss_kib: None,
        running_heap: None,
    }
}

// ---------- real: a release rkubelet on a private containerd ----------

/// Number of pods in `/pods` that are Running with every container running, and the total.
async fn pod_counts(port: u16) -> Option<(usize, usize)> {
    let body = http_get(port, "/pods").await?;
    let v: Value = serde_json::from_str(&body).ok()?;
    let items = v["items"].as_array()?;
    let running = items
        .iter()
        .filter(|p| {
            p["status"]["phase"] == "Running"
                && p["status"]["containerStatuses"]
                    .as_array()
                    .is_some_and(|cs| {
                        !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object())
                    })
        })
        .count();
    Some((running, items.len()))
}

async fn wait_until(
    what: &str,
    timeout: Duration,
    mut done: impl AsyncFnMut() -> bool,
) -> Result<()> {
    let t0 = Instant::now();
    while !done().await {
        if t0.elapsed() > timeout {
            bail!("{what}: not reached after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Runs one round; returns its duration and the kubelet's VmRSS while all pods ran.
async fn real_round(
    k: &StandaloneKubelet,
    rt: &RemoteRuntime,
    n: usize,
    round: usize,
) -> Result<(f64, Option<u64>)> {
    let t0 = Instant::now();
    for i in 0..n {
        let tmp = k.manifests.join(format!(".p{i}.tmp"));
        std::fs::write(&tmp, manifest(round, i, true))?;
        std::fs::rename(&tmp, k.manifests.join(format!("p{i}.yaml")))?;
    }
    wait_until("all pods running", Duration::from_secs(300), async || {
        pod_counts(k.port).await.is_some_and(|(r, _)| r == n)
    })
    .await?;
    let running_rss = proc_status_kib(k.child.pid(), "VmRSS");
    for i in 0..n {
        std::fs::remove_file(k.manifests.join(format!("p{i}.yaml")))?;
    }
    wait_until("pods gone", Duration::from_secs(300), async || {
        pod_counts(k.port)
            .await
            .is_some_and(|(_, total)| total == 0)
    })
    .await?;
    if !common::wait_sandboxes_gone(
        rt,
        "io.kubernetes.pod.namespace",
        NAMESPACE,
        Duration::from_secs(120),
    )
    .await?
    {
        bail!("round {round}: sandboxes left in the runtime");
    }
    Ok((t0.elapsed().as_secs_f64(), running_rss))
}

async fn run_real(args: &Args) -> Result<Vec<Sample>> {
    let rt = RemoteRuntime::connect(&args.endpoint, Duration::from_secs(120)).await?;
    let dir = std::env::temp_dir().join(format!("rkubelet-churn-{}", std::process::id()));
    let k = StandaloneKubelet::start(&args.kubelet, &args.endpoint, &dir, "churn-node", "").await?;
    let pid = k.child.pid();
    let mut out = vec![proc_sample(pid, 0, 0.0, None)];
    print_row(&out[0]);
    for round in 1..=args.rounds {
        let (secs, running) = real_round(&k, &rt, args.pods, round).await?;
        tokio::time::sleep(args.settle).await;
        let mut s = proc_sample(pid, round, secs, None);
        s.running_rss_kib = running;
        print_row(&s);
        out.push(s);
    }
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}

// ---------- steady: CPU and RSS with N pods running ----------

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU seconds (utime + stime) the process has used so far.
fn cpu_seconds(pid: u32, ticks: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start after the last ')';
    // utime and stime are the 12th and 13th of them.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks)
}

/// Starts `--pods` plain pods (no probes), waits `--settle-secs`, then measures the kubelet's
/// CPU over `--window-secs` and its RSS at the end.
async fn run_steady(args: &Args) -> Result<Value> {
    let rt = RemoteRuntime::connect(&args.endpoint, Duration::from_secs(120)).await?;
    let dir = std::env::temp_dir().join(format!("rkubelet-steady-{}", std::process::id()));
    let k = StandaloneKubelet::start(&args.kubelet, &args.endpoint, &dir, "churn-node", "").await?;
    let pid = k.child.pid();
    let n = args.pods;
    for i in 0..n {
        let tmp = k.manifests.join(format!(".p{i}.tmp"));
        std::fs::write(&tmp, manifest(0, i, false))?;
        std::fs::rename(&tmp, k.manifests.join(format!("p{i}.yaml")))?;
    }
    wait_until("all pods running", Duration::from_secs(300), async || {
        pod_counts(k.port).await.is_some_and(|(r, _)| r == n)
    })
    .await?;
    tokio::time::sleep(args.settle).await;
    let ticks = clock_ticks();
    let c0 = cpu_seconds(pid, ticks).context("reading the kubelet's CPU time")?;
    let t0 = Instant::now();
    tokio::time::sleep(args.window).await;
    let c1 = cpu_seconds(pid, ticks).context("reading the kubelet's CPU time")?;
    let cores = (c1 - c0) / t0.elapsed().as_secs_f64();
    let rss = proc_status_kib(pid, "VmRSS");
    let hwm = proc_status_kib(pid, "VmHWM");
    let (anon, file) = (
        proc_status_kib(pid, "RssAnon"),
        proc_status_kib(pid, "RssFile"),
    );
    let threads = proc_status_kib(pid, "Threads");
    println!(
        "| pods | settle (s) | window (s) | CPU (cores) | VmRSS (KiB) | anon / file (KiB) | VmHWM (KiB) | threads |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {n} | {} | {} | {cores:.4} | {} | {} / {} | {} | {} |",
        args.settle.as_secs(),
        args.window.as_secs(),
        fmt_opt(rss),
        fmt_opt(anon),
        fmt_opt(file),
        fmt_opt(hwm),
        fmt_opt(threads)
    );
    for i in 0..n {
        std::fs::remove_file(k.manifests.join(format!("p{i}.yaml")))?;
    }
    wait_until("pods gone", Duration::from_secs(300), async || {
        pod_counts(k.port)
            .await
            .is_some_and(|(_, total)| total == 0)
    })
    .await?;
    common::wait_sandboxes_gone(
        &rt,
        "io.kubernetes.pod.namespace",
        NAMESPACE,
        Duration::from_secs(120),
    )
    .await?;
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(json!({
        "mode": "steady", "pods": n, "settle_s": args.settle.as_secs(),
        "window_s": args.window.as_secs(), "cpu_cores": cores, "vm_rss_kib": rss, "rss_anon_kib": anon, "rss_file_kib": file,
        "vm_hwm_kib": hwm, "threads": threads,
    }))
}

// ---------- fake: the agent in this process on FakeRuntime ----------

/// Live heap (bytes, blocks) while the dhat profiler in `profile` runs.
fn live_heap(profile: &Option<Box<dyn std::any::Any>>) -> Option<(u64, u64)> {
    profile.as_ref()?;
    #[cfg(feature = "dhat-heap")]
    {
        let s = dhat::HeapStats::get();
        Some((s.curr_bytes as u64, s.curr_blocks as u64))
    }
    #[cfg(not(feature = "dhat-heap"))]
    None
}

/// `profile` (the dhat profiler, if any) is dropped after the last round, before the agent
/// stops, so `dhat-heap.json`'s end state is the kubelet after churn.
async fn run_fake(args: &Args, mut profile: Option<Box<dyn std::any::Any>>) -> Result<Vec<Sample>> {
    use k8s_openapi::api::core::v1::Pod;
    use kubelet::agent::{Agent, AgentConfig, AgentDeps};
    use kubelet::events::LoggingRecorder;
    use kubelet::sources::{ManifestOrigin, static_pods_from_manifest};
    use kubelet::types::{PodOp, PodSource, PodUpdate};
    use rkubelet_cri::fake::FakeRuntime;

    let dir = tempfile::tempdir()?;
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let cfg = AgentConfig::for_tests(dir.path(), "churn-node");
    let cancel = tokio_util::sync::CancellationToken::new();
    let agent = Agent::start(
        cfg,
        AgentDeps {
            runtime: Arc::new(fake.clone()),
            images: Arc::new(fake.clone()),
            events: Arc::new(LoggingRecorder),
            api: None,
        },
        cancel.clone(),
    )
    .await
    .context("starting the agent")?;
    let pid = std::process::id();
    let set = async |pods: Vec<Pod>| {
        agent
            .source_tx
            .send(PodUpdate::new(PodOp::Set, PodSource::File, pods))
            .await
            .context("the agent stopped")
    };
    let mut out = vec![proc_sample(pid, 0, 0.0, live_heap(&profile))];
    print_row(&out[0]);
    for round in 1..=args.rounds {
        let t0 = Instant::now();
        let mut pods = Vec::with_capacity(args.pods);
        for i in 0..args.pods {
            let path = format!("/etc/kubernetes/manifests/p{i}.yaml");
            let mut p = static_pods_from_manifest(
                manifest(round, i, true).as_bytes(),
                "churn-node",
                &ManifestOrigin::File(Path::new(&path)),
                false,
            )
            .map_err(|e| anyhow::anyhow!("manifest: {e}"))?;
            pods.append(&mut p);
        }
        let uids: Vec<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        set(pods).await?;
        wait_until("all pods running", Duration::from_secs(120), async || {
            uids.iter().all(|u| {
                agent
                    .status
                    .get_pod_status(u)
                    .is_some_and(|s| s.phase.as_deref() == Some("Running"))
            })
        })
        .await?;
        let running_rss = proc_status_kib(pid, "VmRSS");
        let running_heap = live_heap(&profile);
        if args.profile_running && round == args.rounds {
            // The profile's end state: the kubelet with the round's N pods running.
            drop(profile.take());
        }
        set(Vec::new()).await?;
        wait_until("runtime empty", Duration::from_secs(120), async || {
            fake.sandboxes().is_empty() && fake.containers().is_empty()
        })
        .await?;
        let secs = t0.elapsed().as_secs_f64();
        // The fake runtime's own call log is not the kubelet's memory.
        fake.clear_calls();
        tokio::time::sleep(args.settle).await;
        let mut s = proc_sample(pid, round, secs, live_heap(&profile));
        s.running_rss_kib = running_rss;
        s.running_heap = running_heap;
        print_row(&s);
        out.push(s);
    }
    drop(profile);
    cancel.cancel();
    agent.shutdown().await;
    Ok(out)
}

fn fmt_opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn print_row(s: &Sample) {
    println!(
        "| {} | {:.1} | {} | {} | {} | {} / {} | {} | {} | {} | {} |",
        s.round,
        s.secs,
        fmt_opt(s.running_rss_kib),
        fmt_opt(s.running_heap.map(|h| h.0 / 1024)),
        fmt_opt(s.rss_kib),
        fmt_opt(s.anon_kib),
        fmt_opt(s.file_kib),
        fmt_opt(s.hwm_kib),
        fmt_opt(s.threads),
        fmt_opt(s.heap.map(|h| h.0 / 1024)),
        fmt_opt(s.heap.map(|h| h.1)),
    );
}

fn main() -> Result<()> {
    let args = parse_args()?;
    #[cfg(feature = "dhat-heap")]
    let profiler: Option<Box<dyn std::any::Any>> = Some(Box::new(dhat::Profiler::new_heap()));
    #[cfg(not(feature = "dhat-heap"))]
    let profiler: Option<Box<dyn std::any::Any>> = None;
    // As the kubelet binary: two worker threads.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if args.mode == Mode::Steady {
        let v = rt.block_on(run_steady(&args))?;
        if let Some(path) = &args.out {
            std::fs::write(path, serde_json::to_string_pretty(&v)?)?;
        }
        return Ok(());
    }
    println!(
        "| round | round time (s) | VmRSS all running (KiB) | live heap all running (KiB) | VmRSS after (KiB) | anon / file after (KiB) | VmHWM (KiB) | threads | live heap after (KiB) | live blocks after |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let samples = rt.block_on(async {
        match args.mode {
            Mode::Real => run_real(&args).await,
            Mode::Fake | Mode::Steady => run_fake(&args, profiler).await,
        }
    })?;
    drop(rt);
    if let Some(path) = &args.out {
        let rows: Vec<Value> = samples.iter().map(Sample::json).collect();
        let v = json!({
            "mode": if args.mode == Mode::Real { "real" } else { "fake" },
            "pods": args.pods, "rounds": args.rounds, "settle_s": args.settle.as_secs(),
            "samples": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)?)?;
    }
    Ok(())
}
