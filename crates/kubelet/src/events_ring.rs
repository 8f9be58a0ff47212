//! The node's recent events, kept in memory for the operator (`rkubelet get events`,
//! `rkubelet describe pod`), in standalone mode as well as with an API server. Owns a bounded
//! ring of the last [`DEFAULT_CAPACITY`] pod and node events; receives every event through
//! [`TeeRecorder`], which also forwards it to the recorder in use (log or API server); emits
//! snapshots (all events, or one pod's) served under `/debug/rkubelet/events`.
//!
//! Each entry's message is bounded ([`bound_message`]), so the ring's memory is bounded by its
//! capacity whatever the pods write.
//!
//! Repeats of the same event (same object, type, reason and message) back to back are folded
//! into one entry with a count and first/last times, as the API server's event series are.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::events::{EventRecorder, EventType, bound_message};
use crate::sync;
use crate::types::PodExt;

/// How many events the ring keeps.
pub const DEFAULT_CAPACITY: usize = 1000;

/// What an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvolvedObject {
    /// `Pod` or `Node`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One entry of the ring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RingEvent {
    /// Increases with every new entry or repeat (a client polls for `seq > last seen`).
    pub seq: u64,
    pub involved_object: InvolvedObject,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub event_type: String,
    pub reason: String,
    pub message: String,
    pub count: u32,
    /// RFC 3339, seconds.
    pub first_timestamp: String,
    pub last_timestamp: String,
}

struct Ring {
    capacity: usize,
    next_seq: u64,
    events: VecDeque<RingEvent>,
}

/// A bounded, shared ring of recent events. Cheap to clone.
#[derive(Clone)]
pub struct EventRing {
    inner: Arc<Mutex<Ring>>,
    clock: Clock,
}

impl EventRing {
    pub fn new(capacity: usize, clock: Clock) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Ring {
                capacity: capacity.max(1),
                next_seq: 1,
                events: VecDeque::new(),
            })),
            clock,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        sync::lock(&self.inner)
    }

    /// Records one event (folded into the newest entry when it repeats it).
    pub fn record(&self, object: InvolvedObject, event_type: EventType, reason: &str, msg: &str) {
        let msg = bound_message(msg);
        let msg = msg.as_ref();
        let now = rfc3339(self.clock.now());
        let mut ring = self.lock();
        let seq = ring.next_seq;
        ring.next_seq += 1;
        if let Some(last) = ring.events.back_mut()
            && last.involved_object == object
            && last.event_type == event_type.as_str()
            && last.reason == reason
            && last.message == msg
        {
            last.count = last.count.saturating_add(1);
            last.last_timestamp = now;
            last.seq = seq;
            return;
        }
        if ring.events.len() >= ring.capacity {
            ring.events.pop_front();
        }
        ring.events.push_back(RingEvent {
            seq,
            involved_object: object,
            event_type: event_type.as_str().to_owned(),
            reason: reason.to_owned(),
            message: msg.to_owned(),
            count: 1,
            first_timestamp: now.clone(),
            last_timestamp: now,
        });
    }

    /// Every event, oldest first.
    pub fn all(&self) -> Vec<RingEvent> {
        self.lock().events.iter().cloned().collect()
    }

    /// The events of the pod `namespace/name` (any UID), oldest first.
    pub fn for_pod(&self, namespace: &str, name: &str) -> Vec<RingEvent> {
        self.lock()
            .events
            .iter()
            .filter(|e| {
                e.involved_object.kind == "Pod"
                    && e.involved_object.namespace == namespace
                    && e.involved_object.name == name
            })
            .cloned()
            .collect()
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Forwards every event to `inner` and keeps a copy in the ring.
pub struct TeeRecorder {
    inner: Arc<dyn EventRecorder>,
    ring: EventRing,
    node_name: String,
}

impl TeeRecorder {
    pub fn new(inner: Arc<dyn EventRecorder>, ring: EventRing, node_name: &str) -> Self {
        Self {
            inner,
            ring,
            node_name: node_name.to_owned(),
        }
    }
}

impl EventRecorder for TeeRecorder {
    fn event(&self, pod: &Pod, event_type: EventType, reason: &str, message: &str) {
        self.ring.record(
            InvolvedObject {
                kind: "Pod".to_owned(),
                namespace: pod.namespace().to_owned(),
                name: pod.name().to_owned(),
                uid: pod.uid().to_owned(),
            },
            event_type,
            reason,
            message,
        );
        self.inner.event(pod, event_type, reason, message);
    }

    fn node_event(&self, event_type: EventType, reason: &str, message: &str) {
        self.ring.record(
            InvolvedObject {
                kind: "Node".to_owned(),
                namespace: String::new(),
                name: self.node_name.clone(),
                uid: String::new(),
            },
            event_type,
            reason,
            message,
        );
        self.inner.node_event(event_type, reason, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::CollectingRecorder;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(ns: &str, name: &str, uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn tee_keeps_a_bounded_folded_copy_and_forwards_everything() {
        let collected = CollectingRecorder::default();
        let ring = EventRing::new(3, Clock::new());
        let tee = TeeRecorder::new(Arc::new(collected.clone()), ring.clone(), "node-a");
        let a = pod("default", "a", "ua");
        tee.event(&a, EventType::Normal, "Pulling", "Pulling image \"x\"");
        tokio::time::advance(std::time::Duration::from_secs(30)).await;
        // A repeat folds into the entry: count 2, first time kept, last time moved.
        tee.event(&a, EventType::Normal, "Pulling", "Pulling image \"x\"");
        let all = ring.all();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].count, 2);
        let t = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap();
        assert_eq!(
            (t(&all[0].last_timestamp) - t(&all[0].first_timestamp)).num_seconds(),
            30
        );
        assert_eq!(all[0].seq, 2);
        tee.node_event(EventType::Warning, "Rebooted", "node rebooted");
        tee.event(
            &pod("kube-system", "b", "ub"),
            EventType::Warning,
            "BackOff",
            "m",
        );
        tee.event(&a, EventType::Normal, "Started", "Started container c");
        // Capacity 3: the oldest entry went.
        let reasons: Vec<_> = ring.all().into_iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["Rebooted", "BackOff", "Started"]);
        assert_eq!(ring.all()[0].involved_object.kind, "Node");
        assert_eq!(ring.all()[0].involved_object.name, "node-a");
        let of_a: Vec<_> = ring
            .for_pod("default", "a")
            .into_iter()
            .map(|e| e.reason)
            .collect();
        assert_eq!(of_a, ["Started"]);
        assert!(ring.for_pod("default", "b").is_empty());
        // The recorder in use saw all five.
        assert_eq!(collected.events().len(), 5);
    }
    /// A flood of large, distinct messages: every entry is bounded, so the ring holds at most
    /// its capacity times the message bound, whatever the pods print.
    #[test]
    fn a_flood_of_large_messages_keeps_the_ring_bounded() {
        use crate::events::MAX_EVENT_MESSAGE_LENGTH;
        let ring = EventRing::new(DEFAULT_CAPACITY, Clock::new());
        let tee = TeeRecorder::new(
            Arc::new(crate::events::LoggingRecorder),
            ring.clone(),
            "node-a",
        );
        let a = pod("default", "a", "ua");
        let big = "x".repeat(1024 * 1024);
        for i in 0..(2 * DEFAULT_CAPACITY) {
            tee.event(
                &a,
                EventType::Warning,
                "Unhealthy",
                &format!("{i} Liveness probe failed: {big}"),
            );
        }
        let all = ring.all();
        assert_eq!(all.len(), DEFAULT_CAPACITY);
        let bytes: usize = all.iter().map(|e| e.message.len()).sum();
        assert!(
            bytes <= DEFAULT_CAPACITY * MAX_EVENT_MESSAGE_LENGTH,
            "the ring holds {bytes} bytes of messages"
        );
        assert!(
            all.iter()
                .all(|e| e.message.len() <= MAX_EVENT_MESSAGE_LENGTH)
        );
        assert!(
            all[0]
                .message
                .starts_with(&format!("{DEFAULT_CAPACITY} Liveness"))
        );
        // Messages cut alike still fold when they repeat.
        tee.event(&a, EventType::Warning, "Unhealthy", &format!("x{big}"));
        tee.event(&a, EventType::Warning, "Unhealthy", &format!("x{big}"));
        assert_eq!(ring.all().last().unwrap().count, 2);
    }
}
