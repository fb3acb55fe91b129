//! The validated `consumers:` section and a route's `auth:`
//! (docs/configuration/consumers.md): who the gateway can verify, with which
//! credentials, and which of them a route lets through.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use http::{HeaderName, Uri};
use serde::de::{Deserialize, Deserializer};

use super::units::deserialize_from_str;

/// `consumers:`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumersConfig {
    /// API keys: where they are read.
    pub api_keys: Option<ApiKeysConfig>,
    /// JWT bearer tokens: the header and the issuers.
    pub jwt: Option<JwtConfig>,
    /// Client certificates: which name is the consumer.
    pub mtls: Option<MtlsConfig>,
    /// `file`: more consumers, read with the config (resolved path).
    pub file: Option<PathBuf>,
    /// Every consumer of `list`, then those of `file`.
    pub list: Vec<ConsumerConfig>,
    /// Headers set from the verified consumer on forwarded requests.
    pub identity_headers: IdentityHeaders,
    /// The named limit charged once per failed credential.
    pub failure_limit: Option<String>,
}

impl ConsumersConfig {
    /// The credential kinds configured, in the order `api_key`, `jwt`,
    /// `mtls`.
    pub fn kinds(&self) -> Vec<CredentialKind> {
        [
            (self.api_keys.is_some(), CredentialKind::ApiKey),
            (self.jwt.is_some(), CredentialKind::Jwt),
            (self.mtls.is_some(), CredentialKind::Mtls),
        ]
        .into_iter()
        .filter_map(|(on, kind)| on.then_some(kind))
        .collect()
    }
}

/// `consumers.api_keys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeysConfig {
    /// The header carrying the key (tried first).
    pub header: Option<HeaderName>,
    /// The query parameter carrying the key.
    pub query: Option<String>,
    /// Remove the key before forwarding.
    pub hide: bool,
}

/// `consumers.jwt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfig {
    /// The header carrying `Bearer <token>` (default `authorization`).
    pub header: HeaderName,
    /// The issuers tokens may come from (at least one).
    pub issuers: Vec<IssuerConfig>,
    /// Remove the token's header before forwarding (`api_keys.hide`).
    pub hide: bool,
}

/// One trusted token issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerConfig {
    /// `iss` must equal this.
    pub issuer: String,
    /// `aud` must contain one of these (empty: `aud` is not checked).
    pub audiences: Vec<String>,
    /// The algorithms accepted (never `none`), all fitting `keys`.
    pub algorithms: Vec<JwtAlgorithm>,
    /// Where the verification keys come from.
    pub keys: IssuerKeys,
    /// Tolerance for `exp`, `nbf` and `iat`.
    pub leeway: Duration,
    /// The claim naming the consumer (default `sub`; dotted for nested).
    pub consumer: String,
    /// The claim naming the consumer's tenant.
    pub tenant: Option<String>,
    /// The claim naming the consumer's plan.
    pub plan: Option<String>,
}

/// Where an issuer's verification keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssuerKeys {
    /// A JWKS fetched from a URL and refreshed every `refresh`.
    JwksUrl {
        /// The JWKS document's URL (`http` or `https`).
        url: Uri,
        /// How often it is fetched again.
        refresh: Duration,
    },
    /// A JWKS file, read with the config.
    JwksFile(PathBuf),
    /// PEM files of public keys or certificates, read with the config.
    Pem(Vec<PathBuf>),
    /// A shared HMAC secret (HS256/384/512 only).
    Secret(Vec<u8>),
}

/// A JWS signature algorithm an issuer may use (RFC 7518 §3, RFC 8037 for
/// `EdDSA`). `none` is not one: an unsigned token never verifies.
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JwtAlgorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// RSASSA-PSS with SHA-256 (MGF1 with SHA-256).
    PS256,
    /// RSASSA-PSS with SHA-384 (MGF1 with SHA-384).
    PS384,
    /// RSASSA-PSS with SHA-512 (MGF1 with SHA-512).
    PS512,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// ECDSA on P-384 with SHA-384.
    ES384,
    /// Ed25519 (RFC 8037; the only EdDSA curve accepted).
    EdDSA,
    /// HMAC with SHA-256.
    HS256,
    /// HMAC with SHA-384.
    HS384,
    /// HMAC with SHA-512.
    HS512,
}

impl JwtAlgorithm {
    /// Every algorithm, in the order the docs list them.
    pub const ALL: [JwtAlgorithm; 12] = [
        JwtAlgorithm::RS256,
        JwtAlgorithm::RS384,
        JwtAlgorithm::RS512,
        JwtAlgorithm::PS256,
        JwtAlgorithm::PS384,
        JwtAlgorithm::PS512,
        JwtAlgorithm::ES256,
        JwtAlgorithm::ES384,
        JwtAlgorithm::EdDSA,
        JwtAlgorithm::HS256,
        JwtAlgorithm::HS384,
        JwtAlgorithm::HS512,
    ];

    /// Its JOSE name (`RS256`).
    pub fn name(self) -> &'static str {
        match self {
            JwtAlgorithm::RS256 => "RS256",
            JwtAlgorithm::RS384 => "RS384",
            JwtAlgorithm::RS512 => "RS512",
            JwtAlgorithm::PS256 => "PS256",
            JwtAlgorithm::PS384 => "PS384",
            JwtAlgorithm::PS512 => "PS512",
            JwtAlgorithm::ES256 => "ES256",
            JwtAlgorithm::ES384 => "ES384",
            JwtAlgorithm::EdDSA => "EdDSA",
            JwtAlgorithm::HS256 => "HS256",
            JwtAlgorithm::HS384 => "HS384",
            JwtAlgorithm::HS512 => "HS512",
        }
    }

    /// The algorithm named exactly `name` (a token header's or a JWK's
    /// `alg`, whose text is never echoed in an error).
    pub fn from_name(name: &str) -> Option<JwtAlgorithm> {
        JwtAlgorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    /// An HMAC algorithm (verified with a shared secret, never a public key).
    pub fn is_hmac(self) -> bool {
        matches!(
            self,
            JwtAlgorithm::HS256 | JwtAlgorithm::HS384 | JwtAlgorithm::HS512
        )
    }
}

impl FromStr for JwtAlgorithm {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Err("\"none\" is never allowed: a token must be signed".into());
        }
        JwtAlgorithm::from_name(text.trim()).ok_or_else(|| {
            let names: Vec<&str> = JwtAlgorithm::ALL.iter().map(|a| a.name()).collect();
            format!("unknown algorithm \"{text}\" (known: {})", names.join(", "))
        })
    }
}

impl fmt::Display for JwtAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> Deserialize<'de> for JwtAlgorithm {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_from_str(deserializer, "an algorithm like \"RS256\"")
    }
}

/// `consumers.mtls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtlsConfig {
    /// Which name of the verified certificate is the consumer.
    pub consumer: CertName,
}

/// A name in a client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CertName {
    /// The first DNS name of the subject alternative names.
    SanDns,
    /// The first URI of the subject alternative names.
    SanUri,
    /// The subject's common name.
    SubjectCn,
}

/// One consumer of `list` (or of the consumers file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Unique name: what `consumer` keys and the access log show.
    pub name: String,
    /// Its tenant.
    pub tenant: Option<String>,
    /// Its plan.
    pub plan: Option<String>,
    /// SHA-256 digests of its API keys.
    pub keys: Vec<[u8; 32]>,
    /// Free attributes (`attr:NAME`), scalar values as text.
    pub attributes: Vec<(String, String)>,
}

/// Whether `name` can be a consumer's name, tenant or plan: printable
/// ASCII without spaces (`!` to `~`), not empty. Configured names are held
/// to it, and so are the names a token or a client certificate gives: they
/// go into identity headers and log lines, and they are all that the
/// `consumer`, `tenant` and `plan` key sources can be.
pub fn is_printable_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (0x21..0x7f).contains(&b))
}

/// `consumers.identity_headers`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentityHeaders {
    /// Set to the consumer's name.
    pub consumer: Option<HeaderName>,
    /// Set to its tenant.
    pub tenant: Option<HeaderName>,
    /// Set to its plan.
    pub plan: Option<HeaderName>,
}

impl IdentityHeaders {
    /// The configured header names.
    pub fn names(&self) -> impl Iterator<Item = &HeaderName> {
        [&self.consumer, &self.tenant, &self.plan]
            .into_iter()
            .flatten()
    }
}

/// A kind of credential a route may require.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    /// An API key (`consumers.api_keys`).
    ApiKey,
    /// A JWT (`consumers.jwt`).
    Jwt,
    /// A client certificate (`consumers.mtls`).
    Mtls,
}

impl CredentialKind {
    /// Its name in the config and in `GET /consumers`.
    pub fn name(self) -> &'static str {
        match self {
            CredentialKind::ApiKey => "api_key",
            CredentialKind::Jwt => "jwt",
            CredentialKind::Mtls => "mtls",
        }
    }
}

/// A route's `auth:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteAuth {
    /// Any one of these credentials lets a request in (at least one).
    pub require: Vec<CredentialKind>,
    /// Only consumers on these plans (empty: any).
    pub plans: Vec<String>,
    /// Only these consumers (empty: any).
    pub consumers: Vec<String>,
    /// Only consumers of these tenants (empty: any).
    pub tenants: Vec<String>,
}

/// `server.tls.client_auth`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAuthConfig {
    /// The CA certificates (PEM) client certificates must chain to.
    pub ca: PathBuf,
    /// Refuse the handshake of a client without a certificate.
    pub required: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_read_back_exactly() {
        for a in JwtAlgorithm::ALL {
            assert_eq!(a.name().parse::<JwtAlgorithm>(), Ok(a));
            assert_eq!(JwtAlgorithm::from_name(a.name()), Some(a));
            assert_eq!(a.to_string(), a.name());
        }
        assert!("rs256".parse::<JwtAlgorithm>().is_err());
        assert!("EDDSA".parse::<JwtAlgorithm>().is_err());
        for none in ["none", "None", "NONE", "nOnE"] {
            assert_eq!(
                none.parse::<JwtAlgorithm>(),
                Err("\"none\" is never allowed: a token must be signed".to_string())
            );
            assert_eq!(JwtAlgorithm::from_name(none), None);
        }
        assert_eq!(
            "RS1".parse::<JwtAlgorithm>().unwrap_err(),
            "unknown algorithm \"RS1\" (known: RS256, RS384, RS512, PS256, PS384, PS512, \
             ES256, ES384, EdDSA, HS256, HS384, HS512)"
        );
    }
}
