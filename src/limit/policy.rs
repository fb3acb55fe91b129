//! A limit compiled from its config: validated algorithm parameters, its
//! overrides, its lockout, and the namespace its state lives under.
//!
//! The namespace is what SPEC §7 hangs state survival on: it is derived from
//! the limit's name, its algorithm and its key sources, so a reload that
//! changes only a rate or a size keeps the state (the algorithms re-read it
//! under the new parameters), while one that changes the algorithm or the key
//! starts fresh.

use std::sync::Arc;

use crate::config::{
    self, Algorithm, ClientMatch, KeySource, LimitConfig, LockoutConfig, Mode, OnMissingKey,
};
use crate::limit::algorithm::{
    self as algo, concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window,
    token_bucket, Micros,
};
use crate::limit::key::{self, KeyOutcome, KeyPrefix, RequestView};
use crate::limit::{AlgoParams, LockParams, StoreKey};

/// One compiled limit.
#[derive(Debug)]
pub struct Policy {
    /// The limit's name (headers, logs, metrics, admin API).
    pub name: Arc<str>,
    /// Bytes identifying the limit's state space (see the module doc).
    pub namespace: Vec<u8>,
    /// `namespace` already hashed, for this limit's store keys.
    pub key_prefix: KeyPrefix,
    /// The parameters for every client without an override.
    pub params: AlgoParams,
    /// The key sources (a composite key when more than one).
    pub sources: Vec<KeySource>,
    /// What to do when a header, query or cookie source is absent.
    pub on_missing: OnMissingKey,
    /// Units one request takes.
    pub cost: u64,
    /// `mode: shadow`.
    pub shadow: bool,
    /// The lockout policy.
    pub lockout: Option<LockParams>,
    /// Clients this limit never counts.
    pub exempt: Vec<ClientMatch>,
    /// Other parameters for some clients; the first match wins.
    pub overrides: Vec<(ClientMatch, AlgoParams)>,
}

fn micros(d: std::time::Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn rate(r: &config::Rate) -> Result<algo::Rate, algo::ParamError> {
    algo::Rate::new(r.count, micros(r.period))
}

fn window(w: &config::Window) -> fixed_window::Window {
    match w {
        config::Window::Fixed(d) => fixed_window::Window::Fixed(micros(*d)),
        config::Window::Month => fixed_window::Window::Month,
    }
}

/// Parameters of `algorithm`, with an override's fields replacing its own.
fn params(
    algorithm: &Algorithm,
    o: Option<&config::Override>,
) -> Result<AlgoParams, algo::ParamError> {
    let limit_of = |l: u64| o.and_then(|o| o.limit).unwrap_or(l);
    let burst_of = |b: u64| o.and_then(|o| o.burst).unwrap_or(b);
    let rate_of = |r: &config::Rate| rate(o.and_then(|o| o.rate.as_ref()).unwrap_or(r));
    Ok(match algorithm {
        Algorithm::FixedWindow { limit, window: w } => {
            let w = o.and_then(|o| o.window.as_ref()).unwrap_or(w);
            AlgoParams::FixedWindow(fixed_window::Params::new(limit_of(*limit), window(w))?)
        }
        Algorithm::SlidingWindow { limit, window: w } => {
            AlgoParams::SlidingWindow(sliding_window::Params::new(limit_of(*limit), micros(*w))?)
        }
        Algorithm::SlidingLog { limit, window: w } => {
            AlgoParams::SlidingLog(sliding_log::Params::new(limit_of(*limit), micros(*w))?)
        }
        Algorithm::TokenBucket {
            rate: r,
            burst,
            max_delay,
        } => AlgoParams::TokenBucket(token_bucket::Params::new(
            rate_of(r)?,
            burst_of(*burst),
            micros(*max_delay),
        )?),
        Algorithm::Gcra {
            rate: r,
            burst,
            max_delay,
        } => AlgoParams::Gcra(gcra::Params::new(
            rate_of(r)?,
            burst_of(*burst),
            micros(*max_delay),
        )?),
        Algorithm::LeakyBucket {
            rate: r,
            burst,
            max_delay,
        } => AlgoParams::LeakyBucket(leaky_bucket::Params::new(
            rate_of(r)?,
            burst_of(*burst),
            micros(*max_delay),
        )?),
        Algorithm::Concurrency { limit, lease } => {
            AlgoParams::Concurrency(concurrency::Params::new(limit_of(*limit), micros(*lease))?)
        }
    })
}

fn lockout(l: &LockoutConfig) -> LockParams {
    LockParams {
        after: u64::from(l.after.max(1)),
        within: micros(l.within),
        duration: micros(l.duration),
        escalate: u64::from(l.escalate.max(1)),
        max_duration: micros(l.max_duration),
        forget_after: micros(l.forget_after),
    }
}

/// Why a limit could not be compiled; names the limit and the parameter.
#[derive(Debug, thiserror::Error)]
#[error("limits.{limit}: {error}")]
pub struct PolicyError {
    limit: String,
    error: algo::ParamError,
}

impl Policy {
    /// Compile `cfg`.
    pub fn compile(cfg: &LimitConfig) -> Result<Policy, PolicyError> {
        let err = |error| PolicyError {
            limit: cfg.name.clone(),
            error,
        };
        let params = params(&cfg.algorithm, None).map_err(err)?;
        let overrides = cfg
            .overrides
            .iter()
            .map(|o| Ok((o.matcher.clone(), self::params(&cfg.algorithm, Some(o))?)))
            .collect::<Result<Vec<_>, algo::ParamError>>()
            .map_err(err)?;
        let mut namespace = Vec::with_capacity(64);
        for part in [
            "tollgate/1",
            cfg.name.as_str(),
            params.name(),
            &cfg.key
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ] {
            namespace.extend_from_slice(&(part.len() as u64).to_be_bytes());
            namespace.extend_from_slice(part.as_bytes());
        }
        Ok(Policy {
            name: cfg.name.as_str().into(),
            key_prefix: KeyPrefix::new(&namespace),
            namespace,
            params,
            sources: cfg.key.clone(),
            on_missing: cfg.on_missing_key,
            cost: cfg.cost.max(1),
            shadow: cfg.mode == Mode::Shadow,
            lockout: cfg.lockout.as_ref().map(lockout),
            exempt: cfg.exempt.clone(),
            overrides,
        })
    }

    /// Whether this is a `concurrency` limit.
    pub fn is_concurrency(&self) -> bool {
        matches!(self.params, AlgoParams::Concurrency(_))
    }

    /// This limit's store key for the request, without its display form
    /// (the request path; [`Policy::display_key`] gives that when needed).
    pub fn store_key(&self, view: &RequestView<'_>) -> KeyOutcome<StoreKey> {
        self.key_prefix
            .store_key(&self.sources, self.on_missing, view)
    }

    /// This limit's key for the request: store key and display form.
    pub fn client_key(&self, view: &RequestView<'_>) -> KeyOutcome {
        self.key_prefix
            .client_key(&self.sources, self.on_missing, view)
    }

    /// The display form of this limit's key for the request (`None` when the
    /// request has no key under it).
    pub fn display_key(&self, view: &RequestView<'_>) -> Option<String> {
        key::display_key(&self.sources, self.on_missing, view)
    }
}
