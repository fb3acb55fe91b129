//! `routes:`: each route's name, `match:` (`matchers`), action (an
//! upstream or a fixed response), limits (by name or inline) and rejection
//! response.

use std::collections::{HashMap, HashSet};

use super::{known_list, status_code, Ctx, Result};
use crate::config::consumers::ConsumersConfig;
use crate::config::model::{
    EscapedSlashes, LimitConfig, RespondConfig, RouteAction, RouteConfig, ServerConfig,
    UpstreamConfig,
};
use crate::config::raw::{RawRespond, RawRoute, RawRouteLimit};
use crate::config::PathMatch;

/// What routes refer to, and the names taken so far.
struct Scope<'a> {
    server: &'a ServerConfig,
    upstreams: &'a [UpstreamConfig],
    consumers: Option<&'a ConsumersConfig>,
    /// The named limits, which a route may list by name.
    policies: HashSet<String>,
    /// Every limit name so far, with where it was defined.
    limit_names: HashMap<String, String>,
    /// Every route name so far, with its index.
    route_names: HashMap<String, usize>,
}

impl Ctx<'_> {
    /// `routes:`, in file order. A route's inline limits are added to
    /// `limits`, after the policies.
    pub(super) fn routes(
        &mut self,
        raw: Vec<RawRoute>,
        server: &ServerConfig,
        upstreams: &[UpstreamConfig],
        consumers: Option<&ConsumersConfig>,
        limits: &mut Vec<LimitConfig>,
    ) -> Result<Vec<RouteConfig>> {
        let mut scope = Scope {
            server,
            upstreams,
            consumers,
            policies: limits.iter().map(|l| l.name.clone()).collect(),
            limit_names: limits
                .iter()
                .map(|l| (l.name.clone(), format!("limits.{}", l.name)))
                .collect(),
            route_names: HashMap::new(),
        };
        let mut routes = Vec::with_capacity(raw.len());
        for (i, route) in raw.into_iter().enumerate() {
            routes.push(self.route(i, route, &mut scope, limits)?);
        }
        Ok(routes)
    }

    /// The route at `routes[i]`.
    fn route(
        &mut self,
        i: usize,
        route: RawRoute,
        scope: &mut Scope<'_>,
        limits: &mut Vec<LimitConfig>,
    ) -> Result<RouteConfig> {
        let path = format!("routes[{i}]");
        self.route_name(&path, i, &route.name, scope)?;
        let matcher = self.matcher(&format!("{path}.match"), route.matcher.unwrap_or_default())?;
        self.escaped_slash_route(&format!("{path}.match"), &matcher.path, scope.server)?;
        let action = match (route.upstream, route.respond) {
            (Some(upstream), None) => {
                RouteAction::Upstream(self.route_upstream(&path, upstream, scope.upstreams)?)
            }
            (None, Some(respond)) => {
                RouteAction::Respond(self.respond(&format!("{path}.respond"), respond)?)
            }
            _ => {
                return Err(self.err(
                    &path,
                    "a route needs exactly one of `upstream` and `respond`",
                ))
            }
        };
        let strip_prefix = route.strip_prefix.unwrap_or(false);
        if strip_prefix && !matches!(matcher.path, PathMatch::Prefix(_)) {
            return Err(self.err(
                &format!("{path}.strip_prefix"),
                "strip_prefix needs a `path` prefix matcher in `match`",
            ));
        }
        let timeout = match route.timeout {
            None => None,
            Some(d) => Some(self.positive(&format!("{path}.timeout"), Some(d.0), d.0)?),
        };
        let auth = match route.auth {
            None => None,
            Some(a) => Some(self.route_auth(&format!("{path}.auth"), a, scope.consumers)?),
        };
        let names = self.route_limits(
            &path,
            &route.name,
            route.limits.unwrap_or_default(),
            scope,
            limits,
        )?;
        let server = &scope.server.limit_response;
        let limit_response = match route.limit_response {
            None => server.clone(),
            Some(r) => self.limit_response(&format!("{path}.limit_response"), r, server)?,
        };
        Ok(RouteConfig {
            name: route.name,
            hosts: matcher.hosts,
            path: matcher.path,
            methods: matcher.methods,
            headers: matcher.headers,
            action,
            auth,
            strip_prefix,
            rewrite_location: route.rewrite_location.unwrap_or(true),
            preserve_host: route.preserve_host.unwrap_or(true),
            timeout,
            limits: names,
            limit_response,
            line: self.positions.lookup(&path).map_or(0, |p| p.0),
        })
    }

    /// A route's name: valid, and not taken by an earlier route.
    fn route_name(&self, path: &str, i: usize, name: &str, scope: &mut Scope<'_>) -> Result<()> {
        let name_field = format!("{path}.name");
        self.name(&name_field, "route", name)?;
        if let Some(first) = scope.route_names.get(name) {
            return Err(self.err(
                &name_field,
                format!("duplicate route name \"{name}\" (first used by routes[{first}])"),
            ));
        }
        scope.route_names.insert(name.to_owned(), i);
        Ok(())
    }

    /// The `upstream` of the route at `path`, which must be defined.
    fn route_upstream(
        &self,
        path: &str,
        upstream: String,
        upstreams: &[UpstreamConfig],
    ) -> Result<String> {
        if !upstreams.iter().any(|u| u.name == upstream) {
            let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
            return Err(self.err(
                &format!("{path}.upstream"),
                format!("unknown upstream \"{upstream}\"{}", known_list(&known)),
            ));
        }
        Ok(upstream)
    }

    /// The `limits` of the route `route` at `path`: policies by name, inline
    /// limits validated and added to `limits`; each listed once.
    fn route_limits(
        &mut self,
        path: &str,
        route: &str,
        raw: Vec<RawRouteLimit>,
        scope: &mut Scope<'_>,
        limits: &mut Vec<LimitConfig>,
    ) -> Result<Vec<String>> {
        let mut names: Vec<String> = Vec::new();
        for (j, entry) in raw.into_iter().enumerate() {
            let field = format!("{path}.limits[{j}]");
            let name = match entry {
                RawRouteLimit::Name(name) => {
                    if !scope.policies.contains(&name) {
                        let mut known: Vec<&str> =
                            scope.policies.iter().map(String::as_str).collect();
                        known.sort_unstable();
                        return Err(self.err(
                            &field,
                            format!("unknown limit \"{name}\"{}", known_list(&known)),
                        ));
                    }
                    name
                }
                RawRouteLimit::Inline(raw) => {
                    let (name, name_field) = match &raw.name {
                        Some(name) => {
                            let name_field = format!("{field}.name");
                            self.name(&name_field, "limit", name)?;
                            (name.clone(), name_field)
                        }
                        None => (format!("{route}.{j}"), field.clone()),
                    };
                    if let Some(other) = scope.limit_names.get(&name) {
                        return Err(self.err(
                            &name_field,
                            format!("duplicate limit name \"{name}\" (already defined at {other})"),
                        ));
                    }
                    let limit = self.limit(&field, name.clone(), *raw)?;
                    scope.limit_names.insert(name.clone(), field.clone());
                    limits.push(limit);
                    name
                }
            };
            if names.contains(&name) {
                return Err(self.err(
                    &field,
                    format!("limit \"{name}\" is listed twice on this route"),
                ));
            }
            names.push(name);
        }
        Ok(names)
    }

    /// A `path` or `exact` holding `%2F` or `%5C` can only match with
    /// `escaped_slashes: keep`: `reject` answers such a request 400 and
    /// `decode` reads the escape as `/`.
    fn escaped_slash_route(&self, path: &str, m: &PathMatch, server: &ServerConfig) -> Result<()> {
        let (field, value) = match m {
            PathMatch::Prefix(p) => ("path", p),
            PathMatch::Exact(p) => ("exact", p),
            PathMatch::Any | PathMatch::Regex(_) => return Ok(()),
        };
        let upper = value.to_ascii_uppercase();
        let mode = match server.escaped_slashes {
            EscapedSlashes::Keep => return Ok(()),
            _ if !upper.contains("%2F") && !upper.contains("%5C") => return Ok(()),
            EscapedSlashes::Reject => "reject",
            EscapedSlashes::Decode => "decode",
        };
        Err(self.err(
            &format!("{path}.{field}"),
            format!("\"{value}\" holds an escaped slash, so it could never match with `server.escaped_slashes: {mode}` (only `keep` keeps %2F and %5C in paths)"),
        ))
    }

    /// A route's fixed response (`respond`) at `path`.
    fn respond(&self, path: &str, raw: RawRespond) -> Result<RespondConfig> {
        let status = raw.status.unwrap_or(200);
        if !(200..=599).contains(&status) {
            return Err(self.err(
                &format!("{path}.status"),
                format!("status must be between 200 and 599, got {status}"),
            ));
        }
        let mut headers = Vec::new();
        for (name, value) in raw.headers.0 {
            let field = format!("{path}.headers.{name}");
            let header = self.header_name(&field, &name)?;
            if GATEWAY_HEADERS.contains(&header.as_str()) {
                return Err(self.err(
                    &field,
                    format!("\"{header}\" is set by the gateway and cannot be configured"),
                ));
            }
            let value = self.header_value(&field, &value)?;
            headers.push((header, value));
        }
        Ok(RespondConfig {
            status: status_code(status),
            body: raw.body.unwrap_or_default(),
            headers,
        })
    }
}

/// Headers a fixed response may not set: framing and hop-by-hop.
const GATEWAY_HEADERS: [&str; 8] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];
