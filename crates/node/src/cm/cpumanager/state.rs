//! CPU manager state and its checkpoint (upstream `cpumanager/state`): the shared pool
//! (`defaultCpuSet`) and the exclusive assignments per pod UID and container name, persisted
//! as `<rootDir>/cpu_manager_state` in upstream's JSON shape and checksum so the file is
//! interchangeable with the Go kubelet's. Written atomically ([`atomic_write`]); read and
//! verified at start-up. Owned by the CPU manager; nobody else touches the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::cpuset::CpuSet;
use crate::nofollow::{WriteOptions, atomic_write};

/// File name of the checkpoint inside the kubelet root directory.
pub const CHECKPOINT_FILE: &str = "cpu_manager_state";

/// Pod UID → container name → exclusive CPUs.
pub type Assignments = BTreeMap<String, BTreeMap<String, CpuSet>>;

/// What the CPU manager remembers across restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// The shared pool: every CPU not exclusively assigned (empty with policy `none`).
    pub default_cpu_set: CpuSet,
    pub assignments: Assignments,
}

impl State {
    pub fn get(&self, pod_uid: &str, container: &str) -> Option<&CpuSet> {
        self.assignments.get(pod_uid)?.get(container)
    }

    /// The container's exclusive CPUs, else the shared pool (upstream `GetCPUSetOrDefault`).
    pub fn get_or_default(&self, pod_uid: &str, container: &str) -> CpuSet {
        self.get(pod_uid, container)
            .cloned()
            .unwrap_or_else(|| self.default_cpu_set.clone())
    }

    pub fn set(&mut self, pod_uid: &str, container: &str, cpus: CpuSet) {
        self.assignments
            .entry(pod_uid.to_owned())
            .or_default()
            .insert(container.to_owned(), cpus);
    }

    pub fn delete(&mut self, pod_uid: &str, container: &str) {
        if let Some(pod) = self.assignments.get_mut(pod_uid) {
            pod.remove(container);
            if pod.is_empty() {
                self.assignments.remove(pod_uid);
            }
        }
    }
}

/// Upstream `CPUManagerCheckpoint` (v2) as it is stored.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct CheckpointFile {
    #[serde(rename = "policyName", default)]
    policy_name: String,
    // Go's JSON decoding matches keys case-insensitively; upstream's own tests use both.
    #[serde(rename = "defaultCpuSet", alias = "defaultCPUSet", default)]
    default_cpu_set: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    entries: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(default)]
    checksum: u64,
}

impl CheckpointFile {
    /// Upstream's checksum: FNV-32a over the go-spew `%#v` dump (sorted keys, no pointer
    /// addresses) of the checkpoint struct with a zero checksum.
    fn compute_checksum(&self) -> u64 {
        let mut dump = format!(
            "(*state.CPUManagerCheckpoint){{PolicyName:(string){} DefaultCPUSet:(string){} Entries:(map[string]map[string]string)map[",
            self.policy_name, self.default_cpu_set
        );
        let pods: Vec<String> = self
            .entries
            .iter()
            .map(|(pod, containers)| {
                let inner: Vec<String> = containers
                    .iter()
                    .map(|(c, cpus)| format!("{c}:{cpus}"))
                    .collect();
                format!("{pod}:map[{}]", inner.join(" "))
            })
            .collect();
        dump.push_str(&pods.join(" "));
        dump.push_str("] Checksum:(checksum.Checksum)0}");
        let mut hash: u32 = 0x811c_9dc5;
        for b in dump.bytes() {
            hash ^= u32::from(b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
        u64::from(hash)
    }
}

/// Why the checkpoint could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The checkpoint file of one policy.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    path: PathBuf,
    policy_name: String,
}

impl Checkpoint {
    pub fn new(state_dir: &Path, policy_name: &str) -> Self {
        Self {
            path: state_dir.join(CHECKPOINT_FILE),
            policy_name: policy_name.to_owned(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the state; a missing file yields an empty state (and writes it, as upstream).
    /// Errors carry upstream's reason (the caller adds the drain-and-remove advice).
    pub fn restore(&self) -> Result<State, CheckpointError> {
        let blob = match std::fs::read(&self.path) {
            Ok(blob) => blob,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let state = State::default();
                self.store(&state)?;
                return Ok(state);
            }
            Err(source) => {
                return Err(CheckpointError::Read {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let file: CheckpointFile =
            serde_json::from_slice(&blob).map_err(|e| CheckpointError::Invalid(e.to_string()))?;
        if file.checksum != 0 && file.checksum != file.compute_checksum() {
            return Err(CheckpointError::Invalid(
                "checkpoint is corrupted".to_owned(),
            ));
        }
        if file.policy_name != self.policy_name {
            return Err(CheckpointError::Invalid(format!(
                "configured policy {:?} differs from state checkpoint policy {:?}",
                self.policy_name, file.policy_name
            )));
        }
        let default_cpu_set = CpuSet::parse(&file.default_cpu_set).map_err(|e| {
            CheckpointError::Invalid(format!(
                "could not parse default cpu set {:?}: {e}",
                file.default_cpu_set
            ))
        })?;
        let mut state = State {
            default_cpu_set,
            assignments: Assignments::new(),
        };
        for (pod, containers) in file.entries {
            for (container, cpus) in containers {
                let set = CpuSet::parse(&cpus).map_err(|e| {
                    CheckpointError::Invalid(format!(
                        "could not parse cpuset {cpus:?} for container {container:?} in pod {pod:?}: {e}"
                    ))
                })?;
                state.set(&pod, &container, set);
            }
        }
        Ok(state)
    }

    /// Writes `state` atomically.
    pub fn store(&self, state: &State) -> Result<(), CheckpointError> {
        let mut file = CheckpointFile {
            policy_name: self.policy_name.clone(),
            default_cpu_set: state.default_cpu_set.to_string(),
            entries: state
                .assignments
                .iter()
                .map(|(pod, cs)| {
                    (
                        pod.clone(),
                        cs.iter().map(|(c, s)| (c.clone(), s.to_string())).collect(),
                    )
                })
                .collect(),
            checksum: 0,
        };
        file.checksum = file.compute_checksum();
        let err = |source| CheckpointError::Write {
            path: self.path.clone(),
            source,
        };
        let blob =
            serde_json::to_vec(&file).map_err(|e| err(std::io::Error::other(e.to_string())))?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(err)?;
        // Mode 0600 as upstream's checkpoint manager creates its files.
        atomic_write(&self.path, &blob, WriteOptions::durable(0o600)).map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    #[test]
    fn checksum_matches_upstream_test_vectors() {
        // Values from upstream's state_checkpoint_test.go.
        let empty = CheckpointFile {
            policy_name: "none".into(),
            default_cpu_set: "4-6".into(),
            ..Default::default()
        };
        assert_eq!(empty.compute_checksum(), 354655845);
        let mut with_entries = CheckpointFile {
            policy_name: "none".into(),
            default_cpu_set: "1-3".into(),
            ..Default::default()
        };
        with_entries.entries.insert(
            "pod".into(),
            [("container1", "4-6"), ("container2", "1-3")]
                .into_iter()
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .collect(),
        );
        assert_eq!(with_entries.compute_checksum(), 3610638499);
    }

    #[test]
    fn round_trip_in_upstream_shape() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(dir.path(), "static");
        let mut state = State {
            default_cpu_set: set("0,3"),
            ..Default::default()
        };
        state.set("uid-1", "app", set("1-2"));
        cp.store(&state).unwrap();
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(cp.path()).unwrap()).unwrap();
        assert_eq!(raw["policyName"], "static");
        assert_eq!(raw["defaultCpuSet"], "0,3");
        assert_eq!(raw["entries"]["uid-1"]["app"], "1-2");
        assert!(raw["checksum"].as_u64().unwrap() > 0);
        assert_eq!(cp.restore().unwrap(), state);
        // No temp file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(CHECKPOINT_FILE)]);
    }

    #[test]
    fn missing_file_is_created_empty() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(dir.path(), "none");
        assert_eq!(cp.restore().unwrap(), State::default());
        let raw = std::fs::read_to_string(cp.path()).unwrap();
        assert!(raw.contains("\"policyName\":\"none\""), "{raw}");
        assert!(!raw.contains("entries"), "{raw}");
    }

    #[test]
    fn upstream_written_file_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CHECKPOINT_FILE),
            r#"{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"pod": {"container1": "4-6", "container2": "1-3"}}, "checksum": 3610638499}"#,
        )
        .unwrap();
        let state = Checkpoint::new(dir.path(), "none").restore().unwrap();
        assert_eq!(state.default_cpu_set, set("1-3"));
        assert_eq!(state.get("pod", "container1"), Some(&set("4-6")));
    }

    #[test]
    fn corrupt_and_mismatched_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        let cp = Checkpoint::new(dir.path(), "static");
        for (content, want) in [
            ("{", "EOF while parsing"),
            (
                r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":1}"#,
                "checkpoint is corrupted",
            ),
            (
                r#"{"policyName":"none","defaultCpuSet":""}"#,
                r#"configured policy "static" differs from state checkpoint policy "none""#,
            ),
            (
                r#"{"policyName":"static","defaultCpuSet":"x"}"#,
                r#"could not parse default cpu set "x""#,
            ),
        ] {
            std::fs::write(&path, content).unwrap();
            let err = cp.restore().unwrap_err().to_string();
            assert!(err.contains(want), "{content}: {err}");
        }
    }

    #[test]
    fn truncated_empty_garbage_and_old_version_files_are_errors_never_panics() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(dir.path(), "static");
        let mut state = State {
            default_cpu_set: set("0,3"),
            ..Default::default()
        };
        state.set("uid-1", "app", set("1-2"));
        cp.store(&state).unwrap();
        let full = std::fs::read(cp.path()).unwrap();
        let mut damaged: Vec<Vec<u8>> = (1..full.len()).map(|n| full[..n].to_vec()).collect();
        damaged.push(Vec::new());
        damaged.push(b"\x00\xff\xfe garbage".to_vec());
        // Upstream's v1 layout (entries keyed by container ID), which needs the runtime's
        // container list to migrate: refused, as upstream does without that list.
        damaged.push(
            br#"{"policyName":"static","defaultCpuSet":"0,3","entries":{"cid":"1-2"},"checksum":1}"#
                .to_vec(),
        );
        for blob in damaged {
            std::fs::write(cp.path(), &blob).unwrap();
            assert!(
                cp.restore().is_err(),
                "{:?} was accepted",
                String::from_utf8_lossy(&blob)
            );
        }
    }

    #[test]
    fn a_full_disk_keeps_the_old_checkpoint() {
        let fs = crate::nofollow::testutil::Tmpfs::new("128k");
        let cp = Checkpoint::new(fs.path(), "static");
        let mut state = State {
            default_cpu_set: set("0,3"),
            ..Default::default()
        };
        cp.store(&state).unwrap();
        fs.fill();
        for n in 0..200 {
            state.set(&format!("pod-{n:04}-with-a-long-uid"), "app", set("1-2"));
        }
        let err = cp.store(&state).unwrap_err().to_string();
        assert!(
            err.contains(&cp.path().display().to_string()) && err.contains("No space left"),
            "{err}"
        );
        assert_eq!(cp.restore().unwrap().default_cpu_set, set("0,3"));
        assert!(cp.restore().unwrap().assignments.is_empty());
        fs.free();
        cp.store(&state).unwrap();
        assert_eq!(cp.restore().unwrap(), state);
    }
}
