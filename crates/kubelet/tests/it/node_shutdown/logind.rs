//! Test doubles for graceful node shutdown on a private bus (`common::dbus`): a test
//! `org.freedesktop.login1` service (plus the one
//! `org.freedesktop.systemd1` call the kubelet makes) served by zbus in the test process.
//! The fake logind hands out real inhibitor locks — one end of a socket pair, whose closing
//! it observes — lists them with the caller's PID as logind does, re-reads its drop-in
//! directory (last file wins) on `KillUnit(systemd-logind.service, SIGHUP)`, and emits
//! `PrepareForShutdown` on request.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::dbus::BusDaemon;

pub const LOGIND_PATH: &str = "/org/freedesktop/login1";
pub const LOGIND_IFACE: &str = "org.freedesktop.login1.Manager";

/// One lock handed out by `Inhibit`.
struct HeldLock {
    what: String,
    who: String,
    why: String,
    mode: String,
    pid: u32,
    /// Our end of the socket pair: end-of-file once the holder closed its end.
    peer: UnixStream,
}

impl HeldLock {
    fn released(&self) -> bool {
        let mut buf = [0u8; 1];
        match (&self.peer).read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }
}

#[derive(Default)]
struct State {
    delay_usec: u64,
    conf_dir: PathBuf,
    locks: Vec<HeldLock>,
    inhibit_calls: usize,
    reloads: Vec<(String, String, i32)>,
}

impl State {
    fn prune(&mut self) {
        self.locks.retain(|l| !l.released());
    }

    /// logind's drop-in order: every `*.conf`, sorted by name, the last value wins.
    fn reload(&mut self) {
        let Ok(dir) = std::fs::read_dir(&self.conf_dir) else {
            return;
        };
        let mut files: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "conf"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            for line in text.lines() {
                if let Some(v) = line.trim().strip_prefix("InhibitDelayMaxSec=")
                    && let Ok(secs) = v.trim().parse::<u64>()
                {
                    self.delay_usec = secs * 1_000_000;
                }
            }
        }
    }
}

struct LoginManager(Arc<Mutex<State>>);

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl LoginManager {
    async fn inhibit(
        &self,
        #[zbus(header)] header: zbus::message::Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        what: &str,
        who: &str,
        why: &str,
        mode: &str,
    ) -> zbus::fdo::Result<zbus::zvariant::OwnedFd> {
        let sender = header
            .sender()
            .ok_or_else(|| zbus::fdo::Error::Failed("no sender".into()))?
            .to_owned();
        let pid = zbus::fdo::DBusProxy::new(conn)
            .await?
            .get_connection_unix_process_id(zbus::names::BusName::Unique(sender))
            .await?;
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        ours.set_nonblocking(true)
            .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        let mut st = self.0.lock().unwrap();
        st.inhibit_calls += 1;
        st.locks.push(HeldLock {
            what: what.to_owned(),
            who: who.to_owned(),
            why: why.to_owned(),
            mode: mode.to_owned(),
            pid,
            peer: ours,
        });
        Ok(std::os::fd::OwnedFd::from(theirs).into())
    }

    fn list_inhibitors(&self) -> Vec<(String, String, String, String, u32, u32)> {
        let mut st = self.0.lock().unwrap();
        st.prune();
        st.locks
            .iter()
            .map(|l| {
                (
                    l.what.clone(),
                    l.who.clone(),
                    l.why.clone(),
                    l.mode.clone(),
                    0,
                    l.pid,
                )
            })
            .collect()
    }

    #[zbus(property, name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> u64 {
        self.0.lock().unwrap().delay_usec
    }
}

struct SystemdManager(Arc<Mutex<State>>);

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl SystemdManager {
    fn kill_unit(&self, name: &str, who: &str, signal: i32) {
        let mut st = self.0.lock().unwrap();
        st.reloads.push((name.to_owned(), who.to_owned(), signal));
        if name == "systemd-logind.service" && signal == 1 {
            st.reload();
        }
    }
}

/// The test logind, serving until dropped.
pub struct FakeLogind {
    state: Arc<Mutex<State>>,
    conn: zbus::Connection,
}

impl FakeLogind {
    /// Owns `org.freedesktop.login1` and `org.freedesktop.systemd1` on `bus`, with
    /// `InhibitDelayMaxSec` = `delay` and drop-ins read from `conf_dir` on reload.
    pub async fn start(bus: &BusDaemon, delay: Duration, conf_dir: &Path) -> Self {
        let state = Arc::new(Mutex::new(State {
            delay_usec: u64::try_from(delay.as_micros()).unwrap(),
            conf_dir: conf_dir.to_owned(),
            ..State::default()
        }));
        let conn = zbus::connection::Builder::address(bus.address.as_str())
            .unwrap()
            .name("org.freedesktop.login1")
            .unwrap()
            .name("org.freedesktop.systemd1")
            .unwrap()
            .serve_at(LOGIND_PATH, LoginManager(state.clone()))
            .unwrap()
            .serve_at("/org/freedesktop/systemd1", SystemdManager(state.clone()))
            .unwrap()
            .build()
            .await
            .expect("the test logind connects to the private bus");
        Self { state, conn }
    }

    /// Sends `PrepareForShutdown(start)` as logind does.
    pub async fn prepare_for_shutdown(&self, start: bool) {
        self.conn
            .emit_signal(
                None::<()>,
                LOGIND_PATH,
                LOGIND_IFACE,
                "PrepareForShutdown",
                &(start,),
            )
            .await
            .unwrap();
    }

    /// Sends a `PrepareForShutdown` whose body is not a boolean.
    pub async fn malformed_prepare_for_shutdown(&self) {
        self.conn
            .emit_signal(
                None::<()>,
                LOGIND_PATH,
                LOGIND_IFACE,
                "PrepareForShutdown",
                &("yes",),
            )
            .await
            .unwrap();
    }

    /// Locks currently held, as `(what, who, why, mode, pid)`.
    pub fn held(&self) -> Vec<(String, String, String, String, u32)> {
        let mut st = self.state.lock().unwrap();
        st.prune();
        st.locks
            .iter()
            .map(|l| {
                (
                    l.what.clone(),
                    l.who.clone(),
                    l.why.clone(),
                    l.mode.clone(),
                    l.pid,
                )
            })
            .collect()
    }

    pub fn inhibit_calls(&self) -> usize {
        self.state.lock().unwrap().inhibit_calls
    }

    pub fn reloads(&self) -> Vec<(String, String, i32)> {
        self.state.lock().unwrap().reloads.clone()
    }

    pub fn delay(&self) -> Duration {
        Duration::from_micros(self.state.lock().unwrap().delay_usec)
    }
}
