//! The local deny cache (docs/configuration/limits.md).
//!
//! While a (limit, client) is locked out, or was rejected by a limit with no
//! lockout policy, this instance answers that client itself until the retry
//! time, without asking the store. Entries are keyed by the (limit, client)
//! [`StoreKey`], which already names the limit.
//!
//! Sixteen shards, each a `Mutex<HashMap>` held only for a map operation
//! (never across an await). The cache is bounded: when a shard is full, the
//! entries that expire soonest go first, which drops the expired ones before
//! any live one, in batches so a flood of distinct clients costs O(1) per
//! insert. An atomic count lets [`DenyCache::get`] skip locking entirely
//! while the cache is empty, the usual case.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::{Micros, StoreKey};

/// Number of shards (a power of two).
const SHARDS: usize = 16;

/// One cached rejection, with what the caller keeps beside it (`T`).
#[derive(Debug, Clone)]
struct Entry<T> {
    /// Reject until this instant (exclusive).
    until: Micros,
    /// A lockout (`locked_out`) rather than a plain rejection.
    locked_out: bool,
    /// The caller's data (the engine keeps the rejection's header figures).
    extra: T,
}

/// One shard: its map and its share of the capacity.
struct Shard<T> {
    map: Mutex<HashMap<StoreKey, Entry<T>>>,
    capacity: usize,
}

/// Clients this instance rejects locally until their retry time, each with
/// a `T` the caller keeps beside the rejection.
pub(crate) struct DenyCache<T = ()> {
    shards: Box<[Shard<T>]>,
    /// Entries held across all shards, expired ones included until evicted.
    len: AtomicUsize,
    capacity: usize,
}

impl<T: Clone> fmt::Debug for DenyCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenyCache")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

#[cfg(test)]
impl DenyCache<()> {
    /// Reject `key` locally until `until`; replaces any entry for it.
    pub(crate) fn insert(&self, key: StoreKey, until: Micros, locked_out: bool) {
        self.insert_with(key, until, locked_out, ());
    }

    /// `Some((until, locked_out))` while `key` is cached and not expired at
    /// `now` (`now < until`). An expired entry found here is dropped.
    pub(crate) fn get(&self, key: &StoreKey, now: Micros) -> Option<(Micros, bool)> {
        self.get_with(key, now)
            .map(|(until, locked_out, ())| (until, locked_out))
    }
}

impl<T: Clone> DenyCache<T> {
    /// A cache holding at most `capacity` entries (0: caches nothing).
    pub(crate) fn new(capacity: usize) -> Self {
        let shards = (0..SHARDS)
            .map(|i| Shard {
                map: Mutex::new(HashMap::new()),
                // The remainder goes to the first shards, so the shares add
                // up to exactly `capacity`.
                capacity: capacity / SHARDS + usize::from(i < capacity % SHARDS),
            })
            .collect();
        DenyCache {
            shards,
            len: AtomicUsize::new(0),
            capacity,
        }
    }

    /// Reject `key` locally until `until`, keeping `extra` with it; replaces
    /// any entry for it.
    pub(crate) fn insert_with(&self, key: StoreKey, until: Micros, locked_out: bool, extra: T) {
        let shard = self.shard(&key);
        if shard.capacity == 0 {
            return;
        }
        let mut map = lock(&shard.map);
        let before = map.len();
        if before >= shard.capacity && !map.contains_key(&key) {
            evict(&mut map, shard.capacity);
        }
        map.insert(
            key,
            Entry {
                until,
                locked_out,
                extra,
            },
        );
        self.adjust(before, map.len());
    }

    /// `Some((until, locked_out, extra))` while `key` is cached and not
    /// expired at `now` (`now < until`). An expired entry found here is
    /// dropped.
    pub(crate) fn get_with(&self, key: &StoreKey, now: Micros) -> Option<(Micros, bool, T)> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let shard = self.shard(key);
        let mut map = lock(&shard.map);
        let entry = map.get(key)?;
        if now < entry.until {
            return Some((entry.until, entry.locked_out, entry.extra.clone()));
        }
        map.remove(key);
        self.len.fetch_sub(1, Ordering::Relaxed);
        None
    }

    /// Forget `key` (an admin reset).
    pub(crate) fn remove(&self, key: &StoreKey) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut map = lock(&self.shard(key).map);
        if map.remove(key).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Forget everything.
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            let mut map = lock(&shard.map);
            self.len.fetch_sub(map.len(), Ordering::Relaxed);
            map.clear();
        }
    }

    /// Entries held, expired ones included until they are evicted.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg(test)]
    /// The most entries ever held.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    fn shard(&self, key: &StoreKey) -> &Shard<T> {
        // Store keys are hash output: any byte spreads them evenly.
        &self.shards[usize::from(key[0]) % SHARDS]
    }

    /// Account for a shard going from `before` to `after` entries (under
    /// its lock).
    fn adjust(&self, before: usize, after: usize) {
        if after > before {
            self.len.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.len.fetch_sub(before - after, Ordering::Relaxed);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves a map that is still
    // a valid map; keep using it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Make room in a full shard: drop the eighth of its entries that expire
/// soonest (at least one). Expired entries have the earliest `until`s, so
/// they go before any live one. One O(n) pass per n/8 inserts.
fn evict<T>(map: &mut HashMap<StoreKey, Entry<T>>, capacity: usize) {
    let batch = (capacity / 8).max(1).min(map.len());
    if batch == 0 {
        return;
    }
    let mut untils: Vec<Micros> = map.values().map(|e| e.until).collect();
    let (_, &mut threshold, _) = untils.select_nth_unstable(batch - 1);
    // Everything strictly earlier goes, then ties until the batch is done.
    map.retain(|_, e| e.until >= threshold);
    let mut left = batch.saturating_sub(untils.len() - map.len());
    map.retain(|_, e| {
        if left > 0 && e.until == threshold {
            left -= 1;
            false
        } else {
            true
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A key in shard `shard`, distinct for each `n`.
    fn key(shard: u8, n: u32) -> StoreKey {
        let mut k = [0u8; 16];
        k[0] = shard;
        k[1..5].copy_from_slice(&n.to_be_bytes());
        k
    }

    /// What the shards really hold.
    fn held(c: &DenyCache) -> usize {
        c.shards.iter().map(|s| lock(&s.map).len()).sum()
    }

    #[test]
    fn expiry() {
        let c = DenyCache::new(100);
        assert!(c.is_empty());
        assert_eq!(c.get(&key(0, 1), 0), None);
        c.insert(key(0, 1), 100, true);
        c.insert(key(1, 2), 50, false);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&key(0, 1), 0), Some((100, true)));
        assert_eq!(c.get(&key(0, 1), 99), Some((100, true)));
        assert_eq!(c.get(&key(1, 2), 49), Some((50, false)));
        assert_eq!(c.get(&key(0, 1), 100), None);
        assert_eq!(c.len(), 1, "an expired entry found is dropped");
        assert_eq!(c.get(&key(0, 1), 0), None);
        assert_eq!(c.get(&key(0, 9), 0), None);
        // Replacing an entry: the latest decision wins.
        c.insert(key(1, 2), 500, true);
        assert_eq!(c.get(&key(1, 2), 60), Some((500, true)));
        c.insert(key(1, 2), 70, false);
        assert_eq!(c.get(&key(1, 2), 60), Some((70, false)));
        assert_eq!(c.len(), 1);
        assert_eq!(held(&c), 1);
    }

    #[test]
    fn remove_and_clear() {
        let c = DenyCache::new(64);
        for n in 0..40 {
            c.insert(key((n % 16) as u8, n), 1000, false);
        }
        assert_eq!(c.len(), 40);
        c.remove(&key(3, 3));
        c.remove(&key(3, 3));
        c.remove(&key(3, 999));
        assert_eq!(c.len(), 39);
        assert_eq!(c.get(&key(3, 3), 0), None);
        assert_eq!(c.get(&key(4, 4), 0), Some((1000, false)));
        c.clear();
        assert!(c.is_empty());
        assert_eq!(held(&c), 0);
        assert_eq!(c.get(&key(4, 4), 0), None);
        c.insert(key(4, 4), 10, true);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn expired_entries_are_evicted_first_then_the_soonest() {
        // 160 entries: 10 per shard.
        let c = DenyCache::new(160);
        for s in 0..16u8 {
            for n in 0..5 {
                c.insert(key(s, n), 10, false); // expired by now = 100
                c.insert(key(s, 100 + n), 1000, true); // live
            }
        }
        assert_eq!(c.len(), 160);
        for s in 0..16u8 {
            for n in 0..5 {
                c.insert(key(s, 200 + n), 2000, true);
            }
        }
        assert_eq!(c.len(), 160);
        for s in 0..16u8 {
            for n in 0..5 {
                assert_eq!(c.get(&key(s, n), 0), None, "expired ones went");
                assert_eq!(c.get(&key(s, 100 + n), 100), Some((1000, true)));
                assert_eq!(c.get(&key(s, 200 + n), 100), Some((2000, true)));
            }
        }
        // Full of live entries: those expiring soonest make room.
        c.insert(key(0, 300), 3000, false);
        assert_eq!(c.get(&key(0, 300), 100), Some((3000, false)));
        let survivors = (0..5)
            .filter(|&n| c.get(&key(0, 100 + n), 100).is_some())
            .count();
        assert_eq!(survivors, 4);
        assert!((0..5).all(|n| c.get(&key(0, 200 + n), 100).is_some()));
        assert_eq!(c.len(), 160);
    }

    #[test]
    fn bounded_under_a_flood() {
        let c = DenyCache::new(1000);
        let mut rng = fastrand::Rng::with_seed(7);
        for n in 0..200_000u32 {
            let mut k = [0u8; 16];
            rng.fill(&mut k);
            c.insert(k, u64::from(n) + rng.u64(0..10_000), n % 2 == 0);
            assert!(c.len() <= 1000);
        }
        assert!(c.len() >= 900, "the cache is not emptied by eviction");
        assert_eq!(c.len(), held(&c));
        for s in c.shards.iter() {
            let map = lock(&s.map);
            assert!(map.len() <= s.capacity);
            // Memory stays near the share, not near the flood.
            assert!(map.capacity() <= 4 * s.capacity + 16, "{}", map.capacity());
        }
        // Ties on `until` are evicted in batches, never the whole shard.
        let c = DenyCache::new(16 * 64);
        for n in 0..10_000u32 {
            c.insert(key((n % 16) as u8, n), 5, false);
            assert!(c.len() <= 16 * 64);
        }
        assert!(c.len() >= 16 * 56);
    }

    #[test]
    fn small_and_zero_capacities() {
        let c = DenyCache::new(0);
        c.insert(key(0, 1), 10, false);
        assert!(c.is_empty());
        assert_eq!(c.get(&key(0, 1), 0), None);
        // Capacity 3: shards 0..3 hold one each, the others none.
        let c = DenyCache::new(3);
        for s in 0..16u8 {
            c.insert(key(s, 1), 10, false);
            c.insert(key(s, 2), 20, false);
        }
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&key(0, 2), 0), Some((20, false)));
        assert_eq!(c.capacity(), 3);
        assert_eq!(format!("{c:?}"), "DenyCache { len: 3, capacity: 3 }");
    }

    #[test]
    fn concurrent_use() {
        let c = Arc::new(DenyCache::new(4096));
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(u64::from(t));
                    for i in 0..20_000u32 {
                        let k = key(rng.u8(..), rng.u32(0..2000));
                        match rng.u8(0..10) {
                            0..=4 => c.insert(k, u64::from(i % 500) + 1, t % 2 == 0),
                            5..=7 => {
                                let _ = c.get(&k, u64::from(i % 600));
                            }
                            8 => c.remove(&k),
                            _ => {
                                if i % 5000 == 0 {
                                    c.clear();
                                }
                            }
                        }
                        assert!(c.len() <= 4096 + 8);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(c.len(), held(&c));
        assert!(c.len() <= 4096);
    }
}
