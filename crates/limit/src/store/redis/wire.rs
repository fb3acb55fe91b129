//! The wire format between [`RedisStore`](super::RedisStore) and the Lua
//! scripts: how checks travel in `ARGV`, and how replies come back. The
//! scripts' headers (`lua/*.lua`) give the same contract from their side.
//!
//! Every number is a decimal integer. A call's `ARGV` is `now` (µs; empty
//! for Redis `TIME`), the number of requests (one, or a batch of several),
//! then per request its number of checks, then per check its spec, one
//! argument of space-separated words:
//!
//! ```text
//! algo flags cost params... [after within duration escalate max_duration forget_after]
//! ```
//!
//! with `flags` the sum of 1 (shadow), 2 (the six lockout params
//! follow), 4 (a quota key follows the state key) and 8 (leased: the
//! lease's size follows, last) and the algorithm's params from
//! [`algo_params`]; for `concurrency`, the request's lease id follows as
//! an argument of its own, and for a leased check the units to give back
//! and when they were taken ([`Leasing`](crate::Leasing)), two arguments.
//! A spec depends only on the limit's config, so the script parses each
//! distinct one once. `KEYS` are each check's state key, then its lockout
//! key when it has a lockout, and last the lockout index when any check
//! has one ([`DispatchKeys`](super::DispatchKeys)). The reply is one
//! string of little-endian `f64`s, each an integer: a record per check,
//! every request's checks in order, 10 figures or the 6 of an allowed
//! check's short record ([`outcomes`]).

use redis::{RedisWrite, ToRedisArgs, Value};

use crate::algorithm::settle::clamp_delta;
use crate::algorithm::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
};
use crate::leases::Returned;
use crate::settle::{SettleOutcome, Settlement};
use crate::{AlgoParams, AlgoState, Check, LockState, Micros, Outcome, Status, StoreKey};

/// A reply the store cannot read (a script and the gateway out of step, or
/// a key holding something else): what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ReplyError(pub String);

impl From<String> for ReplyError {
    fn from(message: String) -> Self {
        ReplyError(message)
    }
}

/// An algorithm's params as its Lua file reads them:
///
/// | algorithm | params |
/// |---|---|
/// | `fixed_window` | limit, window (0 = calendar months) |
/// | `calendar_window` (a fixed window of [`fixed_window::Window::Calendar`]) | limit, start, end, next |
/// | `sliding_window`, `sliding_log` | limit, window |
/// | `token_bucket`, `leaky_bucket` | unit, drain ([`Rate::ticks`](crate::algorithm::Rate::ticks)), burst, max_delay |
/// | `gcra` | interval, burst, max_delay |
/// | `concurrency` | limit, lease |
///
/// In that order, without an allocation (it runs for every check of every
/// request).
pub(crate) fn algo_params(p: &AlgoParams) -> impl Iterator<Item = u64> {
    let (values, n) = match p {
        AlgoParams::FixedWindow(p) => match p.window() {
            fixed_window::Window::Fixed(w) => ([p.limit(), w, 0, 0], 2),
            fixed_window::Window::Month => ([p.limit(), 0, 0, 0], 2),
            fixed_window::Window::Calendar { start, end, next } => {
                ([p.limit(), start, end, next], 4)
            }
        },
        AlgoParams::SlidingWindow(p) => ([p.limit(), p.window(), 0, 0], 2),
        AlgoParams::SlidingLog(p) => ([p.limit(), p.window(), 0, 0], 2),
        AlgoParams::TokenBucket(p) => {
            let (unit, drain) = p.rate().ticks();
            ([unit, drain, p.burst(), p.max_delay()], 4)
        }
        AlgoParams::Gcra(p) => ([p.interval(), p.burst(), p.max_delay(), 0], 3),
        AlgoParams::LeakyBucket(p) => {
            let (unit, drain) = p.rate().ticks();
            ([unit, drain, p.burst(), p.max_delay()], 4)
        }
        AlgoParams::Concurrency(p) => ([p.limit(), p.lease(), 0, 0], 2),
    };
    values.into_iter().take(n)
}

/// The algorithm's name in a spec: its own, but `calendar_window` for a
/// fixed window of calendar periods (the Lua side's own table, with four
/// params; the state is fixed_window's).
pub(crate) fn wire_name(p: &AlgoParams) -> &'static str {
    match p {
        AlgoParams::FixedWindow(f)
            if matches!(f.window(), fixed_window::Window::Calendar { .. }) =>
        {
            "calendar_window"
        }
        other => other.name(),
    }
}

/// Writes one check's spec (see the module docs) to `w`.
fn write_spec(c: &Check, w: &mut impl std::io::Write) -> std::io::Result<()> {
    let mut n = itoa::Buffer::new();
    w.write_all(wire_name(&c.params).as_bytes())?;
    // Flags: 1 shadow, 2 a lockout follows, 4 a quota key follows, 8
    // leased (the lease's size ends the spec).
    let flags = u8::from(c.shadow)
        | u8::from(c.lockout.is_some()) << 1
        | u8::from(c.quota) << 2
        | u8::from(c.leasing.is_some()) << 3;
    w.write_all(b" ")?;
    w.write_all(n.format(flags).as_bytes())?;
    w.write_all(b" ")?;
    w.write_all(n.format(c.cost).as_bytes())?;
    for v in algo_params(&c.params) {
        w.write_all(b" ")?;
        w.write_all(n.format(v).as_bytes())?;
    }
    if let Some(l) = &c.lockout {
        for v in [
            l.after,
            l.within,
            l.duration,
            l.escalate,
            l.max_duration,
            l.forget_after,
        ] {
            w.write_all(b" ")?;
            w.write_all(n.format(v).as_bytes())?;
        }
    }
    if let Some(l) = &c.leasing {
        w.write_all(b" ")?;
        w.write_all(n.format(l.size).as_bytes())?;
    }
    Ok(())
}

/// A script's clock argument: the gateway's `now`, or empty for Redis
/// `TIME`.
fn write_clock<W: ?Sized + RedisWrite>(out: &mut W, now: Option<Micros>, n: &mut itoa::Buffer) {
    match now {
        Some(now) => out.write_arg(n.format(now).as_bytes()),
        None => out.write_arg(b""),
    }
}

/// The arguments that follow a check's spec: a `concurrency` check's lease
/// id; a leased check's units to give back and when they were taken.
fn write_check_args<W: ?Sized + RedisWrite>(c: &Check, out: &mut W, n: &mut itoa::Buffer) {
    if matches!(c.params, AlgoParams::Concurrency(_)) {
        out.write_arg(n.format(c.lease).as_bytes());
    }
    if let Some(l) = &c.leasing {
        out.write_arg(n.format(l.back).as_bytes());
        out.write_arg(n.format(l.back_at).as_bytes());
    }
}

#[cfg(test)]
/// Appends one check's part of `dispatch.lua`'s `ARGV` to `args`: its
/// spec, then the lease id for `concurrency`.
pub(crate) fn push_check(args: &mut Vec<String>, c: &Check) {
    let mut spec = Vec::new();
    write_spec(c, &mut spec).expect("a Vec takes every write");
    args.push(String::from_utf8(spec).expect("names and digits"));
    if matches!(c.params, AlgoParams::Concurrency(_)) {
        args.push(c.lease.to_string());
    }
    if let Some(l) = &c.leasing {
        args.push(l.back.to_string());
        args.push(l.back_at.to_string());
    }
}

/// `dispatch.lua`'s whole `ARGV` for one request or a batch of them,
/// written straight into the command (no string per argument: this runs
/// for every request).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DispatchArgs<'a, R> {
    /// The gateway's clock, or `None` for Redis `TIME` (an empty `now`).
    pub now: Option<Micros>,
    /// Each request's checks, in the order they are to be decided.
    pub requests: &'a [R],
}

impl<R: AsRef<[Check]>> ToRedisArgs for DispatchArgs<'_, R> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut n = itoa::Buffer::new();
        write_clock(out, self.now, &mut n);
        out.write_arg(n.format(self.requests.len()).as_bytes());
        for checks in self.requests {
            let checks = checks.as_ref();
            out.write_arg(n.format(checks.len()).as_bytes());
            for c in checks {
                // Writing to the command's buffer cannot fail.
                let _ = write_spec(c, &mut out.writer_for_next_arg());
                write_check_args(c, out, &mut n);
            }
        }
    }
}

/// The figures of a full record in `dispatch.lua`'s reply.
const OUTCOME_WIDTH: usize = 10;

/// The first figure of a short record: an allowed check with no delay and
/// nothing leased, whose 5 other figures follow.
const SHORT_ALLOWED: u64 = 8;

/// The first figure of a short record that another check's rejection
/// turned into not consumed.
const SHORT_NOT_CONSUMED: u64 = 12;

/// The figures of a short record, [`SHORT_ALLOWED`] included.
const SHORT_WIDTH: usize = 6;

/// `dispatch.lua`'s reply: little-endian `f64`s, each a non-negative
/// integer below 2^53: a record per check, then the call's `now`. A record
/// is `OUTCOME_WIDTH` figures (status, lock_started, delay, limit, window,
/// remaining, reset, retry_after, grows_after, taken), or `SHORT_WIDTH`
/// ([`SHORT_ALLOWED`] or [`SHORT_NOT_CONSUMED`], limit, window, remaining,
/// reset, grows_after: a check whose lock_started, delay, retry_after and
/// taken are 0; most answers are, and each figure costs Redis ~300
/// instructions to pack). One [`Outcome`] per check, `checks` in all (every request's, in
/// order), and that `now` (when the allowed checks' units were taken; a
/// Redis Cluster refund names it).
pub(crate) fn outcomes(reply: &Value, checks: usize) -> Result<(Vec<Outcome>, Micros), ReplyError> {
    let Value::BulkString(bytes) = reply else {
        return Err(ReplyError(format!(
            "dispatch: expected a string, got {reply:?}"
        )));
    };
    let bad = |why: &str| {
        ReplyError(format!(
            "dispatch: {} bytes for {checks} checks: {why}",
            bytes.len()
        ))
    };
    if bytes.len() < 8 || !bytes.len().is_multiple_of(8) {
        return Err(bad("not whole figures"));
    }
    let (mut figures, now) = bytes.split_at(bytes.len() - 8);
    let now = figure(now)?;
    let mut out = Vec::with_capacity(checks);
    for _ in 0..checks {
        let Some(head) = figures.get(..8) else {
            return Err(bad("too few"));
        };
        let head = figure(head)?;
        let width = match head {
            SHORT_ALLOWED | SHORT_NOT_CONSUMED => SHORT_WIDTH,
            _ => OUTCOME_WIDTH,
        };
        let Some(o) = figures.get(..width * 8) else {
            return Err(bad("a record cut short"));
        };
        figures = &figures[width * 8..];
        let mut v = [0u64; OUTCOME_WIDTH];
        for (slot, b) in v.iter_mut().zip(o.chunks_exact(8)) {
            *slot = figure(b)?;
        }
        if width == SHORT_WIDTH {
            // Spread out as a full record: allowed (0) or not consumed
            // (4), no lock started, no delay, no retry, nothing leased.
            let [_, limit, window, remaining, reset, grows, ..] = v;
            v = [head - 8, 0, 0, limit, window, remaining, reset, 0, grows, 0];
        }
        out.push(Outcome {
            status: match v[0] {
                0 => Status::Allowed,
                1 => Status::Rejected,
                2 => Status::LockedOut,
                3 => Status::ShadowRejected,
                4 => Status::NotConsumed,
                s => return Err(ReplyError(format!("dispatch: unknown status {s}"))),
            },
            lock_started: v[1] == 1,
            delay: v[2],
            limit: v[3],
            window: v[4],
            remaining: v[5],
            reset: v[6],
            retry_after: v[7],
            grows_after: v[8],
            at: now,
            taken: v[9],
        });
    }
    if !figures.is_empty() {
        return Err(bad("too many"));
    }
    Ok((out, now))
}

/// One little-endian `f64` of a reply that must be a non-negative integer
/// below 2^53, as that integer (exact).
fn figure(b: &[u8]) -> Result<u64, ReplyError> {
    let x = f64::from_le_bytes(b.try_into().expect("8 bytes"));
    if !(0.0..MAX_EXACT).contains(&x) || x.fract() != 0.0 {
        return Err(ReplyError(format!("dispatch: not a figure: {x}")));
    }
    Ok(x as u64)
}

/// `refund.lua`'s `ARGV`: `at` (the dispatch call's `now`), the clock,
/// then each check's spec (and lease), as dispatch sends them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RefundArgs<'a> {
    /// When the units were taken (the dispatch call's reported `now`).
    pub at: Micros,
    /// The gateway's clock, or `None` for Redis `TIME`.
    pub now: Option<Micros>,
    /// The checks to give back.
    pub checks: &'a [&'a Check],
}

impl ToRedisArgs for RefundArgs<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut n = itoa::Buffer::new();
        out.write_arg(n.format(self.at).as_bytes());
        write_clock(out, self.now, &mut n);
        for c in self.checks {
            // Writing to the command's buffer cannot fail.
            let _ = write_spec(c, &mut out.writer_for_next_arg());
            write_check_args(c, out, &mut n);
        }
    }
}

/// `give_back.lua`'s `ARGV`: the clock, then per lease its spec (cost 1),
/// the units left and when it was taken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GiveBackArgs<'a> {
    /// The gateway's clock, or `None` for Redis `TIME`.
    pub now: Option<Micros>,
    /// The leases that ended.
    pub leases: &'a [&'a Returned],
}

impl ToRedisArgs for GiveBackArgs<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut n = itoa::Buffer::new();
        write_clock(out, self.now, &mut n);
        for r in self.leases {
            let check = Check::new("lease".into(), r.key, r.params.clone());
            // Writing to the command's buffer cannot fail.
            let _ = write_spec(&check, &mut out.writer_for_next_arg());
            out.write_arg(n.format(r.units).as_bytes());
            out.write_arg(n.format(r.taken_at).as_bytes());
        }
    }
}

/// `settle.lua`'s `ARGV`: `at`, the clock, the check's spec (as dispatch
/// sends it, cost 1), `delta` (signed, clamped to `±2^52`), and
/// `settle_within`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SettleArgs<'a> {
    /// The settlement.
    pub settlement: &'a Settlement,
    /// The gateway's clock, or `None` for Redis `TIME`.
    pub now: Option<Micros>,
}

impl ToRedisArgs for SettleArgs<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let s = self.settlement;
        let mut n = itoa::Buffer::new();
        out.write_arg(n.format(s.at).as_bytes());
        write_clock(out, self.now, &mut n);
        // Writing to the command's buffer cannot fail.
        let _ = write_spec(&s.as_check(), &mut out.writer_for_next_arg());
        out.write_arg(n.format(clamp_delta(s.delta)).as_bytes());
        out.write_arg(n.format(s.settle_within).as_bytes());
    }
}

/// `settle.lua`'s reply: `{code, units}`, code 1 applied, 2 replayed, 3
/// expired.
pub(crate) fn settled(reply: &Value) -> Result<SettleOutcome, ReplyError> {
    let items = array(reply)?;
    let [code, units] = items else {
        return Err(ReplyError(format!(
            "settle: {} values, expected 2",
            items.len()
        )));
    };
    let Value::Int(units) = *units else {
        return Err(ReplyError(format!("settle: units {units:?}")));
    };
    match int(code)? {
        1 => Ok(SettleOutcome::Applied { units }),
        2 => Ok(SettleOutcome::Replayed { units }),
        3 => Ok(SettleOutcome::Expired),
        c => Err(ReplyError(format!("settle: unknown outcome {c}"))),
    }
}

/// 2^53: every integer below it is exact as an `f64`.
const MAX_EXACT: f64 = 9_007_199_254_740_992.0;

/// `inspect.lua`'s reply: the stored state (`None`: a fresh key) and the
/// lockout state.
pub(crate) fn inspected(
    reply: &Value,
    params: &AlgoParams,
) -> Result<(Option<AlgoState>, LockState), ReplyError> {
    let items = array(reply)?;
    let [found, state, lock] = items else {
        return Err(ReplyError(format!(
            "inspect: {} values, expected 3",
            items.len()
        )));
    };
    let state = if int(found)? == 1 {
        Some(algo_state(params, array(state)?)?)
    } else {
        None
    };
    let lock = match array(lock)? {
        [n, s, lu, lv] => LockState {
            n: int(n)?,
            s: int(s)?,
            lu: int(lu)?,
            lv: int(lv)?,
        },
        other => {
            return Err(ReplyError(format!(
                "inspect: lock of {} values, expected 4",
                other.len()
            )))
        }
    };
    Ok((state, lock))
}

/// An algorithm's state from its Lua `encode()`.
fn algo_state(params: &AlgoParams, f: &[Value]) -> Result<AlgoState, ReplyError> {
    let want = |n: usize| {
        if f.len() == n {
            Ok(())
        } else {
            Err(ReplyError(format!(
                "inspect: {} state of {} values, expected {n}",
                params.name(),
                f.len()
            )))
        }
    };
    let pairs = || {
        if f.len().is_multiple_of(2) {
            Ok(f.chunks(2))
        } else {
            Err(ReplyError(format!(
                "inspect: {} state of odd length",
                params.name()
            )))
        }
    };
    Ok(match params {
        AlgoParams::FixedWindow(_) => {
            want(2)?;
            AlgoState::FixedWindow(fixed_window::State {
                ws: int(&f[0])?,
                n: int(&f[1])?,
            })
        }
        AlgoParams::SlidingWindow(_) => {
            want(3)?;
            AlgoState::SlidingWindow(sliding_window::State {
                ws: int(&f[0])?,
                cur: int(&f[1])?,
                prev: int(&f[2])?,
            })
        }
        AlgoParams::SlidingLog(_) => AlgoState::SlidingLog(sliding_log::State {
            entries: pairs()?
                .map(|e| {
                    Ok(sliding_log::Entry {
                        t: int(&e[0])?,
                        n: int(&e[1])?,
                    })
                })
                .collect::<Result<_, ReplyError>>()?,
        }),
        AlgoParams::TokenBucket(_) => {
            want(3)?;
            AlgoState::TokenBucket(token_bucket::State {
                d: int(&f[0])?,
                ts: int(&f[1])?,
                u: int(&f[2])?,
            })
        }
        AlgoParams::Gcra(_) => {
            want(1)?;
            AlgoState::Gcra(gcra::State { tat: int(&f[0])? })
        }
        AlgoParams::LeakyBucket(_) => {
            want(3)?;
            AlgoState::LeakyBucket(leaky_bucket::State {
                lv: int(&f[0])?,
                ts: int(&f[1])?,
                u: int(&f[2])?,
            })
        }
        AlgoParams::Concurrency(_) => AlgoState::Concurrency(concurrency::State {
            leases: pairs()?
                .map(|l| {
                    Ok(concurrency::Lease {
                        id: int(&l[0])?,
                        exp: int(&l[1])?,
                    })
                })
                .collect::<Result<_, ReplyError>>()?,
        }),
    })
}

/// `lockouts.lua`'s reply: `(key, remaining)` pairs.
pub(crate) fn lockouts(reply: &Value) -> Result<Vec<(StoreKey, Micros)>, ReplyError> {
    let items = array(reply)?;
    if items.len() % 2 != 0 {
        return Err(ReplyError("lockouts: odd reply".to_owned()));
    }
    items
        .chunks(2)
        .map(|e| {
            let hex = text(&e[0])?;
            let key =
                crate::key::parse_hex(&hex).ok_or_else(|| format!("lockouts: bad key {hex:?}"))?;
            Ok((key, int(&e[1])?))
        })
        .collect()
}

fn array(v: &Value) -> Result<&[Value], ReplyError> {
    match v {
        Value::Array(items) | Value::Set(items) => Ok(items),
        other => Err(ReplyError(format!("expected an array, got {other:?}"))),
    }
}

/// A non-negative integer: a Lua number arrives as an integer reply, a
/// string (a lease id beyond 2^53) as a bulk string.
fn int(v: &Value) -> Result<u64, ReplyError> {
    match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| ReplyError(format!("negative value {i}"))),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ReplyError(format!("not an integer: {:?}", String::from_utf8_lossy(b)))),
        other => Err(ReplyError(format!("expected an integer, got {other:?}"))),
    }
}

fn text(v: &Value) -> Result<String, ReplyError> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        other => Err(ReplyError(format!("expected a string, got {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Rate, SECOND};
    use crate::LockParams;

    #[test]
    fn a_check_is_encoded_in_the_documented_order() {
        let c = Check {
            name: "t".into(),
            key: [0; 16],
            params: AlgoParams::TokenBucket(
                token_bucket::Params::new(Rate::new(10, SECOND).unwrap(), 20, 0).unwrap(),
            ),
            cost: 2,
            lockout: Some(LockParams {
                after: 1,
                within: 60,
                duration: 5,
                escalate: 2,
                max_duration: 50,
                forget_after: 100,
            }),
            shadow: true,
            lease: u64::MAX,
            quota: false,
            leasing: None,
        };
        let mut args = Vec::new();
        push_check(&mut args, &c);
        assert_eq!(args, ["token_bucket 3 2 100000 1 20 0 1 60 5 2 50 100"]);
        // Only concurrency sends the lease id, after its spec.
        let lease = Check {
            params: AlgoParams::Concurrency(concurrency::Params::new(3, 9).unwrap()),
            lockout: None,
            shadow: false,
            ..c.clone()
        };
        let mut largs = Vec::new();
        push_check(&mut largs, &lease);
        assert_eq!(largs, ["concurrency 0 2 3 9", "18446744073709551615"]);
        // The whole ARGV: now, r, then per request n and its checks.
        let two = [c.clone(), c.clone()];
        let mut want = vec![b"7".to_vec(), b"1".to_vec(), b"2".to_vec()];
        want.extend(args.iter().chain(&args).map(|a| a.as_bytes().to_vec()));
        let got = DispatchArgs {
            now: Some(7),
            requests: &[&two[..]],
        }
        .to_redis_args();
        assert_eq!(got, want);
        let batch = DispatchArgs {
            now: None,
            requests: &[&two[..1], &[lease][..]],
        }
        .to_redis_args();
        let mut want = vec![b"".to_vec(), b"2".to_vec(), b"1".to_vec()];
        want.extend(args.iter().map(|a| a.as_bytes().to_vec()));
        want.push(b"1".to_vec());
        want.extend(largs.iter().map(|a| a.as_bytes().to_vec()));
        assert_eq!(batch, want);
    }

    fn ints(v: &[i64]) -> Value {
        floats(&v.iter().map(|&i| i as f64).collect::<Vec<_>>())
    }

    fn floats(v: &[f64]) -> Value {
        Value::BulkString(v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    #[test]
    fn outcomes_read_ten_integers_per_check() {
        let got = outcomes(
            &ints(&[
                0, 0, 5, 10, 60000000, 9, 60000000, 0, 6000000, 4, 2, 1, 0, 3, 1000, 0, 1000, 7000,
                7000, 0, 42,
            ]),
            2,
        )
        .unwrap();
        let (got, now) = got;
        assert_eq!(now, 42, "the call's now follows the figures");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].status, Status::Allowed);
        assert_eq!(
            (got[0].delay, got[0].limit, got[0].window),
            (5, 10, 60_000_000)
        );
        assert_eq!(
            (got[0].remaining, got[0].reset, got[0].retry_after),
            (9, 60_000_000, 0)
        );
        assert_eq!(got[1].status, Status::LockedOut);
        assert!(got[1].lock_started && !got[0].lock_started);
        assert_eq!(got[0].grows_after, 6_000_000);
        assert_eq!((got[0].taken, got[1].taken), (4, 0), "a lease's block");
        assert_eq!(
            (got[1].reset, got[1].retry_after, got[1].grows_after),
            (1000, 7000, 7000)
        );
        let big = outcomes(&ints(&[0, 0, 0, (1 << 53) - 1, 1, 1, 1, 1, 1, 0, 0]), 1).unwrap();
        assert_eq!(big.0[0].limit, (1 << 53) - 1);
    }

    #[test]
    fn a_short_record_is_a_check_of_six_figures() {
        // A short record, a full one, a short one, then now.
        let (got, now) = outcomes(
            &ints(&[
                8, 10, 60000000, 9, 60000000, 6000000, //
                1, 0, 0, 3, 1000, 0, 1000, 7000, 7000, 0, //
                8, 5, 1000, 4, 900, 200, //
                12, 5, 1000, 5, 900, 200, //
                42,
            ]),
            4,
        )
        .unwrap();
        assert_eq!(now, 42);
        assert_eq!(got.len(), 4);
        let full = |o: &Outcome| {
            (
                o.status,
                o.lock_started,
                o.delay,
                o.limit,
                o.window,
                o.remaining,
                o.reset,
                o.retry_after,
                o.grows_after,
                o.taken,
            )
        };
        assert_eq!(
            full(&got[0]),
            (
                Status::Allowed,
                false,
                0,
                10,
                60_000_000,
                9,
                60_000_000,
                0,
                6_000_000,
                0
            )
        );
        assert_eq!(got[1].status, Status::Rejected);
        assert_eq!(
            full(&got[2]),
            (Status::Allowed, false, 0, 5, 1000, 4, 900, 0, 200, 0)
        );
        assert_eq!(
            full(&got[3]),
            (Status::NotConsumed, false, 0, 5, 1000, 5, 900, 0, 200, 0)
        );
        assert!(
            outcomes(&ints(&[8, 1, 1, 1, 1, 1, 42]), 2).is_err(),
            "one record for two"
        );
        assert!(
            outcomes(&ints(&[8, 1, 1, 1, 1, 42]), 1).is_err(),
            "a short record cut"
        );
        assert!(
            outcomes(&ints(&[8, 1, 1, 1, 1, 1, 8, 42]), 1).is_err(),
            "a figure left over"
        );
    }

    #[test]
    fn replies_that_do_not_fit_are_errors_not_panics() {
        assert!(outcomes(&Value::Int(1), 1).is_err());
        assert!(outcomes(&ints(&[0; 10]), 1).is_err(), "10 of 11");
        assert!(outcomes(&ints(&[0; 12]), 1).is_err(), "12 of 11");
        assert!(outcomes(&ints(&[0; 21]), 1).is_err(), "two checks for one");
        assert!(
            outcomes(&ints(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1]), 1).is_err(),
            "now < 0"
        );
        assert!(
            outcomes(&ints(&[9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), 1).is_err(),
            "status 9"
        );
        assert!(
            outcomes(&ints(&[0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0]), 1).is_err(),
            "negative"
        );
        assert!(
            outcomes(&ints(&[0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0]), 1).is_err(),
            "a negative t"
        );
        let array = Value::Array(vec![Value::Int(0); 11]);
        assert!(outcomes(&array, 1).is_err(), "an array");
        assert!(outcomes(
            &floats(&[0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]),
            1
        )
        .is_err());
        assert!(outcomes(
            &floats(&[0.0, 0.0, 0.0, f64::NAN, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]),
            1
        )
        .is_err());
        assert!(outcomes(
            &floats(&[
                0.0,
                0.0,
                0.0,
                2f64.powi(53),
                1.0,
                1.0,
                1.0,
                1.0,
                1.0,
                0.0,
                0.0
            ]),
            1
        )
        .is_err());
        let mut short = ints(&[0; 11]);
        if let Value::BulkString(b) = &mut short {
            b.pop();
        }
        assert!(outcomes(&short, 1).is_err(), "a byte short");
        assert!(lockouts(&Value::Array(vec![Value::Int(1)])).is_err());
        assert_eq!(crate::key::parse_hex("zz"), None);
        assert_eq!(crate::key::parse_hex(&"ab".repeat(16)), Some([0xab; 16]));
    }
}
