//! Pod start benchmark on the real containerd: for N = 1, 10, 30 busybox pods, time from
//! "manifests written" to "every pod Running in rkubelet's /pods" and compare it with a raw CRI
//! client doing RunPodSandbox → CreateContainer → StartContainer for the same pods concurrently.
//! A third client, the raw one sending rkubelet's own sandbox and container requests (see
//! `rawcfg.rs`), splits the difference into the runtime's work for richer requests and the
//! kubelet's own. Also reports rkubelet's peak RSS (VmHWM). Prints a Markdown table and writes
//! JSON.
//!
//! With `--timeline`, rkubelet runs with its `timeline` tracing target on and the benchmark
//! prints, per pod count, each start-path step's p50/p99 over all pods and the kubelet's own
//! time per pod outside CRI calls (see `timeline.rs`).
//!
//! Usage: podstart --endpoint unix:///tmp/rkubelet-dev/containerd.sock \
//!                 --kubelet target/release/rkubelet [--counts 1,10,30] [--rounds 5] [--out FILE]
//!                 [--timeline]

mod common;
mod rawcfg;
mod timeline;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    timeline: bool,
}

/// rkubelet's log filter with `--timeline`: the default one plus the `timeline` target.
const TIMELINE_FILTER: &str = "warn,rkubelet=info,kubelet=info,rkubelet_cri=info,timeline=debug";

fn parse_args() -> Result<Args> {
    let mut args = Args {
        endpoint: std::env::var("RKUBELET_CRI_ENDPOINT").unwrap_or_default(),
        kubelet: PathBuf::from("target/release/rkubelet"),
        counts: vec![1, 10, 30],
        rounds: 5,
        out: None,
        timeline: false,
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
            "--timeline" => args.timeline = true,
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.endpoint.is_empty() {
        bail!("--endpoint (or RKUBELET_CRI_ENDPOINT) is required");
    }
    Ok(args)
}

// ---------- raw CRI ----------

/// The raw client's CRI calls, in order, as the timeline names them.
const RAW_OPS: [&str; 3] = ["run_podsandbox", "create_container", "start_container"];

/// The static pod manifest of pod `i` of `round` (rkubelet adds the node name to its name).
fn manifest(round: usize, i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bench-{round}-{i}\n  namespace: bench\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
    )
}

/// The plain raw client's configs for one pod: only what the runtime needs.
fn plain_configs(
    logs: &Path,
    round: usize,
    i: usize,
) -> Result<(PodSandboxConfig, ContainerConfig)> {
    let uid = format!("bench-raw-{round}-{i}");
    let log_dir = logs.join(&uid);
    std::fs::create_dir_all(log_dir.join("c"))?;
    let sandbox = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: uid.clone(),
            uid: uid.clone(),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: uid.clone(),
        log_directory: log_dir.to_string_lossy().into_owned(),
        linux: Some(LinuxPodSandboxConfig::default()),
        ..Default::default()
    };
    let container = ContainerConfig {
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
    };
    Ok((sandbox, container))
}

/// Where a raw client's configs for a pod come from: its own plain ones (log directories
/// under the path) or rkubelet's generators.
enum Configs<'a> {
    Plain(&'a Path),
    Kubelet(&'a rawcfg::KubeletRequests),
}

/// One pod the raw way, labelled `BENCH_LABEL=label`: (seconds until started, each of
/// [`RAW_OPS`]' duration in ms).
async fn raw_pod(
    rt: &RemoteRuntime,
    configs: &Configs<'_>,
    label: &str,
    round: usize,
    i: usize,
) -> Result<(f64, [f64; 3])> {
    let (mut sandbox_config, container_config) = match configs {
        Configs::Plain(logs) => plain_configs(logs, round, i)?,
        Configs::Kubelet(k) => k.configs(&manifest(round, i), &format!("{round:016x}{i:016x}"))?,
    };
    sandbox_config
        .labels
        .insert(BENCH_LABEL.to_owned(), label.to_owned());
    let start = Instant::now();
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let sb = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .pod_sandbox_id;
    let sandbox_ms = ms(t);
    let t = Instant::now();
    let c = rt
        .create_container(CreateContainerRequest {
            pod_sandbox_id: sb,
            config: Some(container_config),
            sandbox_config: Some(sandbox_config),
        })
        .await?
        .container_id;
    let create_ms = ms(t);
    let t = Instant::now();
    rt.start_container(StartContainerRequest { container_id: c })
        .await?;
    Ok((
        start.elapsed().as_secs_f64(),
        [sandbox_ms, create_ms, ms(t)],
    ))
}

/// One raw client's figures over the rounds of a pod count.
#[derive(Default)]
struct RawStats {
    /// Seconds until every pod of a round was started, per round.
    all: Vec<f64>,
    /// Seconds until each pod was started.
    per: Vec<f64>,
    /// Each of [`RAW_OPS`]' durations in ms, per pod.
    ops: [Vec<f64>; 3],
}

impl RawStats {
    fn add(&mut self, (per, all): (Vec<(f64, [f64; 3])>, f64)) {
        for (secs, calls) in per {
            self.per.push(secs);
            for (v, ms) in self.ops.iter_mut().zip(calls) {
                v.push(ms);
            }
        }
        self.all.push(all);
    }
}

/// Returns (per-pod seconds and call durations, all-started seconds).
async fn raw_round(
    rt: &RemoteRuntime,
    configs: &Configs<'_>,
    n: usize,
    round: usize,
) -> Result<(Vec<(f64, [f64; 3])>, f64)> {
    let label = match configs {
        Configs::Plain(_) => "raw",
        Configs::Kubelet(_) => "raw-kubelet-requests",
    };
    let start = Instant::now();
    let results =
        futures::future::join_all((0..n).map(|i| raw_pod(rt, configs, label, round, i))).await;
    let all = start.elapsed().as_secs_f64();
    let removed = common::remove_sandboxes(rt, BENCH_LABEL, label).await;
    rawcfg::remove_cgroups();
    let per = results.into_iter().collect::<Result<Vec<_>>>()?;
    removed?;
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
) -> Result<(Vec<f64>, f64, u64)> {
    let names: Vec<String> = (0..n)
        .map(|i| format!("bench-{round}-{i}-bench-node"))
        .collect();
    let t0 = Instant::now();
    let written_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    for i in 0..n {
        let yaml = manifest(round, i);
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
    Ok((seen.into_values().collect(), all, written_us))
}

/// The timelines of this round's pods from the kubelet log written since `offset`; moves
/// `offset` to the end. `written_us`: when the benchmark started writing the manifests.
fn round_timelines(
    log: &Path,
    offset: &mut usize,
    round: usize,
    written_us: u64,
) -> Result<Vec<(timeline::PodTimeline, f64)>> {
    let text = std::fs::read(log).with_context(|| format!("reading {}", log.display()))?;
    let new = String::from_utf8_lossy(text.get(*offset..).unwrap_or_default()).into_owned();
    *offset = text.len();
    let marks: Vec<timeline::Mark> = new.lines().filter_map(timeline::parse_line).collect();
    let seen_at: HashMap<&str, u64> = marks
        .iter()
        .filter(|m| m.step == "file_seen")
        .map(|m| (m.pod.as_str(), m.at_us))
        .collect();
    let prefix = format!("bench/bench-{round}-");
    let timelines = timeline::reduce(&marks)
        .into_iter()
        .filter(|t| t.name.starts_with(&prefix))
        .map(|t| {
            let uid_seen = marks
                .iter()
                .find(|m| m.step == "file_seen" && m.name.as_deref() == Some(&t.name))
                .and_then(|m| seen_at.get(m.pod.as_str()))
                .copied()
                .unwrap_or(written_us);
            let write_to_seen = uid_seen.saturating_sub(written_us) as f64 / 1000.0;
            (t, write_to_seen)
        })
        .collect();
    Ok(timelines)
}

/// Prints the per-step p50/p99 (ms) over `timelines`, with the raw client's call durations
/// (`raw`, in [`RAW_OPS`] order) beside rkubelet's, and returns them as JSON.
fn print_timeline(
    n: usize,
    timelines: &[(timeline::PodTimeline, f64)],
    raws: &[[Vec<f64>; 3]; 2],
) -> Value {
    let mut order: Vec<String> = vec!["manifests written→file_seen".to_owned()];
    let mut samples: HashMap<String, Vec<f64>> = HashMap::new();
    let mut cri_ops: HashMap<String, Vec<f64>> = HashMap::new();
    for (t, write_to_seen) in timelines {
        samples
            .entry(order[0].clone())
            .or_default()
            .push(*write_to_seen);
        for (seg, ms) in &t.segments {
            if !order.contains(seg) {
                order.push(seg.clone());
            }
            samples.entry(seg.clone()).or_default().push(*ms);
        }
        for (op, ms) in &t.cri_by_op {
            cri_ops.entry(op.clone()).or_default().push(*ms);
        }
        for (key, v) in [
            ("total: file_seen→running", t.total_ms),
            ("CRI calls of the pod", t.cri_ms),
            ("own time outside CRI", t.own_ms()),
            ("PLEG wait (sync_end→pleg_event)", t.pleg_wait_ms),
            (
                "own time outside CRI and PLEG wait",
                t.own_ms() - t.pleg_wait_ms,
            ),
        ] {
            samples.entry(key.to_owned()).or_default().push(v);
        }
    }
    for key in [
        "total: file_seen→running",
        "CRI calls of the pod",
        "own time outside CRI",
        "PLEG wait (sync_end→pleg_event)",
        "own time outside CRI and PLEG wait",
    ] {
        order.push(key.to_owned());
    }
    let mut ops: Vec<&String> = cri_ops.keys().collect();
    ops.sort();
    println!(
        "\nTimeline, {n} pods ({} pod starts): ms per pod",
        timelines.len()
    );
    println!("| step | p50 | p99 |");
    println!("|---|---:|---:|");
    let mut rows = Vec::new();
    let mut row = |label: String, v: Vec<f64>| {
        let (p50, p99) = summary(v);
        println!("| {label} | {p50:.1} | {p99:.1} |");
        rows.push(json!({"step": label, "p50_ms": p50, "p99_ms": p99}));
    };
    for key in &order {
        if let Some(v) = samples.get(key) {
            row(key.clone(), v.clone());
        }
    }
    for op in ops {
        row(format!("CRI {op} (sum per pod)"), cri_ops[op].clone());
    }
    // The same calls made by the raw clients in the rounds alternating with these: with
    // their own plain requests and with rkubelet's (the part of rkubelet's CRI time that is
    // the runtime doing more for richer requests, apart from the load around the calls).
    for (client, ops) in ["raw client", "raw client, rkubelet's requests"]
        .into_iter()
        .zip(raws)
    {
        for (op, v) in RAW_OPS.iter().zip(ops) {
            row(format!("{client}: CRI {op}"), v.clone());
        }
    }
    json!({"pods": n, "starts": timelines.len(), "steps": rows})
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let rt = RemoteRuntime::connect(&args.endpoint, Duration::from_secs(120)).await?;
    let dir = std::env::temp_dir().join(format!("rkubelet-bench-{}", std::process::id()));
    let raw_logs = dir.join("raw-logs");
    let env: &[(&str, &str)] = if args.timeline {
        &[("RUST_LOG", TIMELINE_FILTER)]
    } else {
        &[]
    };
    let k = StandaloneKubelet::start_with_env(
        &args.kubelet,
        &args.endpoint,
        &dir,
        "bench-node",
        "",
        env,
    )
    .await?;
    let log = dir.join("kubelet.log");
    let mut log_offset = 0;
    let mut timeline_runs = Vec::new();
    let mut round_no = 0;

    let kubelet_requests =
        rawcfg::KubeletRequests::new(&rt, &dir.join("raw-kubelet-requests"), "bench-node", IMAGE)
            .await?;
    let clients = [
        Configs::Plain(&raw_logs),
        Configs::Kubelet(&kubelet_requests),
    ];
    let mut rows = Vec::new();
    println!(
        "| pods | raw CRI all-running p50 / p99 (s) | raw CRI with rkubelet's requests p50 / p99 (s) | rkubelet all-running p50 / p99 (s) | ratio p50 | rkubelet ÷ raw with its requests, p50 | raw / raw with rkubelet's requests / rkubelet per-pod p50 (s) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &args.counts {
        let (mut kl_all, mut kl_per) = (vec![], vec![]);
        let mut raws: [RawStats; 2] = Default::default();
        let mut timelines = Vec::new();
        for _ in 0..args.rounds {
            // Rounds are numbered across counts so pod names (and timelines) never repeat.
            let round = round_no;
            round_no += 1;
            // The clients take turns going first: a round runs right after the previous
            // one's pods were removed, while the runtime still collects their remains.
            for turn in 0..3 {
                match (round + turn) % 3 {
                    2 => {
                        let (per, all, written_us) = kubelet_round(&k, &rt, n, round).await?;
                        kl_per.extend(per);
                        kl_all.push(all);
                        if args.timeline {
                            timelines.extend(round_timelines(
                                &log,
                                &mut log_offset,
                                round,
                                written_us,
                            )?);
                        }
                    }
                    c => raws[c].add(raw_round(&rt, &clients[c], n, round).await?),
                }
            }
        }
        let [raw, raw_k] = raws;
        let (ra50, ra99) = summary(raw.all.clone());
        let (rk50, rk99) = summary(raw_k.all.clone());
        let (ka50, ka99) = summary(kl_all.clone());
        let (rp50, _) = summary(raw.per);
        let (rkp50, _) = summary(raw_k.per);
        let (kp50, _) = summary(kl_per);
        println!(
            "| {n} | {ra50:.3} / {ra99:.3} | {rk50:.3} / {rk99:.3} | {ka50:.3} / {ka99:.3} | {:.2} | {:.2} | {rp50:.3} / {rkp50:.3} / {kp50:.3} |",
            ka50 / ra50,
            ka50 / rk50
        );
        rows.push(json!({
            "pods": n, "rounds": args.rounds,
            "raw_all_running_s": {"p50": ra50, "p99": ra99, "samples": raw.all},
            "raw_kubelet_requests_all_running_s": {"p50": rk50, "p99": rk99, "samples": raw_k.all},
            "rkubelet_all_running_s": {"p50": ka50, "p99": ka99, "samples": kl_all},
            "ratio_p50": ka50 / ra50,
            "ratio_to_kubelet_requests_p50": ka50 / rk50,
            "raw_per_pod_p50_s": rp50, "raw_kubelet_requests_per_pod_p50_s": rkp50,
            "rkubelet_per_pod_p50_s": kp50,
        }));
        if args.timeline {
            timeline_runs.push((n, timelines, [raw.ops, raw_k.ops]));
        }
    }
    let timeline_rows: Vec<Value> = timeline_runs
        .iter()
        .map(|(n, t, raws)| print_timeline(*n, t, raws))
        .collect();
    let hwm = proc_status_kib(k.child.pid(), "VmHWM");
    println!(
        "\nrkubelet peak RSS (VmHWM): {} KiB",
        hwm.map_or("?".into(), |v| v.to_string())
    );
    let out = json!({"endpoint": args.endpoint, "results": rows, "rkubelet_vm_hwm_kib": hwm,
        "timeline": timeline_rows});
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    }
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
