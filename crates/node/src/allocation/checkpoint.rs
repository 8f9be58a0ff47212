//! allocation::checkpoint — the on-disk record of per-container resources (upstream
//! `allocation/state` checkpoints `allocated_pods_state` and `actuated_pods_state` in the root
//! dir). Receives the whole map of pod UID → container name → `ResourceRequirements`; emits it
//! back on start (a file the Go kubelet 1.33 left is read too). Writes are atomic (temp file,
//! fsync, rename, directory fsync) and checksummed; a missing file is an empty record, a
//! truncated or tampered one is an error the caller logs and recovers from (the pods' specs
//! rebuild it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ResourceRequirements;
use serde::{Deserialize, Serialize};
use tracing::info;

use crate::nofollow::{WriteOptions, atomic_write};

/// Container name → resources.
pub type PodResources = BTreeMap<String, ResourceRequirements>;
/// Pod UID → its containers' resources.
pub type Allocations = BTreeMap<String, PodResources>;

/// Upstream's file names in the root dir.
pub const ALLOCATED_FILE: &str = "allocated_pods_state";
pub const ACTUATED_FILE: &str = "actuated_pods_state";

/// The largest checkpoint read back (a runaway file is refused, not slurped).
const MAX_CHECKPOINT_BYTES: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("reading checkpoint {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("checkpoint {path} is corrupt: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error("writing checkpoint {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Serialize, Deserialize)]
struct File {
    data: Allocations,
    checksum: u64,
}

/// FNV-1a (64 bit) of the canonical JSON of `data` (maps are ordered, so it is stable).
fn checksum(data: &Allocations) -> Result<u64, serde_json::Error> {
    let bytes = serde_json::to_vec(data)?;
    Ok(bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    }))
}

/// The Go kubelet's file (upstream `allocation/state` `Checkpoint`, 1.33): the payload as JSON
/// text in `data`, summed by `checksum.New(data)` — FNV-32a over go-spew's `%#v` of a string,
/// `(string)<text>`.
#[derive(Deserialize)]
struct GoFile {
    data: String,
    checksum: u64,
}

/// Upstream `PodResourceCheckpointInfo` (the JSON inside `data`).
#[derive(Deserialize)]
struct GoPayload {
    #[serde(default)]
    entries: BTreeMap<String, GoPodResources>,
}

/// Upstream `PodResourceInfo` (no JSON tags: Go field names as keys). Pod-level resources
/// and emptyDir limits, which later releases add, have no place in rkubelet's record.
#[derive(Deserialize)]
struct GoPodResources {
    #[serde(rename = "ContainerResources", default)]
    container_resources: PodResources,
}

fn go_checksum(data: &str) -> u64 {
    let hash = b"(string)"
        .iter()
        .chain(data.as_bytes())
        .fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
        });
    u64::from(hash)
}

/// Decodes a checkpoint the Go kubelet wrote; `None` when the blob is not in that format
/// (`data` not a string), an error when it is but is damaged.
fn decode_go_file(blob: &[u8]) -> Option<Result<Allocations, String>> {
    let file: GoFile = serde_json::from_slice(blob).ok()?;
    let want = go_checksum(&file.data);
    if want != file.checksum {
        return Some(Err(format!(
            "the Go kubelet's checksum does not match: stored {}, computed {want}",
            file.checksum
        )));
    }
    Some(
        serde_json::from_str::<GoPayload>(&file.data)
            .map(|p| {
                p.entries
                    .into_iter()
                    .map(|(uid, pod)| (uid, pod.container_resources))
                    .collect()
            })
            .map_err(|e| {
                format!("the Go kubelet's payload in \"data\" is not {{\"entries\": …}}: {e}")
            }),
    )
}

/// One checkpoint file.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    path: PathBuf,
}

impl Checkpoint {
    pub fn new(dir: &Path, name: &str) -> Self {
        Self {
            path: dir.join(name),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored allocations; empty when the file does not exist.
    pub fn load(&self) -> Result<Allocations, CheckpointError> {
        let read_err = |source| CheckpointError::Read {
            path: self.path.clone(),
            source,
        };
        let corrupt = |detail: String| CheckpointError::Corrupt {
            path: self.path.clone(),
            detail,
        };
        let meta = match std::fs::symlink_metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Allocations::new()),
            Err(e) => return Err(read_err(e)),
        };
        if !meta.is_file() {
            return Err(corrupt("not a regular file".to_owned()));
        }
        if meta.len() > MAX_CHECKPOINT_BYTES {
            return Err(corrupt(format!(
                "{} bytes, more than the {MAX_CHECKPOINT_BYTES} accepted",
                meta.len()
            )));
        }
        let blob = std::fs::read(&self.path).map_err(read_err)?;
        if let Some(go) = decode_go_file(&blob) {
            let data = go.map_err(corrupt)?;
            info!(path = %self.path.display(), pods = data.len(), "read the pod resource checkpoint the Go kubelet wrote; it is rewritten in rkubelet's format on the next change");
            return Ok(data);
        }
        let file: File = serde_json::from_slice(&blob)
            .map_err(|e| corrupt(format!("expected a JSON object {{data, checksum}}: {e}")))?;
        let want = checksum(&file.data).map_err(|e| corrupt(e.to_string()))?;
        if want != file.checksum {
            return Err(corrupt(format!(
                "checksum mismatch: stored {}, computed {want}",
                file.checksum
            )));
        }
        Ok(file.data)
    }

    /// Replaces the file atomically with `data`.
    pub fn store(&self, data: &Allocations) -> Result<(), CheckpointError> {
        let err = |source| CheckpointError::Write {
            path: self.path.clone(),
            source,
        };
        let other = |e: serde_json::Error| err(std::io::Error::other(e.to_string()));
        let file = File {
            data: data.clone(),
            checksum: checksum(data).map_err(other)?,
        };
        let blob = serde_json::to_vec(&file).map_err(other)?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(err)?;
        // Mode 0600 as upstream's checkpoint manager creates its files.
        atomic_write(&self.path, &blob, WriteOptions::durable(0o600)).map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn sample() -> Allocations {
        let rr = ResourceRequirements {
            requests: Some(BTreeMap::from([(
                "cpu".to_owned(),
                Quantity("100m".into()),
            )])),
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity("64Mi".into()),
            )])),
            ..Default::default()
        };
        BTreeMap::from([("uid-1".to_owned(), BTreeMap::from([("c".to_owned(), rr)]))])
    }

    #[test]
    fn round_trip_and_missing_file() {
        let d = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(d.path(), ALLOCATED_FILE);
        assert!(cp.load().unwrap().is_empty());
        cp.store(&sample()).unwrap();
        assert_eq!(cp.load().unwrap(), sample());
        // No temp file is left behind.
        // A symlink planted at the temp path is replaced, not written through.
        let target = d.path().join("target");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, d.path().join(format!(".{ALLOCATED_FILE}.tmp")))
            .unwrap();
        cp.store(&sample()).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        std::fs::remove_file(&target).unwrap();
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![ALLOCATED_FILE.to_owned()]);
    }

    /// Upstream's test vector (allocation/state `Test_stateCheckpoint_formatUpgraded`).
    const GO_FILE: &str = r#"{"data":"{\"entries\":{\"pod1\":{\"ContainerResources\":{\"container1\":{\"requests\":{\"cpu\":\"1Ki\",\"memory\":\"1Ki\"}}}}}}","checksum":1178570812}"#;

    #[test]
    fn a_go_kubelet_file_is_read() {
        let d = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(d.path(), ALLOCATED_FILE);
        std::fs::write(cp.path(), GO_FILE).unwrap();
        let rr = ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("1Ki".into())),
                ("memory".to_owned(), Quantity("1Ki".into())),
            ])),
            ..Default::default()
        };
        assert_eq!(
            cp.load().unwrap(),
            BTreeMap::from([(
                "pod1".to_owned(),
                BTreeMap::from([("container1".to_owned(), rr)])
            )])
        );
        // Empty entries (omitted by Go's `omitempty`) and later releases' extra fields.
        let data = r#"{"entries":{"p":{"ContainerResources":{},"PodLevelResources":null}}}"#;
        let file = serde_json::json!({"data": data, "checksum": go_checksum(data)});
        std::fs::write(cp.path(), file.to_string()).unwrap();
        assert_eq!(cp.load().unwrap()["p"], PodResources::new());
        let data = "{}";
        let file = serde_json::json!({"data": data, "checksum": go_checksum(data)});
        std::fs::write(cp.path(), file.to_string()).unwrap();
        assert!(cp.load().unwrap().is_empty());
        // rkubelet's own file is not mistaken for it.
        cp.store(&sample()).unwrap();
        assert_eq!(cp.load().unwrap(), sample());
    }

    #[test]
    fn a_damaged_go_kubelet_file_is_an_error_naming_what_is_wrong() {
        let d = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(d.path(), ALLOCATED_FILE);
        std::fs::write(cp.path(), GO_FILE.replace("1Ki", "9Ki")).unwrap();
        let e = cp.load().unwrap_err().to_string();
        assert!(
            e.contains("is corrupt") && e.contains("checksum does not match"),
            "{e}"
        );
        let data = r#"{"entries":["not","a","map"]}"#;
        let file = serde_json::json!({"data": data, "checksum": go_checksum(data)});
        std::fs::write(cp.path(), file.to_string()).unwrap();
        let e = cp.load().unwrap_err().to_string();
        assert!(e.contains("payload in \"data\""), "{e}");
    }

    #[test]
    fn truncated_garbage_and_tampered_files_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(d.path(), ALLOCATED_FILE);
        cp.store(&sample()).unwrap();
        let full = std::fs::read(cp.path()).unwrap();
        std::fs::write(cp.path(), &full[..full.len() / 2]).unwrap();
        let e = cp.load().unwrap_err().to_string();
        assert!(
            e.contains("is corrupt") && e.contains(ALLOCATED_FILE),
            "{e}"
        );
        std::fs::write(cp.path(), b"\x00\xffgarbage").unwrap();
        assert!(matches!(cp.load(), Err(CheckpointError::Corrupt { .. })));
        let tampered = String::from_utf8(full).unwrap().replace("100m", "900m");
        std::fs::write(cp.path(), tampered).unwrap();
        let e = cp.load().unwrap_err().to_string();
        assert!(e.contains("checksum mismatch"), "{e}");
        std::fs::remove_file(cp.path()).unwrap();
        std::fs::create_dir(cp.path()).unwrap();
        assert!(
            cp.load()
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
    }
}
