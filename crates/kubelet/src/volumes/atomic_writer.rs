//! Atomic writer for projected-style volumes (upstream `volume/util/atomic_writer.go`): writes a
//! complete payload into a fresh timestamped directory, points `..data` at it with a symlink swap
//! (rename over the old link), and keeps user-visible names as symlinks through `..data`, so
//! a reader sees either the old or the new payload, never a mix. Owns nothing but the files.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

/// One file of a payload: contents and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum AtomicWriteError {
    #[error("invalid path {path:?} in volume payload: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("writing volume payload under {dir}: {source}")]
    Io {
        dir: PathBuf,
        source: std::io::Error,
    },
}

const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

/// Checks a payload path as upstream `validatePath`: relative, no `..` element, not starting
/// with `..`, not empty.
fn validate(path: &str) -> Result<(), AtomicWriteError> {
    let bad = |reason| AtomicWriteError::InvalidPath {
        path: path.to_owned(),
        reason,
    };
    if path.is_empty() {
        return Err(bad("must not be empty"));
    }
    if Path::new(path).is_absolute() {
        return Err(bad("must be relative"));
    }
    if path.starts_with("..") {
        return Err(bad("must not start with '..'"));
    }
    if Path::new(path)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(bad("must not contain '..'"));
    }
    Ok(())
}

/// Writes `payload` into `target_dir` atomically. Returns `true` when anything changed.
pub fn write_payload(
    target_dir: &Path,
    payload: &BTreeMap<String, FileProjection>,
) -> Result<bool, AtomicWriteError> {
    for path in payload.keys() {
        validate(path)?;
    }
    let io = |source| AtomicWriteError::Io {
        dir: target_dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(target_dir).map_err(io)?;
    let data_link = target_dir.join(DATA_DIR);
    let old_dir = std::fs::read_link(&data_link)
        .ok()
        .map(|p| target_dir.join(p));
    if let Some(old) = &old_dir
        && same_payload(old, payload)
    {
        return Ok(false);
    }

    // 1. The new payload in a fresh directory.
    let stamp = format!("..{}", chrono::Utc::now().format("%Y_%m_%d_%H_%M_%S.%f"));
    let new_dir = target_dir.join(&stamp);
    std::fs::create_dir(&new_dir).map_err(io)?;
    for (rel, file) in payload {
        let path = new_dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let mut f = std::fs::File::create(&path).map_err(io)?;
        f.write_all(&file.data).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(file.mode)).map_err(io)?;
    }
    // 2. Swap `..data` to it.
    let tmp_link = target_dir.join(DATA_DIR_TMP);
    let _ = std::fs::remove_file(&tmp_link);
    symlink(&stamp, &tmp_link).map_err(io)?;
    std::fs::rename(&tmp_link, &data_link).map_err(io)?;
    // 3. User-visible top-level names point through `..data`.
    let mut top: Vec<String> = payload
        .keys()
        .filter_map(|k| k.split('/').next().map(str::to_owned))
        .collect();
    top.dedup();
    for name in &top {
        let link = target_dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA_DIR).join(name), &link).map_err(io)?;
        }
    }
    // 4. Names no longer in the payload go, and so does the old payload directory.
    if let Ok(entries) = std::fs::read_dir(target_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("..") && !top.contains(&name) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    if let Some(old) = old_dir
        && old != new_dir
    {
        let _ = std::fs::remove_dir_all(old);
    }
    Ok(true)
}

/// Same files with the same contents (upstream `shouldWritePayload` compares contents only:
/// modes come from the immutable volume spec, and fsGroup ownership adjusts them after
/// writing, so comparing them would rewrite such payloads on every sync).
fn same_payload(dir: &Path, payload: &BTreeMap<String, FileProjection>) -> bool {
    let mut existing = Vec::new();
    collect_files(dir, dir, &mut existing);
    existing.len() == payload.len()
        && payload
            .iter()
            .all(|(rel, f)| std::fs::read(dir.join(rel)).is_ok_and(|d| d == f.data))
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_files(root, &p, out);
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push(rel.to_path_buf());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
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

    #[test]
    fn swaps_payloads_atomically_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        assert!(write_payload(t, &payload(&[("labels", "a=\"1\""), ("sub/x", "x")])).unwrap());
        assert_eq!(
            std::fs::read_to_string(t.join("labels")).unwrap(),
            "a=\"1\""
        );
        assert_eq!(std::fs::read_to_string(t.join("sub/x")).unwrap(), "x");
        assert!(
            std::fs::symlink_metadata(t.join("labels"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // Unchanged payload: nothing written.
        assert!(!write_payload(t, &payload(&[("labels", "a=\"1\""), ("sub/x", "x")])).unwrap());
        // New payload: `labels` changes, `sub` disappears, old data dir removed.
        let old = std::fs::read_link(t.join(DATA_DIR)).unwrap();
        assert!(write_payload(t, &payload(&[("labels", "a=\"2\"")])).unwrap());
        assert_eq!(
            std::fs::read_to_string(t.join("labels")).unwrap(),
            "a=\"2\""
        );
        assert!(!t.join("sub").exists());
        assert!(!t.join(old).exists());
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
    fn rejects_bad_paths() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "/abs", "..x", "a/../b"] {
            assert!(
                write_payload(dir.path(), &payload(&[(bad, "x")])).is_err(),
                "{bad:?}"
            );
        }
    }
}
