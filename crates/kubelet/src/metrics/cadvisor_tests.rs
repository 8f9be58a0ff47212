//! `/metrics/cadvisor` from the shared hand-built snapshot, fake desired pods and a fake
//! runtime pod cache: rows (root, kubepods, pod cgroups, containers, sandbox network), labels,
//! values, timestamps, scrape errors and machine series.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::cadvisor::{CADVISOR_METRIC_NAMES, CadvisorInput, render};
use super::resource_tests::{at, fixture};
use crate::container::{ContainerState, ContainerStatus, PodStatus, SandboxStatus};
use crate::host::HostInfo;
use crate::stats::Summary;

fn pod(ns: &str, name: &str, uid: &str, container: &str, cpu_request: Option<&str>) -> Pod {
    let resources = cpu_request.map(|q| ResourceRequirements {
        requests: Some(BTreeMap::from([("cpu".to_owned(), Quantity(q.to_owned()))])),
        ..Default::default()
    });
    Pod {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: container.into(),
                resources,
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

fn ctr(id: &str, name: &str, image: &str) -> ContainerStatus {
    ContainerStatus {
        id: id.into(),
        name: name.into(),
        sandbox_id: "sb1".into(),
        state: ContainerState::Running,
        created_at: None,
        started_at: None,
        finished_at: None,
        exit_code: 0,
        image: image.into(),
        image_ref: String::new(),
        image_id: String::new(),
        hash: 0,
        restart_count: 0,
        reason: String::new(),
        message: String::new(),
        termination_message_path: None,
        termination_grace_period: None,
        resources: None,
        user: None,
    }
}

fn sandbox(id: &str, ready: bool) -> SandboxStatus {
    SandboxStatus {
        id: id.into(),
        ready,
        created_at: None,
        attempt: 0,
        ips: Vec::new(),
        primary_ip: None,
        host_network: false,
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}

fn host() -> HostInfo {
    HostInfo {
        machine_id: "m-1".into(),
        system_uuid: "s-1".into(),
        boot_id: "b-1".into(),
        num_cores: 4,
        memory_capacity: 8_589_934_592,
        swap_capacity: 0,
        ..Default::default()
    }
}

fn runtime_pods() -> Vec<PodStatus> {
    vec![PodStatus {
        uid: "u1".into(),
        name: "web".into(),
        namespace: "default".into(),
        ips: Vec::new(),
        sandbox_statuses: vec![sandbox("sb-old", false), sandbox("sb1", true)],
        // Newest first: `app` attempt 1 (c2) is the one the stats describe.
        container_statuses: vec![
            ctr("c2", "app", "docker.io/library/busybox:latest"),
            ctr("c1", "app", "docker.io/library/busybox:old"),
        ],
    }]
}

fn render_fixture(summary: &Summary, machine: Option<&HostInfo>) -> String {
    let pods = vec![
        pod("default", "web", "u1", "app", None),
        pod("prod", "db", "u2", "pg", Some("100m")),
    ];
    let rt = runtime_pods();
    render(&CadvisorInput::new(
        summary,
        &pods,
        &rt,
        Some(("/rk", crate::cm::cgroups::CgroupDriver::Cgroupfs)),
        machine,
        at("2026-01-02T03:04:10Z"),
    ))
}

/// The sample lines of `family` (without HELP/TYPE).
fn series<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .collect()
}

const APP: &str = "container=\"app\",id=\"/rk/kubepods/besteffort/podu1/c2\",image=\"docker.io/library/busybox:latest\",name=\"c2\",namespace=\"default\",pod=\"web\"";
const WEB: &str = "container=\"\",id=\"/rk/kubepods/besteffort/podu1\",image=\"\",name=\"\",namespace=\"default\",pod=\"web\"";
const DB: &str = "container=\"\",id=\"/rk/kubepods/burstable/podu2\",image=\"\",name=\"\",namespace=\"prod\",pod=\"db\"";
const ROOT: &str = "container=\"\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"";
const KUBEPODS: &str =
    "container=\"\",id=\"/rk/kubepods\",image=\"\",name=\"\",namespace=\"\",pod=\"\"";
const SANDBOX: &str = "container=\"\",id=\"/rk/kubepods/besteffort/podu1/sb1\",image=\"\",name=\"sb1\",namespace=\"default\",pod=\"web\"";
const TS: &str = "1767323045250";

#[test]
fn cpu_rows_root_kubepods_pods_and_containers() {
    let text = render_fixture(&fixture(), Some(&host()));
    assert!(
        text.contains(
            "# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.\n\
             # TYPE container_cpu_usage_seconds_total counter\n"
        ),
        "{text}"
    );
    // Sorted by label values: container "" before "app", then by id.
    assert_eq!(
        series(&text, "container_cpu_usage_seconds_total"),
        vec![
            format!(
                "container_cpu_usage_seconds_total{{container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 12.5 {TS}"
            ),
            format!(
                "container_cpu_usage_seconds_total{{container=\"\",cpu=\"total\",id=\"/rk/kubepods\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 5 {TS}"
            ),
            format!(
                "container_cpu_usage_seconds_total{{container=\"\",cpu=\"total\",id=\"/rk/kubepods/besteffort/podu1\",image=\"\",name=\"\",namespace=\"default\",pod=\"web\"}} 2 {TS}"
            ),
            format!(
                "container_cpu_usage_seconds_total{{container=\"\",cpu=\"total\",id=\"/rk/kubepods/burstable/podu2\",image=\"\",name=\"\",namespace=\"prod\",pod=\"db\"}} 3 {TS}"
            ),
            format!(
                "container_cpu_usage_seconds_total{{container=\"app\",cpu=\"total\",id=\"/rk/kubepods/besteffort/podu1/c2\",image=\"docker.io/library/busybox:latest\",name=\"c2\",namespace=\"default\",pod=\"web\"}} 1.5 {TS}"
            ),
        ]
    );
    // `pg` has stats but the runtime cache does not know it: no row (cadvisor would not
    // have it either); `side` has no stats: no CPU row.
    assert!(!text.contains("container=\"pg\""), "{text}");
}

#[test]
fn memory_network_fs_start_and_last_seen() {
    let text = render_fixture(&fixture(), Some(&host()));
    assert_eq!(
        series(&text, "container_memory_working_set_bytes"),
        vec![
            format!("container_memory_working_set_bytes{{{ROOT}}} 2.147483648e+09 {TS}"),
            format!("container_memory_working_set_bytes{{{KUBEPODS}}} 1e+08 {TS}"),
            format!("container_memory_working_set_bytes{{{WEB}}} 6e+07 {TS}"),
            format!("container_memory_working_set_bytes{{{DB}}} 1e+06 {TS}"),
            format!("container_memory_working_set_bytes{{{APP}}} 5.24288e+07 {TS}"),
        ]
    );
    assert!(text.contains(&format!(
        "container_memory_usage_bytes{{{APP}}} 6e+07 {TS}\n"
    )));
    assert!(text.contains(&format!("container_memory_rss{{{APP}}} 5e+07 {TS}\n")));
    assert!(text.contains(
        "# HELP container_memory_usage_bytes Current memory usage in bytes, including all memory regardless of when it was accessed\n"
    ));
    // Network: the root's interfaces and the pod's on its (ready) sandbox row only.
    assert_eq!(
        series(&text, "container_network_receive_bytes_total"),
        vec![
            format!(
                "container_network_receive_bytes_total{{container=\"\",id=\"/\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"\",pod=\"\"}} 1000 {TS}"
            ),
            format!(
                "container_network_receive_bytes_total{{container=\"\",id=\"/rk/kubepods/besteffort/podu1/sb1\",image=\"\",interface=\"eth0\",name=\"sb1\",namespace=\"default\",pod=\"web\"}} 10 {TS}"
            ),
        ]
    );
    assert_eq!(
        series(&text, "container_network_transmit_bytes_total").len(),
        2
    );
    assert!(text.contains(&format!(
        "container_network_transmit_errors_total{{container=\"\",id=\"/\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"\",pod=\"\"}} 2 {TS}\n"
    )));
    assert!(text.contains(&format!(
        "container_network_receive_errors_total{{container=\"\",id=\"/\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"\",pod=\"\"}} 1 {TS}\n"
    )));
    assert_eq!(
        series(&text, "container_fs_usage_bytes"),
        vec![format!(
            "container_fs_usage_bytes{{container=\"app\",device=\"\",id=\"/rk/kubepods/besteffort/podu1/c2\",image=\"docker.io/library/busybox:latest\",name=\"c2\",namespace=\"default\",pod=\"web\"}} 4096 {TS}"
        )]
    );
    // Start times: whole seconds, no timestamp (cadvisor's spec metric).
    assert_eq!(
        series(&text, "container_start_time_seconds"),
        vec![
            format!("container_start_time_seconds{{{ROOT}}} 1.7672256e+09"),
            format!("container_start_time_seconds{{{WEB}}} 1.7673228e+09"),
            format!("container_start_time_seconds{{{APP}}} 1.767322801e+09"),
        ]
    );
    // Last seen: the scrape time, stamped with the stats time.
    assert!(
        text.contains(&format!(
            "container_last_seen{{{APP}}} 1.76732305e+09 {TS}\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "container_last_seen{{{SANDBOX}}} 1.76732305e+09 {TS}\n"
        )),
        "{text}"
    );
    assert_eq!(series(&text, "container_last_seen").len(), 6, "{text}");
}

#[test]
fn machine_series_and_scrape_errors() {
    let text = render_fixture(&fixture(), Some(&host()));
    assert!(text.contains(
        "# HELP machine_cpu_cores Number of logical CPU cores.\n# TYPE machine_cpu_cores gauge\n\
         machine_cpu_cores{boot_id=\"b-1\",machine_id=\"m-1\",system_uuid=\"s-1\"} 4\n"
    ));
    assert!(text.contains(
        "machine_memory_bytes{boot_id=\"b-1\",machine_id=\"m-1\",system_uuid=\"s-1\"} 8.589934592e+09\n"
    ));
    assert!(text.contains("machine_scrape_error 0\n"));
    assert!(text.contains("container_scrape_error 0\n"));
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split_whitespace().nth(2).unwrap();
        assert!(CADVISOR_METRIC_NAMES.contains(&name), "{name}");
    }

    // No snapshot yet and no host facts: only the two errors.
    let empty = render_fixture(&Summary::default(), None);
    assert_eq!(
        empty,
        "# HELP container_scrape_error 1 if there was an error while getting container metrics, 0 otherwise\n\
         # TYPE container_scrape_error gauge\ncontainer_scrape_error 1\n\
         # HELP machine_scrape_error 1 if there was an error while getting machine metrics, 0 otherwise.\n\
         # TYPE machine_scrape_error gauge\nmachine_scrape_error 1\n"
    );
}

#[test]
fn without_pod_cgroups_only_node_rows() {
    let s = fixture();
    let pods = vec![pod("default", "web", "u1", "app", None)];
    let rt = runtime_pods();
    let text = render(&CadvisorInput::new(
        &s,
        &pods,
        &rt,
        None,
        None,
        at("2026-01-02T03:04:10Z"),
    ));
    assert_eq!(
        series(&text, "container_cpu_usage_seconds_total"),
        vec![format!(
            "container_cpu_usage_seconds_total{{container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 12.5 {TS}"
        )]
    );
}
