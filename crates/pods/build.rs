//! Build script: tells the tests whether they are built by root. Tests that need root (mounts)
//! carry `#[cfg_attr(not(rkubelet_tests_as_root), ignore = "needs root (mount)")]`, so a run by
//! another user lists them as skipped instead of letting them return early and count as passed.
//! The build and the test run are the same user (a target dir is not shared between users).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(rkubelet_tests_as_root)");
    println!("cargo::rerun-if-changed=build.rs");
    // `id -u`: the build script has no libc binding of its own for one number.
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if root {
        println!("cargo::rustc-cfg=rkubelet_tests_as_root");
    }
}
