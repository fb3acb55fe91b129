//! Prints the Redis Functions library the gateway loads (for
//! `benches/e2e/lua_cost` and by hand: `redis-cli -x function load replace`).
//!
//!     cargo run --example lua_library [-- [--dir LUA_DIR] [ENTRY.lua ...]]
//!
//! `--dir` reads the `.lua` files from that directory instead of the ones
//! built in (another checkout's `lua/`); each `ENTRY.lua` is one more entry
//! point, named after its file, which must define `local function
//! <name>(KEYS, ARGV)`. The first line names the library: `#!lua
//! name=tollgate_<hash>`; entry `x` is the function `tollgate_<hash>_x`.

use std::path::{Path, PathBuf};

use tollgate_limit::store::redis::lua;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("lua_library: {}: {e}", path.display());
        std::process::exit(1)
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut dir, mut extra) = (None::<PathBuf>, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dir" => dir = args.next().map(PathBuf::from),
            _ => extra.push(PathBuf::from(a)),
        }
    }
    let file = |name: &str, built_in: &str| match &dir {
        Some(d) => read(&d.join(format!("{name}.lua"))),
        None => built_in.to_owned(),
    };
    let mut shared = vec![file("common", lua::COMMON)];
    shared.extend(lua::ALGORITHMS.iter().map(|(n, src)| file(n, src)));
    shared.push(file("lockout", lua::LOCKOUT));
    // An older checkout's lua/ may have no quota.lua: it had no quotas.
    if dir.as_ref().is_none_or(|d| d.join("quota.lua").exists()) {
        shared.push(file("quota", lua::QUOTA));
    }
    // Nor lease.lua (it came with issue 27).
    if dir.as_ref().is_none_or(|d| d.join("lease.lua").exists()) {
        shared.push(file("lease", lua::LEASE));
    }
    // Nor an entry it does not have (settle.lua came after quota.lua).
    let mut entries: Vec<(String, String)> = lua::ENTRIES
        .iter()
        .filter(|(n, _)| {
            dir.as_ref()
                .is_none_or(|d| d.join(format!("{n}.lua")).exists())
        })
        .map(|(n, src)| (n.to_string(), file(n, src)))
        .collect();
    for path in extra {
        let name = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        entries.retain(|(n, _)| *n != name);
        entries.push((name, read(&path)));
    }
    let shared: Vec<&str> = shared.iter().map(String::as_str).collect();
    let entries: Vec<(&str, &str)> = entries
        .iter()
        .map(|(n, s)| (n.as_str(), s.as_str()))
        .collect();
    print!("{}", lua::Library::from_parts(&shared, &entries).src);
}
