//! PEM public keys: `PUBLIC KEY` (SubjectPublicKeyInfo) and `CERTIFICATE`
//! blocks into verification keys.

use rustls::pki_types::pem::{self, SectionKind};

use super::der;
use super::key::{Key, KeyKind};

/// Every key of `pem`, in order. Other blocks are ignored, except private
/// keys, which are refused: a verifier never needs one, and its presence
/// means the wrong file was configured.
pub(crate) fn parse(pem: &[u8]) -> Result<Vec<Key>, String> {
    let mut rest = pem;
    let mut keys = Vec::new();
    loop {
        let block = pem::from_buf(&mut rest).map_err(|e| format!("not PEM: {e}"))?;
        let Some((kind, body)) = block else {
            return Ok(keys);
        };
        let n = keys.len() + 1;
        let spki = match kind {
            SectionKind::PublicKey => body.as_slice(),
            SectionKind::Certificate => {
                der::certificate_spki(&body).map_err(|e| format!("key {n}: {e}"))?
            }
            SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey => {
                return Err("a private key: give the public key or certificate".into())
            }
            _ => continue,
        };
        keys.push(from_spki(spki).map_err(|e| format!("key {n}: {e}"))?);
    }
}

/// A verification key from a DER SubjectPublicKeyInfo.
fn from_spki(spki: &[u8]) -> Result<Key, &'static str> {
    let info = der::spki(spki)?;
    match (info.algorithm, info.curve) {
        (der::OID_RSA, _) => {
            let (n, e) = der::rsa_public_key(info.key)?;
            Key::rsa(n, e)
        }
        (der::OID_EC, Some(der::OID_P256)) => Key::ec(KeyKind::P256, info.key.to_vec()),
        (der::OID_EC, Some(der::OID_P384)) => Key::ec(KeyKind::P384, info.key.to_vec()),
        (der::OID_EC, _) => Err("EC curve not supported (P-256 and P-384 are)"),
        (der::OID_ED25519, _) => Key::ed25519(info.key.to_vec()),
        _ => Err("key algorithm not supported (RSA, EC P-256/P-384 and Ed25519 are)"),
    }
}
