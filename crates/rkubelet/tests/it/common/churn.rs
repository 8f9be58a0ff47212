//! Churn and leak-accounting tools for the kubelet fault rows (issue 17 rows 1, 7, 8): a seeded
//! random source for fault moments, the runtime's view of one test's pods (by pod-name prefix,
//! straight from CRI), the node-side traces a pod leaves (mounts under the root dir, pod
//! cgroups under the kubelet's `cgroupRoot`, `<root>/pods/<uid>` dirs), a watcher that records
//! any duplicated sandbox or container while faults happen, and a guard that removes the test's
//! pods from the runtime even when the test fails.
//!
//! Receives: a `RemoteRuntime`, a pod-name prefix unique to the test, the test kubelet's dirs.
//! Emits: snapshots and counts; panics (with the kubelet log) only in the `wait_*` helpers.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rkubelet_cri::RemoteRuntime;
use rkubelet_cri::RuntimeService;
use rkubelet_cri::api::{
    ContainerState, ListContainersRequest, ListPodSandboxRequest, PodSandboxState,
    RemovePodSandboxRequest, StopPodSandboxRequest,
};

use crate::common::{Kubelet, tail};

/// A small seeded generator (SplitMix64): fault moments are reproducible from the printed seed.
pub struct Rng {
    state: u64,
    /// The seed this generator started from (print it with the figures).
    pub seed: u64,
}

impl Rng {
    /// Seeded from `RKUBELET_FAULTS_SEED` when set (to replay a run), else from the clock; the
    /// seed is printed either way.
    pub fn from_env(what: &str) -> Self {
        let seed = std::env::var("RKUBELET_FAULTS_SEED")
            .ok()
            .map(|s| {
                s.parse::<u64>()
                    .unwrap_or_else(|_| panic!("RKUBELET_FAULTS_SEED must be a u64, not {s:?}"))
            })
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{what}: seed {seed} (replay with RKUBELET_FAULTS_SEED={seed})");
        Self { state: seed, seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A duration uniform in `lo..hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo))
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One sandbox of the test's pods as the runtime reports it.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub id: String,
    pub name: String,
    pub uid: String,
    pub attempt: u32,
    pub ready: bool,
}

/// One container of the test's pods as the runtime reports it.
#[derive(Debug, Clone)]
pub struct Ctr {
    pub id: String,
    pub pod_name: String,
    pub uid: String,
    pub name: String,
    pub sandbox: String,
    pub running: bool,
}

/// The runtime's sandboxes and containers whose pod name starts with the test's prefix.
#[derive(Debug, Clone, Default)]
pub struct View {
    pub sandboxes: Vec<Sandbox>,
    pub containers: Vec<Ctr>,
}

impl View {
    pub fn ready_sandboxes(&self, pod_name: &str) -> Vec<&Sandbox> {
        self.sandboxes
            .iter()
            .filter(|s| s.name == pod_name && s.ready)
            .collect()
    }

    pub fn running(&self, pod_name: &str) -> Vec<&Ctr> {
        self.containers
            .iter()
            .filter(|c| c.pod_name == pod_name && c.running)
            .collect()
    }

    /// Duplicates: a pod UID with more than one ready sandbox, or a container name of a pod
    /// UID with more than one running container.
    pub fn duplicates(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut sandboxes: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for s in self.sandboxes.iter().filter(|s| s.ready) {
            sandboxes.entry(&s.uid).or_default().push(&s.id);
        }
        for (uid, ids) in sandboxes.iter().filter(|(_, ids)| ids.len() > 1) {
            out.push(format!("pod {uid}: {} ready sandboxes {ids:?}", ids.len()));
        }
        let mut containers: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for c in self.containers.iter().filter(|c| c.running) {
            containers.entry((&c.uid, &c.name)).or_default().push(&c.id);
        }
        for ((uid, name), ids) in containers.iter().filter(|(_, ids)| ids.len() > 1) {
            out.push(format!(
                "pod {uid} container {name}: {} running {ids:?}",
                ids.len()
            ));
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.sandboxes.is_empty() && self.containers.is_empty()
    }
}

/// Everything the runtime has for pods named `prefix*`.
pub async fn view(rt: &RemoteRuntime, prefix: &str) -> View {
    let sandboxes = rt
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .expect("ListPodSandbox")
        .items
        .into_iter()
        .filter_map(|s| {
            let m = s.metadata?;
            m.name.starts_with(prefix).then_some(Sandbox {
                id: s.id,
                name: m.name,
                uid: m.uid,
                attempt: m.attempt,
                ready: s.state == PodSandboxState::SandboxReady as i32,
            })
        })
        .collect();
    let containers = rt
        .list_containers(ListContainersRequest { filter: None })
        .await
        .expect("ListContainers")
        .containers
        .into_iter()
        .filter_map(|c| {
            let pod_name = c.labels.get("io.kubernetes.pod.name")?.clone();
            if !pod_name.starts_with(prefix) {
                return None;
            }
            Some(Ctr {
                id: c.id,
                uid: c
                    .labels
                    .get("io.kubernetes.pod.uid")
                    .cloned()
                    .unwrap_or_default(),
                pod_name,
                name: c.metadata.map(|m| m.name).unwrap_or_default(),
                sandbox: c.pod_sandbox_id,
                running: c.state == ContainerState::ContainerRunning as i32,
            })
        })
        .collect();
    View {
        sandboxes,
        containers,
    }
}

/// Stops and removes every sandbox (with its containers) of pods named `prefix*`: what a
/// reboot does to the runtime's pods, and the clean-up of a failed test.
pub async fn remove_pods(rt: &RemoteRuntime, prefix: &str) -> usize {
    let v = view(rt, prefix).await;
    for s in &v.sandboxes {
        let _ = rt
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: s.id.clone(),
            })
            .await;
        let _ = rt
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: s.id.clone(),
            })
            .await;
    }
    v.sandboxes.len()
}

/// Mount points at or below `root` (this process's mount table: the kubelet runs in the same
/// mount namespace).
pub fn mounts_under(root: &Path) -> Vec<String> {
    let root = root.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| m.replace("\\040", " "))
        .filter(|m| *m == root || m.starts_with(&format!("{root}/")))
        .collect()
}

/// Pod cgroups (`pod<uid>` directories, any depth) under the kubelet's `cgroupRoot`, in every
/// hierarchy, as `<hierarchy>/<path>`.
pub fn pod_cgroups(cgroup_root: &str) -> BTreeSet<String> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("pod") {
                out.insert(
                    p.strip_prefix(base)
                        .unwrap_or(&p)
                        .to_string_lossy()
                        .into_owned(),
                );
            }
            walk(&p, base, out);
        }
    }
    let rel = cgroup_root.trim_start_matches('/');
    let base = Path::new("/sys/fs/cgroup");
    let mut out = BTreeSet::new();
    walk(&base.join(rel), base, &mut out);
    if let Ok(entries) = std::fs::read_dir(base) {
        for e in entries.flatten() {
            walk(&e.path().join(rel), base, &mut out);
        }
    }
    out
}

/// The per-pod directories under `<root>/pods`.
pub fn pod_dirs(root: &Path) -> Vec<String> {
    std::fs::read_dir(root.join("pods"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// What a set of pods left on the node: runtime objects, mounts, pod cgroups, pod dirs.
#[derive(Debug, Default)]
pub struct Traces {
    pub runtime: View,
    pub mounts: Vec<String>,
    pub cgroups: BTreeSet<String>,
    pub dirs: Vec<String>,
}

impl Traces {
    pub fn is_empty(&self) -> bool {
        self.runtime.is_empty()
            && self.mounts.is_empty()
            && self.cgroups.is_empty()
            && self.dirs.is_empty()
    }
}

pub async fn traces(k: &Kubelet, rt: &RemoteRuntime, prefix: &str) -> Traces {
    Traces {
        runtime: view(rt, prefix).await,
        mounts: mounts_under(&k.root()),
        cgroups: pod_cgroups(&k.cgroup_root),
        dirs: pod_dirs(&k.root()),
    }
}

/// Waits until the node holds no trace of any pod (all manifests removed); returns how long
/// it took, and prints when each kind of trace went. Panics with what is left and the kubelet
/// log.
pub async fn wait_no_traces(
    k: &Kubelet,
    rt: &RemoteRuntime,
    prefix: &str,
    timeout: Duration,
) -> Duration {
    let start = Instant::now();
    let mut gone: BTreeMap<&str, f64> = BTreeMap::new();
    loop {
        let t = traces(k, rt, prefix).await;
        let now = start.elapsed().as_secs_f64();
        for (kind, empty) in [
            ("containers", t.runtime.containers.is_empty()),
            ("sandboxes", t.runtime.sandboxes.is_empty()),
            ("mounts", t.mounts.is_empty()),
            ("pod cgroups", t.cgroups.is_empty()),
            ("pod dirs", t.dirs.is_empty()),
        ] {
            if empty {
                gone.entry(kind).or_insert(now);
            } else {
                gone.remove(kind);
            }
        }
        if t.is_empty() {
            eprintln!("traces gone after (s): {gone:?}");
            return start.elapsed();
        }
        assert!(
            start.elapsed() < timeout,
            "leftovers {timeout:?} after the last pod went: {t:#?}\nkubelet log tail:\n{}",
            tail(&k.log_text(), 80)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Samples the runtime every 250 ms in the background and records every duplicate it sees
/// (two ready sandboxes for one pod, two running containers for one container of a pod).
pub struct DupWatch {
    seen: Arc<Mutex<Vec<String>>>,
    samples: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl DupWatch {
    pub fn start(prefix: &str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let samples = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let prefix = prefix.to_owned();
        let (s, n) = (seen.clone(), samples.clone());
        let task = tokio::spawn(async move {
            let rt = crate::common::cri().await;
            loop {
                let dups = view(&rt, &prefix).await.duplicates();
                if !dups.is_empty() {
                    s.lock().unwrap().extend(dups);
                }
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Self {
            seen,
            samples,
            task,
        }
    }

    /// Stops sampling; the duplicates seen and the number of samples taken.
    pub async fn finish(self) -> (Vec<String>, u64) {
        self.task.abort();
        let _ = self.task.await;
        let seen = self.seen.lock().unwrap().clone();
        (
            seen,
            self.samples.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

/// Removes the test's pods from the runtime when dropped (a failed test must not leave pods
/// behind for the next one; a passing test has none left, so this is a no-op then).
pub struct RuntimeSweep(pub String);

impl Drop for RuntimeSweep {
    fn drop(&mut self) {
        let prefix = self.0.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let cri = crate::common::cri().await;
                remove_pods(&cri, &prefix).await;
            });
        })
        .join();
    }
}

/// p50 and max of durations, in seconds.
pub fn p50_max(d: &[Duration]) -> (f64, f64) {
    let mut s: Vec<f64> = d.iter().map(Duration::as_secs_f64).collect();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return (0.0, 0.0);
    }
    (s[(s.len() - 1) / 2], s[s.len() - 1])
}
