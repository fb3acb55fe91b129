//! The documentation is held to the code and to itself.
//!
//! - **Links** (`links_resolve_inside_the_repository`): every link in every
//!   Markdown file of the repository (`[text](target)`, `![alt](target)`,
//!   `[ref]: target` and `<scheme:...>` autolinks, outside code blocks and
//!   code spans) is relative and resolves to a file or directory inside the
//!   repository; a `#fragment` into a Markdown file names one of its
//!   headings, by GitHub's anchor rules (lowercased; everything but letters,
//!   digits, spaces, `-` and `_` dropped; spaces become `-`; a repeated
//!   heading gets `-1`, `-2`, ...). Links with a scheme (`https:`,
//!   `mailto:`), absolute paths and paths that climb out of the repository
//!   fail: the documentation links nothing outside it. Skipped: `target/`,
//!   `node_modules/`, hidden directories, and the vendored crates' own files
//!   (`vendor/<crate>/`, kept as their authors published them).
//! - **Cited paths** (`cited_source_paths_exist`): in `lua/*.lua`, every
//!   `*.md` under `docs/`, and `ARCHITECTURE.md`, a cited path is a token
//!   written from the repository root that starts with one of its top-level
//!   directories (`src/`, `crates/`, `lua/`, `tests/`, `benches/`,
//!   `deploy/`, `fuzz/`, `examples/`, `vendor/`, `docs/`) followed by at
//!   least one more character of a path (letters, digits, `_`, `-`, `.`,
//!   `/`), not preceded by one of those characters or `:`, and ending at the
//!   last letter, digit or `_` (so a sentence's full stop and a placeholder
//!   such as `<target>` end it); and any token starting with `../`. The
//!   first must exist in the repository (a file or a directory); the second
//!   always fails, since it names something outside. Markdown link targets
//!   are left to the link check. Paths relative to another directory
//!   (`limit/engine.rs` in a diagram of `src/`) are not citations.
//! - **Config fields** (`every_config_field_is_documented`): the schema is
//!   read from the config parser itself. Every block of the file rejects
//!   unknown fields, and its error names the fields the block takes
//!   (`unknown field `__probe__`, expected one of `listen`, `tls`, ...`), so
//!   probing each block with an unknown field lists its fields, and probing
//!   each field with a nested mapping, a list of mappings or a mapping of
//!   named mappings finds the blocks below it. Each field's full path
//!   (`server.timeouts.header_read`, `upstreams.<name>.targets[].weight`,
//!   `routes[].match.path`) must be the start of a heading in a page of
//!   `docs/configuration/`, written as a code span (`` ### `server.listen` ``),
//!   and every such heading must name a field that exists. `routes[].limits[]`
//!   is documented as `limits.<name>` and `routes[].limit_response` as
//!   `server.limit_response`: each pair must take exactly the same fields.
//!   The test also holds each block's own list in its error for a value
//!   that is not a mapping (`expected a mapping with fields ...`, written by
//!   hand in the code) to the fields serde reports.
//! - **Example configs** (`example_configs_pass_tollgate_check`): every
//!   `examples/configs/*.yaml` (a config per guide) passes `tollgate check`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};

use regex::Regex;

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `path` relative to the root, with `/` separators, for messages.
fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Every file under `dir` whose name ends with `suffix`, sorted; skips the
/// directories no documentation lives in.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                let vendored_crate = path.parent().is_some_and(|p| p == root().join("vendor"));
                if !(name.starts_with('.')
                    || name == "target"
                    || name == "node_modules"
                    || vendored_crate)
                {
                    walk(&path, suffix, out);
                }
            } else if name.ends_with(suffix) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, suffix, &mut out);
    out.sort();
    out
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", shown(path)))
}

// ----- Markdown -----

/// The text of a Markdown file outside fenced code blocks, as blocks of
/// consecutive non-blank lines (a code span may be wrapped over lines), each
/// with the number of its first line.
fn prose_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut fence: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        if marker.len() >= 3 && marker.chars().all(|c| c == marker.chars().next().unwrap()) {
            match &fence {
                None => fence = Some(marker),
                Some(open) if marker.starts_with(open.as_str()) => fence = None,
                Some(_) => {}
            }
            blocks.extend(current.take());
            continue;
        }
        if fence.is_some() || line.trim().is_empty() {
            blocks.extend(current.take());
            continue;
        }
        match &mut current {
            Some((_, block)) => {
                block.push('\n');
                block.push_str(line);
            }
            None => current = Some((i + 1, line.to_owned())),
        }
    }
    blocks.extend(current);
    blocks
}

/// `text` with its code spans removed (a run of backticks to the next run
/// of the same length); an unclosed run is kept as text.
fn without_code_spans(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            let next = text[i..].find('`').map_or(text.len(), |n| i + n);
            out.push_str(&text[i..next]);
            i = next;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let mut j = i + run;
        let mut closed = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let other = bytes[j..].iter().take_while(|b| **b == b'`').count();
                if other == run {
                    closed = Some(j + other);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        match closed {
            Some(end) => {
                out.push(' ');
                i = end;
            }
            None => {
                out.push_str(&text[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// The link targets of a Markdown file, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let inline = Regex::new(r"\]\(\s*(<[^>]*>|[^)\s]*)").unwrap();
    let reference = Regex::new(r"(?m)^ {0,3}\[[^\]]+\]:\s+(\S+)").unwrap();
    let autolink = Regex::new(r"<([A-Za-z][A-Za-z0-9+.-]*:[^\s<>]+)>").unwrap();
    let mut out = Vec::new();
    for (first_line, block) in prose_blocks(text) {
        let prose = without_code_spans(&block);
        let line_of = |offset: usize| first_line + prose[..offset].matches('\n').count();
        for (re, group) in [(&inline, 1), (&reference, 1), (&autolink, 1)] {
            for caps in re.captures_iter(&prose) {
                let target = caps.get(group).unwrap();
                let text = target
                    .as_str()
                    .trim_start_matches('<')
                    .trim_end_matches('>');
                out.push((line_of(target.start()), text.to_owned()));
            }
        }
    }
    out
}

/// GitHub's anchor for a heading's text: the rendered text (code spans,
/// links and emphasis reduced to their words) lowercased, everything but
/// letters, digits, spaces, `-` and `_` dropped, spaces turned into `-`.
fn slug(heading: &str) -> String {
    let link = Regex::new(r"!?\[([^\]]*)\]\([^)]*\)").unwrap();
    let text = link.replace_all(heading, "$1");
    text.chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .flat_map(char::to_lowercase)
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The ATX headings of a Markdown file (outside code blocks): their text.
fn headings(text: &str) -> Vec<String> {
    let atx = Regex::new(r"^#{1,6}\s+(.*?)(?:\s+#+)?\s*$").unwrap();
    prose_blocks(text)
        .into_iter()
        .flat_map(|(_, block)| {
            block
                .lines()
                .filter_map(|line| atx.captures(line).map(|c| c[1].to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The anchors GitHub gives a Markdown file's headings (a repeated slug
/// gets `-1`, `-2`, ...), and the `id`/`name` of its HTML anchors.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for heading in headings(text) {
        let base = slug(&heading);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    let html = Regex::new(r#"<a\s+(?:name|id)="([^"]+)""#).unwrap();
    out.extend(html.captures_iter(text).map(|c| c[1].to_owned()));
    out
}

/// `base` joined with the relative `target`, `.` and `..` resolved;
/// `None` when it climbs above the repository's root.
fn resolve(base: &Path, target: &str) -> Option<PathBuf> {
    let mut path = base.strip_prefix(root()).ok()?.to_path_buf();
    for component in Path::new(target).components() {
        match component {
            Component::Normal(part) => path.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !path.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(root().join(path))
}

/// What is wrong with one link of `file`, if anything.
fn link_problem(file: &Path, target: &str) -> Option<String> {
    let scheme = Regex::new(r"^[A-Za-z][A-Za-z0-9+.-]*:").unwrap();
    if scheme.is_match(target) {
        return Some(
            "links outside the repository (the documentation links only its own files)".into(),
        );
    }
    if target.starts_with('/') {
        return Some("is absolute: write it relative to the file".into());
    }
    let (path, fragment) = match target.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (target, None),
    };
    let resolved = if path.is_empty() {
        file.to_path_buf()
    } else {
        match resolve(file.parent().expect("a file's directory"), path) {
            Some(resolved) => resolved,
            None => return Some("climbs out of the repository".into()),
        }
    };
    if !resolved.exists() {
        return Some(format!("{} does not exist", shown(&resolved)));
    }
    let fragment = fragment?;
    if resolved.extension().is_some_and(|e| e == "md") {
        let known = anchors(&read(&resolved));
        if !known.contains(fragment) {
            return Some(format!("{} has no heading #{fragment}", shown(&resolved)));
        }
    } else if !Regex::new(r"^L\d+(-L\d+)?$").unwrap().is_match(fragment) {
        return Some(format!(
            "#{fragment}: only Markdown files have headings (other files take #L<line>)"
        ));
    }
    None
}

#[test]
fn links_resolve_inside_the_repository() {
    let markdown = files(&root(), ".md");
    assert!(
        markdown.iter().any(|f| f.ends_with("docs/README.md")),
        "the walk found the documentation: {markdown:?}"
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &markdown {
        for (line, target) in links(&read(file)) {
            checked += 1;
            if let Some(problem) = link_problem(file, &target) {
                problems.push(format!("{}:{line}: ({target}) {problem}", shown(file)));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} links found: is the parser blind?"
    );
    assert!(problems.is_empty(), "bad links:\n{}", problems.join("\n"));
}

// ----- Cited paths -----

/// The paths `text` cites (see the module doc), with their line numbers.
fn cited_paths(text: &str) -> Vec<(usize, String)> {
    let link_target = Regex::new(r"\]\([^)]*\)").unwrap();
    let path = Regex::new(
        r"(?:^|[^A-Za-z0-9_./:-])((?:\.\./)+[A-Za-z0-9_./-]*|(?:src|crates|lua|tests|benches|deploy|fuzz|examples|vendor|docs)/[A-Za-z0-9_./-]*[A-Za-z0-9_])",
    )
    .unwrap();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = link_target.replace_all(line, "]()");
        for caps in path.captures_iter(&line) {
            out.push((i + 1, caps[1].to_owned()));
        }
    }
    out
}

#[test]
fn cited_source_paths_exist() {
    let mut sources = files(&root().join("lua"), ".lua");
    sources.extend(files(&root().join("docs"), ".md"));
    sources.push(root().join("ARCHITECTURE.md"));
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &sources {
        for (line, cited) in cited_paths(&read(file)) {
            checked += 1;
            if cited.starts_with("../") {
                problems.push(format!(
                    "{}:{line}: {cited} is outside the repository",
                    shown(file)
                ));
            } else if !root().join(&cited).exists() {
                problems.push(format!("{}:{line}: {cited} does not exist", shown(file)));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found: is the pattern blind?"
    );
    assert!(
        problems.is_empty(),
        "cited paths that do not exist:\n{}",
        problems.join("\n")
    );
}

/// The `//!` lines of every Rust file under `src/` and `crates/*/src/`:
/// a module's map of the code around it.
fn module_docs() -> Vec<(PathBuf, String)> {
    let mut roots = vec![root().join("src")];
    if let Ok(dirs) = std::fs::read_dir(root().join("crates")) {
        roots.extend(dirs.map(|d| d.unwrap().path().join("src")));
    }
    let mut out = Vec::new();
    for dir in roots.iter().filter(|d| d.is_dir()) {
        for file in files(dir, ".rs") {
            let text = read(&file);
            // Blank the other lines, so line numbers stay the file's.
            let docs: Vec<&str> = text
                .lines()
                .map(|l| l.trim_start().strip_prefix("//!").unwrap_or(""))
                .collect();
            out.push((file, docs.join("\n")));
        }
    }
    out
}

#[test]
fn paths_module_docs_cite_exist() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, docs) in module_docs() {
        for (line, cited) in cited_paths(&docs) {
            checked += 1;
            if cited.starts_with("../") || !root().join(&cited).exists() {
                problems.push(format!("{}:{line}: {cited} does not exist", shown(&file)));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} paths found: is the pattern blind?"
    );
    assert!(
        problems.is_empty(),
        "paths cited in //! comments that do not exist:\n{}",
        problems.join("\n")
    );
}

/// ARCHITECTURE.md's chart of a request's stages names every file of
/// `src/pipeline/` (the tests beside them aside).
#[test]
fn every_stage_file_is_in_the_architecture_chart() {
    let chart = read(&root().join("ARCHITECTURE.md"));
    let stages = files(&root().join("src/pipeline"), ".rs");
    assert!(stages.len() >= 7, "the stage files: {stages:?}");
    let missing: Vec<String> = stages
        .iter()
        .filter_map(|f| f.file_name()?.to_str().map(str::to_owned))
        .filter(|name| !name.ends_with("tests.rs"))
        .filter(|name| !chart.contains(&format!("pipeline/{name}")))
        .collect();
    assert!(
        missing.is_empty(),
        "src/pipeline/ files ARCHITECTURE.md's chart does not name: {missing:?}"
    );
}

#[test]
fn the_path_pattern_finds_citations_and_nothing_else() {
    let text = "Mirrors src/limit/decide.rs line for line.\n\
                see `lua/common.lua`, (tests/run) and fuzz/corpus/<target>/.\n\
                not these: ../shared/SPEC.md limit/engine.rs a/src/x.rs lua::Library src/ http://x/docs/y\n\
                [a link](../src/main.rs) is the link check's";
    let found: Vec<String> = cited_paths(text).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        found,
        [
            "src/limit/decide.rs",
            "lua/common.lua",
            "tests/run",
            "fuzz/corpus",
            "../shared/SPEC.md"
        ]
    );
}

// ----- Config fields -----

/// One step of a path into the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// A field of a mapping: `.name`.
    Field(String),
    /// An item of a list: `[]`.
    Item,
    /// A value of a mapping whose keys the operator names: `.<name>`.
    Named,
}

/// A path as the documentation writes it: `routes[].match.path`.
fn path_name(steps: &[Step]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Field(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Step::Item => out.push_str("[]"),
            Step::Named => out.push_str(".<name>"),
        }
    }
    out
}

/// A config file holding `leaf` at `steps` (as YAML flow text).
fn document(steps: &[Step], leaf: &str) -> String {
    steps
        .iter()
        .rev()
        .fold(leaf.to_owned(), |inner, step| match step {
            Step::Field(name) => format!("{{{name}: {inner}}}"),
            Step::Item => format!("[{inner}]"),
            Step::Named => format!("{{probe_name: {inner}}}"),
        })
}

/// The parser's message for the config `text`.
fn parse_error(text: &str) -> String {
    match tollgate::config::parse(text, "probe.yaml") {
        Ok(_) => String::new(),
        Err(err) => err.message,
    }
}

/// The fields of the block at `steps`, from the error for an unknown
/// field there; `None` when there is no block (the value is not a mapping
/// of fields).
fn block_fields(steps: &[Step]) -> Option<Vec<String>> {
    let message = parse_error(&document(steps, "{__probe__: 1}"));
    let expected = message.strip_prefix("unknown field `__probe__`, ")?;
    let ticked = Regex::new(r"`([^`]+)`").unwrap();
    Some(
        ticked
            .captures_iter(expected)
            .map(|c| c[1].to_owned())
            .collect(),
    )
}

/// Every block of the config file: its steps and its fields, from the top.
fn schema() -> Vec<(Vec<Step>, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut queue = vec![Vec::new()];
    while let Some(steps) = queue.pop() {
        let fields = block_fields(&steps)
            .unwrap_or_else(|| panic!("`{}` is not a block", path_name(&steps)));
        for field in &fields {
            let mut at = steps.clone();
            at.push(Step::Field(field.clone()));
            for shape in [None, Some(Step::Item), Some(Step::Named)] {
                let mut child = at.clone();
                child.extend(shape);
                if block_fields(&child).is_some() {
                    queue.push(child);
                    break;
                }
            }
        }
        blocks.push((steps, fields));
    }
    blocks.sort_by_key(|(steps, _)| path_name(steps));
    blocks
}

/// Blocks documented under another block's path, which must take the same
/// fields: (the block, where its fields are documented).
const DOCUMENTED_AS: [(&str, &str); 2] = [
    ("routes[].limits[]", "limits.<name>"),
    ("routes[].limit_response", "server.limit_response"),
];

/// Every field's full path, those of the blocks in [`DOCUMENTED_AS`]
/// written as where they are documented.
fn field_paths(blocks: &[(Vec<Step>, Vec<String>)]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (steps, fields) in blocks {
        let mut block = path_name(steps);
        for (alias, canonical) in DOCUMENTED_AS {
            if let Some(rest) = block.strip_prefix(alias) {
                block = format!("{canonical}{rest}");
            }
        }
        for field in fields {
            out.insert(if block.is_empty() {
                field.clone()
            } else {
                format!("{block}.{field}")
            });
        }
    }
    out
}

/// The field paths `docs/configuration/` documents: the code span each
/// heading starts with, when it names a path under a top-level field.
fn documented_paths(top_level: &[String]) -> BTreeMap<String, String> {
    let span = Regex::new(r"^`([^`]+)`").unwrap();
    let mut out = BTreeMap::new();
    for page in files(&root().join("docs/configuration"), ".md") {
        for heading in headings(&read(&page)) {
            let Some(caps) = span.captures(&heading) else {
                continue;
            };
            let path = caps[1].to_owned();
            let first = path.split(['.', '[']).next().unwrap_or_default();
            if top_level.iter().any(|t| t == first) {
                out.insert(path, shown(&page));
            }
        }
    }
    out
}

#[test]
fn every_config_field_is_documented() {
    let blocks = schema();
    let by_path: BTreeMap<String, &Vec<String>> = blocks
        .iter()
        .map(|(steps, fields)| (path_name(steps), fields))
        .collect();

    // The walk reached the bottom of the file: a leaf three blocks deep,
    // and the blocks only reachable through lists and named mappings.
    for known in [
        "server.timeouts",
        "server.tls.certificates[]",
        "upstreams.<name>.health.active",
        "upstreams.<name>.targets[]",
        "limits.<name>.lockout",
        "limits.<name>.overrides[]",
        "routes[].limits[]",
        "routes[].match",
    ] {
        assert!(
            by_path.contains_key(known),
            "the walk missed {known}: {by_path:?}"
        );
    }

    // A block documented as another takes the same fields, all the way down.
    let subtree = |prefix: &str| -> BTreeSet<String> {
        blocks
            .iter()
            .map(|(steps, fields)| (path_name(steps), fields))
            .filter_map(|(path, fields)| {
                let rest = path.strip_prefix(prefix)?.to_owned();
                Some(fields.iter().map(move |f| format!("{rest}.{f}")))
            })
            .flatten()
            .collect()
    };
    for (alias, canonical) in DOCUMENTED_AS {
        assert_eq!(
            subtree(alias),
            subtree(canonical),
            "{alias} is documented as {canonical}, so they must take the same fields"
        );
    }

    // The hand-written list in each block's "expected a mapping with
    // fields ..." is serde's list.
    let listed = Regex::new(r"^expected a mapping with fields (.*?), got 5").unwrap();
    for (steps, fields) in &blocks {
        let message = parse_error(&document(steps, "5"));
        if let Some(caps) = listed.captures(&message) {
            let written: Vec<&str> = caps[1].split(", ").collect();
            assert_eq!(
                written,
                *fields,
                "`{}`: the fields its error lists are not the fields it takes",
                path_name(steps)
            );
        }
    }

    let top_level: Vec<String> = by_path[""].to_vec();
    let fields = field_paths(&blocks);
    let documented = documented_paths(&top_level);
    let missing: Vec<&String> = fields
        .iter()
        .filter(|f| !documented.contains_key(*f))
        .collect();
    assert!(
        missing.is_empty(),
        "config fields without a heading in docs/configuration/ (a heading that starts \
         with the path in a code span, e.g. ### `server.listen`):\n{}",
        missing
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let stale: Vec<String> = documented
        .iter()
        .filter(|(path, _)| !fields.contains(*path))
        .map(|(path, page)| format!("{page}: {path}"))
        .collect();
    assert!(
        stale.is_empty(),
        "headings in docs/configuration/ for fields the parser does not take:\n{}",
        stale.join("\n")
    );
}

#[test]
fn slugs_follow_github() {
    for (heading, anchor) in [
        ("Operations: the dashboard", "operations-the-dashboard"),
        ("`server.timeouts.header_read`", "servertimeoutsheader_read"),
        ("`upstreams.<name>.tls`", "upstreamsnametls"),
        ("HTTP/2 conformance", "http2-conformance"),
        ("Issue 12: multi-core", "issue-12-multi-core"),
        ("The [README](../README.md) first", "the-readme-first"),
    ] {
        assert_eq!(slug(heading), anchor, "{heading}");
    }
    let text = "# A\n\n```\n# not a heading\n```\n\n## A\n### B ###\n";
    assert_eq!(
        anchors(text),
        BTreeSet::from(["a".into(), "a-1".into(), "b".into()])
    );
}

// ----- Example configs -----

#[test]
fn example_configs_pass_tollgate_check() {
    let configs = files(&root().join("examples/configs"), ".yaml");
    assert!(configs.len() >= 5, "example configs: {configs:?}");
    let problems: Vec<String> = configs
        .iter()
        .filter_map(|c| {
            tollgate::app::check(c)
                .err()
                .map(|e| format!("{}: {e}", shown(c)))
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
