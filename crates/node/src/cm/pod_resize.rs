//! cm::pod_resize — applies a resized pod's new totals to its existing pod cgroup (upstream
//! `PodContainerManager.SetPodCgroupConfig` for in-place resize). Receives the pod and the
//! subset of cgroup settings to write (cpu quota/period, cpu shares or memory, as the resize
//! step orders them); emits the cgroupfs writes, v1 or v2 through the `CgroupFs` in use.

use k8s_openapi::api::core::v1::Pod;
use tracing::info;

use super::cgroups::ResourceConfig;
use super::resources::{PodCgroupOptions, resource_config_for_pod};
use super::{CmError, ContainerManager};

impl ContainerManager {
    /// Writes `rc` to the pod's cgroup (fields left `None` are not touched).
    pub fn set_pod_cgroup_config(&self, pod: &Pod, rc: &ResourceConfig) -> Result<(), CmError> {
        let name = self.pod_cgroup_name(pod);
        self.inner
            .fs
            .update(&name, rc)
            .map_err(CmError::PodCgroup)?;
        info!(cgroup = %name, cpu_shares = ?rc.cpu_shares, cpu_quota = ?rc.cpu_quota, memory = ?rc.memory, "resized pod cgroup");
        Ok(())
    }

    /// The pod cgroup settings the pod's resources call for (upstream `ResourceConfigForPod`).
    pub fn pod_resource_config(&self, pod: &Pod) -> ResourceConfig {
        resource_config_for_pod(pod, self.pod_options())
    }

    fn pod_options(&self) -> PodCgroupOptions {
        self.inner.cfg.pod_options
    }
}
