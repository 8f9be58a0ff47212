//! The fake runtime's state and its synchronous transitions, modelled on containerd 1.6's CRI
//! plugin: sandboxes, containers, name reservations, IP allocation and the clock. Receives
//! already-unpacked requests from `service.rs` (always under the one mutex, never across an
//! await); emits protocol messages or `CriError`s with containerd's wording and codes.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::images::{ImageStore, splitmix64};
use super::{Behaviour, ExecBehaviour};
use crate::api;
use crate::api::{ContainerState, PodSandboxState};
use crate::error::CriError;

/// Exit code of a process killed by SIGKILL.
pub const SIGKILL_EXIT: i32 = 137;
/// Exit code of a process that dies of SIGTERM (the fake's default on a graceful stop).
pub const SIGTERM_EXIT: i32 = 143;
/// containerd's exit code and reason for a container whose start failed.
const START_ERROR_EXIT: i32 = 128;

/// Wall-clock nanoseconds that follow `tokio::time` (so paused-time tests move them) and
/// strictly increase from one reading to the next.
pub struct Clock {
    base_wall: i64,
    base: Instant,
    last: i64,
}

impl Clock {
    fn new() -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX / 2))
            .unwrap_or(1);
        Self {
            base_wall: wall,
            base: Instant::now(),
            last: 0,
        }
    }

    /// The wall time of `t` (not advancing the monotonic floor).
    fn at(&self, t: Instant) -> i64 {
        let since = t.saturating_duration_since(self.base).as_nanos();
        self.base_wall + i64::try_from(since).unwrap_or(0)
    }

    /// Now, strictly after every earlier reading.
    pub fn now(&mut self) -> i64 {
        let n = self.at(Instant::now()).max(self.last + 1);
        self.last = n;
        n
    }
}

pub struct SandboxRec {
    pub id: String,
    pub seq: u64,
    pub config: api::PodSandboxConfig,
    pub runtime_handler: String,
    pub state: PodSandboxState,
    pub created_at: i64,
    pub ip: String,
    name: String,
}

impl SandboxRec {
    pub fn metadata(&self) -> api::PodSandboxMetadata {
        self.config.metadata.clone().unwrap_or_default()
    }

    pub fn to_api(&self) -> api::PodSandbox {
        api::PodSandbox {
            id: self.id.clone(),
            metadata: Some(self.metadata()),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }

    pub fn status(&self) -> api::PodSandboxStatus {
        // containerd reports no IP once the sandbox's network namespace is gone.
        let ip = if self.state == PodSandboxState::SandboxReady {
            self.ip.clone()
        } else {
            String::new()
        };
        let ns_options = self
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone());
        api::PodSandboxStatus {
            id: self.id.clone(),
            metadata: Some(self.metadata()),
            state: self.state as i32,
            created_at: self.created_at,
            network: Some(api::PodSandboxNetworkStatus {
                ip,
                additional_ips: Vec::new(),
            }),
            linux: Some(api::LinuxPodSandboxStatus {
                namespaces: Some(api::Namespace {
                    options: ns_options,
                }),
            }),
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }
}

pub struct ContainerRec {
    pub id: String,
    pub seq: u64,
    pub sandbox_id: String,
    pub config: api::ContainerConfig,
    pub image_id: String,
    pub state: ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub log_path: String,
    pub resources: Option<api::LinuxContainerResources>,
    name: String,
    /// A scripted future exit: when, exit code, OOM-killed.
    exit_at: Option<(Instant, i32, bool)>,
}

impl ContainerRec {
    pub fn name(&self) -> &str {
        self.config
            .metadata
            .as_ref()
            .map(|m| m.name.as_str())
            .unwrap_or_default()
    }

    fn exit(&mut self, code: i32, oom: bool, at: i64) {
        self.state = ContainerState::ContainerExited;
        self.exit_code = code;
        self.finished_at = at.max(self.started_at + 1);
        self.reason = if oom {
            "OOMKilled"
        } else if code == 0 {
            "Completed"
        } else {
            "Error"
        }
        .to_string();
        self.exit_at = None;
    }

    pub fn to_api(&self) -> api::Container {
        api::Container {
            id: self.id.clone(),
            pod_sandbox_id: self.sandbox_id.clone(),
            metadata: self.config.metadata.clone(),
            image: self.config.image.clone(),
            image_ref: self.image_id.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            image_id: String::new(),
        }
    }
}

/// What `StopContainer` must do after the state change.
pub enum StopPlan {
    Done,
    /// The process ignores the stop signal: wait the grace period, then SIGKILL.
    KillAfter(Duration),
}

/// What `ExecSync` must do.
pub enum ExecPlan {
    Reply(api::ExecSyncResponse),
    /// Never finishes: time out after `timeout` seconds (0 = never).
    Hang(i64),
}

/// A streaming request the fake runtime answered with a URL.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamRequest {
    Exec(api::ExecRequest),
    Attach(api::AttachRequest),
    PortForward(api::PortForwardRequest),
}

pub struct State {
    pub calls: Vec<String>,
    pub failures: HashMap<String, VecDeque<CriError>>,
    pub latency: HashMap<String, Duration>,
    /// Calls of a method that panic (test hook for panic recovery), counted down.
    pub panics: HashMap<String, usize>,
    pub on_start: HashMap<String, Behaviour>,
    pub on_stop: HashMap<String, i32>,
    pub on_exec: HashMap<String, ExecBehaviour>,
    /// Base of the streaming URLs (`http://host:port`); containerd-like default when unset.
    pub stream_base: Option<String>,
    /// The `Exec`/`Attach`/`PortForward` requests answered, in order.
    pub stream_requests: Vec<StreamRequest>,
    pub pull_failures: HashMap<String, String>,
    /// Images (normalized) only pulled with these credentials (username, password).
    pub pull_credentials: HashMap<String, (String, String)>,
    /// Every `PullImage`: normalized image and the credentials it carried.
    pub pulls: Vec<(String, Option<api::AuthConfig>)>,
    pub conditions: Vec<api::RuntimeCondition>,
    pub runtime_config: Option<api::LinuxRuntimeConfiguration>,
    pub pod_cidr: String,
    /// Handlers `RunPodSandbox` accepts besides the default `""` (containerd's configured
    /// runtimes; `runc` unless scripted).
    pub runtime_handlers: Vec<String>,
    /// What `Status` reports in `runtime_handlers` (none by default, like containerd 1.6).
    pub status_handlers: Vec<api::RuntimeHandler>,
    pub images: ImageStore,
    pub sandboxes: BTreeMap<String, SandboxRec>,
    pub containers: BTreeMap<String, ContainerRec>,
    pub clock: Clock,
    /// `GetContainerEvents`: open streams and what they were last told.
    pub events: super::events::Events,
    sandbox_names: HashMap<String, String>,
    container_names: HashMap<String, String>,
    next_seq: u64,
    next_ip: u32,
}

/// The full ID `id` names: itself, or the one key it is a unique prefix of (containerd's
/// truncated-ID index).
fn resolve<V>(map: &BTreeMap<String, V>, id: &str) -> Option<String> {
    if id.is_empty() {
        return None;
    }
    if map.contains_key(id) {
        return Some(id.to_string());
    }
    let mut matches = map
        .range(id.to_string()..)
        .take_while(|(k, _)| k.starts_with(id))
        .map(|(k, _)| k.clone());
    let first = matches.next()?;
    matches.next().is_none().then_some(first)
}

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The container whose PID namespace `config` asks to join (`NamespaceMode::Target`).
fn pid_target(config: &api::ContainerConfig) -> Option<&str> {
    let ns = config
        .linux
        .as_ref()?
        .security_context
        .as_ref()?
        .namespace_options
        .as_ref()?;
    (ns.pid == api::NamespaceMode::Target as i32).then_some(ns.target_id.as_str())
}

fn container_not_found(method: &'static str, id: &str) -> CriError {
    CriError::not_found(
        method,
        format!("an error occurred when try to find container {id:?}: not found"),
    )
}

fn sandbox_not_found(method: &'static str, id: &str) -> CriError {
    CriError::not_found(
        method,
        format!("an error occurred when try to find sandbox {id:?}: not found"),
    )
}

impl State {
    pub fn new() -> Self {
        let cond = |t: &str| api::RuntimeCondition {
            r#type: t.to_string(),
            status: true,
            reason: String::new(),
            message: String::new(),
        };
        Self {
            calls: Vec::new(),
            failures: HashMap::new(),
            latency: HashMap::new(),
            panics: HashMap::new(),
            on_start: HashMap::new(),
            on_stop: HashMap::new(),
            on_exec: HashMap::new(),
            stream_base: None,
            stream_requests: Vec::new(),
            pull_failures: HashMap::new(),
            pull_credentials: HashMap::new(),
            pulls: Vec::new(),
            conditions: vec![cond("RuntimeReady"), cond("NetworkReady")],
            runtime_config: None,
            pod_cidr: String::new(),
            runtime_handlers: vec!["runc".to_owned()],
            status_handlers: Vec::new(),
            images: ImageStore::default(),
            sandboxes: BTreeMap::new(),
            containers: BTreeMap::new(),
            clock: Clock::new(),
            events: super::events::Events::default(),
            sandbox_names: HashMap::new(),
            container_names: HashMap::new(),
            next_seq: 0,
            next_ip: 2,
        }
    }

    /// A fresh 64-hex-character ID and its creation sequence number.
    fn new_id(&mut self) -> (String, u64) {
        self.next_seq += 1;
        let seq = self.next_seq;
        let id = (0..4u64)
            .map(|i| format!("{:016x}", splitmix64(seq.wrapping_mul(4).wrapping_add(i))))
            .collect();
        (id, seq)
    }

    /// The next pod IP in 10.88.0.0/16 (never reused, like host-local).
    fn alloc_ip(&mut self) -> String {
        loop {
            let n = self.next_ip;
            self.next_ip = self.next_ip.wrapping_add(1);
            let (x, y) = ((n >> 8) & 0xff, n & 0xff);
            if y != 0 && y != 255 {
                return format!("10.88.{x}.{y}");
            }
        }
    }

    /// Applies scripted exits whose time has come.
    pub fn settle(&mut self) {
        let now = Instant::now();
        for c in self.containers.values_mut() {
            if c.state != ContainerState::ContainerRunning {
                continue;
            }
            if let Some((at, code, oom)) = c.exit_at
                && at <= now
            {
                let t = self.clock.at(at);
                c.exit(code, oom, t);
                self.clock.last = self.clock.last.max(c.finished_at);
            }
        }
    }

    pub fn sandbox_id(&self, id: &str) -> Option<String> {
        resolve(&self.sandboxes, id)
    }

    pub fn container_id(&self, id: &str) -> Option<String> {
        resolve(&self.containers, id)
    }

    // ---- sandboxes ----

    pub fn run_pod_sandbox(&mut self, req: api::RunPodSandboxRequest) -> Result<String, CriError> {
        const M: &str = "RunPodSandbox";
        let config = req.config.unwrap_or_default();
        let Some(md) = config.metadata.clone() else {
            return Err(CriError::unknown(M, "sandbox config must include metadata"));
        };
        if !req.runtime_handler.is_empty() && !self.runtime_handlers.contains(&req.runtime_handler)
        {
            return Err(CriError::unknown(
                M,
                format!(
                    "failed to get sandbox runtime: no runtime for {:?} is configured",
                    req.runtime_handler
                ),
            ));
        }
        let name = format!("{}_{}_{}_{}", md.name, md.namespace, md.uid, md.attempt);
        if let Some(owner) = self.sandbox_names.get(&name) {
            return Err(CriError::unknown(
                M,
                format!(
                    "failed to reserve sandbox name {name:?}: name {name:?} is reserved for {owner:?}"
                ),
            ));
        }
        let host_network = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|n| n.network == api::NamespaceMode::Node as i32);
        let (id, seq) = self.new_id();
        let ip = if host_network {
            String::new()
        } else {
            self.alloc_ip()
        };
        let created_at = self.clock.now();
        self.sandbox_names.insert(name.clone(), id.clone());
        self.sandboxes.insert(
            id.clone(),
            SandboxRec {
                id: id.clone(),
                seq,
                config,
                runtime_handler: req.runtime_handler,
                state: PodSandboxState::SandboxReady,
                created_at,
                ip,
                name,
            },
        );
        Ok(id)
    }

    /// SIGKILLs every running container of sandbox `sid`.
    fn kill_containers_of(&mut self, sid: &str) {
        let now = self.clock.now();
        for c in self.containers.values_mut() {
            if c.sandbox_id == sid && c.state == ContainerState::ContainerRunning {
                c.exit(SIGKILL_EXIT, false, now);
            }
        }
    }

    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        let Some(sid) = self.sandbox_id(id) else {
            return Err(sandbox_not_found("StopPodSandbox", id));
        };
        self.kill_containers_of(&sid);
        if let Some(sb) = self.sandboxes.get_mut(&sid) {
            sb.state = PodSandboxState::SandboxNotready;
        }
        Ok(())
    }

    /// Marks a sandbox NOTREADY without touching its containers (its pause process died).
    pub fn kill_sandbox(&mut self, id: &str) -> bool {
        match self
            .sandbox_id(id)
            .and_then(|sid| self.sandboxes.get_mut(&sid))
        {
            Some(sb) => {
                sb.state = PodSandboxState::SandboxNotready;
                true
            }
            None => false,
        }
    }

    pub fn remove_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        let Some(sid) = self.sandbox_id(id) else {
            return Ok(());
        };
        self.kill_containers_of(&sid);
        let ids: Vec<String> = self
            .containers
            .values()
            .filter(|c| c.sandbox_id == sid)
            .map(|c| c.id.clone())
            .collect();
        for cid in ids {
            self.drop_container(&cid);
        }
        if let Some(sb) = self.sandboxes.remove(&sid) {
            self.sandbox_names.remove(&sb.name);
        }
        Ok(())
    }

    pub fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus, CriError> {
        self.sandbox_id(id)
            .and_then(|sid| self.sandboxes.get(&sid))
            .map(SandboxRec::status)
            .ok_or_else(|| sandbox_not_found("PodSandboxStatus", id))
    }

    pub fn list_pod_sandbox(&self, filter: Option<&api::PodSandboxFilter>) -> Vec<api::PodSandbox> {
        let mut out: Vec<&SandboxRec> = self
            .sandboxes
            .values()
            .filter(|sb| match filter {
                None => true,
                Some(f) => {
                    (f.id.is_empty() || self.sandbox_id(&f.id).as_deref() == Some(sb.id.as_str()))
                        && f.state.is_none_or(|s| s.state == sb.state as i32)
                        && labels_match(&sb.config.labels, &f.label_selector)
                }
            })
            .collect();
        out.sort_by_key(|sb| sb.seq);
        out.into_iter().map(SandboxRec::to_api).collect()
    }

    // ---- containers ----

    pub fn create_container(
        &mut self,
        req: api::CreateContainerRequest,
    ) -> Result<String, CriError> {
        const M: &str = "CreateContainer";
        let Some(sid) = self.sandbox_id(&req.pod_sandbox_id) else {
            return Err(CriError::not_found(
                M,
                format!(
                    "failed to find sandbox id {:?}: not found",
                    req.pod_sandbox_id
                ),
            ));
        };
        let (sandbox_ready, smd) = match self.sandboxes.get(&sid) {
            Some(sb) => (sb.state == PodSandboxState::SandboxReady, sb.metadata()),
            None => return Err(sandbox_not_found(M, &sid)),
        };
        if !sandbox_ready {
            return Err(CriError::not_found(
                M,
                format!(
                    "failed to get sandbox container task: no running task found: task {sid} not found: not found"
                ),
            ));
        }
        let config = req.config.unwrap_or_default();
        if let Some(target) = pid_target(&config) {
            self.validate_target(&sid, target)?;
        }
        let Some(md) = config.metadata.clone() else {
            return Err(CriError::unknown(
                M,
                "container config must include metadata",
            ));
        };
        let name = format!(
            "{}_{}_{}_{}_{}",
            md.name, smd.name, smd.namespace, smd.uid, md.attempt
        );
        if let Some(owner) = self.container_names.get(&name) {
            return Err(CriError::unknown(
                M,
                format!(
                    "failed to reserve container name {name:?}: name {name:?} is reserved for {owner:?}"
                ),
            ));
        }
        let image = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let Some(image_id) = self.images.get(&image).map(|i| i.id.clone()) else {
            return Err(CriError::not_found(
                M,
                format!("failed to resolve image {image:?}: not found"),
            ));
        };
        let log_dir = req
            .sandbox_config
            .as_ref()
            .map(|s| s.log_directory.as_str())
            .unwrap_or_default();
        let log_path = if log_dir.is_empty() || config.log_path.is_empty() {
            String::new()
        } else {
            format!("{}/{}", log_dir.trim_end_matches('/'), config.log_path)
        };
        let (id, seq) = self.new_id();
        let created_at = self.clock.now();
        let resources = config.linux.as_ref().and_then(|l| l.resources.clone());
        self.container_names.insert(name.clone(), id.clone());
        self.containers.insert(
            id.clone(),
            ContainerRec {
                id: id.clone(),
                seq,
                sandbox_id: sid,
                config,
                image_id,
                state: ContainerState::ContainerCreated,
                created_at,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
                message: String::new(),
                log_path,
                resources,
                name,
                exit_at: None,
            },
        );
        Ok(id)
    }

    /// containerd's `validateTargetContainer` for a `TARGET` PID namespace: the target must
    /// exist, belong to the same sandbox and be running.
    fn validate_target(&self, sandbox_id: &str, target: &str) -> Result<(), CriError> {
        const M: &str = "CreateContainer";
        let invalid = |why: String| {
            CriError::unknown(
                M,
                format!("failed to generate container spec: invalid target container: {why}"),
            )
        };
        let Some(c) = self
            .container_id(target)
            .and_then(|id| self.containers.get(&id))
        else {
            return Err(invalid(format!(
                "container {target:?} does not exist: not found"
            )));
        };
        if c.sandbox_id != sandbox_id {
            return Err(invalid(format!(
                "container {target:?} (sandbox {}) does not belong to sandbox {sandbox_id}",
                c.sandbox_id
            )));
        }
        if c.state != ContainerState::ContainerRunning {
            return Err(invalid(format!(
                "container {target:?} is not running - in state {}",
                c.state.as_str_name()
            )));
        }
        Ok(())
    }

    fn drop_container(&mut self, cid: &str) {
        if let Some(c) = self.containers.remove(cid) {
            self.container_names.remove(&c.name);
        }
    }

    pub fn start_container(&mut self, id: &str) -> Result<(), CriError> {
        const M: &str = "StartContainer";
        let Some(cid) = self.container_id(id) else {
            return Err(container_not_found(M, id));
        };
        let now = self.clock.now();
        let Some(c) = self.containers.get(&cid) else {
            return Err(container_not_found(M, id));
        };
        if c.state != ContainerState::ContainerCreated {
            return Err(CriError::unknown(
                M,
                format!(
                    "failed to set starting state for container {cid:?}: container is in {} state",
                    c.state.as_str_name()
                ),
            ));
        }
        let sandbox_ready = self
            .sandboxes
            .get(&c.sandbox_id)
            .is_some_and(|sb| sb.state == PodSandboxState::SandboxReady);
        if !sandbox_ready {
            return Err(CriError::unknown(
                M,
                format!("sandbox container {:?} is not running", c.sandbox_id),
            ));
        }
        let behaviour = self
            .on_start
            .get(c.name())
            .cloned()
            .unwrap_or(Behaviour::Run);
        let Some(c) = self.containers.get_mut(&cid) else {
            return Err(container_not_found(M, id));
        };
        match behaviour {
            Behaviour::FailStart(msg) => {
                let message = format!("failed to create containerd task: {msg}");
                c.state = ContainerState::ContainerExited;
                c.exit_code = START_ERROR_EXIT;
                c.finished_at = now;
                c.reason = "StartError".to_string();
                c.message = message.clone();
                return Err(CriError::unknown(M, message));
            }
            Behaviour::Run => {}
            Behaviour::ExitImmediately(code) => {
                c.started_at = now;
                c.state = ContainerState::ContainerRunning;
                let at = self.clock.now();
                c.exit(code, false, at);
                return Ok(());
            }
            Behaviour::ExitAfter(d, code) => c.exit_at = Some((Instant::now() + d, code, false)),
            Behaviour::OomKilledAfter(d) => {
                c.exit_at = Some((Instant::now() + d, SIGKILL_EXIT, true));
            }
        }
        c.started_at = now;
        c.state = ContainerState::ContainerRunning;
        Ok(())
    }

    /// Ends a running container now (scripted exit); `false` if it is not running.
    pub fn exit_container(&mut self, id: &str, code: i32, oom: bool) -> bool {
        let now = self.clock.now();
        match self
            .container_id(id)
            .and_then(|cid| self.containers.get_mut(&cid))
        {
            Some(c) if c.state == ContainerState::ContainerRunning => {
                c.exit(code, oom, now);
                true
            }
            _ => false,
        }
    }

    pub fn stop_container(&mut self, id: &str, timeout: i64) -> Result<StopPlan, CriError> {
        let Some(cid) = self.container_id(id) else {
            return Err(container_not_found("StopContainer", id));
        };
        let now = self.clock.now();
        let Some(c) = self.containers.get_mut(&cid) else {
            return Err(container_not_found("StopContainer", id));
        };
        if c.state != ContainerState::ContainerRunning {
            return Ok(StopPlan::Done);
        }
        if timeout <= 0 {
            c.exit(SIGKILL_EXIT, false, now);
            return Ok(StopPlan::Done);
        }
        let code = self.on_stop.get(c.name()).copied().unwrap_or(SIGTERM_EXIT);
        if code == SIGKILL_EXIT {
            return Ok(StopPlan::KillAfter(Duration::from_secs(
                timeout.unsigned_abs(),
            )));
        }
        c.exit(code, false, now);
        Ok(StopPlan::Done)
    }

    pub fn remove_container(&mut self, id: &str) -> Result<(), CriError> {
        let Some(cid) = self.container_id(id) else {
            return Ok(());
        };
        let now = self.clock.now();
        if let Some(c) = self.containers.get_mut(&cid)
            && c.state == ContainerState::ContainerRunning
        {
            c.exit(SIGKILL_EXIT, false, now);
        }
        self.drop_container(&cid);
        Ok(())
    }

    pub fn list_containers(&self, filter: Option<&api::ContainerFilter>) -> Vec<api::Container> {
        let mut out: Vec<&ContainerRec> = self
            .containers
            .values()
            .filter(|c| match filter {
                None => true,
                Some(f) => {
                    (f.id.is_empty() || self.container_id(&f.id).as_deref() == Some(c.id.as_str()))
                        && (f.pod_sandbox_id.is_empty()
                            || self.sandbox_id(&f.pod_sandbox_id).as_deref()
                                == Some(c.sandbox_id.as_str()))
                        && f.state.is_none_or(|s| s.state == c.state as i32)
                        && labels_match(&c.config.labels, &f.label_selector)
                }
            })
            .collect();
        out.sort_by_key(|c| c.seq);
        out.into_iter().map(ContainerRec::to_api).collect()
    }

    pub fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError> {
        let c = self
            .container_id(id)
            .and_then(|cid| self.containers.get(&cid))
            .ok_or_else(|| container_not_found("ContainerStatus", id))?;
        // Like containerd: the image's first tag and first repo digest while it is present.
        let (image, image_ref) = match self.images.get(&c.image_id) {
            Some(im) => (
                im.repo_tags
                    .first()
                    .map(|t| api::ImageSpec {
                        image: t.clone(),
                        ..Default::default()
                    })
                    .or_else(|| c.config.image.clone()),
                im.repo_digests
                    .first()
                    .cloned()
                    .unwrap_or_else(|| im.id.clone()),
            ),
            None => (c.config.image.clone(), c.image_id.clone()),
        };
        Ok(api::ContainerStatus {
            id: c.id.clone(),
            metadata: c.config.metadata.clone(),
            state: c.state as i32,
            created_at: c.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image,
            image_ref,
            reason: c.reason.clone(),
            message: c.message.clone(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            mounts: c.config.mounts.clone(),
            log_path: c.log_path.clone(),
            resources: c.resources.clone().map(|l| api::ContainerResources {
                linux: Some(l),
                windows: None,
            }),
            image_id: String::new(),
            user: None,
        })
    }

    pub fn update_container_resources(
        &mut self,
        req: api::UpdateContainerResourcesRequest,
    ) -> Result<(), CriError> {
        const M: &str = "UpdateContainerResources";
        let c = self
            .container_id(&req.container_id)
            .and_then(|cid| self.containers.get_mut(&cid))
            .ok_or_else(|| container_not_found(M, &req.container_id))?;
        if c.state != ContainerState::ContainerExited && req.linux.is_some() {
            c.resources = req.linux;
        }
        Ok(())
    }

    /// The running container `id`, or containerd's error for `method`.
    pub fn running_container(
        &self,
        method: &'static str,
        id: &str,
    ) -> Result<&ContainerRec, CriError> {
        let c = self
            .container_id(id)
            .and_then(|cid| self.containers.get(&cid))
            .ok_or_else(|| container_not_found(method, id))?;
        if c.state != ContainerState::ContainerRunning {
            return Err(CriError::unknown(
                method,
                format!("container is in {} state", c.state.as_str_name()),
            ));
        }
        Ok(c)
    }

    pub fn exec_sync(&self, req: &api::ExecSyncRequest) -> Result<ExecPlan, CriError> {
        let c = self
            .running_container("ExecSync", &req.container_id)
            .map_err(|e| match e {
                CriError::Other {
                    method,
                    code,
                    message,
                } => CriError::Other {
                    method,
                    code,
                    message: format!("failed to exec in container: {message}"),
                },
                e => e,
            })?;
        Ok(match self.on_exec.get(c.name()) {
            Some(ExecBehaviour::Hang) => ExecPlan::Hang(req.timeout),
            Some(ExecBehaviour::Reply {
                exit_code,
                stdout,
                stderr,
            }) => ExecPlan::Reply(api::ExecSyncResponse {
                stdout: stdout.clone(),
                stderr: stderr.clone(),
                exit_code: *exit_code,
            }),
            None => {
                // `echo a b` answers "a b\n"; anything else succeeds silently.
                let stdout = match req.cmd.split_first() {
                    Some((cmd, args)) if cmd == "echo" => format!("{}\n", args.join(" ")),
                    _ => String::new(),
                };
                ExecPlan::Reply(api::ExecSyncResponse {
                    stdout: stdout.into_bytes(),
                    stderr: Vec::new(),
                    exit_code: 0,
                })
            }
        })
    }

    /// A streaming-server URL like containerd's (`http://127.0.0.1:<port>/<kind>/<token>`).
    pub fn stream_url(&mut self, kind: &str) -> String {
        let (id, _) = self.new_id();
        let base = self
            .stream_base
            .clone()
            .unwrap_or_else(|| "http://127.0.0.1:10010".to_string());
        format!("{base}/{kind}/{}", &id[..8])
    }
}
