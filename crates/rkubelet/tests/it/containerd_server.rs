//! The authenticated HTTPS port of the `rkubelet` binary against a real pod on containerd
//! (`RKUBELET_CRI_ENDPOINT`): a self-signed serving certificate in `<root-dir>/pki`, x509
//! client certificates from a test CA (made with `openssl`), container logs (current,
//! previous after a restart, tailLines, timestamps, follow), `/run`, `/checkpoint` (containerd 1.6
//! does not implement it), `/runningpods/`, `/configz`, and `kubectl get --raw`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Kubelet, container, running, tail};

const IMAGE: &str = "docker.io/library/busybox:latest";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A client CA and a certificate for `alice` (O `admins`), and one from another CA.
fn client_pki(dir: &Path) {
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (ca, subj) in [("ca", "/CN=test-client-ca"), ("other-ca", "/CN=other-ca")] {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.crt"),
                "-subj",
                subj,
                "-days",
                "2",
            ],
        );
    }
    for (name, ca, subj) in [
        ("alice", "ca", "/CN=alice/O=admins"),
        ("mallory", "other-ca", "/CN=mallory"),
    ] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                subj,
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                &format!("{ca}.crt"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-extfile",
                "client.ext",
            ],
        );
    }
}

struct Client {
    port: u16,
    cacert: PathBuf,
    cert: Option<(PathBuf, PathBuf)>,
}

impl Client {
    /// `curl` over HTTPS: (status, body).
    fn call(&self, method: &str, path: &str) -> (u16, String) {
        // `--path-as-is`: the request target is sent exactly as written.
        let mut cmd = Command::new("curl");
        cmd.args([
            "-sS",
            "--path-as-is",
            "--max-time",
            "20",
            "-X",
            method,
            "-w",
            "\n%{http_code}",
        ])
        .arg("--cacert")
        .arg(&self.cacert);
        if let Some((c, k)) = &self.cert {
            cmd.arg("--cert").arg(c).arg("--key").arg(k);
        }
        cmd.arg(format!("https://127.0.0.1:{}{path}", self.port));
        let out = cmd.output().expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (
            code.trim().parse().unwrap_or_else(|_| {
                panic!(
                    "curl {method} {path}: {text} {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            }),
            body.to_owned(),
        )
    }
}

/// A plain request to the read-only port, the target sent as written.
fn read_only(port: u16, method: &str, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--path-as-is", "--max-time", "20", "-X", method])
        .args(["-w", "\n%{http_code}"])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

impl Client {
    /// A streamed GET cut off by curl after `secs` seconds: the body received by then.
    fn stream(&self, path: &str, secs: u32) -> String {
        let (c, k) = self.cert.as_ref().expect("a client certificate");
        let out = Command::new("curl")
            .args(["-sS", "-N", "--max-time", &secs.to_string()])
            .arg("--cacert")
            .arg(&self.cacert)
            .arg("--cert")
            .arg(c)
            .arg("--key")
            .arg(k)
            .arg(format!("https://127.0.0.1:{}{path}", self.port))
            .output()
            .expect("curl runs");
        // 28: the operation timed out, which is how a follow ends here.
        assert_eq!(
            out.status.code(),
            Some(28),
            "curl {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_port_serves_logs_run_and_more_with_client_certificates() {
    let mut k = Kubelet::new();
    let pki = k.dir.path().join("client-pki");
    std::fs::create_dir_all(&pki).unwrap();
    client_pki(&pki);
    let cfg_path = k.dir.path().join("config.yaml");
    let cfg = std::fs::read_to_string(&cfg_path).unwrap().replace(
        "authentication:\n",
        &format!(
            "authentication:\n  x509:\n    clientCAFile: {}\n",
            pki.join("ca.crt").display()
        ),
    );
    std::fs::write(&cfg_path, cfg).unwrap();
    k.write_manifest(
        "web.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  restartPolicy: Always\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"echo app-one; echo app-two; exec sleep 3600\"]\n  - name: crash\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"echo crash-one; echo crash-two; sleep 1; exit 3\"]\n  - name: ticker\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done\"]\n"
        ),
    );
    k.start();
    k.wait_pod(
        "web",
        Duration::from_secs(90),
        "app running, crash restarted",
        |p| {
            running(p, "app")
                && container(p, "containerStatuses", "crash")
                    .is_some_and(|c| c["restartCount"].as_i64().unwrap_or(0) >= 1)
        },
    )
    .await;
    let pod = format!("web-{}", common::NODE);
    let serving = k.root().join("pki/kubelet.crt");
    assert!(
        serving.exists(),
        "self-signed serving certificate in <root-dir>/pki"
    );
    let alice = Client {
        port: k.secure_port,
        cacert: serving.clone(),
        cert: Some((pki.join("alice.crt"), pki.join("alice.key"))),
    };
    let nobody = Client {
        port: k.secure_port,
        cacert: serving.clone(),
        cert: None,
    };
    let mallory = Client {
        port: k.secure_port,
        cacert: serving.clone(),
        cert: Some((pki.join("mallory.crt"), pki.join("mallory.key"))),
    };

    assert_eq!(nobody.call("GET", "/pods").0, 401);
    assert_eq!(mallory.call("GET", "/pods").0, 401);
    // Every path needs credentials on this port, health included (as upstream).
    assert_eq!(nobody.call("GET", "/healthz").0, 401);
    assert_eq!(alice.call("GET", "/healthz"), (200, "ok".into()));
    let (code, body) = alice.call("GET", "/pods");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&pod), "{body}");

    let logs = |q: &str| alice.call("GET", &format!("/containerLogs/default/{pod}/app{q}"));
    assert_eq!(logs(""), (200, "app-one\napp-two\n".into()));
    assert_eq!(logs("?tailLines=1"), (200, "app-two\n".into()));
    assert_eq!(logs("?limitBytes=5"), (200, "app-o".into()));
    let (code, ts) = logs("?timestamps=true");
    assert_eq!(code, 200);
    let first = ts.lines().next().unwrap();
    let (stamp, msg) = first.split_once(' ').unwrap();
    assert_eq!(msg, "app-one");
    assert!(
        stamp.len() == 30 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
        "RFC3339NanoFixed timestamp: {first}"
    );
    assert_eq!(logs("?sinceSeconds=3600").1, "app-one\napp-two\n");
    let (code, body) = logs("?previous=true");
    assert_eq!(
        (code, body.as_str()),
        (
            400,
            format!("previous terminated container \"app\" in pod \"{pod}\" not found").as_str()
        )
    );
    let (code, body) = alice.call(
        "GET",
        &format!("/containerLogs/default/{pod}/crash?previous=true"),
    );
    assert_eq!((code, body.as_str()), (200, "crash-one\ncrash-two\n"));
    assert_eq!(alice.call("GET", "/containerLogs/default/nope/app").0, 404);
    // follow streams lines written after the request started (curl stops it after 3 s).
    let before = alice
        .call("GET", &format!("/containerLogs/default/{pod}/ticker"))
        .1;
    let last_before: u64 = before
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("tick-"))
        .and_then(|n| n.parse().ok())
        .expect("ticker logged");
    let followed = alice.stream(
        &format!("/containerLogs/default/{pod}/ticker?follow=true&tailLines=1"),
        3,
    );
    let ticks: Vec<u64> = followed
        .lines()
        .filter_map(|l| l.strip_prefix("tick-")?.parse().ok())
        .collect();
    assert!(
        ticks.len() >= 5 && ticks.windows(2).all(|w| w[1] == w[0] + 1),
        "a followed log streams consecutive new lines: {followed:?}"
    );
    assert!(
        ticks.last().is_some_and(|&t| t >= last_before + 5),
        "lines written after the request arrive while following: {ticks:?} (before: {last_before})"
    );

    let (code, body) = alice.call("POST", &format!("/run/default/{pod}/app?cmd=echo+from+run"));
    assert_eq!((code, body.as_str()), (200, "from run\n"));
    let (code, body) = alice.call("POST", &format!("/run/default/{pod}/app?cmd=false"));
    assert_eq!(code, 500, "{body}");
    // Spellings that once slipped past the debug-handler gate and the read-only port: never
    // executed (the marker file is not created), on neither port.
    for spelling in [
        "//run/default/{pod}/app",
        "/./run/default/{pod}/app",
        "/pods/../run/default/{pod}/app",
        "/%2frun/default/{pod}/app",
        "/run%2fdefault/{pod}/app",
        "/Run/default/{pod}/app",
    ] {
        let path = format!("{}?cmd=touch+/tmp/pwned", spelling.replace("{pod}", &pod));
        let (code, body) = alice.call("POST", &path);
        assert!(
            code == 400 || code == 404,
            "{path} on the HTTPS port: {code} {body}"
        );
        let (code, body) = read_only(k.port, "POST", &path);
        assert!(
            code == 400 || code == 404,
            "{path} on the read-only port: {code} {body}"
        );
    }
    let (code, body) = read_only(k.port, "GET", "//configz");
    assert!(code == 400 || code == 404, "{code} {body}");
    let (code, body) = alice.call("POST", &format!("/run/default/{pod}/app?cmd=ls+/tmp/pwned"));
    assert_eq!(code, 500, "the marker was never created: {body}");

    let (code, body) = alice.call("POST", &format!("/checkpoint/default/{pod}/app"));
    assert_eq!(code, 500, "{body}");
    assert!(
        body.starts_with(&format!("checkpointing of default/{pod}/app failed (")),
        "{body}"
    );

    let (code, body) = alice.call("GET", "/runningpods/");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["name"] == pod.as_str()),
        "{body}"
    );
    let (code, body) = alice.call("GET", "/configz");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kubeletconfig"]["port"], k.secure_port);
    assert_eq!(alice.call("GET", "/no-such-endpoint").0, 404);

    // kubectl talks to the kubelet as to any HTTPS server with a client certificate.
    let out = Command::new("kubectl")
        .arg(format!("--server=https://127.0.0.1:{}", k.secure_port))
        .arg(format!("--certificate-authority={}", serving.display()))
        .arg(format!(
            "--client-certificate={}",
            pki.join("alice.crt").display()
        ))
        .arg(format!("--client-key={}", pki.join("alice.key").display()))
        .args(["get", "--raw", "/pods"])
        .env("KUBECONFIG", "/dev/null")
        .output()
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&pod),
        "kubectl: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Restarting the kubelet reuses the generated serving certificate.
    let before = std::fs::read(&serving).unwrap();
    k.stop();
    k.start();
    let start = Instant::now();
    while alice.call("GET", "/healthz").0 != 200 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "kubelet back up: {}",
            tail(&k.log_text(), 40)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(std::fs::read(&serving).unwrap(), before);
}
