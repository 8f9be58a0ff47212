//! Supervision of the kubelet's long-running tasks. Owns the record of which singleton tasks
//! (sync loop, PLEG, sources, servers, managers…) panicked or stopped before shutdown.
//! Receives the futures to run (`spawn_critical`) on the agent's task tracker; emits the first
//! panic as a [`TaskPanic`] (the binary exits non-zero on it, as the Go kubelet crashes and
//! systemd restarts it) and a health check that fails while any singleton is dead.
//! Per-pod tasks (pod and probe workers) catch their own panics with [`catch_panic`] and
//! restart; they count them in `rkubelet_task_panics_total{task}`.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::error;

use crate::health::HealthCheck;
use crate::sync;

/// `task` label of `rkubelet_task_panics_total` for a pod worker.
pub const POD_WORKER: &str = "pod_worker";
/// `task` label of `rkubelet_task_panics_total` for a probe worker.
pub const PROBE_WORKER: &str = "probe_worker";

/// A singleton task panicked: the kubelet must exit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task {task} panicked: {message}")]
pub struct TaskPanic {
    /// The name the task was spawned with.
    pub task: String,
    /// The panic payload (`panic!`'s message), or a placeholder for a non-string payload.
    pub message: String,
}

/// The text of a panic payload (`&str` and `String` payloads; others are opaque).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Runs `fut`, turning a panic into `Err(message)` (per-pod tasks restart on it).
pub async fn catch_panic<T>(fut: impl Future<Output = T>) -> Result<T, String> {
    AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .map_err(|payload| panic_message(payload.as_ref()))
}

#[derive(Default)]
struct Dead {
    /// Singletons that returned before shutdown began.
    exited: Vec<&'static str>,
    /// Singletons that panicked, with the message.
    panicked: Vec<(&'static str, String)>,
}

struct Inner {
    tracker: TaskTracker,
    /// The agent's root token: a task that stops after it fired stopped on purpose.
    shutdown: CancellationToken,
    dead: Mutex<Dead>,
    fatal: watch::Sender<Option<TaskPanic>>,
}

/// Spawns and watches the singleton tasks. Cheap to clone.
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").finish_non_exhaustive()
    }
}

impl Supervisor {
    /// Tasks run on `tracker`; `shutdown` is the token whose cancellation stops them all.
    pub fn new(tracker: TaskTracker, shutdown: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                tracker,
                shutdown,
                dead: Mutex::new(Dead::default()),
                fatal: watch::Sender::new(None),
            }),
        }
    }

    fn dead(&self) -> MutexGuard<'_, Dead> {
        sync::lock(&self.inner.dead)
    }

    /// Spawns a singleton that runs until shutdown. A panic is logged as
    /// `task <name> panicked: <msg>` and reported through [`Supervisor::fatal`]; returning
    /// before shutdown is logged and fails [`Supervisor::health`].
    pub fn spawn_critical<F>(&self, name: &'static str, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let this = self.clone();
        self.inner.tracker.spawn(async move {
            let outcome = catch_panic(fut).await;
            this.finished(name, outcome);
        });
    }

    fn finished(&self, name: &'static str, outcome: Result<(), String>) {
        match outcome {
            Ok(()) if self.inner.shutdown.is_cancelled() => {}
            Ok(()) => {
                error!(task = name, "task {name} exited unexpectedly");
                self.dead().exited.push(name);
            }
            Err(message) => {
                error!(task = name, "task {name} panicked: {message}");
                self.dead().panicked.push((name, message.clone()));
                self.inner.fatal.send_if_modified(|first| {
                    if first.is_some() {
                        return false;
                    }
                    *first = Some(TaskPanic {
                        task: name.to_owned(),
                        message,
                    });
                    true
                });
            }
        }
    }

    /// Waits for the first singleton panic (pending forever if none happens).
    pub async fn fatal(&self) -> TaskPanic {
        let mut rx = self.inner.fatal.subscribe();
        loop {
            if let Some(p) = rx.borrow_and_update().clone() {
                return p;
            }
            if rx.changed().await.is_err() {
                // The sender lives in `self`; unreachable, but never spin.
                std::future::pending::<()>().await;
            }
        }
    }

    /// `Err` naming every singleton that panicked or stopped before shutdown.
    pub fn health(&self) -> Result<(), String> {
        let dead = self.dead();
        if dead.exited.is_empty() && dead.panicked.is_empty() {
            return Ok(());
        }
        let mut parts: Vec<String> = dead
            .panicked
            .iter()
            .map(|(name, msg)| format!("task {name} panicked: {msg}"))
            .collect();
        parts.extend(
            dead.exited
                .iter()
                .map(|name| format!("task {name} exited unexpectedly")),
        );
        Err(parts.join("; "))
    }

    /// [`Supervisor::health`] as a `/healthz` check.
    pub fn health_check(&self) -> HealthCheck {
        let this = self.clone();
        Arc::new(move || this.health())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn supervisor() -> (Supervisor, TaskTracker, CancellationToken) {
        let (tracker, cancel) = (TaskTracker::new(), CancellationToken::new());
        (
            Supervisor::new(tracker.clone(), cancel.clone()),
            tracker,
            cancel,
        )
    }

    #[tokio::test]
    async fn a_panicking_singleton_is_fatal_and_named() {
        let (sup, tracker, cancel) = supervisor();
        sup.spawn_critical("healthy", {
            let cancel = cancel.clone();
            async move { cancel.cancelled().await }
        });
        assert!(sup.health().is_ok());
        sup.spawn_critical("pleg", async {
            tokio::task::yield_now().await;
            panic!("relist exploded");
        });
        let fatal = tokio::time::timeout(Duration::from_secs(5), sup.fatal())
            .await
            .unwrap();
        assert_eq!(
            fatal,
            TaskPanic {
                task: "pleg".into(),
                message: "relist exploded".into()
            }
        );
        assert_eq!(fatal.to_string(), "task pleg panicked: relist exploded");
        assert_eq!(
            sup.health_check()().unwrap_err(),
            "task pleg panicked: relist exploded"
        );
        // The other tasks still stop on shutdown.
        cancel.cancel();
        tracker.close();
        tokio::time::timeout(Duration::from_secs(5), tracker.wait())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn formatted_panics_and_later_panics_keep_the_first() {
        let (sup, tracker, _cancel) = supervisor();
        let n = 7;
        sup.spawn_critical("sync loop", async move { panic!("bad pod {n}") });
        tracker.close();
        tracker.wait().await;
        sup.spawn_critical("status", async { panic!("second") });
        tracker.wait().await;
        let fatal = sup.fatal().await;
        assert_eq!(fatal.task, "sync loop");
        assert_eq!(fatal.message, "bad pod 7");
        assert_eq!(
            sup.health().unwrap_err(),
            "task sync loop panicked: bad pod 7; task status panicked: second"
        );
    }

    #[tokio::test]
    async fn an_early_return_fails_health_but_a_shutdown_does_not() {
        let (sup, tracker, cancel) = supervisor();
        sup.spawn_critical("merger", async {});
        let stops = cancel.clone();
        sup.spawn_critical("lease", async move { stops.cancelled().await });
        tokio::time::timeout(Duration::from_secs(5), async {
            while sup.health().is_ok() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        assert_eq!(sup.health().unwrap_err(), "task merger exited unexpectedly");
        cancel.cancel();
        tracker.close();
        tracker.wait().await;
        assert_eq!(sup.health().unwrap_err(), "task merger exited unexpectedly");
        // No panic: `fatal` stays pending.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), sup.fatal())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn catch_panic_returns_the_message() {
        assert_eq!(catch_panic(async { 3 }).await, Ok(3));
        let r: Result<(), String> =
            catch_panic(async { panic!("{}", String::from("owned")) }).await;
        assert_eq!(r, Err("owned".into()));
        assert_eq!(
            panic_message(&42_u8 as &(dyn Any + Send)),
            "non-string panic payload"
        );
    }
}
