//! Black-box checks of the binary's start-up: bad configuration stops it with a non-zero exit
//! and an error that names the file, the field and the expected form.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn run_with_config(body: &str) -> (i32, String) {
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
    assert!(
        err.contains("using lenient decoding as strict decoding failed")
            && err.contains("unknown field \"maxPod\""),
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
