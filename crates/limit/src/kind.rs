//! What a decision is called: one word for a request's [`Decision`] (an
//! access log's `limit` field) or for one limit's [`Outcome`] (metrics,
//! dashboards, a simulation's report), so every caller counts and prints
//! the same words.

use crate::{Decision, Outcome, Status};

/// The kind of a decision, with its label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionKind {
    /// No limit applied (`none`).
    NotApplied,
    /// Allowed at once (`allowed`).
    Allowed,
    /// Allowed after a hold (`delayed`): `max_delay`, or shaping.
    Delayed,
    /// Allowed, though a limit in shadow mode would have rejected it
    /// (`shadow_rejected`).
    ShadowRejected,
    /// Rejected (`rejected`).
    Rejected,
    /// Rejected because the client is locked out, or this rejection locked
    /// it out (`locked_out`).
    LockedOut,
    /// The store could not decide and `on_error: deny` refused the request
    /// (`unavailable`).
    Unavailable,
}

impl DecisionKind {
    /// The kinds one limit's outcome can have, in the order counters keep
    /// them.
    pub const PER_LIMIT: [DecisionKind; 5] = [
        DecisionKind::Allowed,
        DecisionKind::Rejected,
        DecisionKind::LockedOut,
        DecisionKind::Delayed,
        DecisionKind::ShadowRejected,
    ];

    /// The label: `none`, `allowed`, `delayed`, `shadow_rejected`,
    /// `rejected`, `locked_out` or `unavailable`.
    pub const fn label(self) -> &'static str {
        match self {
            DecisionKind::NotApplied => "none",
            DecisionKind::Allowed => "allowed",
            DecisionKind::Delayed => "delayed",
            DecisionKind::ShadowRejected => "shadow_rejected",
            DecisionKind::Rejected => "rejected",
            DecisionKind::LockedOut => "locked_out",
            DecisionKind::Unavailable => "unavailable",
        }
    }

    /// Where this kind is in [`DecisionKind::PER_LIMIT`] (`None` for a
    /// kind only a whole request has).
    pub const fn per_limit_index(self) -> Option<usize> {
        match self {
            DecisionKind::Allowed => Some(0),
            DecisionKind::Rejected => Some(1),
            DecisionKind::LockedOut => Some(2),
            DecisionKind::Delayed => Some(3),
            DecisionKind::ShadowRejected => Some(4),
            DecisionKind::NotApplied | DecisionKind::Unavailable => None,
        }
    }

    /// What one limit decided, as counted: `None` when it decided nothing
    /// (another limit rejected the request first, or its Redis Cluster slot
    /// could not answer).
    pub fn of_outcome(outcome: &Outcome) -> Option<DecisionKind> {
        match outcome.status {
            Status::Allowed if outcome.delay > 0 => Some(DecisionKind::Delayed),
            Status::Allowed => Some(DecisionKind::Allowed),
            Status::Rejected => Some(DecisionKind::Rejected),
            Status::LockedOut => Some(DecisionKind::LockedOut),
            Status::ShadowRejected => Some(DecisionKind::ShadowRejected),
            Status::NotConsumed | Status::Undecided => None,
        }
    }
}

impl Decision {
    /// What this decision is called: a hold makes an allowed request
    /// `delayed` (before `shadow_rejected`).
    pub fn kind(&self) -> DecisionKind {
        match self {
            Decision::Allow { delay, .. } if *delay > 0 => DecisionKind::Delayed,
            Decision::Allow {
                shadow_rejected: true,
                ..
            } => DecisionKind::ShadowRejected,
            Decision::Allow { .. } => DecisionKind::Allowed,
            Decision::Reject {
                locked_out: true, ..
            } => DecisionKind::LockedOut,
            Decision::Reject { .. } => DecisionKind::Rejected,
            Decision::Unavailable => DecisionKind::Unavailable,
            Decision::NotApplied => DecisionKind::NotApplied,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_limit_kinds_are_indexed_in_order_and_labels_are_distinct() {
        for (i, kind) in DecisionKind::PER_LIMIT.into_iter().enumerate() {
            assert_eq!(kind.per_limit_index(), Some(i));
        }
        let all = [
            DecisionKind::NotApplied,
            DecisionKind::Allowed,
            DecisionKind::Delayed,
            DecisionKind::ShadowRejected,
            DecisionKind::Rejected,
            DecisionKind::LockedOut,
            DecisionKind::Unavailable,
        ];
        let labels: std::collections::HashSet<_> = all.iter().map(|k| k.label()).collect();
        assert_eq!(labels.len(), all.len());
    }

    #[test]
    fn outcomes_and_decisions_are_named() {
        let kind = |status, delay| DecisionKind::of_outcome(&Outcome::of(status, 0, delay));
        assert_eq!(kind(Status::Allowed, 0), Some(DecisionKind::Allowed));
        assert_eq!(kind(Status::Allowed, 5), Some(DecisionKind::Delayed));
        assert_eq!(kind(Status::LockedOut, 0), Some(DecisionKind::LockedOut));
        assert_eq!(kind(Status::NotConsumed, 0), None);
        assert_eq!(kind(Status::Undecided, 0), None);
        let allow = |delay, shadow_rejected| Decision::Allow {
            delay,
            figures: Vec::new(),
            leases: None,
            shadow_rejected,
        };
        assert_eq!(allow(3, true).kind(), DecisionKind::Delayed);
        assert_eq!(allow(0, true).kind(), DecisionKind::ShadowRejected);
        assert_eq!(allow(0, false).kind().label(), "allowed");
        assert_eq!(Decision::NotApplied.kind().label(), "none");
        assert_eq!(Decision::Unavailable.kind().label(), "unavailable");
    }
}
