//! Routing: the path normaliser and the route table (SPEC §3).
//!
//! The pipeline normalises the path first ([`normalise::normalise_path`]),
//! then asks the [`Router`] for the first route whose matchers all hold.

pub mod matcher;
pub mod normalise;

use http::{HeaderMap, Method};

use matcher::RequestMatcher;

/// The compiled route table of one config generation: matchers in file
/// order, each with the index of its route in the config.
///
/// A linear scan: route tables are short, and each matcher is compiled so a
/// miss costs a few byte comparisons.
#[derive(Debug, Clone, Default)]
pub struct Router {
    routes: Vec<(RequestMatcher, usize)>,
}

impl Router {
    /// Build the table; the matcher at position `i` belongs to route `i`.
    pub fn new(matchers: Vec<RequestMatcher>) -> Router {
        Router {
            routes: matchers
                .into_iter()
                .enumerate()
                .map(|(i, m)| (m, i))
                .collect(),
        }
    }

    /// The index of the first route that matches the request, if any.
    /// `path` must already be normalised.
    pub fn find(
        &self,
        host: Option<&str>,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Option<usize> {
        self.routes
            .iter()
            .find(|(m, _)| m.matches(host, method, path, headers))
            .map(|&(_, i)| i)
    }

    /// The number of routes.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether there are no routes (every request is a 404).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The matchers in order, for `tollgate check`'s shadowing warnings.
    pub fn matchers(&self) -> impl Iterator<Item = &RequestMatcher> {
        self.routes.iter().map(|(m, _)| m)
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
            route(&["api.example.com"], PathMatch::Prefix("/users".into())),
            route(&[], PathMatch::Exact("/users/me".into())),
            route(&[], PathMatch::Prefix("/".into())),
        ]);
        let h = HeaderMap::new();
        let get = Method::GET;
        assert_eq!(
            r.find(Some("api.example.com"), &get, "/users/me", &h),
            Some(0)
        );
        assert_eq!(r.find(Some("other"), &get, "/users/me", &h), Some(1));
        assert_eq!(r.find(None, &get, "/users/me", &h), Some(1));
        assert_eq!(r.find(None, &get, "/x", &h), Some(2));
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn no_match_is_none() {
        let r = Router::new(vec![route(&[], PathMatch::Exact("/a".into()))]);
        assert_eq!(r.find(None, &Method::GET, "/b", &HeaderMap::new()), None);
        assert!(Router::default().is_empty());
    }
}
