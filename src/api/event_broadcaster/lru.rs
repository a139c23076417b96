//! A map that keeps at most a fixed number of entries and, to make room,
//! forgets the one used least recently: the bound on every cache of the
//! event correlator (client-go's `groupcache/lru`, 4,096 entries each).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// At most `capacity` entries; inserting into a full map evicts the least
/// recently used one, so a pod that invents a new key per event cannot
/// grow it.
#[derive(Debug)]
pub(super) struct Lru<K, V> {
    capacity: usize,
    entries: HashMap<K, (V, u64)>,
    /// Keys by the tick of their last use, oldest first.
    by_use: BTreeMap<u64, K>,
    tick: u64,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty map of at most `capacity` entries (at least one).
    pub(super) fn new(capacity: usize) -> Self {
        Lru {
            capacity: capacity.max(1),
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            tick: 0,
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The value of `key`, now the most recently used.
    pub(super) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let tick = self.next_tick();
        let (value, used) = self.entries.get_mut(key)?;
        self.by_use.remove(used);
        self.by_use.insert(tick, key.clone());
        *used = tick;
        Some(value)
    }

    /// The value of `key`, inserted with `make` if absent (evicting the
    /// least recently used entry when full); now the most recently used.
    pub(super) fn get_or_insert_with(&mut self, key: &K, make: impl FnOnce() -> V) -> &mut V {
        if !self.entries.contains_key(key) {
            if self.entries.len() >= self.capacity
                && let Some((_, oldest)) = self.by_use.pop_first()
            {
                self.entries.remove(&oldest);
            }
            let tick = self.next_tick();
            self.by_use.insert(tick, key.clone());
            self.entries.insert(key.clone(), (make(), tick));
            return &mut self.entries.get_mut(key).expect("just inserted").0;
        }
        self.get_mut(key).expect("present")
    }

    /// Every entry, in no particular order; their use is not recorded.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.entries
            .iter_mut()
            .map(|(key, (value, _))| (key, value))
    }

    /// Forgets every entry `keep` returns false for.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        let by_use = &mut self.by_use;
        self.entries.retain(|key, (value, used)| {
            let kept = keep(key, value);
            if !kept {
                by_use.remove(used);
            }
            kept
        });
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(super) fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_map_forgets_the_least_recently_used() {
        let mut lru = Lru::new(3);
        for key in ["a", "b", "c"] {
            lru.get_or_insert_with(&key, || 0);
        }
        // Using "a" makes "b" the least recently used.
        *lru.get_mut(&"a").expect("present") += 1;
        lru.get_or_insert_with(&"d", || 0);
        assert_eq!(lru.len(), 3);
        assert!(!lru.contains(&"b"));
        assert_eq!(lru.get_mut(&"a"), Some(&mut 1));
        // An existing key is returned, not replaced, and evicts nothing.
        *lru.get_or_insert_with(&"c", || 7) += 1;
        assert_eq!(lru.get_mut(&"c"), Some(&mut 1));
        assert_eq!(lru.len(), 3);
    }

    #[test]
    fn retained_entries_keep_their_order_of_use() {
        let mut lru = Lru::new(3);
        for key in ["a", "b", "c"] {
            lru.get_or_insert_with(&key, || 0);
        }
        lru.retain(|key, _| *key != "a");
        assert_eq!(lru.len(), 2);
        // Room for two more without evicting: "b" goes only at the third.
        lru.get_or_insert_with(&"d", || 0);
        assert!(lru.contains(&"b"));
        lru.get_or_insert_with(&"e", || 0);
        assert!(!lru.contains(&"b") && lru.contains(&"c"));
        assert_eq!(lru.len(), 3);
    }

    #[test]
    fn capacity_holds_whatever_is_inserted() {
        let mut lru = Lru::new(4096);
        for i in 0..10_000 {
            lru.get_or_insert_with(&i, || ());
        }
        assert_eq!(lru.len(), 4096);
        assert!(lru.contains(&9_999) && !lru.contains(&5_903));
    }
}
