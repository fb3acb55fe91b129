//! JSON Web Keys (RFC 7517, RFC 7518 §6, RFC 8037): a JWKS document into
//! verification keys.

use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use serde_json::{Map, Value};

use super::key::{Key, KeyKind};
use super::Algorithm;

/// base64url for key members: without padding as RFC 7518 asks, but with
/// it too, since some publishers pad.
const KEY_BASE64: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// What became of one JWK.
pub(crate) enum Outcome {
    /// A signature verification key.
    Key(Key),
    /// Not for us (another use, kty, curve or algorithm): why.
    Skipped(String),
}

/// The keys of a JWKS document: each JWK's outcome, in order. A symmetric
/// (`oct`) key fails the whole document: a shared secret has no place in a
/// published key set, and HMAC keys come only from the config's `secret`.
pub(crate) fn parse(json: &[u8]) -> Result<Vec<Outcome>, String> {
    let doc: Value = serde_json::from_slice(json).map_err(|e| format!("JWKS is not JSON: {e}"))?;
    let keys = doc
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("JWKS has no \"keys\" array")?;
    keys.iter()
        .enumerate()
        .map(|(index, jwk)| {
            let jwk = jwk
                .as_object()
                .ok_or_else(|| format!("keys[{index}] is not an object"))?;
            if jwk.get("kty").and_then(Value::as_str) == Some("oct") {
                return Err(format!(
                    "keys[{index}]: a symmetric (\"oct\") key is refused; an HMAC secret \
                     is configured with `secret`"
                ));
            }
            Ok(match one(jwk) {
                Ok(key) => Outcome::Key(key),
                Err(why) => Outcome::Skipped(format!("keys[{index}]: {why}")),
            })
        })
        .collect()
}

/// One JWK as a verification key, or why it is not one.
fn one(jwk: &Map<String, Value>) -> Result<Key, String> {
    if let Some(usage) = jwk.get("use") {
        if usage.as_str() != Some("sig") {
            return Err(format!("\"use\" is {usage}, not \"sig\""));
        }
    }
    if let Some(ops) = jwk.get("key_ops") {
        let verify = ops
            .as_array()
            .is_some_and(|ops| ops.iter().any(|op| op.as_str() == Some("verify")));
        if !verify {
            return Err("\"key_ops\" has no \"verify\"".into());
        }
    }
    let alg = match jwk.get("alg") {
        None => None,
        Some(alg) => match alg.as_str().and_then(Algorithm::from_name) {
            Some(alg) => Some(alg),
            None => {
                return Err(format!(
                    "\"alg\" {alg} is not a signature algorithm we verify"
                ))
            }
        },
    };
    let kid = match jwk.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err("\"kid\" is not a string".into()),
    };
    let key = material(jwk)?;
    if let Some(alg) = alg {
        if !key.kind().fits(alg) {
            return Err(format!("\"alg\" {alg} does not fit a {:?} key", key.kind()));
        }
    }
    Ok(key.with_jwk_fields(kid, alg))
}

/// The key material of a JWK by its `kty` (and `crv`).
fn material(jwk: &Map<String, Value>) -> Result<Key, String> {
    let kty = jwk.get("kty").and_then(Value::as_str).unwrap_or_default();
    let crv = jwk.get("crv").and_then(Value::as_str).unwrap_or_default();
    let key = match (kty, crv) {
        ("RSA", _) => Key::rsa(&member(jwk, "n")?, &member(jwk, "e")?),
        ("EC", "P-256" | "P-384") => {
            let kind = if crv == "P-256" {
                KeyKind::P256
            } else {
                KeyKind::P384
            };
            let (x, y) = (member(jwk, "x")?, member(jwk, "y")?);
            if x.len() != y.len() {
                return Err("\"x\" and \"y\" differ in length".into());
            }
            let mut point = Vec::with_capacity(1 + x.len() + y.len());
            point.push(0x04);
            point.extend(x);
            point.extend(y);
            Key::ec(kind, point)
        }
        ("OKP", "Ed25519") => Key::ed25519(member(jwk, "x")?),
        ("EC" | "OKP", _) => return Err(format!("curve {crv:?} is not supported")),
        _ => return Err(format!("key type {kty:?} is not supported")),
    };
    key.map_err(str::to_string)
}

/// A base64url member, decoded.
fn member(jwk: &Map<String, Value>, name: &str) -> Result<Vec<u8>, String> {
    let text = jwk
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no {name:?} string"))?;
    KEY_BASE64
        .decode(text)
        .map_err(|_| format!("{name:?} is not base64url"))
}
