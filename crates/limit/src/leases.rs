//! The leases this instance holds (SPEC "Leased limits"; not wired into
//! [`Limiter`](crate::Limiter) yet): per (limit, client) [`StoreKey`], a
//! block of units taken from the store ([`crate::algorithm::lease::take`])
//! and spent here, request by request, without a store call.
//!
//! A request [`Leases::spend`]s its cost from a live lease of its key, or
//! learns that it must take a new one, together with what the old one did
//! not spend ([`Returned`]: to give back to the store in the same call,
//! [`crate::algorithm::lease::give_back`]). A request admitted here but
//! rejected by another limit of its route puts its units back
//! ([`Leases::put_back`]): all or nothing. Leases end at their `ttl`
//! ([`Leases::expired`], swept by the caller), when their limit's
//! parameters change ([`Leases::spend`] with other params), when the table
//! is full (the one ending soonest goes), and at reload and shutdown
//! ([`Leases::drain`]); every end hands back what was left, so nothing is
//! stranded but by a crash.
//!
//! Sixteen shards, each a `Mutex<HashMap>` held for one map operation
//! (never across an await), as the deny cache.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::{Micros, StoreKey};

/// Number of shards (a power of two).
const SHARDS: usize = 16;

/// A block of units held for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Units not spent yet.
    pub left: u64,
    /// The store's clock when it was taken: where a give-back goes.
    pub taken_at: Micros,
    /// The instant (this instance's clock) it ends.
    pub ends: Micros,
    /// The limit's parameters it was taken under (a fingerprint): a lease
    /// of other parameters is not spent.
    pub params: u64,
}

/// What a lease left unspent when it ended: to give back to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Returned {
    /// The (limit, client) it was taken from.
    pub key: StoreKey,
    /// The units left.
    pub units: u64,
    /// The store's clock when it was taken.
    pub taken_at: Micros,
}

/// What [`Leases::spend`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spend {
    /// Spent from the key's lease; `left` units remain in it.
    Local {
        /// What the lease holds now.
        left: u64,
        /// The lease's [`Lease::taken_at`]: which lease a
        /// [`Leases::put_back`] goes to.
        taken_at: Micros,
    },
    /// No lease could pay: take a new one, giving back what the old one
    /// left (if it left anything).
    Take(Option<Returned>),
}

/// The leases of this instance; see the module doc.
#[derive(Debug)]
pub struct Leases {
    shards: Box<[Mutex<HashMap<StoreKey, Lease>>]>,
    /// Leases per shard at most.
    per_shard: usize,
}

impl Leases {
    /// A table of at most `capacity` leases (at least one per shard).
    pub fn new(capacity: usize) -> Leases {
        Leases {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, key: &StoreKey) -> MutexGuard<'_, HashMap<StoreKey, Lease>> {
        // Store keys are hash output: any byte spreads them evenly.
        let i = usize::from(key[0]) % SHARDS;
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Spend `cost` units of `key`'s lease at `now`, if it is live, of
    /// `params` and holds them; otherwise the lease ends and the caller
    /// takes another.
    pub fn spend(&self, key: &StoreKey, cost: u64, now: Micros, params: u64) -> Spend {
        let mut shard = self.shard(key);
        if let Some(lease) = shard.get_mut(key) {
            if now < lease.ends && lease.params == params && lease.left >= cost {
                lease.left -= cost;
                return Spend::Local {
                    left: lease.left,
                    taken_at: lease.taken_at,
                };
            }
        }
        Spend::Take(shard.remove(key).and_then(|l| returned(*key, &l)))
    }

    /// Undo a [`Spend::Local`] of `cost` units from the lease taken at
    /// `taken_at`: the request was rejected by another limit. Nothing when
    /// that lease has ended meanwhile: the units stay taken in the store
    /// (a unit of under-admission), never added to a later lease, whose
    /// window may not be theirs.
    pub fn put_back(&self, key: &StoreKey, cost: u64, taken_at: Micros) {
        if let Some(lease) = self.shard(key).get_mut(key) {
            if lease.taken_at == taken_at {
                lease.left = lease.left.saturating_add(cost);
            }
        }
    }

    /// Hold `lease` for `key` (a new one just taken, its requester's cost
    /// already spent from it). Returns what leases it displaced left: the
    /// key's old lease (if another request took one meanwhile), and, when
    /// the shard is full, the lease that ends soonest.
    pub fn install(&self, key: StoreKey, lease: Lease) -> Vec<Returned> {
        let mut shard = self.shard(&key);
        let mut out = Vec::new();
        if let Some(old) = shard.insert(key, lease) {
            out.extend(returned(key, &old));
        }
        if shard.len() > self.per_shard {
            let soonest = shard
                .iter()
                .filter(|(k, _)| **k != key)
                .min_by_key(|(_, l)| l.ends)
                .map(|(k, _)| *k);
            if let Some(k) = soonest {
                if let Some(l) = shard.remove(&k) {
                    out.extend(returned(k, &l));
                }
            }
        }
        out
    }

    /// End the leases whose time is up at `now`; what they left.
    pub fn expired(&self, now: Micros) -> Vec<Returned> {
        self.take_where(|l| now >= l.ends)
    }

    /// End every lease (reload, shutdown); what they left.
    pub fn drain(&self) -> Vec<Returned> {
        self.take_where(|_| true)
    }

    /// End the leases `f` picks; what they left.
    pub fn take_where(&self, f: impl Fn(&Lease) -> bool) -> Vec<Returned> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            shard.retain(|k, l| {
                if f(l) {
                    out.extend(returned(*k, l));
                    false
                } else {
                    true
                }
            });
        }
        out
    }

    /// Leases held now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Whether no lease is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What `lease` of `key` left, if anything.
fn returned(key: StoreKey, lease: &Lease) -> Option<Returned> {
    (lease.left > 0).then_some(Returned {
        key,
        units: lease.left,
        taken_at: lease.taken_at,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::key::KeyHasher;

    fn key(n: u32) -> StoreKey {
        KeyHasher::new(b"leased").value(&n.to_be_bytes()).finish()
    }

    fn lease(left: u64, ends: Micros) -> Lease {
        Lease {
            left,
            taken_at: 7,
            ends,
            params: 1,
        }
    }

    #[test]
    fn spent_locally_until_empty_then_the_next_is_taken() {
        let t = Leases::new(64);
        let k = key(1);
        assert_eq!(t.spend(&k, 1, 0, 1), Spend::Take(None));
        assert!(t.install(k, lease(3, 100)).is_empty());
        let spent = Spend::Local {
            left: 1,
            taken_at: 7,
        };
        assert_eq!(t.spend(&k, 2, 10, 1), spent);
        // Not enough for 2: the lease ends, its last unit goes back.
        let back = Returned {
            key: k,
            units: 1,
            taken_at: 7,
        };
        assert_eq!(t.spend(&k, 2, 10, 1), Spend::Take(Some(back)));
        assert!(t.is_empty());
    }

    #[test]
    fn a_lease_ends_at_its_time_and_with_other_params() {
        let t = Leases::new(64);
        t.install(key(1), lease(5, 100));
        t.install(key(2), lease(5, 200));
        assert_eq!(t.expired(150).len(), 1);
        assert_eq!(t.len(), 1);
        // Other params: not spent, ended, its units handed back.
        assert!(matches!(t.spend(&key(2), 1, 150, 2), Spend::Take(Some(r)) if r.units == 5));
        assert!(t.is_empty());
    }

    #[test]
    fn put_back_undoes_a_spend() {
        let t = Leases::new(64);
        t.install(key(1), lease(2, 100));
        assert!(matches!(
            t.spend(&key(1), 2, 0, 1),
            Spend::Local { left: 0, .. }
        ));
        t.put_back(&key(1), 2, 7);
        assert!(matches!(
            t.spend(&key(1), 1, 0, 1),
            Spend::Local { left: 1, .. }
        ));
        // A later lease of the key does not take units of an earlier one.
        t.install(
            key(1),
            Lease {
                taken_at: 8,
                ..lease(2, 100)
            },
        );
        t.put_back(&key(1), 1, 7);
        assert!(matches!(
            t.spend(&key(1), 2, 0, 1),
            Spend::Local { left: 0, .. }
        ));
    }

    #[test]
    fn a_full_table_hands_back_the_lease_ending_soonest() {
        let t = Leases::new(1);
        // One lease per shard: find two keys of the same shard.
        let a = key(1);
        let b = (2..).map(key).find(|k| k[0] % 16 == a[0] % 16).unwrap();
        t.install(a, lease(4, 100));
        let out = t.install(b, lease(6, 200));
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].key, out[0].units), (a, 4));
        assert_eq!(t.drain().len(), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn concurrent_spends_never_spend_more_than_the_lease() {
        let t = Arc::new(Leases::new(64));
        t.install(key(1), lease(1_000, Micros::MAX));
        let spent = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (t, spent) = (t.clone(), spent.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        if let Spend::Local { .. } = t.spend(&key(1), 1, 0, 1) {
                            spent.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert_eq!(spent.load(Ordering::Relaxed), 1_000);
    }
}
