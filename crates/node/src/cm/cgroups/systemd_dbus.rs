//! cm::cgroups::systemd_dbus — the kubelet's client of systemd's manager over D-Bus (what
//! runc's systemd cgroup manager calls through go-systemd): `StartTransientUnit` of a slice
//! (mode `replace`, waiting for the job's `JobRemoved` signal; an existing unit is fine),
//! `SetUnitProperties` (runtime), `StopUnit` + `ResetFailedUnit`, and the manager's `Version`.
//! Receives the bus address (the system bus by default, which honours
//! `DBUS_SYSTEM_BUS_ADDRESS`) and unit properties; emits errors naming the unit and the call.

use std::time::Duration;

use futures::StreamExt;
use zbus::zvariant::{OwnedObjectPath, Value};

/// How long a start/stop job may take (runc waits 30 s).
pub const JOB_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one D-Bus call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Where the system bus is when `DBUS_SYSTEM_BUS_ADDRESS` is unset.
pub const DEFAULT_SYSTEM_BUS: &str = "unix:path=/var/run/dbus/system_bus_socket";

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1",
    gen_blocking = false
)]
trait Manager {
    #[allow(clippy::type_complexity)]
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[(&str, Value<'_>)],
        aux: &[(&str, &[(&str, Value<'_>)])],
    ) -> zbus::Result<OwnedObjectPath>;

    fn set_unit_properties(
        &self,
        name: &str,
        runtime: bool,
        properties: &[(&str, Value<'_>)],
    ) -> zbus::Result<()>;

    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;

    fn subscribe(&self) -> zbus::Result<()>;

    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: zbus::zvariant::ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;

    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
}

/// Failures talking to systemd; each names the address, unit or call.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error(
        "cgroupDriver is \"systemd\" but systemd is not reachable on the D-Bus system bus at {address}: {source}"
    )]
    Connect {
        address: String,
        source: Box<zbus::Error>,
    },
    #[error("systemd {method} of unit {unit}: {source}")]
    Call {
        method: &'static str,
        unit: String,
        source: Box<zbus::Error>,
    },
    #[error("systemd job for unit {unit} finished with result {result:?}, expected \"done\"")]
    Job { unit: String, result: String },
    #[error("timed out after {timeout:?} waiting for systemd to {what} unit {unit}")]
    Timeout {
        what: &'static str,
        unit: String,
        timeout: Duration,
    },
}

/// A unit property value (the D-Bus types systemd expects: `b`, `t`, `s`, `as`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropValue {
    Bool(bool),
    U64(u64),
    Str(String),
    Strs(Vec<String>),
}

/// One unit property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    pub name: &'static str,
    pub value: PropValue,
}

impl Property {
    pub fn new(name: &'static str, value: PropValue) -> Self {
        Self { name, value }
    }

    fn to_value(&self) -> Value<'_> {
        match &self.value {
            PropValue::Bool(b) => Value::Bool(*b),
            PropValue::U64(n) => Value::U64(*n),
            PropValue::Str(s) => Value::from(s.as_str()),
            PropValue::Strs(v) => Value::from(v.iter().map(String::as_str).collect::<Vec<_>>()),
        }
    }
}

fn wire(props: &[Property]) -> Vec<(&str, Value<'_>)> {
    props.iter().map(|p| (p.name, p.to_value())).collect()
}

/// runc's `systemdVersionAtoi`: `"v245.4-1.fc32"`, `245`, `"241-1"` → the leading number.
pub fn parse_version(s: &str) -> Option<u32> {
    let s = s.trim_start_matches(['"', 'v']);
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

/// The address of the system bus as zbus resolves it (for messages).
pub fn system_bus_address() -> String {
    std::env::var("DBUS_SYSTEM_BUS_ADDRESS").unwrap_or_else(|_| DEFAULT_SYSTEM_BUS.to_owned())
}

/// A connection to systemd's manager.
#[derive(Debug, Clone)]
pub struct SystemdClient {
    proxy: ManagerProxy<'static>,
    address: String,
    version: Option<u32>,
}

impl SystemdClient {
    /// Connects to `address` (`None`: the system bus), subscribes to the manager's signals and
    /// reads its version: an unreachable systemd is an error naming the address.
    pub async fn connect(address: Option<&str>) -> Result<Self, SystemdError> {
        let shown = address.map_or_else(system_bus_address, str::to_owned);
        let connect_err = |source| SystemdError::Connect {
            address: shown.clone(),
            source: Box::new(source),
        };
        let builder = match address {
            Some(a) => zbus::connection::Builder::address(a),
            None => zbus::connection::Builder::system(),
        }
        .map_err(connect_err)?;
        let conn = tokio::time::timeout(CALL_TIMEOUT, builder.method_timeout(CALL_TIMEOUT).build())
            .await
            .map_err(|_| connect_err(zbus::Error::Failure("connection timed out".to_owned())))?
            .map_err(connect_err)?;
        let proxy = ManagerProxy::new(&conn).await.map_err(connect_err)?;
        // Job signals are only sent to subscribed clients.
        proxy.subscribe().await.map_err(connect_err)?;
        let version = proxy.version().await.map_err(connect_err)?;
        let version = parse_version(&version);
        tracing::info!(address = %shown, ?version, "connected to systemd");
        Ok(Self {
            proxy,
            address: shown,
            version,
        })
    }

    /// The manager's version (`None` when it did not parse).
    pub fn version(&self) -> Option<u32> {
        self.version
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// Starts the transient slice `unit` and waits for its job to finish. An existing unit is
    /// not an error (runc ignores `UnitExists` when it only makes sure a slice exists).
    pub async fn start_slice(&self, unit: &str, props: &[Property]) -> Result<(), SystemdError> {
        let call = |source| SystemdError::Call {
            method: "StartTransientUnit",
            unit: unit.to_owned(),
            source: Box::new(source),
        };
        // Listen before starting: the job may finish before the reply arrives.
        let mut removed = self.proxy.receive_job_removed().await.map_err(call)?;
        let job = match self
            .proxy
            .start_transient_unit(unit, "replace", &wire(props), &[])
            .await
        {
            Ok(job) => job,
            Err(e) if is_dbus_error(&e, "org.freedesktop.systemd1.UnitExists") => return Ok(()),
            Err(e) => return Err(call(e)),
        };
        match wait_job(&mut removed, &job, unit, "create").await {
            Ok(result) if result == "done" => Ok(()),
            Ok(result) => {
                let _ = self.proxy.reset_failed_unit(unit).await;
                Err(SystemdError::Job {
                    unit: unit.to_owned(),
                    result,
                })
            }
            Err(e) => {
                let _ = self.proxy.reset_failed_unit(unit).await;
                Err(e)
            }
        }
    }

    /// `SetUnitProperties` (runtime, not persisted).
    pub async fn set_properties(&self, unit: &str, props: &[Property]) -> Result<(), SystemdError> {
        self.proxy
            .set_unit_properties(unit, true, &wire(props))
            .await
            .map_err(|source| SystemdError::Call {
                method: "SetUnitProperties",
                unit: unit.to_owned(),
                source: Box::new(source),
            })
    }

    /// Stops `unit` and waits for the job, then resets a failed state so systemd forgets it. A
    /// unit systemd does not know is not an error (runc ignores `StopUnit` failures); only a
    /// job that never finishes is.
    pub async fn stop_unit(&self, unit: &str) -> Result<(), SystemdError> {
        let mut removed =
            self.proxy
                .receive_job_removed()
                .await
                .map_err(|source| SystemdError::Call {
                    method: "StopUnit",
                    unit: unit.to_owned(),
                    source: Box::new(source),
                })?;
        match self.proxy.stop_unit(unit, "replace").await {
            Ok(job) => {
                let result = wait_job(&mut removed, &job, unit, "remove").await?;
                if result != "done" {
                    tracing::warn!(%unit, %result, "systemd did not remove the unit cleanly; continuing");
                }
            }
            Err(e) => tracing::debug!(%unit, error = %e, "systemd StopUnit failed; continuing"),
        }
        let _ = self.proxy.reset_failed_unit(unit).await;
        Ok(())
    }
}

fn is_dbus_error(e: &zbus::Error, name: &str) -> bool {
    matches!(e, zbus::Error::MethodError(n, _, _) if n.as_str() == name)
}

/// The result of `job` from the `JobRemoved` signals, within `JOB_TIMEOUT`.
async fn wait_job(
    removed: &mut JobRemovedStream,
    job: &OwnedObjectPath,
    unit: &str,
    what: &'static str,
) -> Result<String, SystemdError> {
    let timeout = || SystemdError::Timeout {
        what,
        unit: unit.to_owned(),
        timeout: JOB_TIMEOUT,
    };
    let wait = async {
        while let Some(signal) = removed.next().await {
            let Ok(args) = signal.args() else { continue };
            if args.job.as_str() == job.as_str() {
                return Some(args.result.to_owned());
            }
        }
        None
    };
    match tokio::time::timeout(JOB_TIMEOUT, wait).await {
        Ok(Some(result)) => Ok(result),
        Ok(None) | Err(_) => Err(timeout()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// runc's `TestSystemdVersion` table.
    #[test]
    fn versions_parse_as_runc() {
        for (s, want) in [
            ("\"219\"", Some(219)),
            ("\"v245.4-1.fc32\"", Some(245)),
            ("\"241-1\"", Some(241)),
            ("\"v241-1\"", Some(241)),
            ("333.45\"", Some(333)),
            ("v321-0", Some(321)),
            ("252", Some(252)),
            ("NaN", None),
            ("", None),
            ("v", None),
        ] {
            assert_eq!(parse_version(s), want, "{s:?}");
        }
    }
}
