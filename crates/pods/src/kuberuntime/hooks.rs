//! Container lifecycle hooks (upstream `lifecycle/handlers.go` + `executePreStopHook`): runs a
//! postStart or preStop handler (exec via CRI ExecSync, httpGet, sleep) against one container.
//! Receives the handler, the container spec/ID and the pod IP; emits `Ok` or the upstream error
//! message. The callers (`start`, `kill`) report events and decide what a failure means.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use rkubelet_cri::RuntimeService;
use rkubelet_cri::api::ExecSyncRequest;

use crate::kuberuntime::labels::format_pod;
use crate::prober::handlers::{Action, Outcome, Target, run_http_get};

/// Upstream gives an HTTP hook no deadline of its own; this bounds a hung server (the preStop
/// caller cuts it at the grace period anyway).
const HTTP_HOOK_TIMEOUT: Duration = Duration::from_secs(3600);

/// Where a hook runs.
pub struct HookTarget<'a> {
    pub runtime: &'a dyn RuntimeService,
    pub pod: &'a Pod,
    pub container: &'a Container,
    pub container_id: &'a str,
    pub pod_ip: &'a str,
}

/// Runs a lifecycle handler to completion (upstream `handlerRunner.Run`).
pub async fn run_hook(handler: &LifecycleHandler, t: &HookTarget<'_>) -> Result<(), String> {
    match Action::of_hook(handler) {
        Action::Exec(exec) => {
            let cmd = exec.command.clone().unwrap_or_default();
            let result = t
                .runtime
                .exec_sync(ExecSyncRequest {
                    container_id: t.container_id.to_owned(),
                    cmd: cmd.clone(),
                    timeout: 0,
                })
                .await;
            let (error, output) = match result {
                Ok(r) if r.exit_code == 0 => return Ok(()),
                Ok(r) => (
                    format!("command '{}' exited with {}: ", cmd.join(" "), r.exit_code),
                    // Bounded as an exec probe's output (upstream keeps it whole).
                    crate::prober::handlers::exec_output(&r.stdout, &r.stderr),
                ),
                Err(e) => (e.to_string(), String::new()),
            };
            Err(format!(
                "Exec lifecycle hook ({cmd:?}) for Container {:?} in Pod {:?} failed - error: {error}, message: {output:?}",
                t.container.name,
                format_pod(t.pod)
            ))
        }
        Action::HttpGet(h) => {
            let target = Target {
                runtime: t.runtime,
                container: t.container,
                container_id: t.container_id,
                pod_ip: t.pod_ip,
                timeout: HTTP_HOOK_TIMEOUT,
            };
            let outcome = run_http_get(h, &target).await;
            // Upstream only fails an HTTP hook when the request itself fails.
            if outcome.outcome == Outcome::Failure && !outcome.output.starts_with("HTTP probe") {
                Err(format!(
                    "HTTP lifecycle hook ({}) for Container {:?} in Pod {:?} failed - error: {}",
                    h.path.as_deref().unwrap_or(""),
                    t.container.name,
                    format_pod(t.pod),
                    outcome.output
                ))
            } else {
                Ok(())
            }
        }
        Action::Sleep(secs) => {
            tokio::time::sleep(Duration::from_secs(u64::try_from(secs).unwrap_or(0))).await;
            Ok(())
        }
        Action::TcpSocket(_) | Action::Grpc(_) | Action::None => Err(format!(
            "invalid lifecycle handler for Container {:?} in Pod {:?}: only exec, httpGet and sleep are supported",
            t.container.name,
            format_pod(t.pod)
        )),
    }
}

/// Runs a preStop hook for at most `grace_seconds` (upstream `executePreStopHook`); returns
/// the whole seconds it took (what is subtracted from the grace period) and the hook error.
pub async fn run_pre_stop(
    handler: &LifecycleHandler,
    t: &HookTarget<'_>,
    grace_seconds: i64,
) -> (i64, Option<String>) {
    let start = tokio::time::Instant::now();
    let limit = Duration::from_secs(u64::try_from(grace_seconds).unwrap_or(0));
    let error = match tokio::time::timeout(limit, run_hook(handler, t)).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        // Cut at the grace period: not a hook failure.
        Err(_) => None,
    };
    let took = i64::try_from(start.elapsed().as_secs()).unwrap_or(i64::MAX);
    (took, error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ExecAction, SleepAction};
    use rkubelet_cri::fake::{ExecBehaviour, FakeRuntime};

    fn handler_sleep(secs: i64) -> LifecycleHandler {
        LifecycleHandler {
            sleep: Some(SleepAction { seconds: secs }),
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pre_stop_time_is_counted_and_cut_at_grace() {
        let rt = FakeRuntime::new();
        let pod = Pod::default();
        let c = Container {
            name: "c".into(),
            ..Default::default()
        };
        let t = HookTarget {
            runtime: &rt,
            pod: &pod,
            container: &c,
            container_id: "id",
            pod_ip: "",
        };
        for (sleep, grace, took) in [(0, 5, 0), (3, 5, 3), (10, 4, 4)] {
            let (elapsed, err) = run_pre_stop(&handler_sleep(sleep), &t, grace).await;
            assert_eq!((elapsed, err), (took, None), "sleep {sleep} grace {grace}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn exec_hook_failure_names_container_and_output() {
        let rt = FakeRuntime::new();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}
        }))
        .expect("pod");
        let c = Container {
            name: "c".into(),
            ..Default::default()
        };
        let (_sid, cid) = crate_fake_running(&rt, "c").await;
        rt.on_exec(
            "c",
            ExecBehaviour::Reply {
                exit_code: 2,
                stdout: b"bad".to_vec(),
                stderr: Vec::new(),
            },
        );
        let t = HookTarget {
            runtime: &rt,
            pod: &pod,
            container: &c,
            container_id: &cid,
            pod_ip: "",
        };
        let h = LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["false".into()]),
            }),
            ..Default::default()
        };
        let err = run_hook(&h, &t).await.expect_err("hook fails");
        assert!(
            err.starts_with(
                "Exec lifecycle hook ([\"false\"]) for Container \"c\" in Pod \"p_ns(u1)\" failed"
            ),
            "{err}"
        );
        assert!(err.contains("message: \"bad\""), "{err}");
        assert_eq!(run_hook(&handler_sleep(0), &t).await, Ok(()));
    }

    /// A running container named `name` in a fresh sandbox of the fake runtime.
    async fn crate_fake_running(rt: &FakeRuntime, name: &str) -> (String, String) {
        use rkubelet_cri::api;
        let sb = rt
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(api::PodSandboxConfig {
                    metadata: Some(api::PodSandboxMetadata {
                        name: "p".into(),
                        uid: "u1".into(),
                        namespace: "ns".into(),
                        attempt: 0,
                    }),
                    ..Default::default()
                }),
                runtime_handler: String::new(),
            })
            .await
            .expect("sandbox")
            .pod_sandbox_id;
        let image = rt.add_image("busybox");
        let cid = rt
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: sb.clone(),
                config: Some(api::ContainerConfig {
                    metadata: Some(api::ContainerMetadata {
                        name: name.into(),
                        attempt: 0,
                    }),
                    image: Some(api::ImageSpec {
                        image,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                sandbox_config: None,
            })
            .await
            .expect("create")
            .container_id;
        rt.start_container(api::StartContainerRequest {
            container_id: cid.clone(),
        })
        .await
        .expect("start");
        (sb, cid)
    }
}
