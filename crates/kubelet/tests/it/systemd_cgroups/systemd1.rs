//! A test `org.freedesktop.systemd1` service on a private bus (`common::dbus`), served from
//! the test process: it implements exactly the manager calls the kubelet's systemd cgroup driver
//! makes (`StartTransientUnit`, `SetUnitProperties`, `StopUnit`, `ResetFailedUnit`,
//! `Subscribe`, the `Version` property), creates and configures the slices' directories in a
//! TEMPORARY cgroupfs directory (never the host's), records every call with the properties it
//! received, and emits `JobRemoved` for each job as systemd does.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use zbus::object_server::SignalEmitter;
use zbus::zvariant::{ObjectPath, OwnedObjectPath, OwnedValue, Value};

/// A property value as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prop {
    Bool(bool),
    U64(u64),
    Str(String),
    Strs(Vec<String>),
    Other(String),
}

fn prop(v: &OwnedValue) -> Prop {
    match &**v {
        Value::Bool(b) => Prop::Bool(*b),
        Value::U64(n) => Prop::U64(*n),
        Value::Str(s) => Prop::Str(s.to_string()),
        Value::Array(a) => {
            let strs: Option<Vec<String>> = a
                .iter()
                .map(|e| match e {
                    Value::Str(s) => Some(s.to_string()),
                    _ => None,
                })
                .collect();
            strs.map_or_else(|| Prop::Other(format!("{v:?}")), Prop::Strs)
        }
        other => Prop::Other(format!("{other:?}")),
    }
}

/// One manager call the service received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: &'static str,
    pub unit: String,
    pub props: BTreeMap<String, Prop>,
}

#[derive(Debug, Default)]
struct State {
    units: BTreeMap<String, BTreeMap<String, Prop>>,
    calls: Vec<Call>,
    next_job: u32,
    subscribed: bool,
}

/// The test systemd: its state, shared with the test.
#[derive(Clone)]
pub struct FakeSystemd {
    cgroupfs: PathBuf,
    /// v1 hierarchies systemd manages (it creates slices there); empty: v2 (unified).
    v1_controllers: Vec<&'static str>,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
pub enum Sd1Error {
    #[zbus(error)]
    ZBus(zbus::Error),
    UnitExists(String),
    NoSuchUnit(String),
    InvalidArgs(String),
}

/// The test's own `ExpandSlice` (independent of the kubelet's).
fn expand(unit: &str) -> Option<PathBuf> {
    let stem = unit.strip_suffix(".slice")?;
    if stem == "-" {
        return Some(PathBuf::new());
    }
    let mut path = PathBuf::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if part.is_empty() || part.contains('/') {
            return None;
        }
        path.push(format!("{prefix}{part}.slice"));
        prefix = format!("{prefix}{part}-");
    }
    Some(path)
}

impl FakeSystemd {
    /// A v1 host: slices go to the hierarchies systemd manages below `cgroupfs`.
    pub fn v1(cgroupfs: &Path) -> Self {
        Self {
            cgroupfs: cgroupfs.to_path_buf(),
            v1_controllers: vec!["cpu", "cpuacct", "memory", "pids", "systemd"],
            state: Arc::default(),
        }
    }

    /// A v2 host: slices are directories of the unified hierarchy at `cgroupfs`.
    pub fn v2(cgroupfs: &Path) -> Self {
        Self {
            cgroupfs: cgroupfs.to_path_buf(),
            v1_controllers: Vec::new(),
            state: Arc::default(),
        }
    }

    /// Serves the manager on `bus` as `org.freedesktop.systemd1`.
    pub async fn serve(&self, bus: &str) -> zbus::Connection {
        zbus::connection::Builder::address(bus)
            .unwrap()
            .name("org.freedesktop.systemd1")
            .unwrap()
            .serve_at("/org/freedesktop/systemd1", self.clone())
            .unwrap()
            .build()
            .await
            .expect("serving the test systemd1 on the private bus")
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    pub fn units(&self) -> Vec<String> {
        self.state.lock().unwrap().units.keys().cloned().collect()
    }

    /// The properties `unit` was started with.
    pub fn unit(&self, unit: &str) -> Option<BTreeMap<String, Prop>> {
        self.state.lock().unwrap().units.get(unit).cloned()
    }

    /// The last `SetUnitProperties` value of `prop` for `unit`.
    pub fn last_set(&self, unit: &str, prop: &str) -> Option<Prop> {
        self.calls()
            .iter()
            .rev()
            .filter(|c| c.method == "SetUnitProperties" && c.unit == unit)
            .find_map(|c| c.props.get(prop).cloned())
    }

    pub fn subscribed(&self) -> bool {
        self.state.lock().unwrap().subscribed
    }

    /// The directories of `unit` (one per managed hierarchy).
    pub fn dirs(&self, unit: &str) -> Vec<PathBuf> {
        let rel = expand(unit).unwrap();
        if self.v1_controllers.is_empty() {
            return vec![self.cgroupfs.join(rel)];
        }
        self.v1_controllers
            .iter()
            .map(|c| self.cgroupfs.join(c).join(&rel))
            .collect()
    }

    fn record(&self, method: &'static str, unit: &str, props: &[(String, OwnedValue)]) {
        let props = props.iter().map(|(k, v)| (k.clone(), prop(v))).collect();
        self.state.lock().unwrap().calls.push(Call {
            method,
            unit: unit.to_owned(),
            props,
        });
    }

    fn job(&self) -> (u32, OwnedObjectPath) {
        let mut s = self.state.lock().unwrap();
        s.next_job += 1;
        let id = s.next_job;
        let path = ObjectPath::try_from(format!("/org/freedesktop/systemd1/job/{id}")).unwrap();
        (id, path.into())
    }

    /// What systemd writes for a property, into the unit's cgroupfs files.
    fn apply(&self, unit: &str, props: &[(String, OwnedValue)]) {
        let rel = expand(unit).unwrap();
        for (name, value) in props {
            let Prop::U64(n) = prop(value) else { continue };
            let (controller, file, text) = match name.as_str() {
                "CPUShares" => ("cpu", "cpu.shares", n.to_string()),
                "MemoryLimit" => ("memory", "memory.limit_in_bytes", n.to_string()),
                "TasksMax" if n == u64::MAX => ("pids", "pids.max", "max".to_owned()),
                "TasksMax" => ("pids", "pids.max", n.to_string()),
                "CPUWeight" => ("", "cpu.weight", n.to_string()),
                "MemoryMax" => ("", "memory.max", n.to_string()),
                _ => continue,
            };
            let dir = if self.v1_controllers.is_empty() {
                self.cgroupfs.join(&rel)
            } else {
                self.cgroupfs.join(controller).join(&rel)
            };
            std::fs::write(dir.join(file), text).unwrap();
        }
    }
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl FakeSystemd {
    async fn start_transient_unit(
        &self,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
        name: String,
        mode: String,
        properties: Vec<(String, OwnedValue)>,
        aux: Vec<(String, Vec<(String, OwnedValue)>)>,
    ) -> Result<OwnedObjectPath, Sd1Error> {
        self.record("StartTransientUnit", &name, &properties);
        if mode != "replace" || !aux.is_empty() {
            return Err(Sd1Error::InvalidArgs(format!("mode {mode:?}, aux {aux:?}")));
        }
        let Some(rel) = expand(&name) else {
            return Err(Sd1Error::InvalidArgs(format!("not a slice: {name:?}")));
        };
        let props: BTreeMap<String, Prop> = properties
            .iter()
            .map(|(k, v)| (k.clone(), prop(v)))
            .collect();
        {
            let s = self.state.lock().unwrap();
            if s.units.contains_key(&name) {
                return Err(Sd1Error::UnitExists(format!("Unit {name} already exists.")));
            }
            // The parent slice must be there already (the kubelet creates top-down).
            match props.get("Wants") {
                Some(Prop::Strs(w))
                    if w.len() == 1 && (w[0] == "-.slice" || s.units.contains_key(&w[0])) => {}
                other => {
                    return Err(Sd1Error::InvalidArgs(format!(
                        "{name}: Wants={other:?} is not an existing parent slice"
                    )));
                }
            }
        }
        for dir in self.dirs(&name) {
            std::fs::create_dir_all(&dir).unwrap();
        }
        let _ = rel;
        self.state.lock().unwrap().units.insert(name.clone(), props);
        let (id, job) = self.job();
        // The job finishes at once; the signal may reach the client before the reply.
        Self::job_removed(&emitter, id, job.as_ref(), &name, "done").await?;
        Ok(job)
    }

    async fn set_unit_properties(
        &self,
        name: String,
        runtime: bool,
        properties: Vec<(String, OwnedValue)>,
    ) -> Result<(), Sd1Error> {
        self.record("SetUnitProperties", &name, &properties);
        if !runtime {
            return Err(Sd1Error::InvalidArgs("expected runtime=true".to_owned()));
        }
        if !self.state.lock().unwrap().units.contains_key(&name) {
            return Err(Sd1Error::NoSuchUnit(format!("Unit {name} not loaded.")));
        }
        self.apply(&name, &properties);
        Ok(())
    }

    async fn stop_unit(
        &self,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
        name: String,
        mode: String,
    ) -> Result<OwnedObjectPath, Sd1Error> {
        self.record("StopUnit", &name, &[]);
        if mode != "replace" {
            return Err(Sd1Error::InvalidArgs(format!("mode {mode:?}")));
        }
        if self.state.lock().unwrap().units.remove(&name).is_none() {
            return Err(Sd1Error::NoSuchUnit(format!("Unit {name} not loaded.")));
        }
        // Stopping a slice removes its cgroups (empty of processes here).
        for dir in self.dirs(&name) {
            remove_cgroup_tree(&dir);
        }
        let (id, job) = self.job();
        Self::job_removed(&emitter, id, job.as_ref(), &name, "done").await?;
        Ok(job)
    }

    async fn reset_failed_unit(&self, name: String) -> Result<(), Sd1Error> {
        self.record("ResetFailedUnit", &name, &[]);
        Ok(())
    }

    async fn subscribe(&self) {
        self.state.lock().unwrap().subscribed = true;
    }

    #[zbus(property)]
    async fn version(&self) -> String {
        "252.33-1~deb12u1".to_owned()
    }

    #[zbus(signal)]
    async fn job_removed(
        emitter: &SignalEmitter<'_>,
        id: u32,
        job: ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

/// A temporary-directory "cgroup": directories and the plain files written into them.
fn remove_cgroup_tree(dir: &Path) {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
}
