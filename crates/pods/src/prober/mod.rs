//! The prober manager (upstream `prober_manager.go`): owns one worker task per (pod, container,
//! probe kind) and the results managers they write to. Receives `update_pod` (the pod spec and
//! its runtime status, after every sync) and `remove_pod` (when the pod terminates); emits
//! result changes on the channel returned by [`ProbeManager::new`] and serves the results as
//! [`ProbeResults`] to `compute_pod_actions` and status generation.

pub mod handlers;
pub mod metrics;
pub mod results;
pub mod tls;
pub mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use rkubelet_cri::RuntimeService;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::container::{ContainerState, PodStatus};
use crate::events::EventRecorder;
use crate::kuberuntime::actions::{ProbeResult, ProbeResults, is_restartable_init_container};
use crate::types::{PodExt, PodUid};

use crate::sync;
pub use metrics::{ProbeLabels, ProbeMetrics};
pub use results::{ProbeKind, ProbeUpdate, ResultsManager};
use worker::{Worker, WorkerInput};

type WorkerKey = (PodUid, String, ProbeKind);

struct WorkerHandle {
    cancel: CancellationToken,
    input: watch::Sender<WorkerInput>,
}

struct Inner {
    runtime: Arc<dyn RuntimeService>,
    events: Arc<dyn EventRecorder>,
    results: ResultsManager,
    metrics: ProbeMetrics,
    clock: Clock,
    workers: Mutex<HashMap<WorkerKey, WorkerHandle>>,
    tracker: TaskTracker,
    cancel: CancellationToken,
    /// Where caught worker panics are counted (`rkubelet_task_panics_total`).
    panics: Arc<OnceLock<crate::metrics::KubeletMetrics>>,
}

/// Handle to the prober; cheap to clone.
#[derive(Clone)]
pub struct ProbeManager {
    inner: Arc<Inner>,
}

impl ProbeManager {
    /// A manager whose workers stop with `cancel`, and the receiver of result changes.
    pub fn new(
        runtime: Arc<dyn RuntimeService>,
        events: Arc<dyn EventRecorder>,
        clock: Clock,
        cancel: CancellationToken,
    ) -> (Self, mpsc::UnboundedReceiver<ProbeUpdate>) {
        let (results, rx) = ResultsManager::new();
        (
            Self {
                inner: Arc::new(Inner {
                    runtime,
                    events,
                    results,
                    metrics: ProbeMetrics::default(),
                    clock,
                    workers: Mutex::new(HashMap::new()),
                    tracker: TaskTracker::new(),
                    cancel,
                    panics: Arc::new(OnceLock::new()),
                }),
            },
            rx,
        )
    }

    fn workers(&self) -> MutexGuard<'_, HashMap<WorkerKey, WorkerHandle>> {
        sync::lock(&self.inner.workers)
    }

    /// The results, for `compute_pod_actions_with_probes` and status generation.
    pub fn results(&self) -> &ResultsManager {
        &self.inner.results
    }

    /// Counts caught worker panics in `metrics` (the first call wins).
    pub fn set_metrics(&self, metrics: crate::metrics::KubeletMetrics) {
        let _ = self.inner.panics.set(metrics);
    }

    /// The `prober_probe_total` registry.
    pub fn metrics(&self) -> &ProbeMetrics {
        &self.inner.metrics
    }

    /// Number of live workers and stored results (for leak checks).
    pub fn sizes(&self) -> (usize, usize) {
        (self.workers().len(), self.inner.results.len())
    }

    /// Starts workers for every probe the pod defines (regular containers and sidecars) and
    /// tells each which container instance runs now.
    pub fn update_pod(&self, pod: &Pod, status: &PodStatus, pod_ip: &str) {
        if self.inner.cancel.is_cancelled() {
            return;
        }
        let pod_ip = pod_ip.to_owned();
        let spec = pod.spec.as_ref();
        let sidecars = spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default()
            .iter()
            .filter(|c| is_restartable_init_container(c));
        let regular = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
        let mut workers = self.workers();
        for c in sidecars.chain(regular.iter()) {
            let newest = status.find_container(&c.name);
            let input = WorkerInput {
                container_id: newest
                    .filter(|s| s.state == ContainerState::Running)
                    .map(|s| s.id.clone()),
                started_at: newest.and_then(|s| s.started_at),
                pod_ip: pod_ip.clone(),
            };
            for (kind, probe) in probes_of(c) {
                let key = (pod.uid().to_owned(), c.name.clone(), kind);
                match workers.get(&key) {
                    Some(h) => {
                        h.input.send_if_modified(|cur| {
                            let changed = *cur != input;
                            if changed {
                                *cur = input.clone();
                            }
                            changed
                        });
                    }
                    None => {
                        let handle = self.spawn(pod, c, kind, probe.clone(), input.clone());
                        workers.insert(key, handle);
                    }
                }
            }
        }
    }

    fn spawn(
        &self,
        pod: &Pod,
        c: &Container,
        kind: ProbeKind,
        probe: Probe,
        input: WorkerInput,
    ) -> WorkerHandle {
        let cancel = self.inner.cancel.child_token();
        let (tx, rx) = watch::channel(WorkerInput::default());
        // Marks the initial value as unseen so the worker picks it up at once.
        tx.send_replace(input);
        let w = self.worker(pod, c, kind, probe);
        let mut rx = rx;
        rx.mark_changed();
        self.inner.tracker.spawn(w.run(rx, cancel.clone()));
        WorkerHandle { cancel, input: tx }
    }

    fn worker(&self, pod: &Pod, c: &Container, kind: ProbeKind, probe: Probe) -> Worker {
        Worker {
            kind,
            pod: pod.clone(),
            container: c.clone(),
            probe,
            runtime: self.inner.runtime.clone(),
            results: self.inner.results.clone(),
            events: self.inner.events.clone(),
            metrics: self.inner.metrics.clone(),
            clock: self.inner.clock,
            panics: self.inner.panics.clone(),
        }
    }

    /// Stops the liveness and startup workers of a terminating pod (upstream
    /// `StopLivenessAndStartup`); readiness keeps running until the pod is removed.
    pub fn stop_liveness_and_startup(&self, pod_uid: &str) {
        self.workers().retain(|(uid, _, kind), h| {
            let stop = uid == pod_uid && *kind != ProbeKind::Readiness;
            if stop {
                h.cancel.cancel();
            }
            !stop
        });
    }

    /// Stops every worker of the pod; their results go with them.
    pub fn remove_pod(&self, pod_uid: &str) {
        self.workers().retain(|(uid, _, _), h| {
            let stop = uid == pod_uid;
            if stop {
                h.cancel.cancel();
            }
            !stop
        });
        self.inner.metrics.forget_pod(pod_uid);
    }

    /// Waits for every worker to stop (after the cancellation token fired).
    pub async fn shutdown(&self) {
        self.inner.cancel.cancel();
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }
}

impl ProbeResults for ProbeManager {
    fn liveness(&self, id: &str) -> Option<ProbeResult> {
        self.inner.results.liveness(id)
    }
    fn startup(&self, id: &str) -> Option<ProbeResult> {
        self.inner.results.startup(id)
    }
    fn readiness(&self, id: &str) -> Option<ProbeResult> {
        self.inner.results.readiness(id)
    }
}

/// The probes a container defines, by kind.
pub fn probes_of(c: &Container) -> impl Iterator<Item = (ProbeKind, &Probe)> {
    [
        (ProbeKind::Liveness, c.liveness_probe.as_ref()),
        (ProbeKind::Readiness, c.readiness_probe.as_ref()),
        (ProbeKind::Startup, c.startup_probe.as_ref()),
    ]
    .into_iter()
    .filter_map(|(k, p)| p.map(|p| (k, p)))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod output_tests;
