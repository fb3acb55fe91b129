//! The gateway most tests need: one route, answering by itself or proxying
//! to one upstream, under the limits the test is about, with the server,
//! admin and store keys it sets. Built as a config template
//! ([`OneRoute::config`]) or started ([`OneRoute::start`]):
//!
//! ```ignore
//! let echo = Echo::start("e").await;
//! let gw = OneRoute::new()
//!     .upstream(&echo)
//!     .limit("fw", "{ algorithm: fixed_window, limit: 3, window: 1m }")
//!     .server(r#"trusted_proxies: ["127.0.0.2/32"]"#)
//!     .start()
//!     .await;
//! ```
//!
//! Every key a test does not set is left to the gateway's default but for
//! the route: `r` on `{ path: / }`, answering `{ status: 200 }`.

use super::{dedent, head, indent, Echo, Gateway};

/// A one-route gateway config being built; see the module.
#[derive(Clone, Debug)]
#[must_use]
pub struct OneRoute {
    /// The items of `server.listen`.
    listen: String,
    server: String,
    admin: String,
    store: Option<String>,
    /// The upstream's name, targets (a YAML list) and other keys.
    upstream: Option<(String, String, String)>,
    /// Every limit, and whether the route is under it.
    limits: Vec<(String, String, bool)>,
    name: String,
    matcher: String,
    /// `respond: ...` or `upstream: ...`.
    action: String,
    route_keys: String,
    /// Routes after the one, as YAML list items.
    more_routes: String,
}

impl Default for OneRoute {
    fn default() -> OneRoute {
        OneRoute {
            listen: "\"@LISTEN@\"".into(),
            server: String::new(),
            admin: String::new(),
            store: None,
            upstream: None,
            limits: Vec::new(),
            name: "r".into(),
            matcher: "{ path: / }".into(),
            action: "respond: { status: 200 }".into(),
            route_keys: String::new(),
            more_routes: String::new(),
        }
    }
}

impl OneRoute {
    /// Route `r` on `{ path: / }`, answering `{ status: 200 }` itself.
    pub fn new() -> OneRoute {
        OneRoute::default()
    }

    /// The route's name.
    pub fn named(mut self, name: &str) -> OneRoute {
        self.name = name.into();
        self
    }

    /// The route's `match` (a flow map).
    pub fn matching(mut self, matcher: &str) -> OneRoute {
        self.matcher = matcher.into();
        self
    }

    /// The route answers `respond` (a flow map) itself.
    pub fn respond(mut self, respond: &str) -> OneRoute {
        self.action = format!("respond: {respond}");
        self
    }

    /// More keys of the route (`strip_prefix: true`...), one a line.
    pub fn route_keys(mut self, keys: &str) -> OneRoute {
        self.route_keys.push_str(&dedent(keys));
        self
    }

    /// Route `all` on `{ path: / }` to upstream `e`: `echo`, never retried
    /// (so it counts exactly what clients sent).
    pub fn proxy(echo: &Echo) -> OneRoute {
        OneRoute::new()
            .named("all")
            .upstream(echo)
            .upstream_keys("retries: 0")
    }

    /// The route proxies to upstream `e`: `echo`, every other key left to
    /// the gateway's default.
    pub fn upstream(self, echo: &Echo) -> OneRoute {
        self.upstream_at("e", &targets(&[echo]))
    }

    /// The route proxies to upstream `name` with `targets` (a YAML list),
    /// every other key left to the gateway's default.
    pub fn upstream_at(mut self, name: &str, targets: &str) -> OneRoute {
        self.upstream = Some((name.into(), targets.into(), String::new()));
        self.action = format!("upstream: {name}");
        self
    }

    /// More keys of the upstream (`timeout: 60s`...), one a line.
    pub fn upstream_keys(mut self, keys: &str) -> OneRoute {
        let (_, _, more) = self
            .upstream
            .as_mut()
            .expect("upstream_keys after upstream or upstream_at");
        more.push_str(&dedent(keys));
        self
    }

    /// Limit `name` (`spec`: a flow map, or block lines), which the route
    /// is under.
    pub fn limit(mut self, name: &str, spec: &str) -> OneRoute {
        self.limits.push((name.into(), spec.into(), true));
        self
    }

    /// Limit `name`, which the route is not under (for [`OneRoute::route`]).
    pub fn define(mut self, name: &str, spec: &str) -> OneRoute {
        self.limits.push((name.into(), spec.into(), false));
        self
    }

    /// Another route after the one (a flow map).
    pub fn route(mut self, route: &str) -> OneRoute {
        self.more_routes.push_str(&format!("  - {route}\n"));
        self
    }

    /// The items of `server.listen` (`"@LISTEN@"` unless set).
    pub fn listen(mut self, items: &str) -> OneRoute {
        self.listen = items.into();
        self
    }

    /// More `server:` keys, one a line.
    pub fn server(mut self, keys: &str) -> OneRoute {
        self.server.push_str(&dedent(keys));
        self
    }

    /// More `admin:` keys, one a line.
    pub fn admin(mut self, keys: &str) -> OneRoute {
        self.admin.push_str(&dedent(keys));
        self
    }

    /// `store:` (a flow map).
    pub fn store(mut self, store: &str) -> OneRoute {
        self.store = Some(store.into());
        self
    }

    /// The config template (placeholders for [`Gateway`] to fill).
    pub fn config(&self) -> String {
        let mut out = head(&self.listen, &self.server, &self.admin);
        if let Some(store) = &self.store {
            out.push_str(&format!("store: {store}\n"));
        }
        if let Some((name, targets, keys)) = &self.upstream {
            out.push_str(&format!(
                "upstreams:\n  {name}:\n    targets: {targets}\n{}",
                indent(keys, 4)
            ));
        }
        if !self.limits.is_empty() {
            out.push_str("limits:\n");
            for (name, spec, _) in &self.limits {
                if spec.trim_start().starts_with('{') {
                    out.push_str(&format!("  {name}: {spec}\n"));
                } else {
                    out.push_str(&format!("  {name}:\n{}", indent(&dedent(spec), 4)));
                }
            }
        }
        out.push_str(&format!(
            "routes:\n  - name: {}\n    match: {}\n    {}\n{}",
            self.name,
            self.matcher,
            self.action,
            indent(&self.route_keys, 4)
        ));
        let under: Vec<&str> = self
            .limits
            .iter()
            .filter(|(_, _, on_route)| *on_route)
            .map(|(name, _, _)| name.as_str())
            .collect();
        if !under.is_empty() {
            out.push_str(&format!("    limits: [{}]\n", under.join(", ")));
        }
        out.push_str(&self.more_routes);
        out
    }

    /// Starts the gateway and waits until it is ready.
    pub async fn start(&self) -> Gateway {
        Gateway::start(&self.config()).await
    }

    /// [`OneRoute::start`] with exactly `workers` worker threads.
    pub async fn start_workers(&self, workers: usize) -> Gateway {
        Gateway::start_workers(&self.config(), workers).await
    }
}

/// The URLs of `echoes` as a YAML list, for [`OneRoute::upstream_at`].
pub fn targets(echoes: &[&Echo]) -> String {
    let urls: Vec<String> = echoes.iter().map(|e| format!("\"{}\"", e.url())).collect();
    format!("[{}]", urls.join(", "))
}
