//! The answer cache of webhook authentication and authorization (TokenReview,
//! SubjectAccessReview). Owns its entries and the reviews in flight; receives a structured key
//! and, on a miss, the review to run with the TTL its answer may be trusted for; emits the
//! answer. Bounded LRU (a full cache evicts the least recently used entry, never everything),
//! per-entry TTLs (time from `tokio::time`, so tests can pause it), and single-flight: while a
//! review for a key is running, identical requests wait for its answer instead of sending
//! their own. Errors are shared with the waiters but never cached.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::sync;
use tokio::sync::OnceCell;
use tokio::time::Instant;

struct Entry<V> {
    value: V,
    expires: Instant,
    /// Position in the recency order (larger = more recent).
    tick: u64,
}

struct Lru<K, V> {
    entries: HashMap<K, Entry<V>>,
    order: BTreeMap<u64, K>,
    next_tick: u64,
}

impl<K: Eq + Hash + Clone, V: Clone> Lru<K, V> {
    fn touch(&mut self, key: &K) -> Option<V> {
        let now = Instant::now();
        let tick = self.next_tick;
        let e = self.entries.get_mut(key)?;
        if e.expires <= now {
            let old = e.tick;
            self.entries.remove(key);
            self.order.remove(&old);
            return None;
        }
        self.order.remove(&e.tick);
        e.tick = tick;
        self.order.insert(tick, key.clone());
        self.next_tick += 1;
        Some(e.value.clone())
    }

    fn insert(&mut self, key: K, value: V, expires: Instant, max: usize) {
        if let Some(old) = self.entries.remove(&key) {
            self.order.remove(&old.tick);
        }
        while self.entries.len() >= max.max(1) {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        let tick = self.next_tick;
        self.next_tick += 1;
        self.order.insert(tick, key.clone());
        self.entries.insert(
            key,
            Entry {
                value,
                expires,
                tick,
            },
        );
    }
}

type Flight<V> = Arc<OnceCell<Result<V, String>>>;

/// A bounded LRU of answers with per-entry TTLs and single-flight fetching.
pub struct ReviewCache<K, V> {
    lru: Mutex<Lru<K, V>>,
    inflight: Mutex<HashMap<K, Flight<V>>>,
    max_entries: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> ReviewCache<K, V> {
    pub fn new(max_entries: usize) -> Self {
        Self {
            lru: Mutex::new(Lru {
                entries: HashMap::new(),
                order: BTreeMap::new(),
                next_tick: 0,
            }),
            inflight: Mutex::new(HashMap::new()),
            max_entries,
        }
    }

    /// The unexpired answer for `key` (marks it recently used).
    pub fn get(&self, key: &K) -> Option<V> {
        sync::lock(&self.lru).touch(key)
    }

    /// Stores `value` for `ttl`; a zero TTL stores nothing.
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let expires = Instant::now() + ttl;
        sync::lock(&self.lru).insert(key, value, expires, self.max_entries);
    }

    /// How many answers are stored (expired ones included until touched or evicted).
    pub fn len(&self) -> usize {
        sync::lock(&self.lru).entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached answer, or the answer of the one review in flight for `key`, or (first
    /// caller) runs `fetch`, which returns the answer and how long to cache it. If the caller
    /// running the review goes away, a waiter runs it instead.
    pub async fn get_or_fetch<F, Fut>(&self, key: K, fetch: F) -> Result<V, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(V, Duration), String>>,
    {
        if let Some(v) = self.get(&key) {
            return Ok(v);
        }
        let flight = {
            let mut m = sync::lock(&self.inflight);
            m.entry(key.clone()).or_default().clone()
        };
        let guard = FlightGuard {
            cache: self,
            key: &key,
            flight: &flight,
        };
        let out = flight
            .get_or_init(|| async {
                // A flight that finished just before we joined may already be cached.
                if let Some(v) = self.get(&key) {
                    return Ok(v);
                }
                let (v, ttl) = fetch().await?;
                self.insert(key.clone(), v.clone(), ttl);
                Ok(v)
            })
            .await
            .clone();
        drop(guard);
        out
    }
}

/// Removes a finished (or abandoned) flight from the in-flight map.
struct FlightGuard<'a, K: Eq + Hash + Clone, V: Clone> {
    cache: &'a ReviewCache<K, V>,
    key: &'a K,
    flight: &'a Flight<V>,
}

impl<K: Eq + Hash + Clone, V: Clone> Drop for FlightGuard<'_, K, V> {
    fn drop(&mut self) {
        let mut m = sync::lock(&self.cache.inflight);
        let ours = m.get(self.key).is_some_and(|f| Arc::ptr_eq(f, self.flight));
        // Clones are made under this lock: the map's and ours are the last two when nobody
        // else waits.
        if ours && (self.flight.initialized() || Arc::strong_count(self.flight) <= 2) {
            m.remove(self.key);
        }
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
