//! JSON read strictly: an object that repeats a member name, at any depth,
//! is an error rather than its last value.
//!
//! RFC 8259 §4 leaves repeated names to the parser, and serde_json's own
//! `Value` keeps the last. Where a name decides something (a token's `sub`
//! or `alg`, a quota's `limit`), a text that names two values is refused,
//! so no reader can be shown one value while another acts on the other.
//! Names are compared as decoded: `"sub"` and `"\u0073ub"` are one name.
//! Otherwise the grammar is serde_json's (its depth limit included).

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Why a text is not strict JSON.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StrictJsonError {
    /// An object repeats this member name (as decoded).
    #[error("the member \"{0}\" is repeated")]
    Repeated(String),
    /// Not JSON at all.
    #[error("not JSON: {0}")]
    Syntax(serde_json::Error),
}

/// `bytes` as one JSON value; an error if any object in it repeats a
/// member name.
pub(crate) fn from_slice(bytes: &[u8]) -> Result<Value, StrictJsonError> {
    let repeated = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read = Strict {
        repeated: &repeated,
    }
    .deserialize(&mut de)
    .and_then(|value| de.end().map(|()| value));
    read.map_err(|e| match repeated.take() {
        Some(name) => StrictJsonError::Repeated(name),
        None => StrictJsonError::Syntax(e),
    })
}

/// Reads one value, noting the first repeated name it meets in
/// `repeated` (serde's error type carries only text).
#[derive(Clone, Copy)]
struct Strict<'a> {
    repeated: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        // serde_json never hands over a number that is not finite.
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if members.contains_key(&name) {
                let message = format!("the member \"{name}\" is repeated");
                *self.repeated.borrow_mut() = Some(name);
                return Err(serde::de::Error::custom(message));
            }
            let value = map.next_value_seed(self)?;
            members.insert(name, value);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn repeated(text: &str) -> Option<String> {
        match from_slice(text.as_bytes()) {
            Err(StrictJsonError::Repeated(name)) => Some(name),
            _ => None,
        }
    }

    #[test]
    fn reads_what_serde_json_reads() {
        let texts = [
            r#"{"a": 1, "b": [true, null, -2, 3.5, "x"], "c": {"d": {}}}"#,
            r#"[{"a": 1}, {"a": 2}]"#,
            r#""\u00e9\ud83d\ude00""#,
            "18446744073709551615",
            "-9223372036854775808",
            "1e308",
            " {} ",
        ];
        for text in texts {
            let strict = from_slice(text.as_bytes()).unwrap();
            let loose: Value = serde_json::from_str(text).unwrap();
            assert_eq!(strict, loose, "{text}");
        }
    }

    #[test]
    fn a_repeated_member_anywhere_is_refused() {
        assert_eq!(repeated(r#"{"a": 1, "a": 1}"#).as_deref(), Some("a"));
        assert_eq!(
            repeated(r#"{"x": [{"k": {"a": 1, "b": 2, "a": 3}}]}"#).as_deref(),
            Some("a")
        );
        assert_eq!(repeated(r#"[{}, {"": 1, "": 2}]"#).as_deref(), Some(""));
        // Compared as decoded.
        assert_eq!(
            repeated(r#"{"sub": 1, "\u0073ub": 2}"#).as_deref(),
            Some("sub")
        );
        assert_eq!(repeated(r#"{"\/": 1, "/": 2}"#).as_deref(), Some("/"));
        // The same name in two objects is no repetition.
        assert!(from_slice(br#"{"a": {"a": {"a": 1}}, "b": [{"a": 1}, {"a": 2}]}"#).is_ok());
        // Names that differ only in case differ.
        assert!(from_slice(br#"{"Sub": 1, "sub": 2}"#).is_ok());
    }

    #[test]
    fn syntax_errors_stay_syntax_errors() {
        for bad in [
            "",
            "{",
            r#"{"a": 1,}"#,
            "{} {}",
            "[1] x",
            r#"{"a" 1}"#,
            "NaN",
        ] {
            assert!(
                matches!(from_slice(bad.as_bytes()), Err(StrictJsonError::Syntax(_))),
                "{bad:?}"
            );
        }
        // serde_json's depth limit holds: no stack overflow.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            from_slice(deep.as_bytes()),
            Err(StrictJsonError::Syntax(_))
        ));
        let nested = format!("{}1{}", r#"{"a":"#.repeat(200), "}".repeat(200));
        assert!(from_slice(nested.as_bytes()).is_err());
        assert_eq!(from_slice(b"{\"a\":[]}").unwrap(), json!({"a": []}));
    }
}
