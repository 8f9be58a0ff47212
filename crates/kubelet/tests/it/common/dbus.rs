//! A private D-Bus bus for the tests of the kubelet's D-Bus clients (systemd cgroup driver,
//! graceful node shutdown): a real `dbus-daemon` with its own configuration and socket in a
//! temporary directory, open to every local client. Test services (systemd1, login1) are
//! served on it from the test process.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A private bus; the daemon is killed when this is dropped.
pub struct BusDaemon {
    /// `unix:path=…` (without the daemon's GUID, so a restarted daemon has the same address).
    pub address: String,
    child: Child,
    dir: tempfile::TempDir,
}

impl BusDaemon {
    /// Starts `dbus-daemon` on a socket in a new temporary directory. Panics (never skips)
    /// when it cannot start.
    pub async fn start() -> Self {
        Self::start_in(tempfile::tempdir().unwrap()).await
    }

    /// Stops the daemon (every connection breaks) and starts a new one on the same socket.
    pub async fn restart(mut self) -> Self {
        self.child.kill().await.unwrap();
        let _ = std::fs::remove_file(self.dir.path().join("bus.sock"));
        Self::start_in(self.dir).await
    }

    async fn start_in(dir: tempfile::TempDir) -> Self {
        let socket = dir.path().join("bus.sock");
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow send_type="signal"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let mut child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--nopidfile", "--print-address=1"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("dbus-daemon not found: install the Debian package dbus-daemon (dev/runtime.sh up does)");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(10),
            BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("dbus-daemon printed no address within 10 s")
        .expect("reading dbus-daemon's address");
        assert!(
            line.trim().starts_with("unix:"),
            "dbus-daemon did not start: printed {line:?}"
        );
        Self {
            address: format!("unix:path={}", socket.display()),
            child,
            dir,
        }
    }

    /// A new client connection to this bus.
    pub async fn client(&self) -> zbus::Connection {
        zbus::connection::Builder::address(self.address.as_str())
            .unwrap()
            .build()
            .await
            .unwrap()
    }
}
