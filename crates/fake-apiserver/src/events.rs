//! `events.k8s.io/v1` ↔ core `v1` Event conversion: owns the field mapping between the two
//! Event APIs, which share one storage as upstream (core form stored); receives objects in
//! either form, emits the other.

use crate::resources::{self, ResourceInfo};
use serde_json::{Map, Value, json};

/// (events.k8s.io/v1 field, core/v1 field) pairs that differ only by name.
const RENAMED: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Fields with the same name in both APIs.
const SHARED: &[&str] = &[
    "metadata",
    "eventTime",
    "series",
    "action",
    "reason",
    "type",
    "related",
    "reportingInstance",
];

/// Whether `info` is the `events.k8s.io` Event API.
pub fn is_events_v1(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io"
}

/// The resource whose storage backs `info` (core events for `events.k8s.io`).
pub fn storage(info: &'static ResourceInfo) -> &'static ResourceInfo {
    if is_events_v1(info) {
        resources::find("", "v1", "events").unwrap_or(info)
    } else {
        info
    }
}

fn convert(obj: &Value, api_version: &str, to_core: bool) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    for f in SHARED {
        if let Some(v) = obj.get(*f).filter(|v| !v.is_null()) {
            out.insert((*f).to_string(), v.clone());
        }
    }
    for (v1, core) in RENAMED {
        let (from, to) = if to_core { (v1, core) } else { (core, v1) };
        if let Some(v) = obj.get(*from).filter(|v| !v.is_null()) {
            out.insert((*to).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// Core v1 Event → `events.k8s.io/v1` Event.
pub fn to_v1(core: &Value) -> Value {
    convert(core, "events.k8s.io/v1", false)
}

/// `events.k8s.io/v1` Event → core v1 Event.
pub fn to_core(v1: &Value) -> Value {
    convert(v1, "v1", true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "eventTime": "2024-01-01T00:00:00.000000Z", "reason": "Pulled", "type": "Normal",
            "regarding": {"kind": "Pod", "name": "p"}, "note": "pulled image",
            "reportingController": "kubelet", "reportingInstance": "n1", "action": "Pull",
            "series": {"count": 2, "lastObservedTime": "2024-01-01T00:00:01.000000Z"}});
        let core = to_core(&v1);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "pulled image");
        assert_eq!(core["reportingComponent"], "kubelet");
        assert_eq!(to_v1(&core), v1);
        let legacy =
            json!({"metadata": {"name": "x"}, "count": 3, "source": {"component": "kubelet"}});
        let conv = to_v1(&legacy);
        assert_eq!(conv["deprecatedCount"], 3);
        assert_eq!(conv["deprecatedSource"]["component"], "kubelet");
    }
}
