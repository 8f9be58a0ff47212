//! The CRI trait implementations of `FakeRuntime`. Each call is recorded, may be delayed
//! (scripted latency) or fail (queued error), then runs its transition in `state.rs` under the
//! mutex; the only awaits (latency, stop grace periods, hung execs) happen with it released.

use std::collections::VecDeque;

use super::FakeRuntime;
use super::images::normalize_image;
use super::state::{ExecPlan, SIGKILL_EXIT, State, StopPlan, StreamRequest};
use crate::api;
use crate::error::CriError;
use crate::traits::{ContainerEventStream, ImageService, RuntimeService};

impl FakeRuntime {
    /// Records the call, applies the scripted latency and returns a queued failure, if any.
    async fn enter(&self, method: &'static str) -> Result<(), CriError> {
        let (fail, delay, panic) = {
            let mut s = self.lock();
            s.calls.push(method.to_string());
            let fail = s.failures.get_mut(method).and_then(VecDeque::pop_front);
            let panic = s.panics.get_mut(method).is_some_and(|n| {
                let due = *n > 0;
                *n = n.saturating_sub(1);
                due
            });
            (fail, s.latency.get(method).copied(), panic)
        };
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        // Outside the lock: the state stays usable after the caller catches the panic.
        assert!(!panic, "FakeRuntime: scripted panic in {method}");
        match fail {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Runs `f` on the state after applying due scripted exits.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = self.lock();
        s.settle();
        let out = f(&mut s);
        s.publish_events();
        out
    }
}

#[async_trait::async_trait]
impl RuntimeService for FakeRuntime {
    async fn version(&self, _req: api::VersionRequest) -> Result<api::VersionResponse, CriError> {
        self.enter("Version").await?;
        Ok(api::VersionResponse {
            version: "0.1.0".to_string(),
            runtime_name: "containerd".to_string(),
            runtime_version: "1.6.20-fake".to_string(),
            runtime_api_version: "v1".to_string(),
        })
    }

    async fn status(&self, _req: api::StatusRequest) -> Result<api::StatusResponse, CriError> {
        self.enter("Status").await?;
        let (conditions, runtime_handlers) = {
            let s = self.lock();
            (s.conditions.clone(), s.status_handlers.clone())
        };
        Ok(api::StatusResponse {
            status: Some(api::RuntimeStatus { conditions }),
            runtime_handlers,
            ..Default::default()
        })
    }

    async fn run_pod_sandbox(
        &self,
        req: api::RunPodSandboxRequest,
    ) -> Result<api::RunPodSandboxResponse, CriError> {
        self.enter("RunPodSandbox").await?;
        let pod_sandbox_id = self.with(|s| s.run_pod_sandbox(req))?;
        Ok(api::RunPodSandboxResponse { pod_sandbox_id })
    }

    async fn stop_pod_sandbox(
        &self,
        req: api::StopPodSandboxRequest,
    ) -> Result<api::StopPodSandboxResponse, CriError> {
        self.enter("StopPodSandbox").await?;
        self.with(|s| s.stop_pod_sandbox(&req.pod_sandbox_id))?;
        Ok(api::StopPodSandboxResponse {})
    }

    async fn remove_pod_sandbox(
        &self,
        req: api::RemovePodSandboxRequest,
    ) -> Result<api::RemovePodSandboxResponse, CriError> {
        self.enter("RemovePodSandbox").await?;
        self.with(|s| s.remove_pod_sandbox(&req.pod_sandbox_id))?;
        Ok(api::RemovePodSandboxResponse {})
    }

    async fn pod_sandbox_status(
        &self,
        req: api::PodSandboxStatusRequest,
    ) -> Result<api::PodSandboxStatusResponse, CriError> {
        self.enter("PodSandboxStatus").await?;
        let status = self.with(|s| s.pod_sandbox_status(&req.pod_sandbox_id))?;
        Ok(api::PodSandboxStatusResponse {
            status: Some(status),
            ..Default::default()
        })
    }

    async fn list_pod_sandbox(
        &self,
        req: api::ListPodSandboxRequest,
    ) -> Result<api::ListPodSandboxResponse, CriError> {
        self.enter("ListPodSandbox").await?;
        let items = self.with(|s| s.list_pod_sandbox(req.filter.as_ref()));
        Ok(api::ListPodSandboxResponse { items })
    }

    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> Result<api::CreateContainerResponse, CriError> {
        self.enter("CreateContainer").await?;
        let container_id = self.with(|s| s.create_container(req))?;
        Ok(api::CreateContainerResponse { container_id })
    }

    async fn start_container(
        &self,
        req: api::StartContainerRequest,
    ) -> Result<api::StartContainerResponse, CriError> {
        self.enter("StartContainer").await?;
        self.with(|s| s.start_container(&req.container_id))?;
        Ok(api::StartContainerResponse {})
    }

    async fn stop_container(
        &self,
        req: api::StopContainerRequest,
    ) -> Result<api::StopContainerResponse, CriError> {
        self.enter("StopContainer").await?;
        let plan = self.with(|s| s.stop_container(&req.container_id, req.timeout))?;
        if let StopPlan::KillAfter(grace) = plan {
            tokio::time::sleep(grace).await;
            self.with(|s| s.exit_container(&req.container_id, SIGKILL_EXIT, false));
        }
        Ok(api::StopContainerResponse {})
    }

    async fn remove_container(
        &self,
        req: api::RemoveContainerRequest,
    ) -> Result<api::RemoveContainerResponse, CriError> {
        self.enter("RemoveContainer").await?;
        self.with(|s| s.remove_container(&req.container_id))?;
        Ok(api::RemoveContainerResponse {})
    }

    async fn list_containers(
        &self,
        req: api::ListContainersRequest,
    ) -> Result<api::ListContainersResponse, CriError> {
        self.enter("ListContainers").await?;
        let containers = self.with(|s| s.list_containers(req.filter.as_ref()));
        Ok(api::ListContainersResponse { containers })
    }

    async fn container_status(
        &self,
        req: api::ContainerStatusRequest,
    ) -> Result<api::ContainerStatusResponse, CriError> {
        self.enter("ContainerStatus").await?;
        let status = self.with(|s| s.container_status(&req.container_id))?;
        Ok(api::ContainerStatusResponse {
            status: Some(status),
            ..Default::default()
        })
    }

    async fn update_container_resources(
        &self,
        req: api::UpdateContainerResourcesRequest,
    ) -> Result<api::UpdateContainerResourcesResponse, CriError> {
        self.enter("UpdateContainerResources").await?;
        self.with(|s| s.update_container_resources(req))?;
        Ok(api::UpdateContainerResourcesResponse {})
    }

    async fn reopen_container_log(
        &self,
        req: api::ReopenContainerLogRequest,
    ) -> Result<api::ReopenContainerLogResponse, CriError> {
        const M: &str = "ReopenContainerLog";
        self.enter(M).await?;
        self.with(|s| {
            s.running_container(M, &req.container_id)
                .map(|_| ())
                .map_err(|e| match e {
                    CriError::Other { .. } => CriError::unknown(M, "container is not running"),
                    e => e,
                })
        })?;
        Ok(api::ReopenContainerLogResponse {})
    }

    async fn exec_sync(
        &self,
        req: api::ExecSyncRequest,
    ) -> Result<api::ExecSyncResponse, CriError> {
        self.enter("ExecSync").await?;
        match self.with(|s| s.exec_sync(&req))? {
            ExecPlan::Reply(resp) => Ok(resp),
            ExecPlan::Hang(timeout) if timeout > 0 => {
                tokio::time::sleep(std::time::Duration::from_secs(timeout.unsigned_abs())).await;
                Err(CriError::DeadlineExceeded {
                    method: "ExecSync",
                    timeout: None,
                    message: format!(
                        "failed to exec in container: timeout {timeout}s exceeded: context deadline exceeded"
                    ),
                })
            }
            ExecPlan::Hang(_) => std::future::pending().await,
        }
    }

    async fn exec(&self, req: api::ExecRequest) -> Result<api::ExecResponse, CriError> {
        const M: &str = "Exec";
        self.enter(M).await?;
        if !(req.stdin || req.stdout || req.stderr) {
            return Err(CriError::InvalidArgument {
                method: M,
                message: "one of stdin, stdout, or stderr must be set".to_string(),
            });
        }
        let url = self.with(|s| {
            s.running_container(M, &req.container_id)?;
            s.stream_requests.push(StreamRequest::Exec(req.clone()));
            Ok::<_, CriError>(s.stream_url("exec"))
        })?;
        Ok(api::ExecResponse { url })
    }

    async fn attach(&self, req: api::AttachRequest) -> Result<api::AttachResponse, CriError> {
        const M: &str = "Attach";
        self.enter(M).await?;
        if !(req.stdin || req.stdout || req.stderr) {
            return Err(CriError::InvalidArgument {
                method: M,
                message: "one of stdin, stdout, and stderr must be set".to_string(),
            });
        }
        let url = self.with(|s| {
            s.running_container(M, &req.container_id)?;
            s.stream_requests.push(StreamRequest::Attach(req.clone()));
            Ok::<_, CriError>(s.stream_url("attach"))
        })?;
        Ok(api::AttachResponse { url })
    }

    async fn port_forward(
        &self,
        req: api::PortForwardRequest,
    ) -> Result<api::PortForwardResponse, CriError> {
        const M: &str = "PortForward";
        self.enter(M).await?;
        let url = self.with(|s| {
            let status = s.pod_sandbox_status(&req.pod_sandbox_id).map_err(|_| {
                CriError::not_found(
                    M,
                    format!(
                        "failed to find sandbox {:?} in store: not found",
                        req.pod_sandbox_id
                    ),
                )
            })?;
            if status.state != api::PodSandboxState::SandboxReady as i32 {
                return Err(CriError::unknown(M, "sandbox container is not running"));
            }
            s.stream_requests
                .push(StreamRequest::PortForward(req.clone()));
            Ok(s.stream_url("portforward"))
        })?;
        Ok(api::PortForwardResponse { url })
    }

    async fn container_stats(
        &self,
        req: api::ContainerStatsRequest,
    ) -> Result<api::ContainerStatsResponse, CriError> {
        const M: &str = "ContainerStats";
        self.enter(M).await?;
        let stats = self.with(|s| {
            s.container_id(&req.container_id)
                .and_then(|id| s.container_stats(&id))
                .ok_or_else(|| {
                    CriError::not_found(
                        M,
                        format!(
                            "failed to find container: an error occurred when try to find container {:?}: not found",
                            req.container_id
                        ),
                    )
                })
        })?;
        Ok(api::ContainerStatsResponse { stats: Some(stats) })
    }

    async fn list_container_stats(
        &self,
        req: api::ListContainerStatsRequest,
    ) -> Result<api::ListContainerStatsResponse, CriError> {
        self.enter("ListContainerStats").await?;
        let stats = self.with(|s| s.list_container_stats(req.filter.as_ref()));
        Ok(api::ListContainerStatsResponse { stats })
    }

    async fn pod_sandbox_stats(
        &self,
        req: api::PodSandboxStatsRequest,
    ) -> Result<api::PodSandboxStatsResponse, CriError> {
        const M: &str = "PodSandboxStats";
        self.enter(M).await?;
        let stats = self.with(|s| {
            s.sandbox_id(&req.pod_sandbox_id)
                .and_then(|id| s.pod_sandbox_stats(&id))
                .ok_or_else(|| {
                    CriError::not_found(
                        M,
                        format!(
                            "an error occurred when trying to find sandbox {:?}: not found",
                            req.pod_sandbox_id
                        ),
                    )
                })
        })?;
        Ok(api::PodSandboxStatsResponse { stats: Some(stats) })
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: api::ListPodSandboxStatsRequest,
    ) -> Result<api::ListPodSandboxStatsResponse, CriError> {
        self.enter("ListPodSandboxStats").await?;
        let stats = self.with(|s| s.list_pod_sandbox_stats(req.filter.as_ref()));
        Ok(api::ListPodSandboxStatsResponse { stats })
    }

    async fn update_runtime_config(
        &self,
        req: api::UpdateRuntimeConfigRequest,
    ) -> Result<api::UpdateRuntimeConfigResponse, CriError> {
        self.enter("UpdateRuntimeConfig").await?;
        if let Some(cidr) = req
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
            .filter(|c| !c.is_empty())
        {
            self.lock().pod_cidr = cidr;
        }
        Ok(api::UpdateRuntimeConfigResponse {})
    }

    async fn checkpoint_container(
        &self,
        _req: api::CheckpointContainerRequest,
    ) -> Result<api::CheckpointContainerResponse, CriError> {
        const M: &str = "CheckpointContainer";
        self.enter(M).await?;
        Err(CriError::unimplemented(
            M,
            "method CheckpointContainer not implemented",
        ))
    }

    async fn runtime_config(
        &self,
        _req: api::RuntimeConfigRequest,
    ) -> Result<api::RuntimeConfigResponse, CriError> {
        const M: &str = "RuntimeConfig";
        self.enter(M).await?;
        match self.lock().runtime_config {
            Some(linux) => Ok(api::RuntimeConfigResponse { linux: Some(linux) }),
            None => Err(CriError::unimplemented(
                M,
                "unknown method RuntimeConfig for service runtime.v1.RuntimeService",
            )),
        }
    }

    async fn get_container_events(
        &self,
        _req: api::GetEventsRequest,
    ) -> Result<ContainerEventStream, CriError> {
        self.enter("GetContainerEvents").await?;
        let rx = {
            let mut s = self.lock();
            if !s.events.enabled {
                return Err(CriError::unimplemented(
                    "GetContainerEvents",
                    "unknown method GetContainerEvents for service runtime.v1.RuntimeService",
                ));
            }
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            s.subscribe(tx);
            rx
        };
        // containerd serves the stream from Go's gRPC server, which sends the response headers
        // with the first message: a client's open returns only once the first event exists
        // (or with the error that ends the stream before any).
        let mut rx = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        match tokio_stream::StreamExt::next(&mut rx).await {
            Some(Err(e)) => Err(e),
            Some(Ok(first)) => Ok(Box::pin(tokio_stream::StreamExt::chain(
                tokio_stream::once(Ok(first)),
                rx,
            ))),
            None => Ok(Box::pin(tokio_stream::empty())),
        }
    }
}

fn image_name(spec: Option<&api::ImageSpec>) -> String {
    spec.map(|i| i.image.clone()).unwrap_or_default()
}

#[async_trait::async_trait]
impl ImageService for FakeRuntime {
    async fn list_images(
        &self,
        req: api::ListImagesRequest,
    ) -> Result<api::ListImagesResponse, CriError> {
        self.enter("ListImages").await?;
        let wanted = image_name(req.filter.as_ref().and_then(|f| f.image.as_ref()));
        let s = self.lock();
        let images = if wanted.is_empty() {
            s.images.all().iter().map(|i| i.to_api()).collect()
        } else {
            s.images
                .get(&wanted)
                .map(|i| i.to_api())
                .into_iter()
                .collect()
        };
        Ok(api::ListImagesResponse { images })
    }

    async fn image_status(
        &self,
        req: api::ImageStatusRequest,
    ) -> Result<api::ImageStatusResponse, CriError> {
        self.enter("ImageStatus").await?;
        let name = image_name(req.image.as_ref());
        let image = self.lock().images.get(&name).map(|i| i.to_api());
        Ok(api::ImageStatusResponse {
            image,
            ..Default::default()
        })
    }

    async fn pull_image(
        &self,
        req: api::PullImageRequest,
    ) -> Result<api::PullImageResponse, CriError> {
        const M: &str = "PullImage";
        self.enter(M).await?;
        let name = image_name(req.image.as_ref());
        let normalized = normalize_image(&name).map_err(|e| {
            CriError::unknown(M, format!("failed to parse image reference {name:?}: {e}"))
        })?;
        let mut s = self.lock();
        s.pulls.push((normalized.clone(), req.auth.clone()));
        if let Some((user, password)) = s.pull_credentials.get(&normalized) {
            let given = req
                .auth
                .as_ref()
                .map(|a| (a.username.as_str(), a.password.as_str()));
            if given != Some((user.as_str(), password.as_str())) {
                let host = normalized.split('/').next().unwrap_or_default();
                let tag = normalized.rsplit(':').next().unwrap_or_default();
                return Err(CriError::unknown(
                    M,
                    format!(
                        "failed to pull and unpack image {normalized:?}: failed to resolve reference {normalized:?}: pulling from host {host} failed with status code [manifests {tag}]: 401 Unauthorized"
                    ),
                ));
            }
        }
        if let Some(message) = s.pull_failures.get(&normalized) {
            return Err(CriError::unknown(
                M,
                format!("failed to pull and unpack image {normalized:?}: {message}"),
            ));
        }
        let image_ref = s
            .images
            .add(&normalized)
            .map(|i| i.id.clone())
            .map_err(|e| CriError::unknown(M, e))?;
        Ok(api::PullImageResponse { image_ref })
    }

    async fn remove_image(
        &self,
        req: api::RemoveImageRequest,
    ) -> Result<api::RemoveImageResponse, CriError> {
        self.enter("RemoveImage").await?;
        let name = image_name(req.image.as_ref());
        self.lock().images.remove(&name);
        Ok(api::RemoveImageResponse {})
    }

    async fn image_fs_info(
        &self,
        _req: api::ImageFsInfoRequest,
    ) -> Result<api::ImageFsInfoResponse, CriError> {
        self.enter("ImageFsInfo").await?;
        Ok(self.with(State::image_fs_info))
    }
}
