//! The I/O layer of `rkubelet doctor`: receives where to look ([`GatherOptions`]), asks the CRI
//! runtime, the API server and the host (`/proc`, `/sys`, statvfs, certificate files) and
//! emits [`Facts`]. Decides nothing; every failure becomes a fact the checks judge. Each
//! network call is bounded by the options' timeout.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rkubelet_cri::{CriError, ImageService, RemoteRuntime, RuntimeService, api};
use rustls::pki_types::pem::PemObject;

use super::{
    CertFacts, ClockFacts, CniFacts, ConfigFacts, DiskFacts, Facts, FsStat, KernelFacts,
    LogDirFacts, RuntimeCgroupDriver, RuntimeFacts, RuntimeVersion, parse_proc_swaps,
};
use crate::config::{KubeletConfiguration, load_config, load_config_upstream};

/// The kubelet's defaults for what `doctor` reads.
pub const DEFAULT_CONFIG: &str = "/var/lib/kubelet/config.yaml";
pub const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
pub const DEFAULT_KUBECONFIG: &str = "/etc/kubernetes/kubelet.conf";
pub const DEFAULT_CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
pub const DEFAULT_CNI_DIR: &str = "/etc/cni/net.d";
pub const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";

/// Where `doctor` looks. `None` paths mean "the default if it exists".
#[derive(Debug, Clone)]
pub struct GatherOptions {
    pub config: Option<PathBuf>,
    pub endpoint: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub root_dir: PathBuf,
    pub containerd_config: Option<PathBuf>,
    /// Bound of each runtime and API server call.
    pub timeout: Duration,
}

/// Collects every fact. Never fails: what cannot be read is recorded as such.
pub async fn gather(o: &GatherOptions) -> Facts {
    let (config_facts, kc) = read_config(o);
    let endpoint = o
        .endpoint
        .clone()
        .or_else(|| Some(kc.container_runtime_endpoint.clone()).filter(|e| !e.is_empty()))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
    let rt = ask_runtime(&endpoint, o.timeout).await;
    let containerd_config = o
        .containerd_config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTAINERD_CONFIG));
    let runtime_cgroup_driver = match rt.driver.clone() {
        Some(d) => d,
        None => driver_from_containerd_file(&containerd_config, rt.driver_unknown.as_deref()),
    };
    let cni = rt.reached.then(|| {
        let (dir, source) = match &rt.cni_dir {
            Some(d) => (d.clone(), "the runtime's configuration".to_owned()),
            None => (PathBuf::from(DEFAULT_CNI_DIR), "default".to_owned()),
        };
        let files = list_cni(&dir);
        CniFacts { dir, source, files }
    });
    let kubeconfig = o
        .kubeconfig
        .clone()
        .or_else(|| Some(PathBuf::from(DEFAULT_KUBECONFIG)).filter(|p| p.exists()));
    let (clock, kubeconfig_cert) = match &kubeconfig {
        Some(p) => ask_api_server(p, o.timeout).await,
        None => (ClockFacts::NoKubeconfig, None),
    };
    let mut disks = vec![DiskFacts {
        signal_prefix: "nodefs",
        path: o.root_dir.clone(),
        stat: statvfs(&o.root_dir),
    }];
    // Observed also when it shares nodefs's file system: the eviction manager checks the
    // imagefs thresholds (upstream default 15 %) against it all the same.
    if let Some(img) = &rt.image_fs {
        disks.push(DiskFacts {
            signal_prefix: "imagefs",
            path: img.clone(),
            stat: statvfs(img),
        });
    }
    let pod_logs_dir = config_facts.pod_logs_dir.clone();
    let certs = cert_facts(&o.root_dir, &kc, kubeconfig_cert);
    Facts {
        now: SystemTime::now(),
        config: config_facts,
        runtime: rt.facts,
        runtime_cgroup_driver,
        cni,
        swap: std::fs::read_to_string("/proc/swaps")
            .map(|t| parse_proc_swaps(&t))
            .map_err(|e| e.to_string()),
        kernel: kernel_facts(),
        clock,
        certs,
        disks,
        log_dir: {
            let (exists, writable) = writable(&pod_logs_dir);
            LogDirFacts {
                path: pod_logs_dir,
                exists,
                writable,
            }
        },
    }
}

fn read_config(o: &GatherOptions) -> (ConfigFacts, KubeletConfiguration) {
    let path = o
        .config
        .clone()
        .or_else(|| Some(PathBuf::from(DEFAULT_CONFIG)).filter(|p| p.exists()));
    let (kc, error) = match &path {
        Some(p) => match load_config_upstream(Some(p), None) {
            Ok(l) => (l.config, None),
            Err(e) => (defaults(), Some(e.to_string())),
        },
        None => (defaults(), None),
    };
    let pod_logs_dir = if kc.pod_logs_dir.is_empty() {
        PathBuf::from(DEFAULT_POD_LOGS_DIR)
    } else {
        PathBuf::from(&kc.pod_logs_dir)
    };
    let facts = ConfigFacts {
        path,
        error,
        cgroup_driver: kc.cgroup_driver.clone(),
        fail_swap_on: kc.fail_swap_on,
        eviction_hard: kc.eviction_hard.clone(),
        pod_logs_dir,
    };
    (facts, kc)
}

fn defaults() -> KubeletConfiguration {
    load_config(None, None).unwrap_or_default()
}

/// What the runtime told.
struct RuntimeAnswers {
    facts: RuntimeFacts,
    reached: bool,
    driver: Option<RuntimeCgroupDriver>,
    /// Why `RuntimeConfig` gave no driver.
    driver_unknown: Option<String>,
    cni_dir: Option<PathBuf>,
    image_fs: Option<PathBuf>,
}

async fn ask_runtime(endpoint: &str, timeout: Duration) -> RuntimeAnswers {
    let mut a = RuntimeAnswers {
        facts: RuntimeFacts {
            endpoint: endpoint.to_owned(),
            ..Default::default()
        },
        reached: false,
        driver: None,
        driver_unknown: Some("the runtime did not answer".to_owned()),
        cni_dir: None,
        image_fs: None,
    };
    let rt = match RemoteRuntime::connect(endpoint, timeout).await {
        Ok(rt) => rt,
        Err(e) => {
            a.facts.version = Some(Err(e.to_string()));
            return a;
        }
    };
    match rt.version(api::VersionRequest::default()).await {
        Ok(v) => {
            a.reached = true;
            a.facts.version = Some(Ok(RuntimeVersion {
                name: v.runtime_name,
                version: v.runtime_version,
                api_version: v.runtime_api_version,
            }));
        }
        Err(e) => {
            a.facts.version = Some(Err(e.to_string()));
            return a;
        }
    }
    let mut containerd_driver = None;
    if let Ok(s) = rt.status(api::StatusRequest { verbose: true }).await {
        for c in s.status.iter().flat_map(|s| &s.conditions) {
            if !c.status {
                a.facts.failed_conditions.push((
                    c.r#type.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                ));
            }
        }
        if let Some(cfg) = s
            .info
            .get("config")
            .and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok())
        {
            let (dir, driver) = containerd_cri_config(&cfg);
            a.cni_dir = dir;
            containerd_driver = driver;
        }
    }
    match rt.runtime_config(api::RuntimeConfigRequest {}).await {
        Ok(r) => {
            a.driver = r.linux.map(|l| RuntimeCgroupDriver::Known {
                driver: if l.cgroup_driver == api::CgroupDriver::Systemd as i32 {
                    "systemd".to_owned()
                } else {
                    "cgroupfs".to_owned()
                },
                source: "CRI RuntimeConfig".to_owned(),
            });
        }
        Err(CriError::Unimplemented { .. }) => {
            a.driver_unknown = Some("the runtime does not implement CRI RuntimeConfig".into());
        }
        Err(e) => a.driver_unknown = Some(format!("CRI RuntimeConfig failed: {e}")),
    }
    if a.driver.is_none()
        && let Some(systemd) = containerd_driver
    {
        a.driver = Some(RuntimeCgroupDriver::Known {
            driver: if systemd { "systemd" } else { "cgroupfs" }.to_owned(),
            source: "SystemdCgroup in containerd's CRI configuration (CRI Status)".to_owned(),
        });
    }
    if let Ok(fs) = rt.image_fs_info(api::ImageFsInfoRequest {}).await {
        a.image_fs = fs
            .image_filesystems
            .first()
            .and_then(|f| f.fs_id.as_ref())
            .map(|id| PathBuf::from(&id.mountpoint))
            .filter(|p| !p.as_os_str().is_empty());
    }
    a
}

/// From containerd's CRI plugin configuration (the `config` of a verbose `Status`): the CNI
/// configuration directory and the default runtime's `SystemdCgroup`.
pub fn containerd_cri_config(cfg: &serde_json::Value) -> (Option<PathBuf>, Option<bool>) {
    let dir = cfg
        .pointer("/cni/confDir")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(PathBuf::from);
    let containerd = cfg.get("containerd");
    let default = containerd
        .and_then(|c| c.get("defaultRuntimeName"))
        .and_then(|v| v.as_str())
        .unwrap_or("runc");
    let systemd = containerd
        .and_then(|c| c.get("runtimes"))
        .and_then(|r| r.get(default))
        .and_then(|r| r.get("options"))
        .and_then(|o| o.get("SystemdCgroup"))
        .and_then(|v| v.as_bool());
    (dir, systemd)
}

/// `SystemdCgroup = true|false` in containerd's config file (the runc options; a line scan,
/// comments skipped). `None` when the key is not there.
pub fn systemd_cgroup_in_toml(text: &str) -> Option<bool> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "SystemdCgroup").then(|| v.trim() == "true")
        })
        .next_back()
}

fn driver_from_containerd_file(path: &Path, why: Option<&str>) -> RuntimeCgroupDriver {
    let why = why.unwrap_or("the runtime did not say");
    match std::fs::read_to_string(path) {
        Ok(text) => match systemd_cgroup_in_toml(&text) {
            Some(systemd) => RuntimeCgroupDriver::Known {
                driver: if systemd { "systemd" } else { "cgroupfs" }.to_owned(),
                source: format!("SystemdCgroup in {}", path.display()),
            },
            // containerd's default for runc is cgroupfs, but another runtime may be in use.
            None => RuntimeCgroupDriver::Unknown(format!(
                "{why}; {} does not set SystemdCgroup",
                path.display()
            )),
        },
        Err(e) => RuntimeCgroupDriver::Unknown(format!("{why}; {}: {e}", path.display())),
    }
}

fn list_cni(dir: &Path) -> Result<Vec<String>, String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            Path::new(n)
                .extension()
                .is_some_and(|x| x == "conf" || x == "conflist" || x == "json")
        })
        .collect();
    files.sort();
    Ok(files)
}

fn kernel_facts() -> KernelFacts {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    // The net.bridge sysctls exist only while the module is loaded (or built in).
    let br = if Path::new("/sys/module/br_netfilter").exists()
        || Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists()
    {
        Some(true)
    } else {
        std::fs::read_to_string("/proc/modules").ok().map(|m| {
            m.lines()
                .any(|l| l.split(' ').next() == Some("br_netfilter"))
        })
    };
    KernelFacts {
        br_netfilter_loaded: br,
        ip_forward: read("/proc/sys/net/ipv4/ip_forward"),
        bridge_nf_call_iptables: read("/proc/sys/net/bridge/bridge-nf-call-iptables"),
    }
}

/// The API server's `Date` against the local clock, and the client certificate the
/// kubeconfig names (if it names a file).
async fn ask_api_server(path: &Path, timeout: Duration) -> (ClockFacts, Option<PathBuf>) {
    let cert = kube::config::Kubeconfig::read_from(path)
        .ok()
        .and_then(|k| {
            let ctx = k.current_context.clone()?;
            let user = k
                .contexts
                .iter()
                .find(|c| c.name == ctx)?
                .context
                .as_ref()?
                .user
                .clone()?;
            let auth = k.auth_infos.iter().find(|a| a.name == user)?;
            let file = auth.auth_info.as_ref()?.client_certificate.clone()?;
            let file = PathBuf::from(file);
            Some(if file.is_relative() {
                path.parent().map(|d| d.join(&file)).unwrap_or(file)
            } else {
                file
            })
        });
    let clock = match tokio::time::timeout(timeout, server_date(path, timeout)).await {
        Ok(c) => c,
        Err(_) => ClockFacts::Unreachable {
            server: format!("of {}", path.display()),
            error: format!("no answer within {}s", timeout.as_secs()),
        },
    };
    (clock, cert)
}

async fn server_date(path: &Path, timeout: Duration) -> ClockFacts {
    let unreachable = |server: String, error: String| ClockFacts::Unreachable { server, error };
    let config = match crate::apiclient::config_from_kubeconfig(path).await {
        Ok(c) => c,
        Err(e) => return unreachable(format!("of {}", path.display()), e.to_string()),
    };
    let server = config.cluster_url.to_string();
    let settings = crate::apiclient::ClientSettings {
        timeout,
        rate_limit: None,
        ..Default::default()
    };
    let client = match crate::apiclient::client_from_config(config, &settings) {
        Ok(c) => c,
        Err(e) => return unreachable(server, e.to_string()),
    };
    let req = match http::Request::get("/version").body(kube::client::Body::empty()) {
        Ok(r) => r,
        Err(e) => return unreachable(server, e.to_string()),
    };
    let before = SystemTime::now();
    let resp = match client.send(req).await {
        Ok(r) => r,
        Err(e) => return unreachable(server, e.to_string()),
    };
    let after = SystemTime::now();
    let local_time = before + after.duration_since(before).unwrap_or_default() / 2;
    let date = resp
        .headers()
        .get(http::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| chrono::DateTime::parse_from_rfc2822(v).ok());
    match date {
        Some(d) => ClockFacts::Measured {
            server,
            server_time: SystemTime::from(d.with_timezone(&chrono::Utc)),
            local_time,
        },
        None => unreachable(server, "the response has no Date header".to_owned()),
    }
}

fn cert_validity(path: &Path) -> Result<(SystemTime, SystemTime), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let blocks = crate::certificate::pem_blocks(&text)?;
    let der = blocks
        .iter()
        .find(|b| b.label == "CERTIFICATE")
        .ok_or("no CERTIFICATE block")?;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(der.text.as_bytes())
        .map_err(|e| format!("certificate: {e}"))?;
    let info =
        crate::certificate::CertInfo::parse(der.as_ref()).ok_or("not a valid X.509 certificate")?;
    Ok((info.not_before, info.not_after))
}

fn cert_facts(
    root: &Path,
    kc: &KubeletConfiguration,
    kubeconfig_cert: Option<PathBuf>,
) -> Vec<CertFacts> {
    let pki = root.join("pki");
    let first_existing = |paths: Vec<PathBuf>| -> PathBuf {
        paths
            .iter()
            .find(|p| p.exists())
            .cloned()
            .unwrap_or_else(|| paths[0].clone())
    };
    let client = first_existing(
        kubeconfig_cert
            .into_iter()
            .chain([pki.join("kubelet-client-current.pem")])
            .collect(),
    );
    let serving = if kc.tls_cert_file.is_empty() {
        first_existing(vec![
            pki.join("kubelet-server-current.pem"),
            pki.join("kubelet.crt"),
        ])
    } else {
        PathBuf::from(&kc.tls_cert_file)
    };
    [("client", client), ("serving", serving)]
        .into_iter()
        .map(|(role, path)| CertFacts {
            role,
            validity: cert_validity(&path),
            path,
        })
        .collect()
}

fn statvfs(path: &Path) -> Result<FsStat, String> {
    let s = rustix::fs::statvfs(path).map_err(|e| e.to_string())?;
    Ok(FsStat {
        bytes_total: s.f_blocks.saturating_mul(s.f_frsize),
        bytes_avail: s.f_bavail.saturating_mul(s.f_frsize),
        inodes_total: s.f_files,
        inodes_free: s.f_ffree,
    })
}

/// Whether `dir` is writable, or, while it does not exist, whether the kubelet can create it
/// (its nearest existing ancestor is writable).
fn writable(dir: &Path) -> (bool, Result<(), String>) {
    let access = |p: &Path| {
        rustix::fs::access(p, rustix::fs::Access::WRITE_OK).map_err(|e| format!("{p:?}: {e}"))
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => (true, access(dir)),
        Ok(_) => (true, Err("it is not a directory".to_owned())),
        Err(_) => {
            let parent = dir.ancestors().skip(1).find(|a| a.is_dir());
            (false, parent.map_or(Ok(()), access))
        }
    }
}
