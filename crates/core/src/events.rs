//! Pod events (upstream `record.EventRecorder`): the seam through which every module reports
//! user-visible events (Pulling, Created, Started, Killing, BackOff, Failed…). Standalone mode
//! logs them; API mode posts them (`events_api`); tests collect them. Node-scoped events
//! (e.g. `Starting`, `NodeReady`) go through `node_event`.
//!
//! An event message may carry text a pod wrote (probe output, hook output, termination
//! messages, error texts quoting container output): every recorder keeps, logs and sends at
//! most [`MAX_EVENT_MESSAGE_LENGTH`] bytes of it ([`bound_message`]).

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use tracing::{info, warn};

use crate::types::PodExt;

/// `Normal` or `Warning`, as upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Upper bound of an event message as the kubelet keeps, logs and sends it: the API server's
/// limit on an event's note (`NoteLengthLimit`, enforced for events.k8s.io events; core/v1
/// events have none, and upstream's recorder copies whatever it is given, up to the 10 KiB of
/// a probe's output or a whole exec hook's output). Bounding it here bounds every in-memory
/// copy: the event ring, the API queue and the correlator's caches.
pub const MAX_EVENT_MESSAGE_LENGTH: usize = 1024;
/// What ends a message cut by [`bound_message`].
const TRUNCATED_SUFFIX: &str = " ...";

/// `message` if it fits in [`MAX_EVENT_MESSAGE_LENGTH`] bytes; else its beginning, cut at a
/// character boundary, followed by `" ..."`, all within the bound.
pub fn bound_message(message: &str) -> Cow<'_, str> {
    if message.len() <= MAX_EVENT_MESSAGE_LENGTH {
        return Cow::Borrowed(message);
    }
    let mut end = MAX_EVENT_MESSAGE_LENGTH - TRUNCATED_SUFFIX.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{TRUNCATED_SUFFIX}", &message[..end]))
}

/// Receives events about pods (and about the node itself).
pub trait EventRecorder: Send + Sync {
    fn event(&self, pod: &Pod, event_type: EventType, reason: &str, message: &str);

    /// An event about this kubelet's Node (upstream's node reference). Logged by default.
    fn node_event(&self, event_type: EventType, reason: &str, message: &str) {
        let message = bound_message(message);
        match event_type {
            EventType::Normal => info!(reason, "node event: {message}"),
            EventType::Warning => warn!(reason, "node event: {message}"),
        }
    }
}

/// Logs every event (standalone mode has no API server to post them to).
#[derive(Debug, Default, Clone, Copy)]
pub struct LoggingRecorder;

impl EventRecorder for LoggingRecorder {
    fn event(&self, pod: &Pod, event_type: EventType, reason: &str, message: &str) {
        let message = bound_message(message);
        match event_type {
            EventType::Normal => {
                info!(pod = %pod.full_name(), uid = %pod.uid(), reason, "event: {message}")
            }
            EventType::Warning => {
                warn!(pod = %pod.full_name(), uid = %pod.uid(), reason, "event: {message}")
            }
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    /// Empty for node events.
    pub pod_uid: String,
    pub event_type: EventType,
    pub reason: String,
    pub message: String,
}

/// Collects events in memory (tests, and the API event sink later).
#[derive(Debug, Default, Clone)]
pub struct CollectingRecorder {
    events: Arc<Mutex<Vec<RecordedEvent>>>,
}

impl CollectingRecorder {
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Events with `reason`.
    pub fn with_reason(&self, reason: &str) -> Vec<RecordedEvent> {
        self.events()
            .into_iter()
            .filter(|e| e.reason == reason)
            .collect()
    }
}

impl EventRecorder for CollectingRecorder {
    fn event(&self, pod: &Pod, event_type: EventType, reason: &str, message: &str) {
        if let Ok(mut events) = self.events.lock() {
            events.push(RecordedEvent {
                pod_uid: pod.uid().to_owned(),
                event_type,
                reason: reason.to_owned(),
                message: bound_message(message).into_owned(),
            });
        }
    }

    fn node_event(&self, event_type: EventType, reason: &str, message: &str) {
        if let Ok(mut events) = self.events.lock() {
            events.push(RecordedEvent {
                pod_uid: String::new(),
                event_type,
                reason: reason.to_owned(),
                message: bound_message(message).into_owned(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn messages_are_cut_at_the_limit_on_a_character_boundary() {
        assert_eq!(bound_message("short"), "short");
        let exact = "a".repeat(MAX_EVENT_MESSAGE_LENGTH);
        assert!(matches!(bound_message(&exact), Cow::Borrowed(_)));
        let long = "a".repeat(MAX_EVENT_MESSAGE_LENGTH + 1);
        let cut = bound_message(&long);
        assert_eq!(cut.len(), MAX_EVENT_MESSAGE_LENGTH);
        assert!(cut.ends_with("a ..."));
        // Multi-byte characters are never split.
        let wide = "é".repeat(MAX_EVENT_MESSAGE_LENGTH);
        let cut = bound_message(&wide);
        assert!(cut.len() <= MAX_EVENT_MESSAGE_LENGTH);
        assert!(cut.ends_with("é ..."));
    }

    #[test]
    fn every_recorder_keeps_a_bounded_message() {
        let pod = Pod {
            metadata: ObjectMeta {
                uid: Some("u1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let recorder = CollectingRecorder::default();
        let huge = "m".repeat(10 * 1024 * 1024);
        recorder.event(&pod, EventType::Warning, "Unhealthy", &huge);
        recorder.node_event(EventType::Warning, "Rebooted", &huge);
        let events = recorder.events();
        assert_eq!(events.len(), 2);
        for e in events {
            assert_eq!(e.message.len(), MAX_EVENT_MESSAGE_LENGTH);
        }
    }
}
