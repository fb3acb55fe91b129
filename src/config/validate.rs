//! Raw (as written) -> validated config: defaults, ranges, cross references,
//! duplicates and exclusive fields. Every error names its field path, and the
//! line and column found through `Positions`.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use http::uri::PathAndQuery;
use http::{HeaderName, HeaderValue, Method, StatusCode, Uri};
use tollgate_limit::algorithm::{
    self as algo, concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window,
    token_bucket, ParamError,
};

use super::error::ConfigError;
use super::model::*;
use super::positions::Positions;
use super::raw::*;
use super::template::Template;
use super::units::{format_duration, Rate, Window};
use super::{HeaderMatch, PathMatch};

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
    };
    let server = ctx.server(raw.server.unwrap_or_default())?;
    let admin = ctx.admin(raw.admin.unwrap_or_default(), &server)?;
    let store = ctx.store(raw.store.unwrap_or_default())?;
    let upstreams = ctx.upstreams(raw.upstreams)?;
    let mut limits = ctx.policies(raw.limits)?;
    let policy_count = limits.len();
    let routes = ctx.routes(
        raw.routes.unwrap_or_default(),
        &server,
        &upstreams,
        &mut limits,
    )?;

    for upstream in &upstreams {
        let used = routes
            .iter()
            .any(|r| matches!(&r.action, RouteAction::Upstream(u) if *u == upstream.name));
        if !used {
            ctx.warnings.push(format!(
                "upstream \"{}\" is not used by any route",
                upstream.name
            ));
        }
    }
    for limit in &limits[..policy_count] {
        if !routes.iter().any(|r| r.limits.contains(&limit.name)) {
            ctx.warnings
                .push(format!("limit \"{}\" is not used by any route", limit.name));
        }
    }
    if routes.is_empty() {
        ctx.warnings
            .push("no routes: every request is answered 404".to_owned());
    }

    let config = Config {
        server,
        admin,
        store,
        upstreams,
        limits,
        routes,
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

    /// `path` as written, or relative to the config file's directory.
    fn resolve(&self, path: std::path::PathBuf) -> std::path::PathBuf {
        if path.is_absolute() {
            path
        } else {
            self.base_dir.join(path)
        }
    }

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

    // ----- server, admin, store -----

    fn server(&mut self, raw: RawServer) -> Result<ServerConfig> {
        let listen: Vec<SocketAddr> = match raw.listen {
            None => vec![SocketAddr::from(([0, 0, 0, 0], 8080))],
            Some(list) => list.into_iter().map(|a| a.0).collect(),
        };
        let tls = match raw.tls {
            None => None,
            Some(tls) => Some(self.server_tls(tls)?),
        };
        if listen.is_empty() && tls.is_none() {
            return Err(self.err("server.listen", "at least one listener is required"));
        }
        let mut seen: Vec<(String, SocketAddr)> = Vec::new();
        let tls_addrs = tls.iter().flat_map(|t| t.listen.iter().enumerate());
        let all = listen
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("server.listen[{i}]"), *a))
            .chain(tls_addrs.map(|(i, a)| (format!("server.tls.listen[{i}]"), *a)));
        for (field, addr) in all {
            if let Some((other, _)) = seen.iter().find(|(_, a)| overlaps(*a, addr)) {
                return Err(self.err(&field, format!("{addr} is already a listener ({other})")));
            }
            seen.push((field, addr));
        }

        let ipv6_prefix = raw.ipv6_prefix.unwrap_or(64);
        if ipv6_prefix > 128 {
            return Err(self.err(
                "server.ipv6_prefix",
                format!("ipv6_prefix must be between 0 and 128, got {ipv6_prefix}"),
            ));
        }
        let timeouts = raw.timeouts.unwrap_or_default();
        let limit_response = match raw.limit_response {
            Some(r) => {
                self.limit_response("server.limit_response", r, &LimitResponse::default())?
            }
            None => LimitResponse::default(),
        };
        let header_read_timeout = self.positive(
            "server.timeouts.header_read",
            timeouts.header_read.map(|d| d.0),
            10 * SECOND,
        )?;
        let idle_timeout = self.positive(
            "server.timeouts.idle",
            timeouts.idle.map(|d| d.0),
            60 * SECOND,
        )?;
        let body_read_timeout = self.positive(
            "server.timeouts.body_read",
            timeouts.body_read.map(|d| d.0),
            30 * SECOND,
        )?;
        let send_timeout = self.positive(
            "server.timeouts.send",
            timeouts.send.map(|d| d.0),
            60 * SECOND,
        )?;
        let max_header = raw.max_header_bytes.map_or(16 * 1024, |s| s.0);
        if max_header == 0 {
            return Err(self.err(
                "server.max_header_bytes",
                "max_header_bytes must be greater than 0",
            ));
        }
        let max_header_bytes = usize::try_from(max_header)
            .map_err(|_| self.err("server.max_header_bytes", "max_header_bytes is too large"))?;
        let max_body_bytes = raw.max_body_bytes.map(|s| s.0).filter(|n| *n > 0);
        let max_connections =
            self.at_least_one("server.max_connections", raw.max_connections, 10_000)?;
        Ok(ServerConfig {
            listen,
            tls,
            limit_response,
            trusted_proxies: cidrs(raw.trusted_proxies),
            deny: cidrs(raw.deny),
            ipv6_prefix,
            header_read_timeout,
            idle_timeout,
            body_read_timeout,
            send_timeout,
            max_header_bytes,
            max_body_bytes,
            max_connections,
            shutdown_grace: raw.shutdown_grace.map_or(30 * SECOND, |d| d.0),
            escaped_slashes: raw.escaped_slashes.unwrap_or_default(),
        })
    }

    fn admin(&mut self, raw: RawAdmin, server: &ServerConfig) -> Result<AdminConfig> {
        let listen = match raw.listen {
            AdminListen::Default => Some(SocketAddr::from(([127, 0, 0, 1], 9901))),
            AdminListen::Disabled => None,
            AdminListen::At(addr) => Some(addr.0),
        };
        if let Some(addr) = listen {
            let traffic = server
                .listen
                .iter()
                .chain(server.tls.iter().flat_map(|t| t.listen.iter()));
            if let Some(other) = traffic.into_iter().find(|t| overlaps(**t, addr)) {
                return Err(self.err(
                    "admin.listen",
                    format!(
                        "{addr} overlaps the traffic listener {other}; the admin API needs its own address"
                    ),
                ));
            }
        }
        Ok(AdminConfig {
            listen,
            token: raw.token.filter(|t| !t.is_empty()),
        })
    }

    fn store(&mut self, raw: RawStore) -> Result<StoreConfig> {
        if let Some(url) = &raw.url {
            check_redis_url(url).map_err(|m| self.err("store.url", m))?;
        }
        let urls = raw.urls.unwrap_or_default();
        for (i, url) in urls.iter().enumerate() {
            check_redis_url(url).map_err(|m| self.err(&format!("store.urls[{i}]"), m))?;
        }
        let backend_kind = raw.backend.unwrap_or(RawBackend::Memory);
        let name = match backend_kind {
            RawBackend::Memory => "memory",
            RawBackend::Redis => "redis",
            RawBackend::RedisSentinel => "redis_sentinel",
            RawBackend::RedisCluster => "redis_cluster",
        };
        // Fields of other backends are refused, never ignored.
        let many = matches!(
            backend_kind,
            RawBackend::RedisSentinel | RawBackend::RedisCluster
        );
        if !many && !urls.is_empty() {
            return Err(self.err(
                "store.urls",
                format!("`urls` (seed nodes, sentinels) are for redis_cluster and redis_sentinel, not {name}; use `url`"),
            ));
        }
        if backend_kind != RawBackend::RedisSentinel && raw.master_name.is_some() {
            return Err(self.err(
                "store.master_name",
                format!("`master_name` is for redis_sentinel, not {name}"),
            ));
        }
        if backend_kind == RawBackend::RedisCluster && raw.url.is_some() {
            return Err(self.err(
                "store.url",
                "redis_cluster takes its seed nodes in `urls`, not `url`",
            ));
        }
        if many && urls.is_empty() {
            return Err(self.err(
                "store.urls",
                format!(
                    "{name} needs at least one URL in `urls` (the {})",
                    if backend_kind == RawBackend::RedisCluster {
                        "seed nodes"
                    } else {
                        "sentinels"
                    }
                ),
            ));
        }
        let backend = match backend_kind {
            RawBackend::Redis => StoreBackend::Redis {
                url: raw
                    .url
                    .clone()
                    .unwrap_or_else(|| "redis://127.0.0.1:6379/0".to_owned()),
            },
            RawBackend::RedisCluster => StoreBackend::Cluster {
                seeds: urls.clone(),
            },
            RawBackend::RedisSentinel => {
                let Some(master_name) = raw.master_name.clone().filter(|m| !m.trim().is_empty())
                else {
                    return Err(self.err(
                        "store.master_name",
                        "redis_sentinel needs `master_name`, the service the sentinels monitor",
                    ));
                };
                if let Some(url) = &raw.url {
                    if redis_url_host(url) != Some(master_name.as_str()) {
                        return Err(self.err(
                            "store.url",
                            format!("with redis_sentinel, `url` gives the master's scheme, credentials and database, and its host is the master name: expected \"redis://[user:password@]{master_name}[/db]\", got \"{}\"", redact(url)),
                        ));
                    }
                }
                StoreBackend::Sentinel {
                    sentinels: urls.clone(),
                    master_name,
                    master: raw.url.clone(),
                }
            }
            RawBackend::Memory => {
                if raw.url.is_some() {
                    self.warnings
                        .push("store.url has no effect with backend: memory".to_owned());
                }
                StoreBackend::Memory
            }
        };
        let tls = match raw.tls {
            None => None,
            Some(t) => Some(self.store_tls(t, &backend, raw.url.as_deref(), &urls)?),
        };
        let prefix = raw.prefix.unwrap_or_else(|| "tollgate".to_owned());
        if prefix.is_empty() || prefix.chars().any(char::is_whitespace) {
            return Err(self.err(
                "store.prefix",
                format!("prefix must be non-empty and without whitespace, got \"{prefix}\""),
            ));
        }
        // Redis Cluster hashes the first `{...}` of a key: a brace in the
        // prefix would move every key off the slot of its own hash tag.
        if prefix.contains(['{', '}']) {
            return Err(self.err(
                "store.prefix",
                format!(
                    "prefix must not contain '{{' or '}}' (each key's hash tag decides its Redis Cluster slot), got \"{prefix}\""
                ),
            ));
        }
        let timeout = self.positive(
            "store.timeout",
            raw.timeout.map(|d| d.0),
            Duration::from_millis(50),
        )?;
        if raw.on_error == Some(OnError::Local) && backend_kind == RawBackend::Memory {
            self.warnings.push(
                "store.on_error: local has no effect with backend: memory (the memory store does not fail)"
                    .to_owned(),
            );
        }
        // Shared state decided by each instance's own clock: windows start
        // and end when each instance thinks they do (README "Stores").
        if raw.clock == Some(TimeSource::Local) && backend_kind != RawBackend::Memory {
            self.warnings.push(format!(
                "store.clock: local with backend: {name}: each instance decides with its own clock, so instances with skewed clocks can over-admit without bound on fixed_window, sliding_window and sliding_log at window boundaries; keep clock: store unless the clocks are synchronised"
            ));
        }
        Ok(StoreConfig {
            backend,
            prefix,
            timeout,
            on_error: raw.on_error.unwrap_or(OnError::Local),
            clock: raw.clock.unwrap_or(TimeSource::Store),
            tls,
        })
    }

    /// `store.tls`: refused unless some URL the store uses is `rediss://`;
    /// its PEM files read and checked here, so a bad one names its field.
    fn store_tls(
        &mut self,
        raw: RawStoreTls,
        backend: &StoreBackend,
        url: Option<&str>,
        urls: &[String],
    ) -> Result<StoreTls> {
        let rediss = url
            .into_iter()
            .chain(urls.iter().map(String::as_str))
            .any(|u| u.starts_with("rediss://"));
        if !rediss || matches!(backend, StoreBackend::Memory) {
            return Err(self.err(
                "store.tls",
                "`tls` needs a Redis backend with rediss:// URLs (redis:// is plain TCP)",
            ));
        }
        if raw.server_name.is_some() && matches!(backend, StoreBackend::Cluster { .. }) {
            return Err(self.err(
                "store.tls.server_name",
                "not with redis_cluster: each node is verified by the address the cluster announces for it (put those in its certificate)",
            ));
        }
        if let Some(name) = &raw.server_name {
            if rustls::pki_types::ServerName::try_from(name.as_str()).is_err() {
                return Err(self.err(
                    "store.tls.server_name",
                    format!("\"{name}\" is not a host name or IP address"),
                ));
            }
        }
        let ca = match raw.ca {
            Some(path) => Some(self.pem("store.tls.ca", path, Pem::Certificates)?),
            None => None,
        };
        let client = match (raw.cert, raw.key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((
                self.pem("store.tls.cert", cert, Pem::Certificates)?,
                self.pem("store.tls.key", key, Pem::Key)?,
            )),
            (Some(_), None) => {
                return Err(self.err("store.tls", "`cert` needs its `key` (a client certificate)"))
            }
            (None, Some(_)) => {
                return Err(self.err("store.tls", "`key` needs its `cert` (a client certificate)"))
            }
        };
        Ok(StoreTls {
            ca,
            client,
            server_name: raw.server_name,
        })
    }

    /// The PEM file at `path` (relative to the config's directory), read and
    /// checked to hold what `want` says.
    fn pem(&self, field: &str, path: std::path::PathBuf, want: Pem) -> Result<Vec<u8>> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let path = self.resolve(path);
        let shown = path.display();
        let bytes = std::fs::read(&path)
            .map_err(|e| self.err(field, format!("cannot read {shown}: {e}")))?;
        let ok = match want {
            Pem::Certificates => {
                let certs: std::result::Result<Vec<_>, _> =
                    CertificateDer::pem_slice_iter(&bytes).collect();
                match certs {
                    Ok(c) if !c.is_empty() => Ok(()),
                    Ok(_) => Err("no PEM certificate in it".to_owned()),
                    Err(e) => Err(format!("not PEM certificates: {e}")),
                }
            }
            Pem::Key => PrivateKeyDer::from_pem_slice(&bytes)
                .map(drop)
                .map_err(|e| format!("no PEM private key in it: {e}")),
        };
        ok.map_err(|m| self.err(field, format!("{shown}: {m}")))?;
        Ok(bytes)
    }

    fn server_tls(&mut self, raw: RawServerTls) -> Result<TlsConfig> {
        let listen: Vec<SocketAddr> = raw
            .listen
            .unwrap_or_default()
            .into_iter()
            .map(|a| a.0)
            .collect();
        if listen.is_empty() {
            return Err(self.err(
                "server.tls.listen",
                "TLS needs at least one listener address",
            ));
        }
        let certificates: Vec<CertificateConfig> = raw
            .certificates
            .unwrap_or_default()
            .into_iter()
            .map(|c| CertificateConfig {
                cert: self.resolve(c.cert),
                key: self.resolve(c.key),
            })
            .collect();
        if certificates.is_empty() {
            return Err(self.err(
                "server.tls.certificates",
                "TLS needs at least one certificate: { cert: FILE, key: FILE }",
            ));
        }
        Ok(TlsConfig {
            listen,
            certificates,
        })
    }

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

    /// A `limit_response` at `path`; what it leaves out comes from `base`
    /// (the server-wide one, or the defaults).
    fn limit_response(
        &self,
        path: &str,
        raw: RawLimitResponse,
        base: &LimitResponse,
    ) -> Result<LimitResponse> {
        let status = match raw.status {
            None => base.status,
            Some(status) if (400..=599).contains(&status) => status_code(status),
            Some(status) => {
                return Err(self.err(
                    &format!("{path}.status"),
                    format!("a rejection status must be between 400 and 599, got {status}"),
                ))
            }
        };
        let content_type = match raw.content_type {
            None => base.content_type.clone(),
            Some(ct) => Some(HeaderValue::from_str(ct.trim()).map_err(|_| {
                self.err(
                    &format!("{path}.content_type"),
                    format!("\"{ct}\" is not a valid header value"),
                )
            })?),
        };
        let template = |field: &str, text: Option<String>, base: &Option<Template>| match text {
            None => Ok(base.clone()),
            Some(text) => Template::parse(&text)
                .map(Some)
                .map_err(|m| self.err(&format!("{path}.{field}"), m)),
        };
        Ok(LimitResponse {
            status,
            headers: raw.headers.unwrap_or(base.headers),
            body: template("body", raw.body, &base.body)?,
            locked_body: template("locked_body", raw.locked_body, &base.locked_body)?,
            content_type,
        })
    }

    // ----- upstreams -----

    fn upstreams(&mut self, raw: Ordered<RawUpstream>) -> Result<Vec<UpstreamConfig>> {
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

    fn upstream(&mut self, path: &str, name: String, raw: RawUpstream) -> Result<UpstreamConfig> {
        let raw_targets = raw.targets.unwrap_or_default();
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
        let tls = match raw.tls {
            None => None,
            Some(t) => Some(self.upstream_tls(path, t, &targets)?),
        };
        let health = raw.health.unwrap_or_default();
        let passive = match health.passive {
            None => None,
            Some(p) => Some(PassiveHealth {
                failures: self.at_least_one(
                    &format!("{path}.health.passive.failures"),
                    p.failures,
                    5,
                )?,
                eject: self.positive(
                    &format!("{path}.health.passive.eject"),
                    p.eject.map(|d| d.0),
                    30 * SECOND,
                )?,
            }),
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

    /// `health.active` at `path`, with the SPEC's defaults.
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

    // ----- limits -----

    fn policies(&mut self, raw: Ordered<RawLimit>) -> Result<Vec<LimitConfig>> {
        let mut out: Vec<LimitConfig> = Vec::new();
        for (name, raw) in raw.0 {
            let path = format!("limits.{name}");
            self.name(&path, "limit", &name)?;
            if out.iter().any(|l| l.name == name) {
                return Err(self.err(&path, format!("duplicate limit name \"{name}\"")));
            }
            if raw.name.is_some() {
                return Err(self.err(
                    &format!("{path}.name"),
                    "a policy is named by its key under `limits:`; `name` is only for inline limits",
                ));
            }
            let limit = self.limit(&path, name, raw)?;
            out.push(limit);
        }
        Ok(out)
    }

    fn limit(&mut self, path: &str, name: String, raw: RawLimit) -> Result<LimitConfig> {
        let kind = raw.algorithm;
        let written = Written {
            limit: raw.limit,
            window: raw.window,
            rate: raw.rate,
            burst: raw.burst,
            max_delay: raw.max_delay.map(|d| d.0),
            lease: raw.lease.map(|d| d.0),
        };
        for param in written.given() {
            if !kind.params().contains(&param) {
                return Err(self.err(
                    &format!("{path}.{param}"),
                    format!(
                        "`{param}` is not a parameter of {} (it takes {})",
                        kind.name(),
                        kind.params().join(", ")
                    ),
                ));
            }
        }
        let params = self.params(path, kind, &written, None)?;
        let key = raw.key.map_or_else(|| vec![KeySource::ClientIp], |k| k.0);
        if key.is_empty() {
            return Err(self.err(
                &format!("{path}.key"),
                "key needs at least one source (client_ip, header:NAME, ...)",
            ));
        }
        let cost = self.at_least_one(&format!("{path}.cost"), raw.cost, 1)?;
        self.cost_fits(&format!("{path}.cost"), cost, &params, None)?;
        let lockout = match raw.lockout {
            None => None,
            Some(_) if kind == AlgorithmKind::Concurrency => {
                return Err(self.err(
                    &format!("{path}.lockout"),
                    "a lockout is not supported on a concurrency limit",
                ));
            }
            Some(l) => Some(self.lockout(&format!("{path}.lockout"), l, &written)?),
        };
        let mut overrides = Vec::new();
        for (i, o) in raw.overrides.unwrap_or_default().into_iter().enumerate() {
            let opath = format!("{path}.overrides[{i}]");
            let params = self.override_(path, &opath, o.limit_params(), kind, &written)?;
            self.cost_fits(&format!("{path}.cost"), cost, &params, Some(&opath))?;
            overrides.push(Override {
                matcher: o.matcher,
                params,
            });
        }
        Ok(LimitConfig {
            name,
            params,
            key,
            on_missing_key: raw.on_missing_key.unwrap_or(OnMissingKey::ClientIp),
            cost,
            mode: raw.mode.unwrap_or(Mode::Enforce),
            lockout,
            exempt: raw.exempt.unwrap_or_default(),
            overrides,
        })
    }

    /// The validated parameters of a `kind` limit at `path` written as
    /// `written`, with an override's fields (at `over`'s path) replacing
    /// the ones it sets. Errors name the field that holds the bad value.
    fn params(
        &self,
        path: &str,
        kind: AlgorithmKind,
        written: &Written,
        over: Option<(&str, &Written)>,
    ) -> Result<AlgoParams> {
        // Where a parameter's value comes from: the override if it sets it.
        let field = |param: &str| match over {
            Some((opath, o)) if o.given().contains(&param) => format!("{opath}.{param}"),
            _ => format!("{path}.{param}"),
        };
        let pick = |o: fn(&Written) -> bool| over.filter(|(_, w)| o(w)).map(|(_, w)| w);
        let limit = pick(|w| w.limit.is_some()).unwrap_or(written).limit;
        let window = pick(|w| w.window.is_some()).unwrap_or(written).window;
        let rate = pick(|w| w.rate.is_some()).unwrap_or(written).rate;
        // `burst` defaults to the count of the limit's own rate.
        let burst = pick(|w| w.burst.is_some())
            .unwrap_or(written)
            .burst
            .or(written.rate.map(|r| r.count));
        let missing = |param: &str| {
            self.err(
                path,
                format!("missing field `{param}`, which {} requires", kind.name()),
            )
        };
        let fail = |e: ParamError| self.param_error(&field(param_of(&e)), kind, &e);
        let params = match kind {
            AlgorithmKind::FixedWindow
            | AlgorithmKind::SlidingWindow
            | AlgorithmKind::SlidingLog => {
                let limit = limit.ok_or_else(|| missing("limit"))?;
                let window = window.ok_or_else(|| missing("window"))?;
                let window = self.window(&field("window"), window, kind)?;
                match (kind, window) {
                    (AlgorithmKind::FixedWindow, w) => {
                        AlgoParams::FixedWindow(fixed_window::Params::new(limit, w).map_err(fail)?)
                    }
                    (AlgorithmKind::SlidingWindow, fixed_window::Window::Fixed(w)) => {
                        AlgoParams::SlidingWindow(
                            sliding_window::Params::new(limit, w).map_err(fail)?,
                        )
                    }
                    (_, fixed_window::Window::Fixed(w)) => {
                        AlgoParams::SlidingLog(sliding_log::Params::new(limit, w).map_err(fail)?)
                    }
                    // `window()` allows months on fixed_window only.
                    (_, fixed_window::Window::Month) => return Err(missing("window")),
                }
            }
            AlgorithmKind::TokenBucket | AlgorithmKind::Gcra | AlgorithmKind::LeakyBucket => {
                let r = rate.ok_or_else(|| missing("rate"))?;
                let r = algo::Rate::new(r.count, micros(r.period)).map_err(fail)?;
                let burst = burst.unwrap_or(r.count());
                let max_delay = micros(written.max_delay.unwrap_or(Duration::ZERO));
                match kind {
                    AlgorithmKind::TokenBucket => AlgoParams::TokenBucket(
                        token_bucket::Params::new(r, burst, max_delay).map_err(fail)?,
                    ),
                    AlgorithmKind::Gcra => {
                        AlgoParams::Gcra(gcra::Params::new(r, burst, max_delay).map_err(fail)?)
                    }
                    _ => AlgoParams::LeakyBucket(
                        leaky_bucket::Params::new(r, burst, max_delay).map_err(fail)?,
                    ),
                }
            }
            AlgorithmKind::Concurrency => {
                let limit = limit.ok_or_else(|| missing("limit"))?;
                let lease = micros(written.lease.unwrap_or(5 * 60 * SECOND));
                AlgoParams::Concurrency(concurrency::Params::new(limit, lease).map_err(fail)?)
            }
        };
        Ok(params)
    }

    /// A parameter the algorithm refused, in the operator's words: durations
    /// as durations, the rate's parts as `rate`.
    fn param_error(&self, field: &str, kind: AlgorithmKind, e: &ParamError) -> ConfigError {
        let name = leaf(field);
        let message = match e {
            ParamError::Zero(_) if matches!(name, "window" | "lease" | "max_delay") => {
                format!("{name} must be greater than 0")
            }
            ParamError::Zero("rate period") => "a rate's period must be greater than 0".into(),
            ParamError::Zero("rate count") => "a rate's count must be at least 1".into(),
            ParamError::Zero(_) => format!("{name} must be at least 1"),
            ParamError::TooLarge { field: p, max } if is_duration(p) => format!(
                "{} is too large (at most {})",
                p.trim_start_matches("rate "),
                format_duration(Duration::from_micros(*max))
            ),
            ParamError::TooLarge { field: p, max } => format!("{p} is too large (at most {max})"),
            ParamError::TooFast => format!(
                "rate is too fast for {}: at most one request per microsecond",
                kind.name()
            ),
            ParamError::Precision => e.to_string(),
        };
        self.err(field, message)
    }

    /// A request costing more than the limit can ever hold would be
    /// rejected every time: an error, at `field` (or at the override that
    /// lowers the capacity).
    fn cost_fits(
        &self,
        field: &str,
        cost: u64,
        params: &AlgoParams,
        over: Option<&str>,
    ) -> Result<()> {
        match params.capacity() {
            Some(capacity) if cost > capacity => {
                let whose = over.map_or(String::new(), |o| format!(" for the clients of {o}"));
                Err(self.err(
                    over.unwrap_or(field),
                    format!(
                        "cost {cost} is more than the limit's capacity {capacity}{whose}: every request would be rejected; raise `{}` or lower `cost`",
                        capacity_param(params)
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Checks a window: `month` only on fixed_window.
    fn window(
        &self,
        field: &str,
        window: Window,
        kind: AlgorithmKind,
    ) -> Result<fixed_window::Window> {
        match window {
            Window::Fixed(d) => Ok(fixed_window::Window::Fixed(micros(d))),
            Window::Month if kind == AlgorithmKind::FixedWindow => Ok(fixed_window::Window::Month),
            Window::Month => Err(self.err(
                field,
                format!(
                    "`window: month` is only supported by fixed_window, not {}",
                    kind.name()
                ),
            )),
        }
    }

    fn lockout(&self, path: &str, raw: RawLockout, written: &Written) -> Result<LockParams> {
        let duration = raw
            .duration
            .ok_or_else(|| self.err(path, "missing field `duration`"))?
            .0;
        if duration.is_zero() {
            return Err(self.err(
                &format!("{path}.duration"),
                "duration must be greater than 0",
            ));
        }
        // Strikes are counted over the limit's own window (or rate period).
        let default_within = match (written.window, written.rate, written.lease) {
            (Some(Window::Fixed(d)), _, _) => d,
            (Some(Window::Month), _, _) => 31 * DAY,
            (None, Some(rate), _) => rate.period,
            (None, None, lease) => lease.unwrap_or(5 * 60 * SECOND),
        };
        let max_duration = raw.max_duration.map_or(duration.max(DAY), |d| d.0);
        if max_duration < duration {
            return Err(self.err(
                &format!("{path}.max_duration"),
                format!(
                    "max_duration ({}) must be at least duration ({})",
                    format_duration(max_duration),
                    format_duration(duration)
                ),
            ));
        }
        let within = self.positive(
            &format!("{path}.within"),
            raw.within.map(|d| d.0),
            default_within,
        )?;
        let forget_after = self.positive(
            &format!("{path}.forget_after"),
            raw.forget_after.map(|d| d.0),
            DAY,
        )?;
        Ok(LockParams {
            after: u64::from(self.at_least_one(&format!("{path}.after"), raw.after, 1)?),
            within: micros(within),
            duration: micros(duration),
            escalate: u64::from(self.at_least_one(&format!("{path}.escalate"), raw.escalate, 1)?),
            max_duration: micros(max_duration),
            forget_after: micros(forget_after),
        })
    }

    /// An override of the limit at `path`: only parameters an override may
    /// set, at least one, validated on top of the limit's own.
    fn override_(
        &self,
        path: &str,
        opath: &str,
        over: Written,
        kind: AlgorithmKind,
        written: &Written,
    ) -> Result<AlgoParams> {
        let allowed = kind.override_params();
        let given = over.given();
        if let Some(param) = given.iter().find(|p| !allowed.contains(p)) {
            return Err(self.err(
                &format!("{opath}.{param}"),
                format!(
                    "`{param}` is not a parameter of {} (an override may set {})",
                    kind.name(),
                    allowed.join(", ")
                ),
            ));
        }
        if given.is_empty() {
            return Err(self.err(
                opath,
                format!("an override needs at least one of {}", allowed.join(", ")),
            ));
        }
        self.params(path, kind, written, Some((opath, &over)))
    }

    // ----- routes -----

    fn routes(
        &mut self,
        raw: Vec<RawRoute>,
        server: &ServerConfig,
        upstreams: &[UpstreamConfig],
        limits: &mut Vec<LimitConfig>,
    ) -> Result<Vec<RouteConfig>> {
        let policies: HashSet<String> = limits.iter().map(|l| l.name.clone()).collect();
        // Every limit name so far, with where it was defined.
        let mut limit_names: HashMap<String, String> = limits
            .iter()
            .map(|l| (l.name.clone(), format!("limits.{}", l.name)))
            .collect();
        let mut route_names: HashMap<String, usize> = HashMap::new();
        let mut routes = Vec::with_capacity(raw.len());

        for (i, route) in raw.into_iter().enumerate() {
            let path = format!("routes[{i}]");
            let name_field = format!("{path}.name");
            self.name(&name_field, "route", &route.name)?;
            if let Some(first) = route_names.get(&route.name) {
                return Err(self.err(
                    &name_field,
                    format!(
                        "duplicate route name \"{}\" (first used by routes[{first}])",
                        route.name
                    ),
                ));
            }
            route_names.insert(route.name.clone(), i);

            let matcher = route.matcher.unwrap_or_default();
            let (hosts, path_match, methods, headers) =
                self.route_match(&format!("{path}.match"), matcher)?;
            self.escaped_slash_route(&format!("{path}.match"), &path_match, server)?;

            let action = match (route.upstream, route.respond) {
                (Some(upstream), None) => {
                    if !upstreams.iter().any(|u| u.name == upstream) {
                        let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
                        return Err(self.err(
                            &format!("{path}.upstream"),
                            format!("unknown upstream \"{upstream}\"{}", known_list(&known)),
                        ));
                    }
                    RouteAction::Upstream(upstream)
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
            if strip_prefix && !matches!(path_match, PathMatch::Prefix(_)) {
                return Err(self.err(
                    &format!("{path}.strip_prefix"),
                    "strip_prefix needs a `path` prefix matcher in `match`",
                ));
            }
            let timeout = match route.timeout {
                None => None,
                Some(d) => Some(self.positive(&format!("{path}.timeout"), Some(d.0), d.0)?),
            };

            let mut names: Vec<String> = Vec::new();
            for (j, entry) in route.limits.unwrap_or_default().into_iter().enumerate() {
                let field = format!("{path}.limits[{j}]");
                let name = match entry {
                    RawRouteLimit::Name(name) => {
                        if !policies.contains(&name) {
                            let mut known: Vec<&str> =
                                policies.iter().map(String::as_str).collect();
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
                            None => (format!("{}.{j}", route.name), field.clone()),
                        };
                        if let Some(other) = limit_names.get(&name) {
                            return Err(self.err(
                                &name_field,
                                format!(
                                    "duplicate limit name \"{name}\" (already defined at {other})"
                                ),
                            ));
                        }
                        let limit = self.limit(&field, name.clone(), *raw)?;
                        limit_names.insert(name.clone(), field.clone());
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

            let limit_response = match route.limit_response {
                None => server.limit_response.clone(),
                Some(r) => self.limit_response(
                    &format!("{path}.limit_response"),
                    r,
                    &server.limit_response,
                )?,
            };

            routes.push(RouteConfig {
                name: route.name,
                hosts,
                path: path_match,
                methods,
                headers,
                action,
                strip_prefix,
                rewrite_location: route.rewrite_location.unwrap_or(true),
                preserve_host: route.preserve_host.unwrap_or(true),
                timeout,
                limits: names,
                limit_response,
                line: self.positions.lookup(&path).map_or(0, |p| p.0),
            });
        }
        Ok(routes)
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

    #[allow(clippy::type_complexity)]
    fn route_match(
        &self,
        path: &str,
        raw: RawMatch,
    ) -> Result<(
        Vec<String>,
        PathMatch,
        Vec<Method>,
        Vec<(HeaderName, HeaderMatch)>,
    )> {
        let mut hosts = Vec::new();
        for (k, host) in raw.hosts.unwrap_or_default().into_iter().enumerate() {
            let host =
                host_pattern(&host).map_err(|m| self.err(&format!("{path}.hosts[{k}]"), m))?;
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }

        let given: Vec<&str> = [
            ("path", raw.path.is_some()),
            ("exact", raw.exact.is_some()),
            ("regex", raw.regex.is_some()),
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
        let path_match = if let Some(prefix) = raw.path {
            check_route_path(&prefix).map_err(|m| self.err(&format!("{path}.path"), m))?;
            PathMatch::Prefix(prefix)
        } else if let Some(exact) = raw.exact {
            check_route_path(&exact).map_err(|m| self.err(&format!("{path}.exact"), m))?;
            PathMatch::Exact(exact)
        } else if let Some(regex) = raw.regex {
            // Anchored: a route regex must match the whole normalised path.
            PathMatch::regex(&regex)
                .map_err(|e| self.err(&format!("{path}.regex"), regex_error(&e)))?
        } else {
            PathMatch::Any
        };

        let mut methods: Vec<Method> = Vec::new();
        for (k, method) in raw.methods.unwrap_or_default().into_iter().enumerate() {
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

        let mut headers = Vec::new();
        for (name, value) in raw.headers.0 {
            let field = format!("{path}.headers.{name}");
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| self.err(&field, format!("\"{name}\" is not a valid header name")))?;
            let matcher = if value == "*" {
                HeaderMatch::Present
            } else {
                HeaderValue::from_str(&value).map_err(|_| {
                    self.err(&field, format!("\"{value}\" is not a valid header value"))
                })?;
                HeaderMatch::Exact(value)
            };
            if headers.iter().any(|(h, _)| *h == header) {
                return Err(self.err(&field, format!("header \"{header}\" is matched twice")));
            }
            headers.push((header, matcher));
        }
        Ok((hosts, path_match, methods, headers))
    }

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
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| self.err(&field, format!("\"{name}\" is not a valid header name")))?;
            if GATEWAY_HEADERS.contains(&header.as_str()) {
                return Err(self.err(
                    &field,
                    format!("\"{header}\" is set by the gateway and cannot be configured"),
                ));
            }
            let value = HeaderValue::from_str(&value).map_err(|_| {
                self.err(&field, format!("\"{value}\" is not a valid header value"))
            })?;
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

impl AlgorithmKind {
    fn name(self) -> &'static str {
        match self {
            AlgorithmKind::FixedWindow => "fixed_window",
            AlgorithmKind::SlidingWindow => "sliding_window",
            AlgorithmKind::SlidingLog => "sliding_log",
            AlgorithmKind::TokenBucket => "token_bucket",
            AlgorithmKind::Gcra => "gcra",
            AlgorithmKind::LeakyBucket => "leaky_bucket",
            AlgorithmKind::Concurrency => "concurrency",
        }
    }

    /// The algorithm's own parameters.
    fn params(self) -> &'static [&'static str] {
        match self {
            AlgorithmKind::FixedWindow
            | AlgorithmKind::SlidingWindow
            | AlgorithmKind::SlidingLog => &["limit", "window"],
            AlgorithmKind::TokenBucket | AlgorithmKind::Gcra | AlgorithmKind::LeakyBucket => {
                &["rate", "burst", "max_delay"]
            }
            AlgorithmKind::Concurrency => &["limit", "lease"],
        }
    }

    /// What an override may replace.
    fn override_params(self) -> &'static [&'static str] {
        match self {
            AlgorithmKind::FixedWindow
            | AlgorithmKind::SlidingWindow
            | AlgorithmKind::SlidingLog => &["limit", "window"],
            AlgorithmKind::TokenBucket | AlgorithmKind::Gcra | AlgorithmKind::LeakyBucket => {
                &["rate", "burst"]
            }
            AlgorithmKind::Concurrency => &["limit"],
        }
    }
}

/// A limit's parameters as written (or an override's), before validation.
#[derive(Debug, Default, Clone, Copy)]
struct Written {
    limit: Option<u64>,
    window: Option<Window>,
    rate: Option<Rate>,
    burst: Option<u64>,
    max_delay: Option<Duration>,
    lease: Option<Duration>,
}

impl Written {
    /// The parameters given, by name.
    fn given(&self) -> Vec<&'static str> {
        [
            ("limit", self.limit.is_some()),
            ("window", self.window.is_some()),
            ("rate", self.rate.is_some()),
            ("burst", self.burst.is_some()),
            ("max_delay", self.max_delay.is_some()),
            ("lease", self.lease.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }
}

impl RawOverride {
    /// The parameters this override sets.
    fn limit_params(&self) -> Written {
        Written {
            limit: self.limit,
            window: self.window,
            rate: self.rate,
            burst: self.burst,
            ..Written::default()
        }
    }
}

/// The config parameter an algorithm's complaint is about.
fn param_of(e: &ParamError) -> &'static str {
    match e {
        ParamError::Zero(p) | ParamError::TooLarge { field: p, .. } => {
            p.strip_prefix("rate ").map_or(p, |_| "rate")
        }
        ParamError::TooFast => "rate",
        ParamError::Precision => "burst",
    }
}

/// Whether an algorithm's parameter is a duration (its bounds are shown as one).
fn is_duration(param: &str) -> bool {
    matches!(param, "window" | "lease" | "max_delay" | "rate period")
}

/// The parameter that sets a limit's capacity.
fn capacity_param(params: &AlgoParams) -> &'static str {
    match params {
        AlgoParams::TokenBucket(_) | AlgoParams::Gcra(_) | AlgoParams::LeakyBucket(_) => "burst",
        _ => "limit",
    }
}

/// A duration in microseconds, saturating (the algorithms bound every
/// duration far below `u64::MAX` µs).
fn micros(d: Duration) -> algo::Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The last component of a field path (`server.timeouts.idle` -> `idle`).
fn leaf(field: &str) -> &str {
    field
        .rsplit(['.', ']'])
        .find(|s| !s.is_empty() && !s.contains('['))
        .unwrap_or(field)
}

fn cidrs(list: Option<Vec<super::units::Cidr>>) -> Vec<ipnet::IpNet> {
    list.unwrap_or_default().into_iter().map(|c| c.0).collect()
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

/// Whether two listen addresses would collide when bound. Port 0 (any free
/// port) never collides; an unspecified IPv6 address covers IPv4 too
/// (dual-stack).
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() == 0 || a.port() != b.port() {
        return false;
    }
    let (x, y) = (a.ip(), b.ip());
    x == y
        || (x.is_unspecified() && (x.is_ipv6() || y.is_ipv4()))
        || (y.is_unspecified() && (y.is_ipv6() || x.is_ipv4()))
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

/// Checks a `redis://` or `rediss://` URL: `[user[:password]@]host[:port][/db][?query]`.
/// What a PEM file of `store.tls` must hold.
#[derive(Debug, Clone, Copy)]
enum Pem {
    Certificates,
    Key,
}

/// The host of a Redis URL (after any credentials, without the port).
fn redis_url_host(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("rediss://"))?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    Some(host_port.split(':').next().unwrap_or(host_port))
}

fn check_redis_url(url: &str) -> std::result::Result<(), String> {
    let bad = || {
        format!(
            "expected a redis:// or rediss:// URL like \"redis://127.0.0.1:6379/0\", got \"{}\"",
            redact(url)
        )
    };
    let rest = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("rediss://"))
        .ok_or_else(bad)?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (ip, after) = v6.split_once(']').ok_or_else(bad)?;
        ip.parse::<Ipv6Addr>().map_err(|_| bad())?;
        (ip, after.strip_prefix(':'))
    } else {
        match host_port.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'));
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    let path = tail.split(['?', '#']).next().unwrap_or("");
    let db_ok = path.is_empty() || path == "/" || path[1..].parse::<u32>().is_ok();
    if host_ok && port_ok && db_ok && !tail.starts_with('#') {
        Ok(())
    } else {
        Err(bad())
    }
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
    fn listen_overlaps() {
        let a = |s: &str| s.parse::<SocketAddr>().expect("addr");
        assert!(overlaps(a("0.0.0.0:80"), a("127.0.0.1:80")));
        assert!(overlaps(a("[::]:80"), a("127.0.0.1:80")));
        assert!(!overlaps(a("0.0.0.0:80"), a("[::1]:80")));
        assert!(!overlaps(a("127.0.0.1:80"), a("127.0.0.2:80")));
        assert!(!overlaps(a("127.0.0.1:0"), a("127.0.0.1:0")));
        assert!(!overlaps(a("127.0.0.1:80"), a("127.0.0.1:81")));
    }

    #[test]
    fn redis_urls() {
        for ok in [
            "redis://127.0.0.1:6379/0",
            "redis://localhost",
            "rediss://user:p%40ss@cache.internal:6380/2",
            "redis://:secret@[::1]:6379",
            "redis://h/",
            "redis://h:6379/0?protocol=resp3",
        ] {
            assert_eq!(check_redis_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://h:6379",
            "redis://",
            "redis://h:port",
            "redis://h:6379/db",
            "redis://[::1:6379",
            "127.0.0.1:6379",
        ] {
            assert!(check_redis_url(bad).is_err(), "{bad}");
        }
        assert_eq!(
            check_redis_url("redis://u:hunter2@h:x"),
            Err("expected a redis:// or rediss:// URL like \"redis://127.0.0.1:6379/0\", got \"redis://u:***@h:x\"".into())
        );
    }

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

    #[test]
    fn leaves() {
        assert_eq!(leaf("server.timeouts.idle"), "idle");
        assert_eq!(leaf("a.b[0].weight"), "weight");
        assert_eq!(leaf("burst"), "burst");
    }
}
