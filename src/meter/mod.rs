//! Cost limits at run time (docs/configuration/cost.md): a request's
//! estimate per cost limit at admission ([`reserve`]), what its response
//! says it really cost ([`reading`], fed by the [`body`] wrapper as the
//! response streams), and the settlement of the difference, once, in the
//! background ([`settle`]).
//!
//! The parsing of LLM requests and usage is [`crate::cost`]'s; this module
//! is the plumbing between it, the pipeline and the limiter.

pub mod body;
pub mod llm;
pub mod reading;
pub mod reserve;
pub mod settle;

use std::sync::Arc;

use tollgate_limit::{Check, Figure, Limiter};

use crate::limit::policy::Policy;
use crate::shared::Shared;

/// What admission charged one cost limit for a request, kept until its
/// response ends.
#[derive(Debug, Clone)]
pub struct Meter {
    /// The limit (its `cost:` spec and name).
    pub policy: Arc<Policy>,
    /// The check as decided: key, parameters, and the estimate as `cost`.
    pub check: Check,
    /// Its figure in the decision: when and where (this instance's memory,
    /// or the store) it was charged.
    pub figure: Figure,
    /// The settlement's id: a replay of it is a no-op.
    pub id: u64,
}

impl Meter {
    /// The units admission charged.
    pub fn estimate(&self) -> u64 {
        self.check.cost
    }
}

/// What a request's cost limits charged at admission, to settle once when
/// the request ends, however it ends ([`Bill::settle`] consumes it).
pub struct Bill {
    meters: Vec<Meter>,
    /// The limiter of the runtime the request was admitted under (a reload
    /// since then changes nothing: the settlement goes where the charge
    /// went).
    limiter: Arc<Limiter>,
}

impl Bill {
    /// The charges `meters`, made through `limiter`.
    pub fn new(meters: Vec<Meter>, limiter: Arc<Limiter>) -> Bill {
        Bill { meters, limiter }
    }

    /// Settle every charge from what the response said (`reading`).
    pub fn settle(self, shared: &Arc<Shared>, reading: &reading::Reading) {
        settle::settle(&self.limiter, shared, self.meters, reading);
    }
}
