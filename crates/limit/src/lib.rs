//! tollgate-limit: exact rate limits for one process or a fleet.
//!
//! The limiter of the tollgate gateway, usable on its own: the algorithms
//! (fixed window, sliding window and log, token bucket, leaky bucket, GCRA,
//! concurrency) with lockout penalties, decided all-or-nothing over a
//! request's limits, on an in-memory store or on Redis (one server,
//! Sentinel, or Redis Cluster) through atomic Lua functions, so every
//! instance that shares a Redis shares one set of limits, exactly.
//!
//! It knows nothing of HTTP. The caller names each limit, computes its
//! client's key ([`key::KeyHasher`]: client values are hashed, never stored)
//! and hands the [`Limiter`] one [`Check`] per limit that applies; the
//! [`Decision`] says whether to go on, after which delay, and the figures
//! for rate-limit headers ([`headers`] formats them as
//! `RateLimit-Policy` / `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11,
//! or draft 10's figures) or `X-RateLimit-*` values).
//!
//! # Modules
//!
//! - [`algorithm`]: the maths, pure functions of (parameters, stored
//!   state, now, cost) in integer microseconds, mirrored line for line by
//!   the Lua scripts.
//! - [`limiter`]: the [`Limiter`]: a local deny cache, one store call per
//!   decision, the `on_error` policy, concurrency leases.
//! - [`store`]: where state lives: [`store::memory`] and [`store::redis`],
//!   and their configuration ([`StoreConfig`]).
//! - [`leases`]: leased limits ([`Check::leased`]): the blocks of units an
//!   instance takes from Redis and spends locally, never more than the
//!   limit across a fleet ([`Limiter::return_leases`] at shutdown).
//! - [`settle`]: a cost limit's estimate corrected when the response ends
//!   ([`Settlement`], [`Limiter::settle`]), exactly once.
//! - [`verdict`]: what a request's outcomes mean for it.
//! - [`kind`]: what a decision is called ([`DecisionKind`]).
//! - [`key`]: store keys from a limit's namespace and a client's values.
//! - [`quota`]: a key's own `limit`, `rate` or `burst`, kept by the store.
//! - [`headers`]: the rate-limit header values of a decision.
//! - [`clock`]: whose time the limiter reads ([`ManualClock`] in tests).
//!
//! # On the memory store
//!
//! ```
//! use std::sync::Arc;
//! use tollgate_limit::algorithm::{fixed_window, AlgoParams, SECOND};
//! use tollgate_limit::key::KeyHasher;
//! use tollgate_limit::{Check, Decision, Limiter, StoreConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Limiter::new(&StoreConfig::memory())?;
//! // Three requests a minute per user.
//! let per_user: Arc<str> = "per_user".into();
//! let params = AlgoParams::FixedWindow(fixed_window::Params::new(
//!     3,
//!     fixed_window::Window::Fixed(60 * SECOND),
//! )?);
//! let key = KeyHasher::new(b"per_user").value(b"user-42").finish();
//!
//! let mut allowed = 0;
//! for _ in 0..5 {
//!     let check = Check::new(per_user.clone(), key, params.clone());
//!     match limiter.decide(vec![check]).await {
//!         Decision::Allow { .. } => allowed += 1,
//!         Decision::Reject { limit, retry_after, .. } => {
//!             assert_eq!(&*limit, "per_user");
//!             assert!(retry_after > 0 && retry_after <= 60 * SECOND);
//!         }
//!         other => panic!("{other:?}"),
//!     }
//! }
//! assert_eq!(allowed, 3);
//! # Ok(())
//! # }
//! ```
//!
//! # On Redis
//!
//! The same limits, shared by every process that uses the same Redis (and
//! `prefix`). A Redis that cannot answer within `timeout` is the
//! `on_error` policy's business (here: decide locally), never an error.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tollgate_limit::algorithm::{token_bucket, AlgoParams, Rate, SECOND};
//! use tollgate_limit::key::KeyHasher;
//! use tollgate_limit::store::{OnError, StoreBackend};
//! use tollgate_limit::{Check, Decision, Limiter, StoreConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # // A real redis-server on a free port, stopped when dropped.
//! # let server = tollgate_testkit::RedisServer::start();
//! # let url = server.url();
//! // let url = "redis://127.0.0.1:6379/0".to_owned();
//! let config = StoreConfig {
//!     timeout: Duration::from_millis(50),
//!     on_error: OnError::Local,
//!     prefix: "my-service".into(),
//!     ..StoreConfig::with_backend(StoreBackend::Redis { url })
//! };
//! let limiter = Limiter::new(&config)?;
//! // Ten requests a minute, bursts of twenty, per API key.
//! let params = AlgoParams::TokenBucket(token_bucket::Params::new(
//!     Rate::new(10, 60 * SECOND)?,
//!     20,
//!     0,
//! )?);
//! let key = KeyHasher::new(b"per_key").value(b"the key").finish();
//! for n in 1..=25 {
//!     let check = Check::new(Arc::from("per_key"), key, params.clone());
//!     let allowed = matches!(limiter.decide(vec![check]).await, Decision::Allow { .. });
//!     // The burst, then nothing until tokens come back.
//!     assert_eq!(allowed, n <= 20, "request {n}");
//! }
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod algorithm;
pub mod calendar;
pub mod clock;
pub(crate) mod decide;
pub(crate) mod deny_cache;
pub mod headers;
pub mod key;
pub mod kind;
pub mod leases;
pub mod limiter;
pub mod quota;
pub(crate) mod release;
pub(crate) mod retry;
pub mod settle;
pub mod store;
#[cfg(test)]
mod tests;
pub mod verdict;

use std::sync::Arc;

pub use algorithm::{AlgoParams, AlgoState, LockParams, LockState, Micros};
pub use clock::{Clock, ManualClock, SystemClock};
pub use kind::DecisionKind;
pub use limiter::{Decision, Figure, LeaseEvent, Leases, Limiter, LockedClient, Observer, Request};
pub use settle::{SettleOutcome, Settlement};
pub use store::redis::StoreError;
pub use store::StoreConfig;

/// A store key: 128 bits of a SHA-256 over the limit's identity and the
/// client's key components, never the raw values ([`key::KeyHasher`]).
pub type StoreKey = [u8; 16];

/// One limit's part of a request, as a store receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The limit's name (in decisions, figures and headers).
    pub name: Arc<str>,
    /// The (limit, client) key.
    pub key: StoreKey,
    /// The limit's parameters for this client (after overrides).
    pub params: AlgoParams,
    /// Units this request takes.
    pub cost: u64,
    /// The lockout policy, if the limit has one.
    pub lockout: Option<LockParams>,
    /// `mode: shadow`: decide and count, never reject.
    pub shadow: bool,
    /// The request's lease id, for `concurrency` (0 for the others).
    pub lease: u64,
    /// The store may hold this key's own values ([`quota::Quota`]), read in
    /// the same atomic step as the decision; `params` are the default.
    pub quota: bool,
    /// A leased limit ([`leases`]): the store call that decides this check
    /// takes a block of units for this instance. `None`: exact.
    pub leasing: Option<Leasing>,
}

/// A leased check's terms (SPEC "Leased limits", [`leases`]): what a store
/// call that decides it takes, and what it gives back first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leasing {
    /// The most units one lease takes (`distribution.lease`): the store
    /// takes the largest number in `[cost, size]` the algorithm allows.
    pub size: u64,
    /// How long a lease lives on this instance (`distribution.ttl`).
    pub ttl: Micros,
    /// Units of this key's previous lease that were not spent: given back
    /// (to the window or bucket they came from, [`algorithm::lease::give_back`])
    /// in the same call, before the check, whatever it decides.
    pub back: u64,
    /// When the previous lease was taken (the store's clock), for `back`.
    pub back_at: Micros,
}

impl Leasing {
    /// Terms of `size` units per lease, each living `ttl`, nothing to give
    /// back.
    pub fn new(size: u64, ttl: Micros) -> Leasing {
        Leasing {
            size: size.max(1),
            ttl,
            back: 0,
            back_at: 0,
        }
    }
}

impl Check {
    /// A check of the limit `name` for `key` under `params`: cost 1, no lockout,
    /// enforced, and for `concurrency` a random lease id.
    pub fn new(name: Arc<str>, key: StoreKey, params: AlgoParams) -> Check {
        let lease = match params {
            AlgoParams::Concurrency(_) => fastrand::u64(1..),
            _ => 0,
        };
        Check {
            name,
            key,
            params,
            cost: 1,
            lockout: None,
            shadow: false,
            lease,
            quota: false,
            leasing: None,
        }
    }

    /// The same check, leased ([`Check::leasing`]): only for an algorithm
    /// leases apply to ([`algorithm::lease::leasable`]); ignored otherwise.
    pub fn leased(mut self, terms: Leasing) -> Check {
        if algorithm::lease::leasable(&self.params) {
            self.leasing = Some(terms);
        }
        self
    }

    /// The same check, deciding under the key's own values when the store
    /// holds some ([`Check::quota`]).
    pub fn per_key(mut self) -> Check {
        self.quota = true;
        self
    }

    /// The same check taking `cost` units (at least 1).
    pub fn cost(mut self, cost: u64) -> Check {
        self.cost = cost.max(1);
        self
    }

    /// The same check with a lockout policy.
    pub fn lockout(mut self, lockout: LockParams) -> Check {
        self.lockout = Some(lockout);
        self
    }

    /// Whether this is a `concurrency` check (it holds a lease while the
    /// request runs).
    pub fn is_concurrency(&self) -> bool {
        matches!(self.params, AlgoParams::Concurrency(_))
    }
}

/// What a limit said of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Allowed, and its units were taken.
    Allowed,
    /// Rejected by this limit.
    Rejected,
    /// The client is locked out of this limit (or this rejection locked it).
    LockedOut,
    /// A shadow limit that would have rejected.
    ShadowRejected,
    /// This limit allowed the request but another rejected it, so nothing
    /// was taken.
    NotConsumed,
    /// Redis Cluster: this limit's slot could not answer while another
    /// slot rejected the request. Nothing was taken and its figures are
    /// unknown, so it is left out of the rate-limit fields.
    Undecided,
}

/// One limit's answer, with the figures for headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The decision.
    pub status: Status,
    /// This rejection started a lockout.
    pub lock_started: bool,
    /// Hold the request this long before forwarding it.
    pub delay: Micros,
    /// The quota `q`.
    pub limit: u64,
    /// The window `w`.
    pub window: Micros,
    /// `r`: units left.
    pub remaining: u64,
    /// Draft 10's `t` (the `draft10` header style, `X-RateLimit-Reset`):
    /// until the quota is whole again, `<= window`; for a rejection the
    /// wait until the request could pass, capped at `window`.
    pub reset: Micros,
    /// Draft 11's `t` (the `standard` header style): until the available
    /// quota next grows ([`Verdict::grows_after`](algorithm::Verdict::grows_after)),
    /// at least 1; for a rejection or lockout the wait until the request
    /// could pass, equal to `retry_after`.
    pub grows_after: Micros,
    /// For a rejection or lockout: the wait to advertise in `Retry-After`
    /// (never less than `reset`).
    pub retry_after: Micros,
    /// The store's clock when it decided (µs since the epoch): when an
    /// allowed check's units were taken. A [`Settlement`] names it.
    pub at: Micros,
    /// A leased check ([`Check::leasing`]): the units the store lent this
    /// instance (the lease just taken, this request's cost included; 0
    /// when none was taken). 0 for an exact check.
    pub taken: u64,
}

#[cfg(test)]
impl Outcome {
    /// An outcome of `status` for tests: quota and window 1, nothing left,
    /// no reset, `t` the wait (at least 1).
    pub(crate) fn of(status: Status, retry_after: Micros, delay: Micros) -> Outcome {
        Outcome {
            status,
            lock_started: false,
            delay,
            limit: 1,
            window: 1,
            remaining: 0,
            reset: 0,
            grows_after: retry_after.max(1),
            retry_after,
            at: 0,
            taken: 0,
        }
    }
}
