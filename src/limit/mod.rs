//! Throttling (SPEC §5): algorithms, keys, lockouts, stores, headers.
//!
//! The maths (each algorithm, lockout penalties, [`AlgoParams`] /
//! [`AlgoState`]) is in [`crate::algorithm`], below both this module and the
//! config, which builds validated parameters with it.
//!
//! - [`decide`]: the all-or-nothing decision over a request's limits.
//! - [`key`]: client keys (sources, composites, hashing), exempt/override matching.
//! - [`policy`]: a limit compiled from its config (namespace, overrides).
//! - [`store`]: the memory and Redis stores.
//! - [`deny_cache`]: the local cache of clients known to be rejected.
//! - [`release`]: concurrency releases, retried while the store cannot answer.
//! - [`engine`]: the limiter the pipeline calls: keys, deny cache, store,
//!   `on_error`.
//! - [`headers`]: `RateLimit-Policy` / `RateLimit` / `X-RateLimit-*` and the
//!   rejection response.
//!
//! A store receives a request's [`Check`]s (one per limit of its route) and
//! answers one [`Outcome`] per check, in one atomic step.

pub mod clock;
pub mod decide;
pub mod deny_cache;
pub mod engine;
pub mod headers;
pub mod key;
pub mod plan;
pub mod policy;
pub mod release;
pub mod store;

pub use crate::algorithm::{AlgoParams, AlgoState, LockParams, LockState, Micros};

/// A store key: 128 bits of a SHA-256 over the limit's identity and the
/// client's key components, never the raw values (SPEC §5.2).
pub type StoreKey = [u8; 16];

/// One limit's part of a request, as a store receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
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
    /// The request's lease id, for `concurrency`.
    pub lease: u64,
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

/// One limit's answer, with the figures for headers (SPEC §5.4).
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
    /// `t`: until the quota is back (`<= window`).
    pub reset: Micros,
    /// For a rejection or lockout: the wait to advertise in `Retry-After`
    /// (never less than `reset`).
    pub retry_after: Micros,
}
