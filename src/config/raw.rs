//! The config file as written: serde types that mirror the YAML, with every
//! field optional where the file may leave it out. Unknown fields are
//! rejected here; everything else is checked in `validate`.

use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::consumers::{CertName, CredentialKind, JwtAlgorithm};
use super::cost::{LlmApi, OnMissingUsage, OnUpstreamError, StreamUsage};
use super::model::{
    Balance, ClientMatch, EscapedSlashes, HeaderStyle, KeySource, Mode, OnError, OnMissingKey,
    OtlpProtocol, ResponseFormat, TimeSource,
};
use super::units::{Addr, Cidr, Dur, Rate, Size, Window};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields server, admin, store, upstreams, limits, routes, consumers, telemetry"
)]
pub(crate) struct RawConfig {
    pub server: Option<RawServer>,
    pub admin: Option<RawAdmin>,
    pub store: Option<RawStore>,
    #[serde(default)]
    pub upstreams: Ordered<RawUpstream>,
    #[serde(default)]
    pub limits: Ordered<RawLimit>,
    pub routes: Option<Vec<RawRoute>>,
    pub consumers: Option<RawConsumers>,
    pub telemetry: Option<RawTelemetry>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields otlp, sample, service_name"
)]
pub(crate) struct RawTelemetry {
    pub otlp: Option<RawOtlp>,
    pub sample: Option<f64>,
    pub service_name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields endpoint, protocol, headers"
)]
pub(crate) struct RawOtlp {
    pub endpoint: Option<String>,
    pub protocol: Option<OtlpProtocol>,
    #[serde(default)]
    pub headers: Ordered<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields listen, tls, trusted_proxies, deny, ipv6_prefix, timeouts, max_header_bytes, max_body_bytes, max_connections, shutdown_grace, escaped_slashes, limit_response"
)]
pub(crate) struct RawServer {
    pub listen: Option<Vec<Addr>>,
    pub tls: Option<RawServerTls>,
    pub trusted_proxies: Option<Vec<Cidr>>,
    pub deny: Option<Vec<Cidr>>,
    pub ipv6_prefix: Option<u8>,
    pub timeouts: Option<RawTimeouts>,
    pub max_header_bytes: Option<Size>,
    pub max_body_bytes: Option<Size>,
    pub max_connections: Option<usize>,
    pub shutdown_grace: Option<Dur>,
    pub escaped_slashes: Option<EscapedSlashes>,
    pub limit_response: Option<RawLimitResponse>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields listen, certificates, client_auth"
)]
pub(crate) struct RawServerTls {
    pub listen: Option<Vec<Addr>>,
    pub certificates: Option<Vec<RawCertificate>>,
    pub client_auth: Option<RawClientAuth>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with fields ca, required")]
pub(crate) struct RawClientAuth {
    pub ca: Option<PathBuf>,
    pub required: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with fields cert, key")]
pub(crate) struct RawCertificate {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields header_read, idle, body_read, send"
)]
pub(crate) struct RawTimeouts {
    pub header_read: Option<Dur>,
    pub idle: Option<Dur>,
    pub body_read: Option<Dur>,
    pub send: Option<Dur>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with fields listen, token")]
pub(crate) struct RawAdmin {
    #[serde(default)]
    pub listen: AdminListen,
    pub token: Option<String>,
}

/// `admin.listen`: absent keeps the default; `""` or `null` disables.
#[derive(Debug, Default)]
pub(crate) enum AdminListen {
    #[default]
    Default,
    Disabled,
    At(Addr),
}

impl<'de> Deserialize<'de> for AdminListen {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AdminListen;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address like \"127.0.0.1:9901\", or \"\" to disable")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<AdminListen, E> {
                if v.trim().is_empty() {
                    Ok(AdminListen::Disabled)
                } else {
                    v.parse().map(AdminListen::At).map_err(E::custom)
                }
            }
            fn visit_unit<E: de::Error>(self) -> Result<AdminListen, E> {
                Ok(AdminListen::Disabled)
            }
            fn visit_none<E: de::Error>(self) -> Result<AdminListen, E> {
                Ok(AdminListen::Disabled)
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields backend, url, urls, master_name, tls, prefix, timeout, on_error, clock"
)]
pub(crate) struct RawStore {
    pub backend: Option<RawBackend>,
    pub url: Option<String>,
    pub urls: Option<Vec<String>>,
    pub master_name: Option<String>,
    pub tls: Option<RawStoreTls>,
    pub prefix: Option<String>,
    pub timeout: Option<Dur>,
    pub on_error: Option<OnError>,
    pub clock: Option<TimeSource>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields ca, cert, key, server_name"
)]
pub(crate) struct RawStoreTls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub server_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RawBackend {
    Memory,
    Redis,
    RedisSentinel,
    RedisCluster,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields targets, balance, connect_timeout, timeout, retries, http2, tls, health"
)]
pub(crate) struct RawUpstream {
    pub targets: Option<Vec<RawTarget>>,
    pub balance: Option<Balance>,
    pub connect_timeout: Option<Dur>,
    pub timeout: Option<Dur>,
    pub retries: Option<u32>,
    pub http2: Option<bool>,
    pub tls: Option<RawUpstreamTls>,
    pub health: Option<RawHealth>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields ca, verify, server_name, cert, key"
)]
pub(crate) struct RawUpstreamTls {
    pub ca: Option<PathBuf>,
    pub verify: Option<bool>,
    pub server_name: Option<String>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// A target: a URL string or `{url, weight}`.
#[derive(Debug)]
pub(crate) struct RawTarget {
    pub url: String,
    pub weight: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with fields url, weight")]
struct RawTargetMap {
    url: String,
    weight: Option<u32>,
}

impl<'de> Deserialize<'de> for RawTarget {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawTarget;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a URL or {url, weight}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawTarget, E> {
                Ok(RawTarget {
                    url: v.to_owned(),
                    weight: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawTarget, A::Error> {
                let m = RawTargetMap::deserialize(MapAccessDeserializer::new(map))?;
                Ok(RawTarget {
                    url: m.url,
                    weight: m.weight,
                })
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields passive, active"
)]
pub(crate) struct RawHealth {
    pub passive: Option<RawPassive>,
    pub active: Option<RawActive>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields failures, eject"
)]
pub(crate) struct RawPassive {
    pub failures: Option<u32>,
    pub eject: Option<Dur>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields path, interval, timeout, healthy, unhealthy"
)]
pub(crate) struct RawActive {
    pub path: Option<String>,
    pub interval: Option<Dur>,
    pub timeout: Option<Dur>,
    pub healthy: Option<u32>,
    pub unhealthy: Option<u32>,
}

/// The algorithm names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AlgorithmKind {
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    TokenBucket,
    Gcra,
    LeakyBucket,
    Concurrency,
}

/// A limit, flat as written: the algorithm's parameters sit next to
/// `algorithm`, and `validate` checks which belong.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields name, algorithm, limit, window, rate, burst, max_delay, lease, key, on_missing_key, cost, mode, lockout, exempt, overrides, distribution"
)]
pub(crate) struct RawLimit {
    pub name: Option<String>,
    pub algorithm: AlgorithmKind,
    pub limit: Option<PerKey<u64>>,
    pub window: Option<RawWindow>,
    pub rate: Option<PerKey<Rate>>,
    pub burst: Option<PerKey<u64>>,
    pub max_delay: Option<Dur>,
    pub lease: Option<Dur>,
    pub key: Option<OneOrMany<KeySource>>,
    pub on_missing_key: Option<OnMissingKey>,
    pub cost: Option<RawCost>,
    pub mode: Option<Mode>,
    pub lockout: Option<RawLockout>,
    pub exempt: Option<Vec<ClientMatch>>,
    pub overrides: Option<Vec<RawOverride>>,
    pub distribution: Option<RawDistribution>,
}

/// `distribution:` as written: `exact`, or `{lease, ttl}`.
#[derive(Debug, Clone)]
pub(crate) enum RawDistribution {
    Exact,
    Leased(RawLease),
}

/// `distribution: { lease: N, ttl: DURATION }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with fields lease, ttl")]
pub(crate) struct RawLease {
    pub lease: u64,
    pub ttl: Option<Dur>,
}

impl<'de> Deserialize<'de> for RawDistribution {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawDistribution;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`exact` or a mapping with fields lease, ttl")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawDistribution, E> {
                match v {
                    "exact" => Ok(RawDistribution::Exact),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawDistribution, A::Error> {
                RawLease::deserialize(MapAccessDeserializer::new(map)).map(RawDistribution::Leased)
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields after, within, duration, escalate, max_duration, forget_after"
)]
pub(crate) struct RawLockout {
    pub after: Option<u32>,
    pub within: Option<Dur>,
    pub duration: Option<Dur>,
    pub escalate: Option<u32>,
    pub max_duration: Option<Dur>,
    pub forget_after: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields match, limit, rate, burst, window"
)]
pub(crate) struct RawOverride {
    #[serde(rename = "match")]
    pub matcher: ClientMatch,
    pub limit: Option<u64>,
    pub rate: Option<Rate>,
    pub burst: Option<u64>,
    pub window: Option<Window>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields name, match, upstream, respond, strip_prefix, rewrite_location, preserve_host, timeout, auth, limits, limit_response"
)]
pub(crate) struct RawRoute {
    pub name: String,
    #[serde(rename = "match")]
    pub matcher: Option<RawMatch>,
    pub upstream: Option<String>,
    pub respond: Option<RawRespond>,
    pub strip_prefix: Option<bool>,
    pub rewrite_location: Option<bool>,
    pub preserve_host: Option<bool>,
    pub timeout: Option<Dur>,
    pub auth: Option<RawRouteAuth>,
    pub limits: Option<Vec<RawRouteLimit>>,
    pub limit_response: Option<RawLimitResponse>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields require, plans, consumers, tenants"
)]
pub(crate) struct RawRouteAuth {
    pub require: Option<OneOrMany<CredentialKind>>,
    pub plans: Option<Vec<String>>,
    pub consumers: Option<Vec<String>>,
    pub tenants: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields hosts, path, exact, regex, methods, headers"
)]
pub(crate) struct RawMatch {
    pub hosts: Option<Vec<String>>,
    pub path: Option<String>,
    pub exact: Option<String>,
    pub regex: Option<String>,
    pub methods: Option<Vec<String>>,
    #[serde(default)]
    pub headers: Ordered<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields status, body, headers"
)]
pub(crate) struct RawRespond {
    pub status: Option<u16>,
    pub body: Option<String>,
    #[serde(default)]
    pub headers: Ordered<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields status, headers, body, content_type, locked_body, format"
)]
pub(crate) struct RawLimitResponse {
    pub status: Option<u16>,
    pub headers: Option<HeaderStyle>,
    pub body: Option<String>,
    pub content_type: Option<String>,
    pub locked_body: Option<String>,
    pub format: Option<ResponseFormat>,
}

/// `limit`, `rate` or `burst` as written: a value, or `{default, from}`
/// (each key's own value from the store or the consumer's attribute).
#[derive(Debug, Clone)]
pub(crate) enum PerKey<T> {
    Value(T),
    From(RawFrom<T>),
}

/// `{ default: VALUE, from: store | attr:NAME }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with fields default, from")]
pub(crate) struct RawFrom<T> {
    pub default: T,
    pub from: String,
}

impl<T> PerKey<T> {
    /// Where a per-key value comes from, as written; `None` for a value.
    pub(super) fn from(&self) -> Option<&str> {
        match self {
            PerKey::Value(_) => None,
            PerKey::From(f) => Some(&f.from),
        }
    }

    /// The value, or the default of a per-key one.
    pub(super) fn value(&self) -> &T {
        match self {
            PerKey::Value(v) => v,
            PerKey::From(f) => &f.default,
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for PerKey<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::IntoDeserializer;
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = PerKey<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value, or {default: VALUE, from: store | attr:NAME}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PerKey<T>, E> {
                T::deserialize(v.into_deserializer()).map(PerKey::Value)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PerKey<T>, E> {
                T::deserialize(v.into_deserializer()).map(PerKey::Value)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<PerKey<T>, E> {
                T::deserialize(v.into_deserializer()).map(PerKey::Value)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<PerKey<T>, E> {
                T::deserialize(v.into_deserializer()).map(PerKey::Value)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PerKey<T>, E> {
                T::deserialize(de::value::StrDeserializer::<E>::new(v)).map(PerKey::Value)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PerKey<T>, A::Error> {
                RawFrom::deserialize(MapAccessDeserializer::new(map)).map(PerKey::From)
            }
        }
        deserializer.deserialize_any(V(PhantomData))
    }
}

/// `cost:` as written: units per request, or `{reserve, settle, ...}`.
#[derive(Debug, Clone)]
pub(crate) enum RawCost {
    Units(u64),
    Spec(Box<RawCostSpec>),
}

/// `cost: { reserve, settle, llm, ... }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields reserve, settle, llm, on_missing_usage, on_upstream_error, settle_within"
)]
pub(crate) struct RawCostSpec {
    pub reserve: Option<NumberOrWord>,
    pub settle: Option<String>,
    pub llm: Option<RawLlmCost>,
    pub on_missing_usage: Option<OnMissingUsage>,
    pub on_upstream_error: Option<OnUpstreamError>,
    pub settle_within: Option<Dur>,
}

/// `cost.llm`.
#[derive(Debug, Clone, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields api, default_max_output, bytes_per_token, cap_output, stream_usage, other_requests"
)]
pub(crate) struct RawLlmCost {
    pub api: Option<LlmApi>,
    pub default_max_output: Option<u64>,
    pub bytes_per_token: Option<u64>,
    pub cap_output: Option<bool>,
    pub stream_usage: Option<StreamUsage>,
    pub other_requests: Option<u64>,
}

impl<'de> Deserialize<'de> for RawCost {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawCost;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("units per request (a whole number), or {reserve, settle, ...}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawCost, E> {
                Ok(RawCost::Units(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawCost, E> {
                u64::try_from(v)
                    .map(RawCost::Units)
                    .map_err(|_| E::custom(format!("cost must be at least 1, got {v}")))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawCost, A::Error> {
                RawCostSpec::deserialize(MapAccessDeserializer::new(map))
                    .map(|s| RawCost::Spec(Box::new(s)))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `window:` as written: a duration or `month`, or a calendar period.
#[derive(Debug, Clone)]
pub(crate) enum RawWindow {
    Plain(Window),
    Calendar(RawCalendar),
}

/// `window: { calendar: month, tz: ..., anchor_day: ... }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields calendar, tz, anchor_day, anchor_month, week_start, anchor_time"
)]
pub(crate) struct RawCalendar {
    pub calendar: String,
    pub tz: Option<String>,
    pub anchor_day: Option<NumberOrWord>,
    pub anchor_month: Option<u8>,
    pub week_start: Option<String>,
    pub anchor_time: Option<String>,
}

/// A whole number, or a word (`anchor_day: 15 | attr:NAME`, `reserve: 100 |
/// llm`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, expecting = "a whole number or a word")]
pub(crate) enum NumberOrWord {
    Number(u64),
    Word(String),
}

impl<'de> Deserialize<'de> for RawWindow {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawWindow;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a window like \"1m\" or \"month\", or {calendar: month, tz, ...}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawWindow, E> {
                v.parse().map(RawWindow::Plain).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawWindow, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawWindow, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawWindow, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawWindow, A::Error> {
                RawCalendar::deserialize(MapAccessDeserializer::new(map)).map(RawWindow::Calendar)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A route's `limits:` entry: a policy name or an inline limit.
#[derive(Debug)]
pub(crate) enum RawRouteLimit {
    Name(String),
    Inline(Box<RawLimit>),
}

impl<'de> Deserialize<'de> for RawRouteLimit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawRouteLimit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a limit name or an inline limit")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawRouteLimit, E> {
                Ok(RawRouteLimit::Name(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawRouteLimit, A::Error> {
                RawLimit::deserialize(MapAccessDeserializer::new(map))
                    .map(|l| RawRouteLimit::Inline(Box::new(l)))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A YAML mapping kept in file order, as `(key, value)` pairs; `null` is
/// empty. Duplicate keys are kept for `validate` to report.
#[derive(Debug)]
pub(crate) struct Ordered<V>(pub Vec<(String, V)>);

impl<V> Default for Ordered<V> {
    fn default() -> Self {
        Ordered(Vec::new())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Ordered<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Vis<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Vis<V> {
            type Value = Ordered<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Ordered<V>, E> {
                Ok(Ordered::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered<V>, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Ordered(entries))
            }
        }
        deserializer.deserialize_any(Vis(PhantomData))
    }
}

/// One item or a list of them (`key: client_ip` or `key: [a, b]`).
#[derive(Debug)]
pub(crate) struct OneOrMany<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Vis<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Vis<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("one value or a list")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OneOrMany<T>, E> {
                T::deserialize(de::value::StrDeserializer::<E>::new(v)).map(|t| OneOrMany(vec![t]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMany<T>, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(OneOrMany(items))
            }
        }
        deserializer.deserialize_any(Vis(PhantomData))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields api_keys, jwt, mtls, file, list, identity_headers, failure_limit"
)]
pub(crate) struct RawConsumers {
    pub api_keys: Option<RawApiKeys>,
    pub jwt: Option<RawJwt>,
    pub mtls: Option<RawMtls>,
    pub file: Option<PathBuf>,
    pub list: Option<Vec<RawConsumer>>,
    pub identity_headers: Option<RawIdentityHeaders>,
    pub failure_limit: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields header, query, hide"
)]
pub(crate) struct RawApiKeys {
    pub header: Option<String>,
    pub query: Option<String>,
    pub hide: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields header, issuers, hide"
)]
pub(crate) struct RawJwt {
    pub header: Option<String>,
    pub issuers: Option<Vec<RawIssuer>>,
    pub hide: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields issuer, audiences, algorithms, jwks, keys, secret, leeway, consumer, tenant, plan"
)]
pub(crate) struct RawIssuer {
    pub issuer: Option<String>,
    pub audiences: Option<OneOrMany<String>>,
    pub algorithms: Option<Vec<JwtAlgorithm>>,
    pub jwks: Option<RawJwks>,
    pub keys: Option<Vec<RawPemKey>>,
    pub secret: Option<String>,
    pub leeway: Option<Dur>,
    pub consumer: Option<String>,
    pub tenant: Option<String>,
    pub plan: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields url, refresh, file"
)]
pub(crate) struct RawJwks {
    pub url: Option<String>,
    pub refresh: Option<Dur>,
    pub file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with fields pem")]
pub(crate) struct RawPemKey {
    pub pem: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with fields consumer")]
pub(crate) struct RawMtls {
    pub consumer: Option<CertName>,
}

/// One consumer, in `list` or in the consumers file.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields name, tenant, plan, keys, attributes"
)]
pub(crate) struct RawConsumer {
    pub name: String,
    pub tenant: Option<String>,
    pub plan: Option<String>,
    pub keys: Option<Vec<String>>,
    #[serde(default)]
    pub attributes: Ordered<serde_yaml::Value>,
}

/// The consumers file written as a mapping, `{list: [...]}` (it may also
/// be the list alone).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with fields list")]
pub(crate) struct RawConsumersFile {
    pub list: Vec<RawConsumer>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with fields consumer, tenant, plan"
)]
pub(crate) struct RawIdentityHeaders {
    pub consumer: Option<String>,
    pub tenant: Option<String>,
    pub plan: Option<String>,
}
