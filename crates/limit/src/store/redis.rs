//! The Redis store (docs/scaling-out.md `backend: redis`): limit state shared by every
//! gateway instance, decided by atomic Lua functions.
//!
//! - At most one `FCALL` round trip per request decides all of its limits
//!   (`lua/dispatch.lua`, mirroring `decide`; `lua/probe.lua` answers the
//!   same without writing, for the admin API's probes);
//!   the requests that arrive while a call is in flight share the next one
//!   (`coalesce`), each still decided on its own, all or nothing, in
//!   arrival order.
//!   The code lives in `lua/`, one file per concern, embedded at build time
//!   and registered as one Redis Functions library ([`lua::Library`]): by
//!   `FUNCTION LOAD REPLACE` when the store starts, and again whenever a
//!   server answers that a function is missing (a restart without
//!   persistence, a failover, `FUNCTION FLUSH`), after which the call is
//!   sent again (it was not run). Redis 7.0 or newer (Valkey 7.2+).
//! - Keys: per (limit, client) a state key and a lockout key sharing one
//!   Redis Cluster hash tag, `<prefix>:{<32 hex>}:s` and `...:l`, built by
//!   [`keys`] only; client values never appear in them.
//! - Every call has a hard deadline (`timeout`): the connection manager
//!   queues commands while it reconnects, and a request must never wait on
//!   that longer.
//! - A circuit breaker (`breaker`) fails calls fast after repeated
//!   failures and lets one probe through after a growing back-off; when it
//!   opens, the connection is replaced, because a stalled server or a dead
//!   peer may never close the old one.
//! - Resets reach every instance through the pub/sub channel
//!   `<prefix>:reset` (`RedisStore::subscribe_resets`).
//!
//! Time: with `clock: local` the gateway's `now` travels in `ARGV` (tests
//! drive it); with `clock: store` the scripts read Redis `TIME`, so
//! instances with skewed clocks agree. Redis expiries are relative
//! (`SET ... PX`, `PEXPIRE`), so they hold under either clock.

pub(crate) mod breaker;
pub(crate) mod cluster;
pub(crate) mod coalesce;
pub(crate) mod connect;
pub(crate) mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::cluster_routing::Slot;
use redis::{Client, RedisError, RedisWrite, ToRedisArgs, Value};
use tokio::sync::mpsc;

use self::breaker::{Admission, Breaker};
use self::coalesce::{Arrival, Queue, Waiting};
use self::connect::{Conn, Source, CONNECT_TIMEOUT};
use crate::leases::Returned;
use crate::quota::Quota;
use crate::settle::{SettleOutcome, Settlement};
use crate::store::{StoreBackend, StoreTls};
use crate::{AlgoState, Check, LockState, Micros, Outcome, StoreKey};

/// Why a store call gave no answer. Every variant means "apply `on_error`".
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The call did not finish within the store's `timeout`.
    #[error("redis: no answer within the timeout")]
    Timeout,
    /// Recent calls failed: the store is not called until the breaker's
    /// back-off lets a probe through.
    #[error("redis unavailable: circuit breaker open")]
    BreakerOpen,
    /// Redis could not be reached, or says it cannot serve now (loading,
    /// busy, read-only...).
    #[error("redis unavailable: {0}")]
    Unavailable(#[source] Arc<RedisError>),
    /// Redis answered a call with an error.
    #[error("redis error: {0}")]
    Redis(#[source] Arc<RedisError>),
    /// Redis answered with a reply the store cannot read.
    #[error("redis reply unreadable: {0}")]
    Reply(#[from] wire::ReplyError),
    /// The URL cannot be used (an error of [`RedisStore::new`]).
    #[error("invalid redis url: {0}")]
    InvalidUrl(#[source] Arc<RedisError>),
    /// [`RedisStore::new`] was called outside a Tokio runtime.
    #[error("the Redis store needs a Tokio runtime")]
    NoRuntime,
}

/// The keys of one (limit, client): `(state, lockout)`, i.e.
/// `<prefix>:{<32 hex>}:s` and `<prefix>:{<32 hex>}:l`. The braces are a
/// Redis Cluster hash tag, so both land on one slot and one script can touch
/// them. The only place keys are built.
pub fn keys(prefix: &str, key: &StoreKey) -> (String, String) {
    (tagged(prefix, key, "s"), tagged(prefix, key, "l"))
}

/// `<prefix>:{<32 hex>}:<suffix>`.
pub(crate) fn tagged(prefix: &str, key: &StoreKey, suffix: &str) -> String {
    let mut s = Vec::with_capacity(prefix.len() + suffix.len() + 36);
    write_tagged(&mut s, prefix, key, suffix);
    String::from_utf8(s).expect("a prefix, hex and an ASCII suffix")
}

/// Writes `<prefix>:{<32 hex>}:<suffix>` to `w`, without `format!` (it
/// runs for every check of every request; `format!` cost ~2,000
/// instructions a key).
fn write_tagged(w: &mut impl std::io::Write, prefix: &str, key: &StoreKey, suffix: &str) {
    let mut hex = [0u8; 32];
    hex::encode_to_slice(key, &mut hex).expect("32 bytes hold the hex of 16");
    // Writes to a Vec (or to the command being built) cannot fail.
    let _ = w
        .write_all(prefix.as_bytes())
        .and_then(|()| w.write_all(b":{"))
        .and_then(|()| w.write_all(&hex))
        .and_then(|()| w.write_all(b"}:"))
        .and_then(|()| w.write_all(suffix.as_bytes()));
}

/// `dispatch.lua`'s `KEYS` for one request or a batch: each check's state
/// key, then its quota key if it reads the key's own values
/// ([`Check::quota`]), then its lockout key if it has a lockout; last, the
/// lockout index if any check has one. Written straight into the command.
pub(crate) struct DispatchKeys<'a, R> {
    /// The key prefix.
    pub prefix: &'a str,
    /// Each request's checks, in order.
    pub requests: &'a [R],
    /// Whether the lockout index follows (not on a cluster, where it lives
    /// on a slot of its own and the store enters lockouts itself).
    pub index: bool,
}

impl<R: AsRef<[Check]>> DispatchKeys<'_, R> {
    fn checks(&self) -> impl Iterator<Item = &Check> {
        self.requests.iter().flat_map(|r| r.as_ref())
    }

    /// How many keys there are.
    pub(crate) fn len(&self) -> usize {
        let (mut keys, mut locks) = (0, false);
        for c in self.checks() {
            keys += 1 + usize::from(c.quota) + usize::from(c.lockout.is_some());
            locks |= c.lockout.is_some();
        }
        keys + usize::from(locks && self.index)
    }
}

impl<R: AsRef<[Check]>> ToRedisArgs for DispatchKeys<'_, R> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut locks = false;
        for c in self.checks() {
            write_tagged(&mut out.writer_for_next_arg(), self.prefix, &c.key, "s");
            if c.quota {
                write_tagged(&mut out.writer_for_next_arg(), self.prefix, &c.key, "q");
            }
            if c.lockout.is_some() {
                write_tagged(&mut out.writer_for_next_arg(), self.prefix, &c.key, "l");
                locks = true;
            }
        }
        if locks && self.index {
            write_index_key(&mut out.writer_for_next_arg(), self.prefix);
        }
    }
}

/// The marker of settlement `id` on one (limit, client):
/// `<prefix>:{<32 hex>}:c:<16 hex of id>`, the key's hash tag (so one
/// script call touches it with the state), set while a replay of the
/// settlement may still come ([`crate::settle`]). Hex, never a client
/// value.
pub fn settled_key(prefix: &str, key: &StoreKey, id: u64) -> String {
    tagged(prefix, key, &format!("c:{id:016x}"))
}

/// The label key of one (limit, client): `<prefix>:{<32 hex>}:n`, holding
/// `"<limit>\t<display key>"` while a lockout runs, so every instance's
/// `GET /lockouts` can name the client. The display key is a value, never
/// part of a key name.
pub fn label_key(prefix: &str, key: &StoreKey) -> String {
    tagged(prefix, key, "n")
}

/// The lockout index, a sorted set (member: the 32 hex of a (limit,
/// client), score: the end of its lockout) behind `GET /lockouts`. It has no
/// hash tag: on Redis Cluster it lives on a slot of its own, so decision
/// calls leave it out and the store enters lockouts in it with a separate
/// call ([`RedisStore::index_lockouts`]).
pub(crate) fn index_key(prefix: &str) -> String {
    let mut s = Vec::with_capacity(prefix.len() + 9);
    write_index_key(&mut s, prefix);
    String::from_utf8(s).expect("a prefix and ASCII")
}

/// Writes `<prefix>:lockouts` to `w`.
fn write_index_key(w: &mut impl std::io::Write, prefix: &str) {
    // Writes to a Vec (or to the command being built) cannot fail.
    let _ = w
        .write_all(prefix.as_bytes())
        .and_then(|()| w.write_all(b":lockouts"));
}

/// The pub/sub channel of admin resets. A message is the 32 hex of a store
/// key, or `*` for everything.
pub(crate) fn reset_channel(prefix: &str) -> String {
    format!("{prefix}:reset")
}

pub mod lua;

/// The library and the names of its functions.
#[derive(Debug)]
struct Functions {
    library: lua::Library,
    dispatch: String,
    release: String,
    inspect: String,
    lockouts: String,
    refund: String,
    probe: String,
    settle: String,
    give_back: String,
    /// How many times a call found the library missing and loaded it.
    loads: AtomicU64,
    /// Held while loading: the calls that find the library missing at once
    /// (every request in flight at a failover) load it once between them.
    loading: tokio::sync::Mutex<()>,
}

impl Functions {
    fn new() -> Functions {
        let library = lua::Library::gateway();
        Functions {
            dispatch: library.function("dispatch"),
            release: library.function("release"),
            inspect: library.function("inspect"),
            lockouts: library.function("lockouts"),
            refund: library.function("refund"),
            probe: library.function("probe"),
            settle: library.function("settle"),
            give_back: library.function("give_back"),
            library,
            loads: AtomicU64::new(0),
            loading: tokio::sync::Mutex::new(()),
        }
    }

    /// Load the library after a call that started when `seen` loads had
    /// happened found it missing, unless another call has loaded it since.
    async fn reload(&self, conn: &Conn, seen: u64) -> Result<(), RedisError> {
        let _one = self.loading.lock().await;
        if self.loads.load(Ordering::Acquire) != seen {
            return Ok(());
        }
        tracing::info!(library = %self.library.name, "redis: loading the function library");
        load_library(conn.clone(), &self.library.src).await?;
        self.loads.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

/// A Redis-backed limit store. Cheap to clone: clones share one multiplexed
/// connection, one breaker and the functions.
#[derive(Debug, Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Where connections come from (one server, Sentinel, Cluster).
    source: Source,
    /// The current connection; replaced when it may be stale
    /// ([`RedisStore::refresh`]). Calls clone it (a handle) and never hold
    /// the lock across an await.
    conn: Mutex<Conn>,
    /// The server the connection reaches (not on a cluster): the reset
    /// subscription listens there.
    server: Mutex<Option<Client>>,
    /// A fresh connection is being made.
    refreshing: AtomicBool,
    /// When the last one was started.
    refreshed: Mutex<Option<Instant>>,
    /// Woken when a connection is swapped in: calls that found none yet
    /// ([`Conn::Pending`]) wait for it within their deadline.
    swapped: tokio::sync::Notify,
    prefix: String,
    timeout: Duration,
    local_clock: bool,
    breaker: Mutex<Breaker>,
    functions: Functions,
    /// Decision calls in flight and the requests waiting for the next one:
    /// one queue on one server, one per slot on a cluster (a call's keys
    /// must share a slot).
    queues: Mutex<Queues>,
    /// Where the concurrency leases of failed cluster refunds go to be
    /// released again ([`RedisStore::on_unreleased`]).
    unreleased: OnceLock<UnreleasedLeases>,
}

/// A lease a failed refund left taken: its key, its id, and when it ends
/// by itself.
pub(crate) type Unreleased = (StoreKey, u64, Micros);

/// The hook [`RedisStore::on_unreleased`] sets.
struct UnreleasedLeases(Box<dyn Fn(Vec<Unreleased>) + Send + Sync>);

impl std::fmt::Debug for UnreleasedLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UnreleasedLeases")
    }
}

/// The coalescing queues: one per slot on a cluster, else one.
#[derive(Debug, Default)]
struct Queues {
    one: Queue,
    slots: HashMap<Slot, Queue>,
}

impl Queues {
    fn get(&mut self, slot: Option<Slot>) -> &mut Queue {
        match slot {
            None => &mut self.one,
            Some(s) => self.slots.entry(s).or_default(),
        }
    }
}

/// The least time between two fresh connections made because calls failed
/// (a dead node fails every call until the cluster or Sentinel moves on).
const REFRESH_EVERY: Duration = Duration::from_millis(200);

/// How often the reset subscriber pings its connection, to notice a dead
/// peer that never closed it.
const PUBSUB_PING: Duration = Duration::from_secs(15);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave them inconsistent
    // (plain assignments), so a poisoned lock is still good.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RedisStore {
    /// Hand the concurrency leases that a failed cluster refund left taken
    /// to `retry` (the limiter's release queue, which releases them again
    /// until they go or their leases end: docs/scaling-out.md). Releasing a lease is
    /// idempotent, so unlike a counter's refund it may be repeated. Set
    /// once; later calls change nothing.
    pub(crate) fn on_unreleased(&self, retry: impl Fn(Vec<Unreleased>) + Send + Sync + 'static) {
        let _ = self.inner.unreleased.set(UnreleasedLeases(Box::new(retry)));
    }

    /// Leases a failed refund left taken (see [`RedisStore::on_unreleased`]).
    fn unreleased(&self, leases: Vec<Unreleased>) {
        if let (Some(hook), false) = (self.inner.unreleased.get(), leases.is_empty()) {
            (hook.0)(leases);
        }
    }

    /// A store on the Redis at `url` (`redis://[user:password@]host:port/db`),
    /// its keys under `prefix`, every call bounded by `timeout`; with
    /// `local_clock`, the `now` given to each call is the clock, else Redis
    /// `TIME` is.
    ///
    /// Connects lazily: a Redis that is down at start-up is not an error
    /// (docs/operations.md), calls fail until it is back. Only a malformed URL is.
    /// Must be called inside a Tokio runtime.
    pub fn new(
        url: &str,
        prefix: &str,
        timeout: Duration,
        local_clock: bool,
    ) -> Result<RedisStore, StoreError> {
        let backend = StoreBackend::Redis {
            url: url.to_owned(),
        };
        RedisStore::with_backend(&backend, None, prefix, timeout, local_clock)
    }

    /// A store on any Redis `backend` (one server, Sentinel, Cluster), with
    /// `store.tls`; otherwise as [`RedisStore::new`]. Connects in the
    /// background: nothing being reachable now is not an error.
    pub fn with_backend(
        backend: &StoreBackend,
        tls: Option<&StoreTls>,
        prefix: &str,
        timeout: Duration,
        local_clock: bool,
    ) -> Result<RedisStore, StoreError> {
        let invalid = |e| StoreError::InvalidUrl(Arc::new(e));
        let source = Source::new(backend, tls).map_err(invalid)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(StoreError::NoRuntime);
        }
        let lazy = source.lazy().map_err(invalid)?;
        let server = match &source {
            Source::Single(node) => Some(node.client.clone()),
            _ => None,
        };
        let connected = lazy.is_some();
        let store = RedisStore {
            inner: Arc::new(Inner {
                source,
                conn: Mutex::new(lazy.unwrap_or(Conn::Pending)),
                server: Mutex::new(server),
                refreshing: AtomicBool::new(false),
                refreshed: Mutex::new(None),
                swapped: tokio::sync::Notify::new(),
                prefix: prefix.to_owned(),
                timeout,
                local_clock,
                breaker: Mutex::new(Breaker::default()),
                functions: Functions::new(),
                queues: Mutex::new(Queues::default()),
                unreleased: OnceLock::new(),
            }),
        };
        if connected {
            store.load_library_soon();
        } else {
            store.refresh(true);
        }
        Ok(store)
    }

    /// Registers the library in the background (best effort: Redis may be
    /// down now; a call that finds the function missing loads it then). On
    /// a cluster it goes to every primary.
    fn load_library_soon(&self) {
        let conn = lock(&self.inner.conn).clone();
        let src = self.inner.functions.library.src.clone();
        tokio::spawn(async move {
            let loaded = tokio::time::timeout(CONNECT_TIMEOUT * 5, load_library(conn, &src)).await;
            match loaded {
                Ok(Ok(())) => tracing::debug!("redis: function library loaded"),
                Ok(Err(e)) => tracing::debug!(%e, "redis: function library not loaded yet"),
                Err(_) => tracing::debug!("redis: function library not loaded yet (timeout)"),
            }
        });
    }

    /// Make a fresh connection in the background and swap it in: the first
    /// one (`first`), or because the current one may be stale (at most one
    /// at a time, and one per [`REFRESH_EVERY`]). On a cluster the fresh
    /// connection reads the topology again (a failover moved slots); on
    /// Sentinel it asks the sentinels for the master again.
    fn refresh(&self, first: bool) {
        {
            let mut last = lock(&self.inner.refreshed);
            if !first && last.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
                return;
            }
            if self.inner.refreshing.swap(true, Ordering::AcqRel) {
                return;
            }
            *last = Some(Instant::now());
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.inner.refreshing.store(false, Ordering::Release);
            return;
        };
        let store = self.clone();
        rt.spawn(async move {
            let made =
                tokio::time::timeout(CONNECT_TIMEOUT * 2, store.inner.source.connect()).await;
            match made {
                Ok(Ok((conn, server))) => {
                    *lock(&store.inner.conn) = conn;
                    if server.is_some() {
                        *lock(&store.inner.server) = server;
                    }
                    store.inner.refreshing.store(false, Ordering::Release);
                    store.inner.swapped.notify_waiters();
                    lock(&store.inner.breaker).reconnected(Instant::now());
                    store.load_library_soon();
                }
                Ok(Err(e)) => {
                    store.inner.refreshing.store(false, Ordering::Release);
                    tracing::warn!(error = %e, "redis: no connection made");
                    store.retry_refresh_later();
                }
                Err(_) => {
                    store.inner.refreshing.store(false, Ordering::Release);
                    tracing::warn!("redis: no connection made in time");
                    store.retry_refresh_later();
                }
            }
        });
    }

    /// After a failed attempt at a fresh connection, while the breaker is
    /// open (calls fail fast, so none would ask), tries again every
    /// [`REFRESH_EVERY`]: a failover is followed as soon as the sentinels
    /// or the cluster name the new primary, not at the next probe, whose
    /// back-off may have grown to seconds. Holds the store weakly: a store
    /// dropped by a reload stops trying.
    fn retry_refresh_later(self) {
        if self.is_available() {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        drop(self);
        tokio::spawn(async move {
            tokio::time::sleep(REFRESH_EVERY).await;
            if let Some(inner) = weak.upgrade() {
                let store = RedisStore { inner };
                if !store.is_available() {
                    store.refresh(false);
                }
            }
        });
    }

    /// Whether calls go to Redis (the breaker is closed). While false, calls
    /// fail fast with [`StoreError::Unavailable`], but for an occasional
    /// probe.
    pub fn is_available(&self) -> bool {
        lock(&self.inner.breaker).is_closed()
    }

    /// Decide a request's `checks` at `now`, all or nothing: one
    /// [`Outcome`] per check, in order. At most one round trip: sent at
    /// once when no decision call is in flight, else with the requests that
    /// arrived meanwhile as the next call (`coalesce`); either way the
    /// wait is bounded by the store's `timeout`.
    ///
    /// On a cluster, the checks are grouped by slot, one call per slot, run
    /// concurrently (`cluster::decide`).
    pub async fn decide(&self, checks: &[Check], now: Micros) -> Result<Vec<Outcome>, StoreError> {
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        if self.is_cluster() {
            return cluster::decide(self, checks, now).await;
        }
        self.decide_on(None, checks, now).await.map(|(o, _)| o)
    }

    /// What [`RedisStore::decide`] would answer `checks` at `now`, all or
    /// nothing, without writing anything (`lua/probe.lua`, registered
    /// `no-writes`: Redis refuses any write it would make): no key made, no
    /// TTL moved, no strike counted, no lease taken. One call of its own,
    /// never coalesced with decisions; on a cluster, one per slot
    /// (`cluster::probe`).
    pub async fn probe(&self, checks: &[Check], now: Micros) -> Result<Vec<Outcome>, StoreError> {
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        if self.is_cluster() {
            return cluster::probe(self, checks, now).await;
        }
        self.probe_on(checks, now).await
    }

    /// One probe call for `checks` (on a cluster, all of one slot).
    async fn probe_on(&self, checks: &[Check], now: Micros) -> Result<Vec<Outcome>, StoreError> {
        let requests = [checks];
        let keys_ = DispatchKeys {
            prefix: &self.inner.prefix,
            requests: &requests,
            // A probe starts no lockout: the index is not read.
            index: false,
        };
        let args = wire::DispatchArgs {
            now: self.inner.local_clock.then_some(now),
            requests: &requests,
        };
        let reply = self.call(|f| &f.probe, keys_.len(), keys_, args).await?;
        Ok(wire::outcomes(&reply, checks.len())?.0)
    }

    /// Whether the store is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.inner.source.is_cluster()
    }

    /// Decide `checks` (on a cluster, all of `slot`) in one call, alone or
    /// with the requests that wait for the same queue: the outcomes and the
    /// call's `now`.
    async fn decide_on(
        &self,
        slot: Option<Slot>,
        checks: &[Check],
        now: Micros,
    ) -> Result<(Vec<Outcome>, Micros), StoreError> {
        if !self.is_available() {
            // The breaker fails this fast (or lets it probe): nothing to wait for.
            return self.dispatch(&[checks], now).await;
        }
        let arrival = lock(&self.inner.queues).get(slot).arrive(checks, now);
        match arrival {
            Arrival::SendNow => {
                let _flight = InFlight(self, slot);
                self.dispatch(&[checks], now).await
            }
            Arrival::Wait(rx, full) => {
                if let Some(batch) = full {
                    tokio::spawn(self.clone().send_batch(slot, batch));
                }
                match tokio::time::timeout(self.inner.timeout, rx).await {
                    Ok(Ok(answer)) => answer,
                    // No answer in time, or the batch was dropped unsent
                    // (the runtime is ending): no answer came.
                    Ok(Err(_)) | Err(_) => Err(StoreError::Timeout),
                }
            }
        }
    }

    /// Sends a batch of waiting requests as one call and hands out the
    /// answers; then the next batch, if any, goes.
    async fn send_batch(self, slot: Option<Slot>, batch: Vec<Waiting>) {
        let _flight = InFlight(&self, slot);
        // A request whose caller went away is not counted.
        let batch: Vec<Waiting> = batch.into_iter().filter(|w| !w.tx.is_closed()).collect();
        let Some(now) = batch.iter().map(|w| w.now).max() else {
            return;
        };
        let requests: Vec<&[Check]> = batch.iter().map(|w| &w.checks[..]).collect();
        let result = self.dispatch(&requests, now).await;
        coalesce::answer(batch, result);
    }

    /// One decision call for `requests` (decided in order at `now`): the
    /// outcomes of every request's checks, in order, and the call's `now`.
    async fn dispatch(
        &self,
        requests: &[&[Check]],
        now: Micros,
    ) -> Result<(Vec<Outcome>, Micros), StoreError> {
        let keys_ = DispatchKeys {
            prefix: &self.inner.prefix,
            requests,
            // On a cluster the index is on a slot of its own.
            index: !self.is_cluster(),
        };
        let args = wire::DispatchArgs {
            now: self.inner.local_clock.then_some(now),
            requests,
        };
        let reply = self.call(|f| &f.dispatch, keys_.len(), keys_, args).await?;
        let checks = requests.iter().map(|r| r.len()).sum();
        Ok(wire::outcomes(&reply, checks)?)
    }

    /// A decision call on `slot`'s queue ended: send its next batch, if any
    /// requests wait.
    fn call_ended(&self, slot: Option<Slot>) {
        let next = lock(&self.inner.queues).get(slot).call_ended();
        if let Some(batch) = next {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(self.clone().send_batch(slot, batch));
                }
                // No runtime left to send it: the waiting requests time out.
                Err(_) => drop(batch),
            }
        }
    }

    /// Give back the `concurrency` lease `lease` of `key` (the response
    /// ended or the client went). Returns whether it was still held.
    pub async fn release(
        &self,
        key: &StoreKey,
        lease: u64,
        now: Micros,
    ) -> Result<bool, StoreError> {
        let (state, _) = keys(&self.inner.prefix, key);
        let reply = self
            .call(
                |f| &f.release,
                1,
                state,
                &[lease.to_string(), self.clock(now)][..],
            )
            .await?;
        Ok(matches!(reply, Value::Int(1)))
    }

    /// Apply the settlement `s` at `now` (`lua/settle.lua`): one call to
    /// the key's slot, never coalesced, with the state key, the
    /// settlement's marker ([`settled_key`]) and, if it reads the key's
    /// own values, the quota key. Sent again after an unknown outcome, it
    /// finds its marker and changes nothing.
    pub async fn settle(&self, s: &Settlement, now: Micros) -> Result<SettleOutcome, StoreError> {
        let prefix = &self.inner.prefix;
        let mut names = vec![
            tagged(prefix, &s.key, "s"),
            settled_key(prefix, &s.key, s.id),
        ];
        if s.quota {
            names.push(tagged(prefix, &s.key, "q"));
        }
        let args = wire::SettleArgs {
            settlement: s,
            now: self.inner.local_clock.then_some(now),
        };
        let reply = self.call(|f| &f.settle, names.len(), names, args).await?;
        Ok(wire::settled(&reply)?)
    }

    /// Give back what `leases` did not spend (`lua/give_back.lua`): one
    /// call per slot on a cluster (at most 128 leases each), one per 128
    /// leases on one server. Returns how many went back; the first error
    /// stops nothing (each call is on its own), and is returned when no
    /// call went through.
    pub async fn give_back(&self, leases: &[Returned], now: Micros) -> Result<u64, StoreError> {
        let mut groups: Vec<(Option<Slot>, Vec<&Returned>)> = Vec::new();
        for r in leases {
            let slot = self.is_cluster().then(|| cluster::slot_of(&r.key));
            match groups.iter_mut().find(|(s, g)| *s == slot && g.len() < 128) {
                Some((_, g)) => g.push(r),
                None => groups.push((slot, vec![r])),
            }
        }
        let calls = groups.iter().map(|(_, group)| async move {
            let names: Vec<String> = group
                .iter()
                .map(|r| tagged(&self.inner.prefix, &r.key, "s"))
                .collect();
            let args = wire::GiveBackArgs {
                now: self.inner.local_clock.then_some(now),
                leases: group,
            };
            let reply = self
                .call(|f| &f.give_back, names.len(), names, args)
                .await?;
            match reply {
                Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
                other => Err(StoreError::from(wire::ReplyError(format!(
                    "give_back: expected a count, got {other:?}"
                )))),
            }
        });
        let mut given = 0;
        let mut error = None;
        for result in futures_util::future::join_all(calls).await {
            match result {
                Ok(n) => given += n,
                Err(e) => error = Some(e),
            }
        }
        match error {
            Some(e) if given == 0 => Err(e),
            _ => Ok(given),
        }
    }

    /// The stored state of `check`'s (limit, client), for the admin API:
    /// the algorithm's state (`None`: a fresh key) and the lockout state, as
    /// stored (bring them to a time with the algorithm's `check`). `now` is
    /// not needed by Redis, whose expiries drop what has lapsed; the memory
    /// store takes the same arguments.
    pub async fn inspect(
        &self,
        check: &Check,
        _now: Micros,
    ) -> Result<(Option<AlgoState>, LockState), StoreError> {
        let (s, l) = keys(&self.inner.prefix, &check.key);
        let reply = self
            .call(|f| &f.inspect, 2, &[s, l][..], check.params.name())
            .await?;
        Ok(wire::inspected(&reply, &check.params)?)
    }

    /// Forget everything about one (limit, client): its state, its lockout
    /// and its place in the lockout index. (Other instances' local caches are
    /// told by `RedisStore::publish_reset`.)
    pub async fn reset(&self, key: &StoreKey) -> Result<(), StoreError> {
        let prefix = &self.inner.prefix;
        let (s, l) = keys(prefix, key);
        let names = [s, l, label_key(prefix, key)];
        // The keys first, then the index entry: on a cluster the index is
        // on another slot, so these are two commands (an index entry left
        // behind by a failure between them is dropped by the next listing
        // that finds no lockout under it).
        self.bounded(|mut conn| async move {
            redis::cmd("DEL")
                .arg(&names)
                .query_async::<()>(&mut conn)
                .await
        })
        .await?;
        let (index, member) = (index_key(prefix), hex::encode(key));
        self.bounded(|mut conn| async move {
            redis::cmd("ZREM")
                .arg(index)
                .arg(member)
                .query_async::<()>(&mut conn)
                .await
        })
        .await
    }

    /// The values `key` has of its own (`<prefix>:{<32 hex>}:q`), if any; a
    /// stored text this version cannot read counts as none.
    pub async fn quota(&self, key: &StoreKey) -> Result<Option<Quota>, StoreError> {
        let name = tagged(&self.inner.prefix, key, "q");
        let text: Option<String> = self
            .bounded(
                |mut conn| async move { redis::cmd("GET").arg(&name).query_async(&mut conn).await },
            )
            .await?;
        Ok(text.as_deref().and_then(Quota::decode))
    }

    /// Give `key` values of its own, kept with no expiry beside its
    /// counters (one hash tag, so `dispatch.lua` reads them in the
    /// decision's call), or (`None`) take them away; whether it had some.
    pub async fn set_quota(
        &self,
        key: &StoreKey,
        quota: Option<Quota>,
    ) -> Result<bool, StoreError> {
        let name = tagged(&self.inner.prefix, key, "q");
        self.bounded(|mut conn| async move {
            match quota {
                Some(q) => {
                    let old: Option<String> = redis::cmd("SET")
                        .arg(&name)
                        .arg(q.encode())
                        .arg("GET")
                        .query_async(&mut conn)
                        .await?;
                    Ok(old.is_some())
                }
                None => {
                    let n: u64 = redis::cmd("DEL").arg(&name).query_async(&mut conn).await?;
                    Ok(n > 0)
                }
            }
        })
        .await
    }

    /// On a cluster, enter the lockouts that `outcomes` (of `checks`,
    /// decided by a call whose `now` was `at`) started in the index, in the
    /// background: the decision call could not (the index is on another
    /// slot).
    fn index_lockouts(&self, checks: &[Check], outcomes: &[Outcome], at: Micros) {
        let started: Vec<(String, Micros)> = checks
            .iter()
            .zip(outcomes)
            .filter(|(_, o)| o.lock_started)
            .map(|(c, o)| (hex::encode(c.key), at + o.retry_after))
            .collect();
        let Some(last) = started.iter().map(|(_, end)| *end).max() else {
            return;
        };
        let store = self.clone();
        let index = index_key(&self.inner.prefix);
        tokio::spawn(async move {
            let ttl_ms = (last.saturating_sub(at)).div_ceil(1000).max(1);
            let mut pipe = redis::pipe();
            for (member, end) in &started {
                pipe.zadd(&index, member, *end).ignore();
            }
            pipe.cmd("ZREMRANGEBYSCORE")
                .arg(&index)
                .arg("-inf")
                .arg(at)
                .ignore();
            // The index lasts as long as its last lockout: NX sets a TTL on
            // a new index, GT lengthens an old one's.
            pipe.cmd("PEXPIRE")
                .arg(&index)
                .arg(ttl_ms)
                .arg("NX")
                .ignore();
            pipe.cmd("PEXPIRE")
                .arg(&index)
                .arg(ttl_ms)
                .arg("GT")
                .ignore();
            let entered = store
                .bounded(|mut conn| async move { pipe.query_async::<()>(&mut conn).await })
                .await;
            if let Err(error) = entered {
                tracing::debug!(%error, "redis cluster: lockout not entered in the index");
            }
        });
    }

    /// Record who `key` is (`"<limit>\t<display>"`) for `ttl`: written when
    /// a lockout starts, read by [`RedisStore::labels`].
    pub(crate) async fn set_label(
        &self,
        key: &StoreKey,
        label: &str,
        ttl: Micros,
    ) -> Result<(), StoreError> {
        let name = label_key(&self.inner.prefix, key);
        let ms = ttl.div_ceil(1000).max(1);
        let label = label.to_owned();
        self.bounded(|mut conn| async move {
            redis::cmd("SET")
                .arg(name)
                .arg(label)
                .arg("PX")
                .arg(ms)
                .query_async::<()>(&mut conn)
                .await
        })
        .await
    }

    /// The labels of `keys` (see [`RedisStore::set_label`]), in order.
    pub(crate) async fn labels(
        &self,
        keys_: &[StoreKey],
    ) -> Result<Vec<Option<String>>, StoreError> {
        if keys_.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<String> = keys_
            .iter()
            .map(|k| label_key(&self.inner.prefix, k))
            .collect();
        self.bounded(|mut conn| async move {
            redis::cmd("MGET")
                .arg(names)
                .query_async::<Vec<Option<String>>>(&mut conn)
                .await
        })
        .await
    }

    /// Tell every instance (through `<prefix>:reset`) that `key` was reset.
    pub(crate) async fn publish_reset(&self, key: &StoreKey) -> Result<(), StoreError> {
        self.publish(hex::encode(key)).await
    }

    async fn publish(&self, message: String) -> Result<(), StoreError> {
        let channel = reset_channel(&self.inner.prefix);
        self.bounded(|mut conn| async move {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(message)
                .query_async::<()>(&mut conn)
                .await
        })
        .await
    }

    /// The resets published by any instance: `Some(key)` for one (limit,
    /// client), `None` for "clear everything". Runs on its own connection in
    /// a background task that reconnects and resubscribes by itself; after
    /// any gap it yields `None`, since resets may have been missed. The task
    /// ends when the receiver is dropped. Must be called inside a Tokio
    /// runtime.
    pub(crate) fn subscribe_resets(&self) -> mpsc::Receiver<Option<StoreKey>> {
        let (tx, rx) = mpsc::channel(64);
        let channel = reset_channel(&self.inner.prefix);
        tokio::spawn(subscriber(self.clone(), channel, tx));
        rx
    }

    /// The server the reset subscription listens on now: the one server,
    /// Sentinel's current master, or on a cluster the next seed node (a
    /// cluster's `PUBLISH` reaches every node). `None` while unknown.
    fn pubsub_client(&self) -> Option<Client> {
        self.inner
            .source
            .next_seed()
            .or_else(|| lock(&self.inner.server).clone())
    }

    /// The clients locked out now, with the time left, soonest first.
    /// Lapsed entries are dropped from the index on the way.
    pub async fn lockouts(&self, now: Micros) -> Result<Vec<(StoreKey, Micros)>, StoreError> {
        let index = index_key(&self.inner.prefix);
        let reply = self
            .call(|f| &f.lockouts, 1, index, self.clock(now))
            .await?;
        Ok(wire::lockouts(&reply)?)
    }

    /// The `now` argument of a script: the gateway's clock, or empty for
    /// Redis `TIME`.
    fn clock(&self, now: Micros) -> String {
        if self.inner.local_clock {
            now.to_string()
        } else {
            String::new()
        }
    }

    /// Call one of the library's functions by `FCALL` with `nkeys` keys
    /// (written by `keys_`) and `args`, through the breaker and within the
    /// deadline.
    async fn call(
        &self,
        function: fn(&Functions) -> &str,
        nkeys: usize,
        keys_: impl ToRedisArgs,
        args: impl ToRedisArgs,
    ) -> Result<Value, StoreError> {
        let functions = &self.inner.functions;
        let name = function(functions);
        self.bounded(|conn| fcall(conn, functions, name, nkeys, &keys_, &args))
            .await
    }

    /// Run `op` on the shared connection through the breaker, within the
    /// deadline, and feed its outcome back to the breaker. A connection that
    /// does not reconnect by itself (Sentinel's master, a cluster) is
    /// replaced when a call finds its server unavailable: a failover may
    /// have moved what it reached.
    async fn bounded<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        let mut permit = self.admit()?;
        let mut managed = false;
        let call = async {
            let conn = self.connection().await;
            managed = matches!(conn, Conn::Manager(_));
            op(conn).await
        };
        let result = match tokio::time::timeout(self.inner.timeout, call).await {
            Err(_) => Err(StoreError::Timeout),
            Ok(r) => r.map_err(classify),
        };
        if !managed && matches!(result, Err(StoreError::Unavailable(_))) {
            self.refresh(false);
        }
        permit.finish(&result);
        result
    }

    /// The current connection; while there is none yet (the first one, or
    /// a replacement after a failed attempt, is being made), waits for it.
    /// The caller bounds the wait.
    async fn connection(&self) -> Conn {
        let conn = lock(&self.inner.conn).clone();
        if !matches!(conn, Conn::Pending) {
            // The usual case: no waiter is registered on the hot path.
            return conn;
        }
        loop {
            let swapped = self.inner.swapped.notified();
            tokio::pin!(swapped);
            // Registered before the look, so a swap in between still wakes.
            swapped.as_mut().enable();
            let conn = lock(&self.inner.conn).clone();
            if !matches!(conn, Conn::Pending) {
                return conn;
            }
            // No attempt under way (the last one failed): start one.
            self.refresh(false);
            swapped.await;
        }
    }

    fn admit(&self) -> Result<Permit<'_>, StoreError> {
        match lock(&self.inner.breaker).admit(Instant::now()) {
            Some(admission) => Ok(Permit {
                store: self,
                admission,
                done: false,
            }),
            None => Err(StoreError::BreakerOpen),
        }
    }

    /// Record a failure; if it opened the breaker, start a fresh connection.
    fn failed(&self, admission: Admission, error: Option<&StoreError>) {
        let opened = lock(&self.inner.breaker).failure(Instant::now(), admission);
        if opened {
            match error {
                Some(e) => tracing::warn!(%e, "redis store failing: circuit breaker open"),
                None => tracing::warn!("redis store probe abandoned: circuit breaker open"),
            }
            // A stopped server or a silent peer may never close the old
            // connection; a fresh one connects on the next call (one server)
            // or is made now (Sentinel, Cluster).
            match self.inner.source.lazy() {
                Ok(Some(fresh)) => *lock(&self.inner.conn) = fresh,
                _ => self.refresh(true),
            }
        }
    }
}

/// A decision call in flight on a queue: when it ends (or is dropped, its
/// caller gone), that queue's next batch goes.
struct InFlight<'a>(&'a RedisStore, Option<Slot>);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.call_ended(self.1);
    }
}

/// A call let through by the breaker. Dropped unfinished (the caller gave
/// up), a probe counts as failed, so that another probe may go later.
struct Permit<'a> {
    store: &'a RedisStore,
    admission: Admission,
    done: bool,
}

impl Permit<'_> {
    fn finish<T>(&mut self, result: &Result<T, StoreError>) {
        self.done = true;
        match result {
            // Redis answered (an error reply too): it is reachable.
            Ok(_)
            | Err(
                StoreError::Redis(_)
                | StoreError::Reply(_)
                | StoreError::InvalidUrl(_)
                | StoreError::NoRuntime,
            ) => {
                let was_open = !self.store.is_available();
                lock(&self.store.inner.breaker).success();
                if was_open {
                    tracing::info!("redis store reachable again: circuit breaker closed");
                }
            }
            Err(
                e @ (StoreError::Timeout | StoreError::Unavailable(_) | StoreError::BreakerOpen),
            ) => {
                self.store.failed(self.admission, Some(e));
            }
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.done && self.admission == Admission::Probe {
            self.store.failed(self.admission, None);
        }
    }
}

/// `FCALL`; when the server says the function is missing (a restart
/// without persistence, a failover to a server that never had it,
/// `FUNCTION FLUSH`), `FUNCTION LOAD REPLACE` (once for all the calls that
/// found it so, [`Functions::reload`]) and the call again: it was not run,
/// so it cannot count twice. A refused connection is retried once: the
/// command was never sent, and the manager has started a new connection.
///
/// On a cluster, also sent again, until the deadline, after an answer that
/// says the call was not run: a redirection (`MOVED`: redis-rs reads the
/// slots again; `ASK`: sent to the named node after `ASKING`), `TRYAGAIN`,
/// `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY` (a failover). Never
/// after an error that leaves it unknown whether it ran (a connection lost
/// mid-call): that one fails, and `on_error` decides.
async fn fcall(
    mut conn: Conn,
    functions: &Functions,
    function: &str,
    nkeys: usize,
    keys_: &impl ToRedisArgs,
    args: &impl ToRedisArgs,
) -> Result<Value, RedisError> {
    let (mut loaded, mut retried) = (false, false);
    let mut ask: Option<(String, u16)> = None;
    loop {
        let seen = functions.loads.load(Ordering::Acquire);
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function).arg(nkeys).arg(keys_).arg(args);
        let result = match (ask.take(), &mut conn) {
            (Some((host, port)), Conn::Cluster(c)) => {
                let mut pipe = redis::pipe();
                pipe.cmd("ASKING").ignore().add_command(cmd);
                let route = redis::cluster_routing::SingleNodeRoutingInfo::ByAddress { host, port };
                c.route_pipeline(pipe, 1, 1, route).await.and_then(|mut v| {
                    v.pop().ok_or_else(|| {
                        RedisError::from((
                            redis::ErrorKind::UnexpectedReturnType,
                            "ASKING: no reply",
                        ))
                    })
                })
            }
            _ => cmd.query_async::<Value>(&mut conn).await,
        };
        match result {
            Err(e) if function_missing(&e) && !loaded => {
                functions.reload(&conn, seen).await?;
                loaded = true;
            }
            Err(e) if e.is_connection_refusal() && !retried => retried = true,
            Err(e) if matches!(conn, Conn::Cluster(_)) && cluster::not_run(&e) => {
                ask = cluster::ask_target(&e);
                if ask.is_none() {
                    tokio::time::sleep(cluster::RETRY_PAUSE).await;
                }
            }
            other => return other,
        }
    }
}

/// Whether Redis answered that the called function does not exist.
fn function_missing(e: &RedisError) -> bool {
    e.code() == Some("ERR") && e.detail() == Some("Function not found")
}

/// `FUNCTION LOAD REPLACE` the library (on a cluster, redis-rs sends it to
/// every primary).
async fn load_library(mut conn: Conn, src: &str) -> Result<(), RedisError> {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(src)
        .query_async::<Value>(&mut conn)
        .await
        .map(drop)
}

/// A Redis error as a store error: unreachable (counts against the
/// breaker) or an answer (a script or reply problem).
fn classify(e: RedisError) -> StoreError {
    // Error replies that mean "this server cannot serve now".
    const UNAVAILABLE: [&str; 7] = [
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "READONLY",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "OOM",
    ];
    let unreachable =
        e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout();
    if unreachable || e.code().is_some_and(|c| UNAVAILABLE.contains(&c)) {
        return StoreError::Unavailable(Arc::new(e));
    }
    StoreError::Redis(Arc::new(e))
}

/// The reset subscriber: subscribe, forward messages, and on any error
/// reconnect with a growing back-off, yielding `None` after a gap.
async fn subscriber(store: RedisStore, channel: String, tx: mpsc::Sender<Option<StoreKey>>) {
    let mut backoff = breaker::MIN_BACKOFF;
    let mut missed = false;
    loop {
        let client = store.pubsub_client();
        let connected = tokio::select! {
            _ = tx.closed() => return,
            c = async {
                match &client {
                    Some(client) => tokio::time::timeout(CONNECT_TIMEOUT * 5, subscribe(client, &channel)).await,
                    None => Ok(Err(RedisError::from((redis::ErrorKind::Io, "no server known yet")))),
                }
            } => c,
        };
        match connected {
            Ok(Ok((mut sink, mut stream))) => {
                backoff = breaker::MIN_BACKOFF;
                if missed && tx.send(None).await.is_err() {
                    return;
                }
                let mut ping = tokio::time::interval(PUBSUB_PING);
                ping.tick().await;
                loop {
                    tokio::select! {
                        _ = tx.closed() => return,
                        msg = stream.next() => {
                            let Some(msg) = msg else { break };
                            let payload = String::from_utf8_lossy(msg.get_payload_bytes());
                            // Anything but one key clears everything: safe.
                            let reset = crate::key::parse_hex(&payload);
                            if tx.send(reset).await.is_err() {
                                return;
                            }
                        }
                        _ = ping.tick() => {
                            let alive = tokio::time::timeout(CONNECT_TIMEOUT * 5, sink.ping::<Value>()).await;
                            if !matches!(alive, Ok(Ok(_))) {
                                break;
                            }
                        }
                    }
                }
                tracing::warn!(%channel, "redis reset subscription lost; resubscribing");
            }
            Ok(Err(e)) => tracing::debug!(%e, %channel, "redis reset subscription failed"),
            Err(_) => tracing::debug!(%channel, "redis reset subscription timed out"),
        }
        missed = true;
        tokio::select! {
            _ = tx.closed() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(breaker::MAX_BACKOFF);
    }
}

async fn subscribe(
    client: &Client,
    channel: &str,
) -> Result<(redis::aio::PubSubSink, redis::aio::PubSubStream), RedisError> {
    let (mut sink, stream) = client.get_async_pubsub().await?.split();
    sink.subscribe(channel).await?;
    Ok((sink, stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag_and_hold_only_hex() {
        let (s, l) = keys("tg", &[0xab; 16]);
        let hex = "ab".repeat(16);
        assert_eq!(s, format!("tg:{{{hex}}}:s"));
        assert_eq!(l, format!("tg:{{{hex}}}:l"));
        let key: StoreKey = std::array::from_fn(|i| i as u8 * 17);
        let hex = "00112233445566778899aabbccddeeff";
        assert_eq!(keys("t", &key).0, format!("t:{{{hex}}}:s"));
        assert_eq!(label_key("tollgate", &key), format!("tollgate:{{{hex}}}:n"));
        assert_eq!(index_key("tg"), "tg:lockouts");
        assert_eq!(reset_channel("tg"), "tg:reset");
    }

    #[test]
    fn the_library_registers_every_entry_under_a_versioned_name() {
        let library = lua::Library::gateway();
        assert!(library.name.starts_with("tollgate_") && library.name.len() == 21);
        assert!(library
            .src
            .starts_with(&format!("#!lua name={}\n", library.name)));
        for (entry, src) in lua::ENTRIES {
            assert!(src.contains(&format!("local function {entry}(KEYS, ARGV)")));
            let registered = if lua::READ_ONLY.contains(&entry) {
                format!(
                    "redis.register_function{{function_name = '{}', callback = entry('{entry}'), \
                     flags = {{'no-writes'}}}}",
                    library.function(entry)
                )
            } else {
                format!(
                    "redis.register_function('{}', entry('{entry}'))",
                    library.function(entry)
                )
            };
            assert!(library.src.contains(&registered), "{registered}");
        }
        // Other code, another name: two versions can share one Redis.
        let other = lua::Library::with_entries(&lua::ENTRIES[..1]);
        assert_ne!(other.name, library.name);
    }

    #[tokio::test]
    async fn a_malformed_url_is_the_only_start_up_error() {
        assert!(matches!(
            RedisStore::new("not a url", "tg", Duration::from_millis(50), false),
            Err(StoreError::InvalidUrl(_))
        ));
        // Nothing listens there: still fine at start-up.
        let store = RedisStore::new(
            "redis://127.0.0.1:1/0",
            "tg",
            Duration::from_millis(50),
            false,
        )
        .expect("lazy");
        assert!(store.is_available());
        assert!(store.decide(&[], 0).await.unwrap().is_empty());
    }
}
