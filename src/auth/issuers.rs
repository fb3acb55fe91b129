//! The JWT issuers of `consumers.jwt` (docs/configuration/consumers.md),
//! compiled: each issuer's validation rules and keys (a JWKS fetched and
//! refreshed, or keys read with the config), and the verified-token cache
//! they share. A token's unverified `iss` picks the issuer; its signature
//! and claims are then checked with that issuer's keys and rules only.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::identity::Identity;
use super::jwt::Jwks;
use super::jwt::{self, Algorithm, JwtError, KeySet, TokenCache, Validation};
use super::Registry;
use crate::config::{IssuerConfig, IssuerKeys, JwtConfig};

/// How many verified tokens are kept (per gateway).
const CACHE_CAPACITY: usize = 10_000;

/// One issuer, compiled.
struct Issuer {
    config: IssuerConfig,
    validation: Validation,
    keys: Keys,
}

/// Where an issuer's keys are now.
enum Keys {
    /// Read with the config (a JWKS file, PEM files, a secret).
    Static(Arc<KeySet>),
    /// Fetched from a URL and refreshed.
    Fetched(Arc<Jwks>),
}

/// Why an issuer could not be compiled: the config field and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct IssuerError {
    /// The field (`consumers.jwt.issuers[0].keys[1].pem`).
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

/// Whether verifying a token may fetch its issuer's JWKS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch {
    /// When there is no key set yet, or the token names a key it lacks
    /// (at most once per 30 s): a request's verification.
    WhenNeeded,
    /// Never: the keys at hand, or none (a probe, `simulate`).
    Never,
}

/// Every issuer, and the token cache.
pub struct Issuers {
    issuers: Vec<Issuer>,
    cache: TokenCache,
    /// Started: JWKS are fetched (set by [`Issuers::start`]).
    online: AtomicBool,
}

/// What verifying a bearer token gave.
pub enum TokenOutcome {
    /// It verified: the consumer it names.
    Verified(Identity),
    /// It did not (the reason, for the log).
    Invalid(JwtError),
    /// Its issuer's keys have not been fetched yet.
    Unavailable,
}

impl Issuers {
    /// The issuers of `config`, reading key files now; a JWKS URL reuses
    /// the same issuer's fetched state of `previous` (its keys survive a
    /// reload).
    pub fn build(config: &JwtConfig, previous: Option<&Issuers>) -> Result<Issuers, IssuerError> {
        let mut issuers = Vec::with_capacity(config.issuers.len());
        for (i, c) in config.issuers.iter().enumerate() {
            let field = format!("consumers.jwt.issuers[{i}]");
            let keys = match &c.keys {
                IssuerKeys::JwksUrl { url, refresh } => {
                    let before = previous.and_then(|p| p.fetched(&url.to_string()));
                    let jwks =
                        Jwks::new(&url.to_string(), *refresh, before).map_err(|problem| {
                            IssuerError {
                                field: format!("{field}.jwks.url"),
                                problem,
                            }
                        })?;
                    Keys::Fetched(jwks)
                }
                IssuerKeys::JwksFile(path) => {
                    let set = read(&format!("{field}.jwks.file"), path, KeySet::from_jwks)?;
                    Keys::Static(Arc::new(set))
                }
                IssuerKeys::Pem(paths) => {
                    let mut sets = Vec::with_capacity(paths.len());
                    for (j, path) in paths.iter().enumerate() {
                        let f = format!("{field}.keys[{j}].pem");
                        sets.push(read(&f, path, KeySet::from_pem)?);
                    }
                    Keys::Static(Arc::new(KeySet::merge(sets)))
                }
                IssuerKeys::Secret(secret) => Keys::Static(Arc::new(KeySet::from_secret(secret))),
            };
            let algorithms = c
                .algorithms
                .iter()
                .map(|a| {
                    a.name().parse::<Algorithm>().map_err(|e| IssuerError {
                        field: format!("{field}.algorithms"),
                        problem: e.to_string(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if let Keys::Static(set) = &keys {
                for (j, alg) in algorithms.iter().enumerate() {
                    if !set.keys().iter().any(|k| k.accepts(*alg)) {
                        return Err(IssuerError {
                            field: format!("{field}.algorithms[{j}]"),
                            problem: format!("{alg} fits none of the issuer's keys"),
                        });
                    }
                }
            }
            issuers.push(Issuer {
                validation: Validation {
                    issuer: c.issuer.clone(),
                    audiences: c.audiences.clone(),
                    algorithms,
                    leeway: c.leeway,
                },
                config: c.clone(),
                keys,
            });
        }
        Ok(Issuers {
            issuers,
            cache: TokenCache::new(CACHE_CAPACITY),
            online: AtomicBool::new(false),
        })
    }

    /// Whether `token`'s unverified `iss` is one of the issuers' (a token
    /// too large or unreadable is not).
    pub fn knows(&self, token: &str) -> bool {
        token.len() <= jwt::MAX_TOKEN_LEN
            && jwt::peek_issuer(token)
                .is_ok_and(|iss| self.issuers.iter().any(|i| i.config.issuer == iss))
    }

    /// The fetched JWKS state of the issuer whose URL is `url`.
    fn fetched(&self, url: &str) -> Option<&Arc<Jwks>> {
        self.issuers.iter().find_map(|i| match &i.keys {
            Keys::Fetched(j) if j.url() == url => Some(j),
            _ => None,
        })
    }

    /// Start fetching and refreshing the JWKS of every issuer that has one
    /// (for a runtime put in force; `check` and `simulate` fetch nothing).
    pub fn start(&self) {
        self.online.store(true, Ordering::Relaxed);
        for issuer in &self.issuers {
            if let Keys::Fetched(jwks) = &issuer.keys {
                jwks.start();
            }
        }
    }

    /// Verify `token`, and name its consumer from the issuer's claims; a
    /// consumer of that name in `registry` lends its attributes (and its
    /// tenant and plan where the token has none).
    ///
    /// Before [`Issuers::start`] (a runtime not in force: `check`,
    /// `simulate`) no JWKS is fetched: a token of an issuer whose keys come
    /// from a URL is [`TokenOutcome::Unavailable`], and the future is ready
    /// at once. So it is with [`Fetch::Never`], with the keys already
    /// fetched: a token none of them verifies for want of its key (or of
    /// any) is [`TokenOutcome::Unavailable`].
    pub async fn verify(
        &self,
        token: &str,
        registry: &Registry,
        now: u64,
        fetch: Fetch,
    ) -> TokenOutcome {
        if token.len() > jwt::MAX_TOKEN_LEN {
            return TokenOutcome::Invalid(JwtError::TooLarge);
        }
        let issuer = match self.issuers.as_slice() {
            // One issuer: no need to read `iss` first (verifying checks it),
            // so a cached token costs no decoding at all.
            [only] => only,
            many => {
                let iss = match jwt::peek_issuer(token) {
                    Ok(iss) => iss,
                    Err(e) => return TokenOutcome::Invalid(e),
                };
                match many.iter().find(|i| i.config.issuer == iss) {
                    Some(issuer) => issuer,
                    None => return TokenOutcome::Invalid(JwtError::Issuer),
                }
            }
        };
        let verified = match &issuer.keys {
            Keys::Static(keys) => self.cache.verify(token, keys, &issuer.validation, now),
            Keys::Fetched(jwks) if self.online.load(Ordering::Relaxed) => match fetch {
                Fetch::WhenNeeded => {
                    jwks.verify(token, &issuer.validation, now, &self.cache)
                        .await
                }
                Fetch::Never => match jwks.keys() {
                    Some(keys) => match self.cache.verify(token, &keys, &issuer.validation, now) {
                        Err(JwtError::UnknownKid) => Err(JwtError::KeysUnavailable),
                        outcome => outcome,
                    },
                    None => Err(JwtError::KeysUnavailable),
                },
            },
            Keys::Fetched(_) => Err(JwtError::KeysUnavailable),
        };
        match verified {
            Ok(v) => identity(&issuer.config, v, registry).map_or(
                TokenOutcome::Invalid(JwtError::Malformed("no consumer claim")),
                TokenOutcome::Verified,
            ),
            Err(JwtError::KeysUnavailable) => TokenOutcome::Unavailable,
            Err(e) => TokenOutcome::Invalid(e),
        }
    }
}

/// The consumer a verified token names: its consumer claim (a string or a
/// number, printable ASCII without spaces, as a header value must be), the
/// tenant and plan claims, else the registry entry's.
fn identity(
    config: &IssuerConfig,
    verified: Arc<jwt::Verified>,
    registry: &Registry,
) -> Option<Identity> {
    let claims = &verified.claims;
    let text = |path: &str| -> Option<Arc<str>> {
        let value = jwt::claim(claims, path)?;
        let s = match value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => return None,
        };
        crate::config::is_printable_name(&s).then(|| Arc::from(s))
    };
    let consumer = text(&config.consumer)?;
    let entry = registry.by_name(&consumer).cloned();
    let from_entry = |f: fn(&crate::config::ConsumerConfig) -> Option<&String>| {
        entry.as_deref().and_then(f).map(|s| Arc::from(s.as_str()))
    };
    Some(Identity {
        tenant: config
            .tenant
            .as_deref()
            .and_then(text)
            .or_else(|| from_entry(|e| e.tenant.as_ref())),
        plan: config
            .plan
            .as_deref()
            .and_then(text)
            .or_else(|| from_entry(|e| e.plan.as_ref())),
        consumer,
        claims: Some(verified.clone()),
        entry,
    })
}

/// A key file at `path` (set by `field`), parsed by `parse`.
fn read(
    field: &str,
    path: &Path,
    parse: fn(&[u8]) -> Result<KeySet, String>,
) -> Result<KeySet, IssuerError> {
    let bytes = std::fs::read(path).map_err(|e| IssuerError {
        field: field.to_owned(),
        problem: format!("{}: cannot read it: {e}", path.display()),
    })?;
    parse(&bytes).map_err(|problem| IssuerError {
        field: field.to_owned(),
        problem: format!("{}: {problem}", path.display()),
    })
}
