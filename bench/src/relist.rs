//! PLEG relist benchmark on the in-process fake runtime (no containerd needed): how long one
//! relist takes and how many CRI calls it makes, (1) with N pods of which M change between
//! relists while every CRI call has an injected latency, and (2) idle with K pods and no
//! latency (the steady cost of the 1 s relist loop: wall time and CPU time per relist).
//! Prints p50/p99/max and calls per relist.
//!
//! Usage: relist [--pods 250] [--changing 50] [--relists 300] [--latency-ms 5]
//!               [--idle-pods 110] [--idle-relists 2000]

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet::container::cache::PodCache;
use kubelet::kuberuntime::labels::{
    container_annotations, container_labels, sandbox_annotations, sandbox_labels,
};
use kubelet::pleg::{GenericPleg, PodLifecycleEvent, RELIST_PERIOD};
use rkubelet_cri::fake::FakeRuntime;
use rkubelet_cri::{RuntimeService, api};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The CRI calls a relist makes; each gets the injected latency.
const RELIST_METHODS: &[&str] = &[
    "ListPodSandbox",
    "ListContainers",
    "PodSandboxStatus",
    "ContainerStatus",
];

struct Args {
    pods: usize,
    changing: usize,
    relists: usize,
    latency: Duration,
    idle_pods: usize,
    idle_relists: usize,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        pods: 250,
        changing: 50,
        relists: 300,
        latency: Duration::from_millis(5),
        idle_pods: 110,
        idle_relists: 2000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut num = || -> Result<usize> {
            it.next()
                .with_context(|| format!("{a} needs a value"))?
                .parse()
                .with_context(|| format!("{a}: expected a number"))
        };
        match a.as_str() {
            "--pods" => args.pods = num()?,
            "--changing" => args.changing = num()?,
            "--relists" => args.relists = num()?,
            "--latency-ms" => args.latency = Duration::from_millis(num()? as u64),
            "--idle-pods" => args.idle_pods = num()?,
            "--idle-relists" => args.idle_relists = num()?,
            other => bail!("unknown argument {other}"),
        }
    }
    if args.changing > args.pods {
        bail!(
            "--changing ({}) exceeds --pods ({})",
            args.changing,
            args.pods
        );
    }
    if args.relists == 0 || args.idle_relists == 0 {
        bail!("--relists and --idle-relists must be at least 1");
    }
    Ok(args)
}

fn pod(i: usize) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("web-{i}")),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{i:05}")),
            ..Default::default()
        },
        spec: Some(PodSpec::default()),
        ..Default::default()
    }
}

fn container_spec(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox".into()),
        ..Default::default()
    }
}

async fn run_sandbox(rt: &FakeRuntime, pod: &Pod) -> Result<String> {
    let meta = &pod.metadata;
    Ok(rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: meta.name.clone().unwrap_or_default(),
                    uid: meta.uid.clone().unwrap_or_default(),
                    namespace: meta.namespace.clone().unwrap_or_default(),
                    attempt: 0,
                }),
                labels: sandbox_labels(pod),
                annotations: sandbox_annotations(pod),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        })
        .await?
        .pod_sandbox_id)
}

async fn start_container(rt: &FakeRuntime, sandbox: &str, pod: &Pod, name: &str) -> Result<String> {
    let c = container_spec(name);
    let id = rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: sandbox.into(),
            config: Some(api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: name.into(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: "busybox".into(),
                    ..Default::default()
                }),
                labels: container_labels(&c, pod),
                annotations: container_annotations(&c, pod, 0, 0xabc),
                ..Default::default()
            }),
            sandbox_config: None,
        })
        .await?
        .container_id;
    rt.start_container(api::StartContainerRequest {
        container_id: id.clone(),
    })
    .await?;
    Ok(id)
}

/// `n` pods, each with a ready sandbox and one running container.
async fn populate(rt: &FakeRuntime, n: usize) -> Result<Vec<(Pod, String)>> {
    let mut pods = Vec::with_capacity(n);
    for i in 0..n {
        let p = pod(i);
        let sb = run_sandbox(rt, &p).await?;
        start_container(rt, &sb, &p, "app").await?;
        pods.push((p, sb));
    }
    Ok(pods)
}

fn new_pleg(rt: &FakeRuntime) -> (GenericPleg, mpsc::Receiver<PodLifecycleEvent>) {
    let (tx, rx) = mpsc::channel(100_000);
    let dyn_rt: Arc<dyn RuntimeService> = Arc::new(rt.clone());
    (
        GenericPleg::new(dyn_rt, PodCache::new(), RELIST_PERIOD, tx),
        rx,
    )
}

fn drain(rx: &mut mpsc::Receiver<PodLifecycleEvent>) -> usize {
    let mut n = 0;
    while rx.try_recv().is_ok() {
        n += 1;
    }
    n
}

/// CPU time this thread has used (`/proc/thread-self/schedstat`, nanoseconds on CPU).
fn thread_cpu() -> Result<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")
        .context("reading /proc/thread-self/schedstat")?;
    let ns: u64 = text
        .split_whitespace()
        .next()
        .context("empty schedstat")?
        .parse()
        .context("schedstat: expected nanoseconds")?;
    Ok(Duration::from_nanos(ns))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Relists with `changing` of `pods` pods changing before each one: in turn a new container
/// starts, exits, is removed (50 pods → 50 events per relist).
async fn burst(args: &Args) -> Result<()> {
    let rt = FakeRuntime::with_images(&["busybox"]);
    let pods = populate(&rt, args.pods).await?;
    let (mut pleg, mut rx) = new_pleg(&rt);
    pleg.relist().await?;
    drain(&mut rx);
    for method in RELIST_METHODS {
        rt.set_latency(method, args.latency);
    }
    let groups = (args.pods / args.changing.max(1)).max(1);
    let mut sidecars: Vec<Option<String>> = vec![None; args.pods];
    let mut durations = Vec::with_capacity(args.relists);
    let mut calls = Vec::with_capacity(args.relists);
    let mut events = 0;
    for i in 0..args.relists {
        let group = (i / 3) % groups;
        let phase = i % 3;
        for idx in (group * args.changing)..((group + 1) * args.changing).min(args.pods) {
            let (p, sb) = &pods[idx];
            match phase {
                0 => sidecars[idx] = Some(start_container(&rt, sb, p, "sidecar").await?),
                1 => {
                    let id = sidecars[idx].as_deref().context("sidecar missing")?;
                    rt.exit_container(id, 0);
                }
                _ => {
                    let id = sidecars[idx].take().context("sidecar missing")?;
                    rt.remove_container(api::RemoveContainerRequest { container_id: id })
                        .await?;
                }
            }
        }
        rt.clear_calls();
        let start = Instant::now();
        pleg.relist().await?;
        durations.push(start.elapsed());
        calls.push(rt.calls().len());
        events += drain(&mut rx);
    }
    durations.sort();
    println!(
        "burst: {} pods, {} changing per relist, {} relists, {} latency per CRI call",
        args.pods,
        args.changing,
        args.relists,
        ms(args.latency)
    );
    println!(
        "  relist duration p50 {}  p99 {}  max {}",
        ms(percentile(&durations, 0.50)),
        ms(percentile(&durations, 0.99)),
        ms(durations.last().copied().unwrap_or_default())
    );
    println!(
        "  CRI calls per relist: min {} max {}; events per relist {:.1}",
        calls.iter().min().unwrap_or(&0),
        calls.iter().max().unwrap_or(&0),
        events as f64 / args.relists as f64
    );
    Ok(())
}

/// Relists of `idle_pods` pods where nothing changes, without latency: the loop's own cost.
async fn idle(args: &Args) -> Result<()> {
    let rt = FakeRuntime::with_images(&["busybox"]);
    populate(&rt, args.idle_pods).await?;
    let (mut pleg, mut rx) = new_pleg(&rt);
    pleg.relist().await?;
    drain(&mut rx);
    rt.clear_calls();
    let mut durations = Vec::with_capacity(args.idle_relists);
    let cpu_before = thread_cpu()?;
    let wall = Instant::now();
    for _ in 0..args.idle_relists {
        let start = Instant::now();
        pleg.relist().await?;
        durations.push(start.elapsed());
    }
    let wall = wall.elapsed();
    let cpu = thread_cpu()? - cpu_before;
    let calls = rt.calls().len();
    if drain(&mut rx) != 0 {
        bail!("an idle relist sent events");
    }
    durations.sort();
    let n = args.idle_relists as u32;
    println!(
        "idle: {} pods, {} relists, no latency",
        args.idle_pods, args.idle_relists
    );
    println!(
        "  relist duration p50 {}  p99 {}  mean {}",
        ms(percentile(&durations, 0.50)),
        ms(percentile(&durations, 0.99)),
        ms(wall / n)
    );
    println!(
        "  CPU per relist {} (fake runtime's listing included); CRI calls per relist {:.2}",
        ms(cpu / n),
        calls as f64 / f64::from(n)
    );
    Ok(())
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    rt.block_on(async {
        burst(&args).await?;
        idle(&args).await
    })
}
