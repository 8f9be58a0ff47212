//! `rkubelet logs` and `rkubelet doctor` as an operator runs them, on the real containerd
//! (`RKUBELET_CRI_ENDPOINT`): logs read with the kubelet stopped, doctor against the dev
//! runtime and against an endpoint where nothing listens.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Kubelet, NODE, container, endpoint};

const IMAGE: &str = "docker.io/library/busybox:latest";

fn rkubelet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .args(args)
        .output()
        .expect("run rkubelet")
}

/// `rkubelet args…`, killed (and the test failed) if it has not ended within `limit`.
fn rkubelet_within(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rkubelet");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "rkubelet {args:?} still running after {limit:?}; stdout {:?} stderr {:?}",
                text(&o.stdout),
                text(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The exit code doctor's summary line implies.
fn implied_exit(stdout: &str) -> i32 {
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
    let count = |what: &str| -> usize {
        summary
            .split(", ")
            .find(|p| p.contains(what))
            .and_then(|p| p.trim_start_matches("summary: ").split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {what} count in {summary:?}"))
    };
    if count("error") > 0 {
        2
    } else if count("warning") > 0 {
        1
    } else {
        0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_logs_are_read_with_the_kubelet_stopped() {
    let mut k = Kubelet::new();
    k.write_manifest(
        "lg.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: lg\nspec:\n  restartPolicy: Always\n  containers:\n  - name: crash\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"echo crash $(cut -d' ' -f1 /proc/uptime); exit 1\"]\n  - name: tick\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done\"]\n"
        ),
    );
    k.start();
    k.wait_pod(
        "lg",
        Duration::from_secs(120),
        "crash restarted once",
        |p| {
            container(p, "containerStatuses", "crash")
                .and_then(|c| c["restartCount"].as_u64())
                .is_some_and(|n| n >= 1)
        },
    )
    .await;
    // The restarted instance has written its line too.
    let deadline = Instant::now() + Duration::from_secs(30);
    let config = k.dir.path().join("config.yaml");
    let config = config.to_str().unwrap();
    let ep = endpoint();
    let base = [
        "logs",
        "--config",
        config,
        "--hostname-override",
        NODE,
        "--container-runtime-endpoint",
        &ep,
    ];
    let logs = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        rkubelet(&args)
    };
    loop {
        let o = logs(&["lg", "-c", "crash"]);
        if !o.stdout.is_empty() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    k.stop();

    // Two containers: kubectl's error names them.
    let o = logs(&["lg"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stderr),
        format!(
            "error: a container name must be specified for pod lg-{NODE}, choose one of: [crash tick]\n"
        )
    );
    // The manifest name and the full static pod name; current and previous instance.
    let current = logs(&["lg", "-c", "crash"]);
    assert!(current.status.success(), "{}", text(&current.stderr));
    let full = logs(&[&format!("lg-{NODE}"), "-c", "crash"]);
    assert_eq!(text(&full.stdout), text(&current.stdout));
    let previous = logs(&["lg", "-c", "crash", "--previous"]);
    assert!(previous.status.success(), "{}", text(&previous.stderr));
    // Host uptime when the instance started: later instances print more.
    let stamp = |o: &Output| -> f64 {
        let t = text(&o.stdout);
        let line = t.trim_end();
        assert!(line.starts_with("crash ") && !line.contains('\n'), "{t:?}");
        line["crash ".len()..].parse().unwrap()
    };
    assert!(stamp(&previous) < stamp(&current));
    // --timestamps prefixes the runtime's RFC3339Nano time.
    let ts = text(&logs(&["lg", "-c", "crash", "--timestamps"]).stdout);
    assert!(
        ts.split(' ')
            .next()
            .is_some_and(|t| t.ends_with('Z') && t.len() == 30),
        "{ts:?}"
    );

    // -f on an instance that has exited ends: the runtime says it does not run.
    let started = Instant::now();
    let mut args: Vec<&str> = base.to_vec();
    args.extend_from_slice(&["lg", "-c", "crash", "-f"]);
    let f = rkubelet_within(&args, Duration::from_secs(30));
    assert!(f.status.success(), "{}", text(&f.stderr));
    assert_eq!(text(&f.stdout), text(&current.stdout));
    assert!(started.elapsed() < Duration::from_secs(20));

    // -f on a running container streams new lines while the kubelet is down.
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .args(base)
        .args(["lg", "-c", "tick", "-f", "--tail", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut numbers = Vec::new();
    let read_lines = tokio::task::spawn_blocking(move || {
        for _ in 0..5 {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            let n: u64 = line.trim().strip_prefix("tick ").unwrap().parse().unwrap();
            numbers.push(n);
        }
        numbers
    });
    let numbers = tokio::time::timeout(Duration::from_secs(30), read_lines).await;
    // Killed first, so that a failed wait does not leave the reading thread blocked.
    let _ = child.kill();
    let _ = child.wait();
    let numbers = numbers.expect("five followed lines within 30s").unwrap();
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "consecutive lines: {numbers:?}"
    );

    // Put the kubelet back so the pod is torn down when the test ends.
    k.start();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_doctor_reports_the_dev_runtime_and_exits_as_its_findings_say() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("pod-logs");
    std::fs::create_dir(&logs).unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: cgroupfs\nfailSwapOn: false\npodLogsDir: {}\n",
            logs.display()
        ),
    )
    .unwrap();
    let ep = endpoint();
    let args = [
        "doctor",
        "--config",
        config.to_str().unwrap(),
        "--container-runtime-endpoint",
        &ep,
        "--root-dir",
        dir.path().to_str().unwrap(),
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ];
    let o = rkubelet(&args);
    let stdout = text(&o.stdout);
    let runtime = stdout
        .lines()
        .find(|l| l.starts_with("[ok]    runtime: containerd "))
        .unwrap_or_else(|| panic!("no runtime version line:\n{stdout}"));
    assert!(runtime.ends_with(&format!("(CRI v1) at {ep}")), "{runtime}");
    // containerd 1.6 does not implement RuntimeConfig: the driver comes from its CRI config.
    assert!(
        stdout.contains("[ok]    cgroup-driver: kubelet and runtime both use cgroupfs (runtime: SystemdCgroup in containerd's CRI configuration (CRI Status))"),
        "{stdout}"
    );
    assert!(
        stdout.contains("(the runtime's configuration)"),
        "the CNI directory comes from the runtime:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!("[ok]    log-dir: {} is writable", logs.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains("[warn]  clock: cannot reach the API server"),
        "{stdout}"
    );
    assert_eq!(o.status.code(), Some(implied_exit(&stdout)), "{stdout}");
    assert!(
        o.status.code().unwrap() >= 1,
        "the clock warning at least:\n{stdout}"
    );

    // The same findings as JSON, with the same exit code.
    let mut json_args = args.to_vec();
    json_args.extend(["-o", "json"]);
    let j = rkubelet(&json_args);
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["exitCode"].as_i64(), j.status.code().map(i64::from));
    assert_eq!(j.status.code(), o.status.code());
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["check"] == "runtime" && f["severity"] == "ok")
    );
}

#[test]
fn containerd_doctor_with_no_runtime_at_the_endpoint_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nothing.sock");
    let ep = format!("unix://{}", sock.display());
    let o = rkubelet(&[
        "doctor",
        "--container-runtime-endpoint",
        &ep,
        "--root-dir",
        dir.path().to_str().unwrap(),
        "--timeout",
        "2s",
    ]);
    let stdout = text(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{stdout}");
    let line = format!("[error] runtime: no CRI runtime answers at {ep}: ");
    assert!(stdout.contains(&line), "{stdout}");
    assert!(
        stdout.contains("        fix: start the runtime"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[skip]  cni: the runtime did not answer"),
        "{stdout}"
    );
    assert_eq!(implied_exit(&stdout), 2);
}

#[test]
fn containerd_logs_refuses_path_names_and_symlinks_in_the_pod_log_tree() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods");
    let secret = dir.path().join("secret/app");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(
        secret.join("0.log"),
        "2024-01-01T00:00:00Z stdout F secret\n",
    )
    .unwrap();
    std::fs::create_dir_all(pods.join("default_web_uid1")).unwrap();
    std::os::unix::fs::symlink(&secret, pods.join("default_web_uid1/app")).unwrap();
    std::fs::create_dir_all(pods.join("default_db_uid2/app")).unwrap();
    std::os::unix::fs::symlink(secret.join("0.log"), pods.join("default_db_uid2/app/0.log"))
        .unwrap();
    let pods = pods.to_str().unwrap();
    for (argv, want) in [
        (
            vec!["../secret"],
            "error: invalid pod name \"../secret\": must not contain '/'\n".to_owned(),
        ),
        (
            vec!["web", "-n", ".."],
            "error: invalid namespace \"..\": must not be \".\" or \"..\"\n".to_owned(),
        ),
        (
            vec!["web", "-c", "../../secret/app"],
            "error: invalid container \"../../secret/app\": must not contain '/'\n".to_owned(),
        ),
        (
            vec!["web"],
            format!(
                "error: refusing to follow the symlink {pods}/default_web_uid1/app in the pod log directory\n"
            ),
        ),
        (
            vec!["db"],
            format!(
                "error: refusing to follow the symlink {pods}/default_db_uid2/app/0.log in the pod log directory\n"
            ),
        ),
    ] {
        let mut args = vec!["logs", "--pod-logs-dir", pods];
        args.extend(argv.iter().copied());
        let o = rkubelet(&args);
        assert_eq!(o.status.code(), Some(1), "{argv:?}");
        assert!(o.stdout.is_empty(), "{argv:?}: {}", text(&o.stdout));
        assert_eq!(text(&o.stderr), want, "{argv:?}");
    }
}
