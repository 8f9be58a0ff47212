//! CI smoke of the hollow-node benchmark: 3 hollow rkubelets (fake runtime, one process) with
//! 2 pods each against the fake API server child; every node registers Ready with a lease,
//! every pod reaches Running and Ready through the API, and the report carries the measures.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[test]
fn three_hollow_nodes_run_two_pods_each() {
    let dir = std::env::temp_dir().join(format!("rkubelet-hollow-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("result.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hollow"))
        .args(["one", "--nodes", "3", "--pods", "2", "--steady-secs", "1"])
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .spawn()
        .expect("the hollow binary starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hollow did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "hollow failed: {status}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(r["nodes"], 3, "{r:#}");
    assert_eq!(r["pods_per_node"], 2, "{r:#}");
    assert_eq!(
        r["pods_running_at_end"], 6,
        "all pods still Running after the window: {r:#}"
    );
    let start = &r["api_requests_per_pod_start"]["by_request"];
    // Each pod's Running status reached the API through the kubelets' status PATCHes, and
    // the pod starts were reported as events.
    assert!(start["PATCH pods/status"].as_f64().unwrap() >= 1.0, "{r:#}");
    assert!(start["POST events"].as_f64().unwrap() >= 1.0, "{r:#}");
    // The harness created the pods in the store: no pod POST is counted as a kubelet's.
    assert!(start.get("POST pods").is_none(), "{r:#}");
    // Both processes were measured.
    for key in [
        "/agents/rss_kib_steady",
        "/agents/threads",
        "/apiserver/rss_kib_steady",
    ] {
        assert!(
            r.pointer(key).and_then(Value::as_f64).unwrap() > 0.0,
            "{key}: {r:#}"
        );
    }
    assert!(r["agents"]["fds_per_node"].as_f64().unwrap() > 0.0, "{r:#}");
}
