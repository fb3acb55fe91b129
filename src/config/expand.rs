//! `${VAR}` and `${VAR:-default}` expansion on the raw config text.
//!
//! Expansion happens on the text before YAML parsing, so an expanded value is
//! typed by YAML like a written one (`limit: ${LIMIT:-5}` is a number).
//! Rules:
//!
//! - `${NAME}` is the variable's value; unset is an error (reported with the
//!   line and the field it sits in).
//! - `${NAME:-default}` is the default when the variable is unset or empty,
//!   as in the shell.
//! - `$$` is left alone and protects what follows it: `$${NAME}` stays as
//!   written. Any other `$` is literal.
//! - Comments are not expanded: a `#` at the start of a line or after
//!   whitespace, outside quotes and block scalars, starts one.
//! - The value is inserted verbatim: quote the reference (`"${TOKEN}"`) when
//!   the value may hold YAML syntax such as `: ` or `#`.

/// A `${...}` that could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// What is wrong, ready for a `ConfigError` message.
    pub message: String,
    /// 1-based line in the file.
    pub line: usize,
    /// 1-based column of the `$` in the file.
    pub column: usize,
    /// 1-based column of the `$` in the expanded text, to find the field.
    pub expanded_column: usize,
}

/// The text with every reference replaced, and the references that failed
/// (replaced by the variable's name, so the text still parses and the field
/// holding the reference can be found).
#[derive(Debug, Clone)]
pub(crate) struct Expanded {
    /// The expanded text.
    pub text: String,
    /// Failed references, in file order.
    pub problems: Vec<Problem>,
}

/// Quoting state carried from line to line (quoted scalars may span lines).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Single,
    Double,
}

/// The names of the variables `line` reads (`${NAME}`, `${NAME:-default}`),
/// in order; `$${NAME}` is not a reference. For error hints: "set NAME".
pub(crate) fn variables(line: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("${") {
        let escaped = rest[..at].ends_with('$');
        let after = &rest[at + 2..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !escaped && !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
        rest = after;
    }
    names
}

/// Expands `text` with `env` as the environment.
pub(crate) fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Expanded {
    if !text.contains("${") {
        return Expanded {
            text: text.to_owned(),
            problems: Vec::new(),
        };
    }
    let mut out = String::with_capacity(text.len());
    let mut problems = Vec::new();
    let mut quote = Quote::None;
    // Indentation of the line that opened a block scalar (`key: |`), while
    // inside one: its lines are content, never comments.
    let mut block_parent: Option<usize> = None;

    for (index, line) in text.split_inclusive('\n').enumerate() {
        let line_no = index + 1;
        let indent = line.len() - line.trim_start_matches(' ').len();
        if let Some(parent) = block_parent {
            if line.trim().is_empty() || indent > parent {
                expand_span(line, line_no, 0, env, &mut out, &mut problems);
                continue;
            }
            block_parent = None;
        }
        let content_end = scan_line(line, &mut quote);
        let (content, comment) = line.split_at(content_end);
        expand_span(content, line_no, 0, env, &mut out, &mut problems);
        out.push_str(comment);
        if quote == Quote::None && opens_block_scalar(content) {
            block_parent = Some(indent);
        }
    }
    Expanded {
        text: out,
        problems,
    }
}

/// Finds where the line's comment starts (or its end), updating the quoting
/// state. A quote opens a quoted scalar only where a scalar can start.
fn scan_line(line: &str, quote: &mut Quote) -> usize {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match *quote {
            Quote::Double => match c {
                b'\\' => i += 1,
                b'"' => *quote = Quote::None,
                _ => {}
            },
            Quote::Single => {
                if c == b'\'' {
                    if bytes.get(i + 1) == Some(&b'\'') {
                        i += 1;
                    } else {
                        *quote = Quote::None;
                    }
                }
            }
            Quote::None => {
                let at_token_start =
                    i == 0 || matches!(bytes[i - 1], b' ' | b'\t' | b'[' | b'{' | b',');
                match c {
                    b'#' if i == 0 || matches!(bytes[i - 1], b' ' | b'\t') => return i,
                    b'"' if at_token_start => *quote = Quote::Double,
                    b'\'' if at_token_start => *quote = Quote::Single,
                    _ => {}
                }
            }
        }
        i += 1;
    }
    line.len()
}

/// Whether a line (without its comment) ends with a block scalar indicator:
/// `key: |`, `- >-`, `key: |2+`.
fn opens_block_scalar(content: &str) -> bool {
    let trimmed = content.trim_end();
    let indicator_start = trimmed.rfind(['|', '>']);
    let Some(start) = indicator_start else {
        return false;
    };
    let rest = &trimmed[start + 1..];
    let valid_rest = rest.len() <= 2
        && rest
            .bytes()
            .all(|b| b == b'+' || b == b'-' || b.is_ascii_digit());
    let before = trimmed[..start].trim_end();
    valid_rest && (before.is_empty() || before.ends_with(':') || before.ends_with('-'))
}

/// Expands the references in `span` into `out`.
fn expand_span(
    span: &str,
    line: usize,
    column_offset: usize,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut String,
    problems: &mut Vec<Problem>,
) {
    // Columns in the expanded line, for finding the field later.
    let line_start_in_out = out.rfind('\n').map_or(0, |n| n + 1);
    let mut rest = span;
    let mut consumed = column_offset;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let column = consumed + span_chars(&rest[..dollar]) + 1;
        let after = &rest[dollar + 1..];
        if let Some(protected) = after.strip_prefix('$') {
            // `$$` is left alone, and so is what it protects.
            out.push_str("$$");
            consumed = column + 1;
            rest = protected;
            continue;
        }
        if !after.starts_with('{') {
            out.push('$');
            consumed = column;
            rest = after;
            continue;
        }
        let expanded_column = out[line_start_in_out..].chars().count() + 1;
        let body = &after[1..];
        let Some(close) = body.find('}') else {
            problems.push(Problem {
                message: "unterminated \"${\": write ${NAME} or ${NAME:-default} (\"$${\" keeps it literal)"
                    .to_owned(),
                line,
                column,
                expanded_column,
            });
            out.push_str(&rest[dollar..]);
            return;
        };
        let reference = &body[..close];
        let (name, default) = match reference.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (reference, None),
        };
        let written = &rest[dollar..dollar + 2 + close + 1];
        if !valid_name(name) {
            problems.push(Problem {
                message: format!(
                    "\"{written}\" is not a variable reference: write ${{NAME}} or ${{NAME:-default}}, NAME made of letters, digits and _"
                ),
                line,
                column,
                expanded_column,
            });
            out.push_str(name);
        } else {
            match (
                env(name).filter(|v| !v.is_empty() || default.is_none()),
                default,
            ) {
                (Some(value), _) => out.push_str(&value),
                (None, Some(default)) => out.push_str(default),
                (None, None) => {
                    problems.push(Problem {
                        message: format!(
                            "environment variable {name} is not set (write ${{{name}:-default}} to give a default)"
                        ),
                        line,
                        column,
                        expanded_column,
                    });
                    out.push_str(name);
                }
            }
        }
        consumed = column + span_chars(written) - 1;
        rest = &body[close + 1..];
    }
    out.push_str(rest);
}

/// Columns are counted in characters.
fn span_chars(s: &str) -> usize {
    s.chars().count()
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("db.internal".into()),
            "EMPTY" => Some(String::new()),
            "PORT" => Some("6380".into()),
            _ => None,
        }
    }

    fn run(text: &str) -> Expanded {
        expand(text, &env)
    }

    #[test]
    fn variables_of_a_line() {
        assert_eq!(
            variables(
                r#"  listen: ["${TOLLGATE_LISTEN:-127.0.0.1:8080}", "${B}", "$${C}", "${B}"]"#
            ),
            ["TOLLGATE_LISTEN", "B"]
        );
        assert!(variables("plain: $x").is_empty());
    }

    #[test]
    fn plain_text_is_untouched() {
        let text = "a: $5\nb: cost $$ and $\n";
        assert_eq!(run(text).text, text);
        assert!(run(text).problems.is_empty());
    }

    #[test]
    fn variables_and_defaults() {
        let e = run("url: redis://${HOST}:${PORT}/0\nlimit: ${LIMIT:-5}\ntoken: \"${EMPTY:-}\"\nx: ${EMPTY:-d}\ny: ${EMPTY}\n");
        assert!(e.problems.is_empty(), "{:?}", e.problems);
        assert_eq!(
            e.text,
            "url: redis://db.internal:6380/0\nlimit: 5\ntoken: \"\"\nx: d\ny: \n"
        );
    }

    #[test]
    fn default_may_hold_colons_and_slashes() {
        let e = run("url: ${REDIS_URL:-redis://127.0.0.1:6379/0}\n");
        assert_eq!(e.text, "url: redis://127.0.0.1:6379/0\n");
    }

    #[test]
    fn dollar_dollar_protects() {
        let e = run("a: $${HOST} and ${HOST}\n");
        assert!(e.problems.is_empty());
        assert_eq!(e.text, "a: $${HOST} and db.internal\n");
    }

    #[test]
    fn unset_variable_is_a_problem_with_its_position() {
        let e = run("a: 1\nb: \"x ${NOPE}\"\n");
        assert_eq!(
            e.problems,
            vec![Problem {
                message: "environment variable NOPE is not set (write ${NOPE:-default} to give a default)".into(),
                line: 2,
                column: 7,
                expanded_column: 7,
            }]
        );
        assert_eq!(e.text, "a: 1\nb: \"x NOPE\"\n");
    }

    #[test]
    fn columns_in_file_and_expanded_text_differ_after_an_expansion() {
        let e = run("a: ${HOST}${NOPE}\n");
        assert_eq!(e.problems.len(), 1);
        assert_eq!(e.problems[0].column, 11);
        assert_eq!(e.problems[0].expanded_column, 15);
    }

    #[test]
    fn malformed_references() {
        let e = run("a: ${HOST\n");
        assert_eq!(e.problems.len(), 1);
        assert!(e.problems[0].message.starts_with("unterminated"));
        let e = run("a: ${1X}\n");
        assert_eq!(
            e.problems[0].message,
            "\"${1X}\" is not a variable reference: write ${NAME} or ${NAME:-default}, NAME made of letters, digits and _"
        );
    }

    #[test]
    fn comments_are_not_expanded() {
        let text =
            "# set ${NOPE} first\na: 1 # or ${NOPE}\nb: \"# ${HOST}\"\nc: 'it''s # ${HOST}'\n";
        let e = run(text);
        assert!(e.problems.is_empty(), "{:?}", e.problems);
        assert_eq!(
            e.text,
            "# set ${NOPE} first\na: 1 # or ${NOPE}\nb: \"# db.internal\"\nc: 'it''s # db.internal'\n"
        );
    }

    #[test]
    fn block_scalars_are_content() {
        let text = "body: |\n  # ${HOST}\n  x\nnext: 1 # ${NOPE}\n";
        let e = run(text);
        assert!(e.problems.is_empty(), "{:?}", e.problems);
        assert_eq!(e.text, "body: |\n  # db.internal\n  x\nnext: 1 # ${NOPE}\n");
    }

    #[test]
    fn multi_line_double_quotes() {
        let text = "a: \"one\n  # ${HOST}\"\n";
        assert_eq!(run(text).text, "a: \"one\n  # db.internal\"\n");
    }
}
