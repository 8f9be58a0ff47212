//! One probe worker (upstream `prober/worker.go`): a task per (pod, container, probe kind) that
//! probes every `periodSeconds` while the container runs, counts consecutive results against
//! the success/failure thresholds and writes the outcome to the results manager under the
//! current container ID. Receives the pod and its container's current ID/start time through a
//! watch channel; emits `Unhealthy`/`ProbeWarning` events and `prober_probe_total` counts.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use rkubelet_cri::RuntimeService;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

use crate::clock::Clock;
use crate::container::Timestamp;
use crate::events::{EventRecorder, EventType};
use crate::kuberuntime::actions::ProbeResult;
use crate::prober::handlers::{Action, Outcome, Target, run_probe};
use crate::prober::metrics::ProbeMetrics;
use crate::prober::results::{ProbeKind, ResultsManager};
use crate::supervisor::{PROBE_WORKER, catch_panic};
use crate::types::PodExt;

/// What a worker needs to know about its container right now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerInput {
    /// The running container instance, if one runs.
    pub container_id: Option<String>,
    pub started_at: Option<Timestamp>,
    /// The pod's primary IP.
    pub pod_ip: String,
}

/// The probe's settings with upstream defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeTimings {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl ProbeTimings {
    pub fn of(probe: &Probe) -> Self {
        let secs = |v: Option<i32>, d: i32, min: i32| {
            Duration::from_secs(u64::try_from(v.unwrap_or(d).max(min)).unwrap_or(0))
        };
        let count = |v: Option<i32>, d: i32| u32::try_from(v.unwrap_or(d).max(1)).unwrap_or(1);
        Self {
            initial_delay: secs(probe.initial_delay_seconds, 0, 0),
            period: secs(probe.period_seconds, 10, 1),
            timeout: secs(probe.timeout_seconds, 1, 1),
            success_threshold: count(probe.success_threshold, 1),
            failure_threshold: count(probe.failure_threshold, 3),
        }
    }
}

/// Threshold counting (upstream worker's `lastResult`/`resultRun`/`onHold`).
#[derive(Debug, Clone, Default)]
pub struct Counter {
    last: Option<ProbeResult>,
    run: u32,
    /// A liveness/startup failure was reported: wait for a new container.
    pub on_hold: bool,
}

impl Counter {
    /// Feeds one probe result; returns the result to store once a threshold is reached.
    pub fn observe(
        &mut self,
        kind: ProbeKind,
        result: ProbeResult,
        t: &ProbeTimings,
    ) -> Option<ProbeResult> {
        if self.last == Some(result) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(result);
            self.run = 1;
        }
        let reached = match result {
            ProbeResult::Failure => self.run >= t.failure_threshold,
            ProbeResult::Success => self.run >= t.success_threshold,
            ProbeResult::Unknown => true,
        };
        if !reached {
            return None;
        }
        if result == ProbeResult::Failure && kind != ProbeKind::Readiness {
            // The container will be restarted; don't keep counting against it.
            self.on_hold = true;
            self.run = 0;
        }
        Some(result)
    }
}

pub(crate) struct Worker {
    pub kind: ProbeKind,
    pub pod: Pod,
    pub container: Container,
    pub probe: Probe,
    pub runtime: Arc<dyn RuntimeService>,
    pub results: ResultsManager,
    pub events: Arc<dyn EventRecorder>,
    pub metrics: ProbeMetrics,
    pub clock: Clock,
    /// Where a caught panic is counted (`rkubelet_task_panics_total{task="probe_worker"}`).
    pub panics: Arc<OnceLock<crate::metrics::KubeletMetrics>>,
}

impl Worker {
    pub(crate) async fn run(
        self,
        mut input: watch::Receiver<WorkerInput>,
        cancel: CancellationToken,
    ) {
        let timings = ProbeTimings::of(&self.probe);
        let mut current: Option<String> = None;
        let mut counter = Counter::default();
        let mut ticker = tokio::time::interval(timings.period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                changed = input.changed() => if changed.is_err() { break },
                _ = ticker.tick() => {}
            }
            let now_input = input.borrow_and_update().clone();
            if now_input.container_id != current {
                if let Some(old) = current.take() {
                    self.results.remove(&old, self.kind);
                }
                counter = Counter::default();
                if let Some(id) = &now_input.container_id {
                    self.results
                        .set(self.pod.uid(), id, self.kind, self.kind.initial_value());
                }
                current = now_input.container_id.clone();
                // A new instance is probed now, then every period.
                ticker.reset();
            }
            let Some(id) = current.clone() else { continue };
            if counter.on_hold {
                continue;
            }
            if !self.should_probe(&id, &now_input, &timings) {
                continue;
            }
            let probe_start = tokio::time::Instant::now();
            // Boxed: a probe's future (an HTTP client, a gRPC channel, an exec stream) is
            // ~18 KiB; inline it would stay in every worker's task between probes.
            let probed = catch_panic(Box::pin(run_probe(
                Action::of_probe(&self.probe),
                &Target {
                    runtime: self.runtime.as_ref(),
                    container: &self.container,
                    container_id: &id,
                    pod_ip: &now_input.pod_ip,
                    timeout: timings.timeout,
                },
            )))
            .await;
            let outcome = match probed {
                Ok(outcome) => outcome,
                Err(message) => {
                    // The probe is thrown away, as one that could not run; the next period
                    // probes again.
                    error!(pod = %self.pod.full_name(), container = %self.container.name, kind = ?self.kind, "task {PROBE_WORKER} panicked: {message}; restarting it");
                    if let Some(m) = self.panics.get() {
                        m.inc_task_panic(PROBE_WORKER);
                    }
                    continue;
                }
            };
            if cancel.is_cancelled() {
                break;
            }
            if !matches!(outcome.outcome, Outcome::Failure) {
                let (c, elapsed) = (&self.container.name, probe_start.elapsed());
                self.metrics
                    .observe_duration(self.kind, c, &self.pod, elapsed);
            }
            // A probe that could not run is thrown away, as upstream.
            let Some(result) = self.report(&outcome.outcome, &outcome.output) else {
                continue;
            };
            if let Some(r) = counter.observe(self.kind, result, &timings) {
                self.results.set(self.pod.uid(), &id, self.kind, r);
            }
        }
        if let Some(old) = current {
            self.results.remove(&old, self.kind);
        }
        debug!(pod = %self.pod.full_name(), container = %self.container.name, kind = ?self.kind, "probe worker stopped");
    }

    /// Upstream: liveness and readiness wait for the startup probe; startup stops once it
    /// succeeded; nothing runs before `initialDelaySeconds`.
    fn should_probe(&self, id: &str, input: &WorkerInput, t: &ProbeTimings) -> bool {
        let started = self.container.startup_probe.is_none()
            || self.results.get(id, ProbeKind::Startup) == Some(ProbeResult::Success);
        match self.kind {
            ProbeKind::Startup if started => return false,
            ProbeKind::Liveness | ProbeKind::Readiness if !started => return false,
            _ => {}
        }
        if let Some(at) = input.started_at {
            let running_for = self.clock.now().signed_duration_since(at);
            if running_for.num_seconds()
                < i64::try_from(t.initial_delay.as_secs()).unwrap_or(i64::MAX)
            {
                return false;
            }
        }
        true
    }

    /// Emits the upstream event and metric for one outcome; maps it to a stored result.
    fn report(&self, outcome: &Outcome, output: &str) -> Option<ProbeResult> {
        let title = self.kind.title();
        let (result, label) = match outcome {
            Outcome::Success => (ProbeResult::Success, "successful"),
            Outcome::Warning => {
                self.events.event(
                    &self.pod,
                    EventType::Warning,
                    "ProbeWarning",
                    &format!("{title} probe warning: {output}"),
                );
                (ProbeResult::Success, "successful")
            }
            Outcome::Failure => {
                self.events.event(
                    &self.pod,
                    EventType::Warning,
                    "Unhealthy",
                    &format!("{title} probe failed: {output}"),
                );
                (ProbeResult::Failure, "failed")
            }
            Outcome::Unknown => {
                self.events.event(
                    &self.pod,
                    EventType::Warning,
                    "Unhealthy",
                    &format!("{title} probe errored: {output}"),
                );
                self.metrics
                    .inc(self.kind, "unknown", &self.container.name, &self.pod);
                return None;
            }
        };
        self.metrics
            .inc(self.kind, label, &self.container.name, &self.pod);
        debug!(pod = %self.pod.full_name(), container = %self.container.name, probe = title, result = label, output, "probe ran");
        Some(result)
    }
}
