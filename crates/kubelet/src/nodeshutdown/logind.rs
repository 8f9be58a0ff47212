//! logind over D-Bus (upstream `nodeshutdown/systemd/inhibit_linux.go`): owns one connection
//! to the system bus and the `delay` inhibitor lock it takes. Receives the bus address (or the
//! system bus) and logind's answers; emits `Inhibit`, `ListInhibitors`, reads of
//! `InhibitDelayMaxUSec`, systemd's `KillUnit(systemd-logind.service, SIGHUP)` to make logind
//! re-read its configuration, the `99-kubelet.conf` drop-in, and the stream of
//! `PrepareForShutdown` signals — only those sent by the owner of `org.freedesktop.login1`
//! (upstream matches any sender, so any local client could fake a shutdown).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use tracing::debug;

/// logind's bus name.
pub const LOGIND_SERVICE: &str = "org.freedesktop.login1";
/// What the kubelet inhibits and how (upstream `InhibitShutdown`).
pub const INHIBIT_WHAT: &str = "shutdown";
pub const INHIBIT_WHO: &str = "kubelet";
pub const INHIBIT_WHY: &str = "Kubelet needs time to handle node shutdown";
pub const INHIBIT_MODE: &str = "delay";
/// Upstream `kubeletLogindConf`.
pub const DROP_IN_NAME: &str = "99-kubelet.conf";
/// The unit upstream sends SIGHUP to so that logind reloads its configuration.
pub const LOGIND_UNIT: &str = "systemd-logind.service";
/// How long one D-Bus call may take (the bus daemon's own reply timeout is 25 s).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// One row of `ListInhibitors`: what, who, why, mode, uid, pid.
type InhibitorRow = (String, String, String, String, u32, u32);

#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1",
    gen_blocking = false
)]
trait LogindManager {
    fn inhibit(
        &self,
        what: &str,
        who: &str,
        why: &str,
        mode: &str,
    ) -> zbus::Result<zbus::zvariant::OwnedFd>;

    fn list_inhibitors(&self) -> zbus::Result<Vec<InhibitorRow>>;

    #[zbus(property, name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> zbus::Result<u64>;

    #[zbus(signal)]
    fn prepare_for_shutdown(&self, start: bool) -> zbus::Result<()>;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1",
    gen_blocking = false
)]
trait SystemdManager {
    fn kill_unit(&self, name: &str, who: &str, signal: i32) -> zbus::Result<()>;
}

/// Failures talking to logind; messages follow upstream's where it has one.
#[derive(Debug, thiserror::Error)]
pub enum LogindError {
    #[error("connecting to the system bus at {address}: {source}")]
    Connect {
        address: String,
        source: Box<zbus::Error>,
    },
    #[error("failed reading InhibitDelayMaxUSec property from logind: {0}")]
    ReadDelay(Box<zbus::Error>),
    #[error("failed creating systemd inhibitor: {0}")]
    Inhibit(Box<zbus::Error>),
    #[error("failed listing logind's inhibitors: {0}")]
    List(Box<zbus::Error>),
    #[error("unable to reload logind conf: {0}")]
    Reload(Box<zbus::Error>),
    #[error("failed to monitor shutdown: {0}")]
    Monitor(Box<zbus::Error>),
    #[error("failed creating {path} directory: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed writing logind shutdown inhibit override file {path}: {source}")]
    WriteOverride {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{call}: no answer from logind within {CALL_TIMEOUT:?}")]
    Timeout { call: &'static str },
}

/// A held `delay` inhibitor lock: logind delays the shutdown until it is dropped (its file
/// descriptor closed) or `InhibitDelayMaxSec` passes (upstream `InhibitLock`).
#[derive(Debug)]
pub struct InhibitLock {
    _fd: std::os::fd::OwnedFd,
}

impl InhibitLock {
    /// A lock over any descriptor (tests observe the release through its peer).
    pub fn from_fd(fd: std::os::fd::OwnedFd) -> Self {
        Self { _fd: fd }
    }

    /// Releases the lock (upstream `ReleaseInhibitLock`): the shutdown may proceed.
    pub fn release(self) {
        drop(self);
    }
}

/// One `PrepareForShutdown` signal: `Ok(start)` or why its body was unusable.
pub type ShutdownSignal = Result<bool, String>;

/// The `PrepareForShutdown` signals of one connection; ends with the connection.
pub type ShutdownSignals = std::pin::Pin<Box<dyn futures::Stream<Item = ShutdownSignal> + Send>>;

/// A connection to logind (upstream `DBusCon`).
pub struct Logind {
    logind: LogindManagerProxy<'static>,
    systemd: SystemdManagerProxy<'static>,
}

async fn bounded<T>(
    call: &'static str,
    fut: impl std::future::Future<Output = Result<T, LogindError>>,
) -> Result<T, LogindError> {
    tokio::time::timeout(CALL_TIMEOUT, fut)
        .await
        .map_err(|_| LogindError::Timeout { call })?
}

impl Logind {
    /// Connects to `address`, or to the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else the
    /// standard socket) when `None`.
    pub async fn connect(address: Option<&str>) -> Result<Self, LogindError> {
        let shown = address.unwrap_or("the system bus").to_owned();
        let connect_err = |source| LogindError::Connect {
            address: shown.clone(),
            source: Box::new(source),
        };
        let conn = bounded("connect", async {
            match address {
                Some(a) => zbus::connection::Builder::address(a)
                    .map_err(connect_err)?
                    .build()
                    .await
                    .map_err(connect_err),
                None => zbus::Connection::system().await.map_err(connect_err),
            }
        })
        .await?;
        let logind = LogindManagerProxy::builder(&conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .map_err(connect_err)?;
        let systemd = SystemdManagerProxy::builder(&conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .map_err(connect_err)?;
        Ok(Self { logind, systemd })
    }

    /// logind's `InhibitDelayMaxUSec` (upstream `CurrentInhibitDelay`).
    pub async fn current_inhibit_delay(&self) -> Result<Duration, LogindError> {
        let usec = bounded("InhibitDelayMaxUSec", async {
            self.logind
                .inhibit_delay_max_usec()
                .await
                .map_err(|e| LogindError::ReadDelay(Box::new(e)))
        })
        .await?;
        Ok(Duration::from_micros(usec))
    }

    /// Takes a `delay` lock on `shutdown` (upstream `InhibitShutdown`).
    pub async fn inhibit_shutdown(&self) -> Result<InhibitLock, LogindError> {
        let fd = bounded("Inhibit", async {
            self.logind
                .inhibit(INHIBIT_WHAT, INHIBIT_WHO, INHIBIT_WHY, INHIBIT_MODE)
                .await
                .map_err(|e| LogindError::Inhibit(Box::new(e)))
        })
        .await?;
        Ok(InhibitLock { _fd: fd.into() })
    }

    /// Whether logind lists a `delay` lock on `shutdown` taken by `kubelet` from this process
    /// (what `systemd-inhibit --list` shows an operator).
    pub async fn lock_is_listed(&self) -> Result<bool, LogindError> {
        let list = bounded("ListInhibitors", async {
            self.logind
                .list_inhibitors()
                .await
                .map_err(|e| LogindError::List(Box::new(e)))
        })
        .await?;
        let pid = std::process::id();
        Ok(list.iter().any(|(what, who, _why, mode, _uid, lock_pid)| {
            what.split(':').any(|w| w == INHIBIT_WHAT)
                && who == INHIBIT_WHO
                && mode == INHIBIT_MODE
                && *lock_pid == pid
        }))
    }

    /// Makes logind re-read its configuration: systemd sends `systemd-logind.service` SIGHUP
    /// (upstream `ReloadLogindConf`).
    pub async fn reload_logind_conf(&self) -> Result<(), LogindError> {
        bounded("KillUnit", async {
            self.systemd
                .kill_unit(LOGIND_UNIT, "all", 1)
                .await
                .map_err(|e| LogindError::Reload(Box::new(e)))
        })
        .await
    }

    /// The `PrepareForShutdown` signals logind sends from now on (upstream `MonitorShutdown`).
    /// Ends when the connection does.
    pub async fn monitor_shutdown(&self) -> Result<ShutdownSignals, LogindError> {
        let stream = bounded("AddMatch PrepareForShutdown", async {
            self.logind
                .receive_prepare_for_shutdown()
                .await
                .map_err(|e| LogindError::Monitor(Box::new(e)))
        })
        .await?;
        Ok(Box::pin(stream.map(|signal| {
            signal
                .args()
                .map(|a| a.start)
                .map_err(|e| format!("PrepareForShutdown event was not a bool as expected: {e}"))
        })))
    }
}

/// The drop-in upstream writes: `InhibitDelayMaxSec` in whole seconds.
pub fn drop_in_content(inhibit_delay_max: Duration) -> String {
    let secs = inhibit_delay_max.as_secs_f64().round();
    format!("# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={secs:.0}\n")
}

/// Writes `<dir>/99-kubelet.conf` raising `InhibitDelayMaxSec` (upstream
/// `OverrideInhibitDelay`), atomically (a temporary file logind ignores, then a rename that
/// replaces a symlink rather than following it), mode 0644.
pub fn override_inhibit_delay(dir: &Path, inhibit_delay_max: Duration) -> Result<(), LogindError> {
    std::fs::create_dir_all(dir).map_err(|source| LogindError::CreateDir {
        path: dir.to_owned(),
        source,
    })?;
    let path = dir.join(DROP_IN_NAME);
    crate::nofollow::atomic_write(
        &path,
        drop_in_content(inhibit_delay_max).as_bytes(),
        crate::nofollow::WriteOptions::durable(0o644),
    )
    .map_err(|source| LogindError::WriteOverride {
        path: path.clone(),
        source,
    })?;
    debug!(path = %path.display(), ?inhibit_delay_max, "wrote the logind drop-in");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn drop_in_has_upstreams_name_and_content() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("logind.conf.d");
        override_inhibit_delay(&conf, Duration::from_secs(30)).unwrap();
        let path = conf.join("99-kubelet.conf");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n"
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        // Rewriting replaces the value and leaves no temporary file behind.
        override_inhibit_delay(&conf, Duration::from_secs(45)).unwrap();
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .ends_with("InhibitDelayMaxSec=45\n")
        );
        let names: Vec<_> = std::fs::read_dir(&conf)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["99-kubelet.conf"]);
    }

    /// Attack: a symlink planted at the drop-in's path is replaced, its target untouched.
    #[test]
    fn drop_in_replaces_a_planted_symlink_without_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let conf = dir.path().join("conf.d");
        std::fs::create_dir(&conf).unwrap();
        std::os::unix::fs::symlink(&victim, conf.join("99-kubelet.conf")).unwrap();
        override_inhibit_delay(&conf, Duration::from_secs(10)).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let meta = std::fs::symlink_metadata(conf.join("99-kubelet.conf")).unwrap();
        assert!(meta.file_type().is_file());
    }

    #[test]
    fn drop_in_directory_that_cannot_be_created_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let err = override_inhibit_delay(&file.join("conf.d"), Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("failed creating "), "{err}");
        assert!(err.contains("a-file/conf.d"), "{err}");
    }

    #[test]
    fn drop_in_rounds_to_whole_seconds() {
        assert!(drop_in_content(Duration::from_millis(29_600)).ends_with("=30\n"));
        assert!(drop_in_content(Duration::ZERO).ends_with("=0\n"));
    }
}
