//! [`super::write_in_place`]: the pod's `/etc/hosts` keeps its inode across writes (what a
//! running container holds is what is measured) and nothing planted at its name is followed or
//! blocks the kubelet.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::write_in_place;

fn pod_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pods/uid-1/etc-hosts");
    (dir, path)
}

/// CVE-2020-8557: a container started first holds the file (its bind mount is an open file,
/// here a read-write fd); a second container's start writes the file again. The first
/// container still has the file at the pod's path: it sees the new content, and what it writes
/// is counted by the stats' `du` of that path.
#[test]
fn a_second_write_keeps_the_inode_a_running_container_holds_and_its_writes_count() {
    let (_d, path) = pod_dir();
    write_in_place(&path, b"127.0.0.1\tlocalhost\n10.0.0.1\tweb\n").unwrap();
    let ino = std::fs::metadata(&path).unwrap().ino();
    let mut held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();

    write_in_place(&path, b"127.0.0.1\tlocalhost\n10.0.0.2\tweb\n").unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.ino(), ino, "written in place, not replaced");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
    let mut seen = String::new();
    held.seek(SeekFrom::Start(0)).unwrap();
    held.read_to_string(&mut seen).unwrap();
    assert_eq!(
        seen, "127.0.0.1\tlocalhost\n10.0.0.2\tweb\n",
        "the held fd sees it"
    );

    // The running container fills its /etc/hosts: the pod's file (what the stats measure)
    // grows with it.
    held.seek(SeekFrom::End(0)).unwrap();
    held.write_all(&vec![b'#'; 4 << 20]).unwrap();
    held.sync_all().unwrap();
    let usage = crate::hostfs::du(&path).unwrap();
    assert!(usage.bytes >= 4 << 20, "counted: {usage:?}");
    assert_eq!(usage.inodes, 1);

    // A shorter content cuts the file to it (as upstream's truncating write), still in place.
    write_in_place(&path, b"short\n").unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "short\n");
}

/// Nothing at the file's name is followed: a link to a host file is replaced by a regular file
/// and its target is untouched.
#[test]
fn a_link_in_place_of_the_file_is_never_followed() {
    let (d, path) = pod_dir();
    let victim = d.path().join("host-file");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    write_in_place(&path, b"hosts\n").unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_file(), "{meta:?}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "hosts\n");
    // A dangling link too.
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(d.path().join("nowhere"), &path).unwrap();
    write_in_place(&path, b"hosts\n").unwrap();
    assert!(!d.path().join("nowhere").exists());
    assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
}

/// A FIFO (with or without a reader) or a directory in the file's place neither blocks the
/// kubelet nor is written through: it is replaced by a regular file.
#[test]
fn a_fifo_or_directory_in_place_of_the_file_never_blocks() {
    let (_d, path) = pod_dir();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
    let start = Instant::now();
    write_in_place(&path, b"hosts\n").unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "hosts\n");

    // A FIFO someone holds open for reading (opening it for writing would succeed at once):
    // not written to either.
    std::fs::remove_file(&path).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
    let reader = rustix::fs::open(
        &path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    write_in_place(&path, b"hosts\n").unwrap();
    drop(reader);
    assert!(std::fs::symlink_metadata(&path).unwrap().is_file());

    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir_all(path.join("sub")).unwrap();
    write_in_place(&path, b"hosts\n").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "hosts\n");
}
