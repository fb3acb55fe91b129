//! One verification key, its material parsed once into the form ring takes,
//! and which algorithms it may verify.

use std::fmt;

use ring::{hmac, signature};

use super::der::strip_zeros;
use super::Algorithm;

/// What kind of key a [`Key`] is, which decides the algorithms it verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// An RSA public key (2048 to 8192 bits): RS256/384/512, PS256/384/512.
    Rsa,
    /// An EC public key on P-256: ES256.
    P256,
    /// An EC public key on P-384: ES384.
    P384,
    /// An Ed25519 public key: EdDSA.
    Ed25519,
    /// A shared secret: HS256/384/512.
    Hmac,
}

impl KeyKind {
    /// Whether a key of this kind may verify `alg`. This is the rule that
    /// keeps an RSA public key from ever being used as an HMAC secret.
    pub fn fits(self, alg: Algorithm) -> bool {
        use Algorithm::*;
        match self {
            KeyKind::Rsa => matches!(alg, RS256 | RS384 | RS512 | PS256 | PS384 | PS512),
            KeyKind::P256 => alg == ES256,
            KeyKind::P384 => alg == ES384,
            KeyKind::Ed25519 => alg == EdDSA,
            KeyKind::Hmac => matches!(alg, HS256 | HS384 | HS512),
        }
    }
}

/// One verification key: its kind, its `kid` and `alg` when its JWK had
/// them, and its material.
pub struct Key {
    kind: KeyKind,
    kid: Option<String>,
    alg: Option<Algorithm>,
    material: Material,
}

/// Key material as ring takes it. ring's verification API parses a public
/// key on every call (it has no prepared public-key type), so what can be
/// done once is done here: base64, DER and size checks; HMAC keys are
/// ring's prepared `hmac::Key`s.
enum Material {
    Rsa(signature::RsaPublicKeyComponents<Vec<u8>>),
    /// An uncompressed EC point (`04 || x || y`) or an Ed25519 key.
    Point(Vec<u8>),
    /// One prepared key per digest: SHA-256, SHA-384, SHA-512.
    Hmac(Box<[hmac::Key; 3]>),
}

/// The smallest and largest RSA modulus ring verifies with (bits).
const RSA_BITS: std::ops::RangeInclusive<usize> = 2048..=8192;

impl Key {
    /// An RSA key from its modulus and public exponent (big-endian).
    pub(crate) fn rsa(n: &[u8], e: &[u8]) -> Result<Key, &'static str> {
        let (n, e) = (strip_zeros(n), strip_zeros(e));
        let bits = n
            .first()
            .map_or(0, |top| n.len() * 8 - top.leading_zeros() as usize);
        if !RSA_BITS.contains(&bits) {
            return Err("RSA modulus not between 2048 and 8192 bits");
        }
        if e.len() > 4 || e.last().is_none_or(|low| low & 1 == 0) || e == [1] {
            return Err("RSA public exponent out of range");
        }
        let components = signature::RsaPublicKeyComponents {
            n: n.to_vec(),
            e: e.to_vec(),
        };
        Ok(Key::new(KeyKind::Rsa, Material::Rsa(components)))
    }

    /// An EC key (`kind` P256 or P384) from its uncompressed point.
    pub(crate) fn ec(kind: KeyKind, point: Vec<u8>) -> Result<Key, &'static str> {
        let coordinate = match kind {
            KeyKind::P256 => 32,
            KeyKind::P384 => 48,
            _ => return Err("not an EC curve"),
        };
        if point.len() != 1 + 2 * coordinate || point[0] != 0x04 {
            return Err("EC point not uncompressed or of the wrong size for its curve");
        }
        Ok(Key::new(kind, Material::Point(point)))
    }

    /// An Ed25519 key from its 32 bytes.
    pub(crate) fn ed25519(x: Vec<u8>) -> Result<Key, &'static str> {
        if x.len() != 32 {
            return Err("Ed25519 key not 32 bytes");
        }
        Ok(Key::new(KeyKind::Ed25519, Material::Point(x)))
    }

    /// A shared secret, for HS256/384/512.
    pub(crate) fn hmac(secret: &[u8]) -> Key {
        let keys = [
            hmac::Key::new(hmac::HMAC_SHA256, secret),
            hmac::Key::new(hmac::HMAC_SHA384, secret),
            hmac::Key::new(hmac::HMAC_SHA512, secret),
        ];
        Key::new(KeyKind::Hmac, Material::Hmac(Box::new(keys)))
    }

    fn new(kind: KeyKind, material: Material) -> Key {
        Key {
            kind,
            kid: None,
            alg: None,
            material,
        }
    }

    /// This key with the `kid` and `alg` of its JWK.
    pub(crate) fn with_jwk_fields(mut self, kid: Option<String>, alg: Option<Algorithm>) -> Key {
        self.kid = kid;
        self.alg = alg;
        self
    }

    /// Its kind.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// Its key ID (`kid`), from its JWK.
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// The one algorithm its JWK allows (`alg`), if it names one.
    pub fn alg(&self) -> Option<Algorithm> {
        self.alg
    }

    /// Whether this key may verify a token signed with `alg`: its kind fits,
    /// and its JWK's own `alg`, when present, is the same.
    pub fn accepts(&self, alg: Algorithm) -> bool {
        self.kind.fits(alg) && self.alg.is_none_or(|own| own == alg)
    }

    /// Whether `signature` is this key's `alg` signature of `message`. The
    /// caller has checked [`Key::accepts`]; a mismatch is `false` anyway.
    pub(crate) fn verify(&self, alg: Algorithm, message: &[u8], sig: &[u8]) -> bool {
        use Algorithm::*;
        if !self.accepts(alg) {
            return false;
        }
        match &self.material {
            Material::Rsa(components) => {
                let params: &signature::RsaParameters = match alg {
                    RS256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                    RS384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                    RS512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                    PS256 => &signature::RSA_PSS_2048_8192_SHA256,
                    PS384 => &signature::RSA_PSS_2048_8192_SHA384,
                    PS512 => &signature::RSA_PSS_2048_8192_SHA512,
                    _ => return false,
                };
                components.verify(params, message, sig).is_ok()
            }
            Material::Point(point) => {
                let algorithm: &dyn signature::VerificationAlgorithm = match alg {
                    ES256 => &signature::ECDSA_P256_SHA256_FIXED,
                    ES384 => &signature::ECDSA_P384_SHA384_FIXED,
                    EdDSA => &signature::ED25519,
                    _ => return false,
                };
                signature::UnparsedPublicKey::new(algorithm, point)
                    .verify(message, sig)
                    .is_ok()
            }
            Material::Hmac(keys) => {
                let key = match alg {
                    HS256 => &keys[0],
                    HS384 => &keys[1],
                    HS512 => &keys[2],
                    _ => return false,
                };
                // Constant time in the signature's bytes.
                hmac::verify(key, message, sig).is_ok()
            }
        }
    }
}

/// Kind, `kid` and `alg` only: never the material (a secret, for HMAC).
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("kind", &self.kind)
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_fit_only_their_algorithms() {
        use Algorithm::*;
        let all = [
            RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA, HS256, HS384, HS512,
        ];
        let fitting = |kind: KeyKind| -> Vec<Algorithm> {
            all.into_iter().filter(|a| kind.fits(*a)).collect()
        };
        assert_eq!(
            fitting(KeyKind::Rsa),
            [RS256, RS384, RS512, PS256, PS384, PS512]
        );
        assert_eq!(fitting(KeyKind::P256), [ES256]);
        assert_eq!(fitting(KeyKind::P384), [ES384]);
        assert_eq!(fitting(KeyKind::Ed25519), [EdDSA]);
        assert_eq!(fitting(KeyKind::Hmac), [HS256, HS384, HS512]);
    }

    #[test]
    fn sizes_are_checked_when_the_key_is_built() {
        let mut n = vec![0x80];
        n.extend([0u8; 255]); // exactly 2048 bits
        assert!(Key::rsa(&n, &[1, 0, 1]).is_ok());
        assert!(Key::rsa(&n[1..], &[1, 0, 1]).is_err()); // 2040 bits
        assert!(Key::rsa(&n, &[1, 0, 0]).is_err()); // even exponent
        assert!(Key::rsa(&n, &[1]).is_err());
        assert!(Key::ec(KeyKind::P256, vec![4; 65]).is_ok());
        assert!(Key::ec(KeyKind::P256, vec![4; 97]).is_err());
        assert!(Key::ec(KeyKind::P384, vec![2; 97]).is_err()); // compressed marker
        assert!(Key::ed25519(vec![0; 31]).is_err());
    }

    #[test]
    fn a_jwk_alg_pins_the_key_to_it() {
        let key = Key::hmac(b"0123456789abcdef0123456789abcdef");
        assert!(key.accepts(Algorithm::HS384));
        let key = key.with_jwk_fields(None, Some(Algorithm::HS256));
        assert!(key.accepts(Algorithm::HS256));
        assert!(!key.accepts(Algorithm::HS384));
        assert!(!format!("{key:?}").contains("0123"));
    }
}
