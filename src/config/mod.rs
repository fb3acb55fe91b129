//! Configuration: the YAML schema, `${VAR}` expansion, units and validation.

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

/// How a route matches one request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderMatch {
    /// `"*"`: the header is present, whatever its value.
    Present,
    /// The header has exactly this value.
    Exact(String),
}
