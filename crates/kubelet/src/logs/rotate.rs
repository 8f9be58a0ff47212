//! Container log rotation on disk (upstream `logs/container_log_manager.go`, the file part).
//! Pure: names of rotated files and the plan of one rotation (`plan_rotation`). Side effects:
//! `apply_plan` removes and gzips files of one container's log directory (blocking I/O, run on
//! the blocking pool by the manager). Owns no state.
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

/// Lists the rotated files of `log` and carries out the plan: removals, then compression.
pub fn prepare_rotation(log: &Path, max_files: usize) -> Result<RotationPlan, RotateError> {
    let existing = rotated_files(log).map_err(|source| RotateError::List {
        path: log.to_owned(),
        source,
    })?;
    let plan = plan_rotation(&existing, max_files);
    for l in &plan.remove_unused {
        remove(l, "unused")?;
    }
    for l in &plan.remove_excess {
        remove(l, "old")?;
    }
    for l in &plan.compress {
        compress(l).map_err(|source| RotateError::Compress {
            path: l.clone(),
            source,
        })?;
        remove(l, "compressed")?;
    }
    Ok(plan)
}

/// gzips `log` into `<log>.gz` through `<log>.tmp` (renamed only when complete).
pub fn compress(log: &Path) -> std::io::Result<()> {
    let with = |s: &str| {
        let mut n = log.as_os_str().to_owned();
        n.push(s);
        PathBuf::from(n)
    };
    let (tmp, gz) = (with(TMP_SUFFIX), with(COMPRESS_SUFFIX));
    let result = (|| {
        let mut reader = BufReader::new(File::open(log)?);
        let out = File::create(&tmp)?;
        let perms = std::fs::metadata(log)?.permissions();
        out.set_permissions(perms)?;
        let mut encoder =
            flate2::write::GzEncoder::new(BufWriter::new(out), flate2::Compression::default());
        std::io::copy(&mut reader, &mut encoder)?;
        let mut writer = encoder.finish()?;
        writer.flush()?;
        drop(writer);
        std::fs::rename(&tmp, &gz)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
        prepare_rotation(&log, 5).unwrap();
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
}
