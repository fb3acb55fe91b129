//! Lockout penalties (docs/configuration/limits.md), as pure maths on a small state. The Lua
//! script `lua/lockout.lua` mirrors these functions line for line.
//!
//! # Formulas
//!
//! ```text
//! state: n  strikes in the current `within` window
//!        s  when that window started (first strike)
//!        lu end of the latest lockout (0: never locked)
//!        lv lockouts so far (the escalation level)
//!
//! locked(now)        = lu > now
//! strike(now):
//!   if lv > 0 and now >= lu + forget_after: lv = 0      -- forgiven
//!   if n == 0 or now >= s + within: n = 0, s = now      -- a new window
//!   n = n + 1
//!   if n >= after:
//!     d  = duration * escalate^lv, capped at max_duration (multiplied step by step)
//!     lu = now + d, lv = lv + 1, n = 0, s = 0           -- locked: this rejection answers locked_out
//! ttl(now) = max(lu + forget_after - now if lv > 0, s + within - now if n > 0, 0)
//! ```

use super::Micros;

/// The validated lockout policy of a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockParams {
    /// Rejections within `within` that trigger a lockout (>= 1).
    pub after: u64,
    /// The window strikes are counted in.
    pub within: Micros,
    /// The first lockout's length.
    pub duration: Micros,
    /// Each repeat lockout lasts `escalate` times the previous (>= 1).
    pub escalate: u64,
    /// No lockout lasts longer.
    pub max_duration: Micros,
    /// A client with no lockout for this long starts again at `duration`.
    pub forget_after: Micros,
}

/// The stored lockout state of one (limit, client) (Redis hash fields
/// `n`, `s`, `lu`, `lv`). `Default` is a client never struck.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockState {
    /// Strikes in the current `within` window.
    pub n: u64,
    /// When that window started.
    pub s: Micros,
    /// When the latest lockout ends (0: never locked).
    pub lu: Micros,
    /// Lockouts so far: the escalation level.
    pub lv: u64,
}

impl LockState {
    /// Whether the client is locked out at `now`.
    pub fn locked(&self, now: Micros) -> bool {
        self.lu > now
    }

    /// How long the state must be kept after `now`; 0: it may be deleted.
    pub fn ttl(&self, p: &LockParams, now: Micros) -> Micros {
        let forget = if self.lv > 0 {
            self.lu.saturating_add(p.forget_after).saturating_sub(now)
        } else {
            0
        };
        let window = if self.n > 0 {
            self.s.saturating_add(p.within).saturating_sub(now)
        } else {
            0
        };
        forget.max(window)
    }
}

/// The length of lockout number `level + 1`: `duration * escalate^level`,
/// capped at `max_duration`.
pub fn lock_length(p: &LockParams, level: u64) -> Micros {
    let mut d = p.duration.min(p.max_duration);
    if p.escalate > 1 {
        for _ in 0..level {
            d = d.saturating_mul(p.escalate);
            if d >= p.max_duration {
                return p.max_duration;
            }
        }
    }
    d
}

/// Count one rejection at `now`. Returns the new state and, if this strike
/// started a lockout, its length.
pub fn strike(p: &LockParams, state: &LockState, now: Micros) -> (LockState, Option<Micros>) {
    let mut s = *state;
    if s.lv > 0 && now >= s.lu.saturating_add(p.forget_after) {
        s.lv = 0;
    }
    if s.n == 0 || now >= s.s.saturating_add(p.within) {
        s.n = 0;
        s.s = now;
    }
    s.n += 1;
    if s.n >= p.after {
        let d = lock_length(p, s.lv);
        s.lu = now.saturating_add(d);
        s.lv += 1;
        s.n = 0;
        s.s = 0;
        return (s, Some(d));
    }
    (s, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    fn params(after: u64, escalate: u64) -> LockParams {
        LockParams {
            after,
            within: 60 * S,
            duration: 10 * S,
            escalate,
            max_duration: 35 * S,
            forget_after: 100 * S,
        }
    }

    #[test]
    fn after_strikes_within_the_window_lock() {
        let p = params(3, 1);
        let (s, l) = strike(&p, &LockState::default(), 0);
        assert_eq!((s.n, l), (1, None));
        let (s, l) = strike(&p, &s, 10 * S);
        assert_eq!((s.n, l), (2, None));
        let (s, l) = strike(&p, &s, 20 * S);
        assert_eq!(l, Some(10 * S));
        assert!(s.locked(29 * S) && !s.locked(30 * S));
        assert_eq!((s.n, s.lv, s.lu), (0, 1, 30 * S));
    }

    #[test]
    fn strikes_outside_within_start_a_new_window() {
        let p = params(2, 1);
        let (s, _) = strike(&p, &LockState::default(), 0);
        let (s, l) = strike(&p, &s, 60 * S);
        assert_eq!((s.n, s.s, l), (1, 60 * S, None));
        let (_, l) = strike(&p, &s, 119 * S);
        assert_eq!(l, Some(10 * S));
    }

    #[test]
    fn escalation_is_capped_and_forgotten() {
        let p = params(1, 2);
        let mut s = LockState::default();
        let mut lengths = vec![];
        let mut now = 0;
        for _ in 0..4 {
            let (next, l) = strike(&p, &s, now);
            lengths.push(l.unwrap() / S);
            now = next.lu;
            s = next;
        }
        assert_eq!(lengths, vec![10, 20, 35, 35]);
        // Forgiven after forget_after without a lockout.
        let (s2, l) = strike(&p, &s, s.lu + 100 * S);
        assert_eq!((l, s2.lv), (Some(10 * S), 1));
        // Not yet forgiven one microsecond earlier.
        let (_, l) = strike(&p, &s, s.lu + 100 * S - 1);
        assert_eq!(l, Some(35 * S));
    }

    #[test]
    fn ttl_covers_the_window_and_the_memory_of_lockouts() {
        let p = params(2, 2);
        let (s, _) = strike(&p, &LockState::default(), 5 * S);
        assert_eq!(s.ttl(&p, 5 * S), 60 * S);
        let (s, _) = strike(&p, &s, 6 * S);
        assert_eq!(s.ttl(&p, 6 * S), 10 * S + 100 * S);
        assert_eq!(LockState::default().ttl(&p, 0), 0);
    }
}
