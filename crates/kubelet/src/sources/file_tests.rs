use std::fs;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::types::PodExt;

const LONG: Duration = Duration::from_secs(600);
const WAIT: Duration = Duration::from_secs(3);

fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
    )
}

struct Running {
    rx: mpsc::Receiver<PodUpdate>,
    errors: watch::Receiver<BTreeMap<PathBuf, String>>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(source: FileSource) -> Running {
        let (tx, rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let errors = source.errors();
        let task = tokio::spawn(source.run(tx, cancel.clone()));
        Running {
            rx,
            errors,
            cancel,
            task,
        }
    }

    async fn next(&mut self) -> PodUpdate {
        let u = tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("no update in time")
            .expect("source stopped");
        assert_eq!((u.op, u.source), (PodOp::Set, PodSource::File));
        u
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap();
    }
}

fn names(u: &PodUpdate) -> Vec<String> {
    u.pods.iter().map(|p| p.name().to_string()).collect()
}

#[tokio::test]
async fn directory_add_modify_delete() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.yaml"), manifest("a", "nginx:1")).unwrap();
    fs::write(dir.path().join(".hidden.yaml"), manifest("hidden", "x")).unwrap();
    let mut run = Running::start(FileSource::new(dir.path(), "node1", LONG));

    let first = run.next().await;
    assert_eq!(names(&first), ["a-node1"]);
    let uid_a = first.pods[0].uid().to_string();
    assert!(run.errors.borrow().is_empty());

    // Add: picked up by inotify (the period is 10 minutes).
    fs::write(dir.path().join("b.json"), manifest("b", "redis")).unwrap();
    let u = run.next().await;
    assert_eq!(names(&u), ["a-node1", "b-node1"]);

    // Modify: same name, new content, new UID.
    fs::write(dir.path().join("a.yaml"), manifest("a", "nginx:2")).unwrap();
    let u = run.next().await;
    assert_eq!(names(&u), ["a-node1", "b-node1"]);
    assert_ne!(u.pods[0].uid(), uid_a);

    // Delete.
    fs::remove_file(dir.path().join("b.json")).unwrap();
    let u = run.next().await;
    assert_eq!(names(&u), ["a-node1"]);

    // Hidden files never count.
    fs::write(dir.path().join(".other"), manifest("other", "x")).unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(400), run.rx.recv())
            .await
            .is_err()
    );
    run.stop().await;
}

#[tokio::test]
async fn malformed_file_is_skipped_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.yaml"), manifest("a", "nginx")).unwrap();
    let bad = dir.path().join("bad.yaml");
    fs::write(
        &bad,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers:\n  - name: c\n",
    )
    .unwrap();
    fs::write(dir.path().join("garbage.yaml"), "{{{ not yaml").unwrap();
    fs::write(dir.path().join("z.yaml"), manifest("z", "nginx")).unwrap();
    let mut run = Running::start(FileSource::new(dir.path(), "node1", LONG));

    let u = run.next().await;
    assert_eq!(names(&u), ["a-node1", "z-node1"]);
    let errors = run.errors.borrow().clone();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(
        errors[&bad],
        "invalid pod: [spec.containers[0].image: Required value]"
    );
    assert!(errors[&dir.path().join("garbage.yaml")].contains("couldn't parse as pod"));

    // Fixing the file brings its pod in and clears the error.
    fs::write(&bad, manifest("bad", "nginx")).unwrap();
    let u = run.next().await;
    assert_eq!(names(&u), ["a-node1", "bad-node1", "z-node1"]);
    assert_eq!(run.errors.borrow().len(), 1);
    run.stop().await;
}

#[tokio::test]
async fn multi_document_and_single_file_mode() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pods.yaml");
    fs::write(
        &file,
        format!("{}---\n{}", manifest("one", "x"), manifest("two", "y")),
    )
    .unwrap();
    fs::write(dir.path().join("ignored.yaml"), manifest("ignored", "x")).unwrap();
    let mut run = Running::start(FileSource::new(&file, "node1", LONG));
    assert_eq!(names(&run.next().await), ["one-node1", "two-node1"]);

    // Other files in the same directory do not matter; the watched file does.
    fs::write(dir.path().join("other.yaml"), manifest("other", "x")).unwrap();
    fs::write(&file, manifest("three", "z")).unwrap();
    assert_eq!(names(&run.next().await), ["three-node1"]);

    // Replacing the file by rename (as editors do) is seen too.
    let tmp = dir.path().join(".pods.yaml.swp");
    fs::write(&tmp, manifest("four", "z")).unwrap();
    fs::rename(&tmp, &file).unwrap();
    assert_eq!(names(&run.next().await), ["four-node1"]);

    // Deleting the file empties the set at once.
    fs::remove_file(&file).unwrap();
    assert!(run.next().await.pods.is_empty());
    run.stop().await;
}

#[tokio::test]
async fn periodic_reread_without_inotify() {
    let dir = tempfile::tempdir().unwrap();
    let source =
        FileSource::new(dir.path(), "node1", Duration::from_millis(200)).with_inotify(false);
    let mut run = Running::start(source);
    // An empty directory still yields one (empty) update so the source counts as seen.
    assert!(run.next().await.pods.is_empty());
    fs::write(dir.path().join("a.yaml"), manifest("a", "nginx")).unwrap();
    assert_eq!(names(&run.next().await), ["a-node1"]);
    run.stop().await;
}

#[tokio::test]
async fn missing_directory_is_polled_until_it_appears() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("manifests");
    let mut run = Running::start(FileSource::new(&dir, "node1", Duration::from_millis(200)));
    assert!(run.next().await.pods.is_empty());
    assert_eq!(
        run.errors.borrow().get(&dir).map(String::as_str),
        Some("path does not exist, ignoring")
    );
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("a.yaml"), manifest("a", "nginx")).unwrap();
    assert_eq!(names(&run.next().await), ["a-node1"]);
    assert!(run.errors.borrow().is_empty());

    // Once watched, removing the whole directory empties the set.
    fs::remove_dir_all(&dir).unwrap();
    assert!(run.next().await.pods.is_empty());
    run.stop().await;
}

#[test]
fn read_manifests_reports_nested_directories() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    fs::write(dir.path().join("a.yaml"), manifest("a", "nginx")).unwrap();
    let snap = read_manifests(dir.path(), "node1");
    assert_eq!(snap.files.len(), 1);
    assert_eq!(snap.files[&dir.path().join("a.yaml")].len(), 1);
    assert_eq!(
        snap.errors[&dir.path().join("sub")],
        "provided manifest path is a directory, not recursing into manifest path"
    );
    assert!(snap.invalid.is_empty());
}

#[tokio::test]
async fn modify_yields_remove_then_add_downstream() {
    use crate::config_merge::PodConfigMerger;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("web.yaml");
    fs::write(&file, manifest("web", "nginx:1")).unwrap();
    let mut run = Running::start(FileSource::new(dir.path(), "node1", LONG));
    let mut merger = PodConfigMerger::new();

    let first = merger.merge(run.next().await);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].op, PodOp::Add);
    let old_uid = first[0].pods[0].uid().to_string();

    fs::write(&file, manifest("web", "nginx:2")).unwrap();
    let out = merger.merge(run.next().await);
    let ops: Vec<PodOp> = out.iter().map(|u| u.op).collect();
    assert_eq!(ops, [PodOp::Remove, PodOp::Add]);
    assert_eq!(out[0].pods[0].uid(), old_uid);
    assert_ne!(out[1].pods[0].uid(), old_uid);
    assert_eq!(out[1].pods[0].name(), "web-node1");
    run.stop().await;
}

#[tokio::test]
async fn broken_edit_keeps_pod_until_periodic_relist() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.yaml");
    fs::write(&a, manifest("a", "nginx")).unwrap();
    fs::write(dir.path().join("b.yaml"), manifest("b", "nginx")).unwrap();
    let mut run = Running::start(FileSource::new(dir.path(), "node1", LONG));
    assert_eq!(names(&run.next().await), ["a-node1", "b-node1"]);

    // A half-written file on an inotify event: error recorded, pod kept, nothing sent.
    fs::write(
        &a,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n",
    )
    .unwrap();
    let mut errors = run.errors.clone();
    tokio::time::timeout(WAIT, errors.wait_for(|e| e.contains_key(&a)))
        .await
        .unwrap()
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), run.rx.recv())
            .await
            .is_err()
    );
    // Completing the write changes nothing downstream (same content as before).
    fs::write(&a, manifest("a", "nginx")).unwrap();
    tokio::time::timeout(WAIT, errors.wait_for(BTreeMap::is_empty))
        .await
        .unwrap()
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), run.rx.recv())
            .await
            .is_err()
    );
    run.stop().await;
}

#[tokio::test]
async fn broken_file_is_dropped_by_the_periodic_relist() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.yaml");
    fs::write(&a, manifest("a", "nginx")).unwrap();
    let source =
        FileSource::new(dir.path(), "node1", Duration::from_millis(300)).with_inotify(false);
    let mut run = Running::start(source);
    assert_eq!(names(&run.next().await), ["a-node1"]);
    fs::write(&a, "not: [a pod").unwrap();
    assert!(run.next().await.pods.is_empty());
    assert!(run.errors.borrow().contains_key(&a));
    run.stop().await;
}

#[test]
fn unchanged_manifests_are_not_decoded_again() {
    use crate::types::PodExt;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    fs::write(&a, manifest("a", "nginx:1")).unwrap();
    fs::write(&b, manifest("b", "redis")).unwrap();
    let mut reader = ManifestReader::new("node1");

    let first = reader.read(dir.path());
    assert_eq!(first.decoded, 2);
    let again = reader.read(dir.path());
    assert_eq!(again.decoded, 0, "nothing changed, nothing decoded");
    assert!(Arc::ptr_eq(&first.files[&a], &again.files[&a]));
    assert_eq!(again.files[&b][0].uid(), first.files[&b][0].uid());

    // An edit that keeps the size and puts the time back is seen all the same: the bytes are
    // compared, not the file's metadata.
    let when = fs::metadata(&a).unwrap().modified().unwrap();
    fs::write(&a, manifest("a", "nginx:2")).unwrap();
    fs::File::options()
        .write(true)
        .open(&a)
        .unwrap()
        .set_modified(when)
        .unwrap();
    let edited = reader.read(dir.path());
    assert_eq!(edited.decoded, 1);
    assert_ne!(edited.files[&a][0].uid(), first.files[&a][0].uid());
    let image = |s: &ManifestSnapshot| {
        s.files[&a][0].spec.as_ref().unwrap().containers[0]
            .image
            .clone()
    };
    assert_eq!(image(&edited).as_deref(), Some("nginx:2"));
    assert!(Arc::ptr_eq(&edited.files[&b], &first.files[&b]));

    // The same bytes under another name are another pod: its UID hashes the path.
    let c = dir.path().join("c.yaml");
    fs::rename(&b, &c).unwrap();
    let moved = reader.read(dir.path());
    assert_eq!(moved.decoded, 1);
    assert_ne!(moved.files[&c][0].uid(), first.files[&b][0].uid());
    let fresh = read_manifests(dir.path(), "node1");
    assert_eq!(
        fresh.files[&c][..],
        moved.files[&c][..],
        "what a fresh read decodes"
    );

    // A bad manifest is decoded (and reported) at every read; once fixed, it is decoded again.
    fs::write(&a, "kind: Pod\nmetadata: [").unwrap();
    for _ in 0..2 {
        let bad = reader.read(dir.path());
        assert_eq!(bad.decoded, 1);
        assert!(bad.invalid.contains(&a), "{:?}", bad.errors);
    }
    fs::write(&a, manifest("a", "nginx:2")).unwrap();
    let fixed = reader.read(dir.path());
    assert_eq!(fixed.decoded, 1);
    assert_eq!(fixed.files[&a][0].uid(), edited.files[&a][0].uid());
}

#[test]
fn special_files_are_refused_without_waiting_on_them() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let socket = dir.path().join("socket.yaml");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    fs::write(dir.path().join("a.yaml"), manifest("a", "nginx")).unwrap();
    // A FIFO with no writer would block a plain open for ever.
    let snap = read_manifests(dir.path(), "node1");
    assert_eq!(snap.files.len(), 1);
    for special in [&fifo, &socket] {
        assert_eq!(snap.errors[special], "path is not a directory or file");
    }
}

#[test]
fn a_manifest_over_the_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    let mut text = manifest("big", "nginx");
    text.push_str(&format!("# {}\n", "x".repeat(MAX_MANIFEST_BYTES)));
    fs::write(&big, text).unwrap();
    let snap = read_manifests(dir.path(), "node1");
    assert!(snap.files.is_empty());
    assert!(snap.invalid.contains(&big), "{:?}", snap.errors);
}

/// New bytes that decode to the pods already sent (a comment added) send nothing; the next
/// real change is sent, whole.
#[tokio::test]
async fn an_edit_that_keeps_the_pods_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let source =
        FileSource::new(dir.path(), "node1", Duration::from_millis(100)).with_inotify(false);
    fs::write(dir.path().join("a.yaml"), manifest("a", "nginx")).unwrap();
    fs::write(dir.path().join("b.yaml"), manifest("b", "nginx")).unwrap();
    let mut run = Running::start(source);
    assert_eq!(names(&run.next().await), ["a-node1", "b-node1"]);
    let commented = format!("# the same pod\n{}", manifest("a", "nginx"));
    fs::write(dir.path().join("a.yaml"), commented).unwrap();
    // Several periods pass: nothing is sent for an edit that changes no pod.
    let quiet = tokio::time::timeout(Duration::from_millis(500), run.rx.recv()).await;
    assert!(quiet.is_err(), "an update for equal pods: {quiet:?}");
    fs::write(dir.path().join("b.yaml"), manifest("b", "busybox")).unwrap();
    let u = run.next().await;
    assert_eq!(names(&u), ["a-node1", "b-node1"]);
    let image = |u: &PodUpdate, i: usize| {
        u.pods[i].spec.as_ref().unwrap().containers[0]
            .image
            .clone()
            .unwrap()
    };
    assert_eq!(
        (image(&u, 0), image(&u, 1)),
        ("nginx".into(), "busybox".into())
    );
    run.stop().await;
}
