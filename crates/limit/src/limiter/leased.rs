//! [`Limiter::decide`] for a request with leased checks on Redis (SPEC
//! "Leased limits", docs/scaling-out.md): each leased check is first
//! spent from this instance's lease of its key ([`LeaseTable`]); only what
//! cannot be answered here goes to the store, in the request's one call:
//! the exact checks, and the leased ones whose lease is empty, which take
//! the next block there and give back what the old one left. All or
//! nothing: when the store rejects the request, the units it spent
//! locally go back into their leases.
//!
//! A store that cannot answer leaves the local spends standing (the units
//! were the fleet's, taken earlier) and applies `on_error` to the rest, so
//! an instance keeps admitting from its leases through an outage until
//! they run out, then follows the policy.

use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;

use super::{Decision, Limiter, Observer};
use crate::algorithm::lease::counts_until;
use crate::leases::{Claim, Lease, LeaseTable, Returned, Spend, TopUp};
use crate::store::redis::RedisStore;
use crate::store::OnError;
use crate::{Check, Leasing, Micros, Outcome, Status};

/// What a lease event was, for [`Limiter::on_lease`]'s callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEvent {
    /// A lease was taken from the store.
    Taken,
    /// The store had not even the request's cost: no lease, a rejection.
    Empty,
    /// A lease ended with units left, and they went back to the store.
    Returned,
    /// A lease ended with units left that could not go back (the store
    /// did not answer): they stay taken until the window or bucket moves
    /// on.
    Stranded,
}

impl LeaseEvent {
    /// Its name in metrics (`tollgate_leases_total{outcome}`).
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseEvent::Taken => "taken",
            LeaseEvent::Empty => "empty",
            LeaseEvent::Returned => "returned",
            LeaseEvent::Stranded => "stranded",
        }
    }
}

/// A leased check answered here: its figures and the lease it spent from
/// (where a put-back goes).
type LocalSpend = Option<(Outcome, Micros)>;

impl Limiter {
    /// The leased path of [`Limiter::decide`] (see the module doc).
    ///
    /// Why one function: the spends, the store call and the put-backs are
    /// one all-or-nothing step over the same per-check state (local
    /// figures, claims); in pieces that state would travel through every
    /// signature.
    pub(super) async fn decide_leased(
        self: &Arc<Self>,
        redis: &Arc<RedisStore>,
        mut checks: Vec<Check>,
        observer: &dyn Observer,
        describe: &(dyn Fn(usize) -> Option<String> + Sync),
        now: Micros,
    ) -> Decision {
        let table = &self.leased;
        let n = checks.len();
        // Inline for a route's few limits: no allocation per request.
        let mut spent: SmallVec<[LocalSpend; 4]> = smallvec::smallvec![None; n];
        let mut claims: SmallVec<[Option<Claim>; 4]> = (0..n).map(|_| None).collect();
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        let mut top_ups = Vec::new();
        for i in 0..n {
            if checks[i].leasing.is_none() {
                continue;
            }
            loop {
                // Wait for another request's lease only while holding no
                // claim (two requests never wait on each other) and within
                // the store's timeout.
                let may_wait =
                    claims.iter().all(Option::is_none) && tokio::time::Instant::now() < deadline;
                let c = &checks[i];
                match table.spend(&c.key, c.cost.max(1), self.clock.now(), &c.params, may_wait) {
                    Spend::Local(o, at, top_up) => {
                        spent[i] = Some((o, at));
                        top_ups.extend(top_up.map(|u| (u, c.clone())));
                        break;
                    }
                    Spend::Take(back, claim) => {
                        if let (Some(r), Some(l)) = (back, checks[i].leasing.as_mut()) {
                            l.back = r.units;
                            l.back_at = r.taken_at;
                        }
                        claims[i] = Some(claim);
                        break;
                    }
                    Spend::Wait(woken) => {
                        let _ = tokio::time::timeout_at(deadline, woken).await;
                    }
                }
            }
        }

        self.top_up(top_ups);
        let asked: Vec<Check> = checks
            .iter()
            .zip(&spent)
            .filter(|(_, s)| s.is_none())
            .map(|(c, _)| c.clone())
            .collect();
        if asked.is_empty() {
            // Every check answered by a lease: no store call.
            let outcomes = spent.iter().flatten().map(|(o, _)| *o).collect();
            return self.conclude(checks, describe, outcomes, now, false);
        }

        let started = Instant::now();
        let result = redis.decide(&asked, now).await;
        observer.store_call("redis", result.is_ok(), started.elapsed());
        let (got, local) = match result {
            Ok(got) => (got, false),
            Err(error) => {
                tracing::warn!(%error, policy = ?self.config.on_error, "limit store unavailable");
                self.release_unanswered(&asked, now, &error);
                // What the failed call was to give back may or may not
                // have gone back: counted as stranded (never sent twice).
                for c in asked
                    .iter()
                    .filter(|c| c.leasing.is_some_and(|l| l.back > 0))
                {
                    self.lease_event(&c.name, LeaseEvent::Stranded);
                }
                match self.config.on_error {
                    OnError::Local => {
                        let exact: Vec<Check> = asked
                            .into_iter()
                            .map(|c| Check { leasing: None, ..c })
                            .collect();
                        (self.local.decide(&exact, now), true)
                    }
                    OnError::Allow => return Decision::unchecked(),
                    OnError::Deny => {
                        put_back(table, &checks, &spent);
                        return Decision::Unavailable;
                    }
                }
            }
        };

        // The store's outcomes in the checks' places, beside the local ones.
        let blocked = got
            .iter()
            .any(|o| matches!(o.status, Status::Rejected | Status::LockedOut));
        let mut got = got.into_iter();
        let mut outcomes = Vec::with_capacity(n);
        for (i, s) in spent.iter().enumerate() {
            let Some((mut o, _)) = *s else {
                let o = got.next().expect("one outcome per check asked");
                outcomes.push(o);
                continue;
            };
            if blocked {
                // Another limit rejected the request: its units go back.
                o.status = Status::NotConsumed;
                o.remaining = o
                    .remaining
                    .saturating_add(checks[i].cost.max(1))
                    .min(o.limit);
            }
            outcomes.push(o);
        }
        if blocked {
            put_back(table, &checks, &spent);
        }

        // Leases taken: held here, the request's cost spent from them.
        let mut displaced = Vec::new();
        for (i, claim) in claims.iter_mut().enumerate() {
            let Some(claim) = claim.take() else { continue };
            let (c, o) = (&checks[i], &mut outcomes[i]);
            if local {
                continue;
            }
            if o.taken == 0 {
                if matches!(o.status, Status::Rejected) {
                    self.lease_event(&c.name, LeaseEvent::Empty);
                }
                if o.status == Status::LockedOut {
                    displaced.extend(table.end(&c.key));
                }
                continue;
            }
            self.lease_event(&c.name, LeaseEvent::Taken);
            let ttl = c.leasing.map_or(0, |l| l.ttl);
            let counts = counts_until(&c.params, o.at).map_or(ttl, |u| u.saturating_sub(o.at));
            let left = o.taken.saturating_sub(c.cost.max(1));
            let lease = Lease {
                left,
                taken_at: o.at,
                ends: now.saturating_add(ttl.min(counts)),
                params: c.params.clone(),
                figures: *o,
                since: now,
                name: c.name.clone(),
                size: c.leasing.map_or(0, |l| l.size),
            };
            // The request's own view: what the store has left and what
            // this instance holds.
            o.remaining = o.remaining.saturating_add(left).min(o.limit);
            displaced.extend(table.install(claim, lease));
        }
        self.give_back_soon(displaced);
        let decision = self.conclude(checks, describe, outcomes, now, local);
        debug_assert!(
            !(blocked && matches!(decision, Decision::Allow { .. })),
            "a blocked request is not allowed"
        );
        decision
    }

    /// Top up the leases `top_ups` names (each due, with its check) off the
    /// request path: one store call for them all (a request's leases empty
    /// together, so they are refilled together), each asking up to its
    /// `want` more units with no request's cost and no lockout strike if the
    /// store has none left; each block joins its lease
    /// ([`LeaseTable::top_up`]). A top-up refused (the store has none, or
    /// another of the call's) or failed takes nothing: the lease is spent
    /// on, then taken anew.
    fn top_up(self: &Arc<Self>, top_ups: Vec<(TopUp, Check)>) {
        if top_ups.is_empty() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (claims, asks): (Vec<Claim>, Vec<Check>) = top_ups
            .into_iter()
            .filter_map(|(u, c)| {
                let terms = c.leasing?;
                let ask = Check {
                    cost: 1,
                    lockout: None,
                    shadow: false,
                    leasing: Some(Leasing {
                        size: u.want.max(1),
                        back: 0,
                        back_at: 0,
                        ..terms
                    }),
                    ..c
                };
                Some((u.claim, ask))
            })
            .unzip();
        let limiter = self.clone();
        handle.spawn(async move {
            let super::Backend::Redis(redis) = &limiter.backend else {
                return;
            };
            let now = limiter.clock.now();
            let Ok(got) = redis.decide(&asks, now).await else {
                return;
            };
            let mut displaced = Vec::new();
            for ((claim, ask), o) in claims.into_iter().zip(&asks).zip(&got) {
                let Some(terms) = ask.leasing.filter(|_| o.taken > 0) else {
                    continue;
                };
                limiter.lease_event(&ask.name, LeaseEvent::Taken);
                let counts =
                    counts_until(&ask.params, o.at).map_or(terms.ttl, |u| u.saturating_sub(o.at));
                let block = Lease {
                    left: o.taken,
                    taken_at: o.at,
                    ends: now.saturating_add(terms.ttl.min(counts)),
                    params: ask.params.clone(),
                    figures: *o,
                    since: now,
                    name: ask.name.clone(),
                    size: terms.size,
                };
                displaced.extend(limiter.leased.top_up(claim, block));
            }
            limiter.give_back_soon(displaced);
        });
    }

    /// Whether the deny cache may answer for `check`: not while this
    /// instance's lease of its key could pay for it.
    pub(super) fn lease_could_pay(&self, check: &Check, now: Micros) -> bool {
        check.leasing.is_some()
            && self
                .leased
                .could_pay(&check.key, check.cost.max(1), now, &check.params)
    }

    /// Give back what `ended` leases left, off the request path.
    pub(super) fn give_back_soon(self: &Arc<Self>, ended: Vec<Returned>) {
        if ended.is_empty() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let limiter = self.clone();
        handle.spawn(async move { limiter.give_back(ended).await });
    }

    /// Give back what `ended` leases left, now; how many went back.
    pub(super) async fn give_back(&self, ended: Vec<Returned>) -> u64 {
        let super::Backend::Redis(redis) = &self.backend else {
            return 0;
        };
        if ended.is_empty() {
            return 0;
        }
        let outcome = match redis.give_back(&ended, self.clock.now()).await {
            Ok(_) => LeaseEvent::Returned,
            Err(error) => {
                tracing::warn!(%error, leases = ended.len(), "leased units not given back; they stay taken until their window or bucket moves on");
                LeaseEvent::Stranded
            }
        };
        for r in &ended {
            self.lease_event(&r.name, outcome);
        }
        if outcome == LeaseEvent::Returned {
            ended.len() as u64
        } else {
            0
        }
    }

    /// End every lease this instance holds and give back what they left
    /// (reload, shutdown): within the store's timeout. Returns how many
    /// leases went back.
    pub async fn return_leases(&self) -> u64 {
        let mut returned = self.give_back(self.leased.drain()).await;
        // A top-up in flight would leave a lease behind: wait for it (up to
        // the store's timeout), then give that back too.
        let deadline = Instant::now() + self.config.timeout;
        while self.leased.taking() > 0 && Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        returned += self.give_back(self.leased.drain()).await;
        returned
    }

    /// Leases this instance holds now.
    pub fn leases_held(&self) -> usize {
        self.leased.len()
    }

    /// Tell `f` of every lease event, with the limit's name (the gateway's
    /// `tollgate_leases_total`). Set once; later calls are ignored.
    pub fn on_lease(&self, f: impl Fn(&Arc<str>, LeaseEvent) + Send + Sync + 'static) {
        let _ = self.lease_events.set(Box::new(f));
    }

    fn lease_event(&self, limit: &Arc<str>, event: LeaseEvent) {
        if let Some(f) = self.lease_events.get() {
            f(limit, event);
        }
    }

    /// The leases whose time is up, given back (the background sweep).
    pub(super) async fn sweep_leases(&self) {
        let ended = self.leased.expired(self.clock.now());
        self.give_back(ended).await;
    }
}

/// The units a blocked request spent from leases, back into them.
fn put_back(table: &LeaseTable, checks: &[Check], spent: &[LocalSpend]) {
    for (c, s) in checks.iter().zip(spent) {
        if let Some((_, at)) = s {
            table.put_back(&c.key, c.cost.max(1), *at);
        }
    }
}
