//! Client keys (docs/configuration/limits.md): what a limit counts a request against.
//!
//! A limit's `key` is a list of sources; each gives one component of the
//! request's key. The store never sees a component: [`client_key`] hashes
//! them, length-prefixed and tagged, into a 128-bit [`StoreKey`], and keeps a
//! human-readable [`ClientKey::display`] for logs and the admin API, which
//! [`store_key_of_display`] turns back into the same store key (and refuses,
//! with the reason, a display key no request could have).
//!
//! On the request path a limit hashes its namespace once ([`KeyPrefix`],
//! kept in its policy) and computes only the store key
//! ([`KeyPrefix::store_key`]); the display form, needed only when a lockout
//! starts, is built then from the same request ([`display_key`]). All of
//! these are one walk over the sources (`walk`) feeding a hash, a display
//! string, or both.
//!
//! Component values:
//!
//! - `client_ip`: the resolved client address, IPv6 masked to
//!   `ipv6_prefix` bits (IPv4-mapped IPv6 counts as IPv4).
//! - `header:NAME`: the header's value as bytes. Several lines of the header
//!   are one value, joined with `", "` (RFC 9110 §5.3).
//! - `query:NAME`: the first occurrence of the parameter, percent-decoded
//!   with form semantics (`+` is a space; a malformed `%` escape stays as
//!   written). Parameter names are decoded the same way before comparing.
//! - `cookie:NAME`: the first cookie of that (case-sensitive) name across
//!   every `Cookie` line, as sent (quotes included).
//! - `route`: the route's name.
//! - `global`: a constant.
//! - `consumer`, `tenant`, `plan`: the verified consumer's name, tenant and
//!   plan; `claim:NAME`: a claim of its verified JWT (a string as itself,
//!   another value as its JSON text; `a.b` nested); `attr:NAME`: its
//!   configured attribute. Missing without a verified consumer.
//!
//! A header, query parameter or cookie that is absent *or empty* is missing,
//! and `on_missing_key` decides.
//!
//! # Display
//!
//! Components joined with `|`. Each text value escapes `%` as `%25`, `|` as
//! `%7C`, a leading `@` as `%40`, control bytes and bytes that are not UTF-8
//! as `%XX`. A client address shows as the address, an IPv6 group with its
//! prefix (`2001:db8:1:2::/64`). A missing component replaced by the client
//! address (`on_missing_key: client_ip`) shows as `@` and the address. `global`
//! shows as `global`.
//!
//! # Store key
//!
//! The first 16 bytes of SHA-256 over the namespace and every component,
//! each as a big-endian `u64` length and its bytes. A component is one kind
//! byte (`i` address, `h` header, `q` query, `c` cookie, `r` route, `g`
//! global, `n` consumer, `t` tenant, `p` plan, `j` claim, `a` attribute)
//! then its value (an address as its 4 or 16 octets), so a header
//! value can never collide with a substituted address.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::IpAddr;

use http::header::{HeaderMap, HeaderName, COOKIE};
use percent_encoding::percent_decode;

use tollgate_limit::key::KeyHasher;
use tollgate_limit::StoreKey;

use crate::client_addr::{canonical_ip, group_ipv6, in_any};
use crate::config::{is_printable_name, ClientMatch, KeySource, OnMissingKey};

/// What the key sources can read of a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// The client address, already resolved through trusted proxies.
    pub client: IpAddr,
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The raw query string (without `?`), if the target had one.
    pub query: Option<&'a str>,
    /// The matched route's name.
    pub route: &'a str,
    /// `server.ipv6_prefix`: how many leading bits of an IPv6 address are
    /// one client.
    pub ipv6_prefix: u8,
    /// The verified consumer, if the request has one.
    pub identity: Option<&'a dyn Consumer>,
}

/// What identity key sources read of a verified consumer (the gateway's
/// `auth::Identity` is one): keys need not know how it was verified.
pub trait Consumer: Sync + std::fmt::Debug {
    /// Its name.
    fn name(&self) -> &str;
    /// Its tenant.
    fn tenant(&self) -> Option<&str>;
    /// Its plan.
    fn plan(&self) -> Option<&str>;
    /// Claim `path` of the token that verified it, as key bytes.
    fn claim(&self, path: &str) -> Option<Cow<'_, [u8]>>;
    /// Its attribute `name`.
    fn attr(&self, name: &str) -> Option<&str>;
}

/// What one limit makes of a request's key: `K` is a [`ClientKey`] (store
/// key and display), or just the [`StoreKey`] on the hot path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOutcome<K = ClientKey> {
    /// Count the request against this key.
    Key(K),
    /// A component is missing and `on_missing_key: skip`: the limit does
    /// not apply.
    Skip,
    /// A component is missing and `on_missing_key: deny`: reject.
    Deny,
}

impl<K> KeyOutcome<K> {
    fn map<U>(self, f: impl FnOnce(K) -> U) -> KeyOutcome<U> {
        match self {
            KeyOutcome::Key(k) => KeyOutcome::Key(f(k)),
            KeyOutcome::Skip => KeyOutcome::Skip,
            KeyOutcome::Deny => KeyOutcome::Deny,
        }
    }
}

/// A request's key under one limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientKey {
    /// Readable form for logs and the admin API (see the module doc).
    pub display: String,
    /// What the store is keyed by.
    pub store: StoreKey,
}

/// Kind bytes, the first byte of every hashed component.
const TAG_IP: u8 = b'i';
const TAG_HEADER: u8 = b'h';
const TAG_QUERY: u8 = b'q';
const TAG_COOKIE: u8 = b'c';
const TAG_ROUTE: u8 = b'r';
const TAG_GLOBAL: u8 = b'g';
const TAG_CONSUMER: u8 = b'n';
const TAG_TENANT: u8 = b't';
const TAG_PLAN: u8 = b'p';
const TAG_CLAIM: u8 = b'j';
const TAG_ATTR: u8 = b'a';

/// How `global` shows in a display key.
const GLOBAL_DISPLAY: &str = "global";

/// Marks a client address standing in for a missing component.
const SUBSTITUTE: char = '@';

/// The client address as a key component: its kind byte, then its 4 or 16
/// octets.
fn hash_ip(h: &mut KeyHasher, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => h.component(&[&[TAG_IP], &v4.octets()]),
        IpAddr::V6(v6) => h.component(&[&[TAG_IP], &v6.octets()]),
    }
}

/// A limit's namespace, hashed once: a SHA-256 state already fed with the
/// namespace component, cloned for each request, so a request's key costs
/// only its own components. Gives the same store keys as [`client_key`]
/// with that namespace.
#[derive(Clone)]
pub struct KeyPrefix(KeyHasher);

impl std::fmt::Debug for KeyPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPrefix(..)")
    }
}

impl KeyPrefix {
    /// The prefix of `namespace` (see [`client_key`]).
    pub fn new(namespace: &[u8]) -> Self {
        KeyPrefix(KeyHasher::new(namespace))
    }

    /// The store key alone, for the request path: no display form is built
    /// ([`display_key`] gives it later from the same view when needed).
    pub fn store_key(
        &self,
        sources: &[KeySource],
        on_missing: OnMissingKey,
        view: &RequestView<'_>,
    ) -> KeyOutcome<StoreKey> {
        let mut hasher = self.0.clone();
        walk(sources, on_missing, view, &mut hasher).map(|()| hasher.finish())
    }

    /// The store key and the display form, as [`client_key`].
    pub fn client_key(
        &self,
        sources: &[KeySource],
        on_missing: OnMissingKey,
        view: &RequestView<'_>,
    ) -> KeyOutcome {
        let mut sink = (self.0.clone(), String::with_capacity(48));
        walk(sources, on_missing, view, &mut sink).map(|()| ClientKey {
            store: sink.0.finish(),
            display: sink.1,
        })
    }
}

/// The key of one limit for this request. `namespace` identifies the limit's
/// state space (the engine passes bytes derived from the limit's name,
/// algorithm and key spec). A limit used for many requests keeps a
/// [`KeyPrefix`] instead, which hashes the namespace once.
pub fn client_key(
    namespace: &[u8],
    sources: &[KeySource],
    on_missing: OnMissingKey,
    view: &RequestView<'_>,
) -> KeyOutcome {
    KeyPrefix::new(namespace).client_key(sources, on_missing, view)
}

/// The display form of the key [`client_key`] gives for this request
/// (`None` when it gives no key: a missing component skipped or denied).
/// Hashes nothing: for a key whose store key was computed without its
/// display ([`KeyPrefix::store_key`]) and which turns out to need one.
pub fn display_key(
    sources: &[KeySource],
    on_missing: OnMissingKey,
    view: &RequestView<'_>,
) -> Option<String> {
    let mut display = String::with_capacity(48);
    match walk(sources, on_missing, view, &mut display) {
        KeyOutcome::Key(()) => Some(display),
        KeyOutcome::Skip | KeyOutcome::Deny => None,
    }
}

/// Where [`walk`] sends a key's components: the hash ([`KeyHasher`]), the
/// display form (`String`), or both (a pair).
trait KeySink {
    /// Before every component but the first.
    fn separator(&mut self);
    /// The (grouped) client address; `substitute`: it stands in for a
    /// missing component.
    fn ip(&mut self, ip: IpAddr, ipv6_prefix: u8, substitute: bool);
    /// A text component (header, query, cookie, route) with its kind byte.
    fn value(&mut self, tag: u8, value: &[u8]);
    /// `global`.
    fn global(&mut self);
}

impl KeySink for KeyHasher {
    fn separator(&mut self) {}

    fn ip(&mut self, ip: IpAddr, _ipv6_prefix: u8, _substitute: bool) {
        hash_ip(self, ip);
    }

    fn value(&mut self, tag: u8, value: &[u8]) {
        self.component(&[&[tag], value]);
    }

    fn global(&mut self) {
        self.component(&[&[TAG_GLOBAL]]);
    }
}

impl KeySink for String {
    fn separator(&mut self) {
        self.push('|');
    }

    fn ip(&mut self, ip: IpAddr, ipv6_prefix: u8, substitute: bool) {
        if substitute {
            self.push(SUBSTITUTE);
        }
        push_ip(self, ip, ipv6_prefix);
    }

    fn value(&mut self, _tag: u8, value: &[u8]) {
        push_escaped(self, value);
    }

    fn global(&mut self) {
        self.push_str(GLOBAL_DISPLAY);
    }
}

impl<A: KeySink, B: KeySink> KeySink for (A, B) {
    fn separator(&mut self) {
        self.0.separator();
        self.1.separator();
    }

    fn ip(&mut self, ip: IpAddr, ipv6_prefix: u8, substitute: bool) {
        self.0.ip(ip, ipv6_prefix, substitute);
        self.1.ip(ip, ipv6_prefix, substitute);
    }

    fn value(&mut self, tag: u8, value: &[u8]) {
        self.0.value(tag, value);
        self.1.value(tag, value);
    }

    fn global(&mut self) {
        self.0.global();
        self.1.global();
    }
}

/// The one walk of a limit's key sources over a request: each component goes
/// to `sink`, in order. `Key(())` when every component was found (or
/// replaced by the client address).
fn walk<S: KeySink>(
    sources: &[KeySource],
    on_missing: OnMissingKey,
    view: &RequestView<'_>,
    sink: &mut S,
) -> KeyOutcome<()> {
    for (i, source) in sources.iter().enumerate() {
        if i > 0 {
            sink.separator();
        }
        let (tag, value) = match source {
            KeySource::ClientIp => {
                sink.ip(client_group(view), view.ipv6_prefix, false);
                continue;
            }
            KeySource::Route => {
                sink.value(TAG_ROUTE, view.route.as_bytes());
                continue;
            }
            KeySource::Global => {
                sink.global();
                continue;
            }
            KeySource::Header(name) => (TAG_HEADER, header_value(view.headers, name)),
            KeySource::Query(name) => (TAG_QUERY, view.query.and_then(|q| query_value(q, name))),
            KeySource::Cookie(name) => (TAG_COOKIE, cookie_value(view.headers, name)),
            identity => (tag_of(identity), identity_value(identity, view.identity)),
        };
        match value.filter(|v| !v.is_empty()) {
            Some(v) => sink.value(tag, &v),
            None => match on_missing {
                OnMissingKey::Skip => return KeyOutcome::Skip,
                OnMissingKey::Deny => return KeyOutcome::Deny,
                OnMissingKey::ClientIp => sink.ip(client_group(view), view.ipv6_prefix, true),
            },
        }
    }
    KeyOutcome::Key(())
}

/// What decides the display keys a limit's requests can have, besides its
/// key sources: for [`store_key_of_display`].
#[derive(Debug, Clone, Copy)]
pub struct KeyDomain<'a> {
    /// The limit's `on_missing_key`: only `client_ip` stands the client
    /// address (`@addr`) in for a missing component.
    pub on_missing: OnMissingKey,
    /// The names of the routes whose requests the limit counts: what a
    /// `route` component can be.
    pub routes: &'a [&'a str],
}

/// Why a display key is no key the limit's requests can have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DisplayKeyError {
    /// Not one component per key source.
    #[error("{got} component(s) joined with `|`, where the limit's key has {expected} ({spec})")]
    Components {
        /// How many the key has.
        got: usize,
        /// How many the limit's key sources give.
        expected: usize,
        /// The key sources, comma-separated.
        spec: String,
    },
    /// A component its source could never give.
    #[error("component {index} ({spec}): {reason}")]
    Component {
        /// Its position, from 1.
        index: usize,
        /// Its key source, as configured (`header:x-tenant`).
        spec: String,
        /// Why no request has it.
        reason: Cow<'static, str>,
    },
}

/// The store key of a display key typed by an operator (admin
/// `/limits/{limit}/{key}` and `/quotas/{limit}/{key}`, after URL
/// decoding): the inverse of [`ClientKey::display`], for the keys a request
/// can have. An error says which component no request could give its
/// source (a `%` that starts no escape, a bad address, `global` spelled
/// otherwise, an empty value, `@` and an address where the limit never
/// substitutes the client address, or a value its source never yields),
/// or that the number of components is wrong. What a source yields:
///
/// - `header:NAME`: no control byte but tab, and no space or tab at either
///   end (HTTP/1.1 parsers strip them, HTTP/2 refuses them). Several lines
///   are one value joined with `", "`, so a value may end in `", "` when
///   its last line was empty.
/// - `cookie:NAME`: the same bytes as a header line, without `;` (which
///   ends a cookie) and without whitespace at either end (trimmed).
/// - `query:NAME`: any bytes (the parameter is percent-decoded).
/// - `consumer`, `tenant`, `plan`: printable ASCII without spaces, as every
///   consumer's names are ([`crate::config::is_printable_name`]).
/// - `claim:NAME`, `attr:NAME`: any text (UTF-8): a claim is a JSON string
///   or JSON text, an attribute a configured string, number or boolean.
/// - `route`: the name of a route the limit counts requests of
///   ([`KeyDomain::routes`]).
///
/// An address may be typed with a prefix length (`2001:db8::1/64` is the
/// group `2001:db8::/64`); without one, an IPv6 address is taken whole, as
/// displayed when `ipv6_prefix` is 128.
pub fn store_key_of_display(
    namespace: &[u8],
    sources: &[KeySource],
    domain: &KeyDomain<'_>,
    display: &str,
) -> Result<StoreKey, DisplayKeyError> {
    let parts: Vec<&str> = display.split('|').collect();
    if parts.len() != sources.len() {
        let spec: Vec<String> = sources.iter().map(ToString::to_string).collect();
        return Err(DisplayKeyError::Components {
            got: parts.len(),
            expected: sources.len(),
            spec: spec.join(", "),
        });
    }
    let mut hasher = KeyHasher::new(namespace);
    for (i, (source, part)) in sources.iter().zip(parts).enumerate() {
        component(&mut hasher, source, domain, part).map_err(|reason| {
            DisplayKeyError::Component {
                index: i + 1,
                spec: source.to_string(),
                reason,
            }
        })?;
    }
    Ok(hasher.finish())
}

/// One component of a display key, hashed into `hasher`; or why `source`
/// never gives it.
fn component(
    hasher: &mut KeyHasher,
    source: &KeySource,
    domain: &KeyDomain<'_>,
    part: &str,
) -> Result<(), Cow<'static, str>> {
    const NOT_AN_ADDRESS: &str =
        "not an address (a.b.c.d, or an IPv6 address or group: 2001:db8::/64)";
    match source {
        KeySource::ClientIp => {
            hash_ip(hasher, parse_ip(part).ok_or(NOT_AN_ADDRESS)?);
            return Ok(());
        }
        KeySource::Global => {
            if part != GLOBAL_DISPLAY {
                return Err("a `global` component is always `global`".into());
            }
            hasher.component(&[&[TAG_GLOBAL]]);
            return Ok(());
        }
        _ => {}
    }
    if let Some(addr) = part.strip_prefix(SUBSTITUTE) {
        substitutes(source, domain.on_missing)?;
        hash_ip(hasher, parse_ip(addr).ok_or(NOT_AN_ADDRESS)?);
        return Ok(());
    }
    let value = unescape(part)
        .ok_or("a `%` must start an escape of two hex digits (`%7C` is `|`, `%25` is `%`)")?;
    if value.is_empty() {
        return Err("an empty value is a missing one, which makes no key".into());
    }
    producible(source, &value, domain)?;
    hasher.component(&[&[tag_of(source)], &value]);
    Ok(())
}

/// Whether a limit stands the client address in for a missing `source`
/// (`@addr` in a display key): only with `on_missing_key: client_ip`, and
/// only for a source that can be missing.
fn substitutes(source: &KeySource, on_missing: OnMissingKey) -> Result<(), Cow<'static, str>> {
    if *source == KeySource::Route {
        return Err("a route is never missing, so never stood in for by `@` and an address".into());
    }
    match on_missing {
        OnMissingKey::ClientIp => Ok(()),
        OnMissingKey::Skip | OnMissingKey::Deny => Err(
            "`@` and an address stand in for a missing value only with `on_missing_key: client_ip` (write a leading `@` of a value as `%40`)"
                .into(),
        ),
    }
}

/// Whether some request gives `source` the (non-empty) `value`: the rules
/// of [`store_key_of_display`].
fn producible(
    source: &KeySource,
    value: &[u8],
    domain: &KeyDomain<'_>,
) -> Result<(), Cow<'static, str>> {
    match source {
        KeySource::Header(_) => header_producible(value).map_err(Cow::Borrowed),
        KeySource::Cookie(_) => cookie_producible(value).map_err(Cow::Borrowed),
        KeySource::Query(_) | KeySource::ClientIp | KeySource::Global => Ok(()),
        KeySource::Consumer => printable(value, "a consumer name"),
        KeySource::Tenant => printable(value, "a tenant"),
        KeySource::Plan => printable(value, "a plan"),
        KeySource::Claim(_) => text(value, "a claim"),
        KeySource::Attr(_) => text(value, "an attribute"),
        KeySource::Route => {
            let known = std::str::from_utf8(value).is_ok_and(|v| domain.routes.contains(&v));
            if known {
                return Ok(());
            }
            Err(if domain.routes.is_empty() {
                "no route of the running config counts requests against this limit".into()
            } else {
                format!(
                    "not a route this limit counts requests of ({})",
                    domain.routes.join(", ")
                )
                .into()
            })
        }
    }
}

/// A header value's rule (see [`store_key_of_display`]).
fn header_producible(value: &[u8]) -> Result<(), &'static str> {
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err("a header value cannot hold control characters (tab aside)");
    }
    if matches!(value.first(), Some(b' ' | b'\t')) {
        return Err("a header value cannot start with a space or tab (HTTP strips them)");
    }
    // An empty last line joins as a trailing ", "; the line before it is
    // held to the same rule.
    let mut lines = value;
    while let Some(rest) = lines.strip_suffix(b", ") {
        lines = rest;
    }
    if matches!(lines.last(), Some(b' ' | b'\t')) {
        return Err("a header value cannot end with a space or tab (HTTP strips them)");
    }
    Ok(())
}

/// A cookie value's rule (see [`store_key_of_display`]).
fn cookie_producible(value: &[u8]) -> Result<(), &'static str> {
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err("a cookie value cannot hold control characters (tab aside)");
    }
    if value.contains(&b';') {
        return Err("a cookie value cannot hold `;`, which ends it");
    }
    if value.first().is_some_and(u8::is_ascii_whitespace)
        || value.last().is_some_and(u8::is_ascii_whitespace)
    {
        return Err("a cookie value cannot start or end with whitespace (it is trimmed)");
    }
    Ok(())
}

/// `value` as a consumer's name, tenant or plan (`what`).
fn printable(value: &[u8], what: &str) -> Result<(), Cow<'static, str>> {
    match std::str::from_utf8(value) {
        Ok(v) if is_printable_name(v) => Ok(()),
        _ => Err(format!("{what} is printable ASCII without spaces").into()),
    }
}

/// `value` as text a claim or an attribute (`what`) can be.
fn text(value: &[u8], what: &str) -> Result<(), Cow<'static, str>> {
    match std::str::from_utf8(value) {
        Ok(_) => Ok(()),
        Err(_) => Err(format!("{what} is text: its bytes are UTF-8").into()),
    }
}

/// `exempt` / `overrides` matching: a CIDR against the client address, or
/// `source=value` against a header (lines joined as for keys), query
/// parameter (decoded) or cookie, byte for byte.
pub fn client_matches(m: &ClientMatch, view: &RequestView<'_>) -> bool {
    match m {
        ClientMatch::Cidr(net) => in_any(view.client, std::slice::from_ref(net)),
        ClientMatch::Source { source, value } => {
            let found = match source {
                KeySource::Header(name) => header_value(view.headers, name),
                KeySource::Query(name) => view.query.and_then(|q| query_value(q, name)),
                KeySource::Cookie(name) => cookie_value(view.headers, name),
                KeySource::ClientIp | KeySource::Route | KeySource::Global => None,
                identity => identity_value(identity, view.identity),
            };
            found.is_some_and(|v| *v == *value.as_bytes())
        }
    }
}

/// The kind byte of a source whose component is a value (every source
/// but `client_ip` and `global`, which hash their own way).
fn tag_of(source: &KeySource) -> u8 {
    match source {
        KeySource::Header(_) => TAG_HEADER,
        KeySource::Query(_) => TAG_QUERY,
        KeySource::Cookie(_) => TAG_COOKIE,
        KeySource::Route => TAG_ROUTE,
        KeySource::Consumer => TAG_CONSUMER,
        KeySource::Tenant => TAG_TENANT,
        KeySource::Plan => TAG_PLAN,
        KeySource::Claim(_) => TAG_CLAIM,
        KeySource::Attr(_) => TAG_ATTR,
        KeySource::ClientIp => TAG_IP,
        KeySource::Global => TAG_GLOBAL,
    }
}

/// An identity source's value: only what the gateway verified, missing
/// without a verified consumer.
fn identity_value<'a>(
    source: &KeySource,
    identity: Option<&'a dyn Consumer>,
) -> Option<Cow<'a, [u8]>> {
    let id = identity?;
    let text = |s: Option<&'a str>| s.map(|s| Cow::Borrowed(s.as_bytes()));
    match source {
        KeySource::Consumer => text(Some(id.name())),
        KeySource::Tenant => text(id.tenant()),
        KeySource::Plan => text(id.plan()),
        KeySource::Claim(path) => id.claim(path),
        KeySource::Attr(name) => text(id.attr(name)),
        _ => None,
    }
}

/// The client's address as one client: IPv6 grouped by the prefix.
fn client_group(view: &RequestView<'_>) -> IpAddr {
    group_ipv6(view.client, view.ipv6_prefix)
}

/// `a.b.c.d`, `2001:db8::/64`, or `2001:db8::1` when the prefix is 128.
fn push_ip(out: &mut String, ip: IpAddr, prefix: u8) {
    let _ = write!(out, "{ip}");
    if ip.is_ipv6() && prefix < 128 {
        let _ = write!(out, "/{prefix}");
    }
}

/// An address as displayed, or typed: `a.b.c.d`, `v6`, `v6/len`.
fn parse_ip(text: &str) -> Option<IpAddr> {
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => {
            if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) || l.len() > 3 {
                return None;
            }
            (a, Some(l.parse::<u8>().ok()?))
        }
        None => (text, None),
    };
    let ip = canonical_ip(addr.parse::<IpAddr>().ok()?);
    match (ip, len) {
        (_, None) => Some(ip),
        (IpAddr::V4(_), Some(32)) => Some(ip),
        (IpAddr::V4(_), Some(_)) => None,
        (IpAddr::V6(_), Some(l)) if l <= 128 => Some(group_ipv6(ip, l)),
        (IpAddr::V6(_), Some(_)) => None,
    }
}

/// A header's value; several lines joined with `", "`.
fn header_value<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<Cow<'a, [u8]>> {
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    let Some(second) = lines.next() else {
        return Some(Cow::Borrowed(first.as_bytes()));
    };
    // Rare: the same header sent on several lines.
    let mut joined = Vec::with_capacity(first.len() + second.len() + 2);
    joined.extend_from_slice(first.as_bytes());
    for line in std::iter::once(second).chain(lines) {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(line.as_bytes());
    }
    Some(Cow::Owned(joined))
}

/// The first cookie called `name` in the `Cookie` lines.
fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<Cow<'a, [u8]>> {
    let name = name.as_bytes();
    for line in headers.get_all(COOKIE) {
        for pair in line.as_bytes().split(|&b| b == b';') {
            let pair = pair.trim_ascii();
            let Some(eq) = pair.iter().position(|&b| b == b'=') else {
                continue;
            };
            if pair[..eq].trim_ascii() == name {
                return Some(Cow::Borrowed(pair[eq + 1..].trim_ascii()));
            }
        }
    }
    None
}

/// The first value of parameter `name` in `query`, form-decoded byte for
/// byte ([`form_decode`]); the parameter names are decoded the same way
/// before comparing. What `query:NAME` key sources read, and the API key
/// in a query parameter (`consumers.api_keys.query`).
pub(crate) fn query_value<'a>(query: &'a str, name: &str) -> Option<Cow<'a, [u8]>> {
    for pair in query.as_bytes().split(|&b| b == b'&') {
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(eq) => (&pair[..eq], &pair[eq + 1..]),
            None => (pair, &b""[..]),
        };
        if *form_decode(k) == *name.as_bytes() {
            return Some(form_decode(v));
        }
    }
    None
}

/// `application/x-www-form-urlencoded` decoding (`+` is a space, `%XX` a
/// byte, a malformed escape stays as written, as WHATWG URL says), byte for
/// byte (no UTF-8 replacement, so distinct values stay distinct clients);
/// borrowing when nothing needs decoding.
fn form_decode(raw: &[u8]) -> Cow<'_, [u8]> {
    if raw.contains(&b'+') {
        let spaced: Vec<u8> = raw
            .iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect();
        Cow::Owned(percent_decode(&spaced).collect())
    } else {
        percent_decode(raw).into()
    }
}

/// Appends `value` escaped for a display key (see the module doc).
fn push_escaped(out: &mut String, value: &[u8]) {
    out.reserve(value.len());
    let mut first = true;
    for chunk in value.utf8_chunks() {
        for c in chunk.valid().chars() {
            let escape = matches!(c, '%' | '|') || c.is_control() || (first && c == '@');
            first = false;
            if escape {
                let mut buf = [0u8; 4];
                for &b in c.encode_utf8(&mut buf).as_bytes() {
                    push_pct(out, b);
                }
            } else {
                out.push(c);
            }
        }
        for &b in chunk.invalid() {
            first = false;
            push_pct(out, b);
        }
    }
}

fn push_pct(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 15)]));
}

/// Strict percent-decoding of one display component: every `%` must start
/// a two-digit escape.
fn unescape(part: &str) -> Option<Cow<'_, [u8]>> {
    let raw = part.as_bytes();
    let well_formed = raw.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || raw
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    well_formed.then(|| percent_decode(raw).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use tollgate_limit::key::{hex, store_key};

    const NS: &[u8] = b"per_client/token_bucket/k";

    fn src(s: &str) -> KeySource {
        s.parse().unwrap()
    }

    fn srcs(s: &[&str]) -> Vec<KeySource> {
        s.iter().map(|x| src(x)).collect()
    }

    /// The routes of the tests' views.
    const ROUTES: &[&str] = &["api", "web", "r"];

    /// [`store_key_of_display`] for a limit on [`ROUTES`] with
    /// `on_missing_key: client_ip`.
    fn read_back(
        ns: &[u8],
        sources: &[KeySource],
        display: &str,
    ) -> Result<StoreKey, DisplayKeyError> {
        let domain = KeyDomain {
            on_missing: OnMissingKey::ClientIp,
            routes: ROUTES,
        };
        store_key_of_display(ns, sources, &domain, display)
    }

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    fn view<'a>(client: &str, headers: &'a HeaderMap, query: Option<&'a str>) -> RequestView<'a> {
        RequestView {
            client: client.parse().unwrap(),
            headers,
            query,
            route: "api",
            ipv6_prefix: 64,
            identity: None,
        }
    }

    fn key(sources: &[&str], on_missing: OnMissingKey, v: &RequestView<'_>) -> KeyOutcome {
        client_key(NS, &srcs(sources), on_missing, v)
    }

    fn must(o: KeyOutcome) -> ClientKey {
        match o {
            KeyOutcome::Key(k) => k,
            other => panic!("expected a key, got {other:?}"),
        }
    }

    /// The key, and its display decoded back to the same store key.
    fn round_trip(sources: &[&str], v: &RequestView<'_>) -> ClientKey {
        let k = must(key(sources, OnMissingKey::ClientIp, v));
        assert_eq!(
            read_back(NS, &srcs(sources), &k.display),
            Ok(k.store),
            "display {:?}",
            k.display
        );
        k
    }

    #[test]
    fn precomputed_prefix_gives_the_same_keys() {
        let h = headers(&[
            ("x-user", b"bob"),
            ("x-tenant", b"a|c%"),
            ("cookie", b"sid=s1"),
        ]);
        let none = HeaderMap::new();
        let views = [
            view("203.0.113.7", &h, Some("k=v&user=al+ice")),
            view("2001:db8:1:2::9", &h, None),
            view("::ffff:10.0.0.1", &none, Some("k=")),
        ];
        let specs: [&[&str]; 7] = [
            &["client_ip"],
            &["header:x-user"],
            &["query:user", "client_ip"],
            &["header:x-tenant", "cookie:sid", "route"],
            &["global"],
            &["header:x-missing", "client_ip"],
            &["client_ip", "query:k", "header:x-user", "route", "global"],
        ];
        // Namespaces around SHA-256's 64-byte block (with the 8-byte length
        // prefix: 55, 56 and 120 bytes are the edges) and a real one.
        let real = b"\0\0\0\0\0\0\0\x0atollgate/1\0\0\0\0\0\0\0\x08per_client";
        let namespaces: Vec<Vec<u8>> = [0, 1, 47, 55, 56, 57, 63, 64, 119, 120, 200]
            .iter()
            .map(|&n| (0..n).map(|i| (i * 31 % 251) as u8).collect())
            .chain([NS.to_vec(), real.to_vec()])
            .collect();
        for ns in &namespaces {
            let prefix = KeyPrefix::new(ns);
            for spec in specs {
                let sources = srcs(spec);
                for v in &views {
                    for on_missing in [
                        OnMissingKey::ClientIp,
                        OnMissingKey::Skip,
                        OnMissingKey::Deny,
                    ] {
                        let full = client_key(ns, &sources, on_missing, v);
                        let fast = prefix.store_key(&sources, on_missing, v);
                        assert_eq!(fast, full.clone().map(|k| k.store), "{spec:?} {v:?}");
                        assert_eq!(prefix.client_key(&sources, on_missing, v), full);
                        let display = display_key(&sources, on_missing, v);
                        match full {
                            KeyOutcome::Key(k) => {
                                assert_eq!(display.as_deref(), Some(k.display.as_str()));
                                // The documented layout, through `store_key`.
                                assert_eq!(read_back(ns, &sources, &k.display), Ok(k.store));
                            }
                            KeyOutcome::Skip | KeyOutcome::Deny => assert_eq!(display, None),
                        }
                    }
                }
            }
            // And the component layout itself.
            assert_eq!(
                prefix.store_key(
                    &srcs(&["client_ip", "route"]),
                    OnMissingKey::Deny,
                    &views[0]
                ),
                KeyOutcome::Key(store_key(ns, &[&[TAG_IP, 203, 0, 113, 7], b"rapi"]))
            );
        }
    }

    #[test]
    fn client_ip_source() {
        let h = HeaderMap::new();
        let k = round_trip(&["client_ip"], &view("203.0.113.7", &h, None));
        assert_eq!(k.display, "203.0.113.7");
        assert_eq!(
            k.store,
            store_key(NS, &[&[TAG_IP, 203, 0, 113, 7]]),
            "the documented layout"
        );
        // A mapped address is the same client as its IPv4 form.
        let mapped = must(key(
            &["client_ip"],
            OnMissingKey::Skip,
            &view("::ffff:203.0.113.7", &h, None),
        ));
        assert_eq!(mapped, k);
        // Another address, another key.
        let other = round_trip(&["client_ip"], &view("203.0.113.8", &h, None));
        assert_ne!(other.store, k.store);
    }

    #[test]
    fn ipv6_grouping() {
        let h = HeaderMap::new();
        let a = round_trip(&["client_ip"], &view("2001:db8:1:2::1", &h, None));
        let b = round_trip(&["client_ip"], &view("2001:db8:1:2:ffff::9", &h, None));
        let c = round_trip(&["client_ip"], &view("2001:db8:1:3::1", &h, None));
        assert_eq!(a, b);
        assert_ne!(a.store, c.store);
        assert_eq!(a.display, "2001:db8:1:2::/64");
        let ns = srcs(&["client_ip"]);
        // An operator may type any address of the group with its length.
        assert_eq!(read_back(NS, &ns, "2001:db8:1:2::77/64"), Ok(a.store));
        // Prefix 128: each address its own client, shown bare.
        let mut v = view("2001:db8::1", &h, None);
        v.ipv6_prefix = 128;
        let whole = round_trip(&["client_ip"], &v);
        assert_eq!(whole.display, "2001:db8::1");
        v.client = "2001:db8::2".parse().unwrap();
        assert_ne!(round_trip(&["client_ip"], &v).store, whole.store);
        // A prefix of 48.
        v.ipv6_prefix = 48;
        assert_eq!(round_trip(&["client_ip"], &v).display, "2001:db8::/48");
        // Malformed addresses.
        for bad in [
            "",
            "1.2.3",
            "1.2.3.4/24",
            "2001:db8::/129",
            "2001:db8::/",
            "x/64",
        ] {
            assert!(read_back(NS, &ns, bad).is_err(), "{bad}");
        }
        assert!(read_back(NS, &ns, "1.2.3.4/32").is_ok());
    }

    #[test]
    fn header_source() {
        let h = headers(&[("x-api-key", b"abc")]);
        let k = round_trip(&["header:x-api-key"], &view("1.1.1.1", &h, None));
        assert_eq!(k.display, "abc");
        assert_eq!(k.store, store_key(NS, &[b"habc"]));
        // Same value from another address: same key.
        let k2 = round_trip(&["header:X-Api-Key"], &view("2.2.2.2", &h, None));
        assert_eq!(k, k2);
        // Several lines are one value, joined.
        let h = headers(&[
            ("x-api-key", b"a"),
            ("x-api-key", b"b"),
            ("x-api-key", b"c"),
        ]);
        let k = round_trip(&["header:x-api-key"], &view("1.1.1.1", &h, None));
        assert_eq!(k.display, "a, b, c");
        let joined = headers(&[("x-api-key", b"a, b, c")]);
        let j = round_trip(&["header:x-api-key"], &view("1.1.1.1", &joined, None));
        assert_eq!(j, k);
        // Non-UTF-8 bytes.
        let h = headers(&[("x-api-key", b"\xff\xfeok\xc3\xa9")]);
        let k = round_trip(&["header:x-api-key"], &view("1.1.1.1", &h, None));
        assert_eq!(k.display, "%FF%FEoké");
    }

    #[test]
    fn query_source() {
        let h = HeaderMap::new();
        let q = |query: &'static str| {
            round_trip(&["query:api_key"], &view("1.1.1.1", &h, Some(query))).display
        };
        assert_eq!(q("a=1&api_key=xyz&api_key=second"), "xyz");
        assert_eq!(q("api%5Fkey=enc%20oded+plus"), "enc oded plus");
        assert_eq!(q("api_key=100%25&x"), "100%25");
        assert_eq!(q("api_key=bad%zz%4"), "bad%25zz%254");
        assert_eq!(q("api_key=a%7Cb"), "a%7Cb");
        assert_eq!(q("api_key=a=b"), "a=b");
        // Decoded and raw spellings of one value are one client.
        let a = must(key(
            &["query:k"],
            OnMissingKey::Deny,
            &view("1.1.1.1", &h, Some("k=a b")),
        ));
        let b = must(key(
            &["query:k"],
            OnMissingKey::Deny,
            &view("1.1.1.1", &h, Some("k=a%20b")),
        ));
        let c = must(key(
            &["query:k"],
            OnMissingKey::Deny,
            &view("1.1.1.1", &h, Some("k=a+b")),
        ));
        assert_eq!(a, b);
        assert_eq!(b, c);
        assert_eq!(a.store, store_key(NS, &[b"qa b"]));
    }

    #[test]
    fn identity_sources() {
        use crate::auth::jwt::Verified;
        use crate::auth::Identity;
        use std::sync::Arc;
        let h = HeaderMap::new();
        let claims = serde_json::json!({"org": {"id": "acme-org"}, "n": 7});
        let id = |consumer: &str, plan: Option<&str>| Identity {
            consumer: consumer.into(),
            tenant: Some("acme".into()),
            plan: plan.map(Into::into),
            claims: Some(Arc::new(Verified {
                claims: claims.as_object().unwrap().clone(),
                exp: 0,
            })),
            entry: None,
        };
        let (ann, bob) = (id("ann", Some("gold")), id("bob", None));
        let with = |identity: Option<&'static Identity>| RequestView {
            identity: identity.map(|i| i as &dyn Consumer),
            ..view("10.0.0.1", &h, None)
        };
        let ann: &'static Identity = Box::leak(Box::new(ann));
        let bob: &'static Identity = Box::leak(Box::new(bob));
        let a = round_trip(
            &["consumer", "tenant", "claim:org.id", "claim:n"],
            &with(Some(ann)),
        );
        assert_eq!(a.display, "ann|acme|acme-org|7");
        let b = round_trip(
            &["consumer", "tenant", "claim:org.id", "claim:n"],
            &with(Some(bob)),
        );
        assert_ne!(a.store, b.store, "one bucket per consumer");
        // A consumer called like a header value is another key.
        let header = HeaderMap::from_iter([(
            HeaderName::from_static("x-c"),
            HeaderValue::from_static("ann"),
        )]);
        let forged = must(key(
            &["header:x-c"],
            OnMissingKey::Skip,
            &view("10.0.0.1", &header, None),
        ));
        let real = must(key(&["consumer"], OnMissingKey::Skip, &with(Some(ann))));
        assert_ne!(forged.store, real.store);
        // Missing without a verified consumer, or without the value.
        for (source, identity) in [
            ("consumer", None),
            ("plan", Some(bob)),
            ("claim:org.name", Some(ann)),
            ("attr:tz", Some(ann)),
        ] {
            let v = with(identity);
            assert_eq!(
                key(&[source], OnMissingKey::Skip, &v),
                KeyOutcome::Skip,
                "{source}"
            );
            assert_eq!(
                key(&[source], OnMissingKey::Deny, &v),
                KeyOutcome::Deny,
                "{source}"
            );
        }
        // Matching by value reads the same values.
        let m = |text: &str, v: &RequestView<'_>| client_matches(&text.parse().unwrap(), v);
        assert!(m("plan=gold", &with(Some(ann))) && !m("plan=gold", &with(Some(bob))));
        assert!(m("claim:org.id=acme-org", &with(Some(ann))));
        assert!(!m("consumer=ann", &with(None)));
    }

    #[test]
    fn cookie_source() {
        let h = headers(&[
            ("cookie", b"theme=dark; sid=s1; sid=s2"),
            ("cookie", b"session=zzz"),
        ]);
        let v = view("1.1.1.1", &h, None);
        assert_eq!(round_trip(&["cookie:sid"], &v).display, "s1");
        assert_eq!(round_trip(&["cookie:session"], &v).display, "zzz");
        // Names are case-sensitive and must match whole.
        assert_eq!(
            key(&["cookie:SID"], OnMissingKey::Skip, &v),
            KeyOutcome::Skip
        );
        assert_eq!(
            key(&["cookie:si"], OnMissingKey::Skip, &v),
            KeyOutcome::Skip
        );
        let k = must(key(&["cookie:sid"], OnMissingKey::Skip, &v));
        assert_eq!(k.store, store_key(NS, &[b"cs1"]));
    }

    #[test]
    fn route_and_global_sources() {
        let h = HeaderMap::new();
        let a = round_trip(&["route"], &view("1.1.1.1", &h, None));
        let b = round_trip(&["route"], &view("2.2.2.2", &h, None));
        assert_eq!(a, b);
        assert_eq!(a.display, "api");
        let mut other = view("1.1.1.1", &h, None);
        other.route = "web";
        assert_ne!(round_trip(&["route"], &other).store, a.store);

        let g = round_trip(&["global"], &view("1.1.1.1", &h, None));
        assert_eq!(g.display, "global");
        assert_eq!(round_trip(&["global"], &other), g);
        assert!(read_back(NS, &srcs(&["global"]), "*").is_err());
        // The namespace separates limits.
        let g2 = must(client_key(
            b"other",
            &srcs(&["global"]),
            OnMissingKey::Skip,
            &other,
        ));
        assert_ne!(g2.store, g.store);
    }

    #[test]
    fn composite_keys() {
        let h = headers(&[("x-tenant", b"acme")]);
        let v = view("198.51.100.1", &h, Some("user=bob"));
        let k = round_trip(&["header:x-tenant", "query:user", "client_ip", "route"], &v);
        assert_eq!(k.display, "acme|bob|198.51.100.1|api");
        assert_eq!(
            k.store,
            store_key(
                NS,
                &[b"hacme", b"qbob", &[TAG_IP, 198, 51, 100, 1], b"rapi"]
            )
        );
        // Order matters.
        let swapped = round_trip(&["query:user", "header:x-tenant", "client_ip", "route"], &v);
        assert_ne!(swapped.store, k.store);
        // Wrong number of components.
        let sources = srcs(&["header:x-tenant", "query:user"]);
        assert!(read_back(NS, &sources, "acme").is_err());
        assert!(read_back(NS, &sources, "acme|bob|x").is_err());
        assert!(read_back(NS, &sources, "acme|bob").is_ok());
    }

    #[test]
    fn length_prefixes_and_tags_prevent_collisions() {
        assert_ne!(store_key(NS, &[b"ab", b"c"]), store_key(NS, &[b"a", b"bc"]));
        assert_ne!(store_key(NS, &[b"abc"]), store_key(NS, &[b"ab", b"c"]));
        assert_ne!(store_key(NS, &[b""]), store_key(NS, &[]));
        assert_ne!(store_key(b"ns", &[b"x"]), store_key(b"n", &[b"sx"]));
        let sources = srcs(&["header:a", "header:b"]);
        let h1 = headers(&[("a", b"ab"), ("b", b"c")]);
        let h2 = headers(&[("a", b"a"), ("b", b"bc")]);
        let k1 = must(client_key(
            NS,
            &sources,
            OnMissingKey::Deny,
            &view("1.1.1.1", &h1, None),
        ));
        let k2 = must(client_key(
            NS,
            &sources,
            OnMissingKey::Deny,
            &view("1.1.1.1", &h2, None),
        ));
        assert_ne!(k1.store, k2.store);
        // A header whose bytes are an address's octets is not that address.
        let octets = headers(&[("a", b"ABCD")]);
        let none = HeaderMap::new();
        let from_header = must(key(
            &["header:a"],
            OnMissingKey::ClientIp,
            &view("9.9.9.9", &octets, None),
        ));
        let substituted = must(key(
            &["header:a"],
            OnMissingKey::ClientIp,
            &view("65.66.67.68", &none, None),
        ));
        assert_ne!(from_header.store, substituted.store);
        // Nor is its text form.
        let text = headers(&[("a", b"65.66.67.68")]);
        let k = round_trip(&["header:a"], &view("9.9.9.9", &text, None));
        assert_ne!(k.store, substituted.store);
        assert_ne!(k.display, substituted.display);
        // Header, query and cookie with one value differ.
        let hv = headers(&[("k", b"v"), ("cookie", b"k=v")]);
        let v = view("1.1.1.1", &hv, Some("k=v"));
        let a = round_trip(&["header:k"], &v).store;
        let b = round_trip(&["query:k"], &v).store;
        let c = round_trip(&["cookie:k"], &v).store;
        assert!(a != b && b != c && a != c);
    }

    #[test]
    fn missing_key_policies() {
        let none = HeaderMap::new();
        let empty = headers(&[("x-user", b""), ("cookie", b"sid=")]);
        for h in [&none, &empty] {
            for q in [None, Some(""), Some("user="), Some("user")] {
                let v = view("203.0.113.7", h, q);
                for s in ["header:x-user", "query:user", "cookie:sid"] {
                    assert_eq!(key(&[s, "route"], OnMissingKey::Skip, &v), KeyOutcome::Skip);
                    assert_eq!(key(&[s, "route"], OnMissingKey::Deny, &v), KeyOutcome::Deny);
                    let k = round_trip(&[s, "route"], &v);
                    assert_eq!(k.display, "@203.0.113.7|api", "{s}");
                }
            }
        }
        // The substitute is the (grouped) client address.
        let v = view("2001:db8::5", &none, None);
        let k = round_trip(&["header:x-user"], &v);
        assert_eq!(k.display, "@2001:db8::/64");
        assert_eq!(
            k.store,
            store_key(
                NS,
                &[&{
                    let mut c = vec![TAG_IP];
                    c.extend_from_slice(
                        &"2001:db8::".parse::<std::net::Ipv6Addr>().unwrap().octets(),
                    );
                    c
                }]
            )
        );
        // Any address of the group is the same client.
        let again = round_trip(&["header:x-user"], &view("2001:db8::9", &none, None));
        assert_eq!(again, k);
        // A present component is unaffected by the policy.
        let h = headers(&[("x-user", b"u")]);
        let v = view("1.1.1.1", &h, None);
        assert!(matches!(
            key(&["header:x-user"], OnMissingKey::Skip, &v),
            KeyOutcome::Key(_)
        ));
        assert!(matches!(
            key(&["header:x-user"], OnMissingKey::Deny, &v),
            KeyOutcome::Key(_)
        ));
    }

    #[test]
    fn display_round_trip_of_awkward_values() {
        let none = HeaderMap::new();
        let values: Vec<Vec<u8>> = vec![
            b"a|b".to_vec(),
            b"100%".to_vec(),
            b"%7C".to_vec(),
            b"{json: [1, 2]}".to_vec(),
            b"  spaced  out  ".to_vec(),
            b"line\nbreak\r\n\ttab\0nul".to_vec(),
            b"@1.2.3.4".to_vec(),
            b"a@b".to_vec(),
            b"global".to_vec(),
            b"|||".to_vec(),
            "ünïcødé ✓".as_bytes().to_vec(),
            vec![0xff, b'|', 0x80, b'%'],
            vec![b'x'; 10 * 1024],
            (0u8..=255).collect(),
        ];
        let sources = ["query:k", "client_ip", "query:j"];
        let mut seen = std::collections::HashSet::new();
        for value in &values {
            let mut enc = String::new();
            for b in value {
                let _ = write!(enc, "%{b:02X}");
            }
            let query = format!("k={enc}&j={enc}");
            let v = view("192.0.2.1", &none, Some(&query));
            let k = round_trip(&sources, &v);
            assert!(!k.display.contains('\n'), "{:?}", k.display);
            assert_eq!(k.display.matches('|').count(), 2, "{:?}", k.display);
            let mut expect = b"q".to_vec();
            expect.extend_from_slice(value);
            assert_eq!(
                k.store,
                store_key(NS, &[&expect, &[TAG_IP, 192, 0, 2, 1], &expect])
            );
            assert!(seen.insert(k.store));
        }
        // Headers with the same awkward (but legal) bytes.
        let h = headers(&[("x", b"{\"a\": \"b|c\"} 50% @x")]);
        let k = round_trip(&["header:x"], &view("192.0.2.1", &h, None));
        assert_eq!(k.display, "{\"a\": \"b%7Cc\"} 50%25 @x");
    }

    #[test]
    fn malformed_display_keys() {
        let s = srcs(&["header:x"]);
        for bad in ["%", "%4", "%zz", "a%", "", "a|b", "@", "@nope", "%00%"] {
            assert!(read_back(NS, &s, bad).is_err(), "{bad:?}");
        }
        // Lowercase escapes are accepted.
        assert!(read_back(NS, &s, "a%7cb").is_ok());
        assert_eq!(read_back(NS, &s, "a%7cb"), read_back(NS, &s, "a%7Cb"));
        assert!(read_back(NS, &srcs(&["route"]), "@1.2.3.4").is_err());
    }

    /// Why `display` is no key of a limit keyed on `sources` (on
    /// [`ROUTES`], `on_missing`), or `"ok"`.
    fn why(sources: &[&str], on_missing: OnMissingKey, display: &str) -> String {
        let domain = KeyDomain {
            on_missing,
            routes: ROUTES,
        };
        match store_key_of_display(NS, &srcs(sources), &domain, display) {
            Ok(_) => "ok".into(),
            Err(e) => e.to_string(),
        }
    }

    /// [`why`] with `on_missing_key: client_ip`.
    fn why_of(sources: &[&str], display: &str) -> String {
        why(sources, OnMissingKey::ClientIp, display)
    }

    #[test]
    fn header_components_are_what_a_header_can_carry() {
        let h = ["header:x-tenant"];
        let control = "component 1 (header:x-tenant): a header value cannot hold control characters (tab aside)";
        for bad in [
            "\0", "%00", "a\rb", "a%0Db", "a\nb", "%0A", "\u{1}", "a\u{7f}", "%1B[31m",
        ] {
            assert_eq!(why_of(&h, bad), control, "{bad:?}");
        }
        for bad in [" a", "\ta", "%20a"] {
            assert!(
                why_of(&h, bad).ends_with("cannot start with a space or tab (HTTP strips them)"),
                "{bad:?}"
            );
        }
        for bad in ["a ", "a\t", "a , ", "a\t, , "] {
            assert!(
                why_of(&h, bad).ends_with("cannot end with a space or tab (HTTP strips them)"),
                "{bad:?}"
            );
        }
        for fine in [
            "a b",
            "a\tb",
            "%FF%FE",
            "a, ",
            ", ",
            "a, , ",
            "{\"a\": 1}",
            "%25",
            "%7C",
        ] {
            assert_eq!(why_of(&h, fine), "ok", "{fine:?}");
        }
        // Those with a trailing ", " come from an empty last line.
        let lines = headers(&[("x-tenant", b"a"), ("x-tenant", b"")]);
        let k = round_trip(&h, &view("1.1.1.1", &lines, None));
        assert_eq!(k.display, "a, ");
        let empty = headers(&[("x-tenant", b""), ("x-tenant", b"")]);
        assert_eq!(round_trip(&h, &view("1.1.1.1", &empty, None)).display, ", ");
        // Cookies: a header's bytes, without `;` or whitespace at the ends.
        let c = ["cookie:sid"];
        assert_eq!(
            why_of(&c, "a;b"),
            "component 1 (cookie:sid): a cookie value cannot hold `;`, which ends it"
        );
        assert!(why_of(&c, "a\rb").ends_with("cannot hold control characters (tab aside)"));
        for bad in [" a", "a ", "\ta", "a\t"] {
            assert!(
                why_of(&c, bad).ends_with("cannot start or end with whitespace (it is trimmed)"),
                "{bad:?}"
            );
        }
        for fine in ["a=b", "a b", "\"q\"", "a,b", "%FF"] {
            assert_eq!(why_of(&c, fine), "ok", "{fine:?}");
        }
    }

    #[test]
    fn query_components_are_any_bytes() {
        for value in [
            "\0",
            "%00",
            "a\r\nb",
            " a ",
            "\t",
            "%FF%00%0A",
            "a;b",
            "\u{7f}",
        ] {
            assert_eq!(why_of(&["query:k"], value), "ok", "{value:?}");
        }
        // As a request sends them: form-decoded.
        let none = HeaderMap::new();
        let k = round_trip(&["query:k"], &view("1.1.1.1", &none, Some("k=%00%0D%0A+")));
        assert_eq!(k.display, "%00%0D%0A ");
        assert_eq!(
            why_of(&["query:k"], ""),
            "component 1 (query:k): an empty value is a missing one, which makes no key"
        );
    }

    #[test]
    fn identity_components_are_what_a_consumer_can_be() {
        for (source, what) in [
            ("consumer", "a consumer name"),
            ("tenant", "a tenant"),
            ("plan", "a plan"),
        ] {
            for bad in ["a b", "\0", "%00", "é", "%FF", "a\tb", "\u{7f}"] {
                assert_eq!(
                    why_of(&[source], bad),
                    format!("component 1 ({source}): {what} is printable ASCII without spaces"),
                    "{bad:?}"
                );
            }
            for fine in ["acme-batch", "!~", "a%7Cb", "u@x"] {
                assert_eq!(why_of(&[source], fine), "ok", "{fine:?}");
            }
        }
        // Claims and attributes: any text.
        for source in ["claim:org.id", "attr:tz"] {
            for fine in ["a b", "\0", "é ✓", " x ", "\r\n"] {
                assert_eq!(why_of(&[source], fine), "ok", "{source} {fine:?}");
            }
            assert!(
                why_of(&[source], "%FF").ends_with("is text: its bytes are UTF-8"),
                "{source}"
            );
        }
    }

    #[test]
    fn route_global_and_address_components() {
        assert_eq!(why_of(&["route"], "api"), "ok");
        assert_eq!(
            why_of(&["route"], "nope"),
            "component 1 (route): not a route this limit counts requests of (api, web, r)"
        );
        let nowhere = KeyDomain {
            on_missing: OnMissingKey::ClientIp,
            routes: &[],
        };
        let err = store_key_of_display(NS, &srcs(&["route"]), &nowhere, "api").unwrap_err();
        assert_eq!(
            err.to_string(),
            "component 1 (route): no route of the running config counts requests against this limit"
        );
        assert_eq!(
            why_of(&["global"], "*"),
            "component 1 (global): a `global` component is always `global`"
        );
        assert!(
            why_of(&["client_ip"], "1.2.3").starts_with("component 1 (client_ip): not an address")
        );
        assert_eq!(
            why_of(&["header:x", "query:q"], "a"),
            "1 component(s) joined with `|`, where the limit's key has 2 (header:x, query:q)"
        );
        assert!(why_of(&["header:x", "query:q"], "a|b|c").starts_with("3 component(s)"));
        assert_eq!(
            why_of(&["header:x", "route"], "a|"),
            "component 2 (route): an empty value is a missing one, which makes no key"
        );
    }

    #[test]
    fn a_substituted_address_only_where_the_limit_substitutes() {
        let h = ["header:x"];
        assert_eq!(why(&h, OnMissingKey::ClientIp, "@192.0.2.1"), "ok");
        for policy in [OnMissingKey::Skip, OnMissingKey::Deny] {
            assert!(
                why(&h, policy, "@192.0.2.1").contains("only with `on_missing_key: client_ip`"),
                "{policy:?}"
            );
            // A value that starts with `@`, escaped as displays write it.
            assert_eq!(why(&h, policy, "%40192.0.2.1"), "ok", "{policy:?}");
        }
        assert!(why_of(&h, "@nope")
            .ends_with("not an address (a.b.c.d, or an IPv6 address or group: 2001:db8::/64)"));
        assert!(why_of(&["route"], "@192.0.2.1").contains("a route is never missing"));
    }

    #[test]
    fn huge_values_are_hashed_not_kept() {
        let big = vec![b'v'; 10 * 1024];
        let h = headers(&[("x-big", &big)]);
        let k = round_trip(&["header:x-big"], &view("1.1.1.1", &h, None));
        assert_eq!(k.display.len(), big.len());
        assert_eq!(hex(&k.store).len(), 32);
        let mut tagged = b"h".to_vec();
        tagged.extend_from_slice(&big);
        assert_eq!(k.store, store_key(NS, &[&tagged]));
    }

    #[test]
    fn exempt_and_override_matching() {
        let m = |s: &str| s.parse::<ClientMatch>().unwrap();
        let h = headers(&[("x-api-key", b"internal-batch"), ("cookie", b"tier=gold")]);
        let v = view("10.1.2.3", &h, Some("plan=pro%20max"));
        assert!(client_matches(&m("10.0.0.0/8"), &v));
        assert!(!client_matches(&m("11.0.0.0/8"), &v));
        assert!(client_matches(&m("header:x-api-key=internal-batch"), &v));
        assert!(client_matches(&m("header:X-API-KEY=internal-batch"), &v));
        assert!(!client_matches(&m("header:x-api-key=internal"), &v));
        assert!(!client_matches(&m("header:x-other=internal-batch"), &v));
        assert!(client_matches(&m("query:plan=pro max"), &v));
        assert!(client_matches(&m("cookie:tier=gold"), &v));
        assert!(!client_matches(&m("cookie:tier=silver"), &v));
        // Mapped IPv4 clients match IPv4 networks; IPv6 networks match.
        let mapped = view("::ffff:10.9.9.9", &h, None);
        assert!(client_matches(&m("10.0.0.0/8"), &mapped));
        let v6 = view("2001:db8::1", &h, None);
        assert!(client_matches(&m("2001:db8::/32"), &v6));
        assert!(!client_matches(&m("10.0.0.0/8"), &v6));
        // A value repeated on two lines is not the value.
        let twice = headers(&[
            ("x-api-key", b"internal-batch"),
            ("x-api-key", b"internal-batch"),
        ]);
        assert!(!client_matches(
            &m("header:x-api-key=internal-batch"),
            &view("1.1.1.1", &twice, None)
        ));
    }

    proptest::proptest! {
        #[test]
        fn display_round_trips_any_bytes(
            a in proptest::collection::vec(proptest::num::u8::ANY, 1..64),
            b in proptest::collection::vec(proptest::num::u8::ANY, 1..64),
            v6 in proptest::num::u128::ANY,
            prefix in 0u8..=130,
        ) {
            let enc = |v: &[u8]| v.iter().fold(String::new(), |mut s, b| {
                let _ = write!(s, "%{b:02X}");
                s
            });
            let query = format!("a={}&b={}", enc(&a), enc(&b));
            let none = HeaderMap::new();
            let v = RequestView {
                client: IpAddr::V6(v6.into()),
                headers: &none,
                query: Some(&query),
                route: "r",
                ipv6_prefix: prefix,
                identity: None,
            };
            let sources = srcs(&["query:a", "client_ip", "query:b", "query:missing"]);
            let KeyOutcome::Key(k) = client_key(NS, &sources, OnMissingKey::ClientIp, &v) else {
                panic!("no key");
            };
            proptest::prop_assert_eq!(read_back(NS, &sources, &k.display), Ok(k.store));
            proptest::prop_assert_eq!(k.display.matches('|').count(), 3);
        }
    }
}
