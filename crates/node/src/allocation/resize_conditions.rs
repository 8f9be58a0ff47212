//! allocation::resize_conditions — the pod resize conditions the kubelet owns (upstream status
//! manager's `podResizeConditions`): `PodResizePending` (reasons `Deferred`/`Infeasible`) and
//! `PodResizeInProgress` (reason empty, or `Error` when actuation failed). Receives set/clear
//! calls from the allocation manager and the resize actuation; emits the conditions that status
//! generation appends to a pod's API status. Kept apart from `manager` so the two can evolve
//! independently.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::PodCondition;

use crate::clock::k8s_time;
use crate::sync;

/// `PodResizePending`: the kubelet cannot allocate the desired resources (yet).
pub const POD_RESIZE_PENDING: &str = "PodResizePending";
/// `PodResizeInProgress`: allocated, not yet actuated (or actuation failed).
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";
/// Pending reason: the node could fit the resize once other pods shrink or leave.
pub const REASON_DEFERRED: &str = "Deferred";
/// Pending reason: the node can never fit the resize.
pub const REASON_INFEASIBLE: &str = "Infeasible";
/// In-progress reason: applying the resize through the runtime failed.
pub const REASON_ERROR: &str = "Error";

#[derive(Debug, Clone, Default)]
struct PodConds {
    pending: Option<PodCondition>,
    in_progress: Option<PodCondition>,
}

/// Handle to the resize conditions of every pod; clones share them.
#[derive(Debug, Clone, Default)]
pub struct ResizeConditions {
    inner: Arc<Mutex<HashMap<String, PodConds>>>,
}

/// Upstream `updatedPodResizeCondition`: status True; the transition time moves only when the
/// reason changes. The probe time moves whenever reason or message change (upstream moves it on
/// every call, which would rewrite the API status on every sync).
fn updated(
    type_: &str,
    old: Option<&PodCondition>,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> PodCondition {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let now_t = k8s_time(Some(now));
    match old {
        Some(o)
            if o.reason.as_deref().unwrap_or_default() == reason
                && o.message.as_deref().unwrap_or_default() == message =>
        {
            o.clone()
        }
        Some(o) if o.reason.as_deref().unwrap_or_default() == reason => PodCondition {
            last_probe_time: now_t,
            message: opt(message),
            ..o.clone()
        },
        _ => PodCondition {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            last_probe_time: now_t.clone(),
            last_transition_time: now_t,
            reason: opt(reason),
            message: opt(message),
            ..Default::default()
        },
    }
}

impl ResizeConditions {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, PodConds>> {
        sync::lock(&self.inner)
    }

    /// Upstream `SetPodResizePendingCondition`; returns whether the condition changed.
    pub fn set_pending(&self, uid: &str, reason: &str, message: &str, now: DateTime<Utc>) -> bool {
        let mut all = self.lock();
        let e = all.entry(uid.to_owned()).or_default();
        let new = updated(POD_RESIZE_PENDING, e.pending.as_ref(), reason, message, now);
        let changed = e.pending.as_ref() != Some(&new);
        e.pending = Some(new);
        changed
    }

    /// Upstream `ClearPodResizePendingCondition`.
    pub fn clear_pending(&self, uid: &str) -> bool {
        let mut all = self.lock();
        all.get_mut(uid).and_then(|e| e.pending.take()).is_some()
    }

    /// Upstream `SetPodResizeInProgressCondition`. An empty reason and message keep an earlier
    /// error unless `allow_reason_cleared` (a fresh allocation clears old errors).
    pub fn set_in_progress(
        &self,
        uid: &str,
        reason: &str,
        message: &str,
        allow_reason_cleared: bool,
        now: DateTime<Utc>,
    ) {
        let mut all = self.lock();
        let e = all.entry(uid.to_owned()).or_default();
        let (mut reason, mut message) = (reason.to_owned(), message.to_owned());
        if !allow_reason_cleared
            && reason.is_empty()
            && message.is_empty()
            && let Some(old) = &e.in_progress
        {
            reason = old.reason.clone().unwrap_or_default();
            message = old.message.clone().unwrap_or_default();
        }
        e.in_progress = Some(updated(
            POD_RESIZE_IN_PROGRESS,
            e.in_progress.as_ref(),
            &reason,
            &message,
            now,
        ));
    }

    /// Upstream `ClearPodResizeInProgressCondition`; returns whether one was set.
    pub fn clear_in_progress(&self, uid: &str) -> bool {
        let mut all = self.lock();
        all.get_mut(uid)
            .and_then(|e| e.in_progress.take())
            .is_some()
    }

    /// The pod's resize conditions (upstream `GetPodResizeConditions`): pending first.
    pub fn get(&self, uid: &str) -> Vec<PodCondition> {
        let all = self.lock();
        let Some(e) = all.get(uid) else {
            return Vec::new();
        };
        e.pending
            .iter()
            .chain(e.in_progress.iter())
            .cloned()
            .collect()
    }

    pub fn is_deferred(&self, uid: &str) -> bool {
        self.reason_of(uid) == Some(REASON_DEFERRED.to_owned())
    }

    pub fn is_infeasible(&self, uid: &str) -> bool {
        self.reason_of(uid) == Some(REASON_INFEASIBLE.to_owned())
    }

    fn reason_of(&self, uid: &str) -> Option<String> {
        self.lock()
            .get(uid)
            .and_then(|e| e.pending.as_ref())
            .and_then(|c| c.reason.clone())
    }

    /// Forgets a removed pod.
    pub fn remove(&self, uid: &str) {
        self.lock().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn pending_keeps_transition_time_until_reason_changes() {
        let c = ResizeConditions::new();
        assert!(c.set_pending("u", REASON_DEFERRED, "m1", t(0)));
        assert!(!c.set_pending("u", REASON_DEFERRED, "m1", t(5)));
        assert!(c.set_pending("u", REASON_DEFERRED, "m2", t(6)));
        let got = c.get("u");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].type_, POD_RESIZE_PENDING);
        assert_eq!(got[0].status, "True");
        assert_eq!(got[0].last_transition_time, k8s_time(Some(t(0))));
        assert_eq!(got[0].message.as_deref(), Some("m2"));
        assert!(c.is_deferred("u"));
        c.set_pending("u", REASON_INFEASIBLE, "m3", t(9));
        assert_eq!(c.get("u")[0].last_transition_time, k8s_time(Some(t(9))));
        assert!(c.is_infeasible("u"));
        assert!(c.clear_pending("u"));
        assert!(c.get("u").is_empty());
    }

    #[test]
    fn in_progress_keeps_an_error_unless_cleared_explicitly() {
        let c = ResizeConditions::new();
        c.set_in_progress("u", REASON_ERROR, "boom", true, t(0));
        c.set_in_progress("u", "", "", false, t(1));
        assert_eq!(c.get("u")[0].reason.as_deref(), Some(REASON_ERROR));
        c.set_in_progress("u", "", "", true, t(2));
        let got = c.get("u");
        assert_eq!(got[0].type_, POD_RESIZE_IN_PROGRESS);
        assert_eq!(got[0].reason, None);
        assert!(c.clear_in_progress("u"));
        assert!(!c.clear_in_progress("u"));
    }
}
