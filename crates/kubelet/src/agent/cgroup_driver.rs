//! The cgroup driver asked from the runtime (upstream `getCgroupDriverFromCRI`, feature gate
//! `KubeletCgroupDriverFromCRI`, on by default in 1.33). Receives the CRI runtime service and
//! the configured `cgroupDriver`; emits the driver to use: the one the runtime reports through
//! CRI `RuntimeConfig` (`linux.cgroup_driver`), or the configured one when the runtime does not
//! implement the call (containerd 1.6) or reports no Linux section, or a
//! [`CgroupDriverError`] that stops start-up. Owns no state.

use std::time::Duration;

use rkubelet_cri::{CriError, RuntimeService, api};

/// Why the runtime's cgroup driver could not be learnt.
#[derive(Debug, thiserror::Error)]
pub enum CgroupDriverError {
    /// Every try failed with an error other than `Unimplemented`.
    #[error("asking the runtime for its cgroup driver (KubeletCgroupDriverFromCRI): {0}")]
    Runtime(#[source] CriError),
    /// `linux.cgroup_driver` holds a value the CRI API does not define.
    #[error(
        "asking the runtime for its cgroup driver (KubeletCgroupDriverFromCRI): runtime returned an unknown cgroup driver {0}"
    )]
    Unknown(i32),
}

/// Upstream's tries and the pause between them (a runtime still starting up).
pub const TRIES: usize = 3;
pub const RETRY_PAUSE: Duration = Duration::from_secs(2);

/// The cgroup driver to run with: the runtime's, or `configured` when the runtime cannot say.
/// Logs upstream's lines for both outcomes.
pub async fn from_cri(
    runtime: &dyn RuntimeService,
    configured: &str,
) -> Result<String, CgroupDriverError> {
    let mut last = None;
    for attempt in 0..TRIES {
        if attempt > 0 {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        match runtime.runtime_config(api::RuntimeConfigRequest {}).await {
            Ok(resp) => return chosen(resp, configured),
            Err(CriError::Unimplemented { .. }) => {
                tracing::info!(
                    "CRI implementation should be updated to support RuntimeConfig when KubeletCgroupDriverFromCRI feature gate has been enabled. Falling back to using cgroupDriver from kubelet config."
                );
                return Ok(configured.to_owned());
            }
            Err(e) => {
                tracing::debug!(error = %e, attempt, "CRI RuntimeConfig failed");
                last = Some(e);
            }
        }
    }
    Err(CgroupDriverError::Runtime(last.unwrap_or_else(|| {
        CriError::unimplemented("RuntimeConfig", "no attempt was made")
    })))
}

fn chosen(resp: api::RuntimeConfigResponse, configured: &str) -> Result<String, CgroupDriverError> {
    // No Linux section: the runtime has nothing to say (upstream keeps the config's value).
    let Some(linux) = resp.linux else {
        return Ok(configured.to_owned());
    };
    let driver = match api::CgroupDriver::try_from(linux.cgroup_driver) {
        Ok(api::CgroupDriver::Systemd) => "systemd",
        Ok(api::CgroupDriver::Cgroupfs) => "cgroupfs",
        Err(_) => return Err(CgroupDriverError::Unknown(linux.cgroup_driver)),
    };
    tracing::info!(
        cgroup_driver = driver,
        "Using cgroup driver setting received from the CRI runtime"
    );
    Ok(driver.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkubelet_cri::fake::FakeRuntime;

    fn linux(driver: i32) -> Option<api::LinuxRuntimeConfiguration> {
        Some(api::LinuxRuntimeConfiguration {
            cgroup_driver: driver,
        })
    }

    #[tokio::test]
    async fn the_runtime_driver_wins_over_the_config() {
        let fake = FakeRuntime::new();
        fake.set_runtime_config(linux(api::CgroupDriver::Systemd as i32));
        assert_eq!(from_cri(&fake, "cgroupfs").await.unwrap(), "systemd");
        fake.set_runtime_config(linux(api::CgroupDriver::Cgroupfs as i32));
        assert_eq!(from_cri(&fake, "systemd").await.unwrap(), "cgroupfs");
    }

    #[tokio::test]
    async fn unimplemented_keeps_the_configured_driver_at_once() {
        // The fake answers Unimplemented by default, as containerd 1.6 does.
        let fake = FakeRuntime::new();
        assert_eq!(from_cri(&fake, "systemd").await.unwrap(), "systemd");
        assert_eq!(fake.call_count("RuntimeConfig"), 1, "no retry");
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_are_retried_then_fail_start_up() {
        let fake = FakeRuntime::new();
        let down = || CriError::unavailable("RuntimeConfig", "unix:///run/x.sock", "starting");
        fake.fail_next("RuntimeConfig", down());
        fake.set_runtime_config(linux(api::CgroupDriver::Systemd as i32));
        assert_eq!(from_cri(&fake, "cgroupfs").await.unwrap(), "systemd");
        assert_eq!(fake.call_count("RuntimeConfig"), 2);

        let fake = FakeRuntime::new();
        for _ in 0..TRIES {
            fake.fail_next("RuntimeConfig", down());
        }
        let err = from_cri(&fake, "cgroupfs").await.unwrap_err().to_string();
        assert!(
            err.starts_with("asking the runtime for its cgroup driver (KubeletCgroupDriverFromCRI): CRI RuntimeConfig"),
            "{err}"
        );
        assert_eq!(fake.call_count("RuntimeConfig"), TRIES);
    }

    #[tokio::test]
    async fn unknown_driver_values_are_errors() {
        let fake = FakeRuntime::new();
        fake.set_runtime_config(linux(7));
        assert_eq!(
            from_cri(&fake, "cgroupfs").await.unwrap_err().to_string(),
            "asking the runtime for its cgroup driver (KubeletCgroupDriverFromCRI): runtime returned an unknown cgroup driver 7"
        );
    }
}
