//! allocation::status — what in-place resize adds to a pod's generated API status: the
//! `PodResizePending`/`PodResizeInProgress` conditions, `containerStatuses[].allocatedResources`
//! (the allocated requests) and, for running containers, `containerStatuses[].resources` (the
//! actuated requests and limits). Receives the generated status; emits it amended.

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use super::AllocationManager;
use crate::allocation::resize_conditions::{POD_RESIZE_IN_PROGRESS, POD_RESIZE_PENDING};
use crate::types::PodExt;

impl AllocationManager {
    /// Amends a generated status with the pod's allocation, actuation and resize conditions.
    pub fn apply_to_status(&self, pod: &Pod, status: &mut PodStatus) {
        let uid = pod.uid();
        let mut conditions = status.conditions.take().unwrap_or_default();
        conditions.retain(|c| c.type_ != POD_RESIZE_PENDING && c.type_ != POD_RESIZE_IN_PROGRESS);
        conditions.extend(self.conditions().get(uid));
        status.conditions = (!conditions.is_empty()).then_some(conditions);
        for cs in status
            .container_statuses
            .iter_mut()
            .flatten()
            .chain(status.init_container_statuses.iter_mut().flatten())
        {
            let Some(alloc) = self.allocated_resources(uid, &cs.name) else {
                continue;
            };
            cs.allocated_resources = alloc.requests.clone().filter(|r| !r.is_empty());
            let running = cs.state.as_ref().is_some_and(|s| s.running.is_some());
            if running {
                let actual = self.actuated_resources(uid, &cs.name).unwrap_or(alloc);
                cs.resources = Some(actual);
            }
        }
    }
}
