//! The compact JWS serialisation (RFC 7515 §7.1): the size limit, the three
//! base64url parts, the protected header. The header and the payload are
//! JSON objects read strictly ([`crate::json_strict`]): one that repeats a
//! member, at any depth, is malformed (RFC 7515 §5.2 and RFC 7519 §4 let a
//! parser refuse it; taking the last would let a token name two consumers,
//! or show a cache one `alg` and a verifier another).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{Map, Value};

use super::Algorithm;
use super::JwtError;
use crate::json_strict::{self, StrictJsonError};

/// The longest token looked at (bytes); a longer one is refused unparsed.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// A token cut into its parts, nothing decoded yet.
pub(crate) struct Parts<'a> {
    /// `header.payload`, the bytes the signature covers.
    pub(crate) signing_input: &'a str,
    /// The header, base64url.
    pub(crate) header: &'a str,
    /// The payload, base64url.
    pub(crate) payload: &'a str,
    /// The signature, base64url.
    pub(crate) signature: &'a str,
}

/// The protected header members the gateway acts on.
pub(crate) struct Header {
    pub(crate) alg: Algorithm,
    pub(crate) kid: Option<String>,
}

/// Cut `token` into its three parts; over [`MAX_TOKEN_LEN`] is refused
/// before anything else is looked at.
pub(crate) fn split(token: &str) -> Result<Parts<'_>, JwtError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(JwtError::TooLarge);
    }
    let mut dots = token.match_indices('.').map(|(at, _)| at);
    let (Some(first), Some(second), None) = (dots.next(), dots.next(), dots.next()) else {
        return Err(JwtError::Malformed("not three dot-separated parts"));
    };
    Ok(Parts {
        signing_input: &token[..second],
        header: &token[..first],
        payload: &token[first + 1..second],
        signature: &token[second + 1..],
    })
}

/// Decode one base64url part (no padding, canonical).
pub(crate) fn decode(part: &str, what: &'static str) -> Result<Vec<u8>, JwtError> {
    URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| JwtError::Malformed(what))
}

/// Which JSON part of a token is read, for its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The protected header.
    Header,
    /// The payload: the claims.
    Payload,
}

impl Part {
    /// Why a part is not a base64url JSON object.
    fn malformed(self) -> &'static str {
        match self {
            Part::Header => "header is not a base64url JSON object",
            Part::Payload => "payload is not a base64url JSON object",
        }
    }

    /// The error of a part with an object that repeats a member.
    fn repeats(self) -> JwtError {
        JwtError::Malformed(match self {
            Part::Header => "header repeats a member",
            Part::Payload => "payload repeats a member",
        })
    }
}

/// Decode a JSON-object part, strictly: no object in it repeats a member.
pub(crate) fn object(part: &str, which: Part) -> Result<Map<String, Value>, JwtError> {
    match json_strict::from_slice(&decode(part, which.malformed())?) {
        Ok(Value::Object(members)) => Ok(members),
        Ok(_) | Err(StrictJsonError::Syntax(_)) => Err(JwtError::Malformed(which.malformed())),
        Err(StrictJsonError::Repeated(_)) => Err(which.repeats()),
    }
}

/// The protected header: `alg` (`none` never passes), `kid`. A `crit`
/// member is refused: it names extensions the verifier must understand,
/// and we understand none (RFC 7515 §4.1.11).
pub(crate) fn header(part: &str) -> Result<Header, JwtError> {
    let header = object(part, Part::Header)?;
    if header.contains_key("crit") {
        return Err(JwtError::Malformed("header has \"crit\" extensions"));
    }
    let alg = match header.get("alg").and_then(Value::as_str) {
        None => return Err(JwtError::Malformed("header has no \"alg\" string")),
        Some(alg) if alg.eq_ignore_ascii_case("none") => {
            return Err(JwtError::Algorithm("\"none\" is never allowed"))
        }
        Some(alg) => {
            Algorithm::from_name(alg).ok_or(JwtError::Algorithm("not a supported algorithm"))?
        }
    };
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(JwtError::Malformed("\"kid\" is not a string")),
    };
    Ok(Header { alg, kid })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(json: &str) -> String {
        URL_SAFE_NO_PAD.encode(json)
    }

    #[test]
    fn three_parts_or_nothing() {
        let parts = split("aa.bb.cc").unwrap();
        assert_eq!(
            (
                parts.signing_input,
                parts.header,
                parts.payload,
                parts.signature
            ),
            ("aa.bb", "aa", "bb", "cc")
        );
        for bad in ["aa.bb", "aa.bb.cc.dd", "aabbcc", "a.b.c.d.e"] {
            assert!(matches!(split(bad), Err(JwtError::Malformed(_))), "{bad}");
        }
    }

    #[test]
    fn the_size_limit_is_checked_first() {
        let at_limit = "a".repeat(MAX_TOKEN_LEN);
        // At the limit the token is parsed (and found malformed) ...
        assert!(matches!(split(&at_limit), Err(JwtError::Malformed(_))));
        // ... one byte over, refused before any parsing.
        let over = format!("{}.b.c", "a".repeat(MAX_TOKEN_LEN - 3));
        assert_eq!(over.len(), MAX_TOKEN_LEN + 1);
        assert_eq!(split(&over).err(), Some(JwtError::TooLarge));
        assert!(split(&over[1..]).is_ok());
    }

    #[test]
    fn padding_and_non_canonical_base64_are_refused() {
        assert!(decode("YQ", "x").is_ok());
        assert!(decode("YQ==", "x").is_err());
        assert!(decode("YR", "x").is_err()); // trailing bits set
        assert!(decode("Y+Q", "x").is_err()); // standard alphabet
    }

    #[test]
    fn header_alg_kid_and_crit() {
        let h = header(&b64(r#"{"alg":"ES256","kid":"k1","typ":"JWT"}"#)).unwrap();
        assert_eq!((h.alg, h.kid.as_deref()), (Algorithm::ES256, Some("k1")));
        for none in ["none", "NONE", "None"] {
            let json = format!(r#"{{"alg":"{none}"}}"#);
            assert_eq!(
                header(&b64(&json)).err(),
                Some(JwtError::Algorithm("\"none\" is never allowed"))
            );
        }
        let cases = [
            r#"{"alg":"RS1"}"#,
            r#"{"kid":"k"}"#,
            r#"{"alg":"RS256","kid":7}"#,
            r#"{"alg":"RS256","crit":["b64"],"b64":false}"#,
            r#"["alg","RS256"]"#,
        ];
        for json in cases {
            assert!(header(&b64(json)).is_err(), "{json}");
        }
    }
}
