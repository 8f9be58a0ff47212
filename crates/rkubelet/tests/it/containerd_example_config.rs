//! The shipped `examples/kubelet-config.yaml` with the certificates `dev/pki.sh` makes, as
//! `dev/run.sh` runs them (paths and ports moved to this test's own): an anonymous request to
//! the HTTPS port gets 401 on `/run`, `/exec` and `/pods`, while the dev CA's client
//! certificate runs a command in a real container on containerd. A certificate from any other
//! CA is refused too.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Kubelet, running};

const IMAGE: &str = "docker.io/library/busybox:latest";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `curl` over HTTPS, verifying the serving certificate against `cacert`: (status, body).
fn curl(
    port: u16,
    cacert: &Path,
    cert: Option<(&Path, &Path)>,
    method: &str,
    path: &str,
) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "20",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ])
    .arg("--cacert")
    .arg(cacert);
    if let Some((c, k)) = cert {
        cmd.arg("--cert").arg(c).arg("--key").arg(k);
    }
    cmd.arg(format!("https://127.0.0.1:{port}{path}"));
    let out = cmd.output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code = code.trim().parse().unwrap_or_else(|_| {
        panic!(
            "curl {method} {path}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, body.to_owned())
}

/// The example config with `/tmp/rkubelet-dev` moved to `dir` and the ports and static pod
/// path moved to this kubelet's; every rewrite must apply, so a change to the example that
/// this test no longer understands fails here.
fn example_config(k: &Kubelet, dir: &Path) -> String {
    let text = std::fs::read_to_string(repo().join("examples/kubelet-config.yaml")).unwrap();
    assert!(
        text.contains("/tmp/rkubelet-dev/pki/"),
        "the example names the dev pki"
    );
    let text = text.replace("/tmp/rkubelet-dev", &dir.display().to_string());
    let mut out = String::new();
    let mut replaced = 0;
    for line in text.lines() {
        let new = match line.split_once(':').map(|(k, _)| k) {
            Some("port") => format!("port: {}", k.secure_port),
            Some("readOnlyPort") => format!("readOnlyPort: {}", k.port),
            Some("healthzPort") => format!("healthzPort: {}", k.healthz_port),
            Some("staticPodPath") => format!("staticPodPath: {}", k.manifests().display()),
            _ => {
                out.push_str(line);
                out.push('\n');
                continue;
            }
        };
        replaced += 1;
        out.push_str(&new);
        out.push('\n');
    }
    assert_eq!(
        replaced, 4,
        "port, readOnlyPort, healthzPort, staticPodPath:\n{text}"
    );
    out.push_str(&format!("cgroupRoot: {}\n", k.cgroup_root));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_config_admits_only_the_dev_ca_client_certificate() {
    let mut k = Kubelet::new();
    let dev = k.dir.path().join("dev");
    std::fs::create_dir_all(dev.join("pod-logs")).unwrap();
    let pki = dev.join("pki");
    let status = Command::new(repo().join("dev/pki.sh"))
        .arg(&pki)
        .status()
        .expect("dev/pki.sh runs");
    assert!(status.success(), "dev/pki.sh {}", pki.display());
    for key in ["ca.key", "kubelet.key", "admin.key"] {
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(pki.join(key)).unwrap().permissions(),
        );
        assert_eq!(
            mode & 0o077,
            0,
            "{key} is readable by other users: {mode:o}"
        );
    }
    std::fs::write(k.dir.path().join("config.yaml"), example_config(&k, &dev)).unwrap();
    k.write_manifest(
        "web.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n"
        ),
    );
    k.start();
    k.wait_pod("web", Duration::from_secs(90), "app running", |p| {
        running(p, "app")
    })
    .await;
    let pod = format!("web-{}", common::NODE);
    let ca = pki.join("ca.crt");
    let admin = Some((pki.join("admin.crt"), pki.join("admin.key")));
    let admin = admin.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
    let run = format!("/run/default/{pod}/app?cmd=echo+from+run");
    let exec = format!("/exec/default/{pod}/app?command=id&output=1");

    // Anonymous: 401 everywhere, nothing runs.
    for (method, path) in [
        ("POST", run.as_str()),
        ("POST", exec.as_str()),
        ("GET", "/pods"),
    ] {
        let (code, body) = curl(k.secure_port, &ca, None, method, path);
        assert_eq!(code, 401, "anonymous {method} {path}: {body}");
    }
    // A client certificate from another CA is no better.
    let other = k.dir.path().join("other-pki");
    assert!(
        Command::new(repo().join("dev/pki.sh"))
            .arg(&other)
            .status()
            .unwrap()
            .success()
    );
    let stranger = Some((other.join("admin.crt"), other.join("admin.key")));
    let stranger = stranger.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
    assert_eq!(curl(k.secure_port, &ca, stranger, "POST", &run).0, 401);

    // The dev CA's certificate holder gets in (the serving certificate verifies for
    // 127.0.0.1 against the same CA).
    let (code, body) = curl(k.secure_port, &ca, admin, "GET", "/pods");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&pod), "{body}");
    assert_eq!(
        curl(k.secure_port, &ca, admin, "POST", &run),
        (200, "from run\n".to_owned())
    );
    // Authenticated and authorized: /exec reaches the handler (upstream's error for a
    // request without upgrade headers).
    assert_eq!(
        curl(k.secure_port, &ca, admin, "POST", &exec),
        (500, "Upgrade request required\n".to_owned())
    );
    k.stop();
}
