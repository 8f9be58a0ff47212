//! The pod start timeline: one DEBUG event on the tracing target `timeline` per step of the
//! start path (manifest seen, merged, admitted, dispatched to the pod worker, sync begin/end,
//! sandbox, image, container create/start, post-start hook, PLEG event, Running) and one per
//! CRI call made while a pod's sync runs, each carrying the pod UID and a wall-clock
//! timestamp. Receives step marks from the start path and CRI timings from the
//! `instrumented_cri` decorators; emits log lines that `bench/src/podstart.rs --timeline`
//! turns into per-step percentiles. Off by default (the default filters never enable the
//! `timeline` target): a disabled mark costs one cached callsite check and nothing else.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The tracing target of every timeline event (enable with `RUST_LOG=…,timeline=debug`).
pub const TARGET: &str = "timeline";

tokio::task_local! {
    /// The UID of the pod whose sync the current task runs, for attributing CRI calls.
    static POD: Arc<str>;
}

/// Whether timeline events are emitted at all.
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::DEBUG)
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Marks that pod `uid` reached `step` now.
pub fn mark(uid: &str, step: &'static str) {
    if enabled() {
        tracing::debug!(target: TARGET, pod = uid, step, at_us = now_us(), "timeline");
    }
}

/// Marks a per-container step (`container` names the container).
pub fn mark_container(uid: &str, step: &'static str, container: &str) {
    if enabled() {
        tracing::debug!(target: TARGET, pod = uid, step, container, at_us = now_us(), "timeline");
    }
}

/// Marks that the file source first decoded pod `uid` (`name`: its namespace/name).
pub fn mark_seen(uid: &str, name: &str) {
    if enabled() {
        tracing::debug!(target: TARGET, pod = uid, step = "file_seen", name, at_us = now_us(), "timeline");
    }
}

/// Runs `fut` with CRI calls attributed to pod `uid` (only when the timeline is on).
pub async fn scope<F: std::future::Future>(uid: &str, fut: F) -> F::Output {
    if enabled() {
        POD.scope(Arc::from(uid), fut).await
    } else {
        fut.await
    }
}

/// The pod the current task syncs, if inside `scope`.
pub fn current_pod() -> Option<Arc<str>> {
    POD.try_with(Arc::clone).ok()
}

/// Records one CRI call `op` that took `elapsed`, for the pod of the current sync (calls
/// outside a pod's sync, like PLEG relists, are not attributed and not emitted).
pub fn cri_call(op: &'static str, elapsed: Duration) {
    if !enabled() {
        return;
    }
    if let Some(uid) = current_pod() {
        let dur_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        tracing::debug!(target: TARGET, pod = &*uid, step = "cri", op, dur_us, at_us = now_us(), "timeline");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    fn with_filter<R>(filter: &str, f: impl FnOnce() -> R) -> (R, String) {
        let cap = crate::log_capture::LogCapture::default();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new(filter))
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(cap.clone())
                    .with_ansi(false),
            );
        let r = tracing::subscriber::with_default(subscriber, f);
        let out = cap.text();
        (r, out)
    }

    fn run<F: std::future::Future>(fut: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(fut)
    }

    #[test]
    fn cri_calls_inside_a_pod_scope_carry_the_pod_uid() {
        let (_, out) = with_filter("warn,timeline=debug", || {
            run(async {
                scope("uid-1", async {
                    mark("uid-1", "sync_begin");
                    cri_call("run_podsandbox", Duration::from_micros(1500));
                })
                .await;
                // Outside any pod's sync: not attributed, not emitted.
                cri_call("list_containers", Duration::from_micros(10));
            })
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[0].contains("pod=\"uid-1\"") && lines[0].contains("step=\"sync_begin\""));
        assert!(lines[1].contains("op=\"run_podsandbox\"") && lines[1].contains("dur_us=1500"));
        assert!(lines[1].contains("pod=\"uid-1\""), "{out}");
    }

    #[test]
    fn the_default_filters_leave_the_timeline_off() {
        for filter in [
            "warn,rkubelet=info,kubelet=info,rkubelet_cri=info",
            "warn,rkubelet=trace,kubelet=trace,rkubelet_cri=trace",
        ] {
            let ((on, pod), out) = with_filter(filter, || {
                run(async {
                    scope("uid-1", async {
                        mark("uid-1", "sync_begin");
                        cri_call("run_podsandbox", Duration::from_micros(1));
                        (enabled(), current_pod())
                    })
                    .await
                })
            });
            assert!(!on, "{filter}");
            assert!(
                pod.is_none(),
                "no task-local is set when the timeline is off"
            );
            assert!(out.is_empty(), "{filter}: {out}");
        }
    }
}
