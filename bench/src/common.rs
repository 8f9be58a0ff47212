//! Helpers shared by the `podstart`, `apistart` and `scrape` benchmarks: percentiles, `/proc`
//! readers, a child-process guard, CRI sandbox clean-up by label and a plain-HTTP GET.

// Each benchmark binary compiles this module and uses a different subset of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rkubelet_cri::api::{
    ListPodSandboxRequest, PodSandboxFilter, RemovePodSandboxRequest, StopPodSandboxRequest,
};
use rkubelet_cri::{RemoteRuntime, RuntimeService};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Parses `--counts 1,10,30`.
pub fn parse_counts(s: &str) -> Result<Vec<usize>> {
    s.split(',')
        .map(|s| {
            s.trim()
                .parse()
                .context("--counts: expected numbers like 1,10,30")
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// (p50, p99) of the samples (nearest rank).
pub fn summary(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (percentile(&v, 50.0), percentile(&v, 99.0))
}

/// A `kB` field of `/proc/<pid>/status`, e.g. `VmHWM` or `VmRSS`.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A child process that gets SIGTERM (and is waited for) when dropped.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

async fn sandboxes_with_label(
    rt: &RemoteRuntime,
    key: &str,
    value: &str,
) -> Result<Vec<rkubelet_cri::api::PodSandbox>> {
    Ok(rt
        .list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(PodSandboxFilter {
                label_selector: HashMap::from([(key.to_owned(), value.to_owned())]),
                ..Default::default()
            }),
        })
        .await?
        .items)
}

/// Stops and removes every sandbox labelled `key=value`; returns how many there were.
pub async fn remove_sandboxes(rt: &RemoteRuntime, key: &str, value: &str) -> Result<usize> {
    let list = sandboxes_with_label(rt, key, value).await?;
    let n = list.len();
    let jobs = list.into_iter().map(|sb| async move {
        let _ = rt
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: sb.id.clone(),
            })
            .await;
        let _ = rt
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: sb.id,
            })
            .await;
    });
    futures::future::join_all(jobs).await;
    Ok(n)
}

/// Waits up to `timeout` until no sandbox is labelled `key=value`; false if some are left.
pub async fn wait_sandboxes_gone(
    rt: &RemoteRuntime,
    key: &str,
    value: &str,
    timeout: Duration,
) -> Result<bool> {
    let t = Instant::now();
    loop {
        if sandboxes_with_label(rt, key, value).await?.is_empty() {
            return Ok(true);
        }
        if t.elapsed() >= timeout {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A plain-HTTP GET on 127.0.0.1 (the kubelet's read-only port); the body (de-chunked), or
/// `None` when the connection fails or the response is not HTTP.
pub async fn http_get(port: u16, path: &str) -> Option<String> {
    http_get_status(port, path).await.map(|(_, body)| body)
}

/// [`http_get`] with the response's status code.
pub async fn http_get_status(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    if !chunked {
        return Some((status, body.to_owned()));
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if n == 0 {
            break;
        }
        out.push_str(after.get(..n)?);
        rest = after.get(n + 2..)?;
    }
    Some((status, out))
}

/// A standalone release `rkubelet` under `dir`: static pods from `manifests`, the read-only
/// port on `port` (the secure server off), its log in `dir/kubelet.log`.
pub struct StandaloneKubelet {
    pub child: ChildGuard,
    pub port: u16,
    pub manifests: PathBuf,
}

impl StandaloneKubelet {
    /// Starts the kubelet binary with `extra_config` appended to its KubeletConfiguration and
    /// waits until `/pods` answers.
    pub async fn start(
        kubelet: &Path,
        endpoint: &str,
        dir: &Path,
        node: &str,
        extra_config: &str,
    ) -> Result<Self> {
        Self::start_with_env(kubelet, endpoint, dir, node, extra_config, &[]).await
    }

    /// `start` with extra environment variables for the kubelet (e.g. `RUST_LOG`).
    pub async fn start_with_env(
        kubelet: &Path,
        endpoint: &str,
        dir: &Path,
        node: &str,
        extra_config: &str,
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let manifests = dir.join("manifests");
        std::fs::create_dir_all(&manifests)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nenableServer: false\nstaticPodPath: {}\nreadOnlyPort: {port}\nhealthzPort: 0\npodLogsDir: {}\n{extra_config}",
            manifests.display(),
            dir.join("logs").display()
        );
        std::fs::write(dir.join("config.yaml"), config)?;
        let log = std::fs::File::create(dir.join("kubelet.log"))?;
        let child = Command::new(kubelet)
            .arg("--config")
            .arg(dir.join("config.yaml"))
            .arg("--container-runtime-endpoint")
            .arg(endpoint)
            .arg("--root-dir")
            .arg(dir.join("root"))
            .arg("--hostname-override")
            .arg(node)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", kubelet.display()))?;
        let k = Self {
            child: ChildGuard(child),
            port,
            manifests,
        };
        let t = Instant::now();
        while http_get(port, "/pods").await.is_none() {
            if t.elapsed() > Duration::from_secs(20) {
                bail!(
                    "rkubelet did not come up; see {}",
                    dir.join("kubelet.log").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(k)
    }
}
