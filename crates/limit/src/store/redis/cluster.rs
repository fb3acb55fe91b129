//! Redis Cluster decisions (docs/configuration/limits.md, docs/scaling-out.md):
//! a request's checks grouped by slot, one call per slot, run concurrently;
//! when one slot's call rejects (or fails), what the others took is given back
//! by a refund call (`lua/refund.lua`), so a request that does not pass
//! consumes nothing. Probes ([`probe`]) are grouped the same way.
//!
//! All keys of one (limit, client) share a hash tag (the 32 hex of its
//! store key), so one check never spans slots. The store key hashes the
//! limit's name with the client's value, so the checks of different limits
//! share a slot only by chance (1 in 16384): a request costs one
//! call per limit that applies, concurrently, and a rejection one refund
//! call per other slot that allowed. The request waits for its refunds
//! only within its `timeout`; a call that timed out may still have run and
//! is not refunded (its outcome is unknown).
//!
//! Each slot has its own coalescing queue: requests on a hot key (a
//! `global` or `route` limit) share calls as on one server.

use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster_routing::Slot;
use redis::RedisError;
use smallvec::SmallVec;

use super::{wire, RedisStore, StoreError};
use crate::{Check, Micros, Outcome, Status, StoreKey};

/// The pause before a call that a cluster said was not run goes again
/// (`MOVED` lets redis-rs read the slots first; `TRYAGAIN` and
/// `CLUSTERDOWN` wait out a migration or a failover).
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(5);

/// The slot of a check's keys (their hash tag is the 32 hex of its key).
pub(crate) fn slot(check: &Check) -> Slot {
    slot_of(&check.key)
}

/// The slot of a store key's Redis keys.
pub(crate) fn slot_of(key: &StoreKey) -> Slot {
    let mut hex = [0u8; 32];
    hex::encode_to_slice(key, &mut hex).expect("32 bytes hold the hex of 16");
    Slot::for_key(hex)
}

/// Whether a cluster's error reply says the call was not run, so sending
/// it again cannot count anything twice. Besides the redirections and
/// refusals, redis-rs's "no connection to that node" is one: it fails
/// before sending (an `ASK` to a node it has no connection to yet, such as
/// a primary just added, which owns no slot until its first slot has
/// moved; the call goes to the slot's owner again, and a `MOVED` once the
/// slot has moved makes redis-rs read the slots and connect to it).
pub(crate) fn not_run(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || matches!(
            e.code(),
            Some(
                "MOVED"
                    | "ASK"
                    | "TRYAGAIN"
                    | "CLUSTERDOWN"
                    | "MASTERDOWN"
                    | "LOADING"
                    | "READONLY"
            )
        )
}

/// The node an `ASK` redirection names, as `(host, port)`.
pub(crate) fn ask_target(e: &RedisError) -> Option<(String, u16)> {
    if e.code() != Some("ASK") {
        return None;
    }
    let (addr, _) = e.redirect_node()?;
    let (host, port) = addr.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

/// Decide a request's `checks` on a cluster, all or nothing.
pub(crate) async fn decide(
    store: &RedisStore,
    checks: &[Check],
    now: Micros,
) -> Result<Vec<Outcome>, StoreError> {
    let groups = slot_groups(checks);
    if let [(s, _)] = &groups[..] {
        let (outcomes, at) = store.decide_on(Some(*s), checks, now).await?;
        store.index_lockouts(checks, &outcomes, at);
        return Ok(outcomes);
    }

    let started = tokio::time::Instant::now();
    let parts: Vec<Vec<Check>> = groups
        .iter()
        .map(|(_, places)| places.iter().map(|&i| checks[i].clone()).collect())
        .collect();
    let answers = join_all(
        groups
            .iter()
            .zip(&parts)
            .map(|((s, _), part)| store.decide_on(Some(*s), part, now)),
    )
    .await;

    let blocked = answers.iter().any(|a| match a {
        Ok((outcomes, _)) => outcomes
            .iter()
            .any(|o| matches!(o.status, Status::Rejected | Status::LockedOut)),
        Err(_) => false,
    });
    let failed = answers.iter().find_map(|a| a.as_ref().err().cloned());
    let mut outcomes: Vec<Option<Outcome>> = vec![None; checks.len()];
    let mut refunds = Vec::new();
    for (((_, places), part), answer) in groups.iter().zip(&parts).zip(answers) {
        let Ok((got, at)) = answer else { continue };
        store.index_lockouts(part, &got, at);
        // A slot whose call let the request pass took its units; give them
        // back if another slot rejected it or could not decide.
        let took = !got
            .iter()
            .any(|o| matches!(o.status, Status::Rejected | Status::LockedOut));
        if (blocked || failed.is_some()) && took {
            let given: Vec<Check> = part
                .iter()
                .zip(&got)
                .filter(|(_, o)| o.status == Status::Allowed)
                .map(|(c, o)| refunded(c, o))
                .collect();
            if !given.is_empty() {
                refunds.push(refund(store.clone(), given, at));
            }
        }
        for ((&i, c), mut o) in places.iter().zip(part).zip(got) {
            if blocked && took && o.status == Status::Allowed {
                not_consumed(&mut o, c);
            }
            outcomes[i] = Some(o);
        }
    }
    if !refunds.is_empty() {
        // The request waits for its refunds only within its own deadline
        // (they run on, each bounded by the timeout, if it passes).
        let refunding = tokio::spawn(async move {
            for done in join_all(refunds).await {
                if let Err(error) = done {
                    tracing::warn!(%error, "redis cluster: a refund failed; units stay taken until they lapse (concurrency leases are released again)");
                }
            }
        });
        let left = store.inner.timeout.saturating_sub(started.elapsed());
        let _ = tokio::time::timeout(left, refunding).await;
    }
    if let Some(e) = failed.filter(|_| !blocked) {
        return Err(e);
    }
    // Every slot answered, or one rejected (which decides the request).
    // A slot that failed while another rejected: its checks answer as not
    // consumed (nothing of theirs counts).
    Ok(outcomes
        .into_iter()
        .zip(checks)
        .map(|(o, c)| o.unwrap_or_else(|| not_decided(c)))
        .collect())
}

/// What `decide` would answer `checks` on a cluster, writing nothing: one
/// read-only call per slot (`lua/probe.lua`), run concurrently. When one
/// slot's checks block the request, the other slots' allowed checks answer
/// not consumed, as [`decide`] answers them (there is nothing to refund:
/// nothing was taken). Any slot that cannot answer fails the probe.
pub(crate) async fn probe(
    store: &RedisStore,
    checks: &[Check],
    now: Micros,
) -> Result<Vec<Outcome>, StoreError> {
    let groups = slot_groups(checks);
    let parts: Vec<Vec<Check>> = groups
        .iter()
        .map(|(_, places)| places.iter().map(|&i| checks[i].clone()).collect())
        .collect();
    let answers = join_all(parts.iter().map(|part| store.probe_on(part, now))).await;
    let answers: Vec<Vec<Outcome>> = answers.into_iter().collect::<Result<_, _>>()?;
    let blocked = answers
        .iter()
        .flatten()
        .any(|o| matches!(o.status, Status::Rejected | Status::LockedOut));
    let mut outcomes: Vec<Option<Outcome>> = vec![None; checks.len()];
    for (((_, places), part), got) in groups.iter().zip(&parts).zip(answers) {
        for ((&i, c), mut o) in places.iter().zip(part).zip(got) {
            if blocked && o.status == Status::Allowed {
                not_consumed(&mut o, c);
            }
            outcomes[i] = Some(o);
        }
    }
    Ok(outcomes.into_iter().flatten().collect())
}

/// `checks` grouped by slot: (slot, the checks' places), in the order slots
/// first appear.
fn slot_groups(checks: &[Check]) -> SmallVec<[(Slot, SmallVec<[usize; 4]>); 4]> {
    let mut groups: SmallVec<[(Slot, SmallVec<[usize; 4]>); 4]> = SmallVec::new();
    for (i, c) in checks.iter().enumerate() {
        let s = slot(c);
        match groups.iter_mut().find(|(g, _)| *g == s) {
            Some((_, places)) => places.push(i),
            None => groups.push((s, SmallVec::from_slice(&[i]))),
        }
    }
    groups
}

/// An allowed outcome of `c` made what `dispatch.lua` answers a check
/// another one rejected: nothing taken, its units back in `remaining`.
fn not_consumed(o: &mut Outcome, c: &Check) {
    o.status = Status::NotConsumed;
    o.delay = 0;
    o.remaining = (o.remaining + taken(c, o)).min(o.limit);
    o.taken = 0;
}

/// Units a check took when allowed (as `dispatch.lua` counts them): a
/// lease's block, one concurrency slot, else its cost.
fn taken(c: &Check, o: &Outcome) -> u64 {
    match c.params {
        _ if o.taken > 0 => o.taken,
        crate::AlgoParams::Concurrency(_) => 1,
        _ => c.cost.max(1),
    }
}

/// The check a refund gives back for `c`, allowed as `o`: `c` itself, or
/// for a lease taken, a plain check of the lease's block (the previous
/// lease's give-back stays given).
fn refunded(c: &Check, o: &Outcome) -> Check {
    match c.leasing {
        Some(_) => Check {
            cost: o.taken,
            leasing: None,
            ..c.clone()
        },
        None => c.clone(),
    }
}

/// The outcome of a check whose slot could not answer while another slot
/// rejected the request: nothing taken, nothing known.
fn not_decided(_c: &Check) -> Outcome {
    Outcome {
        status: Status::Undecided,
        lock_started: false,
        delay: 0,
        limit: 0,
        window: 0,
        remaining: 0,
        reset: 0,
        grows_after: 0,
        retry_after: 0,
        at: 0,
        taken: 0,
    }
}

/// Give back `checks` (all of one slot, allowed by a call whose `now` was
/// `at`). If the call fails, its counters stay taken (it may have run, and
/// counting twice is worse), but its concurrency leases go to the release
/// queue, which releases them until they go or their leases end (releasing
/// a lease is idempotent).
async fn refund(store: RedisStore, checks: Vec<Check>, at: Micros) -> Result<(), StoreError> {
    let result = refund_call(&store, &checks, at).await;
    if result.is_err() {
        let leases = checks
            .iter()
            .filter_map(|c| match c.params {
                crate::AlgoParams::Concurrency(p) => {
                    Some((c.key, c.lease, at.saturating_add(p.lease())))
                }
                _ => None,
            })
            .collect();
        store.unreleased(leases);
    }
    result
}

/// The refund call itself.
async fn refund_call(store: &RedisStore, checks: &[Check], at: Micros) -> Result<(), StoreError> {
    // Each check's state key, then its quota key if it reads one (the
    // values it was decided under tell a bucket's units).
    let prefix = &store.inner.prefix;
    let keys: Vec<String> = checks
        .iter()
        .flat_map(|c| {
            let state = super::keys(prefix, &c.key).0;
            let quota = c.quota.then(|| super::tagged(prefix, &c.key, "q"));
            std::iter::once(state).chain(quota)
        })
        .collect();
    let checks: Vec<&Check> = checks.iter().collect();
    let args = wire::RefundArgs {
        at,
        now: store.inner.local_clock.then_some(at),
        checks: &checks,
    };
    store
        .call(|f| &f.refund, keys.len(), keys, args)
        .await
        .map(drop)
}
