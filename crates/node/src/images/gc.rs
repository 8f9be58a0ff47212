//! Image garbage collection (upstream `images/image_gc_manager.go`). Owns the image records
//! (first detected, last used, size, pinned per image ID). Receives the runtime's images and
//! containers (CRI), the image filesystem's mountpoint (CRI `ImageFsInfo`) and its capacity and
//! free space (statvfs); decides purely which images go (`eviction_order`, `select_old`,
//! `select_for_space`, `amount_to_free`); removes them through CRI `RemoveImage`. Emits the
//! upstream node events `FreeDiskSpaceFailed`, `InvalidDiskCapacity` and (for repeated
//! failures of the periodic run) `ImageGCFailed`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rkubelet_cri::api::{
    ImageFsInfoRequest, ImageSpec, ListContainersRequest, ListImagesRequest, RemoveImageRequest,
};
use rkubelet_cri::{CriError, ImageService, RuntimeService};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::events::{EventRecorder, EventType};

/// Upstream `ImageGCPeriod`.
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(5 * 60);

/// Upstream `ImageGCPolicy`, from `imageGCHighThresholdPercent`, `imageGCLowThresholdPercent`,
/// `imageMinimumGCAge` and `imageMaximumGCAge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGcPolicy {
    pub high_threshold_percent: i32,
    pub low_threshold_percent: i32,
    pub min_age: Duration,
    /// Zero: off.
    pub max_age: Duration,
}

impl Default for ImageGcPolicy {
    fn default() -> Self {
        Self {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
        }
    }
}

impl ImageGcPolicy {
    /// Checks the percentages as upstream's `NewImageGCManager`, naming the config fields.
    pub fn validate(&self) -> Result<(), ImageGcError> {
        let (high, low) = (self.high_threshold_percent, self.low_threshold_percent);
        if !(0..=100).contains(&high) {
            return Err(ImageGcError::Policy(format!(
                "invalid imageGCHighThresholdPercent {high}, must be in range [0-100]"
            )));
        }
        if !(0..=100).contains(&low) {
            return Err(ImageGcError::Policy(format!(
                "invalid imageGCLowThresholdPercent {low}, must be in range [0-100]"
            )));
        }
        if low > high {
            return Err(ImageGcError::Policy(format!(
                "imageGCLowThresholdPercent {low} can not be higher than imageGCHighThresholdPercent {high}"
            )));
        }
        Ok(())
    }

    /// Upstream stubs the image GC when the high threshold is 100 and there is no max age.
    pub fn disabled(&self) -> bool {
        self.high_threshold_percent == 100 && self.max_age.is_zero()
    }
}

/// What the GC remembers of one image (upstream `imageRecord`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRecord {
    pub first_detected: Instant,
    /// `None`: never seen in use (older than any use).
    pub last_used: Option<Instant>,
    pub size: u64,
    pub pinned: bool,
}

/// An image that may be removed, in eviction order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub record: ImageRecord,
}

/// Images neither in use nor pinned, least recently used first, ties by first detection
/// (upstream `imagesInEvictionOrder`).
pub fn eviction_order(
    records: &HashMap<String, ImageRecord>,
    in_use: &HashSet<String>,
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = records
        .iter()
        .filter(|(id, r)| !in_use.contains(*id) && !r.pinned)
        .map(|(id, r)| Candidate {
            id: id.clone(),
            record: *r,
        })
        .collect();
    out.sort_by(|a, b| {
        a.record
            .last_used
            .cmp(&b.record.last_used)
            .then(a.record.first_detected.cmp(&b.record.first_detected))
            .then(a.id.cmp(&b.id))
    });
    out
}

/// The candidates unused for longer than `max_age` (upstream `freeOldImages`); nothing until
/// the GC has been running for longer than `max_age`.
pub fn select_old(
    candidates: &[Candidate],
    now: Instant,
    began: Instant,
    max_age: Duration,
) -> Vec<&Candidate> {
    if max_age.is_zero() || now.saturating_duration_since(began) <= max_age {
        return Vec::new();
    }
    candidates
        .iter()
        .filter(|c| match c.record.last_used {
            None => true,
            Some(t) => now.saturating_duration_since(t) > max_age,
        })
        .collect()
}

/// The candidates to remove to free `bytes_to_free`, in order (upstream `freeSpace`): skips
/// images used at or after `now` and those detected less than `min_age` ago; stops once enough
/// would be freed.
pub fn select_for_space(
    candidates: &[Candidate],
    bytes_to_free: u64,
    now: Instant,
    min_age: Duration,
) -> Vec<&Candidate> {
    let mut out = Vec::new();
    let mut freed = 0u64;
    for c in candidates
        .iter()
        .filter(|c| eligible_for_space(c, now, min_age))
    {
        out.push(c);
        freed = freed.saturating_add(c.record.size);
        if freed >= bytes_to_free {
            break;
        }
    }
    out
}

/// Not used at or after `now` and detected at least `min_age` ago (a freshly pulled image is
/// probably about to be used).
fn eligible_for_space(c: &Candidate, now: Instant, min_age: Duration) -> bool {
    c.record.last_used.is_none_or(|t| t < now)
        && now.saturating_duration_since(c.record.first_detected) >= min_age
}

/// Bytes to free when usage is at or above the high threshold (upstream `GarbageCollect`):
/// enough to bring usage down to the low threshold. `None` below the high threshold.
pub fn amount_to_free(capacity: u64, available: u64, policy: &ImageGcPolicy) -> Option<u64> {
    let available = available.min(capacity);
    if capacity == 0 {
        return None;
    }
    let usage_percent = 100 - i128::from(available) * 100 / i128::from(capacity);
    if usage_percent < i128::from(policy.high_threshold_percent) {
        return None;
    }
    let low = i128::from(100 - policy.low_threshold_percent.clamp(0, 100));
    let target_available = i128::from(capacity) * low / 100;
    Some(u64::try_from(target_available - i128::from(available)).unwrap_or(0))
}

/// Capacity and free space of a filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsUsage {
    pub capacity: u64,
    pub available: u64,
}

/// Reads a filesystem's usage (statvfs in production; fakes in tests).
pub type FsStatsFn = Arc<dyn Fn(&Path) -> std::io::Result<FsUsage> + Send + Sync>;

/// `statvfs(2)` of `path`: capacity = blocks × fragment size, available = blocks free to
/// unprivileged users × fragment size.
pub fn statvfs_usage(path: &Path) -> std::io::Result<FsUsage> {
    let usage = crate::hostfs::statvfs(path)?;
    Ok(FsUsage {
        capacity: usage.capacity_bytes,
        available: usage.available_bytes,
    })
}

/// Why an image GC run failed (messages as upstream where the user sees them).
#[derive(Debug, thiserror::Error)]
pub enum ImageGcError {
    #[error("{0}")]
    Policy(String),
    #[error("failed to list images: {0}")]
    ListImages(#[source] CriError),
    #[error("failed to list containers: {0}")]
    ListContainers(#[source] CriError),
    #[error("failed to get image filesystem info: {0}")]
    ImageFsInfo(#[source] CriError),
    #[error("the runtime reported no image filesystem")]
    NoImageFs,
    #[error("failed to get the usage of the image filesystem {path:?}: {source}")]
    FsStats {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
    #[error(
        "Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, but only found {freed} bytes eligible to free."
    )]
    NotEnoughFreed { wanted: u64, freed: u64 },
    #[error(
        "wanted to free {wanted} bytes, but freed {freed} bytes space with errors in image deletion: {errors}"
    )]
    Deletion {
        wanted: u64,
        freed: u64,
        errors: String,
    },
    #[error(
        "wanted to free images older than {max_age:?}, encountered errors in image deletion: {errors}"
    )]
    OldDeletion { max_age: Duration, errors: String },
}

/// Settings of the image GC.
#[derive(Debug, Clone, Default)]
pub struct ImageGcConfig {
    pub policy: ImageGcPolicy,
    /// Image names never removed (upstream `--pod-infra-container-image`: the sandbox image,
    /// which containerd 1.6 does not report as pinned).
    pub pinned_images: Vec<String>,
}

struct Inner {
    images: Arc<dyn ImageService>,
    runtime: Arc<dyn RuntimeService>,
    config: ImageGcConfig,
    fs_stats: FsStatsFn,
    events: Arc<dyn EventRecorder>,
    /// When the GC started (the max-age rule waits that long).
    began: Instant,
    /// The records; held across the CRI calls of one run so runs never overlap.
    records: tokio::sync::Mutex<HashMap<String, ImageRecord>>,
}

/// Handle to the image GC. Cheap to clone.
#[derive(Clone)]
pub struct ImageGc {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ImageGc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageGc")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl ImageGc {
    pub fn new(
        images: Arc<dyn ImageService>,
        runtime: Arc<dyn RuntimeService>,
        config: ImageGcConfig,
        fs_stats: FsStatsFn,
        events: Arc<dyn EventRecorder>,
    ) -> Result<Self, ImageGcError> {
        config.policy.validate()?;
        Ok(Self {
            inner: Arc::new(Inner {
                images,
                runtime,
                config,
                fs_stats,
                events,
                began: Instant::now(),
                records: tokio::sync::Mutex::new(HashMap::new()),
            }),
        })
    }

    /// A copy of the current records (tests, debugging).
    pub async fn records(&self) -> HashMap<String, ImageRecord> {
        self.inner.records.lock().await.clone()
    }

    /// Refreshes the records from the runtime (upstream `detectImages`) and returns the IDs of
    /// images used by any container, running or not.
    async fn detect(
        &self,
        records: &mut HashMap<String, ImageRecord>,
        now: Instant,
    ) -> Result<HashSet<String>, ImageGcError> {
        let images = self
            .inner
            .images
            .list_images(ListImagesRequest { filter: None })
            .await
            .map_err(ImageGcError::ListImages)?
            .images;
        let in_use: HashSet<String> = self
            .inner
            .runtime
            .list_containers(ListContainersRequest { filter: None })
            .await
            .map_err(ImageGcError::ListContainers)?
            .containers
            .into_iter()
            .map(|c| c.image_ref)
            .collect();
        let pinned_names: Vec<String> = self
            .inner
            .config
            .pinned_images
            .iter()
            .map(|n| normalize_name(n))
            .collect();
        let mut current = HashSet::new();
        for image in images {
            current.insert(image.id.clone());
            let rec = records.entry(image.id.clone()).or_insert(ImageRecord {
                first_detected: now,
                last_used: None,
                size: 0,
                pinned: false,
            });
            if in_use.contains(&image.id) {
                rec.last_used = Some(now);
            }
            rec.size = image.size;
            rec.pinned = image.pinned
                || image
                    .repo_tags
                    .iter()
                    .any(|t| pinned_names.contains(&normalize_name(t)));
        }
        records.retain(|id, _| current.contains(id));
        Ok(in_use)
    }

    async fn remove(
        &self,
        records: &mut HashMap<String, ImageRecord>,
        c: &Candidate,
        why: &str,
    ) -> Result<(), CriError> {
        info!(image_id = %c.id, size = c.record.size, reason = why, "removing image to free bytes");
        self.inner
            .images
            .remove_image(RemoveImageRequest {
                image: Some(ImageSpec {
                    image: c.id.clone(),
                    ..Default::default()
                }),
            })
            .await?;
        records.remove(&c.id);
        Ok(())
    }

    /// Removes images past the max age, then, when the image filesystem is at or above the
    /// high threshold, enough unused images to reach the low threshold (upstream
    /// `GarbageCollect`).
    pub async fn garbage_collect(&self) -> Result<(), ImageGcError> {
        let mut records = self.inner.records.lock().await;
        let now = Instant::now();
        let in_use = self.detect(&mut records, now).await?;
        let mut candidates = eviction_order(&records, &in_use);

        let max_age = self.inner.config.policy.max_age;
        let old: Vec<Candidate> = select_old(&candidates, now, self.inner.began, max_age)
            .into_iter()
            .cloned()
            .collect();
        let mut errors = Vec::new();
        for c in &old {
            match self.remove(&mut records, c, "age").await {
                Ok(()) => candidates.retain(|x| x.id != c.id),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if !errors.is_empty() {
            return Err(ImageGcError::OldDeletion {
                max_age,
                errors: errors.join(", "),
            });
        }

        let usage = self.image_fs_usage().await?;
        if usage.capacity == 0 {
            let e = ImageGcError::InvalidCapacity;
            self.inner
                .events
                .node_event(EventType::Warning, "InvalidDiskCapacity", &e.to_string());
            return Err(e);
        }
        let policy = &self.inner.config.policy;
        if let Some(wanted) = amount_to_free(usage.capacity, usage.available, policy) {
            info!(
                capacity = usage.capacity,
                available = usage.available,
                high_threshold = policy.high_threshold_percent,
                low_threshold = policy.low_threshold_percent,
                amount_to_free = wanted,
                "disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
            );
            let freed = self
                .free_space(&mut records, &candidates, wanted, now)
                .await?;
            if freed < wanted {
                let e = ImageGcError::NotEnoughFreed { wanted, freed };
                self.inner.events.node_event(
                    EventType::Warning,
                    "FreeDiskSpaceFailed",
                    &e.to_string(),
                );
                return Err(e);
            }
        }
        Ok(())
    }

    /// Removes every unused, unpinned image old enough (upstream `DeleteUnusedImages`, called
    /// by the eviction manager); returns the bytes freed.
    pub async fn delete_unused_images(&self) -> Result<u64, ImageGcError> {
        info!("attempting to delete unused images");
        let mut records = self.inner.records.lock().await;
        let now = Instant::now();
        let in_use = self.detect(&mut records, now).await?;
        let candidates = eviction_order(&records, &in_use);
        self.free_space(&mut records, &candidates, u64::MAX, now)
            .await
    }

    async fn free_space(
        &self,
        records: &mut HashMap<String, ImageRecord>,
        candidates: &[Candidate],
        wanted: u64,
        now: Instant,
    ) -> Result<u64, ImageGcError> {
        let min_age = self.inner.config.policy.min_age;
        let mut freed = 0u64;
        let mut errors = Vec::new();
        // As upstream: a failed removal does not count, later candidates are still tried.
        for c in candidates
            .iter()
            .filter(|c| eligible_for_space(c, now, min_age))
        {
            match self.remove(records, c, "space").await {
                Ok(()) => freed = freed.saturating_add(c.record.size),
                Err(e) => errors.push(e.to_string()),
            }
            if freed >= wanted {
                break;
            }
        }
        if !errors.is_empty() {
            return Err(ImageGcError::Deletion {
                wanted,
                freed,
                errors: errors.join(", "),
            });
        }
        Ok(freed)
    }

    async fn image_fs_usage(&self) -> Result<FsUsage, ImageGcError> {
        let info = self
            .inner
            .images
            .image_fs_info(ImageFsInfoRequest {})
            .await
            .map_err(ImageGcError::ImageFsInfo)?;
        let mount = info
            .image_filesystems
            .first()
            .and_then(|f| f.fs_id.as_ref())
            .map(|id| PathBuf::from(&id.mountpoint))
            .ok_or(ImageGcError::NoImageFs)?;
        (self.inner.fs_stats)(&mount).map_err(|source| ImageGcError::FsStats {
            path: mount,
            source,
        })
    }

    /// Runs `garbage_collect` every `period` (first right away) until cancelled. A failure is
    /// logged; a second failure in a row also becomes an `ImageGCFailed` node event (upstream
    /// `StartGarbageCollection`).
    pub async fn run(self, period: Duration, cancel: CancellationToken) {
        if self.inner.config.policy.disabled() {
            info!(
                "imageGCHighThresholdPercent is 100 and imageMaximumGCAge is 0: image garbage collection disabled"
            );
            // A supervised task: returning early would read as a crash (healthz `tasks`).
            cancel.cancelled().await;
            return;
        }
        let mut tick = tokio::time::interval(period.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut prev_failed = false;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.garbage_collect().await {
                Ok(()) => {
                    debug!("image garbage collection succeeded");
                    prev_failed = false;
                }
                Err(e) => {
                    if prev_failed {
                        warn!(error = %e, "image garbage collection failed multiple times in a row");
                        self.inner.events.node_event(
                            EventType::Warning,
                            "ImageGCFailed",
                            &e.to_string(),
                        );
                    } else {
                        warn!(error = %e, "image garbage collection failed once");
                    }
                    prev_failed = true;
                }
            }
        }
    }
}

/// A docker-style fully qualified name (`busybox` → `docker.io/library/busybox:latest`) so
/// that configured pinned names match the runtime's tags.
fn normalize_name(name: &str) -> String {
    let (named, digest) = match name.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (name, None),
    };
    let qualified = match named.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => named.to_owned(),
        Some(_) => format!("docker.io/{named}"),
        None => format!("docker.io/library/{named}"),
    };
    let last = qualified.rsplit('/').next().unwrap_or_default();
    let mut out = qualified.clone();
    if !last.contains(':') && digest.is_none() {
        out.push_str(":latest");
    }
    if let Some(d) = digest {
        out.push('@');
        out.push_str(d);
    }
    out
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;
