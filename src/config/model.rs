//! The validated configuration: what the rest of the gateway is built from.
//!
//! Everything here has been checked and defaulted: names are resolved,
//! durations are `Duration`s, regexes are compiled, and an `Option` only
//! remains where "absent" is a real setting (no TLS, no lockout).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use http::uri::PathAndQuery;
use http::{HeaderName, HeaderValue, Method, StatusCode, Uri};
use ipnet::IpNet;
use serde::de::{Deserialize, Deserializer};

use super::template::Template;
use super::units::{deserialize_from_str, Cidr};
pub use super::units::{Rate, Window};
use super::{HeaderMatch, PathMatch};
pub use tollgate_limit::headers::HeaderStyle;
pub use tollgate_limit::store::{OnError, StoreBackend, StoreConfig, StoreTls, TimeSource};
pub use tollgate_limit::{AlgoParams, LockParams};

/// A whole, valid configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Traffic listeners and connection limits.
    pub server: ServerConfig,
    /// The admin listener.
    pub admin: AdminConfig,
    /// Where limit state lives.
    pub store: StoreConfig,
    /// Upstream pools, in file order.
    pub upstreams: Vec<UpstreamConfig>,
    /// Every limit: the named policies first (file order), then the inline
    /// limits of the routes (route order, then list order).
    pub limits: Vec<LimitConfig>,
    /// Routes, in the order they are tried.
    pub routes: Vec<RouteConfig>,
    /// Verified clients (`consumers:`), if any.
    pub consumers: Option<super::consumers::ConsumersConfig>,
    /// Span export (`telemetry:`), if configured.
    pub telemetry: Option<TelemetryConfig>,
}

/// `telemetry:`: spans exported by OTLP (docs/configuration/telemetry.md).
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// Where and how spans are sent.
    pub otlp: OtlpConfig,
    /// The share of new traces recorded (0 to 1); a continued trace
    /// follows its parent's `sampled` flag.
    pub sample: f64,
    /// The `service.name` resource attribute.
    pub service_name: String,
}

/// `telemetry.otlp`: the collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The URL spans are sent to: for `http`, the full URL (`/v1/traces`
    /// added to one without a path); for `grpc`, the server's address.
    pub endpoint: Uri,
    /// OTLP over HTTP (protobuf) or gRPC.
    pub protocol: OtlpProtocol,
    /// Headers (gRPC metadata) sent with every export, in file order.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// `telemetry.otlp.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (port 4318 by convention).
    #[default]
    Http,
    /// OTLP/gRPC (port 4317 by convention).
    Grpc,
}

impl Config {
    /// The upstream called `name`.
    pub fn upstream(&self, name: &str) -> Option<&UpstreamConfig> {
        self.upstreams.iter().find(|u| u.name == name)
    }

    /// The limit called `name`.
    pub fn limit(&self, name: &str) -> Option<&LimitConfig> {
        self.limits.iter().find(|l| l.name == name)
    }
}

/// `server:`: the traffic side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Plain (HTTP/1.1 and h2c) listeners; empty only when `tls` has some.
    pub listen: Vec<SocketAddr>,
    /// TLS listeners and their certificates.
    pub tls: Option<TlsConfig>,
    /// The rejection routes use unless they say otherwise.
    pub limit_response: LimitResponse,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Clients answered 403 before any route.
    pub deny: Vec<IpNet>,
    /// IPv6 clients are grouped by this prefix length (0..=128).
    pub ipv6_prefix: u8,
    /// Time allowed to receive a request head (`timeouts.header_read`).
    pub header_read_timeout: Duration,
    /// Keep-alive idle time of a connection (`timeouts.idle`).
    pub idle_timeout: Duration,
    /// Longest wait for the next bytes of a request body
    /// (`timeouts.body_read`).
    pub body_read_timeout: Duration,
    /// Longest a response write may make no progress (`timeouts.send`).
    pub send_timeout: Duration,
    /// Largest accepted request head, in bytes (larger: 431).
    pub max_header_bytes: usize,
    /// Largest accepted request body, in bytes (larger: 413); `None`: no cap.
    pub max_body_bytes: Option<u64>,
    /// Connections accepted at once (at least 1).
    pub max_connections: usize,
    /// How long in-flight requests may finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// What `%2F` and `%5C` in a request path do (`escaped_slashes`).
    pub escaped_slashes: EscapedSlashes,
}

/// `server.escaped_slashes` (docs/protocols.md): what an encoded slash or backslash
/// (`%2F`, `%5C`, either case) in a request path does. See
/// [`crate::route::normalise`] for the rules of each mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscapedSlashes {
    /// Answered 400 (the default).
    #[default]
    Reject,
    /// Read as `/` before the path is normalised, so routes, limits and the
    /// upstream see the path a lax upstream would.
    Decode,
    /// Kept encoded, as data inside a segment.
    Keep,
}

/// `server.tls:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// TLS listeners (at least one).
    pub listen: Vec<SocketAddr>,
    /// Certificates chosen by SNI; the first is the default (at least one).
    pub certificates: Vec<CertificateConfig>,
    /// Ask clients for certificates (mTLS, docs/configuration/consumers.md).
    pub client_auth: Option<super::consumers::ClientAuthConfig>,
}

/// One certificate and its key; relative paths are resolved against the
/// config file's directory. The files are read when the runtime is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateConfig {
    /// PEM certificate chain, the end-entity certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// `admin:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Admin listener; `None` when disabled (`listen: ""` or `listen: null`).
    pub listen: Option<SocketAddr>,
    /// Bearer token required on the admin API; `None` when empty or absent.
    pub token: Option<String>,
}

/// One entry of `upstreams:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// Its key in `upstreams:`.
    pub name: String,
    /// Targets (at least one).
    pub targets: Vec<TargetConfig>,
    /// How a target is chosen.
    pub balance: Balance,
    /// Deadline of a TCP (and TLS) connect.
    pub connect_timeout: Duration,
    /// Deadline until the response head arrives (then 504).
    pub timeout: Duration,
    /// Retries on another target.
    pub retries: u32,
    /// Speak HTTP/2 to the targets (h2c with prior knowledge, or ALPN for
    /// `https://` targets).
    pub http2: bool,
    /// TLS settings for `https://` targets.
    pub tls: Option<UpstreamTls>,
    /// Health checking.
    pub health: HealthConfig,
}

/// One target of an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetConfig {
    /// `http://` or `https://` with an authority, no path (or `/`), no query.
    pub url: Uri,
    /// Relative share of requests (at least 1).
    pub weight: u32,
}

/// `upstreams.*.balance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Each target in turn (weighted).
    RoundRobin,
    /// The target with the fewest requests in flight.
    LeastRequests,
    /// A random target (weighted).
    Random,
    /// By a hash of the client key, so a client sticks to a target.
    Hash,
}

/// `upstreams.*.tls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// A CA bundle trusted besides the system's roots.
    pub ca: Option<PathBuf>,
    /// Verify the target's certificate (default true).
    pub verify: bool,
    /// SNI and verification name, instead of the target's host.
    pub server_name: Option<String>,
    /// A client certificate and key for mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// `upstreams.*.health`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HealthConfig {
    /// Ejection after consecutive failures of real requests.
    pub passive: Option<PassiveHealth>,
    /// Probes sent by the gateway itself.
    pub active: Option<ActiveHealth>,
}

/// `health.passive`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassiveHealth {
    /// Consecutive failures that eject a target (at least 1).
    pub failures: u32,
    /// How long an ejected target stays out.
    pub eject: Duration,
}

/// `health.active`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveHealth {
    /// What each probe asks for (`GET`), starting with `/`.
    pub path: PathAndQuery,
    /// Time between the starts of two probes of a target.
    pub interval: Duration,
    /// A probe without a 2xx response head within this fails (less than
    /// `interval`).
    pub timeout: Duration,
    /// Consecutive successful probes that bring a down target up (at least 1).
    pub healthy: u32,
    /// Consecutive failed probes that take an up target down (at least 1).
    pub unhealthy: u32,
}

/// One limit: a named policy or a route's inline limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConfig {
    /// Its name: the policy's key, an inline limit's `name`, or `<route>.<index>`.
    pub name: String,
    /// The algorithm and its validated parameters (docs/configuration/limits.md).
    pub params: AlgoParams,
    /// The client key's components (at least one).
    pub key: Vec<KeySource>,
    /// What happens when a header, query parameter or cookie is absent.
    pub on_missing_key: OnMissingKey,
    /// Units one request takes (at least 1); with `metered`, the least
    /// an estimate can be.
    pub cost: u64,
    /// `cost: { reserve, settle, ... }`: an estimate charged at admission,
    /// settled when the response ends (docs/configuration/cost.md).
    pub metered: Option<super::CostConfig>,
    /// Enforce or only observe.
    pub mode: Mode,
    /// Lockout penalty after rejections (docs/configuration/limits.md), defaults applied.
    pub lockout: Option<LockParams>,
    /// Clients this limit never counts.
    pub exempt: Vec<ClientMatch>,
    /// Other parameters for some clients; the first match wins.
    pub overrides: Vec<Override>,
    /// A calendar window (`fixed_window` only): the periods its `params`
    /// count in, computed per request (docs/configuration/quotas.md).
    pub calendar: Option<super::CalendarWindow>,
    /// The values keys may have of their own (`limit: { default, from }`),
    /// if any (docs/configuration/quotas.md).
    pub per_key: Option<super::PerKeyLimits>,
    /// `distribution: { lease, ttl }`: instances take blocks of units and
    /// spend them locally (docs/scaling-out.md); `None`: exact.
    pub distribution: Option<Distribution>,
}

/// A leased limit's `distribution` (docs/scaling-out.md, "Leased limits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Distribution {
    /// The most units one lease takes.
    pub lease: u64,
    /// How long a lease lives on an instance.
    pub ttl: std::time::Duration,
}

impl Distribution {
    /// The default `ttl`.
    pub const DEFAULT_TTL: std::time::Duration = std::time::Duration::from_secs(1);
}

/// Where one component of a client key comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// `client_ip`: the client address (IPv6 grouped by prefix).
    ClientIp,
    /// `header:NAME`: a request header (name lowercased).
    Header(HeaderName),
    /// `query:NAME`: a query parameter.
    Query(String),
    /// `cookie:NAME`: a cookie.
    Cookie(String),
    /// `route`: the route's name.
    Route,
    /// `global`: one value for everyone.
    Global,
    /// `consumer`: the verified consumer's name.
    Consumer,
    /// `tenant`: the verified consumer's tenant.
    Tenant,
    /// `plan`: the verified consumer's plan.
    Plan,
    /// `claim:NAME`: a claim of the verified JWT (`a.b` reads a nested one).
    Claim(String),
    /// `attr:NAME`: an attribute of the verified consumer.
    Attr(String),
}

impl KeySource {
    /// Whether the value comes from the verified consumer (docs/configuration/consumers.md):
    /// `consumer`, `tenant`, `plan`, `claim:NAME`, `attr:NAME`.
    pub fn is_identity(&self) -> bool {
        matches!(
            self,
            KeySource::Consumer
                | KeySource::Tenant
                | KeySource::Plan
                | KeySource::Claim(_)
                | KeySource::Attr(_)
        )
    }
}

impl FromStr for KeySource {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "expected a key source (client_ip, header:NAME, query:NAME, cookie:NAME, route, global, consumer, tenant, plan, claim:NAME, attr:NAME), got \"{text}\""
            )
        };
        match text.trim() {
            "client_ip" => return Ok(KeySource::ClientIp),
            "route" => return Ok(KeySource::Route),
            "global" => return Ok(KeySource::Global),
            "consumer" => return Ok(KeySource::Consumer),
            "tenant" => return Ok(KeySource::Tenant),
            "plan" => return Ok(KeySource::Plan),
            _ => {}
        }
        let (kind, name) = text.trim().split_once(':').ok_or_else(bad)?;
        if name.is_empty() {
            return Err(bad());
        }
        match kind {
            "header" => HeaderName::from_bytes(name.as_bytes())
                .map(KeySource::Header)
                .map_err(|_| format!("\"{name}\" is not a valid header name, in \"{text}\"")),
            "query" => Ok(KeySource::Query(name.to_owned())),
            "cookie" => Ok(KeySource::Cookie(name.to_owned())),
            "claim" => Ok(KeySource::Claim(name.to_owned())),
            "attr" => Ok(KeySource::Attr(name.to_owned())),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::ClientIp => f.write_str("client_ip"),
            KeySource::Header(name) => write!(f, "header:{name}"),
            KeySource::Query(name) => write!(f, "query:{name}"),
            KeySource::Cookie(name) => write!(f, "cookie:{name}"),
            KeySource::Route => f.write_str("route"),
            KeySource::Global => f.write_str("global"),
            KeySource::Consumer => f.write_str("consumer"),
            KeySource::Tenant => f.write_str("tenant"),
            KeySource::Plan => f.write_str("plan"),
            KeySource::Claim(name) => write!(f, "claim:{name}"),
            KeySource::Attr(name) => write!(f, "attr:{name}"),
        }
    }
}

impl<'de> Deserialize<'de> for KeySource {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_from_str(deserializer, "a key source like \"client_ip\"")
    }
}

/// `on_missing_key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnMissingKey {
    /// Use the client address instead.
    ClientIp,
    /// Do not apply this limit.
    Skip,
    /// Reject the request.
    Deny,
}

/// `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Reject what the limit rejects.
    Enforce,
    /// Decide, count, log and emit headers, never reject.
    Shadow,
}

/// Which clients an `exempt` entry or override applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClientMatch {
    /// The client address is in this network.
    Cidr(IpNet),
    /// `source=value`: a header, query parameter, cookie or identity value
    /// (`consumer=`, `tenant=`, `plan=`, `claim:NAME=`, `attr:NAME=`) has
    /// this value.
    Source {
        /// Never `ClientIp`, `Route` or `Global`.
        source: KeySource,
        /// The exact value (non-empty).
        value: String,
    },
}

impl FromStr for ClientMatch {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let Some((source, value)) = text.split_once('=') else {
            return text
                .parse::<Cidr>()
                .map(|c| ClientMatch::Cidr(c.0))
                .map_err(|_| {
                    format!(
                        "expected a CIDR, an IP address or \"SOURCE=value\" (header:NAME, query:NAME, cookie:NAME, consumer, tenant, plan, claim:NAME, attr:NAME), got \"{text}\""
                    )
                });
        };
        let source: KeySource = source.trim().parse()?;
        if matches!(
            source,
            KeySource::ClientIp | KeySource::Route | KeySource::Global
        ) {
            return Err(format!(
                "\"{source}\" cannot be matched by value (use a CIDR for client addresses), got \"{text}\""
            ));
        }
        if value.is_empty() {
            return Err(format!("the value to match is empty, in \"{text}\""));
        }
        Ok(ClientMatch::Source {
            source,
            value: value.to_owned(),
        })
    }
}

impl fmt::Display for ClientMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientMatch::Cidr(net) => write!(f, "{net}"),
            ClientMatch::Source { source, value } => write!(f, "{source}={value}"),
        }
    }
}

impl<'de> Deserialize<'de> for ClientMatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_from_str(deserializer, "a CIDR or \"header:NAME=value\"")
    }
}

/// Other parameters for the clients that `matcher` selects: the limit's
/// own, with the fields the override sets replaced, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// Which clients.
    pub matcher: ClientMatch,
    /// Their parameters.
    pub params: AlgoParams,
}

/// One route.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Unique, non-empty; used in logs, metrics and headers.
    pub name: String,
    /// Lowercased host names; `*.example.com` matches any subdomain. Empty: any.
    pub hosts: Vec<String>,
    /// The path matcher.
    pub path: PathMatch,
    /// Uppercased methods; empty: any.
    pub methods: Vec<Method>,
    /// Header matchers (names lowercased), all of which must hold.
    pub headers: Vec<(HeaderName, HeaderMatch)>,
    /// What a matched request gets.
    pub action: RouteAction,
    /// The credentials the route requires, if any.
    pub auth: Option<super::consumers::RouteAuth>,
    /// Remove the matched `path` prefix before forwarding.
    pub strip_prefix: bool,
    /// With `strip_prefix`, put the prefix back into upstream redirects
    /// (`Location`, `Content-Location`; default true).
    pub rewrite_location: bool,
    /// Send the client's Host (true) or the target's authority (false).
    pub preserve_host: bool,
    /// Overrides the upstream's response-head timeout.
    pub timeout: Option<Duration>,
    /// Names of the route's limits, into `Config::limits`, in order.
    pub limits: Vec<String>,
    /// How rejections look.
    pub limit_response: LimitResponse,
    /// 1-based line of the route in the file; 0 if unknown.
    pub line: usize,
}

/// What a route does with a matched request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteAction {
    /// Forward to the upstream of this name.
    Upstream(String),
    /// Answer directly.
    Respond(RespondConfig),
}

/// `respond:`: a fixed answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespondConfig {
    /// Status (default 200).
    pub status: StatusCode,
    /// Body (default empty).
    pub body: String,
    /// Extra headers, in file order.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// `limit_response:` (docs/configuration/limit-response.md): a route's, or the server-wide default
/// for what a route leaves out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitResponse {
    /// Status of a rejection (default 429).
    pub status: StatusCode,
    /// Which rate-limit headers are sent.
    pub headers: HeaderStyle,
    /// The body of a rejection; `None`: the JSON body of docs/configuration/limit-response.md.
    pub body: Option<Template>,
    /// The body of a `locked_out` rejection; `None`: `body`.
    pub locked_body: Option<Template>,
    /// The body's content type; `None`: `application/json` for the JSON
    /// body, `text/plain; charset=utf-8` for a custom one.
    pub content_type: Option<HeaderValue>,
    /// The built-in body's form (`format`): the gateway's JSON, or RFC 9457
    /// problem details; a `body` template overrides either.
    pub format: ResponseFormat,
}

/// `limit_response.format` (docs/configuration/limit-response.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormat {
    /// `{"error", "limit", "retry_after", "request_id"}` (the default).
    #[default]
    Json,
    /// RFC 9457 problem details with the rate-limit draft's problem types
    /// (`application/problem+json`).
    Problem,
}

impl Default for LimitResponse {
    fn default() -> Self {
        LimitResponse {
            status: StatusCode::TOO_MANY_REQUESTS,
            headers: HeaderStyle::Standard,
            body: None,
            locked_body: None,
            content_type: None,
            format: ResponseFormat::Json,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sources() {
        let k = |s: &str| s.parse::<KeySource>();
        assert_eq!(k("client_ip"), Ok(KeySource::ClientIp));
        assert_eq!(
            k("header:X-User"),
            Ok(KeySource::Header(HeaderName::from_static("x-user")))
        );
        assert_eq!(k("query:api_key"), Ok(KeySource::Query("api_key".into())));
        assert_eq!(k("cookie:session"), Ok(KeySource::Cookie("session".into())));
        assert_eq!(k("route"), Ok(KeySource::Route));
        assert_eq!(k("global"), Ok(KeySource::Global));
        assert_eq!(
            k("ip"),
            Err("expected a key source (client_ip, header:NAME, query:NAME, cookie:NAME, route, global, consumer, tenant, plan, claim:NAME, attr:NAME), got \"ip\"".into())
        );
        assert!(k("header:").is_err());
        assert!(k("header:bad name").is_err());
        for text in [
            "client_ip",
            "header:x-user",
            "query:q",
            "cookie:c",
            "route",
            "global",
            "consumer",
            "tenant",
            "plan",
            "claim:org.id",
            "attr:tz",
        ] {
            assert_eq!(k(text).map(|s| s.to_string()), Ok(text.to_owned()));
        }
    }

    #[test]
    fn client_matches() {
        let m = |s: &str| s.parse::<ClientMatch>();
        assert_eq!(
            m("10.0.0.0/8").map(|c| c.to_string()),
            Ok("10.0.0.0/8".to_owned())
        );
        assert_eq!(
            m("203.0.113.7").map(|c| c.to_string()),
            Ok("203.0.113.7/32".to_owned())
        );
        assert_eq!(
            m("header:x-api-key=internal-batch"),
            Ok(ClientMatch::Source {
                source: KeySource::Header(HeaderName::from_static("x-api-key")),
                value: "internal-batch".into()
            })
        );
        assert_eq!(
            m("client_ip=1.2.3.4"),
            Err("\"client_ip\" cannot be matched by value (use a CIDR for client addresses), got \"client_ip=1.2.3.4\"".into())
        );
        assert!(m("route=x").is_err());
        assert!(m("header:x=").is_err());
        assert_eq!(
            m("nonsense"),
            Err("expected a CIDR, an IP address or \"SOURCE=value\" (header:NAME, query:NAME, cookie:NAME, consumer, tenant, plan, claim:NAME, attr:NAME), got \"nonsense\"".into())
        );
        assert_eq!(
            m("claim:org.id=acme"),
            Ok(ClientMatch::Source {
                source: KeySource::Claim("org.id".into()),
                value: "acme".into()
            })
        );
        assert_eq!(
            m("plan=gold").map(|c| c.to_string()),
            Ok("plan=gold".into())
        );
    }
}
