//! Path parity (docs/protocols.md `server.escaped_slashes`): no spelling of a
//! limited path reaches an upstream without being counted by that path's
//! limit.
//!
//! One gateway per mode (`reject`, `decode`, `keep`) with two routes: the
//! limited route `path: /api/admin` (a token bucket that never refills, to
//! its own echo upstream) and a catch-all `/` without limits (to another
//! echo). More than 300 spellings of `/api/admin` are sent, each over
//! HTTP/1.1 exactly as written (raw TCP) and, when the `http` crate can
//! carry it, as an HTTP/2 `:path` (h2c). Each must end one of three ways:
//!
//! - counted: it reached the limited route's upstream, and the `RateLimit`
//!   remaining went down by one;
//! - rejected: a 4xx (or no answer at all, or a reset stream) and no
//!   upstream saw it;
//! - harmless: it reached the catch-all at a path that a lax upstream does
//!   not read as `/api/admin` or below it.
//!
//! The lax upstream of `reject` and `decode` percent-decodes once and then
//! again (as a framework behind a WSGI server may), decodes `%2F` and `%5C`,
//! reads overlong UTF-8 as ASCII (`%C0%AF` is `/`), takes `\` for `/`,
//! merges slashes and resolves dot segments. `keep` promises upstreams that
//! treat `%2F` and `%5C` as data and decode once, so its lax upstream does
//! not decode those two and decodes once.
//!
//! A servlet container (Tomcat, Jetty) also drops each segment's `;params`
//! before it decodes and resolves dot segments (`/x/..;/api/admin` is
//! `/api/admin` to it): in every mode, a spelling that reaches the catch-all
//! at a path a servlet container reads as the limited path is a failure too.
//!
//! Paths are case-sensitive (RFC 3986): the counts also say how many
//! spellings reached the catch-all at a path that a case-insensitive
//! upstream would read as the limited path. Those are reported, not
//! failures (`/API/admin` is another path, as it is to NGINX's locations).

mod common;

use std::fmt::Write as _;
use std::time::Duration;

use common::client::{self, HttpClient};
use common::raw::{self, RawResponse};
use common::{config_with_server, Echo, Gateway};
use http::{Method, Request};

/// The limited path.
const LIMITED: &str = "/api/admin";

/// The three modes, as written in the config.
const MODES: [&str; 3] = ["reject", "decode", "keep"];

/// A gateway in one mode, its limited upstream and its catch-all.
struct Setup {
    mode: &'static str,
    gw: Gateway,
    limited: Echo,
    rest: Echo,
}

async fn setup(mode: &'static str) -> Setup {
    let limited = Echo::start("limited").await;
    let rest = Echo::start("rest").await;
    let gw = Gateway::start(&config_with_server(
        &format!("escaped_slashes: {mode}"),
        &format!(
            r#"
            upstreams:
              limited: {{ targets: ["{}"], retries: 0 }}
              rest: {{ targets: ["{}"], retries: 0 }}
            routes:
              - name: admin
                match: {{ path: {LIMITED} }}
                upstream: limited
                limits:
                  - {{ algorithm: token_bucket, rate: 1/d, burst: 5000, key: client_ip }}
              - name: rest
                match: {{ path: / }}
                upstream: rest
            "#,
            limited.url(),
            rest.url()
        ),
    ))
    .await;
    Setup {
        mode,
        gw,
        limited,
        rest,
    }
}

// ----- the spellings -----

fn pct(b: u8, lower: bool) -> String {
    if lower {
        format!("%{b:02x}")
    } else {
        format!("%{b:02X}")
    }
}

/// `LIMITED` without its leading slash, with each byte given by `f`
/// (its index and value).
fn respelled(f: impl Fn(usize, u8) -> String) -> String {
    let mut out = String::from("/");
    for (i, b) in LIMITED.bytes().skip(1).enumerate() {
        out.push_str(&f(i, b));
    }
    out
}

/// At least 300 distinct request-targets that a lax reader could take for
/// `/api/admin` (or a path below it), and a few it should not.
fn spellings() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut add = |s: &str| out.push(s.as_bytes().to_vec());
    let body = &LIMITED[1..];
    let plain = |b: u8| char::from(b).to_string();

    // Each character percent-encoded alone, in both hex cases; the leading
    // slash too.
    for i in 0..body.len() {
        for lower in [false, true] {
            add(&respelled(
                |j, b| if i == j { pct(b, lower) } else { plain(b) },
            ));
        }
    }
    for lower in [false, true] {
        add(&format!("{}{body}", pct(b'/', lower)));
        // Every character encoded; every character but the slash.
        add(&respelled(|_, b| pct(b, lower)));
        add(&respelled(
            |_, b| {
                if b == b'/' {
                    plain(b)
                } else {
                    pct(b, lower)
                }
            },
        ));
    }

    // Double encoding of each character, triple encoding, and the `%25`
    // followed by encoded hex digits (`%25%32%46` decodes to `%2F`).
    for i in 0..body.len() {
        for lower in [false, true] {
            add(&respelled(|j, b| {
                if i == j {
                    format!("%25{}", &pct(b, lower)[1..])
                } else {
                    plain(b)
                }
            }));
        }
    }
    for s in [
        "/api%25252Fadmin",
        "/api%2525252fadmin",
        "/%252561pi/admin",
        "/api%25%32%46admin",
        "/api%25%32fadmin",
        "/api%252%46admin",
        "/api%25%32%66admin",
        "/api%255Cadmin",
        "/api%255cadmin",
        "/api%25%35%43admin",
        "/%2561%2570%2569%252F%2561%2564%256D%2569%256E",
        "%252Fapi%252Fadmin",
        "/api/admin%25",
        "/api%25/admin",
        "/api/%2561dmin",
        "/x/%252e%252e/api/admin",
        "/x/%252E%252E/api/admin",
        "/x/.%252e/api/admin",
        "/x/%252e%252e%252Fapi/admin",
        "/api/x/%252e%252e/admin",
    ] {
        add(s);
    }

    // Dot segments, plain and encoded, and `..` above the root.
    for s in [
        "/x/../api/admin",
        "/x/%2e%2e/api/admin",
        "/x/%2E%2E/api/admin",
        "/x/.%2e/api/admin",
        "/x/%2e./api/admin",
        "/./api/admin",
        "/%2e/api/admin",
        "/%2E/api/admin",
        "/api/./admin",
        "/api/%2e/admin",
        "/api/admin/.",
        "/api/admin/%2e",
        "/api/x/../admin",
        "/api/x/%2e%2e/admin",
        "/api/admin/x/..",
        "/api/admin/x/%2E%2E",
        "/x/y/../../api/admin",
        "/api/admin/../admin",
        "/../api/admin",
        "/%2e%2e/api/admin",
        "/api/../../api/admin",
        "/x/..%2Fapi/admin",
        "/x/..%2fapi%2fadmin",
        "/x/%2e%2e%2Fapi/admin",
        "/x%2F..%2Fapi/admin",
        "/api/x%2F..%2Fadmin",
        "/api/x%5C..%5Cadmin",
        "/api/x%5c%2e%2e%5cadmin",
        "/api/admin/x%2F..",
        "/x/..%5Capi%5Cadmin",
        "/x/.../api/admin",
        "/api/admin/..",
        "/api/admin/%2e%2e",
        "/api/admin/./",
        "/x/./../api/./admin/.",
        "/x/%2e%2E/%61pi/admin",
    ] {
        add(s);
    }

    // Repeated slashes, trailing slashes.
    for s in [
        "//api/admin",
        "/api//admin",
        "///api///admin",
        "/api/admin//",
        "/api/admin/",
        "//api//admin//",
        "/api/admin/x",
        "//api/admin/x",
        "/api%2F%2Fadmin",
        "/api/%2Fadmin",
        "/api%2F/admin",
        "/api/admin%2F",
        "/api/admin%2Fx",
        "%2F%2Fapi/admin",
        "/%2F/api/admin",
    ] {
        add(s);
    }

    // Encoded slashes and backslashes.
    for s in [
        "/api%2Fadmin",
        "/api%2fadmin",
        "/api%5Cadmin",
        "/api%5cadmin",
        "%2Fapi%2Fadmin",
        "%5Capi%5Cadmin",
        "/%5Capi%5Cadmin",
        "/api%5C%5Cadmin",
        "/api%2F%2e%2e%2Fapi%2Fadmin",
        "/%61pi%2F%61dmin",
        "/api%2Fadm%69n",
        "/api%2Fadmin?x=1",
        "/api%2Fadmin/",
        "/api%2F.%2Fadmin",
        "/api%5C.%5Cadmin",
        "/api%2F%5Cadmin",
    ] {
        add(s);
    }

    // Raw backslashes.
    for s in [
        "/api\\admin",
        "\\api\\admin",
        "/api\\\\admin",
        "/x\\..\\api\\admin",
        "/api/admin\\",
        "/api\\/admin",
        "/x/..\\api/admin",
        "/api/x\\..\\admin",
        "/\\api/admin",
    ] {
        add(s);
    }

    // Path parameters.
    for s in [
        "/api/admin;x=1",
        "/api;x=1/admin",
        "/api;/admin",
        "/api/admin;",
        "/;x/api/admin",
        "/api/admin;jsessionid=abc",
        "/x/..;/api/admin",
        "/api/x/..;/admin",
        "/api;%2Fadmin",
        "/api/admin;/x",
        "/api%3Badmin",
        "/api/admin%3B",
        "/;/api/admin",
    ] {
        add(s);
    }

    // Overlong UTF-8 and other slashes: `/`, `\` and `.` in two, three and
    // four bytes, IIS `%u`, fullwidth and division slashes.
    for s in [
        "/api%C0%AFadmin",
        "/api%c0%afadmin",
        "/api%E0%80%AFadmin",
        "/api%e0%80%afadmin",
        "/api%F0%80%80%AFadmin",
        "/api%C1%9Cadmin",
        "/api%E0%81%9Cadmin",
        "/x/%C0%AE%C0%AE/api/admin",
        "/x/%C0%AE%C0%AE%C0%AFapi/admin",
        "/x/%E0%80%AE%E0%80%AE/api/admin",
        "/api%C0%2Fadmin",
        "/api%C0admin",
        "/api%u002Fadmin",
        "/api%u2215admin",
        "/api%EF%BC%8Fadmin",
        "/api%E2%88%95admin",
        "/api%E2%81%84admin",
        "/api%25C0%25AFadmin",
        "/api%C0%25AFadmin",
        "/%61pi%C0%AF%61dmin",
    ] {
        add(s);
    }
    for raw in [
        &b"/api\xC0\xAFadmin"[..],
        b"/api\xE0\x80\xAFadmin",
        b"/api\xEF\xBC\x8Fadmin",
    ] {
        out.push(raw.to_vec());
    }

    // NUL and other control bytes, encoded and raw.
    let mut add = |s: &str| out.push(s.as_bytes().to_vec());
    for s in [
        "/api%00/admin",
        "/api/admin%00",
        "/api/admin%00.json",
        "/api%00%2Fadmin",
        "/api/admin%09",
        "/api/admin%0A",
        "/api/admin%0d%0a",
        "/api%0D/admin",
        "/api/admin%1F",
        "/api/admin%7F",
        "/api/admin%7f",
        "/%00/../api/admin",
    ] {
        add(s);
    }
    for raw in [
        &b"/api\0/admin"[..],
        b"/api/admin\0",
        b"/api\t/admin",
        b"/api/admin\x0b",
        b"/api/admin\x7f",
        b"/api\x01/admin",
        b"/api/admin\x1b",
    ] {
        out.push(raw.to_vec());
    }

    // Case variants (another path to a case-sensitive server).
    let mut add = |s: &str| out.push(s.as_bytes().to_vec());
    for s in [
        "/API/admin",
        "/Api/Admin",
        "/api/ADMIN",
        "/API/ADMIN",
        "/%41PI/admin",
        "/api/%41dmin",
        "/api/admiN",
        "/aPi/aDmin",
    ] {
        add(s);
    }

    // Absolute-form and other request-target forms.
    for s in [
        "http://test.local/api/admin",
        "http://test.local/api%2Fadmin",
        "HTTP://test.local/api/admin",
        "http://test.local//api/admin",
        "https://test.local/api/admin",
        "http://test.local:80/api/admin",
        "http://other.example/api/admin",
        "http://test.local/x/../api/admin",
        "//test.local/api/admin",
        "api/admin",
        "*",
    ] {
        add(s);
    }

    // Queries, fragments and look-alikes.
    for s in [
        "/api/admin?x=1",
        "/api/admin?",
        "/api/admin?/../x",
        "/x?/../api/admin",
        "/api/admin#frag",
        "/api%3Fadmin",
        "/api%23/admin",
        "/api%20/admin",
        "/api/admin%20",
        "/api/admin.",
        "/api/admin..",
        "/api/admin%2e",
        "/api/admin~",
        "/api/admin%7E",
        "/api/admin.json",
        "/apiadmin",
        "/api-admin",
        "/api/adminx",
    ] {
        add(s);
    }

    // Random mixes, the same on every run: characters encoded at random in
    // random case, with `//`, `/./`, `/x/../` and `%2F` separators.
    let mut rng = fastrand::Rng::with_seed(0x7011_6a7e_0000_0014);
    for _ in 0..150 {
        let mut s = String::new();
        for seg in ["api", "admin"] {
            s.push_str(match rng.u8(0..8) {
                0 => "//",
                1 => "/./",
                2 => "/x/../",
                3 => "/%2e/",
                4 if !s.is_empty() => "%2F",
                5 if !s.is_empty() => "%5c",
                _ => "/",
            });
            for b in seg.bytes() {
                if rng.bool() {
                    s.push_str(&pct(b, rng.bool()));
                } else {
                    s.push(char::from(b));
                }
            }
        }
        if rng.u8(0..4) == 0 {
            s.push_str(["/", "/.", "/x", "/x/.."][rng.usize(0..4)]);
        }
        add(&s);
    }

    let mut seen = std::collections::HashSet::new();
    out.retain(|s| seen.insert(s.clone()));
    out
}

// ----- what a lax upstream reads -----

/// One percent-decoding pass; with `keep_slashes`, `%2F` and `%5C` stay.
fn percent_decode(bytes: &[u8], keep_slashes: bool) -> Vec<u8> {
    let hex = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                let v = h << 4 | l;
                if !(keep_slashes && (v == b'/' || v == b'\\')) {
                    out.push(v);
                    i += 3;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// Overlong UTF-8 forms of ASCII read as that ASCII (`C0 AF` is `/`), as an
/// old or careless decoder does.
fn overlong_to_ascii(bytes: &[u8]) -> Vec<u8> {
    let cont = |b: Option<&u8>| b.copied().filter(|b| b & 0xC0 == 0x80).map(|b| b & 0x3F);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let (cp, len) = match b {
            0xC0 | 0xC1 => (
                cont(bytes.get(i + 1)).map(|c| u32::from(b & 0x1F) << 6 | u32::from(c)),
                2,
            ),
            0xE0 => match (cont(bytes.get(i + 1)), cont(bytes.get(i + 2))) {
                (Some(c1), Some(c2)) => (Some(u32::from(c1) << 6 | u32::from(c2)), 3),
                _ => (None, 1),
            },
            0xF0 => match (
                cont(bytes.get(i + 1)),
                cont(bytes.get(i + 2)),
                cont(bytes.get(i + 3)),
            ) {
                (Some(c1), Some(c2), Some(c3)) => (
                    Some(u32::from(c1) << 12 | u32::from(c2) << 6 | u32::from(c3)),
                    4,
                ),
                _ => (None, 1),
            },
            _ => (None, 1),
        };
        match cp {
            Some(cp) if cp < 0x80 => {
                out.push(cp as u8);
                i += len;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// `path` (no query) with `\` read as `/`, empty and `.` segments dropped
/// and `..` resolved (never above the root).
fn resolve(path: &str) -> String {
    let path = path.replace('\\', "/");
    let mut segs: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                segs.pop();
            }
            s => segs.push(s),
        }
    }
    let trailing = path.ends_with('/') || path.ends_with("/.") || path.ends_with("/..");
    let mut out = format!("/{}", segs.join("/"));
    if trailing && !segs.is_empty() {
        out.push('/');
    }
    out
}

/// The paths a lax upstream of `mode` may read in a forwarded path.
fn lax_readings(forwarded: &str, mode: &str) -> Vec<String> {
    let path = forwarded.split('?').next().unwrap_or("");
    let keep = mode == "keep";
    let mut readings = Vec::new();
    let mut bytes = path.as_bytes().to_vec();
    for _ in 0..if keep { 1 } else { 2 } {
        bytes = overlong_to_ascii(&percent_decode(&bytes, keep));
        readings.push(resolve(&String::from_utf8_lossy(&bytes)));
    }
    readings
}

fn is_limited(path: &str) -> bool {
    path == LIMITED || path.starts_with(&format!("{LIMITED}/"))
}

/// A servlet container's reading: `;params` dropped from each segment
/// before decoding (Tomcat's `/x/..;/api/admin` is `/api/admin`).
fn servlet_reading(forwarded: &str, mode: &str) -> Vec<String> {
    let path = forwarded.split('?').next().unwrap_or("");
    let stripped: Vec<&str> = path
        .split('/')
        .map(|seg| seg.split(';').next().unwrap_or(""))
        .collect();
    lax_readings(&stripped.join("/"), mode)
}

// ----- sending -----

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Reached the limited upstream; the `RateLimit` remaining it carried.
    Counted(Option<u64>),
    /// Answered with this status and reached no upstream.
    Answered(u16),
    /// No answer (closed, reset stream, or a request the client refused to
    /// build), and no upstream.
    NoAnswer(String),
    /// Reached the catch-all, which got this path.
    CatchAll(String),
    /// Anything else (both upstreams, or an upstream and another status).
    Odd(String),
}

/// The `r` of a `RateLimit` field.
fn remaining(field: Option<&str>) -> Option<u64> {
    let r = field?
        .split(';')
        .find_map(|p| p.trim().strip_prefix("r="))?;
    r.parse().ok()
}

/// One request-target over HTTP/1.1, byte for byte, on its own connection.
async fn send_h1(s: &Setup, target: &[u8]) -> Result<RawResponse, String> {
    let mut req = b"GET ".to_vec();
    req.extend_from_slice(target);
    req.extend_from_slice(b" HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n");
    let mut c = raw::connect(s.gw.addr()).await;
    let _ = c.write(&req).await;
    c.read_response(Duration::from_secs(5)).await
}

/// One `:path` over h2c; `Err` when the `http` crate cannot carry it or
/// the stream failed.
async fn send_h2(s: &Setup, h2: &HttpClient, target: &[u8]) -> Result<client::Resp, String> {
    let Some(target) = std::str::from_utf8(target)
        .ok()
        .filter(|t| t.starts_with('/'))
    else {
        return Err("not an h2 :path".into());
    };
    let req = Request::builder()
        .method(Method::GET)
        .uri(format!("http://{}{target}", s.gw.addr()))
        .body(client::empty())
        .map_err(|e| format!("unbuildable: {e}"))?;
    client::try_send(h2, req).await
}

/// Classifies what the last request did from the upstreams' counts before
/// (`before`: limited, rest) and the answer.
fn outcome(
    s: &Setup,
    before: (usize, usize),
    status: Option<u16>,
    rl: Option<&str>,
    err: &str,
) -> Outcome {
    let limited = s.limited.count() - before.0;
    let rest = s.rest.count() - before.1;
    match (limited, rest, status) {
        (1, 0, Some(200)) => Outcome::Counted(remaining(rl)),
        (0, 1, Some(200)) => Outcome::CatchAll(s.rest.last().expect("a request").path),
        (0, 0, Some(status)) => Outcome::Answered(status),
        (0, 0, None) => Outcome::NoAnswer(err.to_string()),
        _ => Outcome::Odd(format!(
            "limited +{limited}, rest +{rest}, status {status:?} {err}"
        )),
    }
}

/// The tally of one mode and protocol.
#[derive(Default)]
struct Tally {
    counted: usize,
    rejected: usize,
    no_answer: usize,
    harmless: usize,
    /// Harmless spellings a servlet container or a case-insensitive server
    /// would read as the limited path.
    servlet: Vec<String>,
    case_insensitive: Vec<String>,
    /// The spellings that got no answer, and why.
    refused: Vec<String>,
    failures: Vec<String>,
}

/// Sends every spelling in `s.mode` over HTTP/1.1 and h2c and checks each
/// outcome; returns the report lines and the failures.
async fn run_mode(s: &Setup, spellings: &[Vec<u8>]) -> (String, Vec<String>) {
    let h2 = client::h2c();
    let mut report = String::new();
    let mut failures = Vec::new();
    // The token bucket's remaining after the last counted request.
    let mut last_remaining: Option<u64> = None;
    for proto in ["h1", "h2"] {
        let mut t = Tally::default();
        let mut sent = 0;
        for target in spellings {
            let shown = String::from_utf8_lossy(target).escape_debug().to_string();
            let before = (s.limited.count(), s.rest.count());
            let o = if proto == "h1" {
                match send_h1(s, target).await {
                    Ok(r) => outcome(s, before, Some(r.status), r.header("ratelimit"), ""),
                    Err(e) => outcome(s, before, None, None, &e),
                }
            } else {
                match send_h2(s, &h2, target).await {
                    Ok(r) => outcome(
                        s,
                        before,
                        Some(r.status.as_u16()),
                        r.header("ratelimit"),
                        "",
                    ),
                    Err(e) if e == "not an h2 :path" || e.starts_with("unbuildable") => continue,
                    Err(e) => outcome(s, before, None, None, &e),
                }
            };
            sent += 1;
            match o {
                Outcome::Counted(r) => {
                    t.counted += 1;
                    let ok = match (r, last_remaining) {
                        (Some(r), Some(last)) => r + 1 == last,
                        (Some(_), None) => true,
                        (None, _) => false,
                    };
                    if !ok {
                        t.failures.push(format!(
                            "{proto} {shown}: reached the limited route with RateLimit r={r:?} after r={last_remaining:?}"
                        ));
                    }
                    last_remaining = r;
                }
                Outcome::Answered(status) if (400..500).contains(&status) => t.rejected += 1,
                Outcome::NoAnswer(e) => {
                    t.no_answer += 1;
                    t.refused.push(format!("{shown}: {e}"));
                }
                Outcome::CatchAll(path) => {
                    let lax = lax_readings(&path, s.mode);
                    if lax.iter().any(|p| is_limited(p)) {
                        t.failures.push(format!(
                            "{proto} {shown}: reached the catch-all as {path}, which a lax upstream reads as {lax:?}, uncounted"
                        ));
                    } else {
                        t.harmless += 1;
                    }
                    if servlet_reading(&path, s.mode).iter().any(|p| is_limited(p)) {
                        t.failures.push(format!(
                            "{proto} {shown}: reached the catch-all as {path}, which a servlet container reads as {LIMITED}, uncounted"
                        ));
                        t.servlet.push(path.clone());
                    }
                    if lax.iter().any(|p| is_limited(&p.to_ascii_lowercase())) {
                        t.case_insensitive.push(path);
                    }
                }
                other => t.failures.push(format!(
                    "{proto} {shown}: neither counted nor rejected: {other:?}"
                )),
            }
        }
        let _ = writeln!(
            report,
            "{:<7} {proto}: {sent} sent, {} counted, {} rejected (4xx), {} refused (no answer) {:?}, {} to the catch-all, harmless; of those, {} a servlet container and {} a case-insensitive server would read as {LIMITED}: {:?} {:?}",
            s.mode, t.counted, t.rejected, t.no_answer, t.refused, t.harmless, t.servlet.len(), t.case_insensitive.len(), t.servlet, t.case_insensitive
        );
        if proto == "h1" {
            assert_eq!(sent, spellings.len());
        }
        failures.append(&mut t.failures);
    }
    (report, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_limited_path_is_counted_or_rejected() {
    let spellings = spellings();
    assert!(spellings.len() >= 300, "only {} spellings", spellings.len());
    let mut report = format!("{} spellings of {LIMITED}\n", spellings.len());
    let mut failures = Vec::new();
    for mode in MODES {
        let s = setup(mode).await;
        let (r, mut f) = run_mode(&s, &spellings).await;
        report.push_str(&r);
        failures.append(&mut f);
    }
    println!("{report}");
    assert!(
        failures.is_empty(),
        "{} spellings skipped the limit:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// docs/protocols.md's example in each mode: `reject` answers 400; `decode` counts
/// it against `/api/admin`'s limit and forwards `/api/admin`; `keep`
/// forwards `/api%2Fadmin` to the catch-all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_encoded_slash_admin_in_each_mode() {
    for mode in MODES {
        let s = setup(mode).await;
        for target in ["/api%2Fadmin", "/api%2fadmin"] {
            let before = (s.limited.count(), s.rest.count());
            let r = raw::get(s.gw.addr(), target).await;
            match mode {
                "reject" => {
                    raw::assert_error(&r, 400, "bad_request");
                    assert_eq!((s.limited.count(), s.rest.count()), before, "{target}");
                }
                "decode" => {
                    assert_eq!(r.status, 200, "{target}: {}", r.text());
                    assert_eq!(r.header("x-upstream"), Some("limited"), "{target}");
                    assert_eq!(s.limited.last().expect("a request").path, LIMITED);
                    let rl = r.header("ratelimit").expect("the limit's RateLimit");
                    assert!(rl.starts_with("\"admin.0\";r="), "{rl}");
                }
                _ => {
                    assert_eq!(r.status, 200, "{target}: {}", r.text());
                    assert_eq!(r.header("x-upstream"), Some("rest"), "{target}");
                    assert_eq!(s.rest.last().expect("a request").path, "/api%2Fadmin");
                    assert_eq!(r.header("ratelimit"), None, "{target}");
                }
            }
        }
        // Over HTTP/2 the same.
        let r = client::get_h2c(s.gw.addr(), "/api%2Fadmin").await;
        let want = match mode {
            "reject" => (400, None),
            "decode" => (200, Some("limited")),
            _ => (200, Some("rest")),
        };
        assert_eq!(
            (r.status.as_u16(), r.header("x-upstream")),
            want,
            "{mode} h2"
        );
    }
}

/// `%00`, other encoded and raw control bytes, and a raw `\` are a 400 in
/// every mode (hyper answers the raw controls in a request line itself),
/// and reach no upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_backslash_and_controls_are_400_in_every_mode() {
    for mode in MODES {
        let s = setup(mode).await;
        for target in [
            &b"/api%00/admin"[..],
            b"/api/admin%00",
            b"/api/admin%0A",
            b"/api/admin%0d",
            b"/api/admin%7F",
            b"/api%1b/admin",
            b"/api\\admin",
            b"/x\\..\\api\\admin",
            b"/api/admin\\",
            b"/api\0/admin",
            b"/api\x01/admin",
            b"/api\x7f/admin",
        ] {
            let shown = String::from_utf8_lossy(target).escape_debug().to_string();
            let r = send_h1(&s, target)
                .await
                .unwrap_or_else(|e| panic!("{mode} {shown}: {e}"));
            assert_eq!(r.status, 400, "{mode} {shown}: {}", r.text());
        }
        for path in ["/api%00/admin", "/api\\admin", "/api/admin%0A"] {
            let r = client::get_h2c(s.gw.addr(), path).await;
            assert_eq!(r.status, 400, "{mode} h2 {path}: {}", r.text());
        }
        assert_eq!(s.limited.count() + s.rest.count(), 0, "{mode}");
    }
}
