use std::os::unix::fs::{PermissionsExt, symlink};

use super::*;

fn payload(items: &[(&str, &str)]) -> BTreeMap<String, FileProjection> {
    items
        .iter()
        .map(|(k, v)| {
            (
                (*k).to_owned(),
                FileProjection {
                    data: v.as_bytes().to_vec(),
                    mode: 0o644,
                },
            )
        })
        .collect()
}

/// A directory beside the volume that no write may touch: a file and a nested file.
fn canary(base: &Path) -> PathBuf {
    let c = base.join("canary");
    std::fs::create_dir_all(c.join("sub")).unwrap();
    std::fs::write(c.join("keep"), "precious").unwrap();
    std::fs::write(c.join("sub/deep"), "deep").unwrap();
    // Names the payloads use, so a write through a link would show.
    std::fs::write(c.join("labels"), "host-labels").unwrap();
    c
}

fn assert_canary_intact(c: &Path) {
    let mut names: Vec<_> = std::fs::read_dir(c)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["keep", "labels", "sub"], "canary entries changed");
    assert_eq!(std::fs::read_to_string(c.join("keep")).unwrap(), "precious");
    assert_eq!(std::fs::read_to_string(c.join("sub/deep")).unwrap(), "deep");
    assert_eq!(
        std::fs::read_to_string(c.join("labels")).unwrap(),
        "host-labels"
    );
    let mode = std::fs::metadata(c.join("keep"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o644, "canary mode changed");
}

/// The volume holds exactly `items`, through a trusted `..data` and correct links.
fn assert_volume(vol: &Path, items: &[(&str, &str)]) {
    for (k, v) in items {
        assert_eq!(std::fs::read_to_string(vol.join(k)).unwrap(), *v, "{k}");
    }
    let root = open_dir_at(CWD, vol).unwrap();
    let ts = trusted_data_dir(root.as_fd()).expect("..data trusted after the write");
    let top: BTreeSet<&str> = items
        .iter()
        .filter_map(|(k, _)| k.split('/').next())
        .collect();
    assert!(layout_is_ours(root.as_fd(), &ts, &top), "layout of {vol:?}");
    let p = payload(items);
    let files = p.iter().map(|(k, v)| (k.clone(), v)).collect();
    assert!(same_payload(root.as_fd(), &ts, &files));
}

fn data_dir(vol: &Path) -> PathBuf {
    vol.join(std::fs::read_link(vol.join(DATA_DIR)).unwrap())
}

fn relink(link: &Path, target: &Path) {
    let _ = std::fs::remove_file(link);
    let _ = std::fs::remove_dir_all(link);
    symlink(target, link).unwrap();
}

const V1: &[(&str, &str)] = &[("labels", "a=\"1\""), ("sub/x", "x")];
const V2: &[(&str, &str)] = &[("labels", "a=\"2\""), ("sub/x", "y")];

#[test]
fn swaps_payloads_atomically_and_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    assert!(write_payload(t, &payload(V1)).unwrap());
    assert_volume(t, V1);
    assert!(
        std::fs::symlink_metadata(t.join("labels"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Unchanged payload: nothing written.
    assert!(!write_payload(t, &payload(V1)).unwrap());
    // New payload: `labels` changes, `sub` disappears, old data dir removed.
    let old = std::fs::read_link(t.join(DATA_DIR)).unwrap();
    assert!(write_payload(t, &payload(&[("labels", "a=\"2\"")])).unwrap());
    assert_volume(t, &[("labels", "a=\"2\"")]);
    assert!(std::fs::symlink_metadata(t.join("sub")).is_err());
    assert!(std::fs::symlink_metadata(t.join(old)).is_err());
}

#[test]
fn readers_never_see_a_mix() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().to_path_buf();
    write_payload(&t, &payload(&[("a", "0"), ("b", "0")])).unwrap();
    let reader_dir = t.clone();
    let reader = std::thread::spawn(move || {
        for _ in 0..2000 {
            // Both files through the same `..data` resolution: read the link once.
            let Ok(data) = std::fs::read_link(reader_dir.join(DATA_DIR)) else {
                continue;
            };
            let base = reader_dir.join(data);
            let (Ok(a), Ok(b)) = (
                std::fs::read_to_string(base.join("a")),
                std::fs::read_to_string(base.join("b")),
            ) else {
                continue;
            };
            assert_eq!(a, b, "mixed payload seen");
        }
    });
    for i in 1..200 {
        let v = i.to_string();
        write_payload(&t, &payload(&[("a", &v), ("b", &v)])).unwrap();
    }
    reader.join().unwrap();
}

#[test]
fn rejects_bad_paths_and_cleans_good_ones() {
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(256);
    for bad in [
        "",
        "/abs",
        "..x",
        "a/../b",
        "..",
        "./..",
        ".",
        long.as_str(),
    ] {
        assert!(
            write_payload(dir.path(), &payload(&[(bad, "x")])).is_err(),
            "{bad:?}"
        );
    }
    assert!(write_payload(dir.path(), &payload(&[("a", "1"), ("a/b", "2")])).is_err());
    // `./a//b/` is `a/b`.
    write_payload(dir.path(), &payload(&[("./a//b/", "x")])).unwrap();
    assert_volume(dir.path(), &[("a/b", "x")]);
    assert!(is_timestamp_name(b"..2026_11_26_02_33_21.123456789"));
    assert!(is_timestamp_name(b"..2016_02_01_15_04_05.12345678"));
    for bad in [
        "..data",
        "..data_tmp",
        "../canary",
        "..2026_11_26_02_33_21.",
        "..2026_11_26_02_33_21.1/x",
        "x2026_11_26_02_33_21.1",
        "..2026-11-26_02_33_21.1",
    ] {
        assert!(!is_timestamp_name(bad.as_bytes()), "{bad}");
    }
}

#[test]
fn modes_are_final_and_never_special() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    let mut p = payload(&[
        ("default", "d"),
        ("dir/private", "p"),
        ("suid", "s"),
        ("sticky", "t"),
    ]);
    p.get_mut("dir/private").unwrap().mode = 0o600;
    p.get_mut("suid").unwrap().mode = 0o4755;
    p.get_mut("sticky").unwrap().mode = 0o3777;
    write_payload(t, &p).unwrap();
    let mode = |rel: &str| {
        std::fs::metadata(data_dir(t).join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("default"), 0o644);
    assert_eq!(mode("dir/private"), 0o600);
    assert_eq!(mode("suid"), 0o755);
    assert_eq!(mode("sticky"), 0o777);
    assert_eq!(mode("dir"), 0o755);
    assert_eq!(mode(""), 0o755);
    assert_eq!(permission_bits(0o7777), 0o777);
}

/// Runs `tamper` on a volume written with V1, then writes `next`; the canary must be intact
/// and the volume must hold `next`.
fn tamper_case(name: &str, next: &[(&str, &str)], tamper: impl FnOnce(&Path, &Path)) {
    let base = tempfile::tempdir().unwrap();
    let vol = base.path().join("vol");
    let c = canary(base.path());
    write_payload(&vol, &payload(V1)).unwrap();
    tamper(&vol, &c);
    let changed = write_payload(&vol, &payload(next));
    assert_canary_intact(&c);
    assert!(changed.unwrap(), "{name}: the repair is a change");
    assert_volume(&vol, next);
    // And stays repaired.
    assert!(!write_payload(&vol, &payload(next)).unwrap(), "{name}");
    assert_canary_intact(&c);
}

#[test]
fn data_link_to_an_absolute_host_dir_is_replaced_not_followed() {
    for next in [V1, V2] {
        tamper_case("absolute ..data", next, |vol, c| {
            relink(&vol.join(DATA_DIR), c)
        });
    }
}

#[test]
fn data_link_to_a_relative_outside_dir_is_replaced_not_followed() {
    for next in [V1, V2] {
        tamper_case("relative ..data", next, |vol, _| {
            relink(&vol.join(DATA_DIR), Path::new("../canary"));
        });
    }
}

#[test]
fn data_link_to_a_timestamp_shaped_link_is_not_trusted() {
    // `..data` -> `..<ts>` which is itself a link to the canary.
    for next in [V1, V2] {
        tamper_case("timestamp dir replaced by a link", next, |vol, c| {
            let ts = data_dir(vol);
            std::fs::remove_dir_all(&ts).unwrap();
            symlink(c, &ts).unwrap();
        });
    }
}

#[test]
fn data_replaced_by_a_real_directory_is_rebuilt() {
    for next in [V1, V2] {
        tamper_case("..data a directory", next, |vol, c| {
            let d = vol.join(DATA_DIR);
            std::fs::remove_file(&d).unwrap();
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("labels"), "forged").unwrap();
            symlink(c, d.join("sub")).unwrap();
        });
    }
}

#[test]
fn user_visible_names_replaced_are_unlinked_not_followed() {
    for next in [V1, V2] {
        tamper_case("visible name -> canary", next, |vol, c| {
            relink(&vol.join("labels"), &c.join("labels"));
            relink(&vol.join("sub"), c);
        });
        tamper_case(
            "visible names replaced by a file and a dir",
            next,
            |vol, c| {
                relink(&vol.join("labels"), c);
                std::fs::remove_file(vol.join("labels")).unwrap();
                std::fs::write(vol.join("labels"), "forged").unwrap();
                std::fs::remove_file(vol.join("sub")).unwrap();
                std::fs::create_dir(vol.join("sub")).unwrap();
                symlink(c, vol.join("sub/x")).unwrap();
            },
        );
    }
}

#[test]
fn links_inside_the_data_dir_are_never_read_or_followed() {
    for next in [V1, V2] {
        tamper_case("file in ..<ts> -> canary", next, |vol, c| {
            let ts = data_dir(vol);
            relink(&ts.join("labels"), &c.join("labels"));
            relink(&ts.join("sub"), c);
        });
    }
}

#[test]
fn stray_entries_are_removed_without_following() {
    for next in [V1, V2] {
        tamper_case("stray entries", next, |vol, c| {
            symlink(c, vol.join(DATA_DIR_TMP)).unwrap();
            symlink(c, vol.join("extra")).unwrap();
            symlink(c, vol.join("..2020_01_01_00_00_00.1")).unwrap();
            std::fs::create_dir(vol.join("..2020_01_01_00_00_00.2")).unwrap();
            symlink(c, vol.join("..2020_01_01_00_00_00.2/in")).unwrap();
            std::fs::create_dir(vol.join("otherdir")).unwrap();
            symlink(c, vol.join("otherdir/in")).unwrap();
        });
    }
}

#[test]
fn remove_entry_at_unlinks_links_and_empties_dirs_without_following() {
    let base = tempfile::tempdir().unwrap();
    let c = canary(base.path());
    let d = base.path().join("d");
    std::fs::create_dir_all(d.join("a/b")).unwrap();
    symlink(&c, d.join("a/b/link")).unwrap();
    symlink(&c, d.join("a/link")).unwrap();
    std::fs::write(d.join("a/f"), "x").unwrap();
    let parent = open_dir_at(CWD, base.path()).unwrap();
    remove_entry_at(parent.as_fd(), OsStr::new("d")).unwrap();
    assert!(std::fs::symlink_metadata(&d).is_err());
    // A link to a directory is unlinked, its target kept.
    symlink(&c, base.path().join("l")).unwrap();
    remove_entry_at(parent.as_fd(), OsStr::new("l")).unwrap();
    assert!(std::fs::symlink_metadata(base.path().join("l")).is_err());
    remove_entry_at(parent.as_fd(), OsStr::new("missing")).unwrap();
    assert_canary_intact(&c);
}
