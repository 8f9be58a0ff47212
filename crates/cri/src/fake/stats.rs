//! Resource-usage answers of the fake runtime (`ContainerStats`, `PodSandboxStats`, their list
//! forms, `ImageFsInfo`). Receives the state under its lock; emits protocol stats with zero
//! usage and the current timestamps (the fake runs no processes).

use super::state::State;
use crate::api;
use crate::api::{ContainerState, PodSandboxState};

/// Where containerd's overlayfs snapshotter keeps its data.
const SNAPSHOTTER_MOUNT: &str = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs";

impl State {
    pub fn container_stats(&mut self, cid: &str) -> Option<api::ContainerStats> {
        let now = self.clock.now();
        let c = self.containers.get(cid)?;
        let zero = Some(api::UInt64Value { value: 0 });
        Some(api::ContainerStats {
            attributes: Some(api::ContainerAttributes {
                id: c.id.clone(),
                metadata: c.config.metadata.clone(),
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
            }),
            cpu: Some(api::CpuUsage {
                timestamp: now,
                usage_core_nano_seconds: zero,
                usage_nano_cores: zero,
            }),
            memory: Some(api::MemoryUsage {
                timestamp: now,
                working_set_bytes: zero,
                available_bytes: zero,
                usage_bytes: zero,
                rss_bytes: zero,
                page_faults: zero,
                major_page_faults: zero,
            }),
            writable_layer: Some(api::FilesystemUsage {
                timestamp: now,
                fs_id: Some(api::FilesystemIdentifier {
                    mountpoint: SNAPSHOTTER_MOUNT.to_string(),
                }),
                used_bytes: zero,
                inodes_used: zero,
            }),
            swap: None,
        })
    }

    pub fn list_container_stats(
        &mut self,
        filter: Option<&api::ContainerStatsFilter>,
    ) -> Vec<api::ContainerStats> {
        let f = filter.cloned().unwrap_or_default();
        let cf = api::ContainerFilter {
            id: f.id,
            state: Some(api::ContainerStateValue {
                state: ContainerState::ContainerRunning as i32,
            }),
            pod_sandbox_id: f.pod_sandbox_id,
            label_selector: f.label_selector,
        };
        let ids: Vec<String> = self
            .list_containers(Some(&cf))
            .into_iter()
            .map(|c| c.id)
            .collect();
        ids.iter()
            .filter_map(|id| self.container_stats(id))
            .collect()
    }

    pub fn pod_sandbox_stats(&mut self, sid: &str) -> Option<api::PodSandboxStats> {
        let now = self.clock.now();
        let sb = self.sandboxes.get(sid)?;
        let attributes = api::PodSandboxAttributes {
            id: sb.id.clone(),
            metadata: Some(sb.metadata()),
            labels: sb.config.labels.clone(),
            annotations: sb.config.annotations.clone(),
        };
        let running: Vec<String> = self
            .containers
            .values()
            .filter(|c| c.sandbox_id == sid && c.state == ContainerState::ContainerRunning)
            .map(|c| c.id.clone())
            .collect();
        let containers = running
            .iter()
            .filter_map(|id| self.container_stats(id))
            .collect();
        let zero = Some(api::UInt64Value { value: 0 });
        Some(api::PodSandboxStats {
            attributes: Some(attributes),
            linux: Some(api::LinuxPodSandboxStats {
                cpu: Some(api::CpuUsage {
                    timestamp: now,
                    usage_core_nano_seconds: zero,
                    usage_nano_cores: zero,
                }),
                memory: Some(api::MemoryUsage {
                    timestamp: now,
                    working_set_bytes: zero,
                    available_bytes: zero,
                    usage_bytes: zero,
                    rss_bytes: zero,
                    page_faults: zero,
                    major_page_faults: zero,
                }),
                network: None,
                process: None,
                containers,
            }),
            windows: None,
        })
    }

    pub fn list_pod_sandbox_stats(
        &mut self,
        filter: Option<&api::PodSandboxStatsFilter>,
    ) -> Vec<api::PodSandboxStats> {
        let f = filter.cloned().unwrap_or_default();
        let sf = api::PodSandboxFilter {
            id: f.id,
            state: Some(api::PodSandboxStateValue {
                state: PodSandboxState::SandboxReady as i32,
            }),
            label_selector: f.label_selector,
        };
        let ids: Vec<String> = self
            .list_pod_sandbox(Some(&sf))
            .into_iter()
            .map(|s| s.id)
            .collect();
        ids.iter()
            .filter_map(|id| self.pod_sandbox_stats(id))
            .collect()
    }

    pub fn image_fs_info(&mut self) -> api::ImageFsInfoResponse {
        let now = self.clock.now();
        let used: u64 = self.images.all().iter().map(|i| i.size).sum();
        let inodes = u64::try_from(self.images.all().len()).unwrap_or(0) * 100;
        api::ImageFsInfoResponse {
            image_filesystems: vec![api::FilesystemUsage {
                timestamp: now,
                fs_id: Some(api::FilesystemIdentifier {
                    mountpoint: SNAPSHOTTER_MOUNT.to_string(),
                }),
                used_bytes: Some(api::UInt64Value { value: used }),
                inodes_used: Some(api::UInt64Value { value: inodes }),
            }],
            container_filesystems: Vec::new(),
        }
    }
}
