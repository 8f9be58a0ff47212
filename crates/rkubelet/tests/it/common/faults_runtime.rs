//! The runtime rows of the fault matrix (issue 17, rows 2 and 4): a containerd of the test's own
//! (`dev/runtime.sh` with its own dev dir, so the shared dev containerd is never stopped), which
//! the test can kill with SIGTERM or SIGKILL and start again; a kubelet on any CRI endpoint; and
//! readers of the kubelet's PLEG gauge and health endpoint.
//!
//! Receives: the dev dir to use. Emits: the endpoint, pids, times. Drop runs `dev/runtime.sh
//! down` for that dev dir (pods, shims, mounts, bridge; cached images stay on disk).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rkubelet_cri::{RemoteRuntime, RuntimeService};

use super::{Kubelet, NODE};

/// The dev dir of the fault tests' own containerd (never the shared /tmp/rkubelet-dev).
pub const DEV_DIR: &str = "/tmp/rkubelet-faults-rt";

fn runtime_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dev/runtime.sh")
}

/// A containerd started by `dev/runtime.sh up` in its own dev dir.
pub struct OwnContainerd {
    dir: PathBuf,
    endpoint: String,
}

impl OwnContainerd {
    /// Brings the daemon up (packages, config, images, containerd) and waits until its CRI
    /// server answers `Version` (`dev/runtime.sh up` returns once the CRI plugin is loaded,
    /// which can be before the server is initialized); panics when it cannot.
    pub async fn up(dir: &str) -> Self {
        assert_ne!(
            Path::new(dir),
            Path::new("/tmp/rkubelet-dev"),
            "the fault tests never drive the shared dev containerd"
        );
        let mut c = Self {
            dir: PathBuf::from(dir),
            endpoint: String::new(),
        };
        c.endpoint = c.script("up");
        assert!(
            c.endpoint.starts_with("unix://"),
            "dev/runtime.sh up printed {:?} as its last line",
            c.endpoint
        );
        c.wait_answering(Duration::from_secs(60)).await;
        c
    }

    /// Runs `dev/runtime.sh CMD` for this dev dir; the last stdout line (panics on failure).
    fn script(&self, cmd: &str) -> String {
        run_script(&self.dir, cmd)
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// The daemon's pid (from its pid file, checked against /proc).
    pub fn pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.dir.join("containerd.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        exe.to_string_lossy()
            .ends_with("/containerd")
            .then_some(pid)
    }

    /// Sends `sig` (`TERM`, `KILL`) to the daemon and waits until it is gone.
    pub fn kill(&self, sig: &str) {
        let pid = self.pid().expect("containerd is running");
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {pid}: {status}");
        let start = Instant::now();
        while Path::new(&format!("/proc/{pid}/exe")).exists()
            && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok()
        {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "containerd (pid {pid}) still alive 30 s after SIGTERM/SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the daemon again (`dev/runtime.sh up`: idempotent, reuses cached images) on a
    /// blocking thread, so the caller can watch for the first answer meanwhile; await the
    /// handle for the script's end.
    pub fn start(&self) -> tokio::task::JoinHandle<()> {
        let dir = self.dir.clone();
        let endpoint = self.endpoint.clone();
        tokio::task::spawn_blocking(move || assert_eq!(run_script(&dir, "up"), endpoint))
    }

    /// Pids of the shims serving this containerd.
    pub fn shims(&self) -> Vec<u32> {
        let sock = self.socket();
        let sock = sock.to_string_lossy();
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(exe) = std::fs::read_link(e.path().join("exe")) else {
                continue;
            };
            if !exe.to_string_lossy().contains("containerd-shim") {
                continue;
            }
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if cmdline.split(|b| *b == 0).any(|a| a == sock.as_bytes()) {
                out.push(pid);
            }
        }
        out.sort_unstable();
        out
    }

    /// Polls CRI `Version` on a fresh connection until the daemon answers: the instant it did.
    pub async fn wait_answering(&self, timeout: Duration) -> (Instant, SystemTime) {
        let start = Instant::now();
        loop {
            if let Ok(rt) = RemoteRuntime::connect(&self.endpoint, Duration::from_secs(2)).await
                && rt
                    .version(rkubelet_cri::api::VersionRequest::default())
                    .await
                    .is_ok()
            {
                return (Instant::now(), SystemTime::now());
            }
            assert!(
                start.elapsed() < timeout,
                "containerd at {} did not answer Version within {timeout:?}",
                self.endpoint
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn cri(&self) -> RemoteRuntime {
        RemoteRuntime::connect(&self.endpoint, Duration::from_secs(30))
            .await
            .expect("connect to the test's own containerd")
    }
}

/// Runs `dev/runtime.sh CMD` with dev dir `dir`: the last stdout line (panics on failure).
fn run_script(dir: &Path, cmd: &str) -> String {
    let out = Command::new(runtime_sh())
        .arg(cmd)
        .env("RKUBELET_DEV_DIR", dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run dev/runtime.sh {cmd}: {e}"));
    assert!(
        out.status.success(),
        "dev/runtime.sh {cmd} (RKUBELET_DEV_DIR={}) failed: {}\nstdout:\n{}\nstderr:\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

impl Drop for OwnContainerd {
    fn drop(&mut self) {
        let out = Command::new(runtime_sh())
            .arg("down")
            .env("RKUBELET_DEV_DIR", &self.dir)
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "dev/runtime.sh down (RKUBELET_DEV_DIR={}) failed: {}\n{}",
                self.dir.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("run dev/runtime.sh down: {e}"),
        }
    }
}

impl Kubelet {
    /// `start`, but on the CRI endpoint `endpoint` (the test's own containerd or a CRI proxy)
    /// instead of the shared dev containerd; `envs` go to the kubelet's environment.
    pub fn start_on(&mut self, endpoint: &str, envs: &[(&str, &str)]) {
        assert!(self.child.is_none(), "already running");
        self.shield_from_host_disk();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rkubelet"));
        cmd.arg("--config")
            .arg(self.dir.path().join("config.yaml"))
            .arg("--container-runtime-endpoint")
            .arg(endpoint)
            .arg("--root-dir")
            .arg(self.root())
            .arg("--hostname-override")
            .arg(NODE)
            .arg("--v")
            .arg("4")
            .args(&self.extra_args)
            .env("RUST_LOG", super::KUBELET_LOG_FILTER);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        self.start_command(cmd);
    }

    /// `kubelet_pleg_last_seen_seconds` from `/metrics` on the read-only port (whole seconds
    /// since the epoch at which the last successful relist started).
    pub async fn pleg_last_seen(&self) -> Option<u64> {
        let (code, body) = self.get(self.port, "/metrics").await?;
        if code != 200 {
            return None;
        }
        body.lines()
            .find_map(|l| l.strip_prefix("kubelet_pleg_last_seen_seconds "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    }

    /// `GET /healthz` on the healthz port: status code and body.
    pub async fn healthz(&self) -> Option<(u16, String)> {
        self.get(self.healthz_port, "/healthz").await
    }
}

/// Seconds since the epoch of `t`.
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}
