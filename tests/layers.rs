//! The layer check: every module of `src/` has a rank, and no
//! module imports one of a higher rank, so dependencies point one way:
//!
//! core (0) <- core::control (1) <- backends (2) <- report (3) <- commands
//! (4) <- cli (5) <- lib/main (6); `error`, `stats` and the leaf helpers
//! `fsutil`, `progress` and `scram` are 0.
//!
//! It reads every `src/**/*.rs`, strips comments and literals, and extracts
//! the modules each file names through `crate::...` (in `use` items and in
//! code), `super::...` (resolved against the file's module and any inline
//! `mod` blocks) and, in `main.rs`, `plbbench::...`. A file in no rank fails
//! too, so a new top-level module must be placed in the table. Within a
//! rank, modules may use each other, but never in a cycle: the units (a
//! top-level module, or `commands::run`, `cluster::docker`, ... one level
//! down) must form a DAG. The unit checks at the end plant violations to
//! show both checks can fail.

use std::path::{Path, PathBuf};

/// Module prefixes and their ranks; the longest matching prefix wins.
const RANKS: &[(&str, u8)] = &[
    ("core", 0),
    ("core::control", 1),
    ("error", 0),
    ("stats", 0),
    ("fsutil", 0),
    ("progress", 0),
    ("scram", 0),
    ("backend", 2),
    ("cluster", 2),
    ("proxy", 2),
    ("report", 3),
    ("commands", 4),
    ("cli", 5),
    ("lib", 6),
    ("main", 6),
];

/// The rank of a module path (segments), by its longest ranked prefix.
fn rank(path: &[String]) -> Option<(u8, String)> {
    RANKS
        .iter()
        .filter(|(prefix, _)| {
            let p: Vec<&str> = prefix.split("::").collect();
            p.len() <= path.len() && p.iter().zip(path).all(|(a, b)| *a == b)
        })
        .max_by_key(|(prefix, _)| prefix.split("::").count())
        .map(|(prefix, r)| (*r, prefix.to_string()))
}

/// The module a file under `src/` defines: `lib`, `main`, `core::router`,
/// `cluster::local` (for `cluster/local/mod.rs`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs").to_string();
    if parts.is_empty() && (stem == "lib" || stem == "main") {
        return vec![stem];
    }
    if stem != "mod" {
        parts.push(stem);
    }
    parts
}

/// `src` with comments, string and character literals blanked out (line
/// structure and braces outside literals kept).
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char(b.get(i.wrapping_sub(1))) {
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (b.get(i + 2) == Some(&'\'') || (next == Some('\\'))) {
            // A character literal ('x' or '\n', '\'', '\u{..}'); a lifetime has no closing quote.
            let mut j = i + 1;
            if b.get(j) == Some(&'\\') {
                j += 2;
            } else {
                j += 1;
            }
            while j < b.len() && b[j] != '\'' {
                j += 1;
            }
            i = j + 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// One import found in a file: the resolved module path and the text.
#[derive(Debug, PartialEq)]
struct Import {
    path: Vec<String>,
    text: String,
}

/// Reads identifiers and `::` from `b[i..]`: the segments of a path and,
/// when it ends in `::{`, the paths of the group (recursively).
fn read_path(b: &[char], mut i: usize, base: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = base;
    loop {
        while i < b.len() && b[i].is_whitespace() {
            i += 1;
        }
        if i < b.len() && b[i] == '{' {
            i += 1;
            loop {
                while i < b.len() && (b[i].is_whitespace() || b[i] == ',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == '}' {
                    return i + 1;
                }
                let before = i;
                i = read_path(b, i, path.clone(), out);
                // Skip `as name` and anything else up to the next item.
                while i < b.len() && b[i] != ',' && b[i] != '}' {
                    i += 1;
                }
                if i == before {
                    i += 1;
                }
            }
        }
        let start = i;
        while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
            i += 1;
        }
        if i == start {
            out.push(path);
            return i;
        }
        let seg: String = b[start..i].iter().collect();
        if seg != "self" {
            path.push(seg);
        }
        if b.get(i) == Some(&':') && b.get(i + 1) == Some(&':') {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// Every module `src` (the text of module `module`) imports from the crate.
fn imports(module: &[String], src: &str, crate_alias: Option<&str>) -> Vec<Import> {
    let code = strip(src);
    let b: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    // Inline `mod name {` blocks: (name, brace depth inside).
    let mut inline: Vec<(String, i32)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '{' {
            depth += 1;
        } else if c == '}' {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth -= 1;
        }
        if ident_char(b.get(i.wrapping_sub(1))) || !(c.is_alphabetic() || c == '_') {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
            i += 1;
        }
        let word: String = b[start..i].iter().collect();
        if word == "mod" {
            let mut j = i;
            while j < b.len() && b[j].is_whitespace() {
                j += 1;
            }
            let s = j;
            while j < b.len() && (b[j].is_alphanumeric() || b[j] == '_') {
                j += 1;
            }
            let name: String = b[s..j].iter().collect();
            while j < b.len() && b[j].is_whitespace() {
                j += 1;
            }
            if !name.is_empty() && b.get(j) == Some(&'{') {
                inline.push((name, depth + 1));
            }
            continue;
        }
        let is_root = word == "crate" || Some(word.as_str()) == crate_alias;
        if !(is_root || word == "super") || b.get(i) != Some(&':') || b.get(i + 1) != Some(&':') {
            continue;
        }
        let mut here: Vec<String> = module.to_vec();
        if here == ["lib"] || here == ["main"] {
            here.clear();
        }
        here.extend(inline.iter().map(|(n, _)| n.clone()));
        let mut base = if is_root { Vec::new() } else { here };
        let mut j = i + 2;
        if !is_root {
            base.pop();
            while b[j..].starts_with(&['s', 'u', 'p', 'e', 'r', ':', ':']) {
                base.pop();
                j += 7;
            }
        }
        let mut paths = Vec::new();
        let end = read_path(&b, j, base, &mut paths);
        let text: String = b[start..end.min(b.len())].iter().collect();
        for path in paths {
            found.push(Import { path, text: text.split_whitespace().collect::<Vec<_>>().join(" ") });
        }
        i = end.max(i);
    }
    found
}

/// The violations of one file: imports of a higher rank (an item of the
/// crate root, such as `crate::Error`, counts as lib's).
fn check(module: &[String], src: &str) -> Vec<String> {
    let alias = (module == ["main"]).then_some("plbbench");
    let Some((own, own_prefix)) = rank(module) else {
        return vec![format!("module {} is in no rank", module.join("::"))];
    };
    let mut bad = Vec::new();
    for imp in imports(module, src, alias) {
        // Inside its own module tree an import is always allowed.
        if imp.path.starts_with(module) {
            continue;
        }
        // A name that is no module is an item of the crate root (lib.rs).
        let (r, prefix) = rank(&imp.path).unwrap_or((6, "lib (the crate root)".into()));
        if r > own && !imp.path.is_empty() {
            bad.push(format!(
                "`{}` (rank {own}, {own_prefix}) imports {} (rank {r}, {prefix}): {}",
                module.join("::"),
                imp.path.join("::"),
                imp.text
            ));
        }
    }
    bad
}

/// The unit of a module path: its longest known module prefix, cut to two
/// segments (`commands::run`, `cluster::docker`, `core::router`, `sim`); an
/// item of the crate root is lib's.
fn unit(path: &[String], known: &[Vec<String>]) -> Vec<String> {
    let module = (1..=path.len()).rev().map(|n| &path[..n]).find(|p| known.iter().any(|k| k == p));
    match module {
        Some(m) => m[..m.len().min(2)].to_vec(),
        None => vec!["lib".to_string()],
    }
}

/// The cycles among units, each as `a -> b -> ... -> a`; `files` are
/// (module, source) pairs.
fn cycles(files: &[(Vec<String>, String)]) -> Vec<String> {
    let known: Vec<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut edges: std::collections::BTreeMap<Vec<String>, std::collections::BTreeSet<Vec<String>>> =
        std::collections::BTreeMap::new();
    for (module, src) in files {
        let from = unit(module, &known);
        let alias = (module == &["main"]).then_some("plbbench");
        for imp in imports(module, src, alias) {
            let to = unit(&imp.path, &known);
            if to != from && !imp.path.is_empty() {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // Depth-first search; a back edge closes a cycle.
    fn visit(
        v: &Vec<String>,
        edges: &std::collections::BTreeMap<Vec<String>, std::collections::BTreeSet<Vec<String>>>,
        stack: &mut Vec<Vec<String>>,
        done: &mut std::collections::BTreeSet<Vec<String>>,
        found: &mut Vec<String>,
    ) {
        if let Some(i) = stack.iter().position(|s| s == v) {
            let mut cyc: Vec<String> = stack[i..].iter().map(|u| u.join("::")).collect();
            cyc.push(v.join("::"));
            found.push(cyc.join(" -> "));
            return;
        }
        if !done.insert(v.clone()) {
            return;
        }
        stack.push(v.clone());
        for w in edges.get(v).into_iter().flatten() {
            visit(w, edges, stack, done, found);
        }
        stack.pop();
    }
    let mut found = Vec::new();
    let mut done = std::collections::BTreeSet::new();
    for v in edges.keys() {
        visit(v, &edges, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src is readable").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every file under `src/` as (module, source).
fn sources() -> Vec<(PathBuf, Vec<String>, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 40, "found only {} files under {}", files.len(), src.display());
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap().to_path_buf();
            let text = std::fs::read_to_string(&f).unwrap();
            let module = module_of(&rel);
            (rel, module, text)
        })
        .collect()
}

#[test]
fn every_import_points_down_the_layers() {
    let mut bad = Vec::new();
    for (rel, module, text) in sources() {
        bad.extend(check(&module, &text).into_iter().map(|v| format!("src/{}: {v}", rel.display())));
    }
    assert!(bad.is_empty(), "{} layer violations:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn no_units_import_each_other_in_a_cycle() {
    let files: Vec<(Vec<String>, String)> = sources().into_iter().map(|(_, m, t)| (m, t)).collect();
    let found = cycles(&files);
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

fn m(path: &str) -> Vec<String> {
    path.split("::").map(String::from).collect()
}

#[test]
fn a_planted_upward_import_is_found() {
    let core = m("core::router");
    let v = check(&core, "use crate::commands::run::plan::Plan;\n");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("imports commands::run::plan::Plan (rank 4, commands)"), "{v:?}");
    // In code, not only in `use`; groups; `super` resolved.
    assert_eq!(check(&core, "fn f() { let _ = crate::report::files::write_run; }").len(), 1);
    assert_eq!(check(&m("backend::sim"), "use crate::{core::model::Class, report::summary::Summary};").len(), 1);
    assert_eq!(check(&m("cluster::local"), "use super::super::commands::cli;").len(), 1);
    assert_eq!(check(&m("report::charts::bars"), "use super::super::super::cli::Cli;").len(), 1);
    // A backend may not import core::control's callers, but may import it.
    assert!(check(&m("backend::driver"), "use crate::core::control::Run;").is_empty());
    assert_eq!(check(&m("core::model"), "use crate::core::control::Run;").len(), 1);
    // Comments, strings and downward imports are not violations.
    assert!(
        check(&core, "// use crate::commands::run;\nlet s = \"crate::cli::Cli\";\nuse crate::error::Error;").is_empty()
    );
    assert!(check(&m("commands::run"), "use crate::core::model::Class;\nuse crate::report::html;").is_empty());
    // main names the library `plbbench`; the crate root's items are lib's.
    assert!(check(&m("main"), "use plbbench::cli::Cli;\nplbbench::run(cli); plbbench::Error::Input").is_empty());
    assert_eq!(check(&m("report::html"), "use crate::Error;").len(), 1);
}

#[test]
fn super_resolves_against_inline_modules() {
    // `super::*` in a file's `mod tests` is the file's own module.
    let imps = imports(&m("core::router"), "mod tests {\n use super::*;\n use super::super::model::Class;\n}", None);
    let paths: Vec<String> = imps.iter().map(|i| i.path.join("::")).collect();
    assert_eq!(paths, ["core::router", "core::model::Class"]);
    let imps = imports(&m("cluster::local"), "use super::{dataset, pgconn};", None);
    let paths: Vec<String> = imps.iter().map(|i| i.path.join("::")).collect();
    assert_eq!(paths, ["cluster::dataset", "cluster::pgconn"]);
}

#[test]
fn an_unranked_module_fails() {
    assert_eq!(check(&m("scratch"), ""), ["module scratch is in no rank"]);
    assert_eq!(module_of(Path::new("cluster/local/mod.rs")), m("cluster::local"));
    assert_eq!(module_of(Path::new("lib.rs")), m("lib"));
    assert_eq!(module_of(Path::new("core/router.rs")), m("core::router"));
}

#[test]
fn a_planted_cycle_is_found() {
    let files = vec![
        (m("commands::run"), "use crate::commands::cluster::running;".to_string()),
        (m("commands::run::launch"), String::new()),
        (m("commands::cluster"), "use super::run::plan::load_workload;".to_string()),
        (m("commands::run::plan"), String::new()),
        (m("core::model"), String::new()),
    ];
    assert_eq!(cycles(&files), ["commands::cluster -> commands::run -> commands::cluster"]);
    // Down one way only: no cycle; a child naming its parent's items is not one either.
    let files = vec![
        (m("commands::run"), "use crate::core::model::Class;".to_string()),
        (m("commands::run::launch"), "use super::plan::Plan; use crate::commands::run::execute;".to_string()),
        (m("commands::run::plan"), String::new()),
        (m("core::model"), String::new()),
    ];
    assert!(cycles(&files).is_empty());
}
