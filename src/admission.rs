//! Admission (docs/protocols.md): everything the gateway decides about a request
//! from its head alone, in order:
//!
//! ```text
//! deny list -> head size -> method (TRACE, CONNECT) -> framing and Host
//!   -> request-target (OPTIONS *) -> normalise the path -> find the route
//! ```
//!
//! [`admit`] is a plain function of the request head, the runtime and the
//! client, with no I/O, so the gateway's pipeline and `tollgate simulate`
//! apply the very same rules (and each stage is unit-tested with
//! `http::Request::builder()`).

use std::borrow::Cow;
use std::sync::Arc;

use http::{header, HeaderMap, HeaderValue, Method, Request, Version};

use crate::client_addr::{self, Client};
use crate::config::ServerConfig;
use crate::error::GatewayError;
use crate::route::normalise::{normalise_path, EscapedSlashes};
use crate::runtime::{RouteRuntime, Runtime};

/// A request let in, and where it goes.
pub struct Admitted<'rt, 'req> {
    /// The route that matched.
    pub route: &'rt Arc<RouteRuntime>,
    /// The normalised path: what was matched, and what is forwarded.
    pub path: Cow<'req, str>,
    /// The Host the client asked for (HTTP/2 `:authority`, else `Host`).
    pub host: Option<HeaderValue>,
}

/// Admit `req` from `client` under `rt`, or say why not. `ambiguous_framing`
/// is what the connection's framing watcher saw (hyper drops a
/// Content-Length sent beside Transfer-Encoding before the request gets
/// here).
pub fn admit<'rt, 'req, B>(
    req: &'req Request<B>,
    rt: &'rt Runtime,
    client: &Client,
    ambiguous_framing: bool,
) -> Result<Admitted<'rt, 'req>, GatewayError> {
    let server = &rt.config.server;
    deny(client, server)?;
    head_size(req, server.max_header_bytes)?;
    method(req.method())?;
    let host = if req.version() < Version::HTTP_2 {
        if ambiguous_framing {
            return Err(GatewayError::BadRequest {
                reason: "both Content-Length and Transfer-Encoding",
                close: true,
            });
        }
        framing(req.headers())?;
        // The field `single_host` found is the one `request_host` would
        // look up again: checked here, one lookup for both.
        single_host(req)?.map(host_field).transpose()?
    } else {
        request_host(req)?
    };
    if host.is_none() && req.version() >= Version::HTTP_2 {
        // An HTTP/2 request names its host in `:authority` or Host.
        return Err(GatewayError::BadRequest {
            reason: "neither :authority nor Host",
            close: true,
        });
    }
    let path = target_path(req, server.escaped_slashes)?;
    let find = |path: &str| {
        rt.router.find(
            host.as_ref().and_then(|h| h.to_str().ok()),
            req.method(),
            path,
            req.headers(),
        )
    };
    let route = find(&path).ok_or(GatewayError::NoRoute)?;
    if path.contains(';') {
        same_route_without_params(&path, route, server, find)?;
    }
    Ok(Admitted { route, path, host })
}

/// `;params` (docs/protocols.md): a servlet container (Tomcat, Jetty) drops each
/// segment's `;...` before it resolves dot segments, so `/x/..;/admin` and
/// `/admin;v=1` are `/admin` to it. A path whose `;params` would take it to
/// another route than the one it matched (and past that route's limits) is
/// a 400; one that stays on its route (`/users;v=2` under `/users`) passes
/// as it is.
fn same_route_without_params<'rt>(
    path: &str,
    route: &'rt Arc<RouteRuntime>,
    server: &ServerConfig,
    find: impl Fn(&str) -> Option<&'rt Arc<RouteRuntime>>,
) -> Result<(), GatewayError> {
    let bad = || GatewayError::BadRequest {
        reason: "path parameters lead to another route",
        close: true,
    };
    let bare: Vec<&str> = path
        .split('/')
        .map(|segment| segment.split(';').next().unwrap_or_default())
        .collect();
    let bare = bare.join("/");
    let bare = normalise_path(&bare, server.escaped_slashes).map_err(|_| bad())?;
    match find(&bare) {
        Some(other) if Arc::ptr_eq(other, route) => Ok(()),
        _ => Err(bad()),
    }
}

/// `server.deny`: the peer or the client it speaks for is refused (403).
pub fn deny(client: &Client, server: &ServerConfig) -> Result<(), GatewayError> {
    if client_addr::in_any(client.peer, &server.deny)
        || client_addr::in_any(client.addr, &server.deny)
    {
        return Err(GatewayError::Denied);
    }
    Ok(())
}

/// The request head within `server.max_header_bytes` (431).
pub fn head_size<B>(req: &Request<B>, max_header_bytes: usize) -> Result<(), GatewayError> {
    let head_bytes: usize = req.uri().path().len()
        + req.uri().query().map_or(0, str::len)
        + req
            .headers()
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum::<usize>();
    if head_bytes > max_header_bytes {
        return Err(GatewayError::HeadTooLarge);
    }
    Ok(())
}

/// `TRACE` and `CONNECT` are answered 405 (docs/protocols.md), never forwarded.
pub fn method(method: &Method) -> Result<(), GatewayError> {
    if method == Method::TRACE || method == Method::CONNECT {
        return Err(GatewayError::MethodNotAllowed(method.clone()));
    }
    Ok(())
}

/// HTTP/1 framing (docs/protocols.md): one `chunked` transfer coding and no
/// Content-Length beside it.
pub fn framing(headers: &HeaderMap) -> Result<(), GatewayError> {
    let mut codings = headers.get_all(header::TRANSFER_ENCODING).iter();
    if let Some(first) = codings.next() {
        if headers.contains_key(header::CONTENT_LENGTH) {
            return Err(GatewayError::BadRequest {
                reason: "both Content-Length and Transfer-Encoding",
                close: true,
            });
        }
        if codings.next().is_some()
            || !first
                .as_bytes()
                .trim_ascii()
                .eq_ignore_ascii_case(b"chunked")
        {
            return Err(GatewayError::UnsupportedTransferCoding);
        }
    }
    Ok(())
}

/// HTTP/1: exactly one Host on HTTP/1.1 (HTTP/1.0 may send none); the
/// field, if there is one.
pub fn single_host<B>(req: &Request<B>) -> Result<Option<&HeaderValue>, GatewayError> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if req.version() == Version::HTTP_11 => Err(GatewayError::BadRequest {
            reason: "missing Host",
            close: true,
        }),
        (Some(_), Some(_)) => Err(GatewayError::BadRequest {
            reason: "several Host fields",
            close: true,
        }),
        (host, _) => Ok(host),
    }
}

/// The Host the client asked for: HTTP/2's `:authority`, else the Host
/// field. It must be a valid authority without user info.
pub fn request_host<B>(req: &Request<B>) -> Result<Option<HeaderValue>, GatewayError> {
    let bad = || GatewayError::BadRequest {
        reason: "invalid Host",
        close: true,
    };
    if req.version() >= Version::HTTP_2 {
        if let Some(authority) = req.uri().authority() {
            return HeaderValue::from_str(authority.as_str())
                .map(Some)
                .map_err(|_| bad());
        }
    }
    req.headers().get(header::HOST).map(host_field).transpose()
}

/// A Host field's value, if it is a valid authority without user info.
fn host_field(value: &HeaderValue) -> Result<HeaderValue, GatewayError> {
    let bad = || GatewayError::BadRequest {
        reason: "invalid Host",
        close: true,
    };
    let bytes = value.as_bytes();
    // A plain host has no `@` (user info) to look for.
    if plain_host_and_port(bytes) {
        return Ok(value.clone());
    }
    if bytes.is_empty() || bytes.contains(&b'@') {
        return Err(bad());
    }
    let authority = http::uri::Authority::try_from(bytes).map_err(|_| bad())?;
    // `Authority` accepts any text after the last ':'; a port must be digits.
    let host_end = authority.as_str().rfind(']').unwrap_or(0);
    if authority.as_str()[host_end..].contains(':') && authority.port_u16().is_none() {
        return Err(bad());
    }
    Ok(value.clone())
}

/// The common Host, checked without parsing (which copies it): a name or
/// IPv4 address of letters, digits, dots and dashes, then maybe `:` and a
/// port of one to five digits within 65535. Whatever passes is a valid
/// authority with a valid port; anything else (IPv6, other characters)
/// takes the full parse.
fn plain_host_and_port(bytes: &[u8]) -> bool {
    let (host, port) = match bytes.iter().position(|&b| b == b':') {
        Some(i) => (&bytes[..i], Some(&bytes[i + 1..])),
        None => (bytes, None),
    };
    let host_ok = !host.is_empty()
        && host
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'.' || *b == b'-');
    let port_ok = port.is_none_or(|p| {
        (1..=5).contains(&p.len())
            && p.iter().all(u8::is_ascii_digit)
            // At most five digits: no overflow in a u32.
            && p.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')) <= u32::from(u16::MAX)
    });
    host_ok && port_ok
}

/// A declared body larger than `server.max_body_bytes` (413), refused
/// before anything is sent; a body without a length is held to the cap as
/// it is read.
pub fn body_size(headers: &HeaderMap, max: Option<u64>) -> Result<(), GatewayError> {
    match max {
        Some(max) if content_length(headers).is_some_and(|len| len > max) => {
            Err(GatewayError::BodyTooLarge)
        }
        _ => Ok(()),
    }
}

/// The request's Content-Length, if it has a valid one.
pub fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The request-target's path, normalised under `escaped_slashes` (docs/protocols.md):
/// an origin-form target only (HTTP/1; HTTP/2 carries `:path`), `OPTIONS *`
/// is about the server and matches no route (404), a path that cannot be
/// normalised is a 400.
pub fn target_path<B>(
    req: &Request<B>,
    escaped_slashes: EscapedSlashes,
) -> Result<Cow<'_, str>, GatewayError> {
    let uri = req.uri();
    if uri.path() == "*" && req.method() == Method::OPTIONS {
        return Err(GatewayError::NoRoute);
    }
    let origin_form = uri.path().starts_with('/')
        && (req.version() >= Version::HTTP_2
            || (uri.scheme().is_none() && uri.authority().is_none()));
    if !origin_form {
        return Err(GatewayError::BadRequest {
            reason: "request target is not origin-form",
            close: true,
        });
    }
    normalise_path(uri.path(), escaped_slashes).map_err(|_| GatewayError::BadRequest {
        reason: "invalid path",
        close: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn runtime(yaml: &str) -> Runtime {
        let loaded = crate::config::parse(yaml, "t.yaml").expect("config");
        Runtime::build(loaded.config, String::new(), 1, None).expect("runtime")
    }

    const ROUTES: &str = "
server:
  deny: [\"192.0.2.0/24\"]
  trusted_proxies: [\"10.0.0.0/8\"]
  max_header_bytes: 200
routes:
  - { name: api, match: { hosts: [api.example.com], path: /api }, respond: {} }
  - { name: any, match: { path: /, methods: [GET] }, respond: {} }
";

    fn client(peer: &str, headers: &HeaderMap, rt: &Runtime) -> Client {
        let peer: IpAddr = peer.parse().unwrap();
        Client::identify(peer, headers, &rt.config.server.trusted_proxies)
    }

    /// The route name, or the error's code.
    fn outcome(rt: &Runtime, req: &Request<()>, peer: &str) -> Result<String, &'static str> {
        let who = client(peer, req.headers(), rt);
        admit(req, rt, &who, false)
            .map(|a| format!("{} {}", a.route.name, a.path))
            .map_err(|e| e.status_and_code().1)
    }

    fn get(uri: &str) -> http::request::Builder {
        Request::builder()
            .method("GET")
            .uri(uri)
            .header("host", "api.example.com")
    }

    #[test]
    fn stages_in_order() {
        let rt = runtime(ROUTES);
        let ok = get("/api/./v1//users").body(()).unwrap();
        assert_eq!(
            outcome(&rt, &ok, "127.0.0.1"),
            Ok("api /api/v1/users".into())
        );
        // The deny list sees the peer and the client a trusted proxy names.
        assert_eq!(outcome(&rt, &ok, "192.0.2.9"), Err("forbidden"));
        let forwarded = get("/api")
            .header("x-forwarded-for", "192.0.2.7")
            .body(())
            .unwrap();
        assert_eq!(outcome(&rt, &forwarded, "10.1.1.1"), Err("forbidden"));
        assert_eq!(outcome(&rt, &forwarded, "127.0.0.1"), Ok("api /api".into()));
        // Head size, then the method, before anything about the target.
        let big = get("/api")
            .header("x-pad", "x".repeat(300))
            .body(())
            .unwrap();
        assert_eq!(
            outcome(&rt, &big, "127.0.0.1"),
            Err("request_header_too_large")
        );
        for m in ["TRACE", "CONNECT"] {
            let r = Request::builder()
                .method(m)
                .uri("/api")
                .header("host", "h")
                .body(())
                .unwrap();
            assert_eq!(
                outcome(&rt, &r, "127.0.0.1"),
                Err("method_not_allowed"),
                "{m}"
            );
        }
        let r = Request::builder()
            .method("OPTIONS")
            .uri("*")
            .header("host", "h")
            .body(())
            .unwrap();
        assert_eq!(outcome(&rt, &r, "127.0.0.1"), Err("no_route"));
        let r = get("http://api.example.com/api").body(()).unwrap();
        assert_eq!(
            outcome(&rt, &r, "127.0.0.1"),
            Err("bad_request"),
            "absolute-form"
        );
        let r = get("/api/../../etc").body(()).unwrap();
        assert_eq!(
            outcome(&rt, &r, "127.0.0.1"),
            Err("bad_request"),
            "above the root"
        );
        let r = Request::builder()
            .method("POST")
            .uri("/x")
            .header("host", "h")
            .body(())
            .unwrap();
        assert_eq!(outcome(&rt, &r, "127.0.0.1"), Err("no_route"));
    }

    /// What the full parse says of a Host (a valid authority, and a port
    /// that fits when there is a colon after the host).
    fn parsed_host_ok(bytes: &[u8]) -> bool {
        let Ok(authority) = http::uri::Authority::try_from(bytes) else {
            return false;
        };
        let host_end = authority.as_str().rfind(']').unwrap_or(0);
        !(authority.as_str()[host_end..].contains(':') && authority.port_u16().is_none())
    }

    #[test]
    fn the_plain_host_check_accepts_only_what_the_full_parse_accepts() {
        for host in [
            "a",
            "api.example.com",
            "127.0.0.1:8080",
            "x-y.z:1",
            "h:65535",
            "h:00080",
        ] {
            assert!(plain_host_and_port(host.as_bytes()), "{host}");
            assert!(parsed_host_ok(host.as_bytes()), "{host}");
        }
        // Left to the full parse: IPv6, other characters, odd ports.
        for host in [
            "[::1]:80", "h:", ":80", "h:65536", "h:123456", "h:8a", "a_b", "h:1:2", "é",
        ] {
            assert!(!plain_host_and_port(host.as_bytes()), "{host}");
        }
    }

    proptest::proptest! {
        #[test]
        fn plain_hosts_are_valid_authorities(host in "[a-zA-Z0-9.:_-]{0,12}") {
            if plain_host_and_port(host.as_bytes()) {
                proptest::prop_assert!(parsed_host_ok(host.as_bytes()), "{}", host);
            }
        }
    }

    #[test]
    fn path_parameters_may_not_change_the_route() {
        let rt = runtime(ROUTES);
        let at = |uri: &str| outcome(&rt, &get(uri).body(()).unwrap(), "127.0.0.1");
        // Parameters that keep the request on its route pass as they are.
        assert_eq!(
            at("/api/x;jsessionid=1"),
            Ok("api /api/x;jsessionid=1".into())
        );
        assert_eq!(at("/other;v=1"), Ok("any /other;v=1".into()));
        // Ones a servlet container would read as another route's path.
        for uri in ["/x/..;/api", "/api;v=2/x", "/x;/..;/api/y", "/ap;i"] {
            let want = if uri == "/ap;i" {
                Ok("any /ap;i".into())
            } else {
                Err("bad_request")
            };
            assert_eq!(at(uri), want, "{uri}");
        }
        // A parameter-stripped path above the root.
        assert_eq!(at("/..;/api"), Err("bad_request"));
    }

    #[test]
    fn framing_and_host() {
        let rt = runtime(ROUTES);
        let no_host = Request::builder().uri("/").body(()).unwrap();
        assert_eq!(outcome(&rt, &no_host, "127.0.0.1"), Err("bad_request"));
        let http10 = Request::builder()
            .uri("/")
            .version(Version::HTTP_10)
            .body(())
            .unwrap();
        assert_eq!(outcome(&rt, &http10, "127.0.0.1"), Ok("any /".into()));
        let two = get("/").header("host", "b").body(()).unwrap();
        assert!(matches!(
            admit(&two, &rt, &client("127.0.0.1", two.headers(), &rt), false),
            Err(GatewayError::BadRequest { close: true, .. })
        ));
        for bad in ["a@b", "h:port", ""] {
            let r = Request::builder()
                .uri("/")
                .header("host", bad)
                .body(())
                .unwrap();
            assert_eq!(outcome(&rt, &r, "127.0.0.1"), Err("bad_request"), "{bad}");
        }
        let te = get("/")
            .header("transfer-encoding", "gzip")
            .body(())
            .unwrap();
        assert_eq!(
            outcome(&rt, &te, "127.0.0.1"),
            Err("unsupported_transfer_coding")
        );
        let both = get("/")
            .header("transfer-encoding", "chunked")
            .header("content-length", "3")
            .body(())
            .unwrap();
        assert_eq!(outcome(&rt, &both, "127.0.0.1"), Err("bad_request"));
        let ok = get("/").body(()).unwrap();
        assert!(admit(&ok, &rt, &client("127.0.0.1", ok.headers(), &rt), true).is_err());
        // HTTP/2: `:authority` is the host, and no Host field is needed.
        let h2 = Request::builder()
            .uri("https://api.example.com/api/x")
            .version(Version::HTTP_2)
            .body(())
            .unwrap();
        assert_eq!(outcome(&rt, &h2, "127.0.0.1"), Ok("api /api/x".into()));
    }
}
