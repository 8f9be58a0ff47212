//! Spare capacity of the kubelet's per-pod maps after churn. Owns the shrink rule; receives a
//! map from its owner (pod manager, pod workers, status manager) after entries were removed;
//! emits nothing. A `HashMap` keeps the capacity of its largest size: after a burst of 100
//! pods is deleted, the pod manager's and pod workers' tables (pods stored inline, ~2 KiB a
//! slot) would otherwise hold their high-water memory for the life of the kubelet.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Below this capacity a map is never shrunk (re-growing small tables costs more than it saves).
const KEEP: usize = 16;

/// Shrinks `map` when it uses less than a quarter of its capacity, leaving room for twice its
/// length. The quarter/twice gap means a map that grows and shrinks around one size is not
/// reallocated on every insert or removal.
pub fn release_spare<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    let cap = map.capacity();
    if cap > KEEP && cap > 4 * map.len() {
        map.shrink_to((2 * map.len()).max(KEEP));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_emptied_after_churn_gives_its_capacity_back() {
        let mut m: HashMap<u32, [u8; 2048]> = HashMap::new();
        for i in 0..100 {
            m.insert(i, [0; 2048]);
        }
        assert!(m.capacity() >= 100);
        for i in 0..100 {
            m.remove(&i);
            release_spare(&mut m);
        }
        assert!(m.capacity() <= 2 * KEEP, "capacity {}", m.capacity());
    }

    #[test]
    fn a_map_in_use_keeps_room_and_is_not_reallocated_each_change() {
        let mut m: HashMap<u32, u32> = (0..100).map(|i| (i, i)).collect();
        let cap = m.capacity();
        // Down to half: still more than a quarter in use, nothing is reallocated. (Removals
        // alone lower `capacity()` a little: hashbrown counts tombstones against it.)
        for i in 0..50 {
            m.remove(&i);
            let before = m.capacity();
            release_spare(&mut m);
            assert_eq!(m.capacity(), before);
        }
        // Down to 10 of ~112: shrunk, with room for at least twice what is left.
        for i in 50..90 {
            m.remove(&i);
            release_spare(&mut m);
        }
        assert!(m.capacity() < cap && m.capacity() >= 20, "{}", m.capacity());
        assert_eq!(m.len(), 10);
    }

    #[test]
    fn small_maps_are_left_alone() {
        let mut m: HashMap<u32, u32> = (0..10).map(|i| (i, i)).collect();
        let cap = m.capacity();
        m.clear();
        release_spare(&mut m);
        assert_eq!(m.capacity(), cap);
    }
}
