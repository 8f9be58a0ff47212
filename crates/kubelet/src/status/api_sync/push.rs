//! status::api_sync::push — one pod's round trip to the API server (upstream `syncPod`):
//! GET the pod, check it is still the object the status belongs to, PATCH `pods/{name}/status`
//! with a strategic merge patch carrying the uid precondition when the merged status differs,
//! and DELETE it with grace 0 once it is terminal, being deleted and reclaimed. Receives a
//! [`Job`]; emits an [`Outcome`] for the scheduler. Owns no state.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use serde_json::Value;
use tracing::{debug, info};

use super::merge::merge_pod_status;
use super::{ApiSyncError, ApiSyncStats, CanBeDeleted, CouldHaveRunningContainers, StatusTarget};
use crate::apiclient::patch::pod_status_patch;
use crate::clock::Clock;
use crate::status::manager::is_terminal_phase;
use crate::types::{CONFIG_MIRROR_ANNOTATION, PodUid};

/// What the scheduler hands to a push task.
#[derive(Debug, Clone)]
pub(super) struct Job {
    /// The kubelet's pod UID (the static pod's for a static pod).
    pub uid: PodUid,
    pub version: u64,
    pub status: PodStatus,
    pub target: StatusTarget,
    /// Scheduled because the pod looked ready for its final deletion.
    pub for_deletion: bool,
}

impl Job {
    fn pod(&self) -> String {
        format!("{}/{}", self.target.namespace, self.target.name)
    }
}

/// How a push ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// The API holds the kubelet's status (written now, or already equal).
    Synced {
        patched: bool,
        /// The API object carries a deletionTimestamp.
        deleting: bool,
        /// The pod was deleted with grace 0 (or was already gone / recreated when deleting).
        deleted: bool,
    },
    /// No object to write to: gone (404) or recreated under another uid.
    Gone { reason: &'static str },
    /// An API call failed; `synced` if the status itself was written before the failure.
    Failed {
        synced: bool,
        deleting: bool,
        error: ApiSyncError,
    },
}

/// What a push task needs besides its job.
pub(super) struct PushContext {
    pub client: Client,
    pub can_be_deleted: CanBeDeleted,
    pub could_have_running: CouldHaveRunningContainers,
    pub clock: Clock,
    pub stats: Arc<ApiSyncStats>,
    pub request_timeout: Duration,
}

/// An API call that got no answer in time.
#[derive(Debug, thiserror::Error)]
#[error("no answer from the API server within {0:?}")]
struct RequestTimeout(Duration);

impl PushContext {
    /// Makes one API call within `request_timeout` and counts it (404 and 409 are answers,
    /// not failures). The timeout also bounds retries hidden in the client's own layers.
    async fn call<T>(
        &self,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        let r = match tokio::time::timeout(self.request_timeout, request).await {
            Ok(r) => r,
            Err(_) => Err(kube::Error::Service(Box::new(RequestTimeout(
                self.request_timeout,
            )))),
        };
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = &r
            && !matches!(code(e), Some(404 | 409))
        {
            self.stats.failed_requests.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn now(&self) -> Time {
        let secs = self.clock.now().timestamp();
        Time(
            k8s_openapi::jiff::Timestamp::from_second(secs)
                .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        )
    }
}

/// The status patch body, or `None` when the API already has `merged`.
pub(super) fn status_patch_body(
    api_uid: &str,
    api: &PodStatus,
    merged: &PodStatus,
) -> Result<Option<Value>, ApiSyncError> {
    let body = pod_status_patch(api_uid, api, merged).map_err(ApiSyncError::PatchBody)?;
    let changes = body
        .get("status")
        .and_then(Value::as_object)
        .is_some_and(|s| !s.is_empty());
    Ok(changes.then_some(body))
}

/// Whether the kubelet deletes this API pod now (upstream `canBeDeleted`): it is being
/// deleted, is neither a static pod's mirror nor static, its API phase is terminal and its
/// worker reports it terminated with resources reclaimed.
fn can_delete(pod: &Pod, target: &StatusTarget, reclaimed: impl FnOnce() -> bool) -> bool {
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CONFIG_MIRROR_ANNOTATION));
    pod.metadata.deletion_timestamp.is_some()
        && !target.is_static
        && !mirror
        && is_terminal_phase(pod.status.as_ref().and_then(|s| s.phase.as_deref()))
        && reclaimed()
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// One pod's sync. Never panics; every failure is in the outcome.
pub(super) async fn push(ctx: &PushContext, job: &Job) -> Outcome {
    let t = &job.target;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &t.namespace);
    let api_pod = match ctx.call(pods.get(&t.name)).await {
        Ok(p) => p,
        Err(e) if code(&e) == Some(404) => {
            debug!(pod = %job.pod(), uid = %job.uid, api_uid = %t.api_uid, reason = "not found", "pod does not exist in the API; nothing to write");
            return Outcome::Gone {
                reason: "not found",
            };
        }
        Err(source) => {
            return Outcome::Failed {
                synced: false,
                deleting: false,
                error: ApiSyncError::Get {
                    pod: job.pod(),
                    source,
                },
            };
        }
    };
    let found_uid = api_pod.metadata.uid.as_deref().unwrap_or_default();
    if found_uid != t.api_uid {
        info!(pod = %job.pod(), uid = %job.uid, api_uid = %t.api_uid, found_uid, reason = "deleted and recreated", "skipping status update of a recreated pod");
        return Outcome::Gone {
            reason: "recreated",
        };
    }
    let api_status = api_pod.status.clone().unwrap_or_default();
    let merged = merge_pod_status(
        &api_status,
        &job.status,
        (ctx.could_have_running)(&job.uid),
        &ctx.now(),
    );
    let body = match status_patch_body(&t.api_uid, &api_status, &merged) {
        Ok(b) => b,
        Err(error) => {
            return Outcome::Failed {
                synced: false,
                deleting: false,
                error,
            };
        }
    };
    let mut current = api_pod;
    let patched = body.is_some();
    if let Some(body) = body {
        ctx.stats.status_patches.fetch_add(1, Ordering::Relaxed);
        let patched = ctx
            .call(pods.patch_status(&t.name, &PatchParams::default(), &Patch::Strategic(body)))
            .await;
        match patched {
            Ok(p) => {
                debug!(pod = %job.pod(), uid = %job.uid, api_uid = %t.api_uid, version = job.version, reason = "status changed", "pod status written");
                current = p;
            }
            Err(e) if matches!(code(&e), Some(404 | 409)) => {
                info!(pod = %job.pod(), uid = %job.uid, api_uid = %t.api_uid, reason = "gone or recreated during the write", error = %e, "pod status not written");
                return Outcome::Gone {
                    reason: "gone or recreated",
                };
            }
            Err(source) => {
                return Outcome::Failed {
                    synced: false,
                    deleting: false,
                    error: ApiSyncError::Patch {
                        pod: job.pod(),
                        source,
                    },
                };
            }
        }
    } else {
        debug!(pod = %job.pod(), uid = %job.uid, version = job.version, reason = "unchanged", "pod status already up to date in the API");
    }

    let deleting = current.metadata.deletion_timestamp.is_some();
    if !can_delete(&current, t, || (ctx.can_be_deleted)(&job.uid)) {
        return Outcome::Synced {
            patched,
            deleting,
            deleted: false,
        };
    }
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(t.api_uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    ctx.stats.deletes.fetch_add(1, Ordering::Relaxed);
    match ctx.call(pods.delete(&t.name, &params)).await {
        Ok(_) => {
            info!(pod = %job.pod(), uid = %job.uid, reason = "terminated and reclaimed", "pod fully terminated; deleted from the API");
        }
        Err(e) if matches!(code(&e), Some(404 | 409)) => {
            info!(pod = %job.pod(), uid = %job.uid, reason = "already gone or recreated", error = %e, "final delete not needed");
        }
        Err(source) => {
            return Outcome::Failed {
                synced: true,
                deleting,
                error: ApiSyncError::Delete {
                    pod: job.pod(),
                    source,
                },
            };
        }
    }
    Outcome::Synced {
        patched,
        deleting,
        deleted: true,
    }
}

/// Whether a failure is worth retrying soon: transport errors, timeouts, 429 and 5xx. Other
/// client errors (e.g. 422) are retried too, but do not count as an outage.
pub(super) fn is_transient(e: &ApiSyncError) -> bool {
    let source = match e {
        ApiSyncError::Get { source, .. }
        | ApiSyncError::Patch { source, .. }
        | ApiSyncError::Delete { source, .. } => source,
        ApiSyncError::PatchBody(_) => return false,
    };
    match code(source) {
        Some(c) => c == 408 || c == 429 || c >= 500,
        None => true,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn target(is_static: bool) -> StatusTarget {
        StatusTarget {
            namespace: "ns".into(),
            name: "p".into(),
            api_uid: "u".into(),
            is_static,
            ..StatusTarget::default()
        }
    }

    fn api_pod(deleting: bool, phase: &str, mirror: bool) -> Pod {
        let mut meta = ObjectMeta {
            uid: Some("u".into()),
            ..ObjectMeta::default()
        };
        if deleting {
            meta.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        if mirror {
            meta.annotations = Some([(CONFIG_MIRROR_ANNOTATION.to_owned(), "h".to_owned())].into());
        }
        Pod {
            metadata: meta,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn only_terminal_deleting_reclaimed_api_pods_are_deleted() {
        assert!(can_delete(
            &api_pod(true, "Succeeded", false),
            &target(false),
            || true
        ));
        // Not being deleted: a terminal pod keeps its status.
        assert!(!can_delete(
            &api_pod(false, "Succeeded", false),
            &target(false),
            || true
        ));
        // Phase in the API not terminal yet.
        assert!(!can_delete(
            &api_pod(true, "Running", false),
            &target(false),
            || true
        ));
        // Worker not done.
        assert!(!can_delete(
            &api_pod(true, "Failed", false),
            &target(false),
            || false
        ));
        // Mirror pods and static pods are never deleted here.
        assert!(!can_delete(
            &api_pod(true, "Failed", true),
            &target(false),
            || true
        ));
        assert!(!can_delete(
            &api_pod(true, "Failed", false),
            &target(true),
            || true
        ));
    }

    #[test]
    fn patch_body_carries_the_uid_and_is_none_when_unchanged() {
        let api = PodStatus {
            phase: Some("Pending".into()),
            ..PodStatus::default()
        };
        let ours = PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        };
        let body = status_patch_body("u-1", &api, &ours).unwrap().unwrap();
        assert_eq!(body["metadata"]["uid"], "u-1");
        assert_eq!(body["status"]["phase"], "Running");
        assert!(status_patch_body("u-1", &ours, &ours).unwrap().is_none());
    }
}
