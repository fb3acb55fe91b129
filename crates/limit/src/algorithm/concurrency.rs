//! `concurrency`: at most `limit` requests of a key in flight at once.
//!
//! A request [`acquire`]s a lease before it is forwarded and [`release`]s it
//! when the response body ends or the client goes. Leases expire after
//! `lease` (default 5 minutes), so a crashed instance leaks nothing; expired
//! leases are dropped on every touch. In Redis the leases are a sorted set:
//! member = lease id, score = expiry.
//!
//! # Formulas (integer maths; the Lua script mirrors them)
//!
//! ```text
//! drop every lease with exp <= now              -- ZREMRANGEBYSCORE -inf now
//! exp  = min(exp, now + lease)                  -- after the lease was shortened
//! acquire(id):
//!   id held:          renew it, exp = now + lease, allowed   -- idempotent; long responses renew
//!   n < limit:        add (id, now + lease), allowed
//!   otherwise:        rejected, retry_after = min exp - now
//! remaining   = max(0, limit - n')
//! reset_after = ttl = max exp - now             -- 0 with no lease
//! grows_after = 1 s                             -- a release may free a slot any moment
//! release(id): drop it (and the expired ones)
//! ```
//!
//! `retry_after` is exact only "if nothing else happens": a release frees a
//! slot sooner. It is the latest a slot can stay taken without renewal.

use super::{at_most, nonzero, Micros, ParamError, Verdict, MAX_COUNT, MAX_DURATION, SECOND};

/// A lease's identifier, chosen by the caller (unique per request, e.g.
/// random); in Redis the sorted-set member.
pub type LeaseId = u64;

/// The default `lease`: 5 minutes.
pub const DEFAULT_LEASE: Micros = 300 * SECOND;

/// Validated parameters of a `concurrency` limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    limit: u64,
    lease: Micros,
}

impl Params {
    /// At most `limit` in flight (at least 1), each lease expiring after
    /// `lease` (at least 1 µs; the config's default is [`DEFAULT_LEASE`]).
    pub fn new(limit: u64, lease: Micros) -> Result<Params, ParamError> {
        nonzero("limit", limit)?;
        nonzero("lease", lease)?;
        at_most("limit", limit, MAX_COUNT)?;
        at_most("lease", lease, MAX_DURATION)?;
        Ok(Params { limit, lease })
    }

    /// The most requests in flight.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// How long a lease lives without renewal.
    pub fn lease(&self) -> Micros {
        self.lease
    }
}

/// One request in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Its identifier (the sorted-set member).
    pub id: LeaseId,
    /// When it expires (µs since the epoch; the sorted-set score).
    pub exp: Micros,
}

/// The leases of one key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// The live leases, in no particular order.
    pub leases: Vec<Lease>,
}

impl State {
    /// How long this state must be kept: until its last lease expires.
    pub fn ttl(&self, now: Micros) -> Micros {
        self.leases
            .iter()
            .map(|l| l.exp.saturating_sub(now))
            .max()
            .unwrap_or(0)
    }
}

/// `state` at `now` under `p`: expired leases dropped, the others expiring
/// no later than `now + lease`.
pub fn effective(p: &Params, state: &State, now: Micros) -> State {
    let top = now.saturating_add(p.lease);
    State {
        leases: state
            .leases
            .iter()
            .filter(|l| l.exp > now)
            .map(|l| Lease {
                id: l.id,
                exp: l.exp.min(top),
            })
            .collect(),
    }
}

/// Take (or renew) the lease `lease_id` at `now`.
pub fn acquire(p: &Params, state: &State, now: Micros, lease_id: LeaseId) -> Verdict<State> {
    let mut s = effective(p, state, now);
    let exp = now.saturating_add(p.lease);
    let in_flight = s.leases.len() as u64;
    let (allowed, retry_after) = match s.leases.iter_mut().find(|l| l.id == lease_id) {
        Some(l) => {
            l.exp = exp;
            (true, Some(0))
        }
        None if in_flight < p.limit => {
            s.leases.push(Lease { id: lease_id, exp });
            (true, Some(0))
        }
        None => {
            let first = s.leases.iter().map(|l| l.exp).min().unwrap_or(now);
            // Never 0 for a rejection: a full set has a live lease.
            (false, Some((first - now).max(1)))
        }
    };
    let ttl = s.ttl(now);
    Verdict {
        allowed,
        delay: 0,
        limit: p.limit,
        window: p.lease,
        remaining: p.limit.saturating_sub(s.leases.len() as u64),
        reset_after: ttl,
        grows_after: SECOND,
        retry_after,
        state: s,
        ttl,
    }
}

/// What a release leaves behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The leases left (expired ones dropped too).
    pub state: State,
    /// How long `state` must be kept; 0: delete the key.
    pub ttl: Micros,
    /// Whether the lease was still held (false: it had expired, or was
    /// never granted).
    pub found: bool,
}

/// Give back the lease `lease_id` at `now`. Releasing a lease that is not
/// held is harmless.
pub fn release(state: &State, now: Micros, lease_id: LeaseId) -> Released {
    let mut found = false;
    let leases: Vec<Lease> = state
        .leases
        .iter()
        .filter(|l| {
            let this = l.id == lease_id;
            found |= this && l.exp > now;
            !this && l.exp > now
        })
        .copied()
        .collect();
    let state = State { leases };
    Released {
        ttl: state.ttl(now),
        state,
        found,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{s, T0};
    use super::super::DAY;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_meaningless_params() {
        assert_eq!(Params::new(0, s(1)), Err(ParamError::Zero("limit")));
        assert_eq!(Params::new(1, 0), Err(ParamError::Zero("lease")));
    }

    #[test]
    fn acquire_release_and_expiry() {
        let p = Params::new(2, DEFAULT_LEASE).unwrap();
        let v = acquire(&p, &State::default(), T0, 1);
        assert!(v.allowed);
        assert_eq!((v.remaining, v.reset_after, v.ttl), (1, s(300), s(300)));
        assert_eq!(v.grows_after, s(1), "draft 11: t = 1 s");
        assert_eq!((v.limit, v.window), (2, s(300)));
        let v = acquire(&p, &v.state, T0 + s(10), 2);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
        let full = v.state;
        let v = acquire(&p, &full, T0 + s(20), 3);
        assert!(!v.allowed);
        assert_eq!(v.remaining, 0);
        // Lease 1 expires at T0 + 300 s.
        assert_eq!(v.retry_after, Some(s(280)));
        assert_eq!(v.reset_after, s(290));
        assert!(!acquire(&p, &full, T0 + s(300) - 1, 3).allowed);
        let v = acquire(&p, &full, T0 + s(300), 3);
        assert!(v.allowed);
        assert_eq!(v.state.leases.len(), 2);
        // A release frees the slot at once.
        let r = release(&full, T0 + s(20), 2);
        assert!(r.found);
        assert_eq!(r.ttl, s(280));
        let v = acquire(&p, &r.state, T0 + s(20), 3);
        assert!(v.allowed);
        // Releasing twice, or an unknown lease, is harmless.
        let again = release(&r.state, T0 + s(21), 2);
        assert!(!again.found);
        assert_eq!(again.state, r.state);
        // The last release empties the key.
        let r = release(&r.state, T0 + s(21), 1);
        assert_eq!((r.state.leases.len(), r.ttl), (0, 0));
    }

    #[test]
    fn acquiring_a_held_lease_renews_it() {
        let p = Params::new(1, s(60)).unwrap();
        let v = acquire(&p, &State::default(), T0, 7);
        let v = acquire(&p, &v.state, T0 + s(50), 7);
        assert!(v.allowed);
        assert_eq!(
            v.state.leases,
            vec![Lease {
                id: 7,
                exp: T0 + s(110)
            }]
        );
        assert!(!acquire(&p, &v.state, T0 + s(100), 8).allowed);
    }

    #[test]
    fn long_idle_and_parameter_changes() {
        let st = State {
            leases: vec![
                Lease {
                    id: 1,
                    exp: T0 + s(300),
                },
                Lease {
                    id: 2,
                    exp: T0 + s(300),
                },
                Lease {
                    id: 3,
                    exp: T0 + s(300),
                },
            ],
        };
        // A crashed holder leaks nothing.
        let v = acquire(&Params::new(1, s(300)).unwrap(), &st, T0 + 100 * DAY, 4);
        assert!(v.allowed);
        assert_eq!(v.state.leases.len(), 1);
        // A lowered limit: in-flight requests stay, new ones wait.
        let p = Params::new(2, s(30)).unwrap();
        let v = acquire(&p, &st, T0, 4);
        assert!(!v.allowed);
        assert_eq!(v.remaining, 0);
        // A shorter lease shortens the old ones too.
        assert_eq!(v.retry_after, Some(s(30)));
        assert_eq!(v.reset_after, s(30));
    }

    proptest! {
        #[test]
        fn any_input_is_total(
            limit in 1u64..=MAX_COUNT,
            lease in 1u64..=MAX_DURATION,
            leases in proptest::collection::vec((0u64..4, any::<u64>()), 0..8),
            now: u64, id in 0u64..4,
        ) {
            let p = Params::new(limit, lease).unwrap();
            let st = State { leases: leases.into_iter().map(|(id, exp)| Lease { id, exp }).collect() };
            let v = acquire(&p, &st, now, id);
            prop_assert!(v.reset_after <= v.window);
            release(&st, now, id);
        }

        #[test]
        fn never_more_than_limit_in_flight(
            limit in 1u64..6,
            lease in 1u64..3_000,
            ops in proptest::collection::vec((0u64..500, 0u64..10, any::<bool>()), 0..200),
        ) {
            let p = Params::new(limit, lease).unwrap();
            let mut st = State::default();
            let mut now = T0;
            for (gap, id, take) in ops {
                now += gap;
                if take {
                    let v = acquire(&p, &st, now, id);
                    prop_assert!(v.reset_after <= v.window);
                    if v.allowed {
                        st = v.state;
                    } else {
                        let r = v.retry_after.unwrap_or(0);
                        prop_assert!(r > 0);
                        prop_assert!(!acquire(&p, &st, now + r - 1, id).allowed);
                        prop_assert!(acquire(&p, &st, now + r, id).allowed);
                    }
                } else {
                    st = release(&st, now, id).state;
                }
                let live = st.leases.iter().filter(|l| l.exp > now).count() as u64;
                prop_assert!(live <= limit);
            }
        }
    }
}
