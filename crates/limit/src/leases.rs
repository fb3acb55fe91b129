//! The leases this instance holds (SPEC "Leased limits",
//! docs/scaling-out.md): per (limit, client) [`StoreKey`], a block of units
//! taken from the store ([`crate::algorithm::lease::take`], in the
//! decision's store call) and spent here, request by request, without a
//! store call.
//!
//! A request [`LeaseTable::spend`]s its cost from a live lease of its key;
//! when none can pay, it becomes the key's one taker ([`Spend::Take`], a
//! [`Claim`]), giving back in its store call what the old lease did not
//! spend ([`Returned`], [`crate::algorithm::lease::give_back`]), while the
//! key's other requests wait for that lease ([`Spend::Wait`]) rather than
//! each taking one: a burst on one instance takes one block at a time. A
//! request admitted here but rejected by another limit of its route puts
//! its units back ([`LeaseTable::put_back`]): all or nothing. Leases end at
//! their `ttl` or when the window their units count in ends
//! ([`LeaseTable::expired`], swept by the limiter), when their limit's
//! parameters change ([`LeaseTable::spend`] with other params), when the
//! table is full (the one ending soonest goes), and at reload and shutdown
//! ([`LeaseTable::drain`]); every end hands back what was left, so nothing
//! is stranded but by a crash.
//!
//! Sixteen shards, each a `Mutex<HashMap>` held for one map operation
//! (never across an await), as the deny cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

use crate::algorithm::lease::counts_until;
use crate::{AlgoParams, Micros, Outcome, StoreKey};

/// Number of shards (a power of two).
const SHARDS: usize = 16;

/// A lease is topped up once it holds this share of its size or less
/// (1/TOP_UP_AT): late enough that a top-up takes nearly a whole lease (a
/// store call per `size` requests or so: lease 100, one per 94), early
/// enough that the next block is usually back before the last units are
/// spent (6 of 100 last a fifth of a millisecond at 30,000 requests a
/// second; a lone store call takes about 0.1 on a quiet machine).
const TOP_UP_AT: u64 = 16;

/// A block of units held for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Units not spent yet.
    pub left: u64,
    /// The store's clock when it was taken: where a give-back goes.
    pub taken_at: Micros,
    /// The instant (this instance's clock) it ends.
    pub ends: Micros,
    /// The limit's parameters it was taken under: a lease of other
    /// parameters is not spent (a reload changed them, or a calendar
    /// period ended).
    pub params: AlgoParams,
    /// The limit's figures when it was taken, the store's `remaining`
    /// without this lease's units (a local spend reports that plus what
    /// the lease still holds), at this instance's `since`.
    pub figures: Outcome,
    /// This instance's clock when it was taken.
    pub since: Micros,
    /// The limit's name (for metrics).
    pub name: Arc<str>,
    /// The most units it may hold (`distribution.lease`): once a spend
    /// leaves a sixteenth of it or less, the next block is taken ahead
    /// ([`Spend::Local`]'s top-up), up to this size again. 0: never.
    pub size: u64,
}

impl Lease {
    /// The figures of a request spent from this lease at `now` (this
    /// instance's clock): allowed, what the store had left when the lease
    /// was taken plus what the lease holds, the waits moved on.
    pub fn outcome(&self, now: Micros) -> Outcome {
        let gone = now.saturating_sub(self.since);
        let f = &self.figures;
        Outcome {
            status: crate::Status::Allowed,
            lock_started: false,
            delay: 0,
            remaining: f.remaining.saturating_add(self.left).min(f.limit),
            reset: f.reset.saturating_sub(gone),
            grows_after: f.grows_after.saturating_sub(gone).max(1),
            retry_after: 0,
            taken: 0,
            ..*f
        }
    }
}

/// What a lease left unspent when it ended: to give back to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returned {
    /// The (limit, client) it was taken from.
    pub key: StoreKey,
    /// The units left.
    pub units: u64,
    /// The store's clock when it was taken.
    pub taken_at: Micros,
    /// The limit's parameters then (the give-back's spec).
    pub params: AlgoParams,
    /// The limit's name (for metrics).
    pub name: Arc<str>,
}

/// What [`LeaseTable::spend`] did.
#[derive(Debug)]
pub enum Spend {
    /// Spent from the key's lease: the request's figures, the lease's
    /// [`Lease::taken_at`] (which lease a [`LeaseTable::put_back`] goes
    /// to), and, when the lease is nearly spent and no take is in flight, a
    /// claim to top it up ahead ([`LeaseTable::top_up`]: up to its size
    /// again), so that requests do not wait for the next block.
    Local(Outcome, Micros, Option<TopUp>),
    /// No lease could pay, and the caller is now the key's taker: its
    /// store call takes a new lease, giving back what the old one left (if
    /// it left anything). The [`Claim`] ends with [`LeaseTable::install`]
    /// or when dropped, and wakes the key's waiters.
    Take(Option<Returned>, Claim),
    /// Another request is taking the key's next lease: wait for it, then
    /// spend again.
    Wait(OwnedNotified),
}

/// A top-up due ([`Spend::Local`]): the claim on the key, and the units to
/// take (the lease's size less what it holds).
#[derive(Debug)]
pub struct TopUp {
    /// The key's claim, held until [`LeaseTable::top_up`] (or dropped).
    pub claim: Claim,
    /// The most units to take.
    pub want: u64,
}

/// A key's slot in the table: its lease, and the taker in flight.
#[derive(Debug, Default)]
struct Slot {
    lease: Option<Lease>,
    /// Woken when the taker in flight is done.
    taking: Option<Arc<Notify>>,
}

/// The leases of this instance; see the module doc.
#[derive(Debug)]
pub struct LeaseTable {
    shards: Box<[Mutex<HashMap<StoreKey, Slot>>]>,
    /// Leases per shard at most.
    per_shard: usize,
}

/// The right to take a key's next lease ([`Spend::Take`]): while held, the
/// key's other requests wait; dropped, they are woken to try again.
#[derive(Debug)]
pub struct Claim {
    table: Arc<LeaseTable>,
    key: StoreKey,
    notify: Arc<Notify>,
    /// Still registered as the key's taker.
    held: bool,
}

impl Claim {
    /// The key claimed.
    pub fn key(&self) -> &StoreKey {
        &self.key
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.held {
            self.table.unclaim(&self.key, &self.notify);
        }
    }
}

impl LeaseTable {
    /// A table of at most `capacity` leases (at least one per shard).
    pub fn new(capacity: usize) -> LeaseTable {
        LeaseTable {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, key: &StoreKey) -> MutexGuard<'_, HashMap<StoreKey, Slot>> {
        // Store keys are hash output: any byte spreads them evenly.
        let i = usize::from(key[0]) % SHARDS;
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Spend `cost` units of `key`'s lease at `now` (this instance's
    /// clock), if it is live, of `params` and holds them; otherwise the
    /// lease ends and the caller takes the next one, or waits for the
    /// request already taking it (`wait`: false never waits, for a caller
    /// that holds another key's claim).
    pub fn spend(
        self: &Arc<Self>,
        key: &StoreKey,
        cost: u64,
        now: Micros,
        params: &AlgoParams,
        wait: bool,
    ) -> Spend {
        let mut shard = self.shard(key);
        let slot = shard.entry(*key).or_default();
        if let Some(lease) = &mut slot.lease {
            if now < lease.ends && lease.params == *params && lease.left >= cost {
                lease.left -= cost;
                let spent = lease.outcome(now);
                let taken_at = lease.taken_at;
                let want = lease.size.saturating_sub(lease.left);
                let top_up = (lease.size > 1
                    && lease.left <= lease.size / TOP_UP_AT
                    && slot.taking.is_none())
                .then(|| {
                    let notify = Arc::new(Notify::new());
                    slot.taking = Some(notify.clone());
                    TopUp {
                        claim: Claim {
                            table: self.clone(),
                            key: *key,
                            notify,
                            held: true,
                        },
                        want,
                    }
                });
                return Spend::Local(spent, taken_at, top_up);
            }
        }
        if let Some(notify) = slot.taking.as_ref().filter(|_| wait) {
            // Registered under the lock, so the taker's wake-up cannot be
            // missed.
            return Spend::Wait(notify.clone().notified_owned());
        }
        let back = slot.lease.take().and_then(|l| returned(*key, &l));
        let notify = Arc::new(Notify::new());
        if slot.taking.is_none() {
            slot.taking = Some(notify.clone());
        }
        let held = slot
            .taking
            .as_ref()
            .is_some_and(|n| Arc::ptr_eq(n, &notify));
        Spend::Take(
            back,
            Claim {
                table: self.clone(),
                key: *key,
                notify,
                held,
            },
        )
    }

    /// Whether `key`'s lease could pay `cost` at `now` under `params` (the
    /// deny cache asks before answering a leased limit's rejection).
    pub fn could_pay(&self, key: &StoreKey, cost: u64, now: Micros, params: &AlgoParams) -> bool {
        self.shard(key)
            .get(key)
            .and_then(|s| s.lease.as_ref())
            .is_some_and(|l| now < l.ends && l.params == *params && l.left >= cost)
    }

    /// Undo a [`Spend::Local`] of `cost` units from the lease taken at
    /// `taken_at`: the request was rejected by another limit. Nothing when
    /// that lease has ended meanwhile: the units stay taken in the store
    /// (a unit of under-admission), never added to a later lease, whose
    /// window may not be theirs.
    pub fn put_back(&self, key: &StoreKey, cost: u64, taken_at: Micros) {
        if let Some(lease) = self.shard(key).get_mut(key).and_then(|s| s.lease.as_mut()) {
            if lease.taken_at == taken_at {
                lease.left = lease.left.saturating_add(cost);
            }
        }
    }

    /// Hold `lease` for `claim`'s key (a new one just taken, its
    /// requester's cost already spent from it), end the claim and wake the
    /// key's waiters. Returns what leases it displaced left: the key's old
    /// lease (taken by a request that did not wait), and, when the shard
    /// is full, the lease that ends soonest.
    pub fn install(&self, mut claim: Claim, lease: Lease) -> Vec<Returned> {
        let key = claim.key;
        let mut shard = self.shard(&key);
        let mut out = Vec::new();
        let slot = shard.entry(key).or_default();
        if let Some(old) = slot.lease.replace(lease) {
            out.extend(returned(key, &old));
        }
        if claim.held {
            slot.taking = None;
            claim.held = false;
            claim.notify.notify_waiters();
        }
        if shard.len() > self.per_shard {
            let soonest = shard
                .iter()
                .filter(|(k, s)| **k != key && s.taking.is_none())
                .filter_map(|(k, s)| s.lease.as_ref().map(|l| (*k, l.ends)))
                .min_by_key(|(_, ends)| *ends)
                .map(|(k, _)| k);
            if let Some(k) = soonest {
                if let Some(l) = shard.remove(&k).and_then(|s| s.lease) {
                    out.extend(returned(k, &l));
                }
            }
        }
        out
    }

    /// Add `block` (a top-up just taken for `claim`'s key: all its units
    /// unspent) to the key's lease when it is still live, of the same
    /// parameters and its units count until the same instant (the same
    /// window, or a bucket); otherwise `block` becomes the key's lease.
    /// Ends the claim and wakes the key's waiters; returns what a lease it
    /// displaced left.
    pub fn top_up(&self, claim: Claim, block: Lease) -> Vec<Returned> {
        {
            let mut shard = self.shard(&claim.key);
            if let Some(lease) = shard.get_mut(&claim.key).and_then(|s| s.lease.as_mut()) {
                let window = |at| counts_until(&lease.params, at);
                if block.since < lease.ends
                    && lease.params == block.params
                    && window(lease.taken_at) == window(block.taken_at)
                {
                    lease.left = lease.left.saturating_add(block.left);
                    lease.ends = lease.ends.max(block.ends);
                    lease.figures = block.figures;
                    lease.since = block.since;
                    drop(shard);
                    drop(claim);
                    return Vec::new();
                }
            }
        }
        self.install(claim, block)
    }

    /// `claim` ended without a lease: forget it and wake the key's waiters.
    fn unclaim(&self, key: &StoreKey, notify: &Arc<Notify>) {
        let mut shard = self.shard(key);
        if let Some(slot) = shard.get_mut(key) {
            if slot.taking.as_ref().is_some_and(|n| Arc::ptr_eq(n, notify)) {
                slot.taking = None;
            }
            if slot.lease.is_none() && slot.taking.is_none() {
                shard.remove(key);
            }
        }
        notify.notify_waiters();
    }

    /// End `key`'s lease, if any (its client was locked out); what it left.
    pub fn end(&self, key: &StoreKey) -> Option<Returned> {
        let mut shard = self.shard(key);
        let slot = shard.get_mut(key)?;
        let lease = slot.lease.take()?;
        if slot.taking.is_none() {
            shard.remove(key);
        }
        returned(*key, &lease)
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
            shard.retain(|k, slot| {
                if let Some(l) = slot.lease.as_ref().filter(|l| f(l)) {
                    out.extend(returned(*k, l));
                    slot.lease = None;
                }
                slot.lease.is_some() || slot.taking.is_some()
            });
        }
        out
    }

    /// Takes in flight now (a request's, or a top-up).
    pub fn taking(&self) -> usize {
        self.count(|slot| slot.taking.is_some())
    }

    /// Leases held now.
    pub fn len(&self) -> usize {
        self.count(|slot| slot.lease.is_some())
    }

    /// The slots `f` picks, over every shard.
    fn count(&self, f: impl Fn(&Slot) -> bool) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(PoisonError::into_inner);
                s.values().filter(|slot| f(slot)).count()
            })
            .sum()
    }

    /// Whether no lease is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What `lease` of `key` left, if anything.
fn returned(key: StoreKey, lease: &Lease) -> Option<Returned> {
    (lease.left > 0).then(|| Returned {
        key,
        units: lease.left,
        taken_at: lease.taken_at,
        params: lease.params.clone(),
        name: lease.name.clone(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::algorithm::fixed_window;
    use crate::key::KeyHasher;

    fn key(n: u32) -> StoreKey {
        KeyHasher::new(b"leased").value(&n.to_be_bytes()).finish()
    }

    fn params(limit: u64) -> AlgoParams {
        AlgoParams::FixedWindow(
            fixed_window::Params::new(limit, fixed_window::Window::Fixed(1_000_000)).unwrap(),
        )
    }

    fn lease(left: u64, ends: Micros) -> Lease {
        Lease {
            left,
            taken_at: 7,
            ends,
            params: params(100),
            figures: Outcome {
                limit: 100,
                window: 1_000_000,
                remaining: 50,
                reset: 900,
                grows_after: 900,
                ..Outcome::of(crate::Status::Allowed, 0, 0)
            },
            since: 0,
            name: "t".into(),
            size: 0,
        }
    }

    /// Spend once; the claim when it must take (the test's own lease).
    fn take(
        t: &Arc<LeaseTable>,
        k: &StoreKey,
        cost: u64,
        now: Micros,
    ) -> (Option<Returned>, Claim) {
        match t.spend(k, cost, now, &params(100), true) {
            Spend::Take(back, claim) => (back, claim),
            other => panic!("expected a take, got {other:?}"),
        }
    }

    /// Takes `k` afresh and installs a lease of 160 units with `left` of
    /// them, ending at `ends`.
    fn install_of_160(t: &Arc<LeaseTable>, k: &StoreKey, left: u64, ends: Micros) {
        let (_, claim) = take(t, k, 1, 0);
        t.install(
            claim,
            Lease {
                size: 160,
                ..lease(left, ends)
            },
        );
    }

    fn left(t: &Arc<LeaseTable>, k: &StoreKey, cost: u64, now: Micros) -> Option<u64> {
        match t.spend(k, cost, now, &params(100), false) {
            Spend::Local(o, ..) => Some(o.remaining - 50),
            _ => None,
        }
    }

    #[test]
    fn spent_locally_until_empty_then_the_next_is_taken() {
        let t = Arc::new(LeaseTable::new(64));
        let k = key(1);
        let (back, claim) = take(&t, &k, 1, 0);
        assert_eq!(back, None);
        assert!(t.install(claim, lease(3, 100)).is_empty());
        assert_eq!(left(&t, &k, 2, 10), Some(1));
        // Not enough for 2: the lease ends, its last unit goes back.
        let (back, _claim) = take(&t, &k, 2, 10);
        assert_eq!(back.map(|r| (r.units, r.taken_at)), Some((1, 7)));
        assert!(t.is_empty());
    }

    #[test]
    fn a_local_spend_reports_the_stores_figures_and_what_the_lease_holds() {
        let t = Arc::new(LeaseTable::new(64));
        let (_, claim) = take(&t, &key(1), 1, 0);
        t.install(claim, lease(10, 1_000));
        let Spend::Local(o, taken_at, None) = t.spend(&key(1), 1, 300, &params(100), true) else {
            panic!("local")
        };
        assert_eq!(taken_at, 7);
        assert_eq!((o.remaining, o.limit, o.retry_after), (59, 100, 0));
        assert_eq!((o.reset, o.grows_after), (600, 600), "300 µs later");
    }

    #[tokio::test]
    async fn one_taker_per_key_the_others_wait_for_its_lease() {
        let t = Arc::new(LeaseTable::new(64));
        let k = key(1);
        let (_, claim) = take(&t, &k, 1, 0);
        let Spend::Wait(woken) = t.spend(&k, 1, 0, &params(100), true) else {
            panic!("a second request waits")
        };
        // A caller that may not wait takes alongside, unclaimed.
        let Spend::Take(None, other) = t.spend(&k, 1, 0, &params(100), false) else {
            panic!("no wait: a take")
        };
        assert!(!other.held);
        drop(other);
        t.install(claim, lease(5, 100));
        woken.await;
        assert_eq!(left(&t, &k, 1, 1), Some(4));
        // A taker that gets no lease wakes the waiters too.
        let k2 = key(2);
        let (_, claim) = take(&t, &k2, 1, 0);
        let Spend::Wait(woken) = t.spend(&k2, 1, 0, &params(100), true) else {
            panic!("waits")
        };
        drop(claim);
        woken.await;
        assert!(matches!(
            t.spend(&k2, 1, 0, &params(100), true),
            Spend::Take(None, _)
        ));
    }

    #[tokio::test]
    async fn a_nearly_spent_lease_is_topped_up_ahead_to_its_size() {
        let t = Arc::new(LeaseTable::new(64));
        let k = key(1);
        install_of_160(&t, &k, 13, 1_000);
        // 12, 11 left: nothing; 10 left (a sixteenth of 160): a top-up of 150.
        for want in [None, None, Some(150)] {
            let Spend::Local(_, _, top_up) = t.spend(&k, 1, 1, &params(100), true) else {
                panic!("local")
            };
            assert_eq!(top_up.as_ref().map(|u| u.want), want);
            if let Some(u) = top_up {
                // While it is taken, the lease is spent on, with no second
                // top-up; once empty, requests wait for it.
                for _ in 0..10 {
                    assert!(matches!(
                        t.spend(&k, 1, 2, &params(100), true),
                        Spend::Local(_, _, None)
                    ));
                }
                let Spend::Wait(woken) = t.spend(&k, 1, 2, &params(100), true) else {
                    panic!("waits for the top-up")
                };
                let block = Lease {
                    left: 90,
                    taken_at: 8,
                    size: 160,
                    ..lease(90, 2_000)
                };
                assert!(t.top_up(u.claim, block).is_empty());
                woken.await;
            }
        }
        // Merged into the lease (the same window): 90 units, which the
        // lease of taken_at 7 holds.
        assert_eq!(left(&t, &k, 90, 3), Some(0));
        assert_eq!(t.drain().len(), 0);
        // A block of another window replaces the lease, and hands it back.
        install_of_160(&t, &k, 11, 1_000);
        let Spend::Local(_, _, Some(u)) = t.spend(&k, 1, 1, &params(100), true) else {
            panic!("a top-up")
        };
        let later = Lease {
            taken_at: 1_000_007,
            ..lease(90, 2_000_000)
        };
        let back = t.top_up(u.claim, later);
        assert_eq!(back.iter().map(|r| r.units).collect::<Vec<_>>(), vec![10]);
        assert_eq!(left(&t, &k, 89, 1_500_000), Some(1));
    }

    #[test]
    fn a_lease_ends_at_its_time_and_with_other_params() {
        let t = Arc::new(LeaseTable::new(64));
        let (_, c1) = take(&t, &key(1), 1, 0);
        t.install(c1, lease(5, 100));
        let (_, c2) = take(&t, &key(2), 1, 0);
        t.install(c2, lease(5, 200));
        assert_eq!(t.expired(150).len(), 1);
        assert_eq!(t.len(), 1);
        assert!(!t.could_pay(&key(2), 1, 150, &params(99)));
        assert!(t.could_pay(&key(2), 5, 150, &params(100)));
        // Other params: not spent, ended, its units handed back.
        let Spend::Take(Some(r), _) = t.spend(&key(2), 1, 150, &params(99), true) else {
            panic!("other params end the lease")
        };
        assert_eq!((r.units, r.params), (5, params(100)));
        assert!(t.is_empty());
    }

    #[test]
    fn put_back_undoes_a_spend() {
        let t = Arc::new(LeaseTable::new(64));
        let (_, c) = take(&t, &key(1), 1, 0);
        t.install(c, lease(2, 100));
        assert_eq!(left(&t, &key(1), 2, 0), Some(0));
        t.put_back(&key(1), 2, 7);
        assert_eq!(left(&t, &key(1), 1, 0), Some(1));
        // A later lease of the key does not take units of an earlier one.
        let (_, c) = take(&t, &key(1), 5, 0);
        t.install(
            c,
            Lease {
                taken_at: 8,
                ..lease(2, 100)
            },
        );
        t.put_back(&key(1), 1, 7);
        assert_eq!(left(&t, &key(1), 2, 0), Some(0));
    }

    #[test]
    fn a_full_table_hands_back_the_lease_ending_soonest() {
        let t = Arc::new(LeaseTable::new(1));
        // One lease per shard: find two keys of the same shard.
        let a = key(1);
        let b = (2..).map(key).find(|k| k[0] % 16 == a[0] % 16).unwrap();
        let (_, c) = take(&t, &a, 1, 0);
        t.install(c, lease(4, 100));
        let (_, c) = take(&t, &b, 1, 0);
        let out = t.install(c, lease(6, 200));
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].key, out[0].units), (a, 4));
        assert_eq!(t.end(&b).map(|r| r.units), Some(6));
        assert!(t.is_empty());
        assert!(t.drain().is_empty());
    }

    #[test]
    fn concurrent_spends_never_spend_more_than_the_lease() {
        let t = Arc::new(LeaseTable::new(64));
        let (_, c) = take(&t, &key(1), 1, 0);
        t.install(c, lease(1_000, Micros::MAX));
        let spent = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (t, spent) = (t.clone(), spent.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        if let Spend::Local(..) = t.spend(&key(1), 1, 0, &params(100), false) {
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
