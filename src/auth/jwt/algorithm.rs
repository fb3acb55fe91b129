//! The JWS algorithms the gateway verifies, and the key type each needs.

use std::fmt;
use std::str::FromStr;

/// A JWS signature algorithm (RFC 7518 §3, RFC 8037 for `EdDSA`).
///
/// `none` is not one: an unsigned token never verifies.
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
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

/// Every algorithm, in the order error messages list them.
const ALL: [Algorithm; 12] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
    Algorithm::HS256,
    Algorithm::HS384,
    Algorithm::HS512,
];

impl Algorithm {
    /// Its name in a JWS header (`alg`) and in the config.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::RS256 => "RS256",
            Algorithm::RS384 => "RS384",
            Algorithm::RS512 => "RS512",
            Algorithm::PS256 => "PS256",
            Algorithm::PS384 => "PS384",
            Algorithm::PS512 => "PS512",
            Algorithm::ES256 => "ES256",
            Algorithm::ES384 => "ES384",
            Algorithm::EdDSA => "EdDSA",
            Algorithm::HS256 => "HS256",
            Algorithm::HS384 => "HS384",
            Algorithm::HS512 => "HS512",
        }
    }

    /// The algorithm named exactly `name`, if it is one of ours (no error
    /// text: for headers and JWKs, whose strings are not echoed).
    pub(crate) fn from_name(name: &str) -> Option<Algorithm> {
        ALL.into_iter().find(|a| a.name() == name)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;

    /// Exact names (`RS256`, `EdDSA`, ...); `none`, in any case, is refused
    /// with its own message.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("none") {
            return Err("\"none\" is never allowed".to_string());
        }
        Algorithm::from_name(s).ok_or_else(|| {
            let names: Vec<&str> = ALL.iter().map(|a| a.name()).collect();
            format!(
                "unknown algorithm {s:?}, expected one of {}",
                names.join(", ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_exactly() {
        for a in ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
            assert_eq!(a.to_string(), a.name());
        }
        assert!("rs256".parse::<Algorithm>().is_err());
        assert!("EDDSA".parse::<Algorithm>().is_err());
    }

    #[test]
    fn none_is_refused_in_any_case() {
        for s in ["none", "None", "NONE", "nOnE"] {
            assert_eq!(
                s.parse::<Algorithm>(),
                Err("\"none\" is never allowed".to_string())
            );
        }
    }

    #[test]
    fn unknown_names_list_the_allowed() {
        let err = "RS1".parse::<Algorithm>().unwrap_err();
        assert_eq!(
            err,
            "unknown algorithm \"RS1\", expected one of RS256, RS384, RS512, PS256, \
             PS384, PS512, ES256, ES384, EdDSA, HS256, HS384, HS512"
        );
    }
}
