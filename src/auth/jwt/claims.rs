//! The registered claims a token must satisfy (RFC 7519 §4.1), and lookup
//! of nested claims by a dotted path.

use serde_json::{Map, Value};

use super::{JwtError, Validation};

/// Check `exp` (required), `nbf`, `iat`, `iss` and `aud` at `now` (Unix
/// seconds) with the leeway of `v`; `exp` when they pass.
pub(crate) fn validate(
    claims: &Map<String, Value>,
    v: &Validation,
    now: u64,
) -> Result<u64, JwtError> {
    let leeway = v.leeway.as_secs();
    let exp = numeric(claims, "exp")?.ok_or(JwtError::MissingExp)?;
    if now >= exp.saturating_add(leeway) {
        return Err(JwtError::Expired);
    }
    if let Some(nbf) = numeric(claims, "nbf")? {
        if now.saturating_add(leeway) < nbf {
            return Err(JwtError::NotYetValid);
        }
    }
    if let Some(iat) = numeric(claims, "iat")? {
        if iat > now.saturating_add(leeway) {
            return Err(JwtError::IssuedInFuture);
        }
    }
    if claims.get("iss").and_then(Value::as_str) != Some(v.issuer.as_str()) {
        return Err(JwtError::Issuer);
    }
    if !v.audiences.is_empty() && !audience_matches(claims.get("aud"), &v.audiences) {
        return Err(JwtError::Audience);
    }
    Ok(exp)
}

/// A NumericDate claim in whole seconds (a fraction is dropped, a negative
/// date is 0); `None` when absent, an error when not a number.
fn numeric(claims: &Map<String, Value>, name: &'static str) -> Result<Option<u64>, JwtError> {
    let Some(value) = claims.get(name) else {
        return Ok(None);
    };
    let malformed = JwtError::Malformed(match name {
        "exp" => "\"exp\" is not a number",
        "nbf" => "\"nbf\" is not a number",
        _ => "\"iat\" is not a number",
    });
    match value.as_u64() {
        Some(n) => Ok(Some(n)),
        None => match value.as_f64() {
            // `as` saturates: huge dates become u64::MAX, negative ones 0.
            Some(f) if f.is_finite() => Ok(Some(f as u64)),
            _ => Err(malformed),
        },
    }
}

/// Whether `aud` (a string, or an array of strings) holds one of `accepted`.
fn audience_matches(aud: Option<&Value>, accepted: &[String]) -> bool {
    match aud {
        Some(Value::String(one)) => accepted.contains(one),
        Some(Value::Array(many)) => many
            .iter()
            .filter_map(Value::as_str)
            .any(|a| accepted.iter().any(|ok| ok == a)),
        _ => false,
    }
}

/// The claim at `path`: a top-level name, or names joined by dots into
/// nested objects (`org.id` is `{"org": {"id": ...}}`). A name may itself
/// contain dots (`https://example.com/org`, as some issuers namespace
/// claims): at each level the whole remaining path is tried as a name
/// first, then each split at a dot, left to right.
pub fn claim<'a>(claims: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    if let Some(value) = claims.get(path) {
        return Some(value);
    }
    path.match_indices('.').find_map(|(at, _)| {
        let inner = claims.get(&path[..at])?.as_object()?;
        claim(inner, &path[at + 1..])
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn validation() -> Validation {
        Validation {
            issuer: "https://issuer.example/".into(),
            audiences: vec!["api".into(), "admin".into()],
            algorithms: vec![],
            leeway: Duration::from_secs(30),
        }
    }

    fn claims(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn check(value: Value, now: u64) -> Result<u64, JwtError> {
        validate(&claims(value), &validation(), now)
    }

    const ISS: &str = "https://issuer.example/";

    #[test]
    fn exp_is_required_numeric_and_has_leeway() {
        let at = |exp: Value| json!({"iss": ISS, "aud": "api", "exp": exp});
        assert_eq!(check(at(json!(1000)), 500), Ok(1000));
        // Within the leeway after exp: still valid; at exp + leeway: not.
        assert_eq!(check(at(json!(1000)), 1029), Ok(1000));
        assert_eq!(check(at(json!(1000)), 1030), Err(JwtError::Expired));
        assert_eq!(check(at(json!(1000.9)), 999), Ok(1000));
        assert_eq!(check(at(json!(-5)), 30), Err(JwtError::Expired));
        assert!(matches!(
            check(at(json!("1000")), 500),
            Err(JwtError::Malformed(_))
        ));
        assert_eq!(
            check(json!({"iss": ISS, "aud": "api"}), 500),
            Err(JwtError::MissingExp)
        );
    }

    #[test]
    fn nbf_and_iat_have_leeway_both_ways() {
        let with = |name: &str, t: u64| {
            let mut c = json!({"iss": ISS, "aud": "api", "exp": 10_000});
            c[name] = json!(t);
            c
        };
        // nbf 30 s ahead: within the leeway; 31 s: not yet valid.
        assert_eq!(check(with("nbf", 1030), 1000), Ok(10_000));
        assert_eq!(check(with("nbf", 1031), 1000), Err(JwtError::NotYetValid));
        assert_eq!(check(with("iat", 1030), 1000), Ok(10_000));
        assert_eq!(
            check(with("iat", 1031), 1000),
            Err(JwtError::IssuedInFuture)
        );
        assert!(check(with("iat", 0), 1000).is_ok());
    }

    #[test]
    fn issuer_and_audience() {
        let base = |iss: &str, aud: Value| json!({"iss": iss, "aud": aud, "exp": 10_000});
        assert_eq!(
            check(base("https://other/", json!("api")), 0),
            Err(JwtError::Issuer)
        );
        assert_eq!(
            check(json!({"aud": "api", "exp": 10_000}), 0),
            Err(JwtError::Issuer)
        );
        assert_eq!(check(base(ISS, json!("web")), 0), Err(JwtError::Audience));
        assert_eq!(check(base(ISS, json!(["web", "admin"])), 0), Ok(10_000));
        assert_eq!(
            check(base(ISS, json!(["web", 7])), 0),
            Err(JwtError::Audience)
        );
        assert_eq!(
            check(json!({"iss": ISS, "exp": 10_000}), 0),
            Err(JwtError::Audience)
        );
        // No audiences configured: aud is not checked.
        let mut v = validation();
        v.audiences.clear();
        let c = claims(json!({"iss": ISS, "exp": 10_000}));
        assert_eq!(validate(&c, &v, 0), Ok(10_000));
    }

    #[test]
    fn nested_and_dotted_claim_names() {
        let c = claims(json!({
            "sub": "alice",
            "org": {"id": "acme", "plan": {"name": "gold"}},
            "https://example.com/tenant": "t1",
            "https://example.com/meta": {"plan": "silver"},
            "list": ["x"],
        }));
        assert_eq!(claim(&c, "sub"), Some(&json!("alice")));
        assert_eq!(claim(&c, "org.id"), Some(&json!("acme")));
        assert_eq!(claim(&c, "org.plan.name"), Some(&json!("gold")));
        assert_eq!(claim(&c, "https://example.com/tenant"), Some(&json!("t1")));
        assert_eq!(
            claim(&c, "https://example.com/meta.plan"),
            Some(&json!("silver"))
        );
        assert_eq!(claim(&c, "org.missing"), None);
        assert_eq!(claim(&c, "sub.x"), None);
        assert_eq!(claim(&c, "list.0"), None);
    }
}
