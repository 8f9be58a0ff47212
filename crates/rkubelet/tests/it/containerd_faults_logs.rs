//! Fault matrix row 6 (issue 17): a fast log writer on the real containerd. A static pod whose
//! container writes as fast as busybox can, with `containerLogMaxSize: 1Mi`,
//! `containerLogMaxFiles: 2`, `containerLogMonitorInterval: 5s`; a second pod writes slowly.
//! The pod logs live on a tmpfs the test mounts (never the host disk), sampled every 100 ms:
//! the live file and the total stay bounded, never more than 2 files (plus a transient
//! `.tmp`), and the slow pod's log still rotates.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Kubelet, Tmpfs, cri, faults, phase, pod_containers, running, tail};

const IMAGE: &str = "docker.io/library/busybox:latest";
const MAX_SIZE: u64 = 1024 * 1024;

fn pod(name: &str, script: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: Always\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script:?}]\n"
    )
}

/// The kubelet first (its drop removes the pods and stops it), then the tmpfs.
struct Env {
    k: Kubelet,
    _logs: Tmpfs,
}

#[derive(Debug, Default, Clone, Copy)]
struct Sample {
    live: u64,
    total: u64,
    /// Files other than a compression's transient `.tmp`.
    files: usize,
}

fn sample(dir: &Path) -> Sample {
    let mut s = Sample::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return s;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(m) = e.metadata() else { continue };
        s.total += m.len();
        if !name.ends_with(".tmp") {
            s.files += 1;
        }
        if name == "0.log" {
            s.live = m.len();
        }
    }
    s
}

async fn log_dir(k: &Kubelet, name: &str) -> (String, PathBuf) {
    let p = k
        .wait_pod(name, Duration::from_secs(60), "Running", |p| {
            phase(p) == "Running" && running(p, "c")
        })
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let dir = k
        .logs()
        .join(format!("default_{name}-{}_{uid}", common::NODE))
        .join("c");
    (uid, dir)
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_writer_stays_within_its_log_limit() {
    let run_for = Duration::from_secs(faults::pick(30, 120));
    let k = Kubelet::new();
    let logs = Tmpfs::mount(&k.logs(), "256m");
    let mut env = Env { k, _logs: logs };
    env.k.append_config(
        "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 2\ncontainerLogMonitorInterval: 5s\n",
    );
    // The fastest busybox writer measured (see docs/reliability.md): long lines.
    // `RKUBELET_FAULTS_LOG_WRITER` runs another shell command instead (to compare writers).
    let fast = std::env::var("RKUBELET_FAULTS_LOG_WRITER")
        .unwrap_or_else(|_| "dd if=/dev/zero bs=1M 2>/dev/null | tr '\\000' x".to_owned());
    env.k.write_manifest("fast.yaml", &pod("fast", &fast));
    // ~200-byte lines, ~400 KB/s: rotates every few seconds by size, through the timer too.
    let slow = "pad=$(printf '%0200d' 0); while true; do i=0; while [ $i -lt 100 ]; do echo $pad; i=$((i+1)); done; usleep 50000; done";
    env.k.write_manifest("slow.yaml", &pod("slow", slow));
    env.k.start();
    let (fast_uid, fast_dir) = log_dir(&env.k, "fast").await;
    let (_, slow_dir) = log_dir(&env.k, "slow").await;

    let started = Instant::now();
    let (mut max_live, mut max_total, mut max_files) = (0u64, 0u64, 0usize);
    let mut slow_rotated = false;
    let mut samples = 0u32;
    let mut lives = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while started.elapsed() < run_for {
        tick.tick().await;
        let s = sample(&fast_dir);
        samples += 1;
        max_live = max_live.max(s.live);
        lives.push(s.live);
        max_total = max_total.max(s.total);
        max_files = max_files.max(s.files);
        let slow = sample(&slow_dir);
        assert!(slow.files <= 2, "slow pod: {} files", slow.files);
        slow_rotated |= slow.files == 2;
    }
    let elapsed = started.elapsed();
    lives.sort_unstable();
    let live_p = |p: usize| lives[(lives.len() - 1) * p / 100];
    let (live_p50, live_p99) = (live_p(50), live_p(99));
    // How fast the writer went: containerd's own count is gone with the rotated files, so
    // ask the kubelet log how many rotations it made of the fast container.
    let rt = cri().await;
    let fast_ids: Vec<String> = pod_containers(&rt, &fast_uid)
        .await
        .into_iter()
        .map(|c| c.id)
        .collect();
    let log = env.k.log_text();
    // Each rotation logs the size it found and how long rename + reopen took.
    let field = |l: &str, key: &str| -> Option<u64> {
        let at = l.find(key)? + key.len();
        l[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let (mut rotations, mut rotated_bytes, mut took) = (0u64, 0u64, Vec::new());
    for l in log.lines().filter(|l| {
        l.contains("rotated container log") && fast_ids.iter().any(|id| l.contains(id.as_str()))
    }) {
        rotations += 1;
        rotated_bytes += field(l, "size=").unwrap_or(MAX_SIZE);
        took.extend(field(l, "took_us="));
    }
    // The kubelet's complaints about log rotation, if any (they explain a large figure).
    for l in log
        .lines()
        .filter(|l| l.contains("rotat") && (l.starts_with('W') || l.starts_with('E')))
        .take(20)
    {
        eprintln!("kubelet: {l}");
    }
    took.sort_unstable();
    let pct = |p: usize| {
        took.get(took.len().saturating_sub(1) * p / 100)
            .copied()
            .unwrap_or(0)
    };
    let (took_p50, took_max) = (pct(50), pct(100));
    let rate = rotated_bytes as f64 / elapsed.as_secs_f64();
    eprintln!(
        "row 6: {samples} samples over {elapsed:?}; {rotations} rotations of the fast log (≥ {:.1} MB/s), rename+reopen p50 {took_p50} µs max {took_max} µs; live p50 {:.2} MB p99 {:.2} MB max {:.2} MB, max total {:.2} MB, max files {max_files}; slow pod rotated: {slow_rotated}",
        rate / 1e6,
        mb(live_p50),
        mb(live_p99),
        mb(max_live),
        mb(max_total)
    );
    assert!(
        rotations as f64 >= run_for.as_secs_f64(),
        "the fast writer rotated only {rotations} times in {elapsed:?}: not a fast writer\n{}",
        tail(&log, 40)
    );
    // The bound: the live file overshoots 1 MiB by what the writer writes during the reaction
    // (inotify event → size check → rename → ReopenContainerLog). The reaction is a few ms
    // (rename + reopen p50 ≈ 2 ms) but its tail is the kubelet waiting for a CPU: measured up
    // to ~0.4 s on 2 cores at load 15 (other builds and tests). A 1 s budget at the measured
    // rate, plus 8 MiB of slack for the rate being a lower bound, holds on such a machine; the
    // total is two such files. Main (timer only) reached 234 MB + 65 MB at a lower rate.
    let live_bound = MAX_SIZE + rate as u64 + 8 * MAX_SIZE;
    assert!(
        max_live <= live_bound,
        "live log reached {max_live} bytes (bound {live_bound})"
    );
    assert!(
        max_total <= 2 * live_bound,
        "logs reached {max_total} bytes (bound {})",
        2 * live_bound
    );
    assert!(
        max_files <= 2,
        "{max_files} log files with containerLogMaxFiles 2"
    );
    assert!(
        slow_rotated,
        "the slow pod's log never rotated\n{}",
        tail(&log, 40)
    );
    faults::report(
        "6",
        &format!(
            "a container writing as fast as busybox can (`{fast}`), containerLogMaxSize 1Mi, MaxFiles 2, MonitorInterval 5s, plus a slow writer"
        ),
        "live file and total bounded, <= 2 files, other pods rotate",
        &format!(
            "writer >= {:.1} MB/s ({rotations} rotations in {:.0} s, rename+reopen p50 {:.1} ms max {:.1} ms); live p50 {:.2} MB p99 {:.2} MB max {:.2} MB, max total {:.2} MB, max files {max_files} (sampled every 100 ms)",
            rate / 1e6,
            elapsed.as_secs_f64(),
            took_p50 as f64 / 1e3,
            took_max as f64 / 1e3,
            mb(live_p50),
            mb(live_p99),
            mb(max_live),
            mb(max_total)
        ),
    );
}
