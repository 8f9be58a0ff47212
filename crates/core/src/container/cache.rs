//! The pod cache (upstream `kubecontainer.Cache`): the runtime status of every pod the runtime
//! knows, each stamped with the time it was read, plus a global "everything is at least this
//! fresh" timestamp. The PLEG is the only writer (`set`, `update_time`, `delete`); pod workers
//! read, either at once (`get`) or by waiting for a status newer than their last sync
//! (`get_newer_than`), which wakes them through one-shot channels — no polling.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::container::PodStatus;
use crate::sync;
use crate::types::PodUid;

/// What the cache holds for one pod: its status, or why inspecting it failed.
pub type CachedStatus = Result<PodStatus, String>;

#[derive(Debug)]
struct Entry {
    status: CachedStatus,
    modified: Instant,
}

#[derive(Debug)]
struct Waiter {
    /// `None`: any data will do (the first sync of a pod).
    min_time: Option<Instant>,
    tx: oneshot::Sender<CachedStatus>,
}

#[derive(Debug, Default)]
struct Inner {
    pods: HashMap<PodUid, Entry>,
    /// Unset until the first completed relist: before that nothing is known to be fresh.
    timestamp: Option<Instant>,
    waiters: HashMap<PodUid, Vec<Waiter>>,
}

/// Cheaply clonable handle on the shared pod cache.
#[derive(Debug, Clone, Default)]
pub struct PodCache {
    inner: Arc<Mutex<Inner>>,
}

fn default_status(uid: &str) -> PodStatus {
    PodStatus {
        uid: uid.to_string(),
        ..PodStatus::default()
    }
}

impl Inner {
    /// The entry for `uid`, or the empty status the runtime's silence stands for.
    fn get(&self, uid: &str) -> CachedStatus {
        match self.pods.get(uid) {
            Some(entry) => entry.status.clone(),
            None => Ok(default_status(uid)),
        }
    }

    /// The data for `uid` if it is newer than `min_time` (strictly), as upstream
    /// `getIfNewerThan`.
    fn get_if_newer_than(&self, uid: &str, min_time: Option<Instant>) -> Option<CachedStatus> {
        let newer = |t: Instant| min_time.is_none_or(|m| t > m);
        let global_newer = self.timestamp.is_some_and(newer);
        match self.pods.get(uid) {
            Some(entry) if newer(entry.modified) || global_newer => Some(entry.status.clone()),
            None if global_newer => Some(Ok(default_status(uid))),
            _ => None,
        }
    }

    /// Hands the current data to every waiter on `uid` whose minimum time `timestamp` reaches.
    fn notify(&mut self, uid: &str, timestamp: Instant) {
        let Some(waiters) = self.waiters.remove(uid) else {
            return;
        };
        let mut keep = Vec::new();
        for waiter in waiters {
            if waiter.tx.is_closed() {
                continue;
            }
            // Same rule as `get_if_newer_than`: data as of `min_time` itself is not newer. A
            // worker that synced at T must not get the listing a relist took at T (a paused or
            // coarse clock makes the two equal), or it would recreate what it just started.
            if waiter.min_time.is_some_and(|m| timestamp <= m) {
                keep.push(waiter);
                continue;
            }
            // A waiter that went away in the meantime simply misses the value.
            let _ = waiter.tx.send(self.get(uid));
        }
        if !keep.is_empty() {
            self.waiters.insert(uid.to_string(), keep);
        }
    }
}

impl PodCache {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data behind (every mutation is a
        // single map operation), so a poisoned lock is still usable.
        sync::lock(&self.inner)
    }

    /// The cached status of `uid` as `(status, error)`: an inspection error gives
    /// `(None, Some(err))`; a pod the runtime knows nothing about gives an empty status with
    /// only the UID set.
    pub fn get(&self, uid: &str) -> (Option<PodStatus>, Option<String>) {
        match self.lock().get(uid) {
            Ok(status) => (Some(status), None),
            Err(err) => (None, Some(err)),
        }
    }

    /// All successfully inspected statuses.
    pub fn get_all(&self) -> Vec<PodStatus> {
        self.lock()
            .pods
            .values()
            .filter_map(|e| e.status.as_ref().ok().cloned())
            .collect()
    }

    /// Records what inspecting `uid` at `timestamp` gave, and wakes the waiters it satisfies.
    pub fn set(&self, uid: &str, status: CachedStatus, timestamp: Instant) {
        let mut inner = self.lock();
        inner.pods.insert(
            uid.to_string(),
            Entry {
                status,
                modified: timestamp,
            },
        );
        inner.notify(uid, timestamp);
    }

    /// Declares every entry at least as fresh as `timestamp` (called after each relist) and
    /// wakes the waiters that satisfies.
    pub fn update_time(&self, timestamp: Instant) {
        let mut inner = self.lock();
        inner.timestamp = Some(timestamp);
        let uids: Vec<PodUid> = inner.waiters.keys().cloned().collect();
        for uid in uids {
            inner.notify(&uid, timestamp);
        }
    }

    /// Forgets `uid` (the runtime no longer has anything of it).
    pub fn delete(&self, uid: &str) {
        self.lock().pods.remove(uid);
    }

    /// Waits until the cache holds data for `uid` newer than `min_time` — its own entry, or the
    /// global timestamp — and returns it. Cancel-safe: dropping the future abandons the wait.
    pub async fn get_newer_than(&self, uid: &str, min_time: Instant) -> CachedStatus {
        self.wait(uid, Some(min_time)).await
    }

    /// Waits until anything is known about `uid`: its entry, or the first completed relist
    /// (upstream calls `GetNewerThan` with the zero time for a pod's first sync).
    pub async fn get_first(&self, uid: &str) -> CachedStatus {
        self.wait(uid, None).await
    }

    async fn wait(&self, uid: &str, min_time: Option<Instant>) -> CachedStatus {
        let rx = {
            let mut inner = self.lock();
            if let Some(data) = inner.get_if_newer_than(uid, min_time) {
                return data;
            }
            let (tx, rx) = oneshot::channel();
            let waiters = inner.waiters.entry(uid.to_string()).or_default();
            waiters.retain(|w| !w.tx.is_closed());
            waiters.push(Waiter { min_time, tx });
            rx
        };
        // The sender lives in the cache as long as the cache does, and the cache outlives this
        // call through `self`; a dropped sender can only mean it was discarded, so re-read.
        match rx.await {
            Ok(data) => data,
            Err(_) => self.lock().get(uid),
        }
    }

    /// Number of pods with an entry (for leak tests).
    pub fn len(&self) -> usize {
        self.lock().pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of callers currently waiting in `get_newer_than`/`get_first` (for leak tests).
    pub fn waiting(&self) -> usize {
        self.lock()
            .waiters
            .values()
            .flatten()
            .filter(|w| !w.tx.is_closed())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn status(uid: &str, ip: &str) -> PodStatus {
        PodStatus {
            uid: uid.into(),
            ips: vec![ip.into()],
            ..PodStatus::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn get_returns_default_error_or_status() {
        let cache = PodCache::new();
        assert_eq!(cache.get("a"), (Some(default_status("a")), None));
        cache.set("a", Ok(status("a", "10.0.0.1")), Instant::now());
        assert_eq!(cache.get("a"), (Some(status("a", "10.0.0.1")), None));
        cache.set("b", Err("rpc failed".into()), Instant::now());
        assert_eq!(cache.get("b"), (None, Some("rpc failed".into())));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get_all(), vec![status("a", "10.0.0.1")]);
        cache.delete("a");
        cache.delete("b");
        assert!(cache.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn get_newer_than_returns_at_once_when_fresh() {
        let cache = PodCache::new();
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        cache.set("a", Ok(status("a", "1")), Instant::now());
        assert_eq!(cache.get_newer_than("a", t0).await, Ok(status("a", "1")));
        // Global timestamp newer than min time: unknown pods get the default status.
        cache.update_time(Instant::now());
        assert_eq!(cache.get_newer_than("z", t0).await, Ok(default_status("z")));
        assert_eq!(cache.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn get_newer_than_wakes_on_set() {
        let cache = PodCache::new();
        cache.set("a", Ok(status("a", "old")), Instant::now());
        let min = Instant::now();
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move { cache.get_newer_than("a", min).await }
        });
        tokio::task::yield_now().await;
        assert_eq!(
            cache.waiting(),
            1,
            "entry not newer than min time: must wait"
        );
        // An older write does not satisfy the waiter, and neither does one as of `min` itself.
        cache.set(
            "a",
            Ok(status("a", "older")),
            min - Duration::from_millis(1),
        );
        cache.set("a", Ok(status("a", "same instant")), min);
        cache.update_time(min);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "data as of min time is not newer");
        tokio::time::advance(Duration::from_millis(10)).await;
        cache.set("a", Ok(status("a", "new")), Instant::now());
        assert_eq!(waiter.await.unwrap(), Ok(status("a", "new")));
        assert_eq!(cache.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn get_newer_than_wakes_on_update_time() {
        let cache = PodCache::new();
        let min = Instant::now();
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move { cache.get_newer_than("gone", min).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        tokio::time::advance(Duration::from_secs(1)).await;
        cache.update_time(Instant::now());
        assert_eq!(waiter.await.unwrap(), Ok(default_status("gone")));
    }

    #[tokio::test(start_paused = true)]
    async fn get_first_waits_for_first_relist_or_entry() {
        let cache = PodCache::new();
        let first = tokio::spawn({
            let cache = cache.clone();
            async move { cache.get_first("a").await }
        });
        tokio::task::yield_now().await;
        assert!(
            !first.is_finished(),
            "nothing known before the first relist"
        );
        cache.set("a", Err("boom".into()), Instant::now());
        assert_eq!(first.await.unwrap(), Err("boom".into()));
        cache.update_time(Instant::now());
        assert_eq!(cache.get_first("b").await, Ok(default_status("b")));
    }

    #[tokio::test(start_paused = true)]
    async fn abandoned_waiters_do_not_leak() {
        let cache = PodCache::new();
        let min = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(1), cache.get_newer_than("a", min)).await;
        assert!(r.is_err(), "must still be waiting");
        assert_eq!(cache.waiting(), 0, "closed waiters are not counted");
        tokio::time::advance(Duration::from_secs(1)).await;
        cache.update_time(Instant::now());
        assert!(cache.inner.lock().unwrap().waiters.is_empty());
    }
}
