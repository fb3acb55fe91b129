//! Reading one line of a request log (docs/simulation.md).
//!
//! Two formats, detected per line:
//!
//! - **Request lines**: a JSON object with `ts` (an RFC 3339 string, or
//!   Unix seconds as an integer, a float or a numeric string), `client` (an
//!   IP address, optionally with a port), `method`, `path` (with its query
//!   string, if any), and optionally `host` and `headers` (an object of
//!   name -> string).
//! - **Access-log lines**: the gateway's own JSON access log
//!   ([`crate::log::AccessRecord`]): `message == "access"`, `timestamp`,
//!   `client`, `method`, `host`, `path`. The access log records no headers
//!   and no query string, so limits keyed on them see them missing. Other
//!   lines with a `message` and no `ts` (start-up, reload, store errors) are
//!   not requests and are skipped.
//!
//! Unknown fields are ignored, so a request line may carry anything else.
//! Strings are borrowed from the line whenever they hold no JSON escape, so
//! a typical line is parsed without allocating.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use tollgate_limit::Micros;

/// One line, as it was parsed: a request, or something else.
#[derive(Debug)]
pub enum Line<'a> {
    /// A request to replay.
    Request(Request<'a>),
    /// A log line that is not a request (an operational event of the
    /// gateway's log).
    NotARequest,
}

/// One request of the log.
#[derive(Debug)]
pub struct Request<'a> {
    /// When it arrived, in microseconds since the Unix epoch.
    pub ts: Micros,
    /// The client (or, behind a trusted proxy, the peer) address.
    pub client: IpAddr,
    /// The method, as written.
    pub method: Cow<'a, str>,
    /// The path, with its query string if any.
    pub path: Cow<'a, str>,
    /// The Host, if any (an empty one is none).
    pub host: Option<Cow<'a, str>>,
    /// Header lines, in order.
    pub headers: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// `cost`: the estimate every cost limit charges it (the simulation
    /// has no bodies; docs/simulation.md).
    pub cost: Option<u64>,
    /// `usage`: what its response said it cost, for the settlement.
    pub usage: Option<u64>,
}

/// The fields of both formats; which are present says which format it is.
#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(default, borrow)]
    ts: Option<Ts<'a>>,
    #[serde(default, borrow)]
    timestamp: Option<Str<'a>>,
    #[serde(default, borrow)]
    message: Option<Str<'a>>,
    #[serde(default, borrow)]
    client: Option<Str<'a>>,
    #[serde(default, borrow)]
    method: Option<Str<'a>>,
    #[serde(default, borrow)]
    path: Option<Str<'a>>,
    #[serde(default, borrow)]
    host: Option<Str<'a>>,
    #[serde(default, borrow)]
    headers: Option<Headers<'a>>,
    #[serde(default)]
    cost: Option<u64>,
    #[serde(default)]
    usage: Option<u64>,
}

/// A string, borrowed from the line unless it holds an escape. (serde's own
/// `Cow` impl always copies, and `#[serde(borrow)]` does not reach inside an
/// `Option`.)
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// `ts` as written: a number or a string.
enum Ts<'a> {
    Int(u64),
    Negative,
    Float(f64),
    Text(Cow<'a, str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Ts<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Ts<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an RFC 3339 time or Unix seconds")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Ts<'a>, E> {
                Ok(Ts::Int(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Ts<'a>, E> {
                Ok(u64::try_from(v).map_or(Ts::Negative, Ts::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Ts<'a>, E> {
                Ok(Ts::Float(v))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Ts<'a>, E> {
                Ok(Ts::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Ts<'a>, E> {
                Ok(Ts::Text(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// `headers`: an object of name -> string, kept in order.
struct Headers<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Headers<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Headers<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of header name -> string")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Headers<'a>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0).min(16));
                while let Some((k, v)) = map.next_entry::<Str<'a>, Str<'a>>()? {
                    out.push((k.0, v.0));
                }
                Ok(Headers(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// Why a line is not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError(pub String);

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad(message: impl Into<String>) -> LineError {
    LineError(message.into())
}

/// Parse one line (without its line ending).
pub fn parse_line(bytes: &[u8]) -> Result<Line<'_>, LineError> {
    let raw: Raw<'_> =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("not a JSON request: {e}")))?;
    let (ts, access) = match (raw.message.as_ref().map(|m| m.0.as_ref()), &raw.ts) {
        (Some("access"), _) => {
            let text = raw
                .timestamp
                .as_ref()
                .map(|t| t.0.as_ref())
                .ok_or_else(|| bad("access-log line without `timestamp`"))?;
            (
                parse_rfc3339(text).map_err(|e| bad(format!("`timestamp`: {e}")))?,
                true,
            )
        }
        (_, Some(ts)) => (parse_ts(ts).map_err(|e| bad(format!("`ts`: {e}")))?, false),
        (Some(_), None) => return Ok(Line::NotARequest),
        (None, None) => {
            return Err(bad(
                "neither a request line (no `ts`) nor an access-log line (no `message`)",
            ))
        }
    };
    fn field<'a>(name: &str, v: Option<Str<'a>>) -> Result<Cow<'a, str>, LineError> {
        v.map(|s| s.0)
            .ok_or_else(|| bad(format!("missing `{name}`")))
    }
    let client_text = field("client", raw.client)?;
    let client = parse_client(&client_text)
        .ok_or_else(|| bad(format!("`client`: not an IP address: {client_text:?}")))?;
    let method = field("method", raw.method)?;
    if method.is_empty() {
        return Err(bad("`method` is empty"));
    }
    let path = field("path", raw.path)?;
    let host = raw.host.map(|h| h.0).filter(|h| !h.is_empty());
    let headers = match raw.headers {
        Some(h) if !access => h.0,
        _ => Vec::new(),
    };
    Ok(Line::Request(Request {
        ts,
        client,
        method,
        path,
        host,
        headers,
        cost: raw.cost,
        usage: raw.usage,
    }))
}

/// An address, or an address with a port (`1.2.3.4:80`, `[::1]:443`).
pub fn parse_client(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// Microseconds per second.
const SECOND: u64 = 1_000_000;

/// 9999-12-31T23:59:59Z: later times are mistakes (milliseconds?), and
/// keep every sum of a time and a duration far from overflowing.
const MAX_SECONDS: u64 = 253_402_300_799;

fn parse_ts(ts: &Ts<'_>) -> Result<Micros, String> {
    match ts {
        Ts::Int(s) if *s <= MAX_SECONDS => Ok(s * SECOND),
        Ts::Int(s) => Err(format!(
            "{s} Unix seconds is after the year 9999 (milliseconds?)"
        )),
        Ts::Negative => Err("before 1970".into()),
        Ts::Float(f) => float_seconds(*f),
        Ts::Text(t) => {
            let t = t.trim();
            if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                let f: f64 = t.parse().map_err(|_| format!("not a number: {t:?}"))?;
                float_seconds(f)
            } else {
                parse_rfc3339(t)
            }
        }
    }
}

fn float_seconds(f: f64) -> Result<Micros, String> {
    if !(0.0..=MAX_SECONDS as f64).contains(&f) {
        return Err("Unix seconds not between 1970 and the year 9999".into());
    }
    // In range, so the cast cannot saturate.
    Ok((f * 1e6).round() as u64)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// An RFC 3339 date-time (`2024-05-01T12:00:00.25Z`, `...+02:00`) in
/// microseconds since the Unix epoch. `t` or a space may separate date and
/// time; the offset is required; digits beyond microseconds are dropped.
pub fn parse_rfc3339(text: &str) -> Result<Micros, String> {
    let err = || format!("not an RFC 3339 time with an offset (Z or +hh:mm): {text:?}");
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(range)?;
        digits.iter().try_fold(0i64, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let at = |i: usize, allowed: &[u8]| b.get(i).is_some_and(|c| allowed.contains(c));
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":")) {
        return Err(err());
    }
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(s)) = (
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    ) else {
        return Err(err());
    };
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 60 {
        return Err(err());
    }
    let mut i = 19;
    let mut micros = 0i64;
    if at(i, b".") {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 6 {
                micros = micros * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return Err(err());
        }
        for _ in (i - start)..6 {
            micros *= 10;
        }
    }
    let offset = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let (Some(oh), Some(om)) = (num(i + 1..i + 3), num(i + 4..i + 6)) else {
                return Err(err());
            };
            if !at(i + 3, b":") || i + 6 != b.len() || oh > 23 || om > 59 {
                return Err(err());
            }
            let o = oh * 3600 + om * 60;
            if sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return Err(err()),
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset;
    if secs < 0 {
        return Err(format!("before 1970: {text:?}"));
    }
    // 0 <= secs < 10^4 years: no overflow.
    Ok(secs as u64 * SECOND + micros as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(line: &str) -> Request<'_> {
        match parse_line(line.as_bytes()) {
            Ok(Line::Request(r)) => r,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn rfc3339() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00Z"),
            Ok(1_714_564_800 * SECOND)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T14:00:00.25+02:00"),
            Ok(1_714_564_800 * SECOND + 250_000)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01 11:30:00.123456789-00:30"),
            Ok(1_714_564_800 * SECOND + 123_456)
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00z"),
            Ok(1_709_164_800 * SECOND)
        );
        for bad in [
            "",
            "2024-05-01",
            "2024-05-01T12:00:00",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:00:00.Z",
            "2024-05-01T12:00:00Zx",
            "2024-05-01T12:00:00+0200",
            "1969-12-31T23:59:59Z",
            "２024-05-01T12:00:00Z",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn request_lines() {
        let r = req(r#"{"ts":1714564800,"client":"10.0.0.1","method":"GET","path":"/a?b=1"}"#);
        assert_eq!(r.ts, 1_714_564_800 * SECOND);
        assert_eq!(r.client, "10.0.0.1".parse::<IpAddr>().unwrap());
        assert!(matches!(r.path, Cow::Borrowed("/a?b=1")));
        assert!(r.host.is_none());
        let r = req(
            r#"{"ts":1.5,"client":"[::1]:80","method":"POST","path":"/","host":"h","headers":{"x-a":"1","X-B":"t\u00e9"},"extra":[1]}"#,
        );
        assert_eq!(r.ts, 1_500_000);
        assert_eq!(r.client, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(r.host.as_deref(), Some("h"));
        assert_eq!(r.headers.len(), 2);
        assert_eq!(r.headers[1].1, "té");
        assert_eq!(
            req(r#"{"ts":"2024-05-01T12:00:00Z","client":"1.2.3.4","method":"GET","path":"/","host":""}"#).host,
            None
        );
        assert_eq!(
            req(r#"{"ts":"12.25","client":"1.2.3.4","method":"GET","path":"/"}"#).ts,
            12_250_000
        );
    }

    #[test]
    fn access_lines() {
        let line = r#"{"timestamp":"2024-05-01T12:00:00.000001Z","level":"INFO","message":"access","request_id":"x","client":"10.0.0.1","method":"GET","host":"","path":"/hello","route":"hello","upstream":"","status":200,"limit":"allowed","duration_ms":0.1,"bytes":5,"completed":true,"target":"tollgate::access"}"#;
        let r = req(line);
        assert_eq!(r.ts, 1_714_564_800 * SECOND + 1);
        assert_eq!(r.host, None);
        let other = r#"{"timestamp":"2024-05-01T12:00:00Z","level":"INFO","message":"reloaded","generation":2}"#;
        assert!(matches!(
            parse_line(other.as_bytes()),
            Ok(Line::NotARequest)
        ));
    }

    #[test]
    fn bad_lines() {
        for (line, want) in [
            ("nope", "not a JSON request"),
            ("{}", "neither"),
            (
                r#"{"ts":-1,"client":"1.2.3.4","method":"GET","path":"/"}"#,
                "before 1970",
            ),
            (
                r#"{"ts":1e300,"client":"1.2.3.4","method":"GET","path":"/"}"#,
                "year 9999",
            ),
            (
                r#"{"ts":1714564800000,"client":"1.2.3.4","method":"GET","path":"/"}"#,
                "(milliseconds?)",
            ),
            (
                r#"{"ts":"yesterday","client":"1.2.3.4","method":"GET","path":"/"}"#,
                "RFC 3339",
            ),
            (
                r#"{"ts":1,"client":"me","method":"GET","path":"/"}"#,
                "not an IP",
            ),
            (r#"{"ts":1,"method":"GET","path":"/"}"#, "missing `client`"),
            (
                r#"{"ts":1,"client":"1.2.3.4","path":"/"}"#,
                "missing `method`",
            ),
            (
                r#"{"ts":1,"client":"1.2.3.4","method":"GET"}"#,
                "missing `path`",
            ),
            (
                r#"{"ts":1,"client":"1.2.3.4","method":"GET","path":"/","headers":{"a":1}}"#,
                "not a JSON request",
            ),
            (
                r#"{"message":"access","client":"1.2.3.4","method":"GET","path":"/"}"#,
                "without `timestamp`",
            ),
        ] {
            match parse_line(line.as_bytes()) {
                Err(LineError(e)) => assert!(e.contains(want), "{line}: {e}"),
                Ok(l) => panic!("{line}: {l:?}"),
            }
        }
    }
}
