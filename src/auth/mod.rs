//! Consumers (docs/configuration/consumers.md): identity a client cannot
//! forge. API keys looked up by digest ([`consumers`]), JWTs verified
//! against their issuer's keys ([`issuers`] over [`jwt`]), client
//! certificates verified by TLS ([`mtls`]); the consumer they name
//! ([`Identity`]) is what identity key sources, identity headers and the
//! access log read.
//!
//! [`Authenticator`] is compiled with each runtime. It finds what a request
//! presents ([`credentials`]) and verifies it ([`Authenticator::verify`]);
//! the pipeline's authentication stage decides what the route answers, and
//! charges `failure_limit` for what failed. `tollgate simulate` calls the
//! same code.

pub mod consumers;
pub mod credentials;
pub mod identity;
pub mod issuers;
pub mod jwt;
pub mod mtls;

use std::sync::Arc;

use http::HeaderMap;

use crate::config::{CertName, ConsumersConfig, CredentialKind, RouteAuth};
pub use consumers::Registry;
pub use credentials::{Kinds, Presented};
pub use identity::Identity;
use issuers::{IssuerError, Issuers, TokenOutcome};
use mtls::{CertField, PeerCert};

/// The consumers section of one runtime, compiled.
pub struct Authenticator {
    /// The validated section.
    pub config: Arc<ConsumersConfig>,
    /// The consumers of `list` and the consumers file.
    pub registry: Registry,
    /// The JWT issuers, when `jwt` is configured.
    issuers: Option<Issuers>,
    /// Every configured credential kind: what a route without `auth` looks
    /// for.
    pub configured: Kinds,
}

/// How a request's authentication ended, for `tollgate_auth_total` and the
/// dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthOutcome {
    /// A consumer was verified (and allowed).
    Ok,
    /// The route requires a credential and none was presented.
    Missing,
    /// A presented credential did not verify.
    Invalid,
    /// Verified, but not a consumer the route lets through.
    Forbidden,
    /// Turned away before any verification: `failure_limit` locked the
    /// client out.
    LockedOut,
    /// A token's issuer keys were not available.
    Unavailable,
}

impl AuthOutcome {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            AuthOutcome::Ok => "ok",
            AuthOutcome::Missing => "missing",
            AuthOutcome::Invalid => "invalid",
            AuthOutcome::Forbidden => "forbidden",
            AuthOutcome::LockedOut => "locked_out",
            AuthOutcome::Unavailable => "unavailable",
        }
    }
}

/// What verifying a request's credentials gave.
#[derive(Debug)]
pub enum Verdict {
    /// Nothing presented (of the kinds looked for).
    Missing,
    /// Verified: the consumer (every credential presented names it).
    Verified(Identity),
    /// A credential did not verify, or two name different consumers.
    /// `bearer`: a JWT was among the failures.
    Invalid {
        /// A bearer token failed.
        bearer: bool,
        /// Why (for the log; never the credential).
        reason: Arc<str>,
    },
    /// A token's issuer keys are not available yet (JWKS not fetched).
    Unavailable(Arc<str>),
}

impl Authenticator {
    /// Compile `config`, reading key files now; JWKS state is taken over
    /// from `previous` where an issuer's URL is unchanged.
    pub fn build(
        config: &ConsumersConfig,
        previous: Option<&Authenticator>,
    ) -> Result<Authenticator, IssuerError> {
        let issuers = match &config.jwt {
            Some(jwt) => Some(Issuers::build(
                jwt,
                previous.and_then(|p| p.issuers.as_ref()),
            )?),
            None => None,
        };
        let kinds: Vec<CredentialKind> = [
            (config.api_keys.is_some(), CredentialKind::ApiKey),
            (config.jwt.is_some(), CredentialKind::Jwt),
            (config.mtls.is_some(), CredentialKind::Mtls),
        ]
        .into_iter()
        .filter_map(|(on, k)| on.then_some(k))
        .collect();
        Ok(Authenticator {
            registry: Registry::new(config),
            config: Arc::new(config.clone()),
            issuers,
            configured: Kinds::of(&kinds),
        })
    }

    /// Start fetching JWKS (a runtime put in force only).
    pub fn start(&self) {
        if let Some(issuers) = &self.issuers {
            issuers.start();
        }
    }

    /// The kinds a request to a route with `auth` (or without) is looked at
    /// for.
    pub fn kinds(&self, auth: Option<&RouteAuth>) -> Kinds {
        auth.map_or(self.configured, |a| Kinds::of(&a.require))
    }

    /// The credentials of `kinds` a request presents.
    pub fn presented<'a>(
        &self,
        kinds: Kinds,
        headers: &'a HeaderMap,
        query: Option<&'a str>,
        cert: Option<&'a PeerCert>,
    ) -> Presented<'a> {
        let c = &self.config;
        Presented {
            api_key: c
                .api_keys
                .as_ref()
                .filter(|_| kinds.has(CredentialKind::ApiKey))
                .and_then(|k| credentials::api_key(k, headers, query)),
            bearer: c
                .jwt
                .as_ref()
                .filter(|_| kinds.has(CredentialKind::Jwt))
                .and_then(|j| credentials::bearer(j, headers)),
            certificate: c
                .mtls
                .as_ref()
                .filter(|_| kinds.has(CredentialKind::Mtls))
                .and_then(|m| {
                    let cert = cert?;
                    Some(
                        cert.name(cert_field(m.consumer))
                            .ok_or("the client certificate lacks the configured name"),
                    )
                }),
        }
    }

    /// Verify what a request presents at `now_unix` (seconds; tokens'
    /// `exp` and `nbf` are read against it): each credential on its own,
    /// then they must all name one consumer.
    pub async fn verify(&self, presented: &Presented<'_>, now_unix: u64) -> Verdict {
        if presented.is_empty() {
            return Verdict::Missing;
        }
        let mut found: Option<Identity> = None;
        let invalid = |bearer: bool, reason: &str| Verdict::Invalid {
            bearer,
            reason: reason.into(),
        };
        if let Some(key) = &presented.api_key {
            match self.registry.by_key(key) {
                Some(entry) => found = Some(Identity::of_entry(entry)),
                None => return invalid(false, "unknown API key"),
            }
        }
        if let Some(name) = &presented.certificate {
            let id = match name {
                Ok(name) => match self.registry.by_name(name) {
                    Some(entry) => Identity::of_entry(entry),
                    None => Identity {
                        consumer: Arc::from(*name),
                        tenant: None,
                        plan: None,
                        claims: None,
                        entry: None,
                    },
                },
                Err(why) => return invalid(false, why),
            };
            if let Err(v) = same_consumer(&mut found, id) {
                return v;
            }
        }
        if let Some(token) = &presented.bearer {
            let token = match token {
                Ok(token) => token,
                Err(why) => return invalid(true, why),
            };
            let Some(issuers) = &self.issuers else {
                return invalid(true, "no issuers");
            };
            let id = match issuers.verify(token, &self.registry, now_unix).await {
                TokenOutcome::Verified(id) => id,
                TokenOutcome::Invalid(e) => return invalid(true, &e.to_string()),
                TokenOutcome::Unavailable => {
                    return Verdict::Unavailable("the issuer's keys are not fetched yet".into())
                }
            };
            if let Err(v) = same_consumer(&mut found, id) {
                return v;
            }
        }
        match found {
            Some(id) => Verdict::Verified(id),
            None => Verdict::Missing,
        }
    }
}

impl Authenticator {
    /// The request headers an upstream gets (docs/configuration/consumers.md): every
    /// client-sent copy of an identity header removed (whoever the peer),
    /// then set from the verified consumer; with `hide`, the API key header
    /// and a verified token's header removed.
    pub fn upstream_headers(&self, headers: &mut HeaderMap, identity: Option<&Identity>) {
        let c = &self.config;
        let ih = &c.identity_headers;
        for name in ih.names() {
            headers.remove(name);
        }
        if let Some(keys) = c.api_keys.as_ref().filter(|k| k.hide) {
            if let Some(name) = &keys.header {
                headers.remove(name);
            }
        }
        let Some(id) = identity else {
            return;
        };
        if let Some(jwt) = c.jwt.as_ref().filter(|j| j.hide && id.claims.is_some()) {
            headers.remove(&jwt.header);
        }
        let set =
            |headers: &mut HeaderMap, name: &Option<http::HeaderName>, value: Option<&str>| {
                let (Some(name), Some(value)) = (name, value) else {
                    return;
                };
                if let Ok(v) = http::HeaderValue::from_str(value) {
                    headers.insert(name.clone(), v);
                }
            };
        set(headers, &ih.consumer, Some(&id.consumer));
        set(headers, &ih.tenant, id.tenant.as_deref());
        set(headers, &ih.plan, id.plan.as_deref());
    }

    /// The query parameter to remove before forwarding: the API key's,
    /// when `hide` is set ([`credentials::without_param`]).
    pub fn hidden_param(&self) -> Option<&str> {
        let keys = self.config.api_keys.as_ref().filter(|k| k.hide)?;
        keys.query.as_deref()
    }
}

/// Why a route with `auth` refuses a request (the pipeline's
/// `GatewayError` says how it is answered).
#[derive(Debug)]
pub enum Refusal {
    /// Nothing presented: 401 `unauthorized` (`bearer`: the route takes a
    /// JWT, so the answer challenges for one).
    Unauthorized {
        /// A JWT is among the route's credentials.
        bearer: bool,
    },
    /// A credential failed: 401 `invalid_credentials`.
    Invalid {
        /// A JWT failed.
        bearer: bool,
        /// Why, for the log.
        reason: Arc<str>,
    },
    /// Verified, but not let through: 403 `forbidden` (the consumer, for
    /// the access log).
    Forbidden(Identity),
    /// Issuer keys not fetched yet: 503 `auth_unavailable`.
    Unavailable(Arc<str>),
}

/// What a request's authentication comes to on its route: the outcome
/// (the metric; [`AuthOutcome::Invalid`] also tells the caller to charge
/// `failure_limit`), and the consumer to go on with or why the route
/// refuses. A route without `auth` (`required` is `None`) never refuses:
/// an invalid or unverifiable credential there is none. The gateway and
/// `tollgate simulate` both decide through this.
pub fn judge(
    required: Option<&RouteAuth>,
    kinds: Kinds,
    verdict: Verdict,
) -> (AuthOutcome, Result<Option<Identity>, Refusal>) {
    let (outcome, result) = match verdict {
        Verdict::Verified(id) => match required {
            Some(auth) if !allowed(auth, &id) => {
                (AuthOutcome::Forbidden, Err(Refusal::Forbidden(id)))
            }
            _ => (AuthOutcome::Ok, Ok(Some(id))),
        },
        Verdict::Missing => (
            AuthOutcome::Missing,
            Err(Refusal::Unauthorized {
                bearer: kinds.has(CredentialKind::Jwt),
            }),
        ),
        Verdict::Invalid { bearer, reason } => (
            AuthOutcome::Invalid,
            Err(Refusal::Invalid { bearer, reason }),
        ),
        Verdict::Unavailable(why) => (AuthOutcome::Unavailable, Err(Refusal::Unavailable(why))),
    };
    match (required, result) {
        (None, Err(_)) => (outcome, Ok(None)),
        (_, result) => (outcome, result),
    }
}

/// Whether a verified consumer may use a route with `auth`: on one of its
/// plans, one of its consumers, one of its tenants (each list empty: any).
pub fn allowed(auth: &RouteAuth, id: &Identity) -> bool {
    let among = |list: &[String], value: Option<&str>| {
        list.is_empty() || value.is_some_and(|v| list.iter().any(|l| l == v))
    };
    among(&auth.plans, id.plan.as_deref())
        && among(&auth.consumers, Some(&id.consumer))
        && among(&auth.tenants, id.tenant.as_deref())
}

/// Merge `id` into what other credentials verified: the same consumer
/// (the token's claims kept), or a 401.
fn same_consumer(found: &mut Option<Identity>, id: Identity) -> Result<(), Verdict> {
    match found {
        None => *found = Some(id),
        Some(f) if f.consumer == id.consumer => {
            if id.claims.is_some() {
                *found = Some(id);
            }
        }
        Some(_) => {
            return Err(Verdict::Invalid {
                bearer: false,
                reason: "credentials name different consumers".into(),
            })
        }
    }
    Ok(())
}

/// The certificate field of a `consumers.mtls.consumer` setting.
fn cert_field(name: CertName) -> CertField {
    match name {
        CertName::SanDns => CertField::SanDns,
        CertName::SanUri => CertField::SanUri,
        CertName::SubjectCn => CertField::SubjectCn,
    }
}
