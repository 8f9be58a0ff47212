//! Pod events (upstream `record.EventRecorder`): the seam through which every module reports
//! user-visible events (Pulling, Created, Started, Killing, BackOff, Failed…). Standalone mode
//! logs them; API mode posts them (`events_api`); tests collect them. Node-scoped events
//! (e.g. `Starting`, `NodeReady`) go through `node_event`.

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

/// Receives events about pods (and about the node itself).
pub trait EventRecorder: Send + Sync {
    fn event(&self, pod: &Pod, event_type: EventType, reason: &str, message: &str);

    /// An event about this kubelet's Node (upstream's node reference). Logged by default.
    fn node_event(&self, event_type: EventType, reason: &str, message: &str) {
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
                message: message.to_owned(),
            });
        }
    }

    fn node_event(&self, event_type: EventType, reason: &str, message: &str) {
        if let Ok(mut events) = self.events.lock() {
            events.push(RecordedEvent {
                pod_uid: String::new(),
                event_type,
                reason: reason.to_owned(),
                message: message.to_owned(),
            });
        }
    }
}
