//! `FakeRuntime`: an in-memory CRI runtime that behaves like containerd 1.6's CRI plugin, for
//! kubelet tests. Owns sandboxes, containers, images and test scripting (injected failures,
//! latencies, exit behaviours) behind one `std::sync::Mutex` that is never held across an
//! await. Receives CRI requests through [`RuntimeService`](crate::RuntimeService) and
//! [`ImageService`](crate::ImageService); emits protocol responses and records each call.
//!
//! containerd behaviours it copies: 64-hex IDs (unique prefixes accepted), sandbox/container
//! name reservation until removal, `RemovePodSandbox`/`RemoveContainer` idempotent (Ok on a
//! missing ID) while `StopPodSandbox`/`StopContainer`/status calls answer `NotFound`, stopping
//! a sandbox SIGKILLs its containers (exit 137) and clears its IP, removing a sandbox removes
//! its containers, a failed start leaves the container EXITED with 128/`StartError`, reasons
//! `Completed`/`Error`/`OOMKilled`, `ImageStatus` of a missing image is `Ok(None)`, short image
//! names are normalized (`busybox` → `docker.io/library/busybox:latest`), `RuntimeConfig` and
//! `CheckpointContainer` are unimplemented (settable for the former), and so is
//! `GetContainerEvents` unless a test turns containerd 1.7's event stream on (`events.rs`).
//!
//! Time comes from `tokio::time`, so timestamps, latencies, timed exits and stop grace periods
//! follow paused-time tests.

mod events;
mod images;
mod server;
mod service;
mod state;
mod stats;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_misc;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use images::normalize_image;
pub use server::{FakeServer, serve_unix};
pub use state::{SIGKILL_EXIT, SIGTERM_EXIT, StreamRequest};

use crate::api;
use crate::error::CriError;
use crate::traits::{IMAGE_METHODS, RUNTIME_METHODS};
use state::State;

/// What a container does when started (scripted per container name).
#[derive(Debug, Clone, PartialEq)]
pub enum Behaviour {
    /// Runs until stopped or told to exit (the default).
    Run,
    /// Exits with this code right after starting (`Completed` for 0, else `Error`).
    ExitImmediately(i32),
    /// Runs for this long, then exits with the code.
    ExitAfter(Duration, i32),
    /// Runs for this long, then is OOM-killed (exit 137, reason `OOMKilled`).
    OomKilledAfter(Duration),
    /// `StartContainer` fails with this message; the container is left EXITED with exit
    /// code 128 and reason `StartError`, as containerd does.
    FailStart(String),
}

/// What `ExecSync` in a container does (scripted per container name). Without a script,
/// `echo ARGS` prints its arguments and everything else exits 0 silently.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecBehaviour {
    Reply {
        exit_code: i32,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    /// Never finishes: with a timeout, fails `DeadlineExceeded` after it (as containerd does);
    /// without one, never returns.
    Hang,
}

/// An in-memory containerd look-alike implementing both CRI traits. Clones share state, so a
/// test keeps one clone for scripting and hands another (as `Arc<dyn RuntimeService>`) to the
/// code under test.
#[derive(Clone)]
pub struct FakeRuntime {
    state: Arc<Mutex<State>>,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for FakeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("FakeRuntime")
            .field("sandboxes", &s.sandboxes.len())
            .field("containers", &s.containers.len())
            .field("images", &s.images.all().len())
            .finish()
    }
}

fn check_method(method: &str) {
    assert!(
        RUNTIME_METHODS.contains(&method) || IMAGE_METHODS.contains(&method),
        "FakeRuntime: unknown CRI method {method:?} (use the RPC name, e.g. \"RunPodSandbox\")"
    );
}

impl FakeRuntime {
    /// An empty runtime: no images, no sandboxes, both runtime conditions true.
    pub fn new() -> Self {
        Self {
            state: Arc::new(Mutex::new(State::new())),
        }
    }

    /// A runtime with these images present (names are normalized).
    ///
    /// # Panics
    /// On an invalid image reference.
    pub fn with_images(images: &[&str]) -> Self {
        let rt = Self::new();
        for image in images {
            rt.add_image(image);
        }
        rt
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `image` present; returns its ID (`sha256:…`, deterministic per name).
    ///
    /// # Panics
    /// On an invalid image reference.
    pub fn add_image(&self, image: &str) -> String {
        match self.lock().images.add(image) {
            Ok(rec) => rec.id.clone(),
            Err(e) => panic!("FakeRuntime::add_image({image:?}): {e}"),
        }
    }

    // ---- scripting ----

    /// Queues `err` as the result of the next call of `method` (e.g. `"StartContainer"`).
    /// Queued errors are returned one per call, in order. Panics on an unknown method name.
    pub fn fail_next(&self, method: &str, err: CriError) {
        check_method(method);
        self.lock()
            .failures
            .entry(method.to_string())
            .or_default()
            .push_back(err);
    }

    /// The next `times` calls of `method` panic (after being recorded): a test hook for the
    /// kubelet's panic recovery. Panics on an unknown method name.
    pub fn panic_next(&self, method: &str, times: usize) {
        check_method(method);
        *self.lock().panics.entry(method.to_string()).or_default() += times;
    }

    /// Every call of `method` takes `latency` (`tokio::time::sleep`); zero removes it.
    pub fn set_latency(&self, method: &str, latency: Duration) {
        check_method(method);
        let mut s = self.lock();
        if latency.is_zero() {
            s.latency.remove(method);
        } else {
            s.latency.insert(method.to_string(), latency);
        }
    }

    /// What containers named `name` do when started (all attempts, until changed).
    pub fn on_start(&self, name: &str, behaviour: Behaviour) {
        self.lock().on_start.insert(name.to_string(), behaviour);
    }

    /// The exit code containers named `name` report after a graceful `StopContainer`
    /// (default 143, death by SIGTERM). 137 means "ignores SIGTERM": the stop then takes the
    /// whole grace period before the SIGKILL.
    pub fn on_stop(&self, name: &str, exit_code: i32) {
        self.lock().on_stop.insert(name.to_string(), exit_code);
    }

    /// What `ExecSync` does in containers named `name`.
    pub fn on_exec(&self, name: &str, behaviour: ExecBehaviour) {
        self.lock().on_exec.insert(name.to_string(), behaviour);
    }

    /// Streaming URLs (`Exec`, `Attach`, `PortForward`) point at `base` (`http://host:port`)
    /// instead of containerd's usual `http://127.0.0.1:10010`.
    pub fn set_stream_base(&self, base: &str) {
        self.lock().stream_base = Some(base.trim_end_matches('/').to_string());
    }

    /// The streaming requests answered so far, in order.
    pub fn stream_requests(&self) -> Vec<StreamRequest> {
        self.lock().stream_requests.clone()
    }

    /// Running container `id` exits now with `exit_code`; `false` if it is not running.
    pub fn exit_container(&self, id: &str, exit_code: i32) -> bool {
        let mut s = self.lock();
        s.settle();
        let exited = s.exit_container(id, exit_code, false);
        s.publish_events();
        exited
    }

    /// Running container `id` is OOM-killed now (137, `OOMKilled`); `false` if not running.
    pub fn oom_kill_container(&self, id: &str) -> bool {
        let mut s = self.lock();
        s.settle();
        let killed = s.exit_container(id, SIGKILL_EXIT, true);
        s.publish_events();
        killed
    }

    /// Sandbox `id` becomes NOTREADY (its pause process died); containers are untouched.
    pub fn kill_sandbox(&self, id: &str) -> bool {
        let mut s = self.lock();
        let killed = s.kill_sandbox(id);
        s.publish_events();
        killed
    }

    /// Serves `GetContainerEvents` from now on, as containerd 1.7+ does (default: answers
    /// `Unimplemented`, like containerd 1.6). Every later change of a sandbox or container is
    /// sent to each open stream; a scripted timed exit is sent with the next call after it.
    pub fn serve_container_events(&self) {
        self.lock().enable_events();
    }

    /// Ends every open event stream, with `err` as its last item (e.g. `Unavailable` for a
    /// runtime restart) or cleanly with `None`. Queue a `fail_next("GetContainerEvents", …)`
    /// to make the re-open fail too.
    pub fn end_event_streams(&self, err: Option<CriError>) {
        self.lock().events.end_streams(err.as_ref());
    }

    /// Number of event streams open right now.
    pub fn open_event_streams(&self) -> usize {
        self.lock().events.open_streams()
    }

    /// Every `PullImage` of `image` fails (code Unknown, containerd's wording around
    /// `message`) until [`clear_pull_failure`](Self::clear_pull_failure).
    ///
    /// # Panics
    /// On an invalid image reference.
    pub fn fail_pull(&self, image: &str, message: &str) {
        let name = normalize_image(image)
            .unwrap_or_else(|e| panic!("FakeRuntime::fail_pull({image:?}): {e}"));
        self.lock().pull_failures.insert(name, message.to_string());
    }

    /// `image` is private: a `PullImage` without exactly these basic-auth credentials fails
    /// as containerd does against a registry answering 401.
    ///
    /// # Panics
    /// On an invalid image reference.
    pub fn require_pull_credentials(&self, image: &str, username: &str, password: &str) {
        let name = normalize_image(image)
            .unwrap_or_else(|e| panic!("FakeRuntime::require_pull_credentials({image:?}): {e}"));
        self.lock()
            .pull_credentials
            .insert(name, (username.to_string(), password.to_string()));
    }

    /// Every `PullImage` so far: the normalized image and the `AuthConfig` it carried.
    pub fn pulls(&self) -> Vec<(String, Option<api::AuthConfig>)> {
        self.lock().pulls.clone()
    }

    pub fn clear_pull_failure(&self, image: &str) {
        if let Ok(name) = normalize_image(image) {
            self.lock().pull_failures.remove(&name);
        }
    }

    /// Sets runtime condition `type_` (`RuntimeReady`, `NetworkReady`) reported by `Status`.
    pub fn set_condition(&self, type_: &str, status: bool, reason: &str, message: &str) {
        let mut s = self.lock();
        let cond = api::RuntimeCondition {
            r#type: type_.to_string(),
            status,
            reason: reason.to_string(),
            message: message.to_string(),
        };
        match s.conditions.iter_mut().find(|c| c.r#type == type_) {
            Some(c) => *c = cond,
            None => s.conditions.push(cond),
        }
    }

    /// The runtime handlers `RunPodSandbox` accepts besides the default `""` (default:
    /// `runc`). Any other handler fails as containerd does: code Unknown, "failed to get
    /// sandbox runtime: no runtime for "x" is configured", and no sandbox is created.
    pub fn set_runtime_handlers(&self, handlers: &[&str]) {
        self.lock().runtime_handlers = handlers.iter().map(|h| (*h).to_owned()).collect();
    }

    /// The handlers and their features `Status` reports (`runtime_handlers`): `(name,
    /// recursive_read_only_mounts)`. Default: none, as containerd 1.6 reports none.
    pub fn set_status_handlers(&self, handlers: &[(&str, bool)]) {
        self.lock().status_handlers = handlers
            .iter()
            .map(|(name, rro)| api::RuntimeHandler {
                name: (*name).to_owned(),
                features: Some(api::RuntimeHandlerFeatures {
                    recursive_read_only_mounts: *rro,
                    user_namespaces: false,
                }),
            })
            .collect();
    }

    /// What `RuntimeConfig` answers; `None` (the default, like containerd 1.6) = unimplemented.
    pub fn set_runtime_config(&self, linux: Option<api::LinuxRuntimeConfiguration>) {
        self.lock().runtime_config = linux;
    }

    // ---- inspection ----

    /// RPC names of all calls so far, in order (e.g. `["RunPodSandbox", "CreateContainer"]`).
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// How many times `method` was called.
    pub fn call_count(&self, method: &str) -> usize {
        self.lock().calls.iter().filter(|c| *c == method).count()
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// All sandboxes, oldest first.
    pub fn sandboxes(&self) -> Vec<api::PodSandbox> {
        let mut s = self.lock();
        s.settle();
        s.list_pod_sandbox(None)
    }

    /// All containers, oldest first.
    pub fn containers(&self) -> Vec<api::Container> {
        let mut s = self.lock();
        s.settle();
        s.list_containers(None)
    }

    /// The full status of container `id`, if it exists.
    pub fn container(&self, id: &str) -> Option<api::ContainerStatus> {
        let mut s = self.lock();
        s.settle();
        s.container_status(id).ok()
    }

    /// The full status of sandbox `id`, if it exists.
    pub fn sandbox(&self, id: &str) -> Option<api::PodSandboxStatus> {
        self.lock().pod_sandbox_status(id).ok()
    }

    /// The config container `id` was created with (security context, mounts, env…), if it
    /// exists.
    pub fn container_config(&self, id: &str) -> Option<api::ContainerConfig> {
        self.lock().containers.get(id).map(|c| c.config.clone())
    }

    /// The config sandbox `id` was created with (cgroup parent, resources…), if it exists.
    pub fn sandbox_config(&self, id: &str) -> Option<api::PodSandboxConfig> {
        self.lock().sandboxes.get(id).map(|sb| sb.config.clone())
    }

    /// Images present (first tag, or ID if untagged), in the order they were added.
    pub fn images(&self) -> Vec<String> {
        self.lock()
            .images
            .all()
            .iter()
            .map(|i| i.repo_tags.first().cloned().unwrap_or_else(|| i.id.clone()))
            .collect()
    }

    pub fn has_image(&self, image: &str) -> bool {
        self.lock().images.get(image).is_some()
    }

    /// The pod CIDR last passed through `UpdateRuntimeConfig`.
    pub fn pod_cidr(&self) -> String {
        self.lock().pod_cidr.clone()
    }
}
