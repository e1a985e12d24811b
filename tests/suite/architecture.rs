//! The crate graph and the module graph are DAGs and keep their layers (ARCHITECTURE.md): the
//! core depends on no other crate of the workspace and on no command-line, plotting, fitting or
//! progress-bar crate; the lab only on the core; the `cachesim` package on both. Reads the
//! manifests, and the source itself: the module tree of each crate from the `mod` declarations
//! under its `lib.rs` (and the binary's `main.rs`), and every
//! `use` tree and `crate::` / `super::` / `self::` path outside comments, string literals and
//! `#[cfg(test)]` items. A reference from module `a::x` to `b::y` is an edge between the two
//! siblings `a` and `b` under their common parent; a reference to an ancestor or a descendant
//! is no edge. Fails on a cycle among siblings at any level, naming the references that close
//! it. `cargo test --test suite architecture:: -- --nocapture` prints the crates and each crate's
//! top-level module graph.

use crate::common;

use common::files;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path from the crate root (empty for the root) and its file.
struct Module {
    path: Vec<String>,
    file: PathBuf,
}

/// The modules of the crate rooted at `root` (`src/lib.rs` or `src/main.rs`), test modules left
/// out.
fn modules(root: &Path) -> Vec<Module> {
    let mut out = Vec::new();
    let mut todo = vec![Module { path: Vec::new(), file: root.to_path_buf() }];
    while let Some(m) = todo.pop() {
        let text = code(&std::fs::read_to_string(&m.file).unwrap());
        // A file's children live in `dir/`: beside it for `lib.rs`, `main.rs` and `mod.rs`,
        // else in the folder named after the file.
        let name = m.file.file_stem().unwrap().to_string_lossy().into_owned();
        let parent = m.file.parent().unwrap();
        let dir = if m.path.is_empty() || name == "mod" { parent.to_path_buf() } else { parent.join(&name) };
        for child in declared_modules(&text) {
            let file = [dir.join(format!("{child}.rs")), dir.join(&child).join("mod.rs")]
                .into_iter()
                .find(|f| f.exists())
                .unwrap_or_else(|| panic!("{}: mod {child} has no file", m.file.display()));
            let mut path = m.path.clone();
            path.push(child);
            todo.push(Module { path, file });
        }
        out.push(m);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The `mod NAME;` declarations of a file's code (test items already removed).
fn declared_modules(code: &str) -> Vec<String> {
    let words: Vec<&str> = code.split(|c: char| c.is_whitespace()).filter(|w| !w.is_empty()).collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if *w == "mod" {
            if let Some(next) = words.get(i + 1) {
                if let Some(name) = next.strip_suffix(';') {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

/// `text` without comments, the contents of string and char literals, and `#[cfg(test)]` items
/// (a module block, a `mod x;`, a function or a `use`).
fn code(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r' && (b[i + 1..].starts_with(b"\"") || b[i + 1..].starts_with(b"#")) && !ident(b, i) {
            // Raw string r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if j < b.len() && b[j] == b'"' {
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                out.push_str("\"\"");
                i = j + close.len();
            } else {
                out.push('r');
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && char_literal(b, i) {
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    strip_test_items(&out)
}

fn ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// Whether the `'` at `i` opens a char literal (not a lifetime).
fn char_literal(b: &[u8], i: usize) -> bool {
    match (b.get(i + 1), b.get(i + 2)) {
        (Some(b'\\'), _) => true,
        (Some(_), Some(b'\'')) => true,
        // A multi-byte char: its bytes then a quote within four bytes.
        (Some(c), _) if *c >= 0x80 => b[i + 1..].iter().take(5).skip(1).any(|&x| x == b'\''),
        _ => false,
    }
}

/// Removes each `#[cfg(test)]` and the item after it: up to the `;` or through the matching `}`.
fn strip_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let (mut depth, mut end) = (0i32, item.len());
        for (k, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Every path a file's code names: the leaves of its `use` trees and its inline paths that start
/// with `crate`, `super`, `self` or `extern` (the lib crate, from the binary).
fn paths(code: &str, extern_name: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // `use` trees.
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        let tail = &rest[at + 3..];
        let end = tail.find(';').unwrap_or(tail.len());
        expand_use(tail[..end].trim(), &mut Vec::new(), &mut out);
        rest = &tail[end..];
    }
    // Inline paths.
    let b = code.as_bytes();
    for start in ["crate::", "super::", "self::", &format!("{extern_name}::")] {
        let mut from = 0;
        while let Some(k) = code[from..].find(start) {
            let at = from + k;
            from = at + start.len();
            if ident(b, at) || (at >= 2 && &code[at - 2..at] == "::") {
                continue;
            }
            let path: String =
                code[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            out.push(path.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect());
        }
    }
    out
}

fn find_word(s: &str, w: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(k) = s[from..].find(w) {
        let at = from + k;
        let after = b.get(at + w.len()).copied().unwrap_or(b' ');
        if !(ident(b, at) || after.is_ascii_alphanumeric() || after == b'_') {
            return Some(at);
        }
        from = at + w.len();
    }
    None
}

/// The leaf paths of the use tree `t` under `prefix`.
fn expand_use(t: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let t = t.trim();
    if let Some(open) = t.find('{') {
        let head: Vec<String> =
            t[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
        let inner = &t[open + 1..t.rfind('}').unwrap_or(t.len())];
        let n = prefix.len();
        prefix.extend(head);
        let mut depth = 0;
        let mut start = 0;
        for (k, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&inner[start..k], prefix, out);
                    start = k + 1;
                }
                _ => {}
            }
        }
        expand_use(&inner[start..], prefix, out);
        prefix.truncate(n);
    } else if !t.is_empty() {
        let t = t.split(" as ").next().unwrap().trim();
        let mut p = prefix.clone();
        p.extend(t.split("::").map(str::trim).filter(|s| !s.is_empty() && *s != "*").map(str::to_string));
        if p.last().is_some_and(|s| s == "self") {
            p.pop();
        }
        out.push(p);
    }
}

/// The module a path from module `from` names (the longest run of module segments), or `None`
/// for another crate's path.
fn resolve(path: &[String], from: &[String], tree: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let (mut at, rest): (Vec<String>, &[String]) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (from.to_vec(), &path[1..]),
        "super" => {
            let mut at = from.to_vec();
            let mut k = 0;
            while path.get(k).is_some_and(|s| s == "super") {
                at.pop();
                k += 1;
            }
            (at, &path[k..])
        }
        first => {
            // A uniform path: a child of the current module, else another crate.
            let mut child = from.to_vec();
            child.push(first.to_string());
            if !tree.contains(&child) {
                return None;
            }
            (from.to_vec(), path)
        }
    };
    for seg in rest {
        let mut next = at.clone();
        next.push(seg.clone());
        if !tree.contains(&next) {
            break;
        }
        at = next;
    }
    Some(at)
}

/// Edges between siblings: (parent, from child, to child) → the references that make it.
type Edges = BTreeMap<(Vec<String>, String, String), BTreeSet<String>>;

/// The sibling edges of one crate; `extern_name` is the lib crate's name: from the binary its
/// references leave the crate and are no edges here; the lib names itself so too
/// (`extern crate self as cachesim`).
fn edges(root: &Path, extern_name: &str) -> Edges {
    let self_name = root.file_name().is_some_and(|n| n == "lib.rs");
    let mods = modules(root);
    let tree: BTreeSet<Vec<String>> = mods.iter().map(|m| m.path.clone()).collect();
    let mut edges = Edges::new();
    for m in &mods {
        let code = code(&std::fs::read_to_string(&m.file).unwrap());
        for mut p in paths(&code, extern_name) {
            if p.first().is_some_and(|s| s == extern_name) {
                if !self_name {
                    continue; // the binary's use of the lib crate
                }
                p[0] = "crate".into(); // the lib's own name for itself
            }
            let Some(to) = resolve(&p, &m.path, &tree) else { continue };
            let common = m.path.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == m.path.len() || common == to.len() {
                continue; // an ancestor or a descendant
            }
            let key = (m.path[..common].to_vec(), m.path[common].clone(), to[common].clone());
            let file = m.file.strip_prefix(root.parent().unwrap()).unwrap_or(&m.file);
            edges.entry(key).or_default().insert(format!("{} -> {}", file.display(), p.join("::")));
        }
    }
    edges
}

/// A cycle among the siblings under each parent, as a list of children, if any.
fn cycles(edges: &Edges) -> Vec<(Vec<String>, Vec<String>)> {
    let mut by_parent: BTreeMap<&Vec<String>, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    for (parent, a, b) in edges.keys() {
        by_parent.entry(parent).or_default().entry(a).or_default().insert(b);
    }
    let mut found = Vec::new();
    for (parent, g) in by_parent {
        // Depth-first search with colours; a grey node reached again closes a cycle.
        let mut colour: BTreeMap<&str, u8> = BTreeMap::new();
        fn visit<'a>(
            n: &'a str,
            g: &BTreeMap<&'a str, BTreeSet<&'a str>>,
            colour: &mut BTreeMap<&'a str, u8>,
            stack: &mut Vec<&'a str>,
        ) -> Option<Vec<String>> {
            colour.insert(n, 1);
            stack.push(n);
            for &m in g.get(n).into_iter().flatten() {
                match colour.get(m).copied().unwrap_or(0) {
                    1 => {
                        let at = stack.iter().position(|&s| s == m).unwrap();
                        let mut c: Vec<String> = stack[at..].iter().map(|s| s.to_string()).collect();
                        c.push(m.to_string());
                        return Some(c);
                    }
                    0 => {
                        if let Some(c) = visit(m, g, colour, stack) {
                            return Some(c);
                        }
                    }
                    _ => {}
                }
            }
            stack.pop();
            colour.insert(n, 2);
            None
        }
        for &n in g.keys() {
            if colour.get(n).copied().unwrap_or(0) == 0 {
                if let Some(c) = visit(n, &g, &mut colour, &mut Vec::new()) {
                    found.push((parent.clone(), c));
                    break;
                }
            }
        }
    }
    found
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every crate root of the workspace (but the Python binding's) with the name its own files may
/// call it by (`extern crate self as …`).
const ROOTS: &[(&str, &str)] = &[
    ("crates/core/src/lib.rs", "cachesim_core"),
    ("crates/lab/src/lib.rs", "cachesim_lab"),
    ("src/lib.rs", "cachesim"),
    ("src/main.rs", "cachesim"),
];

fn explain(edges: &Edges, parent: &[String], cycle: &[String]) -> String {
    let mut s = format!(
        "cycle under `{}`: {}\n",
        if parent.is_empty() { "crate".into() } else { parent.join("::") },
        cycle.join(" -> ")
    );
    for pair in cycle.windows(2) {
        for r in &edges[&(parent.to_vec(), pair[0].clone(), pair[1].clone())] {
            s += &format!("    {r}\n");
        }
    }
    s
}

#[test]
fn the_module_graph_has_no_cycle() {
    let mut report = String::new();
    for (root, name) in ROOTS {
        let e = edges(&repo().join(root), name);
        for (parent, cycle) in cycles(&e) {
            report += &format!("{root}: {}", explain(&e, &parent, &cycle));
        }
    }
    assert!(report.is_empty(), "import cycles among sibling modules:\n{report}");
}

/// A package's `[dependencies]` (not dev- or build-dependencies), by name.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join(manifest)).unwrap();
    let mut out = BTreeSet::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]";
        } else if inside && !line.is_empty() && !line.starts_with('#') {
            if let Some((name, _)) = line.split_once('=') {
                out.insert(name.trim().to_string());
            }
        }
    }
    out
}

/// The crates' layers: core at the bottom, with no front-end dependency (a clap derive only
/// behind its optional `clap` feature); the lab over the core alone; the package over both.
#[test]
fn crates_point_down() {
    let core = dependencies("crates/core/Cargo.toml");
    let lab = dependencies("crates/lab/Cargo.toml");
    let root = dependencies("Cargo.toml");
    for front in ["cachesim", "cachesim-lab", "plotters", "indicatif", "argmin", "anyhow"] {
        assert!(!core.contains(front), "the core depends on {front}");
    }
    let core_manifest = std::fs::read_to_string(repo().join("crates/core/Cargo.toml")).unwrap();
    let clap_line = core_manifest.lines().find(|l| l.starts_with("clap") && l.contains("version")).unwrap_or("");
    assert!(clap_line.is_empty() || clap_line.contains("optional = true"), "the core's clap is not optional");
    assert!(lab.contains("cachesim-core") && !lab.contains("cachesim"), "the lab: {lab:?}");
    assert!(root.contains("cachesim-core") && root.contains("cachesim-lab"));
    // No core file names the lab or the command line.
    for f in files(&repo().join("crates/core/src"), &[".rs"]) {
        let code = code(&std::fs::read_to_string(&f).unwrap());
        for other in ["cachesim_lab::", "cachesim::"] {
            assert!(!code.contains(other), "{} names {other}", f.display());
        }
    }
}

/// crates/core-unit compiles the core's own source with its unit tests: the same source, the same
/// features and the same dependencies, and the core itself builds no unit tests of its own.
#[test]
fn the_core_unit_tests_build_the_core_itself() {
    let manifest =
        |p: &str| -> toml::Table { toml::from_str(&std::fs::read_to_string(repo().join(p)).unwrap()).unwrap() };
    let (core, unit) = (manifest("crates/core/Cargo.toml"), manifest("crates/core-unit/Cargo.toml"));
    for table in ["features", "dependencies", "dev-dependencies"] {
        assert_eq!(core[table], unit[table], "crates/core-unit's [{table}] differ from the core's");
    }
    assert_eq!(unit["lib"]["path"].as_str(), Some("../core/src/lib.rs"));
    assert_eq!(
        core["lib"].get("test").and_then(|t| t.as_bool()),
        Some(false),
        "the core would compile its unit tests again, optimised"
    );
    let root = manifest("Cargo.toml");
    let default_members = root["workspace"]["default-members"].as_array().unwrap();
    assert!(
        default_members.iter().any(|m| m.as_str() == Some("crates/core-unit")),
        "`cargo test` would skip the core's unit tests"
    );
}

/// One module style: a module with children is a folder with `mod.rs`, never `x.rs` beside `x/`.
#[test]
fn one_module_style() {
    let mut both = Vec::new();
    for dir in ["crates/core/src", "crates/lab/src", "src"] {
        for f in files(&repo().join(dir), &[".rs"]) {
            let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
            if !["mod", "lib", "main"].contains(&stem.as_str()) && f.with_extension("").is_dir() {
                both.push(f.strip_prefix(repo()).unwrap().display().to_string());
            }
        }
    }
    assert!(both.is_empty(), "files beside a folder of their children (make them x/mod.rs): {both:?}");
}

/// The checker itself: a hand-made circle is found, an ancestor reference is no edge, test items
/// and comments are not read.
#[test]
fn the_checker_finds_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let w = |p: &str, t: &str| {
        let f = dir.path().join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, t).unwrap();
    };
    w("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    w("a/mod.rs", "pub mod inner;\nuse crate::b::{self, X as _};\n");
    w("a/inner.rs", "use super::super::a::Y; // use crate::c;\n");
    w("b.rs", "fn f() { let _ = crate::a::inner::Z; }\n#[cfg(test)]\nmod tests { use crate::c::W; }\n");
    w("c.rs", "const S: &str = \"crate::a::Q\";\n");
    let e = edges(&dir.path().join("lib.rs"), "none");
    let keys: Vec<_> = e.keys().map(|(p, a, b)| (p.len(), a.as_str(), b.as_str())).collect();
    assert_eq!(keys, [(0, "a", "b"), (0, "b", "a")]);
    let c = cycles(&e);
    assert_eq!(c.len(), 1);
    assert!(explain(&e, &c[0].0, &c[0].1).contains("b.rs -> crate::a::inner::Z"));
}

/// Prints the crates and each crate's top-level module graph (with `--nocapture`): each module
/// and the siblings it uses.
#[test]
fn print_the_graphs() {
    for m in ["crates/core/Cargo.toml", "crates/lab/Cargo.toml", "Cargo.toml"] {
        let ours: Vec<String> = dependencies(m).into_iter().filter(|d| d.starts_with("cachesim")).collect();
        println!("{m} -> {}", ours.join(", "));
    }
    for (root, name) in ROOTS {
        let e = edges(&repo().join(root), name);
        let mut g: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (parent, a, b) in e.keys() {
            if parent.is_empty() {
                g.entry(a).or_default().insert(b);
            }
        }
        println!("{root}:");
        for (a, bs) in g {
            println!("  {a} -> {}", bs.into_iter().collect::<Vec<_>>().join(", "));
        }
    }
}
