//! `rkubelet describe pod` in `kubectl describe pod`'s layout (no colour): spec summary,
//! containers with state/last state/ready/restarts/probes/mounts, conditions, volumes, QoS,
//! and the pod's events from the kubelet's ring; then what upstream cannot show, a
//! `Kubelet:` section with the pod worker's lifecycle step and the last error that stops the
//! pod. Owns nothing; receives the kubelet's pod report and a fixed "now"; emits text.
//! Times are printed in UTC.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStatus, Probe, ResourceRequirements, Toleration, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubelet::events_ring::RingEvent;
use kubelet::pod_workers::WorkerReport;
use kubelet::server::operator::PodReport;

use super::printers::{age, age_of, chrono_time, human_duration};
use super::tabwriter::TabWriter;

const L1: &str = "  ";
const L2: &str = "    ";
const L3: &str = "      ";

/// RFC 1123 with a numeric zone, as kubectl prints times (here always UTC).
fn rfc1123z(t: &Time) -> String {
    chrono_time(t)
        .format("%a, %d %b %Y %H:%M:%S %z")
        .to_string()
}

fn or_none(s: &str) -> &str {
    if s.is_empty() { "<none>" } else { s }
}

/// The whole `describe pod` text.
pub fn describe_pod(r: &PodReport, now: DateTime<Utc>) -> String {
    let pod = &r.pod;
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let meta = &pod.metadata;
    let mut w = TabWriter::describe();
    w.write(&format!(
        "Name:\t{}\n",
        meta.name.as_deref().unwrap_or_default()
    ));
    w.write(&format!(
        "Namespace:\t{}\n",
        meta.namespace.as_deref().unwrap_or_default()
    ));
    if let Some(p) = spec.priority {
        w.write(&format!("Priority:\t{p}\n"));
    }
    if let Some(p) = spec
        .priority_class_name
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        w.write(&format!("Priority Class Name:\t{p}\n"));
    }
    if let Some(rc) = spec.runtime_class_name.as_deref().filter(|p| !p.is_empty()) {
        w.write(&format!("Runtime Class Name:\t{rc}\n"));
    }
    if let Some(sa) = spec
        .service_account_name
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        w.write(&format!("Service Account:\t{sa}\n"));
    }
    match spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        Some(n) => w.write(&format!(
            "Node:\t{n}/{}\n",
            status.host_ip.as_deref().unwrap_or_default()
        )),
        None => w.write("Node:\t<none>\n"),
    }
    if let Some(t) = &status.start_time {
        w.write(&format!("Start Time:\t{}\n", rfc1123z(t)));
    }
    multiline_map(&mut w, "Labels", meta.labels.as_ref(), "=");
    multiline_map(&mut w, "Annotations", meta.annotations.as_ref(), ": ");
    let phase = status.phase.clone().unwrap_or_default();
    match &meta.deletion_timestamp {
        Some(t) if phase != "Failed" && phase != "Succeeded" => {
            w.write(&format!(
                "Status:\tTerminating (lasts {})\n",
                age(Some(t), now)
            ));
            if let Some(g) = meta.deletion_grace_period_seconds {
                w.write(&format!("Termination Grace Period:\t{g}s\n"));
            }
        }
        _ => w.write(&format!("Status:\t{phase}\n")),
    }
    if let Some(reason) = status.reason.as_deref().filter(|s| !s.is_empty()) {
        w.write(&format!("Reason:\t{reason}\n"));
    }
    if let Some(m) = status.message.as_deref().filter(|s| !s.is_empty()) {
        w.write(&format!("Message:\t{m}\n"));
    }
    w.write(&format!(
        "IP:\t{}\n",
        status.pod_ip.as_deref().unwrap_or_default()
    ));
    match status.pod_ips.as_deref() {
        Some(ips) if !ips.is_empty() => {
            w.write("IPs:\n");
            for ip in ips {
                w.write(&format!("{L1}IP:\t{}\n", ip.ip));
            }
        }
        _ => w.write("IPs:\t<none>\n"),
    }
    if let Some(owner) = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        w.write(&format!("Controlled By:\t{}/{}\n", owner.kind, owner.name));
    }
    if let Some(init) = spec.init_containers.as_deref().filter(|c| !c.is_empty()) {
        containers(
            &mut w,
            "Init Containers",
            init,
            status
                .init_container_statuses
                .as_deref()
                .unwrap_or_default(),
        );
    }
    containers(
        &mut w,
        "Containers",
        &spec.containers,
        status.container_statuses.as_deref().unwrap_or_default(),
    );
    if let Some(conds) = status.conditions.as_deref().filter(|c| !c.is_empty()) {
        w.write("Conditions:\n  Type\tStatus\n");
        for c in conds {
            w.write(&format!("{L1}{} \t{} \n", c.type_, c.status));
        }
    }
    volumes(&mut w, spec.volumes.as_deref().unwrap_or_default());
    w.write(&format!(
        "QoS Class:\t{}\n",
        status
            .qos_class
            .clone()
            .filter(|q| !q.is_empty())
            .unwrap_or_else(|| qos_class(&spec.containers))
    ));
    multiline_map(&mut w, "Node-Selectors", spec.node_selector.as_ref(), "=");
    tolerations(&mut w, spec.tolerations.as_deref().unwrap_or_default());
    kubelet_section(&mut w, r.worker.as_ref());
    events(&mut w, &r.events, now);
    w.flush()
}

/// kubectl's `printLabelsMultiline` / `printAnnotationsMultiline` (sorted keys).
fn multiline_map(w: &mut TabWriter, title: &str, m: Option<&BTreeMap<String, String>>, sep: &str) {
    w.write(&format!("{title}:\t"));
    let Some(m) = m.filter(|m| !m.is_empty()) else {
        w.write("<none>\n");
        return;
    };
    for (i, (k, v)) in m.iter().enumerate() {
        if i != 0 {
            w.write("\t");
        }
        let v = if v.chars().count() > 140 {
            format!("{}...", v.chars().take(137).collect::<String>())
        } else {
            v.clone()
        };
        w.write(&format!("{k}{sep}{v}\n"));
    }
}

fn containers(w: &mut TabWriter, label: &str, specs: &[Container], statuses: &[ContainerStatus]) {
    w.write(&format!("{label}:\n"));
    for c in specs {
        let st = statuses.iter().find(|s| s.name == c.name);
        w.write(&format!("{L1}{}:\n", c.name));
        if let Some(st) = st {
            w.write(&format!(
                "{L2}Container ID:\t{}\n",
                st.container_id.as_deref().unwrap_or_default()
            ));
        }
        w.write(&format!(
            "{L2}Image:\t{}\n",
            c.image.as_deref().unwrap_or_default()
        ));
        if let Some(st) = st {
            w.write(&format!("{L2}Image ID:\t{}\n", st.image_id));
        }
        let ports: Vec<String> = c
            .ports
            .iter()
            .flatten()
            .map(|p| {
                format!(
                    "{}/{}",
                    p.container_port,
                    p.protocol.as_deref().unwrap_or("TCP")
                )
            })
            .collect();
        let host_ports: Vec<String> = c
            .ports
            .iter()
            .flatten()
            .map(|p| {
                format!(
                    "{}/{}",
                    p.host_port.unwrap_or(0),
                    p.protocol.as_deref().unwrap_or("TCP")
                )
            })
            .collect();
        let (pl, hl) = if ports.len() > 1 {
            ("Ports", "Host Ports")
        } else {
            ("Port", "Host Port")
        };
        w.write(&format!("{L2}{pl}:\t{}\n", or_none(&ports.join(", "))));
        w.write(&format!("{L2}{hl}:\t{}\n", or_none(&host_ports.join(", "))));
        if let Some(p) = &c.restart_policy {
            w.write(&format!("{L2}Restart Policy:\t{p}\n"));
        }
        for (title, lines) in [("Command", &c.command), ("Args", &c.args)] {
            if let Some(lines) = lines.as_deref().filter(|l| !l.is_empty()) {
                w.write(&format!("{L2}{title}:\n"));
                for part in lines.iter().flat_map(|l| l.split('\n')) {
                    w.write(&format!("{L3}{part}\n"));
                }
            }
        }
        if let Some(st) = st {
            state(w, "State", st.state.as_ref());
            if let Some(last) = st.last_state.as_ref().filter(|s| s.terminated.is_some()) {
                state(w, "Last State", Some(last));
            }
            w.write(&format!(
                "{L2}Ready:\t{}\n",
                if st.ready { "True" } else { "False" }
            ));
            w.write(&format!("{L2}Restart Count:\t{}\n", st.restart_count));
        }
        resources(w, c.resources.as_ref());
        for (title, p) in [
            ("Liveness", &c.liveness_probe),
            ("Readiness", &c.readiness_probe),
            ("Startup", &c.startup_probe),
        ] {
            if let Some(p) = p {
                w.write(&format!("{L2}{title}:\t{}\n", probe(p)));
            }
        }
        env(w, c);
        let mut mounts = c.volume_mounts.clone().unwrap_or_default();
        if mounts.is_empty() {
            w.write(&format!("{L2}Mounts:\t<none>\n"));
        } else {
            w.write(&format!("{L2}Mounts:\n"));
            mounts.sort_by(|a, b| a.mount_path.cmp(&b.mount_path));
            for m in mounts {
                let mut flags = vec![
                    if m.read_only == Some(true) {
                        "ro"
                    } else {
                        "rw"
                    }
                    .to_owned(),
                ];
                if let Some(sp) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                    flags.push(format!("path={sp:?}"));
                }
                w.write(&format!(
                    "{L3}{} from {} ({})\n",
                    m.mount_path,
                    m.name,
                    flags.join(",")
                ));
            }
        }
    }
}

fn state(w: &mut TabWriter, name: &str, s: Option<&ContainerState>) {
    let s = s.cloned().unwrap_or_default();
    if let Some(r) = &s.running {
        w.write(&format!("{L2}{name}:\tRunning\n"));
        if let Some(t) = &r.started_at {
            w.write(&format!("{L3}Started:\t{}\n", rfc1123z(t)));
        }
    } else if let Some(wt) = &s.waiting {
        w.write(&format!("{L2}{name}:\tWaiting\n"));
        if let Some(r) = wt.reason.as_deref().filter(|r| !r.is_empty()) {
            w.write(&format!("{L3}Reason:\t{r}\n"));
        }
    } else if let Some(t) = &s.terminated {
        w.write(&format!("{L2}{name}:\tTerminated\n"));
        if let Some(r) = t.reason.as_deref().filter(|r| !r.is_empty()) {
            w.write(&format!("{L3}Reason:\t{r}\n"));
        }
        if let Some(m) = t.message.as_deref().filter(|r| !r.is_empty()) {
            w.write(&format!("{L3}Message:\t{m}\n"));
        }
        w.write(&format!("{L3}Exit Code:\t{}\n", t.exit_code));
        if let Some(sig) = t.signal.filter(|s| *s > 0) {
            w.write(&format!("{L3}Signal:\t{sig}\n"));
        }
        let time = |t: Option<&Time>| t.map(rfc1123z).unwrap_or_default();
        w.write(&format!("{L3}Started:\t{}\n", time(t.started_at.as_ref())));
        w.write(&format!(
            "{L3}Finished:\t{}\n",
            time(t.finished_at.as_ref())
        ));
    } else {
        w.write(&format!("{L2}{name}:\tWaiting\n"));
    }
}

fn resources(w: &mut TabWriter, r: Option<&ResourceRequirements>) {
    let Some(r) = r else { return };
    for (title, m) in [("Limits", &r.limits), ("Requests", &r.requests)] {
        if let Some(m) = m.as_ref().filter(|m| !m.is_empty()) {
            w.write(&format!("{L2}{title}:\n"));
            for (k, v) in m {
                w.write(&format!("{L3}{k}:\t{}\n", v.0));
            }
        }
    }
}

/// kubectl's `DescribeProbe` (the kubelet's defaults where a field is unset).
fn probe(p: &Probe) -> String {
    let attrs = format!(
        "delay={}s timeout={}s period={}s #success={} #failure={}",
        p.initial_delay_seconds.unwrap_or(0),
        p.timeout_seconds.unwrap_or(1),
        p.period_seconds.unwrap_or(10),
        p.success_threshold.unwrap_or(1),
        p.failure_threshold.unwrap_or(3)
    );
    let port = |p: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| match p {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
    };
    if let Some(e) = &p.exec {
        return format!(
            "exec [{}] {attrs}",
            e.command.as_deref().unwrap_or_default().join(" ")
        );
    }
    if let Some(h) = &p.http_get {
        let scheme = h.scheme.as_deref().unwrap_or("HTTP").to_lowercase();
        let host = h.host.as_deref().unwrap_or_default();
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        return format!(
            "http-get {scheme}://{host}:{}{} {attrs}",
            port(&h.port),
            h.path.as_deref().unwrap_or_default()
        );
    }
    if let Some(t) = &p.tcp_socket {
        return format!(
            "tcp-socket {}:{} {attrs}",
            t.host.as_deref().unwrap_or_default(),
            port(&t.port)
        );
    }
    if let Some(g) = &p.grpc {
        return format!(
            "grpc <pod>:{} {} {attrs}",
            g.port,
            g.service.as_deref().unwrap_or_default()
        );
    }
    format!("unknown {attrs}")
}

fn env(w: &mut TabWriter, c: &Container) {
    if let Some(from) = c.env_from.as_deref().filter(|f| !f.is_empty()) {
        w.write(&format!("{L2}Environment Variables from:\n"));
        for f in from {
            let prefix = f.prefix.as_deref().unwrap_or_default();
            let (name, kind, optional) = match (&f.config_map_ref, &f.secret_ref) {
                (Some(cm), _) => (cm.name.clone(), "ConfigMap", cm.optional),
                (None, Some(s)) => (s.name.clone(), "Secret", s.optional),
                (None, None) => continue,
            };
            let optional = optional.unwrap_or(false);
            if prefix.is_empty() {
                w.write(&format!("{L3}{name}\t{kind}\tOptional: {optional}\n"));
            } else {
                w.write(&format!(
                    "{L3}{name}\t{kind} with prefix '{prefix}'\tOptional: {optional}\n"
                ));
            }
        }
    }
    let vars = c.env.as_deref().unwrap_or_default();
    if vars.is_empty() {
        w.write(&format!("{L2}Environment:\t<none>\n"));
        return;
    }
    w.write(&format!("{L2}Environment:\n"));
    for e in vars {
        match &e.value_from {
            None => {
                for (i, line) in e
                    .value
                    .as_deref()
                    .unwrap_or_default()
                    .split('\n')
                    .enumerate()
                {
                    if i == 0 {
                        w.write(&format!("{L3}{}:\t{line}\n", e.name));
                    } else {
                        w.write(&format!("{L3}\t{line}\n"));
                    }
                }
            }
            Some(from) => {
                let text = if let Some(f) = &from.field_ref {
                    format!(
                        " ({}:{})",
                        f.api_version.as_deref().unwrap_or("v1"),
                        f.field_path
                    )
                } else if let Some(r) = &from.resource_field_ref {
                    format!(
                        "{} of {}",
                        r.resource,
                        r.container_name.as_deref().unwrap_or(&c.name)
                    )
                } else if let Some(s) = &from.secret_key_ref {
                    format!(
                        "<set to the key '{}' in secret '{}'>\tOptional: {}",
                        s.key,
                        s.name,
                        s.optional.unwrap_or(false)
                    )
                } else if let Some(cm) = &from.config_map_key_ref {
                    format!(
                        "<set to the key '{}' of config map '{}'>\tOptional: {}",
                        cm.key,
                        cm.name,
                        cm.optional.unwrap_or(false)
                    )
                } else {
                    String::new()
                };
                w.write(&format!("{L3}{}:\t{text}\n", e.name));
            }
        }
    }
}

fn volumes(w: &mut TabWriter, vols: &[Volume]) {
    if vols.is_empty() {
        w.write("Volumes:\t<none>\n");
        return;
    }
    w.write("Volumes:\n");
    for v in vols {
        w.write(&format!("{L1}{}:\n", v.name));
        if let Some(h) = &v.host_path {
            w.write(&format!(
                "{L2}Type:\tHostPath (bare host directory volume)\n{L2}Path:\t{}\n{L2}HostPathType:\t{}\n",
                h.path,
                h.type_.as_deref().unwrap_or_default()
            ));
        } else if let Some(e) = &v.empty_dir {
            w.write(&format!(
                "{L2}Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)\n{L2}Medium:\t{}\n",
                e.medium.as_deref().unwrap_or_default()
            ));
            match e
                .size_limit
                .as_ref()
                .filter(|q| !q.0.is_empty() && q.0 != "0")
            {
                Some(q) => w.write(&format!("{L2}SizeLimit:\t{}\n", q.0)),
                None => w.write(&format!("{L2}SizeLimit:\t<unset>\n")),
            }
        } else if let Some(s) = &v.secret {
            w.write(&format!(
                "{L2}Type:\tSecret (a volume populated by a Secret)\n{L2}SecretName:\t{}\n{L2}Optional:\t{}\n",
                s.secret_name.as_deref().unwrap_or_default(),
                s.optional.unwrap_or(false)
            ));
        } else if let Some(cm) = &v.config_map {
            w.write(&format!(
                "{L2}Type:\tConfigMap (a volume populated by a ConfigMap)\n{L2}Name:\t{}\n{L2}Optional:\t{}\n",
                cm.name,
                cm.optional.unwrap_or(false)
            ));
        } else if v.projected.is_some() {
            w.write(&format!(
                "{L2}Type:\tProjected (a volume that contains injected data from multiple sources)\n"
            ));
        } else if v.downward_api.is_some() {
            w.write(&format!(
                "{L2}Type:\tDownwardAPI (a volume populated by information about the pod)\n"
            ));
        } else if let Some(p) = &v.persistent_volume_claim {
            w.write(&format!(
                "{L2}Type:\tPersistentVolumeClaim (a reference to a PersistentVolumeClaim in the same namespace)\n{L2}ClaimName:\t{}\n{L2}ReadOnly:\t{}\n",
                p.claim_name,
                p.read_only.unwrap_or(false)
            ));
        } else {
            w.write(&format!("{L1}<unknown>\n"));
        }
    }
}

/// The pod's QoS class from its containers' requests and limits (when the status has none).
fn qos_class(containers: &[Container]) -> String {
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let r = c.resources.clone().unwrap_or_default();
        let limits = r.limits.unwrap_or_default();
        let requests = r.requests.unwrap_or_default();
        if !limits.is_empty() || !requests.is_empty() {
            any = true;
        }
        for res in ["cpu", "memory"] {
            match (limits.get(res), requests.get(res)) {
                (Some(l), Some(q)) if l.0 == q.0 => {}
                (Some(_), None) => {}
                _ => guaranteed = false,
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
    .to_owned()
}

fn tolerations(w: &mut TabWriter, ts: &[Toleration]) {
    w.write("Tolerations:\t");
    if ts.is_empty() {
        w.write("<none>\n");
        return;
    }
    for (i, t) in ts.iter().enumerate() {
        if i != 0 {
            w.write("\t");
        }
        let key = t.key.as_deref().unwrap_or_default();
        let value = t.value.as_deref().unwrap_or_default();
        let mut s = key.to_owned();
        if !value.is_empty() {
            s.push_str(&format!("={value}"));
        }
        if let Some(e) = t.effect.as_deref().filter(|e| !e.is_empty()) {
            s.push_str(&format!(":{e}"));
        }
        if t.operator.as_deref() == Some("Exists") && value.is_empty() {
            s.push_str(if s.is_empty() {
                "op=Exists"
            } else {
                " op=Exists"
            });
        }
        if let Some(secs) = t.toleration_seconds {
            s.push_str(&format!(" for {secs}s"));
        }
        w.write(&format!("{s}\n"));
    }
}

/// What upstream cannot show: the pod worker's step and the error that stops the pod.
fn kubelet_section(w: &mut TabWriter, worker: Option<&WorkerReport>) {
    w.write("Kubelet:\n");
    let Some(r) = worker else {
        w.write(&format!(
            "{L1}Worker:\t<none> (the pod has no pod worker: not admitted, or already forgotten)\n"
        ));
        return;
    };
    w.write(&format!("{L1}Worker Phase:\t{}\n", r.phase));
    w.write(&format!("{L1}Step:\t{}\n", r.step));
    match (&r.last_error, r.last_error_seconds_ago) {
        (Some(e), Some(ago)) => w.write(&format!(
            "{L1}Last Error:\t{} ({} ago)\n",
            e.trim_end(),
            human_duration(chrono::Duration::seconds(
                i64::try_from(ago).unwrap_or(i64::MAX / 1000)
            ))
        )),
        (Some(e), None) => w.write(&format!("{L1}Last Error:\t{}\n", e.trim_end())),
        (None, _) => w.write(&format!("{L1}Last Error:\t<none>\n")),
    }
}

/// kubectl's `DescribeEvents` (the ring's entries, oldest first).
fn events(w: &mut TabWriter, evs: &[RingEvent], now: DateTime<Utc>) {
    if evs.is_empty() {
        w.write("Events:\t<none>\n");
        return;
    }
    w.write("Events:\n  Type\tReason\tAge\tFrom\tMessage\n");
    w.write(&format!("{L1}----\t------\t----\t----\t-------\n"));
    for e in evs {
        let first = age_of(&e.first_timestamp, now);
        let interval = if e.count > 1 {
            format!(
                "{} (x{} over {first})",
                age_of(&e.last_timestamp, now),
                e.count
            )
        } else {
            first
        };
        w.write(&format!(
            "{L1}{}\t{}\t{interval}\tkubelet\t{}\n",
            e.event_type,
            e.reason,
            e.message.trim()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctl::printers::tests::{golden, now};

    fn report() -> PodReport {
        serde_json::from_value(serde_json::json!({
            "pod": {
                "metadata": {
                    "name": "etcd-node-a", "namespace": "kube-system", "uid": "u1",
                    "creationTimestamp": "2026-11-26T10:00:00Z",
                    "labels": {"component": "etcd", "tier": "control-plane"},
                    "annotations": {"kubernetes.io/config.source": "file",
                        "kubernetes.io/config.hash": "abc"}
                },
                "spec": {
                    "nodeName": "node-a", "priority": 2000001000,
                    "priorityClassName": "system-node-critical",
                    "initContainers": [{"name": "init", "image": "busybox",
                        "command": ["sh", "-c", "echo hi"]}],
                    "containers": [{
                        "name": "etcd", "image": "registry.k8s.io/etcd:3.5.21-0",
                        "command": ["etcd", "--data-dir=/var/lib/etcd"],
                        "ports": [{"containerPort": 2379, "protocol": "TCP"}],
                        "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
                        "livenessProbe": {"httpGet": {"host": "127.0.0.1", "path": "/livez",
                            "port": 2381, "scheme": "HTTP"}, "initialDelaySeconds": 10,
                            "timeoutSeconds": 15, "periodSeconds": 10, "failureThreshold": 8,
                            "successThreshold": 1},
                        "env": [{"name": "A", "value": "1"},
                            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                        "volumeMounts": [{"name": "etcd-data", "mountPath": "/var/lib/etcd"},
                            {"name": "certs", "mountPath": "/etc/kubernetes/pki/etcd", "readOnly": true}]
                    }],
                    "volumes": [
                        {"name": "certs", "hostPath": {"path": "/etc/kubernetes/pki/etcd", "type": "DirectoryOrCreate"}},
                        {"name": "etcd-data", "emptyDir": {}}
                    ],
                    "tolerations": [{"operator": "Exists", "effect": "NoExecute"}]
                },
                "status": {
                    "phase": "Running", "hostIP": "10.0.0.5", "podIP": "10.0.0.5",
                    "podIPs": [{"ip": "10.0.0.5"}], "qosClass": "Burstable",
                    "startTime": "2026-11-26T10:00:01Z",
                    "conditions": [
                        {"type": "Initialized", "status": "True"},
                        {"type": "Ready", "status": "False"}
                    ],
                    "initContainerStatuses": [{"name": "init", "image": "busybox",
                        "imageID": "sha256:1", "containerID": "containerd://i1", "ready": true,
                        "restartCount": 0, "state": {"terminated": {"exitCode": 0,
                        "reason": "Completed", "startedAt": "2026-11-26T10:00:02Z",
                        "finishedAt": "2026-11-26T10:00:03Z"}}}],
                    "containerStatuses": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.5.21-0",
                        "imageID": "sha256:2", "containerID": "containerd://c1", "ready": false,
                        "restartCount": 4,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                            "startedAt": "2026-11-26T11:58:00Z", "finishedAt": "2026-11-26T11:59:00Z"}}}]
                }
            },
            "worker": {"phase": "Syncing", "step": "sync failed; retrying after back-off",
                "lastError": "failed to \"StartContainer\" for \"etcd\" with CrashLoopBackOff: \"back-off 40s restarting failed container=etcd\"",
                "lastErrorSecondsAgo": 12},
            "events": [
                {"seq": 3, "involvedObject": {"kind": "Pod", "namespace": "kube-system", "name": "etcd-node-a", "uid": "u1"},
                 "type": "Normal", "reason": "Pulled", "message": "Container image \"registry.k8s.io/etcd:3.5.21-0\" already present on machine",
                 "count": 1, "firstTimestamp": "2026-11-26T10:00:04Z", "lastTimestamp": "2026-11-26T10:00:04Z"},
                {"seq": 9, "involvedObject": {"kind": "Pod", "namespace": "kube-system", "name": "etcd-node-a", "uid": "u1"},
                 "type": "Warning", "reason": "BackOff", "message": "Back-off restarting failed container etcd in pod etcd-node-a_kube-system(u1)",
                 "count": 7, "firstTimestamp": "2026-11-26T11:40:00Z", "lastTimestamp": "2026-11-26T11:59:30Z"}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn describe_pod_is_kubectls_layout_plus_the_kubelet_section() {
        golden("describe_pod.txt", &describe_pod(&report(), now()));
    }

    #[test]
    fn describe_pod_without_worker_or_events() {
        let mut r = report();
        r.worker = None;
        r.events.clear();
        let text = describe_pod(&r, now());
        assert!(
            text.contains("Kubelet:\n  Worker:  <none> (the pod has no pod worker"),
            "{text}"
        );
        // Aligned with the block above it, as kubectl's `Events:  <none>` is.
        let last = text.lines().last().unwrap();
        assert_eq!(
            last.split_whitespace().collect::<Vec<_>>(),
            ["Events:", "<none>"]
        );
    }

    /// ESC[2J (clear), OSC 52 (set the clipboard), CR (overwrite the line), BEL, BS, NUL, DEL
    /// and the C1 CSI/OSC/ST controls.
    const HOSTILE: &str =
        "x\x1b[2Jy\x1b]52;c;cm0gLXJmIC8=\x07z\rw\x08\x00\x7f\u{9b}2J\u{9d}0;t\u{9c}";
    const ESCAPED: &str = "x^[[2Jy^[]52;c;cm0gLXJmIC8=^Gz\\rw^H^@^?\\u009b2J\\u009d0;t\\u009c";

    #[test]
    fn messages_from_the_pod_and_events_are_printed_escaped() {
        let mut r = report();
        let statuses = r
            .pod
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap();
        let last = statuses[0]
            .last_state
            .as_mut()
            .unwrap()
            .terminated
            .as_mut()
            .unwrap();
        last.message = Some(HOSTILE.into());
        r.events[1].message = HOSTILE.into();
        r.events[1].reason = "Back\x1b]0;title\x07Off".to_owned();
        let text = describe_pod(&r, now());
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with("Message:") && l.ends_with(ESCAPED)),
            "{text}"
        );
        assert!(text.contains(&format!("  {ESCAPED}\n")), "{text}");
        assert!(text.contains("Back^[]0;title^GOff"), "{text}");
    }
}
