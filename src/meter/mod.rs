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

use tollgate_limit::{Check, Figure};

use crate::limit::policy::Policy;

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
