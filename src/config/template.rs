//! Rejection messages with placeholders (docs/configuration/limit-response.md `limit_response.body`
//! and `locked_body`): `{error}`, `{limit}`, `{retry_after}` and
//! `{request_id}` are replaced when a request is rejected.
//!
//! A placeholder is `{`, a name of lowercase letters and `_`, and `}`; any
//! other `{` is text, so a JSON body needs no escaping
//! (`{"message": "slow down, {limit}"}`). A name that is not one of the
//! four is a config error, so a typo never reaches a client.

use std::fmt::Write as _;

/// A value a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `{error}`: `rate_limited` or `locked_out`.
    Error,
    /// `{limit}`: the name of the limit that rejected the request.
    Limit,
    /// `{retry_after}`: whole seconds until the request could pass.
    RetryAfter,
    /// `{request_id}`: the request's id (`X-Request-Id`).
    RequestId,
}

/// The placeholder names, as written in a template.
const FIELDS: [(&str, Field); 4] = [
    ("error", Field::Error),
    ("limit", Field::Limit),
    ("retry_after", Field::RetryAfter),
    ("request_id", Field::RequestId),
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(Field),
}

/// A message parsed once, at config load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

/// What the placeholders of one rejection stand for.
#[derive(Debug, Clone, Copy)]
pub struct Values<'a> {
    /// `{error}`.
    pub error: &'a str,
    /// `{limit}`.
    pub limit: &'a str,
    /// `{retry_after}`.
    pub retry_after: u64,
    /// `{request_id}`.
    pub request_id: &'a str,
}

impl Template {
    /// Parse `text`; the error names an unknown placeholder and the ones
    /// there are.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            literal.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let name_len = after
                .bytes()
                .take_while(|b| b.is_ascii_lowercase() || *b == b'_')
                .count();
            if name_len == 0 || after.as_bytes().get(name_len) != Some(&b'}') {
                literal.push('{');
                rest = after;
                continue;
            }
            let name = &after[..name_len];
            let field = FIELDS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, f)| *f)
                .ok_or_else(|| {
                    format!(
                        "unknown placeholder {{{name}}} (there are {})",
                        FIELDS
                            .iter()
                            .map(|(n, _)| format!("{{{n}}}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Field(field));
            rest = &after[name_len + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template { pieces })
    }

    /// The message for `values`; with `json`, the values are escaped to
    /// sit inside a JSON string (the template's own text is left as it is).
    pub fn render(&self, values: &Values<'_>, json: bool) -> String {
        let mut out = String::with_capacity(64);
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Field(Field::RetryAfter) => {
                    let _ = write!(out, "{}", values.retry_after);
                }
                Piece::Field(field) => {
                    let value = match field {
                        Field::Error => values.error,
                        Field::Limit => values.limit,
                        _ => values.request_id,
                    };
                    if json {
                        push_json_escaped(&mut out, value);
                    } else {
                        out.push_str(value);
                    }
                }
            }
        }
        out
    }
}

/// `value` escaped for the inside of a JSON string (RFC 8259 §7).
fn push_json_escaped(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUES: Values<'static> = Values {
        error: "rate_limited",
        limit: "per_client",
        retry_after: 7,
        request_id: "a\"b\\c",
    };

    #[test]
    fn placeholders_are_replaced_and_other_braces_kept() {
        let t = Template::parse("Too many requests, retry in {retry_after}s ({limit})").unwrap();
        assert_eq!(
            t.render(&VALUES, false),
            "Too many requests, retry in 7s (per_client)"
        );
        let t = Template::parse(r#"{"e": "{error}", "id": "{request_id}", "x": { }, "{": "{X}"}"#)
            .unwrap();
        assert_eq!(
            t.render(&VALUES, true),
            r#"{"e": "rate_limited", "id": "a\"b\\c", "x": { }, "{": "{X}"}"#
        );
        assert_eq!(t.render(&VALUES, false).matches("a\"b\\c").count(), 1);
        assert_eq!(Template::parse("").unwrap().render(&VALUES, false), "");
        assert_eq!(
            Template::parse("{{limit}}").unwrap().render(&VALUES, false),
            "{per_client}"
        );
    }

    #[test]
    fn an_unknown_placeholder_is_an_error() {
        assert_eq!(
            Template::parse("retry in {retry_afer}s"),
            Err("unknown placeholder {retry_afer} (there are {error}, {limit}, {retry_after}, {request_id})".into())
        );
    }
}
