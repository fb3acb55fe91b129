//! The one error type of config loading, and its conversion from YAML errors.

use std::fmt;

/// Why a config file was rejected: where (file, line, column, field path) and
/// what to fix.
///
/// Displayed on one line, e.g.
/// `gateway.yaml:12:5: routes[2].limits[0].rate: expected "<n>/<period>", got "10 per s"`;
/// `:line:column` is left out when unknown and `field: ` when the error is not
/// about one field (a YAML syntax error, an unreadable file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {}{message}", Position(*.line, *.column), FieldPrefix(.field))]
pub struct ConfigError {
    /// The file as it was named to `parse` or `load`.
    pub file: String,
    /// 1-based line of the offending value, when known.
    pub line: Option<usize>,
    /// 1-based column of the offending value, when known.
    pub column: Option<usize>,
    /// Path of the offending field, e.g. `routes[2].limits[0].rate`; may be empty.
    pub field: String,
    /// What is wrong, and where it helps, how to fix it.
    pub message: String,
}

/// Where a field sits in the config file, for errors found after parsing
/// (an address that cannot be bound): displayed `file:line:column: field`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file as it was named to `parse` or `load`.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The field path, e.g. `server.listen[0]`.
    pub field: String,
    /// The environment variables the field's line reads (`${VAR}`), so an
    /// error can say which one to change.
    pub variables: Vec<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}: {}",
            self.file,
            Position(self.line, self.column),
            self.field
        )
    }
}

/// `:line:column`, or nothing when the position is unknown.
struct Position(Option<usize>, Option<usize>);

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Some(line), Some(column)) => write!(f, ":{line}:{column}"),
            (Some(line), None) => write!(f, ":{line}"),
            _ => Ok(()),
        }
    }
}

/// `field: `, or nothing when the field is empty.
struct FieldPrefix<'a>(&'a str);

impl fmt::Display for FieldPrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "{}: ", self.0)
        }
    }
}

impl ConfigError {
    /// An error about the whole file (unreadable, not UTF-8).
    pub(crate) fn file(file: &str, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_owned(),
            line: None,
            column: None,
            field: String::new(),
            message: message.into(),
        }
    }

    /// Splits a yaml_serde error, displayed as `path: message at line L column C`,
    /// into its parts. yaml_serde keeps the path private, so it is read back from
    /// the text; a path never contains whitespace, the messages that start
    /// without one (`invalid type: ...`) do.
    pub(crate) fn from_yaml(file: &str, err: &serde_yaml::Error) -> Self {
        let location = err.location();
        let mut text = err.to_string();
        if let Some(loc) = &location {
            let suffix = format!(" at line {} column {}", loc.line(), loc.column());
            if let Some(found) = text.rfind(&suffix) {
                text.replace_range(found..found + suffix.len(), "");
            }
        }
        let (field, message) = split_path(&text);
        ConfigError {
            file: file.to_owned(),
            line: location.as_ref().map(|l| l.line()),
            column: location.as_ref().map(|l| l.column()),
            field: field.to_owned(),
            message: in_plain_words(message, !field.is_empty()),
        }
    }
}

/// serde's `invalid type: integer `5`, expected u64` in the operator's
/// words: `expected a whole number, got 5`; a mapping expected where
/// something else is found in a `nested` block adds a hint about
/// indentation, the usual cause.
fn in_plain_words(message: &str, nested: bool) -> String {
    let Some(rest) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
    else {
        return message.to_owned();
    };
    let Some((got, expected)) = rest.rsplit_once(", expected ") else {
        return message.to_owned();
    };
    let got = match got {
        "unit value" => "nothing".to_owned(),
        "sequence" => "a list".to_owned(),
        "map" => "a mapping".to_owned(),
        other => match other.split_once(' ') {
            // `integer `5``, `floating point `1.5``, `boolean `true``.
            Some((_, v)) if v.starts_with('`') => v.trim_matches('`').to_owned(),
            Some(("floating", v)) => v.trim_start_matches("point ").trim_matches('`').to_owned(),
            // `string "x"`.
            Some(("string", v)) => v.to_owned(),
            _ => other.to_owned(),
        },
    };
    let expected = match expected {
        "u8" => "a whole number from 0 to 255",
        "u16" => "a whole number from 0 to 65535",
        "u32" => "a whole number from 0 to 4294967295",
        "u64" | "usize" => "a whole number (0 or more)",
        "a sequence" => "a list",
        other => other,
    };
    let hint = if nested && expected.starts_with("a mapping with fields") {
        " (is the block indented under its name?)"
    } else {
        ""
    };
    format!("expected {expected}, got {got}{hint}")
}

/// Splits `path: message` into its parts; `("", text)` when the text does not
/// start with a path.
pub(crate) fn split_path(text: &str) -> (&str, &str) {
    match text.split_once(": ") {
        Some((path, message))
            if !path.is_empty()
                && !path.chars().any(char::is_whitespace)
                && looks_like_path(path) =>
        {
            (path, message)
        }
        _ => ("", text),
    }
}

/// Paths are made of names, `.` and `[index]`.
fn looks_like_path(path: &str) -> bool {
    path.chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-.[]?".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(line: Option<usize>, field: &str) -> ConfigError {
        ConfigError {
            file: "gateway.yaml".into(),
            line,
            column: line.map(|_| 5),
            field: field.into(),
            message: "expected \"<n>/<period>\", got \"10 per s\"".into(),
        }
    }

    #[test]
    fn display_with_everything() {
        assert_eq!(
            error(Some(12), "routes[2].limits[0].rate").to_string(),
            "gateway.yaml:12:5: routes[2].limits[0].rate: expected \"<n>/<period>\", got \"10 per s\""
        );
    }

    #[test]
    fn display_without_position_or_field() {
        assert_eq!(
            error(None, "routes[2].limits[0].rate").to_string(),
            "gateway.yaml: routes[2].limits[0].rate: expected \"<n>/<period>\", got \"10 per s\""
        );
        assert_eq!(
            error(Some(3), "").to_string(),
            "gateway.yaml:3:5: expected \"<n>/<period>\", got \"10 per s\""
        );
    }

    #[test]
    fn serde_words_become_the_operators() {
        for (serde, plain) in [
            (
                "invalid type: integer `5`, expected a mapping with fields algorithm, key",
                "expected a mapping with fields algorithm, key, got 5 (is the block indented under its name?)",
            ),
            (
                "invalid type: string \"lots\", expected usize",
                "expected a whole number (0 or more), got \"lots\"",
            ),
            (
                "invalid value: integer `-1`, expected u8",
                "expected a whole number from 0 to 255, got -1",
            ),
            (
                "invalid type: floating point `1.5`, expected u32",
                "expected a whole number from 0 to 4294967295, got 1.5",
            ),
            ("invalid type: map, expected a sequence", "expected a list, got a mapping"),
            (
                "invalid type: unit value, expected a mapping with fields url, weight",
                "expected a mapping with fields url, weight, got nothing (is the block indented under its name?)",
            ),
            ("missing field `algorithm`", "missing field `algorithm`"),
        ] {
            assert_eq!(in_plain_words(serde, true), plain);
        }
    }

    #[test]
    fn split_path_only_takes_paths() {
        assert_eq!(split_path("a.b[1]: oops: x"), ("a.b[1]", "oops: x"));
        assert_eq!(
            split_path("invalid type: sequence, expected struct"),
            ("", "invalid type: sequence, expected struct")
        );
        assert_eq!(split_path("no colon here"), ("", "no colon here"));
    }
}
