//! `consumers:` (docs/configuration/consumers.md): API keys, JWT issuers,
//! mTLS, the consumers of `list` and of `file`, identity headers, and the
//! failure limit; and a route's `auth:`.
//!
//! The consumers file is read here, with the config (so a reload re-reads
//! it, and a mistake in it is a config error naming that file's line).
//! Key material (PEM files, JWKS files) is read when the runtime is built.

use std::collections::HashMap;
use std::time::Duration;

use http::{HeaderName, Uri};

use super::{Ctx, Result};
use crate::config::consumers::{
    ApiKeysConfig, CertName, ConsumerConfig, ConsumersConfig, CredentialKind, IdentityHeaders,
    IssuerConfig, IssuerKeys, JwtAlgorithm, JwtConfig, MtlsConfig, RouteAuth,
};
use crate::config::error::ConfigError;
use crate::config::model::{KeySource, LimitConfig, ServerConfig};
use crate::config::positions::Positions;
use crate::config::raw::{
    RawApiKeys, RawConsumer, RawConsumers, RawConsumersFile, RawIdentityHeaders, RawIssuer, RawJwt,
    RawRouteAuth,
};

/// Default `leeway` of an issuer (as Envoy's `jwt_authn` clock skew).
const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);
/// Default JWKS `refresh`.
const DEFAULT_REFRESH: Duration = Duration::from_secs(600);
/// Shortest JWKS `refresh` (an unknown `kid` refetches at most this often
/// anyway).
const MIN_REFRESH: Duration = Duration::from_secs(30);

impl Ctx<'_> {
    /// `consumers:`. `server` tells whether TLS listeners ask for client
    /// certificates (`mtls` needs them).
    pub(super) fn consumers(
        &mut self,
        raw: RawConsumers,
        server: &ServerConfig,
    ) -> Result<ConsumersConfig> {
        let api_keys = raw.api_keys.map(|a| self.api_keys(a)).transpose()?;
        let jwt = match raw.jwt {
            Some(j) => Some(self.jwt(j, api_keys.as_ref().is_some_and(|a| a.hide))?),
            None => None,
        };
        let mtls = match raw.mtls {
            None => None,
            Some(m) => {
                let client_auth = server.tls.as_ref().and_then(|t| t.client_auth.as_ref());
                if client_auth.is_none() {
                    return Err(self.err(
                        "consumers.mtls",
                        "mtls needs TLS listeners that ask for client certificates: set server.tls.client_auth",
                    ));
                }
                Some(MtlsConfig {
                    consumer: m.consumer.unwrap_or(CertName::SanDns),
                })
            }
        };
        let mut list = Vec::new();
        let mut names: HashMap<String, String> = HashMap::new();
        let mut digests: HashMap<[u8; 32], String> = HashMap::new();
        for (i, c) in raw.list.unwrap_or_default().into_iter().enumerate() {
            let at = format!("consumers.list[{i}]");
            let consumer = consumer(c, &at, &|f, m| self.err(f, m))?;
            unique(&consumer, &at, &at, &mut names, &mut digests)
                .map_err(|(f, m)| self.err(&f, m))?;
            list.push(consumer);
        }
        let file = raw.file.map(|f| self.resolve(f));
        if let Some(path) = &file {
            list.extend(read_consumers_file(path, &mut names, &mut digests)?);
        }
        let identity_headers = self.identity_headers(raw.identity_headers.unwrap_or_default())?;
        if api_keys.is_none() && jwt.is_none() && mtls.is_none() {
            return Err(self.err(
                "consumers",
                "consumers needs at least one credential kind: api_keys, jwt or mtls",
            ));
        }
        Ok(ConsumersConfig {
            api_keys,
            jwt,
            mtls,
            file,
            list,
            identity_headers,
            failure_limit: raw.failure_limit,
        })
    }

    /// `consumers.api_keys`.
    fn api_keys(&self, raw: RawApiKeys) -> Result<ApiKeysConfig> {
        let header = raw
            .header
            .map(|h| self.header_name("consumers.api_keys.header", &h))
            .transpose()?;
        if let Some(q) = &raw.query {
            if q.is_empty() {
                return Err(self.err("consumers.api_keys.query", "query is empty"));
            }
        }
        if header.is_none() && raw.query.is_none() {
            return Err(self.err(
                "consumers.api_keys",
                "api_keys needs `header` or `query` (or both): where clients send their key",
            ));
        }
        Ok(ApiKeysConfig {
            header,
            query: raw.query,
            hide: raw.hide.unwrap_or(false),
        })
    }

    /// `consumers.jwt`; `hide` defaults to `api_keys.hide`.
    fn jwt(&self, raw: RawJwt, hide_keys: bool) -> Result<JwtConfig> {
        let header = match raw.header {
            Some(h) => self.header_name("consumers.jwt.header", &h)?,
            None => http::header::AUTHORIZATION,
        };
        let raw_issuers = raw.issuers.unwrap_or_default();
        if raw_issuers.is_empty() {
            return Err(self.err(
                "consumers.jwt.issuers",
                "jwt needs at least one issuer: { issuer, jwks | keys | secret, ... }",
            ));
        }
        let mut issuers: Vec<IssuerConfig> = Vec::with_capacity(raw_issuers.len());
        for (i, raw) in raw_issuers.into_iter().enumerate() {
            let path = format!("consumers.jwt.issuers[{i}]");
            let issuer = self.issuer(&path, raw)?;
            if let Some(j) = issuers.iter().position(|o| o.issuer == issuer.issuer) {
                return Err(self.err(
                    &format!("{path}.issuer"),
                    format!(
                        "duplicate issuer \"{}\" (first in consumers.jwt.issuers[{j}])",
                        issuer.issuer
                    ),
                ));
            }
            issuers.push(issuer);
        }
        Ok(JwtConfig {
            header,
            issuers,
            hide: raw.hide.unwrap_or(hide_keys),
        })
    }

    /// One issuer at `path`.
    fn issuer(&self, path: &str, raw: RawIssuer) -> Result<IssuerConfig> {
        let issuer = raw.issuer.filter(|i| !i.is_empty()).ok_or_else(|| {
            self.err(
                &format!("{path}.issuer"),
                "an issuer needs `issuer`: the exact `iss` of its tokens",
            )
        })?;
        let keys = self.issuer_keys(path, raw.jwks, raw.keys, raw.secret)?;
        let secret = matches!(keys, IssuerKeys::Secret(_));
        let algorithms = match raw.algorithms {
            Some(list) if list.is_empty() => {
                return Err(self.err(
                    &format!("{path}.algorithms"),
                    "algorithms is empty: list the algorithms the issuer signs with",
                ))
            }
            Some(list) => list,
            None if secret => vec![JwtAlgorithm::HS256],
            None => vec![JwtAlgorithm::RS256],
        };
        for (j, alg) in algorithms.iter().enumerate() {
            let field = format!("{path}.algorithms[{j}]");
            if secret && !alg.is_hmac() {
                return Err(self.err(
                    &field,
                    format!("a `secret` verifies only HS256, HS384 and HS512, not {alg}"),
                ));
            }
            if !secret && alg.is_hmac() {
                return Err(self.err(
                    &field,
                    format!("{alg} needs a `secret`: a public key is never used as an HMAC secret"),
                ));
            }
        }
        if let IssuerKeys::Secret(secret) = &keys {
            // RFC 7518 §3.2: a key at least as long as the hash.
            let needed = algorithms
                .iter()
                .map(|a| hmac_key_len(*a))
                .max()
                .unwrap_or(32);
            if secret.len() < needed {
                return Err(self.err(
                    &format!("{path}.secret"),
                    format!(
                        "the secret is {} bytes; {} needs at least {needed} (RFC 7518)",
                        secret.len(),
                        algorithms
                            .iter()
                            .find(|a| hmac_key_len(**a) == needed)
                            .map_or("HS256", |a| a.name())
                    ),
                ));
            }
        }
        let claim = |field: &str, value: Option<String>| -> Result<Option<String>> {
            match value {
                Some(v) if v.is_empty() || v.split('.').any(str::is_empty) => Err(self.err(
                    &format!("{path}.{field}"),
                    format!(
                        "\"{v}\" is not a claim name (dotted names read nested claims: org.id)"
                    ),
                )),
                other => Ok(other),
            }
        };
        Ok(IssuerConfig {
            issuer,
            audiences: raw.audiences.map(|a| a.0).unwrap_or_default(),
            algorithms,
            keys,
            leeway: raw.leeway.map_or(DEFAULT_LEEWAY, |d| d.0),
            consumer: claim("consumer", raw.consumer)?.unwrap_or_else(|| "sub".to_owned()),
            tenant: claim("tenant", raw.tenant)?,
            plan: claim("plan", raw.plan)?,
        })
    }

    /// Exactly one of `jwks`, `keys` and `secret`.
    fn issuer_keys(
        &self,
        path: &str,
        jwks: Option<crate::config::raw::RawJwks>,
        keys: Option<Vec<crate::config::raw::RawPemKey>>,
        secret: Option<String>,
    ) -> Result<IssuerKeys> {
        match (jwks, keys, secret) {
            (Some(j), None, None) => {
                let field = format!("{path}.jwks");
                match (j.url, j.file) {
                    (Some(url), None) => {
                        let uri: Uri = url.parse().map_err(|e| {
                            self.err(&format!("{field}.url"), format!("not a URL: {e}"))
                        })?;
                        if !matches!(uri.scheme_str(), Some("http" | "https"))
                            || uri.authority().is_none()
                        {
                            return Err(self.err(
                                &format!("{field}.url"),
                                format!("expected an http:// or https:// URL, got \"{url}\""),
                            ));
                        }
                        let refresh = j.refresh.map_or(DEFAULT_REFRESH, |d| d.0);
                        if refresh < MIN_REFRESH {
                            return Err(self
                                .err(&format!("{field}.refresh"), "refresh must be at least 30s"));
                        }
                        Ok(IssuerKeys::JwksUrl { url: uri, refresh })
                    }
                    (None, Some(file)) if j.refresh.is_none() => {
                        Ok(IssuerKeys::JwksFile(self.resolve(file)))
                    }
                    (None, Some(_)) => Err(self.err(
                        &format!("{field}.refresh"),
                        "refresh is for a JWKS `url`; a JWKS `file` is read with the config",
                    )),
                    _ => Err(self.err(&field, "jwks needs exactly one of `url` and `file`")),
                }
            }
            (None, Some(keys), None) if !keys.is_empty() => Ok(IssuerKeys::Pem(
                keys.into_iter().map(|k| self.resolve(k.pem)).collect(),
            )),
            (None, None, Some(secret)) if !secret.is_empty() => {
                Ok(IssuerKeys::Secret(secret.into_bytes()))
            }
            (None, Some(_), None) => Err(self.err(&format!("{path}.keys"), "keys is empty")),
            (None, None, Some(_)) => Err(self.err(
                &format!("{path}.secret"),
                "secret is empty (is its environment variable set?)",
            )),
            _ => Err(self.err(
                path,
                "an issuer needs exactly one of `jwks`, `keys` and `secret`",
            )),
        }
    }

    /// `consumers.identity_headers`.
    fn identity_headers(&self, raw: RawIdentityHeaders) -> Result<IdentityHeaders> {
        let one = |field: &str, v: Option<String>| {
            v.map(|h| self.header_name(&format!("consumers.identity_headers.{field}"), &h))
                .transpose()
        };
        let headers = IdentityHeaders {
            consumer: one("consumer", raw.consumer)?,
            tenant: one("tenant", raw.tenant)?,
            plan: one("plan", raw.plan)?,
        };
        let names: Vec<&HeaderName> = headers.names().collect();
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(self.err(
                    "consumers.identity_headers",
                    format!("header \"{name}\" is set twice"),
                ));
            }
            if is_reserved(name) {
                return Err(self.err(
                    "consumers.identity_headers",
                    format!("\"{name}\" is a header the gateway or HTTP itself owns"),
                ));
            }
        }
        Ok(headers)
    }

    /// `failure_limit`: a named limit whose key does not depend on the
    /// consumer (a failed credential has none).
    pub(super) fn failure_limit(
        &self,
        consumers: &ConsumersConfig,
        policies: &[LimitConfig],
    ) -> Result<()> {
        let Some(name) = &consumers.failure_limit else {
            return Ok(());
        };
        let field = "consumers.failure_limit";
        let Some(limit) = policies.iter().find(|l| &l.name == name) else {
            let known: Vec<&str> = policies.iter().map(|l| l.name.as_str()).collect();
            return Err(self.err(
                field,
                format!(
                    "unknown limit \"{name}\": failure_limit names a limit of `limits:`{}",
                    super::known_list(&known)
                ),
            ));
        };
        if let Some(source) = limit.key.iter().find(|s| s.is_identity()) {
            return Err(self.err(
                field,
                format!(
                    "limit \"{name}\" is keyed on {source}, which a failed credential does not have (key it on client_ip)"
                ),
            ));
        }
        if matches!(limit.params, crate::config::AlgoParams::Concurrency(_)) {
            return Err(self.err(
                field,
                format!(
                    "limit \"{name}\" is a concurrency limit; a failure is charged, never held"
                ),
            ));
        }
        Ok(())
    }

    /// A route's `auth:` at `path`; `consumers` is the validated section.
    pub(super) fn route_auth(
        &self,
        path: &str,
        raw: RawRouteAuth,
        consumers: Option<&ConsumersConfig>,
    ) -> Result<RouteAuth> {
        let Some(consumers) = consumers else {
            return Err(self.err(
                path,
                "auth needs a `consumers:` section saying how credentials are verified",
            ));
        };
        let require = raw.require.map_or_else(|| consumers.kinds(), |r| r.0);
        if require.is_empty() {
            return Err(self.err(
                &format!("{path}.require"),
                "require is empty: list api_key, jwt or mtls",
            ));
        }
        for (i, kind) in require.iter().enumerate() {
            let configured = match kind {
                CredentialKind::ApiKey => consumers.api_keys.is_some(),
                CredentialKind::Jwt => consumers.jwt.is_some(),
                CredentialKind::Mtls => consumers.mtls.is_some(),
            };
            if !configured {
                let section = match kind {
                    CredentialKind::ApiKey => "consumers.api_keys",
                    CredentialKind::Jwt => "consumers.jwt",
                    CredentialKind::Mtls => "consumers.mtls",
                };
                return Err(self.err(
                    &format!("{path}.require[{i}]"),
                    format!("{} needs {section} to be configured", kind.name()),
                ));
            }
        }
        Ok(RouteAuth {
            require,
            plans: raw.plans.unwrap_or_default(),
            consumers: raw.consumers.unwrap_or_default(),
            tenants: raw.tenants.unwrap_or_default(),
        })
    }

    /// A key source or exempt/override match that reads the consumer needs
    /// `consumers:` (and `claim:` needs `consumers.jwt`).
    pub(super) fn identity_source(&self, field: &str, source: &KeySource) -> Result<()> {
        if !source.is_identity() {
            return Ok(());
        }
        match &self.identity {
            None => Err(self.err(
                field,
                format!(
                    "{source} reads the verified consumer, but there is no `consumers:` section"
                ),
            )),
            Some(i) if matches!(source, KeySource::Claim(_)) && !i.jwt => Err(self.err(
                field,
                format!("{source} reads a verified JWT, but consumers.jwt is not configured"),
            )),
            Some(_) => Ok(()),
        }
    }
}

/// The shortest secret an HMAC algorithm takes: its hash's length.
fn hmac_key_len(alg: JwtAlgorithm) -> usize {
    match alg {
        JwtAlgorithm::HS384 => 48,
        JwtAlgorithm::HS512 => 64,
        _ => 32,
    }
}

/// Headers that can never be identity headers: hop-by-hop and framing
/// fields, Host, and the ones the gateway sets itself.
fn is_reserved(name: &HeaderName) -> bool {
    use http::header::*;
    [
        HOST,
        CONNECTION,
        CONTENT_LENGTH,
        TRANSFER_ENCODING,
        TE,
        TRAILER,
        UPGRADE,
        AUTHORIZATION,
        COOKIE,
    ]
    .contains(name)
        || name.as_str().starts_with("x-forwarded-")
        || name == "x-request-id"
        || name == "forwarded"
}

/// One consumer at `field`: a name, digests `sha256:` + 64 hex digits,
/// scalar attributes.
fn consumer(
    raw: RawConsumer,
    field: &str,
    err: &dyn Fn(&str, String) -> ConfigError,
) -> Result<ConsumerConfig> {
    let printable = crate::config::is_printable_name;
    if !printable(&raw.name) {
        return Err(err(
            &format!("{field}.name"),
            format!(
                "a consumer name is printable ASCII without spaces, got \"{}\"",
                raw.name
            ),
        ));
    }
    for (what, value) in [("tenant", &raw.tenant), ("plan", &raw.plan)] {
        if let Some(v) = value.as_deref().filter(|v| !printable(v)) {
            return Err(err(
                &format!("{field}.{what}"),
                format!("a {what} is printable ASCII without spaces, got \"{v}\""),
            ));
        }
    }
    let mut keys = Vec::new();
    for (i, key) in raw.keys.unwrap_or_default().iter().enumerate() {
        let digest = parse_digest(key).map_err(|m| err(&format!("{field}.keys[{i}]"), m))?;
        keys.push(digest);
    }
    let mut attributes = Vec::new();
    for (name, value) in raw.attributes.0 {
        let text = match value {
            serde_yaml::Value::String(s) => s,
            serde_yaml::Value::Number(n) => n.to_string(),
            serde_yaml::Value::Bool(b) => b.to_string(),
            _ => {
                return Err(err(
                    &format!("{field}.attributes.{name}"),
                    "an attribute is a string, a number or a boolean".into(),
                ))
            }
        };
        if attributes.iter().any(|(n, _)| *n == name) {
            return Err(err(
                &format!("{field}.attributes.{name}"),
                format!("duplicate attribute \"{name}\""),
            ));
        }
        attributes.push((name, text));
    }
    Ok(ConsumerConfig {
        name: raw.name,
        tenant: raw.tenant,
        plan: raw.plan,
        keys,
        attributes,
    })
}

/// `sha256:` and 64 hex digits (either case) -> the digest.
pub(crate) fn parse_digest(text: &str) -> std::result::Result<[u8; 32], String> {
    let bad = || {
        format!(
            "an API key is configured as its digest, \"sha256:\" and 64 hex digits (`tollgate hash-key` prints it), got \"{}\"",
            redact_key(text)
        )
    };
    let hex = text.strip_prefix("sha256:").ok_or_else(bad)?;
    let mut digest = [0u8; 32];
    if hex.len() != 64 || hex::decode_to_slice(hex, &mut digest).is_err() {
        return Err(bad());
    }
    Ok(digest)
}

/// What of a malformed key entry an error may show: it may be a key in
/// clear, so only its first characters.
fn redact_key(text: &str) -> String {
    if text.starts_with("sha256:") {
        return text.to_owned();
    }
    let head: String = text.chars().take(4).collect();
    format!("{head}...")
}

/// A consumer's name and keys must be new: `names` and `digests` hold the
/// ones seen so far, with where. `field` is its path for the error, `at`
/// where it is for later errors.
fn unique(
    c: &ConsumerConfig,
    field: &str,
    at: &str,
    names: &mut HashMap<String, String>,
    digests: &mut HashMap<[u8; 32], String>,
) -> std::result::Result<(), (String, String)> {
    if let Some(first) = names.get(&c.name) {
        return Err((
            format!("{field}.name"),
            format!("duplicate consumer \"{}\" (first in {first})", c.name),
        ));
    }
    names.insert(c.name.clone(), at.to_owned());
    for (i, d) in c.keys.iter().enumerate() {
        if let Some(first) = digests.get(d) {
            return Err((
                format!("{field}.keys[{i}]"),
                format!("duplicate API key digest (also a key of {first})"),
            ));
        }
        digests.insert(*d, format!("consumer \"{}\"", c.name));
    }
    Ok(())
}

/// The consumers of the consumers file at `path`, with their field paths
/// in it (`[2]`, or `list[2]` for the mapping form). Errors name the file,
/// line and column.
fn read_consumers_file(
    path: &std::path::Path,
    names: &mut HashMap<String, String>,
    digests: &mut HashMap<[u8; 32], String>,
) -> Result<Vec<ConsumerConfig>> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::file(&file, format!("cannot read the consumers file: {e}")))?;
    let is_list = text
        .lines()
        .map(str::trim_start)
        .find(|l| !l.is_empty() && !l.starts_with('#') && *l != "---")
        .is_none_or(|l| l.starts_with('-') || l.starts_with('['));
    // Positions are indexed under a mapping: a bare list is read as the
    // value of `list:` indented by two columns, and its positions moved
    // back (one line up, two columns left).
    let (positions, shift) = match is_list {
        true => {
            let wrapped: String = std::iter::once("list:\n".to_owned())
                .chain(text.lines().map(|l| format!("  {l}\n")))
                .collect();
            (Positions::build(&wrapped), (1, 2))
        }
        false => (Positions::build(&text), (0, 0)),
    };
    let err = |field: &str, message: String| {
        let pos = positions.lookup(&format!("list{field}"));
        ConfigError {
            file: file.clone(),
            line: pos.map(|p| p.0.saturating_sub(shift.0)),
            column: pos.map(|p| p.1.saturating_sub(shift.1)),
            field: match is_list {
                true => field.to_owned(),
                false => format!("list{field}"),
            },
            message,
        }
    };
    let raw = if is_list {
        let list: Option<Vec<RawConsumer>> =
            serde_yaml::from_str(&text).map_err(|e| ConfigError::from_yaml(&file, &e))?;
        list.unwrap_or_default()
    } else {
        let map: RawConsumersFile =
            serde_yaml::from_str(&text).map_err(|e| ConfigError::from_yaml(&file, &e))?;
        map.list
    };
    let mut out = Vec::with_capacity(raw.len());
    for (i, c) in raw.into_iter().enumerate() {
        let field = format!("[{i}]");
        let c = consumer(c, &field, &|f: &str, m| err(f, m))?;
        let at = format!("{} {field}", path.display());
        unique(&c, &field, &at, names, digests).map_err(|(f, m)| err(&f, m))?;
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, Config};

    const KEY: &str = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

    /// `consumers:` (indented two spaces per line given) with one route
    /// requiring auth, and `extra` appended at the top level.
    fn config(consumers: &str, extra: &str) -> String {
        format!(
            "consumers:\n{consumers}routes:\n  - name: api\n    respond: {{ status: 200 }}\n    auth: {{}}\n{extra}"
        )
    }

    fn valid(text: &str) -> Config {
        match parse(text, "gateway.yaml") {
            Ok(l) => l.config,
            Err(e) => panic!("{e}\n{text}"),
        }
    }

    /// The error's field, line and message.
    fn error(text: &str) -> (String, Option<usize>, String) {
        match parse(text, "gateway.yaml") {
            Ok(_) => panic!("valid:\n{text}"),
            Err(e) => {
                assert!(e.column.is_some() || e.line.is_none(), "{e}");
                (e.field, e.line, e.message)
            }
        }
    }

    #[test]
    fn a_whole_section() {
        let c = valid(&config(
            &format!(
                "  api_keys: {{ header: X-Api-Key, query: api_key, hide: true }}
  jwt:
    issuers:
      - issuer: \"https://auth.example/\"
        audiences: api
        jwks: {{ url: \"https://auth.example/jwks.json\" }}
        tenant: org.id
      - {{ issuer: internal, secret: \"0123456789abcdef0123456789abcdef\" }}
  list:
    - {{ name: acme-batch, tenant: acme, plan: gold, keys: [\"{KEY}\"], attributes: {{ billing_day: 15, tz: Europe/Berlin, vip: true }} }}
  identity_headers: {{ consumer: x-consumer }}
  failure_limit: fails
"
            ),
            "limits:\n  fails: { algorithm: fixed_window, limit: 5, window: 1m }\n  per: { algorithm: fixed_window, limit: 5, window: 1m, key: [consumer, \"claim:org.id\", \"attr:tz\"], exempt: [\"plan=gold\"] }\n",
        ));
        let consumers = c.consumers.expect("consumers");
        let keys = consumers.api_keys.expect("api keys");
        assert_eq!(keys.header.as_ref().map(|h| h.as_str()), Some("x-api-key"));
        let jwt = consumers.jwt.expect("jwt");
        assert!(jwt.hide, "jwt.hide follows api_keys.hide");
        let i = &jwt.issuers[0];
        assert_eq!(i.algorithms, vec![JwtAlgorithm::RS256]);
        assert_eq!(i.leeway, DEFAULT_LEEWAY);
        assert_eq!(i.consumer, "sub");
        assert_eq!(i.audiences, vec!["api".to_owned()]);
        assert!(
            matches!(&i.keys, IssuerKeys::JwksUrl { refresh, .. } if *refresh == DEFAULT_REFRESH)
        );
        assert_eq!(jwt.issuers[1].algorithms, vec![JwtAlgorithm::HS256]);
        let acme = &consumers.list[0];
        assert_eq!(acme.keys[0], parse_digest(KEY).unwrap());
        assert_eq!(
            acme.attributes,
            vec![
                ("billing_day".to_owned(), "15".to_owned()),
                ("tz".to_owned(), "Europe/Berlin".to_owned()),
                ("vip".to_owned(), "true".to_owned())
            ]
        );
        assert_eq!(
            c.routes[0].auth.as_ref().map(|a| a.require.clone()),
            Some(vec![CredentialKind::ApiKey, CredentialKind::Jwt])
        );
    }

    #[test]
    fn mistakes_name_their_field_and_line() {
        let keys = "  api_keys: { header: x-api-key }\n";
        let issuer = |rest: &str| {
            config(
                &format!("  jwt:\n    issuers:\n      - issuer: i\n{rest}"),
                "",
            )
        };
        let cases: Vec<(String, &str, usize, &str)> = vec![
            (issuer("        algorithms: [RS256, XS999]\n        keys: [{ pem: k.pem }]\n"),
             "consumers.jwt.issuers[0].algorithms[1]", 5, "unknown algorithm \"XS999\""),
            (issuer("        algorithms: [none]\n        keys: [{ pem: k.pem }]\n"),
             "consumers.jwt.issuers[0].algorithms[0]", 5, "\"none\" is never allowed"),
            (issuer("        algorithms: [RS256]\n        secret: \"0123456789abcdef0123456789abcdef\"\n"),
             "consumers.jwt.issuers[0].algorithms[0]", 5, "a `secret` verifies only HS256"),
            (issuer("        algorithms: [HS256]\n        keys: [{ pem: k.pem }]\n"),
             "consumers.jwt.issuers[0].algorithms[0]", 5, "a public key is never used as an HMAC secret"),
            (issuer("        secret: short\n"),
             "consumers.jwt.issuers[0].secret", 5, "the secret is 5 bytes; HS256 needs at least 32"),
            (issuer("        secret: s\n        keys: [{ pem: k.pem }]\n"),
             "consumers.jwt.issuers[0]", 4, "exactly one of `jwks`, `keys` and `secret`"),
            (issuer("        jwks: { url: \"ftp://x/jwks\" }\n"),
             "consumers.jwt.issuers[0].jwks.url", 5, "expected an http:// or https:// URL"),
            (config(&format!("{keys}  list:\n    - {{ name: a, keys: [\"sha256:abc\"] }}\n"), ""),
             "consumers.list[0].keys[0]", 4, "\"sha256:\" and 64 hex digits"),
            (config(&format!("{keys}  list:\n    - {{ name: a }}\n    - {{ name: a }}\n"), ""),
             "consumers.list[1].name", 5, "duplicate consumer \"a\""),
            (config(&format!("{keys}  list:\n    - {{ name: a, keys: [\"{KEY}\"] }}\n    - {{ name: b, keys: [\"{KEY}\"] }}\n"), ""),
             "consumers.list[1].keys[0]", 5, "duplicate API key digest"),
            (config("  mtls: { consumer: san_uri }\n", ""),
             "consumers.mtls", 2, "server.tls.client_auth"),
            (config(&format!("{keys}  failure_limit: f\n"), "limits:\n  f: { algorithm: fixed_window, limit: 1, window: 1m, key: consumer }\n"),
             "consumers.failure_limit", 3, "keyed on consumer"),
            (config(keys, "").replace("auth: {}", "auth: { require: [jwt] }"),
             "routes[0].auth.require[0]", 6, "jwt needs consumers.jwt"),
        ];
        for (text, field, line, message) in cases {
            let (f, l, m) = error(&text);
            assert_eq!((f.as_str(), l), (field, Some(line)), "{m}\n{text}");
            assert!(m.contains(message), "{m}\n{text}");
        }
    }

    #[test]
    fn identity_sources_need_consumers() {
        let text = "limits:\n  p: { algorithm: fixed_window, limit: 1, window: 1m, key: [client_ip, tenant] }\n";
        let (f, l, m) = error(text);
        assert_eq!((f.as_str(), l), ("limits.p.key[1]", Some(2)));
        assert!(m.contains("no `consumers:` section"), "{m}");
        let text = "limits:\n  p: { algorithm: fixed_window, limit: 1, window: 1m, overrides: [{ match: \"plan=gold\", limit: 5 }] }\n";
        let (f, _, m) = error(text);
        assert_eq!(f, "limits.p.overrides[0].match");
        assert!(m.contains("plan reads the verified consumer"), "{m}");
        let text = config(
            "  api_keys: { header: k }\n",
            "limits:\n  p: { algorithm: fixed_window, limit: 1, window: 1m, key: \"claim:org\" }\n",
        );
        let (f, _, m) = error(&text);
        assert_eq!(f, "limits.p.key");
        assert!(m.contains("consumers.jwt is not configured"), "{m}");
        let (f, _, m) = error("routes:\n  - { name: a, respond: { status: 200 }, auth: {} }\n");
        assert_eq!(f, "routes[0].auth");
        assert!(m.contains("needs a `consumers:` section"), "{m}");
    }

    #[test]
    fn the_consumers_file() {
        let dir = tollgate_testkit::temp_dir("consumers-file");
        let file = dir.join("consumers.yaml");
        std::fs::write(&file, format!("- {{ name: b, keys: [\"{KEY}\"] }}\n")).unwrap();
        let text = config(
            &format!(
                "  api_keys: {{ header: k }}\n  file: {}\n  list:\n    - {{ name: a }}\n",
                file.display()
            ),
            "",
        );
        let c = valid(&text);
        let names: Vec<&str> = c
            .consumers
            .as_ref()
            .unwrap()
            .list
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        std::fs::write(&file, "list:\n  - name: c\n    keys: [\"sha256:nope\"]\n").unwrap();
        let e = parse(&text, "gateway.yaml").unwrap_err();
        assert_eq!(e.file, file.display().to_string());
        assert_eq!(
            (e.field.as_str(), e.line),
            ("list[0].keys[0]", Some(3)),
            "{e}"
        );
        std::fs::write(&file, "- { name: a }\n").unwrap();
        let e = parse(&text, "gateway.yaml").unwrap_err();
        assert!(e.message.contains("duplicate consumer \"a\""), "{e}");
        std::fs::remove_file(&file).unwrap();
        let e = parse(&text, "gateway.yaml").unwrap_err();
        assert!(e.message.contains("cannot read the consumers file"), "{e}");
    }

    #[test]
    fn digests() {
        let hex = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";
        let d = parse_digest(&format!("sha256:{hex}")).unwrap();
        assert_eq!(hex::encode(d), hex);
        assert!(parse_digest(&format!("sha256:{}", hex.to_uppercase())).is_ok());
        for bad in [
            hex.to_owned(),
            format!("sha1:{hex}"),
            format!("sha256:{}", &hex[1..]),
            format!("sha256:{hex}0"),
            format!("sha256:{}g", &hex[1..]),
        ] {
            assert!(parse_digest(&bad).is_err(), "{bad}");
        }
        // A key pasted in clear is not echoed whole.
        let e = parse_digest("supersecretkey").unwrap_err();
        assert!(
            e.contains("\"supe...\"") && !e.contains("supersecret"),
            "{e}"
        );
    }
}
