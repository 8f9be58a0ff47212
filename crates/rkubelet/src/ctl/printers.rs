//! kubectl's table printers for what the kubelet knows: pods (`printPod`: READY, the STATUS
//! string, RESTARTS with "(5m ago)", AGE), events and the node. Owns nothing; receives the
//! objects the kubelet served and a fixed "now"; emits the text (no colour). Ages are
//! kubectl's `HumanDuration`.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubelet::events_ring::RingEvent;
use kubelet::server::operator::NodeReport;

use super::tabwriter::TabWriter;

/// kubectl's `duration.HumanDuration`.
pub fn human_duration(d: chrono::Duration) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// An API time as chrono's.
pub fn chrono_time(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(
        t.0.as_second(),
        u32::try_from(t.0.subsec_nanosecond()).unwrap_or(0),
    )
    .unwrap_or_default()
}

/// kubectl's `translateTimestampSince`: `<unknown>` without a time.
pub fn age(t: Option<&Time>, now: DateTime<Utc>) -> String {
    match t {
        Some(t) => human_duration(now - chrono_time(t)),
        None => "<unknown>".to_owned(),
    }
}

/// An RFC 3339 string's age (`<unknown>` when it does not parse).
pub fn age_of(rfc3339: &str, now: DateTime<Utc>) -> String {
    match DateTime::parse_from_rfc3339(rfc3339) {
        Ok(t) => human_duration(now - t.with_timezone(&Utc)),
        Err(_) => "<unknown>".to_owned(),
    }
}

fn is_restartable_init(c: Option<&Container>) -> bool {
    c.and_then(|c| c.restart_policy.as_deref()) == Some("Always")
}

fn condition_true(pod: &Pod, kind: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

/// The cells kubectl's `printPod` computes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRow {
    pub namespace: String,
    pub name: String,
    pub ready: String,
    pub status: String,
    pub restarts: String,
    pub age: String,
    pub ip: String,
    pub node: String,
    /// `kubernetes.io/config.source`: file, http or api.
    pub source: String,
}

/// kubectl's `printPod` for one pod at `now`.
pub fn pod_row(pod: &Pod, now: DateTime<Utc>) -> PodRow {
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.clone().unwrap_or_default();
    let mut reason = match status.reason.as_deref() {
        Some(r) if !r.is_empty() => r.to_owned(),
        _ => phase.clone(),
    };
    if status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("SchedulingGated"))
    {
        reason = "SchedulingGated".to_owned();
    }
    let init_specs = spec.init_containers.clone().unwrap_or_default();
    let init_spec = |name: &str| init_specs.iter().find(|c| c.name == name);
    let total = spec.containers.len()
        + init_specs
            .iter()
            .filter(|c| is_restartable_init(Some(c)))
            .count();
    let mut ready = 0;
    let mut restarts = 0;
    let mut sidecar_restarts = 0;
    let mut last_restart: Option<DateTime<Utc>> = None;
    let mut last_sidecar_restart: Option<DateTime<Utc>> = None;
    let later = |a: Option<DateTime<Utc>>, b: Option<&Time>| match (a, b.map(chrono_time)) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let mut initializing = false;
    for (i, c) in status.init_container_statuses.iter().flatten().enumerate() {
        restarts += c.restart_count;
        let finished = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.finished_at.as_ref());
        last_restart = later(last_restart, finished);
        let sidecar = is_restartable_init(init_spec(&c.name));
        if sidecar {
            sidecar_restarts += c.restart_count;
            last_sidecar_restart = later(last_sidecar_restart, finished);
        }
        let state = c.state.clone().unwrap_or_default();
        if state.terminated.as_ref().is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if sidecar && c.started == Some(true) {
            if c.ready {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = &state.terminated {
            reason = match t.reason.as_deref() {
                Some(r) if !r.is_empty() => format!("Init:{r}"),
                _ => match t.signal {
                    Some(s) if s != 0 => format!("Init:Signal:{s}"),
                    _ => format!("Init:ExitCode:{}", t.exit_code),
                },
            };
        } else if let Some(r) = state
            .waiting
            .as_ref()
            .and_then(|w| w.reason.as_deref())
            .filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            reason = format!("Init:{r}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }
    if !initializing || condition_true(pod, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for c in status.container_statuses.iter().flatten().rev() {
            restarts += c.restart_count;
            let finished = c
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.finished_at.as_ref());
            last_restart = later(last_restart, finished);
            let state = c.state.clone().unwrap_or_default();
            let waiting = state
                .waiting
                .as_ref()
                .and_then(|w| w.reason.clone())
                .filter(|r| !r.is_empty());
            if let Some(w) = waiting {
                reason = w;
            } else if let Some(t) = &state.terminated {
                reason = match t.reason.as_deref() {
                    Some(r) if !r.is_empty() => r.to_owned(),
                    _ => match t.signal {
                        Some(s) if s != 0 => format!("Signal:{s}"),
                        _ => format!("ExitCode:{}", t.exit_code),
                    },
                };
            } else if c.ready && state.running.is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true(pod, "Ready") {
                "Running".to_owned()
            } else {
                "NotReady".to_owned()
            };
        }
    }
    let terminal = phase == "Succeeded" || phase == "Failed";
    if pod.metadata.deletion_timestamp.is_some() && status.reason.as_deref() == Some("NodeLost") {
        reason = "Unknown".to_owned();
    } else if pod.metadata.deletion_timestamp.is_some() && !terminal {
        reason = "Terminating".to_owned();
    }
    let restarts = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", human_duration(now - t)),
        _ => restarts.to_string(),
    };
    let ip = status
        .pod_ips
        .as_ref()
        .and_then(|ips| ips.first())
        .map(|ip| ip.ip.clone())
        .or(status.pod_ip.clone())
        .filter(|ip| !ip.is_empty())
        .unwrap_or_else(|| "<none>".to_owned());
    PodRow {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        ready: format!("{ready}/{total}"),
        status: reason,
        restarts,
        age: age(pod.metadata.creation_timestamp.as_ref(), now),
        ip,
        node: spec
            .node_name
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "<none>".to_owned()),
        source: pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubernetes.io/config.source"))
            .cloned()
            .unwrap_or_else(|| "<none>".to_owned()),
    }
}

/// How `get pods` prints its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodColumns {
    pub all_namespaces: bool,
    pub wide: bool,
}

/// The header line of `get pods`.
pub fn pods_header(cols: PodColumns) -> String {
    let mut h = String::new();
    if cols.all_namespaces {
        h.push_str("NAMESPACE\t");
    }
    h.push_str("NAME\tREADY\tSTATUS\tRESTARTS\tAGE\tIP\t");
    if cols.wide {
        h.push_str("NODE\t");
    }
    h.push_str("SOURCE\n");
    h
}

/// One row of `get pods` (tab-separated, for the tab writer).
pub fn pods_line(row: &PodRow, cols: PodColumns) -> String {
    let mut l = String::new();
    if cols.all_namespaces {
        l.push_str(&row.namespace);
        l.push('\t');
    }
    for cell in [
        &row.name,
        &row.ready,
        &row.status,
        &row.restarts,
        &row.age,
        &row.ip,
    ] {
        l.push_str(cell);
        l.push('\t');
    }
    if cols.wide {
        l.push_str(&row.node);
        l.push('\t');
    }
    l.push_str(&row.source);
    l.push('\n');
    l
}

/// `get pods`: the table, or kubectl's "No resources found" line (returned as `Err` for
/// stderr).
pub fn pods_table(rows: &[PodRow], cols: PodColumns, namespace: &str) -> Result<String, String> {
    if rows.is_empty() {
        return Err(if cols.all_namespaces {
            "No resources found".to_owned()
        } else {
            format!("No resources found in {namespace} namespace.")
        });
    }
    let mut w = TabWriter::table();
    w.write(&pods_header(cols));
    for r in rows {
        w.write(&pods_line(r, cols));
    }
    Ok(w.flush())
}

/// The namespace kubectl shows a node event in.
fn event_namespace(e: &RingEvent) -> &str {
    if e.involved_object.namespace.is_empty() {
        "default"
    } else {
        &e.involved_object.namespace
    }
}

/// Whether `get events` shows `e` for `namespace` (`None`: all namespaces).
pub fn event_in(e: &RingEvent, namespace: Option<&str>) -> bool {
    namespace.is_none_or(|ns| event_namespace(e) == ns)
}

/// One row of `get events` (kubectl's LAST SEEN, TYPE, REASON, OBJECT, MESSAGE).
pub fn events_line(e: &RingEvent, all_namespaces: bool, now: DateTime<Utc>) -> String {
    let mut l = String::new();
    if all_namespaces {
        l.push_str(event_namespace(e));
        l.push('\t');
    }
    l.push_str(&format!(
        "{}\t{}\t{}\t{}/{}\t{}\n",
        age_of(&e.last_timestamp, now),
        e.event_type,
        e.reason,
        e.involved_object.kind.to_lowercase(),
        e.involved_object.name,
        e.message.trim_end()
    ));
    l
}

pub fn events_header(all_namespaces: bool) -> &'static str {
    if all_namespaces {
        "NAMESPACE\tLAST SEEN\tTYPE\tREASON\tOBJECT\tMESSAGE\n"
    } else {
        "LAST SEEN\tTYPE\tREASON\tOBJECT\tMESSAGE\n"
    }
}

/// `get events`: the table, or "No resources found…" as `Err`.
pub fn events_table(
    events: &[RingEvent],
    namespace: Option<&str>,
    now: DateTime<Utc>,
) -> Result<String, String> {
    let shown: Vec<&RingEvent> = events.iter().filter(|e| event_in(e, namespace)).collect();
    if shown.is_empty() {
        return Err(match namespace {
            Some(ns) => format!("No resources found in {ns} namespace."),
            None => "No resources found".to_owned(),
        });
    }
    let mut w = TabWriter::table();
    w.write(events_header(namespace.is_none()));
    for e in shown {
        w.write(&events_line(e, namespace.is_none(), now));
    }
    Ok(w.flush())
}

/// kubectl's node STATUS: the Ready condition, plus `SchedulingDisabled` when cordoned.
fn node_status(node: &Node) -> String {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    let mut s = match ready {
        Some(c) if c.status == "True" => "Ready".to_owned(),
        Some(_) => "NotReady".to_owned(),
        None => "Unknown".to_owned(),
    };
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        s.push_str(",SchedulingDisabled");
    }
    s
}

/// kubectl's node ROLES: `node-role.kubernetes.io/<role>` labels.
fn node_roles(node: &Node) -> String {
    let mut roles: Vec<&str> = node
        .metadata
        .labels
        .iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort_unstable();
    if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.join(",")
    }
}

fn quantity_lines(
    w: &mut TabWriter,
    title: &str,
    q: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) {
    w.write(&format!("{title}:\n"));
    for (k, v) in q.into_iter().flatten() {
        w.write(&format!("  {k}:\t{}\n", v.0));
    }
}

/// `get node`: kubectl's row (NAME, STATUS, ROLES, AGE, VERSION), then what the kubelet
/// knows beyond it: conditions (pressure included), capacity and allocatable, the runtime's
/// status, PLEG health and certificate expiry.
pub fn node_text(r: &NodeReport, wide: bool, now: DateTime<Utc>) -> String {
    let node = &r.node;
    let info = node.status.as_ref().and_then(|s| s.node_info.clone());
    let info = info.unwrap_or_default();
    let mut t = TabWriter::table();
    t.write("NAME\tSTATUS\tROLES\tAGE\tVERSION");
    if wide {
        t.write("\tINTERNAL-IP\tEXTERNAL-IP\tOS-IMAGE\tKERNEL-VERSION\tCONTAINER-RUNTIME");
    }
    t.write("\n");
    t.write(&format!(
        "{}\t{}\t{}\t{}\t{}",
        node.metadata.name.as_deref().unwrap_or_default(),
        node_status(node),
        node_roles(node),
        age(node.metadata.creation_timestamp.as_ref(), now),
        info.kubelet_version
    ));
    if wide {
        let addr = |kind: &str| {
            node.status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .and_then(|a| a.iter().find(|a| a.type_ == kind))
                .map(|a| a.address.clone())
                .unwrap_or_else(|| "<none>".to_owned())
        };
        t.write(&format!(
            "\t{}\t{}\t{}\t{}\t{}",
            addr("InternalIP"),
            addr("ExternalIP"),
            info.os_image,
            info.kernel_version,
            info.container_runtime_version
        ));
    }
    t.write("\n");
    let mut out = t.flush();
    out.push('\n');
    let mut w = TabWriter::describe();
    w.write("Conditions:\n  Type\tStatus\tReason\tMessage\n  ----\t------\t------\t-------\n");
    let status = node.status.clone().unwrap_or_default();
    for c in status.conditions.iter().flatten() {
        w.write(&format!(
            "  {}\t{}\t{}\t{}\n",
            c.type_,
            c.status,
            c.reason.as_deref().unwrap_or_default(),
            c.message.as_deref().unwrap_or_default()
        ));
    }
    quantity_lines(&mut w, "Capacity", status.capacity.as_ref());
    quantity_lines(&mut w, "Allocatable", status.allocatable.as_ref());
    let rt = &r.runtime;
    let conds: Vec<String> = rt
        .conditions
        .iter()
        .map(|c| format!("{}={}", c.condition_type, c.status))
        .collect();
    w.write(&format!(
        "Runtime:\t{} {}{}\n",
        if rt.name.is_empty() {
            "<unknown>"
        } else {
            &rt.name
        },
        rt.version.as_deref().unwrap_or("<version unknown>"),
        if conds.is_empty() {
            String::new()
        } else {
            format!(" ({})", conds.join(", "))
        }
    ));
    if let Some(e) = &rt.error {
        w.write(&format!("Runtime Error:\t{e}\n"));
    }
    for c in rt.conditions.iter().filter(|c| !c.status) {
        w.write(&format!(
            "  {}:\t{} {}\n",
            c.condition_type, c.reason, c.message
        ));
    }
    w.write(&format!(
        "PLEG:\t{}\n",
        match &r.pleg.message {
            None => "healthy".to_owned(),
            Some(m) => format!("unhealthy: {m}"),
        }
    ));
    if r.certificates.is_empty() {
        w.write("Certificates:\t<none>\n");
    } else {
        w.write("Certificates:\n");
        for c in &r.certificates {
            let when = match (&c.not_after, &c.error) {
                (Some(t), _) => match DateTime::parse_from_rfc3339(t) {
                    Ok(at) if at.with_timezone(&Utc) < now => format!("expired {t}"),
                    Ok(at) => format!(
                        "expires {t} (in {})",
                        human_duration(at.with_timezone(&Utc) - now)
                    ),
                    Err(_) => t.clone(),
                },
                (None, Some(e)) => format!("unreadable: {e}"),
                (None, None) => "<unknown>".to_owned(),
            };
            w.write(&format!("  {}:\t{}\t{when}\n", c.name, c.path));
        }
    }
    out.push_str(&w.flush());
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The fixed "now" of every printer test.
    pub(crate) fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-26T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    /// Compares `actual` with `tests/golden/<name>`; `RKUBELET_WRITE_GOLDEN=1` writes it
    /// instead (review the diff before committing).
    pub(crate) fn golden(name: &str, actual: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(name);
        if std::env::var_os("RKUBELET_WRITE_GOLDEN").is_some() {
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let want =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            actual,
            want,
            "{} differs; actual:\n{actual}",
            path.display()
        );
    }

    pub(crate) fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn human_duration_matches_kubectl() {
        let d = chrono::Duration::seconds;
        for (secs, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60 * 7, "3h7m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (50 * 3600, "2d2h"),
            (8 * 86400, "8d"),
            (800 * 86400, "2y70d"),
            (730 * 86400, "2y"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(d(secs)), want, "{secs}s");
        }
    }

    fn cs(name: &str, state: serde_json::Value, ready: bool, restarts: i32) -> serde_json::Value {
        serde_json::json!({"name": name, "image": "img", "imageID": "", "ready": ready,
            "restartCount": restarts, "state": state})
    }

    #[test]
    fn status_strings_follow_kubectl_print_pod() {
        let base = |spec: serde_json::Value, status: serde_json::Value| {
            pod(serde_json::json!({
                "metadata": {"name": "p", "namespace": "default",
                    "creationTimestamp": "2026-11-26T11:00:00Z",
                    "annotations": {"kubernetes.io/config.source": "file"}},
                "spec": spec, "status": status}))
        };
        let two = serde_json::json!({"containers": [{"name": "a"}, {"name": "b"}]});
        let running = serde_json::json!({"running": {"startedAt": "2026-11-26T11:00:05Z"}});
        // Running, one of two ready; restarts with the last termination's age.
        let mut b = cs(
            "b",
            serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}}),
            false,
            5,
        );
        b["lastState"] = serde_json::json!({"terminated": {"exitCode": 1, "reason": "Error",
            "finishedAt": "2026-11-26T11:55:00Z"}});
        let r = pod_row(
            &base(
                two.clone(),
                serde_json::json!({"phase": "Running", "podIP": "10.0.0.7",
                "podIPs": [{"ip": "10.0.0.7"}],
                "containerStatuses": [cs("a", running.clone(), true, 0), b]}),
            ),
            now(),
        );
        assert_eq!(
            (r.ready.as_str(), r.status.as_str(), r.restarts.as_str()),
            ("1/2", "CrashLoopBackOff", "5 (5m ago)")
        );
        assert_eq!(
            (r.age.as_str(), r.ip.as_str(), r.source.as_str()),
            ("60m", "10.0.0.7", "file")
        );
        // OOMKilled and Completed come from the terminated reason.
        let r = pod_row(
            &base(
                serde_json::json!({"containers": [{"name": "a"}]}),
                serde_json::json!({"phase": "Running", "containerStatuses": [
                cs("a", serde_json::json!({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}), false, 0)]}),
            ),
            now(),
        );
        assert_eq!((r.status.as_str(), r.ip.as_str()), ("OOMKilled", "<none>"));
        let r = pod_row(
            &base(
                serde_json::json!({"containers": [{"name": "a"}]}),
                serde_json::json!({"phase": "Succeeded", "containerStatuses": [
                cs("a", serde_json::json!({"terminated": {"exitCode": 0, "reason": "Completed"}}), false, 0)]}),
            ),
            now(),
        );
        assert_eq!(r.status, "Completed");
        // A terminated container without a reason: ExitCode / Signal.
        let r = pod_row(
            &base(
                serde_json::json!({"containers": [{"name": "a"}]}),
                serde_json::json!({"phase": "Running", "containerStatuses": [
                cs("a", serde_json::json!({"terminated": {"exitCode": 2}}), false, 0)]}),
            ),
            now(),
        );
        assert_eq!(r.status, "ExitCode:2");
        // Completed with another container still running and the pod not ready: NotReady.
        let r = pod_row(
            &base(
                two.clone(),
                serde_json::json!({"phase": "Running", "containerStatuses": [
                cs("a", running.clone(), true, 0),
                cs("b", serde_json::json!({"terminated": {"exitCode": 0, "reason": "Completed"}}), false, 0)]}),
            ),
            now(),
        );
        assert_eq!((r.status.as_str(), r.ready.as_str()), ("NotReady", "1/2"));
        // Init containers: counting, crash-looping, failed.
        let init = serde_json::json!({"initContainers": [{"name": "i1"}, {"name": "i2"}],
            "containers": [{"name": "a"}]});
        let done = serde_json::json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
        let r = pod_row(
            &base(
                init.clone(),
                serde_json::json!({"phase": "Pending", "initContainerStatuses": [
                cs("i1", done.clone(), false, 0),
                cs("i2", running.clone(), false, 0)],
                "containerStatuses": [cs("a", serde_json::json!({"waiting": {"reason": "PodInitializing"}}), false, 0)]}),
            ),
            now(),
        );
        assert_eq!((r.status.as_str(), r.ready.as_str()), ("Init:1/2", "0/1"));
        let r = pod_row(
            &base(
                init.clone(),
                serde_json::json!({"phase": "Pending", "initContainerStatuses": [
                cs("i1", serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}}), false, 3)]}),
            ),
            now(),
        );
        assert_eq!(
            (r.status.as_str(), r.restarts.as_str()),
            ("Init:CrashLoopBackOff", "3")
        );
        let r = pod_row(
            &base(
                init.clone(),
                serde_json::json!({"phase": "Pending", "initContainerStatuses": [
                cs("i1", serde_json::json!({"terminated": {"exitCode": 3}}), false, 0)]}),
            ),
            now(),
        );
        assert_eq!(r.status, "Init:ExitCode:3");
        // Initialized: PodInitializing comes from the regular container.
        let r = pod_row(
            &base(
                init,
                serde_json::json!({"phase": "Pending",
                "conditions": [{"type": "Initialized", "status": "True"}],
                "initContainerStatuses": [cs("i1", done.clone(), false, 0), cs("i2", done, false, 0)],
                "containerStatuses": [cs("a", serde_json::json!({"waiting": {"reason": "PodInitializing"}}), false, 0)]}),
            ),
            now(),
        );
        assert_eq!(r.status, "PodInitializing");
        // A sidecar (restartable init container) counts toward READY.
        let r = pod_row(
            &base(
                serde_json::json!({"initContainers": [{"name": "s", "restartPolicy": "Always"}],
                    "containers": [{"name": "a"}]}),
                serde_json::json!({"phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
                "initContainerStatuses": [{"name": "s", "image": "i", "imageID": "", "ready": true,
                    "restartCount": 1, "started": true, "state": running.clone(),
                    "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-11-26T11:58:00Z"}}}],
                "containerStatuses": [cs("a", running, true, 0)]}),
            ),
            now(),
        );
        assert_eq!(
            (r.ready.as_str(), r.status.as_str(), r.restarts.as_str()),
            ("2/2", "Running", "1 (2m ago)")
        );
        // Deleted and not terminal: Terminating.
        let mut p = base(two, serde_json::json!({"phase": "Running"}));
        p.metadata.deletion_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap(),
        ));
        assert_eq!(pod_row(&p, now()).status, "Terminating");
    }

    #[test]
    fn get_pods_table_is_kubectls_layout() {
        let mk = |ns: &str, name: &str, src: &str, created: &str| {
            pod(serde_json::json!({
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": created,
                    "annotations": {"kubernetes.io/config.source": src}},
                "spec": {"containers": [{"name": "c"}], "nodeName": "node-a"},
                "status": {"phase": "Running", "podIPs": [{"ip": "10.88.0.4"}],
                    "containerStatuses": [cs("c", serde_json::json!({"running": {}}), true, 0)]}}))
        };
        let pods = [
            mk("kube-system", "etcd-node-a", "file", "2026-11-24T09:00:00Z"),
            mk("default", "web", "http", "2026-11-26T11:59:30Z"),
        ];
        let rows: Vec<PodRow> = pods.iter().map(|p| pod_row(p, now())).collect();
        let cols = PodColumns {
            all_namespaces: true,
            wide: false,
        };
        golden(
            "get_pods_all_namespaces.txt",
            &pods_table(&rows, cols, "default").unwrap(),
        );
        let wide = PodColumns {
            all_namespaces: false,
            wide: true,
        };
        golden(
            "get_pods_wide.txt",
            &pods_table(&rows[1..], wide, "default").unwrap(),
        );
        assert_eq!(
            pods_table(&[], wide, "default"),
            Err("No resources found in default namespace.".to_owned())
        );
    }

    #[test]
    fn event_messages_in_the_events_table_are_escaped() {
        let e = RingEvent {
            seq: 1,
            involved_object: kubelet::events_ring::InvolvedObject {
                kind: "Pod".into(),
                namespace: "default".into(),
                name: "p\x1b[1m".into(),
                uid: String::new(),
            },
            event_type: "Warning".into(),
            reason: "Failed".into(),
            message: "boom\x1b[2J\x1b]52;c;eA==\x07\rfake\u{9b}0m".into(),
            count: 1,
            first_timestamp: "2026-11-26T11:50:00Z".into(),
            last_timestamp: "2026-11-26T11:58:20Z".into(),
        };
        let t = events_table(&[e], Some("default"), now()).unwrap();
        assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
        assert!(
            t.contains("boom^[[2J^[]52;c;eA==^G\\rfake\\u009b0m\n"),
            "{t}"
        );
        assert!(t.contains("pod/p^[[1m"), "{t}");
    }

    #[test]
    fn get_events_table_is_kubectls_layout() {
        let ev = |seq: u64,
                  kind: &str,
                  ns: &str,
                  name: &str,
                  t: &str,
                  reason: &str,
                  msg: &str,
                  count: u32| RingEvent {
            seq,
            involved_object: kubelet::events_ring::InvolvedObject {
                kind: kind.into(),
                namespace: ns.into(),
                name: name.into(),
                uid: String::new(),
            },
            event_type: t.into(),
            reason: reason.into(),
            message: msg.into(),
            count,
            first_timestamp: "2026-11-26T11:50:00Z".into(),
            last_timestamp: "2026-11-26T11:58:20Z".into(),
        };
        let events = [
            ev(
                1,
                "Node",
                "",
                "node-a",
                "Normal",
                "Starting",
                "Starting kubelet.",
                1,
            ),
            ev(
                2,
                "Pod",
                "kube-system",
                "etcd-node-a",
                "Normal",
                "Pulled",
                "Container image \"registry.k8s.io/etcd:3.5\" already present on machine",
                1,
            ),
            ev(
                7,
                "Pod",
                "default",
                "web",
                "Warning",
                "BackOff",
                "Back-off restarting failed container c in pod web_default(u1)",
                4,
            ),
        ];
        golden(
            "get_events_all_namespaces.txt",
            &events_table(&events, None, now()).unwrap(),
        );
        golden(
            "get_events_default.txt",
            &events_table(&events, Some("default"), now()).unwrap(),
        );
        assert_eq!(
            events_table(&events, Some("nope"), now()),
            Err("No resources found in nope namespace.".to_owned())
        );
    }

    #[test]
    fn get_node_is_kubectls_row_plus_the_kubelets_view() {
        let report: NodeReport = serde_json::from_value(serde_json::json!({
            "node": {
                "metadata": {"name": "node-a", "labels": {"node-role.kubernetes.io/control-plane": ""}},
                "status": {
                    "capacity": {"cpu": "2", "memory": "8140312Ki", "pods": "110"},
                    "allocatable": {"cpu": "2", "memory": "8037912Ki", "pods": "110"},
                    "conditions": [
                        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available"},
                        {"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure", "message": "kubelet has disk pressure"},
                        {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "PLEG is not healthy: pleg was last seen active 3m0s ago"}
                    ],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "node-a"}],
                    "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                        "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.6.20",
                        "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": "",
                        "operatingSystem": "linux", "architecture": "amd64"}
                }
            },
            "runtime": {"name": "containerd", "version": "1.6.20",
                "conditions": [{"type": "RuntimeReady", "status": true, "reason": "", "message": ""},
                    {"type": "NetworkReady", "status": false, "reason": "NetworkPluginNotReady", "message": "cni plugin not initialized"}]},
            "pleg": {"healthy": false, "message": "pleg was last seen active 3m0s ago"},
            "certificates": [
                {"name": "serving", "path": "/var/lib/kubelet/pki/kubelet.crt", "notAfter": "2027-11-26T12:00:00Z"},
                {"name": "client", "path": "/var/lib/kubelet/pki/kubelet-client-current.pem", "notAfter": "2026-11-01T00:00:00Z"}
            ]
        }))
        .unwrap();
        golden("get_node.txt", &node_text(&report, false, now()));
        let wide = node_text(&report, true, now());
        let row: Vec<&str> = wide.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            row,
            [
                "node-a",
                "NotReady",
                "control-plane",
                "<unknown>",
                "v1.33.0",
                "10.0.0.5",
                "<none>",
                "Debian",
                "GNU/Linux",
                "12",
                "(bookworm)",
                "6.1.0",
                "containerd://1.6.20"
            ]
        );
    }
}
