//! `upstreams:`: each pool's targets, balancing, timeouts, TLS to the
//! targets, and health checks.

use http::uri::PathAndQuery;
use http::Uri;

use super::{redact, Ctx, Result, SECOND};
use crate::config::model::{
    ActiveHealth, Balance, HealthConfig, PassiveHealth, TargetConfig, UpstreamConfig, UpstreamTls,
};
use crate::config::raw::{Ordered, RawActive, RawPassive, RawTarget, RawUpstream, RawUpstreamTls};
use crate::config::units::format_duration;

impl Ctx<'_> {
    /// `upstreams:`, in file order; names are unique.
    pub(super) fn upstreams(&mut self, raw: Ordered<RawUpstream>) -> Result<Vec<UpstreamConfig>> {
        let mut out: Vec<UpstreamConfig> = Vec::new();
        for (name, raw) in raw.0 {
            let path = format!("upstreams.{name}");
            self.name(&path, "upstream", &name)?;
            if out.iter().any(|u| u.name == name) {
                return Err(self.err(&path, format!("duplicate upstream name \"{name}\"")));
            }
            let upstream = self.upstream(&path, name, raw)?;
            out.push(upstream);
        }
        Ok(out)
    }

    /// The upstream `name`, at `path`.
    fn upstream(&mut self, path: &str, name: String, raw: RawUpstream) -> Result<UpstreamConfig> {
        let targets = self.targets(path, raw.targets.unwrap_or_default())?;
        let tls = match raw.tls {
            None => None,
            Some(t) => Some(self.upstream_tls(path, t, &targets)?),
        };
        let health = raw.health.unwrap_or_default();
        let passive = match health.passive {
            None => None,
            Some(p) => Some(self.passive_health(&format!("{path}.health.passive"), p)?),
        };
        let active = match health.active {
            None => None,
            Some(a) => Some(self.active_health(&format!("{path}.health.active"), a)?),
        };
        Ok(UpstreamConfig {
            name,
            targets,
            balance: raw.balance.unwrap_or(Balance::RoundRobin),
            connect_timeout: self.positive(
                &format!("{path}.connect_timeout"),
                raw.connect_timeout.map(|d| d.0),
                2 * SECOND,
            )?,
            timeout: self.positive(
                &format!("{path}.timeout"),
                raw.timeout.map(|d| d.0),
                30 * SECOND,
            )?,
            retries: raw.retries.unwrap_or(1),
            http2: raw.http2.unwrap_or(false),
            tls,
            health: HealthConfig { passive, active },
        })
    }

    /// An upstream's targets: at least one, each listed once.
    fn targets(&self, path: &str, raw_targets: Vec<RawTarget>) -> Result<Vec<TargetConfig>> {
        if raw_targets.is_empty() {
            return Err(self.err(
                &format!("{path}.targets"),
                "an upstream needs at least one target",
            ));
        }
        let mut targets: Vec<TargetConfig> = Vec::with_capacity(raw_targets.len());
        for (i, t) in raw_targets.into_iter().enumerate() {
            let field = format!("{path}.targets[{i}]");
            let url_field = if t.weight.is_some() {
                format!("{field}.url")
            } else {
                field.clone()
            };
            let url = target_url(&t.url).map_err(|m| self.err(&url_field, m))?;
            // A target's health is kept by its URL, so each is listed once.
            if let Some(first) = targets.iter().position(|o| same_target(&o.url, &url)) {
                return Err(self.err(
                    &url_field,
                    format!(
                        "duplicate target \"{}\" (also targets[{first}]); give it a weight instead",
                        t.url.trim()
                    ),
                ));
            }
            let weight = self.at_least_one(&format!("{field}.weight"), t.weight, 1)?;
            targets.push(TargetConfig { url, weight });
        }
        Ok(targets)
    }

    /// `tls` of the upstream at `path`: how its `https://` targets are
    /// verified, and its client certificate.
    fn upstream_tls(
        &mut self,
        path: &str,
        raw: RawUpstreamTls,
        targets: &[TargetConfig],
    ) -> Result<UpstreamTls> {
        let field = format!("{path}.tls");
        if !targets.iter().any(|t| t.url.scheme_str() == Some("https")) {
            self.warnings.push(format!(
                "{field} has no effect: the upstream has no https:// target"
            ));
        }
        let verify = raw.verify.unwrap_or(true);
        if !verify {
            self.warnings.push(format!(
                "{field}.verify: false: the targets' certificates are not checked, so anyone on the path can pose as them"
            ));
        }
        let client_cert = match (raw.cert, raw.key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((self.resolve(cert), self.resolve(key))),
            (Some(_), None) => {
                return Err(self.err(
                    &field,
                    "`cert` needs its `key` (a client certificate for mutual TLS)",
                ))
            }
            (None, Some(_)) => {
                return Err(self.err(
                    &field,
                    "`key` needs its `cert` (a client certificate for mutual TLS)",
                ))
            }
        };
        if let Some(name) = &raw.server_name {
            if name.trim().is_empty() || name.contains(['/', ' ', ':']) && !name.contains("::") {
                return Err(self.err(
                    &format!("{field}.server_name"),
                    format!("\"{name}\" is not a host name"),
                ));
            }
        }
        Ok(UpstreamTls {
            ca: raw.ca.map(|p| self.resolve(p)),
            verify,
            server_name: raw.server_name.filter(|s| !s.trim().is_empty()),
            client_cert,
        })
    }

    /// `health.passive` at `path`, with the documented defaults.
    fn passive_health(&self, path: &str, raw: RawPassive) -> Result<PassiveHealth> {
        Ok(PassiveHealth {
            failures: self.at_least_one(&format!("{path}.failures"), raw.failures, 5)?,
            eject: self.positive(
                &format!("{path}.eject"),
                raw.eject.map(|d| d.0),
                30 * SECOND,
            )?,
        })
    }

    /// `health.active` at `path`, with the documented defaults.
    fn active_health(&self, path: &str, raw: RawActive) -> Result<ActiveHealth> {
        let probe = raw.path.unwrap_or_else(|| "/healthz".to_owned());
        let field = format!("{path}.path");
        if !probe.starts_with('/') {
            return Err(self.err(
                &field,
                format!("a probe path must start with /, got \"{probe}\""),
            ));
        }
        let probe: PathAndQuery = probe
            .parse()
            .map_err(|_| self.err(&field, format!("\"{probe}\" is not a valid path")))?;
        let interval = self.positive(
            &format!("{path}.interval"),
            raw.interval.map(|d| d.0),
            5 * SECOND,
        )?;
        let timeout =
            self.positive(&format!("{path}.timeout"), raw.timeout.map(|d| d.0), SECOND)?;
        if timeout >= interval {
            return Err(self.err(
                &format!("{path}.timeout"),
                format!(
                    "timeout ({}) must be shorter than interval ({}): a target is probed once per interval",
                    format_duration(timeout),
                    format_duration(interval)
                ),
            ));
        }
        Ok(ActiveHealth {
            path: probe,
            interval,
            timeout,
            healthy: self.at_least_one(&format!("{path}.healthy"), raw.healthy, 2)?,
            unhealthy: self.at_least_one(&format!("{path}.unhealthy"), raw.unhealthy, 3)?,
        })
    }
}

/// An upstream target: `http(s)://host[:port]`, nothing else.
fn target_url(text: &str) -> std::result::Result<Uri, String> {
    let bad = || format!("expected a URL like \"http://127.0.0.1:9001\", got \"{text}\"");
    let uri: Uri = text.trim().parse().map_err(|_| bad())?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => {
            return Err(format!(
                "a target URL must start with http:// or https://, got \"{text}\""
            ))
        }
    }
    let authority = uri.authority().ok_or_else(bad)?;
    if authority.host().is_empty() {
        return Err(bad());
    }
    if authority.as_str().contains('@') {
        return Err(format!(
            "a target URL cannot hold credentials, got \"{}\"",
            redact(text)
        ));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "a target URL cannot have a path or query (the request's path is forwarded), got \"{text}\""
        ));
    }
    Ok(uri)
}

/// Whether two target URLs name the same server: scheme and authority,
/// ignoring case.
fn same_target(a: &Uri, b: &Uri) -> bool {
    let key = |u: &Uri| {
        (
            u.scheme_str().map(str::to_ascii_lowercase),
            u.authority().map(|a| a.as_str().to_ascii_lowercase()),
        )
    };
    key(a) == key(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_urls() {
        assert!(target_url("http://127.0.0.1:9001").is_ok());
        assert!(target_url("https://users.internal/").is_ok());
        assert!(target_url("ftp://x").is_err());
        assert!(target_url("http://x/api").is_err());
        assert!(target_url("http://x?a=1").is_err());
        assert!(target_url("http://u:p@x").is_err());
        assert!(target_url("127.0.0.1:9001").is_err());
        assert_eq!(
            target_url("not a url"),
            Err("expected a URL like \"http://127.0.0.1:9001\", got \"not a url\"".into())
        );
    }
}
