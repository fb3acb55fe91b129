//! Header hygiene on the way through the gateway (docs/protocols.md): hop-by-hop
//! headers, the `X-Forwarded-*` set and `X-Request-Id`.
//!
//! Order matters on a request going upstream: call [`strip_hop_by_hop`]
//! first and [`set_forwarded`] after, so a client cannot name the headers
//! the gateway adds in its `Connection` header to have them stripped.

use std::net::IpAddr;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue, COOKIE, TRAILER};

use crate::client_addr::{canonical_ip, ip_value, xff_elements};

/// `X-Forwarded-For`.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`.
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
/// `X-Request-Id`.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// `X-Real-IP`.
pub const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// The longest `X-Request-Id` kept from a trusted peer.
const MAX_REQUEST_ID_LEN: usize = 200;

/// Remove hop-by-hop headers: Connection and every header it names,
/// Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade
/// (unless `keep_upgrade`, in which case keep Upgrade and set
/// `Connection: upgrade`), Proxy-Authorization, Proxy-Authenticate. Used
/// both on requests going upstream and responses going back.
///
/// Two refinements:
/// - `TE: trailers` survives (as exactly that value) when the incoming TE
///   lists `trailers`, as Envoy does: gRPC servers may require it, and it
///   is the one TE value HTTP/2 allows.
/// - With `keep_upgrade`, `Connection: upgrade` is only set when an Upgrade
///   header is actually present.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    strip(headers, keep_upgrade, false);
}

/// [`strip_hop_by_hop`], then declare again the trailer fields the sender
/// declared: `Trailer` is hop-by-hop, but hyper's HTTP/1 encoder only sends
/// trailer fields the message declares, so the gateway re-declares them as
/// part of its own framing (appended last, after the removals).
pub fn strip_hop_by_hop_keeping_trailers(headers: &mut HeaderMap, keep_upgrade: bool) {
    strip(headers, keep_upgrade, true);
}

/// What one pass over a message's fields found of its hop-by-hop ones.
#[derive(Default)]
struct HopByHop {
    /// The [`HOP_BY_HOP`] names present, as bits of their places.
    present: u16,
    /// The names Connection lists beyond `close`, `keep-alive`, `upgrade`.
    named: Vec<HeaderName>,
    /// Whether a TE value lists `trailers`.
    te_trailers: bool,
    /// The Trailer values, when asked for.
    declared: Vec<HeaderValue>,
}

impl HopByHop {
    /// One pass over every field (each value of a repeated one) reads all
    /// it needs: looking Connection, TE and Trailer up afterwards would
    /// hash and probe for each (an upstream's `Connection: keep-alive` is on
    /// nearly every response).
    fn read(headers: &HeaderMap, keep_declared: bool) -> HopByHop {
        let mut found = HopByHop::default();
        for (name, value) in headers {
            let Some(i) = hop_by_hop_index(name) else {
                continue;
            };
            found.present |= 1 << i;
            match i {
                CONNECTION_BIT => connection_names(value, &mut found.named),
                TE_BIT => {
                    found.te_trailers |= value
                        .as_bytes()
                        .split(|&b| b == b',')
                        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"));
                }
                TRAILER_BIT if keep_declared => found.declared.push(value.clone()),
                _ => {}
            }
        }
        found
    }
}

/// The header names a Connection value lists, added to `named`. The common
/// `keep-alive` / `close` / `upgrade` tokens name nothing more.
fn connection_names(value: &HeaderValue, named: &mut Vec<HeaderName>) {
    for token in value.as_bytes().split(|&b| b == b',') {
        let token = token.trim_ascii();
        if token.is_empty()
            || token.eq_ignore_ascii_case(b"close")
            || token.eq_ignore_ascii_case(b"keep-alive")
            || token.eq_ignore_ascii_case(b"upgrade")
        {
            continue;
        }
        // `from_bytes` lowercases; a token that is not a header name names
        // nothing we could be holding.
        if let Ok(name) = HeaderName::from_bytes(token) {
            named.push(name);
        }
    }
}

/// [`strip_hop_by_hop`], re-declaring the Trailer values when
/// `keep_declared` ([`strip_hop_by_hop_keeping_trailers`]).
fn strip(headers: &mut HeaderMap, keep_upgrade: bool, keep_declared: bool) {
    let HopByHop {
        present,
        named,
        te_trailers,
        declared,
    } = HopByHop::read(headers, keep_declared);
    if present == 0 {
        return;
    }
    // The names Connection lists first, then the fixed ones in their
    // order: removals reorder the fields left (`HeaderMap` swaps the last
    // into a removed one's place), so the order is kept as it was.
    // The set bits, lowest first: usually one (an upstream's `Connection`).
    let present = std::iter::successors(Some(present), |bits| Some(bits & bits.wrapping_sub(1)))
        .take_while(|bits| *bits != 0)
        .map(|bits| &HOP_BY_HOP[bits.trailing_zeros() as usize]);
    for name in named.iter().chain(present) {
        if !(keep_upgrade && name == header::UPGRADE) {
            headers.remove(name);
        }
    }
    if keep_upgrade && headers.contains_key(header::UPGRADE) {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    for value in declared {
        headers.append(header::TRAILER, value);
    }
}

/// The fixed hop-by-hop headers (and Connection, which may name more).
static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// Connection's, TE's and Trailer's places in [`HOP_BY_HOP`].
const CONNECTION_BIT: usize = 0;
const TE_BIT: usize = 3;
const TRAILER_BIT: usize = 4;

/// `name`'s place in [`HOP_BY_HOP`], if it is one of them.
fn hop_by_hop_index(name: &HeaderName) -> Option<usize> {
    // By text: one length switch, where comparing names is a loop.
    Some(match name.as_str() {
        "connection" => 0,
        "keep-alive" => 1,
        "proxy-connection" => 2,
        "te" => 3,
        "trailer" => 4,
        "transfer-encoding" => 5,
        "upgrade" => 6,
        "proxy-authorization" => 7,
        "proxy-authenticate" => 8,
        _ => return None,
    })
}

/// What the gateway knows about a request for its forwarding headers.
#[derive(Debug, Clone, Copy)]
pub struct Forwarded<'a> {
    /// The TCP peer.
    pub peer: IpAddr,
    /// `peer` as a header value ([`ip_value`] of its [`canonical_ip`]),
    /// when the caller keeps one (a connection's, shared by its requests);
    /// made here otherwise.
    pub peer_value: Option<&'a HeaderValue>,
    /// Whether the peer is inside `server.trusted_proxies`.
    pub peer_trusted: bool,
    /// The scheme the client used to reach the gateway: `"http"` or `"https"`.
    pub proto: &'a str,
    /// The client's Host (or `:authority`), if it sent one.
    pub host: Option<&'a HeaderValue>,
    /// The request id the gateway settled on (see [`incoming_request_id`]).
    pub request_id: &'a HeaderValue,
}

/// Set X-Forwarded-For / -Proto / -Host and X-Request-Id on a request going
/// upstream.
///
/// Untrusted peer: drop every incoming identity header
/// ([`is_identity_header`]: X-Forwarded-*, Forwarded, X-Real-IP, their
/// underscore spellings, the vendor client-address headers), then
/// X-Forwarded-For = peer, X-Forwarded-Proto = proto, X-Forwarded-Host =
/// the client's Host (if any).
///
/// Trusted peer: X-Forwarded-For = incoming chain (all lines, empty list
/// elements left out, joined with ", ") + ", " + peer; keep an incoming
/// X-Forwarded-Proto / -Host if present, else set them; keep the others.
///
/// X-Request-Id is always set to `request_id` (the caller decided whether to
/// keep the incoming one).
pub fn set_forwarded(headers: &mut HeaderMap, f: &Forwarded<'_>) {
    let peer = canonical_ip(f.peer);
    if f.peer_trusted {
        let xff = append_to_chain(headers, peer);
        headers.insert(X_FORWARDED_FOR, xff);
        if !headers.contains_key(&X_FORWARDED_PROTO) {
            insert_proto(headers, f.proto);
        }
        if let (false, Some(host)) = (headers.contains_key(&X_FORWARDED_HOST), f.host) {
            headers.insert(X_FORWARDED_HOST, host.clone());
        }
    } else {
        drop_forwarding_headers(headers);
        let value = f.peer_value.cloned().unwrap_or_else(|| ip_value(peer));
        headers.insert(X_FORWARDED_FOR, value);
        insert_proto(headers, f.proto);
        if let Some(host) = f.host {
            headers.insert(X_FORWARDED_HOST, host.clone());
        }
    }
    headers.insert(X_REQUEST_ID, f.request_id.clone());
}

/// The incoming X-Forwarded-For chain with `peer` appended: its elements
/// as [`xff_elements`] reads them (the client address is read from the same
/// ones), so `1.2.3.4, ` or `a,,b` never become empty members.
fn append_to_chain(headers: &HeaderMap, peer: IpAddr) -> HeaderValue {
    let mut chain: Vec<u8> = Vec::new();
    for line in headers.get_all(&X_FORWARDED_FOR) {
        for element in xff_elements(line.as_bytes()) {
            chain.extend_from_slice(element);
            chain.extend_from_slice(b", ");
        }
    }
    if chain.is_empty() {
        return ip_value(peer);
    }
    chain.extend_from_slice(peer.to_string().as_bytes());
    // The parts were valid header values, so the join is one too; should it
    // somehow not be, the peer alone is still a truthful chain.
    HeaderValue::from_bytes(&chain).unwrap_or_else(|_| ip_value(peer))
}

/// Remove every identity header ([`is_identity_header`]).
fn drop_forwarding_headers(headers: &mut HeaderMap) {
    // Most requests carry none: one pass over the names settles it, without
    // allocating.
    if !headers.keys().any(is_identity_header) {
        return;
    }
    // Rare: only such requests pay for collecting the names.
    let found: Vec<HeaderName> = headers
        .keys()
        .filter(|k| is_identity_header(k))
        .cloned()
        .collect();
    for name in found {
        headers.remove(name);
    }
}

/// Headers that say who the client is, other than `X-Forwarded-*`
/// (docs/protocols.md): the ones the gateway manages and the vendor client-address ones
/// (what a CDN or load balancer in front would set, and an application
/// behind might believe).
const IDENTITY_HEADERS: [&[u8]; 14] = [
    b"forwarded",
    b"x-real-ip",
    b"x-request-id",
    b"true-client-ip",
    b"cf-connecting-ip",
    b"x-client-ip",
    b"x-cluster-client-ip",
    b"fastly-client-ip",
    b"x-originating-ip",
    b"client-ip",
    b"x-forwarded",
    b"forwarded-for",
    b"x-original-forwarded-for",
    b"x-proxyuser-ip",
];

/// Whether a header from an untrusted peer is dropped (docs/protocols.md): any
/// `X-Forwarded-*`, or one of `IDENTITY_HEADERS`, also when spelt with
/// `_` for `-` (`X_Forwarded_For`, `X-Real_IP`): servers such as NGINX and
/// CGI/WSGI gateways make both spellings the same variable. `X-Request-Id`
/// itself is replaced rather than dropped; its underscore spellings go.
///
/// Called for every header of every request from an untrusted peer: a
/// first-byte test turns away most names, then byte comparisons on the
/// (always lowercase) name, never an allocation.
pub fn is_identity_header(name: &HeaderName) -> bool {
    let name = name.as_str().as_bytes();
    if !matches!(name.first(), Some(b'x' | b'f' | b't' | b'c')) {
        return false;
    }
    const PREFIX: &[u8] = b"x-forwarded-";
    (name.len() > PREFIX.len() && dashed_eq(&name[..PREFIX.len()], PREFIX))
        || IDENTITY_HEADERS.iter().any(|h| dashed_eq(name, h))
}

/// `name == canonical` with `_` in `name` read as `-`.
fn dashed_eq(name: &[u8], canonical: &[u8]) -> bool {
    name.len() == canonical.len()
        && name
            .iter()
            .zip(canonical)
            .all(|(&n, &c)| n == c || (n == b'_' && c == b'-'))
}

fn insert_proto(headers: &mut HeaderMap, proto: &str) {
    let value = match proto {
        "https" => HeaderValue::from_static("https"),
        "http" => HeaderValue::from_static("http"),
        // Not expected, but a bad value must not panic: leave it unset.
        other => match HeaderValue::from_str(other) {
            Ok(v) => v,
            Err(_) => return,
        },
    };
    headers.insert(X_FORWARDED_PROTO, value);
}

/// Removes from a client's request trailers what no upstream may take from
/// it there (docs/protocols.md): the fields RFC 9110 §6.5.1 keeps out of
/// trailers because they frame, route, authenticate or identify (Host,
/// Content-Length, Transfer-Encoding, Authorization, Cookie, and the
/// hop-by-hop ones), every client-address header (`X-Forwarded-*`,
/// `X-Real-IP`, the vendor ones, any spelling: from trusted peers too, whose
/// headers, not trailers, carry them), and what `also` names (the
/// configured identity headers).
pub fn scrub_request_trailers(trailers: &mut HeaderMap, also: impl Fn(&HeaderName) -> bool) {
    use http::header::{
        AUTHORIZATION, CONNECTION, CONTENT_LENGTH, COOKIE, HOST, PROXY_AUTHORIZATION, TE, TRAILER,
        TRANSFER_ENCODING, UPGRADE,
    };
    const NEVER: [HeaderName; 10] = [
        HOST,
        CONTENT_LENGTH,
        TRANSFER_ENCODING,
        AUTHORIZATION,
        PROXY_AUTHORIZATION,
        COOKIE,
        CONNECTION,
        TE,
        TRAILER,
        UPGRADE,
    ];
    let gone: Vec<HeaderName> = trailers
        .keys()
        .filter(|k| NEVER.contains(k) || is_identity_header(k) || also(k))
        .cloned()
        .collect();
    for name in gone {
        trailers.remove(name);
    }
}

/// Whether an incoming X-Request-Id may be kept: only from a trusted peer,
/// and only if it is 1..=200 visible ASCII chars. Several X-Request-Id
/// fields are ambiguous and kept as none.
pub fn incoming_request_id(headers: &HeaderMap, peer_trusted: bool) -> Option<HeaderValue> {
    if !peer_trusted {
        return None;
    }
    let mut values = headers.get_all(&X_REQUEST_ID).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let bytes = value.as_bytes();
    let ok = (1..=MAX_REQUEST_ID_LEN).contains(&bytes.len())
        && bytes.iter().all(|b| (0x21..=0x7e).contains(b));
    ok.then(|| value.clone())
}

/// An HTTP/2 (or HTTP/1.1) request made fit for an HTTP/1.1 upstream: the
/// `cookie` fields an HTTP/2 client may send one per crumb joined into one
/// with `; ` (RFC 9113 §8.2.3), and the trailer fields known to follow the
/// body declared in `Trailer` (hyper's HTTP/1 encoder sends only declared
/// ones; a client that declared its own keeps its declaration).
pub fn to_http1(headers: &mut HeaderMap, trailers: &[HeaderName]) {
    let mut cookies = headers.get_all(COOKIE).iter();
    if let (Some(first), Some(_)) = (cookies.next(), cookies.next()) {
        let mut joined = first.as_bytes().to_vec();
        for value in headers.get_all(COOKIE).iter().skip(1) {
            joined.extend_from_slice(b"; ");
            joined.extend_from_slice(value.as_bytes());
        }
        if let Ok(value) = HeaderValue::from_bytes(&joined) {
            headers.insert(COOKIE, value);
        }
    }
    if !trailers.is_empty() && !headers.contains_key(TRAILER) {
        let names: Vec<&str> = trailers.iter().map(HeaderName::as_str).collect();
        if let Ok(value) = HeaderValue::from_str(&names.join(", ")) {
            headers.insert(TRAILER, value);
        }
    }
}

/// Where an upstream's redirect is read from and written for, see
/// [`rewrite_location`].
pub struct LocationView<'a> {
    /// The route's stripped prefix (`/static`).
    pub prefix: &'a str,
    /// The target that answered, `scheme://authority`.
    pub target: &'a str,
    /// The scheme the client used, `http` or `https`.
    pub scheme: &'a str,
    /// The client's Host (or `:authority`).
    pub host: Option<&'a str>,
    /// Whether the upstream was sent the client's Host (`preserve_host`),
    /// so an absolute URL on that host also points at the upstream.
    pub preserve_host: bool,
}

/// Upstream redirects in the client's view (docs/protocols.md `rewrite_location`):
/// a `Location` or `Content-Location` that points at the upstream (a path,
/// or an absolute URL on the target's authority, or on the Host the
/// upstream was sent) gets the route's stripped prefix back, and an
/// absolute one the client's scheme and Host. Relative references and
/// other sites are left as they are.
pub fn rewrite_location(headers: &mut HeaderMap, view: &LocationView<'_>) {
    let prefix = view.prefix.trim_end_matches('/');
    for name in [header::LOCATION, header::CONTENT_LOCATION] {
        let Some(value) = headers.get(&name).and_then(|v| v.to_str().ok()) else {
            continue;
        };
        let rewritten = if value.starts_with('/') && !value.starts_with("//") {
            Some(format!("{prefix}{value}"))
        } else {
            absolute_on_upstream(value, view).map(|(host, rest)| {
                let slash = if rest.starts_with('/') || rest.is_empty() {
                    ""
                } else {
                    "/"
                };
                format!("{}://{host}{prefix}{slash}{rest}", view.scheme)
            })
        };
        if let Some(value) = rewritten.and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert(name, value);
        }
    }
}

/// For an absolute `http(s)://authority/rest` URL on the upstream (see
/// [`rewrite_location`]): the client's Host and `rest`.
fn absolute_on_upstream<'v, 'a>(
    url: &'v str,
    view: &LocationView<'a>,
) -> Option<(&'a str, &'v str)> {
    let host = view.host?;
    let after_scheme = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let end = after_scheme
        .find(['/', '?', '#'])
        .unwrap_or(after_scheme.len());
    let (authority, rest) = after_scheme.split_at(end);
    let target = view
        .target
        .split_once("://")
        .map_or(view.target, |(_, a)| a);
    let on_upstream = authority.eq_ignore_ascii_case(target)
        || (view.preserve_host && authority.eq_ignore_ascii_case(host));
    on_upstream.then_some((host, rest))
}

/// `grpc-timeout`.
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// A gRPC request's deadline, told to the upstream: its `grpc-timeout`, but
/// never longer than the route's `timeout` (the gateway gives up then), and
/// the route's when it has none.
pub fn grpc_deadline(headers: &mut HeaderMap, route_timeout: Duration) {
    let asked = headers
        .get(&GRPC_TIMEOUT)
        .and_then(|v| parse_grpc_timeout(v.as_bytes()));
    if asked.is_some_and(|t| t <= route_timeout) {
        return;
    }
    // At most 8 digits (gRPC's wire format): milliseconds while they fit.
    let ms = route_timeout.as_millis();
    let text = if ms < 100_000_000 {
        format!("{ms}m")
    } else {
        format!("{}S", route_timeout.as_secs().min(99_999_999))
    };
    if let Ok(value) = HeaderValue::from_str(&text) {
        headers.insert(GRPC_TIMEOUT, value);
    }
}

/// `grpc-timeout`'s value: up to 8 digits and a unit (`H`, `M`, `S`, `m`,
/// `u`, `n`).
fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hm(pairs: &[(&str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_static(v),
            );
        }
        h
    }

    fn all<'a>(h: &'a HeaderMap, name: &str) -> Vec<&'a str> {
        h.get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }

    #[test]
    fn fixed_hop_by_hop_headers_are_removed() {
        let mut h = hm(&[
            ("connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic Zm9v"),
            ("proxy-authenticate", "Basic"),
            ("content-type", "text/plain"),
            ("authorization", "Bearer x"),
        ]);
        strip_hop_by_hop(&mut h, false);
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["authorization", "content-type"]);
    }

    #[test]
    fn connection_named_headers_are_removed() {
        let mut h = hm(&[
            ("connection", "close, x-secret"),
            ("Connection", "X-Other ,, Keep-Alive"),
            ("x-secret", "1"),
            ("x-other", "2"),
            ("x-kept", "3"),
        ]);
        strip_hop_by_hop(&mut h, false);
        assert!(!h.contains_key("x-secret"));
        assert!(!h.contains_key("x-other"));
        assert!(!h.contains_key("connection"));
        assert_eq!(all(&h, "x-kept"), ["3"]);
    }

    #[test]
    fn garbage_connection_tokens_do_not_panic() {
        let mut h = HeaderMap::new();
        h.append(
            header::CONNECTION,
            HeaderValue::from_bytes(b"\xff\xfe, a b, (x)").unwrap(),
        );
        h.append("x-a", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn upgrade_is_kept_on_request() {
        let mut h = hm(&[
            ("connection", "Upgrade, x-secret"),
            ("upgrade", "websocket"),
            ("x-secret", "1"),
            ("sec-websocket-key", "abc"),
        ]);
        strip_hop_by_hop(&mut h, true);
        assert_eq!(all(&h, "upgrade"), ["websocket"]);
        assert_eq!(all(&h, "connection"), ["upgrade"]);
        assert!(!h.contains_key("x-secret"));
        assert_eq!(all(&h, "sec-websocket-key"), ["abc"]);

        // keep_upgrade without an Upgrade header: no Connection: upgrade.
        let mut h = hm(&[("connection", "close")]);
        strip_hop_by_hop(&mut h, true);
        assert!(h.is_empty());
    }

    #[test]
    fn te_trailers_survives_alone() {
        let mut h = hm(&[("te", "gzip, Trailers;q=1")]);
        strip_hop_by_hop(&mut h, false);
        // "trailers;q=1" is not the bare token; only "trailers" counts.
        assert!(!h.contains_key("te"));
        let mut h = hm(&[("te", "gzip, trailers"), ("connection", "te")]);
        strip_hop_by_hop(&mut h, false);
        assert_eq!(all(&h, "te"), ["trailers"]);
    }

    fn fwd<'a>(
        peer: &str,
        trusted: bool,
        host: Option<&'a HeaderValue>,
        id: &'a HeaderValue,
    ) -> Forwarded<'a> {
        Forwarded {
            peer: peer.parse().unwrap(),
            peer_value: None,
            peer_trusted: trusted,
            proto: "https",
            host,
            request_id: id,
        }
    }

    #[test]
    fn untrusted_peer_forged_headers_are_replaced() {
        let mut h = hm(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "7.7.7.7"),
            ("x-forwarded-proto", "http"),
            ("x-forwarded-host", "evil"),
            ("x-forwarded-port", "1"),
            ("X-Forwarded-Prefix", "/admin"),
            ("forwarded", "for=6.6.6.6"),
            ("x-real-ip", "6.6.6.6"),
            ("x-request-id", "forged"),
            ("accept", "*/*"),
        ]);
        let host = HeaderValue::from_static("api.example.com");
        let id = HeaderValue::from_static("gen-1");
        set_forwarded(&mut h, &fwd("::ffff:203.0.113.9", false, Some(&host), &id));
        assert_eq!(all(&h, "x-forwarded-for"), ["203.0.113.9"]);
        assert_eq!(all(&h, "x-forwarded-proto"), ["https"]);
        assert_eq!(all(&h, "x-forwarded-host"), ["api.example.com"]);
        assert_eq!(all(&h, "x-request-id"), ["gen-1"]);
        for gone in [
            "x-forwarded-port",
            "x-forwarded-prefix",
            "forwarded",
            "x-real-ip",
        ] {
            assert!(!h.contains_key(gone), "{gone}");
        }
        assert_eq!(all(&h, "accept"), ["*/*"]);
    }

    #[test]
    fn untrusted_peer_without_host() {
        let mut h = hm(&[("x-forwarded-host", "evil")]);
        let id = HeaderValue::from_static("gen-1");
        set_forwarded(&mut h, &fwd("2001:db8::1", false, None, &id));
        assert_eq!(all(&h, "x-forwarded-for"), ["2001:db8::1"]);
        assert!(!h.contains_key("x-forwarded-host"));
    }

    #[test]
    fn trusted_peer_chain_is_extended() {
        let mut h = hm(&[
            ("x-forwarded-for", " 198.51.100.7, 10.0.0.9 "),
            ("x-forwarded-for", "10.0.0.8"),
            ("x-forwarded-proto", "http"),
            ("x-forwarded-host", "front.example.com"),
            ("forwarded", "for=198.51.100.7"),
            ("x-real-ip", "198.51.100.7"),
        ]);
        let host = HeaderValue::from_static("api.example.com");
        let id = HeaderValue::from_static("kept-id");
        set_forwarded(&mut h, &fwd("10.0.0.2", true, Some(&host), &id));
        assert_eq!(
            all(&h, "x-forwarded-for"),
            ["198.51.100.7, 10.0.0.9, 10.0.0.8, 10.0.0.2"]
        );
        assert_eq!(all(&h, "x-forwarded-proto"), ["http"]);
        assert_eq!(all(&h, "x-forwarded-host"), ["front.example.com"]);
        assert_eq!(all(&h, "forwarded"), ["for=198.51.100.7"]);
        assert_eq!(all(&h, "x-real-ip"), ["198.51.100.7"]);
        assert_eq!(all(&h, "x-request-id"), ["kept-id"]);
    }

    /// Every spelling docs/protocols.md has an untrusted peer's request lose.
    const SPOOFS: [&str; 23] = [
        "X_Forwarded_For",
        "x-forwarded_for",
        "X_FORWARDED_PROTO",
        "x_forwarded_host",
        "X_Forwarded_Port",
        "X-Real_IP",
        "x_real_ip",
        "X_Request_Id",
        "True-Client-IP",
        "true_client_ip",
        "CF-Connecting-IP",
        "cf_connecting_ip",
        "X-Client-IP",
        "X-Cluster-Client-IP",
        "Fastly-Client-IP",
        "X-Originating-IP",
        "Client-IP",
        "X-Forwarded",
        "Forwarded-For",
        "X-Original-Forwarded-For",
        "x_original_forwarded_for",
        "X-ProxyUser-Ip",
        "X_ProxyUser_IP",
    ];

    #[test]
    fn request_trailers_lose_what_frames_routes_or_identifies() {
        let mut t = hm(&[
            ("x-checksum", "abc"),
            ("host", "evil"),
            ("content-length", "5"),
            ("authorization", "Bearer x"),
            ("cookie", "a=b"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x_real_ip", "6.6.6.6"),
            ("true-client-ip", "6.6.6.6"),
            ("x-consumer", "admin"),
            ("grpc-status", "0"),
        ]);
        scrub_request_trailers(&mut t, |n| n == "x-consumer");
        let left: Vec<&str> = t.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x-checksum", "grpc-status"]);
    }

    #[test]
    fn untrusted_peer_underscore_and_vendor_identity_headers_are_dropped() {
        let mut h = hm(&[("accept", "*/*"), ("x-forwarded-for", "6.6.6.6")]);
        for name in SPOOFS {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static("6.6.6.6"),
            );
        }
        // Near misses stay.
        for kept in [
            "x-forwarded",
            "x_forwardedfor",
            "client-ipv6",
            "x-client",
            "forwarded-by",
            "true-client",
            "x-request-ids",
            "cf-ray",
            "x-real-ip2",
        ] {
            let name = HeaderName::from_bytes(kept.as_bytes()).unwrap();
            assert_eq!(is_identity_header(&name), kept == "x-forwarded", "{kept}");
        }
        h.append("cf-ray", HeaderValue::from_static("1"));
        h.append("x_custom_header", HeaderValue::from_static("1"));
        let id = HeaderValue::from_static("gen-1");
        set_forwarded(&mut h, &fwd("203.0.113.9", false, None, &id));
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(
            left,
            [
                "accept",
                "cf-ray",
                "x-forwarded-for",
                "x-forwarded-proto",
                "x-request-id",
                "x_custom_header"
            ]
        );
        assert_eq!(all(&h, "x-forwarded-for"), ["203.0.113.9"]);
        assert_eq!(all(&h, "x-request-id"), ["gen-1"]);
    }

    #[test]
    fn trusted_peer_keeps_vendor_and_underscore_headers() {
        let mut h = HeaderMap::new();
        for name in SPOOFS {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static("198.51.100.7"),
            );
        }
        let id = HeaderValue::from_static("gen-1");
        set_forwarded(&mut h, &fwd("10.0.0.2", true, None, &id));
        for name in SPOOFS {
            assert_eq!(all(&h, name), ["198.51.100.7"], "{name}");
        }
    }

    #[test]
    fn trusted_peer_chain_has_no_empty_members() {
        for (lines, want) in [
            (&["1.2.3.4, "][..], "1.2.3.4, 10.0.0.2"),
            (&["1.2.3.4,"], "1.2.3.4, 10.0.0.2"),
            (&["a,,b"], "a, b, 10.0.0.2"),
            (&[", 1.2.3.4 ,\t, 5.6.7.8,,"], "1.2.3.4, 5.6.7.8, 10.0.0.2"),
            (&[",", " , ", "9.9.9.9"], "9.9.9.9, 10.0.0.2"),
            (&[",,"], "10.0.0.2"),
        ] {
            let mut h = HeaderMap::new();
            for line in lines {
                h.append(X_FORWARDED_FOR, HeaderValue::from_str(line).unwrap());
            }
            let id = HeaderValue::from_static("gen-1");
            set_forwarded(&mut h, &fwd("10.0.0.2", true, None, &id));
            assert_eq!(all(&h, "x-forwarded-for"), [want], "{lines:?}");
        }
    }

    #[test]
    fn trusted_peer_without_incoming_headers() {
        let mut h = HeaderMap::new();
        let host = HeaderValue::from_static("api.example.com");
        let id = HeaderValue::from_static("gen-2");
        set_forwarded(&mut h, &fwd("10.0.0.2", true, Some(&host), &id));
        assert_eq!(all(&h, "x-forwarded-for"), ["10.0.0.2"]);
        assert_eq!(all(&h, "x-forwarded-proto"), ["https"]);
        assert_eq!(all(&h, "x-forwarded-host"), ["api.example.com"]);
    }

    #[test]
    fn request_id_kept_only_from_trusted_peer_and_when_sane() {
        let h = hm(&[("x-request-id", "abc-123")]);
        assert_eq!(incoming_request_id(&h, true).unwrap(), "abc-123");
        assert_eq!(incoming_request_id(&h, false), None);
        assert_eq!(incoming_request_id(&HeaderMap::new(), true), None);
        for bad in ["", "has space", "tab\there"] {
            let h = hm(&[("x-request-id", bad)]);
            assert_eq!(incoming_request_id(&h, true), None, "{bad:?}");
        }
        let long: &'static str = Box::leak("a".repeat(201).into_boxed_str());
        assert_eq!(
            incoming_request_id(&hm(&[("x-request-id", long)]), true),
            None
        );
        let ok: &'static str = Box::leak("a".repeat(200).into_boxed_str());
        assert!(incoming_request_id(&hm(&[("x-request-id", ok)]), true).is_some());
        let mut h = HeaderMap::new();
        h.append(X_REQUEST_ID, HeaderValue::from_bytes(b"caf\xe9").unwrap());
        assert_eq!(incoming_request_id(&h, true), None);
        let two = hm(&[("x-request-id", "a"), ("x-request-id", "b")]);
        assert_eq!(incoming_request_id(&two, true), None);
    }

    fn location_after(location: &'static str, preserve_host: bool) -> String {
        let mut h = hm(&[("location", location)]);
        let view = LocationView {
            prefix: "/static/",
            target: "http://10.0.0.1:8080",
            scheme: "https",
            host: Some("gw.example"),
            preserve_host,
        };
        rewrite_location(&mut h, &view);
        h["location"].to_str().unwrap().to_owned()
    }

    #[test]
    fn redirects_to_the_upstream_get_the_prefix_back() {
        assert_eq!(location_after("/sub/", true), "/static/sub/");
        assert_eq!(location_after("/", true), "/static/");
        assert_eq!(
            location_after("http://10.0.0.1:8080/a?b#c", false),
            "https://gw.example/static/a?b#c"
        );
        assert_eq!(
            location_after("http://10.0.0.1:8080", false),
            "https://gw.example/static"
        );
        assert_eq!(
            location_after("http://10.0.0.1:8080?q", false),
            "https://gw.example/static/?q"
        );
        // The Host the upstream was sent, only when it was the client's.
        assert_eq!(
            location_after("http://GW.example/x", true),
            "https://gw.example/static/x"
        );
        assert_eq!(
            location_after("http://gw.example/x", false),
            "http://gw.example/x"
        );
        // Elsewhere, relative, scheme-relative, or a longer authority: kept.
        for kept in [
            "https://other.example/x",
            "sub/",
            "//10.0.0.1:8080/x",
            "http://10.0.0.1:80801/x",
            "ftp://10.0.0.1:8080/x",
        ] {
            assert_eq!(location_after(kept, true), kept);
        }
    }

    #[test]
    fn cookies_are_joined_and_known_trailers_declared_for_http1() {
        let mut h = hm(&[("cookie", "a=1"), ("cookie", "b=2"), ("cookie", "c=3")]);
        to_http1(&mut h, &[HeaderName::from_static("x-sum")]);
        let cookies: Vec<_> = h.get_all(COOKIE).iter().collect();
        assert_eq!(cookies, ["a=1; b=2; c=3"]);
        assert_eq!(h[TRAILER], "x-sum");
        // One cookie field and a client's own declaration are kept.
        let mut h = hm(&[("cookie", "a=1"), ("trailer", "x-mine")]);
        to_http1(&mut h, &[HeaderName::from_static("x-sum")]);
        assert_eq!(h[COOKIE], "a=1");
        assert_eq!(h[TRAILER], "x-mine");
    }

    #[test]
    fn grpc_timeout_never_outlives_the_route() {
        let after = |value: Option<&'static str>| {
            let mut h = value.map_or_else(HeaderMap::new, |v| hm(&[("grpc-timeout", v)]));
            grpc_deadline(&mut h, Duration::from_secs(2));
            h[&GRPC_TIMEOUT].to_str().unwrap().to_owned()
        };
        assert_eq!(after(None), "2000m");
        assert_eq!(after(Some("100S")), "2000m");
        assert_eq!(after(Some("1H")), "2000m");
        assert_eq!(after(Some("500m")), "500m");
        assert_eq!(after(Some("1999999u")), "1999999u");
        assert_eq!(after(Some("2S")), "2S");
        for bad in ["", "m", "5x", "123456789m", "-5m", "5 m"] {
            assert_eq!(after(Some(bad)), "2000m", "{bad:?}");
        }
        let mut h = HeaderMap::new();
        grpc_deadline(&mut h, Duration::from_secs(200_000));
        assert_eq!(h[&GRPC_TIMEOUT], "200000S", "8 digits at most");
    }
}
