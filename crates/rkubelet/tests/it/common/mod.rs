//! Test harness for black-box runs of the `rkubelet` binary against the real containerd that
//! `dev/runtime.sh up` starts: temp dirs, a config file, the process, `/pods` polling, and a CRI
//! client for looking behind the kubelet's back.

#![allow(dead_code)]

pub mod api;
pub mod churn;
pub mod cri_proxy;
pub mod faults;
pub mod faults_runtime;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rkubelet_cri::RemoteRuntime;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The test kubelets' log filter: info, and debug for the library crates (the log lines the
/// tests read, e.g. "rotated container log", are debug).
pub const KUBELET_LOG_FILTER: &str = "info,kubelet=debug,rkubelet_config=debug,rkubelet_core=debug,rkubelet_client=debug,rkubelet_node=debug,rkubelet_pods=debug";

pub const NODE: &str = "test-node";

/// The CRI endpoint of the dev containerd; tests fail (never skip) without it, and fail when
/// nextest runs them outside the one-at-a-time `containerd` group.
pub fn endpoint() -> String {
    rkubelet_cri::testing::real_runtime_endpoint()
}

pub async fn cri() -> RemoteRuntime {
    RemoteRuntime::connect(&endpoint(), Duration::from_secs(30))
        .await
        .expect("connect to containerd")
}

/// Runs `cmd` in the container (`containerd://` prefix allowed) through CRI ExecSync:
/// exit code, stdout, stderr.
pub async fn exec_in(container_id: &str, cmd: &[&str]) -> (i32, String, String) {
    use rkubelet_cri::RuntimeService;
    let resp = cri()
        .await
        .exec_sync(rkubelet_cri::api::ExecSyncRequest {
            container_id: container_id.trim_start_matches("containerd://").to_owned(),
            cmd: cmd.iter().map(|s| (*s).to_owned()).collect(),
            timeout: 10,
        })
        .await
        .expect("ExecSync");
    (
        resp.exit_code,
        String::from_utf8_lossy(&resp.stdout).into_owned(),
        String::from_utf8_lossy(&resp.stderr).into_owned(),
    )
}

/// A free port for a process the test starts later. Taken below the kernel's ephemeral range
/// (`ip_local_port_range` starts at 32768), never from it: a port found free by binding `:0`
/// and released goes back to that pool, and the fake API server or any client socket opened
/// before the kubelet binds could be handed the same port ("Address already in use").
pub fn free_port() -> u16 {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let start = std::process::id().wrapping_mul(7919);
    loop {
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert!(n < SPAN, "no free port in {LOW}..{}", LOW + SPAN);
        let port = u16::try_from(LOW + start.wrapping_add(n.wrapping_mul(104_729)) % SPAN)
            .expect("port below 32768");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A tmpfs the test mounts on a directory (e.g. a kubelet's root or log dir, so a disk-full or
/// eviction test never fills the host disk); unmounted lazily on drop, also when the test fails
/// (the runtime may still hold a file open while it tears the pods down).
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs on {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Self(dir.to_owned())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("--lazy").arg(&self.0).status();
    }
}

/// One rkubelet process with its own directories.
pub struct Kubelet {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub healthz_port: u16,
    /// The authenticated HTTPS port (`port`).
    pub secure_port: u16,
    /// Extra command-line flags (e.g. `--kubeconfig PATH`), used by `start`.
    pub extra_args: Vec<std::ffi::OsString>,
    /// This kubelet's own `cgroupRoot` (`/rkt-<pid>-<n>`): concurrent test kubelets never see
    /// each other's pod cgroups; removed on drop.
    pub cgroup_root: String,
    child: Option<Child>,
}

impl Kubelet {
    pub fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    pub fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join("kubelet.log")
    }

    /// A kubelet with an empty manifest dir (call `start`).
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
        sweep_stale_cgroup_roots();
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let k = Self {
            dir,
            port: free_port(),
            healthz_port: free_port(),
            secure_port: free_port(),
            extra_args: Vec::new(),
            cgroup_root: format!("/rkt-{}-{seq}", std::process::id()),
            child: None,
        };
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {}\nfileCheckFrequency: 2s\nsyncFrequency: 10s\nreadOnlyPort: {}\nhealthzPort: {}\npodLogsDir: {}\naddress: 127.0.0.1\nport: {}\nauthentication:\n  webhook:\n    enabled: false\nauthorization:\n  mode: AlwaysAllow\ncgroupRoot: {}\n",
            k.manifests().display(),
            k.port,
            k.healthz_port,
            k.logs().display(),
            k.secure_port,
            k.cgroup_root
        );
        std::fs::write(k.dir.path().join("config.yaml"), config).unwrap();
        k
    }

    /// Appends lines (YAML at top level, e.g. `allowedUnsafeSysctls: [net.core.somaxconn]`)
    /// to the config file; call before `start`.
    pub fn append_config(&self, lines: &str) {
        let path = self.dir.path().join("config.yaml");
        let mut config = std::fs::read_to_string(&path).unwrap();
        config.push_str(lines);
        if !config.ends_with('\n') {
            config.push('\n');
        }
        std::fs::write(path, config).unwrap();
    }

    /// The host disk is shared with the build (CI has run with ~13 % free): upstream's default
    /// hard eviction thresholds (nodefs 10 %, imagefs 15 % available) and image GC at 85 % used
    /// would evict the test's pods and delete images later tests need. Unless the test sets its
    /// own, the kubelet gets thresholds that only a nearly full disk trips.
    fn shield_from_host_disk(&self) {
        let path = self.dir.path().join("config.yaml");
        let config = std::fs::read_to_string(&path).unwrap();
        let has = |key: &str| config.lines().any(|l| l.starts_with(key));
        if !has("evictionHard:") {
            self.append_config(
                "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 1%\n  imagefs.available: 1%\n  nodefs.inodesFree: 1%\n",
            );
        }
        if !has("imageGCHighThresholdPercent:") {
            self.append_config(
                "imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n",
            );
        }
    }

    pub fn write_manifest(&self, file: &str, yaml: &str) {
        let tmp = self.dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, self.manifests().join(file)).unwrap();
    }

    pub fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.manifests().join(file)).unwrap();
    }

    /// Starts (or restarts) the process.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        self.shield_from_host_disk();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file())
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
            .arg("--config")
            .arg(self.dir.path().join("config.yaml"))
            .arg("--container-runtime-endpoint")
            .arg(endpoint())
            .arg("--root-dir")
            .arg(self.root())
            .arg("--hostname-override")
            .arg(NODE)
            .arg("--v")
            .arg("4")
            .args(&self.extra_args)
            .env("RUST_LOG", KUBELET_LOG_FILTER)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn rkubelet");
        self.child = Some(child);
    }

    /// Starts `cmd` as this kubelet's process instead of the plain binary (a wrapper that
    /// execs `CARGO_BIN_EXE_rkubelet`, e.g. inside a private mount namespace), logging to
    /// `log_file`; `stop`, `kill9` and drop treat it as a `start`ed kubelet. The command
    /// brings its own configuration (this kubelet's `config.yaml` is not used).
    pub fn start_command(&mut self, mut cmd: Command) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file())
            .unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn the kubelet command");
        self.child = Some(child);
    }

    fn signal(&mut self, sig: &str) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(child.id().to_string())
                .status();
            let _ = child.wait();
        }
    }

    /// The exit status once the process has exited on its own (it is then no longer
    /// running: `start` may be called again); `None` while it runs.
    pub fn try_exit_status(&mut self) -> Option<std::process::ExitStatus> {
        let status = self
            .child
            .as_mut()?
            .try_wait()
            .expect("wait for the kubelet")?;
        self.child = None;
        Some(status)
    }

    /// `kill -9`: no shutdown path at all.
    pub fn kill9(&mut self) {
        self.signal("KILL");
    }

    /// SIGTERM and wait.
    pub fn stop(&mut self) {
        self.signal("TERM");
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_file()).unwrap_or_default()
    }

    /// Whether the log holds `text` whatever the log format: as is, or quoted the way klog's
    /// text format quotes a value (`"` → `\"`).
    pub fn log_mentions(&self, text: &str) -> bool {
        let log = self.log_text();
        let quoted = kubelet::gostr::go_quote(text);
        log.contains(text) || log.contains(&quoted[1..quoted.len() - 1])
    }

    pub async fn get(&self, port: u16, path: &str) -> Option<(u16, String)> {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).to_string();
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((code, body))
    }

    /// `GET /pods` items.
    pub async fn pods(&self) -> Vec<Value> {
        match self.get(self.port, "/pods").await {
            Some((200, body)) => serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["items"].as_array().cloned())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The pod whose manifest name is `name` (static pods are `<name>-<node>`).
    pub async fn pod(&self, name: &str) -> Option<Value> {
        let full = format!("{name}-{NODE}");
        self.pods()
            .await
            .into_iter()
            .find(|p| p["metadata"]["name"] == full.as_str())
    }

    /// Polls `pred` on the pod until it holds or `timeout` passes (panics with the last pod
    /// and the kubelet log tail).
    pub async fn wait_pod(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        let mut last = None;
        while start.elapsed() < timeout {
            if let Some(p) = self.pod(name).await {
                if pred(&p) {
                    return p;
                }
                last = Some(p);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "timed out after {timeout:?} waiting for pod {name}: {what}\nlast pod: {}\nkubelet log tail:\n{}",
            last.map(|p| serde_json::to_string_pretty(&p["status"]).unwrap_or_default())
                .unwrap_or_else(|| "<none>".into()),
            tail(&self.log_text(), 60)
        );
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        // A failing test shows why: the kubelet's own account of the last moments.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.log_file()).unwrap_or_default();
            eprintln!(
                "---- last lines of the kubelet log ({}) ----\n{}",
                self.log_file().display(),
                tail(&log, 200)
            );
        }
        // Leave no pods behind for the next test: removing the manifests lets the kubelet
        // tear everything down; the next test kubelet also kills orphans it finds.
        if self.child.is_some() {
            if let Ok(entries) = std::fs::read_dir(self.manifests()) {
                for e in entries.flatten() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
            std::thread::sleep(Duration::from_secs(3));
            self.stop();
        }
        remove_cgroup_root(&self.cgroup_root);
    }
}

/// Removes the (empty) cgroup roots of test processes that are gone: a kubelet whose pods
/// were still running when it stopped (API-mode tests) leaves its pod cgroups until the next
/// kubelet kills those pods as orphans.
fn sweep_stale_cgroup_roots() {
    let mut roots = std::collections::BTreeSet::new();
    let base = Path::new("/sys/fs/cgroup");
    let mut dirs = vec![base.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(base) {
        dirs.extend(entries.flatten().map(|e| e.path()));
    }
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("rkt-")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                roots.insert(format!("/{name}"));
            }
        }
    }
    for root in roots {
        remove_cgroup_root(&root);
    }
}

/// Removes a test kubelet's cgroup root from every hierarchy (v1 controllers and the unified
/// mount), deepest first. Only empty cgroups can go: anything still running stays visible.
pub fn remove_cgroup_root(root: &str) {
    fn rm(dir: &Path) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    rm(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    let rel = root.trim_start_matches('/');
    if rel.is_empty() {
        return;
    }
    let base = Path::new("/sys/fs/cgroup");
    rm(&base.join(rel));
    if let Ok(entries) = std::fs::read_dir(base) {
        for e in entries.flatten() {
            rm(&e.path().join(rel));
        }
    }
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

/// The status of container `name` in `containerStatuses` (or `initContainerStatuses`).
pub fn container<'a>(p: &'a Value, field: &str, name: &str) -> Option<&'a Value> {
    p["status"][field]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

pub fn running(p: &Value, name: &str) -> bool {
    container(p, "containerStatuses", name).is_some_and(|c| c["state"]["running"].is_object())
}

pub fn file_exists(p: &Path) -> bool {
    p.exists()
}

/// Containers the runtime still has for pod `uid` (any state).
pub async fn pod_containers(rt: &RemoteRuntime, uid: &str) -> Vec<rkubelet_cri::api::Container> {
    use rkubelet_cri::RuntimeService;
    use rkubelet_cri::api::{ContainerFilter, ListContainersRequest};
    rt.list_containers(ListContainersRequest {
        filter: Some(ContainerFilter {
            label_selector: [("io.kubernetes.pod.uid".to_owned(), uid.to_owned())].into(),
            ..Default::default()
        }),
    })
    .await
    .expect("list containers")
    .containers
}

/// Waits until the runtime has no container left for pod `uid`.
pub async fn wait_pod_containers_gone(
    k: &Kubelet,
    rt: &RemoteRuntime,
    uid: &str,
    timeout: Duration,
) {
    let start = Instant::now();
    loop {
        let left = pod_containers(rt, uid).await;
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "containers of pod {uid} still present after {timeout:?}: {left:?}\n{}",
            tail(&k.log_text(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
