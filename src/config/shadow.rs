//! Routes that can never match because an earlier route takes every request
//! they could. Conservative: a warning means the later route is certainly
//! unreachable; silence proves nothing (regexes are only compared with
//! catch-alls).

use super::model::RouteConfig;
use super::{HeaderMatch, PathMatch};

/// One warning per unreachable route, naming the first earlier route that
/// covers it: `route "b" (line 30) is shadowed by route "a" (line 12)`.
pub fn warnings_for_shadowed_routes(routes: &[RouteConfig]) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, later) in routes.iter().enumerate() {
        if let Some(earlier) = routes[..i].iter().find(|e| covers(e, later)) {
            warnings.push(format!(
                "route \"{}\" (line {}) is shadowed by route \"{}\" (line {})",
                later.name, later.line, earlier.name, earlier.line
            ));
        }
    }
    warnings
}

/// Whether every request `b` matches is matched by `a`.
fn covers(a: &RouteConfig, b: &RouteConfig) -> bool {
    if let PathMatch::Regex(_) = b.path {
        return is_catch_all(a);
    }
    hosts_cover(&a.hosts, &b.hosts)
        && path_covers(&a.path, &b.path)
        && (a.methods.is_empty()
            || (!b.methods.is_empty() && b.methods.iter().all(|m| a.methods.contains(m))))
        && a.headers.iter().all(|(name, want)| {
            b.headers
                .iter()
                .any(|(n, have)| n == name && header_implies(have, want))
        })
}

/// No matcher at all (or only `path: /`).
fn is_catch_all(route: &RouteConfig) -> bool {
    route.hosts.is_empty()
        && route.methods.is_empty()
        && route.headers.is_empty()
        && match &route.path {
            PathMatch::Any => true,
            PathMatch::Prefix(p) => p == "/",
            _ => false,
        }
}

fn hosts_cover(a: &[String], b: &[String]) -> bool {
    if a.is_empty() {
        return true;
    }
    !b.is_empty()
        && b.iter()
            .all(|h| a.iter().any(|pattern| host_covers(pattern, h)))
}

/// Whether host pattern `a` matches every host pattern `b` does.
fn host_covers(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match a.strip_prefix("*.") {
        // `*.x` covers `y.x` and `*.y.x`, never `x` itself.
        Some(suffix) => {
            let b_name = b.strip_prefix("*.").unwrap_or(b);
            b_name.len() > suffix.len()
                && b_name.ends_with(suffix)
                && b_name[..b_name.len() - suffix.len()].ends_with('.')
        }
        None => false,
    }
}

fn path_covers(a: &PathMatch, b: &PathMatch) -> bool {
    match (a, b) {
        (PathMatch::Any, _) => true,
        (PathMatch::Prefix(p), _) if p == "/" => true,
        (PathMatch::Prefix(p), PathMatch::Prefix(q)) => prefix_matches(p, q),
        (PathMatch::Prefix(p), PathMatch::Exact(e)) => prefix_matches(p, e),
        (PathMatch::Exact(x), PathMatch::Exact(y)) => x == y,
        _ => false,
    }
}

/// Whether prefix `p` matches `path` (on a segment boundary), and so every
/// path under it.
fn prefix_matches(p: &str, path: &str) -> bool {
    match path.strip_prefix(p) {
        Some(rest) => rest.is_empty() || rest.starts_with('/') || p.ends_with('/'),
        None => false,
    }
}

/// Whether a header that satisfies `have` always satisfies `want`.
fn header_implies(have: &HeaderMatch, want: &HeaderMatch) -> bool {
    match (have, want) {
        (_, HeaderMatch::Present) => true,
        (HeaderMatch::Exact(x), HeaderMatch::Exact(y)) => x == y,
        (HeaderMatch::Present, HeaderMatch::Exact(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::{LimitResponse, RouteAction};
    use http::{HeaderName, Method};

    fn route(name: &str, line: usize, path: PathMatch) -> RouteConfig {
        RouteConfig {
            name: name.into(),
            hosts: vec![],
            path,
            methods: vec![],
            headers: vec![],
            action: RouteAction::Upstream("u".into()),
            auth: None,
            strip_prefix: false,
            rewrite_location: true,
            preserve_host: true,
            timeout: None,
            limits: vec![],
            limit_response: LimitResponse::default(),
            line,
        }
    }

    fn prefix(p: &str) -> PathMatch {
        PathMatch::Prefix(p.into())
    }

    fn regex(r: &str) -> PathMatch {
        PathMatch::Regex(regex::Regex::new(r).expect("regex"))
    }

    #[test]
    fn catch_all_shadows_everything_after_it() {
        let routes = vec![
            route("all", 1, PathMatch::Any),
            route("users", 5, prefix("/users")),
            route("re", 9, regex("^/x$")),
        ];
        assert_eq!(
            warnings_for_shadowed_routes(&routes),
            vec![
                "route \"users\" (line 5) is shadowed by route \"all\" (line 1)",
                "route \"re\" (line 9) is shadowed by route \"all\" (line 1)",
            ]
        );
    }

    #[test]
    fn prefixes_on_segment_boundaries() {
        let routes = vec![
            route("users", 1, prefix("/users")),
            route("sub", 2, prefix("/users/7")),
            route("exact", 3, PathMatch::Exact("/users".into())),
            route("other", 4, prefix("/usersx")),
            route("broader", 5, prefix("/")),
        ];
        let w = warnings_for_shadowed_routes(&routes);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("route \"sub\""));
        assert!(w[1].starts_with("route \"exact\""));
    }

    #[test]
    fn narrower_earlier_routes_do_not_shadow() {
        let mut a = route("a", 1, prefix("/api"));
        a.methods = vec![Method::GET];
        a.hosts = vec!["api.example.com".into()];
        a.headers = vec![(
            HeaderName::from_static("x-version"),
            HeaderMatch::Exact("2".into()),
        )];
        let mut b = route("b", 2, prefix("/api/v2"));
        b.methods = vec![Method::GET, Method::POST];
        b.hosts = vec!["api.example.com".into()];
        b.headers = a.headers.clone();
        assert!(warnings_for_shadowed_routes(&[a.clone(), b.clone()]).is_empty());
        b.methods = vec![Method::GET];
        assert_eq!(
            warnings_for_shadowed_routes(&[a.clone(), b.clone()]).len(),
            1
        );
        b.headers = vec![];
        assert!(warnings_for_shadowed_routes(&[a, b]).is_empty());
    }

    #[test]
    fn wildcard_hosts() {
        let mut a = route("a", 1, PathMatch::Any);
        a.hosts = vec!["*.example.com".into()];
        let mut b = route("b", 2, PathMatch::Any);
        b.hosts = vec!["api.example.com".into(), "*.eu.example.com".into()];
        assert_eq!(
            warnings_for_shadowed_routes(&[a.clone(), b.clone()]).len(),
            1
        );
        b.hosts = vec!["example.com".into()];
        assert!(warnings_for_shadowed_routes(&[a.clone(), b.clone()]).is_empty());
        b.hosts = vec![];
        assert!(warnings_for_shadowed_routes(&[a, b]).is_empty());
    }

    #[test]
    fn regex_routes_only_by_catch_alls() {
        let a = route("a", 1, prefix("/v1"));
        let b = route("b", 2, regex("^/v1/x$"));
        assert!(warnings_for_shadowed_routes(&[a, b.clone()]).is_empty());
        let mut c = route("c", 1, prefix("/"));
        c.methods = vec![Method::GET];
        assert!(warnings_for_shadowed_routes(&[c, b]).is_empty());
    }

    #[test]
    fn present_header_is_implied_by_exact() {
        let mut a = route("a", 1, PathMatch::Any);
        a.headers = vec![(HeaderName::from_static("x-k"), HeaderMatch::Present)];
        let mut b = route("b", 2, PathMatch::Any);
        b.headers = vec![(
            HeaderName::from_static("x-k"),
            HeaderMatch::Exact("v".into()),
        )];
        assert_eq!(
            warnings_for_shadowed_routes(&[a.clone(), b.clone()]).len(),
            1
        );
        assert!(warnings_for_shadowed_routes(&[b, a]).is_empty());
    }
}
