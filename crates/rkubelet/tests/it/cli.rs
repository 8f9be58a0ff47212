//! Black-box checks of the binary's start-up: bad configuration stops it with a non-zero exit
//! and an error that names the file, the field and the expected form.

use std::process::Command;

fn run_with_config(body: &str) -> (i32, String) {
    run_with_config_and(body, &[])
}

fn run_with_config_and(body: &str, args: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .arg("--config")
        .arg(&cfg)
        .arg("--root-dir")
        .arg(dir.path().join("root"))
        .arg("--container-runtime-endpoint")
        .arg(format!("unix://{}", dir.path().join("none.sock").display()))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_duration_names_the_field() {
    let (code, err) = run_with_config("syncFrequency: banana\n");
    assert_ne!(code, 0);
    assert!(
        err.contains("syncFrequency: \"banana\" is not a duration"),
        "{err}"
    );
    assert!(err.contains("config.yaml"), "{err}");
}

#[test]
fn unknown_field_warns_and_wrong_type_is_an_error() {
    // Upstream decodes leniently after a strict failure: the kubelet goes on (and here stops
    // only at the missing runtime), having warned about the field.
    let (code, err) = run_with_config("maxPod: 3\n");
    assert_ne!(code, 0);
    // The warning is a log line: its message is quoted in klog's format, so only words are
    // matched.
    assert!(
        err.contains("using lenient decoding as strict decoding failed")
            && err.contains("unknown field")
            && err.contains("maxPod"),
        "{err}"
    );
    assert!(err.contains("container runtime"), "{err}");
    let (code, err) = run_with_config("maxPods: lots\n");
    assert_ne!(code, 0);
    assert!(err.contains("maxPods"), "{err}");
}

#[test]
fn bad_quantity_names_the_field() {
    let (code, err) = run_with_config("evictionHard:\n  memory.available: lots\n");
    assert_ne!(code, 0);
    assert!(
        err.contains("evictionHard") && err.contains("lots"),
        "{err}"
    );
}

#[test]
fn unreachable_runtime_is_a_clear_error() {
    let (code, err) = run_with_config("");
    assert_ne!(code, 0);
    assert!(err.contains("container runtime"), "{err}");
}

#[test]
fn invalid_unsafe_sysctl_pattern_is_refused() {
    let (code, err) = run_with_config("allowedUnsafeSysctls: [\"kernel.*.bad\"]\n");
    assert_ne!(code, 0);
    assert!(err.contains("allowedUnsafeSysctls"), "{err}");
}

#[test]
fn cgroup_settings_are_validated_with_the_field_named() {
    let (code, err) = run_with_config("cgroupDriver: cgroupv2\n");
    assert_ne!(code, 0);
    assert!(
        err.contains("cgroupDriver (--cgroup-driver) \"cgroupv2\" is invalid"),
        "{err}"
    );
    let (code, err) = run_with_config("enforceNodeAllocatable: [pods, system-reserved]\n");
    assert_ne!(code, 0);
    assert!(
        err.contains("systemReservedCgroup (--system-reserved-cgroup) must be specified"),
        "{err}"
    );
    let (code, err) = run_with_config("cgroupsPerQOS: false\n");
    assert_ne!(code, 0);
    assert!(
        err.contains("enforceNodeAllocatable (--enforce-node-allocatable) is not supported unless cgroupsPerQOS"),
        "{err}"
    );
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The log lines of a run that stops at the missing runtime: klog's text format by default,
/// component-base's JSON with `--logging-format=json` or `logging.format: json`.
#[test]
fn logging_formats_are_klogs_text_and_component_bases_json() {
    let (code, err) = run_with_config("");
    assert_ne!(code, 0);
    let starting = err
        .lines()
        .find(|l| l.contains("starting rkubelet"))
        .unwrap_or_else(|| panic!("{err}"));
    // I1126 00:37:00.123456    1234 main.rs:123] "starting rkubelet" endpoint="unix://..."
    let (header, rest) = starting.split_once("] ").unwrap();
    let fields: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(fields.len(), 4, "{starting}");
    assert!(
        fields[0].starts_with('I') && fields[0].len() == 5,
        "{starting}"
    );
    assert_eq!(fields[1].len(), 15, "hh:mm:ss.uuuuuu: {starting}");
    assert!(fields[2].parse::<u32>().is_ok(), "pid: {starting}");
    assert!(fields[3].starts_with("main.rs:"), "{starting}");
    assert!(
        rest.starts_with("\"starting rkubelet\" endpoint=\"unix://"),
        "{starting}"
    );
    let error = err
        .lines()
        .find(|l| l.starts_with('E'))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(error.contains("container runtime"), "{error}");

    for (body, args) in [
        ("", &["--logging-format=json"][..]),
        ("logging:\n  format: json\n", &[][..]),
    ] {
        let (code, err) = run_with_config_and(body, args);
        assert_ne!(code, 0);
        let lines: Vec<serde_json::Value> = err
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let start = lines
            .iter()
            .find(|v| v["msg"] == "starting rkubelet")
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            start["ts"].as_f64().unwrap() > 1.0e12,
            "milliseconds: {start}"
        );
        assert!(
            start["caller"]
                .as_str()
                .unwrap()
                .starts_with("src/main.rs:"),
            "{start}"
        );
        assert_eq!(start["v"], 0);
        assert!(start["endpoint"].as_str().unwrap().starts_with("unix://"));
        let failed = lines
            .iter()
            .find(|v| v.get("v").is_none())
            .unwrap_or_else(|| panic!("an error line: {err}"));
        assert!(
            failed["msg"]
                .as_str()
                .unwrap()
                .contains("container runtime"),
            "{failed}"
        );
    }
    let (code, err) = run_with_config_and("", &["--logging-format=xml"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("logging.format: Unsupported value: \"xml\""),
        "{err}"
    );
}

/// Removed and unknown flags stop the kubelet as upstream's does: exit 1 and a klog error
/// `"command failed" err="failed to parse kubelet flag: unknown flag: --..."`.
#[test]
fn unknown_and_removed_flags_exit_with_upstreams_message() {
    for (flag, name) in [
        ("--container-runtime=remote", "--container-runtime"),
        ("--no-such-flag", "--no-such-flag"),
    ] {
        let (code, out, err) = run(&[flag]);
        assert_eq!(code, 1, "{err}");
        assert!(out.is_empty());
        let line = err.lines().next().unwrap_or_default();
        assert!(line.starts_with('E'), "{err}");
        assert!(
            line.ends_with(&format!(
                "] \"command failed\" err=\"failed to parse kubelet flag: unknown flag: {name}\""
            )),
            "{err}"
        );
    }
}

/// `--version` in upstream's form, which kubeadm parses (`Kubernetes vX.Y.Z`).
#[test]
fn version_prints_the_kubernetes_version() {
    let (code, out, _) = run(&["--version"]);
    assert_eq!((code, out.as_str()), (0, "Kubernetes v1.33.0\n"));
    let (code, out, _) = run(&["--version=raw"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("version.Info{Major:\"1\", Minor:\"33\""),
        "{out}"
    );
}
