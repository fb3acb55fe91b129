//! The credentials a request presents (docs/configuration/consumers.md):
//! an API key (the configured header, else query parameter), a bearer
//! token (the JWT header, `Bearer` scheme in any case), a client
//! certificate (verified by TLS when the connection was accepted). Finding
//! them verifies nothing and costs no allocation but a decoded query value.

use std::borrow::Cow;

use http::HeaderMap;

use crate::config::{ApiKeysConfig, CredentialKind, JwtConfig};
use crate::limit::key::query_value;

/// Which credential kinds a request's credentials are looked for among: a
/// route's `require`, or every configured kind on a route without `auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kinds(u8);

impl Kinds {
    /// The kinds of `list`.
    pub fn of(list: &[CredentialKind]) -> Kinds {
        Kinds(list.iter().fold(0, |bits, k| bits | Kinds::bit(*k)))
    }

    fn bit(kind: CredentialKind) -> u8 {
        match kind {
            CredentialKind::ApiKey => 1,
            CredentialKind::Jwt => 2,
            CredentialKind::Mtls => 4,
        }
    }

    /// Whether `kind` is one of them.
    pub fn has(self, kind: CredentialKind) -> bool {
        self.0 & Kinds::bit(kind) != 0
    }
}

/// What a request presents, not yet verified.
#[derive(Debug, Default)]
pub struct Presented<'a> {
    /// The API key's bytes (header value, or decoded query value).
    pub api_key: Option<Cow<'a, [u8]>>,
    /// The bearer token; `Err` when the JWT header is present but unusable
    /// (several fields, not text), which counts as an invalid credential.
    pub bearer: Option<Result<&'a str, &'static str>>,
    /// A verified client certificate's consumer name; `Err` when the
    /// certificate lacks the configured name.
    pub certificate: Option<Result<&'a str, &'static str>>,
}

impl Presented<'_> {
    /// Nothing presented.
    pub fn is_empty(&self) -> bool {
        self.api_key.is_none() && self.bearer.is_none() && self.certificate.is_none()
    }
}

/// The API key of a request: the header's value (one field; several are
/// several keys, which is one invalid key), else the query parameter's
/// first value, form-decoded. Empty is absent.
pub fn api_key<'a>(
    config: &ApiKeysConfig,
    headers: &'a HeaderMap,
    query: Option<&'a str>,
) -> Option<Cow<'a, [u8]>> {
    if let Some(name) = &config.header {
        let mut fields = headers.get_all(name).iter();
        if let Some(first) = fields.next() {
            if fields.next().is_some() {
                // Two keys: never a valid one (no digest matches this).
                return Some(Cow::Borrowed(b"\0several API keys"));
            }
            if !first.is_empty() {
                return Some(Cow::Borrowed(first.as_bytes()));
            }
        }
    }
    let (name, query) = (config.query.as_deref()?, query?);
    query_value(query, name).filter(|v| !v.is_empty())
}

/// The bearer token of a request: `Bearer <token>` in the JWT header, the
/// scheme in any case. Another scheme (`Basic`) is no token; a bearer
/// field that is not text, or one among several fields of the header, is
/// an invalid one.
pub fn bearer<'a>(
    config: &JwtConfig,
    headers: &'a HeaderMap,
) -> Option<Result<&'a str, &'static str>> {
    let mut fields = headers.get_all(&config.header).iter();
    let first = fields.next()?;
    let is_bearer = |v: &http::HeaderValue| {
        v.as_bytes()
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case(b"bearer "))
    };
    let rest: Vec<&http::HeaderValue> = fields.collect();
    if !rest.is_empty() {
        let any = is_bearer(first) || rest.iter().any(|v| is_bearer(v));
        return any.then_some(Err("several authorization fields"));
    }
    if !is_bearer(first) {
        return None;
    }
    let Ok(text) = first.to_str() else {
        return Some(Err("the bearer token is not text"));
    };
    match text[7..].trim_matches(' ') {
        "" => Some(Err("empty bearer token")),
        token => Some(Ok(token)),
    }
}

/// `query` without parameter `name` (every occurrence), for `hide: true`;
/// `None` when nothing is left.
pub fn without_param(query: &str, name: &str) -> Option<String> {
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(k, _)| k);
            form_urlencoded::parse(key.as_bytes())
                .next()
                .is_none_or(|(k, _)| k != name)
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    fn keys(header: Option<&str>, query: Option<&str>) -> ApiKeysConfig {
        ApiKeysConfig {
            header: header.map(|h| HeaderName::from_bytes(h.as_bytes()).unwrap()),
            query: query.map(str::to_owned),
            hide: false,
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn api_key_header_first_then_query() {
        let c = keys(Some("x-api-key"), Some("api_key"));
        let h = headers(&[("x-api-key", "k1")]);
        assert_eq!(
            api_key(&c, &h, Some("api_key=k2")).as_deref(),
            Some(&b"k1"[..])
        );
        let none = HeaderMap::new();
        assert_eq!(
            api_key(&c, &none, Some("a=1&api_key=k%202&api_key=k3")).as_deref(),
            Some(&b"k 2"[..])
        );
        assert_eq!(api_key(&c, &none, Some("api_key=")), None);
        assert_eq!(api_key(&c, &none, None), None);
        let two = headers(&[("x-api-key", "k1"), ("x-api-key", "k2")]);
        assert!(api_key(&c, &two, None).is_some_and(|k| k.starts_with(b"\0")));
    }

    /// The API key in a query reads as a `query:` key source reads the same
    /// parameter, byte for byte: `+` a space, `%2B` a plus, a byte that is
    /// not UTF-8 kept (a lossy decoding would make `%FF` and `%FE` one
    /// key), a malformed escape as written.
    #[test]
    fn a_query_key_reads_as_a_query_key_source_reads() {
        let c = keys(None, Some("api_key"));
        let none = HeaderMap::new();
        let cases: &[(&str, &[u8])] = &[
            ("api_key=a+b", b"a b"),
            ("api_key=a%2Bb", b"a+b"),
            ("api_key=%FF%FE", &[0xFF, 0xFE]),
            ("api_key=%G1x", b"%G1x"),
            ("api%5Fkey=k", b"k"),
        ];
        for (query, want) in cases {
            assert_eq!(
                api_key(&c, &none, Some(query)).as_deref(),
                Some(*want),
                "{query}"
            );
            assert_eq!(
                query_value(query, "api_key").as_deref(),
                Some(*want),
                "{query}"
            );
        }
    }

    #[test]
    fn bearer_tokens() {
        let c = JwtConfig {
            header: http::header::AUTHORIZATION,
            issuers: vec![],
            hide: false,
        };
        let b = |v: &[(&str, &str)]| bearer(&c, &headers(v)).map(|r| r.map(str::to_owned));
        assert_eq!(
            b(&[("authorization", "Bearer abc.def.ghi")]),
            Some(Ok("abc.def.ghi".into()))
        );
        assert_eq!(
            b(&[("authorization", "bEaReR abc")]),
            Some(Ok("abc".into()))
        );
        assert_eq!(b(&[("authorization", "Basic dXNlcjpw")]), None);
        assert_eq!(b(&[]), None);
        assert!(matches!(b(&[("authorization", "Bearer ")]), Some(Err(_))));
        assert!(matches!(
            b(&[("authorization", "Bearer a"), ("authorization", "Bearer b")]),
            Some(Err(_))
        ));
        assert!(matches!(
            b(&[("authorization", "Basic a"), ("authorization", "Bearer b")]),
            Some(Err(_))
        ));
        assert_eq!(
            b(&[("authorization", "Basic a"), ("authorization", "Basic b")]),
            None
        );
        assert_eq!(
            b(&[("authorization", "Bearer")]),
            None,
            "no space: another scheme"
        );
    }

    #[test]
    fn hiding_a_query_parameter() {
        assert_eq!(
            without_param("api_key=s&a=1", "api_key").as_deref(),
            Some("a=1")
        );
        assert_eq!(
            without_param("a=1&api%5Fkey=s&b", "api_key").as_deref(),
            Some("a=1&b")
        );
        assert_eq!(without_param("api_key=s", "api_key"), None);
        assert_eq!(without_param("a=1", "api_key").as_deref(), Some("a=1"));
    }

    #[test]
    fn kinds() {
        let k = Kinds::of(&[CredentialKind::Jwt, CredentialKind::Mtls]);
        assert!(k.has(CredentialKind::Jwt) && k.has(CredentialKind::Mtls));
        assert!(!k.has(CredentialKind::ApiKey));
    }
}
