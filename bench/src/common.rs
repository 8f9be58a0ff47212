//! Helpers shared by the `podstart`, `apistart` and `scrape` benchmarks: percentiles, `/proc`
//! readers, API request count arithmetic, a child-process guard, CRI sandbox clean-up by label and a plain-HTTP GET.

// Each benchmark binary compiles this module and uses a different subset of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rkubelet_cri::api::{
    ListPodSandboxRequest, PodSandboxFilter, RemovePodSandboxRequest, StopPodSandboxRequest,
};
use rkubelet_cri::{RemoteRuntime, RuntimeService};
use serde_json::{Value, json};
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
    let r = http_get_raw(port, path, &[]).await?;
    Some((r.status, String::from_utf8_lossy(&r.body).into_owned()))
}

/// A response of [`http_get_raw`]: status, lower-cased header lines, de-chunked body bytes.
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A plain-HTTP GET on 127.0.0.1 with extra request headers (`("Accept-Encoding", "gzip")`);
/// the body is returned as bytes, not decoded.
pub async fn http_get_raw(port: u16, path: &str, extra: &[(&str, &str)]) -> Option<RawResponse> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let body = &buf[split + 4..];
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if !chunked {
        return Some(RawResponse {
            status,
            headers,
            body: body.to_vec(),
        });
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&rest[..eol]).ok()?;
        let n = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if n == 0 {
            break;
        }
        let after = &rest[eol + 2..];
        out.extend_from_slice(after.get(..n)?);
        rest = after.get(n + 2..)?;
    }
    Some(RawResponse {
        status,
        headers,
        body: out,
    })
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

/// API request counts keyed by `VERB resource[/subresource]` (the fake API server's counters).
pub type Counts = BTreeMap<String, u64>;

/// `after - before` per key, zero entries dropped.
pub fn diff(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .filter_map(|(k, &v)| {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// `counts / by` as JSON `{"total": .., "by_request": {..}}`.
pub fn per(counts: &Counts, by: f64) -> Value {
    let total: u64 = counts.values().sum();
    let by_request: serde_json::Map<String, Value> = counts
        .iter()
        .map(|(k, &v)| (k.clone(), json!(v as f64 / by)))
        .collect();
    json!({"total": total as f64 / by, "by_request": by_request})
}

/// "7.000 (PATCH pods/status 2.00, POST events 3.00, ...)", largest first.
pub fn breakdown(v: &Value) -> String {
    let mut items: Vec<(&String, f64)> = v["by_request"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, x)| (k, x.as_f64().unwrap_or(0.0)))
        .collect();
    items.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let parts: Vec<String> = items
        .iter()
        .map(|(k, x)| match x {
            x if *x < 0.01 => format!("{k} {x:.4}"),
            x => format!("{k} {x:.2}"),
        })
        .collect();
    format!(
        "{:.3} ({})",
        v["total"].as_f64().unwrap_or(0.0),
        parts.join(", ")
    )
}

/// User + system CPU seconds of a process (`/proc/<pid>/stat` fields 14 and 15; 100 Hz).
pub fn cpu_secs(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    (tick(11).unwrap_or(0) + tick(12).unwrap_or(0)) as f64 / 100.0
}
