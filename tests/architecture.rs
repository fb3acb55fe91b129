//! The module graph stays a hierarchy (ARCHITECTURE.md): no top-level
//! module of `src/` uses another that uses it back, directly or not. The
//! binary's wiring (`app.rs`) is the one place that starts listeners, so
//! nothing below it may name it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module -> the top-level modules its code (not its comments,
/// not its unit tests) refers to as `crate::name`.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&src).unwrap();
            let top = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned();
            if top == "lib" || top == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            let uses = graph.entry(top.clone()).or_default();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for (i, _) in line.match_indices("crate::") {
                    let name: String = line[i + 7..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if name != top && !name.is_empty() {
                        uses.insert(name);
                    }
                }
            }
        }
    }
    graph
}

#[test]
fn no_module_uses_one_that_uses_it_back() {
    let graph = graph();
    assert!(graph.len() > 10, "read the modules: {graph:?}");
    // Depth-first search for a cycle, reporting its path.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
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
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn only_the_binary_wires_listeners_to_handlers() {
    for (module, uses) in graph() {
        assert!(
            module == "app" || !uses.contains("app"),
            "{module} uses app"
        );
    }
    let graph = graph();
    let server = &graph["server"];
    assert!(
        !server.contains("pipeline") && !server.contains("admin"),
        "the server starts no handler of its own: {server:?}"
    );
    assert!(
        !graph["reload"].contains("admin"),
        "reload starts no admin API"
    );
}
