//! Container log rotation on disk (upstream `logs/container_log_manager.go`, the file part).
//! Pure: names of rotated files, the plan of one rotation (`plan_rotation`), of a check between
//! rotations (`plan_housekeeping`) and of freeing a full disk (`plan_disk_relief`). Side effects
//! (blocking I/O, run on the blocking pool by the per-container workers): removing leftovers and
//! excess files, renaming the live file, gzipping with an abort flag. Owns no state.
//!
//! Naming as upstream: the live file `<n>.log`, rotated files `<n>.log.<YYYYMMDD-HHMMSS>`,
//! compressed `<n>.log.<YYYYMMDD-HHMMSS>.gz`, temporary `….tmp` during compression.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use chrono::{DateTime, TimeZone};

/// Suffix of compressed rotated logs.
pub const COMPRESS_SUFFIX: &str = ".gz";
/// Suffix of files being compressed.
pub const TMP_SUFFIX: &str = ".tmp";
/// strftime form of upstream's `20060102-150405`.
pub const TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";

/// The name the live log `log` is renamed to when rotated at `now`.
pub fn rotated_name<Tz: TimeZone>(log: &Path, now: &DateTime<Tz>) -> PathBuf
where
    Tz::Offset: std::fmt::Display,
{
    let mut name = log.as_os_str().to_owned();
    name.push(format!(".{}", now.format(TIMESTAMP_FORMAT)));
    PathBuf::from(name)
}

/// The rotated/compressed/temporary files of `log`: every file named `<log>.*` in its
/// directory (upstream's glob), sorted by name (= oldest first).
pub fn rotated_files(log: &Path) -> std::io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(base)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.", base.to_string_lossy());
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    out.sort();
    Ok(out)
}

/// Splits files into those in use and leftovers of an interrupted rotation: temporary files,
/// and uncompressed files whose `.gz` already exists (upstream `filterUnusedLogs`).
pub fn filter_unused(logs: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let with_suffix = |p: &Path, s: &str| {
        let mut n = p.as_os_str().to_owned();
        n.push(s);
        PathBuf::from(n)
    };
    let ends = |p: &Path, s: &str| p.to_string_lossy().ends_with(s);
    logs.iter().cloned().partition(|l| {
        if ends(l, TMP_SUFFIX) {
            return false;
        }
        if ends(l, COMPRESS_SUFFIX) {
            return true;
        }
        !logs.contains(&with_suffix(l, COMPRESS_SUFFIX))
    })
}

/// What one rotation does before renaming the live file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RotationPlan {
    /// Leftovers of interrupted rotations.
    pub remove_unused: Vec<PathBuf>,
    /// The oldest rotated files beyond `max_files - 2` (room for the file being rotated and
    /// the new live file).
    pub remove_excess: Vec<PathBuf>,
    /// Rotated files still uncompressed (the previously newest one).
    pub compress: Vec<PathBuf>,
}

impl RotationPlan {
    /// Nothing to remove and nothing to compress.
    fn is_empty(&self) -> bool {
        self.remove_unused.is_empty() && self.remove_excess.is_empty() && self.compress.is_empty()
    }
}

/// Plans a rotation of a log whose rotated files are `existing` (upstream `rotateLog` before
/// `rotateLatestLog`).
pub fn plan_rotation(existing: &[PathBuf], max_files: usize) -> RotationPlan {
    let (mut in_use, remove_unused) = filter_unused(existing);
    in_use.sort();
    let keep = max_files.saturating_sub(2);
    let excess = in_use.len().saturating_sub(keep);
    let remove_excess: Vec<PathBuf> = in_use.drain(..excess).collect();
    let compress = in_use
        .into_iter()
        .filter(|l| !l.to_string_lossy().ends_with(COMPRESS_SUFFIX))
        .collect();
    RotationPlan {
        remove_unused,
        remove_excess,
        compress,
    }
}

/// A file operation of a rotation failed.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("failed to remove {what} log {path:?}: {source}")]
    Remove {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to compress log {path:?}: {source}")]
    Compress {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to list rotated logs of {path:?}: {source}")]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to rotate log {from:?} to {to:?}: {source}")]
    Rename {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Whether an I/O error is ENOSPC (the filesystem is full).
pub fn is_no_space(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error())
}

impl RotateError {
    /// Whether the filesystem was full.
    pub fn is_no_space(&self) -> bool {
        match self {
            Self::Remove { source, .. }
            | Self::Compress { source, .. }
            | Self::List { source, .. }
            | Self::Rename { source, .. } => is_no_space(source),
        }
    }
}

fn remove(path: &Path, what: &'static str) -> Result<(), RotateError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RotateError::Remove {
            what,
            path: path.to_owned(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// What a check between rotations does (files left by a crash, a kubelet restart with a smaller
/// `containerLogMaxFiles`, a compression that failed): leftovers removed, rotated files beyond
/// `max_files - 1` (the live file exists) removed oldest first, every rotated file but the
/// newest compressed.
pub fn plan_housekeeping(existing: &[PathBuf], max_files: usize) -> RotationPlan {
    // One more rotated file is kept than before a rotation: no new rotated file is coming.
    let mut plan = plan_rotation(existing, max_files.saturating_add(1));
    // The newest rotated file stays uncompressed (a reader may still follow it).
    if let Some(newest) = newest_rotated(existing, &plan) {
        plan.compress.retain(|l| *l != newest);
    }
    plan
}

/// The newest rotated file the plan keeps, if any.
fn newest_rotated(existing: &[PathBuf], plan: &RotationPlan) -> Option<PathBuf> {
    existing
        .iter()
        .filter(|l| !plan.remove_unused.contains(l) && !plan.remove_excess.contains(l))
        .max()
        .cloned()
}

/// The timestamp part of a rotated file's name (`<n>.log.<ts>[.gz]` → `<ts>`), by which
/// rotated files of different containers are ordered oldest first.
pub fn rotated_timestamp(path: &Path) -> Option<&str> {
    let name = path.file_name()?.to_str()?;
    let rest = &name[name.find(".log.")? + ".log.".len()..];
    let ts = rest
        .strip_suffix(TMP_SUFFIX)
        .unwrap_or(rest)
        .trim_end_matches(COMPRESS_SUFFIX);
    (ts.len() == "YYYYMMDD-HHMMSS".len()).then_some(ts)
}

/// The rotated files to remove so that `available` bytes grow to at least `want` on a full
/// filesystem: the oldest first (by the timestamp in their names, across all containers),
/// until the bytes freed cover the shortfall. Live files are never candidates; `rotated` lists
/// each rotated file with its size. Empty when there is room enough.
pub fn plan_disk_relief(rotated: &[(PathBuf, u64)], available: u64, want: u64) -> Vec<PathBuf> {
    let Some(mut missing) = want.checked_sub(available).filter(|m| *m > 0) else {
        return Vec::new();
    };
    let mut by_age: Vec<&(PathBuf, u64)> = rotated.iter().collect();
    by_age.sort_by(|a, b| {
        let key = |p: &Path| rotated_timestamp(p).map(str::to_owned);
        // Names without a timestamp (foreign files) go last: the oldest known go first.
        match (key(&a.0), key(&b.0)) {
            (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.0.cmp(&b.0)),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.0.cmp(&b.0),
        }
    });
    let mut out = Vec::new();
    for (path, size) in by_age {
        if missing == 0 {
            break;
        }
        out.push(path.clone());
        missing = missing.saturating_sub(*size);
    }
    out
}

/// Lists the rotated files of `log` and removes leftovers and the excess before a rotation;
/// returns the rotated files still to compress (all of them older than the file the rotation
/// is about to make). Compression is left to the caller, after the rotation: a compression
/// that fails never stands in the way of rotating (kubernetes#102553).
pub fn clean_before_rotation(log: &Path, max_files: usize) -> Result<Vec<PathBuf>, RotateError> {
    let plan = plan_rotation(&list(log)?, max_files);
    apply_removals(&plan);
    Ok(plan.compress)
}

/// Between rotations: removes leftovers and excess files; returns the files to compress, and
/// whether there was nothing to do at all (nothing to remove, nothing to compress).
pub fn housekeeping(log: &Path, max_files: usize) -> Result<(Vec<PathBuf>, bool), RotateError> {
    let plan = plan_housekeeping(&list(log)?, max_files);
    apply_removals(&plan);
    let idle = plan.is_empty();
    Ok((plan.compress, idle))
}

fn list(log: &Path) -> Result<Vec<PathBuf>, RotateError> {
    rotated_files(log).map_err(|source| RotateError::List {
        path: log.to_owned(),
        source,
    })
}

/// Removes the plan's leftovers and excess files. Best effort: a file that cannot be removed is
/// logged and skipped, never a reason not to rotate (a live file growing without bound is the
/// worse outcome; kubernetes#102553 stopped rotation forever over one such leftover).
fn apply_removals(plan: &RotationPlan) {
    let unused = plan.remove_unused.iter().map(|l| (l, "unused"));
    let excess = plan.remove_excess.iter().map(|l| (l, "old"));
    for (l, what) in unused.chain(excess) {
        if let Err(e) = remove(l, what) {
            tracing::warn!(error = %e, "container log rotation goes on without removing it");
        }
    }
}

/// Removes a rotated file and what a compression of it may have left (`.tmp`).
pub fn remove_rotated(path: &Path) -> Result<(), RotateError> {
    remove(&with_suffix(path, TMP_SUFFIX), "unused")?;
    remove(path, "old")
}

/// Renames the live file `log` to `rotated`. A file of the same second (a second rotation
/// within one second) is replaced, and its `.gz`/`.tmp` removed, so that no stale compressed
/// twin makes the new rotated file look like an unused leftover.
pub fn rename_live(log: &Path, rotated: &Path) -> Result<(), RotateError> {
    remove(&with_suffix(rotated, COMPRESS_SUFFIX), "old")?;
    remove(&with_suffix(rotated, TMP_SUFFIX), "unused")?;
    std::fs::rename(log, rotated).map_err(|source| RotateError::Rename {
        from: log.to_owned(),
        to: rotated.to_owned(),
        source,
    })
}

fn with_suffix(p: &Path, s: &str) -> PathBuf {
    let mut n = p.as_os_str().to_owned();
    n.push(s);
    PathBuf::from(n)
}

/// gzips `log` into `<log>.gz` through `<log>.tmp` (renamed only when complete), then removes
/// `log`. Checks `aborted` between chunks: an aborted compression (the file is about to be
/// rotated away or removed) stops with `ErrorKind::Interrupted`. On any failure the `.tmp` is
/// removed and `log` left as it was, to be compressed again later.
pub fn compress(log: &Path, aborted: &dyn Fn() -> bool) -> std::io::Result<()> {
    let (tmp, gz) = (
        with_suffix(log, TMP_SUFFIX),
        with_suffix(log, COMPRESS_SUFFIX),
    );
    let result = (|| {
        let mut reader = BufReader::new(File::open(log)?);
        let out = File::create(&tmp)?;
        let perms = std::fs::metadata(log)?.permissions();
        out.set_permissions(perms)?;
        let mut encoder =
            flate2::write::GzEncoder::new(BufWriter::new(out), flate2::Compression::default());
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            if aborted() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "compression aborted",
                ));
            }
            let n = std::io::Read::read(&mut reader, &mut buf)?;
            if n == 0 {
                break;
            }
            encoder.write_all(&buf[..n])?;
        }
        let mut writer = encoder.finish()?;
        writer.flush()?;
        drop(writer);
        if aborted() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "compression aborted",
            ));
        }
        std::fs::rename(&tmp, &gz)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return result;
    }
    match std::fs::remove_file(log) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use std::io::Read;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(format!("/logs/c/{s}"))
    }

    #[test]
    fn rotated_names_follow_upstream() {
        let t = Utc.with_ymd_and_hms(2026, 11, 24, 3, 4, 5).unwrap();
        assert_eq!(
            rotated_name(Path::new("/var/log/pods/ns_p_u/c/0.log"), &t),
            PathBuf::from("/var/log/pods/ns_p_u/c/0.log.20261124-030405")
        );
    }

    /// (case, existing files, max files, unused, excess, to compress)
    type PlanCase = (
        &'static str,
        Vec<&'static str>,
        usize,
        Vec<&'static str>,
        Vec<&'static str>,
        Vec<&'static str>,
    );

    #[test]
    fn plan_table() {
        #[rustfmt::skip]
        let cases: Vec<PlanCase> = vec![
            ("first rotation: nothing to do", vec![], 5, vec![], vec![], vec![]),
            ("the previous rotated file is compressed",
             vec!["0.log.20260101-000001"], 5, vec![], vec![], vec!["0.log.20260101-000001"]),
            ("at the limit the oldest go (max 5: 3 rotated kept)",
             vec!["0.log.20260101-000001.gz", "0.log.20260101-000002.gz", "0.log.20260101-000003.gz", "0.log.20260101-000004"],
             5, vec![], vec!["0.log.20260101-000001.gz"], vec!["0.log.20260101-000004"]),
            ("max 2 keeps no rotated file",
             vec!["0.log.20260101-000001.gz", "0.log.20260101-000002"], 2, vec![],
             vec!["0.log.20260101-000001.gz", "0.log.20260101-000002"], vec![]),
            ("leftovers: tmp files and originals of finished compressions",
             vec!["0.log.20260101-000001", "0.log.20260101-000001.gz", "0.log.20260101-000002", "0.log.20260101-000002.tmp"],
             5, vec!["0.log.20260101-000001", "0.log.20260101-000002.tmp"], vec![], vec!["0.log.20260101-000002"]),
        ];
        for (name, existing, max, unused, excess, compress) in cases {
            let existing: Vec<PathBuf> = existing.into_iter().map(p).collect();
            let plan = plan_rotation(&existing, max);
            let want = RotationPlan {
                remove_unused: unused.into_iter().map(p).collect(),
                remove_excess: excess.into_iter().map(p).collect(),
                compress: compress.into_iter().map(p).collect(),
            };
            assert_eq!(plan, want, "{name}");
        }
    }

    #[test]
    fn prepare_rotation_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        std::fs::write(&log, "live\n").unwrap();
        // Another container's (restart 10) files must not be touched.
        std::fs::write(dir.path().join("10.log.20260101-000001"), "x").unwrap();
        for (name, body) in [
            ("0.log.20260101-000001.gz", "a"),
            ("0.log.20260101-000002.gz", "b"),
            ("0.log.20260101-000003.gz", "c"),
            ("0.log.20260101-000004", "newest rotated\n"),
            ("0.log.20260101-000004.tmp", "partial"),
        ] {
            std::fs::write(dir.path().join(name), body).unwrap();
        }
        for f in clean_before_rotation(&log, 5).unwrap() {
            compress(&f, &|| false).unwrap();
        }
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            vec![
                "0.log",
                "0.log.20260101-000002.gz",
                "0.log.20260101-000003.gz",
                "0.log.20260101-000004.gz",
                "10.log.20260101-000001",
            ]
        );
        let mut text = String::new();
        flate2::read::GzDecoder::new(
            File::open(dir.path().join("0.log.20260101-000004.gz")).unwrap(),
        )
        .read_to_string(&mut text)
        .unwrap();
        assert_eq!(text, "newest rotated\n");
    }

    #[test]
    fn housekeeping_table() {
        #[rustfmt::skip]
        let cases: Vec<PlanCase> = vec![
            ("nothing rotated yet", vec![], 2, vec![], vec![], vec![]),
            ("max 2: the one rotated file stays, uncompressed",
             vec!["0.log.20260101-000001"], 2, vec![], vec![], vec![]),
            ("max 2 after a restart with more files: the oldest go",
             vec!["0.log.20260101-000001.gz", "0.log.20260101-000002.gz", "0.log.20260101-000003"],
             2, vec![], vec!["0.log.20260101-000001.gz", "0.log.20260101-000002.gz"], vec![]),
            ("a failed compression is retried; the newest stays plain; a crash's .tmp goes",
             vec!["0.log.20260101-000001", "0.log.20260101-000001.tmp", "0.log.20260101-000002"],
             5, vec!["0.log.20260101-000001.tmp"], vec![], vec!["0.log.20260101-000001"]),
        ];
        for (name, existing, max, unused, excess, compress) in cases {
            let existing: Vec<PathBuf> = existing.into_iter().map(p).collect();
            let want = RotationPlan {
                remove_unused: unused.into_iter().map(p).collect(),
                remove_excess: excess.into_iter().map(p).collect(),
                compress: compress.into_iter().map(p).collect(),
            };
            assert_eq!(plan_housekeeping(&existing, max), want, "{name}");
        }
    }

    #[test]
    fn rotated_timestamps() {
        for (name, want) in [
            ("/l/c/0.log.20260101-000001", Some("20260101-000001")),
            ("/l/c/12.log.20260101-000001.gz", Some("20260101-000001")),
            ("/l/c/0.log.20260101-000001.tmp", Some("20260101-000001")),
            ("/l/c/0.log", None),
            ("/l/c/0.log.garbage", None),
        ] {
            assert_eq!(rotated_timestamp(Path::new(name)), want, "{name}");
        }
    }

    #[test]
    fn disk_relief_removes_the_oldest_first_across_containers() {
        let files = vec![
            (PathBuf::from("/l/b/0.log.20260101-000003"), 100),
            (PathBuf::from("/l/a/0.log.20260101-000002.gz"), 50),
            (PathBuf::from("/l/a/0.log.20260101-000004"), 100),
            (PathBuf::from("/l/b/0.log.20260101-000001.gz"), 30),
        ];
        // Room enough: nothing.
        assert!(plan_disk_relief(&files, 1000, 1000).is_empty());
        assert!(plan_disk_relief(&files, 2000, 1000).is_empty());
        // 60 bytes short: the two oldest (30 + 50).
        assert_eq!(
            plan_disk_relief(&files, 940, 1000),
            vec![
                PathBuf::from("/l/b/0.log.20260101-000001.gz"),
                PathBuf::from("/l/a/0.log.20260101-000002.gz"),
            ]
        );
        // Far short: everything, still oldest first, and never more than what exists.
        assert_eq!(plan_disk_relief(&files, 0, 10_000).len(), 4);
        assert_eq!(
            plan_disk_relief(&files, 0, 10_000)[3],
            PathBuf::from("/l/a/0.log.20260101-000004")
        );
    }

    #[test]
    fn aborted_or_failed_compression_leaves_the_file_and_no_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log.20260101-000001");
        std::fs::write(&log, "x".repeat(1_000_000)).unwrap();
        let err = compress(&log, &|| true).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::Interrupted);
        // A failure: the .tmp cannot be created (a directory is in the way).
        let blocked = dir.path().join("0.log.20260101-000002");
        std::fs::write(&blocked, "y").unwrap();
        std::fs::create_dir(dir.path().join("0.log.20260101-000002.tmp")).unwrap();
        compress(&blocked, &|| false).unwrap_err();
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            vec![
                "0.log.20260101-000001",
                "0.log.20260101-000002",
                "0.log.20260101-000002.tmp"
            ]
        );
        // Retried once the obstacle is gone (housekeeping removes a crash's .tmp).
        std::fs::remove_dir(dir.path().join("0.log.20260101-000002.tmp")).unwrap();
        compress(&blocked, &|| false).unwrap();
        assert!(dir.path().join("0.log.20260101-000002.gz").exists());
        assert!(!blocked.exists());
    }

    #[test]
    fn a_second_rotation_in_the_same_second_replaces_the_stale_twin() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        let rotated = dir.path().join("0.log.20260101-000001");
        std::fs::write(dir.path().join("0.log.20260101-000001.gz"), "old").unwrap();
        std::fs::write(dir.path().join("0.log.20260101-000001.tmp"), "old").unwrap();
        std::fs::write(&log, "new").unwrap();
        rename_live(&log, &rotated).unwrap();
        let existing = rotated_files(&log).unwrap();
        assert_eq!(existing, vec![rotated.clone()]);
        let (in_use, unused) = filter_unused(&existing);
        assert_eq!((in_use, unused), (vec![rotated], vec![]));
    }
}
