//! The pod start timeline of `podstart --timeline`: parses the `timeline` tracing target's log
//! lines (`"timeline" pod="<uid>" step="<step>" … at_us=<µs since the epoch>`, and
//! `step="cri" op=… dur_us=…` for each CRI call made in a pod's sync) that rkubelet writes when
//! started with `RUST_LOG=…,timeline=debug`, and reduces them to per-step durations and each
//! pod's own time outside CRI calls.

use std::collections::HashMap;

/// One timeline event.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub pod: String,
    pub step: String,
    pub at_us: u64,
    /// `file_seen`: the pod's namespace/name.
    pub name: Option<String>,
    /// `cri`: the operation and its duration.
    pub op: Option<String>,
    pub dur_us: Option<u64>,
}

/// Parses one log line; `None` for anything that is not a timeline event.
pub fn parse_line(line: &str) -> Option<Mark> {
    let rest = line.split_once("\"timeline\" ")?.1;
    let mut fields: HashMap<&str, String> = HashMap::new();
    let mut s = rest.trim_start();
    while let Some((key, after)) = s.split_once('=') {
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (q[..end].to_owned(), &q[end + 1..])
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            (after[..end].to_owned(), &after[end..])
        };
        fields.insert(key.trim(), value);
        s = next.trim_start();
    }
    Some(Mark {
        pod: fields.remove("pod")?,
        step: fields.remove("step")?,
        at_us: fields.remove("at_us")?.parse().ok()?,
        name: fields.remove("name"),
        op: fields.remove("op"),
        dur_us: fields.get("dur_us").and_then(|v| v.parse().ok()),
    })
}

/// The start path's milestones in order; a pod's timeline takes the first occurrence of each
/// at or after the previous one found (the worker's second round: PLEG event → fresh status →
/// sync that generates Running).
pub const MILESTONES: &[&str] = &[
    "file_seen",
    "merged",
    "sync_loop_add",
    "admitted",
    "worker_round",
    "status_fetched",
    "sync_begin",
    "sandbox_created",
    "sandbox_ready",
    "image_ready",
    "container_config",
    "container_created",
    "container_started",
    "post_start_done",
    "sync_end",
    "pleg_event",
    "worker_round",
    "status_fetched",
    "sync_begin",
    "running",
];

/// One pod's start, reduced.
#[derive(Debug, Clone, PartialEq)]
pub struct PodTimeline {
    pub name: String,
    /// (segment "a→b", milliseconds).
    pub segments: Vec<(String, f64)>,
    /// file_seen → running, ms.
    pub total_ms: f64,
    /// Time in CRI calls attributed to the pod up to Running, ms.
    pub cri_ms: f64,
    /// CRI time by operation, ms.
    pub cri_by_op: HashMap<String, f64>,
    /// sync_end → the PLEG event that starts the Running sync, ms (waiting for a relist).
    pub pleg_wait_ms: f64,
}

impl PodTimeline {
    /// The kubelet's own time outside CRI calls: seen → Running minus the pod's CRI time.
    pub fn own_ms(&self) -> f64 {
        self.total_ms - self.cri_ms
    }
}

/// Per pod (with a `file_seen` and a `running` mark) its timeline.
pub fn reduce(marks: &[Mark]) -> Vec<PodTimeline> {
    let mut by_pod: HashMap<&str, Vec<&Mark>> = HashMap::new();
    for m in marks {
        by_pod.entry(m.pod.as_str()).or_default().push(m);
    }
    let mut out = Vec::new();
    for (_, mut ms) in by_pod {
        ms.sort_by_key(|m| m.at_us);
        let Some(seen) = ms.iter().find(|m| m.step == "file_seen") else {
            continue;
        };
        let Some(running) = ms.iter().find(|m| m.step == "running") else {
            continue;
        };
        // Only up to Running: the rounds after it wait for the next relist by design, and a
        // step that happened earlier than its place in the order (a relist that saw the started
        // containers before the round ended) must not be matched with one of those rounds.
        let until_running: Vec<&Mark> = ms
            .iter()
            .copied()
            .filter(|m| m.at_us <= running.at_us)
            .collect();
        let mut found: Vec<(String, u64)> = Vec::new();
        let mut idx = 0;
        for &step in MILESTONES {
            if let Some(pos) = until_running[idx..].iter().position(|m| m.step == step) {
                let m = until_running[idx + pos];
                // The second round's steps are told apart from the first's.
                let label = if found.iter().any(|(s, _)| s == step) {
                    format!("{step}#2")
                } else {
                    step.to_owned()
                };
                found.push((label, m.at_us));
                idx += pos;
            }
        }
        let segments = found
            .windows(2)
            .map(|w| {
                (
                    format!("{}→{}", w[0].0, w[1].0),
                    w[1].1.saturating_sub(w[0].1) as f64 / 1000.0,
                )
            })
            .collect();
        let mut cri_by_op: HashMap<String, f64> = HashMap::new();
        let mut cri_ms = 0.0;
        for m in ms
            .iter()
            .filter(|m| m.step == "cri" && m.at_us <= running.at_us)
        {
            let d = m.dur_us.unwrap_or(0) as f64 / 1000.0;
            cri_ms += d;
            *cri_by_op
                .entry(m.op.clone().unwrap_or_default())
                .or_default() += d;
        }
        let end = found.iter().position(|(s, _)| s == "sync_end");
        let pleg_wait_ms = end
            .and_then(|i| found.get(i..i + 2))
            .filter(|w| w[1].0 == "pleg_event")
            .map_or(0.0, |w| w[1].1.saturating_sub(w[0].1) as f64 / 1000.0);
        out.push(PodTimeline {
            name: seen.name.clone().unwrap_or_default(),
            segments,
            total_ms: running.at_us.saturating_sub(seen.at_us) as f64 / 1000.0,
            cri_ms,
            cri_by_op,
            pleg_wait_ms,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(fields: &str) -> String {
        format!("I1126 15:20:06.123456    4242 timeline.rs:35] \"timeline\" {fields}")
    }

    #[test]
    fn parses_marks_and_ignores_other_lines() {
        let m = parse_line(&line(
            "pod=\"u1\" step=\"file_seen\" name=\"bench/p-0\" at_us=1000",
        ))
        .unwrap();
        assert_eq!(
            (m.pod.as_str(), m.step.as_str(), m.at_us, m.name.as_deref()),
            ("u1", "file_seen", 1000, Some("bench/p-0"))
        );
        let c = parse_line(&line(
            "pod=\"u1\" step=\"cri\" op=\"run_podsandbox\" dur_us=2500 at_us=4000",
        ))
        .unwrap();
        assert_eq!(
            (c.op.as_deref(), c.dur_us),
            (Some("run_podsandbox"), Some(2500))
        );
        assert_eq!(
            parse_line("I1126 15:20:06 1 x.rs:1] \"pod added\" pod=\"a\""),
            None
        );
        assert_eq!(parse_line(&line("pod=\"u1\" step=\"x\"")), None, "no at_us");
    }

    #[test]
    fn reduces_a_pod_to_segments_cri_time_and_own_time() {
        let lines = [
            "pod=\"u1\" step=\"file_seen\" name=\"bench/p\" at_us=1000",
            "pod=\"u1\" step=\"admitted\" at_us=2000",
            "pod=\"u1\" step=\"sync_begin\" at_us=3000",
            "pod=\"u1\" step=\"cri\" op=\"run_podsandbox\" dur_us=4000 at_us=7000",
            "pod=\"u1\" step=\"sync_end\" at_us=9000",
            "pod=\"u1\" step=\"pleg_event\" at_us=12000",
            "pod=\"u1\" step=\"sync_begin\" at_us=12500",
            "pod=\"u1\" step=\"cri\" op=\"container_status\" dur_us=500 at_us=13000",
            "pod=\"u1\" step=\"running\" at_us=14000",
            "pod=\"u1\" step=\"cri\" op=\"stop_container\" dur_us=9999 at_us=20000",
            "pod=\"u2\" step=\"file_seen\" name=\"bench/q\" at_us=1000",
        ];
        let marks: Vec<Mark> = lines.iter().filter_map(|l| parse_line(&line(l))).collect();
        let t = reduce(&marks);
        assert_eq!(t.len(), 1, "u2 never ran");
        let t = &t[0];
        assert_eq!(t.name, "bench/p");
        assert_eq!(t.total_ms, 13.0);
        assert_eq!(t.cri_ms, 4.5, "calls after Running do not count");
        assert_eq!(t.own_ms(), 8.5);
        assert_eq!(t.pleg_wait_ms, 3.0);
        let names: Vec<&str> = t.segments.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            names,
            [
                "file_seen→admitted",
                "admitted→sync_begin",
                "sync_begin→sync_end",
                "sync_end→pleg_event",
                "pleg_event→sync_begin#2",
                "sync_begin#2→running"
            ]
        );
        assert_eq!(t.segments[2].1, 6.0);
    }

    #[test]
    fn rounds_after_running_are_not_part_of_the_start() {
        // The relist saw the started container before the first round ended, so no
        // `pleg_event` follows `sync_end` before Running; the later rounds (waiting a relist
        // each, after Running) must not be taken for the start's second round.
        let lines = [
            "pod=\"u1\" step=\"file_seen\" name=\"bench/p\" at_us=1000",
            "pod=\"u1\" step=\"worker_round\" at_us=2000",
            "pod=\"u1\" step=\"status_fetched\" at_us=2000",
            "pod=\"u1\" step=\"sync_begin\" at_us=2000",
            "pod=\"u1\" step=\"pleg_event\" at_us=8000",
            "pod=\"u1\" step=\"sync_end\" at_us=9000",
            "pod=\"u1\" step=\"worker_round\" at_us=9000",
            "pod=\"u1\" step=\"status_fetched\" at_us=9100",
            "pod=\"u1\" step=\"sync_begin\" at_us=9100",
            "pod=\"u1\" step=\"running\" at_us=9500",
            "pod=\"u1\" step=\"pleg_event\" at_us=900000",
            "pod=\"u1\" step=\"worker_round\" at_us=900000",
            "pod=\"u1\" step=\"status_fetched\" at_us=1900000",
        ];
        let marks: Vec<Mark> = lines.iter().filter_map(|l| parse_line(&line(l))).collect();
        let t = &reduce(&marks)[0];
        assert_eq!(t.pleg_wait_ms, 0.0);
        let longest = t.segments.iter().map(|(_, ms)| *ms).fold(0.0, f64::max);
        assert_eq!(longest, 7.0, "{:?}", t.segments);
        assert_eq!(
            t.segments.last().map(|(s, _)| s.as_str()),
            Some("sync_begin#2→running")
        );
    }
}
