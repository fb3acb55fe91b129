//! Route matchers: hosts, paths, methods and headers (docs/configuration/routes.md).
//!
//! Everything here is compiled once per config generation and then only
//! compared against, without allocating, on every request.

use std::borrow::Cow;

use http::{HeaderMap, HeaderName, Method};

use crate::config::{HeaderMatch, PathMatch};

/// One compiled host pattern, lowercase and without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// The whole name (`api.example.com`, or an IP literal without brackets).
    Exact(String),
    /// `*.example.com`, held as `.example.com`: any name ending in it.
    Suffix(String),
}

/// The `hosts` matcher of a route.
///
/// Case-insensitive; the port and a trailing dot of the request's host are
/// ignored; `*.example.com` matches any name ending in `.example.com` (at
/// any depth) but not `example.com` itself. No patterns, or a `*` pattern,
/// matches any host.
#[derive(Debug, Clone, Default)]
pub struct HostMatcher {
    patterns: Vec<HostPattern>,
    any: bool,
}

impl HostMatcher {
    /// Compile host patterns as written in the config.
    pub fn new(patterns: &[String]) -> Self {
        let mut out = Vec::with_capacity(patterns.len());
        let mut any = patterns.is_empty();
        for p in patterns {
            let p = p.trim().to_ascii_lowercase();
            if p == "*" {
                any = true;
            } else if let Some(suffix) = p.strip_prefix('*') {
                // `*example.com` is read as `*.example.com`: a wildcard only
                // ever stands for whole labels, never `badexample.com`.
                let suffix = suffix.trim_start_matches('.').trim_end_matches('.');
                out.push(HostPattern::Suffix(format!(".{suffix}")));
            } else {
                out.push(HostPattern::Exact(
                    bare_host(&p).trim_end_matches('.').to_string(),
                ));
            }
        }
        HostMatcher { patterns: out, any }
    }

    /// Whether this matcher accepts every host (and a request without one).
    pub fn is_any(&self) -> bool {
        self.any
    }

    /// Whether `host` (a Host header or `:authority`, port allowed) matches.
    pub fn matches(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let host = bare_host(host);
        let host = host.strip_suffix('.').unwrap_or(host).as_bytes();
        self.patterns.iter().any(|p| match p {
            HostPattern::Exact(name) => host.eq_ignore_ascii_case(name.as_bytes()),
            HostPattern::Suffix(suffix) => {
                // Strictly longer: `*.example.com` does not match `example.com`
                // (nor `.example.com`, which has an empty first label).
                host.len() > suffix.len()
                    && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
            }
        })
    }
}

/// The host without its port, and an IPv6 literal without its brackets
/// (`[::1]:80` -> `::1`, `Example.com:8443` -> `Example.com`).
fn bare_host(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.find(']') {
            Some(end) => &rest[..end],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        // Only one colon: name:port. More than one is an unbracketed IPv6
        // literal (invalid in a Host, but not worth a panic): keep it whole.
        Some((name, _)) if !name.contains(':') => name,
        _ => host,
    }
}

/// Whether `path` (already normalised) matches `m`.
///
/// - `Prefix` matches on a segment boundary: `/users` matches `/users`,
///   `/users/` and `/users/7`, not `/usersx`. Trailing slashes of the prefix
///   are ignored, so `/api/` behaves like `/api` (it also matches `/api`),
///   and `/` matches every path.
/// - `Exact` is the whole path; a trailing slash is significant.
/// - `Regex` must match the whole path. The caller compiles it anchored
///   (see [`PathMatch::regex`]); this function only calls `is_match`, because
///   checking the span of `find` would be wrong for alternations (`a|ab`).
pub fn path_matches(m: &PathMatch, path: &str) -> bool {
    match m {
        PathMatch::Any => true,
        PathMatch::Prefix(prefix) => prefix_rest(prefix, path).is_some(),
        PathMatch::Exact(exact) => path == exact,
        PathMatch::Regex(re) => re.is_match(path),
    }
}

/// What is left of `path` after a segment-boundary `prefix`, if it matches.
/// The rest is empty or starts with `/`.
fn prefix_rest<'a>(prefix: &str, path: &'a str) -> Option<&'a str> {
    let prefix = prefix.trim_end_matches('/');
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// `path` with a matched `Prefix` removed (for `strip_prefix: true`).
///
/// The result keeps its leading `/` (`/users/7` minus `/users` is `/7`) and
/// an empty result becomes `/`. Other matchers, and a path the prefix does
/// not match, leave the path unchanged. Never allocates today; `Cow` keeps
/// the door open for rewrites that would.
pub fn strip_prefix<'a>(m: &PathMatch, path: &'a str) -> Cow<'a, str> {
    match m {
        PathMatch::Prefix(prefix) => match prefix_rest(prefix, path) {
            Some("") => Cow::Borrowed("/"),
            Some(rest) => Cow::Borrowed(rest),
            None => Cow::Borrowed(path),
        },
        _ => Cow::Borrowed(path),
    }
}

/// All the matchers of one route; the route matches when every one holds.
#[derive(Debug, Clone)]
pub struct RequestMatcher {
    /// The `hosts` patterns.
    pub hosts: HostMatcher,
    /// The path matcher (`PathMatch::Any` when the route has none).
    pub path: PathMatch,
    /// Allowed methods; empty means any.
    pub methods: Vec<Method>,
    /// Required headers: each must have a value that matches.
    pub headers: Vec<(HeaderName, HeaderMatch)>,
}

impl RequestMatcher {
    /// Whether a request matches. `host` is the Host header or `:authority`
    /// (a request without one matches only a route that accepts any host);
    /// `path` is the normalised path.
    pub fn matches(
        &self,
        host: Option<&str>,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> bool {
        // Cheapest checks first; a regex path and the header scan last.
        (self.methods.is_empty() || self.methods.contains(method))
            && match host {
                Some(h) => self.hosts.matches(h),
                None => self.hosts.is_any(),
            }
            && path_matches(&self.path, path)
            && self
                .headers
                .iter()
                .all(|(name, m)| header_matches(headers, name, m))
    }
}

/// A header matcher holds if any value of the header (any of its lines)
/// fits: `Present` needs one line, `Exact` one line equal byte for byte.
fn header_matches(headers: &HeaderMap, name: &HeaderName, m: &HeaderMatch) -> bool {
    match m {
        HeaderMatch::Present => headers.contains_key(name),
        HeaderMatch::Exact(want) => headers
            .get_all(name)
            .iter()
            .any(|v| v.as_bytes() == want.as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn hosts(p: &[&str]) -> HostMatcher {
        HostMatcher::new(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn host_exact_is_case_insensitive_and_ignores_port_and_dot() {
        let m = hosts(&["api.example.com"]);
        for h in [
            "api.example.com",
            "API.Example.COM",
            "API.example.com:8443",
            "api.example.com.",
            "api.example.com.:80",
        ] {
            assert!(m.matches(h), "{h}");
        }
        for h in ["example.com", "xapi.example.com", "api.example.co", ""] {
            assert!(!m.matches(h), "{h}");
        }
        assert!(!m.is_any());
    }

    #[test]
    fn host_wildcard_matches_subdomains_only() {
        let m = hosts(&["*.Example.com"]);
        assert!(m.matches("a.example.com"));
        assert!(m.matches("a.b.EXAMPLE.com:443"));
        assert!(!m.matches("example.com"));
        assert!(!m.matches(".example.com"));
        assert!(!m.matches("badexample.com"));
        assert!(!m.matches("a.example.com.evil"));
        let m = hosts(&["*example.com."]);
        assert!(m.matches("a.example.com."));
        assert!(!m.matches("badexample.com"));
    }

    #[test]
    fn host_ipv6_literals() {
        let m = hosts(&["[::1]"]);
        assert!(m.matches("[::1]:80"));
        assert!(m.matches("[::1]"));
        assert!(!m.matches("[::2]:80"));
        let m = hosts(&["127.0.0.1"]);
        assert!(m.matches("127.0.0.1:8080"));
        // Garbage does not panic.
        assert!(!m.matches("[::1"));
        assert!(!m.matches(":::"));
    }

    #[test]
    fn no_patterns_or_star_is_any() {
        assert!(hosts(&[]).is_any());
        assert!(hosts(&[]).matches("whatever"));
        assert!(hosts(&["a.com", "*"]).is_any());
    }

    #[test]
    fn prefix_matches_on_segment_boundary() {
        let m = PathMatch::Prefix("/users".into());
        for p in ["/users", "/users/", "/users/7", "/users/7/x"] {
            assert!(path_matches(&m, p), "{p}");
        }
        for p in ["/usersx", "/user", "/", "/Users"] {
            assert!(!path_matches(&m, p), "{p}");
        }
    }

    #[test]
    fn prefix_root_and_trailing_slash() {
        let root = PathMatch::Prefix("/".into());
        assert!(path_matches(&root, "/"));
        assert!(path_matches(&root, "/anything/at/all"));
        let api = PathMatch::Prefix("/api/".into());
        assert!(path_matches(&api, "/api"));
        assert!(path_matches(&api, "/api/"));
        assert!(path_matches(&api, "/api/v1"));
        assert!(!path_matches(&api, "/apix"));
    }

    #[test]
    fn exact_and_regex() {
        let m = PathMatch::Exact("/login".into());
        assert!(path_matches(&m, "/login"));
        assert!(!path_matches(&m, "/login/"));
        assert!(!path_matches(&m, "/login/x"));
        let re = PathMatch::regex("/v[0-9]+/items|/v[0-9]+/items/x").unwrap();
        assert!(path_matches(&re, "/v2/items"));
        assert!(path_matches(&re, "/v2/items/x"));
        assert!(!path_matches(&re, "/x/v2/items"));
        assert!(!path_matches(&re, "/v2/items/y"));
        assert!(path_matches(&PathMatch::Any, "/whatever"));
    }

    #[test]
    fn strip_prefix_keeps_leading_slash() {
        let m = PathMatch::Prefix("/users".into());
        assert_eq!(strip_prefix(&m, "/users/7"), "/7");
        assert_eq!(strip_prefix(&m, "/users"), "/");
        assert_eq!(strip_prefix(&m, "/users/"), "/");
        assert_eq!(strip_prefix(&m, "/other"), "/other");
        let api = PathMatch::Prefix("/api/".into());
        assert_eq!(strip_prefix(&api, "/api/v1/x"), "/v1/x");
        let root = PathMatch::Prefix("/".into());
        assert_eq!(strip_prefix(&root, "/a/b"), "/a/b");
        assert_eq!(strip_prefix(&PathMatch::Exact("/a".into()), "/a"), "/a");
    }

    fn matcher() -> RequestMatcher {
        RequestMatcher {
            hosts: hosts(&["api.example.com"]),
            path: PathMatch::Prefix("/users".into()),
            methods: vec![Method::GET, Method::POST],
            headers: vec![
                (
                    HeaderName::from_static("x-version"),
                    HeaderMatch::Exact("2".into()),
                ),
                (HeaderName::from_static("x-tenant"), HeaderMatch::Present),
            ],
        }
    }

    fn hm(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn request_matcher_needs_every_part() {
        let m = matcher();
        let ok = hm(&[("x-version", "2"), ("x-tenant", "")]);
        let host = Some("api.example.com");
        assert!(m.matches(host, &Method::GET, "/users/7", &ok));
        assert!(!m.matches(host, &Method::DELETE, "/users/7", &ok));
        assert!(!m.matches(Some("other.com"), &Method::GET, "/users/7", &ok));
        assert!(!m.matches(None, &Method::GET, "/users/7", &ok));
        assert!(!m.matches(host, &Method::GET, "/usersx", &ok));
        assert!(!m.matches(host, &Method::GET, "/users", &hm(&[("x-version", "2")])));
        assert!(!m.matches(
            host,
            &Method::GET,
            "/users",
            &hm(&[("x-version", "20"), ("x-tenant", "a")])
        ));
    }

    #[test]
    fn header_match_any_line() {
        let m = matcher();
        let h = hm(&[("x-version", "1"), ("x-version", "2"), ("x-tenant", "t")]);
        assert!(m.matches(Some("api.example.com"), &Method::POST, "/users", &h));
    }

    #[test]
    fn no_host_matches_only_any_host_routes() {
        let m = RequestMatcher {
            hosts: hosts(&[]),
            path: PathMatch::Any,
            methods: vec![],
            headers: vec![],
        };
        assert!(m.matches(None, &Method::PATCH, "/x", &HeaderMap::new()));
    }
}
