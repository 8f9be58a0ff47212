use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::testutil::Tmpfs;
use super::*;

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

const STEPS: [Step; 6] = [
    Step::OpenDir,
    Step::CreateTemp,
    Step::Write,
    Step::SyncFile,
    Step::Rename,
    Step::SyncDir,
];

#[test]
fn replaces_the_file_with_the_exact_mode_and_leaves_no_temporary_file() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("state");
    atomic_write(&path, b"one", WriteOptions::durable(0o600)).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"one");
    atomic_write(&path, b"two", WriteOptions::durable(0o666)).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"two");
    // 0666 survives the umask (022 in tests): the mode is set, not requested.
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        0o666
    );
    assert_eq!(names(d.path()), ["state"]);
    let e = atomic_write(Path::new("/"), b"x", WriteOptions::durable(0o600)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
}

#[test]
fn at_every_step_readers_see_the_old_or_the_new_content() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("state");
    atomic_write(&path, b"old content", WriteOptions::durable(0o600)).unwrap();
    let mut seen = Vec::new();
    atomic_write_with(
        &path,
        b"new content, longer",
        WriteOptions::durable(0o600),
        &mut |step| {
            // A crash right here: what a restart would read.
            seen.push((step, std::fs::read(&path).unwrap()));
            Ok(())
        },
    )
    .unwrap();
    let steps: Vec<Step> = seen.iter().map(|(s, _)| *s).collect();
    assert_eq!(steps, STEPS);
    for (step, content) in &seen {
        let want: &[u8] = if *step == Step::SyncDir {
            b"new content, longer"
        } else {
            b"old content"
        };
        assert_eq!(content, want, "at {step:?}");
    }
}

#[test]
fn a_failure_at_any_step_before_the_rename_keeps_the_old_file_and_removes_the_temporary() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("state");
    for failing in STEPS {
        atomic_write(&path, b"old", WriteOptions::durable(0o600)).unwrap();
        let e = atomic_write_with(&path, b"new", WriteOptions::durable(0o600), &mut |s| {
            if s == failing {
                Err(std::io::Error::from_raw_os_error(libc::EIO))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert!(
            e.to_string().contains(failing.describe()),
            "{failing:?}: {e}"
        );
        let want: &[u8] = if failing == Step::SyncDir {
            b"new"
        } else {
            b"old"
        };
        assert_eq!(std::fs::read(&path).unwrap(), want, "{failing:?}");
        assert_eq!(names(d.path()), ["state"], "{failing:?}");
    }
}

#[test]
fn links_planted_at_the_temporary_or_the_target_are_never_followed() {
    let d = tempfile::tempdir().unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let path = d.path().join("state");
    std::os::unix::fs::symlink(&victim, d.path().join(".state.tmp")).unwrap();
    atomic_write(&path, b"new", WriteOptions::durable(0o600)).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    // A link in the target's place is replaced, not written through.
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    atomic_write(&path, b"newer", WriteOptions::durable(0o600)).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
    // A stale temporary file (a crash mid-write) is replaced.
    std::fs::write(d.path().join(".state.tmp"), "half a fi").unwrap();
    atomic_write(&path, b"newest", WriteOptions::durable(0o600)).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"newest");
    assert_eq!(names(d.path()), ["state", "victim"]);
}

#[test]
fn a_full_disk_keeps_the_old_file_and_gives_its_space_back() {
    let fs = Tmpfs::new("256k");
    let path = fs.path().join("state");
    let old = vec![b'o'; 8 * 1024];
    atomic_write(&path, &old, WriteOptions::durable(0o600)).unwrap();
    fs.fill();
    let new = vec![b'n'; 64 * 1024];
    let e = atomic_write(&path, &new, WriteOptions::durable(0o600)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
    assert!(e.to_string().contains("No space left on device"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), old, "the old file is intact");
    assert_eq!(
        names(fs.path()),
        ["fill", "state"],
        "no temporary file left"
    );
    fs.free();
    atomic_write(&path, &new, WriteOptions::durable(0o600)).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), new);
}
