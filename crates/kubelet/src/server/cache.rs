//! A small TTL cache for webhook authentication/authorization answers. Owns its entries;
//! receives answers with the TTL they may be trusted for; emits them until they expire
//! (time from `tokio::time`, so tests can pause it).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Entries expire `ttl` after insertion; a zero TTL caches nothing.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
    max_entries: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(max_entries: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            max_entries,
        }
    }

    /// The unexpired value for `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        let mut m = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match m.get(key) {
            Some((v, until)) if *until > now => Some(v.clone()),
            Some(_) => {
                m.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value` for `ttl`.
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let mut m = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if m.len() >= self.max_entries {
            m.retain(|_, (_, until)| *until > now);
            if m.len() >= self.max_entries {
                m.clear();
            }
        }
        m.insert(key, (value, now + ttl));
    }
}
