//! Image manager (upstream `images.imageManager` + pullers): makes sure a container's image is
//! on the node before the container is created. Owns the image-pull backoff (keyed
//! `<pod uid>_<image>`), the last pull error of each key, and the pull concurrency limit
//! (serial by default). Receives a pod and container; talks to the CRI `ImageService`; emits
//! the upstream events (Pulling, Pulled, Failed, BackOff, ErrImageNeverPull, InspectFailed) and
//! an `ImageError` whose reason is the container's waiting reason. Submodules: `gc` (image
//! garbage collection) and `pull_limits` (`registryPullQPS`/`registryBurst`).
//!
//! Credentials (upstream `EnsureImageExists` + `PullImage`): the pod's pull secrets, then the
//! node-wide docker config files, then the credential provider plugins, give every credential
//! whose registry location matches the image (`crate::credentialprovider`); the pull tries
//! them in that order and stops at the first success; with none it pulls anonymously. When
//! all fail, the error is the runtime's message (several: `[first, second]`, as Go's error
//! aggregate).

pub mod gc;
pub mod pull_limits;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use rkubelet_cri::api::{Image, ImageSpec, ImageStatusRequest, PodSandboxConfig, PullImageRequest};
use rkubelet_cri::error::go_duration;
use rkubelet_cri::{CriError, ImageService};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::credentialprovider::AuthConfig;
use crate::credentialprovider::node_config::NodeDockerConfig;
use crate::credentialprovider::plugin::CredentialProviders;
use crate::credentialprovider::secrets::make_docker_keyring;
use crate::events::{EventRecorder, EventType};
use crate::sync;
use crate::types::PodExt;

/// The waiting reason of a container whose image is not usable (upstream `images/types.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageErrorReason {
    ErrImagePull,
    ImagePullBackOff,
    ErrImageNeverPull,
    InvalidImageName,
    ImageInspectError,
    RegistryUnavailable,
    SignatureValidationFailed,
}

impl ImageErrorReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ErrImagePull => "ErrImagePull",
            Self::ImagePullBackOff => "ImagePullBackOff",
            Self::ErrImageNeverPull => "ErrImageNeverPull",
            Self::InvalidImageName => "InvalidImageName",
            Self::ImageInspectError => "ImageInspectError",
            Self::RegistryUnavailable => "RegistryUnavailable",
            Self::SignatureValidationFailed => "SignatureValidationFailed",
        }
    }
}

impl fmt::Display for ImageErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why `ensure_image_exists` failed: `reason` is the waiting reason, `message` the waiting
/// message (both as upstream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ImageError {
    pub reason: ImageErrorReason,
    pub message: String,
}

impl ImageError {
    fn new(reason: ImageErrorReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// A container's effective `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

/// The container's pull policy; unset means the API default (`Always` for `:latest` or no
/// tag/digest, else `IfNotPresent`). An unknown value pulls like `Always`.
pub fn pull_policy(container: &Container) -> PullPolicy {
    match container.image_pull_policy.as_deref() {
        Some("Never") => PullPolicy::Never,
        Some("IfNotPresent") => PullPolicy::IfNotPresent,
        Some("Always") => PullPolicy::Always,
        Some(other) if !other.is_empty() => PullPolicy::Always,
        _ => {
            let image = container.image.as_deref().unwrap_or_default();
            match parse_reference(image) {
                Ok(r) if r.tag.as_deref() == Some("latest") => PullPolicy::Always,
                Ok(r) if r.tag.is_none() && r.digest.is_none() => PullPolicy::Always,
                _ => PullPolicy::IfNotPresent,
            }
        }
    }
}

/// The parts of an image reference that matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    tag: Option<String>,
    digest: Option<String>,
}

/// Appends `:latest` when the reference has neither tag nor digest (upstream
/// `applyDefaultImageTag`); the name is otherwise kept as written (the runtime normalizes it).
pub fn apply_default_image_tag(image: &str) -> Result<String, String> {
    let r = parse_reference(image)
        .map_err(|e| format!("couldn't parse image reference {image:?}: {e}"))?;
    if r.tag.is_none() && r.digest.is_none() {
        Ok(format!("{image}:latest"))
    } else {
        Ok(image.to_owned())
    }
}

/// The normalized repository of `image`, without tag or digest (upstream
/// `parsers.ParseImageName`'s first result): `busybox` → `docker.io/library/busybox`,
/// `127.0.0.1:5000/team/app:1` → `127.0.0.1:5000/team/app`. Credentials are looked up by it.
pub fn repository_to_pull(image: &str) -> Result<String, String> {
    parse_reference(image).map_err(|e| format!("couldn't parse image name {image:?}: {e}"))?;
    let name = image.split('@').next().unwrap_or(image);
    let name = match name.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => n,
        _ => name,
    };
    let (domain, remainder) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.to_lowercase() != first =>
        {
            (first, rest.to_owned())
        }
        _ => ("docker.io", name.to_owned()),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let remainder = if domain == "docker.io" && !remainder.contains('/') {
        format!("library/{remainder}")
    } else {
        remainder
    };
    Ok(format!("{domain}/{remainder}"))
}

/// Validates `image` like docker's `ParseNormalizedNamed` and returns its tag and digest.
fn parse_reference(image: &str) -> Result<Reference, String> {
    if image.len() == 64
        && image
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(format!(
            "invalid repository name ({image}), cannot specify 64-byte hexadecimal strings"
        ));
    }
    const INVALID: &str = "invalid reference format";
    let (name_tag, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        validate_digest(d)?;
    }
    // A tag is whatever follows the last ':' when no '/' comes after it (else it's a port).
    let (name, tag) = match name_tag.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => (n, Some(t)),
        _ => (name_tag, None),
    };
    if let Some(t) = tag {
        let valid = !t.is_empty()
            && t.len() <= 128
            && t.bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !valid {
            return Err(INVALID.to_owned());
        }
    }
    // Split off an explicit registry as docker does: the first component is a domain when it
    // contains '.' or ':', is "localhost", or has upper-case letters.
    let (domain, remainder) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.to_lowercase() != first =>
        {
            (Some(first), rest)
        }
        _ => (None, name),
    };
    if remainder.to_lowercase() != remainder {
        return Err(format!(
            "invalid reference format: repository name ({remainder}) must be lowercase"
        ));
    }
    if let Some(d) = domain
        && !valid_domain(d)
    {
        return Err(INVALID.to_owned());
    }
    if remainder.is_empty() || !remainder.split('/').all(valid_path_component) {
        return Err(INVALID.to_owned());
    }
    let full_len = match domain {
        Some(d) => d.len() + 1 + remainder.len(),
        None if remainder.contains('/') => "docker.io/".len() + remainder.len(),
        None => "docker.io/library/".len() + remainder.len(),
    };
    if full_len > 255 {
        return Err("repository name must not be more than 255 characters".to_owned());
    }
    Ok(Reference {
        tag: tag.map(str::to_owned),
        digest: digest.map(str::to_owned),
    })
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`.
fn valid_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = matches!(sep, "." | "_" | "__") || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// `host[:port]` where host is a DNS name or a bracketed IPv6 address.
fn valid_domain(d: &str) -> bool {
    let (host, port) = if let Some(rest) = d.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return false;
        };
        if v6.is_empty() || !v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return false;
        }
        match after {
            "" => return true,
            p => match p.strip_prefix(':') {
                Some(port) => ("", Some(port)),
                None => return false,
            },
        }
    } else {
        match d.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (d, None),
        }
    };
    if let Some(p) = port
        && (p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    if d.starts_with('[') {
        return true;
    }
    !host.is_empty()
        && host.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|x| x.is_ascii_alphanumeric() || *x == b'-')
        })
}

/// `algorithm:hex` with a registered algorithm's exact length (sha256/384/512).
fn validate_digest(d: &str) -> Result<(), String> {
    let Some((alg, hex)) = d.split_once(':') else {
        return Err("invalid reference format".to_owned());
    };
    let alg_ok = !alg.is_empty()
        && alg.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && alg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'+' | b'.'));
    if !alg_ok || hex.len() < 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("invalid reference format".to_owned());
    }
    let want = match alg {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err("unsupported digest algorithm".to_owned()),
    };
    if hex.len() != want {
        return Err("invalid checksum digest length".to_owned());
    }
    if !hex
        .bytes()
        .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    {
        return Err("invalid checksum digest format".to_owned());
    }
    Ok(())
}

/// Pull-related state behind one lock (never held across an await).
#[derive(Debug)]
struct PullState {
    backoff: Backoff,
    /// The last pull error per backoff key, shown while backing off (upstream
    /// `prevPullErrMsg`).
    prev_errors: HashMap<String, String>,
}

/// Pulls images for containers, with backoff and bounded concurrency.
pub struct ImageManager {
    images: Arc<dyn ImageService>,
    events: Arc<dyn EventRecorder>,
    /// `None`: unlimited parallel pulls.
    pull_slots: Option<Semaphore>,
    /// `registryPullQPS`/`registryBurst`; `None`: no limit.
    pull_limiter: Option<pull_limits::PullLimiter>,
    /// `--image-credential-provider-config` plugins; `None`: none configured.
    credential_providers: Option<Arc<CredentialProviders>>,
    /// The node-wide docker config files (`<root-dir>/config.json`, `~/.docker`, …); `None`:
    /// not read.
    node_docker_config: Option<Arc<NodeDockerConfig>>,
    state: Mutex<PullState>,
}

impl fmt::Debug for ImageManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImageManager")
            .field("pull_slots", &self.pull_slots)
            .finish_non_exhaustive()
    }
}

struct PullOutcome {
    image_ref: String,
    /// The runtime's record of the pulled image (from the size lookup), when it answered.
    image: Option<Image>,
    pull_duration: Duration,
}

/// What `ensure_image` found: the image's ID and, when a CRI `ImageStatus` on the start path
/// already returned it, the runtime's record (the container config reads the image's user from
/// it instead of asking the runtime again).
#[derive(Debug, Clone, PartialEq)]
pub struct EnsuredImage {
    pub image_ref: String,
    pub image: Option<Image>,
}

impl ImageManager {
    /// `serialize_image_pulls` (default true) pulls one image at a time, in request order;
    /// otherwise up to `max_parallel_image_pulls` at once (`None`: unlimited).
    pub fn new(
        images: Arc<dyn ImageService>,
        events: Arc<dyn EventRecorder>,
        serialize_image_pulls: bool,
        max_parallel_image_pulls: Option<u32>,
    ) -> Self {
        let pull_slots = if serialize_image_pulls {
            Some(Semaphore::new(1))
        } else {
            max_parallel_image_pulls
                .filter(|n| *n > 0)
                .map(|n| Semaphore::new(n as usize))
        };
        Self {
            images,
            events,
            pull_slots,
            pull_limiter: None,
            credential_providers: None,
            node_docker_config: None,
            state: Mutex::new(PullState {
                backoff: Backoff::for_image_pulls(),
                prev_errors: HashMap::new(),
            }),
        }
    }

    /// Limits pulls to `registry_pull_qps` per second with bursts of `registry_burst`
    /// (0 QPS: no limit). A pull over the limit fails with "pull QPS exceeded", as upstream.
    pub fn with_pull_limit(mut self, registry_pull_qps: i32, registry_burst: i32) -> Self {
        self.pull_limiter =
            pull_limits::PullLimiter::from_config(registry_pull_qps, registry_burst);
        self
    }

    /// Asks these credential provider plugins for credentials on every pull.
    pub fn with_credential_providers(mut self, providers: Arc<CredentialProviders>) -> Self {
        self.credential_providers = Some(providers);
        self
    }

    /// Reads the node-wide docker config files on pulls, after the pull secrets and before
    /// the plugins (upstream `nodeKeyring`).
    pub fn with_node_docker_config(mut self, node: Arc<NodeDockerConfig>) -> Self {
        self.node_docker_config = Some(node);
        self
    }

    fn state(&self) -> MutexGuard<'_, PullState> {
        sync::lock(&self.state)
    }

    fn event(&self, pod: &Pod, event_type: EventType, reason: &str, message: &str) {
        self.events.event(pod, event_type, reason, message);
    }

    /// Makes sure `container`'s image is present, pulling it as its pull policy says (upstream
    /// `EnsureImageExists`) with the credentials `pull_secrets` and the plugins give. Returns
    /// the image reference (ID) to create the container with.
    pub async fn ensure_image_exists(
        &self,
        pod: &Pod,
        container: &Container,
        pod_sandbox_config: Option<&PodSandboxConfig>,
        pull_secrets: &[Secret],
    ) -> Result<String, ImageError> {
        self.ensure_image(pod, container, pod_sandbox_config, pull_secrets)
            .await
            .map(|e| e.image_ref)
    }

    /// `ensure_image_exists` that also hands back the runtime's record of the image when the
    /// pull-policy check (or the pull's size lookup) read it.
    pub async fn ensure_image(
        &self,
        pod: &Pod,
        container: &Container,
        pod_sandbox_config: Option<&PodSandboxConfig>,
        pull_secrets: &[Secret],
    ) -> Result<EnsuredImage, ImageError> {
        let requested = container.image.as_deref().unwrap_or_default();
        let image = match apply_default_image_tag(requested) {
            Ok(image) => image,
            Err(e) => {
                let msg = format!("Failed to apply default image tag {requested:?}: {e}");
                self.event(pod, EventType::Warning, "InspectFailed", &msg);
                return Err(ImageError::new(ImageErrorReason::InvalidImageName, msg));
            }
        };
        let spec = ImageSpec {
            image,
            annotations: pod
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect(),
            user_specified_image: requested.to_owned(),
            runtime_handler: String::new(),
        };

        let policy = pull_policy(container);
        let mut present = None;
        if policy != PullPolicy::Always {
            present = self.present_image(&spec).await.map_err(|e| {
                let msg = format!(
                    "Failed to inspect image {requested:?}: {}",
                    cri_error_text(&e)
                );
                self.event(pod, EventType::Warning, "InspectFailed", &msg);
                ImageError::new(ImageErrorReason::ImageInspectError, msg)
            })?;
            if present.is_none() && policy == PullPolicy::Never {
                let msg = format!(
                    "Container image {requested:?} is not present with pull policy of Never"
                );
                self.event(pod, EventType::Warning, "ErrImageNeverPull", &msg);
                return Err(ImageError::new(ImageErrorReason::ErrImageNeverPull, msg));
            }
        }
        // As upstream, the pull secrets are read even for a present image: a malformed one
        // fails the container either way. The plugins only run for an actual pull.
        let keyring = make_docker_keyring(pull_secrets).map_err(|e| {
            let msg = e.to_string();
            self.event(pod, EventType::Warning, "Failed", &format!("Error: {msg}"));
            ImageError::new(ImageErrorReason::ErrImagePull, msg)
        })?;
        if let Some(image) = present {
            let msg = format!("Container image {requested:?} already present on machine");
            self.event(pod, EventType::Normal, "Pulled", &msg);
            return Ok(EnsuredImage {
                image_ref: image.id.clone(),
                image: Some(image),
            });
        }
        let repository = repository_to_pull(&spec.image).map_err(|msg| {
            self.event(pod, EventType::Warning, "InspectFailed", &msg);
            ImageError::new(ImageErrorReason::InvalidImageName, msg)
        })?;

        let key = format!("{}_{requested}", pod.uid());
        {
            let mut state = self.state();
            if state
                .backoff
                .is_in_backoff_since_update(&key, Instant::now())
            {
                let msg = format!("Back-off pulling image {requested:?}");
                let waiting = match state.prev_errors.get(&key) {
                    Some(prev) => format!("{msg}: {prev}"),
                    None => msg.clone(),
                };
                drop(state);
                self.event(pod, EventType::Normal, "BackOff", &msg);
                return Err(ImageError::new(ImageErrorReason::ImagePullBackOff, waiting));
            }
            state.prev_errors.remove(&key);
        }

        self.event(
            pod,
            EventType::Normal,
            "Pulling",
            &format!("Pulling image {requested:?}"),
        );
        let started = Instant::now();
        let mut credentials = keyring.lookup(&repository);
        if let Some(node) = &self.node_docker_config {
            credentials.extend(node.lookup(&repository));
        }
        if let Some(providers) = &self.credential_providers {
            credentials.extend(providers.lookup(&repository).await);
        }
        match self.pull(&spec, pod_sandbox_config, &credentials).await {
            Ok(outcome) => {
                let total = started.elapsed();
                let msg = format!(
                    "Successfully pulled image {requested:?} in {} ({} including waiting). Image size: {} bytes.",
                    go_duration(truncate_to_millis(outcome.pull_duration)),
                    go_duration(truncate_to_millis(total)),
                    outcome.image.as_ref().map_or(0, |i| i.size)
                );
                self.event(pod, EventType::Normal, "Pulled", &msg);
                let mut state = self.state();
                state.backoff.gc(Instant::now());
                let PullState {
                    backoff,
                    prev_errors,
                } = &mut *state;
                prev_errors.retain(|k, _| !backoff.get(k).is_zero());
                drop(state);
                Ok(EnsuredImage {
                    image_ref: outcome.image_ref,
                    image: outcome.image,
                })
            }
            Err(text) => {
                self.event(
                    pod,
                    EventType::Warning,
                    "Failed",
                    &format!("Failed to pull image {requested:?}: {text}"),
                );
                let (reason, msg) = classify_pull_error(requested, &text);
                let mut state = self.state();
                state.backoff.next(&key, Instant::now());
                state.prev_errors.insert(key, format!("{reason}: {msg}"));
                Err(ImageError::new(reason, msg))
            }
        }
    }

    /// The image's record when present (upstream `GetImageRef` reads its ID from it).
    async fn present_image(&self, spec: &ImageSpec) -> Result<Option<Image>, CriError> {
        let resp = self
            .images
            .image_status(ImageStatusRequest {
                image: Some(spec.clone()),
                verbose: false,
            })
            .await?;
        Ok(resp.image)
    }

    /// One pull through the concurrency limit, trying each credential in turn (none:
    /// anonymous); the size lookup afterwards is best effort. The error is the text of each
    /// attempt's error (upstream `utilerrors.NewAggregate`).
    async fn pull(
        &self,
        spec: &ImageSpec,
        sandbox: Option<&PodSandboxConfig>,
        credentials: &[AuthConfig],
    ) -> Result<PullOutcome, String> {
        let _permit = match &self.pull_slots {
            Some(slots) => slots.acquire().await.ok(),
            None => None,
        };
        let started = Instant::now();
        let attempts: Vec<Option<&AuthConfig>> = if credentials.is_empty() {
            vec![None]
        } else {
            credentials.iter().map(Some).collect()
        };
        let mut errors: Vec<String> = Vec::new();
        let mut pulled = None;
        for auth in attempts {
            match self.pull_once(spec, sandbox, auth).await {
                Ok(resp) => {
                    pulled = Some(resp);
                    break;
                }
                Err(e) => {
                    let text = cri_error_text(&e);
                    if !errors.contains(&text) {
                        errors.push(text);
                    }
                }
            }
        }
        let Some(resp) = pulled else {
            return Err(match errors.len() {
                1 => errors.remove(0),
                _ => format!("[{}]", errors.join(", ")),
            });
        };
        let mut image = None;
        if !resp.image_ref.is_empty()
            && let Ok(status) = self
                .images
                .image_status(ImageStatusRequest {
                    image: Some(spec.clone()),
                    verbose: false,
                })
                .await
        {
            image = status.image;
        }
        Ok(PullOutcome {
            image_ref: resp.image_ref,
            image,
            pull_duration: started.elapsed(),
        })
    }

    /// One CRI PullImage (each counts against `registryPullQPS`, as upstream's throttled
    /// image service).
    async fn pull_once(
        &self,
        spec: &ImageSpec,
        sandbox: Option<&PodSandboxConfig>,
        auth: Option<&AuthConfig>,
    ) -> Result<rkubelet_cri::api::PullImageResponse, CriError> {
        if let Some(limiter) = &self.pull_limiter
            && !limiter.try_accept()
        {
            return Err(CriError::unknown(
                "PullImage",
                pull_limits::PULL_QPS_EXCEEDED,
            ));
        }
        self.images
            .pull_image(PullImageRequest {
                image: Some(spec.clone()),
                auth: auth.map(AuthConfig::to_cri),
                sandbox_config: sandbox.cloned(),
            })
            .await
    }

    /// The runtime's record of `image` as written in the spec (`None`: not present). The
    /// container config needs it for the image's default user (upstream `getImageUser`).
    pub async fn image_status(&self, image: &str) -> Result<Option<Image>, CriError> {
        let resp = self
            .images
            .image_status(ImageStatusRequest {
                image: Some(ImageSpec {
                    image: image.to_owned(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await?;
        Ok(resp.image)
    }

    /// Number of image keys currently tracked by the pull backoff (for leak tests).
    pub fn backoff_len(&self) -> usize {
        self.state().backoff.len()
    }
}

/// A CRI error as upstream's remote image client renders it: `Unknown` errors show only the
/// runtime's message, others the full `rpc error: code = … desc = …`.
fn cri_error_text(e: &CriError) -> String {
    if rkubelet_cri::error::code_name(e.code()) == "Unknown" {
        e.message()
    } else {
        e.rpc_error_string()
    }
}

/// Upstream `evalCRIPullErr`: registry and signature failures get their own reasons.
fn classify_pull_error(image: &str, text: &str) -> (ImageErrorReason, String) {
    if let Some(rest) = text.strip_prefix("RegistryUnavailable") {
        return (
            ImageErrorReason::RegistryUnavailable,
            format!("image pull failed for {image} because the registry is unavailable{rest}"),
        );
    }
    if let Some(rest) = text.strip_prefix("SignatureValidationFailed") {
        return (
            ImageErrorReason::SignatureValidationFailed,
            format!("image pull failed for {image} because the signature validation failed{rest}"),
        );
    }
    (ImageErrorReason::ErrImagePull, text.to_owned())
}

fn truncate_to_millis(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod credentials_tests;
#[cfg(test)]
mod tests;
