//! A limit compiled from its config (whose parameters, overrides and lockout
//! were validated with it): its hashed key prefix, and the namespace its
//! state lives under.
//!
//! The namespace is what docs/operations.md hangs state survival on: it is derived from
//! the limit's name, its algorithm and its key sources, so a reload that
//! changes only a rate or a size keeps the state (the algorithms re-read it
//! under the new parameters), while one that changes the algorithm or the key
//! starts fresh.

use std::sync::Arc;

use tollgate_limit::{AlgoParams, LockParams, StoreKey};

use crate::config::{ClientMatch, KeySource, LimitConfig, Mode, OnMissingKey};
use crate::limit::key::{self, KeyOutcome, KeyPrefix, RequestView};

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

impl Policy {
    /// Compile `cfg` (its parameters were validated with the config).
    pub fn compile(cfg: &LimitConfig) -> Policy {
        let params = cfg.params.clone();
        let overrides = cfg
            .overrides
            .iter()
            .map(|o| (o.matcher.clone(), o.params.clone()))
            .collect();
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
        Policy {
            name: cfg.name.as_str().into(),
            key_prefix: KeyPrefix::new(&namespace),
            namespace,
            params,
            sources: cfg.key.clone(),
            on_missing: cfg.on_missing_key,
            cost: cfg.cost.max(1),
            shadow: cfg.mode == Mode::Shadow,
            lockout: cfg.lockout,
            exempt: cfg.exempt.clone(),
            overrides,
        }
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
