//! The runtime: the compiled, immutable snapshot of one config generation.
//!
//! Requests load the current [`Runtime`] once (`ArcSwap::load_full`) and keep
//! it to the end, so a reload never changes a request midway. A runtime is
//! built off the request path by [`Runtime::build`], reusing the upstream
//! pools of the previous generation whose config did not change (their
//! pooled connections survive the reload) and, in the pools it rebuilds,
//! the health of the targets they keep. Only a runtime put in force starts
//! health checks ([`Runtime::start_health_checks`]): `tollgate check` and
//! `simulate` build one and probe nothing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use tollgate_limit::{Limiter, StoreError};

use crate::auth::issuers::IssuerError;
use crate::auth::Authenticator;
use crate::body::TrailerScrub;
use crate::config::{Config, LimitResponse, PathMatch, RouteAction, RouteAuth};
use crate::limit::policy::Policy;
use crate::metrics::RouteMetrics;
use crate::proxy::headers::scrub_request_trailers;
use crate::proxy::pool::{PoolError, UpstreamPool};
use crate::route::matcher::{HostMatcher, RequestMatcher};
use crate::route::normalise::normalise_path;
use crate::route::Router;
use crate::tls::{self, TlsError};
use crate::trace::export::Telemetry;

/// One config generation, compiled.
pub struct Runtime {
    /// 1 for the config loaded at start-up, +1 per successful reload.
    pub generation: u64,
    /// When this generation was built.
    pub loaded_at: SystemTime,
    /// SHA-256 (hex) of the config file it was built from.
    pub sha256: String,
    /// The validated config.
    pub config: Arc<Config>,
    /// Finds the route of a request.
    pub router: Router<Arc<RouteRuntime>>,
    /// The routes, in config order.
    pub routes: Vec<Arc<RouteRuntime>>,
    /// The upstream pools by name.
    pub upstreams: HashMap<String, Arc<UpstreamPool>>,
    /// Every limit, compiled, by name.
    pub policies: HashMap<String, Arc<Policy>>,
    /// The limiter (store, deny cache); shared with the previous generation
    /// while `store:` is unchanged, so limit state survives reloads.
    pub limiter: Arc<Limiter>,
    /// The TLS listeners' config, the certificates read when this runtime
    /// was built (so a reload re-reads them).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The consumers section, compiled (`None` without one).
    pub auth: Option<Arc<Authenticator>>,
    /// `consumers.failure_limit`, compiled.
    pub failure_limit: Option<Arc<Policy>>,
    /// What request trailers lose before they are forwarded
    /// ([`scrub_request_trailers`], and the identity headers).
    pub trailer_scrub: TrailerScrub,
    /// Span export (`telemetry:`); shared with the previous generation
    /// while the section is unchanged.
    pub telemetry: Option<Arc<Telemetry>>,
}

/// What a route does once matched.
pub enum Action {
    /// Answer from the gateway itself.
    Respond {
        /// The status.
        status: StatusCode,
        /// The body.
        body: Bytes,
        /// The headers.
        headers: HeaderMap,
    },
    /// Forward to this pool.
    Upstream(Arc<UpstreamPool>),
}

/// A compiled route.
pub struct RouteRuntime {
    /// Its position in the config (0 for the first route).
    pub index: usize,
    /// The route's name (logs, metrics, headers).
    pub name: Arc<str>,
    /// The path matcher, for `strip_prefix`.
    pub path: PathMatch,
    /// Remove the matched prefix before forwarding.
    pub strip_prefix: bool,
    /// Put the stripped prefix back into upstream redirects.
    pub rewrite_location: bool,
    /// Send the client's Host upstream.
    pub preserve_host: bool,
    /// Wait for the response head at most this long (route, else upstream).
    pub timeout: Duration,
    /// Respond or forward.
    pub action: Action,
    /// The credentials the route requires (`auth:`), if any.
    pub auth: Option<RouteAuth>,
    /// The route's limits, in order.
    pub limits: Vec<Arc<Policy>>,
    /// How a rejection is answered: status, message, rate-limit headers.
    pub limit_response: Arc<LimitResponse>,
    /// The route's metric handles.
    pub metrics: RouteMetrics,
}

impl RouteRuntime {
    /// The path a request admitted on `path` (normalised) is sent upstream
    /// on: without the matched prefix with `strip_prefix`.
    pub fn sent_path<'p>(&self, path: &'p str) -> std::borrow::Cow<'p, str> {
        match self.strip_prefix {
            true => crate::route::matcher::strip_prefix(&self.path, path),
            false => std::borrow::Cow::Borrowed(path),
        }
    }
}

/// Why a config could not be turned into a runtime.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// An upstream pool could not be built.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A route names an upstream that does not exist (validation prevents it).
    #[error("unknown upstream {0:?}")]
    UnknownUpstream(String),
    /// A route names a limit that does not exist (validation prevents it).
    #[error("unknown limit {0:?}")]
    UnknownLimit(String),
    /// The limit store could not be set up.
    #[error("store: {0}")]
    Limiter(#[from] StoreError),
    /// A certificate, key or CA could not be loaded.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A JWT issuer's keys could not be loaded.
    #[error(transparent)]
    Auth(#[from] IssuerError),
    /// A route's `path` or `exact` is not a path a request normalises to,
    /// so the route could never match (docs/configuration/routes.md).
    #[error("route {route:?}: {path:?} is not a normalised path ({why}), so the route could never match")]
    RoutePath {
        /// The route's name.
        route: String,
        /// Its `path` or `exact`.
        path: String,
        /// What a request would have to spell instead, or why none can.
        why: String,
    },
}

impl BuildError {
    /// The config field a file error is about, and what is wrong (the
    /// file and the problem): certificates, keys, CAs and JWT key files.
    pub fn about_field(&self) -> Option<(&str, String)> {
        match self {
            BuildError::Tls(e) => Some((&e.field, format!("{}: {}", e.file.display(), e.problem))),
            BuildError::Auth(e) => Some((&e.field, e.problem.clone())),
            _ => None,
        }
    }
}

/// What a route does once matched, and its upstream's response timeout
/// (zero for a `respond` route).
fn route_action(
    action: &RouteAction,
    upstreams: &HashMap<String, Arc<UpstreamPool>>,
) -> Result<(Action, Duration), BuildError> {
    let answer = match action {
        RouteAction::Respond(r) => {
            let mut headers = HeaderMap::with_capacity(r.headers.len());
            for (name, value) in &r.headers {
                headers.append(name.clone(), value.clone());
            }
            let action = Action::Respond {
                status: r.status,
                body: Bytes::from(r.body.clone()),
                headers,
            };
            (action, Duration::ZERO)
        }
        RouteAction::Upstream(name) => {
            let pool = upstreams
                .get(name)
                .cloned()
                .ok_or_else(|| BuildError::UnknownUpstream(name.clone()))?;
            let timeout = pool.config.timeout;
            (Action::Upstream(pool), timeout)
        }
    };
    Ok(answer)
}

/// The runtime's trailer scrub: the fields no client may send upstream in
/// trailers, the configured identity headers, and the headers `hide`
/// keeps from upstreams.
fn trailer_scrub(auth: Option<Arc<Authenticator>>) -> TrailerScrub {
    Arc::new(move |trailers: &mut HeaderMap| {
        scrub_request_trailers(trailers, |name| {
            auth.as_ref()
                .is_some_and(|a| a.is_identity_header(name) || a.is_hidden_header(name))
        })
    })
}

/// The TLS listeners' config (`server.tls`), its files read now.
fn server_tls(config: &Config) -> Result<Option<Arc<rustls::ServerConfig>>, BuildError> {
    let Some(t) = &config.server.tls else {
        return Ok(None);
    };
    let client_auth = t.client_auth.as_ref().map(|c| tls::ClientAuth {
        ca: &c.ca,
        required: c.required,
    });
    Ok(Some(tls::server_config(&t.certificates, client_auth)?))
}

/// Every route's `path` and `exact` must be a normalised path under the
/// config's `escaped_slashes`: the form request paths are matched in.
/// Validation catches the common mistakes with the field's line; this is
/// the complete check (lowercase or needless escapes, a raw `\`, non-ASCII,
/// encoded controls...), here because `config` cannot call the normaliser
/// (`route` depends on `config`). Found by fuzz/ (target config).
pub fn check_route_paths(config: &Config) -> Result<(), BuildError> {
    for route in &config.routes {
        let (PathMatch::Prefix(path) | PathMatch::Exact(path)) = &route.path else {
            continue;
        };
        let why = match normalise_path(path, config.server.escaped_slashes) {
            Ok(n) if n == path.as_str() => continue,
            Ok(n) => format!("requests spell it {n:?}"),
            Err(e) => format!("no request path can be it: {e}"),
        };
        return Err(BuildError::RoutePath {
            route: route.name.clone(),
            path: path.clone(),
            why,
        });
    }
    Ok(())
}

impl Runtime {
    /// Compile `config` as generation `generation`, reusing from `previous`
    /// every upstream pool whose config is unchanged.
    pub fn build(
        config: Config,
        sha256: String,
        generation: u64,
        previous: Option<&Runtime>,
    ) -> Result<Runtime, BuildError> {
        check_route_paths(&config)?;
        let mut upstreams = HashMap::with_capacity(config.upstreams.len());
        for up in &config.upstreams {
            let before = previous.and_then(|p| p.upstreams.get(&up.name));
            let pool = match before {
                Some(pool) if pool.config == *up => pool.clone(),
                _ => Arc::new(UpstreamPool::new(up, before.map(|p| &**p))?),
            };
            upstreams.insert(up.name.clone(), pool);
        }

        let mut policies = HashMap::with_capacity(config.limits.len());
        for limit in &config.limits {
            policies.insert(limit.name.clone(), Arc::new(Policy::compile(limit)));
        }
        let limiter = Limiter::build(&config.store, previous.map(|p| &p.limiter))?;
        let auth = match &config.consumers {
            Some(c) => Some(Arc::new(Authenticator::build(
                c,
                previous.and_then(|p| p.auth.as_deref()),
            )?)),
            None => None,
        };
        let failure_limit = config
            .consumers
            .as_ref()
            .and_then(|c| c.failure_limit.as_ref())
            .and_then(|name| policies.get(name).cloned());
        let tls = server_tls(&config)?;

        let telemetry = config
            .telemetry
            .as_ref()
            .map(|t| Telemetry::build(t, previous.and_then(|p| p.telemetry.as_ref())));

        let mut matchers = Vec::with_capacity(config.routes.len());
        let mut routes = Vec::with_capacity(config.routes.len());
        for (index, route) in config.routes.iter().enumerate() {
            let matcher = RequestMatcher {
                hosts: HostMatcher::new(&route.hosts),
                path: route.path.clone(),
                methods: route.methods.clone(),
                headers: route.headers.clone(),
            };
            let (action, upstream_timeout) = route_action(&route.action, &upstreams)?;
            let limits = route
                .limits
                .iter()
                .map(|name| {
                    policies
                        .get(name)
                        .cloned()
                        .ok_or_else(|| BuildError::UnknownLimit(name.clone()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let compiled = Arc::new(RouteRuntime {
                index,
                metrics: RouteMetrics::new(limits.len()),
                limits,
                limit_response: Arc::new(route.limit_response.clone()),
                auth: route.auth.clone(),
                name: route.name.as_str().into(),
                path: route.path.clone(),
                strip_prefix: route.strip_prefix,
                rewrite_location: route.strip_prefix && route.rewrite_location,
                preserve_host: route.preserve_host,
                timeout: route.timeout.unwrap_or(upstream_timeout),
                action,
            });
            matchers.push((matcher, compiled.clone()));
            routes.push(compiled);
        }

        Ok(Runtime {
            generation,
            loaded_at: SystemTime::now(),
            sha256,
            config: Arc::new(config),
            router: Router::new(matchers),
            routes,
            upstreams,
            policies,
            limiter,
            tls,
            trailer_scrub: trailer_scrub(auth.clone()),
            auth,
            failure_limit,
            telemetry,
        })
    }

    /// The TLS config for connections accepted on `addr`, when it is one of
    /// `server.tls.listen`.
    pub fn tls_for(&self, addr: SocketAddr) -> Option<Arc<rustls::ServerConfig>> {
        let listens = &self.config.server.tls.as_ref()?.listen;
        listens.contains(&addr).then(|| self.tls.clone()).flatten()
    }

    /// Put this generation's health checks in force after `previous` (the
    /// generation it replaced): the pools it dropped or rebuilt stop
    /// probing, its own pools start (a kept pool keeps its one checker),
    /// and its JWT issuers' JWKS are fetched and refreshed.
    pub fn start_health_checks(&self, previous: Option<&Runtime>) {
        for old in previous.iter().flat_map(|p| p.upstreams.values()) {
            if !self.upstreams.values().any(|pool| Arc::ptr_eq(pool, old)) {
                old.retire();
            }
        }
        for pool in self.upstreams.values() {
            pool.start();
        }
        // JWKS fetching, like health probes, only for a runtime in force.
        if let Some(auth) = &self.auth {
            auth.start();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(server: &str, path: &str) -> Result<(), BuildError> {
        let yaml = format!(
            "server:\n{server}\nroutes:\n  - name: r\n    match: {{ path: '{path}' }}\n    respond: {{ status: 204 }}\n"
        );
        let loaded = crate::config::parse(&yaml, "t.yaml").expect("valid config");
        check_route_paths(&loaded.config)
    }

    #[test]
    fn a_route_path_no_request_can_spell_is_refused() {
        for ok in ["/", "/users", "/users/", "/caf%C3%A9", "/a;b=c/~x"] {
            assert!(paths("", ok).is_ok(), "{ok}");
        }
        // Lowercase or needless escapes, characters the normaliser escapes
        // or refuses: requests never spell these, so the route never matched.
        for never in [
            "/\\",
            "/caf%c3%a9",
            "/%7Euser",
            "/a\"b",
            "/caf\u{e9}",
            "/a%00",
        ] {
            let err = paths("", never).expect_err(never).to_string();
            assert!(err.contains("could never match"), "{never}: {err}");
        }
        assert!(paths("  escaped_slashes: keep", "/a%2Fb").is_ok());
        let err = paths("  escaped_slashes: keep", "/a%2fb").expect_err("lowercase");
        assert!(
            err.to_string().contains("requests spell it \"/a%2Fb\""),
            "{err}"
        );
    }
}
