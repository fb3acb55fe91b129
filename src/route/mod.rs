//! Routing: the path normaliser and the route table (docs/configuration/routes.md).
//!
//! The pipeline normalises the path first ([`normalise::normalise_path`]),
//! then asks the [`Router`] for the first route whose matchers all hold.

pub mod matcher;
pub mod normalise;

use http::{HeaderMap, Method};

use matcher::RequestMatcher;

/// The compiled route table of one config generation: matchers in file
/// order, each with its route (`T`: the runtime's compiled route).
///
/// A linear scan: route tables are short, and each matcher is compiled so a
/// miss costs a few byte comparisons.
#[derive(Debug, Clone)]
pub struct Router<T> {
    routes: Vec<(RequestMatcher, T)>,
}

impl<T> Default for Router<T> {
    fn default() -> Self {
        Router { routes: Vec::new() }
    }
}

impl<T> Router<T> {
    /// Build the table from `(matcher, route)` pairs in the order they are
    /// tried.
    pub fn new(routes: Vec<(RequestMatcher, T)>) -> Router<T> {
        Router { routes }
    }

    /// The first route that matches the request, if any. `path` must
    /// already be normalised.
    pub fn find(
        &self,
        host: Option<&str>,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Option<&T> {
        self.routes
            .iter()
            .find(|(m, _)| m.matches(host, method, path, headers))
            .map(|(_, route)| route)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PathMatch;
    use matcher::HostMatcher;

    fn route(hosts: &[&str], path: PathMatch) -> RequestMatcher {
        RequestMatcher {
            hosts: HostMatcher::new(&hosts.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            path,
            methods: vec![],
            headers: vec![],
        }
    }

    #[test]
    fn first_match_wins() {
        let r = Router::new(vec![
            (
                route(&["api.example.com"], PathMatch::Prefix("/users".into())),
                0,
            ),
            (route(&[], PathMatch::Exact("/users/me".into())), 1),
            (route(&[], PathMatch::Prefix("/".into())), 2),
        ]);
        let h = HeaderMap::new();
        let get = Method::GET;
        assert_eq!(
            r.find(Some("api.example.com"), &get, "/users/me", &h),
            Some(&0)
        );
        assert_eq!(r.find(Some("other"), &get, "/users/me", &h), Some(&1));
        assert_eq!(r.find(None, &get, "/users/me", &h), Some(&1));
        assert_eq!(r.find(None, &get, "/x", &h), Some(&2));
    }

    #[test]
    fn no_match_is_none() {
        let r = Router::new(vec![(route(&[], PathMatch::Exact("/a".into())), ())]);
        assert_eq!(r.find(None, &Method::GET, "/b", &HeaderMap::new()), None);
        let empty: Router<()> = Router::default();
        assert_eq!(empty.find(None, &Method::GET, "/", &HeaderMap::new()), None);
    }
}
