//! A route's `match:`: hosts, one path matcher (`path`, `exact` or
//! `regex`), methods and headers.

use std::net::{IpAddr, Ipv6Addr};

use http::{HeaderName, Method};

use super::{Ctx, Result};
use crate::config::raw::{Ordered, RawMatch};
use crate::config::{HeaderMatch, PathMatch};

/// A route's `match:`, validated.
pub(super) struct Matcher {
    pub(super) hosts: Vec<String>,
    pub(super) path: PathMatch,
    pub(super) methods: Vec<Method>,
    pub(super) headers: Vec<(HeaderName, HeaderMatch)>,
}

impl Ctx<'_> {
    /// The `match:` at `path`.
    pub(super) fn matcher(&self, path: &str, raw: RawMatch) -> Result<Matcher> {
        Ok(Matcher {
            hosts: self.hosts(path, raw.hosts.unwrap_or_default())?,
            path: self.path_match(path, raw.path, raw.exact, raw.regex)?,
            methods: self.methods(path, raw.methods.unwrap_or_default())?,
            headers: self.header_matches(path, raw.headers)?,
        })
    }

    /// `hosts`, lowercased, each kept once.
    fn hosts(&self, path: &str, raw: Vec<String>) -> Result<Vec<String>> {
        let mut hosts = Vec::new();
        for (k, host) in raw.into_iter().enumerate() {
            let host =
                host_pattern(&host).map_err(|m| self.err(&format!("{path}.hosts[{k}]"), m))?;
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        Ok(hosts)
    }

    /// At most one of `path` (a prefix), `exact` and `regex`.
    fn path_match(
        &self,
        path: &str,
        prefix: Option<String>,
        exact: Option<String>,
        regex: Option<String>,
    ) -> Result<PathMatch> {
        let given: Vec<&str> = [
            ("path", prefix.is_some()),
            ("exact", exact.is_some()),
            ("regex", regex.is_some()),
        ]
        .iter()
        .filter(|(_, present)| *present)
        .map(|(name, _)| *name)
        .collect();
        if given.len() > 1 {
            return Err(self.err(
                path,
                format!(
                    "`{}` and `{}` cannot be combined: use one of `path`, `exact` and `regex`",
                    given[0], given[1]
                ),
            ));
        }
        Ok(if let Some(prefix) = prefix {
            check_route_path(&prefix).map_err(|m| self.err(&format!("{path}.path"), m))?;
            PathMatch::Prefix(prefix)
        } else if let Some(exact) = exact {
            check_route_path(&exact).map_err(|m| self.err(&format!("{path}.exact"), m))?;
            PathMatch::Exact(exact)
        } else if let Some(regex) = regex {
            // Anchored: a route regex must match the whole normalised path.
            PathMatch::regex(&regex)
                .map_err(|e| self.err(&format!("{path}.regex"), regex_error(&e)))?
        } else {
            PathMatch::Any
        })
    }

    /// `methods`, uppercased, each kept once.
    fn methods(&self, path: &str, raw: Vec<String>) -> Result<Vec<Method>> {
        let mut methods: Vec<Method> = Vec::new();
        for (k, method) in raw.into_iter().enumerate() {
            let upper = method.trim().to_ascii_uppercase();
            let parsed = Method::from_bytes(upper.as_bytes())
                .ok()
                .filter(|_| !upper.is_empty())
                .ok_or_else(|| {
                    self.err(
                        &format!("{path}.methods[{k}]"),
                        format!("\"{method}\" is not an HTTP method"),
                    )
                })?;
            if !methods.contains(&parsed) {
                methods.push(parsed);
            }
        }
        Ok(methods)
    }

    /// `headers`: a value to match exactly, or `"*"` for any; each header
    /// once.
    fn header_matches(
        &self,
        path: &str,
        raw: Ordered<String>,
    ) -> Result<Vec<(HeaderName, HeaderMatch)>> {
        let mut headers = Vec::new();
        for (name, value) in raw.0 {
            let field = format!("{path}.headers.{name}");
            let header = self.header_name(&field, &name)?;
            let matcher = if value == "*" {
                HeaderMatch::Present
            } else {
                self.header_value(&field, &value)?;
                HeaderMatch::Exact(value)
            };
            if headers.iter().any(|(h, _)| *h == header) {
                return Err(self.err(&field, format!("header \"{header}\" is matched twice")));
            }
            headers.push((header, matcher));
        }
        Ok(headers)
    }
}

/// A route's host: lowercased; `*.` allowed only in front; no port.
fn host_pattern(text: &str) -> std::result::Result<String, String> {
    let host = text.trim().to_ascii_lowercase();
    let name = host.strip_prefix("*.").unwrap_or(&host);
    if name.contains('*') {
        return Err(format!(
            "a wildcard is only allowed as a leading \"*.\", got \"{text}\""
        ));
    }
    if let Some(v6) = name.strip_prefix('[') {
        let ok = v6
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<Ipv6Addr>().is_ok())
            && name.len() == host.len();
        return if ok {
            Ok(host)
        } else {
            Err(format!("\"{text}\" is not a valid host"))
        };
    }
    if name.contains(':') {
        return Err(format!(
            "hosts are matched without the port: write \"{}\", got \"{text}\"",
            name.split(':').next().unwrap_or("")
        ));
    }
    let ok = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if ok && (name.parse::<IpAddr>().is_err() || name.len() == host.len()) {
        Ok(host)
    } else {
        Err(format!("\"{text}\" is not a valid host"))
    }
}

/// A `path` or `exact` value: absolute, and in the normalised form requests
/// are matched in, or it could never match.
fn check_route_path(path: &str) -> std::result::Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("a path must start with \"/\", got \"{path}\""));
    }
    let never = path.contains("//")
        || path.contains(['?', '#'])
        || path.chars().any(|c| c.is_whitespace() || c.is_control())
        || path.split('/').any(|s| s == "." || s == "..");
    if never {
        return Err(format!(
            "\"{path}\" is not a normalised path (no \"//\", \".\" or \"..\" segments, \"?\" or \"#\"), so it could never match"
        ));
    }
    Ok(())
}

/// A regex error on one line (the crate's syntax errors span several).
fn regex_error(err: &regex::Error) -> String {
    let text = err.to_string();
    let detail = text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .unwrap_or_else(|| text.lines().next().unwrap_or(""));
    format!("invalid regex: {detail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        assert_eq!(
            host_pattern("API.Example.com"),
            Ok("api.example.com".into())
        );
        assert_eq!(host_pattern("*.example.com"), Ok("*.example.com".into()));
        assert_eq!(host_pattern("127.0.0.1"), Ok("127.0.0.1".into()));
        assert_eq!(host_pattern("[::1]"), Ok("[::1]".into()));
        assert!(host_pattern("a.*.com").is_err());
        assert!(host_pattern("*").is_err());
        assert!(host_pattern("*example.com").is_err());
        assert!(host_pattern("a..b").is_err());
        assert_eq!(
            host_pattern("api.example.com:8443"),
            Err("hosts are matched without the port: write \"api.example.com\", got \"api.example.com:8443\"".into())
        );
    }

    #[test]
    fn route_paths() {
        assert!(check_route_path("/").is_ok());
        assert!(check_route_path("/users").is_ok());
        assert!(check_route_path("/users/").is_ok());
        assert!(check_route_path("users").is_err());
        assert!(check_route_path("/a//b").is_err());
        assert!(check_route_path("/a/../b").is_err());
        assert!(check_route_path("/a?x").is_err());
    }
}
