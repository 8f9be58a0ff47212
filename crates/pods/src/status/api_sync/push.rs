//! status::api_sync::push — one pod's round trip to the API server (upstream `syncPod`):
//! start from the pod as the watch (or the syncer's own last write) last saw it, check it is
//! still the object the status belongs to, PATCH `pods/{name}/status` with a strategic merge
//! patch carrying the uid and that image's resourceVersion as preconditions when the merged
//! status differs, and DELETE it with grace 0 once it is terminal, being deleted and
//! reclaimed. Upstream GETs the pod before every write; here a GET happens only when there is
//! no pre-image or the server refuses it (409: the object changed since, so the merge is
//! redone on the current object, never applied to a stale one). Receives a [`Job`]; emits an
//! [`Outcome`] for the scheduler. Owns no state.

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
use crate::apiclient::throttle::ThrottleError;
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
    /// Where to start instead of a GET (see [`choose_pre_image`]).
    pub pre_image: Option<ApiView>,
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
        /// The status was written: the server's answer, the next push's pre-image.
        written: Option<Box<Written>>,
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
/// worker reports it terminated with resources reclaimed. From a pre-image this is safe
/// without a GET: a deletionTimestamp and a terminal phase are never taken back.
fn can_delete(pod: &ApiView, target: &StatusTarget, reclaimed: impl FnOnce() -> bool) -> bool {
    pod.deleting
        && !target.is_static
        && !pod.mirror
        && is_terminal_phase(pod.status.phase.as_deref())
        && reclaimed()
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// The API object as far as a push needs it: its uid, resourceVersion, status, deletion and
/// mirror marks. Built from a GET or PATCH answer, or (without a request) from the pod
/// source's watched copy or the syncer's record of its own last write.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct ApiView {
    pub uid: String,
    /// `None` or empty: the server gave none; such a view is never used as a pre-image.
    pub resource_version: Option<String>,
    pub status: PodStatus,
    pub deleting: bool,
    pub mirror: bool,
}

impl ApiView {
    pub fn of(pod: &Pod) -> Self {
        Self {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            resource_version: pod.metadata.resource_version.clone(),
            status: pod.status.clone().unwrap_or_default(),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            mirror: pod
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(CONFIG_MIRROR_ANNOTATION)),
        }
    }

    /// The resourceVersion to send as a precondition, if there is a usable one.
    fn precondition(&self) -> Option<&str> {
        self.resource_version.as_deref().filter(|rv| !rv.is_empty())
    }
}

/// What the syncer learned from a successful status write: the server's object after it and
/// the resourceVersion of the image the write was based on (a watched copy still at that
/// version is older than `after`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Written {
    pub based_on: Option<String>,
    pub after: ApiView,
}

/// The pre-image a push starts from instead of a GET: the watched copy, unless it is still
/// the image the syncer's own last write was based on — then the write's answer is newer.
/// `None` (GET first) when neither carries a resourceVersion.
pub(super) fn choose_pre_image(
    watched: Option<ApiView>,
    written: Option<&Written>,
) -> Option<ApiView> {
    let watched = watched.filter(|v| v.precondition().is_some())?;
    if let Some(w) = written
        && w.after.uid == watched.uid
        && w.after.precondition().is_some()
        && w.based_on.as_deref() == watched.precondition()
    {
        return Some(w.after.clone());
    }
    Some(watched)
}

/// Why a pre-image was not written on.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("the watched copy is of another object (uid {0:?})")]
    OtherObject(String),
    #[error("the server refused the write: {0}")]
    Server(#[source] kube::Error),
}

/// Where a push's view of the API object came from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Source {
    /// A pre-image: the PATCH carries its resourceVersion, so a stale one is refused (409).
    PreImage,
    /// A GET just now: the PATCH carries only the uid precondition (as upstream).
    Get,
}

/// One pod's sync. Never panics; every failure is in the outcome. Starts from the job's
/// pre-image when it has one (no GET); a refused pre-image (409 Conflict, or a 400/422 for a
/// resourceVersion the server does not accept) falls back to GET and one more try.
pub(super) async fn push(ctx: &PushContext, job: &Job) -> Outcome {
    if let Some(pre) = &job.pre_image {
        match sync_from(ctx, job, pre.clone(), Source::PreImage).await {
            Ok(outcome) => return outcome,
            Err(refused) => {
                ctx.stats.stale_pre_images.fetch_add(1, Ordering::Relaxed);
                debug!(pod = %job.pod(), uid = %job.uid, resource_version = ?pre.resource_version, error = %refused, reason = "pre-image refused", "reading the pod before writing its status");
            }
        }
    }
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
    match sync_from(ctx, job, ApiView::of(&api_pod), Source::Get).await {
        Ok(outcome) => outcome,
        // Not produced for a GET view; a refusal here means the object changed hands.
        Err(_) => Outcome::Gone {
            reason: "gone or recreated",
        },
    }
}

/// The rest of a push from `view`: merge, PATCH when the merge differs, final DELETE when
/// due. `Err` only for a refused pre-image.
async fn sync_from(
    ctx: &PushContext,
    job: &Job,
    view: ApiView,
    source: Source,
) -> Result<Outcome, Refused> {
    let t = &job.target;
    if view.uid != t.api_uid {
        if source == Source::PreImage {
            // The watched copy belongs to another object; let a GET decide.
            return Err(Refused::OtherObject(view.uid));
        }
        info!(pod = %job.pod(), uid = %job.uid, api_uid = %t.api_uid, found_uid = %view.uid, reason = "deleted and recreated", "skipping status update of a recreated pod");
        return Ok(Outcome::Gone {
            reason: "recreated",
        });
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &t.namespace);
    let merged = merge_pod_status(
        &view.status,
        &job.status,
        (ctx.could_have_running)(&job.uid),
        &ctx.now(),
    );
    let body = match status_patch_body(&t.api_uid, &view.status, &merged) {
        Ok(b) => b,
        Err(error) => {
            return Ok(Outcome::Failed {
                synced: false,
                deleting: false,
                error,
            });
        }
    };
    let mut current = view;
    let mut written = None;
    let patched = body.is_some();
    if let Some(mut body) = body {
        if source == Source::PreImage
            && let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert(
                "resourceVersion".into(),
                Value::from(current.precondition().unwrap_or_default()),
            );
        }
        ctx.stats.status_patches.fetch_add(1, Ordering::Relaxed);
        let answer = ctx
            .call(pods.patch_status(&t.name, &PatchParams::default(), &Patch::Strategic(body)))
            .await;
        match answer {
            Ok(p) => {
                debug!(pod = %job.pod(), uid = %job.uid, api_uid = %t.api_uid, version = job.version, reason = "status changed", "pod status written");
                let after = ApiView::of(&p);
                written = Some(Box::new(Written {
                    based_on: current.resource_version.clone(),
                    after: after.clone(),
                }));
                current = after;
            }
            Err(e) if source == Source::PreImage && matches!(code(&e), Some(400 | 409 | 422)) => {
                return Err(Refused::Server(e));
            }
            Err(e) if matches!(code(&e), Some(404 | 409)) => {
                info!(pod = %job.pod(), uid = %job.uid, api_uid = %t.api_uid, reason = "gone or recreated during the write", error = %e, "pod status not written");
                return Ok(Outcome::Gone {
                    reason: "gone or recreated",
                });
            }
            Err(source) => {
                return Ok(Outcome::Failed {
                    synced: false,
                    deleting: false,
                    error: ApiSyncError::Patch {
                        pod: job.pod(),
                        source,
                    },
                });
            }
        }
    } else {
        debug!(pod = %job.pod(), uid = %job.uid, version = job.version, reason = "unchanged", "pod status already up to date in the API");
    }

    let deleting = current.deleting;
    if !can_delete(&current, t, || (ctx.can_be_deleted)(&job.uid)) {
        return Ok(Outcome::Synced {
            patched,
            deleting,
            deleted: false,
            written,
        });
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
            return Ok(Outcome::Failed {
                synced: true,
                deleting,
                error: ApiSyncError::Delete {
                    pod: job.pod(),
                    source,
                },
            });
        }
    }
    Ok(Outcome::Synced {
        patched,
        deleting,
        deleted: true,
        written: None,
    })
}

/// Whether a failure is worth retrying soon: transport errors, timeouts, 429 and 5xx. Other
/// client errors (e.g. 422) are retried too, but do not count as an outage.
pub(super) fn is_transient(e: &ApiSyncError) -> bool {
    let Some(source) = request_error(e) else {
        return false;
    };
    match code(source) {
        Some(c) => c == 408 || c == 429 || c >= 500,
        None => true,
    }
}

/// The client's error of a request that failed (none for a patch that could not be built).
fn request_error(e: &ApiSyncError) -> Option<&kube::Error> {
    match e {
        ApiSyncError::Get { source, .. }
        | ApiSyncError::Patch { source, .. }
        | ApiSyncError::Delete { source, .. } => Some(source),
        ApiSyncError::PatchBody(_) => None,
    }
}

/// How long the kubelet's own API throttle still holds requests when `e` is a request it did
/// not send because the server asked to retry after a time (`Retry-After`): the push then goes
/// again as soon as the hold ends, as client-go retries such a request itself, instead of
/// after its backoff (which could be the whole sync period). A throttle backing off from a
/// failing server answers `None`: its next probe time is no promise the server is back.
pub(super) fn throttle_hold(e: &ApiSyncError) -> Option<Duration> {
    let Some(kube::Error::Service(inner)) = request_error(e) else {
        return None;
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(inner.as_ref());
    while let Some(err) = cause {
        if let Some(ThrottleError::RetryAfter { left, .. }) = err.downcast_ref::<ThrottleError>() {
            return Some(*left);
        }
        cause = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn a_request_held_for_retry_after_is_retried_when_the_hold_ends() {
        let patch = |source| ApiSyncError::Patch {
            pod: "ns/p".into(),
            source,
        };
        let held = ThrottleError::RetryAfter {
            retry_after: Duration::from_secs(3),
            left: Duration::from_millis(40),
        };
        assert_eq!(
            throttle_hold(&patch(kube::Error::Service(Box::new(held)))),
            Some(Duration::from_millis(40))
        );
        let backing_off = ThrottleError::BackingOff {
            failures: 4,
            left: Duration::from_millis(900),
        };
        assert_eq!(
            throttle_hold(&patch(kube::Error::Service(Box::new(backing_off)))),
            None
        );
        let refused = kube::Error::Api(
            kube::core::Status::failure("too many requests", "TooManyRequests")
                .with_code(429)
                .boxed(),
        );
        assert_eq!(throttle_hold(&patch(refused)), None);
    }

    fn target(is_static: bool) -> StatusTarget {
        StatusTarget {
            namespace: "ns".into(),
            name: "p".into(),
            api_uid: "u".into(),
            is_static,
            ..StatusTarget::default()
        }
    }

    fn api_pod(deleting: bool, phase: &str, mirror: bool) -> ApiView {
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
        ApiView::of(&Pod {
            metadata: meta,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        })
    }

    fn view(uid: &str, rv: Option<&str>, phase: &str) -> ApiView {
        ApiView {
            uid: uid.into(),
            resource_version: rv.map(Into::into),
            status: PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            },
            ..ApiView::default()
        }
    }

    #[test]
    fn pre_image_is_the_watched_copy_unless_our_write_is_newer() {
        let watched = view("u", Some("10"), "Pending");
        // Nothing written yet: the watched copy.
        assert_eq!(
            choose_pre_image(Some(watched.clone()), None),
            Some(watched.clone())
        );
        // Our write was based on rv 10 and the watch still shows 10: our answer is newer.
        let written = Written {
            based_on: Some("10".into()),
            after: view("u", Some("11"), "Running"),
        };
        assert_eq!(
            choose_pre_image(Some(watched.clone()), Some(&written)),
            Some(written.after.clone())
        );
        // The watch moved on (our write, or someone else's after it): the watched copy.
        let moved = view("u", Some("12"), "Running");
        assert_eq!(
            choose_pre_image(Some(moved.clone()), Some(&written)),
            Some(moved)
        );
        // A write to an older object of the same name is never used.
        let other = Written {
            based_on: Some("10".into()),
            after: view("old", Some("11"), "Running"),
        };
        assert_eq!(
            choose_pre_image(Some(watched.clone()), Some(&other)),
            Some(watched)
        );
        // No (or an empty) resourceVersion from the server: no pre-image, GET first.
        assert_eq!(
            choose_pre_image(Some(view("u", None, "Pending")), None),
            None
        );
        assert_eq!(
            choose_pre_image(Some(view("u", Some(""), "Pending")), Some(&written)),
            None
        );
        assert_eq!(choose_pre_image(None, Some(&written)), None);
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
