//! Fault matrix row 1 (issue 17): the kubelet killed with `kill -9` at random moments while
//! static pods are created, deleted, crash-looping and probed (exec and HTTP), on the real
//! containerd. Checked behind the kubelet's back through CRI and through `/pods`: the stable
//! pods keep the very containers they started with (same IDs, same restart counts) across
//! every kill; no pod is lost or duplicated (one ready sandbox per desired pod, never two
//! running containers for one container of a pod, sampled every 250 ms the whole run); every
//! pod converges after each restart (time recorded); and once the manifests are gone nothing
//! is left: no sandboxes or containers, mounts under the root dir, pod cgroups under the
//! kubelet's `cgroupRoot` or `<root>/pods` directories.
//!
//! Kill moments come from a seeded generator (seed printed; `RKUBELET_FAULTS_SEED` replays).
//! Short form: 3 kills; full form (`RKUBELET_FAULTS=full`): 20.

use crate::common;
use crate::common::churn;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use churn::{DupWatch, Rng, RuntimeSweep};
use common::{Kubelet, NODE, cri, faults, tail};
use serde_json::Value;

const IMAGE: &str = "docker.io/library/busybox:latest";
const PREFIX: &str = "fk1-";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Must keep its containers across every kill.
    Stable,
    /// Exits 1 forever under `restartPolicy: Always`.
    Crash,
    /// Created and deleted by the churn.
    Churn,
}

fn manifest(name: &str, restart: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {restart}\n  terminationGracePeriodSeconds: 1\n{spec}"
    )
}

fn ctr(name: &str, script: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script:?}]\n{extra}"
    )
}

const MEM_VOLUME: &str = "  volumes:\n  - name: mem\n    emptyDir:\n      medium: Memory\n";
const MEM_MOUNT: &str = "    volumeMounts:\n    - name: mem\n      mountPath: /mem\n";

/// The stable pods: exec probes, HTTP probes, an init container with a tmpfs emptyDir.
fn stable_pods() -> Vec<(String, String)> {
    let exec = manifest(
        "fk1-exec",
        "Always",
        &format!(
            "  containers:\n{}",
            ctr(
                "c",
                "touch /tmp/ready; exec sleep 36000",
                "    livenessProbe:\n      exec: {command: [\"true\"]}\n      periodSeconds: 1\n    readinessProbe:\n      exec: {command: [\"cat\", \"/tmp/ready\"]}\n      periodSeconds: 1\n",
            )
        ),
    );
    let http = manifest(
        "fk1-http",
        "Always",
        &format!(
            "  containers:\n{}",
            ctr(
                "c",
                "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www",
                "    ports:\n    - {name: http, containerPort: 8080}\n    livenessProbe:\n      httpGet: {path: /index.html, port: http}\n      periodSeconds: 1\n    readinessProbe:\n      httpGet: {path: /index.html, port: http}\n      periodSeconds: 1\n",
            )
        ),
    );
    let mem = manifest(
        "fk1-mem",
        "Always",
        &format!(
            "{MEM_VOLUME}  initContainers:\n{}  containers:\n{}",
            ctr("init", "echo init > /mem/init", MEM_MOUNT),
            ctr("c", "exec sleep 36000", MEM_MOUNT)
        ),
    );
    vec![
        ("fk1-exec".into(), exec),
        ("fk1-http".into(), http),
        ("fk1-mem".into(), mem),
    ]
}

fn crash_pod() -> String {
    manifest(
        "fk1-crash",
        "Always",
        &format!("  containers:\n{}", ctr("c", "exit 1", "")),
    )
}

/// A churn pod; every other one has a tmpfs emptyDir and an exec readiness probe.
fn churn_pod(name: &str, n: u32) -> String {
    if n.is_multiple_of(2) {
        manifest(
            name,
            "Always",
            &format!("  containers:\n{}", ctr("c", "exec sleep 36000", "")),
        )
    } else {
        manifest(
            name,
            "Always",
            &format!(
                "{MEM_VOLUME}  containers:\n{}",
                ctr(
                    "c",
                    "exec sleep 36000",
                    &format!(
                        "{MEM_MOUNT}    readinessProbe:\n      exec: {{command: [\"true\"]}}\n      periodSeconds: 1\n"
                    )
                )
            ),
        )
    }
}

fn full(name: &str) -> String {
    format!("{name}-{NODE}")
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// `(containerID, restartCount)` per container name, from `/pods`.
fn ids(p: &Value) -> BTreeMap<String, (String, u64)> {
    p["status"]["containerStatuses"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| {
                    Some((
                        c["name"].as_str()?.to_owned(),
                        (
                            c["containerID"].as_str()?.to_owned(),
                            c["restartCount"].as_u64().unwrap_or(0),
                        ),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The churn's state: which manifests exist, and counts.
struct Churn {
    desired: BTreeMap<String, Kind>,
    seq: u32,
    created: u32,
    deleted: u32,
}

impl Churn {
    /// One random change: a new churn pod, or a churn pod deleted.
    fn step(&mut self, k: &Kubelet, rng: &mut Rng) {
        let live: Vec<String> = self
            .desired
            .iter()
            .filter(|(_, kind)| **kind == Kind::Churn)
            .map(|(n, _)| n.clone())
            .collect();
        if live.len() < 2 || (live.len() < 6 && rng.chance(55)) {
            self.seq += 1;
            let name = format!("fk1-c{}", self.seq);
            k.write_manifest(&format!("{name}.yaml"), &churn_pod(&name, self.seq));
            self.desired.insert(name, Kind::Churn);
            self.created += 1;
        } else {
            let name = live[rng.below(live.len() as u64) as usize].clone();
            k.remove_manifest(&format!("{name}.yaml"));
            self.desired.remove(&name);
            self.deleted += 1;
        }
    }
}

/// Whether every pod is in its desired state (`Err` says what is not yet). Panics at once on
/// what no amount of waiting repairs: a stable container replaced or restarted.
async fn converged(
    k: &Kubelet,
    rt: &rkubelet_cri::RemoteRuntime,
    desired: &BTreeMap<String, Kind>,
    stable: &BTreeMap<String, BTreeMap<String, (String, u64)>>,
) -> Result<(), String> {
    let pods = k.pods().await;
    if pods.is_empty() {
        return Err("no pods in /pods yet".into());
    }
    let by_name: BTreeMap<&str, &Value> = pods
        .iter()
        .filter_map(|p| Some((p["metadata"]["name"].as_str()?, p)))
        .filter(|(n, _)| n.starts_with(PREFIX))
        .collect();
    for (name, kind) in desired {
        let Some(p) = by_name.get(full(name).as_str()) else {
            return Err(format!("{name} missing from /pods"));
        };
        if *kind != Kind::Crash && !ready(p) {
            return Err(format!("{name} not Ready"));
        }
        if let Some(want) = stable.get(name) {
            for (c, (id, restarts)) in ids(p) {
                let (want_id, want_restarts) = &want[&c];
                assert!(
                    id == *want_id && restarts == *want_restarts,
                    "stable pod {name} container {c}: was {want_id} restartCount {want_restarts}, now {id} restartCount {restarts}\n{}",
                    tail(&k.log_text(), 80)
                );
            }
        }
    }
    for n in by_name.keys() {
        let manifest = n.trim_end_matches(&format!("-{NODE}"));
        if !desired.contains_key(manifest) {
            return Err(format!("deleted pod {n} still in /pods"));
        }
    }
    let v = churn::view(rt, PREFIX).await;
    let dups = v.duplicates();
    assert!(dups.is_empty(), "duplicated in the runtime: {dups:?}");
    for (name, kind) in desired {
        let f = full(name);
        let sandboxes = v.ready_sandboxes(&f);
        if sandboxes.len() != 1 {
            return Err(format!("{name}: {} ready sandboxes", sandboxes.len()));
        }
        if *kind != Kind::Crash && v.running(&f).is_empty() {
            return Err(format!("{name}: no running container in the runtime"));
        }
        if let Some(want) = stable.get(name) {
            for (c, (id, _)) in want {
                let id = id.trim_start_matches("containerd://");
                assert!(
                    v.running(&f).iter().any(|r| r.name == *c && r.id == id),
                    "stable container {name}/{c} ({id}) no longer running in the runtime: {:?}",
                    v.containers
                        .iter()
                        .filter(|x| x.pod_name == f)
                        .collect::<Vec<_>>()
                );
            }
        }
    }
    let wanted: Vec<String> = desired.keys().map(|n| full(n)).collect();
    if let Some(s) = v
        .sandboxes
        .iter()
        .find(|s| s.ready && !wanted.contains(&s.name))
    {
        return Err(format!("deleted pod {} still has a ready sandbox", s.name));
    }
    if let Some(c) = v
        .containers
        .iter()
        .find(|c| c.running && !wanted.contains(&c.pod_name))
    {
        return Err(format!(
            "deleted pod {} still has a running container",
            c.pod_name
        ));
    }
    Ok(())
}

async fn wait_converged(
    k: &Kubelet,
    rt: &rkubelet_cri::RemoteRuntime,
    desired: &BTreeMap<String, Kind>,
    stable: &BTreeMap<String, BTreeMap<String, (String, u64)>>,
    timeout: Duration,
) -> (Duration, String) {
    let start = Instant::now();
    let mut waited_for = String::new();
    loop {
        let why = match converged(k, rt, desired, stable).await {
            Ok(()) => return (start.elapsed(), waited_for),
            Err(why) => why,
        };
        waited_for.clone_from(&why);
        assert!(
            start.elapsed() < timeout,
            "not converged {timeout:?} after the restart: {why}\ndesired: {desired:?}\nkubelet log tail:\n{}",
            tail(&k.log_text(), 80)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_kill9_during_churn_keeps_pods_and_leaves_nothing() {
    let mut rng = Rng::from_env("row 1 (kubelet kill -9 during churn)");
    let kills = faults::pick(3, 20);
    let rt = cri().await;
    let _sweep = RuntimeSweep(PREFIX.into());
    churn::remove_pods(&rt, PREFIX).await;

    let mut k = Kubelet::new();
    let mut churn = Churn {
        desired: BTreeMap::new(),
        seq: 0,
        created: 0,
        deleted: 0,
    };
    for (name, yaml) in stable_pods() {
        k.write_manifest(&format!("{name}.yaml"), &yaml);
        churn.desired.insert(name, Kind::Stable);
    }
    k.write_manifest("fk1-crash.yaml", &crash_pod());
    churn.desired.insert("fk1-crash".into(), Kind::Crash);
    k.start();
    wait_converged(
        &k,
        &rt,
        &churn.desired,
        &BTreeMap::new(),
        Duration::from_secs(120),
    )
    .await;
    let mut stable = BTreeMap::new();
    for (name, kind) in &churn.desired {
        if *kind == Kind::Stable {
            let p = k.pod(name).await.unwrap();
            let got = ids(&p);
            assert!(!got.is_empty(), "{name} has no container IDs: {p}");
            stable.insert(name.clone(), got);
        }
    }

    let watch = DupWatch::start(PREFIX);
    let mut converge = Vec::new();
    for i in 0..kills {
        // Churn for a random while, then kill at a random moment after the last change.
        let until = Instant::now() + rng.millis(1_000, 6_000);
        loop {
            churn.step(&k, &mut rng);
            let pause = rng.millis(50, 1_200);
            if Instant::now() + pause >= until {
                tokio::time::sleep(rng.millis(0, 600)).await;
                break;
            }
            tokio::time::sleep(pause).await;
        }
        k.kill9();
        // Half the time a manifest changes while the kubelet is down.
        if rng.chance(50) {
            churn.step(&k, &mut rng);
        }
        k.start();
        let restarted_at = chrono::Utc::now().format("%H:%M:%S%.3f");
        let (took, last) =
            wait_converged(&k, &rt, &churn.desired, &stable, Duration::from_secs(90)).await;
        eprintln!(
            "kill {}/{kills}: converged {:.1}s after the restart ({} pods desired; last waited for: {last})",
            i + 1,
            took.as_secs_f64(),
            churn.desired.len()
        );
        if took > Duration::from_secs(8) {
            eprintln!(
                "kill {}: slow convergence, restarted at {restarted_at} (kubelet log {})",
                i + 1,
                k.log_file().display()
            );
        }
        converge.push(took);
    }
    let (dups, samples) = watch.finish().await;
    assert!(
        dups.is_empty(),
        "duplicated pods/containers seen during the run: {dups:?}"
    );

    // Churn stops; every manifest goes; nothing may be left.
    for name in churn.desired.keys() {
        k.remove_manifest(&format!("{name}.yaml"));
    }
    let clean = churn::wait_no_traces(&k, &rt, PREFIX, Duration::from_secs(120)).await;
    // `RKUBELET_FAULTS_KEEP_LOG=PATH` keeps the kubelet log of the run for a closer look.
    if let Some(keep) = std::env::var_os("RKUBELET_FAULTS_KEEP_LOG") {
        let _ = std::fs::copy(k.log_file(), keep);
    }
    let (p50, max) = churn::p50_max(&converge);
    faults::report(
        "1",
        &format!(
            "kubelet kill -9 ×{kills} at random moments (seed {}) during churn: {} static pods created, {} deleted, 1 crash-looping, exec+HTTP probes",
            rng.seed, churn.created, churn.deleted
        ),
        &format!(
            "stable containers kept (same IDs, restartCount) across every kill; one ready sandbox per pod and no duplicate ({samples} runtime samples); converged after each restart; no sandbox/container/mount/pod cgroup/pod dir left after deletion"
        ),
        &format!(
            "0 restarts / {kills} kills; converge p50 {p50:.1} s max {max:.1} s; all traces gone {:.1} s after the last manifest",
            clean.as_secs_f64()
        ),
    );
    k.stop();
}
