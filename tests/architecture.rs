//! The module graph stays a hierarchy (ARCHITECTURE.md, "Who calls whom"):
//!
//! - no import cycle at any level: not between top-level modules of `src/`
//!   (`proxy` -> `config` -> `proxy`), nor between the modules of one
//!   directory (`proxy/health` -> `proxy/pool` -> `proxy/health`), counting
//!   everything under a module as that module;
//! - `server/` uses nothing above it: only leaves, modules that (with the
//!   modules under them) use no other module of the crate (`body.rs`,
//!   `client_addr.rs`, `auth/mtls.rs`, a leaf whatever its siblings use);
//! - the binary's wiring (`app.rs`) is the one place that starts listeners,
//!   so nothing below it may name it;
//! - the limiter crate (`crates/limit`) builds without any HTTP crate and
//!   without the gateway (read from `Cargo.lock`, dev-dependencies
//!   included, since `cargo test -p tollgate-limit` builds those too).
//!
//! A module uses another when its code (not its comments, strings or
//! `#[cfg(test)]` items) names it by a `crate::`, `super::` or `self::`
//! path, `use` trees included; a name a module re-exports (`pub use`) is
//! followed to the module that defines it. A module and the modules under
//! it (a directory's `mod.rs` and its files) may use each other: that is
//! Rust's own nesting, not a layer. Each crate of the workspace (`src/`,
//! `crates/*/src/`) is read on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from its crate root (`["proxy", "pool"]`).
type ModPath = Vec<String>;

/// What one source file says, once its comments, strings and test code
/// are blanked out.
#[derive(Default)]
struct Module {
    /// Where it is, relative to the repository.
    file: String,
    /// Every `crate::`/`super::`/`self::` path its code names, made
    /// absolute.
    paths: Vec<ModPath>,
    /// Names it re-exports (`pub use`), each with the absolute path it
    /// names.
    reexports: BTreeMap<String, ModPath>,
    /// Modules whose public items it re-exports wholesale (`pub use m::*`).
    globs: Vec<ModPath>,
    /// The names of the public items it defines.
    items: BTreeSet<String>,
}

/// One crate's modules, and which module uses which.
struct Graph {
    modules: BTreeMap<ModPath, Module>,
    /// (user, used) -> the path that makes the use, for the messages.
    uses: BTreeMap<(ModPath, ModPath), String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The gateway's crate and every other crate of the workspace.
fn crates() -> Vec<Graph> {
    let mut roots = vec![root().join("src")];
    if let Ok(dirs) = std::fs::read_dir(root().join("crates")) {
        let mut more: Vec<PathBuf> = dirs
            .map(|d| d.unwrap().path().join("src"))
            .filter(|src| src.is_dir())
            .collect();
        more.sort();
        roots.extend(more);
    }
    roots.iter().map(|src| Graph::read(src)).collect()
}

impl Graph {
    /// Read every module under `src`: not `lib.rs`, the root, which
    /// declares them, nor `main.rs`, the binary's own crate.
    fn read(src: &Path) -> Graph {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let mut modules = BTreeMap::new();
        let mut test_only = BTreeSet::new();
        for path in files {
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut at: ModPath = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if at.last().is_some_and(|l| l == "mod") {
                at.pop();
            }
            if at == ["lib"] || at == ["main"] {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let (module, tests) = Module::read(&at, &text);
            let file = path.strip_prefix(root()).unwrap_or(&path);
            let module = Module {
                file: file.display().to_string(),
                ..module
            };
            for name in tests {
                test_only.insert([at.clone(), vec![name]].concat());
            }
            modules.insert(at, module);
        }
        // Files declared `#[cfg(test)] mod x;` are test code, and so is
        // everything under them.
        modules.retain(|at, _| !test_only.iter().any(|t| at.starts_with(t)));
        let mut graph = Graph {
            modules,
            uses: BTreeMap::new(),
        };
        let mut uses = BTreeMap::new();
        for (at, module) in &graph.modules {
            for path in &module.paths {
                if let Some(used) = graph.resolve(path, 0) {
                    if &used != at {
                        uses.entry((at.clone(), used))
                            .or_insert_with(|| format!("crate::{}", path.join("::")));
                    }
                }
            }
        }
        graph.uses = uses;
        graph
    }

    /// The module `path` names: the longest prefix of it that is a module,
    /// then, through re-exports, the module that defines the name after it.
    /// `None` for the crate root itself or another crate. `depth` counts
    /// the re-exports followed, so that a loop of them ends.
    fn resolve(&self, path: &[String], depth: usize) -> Option<ModPath> {
        let k = (1..=path.len())
            .rev()
            .find(|&k| self.modules.contains_key(&path[..k]))?;
        let (at, rest) = (&path[..k], &path[k..]);
        let module = &self.modules[at];
        if let (Some(name), true) = (rest.first(), depth < 8) {
            if let Some(target) = module.reexports.get(name) {
                let followed = [target.as_slice(), &rest[1..]].concat();
                if let Some(found) = self.resolve(&followed, depth + 1) {
                    return Some(found);
                }
            }
            for glob in &module.globs {
                let Some(from) = self.modules.get(glob) else {
                    continue;
                };
                if from.items.contains(name) || from.reexports.contains_key(name) {
                    return self.resolve(&[glob.as_slice(), rest].concat(), depth + 1);
                }
            }
        }
        Some(at.to_vec())
    }

    /// The uses between the modules right under `parent` (`[]`: the
    /// top-level modules): each module stands for itself and everything
    /// under it; uses between a module and one under it are left out.
    fn level(&self, parent: &[String]) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut level: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let depth = parent.len();
        for ((from, to), path) in &self.uses {
            if from.len() > depth
                && to.len() > depth
                && from.starts_with(parent)
                && to.starts_with(parent)
                && from[depth] != to[depth]
            {
                let why = format!("{} names {path}", self.modules[from].file);
                level
                    .entry(from[depth].clone())
                    .or_default()
                    .entry(to[depth].clone())
                    .or_insert(why);
            }
        }
        level
    }

    /// Every module that has modules under it, and the crate root.
    fn parents(&self) -> BTreeSet<ModPath> {
        self.modules
            .keys()
            .map(|at| at[..at.len() - 1].to_vec())
            .collect()
    }

    /// The top-level modules the top-level module `name` uses.
    fn top_uses(&self, name: &str) -> BTreeSet<String> {
        self.level(&[])
            .remove(name)
            .unwrap_or_default()
            .into_keys()
            .collect()
    }
}

impl Module {
    /// What `text`, the file of the module at `at`, names and defines; and
    /// the child modules it declares for tests only.
    fn read(at: &[String], text: &str) -> (Module, Vec<String>) {
        let code = blank_comments_and_strings(text);
        let (code, tests) = blank_test_items(&code);
        let inline = inline_modules(&code);
        let mut module = Module::default();
        for start in keywords(&code, &["crate", "super", "self"]) {
            let after = &code[start + word_at(&code, start).len()..];
            // A path's start: not `self.x`, nor within one read from its
            // start (`super::super::a`, `a::{self, b}`).
            if !after.trim_start().starts_with("::") || code[..start].trim_end().ends_with("::") {
                continue;
            }
            // The module a path is relative to: the file's, or an inline
            // `mod name { ... }` around it.
            let mut here = at.to_vec();
            here.extend(
                inline
                    .iter()
                    .filter(|(_, span)| span.contains(&start))
                    .map(|(name, _)| name.clone()),
            );
            for (path, _) in use_tree(&code, start, Vec::new()) {
                if let Some(path) = absolute(&here, &path, &[]) {
                    module.paths.push(path);
                }
            }
        }
        let children = declared_modules(&code);
        for start in pub_uses(&code) {
            for (path, alias) in use_tree(&code, start, Vec::new()) {
                let Some(path) = absolute(at, &path, &children) else {
                    continue;
                };
                match (path.last().map(String::as_str), alias) {
                    (Some("*"), _) => module.globs.push(path[..path.len() - 1].to_vec()),
                    (_, Some(alias)) => {
                        module.reexports.insert(alias, path);
                    }
                    (Some(name), None) => {
                        module.reexports.insert(name.to_owned(), path.clone());
                    }
                    (None, None) => {}
                }
            }
        }
        module.items = public_items(&code);
        (module, tests)
    }
}

/// `path` (as written in the module at `here`) from the crate root:
/// `crate::`, `self::` and `super::` paths, and paths that start with one
/// of `children` (the modules `here` declares). `None` for another crate's.
fn absolute(here: &[String], path: &[String], children: &[String]) -> Option<ModPath> {
    let (mut base, rest) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (here.to_vec(), &path[1..]),
        "super" => (here.to_vec(), path),
        name if children.iter().any(|c| c == name) => (here.to_vec(), path),
        _ => return None,
    };
    for segment in rest {
        match segment.as_str() {
            "super" => {
                base.pop()?;
            }
            // `a::{self, b}`: `a` itself.
            "self" => {}
            _ => base.push(segment.clone()),
        }
    }
    Some(base)
}

/// `text` with every comment, string and character literal replaced by
/// spaces (line breaks kept), so what is left is code and its braces
/// balance.
fn blank_comments_and_strings(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            rest.iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p)
        } else if rest.starts_with(b"/*") {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                if b[j..].starts_with(b"/*") {
                    (depth, j) = (depth + 1, j + 2);
                } else if b[j..].starts_with(b"*/") {
                    (depth, j) = (depth - 1, j + 2);
                    if depth == 0 {
                        break j;
                    }
                } else if j < b.len() {
                    j += 1;
                } else {
                    break j;
                }
            }
        } else if let Some(end) = raw_string_end(b, i) {
            end
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\'', '\u{7f}'), or else a
            // lifetime, left alone.
            let end = if rest.get(1) == Some(&b'\\') {
                rest.iter()
                    .skip(3)
                    .position(|&c| c == b'\'')
                    .map(|p| i + p + 4)
            } else {
                let len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + len) == Some(&b'\'')).then_some(i + 2 + len)
            };
            end.unwrap_or(i + 1)
        } else {
            i += 1;
            continue;
        };
        let end = end.min(b.len());
        blank(&mut out[i..end]);
        i = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Spaces in place of `bytes`, line breaks kept.
fn blank(bytes: &mut [u8]) {
    for c in bytes.iter_mut().filter(|c| **c != b'\n') {
        *c = b' ';
    }
}

/// Where the raw string starting at `i` (`r"..."`, `r#"..."#`, `br"..."`)
/// ends, if one does.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && is_ident(b[i - 1]) {
        return None;
    }
    let mut j = i + usize::from(b[i] == b'b');
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let end = b[j + 1..].windows(close.len()).position(|w| w == close)?;
    Some(j + 1 + end + close.len())
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The identifier at `i` in `code` (empty if there is none).
fn word_at(code: &str, i: usize) -> &str {
    let len = code.as_bytes()[i..]
        .iter()
        .take_while(|&&c| is_ident(c))
        .count();
    &code[i..i + len]
}

/// Where the code after `i` resumes, past white space.
fn skip_space(code: &str, i: usize) -> usize {
    i + code.as_bytes()[i..]
        .iter()
        .take_while(|c| c.is_ascii_whitespace())
        .count()
}

/// Just past the brace that closes the one at `open`.
fn block_end(code: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in code.bytes().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' if depth == 1 => return i + 1,
            b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    code.len()
}

/// `code` with every `#[cfg(test)]` item blanked out, and the names of
/// the child modules declared so (`#[cfg(test)] mod name;`).
fn blank_test_items(code: &str) -> (String, Vec<String>) {
    const TEST: &str = "#[cfg(test)]";
    let mut out = code.as_bytes().to_vec();
    let mut tests = Vec::new();
    for (at, _) in code.match_indices(TEST) {
        let start = at + TEST.len();
        // The item ends at its `;` or with its body's braces.
        let end = match code[start..].find([';', '{', '}']).map(|p| start + p) {
            Some(p) if code.as_bytes()[p] == b'{' => block_end(code, p),
            Some(p) if code.as_bytes()[p] == b';' => p + 1,
            Some(p) => p,
            None => code.len(),
        };
        tests.extend(declared_modules(&code[start..end]));
        blank(&mut out[at..end]);
    }
    (String::from_utf8(out).unwrap(), tests)
}

/// The modules `code` declares in files of their own (`mod name;`).
fn declared_modules(code: &str) -> Vec<String> {
    keywords(code, &["mod"])
        .into_iter()
        .filter_map(|at| {
            let name = word_at(code, skip_space(code, at + 3));
            let after = skip_space(code, at + 3) + name.len();
            code[after..]
                .trim_start()
                .starts_with(';')
                .then(|| name.to_owned())
        })
        .collect()
}

/// The inline modules of `code` (`mod name { ... }`), with the span of
/// their bodies.
fn inline_modules(code: &str) -> Vec<(String, std::ops::Range<usize>)> {
    keywords(code, &["mod"])
        .into_iter()
        .filter_map(|at| {
            let start = skip_space(code, at + 3);
            let name = word_at(code, start);
            let open = skip_space(code, start + name.len());
            (code.as_bytes().get(open) == Some(&b'{'))
                .then(|| (name.to_owned(), open..block_end(code, open)))
        })
        .collect()
}

/// Where each of `words` occurs in `code` as a whole word (not `$crate`'s
/// `crate`, which a macro expands where it is used), in order.
fn keywords(code: &str, words: &[&str]) -> Vec<usize> {
    let b = code.as_bytes();
    let mut found: Vec<usize> = words
        .iter()
        .flat_map(|word| {
            code.match_indices(word).map(|(at, _)| at).filter(|&at| {
                let before = at.checked_sub(1).map(|p| b[p]);
                let after = b.get(at + word.len()).copied();
                !before.is_some_and(|c| is_ident(c) || c == b'$') && !after.is_some_and(is_ident)
            })
        })
        .collect();
    found.sort();
    found
}

/// Where the trees of `code`'s `pub use` (and `pub(crate) use`) items
/// start.
fn pub_uses(code: &str) -> Vec<usize> {
    keywords(code, &["use"])
        .into_iter()
        .filter(|&at| {
            let before = code[..at].trim_end();
            ["pub", "pub(crate)", "pub(super)"]
                .iter()
                .any(|v| before.ends_with(v))
        })
        .map(|at| skip_space(code, at + 3))
        .collect()
}

/// The paths of the `use` tree (or plain path) starting at `at`: `a::b`,
/// `a::{b, c::{d, e}}`, `a::*`, `a as b`; each with its alias, and after
/// `prefix`.
fn use_tree(code: &str, at: usize, prefix: ModPath) -> Vec<(ModPath, Option<String>)> {
    let mut path = prefix;
    let mut i = skip_space(code, at);
    loop {
        let name = word_at(code, i);
        if name.is_empty() {
            return vec![(path, None)];
        }
        path.push(name.to_owned());
        i = skip_space(code, i + name.len());
        if !code[i..].starts_with("::") {
            let alias = code[i..]
                .strip_prefix("as ")
                .map(|_| word_at(code, skip_space(code, i + 2)).to_owned());
            return vec![(path, alias)];
        }
        i = skip_space(code, i + 2);
        match code.as_bytes().get(i) {
            Some(b'*') => {
                path.push("*".to_owned());
                return vec![(path, None)];
            }
            Some(b'{') => {
                // Each member, up to its comma at this level.
                let close = block_end(code, i) - 1;
                let (mut out, mut member, mut depth) = (Vec::new(), i + 1, 0usize);
                for (k, c) in code.bytes().enumerate().take(close + 1).skip(i + 1) {
                    match c {
                        b'{' => depth += 1,
                        b'}' if depth > 0 => depth -= 1,
                        b',' | b'}' if depth == 0 => {
                            if !code[member..k].trim().is_empty() {
                                out.extend(use_tree(&code[..k], member, path.clone()));
                            }
                            member = k + 1;
                        }
                        _ => {}
                    }
                }
                return out;
            }
            _ => {}
        }
    }
}

/// The names of the public items `code` defines.
fn public_items(code: &str) -> BTreeSet<String> {
    const KINDS: [&str; 9] = [
        "struct", "enum", "fn", "trait", "type", "const", "static", "mod", "union",
    ];
    let mut items = BTreeSet::new();
    for at in keywords(code, &["pub"]) {
        let mut rest = code[at + 3..].trim_start();
        // `pub(crate)`, `pub(super)`, `pub(in path)`.
        if rest.starts_with('(') {
            rest = rest.split_once(')').map_or("", |(_, r)| r);
        }
        let mut words = rest
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .peekable();
        while let Some(word) = words.next() {
            match word {
                "async" | "unsafe" | "extern" => {}
                "const"
                    if words
                        .peek()
                        .is_some_and(|n| matches!(*n, "fn" | "async" | "unsafe")) => {}
                kind if KINDS.contains(&kind) => {
                    items.extend(words.next().map(str::to_owned));
                    break;
                }
                _ => break,
            }
        }
    }
    items
}

/// A cycle in `graph`, as the names along it (the first again at the end).
fn find_cycle(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeMap<String, String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flat_map(|n| n.keys()) {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_reader_follows_use_trees_past_comments_strings_and_tests() {
    let text = r##"
use crate::a::{self, b::{C, d as e}, f::*};
use super::g;
// crate::in_a_comment
/* crate::in_a_block /* nested */ crate::still_in_it */
const S: &str = "crate::in_a_string \" crate::still";
const R: &str = r#"crate::raw " crate::still"#;
const Q: char = '"';
fn x<'a>(y: &'a str) -> &'a str { super::super::h::i(y) }
pub use j::K;
mod j;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests {
    use crate::tested;
}
"##;
    let at = ["m".to_owned(), "n".to_owned()];
    let (module, tests) = Module::read(&at, text);
    let paths: Vec<String> = module.paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        ["a", "a::b::C", "a::b::d", "a::f::*", "m::g", "h::i"],
        "{text}"
    );
    assert_eq!(module.reexports["K"].join("::"), "m::n::j::K");
    assert_eq!(tests, ["properties"]);
}

#[test]
fn no_module_uses_one_that_uses_it_back_at_any_level() {
    let crates = crates();
    let gateway = &crates[0];
    assert!(
        gateway.modules.len() > 20 && gateway.uses.len() > 50,
        "read the modules: {:?}",
        gateway.modules.keys()
    );
    // The reading itself: a use through a `super::` tree, one through a
    // re-export (`crate::config::UpstreamConfig` is config/model.rs's).
    let uses = |from: &[&str], to: &[&str]| {
        let key = (
            from.iter().map(|s| s.to_string()).collect(),
            to.iter().map(|s| s.to_string()).collect(),
        );
        gateway.uses.contains_key(&key)
    };
    assert!(uses(&["proxy", "pool"], &["proxy", "health"]));
    assert!(uses(&["proxy", "pool"], &["config", "model"]));
    let mut cycles = Vec::new();
    for graph in &crates {
        for parent in graph.parents() {
            let level = graph.level(&parent);
            if let Some(cycle) = find_cycle(&level) {
                let steps: Vec<String> = cycle
                    .windows(2)
                    .map(|w| format!("  {} -> {}: {}", w[0], w[1], level[&w[0]][&w[1]]))
                    .collect();
                let at = match parent.as_slice() {
                    [] => "between top-level modules".to_owned(),
                    p => format!("under {}", p.join("::")),
                };
                cycles.push(format!(
                    "import cycle {at}: {}\n{}",
                    cycle.join(" -> "),
                    steps.join("\n")
                ));
            }
        }
    }
    assert!(cycles.is_empty(), "{}", cycles.join("\n"));
}

#[test]
fn the_server_uses_nothing_above_it() {
    let crates = crates();
    let graph = &crates[0];
    let outside = |from: &ModPath, to: &ModPath| to[0] != from[0];
    let mut above = Vec::new();
    for ((from, to), path) in &graph.uses {
        if from[0] != "server" || !outside(from, to) {
            continue;
        }
        // A leaf: it (and what is under it) uses no module outside it.
        // The module used, not its top-level parent: `auth::mtls` is a
        // leaf though `auth::jwt` is not.
        let leaf = !graph
            .uses
            .keys()
            .any(|(f, t)| f.starts_with(to) && !t.starts_with(to));
        if !leaf {
            above.push(format!(
                "{} names {path}, and {} is not a leaf",
                graph.modules[from].file,
                to.join("::")
            ));
        }
    }
    assert!(
        above.is_empty(),
        "server/ uses what is above it:\n{}",
        above.join("\n")
    );
    assert!(
        graph.top_uses("server").contains("body"),
        "the server's uses were read"
    );
    let mtls = ["auth".to_owned(), "mtls".to_owned()];
    assert!(
        graph
            .uses
            .keys()
            .any(|(f, t)| f[0] == "server" && *t == mtls),
        "the server's use of a leaf below the top level was read"
    );
}

#[test]
fn only_the_binary_wires_listeners_to_handlers() {
    let crates = crates();
    let graph = &crates[0];
    let top: BTreeSet<String> = graph.modules.keys().map(|at| at[0].clone()).collect();
    for module in &top {
        assert!(
            module == "app" || !graph.top_uses(module).contains("app"),
            "{module} uses app"
        );
    }
    let server = graph.top_uses("server");
    assert!(
        !server.contains("pipeline") && !server.contains("admin"),
        "the server starts no handler of its own: {server:?}"
    );
    assert!(
        !graph.top_uses("reload").contains("admin"),
        "reload starts no admin API"
    );
}

/// The packages `package` builds with, itself and its dev-dependencies
/// included (`cargo test -p package` compiles all of them), read from
/// `Cargo.lock`: name -> the names it depends on.
fn lock_closure(package: &str) -> BTreeSet<String> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).expect("read Cargo.lock");
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().trim_matches('"').to_owned())
        };
        let name = field("name = ").expect("a package has a name");
        let list = block
            .split_once("dependencies = [")
            .map_or("", |(_, rest)| rest.split(']').next().unwrap_or(""));
        // An entry is "name" or "name version" (two versions of one crate).
        let names = list
            .lines()
            .filter_map(|l| {
                l.trim()
                    .trim_end_matches(',')
                    .trim_matches('"')
                    .split(' ')
                    .next()
            })
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        deps.entry(name).or_default().extend(names);
    }
    let mut seen = BTreeSet::new();
    let mut stack = vec![package.to_owned()];
    while let Some(p) = stack.pop() {
        if seen.insert(p.clone()) {
            stack.extend(deps.get(&p).into_iter().flatten().cloned());
        }
    }
    seen
}

/// The limiter crate knows nothing of HTTP nor of the gateway: no HTTP
/// crate (rustls only as the Redis client needs it) and no gateway crate
/// among what `cargo test -p tollgate-limit` compiles, and no path of the
/// gateway in its code.
#[test]
fn the_limiter_crate_builds_without_http_or_the_gateway() {
    let closure = lock_closure("tollgate-limit");
    assert!(
        closure.contains("redis") && closure.contains("tokio"),
        "read Cargo.lock: {closure:?}"
    );
    let forbidden = [
        "hyper",
        "hyper-util",
        "h2",
        "http",
        "http-body",
        "http-body-util",
        "tollgate",
    ];
    let found: Vec<&str> = forbidden
        .into_iter()
        .filter(|c| closure.contains(*c))
        .collect();
    assert!(found.is_empty(), "tollgate-limit builds with {found:?}");
    assert!(
        lock_closure("tollgate").contains("hyper"),
        "the reading sees the gateway's hyper"
    );
    let mut files = Vec::new();
    rust_files(&root().join("crates/limit/src"), &mut files);
    assert!(files.len() > 20, "read the crate: {files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("tollgate::"),
            "{} names the gateway",
            path.display()
        );
    }
}

/// The longest a function may be (its lines from `fn` to its closing
/// brace) without saying why in its doc comment.
const LONG_FUNCTION: usize = 100;

/// What a longer function's doc comment says, followed by the reason.
const LONG_REASON: &str = "Why one function:";

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each function of `text` over [`LONG_FUNCTION`] lines whose doc comment
/// gives no reason: (line of its `fn`, name, length).
fn long_functions(text: &str) -> Vec<(usize, String, usize)> {
    let code = blank_comments_and_strings(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for at in keywords(&code, &["fn"]) {
        let name = word_at(&code, skip_space(&code, at + 2));
        // A body, not a declaration (`fn f();` in a trait) nor a type.
        let Some(open) = code[at..].find(['{', ';']).map(|i| at + i) else {
            continue;
        };
        if !code[open..].starts_with('{') || name.is_empty() {
            continue;
        }
        let first = code[..at].matches('\n').count();
        let last = code[..block_end(&code, open)].matches('\n').count();
        let length = last - first + 1;
        if length <= LONG_FUNCTION {
            continue;
        }
        // The doc comment: the `///` lines above, past attributes.
        let doc: String = lines[..first]
            .iter()
            .rev()
            .map(|l| l.trim())
            .skip_while(|l| l.starts_with("#["))
            .take_while(|l| l.starts_with("///"))
            .collect::<Vec<_>>()
            .join(" ");
        if !doc.contains(LONG_REASON) {
            found.push((first + 1, name.to_owned(), length));
        }
    }
    found
}

/// Functions of one concern: none over [`LONG_FUNCTION`] lines in either
/// crate (tests included) unless its doc comment says why, after
/// [`LONG_REASON`].
#[test]
fn no_function_is_long_without_a_reason() {
    let sample = format!(
        "/// Short.\nfn a() {{\n}}\n/// {LONG_REASON} a table.\n#[test]\nfn b() {{\n{}}}\nfn c() {{\n{}}}\n",
        "    x();\n".repeat(LONG_FUNCTION),
        "    let s = \"}\";\n".repeat(LONG_FUNCTION)
    );
    assert_eq!(
        long_functions(&sample),
        [(LONG_FUNCTION + 8, "c".to_owned(), LONG_FUNCTION + 2)],
        "the reader measures functions and reads their reasons"
    );
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    rust_files(&root().join("crates"), &mut files);
    let mut long = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, name, length) in long_functions(&text) {
            let file = path.strip_prefix(root()).unwrap().display();
            long.push(format!("{file}:{line}: fn {name}, {length} lines"));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {LONG_FUNCTION} lines whose doc comment gives no reason \
         (\"{LONG_REASON} ...\"):\n{}",
        long.join("\n")
    );
}
