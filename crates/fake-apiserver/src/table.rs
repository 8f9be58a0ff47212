//! Server-side printing: owns the `meta.k8s.io/v1 Table` rendering kubectl asks for on `get`
//! (pod and node columns like upstream's printers, NAME/AGE for other kinds); receives stored
//! objects, emits a Table.

use serde_json::{Value, json};

/// Whether the Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

fn human_age(secs: i64) -> String {
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => format!("{m}m{}s", s % 60),
        _ if h < 3 => format!("{m}m"),
        _ if h < 8 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if d < 8 => format!("{d}d{}h", h % 24),
        _ => format!("{d}d"),
    }
}

fn age(obj: &Value) -> String {
    obj["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| human_age((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds()))
        .unwrap_or_else(|| "<unknown>".to_string())
}

fn col(name: &str, ty: &str, priority: u8) -> Value {
    json!({"name": name, "type": ty, "format": if name == "Name" { "name" } else { "" },
           "description": "", "priority": priority})
}

fn pod_status(pod: &Value) -> String {
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return "Terminating".to_string();
    }
    let mut reason = pod["status"]["reason"]
        .as_str()
        .or_else(|| pod["status"]["phase"].as_str())
        .unwrap_or("Unknown")
        .to_string();
    for cs in pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let state = &cs["state"];
        if let Some(r) = state["waiting"]["reason"].as_str() {
            reason = r.to_string();
        } else if let Some(r) = state["terminated"]["reason"].as_str() {
            reason = r.to_string();
        }
    }
    reason
}

fn pod_cells(pod: &Value) -> Vec<Value> {
    let statuses = pod["status"]["containerStatuses"].as_array();
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = statuses.map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
    let restarts: i64 = statuses.map_or(0, |s| {
        s.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
    });
    let ip = pod["status"]["podIP"].as_str().unwrap_or("<none>");
    let node = pod["spec"]["nodeName"].as_str().unwrap_or("<none>");
    vec![
        json!(pod["metadata"]["name"]),
        json!(format!("{ready}/{total}")),
        json!(pod_status(pod)),
        json!(restarts),
        json!(age(pod)),
        json!(ip),
        json!(node),
        json!("<none>"),
        json!("<none>"),
    ]
}

fn node_cells(node: &Value) -> Vec<Value> {
    let ready = node["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| match c["status"].as_str() {
            Some("True") => "Ready",
            Some("False") => "NotReady",
            _ => "Unknown",
        })
        .unwrap_or("Unknown");
    let mut status = ready.to_string();
    if node["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    let addr = |t: &str| {
        node["status"]["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["type"] == t))
            .and_then(|x| x["address"].as_str())
            .unwrap_or("<none>")
            .to_string()
    };
    let mut roles: Vec<&str> = node["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .collect();
    roles.sort_unstable();
    let info = &node["status"]["nodeInfo"];
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    vec![
        json!(node["metadata"]["name"]),
        json!(status),
        json!(if roles.is_empty() {
            "<none>".to_string()
        } else {
            roles.join(",")
        }),
        json!(age(node)),
        json!(s(&info["kubeletVersion"])),
        json!(addr("InternalIP")),
        json!(addr("ExternalIP")),
        json!(s(&info["osImage"])),
        json!(s(&info["kernelVersion"])),
        json!(s(&info["containerRuntimeVersion"])),
    ]
}

fn event_cells(ev: &Value) -> Vec<Value> {
    let last = ev["lastTimestamp"]
        .as_str()
        .or_else(|| ev["eventTime"].as_str())
        .or_else(|| ev["metadata"]["creationTimestamp"].as_str())
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| human_age((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds()))
        .unwrap_or_else(|| "<unknown>".to_string());
    let obj = &ev["involvedObject"];
    let object = format!(
        "{}/{}",
        obj["kind"].as_str().unwrap_or_default().to_lowercase(),
        obj["name"].as_str().unwrap_or_default()
    );
    vec![
        json!(last),
        json!(ev["type"].as_str().unwrap_or_default()),
        json!(ev["reason"].as_str().unwrap_or_default()),
        json!(object),
        json!(ev["message"].as_str().unwrap_or_default()),
        json!(ev["metadata"]["name"]),
    ]
}

fn csr_cells(csr: &Value) -> Vec<Value> {
    let spec = &csr["spec"];
    let duration = spec["expirationSeconds"]
        .as_i64()
        .map_or_else(|| "<none>".to_string(), crate::certificates::human_duration);
    vec![
        json!(csr["metadata"]["name"]),
        json!(age(csr)),
        json!(spec["signerName"].as_str().unwrap_or_default()),
        json!(spec["username"].as_str().unwrap_or_default()),
        json!(duration),
        json!(crate::certificates::condition_column(csr)),
    ]
}

fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

type CellFn = fn(&Value) -> Vec<Value>;

/// Renders objects (a list's items, or one object) as a Table.
pub fn render(kind: &str, items: &[Value], list_meta: Value) -> Value {
    let (columns, cells): (Vec<Value>, CellFn) = match kind {
        "Pod" => (
            vec![
                col("Name", "string", 0),
                col("Ready", "string", 0),
                col("Status", "string", 0),
                col("Restarts", "string", 0),
                col("Age", "string", 0),
                col("IP", "string", 1),
                col("Node", "string", 1),
                col("Nominated Node", "string", 1),
                col("Readiness Gates", "string", 1),
            ],
            pod_cells,
        ),
        "CertificateSigningRequest" => (
            vec![
                col("Name", "string", 0),
                col("Age", "string", 0),
                col("SignerName", "string", 0),
                col("Requestor", "string", 0),
                col("RequestedDuration", "string", 0),
                col("Condition", "string", 0),
            ],
            csr_cells,
        ),
        "Node" => (
            vec![
                col("Name", "string", 0),
                col("Status", "string", 0),
                col("Roles", "string", 0),
                col("Age", "string", 0),
                col("Version", "string", 0),
                col("Internal-IP", "string", 1),
                col("External-IP", "string", 1),
                col("OS-Image", "string", 1),
                col("Kernel-Version", "string", 1),
                col("Container-Runtime", "string", 1),
            ],
            node_cells,
        ),
        "Event" => (
            vec![
                col("Last Seen", "string", 0),
                col("Type", "string", 0),
                col("Reason", "string", 0),
                col("Object", "string", 0),
                col("Message", "string", 0),
                col("Name", "string", 1),
            ],
            event_cells,
        ),
        "RuntimeClass" => (
            vec![
                col("Name", "string", 0),
                col("Handler", "string", 0),
                col("Age", "string", 0),
            ],
            |o: &Value| {
                vec![
                    json!(o["metadata"]["name"]),
                    json!(o["handler"]),
                    json!(age(o)),
                ]
            },
        ),
        _ => (
            vec![col("Name", "string", 0), col("Age", "string", 0)],
            |o: &Value| vec![json!(o["metadata"]["name"]), json!(age(o))],
        ),
    };
    let rows: Vec<Value> = items
        .iter()
        .map(|o| json!({"cells": cells(o), "object": partial_metadata(o)}))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_and_ages() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        for (s, want) in [
            (5, "5s"),
            (130, "2m10s"),
            (900, "15m"),
            (4 * 3600 + 120, "4h2m"),
            (90000, "25h"),
            (200_000, "2d7h"),
        ] {
            assert_eq!(human_age(s), want);
        }
    }

    #[test]
    fn pod_row() {
        let pod = json!({"metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        let t = render("Pod", &[pod], json!({}));
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], 3);
        assert_eq!(cells[5], "10.0.0.1");
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "p");
    }
}
