//! Configuration: the YAML schema, `${VAR}` expansion, units and validation.
//!
//! [`parse`] (or [`load`]) is the one way in: it expands `${VAR}` references,
//! deserialises the text into raw serde types (unknown fields rejected, bad
//! units caught with their line and field path), then validates them into the
//! typed [`Config`] with defaults applied and names resolved. Errors are one
//! [`ConfigError`] naming the file, line, column and field path; warnings
//! (e.g. a route shadowed by an earlier one) come back in [`Loaded`].
//!
//! Choices this module makes:
//!
//! - Upstream, limit and route names are made of ASCII letters, digits, `_`,
//!   `-` and `.`: they appear in metrics labels, headers and admin URLs.
//! - `${...}` is not expanded inside comments; `$$` is left alone and keeps
//!   the `${` after it literal (see [`expand`](self) rules in the source).
//! - Listeners that would collide when bound (same port, same or wildcard
//!   address; port 0 excepted) are errors, and the admin listener may not
//!   share a traffic listener's address.
//! - `match.path`/`exact` must be in normalised form, or they could never
//!   match; `regex` is compiled anchored (`\A(?:...)\z`), so it must match
//!   the whole normalised path, as docs/configuration/routes.md says.
//! - `respond.status` is 200..=599, `limit_response.status` 400..=599.

mod calendar;
mod consumers;
mod cost;
mod error;
mod expand;
mod model;
mod per_key;
mod positions;
mod raw;
mod shadow;
pub mod template;
#[cfg(test)]
mod tests;
pub mod units;
mod validate;

use std::path::Path;

use sha2::{Digest, Sha256};

pub use calendar::*;
pub use consumers::*;
pub use cost::*;
pub use error::{ConfigError, Location};
pub use model::*;
pub use per_key::*;
pub use shadow::warnings_for_shadowed_routes;
pub use template::Template;

use positions::Positions;

/// A parsed, valid config with what else `tollgate check` reports.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The validated configuration.
    pub config: Config,
    /// Things that are valid but probably not meant (shadowed routes, unused
    /// upstreams, `on_error: local` with the memory store).
    pub warnings: Vec<String>,
    /// Lowercase hex SHA-256 of the file's bytes before `${VAR}` expansion.
    pub sha256: String,
    /// The text it was read from, to point at a field later.
    pub source: Source,
}

/// A config's text and where each field sits in it, kept after parsing so
/// that errors found later (an address that cannot be bound) name the
/// file, line and column too.
#[derive(Debug, Clone)]
pub struct Source {
    file: String,
    text: String,
    positions: Positions,
}

impl Source {
    /// Where `field` sits (or its nearest ancestor that has a position).
    pub fn locate(&self, field: &str) -> Location {
        let pos = self.positions.lookup(field);
        let line = pos.and_then(|(line, _)| self.text.lines().nth(line - 1));
        Location {
            file: self.file.clone(),
            line: pos.map(|p| p.0),
            column: pos.map(|p| p.1),
            field: field.to_owned(),
            variables: line.map(expand::variables).unwrap_or_default(),
        }
    }
}

/// Parses and validates config text. `file` names the file in error
/// messages; no file is read.
pub fn parse(text: &str, file: &str) -> Result<Loaded, ConfigError> {
    parse_with_env(text, file, &|name| std::env::var(name).ok())
}

/// Reads the file, then [`parse`]s it. An unreadable or non-UTF-8 file is a
/// `ConfigError` naming it.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path)
        .map_err(|err| ConfigError::file(&file, format!("cannot read the config file: {err}")))?;
    let text = String::from_utf8(bytes).map_err(|err| {
        ConfigError::file(
            &file,
            format!(
                "the config file is not valid UTF-8 (at byte {})",
                err.utf8_error().valid_up_to()
            ),
        )
    })?;
    parse(&text, &file)
}

/// [`parse`] with an explicit environment, for tests.
pub(crate) fn parse_with_env(
    text: &str,
    file: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Loaded, ConfigError> {
    let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
    let expanded = expand::expand(text, env);
    if let Some(problem) = expanded.problems.first() {
        let positions = Positions::build(&expanded.text);
        let field = positions
            .path_at((problem.line, problem.expanded_column))
            .unwrap_or("")
            .to_owned();
        return Err(ConfigError {
            file: file.to_owned(),
            line: Some(problem.line),
            column: Some(problem.column),
            field,
            message: problem.message.clone(),
        });
    }
    let raw: raw::RawConfig =
        serde_yaml::from_str(&expanded.text).map_err(|err| ConfigError::from_yaml(file, &err))?;
    let positions = Positions::build(&expanded.text);
    let (config, mut warnings) = validate::validate(raw, file, &positions)?;
    warnings.extend(warnings_for_shadowed_routes(&config.routes));
    Ok(Loaded {
        config,
        warnings,
        sha256,
        source: Source {
            file: file.to_owned(),
            text: text.to_owned(),
            positions,
        },
    })
}

/// How a route matches the request path (already normalised).
#[derive(Debug, Clone)]
pub enum PathMatch {
    /// No path matcher: every path.
    Any,
    /// A prefix on a segment boundary (`/users` matches `/users`, `/users/`,
    /// `/users/7`, not `/usersx`); `/` matches everything.
    Prefix(String),
    /// The whole path.
    Exact(String),
    /// A regex matched against the whole normalised path.
    Regex(regex::Regex),
}

impl PathMatch {
    /// A route's `regex:`, compiled so that it must match the whole path
    /// (`\A(?:pattern)\z`), as docs/configuration/routes.md says.
    pub fn regex(pattern: &str) -> Result<PathMatch, regex::Error> {
        regex::Regex::new(&format!(r"\A(?:{pattern})\z")).map(PathMatch::Regex)
    }
}

/// How a route matches one request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderMatch {
    /// `"*"`: the header is present, whatever its value.
    Present,
    /// The header has exactly this value.
    Exact(String),
}
