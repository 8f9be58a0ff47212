//! The operator commands end to end against a fake-runtime kubelet started in this process:
//! the binary's `get pods` (also `-w`), `describe pod`, `get events`, `get node` over the local
//! socket; the socket's authorization by peer uid (root allowed, uid 65534 refused with 403,
//! and kept out entirely by the socket's mode); a clear error when no kubelet runs; and the
//! completion scripts and man page generated from the CLI definition.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::agent::{Agent, AgentConfig, AgentDeps};
use kubelet::events::LoggingRecorder;
use kubelet::sources::{ManifestOrigin, static_pods_from_manifest};
use kubelet::types::{PodOp, PodSource, PodUpdate};
use rkubelet_cri::fake::FakeRuntime;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

const NODE: &str = "node-a";
const IMAGE: &str = "docker.io/library/busybox:latest";

fn static_pod(name: &str) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: {name}\nspec:\n  containers:\n  - name: {name}-c\n    image: {IMAGE}\n    command: [sleep, \"3600\"]\n    readinessProbe:\n      exec:\n        command: [\"true\"]\n      periodSeconds: 1\n    volumeMounts:\n    - name: data\n      mountPath: /data\n  volumes:\n  - name: data\n    emptyDir: {{}}\n"
    );
    let path = format!("/etc/kubernetes/manifests/{name}.yaml");
    static_pods_from_manifest(
        yaml.as_bytes(),
        NODE,
        &ManifestOrigin::File(Path::new(&path)),
        false,
    )
    .unwrap()
    .remove(0)
}

struct Kubelet {
    agent: Agent,
    socket: PathBuf,
    dir: tempfile::TempDir,
    cancel: CancellationToken,
}

impl Kubelet {
    async fn start() -> Self {
        Self::start_in(tempfile::tempdir().unwrap()).await
    }

    async fn start_in(dir: tempfile::TempDir) -> Self {
        let fake = FakeRuntime::with_images(&[IMAGE]);
        let mut cfg = AgentConfig::for_tests(dir.path(), NODE);
        let socket = kubelet::server::local::socket_path(&cfg.root_dir);
        cfg.local_socket = Some(socket.clone());
        let cancel = CancellationToken::new();
        let agent = Agent::start(
            cfg,
            AgentDeps {
                runtime: Arc::new(fake.clone()),
                images: Arc::new(fake.clone()),
                events: Arc::new(LoggingRecorder),
                api: None,
            },
            cancel.clone(),
        )
        .await
        .unwrap();
        Self {
            agent,
            socket,
            dir,
            cancel,
        }
    }

    async fn set(&self, pods: Vec<Pod>) {
        self.agent
            .source_tx
            .send(PodUpdate::new(PodOp::Set, PodSource::File, pods))
            .await
            .unwrap();
    }

    async fn wait_ready(&self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let ready = self.agent.status.get_pod_status(&uid).is_some_and(|s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            if ready {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "pod never became ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.agent.shutdown().await;
    }
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn rkubelet(args: &[&str]) -> Out {
    rkubelet_as(None, env!("CARGO_BIN_EXE_rkubelet").as_ref(), args).await
}

async fn rkubelet_as(uid: Option<u32>, bin: &Path, args: &[&str]) -> Out {
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args).env_remove("RUST_LOG");
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let out = tokio::process::Command::from(cmd).output().await.unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Each line with its runs of spaces folded to one.
fn fold(text: &str) -> String {
    text.lines()
        .map(|l| {
            let lead = if l.starts_with(' ') { " " } else { "" };
            format!(
                "{lead}{}\n",
                l.split_whitespace().collect::<Vec<_>>().join(" ")
            )
        })
        .collect()
}

fn cells(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_describe_events_and_node_over_the_local_socket() {
    let k = Kubelet::start().await;
    let web = static_pod("web");
    k.set(vec![web.clone()]).await;
    k.wait_ready(&web).await;
    let sock = k.socket.to_str().unwrap().to_owned();

    let out = rkubelet(&["get", "pods", "--socket", &sock]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        cells(lines[0]),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "SOURCE"]
    );
    let row = cells(lines[1]);
    assert_eq!(row[0], "web-node-a");
    assert_eq!(&row[1..4], ["1/1", "Running", "0"]);
    assert_eq!(row[6], "file");
    // `--root-dir` finds the same socket; `-A` adds NAMESPACE; `-o wide` NODE.
    let root = k.dir.path().join("kubelet");
    let out = rkubelet(&[
        "get",
        "pods",
        "-A",
        "-o",
        "wide",
        "--root-dir",
        root.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let row = cells(out.stdout.lines().nth(1).unwrap());
    assert_eq!(
        (row[0], row[1], row[7], row[8]),
        ("default", "web-node-a", "node-a", "file")
    );
    // -o json is the API's list.
    let out = rkubelet(&["get", "pods", "-o", "json", "--socket", &sock]).await;
    let list: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["metadata"]["name"], "web-node-a");
    // Another namespace has none (stderr, exit 0, as kubectl).
    let out = rkubelet(&["get", "pods", "-n", "kube-system", "--socket", &sock]).await;
    assert_eq!(
        (out.code, out.stderr.trim()),
        (0, "No resources found in kube-system namespace.")
    );

    let out = rkubelet(&["describe", "pod", "web-node-a", "--socket", &sock]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let d = &out.stdout;
    // Column widths depend on the longest label; compare with runs of spaces folded.
    let folded = fold(d);
    for want in [
        "Name: web-node-a\nNamespace: default\n",
        "Labels: app=web\n",
        "Status: Running\n",
        "Containers:\n web-c:\n",
        "Image: docker.io/library/busybox:latest\n",
        "State: Running\n Started: ",
        "Ready: True\n Restart Count: 0\n",
        "Readiness: exec [true] delay=0s timeout=1s period=1s #success=1 #failure=3\n",
        "Mounts:\n /data from data (rw)\n",
        "Volumes:\n data:\n Type: EmptyDir (a temporary directory that shares a pod's lifetime)\n",
        "QoS Class: BestEffort\n",
        "Tolerations: :NoExecute op=Exists\n",
        "Kubelet:\n Worker Phase: Syncing\n Step: ",
        " Last Error: <none>\n",
    ] {
        assert!(folded.contains(want), "missing {want:?} in\n{d}");
    }
    let events = d.split("Events:\n").nth(1).expect("an Events table");
    assert!(
        events.lines().any(|l| cells(l).first() == Some(&"Normal")
            && cells(l).get(1) == Some(&"Started")
            && l.contains("kubelet")),
        "{events}"
    );
    let out = rkubelet(&["describe", "pod", "nope", "--socket", &sock]).await;
    assert_eq!(
        (out.code, out.stderr.trim()),
        (
            1,
            "error: Error from server (NotFound): pods \"nope\" not found"
        )
    );

    let out = rkubelet(&["get", "events", "--socket", &sock]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        cells(out.stdout.lines().next().unwrap()),
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    assert!(
        out.stdout
            .lines()
            .any(|l| l.contains("Started") && l.contains("pod/web-node-a")),
        "{}",
        out.stdout
    );

    let out = rkubelet(&["get", "node", "--socket", &sock]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let row = cells(out.stdout.lines().nth(1).unwrap());
    assert_eq!((row[0], row[1]), (NODE, "Ready"));
    for want in [
        " MemoryPressure False KubeletHasSufficientMemory",
        "Capacity:\n",
        "Allocatable:\n",
        " pods: 110\n",
        "Runtime: containerd 1.6.20-fake (RuntimeReady=true, NetworkReady=true)\n",
        "PLEG: healthy\n",
    ] {
        assert!(
            fold(&out.stdout).contains(want),
            "missing {want:?} in\n{}",
            out.stdout
        );
    }
    k.stop().await;
}

/// `get pods -w` prints the table, then a row for each pod that appears or changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_pods_watch_prints_new_and_changed_rows() {
    let k = Kubelet::start().await;
    let web = static_pod("web");
    k.set(vec![web.clone()]).await;
    k.wait_ready(&web).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .args(["get", "pods", "-w", "--socket", k.socket.to_str().unwrap()])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(next(&mut lines).await.starts_with("NAME"));
    assert!(next(&mut lines).await.starts_with("web-node-a"));
    let db = static_pod("db");
    k.set(vec![web.clone(), db.clone()]).await;
    // The new pod's row, as it goes from pending to running.
    let mut seen = Vec::new();
    loop {
        let l = next(&mut lines).await;
        let c: Vec<String> = cells(&l).into_iter().map(str::to_owned).collect();
        assert_eq!(c[0], "db-node-a", "only the new pod's rows: {l}");
        seen.push(c[2].clone());
        if c[1] == "1/1" {
            break;
        }
    }
    assert_eq!(seen.last().map(String::as_str), Some("Running"), "{seen:?}");
    // Removed: its last row once more.
    k.set(vec![web]).await;
    let l = next(&mut lines).await;
    assert!(l.starts_with("db-node-a"), "{l}");
    child.kill().await.unwrap();
    k.stop().await;
}

async fn next(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("a line within 30s")
        .unwrap()
        .expect("output")
}

/// `get pods -w` on a real terminal (tmux): the screen shows the table, then the new pod's
/// row once it is added, as an operator would see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_pods_watch_updates_the_screen_in_tmux() {
    let k = Kubelet::start().await;
    let web = static_pod("web");
    k.set(vec![web.clone()]).await;
    k.wait_ready(&web).await;
    let sock = k.dir.path().join("tmux.sock");
    let cmd = format!(
        "{} get pods -w --socket {}",
        env!("CARGO_BIN_EXE_rkubelet"),
        k.socket.display()
    );
    tmux(
        &sock,
        &[
            "new-session",
            "-d",
            "-s",
            "w",
            "-x",
            "160",
            "-y",
            "40",
            &cmd,
        ],
    );
    let has_row = |screen: &str, name: &str, status: &str| {
        screen.lines().any(|l| {
            let c = cells(l);
            c.first() == Some(&name) && c.get(2) == Some(&status)
        })
    };
    let screen = screen_until(&sock, "the table", |s| has_row(s, "web-node-a", "Running")).await;
    assert!(screen.starts_with("NAME "), "{screen}");
    k.set(vec![web, static_pod("db")]).await;
    screen_until(&sock, "the new pod running", |s| {
        has_row(s, "db-node-a", "Running")
    })
    .await;
    tmux(&sock, &["kill-server"]);
    k.stop().await;
}

fn tmux(sock: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("tmux")
        .arg("-S")
        .arg(sock)
        .args(args)
        .output()
        .expect("tmux must be installed (dev/runtime.sh installs it)");
    assert!(
        out.status.success(),
        "tmux {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Captures the tmux pane until `pred` holds (30 s at most).
async fn screen_until(sock: &Path, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let screen = tmux(sock, &["capture-pane", "-p", "-t", "w"]);
        if pred(&screen) {
            return screen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "screen never showed {what}:\n{screen}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The socket's identity is the peer's uid: root may read, any other uid is refused with
/// 403 even when the file mode would let it connect; with the real mode it cannot connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_root_may_use_the_socket() {
    assert_eq!(
        rustix_uid(),
        0,
        "these tests run as root, as the kubelet and its operator do"
    );
    let k = Kubelet::start().await;
    let sock = k.socket.to_str().unwrap().to_owned();
    // A copy of the binary anyone can run.
    let bin_dir = tempfile::tempdir().unwrap();
    let bin = bin_dir.path().join("rkubelet");
    std::fs::copy(env!("CARGO_BIN_EXE_rkubelet"), &bin).unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

    let root = rkubelet(&["get", "pods", "--socket", &sock]).await;
    assert_eq!(root.code, 0, "{}", root.stderr);

    // As created: uid 65534 cannot even reach the socket.
    let denied = rkubelet_as(Some(65534), &bin, &["get", "pods", "--socket", &sock]).await;
    assert_eq!(denied.code, 1);
    assert!(
        denied
            .stderr
            .contains("(the socket is root-only: run as root)"),
        "{}",
        denied.stderr
    );
    // Opened up by hand: the uid still decides, 403.
    let mut p = k.socket.clone();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    while p.pop() && p.starts_with(k.dir.path()) {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    for args in [
        ["get", "pods", "--socket", &sock],
        ["get", "events", "--socket", &sock],
    ] {
        let out = rkubelet_as(Some(65534), &bin, &args).await;
        assert_eq!(out.code, 1, "{}", out.stdout);
        assert!(
            out.stderr.contains("answered 403")
                && out.stderr.contains(
                    "Forbidden (user=system:rkubelet:uid:65534, verb=get, resource=nodes"
                ),
            "{}",
            out.stderr
        );
    }
    k.stop().await;
}

fn rustix_uid() -> u32 {
    // The owner of a file this process creates is its effective uid.
    let f = tempfile::NamedTempFile::new().unwrap();
    std::os::unix::fs::MetadataExt::uid(&f.as_file().metadata().unwrap())
}

/// Attack: a symlink planted at the socket path (pointing at a file the kubelet would clobber)
/// is neither followed nor removed; the kubelet runs on without the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_symlink_is_left_alone_and_the_kubelet_runs_without_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = kubelet::server::local::socket_path(&dir.path().join("kubelet"));
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    std::fs::set_permissions(
        socket.parent().unwrap(),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, &socket).unwrap();
    let k = Kubelet::start_in(dir).await;
    let web = static_pod("web");
    k.set(vec![web.clone()]).await;
    k.wait_ready(&web).await;
    assert!(
        std::fs::symlink_metadata(&k.socket)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let out = rkubelet(&["get", "pods", "--socket", k.socket.to_str().unwrap()]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("(is rkubelet running?)"),
        "{}",
        out.stderr
    );
    k.stop().await;
}

#[tokio::test]
async fn no_kubelet_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = rkubelet(&["get", "pods", "--root-dir", dir.path().to_str().unwrap()]).await;
    assert_eq!(out.code, 1);
    let want = format!(
        "error: cannot reach the kubelet at {}/rkubelet/rkubelet.sock: ",
        dir.path().display()
    );
    assert!(
        out.stderr.starts_with(&want) && out.stderr.trim_end().ends_with("(is rkubelet running?)"),
        "{}",
        out.stderr
    );
    for args in [
        &["describe", "pod", "x"][..],
        &["get", "node"],
        &["get", "events"],
    ] {
        let mut a = args.to_vec();
        a.extend(["--root-dir", dir.path().to_str().unwrap()]);
        let out = rkubelet(&a).await;
        assert_eq!(out.code, 1, "{args:?}");
        assert!(
            out.stderr.contains("(is rkubelet running?)"),
            "{}",
            out.stderr
        );
    }
    // A bad subcommand line is a usage error, exit 1; `--help` is not an error.
    assert_eq!(rkubelet(&["get", "bananas"]).await.code, 1);
    let help = rkubelet(&["get", "--help"]).await;
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("pods"), "{}", help.stdout);
}

/// Completion scripts and the man page come from the CLI definition: the kubelet's flags and
/// the operator commands.
#[tokio::test]
async fn completion_and_man_page_cover_flags_and_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = rkubelet(&["completion", shell]).await;
        assert_eq!(out.code, 0, "{shell}: {}", out.stderr);
        for want in ["pod-manifest-path", "describe", "all-namespaces"] {
            assert!(out.stdout.contains(want), "{shell} lacks {want}");
        }
    }
    assert_eq!(rkubelet(&["completion", "tcsh"]).await.code, 1);
    let man = rkubelet(&["man"]).await;
    assert_eq!(man.code, 0, "{}", man.stderr);
    assert!(man.stdout.contains(".TH rkubelet"));
    assert!(man.stdout.contains("pod\\-manifest\\-path"));
    assert!(man.stdout.contains("describe"));
}
