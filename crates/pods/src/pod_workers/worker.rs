//! One pod's worker task (upstream `podWorkerLoop`/`startPodSync`/`completeWork`): owns the
//! pod's round loop. Receives wake-ups from `PodWorkers`; takes the pending update, decides
//! whether the pod may start, waits for a runtime status newer than its last sync, runs one
//! `PodSyncer` call, and records the outcome (next phase, resync or retry) in the shared state.

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::{KillOptions, PodWorkers, UpdateType, WorkerPhase, effective_grace_period, full_name};
use crate::container::{PodStatus, RunningPod};
use crate::events::EventType;
use crate::supervisor::{POD_WORKER, catch_panic};
use crate::types::{PodExt, PodUid};
use std::time::Duration;

/// What the worker snapshotted for one round of work.
struct Round {
    phase: WorkerPhase,
    update_type: UpdateType,
    pod: Option<std::sync::Arc<Pod>>,
    running_pod: Option<RunningPod>,
    removed: bool,
    /// Fires when a kill interrupts a sync, or a shorter grace period a kill.
    cancel: CancellationToken,
}

enum Outcome {
    /// Requeue after the resync interval.
    Resync,
    /// Retry after the backoff period; the error is what stops the pod from progressing.
    Retry(String),
    /// Move to the next phase and run it at once.
    Advance(WorkerPhase),
    /// Nothing more to do.
    Idle,
}

/// What the pod cache gave for a round.
enum Fetched {
    Status(PodStatus),
    /// The runtime could not be inspected for this pod (the PLEG recorded the error).
    Failed(String),
    /// The kubelet is shutting down.
    Shutdown,
}

pub(super) struct Worker {
    uid: PodUid,
    workers: PodWorkers,
}

impl Worker {
    pub(super) fn new(uid: &str, workers: PodWorkers) -> Self {
        Self {
            uid: uid.to_owned(),
            workers,
        }
    }

    /// Runs the worker loop; a panic in it (a bug, or a runtime answer nothing expected) is
    /// logged and counted, and the loop restarts with the pod's pending work re-queued after
    /// the backoff, so one pod's panic neither kills the process nor strands the pod.
    pub(super) async fn supervise(self, mut wake: mpsc::Receiver<()>, cancel: CancellationToken) {
        loop {
            match catch_panic(self.run(&mut wake, &cancel)).await {
                Ok(()) => break,
                Err(message) => {
                    error!(uid = %self.uid, "task {POD_WORKER} panicked: {message}; restarting it");
                    if let Some(m) = self.workers.inner.metrics.get() {
                        m.inc_task_panic(POD_WORKER);
                    }
                    let backoff = self.workers.inner.timings.backoff_period;
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        () = tokio::time::sleep(jitter(&self.uid, backoff)) => {}
                    }
                    self.rerun_after_panic();
                }
            }
        }
        debug!(uid = %self.uid, "pod worker exited");
    }

    async fn run(&self, wake: &mut mpsc::Receiver<()>, cancel: &CancellationToken) {
        let mut last_sync: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                msg = wake.recv() => if msg.is_none() { break },
            }
            let Some(round) = self.begin_round() else {
                continue;
            };
            crate::metrics::timeline::mark(&self.uid, "worker_round");
            let status = match self.fresh_status(&round, last_sync, cancel).await {
                Fetched::Status(s) => {
                    crate::metrics::timeline::mark(&self.uid, "status_fetched");
                    s
                }
                Fetched::Failed(e) => {
                    // Upstream: no sync on a guessed status; FailedSync, then retry with
                    // backoff. The last sync time stays, so the retry takes the next data.
                    self.status_failed(&round, &e);
                    self.finish_round(Outcome::Retry(format!("error determining status: {e}")));
                    continue;
                }
                Fetched::Shutdown => break,
            };
            let outcome = self.run_round(&round, &status).await;
            last_sync = Some(Instant::now());
            self.workers.inner.syncer.round_finished(&self.uid);
            self.finish_round(outcome);
        }
    }

    /// Queues the pod's current phase again (the panicked round's update was consumed).
    fn rerun_after_panic(&self) {
        let mut state = self.workers.lock();
        if let Some(st) = state.workers.get_mut(&self.uid) {
            st.round_cancel = None;
            let again = match st.phase {
                WorkerPhase::Finished => return,
                WorkerPhase::Syncing => UpdateType::Sync,
                WorkerPhase::Terminating { .. } | WorkerPhase::Terminated => UpdateType::Kill,
            };
            st.pending.get_or_insert(again);
            st.wake();
        }
    }

    /// Takes the pending update (upstream `startPodSync`). A static pod starts only once no
    /// other pod with its full name runs (it keeps its update and waits to be woken, with a
    /// backoff resync as a safety net); one terminated before it could start is finished at
    /// once, as nothing of it ever ran.
    fn begin_round(&self) -> Option<Round> {
        let mut guard = self.workers.lock();
        let state = &mut *guard;
        let st = state.workers.get_mut(&self.uid)?;
        let update_type = st.pending.take()?;
        if !st.started && st.pod.is_some() && st.is_static {
            let full = st.full_name.clone();
            if st.phase != WorkerPhase::Syncing {
                info!(pod = %full_name(st), uid = %self.uid, "static pod terminated before it could start");
                st.phase = WorkerPhase::Finished;
                state.static_pods.withdraw(&full, &self.uid);
                state.wake_next_static(&full, &self.uid);
                return None;
            }
            if !state.allow_static_start(&full, &self.uid) {
                let st = state.workers.get_mut(&self.uid)?;
                st.pending = Some(update_type);
                if !st.wait_logged {
                    st.wait_logged = true;
                    info!(pod = %full_name(st), uid = %self.uid, "static pod waits for the previous pod with the same full name to terminate");
                }
                let backoff = self.workers.inner.timings.backoff_period;
                state.work_queue.insert(
                    self.uid.clone(),
                    Instant::now() + jitter(&self.uid, backoff),
                );
                return None;
            }
        }
        let st = state.workers.get_mut(&self.uid)?;
        st.started = true;
        let cancel = CancellationToken::new();
        st.round_cancel = Some(cancel.clone());
        Some(Round {
            phase: st.phase,
            update_type,
            pod: st.pod.clone(),
            running_pod: st.running_pod.clone(),
            removed: st.removed,
            cancel,
        })
    }

    async fn fresh_status(
        &self,
        round: &Round,
        last_sync: Option<Instant>,
        cancel: &CancellationToken,
    ) -> Fetched {
        if round.pod.is_none() {
            return Fetched::Status(PodStatus::default());
        }
        let cache = &self.workers.inner.cache;
        let fetch = async {
            match last_sync {
                Some(t) => cache.get_newer_than(&self.uid, t).await,
                None => cache.get_first(&self.uid).await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => Fetched::Shutdown,
            r = fetch => match r {
                Ok(s) => Fetched::Status(s),
                Err(e) => Fetched::Failed(e),
            },
        }
    }

    /// Upstream's pod worker event when the status cannot be determined.
    fn status_failed(&self, round: &Round, error: &str) {
        let message = format!("error determining status: {error}");
        match &round.pod {
            Some(pod) => {
                warn!(pod = %pod.full_name(), uid = %self.uid, error = %error, "runtime status of pod unavailable; not syncing, will retry");
                if let Some(events) = self.workers.inner.events.get() {
                    events.event(pod, EventType::Warning, "FailedSync", &message);
                }
            }
            None => warn!(uid = %self.uid, error = %error, "{message}"),
        }
    }

    async fn run_round(&self, round: &Round, status: &PodStatus) -> Outcome {
        let syncer = &self.workers.inner.syncer;
        match (round.phase, &round.pod) {
            (WorkerPhase::Syncing, Some(pod)) => {
                match syncer
                    .sync_pod(round.update_type, pod, status, &round.cancel)
                    .await
                {
                    Ok(true) => {
                        info!(pod = %pod.full_name(), uid = %self.uid, reason = "pod reached a terminal phase", "terminating pod");
                        let options = KillOptions::default();
                        let (grace, _) =
                            effective_grace_period(None, Some(pod), options.grace_period_override);
                        Outcome::Advance(WorkerPhase::Terminating {
                            grace_period: grace,
                        })
                    }
                    Ok(false) => Outcome::Resync,
                    Err(_) if round.cancel.is_cancelled() => Outcome::Idle,
                    Err(e) => {
                        info!(pod = %pod.full_name(), uid = %self.uid, error = %e, "error syncing pod, will retry");
                        Outcome::Retry(e.to_string())
                    }
                }
            }
            (WorkerPhase::Terminating { grace_period }, Some(pod)) => {
                // A shorter grace period cancels the kill in flight; the update that shortened
                // it is pending, so the next round kills again with the new grace period.
                let killed = tokio::select! {
                    biased;
                    () = round.cancel.cancelled() => None,
                    r = syncer.sync_terminating_pod(pod, status, grace_period) => Some(r),
                };
                match killed {
                    None => {
                        info!(pod = %pod.full_name(), uid = %self.uid, grace_period, "kill cancelled for a shorter grace period");
                        Outcome::Idle
                    }
                    Some(Ok(())) => Outcome::Advance(WorkerPhase::Terminated),
                    Some(Err(e)) => {
                        warn!(pod = %pod.full_name(), uid = %self.uid, error = %e, "error terminating pod, will retry");
                        Outcome::Retry(e.to_string())
                    }
                }
            }
            (WorkerPhase::Terminating { .. }, None) => match &round.running_pod {
                Some(running) => match syncer.sync_terminating_runtime_pod(running).await {
                    Ok(()) => Outcome::Advance(WorkerPhase::Finished),
                    Err(e) => {
                        warn!(uid = %self.uid, error = %e, "error killing orphaned runtime pod, will retry");
                        Outcome::Retry(e.to_string())
                    }
                },
                None => Outcome::Advance(WorkerPhase::Finished),
            },
            (WorkerPhase::Terminated, Some(pod)) => {
                match syncer.sync_terminated_pod(pod, status, round.removed).await {
                    Ok(()) => Outcome::Advance(WorkerPhase::Finished),
                    Err(e) => {
                        warn!(pod = %pod.full_name(), uid = %self.uid, error = %e, "error cleaning up terminated pod, will retry");
                        Outcome::Retry(e.to_string())
                    }
                }
            }
            (WorkerPhase::Terminated, None) => Outcome::Advance(WorkerPhase::Finished),
            (WorkerPhase::Syncing, None) | (WorkerPhase::Finished, _) => Outcome::Idle,
        }
    }

    /// Records a round's outcome (upstream `completeWork`, `completeTerminated`): the next
    /// phase, or a resync/retry in the work queue; a finished static pod frees its full name.
    fn finish_round(&self, outcome: Outcome) {
        let timings = self.workers.inner.timings;
        let delay = {
            let mut guard = self.workers.lock();
            let state = &mut *guard;
            let Some(st) = state.workers.get_mut(&self.uid) else {
                return;
            };
            st.round_cancel = None;
            st.last_error = match &outcome {
                Outcome::Retry(e) => Some((e.clone(), Instant::now())),
                Outcome::Resync | Outcome::Advance(_) => None,
                Outcome::Idle => st.last_error.take(),
            };
            let mut finished = false;
            let delay = match outcome {
                Outcome::Advance(next) => {
                    // A kill that arrived meanwhile may have moved us on; never move backwards.
                    if rank(next) > rank(st.phase) {
                        st.phase = next;
                        if next == WorkerPhase::Finished {
                            finished = true;
                        } else {
                            st.pending.get_or_insert(UpdateType::Kill);
                        }
                    }
                    None
                }
                Outcome::Resync => Some(timings.resync_interval),
                Outcome::Retry(_) => Some(timings.backoff_period),
                Outcome::Idle => None,
            };
            if st.pending.is_some() {
                st.wake();
            }
            if finished {
                state.release_static(&self.uid);
            }
            delay
        };
        if let Some(d) = delay {
            self.workers.enqueue(&self.uid, jitter(&self.uid, d));
        }
    }
}

fn rank(p: WorkerPhase) -> u8 {
    match p {
        WorkerPhase::Syncing => 0,
        WorkerPhase::Terminating { .. } => 1,
        WorkerPhase::Terminated => 2,
        WorkerPhase::Finished => 3,
    }
}

/// Spreads requeues by up to 5 % so pods started together do not resync in lock step; the
/// spread is derived from the UID so it is stable for a pod.
pub(super) fn jitter(uid: &str, d: Duration) -> Duration {
    let h = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    d + d.mul_f64((h % 1000) as f64 / 1000.0 * 0.05)
}
