//! `jwt`: the JWT parser and verifier (`auth::jwt`) on arbitrary tokens.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::hmac;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::auth::jwt::{self, Algorithm, JwtError, KeySet, TokenCache, Validation, Verified};

/// The issuer's HMAC secret.
const SECRET: &[u8] = b"the jwt fuzz target's secret, 32 bytes or more";
/// The issuer, and the one audience.
const ISS: &str = "https://issuer.example/";
const AUD: &str = "api";
/// The time tokens are verified at (Unix seconds), and the leeway.
const NOW: u64 = 1_700_000_000;
const LEEWAY: u64 = 30;

/// `jwt`: the input is a token's text (bytes that are not UTF-8 read as
/// U+FFFD). Three tokens are verified with an HS256/384/512 secret (the
/// issuer also allows RS256 and ES256, which fit no key of the set): the
/// input as sent; the input with its signature replaced by the secret's
/// HMAC of its first two parts (the algorithm its header names when that is
/// HS384 or HS512, else HS256), so header and claims are read past the
/// signature; and, when the input is two lines, each line base64url-encoded
/// as header and claims and signed so, so the JSON is written directly.
///
/// Never panics. A token over 16 KiB is refused unparsed (`verify` and
/// `peek_issuer`). The token cache answers as `verify` does. A token that
/// verifies: its three parts are canonical base64url without padding; no
/// object in its header or claims repeats a member (a permissive reading
/// that keeps every member finds none, and reads the same values); its
/// header names an allowed HMAC algorithm and no `crit`; its claims are
/// valid at `NOW` (`exp` required, `nbf` and `iat` within the leeway, `iss`,
/// `aud`); and `peek_issuer` names the issuer.
pub fn jwt(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let keys = KeySet::from_secret(SECRET);
    let v = validation();
    check(&text, &keys, &v);
    if let Some(token) = resigned(&text) {
        check(&token, &keys, &v);
    }
    if let Some((header, claims)) = text.split_once('\n') {
        let parts = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(claims)
        );
        if let Some(token) = resigned(&parts) {
            check(&token, &keys, &v);
        }
    }
}

/// The issuer's rules.
fn validation() -> Validation {
    Validation {
        issuer: ISS.into(),
        audiences: vec![AUD.into()],
        algorithms: vec![
            Algorithm::HS256,
            Algorithm::HS384,
            Algorithm::HS512,
            Algorithm::RS256,
            Algorithm::ES256,
        ],
        leeway: Duration::from_secs(LEEWAY),
    }
}

/// `header.payload` (the input's first two parts, a third dropped) signed
/// with the secret; `None` for another number of parts.
fn resigned(token: &str) -> Option<String> {
    let input = match token.matches('.').count() {
        1 => token,
        2 => &token[..token.rfind('.')?],
        _ => return None,
    };
    let header = input.split('.').next().unwrap_or_default();
    let alg = URL_SAFE_NO_PAD
        .decode(header)
        .ok()
        .and_then(|h| serde_json::from_slice::<Value>(&h).ok())
        .and_then(|h| h.get("alg")?.as_str().map(str::to_owned));
    let digest = match alg.as_deref() {
        Some("HS384") => hmac::HMAC_SHA384,
        Some("HS512") => hmac::HMAC_SHA512,
        _ => hmac::HMAC_SHA256,
    };
    let tag = hmac::sign(&hmac::Key::new(digest, SECRET), input.as_bytes());
    Some(format!("{input}.{}", URL_SAFE_NO_PAD.encode(tag)))
}

/// Verify `token`, and hold the outcome to the invariants.
fn check(token: &str, keys: &KeySet, v: &Validation) {
    let verified = jwt::verify(token, keys, v, NOW);
    let peeked = jwt::peek_issuer(token);
    if token.len() > jwt::MAX_TOKEN_LEN {
        assert_eq!(verified, Err(JwtError::TooLarge));
        assert_eq!(peeked, Err(JwtError::TooLarge));
        return;
    }
    let cache = TokenCache::new(4);
    for _ in 0..2 {
        let cached = cache.verify(token, keys, v, NOW).map(|c| (*c).clone());
        assert_eq!(cached, verified, "the cache answers as verify does");
    }
    if let Ok(verified) = verified {
        holds(token, &verified);
        assert_eq!(peeked.as_deref(), Ok(ISS));
    }
}

/// The invariants of a token that verified as `verified`.
fn holds(token: &str, verified: &Verified) {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "three parts");
    let decoded: Vec<Vec<u8>> = parts.iter().map(|p| canonical(p)).collect();
    let header = no_repeats(&decoded[0]);
    let claims = no_repeats(&decoded[1]);
    assert_eq!(claims, verified.claims, "the claims are the payload's");
    let alg = header.get("alg").and_then(Value::as_str);
    assert!(
        matches!(alg, Some("HS256" | "HS384" | "HS512")),
        "alg {alg:?} verified with an HMAC secret"
    );
    assert!(!header.contains_key("crit"), "crit is refused");
    valid_claims(&claims, verified.exp);
}

/// The bytes of `part`, which must be canonical base64url without padding.
fn canonical(part: &str) -> Vec<u8> {
    assert!(
        part.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{part:?} is base64url without padding"
    );
    let bytes = lenient_base64(part);
    assert_eq!(URL_SAFE_NO_PAD.encode(&bytes), part, "canonical base64url");
    bytes
}

/// base64url decoded with any trailing bits (a plain reading of RFC 4648
/// §5 that does not insist on the canonical form).
fn lenient_base64(part: &str) -> Vec<u8> {
    let sextet = |b: u8| -> u32 {
        match b {
            b'A'..=b'Z' => u32::from(b - b'A'),
            b'a'..=b'z' => u32::from(b - b'a') + 26,
            b'0'..=b'9' => u32::from(b - b'0') + 52,
            b'-' => 62,
            _ => 63,
        }
    };
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for b in part.bytes() {
        acc = (acc << 6) | sextet(b);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// A JSON object in which no object repeats a member, read permissively
/// (every member kept) and checked; the object as serde_json reads it.
fn no_repeats(json: &[u8]) -> Map<String, Value> {
    let written: Written = serde_json::from_slice(json).expect("a verified part is JSON");
    written.assert_no_repeats();
    let value: Value = serde_json::from_slice(json).expect("a verified part is JSON");
    assert_eq!(written.last_wins(), value, "both readings agree");
    match value {
        Value::Object(members) => members,
        other => panic!("a verified part is an object, got {other}"),
    }
}

/// The registered claims hold at `NOW`, and `exp` is the one verified.
fn valid_claims(claims: &Map<String, Value>, exp: u64) {
    let date = |name: &str| {
        claims.get(name).map(|v| {
            v.as_u64()
                .or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as u64))
                .unwrap_or_else(|| panic!("{name} is a number, got {v}"))
        })
    };
    assert_eq!(date("exp"), Some(exp), "exp is required");
    assert!(NOW < exp.saturating_add(LEEWAY), "expired");
    if let Some(nbf) = date("nbf") {
        assert!(NOW.saturating_add(LEEWAY) >= nbf, "not yet valid");
    }
    if let Some(iat) = date("iat") {
        assert!(iat <= NOW.saturating_add(LEEWAY), "issued in the future");
    }
    assert_eq!(claims.get("iss").and_then(Value::as_str), Some(ISS));
    let aud_ok = match claims.get("aud") {
        Some(Value::String(one)) => one == AUD,
        Some(Value::Array(many)) => many.iter().any(|a| a.as_str() == Some(AUD)),
        _ => false,
    };
    assert!(aud_ok, "aud {:?}", claims.get("aud"));
}

/// A JSON value as written: an object keeps every member, in order,
/// repeated or not.
enum Written {
    /// A string, number, boolean or null.
    Scalar(Value),
    /// An array.
    Array(Vec<Written>),
    /// An object's members as written.
    Object(Vec<(String, Written)>),
}

impl Written {
    /// Panics if an object anywhere names a member twice.
    fn assert_no_repeats(&self) {
        match self {
            Written::Scalar(_) => {}
            Written::Array(items) => items.iter().for_each(Written::assert_no_repeats),
            Written::Object(members) => {
                let mut names = HashSet::new();
                for (name, value) in members {
                    assert!(names.insert(name), "member {name:?} repeated");
                    value.assert_no_repeats();
                }
            }
        }
    }

    /// The value with the last of any repeated member, as serde_json reads it.
    fn last_wins(&self) -> Value {
        match self {
            Written::Scalar(v) => v.clone(),
            Written::Array(items) => items.iter().map(Written::last_wins).collect(),
            Written::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(n, v)| (n.clone(), v.last_wins()))
                    .collect(),
            ),
        }
    }
}

impl<'de> Deserialize<'de> for Written {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(WrittenVisitor)
    }
}

struct WrittenVisitor;

impl<'de> Visitor<'de> for WrittenVisitor {
    type Value = Written;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Written, E> {
        Ok(Written::Scalar(b.into()))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Written, E> {
        Ok(Written::Scalar(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Written, E> {
        Ok(Written::Scalar(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Written, E> {
        Ok(Written::Scalar(n.into()))
    }

    fn visit_str<E>(self, s: &str) -> Result<Written, E> {
        Ok(Written::Scalar(s.into()))
    }

    fn visit_unit<E>(self) -> Result<Written, E> {
        Ok(Written::Scalar(Value::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Written, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Written::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Written, A::Error> {
        let mut members = Vec::new();
        while let Some(member) = map.next_entry::<String, Written>()? {
            members.push(member);
        }
        Ok(Written::Object(members))
    }
}
