//! The all-or-nothing decision over a request's limits (docs/configuration/limits.md):
//! the reference procedure. The memory store runs it inside one critical
//! section over the request's keys; `lua/dispatch.lua` mirrors it inside one
//! script call.
//!
//! ```text
//! for each leased limit: what its previous lease left goes back first
//!     (lease::give_back; stored whatever the request's fate), then
//!     v = lease::take(params, state, now, cost, size): the largest block
//!     in [cost, size] that fits, or the rejection of cost
//! for each other limit: v = check(params, state, now, cost)  -- pure, nothing stored yet
//! locked = the enforced limits with a lockout whose lock is still running
//! rejected = the enforced limits not locked whose v is not allowed
//! if nothing is locked or rejected:
//!     store every allowed v.state (for v.ttl); shadow limits that would
//!     reject are counted as shadow_rejected and store nothing
//! else:
//!     store no limit state at all (but the leases given back): the
//!     request consumes nothing anywhere, and no lease is taken
//!     each rejected limit with a lockout counts a strike (lockout::strike);
//!     one that starts a lockout answers locked_out with the lock's length
//! ```
//!
//! Locked limits answer `locked_out` with the lock's remaining time (as
//! `Retry-After` and draft 11's `t`) and are not struck again. Shadow
//! limits never lock and never block.

use crate::algorithm::any::{AlgoParams, AlgoState};
use crate::algorithm::lease;
use crate::algorithm::lockout::{strike, LockState};
use crate::algorithm::Micros;
use crate::{Check, Outcome, Status};

/// What the store holds for one check when the decision starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Loaded<'a> {
    /// The limit's state (`None`: a fresh key).
    pub algo: Option<&'a AlgoState>,
    /// The lockout state (default: never struck).
    pub lock: LockState,
}

/// What the store must write back for one check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Writes {
    /// The new limit state and its time to live (0: delete the key).
    pub algo: Option<(AlgoState, Micros)>,
    /// The new lockout state and its time to live (0: delete the key).
    pub lock: Option<(LockState, Micros)>,
}

/// Decide `checks` at `now` from their `loaded` states (same order).
///
/// Why one function: it is the reference `lua/dispatch.lua` mirrors line
/// for line (the module doc's procedure, in its order); in pieces the two
/// could no longer be read side by side.
pub(crate) fn decide(
    checks: &[Check],
    loaded: &[Loaded<'_>],
    now: Micros,
) -> (Vec<Outcome>, Vec<Writes>) {
    let mut outcomes = Vec::with_capacity(checks.len());
    // Each allowed verdict's state, to be stored unless the request is
    // blocked (then every one is dropped below).
    let mut writes = Vec::with_capacity(checks.len());
    // Each leased check's state after its give-back, if any.
    let mut given_backs = Vec::with_capacity(checks.len());
    let mut blocked = false;

    for (check, state) in checks.iter().zip(loaded) {
        let fresh;
        let mut algo = match state.algo {
            Some(s) => s,
            None => {
                fresh = check.params.fresh();
                &fresh
            }
        };
        // A leased check: the previous lease's units back first (written
        // even if the request is blocked), then a block taken.
        let mut given_back = None;
        let given;
        let (v, taken) = match &check.leasing {
            Some(l) => {
                if let Some(s) = lease::give_back(&check.params, algo, l.back_at, now, l.back) {
                    // A ttl of 0: as a fresh key (deleted).
                    given = if s.ttl > 0 {
                        s.state
                    } else {
                        check.params.fresh()
                    };
                    algo = &given;
                    given_back = Some((given.clone(), s.ttl));
                }
                let t = lease::take(&check.params, algo, now, check.cost, l.size);
                (t.verdict, t.units)
            }
            None => (check.params.check(algo, now, check.cost, check.lease), 0),
        };
        let enforced = !check.shadow;
        let locked = enforced && check.lockout.is_some() && state.lock.locked(now);
        let status = if locked {
            Status::LockedOut
        } else if v.allowed {
            Status::Allowed
        } else if enforced {
            Status::Rejected
        } else {
            Status::ShadowRejected
        };
        blocked |= matches!(status, Status::LockedOut | Status::Rejected);
        let outcome = if locked {
            let left = state.lock.lu - now;
            Outcome {
                status,
                lock_started: false,
                delay: 0,
                limit: v.limit,
                window: v.window,
                remaining: 0,
                reset: left.min(v.window),
                grows_after: left,
                retry_after: left,
                at: now,
                taken: 0,
            }
        } else {
            Outcome {
                status,
                lock_started: false,
                delay: v.delay,
                limit: v.limit,
                window: v.window,
                remaining: v.remaining,
                reset: v.reset_hint(),
                grows_after: v.grows_hint(),
                retry_after: if v.allowed { 0 } else { v.retry_hint() },
                at: now,
                taken: if v.allowed { taken } else { 0 },
            }
        };
        outcomes.push(outcome);
        // The state to store if the request passes; `given_back` the one
        // to store if it does not.
        writes.push(Writes {
            algo: if v.allowed {
                Some((v.state, v.ttl))
            } else {
                given_back.clone()
            },
            lock: None,
        });
        given_backs.push(given_back);
    }
    if !blocked {
        return (outcomes, writes);
    }

    for (i, check) in checks.iter().enumerate() {
        let outcome = &mut outcomes[i];
        writes[i].algo = given_backs[i].take();
        match outcome.status {
            Status::Allowed => {
                // Another limit rejected the request: nothing was taken here.
                outcome.status = Status::NotConsumed;
                outcome.delay = 0;
                // What it would have taken: a lease's block, one slot for
                // concurrency, else its cost (at least 1, as the
                // algorithms count it).
                let taken = match check.params {
                    _ if outcome.taken > 0 => std::mem::take(&mut outcome.taken),
                    AlgoParams::Concurrency(_) => 1,
                    _ => check.cost.max(1),
                };
                // (An allowed outcome carries its verdict's remaining and
                // limit as they were.)
                outcome.remaining = outcome.remaining.saturating_add(taken).min(outcome.limit);
            }
            Status::Rejected => {
                if let Some(p) = &check.lockout {
                    let (lock, started) = strike(p, &loaded[i].lock, now);
                    writes[i].lock = Some((lock, lock.ttl(p, now)));
                    if let Some(length) = started {
                        outcome.status = Status::LockedOut;
                        outcome.lock_started = true;
                        outcome.remaining = 0;
                        outcome.retry_after = length;
                        outcome.reset = length.min(outcome.window);
                        outcome.grows_after = length;
                    }
                }
            }
            Status::ShadowRejected => outcome.delay = 0,
            Status::LockedOut | Status::NotConsumed | Status::Undecided => {}
        }
    }
    (outcomes, writes)
}
