//! Hollow nodes (kubemark for rkubelet): many complete rkubelet agents in ONE process, each
//! with its own node name, root directory, API client and in-process fake runtime
//! (`FakeRuntime`: no containerd, no cgroups, no HTTP servers), all registered with the in-repo
//! fake API server running in a CHILD process (this binary re-executed as `hollow apiserver`),
//! so the agents' memory and CPU are measured apart from the API server's.
//!
//! One measurement (`hollow one --nodes N`): start N agents and wait until every Node is Ready
//! with a lease and an open pod watch; create P pods per node (already bound with
//! `spec.nodeName`, created in the API server's store, so every counted request is a
//! kubelet's); wait until all are Running and Ready; hold a steady window. Reports per hollow
//! node: RSS (process growth since before the agents started, / N), CPU (utime+stime of the
//! agents' process, % of one core / N), API requests/s at steady state, API requests per pod
//! start (by `VERB resource[/subresource]`), and the API server process's own RSS and CPU.
//!
//! `hollow --nodes 10,100,1000` runs one fresh process pair per count (so memory of one count
//! does not leak into the next), prints a Markdown table and writes JSON with `--out`.
//!
//! Child protocol (`hollow apiserver DIR`): prints `ready` once serving (kubeconfig in
//! `DIR/kubeconfig`), then answers one JSON line per command line on stdin: `pods N P`
//! (creates P pods on each of nodes hollow-0..N-1), `nodes N` (Ready nodes, leases, pod
//! watches), `running` (pods Running/total), `counts` (request counters); EOF stops it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::{Counts, breakdown, cpu_secs, diff, per, proc_status_kib};
use fake_apiserver::{FakeApiServer, Options};
use futures::StreamExt;
use kubelet::agent::{Agent, AgentConfig, AgentDeps};
use kubelet::apiclient::{ClientSettings, client_from_kubeconfig};
use kubelet::events::CollectingRecorder;
use rkubelet_cri::fake::FakeRuntime;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio_util::sync::CancellationToken;

const IMAGE: &str = "docker.io/library/busybox:latest";
const NS: &str = "hollow";
/// Agents started at once (each registers its Node, opens its watches, creates its lease).
const START_CONCURRENCY: usize = 25;

fn node_name(i: usize) -> String {
    format!("hollow-{i}")
}

struct Args {
    nodes: Vec<usize>,
    pods: usize,
    steady_secs: u64,
    threads: usize,
    out: Option<PathBuf>,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args> {
    let mut args = Args {
        nodes: vec![10, 100],
        pods: 10,
        steady_secs: 60,
        threads: 2,
        out: None,
    };
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--nodes" => args.nodes = common::parse_counts(&val()?)?,
            "--pods" => args.pods = val()?.parse().context("--pods: expected a number")?,
            "--steady-secs" => {
                args.steady_secs = val()?.parse().context("--steady-secs: expected a number")?
            }
            "--threads" => args.threads = val()?.parse().context("--threads: expected a number")?,
            "--out" => args.out = Some(PathBuf::from(val()?)),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.nodes.is_empty() || args.nodes.contains(&0) || args.threads == 0 {
        bail!("--nodes and --threads must be positive");
    }
    Ok(args)
}

fn main() -> Result<()> {
    let mut argv = std::env::args().skip(1).peekable();
    match argv.peek().map(String::as_str) {
        Some("apiserver") => {
            argv.next();
            let dir = PathBuf::from(argv.next().context("apiserver needs a directory")?);
            // The API server's own pool: 2 workers, as the machine it is measured on.
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?
                .block_on(apiserver(dir))
        }
        Some("one") => {
            argv.next();
            let args = parse_args(argv)?;
            // Every agent shares this one runtime.
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(args.threads)
                .enable_all()
                .build()?
                .block_on(one(&args))
        }
        _ => {
            let args = parse_args(argv)?;
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(all(&args))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The API server child.

fn pod_object(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": "1m"}},
            }],
        },
    })
}

fn condition_true(obj: &Value, type_: &str) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

fn is_running(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|cs| {
                !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object())
            })
        && condition_true(p, "Ready")
}

fn command(server: &FakeApiServer, line: &str) -> Value {
    let words: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| words.get(i).and_then(|w| w.parse::<usize>().ok());
    match (words.first().copied(), num(1), num(2)) {
        (Some("pods"), Some(nodes), Some(per_node)) => {
            for n in 0..nodes {
                let node = node_name(n);
                for p in 0..per_node {
                    let name = format!("{node}-pod-{p}");
                    if let Err(e) = server.create("pods", NS, pod_object(&name, &node)) {
                        return json!({"error": format!("creating pod {name}: {e}")});
                    }
                }
            }
            json!({"created": nodes * per_node})
        }
        (Some("nodes"), Some(nodes), _) => {
            let all = server.list("nodes", None);
            let ready = all.iter().filter(|n| condition_true(n, "Ready")).count();
            let leases = (0..nodes)
                .filter(|i| {
                    server
                        .get("leases", "kube-node-lease", &node_name(*i))
                        .is_some()
                })
                .count();
            let watches = server
                .request_counts()
                .get("WATCH pods")
                .copied()
                .unwrap_or(0);
            json!({"nodes": all.len(), "ready": ready, "leases": leases, "pod_watches": watches})
        }
        (Some("running"), _, _) => {
            let pods = server.list("pods", Some(NS));
            let running = pods.iter().filter(|p| is_running(p)).count();
            json!({"pods": pods.len(), "running": running})
        }
        (Some("counts"), _, _) => json!(server.request_counts()),
        (Some("events"), _, _) => {
            // Events by reason, summing `count` (the recorder's aggregation).
            let mut by = Counts::new();
            for e in server.list("events", Some(NS)) {
                let reason = e["reason"].as_str().unwrap_or("?").to_owned();
                *by.entry(reason).or_default() += e["count"].as_u64().unwrap_or(1);
            }
            json!(by)
        }
        _ => json!({"error": format!("unknown command {line:?}")}),
    }
}

async fn apiserver(dir: PathBuf) -> Result<()> {
    let server = FakeApiServer::start(Options {
        kubeconfig_path: Some(dir.join("kubeconfig")),
        ..Default::default()
    })
    .await?;
    server.create("namespaces", "", json!({"metadata": {"name": NS}}))?;
    // Blocking std I/O on a blocking thread (the server keeps serving on the workers).
    let server = tokio::task::spawn_blocking(move || -> Result<FakeApiServer> {
        use std::io::{BufRead, Write};
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready")?;
        out.flush()?;
        for line in std::io::stdin().lock().lines() {
            writeln!(out, "{}", command(&server, &line?))?;
            out.flush()?;
        }
        Ok(server)
    })
    .await??;
    server.shutdown().await;
    Ok(())
}

/// The harness's end of the API server child.
struct ApiChild {
    child: Child,
    stdin: ChildStdin,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
    kubeconfig: PathBuf,
}

impl ApiChild {
    async fn start(dir: &Path) -> Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("apiserver")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting the fake API server child")?;
        let stdin = child.stdin.take().context("child stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("child stdout")?).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .context("the fake API server printed nothing within 30 s")??;
        if first.as_deref() != Some("ready") {
            bail!("the fake API server did not start (printed {first:?})");
        }
        Ok(Self {
            child,
            stdin,
            stdout,
            kubeconfig: dir.join("kubeconfig"),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    async fn ask(&mut self, line: &str) -> Result<Value> {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        let answer = self
            .stdout
            .next_line()
            .await?
            .context("the fake API server exited")?;
        let v: Value = serde_json::from_str(&answer)?;
        if let Some(e) = v.get("error") {
            bail!("fake API server: {e}");
        }
        Ok(v)
    }

    async fn counts(&mut self) -> Result<Counts> {
        Ok(serde_json::from_value(self.ask("counts").await?)?)
    }

    async fn events(&mut self) -> Result<Counts> {
        Ok(serde_json::from_value(self.ask("events").await?)?)
    }

    async fn stop(mut self) -> Result<()> {
        drop(self.stdin);
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .context("the fake API server did not stop within 30 s")??;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Measures.

/// CPU seconds, RSS (KiB), threads and open fds of the process `pid` (`self` or a number).
fn sample(pid: &str) -> Value {
    let num = pid.parse().unwrap_or(std::process::id());
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    json!({
        "cpu_s": cpu_secs(pid),
        "rss_kib": proc_status_kib(num, "VmRSS"),
        "hwm_kib": proc_status_kib(num, "VmHWM"),
        "threads": proc_status_kib(num, "Threads"),
        "fds": fds,
    })
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

/// Polls `check` every `every` until it returns true; fails after `limit` naming `what`.
async fn wait_for(
    what: &str,
    limit: Duration,
    every: Duration,
    mut check: impl AsyncFnMut() -> Result<bool>,
) -> Result<f64> {
    let t = Instant::now();
    while !check().await? {
        if t.elapsed() > limit {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(every).await;
    }
    Ok(t.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// One measurement: N agents in this process.

struct Hollow {
    agent: Agent,
    fake: FakeRuntime,
}

async fn start_agent(
    i: usize,
    dir: &Path,
    kubeconfig: &Path,
    cancel: &CancellationToken,
) -> Result<Hollow> {
    let name = node_name(i);
    let client = client_from_kubeconfig(kubeconfig, &ClientSettings::default())
        .await
        .with_context(|| format!("{name}: API client"))?;
    let fake = FakeRuntime::with_images(&[IMAGE]);
    let mut cfg = AgentConfig::for_tests(&dir.join(&name), &name);
    // As on a real node: without clusterDNS every pod start adds a MissingClusterDNS event.
    cfg.cluster_dns = vec!["10.96.0.10".to_owned()];
    cfg.cluster_domain = "cluster.local".to_owned();
    let deps = AgentDeps {
        runtime: Arc::new(fake.clone()),
        images: Arc::new(fake.clone()),
        events: Arc::new(CollectingRecorder::default()),
        api: Some(client),
    };
    let agent = Agent::start(cfg, deps, cancel.child_token())
        .await
        .with_context(|| format!("{name}: starting the agent"))?;
    Ok(Hollow { agent, fake })
}

async fn one(args: &Args) -> Result<()> {
    let n = args.nodes[0];
    let pods = args.pods;
    let dir = std::env::temp_dir().join(format!("rkubelet-hollow-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = measure(n, pods, args.steady_secs, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    let result = result?;
    let text = serde_json::to_string(&result)?;
    match &args.out {
        Some(path) => std::fs::write(path, text)?,
        None => println!("{text}"),
    }
    Ok(())
}

async fn measure(n: usize, pods: usize, steady_secs: u64, dir: &Path) -> Result<Value> {
    let mut api = ApiChild::start(dir).await?;
    let api_pid = api.pid().to_string();
    let base = sample("self");
    let api_base = sample(&api_pid);

    // Start-up: every node registered, Ready, with its lease and its pod watch.
    let cancel = CancellationToken::new();
    let t = Instant::now();
    let kubeconfig = api.kubeconfig.clone();
    let hollows: Vec<Hollow> = futures::stream::iter(0..n)
        .map(|i| start_agent(i, dir, &kubeconfig, &cancel))
        .buffered(START_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let nodes_cmd = format!("nodes {n}");
    wait_for(
        "every node Ready with a lease and a pod watch",
        Duration::from_secs(60 + n as u64 / 5),
        Duration::from_millis(500),
        async || {
            let s = api.ask(&nodes_cmd).await?;
            Ok(s["ready"] == n && s["leases"] == n && s["pod_watches"].as_u64() >= Some(n as u64))
        },
    )
    .await?;
    let ready_s = t.elapsed().as_secs_f64();
    eprintln!("hollow: {n} nodes Ready in {ready_s:.1} s");
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The fake runtime logs every call; these logs are test aids, not kubelet memory.
    let fakes: Vec<FakeRuntime> = hollows.iter().map(|h| h.fake.clone()).collect();
    let clear_cancel = cancel.child_token();
    let clearer = tokio::spawn({
        let cancel = clear_cancel.clone();
        async move {
            loop {
                for fake in &fakes {
                    fake.clear_calls();
                }
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                }
            }
        }
    });

    // Pod start: P pods per node, bound, created in the store; all Running and Ready.
    let total = n * pods;
    let c0 = api.counts().await?;
    let e0 = api.events().await?;
    let (s0, a0) = (sample("self"), sample(&api_pid));
    let t = Instant::now();
    api.ask(&format!("pods {n} {pods}")).await?;
    let poll = Duration::from_millis(if total > 1000 { 2000 } else { 250 });
    let mut shown = Instant::now();
    wait_for(
        "every pod Running",
        Duration::from_secs(300 + total as u64 / 5),
        poll,
        async || {
            let running = api.ask("running").await?["running"].as_u64().unwrap_or(0);
            if shown.elapsed() > Duration::from_secs(30) {
                eprintln!(
                    "hollow: {running}/{total} pods Running after {:.0} s",
                    t.elapsed().as_secs_f64()
                );
                shown = Instant::now();
            }
            Ok(running == total as u64)
        },
    )
    .await?;
    let start_s = t.elapsed().as_secs_f64();
    // Requests that follow Running (events still queued, last status PATCHes) belong to the
    // start: wait until the pod-related counters stop moving for two polls in a row.
    let pod_related = |c: &Counts| {
        [
            "POST events",
            "PATCH events",
            "PATCH pods/status",
            "GET pods",
        ]
        .iter()
        .map(|k| c.get(*k).copied().unwrap_or(0))
        .sum::<u64>()
    };
    let mut last = (u64::MAX, 0);
    wait_for(
        "the pod-start requests to settle",
        Duration::from_secs(120),
        Duration::from_secs(2),
        async || {
            let now = pod_related(&api.counts().await?);
            last = if now == last.0 {
                (now, last.1 + 1)
            } else {
                (now, 0)
            };
            Ok(last.1 >= 2)
        },
    )
    .await?;
    let settled_s = t.elapsed().as_secs_f64();
    eprintln!(
        "hollow: {total} pods Running in {start_s:.1} s, requests settled at {settled_s:.1} s"
    );
    let c1 = api.counts().await?;
    let e1 = api.events().await?;
    let (s1, a1) = (sample("self"), sample(&api_pid));

    // Steady state.
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(steady_secs)).await;
    let c2 = api.counts().await?;
    let e2 = api.events().await?;
    let (s2, a2) = (sample("self"), sample(&api_pid));
    let secs = t.elapsed().as_secs_f64();
    let still = api.ask("running").await?;

    clear_cancel.cancel();
    clearer.await?;
    cancel.cancel();
    futures::future::join_all(hollows.into_iter().map(|h| h.agent.shutdown())).await;
    api.stop().await?;

    let nf = n as f64;
    let start_reqs = diff(&c0, &c1);
    let steady_reqs = diff(&c1, &c2);
    let pct = |a: &Value, b: &Value, s: f64| 100.0 * (f(b, "cpu_s") - f(a, "cpu_s")) / s;
    let rss_growth = f(&s2, "rss_kib") - f(&base, "rss_kib");
    Ok(json!({
        "nodes": n,
        "pods_per_node": pods,
        "nodes_ready_s": ready_s,
        "pods_running_s": start_s,
        "settled_s": settled_s,
        "steady_secs": secs,
        "pods_running_at_end": still["running"],
        "api_requests_per_pod_start": per(&start_reqs, total.max(1) as f64),
        "api_requests_per_s_per_node": per(&steady_reqs, secs * nf),
        "start_event_reasons": diff(&e0, &e1),
        "steady_event_reasons": diff(&e1, &e2),
        "agents": {
            "rss_kib_per_node": rss_growth / nf,
            "rss_kib_before": base["rss_kib"],
            "rss_kib_steady": s2["rss_kib"],
            "hwm_kib": s2["hwm_kib"],
            "threads": s2["threads"],
            "fds": s2["fds"],
            "fds_per_node": (f(&s2, "fds") - f(&base, "fds")) / nf,
            "start_cpu_pct": pct(&s0, &s1, settled_s),
            "steady_cpu_pct": pct(&s1, &s2, secs),
            "steady_cpu_pct_per_node": pct(&s1, &s2, secs) / nf,
        },
        "apiserver": {
            "rss_kib_before": api_base["rss_kib"],
            "rss_kib_steady": a2["rss_kib"],
            "fds": a2["fds"],
            "start_cpu_pct": pct(&a0, &a1, settled_s),
            "steady_cpu_pct": pct(&a1, &a2, secs),
        },
    }))
}

// ---------------------------------------------------------------------------------------------
// Several counts: one fresh process pair each.

async fn all(args: &Args) -> Result<()> {
    let mut rows = Vec::new();
    for &n in &args.nodes {
        let out =
            std::env::temp_dir().join(format!("rkubelet-hollow-{}-{n}.json", std::process::id()));
        let status = Command::new(std::env::current_exe()?)
            .args([
                "one",
                "--nodes",
                &n.to_string(),
                "--pods",
                &args.pods.to_string(),
            ])
            .args(["--steady-secs", &args.steady_secs.to_string()])
            .args(["--threads", &args.threads.to_string()])
            .arg("--out")
            .arg(&out)
            .status()
            .await?;
        if !status.success() {
            bail!("the run with {n} nodes failed ({status})");
        }
        let row: Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
        let _ = std::fs::remove_file(&out);
        rows.push(row);
    }
    println!(
        "\n| nodes × pods | all Ready (s) | all Running (s) | agent RSS / node (KiB) | agent CPU / node (% of a core) | API req/s / node | API requests / pod start | threads, fds | fake apiserver RSS (MiB), CPU % |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---|---|");
    for r in &rows {
        let a = &r["agents"];
        let s = &r["apiserver"];
        println!(
            "| {} × {} | {:.1} | {:.1} | {:.0} | {:.3} | {:.3} | {} | {}, {} | {:.0}, {:.1} |",
            r["nodes"],
            r["pods_per_node"],
            f(r, "nodes_ready_s"),
            f(r, "pods_running_s"),
            f(a, "rss_kib_per_node"),
            f(a, "steady_cpu_pct_per_node"),
            f(&r["api_requests_per_s_per_node"], "total"),
            breakdown(&r["api_requests_per_pod_start"]),
            a["threads"],
            a["fds"],
            f(s, "rss_kib_steady") / 1024.0,
            f(s, "steady_cpu_pct"),
        );
    }
    for r in &rows {
        println!(
            "\n{} nodes, steady API requests/s per node: {}; events by reason at start {}, steady {}",
            r["nodes"],
            breakdown(&r["api_requests_per_s_per_node"]),
            r["start_event_reasons"],
            r["steady_event_reasons"],
        );
    }
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_string_pretty(&json!({"runs": rows}))?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn server() -> (FakeApiServer, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "rkubelet-hollow-unit-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let server = FakeApiServer::start(Options {
            kubeconfig_path: Some(dir.join("kubeconfig")),
            ..Default::default()
        })
        .await
        .unwrap();
        server
            .create("namespaces", "", json!({"metadata": {"name": NS}}))
            .unwrap();
        (server, dir)
    }

    #[tokio::test]
    async fn child_creates_bound_pods_and_reports_them() {
        let (server, dir) = server().await;
        assert_eq!(command(&server, "pods 2 3"), json!({"created": 6}));
        let pods = server.list("pods", Some(NS));
        assert_eq!(pods.len(), 6);
        let on_node_1 = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"] == "hollow-1")
            .count();
        assert_eq!(on_node_1, 3);
        assert_eq!(
            command(&server, "running"),
            json!({"pods": 6, "running": 0})
        );
        let nodes = command(&server, "nodes 2");
        assert_eq!(nodes["ready"], 0);
        assert_eq!(nodes["leases"], 0);
        // A second batch with the same names is refused (AlreadyExists), named in the answer.
        let again = command(&server, "pods 1 1");
        assert!(
            again["error"].as_str().unwrap().contains("hollow-0-pod-0"),
            "{again}"
        );
        server.shutdown().await;
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn child_rejects_malformed_commands() {
        let (server, dir) = server().await;
        for bad in [
            "",
            "pods",
            "pods 2",
            "pods x 1",
            "nodes",
            "nodes -1",
            "drop table",
        ] {
            let answer = command(&server, bad);
            assert!(
                answer["error"]
                    .as_str()
                    .unwrap()
                    .contains("unknown command"),
                "{bad:?}: {answer}"
            );
        }
        assert!(server.list("pods", Some(NS)).is_empty());
        server.shutdown().await;
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn arguments_are_checked() {
        let args = |s: &str| parse_args(s.split_whitespace().map(str::to_owned));
        let a = args("--nodes 10,100 --pods 5 --steady-secs 3 --threads 1").unwrap();
        assert_eq!(
            (a.nodes, a.pods, a.steady_secs, a.threads),
            (vec![10, 100], 5, 3, 1)
        );
        assert!(args("--nodes 0").is_err());
        assert!(args("--threads 0").is_err());
        assert!(args("--pods").is_err());
        assert!(args("--bogus 1").is_err());
    }

    #[test]
    fn request_breakdown_divides_and_sorts() {
        let before = Counts::from([("GET pods".to_owned(), 2)]);
        let after = Counts::from([
            ("GET pods".to_owned(), 6),
            ("PATCH pods/status".to_owned(), 8),
            ("PUT leases".to_owned(), 0),
        ]);
        let d = diff(&before, &after);
        assert_eq!(d.len(), 2);
        let v = per(&d, 4.0);
        assert_eq!(v["total"], 3.0);
        assert_eq!(
            breakdown(&v),
            "3.000 (PATCH pods/status 2.00, GET pods 1.00)"
        );
    }
}
