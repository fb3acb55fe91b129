//! The in-memory store (docs/scaling-out.md `memory`): the default backend, and what
//! `on_error: local` falls back to.
//!
//! Entries live in [`SHARDS`] shards, each a `Mutex<HashMap>`, so there is no
//! global lock on the hot path. A request's checks are decided inside one
//! critical section: the shards of all its keys are locked together, in
//! shard order so two requests can never deadlock, and the whole
//! `decide` runs under them. Entries carry
//! their expiry; an expired entry reads as a fresh key, and a sweeper removes
//! expired entries and gives the memory back.
//!
//! Settlements ([`crate::settle`]) are applied under the key's shard too,
//! and remembered until their deadline in the shard's set of markers
//! (locked after the entries'), so a replay changes nothing; the sweeper
//! drops markers whose deadline has passed.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::algorithm::any::AlgoState;
use crate::decide::{decide, Loaded};
use crate::quota::Quota;
use crate::settle::{SettleOutcome, Settlement};
use crate::{Check, LockState, Micros, Outcome, StoreKey};

/// How many shards the map is split into (at most 64: a request's shards
/// are a `u64` bit set).
pub const SHARDS: usize = 64;
const _: () = assert!(SHARDS <= 64);

/// One (limit, client): its limit state and lockout state, each with its
/// own expiry (0: absent).
#[derive(Debug, Clone)]
struct Entry {
    algo: Option<AlgoState>,
    algo_exp: Micros,
    lock: Option<Box<(LockState, Micros)>>,
}

impl Entry {
    fn is_dead(&self, now: Micros) -> bool {
        self.algo_exp <= now && self.lock.as_ref().is_none_or(|l| l.1 <= now)
    }
}

type Shard = HashMap<StoreKey, Entry>;

/// Stores `state` as `key`'s limit state for `ttl` (0: none), removing the
/// entry if nothing of it is left alive.
fn put_algo(shard: &mut Shard, key: &StoreKey, state: AlgoState, ttl: Micros, now: Micros) {
    let entry = shard.entry(*key).or_insert(Entry {
        algo: None,
        algo_exp: 0,
        lock: None,
    });
    entry.algo = (ttl > 0).then_some(state);
    entry.algo_exp = if ttl > 0 { now.saturating_add(ttl) } else { 0 };
    if entry.is_dead(now) {
        shard.remove(key);
    }
}

/// A settlement applied: until when a replay may still come (its
/// deadline), and the units it applied.
#[derive(Debug, Clone, Copy)]
struct Marker {
    until: Micros,
    units: i64,
}

/// One shard's applied settlements, by (key, settlement id).
type Markers = HashMap<(StoreKey, u64), Marker>;

/// The in-memory store.
pub struct MemoryStore {
    shards: Vec<Mutex<Shard>>,
    /// The settlements applied, by the shard of their key; each shard's
    /// locked after its entries, never before.
    settled: Vec<Mutex<Markers>>,
    /// Keys' own values ([`Quota`]), set through the admin API; they never
    /// expire. Locked after a decision's shards, never before.
    quotas: Mutex<HashMap<StoreKey, Quota>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

fn shard_of(key: &StoreKey) -> usize {
    // Keys are already uniform hashes.
    key[0] as usize % SHARDS
}

/// The place of `shard`'s guard among the guards of the bit set `shards`
/// (taken in increasing order).
fn rank(shards: u64, shard: usize) -> usize {
    (shards & ((1u64 << shard) - 1)).count_ones() as usize
}

/// What the store holds for each of `checks` at `now`, read under
/// `guards` (the shards of the bit set `shards`): a lapsed state or lock
/// reads as none.
fn load<'a>(
    checks: &[Check],
    guards: &'a [MutexGuard<'_, Shard>],
    shards: u64,
    now: Micros,
) -> Vec<Loaded<'a>> {
    checks
        .iter()
        .map(
            |c| match guards[rank(shards, shard_of(&c.key))].get(&c.key) {
                Some(e) => Loaded {
                    algo: if e.algo_exp > now {
                        e.algo.as_ref()
                    } else {
                        None
                    },
                    lock: e
                        .lock
                        .as_ref()
                        .filter(|l| l.1 > now)
                        .map(|l| l.0)
                        .unwrap_or_default(),
                },
                None => Loaded::default(),
            },
        )
        .collect()
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            settled: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            quotas: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding a shard cannot leave an entry half-written
        // (entries are replaced whole), so a poisoned lock is still usable.
        self.shards[shard]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The shards of `checks`' keys, locked in increasing order (so two
    /// requests can never deadlock), and their bit set: [`rank`] finds a
    /// shard's guard.
    fn lock_all(&self, checks: &[Check]) -> (Vec<MutexGuard<'_, Shard>>, u64) {
        let shards: u64 = checks.iter().fold(0, |m, c| m | 1 << shard_of(&c.key));
        let mut guards: Vec<MutexGuard<'_, Shard>> =
            Vec::with_capacity(shards.count_ones() as usize);
        let mut rest = shards;
        while rest != 0 {
            guards.push(self.lock(rest.trailing_zeros() as usize));
            rest &= rest - 1;
        }
        (guards, shards)
    }

    /// Decide a request's `checks` at `now`, atomically over all their keys.
    pub fn decide(&self, checks: &[Check], now: Micros) -> Vec<Outcome> {
        let (mut guards, shards) = self.lock_all(checks);
        let guard_of = |key: &StoreKey| rank(shards, shard_of(key));
        // Keys' own values, read under the shards' locks: one step with
        // the decision.
        let per_key = self.under_quotas(checks);
        let checks = per_key.as_deref().unwrap_or(checks);
        let loaded = load(checks, &guards, shards, now);
        let (outcomes, writes) = decide(checks, &loaded, now);
        for (check, write) in checks.iter().zip(writes) {
            if write.algo.is_none() && write.lock.is_none() {
                continue;
            }
            let g = &mut guards[guard_of(&check.key)];
            if let Some((lock, ttl)) = write.lock {
                let entry = g.entry(check.key).or_insert(Entry {
                    algo: None,
                    algo_exp: 0,
                    lock: None,
                });
                entry.lock = (ttl > 0).then(|| Box::new((lock, now.saturating_add(ttl))));
                if write.algo.is_none() && entry.is_dead(now) {
                    g.remove(&check.key);
                }
            }
            if let Some((state, ttl)) = write.algo {
                put_algo(g, &check.key, state, ttl, now);
            }
        }
        outcomes
    }

    /// `checks` with each per-key check's parameters under its key's own
    /// values; `None` when no check reads any.
    fn under_quotas(&self, checks: &[Check]) -> Option<Vec<Check>> {
        if !checks.iter().any(|c| c.quota) {
            return None;
        }
        let quotas = lock_map(&self.quotas);
        Some(
            checks
                .iter()
                .map(|c| match quotas.get(&c.key).filter(|_| c.quota) {
                    Some(q) => Check {
                        params: c.params.under(Some(q)),
                        ..c.clone()
                    },
                    None => c.clone(),
                })
                .collect(),
        )
    }

    /// The values `key` has of its own, if any.
    pub fn quota(&self, key: &StoreKey) -> Option<Quota> {
        lock_map(&self.quotas).get(key).copied()
    }

    /// Give `key` values of its own (replacing any), or (`None`) take them
    /// away; whether it had some before.
    pub fn set_quota(&self, key: &StoreKey, quota: Option<Quota>) -> bool {
        let mut quotas = lock_map(&self.quotas);
        match quota {
            Some(q) => quotas.insert(*key, q).is_some(),
            None => quotas.remove(key).is_some(),
        }
    }

    /// What [`MemoryStore::decide`] would answer `checks` at `now`, all or
    /// nothing, without changing anything: no entry is made (not even an
    /// empty one), none is changed or removed, no expiry moves. A
    /// rejection that would start a lockout says so (`lock_started`) and
    /// strikes nothing.
    pub fn probe(&self, checks: &[Check], now: Micros) -> Vec<Outcome> {
        let (guards, shards) = self.lock_all(checks);
        let per_key = self.under_quotas(checks);
        let checks = per_key.as_deref().unwrap_or(checks);
        let loaded = load(checks, &guards, shards, now);
        decide(checks, &loaded, now).0
    }

    /// Apply `s` at `now` (the rules of [`crate::settle`]): once per
    /// (key, id) until its deadline, under the key's own values if it
    /// reads them, atomically with any decision on the key.
    pub fn settle(&self, s: &Settlement, now: Micros) -> SettleOutcome {
        if !s.params.settles() {
            return SettleOutcome::Unsupported;
        }
        let until = s.deadline();
        if now >= until {
            return SettleOutcome::Expired;
        }
        let shard = shard_of(&s.key);
        let mut g = self.lock(shard);
        let mut markers = lock_map(&self.settled[shard]);
        if let Some(m) = markers.get(&(s.key, s.id)).filter(|m| m.until > now) {
            return SettleOutcome::Replayed { units: m.units };
        }
        let params = if s.quota {
            s.params.under(lock_map(&self.quotas).get(&s.key))
        } else {
            s.params.clone()
        };
        let fresh = params.fresh();
        let state = g
            .get(&s.key)
            .filter(|e| e.algo_exp > now)
            .and_then(|e| e.algo.as_ref())
            .unwrap_or(&fresh);
        let Some(settled) = params.settle(state, s.at, now, s.delta) else {
            return SettleOutcome::Unsupported;
        };
        put_algo(&mut g, &s.key, settled.state, settled.ttl, now);
        let units = settled.applied;
        markers.insert((s.key, s.id), Marker { until, units });
        SettleOutcome::Applied { units }
    }

    /// Give back a `concurrency` lease.
    pub fn release(&self, check: &Check, now: Micros) {
        let mut g = self.lock(shard_of(&check.key));
        let Some(entry) = g.get_mut(&check.key) else {
            return;
        };
        if let Some(AlgoState::Concurrency(leases)) = &entry.algo {
            let released = crate::algorithm::concurrency::release(leases, now, check.lease);
            if released.ttl > 0 {
                entry.algo = Some(AlgoState::Concurrency(released.state));
                entry.algo_exp = now.saturating_add(released.ttl);
            } else {
                entry.algo = None;
                entry.algo_exp = 0;
            }
        }
        if entry.is_dead(now) {
            g.remove(&check.key);
        }
    }

    /// The live state of one key (admin `GET /limits/...`).
    pub fn inspect(&self, key: &StoreKey, now: Micros) -> (Option<AlgoState>, LockState) {
        let g = self.lock(shard_of(key));
        match g.get(key) {
            Some(e) => (
                if e.algo_exp > now {
                    e.algo.clone()
                } else {
                    None
                },
                e.lock
                    .as_ref()
                    .filter(|l| l.1 > now)
                    .map(|l| l.0)
                    .unwrap_or_default(),
            ),
            None => (None, LockState::default()),
        }
    }

    /// Forget one key: its counters and any lockout (admin `DELETE`).
    pub fn reset(&self, key: &StoreKey) {
        self.lock(shard_of(key)).remove(key);
    }

    /// Every key locked out at `now`, with the lock's remaining time.
    pub fn lockouts(&self, now: Micros) -> Vec<(StoreKey, Micros)> {
        let mut out = Vec::new();
        for shard in 0..SHARDS {
            let g = self.lock(shard);
            for (key, e) in g.iter() {
                if let Some(l) = &e.lock {
                    if l.0.locked(now) {
                        out.push((*key, l.0.lu - now));
                    }
                }
            }
        }
        out
    }

    /// Remove expired entries, one shard at a time, and give memory back
    /// when a shard has shrunk well below its capacity.
    pub fn sweep(&self, now: Micros) {
        for shard in 0..SHARDS {
            let mut g = self.lock(shard);
            g.retain(|_, e| !e.is_dead(now));
            if g.capacity() > 64 && g.len() < g.capacity() / 4 {
                g.shrink_to_fit();
            }
            drop(g);
            let mut m = lock_map(&self.settled[shard]);
            m.retain(|_, m| m.until > now);
            if m.capacity() > 64 && m.len() < m.capacity() / 4 {
                m.shrink_to_fit();
            }
        }
    }

    /// Settlement markers held (expired ones not yet swept included).
    pub fn settled_len(&self) -> usize {
        self.settled.iter().map(|m| lock_map(m).len()).sum()
    }

    /// Entries held (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        (0..SHARDS).map(|s| self.lock(s).len()).sum()
    }

    /// Whether the store holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The guarded map, whether or not a holder panicked (values are
/// replaced whole).
fn lock_map<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{concurrency, fixed_window, token_bucket, Rate, SECOND};
    use crate::{AlgoParams, LockParams, Status};

    fn key(n: u8) -> StoreKey {
        let mut k = [0u8; 16];
        k[0] = n;
        k[15] = n.wrapping_mul(7);
        k
    }

    fn fixed(limit: u64, key: StoreKey) -> Check {
        Check {
            name: "t".into(),
            key,
            params: AlgoParams::FixedWindow(
                fixed_window::Params::new(limit, fixed_window::Window::Fixed(10 * SECOND)).unwrap(),
            ),
            cost: 1,
            lockout: None,
            shadow: false,
            lease: 0,
            quota: false,
            leasing: None,
        }
    }

    #[test]
    fn a_rejected_request_consumes_nothing_from_the_other_limits() {
        let store = MemoryStore::new();
        let (a, b) = (fixed(10, key(1)), fixed(1, key(2)));
        let both = [a.clone(), b.clone()];
        let first = store.decide(&both, 0);
        assert_eq!(first[0].status, Status::Allowed);
        assert_eq!(first[0].remaining, 9);
        let second = store.decide(&both, SECOND);
        assert_eq!(second[1].status, Status::Rejected);
        assert_eq!(second[0].status, Status::NotConsumed);
        assert_eq!(second[0].remaining, 9);
        // A's counter is still at 1: nine more pass on A alone.
        for i in 0..9 {
            assert_eq!(
                store.decide(std::slice::from_ref(&a), 2 * SECOND)[0].remaining,
                8 - i
            );
        }
        assert_eq!(store.decide(&[a], 2 * SECOND)[0].status, Status::Rejected);
    }

    #[test]
    fn checks_in_shared_and_distinct_shards() {
        let store = MemoryStore::new();
        // Shards 0, 1, 1 (65 % 64), 63, 0 (128 % 64): locked once each.
        let keys = [key(0), key(1), key(65), key(63), key(128)];
        let checks: Vec<Check> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| fixed(i as u64 + 1, k))
            .collect();
        let first = store.decide(&checks, 0);
        let remaining: Vec<u64> = first.iter().map(|o| o.remaining).collect();
        assert_eq!(remaining, [0, 1, 2, 3, 4]);
        assert_eq!(store.len(), 5);
        // The first check is now full: the whole request is rejected, and
        // every other key is left as it was.
        let second = store.decide(&checks, SECOND);
        assert_eq!(second[0].status, Status::Rejected);
        assert!(second[1..].iter().all(|o| o.status == Status::NotConsumed));
        for (i, &k) in keys.iter().enumerate().skip(1) {
            let alone = store.decide(&[fixed(i as u64 + 1, k)], SECOND)[0];
            assert_eq!(alone.remaining, i as u64 - 1, "key {i}");
        }
    }

    #[test]
    fn expired_entries_read_fresh_and_are_swept() {
        let store = MemoryStore::new();
        for n in 0..=255u8 {
            store.decide(&[fixed(1, key(n))], 0);
        }
        assert_eq!(store.len(), 256);
        assert_eq!(
            store.decide(&[fixed(1, key(3))], 5 * SECOND)[0].status,
            Status::Rejected
        );
        assert_eq!(
            store.decide(&[fixed(1, key(3))], 10 * SECOND)[0].status,
            Status::Allowed
        );
        store.sweep(10 * SECOND);
        assert_eq!(store.len(), 1, "only the entry written at 10 s is alive");
        store.sweep(20 * SECOND);
        assert!(store.is_empty());
    }

    /// Every entry as stored, expiries included, in key order.
    type Raw = Vec<(
        StoreKey,
        Option<AlgoState>,
        Micros,
        Option<(LockState, Micros)>,
    )>;

    fn raw(store: &MemoryStore) -> Raw {
        let mut out: Raw = (0..SHARDS)
            .flat_map(|s| {
                let g = store.lock(s);
                g.iter()
                    .map(|(k, e)| (*k, e.algo.clone(), e.algo_exp, e.lock.as_deref().copied()))
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort_by_key(|e| e.0);
        out
    }

    /// A probe answers what `decide` then answers, strikes and lockouts
    /// included, and leaves every entry and expiry as it was: no entry for
    /// a new key, none for a lapsed one swept, no lease taken.
    #[test]
    fn a_probe_answers_what_decide_would_and_changes_nothing() {
        let store = MemoryStore::new();
        let mut limited = fixed(2, key(1));
        limited.lockout = Some(LockParams {
            after: 2,
            within: 60 * SECOND,
            duration: 30 * SECOND,
            escalate: 1,
            max_duration: 30 * SECOND,
            forget_after: 60 * SECOND,
        });
        let slots = |lease| Check {
            lease,
            params: AlgoParams::Concurrency(concurrency::Params::new(2, 60 * SECOND).unwrap()),
            ..fixed(1, key(3))
        };
        let request = [limited, fixed(10, key(2)), slots(1)];
        let fresh = store.probe(&request, 0);
        assert_eq!(fresh[0].remaining, 1);
        assert!(store.is_empty(), "a probe of new keys makes no entry");

        // Allowed twice, rejected (one strike), rejected again: the second
        // strike starts the lockout, then locked out.
        let mut seen = Vec::new();
        for step in 0..5 {
            let now = step * SECOND;
            let before = raw(&store);
            let probed = store.probe(&request, now);
            assert_eq!(
                raw(&store),
                before,
                "step {step}: the probe changed the store"
            );
            let decided = store.decide(&request, now);
            assert_eq!(probed, decided, "step {step}");
            seen.push((
                decided[0].status,
                decided[0].lock_started,
                decided[1].status,
            ));
        }
        use Status::*;
        assert_eq!(
            seen,
            [
                (Allowed, false, Allowed),
                (Allowed, false, Allowed),
                (Rejected, false, NotConsumed),
                (LockedOut, true, NotConsumed),
                (LockedOut, false, NotConsumed),
            ]
        );
        // Lease 1 holds one of the two slots; a probe under another lease
        // takes none, however often it asks.
        for _ in 0..3 {
            let probed = store.probe(&[slots(2)], 5 * SECOND)[0];
            assert_eq!((probed.status, probed.remaining), (Allowed, 0));
        }
        assert_eq!(store.decide(&[slots(2)], 5 * SECOND)[0].status, Allowed);
        assert_eq!(store.decide(&[slots(3)], 5 * SECOND)[0].status, Rejected);

        // Long after: every entry has lapsed; a probe reads them as fresh
        // and leaves them to the sweeper.
        let before = raw(&store);
        assert_eq!(before.len(), 3);
        let late = store.probe(&request, 1000 * SECOND);
        assert!(late.iter().all(|o| o.status == Allowed));
        assert_eq!(raw(&store), before);
    }

    #[test]
    fn concurrency_leases_are_released() {
        let store = MemoryStore::new();
        let c = |lease| Check {
            name: "t".into(),
            key: key(9),
            params: AlgoParams::Concurrency(concurrency::Params::new(1, 60 * SECOND).unwrap()),
            cost: 1,
            lockout: None,
            shadow: false,
            lease,
            quota: false,
            leasing: None,
        };
        assert_eq!(store.decide(&[c(1)], 0)[0].status, Status::Allowed);
        assert_eq!(store.decide(&[c(2)], 0)[0].status, Status::Rejected);
        store.release(&c(1), SECOND);
        assert_eq!(store.decide(&[c(2)], SECOND)[0].status, Status::Allowed);
    }

    #[test]
    fn lockouts_are_listed_and_reset() {
        let store = MemoryStore::new();
        let mut check = Check {
            name: "t".into(),
            key: key(4),
            params: AlgoParams::TokenBucket(
                token_bucket::Params::new(Rate::new(1, SECOND).unwrap(), 1, 0).unwrap(),
            ),
            cost: 1,
            lockout: Some(LockParams {
                after: 1,
                within: 60 * SECOND,
                duration: 30 * SECOND,
                escalate: 1,
                max_duration: 30 * SECOND,
                forget_after: 60 * SECOND,
            }),
            shadow: false,
            lease: 0,
            quota: false,
            leasing: None,
        };
        assert_eq!(store.decide(&[check.clone()], 0)[0].status, Status::Allowed);
        let locked = store.decide(&[check.clone()], 0)[0];
        assert!(locked.lock_started);
        assert_eq!(locked.retry_after, 30 * SECOND);
        assert_eq!(store.lockouts(10 * SECOND), vec![(key(4), 20 * SECOND)]);
        // During the lock: locked_out with the time left, no new strike.
        let during = store.decide(&[check.clone()], 10 * SECOND)[0];
        assert_eq!(
            (during.status, during.retry_after),
            (Status::LockedOut, 20 * SECOND)
        );
        assert_eq!(store.inspect(&key(4), 10 * SECOND).1.lv, 1);
        store.reset(&key(4));
        assert!(store.lockouts(10 * SECOND).is_empty());
        check.lockout = None;
        assert_eq!(
            store.decide(&[check], 10 * SECOND)[0].status,
            Status::Allowed
        );
    }
}
