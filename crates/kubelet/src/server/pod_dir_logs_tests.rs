//! Tests of `logs::pod_dir` (finding a pod's log files without following links) read through
//! the server's bounded log reader, as `/containerLogs` and `rkubelet logs` do.

use std::os::unix::fs::symlink;
use std::path::Path;

use crate::logs::pod_dir::*;
use crate::server::logs::{LogOptions, read_logs_blocking};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn q(ns: &str, pod: &str, container: Option<&str>, previous: bool) -> PodLogQuery {
    PodLogQuery {
        namespace: ns.into(),
        pod: pod.into(),
        container: container.map(Into::into),
        previous,
        node_name: Some("node1".into()),
    }
}

fn line(msg: &str) -> String {
    format!("2024-01-01T00:00:00.000000000Z stdout F {msg}\n")
}

/// Reads what `find_pod_log` found, through the reader.
fn read(log: &PodLog) -> String {
    let mut out = Vec::new();
    read_logs_blocking(
        &log.reader_path(),
        &LogOptions::default(),
        &mut out,
        &mut || false,
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn finds_the_current_and_previous_log_of_the_only_container() {
    let dir = tempfile::tempdir().unwrap();
    let pod = dir.path().join("default_web_uid1/app");
    write(&pod.join("0.log"), &line("first"));
    write(&pod.join("1.log.20240101-000000"), &line("rotated"));
    write(&pod.join("1.log"), &line("second"));
    write(&pod.join("2.log"), &line("third"));
    let log = find_pod_log(dir.path(), &q("default", "web", None, false)).unwrap();
    assert_eq!((log.container.as_str(), log.restart), ("app", 2));
    assert_eq!(log.uid, "uid1");
    assert_eq!(log.display_path(), pod.join("2.log"));
    assert_eq!(read(&log), "third\n");
    let prev = find_pod_log(dir.path(), &q("default", "web", None, true)).unwrap();
    assert_eq!(prev.restart, 1);
    assert_eq!(read(&prev), "rotated\nsecond\n");
}

#[test]
fn no_previous_log_is_kubelets_error() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("default_web_uid1/app/0.log"), &line("x"));
    let err = find_pod_log(dir.path(), &q("default", "web", None, true)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "previous terminated container \"app\" in pod \"web\" not found"
    );
}

#[test]
fn several_containers_need_a_name_as_kubectl_says() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("default_web_uid1/b/0.log"), &line("b"));
    write(&dir.path().join("default_web_uid1/a/0.log"), &line("a"));
    let err = find_pod_log(dir.path(), &q("default", "web", None, false)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a container name must be specified for pod web, choose one of: [a b]"
    );
    let log = find_pod_log(dir.path(), &q("default", "web", Some("b"), false)).unwrap();
    assert_eq!(read(&log), "b\n");
    let err = find_pod_log(dir.path(), &q("default", "web", Some("c"), false)).unwrap_err();
    assert_eq!(err.to_string(), "container c is not valid for pod web");
}

#[test]
fn unknown_pod_and_namespace_are_not_found() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("default_web_uid1/app/0.log"), &line("x"));
    for (ns, pod) in [
        ("default", "other"),
        ("kube-system", "web"),
        ("default", "we"),
    ] {
        let err = find_pod_log(dir.path(), &q(ns, pod, None, false)).unwrap_err();
        assert!(
            matches!(err, PodLogError::PodNotFound { .. }),
            "{ns}/{pod}: {err}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("pods \"{pod}\" not found in namespace \"{ns}\""))
        );
    }
}

#[test]
fn the_newest_uid_directory_wins() {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("default_web_zzz-old/app/0.log"),
        &line("old"),
    );
    write(
        &dir.path().join("default_web_aaa-new/app/0.log"),
        &line("new"),
    );
    let old = std::fs::File::open(dir.path().join("default_web_zzz-old")).unwrap();
    old.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
    let log = find_pod_log(dir.path(), &q("default", "web", None, false)).unwrap();
    assert_eq!(log.uid, "aaa-new");
    assert_eq!(read(&log), "new\n");
}

#[test]
fn a_static_pod_is_found_by_its_manifest_name_and_its_full_name() {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("kube-system_etcd-node1_abc/etcd/0.log"),
        &line("etcd"),
    );
    for name in ["etcd", "etcd-node1"] {
        let log = find_pod_log(dir.path(), &q("kube-system", name, None, false)).unwrap();
        assert_eq!(log.pod, "etcd-node1");
        assert_eq!(read(&log), "etcd\n");
    }
    let mut other_node = q("kube-system", "etcd", None, false);
    other_node.node_name = Some("node2".into());
    assert!(find_pod_log(dir.path(), &other_node).is_err());
}

#[test]
fn path_characters_in_names_are_rejected_before_any_lookup() {
    let dir = tempfile::tempdir().unwrap();
    for (ns, pod, c) in [
        ("..", "web", None),
        ("default", "../etc", None),
        ("default", "a/b", None),
        ("default", "", None),
        ("default", "web", Some("..")),
        ("default", "web", Some("x/../../y")),
        ("default", "web_x", None),
    ] {
        let err = find_pod_log(dir.path(), &q(ns, pod, c, false)).unwrap_err();
        assert!(
            matches!(err, PodLogError::BadName { .. }),
            "{ns} {pod} {c:?}: {err}"
        );
    }
    let err = check_name("pod name", "../x").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid pod name \"../x\": must not contain '/'"
    );
}

#[test]
fn attack_a_symlinked_pod_or_container_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    write(&secret.join("app/0.log"), &line("secret"));
    let pods = dir.path().join("pods");
    std::fs::create_dir(&pods).unwrap();
    symlink(&secret, pods.join("default_web_uid1")).unwrap();
    let err = find_pod_log(&pods, &q("default", "web", None, false)).unwrap_err();
    assert!(matches!(err, PodLogError::Symlink(_)), "{err}");
    assert!(
        err.to_string().contains("refusing to follow the symlink"),
        "{err}"
    );

    std::fs::create_dir(pods.join("default_db_uid2")).unwrap();
    symlink(secret.join("app"), pods.join("default_db_uid2/app")).unwrap();
    let err = find_pod_log(&pods, &q("default", "db", None, false)).unwrap_err();
    assert!(matches!(err, PodLogError::Symlink(_)), "{err}");
}

#[test]
fn attack_a_symlinked_log_file_is_refused_here_and_by_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret.log");
    write(&secret, &line("secret"));
    let c = dir.path().join("pods/default_web_uid1/app");
    std::fs::create_dir_all(&c).unwrap();
    symlink(&secret, c.join("0.log")).unwrap();
    let err =
        find_pod_log(&dir.path().join("pods"), &q("default", "web", None, false)).unwrap_err();
    assert!(matches!(err, PodLogError::Symlink(_)), "{err}");
    // Swapped in after the check: the reader does not follow it either.
    std::fs::remove_file(c.join("0.log")).unwrap();
    write(&c.join("0.log"), &line("ok"));
    let log = find_pod_log(&dir.path().join("pods"), &q("default", "web", None, false)).unwrap();
    std::fs::remove_file(c.join("0.log")).unwrap();
    symlink(&secret, c.join("0.log")).unwrap();
    let mut out = Vec::new();
    let err = read_logs_blocking(
        &log.reader_path(),
        &LogOptions::default(),
        &mut out,
        &mut || false,
    )
    .unwrap_err();
    assert!(out.is_empty());
    assert!(
        log.describe(&err.to_string())
            .contains(&c.join("0.log").display().to_string())
    );
}

#[test]
fn attack_renaming_the_directory_after_the_lookup_does_not_redirect_the_read() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods");
    write(&pods.join("default_web_uid1/app/0.log"), &line("real"));
    write(&dir.path().join("secret/app/0.log"), &line("secret"));
    let log = find_pod_log(&pods, &q("default", "web", None, false)).unwrap();
    std::fs::rename(pods.join("default_web_uid1"), dir.path().join("moved")).unwrap();
    symlink(dir.path().join("secret"), pods.join("default_web_uid1")).unwrap();
    assert_eq!(read(&log), "real\n");
}
