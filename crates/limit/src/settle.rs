//! Settling a cost limit's estimate (docs/configuration/cost.md): a
//! request admitted with [`Check::cost`] = its estimate is charged
//! `actual - estimate` more (or refunded, when negative) once its response
//! ends, on the same (limit, client), exactly once.
//!
//! At admission the caller keeps, per cost check that passed, the check
//! and its figure ([`Figure`](crate::Figure): the store's
//! [`Outcome::at`], and whether this instance's memory store decided it).
//! When the response ends, [`Figure::settlement`](crate::Figure::settlement)
//! makes the [`Settlement`] of `delta` units, and
//! [`Limiter::settle`](crate::Limiter::settle) applies it in one store
//! call to the key's slot:
//!
//! - the algorithm's `settle` maths ([`crate::algorithm::settle`]: which
//!   window or bucket, never below zero, how far past the limit), under
//!   the key's own values if the check reads them ([`Check::quota`], as
//!   the store holds them then);
//! - once per [`Settlement::id`]: a marker
//!   `<prefix>:{<32 hex>}:c:<16 hex of the id>` on Redis (the key's hash
//!   tag, so the same slot; set `NX` in the same script call,
//!   `lua/settle.lua`), an entry of an expiring set on the memory store. A
//!   replay finds it and changes nothing ([`SettleOutcome::Replayed`]);
//! - until `at + settle_within` only: a later settlement is dropped
//!   ([`SettleOutcome::Expired`]) and changes nothing, so a marker need
//!   live no longer than that (its TTL is what is left of it), and memory
//!   for markers is bounded by the settlements of one `settle_within`.
//!
//! [`Limiter::settle_retrying`](crate::Limiter::settle_retrying) sends it
//! again while the store cannot answer, until that deadline: the marker
//! makes a retry after an unknown outcome (a timeout) safe. It never
//! blocks a response: the caller runs it in a task of its own.
//!
//! ```
//! use std::sync::Arc;
//! use tollgate_limit::algorithm::{fixed_window, AlgoParams, SECOND};
//! use tollgate_limit::key::KeyHasher;
//! use tollgate_limit::{Check, Decision, Limiter, SettleOutcome, StoreConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Limiter::new(&StoreConfig::memory())?;
//! // 10,000 tokens an hour per tenant.
//! let window = fixed_window::Window::Fixed(3600 * SECOND);
//! let tokens = AlgoParams::FixedWindow(fixed_window::Params::new(10_000, window)?);
//! let key = KeyHasher::new(b"tokens").value(b"tenant-7").finish();
//! // Admission charges the estimate: 150 tokens.
//! let check = Check::new(Arc::from("tokens"), key, tokens).cost(150);
//! let Decision::Allow { figures, .. } = limiter.decide(vec![check.clone()]).await else {
//!     panic!("admitted");
//! };
//! // The response used 30: give back 120, once, within 15 minutes.
//! let settlement = figures[0]
//!     .settlement(&check, 30 - 150, 0x5eed, 15 * 60 * SECOND)
//!     .expect("its units were taken");
//! let done = tokio::spawn({
//!     let limiter = limiter.clone();
//!     async move { limiter.settle_retrying(settlement).await }
//! });
//! assert_eq!(done.await??, SettleOutcome::Applied { units: -120 });
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use crate::algorithm::settle::clamp_delta;
use crate::{AlgoParams, Check, Micros, Outcome, Status, StoreKey};

/// One request's correction of one cost limit: `delta` units on the
/// (limit, client) its estimate was charged to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The limit's name (for logs).
    pub name: Arc<str>,
    /// The (limit, client) key the estimate was charged to.
    pub key: StoreKey,
    /// The limit's parameters as the request was decided under them
    /// ([`Check::params`]).
    pub params: AlgoParams,
    /// The check read its key's own values ([`Check::quota`]): so does
    /// the settlement (as the store holds them when it comes).
    pub quota: bool,
    /// When the store decided the request, on its clock ([`Outcome::at`]):
    /// which window the estimate went to, and the start of
    /// `settle_within`.
    pub at: Micros,
    /// This instance's memory store decided it
    /// ([`Figure::local`](crate::Figure::local)): the settlement goes
    /// there, not to Redis.
    pub local: bool,
    /// `actual - estimate` in units: positive charges more, negative
    /// refunds. Clamped to `±2^52`
    /// ([`MAX_LEVEL`](crate::algorithm::settle::MAX_LEVEL)).
    pub delta: i64,
    /// Chosen by the caller, one per request (and limit key): a second
    /// settlement with the same id on the same key is a replay.
    pub id: u64,
    /// How long after `at` a settlement is still applied.
    pub settle_within: Micros,
}

impl Settlement {
    /// The settlement of `check`, decided with `outcome` (by this
    /// instance's memory store if `local`), by `delta` units; `None` when
    /// that check took nothing ([`Status::Allowed`] is the only outcome
    /// that takes units: a shadow rejection, a request another limit
    /// rejected, or `on_error: allow` took none), or when its algorithm
    /// takes no settlements. [`Figure::settlement`](crate::Figure::settlement)
    /// says the same from a decision's figure.
    pub fn new(
        check: &Check,
        (outcome, local): (&Outcome, bool),
        delta: i64,
        id: u64,
        settle_within: Micros,
    ) -> Option<Settlement> {
        if outcome.status != Status::Allowed || !check.params.settles() {
            return None;
        }
        Some(Settlement {
            name: check.name.clone(),
            key: check.key,
            params: check.params.clone(),
            quota: check.quota,
            at: outcome.at,
            local,
            delta: clamp_delta(delta),
            id,
            settle_within,
        })
    }

    /// The last instant it is applied at (exclusive): `at +
    /// settle_within`.
    pub fn deadline(&self) -> Micros {
        self.at.saturating_add(self.settle_within)
    }

    /// The check a store call carries it as: its key, params and quota
    /// flag (cost, lockout, shadow and lease mean nothing here).
    pub(crate) fn as_check(&self) -> Check {
        Check {
            name: self.name.clone(),
            key: self.key,
            params: self.params.clone(),
            cost: 1,
            lockout: None,
            shadow: false,
            lease: 0,
            quota: self.quota,
            leasing: None,
        }
    }
}

/// What became of a settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleOutcome {
    /// Applied now: `units` of its delta took effect (signed like it;
    /// fewer where a refund met empty or a charge the state's top:
    /// [`Settled::applied`](crate::algorithm::settle::Settled::applied)).
    Applied {
        /// The units applied.
        units: i64,
    },
    /// A settlement of this id was applied before: nothing changed now.
    Replayed {
        /// The units that one applied.
        units: i64,
    },
    /// Later than `at + settle_within` on the store's clock: dropped,
    /// nothing changed.
    Expired,
    /// The limit's algorithm takes no settlements (`sliding_log`,
    /// `concurrency`): nothing changed, no store call.
    Unsupported,
}

impl SettleOutcome {
    /// The units this settlement applied, now or before (0 when dropped).
    pub fn units(&self) -> i64 {
        match *self {
            SettleOutcome::Applied { units } | SettleOutcome::Replayed { units } => units,
            SettleOutcome::Expired | SettleOutcome::Unsupported => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_units_that_were_taken_are_settled() {
        use crate::algorithm::{fixed_window, sliding_log, SECOND};
        let window = fixed_window::Window::Fixed(SECOND);
        let params = AlgoParams::FixedWindow(fixed_window::Params::new(5, window).unwrap());
        let check = Check::new("budget".into(), [3; 16], params)
            .cost(4)
            .per_key();
        let outcome = |status| Outcome {
            at: 77,
            ..Outcome::of(status, 0, 0)
        };
        let s = Settlement::new(
            &check,
            (&outcome(Status::Allowed), true),
            i64::MIN,
            9,
            SECOND,
        )
        .unwrap();
        assert_eq!((s.at, s.local, s.quota, s.id), (77, true, true, 9));
        assert_eq!((s.delta, s.deadline()), (-(1 << 52), 77 + SECOND));
        for status in [
            Status::NotConsumed,
            Status::ShadowRejected,
            Status::Rejected,
        ] {
            assert_eq!(
                Settlement::new(&check, (&outcome(status), true), -1, 9, SECOND),
                None
            );
        }
        let log = Check {
            params: AlgoParams::SlidingLog(sliding_log::Params::new(5, SECOND).unwrap()),
            ..check.clone()
        };
        assert_eq!(
            Settlement::new(&log, (&outcome(Status::Allowed), true), -1, 9, SECOND),
            None
        );
    }
}
