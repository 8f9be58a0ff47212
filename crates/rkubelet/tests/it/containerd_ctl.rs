//! The operator commands against a real kubelet on the real containerd (`dev/runtime.sh up`):
//! a static pod shows up in `rkubelet get pods` Running with SOURCE `file`, and
//! `rkubelet describe pod` shows its container, its events and the pod worker's step.

use crate::common;

use std::time::Duration;

use common::{Kubelet, NODE, phase, running, tail};

const IMAGE: &str = "docker.io/library/busybox:latest";

fn rkubelet(k: &Kubelet, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .args(args)
        .arg("--root-dir")
        .arg(k.root())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_pods_and_describe_show_a_static_pod() {
    let mut k = Kubelet::new();
    k.write_manifest(
        "ctl.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ctl\n  namespace: kube-system\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
        ),
    );
    k.start();
    k.wait_pod("ctl", Duration::from_secs(90), "Running", |p| {
        phase(p) == "Running" && running(p, "c")
    })
    .await;
    let name = format!("ctl-{NODE}");
    // The socket comes up with the kubelet; Running may be reported a moment before the
    // status manager marks the pod ready, so poll the command itself.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let row = loop {
        let (code, out, err) = rkubelet(&k, &["get", "pods", "-n", "kube-system"]);
        let row = out
            .lines()
            .find(|l| l.starts_with(&name))
            .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>());
        if code == 0
            && let Some(row) = row.filter(|r| r[1] == "1/1")
        {
            break row;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "get pods: exit {code}\n{out}{err}\n{}",
            tail(&k.log_text(), 40)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(row[2], "Running", "{row:?}");
    assert_eq!(row[3], "0", "{row:?}");
    assert!(row[5].parse::<std::net::IpAddr>().is_ok(), "{row:?}");
    assert_eq!(row.last().map(String::as_str), Some("file"), "{row:?}");

    let (code, out, err) = rkubelet(&k, &["describe", "pod", &name, "-n", "kube-system"]);
    assert_eq!(code, 0, "{err}");
    let fold: String = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    for want in [
        format!("Name: {name}\nNamespace: kube-system\n"),
        "Containers:\nc:\nContainer ID: containerd://".to_owned(),
        format!("Image: {IMAGE}\n"),
        "State: Running\n".to_owned(),
        "Kubelet:\nWorker Phase: Syncing\n".to_owned(),
    ] {
        assert!(fold.contains(&want), "missing {want:?} in\n{out}");
    }
    let events = out.split("Events:\n").nth(1).expect("Events");
    for reason in ["Created", "Started"] {
        assert!(
            events
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some(reason)),
            "no {reason} event in\n{events}"
        );
    }
}
