//! Raw (as written) -> validated config: defaults, ranges, cross references,
//! duplicates and exclusive fields. Every error names its field path, and the
//! line and column found through `Positions`.
//!
//! One file per section of the config, each adding its methods to the one
//! validation context (`Ctx`): `server` (listeners, timeouts, rejection
//! responses), `admin`, `store`, `upstreams`, `limits` (policies, lockouts,
//! overrides) with `params` (each algorithm's parameters), and `routes`
//! with `matchers` (a route's `match:`), and `telemetry`. `validate` takes the sections in
//! that order, so a later one reads what an earlier one settled (routes
//! name upstreams and limits, the admin listener avoids the server's).

mod admin;
mod calendar;
mod consumers;
mod cost;
mod limits;
mod matchers;
mod params;
mod routes;
mod server;
mod store;
mod telemetry;
mod upstreams;

use std::time::Duration;

use http::{HeaderName, HeaderValue, StatusCode};

use super::error::ConfigError;
use super::model::{Config, LimitConfig, RouteAction, RouteConfig, UpstreamConfig};
use super::positions::Positions;
use super::raw::RawConfig;

type Result<T> = std::result::Result<T, ConfigError>;

const SECOND: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(86_400);

/// Validates `raw`, read from `file`; returns the config and its warnings.
pub(crate) fn validate(
    raw: RawConfig,
    file: &str,
    positions: &Positions,
) -> Result<(Config, Vec<String>)> {
    let mut ctx = Ctx {
        file,
        positions,
        base_dir: std::path::Path::new(file)
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default(),
        warnings: Vec::new(),
        identity: None,
    };
    let server = ctx.server(raw.server.unwrap_or_default())?;
    let admin = ctx.admin(raw.admin.unwrap_or_default(), &server)?;
    let store = ctx.store(raw.store.unwrap_or_default())?;
    let consumers = match raw.consumers {
        Some(c) => Some(ctx.consumers(c, &server)?),
        None => None,
    };
    ctx.identity = consumers.as_ref().map(|c| Identity {
        jwt: c.jwt.is_some(),
    });
    let upstreams = ctx.upstreams(raw.upstreams)?;
    let mut limits = ctx.policies(raw.limits)?;
    let policy_count = limits.len();
    if let Some(c) = &consumers {
        ctx.failure_limit(c, &limits[..policy_count])?;
    }
    let routes = ctx.routes(
        raw.routes.unwrap_or_default(),
        &server,
        &upstreams,
        consumers.as_ref(),
        &mut limits,
    )?;
    ctx.warn_unused(
        &upstreams,
        &limits[..policy_count],
        &routes,
        consumers.as_ref(),
    );
    // One instance: a lease would be the memory store lending to itself.
    let leased: Vec<&str> = limits
        .iter()
        .filter(|l| l.distribution.is_some())
        .map(|l| l.name.as_str())
        .collect();
    if !leased.is_empty() && store.backend.name() == "memory" {
        ctx.warnings.push(format!(
            "distribution: lease on {} with backend: memory means exact: one instance holds every limit, so nothing is leased",
            leased.join(", ")
        ));
    }
    let telemetry = match raw.telemetry {
        Some(t) => Some(ctx.telemetry(t)?),
        None => None,
    };
    let config = Config {
        server,
        admin,
        store,
        upstreams,
        limits,
        routes,
        consumers,
        telemetry,
    };
    Ok((config, ctx.warnings))
}

/// Validation state: where errors point, and the warnings so far.
struct Ctx<'a> {
    file: &'a str,
    positions: &'a Positions,
    /// The config file's directory, for relative paths.
    base_dir: std::path::PathBuf,
    warnings: Vec<String>,
    /// What the `consumers:` section verifies, once validated (`None`:
    /// there is none, so identity key sources are errors).
    identity: Option<Identity>,
}

/// What of `consumers:` the limits' checks need.
struct Identity {
    /// `consumers.jwt` is configured (`claim:NAME` needs it).
    jwt: bool,
}

impl Ctx<'_> {
    /// An error at `field`, positioned at it (or its nearest known ancestor).
    fn err(&self, field: &str, message: impl Into<String>) -> ConfigError {
        let pos = self.positions.lookup(field);
        ConfigError {
            file: self.file.to_owned(),
            line: pos.map(|p| p.0),
            column: pos.map(|p| p.1),
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// A configured header name at `field`, lowercased.
    fn header_name(&self, field: &str, name: &str) -> Result<HeaderName> {
        HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| self.err(field, format!("\"{name}\" is not a valid header name")))
    }

    /// A configured header value at `field`.
    fn header_value(&self, field: &str, value: &str) -> Result<HeaderValue> {
        HeaderValue::from_str(value)
            .map_err(|_| self.err(field, format!("\"{value}\" is not a valid header value")))
    }

    /// `path` as written, or relative to the config file's directory.
    fn resolve(&self, path: std::path::PathBuf) -> std::path::PathBuf {
        if path.is_absolute() {
            path
        } else {
            self.base_dir.join(path)
        }
    }

    /// `value` (or `default`), which must not be zero.
    fn positive(
        &self,
        field: &str,
        value: Option<Duration>,
        default: Duration,
    ) -> Result<Duration> {
        let value = value.unwrap_or(default);
        if value.is_zero() {
            return Err(self.err(field, format!("{} must be greater than 0", leaf(field))));
        }
        Ok(value)
    }

    /// `value` (or `default`), which must be at least 1.
    fn at_least_one<T: Copy + PartialOrd + From<u8>>(
        &self,
        field: &str,
        value: Option<T>,
        default: T,
    ) -> Result<T> {
        let value = value.unwrap_or(default);
        if value < T::from(1) {
            return Err(self.err(field, format!("{} must be at least 1", leaf(field))));
        }
        Ok(value)
    }

    /// Checks the name of an upstream, limit or route (`what`): it appears
    /// in metrics labels, headers and admin URLs.
    fn name(&self, field: &str, what: &str, name: &str) -> Result<()> {
        let ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if ok {
            Ok(())
        } else {
            Err(self.err(
                field,
                format!(
                    "{what} names are made of letters, digits, `_`, `-` and `.`, got \"{name}\""
                ),
            ))
        }
    }

    /// Warns of upstreams and named limits (`policies`) no route uses, and
    /// of a config without routes.
    fn warn_unused(
        &mut self,
        upstreams: &[UpstreamConfig],
        policies: &[LimitConfig],
        routes: &[RouteConfig],
        consumers: Option<&crate::config::consumers::ConsumersConfig>,
    ) {
        for upstream in upstreams {
            let used = routes
                .iter()
                .any(|r| matches!(&r.action, RouteAction::Upstream(u) if *u == upstream.name));
            if !used {
                self.warnings.push(format!(
                    "upstream \"{}\" is not used by any route",
                    upstream.name
                ));
            }
        }
        let failure_limit = consumers.and_then(|c| c.failure_limit.as_ref());
        for limit in policies {
            if failure_limit == Some(&limit.name) {
                continue;
            }
            if !routes.iter().any(|r| r.limits.contains(&limit.name)) {
                self.warnings
                    .push(format!("limit \"{}\" is not used by any route", limit.name));
            }
        }
        if routes.is_empty() {
            self.warnings
                .push("no routes: every request is answered 404".to_owned());
        }
    }
}

/// The last component of a field path (`server.timeouts.idle` -> `idle`).
fn leaf(field: &str) -> &str {
    field
        .rsplit(['.', ']'])
        .find(|s| !s.is_empty() && !s.contains('['))
        .unwrap_or(field)
}

/// " (known: a, b)" or " (none are defined)".
fn known_list(names: &[&str]) -> String {
    if names.is_empty() {
        " (none are defined)".to_owned()
    } else {
        format!(" (known: {})", names.join(", "))
    }
}

/// A status already checked to be in 100..=999.
fn status_code(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A URL with its password hidden, for messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let hidden = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_owned()
            };
            format!("{scheme}://{hidden}@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves() {
        assert_eq!(leaf("server.timeouts.idle"), "idle");
        assert_eq!(leaf("a.b[0].weight"), "weight");
        assert_eq!(leaf("burst"), "burst");
    }
}
