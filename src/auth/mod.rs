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

use futures_util::FutureExt as _;
use http::HeaderMap;

use crate::config::{is_printable_name, CertName, ConsumersConfig, CredentialKind, RouteAuth};
pub use consumers::Registry;
pub use credentials::{Kinds, Presented};
pub use identity::Identity;
pub use issuers::Fetch;
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

/// What verifying a request's credentials gave.
#[derive(Debug)]
pub enum Verification {
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
        let kinds = config.kinds();
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

    /// The credentials a request to a route with `auth` (or without)
    /// presents, of the kinds it is looked at for ([`Authenticator::kinds`]).
    ///
    /// On a route without `auth`, a bearer token that names none of the
    /// issuers (its unverified `iss`, or none readable) is left to the
    /// upstream, which may have tokens of its own: no credential here, not
    /// verified, never charged to `failure_limit`. (On a route with `auth`
    /// it is an invalid credential.)
    pub fn presented<'a>(
        &self,
        route: Option<&RouteAuth>,
        headers: &'a HeaderMap,
        query: Option<&'a str>,
        cert: Option<&'a PeerCert>,
    ) -> Presented<'a> {
        let kinds = self.kinds(route);
        let c = &self.config;
        let foreign = |token: &Result<&str, &str>| match (token, &self.issuers, route) {
            (Ok(token), Some(issuers), None) => !issuers.knows(token),
            _ => false,
        };
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
                .and_then(|j| credentials::bearer(j, headers))
                .filter(|token| !foreign(token)),
            certificate: c
                .mtls
                .as_ref()
                .filter(|_| kinds.has(CredentialKind::Mtls))
                .and_then(|m| {
                    let cert = cert?;
                    Some(match cert.name(cert_field(m.consumer)) {
                        None => Err("the client certificate lacks the configured name"),
                        Some(name) if !is_printable_name(name) => Err(
                            "the client certificate's name is not printable ASCII without spaces",
                        ),
                        Some(name) => Ok(name),
                    })
                }),
        }
    }

    /// Verify what a request presents at `now_unix` (seconds; tokens'
    /// `exp` and `nbf` are read against it): each credential on its own,
    /// then they must all name one consumer.
    pub async fn verify(&self, presented: &Presented<'_>, now_unix: u64) -> Verification {
        self.verify_with(presented, now_unix, Fetch::WhenNeeded)
            .await
    }

    /// [`Authenticator::verify`] with the keys at hand, on the spot: no
    /// JWKS is fetched (nor a fetch started), so a token of an issuer
    /// whose key set is not fetched yet, or signed by a key it does not
    /// hold, is [`Verification::Unavailable`]. What `tollgate simulate` and the
    /// admin API's probes verify with.
    pub fn verify_offline(&self, presented: &Presented<'_>, now_unix: u64) -> Verification {
        // Nothing awaits without fetching: ready on the first poll.
        self.verify_with(presented, now_unix, Fetch::Never)
            .now_or_never()
            .unwrap_or(Verification::Unavailable("not fetched".into()))
    }

    async fn verify_with(
        &self,
        presented: &Presented<'_>,
        now_unix: u64,
        fetch: Fetch,
    ) -> Verification {
        if presented.is_empty() {
            return Verification::Missing;
        }
        let mut found: Option<Identity> = None;
        let invalid = |bearer: bool, reason: &str| Verification::Invalid {
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
            let id = match issuers.verify(token, &self.registry, now_unix, fetch).await {
                TokenOutcome::Verified(id) => id,
                TokenOutcome::Invalid(e) => return invalid(true, &e.to_string()),
                TokenOutcome::Unavailable => {
                    return Verification::Unavailable(
                        "the issuer's keys are not fetched yet".into(),
                    )
                }
            };
            if let Err(v) = same_consumer(&mut found, id) {
                return v;
            }
        }
        match found {
            Some(id) => Verification::Verified(id),
            None => Verification::Missing,
        }
    }
}

impl Authenticator {
    /// The request headers an upstream gets (docs/configuration/consumers.md): every
    /// client-sent copy of an identity header removed (whoever the peer),
    /// then set from the verified consumer; with `hide`, the API key header
    /// and a verified token's header removed. Each is removed in every
    /// spelling an upstream may read as it: any case, and `_` for `-`.
    pub fn upstream_headers(&self, headers: &mut HeaderMap, identity: Option<&Identity>) {
        let c = &self.config;
        let ih = &c.identity_headers;
        let verified_token = identity.is_some_and(|id| id.claims.is_some());
        let token_header = c.jwt.as_ref().filter(|j| j.hide && verified_token);
        let gone = [
            ih.consumer.as_ref(),
            ih.tenant.as_ref(),
            ih.plan.as_ref(),
            self.hidden_key_header(),
            token_header.map(|j| &j.header),
        ];
        remove_spellings(headers, &gone);
        let Some(id) = identity else {
            return;
        };
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

    /// Whether `name` is a configured identity header, also when spelt
    /// with `_` for `-`: never taken from a client, in headers or trailers.
    pub fn is_identity_header(&self, name: &http::HeaderName) -> bool {
        self.config
            .identity_headers
            .names()
            .any(|n| same_header(name, n))
    }

    /// Whether `name` is a header `hide` keeps from upstreams, in any
    /// spelling (any case, `_` for `-`): the API key header with
    /// `api_keys.hide`, the token's header with `jwt.hide`. Never taken
    /// from request trailers (no credential is read there).
    pub fn is_hidden_header(&self, name: &http::HeaderName) -> bool {
        let jwt = self
            .config
            .jwt
            .as_ref()
            .filter(|j| j.hide)
            .map(|j| &j.header);
        self.hidden_key_header()
            .into_iter()
            .chain(jwt)
            .any(|n| same_header(name, n))
    }

    /// The API key header, when `hide` is set.
    fn hidden_key_header(&self) -> Option<&http::HeaderName> {
        let keys = self.config.api_keys.as_ref().filter(|k| k.hide)?;
        keys.header.as_ref()
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

/// What a request's authentication comes to on its route: the outcome
/// (the metric; [`AuthOutcome::Invalid`] also tells the caller to charge
/// `failure_limit`), and the consumer to go on with or why the route
/// refuses. A route without `auth` (`required` is `None`) never refuses:
/// an invalid or unverifiable credential there is none. The gateway and
/// `tollgate simulate` both decide through this.
pub fn judge(
    required: Option<&RouteAuth>,
    kinds: Kinds,
    verdict: Verification,
) -> (AuthOutcome, Result<Option<Identity>, Refusal>) {
    let (outcome, result) = match verdict {
        Verification::Verified(id) => match required {
            Some(auth) if !allowed(auth, &id) => {
                (AuthOutcome::Forbidden, Err(Refusal::Forbidden(id)))
            }
            _ => (AuthOutcome::Ok, Ok(Some(id))),
        },
        Verification::Missing => (
            AuthOutcome::Missing,
            Err(Refusal::Unauthorized {
                bearer: kinds.has(CredentialKind::Jwt),
            }),
        ),
        Verification::Invalid { bearer, reason } => (
            AuthOutcome::Invalid,
            Err(Refusal::Invalid { bearer, reason }),
        ),
        Verification::Unavailable(why) => {
            (AuthOutcome::Unavailable, Err(Refusal::Unavailable(why)))
        }
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
fn same_consumer(found: &mut Option<Identity>, id: Identity) -> Result<(), Verification> {
    match found {
        None => *found = Some(id),
        Some(f) if f.consumer == id.consumer => {
            if id.claims.is_some() {
                *found = Some(id);
            }
        }
        Some(_) => {
            return Err(Verification::Invalid {
                bearer: false,
                reason: "credentials name different consumers".into(),
            })
        }
    }
    Ok(())
}

/// Remove every header of `names` (`None`s skipped) in each spelling an
/// upstream may read as it: the name itself in any case (header names
/// arrive lowercase), and with `_` for `-` (NGINX, CGI and WSGI read
/// `X_Consumer` as `X-Consumer`; docs/protocols.md drops such spellings of
/// the client-address headers likewise). One pass over the headers for
/// the spellings, and no allocation when there are none.
fn remove_spellings(headers: &mut HeaderMap, names: &[Option<&http::HeaderName>]) {
    for name in names.iter().flatten() {
        headers.remove(*name);
    }
    let spelt: Vec<http::HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().contains('_') && names.iter().flatten().any(|n| same_header(k, n)))
        .cloned()
        .collect();
    for name in spelt {
        headers.remove(name);
    }
}

/// Whether header `name` is `wanted` as an upstream may read it: the
/// same name, or the same once every `_` is read as `-`.
fn same_header(name: &http::HeaderName, wanted: &http::HeaderName) -> bool {
    name == wanted || same_but_underscores(name.as_str(), wanted.as_str())
}

/// Whether two (lowercase) header names are the same once every `_` is
/// read as `-`.
fn same_but_underscores(a: &str, b: &str) -> bool {
    let dash = |c: u8| if c == b'_' { b'-' } else { c };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| dash(x) == dash(y))
}

/// The certificate field of a `consumers.mtls.consumer` setting.
fn cert_field(name: CertName) -> CertField {
    match name {
        CertName::SanDns => CertField::SanDns,
        CertName::SanUri => CertField::SanUri,
        CertName::SubjectCn => CertField::SubjectCn,
    }
}

#[cfg(test)]
mod tests {
    //! The authenticator on a parsed config: API keys, a secret-signed
    //! JWT, two credentials, the judgement, and the upstream's headers.

    use futures_util::FutureExt as _;
    use http::{HeaderMap, HeaderValue};
    use ring::hmac;

    use super::*;
    use crate::config::parse;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";
    const KEY: &str = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

    fn authenticator() -> (Authenticator, crate::config::Config) {
        let text = format!(
            "consumers:
  api_keys: {{ header: x-api-key, hide: true }}
  jwt:
    issuers:
      - {{ issuer: me, secret: \"{SECRET}\", tenant: org.id }}
  list:
    - {{ name: acme, tenant: acme, plan: gold, keys: [\"{KEY}\"], attributes: {{ tz: UTC }} }}
  identity_headers: {{ consumer: x-consumer, tenant: x-tenant, plan: x-plan }}
routes:
  - {{ name: gold, respond: {{ status: 200 }}, auth: {{ plans: [gold] }} }}
  - {{ name: open, respond: {{ status: 200 }} }}
"
        );
        let config = parse(&text, "t.yaml").expect("config").config;
        let auth = Authenticator::build(config.consumers.as_ref().unwrap(), None).unwrap();
        (auth, config)
    }

    /// An HS256 token for `claims` (JSON).
    fn token(claims: &str) -> String {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
        use base64::Engine as _;
        let input = format!(
            "{}.{}",
            B64.encode(r#"{"alg":"HS256","typ":"JWT"}"#),
            B64.encode(claims)
        );
        let key = hmac::Key::new(hmac::HMAC_SHA256, SECRET.as_bytes());
        let sig = hmac::sign(&key, input.as_bytes());
        format!("{input}.{}", B64.encode(sig.as_ref()))
    }

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn verify(auth: &Authenticator, h: &HeaderMap) -> Verification {
        // As a route with `auth` for every kind sees them.
        let every = RouteAuth {
            require: auth.config.kinds(),
            plans: vec![],
            consumers: vec![],
            tenants: vec![],
        };
        let p = auth.presented(Some(&every), h, None, None);
        auth.verify(&p, 1_900_000_000)
            .now_or_never()
            .expect("ready")
    }

    #[test]
    fn credentials_verify_to_one_consumer() {
        let (auth, config) = authenticator();
        let gold = config.routes[0].auth.as_ref();
        assert!(matches!(
            verify(&auth, &HeaderMap::new()),
            Verification::Missing
        ));

        let id = match verify(&auth, &headers(&[("x-api-key", "foo".into())])) {
            Verification::Verified(id) => id,
            other => panic!("{other:?}"),
        };
        assert_eq!((&*id.consumer, id.plan.as_deref()), ("acme", Some("gold")));
        assert!(allowed(gold.unwrap(), &id));

        let good = token(r#"{"iss":"me","sub":"acme","exp":2000000000,"org":{"id":"acme-org"}}"#);
        let id = match verify(
            &auth,
            &headers(&[("authorization", format!("Bearer {good}"))]),
        ) {
            Verification::Verified(id) => id,
            other => panic!("{other:?}"),
        };
        // The tenant claim wins; the plan and attributes come from the list.
        assert_eq!(id.tenant.as_deref(), Some("acme-org"));
        assert_eq!(
            (id.plan.as_deref(), id.attr("tz")),
            (Some("gold"), Some("UTC"))
        );

        // Both credentials, one consumer: verified, with the token's claims.
        let both = headers(&[
            ("x-api-key", "foo".into()),
            ("authorization", format!("Bearer {good}")),
        ]);
        assert!(matches!(verify(&auth, &both), Verification::Verified(id) if id.claims.is_some()));
        // Two consumers: invalid.
        let other = token(r#"{"iss":"me","sub":"zed","exp":2000000000}"#);
        let two = headers(&[
            ("x-api-key", "foo".into()),
            ("authorization", format!("Bearer {other}")),
        ]);
        assert!(matches!(verify(&auth, &two), Verification::Invalid { .. }));

        for bad in [
            headers(&[("x-api-key", "fooo".into())]),
            headers(&[("authorization", "Bearer a.b.c".into())]),
            headers(&[(
                "authorization",
                format!(
                    "Bearer {}",
                    token(r#"{"iss":"me","sub":"acme","exp":1000}"#)
                ),
            )]),
            headers(&[("authorization", format!("Bearer {good}x"))]),
        ] {
            assert!(
                matches!(verify(&auth, &bad), Verification::Invalid { .. }),
                "{bad:?}"
            );
        }
        let jwt_failed = verify(&auth, &headers(&[("authorization", "Bearer x".into())]));
        assert!(matches!(
            jwt_failed,
            Verification::Invalid { bearer: true, .. }
        ));
    }

    #[test]
    fn the_judgement_of_each_route() {
        let (auth, config) = authenticator();
        let gold = config.routes[0].auth.as_ref();
        let kinds = auth.kinds(gold);
        let judge_of = |h: &HeaderMap, route: Option<&RouteAuth>| {
            let v = verify(&auth, h);
            let (outcome, result) = judge(route, kinds, v);
            (outcome, result.map(|id| id.map(|i| i.consumer.to_string())))
        };
        let none = HeaderMap::new();
        assert!(matches!(
            judge_of(&none, gold),
            (
                AuthOutcome::Missing,
                Err(Refusal::Unauthorized { bearer: true })
            )
        ));
        assert!(matches!(
            judge_of(&none, None),
            (AuthOutcome::Missing, Ok(None))
        ));
        let bad = headers(&[("x-api-key", "nope".into())]);
        assert!(matches!(
            judge_of(&bad, gold),
            (
                AuthOutcome::Invalid,
                Err(Refusal::Invalid { bearer: false, .. })
            )
        ));
        // Without auth an invalid key is no consumer, never a refusal.
        assert!(matches!(
            judge_of(&bad, None),
            (AuthOutcome::Invalid, Ok(None))
        ));
        let silver = token(r#"{"iss":"me","sub":"bob","exp":2000000000}"#);
        let h = headers(&[("authorization", format!("Bearer {silver}"))]);
        assert!(matches!(
            judge_of(&h, gold),
            (AuthOutcome::Forbidden, Err(Refusal::Forbidden(_)))
        ));
        assert!(matches!(judge_of(&h, None), (AuthOutcome::Ok, Ok(Some(name))) if name == "bob"));
    }

    #[test]
    fn a_foreign_token_is_the_upstreams_business_outside_auth() {
        let (auth, _) = authenticator();
        let foreign = token(r#"{"iss":"someone-else","sub":"x","exp":2000000000}"#);
        let ours_bad = token(r#"{"iss":"me","sub":"acme","exp":1000}"#);
        let h = |t: &str| headers(&[("authorization", format!("Bearer {t}"))]);
        let outside = |hm: &HeaderMap| auth.presented(None, hm, None, None).bearer.is_some();
        assert!(!outside(&h(&foreign)), "another issuer's token: not ours");
        assert!(!outside(&h("not.a.jwt")), "unreadable: not ours");
        assert!(
            outside(&h(&ours_bad)),
            "our issuer's, expired: verified (and refused)"
        );
        // On a route with auth, the foreign token is an invalid credential.
        assert!(matches!(
            verify(&auth, &h(&foreign)),
            Verification::Invalid { bearer: true, .. }
        ));
    }

    #[test]
    fn what_the_upstream_sees() {
        let (auth, _) = authenticator();
        let good = token(r#"{"iss":"me","sub":"acme","exp":2000000000}"#);
        let mut h = headers(&[
            ("x-api-key", "foo".into()),
            ("authorization", format!("Bearer {good}")),
            ("x-consumer", "forged".into()),
            ("x-tenant", "forged".into()),
            ("x-plan", "forged".into()),
        ]);
        let id = match verify(&auth, &h) {
            Verification::Verified(id) => id,
            other => panic!("{other:?}"),
        };
        auth.upstream_headers(&mut h, Some(&id));
        assert_eq!(h.get_all("x-consumer").iter().count(), 1);
        assert_eq!(h["x-consumer"], "acme");
        assert_eq!(h["x-tenant"], "acme");
        assert_eq!(h["x-plan"], "gold");
        assert!(h.get("x-api-key").is_none() && h.get("authorization").is_none());

        // No consumer: the forged copies go, nothing is set.
        let mut h = headers(&[
            ("x-consumer", "forged".into()),
            ("authorization", "Basic x".into()),
        ]);
        auth.upstream_headers(&mut h, None);
        assert!(h.get("x-consumer").is_none());
        assert_eq!(h["authorization"], "Basic x", "not a verified token: kept");
        assert_eq!(auth.hidden_param(), None, "api_keys has no query");
    }

    #[test]
    fn hide_removes_every_spelling_of_the_key_header() {
        let (auth, _) = authenticator();
        let mut h = headers(&[
            ("x-api-key", "foo".into()),
            ("x_api_key", "foo".into()),
            ("x_api-key", "bar".into()),
            ("x-api_key", "baz".into()),
            ("x-apikey", "another header".into()),
            ("x_consumer", "forged".into()),
        ]);
        auth.upstream_headers(&mut h, None);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x-apikey"]);
        let named = |n: &str| http::HeaderName::from_bytes(n.as_bytes()).unwrap();
        for hidden in ["x-api-key", "x_api_key", "X_Api-Key", "authorization"] {
            assert!(auth.is_hidden_header(&named(hidden)), "{hidden}");
        }
        for other in ["x-apikey", "x-api-keys", "x-consumer"] {
            assert!(!auth.is_hidden_header(&named(other)), "{other}");
        }
    }
}
