//! The [`Limiter`]: what a caller asks about a request, once it has
//! worked out which limits apply and under which keys (one [`Check`] per
//! limit). It answers from the local deny cache when it can, otherwise
//! makes the one store call, applies `on_error` when the store cannot
//! answer, reads the outcomes into a [`Decision`] and remembers rejections
//! in the deny cache. Time comes from an injected [`Clock`]; metrics leave
//! through an [`Observer`].

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod leased;
pub use leased::LeaseEvent;

use crate::clock::{Clock, SystemClock};
use crate::deny_cache::DenyCache;
use crate::leases::LeaseTable;
use crate::quota::Quota;
use crate::release::{Pending, Releases};
use crate::settle::{SettleOutcome, Settlement};
use crate::store::memory::MemoryStore;
use crate::store::redis::{RedisStore, StoreError};
use crate::store::{OnError, StoreBackend, StoreConfig, TimeSource};
use crate::verdict::{verdict, Verdict};
use crate::{AlgoParams, AlgoState, Check, LockState, Micros, Outcome, Status, StoreKey};

/// What the limiter tells its caller about its work, for metrics. Every
/// method does nothing unless implemented; `()` observes nothing.
pub trait Observer: Sync {
    /// One store call ended: `store` is `"memory"` or `"redis"`, `ok`
    /// whether it answered, `elapsed` how long it took.
    fn store_call(&self, store: &'static str, ok: bool, elapsed: Duration) {
        let _ = (store, ok, elapsed);
    }
}

impl Observer for () {}

/// A request's checks as the limiter decides them: one per limit that
/// applies, in the caller's order (the [`Decision`]'s figures follow it).
pub struct Request<'a> {
    /// The checks.
    pub checks: Vec<Check>,
    /// Told of the store call.
    pub observer: &'a dyn Observer,
    /// The readable form of check `i`'s client key (say `10.0.0.1` or
    /// `user-42`), asked only when a rejection starts a lockout, so that
    /// [`Limiter::lockouts`] can name who is locked out (store keys are
    /// hashes). `None`: unnamed.
    pub describe: &'a (dyn Fn(usize) -> Option<String> + Sync),
}

impl<'a> Request<'a> {
    /// `checks`, observed by no one, clients unnamed.
    pub fn new(checks: Vec<Check>) -> Request<'a> {
        Request {
            checks,
            observer: &(),
            describe: &|_| None,
        }
    }
}

impl From<Vec<Check>> for Request<'_> {
    fn from(checks: Vec<Check>) -> Self {
        Request::new(checks)
    }
}

/// How many (limit, client) rejections the deny cache remembers at most.
const DENY_CACHE_CAPACITY: usize = 100_000;

/// How many leases of leased limits this instance holds at most (about
/// 200 bytes each); a full table hands back the lease ending soonest.
const LEASE_CAPACITY: usize = 100_000;

/// How often leases whose time is up are swept and given back.
const LEASE_SWEEP: Duration = Duration::from_millis(100);

/// The most entries (state and settlement markers) a memory store may hold
/// for its once-a-second sweep to run in place on the runtime rather than on
/// the blocking pool: a few tens of microseconds at most, and a process whose
/// store stays this small starts no blocking thread for it.
const SWEEP_IN_PLACE: usize = 1024;

/// How many failed concurrency releases wait for a retry at most
/// ([`Releases`]; 32 bytes each).
const RELEASE_RETRY_CAPACITY: usize = 100_000;

/// One limit's figures for the rate-limit headers.
#[derive(Debug, Clone)]
pub struct Figure {
    /// The limit's name.
    pub name: Arc<str>,
    /// What it said.
    pub outcome: Outcome,
    /// A `concurrency` limit (its policy item says so).
    pub concurrency: bool,
    /// The client's store key under this limit (who the figures are of:
    /// the gateway's top offenders read it, no key computed again).
    pub key: StoreKey,
    /// This instance's memory store decided it (the memory backend, or
    /// `on_error: local` while Redis could not answer): a [`Settlement`]
    /// of its units goes there too.
    ///
    /// [`Settlement`]: crate::Settlement
    pub local: bool,
}

impl Figure {
    /// The settlement of `check` (the check this figure answered) by
    /// `delta` units, with the id `id`, applied until `settle_within` after
    /// the decision: [`Settlement::new`] with this figure's outcome and
    /// store. `None` when the check took nothing, or its algorithm takes no
    /// settlements.
    pub fn settlement(
        &self,
        check: &Check,
        delta: i64,
        id: u64,
        settle_within: Micros,
    ) -> Option<Settlement> {
        Settlement::new(check, (&self.outcome, self.local), delta, id, settle_within)
    }
}

/// What the limiter says of a request.
#[derive(Debug)]
pub enum Decision {
    /// Forward it, after `delay`. `figures` feed the rate-limit headers
    /// (empty when no limit applied or the store could not decide);
    /// `leases` must live until the response ends.
    Allow {
        /// Hold the request this long first.
        delay: Micros,
        /// Header figures, one per limit that applied.
        figures: Vec<Figure>,
        /// Concurrency leases, released when dropped.
        leases: Option<Leases>,
        /// Some limit in shadow mode would have rejected it.
        shadow_rejected: bool,
    },
    /// Reject it.
    Reject {
        /// `locked_out` rather than `rate_limited`.
        locked_out: bool,
        /// The limit that rejected it.
        limit: Arc<str>,
        /// The wait to advertise.
        retry_after: Micros,
        /// Header figures.
        figures: Vec<Figure>,
    },
    /// The store could not decide and `on_error: deny` refuses the request.
    Unavailable,
    /// No limit applied (the request had no checks).
    NotApplied,
}

impl Decision {
    /// `on_error: allow` with a store that could not decide: forward at
    /// once, with no figures and no leases.
    fn unchecked() -> Decision {
        Decision::Allow {
            delay: 0,
            figures: Vec::new(),
            leases: None,
            shadow_rejected: false,
        }
    }
}

/// What the deny cache keeps beside one (limit, client) it rejects: the
/// figures of the decision that put it there, and the parameters it was
/// decided under (an override may give the same key other ones).
#[derive(Debug, Clone)]
pub struct Cached {
    /// The limit's figures then.
    figure: Figure,
    /// The parameters it was decided under.
    params: AlgoParams,
    /// The request's cost: a rejection says nothing of a request of
    /// another cost (a cost limit charges each its own estimate).
    cost: u64,
}

/// The rejection the deny cache gives when every check of `plan` is cached
/// (`hits`, in check order: until, locked out, what was kept): each limit's
/// figures as the deciding call reported them (its `r` included), their
/// waits (and [`Outcome::at`]) moved on to `now`, `t` the time until the
/// request could pass (draft 11's, and draft 10's capped at `w`: what the
/// store would say); named, as the store's verdict would, by the longest
/// wait.
fn cached_rejection(hits: &[(Micros, bool, Cached)], now: Micros) -> Decision {
    let figures: Vec<Figure> = hits
        .iter()
        .map(|(until, locked_out, cached)| {
            let mut f = cached.figure.clone();
            let o = &mut f.outcome;
            let left = until.saturating_sub(now);
            o.status = if *locked_out {
                Status::LockedOut
            } else {
                Status::Rejected
            };
            o.lock_started = false;
            o.delay = 0;
            o.retry_after = left;
            o.reset = left.min(o.window);
            o.grows_after = left;
            o.at = now;
            f
        })
        .collect();
    let (index, locked_out, retry_after) = match verdict(figures.iter().map(|f| &f.outcome)) {
        Verdict::Reject {
            index,
            locked_out,
            retry_after,
        } => (index, locked_out, retry_after),
        // Not reached: every outcome above is a rejection.
        Verdict::Allow { .. } => (0, hits[0].1, figures[0].outcome.retry_after),
    };
    Decision::Reject {
        locked_out,
        limit: figures[index].name.clone(),
        retry_after,
        figures,
    }
}

enum Backend {
    Memory,
    Redis(Arc<RedisStore>),
}

/// The limiter of one store configuration; kept across reloads while the
/// `store:` section is unchanged, so limit state survives them.
pub struct Limiter {
    config: StoreConfig,
    clock: Arc<dyn Clock>,
    backend: Backend,
    /// The memory backend, or `on_error: local`'s fallback.
    local: Arc<MemoryStore>,
    /// On Redis: concurrency releases, retried when they fail.
    releases: Option<Arc<Releases<RedisStore>>>,
    deny: DenyCache<Cached>,
    /// Who the keys this instance locked out are, so `GET /lockouts` can
    /// name them (store keys are hashes).
    labels: std::sync::Mutex<HashMap<StoreKey, Label>>,
    /// The leases of leased limits this instance holds (Redis only).
    leased: Arc<LeaseTable>,
    /// Told of lease events ([`Limiter::on_lease`]).
    lease_events: OnceLock<LeaseCallback>,
}

/// The callback of [`Limiter::on_lease`].
type LeaseCallback = Box<dyn Fn(&Arc<str>, LeaseEvent) + Send + Sync>;

/// A locked-out key's limit and display key, until its lock ends.
struct Label {
    limit: Arc<str>,
    display: String,
    until: Micros,
}

/// How many lockout labels are kept at most.
const LABELS_CAPACITY: usize = 100_000;

/// Concurrency leases held by an admitted request; released on drop.
pub struct Leases {
    limiter: Arc<Limiter>,
    checks: Vec<Check>,
    local: bool,
    /// When they were taken (the decision's `now`): each ends by itself
    /// its `lease` later.
    taken: Micros,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("checks", &self.checks)
            .field("local", &self.local)
            .field("taken", &self.taken)
            .finish_non_exhaustive()
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        let checks = std::mem::take(&mut self.checks);
        match (&self.limiter.releases, self.local) {
            // Off this task, and retried while the store cannot answer
            // (docs/scaling-out.md: a Redis stall never keeps slots taken).
            (Some(releases), false) => {
                let pending = checks
                    .iter()
                    .map(|c| Pending {
                        key: c.key,
                        lease: c.lease,
                        until: self.taken.saturating_add(lease_of(&c.params)),
                    })
                    .collect();
                releases.release(pending);
            }
            _ => {
                let now = self.limiter.clock.now();
                for c in &checks {
                    self.limiter.local.release(c, now);
                }
            }
        }
    }
}

/// How long a `concurrency` check's lease lives (0 for another algorithm,
/// which holds none).
fn lease_of(params: &AlgoParams) -> Micros {
    match params {
        AlgoParams::Concurrency(p) => p.lease(),
        _ => 0,
    }
}

impl Limiter {
    /// The limiter for `config`, on the wall clock; reuses `previous` when
    /// its store config is the same. Never waits on Redis: an unreachable
    /// Redis is the `on_error` policy's business, not a start-up failure.
    pub fn build(
        config: &StoreConfig,
        previous: Option<&Arc<Limiter>>,
    ) -> Result<Arc<Limiter>, StoreError> {
        if let Some(p) = previous.filter(|p| p.config == *config) {
            return Ok(p.clone());
        }
        Self::with_clock(config, previous, Arc::new(SystemClock))
    }

    /// A new limiter for `config`, on the wall clock.
    pub fn new(config: &StoreConfig) -> Result<Arc<Limiter>, StoreError> {
        Self::with_clock(config, None, Arc::new(SystemClock))
    }

    /// A new limiter for `config` that reads the time from `clock` (tests
    /// drive it); keeps `previous`'s memory store.
    pub fn with_clock(
        config: &StoreConfig,
        previous: Option<&Arc<Limiter>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Limiter>, StoreError> {
        let backend = match &config.backend {
            StoreBackend::Memory => Backend::Memory,
            backend => Backend::Redis(Arc::new(RedisStore::with_backend(
                backend,
                config.tls.as_ref(),
                &config.prefix,
                config.timeout,
                config.clock == TimeSource::Local,
            )?)),
        };
        // The memory store outlives a change of the rest of `store:` (a new
        // timeout must not wipe every counter).
        let local = previous.map_or_else(|| Arc::new(MemoryStore::new()), |p| p.local.clone());
        let releases = match &backend {
            Backend::Redis(redis) => {
                let releases = Arc::new(Releases::new(
                    redis.clone(),
                    clock.clone(),
                    RELEASE_RETRY_CAPACITY,
                ));
                // A cluster refund that failed leaves its leases here
                // (weakly: the store must not keep its own queue alive).
                let queue = Arc::downgrade(&releases);
                redis.on_unreleased(move |leases| {
                    if let Some(queue) = queue.upgrade() {
                        queue.release(
                            leases
                                .into_iter()
                                .map(|(key, lease, until)| Pending { key, lease, until })
                                .collect(),
                        );
                    }
                });
                Some(releases)
            }
            Backend::Memory => None,
        };
        let limiter = Arc::new(Limiter {
            config: config.clone(),
            clock,
            backend,
            local,
            releases,
            deny: DenyCache::new(DENY_CACHE_CAPACITY),
            labels: std::sync::Mutex::new(HashMap::new()),
            leased: Arc::new(LeaseTable::new(LEASE_CAPACITY)),
            lease_events: OnceLock::new(),
        });
        limiter.start_background();
        Ok(limiter)
    }

    /// The sweeper of the memory store and, on Redis, the subscription to
    /// resets from other instances. Needs a Tokio runtime (absent in `check`).
    fn start_background(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(self);
        handle.spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(limiter) = weak.upgrade() else {
                    return;
                };
                let local = limiter.local.clone();
                let now = limiter.clock.now();
                drop(limiter);
                // A small store is swept in place (microseconds); a large
                // one on the blocking pool, so the worker never stalls on
                // it. No thread is started for a store that stays small.
                if local.len() + local.settled_len() <= SWEEP_IN_PLACE {
                    local.sweep(now);
                } else {
                    let _ = tokio::task::spawn_blocking(move || local.sweep(now)).await;
                }
            }
        });
        if let Backend::Redis(_) = &self.backend {
            // Leases whose time is up go back to the store.
            let weak = Arc::downgrade(self);
            handle.spawn(async move {
                let mut tick = tokio::time::interval(LEASE_SWEEP);
                loop {
                    tick.tick().await;
                    let Some(limiter) = weak.upgrade() else {
                        return;
                    };
                    if !limiter.leased.is_empty() {
                        limiter.sweep_leases().await;
                    }
                }
            });
        }
        if let Backend::Redis(redis) = &self.backend {
            let mut resets = redis.subscribe_resets();
            let weak = Arc::downgrade(self);
            handle.spawn(async move {
                while let Some(reset) = resets.recv().await {
                    let Some(limiter) = weak.upgrade() else {
                        return;
                    };
                    match reset {
                        Some(key) => limiter.deny.remove(&key),
                        None => limiter.deny.clear(),
                    }
                }
            });
        }
    }

    /// Decide a request (a [`Request`], or just its checks): every check
    /// all or nothing, in one store call at most. No checks is
    /// [`Decision::NotApplied`].
    pub async fn decide<'a>(self: &Arc<Self>, request: impl Into<Request<'a>>) -> Decision {
        let Request {
            mut checks,
            observer,
            describe,
        } = request.into();
        if checks.is_empty() {
            return Decision::NotApplied;
        }
        let now = self.clock.now();
        if let Some(rejection) = self.cached_at(&checks, now) {
            return rejection;
        }
        if checks.iter().any(|c| c.leasing.is_some()) {
            match &self.backend {
                // One instance: a leased limit is exact.
                Backend::Memory => checks.iter_mut().for_each(|c| c.leasing = None),
                Backend::Redis(redis) => {
                    return self
                        .decide_leased(redis, checks, observer, describe, now)
                        .await
                }
            }
        }

        let started = Instant::now();
        let (outcomes, local) = match &self.backend {
            Backend::Memory => {
                let outcomes = self.local.decide(&checks, now);
                observer.store_call("memory", true, started.elapsed());
                (outcomes, true)
            }
            Backend::Redis(redis) => match redis.decide(&checks, now).await {
                Ok(outcomes) => {
                    observer.store_call("redis", true, started.elapsed());
                    (outcomes, false)
                }
                Err(error) => {
                    observer.store_call("redis", false, started.elapsed());
                    tracing::warn!(%error, policy = ?self.config.on_error, "limit store unavailable");
                    self.release_unanswered(&checks, now, &error);
                    match self.config.on_error {
                        OnError::Local => (self.local.decide(&checks, now), true),
                        OnError::Allow => return Decision::unchecked(),
                        OnError::Deny => return Decision::Unavailable,
                    }
                }
            },
        };
        self.conclude(checks, describe, outcomes, now, local)
    }

    /// The rejection the local deny cache alone gives `checks` now, if it
    /// knows every one of them rejects this client (no store call); `None`
    /// when the store must decide. What [`Limiter::decide`] does first; a
    /// caller may ask before doing costly work for a client the cache
    /// already turns away (the gateway, before verifying the credentials of
    /// a client `failure_limit` locked out).
    pub fn cached(&self, checks: &[Check]) -> Option<Decision> {
        if checks.is_empty() {
            return None;
        }
        self.cached_at(checks, self.clock.now())
    }

    /// The local deny cache: no store call when every limit of the request
    /// is known to reject this client under these very parameters (and
    /// cost). The store would answer the same: a locked limit strikes
    /// nothing, the others have no lockout, and the verdict picks the
    /// longest wait either way. One limit not cached (it might reject with
    /// a longer wait, or strike) and the store decides.
    fn cached_at(&self, checks: &[Check], now: Micros) -> Option<Decision> {
        if self.deny.is_empty() {
            return None;
        }
        let mut hits = Vec::with_capacity(checks.len());
        for check in checks {
            if self.lease_could_pay(check, now) {
                return None;
            }
            match self.deny.get_with(&check.key, now) {
                Some((until, locked, cached))
                    if cached.params == check.params && cached.cost == check.cost =>
                {
                    hits.push((until, locked, cached));
                }
                _ => return None,
            }
        }
        Some(cached_rejection(&hits, now))
    }

    /// A decision call that failed once it may have been sent (it timed
    /// out, or its connection broke) may still be applied when Redis
    /// catches up, taking its `concurrency` leases with no response left to
    /// end them (docs/scaling-out.md: a stall must not keep slots taken). So those
    /// leases are given back through the release queue, which retries until
    /// a release goes through or the lease ends; a release of a lease that
    /// was never taken changes nothing. It is sent after the store's
    /// `timeout`, behind the call it undoes (a connection that was not
    /// replaced keeps the order; one that was let its last commands in
    /// first).
    fn release_unanswered(&self, checks: &[Check], now: Micros, error: &StoreError) {
        let Some(releases) = &self.releases else {
            return;
        };
        if matches!(error, StoreError::BreakerOpen) {
            // Never sent.
            return;
        }
        let pending: Vec<Pending> = checks
            .iter()
            .filter(|c| matches!(c.params, AlgoParams::Concurrency(_)))
            .map(|c| Pending {
                key: c.key,
                lease: c.lease,
                until: now.saturating_add(lease_of(&c.params)),
            })
            .collect();
        if pending.is_empty() {
            return;
        }
        let (releases, wait) = (releases.clone(), self.config.timeout);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            releases.release(pending);
        });
    }

    /// Turn the store's outcomes into a decision, and feed the deny cache.
    /// `view` is the request the checks were keyed from (a lockout that
    /// starts needs its display key).
    fn conclude(
        self: &Arc<Self>,
        checks: Vec<Check>,
        describe: &(dyn Fn(usize) -> Option<String> + Sync),
        outcomes: Vec<Outcome>,
        now: Micros,
        local: bool,
    ) -> Decision {
        for (i, (outcome, check)) in outcomes.iter().zip(&checks).enumerate() {
            if !matches!(outcome.status, Status::Rejected | Status::LockedOut) {
                continue;
            }
            // A concurrency slot can free up any moment (a response ends),
            // so its rejection is never cached; nor is a rejection that a
            // lockout policy may turn into a strike, nor one under a key's
            // own values: another instance may raise them, and only the
            // store can tell (a lockout stands whatever the limit).
            let cacheable = outcome.status == Status::LockedOut
                || (check.lockout.is_none() && !check.is_concurrency() && !check.quota);
            if cacheable && outcome.retry_after > 0 {
                let cached = Cached {
                    figure: Figure {
                        name: check.name.clone(),
                        outcome: *outcome,
                        concurrency: check.is_concurrency(),
                        key: check.key,
                        local,
                    },
                    params: check.params.clone(),
                    cost: check.cost,
                };
                self.deny.insert_with(
                    check.key,
                    now.saturating_add(outcome.retry_after),
                    outcome.status == Status::LockedOut,
                    cached,
                );
            }
            if outcome.lock_started {
                let display = describe(i).unwrap_or_default();
                self.label(check.key, &check.name, &display, now, outcome.retry_after);
            }
        }
        let verdict = verdict(&outcomes);
        let allowed = matches!(verdict, Verdict::Allow { .. });
        // The figures take the checks' names (no count to bump); an
        // admitted request's concurrency checks become its leases.
        let mut lease_checks = Vec::new();
        let mut figures = Vec::with_capacity(checks.len());
        for (outcome, check) in outcomes.iter().zip(checks) {
            let concurrency = check.is_concurrency();
            let key = check.key;
            let name = if allowed && check.lease != 0 {
                let name = check.name.clone();
                lease_checks.push(check);
                name
            } else {
                check.name
            };
            figures.push(Figure {
                name,
                outcome: *outcome,
                concurrency,
                key,
                local,
            });
        }
        match verdict {
            Verdict::Reject {
                index,
                locked_out,
                retry_after,
            } => Decision::Reject {
                locked_out,
                limit: figures[index].name.clone(),
                retry_after,
                figures,
            },
            Verdict::Allow {
                delay,
                shadow_rejected,
            } => {
                let leases = (!lease_checks.is_empty()).then(|| Leases {
                    limiter: self.clone(),
                    checks: lease_checks,
                    local,
                    taken: now,
                });
                Decision::Allow {
                    delay,
                    figures,
                    leases,
                    shadow_rejected,
                }
            }
        }
    }

    /// Remember who `key` is while its lockout runs: here, and on Redis for
    /// the other instances (off the request path).
    fn label(&self, key: StoreKey, limit: &Arc<str>, display: &str, now: Micros, length: Micros) {
        if let Backend::Redis(redis) = &self.backend {
            let redis = redis.clone();
            let text = format!("{limit}\t{display}");
            tokio::spawn(async move {
                if let Err(error) = redis.set_label(&key, &text, length).await {
                    tracing::debug!(%error, "lockout label not stored");
                }
            });
        }
        let Ok(mut labels) = self.labels.lock() else {
            return;
        };
        if labels.len() >= LABELS_CAPACITY {
            labels.retain(|_, l| l.until > now);
            if labels.len() >= LABELS_CAPACITY {
                return;
            }
        }
        let label = Label {
            limit: limit.clone(),
            display: display.to_owned(),
            until: now.saturating_add(length),
        };
        labels.insert(key, label);
    }

    /// Apply a cost limit's settlement ([`crate::settle`]): one store
    /// call to its key's slot (the memory store's when it decided the
    /// request, [`Settlement::local`]), applied once per
    /// [`Settlement::id`] and only until `at + settle_within`. A `delta` of
    /// 0 changes nothing and calls nothing. A refund drops the key's
    /// cached rejection on every instance (on Redis, told through the
    /// reset channel). A store error is returned, not `on_error`'s
    /// business: the units were taken there, so nowhere else can settle
    /// them; [`Limiter::settle_retrying`] sends it again.
    pub async fn settle(&self, s: Settlement) -> Result<SettleOutcome, StoreError> {
        if !s.params.settles() {
            return Ok(SettleOutcome::Unsupported);
        }
        if s.delta == 0 {
            return Ok(SettleOutcome::Applied { units: 0 });
        }
        let now = self.clock.now();
        let (outcome, redis) = match &self.backend {
            Backend::Redis(redis) if !s.local => (redis.settle(&s, now).await?, Some(redis)),
            _ => (self.local.settle(&s, now), None),
        };
        if outcome.units() < 0 {
            // Units came back (now, or in a call whose answer was lost): a
            // rejection cached for this key may no longer hold, here or on
            // the other instances (told as of a reset, whose subscribers
            // drop their entry).
            self.deny.remove(&s.key);
            if let Some(redis) = redis {
                if let Err(error) = redis.publish_reset(&s.key).await {
                    tracing::debug!(%error, "refund not told to the other instances");
                }
            }
        }
        Ok(outcome)
    }

    /// [`Limiter::settle`], sent again while the store cannot answer (a
    /// timeout, the breaker open, Redis unreachable), after 100 ms and
    /// then twice as long each time up to 1 s, until the settlement's
    /// deadline by this limiter's clock; then the last error. An error
    /// reply is not retried. Safe after an unknown outcome: a settlement
    /// that did go through answers [`SettleOutcome::Replayed`]. Await it in
    /// a task of its own: it may take up to `settle_within`.
    pub async fn settle_retrying(&self, s: Settlement) -> Result<SettleOutcome, StoreError> {
        let left = s.deadline().saturating_sub(self.clock.now());
        crate::retry::retrying(Duration::from_micros(left), || self.settle(s.clone())).await
    }

    /// The limiter's clock now (µs since the epoch): the instant a plan's
    /// calendar bounds are computed at.
    pub fn now(&self) -> Micros {
        self.clock.now()
    }

    /// Forget every cached rejection (a reload may have changed the limits
    /// they came from).
    pub fn clear_deny_cache(&self) {
        self.deny.clear();
    }

    /// Reset one key on every instance: the store, this deny cache, and
    /// (through Redis pub/sub) the other instances' deny caches.
    pub async fn reset(&self, key: &StoreKey) -> Result<(), StoreError> {
        self.deny.remove(key);
        if let Ok(mut labels) = self.labels.lock() {
            labels.remove(key);
        }
        self.local.reset(key);
        if let Backend::Redis(redis) = &self.backend {
            redis.reset(key).await?;
            redis.publish_reset(key).await?;
        }
        Ok(())
    }

    /// The values `key` has of its own ([`Quota`]), if any.
    pub async fn quota(&self, key: &StoreKey) -> Result<Option<Quota>, StoreError> {
        match &self.backend {
            Backend::Memory => Ok(self.local.quota(key)),
            Backend::Redis(redis) => redis.quota(key).await,
        }
    }

    /// Give `key` values of its own, or (`None`) take them away, on every
    /// instance at once: they live in the store, and checks that read them
    /// are never answered from a deny cache. Whether it had some before.
    pub async fn set_quota(
        &self,
        key: &StoreKey,
        quota: Option<Quota>,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Memory => Ok(self.local.set_quota(key, quota)),
            Backend::Redis(redis) => redis.set_quota(key, quota).await,
        }
    }

    /// The live state of one (limit, client), for the admin API.
    pub async fn inspect(
        &self,
        check: &Check,
    ) -> Result<(Option<AlgoState>, LockState), StoreError> {
        let now = self.clock.now();
        match &self.backend {
            Backend::Memory => Ok(self.local.inspect(&check.key, now)),
            Backend::Redis(redis) => redis.inspect(check, now).await,
        }
    }

    /// What [`Limiter::decide`] would answer `checks` now, as the store
    /// answers it (one outcome per check, in order; a rejection that would
    /// start a lockout says `lock_started`), changing nothing anywhere: no
    /// key or entry made, no expiry moved, no strike counted, no lease
    /// taken, no deny-cache entry, no lockout label, no store call
    /// observed. The deny cache is not read (it answers only what the store
    /// would). When the store cannot answer, its error: no `on_error`
    /// policy applies to a question.
    pub async fn probe(&self, checks: &[Check]) -> Result<Vec<Outcome>, StoreError> {
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.clock.now();
        // A leased limit is probed as an exact one: what the store would
        // answer (this instance's lease is its own business).
        let exact: Vec<Check>;
        let checks = if checks.iter().any(|c| c.leasing.is_some()) {
            exact = checks
                .iter()
                .map(|c| Check {
                    leasing: None,
                    ..c.clone()
                })
                .collect();
            &exact[..]
        } else {
            checks
        };
        match &self.backend {
            Backend::Memory => Ok(self.local.probe(checks, now)),
            Backend::Redis(redis) => redis.probe(checks, now).await,
        }
    }

    /// Every client locked out now: its (limit, display key) when an
    /// instance recorded it, its store key, and the lock's remaining time.
    pub async fn lockouts(&self) -> Result<Vec<LockedClient>, StoreError> {
        let now = self.clock.now();
        let list = match &self.backend {
            Backend::Memory => self.local.lockouts(now),
            Backend::Redis(redis) => redis.lockouts(now).await?,
        };
        let mut named: Vec<LockedClient> = {
            let labels = self
                .labels
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            list.into_iter()
                .map(|(key, remaining)| LockedClient {
                    label: labels
                        .get(&key)
                        .map(|l| (l.limit.clone(), l.display.clone())),
                    key,
                    remaining,
                })
                .collect()
        };
        if let Backend::Redis(redis) = &self.backend {
            let unknown: Vec<StoreKey> = named
                .iter()
                .filter(|c| c.label.is_none())
                .map(|c| c.key)
                .collect();
            if !unknown.is_empty() {
                let mut found = redis.labels(&unknown).await?.into_iter();
                for client in named.iter_mut().filter(|c| c.label.is_none()) {
                    let text = found.next().flatten();
                    client.label = text
                        .as_deref()
                        .and_then(|t| t.split_once('\t'))
                        .map(|(limit, display)| (Arc::from(limit), display.to_owned()));
                }
            }
        }
        Ok(named)
    }
}

/// One client locked out now (`GET /lockouts`).
#[derive(Debug, Clone)]
pub struct LockedClient {
    /// Its limit and display key, if known.
    pub label: Option<(Arc<str>, String)>,
    /// Its store key.
    pub key: StoreKey,
    /// The lock's remaining time.
    pub remaining: Micros,
}

#[cfg(test)]
mod tests {
    //! The limiter on the memory store with a driven clock: lockouts, the
    //! deny cache and its expiry, leases, without sleeping.

    use super::*;
    use crate::algorithm::{
        concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
        Rate, DAY, SECOND,
    };
    use crate::clock::ManualClock;
    use crate::key::KeyHasher;
    use crate::LockParams;

    const T0: Micros = 1_700_000_000 * SECOND;
    const MINUTE: Micros = 60 * SECOND;
    const HOUR: Micros = 3600 * SECOND;

    /// One limit of the fixture: its name, parameters, lockout and cost.
    struct Limit {
        name: Arc<str>,
        params: AlgoParams,
        lockout: Option<LockParams>,
        cost: u64,
    }

    fn limit(name: &str, params: AlgoParams) -> Limit {
        Limit {
            name: name.into(),
            params,
            lockout: None,
            cost: 1,
        }
    }

    /// A lockout as the gateway's defaults make it: after one strike,
    /// counted over `within`.
    fn lockout(after: u64, within: Micros, duration: Micros) -> LockParams {
        LockParams {
            after,
            within,
            duration,
            escalate: 1,
            max_duration: duration.max(DAY),
            forget_after: DAY,
        }
    }

    fn fixed(limit: u64, window: Micros) -> AlgoParams {
        AlgoParams::FixedWindow(
            fixed_window::Params::new(limit, fixed_window::Window::Fixed(window)).unwrap(),
        )
    }

    fn bucket(count: u64, period: Micros, burst: u64) -> AlgoParams {
        AlgoParams::TokenBucket(
            token_bucket::Params::new(Rate::new(count, period).unwrap(), burst, 0).unwrap(),
        )
    }

    struct Fixture {
        limiter: Arc<Limiter>,
        clock: Arc<ManualClock>,
        limits: Vec<Limit>,
    }

    fn fixture(limits: Vec<Limit>) -> Fixture {
        let clock = Arc::new(ManualClock::new(T0));
        let limiter = Limiter::with_clock(&StoreConfig::memory(), None, clock.clone()).unwrap();
        Fixture {
            limiter,
            clock,
            limits,
        }
    }

    impl Fixture {
        /// The checks of `client`; `params` replaces the first limit's
        /// parameters (an override).
        fn checks(&self, client: &str, params: Option<&AlgoParams>) -> Vec<Check> {
            self.limits
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let key = KeyHasher::new(l.name.as_bytes())
                        .value(client.as_bytes())
                        .finish();
                    let params = params.filter(|_| i == 0).unwrap_or(&l.params);
                    let mut check = Check::new(l.name.clone(), key, params.clone()).cost(l.cost);
                    check.lockout = l.lockout;
                    check
                })
                .collect()
        }

        async fn decide(&self, client: &str) -> Decision {
            self.limiter
                .decide(Request::new(self.checks(client, None)))
                .await
        }

        /// The decision's kind, limit and `Retry-After` in whole seconds.
        async fn outcome(&self, client: &str) -> (&'static str, Option<String>, u64) {
            match self.decide(client).await {
                Decision::Allow { .. } => ("allowed", None, 0),
                Decision::Reject {
                    locked_out,
                    limit,
                    retry_after,
                    ..
                } => (
                    if locked_out {
                        "locked_out"
                    } else {
                        "rate_limited"
                    },
                    Some(limit.to_string()),
                    retry_after.div_ceil(SECOND),
                ),
                Decision::Unavailable => ("unavailable", None, 0),
                Decision::NotApplied => ("not_applied", None, 0),
            }
        }
    }

    #[tokio::test]
    async fn a_lockout_is_answered_locally_until_it_ends() {
        let mut l = limit("l", fixed(2, MINUTE));
        l.lockout = Some(lockout(1, MINUTE, 30 * SECOND));
        let f = fixture(vec![l]);
        assert_eq!(f.outcome("10.0.0.1").await.0, "allowed");
        assert_eq!(f.outcome("10.0.0.1").await.0, "allowed");
        assert_eq!(
            f.outcome("10.0.0.1").await,
            ("locked_out", Some("l".into()), 30),
            "the rejection that starts a lockout answers its full length"
        );
        assert_eq!(f.limiter.deny.len(), 1, "the lockout is cached");
        f.clock.advance(10 * SECOND);
        assert_eq!(
            f.outcome("10.0.0.1").await,
            ("locked_out", Some("l".into()), 20)
        );
        // Another client is not affected.
        assert_eq!(f.outcome("10.0.0.2").await.0, "allowed");
        // The lock ends 30 s after it started, inside the same window: the
        // window's count (2) still rejects, and that strike locks again.
        f.clock.advance(20 * SECOND);
        assert_eq!(f.outcome("10.0.0.1").await.0, "locked_out");
        // A new window, after the second lock.
        f.clock.set(T0 + 60 * SECOND + 31 * SECOND);
        assert_eq!(f.outcome("10.0.0.1").await.0, "allowed");
    }

    #[tokio::test]
    async fn a_lockout_names_its_client_for_lockouts() {
        let mut l = limit("l", fixed(1, MINUTE));
        l.lockout = Some(lockout(1, MINUTE, 30 * SECOND));
        let f = fixture(vec![l]);
        let describe = |i: usize| Some(format!("client of check {i}"));
        for _ in 0..2 {
            let request = Request {
                checks: f.checks("10.0.0.1", None),
                observer: &(),
                describe: &describe,
            };
            f.limiter.decide(request).await;
        }
        let locked = f.limiter.lockouts().await.unwrap();
        assert_eq!(locked.len(), 1);
        assert_eq!(
            locked[0].label,
            Some((Arc::from("l"), "client of check 0".to_owned()))
        );
        assert_eq!(locked[0].remaining, 30 * SECOND);
    }

    #[tokio::test]
    async fn a_plain_rejection_is_cached_with_its_figures_until_the_retry_time() {
        let f = fixture(vec![limit("b", bucket(1, 10 * SECOND, 2))]);
        assert_eq!(f.outcome("10.0.0.1").await.0, "allowed");
        assert_eq!(f.outcome("10.0.0.1").await.0, "allowed");
        let Decision::Reject {
            figures,
            retry_after,
            ..
        } = f.decide("10.0.0.1").await
        else {
            panic!("the third request is rejected");
        };
        assert_eq!(retry_after, 10 * SECOND);
        assert_eq!(figures[0].outcome.limit, 2);
        assert_eq!(f.limiter.deny.len(), 1);
        // Answered from the cache 4 s later: the same figures, moved on.
        f.clock.advance(4 * SECOND);
        let Decision::Reject {
            figures,
            retry_after,
            locked_out,
            ..
        } = f.decide("10.0.0.1").await
        else {
            panic!("still rejected");
        };
        assert!(!locked_out);
        assert_eq!(retry_after, 6 * SECOND);
        assert_eq!(
            (figures[0].outcome.limit, figures[0].outcome.remaining),
            (2, 0)
        );
        assert_eq!(figures[0].outcome.reset, 6 * SECOND);
        assert_eq!(figures[0].outcome.grows_after, 6 * SECOND);
        // At the retry time the store decides again, and a token is back.
        f.clock.advance(6 * SECOND);
        assert_eq!(f.outcome("10.0.0.1").await.0, "allowed");
    }

    /// Every algorithm the deny cache serves: a rejection it answers
    /// carries exactly the figures the store would give at that instant,
    /// draft 11's `t` and draft 10's included.
    #[tokio::test]
    async fn a_cached_rejection_has_the_figures_the_store_would_give() {
        let rate = Rate::new(1, 10 * SECOND).unwrap();
        for params in [
            fixed(2, MINUTE),
            AlgoParams::SlidingWindow(sliding_window::Params::new(2, MINUTE).unwrap()),
            AlgoParams::SlidingLog(sliding_log::Params::new(2, MINUTE).unwrap()),
            bucket(1, 10 * SECOND, 2),
            AlgoParams::Gcra(gcra::Params::new(rate, 2, 0).unwrap()),
            AlgoParams::LeakyBucket(leaky_bucket::Params::new(rate, 2, 0).unwrap()),
        ] {
            let name = params.name();
            let f = fixture(vec![limit("l", params)]);
            f.clock.set(T0 + 7 * SECOND);
            for _ in 0..2 {
                assert_eq!(f.outcome("10.0.0.1").await.0, "allowed", "{name}");
            }
            // First the store's rejection, then the cache's, 1.7 s apart.
            for step in 0..4 {
                f.clock.advance(if step == 0 { SECOND } else { 1_700_000 });
                let now = f.clock.now();
                let store = f.limiter.local.decide(&f.checks("10.0.0.1", None), now);
                let Decision::Reject { figures, .. } = f.decide("10.0.0.1").await else {
                    panic!("{name} step {step}: rejected")
                };
                let o = &figures[0].outcome;
                assert_eq!(*o, store[0], "{name} step {step}");
                assert!(
                    o.grows_after == o.retry_after && o.grows_after > 0,
                    "{name}: {o:?}"
                );
                assert_eq!(f.limiter.deny.len(), 1, "{name}: cached");
            }
        }
    }

    #[tokio::test]
    async fn a_cached_rejection_keeps_the_deciding_figures_remaining_included() {
        let mut b = limit("b", bucket(1, 10 * SECOND, 5));
        b.cost = 3;
        let f = fixture(vec![b]);
        assert_eq!(f.outcome("10.0.0.1").await.0, "allowed");
        let remaining = |d: Decision| match d {
            Decision::Reject { figures, .. } => figures[0].outcome.remaining,
            _ => panic!("rejected"),
        };
        assert_eq!(
            remaining(f.decide("10.0.0.1").await),
            2,
            "decided by the store"
        );
        assert_eq!(f.limiter.deny.len(), 1);
        f.clock.advance(SECOND);
        assert_eq!(
            remaining(f.decide("10.0.0.1").await),
            2,
            "answered from the deny cache: still the store's r, not 0"
        );
    }

    /// The deny cache answers only what the store would: not under other
    /// parameters (an override), not when a limit it does not hold could
    /// reject with a longer wait or take a strike.
    #[tokio::test]
    async fn the_deny_cache_answers_only_what_the_store_would() {
        let f = fixture(vec![limit("p", bucket(1, 500 * DAY, 1))]);
        let gold = bucket(1, 500 * DAY, 5);
        let decide = |params: Option<&AlgoParams>| {
            f.limiter.decide(Request::new(f.checks("10.0.0.1", params)))
        };
        assert!(matches!(decide(None).await, Decision::Allow { .. }));
        assert!(matches!(decide(None).await, Decision::Reject { .. }));
        assert!(
            matches!(decide(Some(&gold)).await, Decision::Allow { .. }),
            "the override's burst, not the cached rejection"
        );

        // Two limits reject; the longest wait names the rejection, from the
        // store and from the cache alike.
        let f = fixture(vec![
            limit("p", bucket(1, 500 * DAY, 1)),
            limit("h", bucket(1, 1000 * DAY, 1)),
        ]);
        assert_eq!(f.outcome("10.0.0.1").await.0, "allowed");
        let stored = f.outcome("10.0.0.1").await;
        assert_eq!(stored.1.as_deref(), Some("h"));
        assert_eq!(f.limiter.deny.len(), 2);
        f.clock.advance(SECOND);
        let cached = f.outcome("10.0.0.1").await;
        assert_eq!((cached.1, cached.2), (Some("h".into()), stored.2 - 1));

        // `a` locked out (cached), `b` not cached and able to take a strike:
        // the store decides, and `b`'s second strike locks it.
        let mut a = limit(
            "a",
            AlgoParams::SlidingLog(sliding_log::Params::new(1, DAY).unwrap()),
        );
        a.lockout = Some(lockout(1, DAY, HOUR));
        let mut b = limit(
            "b",
            AlgoParams::Gcra(gcra::Params::new(Rate::new(1, 100 * DAY).unwrap(), 1, 0).unwrap()),
        );
        b.lockout = Some(lockout(2, 100 * DAY, 5 * HOUR));
        let f = fixture(vec![a, b]);
        assert_eq!(f.outcome("10.0.0.1").await.0, "allowed");
        // Both reject: `a` locks (1 h), `b` takes its first strike and
        // names the rejection with its longer wait (100 days).
        let second = f.outcome("10.0.0.1").await;
        assert_eq!((second.0, second.1.as_deref()), ("rate_limited", Some("b")));
        let third = f.outcome("10.0.0.1").await;
        assert_eq!(
            (third.0, third.1.as_deref(), third.2),
            ("locked_out", Some("b"), 5 * 3600),
            "b's second strike reached the store"
        );
    }

    /// A probe answers what the next decision gets, and leaves no trace:
    /// no deny-cache entry, no lockout label, no strike, no lease.
    #[tokio::test]
    async fn a_probe_answers_the_next_decision_and_leaves_no_trace() {
        let mut l = limit("l", fixed(3, MINUTE));
        l.lockout = Some(lockout(2, MINUTE, 30 * SECOND));
        let c = limit(
            "c",
            AlgoParams::Concurrency(concurrency::Params::new(1, 5 * MINUTE).unwrap()),
        );
        let f = fixture(vec![l, c]);
        let describe = |_: usize| Some("client".to_owned());
        let mut held = Vec::new();
        // Allowed (its lease dropped), allowed (its lease kept: the slot is
        // taken), rejected by `c` (no strike: `c` has no lockout; nothing
        // taken from `l`), the slot freed: allowed, then rejected by `l` (a
        // strike), then `l`'s second strike locks, then locked out.
        let steps = [
            "allowed",
            "allowed",
            "rejected",
            "allowed",
            "rejected",
            "locked_out",
            "locked_out",
        ];
        for (step, want) in steps.into_iter().enumerate() {
            if step == 3 {
                held.clear();
            }
            let checks = f.checks("10.0.0.1", None);
            let traces = || (f.limiter.deny.len(), f.limiter.labels.lock().unwrap().len());
            let before = traces();
            let probed = f.limiter.probe(&checks).await.unwrap();
            for _ in 0..3 {
                assert_eq!(f.limiter.probe(&checks).await.unwrap(), probed);
            }
            assert_eq!(traces(), before, "step {step}");
            let request = Request {
                checks,
                observer: &(),
                describe: &describe,
            };
            let decision = f.limiter.decide(request).await;
            let kind = decision.kind().label();
            assert_eq!(kind, want, "step {step}");
            let (Decision::Allow { figures, .. } | Decision::Reject { figures, .. }) = &decision
            else {
                panic!("decided");
            };
            let decided: Vec<Outcome> = figures.iter().map(|f| f.outcome).collect();
            assert_eq!(probed, decided, "step {step}");
            if let Decision::Allow { leases, .. } = decision {
                held.extend(leases.filter(|_| step == 1));
            }
        }
        assert_eq!(
            (f.limiter.deny.len(), f.limiter.labels.lock().unwrap().len()),
            (1, 1),
            "the lockout is cached and named by decide"
        );
    }

    #[tokio::test]
    async fn concurrency_leases_free_their_slot_when_dropped() {
        let f = fixture(vec![limit(
            "c",
            AlgoParams::Concurrency(concurrency::Params::new(2, 5 * MINUTE).unwrap()),
        )]);
        let first = f.decide("10.0.0.1").await;
        let second = f.decide("10.0.0.1").await;
        assert!(matches!(
            first,
            Decision::Allow {
                leases: Some(_),
                ..
            }
        ));
        assert!(matches!(
            second,
            Decision::Allow {
                leases: Some(_),
                ..
            }
        ));
        assert_eq!(f.outcome("10.0.0.1").await.0, "rate_limited");
        assert_eq!(
            f.limiter.deny.len(),
            0,
            "a concurrency rejection is never cached"
        );
        drop(first);
        assert_eq!(f.outcome("10.0.0.1").await.0, "allowed");
        drop(second);
    }

    #[tokio::test]
    async fn no_checks_is_not_applied_and_the_observer_sees_each_store_call() {
        #[derive(Default)]
        struct Calls(std::sync::Mutex<Vec<(&'static str, bool)>>);
        impl Observer for Calls {
            fn store_call(&self, store: &'static str, ok: bool, _: Duration) {
                self.0.lock().unwrap().push((store, ok));
            }
        }
        let f = fixture(vec![limit("b", bucket(1, 10 * SECOND, 1))]);
        assert!(matches!(
            f.limiter.decide(Request::new(Vec::new())).await,
            Decision::NotApplied
        ));
        let calls = Calls::default();
        for _ in 0..3 {
            let request = Request {
                checks: f.checks("10.0.0.1", None),
                observer: &calls,
                describe: &|_| None,
            };
            f.limiter.decide(request).await;
        }
        // The third is answered by the deny cache: no store call.
        assert_eq!(
            *calls.0.lock().unwrap(),
            [("memory", true), ("memory", true)]
        );
    }
}
