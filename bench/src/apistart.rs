//! API-mode pod start benchmark on the real containerd: starts the in-repo fake API server
//! in-process and a release `rkubelet --kubeconfig` against it, then for N busybox pods
//! created through the API (already bound with `spec.nodeName`) measures
//!
//! - per-pod time from "POST returned" to "the API shows the pod Running, every container
//!   running and Ready=True" (p50/p99) and the time until all N are Running;
//! - status latency: from the container's start in the runtime (CRI `startedAt`) to the store
//!   first showing the pod Running and Ready with its IP (p50/p99);
//! - API requests the kubelet makes per pod start (by `VERB resource[/subresource]`, from the
//!   fake server's request counters, minus the benchmark's own pod POSTs);
//! - steady state with N pods running: rkubelet's RSS (`VmRSS`) at the end of the window, its
//!   peak RSS (`VmHWM`), its CPU use (% of one core) and the API requests per second.
//!
//! Between rounds the pods are deleted through the API (graceful) and the benchmark waits for
//! the store and the runtime to be empty. Prints a Markdown table and writes JSON.
//!
//! Usage: apistart --endpoint unix:///tmp/rkubelet-dev/containerd.sock \
//!                 --kubelet target/release/rkubelet [--counts 10,100] [--rounds 3] \
//!                 [--steady-secs 60] [--out FILE]

mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::{ChildGuard, Counts, breakdown, diff, parse_counts, per, proc_status_kib, summary};
use fake_apiserver::{FakeApiServer, Options};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use rkubelet_cri::RemoteRuntime;
use serde_json::{Value, json};

const IMAGE: &str = "docker.io/library/busybox:latest";
const NODE: &str = "bench-node";
/// A namespace of its own, so sandbox clean-up by label touches nothing else on the runtime.
const NS: &str = "apistart";
const NS_LABEL: &str = "io.kubernetes.pod.namespace";
/// POSTs/DELETEs the benchmark keeps in flight (like a scheduler binding a burst of pods).
const CLIENT_CONCURRENCY: usize = 10;
const POLL: Duration = Duration::from_millis(20);

struct Args {
    endpoint: String,
    kubelet: PathBuf,
    counts: Vec<usize>,
    rounds: usize,
    steady_secs: u64,
    out: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        endpoint: std::env::var("RKUBELET_CRI_ENDPOINT").unwrap_or_default(),
        kubelet: PathBuf::from("target/release/rkubelet"),
        counts: vec![100],
        rounds: 3,
        steady_secs: 60,
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
            "--steady-secs" => {
                args.steady_secs = val()?.parse().context("--steady-secs: expected a number")?
            }
            "--out" => args.out = Some(PathBuf::from(val()?)),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.endpoint.is_empty() {
        bail!("--endpoint (or RKUBELET_CRI_ENDPOINT) is required");
    }
    if args.rounds == 0 || args.counts.contains(&0) {
        bail!("--rounds and --counts must be positive");
    }
    Ok(args)
}

fn is_running(p: &Value) -> bool {
    let st = &p["status"];
    st["phase"] == "Running"
        && st["containerStatuses"].as_array().is_some_and(|cs| {
            !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object())
        })
        && st["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn node_ready(server: &FakeApiServer) -> bool {
    server.get("nodes", "", NODE).is_some_and(|n| {
        n["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    })
}

/// Clock ticks per second of `/proc/<pid>/stat` times: `getconf CLK_TCK` (the workspace denies
/// `unsafe`, so no `sysconf`); 100 on every Linux platform in practice.
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User + system CPU seconds of `pid` (`/proc/<pid>/stat` fields 14 and 15).
fn cpu_secs(pid: u32, hz: f64) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (the command) may contain spaces; what follows its ')' starts at field 3.
    let (_, rest) = s.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / hz)
}

/// Events in the benchmark namespace by reason (summing `count`), to explain `POST events`.
fn event_reasons(server: &FakeApiServer) -> Counts {
    let mut by = Counts::new();
    for e in server.list("events", Some(NS)) {
        let reason = e["reason"].as_str().unwrap_or("?").to_owned();
        *by.entry(reason).or_default() += e["count"].as_u64().unwrap_or(1);
    }
    by
}

fn pod_object(name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": "1m"}},
            }],
        },
    }))?)
}

struct Bench<'a> {
    server: &'a FakeApiServer,
    pods: Api<Pod>,
    rt: &'a RemoteRuntime,
    pid: u32,
    hz: f64,
    steady: Duration,
    log: PathBuf,
}

/// Wall-clock nanoseconds since the epoch (the runtime's `startedAt` clock).
fn unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// Status latency: for each pod, the time from its container's start in the runtime (CRI
/// `ContainerStatus.startedAt`, ns) to the store first showing it Running and Ready (polled
/// every [`POLL`]). Pod name → seconds.
async fn status_latencies(
    rt: &RemoteRuntime,
    seen_running_ns: &HashMap<String, i64>,
) -> Result<Vec<f64>> {
    use rkubelet_cri::RuntimeService;
    use rkubelet_cri::api::{ContainerFilter, ContainerStatusRequest, ListContainersRequest};
    let list = rt
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                label_selector: HashMap::from([(NS_LABEL.to_owned(), NS.to_owned())]),
                ..Default::default()
            }),
        })
        .await?
        .containers;
    let mut out = Vec::new();
    for c in list {
        let Some(seen) = c
            .labels
            .get("io.kubernetes.pod.name")
            .and_then(|n| seen_running_ns.get(n))
        else {
            continue;
        };
        let status = rt
            .container_status(ContainerStatusRequest {
                container_id: c.id.clone(),
                verbose: false,
            })
            .await?
            .status;
        if let Some(started) = status.map(|s| s.started_at).filter(|t| *t > 0) {
            out.push((seen - started) as f64 / 1e9);
        }
    }
    Ok(out)
}

/// Polls the store (in-process, no HTTP) until every name is Running; name → (seconds since
/// t0, wall-clock ns).
async fn poll_running(
    b: &Bench<'_>,
    names: &[String],
    t0: Instant,
    timeout: Duration,
) -> Result<HashMap<String, (f64, i64)>> {
    let want: HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut seen = HashMap::new();
    while seen.len() < names.len() {
        if t0.elapsed() > timeout {
            bail!(
                "only {}/{} pods Running in the API after {timeout:?}; see {}",
                seen.len(),
                names.len(),
                b.log.display()
            );
        }
        for p in b.server.list("pods", Some(NS)) {
            if let Some(name) = p["metadata"]["name"].as_str()
                && want.contains(name)
                && !seen.contains_key(name)
                && is_running(&p)
            {
                seen.insert(name.to_owned(), (t0.elapsed().as_secs_f64(), unix_ns()));
            }
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(seen)
}

/// Creates the pods through the API while polling for Running. Returns per-pod latencies
/// (POST returned → Running), the time from the first POST until all are Running and when
/// (wall clock, ns) the store first showed each pod Running.
async fn start_pods(
    b: &Bench<'_>,
    names: &[String],
) -> Result<(Vec<f64>, f64, HashMap<String, i64>)> {
    let t0 = Instant::now();
    let pods = &b.pods;
    let create = futures::stream::iter(names.iter().cloned())
        .map(|name| async move {
            pods.create(&PostParams::default(), &pod_object(&name)?)
                .await
                .with_context(|| format!("creating pod {name}"))?;
            Ok::<_, anyhow::Error>((name, t0.elapsed().as_secs_f64()))
        })
        .buffer_unordered(CLIENT_CONCURRENCY)
        .try_collect::<HashMap<_, _>>();
    let timeout = Duration::from_secs(60 + 3 * names.len() as u64);
    let (created, running) = tokio::try_join!(create, poll_running(b, names, t0, timeout))?;
    let mut per_pod = Vec::with_capacity(names.len());
    for name in names {
        let (c, (r, _)) = created
            .get(name)
            .zip(running.get(name))
            .with_context(|| format!("no timestamps for {name}"))?;
        per_pod.push((r - c).max(0.0));
    }
    let all = running.values().map(|(r, _)| *r).fold(0.0, f64::max);
    let seen_ns = running
        .into_iter()
        .map(|(name, (_, ns))| (name, ns))
        .collect();
    Ok((per_pod, all, seen_ns))
}

/// Graceful delete through the API; waits for the store and the runtime to be empty and
/// force-removes sandboxes the kubelet left behind. Returns (seconds, sandboxes forced).
async fn teardown(b: &Bench<'_>, names: &[String]) -> Result<(f64, usize)> {
    let t = Instant::now();
    let pods = &b.pods;
    futures::stream::iter(names)
        .map(|name| async move {
            match pods.delete(name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
                Err(e) => Err(anyhow::Error::new(e).context(format!("deleting pod {name}"))),
            }
        })
        .buffer_unordered(CLIENT_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let timeout = Duration::from_secs(60 + names.len() as u64);
    while !b.server.list("pods", Some(NS)).is_empty() {
        if t.elapsed() > timeout {
            bail!(
                "pods still in the API {timeout:?} after deletion; see {}",
                b.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let clean = common::wait_sandboxes_gone(b.rt, NS_LABEL, NS, Duration::from_secs(60)).await?;
    let forced = if clean {
        0
    } else {
        common::remove_sandboxes(b.rt, NS_LABEL, NS).await?
    };
    Ok((t.elapsed().as_secs_f64(), forced))
}

/// One round: start N pods, hold them for the steady-state window, tear down.
async fn round(b: &Bench<'_>, n: usize, round: usize) -> Result<Value> {
    let names: Vec<String> = (0..n).map(|i| format!("bench-{round}-{i}")).collect();
    let nf = n as f64;

    let counts0 = b.server.request_counts();
    let events0 = event_reasons(b.server);
    let cpu0 = cpu_secs(b.pid, b.hz);
    let (per_pod, all_running, seen_ns) = start_pods(b, &names).await?;
    let cpu1 = cpu_secs(b.pid, b.hz);
    let status_lat = status_latencies(b.rt, &seen_ns).await?;
    let mut start_reqs = diff(&counts0, &b.server.request_counts());
    // The benchmark's own creates are counted too; the kubelet creates no pods here (no
    // static pods, so no mirror pods).
    if let Some(v) = start_reqs.get_mut("POST pods") {
        *v = v.saturating_sub(n as u64);
    }
    start_reqs.retain(|_, v| *v > 0);
    let events = diff(&events0, &event_reasons(b.server));
    let start_cpu_pct = cpu0
        .zip(cpu1)
        .map(|(a, z)| 100.0 * (z - a) / all_running.max(1e-9));

    let counts1 = b.server.request_counts();
    let t_steady = Instant::now();
    tokio::time::sleep(b.steady).await;
    let cpu2 = cpu_secs(b.pid, b.hz);
    let secs = t_steady.elapsed().as_secs_f64();
    let steady_reqs = diff(&counts1, &b.server.request_counts());
    let rss = proc_status_kib(b.pid, "VmRSS");
    let hwm = proc_status_kib(b.pid, "VmHWM");
    let steady_cpu_pct = cpu1.zip(cpu2).map(|(a, z)| 100.0 * (z - a) / secs);
    let still_running = b
        .server
        .list("pods", Some(NS))
        .iter()
        .filter(|p| is_running(p))
        .count();

    let (teardown_s, forced) = teardown(b, &names).await?;
    let (p50, p99) = summary(per_pod.clone());
    let (lat50, lat99) = summary(status_lat.clone());
    let start = per(&start_reqs, nf);
    let steady = per(&steady_reqs, secs);
    println!(
        "  n={n} round {round}: per-pod p50 {p50:.3} s p99 {p99:.3} s, all Running {all_running:.3} s, \
         status latency p50 {lat50:.3} s p99 {lat99:.3} s, \
         {:.2} API req/pod, start CPU {:.0}%; steady {secs:.0} s: RSS {} KiB, CPU {:.2}%, \
         {:.2} req/s, {still_running}/{n} still Running; teardown {teardown_s:.1} s{}",
        start["total"].as_f64().unwrap_or(f64::NAN),
        start_cpu_pct.unwrap_or(f64::NAN),
        rss.map_or("?".into(), |v| v.to_string()),
        steady_cpu_pct.unwrap_or(f64::NAN),
        steady["total"].as_f64().unwrap_or(f64::NAN),
        if forced > 0 {
            format!(" ({forced} sandboxes force-removed)")
        } else {
            String::new()
        }
    );
    Ok(json!({
        "round": round,
        "per_pod_s": {"p50": p50, "p99": p99, "samples": per_pod},
        "status_latency_s": {"p50": lat50, "p99": lat99, "samples": status_lat},
        "all_running_s": all_running,
        "start_requests": start_reqs,
        "start_requests_per_pod": start,
        "start_event_reasons": events,
        "start_cpu_pct_of_one_core": start_cpu_pct,
        "steady": {
            "secs": secs,
            "vm_rss_kib": rss,
            "vm_hwm_kib": hwm,
            "cpu_pct_of_one_core": steady_cpu_pct,
            "requests": steady_reqs,
            "requests_per_s": steady,
            "pods_running_at_end": still_running,
        },
        "teardown_s": teardown_s,
        "sandboxes_force_removed": forced,
    }))
}

fn median(v: Vec<f64>) -> f64 {
    summary(v).0
}

/// Sums the request counts at JSON `pointer` over the rounds.
fn sum_counts(rounds: &[Value], pointer: &str) -> Counts {
    let mut sum = Counts::new();
    for r in rounds {
        let counts = r.pointer(pointer).and_then(Value::as_object);
        for (k, v) in counts.into_iter().flatten() {
            *sum.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
        }
    }
    sum
}

/// Aggregates the rounds of one pod count into a result row (and prints its table line).
fn row(n: usize, rounds: Vec<Value>) -> Value {
    let nums = |p: &str| {
        rounds
            .iter()
            .filter_map(|r| r.pointer(p).and_then(Value::as_f64))
            .collect::<Vec<_>>()
    };
    let per_pod: Vec<f64> = rounds
        .iter()
        .flat_map(|r| r["per_pod_s"]["samples"].as_array().into_iter().flatten())
        .filter_map(Value::as_f64)
        .collect();
    let (p50, p99) = summary(per_pod);
    let lat: Vec<f64> = rounds
        .iter()
        .flat_map(|r| {
            r["status_latency_s"]["samples"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .filter_map(Value::as_f64)
        .collect();
    let (lat50, lat99) = summary(lat);
    let all = nums("/all_running_s");
    let (all50, all99) = summary(all.clone());
    let reqs = per(
        &sum_counts(&rounds, "/start_requests"),
        (n * rounds.len()) as f64,
    );
    let steady_secs: f64 = nums("/steady/secs").iter().sum();
    let steady_reqs = per(
        &sum_counts(&rounds, "/steady/requests"),
        steady_secs.max(1e-9),
    );
    let rss = median(nums("/steady/vm_rss_kib"));
    let hwm = nums("/steady/vm_hwm_kib").into_iter().fold(0.0, f64::max);
    let cpu = median(nums("/steady/cpu_pct_of_one_core"));
    let start_cpu = median(nums("/start_cpu_pct_of_one_core"));
    println!(
        "| {n} | {p50:.3} / {p99:.3} | {lat50:.3} / {lat99:.3} | {all50:.3} | {} | {:.1} | {cpu:.2} | {:.2} |",
        breakdown(&reqs),
        rss / 1024.0,
        steady_reqs["total"].as_f64().unwrap_or(f64::NAN),
    );
    json!({
        "pods": n,
        "rounds": rounds.len(),
        "per_pod_s": {"p50": p50, "p99": p99},
        "status_latency_s": {"p50": lat50, "p99": lat99},
        "all_running_s": {"p50": all50, "p99": all99, "samples": all},
        "api_requests_per_pod_start": reqs,
        "start_cpu_pct_of_one_core_p50": start_cpu,
        "steady": {
            "vm_rss_kib_p50": rss,
            "vm_hwm_kib_max": hwm,
            "cpu_pct_of_one_core_p50": cpu,
            "api_requests_per_s": steady_reqs,
        },
        "round_details": rounds,
    })
}

async fn kube_client(kubeconfig: &Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Starts rkubelet, runs every count and round, stops rkubelet (SIGTERM); returns the rows.
async fn run(args: &Args, rt: &RemoteRuntime, server: &FakeApiServer, dir: &Path) -> Result<Value> {
    // clusterDNS as on a real node: without it every pod start adds a MissingClusterDNS event.
    let config = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nreadOnlyPort: 0\nhealthzPort: 0\nmaxPods: 250\nclusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\npodLogsDir: {}\n",
        dir.join("logs").display()
    );
    std::fs::write(dir.join("config.yaml"), config)?;
    let log_path = dir.join("kubelet.log");
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new(&args.kubelet)
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .arg("--kubeconfig")
        .arg(&server.kubeconfig_path)
        .arg("--container-runtime-endpoint")
        .arg(&args.endpoint)
        .arg("--root-dir")
        .arg(dir.join("root"))
        .arg("--hostname-override")
        .arg(NODE)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", args.kubelet.display()))?;
    let kubelet = ChildGuard(child);
    // Ready node, lease and pod watch, so start-up requests stay out of the first round.
    let t = Instant::now();
    while !(node_ready(server)
        && server.get("leases", "kube-node-lease", NODE).is_some()
        && server.request_counts().contains_key("WATCH pods"))
    {
        if t.elapsed() > Duration::from_secs(60) {
            bail!(
                "Node {NODE} not Ready (with lease and pod watch) after 60 s; see {}",
                log_path.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "node {NODE} Ready {:.2} s after start",
        t.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let b = Bench {
        server,
        pods: Api::namespaced(kube_client(&server.kubeconfig_path).await?, NS),
        rt,
        pid: kubelet.pid(),
        hz: clock_ticks(),
        steady: Duration::from_secs(args.steady_secs),
        log: log_path,
    };
    let mut details = Vec::new();
    for &n in &args.counts {
        let mut rounds = Vec::new();
        for r in 0..args.rounds {
            rounds.push(round(&b, n, r).await?);
        }
        details.push((n, rounds));
    }
    let peak = proc_status_kib(b.pid, "VmHWM");
    drop(kubelet);
    println!(
        "\n| pods | per-pod p50 / p99 (s) | status latency p50 / p99 (s) | all-running p50 (s) | API requests per pod start (breakdown) | steady-state RSS (MiB) | CPU % of one core | steady API req/s |"
    );
    println!("|---:|---:|---:|---:|---|---:|---:|---:|");
    let rows: Vec<Value> = details.into_iter().map(|(n, r)| row(n, r)).collect();
    println!(
        "\nrkubelet peak RSS over the whole run (VmHWM): {} KiB",
        peak.map_or("?".into(), |v| v.to_string())
    );
    Ok(json!({
        "endpoint": args.endpoint,
        "steady_secs": args.steady_secs,
        "clk_tck": b.hz,
        "client_concurrency": CLIENT_CONCURRENCY,
        "results": rows,
        "rkubelet_vm_hwm_kib": peak,
    }))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let rt = RemoteRuntime::connect(&args.endpoint, Duration::from_secs(120)).await?;
    let dir = std::env::temp_dir().join(format!("rkubelet-apistart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // Leftovers of an interrupted run would be killed as orphans during round 0.
    common::remove_sandboxes(&rt, NS_LABEL, NS).await?;
    let server = FakeApiServer::start(Options {
        kubeconfig_path: Some(dir.join("kubeconfig")),
        ..Default::default()
    })
    .await?;
    server.create("namespaces", "", json!({"metadata": {"name": NS}}))?;
    let result = run(&args, &rt, &server, &dir).await;
    // rkubelet is stopped by now (pods survive a kubelet SIGTERM): remove whatever is left.
    let left = common::remove_sandboxes(&rt, NS_LABEL, NS).await;
    server.shutdown().await;
    let out =
        result.with_context(|| format!("kubelet log and config kept in {}", dir.display()))?;
    if let Ok(n @ 1..) = left {
        println!("removed {n} leftover sandboxes");
    }
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
