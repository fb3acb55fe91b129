//! What a request's outcomes (one per check, in order) mean for it: go on
//! after the longest delay any limit asked for, or be rejected in the name
//! of the limit with the longest wait (so its `Retry-After` holds for every
//! other). The [`Limiter`](crate::Limiter) reads a store's answer with it;
//! a caller that decides on a [`MemoryStore`](crate::store::memory::MemoryStore)
//! itself (a simulation) can too.

use crate::{Micros, Outcome, Status};

/// What a request's outcomes mean for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it after `delay`.
    Allow {
        /// The longest hold any limit asked for (`max_delay`, shaping).
        delay: Micros,
        /// A limit in shadow mode would have rejected it.
        shadow_rejected: bool,
    },
    /// Reject it, in the name of check `index`: of the limits that
    /// rejected, the one with the longest wait (so its `Retry-After` holds
    /// for every other).
    Reject {
        /// The rejecting check.
        index: usize,
        /// `locked_out` rather than `rate_limited`.
        locked_out: bool,
        /// The wait to advertise.
        retry_after: Micros,
    },
}

/// Read a request's outcomes (one per check, in order) into its verdict.
pub fn verdict<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Verdict {
    let mut worst: Option<(usize, Micros, bool)> = None;
    let mut delay = 0;
    let mut shadow_rejected = false;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        match outcome.status {
            Status::Rejected | Status::LockedOut => {
                if worst.is_none_or(|(_, r, _)| outcome.retry_after > r) {
                    let locked_out = outcome.status == Status::LockedOut;
                    worst = Some((i, outcome.retry_after, locked_out));
                }
            }
            Status::ShadowRejected => shadow_rejected = true,
            Status::Allowed | Status::NotConsumed | Status::Undecided => {
                delay = delay.max(outcome.delay)
            }
        }
    }
    match worst {
        Some((index, retry_after, locked_out)) => Verdict::Reject {
            index,
            locked_out,
            retry_after,
        },
        None => Verdict::Allow {
            delay,
            shadow_rejected,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: Status, retry_after: Micros, delay: Micros) -> Outcome {
        Outcome::of(status, retry_after, delay)
    }

    #[test]
    fn the_longest_wait_names_the_rejection() {
        use Status::*;
        assert_eq!(
            verdict(&[
                outcome(NotConsumed, 0, 0),
                outcome(Rejected, 5, 0),
                outcome(LockedOut, 9, 0),
                outcome(Rejected, 9, 0),
            ]),
            Verdict::Reject {
                index: 2,
                locked_out: true,
                retry_after: 9
            }
        );
        assert_eq!(
            verdict(&[
                outcome(Allowed, 0, 3),
                outcome(ShadowRejected, 7, 0),
                outcome(Allowed, 0, 8),
            ]),
            Verdict::Allow {
                delay: 8,
                shadow_rejected: true
            }
        );
        assert_eq!(
            verdict(&[]),
            Verdict::Allow {
                delay: 0,
                shadow_rejected: false
            }
        );
    }
}
